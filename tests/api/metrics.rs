//! The metrics page (`--metrics-listen`): after requests of every kind (ok, 401, 404, 405, a
//! create), bad TLS handshakes and a snapshot, a scrape over plain HTTP shows each counter
//! moved by what was done, in text that `promtool check metrics` finds nothing wrong with;
//! OpenMetrics when asked for; 404 and 405 off `/metrics`; and no listener without the flag.

use std::net::SocketAddr;
use std::process::{Command, Stdio};

use bytes::Bytes;
use hyper::Method;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::{Options, Server};

/// The development certificate's notAfter (`openssl x509 -enddate`: Nov 19 07:22:50 2036 GMT).
const DEV_CERT_NOT_AFTER: f64 = 2_110_692_170.0;

fn start(args: &[&str]) -> (Server, SocketAddr) {
    let mut all = vec!["--metrics-listen".to_owned(), "127.0.0.1:0".to_owned()];
    all.extend(args.iter().map(|arg| (*arg).to_owned()));
    let server = Server::start_with(Options {
        args: all,
        ..Options::default()
    });
    let address = metrics_address(&server);
    (server, address)
}

/// Where a server started with `--metrics-listen 127.0.0.1:0` serves its page, from its log.
pub(crate) fn metrics_address(server: &Server) -> SocketAddr {
    server.wait_for_log("serving metrics on", 1);
    let logs = server.logs();
    let line = logs
        .lines()
        .find(|line| line.contains("serving metrics on"))
        .expect("the metrics line");
    line.split_once("address=")
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .expect("an address")
        .parse()
        .expect("a socket address")
}

/// One plain HTTP/1.1 exchange; returns the status line, the head and the body.
async fn http(
    address: SocketAddr,
    method: &str,
    path: &str,
    accept: &str,
) -> (u16, String, String) {
    let mut tcp = TcpStream::connect(address).await.expect("connects");
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nAccept: {accept}\r\nConnection: close\r\n\r\n"
    );
    tcp.write_all(request.as_bytes()).await.expect("sends");
    let mut answer = String::new();
    tcp.read_to_string(&mut answer).await.expect("reads");
    let (head, body) = answer.split_once("\r\n\r\n").expect("a head");
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|status| status.parse().ok())
        .expect("a status");
    (status, head.to_ascii_lowercase(), body.to_owned())
}

pub(crate) async fn scrape(address: SocketAddr) -> String {
    let (status, head, body) = http(address, "GET", "/metrics", "*/*").await;
    assert_eq!(status, 200, "{head}");
    assert!(
        head.contains("content-type: text/plain; version=0.0.4; charset=utf-8"),
        "{head}"
    );
    body
}

/// The value of one series, written exactly as on the page (`name{labels}`); 0 when absent,
/// as Prometheus reads a counter that has not appeared yet.
pub(crate) fn value(page: &str, series: &str) -> f64 {
    page.lines()
        .filter(|line| !line.starts_with('#'))
        .find_map(|line| {
            let (name, value) = line.rsplit_once(' ')?;
            (name == series).then(|| value.parse().expect("a number"))
        })
        .unwrap_or(0.0)
}

fn requests(method: &str, route: &str, status: u16) -> String {
    format!(
        "http_server_requests_total{{http_request_method=\"{method}\",http_route=\"{route}\",http_response_status_code=\"{status}\"}}"
    )
}

