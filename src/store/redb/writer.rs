//! The writer thread: the only code that writes the database. It takes every write queued
//! while the last commit ran (creates, patches, deletes, purges) into one transaction (group
//! commit), made durable by one record in the write-ahead log (`wal.rs`) or, on a file other
//! processes may read, by redb's own durable commit; it answers each only after that, and
//! reopens the file after a write fails on I/O. Invariant: an answer leaves only after its
//! commit is durable and counted in the read snapshot, so its client reads it back; ids only
//! grow.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use redb::{Database, ReadableTable, Table};
use tokio::sync::{mpsc, oneshot};

use super::idempotency::{self, Changes, Index, RECORDS};
use super::snapshot::Snapshots;
use super::wal::{Journal, Log};
use super::{
    Created, META, META_NEXT_ID, PETS, PETS_BY_STATUS, Precondition, REVISIONS, Shared, StoreError,
    StoredPet, checkpoint, open_database, start_epoch,
};
use crate::clock::unix_now;
use crate::pet::{NewPet, Pet, PetId, PetPatch};
use crate::store::write::{Command, Keyed, Write, gather};

/// After a reopen, the next waits this long. A disk that stays full fails every batch, and
/// each reopen repairs the file while reads get 503: between reopens, creates fail at once
/// (redb still refuses them) and reads go on from the database as it was.
pub(super) const REOPEN_INTERVAL: Duration = Duration::from_secs(1);

/// What the writer thread keeps: it alone writes, and while it runs it alone takes the
/// database out of `Shared` and puts one back.
pub(super) struct Writer {
    shared: Arc<Shared>,
    /// Where to open the file again after a write fails on I/O, with the same cache size.
    path: PathBuf,
    cache_bytes: usize,
    /// Most writes one transaction takes.
    max_batch: usize,
    /// Reopens that failed since the database was last open, so a lasting fault logs one error.
    failed_reopens: u64,
    /// No reopen before this: see `REOPEN_INTERVAL`.
    next_reopen: Instant,
    /// What the batch being written changes in the idempotency index.
    changes: Changes,
    /// The write-ahead log, where the file is this process's alone; `None` where other
    /// processes may read it (redb then commits each batch durably itself).
    log: Option<Log>,
    /// What the batch being written changes in the tables, for the log.
    journal: Journal,
}

/// The writer thread: takes every write queued while the last commit ran into one transaction
/// and one fsync, then answers each. Ends on `Close`, returning its reply, or when every
/// handle is gone.
pub(super) fn write_loop(
    writer: &mut Writer,
    mut queue: mpsc::Receiver<Command>,
) -> Option<oneshot::Sender<()>> {
    let mut batch = Vec::with_capacity(writer.max_batch);
    let mut stats = WriteStats::default();
    while let Some(first) = queue.blocking_recv() {
        let closing = gather(first, &mut queue, &mut batch, writer.max_batch);
        if !batch.is_empty() {
            let changed = writer.commit_batch(&mut batch);
            // A batch that changed nothing was aborted, not committed.
            stats.commits += u64::from(changed > 0);
            stats.writes += changed;
        }
        if closing.is_some() {
            writer.checkpoint();
            stats.report();
            return closing;
        }
    }
    stats.report();
    None
}

impl Writer {
    pub(super) fn new(
        shared: Arc<Shared>,
        path: &Path,
        cache_bytes: usize,
        max_batch: usize,
        log: Option<Log>,
    ) -> Writer {
        Writer {
            shared,
            path: path.to_owned(),
            cache_bytes,
            max_batch: max_batch.max(1),
            failed_reopens: 0,
            next_reopen: Instant::now(),
            changes: Changes::default(),
            log,
            journal: Journal::default(),
        }
    }

