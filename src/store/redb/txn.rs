//! The transaction interface (`store/txn.rs`) on the redb file: a batch's `Run` reads and
//! writes the declared tables through `indexes::Open`, which keeps each record's index entries
//! as its declaration says (`store/resource.rs`), and with them a pet's `REVISIONS` entry, the
//! inventory and the id counters. Every call does its work at once: redb
//! blocks, and the writer's thread is the place for it. Invariant: an entry of an index is
//! written or removed exactly when its record's declared entry appears, changes or goes.

use bytes::Bytes;
use redb::ReadableTable;

use super::idempotency;
use super::tables::holding_order;
use super::writer::Run;
use crate::category::CategoryId;
use crate::order::OrderId;
use crate::pet::{Pet, PetId};
use crate::store::claims::IdempotencyKey;
use crate::store::claims::Keyed;
use crate::store::model::{Record, StoreError, StoredPet, record_id};
use crate::store::ops::categories::CATEGORY_NAMES;
use crate::store::ops::orders::{HOLD_ENDS, ORDERS_BY_PET};
use crate::store::ops::pets::PETS_BY_CATEGORY;
use crate::store::resource::Counter;
use crate::store::resource::{Part, Resource};
use crate::store::txn::{Ledger, Txn, next_revision};
use crate::store::write::PURGE_BATCH;
use crate::subject::Subject;

impl Txn for Run<'_> {
    fn ledger(&mut self) -> &mut Ledger {
        &mut self.ledger
    }

    async fn pet(&mut self, id: PetId) -> Result<Option<(Pet, u64)>, StoreError> {
        let Some(pet) = self.open.get::<Pet>(id)? else {
            return Ok(None);
        };
        // A pet not in `REVISIONS` is at revision 1: a create writes nothing there.
        let revision = self
            .tables
            .revisions
            .get(id)
            .map_err(StoreError::storage)?
            .map_or(1, |r| r.value());
        Ok(Some((pet, revision)))
    }

    async fn put_pet(
        &mut self,
        old: Option<(&Pet, u64)>,
        new: &Pet,
    ) -> Result<StoredPet, StoreError> {
        let (old, revision) = (old.map(|(old, _)| old), next_revision(old));
        let id = new.id;
        let json = Bytes::from(new.encode());
        self.open.put(old, new, &json)?;
        self.inventory
            .moved(old.map(|old| old.status), Some(new.status));
        if old.is_some() {
            self.tables.revisions.insert(id, revision)?;
        }
        Ok(StoredPet { id, revision, json })
    }

    async fn remove_pet(&mut self, old: &Pet) -> Result<(), StoreError> {
        self.open.remove(old)?;
        self.tables.revisions.remove(old.id)?;
        self.inventory.moved(Some(old.status), None);
        Ok(())
    }

    async fn holding_order(&mut self, pet: PetId) -> Result<Option<OrderId>, StoreError> {
        holding_order(&**self.open.index(&ORDERS_BY_PET)?, pet)
    }

    async fn get<R: Resource + Send>(&mut self, id: i64) -> Result<Option<R>, StoreError> {
        self.open.get(id)
    }

    async fn put<R: Resource + Sync>(
        &mut self,
        old: Option<&R>,
        new: &R,
    ) -> Result<(), StoreError> {
        self.open.put(old, new, &new.encode())
    }

    async fn remove<R: Resource + Sync>(&mut self, old: &R) -> Result<(), StoreError> {
        self.open.remove(old)
    }

    async fn ended_holds(&mut self, at_ms: u64) -> Result<Vec<OrderId>, StoreError> {
        let table = self.open.index(&HOLD_ENDS)?;
        let last = HOLD_ENDS.entry(
            i64::MAX,
            &[Part::Time(at_ms)],
            crate::store::resource::Value::Nothing,
        );
        let mut ended = Vec::new();
        for entry in table
            .range(..=last.key.as_slice())
            .map_err(StoreError::storage)?
            .take(PURGE_BATCH)
        {
            let key = entry.map_err(StoreError::storage)?.0;
            ended.push(crate::store::resource::owner_of(key.value())?);
        }
        Ok(ended)
    }

    async fn category_named(&mut self, key: &str) -> Result<Option<CategoryId>, StoreError> {
        // A unique index's key is its parts alone; its value, the holder's id.
        let name = CATEGORY_NAMES.prefix(&[Part::Text(key.into())]);
        let table = self.open.index(&CATEGORY_NAMES)?;
        let Some(holder) = table.get(name.as_slice()).map_err(StoreError::storage)? else {
            return Ok(None);
        };
        let entry = CATEGORY_NAMES.read(&name, holder.value());
        let entry = entry
            .ok_or_else(|| StoreError::Corrupt(format!("category name {key:?} names no id")))?;
        Ok(Some(entry.owner))
    }

    async fn category_in_use(&mut self, id: CategoryId) -> Result<bool, StoreError> {
        for code in crate::store::ops::pets::STATUS_CODES {
            let parts = [Part::Int(id), Part::Code(code)];
            if !self
                .open
                .scan(&PETS_BY_CATEGORY, &parts, i64::MIN, 1)?
                .is_empty()
            {
                return Ok(true);
            }
        }
        Ok(false)
    }

    async fn next_id(&mut self, counter: Counter) -> Result<Result<i64, StoreError>, StoreError> {
        let next = if counter == Pet::COUNTER {
            self.next_id
        } else {
            *self.counter(counter)?
        };
        Ok(i64::try_from(next).map_err(|_| StoreError::IdsExhausted))
    }

    fn take_id(&mut self, counter: Counter) {
        if counter == Pet::COUNTER {
            self.next_id += 1;
        // Read by `next_id` first, so the counter is there to move.
        } else if let Some((_, next)) = self.counters.iter_mut().find(|(c, _)| *c == counter) {
            *next += 1;
        }
    }

    async fn record(&mut self, key: &IdempotencyKey) -> Result<Option<Record>, StoreError> {
        Ok(idempotency::record(self.index, self.changes, key))
    }

    async fn claim_record(
        &mut self,
        keyed: &Keyed,
        subject: Subject,
    ) -> Result<Option<Record>, StoreError> {
        let held = idempotency::record(self.index, self.changes, &keyed.key);
        if let Some(held) = held
            && held.expires_at > self.ledger.now
        {
            return Ok(Some(held));
        }
        let id = record_id(subject)?;
        idempotency::insert(&mut self.tables.records, self.changes, keyed, id)?;
        Ok(None)
    }
}
