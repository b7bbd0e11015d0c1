//! Copying a PostgreSQL store out and in, for `petstore copy`. Each side has a connection of
//! its own, taken out of the pool so that it never goes back to it mid-transaction (dropping it
//! closes it, and PostgreSQL rolls back). The export reads one REPEATABLE READ snapshot in
//! id-ordered chunks; the import is one transaction that locks the counter row, checks that
//! the store is empty, takes each chunk with `COPY ... FROM STDIN (FORMAT binary)` and sets the
//! counter at the end, so a failed copy leaves nothing behind. Only this module turns
//! PostgreSQL's idempotency rows into the store's `IdempotencyRecord` and back.

use std::time::Duration;

use bytes::Bytes;
use deadpool_postgres::ClientWrapper;
use tokio::sync::mpsc;
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::types::{ToSql, Type};

use super::errors::pg_error;
use super::handle::PgStore;
use super::rows::status_code;
use crate::store::model::{
    Chunk, Exporting, IdempotencyRecord, NextIds, SHORT_DIGEST, StoreError, StoredPet, pet_status,
};

/// The bound on each statement of a copy, in place of the short one requests get: a chunk or
/// the final commit may take longer than a request, but never this long.
const STATEMENT_TIMEOUT: &str = "SET LOCAL statement_timeout = '1min'";
/// The bound on each step as the client waits for it, should the connection stop answering
/// without closing.
const STEP_WITHIN: Duration = Duration::from_secs(90);

const SELECT_PETS: &str = "SELECT id, revision, json FROM pets WHERE id > $1 ORDER BY id LIMIT $2";
const SELECT_RECORDS: &str = "SELECT scope, fingerprint, expires_at, pet_id FROM idempotency
     WHERE expires_at > $1 AND scope > $2 ORDER BY scope LIMIT $3";
const COPY_PETS: &str = "COPY pets (id, status, revision, json) FROM STDIN (FORMAT binary)";
const PET_TYPES: [Type; 4] = [Type::INT8, Type::INT2, Type::INT8, Type::TEXT];
const COPY_RECORDS: &str =
    "COPY idempotency (scope, fingerprint, expires_at, pet_id) FROM STDIN (FORMAT binary)";
const RECORD_TYPES: [Type; 4] = [Type::BYTEA, Type::BYTEA, Type::INT8, Type::INT8];

impl PgStore {
    /// Starts streaming the store into `sender` from one snapshot; returns its id counter.
    /// See `Store::export`.
    pub(in crate::store) async fn export(&self, to: Exporting) -> Result<NextIds, StoreError> {
        let (chunk, now, sender) = (to.chunk, to.now, to.into);
        let client = self.own_connection().await?;
        let next_id = within(async {
            client
                .batch_execute(&format!(
                    "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; {STATEMENT_TIMEOUT}"
                ))
                .await
                .map_err(pg_error)?;
            let row = client
                .query_one(
                    "SELECT value FROM petstore_meta WHERE name = 'next_id'",
                    &[],
                )
                .await
                .map_err(pg_error)?;
            Ok(row.get::<_, i64>(0))
        })
        .await?;
        tokio::spawn(async move {
            if let Err(e) = stream(&client, chunk, now, &sender).await {
                let _ = sender.send(Err(e)).await;
            }
        });
        Ok(NextIds {
            pets: counter(next_id),
            orders: 1,
            categories: 1,
        })
    }

