//! ACME against a real pebble (Debian's `pebble` and `pebble-challtestsrv`, which `.ci/run`
//! installs): the first certificate over TLS-ALPN-01 on the serving port, a restart that
//! serves the cached one without an order, renewal under load with no failed request, pebble
//! gone across a renewal, and a CA that refuses the account, the directory or the order.
//! pebble's own HTTPS uses the development server certificate, trusted as `--acme-ca-root`;
//! pebble keeps its 5% badNonce rejections, with its validation delay off.

use std::net::{SocketAddr, TcpListener};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::Request;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::Value;
use tempfile::TempDir;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::metrics;
use crate::support::{Options, Server, cert, run, tls_config};

const DOMAIN: &str = "pets.test";
/// Long enough for any step on a busy 2-core machine; never a timing assertion.
const DEADLINE: Duration = Duration::from_secs(120);

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port()
}

/// pebble and its DNS server on ports of their own, validating TLS-ALPN-01 on `tls_port`.
struct Pebble {
    dir: TempDir,
    dns: Child,
    pebble: Option<Child>,
    port: u16,
    management: u16,
    dns_port: u16,
}

impl Pebble {
    fn start(tls_port: u16, validity_s: u64, eab_required: bool) -> Pebble {
        let dir = tempfile::tempdir().expect("temp dir");
        let (port, management, dns_port, dns_management) =
            (free_port(), free_port(), free_port(), free_port());
        let config = serde_json::json!({"pebble": {
            "listenAddress": format!("127.0.0.1:{port}"),
            "managementListenAddress": format!("127.0.0.1:{management}"),
            "certificate": cert("dev-server.pem"),
            "privateKey": cert("dev-server.key"),
            "httpPort": free_port(),
            "tlsPort": tls_port,
            "ocspResponderURL": "",
            "externalAccountBindingRequired": eab_required,
            "externalAccountMACKeys": {"kid-1": "zWNDZM6eQGHWpSRTPal5eIUYFTu7EajVIoguysqZ9wG44nMEtx3MUAsUDkMTQ12W"},
            "certificateValidityPeriod": validity_s,
        }});
        std::fs::write(dir.path().join("pebble.json"), config.to_string()).expect("config");
        let log = |name: &str| {
            Stdio::from(std::fs::File::create(dir.path().join(name)).expect("log file"))
        };
        let dns = Command::new("pebble-challtestsrv")
            .args(["-defaultIPv4", "127.0.0.1", "-defaultIPv6", ""])
            .args(["-dns01", &format!("127.0.0.1:{dns_port}")])
            .args(["-http01", "", "-https01", "", "-tlsalpn01", ""])
            .args(["-management", &format!("127.0.0.1:{dns_management}")])
            .stdout(log("challtestsrv.log"))
            .stderr(Stdio::null())
            .spawn()
            .expect("pebble-challtestsrv runs (apt-get install pebble)");
        let mut pebble = Pebble {
            dir,
            dns,
            pebble: None,
            port,
            management,
            dns_port,
        };
        pebble.start_pebble();
        pebble
    }

