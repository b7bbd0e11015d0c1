//! The writes of orders and categories in a batch's transaction (issue 29), run by `batch.rs`
//! once the batch holds its locks: placing, completing, cancelling and expiring an order, each
//! with its pet, and creating, renaming and deleting a category. Invariant: every write that
//! changes a placed order or its pet holds both rows, so a placed order's pet is `pending`, at
//! most one placed order holds a pet (the database's unique index says so too), and an order
//! and its pet change together or not at all.

use super::batch::{Tally, Txn, current, rewrite_pet, take_record};
use super::errors::pg_error;
use super::rows::{
    PLACED, READ_RECORD, category_of, expires_at_ms, order_of, order_record, order_status_code,
    record_of,
};
use crate::category::{Category, CategoryId, CategoryPatch, NewCategory, name_key};
use crate::order::{Order, OrderAction, OrderId, OrderStatus};
use crate::pet::{PetId, PetStatus};
use crate::store::model::{
    Moved, Placed, Precondition, StoreError, StoredPet, order_record_id, short,
};
use crate::store::write::{PURGE_BATCH, PlaceOrder};

/// Locks up to `PURGE_BATCH` placed orders whose hold ended by `at_ms`, the oldest end first,
/// skipping those another transaction holds: another instance expiring them at the same time,
/// or a client completing or cancelling one. Each is then expired by one transaction only, and
/// one expired already is no longer placed. Returns the orders and their pets, to lock next.
pub(super) async fn take_ended_holds(
    txn: &Txn<'_>,
    at_ms: u64,
) -> Result<(Vec<OrderId>, Vec<PetId>), StoreError> {
    let statement = txn
        .prepare_cached(
            "SELECT id, pet_id FROM orders WHERE status = 1 AND expires_at_ms <= $1
             ORDER BY expires_at_ms, id LIMIT $2 FOR UPDATE SKIP LOCKED",
        )
        .await
        .map_err(pg_error)?;
    let rows = txn
        .query(
            &statement,
            &[
                &i64::try_from(at_ms).unwrap_or(i64::MAX),
                &i64::try_from(PURGE_BATCH).unwrap_or(i64::MAX),
            ],
        )
        .await
        .map_err(pg_error)?;
    Ok(rows
        .iter()
        .map(|row| (row.get::<_, i64>(0), row.get::<_, i64>(1)))
        .unzip())
}

/// The placed order that holds pet `pet`, if one does. The pet's row is locked by the caller,
/// and every write that places or ends an order locks its pet too, so the answer stays true to
/// the commit.
pub(super) async fn holding_order(
    txn: &Txn<'_>,
    pet: PetId,
) -> Result<Option<OrderId>, StoreError> {
    let statement = txn
        .prepare_cached("SELECT id FROM orders WHERE pet_id = $1 AND status = 1")
        .await
        .map_err(pg_error)?;
    let row = txn.query_opt(&statement, &[&pet]).await.map_err(pg_error)?;
    Ok(row.map(|row| row.get(0)))
}

/// Places an order for an `available` pet, which becomes `pending`. With a key, a live record
/// answers first (the first order as placed, or `IdempotencyKeyReused`), before the pet is
/// looked at: a retry finds its pet pending by its own order. Then `NotFound`, then
/// `PetNotAvailable`.
pub(super) async fn place_order(
    txn: &Txn<'_>,
    place: &PlaceOrder,
    now: u64,
    now_ms: u64,
    tally: &mut Tally,
) -> Result<Result<Placed, StoreError>, StoreError> {
    if let Some(keyed) = &place.keyed {
        let scope = short(keyed.key.scope());
        let row = txn
            .query_opt(READ_RECORD, &[&scope.as_slice()])
            .await
            .map_err(pg_error)?;
        if let Some(row) = row
            && let Some(answer) = record_of(&row)?.order_answer(&keyed.key, now)
        {
            return replay(txn, answer).await;
        }
    }
    let pet_id = place.order.pet_id;
    let (mut pet, revision) = match current(txn, pet_id, &Precondition::None).await? {
        Ok(current) => current,
        Err(e) => return Ok(Err(e)),
    };
    if pet.status != Some(PetStatus::Available) {
        return Ok(Err(StoreError::PetNotAvailable {
            pet: pet_id,
            status: pet.status,
        }));
    }
    let counter = tally.next_order.as_mut().ok_or_else(|| {
        StoreError::Corrupt("an order was placed without its id counter locked".into())
    })?;
    let id = match counter.next() {
        Ok(id) => id,
        Err(e) => return Ok(Err(e)),
    };
    if let Some(keyed) = &place.keyed
        && !take_record(txn, keyed, order_record_id(id), now).await?
    {
        // Another instance placed an order under the same key and committed while this one
        // waited for its record: that order answers, and this one is not placed.
        let row = txn
            .query_one(READ_RECORD, &[&short(keyed.key.scope()).as_slice()])
            .await
            .map_err(pg_error)?;
        return match record_of(&row)?.order_answer(&keyed.key, now) {
            Some(answer) => replay(txn, answer).await,
            None => Ok(Err(StoreError::Corrupt(
                "a live idempotency record expired mid-transaction".into(),
            ))),
        };
    }
    counter.take();
    let order = Order::place(id, place.order.clone(), now_ms, place.hold);
    let statement = txn
        .prepare_cached(
            "INSERT INTO orders (id, pet_id, status, expires_at_ms, record)
             VALUES ($1, $2, $3, $4, $5)",
        )
        .await
        .map_err(pg_error)?;
    txn.execute(
        &statement,
        &[
            &order.id,
            &order.pet_id,
            &order_status_code(order.status),
            &expires_at_ms(&order),
            &order_record(&order),
        ],
    )
    .await
    .map_err(pg_error)?;
    pet.status = Some(PetStatus::Pending);
    let pet = rewrite_pet(txn, &pet, revision + 1).await?;
    tally.inventory.moved(
        Some(Some(PetStatus::Available)),
        Some(Some(PetStatus::Pending)),
    );
    Ok(Ok(Placed {
        order,
        pet: Some(pet),
        replayed: false,
    }))
}

