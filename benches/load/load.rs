//! The load generator: the timed loops that keep a fixed number of requests in flight over
//! connections from `client`, with requests built once per run. It counts answers, non-2xx and
//! I/O errors, keeps each latency and samples the server's CPU over the window; it knows
//! nothing of pets beyond the requests it is handed. Invariant: every loop stops at its
//! deadline, and every wait is bounded by a hard deadline shortly after.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{AUTHORIZATION, CONNECTION, CONTENT_TYPE, HOST, HeaderName, HeaderValue};
use hyper::{Method, Request, Uri};
use tokio::time::{Instant, timeout_at};

use crate::client::{BEARER, Conn, Tls};
use crate::process::{CLK_TCK, Server, cpu_ticks, steal_ticks};

/// How long requests still in flight at the end of the window may take before they count as
/// errors and the loop gives up on them.
const GRACE: Duration = Duration::from_secs(10);
/// After a failed connect, wait this long before the next try, so a dead server is not spun on.
const RECONNECT_PAUSE: Duration = Duration::from_millis(10);
/// Distinct pet ids a `get-one` run cycles through; enough to spread over a store of 1M.
const PET_ID_SPREAD: usize = 1 << 16;
const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

/// How requests travel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// One keep-alive HTTP/1.1 connection per client, one request in flight on each.
    Http1,
    /// `connections` HTTP/2 connections, each shared by `streams` clients.
    Http2 { connections: usize, streams: usize },
    /// A new TCP + TLS 1.3 connection (no resumption) per request, closed after it.
    Handshake,
}

impl Protocol {
    pub fn clients(self, http1_clients: usize) -> usize {
        match self {
            Protocol::Http2 {
                connections,
                streams,
            } => connections * streams,
            Protocol::Http1 | Protocol::Handshake => http1_clients,
        }
    }

    fn is_http2(self) -> bool {
        matches!(self, Protocol::Http2 { .. })
    }
}

/// The requests of a run, built once: each request clones shared parts (a `Uri` and header
/// values are reference-counted), so the loop allocates only what hyper needs.
pub struct Workload {
    method: Method,
    uris: Vec<Uri>,
    paths: Vec<String>,
    body: Bytes,
    /// Set for named creates: the body of each request, taken in turn (then `body` is unused).
    bodies: Vec<Bytes>,
    host: HeaderValue,
    bearer: HeaderValue,
    close: bool,
    http2: bool,
    /// Set for keyed creates: every request carries `Idempotency-Key: {this}-{client}-{n}`,
    /// unique within the run (and across runs, by this per-run prefix).
    key_prefix: Option<String>,
    /// Set for orders: every request's body is `{"petId":N}` with the next N of this counter,
    /// shared by all clients, so no two orders ask for the same pet.
    next_pet: Option<Arc<AtomicU64>>,
}

impl Workload {
    /// `GET path` for every request.
    pub fn get(addr: SocketAddr, protocol: Protocol, path: &str) -> Workload {
        Workload::new(
            addr,
            protocol,
            Method::GET,
            vec![path.to_owned()],
            Bytes::new(),
        )
    }

