//! The PostgreSQL schema: its migrations, applied at start under an advisory lock so that
//! instances starting together apply each once, one after the other, and the refusal of a
//! database at a newer version than this binary writes. Each migration upgrades the one
//! before it in place, in the same transaction as the version it records, and fills what it
//! adds from the rows there: by SQL, or, for what only Rust computes (a name's folded words),
//! by reading the rows here.

use deadpool_postgres::ClientWrapper;
use tokio_postgres::types::ToSql;

use super::errors::pg_error;
use super::handle::ANSWER_WITHIN;
use super::rows::{INSERT_WORDS, RECOUNT_INVENTORY, Words};
use crate::store::events::new_feed_id;
use crate::store::model::{StoreError, read_pet};
use crate::store::ops::each_resource;
use crate::store::resource::{ForEach, Resource};

/// The schema this binary writes; a database at a newer one is refused, naming both.
pub(super) const SCHEMA_VERSION: i64 = 6;
/// `pg_advisory_xact_lock` key for migrations: "petstore" in ASCII.
const MIGRATION_LOCK: i64 = 0x7065_7473_746f_7265;

/// Version 1: the pets (their table is their declaration's, `store/ops/pets.rs`), the
/// idempotency records and the counter.
const MIGRATION_1: &str = "
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

/// Version 4 (issue 29): orders, categories (their tables, and the pets' category column, are
/// their declarations', `store/ops/`) and the inventory.
/// - `petstore_meta`: the order and category id counters; the four inventory counters are
///   counted by `migrate` (`RECOUNT_INVENTORY`) and kept by every write from then on.
/// - `events`: an order's or a category's id and JSON beside the pet's.
const MIGRATION_4: &str = "
    ALTER TABLE events ADD COLUMN subject_id bigint, ADD COLUMN subject text;
    INSERT INTO petstore_meta (name, value) VALUES ('next_order_id', 1), ('next_category_id', 1);
";

/// Version 5: webhook endpoints' delivery state (`store::webhooks`) and the lease that lets one instance
/// deliver to an endpoint at a time: `holder` is an instance's random name, `lease_until` the
/// database's clock, so instances' clocks need not agree. Console sessions
/// (`store::sessions`), by their token's hash.
const MIGRATION_5: &str = "
    CREATE TABLE webhooks (
        endpoint text PRIMARY KEY,
        state bytea NOT NULL,
        holder text,
        lease_until timestamptz NOT NULL DEFAULT '-infinity'
    );
    CREATE TABLE sessions (
        token bytea PRIMARY KEY,
        record bytea NOT NULL,
        used_ms bigint NOT NULL
    );
";

/// Version 6 (issue 40): a pet's sort key and words, for search and `sort=name`; the SQL is
/// the pets' declaration's, the filling `fill_words`'.
const MIGRATION_6: &str = "";

/// Pets a statement of `fill_words` fills.
const FILL_CHUNK: i64 = 1000;

/// Fills every pet's `name_key` and `pet_words` from its name, a chunk of pets a statement,
/// then makes `name_key` required; answers the pets filled. The words come from the pet's
/// JSON as `Txn::pet` reads it, so they are the ones its next rename or delete takes away.
async fn fill_words(txn: &deadpool_postgres::Transaction<'_>) -> Result<u64, StoreError> {
    let read =
        step(txn.prepare("SELECT id, json FROM pets WHERE id > $1 ORDER BY id LIMIT $2")).await?;
    let fill = step(txn.prepare(&format!(
        "WITH named AS (
             UPDATE pets SET name_key = named.key
             FROM UNNEST($4::bigint[], $5::text[]) AS named(id, key)
             WHERE pets.id = named.id)
         {INSERT_WORDS}"
    )))
    .await?;
    let (mut after, mut filled) = (i64::MIN, 0);
    loop {
        let rows = step(txn.query(&read, &[&after, &FILL_CHUNK])).await?;
        let Some(last) = rows.last() else { break };
        after = last.get(0);
        let (mut ids, mut keys, mut words) = (Vec::new(), Vec::new(), Words::default());
        for row in &rows {
            let id: i64 = row.get(0);
            let pet = read_pet(id, row.get::<_, &str>(1).as_bytes())?;
            let key = words.add(id, &pet.name);
            ids.push(id);
            keys.push(key);
        }
        let params: [&(dyn ToSql + Sync); 5] =
            [&words.terms, &words.pets, &words.keys, &ids, &keys];
        step(txn.execute(&fill, &params)).await?;
        filled += rows.len() as u64;
        if rows.len() < FILL_CHUNK as usize {
            break;
        }
    }
    step(txn.batch_execute("ALTER TABLE pets ALTER COLUMN name_key SET NOT NULL")).await?;
    Ok(filled)
}

