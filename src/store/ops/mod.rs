//! The rules of every write, written once for both stores against the transaction interface
//! (`store/txn.rs`): a file per resource (`pets.rs`, `orders.rs`, `categories.rs`), each
//! function one operation, checking what the spec and the issues require in the order the API
//! answers it. `run` is the one dispatch from a queued write to its rule; the writes that are
//! no resource's rule (purges, the feed's trim, webhook and session state) are left to the
//! engine. Invariant: a rule refuses only its own write; an error it returns fails the batch.

use super::txn::Txn;
use super::write::Write;
use crate::store::model::StoreError;

mod categories;
mod orders;
mod pets;

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
