//! The write-ahead log's life beside the open file: which log the file names (`wal_id` in
//! `meta`; none after a clean stop, when the file holds every batch itself), its replay into
//! the file at every open, the writer's end of it (`Appender`, `redb/log.rs`), and the
//! checkpoints: a durable redb commit every `CHECKPOINT_EVERY` or `CHECKPOINT_BYTES` of log,
//! on a thread of its own, after which the segments it covers are removed; the same thread
//! prepares the next segment ahead of the writer. Invariants: the file names a log only once
//! that log has a segment naming where it begins; no segment is removed before a durable
//! checkpoint holds every batch in it; a file that names a log is never served without it.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use redb::{Database, Durability, ReadableDatabase, WriteTransaction};

use super::handle::{Shared, caught};
use super::log::{self, Appender, Recovered};
use super::logged::Replay;
use super::tables::{META, META_BATCH, META_WAL_ID, begin, meta_value};
use crate::store::events::new_feed_id;
use crate::store::model::StoreError;

/// The longest a batch stays in the log alone before a checkpoint writes it into the file.
const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);
/// The log appended since the last checkpoint that wakes the next one early: the replay after
/// a crash reads at most about this much (a start stays fast), and redb's buffer of pages
/// committed but not yet written stays about this size.
const CHECKPOINT_BYTES: u64 = 2 << 20;

/// The log of a file this process has alone (`Shared::wal`).
pub(super) struct Wal {
    pub(super) dir: PathBuf,
    /// The writer's end; `None` while the file names no log: the checkpoints thread sets one
    /// up at start (`set_up`), or the first batch if it comes first.
    appender: Mutex<Option<Appender>>,
    /// The last batch a durable checkpoint holds.
    checkpointed: AtomicU64,
    /// Bytes appended since that checkpoint.
    appended: AtomicU64,
    stopping: Mutex<bool>,
    wake: Condvar,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// Whether a failure of the background work was logged: a full disk logs once.
    warned: AtomicBool,
}

impl Wal {
    /// The log beside the file at `path`, as its open found it (`found`: the log's id and what
    /// its replay found; `None`: the file names none).
    pub(super) fn new(path: &Path, found: Option<(u64, Recovered)>) -> Wal {
        let wal = Wal {
            dir: log::dir_of(path),
            appender: Mutex::new(None),
            checkpointed: AtomicU64::new(0),
            appended: AtomicU64::new(0),
            stopping: Mutex::new(false),
            wake: Condvar::new(),
            thread: Mutex::new(None),
            warned: AtomicBool::new(false),
        };
        wal.resume(found);
        wal
    }

    pub(super) fn appender(&self) -> MutexGuard<'_, Option<Appender>> {
        self.appender.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Goes on from what an open of the file found: in a new segment from the batch after the
    /// last the log holds, begun at once, so that whatever an old segment holds after it (a
    /// batch whose sync failed) is superseded before anything more is answered. Where the
    /// segment cannot be begun now (a full disk), the next append begins it.
    pub(super) fn resume(&self, found: Option<(u64, Recovered)>) {
        let mut appender = self.appender();
        *appender = found.map(|(id, recovered)| {
            self.checkpointed.store(recovered.last, Ordering::Release);
            let mut next = Appender::new(self.dir.clone(), id, &recovered);
            if let Err(e) = next.begin(recovered.last + 1) {
                tracing::warn!(error = %e, dir = %self.dir.display(), "beginning a new log segment failed; the next write tries again");
            }
            next
        });
        self.appended.store(0, Ordering::Relaxed);
    }

    /// Counts `bytes` appended, and wakes the checkpoints once they make `CHECKPOINT_BYTES`.
    pub(super) fn count(&self, bytes: usize) {
        let total = self.appended.fetch_add(bytes as u64, Ordering::Relaxed) + bytes as u64;
        if total >= CHECKPOINT_BYTES {
            self.wake.notify_one();
        }
    }

    /// Stops the checkpoints thread and waits for it.
    pub(super) fn stop(&self) {
        *self.stopping.lock().unwrap_or_else(PoisonError::into_inner) = true;
        self.wake.notify_all();
        let thread = self
            .thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(thread) = thread {
            let _ = thread.join();
        }
    }

    fn warn_once(&self, what: &str, e: &dyn std::fmt::Display) {
        if !self.warned.swap(true, Ordering::Relaxed) {
            tracing::warn!(error = %e, "{what} failed; retrying every second");
        }
    }
}

