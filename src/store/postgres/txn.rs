//! The transaction interface (`store/txn.rs`) on PostgreSQL: each call one statement in the
//! batch's transaction, on rows `batch.rs` locked before any rule ran (`lock_rows`), so what a
//! rule reads stays true to the commit. The pets a batch creates are gathered and inserted by
//! one statement (`flush`), before any statement that could see them; the inventory and the
//! order and category counters move once, at the batch's end (`Tally`). A pet's sort key and
//! its rows of `pet_words` change in the statement that changes the pet, under its row's lock.
//! The tables stay plain tables, with their columns beside each record's JSON, for the shop's
//! other tools.

use bytes::Bytes;

use super::errors::pg_error;
use tokio_postgres::types::ToSql;

use super::rows::{
    INVENTORY_COUNTERS, READ_RECORD, Words, record_in, record_of, revision, select_one, status_code,
};
use crate::category::CategoryId;
use crate::order::OrderId;
use crate::pet::{Pet, PetId};
use crate::search;
use crate::store::claims::{IdempotencyKey, Keyed};
use crate::store::model::{
    InventoryDelta, Record, StoreError, StoredPet, read_pet, record_id, short,
};
use crate::store::resource::{Column, Counter, Resource};
use crate::store::txn::{Ledger, Txn, next_revision};
use crate::subject::{Kind, Subject};

/// The transaction a batch runs in.
pub(super) type Transaction<'a> = deadpool_postgres::Transaction<'a>;

/// What `lock_rows` (`batch.rs`) hands the writes: the first pet id the batch's creates take,
/// the orders each `Expire` of the batch took, in batch order, and every order and pet row it
/// locked, in id order.
pub(super) struct Locked {
    pub(super) next_id: PetId,
    pub(super) expiring: Vec<Vec<OrderId>>,
    pub(super) orders: Vec<OrderId>,
    pub(super) pets: Vec<PetId>,
}

/// What a batch's writes gather as they run, written once at its end: how the inventory moves
/// (by each pet's real status before and after), and the order and category ids given out.
#[derive(Default)]
pub(super) struct Tally {
    pub(super) inventory: InventoryDelta,
    /// The counters other than the pets' that the batch locked (`lock_rows`).
    pub(super) counters: Vec<CounterRow>,
}

impl Tally {
    /// Writes the counters the batch moved: the id counters it advanced (their rows locked
    /// since `lock_rows`), then the inventory's.
    pub(super) async fn write(&self, txn: &Transaction<'_>) -> Result<(), StoreError> {
        let (mut names, mut values) = (Vec::new(), Vec::new());
        for counter in &self.counters {
            if counter.next != counter.read {
                names.push(counter.counter.key());
                values.push(counter.next);
            }
        }
        if !names.is_empty() {
            txn.execute(
                "UPDATE petstore_meta SET value = new.value
                 FROM UNNEST($1::text[], $2::bigint[]) AS new(name, value)
                 WHERE petstore_meta.name = new.name",
                &[&names, &values],
            )
            .await
            .map_err(pg_error)?;
        }
        move_inventory(txn, &self.inventory).await
    }
}

/// An id counter row of `petstore_meta`, locked for the rest of the transaction, and the ids
/// the batch gives from it: only the ids of writes that went ahead, so none is skipped.
pub(super) struct CounterRow {
    counter: Counter,
    read: i64,
    next: i64,
}

impl CounterRow {
    /// Locks the row of `counter` to the commit: every other transaction giving ids from it,
    /// in any instance, waits, so ids increase in commit order.
    pub(super) async fn lock(
        txn: &Transaction<'_>,
        counter: Counter,
    ) -> Result<CounterRow, StoreError> {
        let row = txn
            .query_one(
                "SELECT value FROM petstore_meta WHERE name = $1 FOR UPDATE",
                &[&counter.key()],
            )
            .await
            .map_err(pg_error)?;
        let read = row.get(0);
        Ok(CounterRow {
            counter,
            read,
            next: read,
        })
    }

    /// The id the next write that goes ahead gets; `IdsExhausted` once the counter cannot
    /// move past it.
    pub(super) fn next(&self) -> Result<i64, StoreError> {
        match self.next.checked_add(1) {
            Some(_) => Ok(self.next),
            None => Err(StoreError::IdsExhausted),
        }
    }

    /// Gives out the id `next` answered: its write went ahead.
    pub(super) fn take(&mut self) {
        self.next = self.next.saturating_add(1);
    }
}

