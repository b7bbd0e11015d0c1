//! The store suite: the same test functions run against every backend, so the redb file and
//! PostgreSQL keep one contract (pages after a cursor, revisions and preconditions, deletes,
//! idempotency records, ids). Each function gets a fresh, empty store. PostgreSQL runs in a
//! throwaway cluster (`tests/support/pg_cluster.rs`, the API tests' and the load bench's too)
//! shared by the tests running at the same time, one database each.

// A test fixture, not store code: it lives with the other crates' test support.
#[path = "../../tests/support/pg_cluster.rs"]
mod pg_cluster;

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use bytes::Bytes;

use super::model::{Change, IdempotencyRecord, SHORT_DIGEST};
use super::ops::any_revision::{deleting, moving, patching};
use super::ops::{CreateCategory, DeleteCategory, DeletePet, MoveOrder, PatchCategory, PatchPet};
use super::*;
use crate::category::{CategoryPatch, NewCategory};
use crate::event::{EventType, Position, Types};
use crate::order::{OrderAction, OrderStatus, Refused};
use crate::pet::{Pet, PetPatch, PetStatus};
use crate::store::resource::Resource;
use crate::subject::{Kind, Subject};
use pg_cluster::Cluster;

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
        .for_body([fingerprint; 32])
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
        .write(PatchPet {
            id: pet.id,
            patch: sold(),
            precondition: Precondition::RevisionIn(vec![1]),
        })
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
    let patched = store.write(patching(1, removed)).await.expect("patch");
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
            store
                .write(PatchPet {
                    id: 1,
                    patch: sold(),
                    precondition: precondition.clone()
                })
                .await,
            Err(StoreError::PreconditionFailed)
        ));
        assert!(matches!(
            store
                .write(DeletePet {
                    id: 1,
                    precondition
                })
                .await,
            Err(StoreError::PreconditionFailed)
        ));
    }
    assert!(matches!(
        store.write(patching(2, sold())).await,
        Err(StoreError::NotFound(Subject {
            kind: Kind::Pet,
            id: 2
        }))
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
        .write(patching(1, PetPatch::default()))
        .await
        .expect("patch");
    store
        .write(DeletePet {
            id: 1,
            precondition: Precondition::RevisionIn(vec![2]),
        })
        .await
        .expect("delete");
    assert!(store.get(1).await.expect("get").is_none());
    assert_eq!(ids(store, Some(PetStatus::Sold)).await, Vec::<i64>::new());
    assert!(matches!(
        store.write(deleting(1)).await,
        Err(StoreError::NotFound(Subject {
            kind: Kind::Pet,
            id: 1
        }))
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
        .write(patching(first.pet.id, sold()))
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
        .write(patching(first.id, sold()))
        .await
        .expect("patch");
    let stale = store
        .write(PatchPet {
            id: first.id,
            patch: sold(),
            precondition: Precondition::RevisionIn(vec![1]),
        })
        .await;
    assert!(matches!(stale, Err(StoreError::PreconditionFailed)));
    store.write(deleting(keyed.pet.id)).await.expect("delete");
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
    (export.next_ids.pets(), chunks)
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
        store.write(patching(id, sold())).await.expect("patch");
    }
    add(store, new_pet("gone", None)).await.expect("create");
    store.write(deleting(6)).await.expect("delete");
    store.write(deleting(1)).await.expect("delete");

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
            Chunk::Rows(_) => panic!("none were made"),
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

/// A hold that ends a minute after the order: neither ends by itself during a test nor is
/// expired by the store's once-a-second loop, so `expire_holds` decides when.
const HOLD_A_MINUTE: Tuning = Tuning {
    order_hold: Some(Duration::from_secs(60)),
    ..TUNING
};

/// A hold that has ended by the time a client could complete its order.
const HOLD_ENDED: Tuning = Tuning {
    order_hold: Some(Duration::from_millis(1)),
    ..TUNING
};

fn an_order(pet: PetId) -> NewOrder {
    NewOrder {
        pet_id: pet,
        note: None,
    }
}

async fn place(store: &Store, pet: PetId) -> Result<Placed, StoreError> {
    store.place_order(an_order(pet), None).await
}

/// The pet's status as its stored JSON gives it.
fn status_of(pet: &StoredPet) -> Option<PetStatus> {
    crate::pet::Pet::from_json(&pet.json)
        .expect("a stored pet reads back")
        .status
}

/// The pet `id` as the store has it now.
async fn pet_now(store: &Store, id: PetId) -> StoredPet {
    store.get(id).await.expect("get").expect("the pet exists")
}

fn objects(page: &Page) -> Vec<serde_json::Value> {
    let value: serde_json::Value = serde_json::from_slice(&page.json).expect("a page is JSON");
    value.as_array().expect("a page is an array").clone()
}

/// Every pet a walk of the list finds (pages of 7, each after the last one's last id), by id
/// with its status.
async fn walk_pets(
    store: &Store,
    status: Option<PetStatus>,
    category: Option<CategoryId>,
) -> Vec<(PetId, Option<PetStatus>)> {
    let mut found = Vec::new();
    let mut after = None;
    loop {
        let page = store.list(status, category, after, 7).await.expect("list");
        for pet in objects(&page) {
            let id = pet["id"].as_i64().expect("id");
            let status = pet["status"].as_str().and_then(PetStatus::parse);
            found.push((id, status));
        }
        if !page.more {
            return found;
        }
        after = page.last_id;
    }
}

/// Every order a walk of the list finds with `status` and of `pet` (pages of 3).
async fn walk_orders(
    store: &Store,
    status: Option<OrderStatus>,
    pet_id: Option<PetId>,
) -> Vec<serde_json::Value> {
    let mut found = Vec::new();
    let mut after = None;
    loop {
        let query = OrderQuery {
            status,
            pet_id,
            search: Default::default(),
            sort: Default::default(),
            after,
            limit: 3,
        };
        let page = store.list_orders(query).await.expect("list orders");
        found.extend(objects(&page));
        if !page.more {
            return found;
        }
        after = page.last_id;
    }
}

/// The inventory a walk of every pet counts.
/// The ids of the orders the feed says expired, in feed order.
async fn expired_in_feed(store: &Store) -> Vec<i64> {
    let (events, _) = feed(store, None).await;
    events
        .iter()
        .filter(|e| e["type"] == "order.expired")
        .map(|e| e["orderId"].as_i64().expect("orderId"))
        .collect()
}

async fn counted(store: &Store) -> Inventory {
    let mut inventory = Inventory::default();
    for (_, status) in walk_pets(store, None, None).await {
        *inventory.count_mut(status) += 1;
    }
    inventory
}

pub(super) async fn an_order_holds_its_pet_until_it_is_completed_or_cancelled(store: Store) {
    let store = &store;
    let a = add(store, new_pet("a", Some(PetStatus::Available)))
        .await
        .expect("create");
    let b = add(store, new_pet("b", Some(PetStatus::Available)))
        .await
        .expect("create");
    let note = Some("Ann, collects Saturday".to_string());
    let placed = store
        .place_order(
            NewOrder {
                pet_id: a.id,
                note: note.clone(),
            },
            None,
        )
        .await
        .expect("placed");
    assert!(!placed.replayed);
    let order = placed.order.clone();
    assert_eq!(
        (order.id, order.pet_id, order.status, order.revision),
        (1, a.id, OrderStatus::Placed, 1)
    );
    assert_eq!((order.note, order.expires_at_ms), (note, None), "no hold");
    let pet = placed.pet.expect("the pet after the order");
    assert_eq!(
        (pet.revision, status_of(&pet)),
        (2, Some(PetStatus::Pending))
    );
    assert_eq!(pet_now(store, a.id).await.json, pet.json);
    assert_eq!(store.get_order(1).await.expect("get"), Some(placed.order));

    let done = store
        .write(moving(1, OrderAction::Complete))
        .await
        .expect("completed");
    assert_eq!(
        (done.order.status, done.order.revision),
        (OrderStatus::Completed, 2)
    );
    assert!(done.order.closed_at_ms.is_some());
    assert_eq!(
        (done.pet.id, done.pet.revision, status_of(&done.pet)),
        (a.id, 3, Some(PetStatus::Sold))
    );
    assert_eq!(pet_now(store, a.id).await.json, done.pet.json);

    let second = place(store, b.id).await.expect("placed").order;
    assert_eq!(second.id, 2);
    let cancelled = store
        .write(moving(2, OrderAction::Cancel))
        .await
        .expect("cancelled");
    assert_eq!(cancelled.order.status, OrderStatus::Cancelled);
    assert_eq!(
        (cancelled.pet.revision, status_of(&cancelled.pet)),
        (3, Some(PetStatus::Available))
    );
    assert_eq!(
        store.get_order(2).await.expect("get"),
        Some(cancelled.order)
    );
    assert_eq!(store.get_order(3).await.expect("get"), None);
    let listed: Vec<(i64, String)> = walk_orders(store, None, None)
        .await
        .iter()
        .map(|o| (o["id"].as_i64().expect("id"), o["status"].to_string()))
        .collect();
    assert_eq!(
        listed,
        [(1, "\"completed\"".into()), (2, "\"cancelled\"".into())]
    );
    let of_b = walk_orders(store, Some(OrderStatus::Cancelled), Some(b.id)).await;
    assert_eq!(of_b.len(), 1);
    assert!(
        walk_orders(store, Some(OrderStatus::Placed), None)
            .await
            .is_empty()
    );
    assert_eq!(
        store.inventory().await.expect("inventory"),
        Inventory {
            available: 1,
            sold: 1,
            ..Inventory::default()
        }
    );
}

pub(super) async fn an_order_needs_a_pet_that_exists_and_is_available_and_failing_takes_no_id(
    store: Store,
) {
    let store = &store;
    assert!(matches!(
        place(store, 99).await,
        Err(StoreError::NotFound(Subject {
            kind: Kind::Pet,
            id: 99
        }))
    ));
    for status in [None, Some(PetStatus::Pending), Some(PetStatus::Sold)] {
        let pet = add(store, new_pet("x", status)).await.expect("create");
        match place(store, pet.id).await {
            Err(StoreError::PetNotAvailable { pet: id, status: s }) => {
                assert_eq!((id, s), (pet.id, status));
            }
            other => panic!("{status:?}: {other:?}"),
        }
        assert_eq!(pet_now(store, pet.id).await.revision, 1, "left as it was");
    }
    assert!(walk_orders(store, None, None).await.is_empty());
    let available = add(store, new_pet("y", Some(PetStatus::Available)))
        .await
        .expect("create");
    let placed = place(store, available.id).await.expect("placed");
    assert_eq!(placed.order.id, 1, "refused orders took no id");
}

pub(super) async fn of_fifty_concurrent_orders_for_one_pet_exactly_one_is_placed(store: Store) {
    let pet = add(&store, new_pet("one", Some(PetStatus::Available)))
        .await
        .expect("create");
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..50 {
        let store = store.clone();
        tasks.spawn(async move { place(&store, pet.id).await });
    }
    let mut placed = Vec::new();
    for outcome in tasks.join_all().await {
        match outcome {
            Ok(order) => placed.push(order.order.id),
            Err(StoreError::PetNotAvailable { pet: id, status }) => {
                assert_eq!((id, status), (pet.id, Some(PetStatus::Pending)));
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(placed, [1]);
    assert_eq!(walk_orders(&store, None, Some(pet.id)).await.len(), 1);
    assert_eq!(pet_now(&store, pet.id).await.revision, 2);
}

pub(super) async fn only_a_placed_order_moves_and_if_match_is_the_order_s_revision(store: Store) {
    let store = &store;
    let pet = add(store, new_pet("a", Some(PetStatus::Available)))
        .await
        .expect("create");
    let order = place(store, pet.id).await.expect("placed").order;
    assert!(matches!(
        store.write(moving(99, OrderAction::Complete)).await,
        Err(StoreError::NotFound(Subject {
            kind: Kind::Order,
            id: 99
        }))
    ));
    for stale in [vec![2], vec![]] {
        let moved = store
            .write(MoveOrder {
                id: order.id,
                action: OrderAction::Complete,
                precondition: Precondition::RevisionIn(stale),
            })
            .await;
        assert!(
            matches!(moved, Err(StoreError::PreconditionFailed)),
            "{moved:?}"
        );
    }
    assert_eq!(
        store.get_order(order.id).await.expect("get"),
        Some(order.clone()),
        "unchanged"
    );
    store
        .write(MoveOrder {
            id: order.id,
            action: OrderAction::Complete,
            precondition: Precondition::RevisionIn(vec![1]),
        })
        .await
        .expect("completed at revision 1");
    for action in [OrderAction::Complete, OrderAction::Cancel] {
        match store.write(moving(order.id, action)).await {
            Err(StoreError::InvalidTransition {
                order: id,
                action: asked,
                refused,
            }) => assert_eq!(
                (id, asked, refused),
                (order.id, action, Refused::NotPlaced(OrderStatus::Completed))
            ),
            other => panic!("{other:?}"),
        }
    }
    let pet = pet_now(store, pet.id).await;
    assert_eq!((pet.revision, status_of(&pet)), (3, Some(PetStatus::Sold)));
}

pub(super) async fn an_ended_hold_cannot_complete(store: Store) {
    let store = &store;
    let pet = add(store, new_pet("a", Some(PetStatus::Available)))
        .await
        .expect("create");
    let order = place(store, pet.id).await.expect("placed").order;
    let end = order.expires_at_ms.expect("a hold");
    assert_eq!(end, order.placed_at_ms + 1);
    let completed = store.write(moving(order.id, OrderAction::Complete)).await;
    // The store's own loop may have expired it first; either way it is not sold.
    match completed {
        Err(StoreError::InvalidTransition {
            refused: Refused::HoldEnded(at),
            ..
        }) => assert_eq!(at, end),
        Err(StoreError::InvalidTransition {
            refused: Refused::NotPlaced(OrderStatus::Expired),
            ..
        }) => {}
        other => panic!("{other:?}"),
    }
    assert_ne!(
        status_of(&pet_now(store, pet.id).await),
        Some(PetStatus::Sold)
    );
    match store.write(moving(order.id, OrderAction::Cancel)).await {
        Ok(cancelled) => assert_eq!(status_of(&cancelled.pet), Some(PetStatus::Available)),
        Err(StoreError::InvalidTransition {
            refused: Refused::NotPlaced(OrderStatus::Expired),
            ..
        }) => {}
        other => panic!("an ended hold can still be cancelled: {other:?}"),
    }
    assert_eq!(
        status_of(&pet_now(store, pet.id).await),
        Some(PetStatus::Available)
    );
}

pub(super) async fn a_held_pet_keeps_its_status_and_stays_while_its_order_is_placed(store: Store) {
    let store = &store;
    let pet = add(store, new_pet("a", Some(PetStatus::Available)))
        .await
        .expect("create");
    let order = place(store, pet.id).await.expect("placed").order;
    let reserved = |outcome: Result<(), StoreError>| match outcome {
        Err(StoreError::PetReserved { pet: p, order: o }) => assert_eq!((p, o), (pet.id, order.id)),
        other => panic!("{other:?}"),
    };
    for status in [Some(PetStatus::Available), Some(PetStatus::Pending), None] {
        let patch = PetPatch {
            status: Some(status),
            ..PetPatch::default()
        };
        reserved(store.write(patching(pet.id, patch)).await.map(|_| ()));
    }
    reserved(store.write(deleting(pet.id)).await.map(|_| ()));
    // The older checks answer first.
    assert!(matches!(
        store
            .write(DeletePet {
                id: pet.id,
                precondition: Precondition::RevisionIn(vec![1])
            })
            .await,
        Err(StoreError::PreconditionFailed)
    ));
    let renamed = PetPatch {
        name: Some("renamed".into()),
        category_id: Some(5),
        ..PetPatch::default()
    };
    let patched = store
        .write(PatchPet {
            id: pet.id,
            patch: renamed,
            precondition: Precondition::RevisionIn(vec![2]),
        })
        .await
        .expect("a name and a category go through");
    assert_eq!(
        &patched.json[..],
        format!(
            r#"{{"id":{},"name":"renamed","categoryId":5,"status":"pending"}}"#,
            pet.id
        )
        .as_bytes()
    );
    assert_eq!(
        walk_pets(store, None, Some(5)).await,
        [(pet.id, Some(PetStatus::Pending))]
    );
    store
        .write(moving(order.id, OrderAction::Cancel))
        .await
        .expect("cancelled");
    store
        .write(patching(pet.id, sold()))
        .await
        .expect("free again");
    store.write(deleting(pet.id)).await.expect("and deleted");
    let inventory = store.inventory().await.expect("inventory");
    assert_eq!(inventory.total(), 0);
}

pub(super) async fn an_ended_hold_expires_once_and_frees_its_pet(store: Store) {
    let store = &store;
    let mut orders = Vec::new();
    for name in ["a", "b", "c"] {
        let pet = add(store, new_pet(name, Some(PetStatus::Available)))
            .await
            .expect("create");
        orders.push(place(store, pet.id).await.expect("placed").order);
    }
    store
        .write(moving(orders[2].id, OrderAction::Complete))
        .await
        .expect("completed before its hold ended");
    let end = orders[0].expires_at_ms.expect("a hold");
    assert_eq!(end, orders[0].placed_at_ms + 60_000);
    assert_eq!(
        store
            .expire_holds(orders[0].placed_at_ms)
            .await
            .expect("expire"),
        0
    );
    let later = orders[1].expires_at_ms.expect("a hold") + 1000;
    assert_eq!(store.expire_holds(later).await.expect("expire"), 2);
    for order in &orders[..2] {
        let expired = store.get_order(order.id).await.expect("get").expect("kept");
        assert_eq!(
            (expired.status, expired.revision, expired.closed_at_ms),
            (OrderStatus::Expired, 2, Some(later))
        );
        let pet = pet_now(store, order.pet_id).await;
        assert_eq!(
            (pet.revision, status_of(&pet)),
            (3, Some(PetStatus::Available))
        );
    }
    assert_eq!(store.expire_holds(later).await.expect("once"), 0);
    assert_eq!(
        store
            .get_order(orders[2].id)
            .await
            .expect("get")
            .map(|o| o.status),
        Some(OrderStatus::Completed)
    );
    assert_eq!(
        store.inventory().await.expect("inventory"),
        Inventory {
            available: 2,
            sold: 1,
            ..Inventory::default()
        }
    );
    let expired = expired_in_feed(store).await;
    assert_eq!(expired, [orders[0].id, orders[1].id], "one event each");
}

/// An expiry meets a placed order that cannot expire: its pet is gone, which no write allows
/// (a held pet is not deleted), so the stored data was broken by hand. An import takes records
/// as they are, and brings such an order in as a copy of that store would. The order is left
/// as it was, every other ended order of the same run expires with its pet, and a create
/// queued with the expiry commits: one broken order fails nobody else's write. The next run
/// leaves it again.
pub(super) async fn an_order_that_cannot_expire_is_left_and_the_rest_of_its_batch_goes_ahead(
    store: Store,
) {
    // Holds that end a minute on, which the store's own once-a-second expiry leaves to this
    // test; ending together, they expire in id order.
    let now_ms = crate::store::events::now_ms();
    let hold = Some(Duration::from_secs(60));
    let orders: Vec<Order> = (1..=3)
        .map(|id| Order::place(id, an_order(id), now_ms, hold))
        .collect();
    // Pet 2, held by order 2, the second to expire, is not there.
    let chunks = vec![Chunk::Pets(vec![held(1), held(3)]), Chunk::rows(&orders)];
    let next = next_ids(4, 4, 1);
    let copy = imported(store, chunks, next).await;
    let store = &copy;

    let at = orders[2].expires_at_ms.expect("a hold") + 1000;
    // Queued in one poll. On PostgreSQL, whose writer is a task of this runtime and runs only
    // once both are queued, they share a batch; redb's writer thread may wake between the
    // two and take the expiry alone (a run in four, under load). Each outcome below holds
    // however they were batched: an expiry that failed its batch would answer the failure,
    // as would every write in that batch.
    let (expired, created) = tokio::join!(
        store.expire_holds(at),
        add(store, new_pet("new", Some(PetStatus::Available)))
    );
    assert_eq!(expired.expect("the expiry's batch commits"), 2);
    let created = created.expect("the create in the expiry's batch commits");
    assert_eq!(created.id, 4);
    let read = store
        .get(4)
        .await
        .expect("get")
        .expect("the new pet is stored");
    assert_eq!((read.revision, read.json), (1, created.json));

    for order in [&orders[0], &orders[2]] {
        let expired = store.get_order(order.id).await.expect("get").expect("kept");
        assert_eq!(
            (expired.status, expired.revision, expired.closed_at_ms),
            (OrderStatus::Expired, 2, Some(at)),
            "order {}",
            order.id
        );
        let pet = pet_now(store, order.pet_id).await;
        assert_eq!(
            (pet.revision, status_of(&pet)),
            (2, Some(PetStatus::Available)),
            "pet {}",
            order.pet_id
        );
    }
    let left = Some(orders[1].clone());
    assert_eq!(
        store.get_order(2).await.expect("get"),
        left,
        "left as it was"
    );
    assert!(store.get(2).await.expect("get").is_none(), "still gone");

    assert_eq!(store.expire_holds(at).await.expect("left again"), 0);
    assert_eq!(store.get_order(2).await.expect("get"), left);
    assert_eq!(
        store.inventory().await.expect("inventory"),
        Inventory {
            available: 3,
            ..Inventory::default()
        }
    );
    let expired = expired_in_feed(store).await;
    assert_eq!(expired, [1, 3], "an event for each order that expired");
    copy.close().await;
}

/// xorshift64* (as `tests/api/support.rs`): a repeatable mix.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n.max(1) as u64) as usize
    }

    fn status(&mut self) -> Option<PetStatus> {
        [
            None,
            Some(PetStatus::Available),
            Some(PetStatus::Available),
            Some(PetStatus::Pending),
            Some(PetStatus::Sold),
        ][self.below(5)]
    }
}

pub(super) async fn the_inventory_counts_what_a_walk_of_every_pet_counts(store: Store) {
    let store = &store;
    assert_eq!(
        store.inventory().await.expect("inventory"),
        Inventory::default()
    );
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut pets: Vec<PetId> = Vec::new();
    let mut orders: Vec<OrderId> = Vec::new();
    for round in 0..40 {
        // Eight writes at once, so batches mix them.
        let mut writes = tokio::task::JoinSet::new();
        for _ in 0..8 {
            let pet = pets.get(rng.below(pets.len())).copied().unwrap_or(1);
            let order = orders.get(rng.below(orders.len())).copied().unwrap_or(1);
            let (store, status, kind) = (store.clone(), rng.status(), rng.below(8));
            writes.spawn(async move {
                match kind {
                    0 | 1 => add(&store, new_pet("n", status))
                        .await
                        .map(|p| (Some(p.id), None)),
                    2 => {
                        let patch = PetPatch {
                            status: Some(status),
                            ..PetPatch::default()
                        };
                        store
                            .write(patching(pet, patch))
                            .await
                            .map(|_| (None, None))
                    }
                    3 => store.write(deleting(pet)).await.map(|_| (None, None)),
                    4 | 5 => place(&store, pet).await.map(|p| (None, Some(p.order.id))),
                    6 => store
                        .write(moving(order, OrderAction::Complete))
                        .await
                        .map(|_| (None, None)),
                    _ => store
                        .write(moving(order, OrderAction::Cancel))
                        .await
                        .map(|_| (None, None)),
                }
            });
        }
        for outcome in writes.join_all().await {
            match outcome {
                Ok((pet, order)) => {
                    pets.extend(pet);
                    orders.extend(order);
                }
                Err(
                    StoreError::NotFound(Subject {
                        kind: Kind::Pet | Kind::Order,
                        ..
                    })
                    | StoreError::PetNotAvailable { .. }
                    | StoreError::PetReserved { .. }
                    | StoreError::InvalidTransition { .. },
                ) => {}
                Err(e) => panic!("round {round}: {e}"),
            }
        }
        if round % 10 == 9 {
            assert_eq!(
                store.inventory().await.expect("inventory"),
                counted(store).await,
                "round {round}"
            );
        }
    }
    assert!(
        !orders.is_empty() && pets.len() > 50,
        "the mix did something"
    );
    // Every placed order's pet is pending.
    for order in walk_orders(store, Some(OrderStatus::Placed), None).await {
        let pet = pet_now(store, order["petId"].as_i64().expect("petId")).await;
        assert_eq!(status_of(&pet), Some(PetStatus::Pending));
    }
}

pub(super) async fn categories_have_unique_names_ignoring_case_and_leave_only_when_unused(
    store: Store,
) {
    let store = &store;
    let named = |name: &str| NewCategory { name: name.into() };
    let dogs = store
        .write(CreateCategory(named("Dogs")))
        .await
        .expect("create");
    assert_eq!(
        dogs,
        Category {
            id: 1,
            name: "Dogs".into()
        }
    );
    match store.write(CreateCategory(named("dOGS"))).await {
        Err(StoreError::NameTaken(name)) => assert_eq!(name.to_lowercase(), "dogs"),
        other => panic!("{other:?}"),
    }
    let cats = store
        .write(CreateCategory(named("Cats")))
        .await
        .expect("create");
    assert_eq!(cats.id, 2, "a name taken took no id");
    let rename = |name: &str| CategoryPatch {
        name: Some(name.into()),
    };
    assert!(matches!(
        store
            .write(PatchCategory {
                id: cats.id,
                patch: rename("DOGS")
            })
            .await,
        Err(StoreError::NameTaken(_))
    ));
    let renamed = store
        .write(PatchCategory {
            id: cats.id,
            patch: rename("cats"),
        })
        .await
        .expect("its own name in another case");
    assert_eq!(renamed.name, "cats");
    assert_eq!(
        store
            .write(PatchCategory {
                id: cats.id,
                patch: CategoryPatch::default()
            })
            .await
            .expect("an empty patch"),
        renamed
    );
    assert!(matches!(
        store
            .write(PatchCategory {
                id: 9,
                patch: rename("x")
            })
            .await,
        Err(StoreError::NotFound(Subject {
            kind: Kind::Category,
            id: 9
        }))
    ));
    assert_eq!(store.get_category(2).await.expect("get"), Some(renamed));
    let pet = add(store, new_pet("rex", None)).await.expect("create");
    assert_eq!(pet.id, 1);
    assert!(matches!(
        store.write(DeleteCategory(dogs.id)).await,
        Err(StoreError::CategoryInUse(1))
    ));
    store.write(DeleteCategory(cats.id)).await.expect("unused");
    assert_eq!(store.get_category(cats.id).await.expect("get"), None);
    assert!(matches!(
        store.write(DeleteCategory(cats.id)).await,
        Err(StoreError::NotFound(Subject {
            kind: Kind::Category,
            id: 2
        }))
    ));
    let cats = store
        .write(CreateCategory(named("Cats")))
        .await
        .expect("the name is free");
    assert_eq!(cats.id, 3, "ids are not reused");
    for name in ["Birds", "Fish", "Newts"] {
        store
            .write(CreateCategory(named(name)))
            .await
            .expect("create");
    }
    let mut listed = Vec::new();
    let mut after = None;
    loop {
        let page = store.list_categories(after, 2).await.expect("list");
        listed.extend(objects(&page));
        if !page.more {
            break;
        }
        after = page.last_id;
    }
    assert_eq!(
        serde_json::Value::Array(listed),
        serde_json::json!([
            {"id": 1, "name": "Dogs"}, {"id": 3, "name": "Cats"}, {"id": 4, "name": "Birds"},
            {"id": 5, "name": "Fish"}, {"id": 6, "name": "Newts"},
        ])
    );
}

pub(super) async fn pets_list_by_category_with_and_without_status_across_pages(store: Store) {
    let store = &store;
    let mut expected = Vec::new();
    for i in 0..40_i64 {
        let status = [None, Some(PetStatus::Available), Some(PetStatus::Sold)][(i % 3) as usize];
        let pet = NewPet {
            name: format!("p{i}"),
            category_id: i % 4,
            status,
        };
        let id = add(store, pet).await.expect("create").id;
        expected.push((id, i % 4, status));
    }
    for category in 0..5 {
        let of = |status: Option<PetStatus>| -> Vec<(PetId, Option<PetStatus>)> {
            expected
                .iter()
                .filter(|(_, c, s)| {
                    *c == category && status.is_none_or(|status| *s == Some(status))
                })
                .map(|(id, _, s)| (*id, *s))
                .collect()
        };
        assert_eq!(walk_pets(store, None, Some(category)).await, of(None));
        for status in [PetStatus::Available, PetStatus::Pending, PetStatus::Sold] {
            assert_eq!(
                walk_pets(store, Some(status), Some(category)).await,
                of(Some(status)),
                "{category} {status:?}"
            );
        }
    }
    // A patch moves a pet to another category's list.
    store
        .write(PatchPet {
            id: 1,
            patch: PetPatch {
                category_id: Some(9),
                ..PetPatch::default()
            },
            precondition: Precondition::None,
        })
        .await
        .expect("patch");
    assert_eq!(walk_pets(store, None, Some(9)).await, [(1, None)]);
    assert!(
        !walk_pets(store, None, Some(0))
            .await
            .iter()
            .any(|(id, _)| *id == 1)
    );
}

pub(super) async fn every_order_and_category_change_appends_its_event_with_its_subject(
    store: Store,
) {
    let store = &store;
    let mut settled = store.subscribe();
    let a = add(store, new_pet("a", Some(PetStatus::Available)))
        .await
        .expect("create");
    let b = add(store, new_pet("b", Some(PetStatus::Available)))
        .await
        .expect("create");
    let placed = place(store, a.id).await.expect("placed");
    let done = store
        .write(moving(placed.order.id, OrderAction::Complete))
        .await
        .expect("completed");
    let second = place(store, b.id).await.expect("placed");
    let third_pet = add(store, new_pet("c", Some(PetStatus::Available)))
        .await
        .expect("create");
    let third = place(store, third_pet.id).await.expect("placed");
    // One transaction expires two orders: two events, in the order of their ends.
    let ended = third.order.expires_at_ms.expect("a hold") + 1000;
    assert_eq!(store.expire_holds(ended).await.expect("expire"), 2);
    // Category 1 is the pets' (`new_pet`), so it stays.
    for name in ["Cats", "Dogs"] {
        store
            .write(CreateCategory(NewCategory { name: name.into() }))
            .await
            .expect("create");
    }
    let dogs = store.get_category(2).await.expect("get").expect("created");
    let renamed = store
        .write(PatchCategory {
            id: dogs.id,
            patch: CategoryPatch {
                name: Some("Hounds".into()),
            },
        })
        .await
        .expect("patch");
    store.write(DeleteCategory(dogs.id)).await.expect("delete");
    // Writes that change nothing make no event.
    assert!(place(store, 99).await.is_err());
    assert!(store.write(DeleteCategory(dogs.id)).await.is_err());

    let (events, _) = feed(store, None).await;
    let order_events: Vec<(&str, i64, i64)> = events
        .iter()
        .filter(|e| e.get("orderId").is_some())
        .map(|e| {
            (
                e["type"].as_str().expect("type"),
                e["orderId"].as_i64().expect("orderId"),
                e["petId"].as_i64().expect("petId"),
            )
        })
        .collect();
    assert_eq!(
        order_events,
        [
            ("order.placed", placed.order.id, a.id),
            ("order.completed", placed.order.id, a.id),
            ("order.placed", second.order.id, b.id),
            ("order.placed", third.order.id, third_pet.id),
            ("order.expired", second.order.id, b.id),
            ("order.expired", third.order.id, third_pet.id),
        ]
    );
    let json = |bytes: &[u8]| serde_json::from_slice::<serde_json::Value>(bytes).expect("JSON");
    let completed = events
        .iter()
        .find(|e| e["type"] == "order.completed")
        .expect("the completion's event");
    assert_eq!(completed["order"], json(&done.order.to_json()));
    assert_eq!(completed["pet"], json(&done.pet.json));
    assert_eq!(completed["etag"], format!("\"{}.3\"", a.id));
    let category_events: Vec<serde_json::Value> = events
        .iter()
        .filter(|e| e["categoryId"] == dogs.id)
        .map(|e| serde_json::json!([e["type"], e["categoryId"], e["category"]]))
        .collect();
    assert_eq!(
        category_events,
        [
            serde_json::json!(["category.created", dogs.id, json(&dogs.to_json())]),
            serde_json::json!(["category.updated", dogs.id, json(&renamed.to_json())]),
            serde_json::json!(["category.deleted", dogs.id, null]),
        ]
    );
    // What listeners heard is what the feed keeps, change for change, in the same order.
    let mut heard = Vec::new();
    while let Ok(batch) = settled.try_recv() {
        heard.extend(batch.iter().map(|c| {
            let kept = StoredEvent::of(0, c, 0);
            (kept.kind, kept.pet_id, kept.subject_id)
        }));
    }
    let page = store
        .events(EventQuery {
            after: None,
            types: Types::ALL,
            limit: 1000,
            scan: 1000,
        })
        .await
        .expect("feed");
    let kept: Vec<_> = page
        .events
        .iter()
        .map(|e| (e.kind, e.pet_id, e.subject_id))
        .collect();
    assert_eq!(heard, kept);
    assert_eq!(kept.len(), 3 + 6 + 4);
}

pub(super) async fn a_keyed_order_replays_its_first_answer_and_refuses_another_body(store: Store) {
    let store = &store;
    let pet = add(store, new_pet("a", Some(PetStatus::Available)))
        .await
        .expect("create");
    let sold_pet = add(store, new_pet("b", Some(PetStatus::Sold)))
        .await
        .expect("create");
    // A refused order leaves no record: the key still places once the pet is available.
    assert!(matches!(
        store
            .place_order(an_order(sold_pet.id), Some(key(store, 4, 4)))
            .await,
        Err(StoreError::PetNotAvailable { .. })
    ));
    let first = store
        .place_order(an_order(pet.id), Some(key(store, 5, 5)))
        .await
        .expect("placed");
    assert!(!first.replayed);
    store
        .write(moving(first.order.id, OrderAction::Complete))
        .await
        .expect("completed");
    let again = store
        .place_order(an_order(pet.id), Some(key(store, 5, 5)))
        .await
        .expect("replayed");
    assert!(again.replayed);
    assert_eq!(again.order, first.order, "the order as it was placed");
    assert!(again.pet.is_none());
    assert!(matches!(
        store
            .place_order(an_order(sold_pet.id), Some(key(store, 5, 6)))
            .await,
        Err(StoreError::IdempotencyKeyReused)
    ));
    // A key used for a pet is not an order's.
    store
        .create(new_pet("k", None), Some(key(store, 6, 6)))
        .await
        .expect("create");
    assert!(matches!(
        store
            .place_order(an_order(pet.id), Some(key(store, 6, 7)))
            .await,
        Err(StoreError::IdempotencyKeyReused)
    ));
    store
        .write(PatchPet {
            id: sold_pet.id,
            patch: PetPatch {
                status: Some(Some(PetStatus::Available)),
                ..PetPatch::default()
            },
            precondition: Precondition::None,
        })
        .await
        .expect("patch");
    let later = store
        .place_order(an_order(sold_pet.id), Some(key(store, 4, 4)))
        .await
        .expect("placed");
    assert_eq!((later.replayed, later.order.id), (false, 2));
    assert_eq!(walk_orders(store, None, None).await.len(), 2);
}

pub(super) async fn a_copy_carries_categories_orders_next_ids_and_the_inventory(store: Store) {
    let source = &store;
    for name in ["Dogs", "Cats", "Gone"] {
        source
            .write(CreateCategory(NewCategory { name: name.into() }))
            .await
            .expect("create");
    }
    source.write(DeleteCategory(3)).await.expect("delete");
    let mut pets = Vec::new();
    for i in 0..5 {
        let pet = NewPet {
            name: format!("p{i}"),
            category_id: 1 + i % 2,
            status: Some(PetStatus::Available),
        };
        pets.push(add(source, pet).await.expect("create").id);
    }
    let keyed = source
        .place_order(an_order(pets[0]), Some(key(source, 8, 8)))
        .await
        .expect("placed")
        .order;
    let completed = place(source, pets[1]).await.expect("placed").order;
    source
        .write(moving(completed.id, OrderAction::Complete))
        .await
        .expect("complete");
    let cancelled = place(source, pets[2]).await.expect("placed").order;
    source
        .write(moving(cancelled.id, OrderAction::Cancel))
        .await
        .expect("cancel");
    source.write(deleting(pets[4])).await.expect("delete");

    let mut export = source
        .export(2, crate::clock::unix_now())
        .await
        .expect("export");
    assert_eq!(export.next_ids, next_ids(6, 4, 4));
    let (target, _keep) = fresh_like(source).await;
    let mut import = target.import().await.expect("an empty target");
    let mut kinds = Vec::new();
    while let Some(chunk) = export.next().await {
        let chunk = chunk.expect("a chunk");
        let kind = match &chunk {
            Chunk::Pets(_) => "pets",
            Chunk::Records(_) => "records",
            Chunk::Rows(rows) => rows.kind.plural(),
        };
        if kinds.last() != Some(&kind) {
            kinds.push(kind);
        }
        import.write(chunk).await.expect("write");
    }
    assert_eq!(kinds, ["pets", "records", "categories", "orders"]);
    import.commit(export.next_ids).await.expect("commit");

    for id in 1..=3 {
        assert_eq!(
            target.get_order(id).await.expect("get"),
            source.get_order(id).await.expect("get"),
        );
    }
    assert_eq!(
        target.list_categories(None, 10).await.expect("list").json,
        source.list_categories(None, 10).await.expect("list").json
    );
    assert_eq!(
        target
            .list(None, Some(2), None, 10)
            .await
            .expect("list")
            .json,
        source
            .list(None, Some(2), None, 10)
            .await
            .expect("list")
            .json
    );
    let inventory = source.inventory().await.expect("inventory");
    assert_eq!(
        inventory,
        Inventory {
            available: 2,
            pending: 1,
            sold: 1,
            unset: 0
        }
    );
    assert_eq!(target.inventory().await.expect("inventory"), inventory);
    // The copy's placed order still holds its pet, and its key still replays.
    assert!(matches!(
        target.write(deleting(pets[0])).await,
        Err(StoreError::PetReserved { .. })
    ));
    let replayed = target
        .place_order(an_order(pets[0]), Some(key(&target, 8, 8)))
        .await
        .expect("replayed");
    assert_eq!((replayed.replayed, replayed.order), (true, keyed));
    // The next ids go on from the source's.
    let cat = target
        .write(CreateCategory(NewCategory {
            name: "Gone".into(),
        }))
        .await
        .expect("create");
    assert_eq!(cat.id, 4);
    assert_eq!(place(&target, pets[3]).await.expect("placed").order.id, 4);
    assert_eq!(
        add(&target, new_pet("new", None)).await.expect("create").id,
        6
    );
    assert!(matches!(
        target.import().await.err(),
        Some(StoreError::NotEmpty { .. })
    ));
    target.close().await;
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

/// Runs `case` on a fresh redb store, opened each way redb opens its file: this process's
/// alone (the default), and shared with other processes that read it.
fn on_redb<F>(case: fn(Store) -> F, tuning: Tuning)
where
    F: std::future::Future<Output = ()>,
{
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime builds");
    for shared in [false, true] {
        runtime.block_on(async {
            let (store, dir) = fresh_redb(shared, tuning).await;
            SHARED_FILE.set(shared.then(|| (redb_file(&dir), tuning)));
            case(store.clone()).await;
            SHARED_FILE.set(None);
            // Alone, the file keeps a log: every write of the case must replay from it.
            crate::store::redb::assert_log_replays(&store).await;
            store.close().await;
        });
    }
}

/// Runs `case` on a fresh PostgreSQL store: a new database of the shared cluster.
fn on_postgres<F>(case: fn(Store) -> F, tuning: Tuning)
where
    F: std::future::Future<Output = ()>,
{
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime builds");
    runtime.block_on(async {
        let (store, _cluster) = fresh_postgres(tuning).await;
        case(store.clone()).await;
        store.close().await;
    });
}

/// A new, empty redb store in a temp dir, which lives as long as the dir returned.
async fn fresh_redb(shared: bool, tuning: Tuning) -> (Store, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = open_redb(&redb_file(&dir), shared, tuning).await;
    (store, dir)
}

/// The file of the redb store made in `dir`.
fn redb_file(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join("pets.redb")
}

/// The redb store of the file at `path`, opened `shared` or alone.
async fn open_redb(path: &Path, shared: bool, tuning: Tuning) -> Store {
    let redb = Location::Redb {
        path: path.to_owned(),
        cache_bytes: 1 << 20,
        shared,
    };
    Store::open(redb, tuning).await.expect("open redb").0
}

thread_local! {
    /// The file and tuning of the store `on_redb` runs the case of this thread on, while that
    /// store shares its file with other processes: `imported` opens it alone for an import.
    static SHARED_FILE: RefCell<Option<(PathBuf, Tuning)>> = const { RefCell::new(None) };
}

/// `store`, empty, with `chunks` copied in and the copy's id counters `next`, as `petstore
/// copy` makes it; the store to go on with. A redb file shared with other processes refuses
/// the import's chunks, which are durable only with the last: `petstore copy` fills the file
/// opened alone, and so does this, before it opens the file shared again.
/// Pet `id`, pending: held by an order.
fn held(id: PetId) -> StoredPet {
    let pet = crate::pet::Pet {
        id,
        name: format!("held {id}"),
        category_id: 1,
        status: Some(PetStatus::Pending),
    };
    StoredPet {
        id,
        revision: 1,
        json: pet.to_json().into(),
    }
}

/// The counters of a store whose next pet, order and category get these ids.
fn next_ids(pets: u64, orders: u64, categories: u64) -> NextIds {
    let mut next = NextIds::untouched();
    next.set(<Pet as Resource>::COUNTER, pets);
    next.set(<Order as Resource>::COUNTER, orders);
    next.set(<Category as Resource>::COUNTER, categories);
    next
}

async fn imported(store: Store, chunks: Vec<Chunk>, next: NextIds) -> Store {
    let shared_file = SHARED_FILE.with_borrow(Clone::clone);
    let target = match &shared_file {
        None => store,
        Some((path, tuning)) => {
            store.close().await;
            open_redb(path, false, *tuning).await
        }
    };
    let mut import = target.import().await.expect("an empty store");
    for chunk in chunks {
        import.write(chunk).await.expect("a chunk is written");
    }
    import.commit(next).await.expect("the import commits");
    match shared_file {
        None => target,
        Some((path, tuning)) => {
            target.close().await;
            open_redb(&path, true, tuning).await
        }
    }
}

/// A new, empty PostgreSQL store: a database of its own in the shared cluster, which runs as
/// long as the cluster returned is held.
async fn fresh_postgres(tuning: Tuning) -> (Store, Arc<Cluster>) {
    static DATABASES: AtomicUsize = AtomicUsize::new(0);
    let cluster = shared_cluster();
    let database = format!("suite_{}", DATABASES.fetch_add(1, Ordering::Relaxed));
    cluster.psql(&format!("CREATE DATABASE {database}"));
    let url = cluster
        .url()
        .replace("/petstore?", &format!("/{database}?"));
    let target = postgres::connect::parse(&url, None, None, 4, Duration::from_secs(5))
        .expect("a test cluster URL");
    let (store, pets) = Store::open(Location::Postgres(Box::new(target)), tuning)
        .await
        .expect("open postgres");
    assert_eq!(pets, 0);
    (store, cluster)
}

/// What must live as long as a store the suite made: its file's directory, or its cluster.
#[expect(dead_code, reason = "held for what its drop does, never read")]
enum Keep {
    Dir(tempfile::TempDir),
    Cluster(Arc<Cluster>),
}

/// A new, empty store of the same backend as `store`, with the suite's tuning.
async fn fresh_like(store: &Store) -> (Store, Keep) {
    match &store.backend {
        Backend::Redb(_) => {
            let (store, dir) = fresh_redb(false, TUNING).await;
            (store, Keep::Dir(dir))
        }
        Backend::Postgres(_) => {
            let (store, cluster) = fresh_postgres(TUNING).await;
            (store, Keep::Cluster(cluster))
        }
    }
}

/// Makes one test a backend of each case, named `on_redb::CASE` and `on_postgres::CASE`, so
/// one backend's tests run alone with a filter (`store::suite::on_postgres`). A case may name
/// the `Tuning` its store is opened with (`CASE with TUNING`), else it gets `TUNING`.
macro_rules! suite {
    ($($case:ident $(with $tuning:ident)?),* $(,)?) => {
        mod on_redb {
            $(
                #[test]
                fn $case() {
                    super::on_redb(super::$case, suite!(@tuning $($tuning)?));
                }
            )*
        }

        mod on_postgres {
            $(
                #[test]
                fn $case() {
                    super::on_postgres(super::$case, suite!(@tuning $($tuning)?));
                }
            )*
        }
    };
    (@tuning) => { super::TUNING };
    (@tuning $tuning:ident) => { super::$tuning };
}

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
    an_order_holds_its_pet_until_it_is_completed_or_cancelled,
    an_order_needs_a_pet_that_exists_and_is_available_and_failing_takes_no_id,
    of_fifty_concurrent_orders_for_one_pet_exactly_one_is_placed,
    only_a_placed_order_moves_and_if_match_is_the_order_s_revision,
    an_ended_hold_cannot_complete with HOLD_ENDED,
    a_held_pet_keeps_its_status_and_stays_while_its_order_is_placed,
    an_ended_hold_expires_once_and_frees_its_pet with HOLD_A_MINUTE,
    an_order_that_cannot_expire_is_left_and_the_rest_of_its_batch_goes_ahead,
    an_order_that_does_not_read_back_is_left_by_the_expiry_and_the_rest_expire,
    the_inventory_counts_what_a_walk_of_every_pet_counts,
    categories_have_unique_names_ignoring_case_and_leave_only_when_unused,
    pets_list_by_category_with_and_without_status_across_pages,
    every_order_and_category_change_appends_its_event_with_its_subject with HOLD_A_MINUTE,
    a_keyed_order_replays_its_first_answer_and_refuses_another_body,
    a_copy_carries_categories_orders_next_ids_and_the_inventory,
    a_webhook_s_state_is_made_once_then_saved_and_read_back,
    searches_walk_every_filter_and_order_as_a_model_does,
    a_search_walk_sees_each_lasting_match_once_under_concurrent_writes,
    orders_list_by_their_pet_s_name_and_newest_first_as_a_model_does,
);

/// Orders of pets named from `SEARCH_NAMES`, some cancelled and placed again, some completed,
/// one pet renamed after its orders: every search, filter and order walked in pages of 3 finds
/// what a model finds (by the pet's name now).
async fn orders_list_by_their_pet_s_name_and_newest_first_as_a_model_does(store: Store) {
    use crate::search::{Search, Sort};
    let mut names = Vec::new();
    for n in 0..20 {
        let name = SEARCH_NAMES[n % SEARCH_NAMES.len()].to_owned();
        let pet = add(&store, new_pet(&name, Some(PetStatus::Available)))
            .await
            .expect("create");
        names.push((pet.id, name));
    }
    for (n, (pet, _)) in names.iter().enumerate() {
        let order = place(&store, *pet).await.expect("place").order.id;
        let action = match n % 3 {
            0 => continue,
            1 => OrderAction::Cancel,
            _ => OrderAction::Complete,
        };
        let moved = MoveOrder {
            id: order,
            action,
            precondition: Precondition::None,
        };
        store.write(moved).await.expect("move");
        if action == OrderAction::Cancel {
            place(&store, *pet).await.expect("placed again");
        }
    }
    let renamed = names[0].0;
    let patch = PetPatch {
        name: Some("Bellatrix".into()),
        ..PetPatch::default()
    };
    let rename = PatchPet {
        id: renamed,
        patch,
        precondition: Precondition::None,
    };
    store.write(rename).await.expect("rename");
    names[0].1 = "Bellatrix".into();
    let all = walk_orders(&store, None, None).await;
    let name_of = |pet: i64| &names.iter().find(|(id, _)| *id == pet).expect("a pet").1;
    for q in ["", "bel", "zoe", "max", "nothing"] {
        let search = Search::parse(q).expect("valid");
        for status in [
            None,
            Some(OrderStatus::Placed),
            Some(OrderStatus::Completed),
        ] {
            for pet_id in [None, Some(renamed), Some(names[4].0)] {
                for sort in [Sort::Id, Sort::Newest] {
                    let mut expected: Vec<i64> = all
                        .iter()
                        .filter(|order| {
                            let pet = order["petId"].as_i64().expect("a pet id");
                            let state = order["status"].as_str().expect("a status");
                            status.is_none_or(|s| s.as_str() == state)
                                && pet_id.is_none_or(|p| p == pet)
                                && search.matches(name_of(pet))
                        })
                        .map(|order| order["id"].as_i64().expect("an id"))
                        .collect();
                    if sort == Sort::Newest {
                        expected.reverse();
                    }
                    let mut walked = Vec::new();
                    let mut after = None;
                    loop {
                        let query = OrderQuery {
                            status,
                            pet_id,
                            search: search.clone(),
                            sort,
                            after,
                            limit: 3,
                        };
                        let page = store.list_orders(query).await.expect("list orders");
                        walked.extend(objects(&page).iter().map(|o| o["id"].as_i64().expect("id")));
                        if !page.more {
                            break;
                        }
                        after = page.last_id;
                    }
                    assert_eq!(
                        walked, expected,
                        "q={q:?} status={status:?} pet={pet_id:?} sort={sort:?}"
                    );
                }
            }
        }
    }
}

/// Names for the search cases: accents, case, punctuation, digits, emoji, shared prefixes.
const SEARCH_NAMES: &[&str] = &[
    "Bella",
    "Sir Belvedere",
    "Zoë",
    "zoe two",
    "Bellamy",
    "Max",
    "Maxine",
    "Amélie-Rose",
    "O'Malley",
    "Rex 2",
    "Straße",
    "🐶 Biscuit",
    "BELLE",
    "Bel",
    "Ｍａｘ",
    "",
];

/// A page of pets for `query`, with the ids and names it holds.
async fn found(store: &Store, query: PageQuery) -> (Page, Vec<(i64, String)>) {
    let page = store.find(query).await.expect("a search");
    let pets = objects(&page)
        .iter()
        .map(|pet| {
            let id = pet["id"].as_i64().expect("an id");
            (id, pet["name"].as_str().expect("a name").to_owned())
        })
        .collect();
    (page, pets)
}

/// Every page of `query` from its start, following each page's last id and key.
async fn walk_found(store: &Store, mut query: PageQuery) -> Vec<(i64, String)> {
    let mut all = Vec::new();
    for _ in 0..10_000 {
        let (page, pets) = found(store, query.clone()).await;
        assert!(pets.len() <= query.limit);
        all.extend(pets);
        if !page.more {
            return all;
        }
        let id = page.last_id.expect("a page with more has a last pet");
        if query.sort == crate::search::Sort::Name {
            assert!(
                page.last_key.is_some(),
                "a name-sorted page keeps its last key"
            );
        }
        query.after = Some(After {
            id,
            key: page.last_key,
        });
    }
    panic!("the walk never ended");
}

/// Pets named from `SEARCH_NAMES`, in two categories and every status, listed by filters,
/// searches and orders in pages of 3 and compared with what a model of the rules finds.
async fn searches_walk_every_filter_and_order_as_a_model_does(store: Store) {
    use crate::search::{Search, Sort, sort_key};
    let statuses = [
        None,
        Some(PetStatus::Available),
        Some(PetStatus::Pending),
        Some(PetStatus::Sold),
    ];
    let mut model = Vec::new();
    for n in 0..48 {
        let name = SEARCH_NAMES[n % SEARCH_NAMES.len()];
        let pet = NewPet {
            name: name.into(),
            category_id: 1 + (n as i64 / 3) % 2,
            status: statuses[n % 4],
        };
        let stored = add(&store, pet.clone()).await.expect("create");
        model.push((stored.id, pet));
    }
    // A rename and a delete move their entries.
    let renamed = model[0].0;
    let patch = PetPatch {
        name: Some("Belinda Zoë".into()),
        ..PetPatch::default()
    };
    store
        .write(PatchPet {
            id: renamed,
            patch,
            precondition: Precondition::None,
        })
        .await
        .expect("rename");
    model[0].1.name = "Belinda Zoë".into();
    let gone = model.remove(1).0;
    store
        .write(DeletePet {
            id: gone,
            precondition: Precondition::None,
        })
        .await
        .expect("delete");
    for q in [
        "", "bel", "BEL", "zoe", "sir bel", "max", "2", "biscuit", "nothing", "b z",
    ] {
        let search = Search::parse(q).expect("a valid q");
        for status in statuses {
            for category in [None, Some(1), Some(2)] {
                for sort in [Sort::Id, Sort::Newest, Sort::Name] {
                    let mut expected: Vec<(i64, String)> = model
                        .iter()
                        .filter(|(_, pet)| status.is_none_or(|s| pet.status == Some(s)))
                        .filter(|(_, pet)| category.is_none_or(|c| pet.category_id == c))
                        .filter(|(_, pet)| search.matches(&pet.name))
                        .map(|(id, pet)| (*id, pet.name.clone()))
                        .collect();
                    match sort {
                        Sort::Id => expected.sort_by_key(|(id, _)| *id),
                        Sort::Newest => expected.sort_by_key(|(id, _)| -id),
                        Sort::Name => expected
                            .sort_by(|(a, an), (b, bn)| (sort_key(an), a).cmp(&(sort_key(bn), b))),
                    }
                    let query = PageQuery {
                        status,
                        category,
                        search: search.clone(),
                        sort,
                        after: None,
                        limit: 3,
                    };
                    let walked = walk_found(&store, query).await;
                    assert_eq!(
                        walked, expected,
                        "q={q:?} status={status:?} category={category:?} sort={sort:?}"
                    );
                }
            }
        }
    }
}

/// While one task creates pets, renames some and deletes others, walks of a search in every
/// order see each pet that matched and kept its name throughout exactly once, and no pet
/// twice (sorted by name, a renamed pet may show under both names).
async fn a_search_walk_sees_each_lasting_match_once_under_concurrent_writes(store: Store) {
    use crate::search::{Search, Sort};
    let mut lasting = Vec::new();
    let mut changing = Vec::new();
    for n in 0..60 {
        let name = format!("{} {n}", SEARCH_NAMES[n % 4]);
        let stored = add(&store, new_pet(&name, None)).await.expect("create");
        match n % 3 {
            0 => changing.push(stored.id),
            _ => lasting.push((stored.id, name)),
        }
    }
    let writer = {
        let store = store.clone();
        tokio::spawn(async move {
            for (n, id) in changing.iter().enumerate() {
                let _ = add(&store, new_pet(&format!("Bella new {n}"), None)).await;
                if n % 2 == 0 {
                    let patch = PetPatch {
                        name: Some(format!("Zoë Bellini {n}")),
                        ..PetPatch::default()
                    };
                    let rename = PatchPet {
                        id: *id,
                        patch,
                        precondition: Precondition::None,
                    };
                    store.write(rename).await.expect("rename");
                } else {
                    let delete = DeletePet {
                        id: *id,
                        precondition: Precondition::None,
                    };
                    store.write(delete).await.expect("delete");
                }
                tokio::task::yield_now().await;
            }
        })
    };
    for round in 0..6 {
        for q in ["bel", "zoe", ""] {
            let search = Search::parse(q).expect("valid");
            for sort in [Sort::Id, Sort::Newest, Sort::Name] {
                let query = PageQuery {
                    status: None,
                    category: None,
                    search: search.clone(),
                    sort,
                    after: None,
                    limit: 2,
                };
                let walked = walk_found(&store, query).await;
                let mut ids: Vec<i64> = walked.iter().map(|(id, _)| *id).collect();
                for (id, name) in &lasting {
                    if search.matches(name) {
                        let seen = ids.iter().filter(|seen| *seen == id).count();
                        assert_eq!(seen, 1, "round {round} q={q:?} {sort:?}: pet {id} {name}");
                    }
                }
                if sort != Sort::Name {
                    let all = ids.len();
                    ids.sort_unstable();
                    ids.dedup();
                    assert_eq!(
                        ids.len(),
                        all,
                        "round {round} q={q:?} {sort:?}: a pet twice"
                    );
                }
            }
        }
    }
    writer.await.expect("the writer");
}

/// A webhook endpoint's state: `lease_webhook` makes it from `fresh` only the first time, and
/// a save is what the next lease and the list read (issue 30).
async fn a_webhook_s_state_is_made_once_then_saved_and_read_back(store: Store) {
    use crate::store::webhooks::WebhookState;
    let fresh = WebhookState {
        feed: 7,
        position: 3,
        ..WebhookState::default()
    };
    assert_eq!(store.webhook_states().await.expect("states"), vec![]);
    let made = store
        .lease_webhook("ep_1", "me", &fresh)
        .await
        .expect("lease");
    assert_eq!(made, Some(fresh.clone()));
    let moved = WebhookState {
        position: 9,
        attempts: 2,
        last_error: Some("HTTP 500".into()),
        ..fresh.clone()
    };
    assert!(
        store
            .save_webhook("ep_1", "me", &moved)
            .await
            .expect("save")
    );
    let other_fresh = WebhookState::default();
    let kept = store
        .lease_webhook("ep_1", "me", &other_fresh)
        .await
        .expect("lease");
    assert_eq!(kept, Some(moved.clone()));
    assert_eq!(
        store.webhook_states().await.expect("states"),
        vec![("ep_1".to_owned(), moved)]
    );
    store.release_webhooks("me").await.expect("release");
}

/// An ended hold whose order's record does not read back (damaged by hand) is left, logged:
/// the other ended order of the run expires with its pet, and a create queued with the expiry
/// commits. Before, one such order failed every batch the expiry shared, once a second.
async fn an_order_that_does_not_read_back_is_left_by_the_expiry_and_the_rest_expire(store: Store) {
    let now_ms = crate::store::events::now_ms();
    let hold = Some(Duration::from_secs(60));
    let orders: Vec<Order> = (1..=2)
        .map(|id| Order::place(id, an_order(id), now_ms, hold))
        .collect();
    let chunks = vec![Chunk::Pets(vec![held(1), held(2)]), Chunk::rows(&orders)];
    let copy = imported(store, chunks, next_ids(3, 3, 1)).await;
    let store = &copy;
    store.damage_order(1, "not an order").await;

    let at = orders[1].expires_at_ms.expect("a hold") + 1000;
    let (expired, created) = tokio::join!(
        store.expire_holds(at),
        add(store, new_pet("new", Some(PetStatus::Available)))
    );
    assert_eq!(expired.expect("the expiry's batch commits"), 1);
    assert_eq!(created.expect("the create beside it commits").id, 3);
    let second = store.get_order(2).await.expect("get").expect("kept");
    assert_eq!(second.status, OrderStatus::Expired);
    let freed = store.get(2).await.expect("get").expect("kept");
    assert!(String::from_utf8_lossy(&freed.json).contains(r#""status":"available""#));
    // Still there, still broken, and still left by the next run.
    assert!(matches!(
        store.get_order(1).await,
        Err(StoreError::Corrupt(_))
    ));
    assert_eq!(
        store.expire_holds(at).await.expect("the next run commits"),
        0
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
        // Version 4 read the pet's category from its JSON and counted it.
        assert_eq!(walk_pets(&store, None, Some(1)).await, [(1, None)]);
        assert_eq!(
            store.inventory().await.expect("inventory"),
            Inventory {
                unset: 1,
                ..Inventory::default()
            }
        );
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
    assert_eq!(upgraded, "6|16");
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
    on_two_instances("feed_order", TUNING, async |cluster, a, b| {
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
            tokio::spawn(async move { a.write(patching(held.id, sold())).await })
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

/// Runs `case` on two instances (two `Store`s, each with its own writer and pool) of a new
/// database `database` of the shared cluster, opened with `tuning`.
fn on_two_instances(
    database: &str,
    tuning: Tuning,
    case: impl AsyncFnOnce(Arc<Cluster>, Store, Store),
) {
    let cluster = shared_cluster();
    cluster.psql(&format!("CREATE DATABASE {database}"));
    let url = cluster
        .url()
        .replace("/petstore?", &format!("/{database}?"));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime builds");
    runtime.block_on(async {
        let open = || async {
            let target = postgres::connect::parse(&url, None, None, 4, Duration::from_secs(5))
                .expect("a test cluster URL");
            Store::open(Location::Postgres(Box::new(target)), tuning)
                .await
                .expect("open")
                .0
        };
        let (a, b) = (open().await, open().await);
        case(cluster, a, b).await;
    });
}

/// Two instances, one webhook endpoint: the lease lets one deliver at a time, fences the
/// other's saves, passes at once on a release and lapses when not renewed.
#[test]
fn on_postgres_one_instance_holds_a_webhook_lease_and_a_save_without_it_is_refused() {
    use crate::store::webhooks::WebhookState;
    on_two_instances("webhook_leases", TUNING, async |_cluster, a, b| {
        let fresh = WebhookState::default();
        let held = a.lease_webhook("ep", "a", &fresh).await.expect("lease");
        assert_eq!(held, Some(fresh.clone()));
        // Held by a: b neither takes it nor saves under it.
        assert_eq!(
            b.lease_webhook("ep", "b", &fresh).await.expect("lease"),
            None
        );
        let moved = WebhookState {
            position: 5,
            ..fresh.clone()
        };
        assert!(!b.save_webhook("ep", "b", &moved).await.expect("save"));
        assert!(a.save_webhook("ep", "a", &moved).await.expect("save"));
        // Given up (a clean stop), b takes it at once, with a's position; a's saves are
        // refused from then on.
        a.release_webhooks("a").await.expect("release");
        assert_eq!(
            b.lease_webhook("ep", "b", &fresh).await.expect("lease"),
            Some(moved.clone())
        );
        let later = WebhookState {
            position: 6,
            ..moved.clone()
        };
        assert!(!a.save_webhook("ep", "a", &later).await.expect("save"));
        // A lease not renewed lapses: after `LEASE`, a takes it back.
        tokio::time::sleep(crate::store::webhooks::LEASE + Duration::from_millis(500)).await;
        assert_eq!(
            a.lease_webhook("ep", "a", &fresh).await.expect("lease"),
            Some(moved)
        );
        assert!(!b.save_webhook("ep", "b", &later).await.expect("save"));
        a.close().await;
        b.close().await;
    });
}

/// An order placed by one instance after another instance's batch took its locks, and moved
/// by that batch, is not moved unlocked: two rows held by `psql` sessions stall each batch
/// (each has a patch of its own) so that B's complete of order 1 takes its locks before A
/// places order 1, and A's cancel of it takes its locks after. At most one of the two moves
/// goes through, the order and its pet agree, and the inventory counts what a walk counts.
#[test]
fn on_postgres_an_order_placed_after_a_batch_took_its_locks_is_not_moved_unlocked() {
    let database = "unlocked_move";
    on_two_instances(database, TUNING, async |cluster, a, b| {
        for name in ["p", "z", "z2"] {
            add(&a, new_pet(name, Some(PetStatus::Available)))
                .await
                .expect("create");
        }
        let hold = |pet: i64, secs: f64| {
            let cluster = Arc::clone(&cluster);
            std::thread::spawn(move || {
                cluster.psql(&format!(
                    "\\connect {database}\nBEGIN;\nSELECT 1 FROM pets WHERE id = {pet} FOR UPDATE;\n\
                     SELECT pg_sleep({secs});\nCOMMIT;"
                ))
            })
        };
        let (first, second) = (hold(2, 2.0), hold(3, 3.0));
        tokio::time::sleep(Duration::from_millis(300)).await;
        let complete = {
            let b = b.clone();
            tokio::spawn(async move {
                let patched = b.write(patching(2, sold()));
                let moved = b.write(moving(1, OrderAction::Complete));
                tokio::join!(patched, moved).1
            })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        place(&a, 1).await.expect("A places order 1 for pet 1");
        let cancel = {
            let a = a.clone();
            tokio::spawn(async move {
                let moved = a.write(moving(1, OrderAction::Cancel));
                tokio::join!(moved, a.write(patching(3, sold()))).0
            })
        };
        let (completed, cancelled) = (complete.await.expect("B"), cancel.await.expect("A"));
        first.join().expect("a psql session");
        second.join().expect("a psql session");
        assert!(
            !(completed.is_ok() && cancelled.is_ok()),
            "both moves of order 1 went through"
        );
        let order = a.get_order(1).await.expect("get").expect("placed");
        let pet = status_of(&pet_now(&a, 1).await);
        let agree = match order.status {
            OrderStatus::Completed => pet == Some(PetStatus::Sold),
            OrderStatus::Cancelled => pet == Some(PetStatus::Available),
            _ => pet == Some(PetStatus::Pending),
        };
        assert!(agree, "order 1 is {:?} and its pet {pet:?}", order.status);
        assert_eq!(a.inventory().await.expect("inventory"), counted(&a).await);
        a.close().await;
        b.close().await;
    });
}

/// Two instances on one database (two `Store`s, each with its own writer and pool) race
/// orders, completions and cancellations for the same 20 pets from many tasks. Every pet ends
/// in at most one order that is placed or completed, with the status that order gives it; no
/// batch fails on a deadlock (the lock order of `postgres/batch.rs`); the inventory matches a
/// walk of every pet. Then both expire the ended holds at once, and each expires once.
#[test]
fn on_postgres_two_instances_sell_each_pet_at_most_once() {
    on_two_instances("two_instances", HOLD_A_MINUTE, async |_cluster, a, b| {
        let instances = [a, b];
        let mut pets = Vec::new();
        for i in 0..20 {
            let pet = add(&instances[i % 2], new_pet("p", Some(PetStatus::Available)))
                .await
                .expect("create");
            pets.push(pet.id);
        }
        let mut tasks = tokio::task::JoinSet::new();
        for task in 0..64_u64 {
            let store = instances[(task % 2) as usize].clone();
            let pets = pets.clone();
            tasks.spawn(async move {
                let mut rng = Rng(0x2545_f491_4f6c_dd1d ^ (task + 1));
                for _ in 0..6 {
                    let order = i64::try_from(rng.below(60)).expect("small") + 1;
                    let outcome = match rng.below(6) {
                        0..=2 => place(&store, pets[rng.below(pets.len())]).await.map(|_| ()),
                        3 | 4 => store
                            .write(moving(order, OrderAction::Complete))
                            .await
                            .map(|_| ()),
                        _ => store
                            .write(moving(order, OrderAction::Cancel))
                            .await
                            .map(|_| ()),
                    };
                    match outcome {
                        Ok(())
                        | Err(
                            StoreError::PetNotAvailable { .. }
                            | StoreError::InvalidTransition { .. }
                            | StoreError::NotFound(Subject {
                                kind: Kind::Order, ..
                            }),
                        ) => {}
                        Err(e) => panic!("task {task}: {e}"),
                    }
                }
            });
        }
        tasks.join_all().await;
        let [a, b] = &instances;
        let mut placed = 0;
        for &pet in &pets {
            let holding: Vec<String> = walk_orders(b, None, Some(pet))
                .await
                .iter()
                .map(|order| order["status"].as_str().expect("status").to_string())
                .filter(|status| status == "placed" || status == "completed")
                .collect();
            let expected = match holding.as_slice() {
                [] => Some(PetStatus::Available),
                [one] if one == "placed" => Some(PetStatus::Pending),
                [_completed] => Some(PetStatus::Sold),
                more => panic!("pet {pet} was sold more than once: {more:?}"),
            };
            placed += usize::from(expected == Some(PetStatus::Pending));
            assert_eq!(status_of(&pet_now(a, pet).await), expected, "pet {pet}");
        }
        assert_eq!(a.inventory().await.expect("inventory"), counted(b).await);
        assert!(placed > 0, "the race left some orders placed, to expire");

        let ended = crate::store::events::now_ms() + 120_000;
        let (by_a, by_b) = tokio::join!(a.expire_holds(ended), b.expire_holds(ended));
        assert_eq!(by_a.expect("expire") + by_b.expect("expire"), placed);
        assert!(
            walk_orders(a, Some(OrderStatus::Placed), None)
                .await
                .is_empty()
        );
        let (events, _) = feed(a, None).await;
        let expired = events
            .iter()
            .filter(|e| e["type"] == "order.expired")
            .count();
        assert_eq!(expired, placed, "one event an order");
        assert_eq!(b.inventory().await.expect("inventory"), counted(a).await);
        for store in instances {
            store.close().await;
        }
    });
}
