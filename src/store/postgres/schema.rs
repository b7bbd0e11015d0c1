//! The PostgreSQL schema: its migrations, applied at start under an advisory lock so that
//! instances starting together apply each once, one after the other, and the refusal of a
//! database at a newer version than this binary writes.

use deadpool_postgres::ClientWrapper;

use super::errors::pg_error;
use crate::store::events::new_feed_id;
use crate::store::model::StoreError;

/// The schema this binary writes; a database at a newer one is refused, naming both.
pub(super) const SCHEMA_VERSION: i64 = 3;
/// `pg_advisory_xact_lock` key for migrations: "petstore" in ASCII.
const MIGRATION_LOCK: i64 = 0x7065_7473_746f_7265;

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

/// Version 3: the event feed (`store/events.rs`): one row an event, its sequence number given
/// at the end of the transaction that made the change (`batch.rs`), and the feed's counters
/// beside `next_id`. The feed's identity is set by `migrate`, at random.
const MIGRATION_3: &str = "
    CREATE TABLE events (
        seq bigint PRIMARY KEY,
        type smallint NOT NULL,
        at_ms bigint NOT NULL,
        pet_id bigint NOT NULL,
        revision bigint NOT NULL,
        pet text
    );
    INSERT INTO petstore_meta (name, value) VALUES ('event_seq', 0), ('events_trimmed', 0);
";

/// Creates or upgrades the schema. The transaction holds an advisory lock, so instances that
/// start together apply each migration once, one after the other.
pub(super) async fn migrate(client: &mut ClientWrapper) -> Result<u64, StoreError> {
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
    if version < 3 {
        txn.batch_execute(MIGRATION_3).await.map_err(pg_error)?;
        // The identity is a u64 kept in a bigint: the same bits.
        txn.execute(
            "INSERT INTO petstore_meta (name, value) VALUES ('feed', $1)",
            &[&(new_feed_id() as i64)],
        )
        .await
        .map_err(pg_error)?;
        tracing::info!(version = 3, "database schema upgraded");
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
