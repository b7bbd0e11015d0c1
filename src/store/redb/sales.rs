//! Orders and categories in the redb file (issue 29): their writes inside a batch (`Run`, the
//! writer's batch, in `writer.rs`) and their reads. An order and its pet change in one
//! transaction with their indexes (`ORDERS_BY_*`, `HOLD_ENDS`) and the inventory; a category
//! with its unique name. Invariants: a pet has at most one placed order in `ORDERS_BY_PET`
//! (the one that holds it), and a held pet is `pending`; `HOLD_ENDS` holds exactly the placed
//! orders that have an end; `CATEGORY_NAMES` holds exactly each category's name key.

use redb::{ReadableDatabase, ReadableTable};

use super::handle::RedbStore;
use super::idempotency;
use super::tables::{
    CATEGORIES, META_INVENTORY, META_NEXT_CATEGORY_ID, META_NEXT_ORDER_ID, NO_STATUS, ORDERS,
    ORDERS_BY_PET, ORDERS_BY_STATUS, PETS_BY_CATEGORY, meta_value, read_order,
};
use super::writer::Run;
use crate::category::{self, Category, CategoryId, CategoryPatch, NewCategory};
use crate::order::{Order, OrderAction, OrderId};
use crate::pet::{Pet, PetId, PetStatus};
use crate::store::model::{
    Inventory, Moved, OrderQuery, Page, PageBuilder, PageQuery, Placed, Precondition, StoreError,
    order_record_id,
};
use crate::store::write::{PURGE_BATCH, PlaceOrder};

/// What a write answers its caller, or the error that fails the whole batch.
type Outcome<T> = Result<Result<T, StoreError>, StoreError>;

