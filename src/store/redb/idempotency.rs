//! Idempotency records: for each (API key, Idempotency-Key) scope, the create it answered, so
//! a retry gets that answer again. The records live in two tables written in the create's own
//! transaction (`redb/writer.rs`), and expired records are purged in small batches by a
//! background task. Invariant: a live record always
//! names a pet that was committed with it; an expired one answers nothing, purged or not.

use std::time::Duration;

use redb::{ReadableTable, Table, TableDefinition, WriteTransaction};
use tokio::sync::{mpsc, oneshot};

use crate::pet::PetId;
use crate::store::write::{Command, Keyed, Pending, Write, unix_now};
use crate::store::{Created, IdempotencyKey, Record, StoreError, StoredPet};

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
    let record = decode(record.value())?;
    Ok(record.answer(key, now))
}

/// Reads a record's bytes: see `insert` for the layout.
pub(super) fn decode(bytes: &[u8]) -> Result<Record<'_>, StoreError> {
    let corrupt = || StoreError::Corrupt("an idempotency record is too short".into());
    let (head, json) = bytes.split_at_checked(RECORD_HEAD).ok_or_else(corrupt)?;
    let (fingerprint, rest) = head.split_at(32);
    let (expires_at, id) = rest.split_at(8);
    Ok(Record {
        fingerprint,
        expires_at: u64::from_be_bytes(expires_at.try_into().map_err(|_| corrupt())?),
        id: PetId::from_be_bytes(id.try_into().map_err(|_| corrupt())?),
        json,
    })
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
    bytes.extend_from_slice(&keyed.key.fingerprint());
    bytes.extend_from_slice(&keyed.expires_at.to_be_bytes());
    bytes.extend_from_slice(&pet.id.to_be_bytes());
    bytes.extend_from_slice(&pet.json);
    let old = records
        .insert(keyed.key.scope(), bytes.as_slice())
        .map_err(StoreError::write)?
        .map(|old| decode(old.value()).map(|r| r.expires_at));
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
            let purge = Write::Purge(unix_now(), Pending::new(reply));
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
