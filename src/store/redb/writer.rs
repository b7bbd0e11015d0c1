//! The redb engine under the write front: the only code that writes the file. It runs a
//! batch in one transaction, each write by its rule (`store/ops`, through `txn.rs`), every
//! table write noted in the batch's record (`logged.rs`); appends the record to the
//! write-ahead log with one sync (`log.rs`), and only then commits the transaction into the
//! file without a sync and lets readers see it (the checkpoints make the file durable,
//! `wal.rs`). A file shared with other processes keeps no log: each batch is redb's own
//! durable commit (two phases, quick-repair). After a failure the file is reopened from what
//! the disk holds, not from the page cache, and the log replayed (`Shared::reopen`, paced,
//! which a read may also make); the writer then learns there whether the failed batch is
//! stored. Invariants: a batch is answered with success only once its record's sync (or a
//! durable commit holding it) has returned; readers never see a batch before that, nor a
//! database redb has marked failed; ids only grow.
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use redb::{Database, Durability, ReadableTable};

use super::handle::{Shared, caught};
use super::idempotency::{self, Changes, Index};
use super::indexes::Open;
use super::log::{AppendError, Appender};
use super::logged::Logged;
use super::open::{Opening, open_database};
use super::tables::{
    META, META_BATCH, META_EVENT_SEQ, META_EVENTS_TRIMMED, META_INVENTORY, META_NEXT_ID, SESSIONS,
    Tables, WEBHOOKS, begin, event_head, event_length, meta_value, write_event,
};
use super::wal::set_up;
use crate::clock::unix_now;
use crate::store::events::{StoredEvent, now_ms};
use crate::store::model::{Change, InventoryDelta, StoreError};
use crate::store::ops;
use crate::store::ops::Write;
use crate::store::resource::Counter;
use crate::store::txn::Ledger;
use crate::store::write::{Engine, PURGE_BATCH};

/// The longest wait between two reopens. A disk that stays full fails every batch, and each
/// reopen repairs the file and starts its cache cold: between reopens, writes fail at once
/// with the file out, and reads wait for the next reopen (at most a second, `REOPEN_WAIT`)
/// rather than meet the database redb marked failed, whose every uncached page read fails.
pub(super) const REOPEN_INTERVAL: Duration = Duration::from_secs(1);

/// The wait after a reopen that a commit then proved sound. It doubles with each reopen that no
/// commit follows, up to `REOPEN_INTERVAL`: a passing fault (one failed write among many) costs
/// the writes of a tenth of a second, not of a second, while a lasting one is still retried at
/// most once a second. Under every 40th `pwrite` failing, a fixed second let about one batch
/// through a second, and a writer of 16 could wait past 30 s for its turn (4.5 s for the whole
/// test now, 42 s before). A commit that fails within the wait is answered as it failed
/// (`outcome_unknown` for a failed sync) rather than learnt from the file again.
const REOPEN_FIRST_WAIT: Duration = Duration::from_millis(100);

/// What the writer keeps: it alone writes.
pub(in crate::store) struct Writer {
    shared: Arc<Shared>,
    /// What the batch being written changes in the idempotency index.
    changes: Changes,
    /// The changes of the batch being written, in order: its events, then what it publishes.
    pushed: Vec<Change>,
    /// The batch whose log record is durable, and the record's length: after its commit into
    /// the file fails, it is found again by the replay (`after_failure`).
    logged: Option<(u64, usize)>,
}

/// The pace of reopens after failed writes, shared by the writer and the reads that open the
/// file again themselves (`Shared::db_for_read`).
pub(super) struct Pace {
    /// No reopen before this: see `REOPEN_INTERVAL`.
    pub(super) next: Instant,
    /// How long after the next reopen the one after may come (`REOPEN_FIRST_WAIT`).
    wait: Duration,
    /// Reopens that failed since the database was last open, so a lasting fault logs once.
    failed: u64,
}

impl Default for Pace {
    fn default() -> Pace {
        Pace {
            next: Instant::now(),
            wait: REOPEN_FIRST_WAIT,
            failed: 0,
        }
    }
}

impl Engine for Writer {
    async fn commit(&mut self, batch: &mut [Write]) -> Result<Option<Vec<Change>>, StoreError> {
        self.pushed.clear();
        let committed = self.commit_batch(batch)?;
        Ok(committed.then(|| std::mem::take(&mut self.pushed)))
    }

