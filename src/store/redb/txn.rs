//! The transaction interface (`store/txn.rs`) on the redb file: a batch's `Run` reads and
//! writes its tables, keeping each record's index entries as `redb/entries.rs` declares them
//! (moved from the old record's to the new one's by `entries::rewrite`), a pet's `REVISIONS`
//! entry, the inventory and the id counters with it. Every call does its work at once: redb
//! blocks, and the writer's thread is the place for it. Invariant: an entry of an index is
//! written or removed exactly when its record's declared entry appears, changes or goes.

use bytes::Bytes;
use redb::ReadableTable;

use super::entries::{self, rewrite};
use super::idempotency;
use super::sales::read_category;
use super::tables::{META_NEXT_CATEGORY_ID, META_NEXT_ORDER_ID, holding_order, read_order};
use super::writer::Run;
use crate::category::{Category, CategoryId};
use crate::order::{Order, OrderId};
use crate::pet::{Pet, PetId};
use crate::store::claims::IdempotencyKey;
use crate::store::model::{Record, StoreError, StoredPet, read_pet, record_id};
use crate::store::txn::{Counter, Ledger, Txn, next_revision};
use crate::store::write::{Keyed, PURGE_BATCH};
use crate::subject::Subject;

impl Txn for Run<'_> {
    fn ledger(&mut self) -> &mut Ledger {
        &mut self.ledger
    }

    async fn pet(&mut self, id: PetId) -> Result<Option<(Pet, u64)>, StoreError> {
        let Some(json) = self.tables.pets.get(id).map_err(StoreError::storage)? else {
            return Ok(None);
        };
        // A pet not in `REVISIONS` is at revision 1: a create writes nothing there.
        let revision = self
            .tables
            .revisions
            .get(id)
            .map_err(StoreError::storage)?
            .map_or(1, |r| r.value());
        Ok(Some((read_pet(id, json.value())?, revision)))
    }

    async fn put_pet(
        &mut self,
        old: Option<(&Pet, u64)>,
        new: &Pet,
    ) -> Result<StoredPet, StoreError> {
        let (old, revision) = (old.map(|(old, _)| old), next_revision(old));
        let id = new.id;
        let json = Bytes::from(new.to_json());
        let tables = &mut self.tables;
        tables
            .pets
            .insert(id, json.as_ref())
            .map_err(StoreError::storage)?;
        // The old entries go in the same transaction as the new ones come: a filter never
        // sees the pet twice, or as it was. The old JSON is not at hand (`entries::rewrite`).
        let old_entries = old.map(|old| entries::pet(old, &[]));
        rewrite(
            &mut tables.indexes,
            old_entries.as_ref().map_or(&[], |e| e.as_slice()),
            &entries::pet(new, json.as_ref()),
        )?;
        self.inventory
            .moved(old.map(|old| old.status), Some(new.status));
        if old.is_some() {
            tables
                .revisions
                .insert(id, revision)
                .map_err(StoreError::storage)?;
        }
        Ok(StoredPet { id, revision, json })
    }

    async fn remove_pet(&mut self, old: &Pet) -> Result<(), StoreError> {
        let id = old.id;
        let tables = &mut self.tables;
        tables.pets.remove(id).map_err(StoreError::storage)?;
        rewrite(&mut tables.indexes, &entries::pet(old, &[]), &[])?;
        tables.revisions.remove(id).map_err(StoreError::storage)?;
        self.inventory.moved(Some(old.status), None);
        Ok(())
    }

    async fn holding_order(&mut self, pet: PetId) -> Result<Option<OrderId>, StoreError> {
        holding_order(&self.sales()?.orders_by_pet, pet)
    }

    async fn order(&mut self, id: OrderId) -> Result<Option<Order>, StoreError> {
        let sales = self.sales()?;
        let Some(record) = sales.orders.get(id).map_err(StoreError::storage)? else {
            return Ok(None);
        };
        read_order(id, record.value()).map(Some)
    }

    async fn put_order(&mut self, old: Option<&Order>, new: &Order) -> Result<(), StoreError> {
        let sales = self.sales()?;
        sales
            .orders
            .insert(new.id, new.to_record().as_slice())
            .map_err(StoreError::storage)?;
        let old_entries = old.map(entries::order);
        rewrite(
            sales,
            old_entries.as_ref().map_or(&[], |e| e.as_slice()),
            &entries::order(new),
        )
    }

    async fn ended_holds(&mut self, at_ms: u64) -> Result<Vec<OrderId>, StoreError> {
        let mut ended = Vec::new();
        for entry in self
            .sales()?
            .hold_ends
            .range(..=(at_ms, i64::MAX))
            .map_err(StoreError::storage)?
            .take(PURGE_BATCH)
        {
            ended.push(entry.map_err(StoreError::storage)?.0.value().1);
        }
        Ok(ended)
    }

    async fn category(&mut self, id: CategoryId) -> Result<Option<Category>, StoreError> {
        let sales = self.sales()?;
        let Some(json) = sales.categories.get(id).map_err(StoreError::storage)? else {
            return Ok(None);
        };
        read_category(id, json.value()).map(Some)
    }

    async fn category_named(&mut self, key: &str) -> Result<Option<CategoryId>, StoreError> {
        let sales = self.sales()?;
        let holder = sales.category_names.get(key).map_err(StoreError::storage)?;
        Ok(holder.map(|id| id.value()))
    }

    async fn category_in_use(&mut self, id: CategoryId) -> Result<bool, StoreError> {
        let mut named = self
            .tables
            .indexes
            .by_category
            .range((id, 0, i64::MIN)..=(id, u8::MAX, i64::MAX))
            .map_err(StoreError::storage)?;
        Ok(named.next().is_some())
    }

    async fn put_category(
        &mut self,
        old: Option<&Category>,
        new: &Category,
    ) -> Result<(), StoreError> {
        let sales = self.sales()?;
        sales
            .categories
            .insert(new.id, new.to_json().as_slice())
            .map_err(StoreError::storage)?;
        let old_entries = old.map(entries::category);
        rewrite(
            sales,
            old_entries.as_ref().map_or(&[], |e| e.as_slice()),
            &entries::category(new),
        )
    }

    async fn remove_category(&mut self, old: &Category) -> Result<(), StoreError> {
        let sales = self.sales()?;
        sales
            .categories
            .remove(old.id)
            .map_err(StoreError::storage)?;
        rewrite(sales, &entries::category(old), &[])
    }

    async fn next_id(&mut self, counter: Counter) -> Result<Result<i64, StoreError>, StoreError> {
        let next = match counter {
            Counter::Pets => self.next_id,
            Counter::Orders => {
                let next = self.counter(META_NEXT_ORDER_ID, self.next_order_id)?;
                *self.next_order_id.insert(next)
            }
            Counter::Categories => {
                let next = self.counter(META_NEXT_CATEGORY_ID, self.next_category_id)?;
                *self.next_category_id.insert(next)
            }
        };
        Ok(i64::try_from(next).map_err(|_| StoreError::IdsExhausted))
    }

    fn take_id(&mut self, counter: Counter) {
        match counter {
            Counter::Pets => self.next_id += 1,
            // Read by `next_id` first, so the counter is there to move.
            Counter::Orders => self.next_order_id = self.next_order_id.map(|next| next + 1),
            Counter::Categories => {
                self.next_category_id = self.next_category_id.map(|next| next + 1)
            }
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
