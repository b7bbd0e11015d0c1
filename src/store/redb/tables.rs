//! The one list of the redb file's tables and `meta` keys, and the layout version they make:
//! every other part of the engine (the writer, the open and its upgrades, snapshots, backup,
//! check, copy, the old log's replay) names a table only through here. `Tables` opens every
//! table a write transaction changes, so no write can reach one without the others.

use redb::{Database, Table, TableDefinition, WriteTransaction};

use bytes::Bytes;

use crate::event::EventType;
use crate::store::events::StoredEvent;
use crate::store::model::{SHORT_DIGEST, StoreError};

/// Pet id to the pet's JSON object, exactly as the API sends it.
pub(super) const PETS: TableDefinition<i64, &[u8]> = TableDefinition::new("pets");
/// (status code, pet id) for every pet that has a status: a status filter is a range scan.
/// A covering index: the JSON is kept here too, so a status filter is one range scan whatever
/// the store's size, instead of a lookup in `PETS` per pet (measured in benches/load: the
/// lookups cost half the throughput and grew with the store).
pub(super) const PETS_BY_STATUS: TableDefinition<(u8, i64), &[u8]> =
    TableDefinition::new("pets_by_status");
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

/// Every table of the current layout, by name: what a snapshot copies and a check expects.
pub(super) const NAMES: [&str; 6] = [
    "pets",
    "pets_by_status",
    "revisions",
    "meta",
    "idempotency_records",
    "events",
];

pub(super) const META_SCHEMA_VERSION: &str = "schema_version";
pub(super) const META_NEXT_ID: &str = "next_id";
/// The number of the last batch the writer committed: after a commit that failed, the file
/// opened again says whether that batch is in it (`redb/writer.rs`).
pub(super) const META_BATCH: &str = "batch";
/// Set by petstore versions that kept a write-ahead log beside the file: the epoch of that
/// log whose records the file still lacks. Absent (0) otherwise; a start replays such a log
/// once and removes the key (`redb/old_log.rs`).
pub(super) const META_LOG_EPOCH: &str = "log_epoch";

/// The feed's identity (`store/events.rs`): random, made with the file, made anew in a backup.
pub(super) const META_FEED: &str = "feed";
/// The sequence number of the newest event.
pub(super) const META_EVENT_SEQ: &str = "event_seq";
/// The highest sequence number purged: every event at or below it is gone.
pub(super) const META_EVENTS_TRIMMED: &str = "events_trimmed";

/// The layout of the tables; a file from a newer layout is refused, not misread. Version 1
/// had no `REVISIONS` and no idempotency tables; opening one adds them. Version 2 kept
/// idempotency records by scope, with a copy of the answer; opening one moves its live
/// records to the table of version 3 (`redb/idempotency.rs`). Version 4 adds the event feed;
/// an older petstore must not write to it, since its changes would have no events.
pub(super) const SCHEMA_VERSION: u64 = 4;

/// Version 2's idempotency records: scope (32 bytes) to fingerprint (32 bytes), expiry (u64),
/// pet id (i64) and the pet's JSON as first answered; and (expiry, scope) for the purge.
pub(super) const V2_RECORDS: TableDefinition<[u8; 32], &[u8]> = TableDefinition::new("idempotency");
pub(super) const V2_EXPIRY: TableDefinition<(u64, [u8; 32]), ()> =
    TableDefinition::new("idempotency_expiry");

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

/// Every table a write transaction may change, opened together.
pub(super) struct Tables<'txn> {
    pub(super) pets: Table<'txn, i64, &'static [u8]>,
    pub(super) by_status: Table<'txn, (u8, i64), &'static [u8]>,
    pub(super) revisions: Table<'txn, i64, u64>,
    pub(super) records: Table<'txn, (u64, i64), [u8; 2 * SHORT_DIGEST]>,
    pub(super) meta: Table<'txn, &'static str, u64>,
    pub(super) events: Table<'txn, u64, &'static [u8]>,
}

impl<'txn> Tables<'txn> {
    pub(super) fn open(txn: &'txn WriteTransaction) -> Result<Tables<'txn>, StoreError> {
        Ok(Tables {
            pets: txn.open_table(PETS).map_err(StoreError::storage)?,
            by_status: txn
                .open_table(PETS_BY_STATUS)
                .map_err(StoreError::storage)?,
            revisions: txn.open_table(REVISIONS).map_err(StoreError::storage)?,
            records: txn.open_table(RECORDS).map_err(StoreError::storage)?,
            meta: txn.open_table(META).map_err(StoreError::storage)?,
            events: txn.open_table(EVENTS).map_err(StoreError::storage)?,
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

/// Writes `event` as `EVENTS` keeps it into `value`, `event_length(event)` bytes long.
pub(super) fn write_event(value: &mut [u8], event: &StoredEvent) {
    let (header, pet) = value.split_at_mut(EVENT_HEADER);
    header[0] = event.kind.code();
    header[1..9].copy_from_slice(&event.at_ms.to_be_bytes());
    header[9..17].copy_from_slice(&event.pet_id.to_be_bytes());
    header[17..25].copy_from_slice(&event.revision.to_be_bytes());
    pet.copy_from_slice(event.pet.as_deref().unwrap_or_default());
}

pub(super) fn event_length(event: &StoredEvent) -> usize {
    EVENT_HEADER + event.pet.as_ref().map_or(0, Bytes::len)
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
    let pet = &value[EVENT_HEADER..];
    Ok(StoredEvent {
        seq,
        kind,
        at_ms,
        pet_id: u64_at(value, 9) as i64,
        revision: u64_at(value, 17),
        pet: (kind != EventType::PetDeleted).then(|| Bytes::copy_from_slice(pet)),
        subject_id: 0,
        subject: None,
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
    fn the_list_of_names_is_the_list_of_tables() {
        let defined = [
            PETS.name().to_owned(),
            PETS_BY_STATUS.name().to_owned(),
            REVISIONS.name().to_owned(),
            META.name().to_owned(),
            RECORDS.name().to_owned(),
            EVENTS.name().to_owned(),
        ];
        assert_eq!(defined, NAMES.map(str::to_owned));
    }
}