    async fn close(&mut self) {
        // A panic in the close is logged by `caught`.
        self.shared.closed.store(true, Ordering::Release);
        self.shared.final_checkpoint();
        if let Some(db) = self.shared.take_db()
            && let Ok(Err(e)) = caught("the close", || db.close())
        {
            tracing::warn!(error = %e, "closing the database failed");
        }
    }
}

impl Writer {
    /// The writer of the file open in `shared`.
    pub(super) fn new(shared: Arc<Shared>) -> Writer {
        Writer {
            shared,
            changes: Changes::default(),
            pushed: Vec::new(),
            logged: None,
        }
    }

    fn commit_batch(&mut self, batch: &mut [Write]) -> Result<bool, StoreError> {
        // A reopen that failed is retried here, at the next write, never in a loop of its own.
        if self.shared.db().is_none() {
            if Instant::now() < self.shared.pace().next {
                return Err(StoreError::Reopening);
            }
            self.shared.reopen();
        }
        // Quick-repair: each commit also saves redb's allocator state, so a start after a
        // crash loads it instead of walking the whole file to rebuild it (705 ms at 1M pets
        // without, 69-85 ms with). Not while a snapshot of this process holds its read
        // transaction: no page freed since can be reused, so the file grows with every commit,
        // and the saved allocator state with it (p99 4.7 times that without a snapshot, 1.2
        // without quick-repair: benches/load, `snapshot`). A crash then repairs the slow way.
        let quick_repair = self.shared.copying.load(Ordering::Relaxed) == 0;
        let number = self.shared.batch.load(Ordering::Acquire) + 1;
        self.logged = None;
        let result = match self.shared.db().as_ref() {
            // A panic may have come inside the commit, and may have left redb's state mid-change:
            // in doubt, so the file is opened again and says whether the batch is in it.
            Some(db) => caught("a batch", || {
                // Held for the whole batch: the checkpoints thread waits for it.
                let mut log = self.shared.wal.as_ref().map(|wal| (wal, wal.appender()));
                let commit = match &mut log {
                    Some((wal, appender)) => {
                        if appender.is_none() {
                            **appender = Some(set_up(db, &wal.dir, number - 1)?);
                        }
                        let appender = appender.as_mut().ok_or(StoreError::Reopening)?;
                        Commit::Logged(appender)
                    }
                    None => Commit::Durable { quick_repair },
                };
                write_batch(
                    db,
                    commit,
                    number,
                    &self.shared.index,
                    &mut self.changes,
                    &mut self.pushed,
                    &mut self.logged,
                    batch,
                )
            })
            .unwrap_or_else(|message| Err(StoreError::InDoubt(message))),
            None => Err(StoreError::Reopening),
        };
        match result {
            Ok(committed) => {
                if committed {
                    self.shared.batch.store(number, Ordering::Release);
                    if let (Some(wal), Some((_, bytes))) = (&self.shared.wal, self.logged) {
                        wal.count(bytes);
                    }
                    self.shared.pace().wait = REOPEN_FIRST_WAIT;
                    // Before any answer: a client that got its 201 must find the pet, and a
                    // retry its record.
                    self.shared.index.apply(&mut self.changes);
                    self.shared.snapshots.committed();
                }
                self.changes.clear();
                Ok(committed)
            }
            Err(e) => {
                self.changes.clear();
                match e {
                    StoreError::Io(_) | StoreError::InDoubt(_) => self.after_failure(e, number),
                    e => Err(e),
                }
            }
        }
    }

