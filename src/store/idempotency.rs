//! Idempotency records: for each (API key, Idempotency-Key) scope, the create it answered, so
//! a retry gets that answer again. The records live in two tables written in the create's own
//! transaction (`store/writer.rs`), the claims on keys in flight live in memory, and expired
//! records are purged in small batches by a background task. Invariant: a live record always
//! names a pet that was committed with it; an expired one answers nothing, purged or not.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use redb::{ReadableTable, Table, TableDefinition, WriteTransaction};
use tokio::sync::{mpsc, oneshot};

use super::writer::{Pending, Write};
use super::{Command, Created, StoreError, StoredPet};
use crate::pet::PetId;

/// Scope to record: see `encode` for the record's layout.
pub(super) const IDEMPOTENCY: TableDefinition<[u8; 32], &[u8]> =
    TableDefinition::new("idempotency");
/// (expiry in Unix seconds, scope) for every record, so the purge reads expired ones first and
/// never scans the live ones.
pub(super) const IDEMPOTENCY_EXPIRY: TableDefinition<(u64, [u8; 32]), ()> =
    TableDefinition::new("idempotency_expiry");

/// How often the purge looks for expired records.
const PURGE_INTERVAL: Duration = Duration::from_secs(60);
/// Most records one purge transaction removes: creates queued behind it wait for at most this
/// much work, and the purge goes on behind them.
pub(super) const PURGE_BATCH: usize = 1000;

/// fingerprint (32 bytes), expiry (u64), pet id (i64), then the pet's JSON as first answered.
const RECORD_HEAD: usize = 32 + 8 + 8;

/// An Idempotency-Key as the store sees it: its claim (so only one create runs with it at a
/// time) and what it was sent with.
#[derive(Debug)]
pub struct IdempotencyKey {
    claim: KeyClaim,
    /// A digest of the pet the request asks for: a retry must ask for the same one.
    fingerprint: [u8; 32],
}

impl IdempotencyKey {
    /// The record's key: a digest of the API key and the Idempotency-Key.
    fn scope(&self) -> [u8; 32] {
        self.claim.scope
    }
}

/// A key with the expiry its record gets if the create goes ahead.
pub(super) struct Keyed {
    pub(super) key: IdempotencyKey,
    pub(super) expires_at: u64,
}

/// The answer a live record gives `key`, if there is one: the first create's pet for the same
/// fingerprint, `IdempotencyKeyReused` for another.
pub(super) fn find(
    records: &impl ReadableTable<[u8; 32], &'static [u8]>,
    key: &IdempotencyKey,
    now: u64,
) -> Result<Option<Result<Created, StoreError>>, StoreError> {
    let Some(record) = records.get(key.scope()).map_err(StoreError::storage)? else {
        return Ok(None);
    };
    let record = Record::decode(record.value())?;
    if record.expires_at <= now {
        return Ok(None);
    }
    if record.fingerprint != key.fingerprint {
        return Ok(Some(Err(StoreError::IdempotencyKeyReused)));
    }
    Ok(Some(Ok(Created {
        pet: StoredPet {
            id: record.id,
            revision: 1,
            json: Bytes::copy_from_slice(record.json),
        },
        replayed: true,
    })))
}

/// A stored record, read.
struct Record<'a> {
    fingerprint: [u8; 32],
    expires_at: u64,
    id: PetId,
    json: &'a [u8],
}

