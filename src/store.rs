//! The pet database: the redb tables `PETS`, `PETS_BY_STATUS` and `META`, opening and version
//! checks, and the three operations `create`, `get` and `list`. It knows pets and bytes, never
//! HTTP. Invariants: every write goes through the one writer thread, which commits durably
//! before it answers; ids start at 1, only grow, and the next id is committed with the pets it
//! follows, so no acknowledged id is reused even after a crash. A write that fails on I/O makes
//! the writer close and reopen the file in place, so writes resume once the disk recovers.
//! The writer thread lives in `store/writer.rs`, the snapshot reads share in
//! `store/snapshot.rs`.

use std::fmt;
use std::path::Path;
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::thread;

use bytes::{BufMut, Bytes, BytesMut};
use redb::{Database, ReadableDatabase, ReadableTableMetadata, TableDefinition};
use tokio::sync::{mpsc, oneshot};

use crate::pet::{NewPet, PetId, PetStatus};

mod snapshot;
mod writer;

use snapshot::{Snapshot, Snapshots};
use writer::{Writer, write_loop};

/// Pet id to the pet's JSON object, exactly as the API sends it.
const PETS: TableDefinition<i64, &[u8]> = TableDefinition::new("pets");
/// (status code, pet id) for every pet that has a status: a status filter is a range scan.
/// A covering index: the JSON is kept here too, so a status filter is one range scan whatever
/// the store's size, instead of a lookup in `PETS` per pet (measured in benches/load: the
/// lookups cost half the throughput and grew with the store).
const PETS_BY_STATUS: TableDefinition<(u8, i64), &[u8]> = TableDefinition::new("pets_by_status");
/// Counters and format facts, keyed by the names below.
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

const META_SCHEMA_VERSION: &str = "schema_version";
const META_NEXT_ID: &str = "next_id";
/// The layout of the tables above; a file from a newer layout is refused, not misread.
const SCHEMA_VERSION: u64 = 1;

/// Creates waiting for the writer before callers wait to enqueue.
const WRITE_QUEUE: usize = 4096;

/// A handle to the open database; cheap to clone, shared by every connection.
#[derive(Clone)]
pub struct Store {
    shared: Arc<Shared>,
    writer: mpsc::Sender<Command>,
}

/// What the writer thread shares with reads: the database it has open and the snapshot of it
/// that reads share.
struct Shared {
    /// `None` from a write that failed on I/O until the reopen succeeds, and after `close`.
    /// Reads hold the read lock for as long as they use the database, so the writer's write
    /// lock waits them out: no read ever runs on a database being closed.
    db: RwLock<Option<Database>>,
    snapshots: Snapshots,
}

impl Shared {
    fn db(&self) -> RwLockReadGuard<'_, Option<Database>> {
        self.db.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes the database out, for the caller to close; reads get `Reopening` or `Closed` until
    /// one is put back.
    fn take_db(&self) -> Option<Database> {
        let mut db = self.db_mut();
        // Counted like a commit, under the write lock: no read is running, and none can cache
        // a snapshot of the old database after this, so none is served again.
        self.snapshots.committed();
        db.take()
    }

    fn put_db(&self, db: Database) {
        *self.db_mut() = Some(db);
    }

    fn db_mut(&self) -> RwLockWriteGuard<'_, Option<Database>> {
        self.db.write().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A pet as the store keeps it: its id and its JSON object.
#[derive(Clone, Debug)]
pub struct StoredPet {
    pub id: PetId,
    pub json: Bytes,
}

/// Why the store could not do what was asked.
#[derive(Clone, Debug)]
pub enum StoreError {
    /// Another process has the file open.
    Locked,
    /// The file was written by a newer petstore.
    NewerSchema { found: u64 },
    /// The store is shutting down and takes no more writes.
    Closed,
    /// Every int64 id has been used.
    IdsExhausted,
    /// A write failed on I/O and the database is not open again yet; the writer retries the
    /// reopen at the next create.
    Reopening,
    /// A write transaction failed; nothing of it was committed.
    Write(Arc<redb::Error>),
    /// Opening or reading failed.
    Storage(Arc<redb::Error>),
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Locked => f.write_str("the database is in use by another process"),
            StoreError::NewerSchema { found } => write!(
                f,
                "the database has schema version {found}, newer than the {SCHEMA_VERSION} this petstore understands"
            ),
            StoreError::Closed => f.write_str("the store is closed"),
            StoreError::IdsExhausted => f.write_str("every pet id has been used"),
            StoreError::Reopening => {
                f.write_str("the database is being reopened after a failed write")
            }
            StoreError::Write(e) => write!(f, "write failed: {e}"),
            StoreError::Storage(e) => write!(f, "storage error: {e}"),
        }
    }
}

