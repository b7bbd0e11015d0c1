//! Orders (issue 29, every assertion after `docs/orders.md`), on the real server: placeOrder's
//! answer and its refusals (unknown pet, a pet not available, a body out of rule, a media
//! type, an Idempotency-Key replayed or reused); one animal sold at most once under 100
//! concurrent orders on both stores, and across two instances on one PostgreSQL racing 64
//! clients; every (order state, action) pair; If-Match and If-None-Match; a held pet's status
//! and delete refused; holds that end (once, on PostgreSQL with two instances); a SIGKILL
//! between place and complete; listOrders and getOrder; the feed's order events; read-only
//! keys. The helpers here are shared with `categories` and `inventory`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use bytes::Bytes;
use hyper::Method;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE};
use serde_json::{Value, json};

use crate::pg_cluster::Cluster;
use crate::support::{
    Client, Options, Reply, Rng, Server, create_many, keys_with_a_reader, member_names,
    members_of_each, poll_until,
};

pub const ORDERS: &str = "/v1/store/orders";
/// The most a test waits for a hold that has ended to be expired: the server expires once a
/// second; the rest is margin for a machine shared with other builds.
pub const EXPIRY_DEADLINE: Duration = Duration::from_secs(20);
const ORDER_MEMBERS: [&str; 8] = [
    "cursor", "type", "at", "orderId", "order", "petId", "etag", "pet",
];
const CATEGORY_MEMBERS: [&str; 5] = ["cursor", "type", "at", "categoryId", "category"];
const PET_MEMBERS: [&str; 6] = ["cursor", "type", "at", "petId", "etag", "pet"];
const INVENTORY_MEMBERS: [&str; 5] = ["available", "pending", "sold", "unset", "total"];
const JSON_ONLY: &str = "request body must be sent as Content-Type: application/json";

// ------------------------------------------------------------------------------------------
// Helpers, shared with `categories` and `inventory`.

/// A cluster, started off the async workers.
pub fn cluster() -> Cluster {
    tokio::task::block_in_place(Cluster::start)
}

/// Options for a server on `cluster`'s database.
pub fn on_postgres(cluster: &Cluster) -> Options {
    Options {
        db: Some(cluster.url()),
        ..Options::default()
    }
}

/// `options` with `--order-hold hold`.
pub fn with_hold(mut options: Options, hold: &str) -> Options {
    options
        .args
        .extend(["--order-hold".to_owned(), hold.to_owned()]);
    options
}

/// Creates a pet with `status` (none: no status) and returns its id.
pub async fn pet_with(client: &mut Client, name: &str, status: Option<&str>) -> i64 {
    let mut body = json!({"name": name, "categoryId": 1});
    if let Some(status) = status {
        body["status"] = status.into();
    }
    client.create(&body.to_string()).await["id"]
        .as_i64()
        .expect("an id")
}

/// Creates an `available` pet and returns its id.
pub async fn available(client: &mut Client, name: &str) -> i64 {
    pet_with(client, name, Some("available")).await
}

pub async fn place(client: &mut Client, body: &str) -> Reply {
    client.post_json(ORDERS, body).await
}

