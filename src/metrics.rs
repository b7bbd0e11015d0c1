//! Metrics: the counters every part bumps (requests, connections, TLS handshakes, store
//! commits, snapshots), kept as fixed arrays of atomics so the request path never takes a lock
//! or hashes a label, and the `--metrics-listen` listener that renders them for Prometheus at
//! `GET /metrics` over plain HTTP/1.1 with prometheus-client's encoders. It uses nothing of
//! ours but the operation table (`operations`: its paths are the route labels): what it cannot count itself (pets by status, the certificate's not-after) it asks the
//! `Sources` that `main` hands it at scrape time. Invariant: every label set is drawn from a
//! fixed list, so the number of series is bounded whatever clients send.
use std::convert::Infallible;
use std::error::Error;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{ACCEPT, ALLOW, CONTENT_TYPE, HeaderValue};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::operations::{PATHS, Path};

/// Scrapes served at once; Prometheus needs one, a person with curl a second.
const MAX_SCRAPE_CONNECTIONS: usize = 4;
/// A scraper must send its request head within this, and a connection ends after this long
/// however busy it is: a slow or stuck client holds one of the few places only briefly.
const SCRAPE_HEADER_TIMEOUT: Duration = Duration::from_secs(5);
const SCRAPE_CONNECTION_TIMEOUT: Duration = Duration::from_secs(60);

const OPENMETRICS_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The route templates requests are counted by (OpenTelemetry's `http.route`), never the raw
/// path: one series per path of the API whatever ids clients send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// A path of the API, labelled by its template (`operations::PATHS`).
    Api(Path),
    /// Any path no route matched (and `/v1` paths refused before routing, without a key).
    Unmatched,
    /// The console's page and files, under `--console-path`.
    Console,
    /// The console's sign-in, session and sign-out.
    ConsoleSession,
}

impl Route {
    /// Its place in `ROUTES`.
    const fn index(self) -> usize {
        match self {
            Route::Api(path) => path.index(),
            Route::Unmatched => PATHS.len(),
            Route::Console => PATHS.len() + 1,
            Route::ConsoleSession => PATHS.len() + 2,
        }
    }
}

/// The label of each `Route`, by its index: the API's templates, then the routes of no operation.
const ROUTES: [&str; PATHS.len() + 3] = {
    let others = ["unmatched", "console", "console/session"];
    let mut labels = [""; PATHS.len() + 3];
    let mut i = 0;
    while i < labels.len() {
        labels[i] = if i < PATHS.len() {
            PATHS[i]
        } else {
            others[i - PATHS.len()]
        };
        i += 1;
    }
    labels
};

/// Methods as OpenTelemetry's `http.request.method`: the known ones, and `_OTHER`.
const METHODS: [&str; 6] = ["GET", "HEAD", "POST", "PATCH", "DELETE", "_OTHER"];

/// Every status the server answers with; anything else would be counted as `other`.
const STATUSES: [u16; 20] = [
    200, 201, 204, 304, 400, 401, 403, 404, 405, 408, 409, 410, 412, 413, 415, 422, 429, 431, 500,
    503,
];
const STATUS_LABELS: [&str; 21] = [
    "200", "201", "204", "304", "400", "401", "403", "404", "405", "408", "409", "410", "412",
    "413", "415", "422", "429", "431", "500", "503", "other",
];

const SERIES: usize = ROUTES.len() * METHODS.len() * STATUS_LABELS.len();

/// Request durations, in nanoseconds: OpenTelemetry's advice for
/// `http.server.request.duration` (5 ms to 10 s), below it the sub-millisecond range where
/// this server's reads actually answer.
const REQUEST_BOUNDS_NS: [u64; 19] = [
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    75_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    750_000_000,
    1_000_000_000,
    2_500_000_000,
    5_000_000_000,
    7_500_000_000,
    10_000_000_000,
];
/// Store commits, in nanoseconds: an fsync takes from tens of microseconds (a fast SSD's
/// cache) to tens of milliseconds (a disk, a network volume).
const COMMIT_BOUNDS_NS: [u64; 13] = [
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    1_000_000_000,
    5_000_000_000,
];
/// Writes per commit: 1 when the store is quiet, up to `--max-write-batch` under load.
const BATCH_BOUNDS: [u64; 11] = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024];

/// Largest bucket list a `Histogram` holds, +Inf included.
const MAX_BUCKETS: usize = 20;

