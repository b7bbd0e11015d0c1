//! The store suite: the same test functions run against every backend, so the redb file and
//! PostgreSQL keep one contract (pages after a cursor, revisions and preconditions, deletes,
//! idempotency records, ids). Each function gets a fresh, empty store. PostgreSQL runs in a
//! throwaway cluster (`pg_cluster.rs`) shared by the tests running at the same time, one
//! database each.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use bytes::Bytes;

use super::model::{Change, IdempotencyRecord, SHORT_DIGEST};
use super::pg_cluster::Cluster;
use super::*;
use crate::event::{EventType, Position, Types};
use crate::pet::PetPatch;

const TUNING: Tuning = Tuning {
    events_keep: crate::store::DEFAULT_EVENTS_KEEP,
    idempotency_ttl: Duration::from_secs(3600),
    max_write_batch: DEFAULT_MAX_WRITE_BATCH,
    order_hold: None,
};

pub(super) fn new_pet(name: &str, status: Option<PetStatus>) -> NewPet {
    NewPet {
        name: name.into(),
        category_id: 1,
        status,
    }
}

pub(super) async fn add(store: &Store, pet: NewPet) -> Result<StoredPet, StoreError> {
    store.create(pet, None).await.map(|created| created.pet)
}

pub(super) fn key(store: &Store, scope: u8, fingerprint: u8) -> IdempotencyKey {
    store
        .claim_key([scope; 32])
        .expect("no other request holds the key")
        .for_pet([fingerprint; 32])
}

fn sold() -> PetPatch {
    PetPatch {
        status: Some(Some(PetStatus::Sold)),
        ..PetPatch::default()
    }
}

/// The ids a list shows, first page of 100.
pub(super) async fn ids(store: &Store, status: Option<PetStatus>) -> Vec<i64> {
    let page = store.list(status, None, None, 100).await.expect("list");
    let pets: serde_json::Value = serde_json::from_slice(&page.json).expect("json");
    let pets = pets.as_array().expect("an array").clone();
    pets.iter()
        .map(|pet| pet["id"].as_i64().expect("id"))
        .collect()
}

