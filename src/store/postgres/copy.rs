//! Copying a PostgreSQL store out and in, for `petstore copy`. Each side has a connection of
//! its own, taken out of the pool so that it never goes back to it mid-transaction (dropping it
//! closes it, and PostgreSQL rolls back). The export reads one REPEATABLE READ snapshot in
//! id-ordered chunks (pets, records, categories, orders) and the three id counters; the import
//! is one transaction that locks the id counter rows, checks that the store is empty, takes
//! each chunk with `COPY ... FROM STDIN (FORMAT binary)` (a chunk of pets with their words,
//! `pet_words`) and at the end sets the counters and counts the inventory from the pets, so a
//! failed copy leaves nothing behind. Only this module
//! turns PostgreSQL's idempotency rows into the store's `IdempotencyRecord` and back.

use std::time::Duration;

use bytes::Bytes;
use deadpool_postgres::ClientWrapper;
use tokio::sync::mpsc;
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::types::{ToSql, Type};

use super::errors::pg_error;
use super::handle::PgStore;
use super::rows::{RECOUNT_INVENTORY, Words, select_after, status_code};
use super::txn::sql_value;
use crate::store::model::read_pet;
use crate::store::model::{
    Chunk, Exporting, IdempotencyRecord, Rows, SHORT_DIGEST, StoreError, StoredPet,
};
use crate::store::ops::each_resource;
use crate::store::ops::{COUNTERS, kinds};
use crate::store::resource::{Column, ForEach, NextIds, Resource, WithRecords};
use crate::subject::Kind;

/// The bound on each statement of a copy, in place of the short one requests get: a chunk or
/// the final commit may take longer than a request, but never this long.
const STATEMENT_TIMEOUT: &str = "SET LOCAL statement_timeout = '1min'";
/// The bound on each step as the client waits for it, should the connection stop answering
/// without closing.
const STEP_WITHIN: Duration = Duration::from_secs(90);

const SELECT_PETS: &str = "SELECT id, revision, json FROM pets WHERE id > $1 ORDER BY id LIMIT $2";
const SELECT_RECORDS: &str = "SELECT scope, fingerprint, expires_at, pet_id FROM idempotency
     WHERE expires_at > $1 AND scope > $2 ORDER BY scope LIMIT $3";
const COPY_PETS: &str =
    "COPY pets (id, status, category_id, revision, json, name_key) FROM STDIN (FORMAT binary)";
const PET_TYPES: [Type; 6] = [
    Type::INT8,
    Type::INT2,
    Type::INT8,
    Type::INT8,
    Type::TEXT,
    Type::TEXT,
];
const COPY_WORDS: &str = "COPY pet_words (term, pet_id, name_key) FROM STDIN (FORMAT binary)";
const WORD_TYPES: [Type; 3] = [Type::TEXT, Type::INT8, Type::TEXT];
const COPY_RECORDS: &str =
    "COPY idempotency (scope, fingerprint, expires_at, pet_id) FROM STDIN (FORMAT binary)";
const RECORD_TYPES: [Type; 4] = [Type::BYTEA, Type::BYTEA, Type::INT8, Type::INT8];
/// The id counters' rows, read by the export and locked by the import in the order every
/// writing transaction locks them (`ops::COUNTERS`).
fn id_counters() -> String {
    let names = COUNTERS
        .map(|counter| format!("'{}'", counter.key()))
        .join(", ");
    format!(
        "SELECT name, value FROM petstore_meta WHERE name IN ({names})
         ORDER BY array_position(ARRAY[{names}], name)"
    )
}

impl PgStore {
    /// Starts streaming the store into `sender` from one snapshot; returns its id counters,
    /// read in the same snapshot. See `Store::export`.
    pub(in crate::store) async fn export(&self, to: Exporting) -> Result<NextIds, StoreError> {
        let (chunk, now, sender) = (to.chunk, to.now, to.into);
        let client = self.own_connection().await?;
        let next_ids = within(async {
            client
                .batch_execute(&format!(
                    "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; {STATEMENT_TIMEOUT}"
                ))
                .await
                .map_err(pg_error)?;
            let rows = client.query(&id_counters(), &[]).await.map_err(pg_error)?;
            next_ids(&rows)
        })
        .await?;
        tokio::spawn(async move {
            if let Err(e) = stream(&client, chunk, now, &sender).await {
                let _ = sender.send(Err(e)).await;
            }
        });
        Ok(next_ids)
    }

