//! What a group commit costs the writer thread, three ways, measured in one run:
//! - redb's durable two-phase commit with quick-repair, on a file this process has alone:
//!   what `src/store/redb/writer.rs` makes of every batch;
//! - redb's plain one-phase `Durability::Immediate` (its default, checksums instead of a
//!   second sync), which the server does not use: after a sync the disk refused, the page
//!   cache can hold a header whose checksums hold over pages the disk never got;
//! - the write-ahead log of an earlier version, prototyped here (redb commits that are not
//!   durable, each batch appended to a preallocated log with one `fdatasync`, a durable redb
//!   commit every `CHECKPOINT_EVERY` batches), which the server no longer has: its error paths
//!   could not keep the promise (docs/storage.md).
//!
//! Same tables and batch size as the server at 64 clients, on redb's own file backend
//! (without the server's zero-filled growth, `src/store/redb/file.rs`); alternating rounds,
//! CPU from `getrusage(RUSAGE_THREAD)`, bytes from /proc/self/io.
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
const CHECKPOINT_EVERY: i64 = 1_000;
const LOG_BYTES: u64 = 64 << 20;
/// A created pet's JSON as the server stores it, about its size.
const PET: &[u8] = br#"{"id":1,"name":"Rex","category":{"id":3,"name":"Dogs"},"photoUrls":[],"tags":[{"id":1,"name":"a"}],"status":"available"}"#;

#[derive(Clone, Copy, PartialEq)]
enum Commit {
    /// The server's: every batch a durable, two-phase, quick-repair commit.
    QuickRepair,
    /// redb's default durable commit: one phase, checksums, no allocator state saved.
    OnePhase,
    /// The old log: the batch's log record made durable, then a non-durable redb commit.
    Log,
    /// The server's commit with the event feed's outbox: an entry a create in `events`.
    Events,
    /// The same outbox, one entry a batch holding its events one after another.
    EventsBatched,
}

impl Commit {
    const ALL: [Commit; 5] = [
        Commit::QuickRepair,
        Commit::OnePhase,
        Commit::Log,
        Commit::Events,
        Commit::EventsBatched,
    ];

    fn name(self) -> &'static str {
        match self {
            Commit::QuickRepair => "redb two-phase quick-repair commit (the server's)",
            Commit::OnePhase => "redb one-phase Durability::Immediate",
            Commit::Log => "log append + fdatasync, non-durable redb commit",
            Commit::Events => "the server's, with an event entry a create",
            Commit::EventsBatched => "the server's, with one event entry a batch",
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

/// Writer CPU a create (user, kernel) in µs, wall time a commit in µs and bytes written to
/// the disk a commit (the prefill excluded).
fn round(path: Commit) -> (f64, f64, f64, f64) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let (db, log) = open(dir.path(), path);
    let mut record = Vec::with_capacity(8 << 10);
    let (mut tail, mut id) = (0u64, 0i64);
    let (user0, kernel0) = thread_cpu();
    let written0 = written();
    let began = Instant::now();
    for commit in 1..=COMMITS {
        let mut txn = db.begin_write().expect("begin");
        match path {
            Commit::QuickRepair | Commit::Events | Commit::EventsBatched => {
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
        let mut event = Vec::with_capacity(PET.len() + EVENT_EXTRA);
        event.resize(EVENT_EXTRA, b'e');
        event.extend_from_slice(PET);
        let mut batched = Vec::with_capacity(event.len() * BATCH as usize);
        {
            let mut pets = txn.open_table(PETS).expect("pets");
            let mut by_status = txn.open_table(PETS_BY_STATUS).expect("by status");
            let mut meta = txn.open_table(META).expect("meta");
            let mut events = txn.open_table(EVENTS).expect("events");
            for _ in 0..BATCH {
                id += 1;
                pets.insert(id, PET).expect("insert");
                by_status.insert((0, id), PET).expect("insert");
                record.extend_from_slice(&id.to_le_bytes());
                record.extend_from_slice(PET);
                match path {
                    Commit::Events => {
                        events.insert(id as u64, event.as_slice()).expect("event");
                    }
                    Commit::EventsBatched => batched.extend_from_slice(&event),
                    _ => {}
                }
            }
            meta.insert("next_id", id as u64 + 1).expect("meta");
            if path == Commit::EventsBatched {
                events
                    .insert(id as u64, batched.as_slice())
                    .expect("events");
            }
            if matches!(path, Commit::Events | Commit::EventsBatched) {
                meta.insert("event_seq", id as u64).expect("meta");
            }
        }
        if path == Commit::Log {
            if tail + record.len() as u64 > LOG_BYTES {
                tail = 0;
            }
            log.write_all_at(&record, tail).expect("append");
            tail += record.len() as u64;
            log.sync_data().expect("log fdatasync");
        }
        txn.commit().expect("commit");
        if path == Commit::Log && commit % CHECKPOINT_EVERY == 0 {
            let mut txn = db.begin_write().expect("begin");
            txn.set_quick_repair(true);
            txn.commit().expect("checkpoint");
            tail = 0;
        }
    }
    let wall = began.elapsed().as_secs_f64();
    let (user1, kernel1) = thread_cpu();
    let bytes = written().saturating_sub(written0) as f64 / COMMITS as f64;
    let creates = (COMMITS * BATCH) as f64;
    (
        (user1 - user0) / creates * 1e6,
        (kernel1 - kernel0) / creates * 1e6,
        wall / COMMITS as f64 * 1e6,
        bytes,
    )
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    println!(
        "writer thread, {COMMITS} commits of {BATCH} creates a round, {ROUNDS} alternating rounds"
    );
    let mut cpu = [const { Vec::new() }; Commit::ALL.len()];
    let mut bytes = [const { Vec::new() }; Commit::ALL.len()];
    // BENCH_COMMIT_ONLY=N runs only the N-th commit of the list (from 0), for a profiler.
    let only: Option<usize> = std::env::var("BENCH_COMMIT_ONLY")
        .ok()
        .and_then(|n| n.parse().ok());
    for _ in 0..ROUNDS {
        for (slot, path) in Commit::ALL.into_iter().enumerate() {
            if only.is_some_and(|only| only != slot) {
                continue;
            }
            let (user, kernel, wall, written) = round(path);
            println!(
                "  {:<50} CPU a create {:5.2} us (user {user:.2} + kernel {kernel:.2}), {wall:4.0} us and {:5.1} KB to disk a commit",
                path.name(),
                user + kernel,
                written / 1000.0
            );
            cpu[slot].push(user + kernel);
            bytes[slot].push(written);
        }
    }
    if only.is_some() {
        return;
    }
    let cpu = cpu.map(median);
    let bytes = bytes.map(median);
    println!("medians, and the ratio to the server's commit:");
    for (slot, path) in Commit::ALL.into_iter().enumerate() {
        println!(
            "  {:<50} CPU a create {:5.2} us ({:.2}), {:5.1} KB a commit ({:.2})",
            path.name(),
            cpu[slot],
            cpu[slot] / cpu[0],
            bytes[slot] / 1000.0,
            bytes[slot] / bytes[0]
        );
    }
}
