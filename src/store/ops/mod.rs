//! The rules of every write, written once for both stores against the transaction interface
//! (`store/txn.rs`): a file per resource (`pets.rs`, `orders.rs`, `categories.rs`), each
//! function one operation, checking what the spec and the issues require in the order the API
//! answers it. `run` is the one dispatch from a queued write to its rule; the writes that are
//! no resource's rule (purges, the feed's trim, webhook and session state) are left to the
//! engine. Invariant: a rule refuses only its own write; an error it returns fails the batch.

pub(crate) use super::txn::Counter;
use super::txn::Txn;
use super::write::Write;
use crate::order::OrderId;
use crate::pet::PetId;
use crate::store::model::StoreError;

pub(crate) mod categories;
pub(crate) mod orders;
pub(crate) mod pets;

/// Runs `write` by its rule in `txn` and sets its outcome; `Ok(false)` if it is no rule's and
/// the engine runs it.
pub(crate) async fn run<T: Txn>(txn: &mut T, write: &mut Write) -> Result<bool, StoreError> {
    match write {
        Write::Create(pet, keyed, pending) => {
            pending.outcome = Some(pets::create(txn, pet, keyed.as_ref()).await?);
        }
        Write::Patch(id, patch, precondition, pending) => {
            pending.outcome = Some(pets::patch(txn, *id, patch, precondition).await?);
        }
        Write::Delete(id, precondition, pending) => {
            pending.outcome = Some(pets::delete(txn, *id, precondition).await?);
        }
        Write::PlaceOrder(place, pending) => {
            pending.outcome = Some(orders::place(txn, place).await?);
        }
        Write::MoveOrder(id, action, precondition, pending) => {
            pending.outcome = Some(orders::settle(txn, *id, *action, precondition).await?);
        }
        Write::Expire(at_ms, pending) => {
            pending.outcome = Some(Ok(orders::expire(txn, *at_ms).await?));
        }
        Write::CreateCategory(new, pending) => {
            pending.outcome = Some(categories::create(txn, new).await?);
        }
        Write::PatchCategory(id, patch, pending) => {
            pending.outcome = Some(categories::patch(txn, *id, patch).await?);
        }
        Write::DeleteCategory(id, pending) => {
            pending.outcome = Some(categories::delete(txn, *id).await?);
        }
        Write::Purge(..)
        | Write::Trim(..)
        | Write::SaveWebhook(..)
        | Write::SaveSession(..)
        | Write::RemoveSessions(..) => return Ok(false),
    }
    Ok(true)
}

/// What a batch's writes touch, said by each write before any of them runs: what an engine
/// that locks before it reads (PostgreSQL, `lock_rows`) locks first, in its one order.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Touches {
    /// Pets read or changed by id: patched, deleted, or ordered.
    pub(crate) pets: Vec<PetId>,
    /// Orders moved by id; their pets are touched with them.
    pub(crate) orders: Vec<OrderId>,
    /// For each `Expire`, in batch order, the time up to which it takes ended holds.
    pub(crate) ended_holds: Vec<u64>,
    /// How many pet ids the batch's creates may take.
    pub(crate) new_pets: usize,
    /// The other counters the batch may give ids from, each once.
    pub(crate) counters: Vec<Counter>,
}

impl Touches {
    fn count(&mut self, counter: Counter) {
        if !self.counters.contains(&counter) {
            self.counters.push(counter);
        }
    }
}

/// What `batch` touches, in the order its writes come.
pub(crate) fn touches(batch: &[Write]) -> Touches {
    let mut touches = Touches::default();
    for write in batch {
        match write {
            Write::Create(..) => touches.new_pets += 1,
            Write::Patch(id, ..) | Write::Delete(id, ..) => touches.pets.push(*id),
            Write::PlaceOrder(place, _) => {
                touches.pets.push(place.order.pet_id);
                touches.count(Counter::Orders);
            }
            Write::MoveOrder(id, ..) => touches.orders.push(*id),
            Write::Expire(at_ms, _) => touches.ended_holds.push(*at_ms),
            // Every category write holds the counter, even one that gives no id: names then
            // change one transaction at a time, so a check for a name taken cannot race a
            // concurrent rename.
            Write::CreateCategory(..) | Write::PatchCategory(..) | Write::DeleteCategory(..) => {
                touches.count(Counter::Categories);
            }
            Write::Purge(..)
            | Write::Trim(..)
            | Write::SaveWebhook(..)
            | Write::SaveSession(..)
            | Write::RemoveSessions(..) => {}
        }
    }
    touches
}
