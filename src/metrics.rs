//! Metrics: the counters every part bumps (requests, connections, TLS handshakes, store
//! commits, snapshots) and the `--metrics-listen` listener that renders them for Prometheus at
//! `GET /metrics` over plain HTTP/1.1 with prometheus-client's encoders. The request and commit
//! histograms are fixed arrays of atomics, so the request path never takes a lock or hashes a
//! label; the cold families (bumped per connection, stream, order, delivery, snapshot) are
//! prometheus-client's own `Counter`, `Gauge` and `Family`. It uses nothing of ours but the
//! event and order types and the operation table (`operations`: its paths are the route
//! labels): what it cannot count itself (pets by status, the certificate's not-after) it asks
//! the `Sources` that `main` hands it at scrape time. Invariant: every label set but the
//! webhook endpoint's is drawn from a fixed list, so the number of series is bounded whatever
//! clients send (endpoints come from the operator's file).
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::error::Error;
use std::fmt::Write as _;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{ACCEPT, ALLOW, CONTENT_TYPE, HeaderValue};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabelSet, EncodeLabelValue, LabelValueEncoder, NoLabelSet,
};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::registry::{Registry, Unit};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::event::EventType;
use crate::operations::{PATHS, Path};
use crate::order::OrderStatus;

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

/// Declares an enum whose variants are the values of one label, each written as its literal:
/// prometheus-client's derive would write the variant's Rust name (`Timeout`), and the page
/// has always said `timeout`.
macro_rules! label_values {
    (
        $(#[$doc:meta])*
        $name:ident { $($(#[$variant_doc:meta])* $variant:ident = $label:literal,)+ }
    ) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$variant_doc])* $variant,)+
        }

        impl $name {
            /// Every value, so that each series is on the page from 0.
            const ALL: &[$name] = &[$($name::$variant),+];
        }

        impl EncodeLabelValue for $name {
            fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> std::fmt::Result {
                encoder.write_str(match self {
                    $($name::$variant => $label,)+
                })
            }
        }
    };
}

label_values! {
    /// Why a TLS handshake failed, as `petstore_tls_handshake_failures_total` counts it.
    HandshakeFailure {
        /// Not done within `--handshake-timeout`.
        Timeout = "timeout",
        /// The client closed the connection before the handshake was done.
        Eof = "eof",
        /// The client sent a TLS alert: it refused our certificate, most often.
        Alert = "alert",
        /// No protocol version, cipher suite or ALPN protocol in common.
        Incompatible = "incompatible",
        /// Not TLS at all (plain HTTP on the HTTPS port), or TLS that breaks the rules.
        Protocol = "protocol",
        /// The socket failed (reset by the peer).
        Io = "io",
    }
}

static REQUESTS: [Histogram; SERIES] = [const { Histogram::new(&REQUEST_BOUNDS_NS) }; SERIES];
static COMMIT_DURATION: Histogram = Histogram::new(&COMMIT_BOUNDS_NS);
static COMMIT_WRITES: Histogram = Histogram::new(&BATCH_BOUNDS);
/// When the oldest event kept was appended, in Unix milliseconds; 0 while the feed is empty.
static EVENTS_OLDEST_MS: AtomicU64 = AtomicU64::new(0);

label_values! {
    /// Why an event stream ended, as the metric labels it.
    StreamClosed {
        /// The client went away.
        Client = "client",
        /// Its send buffer stayed full too long: a reader that stopped reading.
        Slow = "slow",
        /// The server is stopping.
        Shutdown = "shutdown",
        /// It fell behind the feed's retention while catching up.
        Expired = "expired",
        /// The store failed while the stream read it.
        Error = "error",
        /// Its key was revoked or expired (a reload) since it opened.
        Revoked = "revoked",
    }
}

label_values! {
    /// What became of one webhook delivery attempt.
    WebhookOutcome {
        Delivered = "delivered",
        Failed = "failed",
        /// The receiver answered 410 Gone: the endpoint is disabled.
        Gone = "gone",
    }
}

