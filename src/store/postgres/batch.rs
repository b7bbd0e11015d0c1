//! The PostgreSQL engine under the write front: each batch is one transaction on a pooled
//! connection. Pet rows to change are locked in id order and the id counter row last, so
//! two instances' batches never wait on each other in a cycle and ids increase in commit
//! order; a batch a concurrent transaction got in the way of runs again.

use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use deadpool_postgres::ClientWrapper;
use tokio_postgres::error::SqlState;

use super::errors::pg_error;
use super::pool::Connections;
use super::rows::{READ_RECORD, record_of, revision, status_code};
use super::sales;
use crate::clock::unix_now;
use crate::pet::{NewPet, Pet, PetId, PetPatch};
use crate::store::events::{StoredEvent, now_ms};
use crate::store::model::{Created, Precondition, StoreError, StoredPet, short};
use crate::store::write::{Engine, Keyed, PURGE_BATCH, Write};

/// How many times a batch that a concurrent transaction got in the way of (a serialization
/// failure, a deadlock: nothing of it committed) runs again before its callers get 503.
const CONTENDED_RETRIES: usize = 3;

/// The engine under the write front: one per instance.
pub(in crate::store) struct PgWriter {
    pub(super) pool: Connections,
}

impl Engine for PgWriter {
    async fn commit(&mut self, batch: &mut [Write]) -> Result<bool, StoreError> {
        commit(&self.pool, batch).await?;
        Ok(batch.iter().any(Write::changed))
    }

    async fn close(&mut self) {}
}

/// Runs a batch in one transaction on a pooled connection, within `ANSWER_WITHIN`, again if
/// a concurrent transaction got in its way. A batch whose database stops answering is given
/// up at the deadline and its connection closed, so the writer goes on to the next batch
/// rather than queueing every later write behind a statement that will never finish.
async fn commit(pool: &Connections, batch: &mut [Write]) -> Result<(), StoreError> {
    let mut retries = 0;
    loop {
        let committing = AtomicBool::new(false);
        match pool
            .run(async |client| run_batch(client, batch, &committing).await)
            .await
        {
            // Given up while COMMIT was on its way: it may have been carried out.
            Err(StoreError::Io(e)) if committing.load(Ordering::Relaxed) => {
                return Err(StoreError::InDoubt(e));
            }
            Err(StoreError::Contended(e)) if retries < CONTENDED_RETRIES => {
                retries += 1;
                tracing::debug!(error = %e, retries, "write transaction ran into another; running it again");
            }
            outcome => return outcome,
        }
    }
}

