//! The one write front above both engines. A write claims its idempotency key, queues, joins
//! the next batch (every write queued while the last commit ran: group commit) and is settled
//! once its batch has committed or failed: counted, published to listeners in commit order,
//! answered. Expired idempotency records are purged through the same queue. An engine only
//! runs a batch in one transaction and makes it durable (`Engine`). Invariants: each caller is
//! answered exactly once, after its batch is durable and readable, or has failed; a write
//! whose caller has gone before its batch began is not run, on any engine.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{broadcast, mpsc, oneshot, watch};

use super::claims::{Claims, IdempotencyKey, KeyClaim};
use super::events::now_ms;
use super::model::{
    Change, Created, Moved, Placed, Precondition, Record, Settled, StoreError, StoredPet,
};
use super::sessions::{SessionRecord, SessionsGone};
use super::webhooks::WebhookState;
use crate::category::{Category, CategoryId, CategoryPatch, NewCategory};
use crate::clock::unix_now;
use crate::order::{NewOrder, OrderAction, OrderId};
use crate::pet::{NewPet, PetId, PetPatch};

/// How long the event feed keeps an event unless told otherwise (`--events-keep`).
pub const DEFAULT_EVENTS_KEEP: Duration = Duration::from_secs(7 * 24 * 3600);
/// How long a placed order holds its pet unless told otherwise (`--order-hold`).
pub const DEFAULT_ORDER_HOLD: Duration = Duration::from_secs(30 * 60);
/// How often placed orders whose hold has ended are looked for: a hold ends within about this
/// much of its `expiresAt`.
const EXPIRE_INTERVAL: Duration = Duration::from_secs(1);
/// How many queued writes one transaction takes by default; bounds the latency of a batch.
pub const DEFAULT_MAX_WRITE_BATCH: usize = 1024;
/// Writes waiting for the engine before callers wait to enqueue.
const WRITE_QUEUE: usize = 4096;
/// Most expired idempotency records one purge transaction removes: writes queued behind it
/// wait for at most this much work, and the purge goes on behind them.
pub(super) const PURGE_BATCH: usize = 1000;
/// How often expired idempotency records are looked for.
const PURGE_INTERVAL: Duration = Duration::from_secs(60);
/// Committed batches a listener may lag behind by; one further behind is told how many it
/// missed (`broadcast`'s `Lagged`), never slows the writer.
const SETTLED_BACKLOG: usize = 1024;

/// How a store behaves, whatever its backend.
#[derive(Clone, Copy, Debug)]
pub struct Tuning {
    /// How long an idempotency record answers its key.
    pub idempotency_ttl: Duration,
    /// Most queued writes one transaction takes (1: group commit off, for measurements).
    pub max_write_batch: usize,
    /// How long the event feed keeps an event.
    pub events_keep: Duration,
    /// How long a placed order holds its pet (`None`: until completed or cancelled).
    pub order_hold: Option<Duration>,
}

/// What the engine's loop takes from its queue.
pub(super) enum Command {
    Write(Write),
    Close(oneshot::Sender<()>),
}

/// A key with the expiry its record gets if the create goes ahead.
pub(crate) struct Keyed {
    pub(crate) key: IdempotencyKey,
    pub(crate) expires_at: u64,
}