impl Run<'_> {
    pub(super) fn place_order(&mut self, place: &PlaceOrder) -> Outcome<Placed> {
        if let Some(keyed) = &place.keyed
            && let Some(answer) = idempotency::record(self.index, self.changes, &keyed.key)
                .and_then(|record| record.order_answer(&keyed.key, self.now))
        {
            return match answer {
                Ok(id) => match self.order(id)? {
                    Some(order) => Ok(Ok(Placed {
                        order: order.as_placed(),
                        pet: None,
                        replayed: true,
                    })),
                    None => Err(StoreError::Corrupt(format!(
                        "order {id} has an idempotency record but is missing"
                    ))),
                },
                Err(e) => Ok(Err(e)),
            };
        }
        let pet_id = place.order.pet_id;
        let (pet, revision) = match self.current(pet_id, &Precondition::None)? {
            Ok(current) => current,
            Err(e) => return Ok(Err(e)),
        };
        if pet.status != Some(PetStatus::Available) {
            return Ok(Err(StoreError::PetNotAvailable {
                pet: pet_id,
                status: pet.status,
            }));
        }
        let next = self.counter(META_NEXT_ORDER_ID, self.next_order_id)?;
        let Ok(id) = OrderId::try_from(next) else {
            return Ok(Err(StoreError::IdsExhausted));
        };
        self.next_order_id = Some(next + 1);
        let order = Order::place(id, place.order.clone(), self.now_ms, place.hold);
        let pending = Pet {
            status: Some(PetStatus::Pending),
            ..pet.clone()
        };
        let pet = self.rewrite_pet(&pet, pending, revision)?;
        self.sales()?.insert_order(&order)?;
        if let Some(keyed) = &place.keyed {
            let record_id = order_record_id(id);
            idempotency::insert(&mut self.tables.records, self.changes, keyed, record_id)?;
        }
        Ok(Ok(Placed {
            order,
            pet: Some(pet),
            replayed: false,
        }))
    }

    /// Completes or cancels order `id` if its revision meets `precondition`.
    pub(super) fn move_order(
        &mut self,
        id: OrderId,
        action: OrderAction,
        precondition: &Precondition,
    ) -> Outcome<Moved> {
        let Some(order) = self.order(id)? else {
            return Ok(Err(StoreError::OrderNotFound(id)));
        };
        if !precondition.allows(order.revision) {
            return Ok(Err(StoreError::PreconditionFailed));
        }
        self.settle(&order, action)
    }

    /// Expires up to `PURGE_BATCH` placed orders whose hold ended by `now_ms`.
    pub(super) fn expire(&mut self, now_ms: u64) -> Result<Vec<Moved>, StoreError> {
        let mut ended = Vec::new();
        for entry in self
            .sales()?
            .hold_ends
            .range(..=(now_ms, i64::MAX))
            .map_err(StoreError::storage)?
            .take(PURGE_BATCH)
        {
            ended.push(entry.map_err(StoreError::storage)?.0.value().1);
        }
        let mut expired = Vec::with_capacity(ended.len());
        for id in ended {
            let Some(order) = self.order(id)? else {
                return Err(StoreError::Corrupt(format!(
                    "hold end of order {id}, which is missing"
                )));
            };
            // Closed when this pass expired it, as on PostgreSQL: the time its pet came free.
            match self.settle_at(&order, OrderAction::Expire, now_ms)? {
                Ok(moved) => expired.push(moved),
                Err(e) => return Err(StoreError::Corrupt(format!("order {id}: {e}"))),
            }
        }
        Ok(expired)
    }

    fn settle(&mut self, order: &Order, action: OrderAction) -> Outcome<Moved> {
        self.settle_at(order, action, self.now_ms)
    }

    /// Moves `order` by `action` at `at_ms` with its pet: it holds the pet no more.
    fn settle_at(&mut self, order: &Order, action: OrderAction, at_ms: u64) -> Outcome<Moved> {
        let moved = match order.apply(action, at_ms) {
            Ok(moved) => moved,
            Err(refused) => {
                return Ok(Err(StoreError::InvalidTransition {
                    order: order.id,
                    action,
                    refused,
                }));
            }
        };
        let (pet, revision) = match self.current(order.pet_id, &Precondition::None)? {
            Ok(current) => current,
            // A held pet cannot be deleted: a missing one is a broken file.
            Err(_) => {
                return Err(StoreError::Corrupt(format!(
                    "order {} holds pet {}, which is missing",
                    order.id, order.pet_id
                )));
            }
        };
        let new = Pet {
            status: Some(action.pet_status()),
            ..pet.clone()
        };
        let pet = self.rewrite_pet(&pet, new, revision)?;
        let id = order.id;
        let sales = self.sales()?;
        sales
            .orders
            .insert(id, moved.to_record().as_slice())
            .map_err(StoreError::storage)?;
        sales
            .orders_by_status
            .remove((order.status.code(), id))
            .map_err(StoreError::storage)?;
        sales
            .orders_by_status
            .insert((moved.status.code(), id), ())
            .map_err(StoreError::storage)?;
        sales
            .orders_by_pet
            .insert((order.pet_id, id), moved.status.code())
            .map_err(StoreError::storage)?;
        if let Some(end) = order.expires_at_ms {
            sales
                .hold_ends
                .remove((end, id))
                .map_err(StoreError::storage)?;
        }
        Ok(Ok(Moved { order: moved, pet }))
    }

    /// The order `id` as this batch sees it.
    fn order(&mut self, id: OrderId) -> Result<Option<Order>, StoreError> {
        let sales = self.sales()?;
        let Some(record) = sales.orders.get(id).map_err(StoreError::storage)? else {
            return Ok(None);
        };
        read_order(id, record.value()).map(Some)
    }

    pub(super) fn create_category(&mut self, new: &NewCategory) -> Outcome<Category> {
        let key = category::name_key(&new.name);
        let next = self.counter(META_NEXT_CATEGORY_ID, self.next_category_id)?;
        let sales = self.sales()?;
        if sales
            .category_names
            .get(key.as_str())
            .map_err(StoreError::storage)?
            .is_some()
        {
            return Ok(Err(StoreError::NameTaken(new.name.clone())));
        }
        let Ok(id) = CategoryId::try_from(next) else {
            return Ok(Err(StoreError::IdsExhausted));
        };
        let category = Category {
            id,
            name: new.name.clone(),
        };
        sales
            .categories
            .insert(id, category.to_json().as_slice())
            .map_err(StoreError::storage)?;
        sales
            .category_names
            .insert(key.as_str(), id)
            .map_err(StoreError::storage)?;
        self.next_category_id = Some(next + 1);
        Ok(Ok(category))
    }

    pub(super) fn patch_category(
        &mut self,
        id: CategoryId,
        patch: &CategoryPatch,
    ) -> Outcome<Category> {
        let Some(old) = self.category(id)? else {
            return Ok(Err(StoreError::CategoryNotFound(id)));
        };
        let Some(name) = &patch.name else {
            return Ok(Ok(old));
        };
        let (old_key, new_key) = (category::name_key(&old.name), category::name_key(name));
        let sales = self.sales()?;
        if old_key != new_key {
            let holder = sales
                .category_names
                .get(new_key.as_str())
                .map_err(StoreError::storage)?
                .map(|id| id.value());
            if holder.is_some_and(|holder| holder != id) {
                return Ok(Err(StoreError::NameTaken(name.clone())));
            }
            sales
                .category_names
                .remove(old_key.as_str())
                .map_err(StoreError::storage)?;
            sales
                .category_names
                .insert(new_key.as_str(), id)
                .map_err(StoreError::storage)?;
        }
        let category = Category {
            id,
            name: name.clone(),
        };
        sales
            .categories
            .insert(id, category.to_json().as_slice())
            .map_err(StoreError::storage)?;
        Ok(Ok(category))
    }

    pub(super) fn delete_category(&mut self, id: CategoryId) -> Outcome<CategoryId> {
        let Some(old) = self.category(id)? else {
            return Ok(Err(StoreError::CategoryNotFound(id)));
        };
        let in_use = self
            .tables
            .by_category
            .range((id, 0, i64::MIN)..=(id, u8::MAX, i64::MAX))
            .map_err(StoreError::storage)?
            .next()
            .is_some();
        if in_use {
            return Ok(Err(StoreError::CategoryInUse(id)));
        }
        let sales = self.sales()?;
        sales.categories.remove(id).map_err(StoreError::storage)?;
        sales
            .category_names
            .remove(category::name_key(&old.name).as_str())
            .map_err(StoreError::storage)?;
        Ok(Ok(id))
    }

    fn category(&mut self, id: CategoryId) -> Result<Option<Category>, StoreError> {
        let sales = self.sales()?;
        let Some(json) = sales.categories.get(id).map_err(StoreError::storage)? else {
            return Ok(None);
        };
        read_category(id, json.value()).map(Some)
    }
}