/// What a key's record answers a retried order: the order as it was placed, read back.
async fn replay(
    txn: &Txn<'_>,
    answer: Result<OrderId, StoreError>,
) -> Result<Result<Placed, StoreError>, StoreError> {
    let id = match answer {
        Ok(id) => id,
        Err(e) => return Ok(Err(e)),
    };
    Ok(match read_order(txn, id).await? {
        Some(order) => Ok(Placed {
            order: order.as_placed(),
            pet: None,
            replayed: true,
        }),
        None => Err(StoreError::Corrupt(format!(
            "order {id} has an idempotency record but is missing"
        ))),
    })
}

/// Completes or cancels order `id` (its row locked by `lock_rows`): `OrderNotFound`, then
/// `PreconditionFailed` on the order's revision, then `InvalidTransition`; its pet takes the
/// action's status.
pub(super) async fn move_order(
    txn: &Txn<'_>,
    id: OrderId,
    action: OrderAction,
    precondition: &Precondition,
    now_ms: u64,
    tally: &mut Tally,
) -> Result<Result<Moved, StoreError>, StoreError> {
    let Some(order) = read_order(txn, id).await? else {
        return Ok(Err(StoreError::OrderNotFound(id)));
    };
    if !precondition.allows(order.revision) {
        return Ok(Err(StoreError::PreconditionFailed));
    }
    let moved = match order.apply(action, now_ms) {
        Ok(moved) => moved,
        Err(refused) => {
            return Ok(Err(StoreError::InvalidTransition {
                order: id,
                action,
                refused,
            }));
        }
    };
    let pet = match move_pet(txn, moved.pet_id, action.pet_status(), tally).await? {
        Ok(pet) => pet,
        Err(e) => return Ok(Err(e)),
    };
    rewrite_order(txn, &moved).await?;
    Ok(Ok(Moved { order: moved, pet }))
}

/// Expires the orders `take_ended_holds` took (skipping one a write earlier in the batch has
/// moved already), each pet back to `available`, the order closed at `at_ms`.
pub(super) async fn expire(
    txn: &Txn<'_>,
    taken: &[OrderId],
    at_ms: u64,
    tally: &mut Tally,
) -> Result<Vec<Moved>, StoreError> {
    let mut expired = Vec::with_capacity(taken.len());
    for &id in taken {
        let Some(order) = read_order(txn, id).await? else {
            continue;
        };
        let Ok(moved) = order.apply(OrderAction::Expire, at_ms) else {
            continue;
        };
        let pet = match move_pet(txn, moved.pet_id, PetStatus::Available, tally).await? {
            Ok(pet) => pet,
            Err(e) => {
                // Only data broken by hand gets here; the order stays placed and the others
                // still expire.
                tracing::warn!(order = id, error = %e, "a placed order cannot expire");
                continue;
            }
        };
        rewrite_order(txn, &moved).await?;
        expired.push(Moved { order: moved, pet });
    }
    Ok(expired)
}

/// Sets the status of an order's pet (its row locked by `lock_rows`), one revision up. A
/// placed order's pet cannot be deleted, so a missing one is stored data gone wrong.
async fn move_pet(
    txn: &Txn<'_>,
    id: PetId,
    status: PetStatus,
    tally: &mut Tally,
) -> Result<Result<StoredPet, StoreError>, StoreError> {
    let (mut pet, revision) = match current(txn, id, &Precondition::None).await? {
        Ok(current) => current,
        Err(StoreError::NotFound(_)) => {
            return Ok(Err(StoreError::Corrupt(format!(
                "pet {id} of a placed order is missing"
            ))));
        }
        Err(e) => return Ok(Err(e)),
    };
    tally.inventory.moved(Some(pet.status), Some(Some(status)));
    pet.status = Some(status);
    Ok(Ok(rewrite_pet(txn, &pet, revision + 1).await?))
}

