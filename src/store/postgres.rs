//! The PostgreSQL backend, for a store that runs on more than one box: a connection pool, the
//! schema and its migrations (under an advisory lock, so instances starting together apply
//! each once), the reads, and the engine that runs each batch of the write front (one per
//! instance, `store/write.rs`) as one transaction.
//! Invariant: ids come from one counter row, locked by every transaction that creates, so they
//! are unique and increase in commit order across instances and a failover; a pet, its
//! revision and its idempotency record change in one transaction. No PostgreSQL type leaves
//! this module and its children.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use deadpool_postgres::{ClientWrapper, PoolError};
use tokio_postgres::error::SqlState;

use super::model::{
    Created, Page, PageBuilder, Precondition, Record, StoreError, StoredPet, short,
};
use super::write::{Engine, Keyed, PURGE_BATCH, Write};
use crate::clock::unix_now;
use crate::pet::{NewPet, Pet, PetId, PetPatch, PetStatus};

pub mod connect;
pub(super) mod copy;
mod pool;

use connect::PgTarget;
use pool::Connections;

/// The schema this binary writes; a database at a newer one is refused, naming both.
const SCHEMA_VERSION: i64 = 2;
/// `pg_advisory_xact_lock` key for migrations: "petstore" in ASCII.
const MIGRATION_LOCK: i64 = 0x7065_7473_746f_7265;
/// How many times a batch that a concurrent transaction got in the way of (a serialization
/// failure, a deadlock: nothing of it committed) runs again before its callers get 503.
const CONTENDED_RETRIES: usize = 3;
/// The longest a request waits on the database, whatever it waits for (a connection, a
/// connect, a statement, its batch's commit): past it, 503. A write still queued or in flight
/// then may yet commit; its client got 503, never a 201, and a retry with the same
/// Idempotency-Key finds out which.
pub(super) const ANSWER_WITHIN: Duration = Duration::from_secs(5);

/// An idempotency record, by its scope.
const READ_RECORD: &str =
    "SELECT fingerprint, expires_at, pet_id FROM idempotency WHERE scope = $1";

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

/// Version 2: an idempotency record keeps its scope and fingerprint cut to 16 bytes, as redb
/// does (`store::SHORT_DIGEST`, so `petstore copy` carries records both ways), and no copy of
/// the first answer, which is rebuilt from the retried pet (`Record::answer`).
const MIGRATION_2: &str = "
    UPDATE idempotency SET scope = substring(scope from 1 for 16),
        fingerprint = substring(fingerprint from 1 for 16);
    ALTER TABLE idempotency DROP COLUMN json;
";

/// The read side of the PostgreSQL store; cheap to clone.
#[derive(Clone)]
pub(super) struct PgStore {
    pool: Connections,
}

/// The engine under the write front: one per instance.
pub(super) struct PgWriter {
    pool: Connections,
}

impl PgStore {
    /// Connects and migrates the schema under the migration lock. Returns the read side, the
    /// engine for the write front and the number of pets.
    pub(super) async fn open(target: PgTarget) -> Result<(PgStore, PgWriter, u64), StoreError> {
        let mut config = target.config;
        // Every statement is bounded, so a stuck lock or a database that stops answering
        // mid-query becomes a 503, never a hung request.
        config.options(with_statement_timeout(
            config.get_options(),
            target.statement_timeout,
        ));
        let pool = Connections::build(
            &config,
            target.tls,
            target.connect_timeout,
            target.pool_size,
            ANSWER_WITHIN,
        )?;
        // At start, every host may have to be tried before the one that takes writes.
        let pets = pool
            .run_within(pool.connect_within() + ANSWER_WITHIN, async |client| {
                migrate(client).await
            })
            .await?;
        let writer = PgWriter { pool: pool.clone() };
        Ok((PgStore { pool }, writer, pets))
    }

    /// The idempotency record of `scope`, live or not, if there is one.
    pub(super) async fn record(&self, scope: &[u8; 32]) -> Result<Option<Record>, StoreError> {
        let row = self
            .pool
            .run(async |client| {
                client
                    .query_opt(READ_RECORD, &[&short(*scope).as_slice()])
                    .await
                    .map_err(pg_error)
            })
            .await?;
        row.map(|row| record_of(&row)).transpose()
    }

