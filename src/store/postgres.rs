//! The PostgreSQL backend, for a store that runs on more than one box: a connection pool, the
//! schema and its migrations (under an advisory lock, so instances starting together apply
//! each once), and the store's operations in SQL. Writes go through one writer task per
//! instance that runs every write queued meanwhile in one transaction (group commit).
//! Invariant: ids come from one counter row, locked by every transaction that creates, so they
//! are unique and increase in commit order across instances and a failover; a pet, its
//! revision and its idempotency record change in one transaction. No PostgreSQL type leaves
//! this module and its children.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use deadpool_postgres::{Manager, ManagerConfig, Pool, PoolError, RecyclingMethod, Runtime};
use tokio::sync::{mpsc, oneshot};
use tokio_postgres::error::SqlState;

use super::claims::Claims;
use super::write::{Command, Keyed, Pending, Write, gather, unix_now};
use super::{
    Created, IdempotencyKey, KeyClaim, Page, PageBuilder, Precondition, Record, StoreError,
    StoredPet, Tuning,
};
use crate::pet::{NewPet, Pet, PetId, PetPatch, PetStatus};

pub mod connect;
pub(super) mod copy;

use connect::PgTarget;

/// The schema this binary writes; a database at a newer one is refused, naming both.
const SCHEMA_VERSION: i64 = 1;
/// `pg_advisory_xact_lock` key for migrations: "petstore" in ASCII.
const MIGRATION_LOCK: i64 = 0x7065_7473_746f_7265;
/// Writes waiting for the writer before callers wait to enqueue.
const WRITE_QUEUE: usize = 4096;
/// Most expired idempotency records one purge transaction removes.
const PURGE_BATCH: i64 = 1000;
/// How often expired idempotency records are looked for.
const PURGE_INTERVAL: Duration = Duration::from_secs(60);
/// How long a request waits for a pooled connection before it gets 503.
const POOL_WAIT: Duration = Duration::from_secs(2);
/// The longest a request waits on the database, whatever it waits for (a connection, a
/// connect, a statement, its batch's commit): past it, 503. A write still queued or in flight
/// then may yet commit; its client got 503, never a 201, and a retry with the same
/// Idempotency-Key finds out which.
const ANSWER_WITHIN: Duration = Duration::from_secs(5);

/// Version 1: the pets (their JSON as the API sends it, with status and revision beside it for
/// the index and preconditions), the status index, the idempotency records and the counter.
const MIGRATION_1: &str = "
    CREATE TABLE pets (
        id bigint PRIMARY KEY,
        status smallint,
        revision bigint NOT NULL,
        json text NOT NULL
    );
    CREATE INDEX pets_by_status ON pets (status, id);
    CREATE TABLE idempotency (
        scope bytea PRIMARY KEY,
        fingerprint bytea NOT NULL,
        expires_at bigint NOT NULL,
        pet_id bigint NOT NULL,
        json text NOT NULL
    );
    CREATE INDEX idempotency_expiry ON idempotency (expires_at);
    INSERT INTO petstore_meta (name, value) VALUES ('next_id', 1);
";

/// A handle to the PostgreSQL store; cheap to clone.
#[derive(Clone)]
pub(super) struct PgStore {
    pool: Pool,
    writer: mpsc::Sender<Command>,
    claims: Arc<Claims>,
    idempotency_ttl: Duration,
}

