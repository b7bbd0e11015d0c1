//! The redb store's reads of orders, categories and the inventory (issue 29).

use super::handle::RedbStore;
use crate::category::{Category, CategoryId};
use crate::order::{Order, OrderId};
use crate::store::model::{Inventory, OrderQuery, Page, StoreError};

fn not_yet() -> StoreError {
    StoreError::Unsupported("orders and categories".into())
}

impl RedbStore {
    pub(in crate::store) async fn get_order(
        &self,
        _id: OrderId,
    ) -> Result<Option<Order>, StoreError> {
        Err(not_yet())
    }

    pub(in crate::store) async fn list_orders(
        &self,
        _query: OrderQuery,
    ) -> Result<Page, StoreError> {
        Err(not_yet())
    }

    pub(in crate::store) async fn inventory(&self) -> Result<Inventory, StoreError> {
        Err(not_yet())
    }

    pub(in crate::store) async fn get_category(
        &self,
        _id: CategoryId,
    ) -> Result<Option<Category>, StoreError> {
        Err(not_yet())
    }

    pub(in crate::store) async fn list_categories(
        &self,
        _after: Option<CategoryId>,
        _limit: usize,
    ) -> Result<Page, StoreError> {
        Err(not_yet())
    }
}
