//! Delivery: one task per endpoint reads the event feed after the endpoint's position and POSTs
//! each event of its types, signed, in feed order, one at a time. The position moves, durably,
//! only after a 2xx; a failure is retried on the schedule (`--webhook-retry-schedule`, with
//! jitter, or the receiver's `Retry-After`) while the later events wait; a 410, the last try
//! failed or a position the feed no longer holds stops the endpoint until `petstore webhooks
//! enable`. On PostgreSQL a task delivers only while its instance holds the endpoint's lease,
//! and every save is fenced by it.
//! Invariants: an event is sent only after every earlier one of the endpoint's types got a 2xx;
//! a crash resends at most the event in flight; no event is skipped, ever: an endpoint that
//! cannot go on stops, with its reason in the store, the log and `webhooks list`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::header::{CONTENT_LENGTH, CONTENT_TYPE, HOST, RETRY_AFTER, USER_AGENT};
use hyper::{Method, Request, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::endpoints::Endpoint;
use super::sign::signature;
use super::target::resolve;
use crate::event::Position;
use crate::metrics::{self, WebhookOutcome};
use crate::store::{EventQuery, ReadError, Store, StoredEvent, WebhookState};

/// How long one delivery may take, connect and answer included: past it, a failure.
pub const DELIVERY_TIMEOUT: Duration = Duration::from_secs(15);
/// The longest `Retry-After` taken; a longer one waits this long.
const MOST_RETRY_AFTER: Duration = Duration::from_secs(24 * 3600);
/// Events read from the store at a time.
const PAGE: usize = 32;
/// Events a filtered read looks at before it answers.
const SCAN: usize = 10_000;
/// How often an idle task looks at the feed anyway: this process's commits wake it at once,
/// but other instances' (PostgreSQL) do not, nor does a commit settled after a reopen.
const POLL_OWN: Duration = Duration::from_secs(1);
const POLL_SHARED: Duration = Duration::from_millis(100);
/// How often a task renews its lease (PostgreSQL), well inside `store::webhooks::LEASE`.
const RENEW_EVERY: Duration = Duration::from_secs(2);
/// A failed read or save of the store is tried again after this.
const STORE_RETRY: Duration = Duration::from_secs(1);
/// The most of a receiver's answer read (and thrown away); past it the connection is closed.
const MOST_ANSWER_BYTES: usize = 64 * 1024;

/// What every delivery of this process shares.
pub struct Settings {
    /// The wait after each failed try, in order; the endpoint stops after the last.
    pub schedule: Vec<Duration>,
    /// Receivers may be at loopback or private addresses (`--webhooks-allow-private`).
    pub allow_private: bool,
    /// TLS to receivers: the system's roots or `--webhooks-ca`.
    pub tls: Arc<rustls::ClientConfig>,
}

/// TLS to receivers: ring, and the `--webhooks-ca` certificates or else the system's roots.
pub fn client_tls(ca: Option<&std::path::Path>) -> anyhow::Result<Arc<rustls::ClientConfig>> {
    let config = crate::tls::client_config(ca, "webhook receivers", "--webhooks-ca")?;
    Ok(Arc::new(config))
}

/// The deliveries of this process: a task per endpoint of the endpoints file.
pub struct Webhooks {
    shared: Arc<Shared>,
    tasks: Mutex<HashMap<String, Task>>,
}

struct Shared {
    store: Store,
    settings: Settings,
    /// This process's name in leases: random, new at each start.
    holder: String,
    stopping: watch::Sender<bool>,
}

struct Task {
    endpoint: watch::Sender<Endpoint>,
    handle: JoinHandle<()>,
    name: String,
}

impl Webhooks {
    pub async fn start(store: Store, settings: Settings, endpoints: Vec<Endpoint>) -> Webhooks {
        let mut holder = [0u8; 8];
        // A name that repeats only costs a lease taken over early by a twin: fall back to time.
        if getrandom::fill(&mut holder).is_err() {
            holder = crate::clock::unix_now().to_be_bytes();
        }
        let holder = crate::auth::encode_hex(&holder);
        let webhooks = Webhooks {
            shared: Arc::new(Shared {
                store,
                settings,
                holder,
                stopping: watch::Sender::new(false),
            }),
            tasks: Mutex::new(HashMap::new()),
        };
        webhooks.reload(endpoints).await;
        webhooks
    }

    /// Takes the endpoints file as it is now: new endpoints start, removed ones stop at once
    /// (a delivery in flight is dropped: nobody waits for it any more), changed ones go on
    /// with their new settings from their next delivery. A new endpoint's place in the feed
    /// is kept in the store before this returns (before the server serves, at a start), so
    /// no event committed after the file was read can fall before it.
    pub async fn reload(&self, endpoints: Vec<Endpoint>) {
        let new: Vec<&Endpoint> = {
            let tasks = self.tasks.lock().unwrap_or_else(PoisonError::into_inner);
            endpoints
                .iter()
                .filter(|e| !tasks.contains_key(&e.id))
                .collect()
        };
        for endpoint in new {
            self.place(endpoint).await;
        }
        let mut tasks = self.tasks.lock().unwrap_or_else(PoisonError::into_inner);
        let kept: Vec<String> = endpoints.iter().map(|e| e.id.clone()).collect();
        tasks.retain(|id, task| {
            let keep = kept.contains(id);
            if !keep {
                task.handle.abort();
                metrics::webhook_endpoint_removed(&task.name);
                tracing::info!(endpoint = %id, "webhook endpoint removed");
            }
            keep
        });
        for endpoint in endpoints {
            match tasks.get(&endpoint.id) {
                Some(task) => {
                    task.endpoint.send_replace(endpoint);
                }
                None => {
                    let id = endpoint.id.clone();
                    let name = metrics_name(&endpoint);
                    let (sender, receiver) = watch::channel(endpoint);
                    let worker = Worker::new(self.shared.clone(), receiver);
                    let handle = tokio::spawn(worker.run());
                    tasks.insert(
                        id,
                        Task {
                            endpoint: sender,
                            handle,
                            name,
                        },
                    );
                }
            }
        }
    }

    /// Keeps a new endpoint's starting place in the store (the store keeps an endpoint's place
    /// it already has). On a failure the endpoint's task places it when it first holds it.
    async fn place(&self, endpoint: &Endpoint) {
        let store = &self.shared.store;
        let placed = match fresh_state(store, endpoint).await {
            Ok(fresh) => store
                .lease_webhook(&endpoint.id, &self.shared.holder, &fresh)
                .await
                .map(|_| ()),
            Err(e) => Err(e),
        };
        if let Err(e) = placed {
            tracing::warn!(endpoint = %endpoint.id, error = %e, "placing a new webhook endpoint in the feed failed; its delivery places it when it starts");
        }
    }

    /// Stops every task (a delivery in flight is abandoned: resent after the start, as a
    /// crash would) and gives up this process's leases, so another instance goes on at once.
    pub async fn stop(&self) {
        self.shared.stopping.send_replace(true);
        let tasks: Vec<Task> = self
            .tasks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain()
            .map(|(_, task)| task)
            .collect();
        for task in tasks {
            task.handle.abort();
            let _ = task.handle.await;
        }
        if let Err(e) = self
            .shared
            .store
            .release_webhooks(&self.shared.holder)
            .await
        {
            tracing::warn!(error = %e, "giving up the webhook leases failed; another instance takes over when they expire");
        }
    }
}

fn metrics_name(endpoint: &Endpoint) -> String {
    endpoint
        .label
        .clone()
        .unwrap_or_else(|| endpoint.id.clone())
}

/// What a task does next.
enum Next {
    /// Go on at once.
    Again,
    /// Wait until then, or until the feed, the endpoint or the stop says otherwise.
    Wait(Duration),
}

/// One endpoint's delivery.
struct Worker {
    shared: Arc<Shared>,
    endpoint: watch::Receiver<Endpoint>,
    appended: watch::Receiver<u64>,
    stopping: watch::Receiver<bool>,
    /// The state while this process holds the endpoint; `None` before, and after the lease
    /// went to another instance.
    state: Option<WebhookState>,
    /// The state changed since it was last saved: nothing is sent before it is.
    unsaved: bool,
    renew_at: Instant,
    connection: Option<Connection>,
}

/// An open HTTP/1.1 connection to a receiver, kept between deliveries.
struct Connection {
    authority: String,
    sender: SendRequest<Full<Bytes>>,
}

/// What a receiver made of one delivery.
enum Answer {
    Delivered,
    Gone,
    Failed {
        error: String,
        retry_after: Option<Duration>,
    },
}

impl Worker {
    fn new(shared: Arc<Shared>, endpoint: watch::Receiver<Endpoint>) -> Worker {
        Worker {
            appended: shared.store.appended(),
            stopping: shared.stopping.subscribe(),
            shared,
            endpoint,
            state: None,
            unsaved: false,
            renew_at: Instant::now(),
            connection: None,
        }
    }

    fn id(&self) -> String {
        self.endpoint.borrow().id.clone()
    }

    async fn run(mut self) {
        while !*self.stopping.borrow() {
            match self.step().await {
                Next::Again => {}
                // A lease must be renewed while the task waits (a retry minutes away), or
                // another instance takes the endpoint over.
                Next::Wait(wait) if self.shared.store.shared_by_instances() => {
                    self.wait(wait.min(RENEW_EVERY)).await;
                }
                Next::Wait(wait) => self.wait(wait).await,
            }
        }
    }

    /// Sleeps `wait`, or less when an event is appended, the endpoint changes or the server
    /// stops.
    async fn wait(&mut self, wait: Duration) {
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = self.appended.changed() => {}
            changed = self.endpoint.changed() => {
                // The file's entry was removed: the task is being stopped.
                if changed.is_err() {
                    tokio::time::sleep(wait).await;
                }
            }
            _ = self.stopping.changed() => {}
        }
    }

    async fn step(&mut self) -> Next {
        let store = self.shared.store.clone();
        let id = self.id();
        if (self.state.is_none() || Instant::now() >= self.renew_at)
            && let Some(wait) = self.hold(&store, &id).await
        {
            return Next::Wait(wait);
        }
        if self.unsaved {
            return match self.save(&store, &id).await {
                Ok(true) => Next::Again,
                Ok(false) => Next::Again,
                Err(wait) => Next::Wait(wait),
            };
        }
        let endpoint = self.endpoint.borrow().clone();
        let Some(state) = self.state.as_mut() else {
            return Next::Wait(RENEW_EVERY);
        };
        let name = metrics_name(&endpoint);
        if endpoint.resume > state.resume {
            state.resume = endpoint.resume;
            if let Some(reason) = state.disabled.take() {
                tracing::info!(endpoint = %id, was = %reason, position = state.position, "webhook endpoint enabled; it goes on from where it stopped");
                *state = WebhookState {
                    attempts: 0,
                    failing_since_ms: 0,
                    next_try_ms: 0,
                    last_error: None,
                    disabled: None,
                    ..state.clone()
                };
            }
            self.unsaved = true;
            return Next::Again;
        }
        if state.disabled.is_some() {
            metrics::webhook_endpoint(&name, 0, true);
            // Until the file says `enable` (a reload) or the server stops.
            return Next::Wait(Duration::from_secs(3600));
        }
        let now_ms = crate::store::events::now_ms();
        if state.next_try_ms > now_ms {
            return Next::Wait(Duration::from_millis(state.next_try_ms - now_ms));
        }
        let query = EventQuery {
            after: Some(Position {
                feed: state.feed,
                seq: state.position,
            }),
            types: endpoint.types,
            limit: PAGE,
            scan: SCAN,
        };
        let page = match store.events(query).await {
            Ok(page) => page,
            Err(ReadError::Gone) => return self.stop_at_gone(&store, &id).await,
            Err(ReadError::Store(e)) => {
                tracing::warn!(endpoint = %id, error = %e, "reading the event feed for a webhook failed; trying again");
                return Next::Wait(STORE_RETRY);
            }
        };
        let feed = page.state.feed;
        let Some(first) = page.events.first() else {
            metrics::webhook_endpoint(&name, 0, false);
            if page.reached > state.position {
                // Events of other types only: the position moves past them.
                state.position = page.reached;
                self.unsaved = true;
                return Next::Again;
            }
            return Next::Wait(self.poll());
        };
        let behind_ms = now_ms.saturating_sub(first.at_ms);
        metrics::webhook_endpoint(&name, behind_ms / 1000, false);
        for event in &page.events {
            let answer = self.send(&endpoint, feed, event).await;
            let Some(state) = self.state.as_mut() else {
                return Next::Again;
            };
            match answer {
                Answer::Delivered => {
                    metrics::webhook_delivery(WebhookOutcome::Delivered);
                    state.position = event.seq;
                    state.attempts = 0;
                    state.failing_since_ms = 0;
                    state.next_try_ms = 0;
                    state.last_error = None;
                    self.unsaved = true;
                    // Saved before the next event goes: a crash resends only the one in flight.
                    match self.save(&store, &id).await {
                        Ok(true) => {}
                        Ok(false) => return Next::Again,
                        Err(wait) => return Next::Wait(wait),
                    }
                }
                Answer::Gone => {
                    metrics::webhook_delivery(WebhookOutcome::Gone);
                    let reason = "the receiver answered 410 Gone".to_owned();
                    tracing::warn!(endpoint = %id, event = %Position { feed, seq: event.seq }.cursor(), "webhook endpoint disabled: {reason}");
                    state.disabled = Some(reason);
                    state.last_error = Some("HTTP 410".into());
                    self.unsaved = true;
                    return Next::Again;
                }
                Answer::Failed { error, retry_after } => {
                    metrics::webhook_delivery(WebhookOutcome::Failed);
                    self.failed(&id, feed, event, error, retry_after);
                    return Next::Again;
                }
            }
        }
        if let Some(state) = self.state.as_mut()
            && page.reached > state.position
        {
            state.position = page.reached;
            self.unsaved = true;
        }
        Next::Again
    }

    /// How long an idle task waits for news of the feed.
    fn poll(&self) -> Duration {
        if self.shared.store.shared_by_instances() {
            POLL_SHARED
        } else {
            POLL_OWN
        }
    }

    /// Takes or renews the lease; `Some(wait)` when this process does not hold the endpoint.
    async fn hold(&mut self, store: &Store, id: &str) -> Option<Duration> {
        let endpoint = self.endpoint.borrow().clone();
        // A renewal finds the row there: only a first hold may make it, from the feed.
        let fresh = match &self.state {
            Some(state) => Ok(state.clone()),
            None => fresh_state(store, &endpoint).await,
        };
        let fresh = match fresh {
            Ok(fresh) => fresh,
            Err(e) => {
                tracing::warn!(endpoint = %id, error = %e, "reading the event feed for a webhook failed; trying again");
                return Some(STORE_RETRY);
            }
        };
        match store.lease_webhook(id, &self.shared.holder, &fresh).await {
            Ok(Some(kept)) => {
                if self.state.is_none() {
                    tracing::info!(endpoint = %id, position = kept.position, "delivering to webhook endpoint");
                    self.state = Some(kept);
                }
                self.renew_at = if store.shared_by_instances() {
                    Instant::now() + RENEW_EVERY
                } else {
                    // One process has the file: the lease is never contested.
                    Instant::now() + Duration::from_secs(365 * 24 * 3600)
                };
                None
            }
            Ok(None) => {
                if self.state.take().is_some() {
                    tracing::info!(endpoint = %id, "another instance delivers to this webhook endpoint now");
                    self.unsaved = false;
                }
                Some(RENEW_EVERY)
            }
            Err(e) => {
                tracing::warn!(endpoint = %id, error = %e, "taking the webhook endpoint's lease failed; trying again");
                Some(STORE_RETRY)
            }
        }
    }

    /// Saves the state; `Ok(false)` when the lease went to another instance (the task lets
    /// go of the endpoint), `Err(wait)` when the store failed (tried again after `wait`).
    async fn save(&mut self, store: &Store, id: &str) -> Result<bool, Duration> {
        let Some(state) = self.state.as_ref() else {
            self.unsaved = false;
            return Ok(false);
        };
        match store.save_webhook(id, &self.shared.holder, state).await {
            Ok(true) => {
                self.unsaved = false;
                if store.shared_by_instances() {
                    self.renew_at = Instant::now() + RENEW_EVERY;
                }
                Ok(true)
            }
            Ok(false) => {
                tracing::info!(endpoint = %id, "another instance took this webhook endpoint over");
                self.state = None;
                self.unsaved = false;
                Ok(false)
            }
            Err(e) => {
                tracing::warn!(endpoint = %id, error = %e, "saving the webhook endpoint's position failed; nothing more is sent until it is saved");
                Err(STORE_RETRY)
            }
        }
    }

    /// The feed no longer continues from the position: the endpoint stops, saying why.
    async fn stop_at_gone(&mut self, store: &Store, id: &str) -> Next {
        let Ok(now) = store.feed_state().await else {
            return Next::Wait(STORE_RETRY);
        };
        let Some(state) = self.state.as_mut() else {
            return Next::Again;
        };
        let reason = if state.feed != now.feed {
            // Enabled, it goes on in the new feed from the same number: a restored backup
            // numbers its events as the live file did.
            state.feed = now.feed;
            state.position = state.position.min(now.newest);
            "the store's event feed was replaced (a restored backup or a copy): events may be \
             missing or repeated"
                .to_owned()
        } else if state.position < now.trimmed {
            let lost = (state.position + 1, now.trimmed);
            state.position = now.trimmed;
            format!(
                "it fell behind the feed's retention (--events-keep): events {} to {} were \
                 purged before it got them",
                lost.0, lost.1
            )
        } else {
            state.position = now.newest;
            "its position is past the newest event (the store went back to an older state)"
                .to_owned()
        };
        tracing::error!(endpoint = %id, "webhook endpoint disabled: {reason}; `petstore webhooks enable` resumes it");
        state.disabled = Some(reason);
        self.unsaved = true;
        Next::Again
    }

    /// Records a failed try of `event`: the next is due on the schedule, or the endpoint stops
    /// after the last.
    fn failed(
        &mut self,
        id: &str,
        feed: u64,
        event: &StoredEvent,
        error: String,
        retry_after: Option<Duration>,
    ) {
        let schedule = &self.shared.settings.schedule;
        let Some(state) = self.state.as_mut() else {
            return;
        };
        let now_ms = crate::store::events::now_ms();
        state.attempts += 1;
        if state.failing_since_ms == 0 {
            state.failing_since_ms = now_ms;
        }
        state.last_error = Some(error.clone());
        self.unsaved = true;
        let cursor = Position {
            feed,
            seq: event.seq,
        }
        .cursor();
        let tries = state.attempts as usize;
        let Some(step) = schedule.get(tries - 1) else {
            let reason = format!("no 2xx after {tries} tries; the last: {error}");
            tracing::error!(endpoint = %id, event = %cursor, "webhook endpoint disabled: {reason}; `petstore webhooks enable` resumes it");
            state.disabled = Some(reason);
            return;
        };
        let wait = match retry_after {
            Some(asked) => asked.min(MOST_RETRY_AFTER),
            None => jittered(*step),
        };
        state.next_try_ms = now_ms + u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
        tracing::warn!(
            endpoint = %id,
            event = %cursor,
            error = %error,
            attempt = tries,
            next_try_in = %humantime::format_duration(Duration::from_millis(wait.as_millis() as u64)),
            "webhook delivery failed; the later events wait"
        );
    }

    /// POSTs `event` to the endpoint: what the receiver made of it.
    async fn send(&mut self, endpoint: &Endpoint, feed: u64, event: &StoredEvent) -> Answer {
        let mut body = BytesMut::new();
        event.json_into(feed, &mut body);
        let body = body.freeze();
        let id = Position {
            feed,
            seq: event.seq,
        }
        .cursor();
        let timestamp = crate::clock::unix_now();
        let signed = signature(&endpoint.secrets, &id, timestamp, &body);
        let attempt = async {
            let connection = self.connect(&endpoint.url).await?;
            let path = endpoint
                .url
                .path_and_query()
                .map_or("/", |p| p.as_str())
                .to_owned();
            let request = Request::builder()
                .method(Method::POST)
                .uri(path)
                .header(HOST, connection.authority.as_str())
                .header(CONTENT_TYPE, "application/json")
                .header(CONTENT_LENGTH, body.len())
                .header(USER_AGENT, concat!("petstore/", env!("CARGO_PKG_VERSION")))
                .header("webhook-id", id.as_str())
                .header("webhook-timestamp", timestamp)
                .header("webhook-signature", signed.as_str())
                .body(Full::new(body.clone()))
                .map_err(|e| format!("making the request: {e}"))?;
            connection
                .sender
                .ready()
                .await
                .map_err(|e| format!("the connection closed: {e}"))?;
            let response = connection
                .sender
                .send_request(request)
                .await
                .map_err(|e| format!("sending: {e}"))?;
            let status = response.status();
            let retry_after = response
                .headers()
                .get(RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(parse_retry_after);
            let keep = !response
                .headers()
                .get(hyper::header::CONNECTION)
                .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"close"));
            let drained = drain(response.into_body()).await;
            Ok::<_, String>((status, retry_after, keep && drained))
        };
        let outcome = tokio::time::timeout(DELIVERY_TIMEOUT, attempt).await;
        let (status, retry_after, keep) = match outcome {
            Ok(Ok(answered)) => answered,
            Ok(Err(error)) => {
                self.connection = None;
                return Answer::Failed {
                    error,
                    retry_after: None,
                };
            }
            Err(_) => {
                self.connection = None;
                return Answer::Failed {
                    error: format!("no answer within {}s", DELIVERY_TIMEOUT.as_secs()),
                    retry_after: None,
                };
            }
        };
        if !keep {
            self.connection = None;
        }
        if status.is_success() {
            Answer::Delivered
        } else if status == StatusCode::GONE {
            Answer::Gone
        } else if status.is_redirection() {
            Answer::Failed {
                error: format!("HTTP {} (a redirect, not followed)", status.as_u16()),
                retry_after,
            }
        } else {
            Answer::Failed {
                error: format!("HTTP {}", status.as_u16()),
                retry_after,
            }
        }
    }

    /// The open connection to `url`'s receiver, or a new one: its name resolved and checked
    /// now (`target`), TLS verified against the roots.
    async fn connect(&mut self, url: &Uri) -> Result<&mut Connection, String> {
        let host = url.host().ok_or("the URL has no host")?.to_owned();
        let port = url.port_u16().unwrap_or(443);
        let authority = url
            .authority()
            .map_or_else(|| host.clone(), |a| a.as_str().to_owned());
        let reuse = self
            .connection
            .as_ref()
            .is_some_and(|c| c.authority == authority && !c.sender.is_closed());
        if !reuse {
            self.connection = None;
            let addresses = resolve(&host, port, self.shared.settings.allow_private).await?;
            let mut last = String::from("no address");
            let mut stream = None;
            for address in addresses {
                match TcpStream::connect(address).await {
                    Ok(tcp) => {
                        stream = Some(tcp);
                        break;
                    }
                    Err(e) => last = format!("connecting to {address}: {e}"),
                }
            }
            let tcp = stream.ok_or(last)?;
            let _ = tcp.set_nodelay(true);
            let bare = host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned();
            let name = ServerName::try_from(bare).map_err(|e| format!("the host name: {e}"))?;
            let tls = tokio_rustls::TlsConnector::from(self.shared.settings.tls.clone())
                .connect(name, tcp)
                .await
                .map_err(|e| format!("TLS: {e}"))?;
            let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
                .await
                .map_err(|e| format!("HTTP: {e}"))?;
            tokio::spawn(async move {
                let _ = connection.await;
            });
            self.connection = Some(Connection { authority, sender });
        }
        self.connection
            .as_mut()
            .ok_or_else(|| "no connection".to_owned())
    }
}