impl EncodeLabelValue for OrderStatus {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> std::fmt::Result {
        encoder.write_str(self.as_str())
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HandshakeLabels {
    reason: HandshakeFailure,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StreamLabels {
    reason: StreamClosed,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OrderLabels {
    status: OrderStatus,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DeliveryLabels {
    outcome: WebhookOutcome,
}

/// A pet's status, `none` for pets without one.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabels {
    status: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VersionLabels {
    version: &'static str,
}

/// The cold families, each bumped per connection, commit, stream, order, delivery, snapshot or
/// ACME order, never per request: prometheus-client's types (an atomic behind an `Arc`, a
/// family's label looked up under a read lock) cost nothing there that shows.
#[derive(Default)]
struct Cold {
    connections_open: Gauge,
    connections_accepted: Counter,
    connections_evicted: Counter,
    connections_waited: Counter,
    accept_errors: Counter,
    handshake_failures: Family<HandshakeLabels, Counter>,
    commit_failures: Counter,
    store_panics: Counter,
    events_appended: Counter,
    event_subscribers: Gauge,
    streams_closed: Family<StreamLabels, Counter>,
    orders: Family<OrderLabels, Counter>,
    webhook_deliveries: Family<DeliveryLabels, Counter>,
    snapshots: Counter,
    snapshot_failures: Counter,
    /// Unix seconds; only ever raised, so a slow snapshot ending late cannot move it back.
    snapshot_last_success: Gauge,
    acme_issued: Counter,
    acme_failures: Counter,
    acme_failing: Gauge,
    /// Unix seconds of the process start, set when the listener is bound.
    started: Gauge,
}

static COLD: LazyLock<Cold> = LazyLock::new(|| {
    let cold = Cold::default();
    // Every label value from 0: a rate over a series that appears late misses its start.
    for &reason in HandshakeFailure::ALL {
        cold.handshake_failures
            .get_or_create_owned(&HandshakeLabels { reason });
    }
    for &reason in StreamClosed::ALL {
        cold.streams_closed
            .get_or_create_owned(&StreamLabels { reason });
    }
    for status in OrderStatus::ALL {
        cold.orders.get_or_create_owned(&OrderLabels { status });
    }
    for &outcome in WebhookOutcome::ALL {
        cold.webhook_deliveries
            .get_or_create_owned(&DeliveryLabels { outcome });
    }
    cold
});

/// Each webhook endpoint's seconds behind the newest event and whether it is disabled, by its
/// label (its id when it has none).
static WEBHOOK_ENDPOINTS: Mutex<BTreeMap<String, (u64, bool)>> = Mutex::new(BTreeMap::new());

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
        COLD.connections_accepted.inc();
        COLD.connections_open.inc();
        OpenConnection(())
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        COLD.connections_open.dec();
    }
}

/// A connection closed to make room for a new one under `--max-connections`.
pub fn connection_evicted() {
    COLD.connections_evicted.inc();
}

/// A connection that found every place taken and had to wait for one.
pub fn connection_waited() {
    COLD.connections_waited.inc();
}

pub fn accept_failed() {
    COLD.accept_errors.inc();
}

pub fn handshake_failed(reason: HandshakeFailure) {
    COLD.handshake_failures
        .get_or_create(&HandshakeLabels { reason })
        .inc();
}

/// A store transaction of `writes` writes committed (made durable) in `duration`.
pub fn store_committed(duration: Duration, writes: usize) {
    COMMIT_DURATION.observe(u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX));
    COMMIT_WRITES.observe(writes as u64);
}

/// A committed transaction appended `count` events to the feed.
pub fn events_appended(count: usize) {
    COLD.events_appended.inc_by(count as u64);
}

/// Orders placed, completed, cancelled and expired, counted from a committed batch's changes.
pub fn orders_moved(kinds: impl IntoIterator<Item = EventType>) {
    for kind in kinds {
        let status = match kind {
            EventType::OrderPlaced => OrderStatus::Placed,
            EventType::OrderCompleted => OrderStatus::Completed,
            EventType::OrderCancelled => OrderStatus::Cancelled,
            EventType::OrderExpired => OrderStatus::Expired,
            _ => continue,
        };
        COLD.orders.get_or_create(&OrderLabels { status }).inc();
    }
}

pub fn webhook_delivery(outcome: WebhookOutcome) {
    COLD.webhook_deliveries
        .get_or_create(&DeliveryLabels { outcome })
        .inc();
}

/// Endpoint `name`'s state now: seconds behind the newest event, and whether it is disabled.
pub fn webhook_endpoint(name: &str, behind_secs: u64, disabled: bool) {
    let mut endpoints = WEBHOOK_ENDPOINTS
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
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
        .unwrap_or_else(PoisonError::into_inner)
        .remove(name);
}

/// An open event stream, counted while it lives.
pub struct Subscriber(());

impl Subscriber {
    pub fn enter() -> Subscriber {
        COLD.event_subscribers.inc();
        Subscriber(())
    }
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        COLD.event_subscribers.dec();
    }
}

pub fn stream_closed(reason: StreamClosed) {
    COLD.streams_closed
        .get_or_create(&StreamLabels { reason })
        .inc();
}

/// When the oldest event the feed keeps was appended (Unix milliseconds), `None` when it keeps
/// none.
pub fn events_oldest(at_ms: Option<u64>) {
    EVENTS_OLDEST_MS.store(at_ms.unwrap_or(0), Ordering::Relaxed);
}

/// A store transaction that failed: its writes got 503.
pub fn store_commit_failed() {
    COLD.commit_failures.inc();
}

/// redb panicked inside the store's use of it (damage its checks missed); contained.
pub fn store_panicked() {
    COLD.store_panics.inc();
}

/// A snapshot completed; `began` is when its read transaction began, in Unix seconds.
pub fn snapshot_taken(began: u64) {
    COLD.snapshots.inc();
    COLD.snapshot_last_success
        .inner()
        .fetch_max(i64::try_from(began).unwrap_or(i64::MAX), Ordering::Relaxed);
}

pub fn snapshot_failed() {
    COLD.snapshot_failures.inc();
}

/// An ACME order ended: a certificate was issued, or the attempt failed (to be retried).
pub fn acme_order(issued: bool) {
    if issued {
        COLD.acme_issued.inc();
    } else {
        COLD.acme_failures.inc();
    }
    COLD.acme_failing.set(i64::from(!issued));
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
    COLD.started.set(i64::try_from(now).unwrap_or(i64::MAX));
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
        webhook_endpoints: WEBHOOK_ENDPOINTS
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone(),
    };
    let registry = scrape.into_registry();
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

/// One scrape's values that are not kept in the statics; also the collector of the families
/// encoded by hand.
#[derive(Debug)]
struct Scrape {
    pets: Option<PetCounts>,
    certificate_not_after: Option<u64>,
    backups: bool,
    acme: bool,
    /// `WEBHOOK_ENDPOINTS` as the scrape found it.
    webhook_endpoints: BTreeMap<String, (u64, bool)>,
}

impl Scrape {
    /// The page: the cold families and this scrape's values through prometheus-client's types
    /// (which add the `.` to each help and `_total` to each counter's name), then the scrape
    /// itself, as the collector of the families encoded by hand.
    fn into_registry(self) -> Registry {
        let cold = &*COLD;
        let mut r = Registry::default();
        r.register(
            "petstore_connections_open",
            "API connections open (handshaking or served)",
            cold.connections_open.clone(),
        );
        r.register(
            "petstore_connections_accepted",
            "API connections accepted",
            cold.connections_accepted.clone(),
        );
        r.register(
            "petstore_connections_evicted",
            "Idle or handshaking API connections closed to make room under --max-connections",
            cold.connections_evicted.clone(),
        );
        r.register(
            "petstore_connections_waited",
            "API connections that found every --max-connections place taken and waited for one",
            cold.connections_waited.clone(),
        );
        r.register(
            "petstore_accept_errors",
            "Failed accepts on the API listener (out of file descriptors, most often)",
            cold.accept_errors.clone(),
        );
        r.register(
            "petstore_tls_handshake_failures",
            "TLS handshakes that failed, by reason",
            cold.handshake_failures.clone(),
        );
        r.register(
            "petstore_store_commit_failures",
            "Store write transactions that failed; their writes were answered 503",
            cold.commit_failures.clone(),
        );
        r.register(
            "petstore_store_panics",
            "Panics inside redb that the store contained (answered 503): the file may be damaged",
            cold.store_panics.clone(),
        );
        r.register(
            "petstore_events_appended",
            "Events this instance appended to the feed (one per change it committed)",
            cold.events_appended.clone(),
        );
        r.register(
            "petstore_event_subscribers",
            "Event streams open (GET /v1/events as text/event-stream)",
            cold.event_subscribers.clone(),
        );
        r.register(
            "petstore_event_streams_closed",
            "Event streams ended, by reason",
            cold.streams_closed.clone(),
        );
        r.register(
            "petstore_orders",
            "Orders this process placed, completed, cancelled and expired, by what became of them",
            cold.orders.clone(),
        );
        r.register(
            "petstore_webhook_deliveries",
            "Webhook delivery attempts, by outcome (gone: the receiver answered 410 Gone)",
            cold.webhook_deliveries.clone(),
        );
        let disabled = self
            .webhook_endpoints
            .values()
            .filter(|(_, off)| *off)
            .count();
        r.register(
            "petstore_webhook_endpoints_disabled",
            "Webhook endpoints stopped (410 Gone, tries used up, the feed purged past them) until \
             `petstore webhooks enable`",
            ConstGauge::new(i64::try_from(disabled).unwrap_or(i64::MAX)),
        );
        r.register_with_unit(
            "petstore_events_oldest_age",
            "Age of the oldest event the feed keeps (0: none kept); --events-keep bounds it",
            Unit::Seconds,
            ConstGauge::new(oldest_event_age_secs()),
        );
        if let Some(pets) = &self.pets {
            let family = Family::<StatusLabels, Gauge>::default();
            for (status, count) in pets {
                let status = status.unwrap_or("none");
                let count = i64::try_from(*count).unwrap_or(i64::MAX);
                family.get_or_create(&StatusLabels { status }).set(count);
            }
            r.register(
                "petstore_pets",
                "Pets in the store, by status (none: pets without one)",
                family,
            );
        }
        if self.backups {
            r.register(
                "petstore_snapshots",
                "Snapshots of the store written to --backup-dir",
                cold.snapshots.clone(),
            );
            r.register(
                "petstore_snapshot_failures",
                "Snapshots that failed (each is retried with backoff)",
                cold.snapshot_failures.clone(),
            );
            r.register_with_unit(
                "petstore_snapshot_last_success_timestamp",
                "When the last good snapshot's read transaction began, in Unix time (0: none yet)",
                Unit::Seconds,
                cold.snapshot_last_success.clone(),
            );
        }
        if let Some(not_after) = self.certificate_not_after {
            r.register_with_unit(
                "petstore_tls_certificate_not_after_timestamp",
                "When the serving certificate expires (its notAfter), in Unix time",
                Unit::Seconds,
                ConstGauge::new(i64::try_from(not_after).unwrap_or(i64::MAX)),
            );
        }
        if self.acme {
            // The error itself is text for /healthz and the log; here, whether there is one.
            r.register(
                "petstore_acme_certificates_issued",
                "ACME orders that ended with a certificate in service",
                cold.acme_issued.clone(),
            );
            r.register(
                "petstore_acme_order_failures",
                "ACME order attempts that failed and will be retried with backoff",
                cold.acme_failures.clone(),
            );
            r.register(
                "petstore_acme_renewal_failing",
                "1 while the last ACME order failed (see /healthz for its error), else 0",
                cold.acme_failing.clone(),
            );
        }
        // A gauge of 1, not prometheus-client's `Info`: that one is named `petstore_build`
        // with the type `info` in OpenMetrics, and scrapers know this family as a gauge.
        let build = Family::<VersionLabels, Gauge>::default();
        let version = env!("CARGO_PKG_VERSION");
        build.get_or_create(&VersionLabels { version }).set(1);
        r.register(
            "petstore_build_info",
            "The running build: always 1, with the version as a label",
            build,
        );
        r.register_with_unit(
            "process_start_time",
            "When the process started, in Unix time",
            Unit::Seconds,
            cold.started.clone(),
        );
        r.register_collector(Box::new(self));
        r
    }
}

/// Seconds since the oldest event the feed keeps was appended; 0 when it keeps none.
fn oldest_event_age_secs() -> i64 {
    let oldest = EVENTS_OLDEST_MS.load(Ordering::Relaxed);
    if oldest == 0 {
        return 0;
    }
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    i64::try_from(now_ms.saturating_sub(oldest) / 1000).unwrap_or(i64::MAX)
}

impl Collector for Scrape {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let e = &mut encoder;
        self.encode_requests(e)?;
        self.encode_store(e)?;
        self.encode_webhook_behind(e)
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