/// A histogram of integer observations (nanoseconds, counts) in fixed buckets: one atomic add
/// for the bucket and one for the sum, no lock. Its count is the sum of its buckets, so a
/// scrape never sees a count that disagrees with them.
pub struct Histogram {
    bounds: &'static [u64],
    /// Per bucket (not cumulative); the last one is +Inf.
    buckets: [AtomicU64; MAX_BUCKETS],
    sum: AtomicU64,
}

impl Histogram {
    const fn new(bounds: &'static [u64]) -> Histogram {
        assert!(bounds.len() < MAX_BUCKETS);
        Histogram {
            bounds,
            buckets: [const { AtomicU64::new(0) }; MAX_BUCKETS],
            sum: AtomicU64::new(0),
        }
    }

    fn observe(&self, value: u64) {
        // Prometheus buckets are "less than or equal".
        let bucket = self.bounds.partition_point(|bound| *bound < value);
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        self.sum.fetch_add(value, Ordering::Relaxed);
    }

    fn count(&self) -> u64 {
        self.buckets[..=self.bounds.len()]
            .iter()
            .map(|bucket| bucket.load(Ordering::Relaxed))
            .sum()
    }

    /// The buckets as the encoders take them (each its own count: they add them up), `scale`
    /// units to one.
    fn encode(
        &self,
        encoder: &mut prometheus_client::encoding::MetricEncoder<'_>,
        scale: f64,
    ) -> Result<(), std::fmt::Error> {
        let buckets: Vec<(f64, u64)> = self
            .bounds
            .iter()
            .map(|bound| *bound as f64 / scale)
            .chain([f64::INFINITY])
            .zip(&self.buckets)
            .map(|(bound, count)| (bound, count.load(Ordering::Relaxed)))
            .collect();
        let count = buckets.iter().map(|(_, count)| count).sum();
        let sum = self.sum.load(Ordering::Relaxed) as f64 / scale;
        encoder.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }
}

/// Why a TLS handshake failed, as `petstore_tls_handshake_failures_total` counts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HandshakeFailure {
    /// Not done within `--handshake-timeout`.
    Timeout,
    /// The client closed the connection before the handshake was done.
    Eof,
    /// The client sent a TLS alert: it refused our certificate, most often.
    Alert,
    /// No protocol version, cipher suite or ALPN protocol in common.
    Incompatible,
    /// Not TLS at all (plain HTTP on the HTTPS port), or TLS that breaks the rules.
    Protocol,
    /// The socket failed (reset by the peer).
    Io,
}

const HANDSHAKE_REASONS: [&str; 6] = ["timeout", "eof", "alert", "incompatible", "protocol", "io"];

static REQUESTS: [Histogram; SERIES] = [const { Histogram::new(&REQUEST_BOUNDS_NS) }; SERIES];
static CONNECTIONS_OPEN: AtomicI64 = AtomicI64::new(0);
static CONNECTIONS_ACCEPTED: AtomicU64 = AtomicU64::new(0);
static CONNECTIONS_EVICTED: AtomicU64 = AtomicU64::new(0);
static CONNECTIONS_WAITED: AtomicU64 = AtomicU64::new(0);
static ACCEPT_ERRORS: AtomicU64 = AtomicU64::new(0);
static HANDSHAKE_FAILURES: [AtomicU64; HANDSHAKE_REASONS.len()] =
    [const { AtomicU64::new(0) }; HANDSHAKE_REASONS.len()];
static COMMIT_DURATION: Histogram = Histogram::new(&COMMIT_BOUNDS_NS);
static COMMIT_WRITES: Histogram = Histogram::new(&BATCH_BOUNDS);
static COMMIT_FAILURES: AtomicU64 = AtomicU64::new(0);
static SNAPSHOTS_TAKEN: AtomicU64 = AtomicU64::new(0);
static SNAPSHOTS_FAILED: AtomicU64 = AtomicU64::new(0);
static SNAPSHOT_LAST_GOOD: AtomicU64 = AtomicU64::new(0);
/// Unix seconds of the process start, set when the listener starts.
static ACME_ISSUED: AtomicU64 = AtomicU64::new(0);
static ACME_FAILED: AtomicU64 = AtomicU64::new(0);
static ACME_FAILING: AtomicI64 = AtomicI64::new(0);
static STARTED: AtomicU64 = AtomicU64::new(0);
static EVENTS_APPENDED: AtomicU64 = AtomicU64::new(0);
static EVENT_SUBSCRIBERS: AtomicI64 = AtomicI64::new(0);
static STREAMS_CLOSED: [AtomicU64; STREAM_CLOSE_REASONS.len()] =
    [const { AtomicU64::new(0) }; STREAM_CLOSE_REASONS.len()];