impl std::error::Error for StoreError {}

impl StoreError {
    fn storage(e: impl Into<redb::Error>) -> StoreError {
        StoreError::Storage(Arc::new(e.into()))
    }

    fn write(e: impl Into<redb::Error>) -> StoreError {
        StoreError::Write(Arc::new(e.into()))
    }

    /// Whether this write failed on I/O. redb then refuses every later write (`PreviousIo`,
    /// also what a read that failed on I/O leaves behind) until the database is reopened.
    fn is_io_failure(&self) -> bool {
        matches!(self, StoreError::Write(e) if matches!(**e, redb::Error::Io(_) | redb::Error::PreviousIo))
    }

    /// Whether a read failed because the disk did (an I/O error now, or one a failed write
    /// left behind until the reopen): a condition to retry, not a fault in the data.
    pub fn is_disk_failure(&self) -> bool {
        matches!(self, StoreError::Storage(e) if matches!(**e, redb::Error::Io(_) | redb::Error::PreviousIo))
    }
}

enum Command {
    Create(NewPet, oneshot::Sender<Result<StoredPet, StoreError>>),
    Close(oneshot::Sender<()>),
}

impl Store {
    /// Opens (or creates) the database at `path` with a page cache of at most `cache_bytes`,
    /// checks its schema version and starts the writer. Returns the store and the number of
    /// pets it holds.
    pub fn open(path: &Path, cache_bytes: usize) -> Result<(Store, u64), StoreError> {
        let (db, count) = open_database(path, cache_bytes)?;
        let shared = Arc::new(Shared {
            db: RwLock::new(Some(db)),
            snapshots: Snapshots::default(),
        });
        let (writer, queue) = mpsc::channel(WRITE_QUEUE);
        let mut thread_writer = Writer::new(Arc::clone(&shared), path, cache_bytes);
        thread::Builder::new()
            .name("petstore-writer".into())
            .spawn(move || {
                if let Some(done) = write_loop(&mut thread_writer, queue) {
                    let _ = done.send(());
                }
            })
            .map_err(|e| StoreError::storage(redb::StorageError::Io(e)))?;
        Ok((Store { shared, writer }, count))
    }

    /// Adds a pet; resolves once the transaction holding it is durably committed.
    pub async fn create(&self, pet: NewPet) -> Result<StoredPet, StoreError> {
        let (reply, answer) = oneshot::channel();
        self.writer
            .send(Command::Create(pet, reply))
            .await
            .map_err(|_| StoreError::Closed)?;
        answer.await.map_err(|_| StoreError::Closed)?
    }

    /// The pet with this id, as its JSON object.
    pub async fn get(&self, id: PetId) -> Result<Option<Bytes>, StoreError> {
        self.read(move |snapshot| {
            let pet = snapshot.pets.get(id).map_err(StoreError::storage)?;
            Ok(pet.map(|json| Bytes::copy_from_slice(json.value())))
        })
        .await
    }

    /// Up to `limit` pets in ascending id order, only those with `status` if one is given, as
    /// one JSON array built from the stored objects without decoding them.
    pub async fn list(&self, status: Option<PetStatus>, limit: usize) -> Result<Bytes, StoreError> {
        self.read(move |snapshot| {
            let mut array = JsonArray::new();
            match status {
                None => {
                    for entry in snapshot
                        .pets
                        .range::<i64>(..)
                        .map_err(StoreError::storage)?
                        .take(limit)
                    {
                        array.push(entry.map_err(StoreError::storage)?.1.value());
                    }
                }
                Some(status) => {
                    let code = status.to_code();
                    let entries = snapshot
                        .by_status
                        .range((code, i64::MIN)..=(code, i64::MAX))
                        .map_err(StoreError::storage)?;
                    for entry in entries.take(limit) {
                        array.push(entry.map_err(StoreError::storage)?.1.value());
                    }
                }
            }
            Ok(array.finish())
        })
        .await
    }