    /// After batch `number` failed on I/O: redb refuses every later write (its `PreviousIo`)
    /// until the file is opened again, so it is, before the failure is answered. For a commit
    /// that failed (`InDoubt`), the file as the disk holds it then says whether the batch is
    /// in it: if it is, a durable commit on top makes it certain and the batch succeeds; if
    /// not, nothing of it was stored. Only when neither can be learnt does `InDoubt` stand.
    fn after_failure(&mut self, e: StoreError, number: u64) -> Result<bool, StoreError> {
        if Instant::now() < self.shared.pace().next {
            // Not yet due: the file is closed now all the same, so that no read meets the
            // database redb has marked failed; the first read or write once a reopen is due
            // opens it again.
            self.shared.close_db(None);
            return Err(e);
        }
        self.shared.reopen();
        if !matches!(e, StoreError::InDoubt(_)) {
            return Err(e);
        }
        let found = self.shared.batch.load(Ordering::Acquire) == number;
        if self.shared.wal.is_some() {
            // The log was read back from the disk. A batch whose record was synced is there
            // and durable: it succeeds. One whose append failed may be there too (the write
            // reached the disk, the sync said otherwise): in doubt, as its answer says.
            return match (found, self.logged.is_some_and(|(n, _)| n == number)) {
                (true, true) => {
                    tracing::info!(
                        batch = number,
                        "the batch whose commit failed is in the log, replayed since"
                    );
                    Ok(true)
                }
                _ => Err(e),
            };
        }
        let db = self.shared.db();
        let Some(db) = db.as_ref() else {
            return Err(e);
        };
        if !found {
            return Err(StoreError::Io(format!("{e}; the batch is not in the file")));
        }
        let settled = caught("a commit after a reopen", || settle_durably(db, number + 1))
            .unwrap_or_else(|message| Err(StoreError::InDoubt(message)));
        match settled {
            Ok(()) => {
                self.shared.batch.store(number + 1, Ordering::Release);
                self.shared.pace().wait = REOPEN_FIRST_WAIT;
                tracing::info!(
                    batch = number,
                    "the batch whose commit failed is in the file, made durable since"
                );
                Ok(true)
            }
            Err(again) => {
                tracing::warn!(error = %again, "the batch whose commit failed is in the file, but not made durable since");
                Err(e)
            }
        }
    }
}

impl Shared {
    /// Closes the database and opens the file again from what the disk holds (`Opening::
    /// AfterFailure`); redb repairs what the failed commit left. The file decides which pets
    /// and idempotency records exist, and which batch was its last. The writer calls it after a
    /// failed write, a read when the file is out and a reopen is due; one at a time, the
    /// others waiting for it.
    pub(super) fn reopen(&self) {
        if !self.begin_reopen() {
            return;
        }
        {
            let mut pace = self.pace();
            pace.next = Instant::now() + pace.wait;
            pace.wait = (pace.wait * 2).min(REOPEN_INTERVAL);
        }
        self.close_db(None);
        match open_database(
            &self.path,
            self.cache_bytes,
            self.shared_file,
            Opening::AfterFailure,
        ) {
            Ok(opened) => {
                self.index.replace(opened.index);
                self.batch.store(opened.batch, Ordering::Release);
                // Before the database is back: no batch goes into the segment the failure
                // left.
                if let Some(wal) = &self.wal {
                    wal.resume(opened.wal);
                }
                self.put_db(opened.db);
                let failed_reopens = std::mem::take(&mut self.pace().failed);
                tracing::info!(
                    pets = opened.pets,
                    failed_reopens,
                    "database reopened after a write failure"
                );
            }
            Err(e) => {
                let mut pace = self.pace();
                if pace.failed == 0 {
                    tracing::error!(error = %e, "reopening the database failed; retrying at the next read or write");
                }
                pace.failed += 1;
            }
        }
        self.end_reopen();
    }
}

/// A durable commit that only counts a batch: everything before it is durable once it returns.
fn settle_durably(db: &Database, number: u64) -> Result<(), StoreError> {
    let txn = begin(db, true)?;
    txn.open_table(META)
        .map_err(StoreError::storage)?
        .insert(META_BATCH, number)
        .map_err(StoreError::storage)?;
    txn.commit().map_err(StoreError::storage)
}