    /// `GET /v1/pets/{id}` with ids spread evenly (pseudo-randomly) over `1..=pets`.
    pub fn get_one(addr: SocketAddr, protocol: Protocol, pets: u64) -> Workload {
        // xorshift64: deterministic, so every run asks for the same ids.
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let paths = (0..PET_ID_SPREAD)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                format!("/v1/pets/{}", 1 + state % pets.max(1))
            })
            .collect();
        Workload::new(addr, protocol, Method::GET, paths, Bytes::new())
    }

    /// `POST /v1/pets` with this JSON body.
    pub fn create(addr: SocketAddr, protocol: Protocol, body: &'static str) -> Workload {
        Workload::new(
            addr,
            protocol,
            Method::POST,
            vec!["/v1/pets".to_owned()],
            Bytes::from_static(body.as_bytes()),
        )
    }

    /// `POST /v1/pets` with one of `bodies` each, in turn; each client starts at a place of its
    /// own in the list, so the clients do not send the same names at the same time.
    pub fn create_named(addr: SocketAddr, protocol: Protocol, bodies: Vec<Bytes>) -> Workload {
        let mut work = Workload::create(addr, protocol, "");
        work.bodies = bodies;
        work
    }

    /// `POST /v1/store/orders`, each for the pet `next_pet` hands out (it is then one more):
    /// every order asks for a pet no other order of the run asked for.
    pub fn order(addr: SocketAddr, protocol: Protocol, next_pet: Arc<AtomicU64>) -> Workload {
        let mut work = Workload::new(
            addr,
            protocol,
            Method::POST,
            vec!["/v1/store/orders".to_owned()],
            Bytes::new(),
        );
        work.next_pet = Some(next_pet);
        work
    }

    /// `POST /v1/pets` with this JSON body and an `Idempotency-Key` of its own on each request,
    /// as a client that may retry sends it.
    pub fn create_keyed(addr: SocketAddr, protocol: Protocol, body: &'static str) -> Workload {
        let mut work = Workload::create(addr, protocol, body);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |t| t.as_nanos());
        work.key_prefix = Some(format!("bench-{nanos:x}"));
        work
    }

    fn new(
        addr: SocketAddr,
        protocol: Protocol,
        method: Method,
        paths: Vec<String>,
        body: Bytes,
    ) -> Workload {
        let authority = format!("localhost:{}", addr.port());
        let uris = paths
            .iter()
            .map(|path| {
                // HTTP/2 carries scheme and authority in the request line; HTTP/1.1 a Host.
                let uri = if protocol.is_http2() {
                    format!("https://{authority}{path}")
                } else {
                    path.clone()
                };
                Uri::try_from(uri).expect("a valid request target")
            })
            .collect();
        Workload {
            method,
            uris,
            paths,
            body,
            host: HeaderValue::try_from(authority).expect("host:port is a valid header"),
            bearer: HeaderValue::from_static(BEARER),
            close: protocol == Protocol::Handshake,
            http2: protocol.is_http2(),
            key_prefix: None,
            next_pet: None,
            bodies: Vec::new(),
        }
    }

    /// The request client `client` sends as its `index`-th turn (its list position).
    fn request(&self, client: usize, index: usize) -> Request<Full<Bytes>> {
        let body = match &self.next_pet {
            Some(next) => Bytes::from(format!(
                r#"{{"petId":{}}}"#,
                next.fetch_add(1, Ordering::Relaxed)
            )),
            None if !self.bodies.is_empty() => {
                self.bodies[(client.wrapping_mul(7_919) + index) % self.bodies.len()].clone()
            }
            None => self.body.clone(),
        };
        let has_body = !body.is_empty();
        let mut request = Request::new(Full::new(body));
        *request.method_mut() = self.method.clone();
        *request.uri_mut() = self.uris[index % self.uris.len()].clone();
        let headers = request.headers_mut();
        if !self.http2 {
            headers.insert(HOST, self.host.clone());
        }
        headers.insert(AUTHORIZATION, self.bearer.clone());
        if has_body {
            headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        }
        if self.close {
            headers.insert(CONNECTION, HeaderValue::from_static("close"));
        }
        if let Some(prefix) = &self.key_prefix {
            // A client's index grows by one a request, so (client, index) is never repeated.
            let key = HeaderValue::try_from(format!("{prefix}-{client}-{index}"))
                .expect("a key of hex digits, dashes and letters is a valid header");
            headers.insert(IDEMPOTENCY_KEY, key);
        }
        request
    }

    fn path(&self, index: usize) -> &str {
        &self.paths[index % self.paths.len()]
    }
}

/// One answer kept whole, to check that the fast answers are also right.
#[derive(Clone, Debug)]
pub struct Sample {
    pub path: String,
    pub status: u16,
    pub body: Bytes,
}

/// What a run measured. Throughput and latencies cover the window only; `non_2xx`, `errors`
/// and `ok_total` cover the whole run, warm-up included, so that no failure hides in it.
#[derive(Debug)]
pub struct Outcome {
    /// Answers (any status) that arrived within the window.
    pub requests: u64,
    pub window: Duration,
    /// Sorted, in microseconds.
    pub latencies_us: Vec<u32>,
    pub non_2xx: u64,
    pub errors: u64,
    pub ok_total: u64,
    /// From the first request to the last answer, warm-up included.
    pub load_time: Duration,
    /// The server's CPU seconds over the window divided by the window's wall time.
    pub cpu_share: f64,
    /// The user-space part of `cpu_share` (the rest is the kernel's: TCP, epoll, fsync).
    pub user_share: f64,
    /// The same for this process (the load generator and the log drain), to show whether
    /// the client, not the server, set the pace.
    pub client_cpu_share: f64,
    /// CPU time the hypervisor took from the two CPUs over the window, in cores: a noisy host.
    pub steal: f64,
    pub sample: Option<Sample>,
}

impl Outcome {
    pub fn rps(&self) -> f64 {
        self.requests as f64 / self.window.as_secs_f64()
    }

