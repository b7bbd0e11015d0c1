//! The embedded engine: one redb file. Its parts: `handle.rs` (the open file the writer and
//! the reads share, and the reads), `tables.rs` (the tables no declaration names),
//! `indexes.rs` (the declared records and indexes, `store/resource.rs`), `open.rs` (open,
//! upgrade, repair, and the refusal of files it cannot open), `writer.rs` (the engine under
//! the write front), `logged.rs` (the one point a batch's table writes pass, and the replay),
//! `log.rs` and `wal.rs` (the write-ahead log's segments, and its life beside the file),
//! `idempotency.rs` (records and their index), `snapshot.rs` (the snapshot reads share),
//! `file.rs` (the file's zero-filled growth), and `backup.rs`, `check.rs`, `copy.rs` for the
//! subcommands. No redb type leaves this module.

pub(super) mod backup;
pub(super) mod check;
pub(super) mod copy;
mod file;
mod finds;
pub(super) mod handle;
mod idempotency;
mod indexes;
mod log;
mod logged;
mod open;
mod sales;
mod sessions;
mod snapshot;
mod tables;
mod txn;
mod wal;
pub(super) mod webhooks;
mod writer;

use std::path::Path;
use std::sync::Arc;

pub(super) use handle::RedbStore;
use handle::Shared;
use open::{Opening, open_database};
pub(super) use writer::Writer;

use super::model::StoreError;

/// Opens (or creates) the database at `path` with a page cache of at most `cache_bytes`,
/// checks its schema version and returns the read side, the writer for the write front, and
/// the number of pets. `shared`: whether other processes may open the file read-only while
/// this one writes (see `Location::Redb`).
pub(super) fn open(
    path: &Path,
    cache_bytes: usize,
    shared: bool,
) -> Result<(RedbStore, Writer, u64), StoreError> {
    let opened = open_database(path, cache_bytes, shared, Opening::Start)?;
    tracing::debug!(records = opened.index.len(), "idempotency records loaded");
    let pets = opened.pets;
    let shared = Arc::new(Shared::new(opened, path, cache_bytes, shared));
    shared.start_checkpoints()?;
    let writer = Writer::new(Arc::clone(&shared));
    Ok((RedbStore { shared }, writer, pets))
}

/// Asserts that the file of `store` (open alone, so with a log) as the disk holds it, with its
/// write-ahead log replayed, has every table as the live store has it: that every write of
/// every batch went through the log (`logged.rs`). The writer is held meanwhile, so that the
/// copy and the live tables are of the same batch.
#[cfg(test)]
pub(super) async fn assert_log_replays(store: &super::Store) {
    let super::Backend::Redb(redb) = &store.backend else {
        return;
    };
    let shared = &redb.shared;
    let Some(wal) = &shared.wal else { return };
    // A case that damaged its file, or closed its store itself, has nothing to compare.
    if handle::DAMAGED.replace(false) || shared.db().is_none() {
        return;
    }
    // No checkpoint, cut or preparation meanwhile; the close stops it anyway.
    wal.stop();
    let copy = tempfile::tempdir().expect("temp dir");
    let copied = copy.path().join("pets.redb");
    let live = {
        let _writer_held = wal.appender();
        let db = shared.db();
        let live = logged::dump(db.as_ref().expect("open"));
        std::fs::copy(&shared.path, &copied).expect("copy the file");
        let from = log::dir_of(&shared.path);
        let to = log::dir_of(&copied);
        std::fs::create_dir_all(&to).expect("log dir");
        for entry in std::fs::read_dir(&from).expect("the log") {
            let entry = entry.expect("an entry");
            std::fs::copy(entry.path(), to.join(entry.file_name())).expect("copy a segment");
        }
        live
    };
    let (replayed, _, _) = open(&copied, 1 << 20, false).expect("the copy opens");
    let db = replayed.shared.db();
    let again = logged::dump(db.as_ref().expect("open"));
    drop(db);
    for ((name, live), (_, again)) in live.iter().zip(&again) {
        assert!(
            live == again,
            "table {name}: {} rows live, {} replayed",
            live.len(),
            again.len()
        );
    }
    if let Some(wal) = &replayed.shared.wal {
        wal.stop();
    }
}

#[cfg(test)]
mod tests {
    use std::thread;

