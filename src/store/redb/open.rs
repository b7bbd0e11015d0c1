//! Opening the redb file: its page cache and sharing mode, redb's repair of a file left
//! mid-commit, the layout's creation and its upgrade from versions 3 to 5 (every declared
//! index written anew from the records, `redb/indexes.rs`, and the inventory), the refusal of a
//! file this build cannot open (a newer layout, an older one, an earlier petstore's log still
//! expected), and what the writer and the reads start from (pets, idempotency records, the
//! last batch). After a write failed, the file is read from the disk, never from pages the
//! page cache may hold without the disk having them.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;

use redb::{Database, ReadableDatabase, ReadableTable, ReadableTableMetadata};

use super::file::Filled;
use super::idempotency::{self, Index};
use super::indexes;
use super::tables::{
    EVENTS, META, META_BATCH, META_FEED, META_INVENTORY, META_LOG_EPOCH, META_NEXT_ID,
    META_SCHEMA_VERSION, OLDEST_UPGRADED, PETS, RECORDS, REVISIONS, SCHEMA_VERSION, SESSIONS,
    WEBHOOKS, begin, meta_value,
};
use crate::clock::unix_now;
use crate::store::events::new_feed_id;
use crate::store::model::read_pet;
use crate::store::model::{Inventory, StoreError};
use crate::store::ops::{all_indexes, each_resource};
use crate::store::resource::{ForEach, Resource};

/// Why the file is being opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Opening {
    /// The process is starting.
    Start,
    /// A write failed on I/O and the old handle is closed.
    AfterFailure,
}

/// The file, open and ready.
pub(super) struct Opened {
    pub(super) db: Database,
    pub(super) pets: u64,
    /// Its live idempotency records.
    pub(super) index: Index,
    /// The number of the last batch it holds.
    pub(super) batch: u64,
    /// The write-ahead log it names, replayed into it: the log's id and what was found
    /// (`None`: it names none).
    pub(super) wal: Option<(u64, super::log::Recovered)>,
}

/// Opens (or creates) the database file and prepares it. A file left mid-commit (a crash, a
/// failed write) is repaired by redb as it opens. `shared`: other processes may open the file
/// read-only meanwhile (`petstore backup`, `check`).
pub(super) fn open_database(
    path: &Path,
    cache_bytes: usize,
    shared: bool,
    opening: Opening,
) -> Result<Opened, StoreError> {
    super::handle::contain("opening the file", || {
        open_checked(path, cache_bytes, shared, opening)
    })
    .map_err(|e| match e {
        // One line that says what to do: the start stops on it, a reopen logs it.
        StoreError::Corrupt(what) => StoreError::Corrupt(format!(
            "{what}; the file is damaged: run `petstore check --db {}` to see what is left, \
             and restore the newest snapshot (docs/operations.md, Backups and restore)",
            path.display()
        )),
        e => e,
    })
}

fn open_checked(
    path: &Path,
    cache_bytes: usize,
    shared: bool,
    opening: Opening,
) -> Result<Opened, StoreError> {
    let mut builder = Database::builder();
    builder.set_cache_size(cache_bytes);
    if shared {
        // Each read transaction then also takes a byte-range lock, and each commit looks for
        // the oldest reader in any process; measured on creates and list20 (docs: storage).
        builder.set_concurrency_mode(redb::ConcurrencyMode::SingleWriter);
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(StoreError::storage)?;
    if opening == Opening::AfterFailure {
        forget_cached_pages(&file, path);
    }
    let file = Filled::new(file).map_err(StoreError::storage)?;
    let db = builder.create_with_backend(file).map_err(|e| match e {
        redb::DatabaseError::DatabaseAlreadyOpen => StoreError::Locked,
        e => StoreError::storage(e),
    })?;
    prepare(&db, path)?;
    read_every_end(&db)?;
    let wal = super::wal::replay_at_open(&db, path, !shared)?;
    let pets = count_pets(&db)?;
    let txn = db.begin_read().map_err(StoreError::storage)?;
    let records = txn.open_table(RECORDS).map_err(StoreError::storage)?;
    let index = Index::load(&records, unix_now())?;
    drop(records);
    drop(txn);
    let batch = last_batch(&db)?;
    Ok(Opened {
        db,
        pets,
        index,
        batch,
        wal,
    })
}

/// Reads the first and the last entry of every table: the pages a start and the first reads
/// and writes go through (each tree's root, its leftmost path and the rightmost one, where
/// every create appends), so damage there refuses the start, with what to do, instead of
/// failing the first request that meets it. A few pages a table, whatever the file's size; a
/// walk of every page is `petstore check`'s.
fn read_every_end(db: &Database) -> Result<(), StoreError> {
    struct Ends<'a>(&'a redb::ReadTransaction);
    impl Ends<'_> {
        fn of<K: redb::Key + 'static, V: redb::Value + 'static>(
            &self,
            table: redb::TableDefinition<K, V>,
        ) -> Result<(), StoreError> {
            let table = match self.0.open_table(table) {
                Ok(table) => table,
                Err(redb::TableError::TableDoesNotExist(_)) => return Ok(()),
                Err(e) => return Err(StoreError::storage(e)),
            };
            table.first().map_err(StoreError::storage)?;
            table.last().map_err(StoreError::storage)?;
            Ok(())
        }
    }
    impl ForEach for Ends<'_> {
        fn visit<R: Resource>(&mut self) -> Result<(), StoreError> {
            self.of(indexes::records::<R>())?;
            R::INDEXES
                .iter()
                .try_for_each(|index| self.of(indexes::table(index)))
        }
    }
    let txn = db.begin_read().map_err(StoreError::storage)?;
    let mut ends = Ends(&txn);
    // `meta` and the idempotency records are read whole by the open anyway.
    ends.of(REVISIONS)?;
    ends.of(EVENTS)?;
    ends.of(WEBHOOKS)?;
    ends.of(SESSIONS)?;
    each_resource(&mut ends)
}