/// When the oldest event kept was appended, in Unix milliseconds; 0 while the feed is empty.
static EVENTS_OLDEST_MS: AtomicU64 = AtomicU64::new(0);

/// Why an event stream ended, as the metric labels it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamClosed {
    /// The client went away.
    Client,
    /// Its send buffer stayed full too long: a reader that stopped reading.
    Slow,
    /// The server is stopping.
    Shutdown,
    /// It fell behind the feed's retention while catching up.
    Expired,
    /// The store failed while the stream read it.
    Error,
    /// Its key was revoked or expired (a reload) since it opened.
    Revoked,
}

const STREAM_CLOSE_REASONS: [&str; 6] =
    ["client", "slow", "shutdown", "expired", "error", "revoked"];

/// Counts one answered request, `status` being the one sent.
pub fn request(route: Route, method: &Method, status: u16, duration: Duration) {
    let method = match *method {
        Method::GET => 0,
        Method::HEAD => 1,
        Method::POST => 2,
        Method::PATCH => 3,
        Method::DELETE => 4,
        _ => 5,
    };
    let status = STATUSES
        .iter()
        .position(|known| *known == status)
        .unwrap_or(STATUSES.len());
    let series = (route.index() * METHODS.len() + method) * STATUS_LABELS.len() + status;
    REQUESTS[series].observe(u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX));
}

/// Counts a connection open (accepted, holding a place) until the guard is dropped.
pub struct OpenConnection(());

