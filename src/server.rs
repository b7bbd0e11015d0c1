//! Connections: binding `--listen` (every address a name resolves to), the accept loop over
//! those listeners (bounded by `--max-connections`, making room by closing the
//! connection idle longest when every place is taken), one task per connection that runs the
//! TLS handshake under a deadline and then serves HTTP/1.1 or HTTP/2, idle connections
//! closed, and the graceful drain on stop. It knows no routes, pets or keys:
//! each request goes to `App`. Invariant: the accept loop never waits on a client, and every
//! wait on a client is bounded (handshake, request head, idleness, drain). hyper is the one
//! HTTP parser: a request it cannot parse gets its own bodiless 400 or 431 and a close.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use anyhow::Context as _;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use rustls::ServerConfig;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, watch};
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;

use crate::metrics;
use crate::service::App;

/// After a failed accept (e.g. out of file descriptors), wait this long before the next.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
/// With every place taken, how long the accept loop waits for an evicted connection to go
/// before it picks another (the first may have taken a request meanwhile, or every
/// connection is busy and only a finished one frees a place).
const EVICT_RETRY: Duration = Duration::from_millis(50);
/// HTTP/2 streams one connection may have open at once.
const MAX_CONCURRENT_STREAMS: u32 = 128;
/// CVE-2023-44487 (rapid reset): streams a client may open and reset before the server has
/// handled them, and streams the server may reset for errors, before the connection is
/// closed with ENHANCE_YOUR_CALM. Both are below h2's defaults (20 and 1024), so that the
/// settings, and their test, mean something.
const MAX_PENDING_RESET_STREAMS: usize = 16;
const MAX_LOCAL_ERROR_RESET_STREAMS: usize = 256;
/// hyper's own bounds on a request head. They sit above `service`'s (64 fields, 16 KiB), so
/// that a request just over ours is still parsed and gets the JSON 431 naming our bounds; past
/// these, hyper answers 431 itself, without a body, and closes.
const MAX_HEAD_FIELDS: usize = 256;
const MAX_HEAD_BYTES: usize = 64 * 1024;

/// The bounds a client can run into at the connection level.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Connections served at once; beyond it the connection idle longest is closed, or, when
    /// all are busy, new ones wait in the listen backlog.
    pub max_connections: usize,
    /// A TLS handshake must finish within this.
    pub handshake_timeout: Duration,
    /// An HTTP/1.1 request head must arrive within this (slowloris).
    pub header_timeout: Duration,
    /// A connection with no request in flight and no bytes moving is closed after this.
    pub idle_timeout: Duration,
    /// After a stop, open connections get this long to finish their requests.
    pub drain_timeout: Duration,
}

/// Binds `address` (`HOST:PORT`): an IP address as it is, a name on every address it
/// resolves to (`bind_all`).
pub async fn bind(address: &str) -> anyhow::Result<Vec<TcpListener>> {
    let mut resolved: Vec<SocketAddr> = Vec::new();
    let found = tokio::net::lookup_host(address)
        .await
        .context("resolving the host name")?;
    for address in found {
        // /etc/hosts may name one address twice (e.g. `localhost` on two lines).
        if !resolved.contains(&address) {
            resolved.push(address);
        }
    }
    anyhow::ensure!(!resolved.is_empty(), "the host name resolves to no address");
    bind_all(&resolved).await
}