    /// Whether the store can serve: the writer is running and the database answers a read.
    pub async fn check(&self) -> Result<(), StoreError> {
        if self.writer.is_closed() {
            return Err(StoreError::Closed);
        }
        let db = self.shared.db();
        let db = db.as_ref().ok_or(StoreError::Reopening)?;
        // A fresh transaction, not the shared snapshot: this asks whether the file reads now.
        let txn = db.begin_read().map_err(StoreError::storage)?;
        let meta = txn.open_table(META).map_err(StoreError::storage)?;
        meta.get(META_NEXT_ID).map_err(StoreError::storage)?;
        Ok(())
    }

    /// Finishes the writes already queued, stops the writer and closes the file. Writes and
    /// reads asked for afterwards fail with `Closed`.
    pub async fn close(self) {
        let (done, closed) = oneshot::channel();
        if self.writer.send(Command::Close(done)).await.is_ok() {
            let _ = closed.await;
        }
        if let Some(db) = self.shared.take_db()
            && let Err(e) = db.close()
        {
            tracing::warn!(error = %e, "closing the database failed");
        }
    }

    /// Runs a read on the calling task. Reads come from redb's page cache or the OS page
    /// cache, a few microseconds; handing them to a blocking thread cost more than the read on
    /// a one-core server (see benches/load). A read that must wait on the disk stalls this
    /// worker for that wait, a trade accepted for a store that fits in memory.
    async fn read<T>(
        &self,
        work: impl FnOnce(&Snapshot) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        // Held until the work is done, so that a reopen waits for this read to end.
        let db = self.shared.db();
        let Some(db) = db.as_ref() else {
            return Err(if self.writer.is_closed() {
                StoreError::Closed
            } else {
                StoreError::Reopening
            });
        };
        work(&*self.shared.snapshots.get(db)?)
    }
}

/// Opens (or creates) the database file and prepares it; returns it and its number of pets.
/// A file left mid-commit (a crash, a failed write) is repaired by redb as it opens.
fn open_database(path: &Path, cache_bytes: usize) -> Result<(Database, u64), StoreError> {
    let db = Database::builder()
        .set_cache_size(cache_bytes)
        .create(path)
        .map_err(|e| match e {
            redb::DatabaseError::DatabaseAlreadyOpen => StoreError::Locked,
            e => StoreError::storage(e),
        })?;
    let count = prepare(&db)?;
    Ok((db, count))
}

/// Creates the tables on a new file, refuses a newer schema, and counts the pets. A file that
/// is already set up is only read, so a start costs no commit.
fn prepare(db: &Database) -> Result<u64, StoreError> {
    let txn = db.begin_read().map_err(StoreError::storage)?;
    let version = match txn.open_table(META) {
        Ok(meta) => meta
            .get(META_SCHEMA_VERSION)
            .map_err(StoreError::storage)?
            .map(|v| v.value()),
        Err(redb::TableError::TableDoesNotExist(_)) => None,
        Err(e) => return Err(StoreError::storage(e)),
    };
    match version {
        Some(found) if found > SCHEMA_VERSION => Err(StoreError::NewerSchema { found }),
        Some(_) => txn
            .open_table(PETS)
            .and_then(|pets| Ok(pets.len()?))
            .map_err(StoreError::storage),
        None => {
            drop(txn);
            create_tables(db)?;
            Ok(0)
        }
    }
}

fn create_tables(db: &Database) -> Result<(), StoreError> {
    let txn = db.begin_write().map_err(StoreError::storage)?;
    {
        let mut meta = txn.open_table(META).map_err(StoreError::storage)?;
        meta.insert(META_SCHEMA_VERSION, SCHEMA_VERSION)
            .map_err(StoreError::storage)?;
        meta.insert(META_NEXT_ID, 1).map_err(StoreError::storage)?;
        txn.open_table(PETS_BY_STATUS)
            .map_err(StoreError::storage)?;
        txn.open_table(PETS).map_err(StoreError::storage)?;
    }
    txn.commit().map_err(StoreError::storage)
}

/// A JSON array assembled from already-encoded objects.
struct JsonArray(BytesMut);

impl JsonArray {
    fn new() -> JsonArray {
        let mut buf = BytesMut::with_capacity(2048);
        buf.put_u8(b'[');
        JsonArray(buf)
    }

    fn push(&mut self, object: &[u8]) {
        if self.0.len() > 1 {
            self.0.put_u8(b',');
        }
        self.0.extend_from_slice(object);
    }