    /// Starts pebble (again): a new root, no accounts, no orders.
    fn start_pebble(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("pebble.log"))
            .expect("log file");
        let child = Command::new("pebble")
            .arg("-config")
            .arg(self.dir.path().join("pebble.json"))
            .args(["-dnsserver", &format!("127.0.0.1:{}", self.dns_port)])
            .env("PEBBLE_VA_NOSLEEP", "1")
            .stdout(Stdio::from(log.try_clone().expect("log")))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("pebble runs (apt-get install pebble)");
        self.pebble = Some(child);
        let started = Instant::now();
        for port in [self.port, self.management] {
            while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
                assert!(
                    started.elapsed() < DEADLINE,
                    "pebble did not listen:\n{}",
                    self.log()
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }

    fn stop_pebble(&mut self) {
        if let Some(mut child) = self.pebble.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn directory(&self) -> String {
        format!("https://127.0.0.1:{}/dir", self.port)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("pebble.log")).unwrap_or_default()
    }

    /// The root that signs what this pebble run issues (it changes at every start).
    async fn root(&self) -> CertificateDer<'static> {
        let tcp = TcpStream::connect(("127.0.0.1", self.management))
            .await
            .expect("pebble's management port");
        let name = ServerName::try_from("localhost").expect("name");
        let tls = TlsConnector::from(tls_config(b"http/1.1", rustls::DEFAULT_VERSIONS))
            .connect(name, tcp)
            .await
            .expect("pebble's HTTPS");
        let (mut sender, connection) = http1::handshake(TokioIo::new(tls)).await.expect("h1");
        tokio::spawn(connection);
        let request = Request::get("/roots/0")
            .header("host", "localhost")
            .body(Empty::<Bytes>::new())
            .expect("request");
        let response = sender.send_request(request).await.expect("roots/0");
        let pem = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        CertificateDer::from_pem_slice(&pem).expect("a PEM root")
    }
}

impl Drop for Pebble {
    fn drop(&mut self) {
        self.stop_pebble();
        let _ = self.dns.kill();
        let _ = self.dns.wait();
    }
}

/// The server's ACME flags, with its state in `state`.
fn acme_options(pebble: &Pebble, port: u16, state: &Path) -> Options {
    Options {
        listen: Some(SocketAddr::from(([127, 0, 0, 1], port))),
        args: vec![
            "--acme-domain".into(),
            DOMAIN.into(),
            "--acme-directory".into(),
            pebble.directory(),
            "--acme-ca-root".into(),
            cert("dev-ca.pem").display().to_string(),
            "--acme-state-dir".into(),
            state.display().to_string(),
            "--acme-email".into(),
            "ops@pets.test".into(),
        ],
        ..Options::default()
    }
}

/// A datagram socket standing in for systemd's `NOTIFY_SOCKET`, and the directory holding it.
fn notify_socket() -> (std::os::unix::net::UnixDatagram, TempDir) {
    let dir = tempfile::tempdir().expect("temp dir");
    let socket = std::os::unix::net::UnixDatagram::bind(dir.path().join("notify.sock"))
        .expect("bind the notify socket");
    socket.set_read_timeout(Some(DEADLINE)).expect("timeout");
    (socket, dir)
}

fn notify_env(socket: &std::os::unix::net::UnixDatagram) -> (String, String) {
    let address = socket.local_addr().expect("address");
    let path = address.as_pathname().expect("a path");
    ("NOTIFY_SOCKET".into(), path.display().to_string())
}