/// A write waiting for its transaction: what to do and whom to answer.
pub(crate) enum Write {
    Create(NewPet, Option<Keyed>, Pending<Created>),
    Patch(PetId, PetPatch, Precondition, Pending<StoredPet>),
    /// Answers the revision the pet was at when it was removed.
    Delete(PetId, Precondition, Pending<u64>),
    /// Remove up to `PURGE_BATCH` records that expired by this Unix time; answers how many.
    Purge(u64, Pending<usize>),
    /// Remove up to `PURGE_BATCH` of the oldest events, those from before this Unix time in
    /// milliseconds; answers how many.
    Trim(u64, Pending<usize>),
    /// Place an order: its pet goes from `available` to `pending`.
    PlaceOrder(Box<PlaceOrder>, Pending<Placed>),
    /// Complete or cancel a placed order (never `Expire`: see `Expire`), if its revision
    /// meets the precondition; its pet becomes `sold` or `available`.
    MoveOrder(OrderId, OrderAction, Precondition, Pending<Moved>),
    /// Expire up to `PURGE_BATCH` placed orders whose hold ended by this Unix time in
    /// milliseconds, oldest end first; answers each with its pet.
    Expire(u64, Pending<Vec<Moved>>),
    CreateCategory(NewCategory, Pending<Category>),
    PatchCategory(CategoryId, CategoryPatch, Pending<Category>),
    /// Answers the id of the category removed.
    DeleteCategory(CategoryId, Pending<CategoryId>),
    /// Keep a webhook endpoint's delivery state (redb only: PostgreSQL saves it with its
    /// lease, outside the batches).
    SaveWebhook(Box<(String, WebhookState)>, Pending<()>),
    /// Keep a console session under its token's hash (redb only, as `SaveWebhook`).
    SaveSession(Box<([u8; 32], SessionRecord)>, Pending<()>),
    /// Remove console sessions; answers how many (redb only).
    RemoveSessions(SessionsGone, Pending<usize>),
}

/// An order to place: the client's, its key if it sent one, and how long it holds its pet.
pub(crate) struct PlaceOrder {
    pub(crate) order: NewOrder,
    pub(crate) keyed: Option<Keyed>,
    pub(crate) hold: Option<Duration>,
}

/// A caller waiting for one write, and that write's outcome once the transaction has run it.
pub(crate) struct Pending<T> {
    reply: Option<oneshot::Sender<Result<T, StoreError>>>,
    pub(crate) outcome: Option<Result<T, StoreError>>,
}

