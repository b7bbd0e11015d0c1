//! An order: its declaration (`store/resource.rs`: its table, its record, its indexes by
//! status, by pet and by the end of its hold) and its writes: placing it for an `available` pet (which becomes `pending`, held by the
//! order), completing or cancelling it (the pet becomes `sold` or `available`), and expiring
//! it once its hold has ended. Invariant: an order and its pet change together, so a placed
//! order's pet is `pending` and at most one placed order holds a pet.

use crate::order::NewOrder;
use crate::order::{Order, OrderAction, OrderId, OrderStatus};
use crate::pet::{Pet, PetStatus};
use crate::store::claims::Keyed;
use crate::store::model::{Change, Moved, Placed, Precondition, StoreError};
use crate::store::ops::{Rule, Touches};
use crate::store::resource::{
    Column, Counter, Entry, Holds, Index, Part, PartKind, Postgres, Resource, Value,
};
use crate::store::txn::{Outcome, Txn};
use crate::subject::Subject;

use super::pets::current;

/// (status code, order id) for every order: `?status=` is a range.
pub(crate) static ORDERS_BY_STATUS: Index = Index {
    name: "orders_by_status",
    words: "order status index",
    parts: &[PartKind::Code(status_name)],
    unique: false,
    holds: Holds::Nothing,
};

/// (pet id, order id) to the order's status code, for every order: `?petId=` is a range, and
/// the pet's placed order, the one that holds it, is found among the pet's few entries, so a
/// second order, a status patch or a delete of a held pet is refused without another table
/// (a table of holds made placing an order write two entries here instead of one).
pub(crate) static ORDERS_BY_PET: Index = Index {
    name: "orders_by_pet",
    words: "order pet index",
    parts: &[PartKind::Int],
    unique: false,
    holds: Holds::Code,
};

/// (end of the hold in Unix ms, order id) for every placed order with one: the expiry takes
/// the ended ones from the front.
pub(crate) static HOLD_ENDS: Index = Index {
    name: "hold_ends",
    words: "hold ends",
    parts: &[PartKind::Time],
    unique: false,
    holds: Holds::Nothing,
};

fn status_name(code: u8) -> Option<&'static str> {
    OrderStatus::from_code(code).map(OrderStatus::as_str)
}

impl Resource for Order {
    const KIND: crate::subject::Kind = crate::subject::Kind::Order;
    const COUNTER: Counter = Counter::named("next_order_id");
    const TABLE: &'static str = "orders";
    const INDEXES: &'static [&'static Index] = &[&ORDERS_BY_STATUS, &ORDERS_BY_PET, &HOLD_ENDS];
    /// The order's record with its status, pet and end of hold beside it for the indexes; at
    /// most one placed order (status 1) per pet, which the database enforces too; the placed
    /// ones by the end of their hold, for the expiry. Statements write the literal
    /// `status = 1`, not a parameter, so the planner can use the partial indexes, whose
    /// predicate it must match as written.
    const POSTGRES: Postgres = Postgres {
        columns: &["pet_id", "status", "expires_at_ms", "record"],
        stored: "record",
        migrations: &[(
            4,
            "CREATE TABLE orders (
                id bigint PRIMARY KEY,
                pet_id bigint NOT NULL,
                status smallint NOT NULL,
                expires_at_ms bigint,
                record text NOT NULL
            );
            CREATE INDEX orders_by_status ON orders (status, id);
            CREATE INDEX orders_by_pet ON orders (pet_id, id);
            CREATE UNIQUE INDEX orders_one_placed_per_pet ON orders (pet_id) WHERE status = 1;
            CREATE INDEX orders_by_expiry ON orders (expires_at_ms, id) WHERE status = 1;",
        )],
    };

    fn id(&self) -> i64 {
        self.id
    }

    fn columns(&self) -> Vec<Column> {
        let end = self
            .expires_at_ms
            .map(|end| i64::try_from(end).unwrap_or(i64::MAX));
        vec![
            Column::Int(Some(self.pet_id)),
            Column::Code(Some(i16::from(self.status.code()))),
            Column::Int(end),
            Column::Text(String::from_utf8_lossy(&self.to_record()).into_owned()),
        ]
    }

    fn encode(&self) -> Vec<u8> {
        self.to_record()
    }

    fn json(&self) -> Vec<u8> {
        self.to_json()
    }

    fn decode(id: i64, stored: &[u8]) -> Result<Order, StoreError> {
        Order::from_record(stored)
            .map_err(|e| StoreError::Corrupt(format!("order {id} does not read back: {e}")))
    }

    fn entries<'a>(&self, _stored: &'a [u8]) -> Vec<Entry<'a>> {
        let (id, code) = (self.id, self.status.code());
        let mut entries = vec![
            ORDERS_BY_STATUS.entry(id, &[Part::Code(code)], Value::Nothing),
            ORDERS_BY_PET.entry(id, &[Part::Int(self.pet_id)], Value::Code(code)),
        ];
        if let Some(end) = self
            .expires_at_ms
            .filter(|_| self.status == OrderStatus::Placed)
        {
            entries.push(HOLD_ENDS.entry(id, &[Part::Time(end)], Value::Nothing));
        }
        entries
    }
}

