//! Connections: the accept loop, one task per connection that runs the TLS handshake under a
//! deadline and then serves HTTP/1.1 or HTTP/2 (hyper-util's auto builder), and the graceful
//! drain on stop. It knows no routes, pets or keys: each request goes to `App`.
//! Invariant: the accept loop never waits on a client; every per-client wait is bounded.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use rustls::ServerConfig;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;

use crate::service::App;
use crate::tls::HANDSHAKE_TIMEOUT;

/// A client must send its whole request head within this time (slowloris).
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// After a failed accept (e.g. out of file descriptors), wait this long before the next.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Serves until `stop` resolves, then stops accepting and gives open connections up to
/// `drain` to finish their requests.
pub async fn serve(
    listener: TcpListener,
    tls: Arc<ServerConfig>,
    app: App,
    stop: impl Future<Output = ()>,
    drain: Duration,
) {
    let acceptor = TlsAcceptor::from(tls);
    let mut http = auto::Builder::new(TokioExecutor::new());
    http.http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    http.http2().timer(TokioTimer::new());
    let graceful = GracefulShutdown::new();

    tokio::pin!(stop);
    loop {
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
            () = &mut stop => break,
        };
        let task = Connection {
            acceptor: acceptor.clone(),
            http: http.clone(),
            app: app.clone(),
            watcher: graceful.watcher(),
        };
        tokio::spawn(task.run(tcp, peer));
    }

    drop(listener);
    tokio::select! {
        () = graceful.shutdown() => tracing::info!("all connections closed"),
        () = tokio::time::sleep(drain) => tracing::warn!(timeout_s = drain.as_secs(), "drain timed out; closing the remaining connections"),
    }
}

/// What one connection's task needs, moved into it.
struct Connection {
    acceptor: TlsAcceptor,
    http: auto::Builder<TokioExecutor>,
    app: App,
    /// Lets the drain on stop see this connection and ask it to finish.
    watcher: hyper_util::server::graceful::Watcher,
}

impl Connection {
    async fn run(self, tcp: TcpStream, peer: SocketAddr) {
        // Small request/response exchanges: sending at once beats Nagle's batching.
        let _ = tcp.set_nodelay(true);
        let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, self.acceptor.accept(tcp)).await {
            Ok(Ok(tls)) => tls,
            // Scanners and plain-HTTP clients land here; not worth more than debug.
            Ok(Err(e)) => return tracing::debug!(%peer, error = %e, "TLS handshake failed"),
            Err(_) => return tracing::debug!(%peer, "TLS handshake timed out"),
        };
        let app = self.app;
        let service = service_fn(move |request| {
            let app = app.clone();
            async move { Ok::<_, std::convert::Infallible>(app.handle(request, peer).await) }
        });
        let connection = self
            .http
            .serve_connection(TokioIo::new(tls), service)
            .into_owned();
        if let Err(e) = self.watcher.watch(connection).await {
            tracing::debug!(%peer, error = %e, "connection ended with an error");
        }
    }
}
