//! The write-ahead log beside the redb file (`<file>-wal`): what makes a batch durable when the
//! file is the server's alone. The writer appends each batch's changes to the log with one
//! `fdatasync` and commits the batch to redb without durability; a durable redb commit (a
//! checkpoint) follows whenever the log is full, and at a clean stop. A start replays, in one
//! durable transaction, every record past the last checkpoint. Why: redb's durable commit
//! (two phases, the allocator state saved) cost 16-18 µs of writer CPU a create and 71 KB to
//! the disk a commit, the log 5.5-6.8 µs and 14 KB (`benches/commit`).
//!
//! Records: a 32-byte header (magic, payload length, epoch, sequence number, checksum) and
//! the payload, the batch's changes to the tables (`Journal`). A record counts only if it is
//! whole (its checksum holds), of the file's current epoch (`META_LOG_EPOCH`) and the next in
//! sequence; the first that is not ends the log, so a torn last write ends it too. Every
//! checkpoint starts a new epoch and the log again from its start, which makes the records
//! left behind it stale without erasing them. Invariants: a record is durable before redb
//! commits its batch and before any reader can see it; records of the file's epoch hold every
//! acknowledged change since the checkpoint, in commit order; the log holds no record of a
//! later epoch than the file.

use std::fs::{File, OpenOptions};
use std::hash::{BuildHasher, Hasher};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use redb::{ReadableTable, Table};
use sha2::{Digest, Sha256};

use super::StoreError;
use crate::pet::PetId;

/// The log's size, written with zeros when it is made. It bounds the replay at a start after
/// a crash (a full log holds about 6,000 creates of a 60-byte pet, each about 85 bytes of
/// record) and sets how often a checkpoint runs (about every 250 batches of 25 such creates).
pub(super) const LOG_BYTES: u64 = 512 << 10;

const MAGIC: [u8; 4] = *b"PWAL";
/// Magic 4, payload length 4, epoch 8, sequence 8, checksum 8.
const HEADER: usize = 32;

/// The open log: where the next record goes and what it is numbered.
#[derive(Debug)]
pub(super) struct Log {
    file: File,
    path: PathBuf,
    /// Where the next record is written.
    tail: u64,
    /// The epoch the file's last checkpoint started; every record carries it.
    epoch: u64,
    /// The sequence number of the next record; the first of an epoch is 1.
    next_seq: u64,
    /// The record being written, kept to reuse its buffer.
    record: Vec<u8>,
    /// A write or flush of the log failed: what it holds is unknown until it is read again.
    in_doubt: bool,
}

/// The log file of the database at `db`.
pub(super) fn path_of(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push("-wal");
    PathBuf::from(name)
}

/// A new epoch, unlike any before it: random, from the seed the standard library draws from
/// the OS for each hasher.
pub(super) fn new_epoch() -> u64 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(0);
    // 0 stands for "no log" in a file that never had one.
    hasher.finish().max(1)
}

impl Log {
    /// Opens the log of the database at `db`, making it (zero-filled to `LOG_BYTES`, durable
    /// with its directory entry) if it is missing or short. Returns the records of `epoch` it
    /// holds, to replay, and the log positioned after them.
    pub(super) fn open(db: &Path, epoch: u64) -> Result<(Log, Vec<Vec<u8>>), StoreError> {
        let path = path_of(db);
        let io = |e: std::io::Error| StoreError::Io(format!("{}: {e}", path.display()));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        if len < LOG_BYTES {
            // Overwriting blocks that hold zeros changes no metadata: an append's fdatasync
            // then writes the record and flushes, no block allocation with it. A page a write:
            // a larger write would make Linux cache the range as one large folio, and each
            // append would write the whole folio back (`file.rs` says the same of the file).
            static ZEROS: [u8; 4096] = [0; 4096];
            let mut at = len - len % ZEROS.len() as u64;
            while at < LOG_BYTES {
                file.write_all_at(&ZEROS, at).map_err(io)?;
                at += ZEROS.len() as u64;
            }
            file.sync_all().map_err(io)?;
            crate::durable::sync_parent(&path).map_err(io)?;
        }
        let mut bytes = vec![0; LOG_BYTES as usize];
        file.read_exact_at(&mut bytes, 0).map_err(io)?;
        let (records, tail) = scan(&bytes, epoch);
        let log = Log {
            file,
            path,
            tail,
            epoch,
            next_seq: records.len() as u64 + 1,
            record: Vec::new(),
            in_doubt: false,
        };
        Ok((log, records))
    }