    pub(super) async fn get(&self, id: PetId) -> Result<Option<StoredPet>, StoreError> {
        self.pool
            .run(async |client| {
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
        let after = after.unwrap_or(i64::MIN);
        // One more than the page, to tell whether another follows.
        let fetch = i64::try_from(limit + 1).unwrap_or(i64::MAX);
        self.pool.run(async |client| {
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

    /// Pets per status (`None`: without one): one scan of the status index, so its caller
    /// decides how often.
    pub(super) async fn count_by_status(
        &self,
    ) -> Result<Vec<(Option<PetStatus>, u64)>, StoreError> {
        let rows = self
            .pool
            .run(async |client| {
                client
                    .query("SELECT status, count(*) FROM pets GROUP BY status", &[])
                    .await
                    .map_err(pg_error)
            })
            .await?;
        let mut counts: Vec<(Option<PetStatus>, u64)> = [
            Some(PetStatus::Available),
            Some(PetStatus::Pending),
            Some(PetStatus::Sold),
            None,
        ]
        .into_iter()
        .map(|status| (status, 0))
        .collect();
        for row in rows {
            let code: Option<i16> = row.try_get(0).map_err(pg_error)?;
            let count: i64 = row.try_get(1).map_err(pg_error)?;
            if let Some(slot) = counts
                .iter_mut()
                .find(|(status, _)| status_code(*status) == code)
            {
                slot.1 = u64::try_from(count).unwrap_or(0);
            }
        }
        Ok(counts)
    }

    pub(super) async fn check(&self) -> Result<(), StoreError> {
        self.pool
            .run(async |client| {
                client.execute("SELECT 1", &[]).await.map_err(pg_error)?;
                Ok(())
            })
            .await
    }

    /// Closes the pool's connections.
    pub(super) fn close(self) {
        self.pool.close();
    }
}

impl Engine for PgWriter {
    async fn commit(&mut self, batch: &mut [Write]) -> Result<bool, StoreError> {
        commit(&self.pool, batch).await?;
        Ok(batch.iter().any(Write::changed))
    }

    async fn close(&mut self) {}
}

/// The URL's own `options` (e.g. `-c search_path=pets`) with our statement bound after them,
/// so that ours wins over a `statement_timeout` there and nothing of theirs is lost.
fn with_statement_timeout(options: Option<&str>, timeout: Duration) -> String {
    let ours = format!("-c statement_timeout={}", timeout.as_millis());
    match options.map(str::trim).filter(|o| !o.is_empty()) {
        Some(theirs) => format!("{theirs} {ours}"),
        None => ours,
    }
}

/// Creates or upgrades the schema. The transaction holds an advisory lock, so instances that
/// start together apply each migration once, one after the other.
async fn migrate(client: &mut ClientWrapper) -> Result<u64, StoreError> {
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
    if version < 2 {
        txn.batch_execute(MIGRATION_2).await.map_err(pg_error)?;
        tracing::info!(version = 2, "database schema upgraded");
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
    committing.store(true, Ordering::Relaxed);
    txn.commit().await.map_err(|e| match pg_error(e) {
        StoreError::Io(e) => StoreError::InDoubt(e),
        other => other,
    })
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

/// An idempotency row (`READ_RECORD`) as the record it is.
fn record_of(row: &tokio_postgres::Row) -> Result<Record, StoreError> {
    let fingerprint = row.get::<_, &[u8]>(0).try_into().map_err(|_| {
        StoreError::Corrupt("an idempotency record's fingerprint is not 16 bytes".into())
    })?;
    Ok(Record {
        fingerprint,
        expires_at: row.get::<_, i64>(1).unsigned_abs(),
        id: row.get(2),
    })
}

fn revision(stored: i64) -> u64 {
    stored.unsigned_abs()
}

/// The status as the `status` column keeps it: the same stable codes as redb's index.
fn status_code(status: Option<PetStatus>) -> Option<i16> {
    status.map(|status| i16::from(status.to_code()))
}

/// A PostgreSQL error by meaning, with the server's own message: refused credentials
/// (SQLSTATE class 28, or a password the server asks for and we lack) are `Refused`; a
/// serialization failure or a deadlock (40001, 40P01: nothing committed) is `Contended`, run
/// again; a lost or refused connection, a timeout, a server shutting down or out of
/// resources, or a standby that takes no writes is `Io` (503, retry); anything else is a fault.
fn pg_error(e: tokio_postgres::Error) -> StoreError {
    let text = describe(&e);
    let Some(code) = e.code() else {
        // No SQLSTATE: the connection failed, closed or timed out, or never got as far as
        // a server's answer. tokio-postgres's kinds are private; these two are its top lines
        // for a password it was asked for and lacks and for an authentication it could not do.
        let top = e.to_string();
        if top == "invalid configuration" || top == "authentication error" {
            return StoreError::Refused(text);
        }
        return StoreError::Io(text);
    };
    let class = &code.code()[..2];
    if class == "28" {
        return StoreError::Refused(text);
    }
    if *code == SqlState::T_R_SERIALIZATION_FAILURE || *code == SqlState::T_R_DEADLOCK_DETECTED {
        return StoreError::Contended(text);
    }
    let transient = matches!(class, "08" | "40" | "53" | "57" | "58")
        || *code == SqlState::READ_ONLY_SQL_TRANSACTION
        || *code == SqlState::LOCK_NOT_AVAILABLE;
    if transient {
        StoreError::Io(text)
    } else {
        StoreError::Corrupt(text)
    }
}

/// What went wrong, as the server said it (severity, SQLSTATE, message, detail, hint) or with
/// every cause of a client-side error: tokio-postgres's own `Display` stops at "db error".
pub(super) fn describe(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        let mut text = format!(
            "PostgreSQL {} {}: {}",
            db.severity(),
            db.code().code(),
            db.message()
        );
        for (label, part) in [("detail", db.detail()), ("hint", db.hint())] {
            if let Some(part) = part {
                text.push_str(&format!(" ({label}: {part})"));
            }
        }
        return text;
    }
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

pub(super) fn pool_error(e: PoolError) -> StoreError {
    match e {
        PoolError::Backend(e) => pg_error(e),
        PoolError::Closed => StoreError::Closed,
        e => StoreError::Io(format!("no database connection: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_statement_bound_follows_the_url_s_own_options() {
        let five = Duration::from_secs(5);
        assert_eq!(
            with_statement_timeout(None, five),
            "-c statement_timeout=5000"
        );
        assert_eq!(
            with_statement_timeout(Some(" "), five),
            "-c statement_timeout=5000"
        );
        assert_eq!(
            with_statement_timeout(Some("-c search_path=pets"), five),
            "-c search_path=pets -c statement_timeout=5000"
        );
    }
}