    /// Runs a batch in one transaction and answers each caller; returns how many writes
    /// changed something.
    fn commit_batch(&mut self, batch: &mut Vec<Write>) -> u64 {
        // A reopen that failed is retried here, at the next write, never in a loop of its own;
        // so is the reopen a log write that failed asks for.
        let in_doubt = self.log.as_ref().is_some_and(Log::in_doubt);
        if (self.shared.db().is_none() || in_doubt) && Instant::now() >= self.next_reopen {
            self.reopen();
        }
        // The read guard lives to the end of this statement: `reopen` below takes the write lock.
        let began = Instant::now();
        let quick_repair = self.shared.copying.load(Ordering::Relaxed) == 0;
        let result = match self.shared.db().as_ref() {
            Some(db) => write_batch(
                db,
                Commit {
                    quick_repair,
                    log: self.log.as_mut(),
                    snapshots: &self.shared.snapshots,
                },
                &self.shared.index,
                &mut self.changes,
                &mut self.journal,
                batch,
            ),
            None => Err(StoreError::Reopening),
        };
        self.journal.clear();
        match result {
            Ok(committed) => {
                if committed {
                    crate::metrics::store_committed(began.elapsed(), batch.len());
                    // Before any answer: a client that got its 201 must find the pet, and a
                    // retry its record.
                    self.shared.index.apply(&mut self.changes);
                    self.shared.snapshots.committed();
                }
                self.changes.clear();
                let changed = batch.iter().filter(|write| write.changed()).count() as u64;
                for write in batch.drain(..) {
                    write.answer(None);
                }
                changed
            }
            Err(e) => {
                self.changes.clear();
                crate::metrics::store_commit_failed();
                if !matches!(e, StoreError::Reopening) {
                    tracing::error!(error = %e, writes = batch.len(), "write transaction failed");
                }
                // Reopened before the 503s leave, so a client that got one reads from a working
                // database. Other failures (a value redb refuses) leave it usable.
                // A write that failed on I/O leaves redb refusing every later one (its
                // `PreviousIo`) until the database is reopened.
                if matches!(e, StoreError::Io(_)) && Instant::now() >= self.next_reopen {
                    self.reopen();
                }
                for write in batch.drain(..) {
                    write.answer(Some(&e));
                }
                0
            }
        }
    }

    /// Closes the database and opens the file again, after a write failed on I/O. redb repairs
    /// what the failed commit left. `next_id` is read from the file at the next write:
    /// the pets of the failed batch got 503, never a 201, so their ids may be given again.
    pub(super) fn reopen(&mut self) {
        self.next_reopen = Instant::now() + REOPEN_INTERVAL;
        // One `Database` per file per process: the old one must be closed before the file is
        // opened again. Its close fails with the I/O error it latched; that is already logged.
        if let Some(old) = self.shared.take_db() {
            let _ = old.close();
        }
        self.log = None;
        match open_database(&self.path, self.cache_bytes, self.shared.shared_file, false) {
            Ok((db, pets, index, log)) => {
                self.log = log;
                // A commit that failed may still have reached the disk: the file decides which
                // records exist.
                self.shared.index.replace(index);
                self.shared.put_db(db);
                tracing::info!(
                    pets,
                    failed_reopens = self.failed_reopens,
                    "database reopened after a write failure"
                );
                self.failed_reopens = 0;
            }
            Err(e) => {
                if self.failed_reopens == 0 {
                    tracing::error!(error = %e, "reopening the database failed; retrying at the next create");
                }
                self.failed_reopens += 1;
            }
        }
    }

    /// At a clean stop: makes the file hold every logged batch, so the next start replays
    /// nothing. A failure here is logged; the next start replays the log instead.
    fn checkpoint(&mut self) {
        let Some(log) = self.log.as_mut().filter(|log| log.holds_records()) else {
            return;
        };
        let quick_repair = self.shared.copying.load(Ordering::Relaxed) == 0;
        let result = match self.shared.db().as_ref() {
            Some(db) => checkpoint(db, quick_repair),
            None => return,
        };
        match result {
            Ok(epoch) => log.restart(epoch),
            Err(e) => {
                tracing::warn!(error = %e, "the checkpoint at the stop failed; the next start replays the log")
            }
        }
    }
}

/// What the writer did in its life, logged when it ends: with the run's length it gives the
/// mean batch size and the commit (fsync) rate.
#[derive(Default)]
struct WriteStats {
    commits: u64,
    writes: u64,
}

impl WriteStats {
    fn report(&self) {
        tracing::info!(commits = self.commits, writes = self.writes, "store closed");
    }
}

/// The tables one write transaction changes.
struct Tables<'txn> {
    pets: Table<'txn, i64, &'static [u8]>,
    by_status: Table<'txn, (u8, i64), &'static [u8]>,
    revisions: Table<'txn, i64, u64>,
    records: Table<'txn, (u64, i64), [u8; 32]>,
    /// The committed idempotency records, and what this batch changes in them.
    index: &'txn Index,
    changes: &'txn mut Changes,
    /// Every change to the tables above, for the log.
    journal: &'txn mut Journal,
    /// The id the next create gets; written back to `META` when the batch created any.
    next_id: u64,
    /// The Unix time the batch runs at, for idempotency records.
    now: u64,
}