/// Runs a batch in one transaction. Pet rows to change are locked first, in id order, so two
/// instances' batches never wait on each other in a cycle; the counter row comes next, only
/// when the batch creates. An error fails the whole batch: nothing of it is committed, or, when
/// the commit itself failed, its outcome is unknown and the callers get 503 (a retry with the
/// same Idempotency-Key then finds the truth).
async fn run_batch(
    client: &mut ClientWrapper,
    batch: &mut [Write],
    committing: &AtomicBool,
) -> Result<(), StoreError> {
    let txn = client.transaction().await.map_err(pg_error)?;
    let mut locked: Vec<PetId> = batch
        .iter()
        .filter_map(|write| match write {
            Write::Patch(id, ..) | Write::Delete(id, ..) => Some(*id),
            _ => None,
        })
        .collect();
    if !locked.is_empty() {
        locked.sort_unstable();
        locked.dedup();
        txn.execute(
            "SELECT 1 FROM pets WHERE id = ANY($1) ORDER BY id FOR UPDATE",
            &[&locked],
        )
        .await
        .map_err(pg_error)?;
    }
    let creates = batch
        .iter()
        .filter(|write| matches!(write, Write::Create(..)))
        .count();
    let mut next_id = match creates {
        0 => 0,
        n => allocate_ids(&txn, n).await?,
    };
    let now = unix_now();
    let mut new_pets = NewRows::default();
    for write in batch.iter_mut() {
        match write {
            Write::Create(pet, keyed, pending) => {
                let id = next_id;
                next_id += 1;
                pending.outcome =
                    Some(create(&txn, pet, keyed.as_ref(), id, now, &mut new_pets).await?);
            }
            Write::Patch(id, patch, precondition, pending) => {
                // A clone, not the patch itself: the batch may run again.
                let patch = patch.clone();
                pending.outcome = Some(patch_pet(&txn, *id, patch, precondition).await?);
            }
            Write::Delete(id, precondition, pending) => {
                pending.outcome = Some(delete_pet(&txn, *id, precondition).await?);
            }
            Write::Purge(now, pending) => {
                let purged = txn
                    .execute(
                        "DELETE FROM idempotency WHERE scope IN (
                             SELECT scope FROM idempotency WHERE expires_at <= $1 LIMIT $2)",
                        &[
                            &i64::try_from(*now).unwrap_or(i64::MAX),
                            &i64::try_from(PURGE_BATCH).unwrap_or(i64::MAX),
                        ],
                    )
                    .await
                    .map_err(pg_error)?;
                pending.outcome = Some(Ok(usize::try_from(purged).unwrap_or(usize::MAX)));
            }
            Write::Trim(before_ms, pending) => {
                pending.outcome = Some(Ok(trim_events(&txn, *before_ms).await?));
            }
            Write::PlaceOrder(_, pending) => pending.outcome = Some(Err(sales::refused())),
            Write::MoveOrder(.., pending) => pending.outcome = Some(Err(sales::refused())),
            // Nothing to expire while orders are not kept.
            Write::Expire(_, pending) => pending.outcome = Some(Ok(Vec::new())),
            Write::CreateCategory(_, pending) | Write::PatchCategory(_, _, pending) => {
                pending.outcome = Some(Err(sales::refused()))
            }
            Write::DeleteCategory(_, pending) => pending.outcome = Some(Err(sales::refused())),
        }
    }
    if !new_pets.ids.is_empty() {
        txn.execute(
            "INSERT INTO pets (id, status, revision, json)
             SELECT id, status, 1, json FROM UNNEST($1::bigint[], $2::smallint[], $3::text[])
                 AS new(id, status, json)",
            &[&new_pets.ids, &new_pets.statuses, &new_pets.jsons],
        )
        .await
        .map_err(pg_error)?;
    }
    if !batch.iter().any(Write::changed) {
        return txn.rollback().await.map_err(pg_error);
    }
    append_events(&txn, batch).await?;
    committing.store(true, Ordering::Relaxed);
    txn.commit().await.map_err(|e| match pg_error(e) {
        StoreError::Io(e) => StoreError::InDoubt(e),
        other => other,
    })
}

/// Appends the batch's events, last before the commit. Their numbers come from the counter row,
/// which stays locked to the commit: every other writing transaction, of any instance, waits
/// for it here, so events become visible in the order of their numbers and a reader that
/// reads past a number never finds a smaller one committed later (the trap of a bare sequence).
/// Taken last, after the pet rows and the id counter, so no two transactions wait on each
/// other in a cycle, and the lock is held for the least time.
async fn append_events(
    txn: &deadpool_postgres::Transaction<'_>,
    batch: &[Write],
) -> Result<(), StoreError> {
    let (mut types, mut ids, mut revisions, mut pets) = (vec![], vec![], vec![], vec![]);
    for change in Write::changes_of(batch) {
        // Numbered by the statement below.
        let event = StoredEvent::of(0, &change, 0);
        types.push(i16::from(event.kind.code()));
        ids.push(event.pet_id);
        revisions.push(i64::try_from(event.revision).unwrap_or(i64::MAX));
        let pet = event
            .pet
            .map(|pet| String::from_utf8(pet.to_vec()))
            .transpose();
        pets.push(pet.map_err(|e| StoreError::Corrupt(format!("a pet is not UTF-8: {e}")))?);
    }
    if types.is_empty() {
        return Ok(());
    }
    let count = i64::try_from(types.len()).unwrap_or(i64::MAX);
    let at_ms = i64::try_from(now_ms()).unwrap_or(i64::MAX);
    let statement = txn
        .prepare_cached(
            "WITH taken AS (
                 UPDATE petstore_meta SET value = value + $1 WHERE name = 'event_seq'
                 RETURNING value - $1 AS base)
             INSERT INTO events (seq, type, at_ms, pet_id, revision, pet)
             SELECT taken.base + new.n, new.type, $2, new.pet_id, new.revision, new.pet
             FROM taken, UNNEST($3::smallint[], $4::bigint[], $5::bigint[], $6::text[])
                 WITH ORDINALITY AS new(type, pet_id, revision, pet, n)",
        )
        .await
        .map_err(pg_error)?;
    txn.execute(
        &statement,
        &[&count, &at_ms, &types, &ids, &revisions, &pets],
    )
    .await
    .map_err(pg_error)?;
    Ok(())
}