/// Places an order for an `available` pet, held for the store's `--order-hold`. With a key, a
/// live record answers first (the first order as placed, or `IdempotencyKeyReused`), before the
/// pet is looked at: a retry finds its pet pending by its own order. Then `NotFound`, then
/// `PetNotAvailable`.
pub(crate) struct PlaceOrder {
    pub(crate) order: NewOrder,
    pub(crate) keyed: Option<Keyed>,
    /// How long it holds its pet (`None`: until completed or cancelled).
    pub(crate) hold: Option<std::time::Duration>,
}

impl Rule for PlaceOrder {
    type Answer = Placed;

    fn touches(&self, touches: &mut Touches) {
        touches.pets.push(self.order.pet_id);
        touches.count(Order::COUNTER);
    }

    async fn run<T: Txn>(&self, txn: &mut T) -> Outcome<Placed> {
        if let Some(keyed) = &self.keyed
            && let Some(record) = txn.record(&keyed.key).await?
            && let Some(answer) = record.order_answer(&keyed.key, txn.now())
        {
            return replay(txn, answer).await;
        }
        let pet_id = self.order.pet_id;
        let (pet, revision) = match current(txn, pet_id, &Precondition::None).await? {
            Ok(current) => current,
            Err(e) => return Ok(Err(e)),
        };
        if pet.status != Some(PetStatus::Available) {
            return Ok(Err(StoreError::PetNotAvailable {
                pet: pet_id,
                status: pet.status,
            }));
        }
        let id = match txn.next_id(Order::COUNTER).await? {
            Ok(id) => id,
            Err(e) => return Ok(Err(e)),
        };
        if let Some(keyed) = &self.keyed
            && let Some(held) = txn.claim_record(keyed, Subject::order(id)).await?
        {
            // Another instance placed an order under the same key and committed while this one
            // waited for its record: that order answers, and this one is not placed.
            return match held.order_answer(&keyed.key, txn.now()) {
                Some(answer) => replay(txn, answer).await,
                None => Ok(Err(StoreError::Corrupt(
                    "a live idempotency record expired mid-transaction".into(),
                ))),
            };
        }
        txn.take_id(Order::COUNTER);
        let order = Order::place(id, self.order.clone(), txn.now_ms(), self.hold);
        txn.put(None, &order).await?;
        let pending = Pet {
            status: Some(PetStatus::Pending),
            ..pet.clone()
        };
        let pet = txn.put_pet(Some((&pet, revision)), &pending).await?;
        txn.push(Change::order(&order, &pet));
        Ok(Ok(Placed {
            order,
            pet: Some(pet),
            replayed: false,
        }))
    }

    fn release(&mut self) {
        self.keyed = None;
    }
}