fn read_category(id: CategoryId, json: &[u8]) -> Result<Category, StoreError> {
    Category::from_json(json)
        .map_err(|e| StoreError::Corrupt(format!("category {id} does not read back: {e}")))
}

/// The first id a page after `after` may hold; `None`: no id is above it.
fn first_after(after: Option<i64>) -> Option<i64> {
    match after {
        None => Some(i64::MIN),
        Some(after) => after.checked_add(1),
    }
}

impl RedbStore {
    pub(in crate::store) async fn get_order(
        &self,
        id: OrderId,
    ) -> Result<Option<Order>, StoreError> {
        self.read_txn(|txn| {
            let orders = txn.open_table(ORDERS).map_err(StoreError::storage)?;
            let Some(record) = orders.get(id).map_err(StoreError::storage)? else {
                return Ok(None);
            };
            read_order(id, record.value()).map(Some)
        })
    }

    /// A page of orders: by `petId` through `ORDERS_BY_PET` (a pet has few orders, so a status
    /// with it is filtered as read), by status through `ORDERS_BY_STATUS`, else in `ORDERS`.
    pub(in crate::store) async fn list_orders(
        &self,
        query: OrderQuery,
    ) -> Result<Page, StoreError> {
        let Some(first) = first_after(query.after) else {
            return Ok(Page::empty());
        };
        self.read_txn(|txn| {
            let orders = txn.open_table(ORDERS).map_err(StoreError::storage)?;
            let mut page = PageBuilder::new(query.limit);
            let mut taken = 0;
            let mut push = |order: Order| {
                if query.status.is_none_or(|status| status == order.status) {
                    page.push(order.id, &order.to_json());
                    taken += 1;
                }
                taken <= query.limit
            };
            let read = |id: i64| -> Result<Order, StoreError> {
                let record = orders
                    .get(id)
                    .map_err(StoreError::storage)?
                    .ok_or_else(|| StoreError::Corrupt(format!("order index names {id}")))?;
                read_order(id, record.value())
            };
            match (query.pet_id, query.status) {
                (Some(pet), _) => {
                    let index = txn.open_table(ORDERS_BY_PET).map_err(StoreError::storage)?;
                    for entry in index
                        .range((pet, first)..=(pet, i64::MAX))
                        .map_err(StoreError::storage)?
                    {
                        let (key, status) = entry.map_err(StoreError::storage)?;
                        // The entry says the status: only the orders kept are read.
                        if query.status.is_some_and(|s| s.code() != status.value()) {
                            continue;
                        }
                        if !push(read(key.value().1)?) {
                            break;
                        }
                    }
                }
                (None, Some(status)) => {
                    let code = status.code();
                    let index = txn
                        .open_table(ORDERS_BY_STATUS)
                        .map_err(StoreError::storage)?;
                    for entry in index
                        .range((code, first)..=(code, i64::MAX))
                        .map_err(StoreError::storage)?
                    {
                        let id = entry.map_err(StoreError::storage)?.0.value().1;
                        if !push(read(id)?) {
                            break;
                        }
                    }
                }
                (None, None) => {
                    for entry in orders.range(first..).map_err(StoreError::storage)? {
                        let (id, record) = entry.map_err(StoreError::storage)?;
                        if !push(read_order(id.value(), record.value())?) {
                            break;
                        }
                    }
                }
            }
            Ok(page.finish())
        })
    }

