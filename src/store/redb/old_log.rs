//! The write-ahead log that petstore versions before this one kept beside the redb file
//! (`<file>-wal`), read once and never written: a start on a file that still names a log
//! epoch (`META_LOG_EPOCH`) replays the log's records of that epoch into the file in one
//! durable commit, drops the epoch and removes the log. A log that is missing where the file
//! expects one stops the start, since the writes it held would be lost without a word; a
//! short one gives every record it holds whole. `petstore check` counts the records a file
//! still lacks.
//!
//! Records: a 32-byte header (magic, payload length, epoch, sequence number, a truncated
//! SHA-256) and the payload, the batch's changes to the tables. A record counts only if it is
//! whole, of the file's epoch and the next in sequence; the first that is not ends the log.

use std::path::{Path, PathBuf};

use redb::{Database, ReadableDatabase, ReadableTable};
use sha2::{Digest, Sha256};

use super::tables::{META, META_LOG_EPOCH, Tables};
use crate::store::model::StoreError;

const MAGIC: [u8; 4] = *b"PWAL";
/// Magic 4, payload length 4, epoch 8, sequence 8, checksum 8.
const HEADER: usize = 32;

/// The log file of the database at `db`.
pub(super) fn path_of(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push("-wal");
    PathBuf::from(name)
}

/// Replays, once, the old log the file at `path` still expects (none: nothing to do), in one
/// durable commit that also drops the file's log epoch; then removes the log. A missing log
/// is refused with what to do; one that holds no record of the file's epoch (a clean stop of
/// the old version, or another file's log) replays nothing.
pub(super) fn replay_once(db: &Database, path: &Path) -> Result<(), StoreError> {
    let epoch = log_epoch(&db.begin_read().map_err(StoreError::storage)?)?;
    if epoch == 0 {
        return Ok(());
    }
    let log = path_of(path);
    let Some(bytes) = read_beside(path)? else {
        return Err(StoreError::MissingLog(format!(
            "{file} was written by an earlier petstore that kept a write-ahead log beside it, \
             and {log} is missing: the writes it held since the file's last checkpoint would be \
             lost. Put the log back and start again; to start from the file alone, accepting \
             that loss, create an empty log first (touch {log})",
            file = path.display(),
            log = log.display(),
        )));
    };
    let (records, _) = scan(&bytes, epoch);
    let txn = super::tables::begin(db, true)?;
    {
        let mut tables = Tables::open(&txn)?;
        for record in &records {
            apply(&mut tables, record)?;
        }
        tables
            .meta
            .remove(META_LOG_EPOCH)
            .map_err(StoreError::storage)?;
    }
    // The log wrote pets alone: what version 5 keeps beside them is built again from them.
    txn.delete_table(super::tables::PETS_BY_CATEGORY)
        .map_err(StoreError::storage)?;
    super::open::index_categories_and_count(&txn)?;
    txn.commit().map_err(StoreError::storage)?;
    tracing::info!(
        batches = records.len(),
        log = %log.display(),
        "the write-ahead log of an earlier petstore was replayed into the file and is no longer needed"
    );
    if let Err(e) = std::fs::remove_file(&log) {
        // Harmless: the file names no epoch any more, so the log is never read again.
        tracing::warn!(error = %e, log = %log.display(), "removing the old write-ahead log failed");
    }
    Ok(())
}