    /// Whether a record of `journal` still fits behind the last.
    pub(super) fn fits(&self, journal: &Journal) -> bool {
        self.tail + (HEADER + journal.ops.len()) as u64 <= LOG_BYTES
    }

    /// Writes `journal` as the next record and makes it durable. After an error the log is in
    /// doubt (the OS may or may not have written the record): the database must be reopened,
    /// which reads the log again.
    pub(super) fn append(&mut self, journal: &Journal) -> Result<(), StoreError> {
        encode(&mut self.record, self.epoch, self.next_seq, &journal.ops);
        let written = self
            .file
            .write_all_at(&self.record, self.tail)
            .and_then(|()| self.file.sync_data());
        if let Err(e) = written {
            self.in_doubt = true;
            return Err(StoreError::Io(format!("{}: {e}", self.path.display())));
        }
        self.tail += self.record.len() as u64;
        self.next_seq += 1;
        Ok(())
    }

    pub(super) fn in_doubt(&self) -> bool {
        self.in_doubt
    }

    /// Starts the log again for `epoch`, which a durable commit has just made the file's: the
    /// records before are stale from now on.
    pub(super) fn restart(&mut self, epoch: u64) {
        self.epoch = epoch;
        self.tail = 0;
        self.next_seq = 1;
    }

    /// Whether any record was written since the last checkpoint.
    pub(super) fn holds_records(&self) -> bool {
        self.tail > 0
    }
}

/// The log beside the database at `db` as it is, read and never written (`petstore check`);
/// `None` when there is none.
pub(super) fn read_beside(db: &Path) -> Result<Option<Vec<u8>>, StoreError> {
    let path = path_of(db);
    match std::fs::read(&path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(StoreError::Io(format!("{}: {e}", path.display()))),
    }
}

/// How many records of `epoch` a log read by `read_beside` holds: batches a server replays
/// when it next starts on the file. None of epoch 0 (a file that never had a log).
pub(super) fn pending(log: &[u8], epoch: u64) -> usize {
    if epoch == 0 {
        return 0;
    }
    scan(log, epoch).0.len()
}

fn checksum(header: &[u8], payload: &[u8]) -> [u8; 8] {
    let mut digest = Sha256::new();
    digest.update(&header[..24]);
    digest.update(payload);
    let mut sum = [0; 8];
    sum.copy_from_slice(&digest.finalize()[..8]);
    sum
}

fn encode(record: &mut Vec<u8>, epoch: u64, seq: u64, payload: &[u8]) {
    record.clear();
    record.extend_from_slice(&MAGIC);
    // A journal never nears 4 GiB: a batch is at most `--max-write-batch` bodies of at most
    // 64 KiB; the length is checked again on the way back.
    record.extend_from_slice(
        &u32::try_from(payload.len())
            .unwrap_or(u32::MAX)
            .to_le_bytes(),
    );
    record.extend_from_slice(&epoch.to_le_bytes());
    record.extend_from_slice(&seq.to_le_bytes());
    let sum = checksum(record, payload);
    record.extend_from_slice(&sum);
    record.extend_from_slice(payload);
}

/// The payloads of the records of `epoch` from the start of `log`, numbered 1, 2, … without
/// a gap, up to the first that is not; and where that one starts.
fn scan(log: &[u8], epoch: u64) -> (Vec<Vec<u8>>, u64) {
    let mut records = Vec::new();
    let mut at = 0;
    let mut seq = 1u64;
    while let Some(header) = log.get(at..at + HEADER) {
        let field = |from: usize| {
            let mut bytes = [0; 8];
            bytes.copy_from_slice(&header[from..from + 8]);
            u64::from_le_bytes(bytes)
        };
        let len = u32::from_le_bytes([header[4], header[5], header[6], header[7]]) as usize;
        let Some(payload) = log.get(at + HEADER..at + HEADER + len) else {
            break;
        };
        if header[..4] != MAGIC
            || field(8) != epoch
            || field(16) != seq
            || header[24..32] != checksum(header, payload)
        {
            break;
        }
        records.push(payload.to_vec());
        at += HEADER + len;
        seq += 1;
    }
    (records, at as u64)
}