impl PgStore {
    /// Connects, migrates the schema under the migration lock, and starts the writer task and
    /// the purge. Returns the store and its number of pets.
    pub(super) async fn open(
        target: PgTarget,
        tuning: Tuning,
    ) -> Result<(PgStore, u64), StoreError> {
        let mut config = target.config;
        // Every statement is bounded, so a stuck lock or a database that stops answering
        // mid-query becomes a 503, never a hung request.
        config.options(format!(
            "-c statement_timeout={}",
            target.statement_timeout.as_millis()
        ));
        config.connect_timeout(target.connect_timeout);
        let manager = Manager::from_config(
            config,
            target.tls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(target.pool_size)
            .wait_timeout(Some(POOL_WAIT))
            .create_timeout(Some(target.connect_timeout))
            .recycle_timeout(Some(target.connect_timeout))
            .runtime(Runtime::Tokio1)
            .build()
            .map_err(|e| StoreError::Corrupt(format!("building the connection pool: {e}")))?;
        let pets = migrate(&pool).await?;
        let (writer, queue) = mpsc::channel(WRITE_QUEUE);
        tokio::spawn(write_loop(
            pool.clone(),
            queue,
            tuning.max_write_batch.max(1),
        ));
        tokio::spawn(purge_loop(writer.downgrade()));
        let store = PgStore {
            pool,
            writer,
            claims: Arc::default(),
            idempotency_ttl: tuning.idempotency_ttl,
        };
        Ok((store, pets))
    }

    pub(super) fn claim_key(&self, scope: [u8; 32]) -> Result<KeyClaim, StoreError> {
        self.claims
            .claim(scope)
            .ok_or(StoreError::IdempotencyKeyInFlight)
    }

    pub(super) async fn create(
        &self,
        pet: NewPet,
        key: Option<IdempotencyKey>,
    ) -> Result<Created, StoreError> {
        let Some(key) = key else {
            return self
                .write(|reply| Write::Create(pet, None, Pending::new(reply)))
                .await;
        };
        let now = unix_now();
        let row = bounded(async {
            let client = self.pool.get().await.map_err(pool_error)?;
            client
                .query_opt(
                    "SELECT fingerprint, expires_at, pet_id, json FROM idempotency WHERE scope = $1",
                    &[&key.scope().as_slice()],
                )
                .await
                .map_err(pg_error)
        })
        .await?;
        if let Some(answer) = row.and_then(|row| record_answer(&row, &key, now)) {
            return answer;
        }
        let keyed = Keyed {
            key,
            expires_at: now.saturating_add(self.idempotency_ttl.as_secs()),
        };
        self.write(|reply| Write::Create(pet, Some(keyed), Pending::new(reply)))
            .await
    }

    pub(super) async fn patch(
        &self,
        id: PetId,
        patch: PetPatch,
        precondition: Precondition,
    ) -> Result<StoredPet, StoreError> {
        self.write(|reply| Write::Patch(id, patch, precondition, Pending::new(reply)))
            .await
    }

    pub(super) async fn delete(
        &self,
        id: PetId,
        precondition: Precondition,
    ) -> Result<(), StoreError> {
        self.write(|reply| Write::Delete(id, precondition, Pending::new(reply)))
            .await
    }

    pub(super) async fn get(&self, id: PetId) -> Result<Option<StoredPet>, StoreError> {
        bounded(async {
            let client = self.pool.get().await.map_err(pool_error)?;
            let statement = client
                .prepare_cached("SELECT revision, json FROM pets WHERE id = $1")
                .await
                .map_err(pg_error)?;
            let row = client
                .query_opt(&statement, &[&id])
                .await
                .map_err(pg_error)?;
            Ok(row.map(|row| StoredPet {
                id,
                revision: revision(row.get(0)),
                json: Bytes::from(row.get::<_, String>(1)),
            }))
        })
        .await
    }

    pub(super) async fn list(
        &self,
        status: Option<PetStatus>,
        after: Option<PetId>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        bounded(async {
            let after = after.unwrap_or(i64::MIN);
            // One more than the page, to tell whether another follows.
            let fetch = i64::try_from(limit + 1).unwrap_or(i64::MAX);
            let client = self.pool.get().await.map_err(pool_error)?;
            let rows = match status {
                None => {
                    let statement = client
                        .prepare_cached(
                            "SELECT id, json FROM pets WHERE id > $1 ORDER BY id LIMIT $2",
                        )
                        .await
                        .map_err(pg_error)?;
                    client.query(&statement, &[&after, &fetch]).await
                }
                Some(status) => {
                    let statement = client
                        .prepare_cached(
                            "SELECT id, json FROM pets WHERE status = $1 AND id > $2 ORDER BY id LIMIT $3",
                        )
                        .await
                        .map_err(pg_error)?;
                    client
                        .query(&statement, &[&status_code(Some(status)), &after, &fetch])
                        .await
                }
            }
            .map_err(pg_error)?;
            let mut page = PageBuilder::new(limit);
            for row in &rows {
                page.push(row.get(0), row.get::<_, &str>(1).as_bytes());
            }
            Ok(page.finish())
        })
        .await
    }

    pub(super) async fn check(&self) -> Result<(), StoreError> {
        bounded(async {
            if self.writer.is_closed() {
                return Err(StoreError::Closed);
            }
            let client = self.pool.get().await.map_err(pool_error)?;
            client.execute("SELECT 1", &[]).await.map_err(pg_error)?;
            Ok(())
        })
        .await
    }

    pub(super) async fn close(self) {
        let (done, closed) = oneshot::channel();
        if self.writer.send(Command::Close(done)).await.is_ok() {
            let _ = closed.await;
        }
        self.pool.close();
    }

    async fn write<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<T, StoreError>>) -> Write,
    ) -> Result<T, StoreError> {
        let (reply, answer) = oneshot::channel();
        let command = Command::Write(make(reply));
        bounded(async {
            self.writer
                .send(command)
                .await
                .map_err(|_| StoreError::Closed)?;
            answer.await.map_err(|_| StoreError::Closed)?
        })
        .await
    }
}