/// Removes up to `PURGE_BATCH` of the oldest events, those from before `before_ms`: only from
/// the front, so what is left is whole from the first kept event on, and records the last one
/// removed (a cursor before it is gone). Instances trimming at once remove each row once.
async fn trim_events(
    txn: &deadpool_postgres::Transaction<'_>,
    before_ms: u64,
) -> Result<usize, StoreError> {
    let before_ms = i64::try_from(before_ms).unwrap_or(i64::MAX);
    let oldest = txn
        .query(
            "SELECT seq, at_ms FROM events ORDER BY seq LIMIT $1",
            &[&i64::try_from(PURGE_BATCH).unwrap_or(i64::MAX)],
        )
        .await
        .map_err(pg_error)?;
    let last = oldest
        .iter()
        .take_while(|row| row.get::<_, i64>(1) < before_ms)
        .map(|row| row.get::<_, i64>(0))
        .last();
    let Some(last) = last else {
        return Ok(0);
    };
    let removed = txn
        .execute("DELETE FROM events WHERE seq <= $1", &[&last])
        .await
        .map_err(pg_error)?;
    txn.execute(
        "UPDATE petstore_meta SET value = GREATEST(value, $1) WHERE name = 'events_trimmed'",
        &[&last],
    )
    .await
    .map_err(pg_error)?;
    Ok(usize::try_from(removed).unwrap_or(usize::MAX))
}

/// The pets a batch creates, inserted with one statement.
#[derive(Default)]
struct NewRows {
    ids: Vec<i64>,
    statuses: Vec<Option<i16>>,
    jsons: Vec<String>,
}

/// Takes `count` ids from the counter. The row stays locked to the commit, so every other
/// creating transaction, in this instance or another, waits: ids increase in commit order.
async fn allocate_ids(
    txn: &deadpool_postgres::Transaction<'_>,
    count: usize,
) -> Result<i64, StoreError> {
    let count = i64::try_from(count).unwrap_or(i64::MAX);
    let row = txn
        .query_one(
            "UPDATE petstore_meta SET value = value + $1 WHERE name = 'next_id' RETURNING value - $1",
            &[&count],
        )
        .await
        .map_err(|e| match e.code() {
            Some(code) if *code == SqlState::NUMERIC_VALUE_OUT_OF_RANGE => StoreError::IdsExhausted,
            _ => pg_error(e),
        })?;
    Ok(row.get(0))
}