/// Makes the next reads of `file` come from the disk. A page whose write-back failed stays in
/// the page cache, marked clean: read back, it shows what the disk never got, and a commit
/// built on it would point at data a power cut loses (the fsync-after-error trap). Pages
/// still dirty are written first (an error there is the failure already being handled);
/// then every clean page is dropped.
fn forget_cached_pages(file: &File, path: &Path) {
    let _ = file.sync_data();
    // SAFETY: posix_fadvise reads nothing through the pointer-free arguments; the descriptor
    // is open for the whole call.
    let advised = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if advised != 0 {
        tracing::warn!(
            error = %std::io::Error::from_raw_os_error(advised),
            file = %path.display(),
            "dropping the file's cached pages failed; it is read back as the page cache holds it"
        );
    }
}

/// The last commit whose build opens every earlier file: it upgrades layouts 1 and 2 and
/// replays the old write-ahead log, which this build no longer does.
const LAST_UPGRADING_BUILD: &str = "4a29a84";

/// Creates the tables on a new file, adds those of this version to one of version 3 or 4, and
/// refuses any other (`require_openable`). A file that is already current is only read, so a
/// start costs no commit and a full disk does not stop it.
fn prepare(db: &Database, path: &Path) -> Result<(), StoreError> {
    let txn = db.begin_read().map_err(StoreError::storage)?;
    let version = match txn.open_table(META) {
        Ok(meta) => require_openable(&meta, path)?,
        Err(redb::TableError::TableDoesNotExist(_)) => None,
        Err(e) => return Err(StoreError::storage(e)),
    };
    if version == Some(SCHEMA_VERSION) {
        return Ok(());
    }
    drop(txn);
    create_tables(db, version)
}

/// The schema version of the file at `path`, whose `meta` table is `meta` (`None`: not
/// recorded, a file being created); refused, with what to do, when this build cannot open the
/// file as it is: a newer layout, one older than `OLDEST_UPGRADED`, or a file that still
/// expects the write-ahead log an earlier petstore kept beside it. `petstore check` refuses
/// the same files with the same words.
pub(super) fn require_openable(
    meta: &impl ReadableTable<&'static str, u64>,
    path: &Path,
) -> Result<Option<u64>, StoreError> {
    let version = meta
        .get(META_SCHEMA_VERSION)
        .map_err(StoreError::storage)?
        .map(|v| v.value());
    let earlier = |what: String, done: &str| {
        StoreError::OlderFile(format!(
            "{what}: run a petstore built from commit {LAST_UPGRADING_BUILD} on it once (it \
             {done} as it starts; stop it once it serves), then this one opens it"
        ))
    };
    match version {
        Some(found) if found > SCHEMA_VERSION => Err(StoreError::NewerSchema {
            found,
            supported: SCHEMA_VERSION,
        }),
        Some(found) if found < OLDEST_UPGRADED => Err(earlier(
            format!(
                "the file is at schema version {found}, which this petstore no longer upgrades \
                 (it opens versions {OLDEST_UPGRADED} to {SCHEMA_VERSION})"
            ),
            "upgrades the file",
        )),
        // Set only by the builds that kept the log; 0 or absent in every file since.
        _ if meta_value(meta, META_LOG_EPOCH)? != 0 => Err(earlier(
            format!(
                "the file still expects the write-ahead log an earlier petstore kept beside it \
                 ({}-wal), which this petstore no longer replays",
                path.display()
            ),
            "replays the log and removes it",
        )),
        _ => Ok(version),
    }
}