impl<T> Pending<T> {
    fn new(reply: oneshot::Sender<Result<T, StoreError>>) -> Pending<T> {
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

/// The pending answer of a write (`&Write` or `&mut Write`): the one match on every kind of
/// write the front needs.
macro_rules! pending_of {
    ($write:expr) => {
        match $write {
            Write::Create(.., pending) => pending,
            Write::Patch(.., pending) => pending,
            Write::Delete(.., pending) => pending,
            Write::Purge(_, pending) | Write::Trim(_, pending) => pending,
            Write::PlaceOrder(_, pending) => pending,
            Write::MoveOrder(.., pending) => pending,
            Write::Expire(_, pending) => pending,
            Write::CreateCategory(_, pending) | Write::PatchCategory(_, _, pending) => pending,
            Write::DeleteCategory(_, pending) => pending,
            Write::SaveWebhook(_, pending) | Write::SaveSession(_, pending) => pending,
            Write::RemoveSessions(_, pending) => pending,
        }
    };
}

impl Write {
    fn pending(&self) -> &dyn Settle {
        pending_of!(self)
    }

    fn answer(mut self, failure: Option<&StoreError>) {
        // The key's claim ends before the answer leaves: a client that got its 201 and
        // retries at once must get the replay, not a 409.
        match &mut self {
            Write::Create(_, keyed, _) => drop(keyed.take()),
            Write::PlaceOrder(place, _) => drop(place.keyed.take()),
            _ => {}
        }
        let pending: &mut dyn Settle = pending_of!(&mut self);
        pending.answer(failure);
    }

    /// Whether the caller of this write stopped waiting for it.
    fn abandoned(&self) -> bool {
        self.pending().abandoned()
    }

    /// Whether this write, once run, changed anything that needs a commit.
    pub(super) fn changed(&self) -> bool {
        self.pending().changed()
    }
}

/// An engine under the front: runs a batch and makes it durable, nothing else.
pub(super) trait Engine: Send + 'static {
    /// Runs every write of `batch`, in order, in one transaction, setting each one's outcome
    /// (`ops::run` for a resource's rules); a write that cannot go ahead (no such pet, a
    /// failed precondition, a reused key) only sets its own. Returns once the transaction is
    /// durable and readers see it: the changes the rules pushed, in order (their events, in
    /// the same transaction), if it committed; `None` if it changed nothing and was rolled
    /// back. An error fails the whole batch: nothing of it is stored, or, with `InDoubt`,
    /// maybe all of it.
    fn commit(
        &mut self,
        batch: &mut [Write],
    ) -> impl Future<Output = Result<Option<Vec<Change>>, StoreError>> + Send;

    /// After the last batch, at a clean stop.
    fn close(&mut self) -> impl Future<Output = ()> + Send;
}

/// Where an engine's batches run.
pub(super) enum Runs {
    /// A thread of its own, named so: an engine that blocks on the disk.
    OnThread(&'static str),
    /// A task on the caller's tokio runtime: an engine that waits on the network.
    OnRuntime,
}

/// The write side of an open store; cheap to clone.
#[derive(Clone)]
pub(super) struct Front {
    queue: mpsc::Sender<Command>,
    /// Idempotency keys whose create is in flight in this process.
    claims: Arc<Claims>,
    /// Where committed batches are published; the loop holds the other sender.
    settled: broadcast::Sender<Settled>,
    /// How many events this process's commits appended: a change wakes its watchers.
    appended: watch::Sender<u64>,
    /// How long an idempotency record answers its key.
    idempotency_ttl: Duration,
    /// How long a placed order holds its pet (`None`: until completed or cancelled).
    order_hold: Option<Duration>,
    /// The longest a caller waits for its write, queue and commit together; `None`: until
    /// the engine answers.
    answer_within: Option<Duration>,
}

impl Front {
    /// Starts the engine's loop, and, inside a tokio runtime, the purge of expired
    /// idempotency records.
    pub(super) fn start<E: Engine>(
        engine: E,
        tuning: Tuning,
        answer_within: Option<Duration>,
        runs: Runs,
    ) -> Result<Front, StoreError> {
        let Tuning {
            idempotency_ttl,
            max_write_batch,
            events_keep,
            order_hold,
        } = tuning;
        let (queue, commands) = mpsc::channel(WRITE_QUEUE);
        let (settled, _) = broadcast::channel(SETTLED_BACKLOG);
        let appended = watch::Sender::new(0);
        let tell = Tell {
            settled: settled.clone(),
            appended: appended.clone(),
        };
        let run = write_loop(engine, commands, max_write_batch.max(1), tell);
        match runs {
            Runs::OnThread(name) => {
                let thread_failed = |e: std::io::Error| {
                    StoreError::Io(format!("the {name} thread did not start: {e}"))
                };
                // The loop only awaits its queue and the engine, which answers at once: a
                // runtime without I/O or timers is enough.
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .build()
                    .map_err(thread_failed)?;
                std::thread::Builder::new()
                    .name(name.into())
                    .spawn(move || runtime.block_on(run))
                    .map_err(thread_failed)?;
            }
            Runs::OnRuntime => {
                tokio::spawn(run);
            }
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(purge_loop(queue.downgrade(), Purging::Records));
            runtime.spawn(purge_loop(queue.downgrade(), Purging::Events(events_keep)));
            // Also without a hold: orders placed under an earlier `--order-hold` still end.
            runtime.spawn(purge_loop(queue.downgrade(), Purging::Holds));
        }
        Ok(Front {
            queue,
            claims: Arc::default(),
            settled,
            appended,
            idempotency_ttl,
            order_hold,
            answer_within,
        })
    }

    /// Claims an idempotency scope for one request, or `IdempotencyKeyInFlight` while another
    /// request of this process holds it.
    pub(super) fn claim_key(&self, scope: [u8; 32]) -> Result<KeyClaim, StoreError> {
        self.claims
            .claim(scope)
            .ok_or(StoreError::IdempotencyKeyInFlight)
    }

    /// Every batch committed from now on, in commit order.
    pub(super) fn subscribe(&self) -> broadcast::Receiver<Settled> {
        self.settled.subscribe()
    }

    pub(super) fn appended(&self) -> watch::Receiver<u64> {
        self.appended.subscribe()
    }