/// Binds each address, in the resolver's order, all on one port: with port 0, the one the
/// first bind was given, so that a client finds the server at the same port whichever address
/// it picks. An address this host does not have (`::1` where IPv6 is off, yet named in
/// /etc/hosts) is skipped with a warning when there are others; any other failure is the
/// start's.
async fn bind_all(addresses: &[SocketAddr]) -> anyhow::Result<Vec<TcpListener>> {
    let mut listeners: Vec<TcpListener> = Vec::new();
    let mut port = None;
    for &address in addresses {
        let mut address = address;
        if let Some(port) = port.filter(|_| address.port() == 0) {
            address.set_port(port);
        }
        match TcpListener::bind(address).await {
            Ok(listener) => {
                let bound = listener.local_addr().context("reading the bound address")?;
                port.get_or_insert(bound.port());
                listeners.push(listener);
            }
            Err(e) if addresses.len() > 1 && e.kind() == io::ErrorKind::AddrNotAvailable => {
                tracing::warn!(%address, error = %e, "not listening on an address this host does not have");
            }
            Err(e) => return Err(e).with_context(|| format!("binding {address}")),
        }
    }
    anyhow::ensure!(
        !listeners.is_empty(),
        "this host has none of the addresses the host name resolves to"
    );
    Ok(listeners)
}

/// Serves until `stop` resolves, then stops accepting and drains open connections.
pub async fn serve(
    listeners: Vec<TcpListener>,
    tls: Arc<ServerConfig>,
    app: App,
    stop: impl Future<Output = ()>,
    limits: Limits,
) {
    let acceptor = TlsAcceptor::from(tls);
    let mut http = auto::Builder::new(TokioExecutor::new());
    // Half-close: a client that shuts its sending side after a request still reads the answer
    // (hyper would otherwise drop a connection whose read side ends while a request is in
    // flight). The cost: a client that vanishes mid-request is noticed when the answer is
    // written rather than at once.
    http.http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .half_close(true)
        .max_headers(MAX_HEAD_FIELDS)
        .max_buf_size(MAX_HEAD_BYTES);
    http.http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(MAX_CONCURRENT_STREAMS)
        .max_pending_accept_reset_streams(MAX_PENDING_RESET_STREAMS)
        .max_local_error_reset_streams(MAX_LOCAL_ERROR_RESET_STREAMS)
        .max_header_list_size(MAX_HEAD_BYTES as u32);
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let open = Arc::new(Open::default());
    // Every connection task holds a receiver: `closed()` on the sender is the end of the drain.
    let (stopping, stop_seen) = watch::channel(false);

    tokio::pin!(stop);
    let mut first = 0;
    loop {
        let (tcp, peer) = tokio::select! {
            accepted = accept(&listeners, &mut first) => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    metrics::accept_failed();
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
            () = &mut stop => break,
        };
        let slot = match Arc::clone(&slots).try_acquire_owned() {
            Ok(slot) => slot,
            Err(_) => {
                metrics::connection_waited();
                let room = make_room(&open, &slots);
                tokio::select! {
                    slot = room => slot,
                    () = &mut stop => break,
                }
            }
        };
        let activity = Arc::new(Activity::new());
        let connection = Connection {
            acceptor: acceptor.clone(),
            http: http.clone(),
            app: app.clone(),
            limits,
            stop: stop_seen.clone(),
            _place: Place::take(&open, slot, Arc::clone(&activity)),
            activity,
        };
        tokio::spawn(connection.run(tcp, peer));
    }

    drop(listeners);
    drop(stop_seen);
    let _ = stopping.send(true);
    match tokio::time::timeout(limits.drain_timeout, stopping.closed()).await {
        Ok(()) => tracing::info!("all connections closed"),
        Err(_) => tracing::warn!(
            timeout_s = limits.drain_timeout.as_secs(),
            "drain timed out; closing the remaining connections"
        ),
    }
}

/// The next connection on any of `listeners`. Each call starts looking at the listener after
/// the one that gave the last connection, so a busy address cannot starve another.
async fn accept(
    listeners: &[TcpListener],
    first: &mut usize,
) -> io::Result<(TcpStream, SocketAddr)> {
    std::future::poll_fn(|cx| {
        for offset in 0..listeners.len() {
            let index = (*first + offset) % listeners.len();
            // Pending registers this task's waker with the listener, so a connection on any
            // of them wakes the loop.
            if let Poll::Ready(accepted) = listeners[index].poll_accept(cx) {
                *first = (index + 1) % listeners.len();
                return Poll::Ready(accepted);
            }
        }
        Poll::Pending
    })
    .await
}