/// Moves the inventory's counters by `delta`, in one statement. The counter rows are locked in
/// name order first (every batch that moves them does so), since an UPDATE alone locks rows in
/// whatever order its scan finds them and two batches could then wait on each other.
async fn move_inventory(txn: &Transaction<'_>, delta: &InventoryDelta) -> Result<(), StoreError> {
    let (mut names, mut changes) = (Vec::new(), Vec::new());
    for ((name, _), (_, change)) in INVENTORY_COUNTERS.iter().zip(delta.each()) {
        if change != 0 {
            names.push(*name);
            changes.push(change);
        }
    }
    if names.is_empty() {
        return Ok(());
    }
    let statement = txn
        .prepare_cached(
            "WITH locked AS MATERIALIZED (
                 SELECT name FROM petstore_meta WHERE name = ANY($1) ORDER BY name FOR UPDATE)
             UPDATE petstore_meta SET value = value + change.delta
             FROM locked JOIN UNNEST($1::text[], $2::bigint[]) AS change(name, delta)
                 USING (name)
             WHERE petstore_meta.name = locked.name",
        )
        .await
        .map_err(pg_error)?;
    txn.execute(&statement, &[&names, &changes])
        .await
        .map_err(pg_error)?;
    Ok(())
}

/// A batch's transaction as the rules see it.
pub(super) struct PgTxn<'t, 'c> {
    txn: &'t Transaction<'c>,
    pub(super) tally: Tally,
    /// Pets created and not inserted yet.
    new_pets: NewRows,
    /// The first of the pet ids `lock_rows` took for the batch's creates not given out yet.
    next_pet_id: PetId,
    /// The orders each `Expire` of the batch took in `lock_rows`, in batch order.
    expiring: std::vec::IntoIter<Vec<OrderId>>,
    /// Every order and pet row `lock_rows` locked, in id order: of the rows there before the
    /// batch, only these may change (`unlocked`).
    locked_orders: Vec<OrderId>,
    locked_pets: Vec<PetId>,
    /// The first id of the pets this batch creates: those are its own.
    first_new_pet: PetId,
    pub(super) ledger: Ledger,
}

/// The pets a batch creates and their words, inserted with one statement.
#[derive(Default)]
struct NewRows {
    ids: Vec<i64>,
    statuses: Vec<Option<i16>>,
    categories: Vec<i64>,
    jsons: Vec<String>,
    name_keys: Vec<String>,
    words: Words,
}

impl<'t, 'c> PgTxn<'t, 'c> {
    pub(super) fn new(
        txn: &'t Transaction<'c>,
        tally: Tally,
        locked: Locked,
        now: u64,
        now_ms: u64,
    ) -> PgTxn<'t, 'c> {
        PgTxn {
            txn,
            tally,
            new_pets: NewRows::default(),
            next_pet_id: locked.next_id,
            expiring: locked.expiring.into_iter(),
            locked_orders: locked.orders,
            locked_pets: locked.pets,
            first_new_pet: locked.next_id,
            ledger: Ledger {
                now,
                now_ms,
                changes: Vec::new(),
            },
        }
    }

