//! What a group commit costs the writer thread, three ways, measured in one run:
//! - the server's (`src/store/redb/writer.rs`, `log.rs`): the batch's record (each table
//!   write's table, key and value, with a CRC-32) appended to a zero-filled log segment with
//!   one `fdatasync`, then a redb commit without a sync, and a durable redb commit (two
//!   phases, quick-repair) every `CHECKPOINT_BYTES` of log, as the checkpoints thread makes;
//! - redb's durable two-phase commit with quick-repair for every batch: the server's before
//!   the log, and still its commit with `--shared-reads`;
//! - redb's plain one-phase `Durability::Immediate` (its default, checksums instead of a
//!   second sync), which the server does not use: after a sync the disk refused, the page
//!   cache can hold a header whose checksums hold over pages the disk never got.
//!
//! Same tables as the server, on redb's own file backend (without the server's zero-filled
//! growth, `src/store/redb/file.rs`); the batch of the server at 64 clients (25 creates), or
//! `BENCH_COMMIT_BATCH=1` for one client's; alternating rounds, CPU from
//! `getrusage(RUSAGE_THREAD)`, bytes from /proc/self/io, syncs counted as each commit makes
//! them (two for a two-phase commit, one for one phase or an append).
//!
//! `taskset -c 1 cargo bench --bench commit` (about a minute).

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Instant;

use redb::{Builder, ConcurrencyMode, Database, Durability, TableDefinition};

const PETS: TableDefinition<i64, &[u8]> = TableDefinition::new("pets");
const PETS_BY_STATUS: TableDefinition<(u8, i64), &[u8]> = TableDefinition::new("pets_by_status");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const EVENTS: TableDefinition<u64, &[u8]> = TableDefinition::new("events");
/// An event as the server keeps it: type code, time, pet id and revision (25 bytes), then the
/// pet's JSON.
const EVENT_EXTRA: usize = 25;

/// The server's mean batch at 64 clients (benches/load, create-64).
const BATCH: i64 = 25;
const COMMITS: i64 = 2_000;
const ROUNDS: usize = 3;
/// The log appended between two checkpoints (`src/store/redb/wal.rs`).
const CHECKPOINT_BYTES: u64 = 2 << 20;
const LOG_BYTES: u64 = 64 << 20;
/// A created pet's JSON as the server stores it, about its size.
const PET: &[u8] = br#"{"id":1,"name":"Rex","category":{"id":3,"name":"Dogs"},"photoUrls":[],"tags":[{"id":1,"name":"a"}],"status":"available"}"#;

#[derive(Clone, Copy, PartialEq)]
enum Commit {
    /// The server's: the batch's record appended to the log with one `fdatasync`, a redb
    /// commit without a sync, a durable checkpoint every `CHECKPOINT_BYTES` of log.
    Log,
    /// Every batch a durable, two-phase, quick-repair commit (`--shared-reads`).
    QuickRepair,
    /// redb's default durable commit: one phase, checksums, no allocator state saved.
    OnePhase,
}

impl Commit {
    const ALL: [Commit; 3] = [Commit::Log, Commit::QuickRepair, Commit::OnePhase];

    fn name(self) -> &'static str {
        match self {
            Commit::Log => "the server's: log append + fdatasync, checkpoints",
            Commit::QuickRepair => "redb two-phase quick-repair (--shared-reads)",
            Commit::OnePhase => "redb one-phase Durability::Immediate",
        }
    }
}

/// User and kernel CPU seconds of the calling thread.
fn thread_cpu() -> (f64, f64) {
    // SAFETY: getrusage writes the struct it is given and nothing else.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_THREAD, &mut usage);
        usage
    };
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (seconds(usage.ru_utime), seconds(usage.ru_stime))
}

/// Bytes this process has sent to the disk (`write_bytes` of /proc/self/io).
fn written() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .ok()
        .and_then(|io| {
            io.lines()
                .find_map(|line| line.strip_prefix("write_bytes:"))
                .and_then(|rest| rest.trim().parse().ok())
        })
        .unwrap_or(0)
}