    fn finish(mut self) -> Bytes {
        self.0.put_u8(b']');
        self.0.freeze()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEST_CACHE_BYTES: usize = 1 << 20;

    fn new_pet(name: &str, status: Option<PetStatus>) -> NewPet {
        NewPet {
            name: name.into(),
            category_id: 1,
            status,
        }
    }

    fn snapshot(store: &Store) -> Arc<Snapshot> {
        let db = store.shared.db();
        let db = db.as_ref().expect("the database is open");
        store.shared.snapshots.get(db).expect("snapshot")
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a current-thread runtime builds")
    }

    #[test]
    fn ids_start_at_one_and_survive_reopening() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("pets.redb");
        runtime().block_on(async {
            let (store, count) = Store::open(&path, TEST_CACHE_BYTES).expect("open");
            assert_eq!(count, 0);
            assert_eq!(
                store.create(new_pet("a", None)).await.expect("create").id,
                1
            );
            assert_eq!(
                store.create(new_pet("b", None)).await.expect("create").id,
                2
            );
            store.close().await;

            let (store, count) = Store::open(&path, TEST_CACHE_BYTES).expect("reopen");
            assert_eq!(count, 2);
            let third = store.create(new_pet("c", None)).await.expect("create");
            assert_eq!(third.id, 3);
            assert_eq!(&third.json[..], br#"{"id":3,"name":"c","categoryId":1}"#);
            store.close().await;
        });
    }

    #[test]
    fn list_joins_stored_objects_and_filters_by_index() {
        let dir = tempfile::tempdir().expect("temp dir");
        runtime().block_on(async {
            let (store, _) = Store::open(&dir.path().join("pets.redb"), TEST_CACHE_BYTES).expect("open");
            for (name, status) in [("a", Some(PetStatus::Sold)), ("b", None), ("c", Some(PetStatus::Sold))] {
                store.create(new_pet(name, status)).await.expect("create");
            }
            let all = store.list(None, 2).await.expect("list");
            assert_eq!(&all[..], br#"[{"id":1,"name":"a","categoryId":1,"status":"sold"},{"id":2,"name":"b","categoryId":1}]"#);
            let sold = store.list(Some(PetStatus::Sold), 20).await.expect("list");
            let sold: serde_json::Value = serde_json::from_slice(&sold).expect("json");
            assert_eq!(sold.as_array().map(|a| a.iter().map(|p| p["id"].clone()).collect::<Vec<_>>()), Some(vec![1.into(), 3.into()]));
            assert_eq!(&store.list(Some(PetStatus::Pending), 20).await.expect("list")[..], b"[]");
            assert!(store.get(2).await.expect("get").is_some());
            assert!(store.get(4).await.expect("get").is_none());
            store.close().await;
        });
    }

    #[test]
    fn reads_share_a_snapshot_until_a_commit_and_then_see_it() {
        let dir = tempfile::tempdir().expect("temp dir");
        runtime().block_on(async {
            let (store, _) =
                Store::open(&dir.path().join("pets.redb"), TEST_CACHE_BYTES).expect("open");
            assert_eq!(&store.list(None, 20).await.expect("list")[..], b"[]");
            let first = snapshot(&store);
            assert!(Arc::ptr_eq(&first, &snapshot(&store)));
            for expected in 1..=3 {
                let pet = store
                    .create(new_pet("a", Some(PetStatus::Sold)))
                    .await
                    .expect("create");
                assert!(
                    store.get(pet.id).await.expect("get").is_some(),
                    "read after the 201"
                );
                let sold = store.list(Some(PetStatus::Sold), 20).await.expect("list");
                let sold: serde_json::Value = serde_json::from_slice(&sold).expect("json");
                assert_eq!(sold.as_array().map(Vec::len), Some(expected));
            }
            assert!(!Arc::ptr_eq(&first, &snapshot(&store)));
            store.close().await;
        });
    }

    #[test]
    fn a_second_open_of_the_same_file_is_refused() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("pets.redb");
        runtime().block_on(async {
            let (store, _) = Store::open(&path, TEST_CACHE_BYTES).expect("open");
            assert!(matches!(
                Store::open(&path, TEST_CACHE_BYTES),
                Err(StoreError::Locked)
            ));
            store.close().await;
        });
    }

    #[test]
    fn a_newer_schema_is_refused() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("pets.redb");
        {
            let db = Database::create(&path).expect("create");
            let txn = db.begin_write().expect("write");
            txn.open_table(META)
                .expect("meta")
                .insert(META_SCHEMA_VERSION, SCHEMA_VERSION + 1)
                .expect("insert");
            txn.commit().expect("commit");
        }
        assert!(matches!(
            Store::open(&path, TEST_CACHE_BYTES),
            Err(StoreError::NewerSchema { found: 2 })
        ));
    }