/// Why a handshake failed, from what rustls (inside the `io::Error` tokio-rustls gives) or the
/// socket said.
fn handshake_failure(e: &io::Error) -> metrics::HandshakeFailure {
    use metrics::HandshakeFailure;
    match e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        Some(rustls::Error::AlertReceived(_)) => HandshakeFailure::Alert,
        Some(
            rustls::Error::PeerIncompatible(_)
            | rustls::Error::NoApplicationProtocol
            | rustls::Error::NoCertificatesPresented,
        ) => HandshakeFailure::Incompatible,
        Some(_) => HandshakeFailure::Protocol,
        None if e.kind() == io::ErrorKind::UnexpectedEof => HandshakeFailure::Eof,
        None => HandshakeFailure::Io,
    }
}

/// What one connection's task needs, moved into it.
struct Connection {
    acceptor: TlsAcceptor,
    http: auto::Builder<TokioExecutor>,
    app: App,
    limits: Limits,
    /// Turns true when the server stops; the task then finishes its requests and ends.
    stop: watch::Receiver<bool>,
    /// This connection's place under `--max-connections`, given back when the task ends.
    _place: Place,
    /// Bytes moved, requests in flight, and the accept loop's call to make room.
    activity: Arc<Activity>,
}

/// Waits for a place under `--max-connections`, asking the connection idle longest to go
/// (as nginx closes reusable keep-alive connections); never one with a request in flight.
async fn make_room(open: &Open, slots: &Arc<Semaphore>) -> OwnedSemaphorePermit {
    loop {
        open.evict_longest_idle();
        tokio::select! {
            slot = Arc::clone(slots).acquire_owned() => {
                return slot.expect("the semaphore is never closed");
            }
            () = tokio::time::sleep(EVICT_RETRY) => {}
        }
    }
}

/// The open connections' activity, by a number of their own, for eviction.
#[derive(Default)]
struct Open {
    connections: Mutex<HashMap<u64, Arc<Activity>>>,
    next: AtomicU64,
}

impl Open {
    /// Asks the connection with no request in flight and the oldest last byte to close, if
    /// there is one. O(open connections), only when every place is taken.
    fn evict_longest_idle(&self) {
        let connections = self.connections.lock().unwrap_or_else(|e| e.into_inner());
        let victim = connections
            .values()
            .filter(|a| {
                a.in_flight.load(Ordering::Relaxed) == 0 && !a.evicted.load(Ordering::Relaxed)
            })
            .min_by_key(|a| a.last_moved());
        if let Some(victim) = victim {
            victim.evicted.store(true, Ordering::Relaxed);
            victim.evict.notify_one();
        }
    }
}

/// A connection's place: its permit and its entry in `Open`, both given back on drop.
struct Place {
    open: Arc<Open>,
    number: u64,
    _slot: OwnedSemaphorePermit,
    _counted: metrics::OpenConnection,
}

impl Place {
    fn take(open: &Arc<Open>, slot: OwnedSemaphorePermit, activity: Arc<Activity>) -> Place {
        let number = open.next.fetch_add(1, Ordering::Relaxed);
        open.connections
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(number, activity);
        Place {
            open: Arc::clone(open),
            number,
            _slot: slot,
            _counted: metrics::OpenConnection::enter(),
        }
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        self.open
            .connections
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.number);
    }
}

