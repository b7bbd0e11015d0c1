//! The reads of declared records in the redb file: any resource's record by id and its pages
//! in id order, from its declaration (`get_record`, `list_records`), and the lists filtered
//! by an index (orders by pet or status, a category's pets), each read from its index's range
//! from the cursor on. The writes are their rules' (`store/ops`), kept with their index
//! entries by `txn.rs`.

use redb::{ReadTransaction, ReadableDatabase};

use super::handle::RedbStore;
use super::indexes::{self, records, scan};
use super::tables::{META_INVENTORY, meta_value};
use crate::order::Order;
use crate::pet::PetId;
use crate::store::model::{Inventory, OrderQuery, Page, PageBuilder, PageQuery, StoreError};
use crate::store::ops::orders::{ORDERS_BY_PET, ORDERS_BY_STATUS};
use crate::store::ops::pets::{PETS_BY_CATEGORY, STATUS_CODES};
use crate::store::resource::{Index, Part, Resource};

/// Record `id` of `R` as `txn` sees it.
pub(super) fn get<R: Resource>(txn: &ReadTransaction, id: i64) -> Result<Option<R>, StoreError> {
    let table = txn
        .open_table(records::<R>())
        .map_err(StoreError::storage)?;
    let Some(stored) = table.get(id).map_err(StoreError::storage)? else {
        return Ok(None);
    };
    R::decode(id, stored.value()).map(Some)
}

/// Up to `limit` entries of `index` under `parts` after record `after`, as `txn` sees them.
fn entries(
    txn: &ReadTransaction,
    index: &Index,
    parts: &[Part],
    after: i64,
    limit: usize,
) -> Result<Vec<(i64, Vec<u8>)>, StoreError> {
    let table = txn
        .open_table(indexes::table(index))
        .map_err(StoreError::storage)?;
    scan(&table, &index.prefix(parts), after, limit)
}

impl RedbStore {
    /// Record `id` of `R`, from a read transaction of its own.
    pub(in crate::store) async fn get_record<R: Resource>(
        &self,
        id: i64,
    ) -> Result<Option<R>, StoreError> {
        self.read_txn(|txn| get(txn, id))
    }

    /// A page of `R`'s records in id order after `after`.
    pub(in crate::store) async fn list_records<R: Resource>(
        &self,
        after: Option<i64>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        self.read_txn(|txn| list_records::<R>(txn, after, limit))
    }

    /// A page of orders: by `petId` through `ORDERS_BY_PET` (a pet has few orders, so a status
    /// with it is filtered as read, from the entry's value), by status through
    /// `ORDERS_BY_STATUS`, else in `orders`. One more than a page is read, to tell whether
    /// another follows.
    pub(in crate::store) async fn list_orders(
        &self,
        query: OrderQuery,
    ) -> Result<Page, StoreError> {
        if !query.search.is_empty() || query.sort != crate::search::Sort::Id {
            return self.find_orders(&query);
        }
        let after = query.after.unwrap_or(i64::MIN);
        let wanted = query.limit + 1;
        self.read_txn(|txn| {
            let ids: Vec<i64> = match (query.pet_id, query.status) {
                (Some(pet), status) => {
                    let all = entries(txn, &ORDERS_BY_PET, &[Part::Int(pet)], after, usize::MAX)?;
                    let kept = all.into_iter().filter(|(_, code)| {
                        status.is_none_or(|status| code.as_slice() == [status.code()])
                    });
                    kept.map(|(id, _)| id).take(wanted).collect()
                }
                (None, Some(status)) => {
                    let parts = [Part::Code(status.code())];
                    let found = entries(txn, &ORDERS_BY_STATUS, &parts, after, wanted)?;
                    found.into_iter().map(|(id, _)| id).collect()
                }
                (None, None) => return list_records::<Order>(txn, query.after, query.limit),
            };
            let mut page = PageBuilder::new(query.limit);
            for id in ids {
                let order: Order = get(txn, id)?
                    .ok_or_else(|| StoreError::Corrupt(format!("order index names {id}")))?;
                page.push(id, &order.to_json());
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

    /// A page of the pets of one category (`query.category`), through `PETS_BY_CATEGORY`: one
    /// range with a status; without, the four ranges of the category's statuses merged by id.
    /// Either way at most `limit + 1` entries of each range are read, wherever the page starts.
    pub(super) fn list_category(
        &self,
        txn: &ReadTransaction,
        pets: &redb::ReadOnlyTable<i64, &'static [u8]>,
        query: &PageQuery,
        after: PetId,
    ) -> Result<Page, StoreError> {
        let Some(category) = query.category else {
            return Err(StoreError::Corrupt(
                "a category page without a category".into(),
            ));
        };
        let codes = match query.status {
            Some(status) => vec![status.to_code()],
            None => STATUS_CODES.to_vec(),
        };
        let mut ids = Vec::with_capacity(codes.len() * (query.limit + 1));
        for code in codes {
            let parts = [Part::Int(category), Part::Code(code)];
            let found = entries(txn, &PETS_BY_CATEGORY, &parts, after, query.limit + 1)?;
            ids.extend(found.into_iter().map(|(id, _)| id));
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
        work: impl Fn(&redb::ReadTransaction) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.shared.on_sound_database(|db| {
            super::handle::contain("a read", || {
                let txn = db.begin_read().map_err(StoreError::storage)?;
                work(&txn)
            })
        })
    }
}

/// A page of `R`'s records in id order after `after`, their JSON as the API sends them.
fn list_records<R: Resource>(
    txn: &ReadTransaction,
    after: Option<i64>,
    limit: usize,
) -> Result<Page, StoreError> {
    let table = txn
        .open_table(records::<R>())
        .map_err(StoreError::storage)?;
    let mut page = PageBuilder::new(limit);
    let Some(first) = after.map_or(Some(i64::MIN), |after| after.checked_add(1)) else {
        return Ok(page.finish());
    };
    for row in table
        .range(first..)
        .map_err(StoreError::storage)?
        .take(limit + 1)
    {
        let (id, stored) = row.map_err(StoreError::storage)?;
        let record = R::decode(id.value(), stored.value())?;
        page.push(id.value(), &record.json());
    }
    Ok(page.finish())
}