/// `promtool check metrics` on the page: it must be installed (Debian's `prometheus`), and
/// find nothing.
pub(crate) fn promtool_check(page: &str) {
    use std::io::Write;
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool runs (apt-get install prometheus)");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(page.as_bytes())
        .expect("page written");
    let output = child.wait_with_output().expect("promtool ends");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success() && said.trim().is_empty(),
        "promtool check metrics: {said}\n{page}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_scrape_counts_what_was_done_and_promtool_finds_nothing() {
    let backups = tempfile::tempdir().expect("temp dir");
    let backup_dir = backups.path().join("snapshots");
    let (server, metrics) = start(&["--backup-dir", backup_dir.to_str().expect("utf-8")]);

    let first = scrape(metrics).await;
    assert_eq!(value(&first, "petstore_snapshots_total"), 0.0, "{first}");
    assert_eq!(
        value(&first, "petstore_snapshot_last_success_timestamp_seconds"),
        0.0
    );

    let mut client = server.h1().await;
    for _ in 0..3 {
        assert_eq!(client.get("/v1/pets").await.status, 200);
    }
    let created = client
        .post_json(
            "/v1/pets",
            r#"{"name":"Rex","categoryId":1,"status":"available"}"#,
        )
        .await;
    assert_eq!(created.status, 201);
    let unnamed = client
        .post_json("/v1/pets", r#"{"name":"Tom","categoryId":2}"#)
        .await;
    assert_eq!(unnamed.status, 201, "{:?}", unnamed.body);
    assert_eq!(client.get("/v1/pets/1").await.status, 200);
    assert_eq!(client.get("/v1/pets/999").await.status, 404);
    assert_eq!(client.get("/v1/nothing/here").await.status, 404);
    let anonymous = client.request(Method::GET, "/v1/pets");
    assert_eq!(client.send(anonymous, Bytes::new()).await.status, 401);
    let put = client.authed(Method::PUT, "/v1/pets");
    assert_eq!(client.send(put, Bytes::new()).await.status, 405);

    // Plain HTTP on the TLS port, and a client that goes before finishing its handshake.
    let mut plain = TcpStream::connect(server.addr).await.expect("connects");
    plain
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("sends");
    let _ = plain.read(&mut [0; 64]).await;
    let mut gone = TcpStream::connect(server.addr).await.expect("connects");
    gone.write_all(&[0x16, 0x03, 0x01]).await.expect("sends");
    drop(gone);

    server.signal("USR1");
    tokio::task::block_in_place(|| server.wait_for_log("snapshot taken", 1));
    // The two failed handshakes end on the server's time, and a pet count is reused for 20
    // times as long as it took (`metrics::COUNT_SPACING`): the first one, of the empty store,
    // may still be served. Scrape until both handshakes and both pets are counted.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let page = loop {
        let page = scrape(metrics).await;
        let failures = ["protocol", "eof"].map(|reason| {
            value(
                &page,
                &format!("petstore_tls_handshake_failures_total{{reason=\"{reason}\"}}"),
            )
        });
        let pets = ["available", "pending", "sold", "none"]
            .map(|status| value(&page, &format!("petstore_pets{{status=\"{status}\"}}")));
        let counted = failures.iter().sum::<f64>() >= 2.0 && pets.iter().sum::<f64>() >= 2.0;
        if counted || std::time::Instant::now() > deadline {
            break page;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(
        value(&page, &requests("GET", "/v1/pets", 200)),
        3.0,
        "{page}"
    );
    assert_eq!(value(&page, &requests("POST", "/v1/pets", 201)), 2.0);
    assert_eq!(value(&page, &requests("GET", "/v1/pets/{petId}", 200)), 1.0);
    assert_eq!(value(&page, &requests("GET", "/v1/pets/{petId}", 404)), 1.0);
    // Never the raw path: an id or a path no route has is not a label value.
    assert_eq!(value(&page, &requests("GET", "unmatched", 404)), 1.0);
    assert_eq!(value(&page, &requests("GET", "/v1/pets", 401)), 1.0);
    assert_eq!(value(&page, &requests("_OTHER", "/v1/pets", 405)), 1.0);
    // Only the series' names and labels: a sample's value may well hold the digits 999.
    let series: Vec<&str> = page
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.rsplit_once(' ').map(|(series, _)| series))
        .collect();
    assert!(
        series
            .iter()
            .all(|series| !series.contains("999") && !series.contains("/v1/nothing")),
        "{page}"
    );
    let list_durations = "http_server_request_duration_seconds_count{http_request_method=\"GET\",http_route=\"/v1/pets\",http_response_status_code=\"200\"}";
    assert_eq!(value(&page, list_durations), 3.0);
    let list_inf = "http_server_request_duration_seconds_bucket{http_request_method=\"GET\",http_route=\"/v1/pets\",http_response_status_code=\"200\",le=\"+Inf\"}";
    assert_eq!(value(&page, list_inf), 3.0);

    assert_eq!(value(&page, "petstore_pets{status=\"available\"}"), 1.0);
    assert_eq!(value(&page, "petstore_pets{status=\"none\"}"), 1.0);
    assert_eq!(value(&page, "petstore_pets{status=\"sold\"}"), 0.0);
    assert!(value(&page, "petstore_store_commit_duration_seconds_count") >= 1.0);
    assert_eq!(value(&page, "petstore_store_commit_writes_sum"), 2.0);

    assert_eq!(
        value(
            &page,
            "petstore_tls_handshake_failures_total{reason=\"protocol\"}"
        ),
        1.0
    );
    assert_eq!(
        value(
            &page,
            "petstore_tls_handshake_failures_total{reason=\"eof\"}"
        ),
        1.0
    );
    // Our client is still connected; the two bad ones and it were accepted.
    assert!(value(&page, "petstore_connections_open") >= 1.0);
    assert!(value(&page, "petstore_connections_accepted_total") >= 3.0);

    assert_eq!(value(&page, "petstore_snapshots_total"), 1.0);
    assert_eq!(value(&page, "petstore_snapshot_failures_total"), 0.0);
    assert!(value(&page, "petstore_snapshot_last_success_timestamp_seconds") > 1.6e9);
    assert_eq!(
        value(
            &page,
            "petstore_tls_certificate_not_after_timestamp_seconds"
        ),
        DEV_CERT_NOT_AFTER
    );
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(
        value(
            &page,
            &format!("petstore_build_info{{version=\"{version}\"}}")
        ),
        1.0
    );
    assert!(value(&page, "process_start_time_seconds") > 1.6e9);

    promtool_check(&page);
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn openmetrics_when_asked_and_only_get_at_metrics() {
    let (server, metrics) = start(&[]);
    let (status, head, body) = http(
        metrics,
        "GET",
        "/metrics",
        "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5",
    )
    .await;
    assert_eq!(status, 200);
    assert!(
        head.contains("content-type: application/openmetrics-text; version=1.0.0; charset=utf-8"),
        "{head}"
    );
    assert!(body.ends_with("# EOF\n"), "{body}");
    // Snapshots are not taken without --backup-dir: no series to alarm on.
    assert!(!body.contains("petstore_snapshot"), "{body}");

    assert_eq!(http(metrics, "GET", "/", "*/*").await.0, 404);
    assert_eq!(http(metrics, "GET", "/metrics/x", "*/*").await.0, 404);
    let (status, head, _) = http(metrics, "POST", "/metrics", "*/*").await;
    assert_eq!(status, 405);
    assert!(head.contains("allow: get, head"), "{head}");
    let (status, _, body) = http(metrics, "HEAD", "/metrics", "*/*").await;
    assert_eq!((status, body.as_str()), (200, ""));
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn without_the_flag_nothing_listens_for_metrics() {
    let server = Server::start();
    let logs = server.stop().logs;
    assert!(!logs.contains("serving metrics on"), "{logs}");
}