/// A log for a file that names none, whose last batch is `batch`: a new id, segment 1 begun at
/// the next batch and synced, and only then the id written into the file by a durable commit.
pub(super) fn set_up(db: &Database, dir: &Path, batch: u64) -> Result<Appender, StoreError> {
    let io = |e: std::io::Error| StoreError::Io(format!("{}: {e}", dir.display()));
    // What is there is no log of this file's: it names none.
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(e)),
        _ => {}
    }
    // The feed's random, never-zero 64 bits serve a log's identity as well.
    let id = new_feed_id();
    let fresh = Recovered {
        next_number: 1,
        ..Recovered::default()
    };
    let mut appender = Appender::new(dir.to_owned(), id, &fresh);
    // No room for the log's first segment is no failure of the file: the write waits for room.
    appender
        .begin(batch + 1)
        .map_err(|e| StoreError::NoRoom(format!("{}: {e}", dir.display())))?;
    let txn = begin(db, true)?;
    txn.open_table(META)
        .map_err(StoreError::storage)?
        .insert(META_WAL_ID, id)
        .map_err(StoreError::storage)?;
    txn.commit().map_err(StoreError::storage)?;
    Ok(appender)
}

/// A durable commit of everything committed so far; returns the last batch it holds. With
/// `retire`, the file also stops naming its log: it holds every batch itself.
fn checkpoint_commit(db: &Database, quick_repair: bool, retire: bool) -> Result<u64, StoreError> {
    let txn = begin(db, quick_repair)?;
    let held = {
        let mut meta = txn.open_table(META).map_err(StoreError::storage)?;
        let held = meta_value(&meta, META_BATCH)?;
        if retire {
            meta.remove(META_WAL_ID).map_err(StoreError::storage)?;
        }
        held
    };
    txn.commit().map_err(StoreError::storage)?;
    Ok(held)
}

/// At every open: the log the file names, replayed into it from the batch after its last
/// durable checkpoint (`log::recover`, which reads the disk and refuses a log it cannot trust)
/// and committed without a sync (`keep`: the log stays and the checkpoints follow), or with
/// one, the file then naming no log (`keep` false: a file shared with other processes, which
/// commits every batch durably). Returns the log's id and what was found, or `None` when the
/// file names no log (any directory beside it is then no log of its: removed).
pub(super) fn replay_at_open(
    db: &Database,
    path: &Path,
    keep: bool,
) -> Result<Option<(u64, Recovered)>, StoreError> {
    let dir = log::dir_of(path);
    let (id, checkpoint) = named_log(db)?;
    if id == 0 {
        if dir.exists() {
            let _ = std::fs::remove_dir_all(&dir);
        }
        return Ok(None);
    }
    let mut txn = begin(db, true)?;
    if keep {
        txn.set_durability(Durability::None)
            .map_err(|e| StoreError::Corrupt(e.to_string()))?;
    }
    let recovered = replay(&txn, path, id, checkpoint)?;
    log::remove_blank(&dir, &recovered);
    if recovered.applied > 0 {
        tracing::info!(
            batches = recovered.applied,
            from = checkpoint + 1,
            to = recovered.last,
            "replayed the write-ahead log"
        );
    }
    if keep {
        if recovered.applied == 0 {
            txn.abort().map_err(StoreError::storage)?;
        } else {
            txn.commit().map_err(StoreError::storage)?;
        }
        return Ok(Some((id, recovered)));
    }
    txn.open_table(META)
        .map_err(StoreError::storage)?
        .remove(META_WAL_ID)
        .map_err(StoreError::storage)?;
    txn.commit().map_err(StoreError::storage)?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(None)
}

/// The log `db` names and the last batch of its durable checkpoint: the log's id (0: none, and
/// so for a file without petstore's `meta`) and `meta.batch`.
pub(super) fn named_log(db: &Database) -> Result<(u64, u64), StoreError> {
    let txn = db.begin_read().map_err(StoreError::storage)?;
    let meta = match txn.open_table(META) {
        Ok(meta) => meta,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok((0, 0)),
        Err(e) => return Err(StoreError::storage(e)),
    };
    Ok((
        meta_value(&meta, META_WAL_ID)?,
        meta_value(&meta, META_BATCH)?,
    ))
}

/// Applies in `txn` every batch the log `id` beside the file at `path` holds after
/// `checkpoint` (`log::recover`, which refuses a log it cannot trust).
pub(super) fn replay(
    txn: &WriteTransaction,
    path: &Path,
    id: u64,
    checkpoint: u64,
) -> Result<Recovered, StoreError> {
    let mut replay = Replay::new(txn);
    log::recover(&log::dir_of(path), id, checkpoint, |_, record| {
        replay.apply(record)
    })
}

impl Shared {
    /// Starts the checkpoints thread of a file with a log.
    pub(super) fn start_checkpoints(self: &Arc<Self>) -> Result<(), StoreError> {
        let Some(wal) = &self.wal else { return Ok(()) };
        let shared = Arc::clone(self);
        let thread = std::thread::Builder::new()
            .name("petstore-checkpoints".into())
            .spawn(move || shared.checkpoints())
            .map_err(|e| StoreError::Io(format!("the checkpoints thread did not start: {e}")))?;
        *wal.thread.lock().unwrap_or_else(PoisonError::into_inner) = Some(thread);
        Ok(())
    }

