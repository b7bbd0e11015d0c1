//! Where a resource is registered: the one list of resources (`each_resource`), the id
//! counters in their lock order (`COUNTERS`), every write the store queues (`Write`), and the
//! rules of those that are a resource's, written once for both stores against the transaction
//! interface (`store/txn.rs`): a file per resource (`pets.rs`, `orders.rs`, `categories.rs`),
//! each of its writes a type (`Rule`) that says what it touches and how it runs. `rules!` below
//! is the one list of them: it makes each one's place in the queue and the one dispatch from a
//! queued write to its rule. The writes that are no resource's (purges, the feed's trim,
//! webhook and session state) are the engine's to run. Invariant: a rule refuses only its own
//! write; an error it returns fails the batch.

use super::model::{Created, Moved, Placed, Rows, StoreError, StoredPet};
pub(crate) use super::resource::Counter;
use super::resource::{ForEach, Index, NextIds, Resource, WithRecords};
use super::sessions::{SessionRecord, SessionsGone};
use super::txn::{Outcome, Txn};
use super::webhooks::WebhookState;
use crate::category::Category;
use crate::order::{Order, OrderId};
use crate::pet::{Pet, PetId};
use crate::subject::Kind;

pub(crate) mod categories;
pub(crate) mod orders;
pub(crate) mod pets;

pub(crate) use categories::{CreateCategory, DeleteCategory, PatchCategory};
pub(crate) use orders::{ExpireOrders, MoveOrder, PlaceOrder};
pub(crate) use pets::{CreatePet, DeletePet, PatchPet};

/// Every id counter, in the one order every transaction that takes several locks them in
/// (PostgreSQL's `lock_rows`, the copy's import).
pub(crate) const COUNTERS: [Counter; 3] = [Pet::COUNTER, Order::COUNTER, Category::COUNTER];

/// Runs `work` for every kind of record the store keeps: the one list of them.
pub(crate) fn each_resource(work: &mut impl ForEach) -> Result<(), StoreError> {
    work.visit::<Pet>()?;
    work.visit::<Category>()?;
    work.visit::<Order>()
}

/// Every index of every resource.
pub(crate) fn all_indexes() -> Vec<&'static Index> {
    struct All(Vec<&'static Index>);
    impl ForEach for All {
        fn visit<R: Resource>(&mut self) -> Result<(), StoreError> {
            self.0.extend_from_slice(R::INDEXES);
            Ok(())
        }
    }
    let mut all = All(Vec::new());
    let _ = each_resource(&mut all);
    all.0
}

/// Every kind of record with its id counter and its table, in `each_resource`'s order.
pub(crate) fn kinds() -> Vec<(Kind, Counter, &'static str)> {
    struct Kinds(Vec<(Kind, Counter, &'static str)>);
    impl ForEach for Kinds {
        fn visit<R: Resource>(&mut self) -> Result<(), StoreError> {
            self.0.push((R::KIND, R::COUNTER, R::TABLE));
            Ok(())
        }
    }
    let mut kinds = Kinds(Vec::new());
    let _ = each_resource(&mut kinds);
    kinds.0
}

impl NextIds {
    /// The counters of every kind of record but pets, each with its kind, in `each_resource`'s
    /// order.
    pub fn others(&self) -> Vec<(Kind, u64)> {
        kinds()
            .into_iter()
            .filter(|(kind, ..)| *kind != Kind::Pet)
            .map(|(kind, counter, _)| (kind, self.of(counter)))
            .collect()
    }
}

impl Rows {
    /// Reads the records back as their resource and hands them to `work`; `Corrupt` if one
    /// does not read back.
    pub(crate) fn each(&self, work: &mut impl WithRecords) -> Result<(), StoreError> {
        struct Visit<'r, W> {
            rows: &'r Rows,
            work: &'r mut W,
        }
        impl<W: WithRecords> ForEach for Visit<'_, W> {
            fn visit<R: Resource>(&mut self) -> Result<(), StoreError> {
                if R::KIND != self.rows.kind {
                    return Ok(());
                }
                let records = self.rows.records.iter();
                let records = records.map(|(id, stored)| R::decode(*id, stored));
                let records = records.collect::<Result<Vec<R>, _>>()?;
                self.work.with(records, self.rows)
            }
        }
        each_resource(&mut Visit { rows: self, work })
    }
}

/// A write of a resource, its rule written once in `store/ops/` against `Txn`.
pub(crate) trait Rule: Send + Sized + 'static {
    /// What the write answers its caller.
    type Answer: Changes + Send + 'static;
    /// Adds what the write touches, said before any write of its batch runs.
    fn touches(&self, touches: &mut Touches);
    /// Runs the write in `txn`.
    async fn run<T: Txn>(&self, txn: &mut T) -> Outcome<Self::Answer>;
    /// Lets go of what the write holds for its caller (its idempotency key's claim), before
    /// the answer leaves: a client that got its 201 and retries at once must get the replay,
    /// not a 409.
    fn release(&mut self) {}
}