/// Creates or upgrades the schema. The transaction holds an advisory lock, so instances that
/// start together apply each migration once, one after the other.
async fn migrate(pool: &Pool) -> Result<u64, StoreError> {
    let mut client = pool.get().await.map_err(pool_error)?;
    let txn = client.transaction().await.map_err(pg_error)?;
    txn.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(pg_error)?;
    txn.batch_execute(
        "CREATE TABLE IF NOT EXISTS petstore_meta (name text PRIMARY KEY, value bigint NOT NULL)",
    )
    .await
    .map_err(pg_error)?;
    let version: i64 = txn
        .query_opt(
            "SELECT value FROM petstore_meta WHERE name = 'schema_version'",
            &[],
        )
        .await
        .map_err(pg_error)?
        .map_or(0, |row| row.get(0));
    if version > SCHEMA_VERSION {
        return Err(StoreError::NewerSchema {
            found: version.unsigned_abs(),
            supported: SCHEMA_VERSION.unsigned_abs(),
        });
    }
    if version < 1 {
        txn.batch_execute(MIGRATION_1).await.map_err(pg_error)?;
        tracing::info!(version = 1, "database schema created");
    }
    txn.execute(
        "INSERT INTO petstore_meta (name, value) VALUES ('schema_version', $1)
         ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value",
        &[&SCHEMA_VERSION],
    )
    .await
    .map_err(pg_error)?;
    let pets: i64 = txn
        .query_one("SELECT count(*) FROM pets", &[])
        .await
        .map_err(pg_error)?
        .get(0);
    txn.commit().await.map_err(pg_error)?;
    Ok(pets.unsigned_abs())
}

/// The writer task: every write queued while the last transaction ran goes into the next.
async fn write_loop(pool: Pool, mut queue: mpsc::Receiver<Command>, max_batch: usize) {
    let mut batch = Vec::with_capacity(max_batch);
    while let Some(first) = queue.recv().await {
        let closing = gather(first, &mut queue, &mut batch, max_batch);
        if !batch.is_empty() {
            let failure = run_batch(&pool, &mut batch).await.err();
            if let Some(e) = &failure {
                tracing::warn!(error = %e, writes = batch.len(), "write transaction failed");
            }
            for write in batch.drain(..) {
                write.answer(failure.as_ref());
            }
        }
        if let Some(done) = closing {
            let _ = done.send(());
            return;
        }
    }
}