fn open(dir: &Path, path: Commit) -> (Database, File) {
    let mut builder = Builder::new();
    builder.set_cache_size(6 << 20);
    // The server's default: the file is its alone.
    let _ = path;
    builder.set_concurrency_mode(ConcurrencyMode::ExclusiveWriter);
    let db = builder.create(dir.join("pets.redb")).expect("a database");
    let log = OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(dir.join("pets.log"))
        .expect("a log file");
    // Written once and synced, so appends land in allocated blocks and sync no metadata; a
    // page a write, or the page cache keeps large folios and each small append then writes
    // back a whole folio (src/store/redb/file.rs).
    let zeros = [0u8; 4096];
    for page in 0..LOG_BYTES / 4096 {
        log.write_all_at(&zeros, page * 4096).expect("log zeros");
    }
    log.sync_all().expect("log sync");
    (db, log)
}

/// Notes a table write in the batch's record as the server does (`src/store/redb/logged.rs`):
/// tag, the table's name, the key and the value, each with its length.
fn note(record: &mut Vec<u8>, table: &str, key: &[u8], value: &[u8]) {
    record.push(1);
    record.push(table.len() as u8);
    record.extend_from_slice(table.as_bytes());
    record.extend_from_slice(&(key.len() as u32).to_le_bytes());
    record.extend_from_slice(key);
    record.extend_from_slice(&(value.len() as u32).to_le_bytes());
    record.extend_from_slice(value);
}

/// What one round measured.
struct Round {
    /// Writer CPU a create, user and kernel, in µs.
    user: f64,
    kernel: f64,
    /// Wall time a commit, in µs.
    wall: f64,
    /// Bytes written to the disk a create (the log's prefill excluded).
    bytes: f64,
    /// `fdatasync`s a create.
    syncs: f64,
}