/// One batch's changes to the tables, in the order the writer made them: what a record holds
/// and a replay makes again. A status entry carries no JSON: it is always the pet's, written
/// just before it in the same batch.
#[derive(Debug, Default)]
pub(super) struct Journal {
    ops: Vec<u8>,
}

const PUT_PET: u8 = 1;
const REMOVE_PET: u8 = 2;
const PUT_STATUS: u8 = 3;
const REMOVE_STATUS: u8 = 4;
const PUT_REVISION: u8 = 5;
const REMOVE_REVISION: u8 = 6;
const PUT_RECORD: u8 = 7;
const REMOVE_RECORD: u8 = 8;
const NEXT_ID: u8 = 9;

impl Journal {
    pub(super) fn clear(&mut self) {
        self.ops.clear();
    }

    fn op(&mut self, op: u8, id: i64) {
        self.ops.push(op);
        self.ops.extend_from_slice(&id.to_le_bytes());
    }

    pub(super) fn put_pet(&mut self, id: PetId, json: &[u8]) {
        self.op(PUT_PET, id);
        // A pet's JSON is bounded by the request body limit, far below 4 GiB.
        let len = u32::try_from(json.len()).unwrap_or(u32::MAX);
        self.ops.extend_from_slice(&len.to_le_bytes());
        self.ops.extend_from_slice(json);
    }

    pub(super) fn remove_pet(&mut self, id: PetId) {
        self.op(REMOVE_PET, id);
    }

    pub(super) fn put_status(&mut self, (code, id): (u8, PetId)) {
        self.op(PUT_STATUS, id);
        self.ops.push(code);
    }

    pub(super) fn remove_status(&mut self, (code, id): (u8, PetId)) {
        self.op(REMOVE_STATUS, id);
        self.ops.push(code);
    }

    pub(super) fn put_revision(&mut self, id: PetId, revision: u64) {
        self.op(PUT_REVISION, id);
        self.ops.extend_from_slice(&revision.to_le_bytes());
    }

    pub(super) fn remove_revision(&mut self, id: PetId) {
        self.op(REMOVE_REVISION, id);
    }

    pub(super) fn put_record(&mut self, (expires_at, id): (u64, PetId), value: &[u8; 32]) {
        self.op(PUT_RECORD, id);
        self.ops.extend_from_slice(&expires_at.to_le_bytes());
        self.ops.extend_from_slice(value);
    }

    pub(super) fn remove_record(&mut self, (expires_at, id): (u64, PetId)) {
        self.op(REMOVE_RECORD, id);
        self.ops.extend_from_slice(&expires_at.to_le_bytes());
    }

    pub(super) fn next_id(&mut self, next: u64) {
        self.ops.push(NEXT_ID);
        self.ops.extend_from_slice(&next.to_le_bytes());
    }
}

/// The tables a replay writes, in its one transaction.
pub(super) struct ReplayTables<'txn> {
    pub(super) pets: Table<'txn, i64, &'static [u8]>,
    pub(super) by_status: Table<'txn, (u8, i64), &'static [u8]>,
    pub(super) revisions: Table<'txn, i64, u64>,
    pub(super) records: Table<'txn, (u64, i64), [u8; 32]>,
    /// The last `next_id` the records set, for the caller to write to `META`.
    pub(super) next_id: Option<u64>,
}