fn count_pets(db: &Database) -> Result<u64, StoreError> {
    let txn = db.begin_read().map_err(StoreError::storage)?;
    txn.open_table(PETS)
        .and_then(|pets| Ok(pets.len()?))
        .map_err(StoreError::storage)
}

/// Creates every table that is missing and records this schema version. On a file of an
/// earlier version (`found`) the tables it has are kept as they are, `next_id` included,
/// except its indexes: deleted by name (version 5 kept each with a table type of its own), made
/// anew and written from the records (`indexes::rebuild`), and the inventory counted.
fn create_tables(db: &Database, found: Option<u64>) -> Result<(), StoreError> {
    let txn = begin(db, true)?;
    {
        let mut meta = txn.open_table(META).map_err(StoreError::storage)?;
        if meta
            .get(META_NEXT_ID)
            .map_err(StoreError::storage)?
            .is_none()
        {
            meta.insert(META_NEXT_ID, 1).map_err(StoreError::storage)?;
        }
        meta.insert(META_SCHEMA_VERSION, SCHEMA_VERSION)
            .map_err(StoreError::storage)?;
        // A file older than the feed starts one: its changes so far have no events.
        if meta_value(&meta, META_FEED)? == 0 {
            meta.insert(META_FEED, new_feed_id())
                .map_err(StoreError::storage)?;
        }
        drop(meta);
        txn.open_table(EVENTS).map_err(StoreError::storage)?;
        txn.open_table(REVISIONS).map_err(StoreError::storage)?;
        idempotency::create_tables(&txn)?;
        if found.is_some() {
            for index in all_indexes() {
                let old: redb::TableDefinition<'_, u64, u64> =
                    redb::TableDefinition::new(index.name);
                txn.delete_table(old).map_err(StoreError::storage)?;
            }
        }
        create_declared(&txn)?;
        if found.is_some() {
            indexes::rebuild(&txn)?;
            count_inventory(&txn)?;
        }
    }
    txn.commit().map_err(StoreError::storage)
}

/// Creates the table of every declared resource and index that is missing.
pub(super) fn create_declared(txn: &redb::WriteTransaction) -> Result<(), StoreError> {
    struct Create<'t>(&'t redb::WriteTransaction);
    impl ForEach for Create<'_> {
        fn visit<R: Resource>(&mut self) -> Result<(), StoreError> {
            let e = StoreError::storage;
            self.0.open_table(indexes::records::<R>()).map_err(e)?;
            for index in R::INDEXES {
                self.0.open_table(indexes::table(index)).map_err(e)?;
            }
            Ok(())
        }
    }
    each_resource(&mut Create(txn))
}

/// Sets the inventory's counters from the pets, for a file of version 3 or 4 or an import:
/// one pass over the pets.
pub(super) fn count_inventory(txn: &redb::WriteTransaction) -> Result<(), StoreError> {
    let pets = txn.open_table(PETS).map_err(StoreError::storage)?;
    let mut inventory = Inventory::default();
    for entry in pets.iter().map_err(StoreError::storage)? {
        let (id, json) = entry.map_err(StoreError::storage)?;
        let pet = read_pet(id.value(), json.value())?;
        *inventory.count_mut(pet.status) += 1;
    }
    let mut meta = txn.open_table(META).map_err(StoreError::storage)?;
    let counts = [
        inventory.available,
        inventory.pending,
        inventory.sold,
        inventory.unset,
    ];
    for (key, count) in META_INVENTORY.into_iter().zip(counts) {
        meta.insert(key, count).map_err(StoreError::storage)?;
    }
    Ok(())
}

/// The number of the last batch committed to `db`.
fn last_batch(db: &Database) -> Result<u64, StoreError> {
    let txn = db.begin_read().map_err(StoreError::storage)?;
    let meta = txn.open_table(META).map_err(StoreError::storage)?;
    Ok(meta
        .get(META_BATCH)
        .map_err(StoreError::storage)?
        .map_or(0, |v| v.value()))
}