    #[test]
    fn a_reopen_keeps_every_pet_serves_a_fresh_snapshot_and_ids_go_on() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("pets.redb");
        runtime().block_on(async {
            let (store, _) = Store::open(&path, TEST_CACHE_BYTES).expect("open");
            for name in ["a", "b"] {
                store.create(new_pet(name, None)).await.expect("create");
            }
            let before = snapshot(&store);
            // The writer thread is idle between creates, so this stands in for it.
            Writer::new(Arc::clone(&store.shared), &path, TEST_CACHE_BYTES).reopen();
            assert!(
                !Arc::ptr_eq(&before, &snapshot(&store)),
                "no snapshot of the old database"
            );
            drop(before);
            let all: serde_json::Value =
                serde_json::from_slice(&store.list(None, 20).await.expect("list")).expect("json");
            assert_eq!(all.as_array().map(Vec::len), Some(2), "{all}");
            assert_eq!(
                store.create(new_pet("c", None)).await.expect("create").id,
                3
            );
            assert!(store.check().await.is_ok());
            store.close().await;
        });
    }

    #[test]
    fn a_failed_reopen_refuses_reads_and_writes_until_the_next_create_retries_it() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("pets.redb");
        runtime().block_on(async {
            let (store, _) = Store::open(&path, TEST_CACHE_BYTES).expect("open");
            store.create(new_pet("a", None)).await.expect("create");
            // As a failed reopen leaves it: the database out, and the file not openable (here
            // held by another handle, as a disk still failing would refuse it).
            if let Some(db) = store.shared.take_db() {
                db.close().expect("close");
            }
            let blocker = Database::create(&path).expect("hold the file");
            assert!(matches!(
                store.create(new_pet("b", None)).await,
                Err(StoreError::Reopening)
            ));
            assert!(matches!(store.get(1).await, Err(StoreError::Reopening)));
            assert!(matches!(store.check().await, Err(StoreError::Reopening)));
            drop(blocker);
            std::thread::sleep(writer::REOPEN_INTERVAL);
            assert_eq!(
                store.create(new_pet("c", None)).await.expect("create").id,
                2
            );
            assert!(store.get(1).await.expect("get").is_some());
            store.close().await;
        });
    }

    #[test]
    fn ids_exhausted_leaves_the_database_open() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("pets.redb");
        runtime().block_on(async {
            let (store, _) = Store::open(&path, TEST_CACHE_BYTES).expect("open");
            store.close().await;
        });
        {
            let db = Database::create(&path).expect("open");
            let txn = db.begin_write().expect("write");
            txn.open_table(META)
                .expect("meta")
                .insert(META_NEXT_ID, i64::MAX as u64 + 1)
                .expect("insert");
            txn.commit().expect("commit");
        }
        runtime().block_on(async {
            let (store, _) = Store::open(&path, TEST_CACHE_BYTES).expect("open");
            let before = snapshot(&store);
            assert!(matches!(
                store.create(new_pet("a", None)).await,
                Err(StoreError::IdsExhausted)
            ));
            assert!(Arc::ptr_eq(&before, &snapshot(&store)), "not reopened");
            drop(before);
            store.close().await;
        });
    }

    #[test]
    fn only_a_write_that_failed_on_io_asks_for_a_reopen() {
        let io = || std::io::Error::other("disk on fire");
        assert!(StoreError::write(io()).is_io_failure());
        assert!(StoreError::write(redb::StorageError::PreviousIo).is_io_failure());
        assert!(!StoreError::write(redb::StorageError::ValueTooLarge(1)).is_io_failure());
        assert!(!StoreError::storage(io()).is_io_failure());
        assert!(!StoreError::IdsExhausted.is_io_failure());
        assert!(!StoreError::Reopening.is_io_failure());
    }

    #[test]
    fn writes_after_close_fail() {
        let dir = tempfile::tempdir().expect("temp dir");
        runtime().block_on(async {
            let (store, _) =
                Store::open(&dir.path().join("pets.redb"), TEST_CACHE_BYTES).expect("open");
            let other = store.clone();
            assert!(other.check().await.is_ok());
            store.close().await;
            assert!(matches!(
                other.create(new_pet("late", None)).await,
                Err(StoreError::Closed)
            ));
            assert!(
                matches!(other.check().await, Err(StoreError::Closed)),
                "a closed store is not healthy"
            );
        });
    }
}
