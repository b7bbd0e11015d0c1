//! Idempotency records: for each (API key, Idempotency-Key) scope, the create it answered, so
//! a retry gets that answer again. On disk the records are one table ordered by (expiry, pet
//! id), written in the create's own transaction (`redb/writer.rs`): a create appends to its
//! last leaf, as it does to the pets, where a table keyed by the random scope cost a leaf of
//! its own per create (a keyed create wrote 11 KiB, a plain one 2 KiB: wrk, 64 clients). The
//! lookup by scope is an index in memory, loaded from the table at open and changed only once
//! a commit is durable. Expired records are purged from the front of the table, in small
//! batches, by a background task. Invariants: the index holds every live record of the
//! committed file and no record the file lacks; a live record always names a pet committed
//! with it; an expired one answers nothing, purged or not.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use redb::{ReadableTable, WriteTransaction};

use super::logged::Logged;

use super::tables::RECORDS;
use crate::pet::PetId;
use crate::store::claims::IdempotencyKey;
use crate::store::claims::Keyed;
use crate::store::model::{Record, SHORT_DIGEST, StoreError, short};
use crate::store::write::PURGE_BATCH;

/// Bytes kept of a scope or a fingerprint (`store::SHORT_DIGEST`).
const SHORT: usize = SHORT_DIGEST;

type Scope = [u8; SHORT];

/// What the index knows of a live record: the shared record (its answer is `Record::answer`).
type Entry = Record;

/// Scope to its live record, for every record of the committed file that had not expired when
/// it was loaded or written: 48 bytes a record, about 70 with the hash table's slack.
#[derive(Debug, Default)]
pub(super) struct Index(Mutex<HashMap<Scope, Entry>>);

/// What a batch changes in the index, applied only once its commit is durable.
#[derive(Debug, Default)]
pub(super) struct Changes {
    added: HashMap<Scope, Entry>,
    /// Records purged: their scope and id, since a newer record may hold the scope by now.
    purged: Vec<(Scope, PetId)>,
}

impl Changes {
    pub(super) fn clear(&mut self) {
        self.added.clear();
        self.purged.clear();
    }
}

impl Index {
    /// The live records of `records` at `now`.
    pub(super) fn load(
        records: &impl ReadableTable<(u64, i64), [u8; 2 * SHORT]>,
        now: u64,
    ) -> Result<Index, StoreError> {
        // Expired records not purged yet are counted too: a little too much, never a rehash.
        let stored = records.len().map_err(StoreError::storage)?;
        let mut map = HashMap::with_capacity(usize::try_from(stored).unwrap_or(0));
        let live = records
            .range((now.saturating_add(1), i64::MIN)..)
            .map_err(StoreError::storage)?;
        for entry in live {
            let (key, value) = entry.map_err(StoreError::storage)?;
            let ((expires_at, id), value) = (key.value(), value.value());
            let (scope, fingerprint) = split(&value);
            // A scope reused after its record expired has two records; the later expiry wins,
            // and the range yields it last. (An expiry cannot go back for one scope: a record
            // is only replaced once expired, by one expiring later.)
            map.insert(
                scope,
                Entry {
                    expires_at,
                    id,
                    fingerprint,
                },
            );
        }
        Ok(Index(Mutex::new(map)))
    }

    /// The live-or-not record of `scope`, as loaded or last written.
    pub(super) fn get(&self, scope: &[u8; 32]) -> Option<Record> {
        self.map().get(&short(*scope)).copied()
    }

    /// Applies a committed batch's changes, leaving `changes` empty for the next.
    pub(super) fn apply(&self, changes: &mut Changes) {
        let mut map = self.map();
        for (scope, id) in changes.purged.drain(..) {
            if map.get(&scope).is_some_and(|entry| entry.id == id) {
                map.remove(&scope);
            }
        }
        map.extend(changes.added.drain());
    }

    /// Takes the records of `other` instead: after a reopen, the file is the truth.
    pub(super) fn replace(&self, other: Index) {
        let other = other.0.into_inner().unwrap_or_else(PoisonError::into_inner);
        *self.map() = other;
    }

    pub(super) fn len(&self) -> usize {
        self.map().len()
    }

    fn map(&self) -> MutexGuard<'_, HashMap<Scope, Entry>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

pub(super) fn split(value: &[u8; 2 * SHORT]) -> (Scope, [u8; SHORT]) {
    let mut scope = [0; SHORT];
    let mut fingerprint = [0; SHORT];
    scope.copy_from_slice(&value[..SHORT]);
    fingerprint.copy_from_slice(&value[SHORT..]);
    (scope, fingerprint)
}

/// The live-or-not record of `key`'s scope inside a write transaction: this batch's first,
/// then the committed one.
pub(super) fn record(index: &Index, changes: &Changes, key: &IdempotencyKey) -> Option<Record> {
    match changes.added.get(&short(key.scope())) {
        Some(entry) => Some(*entry),
        None => index.get(&key.scope()),
    }
}

/// A record's value: its scope, then its fingerprint (`split` reads it back).
pub(super) fn joined(scope: &Scope, fingerprint: &[u8; SHORT]) -> [u8; 2 * SHORT] {
    let mut value = [0; 2 * SHORT];
    value[..SHORT].copy_from_slice(scope);
    value[SHORT..].copy_from_slice(fingerprint);
    value
}

/// Writes the record of a create that just stored the pet `id`. An expired record of the
/// same scope stays until the purge reaches it.
pub(super) fn insert(
    records: &mut Logged<(u64, i64), [u8; 2 * SHORT]>,
    changes: &mut Changes,
    keyed: &Keyed,
    id: PetId,
) -> Result<(), StoreError> {
    let scope = short(keyed.key.scope());
    let fingerprint = short(keyed.key.fingerprint());
    let value = joined(&scope, &fingerprint);
    records.insert((keyed.expires_at, id), value)?;
    changes.added.insert(
        scope,
        Entry {
            expires_at: keyed.expires_at,
            id,
            fingerprint,
        },
    );
    Ok(())
}

/// Removes up to `PURGE_BATCH` records that expired by `now`, oldest first; returns how many.
pub(super) fn purge(
    records: &mut Logged<(u64, i64), [u8; 2 * SHORT]>,
    changes: &mut Changes,
    now: u64,
) -> Result<usize, StoreError> {
    let mut expired = Vec::new();
    for entry in records
        .range(..=(now, i64::MAX))
        .map_err(StoreError::storage)?
        .take(PURGE_BATCH)
    {
        let (key, value) = entry.map_err(StoreError::storage)?;
        expired.push((key.value(), split(&value.value()).0));
    }
    for (key, scope) in &expired {
        records.remove(*key)?;
        changes.purged.push((*scope, key.1));
    }
    Ok(expired.len())
}

pub(super) fn create_tables(txn: &WriteTransaction) -> Result<(), StoreError> {
    txn.open_table(RECORDS).map_err(StoreError::storage)?;
    Ok(())
}
