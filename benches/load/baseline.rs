//! The baseline server: petstore's crates and connection setup (rustls with ring, TLS 1.2 and
//! 1.3, ALPN `h2` + `http/1.1`, session tickets, the ECDSA development certificate; tokio's
//! multi-thread runtime, one task per connection with the handshake in it, hyper-util's auto
//! builder) and nothing else: no auth, no store, no log. Every request, any method or path, gets
//! 200 with the constant array of 20 pets petstore would list. It runs in its own process.

use std::io::Write as _;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use rustls::ServerConfig;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::process::dev_server_tls;

/// petstore's own bounds, so that both servers keep the same timers per connection.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The body petstore sends for `GET /v1/pets?limit=20` on a store of pets like these: named
/// as the fill names its first pets.
pub fn pets_array() -> Bytes {
    let pets: Vec<String> = (1..=20)
        .map(|id| {
            let name = serde_json::to_string(&crate::names::name(id - 1)).expect("a string");
            format!(r#"{{"id":{id},"name":{name},"categoryId":1,"status":"available"}}"#)
        })
        .collect();
    Bytes::from(format!("[{}]", pets.join(",")))
}

/// Serves on 127.0.0.1:0 until SIGTERM, after printing the bound address on stdout.
pub fn run() {
    // Same runtime as petstore: multi-thread, its worker count taken from the CPU mask.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("the baseline's runtime starts");
    runtime.block_on(serve());
}

async fn serve() {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("the baseline binds a loopback port");
    let address = listener
        .local_addr()
        .expect("a bound socket has an address");
    // The benchmark waits for this one line; nothing else goes to stdout.
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{address}").expect("the benchmark reads the baseline's stdout");
    stdout.flush().expect("stdout flushes");
    drop(stdout);

    let acceptor = TlsAcceptor::from(tls_config());
    let mut http = auto::Builder::new(TokioExecutor::new());
    http.http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    http.http2().timer(TokioTimer::new());
    let body = pets_array();

    let mut stop = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("a SIGTERM handler installs");
    loop {
        let (tcp, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                // Out of descriptors, say: the next accept may work.
                Err(_) => continue,
            },
            _ = stop.recv() => return,
        };
        let acceptor = acceptor.clone();
        let http = http.clone();
        let body = body.clone();
        tokio::spawn(async move {
            let _ = tcp.set_nodelay(true);
            let Ok(Ok(tls)) = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await
            else {
                return;
            };
            let service = service_fn(move |request: Request<Incoming>| {
                let body = body.clone();
                async move {
                    // Read what the client sent, as petstore does for a create, so the
                    // connection stays reusable and both servers do that work.
                    let _ = request.into_body().collect().await;
                    let mut response = Response::new(Full::new(body));
                    response
                        .headers_mut()
                        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
                    Ok::<_, std::convert::Infallible>(response)
                }
            });
            let _ = http
                .serve_connection(TokioIo::new(tls), service)
                .into_owned()
                .await;
        });
    }
}

/// petstore's TLS setup (`src/tls.rs`), minus certificate reloading.
fn tls_config() -> Arc<ServerConfig> {
    let mut config = dev_server_tls();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    config.ticketer = rustls::crypto::ring::Ticketer::new().expect("a ticketer from the OS RNG");
    Arc::new(config)
}
