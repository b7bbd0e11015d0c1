//! The store-orders operations (issue 29, docs/orders.md): `place_order` (with an
//! Idempotency-Key as createPet's), `list_orders`, `get_order`, `move_order` (completeOrder and
//! cancelOrder, under `If-Match`) and `get_inventory`. Every answer with one order carries its
//! ETag; whether a pet may be sold is the store's to decide, in the order's transaction.

use std::time::Duration;

use bytes::Bytes;
use hyper::StatusCode;
use hyper::body::Incoming;
use hyper::header::{HeaderMap, HeaderValue, IF_NONE_MATCH};
use sha2::{Digest, Sha256};

use super::{
    Reply, claim_idempotency_key, content_type, etag_value, path_id, precondition, query_error,
    read_body,
};
use crate::auth::Caller;
use crate::conditional;
use crate::error::Error;
use crate::order::{NewOrder, Order, OrderAction, OrderId};
use crate::query::{self, OrdersQuery};
use crate::store::ops::MoveOrder;
use crate::store::{Inventory, OrderQuery, Store, StoreError};
use crate::subject::Subject;

/// `POST /v1/store/orders` (placeOrder): 201 with the order once it and its pet, now
/// `pending`, are committed; with an Idempotency-Key, the first answer again for a retry.
pub async fn place_order(
    store: &Store,
    caller: &Caller,
    headers: &HeaderMap,
    body: Incoming,
    body_timeout: Duration,
) -> Result<Reply, Error> {
    let claim = claim_idempotency_key(store, caller, headers)?;
    let body = read_body(headers, body, body_timeout).await?;
    if !query::is_json(content_type(headers)) {
        return Err(Error::UnsupportedMediaType);
    }
    let order = NewOrder::from_json(&body).map_err(Error::InvalidBody)?;
    // As for pets: the same order (pet and note) is the same request, however its JSON was
    // written; the canonical form is marked as an order's.
    let key = claim.map(|claim| claim.for_body(Sha256::digest(order.canonical_json()).into()));
    let placed = store.place_order(order, key).await?;
    let id = placed.order.id;
    Ok(reply(StatusCode::CREATED, &placed.order)
        .located("/v1/store/orders/", id)
        .replayed(placed.replayed))
}

/// `GET /v1/store/orders` (listOrders): a page in id order, by status and pet if asked, and a
/// `Link` to the next one when more orders matched.
pub async fn list_orders(store: &Store, query: Option<&str>) -> Result<Reply, Error> {
    let query = OrdersQuery::parse(query.unwrap_or_default()).map_err(query_error)?;
    let page = store
        .list_orders(OrderQuery {
            status: query.filters.status,
            pet_id: query.filters.pet_id,
            search: query.filters.search(),
            sort: query.filters.sort.unwrap_or_default().0,
            after: query.after,
            limit: query.limit,
        })
        .await?;
    let mut reply = Reply::ok(page.json);
    reply.link_next(
        (page.more, page.last_id),
        "/v1/store/orders",
        |last_id, out| query.next_into(last_id, out),
    );
    Ok(reply)
}

/// `GET /v1/store/orders/{orderId}` (getOrder): the order with its ETag, or 304 when
/// `If-None-Match` names the current one.
pub async fn get_order(store: &Store, raw_id: &str, headers: &HeaderMap) -> Result<Reply, Error> {
    let id = order_id(raw_id)?;
    let order = store
        .get_order(id)
        .await?
        .ok_or_else(|| Error::from(StoreError::NotFound(Subject::order(id))))?;
    let sent = headers
        .get_all(IF_NONE_MATCH)
        .iter()
        .map(HeaderValue::as_bytes);
    if conditional::none_match(sent, id, order.revision) {
        // RFC 9110 15.4.5: a 304 carries the ETag the 200 would have.
        return Ok(Reply::empty(
            StatusCode::NOT_MODIFIED,
            Some(etag_value(order.etag())),
        ));
    }
    Ok(reply(StatusCode::OK, &order))
}

/// `POST /v1/store/orders/{orderId}/complete` and `…/cancel` (completeOrder, cancelOrder):
/// moves a placed order, and its pet with it, if `If-Match` allows; 200 with the order and
/// its new ETag. No body is needed, and one sent is not read.
pub async fn move_order(
    store: &Store,
    raw_id: &str,
    action: OrderAction,
    headers: &HeaderMap,
) -> Result<Reply, Error> {
    let id = order_id(raw_id)?;
    let precondition = precondition(headers, id);
    let moved = store
        .write(MoveOrder {
            id,
            action,
            precondition,
        })
        .await
        .map_err(|e| match e {
            // The tag compared is the order's, and the message says so.
            StoreError::PreconditionFailed => Error::PreconditionFailed("order"),
            e => e.into(),
        })?;
    Ok(reply(StatusCode::OK, &moved.order))
}

/// `GET /v1/store/inventory` (getInventory): pets by status, from the counters the writes
/// keep.
pub async fn get_inventory(store: &Store) -> Result<Reply, Error> {
    let inventory = store.inventory().await?;
    Ok(Reply::ok(Bytes::from(inventory_json(&inventory))))
}

/// `{"available","pending","sold","unset","total"}`, in that order (docs/orders.md): written
/// by hand, since a `serde_json` map would sort the members.
fn inventory_json(inventory: &Inventory) -> String {
    format!(
        r#"{{"available":{},"pending":{},"sold":{},"unset":{},"total":{}}}"#,
        inventory.available,
        inventory.pending,
        inventory.sold,
        inventory.unset,
        inventory.total()
    )
}

/// A 200 (or `status`) carrying one order, with its ETag.
fn reply(status: StatusCode, order: &Order) -> Reply {
    Reply::tagged(
        status,
        Bytes::from(order.to_json()),
        Some(etag_value(order.etag())),
    )
}

fn order_id(raw_id: &str) -> Result<OrderId, Error> {
    path_id("orderId", raw_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_inventory_names_its_counts_in_the_documented_order() {
        let inventory = Inventory {
            available: 3,
            pending: 1,
            sold: 20,
            unset: 0,
        };
        assert_eq!(
            inventory_json(&inventory),
            r#"{"available":3,"pending":1,"sold":20,"unset":0,"total":24}"#
        );
    }

    #[test]
    fn an_order_answer_carries_the_order_and_its_tag() {
        let order = Order::place(
            5,
            NewOrder {
                pet_id: 2,
                note: None,
            },
            1_795_305_600_000,
            None,
        );
        let answer = reply(StatusCode::CREATED, &order).located("/v1/store/orders/", order.id);
        assert_eq!(answer.etag, Some(HeaderValue::from_static("\"5.1\"")));
        assert_eq!(
            answer.headers,
            [(
                hyper::header::LOCATION,
                HeaderValue::from_static("/v1/store/orders/5")
            )]
        );
        let json: serde_json::Value = serde_json::from_slice(&answer.body).expect("JSON");
        assert_eq!(
            (&json["id"], &json["status"]),
            (&5.into(), &"placed".into())
        );
    }
}