/// The state a new endpoint starts with: at the newest event, or the oldest kept with
/// `start=oldest`.
async fn fresh_state(
    store: &Store,
    endpoint: &Endpoint,
) -> Result<WebhookState, crate::store::StoreError> {
    let feed = store.feed_state().await?;
    Ok(WebhookState {
        feed: feed.feed,
        position: if endpoint.from_start {
            feed.trimmed
        } else {
            feed.newest
        },
        resume: endpoint.resume,
        ..WebhookState::default()
    })
}

/// Reads a receiver's answer to its end, up to `MOST_ANSWER_BYTES`; whether the connection
/// can take the next request.
async fn drain(mut body: hyper::body::Incoming) -> bool {
    let mut read = 0;
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(frame) => {
                if let Some(data) = frame.data_ref() {
                    read += data.len();
                    if read > MOST_ANSWER_BYTES {
                        return false;
                    }
                }
            }
            Err(_) => return false,
        }
    }
    true
}

/// `Retry-After` as seconds or an HTTP-date, as a wait from now.
fn parse_retry_after(value: &str) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(
        at.duration_since(std::time::SystemTime::now())
            .unwrap_or_default(),
    )
}

/// `step` give or take a tenth, so endpoints that failed together do not retry together.
fn jittered(step: Duration) -> Duration {
    let mut random = [0u8; 4];
    if getrandom::fill(&mut random).is_err() {
        return step;
    }
    // -10% to +10%, in thousandths.
    let permille = 900 + u64::from(u32::from_be_bytes(random) % 201);
    let millis = u64::try_from(step.as_millis()).unwrap_or(u64::MAX);
    Duration::from_millis(millis / 1000 * permille + millis % 1000 * permille / 1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        assert_eq!(parse_retry_after("120"), Some(Duration::from_secs(120)));
        assert_eq!(parse_retry_after(" 0 "), Some(Duration::ZERO));
        let later = std::time::SystemTime::now() + Duration::from_secs(3600);
        let asked = parse_retry_after(&httpdate::fmt_http_date(later)).expect("a date");
        assert!(asked > Duration::from_secs(3590) && asked <= Duration::from_secs(3600));
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon"), None);
    }

    /// An endpoint whose next events were purged while its receiver was down stops with the
    /// reason in its state, rather than skip them (issue 30, item 4).
    #[tokio::test(flavor = "multi_thread")]
    async fn an_endpoint_the_feed_was_purged_past_is_disabled_saying_why() {
        use crate::store::{Location, Tuning};
        let dir = tempfile::tempdir().expect("temp dir");
        let location = Location::Redb {
            path: dir.path().join("pets.redb"),
            cache_bytes: 1 << 20,
            shared: false,
        };
        let tuning = Tuning {
            idempotency_ttl: Duration::from_secs(60),
            max_write_batch: 16,
            events_keep: Duration::from_secs(3600),
            order_hold: None,
        };
        let (store, _) = Store::open(location, tuning).await.expect("open");
        let new = || crate::pet::NewPet {
            name: "Rex".into(),
            category_id: 1,
            status: None,
        };
        store.create(new(), None).await.expect("create");
        let ca = concat!(env!("CARGO_MANIFEST_DIR"), "/certs/dev-ca.pem");
        let settings = Settings {
            // Tried again and again, never run out: only the purge can stop it.
            schedule: vec![Duration::from_millis(50); 20],
            allow_private: true,
            tls: client_tls(Some(std::path::Path::new(ca))).expect("TLS"),
        };
        let endpoint = Endpoint {
            id: "ep_0000beef".into(),
            // Nothing listens there: every try is refused.
            url: "https://127.0.0.1:9/hook".parse().expect("a URL"),
            secrets: vec![super::super::endpoints::Secret::generate().expect("a secret")],
            types: crate::event::Types::ALL,
            label: None,
            from_start: true,
            resume: 0,
        };
        let webhooks = Webhooks::start(store.clone(), settings, vec![endpoint]).await;
        let state = || async {
            store
                .webhook_states()
                .await
                .expect("states")
                .into_iter()
                .next()
                .expect("the endpoint's state")
                .1
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while state().await.attempts == 0 {
            assert!(Instant::now() < deadline, "no failed try");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        store
            .trim_events(crate::store::events::now_ms() + 1)
            .await
            .expect("trim");
        let disabled = loop {
            if let Some(reason) = state().await.disabled {
                break reason;
            }
            assert!(
                Instant::now() < deadline,
                "not disabled: {:?}",
                state().await
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert!(disabled.contains("retention"), "{disabled}");
        assert!(disabled.contains("events 1 to 1"), "{disabled}");
        webhooks.stop().await;
        store.close().await;
    }

    #[test]
    fn jitter_stays_within_a_tenth() {
        for step in [Duration::from_secs(5), Duration::from_secs(36_000)] {
            for _ in 0..100 {
                let wait = jittered(step);
                assert!(
                    wait >= step.mul_f64(0.9) && wait <= step.mul_f64(1.1),
                    "{wait:?}"
                );
            }
        }
    }
}
