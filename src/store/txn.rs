//! The transaction a write's rules run against (`store/ops/`): what a rule may read and change
//! in one batch's transaction, by meaning, with no table or statement in sight. Each engine
//! implements it once (`redb/txn.rs`, `postgres/txn.rs`); a rule is written once against it,
//! so both stores sell a pet, rename a category or refuse a held pet's deletion by the same
//! code. Invariants every implementation keeps: a record's derived keys (its indexes, the
//! inventory's counters) change with it in the same call; what a call returns is what this
//! transaction sees, its own earlier writes included; nothing is durable before the engine
//! commits the whole batch.

use std::future::Future;

use crate::category::CategoryId;
use crate::order::OrderId;
use crate::pet::{Pet, PetId};
use crate::store::claims::IdempotencyKey;
use crate::store::claims::Keyed;
use crate::store::model::{Change, Record, StoreError, StoredPet};
use crate::store::resource::{Counter, Resource};
use crate::subject::Subject;

/// What a write answers its caller (the inner result), or the error that fails its whole
/// batch (the outer one): a rule refuses one write with the inner `Err`, and only a fault of
/// the medium or of stored data fails every write of the batch.
pub(crate) type Outcome<T> = Result<Result<T, StoreError>, StoreError>;

/// What every engine's transaction keeps alike: the batch's time and the changes its rules
/// pushed, in order.
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    /// The Unix time the batch runs at, in seconds and in milliseconds.
    pub(crate) now: u64,
    pub(crate) now_ms: u64,
    pub(crate) changes: Vec<Change>,
}

/// One batch's transaction, as the rules see it. Every method may fail the batch (`Err`) on a
/// fault; none refuses a write by itself: refusing is the rules' part.
pub(crate) trait Txn: Send {
    fn ledger(&mut self) -> &mut Ledger;

    /// Appends `change` to the batch's changes: its event, in the batch's transaction, and
    /// what the batch publishes once committed. A rule pushes each change it made, in order.
    fn push(&mut self, change: Change) {
        self.ledger().changes.push(change);
    }

    /// The Unix time the batch runs at, in seconds: what idempotency records expire by.
    fn now(&mut self) -> u64 {
        self.ledger().now
    }

    /// The same in milliseconds: one time for every order the batch places or moves.
    fn now_ms(&mut self) -> u64 {
        self.ledger().now_ms
    }

    /// The pet `id` and its revision (1 at creation).
    fn pet(
        &mut self,
        id: PetId,
    ) -> impl Future<Output = Result<Option<(Pet, u64)>, StoreError>> + Send;

    /// Stores `new` in place of `old` at its revision (`None`: it is created, at revision 1),
    /// one revision up; its indexes and the inventory follow. Answers the pet as stored.
    fn put_pet(
        &mut self,
        old: Option<(&Pet, u64)>,
        new: &Pet,
    ) -> impl Future<Output = Result<StoredPet, StoreError>> + Send;

    /// Removes pet `old`, with its index entries; the inventory follows.
    fn remove_pet(&mut self, old: &Pet) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The placed order that holds pet `pet`, if one does.
    fn holding_order(
        &mut self,
        pet: PetId,
    ) -> impl Future<Output = Result<Option<OrderId>, StoreError>> + Send;

    /// Record `id` of `R`. (A pet is read with its revision: `pet`.)
    fn get<R: Resource + Send>(
        &mut self,
        id: i64,
    ) -> impl Future<Output = Result<Option<R>, StoreError>> + Send;

    /// Stores `new` in place of `old` (`None`: it is created), with its indexes. (A pet is
    /// stored with its revision and the inventory: `put_pet`.)
    fn put<R: Resource + Sync>(
        &mut self,
        old: Option<&R>,
        new: &R,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Removes `old`, with its index entries. (A pet: `remove_pet`.)
    fn remove<R: Resource + Sync>(
        &mut self,
        old: &R,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Up to `PURGE_BATCH` placed orders whose hold ended by `at_ms`, the oldest end first,
    /// that this transaction may expire (on PostgreSQL, those no other transaction holds).
    fn ended_holds(
        &mut self,
        at_ms: u64,
    ) -> impl Future<Output = Result<Vec<OrderId>, StoreError>> + Send;

    /// The category whose name key (`category::name_key`) is `key`, if one has it.
    fn category_named(
        &mut self,
        key: &str,
    ) -> impl Future<Output = Result<Option<CategoryId>, StoreError>> + Send;

    /// Whether any pet names category `id`.
    fn category_in_use(
        &mut self,
        id: CategoryId,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// The id `counter` gives next, or `IdsExhausted` (the inner error) once it cannot move;
    /// the same until `take_id`, so a write refused after asking gives no id away.
    fn next_id(
        &mut self,
        counter: Counter,
    ) -> impl Future<Output = Result<Result<i64, StoreError>, StoreError>> + Send;

    /// Gives out the id `next_id` answered: its write goes ahead.
    fn take_id(&mut self, counter: Counter);

    /// The idempotency record of `key`'s scope, live or not, as this transaction sees it.
    fn record(
        &mut self,
        key: &IdempotencyKey,
    ) -> impl Future<Output = Result<Option<Record>, StoreError>> + Send;

    /// Keeps `keyed`'s record for `subject` (a pet or an order), unless a
    /// live record holds its scope: then that record, and nothing is kept. On PostgreSQL a
    /// write of another instance under the same key makes this wait for its commit.
    fn claim_record(
        &mut self,
        keyed: &Keyed,
        subject: Subject,
    ) -> impl Future<Output = Result<Option<Record>, StoreError>> + Send;
}

/// The revision a pet is stored at in place of `old` (with its revision): one up, or 1 for a
/// new pet.
pub(crate) fn next_revision(old: Option<(&Pet, u64)>) -> u64 {
    old.map_or(1, |(_, revision)| revision + 1)
}