impl ReplayTables<'_> {
    /// Makes the changes of one record's payload again. A payload that does not parse was
    /// written by a writer this one does not know: the store refuses to start on it rather
    /// than guess.
    pub(super) fn apply(&mut self, payload: &[u8]) -> Result<(), StoreError> {
        let corrupt = || StoreError::Corrupt("a write-ahead log record does not parse".into());
        let mut rest = payload;
        let mut take = |n: usize| -> Result<&[u8], StoreError> {
            if rest.len() < n {
                return Err(corrupt());
            }
            let (head, tail) = rest.split_at(n);
            rest = tail;
            Ok(head)
        };
        let storage = StoreError::storage;
        loop {
            let op = match take(1) {
                Ok(op) => op[0],
                Err(_) => return Ok(()),
            };
            let word = |bytes: &[u8]| {
                let mut word = [0; 8];
                word.copy_from_slice(bytes);
                word
            };
            if op == NEXT_ID {
                self.next_id = Some(u64::from_le_bytes(word(take(8)?)));
                continue;
            }
            let id = i64::from_le_bytes(word(take(8)?));
            match op {
                PUT_PET => {
                    let len = take(4)?;
                    let len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize;
                    let json = take(len)?;
                    self.pets.insert(id, json).map_err(storage)?;
                }
                REMOVE_PET => {
                    self.pets.remove(id).map_err(storage)?;
                }
                PUT_STATUS => {
                    let code = take(1)?[0];
                    let json = self.pets.get(id).map_err(storage)?.ok_or_else(corrupt)?;
                    let json = json.value().to_vec();
                    self.by_status
                        .insert((code, id), json.as_slice())
                        .map_err(storage)?;
                }
                REMOVE_STATUS => {
                    let code = take(1)?[0];
                    self.by_status.remove((code, id)).map_err(storage)?;
                }
                PUT_REVISION => {
                    let revision = u64::from_le_bytes(word(take(8)?));
                    self.revisions.insert(id, revision).map_err(storage)?;
                }
                REMOVE_REVISION => {
                    self.revisions.remove(id).map_err(storage)?;
                }
                PUT_RECORD => {
                    let expires_at = u64::from_le_bytes(word(take(8)?));
                    let mut value = [0; 32];
                    value.copy_from_slice(take(32)?);
                    self.records
                        .insert((expires_at, id), value)
                        .map_err(storage)?;
                }
                REMOVE_RECORD => {
                    let expires_at = u64::from_le_bytes(word(take(8)?));
                    self.records.remove((expires_at, id)).map_err(storage)?;
                }
                _ => return Err(corrupt()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log_of(records: &[(u64, u64, &[u8])]) -> Vec<u8> {
        let mut log = vec![0; LOG_BYTES as usize];
        let mut at = 0;
        let mut record = Vec::new();
        for (epoch, seq, payload) in records {
            encode(&mut record, *epoch, *seq, payload);
            log[at..at + record.len()].copy_from_slice(&record);
            at += record.len();
        }
        log
    }

    #[test]
    fn the_records_of_the_epoch_in_sequence_are_read_back() {
        let log = log_of(&[(7, 1, b"one"), (7, 2, b""), (7, 3, b"three")]);
        let (records, end) = scan(&log, 7);
        assert_eq!(records, [b"one".to_vec(), vec![], b"three".to_vec()]);
        assert_eq!(end, (3 * HEADER + 8) as u64);
    }

    #[test]
    fn another_epoch_a_gap_or_a_torn_record_ends_the_log() {
        let log = log_of(&[(7, 1, b"one"), (6, 2, b"old")]);
        assert_eq!(
            scan(&log, 7).0,
            [b"one".to_vec()],
            "an older epoch's record"
        );
        assert!(scan(&log, 8).0.is_empty(), "no record of this epoch");
        let log = log_of(&[(7, 1, b"one"), (7, 3, b"three")]);
        assert_eq!(scan(&log, 7).0, [b"one".to_vec()], "a gap in the sequence");

        let mut log = log_of(&[(7, 1, b"one"), (7, 2, b"two")]);
        let second = HEADER + 3;
        log[second + HEADER + 1] ^= 1;
        assert_eq!(scan(&log, 7).0, [b"one".to_vec()], "a torn payload");
        let mut log = log_of(&[(7, 1, b"one"), (7, 2, b"two")]);
        log[second + 4] = 0xff;
        assert_eq!(scan(&log, 7).0, [b"one".to_vec()], "a torn length");
    }

    #[test]
    fn a_record_at_the_very_end_of_the_log_is_read_and_one_past_it_is_not() {
        let mut log = log_of(&[(7, 1, b"one")]);
        let mut record = Vec::new();
        let payload = vec![9; 64];
        encode(&mut record, 7, 2, &payload);
        let end = log.len();
        log[end - record.len()..].copy_from_slice(&record);
        // Not next to the first: never read.
        assert_eq!(scan(&log, 7).0.len(), 1);
        log.truncate(end - 1);
        assert_eq!(scan(&log, 7).0.len(), 1);
    }

    #[test]
    fn a_check_counts_the_records_of_the_files_epoch_and_none_without_one() {
        let log = log_of(&[(7, 1, b"one"), (7, 2, b"two")]);
        assert_eq!(pending(&log, 7), 2);
        assert_eq!(pending(&log, 8), 0);
        assert_eq!(pending(&log_of(&[(0, 1, b"zero")]), 0), 0);
    }

    #[test]
    fn epochs_differ() {
        assert_ne!(new_epoch(), new_epoch());
        assert_ne!(new_epoch(), 0);
    }
}