    /// Adds a pet. With a key, `record` is the engine's record for the key's scope: a live
    /// one answers instead (`replayed`, or `IdempotencyKeyReused` for another pet); the engine
    /// checks again in its transaction, since a retry may pass here before the first create
    /// commits.
    pub(super) async fn create(
        &self,
        pet: NewPet,
        key: Option<IdempotencyKey>,
        record: impl Future<Output = Result<Option<Record>, StoreError>>,
    ) -> Result<Created, StoreError> {
        let started = Instant::now();
        let Some(key) = key else {
            return self
                .write(started, |reply| {
                    Write::Create(pet, None, Pending::new(reply))
                })
                .await;
        };
        let now = unix_now();
        let record = self.within(started, record, StoreError::Io).await?;
        if let Some(answer) = record.and_then(|record| record.answer(&key, &pet, now)) {
            return answer;
        }
        // The claim travels with the write and ends with it, even if this caller goes away.
        let keyed = Keyed {
            key,
            expires_at: now.saturating_add(self.idempotency_ttl.as_secs()),
        };
        self.write(started, |reply| {
            Write::Create(pet, Some(keyed), Pending::new(reply))
        })
        .await
    }

    /// Applies `patch` to the pet `id` if its revision meets `precondition`.
    pub(super) async fn patch(
        &self,
        id: PetId,
        patch: PetPatch,
        precondition: Precondition,
    ) -> Result<StoredPet, StoreError> {
        self.write(Instant::now(), |reply| {
            Write::Patch(id, patch, precondition, Pending::new(reply))
        })
        .await
    }

    /// Removes the pet `id` if its revision meets `precondition`.
    pub(super) async fn delete(
        &self,
        id: PetId,
        precondition: Precondition,
    ) -> Result<(), StoreError> {
        self.write(Instant::now(), |reply| {
            Write::Delete(id, precondition, Pending::new(reply))
        })
        .await
        .map(|_revision| ())
    }

    /// Places an order for `order.pet_id`, held for the store's `--order-hold`. With a key,
    /// `record` is the engine's record for its scope: a live one for this order answers its id
    /// instead (`replayed`: the caller reads the order), one for another body or a pet is
    /// `IdempotencyKeyReused`; the engine checks again in its transaction.
    pub(super) async fn place_order(
        &self,
        order: NewOrder,
        key: Option<IdempotencyKey>,
        record: impl Future<Output = Result<Option<Record>, StoreError>>,
    ) -> Result<Result<Placed, OrderId>, StoreError> {
        let started = Instant::now();
        let keyed = match key {
            None => None,
            Some(key) => {
                let now = unix_now();
                let record = self.within(started, record, StoreError::Io).await?;
                if let Some(answer) = record.and_then(|record| record.order_answer(&key, now)) {
                    return answer.map(Err);
                }
                Some(Keyed {
                    key,
                    expires_at: now.saturating_add(self.idempotency_ttl.as_secs()),
                })
            }
        };
        let place = PlaceOrder {
            order,
            keyed,
            hold: self.order_hold,
        };
        self.write(started, |reply| {
            Write::PlaceOrder(Box::new(place), Pending::new(reply))
        })
        .await
        .map(Ok)
    }

    /// Completes or cancels order `id` if its revision meets `precondition`.
    pub(super) async fn move_order(
        &self,
        id: OrderId,
        action: OrderAction,
        precondition: Precondition,
    ) -> Result<Moved, StoreError> {
        self.write(Instant::now(), |reply| {
            Write::MoveOrder(id, action, precondition, Pending::new(reply))
        })
        .await
    }

    pub(super) async fn create_category(&self, new: NewCategory) -> Result<Category, StoreError> {
        self.write(Instant::now(), |reply| {
            Write::CreateCategory(new, Pending::new(reply))
        })
        .await
    }

    pub(super) async fn patch_category(
        &self,
        id: CategoryId,
        patch: CategoryPatch,
    ) -> Result<Category, StoreError> {
        self.write(Instant::now(), |reply| {
            Write::PatchCategory(id, patch, Pending::new(reply))
        })
        .await
    }

    pub(super) async fn delete_category(&self, id: CategoryId) -> Result<(), StoreError> {
        self.write(Instant::now(), |reply| {
            Write::DeleteCategory(id, Pending::new(reply))
        })
        .await
        .map(|_| ())
    }

    pub(super) async fn save_webhook(
        &self,
        id: String,
        state: WebhookState,
    ) -> Result<(), StoreError> {
        self.write(Instant::now(), |reply| {
            Write::SaveWebhook(Box::new((id, state)), Pending::new(reply))
        })
        .await
    }

