//! Client connections: TLS client configs that trust only the development CA (one for
//! keep-alive HTTP/1.1, one for HTTP/2, one for full TLS 1.3 handshakes without resumption),
//! TCP + TLS + hyper `conn` handshakes, and the health probe that times a start. It knows no
//! scenarios or counts. Invariant: every connection goes to the address a server reported.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::{http1, http2};
use hyper::header::{HOST, HeaderValue};
use hyper::{Request, Response, Uri};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;
use tokio::time::{Instant, timeout_at};
use tokio_rustls::TlsConnector;

use crate::process::{Server, cert};

/// The `Authorization` value of the development key admitted by `certs/dev-keys.txt`.
pub const BEARER: &str = "Bearer petstore-dev-key-not-for-production";

/// The client side of TLS, one config per way of connecting.
pub struct Tls {
    h1: Arc<rustls::ClientConfig>,
    h2: Arc<rustls::ClientConfig>,
    /// TLS 1.3 only and no resumption: every connection pays the full handshake.
    full_handshake: Arc<rustls::ClientConfig>,
}

impl Tls {
    /// The three configs, each with the ring provider and the development CA as only root.
    pub fn new() -> Tls {
        let h1 = client_config(b"http/1.1", rustls::DEFAULT_VERSIONS);
        let h2 = client_config(b"h2", rustls::DEFAULT_VERSIONS);
        let mut full = client_config(b"http/1.1", &[&rustls::version::TLS13]);
        full.resumption = rustls::client::Resumption::disabled();
        Tls {
            h1: Arc::new(h1),
            h2: Arc::new(h2),
            full_handshake: Arc::new(full),
        }
    }

    /// A keep-alive HTTP/1.1 connection (ALPN `http/1.1`).
    pub async fn http1(&self, addr: SocketAddr) -> std::io::Result<Conn> {
        Ok(Conn::Http1(connect_h1(addr, &self.h1).await?))
    }

    /// An HTTP/1.1 connection after a full TLS 1.3 handshake, never a resumed one.
    pub async fn full_handshake(&self, addr: SocketAddr) -> std::io::Result<Conn> {
        Ok(Conn::Http1(connect_h1(addr, &self.full_handshake).await?))
    }

    /// A bare TLS connection (ALPN `http/1.1`) for a client that speaks HTTP/1.1 itself: an
    /// event stream, read without hyper's body channel between the socket and the parser.
    pub async fn raw_http1(
        &self,
        addr: SocketAddr,
    ) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
        raw_tls(addr, &self.h1).await
    }

    /// An HTTP/2 connection (ALPN `h2`) whose sender can be cloned, one clone per stream.
    pub async fn http2(
        &self,
        addr: SocketAddr,
    ) -> std::io::Result<http2::SendRequest<Full<Bytes>>> {
        let io = tls_stream(addr, &self.h2).await?;
        let (sender, connection) = http2::handshake(TokioExecutor::new(), io)
            .await
            .map_err(std::io::Error::other)?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(sender)
    }
}

fn client_config(
    alpn: &[u8],
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> rustls::ClientConfig {
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_file_iter(cert("dev-ca.pem")).expect("certs/dev-ca.pem") {
        roots
            .add(ca.expect("the dev CA parses"))
            .expect("the dev CA is a valid root");
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_protocol_versions(versions)
    .expect("the ring provider supports these versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    config
}

/// A connection a client sends on.
pub enum Conn {
    Http1(http1::SendRequest<Full<Bytes>>),
    Http2(http2::SendRequest<Full<Bytes>>),
}

impl Conn {
    /// Waits until the connection can take a request, then sends it.
    pub async fn send(
        &mut self,
        request: Request<Full<Bytes>>,
    ) -> hyper::Result<Response<Incoming>> {
        match self {
            Conn::Http1(sender) => {
                sender.ready().await?;
                sender.send_request(request).await
            }
            Conn::Http2(sender) => {
                sender.ready().await?;
                sender.send_request(request).await
            }
        }
    }
}

async fn tls_stream(
    addr: SocketAddr,
    config: &Arc<rustls::ClientConfig>,
) -> std::io::Result<TokioIo<tokio_rustls::client::TlsStream<TcpStream>>> {
    Ok(TokioIo::new(raw_tls(addr, config).await?))
}

async fn raw_tls(
    addr: SocketAddr,
    config: &Arc<rustls::ClientConfig>,
) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    let name = ServerName::try_from("localhost").expect("a valid server name");
    TlsConnector::from(Arc::clone(config))
        .connect(name, tcp)
        .await
}

async fn connect_h1(
    addr: SocketAddr,
    config: &Arc<rustls::ClientConfig>,
) -> std::io::Result<http1::SendRequest<Full<Bytes>>> {
    let io = tls_stream(addr, config).await?;
    let (sender, connection) = http1::handshake(io).await.map_err(std::io::Error::other)?;
    // It ends by itself when the sender is dropped or the server closes.
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(sender)
}

/// Polls `GET /healthz` (no key) until it answers 200; returns the time since the server's
/// process was spawned. `None` if it does not answer within `limit`.
pub async fn first_answer(server: &Server, tls: &Tls, limit: Duration) -> Option<Duration> {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        let answered = timeout_at(deadline, async {
            let mut sender = connect_h1(server.addr, &tls.h1).await.ok()?;
            let mut request = Request::new(Full::new(Bytes::new()));
            *request.uri_mut() = Uri::from_static("/healthz");
            let host = HeaderValue::try_from(format!("localhost:{}", server.addr.port()))
                .expect("host:port is a valid header");
            request.headers_mut().insert(HOST, host);
            sender.ready().await.ok()?;
            let response = sender.send_request(request).await.ok()?;
            let ok = response.status().is_success();
            response.into_body().collect().await.ok()?;
            ok.then(|| server.spawned.elapsed())
        })
        .await;
        if let Ok(Some(elapsed)) = answered {
            return Some(elapsed);
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    None
}
