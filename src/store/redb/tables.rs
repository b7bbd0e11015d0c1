//! The redb file's tables that no resource declares (revisions, idempotency records, events,
//! webhooks, sessions), its `meta` keys, the list of every table (`names`: these and the
//! declared ones) and the layout version they make. `Tables` opens the ones every write
//! transaction changes together.

use redb::{Database, TableDefinition, WriteTransaction};

use bytes::Bytes;

use super::indexes::scan;
use super::logged::Logged;
use crate::event::EventType;
use crate::pet::Pet;
use crate::store::events::StoredEvent;
use crate::store::model::{SHORT_DIGEST, StoreError};
use crate::store::ops::each_resource;
use crate::store::ops::orders::ORDERS_BY_PET;
use crate::store::resource::{ForEach, Part, Resource};

/// Pet id to the pet's JSON object, exactly as the API sends it (`resource::Resource` for
/// `Pet`; the tables of orders, categories and every index are named by their declarations,
/// `redb/indexes.rs`).
pub(super) const PETS: TableDefinition<i64, &[u8]> = TableDefinition::new(<Pet as Resource>::TABLE);
/// Pet id to its revision, only for pets changed since they were created: a pet not listed
/// here is at revision 1, so a create writes nothing more for it.
pub(super) const REVISIONS: TableDefinition<i64, u64> = TableDefinition::new("revisions");
/// (expiry in Unix seconds, pet id) to the scope and the fingerprint, each cut to
/// `SHORT_DIGEST` bytes (`redb/idempotency.rs`). Ordered by expiry, so a create appends and
/// the purge takes the oldest from the front; the id keeps two records of a second apart.
pub(super) const RECORDS: TableDefinition<(u64, i64), [u8; 2 * SHORT_DIGEST]> =
    TableDefinition::new("idempotency_records");
/// Counters and format facts, keyed by the names below.
pub(super) const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
/// The event feed: sequence number to the event's type code (1 byte), its time in Unix
/// milliseconds (8 bytes, big-endian) and its JSON object without the cursor
/// (`store/events.rs`). Appended by the batch that made the change; purged from the front.
pub(super) const EVENTS: TableDefinition<u64, &[u8]> = TableDefinition::new("events");

/// Webhook endpoint id to its delivery state (`store::webhooks::WebhookState::encode`). Made
/// by the first save: a file that never had an endpoint has no such table.
pub(super) const WEBHOOKS: TableDefinition<&str, &[u8]> = TableDefinition::new("webhooks");

/// The SHA-256 of a console session's token to the session
/// (`store::sessions::SessionRecord::encode`). Made by the first sign-in.
pub(super) const SESSIONS: TableDefinition<[u8; 32], &[u8]> = TableDefinition::new("sessions");

/// The tables that are no declared resource's or index's.
const OWN_TABLES: [&str; 6] = [
    "revisions",
    "meta",
    "idempotency_records",
    "events",
    "webhooks",
    "sessions",
];

/// Every table of the current layout, by name: what a snapshot copies and a check expects.
pub(super) fn names() -> Vec<&'static str> {
    let mut names = OWN_TABLES.to_vec();
    names.extend(declared_names());
    names
}

/// The tables the declarations name: each resource's and each index's.
pub(super) fn declared_names() -> Vec<&'static str> {
    struct Names(Vec<&'static str>);
    impl ForEach for Names {
        fn visit<R: Resource>(&mut self) -> Result<(), StoreError> {
            self.0.push(R::TABLE);
            self.0.extend(R::INDEXES.iter().map(|index| index.name));
            Ok(())
        }
    }
    let mut names = Names(Vec::new());
    let _ = each_resource(&mut names);
    names.0
}