    fn checkpoints(&self) {
        let Some(wal) = &self.wal else { return };
        loop {
            self.background_round(wal);
            let stopping = wal.stopping.lock().unwrap_or_else(PoisonError::into_inner);
            let (stopping, _) = wal
                .wake
                .wait_timeout_while(stopping, CHECKPOINT_EVERY, |stopping| {
                    !*stopping && wal.appended.load(Ordering::Relaxed) < CHECKPOINT_BYTES
                })
                .unwrap_or_else(PoisonError::into_inner);
            if *stopping {
                return;
            }
        }
    }

    /// One round of the checkpoints thread: the log set up if the file names none yet, a
    /// checkpoint if a batch came since the last, the next segment prepared.
    fn background_round(&self, wal: &Wal) {
        if self.checkpoint_or_set_up(wal) {
            // redb refuses every later write after an I/O error: the file is opened again
            // (and the log replayed) by the next read or write, paced.
            self.close_db(None);
            return;
        }
        let spare = wal.appender().as_ref().and_then(Appender::spare_needed);
        if let Some((dir, id, number)) = spare {
            match log::prepare(&dir, id, number, log::SEGMENT_BYTES) {
                Ok(()) => wal.warned.store(false, Ordering::Relaxed),
                Err(e) => wal.warn_once("preparing the next log segment", &e),
            }
        }
    }

    /// The log set up if the file names none yet, then a checkpoint if a batch came since the
    /// last; returns whether the checkpoint failed, leaving the database to be closed.
    fn checkpoint_or_set_up(&self, wal: &Wal) -> bool {
        let db = self.db();
        let Some(db) = db.as_ref() else { return false };
        let mut failed = None;
        {
            let mut appender = wal.appender();
            if appender.is_none() {
                let batch = self.batch.load(Ordering::Acquire);
                match caught("setting up the log", || set_up(db, &wal.dir, batch)) {
                    Ok(Ok(set)) => *appender = Some(set),
                    Ok(Err(e)) => failed = Some(("setting up the write-ahead log", e.to_string())),
                    Err(panic) => failed = Some(("setting up the write-ahead log", panic)),
                }
            }
        }
        if let Some((what, e)) = failed {
            wal.warn_once(what, &e);
            return false;
        }
        if self.batch.load(Ordering::Acquire) > wal.checkpointed.load(Ordering::Acquire) {
            let quick_repair = self.copying.load(Ordering::Relaxed) == 0;
            let done = caught("a checkpoint", || {
                checkpoint_commit(db, quick_repair, false)
            })
            .unwrap_or_else(|panic| Err(StoreError::InDoubt(panic)));
            match done {
                Ok(held) => {
                    wal.checkpointed.store(held, Ordering::Release);
                    wal.appended.store(0, Ordering::Relaxed);
                    let mut appender = wal.appender();
                    if appender
                        .as_ref()
                        .is_some_and(|a| a.stalled_and_covered(held))
                    {
                        // No segment could be begun, and the file holds every batch: it stops
                        // naming its log, whose segments give their room back; the next write
                        // sets a new one up once there is room for it.
                        let retired = caught("retiring the log", || {
                            checkpoint_commit(db, quick_repair, true)
                        });
                        match retired.unwrap_or_else(|panic| Err(StoreError::InDoubt(panic))) {
                            Ok(_) => {
                                if let Some(mut old) = appender.take() {
                                    old.remove_all();
                                }
                                tracing::info!(
                                    "the write-ahead log had no room for a new segment; retired until there is"
                                );
                            }
                            Err(e) => {
                                tracing::warn!(error = %e, "retiring the write-ahead log failed");
                                return true;
                            }
                        }
                    } else if let Some(appender) = appender.as_mut() {
                        appender.cut(held);
                        if let Err(e) = appender.sync_sealed() {
                            // Not needed to read the log back: the next segment says where
                            // it begins.
                            tracing::warn!(error = %e, "syncing a sealed log segment failed");
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "a checkpoint of the write-ahead log failed; the log keeps every batch");
                    return true;
                }
            }
        }
        false
    }

    /// At a clean stop, after the last batch: a durable checkpoint of every batch with the file
    /// no longer naming its log, then the log removed. If it fails, the log stays, and the next
    /// start replays it.
    pub(super) fn final_checkpoint(&self) {
        let Some(wal) = &self.wal else { return };
        wal.stop();
        let db = self.db();
        let Some(db) = db.as_ref() else { return };
        let mut appender = wal.appender();
        let Some(log) = appender.as_mut() else { return };
        match caught("the last checkpoint", || checkpoint_commit(db, true, true)) {
            Ok(Ok(_)) => {
                log.remove_all();
                *appender = None;
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "the last checkpoint failed; the next start replays the write-ahead log");
            }
            Err(_) => {}
        }
    }
}