/// Every rule, each once: its variant of `Ruled`, named as it, and the dispatch to it. Those
/// after `boxed:` wait in a box, so that a queued write stays as small as the common ones.
macro_rules! rules {
    ($($rule:ident),* ; boxed: $($big:ident),* $(,)?) => {
        /// A resource's write in the queue, with its caller.
        pub(crate) enum Ruled {
            $($rule(Job<$rule>),)*
            $($big(Box<Job<$big>>),)*
        }

        $(impl From<Job<$rule>> for Write {
            fn from(job: Job<$rule>) -> Write {
                Write::Rule(Ruled::$rule(job))
            }
        })*

        $(impl From<Job<$big>> for Write {
            fn from(job: Job<$big>) -> Write {
                Write::Rule(Ruled::$big(Box::new(job)))
            }
        })*

        impl Ruled {
            fn touches(&self, touches: &mut Touches) {
                match self {
                    $(Ruled::$rule(job) => job.rule.touches(touches),)*
                    $(Ruled::$big(job) => job.rule.touches(touches),)*
                }
            }

            async fn run<T: Txn>(&mut self, txn: &mut T) -> Result<(), StoreError> {
                match self {
                    $(Ruled::$rule(job) => job.run(txn).await,)*
                    $(Ruled::$big(job) => job.run(txn).await,)*
                }
            }

            fn settle(&mut self) -> &mut dyn Settle {
                match self {
                    $(Ruled::$rule(job) => job,)*
                    $(Ruled::$big(job) => &mut **job,)*
                }
            }

            fn settled(&self) -> &dyn Settle {
                match self {
                    $(Ruled::$rule(job) => job,)*
                    $(Ruled::$big(job) => &**job,)*
                }
            }
        }
    };
}

rules!(
    CreatePet,
    PatchPet,
    DeletePet,
    MoveOrder,
    ExpireOrders,
    CreateCategory,
    PatchCategory,
    DeleteCategory;
    // 296 bytes inline, where the largest other is 200.
    boxed: PlaceOrder,
);

/// A write waiting for its transaction: what to do and whom to answer.
pub(crate) enum Write {
    /// A resource's write, run by its rule (`run`).
    Rule(Ruled),
    /// Remove up to `PURGE_BATCH` records that expired by this Unix time; answers how many.
    Purge(u64, Pending<usize>),
    /// Remove up to `PURGE_BATCH` of the oldest events, those from before this Unix time in
    /// milliseconds; answers how many.
    Trim(u64, Pending<usize>),
    /// Keep a webhook endpoint's delivery state (redb only: PostgreSQL saves it with its
    /// lease, outside the batches).
    SaveWebhook(Box<(String, WebhookState)>, Pending<()>),
    /// Keep a console session under its token's hash (redb only, as `SaveWebhook`).
    SaveSession(Box<([u8; 32], SessionRecord)>, Pending<()>),
    /// Remove console sessions; answers how many (redb only).
    RemoveSessions(SessionsGone, Pending<usize>),
}

/// A rule and its caller, waiting for its batch.
pub(crate) struct Job<R: Rule> {
    pub(crate) rule: R,
    pending: Pending<R::Answer>,
}

impl<R: Rule> Job<R> {
    pub(crate) fn new(rule: R, pending: Pending<R::Answer>) -> Job<R> {
        Job { rule, pending }
    }

    async fn run<T: Txn>(&mut self, txn: &mut T) -> Result<(), StoreError> {
        self.pending.outcome = Some(self.rule.run(txn).await?);
        Ok(())
    }

    /// Sets the outcome without the rule: for an engine that only records what reached it.
    #[cfg(test)]
    pub(crate) fn set_outcome(&mut self, outcome: Result<R::Answer, StoreError>) {
        self.pending.outcome = Some(outcome);
    }
}

/// Runs `write` by its rule in `txn` and sets its outcome; `Ok(false)` if it is no rule's and
/// the engine runs it.
pub(crate) async fn run<T: Txn>(txn: &mut T, write: &mut Write) -> Result<bool, StoreError> {
    match write {
        Write::Rule(rule) => rule.run(txn).await.map(|()| true),
        _ => Ok(false),
    }
}

/// A caller waiting for one write, and that write's outcome once the transaction has run it.
pub(crate) struct Pending<T> {
    reply: Option<tokio::sync::oneshot::Sender<Result<T, StoreError>>>,
    pub(crate) outcome: Option<Result<T, StoreError>>,
}

impl<T> Pending<T> {
    pub(crate) fn new(reply: tokio::sync::oneshot::Sender<Result<T, StoreError>>) -> Pending<T> {
        Pending {
            reply: Some(reply),
            outcome: None,
        }
    }
}

/// Whether an outcome changed anything that needs a commit: a replay or a purge of nothing
/// did not.
pub(crate) trait Changes {
    fn changed(&self) -> bool {
        true
    }
}

impl Changes for Created {
    fn changed(&self) -> bool {
        !self.replayed
    }
}