/// One batch's transaction: every write of it, in queue order, committed together or not at
/// all. Returns whether anything was committed: a batch that changed nothing is aborted,
/// saving the syncs. A failure before the commit stored nothing (`Io`, `Corrupt`); a failure
/// of the commit itself may have stored all of it (`InDoubt`).
#[allow(clippy::too_many_arguments)]
fn write_batch(
    db: &Database,
    commit: Commit<'_>,
    number: u64,
    index: &Index,
    changes: &mut Changes,
    pushed: &mut Vec<Change>,
    logged: &mut Option<(u64, usize)>,
    batch: &mut [Write],
) -> Result<bool, StoreError> {
    let txn = match &commit {
        Commit::Durable { quick_repair } => {
            super::logged::stop();
            begin(db, *quick_repair)?
        }
        Commit::Logged(_) => {
            super::logged::start();
            let mut txn = db.begin_write().map_err(StoreError::storage)?;
            txn.set_durability(Durability::None)
                .map_err(|e| StoreError::Corrupt(e.to_string()))?;
            txn
        }
    };
    let changed = {
        let tables = Tables::open(&txn)?;
        let next_id = tables
            .meta
            .get(META_NEXT_ID)
            .map_err(StoreError::storage)?
            .map_or(1, |v| v.value());
        let mut run = Run {
            txn: &txn,
            tables,
            open: Open::new(&txn),
            index,
            changes,
            // Taken back before the commit: if the commit fails and the batch is found in the
            // file after all, the writer still has its changes to publish.
            ledger: Ledger {
                now: unix_now(),
                now_ms: now_ms(),
                changes: std::mem::take(pushed),
            },
            next_id,
            counters: Vec::new(),
            inventory: InventoryDelta::default(),
        };
        for write in batch.iter_mut() {
            at_once(run.run(write))?;
        }
        let changed = batch.iter().any(Write::changed);
        if changed {
            run.save_counters(next_id)?;
            run.tables.meta.insert(META_BATCH, number)?;
            append_events(&mut run.tables, &run.ledger.changes)?;
        }
        *pushed = std::mem::take(&mut run.ledger.changes);
        changed
    };
    if !changed {
        txn.abort().map_err(StoreError::storage)?;
        return Ok(false);
    }
    if let Commit::Logged(appender) = commit {
        let record = super::logged::take();
        // The one sync of the batch. If it fails, the transaction is dropped uncommitted:
        // nothing of the batch is in the file, whatever the log holds.
        match appender.append(number, &record) {
            Ok(()) => *logged = Some((number, record.len())),
            Err(AppendError::NotWritten(e)) => {
                return Err(StoreError::NoRoom(format!("the write-ahead log: {e}")));
            }
            Err(AppendError::InDoubt(e)) => {
                return Err(StoreError::InDoubt(format!(
                    "writing the write-ahead log: {e}"
                )));
            }
        }
    }
    let logged_already = logged.is_some();
    txn.commit().map_err(|e| match StoreError::storage(e) {
        StoreError::Io(e) => StoreError::InDoubt(e),
        // The log holds the batch already: whatever failed, the file must be opened again and
        // the log replayed before another batch, or the next would take this one's number.
        other if logged_already => StoreError::InDoubt(other.to_string()),
        other => other,
    })?;
    Ok(true)
}

/// How a batch is made durable.
enum Commit<'a> {
    /// redb's own durable commit: the file shared with other processes.
    Durable { quick_repair: bool },
    /// The batch's record appended to the log and synced, then a commit into the file without
    /// a sync (`redb/wal.rs` makes it durable in the file later).
    Logged(&'a mut Appender),
}

/// The outcome of a rule run on this engine: every call of redb's `Txn` does its work at once
/// and never waits, so the rule's future is ready at its first poll, on the writer's thread.
fn at_once<T>(rule: impl Future<Output = Result<T, StoreError>>) -> Result<T, StoreError> {
    let mut rule = std::pin::pin!(rule);
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    match rule.as_mut().poll(&mut context) {
        std::task::Poll::Ready(outcome) => outcome,
        std::task::Poll::Pending => Err(StoreError::Corrupt(
            "a rule waited inside a redb transaction".into(),
        )),
    }
}

/// Appends the batch's events, in the order its writes ran, in its own transaction: a change
/// and its event commit together or not at all.
fn append_events(tables: &mut Tables<'_>, changes: &[Change]) -> Result<(), StoreError> {
    let mut seq = meta_value(&*tables.meta, META_EVENT_SEQ)?;
    let at_ms = now_ms();
    let mut appended = 0;
    // One buffer for every event of the batch: the value goes into the log's record too, so
    // it is not written in place in the leaf (`insert_reserve`).
    let mut value = Vec::new();
    for change in changes {
        seq += 1;
        let event = StoredEvent::of(seq, change, at_ms);
        value.clear();
        value.resize(event_length(&event), 0);
        write_event(&mut value, &event);
        tables.events.insert(seq, value.as_slice())?;
        appended += 1;
    }
    if appended > 0 {
        tables.meta.insert(META_EVENT_SEQ, seq)?;
    }
    Ok(())
}