    use std::time::Duration;

    use crate::store::ops::any_revision::{deleting, moving, patching};
    use crate::store::ops::{CreateCategory, DeleteCategory, PatchCategory};

    use std::path::Path;
    use std::sync::Arc;

    use bytes::Bytes;
    use redb::{Database, ReadableDatabase};

    use super::handle::Shared;
    use super::snapshot::Snapshot;
    use super::tables::{META, META_NEXT_ID, META_SCHEMA_VERSION, PETS, REVISIONS, SCHEMA_VERSION};
    use super::writer;
    use super::*;
    use crate::clock::unix_now;
    use crate::pet::NewPet;
    use crate::pet::PetPatch;
    use crate::pet::PetStatus;
    use crate::search::{Search, Sort};
    use crate::store::PageQuery;
    use crate::store::model::StoreError;
    use crate::store::suite::{add, key, new_pet};
    use crate::store::{Backend, Created, Location, Store, Tuning};

    const TEST_CACHE_BYTES: usize = 1 << 20;
    const TTL: Duration = Duration::from_secs(3600);
    const TUNING: Tuning = Tuning {
        events_keep: crate::store::DEFAULT_EVENTS_KEEP,
        idempotency_ttl: TTL,
        max_write_batch: crate::store::DEFAULT_MAX_WRITE_BATCH,
        order_hold: None,
    };

    /// The store over the file at `path`, as the server opens it.
    async fn open(path: &Path, tuning: Tuning) -> Result<(Store, u64), StoreError> {
        open_as(path, false, tuning).await
    }

    async fn open_as(
        path: &Path,
        shared: bool,
        tuning: Tuning,
    ) -> Result<(Store, u64), StoreError> {
        let location = Location::Redb {
            path: path.to_owned(),
            cache_bytes: TEST_CACHE_BYTES,
            shared,
        };
        Store::open(location, tuning).await
    }

    /// What the reads and the writer share.
    fn shared(store: &Store) -> &Shared {
        match &store.backend {
            Backend::Redb(redb) => &redb.shared,
            Backend::Postgres(_) => unreachable!("a redb store"),
        }
    }

    /// Reopens the file as the writer does after a failed write.
    fn reopen(store: &Store) {
        shared(store).reopen();
    }

    fn snapshot(store: &Store) -> Arc<Snapshot> {
        let db = shared(store).db();
        let db = db.as_ref().expect("the database is open");
        shared(store).snapshots.get(db).expect("snapshot")
    }

    /// The first page's JSON.
    async fn list(
        store: &Store,
        status: Option<PetStatus>,
        limit: usize,
    ) -> Result<Bytes, StoreError> {
        store
            .list(status, None, None, limit)
            .await
            .map(|page| page.json)
    }

    /// A create of the pet `name` under the key of scope 1 and fingerprint 1.
    async fn keyed(store: &Store, name: &str) -> Result<Created, StoreError> {
        store
            .create(new_pet(name, None), Some(key(store, 1, 1)))
            .await
    }

    /// Runs `test` on a store over a new file in a temp dir, and closes the store after.
    fn on_fresh_store(test: impl AsyncFnOnce(&Store, &Path)) {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("pets.redb");
        runtime().block_on(async {
            let (store, _) = open(&path, TUNING).await.expect("open");
            test(&store, &path).await;
            store.close().await;
        });
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a current-thread runtime builds")
    }