/// The one write path: every write of a batch, in queue order, committed together or not at
/// all. A write that cannot go ahead (no such pet, a failed precondition, a reused key) only
/// sets its own outcome. Returns whether anything was committed: a batch that changed nothing
/// is aborted, saving the fsync.
fn write_batch<'a>(
    db: &Database,
    commit: Commit<'_>,
    index: &'a Index,
    changes: &'a mut Changes,
    journal: &'a mut Journal,
    batch: &mut [Write],
) -> Result<bool, StoreError> {
    let Commit {
        quick_repair,
        log,
        snapshots,
    } = commit;
    // After a log write failed, redb may hold a batch the log lacks: nothing more commits on
    // top of it until the reopen has gone back to what the file and the log hold.
    if log.as_ref().is_some_and(|log| log.in_doubt()) {
        return Err(StoreError::Reopening);
    }
    let mut txn = db.begin_write().map_err(StoreError::write)?;
    // Quick-repair: each commit also saves redb's allocator state (and commits in two phases),
    // so a start after a crash loads that state instead of walking the whole file to rebuild
    // it (705 ms at 1M pets without, 69-85 ms with). It costs about 10% of the creates per
    // core at 64 clients (a third more bytes and a second fsync a commit; README Performance).
    // Not while a snapshot of this process holds its read transaction: no page freed since
    // can be reused, so the file grows with every commit, and the saved allocator state,
    // which grows with the file, with it. Under back-to-back snapshots of 1M pets and 64
    // clients' creates, p99 was 4.7 times that without a snapshot with quick-repair, 1.2
    // without (benches/load, `snapshot`). A crash during a snapshot repairs the slow way.
    // With the log, only a checkpoint is durable and saves the state; the others do not.
    txn.set_quick_repair(quick_repair);
    let changed = {
        let mut meta = txn.open_table(META).map_err(StoreError::write)?;
        let next_id = meta
            .get(META_NEXT_ID)
            .map_err(StoreError::write)?
            .map_or(1, |v| v.value());
        let mut tables = Tables {
            pets: txn.open_table(PETS).map_err(StoreError::write)?,
            by_status: txn.open_table(PETS_BY_STATUS).map_err(StoreError::write)?,
            revisions: txn.open_table(REVISIONS).map_err(StoreError::write)?,
            records: txn.open_table(RECORDS).map_err(StoreError::write)?,
            index,
            changes,
            journal,
            next_id,
            now: unix_now(),
        };
        for write in batch.iter_mut() {
            tables.run(write)?;
        }
        if tables.next_id != next_id {
            meta.insert(META_NEXT_ID, tables.next_id)
                .map_err(StoreError::write)?;
            tables.journal.next_id(tables.next_id);
        }
        batch.iter().any(Write::changed)
    };
    if !changed {
        txn.abort().map_err(StoreError::write)?;
        return Ok(false);
    }
    match log {
        Some(log) if log.fits(journal) => {
            // redb first, the log second: a batch redb refuses (a full disk) never reaches the
            // log, so no replay brings back a create that got 503. Readers must still not see
            // the batch before the log holds it: the snapshot they share until the writer
            // counts this commit is taken here, before it.
            txn.set_durability(redb::Durability::None)
                .map_err(|e| StoreError::Corrupt(e.to_string()))?;
            txn.set_quick_repair(false);
            snapshots.get(db)?;
            txn.commit().map_err(StoreError::write)?;
            log.append(journal)?;
        }
        Some(log) => {
            // More than the log has room for: this batch is the checkpoint, committed durably
            // with a new epoch, and the log starts again.
            let epoch = start_epoch(&txn)?;
            txn.commit().map_err(StoreError::write)?;
            log.restart(epoch);
        }
        // Durability::Immediate is redb's default: commit returns after the fsync.
        None => txn.commit().map_err(StoreError::write)?,
    }
    Ok(true)
}

/// How a batch commits: with or without quick-repair, and through the log or redb alone.
struct Commit<'a> {
    quick_repair: bool,
    log: Option<&'a mut Log>,
    /// Taken before a commit through the log, so readers see the batch only once it is durable.
    snapshots: &'a Snapshots,
}