    pub(super) async fn save_session(
        &self,
        token: [u8; 32],
        record: SessionRecord,
    ) -> Result<(), StoreError> {
        self.write(Instant::now(), |reply| {
            Write::SaveSession(Box::new((token, record)), Pending::new(reply))
        })
        .await
    }

    pub(super) async fn remove_sessions(&self, gone: SessionsGone) -> Result<usize, StoreError> {
        self.write(Instant::now(), |reply| {
            Write::RemoveSessions(gone, Pending::new(reply))
        })
        .await
    }

    /// Expires the placed orders whose hold ended by `now_ms`, up to `PURGE_BATCH`.
    #[cfg(test)]
    pub(super) async fn expire(&self, now_ms: u64) -> Result<usize, StoreError> {
        expire_once(&self.queue, now_ms).await
    }

    /// Removes up to `PURGE_BATCH` records expired by `now`; answers how many.
    #[cfg(test)]
    pub(super) async fn purge(&self, now: u64) -> Result<usize, StoreError> {
        purge_once(&self.queue, Write::Purge, now).await
    }

    /// Removes up to `PURGE_BATCH` of the oldest events, from before `before_ms`.
    #[cfg(test)]
    pub(super) async fn trim(&self, before_ms: u64) -> Result<usize, StoreError> {
        purge_once(&self.queue, Write::Trim, before_ms).await
    }

    /// Finishes the writes already queued and stops the engine; later writes get `Closed`.
    pub(super) async fn close(&self) {
        let (done, closed) = oneshot::channel();
        if self.queue.send(Command::Close(done)).await.is_ok() {
            let _ = closed.await;
        }
    }

    /// Whether the engine's loop has stopped.
    pub(super) fn is_closed(&self) -> bool {
        self.queue.is_closed()
    }

    /// Queues a write and waits for its answer.
    async fn write<T>(
        &self,
        started: Instant,
        make: impl FnOnce(oneshot::Sender<Result<T, StoreError>>) -> Write,
    ) -> Result<T, StoreError> {
        let (reply, answer) = oneshot::channel();
        let command = Command::Write(make(reply));
        let queued = async {
            self.queue
                .send(command)
                .await
                .map_err(|_| StoreError::Closed)?;
            answer.await.map_err(|_| StoreError::Closed)?
        };
        // A write given up on may have begun its batch: its outcome is unknown. One that had
        // not is never run (`write_loop`).
        self.within(started, queued, StoreError::InDoubt).await
    }