/// Every declared resource's migrations (`Postgres::migrations`), with their versions.
fn declared_migrations() -> Vec<(i64, &'static str)> {
    struct Migrations(Vec<(i64, &'static str)>);
    impl ForEach for Migrations {
        fn visit<R: Resource>(&mut self) -> Result<(), StoreError> {
            self.0.extend_from_slice(R::POSTGRES.migrations);
            Ok(())
        }
    }
    let mut migrations = Migrations(Vec::new());
    let _ = each_resource(&mut migrations);
    migrations.0
}

/// Refuses a database whose schema is not this binary's, reading only: for a command that
/// reads a database servers use, which must neither upgrade it under them (a newer petstore's
/// would) nor misread a version it does not know.
pub(super) async fn require_current(client: &mut ClientWrapper) -> Result<(), StoreError> {
    let has_meta: bool = client
        .query_one("SELECT to_regclass('petstore_meta') IS NOT NULL", &[])
        .await
        .map_err(pg_error)?
        .get(0);
    let version: i64 = if has_meta {
        client
            .query_opt(
                "SELECT value FROM petstore_meta WHERE name = 'schema_version'",
                &[],
            )
            .await
            .map_err(pg_error)?
            .map_or(0, |row| row.get(0))
    } else {
        0
    };
    if version > SCHEMA_VERSION {
        return Err(StoreError::NewerSchema {
            found: version.unsigned_abs(),
            supported: SCHEMA_VERSION.unsigned_abs(),
        });
    }
    if version < SCHEMA_VERSION {
        return Err(StoreError::Unsupported(format!(
            "the database is at schema version {version}, and this petstore reads version \
             {SCHEMA_VERSION}: a petstore server of this version upgrades it when it starts"
        )));
    }
    Ok(())
}

/// Creates or upgrades the schema, and answers the number of pets. The transaction holds an
/// advisory lock, so instances that start together apply each migration once, one after the
/// other. Each statement is bounded by `ANSWER_WITHIN` (`step`), not the whole, since a
/// version that fills what it adds from every pet takes as long as the store is big.
pub(super) async fn migrate(client: &mut ClientWrapper) -> Result<u64, StoreError> {
    let txn = step(client.transaction()).await?;
    step(txn.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])).await?;
    step(txn.batch_execute(
        "CREATE TABLE IF NOT EXISTS petstore_meta (name text PRIMARY KEY, value bigint NOT NULL)",
    ))
    .await?;
    let version: i64 = step(txn.query_opt(
        "SELECT value FROM petstore_meta WHERE name = 'schema_version'",
        &[],
    ))
    .await?
    .map_or(0, |row| row.get(0));
    if version > SCHEMA_VERSION {
        return Err(StoreError::NewerSchema {
            found: version.unsigned_abs(),
            supported: SCHEMA_VERSION.unsigned_abs(),
        });
    }
    let declared = declared_migrations();
    // Each version's statements: its own, then what the declarations of resources did to
    // their tables at it.
    let upgrade = async |to: i64, own: &str| -> Result<(), StoreError> {
        step(txn.batch_execute(own)).await?;
        for (_, sql) in declared.iter().filter(|(at, _)| *at == to) {
            step(txn.batch_execute(sql)).await?;
        }
        Ok(())
    };
    if version < 1 {
        upgrade(1, MIGRATION_1).await?;
        tracing::info!(version = 1, "database schema created");
    }
    if version < 2 {
        upgrade(2, MIGRATION_2).await?;
        tracing::info!(version = 2, "database schema upgraded");
    }
    if version < 3 {
        upgrade(3, MIGRATION_3).await?;
        // The identity is a u64 kept in a bigint: the same bits.
        step(txn.execute(
            "INSERT INTO petstore_meta (name, value) VALUES ('feed', $1)",
            &[&(new_feed_id() as i64)],
        ))
        .await?;
        tracing::info!(version = 3, "database schema upgraded");
    }
    if version < 4 {
        upgrade(4, MIGRATION_4).await?;
        step(txn.execute(RECOUNT_INVENTORY, &[])).await?;
        tracing::info!(version = 4, "database schema upgraded");
    }
    if version < 5 {
        upgrade(5, MIGRATION_5).await?;
        tracing::info!(version = 5, "database schema upgraded");
    }
    if version < 6 {
        upgrade(6, MIGRATION_6).await?;
        let filled = fill_words(&txn).await?;
        tracing::info!(version = 6, pets = filled, "database schema upgraded");
    }
    step(txn.execute(
        "INSERT INTO petstore_meta (name, value) VALUES ('schema_version', $1)
         ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value",
        &[&SCHEMA_VERSION],
    ))
    .await?;
    let pets: i64 = step(txn.query_one("SELECT count(*) FROM pets", &[]))
        .await?
        .get(0);
    step(txn.commit()).await?;
    Ok(pets.unsigned_abs())
}

/// `statement`'s outcome, or `Io` once the database has not answered it within
/// `ANSWER_WITHIN`.
async fn step<T>(
    statement: impl Future<Output = Result<T, tokio_postgres::Error>>,
) -> Result<T, StoreError> {
    match tokio::time::timeout(ANSWER_WITHIN, statement).await {
        Ok(outcome) => outcome.map_err(pg_error),
        Err(_) => Err(StoreError::Io(format!(
            "no answer from the database within {} s",
            ANSWER_WITHIN.as_secs()
        ))),
    }
}