async fn create(
    txn: &deadpool_postgres::Transaction<'_>,
    pet: &NewPet,
    keyed: Option<&Keyed>,
    id: PetId,
    now: u64,
    new_pets: &mut NewRows,
) -> Result<Result<Created, StoreError>, StoreError> {
    if let Some(keyed) = keyed {
        // Takes the record unless a live one holds the key. Another instance's create with
        // the same key makes this wait for its commit, and then the record answers; the id
        // taken for this create is then left unused, a gap that costs nothing.
        let expires_at = i64::try_from(keyed.expires_at).unwrap_or(i64::MAX);
        let taken = txn
            .query_opt(
                "INSERT INTO idempotency (scope, fingerprint, expires_at, pet_id)
                 VALUES ($1, $2, $3, $4)
                 ON CONFLICT (scope) DO UPDATE SET fingerprint = EXCLUDED.fingerprint,
                     expires_at = EXCLUDED.expires_at, pet_id = EXCLUDED.pet_id
                 WHERE idempotency.expires_at <= $5
                 RETURNING pet_id",
                &[
                    &short(keyed.key.scope()).as_slice(),
                    &short(keyed.key.fingerprint()).as_slice(),
                    &expires_at,
                    &id,
                    &i64::try_from(now).unwrap_or(i64::MAX),
                ],
            )
            .await
            .map_err(pg_error)?;
        if taken.is_none() {
            let row = txn
                .query_one(READ_RECORD, &[&short(keyed.key.scope()).as_slice()])
                .await
                .map_err(pg_error)?;
            let answer = record_of(&row)?.answer(&keyed.key, pet, now);
            return Ok(answer.unwrap_or_else(|| {
                Err(StoreError::Corrupt(
                    "a live idempotency record expired mid-transaction".into(),
                ))
            }));
        }
    }
    let json = String::from_utf8(pet.clone().into_pet(id).to_json())
        .map_err(|e| StoreError::Corrupt(format!("a pet's JSON is not UTF-8: {e}")))?;
    new_pets.ids.push(id);
    new_pets.statuses.push(status_code(pet.status));
    let stored = StoredPet {
        id,
        revision: 1,
        json: Bytes::from(json.clone()),
    };
    new_pets.jsons.push(json);
    Ok(Ok(Created {
        pet: stored,
        replayed: false,
    }))
}

async fn patch_pet(
    txn: &deadpool_postgres::Transaction<'_>,
    id: PetId,
    patch: PetPatch,
    precondition: &Precondition,
) -> Result<Result<StoredPet, StoreError>, StoreError> {
    let (old, revision) = match current(txn, id, precondition).await? {
        Ok(current) => current,
        Err(e) => return Ok(Err(e)),
    };
    let new = patch.apply(old);
    let json = String::from_utf8(new.to_json())
        .map_err(|e| StoreError::Corrupt(format!("a pet's JSON is not UTF-8: {e}")))?;
    let revision = revision + 1;
    txn.execute(
        "UPDATE pets SET status = $2, revision = $3, json = $4 WHERE id = $1",
        &[
            &id,
            &status_code(new.status),
            &i64::try_from(revision).unwrap_or(i64::MAX),
            &json,
        ],
    )
    .await
    .map_err(pg_error)?;
    Ok(Ok(StoredPet {
        id,
        revision,
        json: Bytes::from(json),
    }))
}

async fn delete_pet(
    txn: &deadpool_postgres::Transaction<'_>,
    id: PetId,
    precondition: &Precondition,
) -> Result<Result<u64, StoreError>, StoreError> {
    let revision = match current(txn, id, precondition).await? {
        Ok((_, revision)) => revision,
        Err(e) => return Ok(Err(e)),
    };
    txn.execute("DELETE FROM pets WHERE id = $1", &[&id])
        .await
        .map_err(pg_error)?;
    Ok(Ok(revision))
}

/// The pet `id` and its revision, if it exists and meets `precondition`.
async fn current(
    txn: &deadpool_postgres::Transaction<'_>,
    id: PetId,
    precondition: &Precondition,
) -> Result<Result<(Pet, u64), StoreError>, StoreError> {
    let Some(row) = txn
        .query_opt("SELECT revision, json FROM pets WHERE id = $1", &[&id])
        .await
        .map_err(pg_error)?
    else {
        return Ok(Err(StoreError::NotFound(id)));
    };
    let revision = revision(row.get(0));
    if !precondition.allows(revision) {
        return Ok(Err(StoreError::PreconditionFailed));
    }
    let pet = Pet::from_json(row.get::<_, &str>(1).as_bytes())
        .map_err(|e| StoreError::Corrupt(format!("pet {id} does not read back: {e}")));
    Ok(pet.map(|pet| (pet, revision)))
}
