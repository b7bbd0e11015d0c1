//! The PostgreSQL store's reads of orders, categories and the inventory (issue 29); their
//! writes are their rules' (`store/ops`, through `txn.rs`). Each read is one statement, so one snapshot: a page comes with
//! the feed's newest position as that snapshot saw it (as a page of pets does), and the
//! inventory's four counters agree with each other.

use tokio_postgres::types::ToSql;

use super::errors::pg_error;
use super::handle::{FEED_NOW, PgStore, feed_state};
use super::rows::{
    READ_INVENTORY, Walk, from_cursor, inventory_of, record_in, select_after, select_one,
};
use crate::event::Position;
use crate::order::Order;
use crate::search::Sort;
use crate::store::model::{Inventory, OrderQuery, Page, PageBuilder, StoreError};
use crate::store::resource::Resource;

impl PgStore {
    /// Record `id` of `R`, read by one statement.
    pub(in crate::store) async fn get_record<R: Resource>(
        &self,
        id: i64,
    ) -> Result<Option<R>, StoreError> {
        let sql = select_one::<R>();
        let row = self
            .pool
            .run(async |client| {
                let statement = client.prepare_cached(&sql).await.map_err(pg_error)?;
                client.query_opt(&statement, &[&id]).await.map_err(pg_error)
            })
            .await?;
        row.map(|row| record_in(id, &row, 0)).transpose()
    }

    /// A page of orders in id order (newest first for `Sort::Newest`), each filter read from
    /// its index (`orders_by_status`, `orders_by_pet`) from the cursor on, so a deep page costs
    /// what the first does. A search keeps the orders of the pets whose terms it finds in
    /// `pet_words`: its pages cost more the more pets it matches.
    pub(in crate::store) async fn list_orders(
        &self,
        query: OrderQuery,
    ) -> Result<Page, StoreError> {
        let newest = query.sort == Sort::Newest;
        let (walk, order) = match newest {
            true => (Walk::Down, "DESC"),
            false => (Walk::Up, "ASC"),
        };
        let after = query
            .after
            .unwrap_or(if newest { i64::MAX } else { i64::MIN });
        let fetch = i64::try_from(query.limit + 1).unwrap_or(i64::MAX);
        let status = query.status.map(|status| i16::from(status.code()));
        let terms = query.search.terms();
        // One statement text for each combination of filters: a parameter that may be NULL
        // ("any") would make a plan that cannot use the index of the filter given.
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![&after, &fetch];
        // Of a pet's few orders, those of a status are filtered from `orders_by_pet`.
        let (mut equal, mut filters) = (Vec::new(), String::new());
        if let Some(pet_id) = &query.pet_id {
            params.push(pet_id);
            equal.push(("pet_id", params.len()));
        }
        if let Some(status) = &status {
            params.push(status);
            if equal.is_empty() {
                equal.push(("status", params.len()));
            } else {
                filters = format!(" AND status = ${}", params.len());
            }
        }
        if let Some((first, rest)) = terms.split_first() {
            params.push(first);
            let mut pets = format!(
                "SELECT w0.pet_id FROM pet_words w0 WHERE w0.term = ${}",
                params.len()
            );
            for (n, term) in rest.iter().enumerate() {
                params.push(term);
                let w = n + 1;
                pets.push_str(&format!(
                    " AND EXISTS (SELECT 1 FROM pet_words w{w} WHERE w{w}.term = ${} \
                     AND w{w}.pet_id = w0.pet_id)",
                    params.len()
                ));
            }
            filters.push_str(&format!(" AND pet_id IN ({pets})"));
        }
        let sql = format!(
            "{FEED_NOW} LEFT JOIN LATERAL (
                 SELECT id, record FROM orders WHERE {}{filters} ORDER BY id {order} LIMIT $2
             ) p ON true ORDER BY p.id {order}",
            from_cursor(&equal, &[("id", 1)], walk)
        );
        let rows = self
            .pool
            .run(async |client| {
                let statement = client.prepare_cached(&sql).await.map_err(pg_error)?;
                client.query(&statement, &params).await.map_err(pg_error)
            })
            .await?;
        page_of(&rows, query.limit, |row| {
            Ok(record_in::<Order>(row.get(3), row, 4)?.to_json())
        })
    }

    /// The four counters every write keeps, read in one statement: exact at its snapshot, and
    /// as cheap with a million pets as with none.
    pub(in crate::store) async fn inventory(&self) -> Result<Inventory, StoreError> {
        let row = self
            .pool
            .run(async |client| {
                let statement = client
                    .prepare_cached(READ_INVENTORY)
                    .await
                    .map_err(pg_error)?;
                client.query_one(&statement, &[]).await.map_err(pg_error)
            })
            .await?;
        inventory_of(&row)
    }

    /// A page of `R`'s records in id order after `after`, with the feed's newest position.
    pub(in crate::store) async fn list_records<R: Resource>(
        &self,
        after: Option<i64>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        let after = after.unwrap_or(i64::MIN);
        let fetch = i64::try_from(limit + 1).unwrap_or(i64::MAX);
        let sql = format!(
            "{FEED_NOW} LEFT JOIN LATERAL ({}) p ON true ORDER BY p.id",
            select_after::<R>()
        );
        let rows = self
            .pool
            .run(async |client| {
                let statement = client.prepare_cached(&sql).await.map_err(pg_error)?;
                client
                    .query(&statement, &[&after, &fetch])
                    .await
                    .map_err(pg_error)
            })
            .await?;
        page_of(&rows, limit, |row| {
            Ok(record_in::<R>(row.get(3), row, 4)?.json())
        })
    }
}

/// A page from the rows of a `FEED_NOW` query joined to up to `limit + 1` rows whose first
/// column (the fourth of the row) is the id, each made its JSON object by `object`.
fn page_of(
    rows: &[tokio_postgres::Row],
    limit: usize,
    object: impl Fn(&tokio_postgres::Row) -> Result<Vec<u8>, StoreError>,
) -> Result<Page, StoreError> {
    let mut page = PageBuilder::new(limit);
    let mut events = Position { feed: 0, seq: 0 };
    for row in rows {
        events = feed_state(row)?.newest_position();
        if let Some(id) = row.get::<_, Option<i64>>(3) {
            page.push(id, &object(row)?);
        }
    }
    Ok(page.finish().at(events))
}