    /// Starts the import's transaction: locks the id counter rows (so creates elsewhere wait
    /// for the commit) and checks that the store is empty: no pet, record, category or order,
    /// no id given out. See `Store::import`.
    pub(in crate::store) async fn import(&self) -> Result<PgImport, StoreError> {
        let client = self.own_connection().await?;
        within(async {
            client
                .batch_execute(&format!("BEGIN; {STATEMENT_TIMEOUT}"))
                .await
                .map_err(pg_error)?;
            let rows = client
                .query(&format!("{} FOR UPDATE", id_counters()), &[])
                .await
                .map_err(pg_error)?;
            let next = next_ids(&rows)?;
            // Pets, then idempotency records, then every other resource's table.
            let tables = kinds().into_iter();
            let tables = tables.filter(|(kind, ..)| *kind != Kind::Pet);
            let others = tables.map(|(.., table)| format!(", (SELECT count(*) FROM {table})"));
            let counts = client
                .query_one(
                    &format!(
                        "SELECT (SELECT count(*) FROM pets), (SELECT count(*) FROM idempotency){}",
                        others.collect::<String>()
                    ),
                    &[],
                )
                .await
                .map_err(pg_error)?;
            let counts: Vec<i64> = (0..counts.len()).map(|n| counts.get(n)).collect();
            let given = COUNTERS.iter().any(|counter| next.of(*counter) > 1);
            if counts.iter().any(|count| *count > 0) || given {
                // `NotEmpty` names pets, records and the pet counter; a store with only
                // another resource's records (or their ids given) is refused under the same
                // name.
                return Err(StoreError::NotEmpty {
                    pets: counter_value(counts[0]),
                    records: counter_value(counts[1]),
                    next_id: next.pets(),
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
                    let mut words = Words::default();
                    for pet in &pets {
                        let read = read_pet(pet.id, &pet.json)?;
                        let status = status_code(read.status);
                        let revision = i64::try_from(pet.revision).map_err(|_| {
                            StoreError::Corrupt(format!(
                                "pet {} has revision {}",
                                pet.id, pet.revision
                            ))
                        })?;
                        let json = text(&pet.json, pet.id)?;
                        let key = words.add(pet.id, &read.name);
                        let row: [&(dyn ToSql + Sync); 6] =
                            [&pet.id, &status, &read.category_id, &revision, &json, &key];
                        writer.as_mut().write(&row).await.map_err(pg_error)?;
                    }
                    writer.as_mut().finish().await.map_err(pg_error)?;
                    let sink = client.copy_in(COPY_WORDS).await.map_err(pg_error)?;
                    let writer = BinaryCopyInWriter::new(sink, &WORD_TYPES);
                    let mut writer = std::pin::pin!(writer);
                    let rows = words.terms.iter().zip(&words.pets).zip(&words.keys);
                    for ((term, id), key) in rows {
                        let row: [&(dyn ToSql + Sync); 3] = [term, id, key];
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
                Chunk::Rows(rows) => copy_in(client, &rows).await?,
            }
            Ok(())
        })
        .await
    }

    /// Sets the id counters (those of orders and categories above every id imported, should
    /// `next` be behind), counts the inventory from the pets imported, and commits everything
    /// at once.
    pub(in crate::store) async fn commit(self, next: NextIds) -> Result<(), StoreError> {
        let beyond = |what: &str, value: u64| {
            i64::try_from(value).map_err(|_| {
                StoreError::Corrupt(format!(
                    "the next {what} id {value} is beyond what PostgreSQL's counter holds"
                ))
            })
        };
        within(async {
            for (kind, counter, table) in kinds() {
                let value = beyond(kind.name(), next.of(counter))?;
                // The pets' as given (`Import::commit` put it above every pet); the others
                // also above every id imported.
                let set = match kind {
                    Kind::Pet => "$2".to_owned(),
                    _ => format!("GREATEST($2, (SELECT COALESCE(max(id), 0) + 1 FROM {table}))"),
                };
                self.client
                    .execute(
                        &format!("UPDATE petstore_meta SET value = {set} WHERE name = $1"),
                        &[&counter.key(), &value],
                    )
                    .await
                    .map_err(pg_error)?;
            }
            self.client
                .execute(RECOUNT_INVENTORY, &[])
                .await
                .map_err(pg_error)?;
            self.client.batch_execute("COMMIT").await.map_err(pg_error)
        })
        .await
    }

    /// Rolls the transaction back, pets, records, categories and orders alike; should that
    /// fail, closing the connection does it.
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

/// Sends every pet, then every record live at `now`, then every category, then every order,
/// in chunks, then ends the read-only transaction; returns early, without an error, when the
/// receiver has gone.
async fn stream(
    client: &ClientWrapper,
    chunk: usize,
    now: u64,
    sender: &mpsc::Sender<Result<Chunk, StoreError>>,
) -> Result<(), StoreError> {
    let pets = by_id(client, SELECT_PETS, chunk, sender, |rows| {
        let pets = rows.iter().map(|row| StoredPet {
            id: row.get(0),
            revision: counter_value(row.get(1)),
            json: Bytes::from(row.get::<_, String>(2)),
        });
        Ok(Chunk::Pets(pets.collect()))
    });
    if !pets.await? {
        return Ok(());
    }
    let limit = i64::try_from(chunk).unwrap_or(i64::MAX);
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
    if !others_by_id(client, chunk, sender).await? {
        return Ok(());
    }
    within(async { client.batch_execute("COMMIT").await.map_err(pg_error) }).await
}

/// Records of one resource as `COPY` takes them: the statement, its columns' types and each
/// record's id and declared columns (`Resource::columns`).
struct CopyIn {
    sql: String,
    types: Vec<Type>,
    rows: Vec<(i64, Vec<Column>)>,
}

impl WithRecords for Option<CopyIn> {
    fn with<R: Resource>(&mut self, records: Vec<R>, _stored: &Rows) -> Result<(), StoreError> {
        let names = R::POSTGRES.columns.join(", ");
        let sql = format!("COPY {} (id, {names}) FROM STDIN (FORMAT binary)", R::TABLE);
        let rows: Vec<(i64, Vec<Column>)> = records.iter().map(|r| (r.id(), r.columns())).collect();
        // The columns' types, from the kind of each of the first record's values: every record
        // of a kind fills its columns with values of the same kinds.
        let mut types = vec![Type::INT8];
        if let Some((_, first)) = rows.first() {
            types.extend(first.iter().map(|column| match column {
                Column::Int(_) => Type::INT8,
                Column::Code(_) => Type::INT2,
                Column::Text(_) => Type::TEXT,
            }));
        }
        *self = Some(CopyIn { sql, types, rows });
        Ok(())
    }
}

/// Copies `rows` in with one `COPY` statement of their resource's declared columns.
async fn copy_in(client: &ClientWrapper, rows: &Rows) -> Result<(), StoreError> {
    let mut copy = None;
    rows.each(&mut copy)?;
    let Some(copy) = copy.filter(|copy| !copy.rows.is_empty()) else {
        return Ok(());
    };
    let sink = client.copy_in(&copy.sql).await.map_err(pg_error)?;
    let writer = BinaryCopyInWriter::new(sink, &copy.types);
    let mut writer = std::pin::pin!(writer);
    for (id, columns) in &copy.rows {
        let mut row: Vec<&(dyn ToSql + Sync)> = vec![id];
        row.extend(columns.iter().map(sql_value));
        writer.as_mut().write(&row).await.map_err(pg_error)?;
    }
    writer.as_mut().finish().await.map_err(pg_error)?;
    Ok(())
}

/// Sends every record of each resource but pets in chunks, as stored, a resource at a time;
/// `false` when the receiver has gone.
async fn others_by_id(
    client: &ClientWrapper,
    chunk: usize,
    sender: &mpsc::Sender<Result<Chunk, StoreError>>,
) -> Result<bool, StoreError> {
    struct Selects(Vec<(Kind, String)>);
    impl ForEach for Selects {
        fn visit<R: Resource>(&mut self) -> Result<(), StoreError> {
            if R::KIND != Kind::Pet {
                self.0.push((R::KIND, select_after::<R>()));
            }
            Ok(())
        }
    }
    let mut selects = Selects(Vec::new());
    each_resource(&mut selects)?;
    for (kind, select) in selects.0 {
        let sent = by_id(client, &select, chunk, sender, |rows| {
            let records = rows
                .iter()
                .map(|row| (row.get(0), row.get::<_, String>(1).into()));
            Ok(Chunk::Rows(Rows {
                kind,
                records: records.collect(),
            }))
        });
        if !sent.await? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Sends the rows of `select` (ids above `$1`, in id order, at most `$2`, the id first) in
/// chunks that `chunk_of` makes; `false` when the receiver has gone.
async fn by_id(
    client: &ClientWrapper,
    select: &str,
    chunk: usize,
    sender: &mpsc::Sender<Result<Chunk, StoreError>>,
    chunk_of: impl Fn(&[tokio_postgres::Row]) -> Result<Chunk, StoreError>,
) -> Result<bool, StoreError> {
    let limit = i64::try_from(chunk).unwrap_or(i64::MAX);
    let statement = within(async { client.prepare(select).await.map_err(pg_error) }).await?;
    let mut after = i64::MIN;
    loop {
        let rows = within(async {
            client
                .query(&statement, &[&after, &limit])
                .await
                .map_err(pg_error)
        })
        .await?;
        let Some(last) = rows.last() else {
            return Ok(true);
        };
        after = last.get(0);
        if sender.send(chunk_of(&rows)).await.is_err() {
            return Ok(false);
        }
        if rows.len() < chunk {
            return Ok(true);
        }
    }
}

/// The id counters from the rows of `id_counters()`: every one of them is kept.
fn next_ids(rows: &[tokio_postgres::Row]) -> Result<NextIds, StoreError> {
    let mut next = NextIds::untouched();
    for counter in COUNTERS {
        let row = rows
            .iter()
            .find(|row| row.get::<_, &str>(0) == counter.key());
        let row = row.ok_or_else(|| {
            StoreError::Corrupt(format!("the id counter {} is not kept", counter.key()))
        })?;
        next.set(counter, counter_value(row.get(1)));
    }
    Ok(next)
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
        expires_at: counter_value(row.get(2)),
        pet_id: row.get(3),
    })
}

/// A stored JSON object as the `text` PostgreSQL keeps it.
fn text(json: &[u8], id: i64) -> Result<&str, StoreError> {
    std::str::from_utf8(json)
        .map_err(|e| StoreError::Corrupt(format!("pet {id}'s JSON is not UTF-8: {e}")))
}

/// A count or counter PostgreSQL keeps as `bigint`, never negative.
fn counter_value(value: i64) -> u64 {
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
