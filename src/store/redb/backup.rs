//! Copies of the live file: snapshots for `--backup-dir`, and `petstore backup` from a second
//! process. Every table is copied from one read transaction into a new redb file, so the copy
//! is one consistent state of the store and a complete database that opens as any other. It
//! only reads the live file, through a read-only handle of its own where the file is shared
//! (redb's `SingleWriter` mode), and it is paced: the writer never waits for it, and a failure
//! (a full or unwritable disk) leaves nothing but a partial copy, which the caller removes.
//! Where the copy goes and under which name is the caller's (`crate::backup`).

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use redb::{
    ConcurrencyMode, Database, Key, MultimapTableHandle, ReadOnlyDatabase, ReadTransaction,
    ReadableDatabase, ReadableTable, TableDefinition, TableHandle, Value, WriteTransaction,
};

use super::handle::RedbStore;
use super::indexes;
use super::tables::{
    EVENTS, META, META_FEED, META_WAL_ID, PETS, RECORDS, REVISIONS, SESSIONS, WEBHOOKS, names,
};
use crate::store::events::new_feed_id;
use crate::store::model::StoreError;
use crate::store::ops::each_resource;
use crate::store::resource::{ForEach, Resource};

/// Entries copied between two looks at the cancel flag, and between two rests: after each
/// slice the copy sleeps as long as the slice took, so it works at most half the time. Run
/// flat out, even at the lowest CPU priority (SCHED_IDLE), back-to-back snapshots of 1.1M
/// pets (2 s each) cut 64 clients' creates to 0.37 of their rate with p99 3.6x on the
/// bench's one server core; paced (7-9 s each), p99 0.95x and the same rate (benches/load,
/// `snapshot`).
const CANCEL_EVERY: usize = 4096;
/// The page cache of the copy being written: it is only written, once.
const COPY_CACHE_BYTES: usize = 8 << 20;
/// The page cache of a second process reading the live file: each page is read about once.
const LIVE_CACHE_BYTES: usize = 16 << 20;

impl RedbStore {
    /// Writes the store as one read transaction sees it into a new redb file at `to`, which
    /// must not exist, and makes it durable; returns the number of pets it holds. Blocking:
    /// runs on a thread of its own. Stops with `Closed` soon after `cancel` is set.
    pub(in crate::store) fn snapshot_to(
        &self,
        to: &Path,
        cancel: &AtomicBool,
    ) -> Result<u64, StoreError> {
        // Counted before the read transaction begins and until it ends, for the writer.
        let _copying = Copying::start(&self.shared.copying);
        // The guard is let go once the transaction has begun: a transaction outlives the
        // handle, so a reopen or the close at shutdown never waits for a snapshot (its reads
        // then fail with `DatabaseClosed`, and the snapshot with them).
        if self.shared.shared_file {
            // A handle of its own, with its own page cache: the copy reads every page once,
            // which through the server's cache would push out the pages its requests use.
            let db = open_live(&self.shared.path)?;
            let txn = db.begin_read().map_err(StoreError::storage)?;
            return write_copy(&txn, to, cancel);
        }
        let txn = {
            let db = self.shared.db();
            let db = db.as_ref().ok_or(StoreError::Reopening)?;
            db.begin_read().map_err(StoreError::storage)?
        };
        write_copy(&txn, to, cancel)
    }
}

/// One snapshot in `Shared::copying`, from `start` until dropped: the writer commits without
/// quick-repair meanwhile (`writer::write_batch` says why).
struct Copying<'a>(&'a AtomicUsize);