    /// CPU microseconds a request, split (user, kernel); zeros without a CPU figure.
    pub fn cpu_per_request_us(&self) -> (f64, f64) {
        let rps = self.rps();
        if rps <= 0.0 || self.cpu_share <= 0.0 {
            return (0.0, 0.0);
        }
        // One /proc read gives both, so the user part never exceeds the whole.
        let kernel = self.cpu_share - self.user_share;
        (self.user_share * 1e6 / rps, kernel * 1e6 / rps)
    }

    pub fn per_core(&self) -> f64 {
        if self.cpu_share > 0.0 {
            self.rps() / self.cpu_share
        } else {
            0.0
        }
    }

    pub fn percentile_us(&self, p: f64) -> u32 {
        if self.latencies_us.is_empty() {
            return 0;
        }
        let rank = ((self.latencies_us.len() - 1) as f64 * p).round() as usize;
        self.latencies_us[rank]
    }
}

/// The times a run keeps to, shared by its clients.
struct Plan {
    work: Workload,
    addr: SocketAddr,
    tls: Arc<Tls>,
    protocol: Protocol,
    /// When the run began: `window_end_us` counts from here.
    start: Instant,
    window_start: Instant,
    /// Microseconds after `start`; brought forward when the caller's `end` finishes first.
    window_end_us: AtomicU64,
    hard_end: Instant,
    sample_wanted: AtomicBool,
    sample: Mutex<Option<Sample>>,
}

impl Plan {
    fn window_end(&self) -> Instant {
        self.start + Duration::from_micros(self.window_end_us.load(Ordering::Relaxed))
    }
}

/// One client's counts.
#[derive(Default)]
struct Tally {
    requests: u64,
    latencies_us: Vec<u32>,
    non_2xx: u64,
    errors: u64,
    ok_total: u64,
}

/// Runs `work` against `server` with `clients` clients: `warmup`, then the measured `window`.
pub async fn run(
    server: &Server,
    tls: &Arc<Tls>,
    protocol: Protocol,
    clients: usize,
    work: Workload,
    warmup: Duration,
    window: Duration,
) -> Outcome {
    let never = std::future::pending();
    run_until(server, tls, protocol, clients, work, warmup, window, never).await
}

/// `run`, whose window also ends (early) when `end` finishes, for a window that lasts as long
/// as something the caller watches (a snapshot). `end` is polled from the start of the run.
#[allow(clippy::too_many_arguments)]
pub async fn run_until(
    server: &Server,
    tls: &Arc<Tls>,
    protocol: Protocol,
    clients: usize,
    work: Workload,
    warmup: Duration,
    window: Duration,
    end: impl Future<Output = ()>,
) -> Outcome {
    let start = Instant::now();
    let window_start = start + warmup;
    let window_end = window_start + window;
    let plan = Arc::new(Plan {
        work,
        addr: server.addr,
        tls: Arc::clone(tls),
        protocol,
        start,
        window_start,
        window_end_us: AtomicU64::new((window_end - start).as_micros() as u64),
        hard_end: window_end + GRACE,
        sample_wanted: AtomicBool::new(true),
        sample: Mutex::new(None),
    });

    let mut tasks = tokio::task::JoinSet::new();
    match protocol {
        Protocol::Http2 {
            connections,
            streams,
        } => {
            for c in 0..connections {
                let shared = plan.tls.http2(plan.addr).await.ok();
                for s in 0..streams {
                    let conn = shared.clone().map(Conn::Http2);
                    tasks.spawn(client(Arc::clone(&plan), c * streams + s, conn));
                }
            }
        }
        Protocol::Http1 | Protocol::Handshake => {
            for i in 0..clients {
                tasks.spawn(client(Arc::clone(&plan), i, None));
            }
        }
    }

    // The sampler runs beside the clients; it reads the real instants, since it may wake late.
    tokio::pin!(end);
    let mut ended = false;
    tokio::select! {
        () = tokio::time::sleep_until(window_start) => {}
        () = &mut end => ended = true,
    }
    if ended {
        // Nothing to measure before the window opens: it opens and closes at once.
        tokio::time::sleep_until(window_start).await;
    }
    let me = std::process::id();
    let (t0, server0, mine0, steal0) = (
        Instant::now(),
        server.cpu_ticks(),
        cpu_ticks(me),
        steal_ticks(),
    );
    if !ended {
        tokio::select! {
            () = tokio::time::sleep_until(window_end) => {}
            () = &mut end => {}
        }
    }
    let now = Instant::now().min(window_end);
    plan.window_end_us
        .store((now - start).as_micros() as u64, Ordering::Relaxed);
    let (t1, server1, mine1, steal1) = (
        Instant::now(),
        server.cpu_ticks(),
        cpu_ticks(me),
        steal_ticks(),
    );
    let ticks = |from: Option<u64>, to: Option<u64>| match (from, to) {
        (Some(from), Some(to)) => to.saturating_sub(from) as f64 / CLK_TCK,
        _ => 0.0,
    };
    let seconds = (t1 - t0).as_secs_f64();
    // The nominal window, or up to where `end` closed it.
    let window = plan.window_end() - window_start;

    let mut total = Tally::default();
    while let Some(tally) = tasks.join_next().await {
        let tally = tally.expect("a client task does not panic");
        total.requests += tally.requests;
        total.non_2xx += tally.non_2xx;
        total.errors += tally.errors;
        total.ok_total += tally.ok_total;
        total.latencies_us.extend_from_slice(&tally.latencies_us);
    }
    let load_time = start.elapsed();
    total.latencies_us.sort_unstable();
    let sample = plan.sample.lock().expect("sample lock").take();
    Outcome {
        requests: total.requests,
        window,
        latencies_us: total.latencies_us,
        non_2xx: total.non_2xx,
        errors: total.errors,
        ok_total: total.ok_total,
        load_time,
        // A server killed during the window (the crash run) has no CPU figure: 0.
        cpu_share: ticks(server0.map(|t| t.all), server1.map(|t| t.all)) / seconds,
        user_share: ticks(server0.map(|t| t.user), server1.map(|t| t.user)) / seconds,
        client_cpu_share: ticks(mine0, mine1) / seconds,
        steal: ticks(steal0, steal1) / seconds,
        sample,
    }
}