    /// Starts the import's transaction: locks the counter row (so creates elsewhere wait for
    /// the commit) and checks that the store is empty. See `Store::import`.
    pub(in crate::store) async fn import(&self) -> Result<PgImport, StoreError> {
        let client = self.own_connection().await?;
        within(async {
            client
                .batch_execute(&format!("BEGIN; {STATEMENT_TIMEOUT}"))
                .await
                .map_err(pg_error)?;
            let next_id = client
                .query_one(
                    "SELECT value FROM petstore_meta WHERE name = 'next_id' FOR UPDATE",
                    &[],
                )
                .await
                .map_err(pg_error)?
                .get::<_, i64>(0);
            let counts = client
                .query_one(
                    "SELECT (SELECT count(*) FROM pets), (SELECT count(*) FROM idempotency)",
                    &[],
                )
                .await
                .map_err(pg_error)?;
            let (pets, records) = (counts.get::<_, i64>(0), counts.get::<_, i64>(1));
            if pets > 0 || records > 0 || next_id != 1 {
                return Err(StoreError::NotEmpty {
                    pets: counter(pets),
                    records: counter(records),
                    next_id: counter(next_id),
                });
            }
            Ok(())
        })
        .await?;
        Ok(PgImport { client })
    }

    /// A connection of the copy's own, out of the pool.
    async fn own_connection(&self) -> Result<ClientWrapper, StoreError> {
        self.pool.take_own().await
    }
}

/// The import's transaction, open on its own connection; see `Import`.
pub(in crate::store) struct PgImport {
    client: ClientWrapper,
}

impl PgImport {
    /// Copies one chunk in with one `COPY` statement.
    pub(in crate::store) async fn write(&mut self, chunk: Chunk) -> Result<(), StoreError> {
        let client = &self.client;
        within(async move {
            match chunk {
                Chunk::Pets(pets) => {
                    let sink = client.copy_in(COPY_PETS).await.map_err(pg_error)?;
                    let writer = BinaryCopyInWriter::new(sink, &PET_TYPES);
                    let mut writer = std::pin::pin!(writer);
                    for pet in &pets {
                        let status = status_code(pet_status(pet)?);
                        let revision = i64::try_from(pet.revision).map_err(|_| {
                            StoreError::Corrupt(format!(
                                "pet {} has revision {}",
                                pet.id, pet.revision
                            ))
                        })?;
                        let json = text(&pet.json, pet.id)?;
                        let row: [&(dyn ToSql + Sync); 4] = [&pet.id, &status, &revision, &json];
                        writer.as_mut().write(&row).await.map_err(pg_error)?;
                    }
                    writer.as_mut().finish().await.map_err(pg_error)?;
                }
                Chunk::Records(records) => {
                    let sink = client.copy_in(COPY_RECORDS).await.map_err(pg_error)?;
                    let writer = BinaryCopyInWriter::new(sink, &RECORD_TYPES);
                    let mut writer = std::pin::pin!(writer);
                    for record in &records {
                        let expires_at = i64::try_from(record.expires_at).unwrap_or(i64::MAX);
                        let row: [&(dyn ToSql + Sync); 4] = [
                            &record.scope.as_slice(),
                            &record.fingerprint.as_slice(),
                            &expires_at,
                            &record.pet_id,
                        ];
                        writer.as_mut().write(&row).await.map_err(pg_error)?;
                    }
                    writer.as_mut().finish().await.map_err(pg_error)?;
                }
                Chunk::Categories(_) | Chunk::Orders(_) => {
                    return Err(StoreError::Unsupported(
                        "orders and categories on PostgreSQL".into(),
                    ));
                }
            }
            Ok(())
        })
        .await
    }

    /// Sets the counter and commits everything at once.
    pub(in crate::store) async fn commit(self, next: NextIds) -> Result<(), StoreError> {
        let next_id = next.pets;
        let next_id = i64::try_from(next_id).map_err(|_| {
            StoreError::Corrupt(format!(
                "the next id {next_id} is beyond what PostgreSQL's counter holds"
            ))
        })?;
        within(async {
            self.client
                .execute(
                    "UPDATE petstore_meta SET value = $1 WHERE name = 'next_id'",
                    &[&next_id],
                )
                .await
                .map_err(pg_error)?;
            self.client.batch_execute("COMMIT").await.map_err(pg_error)
        })
        .await
    }