/// The placed order among pet `pet`'s entries in `ORDERS_BY_PET`: the one that holds it.
pub(super) fn holding_order(
    orders_by_pet: &impl redb::ReadableTable<&'static [u8], &'static [u8]>,
    pet: i64,
) -> Result<Option<i64>, StoreError> {
    let placed = crate::order::OrderStatus::Placed.code();
    let entries = scan(
        orders_by_pet,
        &ORDERS_BY_PET.prefix(&[Part::Int(pet)]),
        i64::MIN,
        usize::MAX,
    )?;
    Ok(entries
        .into_iter()
        .find(|(_, status)| status.as_slice() == [placed])
        .map(|(order, _)| order))
}

pub(super) const META_SCHEMA_VERSION: &str = "schema_version";
pub(super) const META_NEXT_ID: &str = <crate::pet::Pet as Resource>::COUNTER.key();
/// The number of the last batch the writer committed: after a commit that failed, the file
/// opened again says whether that batch is in it (`redb/writer.rs`).
pub(super) const META_BATCH: &str = "batch";
/// Set by the petstore builds that kept a write-ahead log beside the file: the epoch of that
/// log whose records the file still lacks. A file that names one is refused (`redb/open.rs`):
/// this build has no replay of that log.
pub(super) const META_LOG_EPOCH: &str = "log_epoch";

/// The write-ahead log the file's batches since its last durable checkpoint are in
/// (`redb/wal.rs`): the id its segments carry; absent (0) after a clean stop, when the file
/// holds every batch itself.
pub(super) const META_WAL_ID: &str = "wal_id";

/// The feed's identity (`store/events.rs`): random, made with the file, made anew in a backup.
pub(super) const META_FEED: &str = "feed";
/// The sequence number of the newest event.
pub(super) const META_EVENT_SEQ: &str = "event_seq";
/// The highest sequence number purged: every event at or below it is gone.
pub(super) const META_EVENTS_TRIMMED: &str = "events_trimmed";

/// The inventory: pets by status, kept by every write (`store::Inventory`), in the order of
/// `InventoryDelta::each`.
pub(super) const META_INVENTORY: [&str; 4] =
    ["pets_available", "pets_pending", "pets_sold", "pets_unset"];

/// The layout of the tables; a file from a newer layout is refused, not misread. Version 4
/// added the event feed; an older petstore must not write to it, since its changes would have
/// no events. Version 5 added orders, categories, the category index and the inventory
/// counters. Version 6 keeps every index as its declaration's encoded keys
/// (`redb/indexes.rs`), where 5 had a table type per index: an older petstore would misread
/// them. Version 7 adds the name and word indexes of the search (issue 40): an older petstore
/// would write pets without their entries, so it must not open the file.
pub(super) const SCHEMA_VERSION: u64 = 7;
/// The oldest layout this build upgrades: 3 to 5 differ from 6 only by tables a new file gets
/// too, and by what the upgrade builds from the records (every index, `indexes::rebuild`, and
/// the inventory, `open::count_inventory`). Versions 1 and 2 kept idempotency records another
/// way and are refused (`redb/open.rs`).
pub(super) const OLDEST_UPGRADED: u64 = 3;

/// Begins a write transaction of the engine: durable, in two phases always (the data is
/// synced before the header that points at it, so a header the page cache holds but the disk
/// refused never names pages the disk lacks), with quick-repair unless a snapshot is copying
/// (`writer::Writer::commit_batch` says why).
pub(super) fn begin(db: &Database, quick_repair: bool) -> Result<WriteTransaction, StoreError> {
    let mut txn = db.begin_write().map_err(StoreError::storage)?;
    txn.set_two_phase_commit(true);
    txn.set_quick_repair(quick_repair);
    Ok(txn)
}

/// The tables a write transaction changes whatever it does, opened together; the declared ones
/// (records and indexes) are opened as the batch first needs them (`indexes::Open`).
pub(super) struct Tables<'txn> {
    pub(super) revisions: Logged<'txn, i64, u64>,
    pub(super) records: Logged<'txn, (u64, i64), [u8; 2 * SHORT_DIGEST]>,
    pub(super) meta: Logged<'txn, &'static str, u64>,
    pub(super) events: Logged<'txn, u64, &'static [u8]>,
}