/// The old log epoch `txn` sees the file in; 0 for a file that expects no log.
pub(super) fn log_epoch(txn: &redb::ReadTransaction) -> Result<u64, StoreError> {
    let meta = match txn.open_table(META) {
        Ok(meta) => meta,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(0),
        Err(e) => return Err(StoreError::storage(e)),
    };
    Ok(meta
        .get(META_LOG_EPOCH)
        .map_err(StoreError::storage)?
        .map_or(0, |v| v.value()))
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

#[cfg(test)]
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

const PUT_PET: u8 = 1;
const REMOVE_PET: u8 = 2;
const PUT_STATUS: u8 = 3;
const REMOVE_STATUS: u8 = 4;
const PUT_REVISION: u8 = 5;
const REMOVE_REVISION: u8 = 6;
const PUT_RECORD: u8 = 7;
const REMOVE_RECORD: u8 = 8;
const NEXT_ID: u8 = 9;

/// Makes the changes of one record's payload again. A payload that does not parse was written
/// by a writer this one does not know: the store refuses to start on it rather than guess.
fn apply(tables: &mut Tables, payload: &[u8]) -> Result<(), StoreError> {
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
            let next_id = u64::from_le_bytes(word(take(8)?));
            tables
                .meta
                .insert(super::tables::META_NEXT_ID, next_id)
                .map_err(storage)?;
            continue;
        }
        let id = i64::from_le_bytes(word(take(8)?));
        match op {
            PUT_PET => {
                let len = take(4)?;
                let len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize;
                let json = take(len)?;
                tables.pets.insert(id, json).map_err(storage)?;
            }
            REMOVE_PET => {
                tables.pets.remove(id).map_err(storage)?;
            }
            PUT_STATUS => {
                let code = take(1)?[0];
                let json = tables.pets.get(id).map_err(storage)?.ok_or_else(corrupt)?;
                let json = json.value().to_vec();
                tables
                    .by_status
                    .insert((code, id), json.as_slice())
                    .map_err(storage)?;
            }
            REMOVE_STATUS => {
                let code = take(1)?[0];
                tables.by_status.remove((code, id)).map_err(storage)?;
            }
            PUT_REVISION => {
                let revision = u64::from_le_bytes(word(take(8)?));
                tables.revisions.insert(id, revision).map_err(storage)?;
            }
            REMOVE_REVISION => {
                tables.revisions.remove(id).map_err(storage)?;
            }
            PUT_RECORD => {
                let expires_at = u64::from_le_bytes(word(take(8)?));
                let mut value = [0; 32];
                value.copy_from_slice(take(32)?);
                tables
                    .records
                    .insert((expires_at, id), value)
                    .map_err(storage)?;
            }
            REMOVE_RECORD => {
                let expires_at = u64::from_le_bytes(word(take(8)?));
                tables.records.remove((expires_at, id)).map_err(storage)?;
            }
            _ => return Err(corrupt()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log_of(records: &[(u64, u64, &[u8])]) -> Vec<u8> {
        let mut log = vec![0; 512 << 10];
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

    /// A file as an earlier petstore left it: current tables, expecting its log of `epoch`.
    fn file_expecting_a_log(path: &Path, epoch: u64) {
        let opened = super::super::open::open_database(
            path,
            1 << 20,
            false,
            super::super::open::Opening::Start,
        )
        .expect("creates");
        let txn = opened.db.begin_write().expect("write");
        txn.open_table(META)
            .expect("meta")
            .insert(META_LOG_EPOCH, epoch)
            .expect("insert");
        txn.commit().expect("commit");
        opened.db.close().expect("close");
    }

    /// A record's payload as the old writer made it: a pet put, then the id counter.
    fn created(id: i64, name: &str) -> Vec<u8> {
        let json = format!(r#"{{"id":{id},"name":"{name}","categoryId":1}}"#);
        let mut payload = vec![PUT_PET];
        payload.extend_from_slice(&id.to_le_bytes());
        payload.extend_from_slice(&(json.len() as u32).to_le_bytes());
        payload.extend_from_slice(json.as_bytes());
        payload.push(NEXT_ID);
        payload.extend_from_slice(&(id as u64 + 1).to_le_bytes());
        payload
    }

    fn open(path: &Path) -> Result<super::super::open::Opened, StoreError> {
        super::super::open::open_database(path, 1 << 20, false, super::super::open::Opening::Start)
    }

    fn names(opened: &super::super::open::Opened) -> Vec<String> {
        let txn = opened.db.begin_read().expect("read");
        let pets = txn.open_table(super::super::tables::PETS).expect("pets");
        pets.iter()
            .expect("iter")
            .map(|entry| {
                let (_, json) = entry.expect("entry");
                let pet: serde_json::Value = serde_json::from_slice(json.value()).expect("json");
                pet["name"].as_str().expect("name").to_owned()
            })
            .collect()
    }

    #[test]
    fn a_log_an_earlier_petstore_left_is_replayed_once_and_removed() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("pets.redb");
        file_expecting_a_log(&path, 7);
        let log = log_of(&[(7, 1, &created(1, "a")), (7, 2, &created(2, "b"))]);
        std::fs::write(path_of(&path), log).expect("log");
        let opened = open(&path).expect("opens");
        assert_eq!(
            (opened.pets, names(&opened)),
            (2, vec!["a".into(), "b".into()])
        );
        assert_eq!(
            log_epoch(&opened.db.begin_read().expect("read")).expect("epoch"),
            0
        );
        assert!(!path_of(&path).exists(), "the log is removed");
        let txn = opened.db.begin_read().expect("read");
        let meta = txn.open_table(META).expect("meta");
        let next = meta.get(super::super::tables::META_NEXT_ID).expect("get");
        assert_eq!(next.map(|v| v.value()), Some(3));
    }

    #[test]
    fn a_log_cut_short_keeps_every_whole_record() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("pets.redb");
        file_expecting_a_log(&path, 7);
        let first = created(1, "a");
        let mut log = log_of(&[
            (7, 1, &first),
            (7, 2, &created(2, "b")),
            (7, 3, &created(3, "c")),
        ]);
        // Cut inside the third record, with no zeros after it: the first two are whole.
        log.truncate(3 * HEADER + 2 * first.len() + 5);
        std::fs::write(path_of(&path), log).expect("log");
        let opened = open(&path).expect("opens");
        assert_eq!(names(&opened), ["a", "b"]);
    }

    #[test]
    fn a_missing_log_stops_the_start_and_says_what_to_do() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("pets.redb");
        file_expecting_a_log(&path, 7);
        let Err(StoreError::MissingLog(text)) = open(&path) else {
            panic!("refused");
        };
        assert!(
            text.contains("is missing") && text.contains("touch"),
            "{text}"
        );
        // An empty log is the operator's word that nothing is to be replayed.
        std::fs::write(path_of(&path), b"").expect("empty log");
        let opened = open(&path).expect("opens");
        assert_eq!(opened.pets, 0);
        assert_eq!(
            log_epoch(&opened.db.begin_read().expect("read")).expect("epoch"),
            0
        );
    }

    #[test]
    fn another_files_log_replays_nothing() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("pets.redb");
        file_expecting_a_log(&path, 7);
        std::fs::write(path_of(&path), log_of(&[(8, 1, &created(1, "a"))])).expect("log");
        let opened = open(&path).expect("opens");
        assert_eq!(opened.pets, 0);
    }
}
