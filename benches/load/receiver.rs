//! The webhook receivers of the `webhooks` part: HTTPS servers in this process (hyper's
//! HTTP/1.1 over tokio-rustls with the development certificate, each on a 127.0.0.1 port of
//! its own) that answer every delivery 204 at once and keep, for each, the pet and the instant
//! it arrived. Each checks every delivery's Standard Webhooks signature with its endpoint's
//! secret and counts what is wrong: a bad signature, a duplicate, an event out of feed order.
//! They run on a thread and runtime of their own (on the client CPU, like all of this
//! process), so a delivery is not queued behind the creating clients' tasks.

use std::collections::HashSet;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use hmac::{Hmac, Mac};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::HeaderMap;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use rustls::ServerConfig;
use sha2::Sha256;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

use crate::process::dev_server_tls;

/// The receivers' thread, by this name in /proc/<pid>/task, for its CPU time.
pub const THREAD: &str = "bench-receivers";
/// The Standard Webhooks specification's tolerance for a timestamp away from the receiver's
/// clock (its reference libraries' default).
const TIMESTAMP_TOLERANCE: Duration = Duration::from_secs(5 * 60);
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The receivers of one run, serving until `stop` (or the drop).
pub struct Receivers {
    pub hooks: Vec<Arc<Hook>>,
    stop: watch::Sender<bool>,
    thread: Option<thread::JoinHandle<()>>,
}

/// One receiver: its address, its endpoint's secret, and what it received.
pub struct Hook {
    pub addr: SocketAddr,
    /// Arrival instants are microseconds after this.
    origin: Instant,
    /// The key's bytes, set once `petstore webhooks add` printed the secret (before the
    /// server that delivers starts).
    key: OnceLock<Vec<u8>>,
    /// Deliveries kept (every one but a duplicate), readable while the run goes on.
    delivered: AtomicU64,
    log: Mutex<HookLog>,
}

/// What one receiver received.
#[derive(Default)]
pub struct HookLog {
    /// Each `pet.created` delivery but a duplicate: the pet's id and when its body had
    /// arrived (microseconds after the origin), in arrival order.
    pub events: Vec<(u64, u32)>,
    /// Deliveries of other types.
    pub others: u64,
    /// Deliveries whose `webhook-id` had come before.
    pub duplicates: u64,
    /// Deliveries whose `webhook-id` (a cursor: position order) was below the newest before.
    pub out_of_order: u64,
    /// Deliveries whose signature did not verify or whose timestamp was off by more than the
    /// tolerance; `verified` those that did.
    pub bad_signatures: u64,
    pub verified: u64,
    /// Anything else wrong (a header missing, a body that is not the event, its cursor not
    /// the `webhook-id`): the first, and how many.
    pub fault: Option<String>,
    pub faults: u64,
    newest: Option<[u8; 32]>,
    seen: HashSet<[u8; 32]>,
}

impl HookLog {
    fn fault(&mut self, why: String) {
        self.faults += 1;
        if self.fault.is_none() {
            self.fault = Some(why);
        }
    }
}

impl Receivers {
    /// `count` receivers on 127.0.0.1 ports of their own, on a new thread; arrival instants
    /// count from `origin`.
    pub fn start(count: usize, origin: Instant) -> Receivers {
        let listeners: Vec<std::net::TcpListener> = (0..count)
            .map(|_| {
                let listener = std::net::TcpListener::bind("127.0.0.1:0")
                    .expect("a receiver binds a loopback port");
                listener
                    .set_nonblocking(true)
                    .expect("a listener goes non-blocking");
                listener
            })
            .collect();
        let hooks: Vec<Arc<Hook>> = listeners
            .iter()
            .map(|listener| {
                Arc::new(Hook {
                    addr: listener
                        .local_addr()
                        .expect("a bound socket has an address"),
                    origin,
                    key: OnceLock::new(),
                    delivered: AtomicU64::new(0),
                    log: Mutex::new(HookLog::default()),
                })
            })
            .collect();
        let (stop, stopped) = watch::channel(false);
        let served = hooks.clone();
        let thread = thread::Builder::new()
            .name(THREAD.to_owned())
            .spawn(move || serve(listeners, served, stopped))
            .expect("the receivers' thread starts");
        Receivers {
            hooks,
            stop,
            thread: Some(thread),
        }
    }

    /// Deliveries kept so far by each receiver.
    pub fn delivered(&self) -> Vec<u64> {
        self.hooks.iter().map(|hook| hook.delivered()).collect()
    }

    /// Stops serving (open connections are dropped) and hands back each receiver's log.
    pub fn stop(mut self) -> Vec<HookLog> {
        self.join();
        self.hooks
            .iter()
            .map(|hook| std::mem::take(&mut *hook.log.lock().expect("hook log lock")))
            .collect()
    }

    fn join(&mut self) {
        let _ = self.stop.send(true);
        if let Some(thread) = self.thread.take() {
            thread.join().expect("the receivers' thread does not panic");
        }
    }
}

impl Drop for Receivers {
    fn drop(&mut self) {
        self.join();
    }
}

impl Hook {
    /// The URL an endpoint for this receiver is added with.
    pub fn url(&self) -> String {
        format!("https://{}/hook", self.addr)
    }