    /// The writer leaves quick-repair off only while a snapshot copies: a snapshot counts as
    /// copying from before its read transaction begins, and one that ends, well or not, must
    /// not leave quick-repair off for good.
    #[test]
    fn a_snapshot_counts_as_copying_only_until_it_ends() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let dir = tempfile::tempdir().expect("temp dir");
        let copying = |store: &Store| shared(store).copying.load(Ordering::Relaxed);
        runtime().block_on(async {
            // Not shared: the snapshot reads through the server's own handle, so holding that
            // handle's lock stops it after it has counted itself and before it reads.
            let (store, _) = open_as(&dir.path().join("pets.redb"), false, TUNING)
                .await
                .expect("open");
            add(&store, new_pet("a", None)).await.expect("create");
            let copy = dir.path().join("copy.redb");
            let copied = thread::scope(|scope| {
                let held = shared(&store).db_mut();
                let snapshot = scope.spawn(|| store.snapshot_to(&copy, &AtomicBool::new(false)));
                let deadline = std::time::Instant::now() + Duration::from_secs(10);
                while copying(&store) == 0 && std::time::Instant::now() < deadline {
                    thread::sleep(Duration::from_millis(1));
                }
                assert_eq!(copying(&store), 1, "a waiting snapshot counts as copying");
                drop(held);
                snapshot.join().expect("the snapshot thread")
            });
            assert_eq!(copied.expect("snapshot"), 1);
            assert_eq!(copying(&store), 0);
            let cancelled =
                store.snapshot_to(&dir.path().join("cancelled.redb"), &AtomicBool::new(true));
            assert!(
                matches!(cancelled, Err(StoreError::Closed)),
                "{cancelled:?}"
            );
            assert_eq!(copying(&store), 0);
            // Writes still commit (with quick-repair again) after both.
            assert_eq!(add(&store, new_pet("b", None)).await.expect("create").id, 2);
            store.close().await;
        });
    }

    #[test]
    fn ids_start_at_one_and_survive_reopening() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("pets.redb");
        runtime().block_on(async {
            let (store, count) = open(&path, TUNING).await.expect("open");
            assert_eq!(count, 0);
            assert_eq!(add(&store, new_pet("a", None)).await.expect("create").id, 1);
            assert_eq!(add(&store, new_pet("b", None)).await.expect("create").id, 2);
            store.close().await;

            let (store, count) = open(&path, TUNING).await.expect("reopen");
            assert_eq!(count, 2);
            let third = add(&store, new_pet("c", None)).await.expect("create");
            assert_eq!(third.id, 3);
            assert_eq!(&third.json[..], br#"{"id":3,"name":"c","categoryId":1}"#);
            store.close().await;
        });
    }

    #[test]
    fn list_joins_stored_objects_and_filters_by_index() {
        on_fresh_store(async |store, _path| {
            for (name, status) in [
                ("a", Some(PetStatus::Sold)),
                ("b", None),
                ("c", Some(PetStatus::Sold)),
            ] {
                add(store, new_pet(name, status)).await.expect("create");
            }
            let all = list(store, None, 2).await.expect("list");
            assert_eq!(&all[..], br#"[{"id":1,"name":"a","categoryId":1,"status":"sold"},{"id":2,"name":"b","categoryId":1}]"#);
            let sold = list(store, Some(PetStatus::Sold), 20).await.expect("list");
            let sold: serde_json::Value = serde_json::from_slice(&sold).expect("json");
            assert_eq!(
                sold.as_array()
                    .map(|a| a.iter().map(|p| p["id"].clone()).collect::<Vec<_>>()),
                Some(vec![1.into(), 3.into()])
            );
            assert_eq!(
                &list(store, Some(PetStatus::Pending), 20)
                    .await
                    .expect("list")[..],
                b"[]"
            );
            assert!(store.get(2).await.expect("get").is_some());
            assert!(store.get(4).await.expect("get").is_none());
        });
    }

    #[test]
    fn reads_share_a_snapshot_until_a_commit_and_then_see_it() {
        on_fresh_store(async |store, _path| {
            assert_eq!(&list(store, None, 20).await.expect("list")[..], b"[]");
            let first = snapshot(store);
            assert!(Arc::ptr_eq(&first, &snapshot(store)));
            for expected in 1..=3 {
                let pet = add(store, new_pet("a", Some(PetStatus::Sold)))
                    .await
                    .expect("create");
                assert!(
                    store.get(pet.id).await.expect("get").is_some(),
                    "read after the 201"
                );
                let sold = list(store, Some(PetStatus::Sold), 20).await.expect("list");
                let sold: serde_json::Value = serde_json::from_slice(&sold).expect("json");
                assert_eq!(sold.as_array().map(Vec::len), Some(expected));
            }
            assert!(!Arc::ptr_eq(&first, &snapshot(store)));
        });
    }

    #[test]
    fn a_page_is_read_once_per_snapshot_and_a_change_is_listed_at_once() {
        on_fresh_store(async |store, _path| {
            for name in ["a", "b", "c"] {
                add(store, new_pet(name, None)).await.expect("create");
            }
            let first = list(store, None, 2).await.expect("list");
            let again = list(store, None, 2).await.expect("list");
            assert_eq!(
                first.as_ptr(),
                again.as_ptr(),
                "the kept page, not a new read"
            );
            // More pages than a snapshot keeps: each is still the right one.
            for round in 0..2 {
                for limit in 1..=12 {
                    let page = store.list(None, None, Some(1), limit).await.expect("list");
                    let ids: serde_json::Value = serde_json::from_slice(&page.json).expect("json");
                    let ids = ids
                        .as_array()
                        .map(|a| a.iter().map(|p| p["id"].clone()).collect::<Vec<_>>());
                    let expected: Vec<serde_json::Value> =
                        (2..=3).take(limit).map(Into::into).collect();
                    assert_eq!(ids, Some(expected), "limit {limit}, round {round}");
                    assert_eq!(
                        (page.last_id, page.more),
                        (Some(1 + limit.min(2) as i64), limit < 2)
                    );
                }
            }
            // A change keeps every id, so only the commit can tell the kept page is stale.
            let patch = PetPatch {
                name: Some("renamed".into()),
                category_id: None,
                status: None,
            };
            store.write(patching(1, patch)).await.expect("patch");
            let after = list(store, None, 2).await.expect("list");
            assert_eq!(
                &after[..],
                br#"[{"id":1,"name":"renamed","categoryId":1},{"id":2,"name":"b","categoryId":1}]"#
            );
            store.write(deleting(2)).await.expect("delete");
            let after = list(store, None, 2).await.expect("list");
            assert_eq!(
                &after[..],
                br#"[{"id":1,"name":"renamed","categoryId":1},{"id":3,"name":"c","categoryId":1}]"#
            );
        });
    }

    #[test]
    fn a_second_open_of_the_same_file_is_refused() {
        on_fresh_store(async |_store, path| {
            assert!(matches!(open(path, TUNING).await, Err(StoreError::Locked)));
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
        let opened = runtime().block_on(open(&path, TUNING));
        assert!(matches!(
            opened,
            Err(StoreError::NewerSchema { found, supported: SCHEMA_VERSION }) if found == SCHEMA_VERSION + 1
        ));
    }

    #[test]
    fn a_reopen_keeps_every_pet_serves_a_fresh_snapshot_and_ids_go_on() {
        on_fresh_store(async |store, _path| {
            for name in ["a", "b"] {
                add(store, new_pet(name, None)).await.expect("create");
            }
            let before = snapshot(store);
            reopen(store);
            assert!(
                !Arc::ptr_eq(&before, &snapshot(store)),
                "no snapshot of the old database"
            );
            drop(before);
            let all: serde_json::Value =
                serde_json::from_slice(&list(store, None, 20).await.expect("list")).expect("json");
            assert_eq!(all.as_array().map(Vec::len), Some(2), "{all}");
            assert_eq!(add(store, new_pet("c", None)).await.expect("create").id, 3);
            assert!(store.check().await.is_ok());
        });
    }

    #[test]
    fn a_failed_reopen_refuses_reads_and_writes_until_the_next_create_retries_it() {
        on_fresh_store(async |store, path| {
            add(store, new_pet("a", None)).await.expect("create");
            // As a failed reopen leaves it: the database out, and the file not openable (here
            // held by another handle, as a disk still failing would refuse it).
            if let Some(db) = shared(store).take_db() {
                db.close().expect("close");
            }
            let blocker = Database::create(path).expect("hold the file");
            assert!(matches!(
                add(store, new_pet("b", None)).await,
                Err(StoreError::Reopening)
            ));
            assert!(matches!(store.get(1).await, Err(StoreError::Reopening)));
            assert!(matches!(store.check().await, Err(StoreError::Reopening)));
            drop(blocker);
            std::thread::sleep(writer::REOPEN_INTERVAL);
            assert_eq!(add(store, new_pet("c", None)).await.expect("create").id, 2);
            assert!(store.get(1).await.expect("get").is_some());
        });
    }

    #[test]
    fn ids_exhausted_leaves_the_database_open() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("pets.redb");
        runtime().block_on(async {
            let (store, _) = open(&path, TUNING).await.expect("open");
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
            let (store, _) = open(&path, TUNING).await.expect("open");
            let before = snapshot(&store);
            assert!(matches!(
                add(&store, new_pet("a", None)).await,
                Err(StoreError::IdsExhausted)
            ));
            assert!(Arc::ptr_eq(&before, &snapshot(&store)), "not reopened");
            drop(before);
            store.close().await;
        });
    }

    #[test]
    fn redb_failures_are_io_when_the_medium_failed_and_corrupt_otherwise() {
        let io = || std::io::Error::other("disk on fire");
        assert!(matches!(StoreError::storage(io()), StoreError::Io(_)));
        assert!(matches!(
            StoreError::storage(redb::StorageError::PreviousIo),
            StoreError::Io(_)
        ));
        assert!(matches!(
            StoreError::storage(redb::StorageError::ValueTooLarge(1)),
            StoreError::Corrupt(_)
        ));
        assert!(matches!(
            StoreError::storage(redb::StorageError::Corrupted("bad page".into())),
            StoreError::Corrupt(_)
        ));
    }

    #[test]
    fn writes_after_close_fail() {
        let dir = tempfile::tempdir().expect("temp dir");
        runtime().block_on(async {
            let (store, _) = open(&dir.path().join("pets.redb"), TUNING)
                .await
                .expect("open");
            let other = store.clone();
            assert!(other.check().await.is_ok());
            store.close().await;
            assert!(matches!(
                add(&other, new_pet("late", None)).await,
                Err(StoreError::Closed)
            ));
            assert!(
                matches!(other.check().await, Err(StoreError::Closed)),
                "a closed store is not healthy"
            );
        });
    }

    #[test]
    fn records_answer_across_a_reopen_until_they_expire_and_the_purge_removes_them() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("pets.redb");
        runtime().block_on(async {
            let (store, _) = open(&path, TUNING).await.expect("open");
            keyed(&store, "a").await.expect("create");
            store.close().await;
            let (store, _) = open(&path, TUNING).await.expect("reopen");
            let again = keyed(&store, "a").await.expect("replay");
            assert!(again.replayed);
            // From an hour past the TTL, the record is expired: the key makes a new pet...
            let later = unix_now() + 2 * TTL.as_secs();
            let purge = |now| store.front.purge(now);
            assert_eq!(purge(unix_now()).await.expect("purge"), 0, "still live");
            assert_eq!(purge(later).await.expect("purge"), 1);
            assert_eq!(purge(later).await.expect("purge"), 0);
            let fresh = keyed(&store, "a").await.expect("create");
            assert_eq!((fresh.pet.id, fresh.replayed), (2, false));
            store.close().await;
        });
    }

    /// A store whose records answer for one second only.
    async fn open_short_lived(path: &Path) -> Store {
        let tuning = Tuning {
            events_keep: crate::store::DEFAULT_EVENTS_KEEP,
            idempotency_ttl: Duration::from_secs(1),
            ..TUNING
        };
        open(path, tuning).await.expect("open").0
    }

    /// Waits until a record written now with a TTL of one second has expired.
    fn outlive_a_one_second_record() {
        let expired_at = unix_now() + 1;
        while unix_now() < expired_at {
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    #[test]
    fn a_replay_is_the_first_answer_rebuilt_byte_for_byte_after_a_restart_and_a_reopen() {
        on_fresh_store(async |store, path| {
            add(store, new_pet("before", None)).await.expect("create");
            let first = store
                .create(new_pet("a", Some(PetStatus::Sold)), Some(key(store, 1, 1)))
                .await
                .expect("create");
            store.clone().close().await;
            let (store, _) = open(path, TUNING).await.expect("restart");
            let replay = |store: &Store| {
                let key = key(store, 1, 1);
                let store = store.clone();
                async move {
                    store
                        .create(new_pet("a", Some(PetStatus::Sold)), Some(key))
                        .await
                }
            };
            let again = replay(&store).await.expect("replay");
            assert!(again.replayed);
            assert_eq!(
                (again.pet.id, again.pet.revision, &again.pet.json[..]),
                (2, 1, &first.pet.json[..])
            );
            assert_eq!(
                &again.pet.json[..],
                br#"{"id":2,"name":"a","categoryId":1,"status":"sold"}"#
            );
            // The writer reloads the records from the file when it reopens it.
            reopen(&store);
            let again = replay(&store).await.expect("replay after a reopen");
            assert!(again.replayed);
            assert_eq!(&again.pet.json[..], &first.pet.json[..]);
            assert!(matches!(
                store
                    .create(new_pet("b", None), Some(key(&store, 1, 2)))
                    .await,
                Err(StoreError::IdempotencyKeyReused)
            ));
        });
    }

    #[test]
    fn a_key_reused_after_expiry_keeps_its_new_record_when_the_old_one_is_purged() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("pets.redb");
        let purge = |store: &Store, now: u64| {
            let store = store.clone();
            async move { store.front.purge(now).await.expect("purge") }
        };
        runtime().block_on(async {
            let store = open_short_lived(&path).await;
            let old = keyed(&store, "a").await.expect("create");
            outlive_a_one_second_record();
            store.close().await;
            // Expired but not purged yet: it answers nothing, and a new record, from a longer
            // TTL, takes the scope.
            let (store, _) = open(&path, TUNING).await.expect("open");
            let new = keyed(&store, "a").await.expect("create");
            assert_eq!((old.pet.id, new.pet.id, new.replayed), (1, 2, false));
            // The purge at start may have taken the old record already; either way the new
            // one stays.
            assert!(purge(&store, unix_now()).await <= 1, "the old record only");
            assert_eq!(shared(&store).index.len(), 1);
            let again = keyed(&store, "a").await.expect("replay");
            assert_eq!((again.pet.id, again.replayed), (2, true));
            store.close().await;
            // Loaded from the file, the new record still answers, until it expires in turn.
            let (store, _) = open(&path, TUNING).await.expect("reopen");
            let again = keyed(&store, "a").await.expect("replay");
            assert_eq!((again.pet.id, again.replayed), (2, true));
            let later = unix_now() + 2 * TTL.as_secs();
            assert_eq!(purge(&store, later).await, 1);
            assert_eq!(purge(&store, later).await, 0);
            store.close().await;
        });
    }

    /// The index tables as versions 3 to 5 typed them (6 keeps every index as encoded keys).
    const OLD_PETS_BY_STATUS: redb::TableDefinition<(u8, i64), &[u8]> =
        redb::TableDefinition::new("pets_by_status");
    const OLD_PETS_BY_CATEGORY: redb::TableDefinition<(i64, u8, i64), ()> =
        redb::TableDefinition::new("pets_by_category");
    const OLD_CATEGORY_NAMES: redb::TableDefinition<&str, i64> =
        redb::TableDefinition::new("category_names");

    /// A file of `version` as an earlier petstore left it: the meta keys given and two pets,
    /// one sold in category 2 and one without a status in category 1, with their status
    /// index and the tables versions 3 and 4 already had; from version 5 on also the category
    /// index and category 2, "Dogs", with its name.
    fn earlier_file(path: &Path, version: u64, more_meta: &[(&str, u64)]) {
        let db = Database::create(path).expect("create");
        let txn = db.begin_write().expect("write");
        {
            let mut meta = txn.open_table(META).expect("meta");
            meta.insert(META_SCHEMA_VERSION, version).expect("insert");
            meta.insert(META_NEXT_ID, 3).expect("insert");
            for (key, value) in more_meta {
                meta.insert(*key, *value).expect("insert");
            }
            let mut pets = txn.open_table(PETS).expect("pets");
            let mut by_status = txn.open_table(OLD_PETS_BY_STATUS).expect("index");
            let sold = br#"{"id":1,"name":"old","categoryId":2,"status":"sold"}"#;
            pets.insert(1, &sold[..]).expect("insert");
            by_status.insert((2, 1), &sold[..]).expect("insert");
            pets.insert(2, &br#"{"id":2,"name":"plain","categoryId":1}"#[..])
                .expect("insert");
            if version >= 5 {
                let mut by_category = txn.open_table(OLD_PETS_BY_CATEGORY).expect("index");
                by_category.insert((2, 2, 1), ()).expect("insert");
                by_category.insert((1, 3, 2), ()).expect("insert");
                let categories = redb::TableDefinition::<i64, &[u8]>::new("categories");
                let mut categories = txn.open_table(categories).expect("categories");
                categories
                    .insert(2, &br#"{"id":2,"name":"Dogs"}"#[..])
                    .expect("insert");
                let mut names = txn.open_table(OLD_CATEGORY_NAMES).expect("names");
                names.insert("dogs", 2).expect("insert");
                meta.insert(
                    <crate::category::Category as crate::store::resource::Resource>::COUNTER.key(),
                    3,
                )
                .expect("insert");
            }
        }
        txn.open_table(REVISIONS).expect("revisions");
        txn.open_table(tables::RECORDS).expect("records");
        txn.commit().expect("commit");
    }

    /// The schema version recorded in the file at `path`, opened by redb alone.
    fn version_in(path: &Path) -> Option<u64> {
        let db = Database::open(path).expect("open");
        let txn = db.begin_read().expect("read");
        let meta = txn.open_table(META).expect("meta");
        meta.get(META_SCHEMA_VERSION)
            .expect("get")
            .map(|v| v.value())
    }

    #[test]
    fn a_file_at_schema_version_1_or_2_is_refused_with_what_to_do_and_left_as_it_was() {
        for version in [1, 2] {
            let dir = tempfile::tempdir().expect("temp dir");
            let path = dir.path().join("pets.redb");
            earlier_file(&path, version, &[]);
            let Err(StoreError::OlderFile(text)) = runtime().block_on(open(&path, TUNING)) else {
                panic!("version {version} is refused");
            };
            assert_eq!(
                text,
                format!(
                    "the file is at schema version {version}, which this petstore no longer \
                     upgrades (it opens versions 3 to {SCHEMA_VERSION}): run a petstore built \
                     from commit 4a29a84 on it once (it upgrades the file as it starts; stop it \
                     once it serves), then this one opens it"
                )
            );
            assert_eq!(version_in(&path), Some(version));
        }
    }

    #[test]
    fn a_file_that_still_expects_an_earlier_petstores_log_is_refused_with_what_to_do() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("pets.redb");
        earlier_file(&path, 3, &[(tables::META_LOG_EPOCH, 7)]);
        let Err(StoreError::OlderFile(text)) = runtime().block_on(open(&path, TUNING)) else {
            panic!("refused");
        };
        assert!(
            text.starts_with(&format!(
                "the file still expects the write-ahead log an earlier petstore kept beside it \
                 ({}-wal), which this petstore no longer replays: run a petstore built from \
                 commit 4a29a84",
                path.display()
            )),
            "{text}"
        );
        assert_eq!(version_in(&path), Some(3), "not upgraded either");
    }

    #[test]
    fn a_file_of_version_3_to_5_gets_the_tables_of_this_one_with_its_records_indexed_and_counted() {
        for version in 3..=5 {
            let dir = tempfile::tempdir().expect("temp dir");
            let path = dir.path().join("pets.redb");
            earlier_file(&path, version, &[]);
            upgraded(&path, version);
        }
    }

    #[test]
    fn a_file_of_version_6_gets_the_name_and_word_indexes_of_its_pets() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("pets.redb");
        runtime().block_on(async {
            let (store, _) = open(&path, TUNING).await.expect("open");
            for name in ["Zoë", "Sir Belvedere"] {
                let pet = NewPet {
                    name: name.into(),
                    category_id: 1,
                    status: None,
                };
                store.create(pet, None).await.expect("create");
            }
            store.close().await;
        });
        {
            // As version 6 left it: the same tables but the three of version 7.
            let db = Database::open(&path).expect("open");
            let txn = db.begin_write().expect("write");
            for name in ["pets_by_name", "pets_by_word", "pets_by_word_name"] {
                let table: redb::TableDefinition<&[u8], &[u8]> = redb::TableDefinition::new(name);
                assert!(txn.delete_table(table).expect("delete"), "{name}");
            }
            let mut meta = txn.open_table(META).expect("meta");
            meta.insert(META_SCHEMA_VERSION, 6).expect("insert");
            drop(meta);
            txn.commit().expect("commit");
        }
        runtime().block_on(async {
            let (store, _) = open(&path, TUNING).await.expect("open");
            let query = PageQuery {
                status: None,
                category: None,
                search: Search::parse("bel").expect("valid"),
                sort: Sort::Name,
                after: None,
                limit: 20,
            };
            let page = store.find(query).await.expect("search");
            assert_eq!(page.last_id, Some(2), "{:?}", page.json);
            store.close().await;
        });
        assert_eq!(version_in(&path), Some(SCHEMA_VERSION));
        let report = check::check_file(&path).expect("checks");
        assert_eq!(report.problems, Vec::<String>::new());
    }

    fn upgraded(path: &Path, version: u64) {
        let path = path.to_owned();
        runtime().block_on(async {
            let (store, count) = open(&path, TUNING).await.expect("open");
            assert_eq!(count, 2);
            let inventory = store.inventory().await.expect("inventory");
            assert_eq!((inventory.sold, inventory.unset), (1, 1));
            let page = store.list(None, Some(2), None, 20).await.expect("list");
            assert_eq!(
                &page.json[..],
                br#"[{"id":1,"name":"old","categoryId":2,"status":"sold"}]"#
            );
            // The name and word indexes (version 7) are written from the records too.
            for (q, sort, want) in [("OLD", Sort::Id, &[1][..]), ("pla", Sort::Name, &[2])] {
                let query = PageQuery {
                    status: None,
                    category: None,
                    search: Search::parse(q).expect("valid"),
                    sort,
                    after: None,
                    limit: 20,
                };
                let page = store.find(query).await.expect("search");
                let ids: Vec<i64> = serde_json::from_slice::<Vec<serde_json::Value>>(&page.json)
                    .expect("JSON")
                    .iter()
                    .map(|pet| pet["id"].as_i64().expect("id"))
                    .collect();
                assert_eq!(ids, want, "q={q} in a file of version {version}");
            }
            assert_eq!(keyed(&store, "new").await.expect("create").pet.id, 3);
            if version >= 5 {
                let taken = crate::category::NewCategory {
                    name: "DOGS".into(),
                };
                assert!(
                    matches!(
                        store.write(CreateCategory(taken)).await,
                        Err(StoreError::NameTaken(_))
                    ),
                    "the name index of version {version} is read anew"
                );
            }
            store.close().await;
        });
        assert_eq!(version_in(&path), Some(SCHEMA_VERSION));
        let report = check::check_file(&path).expect("checks");
        assert_eq!(report.problems, Vec::<String>::new(), "version {version}");
    }

    /// A file after every kind of sale and category change checks sound, with its counts. What
    /// each write answers is the suite's (`store/suite.rs`, run on redb in both modes).
    #[test]
    fn a_file_after_every_kind_of_sale_checks_clean() {
        use crate::category::{CategoryPatch, NewCategory};
        use crate::order::{NewOrder, OrderAction};
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("pets.redb");
        let tuning = Tuning {
            order_hold: Some(Duration::from_secs(60)),
            ..TUNING
        };
        runtime().block_on(async {
            let (store, _) = open(&path, tuning).await.expect("open");
            let name = |name: &str| NewCategory { name: name.into() };
            let dogs = store
                .write(CreateCategory(name("Dogs")))
                .await
                .expect("category");
            let mut pets = Vec::new();
            for n in 0..3 {
                let pet = crate::pet::NewPet {
                    name: format!("pup {n}"),
                    category_id: dogs.id,
                    status: Some(PetStatus::Available),
                };
                pets.push(store.create(pet, None).await.expect("create").pet.id);
            }
            let place = async |pet_id| {
                let order = NewOrder { pet_id, note: None };
                store.place_order(order, None).await.expect("place").order
            };
            let sold = place(pets[0]).await;
            let complete = OrderAction::Complete;
            store
                .write(moving(sold.id, complete))
                .await
                .expect("complete");
            let ends = place(pets[1]).await.expires_at_ms.expect("a hold");
            assert_eq!(store.front.expire(ends + 1).await.expect("expire"), 1);
            place(pets[2]).await;
            let cats = store
                .write(CreateCategory(name("Cats")))
                .await
                .expect("category");
            let renamed = CategoryPatch {
                name: Some("CATS".into()),
            };
            store
                .write(PatchCategory {
                    id: cats.id,
                    patch: renamed,
                })
                .await
                .expect("rename");
            store.write(DeleteCategory(cats.id)).await.expect("unused");
            store.close().await;
        });
        let report = check::check_file(&path).expect("checks");
        assert_eq!(report.problems, Vec::<String>::new());
        assert_eq!(
            (
                report.count_of(crate::subject::Kind::Order),
                report.placed_orders,
                report.count_of(crate::subject::Kind::Category)
            ),
            (3, 1, 1)
        );
    }
}