/// Runs a batch in one transaction. Pet rows to change are locked first, in id order, so two
/// instances' batches never wait on each other in a cycle; the counter row comes next, only
/// when the batch creates. An error fails the whole batch: nothing of it is committed, or, when
/// the commit itself failed, its outcome is unknown and the callers get 503 (a retry with the
/// same Idempotency-Key then finds the truth).
async fn run_batch(pool: &Pool, batch: &mut [Write]) -> Result<(), StoreError> {
    let mut client = pool.get().await.map_err(pool_error)?;
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
                let patch = std::mem::take(patch);
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
                        &[&i64::try_from(*now).unwrap_or(i64::MAX), &PURGE_BATCH],
                    )
                    .await
                    .map_err(pg_error)?;
                pending.outcome = Some(Ok(usize::try_from(purged).unwrap_or(usize::MAX)));
            }
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
    txn.commit().await.map_err(pg_error)
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
    let json = String::from_utf8(pet.clone().into_pet(id).to_json())
        .map_err(|e| StoreError::Corrupt(format!("a pet's JSON is not UTF-8: {e}")))?;
    if let Some(keyed) = keyed {
        // Takes the record unless a live one holds the key. Another instance's create with
        // the same key makes this wait for its commit, and then the record answers; the id
        // taken for this create is then left unused, a gap that costs nothing.
        let expires_at = i64::try_from(keyed.expires_at).unwrap_or(i64::MAX);
        let taken = txn
            .query_opt(
                "INSERT INTO idempotency (scope, fingerprint, expires_at, pet_id, json)
                 VALUES ($1, $2, $3, $4, $5)
                 ON CONFLICT (scope) DO UPDATE SET fingerprint = EXCLUDED.fingerprint,
                     expires_at = EXCLUDED.expires_at, pet_id = EXCLUDED.pet_id,
                     json = EXCLUDED.json
                 WHERE idempotency.expires_at <= $6
                 RETURNING pet_id",
                &[
                    &keyed.key.scope().as_slice(),
                    &keyed.key.fingerprint().as_slice(),
                    &expires_at,
                    &id,
                    &json,
                    &i64::try_from(now).unwrap_or(i64::MAX),
                ],
            )
            .await
            .map_err(pg_error)?;
        if taken.is_none() {
            let row = txn
                .query_one(
                    "SELECT fingerprint, expires_at, pet_id, json FROM idempotency WHERE scope = $1",
                    &[&keyed.key.scope().as_slice()],
                )
                .await
                .map_err(pg_error)?;
            return Ok(record_answer(&row, &keyed.key, now).unwrap_or_else(|| {
                Err(StoreError::Corrupt(
                    "a live idempotency record expired mid-transaction".into(),
                ))
            }));
        }
    }
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
) -> Result<Result<(), StoreError>, StoreError> {
    if let Err(e) = current(txn, id, precondition).await? {
        return Ok(Err(e));
    }
    txn.execute("DELETE FROM pets WHERE id = $1", &[&id])
        .await
        .map_err(pg_error)?;
    Ok(Ok(()))
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

/// The answer an idempotency row gives `key`; see `Record::answer`.
fn record_answer(
    row: &tokio_postgres::Row,
    key: &IdempotencyKey,
    now: u64,
) -> Option<Result<Created, StoreError>> {
    Record {
        fingerprint: row.get::<_, &[u8]>(0),
        expires_at: row.get::<_, i64>(1).unsigned_abs(),
        id: row.get(2),
        json: row.get::<_, &str>(3).as_bytes(),
    }
    .answer(key, now)
}

fn revision(stored: i64) -> u64 {
    stored.unsigned_abs()
}

/// The status as the `status` column keeps it: the same stable codes as redb's index.
fn status_code(status: Option<PetStatus>) -> Option<i16> {
    status.map(|status| i16::from(status.to_code()))
}

/// Purges expired idempotency records every `PURGE_INTERVAL`, one batch a transaction, until
/// none are left; each batch queues behind the writes already waiting. Ends with the store.
async fn purge_loop(writer: mpsc::WeakSender<Command>) {
    let mut ticks = tokio::time::interval(PURGE_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
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
                Ok(Ok(count)) if count as i64 >= PURGE_BATCH => {}
                Ok(Ok(_)) => break,
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "purging expired idempotency records failed; retrying later");
                    break;
                }
                Err(_) => return,
            }
        }
    }
}

/// `work`, or `Io` if the database has not answered it within `ANSWER_WITHIN`.
async fn bounded<T>(work: impl Future<Output = Result<T, StoreError>>) -> Result<T, StoreError> {
    tokio::time::timeout(ANSWER_WITHIN, work)
        .await
        .unwrap_or_else(|_| {
            Err(StoreError::Io(format!(
                "no answer from the database within {} s",
                ANSWER_WITHIN.as_secs()
            )))
        })
}

/// A PostgreSQL error by meaning: a lost or refused connection, a timeout, a conflict to retry
/// or a standby that takes no writes is `Io` (503, retry); anything else is a fault.
fn pg_error(e: tokio_postgres::Error) -> StoreError {
    // tokio-postgres's own text is only the kind ("db error"); the cause says what happened.
    let text = match std::error::Error::source(&e) {
        Some(cause) => format!("{e}: {cause}"),
        None => e.to_string(),
    };
    let Some(code) = e.code() else {
        // No SQLSTATE: the connection failed, closed, or timed out.
        return StoreError::Io(text);
    };
    let class = &code.code()[..2];
    let transient = matches!(class, "08" | "40" | "53" | "57" | "58")
        || *code == SqlState::READ_ONLY_SQL_TRANSACTION
        || *code == SqlState::LOCK_NOT_AVAILABLE;
    if transient {
        StoreError::Io(text)
    } else {
        StoreError::Corrupt(text)
    }
}

fn pool_error(e: PoolError) -> StoreError {
    match e {
        PoolError::Backend(e) => pg_error(e),
        PoolError::Closed => StoreError::Closed,
        e => StoreError::Io(format!("no database connection: {e}")),
    }
}