    /// Rolls the transaction back; should that fail, closing the connection does it.
    pub(in crate::store) async fn abort(self) -> Result<(), StoreError> {
        within(async {
            self.client
                .batch_execute("ROLLBACK")
                .await
                .map_err(pg_error)
        })
        .await
    }
}

/// Sends every pet, then every record live at `now`, in chunks, then ends the read-only
/// transaction; returns early, without an error, when the receiver has gone.
async fn stream(
    client: &ClientWrapper,
    chunk: usize,
    now: u64,
    sender: &mpsc::Sender<Result<Chunk, StoreError>>,
) -> Result<(), StoreError> {
    let limit = i64::try_from(chunk).unwrap_or(i64::MAX);
    let statement = within(async { client.prepare(SELECT_PETS).await.map_err(pg_error) }).await?;
    let mut after = i64::MIN;
    loop {
        let rows = within(async {
            client
                .query(&statement, &[&after, &limit])
                .await
                .map_err(pg_error)
        })
        .await?;
        let Some(last) = rows.last() else { break };
        after = last.get(0);
        let full = rows.len() == chunk;
        let pets = rows
            .into_iter()
            .map(|row| StoredPet {
                id: row.get(0),
                revision: counter(row.get(1)),
                json: Bytes::from(row.get::<_, String>(2)),
            })
            .collect();
        if sender.send(Ok(Chunk::Pets(pets))).await.is_err() {
            return Ok(());
        }
        if !full {
            break;
        }
    }
    let statement =
        within(async { client.prepare(SELECT_RECORDS).await.map_err(pg_error) }).await?;
    let now = i64::try_from(now).unwrap_or(i64::MAX);
    let mut after: Vec<u8> = Vec::new();
    loop {
        let rows = within(async {
            client
                .query(&statement, &[&now, &after.as_slice(), &limit])
                .await
                .map_err(pg_error)
        })
        .await?;
        let full = rows.len() == chunk;
        let records = rows
            .iter()
            .map(export_record)
            .collect::<Result<Vec<_>, _>>()?;
        let Some(last) = records.last() else { break };
        after = last.scope.to_vec();
        if sender.send(Ok(Chunk::Records(records))).await.is_err() {
            return Ok(());
        }
        if !full {
            break;
        }
    }
    within(async { client.batch_execute("COMMIT").await.map_err(pg_error) }).await
}

/// An `idempotency` row (scope, fingerprint, expires_at, pet_id) as the store's record.
fn export_record(row: &tokio_postgres::Row) -> Result<IdempotencyRecord, StoreError> {
    let digest = |index: usize| -> Result<[u8; SHORT_DIGEST], StoreError> {
        row.get::<_, &[u8]>(index).try_into().map_err(|_| {
            StoreError::Corrupt("an idempotency record's digest is not 16 bytes".into())
        })
    };
    Ok(IdempotencyRecord {
        scope: digest(0)?,
        fingerprint: digest(1)?,
        expires_at: counter(row.get(2)),
        pet_id: row.get(3),
    })
}

/// A stored JSON object as the `text` PostgreSQL keeps it.
fn text(json: &[u8], id: i64) -> Result<&str, StoreError> {
    std::str::from_utf8(json)
        .map_err(|e| StoreError::Corrupt(format!("pet {id}'s JSON is not UTF-8: {e}")))
}

/// A count or counter PostgreSQL keeps as `bigint`, never negative.
fn counter(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

/// `step`, or `Io` once the database has not answered it for `STEP_WITHIN`.
async fn within<T>(step: impl Future<Output = Result<T, StoreError>>) -> Result<T, StoreError> {
    tokio::time::timeout(STEP_WITHIN, step)
        .await
        .unwrap_or_else(|_| {
            Err(StoreError::Io(format!(
                "no answer from the database within {} s",
                STEP_WITHIN.as_secs()
            )))
        })
}