    /// The four counters, from the snapshot every read shares.
    pub(in crate::store) async fn inventory(&self) -> Result<Inventory, StoreError> {
        self.read(|snapshot| {
            let [available, pending, sold, unset] =
                META_INVENTORY.map(|key| meta_value(&snapshot.meta, key));
            Ok(Inventory {
                available: available?,
                pending: pending?,
                sold: sold?,
                unset: unset?,
            })
        })
    }

    pub(in crate::store) async fn get_category(
        &self,
        id: CategoryId,
    ) -> Result<Option<Category>, StoreError> {
        self.read_txn(|txn| {
            let categories = txn.open_table(CATEGORIES).map_err(StoreError::storage)?;
            let Some(json) = categories.get(id).map_err(StoreError::storage)? else {
                return Ok(None);
            };
            read_category(id, json.value()).map(Some)
        })
    }

    pub(in crate::store) async fn list_categories(
        &self,
        after: Option<CategoryId>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        let Some(first) = first_after(after) else {
            return Ok(Page::empty());
        };
        self.read_txn(|txn| {
            let categories = txn.open_table(CATEGORIES).map_err(StoreError::storage)?;
            let mut page = PageBuilder::new(limit);
            for entry in categories
                .range(first..)
                .map_err(StoreError::storage)?
                .take(limit + 1)
            {
                let (id, json) = entry.map_err(StoreError::storage)?;
                page.push(id.value(), json.value());
            }
            Ok(page.finish())
        })
    }

    /// A page of the pets of one category (`query.category`), through `PETS_BY_CATEGORY`: one
    /// range with a status; without, the four ranges of the category's statuses merged by id.
    /// Either way at most `limit + 1` entries of each range are read, wherever the page starts.
    pub(super) fn list_category(
        &self,
        txn: &redb::ReadTransaction,
        pets: &redb::ReadOnlyTable<i64, &'static [u8]>,
        query: PageQuery,
        first: PetId,
    ) -> Result<Page, StoreError> {
        let Some(category) = query.category else {
            return Err(StoreError::Corrupt(
                "a category page without a category".into(),
            ));
        };
        let index = txn
            .open_table(PETS_BY_CATEGORY)
            .map_err(StoreError::storage)?;
        let codes: Vec<u8> = match query.status {
            Some(status) => vec![status.to_code()],
            None => vec![
                PetStatus::Available.to_code(),
                PetStatus::Pending.to_code(),
                PetStatus::Sold.to_code(),
                NO_STATUS,
            ],
        };
        let mut ids = Vec::with_capacity(codes.len() * (query.limit + 1));
        for code in codes {
            for entry in index
                .range((category, code, first)..=(category, code, i64::MAX))
                .map_err(StoreError::storage)?
                .take(query.limit + 1)
            {
                ids.push(entry.map_err(StoreError::storage)?.0.value().2);
            }
        }
        ids.sort_unstable();
        let mut page = PageBuilder::new(query.limit);
        for id in ids.into_iter().take(query.limit + 1) {
            let json = pets
                .get(id)
                .map_err(StoreError::storage)?
                .ok_or_else(|| StoreError::Corrupt(format!("category index names pet {id}")))?;
            page.push(id, json.value());
        }
        Ok(page.finish())
    }

    /// Runs a read in a read transaction of its own, begun now: orders and categories are read
    /// far less often than pets, so their tables are not kept open in the shared snapshot.
    pub(super) fn read_txn<T>(
        &self,
        work: impl FnOnce(&redb::ReadTransaction) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let db = self.shared.db_for_read();
        let db = db.as_ref().ok_or(StoreError::Reopening)?;
        let txn = db.begin_read().map_err(StoreError::storage)?;
        work(&txn)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_starts_after_its_cursor_and_none_follows_the_last_id() {
        assert_eq!(first_after(None), Some(i64::MIN));
        assert_eq!(first_after(Some(5)), Some(6));
        assert_eq!(first_after(Some(i64::MAX)), None);
    }
}
