//! The PostgreSQL engine under the write front: each batch is one transaction on a pooled
//! connection, its writes run by their rules (`store/ops`) through `txn.rs`.
//! Every transaction of every instance takes its locks in one order (`lock_rows`: order rows,
//! pet rows, then the counter rows, the event counter last), so no two wait on each other in
//! a cycle, and ids and event numbers increase in commit order; the inventory's counters move
//! once a batch, by what its writes did. A batch a concurrent transaction got in the way of
//! runs again.

use std::sync::atomic::{AtomicBool, Ordering};

use deadpool_postgres::ClientWrapper;
use tokio_postgres::error::SqlState;

use super::errors::pg_error;
use super::pool::Connections;

use super::txn::{CounterRow, Locked, PgTxn, Tally, Transaction};
use crate::clock::unix_now;
use crate::order::OrderId;
use crate::pet::{Pet, PetId};
use crate::store::events::{StoredEvent, now_ms};
use crate::store::model::{Change, StoreError};
use crate::store::ops::{self, Touches, Write};
use crate::store::resource::Resource;
use crate::store::write::{Engine, PURGE_BATCH};
use crate::subject::Kind;

/// How many times a batch that a concurrent transaction got in the way of (a serialization
/// failure, a deadlock: nothing of it committed) runs again before its callers get 503.
const CONTENDED_RETRIES: usize = 3;

/// The engine under the write front: one per instance.
pub(in crate::store) struct PgWriter {
    pub(super) pool: Connections,
}

impl Engine for PgWriter {
    async fn commit(&mut self, batch: &mut [Write]) -> Result<Option<Vec<Change>>, StoreError> {
        commit(&self.pool, batch).await
    }

    async fn close(&mut self) {}
}

