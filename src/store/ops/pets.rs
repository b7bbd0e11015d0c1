//! A pet's writes: create (with its Idempotency-Key), patch and delete, each with its
//! precondition, and the hold a placed order keeps on its pet (a held pet keeps its status and
//! stays).

use crate::pet::{NewPet, PetId, PetPatch};
use crate::store::model::{Change, Created, Precondition, StoreError, StoredPet};
use crate::store::txn::{Counter, Outcome, Txn};
use crate::store::write::Keyed;
use crate::subject::Subject;

/// Creates `new` under the next pet id. With a key, a live record of its scope answers instead
/// (the first create's pet, or `IdempotencyKeyReused`): checked here, in the transaction, since
/// a retry may have passed the front's check before the key's first create committed.
pub(super) async fn create<T: Txn>(
    txn: &mut T,
    new: &NewPet,
    keyed: Option<&Keyed>,
) -> Outcome<Created> {
    let id = match txn.next_id(Counter::Pets).await? {
        Ok(id) => id,
        Err(e) => return Ok(Err(e)),
    };
    if let Some(keyed) = keyed
        && let Some(held) = txn.claim_record(keyed, Subject::pet(id)).await?
    {
        return Ok(held.answer(&keyed.key, new, txn.now()).unwrap_or_else(|| {
            Err(StoreError::Corrupt(
                "a live idempotency record expired mid-transaction".into(),
            ))
        }));
    }
    txn.take_id(Counter::Pets);
    let pet = txn.put_pet(None, &new.clone().into_pet(id)).await?;
    txn.push(Change::pet(id, 1, Some(pet.json.clone())));
    Ok(Ok(Created {
        pet,
        replayed: false,
    }))
}

/// Applies `patch` to pet `id`: `NotFound`, `PreconditionFailed`, then, for a change of its
/// status while a placed order holds it, `PetReserved`.
pub(super) async fn patch<T: Txn>(
    txn: &mut T,
    id: PetId,
    patch: &PetPatch,
    precondition: &Precondition,
) -> Outcome<StoredPet> {
    let (old, revision) = match current(txn, id, precondition).await? {
        Ok(current) => current,
        Err(e) => return Ok(Err(e)),
    };
    if patch.status.is_some()
        && let Some(order) = txn.holding_order(id).await?
    {
        return Ok(Err(StoreError::PetReserved { pet: id, order }));
    }
    let new = patch.clone().apply(old.clone());
    let pet = txn.put_pet(Some((&old, revision)), &new).await?;
    txn.push(Change::pet(id, pet.revision, Some(pet.json.clone())));
    Ok(Ok(pet))
}

/// Removes pet `id`: `NotFound`, `PreconditionFailed`, then `PetReserved` while a placed order
/// holds it. Answers the revision it was removed at.
pub(super) async fn delete<T: Txn>(
    txn: &mut T,
    id: PetId,
    precondition: &Precondition,
) -> Outcome<u64> {
    let (old, revision) = match current(txn, id, precondition).await? {
        Ok(current) => current,
        Err(e) => return Ok(Err(e)),
    };
    if let Some(order) = txn.holding_order(id).await? {
        return Ok(Err(StoreError::PetReserved { pet: id, order }));
    }
    txn.remove_pet(&old).await?;
    txn.push(Change::pet(id, revision, None));
    Ok(Ok(revision))
}

/// The pet `id` and its revision, if it exists (`NotFound`) and meets `precondition`
/// (`PreconditionFailed`).
pub(super) async fn current<T: Txn>(
    txn: &mut T,
    id: PetId,
    precondition: &Precondition,
) -> Outcome<(crate::pet::Pet, u64)> {
    let Some((pet, revision)) = txn.pet(id).await? else {
        return Ok(Err(StoreError::NotFound(Subject::pet(id))));
    };
    if !precondition.allows(revision) {
        return Ok(Err(StoreError::PreconditionFailed));
    }
    Ok(Ok((pet, revision)))
}
