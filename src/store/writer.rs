//! The writer thread: the only code that writes the database. It takes every create queued
//! while the last commit ran into one transaction and one fsync (group commit), answers each
//! only after that commit is durable, and reopens the file after a write fails on I/O.
//! Invariant: a create's 201 leaves only after its commit is durable and counted in the read
//! snapshot, so its client reads it back; ids only grow.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use redb::{Database, ReadableTable};
use tokio::sync::{mpsc, oneshot};

use super::{
    Command, META, META_NEXT_ID, PETS, PETS_BY_STATUS, Shared, StoreError, StoredPet, open_database,
};
use crate::pet::{NewPet, PetId};

/// How many queued creates one transaction may take; bounds the latency of the batch.
const MAX_BATCH: usize = 1024;
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
    /// Reopens that failed since the database was last open, so a lasting fault logs one error.
    failed_reopens: u64,
    /// No reopen before this: see `REOPEN_INTERVAL`.
    next_reopen: Instant,
}

/// The writer thread: takes every create queued while the last commit ran into one transaction
/// and one fsync, then answers each. Ends on `Close`, returning its reply, or when every
/// handle is gone.
pub(super) fn write_loop(
    writer: &mut Writer,
    mut queue: mpsc::Receiver<Command>,
) -> Option<oneshot::Sender<()>> {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    let mut stats = WriteStats::default();
    while let Some(first) = queue.blocking_recv() {
        let mut closing = None;
        let mut next = Some(first);
        while let Some(command) = next.take() {
            match command {
                Command::Create(pet, reply) => batch.push((pet, reply)),
                Command::Close(done) => {
                    closing = Some(done);
                    break;
                }
            }
            if batch.len() < MAX_BATCH {
                next = queue.try_recv().ok();
            }
        }
        if closing.is_some() {
            // Creates already queued behind the close were accepted by a caller that is
            // waiting: write them too rather than drop them.
            while let Ok(Command::Create(pet, reply)) = queue.try_recv() {
                batch.push((pet, reply));
            }
            queue.close();
        }
        if !batch.is_empty() {
            stats.commits += 1;
            stats.pets_written += writer.commit_batch(&mut batch);
        }
        if closing.is_some() {
            stats.report();
            return closing;
        }
    }
    stats.report();
    None
}

type Pending = (NewPet, oneshot::Sender<Result<StoredPet, StoreError>>);

impl Writer {
    pub(super) fn new(shared: Arc<Shared>, path: &Path, cache_bytes: usize) -> Writer {
        Writer {
            shared,
            path: path.to_owned(),
            cache_bytes,
            failed_reopens: 0,
            next_reopen: Instant::now(),
        }
    }

    /// Commits a batch and answers each caller; returns how many pets were written.
    fn commit_batch(&mut self, batch: &mut Vec<Pending>) -> u64 {
        // A reopen that failed is retried here, at the next create, never in a loop of its own.
        if self.shared.db().is_none() && Instant::now() >= self.next_reopen {
            self.reopen();
        }
        // The read guard lives to the end of this statement: `reopen` below takes the write lock.
        let result = match self.shared.db().as_ref() {
            Some(db) => write_batch(db, batch.iter().map(|(pet, _)| pet)),
            None => Err(StoreError::Reopening),
        };
        match result {
            Ok(stored) => {
                // Before any answer: a client that got its 201 must find the pet.
                self.shared.snapshots.committed();
                let written = stored.len() as u64;
                for ((_, reply), pet) in batch.drain(..).zip(stored) {
                    let _ = reply.send(Ok(pet));
                }
                written
            }
            Err(e) => {
                if !matches!(e, StoreError::Reopening) {
                    tracing::error!(error = %e, pets = batch.len(), "write transaction failed");
                }
                // Reopened before the 503s leave, so a client that got one reads from a working
                // database. Other failures (ids exhausted, a value redb refuses) leave it usable.
                if e.is_io_failure() && Instant::now() >= self.next_reopen {
                    self.reopen();
                }
                for (_, reply) in batch.drain(..) {
                    let _ = reply.send(Err(e.clone()));
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
        match open_database(&self.path, self.cache_bytes) {
            Ok((db, pets)) => {
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
}

/// What the writer did in its life, logged when it ends: with the run's length it gives the
/// mean batch size and the commit (fsync) rate.
#[derive(Default)]
struct WriteStats {
    commits: u64,
    pets_written: u64,
}

impl WriteStats {
    fn report(&self) {
        tracing::info!(
            commits = self.commits,
            pets_written = self.pets_written,
            "store closed"
        );
    }
}

/// The one write path: all pets of a batch, their index entries and the next id, committed
/// together or not at all.
fn write_batch<'a>(
    db: &Database,
    pets: impl ExactSizeIterator<Item = &'a NewPet>,
) -> Result<Vec<StoredPet>, StoreError> {
    let mut stored = Vec::with_capacity(pets.len());
    let txn = db.begin_write().map_err(StoreError::write)?;
    {
        let mut meta = txn.open_table(META).map_err(StoreError::write)?;
        let mut table = txn.open_table(PETS).map_err(StoreError::write)?;
        let mut index = txn.open_table(PETS_BY_STATUS).map_err(StoreError::write)?;
        let mut next_id = meta
            .get(META_NEXT_ID)
            .map_err(StoreError::write)?
            .map_or(1, |v| v.value());
        for pet in pets {
            let id = PetId::try_from(next_id).map_err(|_| StoreError::IdsExhausted)?;
            let json = Bytes::from(pet.clone().into_pet(id).to_json());
            table.insert(id, json.as_ref()).map_err(StoreError::write)?;
            if let Some(status) = pet.status {
                index
                    .insert((status.to_code(), id), json.as_ref())
                    .map_err(StoreError::write)?;
            }
            stored.push(StoredPet { id, json });
            next_id += 1;
        }
        meta.insert(META_NEXT_ID, next_id)
            .map_err(StoreError::write)?;
    }
    // Durability::Immediate is redb's default: commit returns after the fsync.
    txn.commit().map_err(StoreError::write)?;
    Ok(stored)
}