/// Runs a batch in one transaction on a pooled connection, within `ANSWER_WITHIN`, again if
/// a concurrent transaction got in its way. A batch whose database stops answering is given
/// up at the deadline and its connection closed, so the writer goes on to the next batch
/// rather than queueing every later write behind a statement that will never finish.
async fn commit(
    pool: &Connections,
    batch: &mut [Write],
) -> Result<Option<Vec<Change>>, StoreError> {
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

/// Runs a batch in one transaction: takes its locks (`lock_rows`), runs each write in order,
/// then inserts the new pets, writes the counters and appends the events. An error fails the
/// whole batch: nothing of it is committed, or, when the commit itself failed, its outcome is
/// unknown and the callers get 503 (a retry with the same Idempotency-Key then finds the
/// truth). Answers the changes committed, or `None` when nothing changed and it rolled back.
async fn run_batch(
    client: &mut ClientWrapper,
    batch: &mut [Write],
    committing: &AtomicBool,
) -> Result<Option<Vec<Change>>, StoreError> {
    let txn = client.transaction().await.map_err(pg_error)?;
    let mut tally = Tally::default();
    let locked = lock_rows(&txn, batch, &mut tally).await?;
    let mut rules = PgTxn::new(&txn, tally, locked, unix_now(), now_ms());
    for write in batch.iter_mut() {
        if ops::run(&mut rules, write).await? {
            continue;
        }
        match write {
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
            // Saved by statements of their own (`postgres/webhooks.rs`, `sessions.rs`); never
            // queued here.
            Write::SaveWebhook(_, pending) | Write::SaveSession(_, pending) => {
                pending.outcome = Some(Err(StoreError::Corrupt(
                    "a webhook's or session's write reached PostgreSQL's batch".into(),
                )));
            }
            Write::RemoveSessions(_, pending) => {
                pending.outcome = Some(Err(StoreError::Corrupt(
                    "a session's removal reached PostgreSQL's batch".into(),
                )));
            }
            // Every other write is a rule's (`ops::run`).
            _ => {}
        }
    }
    rules.flush().await?;
    let (tally, changes) = (rules.tally, rules.ledger.changes);
    if !batch.iter().any(Write::changed) {
        txn.rollback().await.map_err(pg_error)?;
        return Ok(None);
    }
    tally.write(&txn).await?;
    append_events(&txn, &changes).await?;
    committing.store(true, Ordering::Relaxed);
    txn.commit().await.map_err(|e| match pg_error(e) {
        StoreError::Io(e) => StoreError::InDoubt(e),
        other => other,
    })?;
    Ok(Some(changes))
}

/// Takes every lock the batch needs before any write runs (what its writes touch,
/// `ops::touches`), in the one order every transaction of every instance follows, so that
/// none waits on another in a cycle:
/// 1. order rows: those the batch's `MoveOrder`s name, in id order; then each `Expire`'s, up to
///    `PURGE_BATCH` placed ones whose hold has ended, `SKIP LOCKED`: rows another instance is
///    expiring or moving are left to it, so each order expires once and expiry never waits;
/// 2. pet rows, in id order: those patched or deleted, those orders are placed for, and the
///    pets of the orders locked in 1;
/// 3. the counter rows, each only when needed: `next_id`, `next_order_id`, `next_category_id`
///    (every category write takes it: names change one transaction at a time, so the check
///    for a name taken cannot race a concurrent rename);
/// 4. at the end of the batch (`Tally::write`, `append_events`): the inventory's counters in
///    name order, and `event_seq` last.
async fn lock_rows(
    txn: &Transaction<'_>,
    batch: &[Write],
    tally: &mut Tally,
) -> Result<Locked, StoreError> {
    let Touches {
        mut pets,
        orders: mut moving,
        ended_holds,
        new_pets,
        counters,
    } = ops::touches(batch);
    let (mut orders, mut locked_pets) = (Vec::new(), Vec::new());
    if !moving.is_empty() {
        moving.sort_unstable();
        moving.dedup();
        let rows = txn
            .query(
                "SELECT id, pet_id FROM orders WHERE id = ANY($1) ORDER BY id FOR UPDATE",
                &[&moving],
            )
            .await
            .map_err(pg_error)?;
        orders.extend(rows.iter().map(|row| row.get::<_, i64>(0)));
        pets.extend(rows.iter().map(|row| row.get::<_, i64>(1)));
    }
    let mut expiring = Vec::new();
    for at_ms in ended_holds {
        let (taken, their_pets) = take_ended_holds(txn, at_ms).await?;
        pets.extend(their_pets);
        orders.extend_from_slice(&taken);
        expiring.push(taken);
    }
    orders.sort_unstable();
    if !pets.is_empty() {
        pets.sort_unstable();
        pets.dedup();
        let rows = txn
            .query(
                "SELECT id FROM pets WHERE id = ANY($1) ORDER BY id FOR UPDATE",
                &[&pets],
            )
            .await
            .map_err(pg_error)?;
        locked_pets.extend(rows.iter().map(|row| row.get::<_, i64>(0)));
    }
    let next_id = match new_pets {
        0 => 0,
        n => allocate_ids(txn, n).await?,
    };
    // In `ops::COUNTERS`' order, as every transaction takes them (the pets' is
    // `allocate_ids`).
    for counter in ops::COUNTERS {
        if counter != Pet::COUNTER && counters.contains(&counter) {
            tally.counters.push(CounterRow::lock(txn, counter).await?);
        }
    }
    Ok(Locked {
        next_id,
        expiring,
        orders,
        pets: locked_pets,
    })
}

/// Locks up to `PURGE_BATCH` placed orders whose hold ended by `at_ms`, the oldest end first,
/// skipping those another transaction holds: another instance expiring them at the same time,
/// or a client completing or cancelling one. Each is then expired by one transaction only, and
/// one expired already is no longer placed. Returns the orders and their pets, to lock next.
pub(super) async fn take_ended_holds(
    txn: &Transaction<'_>,
    at_ms: u64,
) -> Result<(Vec<OrderId>, Vec<PetId>), StoreError> {
    let statement = txn
        .prepare_cached(
            "SELECT id, pet_id FROM orders WHERE status = 1 AND expires_at_ms <= $1
             ORDER BY expires_at_ms, id LIMIT $2 FOR UPDATE SKIP LOCKED",
        )
        .await
        .map_err(pg_error)?;
    let rows = txn
        .query(
            &statement,
            &[
                &i64::try_from(at_ms).unwrap_or(i64::MAX),
                &i64::try_from(PURGE_BATCH).unwrap_or(i64::MAX),
            ],
        )
        .await
        .map_err(pg_error)?;
    Ok(rows
        .iter()
        .map(|row| (row.get::<_, i64>(0), row.get::<_, i64>(1)))
        .unzip())
}

/// Appends the batch's events, last before the commit. Their numbers come from the counter row,
/// which stays locked to the commit: every other writing transaction, of any instance, waits
/// for it here, so events become visible in the order of their numbers and a reader that
/// reads past a number never finds a smaller one committed later (the trap of a bare sequence).
/// Taken last, after the pet rows and the id counter, so no two transactions wait on each
/// other in a cycle, and the lock is held for the least time.
async fn append_events(txn: &Transaction<'_>, changes: &[Change]) -> Result<(), StoreError> {
    let (mut types, mut ids, mut revisions, mut pets) = (vec![], vec![], vec![], vec![]);
    let (mut subject_ids, mut subjects) = (vec![], vec![]);
    for change in changes {
        // Numbered by the statement below.
        let event = StoredEvent::of(0, change, 0);
        types.push(i16::from(event.kind.code()));
        ids.push(event.pet_id);
        revisions.push(i64::try_from(event.revision).unwrap_or(i64::MAX));
        let pet = event
            .pet
            .map(|pet| String::from_utf8(pet.to_vec()))
            .transpose();
        pets.push(pet.map_err(|e| StoreError::Corrupt(format!("a pet is not UTF-8: {e}")))?);
        // A pet's event has no subject of its own: NULL, as in the events from before orders.
        let is_pet = event.kind.subject() == Kind::Pet;
        subject_ids.push((!is_pet).then_some(event.subject_id));
        let subject = event
            .subject
            .map(|subject| String::from_utf8(subject.to_vec()))
            .transpose();
        subjects.push(subject.map_err(|e| StoreError::Corrupt(format!("not UTF-8: {e}")))?);
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
             INSERT INTO events (seq, type, at_ms, pet_id, revision, pet, subject_id, subject)
             SELECT taken.base + new.n, new.type, $2, new.pet_id, new.revision, new.pet,
                 new.subject_id, new.subject
             FROM taken, UNNEST($3::smallint[], $4::bigint[], $5::bigint[], $6::text[],
                     $7::bigint[], $8::text[])
                 WITH ORDINALITY AS new(type, pet_id, revision, pet, subject_id, subject, n)",
        )
        .await
        .map_err(pg_error)?;
    txn.execute(
        &statement,
        &[
            &count,
            &at_ms,
            &types,
            &ids,
            &revisions,
            &pets,
            &subject_ids,
            &subjects,
        ],
    )
    .await
    .map_err(pg_error)?;
    Ok(())
}

/// Removes up to `PURGE_BATCH` of the oldest events, those from before `before_ms`: only from
/// the front, so what is left is whole from the first kept event on, and records the last one
/// removed (a cursor before it is gone). Instances trimming at once remove each row once.
async fn trim_events(txn: &Transaction<'_>, before_ms: u64) -> Result<usize, StoreError> {
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

/// Takes `count` ids from the counter. The row stays locked to the commit, so every other
/// creating transaction, in this instance or another, waits: ids increase in commit order.
async fn allocate_ids(txn: &Transaction<'_>, count: usize) -> Result<i64, StoreError> {
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