    /// Takes the endpoint's secret as `petstore webhooks add` printed it (`whsec_` + base64).
    pub fn set_secret(&self, secret: &str) -> Result<(), String> {
        let key = secret
            .strip_prefix("whsec_")
            .and_then(|encoded| STANDARD.decode(encoded).ok())
            .filter(|key| !key.is_empty())
            .ok_or_else(|| "the secret is not whsec_ and base64".to_owned())?;
        self.key
            .set(key)
            .map_err(|_| "the receiver has a secret already".to_owned())
    }

    pub fn delivered(&self) -> u64 {
        self.delivered.load(Ordering::Relaxed)
    }

    /// Checks and keeps one delivery whose body had arrived at `at`.
    fn record(&self, headers: &HeaderMap, body: &[u8], at: Instant) {
        let at_us = u32::try_from((at - self.origin).as_micros()).unwrap_or(u32::MAX);
        let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        let mut log = self.log.lock().expect("hook log lock");
        let (Some(id), Some(timestamp), Some(signatures)) = (
            header("webhook-id"),
            header("webhook-timestamp"),
            header("webhook-signature"),
        ) else {
            log.fault("a delivery without the webhook-id, -timestamp or -signature header".into());
            return;
        };
        match self.key.get() {
            Some(key) if verifies(key, id, timestamp, body, signatures) => log.verified += 1,
            _ => log.bad_signatures += 1,
        }
        let Some(cursor) = cursor(id) else {
            log.fault(format!("a webhook-id that is not a cursor: {id:?}"));
            return;
        };
        let event: serde_json::Value = match serde_json::from_slice(body) {
            Ok(event) => event,
            Err(e) => {
                log.fault(format!("a body that is not JSON: {e}"));
                return;
            }
        };
        if event["cursor"].as_str() != Some(id) {
            log.fault(format!("the body's cursor is not the webhook-id {id}"));
        }
        if !log.seen.insert(cursor) {
            log.duplicates += 1;
            return;
        }
        if log.newest.is_some_and(|newest| cursor < newest) {
            log.out_of_order += 1;
        } else {
            log.newest = Some(cursor);
        }
        match (event["type"].as_str(), event["pet"]["id"].as_u64()) {
            (Some("pet.created"), Some(pet)) => log.events.push((pet, at_us)),
            (Some("pet.created"), None) => log.fault("pet.created without pet.id".into()),
            _ => log.others += 1,
        }
        self.delivered.fetch_add(1, Ordering::Relaxed);
    }
}

/// Whether one of the `v1,` signatures of `signatures` is the HMAC-SHA256 of
/// `id.timestamp.body` under `key`, and `timestamp` is within the tolerance of now.
fn verifies(key: &[u8], id: &str, timestamp: &str, body: &[u8], signatures: &str) -> bool {
    let Ok(seconds) = timestamp.parse::<u64>() else {
        return false;
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |t| t.as_secs());
    if now.abs_diff(seconds) > TIMESTAMP_TOLERANCE.as_secs() {
        return false;
    }
    // HMAC takes a key of any length.
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(key) else {
        return false;
    };
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(body);
    let expected = mac.finalize().into_bytes();
    signatures.split(' ').any(|signature| {
        signature
            .strip_prefix("v1,")
            .and_then(|encoded| STANDARD.decode(encoded).ok())
            .is_some_and(|given| given.as_slice() == expected.as_slice())
    })
}

/// A cursor: 32 lowercase hex characters, ordered as the positions they name.
fn cursor(value: &str) -> Option<[u8; 32]> {
    let id: [u8; 32] = value.as_bytes().try_into().ok()?;
    id.iter()
        .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        .then_some(id)
}

/// The receivers' thread: a runtime of its own, one accept loop a receiver, until `stopped`.
fn serve(
    listeners: Vec<std::net::TcpListener>,
    hooks: Vec<Arc<Hook>>,
    mut stopped: watch::Receiver<bool>,
) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("the receivers' runtime starts");
    let acceptor = TlsAcceptor::from(tls_config());
    runtime.block_on(async move {
        for (listener, hook) in listeners.into_iter().zip(hooks) {
            let listener = TcpListener::from_std(listener).expect("a tokio listener");
            tokio::spawn(accept(listener, hook, acceptor.clone()));
        }
        // Until told, or until the `Receivers` is gone.
        while !*stopped.borrow_and_update() {
            if stopped.changed().await.is_err() {
                break;
            }
        }
    });
    // Dropping the runtime drops every connection task.
    drop(runtime);
}

async fn accept(listener: TcpListener, hook: Arc<Hook>, acceptor: TlsAcceptor) {
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            // Out of descriptors, say: the next accept may work, a moment later.
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let (hook, acceptor) = (Arc::clone(&hook), acceptor.clone());
        tokio::spawn(async move {
            let _ = tcp.set_nodelay(true);
            let Ok(Ok(tls)) = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await
            else {
                return;
            };
            let service = service_fn(move |request: Request<Incoming>| {
                let hook = Arc::clone(&hook);
                async move {
                    let (parts, body) = request.into_parts();
                    // The whole body, then at once the answer: the receiver does no work the
                    // server would wait for.
                    if let Ok(body) = body.collect().await {
                        hook.record(&parts.headers, &body.to_bytes(), Instant::now());
                    }
                    let mut response = Response::new(Full::new(Bytes::new()));
                    *response.status_mut() = StatusCode::NO_CONTENT;
                    Ok::<_, Infallible>(response)
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .serve_connection(TokioIo::new(tls), service)
                .await;
        });
    }
}

/// The development certificate, HTTP/1.1 (the server's deliveries offer no ALPN).
fn tls_config() -> Arc<ServerConfig> {
    let mut config = dev_server_tls();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(config)
}