impl Connection {
    async fn run(mut self, tcp: TcpStream, peer: SocketAddr) {
        // Small request/response exchanges: sending at once beats Nagle's batching.
        let _ = tcp.set_nodelay(true);
        let handshake =
            tokio::time::timeout(self.limits.handshake_timeout, self.acceptor.accept(tcp));
        let activity = Arc::clone(&self.activity);
        let tls = tokio::select! {
            tls = handshake => match tls {
                Ok(Ok(tls)) => tls,
                // Scanners and plain-HTTP clients land here; not worth more than debug.
                Ok(Err(e)) => {
                    metrics::handshake_failed(handshake_failure(&e));
                    return tracing::debug!(%peer, error = %e, "TLS handshake failed");
                }
                Err(_) => {
                    metrics::handshake_failed(metrics::HandshakeFailure::Timeout);
                    return tracing::debug!(%peer, "TLS handshake timed out");
                }
            },
            _ = self.stop.wait_for(|stopped| *stopped) => return,
            () = activity.evict.notified() => {
                metrics::connection_evicted();
                return tracing::debug!(%peer, "closed during its handshake to make room");
            }
        };
        activity.touch();
        if tls.get_ref().1.alpn_protocol() == Some(crate::tls::ACME_TLS_ALPN) {
            // RFC 8737 section 3: the validation is the handshake itself; no data follows.
            let mut tls = tls;
            let close = tokio::io::AsyncWriteExt::shutdown(&mut tls);
            let _ = tokio::time::timeout(self.limits.handshake_timeout, close).await;
            return tracing::debug!(%peer, "answered a TLS-ALPN-01 validation");
        }

        // Formatted once: the request log line would otherwise format it for every request.
        let peer_name: Arc<str> = peer.to_string().into();
        let app = self.app;
        let counted = Arc::clone(&activity);
        let service = service_fn(move |request| {
            let app = app.clone();
            let peer = Arc::clone(&peer_name);
            let in_flight = InFlight::enter(&counted);
            async move {
                let mut response = app.handle(request, &peer).await;
                // A stream is in flight until its body ends, not when its head is sent.
                response.body_mut().hold(in_flight);
                Ok::<_, std::convert::Infallible>(response)
            }
        });
        let watched = Watched {
            inner: tls,
            activity: Arc::clone(&activity),
        };
        let io = TokioIo::new(watched);
        let connection = self.http.serve_connection(io, service);
        tokio::pin!(connection);

        let mut closing = false;
        // After an idle close began, when the connection is dropped however far its graceful
        // shutdown got: an HTTP/2 client that never acknowledges the GOAWAY's PING would
        // otherwise hold it open for ever. A stop has no such deadline here: the server's
        // drain timeout bounds it, and must be the one to say that the drain timed out.
        let mut close_by: Option<Instant> = None;
        // While a request is in flight the silence deadline may lie in the past; look again
        // no sooner than one idle period later, rather than spin.
        let mut next_check = Instant::now();
        loop {
            let idle_at = activity
                .idle_deadline(self.limits.idle_timeout)
                .max(next_check);
            tokio::select! {
                result = connection.as_mut() => {
                    if let Err(e) = result {
                        tracing::debug!(%peer, error = %e, "connection ended with an error");
                    }
                    return;
                }
                _ = self.stop.wait_for(|stopped| *stopped), if !closing => {
                    connection.as_mut().graceful_shutdown();
                    closing = true;
                }
                () = tokio::time::sleep_until(idle_at), if !closing => {
                    if activity.is_idle(self.limits.idle_timeout) {
                        tracing::debug!(%peer, "closing an idle connection");
                        connection.as_mut().graceful_shutdown();
                        closing = true;
                        close_by = Some(Instant::now() + self.limits.idle_timeout);
                    } else {
                        next_check = Instant::now() + self.limits.idle_timeout;
                    }
                }
                () = activity.evict.notified() => {
                    // Picked while idle; a request may have arrived since, and that one is
                    // answered: the accept loop then picks another.
                    if activity.in_flight.load(Ordering::Relaxed) == 0 {
                        metrics::connection_evicted();
                        return tracing::debug!(%peer, "closed while idle to make room");
                    }
                    activity.evicted.store(false, Ordering::Relaxed);
                }
                () = tokio::time::sleep_until(close_by.unwrap_or(idle_at)), if close_by.is_some() => {
                    tracing::debug!(%peer, "dropping a connection that did not finish closing");
                    return;
                }
            }
        }
    }
}