impl OpenConnection {
    pub fn enter() -> OpenConnection {
        CONNECTIONS_ACCEPTED.fetch_add(1, Ordering::Relaxed);
        CONNECTIONS_OPEN.fetch_add(1, Ordering::Relaxed);
        OpenConnection(())
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        CONNECTIONS_OPEN.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A connection closed to make room for a new one under `--max-connections`.
pub fn connection_evicted() {
    CONNECTIONS_EVICTED.fetch_add(1, Ordering::Relaxed);
}

/// A connection that found every place taken and had to wait for one.
pub fn connection_waited() {
    CONNECTIONS_WAITED.fetch_add(1, Ordering::Relaxed);
}

pub fn accept_failed() {
    ACCEPT_ERRORS.fetch_add(1, Ordering::Relaxed);
}

pub fn handshake_failed(reason: HandshakeFailure) {
    HANDSHAKE_FAILURES[reason as usize].fetch_add(1, Ordering::Relaxed);
}

/// A store transaction of `writes` writes committed (made durable) in `duration`.
pub fn store_committed(duration: Duration, writes: usize) {
    COMMIT_DURATION.observe(u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX));
    COMMIT_WRITES.observe(writes as u64);
}

/// A committed transaction appended `count` events to the feed.
pub fn events_appended(count: usize) {
    EVENTS_APPENDED.fetch_add(count as u64, Ordering::Relaxed);
}

/// Orders placed, completed, cancelled and expired, counted from a committed batch's changes.
pub fn orders_moved(kinds: impl IntoIterator<Item = crate::event::EventType>) {
    use crate::event::EventType;
    for kind in kinds {
        let counter = match kind {
            EventType::OrderPlaced => &ORDERS[0],
            EventType::OrderCompleted => &ORDERS[1],
            EventType::OrderCancelled => &ORDERS[2],
            EventType::OrderExpired => &ORDERS[3],
            _ => continue,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// Orders by what became of them, in the order of `ORDER_STATUSES`; the scrape's
/// The `outcome` label of each count in `WEBHOOK_DELIVERIES`.
const WEBHOOK_OUTCOMES: [&str; 3] = ["delivered", "failed", "gone"];
static WEBHOOK_DELIVERIES: [AtomicU64; 3] = [const { AtomicU64::new(0) }; 3];
/// Each webhook endpoint's seconds behind the newest event and whether it is disabled, by its
/// label (its id when it has none).
static WEBHOOK_ENDPOINTS: std::sync::Mutex<std::collections::BTreeMap<String, (u64, bool)>> =
    std::sync::Mutex::new(std::collections::BTreeMap::new());

/// What became of one delivery attempt.
#[derive(Clone, Copy, Debug)]
pub enum WebhookOutcome {
    Delivered,
    Failed,
    /// The receiver answered 410 Gone: the endpoint is disabled.
    Gone,
}

pub fn webhook_delivery(outcome: WebhookOutcome) {
    WEBHOOK_DELIVERIES[outcome as usize].fetch_add(1, Ordering::Relaxed);
}

/// Endpoint `name`'s state now: seconds behind the newest event, and whether it is disabled.
pub fn webhook_endpoint(name: &str, behind_secs: u64, disabled: bool) {
    let mut endpoints = WEBHOOK_ENDPOINTS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    // Called on every page an endpoint reads: its name is copied only the first time.
    match endpoints.get_mut(name) {
        Some(kept) => *kept = (behind_secs, disabled),
        None => drop(endpoints.insert(name.to_owned(), (behind_secs, disabled))),
    }
}

/// Endpoint `name` was removed from the endpoints file: its series go.
pub fn webhook_endpoint_removed(name: &str) {
    WEBHOOK_ENDPOINTS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .remove(name);
}

/// `petstore_orders_total{status}`.
static ORDERS: [AtomicU64; 4] = [const { AtomicU64::new(0) }; 4];
/// The `status` label of each count in `ORDERS`.
const ORDER_STATUSES: [&str; 4] = ["placed", "completed", "cancelled", "expired"];

/// An open event stream, counted while it lives.
pub struct Subscriber(());

impl Subscriber {
    pub fn enter() -> Subscriber {
        EVENT_SUBSCRIBERS.fetch_add(1, Ordering::Relaxed);
        Subscriber(())
    }
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        EVENT_SUBSCRIBERS.fetch_sub(1, Ordering::Relaxed);
    }
}

pub fn stream_closed(reason: StreamClosed) {
    let index = match reason {
        StreamClosed::Client => 0,
        StreamClosed::Slow => 1,
        StreamClosed::Shutdown => 2,
        StreamClosed::Expired => 3,
        StreamClosed::Error => 4,
        StreamClosed::Revoked => 5,
    };
    STREAMS_CLOSED[index].fetch_add(1, Ordering::Relaxed);
}

/// When the oldest event the feed keeps was appended (Unix milliseconds), `None` when it keeps
/// none.
pub fn events_oldest(at_ms: Option<u64>) {
    EVENTS_OLDEST_MS.store(at_ms.unwrap_or(0), Ordering::Relaxed);
}

/// A store transaction that failed: its writes got 503.
pub fn store_commit_failed() {
    COMMIT_FAILURES.fetch_add(1, Ordering::Relaxed);
}

/// A snapshot completed; `began` is when its read transaction began, in Unix seconds.
pub fn snapshot_taken(began: u64) {
    SNAPSHOTS_TAKEN.fetch_add(1, Ordering::Relaxed);
    SNAPSHOT_LAST_GOOD.fetch_max(began, Ordering::Relaxed);
}

pub fn snapshot_failed() {
    SNAPSHOTS_FAILED.fetch_add(1, Ordering::Relaxed);
}

/// An ACME order ended: a certificate was issued, or the attempt failed (to be retried).
pub fn acme_order(issued: bool) {
    if issued {
        ACME_ISSUED.fetch_add(1, Ordering::Relaxed);
    } else {
        ACME_FAILED.fetch_add(1, Ordering::Relaxed);
    }
    ACME_FAILING.store(i64::from(!issued), Ordering::Relaxed);
}

/// Pets per status label (`None`: pets without one), as the store counts them.
pub type PetCounts = Vec<(Option<&'static str>, u64)>;

/// A count of the pets per status, taken afresh at each call; its error is only logged.
pub type CountPets = Box<
    dyn Fn()
            -> Pin<Box<dyn Future<Output = Result<PetCounts, Box<dyn Error + Send + Sync>>> + Send>>
        + Send
        + Sync,
>;

/// What the listener asks the rest of the server for at each scrape.
pub struct Sources {
    /// Pets counted per status at a scrape (when it cannot say now, the series are left out).
    pub pets: CountPets,
    /// When the certificate in service expires, in Unix seconds; `None` while there is none.
    pub certificate_not_after: fn() -> Option<u64>,
    /// Whether snapshots are taken (`--backup-dir`): without, their series would only alarm.
    pub backups: bool,
    /// Whether the certificate comes from ACME (`--acme-domain`): its orders are counted.
    pub acme: bool,
}

/// Binds the metrics listener; a failure is the start's, so a typo in the address stops the
/// server instead of leaving it unmonitored.
pub async fn bind(address: SocketAddr) -> anyhow::Result<TcpListener> {
    use anyhow::Context as _;
    // `clock::unix_now`'s rule (0 before the epoch), kept here: metrics uses nothing of ours.
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs());
    STARTED.store(now, Ordering::Relaxed);
    TcpListener::bind(address)
        .await
        .with_context(|| format!("listening for metrics on {address}"))
}

/// Serves `/metrics` on `listener` for ever (the task is aborted at the stop). A few
/// connections at once; one more is closed at once rather than queued, so the API listener
/// and its tasks never wait on a scraper.
pub async fn serve(listener: TcpListener, sources: Sources) {
    let sources = Arc::new(sources);
    let places = Arc::new(Semaphore::new(MAX_SCRAPE_CONNECTIONS));
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(SCRAPE_HEADER_TIMEOUT)
        .max_buf_size(16 * 1024);
    loop {
        let tcp = match listener.accept().await {
            Ok((tcp, _)) => tcp,
            Err(e) => {
                tracing::warn!(error = %e, "metrics accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(place) = Arc::clone(&places).try_acquire_owned() else {
            drop(tcp);
            continue;
        };
        let sources = Arc::clone(&sources);
        let connection = http.serve_connection(
            TokioIo::new(tcp),
            service_fn(move |request| {
                let sources = Arc::clone(&sources);
                async move { Ok::<_, Infallible>(answer(request, &sources).await) }
            }),
        );
        tokio::spawn(async move {
            let _place = place;
            let _ = tokio::time::timeout(SCRAPE_CONNECTION_TIMEOUT, connection).await;
        });
    }
}

async fn answer(request: Request<Incoming>, sources: &Sources) -> Response<Full<Bytes>> {
    let plain = |status: StatusCode, text: &'static str| {
        let mut response = Response::new(Full::new(Bytes::from_static(text.as_bytes())));
        *response.status_mut() = status;
        response.headers_mut().insert(
            CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        response
    };
    if request.uri().path() != "/metrics" {
        return plain(
            StatusCode::NOT_FOUND,
            "not found: metrics are at /metrics\n",
        );
    }
    let method = request.method();
    if method != Method::GET && method != Method::HEAD {
        let mut response = plain(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
        response
            .headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return response;
    }
    // Prometheus asks for OpenMetrics first; curl and older scrapers get the 0.0.4 text.
    let openmetrics = request.headers().get_all(ACCEPT).iter().any(|accept| {
        accept
            .to_str()
            .is_ok_and(|accept| accept.contains("application/openmetrics-text"))
    });
    let scrape = Scrape {
        pets: pet_counts(sources).await,
        certificate_not_after: (sources.certificate_not_after)(),
        backups: sources.backups,
        acme: sources.acme,
    };
    let mut registry = Registry::default();
    registry.register_collector(Box::new(scrape));
    let mut text = String::with_capacity(16 * 1024);
    let (encoded, content_type) = if openmetrics {
        (
            prometheus_client::encoding::text::encode(&mut text, &registry),
            OPENMETRICS_TYPE,
        )
    } else {
        (
            prometheus_client::encoding::prometheus_text::encode(&mut text, &registry),
            prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
        )
    };
    if let Err(e) = encoded {
        tracing::error!(error = %e, "encoding the metrics failed");
        return plain(StatusCode::INTERNAL_SERVER_ERROR, "encoding failed\n");
    }
    let mut response = Response::new(Full::new(if method == Method::HEAD {
        Bytes::new()
    } else {
        Bytes::from(text)
    }));
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// A count of the pets takes time in proportion to the store; it is taken again only once
/// this many times its own duration has passed, so counting costs at most a twentieth of one
/// core however large the store and however often scrapes come (a small store is counted at
/// every scrape).
const COUNT_SPACING: u32 = 20;

/// The last count of pets: when it was taken, how long it took, and what it found.
static LAST_COUNT: tokio::sync::Mutex<Option<(Instant, Duration, PetCounts)>> =
    tokio::sync::Mutex::const_new(None);

async fn pet_counts(sources: &Sources) -> Option<PetCounts> {
    // Held across the count: concurrent scrapes share one count rather than run two.
    let mut last = LAST_COUNT.lock().await;
    if let Some((at, took, counts)) = &*last
        && at.elapsed() < took.saturating_mul(COUNT_SPACING)
    {
        return Some(counts.clone());
    }
    let began = Instant::now();
    let counts = match (sources.pets)().await {
        Ok(counts) => counts,
        Err(e) => {
            tracing::warn!(error = %e, "counting pets for the metrics failed");
            return None;
        }
    };
    *last = Some((began, began.elapsed(), counts.clone()));
    Some(counts)
}

/// One scrape's values that are not kept in the statics.
#[derive(Debug)]
struct Scrape {
    pets: Option<PetCounts>,
    certificate_not_after: Option<u64>,
    backups: bool,
    acme: bool,
}

/// A counter, gauge or histogram with no labels, or one series of a family.
/// The webhook families: deliveries by outcome (every outcome from 0), and per endpoint its
/// seconds behind, with the count of disabled endpoints.
fn encode_webhooks(e: &mut DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
    let mut deliveries = e.encode_descriptor(
        "petstore_webhook_deliveries",
        "Webhook delivery attempts, by outcome (gone: the receiver answered 410 Gone).",
        None,
        MetricType::Counter,
    )?;
    for (outcome, count) in WEBHOOK_OUTCOMES.iter().zip(&WEBHOOK_DELIVERIES) {
        deliveries
            .encode_family(&[("outcome", *outcome)])?
            .encode_counter::<NoLabelSet, _, u64>(&count.load(Ordering::Relaxed), None)?;
    }
    let endpoints = WEBHOOK_ENDPOINTS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    let mut behind = e.encode_descriptor(
        "petstore_webhook_behind",
        "Age of the oldest event a webhook endpoint has yet to get (0: caught up), by endpoint \
         label.",
        Some(&Unit::Seconds),
        MetricType::Gauge,
    )?;
    for (name, (secs, _)) in &endpoints {
        behind
            .encode_family(&[("endpoint", name.as_str())])?
            .encode_gauge(&i64::try_from(*secs).unwrap_or(i64::MAX))?;
    }
    let disabled = endpoints.values().filter(|(_, disabled)| *disabled).count();
    gauge(
        e,
        "petstore_webhook_endpoints_disabled",
        "Webhook endpoints stopped (410 Gone, tries used up, the feed purged past them) until \
         `petstore webhooks enable`.",
        None,
        i64::try_from(disabled).unwrap_or(i64::MAX),
    )
}

fn counter(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    value: u64,
) -> Result<(), std::fmt::Error> {
    encoder
        .encode_descriptor(name, help, None, MetricType::Counter)?
        .encode_counter::<NoLabelSet, _, u64>(&value, None)
}

fn gauge(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    value: i64,
) -> Result<(), std::fmt::Error> {
    encoder
        .encode_descriptor(name, help, unit, MetricType::Gauge)?
        .encode_gauge(&value)
}

impl Collector for Scrape {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let e = &mut encoder;
        self.encode_requests(e)?;
        self.encode_connections(e)?;
        self.encode_store(e)?;
        self.encode_facts(e)
    }
}

impl Scrape {
    fn encode_requests(&self, e: &mut DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        // Only series that counted something: 600 mostly empty ones would drown the page.
        let used: Vec<(usize, [(&str, &str); 3])> = REQUESTS
            .iter()
            .enumerate()
            .filter(|(_, histogram)| histogram.count() > 0)
            .map(|(series, _)| {
                let status = series % STATUS_LABELS.len();
                let method = series / STATUS_LABELS.len() % METHODS.len();
                let route = series / STATUS_LABELS.len() / METHODS.len();
                let labels = [
                    ("http_request_method", METHODS[method]),
                    ("http_route", ROUTES[route]),
                    ("http_response_status_code", STATUS_LABELS[status]),
                ];
                (series, labels)
            })
            .collect();
        let mut requests = e.encode_descriptor(
            "http_server_requests",
            "Requests answered, by route template, method and status.",
            None,
            MetricType::Counter,
        )?;
        for (series, labels) in &used {
            requests
                .encode_family(labels)?
                .encode_counter::<NoLabelSet, _, u64>(&REQUESTS[*series].count(), None)?;
        }
        let mut durations = e.encode_descriptor(
            "http_server_request_duration",
            "Time from a request's head to its answer's head, by route template, method and status.",
            Some(&Unit::Seconds),
            MetricType::Histogram,
        )?;
        for (series, labels) in &used {
            REQUESTS[*series].encode(&mut durations.encode_family(labels)?, 1e9)?;
        }
        Ok(())
    }

    fn encode_connections(&self, e: &mut DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        gauge(
            e,
            "petstore_connections_open",
            "API connections open (handshaking or served).",
            None,
            CONNECTIONS_OPEN.load(Ordering::Relaxed),
        )?;
        counter(
            e,
            "petstore_connections_accepted",
            "API connections accepted.",
            CONNECTIONS_ACCEPTED.load(Ordering::Relaxed),
        )?;
        counter(
            e,
            "petstore_connections_evicted",
            "Idle or handshaking API connections closed to make room under --max-connections.",
            CONNECTIONS_EVICTED.load(Ordering::Relaxed),
        )?;
        counter(
            e,
            "petstore_connections_waited",
            "API connections that found every --max-connections place taken and waited for one.",
            CONNECTIONS_WAITED.load(Ordering::Relaxed),
        )?;
        counter(
            e,
            "petstore_accept_errors",
            "Failed accepts on the API listener (out of file descriptors, most often).",
            ACCEPT_ERRORS.load(Ordering::Relaxed),
        )?;
        let mut failures = e.encode_descriptor(
            "petstore_tls_handshake_failures",
            "TLS handshakes that failed, by reason.",
            None,
            MetricType::Counter,
        )?;
        for (reason, count) in HANDSHAKE_REASONS.iter().zip(&HANDSHAKE_FAILURES) {
            failures
                .encode_family(&[("reason", *reason)])?
                .encode_counter::<NoLabelSet, _, u64>(&count.load(Ordering::Relaxed), None)?;
        }
        Ok(())
    }

    fn encode_store(&self, e: &mut DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        COMMIT_DURATION.encode(
            &mut e.encode_descriptor(
                "petstore_store_commit_duration",
                "Time of each store write transaction (one group commit), its fsync included.",
                Some(&Unit::Seconds),
                MetricType::Histogram,
            )?,
            1e9,
        )?;
        COMMIT_WRITES.encode(
            &mut e.encode_descriptor(
                "petstore_store_commit_writes",
                "Writes (creates, patches, deletes, purges) per store write transaction.",
                None,
                MetricType::Histogram,
            )?,
            1.0,
        )?;
        counter(
            e,
            "petstore_store_commit_failures",
            "Store write transactions that failed; their writes were answered 503.",
            COMMIT_FAILURES.load(Ordering::Relaxed),
        )?;
        counter(
            e,
            "petstore_events_appended",
            "Events this instance appended to the feed (one per change it committed).",
            EVENTS_APPENDED.load(Ordering::Relaxed),
        )?;
        gauge(
            e,
            "petstore_event_subscribers",
            "Event streams open (GET /v1/events as text/event-stream).",
            None,
            EVENT_SUBSCRIBERS.load(Ordering::Relaxed),
        )?;
        let mut closed = e.encode_descriptor(
            "petstore_event_streams_closed",
            "Event streams ended, by reason.",
            None,
            MetricType::Counter,
        )?;
        for (reason, count) in STREAM_CLOSE_REASONS.iter().zip(&STREAMS_CLOSED) {
            closed
                .encode_family(&[("reason", *reason)])?
                .encode_counter::<NoLabelSet, _, u64>(&count.load(Ordering::Relaxed), None)?;
        }
        // Every status always, from 0: a rate over a series that appears late misses its start.
        let mut orders = e.encode_descriptor(
            "petstore_orders",
            "Orders this process placed, completed, cancelled and expired, by what became of them.",
            None,
            MetricType::Counter,
        )?;
        for (status, count) in ORDER_STATUSES.iter().zip(&ORDERS) {
            orders
                .encode_family(&[("status", *status)])?
                .encode_counter::<NoLabelSet, _, u64>(&count.load(Ordering::Relaxed), None)?;
        }
        encode_webhooks(e)?;
        let oldest = EVENTS_OLDEST_MS.load(Ordering::Relaxed);
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let age = if oldest == 0 {
            0
        } else {
            now_ms.saturating_sub(oldest) / 1000
        };
        gauge(
            e,
            "petstore_events_oldest_age",
            "Age of the oldest event the feed keeps (0: none kept); --events-keep bounds it.",
            Some(&Unit::Seconds),
            i64::try_from(age).unwrap_or(i64::MAX),
        )?;
        if let Some(pets) = &self.pets {
            let mut family = e.encode_descriptor(
                "petstore_pets",
                "Pets in the store, by status (none: pets without one).",
                None,
                MetricType::Gauge,
            )?;
            for (status, count) in pets {
                family
                    .encode_family(&[("status", status.unwrap_or("none"))])?
                    .encode_gauge(&i64::try_from(*count).unwrap_or(i64::MAX))?;
            }
        }
        if self.backups {
            counter(
                e,
                "petstore_snapshots",
                "Snapshots of the store written to --backup-dir.",
                SNAPSHOTS_TAKEN.load(Ordering::Relaxed),
            )?;
            counter(
                e,
                "petstore_snapshot_failures",
                "Snapshots that failed (each is retried with backoff).",
                SNAPSHOTS_FAILED.load(Ordering::Relaxed),
            )?;
            gauge(
                e,
                "petstore_snapshot_last_success_timestamp",
                "When the last good snapshot's read transaction began, in Unix time (0: none yet).",
                Some(&Unit::Seconds),
                SNAPSHOT_LAST_GOOD.load(Ordering::Relaxed) as i64,
            )?;
        }
        Ok(())
    }

    fn encode_facts(&self, e: &mut DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        if let Some(not_after) = self.certificate_not_after {
            gauge(
                e,
                "petstore_tls_certificate_not_after_timestamp",
                "When the serving certificate expires (its notAfter), in Unix time.",
                Some(&Unit::Seconds),
                i64::try_from(not_after).unwrap_or(i64::MAX),
            )?;
        }
        if self.acme {
            // The error itself is text for /healthz and the log; here, whether there is one.
            counter(
                e,
                "petstore_acme_certificates_issued",
                "ACME orders that ended with a certificate in service.",
                ACME_ISSUED.load(Ordering::Relaxed),
            )?;
            counter(
                e,
                "petstore_acme_order_failures",
                "ACME order attempts that failed and will be retried with backoff.",
                ACME_FAILED.load(Ordering::Relaxed),
            )?;
            gauge(
                e,
                "petstore_acme_renewal_failing",
                "1 while the last ACME order failed (see /healthz for its error), else 0.",
                None,
                ACME_FAILING.load(Ordering::Relaxed),
            )?;
        }
        let mut info = e.encode_descriptor(
            "petstore_build_info",
            "The running build: always 1, with the version as a label.",
            None,
            MetricType::Gauge,
        )?;
        info.encode_family(&[("version", env!("CARGO_PKG_VERSION"))])?
            .encode_gauge(&1i64)?;
        gauge(
            e,
            "process_start_time",
            "When the process started, in Unix time.",
            Some(&Unit::Seconds),
            STARTED.load(Ordering::Relaxed) as i64,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_histogram_counts_each_value_in_the_first_bucket_at_or_above_it() {
        static H: Histogram = Histogram::new(&[1, 2, 4]);
        for value in [0, 1, 2, 3, 4, 5, 100] {
            H.observe(value);
        }
        let counts: Vec<u64> = H.buckets[..4]
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect();
        assert_eq!(counts, [2, 1, 2, 2]);
        assert_eq!(H.count(), 7);
        assert_eq!(H.sum.load(Ordering::Relaxed), 115);
    }

    #[test]
    fn every_route_has_its_label_in_order() {
        use crate::operations::Op;
        assert_eq!(ROUTES.len(), Route::ConsoleSession.index() + 1);
        assert_eq!(ROUTES[Route::Unmatched.index()], "unmatched");
        assert_eq!(
            ROUTES[Route::Api(Op::ListOrders.path()).index()],
            "/v1/store/orders"
        );
        assert_eq!(
            ROUTES[Route::Api(Op::PatchCategory.path()).index()],
            "/v1/categories/{categoryId}"
        );
    }

    #[test]
    fn order_labels_follow_the_order_statuses() {
        let statuses: Vec<&str> = crate::order::OrderStatus::ALL
            .iter()
            .map(|status| status.as_str())
            .collect();
        assert_eq!(statuses, ORDER_STATUSES);
    }

    #[test]
    fn every_status_has_its_label() {
        for (status, label) in STATUSES.iter().zip(STATUS_LABELS) {
            assert_eq!(status.to_string(), label);
        }
        assert_eq!(STATUS_LABELS.len(), STATUSES.len() + 1);
    }
}