impl<'a> Copying<'a> {
    fn start(count: &'a AtomicUsize) -> Copying<'a> {
        count.fetch_add(1, Ordering::Relaxed);
        Copying(count)
    }
}

impl Drop for Copying<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// `petstore backup`, from a second process: opens the live file read-only beside the server
/// that writes it (redb's `SingleWriter` mode, which the server opens it in) and writes the
/// state one read transaction sees into a new redb file at `to`, which must not exist; returns
/// the number of pets. The server never waits for it; while it reads, redb keeps the pages it
/// sees from reuse, as for a snapshot taken in the server.
pub fn backup_live(from: &Path, to: &Path) -> Result<u64, StoreError> {
    let db = open_live(from)?;
    let txn = db.begin_read().map_err(StoreError::storage)?;
    write_copy(&txn, to, &AtomicBool::new(false))
}

/// Opens `path` read-only as a second process beside a running server, or a cleanly closed
/// file. `Locked`: a process that does not share the file has it open (a petstore before
/// shared reads, or a `petstore check` of the stopped file).
pub(in crate::store) fn open_live(path: &Path) -> Result<ReadOnlyDatabase, StoreError> {
    if let Err(e) = std::fs::metadata(path) {
        return Err(StoreError::Io(format!("{}: {e}", path.display())));
    }
    Database::builder()
        .set_cache_size(LIVE_CACHE_BYTES)
        .set_concurrency_mode(ConcurrencyMode::SingleWriter)
        .open_read_only(path)
        .map_err(|e| match e {
            redb::DatabaseError::DatabaseAlreadyOpen => StoreError::Locked,
            redb::DatabaseError::RepairAborted => StoreError::Io(format!(
                "{} was left mid-commit (a crash?) and no server has it open to repair it: start \
                 petstore on it, which repairs it, or check a copy of it",
                path.display()
            )),
            e => StoreError::storage(e),
        })
}

/// Writes every table as `txn` sees it into a new redb file at `to` and makes it durable;
/// returns the number of pets. Stops with `Closed` soon after `cancel` is set.
fn write_copy(txn: &ReadTransaction, to: &Path, cancel: &AtomicBool) -> Result<u64, StoreError> {
    known_tables_only(txn)?;
    let out = Database::builder()
        .set_cache_size(COPY_CACHE_BYTES)
        .create(to)
        .map_err(StoreError::storage)?;
    let write = out.begin_write().map_err(StoreError::storage)?;
    let pets = copy_table(txn, &write, PETS, cancel)?;
    copy_table(txn, &write, REVISIONS, cancel)?;
    copy_table(txn, &write, META, cancel)?;
    copy_table(txn, &write, RECORDS, cancel)?;
    copy_table(txn, &write, EVENTS, cancel)?;
    // Every other resource's records, and every index: as their declarations name them.
    struct Declared<'a> {
        from: &'a ReadTransaction,
        to: &'a WriteTransaction,
        cancel: &'a AtomicBool,
    }
    impl ForEach for Declared<'_> {
        fn visit<R: Resource>(&mut self) -> Result<(), StoreError> {
            if R::TABLE != PETS.name() {
                copy_table(self.from, self.to, indexes::records::<R>(), self.cancel)?;
            }
            for index in R::INDEXES {
                copy_table(self.from, self.to, indexes::table(index), self.cancel)?;
            }
            Ok(())
        }
    }
    let (from, to) = (txn, &write);
    each_resource(&mut Declared { from, to, cancel })?;
    // Restored, its endpoints' positions are of the old feed: each is stopped until enabled
    // (`webhook::deliver`), never sent a renumbered event as if it were the next.
    copy_table(txn, &write, WEBHOOKS, cancel)?;
    // Restored, a session still admits only while its key is in force.
    copy_table(txn, &write, SESSIONS, cancel)?;
    {
        let mut meta = write.open_table(META).map_err(StoreError::storage)?;
        // A copy keeps the events but is a feed of its own: restored, it will number new
        // events as the live file already did, so a client's cursor from the live server gets
        // 410 there, never a replay of other events under the same numbers.
        meta.insert(META_FEED, new_feed_id())
            .map_err(StoreError::storage)?;
        // The copy holds every batch its read transaction saw, in itself: it has no log.
        meta.remove(META_WAL_ID).map_err(StoreError::storage)?;
    }
    // The commit writes and syncs the whole copy: not begun for a stop that is waiting.
    if cancel.load(Ordering::Relaxed) {
        return Err(StoreError::Closed);
    }
    write.commit().map_err(StoreError::storage)?;
    out.close().map_err(StoreError::storage)?;
    Ok(pets)
}

/// Refuses a file with a table the snapshot does not copy: a snapshot missing a table would
/// restore as a store missing it. A new table must be added to `snapshot_to`.
fn known_tables_only(txn: &ReadTransaction) -> Result<(), StoreError> {
    let known = names();
    let tables = txn.list_tables().map_err(StoreError::storage)?;
    for table in tables {
        if !known.contains(&table.name()) {
            return Err(StoreError::Corrupt(format!(
                "table {:?} is not one a snapshot copies",
                table.name()
            )));
        }
    }
    let mut multimaps = txn.list_multimap_tables().map_err(StoreError::storage)?;
    if let Some(table) = multimaps.next() {
        return Err(StoreError::Corrupt(format!(
            "multimap table {:?} is not one a snapshot copies",
            table.name()
        )));
    }
    Ok(())
}

/// Copies one table, in key order (each insert appends to the copy's last leaf); a table the
/// live file lacks is left out. Returns the number of entries copied.
fn copy_table<K: Key + 'static, V: Value + 'static>(
    from: &ReadTransaction,
    to: &WriteTransaction,
    definition: TableDefinition<K, V>,
    cancel: &AtomicBool,
) -> Result<u64, StoreError> {
    let source = match from.open_table(definition) {
        Ok(table) => table,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(0),
        Err(e) => return Err(StoreError::storage(e)),
    };
    let mut target = to.open_table(definition).map_err(StoreError::storage)?;
    let mut copied = 0u64;
    let mut slice = std::time::Instant::now();
    for (n, entry) in source.iter().map_err(StoreError::storage)?.enumerate() {
        if n % CANCEL_EVERY == 0 {
            if cancel.load(Ordering::Relaxed) {
                return Err(StoreError::Closed);
            }
            // Paced: as long a rest as the work before it (see `CANCEL_EVERY`).
            std::thread::sleep(slice.elapsed());
            slice = std::time::Instant::now();
        }
        let (key, value) = entry.map_err(StoreError::storage)?;
        target
            .insert(key.value(), value.value())
            .map_err(StoreError::storage)?;
        copied += 1;
    }
    Ok(copied)
}