impl Changes for Placed {
    fn changed(&self) -> bool {
        !self.replayed
    }
}

impl Changes for Vec<Moved> {
    fn changed(&self) -> bool {
        !self.is_empty()
    }
}

impl Changes for usize {
    fn changed(&self) -> bool {
        *self > 0
    }
}

impl Changes for StoredPet {}
impl Changes for Moved {}
impl Changes for Category {}
impl Changes for i64 {}
impl Changes for u64 {}
impl Changes for () {}

/// What the front does with a write's pending answer, whatever the write answers.
trait Settle: Send {
    /// Whether the caller stopped waiting for the answer.
    fn abandoned(&self) -> bool;
    /// Whether the write, once run, changed anything that needs a commit.
    fn changed(&self) -> bool;
    /// Answers the caller (once): its outcome if the transaction committed, else the failure.
    fn answer(&mut self, failure: Option<&StoreError>);
}

impl<T: Changes + Send> Settle for Pending<T> {
    fn abandoned(&self) -> bool {
        self.reply.as_ref().is_none_or(|reply| reply.is_closed())
    }

    fn changed(&self) -> bool {
        matches!(&self.outcome, Some(Ok(outcome)) if outcome.changed())
    }

    fn answer(&mut self, failure: Option<&StoreError>) {
        let result = match (failure, self.outcome.take()) {
            (Some(e), _) => Err(e.clone()),
            (None, Some(outcome)) => outcome,
            (None, None) => Err(StoreError::Corrupt("a write ran without an outcome".into())),
        };
        if let Some(reply) = self.reply.take() {
            let _ = reply.send(result);
        }
    }
}

impl<R: Rule> Settle for Job<R> {
    fn abandoned(&self) -> bool {
        self.pending.abandoned()
    }

    fn changed(&self) -> bool {
        self.pending.changed()
    }

    fn answer(&mut self, failure: Option<&StoreError>) {
        self.rule.release();
        self.pending.answer(failure);
    }
}

impl Write {
    fn settle(&mut self) -> &mut dyn Settle {
        match self {
            Write::Rule(rule) => rule.settle(),
            Write::Purge(_, pending) | Write::Trim(_, pending) => pending,
            Write::SaveWebhook(_, pending) | Write::SaveSession(_, pending) => pending,
            Write::RemoveSessions(_, pending) => pending,
        }
    }

    fn settled(&self) -> &dyn Settle {
        match self {
            Write::Rule(rule) => rule.settled(),
            Write::Purge(_, pending) | Write::Trim(_, pending) => pending,
            Write::SaveWebhook(_, pending) | Write::SaveSession(_, pending) => pending,
            Write::RemoveSessions(_, pending) => pending,
        }
    }

    /// Answers the caller: its outcome if the batch committed, else `failure`.
    pub(crate) fn answer(mut self, failure: Option<&StoreError>) {
        self.settle().answer(failure);
    }

    /// Whether the caller of this write stopped waiting for it.
    pub(crate) fn abandoned(&self) -> bool {
        self.settled().abandoned()
    }

    /// Whether this write, once run, changed anything that needs a commit.
    pub(crate) fn changed(&self) -> bool {
        self.settled().changed()
    }
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
    /// The batch may give ids from `counter`.
    pub(crate) fn count(&mut self, counter: Counter) {
        if !self.counters.contains(&counter) {
            self.counters.push(counter);
        }
    }
}

/// What `batch` touches, in the order its writes come.
pub(crate) fn touches(batch: &[Write]) -> Touches {
    let mut touches = Touches::default();
    for write in batch {
        if let Write::Rule(rule) = write {
            rule.touches(&mut touches);
        }
    }
    touches
}
/// The tests' writes of a pet or an order whatever its revision (`Precondition::None`).
#[cfg(test)]
pub(crate) mod any_revision {
    use super::{DeletePet, MoveOrder, PatchPet};
    use crate::order::{OrderAction, OrderId};
    use crate::pet::{PetId, PetPatch};
    use crate::store::model::Precondition;

    pub(crate) fn patching(id: PetId, patch: PetPatch) -> PatchPet {
        let precondition = Precondition::None;
        PatchPet {
            id,
            patch,
            precondition,
        }
    }

    pub(crate) fn deleting(id: PetId) -> DeletePet {
        let precondition = Precondition::None;
        DeletePet { id, precondition }
    }

    pub(crate) fn moving(id: OrderId, action: OrderAction) -> MoveOrder {
        let precondition = Precondition::None;
        MoveOrder {
            id,
            action,
            precondition,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queued_write_is_no_larger_than_its_most_common_rules() {
        // Every write moves through the queue and the batch: a large variant costs each one.
        let largest = [
            size_of::<Job<CreatePet>>(),
            size_of::<Job<PatchPet>>(),
            size_of::<Job<MoveOrder>>(),
        ];
        assert!(size_of::<Write>() <= largest.into_iter().max().unwrap_or(0) + 8);
    }
}