    /// `work`, bounded by what is left of `answer_within` since `started`; past it, the error
    /// `late` makes of the reason.
    async fn within<T>(
        &self,
        started: Instant,
        work: impl Future<Output = Result<T, StoreError>>,
        late: fn(String) -> StoreError,
    ) -> Result<T, StoreError> {
        let Some(bound) = self.answer_within else {
            return work.await;
        };
        let left = bound.saturating_sub(started.elapsed());
        tokio::time::timeout(left, work).await.unwrap_or_else(|_| {
            Err(late(format!(
                "no answer from the database within {} s",
                bound.as_secs()
            )))
        })
    }
}

/// Whom a committed batch tells of it: listeners to its changes, and the count of events this
/// process appended, which wakes webhook deliveries without making any change's event.
struct Tell {
    settled: broadcast::Sender<Settled>,
    appended: watch::Sender<u64>,
}

/// The engine's loop: every write queued while the last batch ran goes into the next.
async fn write_loop<E: Engine>(
    mut engine: E,
    mut queue: mpsc::Receiver<Command>,
    max_batch: usize,
    tell: Tell,
) {
    let mut batch = Vec::with_capacity(max_batch);
    let mut stats = WriteStats::default();
    while let Some(first) = queue.recv().await {
        let closing = gather(first, &mut queue, &mut batch, max_batch);
        // Writes whose callers stopped waiting (a client gone, a 503 after `answer_within`)
        // are not run: nobody would hear of them, and an outage's backlog would otherwise
        // replay at once when it ends. A retry with the same Idempotency-Key creates the pet.
        batch.retain(|write| !write.abandoned());
        if !batch.is_empty() {
            stats.count(settle(&mut engine, &mut batch, &tell).await);
        }
        if let Some(done) = closing {
            engine.close().await;
            stats.report();
            let _ = done.send(());
            return;
        }
    }
    engine.close().await;
    stats.report();
}

/// Commits one batch and settles it: counts it, publishes what it changed (before any answer,
/// so a listener hears of a change no later than its writer), and answers every caller.
/// Returns how many writes changed something.
async fn settle<E: Engine>(engine: &mut E, batch: &mut Vec<Write>, tell: &Tell) -> u64 {
    let settled = &tell.settled;
    let began = Instant::now();
    match engine.commit(batch).await {
        Ok(committed) => {
            let changed = batch.iter().filter(|write| write.changed()).count() as u64;
            if let Some(changes) = committed {
                crate::metrics::store_committed(began.elapsed(), batch.len());
                // Each change appended one event, in the same transaction.
                crate::metrics::events_appended(changes.len());
                crate::metrics::orders_moved(changes.iter().map(|change| change.kind));
                if !changes.is_empty() {
                    tell.appended.send_modify(|n| *n += changes.len() as u64);
                    // A send with no listener (no event stream open) is refused, and costs
                    // only the move of the vector.
                    if settled.receiver_count() > 0 {
                        let _ = settled.send(Settled::from(changes));
                    }
                }
            }
            for write in batch.drain(..) {
                write.answer(None);
            }
            changed
        }
        Err(e) => {
            crate::metrics::store_commit_failed();
            if !matches!(e, StoreError::Reopening) {
                tracing::warn!(error = %e, writes = batch.len(), "write transaction failed");
            }
            for write in batch.drain(..) {
                write.answer(Some(&e));
            }
            0
        }
    }
}

/// Adds `first` and every write queued behind it (up to `max` in all) to `batch`. On a close,
/// the writes already queued behind it are taken too, since their callers are waiting, and the
/// queue is closed; returns the close's reply then.
fn gather(
    first: Command,
    queue: &mut mpsc::Receiver<Command>,
    batch: &mut Vec<Write>,
    max: usize,
) -> Option<oneshot::Sender<()>> {
    let mut next = Some(first);
    while let Some(command) = next.take() {
        match command {
            Command::Write(write) => batch.push(write),
            Command::Close(done) => {
                while let Ok(Command::Write(write)) = queue.try_recv() {
                    batch.push(write);
                }
                queue.close();
                return Some(done);
            }
        }
        if batch.len() < max {
            next = queue.try_recv().ok();
        }
    }
    None
}

/// What the loop did in its life, logged when it ends: with the run's length it gives the mean
/// batch size and the commit rate.
#[derive(Default)]
struct WriteStats {
    commits: u64,
    writes: u64,
}

impl WriteStats {
    fn count(&mut self, changed: u64) {
        // A batch that changed nothing was rolled back, not committed.
        self.commits += u64::from(changed > 0);
        self.writes += changed;
    }

    fn report(&self) {
        tracing::info!(commits = self.commits, writes = self.writes, "store closed");
    }
}

/// A purge's write, made from the time it purges before and its caller.
type PurgeWrite = fn(u64, Pending<usize>) -> Write;

/// One purge transaction through the queue: `make` names what it purges.
async fn purge_once(
    queue: &mpsc::Sender<Command>,
    make: PurgeWrite,
    before: u64,
) -> Result<usize, StoreError> {
    let (reply, answer) = oneshot::channel();
    queue
        .send(Command::Write(make(before, Pending::new(reply))))
        .await
        .map_err(|_| StoreError::Closed)?;
    answer.await.map_err(|_| StoreError::Closed)?
}

/// What a purge loop removes, and from when.
#[derive(Clone, Copy)]
enum Purging {
    /// Idempotency records expired by now.
    Records,
    /// Events older than this.
    Events(Duration),
    /// Placed orders whose hold has ended: they expire.
    Holds,
}

impl Purging {
    fn what(self) -> &'static str {
        match self {
            Purging::Records => "expired idempotency records",
            Purging::Events(_) => "events past --events-keep",
            Purging::Holds => "orders whose hold ended",
        }
    }

