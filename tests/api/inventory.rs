//! The inventory (issue 29, `docs/orders.md`, "The inventory"), on the real server: the counts
//! of a full walk of `GET /v1/pets` after every kind of change, and after a random mix of
//! creates, patches, deletes, places, completes and cancels on both stores, each write's
//! answer checked against a model of the store. A failing run prints `INVENTORY_SEED=N`;
//! setting it repeats the run.

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use crate::orders::{act, cluster, counts, id, inventory, on_postgres, place, walked_inventory};
use crate::support::{Client, Options, Rng, Server};

const STATUSES: [Option<&str>; 5] = [
    Some("available"),
    Some("available"),
    Some("pending"),
    Some("sold"),
    None,
];

#[tokio::test(flavor = "multi_thread")]
async fn an_empty_store_s_inventory_is_all_zero_and_each_change_moves_its_counts() {
    let server = Server::start();
    let mut client = server.h1().await;
    let zero = json!({"available": 0, "pending": 0, "sold": 0, "unset": 0, "total": 0});
    assert_eq!(inventory(&mut client).await, zero);
    let rex = client
        .create(r#"{"name":"Rex","categoryId":1,"status":"available"}"#)
        .await;
    let tom = client.create(r#"{"name":"Tom","categoryId":1}"#).await;
    let expect = |available, pending, sold, unset| {
        json!({"available": available, "pending": pending, "sold": sold, "unset": unset,
               "total": available + pending + sold + unset})
    };
    assert_eq!(inventory(&mut client).await, expect(1, 0, 0, 1));
    let order = place(&mut client, &format!(r#"{{"petId":{}}}"#, rex["id"])).await;
    assert_eq!(order.status, 201, "{:?}", order.body);
    assert_eq!(inventory(&mut client).await, expect(0, 1, 0, 1));
    assert_eq!(
        act(&mut client, id(&order.json()), "complete").await.status,
        200
    );
    assert_eq!(inventory(&mut client).await, expect(0, 0, 1, 1));
    let patched = client
        .patch_json(
            &format!("/v1/pets/{}", tom["id"]),
            r#"{"status":"pending"}"#,
        )
        .await;
    assert_eq!(patched.status, 200, "{:?}", patched.body);
    assert_eq!(inventory(&mut client).await, expect(0, 1, 1, 0));
    assert_eq!(
        client
            .delete(&format!("/v1/pets/{}", rex["id"]))
            .await
            .status,
        204
    );
    assert_eq!(inventory(&mut client).await, expect(0, 1, 0, 0));
    assert_eq!(walked_inventory(&mut client).await, expect(0, 1, 0, 0));
    // Kept across a restart.
    let server = server.restart();
    let mut client = server.h2().await;
    assert_eq!(inventory(&mut client).await, expect(0, 1, 0, 0));
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn after_a_random_mix_of_writes_the_inventory_equals_a_full_walk_of_the_pets() {
    random_mix(Options::default()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn on_postgres_after_a_random_mix_of_writes_the_inventory_equals_a_full_walk_of_the_pets() {
    let cluster = cluster();
    random_mix(on_postgres(&cluster)).await;
}

/// A generator seeded from the clock (or `INVENTORY_SEED`); the seed is printed.
fn seeded() -> Rng {
    let seed = std::env::var("INVENTORY_SEED")
        .ok()
        .and_then(|seed| seed.parse().ok())
        .unwrap_or_else(|| {
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .expect("a clock after 1970")
                .subsec_nanos();
            u64::from(nanos) ^ 0x9e37_79b9_7f4a_7c15
        });
    eprintln!("INVENTORY_SEED={seed}");
    Rng(seed | 1)
}

/// What the store should hold: each pet's status, and which orders are placed (on which pet)
/// or final.
#[derive(Default)]
struct Model {
    pets: BTreeMap<i64, Value>,
    placed: BTreeMap<i64, i64>,
    closed: Vec<(i64, &'static str)>,
}

impl Model {
    fn holder(&self, pet: i64) -> Option<i64> {
        self.placed
            .iter()
            .find_map(|(&order, &held)| (held == pet).then_some(order))
    }

    fn pick<T: Copy>(rng: &mut Rng, items: impl ExactSizeIterator<Item = T>) -> Option<T> {
        let len = items.len();
        let mut items = items;
        (len > 0).then(|| items.nth(rng.below(len)).expect("below len"))
    }
}

/// 300 writes picked at random over two connections (HTTP/1.1 and HTTP/2), each answer as
/// the model says; every 30 writes, and at the end, the inventory equals the model's counts
/// and a full walk's.
async fn random_mix(options: Options) {
    let mut rng = seeded();
    let server = Server::start_with(options);
    let mut clients = [server.h1().await, server.h2().await];
    let mut model = Model::default();
    for step in 0..300 {
        let client = &mut clients[step % 2];
        let pet = Model::pick(&mut rng, model.pets.keys().copied());
        match (rng.below(10), pet) {
            (0 | 1, _) | (_, None) => create(client, &mut rng, &mut model, step).await,
            (2, Some(pet)) => {
                let status = STATUSES[rng.below(STATUSES.len())];
                let body = json!({ "status": status }).to_string();
                let reply = client.patch_json(&format!("/v1/pets/{pet}"), &body).await;
                match model.holder(pet) {
                    Some(order) => reply.assert_error(
                        409,
                        "pet_reserved",
                        &format!(
                            "pet {pet} is held by order {order}: complete or cancel the order first"
                        ),
                    ),
                    None => {
                        assert_eq!(reply.status, 200, "{body}: {:?}", reply.body);
                        model.pets.insert(pet, json!(status));
                    }
                }
            }
            (3, Some(pet)) => {
                let reply = client
                    .patch_json(&format!("/v1/pets/{pet}"), r#"{"name":"renamed"}"#)
                    .await;
                assert_eq!(reply.status, 200, "{:?}", reply.body);
            }
            (4, Some(pet)) => {
                let reply = client.delete(&format!("/v1/pets/{pet}")).await;
                match model.holder(pet) {
                    Some(order) => reply.assert_error(
                        409,
                        "pet_reserved",
                        &format!(
                            "pet {pet} is held by order {order}: complete or cancel the order first"
                        ),
                    ),
                    None => {
                        assert_eq!(reply.status, 204, "{:?}", reply.body);
                        model.pets.remove(&pet);
                    }
                }
            }
            (5 | 6, Some(pet)) => {
                let reply = place(client, &format!(r#"{{"petId":{pet}}}"#)).await;
                match model.pets[&pet].as_str() {
                    Some("available") => {
                        assert_eq!(reply.status, 201, "{:?}", reply.body);
                        model.placed.insert(id(&reply.json()), pet);
                        model.pets.insert(pet, json!("pending"));
                    }
                    _ => {
                        assert_eq!(
                            (reply.status, &reply.json()["code"]),
                            (409, &json!("pet_not_available")),
                            "{:?}",
                            reply.body
                        );
                    }
                }
            }
            (7 | 8, _) => {
                let Some((order, held)) =
                    Model::pick(&mut rng, model.placed.iter().map(|(&o, &p)| (o, p)))
                else {
                    continue;
                };
                let (action, status, pet_status) = if rng.below(2) == 0 {
                    ("complete", "completed", "sold")
                } else {
                    ("cancel", "cancelled", "available")
                };
                let reply = act(client, order, action).await;
                assert_eq!(reply.status, 200, "{action} {order}: {:?}", reply.body);
                assert_eq!(reply.json()["status"], status);
                model.placed.remove(&order);
                model.closed.push((order, status));
                model.pets.insert(held, json!(pet_status));
            }
            _ => {
                let Some((order, status)) = Model::pick(&mut rng, model.closed.iter().copied())
                else {
                    continue;
                };
                let action = ["complete", "cancel"][rng.below(2)];
                act(client, order, action).await.assert_error(
                    409,
                    "invalid_transition",
                    &format!(
                        "order {order} is {status}, which allows no change: only a placed order \
                         can be completed or cancelled (asked: {action})"
                    ),
                );
            }
        }
        if step % 30 == 29 {
            assert_counts(client, &model, step).await;
        }
    }
    for client in &mut clients {
        assert_counts(client, &model, 300).await;
    }
    eprintln!(
        "{} pets, {} orders placed, {} closed",
        model.pets.len(),
        model.placed.len(),
        model.closed.len()
    );
    server.stop();
}

async fn create(client: &mut Client, rng: &mut Rng, model: &mut Model, step: usize) {
    let status = STATUSES[rng.below(STATUSES.len())];
    let mut body = json!({"name": format!("pet-{step}"), "categoryId": step % 5});
    if let Some(status) = status {
        body["status"] = status.into();
    }
    let pet = client.create(&body.to_string()).await;
    model.pets.insert(id(&pet), json!(status));
}

async fn assert_counts(client: &mut Client, model: &Model, step: usize) {
    let expected = counts(model.pets.values());
    assert_eq!(inventory(client).await, expected, "after {step} writes");
    assert_eq!(
        walked_inventory(client).await,
        expected,
        "a walk after {step} writes"
    );
}