/// The order `id` as this transaction sees it, its own changes included.
async fn read_order(txn: &Txn<'_>, id: OrderId) -> Result<Option<Order>, StoreError> {
    let statement = txn
        .prepare_cached("SELECT record FROM orders WHERE id = $1")
        .await
        .map_err(pg_error)?;
    let row = txn.query_opt(&statement, &[&id]).await.map_err(pg_error)?;
    row.map(|row| order_of(row.get(0))).transpose()
}

/// Stores an order after a change of status; its pet and end of hold never change.
async fn rewrite_order(txn: &Txn<'_>, order: &Order) -> Result<(), StoreError> {
    debug_assert_ne!(
        order.status,
        OrderStatus::Placed,
        "only a placed order moves"
    );
    let statement = txn
        .prepare_cached("UPDATE orders SET status = $2, record = $3 WHERE id = $1")
        .await
        .map_err(pg_error)?;
    txn.execute(
        &statement,
        &[
            &order.id,
            &order_status_code(order.status),
            &order_record(order),
        ],
    )
    .await
    .map_err(pg_error)?;
    Ok(())
}

/// Creates a category with the next category id, or `NameTaken` when another has its name
/// ignoring case. `ON CONFLICT DO NOTHING`: a name taken is an answer, never an error that
/// would abort the batch's transaction.
pub(super) async fn create_category(
    txn: &Txn<'_>,
    new: &NewCategory,
    tally: &mut Tally,
) -> Result<Result<Category, StoreError>, StoreError> {
    let counter = tally.next_category.as_mut().ok_or_else(|| {
        StoreError::Corrupt("a category was created without its id counter locked".into())
    })?;
    let id = match counter.next() {
        Ok(id) => id,
        Err(e) => return Ok(Err(e)),
    };
    let inserted = txn
        .execute(
            "INSERT INTO categories (id, name, name_key) VALUES ($1, $2, $3)
             ON CONFLICT (name_key) DO NOTHING",
            &[&id, &new.name, &name_key(&new.name)],
        )
        .await
        .map_err(pg_error)?;
    if inserted == 0 {
        return Ok(Err(StoreError::NameTaken(new.name.clone())));
    }
    counter.take();
    Ok(Ok(Category {
        id,
        name: new.name.clone(),
    }))
}

/// Renames category `id`: `CategoryNotFound`, then `NameTaken` when another category has the
/// name ignoring case. An empty patch answers the category as it is. The check cannot race
/// another rename: every category write holds `next_category_id` (`lock_rows`).
pub(super) async fn patch_category(
    txn: &Txn<'_>,
    id: CategoryId,
    patch: &CategoryPatch,
) -> Result<Result<Category, StoreError>, StoreError> {
    let Some(row) = txn
        .query_opt("SELECT id, name FROM categories WHERE id = $1", &[&id])
        .await
        .map_err(pg_error)?
    else {
        return Ok(Err(StoreError::CategoryNotFound(id)));
    };
    let mut category = category_of(&row);
    if let Some(name) = &patch.name {
        let key = name_key(name);
        let taken = txn
            .query_opt(
                "SELECT 1 FROM categories WHERE name_key = $1 AND id <> $2",
                &[&key, &id],
            )
            .await
            .map_err(pg_error)?;
        if taken.is_some() {
            return Ok(Err(StoreError::NameTaken(name.clone())));
        }
        txn.execute(
            "UPDATE categories SET name = $2, name_key = $3 WHERE id = $1",
            &[&id, name, &key],
        )
        .await
        .map_err(pg_error)?;
        category.name = name.clone();
    }
    Ok(Ok(category))
}

/// Removes category `id`: `CategoryNotFound`, then `CategoryInUse` while any pet names it.
pub(super) async fn delete_category(
    txn: &Txn<'_>,
    id: CategoryId,
) -> Result<Result<CategoryId, StoreError>, StoreError> {
    let row = txn
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM categories WHERE id = $1),
                 EXISTS (SELECT 1 FROM pets WHERE category_id = $1)",
            &[&id],
        )
        .await
        .map_err(pg_error)?;
    let (exists, in_use): (bool, bool) = (row.get(0), row.get(1));
    if !exists {
        return Ok(Err(StoreError::CategoryNotFound(id)));
    }
    if in_use {
        return Ok(Err(StoreError::CategoryInUse(id)));
    }
    txn.execute("DELETE FROM categories WHERE id = $1", &[&id])
        .await
        .map_err(pg_error)?;
    Ok(Ok(id))
}

/// `PLACED` is the code the statements above write as the literal 1.
const _: () = assert!(PLACED == 1);