    fn interval(self) -> Duration {
        match self {
            Purging::Records => PURGE_INTERVAL,
            // A short retention is kept to within a quarter of itself.
            Purging::Events(keep) => (keep / 4).clamp(Duration::from_secs(1), PURGE_INTERVAL),
            Purging::Holds => EXPIRE_INTERVAL,
        }
    }

    /// Queues the write that purges up to `PURGE_BATCH` now; answers how many it purged.
    async fn once(self, queue: &mpsc::Sender<Command>) -> Result<usize, StoreError> {
        match self {
            Purging::Records => purge_once(queue, Write::Purge, unix_now()).await,
            Purging::Events(keep) => {
                let keep = u64::try_from(keep.as_millis()).unwrap_or(u64::MAX);
                purge_once(queue, Write::Trim, now_ms().saturating_sub(keep)).await
            }
            Purging::Holds => expire_once(queue, now_ms()).await,
        }
    }
}

/// Expires the placed orders whose hold ended by `now_ms`, up to `PURGE_BATCH`.
async fn expire_once(queue: &mpsc::Sender<Command>, now_ms: u64) -> Result<usize, StoreError> {
    let (reply, answer) = oneshot::channel();
    queue
        .send(Command::Write(Write::Expire(now_ms, Pending::new(reply))))
        .await
        .map_err(|_| StoreError::Closed)?;
    let expired = answer.await.map_err(|_| StoreError::Closed)??;
    if !expired.is_empty() {
        tracing::info!(orders = expired.len(), "orders expired: their hold ended");
    }
    Ok(expired.len())
}

/// Purges every `interval`, one batch a transaction, until nothing is left to purge; each
/// batch queues behind the writes already waiting, so a large purge never holds creates back
/// for more than one batch. Ends with the store.
async fn purge_loop(queue: mpsc::WeakSender<Command>, purging: Purging) {
    let mut ticks = tokio::time::interval(purging.interval());
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let mut purged = 0;
        loop {
            let Some(sender) = queue.upgrade() else {
                return;
            };
            match purging.once(&sender).await {
                Ok(count) => {
                    purged += count;
                    if count < PURGE_BATCH {
                        break;
                    }
                }
                Err(StoreError::Closed) => return,
                Err(e) => {
                    tracing::warn!(error = %e, what = purging.what(), "purging failed; retrying later");
                    break;
                }
            }
        }
        if purged > 0 {
            tracing::debug!(purged, what = purging.what(), "purged");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// An engine that only records which writes reached it, for the front's own rules.
    #[derive(Clone, Default)]
    struct Recorder(Arc<Mutex<Vec<PetId>>>);

    impl Engine for Recorder {
        async fn commit(&mut self, batch: &mut [Write]) -> Result<Option<Vec<Change>>, StoreError> {
            let mut ran = self.0.lock().expect("lock");
            for write in batch.iter_mut() {
                if let Write::Delete(id, _, pending) = write {
                    ran.push(*id);
                    pending.outcome = Some(Ok(1));
                }
            }
            Ok(Some(Vec::new()))
        }

        async fn close(&mut self) {}
    }

    #[test]
    fn a_write_whose_caller_has_gone_before_its_batch_is_not_run() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a current-thread runtime builds");
        runtime.block_on(async {
            let recorder = Recorder::default();
            let tuning = Tuning {
                idempotency_ttl: Duration::from_secs(60),
                max_write_batch: 16,
                events_keep: Duration::from_secs(60),
                order_hold: None,
            };
            let front =
                Front::start(recorder.clone(), tuning, None, Runs::OnRuntime).expect("starts");
            // Queued by one poll, then given up: the loop's task has not run meanwhile.
            let mut gone = Box::pin(front.delete(1, Precondition::None));
            let mut polled = std::task::Context::from_waker(std::task::Waker::noop());
            assert!(gone.as_mut().poll(&mut polled).is_pending(), "queued");
            drop(gone);
            front.delete(2, Precondition::None).await.expect("runs");
            assert_eq!(*recorder.0.lock().expect("lock"), [2]);
            front.close().await;
        });
    }
}