fn round(path: Commit, batch: i64) -> Round {
    let dir = tempfile::tempdir().expect("a temp dir");
    let (db, log) = open(dir.path(), path);
    let mut record = Vec::with_capacity(8 << 10);
    let (mut tail, mut since, mut id, mut syncs) = (0u64, 0u64, 0i64, 0u64);
    let (user0, kernel0) = thread_cpu();
    let written0 = written();
    let began = Instant::now();
    let mut event = Vec::with_capacity(PET.len() + EVENT_EXTRA);
    event.resize(EVENT_EXTRA, b'e');
    event.extend_from_slice(PET);
    for _ in 1..=COMMITS {
        let mut txn = db.begin_write().expect("begin");
        match path {
            Commit::QuickRepair => {
                txn.set_two_phase_commit(true);
                txn.set_quick_repair(true);
            }
            Commit::OnePhase => {
                txn.set_two_phase_commit(false);
                txn.set_quick_repair(false);
            }
            Commit::Log => txn
                .set_durability(Durability::None)
                .expect("non-durable in ExclusiveWriter"),
        }
        record.clear();
        {
            let mut pets = txn.open_table(PETS).expect("pets");
            let mut by_status = txn.open_table(PETS_BY_STATUS).expect("by status");
            let mut meta = txn.open_table(META).expect("meta");
            let mut events = txn.open_table(EVENTS).expect("events");
            for _ in 0..batch {
                id += 1;
                pets.insert(id, PET).expect("insert");
                by_status.insert((0, id), PET).expect("insert");
                events.insert(id as u64, event.as_slice()).expect("event");
                if path == Commit::Log {
                    note(&mut record, "pets", &id.to_le_bytes(), PET);
                    let mut key = vec![0u8];
                    key.extend_from_slice(&id.to_be_bytes());
                    note(&mut record, "pets_by_status", &key, PET);
                    note(&mut record, "events", &(id as u64).to_le_bytes(), &event);
                }
            }
            meta.insert("next_id", id as u64 + 1).expect("meta");
            meta.insert("event_seq", id as u64).expect("meta");
            if path == Commit::Log {
                note(
                    &mut record,
                    "meta",
                    b"next_id",
                    &(id as u64 + 1).to_le_bytes(),
                );
                note(
                    &mut record,
                    "meta",
                    b"event_seq",
                    &(id as u64).to_le_bytes(),
                );
            }
        }
        match path {
            Commit::Log => {
                // The record's head (kind, length, batch, CRC-32), padded to 8 bytes.
                let mut head = [0u8; 24];
                head[4..8].copy_from_slice(&(record.len() as u32).to_le_bytes());
                let sum = crc32fast::hash(&record);
                head[16..20].copy_from_slice(&sum.to_le_bytes());
                let length = (24 + record.len()).div_ceil(8) * 8;
                record.splice(0..0, head);
                record.resize(length, 0);
                if tail + record.len() as u64 > LOG_BYTES {
                    tail = 0;
                }
                log.write_all_at(&record, tail).expect("append");
                tail += record.len() as u64;
                since += record.len() as u64;
                log.sync_data().expect("log fdatasync");
                syncs += 1;
                txn.commit().expect("commit");
                if since >= CHECKPOINT_BYTES {
                    let mut txn = db.begin_write().expect("begin");
                    txn.set_two_phase_commit(true);
                    txn.set_quick_repair(true);
                    txn.commit().expect("checkpoint");
                    syncs += 2;
                    since = 0;
                }
            }
            Commit::QuickRepair => {
                txn.commit().expect("commit");
                syncs += 2;
            }
            Commit::OnePhase => {
                txn.commit().expect("commit");
                syncs += 1;
            }
        }
    }
    let wall = began.elapsed().as_secs_f64();
    let (user1, kernel1) = thread_cpu();
    let creates = (COMMITS * batch) as f64;
    Round {
        user: (user1 - user0) / creates * 1e6,
        kernel: (kernel1 - kernel0) / creates * 1e6,
        wall: wall / COMMITS as f64 * 1e6,
        bytes: written().saturating_sub(written0) as f64 / creates,
        syncs: syncs as f64 / creates,
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    let batch: i64 = std::env::var("BENCH_COMMIT_BATCH")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(BATCH);
    println!(
        "writer thread, {COMMITS} commits of {batch} creates a round, {ROUNDS} alternating rounds"
    );
    let mut cpu = [const { Vec::new() }; Commit::ALL.len()];
    let mut bytes = [const { Vec::new() }; Commit::ALL.len()];
    let mut syncs = [const { Vec::new() }; Commit::ALL.len()];
    // BENCH_COMMIT_ONLY=N runs only the N-th commit of the list (from 0), for a profiler.
    let only: Option<usize> = std::env::var("BENCH_COMMIT_ONLY")
        .ok()
        .and_then(|n| n.parse().ok());
    for _ in 0..ROUNDS {
        for (slot, path) in Commit::ALL.into_iter().enumerate() {
            if only.is_some_and(|only| only != slot) {
                continue;
            }
            let round = round(path, batch);
            println!(
                "  {:<52} CPU a create {:5.2} us (user {:.2} + kernel {:.2}), {:4.0} us a commit, {:6.0} bytes and {:.3} syncs to the disk a create",
                path.name(),
                round.user + round.kernel,
                round.user,
                round.kernel,
                round.wall,
                round.bytes,
                round.syncs,
            );
            cpu[slot].push(round.user + round.kernel);
            bytes[slot].push(round.bytes);
            syncs[slot].push(round.syncs);
        }
    }
    if only.is_some() {
        return;
    }
    let cpu = cpu.map(median);
    let bytes = bytes.map(median);
    let syncs = syncs.map(median);
    println!("medians, and the ratio to the server's commit:");
    for (slot, path) in Commit::ALL.into_iter().enumerate() {
        println!(
            "  {:<52} CPU a create {:5.2} us ({:.2}), {:6.0} bytes a create ({:.2}), {:.3} syncs a create",
            path.name(),
            cpu[slot],
            cpu[slot] / cpu[0],
            bytes[slot],
            bytes[slot] / bytes[0],
            syncs[slot],
        );
    }
}
