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

use super::claims::{Claims, IdempotencyKey, KeyClaim, Keyed};
use super::events::now_ms;
use super::model::{Change, Record, Settled, StoreError};
use super::ops::{ExpireOrders, Job, Pending, Rule, Write};
use super::sessions::{SessionRecord, SessionsGone};
use super::webhooks::WebhookState;
use crate::clock::unix_now;

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

    /// Runs `rule` in the next batch and waits for its answer.
    pub(super) async fn write<R: Rule>(&self, rule: R) -> Result<R::Answer, StoreError>
    where
        Write: From<Job<R>>,
    {
        self.write_since(Instant::now(), rule).await
    }

    /// `write`, for a caller that began at `started`: the wait for the answer is bounded from
    /// then (`answer_within`).
    pub(super) async fn write_since<R: Rule>(
        &self,
        started: Instant,
        rule: R,
    ) -> Result<R::Answer, StoreError>
    where
        Write: From<Job<R>>,
    {
        self.queue(started, |reply| Job::new(rule, Pending::new(reply)).into())
            .await
    }

    /// The key a keyed write carries into its batch, with the expiry its record gets, or,
    /// when `record` (the engine's record for the key's scope, read before the batch) is live,
    /// what it answers instead (`answer`): a replay, or `IdempotencyKeyReused`. The engine
    /// checks again in its transaction, since a retry may pass here before the first write
    /// commits.
    pub(super) async fn keyed<A>(
        &self,
        started: Instant,
        key: IdempotencyKey,
        record: impl Future<Output = Result<Option<Record>, StoreError>>,
        answer: impl FnOnce(Record, &IdempotencyKey, u64) -> Option<Result<A, StoreError>>,
    ) -> Result<Result<Keyed, A>, StoreError> {
        let now = unix_now();
        let record = self.within(started, record, StoreError::Io).await?;
        if let Some(answer) = record.and_then(|record| answer(record, &key, now)) {
            return answer.map(Err);
        }
        // The claim travels with the write and ends with it, even if this caller goes away.
        Ok(Ok(Keyed {
            key,
            expires_at: now.saturating_add(self.idempotency_ttl.as_secs()),
        }))
    }

    /// How long a placed order holds its pet (`None`: until completed or cancelled).
    pub(super) fn order_hold(&self) -> Option<Duration> {
        self.order_hold
    }

    pub(super) async fn save_webhook(
        &self,
        id: String,
        state: WebhookState,
    ) -> Result<(), StoreError> {
        self.queue(Instant::now(), |reply| {
            Write::SaveWebhook(Box::new((id, state)), Pending::new(reply))
        })
        .await
    }

    pub(super) async fn save_session(
        &self,
        token: [u8; 32],
        record: SessionRecord,
    ) -> Result<(), StoreError> {
        self.queue(Instant::now(), |reply| {
            Write::SaveSession(Box::new((token, record)), Pending::new(reply))
        })
        .await
    }

    pub(super) async fn remove_sessions(&self, gone: SessionsGone) -> Result<usize, StoreError> {
        self.queue(Instant::now(), |reply| {
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
    async fn queue<T>(
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
async fn expire_once(queue: &mpsc::Sender<Command>, at_ms: u64) -> Result<usize, StoreError> {
    let (reply, answer) = oneshot::channel();
    let job = Job::new(ExpireOrders { at_ms }, Pending::new(reply));
    queue
        .send(Command::Write(job.into()))
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
    use crate::store::model::Precondition;
    use crate::store::ops::DeletePet;

    /// An engine that only records which writes reached it, for the front's own rules.
    #[derive(Clone, Default)]
    struct Recorder(Arc<Mutex<Vec<crate::pet::PetId>>>);

    impl Engine for Recorder {
        async fn commit(&mut self, batch: &mut [Write]) -> Result<Option<Vec<Change>>, StoreError> {
            let mut ran = self.0.lock().expect("lock");
            for write in batch.iter_mut() {
                if let Write::Rule(super::super::ops::Ruled::DeletePet(job)) = write {
                    ran.push(job.rule.id);
                    job.set_outcome(Ok(1));
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
            let delete = |id| DeletePet {
                id,
                precondition: Precondition::None,
            };
            let mut gone = Box::pin(front.write(delete(1)));
            let mut polled = std::task::Context::from_waker(std::task::Waker::noop());
            assert!(gone.as_mut().poll(&mut polled).is_pending(), "queued");
            drop(gone);
            front.write(delete(2)).await.expect("runs");
            assert_eq!(*recorder.0.lock().expect("lock"), [2]);
            front.close().await;
        });
    }
}
