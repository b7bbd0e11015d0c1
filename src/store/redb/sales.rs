//! The reads of orders and categories in the redb file (issue 29), through their indexes; their
//! writes are their rules' (`store/ops`), kept with their index entries by `txn.rs`. Invariants: a pet has at most one placed order in `ORDERS_BY_PET`
//! (the one that holds it), and a held pet is `pending`; `HOLD_ENDS` holds exactly the placed
//! orders that have an end; `CATEGORY_NAMES` holds exactly each category's name key.

use redb::ReadableDatabase;

use super::handle::RedbStore;
use super::tables::{
    CATEGORIES, META_INVENTORY, NO_STATUS, ORDERS, ORDERS_BY_PET, ORDERS_BY_STATUS,
    PETS_BY_CATEGORY, meta_value, read_order,
};
use crate::category::{Category, CategoryId};
use crate::order::{Order, OrderId};
use crate::pet::{PetId, PetStatus};
use crate::store::model::{Inventory, OrderQuery, Page, PageBuilder, PageQuery, StoreError};

pub(super) fn read_category(id: CategoryId, json: &[u8]) -> Result<Category, StoreError> {
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