    /// Inserts the pets created so far: before the batch ends, and before any statement that
    /// reads or changes pets that could be among them.
    pub(super) async fn flush(&mut self) -> Result<(), StoreError> {
        if self.new_pets.ids.is_empty() {
            return Ok(());
        }
        let rows = std::mem::take(&mut self.new_pets);
        let words = &rows.words;
        self.exec(
            "WITH made AS (
                 INSERT INTO pets (id, status, category_id, revision, json, name_key)
                 SELECT id, status, category_id, 1, json, name_key
                 FROM UNNEST($4::bigint[], $5::smallint[], $6::bigint[], $7::text[], $8::text[])
                     AS new(id, status, category_id, json, name_key))
             INSERT INTO pet_words (term, pet_id, name_key)
             SELECT * FROM UNNEST($1::text[], $2::bigint[], $3::text[])",
            &[
                &words.terms,
                &words.pets,
                &words.keys,
                &rows.ids,
                &rows.statuses,
                &rows.categories,
                &rows.jsons,
                &rows.name_keys,
            ],
        )
        .await?;
        Ok(())
    }

    /// `flush`, if pet `id` is among the pets not inserted yet.
    async fn flush_for(&mut self, id: PetId) -> Result<(), StoreError> {
        // Ids are given out in increasing order, so the pending ones are sorted.
        if self.new_pets.ids.binary_search(&id).is_ok() {
            self.flush().await?;
        }
        Ok(())
    }

    /// The row `sql` finds, if any, through the connection's cache of prepared statements.
    async fn row(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Option<tokio_postgres::Row>, StoreError> {
        let statement = self.txn.prepare_cached(sql).await.map_err(pg_error)?;
        self.txn
            .query_opt(&statement, params)
            .await
            .map_err(pg_error)
    }

    /// Runs `sql`, through the connection's cache of prepared statements; answers the rows
    /// it changed.
    async fn exec(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<u64, StoreError> {
        let statement = self.txn.prepare_cached(sql).await.map_err(pg_error)?;
        self.txn.execute(&statement, params).await.map_err(pg_error)
    }

    /// Refuses to change `subject` unless `lock_rows` locked it (or the batch made it). A row
    /// that was not there when the locks were taken (made by another instance since) is not
    /// locked, nor are the rows it names: changed now, a concurrent change of it could commit
    /// too and one of the two be lost. The batch runs again instead, and locks it first.
    fn locked(&self, subject: Subject) -> Result<(), StoreError> {
        let held = match subject.kind {
            Kind::Order => self.locked_orders.binary_search(&subject.id).is_ok(),
            Kind::Pet => {
                subject.id >= self.first_new_pet && self.first_new_pet > 0
                    || self.locked_pets.binary_search(&subject.id).is_ok()
            }
            // Every other kind changes under its counter's lock, which each of its writes
            // takes (`Touches::count`), as categories do: one transaction at a time.
            _ => true,
        };
        if held {
            return Ok(());
        }
        Err(StoreError::Contended(format!(
            "{subject} was made after this transaction took its locks"
        )))
    }

    fn counter(&mut self, counter: Counter) -> Result<&mut CounterRow, StoreError> {
        let mut locked = self.tally.counters.iter_mut();
        locked.find(|row| row.counter == counter).ok_or_else(|| {
            StoreError::Corrupt(format!(
                "an id of {counter:?} was asked for without its lock"
            ))
        })
    }
}

/// What a rename does to a pet's rows of `pet_words`: the terms of the old name that the new
/// one has not are deleted (`gone`); the terms of the new name the old one had not are put
/// (`put`), and all of them once the sort key changes, since every row keeps it. The two lists
/// never share a term.
struct Renamed {
    gone: Vec<String>,
    put: Vec<String>,
    /// The new name's sort key.
    key: String,
}

impl Renamed {
    fn new(old: &str, new: &str) -> Renamed {
        let (old_terms, new_terms) = (search::prefixes(old), search::prefixes(new));
        let key = search::sort_key(new);
        let moved = search::sort_key(old) != key;
        let gone = old_terms.iter().filter(|term| !new_terms.contains(term));
        let put = new_terms
            .iter()
            .filter(|term| moved || !old_terms.contains(term));
        Renamed {
            gone: gone.cloned().collect(),
            put: put.cloned().collect(),
            key,
        }
    }
}

/// A declared column's value as a statement's parameter.
pub(super) fn sql_value(column: &Column) -> &(dyn ToSql + Sync) {
    match column {
        Column::Int(value) => value,
        Column::Code(value) => value,
        Column::Text(value) => value,
    }
}

/// A pet's JSON as the `text` column keeps it.
fn json_text(pet: &Pet) -> Result<String, StoreError> {
    String::from_utf8(pet.to_json())
        .map_err(|e| StoreError::Corrupt(format!("a pet's JSON is not UTF-8: {e}")))
}

impl Txn for PgTxn<'_, '_> {
    fn ledger(&mut self) -> &mut Ledger {
        &mut self.ledger
    }

    async fn pet(&mut self, id: PetId) -> Result<Option<(Pet, u64)>, StoreError> {
        self.flush_for(id).await?;
        let Some(row) = self
            .row("SELECT revision, json FROM pets WHERE id = $1", &[&id])
            .await?
        else {
            return Ok(None);
        };
        let pet = read_pet(id, row.get::<_, &str>(1).as_bytes())?;
        Ok(Some((pet, revision(row.get(0)))))
    }

    async fn put_pet(
        &mut self,
        old: Option<(&Pet, u64)>,
        new: &Pet,
    ) -> Result<StoredPet, StoreError> {
        let json = json_text(new)?;
        let (old, revision) = (old.map(|(old, _)| old), next_revision(old));
        self.tally
            .inventory
            .moved(old.map(|old| old.status), Some(new.status));
        let Some(old) = old else {
            let rows = &mut self.new_pets;
            let key = rows.words.add(new.id, &new.name);
            rows.ids.push(new.id);
            rows.statuses.push(status_code(new.status));
            rows.categories.push(new.category_id);
            rows.jsons.push(json.clone());
            rows.name_keys.push(key);
            return Ok(StoredPet {
                id: new.id,
                revision,
                json: Bytes::from(json),
            });
        };
        self.locked(Subject::pet(new.id))?;
        self.flush_for(new.id).await?;
        let stored_revision = i64::try_from(revision).unwrap_or(i64::MAX);
        let status = status_code(new.status);
        let params: [&(dyn ToSql + Sync); 5] =
            [&new.id, &status, &new.category_id, &stored_revision, &json];
        // Most changes keep the name (every order moves its pet's status): those leave the
        // words alone.
        if old.name == new.name {
            self.exec(
                "UPDATE pets SET status = $2, category_id = $3, revision = $4, json = $5
                     WHERE id = $1",
                &params,
            )
            .await?;
        } else {
            let renamed = Renamed::new(&old.name, &new.name);
            let mut params = params.to_vec();
            params.extend([
                &renamed.gone as &(dyn ToSql + Sync),
                &renamed.key,
                &renamed.put,
            ]);
            // The rows deleted and those put are apart (`Renamed`), so one statement can do
            // both: no row is changed twice.
            self.exec(
                "WITH gone AS (DELETE FROM pet_words WHERE term = ANY($6) AND pet_id = $1),
                     put AS (
                         INSERT INTO pet_words (term, pet_id, name_key)
                         SELECT term, $1, $7 FROM UNNEST($8::text[]) AS new(term)
                         ON CONFLICT (term, pet_id) DO UPDATE SET name_key = EXCLUDED.name_key)
                 UPDATE pets SET status = $2, category_id = $3, revision = $4, json = $5,
                     name_key = $7
                 WHERE id = $1",
                &params,
            )
            .await?;
        }
        Ok(StoredPet {
            id: new.id,
            revision,
            json: Bytes::from(json),
        })
    }

    async fn remove_pet(&mut self, old: &Pet) -> Result<(), StoreError> {
        self.locked(Subject::pet(old.id))?;
        self.flush_for(old.id).await?;
        // Its words are those of the name it has (`put_pet` keeps them so): found by the
        // primary key, with no index by pet to keep on every create.
        self.exec(
            "WITH gone AS (DELETE FROM pet_words WHERE term = ANY($2) AND pet_id = $1)
             DELETE FROM pets WHERE id = $1",
            &[&old.id, &search::prefixes(&old.name)],
        )
        .await?;
        self.tally.inventory.moved(Some(old.status), None);
        Ok(())
    }

    async fn holding_order(&mut self, pet: PetId) -> Result<Option<OrderId>, StoreError> {
        // The pet's row is locked, and every write that places or ends an order locks its pet
        // too, so the answer stays true to the commit.
        let row = self
            .row(
                "SELECT id FROM orders WHERE pet_id = $1 AND status = 1",
                &[&pet],
            )
            .await?;
        Ok(row.map(|row| row.get(0)))
    }

    async fn get<R: Resource + Send>(&mut self, id: i64) -> Result<Option<R>, StoreError> {
        let row = self.row(&select_one::<R>(), &[&id]).await?;
        row.map(|row| record_in(id, &row, 0)).transpose()
    }

    async fn put<R: Resource + Sync>(
        &mut self,
        old: Option<&R>,
        new: &R,
    ) -> Result<(), StoreError> {
        let (id, columns) = (new.id(), new.columns());
        if R::KIND == Kind::Order {
            match old {
                Some(_) => self.locked(Subject::order(id))?,
                // Made by this batch, so its own to change.
                None => {
                    let at = self.locked_orders.partition_point(|&locked| locked < id);
                    self.locked_orders.insert(at, id);
                }
            }
        }
        let names = R::POSTGRES.columns;
        let sql = match old {
            None => {
                let numbers = (2..=names.len() + 1).map(|n| format!("${n}"));
                format!(
                    "INSERT INTO {} (id, {}) VALUES ($1, {})",
                    R::TABLE,
                    names.join(", "),
                    numbers.collect::<Vec<_>>().join(", ")
                )
            }
            Some(_) => {
                let set = names
                    .iter()
                    .enumerate()
                    .map(|(n, name)| format!("{name} = ${}", n + 2));
                let set = set.collect::<Vec<_>>().join(", ");
                format!("UPDATE {} SET {set} WHERE id = $1", R::TABLE)
            }
        };
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![&id];
        params.extend(columns.iter().map(sql_value));
        self.exec(&sql, &params).await?;
        Ok(())
    }

    async fn remove<R: Resource + Sync>(&mut self, old: &R) -> Result<(), StoreError> {
        let sql = format!("DELETE FROM {} WHERE id = $1", R::TABLE);
        self.exec(&sql, &[&old.id()]).await?;
        Ok(())
    }

    async fn ended_holds(&mut self, _at_ms: u64) -> Result<Vec<OrderId>, StoreError> {
        // Taken and locked by `lock_rows` (SKIP LOCKED), each `Expire` its own, in batch order.
        Ok(self.expiring.next().unwrap_or_default())
    }

    async fn category_named(&mut self, key: &str) -> Result<Option<CategoryId>, StoreError> {
        // Every category write holds `next_category_id` (`lock_rows`): names change one
        // transaction at a time, so the answer cannot race a concurrent rename.
        let row = self
            .row("SELECT id FROM categories WHERE name_key = $1", &[&key])
            .await?;
        Ok(row.map(|row| row.get(0)))
    }

    async fn category_in_use(&mut self, id: CategoryId) -> Result<bool, StoreError> {
        self.flush().await?;
        let row = self
            .txn
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM pets WHERE category_id = $1)",
                &[&id],
            )
            .await
            .map_err(pg_error)?;
        Ok(row.get(0))
    }

    async fn next_id(&mut self, counter: Counter) -> Result<Result<i64, StoreError>, StoreError> {
        if counter == Pet::COUNTER {
            return Ok(Ok(self.next_pet_id));
        }
        Ok(self.counter(counter)?.next())
    }

    fn take_id(&mut self, counter: Counter) {
        if counter == Pet::COUNTER {
            self.next_pet_id = self.next_pet_id.saturating_add(1);
        } else if let Ok(locked) = self.counter(counter) {
            locked.take();
        }
    }

    async fn record(&mut self, key: &IdempotencyKey) -> Result<Option<Record>, StoreError> {
        let scope = short(key.scope());
        let row = self.row(READ_RECORD, &[&scope.as_slice()]).await?;
        row.map(|row| record_of(&row)).transpose()
    }

    async fn claim_record(
        &mut self,
        keyed: &Keyed,
        subject: Subject,
    ) -> Result<Option<Record>, StoreError> {
        let id = record_id(subject)?;
        let expires_at = i64::try_from(keyed.expires_at).unwrap_or(i64::MAX);
        // Another instance's write with the same key makes this wait for its commit, and then
        // its record answers; an id taken for this write is then left unused, a gap that
        // costs nothing.
        let taken = self
            .txn
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
                    &i64::try_from(self.ledger.now).unwrap_or(i64::MAX),
                ],
            )
            .await
            .map_err(pg_error)?;
        if taken.is_some() {
            return Ok(None);
        }
        match self.record(&keyed.key).await? {
            Some(held) => Ok(Some(held)),
            None => Err(StoreError::Corrupt(
                "an idempotency record refused a claim and is missing".into(),
            )),
        }
    }
}

/// `PLACED` is the code the statements here and in `batch.rs` write as the literal 1.
const _: () = assert!(super::rows::PLACED == 1);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rename_deletes_the_terms_it_loses_and_puts_those_it_gains_or_all_once_the_key_moves() {
        let sorted = |mut terms: Vec<String>| {
            terms.sort();
            terms
        };
        let renamed = Renamed::new("Bella Max", "Bella Mo");
        assert_eq!(sorted(renamed.gone), ["ma", "max"]);
        assert_eq!(
            sorted(renamed.put),
            ["b", "be", "bel", "bell", "bella", "m", "mo"]
        );
        assert_eq!(renamed.key, "bella mo");
        // Another spelling of the same name keeps every row.
        let respelled = Renamed::new("Zoë", "ZOE!");
        assert!(respelled.gone.is_empty() && respelled.put.is_empty());
    }
}