fn notification(socket: &std::os::unix::net::UnixDatagram) -> String {
    let mut buf = [0u8; 512];
    let n = socket
        .recv(&mut buf)
        .expect("a notification within the deadline");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// Waits, up to `DEADLINE`, until the log holds `needle` `count` times.
fn wait_for(server: &Server, pebble: &Pebble, needle: &str, count: usize) {
    let started = Instant::now();
    while server.logs().matches(needle).count() < count {
        assert!(
            started.elapsed() < DEADLINE,
            "no {count}x {needle:?} in the log:\n{}\npebble:\n{}",
            server.logs(),
            pebble.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn client_config(root: CertificateDer<'static>) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(root).expect("pebble's root");
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    // Full handshakes only: a resumed session shows the certificate it began with.
    config.resumption = rustls::client::Resumption::disabled();
    Arc::new(config)
}

/// One connection to the server as `DOMAIN`, verified against `config`'s root: the leaf it
/// presented and a sender for HTTP/1.1 requests.
async fn connect(
    addr: SocketAddr,
    config: &Arc<rustls::ClientConfig>,
) -> Result<(Vec<u8>, http1::SendRequest<Empty<Bytes>>), String> {
    let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let name = ServerName::try_from(DOMAIN).expect("name");
    let tls = TlsConnector::from(Arc::clone(config))
        .connect(name, tcp)
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    let leaf = tls
        .get_ref()
        .1
        .peer_certificates()
        .ok_or("no certificate")?[0]
        .to_vec();
    let (sender, connection) = http1::handshake(TokioIo::new(tls))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(connection);
    Ok((leaf, sender))
}

async fn get_health(sender: &mut http1::SendRequest<Empty<Bytes>>) -> Result<Value, String> {
    sender.ready().await.map_err(|e| e.to_string())?;
    let request = Request::get("/healthz")
        .header("host", DOMAIN)
        .body(Empty::new())
        .expect("request");
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    if status != 200 {
        return Err(format!("status {status}"));
    }
    serde_json::from_slice(&body).map_err(|e| e.to_string())
}

/// `/healthz` on a new connection, and the leaf certificate it came with.
async fn health(addr: SocketAddr, root: CertificateDer<'static>) -> (Value, Vec<u8>) {
    let (leaf, mut sender) = connect(addr, &client_config(root)).await.expect("connects");
    (get_health(&mut sender).await.expect("healthz"), leaf)
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).expect("stat").permissions().mode() & 0o777
}

fn state_files(state: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(state)
        .expect("the state dir")
        .map(|entry| entry.expect("entry").path())
        .collect();
    files.sort();
    files
}

#[tokio::test(flavor = "multi_thread")]
async fn the_first_certificate_comes_over_tls_alpn_and_a_restart_places_no_order() {
    let port = free_port();
    let pebble = Pebble::start(port, 3600, false);
    let dir = tempfile::tempdir().expect("temp dir");
    let state = dir.path().join("acme");
    let (notify, _notify_dir) = notify_socket();
    let mut options = acme_options(&pebble, port, &state);
    options
        .args
        .extend(["--metrics-listen".into(), "127.0.0.1:0".into()]);
    options.env.push(notify_env(&notify));
    let server = Server::start_with(options);
    // READY only once the certificate serves: a handshake right after it succeeds.
    assert!(notification(&notify).starts_with("READY=1"));
    let (ready_health, _) = health(server.addr, pebble.root().await).await;
    assert_eq!(ready_health["status"], "ok");
    wait_for(&server, &pebble, "ACME certificate in service", 1);
    let page = metrics::scrape(metrics::metrics_address(&server)).await;
    assert_eq!(
        metrics::value(&page, "petstore_acme_certificates_issued_total"),
        1.0,
        "{page}"
    );
    assert_eq!(metrics::value(&page, "petstore_acme_renewal_failing"), 0.0);
    assert!(
        metrics::value(
            &page,
            "petstore_tls_certificate_not_after_timestamp_seconds"
        ) > metrics::value(&page, "process_start_time_seconds"),
        "{page}"
    );
    metrics::promtool_check(&page);
    let logs = server.logs();
    assert!(
        logs.contains("terms_of_service=data:text/plain,Do%20what%20thou%20wilt"),
        "the log names the terms agreed to:\n{logs}"
    );

    let (health_json, leaf) = health(server.addr, pebble.root().await).await;
    assert_eq!(health_json["status"], "ok");
    let details = &health_json["certificate"];
    assert_eq!(details["domains"], serde_json::json!([DOMAIN]));
    assert!(details["not_after"].is_string(), "{health_json}");
    assert!(
        details["not_after_unix"].as_u64().is_some(),
        "{health_json}"
    );
    assert_eq!(details["last_error"], Value::Null);

    assert_eq!(mode(&state), 0o700);
    let files = state_files(&state);
    assert_eq!(files.len(), 2, "an account and a certificate: {files:?}");
    for file in &files {
        assert_eq!(mode(file), 0o600, "{}", file.display());
    }
    let before: Vec<_> = files
        .iter()
        .map(|file| std::fs::read(file).expect("read"))
        .collect();

    let server = server.restart();
    wait_for(
        &server,
        &pebble,
        "serving the cached ACME certificate; no order placed",
        1,
    );
    let logs = server.logs();
    assert!(!logs.contains("placing an ACME order"), "{logs}");
    let (_, leaf_again) = health(server.addr, pebble.root().await).await;
    assert_eq!(leaf_again, leaf, "the same certificate, not a new one");
    let after: Vec<_> = state_files(&state)
        .iter()
        .map(|file| std::fs::read(file).expect("read"))
        .collect();
    assert_eq!(after, before, "the state directory is untouched");
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn renewal_swaps_the_certificate_with_no_failed_request() {
    const REQUESTS: u64 = 5_000;
    let port = free_port();
    // Renewal comes with a third of the lifetime left: about 60 s after the first.
    let pebble = Pebble::start(port, 90, false);
    let dir = tempfile::tempdir().expect("temp dir");
    let server = Server::start_with(acme_options(&pebble, port, &dir.path().join("acme")));
    wait_for(&server, &pebble, "ACME certificate in service", 1);
    let config = client_config(pebble.root().await);
    let (first_leaf, _) = connect(server.addr, &config).await.expect("connects");

    let done = Arc::new(AtomicBool::new(false));
    let (sent, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut clients = Vec::new();
    for _ in 0..4 {
        let (config, done) = (Arc::clone(&config), Arc::clone(&done));
        let (sent, failed) = (Arc::clone(&sent), Arc::clone(&failed));
        let addr = server.addr;
        // New connections all along, so handshakes meet the swap; 20 requests on each.
        clients.push(tokio::spawn(async move {
            let mut leaves = Vec::new();
            while !done.load(Ordering::Relaxed) {
                match connect(addr, &config).await {
                    Ok((leaf, mut sender)) => {
                        if !leaves.contains(&leaf) {
                            leaves.push(leaf);
                        }
                        for _ in 0..20 {
                            sent.fetch_add(1, Ordering::Relaxed);
                            if let Err(e) = get_health(&mut sender).await {
                                eprintln!("request failed: {e}");
                                failed.fetch_add(1, Ordering::Relaxed);
                            }
                            // Leaves the machine's other work some room.
                            tokio::time::sleep(Duration::from_millis(2)).await;
                        }
                    }
                    Err(e) => {
                        eprintln!("connection failed: {e}");
                        sent.fetch_add(1, Ordering::Relaxed);
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            leaves
        }));
    }
    let started = Instant::now();
    while server.logs().matches("ACME certificate in service").count() < 2
        || sent.load(Ordering::Relaxed) < REQUESTS
    {
        assert!(
            started.elapsed() < Duration::from_secs(240),
            "sent {} requests; log:\n{}\npebble:\n{}",
            sent.load(Ordering::Relaxed),
            server.logs(),
            pebble.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // A few more connections after the swap, so they meet the new certificate.
    let renewed_at = sent.load(Ordering::Relaxed);
    while sent.load(Ordering::Relaxed) < renewed_at + 200 {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    done.store(true, Ordering::Relaxed);
    let mut leaves = Vec::new();
    for client in clients {
        for leaf in client.await.expect("client task") {
            if !leaves.contains(&leaf) {
                leaves.push(leaf);
            }
        }
    }
    let (sent, failed) = (sent.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    eprintln!("renewal under load: {sent} requests, {failed} failed");
    assert!(sent >= REQUESTS, "{sent}");
    assert_eq!(failed, 0, "of {sent} requests");
    assert!(leaves.contains(&first_leaf));
    assert!(leaves.len() >= 2, "the clients met the renewed certificate");
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn with_pebble_gone_the_old_certificate_serves_and_renewal_comes_once_it_is_back() {
    let port = free_port();
    // Renewal comes 60 s in; a failure then waits a tenth of the 30 s left, not a minute.
    let mut pebble = Pebble::start(port, 90, false);
    let dir = tempfile::tempdir().expect("temp dir");
    let server = Server::start_with(acme_options(&pebble, port, &dir.path().join("acme")));
    wait_for(&server, &pebble, "ACME certificate in service", 1);
    let old_root = pebble.root().await;
    let (_, first_leaf) = health(server.addr, old_root.clone()).await;
    pebble.stop_pebble();

    wait_for(&server, &pebble, "ACME certificate order failed", 1);
    let (details, leaf) = health(server.addr, old_root).await;
    assert_eq!(leaf, first_leaf, "the old certificate still serves");
    let error = details["certificate"]["last_error"]
        .as_str()
        .expect("an error");
    assert!(!error.is_empty(), "{details}");
    assert!(
        details["certificate"]["next_attempt"].is_string(),
        "{details}"
    );
    let logs = server.logs();
    assert!(logs.contains("retry_in_s="), "{logs}");

    // A new pebble run knows neither our account nor its old root.
    pebble.start_pebble();
    wait_for(&server, &pebble, "ACME certificate in service", 2);
    wait_for(
        &server,
        &pebble,
        "does not know our account; registering again",
        1,
    );
    let (details, leaf) = health(server.addr, pebble.root().await).await;
    assert_ne!(leaf, first_leaf);
    assert_eq!(
        details["certificate"]["last_error"],
        Value::Null,
        "{details}"
    );
    server.stop();
}

/// The server's stderr when it stops by itself before serving.
fn failing_start(pebble: &Pebble, directory: &str, extra: &[&str]) -> String {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("pets.redb");
    let state = dir.path().join("acme");
    let ca = cert("dev-ca.pem");
    let keys = cert("dev-keys.txt");
    let mut args: Vec<&std::ffi::OsStr> = vec![
        "--listen".as_ref(),
        "127.0.0.1:0".as_ref(),
        "--db".as_ref(),
        db.as_os_str(),
        "--api-keys".as_ref(),
        keys.as_os_str(),
        "--acme-domain".as_ref(),
        DOMAIN.as_ref(),
        "--acme-directory".as_ref(),
        directory.as_ref(),
        "--acme-ca-root".as_ref(),
        ca.as_os_str(),
        "--acme-state-dir".as_ref(),
        state.as_os_str(),
    ];
    args.extend(extra.iter().map(|arg| std::ffi::OsStr::new(*arg)));
    let (code, _, stderr) = run(&args);
    assert_eq!(
        code,
        Some(1),
        "stderr:\n{stderr}\npebble:\n{}",
        pebble.log()
    );
    stderr
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refused_account_or_a_wrong_directory_stops_the_start_with_the_reason() {
    let pebble = Pebble::start(free_port(), 3600, true);
    let stderr = failing_start(&pebble, &pebble.directory(), &[]);
    assert!(
        stderr.contains("error: ACME: no certificate")
            && stderr.contains("requires External Account Binding: give --acme-eab-kid"),
        "{stderr}"
    );

    let wrong = format!("https://127.0.0.1:{}/not-a-directory", pebble.port);
    let stderr = failing_start(&pebble, &wrong, &[]);
    assert!(
        stderr.contains(&format!("{wrong} is not an ACME directory (HTTP 404")),
        "{stderr}"
    );

    let dir = tempfile::tempdir().expect("temp dir");
    let hmac = dir.path().join("eab");
    std::fs::write(&hmac, "bm90IHRoZSBrZXk\n").expect("write");
    let hmac = hmac.display().to_string();
    let stderr = failing_start(
        &pebble,
        &pebble.directory(),
        &["--acme-eab-kid", "kid-1", "--acme-eab-hmac-key-file", &hmac],
    );
    assert!(stderr.contains("registering the ACME account"), "{stderr}");
    assert!(
        stderr.contains("unauthorized") || stderr.contains("malformed"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_account_bound_with_eab_gets_its_certificate() {
    let port = free_port();
    let pebble = Pebble::start(port, 3600, true);
    let dir = tempfile::tempdir().expect("temp dir");
    let hmac = dir.path().join("eab");
    std::fs::write(
        &hmac,
        "zWNDZM6eQGHWpSRTPal5eIUYFTu7EajVIoguysqZ9wG44nMEtx3MUAsUDkMTQ12W\n",
    )
    .expect("write");
    let mut options = acme_options(&pebble, port, &dir.path().join("acme"));
    options.args.extend([
        "--acme-eab-kid".into(),
        "kid-1".into(),
        "--acme-eab-hmac-key-file".into(),
        hmac.display().to_string(),
    ]);
    let server = Server::start_with(options);
    wait_for(&server, &pebble, "ACME certificate in service", 1);
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refused_order_is_logged_with_the_cas_reason_and_retried() {
    let port = free_port();
    // pebble validates on a port where nobody listens.
    let pebble = Pebble::start(free_port(), 3600, false);
    let dir = tempfile::tempdir().expect("temp dir");
    let (notify, _notify_dir) = notify_socket();
    let mut options = acme_options(&pebble, port, &dir.path().join("acme"));
    options
        .args
        .extend(["--metrics-listen".into(), "127.0.0.1:0".into()]);
    options.env.push(notify_env(&notify));
    let server = Server::start_with(options);
    wait_for(&server, &pebble, "ACME certificate order failed", 1);
    // Without a certificate, systemd is never told the server is ready.
    notify
        .set_read_timeout(Some(Duration::from_secs(1)))
        .expect("timeout");
    let mut buf = [0u8; 512];
    assert!(
        notify.recv(&mut buf).is_err(),
        "no READY without a certificate: {}",
        String::from_utf8_lossy(&buf)
    );
    let page = metrics::scrape(metrics::metrics_address(&server)).await;
    assert!(metrics::value(&page, "petstore_acme_order_failures_total") >= 1.0);
    assert_eq!(metrics::value(&page, "petstore_acme_renewal_failing"), 1.0);
    assert_eq!(
        metrics::value(&page, "petstore_acme_certificates_issued_total"),
        0.0
    );
    assert!(
        !page.contains("petstore_tls_certificate_not_after"),
        "no certificate yet, no expiry: {page}"
    );
    let logs = server.logs();
    assert!(
        logs.contains("the CA refused the order for pets.test:")
            && logs.contains("tls-alpn-01")
            && logs.contains("retry_in_s=60"),
        "{logs}"
    );
    // Not ready and without a certificate, it still stops cleanly.
    let stopped = server.stop();
    assert!(!stopped.logs.contains("ACME certificate in service"));
}

#[test]
fn exactly_one_way_to_a_certificate() {
    let keys = cert("dev-keys.txt");
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("pets.redb");
    let base = [
        "--db",
        db.to_str().expect("utf-8"),
        "--api-keys",
        keys.to_str().expect("utf-8"),
    ];
    let pem = cert("dev-server.pem");
    let key = cert("dev-server.key");
    let (pem, key) = (pem.to_str().expect("utf-8"), key.to_str().expect("utf-8"));
    for (extra, message) in [
        (
            &[][..],
            "no certificate: give --tls-cert and --tls-key, or --acme-domain NAME",
        ),
        (
            &["--tls-cert", pem, "--tls-key", key, "--acme-domain", DOMAIN][..],
            "--tls-cert/--tls-key and --acme-domain are two ways to the certificate",
        ),
        (&["--tls-cert", pem][..], "--tls-cert needs --tls-key"),
        (
            &["--tls-cert", pem, "--tls-key", key, "--acme-email", "a@b.c"][..],
            "--acme-email: only with --acme-domain",
        ),
        (
            &["--acme-domain", "*.pets.test"][..],
            "a wildcard needs the DNS-01 challenge",
        ),
        (
            &["--acme-domain", DOMAIN, "--db", "postgres://app@db/pets"][..],
            "--acme-state-dir is required with a PostgreSQL --db",
        ),
    ] {
        // A second --db replaces the first.
        let base = if extra.contains(&"--db") {
            &base[2..]
        } else {
            &base[..]
        };
        let args: Vec<&std::ffi::OsStr> =
            base.iter().chain(extra).map(std::ffi::OsStr::new).collect();
        let (code, _, stderr) = run(&args);
        assert_eq!(code, Some(1), "{extra:?}: {stderr}");
        assert!(stderr.contains(message), "{extra:?}: {stderr}");
    }
}