/// Places an order for `pet` and returns it, asserting 201.
pub async fn placed(client: &mut Client, pet: i64) -> Value {
    let reply = place(client, &format!(r#"{{"petId":{pet}}}"#)).await;
    assert_eq!(reply.status, 201, "{:?}", reply.body);
    reply.json()
}

/// `POST /v1/store/orders/{order}/{action}` without a body.
pub async fn act(client: &mut Client, order: i64, action: &str) -> Reply {
    client
        .send_with(
            Method::POST,
            &format!("{ORDERS}/{order}/{action}"),
            &[],
            Bytes::new(),
        )
        .await
}

/// Completes or cancels `order`, asserting 200; returns the order after it.
pub async fn acted(client: &mut Client, order: i64, action: &str) -> Value {
    let reply = act(client, order, action).await;
    assert_eq!(reply.status, 200, "{action} {order}: {:?}", reply.body);
    reply.json()
}

/// The pet `id` as served (200).
pub async fn pet(client: &mut Client, id: i64) -> Reply {
    let reply = client.get(&format!("/v1/pets/{id}")).await;
    assert_eq!(reply.status, 200, "pet {id}: {:?}", reply.body);
    reply
}

/// The status of pet `id` (`null` when it has none).
pub async fn pet_status(client: &mut Client, id: i64) -> Value {
    pet(client, id)
        .await
        .json()
        .get("status")
        .cloned()
        .unwrap_or(Value::Null)
}

/// The order `id` as served (200).
pub async fn order(client: &mut Client, id: i64) -> Reply {
    let reply = client.get(&format!("{ORDERS}/{id}")).await;
    assert_eq!(reply.status, 200, "order {id}: {:?}", reply.body);
    reply
}

/// The id of an order or a pet.
pub fn id(value: &Value) -> i64 {
    value["id"]
        .as_i64()
        .unwrap_or_else(|| panic!("no id: {value}"))
}

/// Unix milliseconds of an RFC 3339 time with milliseconds, as the server writes them.
pub fn millis(time: &Value) -> i64 {
    let text = time
        .as_str()
        .unwrap_or_else(|| panic!("not a time: {time}"));
    assert!(
        text.ends_with('Z') && text.len() == 24,
        "UTC with milliseconds: {text}"
    );
    let at = humantime::parse_rfc3339(text).unwrap_or_else(|e| panic!("{text}: {e}"));
    i64::try_from(
        at.duration_since(UNIX_EPOCH)
            .expect("after 1970")
            .as_millis(),
    )
    .expect("a time in range")
}

/// Waits until order `id` has `status`; returns it.
pub async fn wait_for_status(client: &mut Client, id: i64, status: &str) -> Value {
    poll_until(
        EXPIRY_DEADLINE,
        &format!("order {id} {status}"),
        async || {
            let order = order(client, id).await.json();
            (order["status"] == status).then_some(order)
        },
    )
    .await
}

/// The inventory, checked for its members and their order; 200.
pub async fn inventory(client: &mut Client) -> Value {
    let reply = client.get("/v1/store/inventory").await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    assert_eq!(reply.header("content-type"), Some("application/json"));
    assert_eq!(member_names(&reply.body), INVENTORY_MEMBERS);
    reply.json()
}

/// The inventory a set of pets makes: their count by status.
pub fn counts<'a>(statuses: impl IntoIterator<Item = &'a Value>) -> Value {
    let mut counts = BTreeMap::from([("available", 0), ("pending", 0), ("sold", 0), ("unset", 0)]);
    let mut total = 0;
    for status in statuses {
        let key = status.as_str().unwrap_or("unset");
        *counts
            .get_mut(key)
            .unwrap_or_else(|| panic!("unknown status {status}")) += 1;
        total += 1;
    }
    json!({
        "available": counts["available"],
        "pending": counts["pending"],
        "sold": counts["sold"],
        "unset": counts["unset"],
        "total": total,
    })
}

/// The inventory of a full walk of `GET /v1/pets`, following every next link.
pub async fn walked_inventory(client: &mut Client) -> Value {
    let pets = client.list_all("/v1/pets?limit=7").await;
    counts(
        pets.iter()
            .map(|pet| pet.get("status").unwrap_or(&Value::Null)),
    )
}

/// The `after` parameter of an events path.
fn after_of(path: &str) -> Option<&str> {
    path.split_once('?')?
        .1
        .split('&')
        .find_map(|pair| pair.strip_prefix("after="))
}

/// Checks an event's members, in order, and that its subjects are its own.
fn check_event(event: &Value, members: &[String]) {
    let kind = event["type"].as_str().expect("a type");
    match kind.split_once('.').map(|(subject, _)| subject) {
        Some("pet") => assert_eq!(members, PET_MEMBERS, "{event}"),
        Some("order") => {
            assert_eq!(members, ORDER_MEMBERS, "{event}");
            assert_eq!(event["order"]["id"], event["orderId"], "{event}");
            assert_eq!(event["order"]["petId"], event["petId"], "{event}");
            assert_eq!(event["pet"]["id"], event["petId"], "{event}");
            let (status, pet_status) = match kind {
                "order.placed" => ("placed", "pending"),
                "order.completed" => ("completed", "sold"),
                "order.cancelled" => ("cancelled", "available"),
                "order.expired" => ("expired", "available"),
                _ => panic!("unknown type: {event}"),
            };
            assert_eq!(
                (&event["order"]["status"], &event["pet"]["status"]),
                (&Value::from(status), &Value::from(pet_status)),
                "{event}"
            );
        }
        Some("category") => {
            assert_eq!(members, CATEGORY_MEMBERS, "{event}");
            match kind {
                "category.deleted" => assert!(event["category"].is_null(), "{event}"),
                "category.created" | "category.updated" => {
                    assert_eq!(event["category"]["id"], event["categoryId"], "{event}");
                }
                _ => panic!("unknown type: {event}"),
            }
        }
        _ => panic!("unknown type: {event}"),
    }
}

/// Every event of the feed from `path` on (`/v1/events?…`), each checked, following next links
/// until a page is empty and its link stays where it was.
pub async fn feed(client: &mut Client, path: &str) -> Vec<Value> {
    let mut events = Vec::new();
    let mut path = path.to_owned();
    loop {
        let reply = client.get(&path).await;
        assert_eq!(reply.status, 200, "{path}: {:?}", reply.body);
        let page: Vec<Value> = serde_json::from_slice(&reply.body).expect("an array");
        for (event, members) in page.iter().zip(members_of_each(&reply.body)) {
            check_event(event, &members);
        }
        let next = reply.next_link().expect("an events page has a next link");
        if page.is_empty() && after_of(&next) == after_of(&path) {
            return events;
        }
        events.extend(page);
        path = next;
    }
}

/// The events of the whole feed whose type starts with `prefix` (`order.`, `category.`).
pub async fn events_of(client: &mut Client, prefix: &str) -> Vec<Value> {
    feed(client, "/v1/events?limit=1000")
        .await
        .into_iter()
        .filter(|event| {
            event["type"]
                .as_str()
                .is_some_and(|t| t.starts_with(prefix))
        })
        .collect()
}

/// A request with the key `key` (and a JSON body when `body` is not empty).
pub async fn send_as(
    client: &mut Client,
    key: &str,
    method: Method,
    path: &str,
    body: &str,
) -> Reply {
    let mut request = client
        .request(method, path)
        .header(AUTHORIZATION, format!("Bearer {key}"));
    if !body.is_empty() {
        request = request.header(CONTENT_TYPE, "application/json");
    }
    client.send(request, body.to_owned()).await
}

/// Asserts the 403 `forbidden` a read-only key gets for a write of `what` (orders, ...).
pub fn assert_forbidden(reply: &Reply, what: &str) {
    reply.assert_error(
        403,
        "forbidden",
        &format!("this API key is read-only: it may not create, change or delete {what}"),
    );
}

fn not_placed(order: i64, status: &str, action: &str) -> String {
    format!(
        "order {order} is {status}, which allows no change: only a placed order can be \
         completed or cancelled (asked: {action})"
    )
}

fn reserved(pet: i64, order: i64) -> String {
    format!("pet {pet} is held by order {order}: complete or cancel the order first")
}

// ------------------------------------------------------------------------------------------
// placeOrder.

#[tokio::test(flavor = "multi_thread")]
async fn placing_an_order_answers_201_with_location_etag_and_the_order_and_the_pet_becomes_pending()
{
    let server = Server::start();
    let mut client = server.h1().await;
    let rex = available(&mut client, "Rex").await;
    let reply = place(
        &mut client,
        &format!(r#"{{"petId":{rex},"note":"Ann, collects Saturday"}}"#),
    )
    .await;
    assert_eq!(reply.status, 201, "{:?}", reply.body);
    assert_eq!(reply.header("content-type"), Some("application/json"));
    let order = reply.json();
    let n = id(&order);
    assert_eq!(n, 1, "the first order is 1: {order}");
    assert_eq!(reply.header("location"), Some("/v1/store/orders/1"));
    assert_eq!(reply.etag(), "\"1.1\"");
    assert_eq!(
        member_names(&reply.body),
        ["id", "petId", "status", "placedAt", "expiresAt", "note"]
    );
    assert_eq!(
        (&order["petId"], &order["status"], &order["note"]),
        (
            &json!(rex),
            &json!("placed"),
            &json!("Ann, collects Saturday")
        )
    );
    // The default hold is 30 minutes.
    assert_eq!(
        millis(&order["expiresAt"]) - millis(&order["placedAt"]),
        30 * 60 * 1000
    );
    assert_eq!(pet_status(&mut client, rex).await, "pending");
    let got = self::order(&mut client, n).await;
    assert_eq!((got.json(), got.etag()), (order.clone(), "\"1.1\""));

    // Without a note, there is no note member; the next order is 2.
    let tom = available(&mut client, "Tom").await;
    let reply = place(&mut client, &format!(r#"{{"petId":{tom}}}"#)).await;
    assert_eq!(reply.status, 201, "{:?}", reply.body);
    assert_eq!(
        member_names(&reply.body),
        ["id", "petId", "status", "placedAt", "expiresAt"]
    );
    assert_eq!(reply.header("location"), Some("/v1/store/orders/2"));
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hold_of_0_places_orders_without_expires_at() {
    let server = Server::start_with(with_hold(Options::default(), "0"));
    let mut client = server.h2().await;
    let rex = available(&mut client, "Rex").await;
    let reply = place(&mut client, &format!(r#"{{"petId":{rex}}}"#)).await;
    assert_eq!(reply.status, 201, "{:?}", reply.body);
    assert_eq!(
        member_names(&reply.body),
        ["id", "petId", "status", "placedAt"]
    );
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_order_for_an_unknown_pet_is_404_and_for_one_not_available_409_naming_its_status() {
    let server = Server::start();
    let mut client = server.h2().await;
    place(&mut client, r#"{"petId":999}"#).await.assert_error(
        404,
        "not_found",
        "no pet has id 999",
    );
    for (status, message) in [
        (Some("pending"), "is pending, not available"),
        (Some("sold"), "is sold, not available"),
        (None, "has no status, so it is not available"),
    ] {
        let pet = pet_with(&mut client, "Kit", status).await;
        place(&mut client, &format!(r#"{{"petId":{pet}}}"#))
            .await
            .assert_error(409, "pet_not_available", &format!("pet {pet} {message}"));
        assert_eq!(pet_status(&mut client, pet).await, json!(status));
    }
    // Pending by hand is not available; patched back, it can be ordered.
    let pending = pet_with(&mut client, "Tom", Some("pending")).await;
    let patched = client
        .patch_json(&format!("/v1/pets/{pending}"), r#"{"status":"available"}"#)
        .await;
    assert_eq!(patched.status, 200, "{:?}", patched.body);
    let order = placed(&mut client, pending).await;
    assert_eq!(client.list_all(ORDERS).await, [order]);
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_order_body_with_id_an_unknown_member_or_a_long_note_is_400_and_another_media_type_415()
{
    let server = Server::start();
    let mut client = server.h1().await;
    let rex = available(&mut client, "Rex").await;
    let long = "é".repeat(501);
    let cases = [
        (
            format!(r#"{{"petId":{rex},"id":7}}"#),
            "id is assigned by the server: leave it out".to_owned(),
        ),
        (
            format!(r#"{{"petId":{rex},"status":"placed"}}"#),
            r#"unknown member "status": an order takes petId and note"#.to_owned(),
        ),
        (
            format!(r#"{{"petId":{rex},"note":"{long}"}}"#),
            "note must be at most 500 characters long".to_owned(),
        ),
        (
            format!(r#"{{"petId":{rex},"note":null}}"#),
            "note must not be null".to_owned(),
        ),
        (r#"{"note":"x"}"#.to_owned(), "petId is required".to_owned()),
        (
            format!(r#"{{"petId":"{rex}"}}"#),
            "petId must be an integer".to_owned(),
        ),
        (
            format!(r#"{{"petId":{rex},"petId":{rex}}}"#),
            r#"duplicate key "petId""#.to_owned(),
        ),
        (
            "[]".to_owned(),
            "request body must be a JSON object".to_owned(),
        ),
        (
            String::new(),
            "request body is required: a JSON object".to_owned(),
        ),
    ];
    for (body, message) in &cases {
        place(&mut client, body)
            .await
            .assert_error(400, "invalid_body", message);
    }
    place(&mut client, &format!(r#"{{"petId":{rex}"#))
        .await
        .assert_error_prefix(400, "invalid_body", "request body is not valid JSON: ");
    let body = format!(r#"{{"petId":{rex}}}"#);
    for content_type in [
        Some("text/plain"),
        Some("application/merge-patch+json"),
        None,
    ] {
        let mut request = client.authed(Method::POST, ORDERS);
        if let Some(content_type) = content_type {
            request = request.header(CONTENT_TYPE, content_type);
        }
        client.send(request, body.clone()).await.assert_error(
            415,
            "unsupported_media_type",
            JSON_ONLY,
        );
    }
    assert_eq!(pet_status(&mut client, rex).await, "available");
    assert_eq!(client.list_all(ORDERS).await, Vec::<Value>::new());

    // A note of exactly 500 characters is taken.
    let fits = "é".repeat(500);
    let reply = place(
        &mut client,
        &format!(r#"{{"petId":{rex},"note":"{fits}"}}"#),
    )
    .await;
    assert_eq!(reply.status, 201, "{:?}", reply.body);
    assert_eq!(reply.json()["note"], fits.as_str());
    server.stop();
}

/// `POST /v1/store/orders` with `Idempotency-Key: key`.
async fn place_keyed(client: &mut Client, key: &str, body: &str) -> Reply {
    let headers = [
        ("content-type", "application/json"),
        ("idempotency-key", key),
    ];
    client
        .send_with(Method::POST, ORDERS, &headers, body.to_owned())
        .await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_retry_with_the_same_idempotency_key_replays_the_order_as_placed_and_another_body_gets_422()
 {
    let server = Server::start();
    let mut client = server.h2().await;
    let rex = available(&mut client, "Rex").await;
    let tom = available(&mut client, "Tom").await;
    let body = format!(r#"{{"petId":{rex},"note":"till 1"}}"#);
    let first = place_keyed(&mut client, "till-1-sale-42", &body).await;
    // Another spelling of the same order is the same body.
    let again = place_keyed(
        &mut client,
        "till-1-sale-42",
        &format!(r#"{{ "note": "till 1", "petId": {rex} }}"#),
    )
    .await;
    crate::idempotency::assert_replay(&first, &again);
    assert_eq!(first.json()["status"], "placed");

    // After the order moved on, a retry still gets the order as it was placed.
    let n = id(&first.json());
    acted(&mut client, n, "complete").await;
    crate::idempotency::assert_replay(
        &first,
        &place_keyed(&mut client, "till-1-sale-42", &body).await,
    );

    let other = format!(r#"{{"petId":{tom}}}"#);
    let reused = place_keyed(&mut client, "till-1-sale-42", &other).await;
    reused.assert_error(
        422,
        "idempotency_key_reused",
        "this Idempotency-Key was already used with a different request body",
    );
    assert_eq!(pet_status(&mut client, tom).await, "available");
    let orders = client.list_all(ORDERS).await;
    assert_eq!(orders.len(), 1, "{orders:?}");
    server.stop();
}

// ------------------------------------------------------------------------------------------
// One animal, one sale.

#[tokio::test(flavor = "multi_thread")]
async fn of_100_concurrent_orders_for_one_pet_over_http2_and_http1_exactly_one_gets_201() {
    hundred_orders_for_one_pet(Options::default()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn on_postgres_of_100_concurrent_orders_for_one_pet_exactly_one_gets_201() {
    let cluster = cluster();
    hundred_orders_for_one_pet(on_postgres(&cluster)).await;
}

/// 100 orders for one available pet at once: 50 over two HTTP/2 connections, 50 over HTTP/1.1
/// connections of their own. Exactly one 201; 99 × 409 `pet_not_available`, the pet pending.
async fn hundred_orders_for_one_pet(options: Options) {
    let server = Server::start_with(options);
    let mut client = server.h2().await;
    let rex = available(&mut client, "Rex").await;
    let shared = [server.h2().await, server.h2().await];
    let start = Arc::new(tokio::sync::Barrier::new(100));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..100 {
        let mut client = match i % 4 {
            0 | 1 => shared[i % 2].share(),
            _ => server.h1().await,
        };
        let start = Arc::clone(&start);
        tasks.spawn(async move {
            start.wait().await;
            place(
                &mut client,
                &format!(r#"{{"petId":{rex},"note":"client {i}"}}"#),
            )
            .await
        });
    }
    let replies = tasks.join_all().await;
    let (won, lost): (Vec<&Reply>, Vec<&Reply>) =
        replies.iter().partition(|reply| reply.status == 201);
    assert_eq!(won.len(), 1, "exactly one 201: {won:?}");
    for reply in lost {
        reply.assert_error(
            409,
            "pet_not_available",
            &format!("pet {rex} is pending, not available"),
        );
    }
    let order = won[0].json();
    assert_eq!(pet_status(&mut client, rex).await, "pending");
    assert_eq!(
        client.list_all(&format!("{ORDERS}?petId={rex}")).await,
        std::slice::from_ref(&order)
    );
    let placed_events = events_of(&mut client, "order.").await;
    assert_eq!(placed_events.len(), 1, "{placed_events:?}");
    assert_eq!(placed_events[0]["order"], order);
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn on_postgres_two_instances_racing_64_clients_for_50_pets_sell_each_once() {
    const PETS: usize = 50;
    const CLIENTS: usize = 64;
    let cluster = cluster();
    let servers = [
        Server::start_with(on_postgres(&cluster)),
        Server::start_with(on_postgres(&cluster)),
    ];
    let pets = create_many(&servers[0], PETS, |_| Some("available")).await;
    let start = Arc::new(tokio::sync::Barrier::new(CLIENTS));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..CLIENTS {
        let server = &servers[i % 2];
        let mut client = if i % 4 < 2 {
            server.h1().await
        } else {
            server.h2().await
        };
        let mut order = pets.clone();
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (i as u64 + 1));
        for j in (1..order.len()).rev() {
            order.swap(j, rng.below(j + 1));
        }
        let start = Arc::clone(&start);
        tasks.spawn(async move {
            start.wait().await;
            let mut won = Vec::new();
            for pet in order {
                let reply = place(&mut client, &format!(r#"{{"petId":{pet}}}"#)).await;
                match reply.status {
                    201 => won.push((pet, reply.json(), i % 2)),
                    _ => reply.assert_error(
                        409,
                        "pet_not_available",
                        &format!("pet {pet} is pending, not available"),
                    ),
                }
            }
            won
        });
    }
    let mut sales: BTreeMap<i64, Vec<(Value, usize)>> = BTreeMap::new();
    for (pet, order, instance) in tasks.join_all().await.into_iter().flatten() {
        sales.entry(pet).or_default().push((order, instance));
    }
    for pet in &pets {
        let orders = sales.get(pet).map_or(0, Vec::len);
        assert_eq!(orders, 1, "pet {pet}: {orders} orders got 201");
    }
    let instances: Vec<usize> = sales.values().map(|sale| sale[0].1).collect();
    eprintln!(
        "sales through the first instance: {}, the second: {}",
        instances.iter().filter(|&&i| i == 0).count(),
        instances.iter().filter(|&&i| i == 1).count()
    );

    let mut clients = [servers[0].h2().await, servers[1].h1().await];
    for (turn, sale) in sales.values().enumerate() {
        let completed = acted(&mut clients[turn % 2], id(&sale[0].0), "complete").await;
        assert_eq!(completed["status"], "completed");
    }
    let sold = json!({"available": 0, "pending": 0, "sold": PETS, "unset": 0, "total": PETS});
    for client in &mut clients {
        assert_eq!(inventory(client).await, sold);
        assert_eq!(walked_inventory(client).await, sold);
        let orders = client.list_all(&format!("{ORDERS}?limit=100")).await;
        assert_eq!(orders.len(), PETS);
        let mut petted: Vec<i64> = orders
            .iter()
            .map(|order| order["petId"].as_i64().expect("a petId"))
            .collect();
        petted.sort_unstable();
        assert_eq!(petted, pets, "each pet sold by exactly one order");
        assert!(orders.iter().all(|order| order["status"] == "completed"));
    }
    for server in servers {
        server.stop();
    }
}

// ------------------------------------------------------------------------------------------
// Moves.

#[tokio::test(flavor = "multi_thread")]
async fn every_order_state_and_action_pair_answers_as_the_table_says_and_leaves_the_pet_so() {
    // Two orders expired on a server with a hold of 1 s; then the same store with the default.
    let server = Server::start_with(with_hold(Options::default(), "1s"));
    let mut client = server.h1().await;
    let mut expired = Vec::new();
    for action in ["complete", "cancel"] {
        let pet = available(&mut client, "Old").await;
        expired.push((action, pet, id(&placed(&mut client, pet).await)));
    }
    for (_, _, n) in &expired {
        wait_for_status(&mut client, *n, "expired").await;
    }
    drop(client);
    let server = Server::start_on(server.stop());
    let mut client = server.h2().await;

    let table = [
        ("placed", "complete", 200, "completed", "sold"),
        ("placed", "cancel", 200, "cancelled", "available"),
        ("completed", "complete", 409, "completed", "sold"),
        ("completed", "cancel", 409, "completed", "sold"),
        ("cancelled", "complete", 409, "cancelled", "available"),
        ("cancelled", "cancel", 409, "cancelled", "available"),
        ("expired", "complete", 409, "expired", "available"),
        ("expired", "cancel", 409, "expired", "available"),
    ];
    for (state, action, status, order_after, pet_after) in table {
        let (pet, n) = match state {
            "expired" => {
                let &(_, pet, n) = expired
                    .iter()
                    .find(|(a, _, _)| *a == action)
                    .expect("one expired order per action");
                (pet, n)
            }
            _ => {
                let pet = available(&mut client, "Rex").await;
                let n = id(&placed(&mut client, pet).await);
                match state {
                    "completed" => {
                        acted(&mut client, n, "complete").await;
                    }
                    "cancelled" => {
                        acted(&mut client, n, "cancel").await;
                    }
                    _ => {}
                }
                (pet, n)
            }
        };
        let before = order(&mut client, n).await;
        assert_eq!(before.json()["status"], state);
        let reply = act(&mut client, n, action).await;
        let row = format!("{state} × {action}");
        if status == 200 {
            assert_eq!(reply.status, 200, "{row}: {:?}", reply.body);
            let after = reply.json();
            assert_eq!(after["status"], order_after, "{row}");
            assert_eq!(reply.etag(), format!("\"{n}.2\""), "{row}");
            assert!(
                millis(&after["closedAt"]) >= millis(&after["placedAt"]),
                "{row}: {after}"
            );
            assert_eq!(
                member_names(&reply.body),
                ["id", "petId", "status", "placedAt", "expiresAt", "closedAt"],
                "{row}"
            );
            let got = order(&mut client, n).await;
            assert_eq!((got.json(), got.etag()), (after, reply.etag()), "{row}");
        } else {
            reply.assert_error(409, "invalid_transition", &not_placed(n, state, action));
            let got = order(&mut client, n).await;
            assert_eq!(
                (got.json(), got.etag()),
                (before.json(), before.etag()),
                "{row}: nothing changes"
            );
        }
        assert_eq!(pet_status(&mut client, pet).await, pet_after, "{row}");
    }
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn if_match_with_a_tag_not_current_is_412_and_changes_nothing_and_if_none_match_gets_304() {
    let server = Server::start();
    let mut client = server.h2().await;
    let rex = available(&mut client, "Rex").await;
    let n = id(&placed(&mut client, rex).await);
    let path = |action: &str| format!("{ORDERS}/{n}/{action}");
    let stale = |reply: Reply| {
        reply.assert_error(
            412,
            "precondition_failed",
            "If-Match does not match the order's current ETag",
        );
    };

    for action in ["complete", "cancel"] {
        let tag = format!("\"{n}.2\"");
        stale(
            client
                .send_with(
                    Method::POST,
                    &path(action),
                    &[("if-match", tag.as_str())],
                    Bytes::new(),
                )
                .await,
        );
    }
    let unchanged = order(&mut client, n).await;
    assert_eq!(
        (&unchanged.json()["status"], unchanged.etag()),
        (&json!("placed"), format!("\"{n}.1\"").as_str())
    );
    assert_eq!(pet_status(&mut client, rex).await, "pending");

    let tag = format!("\"{n}.1\"");
    let done = client
        .send_with(
            Method::POST,
            &path("complete"),
            &[("if-match", tag.as_str())],
            Bytes::new(),
        )
        .await;
    assert_eq!(done.status, 200, "{:?}", done.body);
    assert_eq!(done.etag(), format!("\"{n}.2\""));
    // The tag it had when placed is old now: the precondition fails before anything else.
    stale(
        client
            .send_with(
                Method::POST,
                &path("cancel"),
                &[("if-match", tag.as_str())],
                Bytes::new(),
            )
            .await,
    );
    assert_eq!(pet_status(&mut client, rex).await, "sold");

    let current = format!("\"{n}.2\"");
    let not_modified = client
        .send_with(
            Method::GET,
            &format!("{ORDERS}/{n}"),
            &[("if-none-match", current.as_str())],
            Bytes::new(),
        )
        .await;
    assert_eq!(not_modified.status, 304);
    assert_eq!(not_modified.etag(), current);
    assert!(not_modified.body.is_empty());
    let modified = client
        .send_with(
            Method::GET,
            &format!("{ORDERS}/{n}"),
            &[("if-none-match", tag.as_str())],
            Bytes::new(),
        )
        .await;
    assert_eq!(modified.status, 200);
    assert_eq!(modified.json(), done.json());
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_held_pet_s_status_and_delete_get_409_pet_reserved_but_its_name_changes_and_after_cancel_both_work()
 {
    let server = Server::start();
    let mut client = server.h1().await;
    let rex = available(&mut client, "Rex").await;
    let n = id(&placed(&mut client, rex).await);
    let path = format!("/v1/pets/{rex}");
    for body in [
        r#"{"status":"sold"}"#,
        r#"{"status":"available"}"#,
        r#"{"status":"pending"}"#,
        r#"{"status":null}"#,
        r#"{"name":"Rex","status":"sold"}"#,
    ] {
        client
            .patch_json(&path, body)
            .await
            .assert_error(409, "pet_reserved", &reserved(rex, n));
    }
    client
        .delete(&path)
        .await
        .assert_error(409, "pet_reserved", &reserved(rex, n));
    let renamed = client
        .patch_json(&path, r#"{"name":"Rex II","categoryId":4}"#)
        .await;
    assert_eq!(renamed.status, 200, "{:?}", renamed.body);
    assert_eq!(
        renamed.json(),
        json!({"id": rex, "name": "Rex II", "categoryId": 4, "status": "pending"})
    );

    acted(&mut client, n, "cancel").await;
    let patched = client.patch_json(&path, r#"{"status":null}"#).await;
    assert_eq!(patched.status, 200, "{:?}", patched.body);
    assert_eq!(patched.json().get("status"), None);
    assert_eq!(client.delete(&path).await.status, 204);
    server.stop();
}

// ------------------------------------------------------------------------------------------
// Holds.

#[tokio::test(flavor = "multi_thread")]
async fn an_order_expires_after_its_hold_and_its_pet_is_available_and_the_feed_says_order_expired()
{
    let server = Server::start_with(with_hold(Options::default(), "2s"));
    let mut client = server.h2().await;
    let rex = available(&mut client, "Rex").await;
    let placed = placed(&mut client, rex).await;
    let n = id(&placed);
    let ends = millis(&placed["expiresAt"]);
    assert_eq!(ends - millis(&placed["placedAt"]), 2000);

    let expired = wait_for_status(&mut client, n, "expired").await;
    let closed = millis(&expired["closedAt"]);
    assert!(
        (ends..ends + 10_000).contains(&closed),
        "expired at {closed}, the hold ended at {ends}"
    );
    assert_eq!(order(&mut client, n).await.etag(), format!("\"{n}.2\""));
    let pet = pet(&mut client, rex).await;
    assert_eq!(pet.json()["status"], "available");

    let events = events_of(&mut client, "order.").await;
    let kinds: Vec<&Value> = events.iter().map(|event| &event["type"]).collect();
    assert_eq!(kinds, ["order.placed", "order.expired"]);
    assert_eq!(
        (&events[1]["order"], &events[1]["pet"], &events[1]["etag"]),
        (&expired, &pet.json(), &json!(pet.etag()))
    );

    act(&mut client, n, "complete").await.assert_error(
        409,
        "invalid_transition",
        &not_placed(n, "expired", "complete"),
    );
    // The pet can be ordered again.
    assert_eq!(self::placed(&mut client, rex).await["petId"], rex);
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn on_postgres_two_instances_expire_each_order_exactly_once() {
    const ORDERS_PLACED: usize = 12;
    let cluster = cluster();
    let options = with_hold(on_postgres(&cluster), "2s");
    let servers = [
        Server::start_with(options.clone()),
        Server::start_with(options),
    ];
    let mut clients = [servers[0].h1().await, servers[1].h2().await];
    let mut orders = Vec::new();
    for i in 0..ORDERS_PLACED {
        let client = &mut clients[i % 2];
        let pet = available(client, "Rex").await;
        orders.push(id(&placed(client, pet).await));
    }
    for (i, n) in orders.iter().enumerate() {
        wait_for_status(&mut clients[i % 2], *n, "expired").await;
    }
    for client in &mut clients {
        let mut expired: Vec<i64> = events_of(client, "order.expired")
            .await
            .iter()
            .map(|event| event["orderId"].as_i64().expect("an orderId"))
            .collect();
        // The instances expire in batches of their own, so the feed's order is theirs.
        expired.sort_unstable();
        assert_eq!(expired, orders, "one order.expired per order");
        let all = json!({"available": ORDERS_PLACED, "pending": 0, "sold": 0, "unset": 0,
                         "total": ORDERS_PLACED});
        assert_eq!(inventory(client).await, all);
    }
    for server in servers {
        server.stop();
    }
}

// ------------------------------------------------------------------------------------------
// Crashes.

#[tokio::test(flavor = "multi_thread")]
async fn an_order_placed_before_a_sigkill_is_placed_after_the_restart_and_completes() {
    crash_between_place_and_complete(Options::default()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn on_postgres_an_order_placed_before_a_sigkill_is_placed_after_the_restart_and_completes() {
    let cluster = cluster();
    crash_between_place_and_complete(on_postgres(&cluster)).await;
}

/// A 201 place, SIGKILL, restart: the order and its pet are as acknowledged, the pet still
/// cannot be ordered twice, and completing sells it.
async fn crash_between_place_and_complete(options: Options) {
    let server = Server::start_with(options.clone());
    let mut client = server.h1().await;
    let rex = available(&mut client, "Rex").await;
    let placed = placed(&mut client, rex).await;
    let n = id(&placed);
    drop(client);
    let server = Server::start_after_crash_with(server.kill(), options);
    let mut client = server.h2().await;
    let got = order(&mut client, n).await;
    assert_eq!(
        (got.json(), got.etag()),
        (placed, format!("\"{n}.1\"").as_str())
    );
    assert_eq!(pet_status(&mut client, rex).await, "pending");
    place(&mut client, &format!(r#"{{"petId":{rex}}}"#))
        .await
        .assert_error(
            409,
            "pet_not_available",
            &format!("pet {rex} is pending, not available"),
        );
    assert_eq!(
        acted(&mut client, n, "complete").await["status"],
        "completed"
    );
    assert_eq!(pet_status(&mut client, rex).await, "sold");
    assert_eq!(
        inventory(&mut client).await,
        json!({"available": 0, "pending": 0, "sold": 1, "unset": 0, "total": 1})
    );
    // The next order gets a new id.
    let tom = available(&mut client, "Tom").await;
    assert!(id(&self::placed(&mut client, tom).await) > n);
    server.stop();
}

// ------------------------------------------------------------------------------------------
// listOrders and getOrder.

#[tokio::test(flavor = "multi_thread")]
async fn list_orders_pages_by_link_and_filters_by_status_and_pet_and_refuses_a_bad_cursor() {
    let server = Server::start();
    let mut client = server.h1().await;
    let mut pets = Vec::new();
    let mut orders = Vec::new();
    for i in 0..7 {
        let pet = available(&mut client, &format!("pet-{i}")).await;
        pets.push(pet);
        orders.push(id(&placed(&mut client, pet).await));
    }
    acted(&mut client, orders[1], "complete").await;
    acted(&mut client, orders[4], "complete").await;
    acted(&mut client, orders[2], "cancel").await;
    let ids = |listed: Vec<Value>| listed.iter().map(id).collect::<Vec<i64>>();

    // Pages of 3: two next links, then none; every order once, in id order, as served.
    let first = client.get(&format!("{ORDERS}?limit=3")).await;
    assert_eq!(first.status, 200, "{:?}", first.body);
    assert_eq!(first.header("content-type"), Some("application/json"));
    assert_eq!(ids(first.pets()), orders[..3]);
    let all = client.list_all(&format!("{ORDERS}?limit=3")).await;
    assert_eq!(ids(all.clone()), orders);
    for listed in &all {
        assert_eq!(&order(&mut client, id(listed)).await.json(), listed);
    }
    let last = client.get(&format!("{ORDERS}?limit=7")).await;
    assert_eq!((last.status, last.next_link()), (200, None));

    for (query, expected) in [
        (
            "status=placed",
            vec![orders[0], orders[3], orders[5], orders[6]],
        ),
        ("status=completed", vec![orders[1], orders[4]]),
        ("status=cancelled", vec![orders[2]]),
        ("status=expired", vec![]),
        (&format!("petId={}", pets[2]) as &str, vec![orders[2]]),
        (&format!("petId={}&status=placed", pets[2]), vec![]),
        (
            &format!("petId={}&status=completed", pets[4]),
            vec![orders[4]],
        ),
        ("petId=999", vec![]),
    ] {
        let listed = client.list_all(&format!("{ORDERS}?{query}&limit=2")).await;
        assert_eq!(ids(listed), expected, "{query}");
    }

    // A cursor is good only for the filters it was made with.
    let placed_page = client.get(&format!("{ORDERS}?status=placed&limit=2")).await;
    let next = placed_page.next_link().expect("more placed orders");
    let cursor = next
        .split('&')
        .find_map(|pair| pair.strip_prefix("cursor="))
        .unwrap_or_else(|| panic!("a cursor in {next}"));
    client
        .get(&format!(
            "{ORDERS}?status=completed&limit=2&cursor={cursor}"
        ))
        .await
        .assert_error(
            400,
            "invalid_cursor",
            "cursor belongs to a list with another status filter",
        );
    client
        .get(&format!("{ORDERS}?cursor=not-a-cursor"))
        .await
        .assert_error(
            400,
            "invalid_cursor",
            "cursor is not valid: pass the cursor of a next link unchanged",
        );
    for limit in ["0", "101", "x"] {
        client
            .get(&format!("{ORDERS}?limit={limit}"))
            .await
            .assert_error(
                400,
                "invalid_parameter",
                "limit must be an integer from 1 to 100",
            );
    }
    client
        .get(&format!("{ORDERS}?status=lost"))
        .await
        .assert_error(
            400,
            "invalid_parameter",
            "status must be one of placed, completed, cancelled, expired",
        );
    client.get(&format!("{ORDERS}?petId=x")).await.assert_error(
        400,
        "invalid_parameter",
        "petId must be a decimal integer within int64",
    );
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn get_order_of_an_unknown_id_is_404_and_of_one_that_is_not_an_int64_400() {
    let server = Server::start();
    let mut client = server.h2().await;
    for n in ["1", "-5", "9223372036854775807"] {
        client.get(&format!("{ORDERS}/{n}")).await.assert_error(
            404,
            "not_found",
            &format!("no order has id {n}"),
        );
        for action in ["complete", "cancel"] {
            client
                .send_with(
                    Method::POST,
                    &format!("{ORDERS}/{n}/{action}"),
                    &[],
                    Bytes::new(),
                )
                .await
                .assert_error(404, "not_found", &format!("no order has id {n}"));
        }
    }
    for n in ["abc", "1.0", "9223372036854775808", "+1"] {
        client.get(&format!("{ORDERS}/{n}")).await.assert_error(
            400,
            "invalid_parameter",
            "orderId must be a decimal integer within int64",
        );
    }
    server.stop();
}

// ------------------------------------------------------------------------------------------
// Events and keys.

#[tokio::test(flavor = "multi_thread")]
async fn every_order_change_is_an_event_with_the_order_and_the_pet_after_it_and_type_filters_keep_them()
 {
    let server = Server::start();
    let mut client = server.h1().await;
    let mut expected = Vec::new();
    for action in ["complete", "cancel"] {
        let rex = available(&mut client, "Rex").await;
        let order = placed(&mut client, rex).await;
        let pet = pet(&mut client, rex).await;
        expected.push((
            "order.placed",
            order.clone(),
            pet.json(),
            pet.etag().to_owned(),
        ));
        let after = acted(&mut client, id(&order), action).await;
        let pet = self::pet(&mut client, rex).await;
        let kind = if action == "complete" {
            "order.completed"
        } else {
            "order.cancelled"
        };
        expected.push((kind, after, pet.json(), pet.etag().to_owned()));
    }
    let events = events_of(&mut client, "order.").await;
    assert_eq!(events.len(), expected.len(), "{events:?}");
    for (event, (kind, order, pet, etag)) in events.iter().zip(&expected) {
        assert_eq!(
            (&event["type"], &event["orderId"], &event["order"]),
            (&json!(kind), &order["id"], order),
            "{event}"
        );
        assert_eq!(
            (&event["petId"], &event["pet"], &event["etag"]),
            (&pet["id"], pet, &json!(etag)),
            "{event}"
        );
    }
    let filtered = feed(
        &mut client,
        "/v1/events?type=order.placed,order.completed&limit=1",
    )
    .await;
    let kinds: Vec<&Value> = filtered.iter().map(|event| &event["type"]).collect();
    assert_eq!(kinds, ["order.placed", "order.completed", "order.placed"]);
    assert_eq!(filtered[1], events[1]);
    assert_eq!(
        feed(&mut client, "/v1/events?type=order.expired").await,
        Vec::<Value>::new()
    );
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_read_only_key_reads_orders_and_the_inventory_and_gets_403_on_every_order_write() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (keys, reader) = keys_with_a_reader(dir.path());
    let server = Server::start_with(Options {
        api_keys: keys,
        ..Options::default()
    });
    let mut client = server.h2().await;
    let rex = available(&mut client, "Rex").await;
    let tom = available(&mut client, "Tom").await;
    let n = id(&placed(&mut client, rex).await);
    for path in [
        ORDERS.to_owned(),
        format!("{ORDERS}/{n}"),
        format!("{ORDERS}?status=placed"),
        "/v1/store/inventory".to_owned(),
    ] {
        let reply = send_as(&mut client, &reader, Method::GET, &path, "").await;
        assert_eq!(reply.status, 200, "{path}: {:?}", reply.body);
    }
    let body = format!(r#"{{"petId":{tom}}}"#);
    assert_forbidden(
        &send_as(&mut client, &reader, Method::POST, ORDERS, &body).await,
        "orders",
    );
    for action in ["complete", "cancel"] {
        let path = format!("{ORDERS}/{n}/{action}");
        assert_forbidden(
            &send_as(&mut client, &reader, Method::POST, &path, "").await,
            "orders",
        );
    }
    assert_eq!(order(&mut client, n).await.json()["status"], "placed");
    assert_eq!(pet_status(&mut client, rex).await, "pending");
    assert_eq!(pet_status(&mut client, tom).await, "available");
    server.stop();
}