/// A batch being run: its tables, the idempotency records it sees, the next ids, and what it
/// does to the inventory.
pub(super) struct Run<'txn> {
    txn: &'txn redb::WriteTransaction,
    pub(super) tables: Tables<'txn>,
    /// The declared tables (records and indexes), each opened by the first write of the
    /// batch that needs it.
    pub(super) open: Open<'txn>,
    /// The committed idempotency records, and what this batch changes in them.
    pub(super) index: &'txn Index,
    pub(super) changes: &'txn mut Changes,
    /// The batch's time, and its changes so far (`Txn::push`).
    pub(super) ledger: Ledger,
    /// The id the next create gets; written back to `META` when the batch created any.
    pub(super) next_id: u64,
    /// The ids the other counters give next, each once read (`counter`); written back with
    /// the batch.
    pub(super) counters: Vec<(Counter, u64)>,
    /// How the batch moves the inventory's counters.
    pub(super) inventory: InventoryDelta,
}

impl<'txn> Run<'txn> {
    /// Runs one write and sets its outcome; an error returned fails the whole transaction.
    async fn run(&mut self, write: &mut Write) -> Result<(), StoreError> {
        if ops::run(self, write).await? {
            return Ok(());
        }
        match write {
            Write::Purge(now, pending) => {
                let purged = idempotency::purge(&mut self.tables.records, self.changes, *now)?;
                pending.outcome = Some(Ok(purged));
            }
            Write::Trim(before_ms, pending) => {
                pending.outcome = Some(Ok(self.trim(*before_ms)?));
            }
            Write::SaveWebhook(save, pending) => {
                let (id, state) = &**save;
                let mut table = Logged::open(self.txn, WEBHOOKS)?;
                table.insert(id.as_str(), state.encode().as_slice())?;
                pending.outcome = Some(Ok(()));
            }
            Write::SaveSession(save, pending) => {
                let (token, record) = &**save;
                let mut table = Logged::open(self.txn, SESSIONS)?;
                table.insert(token, record.encode().as_slice())?;
                pending.outcome = Some(Ok(()));
            }
            Write::RemoveSessions(gone, pending) => {
                pending.outcome = Some(Ok(super::sessions::remove(self.txn, *gone)?));
            }
            // Every other write is a rule's (`ops::run`).
            _ => {}
        }
        Ok(())
    }

    /// The id `counter` gives next as this batch sees it: its own value once read, else the
    /// file's (1 when absent).
    pub(super) fn counter(&mut self, counter: Counter) -> Result<&mut u64, StoreError> {
        let at = match self.counters.iter().position(|(c, _)| *c == counter) {
            Some(at) => at,
            None => {
                let next = meta_value(&*self.tables.meta, counter.key())?.max(1);
                self.counters.push((counter, next));
                self.counters.len() - 1
            }
        };
        Ok(&mut self.counters[at].1)
    }

    /// Writes back the counters the batch moved: the pet id counter (read as `next_id`), the
    /// order and category counters, and the inventory.
    fn save_counters(&mut self, next_id: u64) -> Result<(), StoreError> {
        let meta = &mut self.tables.meta;
        if self.next_id != next_id {
            meta.insert(META_NEXT_ID, self.next_id)?;
        }
        for (counter, next) in &self.counters {
            meta.insert(counter.key(), *next)?;
        }
        if !self.inventory.is_zero() {
            for ((_, delta), key) in self.inventory.each().into_iter().zip(META_INVENTORY) {
                if delta != 0 {
                    let count = meta_value(&**meta, key)?.saturating_add_signed(delta);
                    meta.insert(key, count)?;
                }
            }
        }
        Ok(())
    }

    /// Removes up to `PURGE_BATCH` of the oldest events, those from before `before_ms`, and
    /// records the last one removed: a cursor before it is gone.
    fn trim(&mut self, before_ms: u64) -> Result<usize, StoreError> {
        let mut removed = 0;
        let mut last = None;
        while removed < PURGE_BATCH {
            let oldest = match self.tables.events.first().map_err(StoreError::storage)? {
                Some((seq, value)) => (seq.value(), event_head(value.value())?.1),
                None => break,
            };
            let (seq, at_ms) = oldest;
            if at_ms >= before_ms {
                break;
            }
            self.tables.events.remove(seq)?;
            last = Some(seq);
            removed += 1;
        }
        if let Some(seq) = last {
            self.tables.meta.insert(META_EVENTS_TRIMMED, seq)?;
        }
        Ok(removed)
    }
}