/// One client: sends, waits for the whole answer, repeats until the window closes.
async fn client(plan: Arc<Plan>, id: usize, mut conn: Option<Conn>) -> Tally {
    let mut tally = Tally {
        latencies_us: Vec::with_capacity(1 << 14),
        ..Tally::default()
    };
    // Clients start at different points of the workload's list of requests.
    let mut index = id.wrapping_mul(PET_ID_SPREAD / 64 + 1);
    while Instant::now() < plan.window_end() {
        let started = Instant::now();
        let mut sender = match conn.take() {
            Some(sender) => sender,
            None => match timeout_at(plan.hard_end, connect(&plan)).await {
                Ok(Ok(sender)) => sender,
                _ => {
                    tally.errors += 1;
                    tokio::time::sleep(RECONNECT_PAUSE).await;
                    continue;
                }
            },
        };
        let keep = started >= plan.window_start && plan.sample_wanted.load(Ordering::Relaxed);
        let request = plan.work.request(id, index);
        let answer = timeout_at(plan.hard_end, exchange(&mut sender, request, keep)).await;
        let done = Instant::now();
        match answer {
            Ok(Ok((status, body))) => {
                if (200..300).contains(&status) {
                    tally.ok_total += 1;
                } else {
                    tally.non_2xx += 1;
                }
                if done >= plan.window_start && done <= plan.window_end() {
                    tally.requests += 1;
                    let micros = (done - started).as_micros();
                    tally
                        .latencies_us
                        .push(u32::try_from(micros).unwrap_or(u32::MAX));
                }
                if let Some(body) = body
                    && plan.sample_wanted.swap(false, Ordering::Relaxed)
                {
                    *plan.sample.lock().expect("sample lock") = Some(Sample {
                        path: plan.work.path(index).to_owned(),
                        status,
                        body,
                    });
                }
                if plan.protocol != Protocol::Handshake {
                    conn = Some(sender);
                }
            }
            // The connection failed: count it, and the next turn opens a new one.
            Ok(Err(_)) => tally.errors += 1,
            Err(_) => {
                tally.errors += 1;
                break;
            }
        }
        index = index.wrapping_add(1);
    }
    tally
}

/// Sends one request and reads the whole answer; keeps the body only when asked to.
async fn exchange(
    conn: &mut Conn,
    request: Request<Full<Bytes>>,
    keep: bool,
) -> hyper::Result<(u16, Option<Bytes>)> {
    let response = conn.send(request).await?;
    let status = response.status().as_u16();
    let mut body = response.into_body();
    if keep {
        return Ok((status, Some(body.collect().await?.to_bytes())));
    }
    while let Some(frame) = body.frame().await {
        frame?;
    }
    Ok((status, None))
}

async fn connect(plan: &Plan) -> std::io::Result<Conn> {
    match plan.protocol {
        Protocol::Http1 => plan.tls.http1(plan.addr).await,
        Protocol::Handshake => plan.tls.full_handshake(plan.addr).await,
        Protocol::Http2 { .. } => Ok(Conn::Http2(plan.tls.http2(plan.addr).await?)),
    }
}