impl<'txn> Tables<'txn> {
    pub(super) fn open(txn: &'txn WriteTransaction) -> Result<Tables<'txn>, StoreError> {
        Ok(Tables {
            revisions: Logged::open(txn, REVISIONS)?,
            records: Logged::open(txn, RECORDS)?,
            meta: Logged::open(txn, META)?,
            events: Logged::open(txn, EVENTS)?,
        })
    }
}

/// Reads one `META` counter; 0 when absent.
pub(super) fn meta_value(
    meta: &impl redb::ReadableTable<&'static str, u64>,
    key: &str,
) -> Result<u64, StoreError> {
    Ok(meta
        .get(key)
        .map_err(StoreError::storage)?
        .map_or(0, |v| v.value()))
}

/// The bytes of an `EVENTS` value before the pet's JSON: type code, time (Unix ms), pet id
/// and revision, big-endian.
pub(super) const EVENT_HEADER: usize = 25;

/// After the header, an order's or a category's event keeps its subject's id (8 bytes), the
/// length of its JSON (4 bytes, 0: none) and the JSON, then the pet's JSON as a pet's event
/// does.
const SUBJECT_HEADER: usize = 12;

fn has_subject(kind: EventType) -> bool {
    kind.subject() != crate::subject::Kind::Pet
}

/// Writes `event` as `EVENTS` keeps it into `value`, `event_length(event)` bytes long.
pub(super) fn write_event(value: &mut [u8], event: &StoredEvent) {
    let (header, mut rest) = value.split_at_mut(EVENT_HEADER);
    header[0] = event.kind.code();
    header[1..9].copy_from_slice(&event.at_ms.to_be_bytes());
    header[9..17].copy_from_slice(&event.pet_id.to_be_bytes());
    header[17..25].copy_from_slice(&event.revision.to_be_bytes());
    if has_subject(event.kind) {
        let subject = event.subject.as_deref().unwrap_or_default();
        let (head, after) = rest.split_at_mut(SUBJECT_HEADER);
        head[..8].copy_from_slice(&event.subject_id.to_be_bytes());
        head[8..].copy_from_slice(&(subject.len() as u32).to_be_bytes());
        let (json, after) = after.split_at_mut(subject.len());
        json.copy_from_slice(subject);
        rest = after;
    }
    rest.copy_from_slice(event.pet.as_deref().unwrap_or_default());
}

pub(super) fn event_length(event: &StoredEvent) -> usize {
    let subject = if has_subject(event.kind) {
        SUBJECT_HEADER + event.subject.as_ref().map_or(0, Bytes::len)
    } else {
        0
    };
    EVENT_HEADER + subject + event.pet.as_ref().map_or(0, Bytes::len)
}

/// The type code and time of a value of `EVENTS`, without reading the rest.
pub(super) fn event_head(value: &[u8]) -> Result<(u8, u64), StoreError> {
    let header = value
        .get(..EVENT_HEADER)
        .ok_or_else(|| StoreError::Corrupt("an event is shorter than its header".into()))?;
    Ok((header[0], u64_at(header, 1)))
}

/// The event numbered `seq` from its value in `EVENTS`.
pub(super) fn read_event(seq: u64, value: &[u8]) -> Result<StoredEvent, StoreError> {
    let (code, at_ms) = event_head(value)?;
    let kind = EventType::from_code(code)
        .ok_or_else(|| StoreError::Corrupt(format!("event {seq} has the unknown type {code}")))?;
    let mut pet = &value[EVENT_HEADER..];
    let (mut subject_id, mut subject) = (0, None);
    if has_subject(kind) {
        let short = || StoreError::Corrupt(format!("event {seq} is shorter than its subject"));
        let head = pet.get(..SUBJECT_HEADER).ok_or_else(short)?;
        subject_id = u64_at(head, 0) as i64;
        let mut length = [0; 4];
        length.copy_from_slice(&head[8..12]);
        let length = u32::from_be_bytes(length) as usize;
        let json = pet
            .get(SUBJECT_HEADER..SUBJECT_HEADER + length)
            .ok_or_else(short)?;
        subject = (length > 0).then(|| Bytes::copy_from_slice(json));
        pet = &pet[SUBJECT_HEADER + length..];
    }
    // Only an order's event carries the pet it moves beside its own subject.
    let has_pet = match kind.subject() {
        crate::subject::Kind::Pet => kind != EventType::PetDeleted,
        crate::subject::Kind::Order => true,
        _ => false,
    };
    Ok(StoredEvent {
        seq,
        kind,
        at_ms,
        pet_id: u64_at(value, 9) as i64,
        revision: u64_at(value, 17),
        pet: has_pet.then(|| Bytes::copy_from_slice(pet)),
        subject_id,
        subject,
    })
}

/// The big-endian u64 at `at` of a header already checked to be long enough.
fn u64_at(header: &[u8], at: usize) -> u64 {
    let mut bytes = [0; 8];
    bytes.copy_from_slice(&header[at..at + 8]);
    u64::from_be_bytes(bytes)
}

#[cfg(test)]
mod tests {
    use redb::TableHandle;