impl<'a> Record<'a> {
    fn decode(bytes: &'a [u8]) -> Result<Record<'a>, StoreError> {
        let corrupt = || StoreError::Corrupt("an idempotency record is too short".into());
        let (head, json) = bytes.split_at_checked(RECORD_HEAD).ok_or_else(corrupt)?;
        let (fingerprint, rest) = head.split_at(32);
        let (expires_at, id) = rest.split_at(8);
        Ok(Record {
            fingerprint: fingerprint.try_into().map_err(|_| corrupt())?,
            expires_at: u64::from_be_bytes(expires_at.try_into().map_err(|_| corrupt())?),
            id: PetId::from_be_bytes(id.try_into().map_err(|_| corrupt())?),
            json,
        })
    }
}

/// Writes the record of a create that just stored `pet`, replacing an expired one for the same
/// scope (and its expiry entry).
pub(super) fn insert(
    records: &mut Table<[u8; 32], &'static [u8]>,
    expiry: &mut Table<(u64, [u8; 32]), ()>,
    keyed: &Keyed,
    pet: &StoredPet,
) -> Result<(), StoreError> {
    let mut bytes = Vec::with_capacity(RECORD_HEAD + pet.json.len());
    bytes.extend_from_slice(&keyed.key.fingerprint);
    bytes.extend_from_slice(&keyed.expires_at.to_be_bytes());
    bytes.extend_from_slice(&pet.id.to_be_bytes());
    bytes.extend_from_slice(&pet.json);
    let old = records
        .insert(keyed.key.scope(), bytes.as_slice())
        .map_err(StoreError::write)?
        .map(|old| Record::decode(old.value()).map(|r| r.expires_at));
    if let Some(old_expiry) = old {
        expiry
            .remove((old_expiry?, keyed.key.scope()))
            .map_err(StoreError::write)?;
    }
    expiry
        .insert((keyed.expires_at, keyed.key.scope()), ())
        .map_err(StoreError::write)?;
    Ok(())
}

/// Removes up to `PURGE_BATCH` records that expired by `now`; returns how many.
pub(super) fn purge(
    records: &mut Table<[u8; 32], &'static [u8]>,
    expiry: &mut Table<(u64, [u8; 32]), ()>,
    now: u64,
) -> Result<usize, StoreError> {
    let mut expired = Vec::new();
    for entry in expiry
        .range(..=(now, [u8::MAX; 32]))
        .map_err(StoreError::write)?
        .take(PURGE_BATCH)
    {
        expired.push(entry.map_err(StoreError::write)?.0.value());
    }
    for (expires_at, scope) in &expired {
        expiry
            .remove((*expires_at, *scope))
            .map_err(StoreError::write)?;
        records.remove(*scope).map_err(StoreError::write)?;
    }
    Ok(expired.len())
}

pub(super) fn create_tables(txn: &WriteTransaction) -> Result<(), StoreError> {
    txn.open_table(IDEMPOTENCY).map_err(StoreError::storage)?;
    txn.open_table(IDEMPOTENCY_EXPIRY)
        .map_err(StoreError::storage)?;
    Ok(())
}

/// Seconds since the Unix epoch: records outlive restarts, so their expiry is wall-clock time.
pub(super) fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs())
}

/// The scopes whose create is in flight in this process.
#[derive(Debug, Default)]
pub(super) struct Claims(Mutex<HashSet<[u8; 32]>>);

/// A scope claimed from before the request's body is read until the write that uses it is
/// answered, or until the request is dropped without one. While it is held, another request
/// with the same key gets `IdempotencyKeyInFlight`.
#[derive(Debug)]
pub struct KeyClaim {
    claims: Arc<Claims>,
    scope: [u8; 32],
}

impl KeyClaim {
    /// The key for a create of the pet whose digest is `fingerprint`.
    pub fn for_pet(self, fingerprint: [u8; 32]) -> IdempotencyKey {
        IdempotencyKey {
            claim: self,
            fingerprint,
        }
    }
}

impl Claims {
    /// Claims `scope`, or `None` while another request holds it.
    pub(super) fn claim(self: &Arc<Claims>, scope: [u8; 32]) -> Option<KeyClaim> {
        // The lock is let go before a `KeyClaim` exists: dropping one takes it again.
        let claimed = self.set().insert(scope);
        claimed.then(|| KeyClaim {
            claims: Arc::clone(self),
            scope,
        })
    }

    fn set(&self) -> std::sync::MutexGuard<'_, HashSet<[u8; 32]>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for KeyClaim {
    fn drop(&mut self) {
        self.claims.set().remove(&self.scope);
    }
}

/// Purges expired records every `PURGE_INTERVAL`, one batch per write transaction, until none
/// are left; each batch queues behind the writes already waiting, so a large purge never holds
/// creates back for more than one batch. Ends with the store.
pub(super) async fn purge_loop(writer: mpsc::WeakSender<Command>) {
    let mut ticks = tokio::time::interval(PURGE_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let mut purged = 0;
        loop {
            let Some(sender) = writer.upgrade() else {
                return;
            };
            let (reply, answer) = oneshot::channel();
            let purge = Write::Purge(now(), Pending::new(reply));
            if sender.send(Command::Write(purge)).await.is_err() {
                return;
            }
            drop(sender);
            match answer.await {
                Ok(Ok(count)) => {
                    purged += count;
                    if count < PURGE_BATCH {
                        break;
                    }
                }
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "purging expired idempotency records failed; retrying later");
                    break;
                }
                Err(_) => return,
            }
        }
        if purged > 0 {
            tracing::debug!(purged, "expired idempotency records purged");
        }
    }
}