/// What a key's record answers a retried order: the order as it was placed, read back.
async fn replay<T: Txn>(txn: &mut T, answer: Result<OrderId, StoreError>) -> Outcome<Placed> {
    let id = match answer {
        Ok(id) => id,
        Err(e) => return Ok(Err(e)),
    };
    match txn.get::<Order>(id).await? {
        Some(order) => Ok(Ok(Placed {
            order: order.as_placed(),
            pet: None,
            replayed: true,
        })),
        None => Err(StoreError::Corrupt(format!(
            "order {id} has an idempotency record but is missing"
        ))),
    }
}

/// Completes or cancels order `id` (never `Expire`: see `ExpireOrders`) if its revision meets
/// `precondition`: `OrderNotFound`, then `PreconditionFailed`, then `InvalidTransition`; its
/// pet takes the action's status (`sold` or `available`).
pub(crate) struct MoveOrder {
    pub(crate) id: OrderId,
    pub(crate) action: OrderAction,
    pub(crate) precondition: Precondition,
}

impl Rule for MoveOrder {
    type Answer = Moved;

    fn touches(&self, touches: &mut Touches) {
        touches.orders.push(self.id);
    }

    async fn run<T: Txn>(&self, txn: &mut T) -> Outcome<Moved> {
        let Some(order) = txn.get::<Order>(self.id).await? else {
            return Ok(Err(StoreError::NotFound(Subject::order(self.id))));
        };
        if !self.precondition.allows(order.revision) {
            return Ok(Err(StoreError::PreconditionFailed));
        }
        let at_ms = txn.now_ms();
        move_order(txn, &order, self.action, at_ms).await
    }
}

/// Expires up to `PURGE_BATCH` placed orders whose hold ended by `at_ms` (Unix milliseconds),
/// oldest end first, each pet back to `available`, each order closed at `at_ms`: the time its
/// pet came free. Answers each with its pet. One that cannot expire (moved by a write earlier
/// in the batch, or stored data broken by hand) is left, and the others still expire: one
/// broken order must not fail every batch it shares.
pub(crate) struct ExpireOrders {
    pub(crate) at_ms: u64,
}

impl Rule for ExpireOrders {
    type Answer = Vec<Moved>;

    fn touches(&self, touches: &mut Touches) {
        touches.ended_holds.push(self.at_ms);
    }

    async fn run<T: Txn>(&self, txn: &mut T) -> Outcome<Vec<Moved>> {
        let at_ms = self.at_ms;
        let ended = txn.ended_holds(at_ms).await?;
        let mut expired = Vec::with_capacity(ended.len());
        for id in ended {
            let order = match txn.get::<Order>(id).await {
                Ok(Some(order)) => order,
                Ok(None) => {
                    tracing::warn!(order = id, "an order whose hold ended is missing");
                    continue;
                }
                // Stored data that does not read back: the rest of the batch goes ahead.
                Err(StoreError::Corrupt(e)) => {
                    tracing::warn!(order = id, error = %e, "a placed order cannot expire");
                    continue;
                }
                Err(e) => return Err(e),
            };
            match move_order(txn, &order, OrderAction::Expire, at_ms).await? {
                Ok(moved) => expired.push(moved),
                // Completed or cancelled earlier in this batch: it holds nothing any more.
                Err(StoreError::InvalidTransition { .. }) => {}
                Err(e) => tracing::warn!(order = id, error = %e, "a placed order cannot expire"),
            }
        }
        Ok(Ok(expired))
    }
}

/// Moves `order` by `action` at `at_ms`, with its pet: the order holds the pet no more. A
/// placed order's pet cannot be deleted, so a missing one is stored data gone wrong.
async fn move_order<T: Txn>(
    txn: &mut T,
    order: &Order,
    action: OrderAction,
    at_ms: u64,
) -> Outcome<Moved> {
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
    let Some((pet, revision)) = txn.pet(order.pet_id).await? else {
        return Ok(Err(StoreError::Corrupt(format!(
            "order {} holds pet {}, which is missing",
            order.id, order.pet_id
        ))));
    };
    let new = Pet {
        status: Some(action.pet_status()),
        ..pet.clone()
    };
    let pet = txn.put_pet(Some((&pet, revision)), &new).await?;
    txn.put(Some(order), &moved).await?;
    txn.push(Change::order(&moved, &pet));
    Ok(Ok(Moved { order: moved, pet }))
}