/// When a connection last moved bytes, how many of its requests are being answered, and
/// whether the accept loop asked it to make room.
struct Activity {
    started: Instant,
    last_io_ms: AtomicU64,
    in_flight: AtomicUsize,
    /// Set when picked to make room, so the next pick takes another.
    evicted: AtomicBool,
    evict: Notify,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            started: Instant::now(),
            last_io_ms: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            evicted: AtomicBool::new(false),
            evict: Notify::new(),
        }
    }

    /// When bytes last moved (or the connection was accepted).
    fn last_moved(&self) -> Instant {
        self.started + Duration::from_millis(self.last_io_ms.load(Ordering::Relaxed))
    }

    fn touch(&self) {
        let now = self.started.elapsed().as_millis() as u64;
        self.last_io_ms.store(now, Ordering::Relaxed);
    }

    fn idle_deadline(&self, idle_timeout: Duration) -> Instant {
        self.last_moved() + idle_timeout
    }

    fn is_idle(&self, idle_timeout: Duration) -> bool {
        // A slow handler moves no bytes but is not idle; only a connection with nothing to
        // answer may be closed for silence.
        self.in_flight.load(Ordering::Relaxed) == 0
            && Instant::now() >= self.idle_deadline(idle_timeout)
    }
}

/// Counts one request as being answered until dropped.
struct InFlight(Arc<Activity>);

impl InFlight {
    fn enter(activity: &Arc<Activity>) -> InFlight {
        activity.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(Arc::clone(activity))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
        self.0.touch();
    }
}

/// The TLS stream, noting in `activity` every time bytes move.
struct Watched<T> {
    inner: T,
    activity: Arc<Activity>,
}

impl<T: AsyncRead + Unpin> AsyncRead for Watched<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.touch();
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Watched<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Loopback only: all of 127.0.0.0/8 is this host's, and 192.0.2.0/24 (TEST-NET-1,
    /// RFC 5737) never is.
    fn addresses(texts: &[&str]) -> Vec<SocketAddr> {
        texts
            .iter()
            .map(|text| text.parse().expect("a socket address"))
            .collect()
    }

    #[tokio::test]
    async fn every_address_of_a_name_is_bound_on_the_first_ones_port() {
        let listeners = bind_all(&addresses(&["127.0.0.1:0", "127.0.0.2:0"]))
            .await
            .expect("binds");
        let bound: Vec<SocketAddr> = listeners
            .iter()
            .map(|l| l.local_addr().expect("bound"))
            .collect();
        assert_eq!(bound.len(), 2);
        assert_ne!(bound[0].port(), 0);
        assert_eq!(bound[1].port(), bound[0].port(), "{bound:?}");
        assert_eq!(bound[1].ip().to_string(), "127.0.0.2");
    }

    #[tokio::test]
    async fn an_address_this_host_lacks_is_skipped_only_beside_others() {
        let listeners = bind_all(&addresses(&["192.0.2.1:0", "127.0.0.1:0"]))
            .await
            .expect("binds the one it has");
        assert_eq!(listeners.len(), 1);
        let error = bind_all(&addresses(&["192.0.2.1:0"]))
            .await
            .expect_err("nothing to listen on");
        assert!(
            format!("{error:#}").starts_with("binding 192.0.2.1:0: "),
            "{error:#}"
        );
    }

    #[tokio::test]
    async fn a_connection_on_any_listener_is_accepted() {
        let listeners = bind_all(&addresses(&["127.0.0.1:0", "127.0.0.2:0"]))
            .await
            .expect("binds");
        let mut first = 0;
        for listener in listeners.iter().rev() {
            let address = listener.local_addr().expect("bound");
            let _client = TcpStream::connect(address).await.expect("connects");
            let (tcp, _) = accept(&listeners, &mut first).await.expect("accepts");
            assert_eq!(tcp.local_addr().expect("connected"), address);
        }
    }
}