    /// The commit histograms: lock-free like the requests', as every write batch records one.
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
        )
    }

    /// Each webhook endpoint's lag. By hand, as a `Family` with no series leaves its HELP and
    /// TYPE off the page, and the page has always carried them with no endpoint configured.
    fn encode_webhook_behind(&self, e: &mut DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let mut behind = e.encode_descriptor(
            "petstore_webhook_behind",
            "Age of the oldest event a webhook endpoint has yet to get (0: caught up), by endpoint \
             label.",
            Some(&Unit::Seconds),
            MetricType::Gauge,
        )?;
        for (name, (secs, _)) in &self.webhook_endpoints {
            behind
                .encode_family(&[("endpoint", name.as_str())])?
                .encode_gauge(&i64::try_from(*secs).unwrap_or(i64::MAX))?;
        }
        Ok(())
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
    fn the_cold_families_keep_their_names_help_and_lowercase_labels() {
        let scrape = Scrape {
            pets: Some(vec![(Some("sold"), 2), (None, 1)]),
            certificate_not_after: Some(2_110_692_170),
            backups: true,
            acme: true,
            webhook_endpoints: BTreeMap::from([("shop".to_owned(), (7, true))]),
        };
        let mut page = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut page, &scrape.into_registry())
            .expect("encodes");
        for line in [
            "# HELP petstore_connections_open API connections open (handshaking or served).",
            "# TYPE petstore_connections_accepted_total counter",
            "petstore_tls_handshake_failures_total{reason=\"incompatible\"} 0",
            "petstore_event_streams_closed_total{reason=\"revoked\"} 0",
            "petstore_orders_total{status=\"cancelled\"} 0",
            "petstore_webhook_deliveries_total{outcome=\"gone\"} 0",
            "petstore_webhook_behind_seconds{endpoint=\"shop\"} 7",
            "petstore_webhook_endpoints_disabled 1",
            "petstore_pets{status=\"none\"} 1",
            "# TYPE petstore_snapshot_last_success_timestamp_seconds gauge",
            "petstore_tls_certificate_not_after_timestamp_seconds 2110692170",
            "# TYPE petstore_acme_renewal_failing gauge",
            "# TYPE petstore_build_info gauge",
            "# HELP process_start_time_seconds When the process started, in Unix time.",
        ] {
            assert!(page.lines().any(|l| l == line), "{line}\n{page}");
        }
    }

    #[test]
    fn every_status_has_its_label() {
        for (status, label) in STATUSES.iter().zip(STATUS_LABELS) {
            assert_eq!(status.to_string(), label);
        }
        assert_eq!(STATUS_LABELS.len(), STATUSES.len() + 1);
    }
}