pub(super) async fn ids_start_at_one_and_a_created_pet_reads_back(store: Store) {
    let store = &store;
    let first = add(store, new_pet("a", None)).await.expect("create");
    let second = add(store, new_pet("b", Some(PetStatus::Pending)))
        .await
        .expect("create");
    assert_eq!((first.id, second.id), (1, 2));
    assert_eq!(&first.json[..], br#"{"id":1,"name":"a","categoryId":1}"#);
    let read = store.get(2).await.expect("get").expect("stored");
    assert_eq!((read.revision, read.json), (1, second.json));
    assert!(store.get(3).await.expect("get").is_none());
    store.check().await.expect("healthy");
}

pub(super) async fn concurrent_creates_get_unique_ids_in_the_order_they_are_listed(store: Store) {
    let store = &store;
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..64 {
        let store = store.clone();
        tasks.spawn(async move {
            let status = (i % 3 == 0).then_some(PetStatus::Available);
            add(&store, new_pet("c", status)).await.expect("create").id
        });
    }
    let mut created = tasks.join_all().await;
    created.sort_unstable();
    assert_eq!(created, (1..=64).collect::<Vec<_>>());
    assert_eq!(ids(store, None).await, created);
    let available: Vec<i64> = (1..=64).filter(|id| (id - 1) % 3 == 0).collect();
    assert_eq!(
        ids(store, Some(PetStatus::Available)).await.len(),
        available.len()
    );
}

pub(super) async fn a_page_starts_after_its_cursor_and_says_whether_more_follow(store: Store) {
    let store = &store;
    for i in 0..5 {
        let status = (i % 2 == 0).then_some(PetStatus::Sold);
        add(store, new_pet("a", status)).await.expect("create");
    }
    let page = store.list(None, None, Some(2), 2).await.expect("list");
    assert_eq!((page.last_id, page.more), (Some(4), true));
    let page = store.list(None, None, Some(3), 2).await.expect("list");
    assert_eq!((page.last_id, page.more), (Some(5), false));
    let page = store
        .list(Some(PetStatus::Sold), None, Some(1), 2)
        .await
        .expect("list");
    assert_eq!((page.last_id, page.more), (Some(5), false));
    let page = store
        .list(Some(PetStatus::Sold), None, None, 3)
        .await
        .expect("list");
    assert_eq!(
        (page.last_id, page.more),
        (Some(5), false),
        "exactly a page"
    );
    let end = store
        .list(None, None, Some(i64::MAX), 20)
        .await
        .expect("list");
    assert_eq!(
        (&end.json[..], end.last_id, end.more),
        (&b"[]"[..], None, false)
    );
}

pub(super) async fn a_patch_moves_the_index_entry_and_bumps_the_revision(store: Store) {
    let store = &store;
    let pet = add(store, new_pet("a", Some(PetStatus::Available)))
        .await
        .expect("create");
    assert_eq!(pet.revision, 1);
    let patched = store
        .patch(pet.id, sold(), Precondition::RevisionIn(vec![1]))
        .await
        .expect("patch");
    assert_eq!(patched.revision, 2);
    assert_eq!(
        &patched.json[..],
        br#"{"id":1,"name":"a","categoryId":1,"status":"sold"}"#
    );
    assert_eq!(
        ids(store, Some(PetStatus::Available)).await,
        Vec::<i64>::new()
    );
    assert_eq!(ids(store, Some(PetStatus::Sold)).await, vec![1]);
    assert_eq!(
        store.get(1).await.expect("get").map(|p| p.revision),
        Some(2)
    );
    let removed = PetPatch {
        status: Some(None),
        ..PetPatch::default()
    };
    let patched = store
        .patch(1, removed, Precondition::None)
        .await
        .expect("patch");
    assert_eq!(&patched.json[..], br#"{"id":1,"name":"a","categoryId":1}"#);
    assert_eq!(ids(store, Some(PetStatus::Sold)).await, Vec::<i64>::new());
    assert_eq!(ids(store, None).await, vec![1]);
}

pub(super) async fn a_stale_revision_or_a_missing_pet_changes_nothing(store: Store) {
    let store = &store;
    add(store, new_pet("a", Some(PetStatus::Available)))
        .await
        .expect("create");
    for precondition in [
        Precondition::RevisionIn(vec![2]),
        Precondition::RevisionIn(vec![]),
    ] {
        assert!(matches!(
            store.patch(1, sold(), precondition.clone()).await,
            Err(StoreError::PreconditionFailed)
        ));
        assert!(matches!(
            store.delete(1, precondition).await,
            Err(StoreError::PreconditionFailed)
        ));
    }
    assert!(matches!(
        store.patch(2, sold(), Precondition::None).await,
        Err(StoreError::NotFound(2))
    ));
    let pet = store.get(1).await.expect("get").expect("still there");
    assert_eq!(pet.revision, 1);
    assert_eq!(ids(store, Some(PetStatus::Available)).await, vec![1]);
}

pub(super) async fn a_delete_removes_the_pet_its_index_entry_and_its_revision_and_ids_are_not_reused(
    store: Store,
) {
    let store = &store;
    add(store, new_pet("a", Some(PetStatus::Sold)))
        .await
        .expect("create");
    store
        .patch(1, PetPatch::default(), Precondition::None)
        .await
        .expect("patch");
    store
        .delete(1, Precondition::RevisionIn(vec![2]))
        .await
        .expect("delete");
    assert!(store.get(1).await.expect("get").is_none());
    assert_eq!(ids(store, Some(PetStatus::Sold)).await, Vec::<i64>::new());
    assert!(matches!(
        store.delete(1, Precondition::None).await,
        Err(StoreError::NotFound(1))
    ));
    assert_eq!(add(store, new_pet("b", None)).await.expect("create").id, 2);
    assert_eq!(
        store.get(2).await.expect("get").map(|p| p.revision),
        Some(1)
    );
}

pub(super) async fn a_key_replays_its_first_answer_refuses_another_pet_and_is_scoped(store: Store) {
    let store = &store;
    let first = store
        .create(new_pet("a", None), Some(key(store, 1, 1)))
        .await
        .expect("create");
    assert!(!first.replayed);
    store
        .patch(first.pet.id, sold(), Precondition::None)
        .await
        .expect("patch");
    let again = store
        .create(new_pet("a", None), Some(key(store, 1, 1)))
        .await
        .expect("replay");
    assert!(again.replayed);
    assert_eq!((again.pet.id, again.pet.revision), (first.pet.id, 1));
    assert_eq!(
        again.pet.json, first.pet.json,
        "the first answer, not the pet now"
    );
    assert!(matches!(
        store
            .create(new_pet("b", None), Some(key(store, 1, 2)))
            .await,
        Err(StoreError::IdempotencyKeyReused)
    ));
    let other = store
        .create(new_pet("a", None), Some(key(store, 2, 1)))
        .await
        .expect("create");
    assert_eq!((other.pet.id, other.replayed), (2, false));
    assert_eq!(ids(store, None).await, vec![1, 2]);
}

pub(super) async fn a_key_in_flight_is_refused_and_released_when_its_create_ends(store: Store) {
    let store = &store;
    let claim = store.claim_key([1; 32]).expect("free");
    assert!(matches!(
        store.claim_key([1; 32]),
        Err(StoreError::IdempotencyKeyInFlight)
    ));
    assert!(store.claim_key([2; 32]).is_ok(), "another scope");
    drop(claim);
    store
        .create(new_pet("a", None), Some(key(store, 1, 1)))
        .await
        .expect("create");
    assert!(store.claim_key([1; 32]).is_ok(), "released with the write");
}

/// The pets of `a_mix_of_writes`: one created then patched, one created with a key and deleted.
struct Mix {
    first: StoredPet,
    keyed: Created,
    patched: StoredPet,
}

/// Four changes and three writes that change nothing, in this order: a create; a keyed
/// create, and its replay; a patch, and one with a stale revision; a delete of the keyed pet.
async fn a_mix_of_writes(store: &Store) -> Mix {
    let first = add(store, new_pet("a", None)).await.expect("create");
    let keyed_pet = || new_pet("b", Some(PetStatus::Available));
    let keyed = store
        .create(keyed_pet(), Some(key(store, 3, 3)))
        .await
        .expect("create");
    let replayed = store
        .create(keyed_pet(), Some(key(store, 3, 3)))
        .await
        .expect("replay");
    assert!(replayed.replayed);
    let patched = store
        .patch(first.id, sold(), Precondition::None)
        .await
        .expect("patch");
    let stale = store
        .patch(first.id, sold(), Precondition::RevisionIn(vec![1]))
        .await;
    assert!(matches!(stale, Err(StoreError::PreconditionFailed)));
    store
        .delete(keyed.pet.id, Precondition::None)
        .await
        .expect("delete");
    Mix {
        first,
        keyed,
        patched,
    }
}

/// What listeners hear: every change of every committed batch, in commit order, with the
/// pet's revision after it (a delete: the revision it was deleted at); nothing of a write that
/// changed nothing (a failed precondition, a replayed key).
async fn every_committed_change_is_published_in_commit_order_with_its_revision(store: Store) {
    let mut settled = store.subscribe();
    let Mix {
        first,
        keyed,
        patched,
    } = a_mix_of_writes(&store).await;
    let mut heard = Vec::new();
    while let Ok(batch) = settled.try_recv() {
        heard.extend(batch.iter().cloned());
    }
    assert_eq!(
        heard,
        [
            Change::pet(first.id, 1, Some(first.json.clone())),
            Change::pet(keyed.pet.id, 1, Some(keyed.pet.json.clone())),
            Change::pet(first.id, 2, Some(patched.json.clone())),
            Change::pet(keyed.pet.id, 1, None),
        ]
    );
}

/// Every chunk of an export, in order.
async fn exported(store: &Store, chunk: usize, now: u64) -> (u64, Vec<Chunk>) {
    let mut export = store.export(chunk, now).await.expect("export");
    let mut chunks = Vec::new();
    while let Some(chunk) = export.next().await {
        chunks.push(chunk.expect("a chunk"));
    }
    (export.next_ids.pets, chunks)
}

pub(super) async fn an_export_reads_every_pet_in_id_order_with_its_revision_the_counter_and_live_records(
    store: Store,
) {
    let store = &store;
    let (next_id, chunks) = exported(store, 2, 0).await;
    assert_eq!((next_id, chunks.len()), (1, 0), "an empty store");
    for name in ["a", "b", "c", "d"] {
        add(store, new_pet(name, None)).await.expect("create");
    }
    let keyed = store
        .create(new_pet("k", Some(PetStatus::Sold)), Some(key(store, 9, 9)))
        .await
        .expect("create")
        .pet;
    for id in [2, 2, 3] {
        store
            .patch(id, sold(), Precondition::None)
            .await
            .expect("patch");
    }
    add(store, new_pet("gone", None)).await.expect("create");
    store.delete(6, Precondition::None).await.expect("delete");
    store.delete(1, Precondition::None).await.expect("delete");

    let now = crate::clock::unix_now();
    let (next_id, chunks) = exported(store, 2, now).await;
    assert_eq!(next_id, 7, "deleted ids count");
    let mut pets = Vec::new();
    let mut records = Vec::new();
    for chunk in chunks {
        match chunk {
            Chunk::Pets(chunk) => {
                assert!(records.is_empty(), "pets come first");
                assert!((1..=2).contains(&chunk.len()), "{chunk:?}");
                pets.extend(chunk);
            }
            Chunk::Records(chunk) => records.extend(chunk),
            Chunk::Categories(_) | Chunk::Orders(_) => panic!("none were made"),
        }
    }
    let listed: Vec<_> = pets.iter().map(|pet| (pet.id, pet.revision)).collect();
    assert_eq!(listed, [(2, 3), (3, 2), (4, 1), (5, 1)]);
    for pet in &pets {
        let stored = store.get(pet.id).await.expect("get").expect("stored");
        assert_eq!(stored.json, pet.json);
    }
    assert_eq!(
        records,
        [IdempotencyRecord {
            scope: [9; SHORT_DIGEST],
            fingerprint: [9; SHORT_DIGEST],
            expires_at: records.first().map_or(0, |r| r.expires_at),
            pet_id: keyed.id,
        }]
    );
    assert!(records[0].expires_at > now);
    let (_, chunks) = exported(store, 2, records[0].expires_at).await;
    assert!(
        chunks.iter().all(|chunk| matches!(chunk, Chunk::Pets(_))),
        "an expired record is not exported"
    );
    assert!(matches!(
        store.import().await.err(),
        Some(StoreError::NotEmpty {
            pets: 4,
            records: 1,
            next_id: 7
        })
    ));
}

/// The feed from its oldest event kept, all of it: (type, pet id, etag, pet) of each event.
async fn feed(store: &Store, after: Option<Position>) -> (Vec<serde_json::Value>, EventPage) {
    let query = EventQuery {
        after,
        types: Types::ALL,
        limit: 1000,
        scan: 1000,
    };
    let page = store.events(query).await.expect("a page of the feed");
    let events = page
        .events
        .iter()
        .map(|event| {
            let mut json = bytes::BytesMut::new();
            event.json_into(page.state.feed, &mut json);
            serde_json::from_slice(&json).expect("an event is JSON")
        })
        .collect();
    (events, page)
}

pub(super) async fn every_change_appends_one_event_in_commit_order_in_its_transaction(
    store: Store,
) {
    let store = &store;
    let (events, empty) = feed(store, None).await;
    assert!(events.is_empty());
    let listed = store.list(None, None, None, 20).await.expect("list");
    assert_eq!(
        listed.events,
        empty.reached_position(),
        "an empty feed's position"
    );
    // Writes that change nothing (a replayed key, a stale revision) make no event.
    let Mix { patched, .. } = a_mix_of_writes(store).await;
    let (events, page) = feed(store, None).await;
    let summary: Vec<(&str, i64, &str)> = events
        .iter()
        .map(|e| {
            (
                e["type"].as_str().expect("type"),
                e["petId"].as_i64().expect("petId"),
                e["etag"].as_str().expect("etag"),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("pet.created", 1, "\"1.1\""),
            ("pet.created", 2, "\"2.1\""),
            ("pet.updated", 1, "\"1.2\""),
            ("pet.deleted", 2, "\"2.1\""),
        ]
    );
    let pet = |json: &Bytes| serde_json::from_slice::<serde_json::Value>(json).expect("JSON");
    assert_eq!(events[2]["pet"], pet(&patched.json));
    assert_eq!(events[3]["pet"], serde_json::Value::Null);
    let cursors: Vec<&str> = events
        .iter()
        .map(|e| e["cursor"].as_str().expect("cursor"))
        .collect();
    assert!(
        cursors.windows(2).all(|pair| pair[0] < pair[1]),
        "{cursors:?}"
    );
    // The list's position is the feed's newest in the same snapshot.
    let listed = store.list(None, None, None, 20).await.expect("list");
    assert_eq!(listed.events, page.reached_position());
    let (after, _) = feed(store, Position::parse(cursors[1])).await;
    assert_eq!(after, events[2..]);
    let (none, end) = feed(store, Some(page.reached_position())).await;
    assert!(none.is_empty());
    assert_eq!(
        end.reached, page.reached,
        "an empty page stays where it was"
    );
    // A filter looks past other types and reaches as far as it looked.
    let deletes = EventQuery {
        after: None,
        types: Types::only([EventType::PetDeleted]),
        limit: 10,
        scan: 2,
    };
    let scanned = store.events(deletes).await.expect("filtered");
    assert_eq!((scanned.events.len(), scanned.reached), (0, 2));
    let deletes = EventQuery {
        scan: 100,
        ..deletes
    };
    let found = store.events(deletes).await.expect("filtered");
    assert_eq!((found.events.len(), found.reached), (1, 4));
    let elsewhere = Position {
        feed: page.state.feed ^ 1,
        seq: 1,
    };
    let beyond = Position {
        seq: page.state.newest + 1,
        ..page.reached_position()
    };
    for gone in [elsewhere, beyond] {
        let query = EventQuery {
            after: Some(gone),
            types: Types::ALL,
            limit: 10,
            scan: 10,
        };
        assert!(matches!(store.events(query).await, Err(ReadError::Gone)));
    }
}

pub(super) async fn trimmed_events_are_gone_and_a_cursor_before_them_expires(store: Store) {
    let store = &store;
    for name in ["a", "b", "c"] {
        add(store, new_pet(name, None)).await.expect("create");
    }
    let (events, page) = feed(store, None).await;
    assert_eq!(events.len(), 3);
    let start = Position {
        seq: 0,
        ..page.reached_position()
    };
    assert_eq!(store.front.trim(0).await.expect("trim nothing"), 0);
    let now = crate::store::events::now_ms() + 1;
    assert_eq!(store.front.trim(now).await.expect("trim"), 3);
    let query = EventQuery {
        after: Some(start),
        types: Types::ALL,
        limit: 10,
        scan: 10,
    };
    assert!(matches!(store.events(query).await, Err(ReadError::Gone)));
    let (kept, from_oldest) = feed(store, None).await;
    assert!(kept.is_empty());
    assert_eq!(
        from_oldest.reached, 3,
        "the oldest kept position is after the last trimmed"
    );
    add(store, new_pet("d", None)).await.expect("create");
    let (kept, _) = feed(store, Some(page.reached_position())).await;
    assert_eq!(
        kept.len(),
        1,
        "the last position before the trim still follows on"
    );
}

/// A throwaway cluster shared by the PostgreSQL tests that run at the same time; it stops when
/// the last of them ends.
fn shared_cluster() -> Arc<Cluster> {
    static SHARED: Mutex<Weak<Cluster>> = Mutex::new(Weak::new());
    let mut shared = SHARED.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(cluster) = shared.upgrade() {
        return cluster;
    }
    let cluster = Arc::new(Cluster::start());
    *shared = Arc::downgrade(&cluster);
    cluster
}

/// Runs `case` on a fresh store of each backend.
fn on_every_backend<F>(case: fn(Store) -> F)
where
    F: std::future::Future<Output = ()>,
{
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime builds");
    // Both ways redb opens its file: this process's alone (the default), and shared with
    // other processes that read it.
    for shared in [false, true] {
        let dir = tempfile::tempdir().expect("temp dir");
        runtime.block_on(async {
            let redb = Location::Redb {
                path: dir.path().join("pets.redb"),
                cache_bytes: 1 << 20,
                shared,
            };
            let (store, _) = Store::open(redb, TUNING).await.expect("open redb");
            case(store.clone()).await;
            store.close().await;
        });
    }
    let cluster = shared_cluster();
    static DATABASES: AtomicUsize = AtomicUsize::new(0);
    let database = format!("suite_{}", DATABASES.fetch_add(1, Ordering::Relaxed));
    cluster.psql(&format!("CREATE DATABASE {database}"));
    let url = cluster
        .url()
        .replace("/petstore?", &format!("/{database}?"));
    let target = postgres::connect::parse(&url, None, None, 4, Duration::from_secs(5))
        .expect("a test cluster URL");
    runtime.block_on(async {
        let (store, pets) = Store::open(Location::Postgres(Box::new(target)), TUNING)
            .await
            .expect("open postgres");
        assert_eq!(pets, 0);
        case(store.clone()).await;
        store.close().await;
    });
}

macro_rules! suite {
    ($($case:ident),* $(,)?) => {
        $(
            #[test]
            fn $case() {
                on_every_backend(super::$case);
            }
        )*
    };
}

mod on_both_backends {
    use super::on_every_backend;

    suite!(
        ids_start_at_one_and_a_created_pet_reads_back,
        concurrent_creates_get_unique_ids_in_the_order_they_are_listed,
        a_page_starts_after_its_cursor_and_says_whether_more_follow,
        a_patch_moves_the_index_entry_and_bumps_the_revision,
        a_stale_revision_or_a_missing_pet_changes_nothing,
        a_delete_removes_the_pet_its_index_entry_and_its_revision_and_ids_are_not_reused,
        a_key_replays_its_first_answer_refuses_another_pet_and_is_scoped,
        a_key_in_flight_is_refused_and_released_when_its_create_ends,
        an_export_reads_every_pet_in_id_order_with_its_revision_the_counter_and_live_records,
        every_committed_change_is_published_in_commit_order_with_its_revision,
        every_change_appends_one_event_in_commit_order_in_its_transaction,
        trimmed_events_are_gone_and_a_cursor_before_them_expires,
    );
}

/// Runs `case` on a store opened through `url`, a database of the shared cluster that the
/// caller has made (with a schema or options of its own), with the pets it held at open.
fn on_postgres_url<F>(url: &str, case: impl FnOnce(Store, u64) -> F)
where
    F: std::future::Future<Output = ()>,
{
    let target = postgres::connect::parse(url, None, None, 4, Duration::from_secs(5))
        .expect("a test cluster URL");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime builds");
    runtime.block_on(async {
        let (store, pets) = Store::open(Location::Postgres(Box::new(target)), TUNING)
            .await
            .expect("open");
        case(store.clone(), pets).await;
        store.close().await;
    });
}

/// A PostgreSQL database of schema version 1 (records with whole digests and a copy of the
/// first answer) is upgraded at open: its live record still replays, under the same key.
#[test]
fn a_version_1_postgres_database_is_upgraded_and_its_records_still_replay() {
    let cluster = shared_cluster();
    cluster.psql("CREATE DATABASE upgrade_v1");
    let v1 = r#"
        CREATE TABLE petstore_meta (name text PRIMARY KEY, value bigint NOT NULL);
        CREATE TABLE pets (id bigint PRIMARY KEY, status smallint, revision bigint NOT NULL,
            json text NOT NULL);
        CREATE INDEX pets_by_status ON pets (status, id);
        CREATE TABLE idempotency (scope bytea PRIMARY KEY, fingerprint bytea NOT NULL,
            expires_at bigint NOT NULL, pet_id bigint NOT NULL, json text NOT NULL);
        CREATE INDEX idempotency_expiry ON idempotency (expires_at);
        INSERT INTO petstore_meta VALUES ('next_id', 2), ('schema_version', 1);
        INSERT INTO pets VALUES (1, NULL, 1, '{"id":1,"name":"old","categoryId":1}');
        INSERT INTO idempotency VALUES (decode(repeat('09', 32), 'hex'),
            decode(repeat('09', 32), 'hex'), 4000000000, 1,
            '{"id":1,"name":"old","categoryId":1}');
    "#;
    cluster.psql(&format!("\\connect upgrade_v1\n{v1}"));
    let url = cluster.url().replace("/petstore?", "/upgrade_v1?");
    on_postgres_url(&url, async |store, pets| {
        assert_eq!(pets, 1);
        let replayed = store
            .create(new_pet("old", None), Some(key(&store, 9, 9)))
            .await
            .expect("replayed");
        assert!(replayed.replayed);
        assert_eq!(replayed.pet.id, 1);
        assert_eq!(
            replayed.pet.json,
            Bytes::from_static(br#"{"id":1,"name":"old","categoryId":1}"#)
        );
        let other = store
            .create(new_pet("other", None), Some(key(&store, 9, 8)))
            .await;
        assert!(
            matches!(other, Err(StoreError::IdempotencyKeyReused)),
            "{other:?}"
        );
        store.close().await;
    });
    let upgraded = cluster.psql(
        "\\connect upgrade_v1\nSELECT value, (SELECT octet_length(scope) FROM idempotency) \
         FROM petstore_meta WHERE name = 'schema_version'",
    );
    assert_eq!(upgraded, "3|16");
}

/// The URL's own `options` reach the server beside our statement bound: here a search_path
/// puts the tables in a schema of their own.
#[test]
fn the_url_s_options_apply_on_postgres() {
    let cluster = shared_cluster();
    cluster.psql("CREATE DATABASE with_options");
    cluster.psql("\\connect with_options\nCREATE SCHEMA shop");
    let url =
        cluster.url().replace("/petstore?", "/with_options?") + "&options=-c%20search_path%3Dshop";
    on_postgres_url(&url, async |store, _| {
        add(&store, new_pet("in-shop", None)).await.expect("create");
    });
    assert_eq!(
        cluster.psql("\\connect with_options\nSELECT count(*) FROM shop.pets"),
        "1"
    );
}

/// The trap of a bare sequence (RECIPES.md): on PostgreSQL, instance A's transaction begins
/// first but waits on a pet row another session holds; instance B commits an event meanwhile,
/// and a reader moves past it. When A commits, its event must come after the reader's
/// position, not before it where the reader would never look.
#[test]
fn on_postgres_a_transaction_that_commits_later_numbers_its_event_later() {
    let cluster = shared_cluster();
    cluster.psql("CREATE DATABASE feed_order");
    let url = cluster.url().replace("/petstore?", "/feed_order?");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime builds");
    runtime.block_on(async {
        let open = || async {
            let target = postgres::connect::parse(&url, None, None, 4, Duration::from_secs(5))
                .expect("a test cluster URL");
            Store::open(Location::Postgres(Box::new(target)), TUNING)
                .await
                .expect("open")
                .0
        };
        let (a, b) = (open().await, open().await);
        let held = add(&a, new_pet("held", None)).await.expect("create");
        let holder = {
            let cluster = Arc::clone(&cluster);
            std::thread::spawn(move || {
                cluster.psql(&format!(
                    "\\connect feed_order\nBEGIN;\nSELECT 1 FROM pets WHERE id = {} FOR UPDATE;\n\
                     SELECT pg_sleep(2);\nCOMMIT;",
                    held.id
                ))
            })
        };
        tokio::time::sleep(Duration::from_millis(500)).await;
        let patching = {
            let a = a.clone();
            tokio::spawn(async move { a.patch(held.id, sold(), Precondition::None).await })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!patching.is_finished(), "A's patch waits on the held row");
        add(&b, new_pet("meanwhile", None)).await.expect("create");
        let (seen, page) = feed(&b, None).await;
        assert_eq!(seen.len(), 2, "the first create and B's, not A's patch yet");
        patching.await.expect("joins").expect("patch");
        holder.join().expect("the holding session ends");
        let (after, _) = feed(&b, Some(page.next_position())).await;
        let kinds: Vec<(&str, i64)> = after
            .iter()
            .map(|e| {
                (
                    e["type"].as_str().expect("type"),
                    e["petId"].as_i64().expect("id"),
                )
            })
            .collect();
        assert_eq!(kinds, [("pet.updated", held.id)]);
        a.close().await;
        b.close().await;
    });
}