impl Tables<'_> {
    /// Runs one write and sets its outcome; an error returned fails the whole transaction.
    fn run(&mut self, write: &mut Write) -> Result<(), StoreError> {
        match write {
            Write::Create(pet, keyed, pending) => {
                pending.outcome = Some(self.create(pet, keyed.as_ref())?);
            }
            Write::Patch(id, patch, precondition, pending) => {
                let patch = std::mem::take(patch);
                pending.outcome = Some(self.patch(*id, patch, precondition)?);
            }
            Write::Delete(id, precondition, pending) => {
                pending.outcome = Some(self.delete(*id, precondition)?);
            }
            Write::Purge(now, pending) => {
                let purged =
                    idempotency::purge(&mut self.records, self.changes, self.journal, *now)?;
                pending.outcome = Some(Ok(purged));
            }
        }
        Ok(())
    }

    fn create(
        &mut self,
        pet: &NewPet,
        keyed: Option<&Keyed>,
    ) -> Result<Result<Created, StoreError>, StoreError> {
        // Checked again here, in the transaction: a retry may have passed the read-side check
        // before this key's first create committed (its caller gone, its claim released).
        if let Some(keyed) = keyed
            && let Some(answer) =
                idempotency::find(self.index, self.changes, &keyed.key, pet, self.now)
        {
            return Ok(answer);
        }
        let Ok(id) = PetId::try_from(self.next_id) else {
            return Ok(Err(StoreError::IdsExhausted));
        };
        let json = Bytes::from(pet.clone().into_pet(id).to_json());
        self.pets
            .insert(id, json.as_ref())
            .map_err(StoreError::write)?;
        self.journal.put_pet(id, &json);
        if let Some(status) = pet.status {
            let key = (status.to_code(), id);
            self.by_status
                .insert(key, json.as_ref())
                .map_err(StoreError::write)?;
            self.journal.put_status(key);
        }
        self.next_id += 1;
        let pet = StoredPet {
            id,
            revision: 1,
            json,
        };
        if let Some(keyed) = keyed {
            idempotency::insert(&mut self.records, self.changes, self.journal, keyed, id)?;
        }
        Ok(Ok(Created {
            pet,
            replayed: false,
        }))
    }

    fn patch(
        &mut self,
        id: PetId,
        patch: PetPatch,
        precondition: &Precondition,
    ) -> Result<Result<StoredPet, StoreError>, StoreError> {
        let (old, revision) = match self.current(id, precondition)? {
            Ok(current) => current,
            Err(e) => return Ok(Err(e)),
        };
        let new = patch.apply(old.clone());
        let json = Bytes::from(new.to_json());
        self.pets
            .insert(id, json.as_ref())
            .map_err(StoreError::write)?;
        self.journal.put_pet(id, &json);
        // The old index entry goes in the same transaction as the new one comes: a status
        // filter never sees the pet under two statuses, or under its old one.
        if let Some(status) = old.status {
            let key = (status.to_code(), id);
            self.by_status.remove(key).map_err(StoreError::write)?;
            self.journal.remove_status(key);
        }
        if let Some(status) = new.status {
            let key = (status.to_code(), id);
            self.by_status
                .insert(key, json.as_ref())
                .map_err(StoreError::write)?;
            self.journal.put_status(key);
        }
        let revision = revision + 1;
        self.revisions
            .insert(id, revision)
            .map_err(StoreError::write)?;
        self.journal.put_revision(id, revision);
        Ok(Ok(StoredPet { id, revision, json }))
    }

    fn delete(
        &mut self,
        id: PetId,
        precondition: &Precondition,
    ) -> Result<Result<(), StoreError>, StoreError> {
        let (old, _) = match self.current(id, precondition)? {
            Ok(current) => current,
            Err(e) => return Ok(Err(e)),
        };
        self.pets.remove(id).map_err(StoreError::write)?;
        self.journal.remove_pet(id);
        if let Some(status) = old.status {
            let key = (status.to_code(), id);
            self.by_status.remove(key).map_err(StoreError::write)?;
            self.journal.remove_status(key);
        }
        self.revisions.remove(id).map_err(StoreError::write)?;
        self.journal.remove_revision(id);
        Ok(Ok(()))
    }

    /// The pet `id` and its revision, if it exists and meets `precondition`.
    fn current(
        &self,
        id: PetId,
        precondition: &Precondition,
    ) -> Result<Result<(Pet, u64), StoreError>, StoreError> {
        let Some(json) = self.pets.get(id).map_err(StoreError::write)? else {
            return Ok(Err(StoreError::NotFound(id)));
        };
        let revision = self
            .revisions
            .get(id)
            .map_err(StoreError::write)?
            .map_or(1, |r| r.value());
        if !precondition.allows(revision) {
            return Ok(Err(StoreError::PreconditionFailed));
        }
        let pet = Pet::from_json(json.value())
            .map_err(|e| StoreError::Corrupt(format!("pet {id} does not read back: {e}")));
        Ok(pet.map(|pet| (pet, revision)))
    }
}