    use super::*;

    #[test]
    fn the_list_of_names_is_every_table_once() {
        let mut names = names();
        names.sort_unstable();
        let mut expected = [
            "pets",
            "pets_by_status",
            "revisions",
            "meta",
            "idempotency_records",
            "events",
            "pets_by_category",
            "pets_by_name",
            "pets_by_word",
            "pets_by_word_name",
            "categories",
            "category_names",
            "orders",
            "orders_by_status",
            "orders_by_pet",
            "hold_ends",
            "webhooks",
            "sessions",
        ];
        expected.sort_unstable();
        assert_eq!(names, expected);
        for own in [REVISIONS.name(), META.name(), RECORDS.name(), EVENTS.name()] {
            assert!(OWN_TABLES.contains(&own), "{own}");
        }
        assert!(OWN_TABLES.contains(&WEBHOOKS.name()) && OWN_TABLES.contains(&SESSIONS.name()));
    }

    #[test]
    fn every_kind_of_event_reads_back_as_written() {
        let pet = Some(Bytes::from_static(br#"{"id":4,"name":"Rex"}"#));
        let order = Some(Bytes::from_static(br#"{"id":9,"petId":4}"#));
        let category = Some(Bytes::from_static(br#"{"id":2,"name":"Dogs"}"#));
        for (kind, pet_id, revision, pet, subject_id, subject) in [
            (EventType::PetCreated, 4, 1, pet.clone(), 0, None),
            (EventType::PetDeleted, 4, 3, None, 0, None),
            (EventType::OrderPlaced, 4, 2, pet.clone(), 9, order.clone()),
            (EventType::OrderExpired, 4, 3, pet.clone(), 9, order),
            (EventType::CategoryUpdated, 0, 0, None, 2, category),
            (EventType::CategoryDeleted, 0, 0, None, 2, None),
        ] {
            let event = StoredEvent {
                seq: 7,
                kind,
                at_ms: 123,
                pet_id,
                revision,
                pet,
                subject_id,
                subject,
            };
            let mut value = vec![0; event_length(&event)];
            write_event(&mut value, &event);
            let read = read_event(7, &value).expect("reads");
            assert_eq!(
                (read.kind, read.pet_id, read.revision, &read.pet),
                (kind, pet_id, revision, &event.pet)
            );
            assert_eq!(
                (read.subject_id, &read.subject),
                (subject_id, &event.subject)
            );
        }
    }
}
