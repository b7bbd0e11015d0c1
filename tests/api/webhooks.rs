//! Webhooks (issue "Tell other systems"): the event feed POSTed to HTTPS receivers, one event
//! at a time in feed order, signed as the Standard Webhooks specification says. A real
//! receiver, `tests/webhooks/receiver.py` (Python's http.server over TLS with the development
//! certificate), verifies each delivery with the specification's own Python library and logs
//! it; the tests read that log with deadlines. Covered: bodies equal to the feed's objects,
//! `--types`, a receiver down then failing then redirecting, `Retry-After` (seconds and an
//! HTTP-date), a receiver closing its idle connection, 410 and `webhooks enable`, the retries
//! running out, a disabled endpoint across a restart, the lag metric, a SIGKILL with a
//! delivery in flight, endpoints added and removed by a reload, a secret rotated, private
//! addresses refused, where a new endpoint starts, and two instances on one PostgreSQL
//! database, one of them killed.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{OnceLock, mpsc};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Deserialize;
use serde_json::{Value, json};
use tempfile::TempDir;

use crate::metrics::{metrics_address, scrape, value};
use crate::orders::{acted, available, cluster, id, on_postgres, placed};
use crate::support::{Client, Options, Server, cert, members_of_each, poll_until, run};

/// The longest a test waits for a delivery that should come: a few polls of the feed and a
/// few tries, with margin for a machine shared with other builds.
const DELIVERY_WAIT: Duration = Duration::from_secs(20);
/// How long the receiver takes to print its port.
const RECEIVER_START: Duration = Duration::from_secs(10);
/// Retries 200 ms apart, twenty of them (the most the flag takes): long enough for a test to
/// walk a receiver through several failures before the endpoint would be disabled.
const PATIENT_SCHEDULE: &str = "200ms,200ms,200ms,200ms,200ms,200ms,200ms,200ms,200ms,200ms,\
                                200ms,200ms,200ms,200ms,200ms,200ms,200ms,200ms,200ms,200ms";
/// What the server logs when it refuses a receiver's address.
const PRIVATE_REFUSAL: &str = "loopback, private or link-local address";
const DISABLED: &str = "petstore_webhook_endpoints_disabled";
const DELIVERED: &str = "petstore_webhook_deliveries_total{outcome=\"delivered\"}";
const FAILED: &str = "petstore_webhook_deliveries_total{outcome=\"failed\"}";
const GONE: &str = "petstore_webhook_deliveries_total{outcome=\"gone\"}";

// ------------------------------------------------------------------------------------------
// The receiver.

/// One POST as the receiver logged it (see tests/webhooks/receiver.py).
#[derive(Clone, Debug, Deserialize)]
struct Delivery {
    path: String,
    id: Option<String>,
    timestamp: Option<String>,
    signature: Option<String>,
    content_type: Option<String>,
    body: String,
    /// Some secret the receiver holds verifies the delivery (the library's `verify`).
    verified: bool,
    /// For each signature of `webhook-signature`, the index of the secret that verifies it
    /// alone.
    verified_with: Vec<Option<usize>>,
    /// What the receiver answered (or, for a try cut short, was going to).
    status: u16,
    /// When the receiver read the request, Unix seconds.
    at: f64,
}

impl Delivery {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("a delivery's body is not JSON ({e}): {}", self.body))
    }

    fn id(&self) -> &str {
        self.id
            .as_deref()
            .unwrap_or_else(|| panic!("a delivery without webhook-id: {self:?}"))
    }

    fn is_2xx(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

fn python_deps() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("target/python-deps")
}

/// Fails the test, saying what to do, when the Standard Webhooks library is not installed.
fn require_library() {
    static FOUND: OnceLock<bool> = OnceLock::new();
    let found = *FOUND.get_or_init(|| {
        Command::new("python3")
            .args(["-c", "import standardwebhooks"])
            .env("PYTHONPATH", python_deps())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    });
    assert!(
        found,
        "python3 cannot import standardwebhooks from {}: run `bash tests/run`, which installs \
         it there (python3 -m pip install --target target/python-deps standardwebhooks==1.1.0)",
        python_deps().display()
    );
}

/// A running `receiver.py`, killed on drop, with its log and plan in a directory of its own.
struct Receiver {
    child: Option<Child>,
    port: u16,
    dir: TempDir,
    /// The secrets it verifies with, oldest first (written into the plan).
    secrets: Vec<String>,
    /// What it answers, besides the secrets.
    plan: Value,
}

impl Receiver {
    fn start() -> Receiver {
        require_library();
        let dir = tempfile::tempdir().expect("temp dir");
        let (child, port) = spawn_receiver(dir.path(), 0);
        Receiver {
            child: Some(child),
            port,
            dir,
            secrets: Vec::new(),
            plan: json!({}),
        }
    }

    fn url(&self) -> String {
        format!("https://127.0.0.1:{}/hook", self.port)
    }

    /// Sets what it answers from the next request on: `status`, `retry_after`,
    /// `retry_after_date`, `location`, `sleep` (see receiver.py).
    fn answer(&mut self, plan: Value) {
        self.plan = plan;
        self.write_plan();
    }

    fn set_secrets(&mut self, secrets: &[&str]) {
        self.secrets = secrets.iter().map(|s| (*s).to_owned()).collect();
        self.write_plan();
    }

    /// Replaces the plan file whole, so that a request reads the old plan or the new.
    fn write_plan(&self) {
        let mut plan = self.plan.clone();
        plan["secrets"] = json!(self.secrets);
        let path = self.dir.path().join("plan");
        let new = self.dir.path().join("plan.new");
        std::fs::write(&new, plan.to_string()).expect("write the plan");
        std::fs::rename(&new, &path).expect("replace the plan");
    }

    /// Everything it has logged, in the order the requests came.
    fn deliveries(&self) -> Vec<Delivery> {
        let text = std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default();
        // A line is whole once its newline is written.
        let whole = text.rfind('\n').map_or("", |end| &text[..end]);
        whole
            .lines()
            .map(|line| {
                serde_json::from_str(line)
                    .unwrap_or_else(|e| panic!("a log line that is not a delivery ({e}): {line}"))
            })
            .collect()
    }

    /// Waits until `check` holds of the log; returns the log then. Past the deadline, fails
    /// with what the receiver logged and what `server` said about webhooks.
    async fn wait_for(
        &self,
        server: &Server,
        what: &str,
        check: impl Fn(&[Delivery]) -> bool,
    ) -> Vec<Delivery> {
        self.wait_within(server, DELIVERY_WAIT, what, check).await
    }

    /// `wait_for`, within `within`.
    async fn wait_within(
        &self,
        server: &Server,
        within: Duration,
        what: &str,
        check: impl Fn(&[Delivery]) -> bool,
    ) -> Vec<Delivery> {
        let deadline = Instant::now() + within;
        loop {
            let deliveries = self.deliveries();
            if check(&deliveries) {
                return deliveries;
            }
            if Instant::now() >= deadline {
                let logged: Vec<String> = deliveries
                    .iter()
                    .map(|d| format!("{} {:?} {}", d.status, d.id, d.path))
                    .collect();
                let said: Vec<String> = server
                    .logs()
                    .lines()
                    .filter(|line| line.contains("webhook") || line.contains("ERROR"))
                    .map(str::to_owned)
                    .collect();
                panic!(
                    "not within {within:?}: {what}\nthe receiver on port {} logged \
                     {logged:#?}\nits stderr: {}\nthe server's webhook lines:\n{}",
                    self.port,
                    std::fs::read_to_string(self.dir.path().join("stderr")).unwrap_or_default(),
                    said.join("\n")
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until the log holds the 2xx delivery of each of `events` (in any order); returns
    /// the whole log then.
    async fn wait_for_events(&self, server: &Server, events: &[Value]) -> Vec<Delivery> {
        let wanted: Vec<&str> = events.iter().map(cursor).collect();
        self.wait_for(server, &format!("deliveries of {wanted:?}"), |deliveries| {
            wanted.iter().all(|cursor| {
                deliveries
                    .iter()
                    .any(|d| d.is_2xx() && d.id.as_deref() == Some(cursor))
            })
        })
        .await
    }

    /// Waits until its standard error holds `needle` at least `count` times.
    async fn wait_for_stderr(&self, needle: &str, count: usize) {
        let path = self.dir.path().join("stderr");
        let what = format!("{count}x {needle:?} on the receiver's stderr");
        poll_until(DELIVERY_WAIT, &what, async || {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            (text.matches(needle).count() >= count).then_some(())
        })
        .await;
    }

    /// Kills it: its port refuses connections until `restart`.
    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port, with the same log and plan.
    fn restart(&mut self) {
        self.stop();
        let (child, port) = spawn_receiver(self.dir.path(), self.port);
        assert_eq!(port, self.port, "the receiver came back on its port");
        self.child = Some(child);
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Starts receiver.py on `port` (0: any) with its files in `dir`; returns it and its port.
fn spawn_receiver(dir: &Path, port: u16) -> (Child, u16) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/webhooks/receiver.py");
    let errors = std::fs::File::options()
        .create(true)
        .append(true)
        .open(dir.join("stderr"))
        .expect("the receiver's stderr file");
    let mut child = Command::new("python3")
        .arg(&script)
        .arg("--cert")
        .arg(cert("dev-server.pem"))
        .arg("--key")
        .arg(cert("dev-server.key"))
        .arg("--log")
        .arg(dir.join("log"))
        .arg("--plan")
        .arg(dir.join("plan"))
        .arg("--port")
        .arg(port.to_string())
        .env("PYTHONPATH", python_deps())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(errors)
        .spawn()
        .expect("python3 runs receiver.py");
    let stdout = child.stdout.take().expect("stdout is piped");
    let (sender, first_line) = mpsc::channel();
    thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = sender.send(line);
    });
    let port = first_line
        .recv_timeout(RECEIVER_START)
        .ok()
        .and_then(|line| line.trim().parse().ok());
    let Some(port) = port else {
        let _ = child.kill();
        let _ = child.wait();
        panic!(
            "receiver.py did not print its port within {RECEIVER_START:?}: {}",
            std::fs::read_to_string(dir.join("stderr")).unwrap_or_default()
        );
    };
    (child, port)
}

// ------------------------------------------------------------------------------------------
// The endpoints file, the server and the feed.

/// An endpoints file in a directory of its own, edited with `petstore webhooks`.
struct Endpoints {
    _dir: TempDir,
    file: PathBuf,
}

impl Endpoints {
    fn new() -> Endpoints {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("webhooks");
        Endpoints { _dir: dir, file }
    }

    /// `petstore webhooks --webhooks FILE ARGS…`, which must succeed; returns its stdout.
    fn cli(&self, args: &[&str]) -> String {
        let mut all: Vec<&OsStr> = vec![
            "webhooks".as_ref(),
            "--webhooks".as_ref(),
            self.file.as_os_str(),
        ];
        all.extend(args.iter().map(OsStr::new));
        let (code, stdout, stderr) = run(&all);
        assert_eq!(code, Some(0), "petstore webhooks {args:?}: {stderr}");
        stdout
    }

    /// Adds an endpoint for `receiver` (with `extra` flags) and gives the receiver its secret;
    /// returns the endpoint's id.
    fn add(&self, receiver: &mut Receiver, extra: &[&str]) -> String {
        let (secret, id) = self.add_url(&receiver.url(), extra);
        receiver.set_secrets(&[&secret]);
        id
    }

    /// Adds an endpoint for `url` (with `extra` flags); returns its secret and its id.
    fn add_url(&self, url: &str, extra: &[&str]) -> (String, String) {
        let mut args = vec!["add", url];
        args.extend(extra);
        let out = self.cli(&args);
        let mut lines = out.lines();
        let secret = lines.next().unwrap_or_default();
        assert!(
            secret.starts_with("whsec_"),
            "the secret alone on the first line: {out}"
        );
        let id = lines
            .next()
            .and_then(|line| line.strip_prefix("id "))
            .unwrap_or_else(|| panic!("`id ep_…` on the second line: {out}"));
        assert!(id.starts_with("ep_"), "{out}");
        (secret.to_owned(), id.to_owned())
    }

    /// A server's options with this file, the development CA for receivers, private addresses
    /// allowed and a metrics listener, plus `extra`.
    fn options(&self, extra: &[&str]) -> Options {
        let mut options = self.options_refusing_private(extra);
        options.args.push("--webhooks-allow-private".to_owned());
        options
    }

    /// `options` without `--webhooks-allow-private`.
    fn options_refusing_private(&self, extra: &[&str]) -> Options {
        let mut args = vec![
            "--webhooks".to_owned(),
            self.file.display().to_string(),
            "--webhooks-ca".to_owned(),
            cert("dev-ca.pem").display().to_string(),
            "--metrics-listen".to_owned(),
            "127.0.0.1:0".to_owned(),
        ];
        args.extend(extra.iter().map(|arg| (*arg).to_owned()));
        Options {
            args,
            ..Options::default()
        }
    }
}

/// Every event the feed keeps, as `GET /v1/events` lists them, each with its member names in
/// the order sent.
async fn feed_with_members(client: &mut Client) -> Vec<(Value, Vec<String>)> {
    let mut events = Vec::new();
    let mut path = "/v1/events?limit=1000".to_owned();
    loop {
        let reply = client.get(&path).await;
        assert_eq!(reply.status, 200, "{path}: {:?}", reply.body);
        let Value::Array(page) = reply.json() else {
            panic!("{path}: not an array: {:?}", reply.body)
        };
        if page.is_empty() {
            return events;
        }
        events.extend(page.into_iter().zip(members_of_each(&reply.body)));
        path = reply.next_link().expect("an events page has a next link");
    }
}

async fn feed(client: &mut Client) -> Vec<Value> {
    feed_with_members(client)
        .await
        .into_iter()
        .map(|(event, _)| event)
        .collect()
}

fn cursor(event: &Value) -> &str {
    event["cursor"]
        .as_str()
        .unwrap_or_else(|| panic!("no cursor: {event}"))
}

fn cursors(events: &[Value]) -> Vec<String> {
    events.iter().map(|e| cursor(e).to_owned()).collect()
}

/// The events of the receiver's 2xx answers, in the order they came.
fn delivered(deliveries: &[Delivery]) -> Vec<String> {
    deliveries
        .iter()
        .filter(|d| d.is_2xx())
        .map(|d| d.id().to_owned())
        .collect()
}

/// The events tried, in the order they came, each once: asserts that the tries came in feed
/// order and that the only repeats are the same event sent again right after itself.
fn tried_in_order(deliveries: &[Delivery]) -> Vec<String> {
    let mut ids: Vec<String> = deliveries.iter().map(|d| d.id().to_owned()).collect();
    ids.dedup();
    assert!(
        ids.windows(2).all(|pair| pair[0] < pair[1]),
        "tries out of feed order, or an event sent again after a later one: {ids:?}"
    );
    ids
}

/// Every one of `events` tried, signed and in order, and the one at `in_flight` (whose 2xx
/// never reached the server killed while it waited) tried twice in a row, no other: at most
/// the event in flight comes again, and here it must, since the killed server's position
/// never moved past it.
fn assert_none_lost_and_only_in_flight_twice(
    deliveries: &[Delivery],
    events: &[Value],
    in_flight: usize,
) {
    assert_verified(deliveries);
    assert_eq!(tried_in_order(deliveries), cursors(events), "none lost");
    let ids: Vec<&str> = deliveries.iter().map(Delivery::id).collect();
    let repeated: Vec<&str> = ids
        .windows(2)
        .filter(|p| p[0] == p[1])
        .map(|p| p[0])
        .collect();
    assert_eq!(
        repeated,
        [cursor(&events[in_flight])],
        "the event in flight, and it alone, came twice: {ids:?}"
    );
}

/// Asserts that every delivery is signed with one signature, which the library verifies
/// with the receiver's only secret.
fn assert_verified(deliveries: &[Delivery]) {
    for delivery in deliveries {
        assert!(
            delivery.verified && delivery.verified_with == [Some(0)],
            "not verified by the Standard Webhooks library with the endpoint's secret: \
             {delivery:?}"
        );
    }
}

/// Creates a pet named `name` and returns its event, the newest in the feed.
async fn create(client: &mut Client, name: &str) -> Value {
    let pet = client
        .create(&json!({"name": name, "categoryId": 1}).to_string())
        .await;
    let events = feed(client).await;
    let event = events.last().expect("the create's event").clone();
    assert_eq!(event["pet"], pet, "the newest event is the create's");
    event
}

async fn metric(address: SocketAddr, series: &str) -> f64 {
    value(&scrape(address).await, series)
}

/// Waits until `series` has `expected` on the metrics page.
async fn wait_for_metric(address: SocketAddr, series: &str, expected: f64) {
    poll_until(DELIVERY_WAIT, &format!("{series} {expected}"), async || {
        (metric(address, series).await == expected).then_some(())
    })
    .await;
}

/// Waits until `series` is at least `least` on the metrics page.
async fn wait_for_metric_at_least(address: SocketAddr, series: &str, least: f64) {
    poll_until(DELIVERY_WAIT, &format!("{series} >= {least}"), async || {
        (metric(address, series).await >= least).then_some(())
    })
    .await;
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_secs_f64()
}

// ------------------------------------------------------------------------------------------
// Delivery.

#[tokio::test(flavor = "multi_thread")]
async fn every_event_is_delivered_in_feed_order_signed_and_exactly_as_the_feed_lists_it() {
    let mut receiver = Receiver::start();
    let endpoints = Endpoints::new();
    // From the oldest event kept: the writes below may come before the server's first look
    // at the feed (where a new endpoint starts is a test of its own).
    endpoints.add(&mut receiver, &["--from-start", "--label", "shop"]);
    let server = Server::start_with(endpoints.options(&[]));
    let metrics = metrics_address(&server);
    let mut client = server.h2().await;

    let rex = id(&create(&mut client, "Rex").await["pet"]);
    let reply = client
        .patch_json(&format!("/v1/pets/{rex}"), r#"{"status":"pending"}"#)
        .await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    let tom = available(&mut client, "Tom").await;
    let order = placed(&mut client, tom).await;
    acted(&mut client, id(&order), "complete").await;
    let reply = client.delete(&format!("/v1/pets/{rex}")).await;
    assert_eq!(reply.status, 204, "{:?}", reply.body);

    let listed = feed_with_members(&mut client).await;
    let events: Vec<Value> = listed.iter().map(|(event, _)| event.clone()).collect();
    let types: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    for kind in [
        "pet.created",
        "pet.updated",
        "order.placed",
        "order.completed",
        "pet.deleted",
    ] {
        assert!(types.contains(&kind), "the writes made a {kind}: {types:?}");
    }
    let deliveries = receiver.wait_for_events(&server, &events).await;
    let sent = unix_now();

    assert_eq!(
        deliveries.len(),
        events.len(),
        "one POST per event, none tried twice: {deliveries:#?}"
    );
    assert_verified(&deliveries);
    for (delivery, (event, members)) in deliveries.iter().zip(&listed) {
        assert_eq!(delivery.path, "/hook");
        assert_eq!(delivery.status, 200);
        assert_eq!(
            delivery.content_type.as_deref(),
            Some("application/json"),
            "{delivery:?}"
        );
        assert_eq!(&delivery.json(), event, "the body is the feed's object");
        assert_eq!(
            &crate::support::member_names(delivery.body.as_bytes()),
            members,
            "in the feed's member order: {}",
            delivery.body
        );
        assert_eq!(delivery.id(), cursor(event), "webhook-id is the cursor");
        let timestamp: f64 = delivery
            .timestamp
            .as_deref()
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("webhook-timestamp in Unix seconds: {delivery:?}"));
        assert!(
            timestamp <= sent + 1.0 && timestamp >= delivery.at - 60.0,
            "webhook-timestamp is the time of sending: {delivery:?}"
        );
        let signatures = delivery.signature.as_deref().unwrap_or_default();
        assert!(signatures.starts_with("v1,"), "{delivery:?}");
    }
    // The receiver logs a delivery before it answers: the count follows the answer.
    wait_for_metric(metrics, DELIVERED, events.len() as f64).await;
    let page = scrape(metrics).await;
    assert_eq!(value(&page, FAILED), 0.0, "{page}");
    assert!(
        page.contains("petstore_webhook_behind_seconds{endpoint=\"shop\"}"),
        "the endpoint's lag, by its label: {page}"
    );
    assert_eq!(value(&page, DISABLED), 0.0, "{page}");
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_endpoint_for_pet_deleted_gets_the_deletions_only() {
    let mut receiver = Receiver::start();
    let endpoints = Endpoints::new();
    endpoints.add(&mut receiver, &["--types", "pet.deleted", "--from-start"]);
    let server = Server::start_with(endpoints.options(&[]));
    let mut client = server.h2().await;

    let first = id(&create(&mut client, "first").await["pet"]);
    let second = id(&create(&mut client, "second").await["pet"]);
    let reply = client
        .patch_json(&format!("/v1/pets/{second}"), r#"{"name":"2nd"}"#)
        .await;
    assert_eq!(reply.status, 200);
    assert_eq!(
        client.delete(&format!("/v1/pets/{first}")).await.status,
        204
    );
    create(&mut client, "third").await;
    assert_eq!(
        client.delete(&format!("/v1/pets/{second}")).await.status,
        204
    );

    let deletions: Vec<Value> = feed(&mut client)
        .await
        .into_iter()
        .filter(|e| e["type"] == "pet.deleted")
        .collect();
    assert_eq!(deletions.len(), 2);
    // The last deletion is the feed's last event: anything else would have come before it.
    let deliveries = receiver.wait_for_events(&server, &deletions).await;
    assert_verified(&deliveries);
    let bodies: Vec<Value> = deliveries.iter().map(Delivery::json).collect();
    assert_eq!(bodies, deletions, "the deletions, and nothing else");
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_receiver_down_then_failing_then_redirecting_gets_every_event_in_order_once_it_takes_them()
 {
    let mut receiver = Receiver::start();
    let endpoints = Endpoints::new();
    endpoints.add(&mut receiver, &["--from-start"]);
    receiver.stop();
    let server =
        Server::start_with(endpoints.options(&["--webhook-retry-schedule", PATIENT_SCHEDULE]));
    let metrics = metrics_address(&server);
    let mut client = server.h2().await;
    let mut events = Vec::new();
    for name in ["a", "b", "c"] {
        events.push(create(&mut client, name).await);
    }

    // Down: the port refuses connections, and each try is a failure.
    wait_for_metric_at_least(metrics, FAILED, 2.0).await;
    receiver.answer(json!({"status": 500}));
    receiver.restart();
    receiver
        .wait_for(&server, "two 500s", |d| {
            d.iter().filter(|d| d.status == 500).count() >= 2
        })
        .await;
    // A redirect is a failure too, never followed.
    receiver.answer(json!({"status": 302, "location": "/elsewhere"}));
    receiver
        .wait_for(&server, "a 302", |d| d.iter().any(|d| d.status == 302))
        .await;
    receiver.answer(json!({"status": 200}));
    for name in ["d", "e"] {
        events.push(create(&mut client, name).await);
    }
    let deliveries = receiver.wait_for_events(&server, &events).await;

    assert_verified(&deliveries);
    assert_eq!(tried_in_order(&deliveries), cursors(&events));
    assert_eq!(
        delivered(&deliveries),
        cursors(&events),
        "each event taken once"
    );
    let failed: Vec<&Delivery> = deliveries.iter().filter(|d| !d.is_2xx()).collect();
    assert!(
        failed.iter().all(|d| d.id() == cursor(&events[0])),
        "the later events waited while the first failed: {failed:#?}"
    );
    assert!(
        deliveries.iter().all(|d| d.path == "/hook"),
        "the redirect was not followed: {deliveries:#?}"
    );
    assert_eq!(metric(metrics, DISABLED).await, 0.0);
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn retry_after_in_seconds_on_a_503_replaces_the_schedule_s_wait() {
    retry_after(json!({"status": 503, "retry_after": "2"}), 1.9).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn retry_after_as_an_http_date_on_a_503_replaces_the_schedule_s_wait() {
    // A date 3 s ahead, in whole seconds: at least 2 s from the answer.
    retry_after(json!({"status": 503, "retry_after_date": 3}), 1.9).await;
}

/// The receiver answers `first` once, then 200: the second try comes at least `least`
/// seconds after the first, where the schedule alone would retry after 200 ms.
async fn retry_after(first: Value, least: f64) {
    let mut receiver = Receiver::start();
    let endpoints = Endpoints::new();
    endpoints.add(&mut receiver, &["--from-start"]);
    receiver.answer(first);
    let server =
        Server::start_with(endpoints.options(&["--webhook-retry-schedule", PATIENT_SCHEDULE]));
    let mut client = server.h2().await;
    let event = create(&mut client, "later").await;
    receiver
        .wait_for(&server, "the first try", |d| !d.is_empty())
        .await;
    receiver.answer(json!({"status": 200}));
    let deliveries = receiver.wait_for_events(&server, &[event]).await;

    assert_eq!(deliveries.len(), 2, "{deliveries:#?}");
    let waited = deliveries[1].at - deliveries[0].at;
    assert!(
        waited >= least,
        "the retry came {waited:.3} s after the 503 asked for a wait: {deliveries:#?}"
    );
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_receiver_that_does_not_answer_within_15_s_is_given_up_on_and_tried_again() {
    let mut receiver = Receiver::start();
    let endpoints = Endpoints::new();
    endpoints.add(&mut receiver, &["--from-start"]);
    // The first try gets its answer only after 20 s: the server must have given up by then.
    receiver.answer(json!({"status": 200, "sleep": 20}));
    let server =
        Server::start_with(endpoints.options(&["--webhook-retry-schedule", PATIENT_SCHEDULE]));
    let metrics = metrics_address(&server);
    let mut client = server.h2().await;
    let event = create(&mut client, "unanswered").await;
    receiver
        .wait_for(&server, "the first try", |d| !d.is_empty())
        .await;
    receiver.answer(json!({"status": 200}));
    let deliveries = receiver
        .wait_within(
            &server,
            Duration::from_secs(30),
            "the try after the first went unanswered",
            |d| d.len() >= 2,
        )
        .await;

    // The receiver logs a try before it answers, so the first one says 200 too: the second
    // try, made before that answer could come, is what shows the server stopped waiting.
    let waited = deliveries[1].at - deliveries[0].at;
    assert!(
        (15.0..19.0).contains(&waited),
        "the second try came {waited:.3} s after the first, not 15 s and the schedule's 200 ms: \
         {deliveries:#?}"
    );
    assert!(
        deliveries.iter().all(|d| d.id() == cursor(&event)),
        "{deliveries:#?}"
    );
    assert_eq!(metric(metrics, FAILED).await, 1.0);
    wait_for_metric(metrics, DELIVERED, 1.0).await;
    assert!(
        server.logs().contains("no answer within 15s"),
        "the failure's reason is logged: {}",
        server.logs()
    );
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_410_disables_the_endpoint_and_enable_with_a_reload_resumes_it_from_the_same_event() {
    let mut receiver = Receiver::start();
    let endpoints = Endpoints::new();
    let endpoint = endpoints.add(&mut receiver, &["--from-start"]);
    receiver.answer(json!({"status": 410}));
    let server =
        Server::start_with(endpoints.options(&["--webhook-retry-schedule", PATIENT_SCHEDULE]));
    let metrics = metrics_address(&server);
    let mut client = server.h2().await;
    let mut events = Vec::new();
    for name in ["a", "b", "c"] {
        events.push(create(&mut client, name).await);
    }

    wait_for_metric(metrics, DISABLED, 1.0).await;
    let page = scrape(metrics).await;
    assert_eq!(value(&page, GONE), 1.0, "{page}");
    assert_eq!(value(&page, FAILED), 0.0, "a 410 is not retried: {page}");
    let gone = receiver.deliveries();
    assert_eq!(gone.len(), 1, "one try, no retry: {gone:#?}");
    assert_eq!(gone[0].id(), cursor(&events[0]));

    receiver.answer(json!({"status": 200}));
    endpoints.cli(&["enable", &endpoint]);
    server.signal("HUP");
    server.wait_for_log("reload done", 1);
    events.push(create(&mut client, "d").await);
    let deliveries = receiver.wait_for_events(&server, &events).await;

    assert_verified(&deliveries);
    let ids: Vec<&str> = deliveries.iter().map(Delivery::id).collect();
    let mut expected = vec![cursor(&events[0])];
    expected.extend(events.iter().map(cursor));
    assert_eq!(
        ids, expected,
        "the event refused with 410 first, then the rest"
    );
    wait_for_metric(metrics, DISABLED, 0.0).await;
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn the_endpoint_is_disabled_after_its_last_scheduled_retry_fails() {
    let mut receiver = Receiver::start();
    let endpoints = Endpoints::new();
    endpoints.add(&mut receiver, &["--from-start"]);
    receiver.answer(json!({"status": 500}));
    let server =
        Server::start_with(endpoints.options(&["--webhook-retry-schedule", "100ms,100ms"]));
    let metrics = metrics_address(&server);
    let mut client = server.h2().await;
    let first = create(&mut client, "a").await;
    create(&mut client, "b").await;

    wait_for_metric(metrics, DISABLED, 1.0).await;
    let deliveries = receiver.deliveries();
    let ids: Vec<&str> = deliveries.iter().map(Delivery::id).collect();
    assert_eq!(
        ids,
        [cursor(&first); 3],
        "the first try and two retries, then nothing"
    );
    assert_eq!(metric(metrics, FAILED).await, 3.0);
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_receiver_that_closed_its_idle_connection_gets_the_next_event_without_a_failed_try() {
    let mut receiver = Receiver::start();
    let endpoints = Endpoints::new();
    endpoints.add(&mut receiver, &["--from-start"]);
    receiver.answer(json!({"status": 200, "idle_timeout": 0.3}));
    let server = Server::start_with(endpoints.options(&[]));
    let metrics = metrics_address(&server);
    let mut client = server.h2().await;
    let first = create(&mut client, "first").await;
    receiver.wait_for_events(&server, &[first]).await;
    receiver.wait_for_stderr("Request timed out", 1).await;

    let second = create(&mut client, "second").await;
    receiver.wait_for_events(&server, &[second]).await;
    // The receiver logs a delivery before it answers: the count follows the answer.
    wait_for_metric(metrics, DELIVERED, 2.0).await;
    assert_eq!(metric(metrics, FAILED).await, 0.0);
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_disabled_endpoint_stays_disabled_across_a_restart_until_enable_and_a_reload() {
    let mut receiver = Receiver::start();
    let endpoints = Endpoints::new();
    let endpoint = endpoints.add(&mut receiver, &["--from-start"]);
    receiver.answer(json!({"status": 500}));
    let server = Server::start_with(endpoints.options(&["--webhook-retry-schedule", "100ms"]));
    let mut client = server.h2().await;
    let event = create(&mut client, "a").await;
    wait_for_metric(metrics_address(&server), DISABLED, 1.0).await;
    drop(client);

    let server = server.restart();
    wait_for_metric(metrics_address(&server), DISABLED, 1.0).await;
    let mut client = server.h2().await;
    let later = create(&mut client, "b").await;
    let tried = receiver.deliveries();
    assert_eq!(
        tried.len(),
        2,
        "two tries before the restart, none after: {tried:#?}"
    );

    receiver.answer(json!({"status": 200}));
    endpoints.cli(&["enable", &endpoint]);
    server.signal("HUP");
    server.wait_for_log("reload done", 1);
    let deliveries = receiver
        .wait_for_events(&server, &[event.clone(), later.clone()])
        .await;
    let ids: Vec<&str> = deliveries.iter().map(Delivery::id).collect();
    assert_eq!(
        ids,
        [
            cursor(&event),
            cursor(&event),
            cursor(&event),
            cursor(&later)
        ]
    );
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_endpoint_s_behind_seconds_grows_while_it_fails_and_is_0_once_it_has_caught_up() {
    let mut receiver = Receiver::start();
    let endpoints = Endpoints::new();
    endpoints.add(&mut receiver, &["--from-start", "--label", "crm"]);
    receiver.answer(json!({"status": 500}));
    let server =
        Server::start_with(endpoints.options(&["--webhook-retry-schedule", PATIENT_SCHEDULE]));
    let metrics = metrics_address(&server);
    let behind = "petstore_webhook_behind_seconds{endpoint=\"crm\"}";
    let mut client = server.h2().await;
    let event = create(&mut client, "late").await;

    wait_for_metric_at_least(metrics, behind, 1.0).await;
    receiver.answer(json!({"status": 200}));
    receiver.wait_for_events(&server, &[event]).await;
    wait_for_metric(metrics, behind, 0.0).await;
    assert!(
        scrape(metrics).await.contains(&format!("{behind} 0")),
        "the series is shown, at 0"
    );
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sigkill_with_a_delivery_in_flight_resends_that_event_at_most_and_loses_none() {
    let mut receiver = Receiver::start();
    let endpoints = Endpoints::new();
    endpoints.add(&mut receiver, &["--from-start"]);
    let options = endpoints.options(&[]);
    let server = Server::start_with(options.clone());
    let mut client = server.h2().await;
    let mut events = Vec::new();
    for name in ["a", "b"] {
        events.push(create(&mut client, name).await);
    }
    receiver.wait_for_events(&server, &events).await;

    // The receiver logs the next delivery as it arrives and answers 3 s later: the server is
    // killed in between.
    receiver.answer(json!({"status": 200, "sleep": 3}));
    let in_flight = create(&mut client, "in flight").await;
    receiver
        .wait_for(&server, "the delivery in flight", |d| {
            d.iter()
                .any(|d| d.id.as_deref() == Some(cursor(&in_flight)))
        })
        .await;
    drop(client);
    let dir = server.kill();
    receiver.answer(json!({"status": 200}));
    events.push(in_flight);
    let server = Server::start_after_crash_with(dir, options);
    let mut client = server.h2().await;
    for name in ["c", "d"] {
        events.push(create(&mut client, name).await);
    }
    assert_eq!(feed(&mut client).await, events);
    let deliveries = receiver.wait_for_events(&server, &events).await;

    assert_none_lost_and_only_in_flight_twice(&deliveries, &events, 2);
    server.stop();
}

// ------------------------------------------------------------------------------------------
// The endpoints file and reloads.

#[tokio::test(flavor = "multi_thread")]
async fn a_reload_starts_an_endpoint_added_and_stops_one_removed() {
    let (mut old, mut new) = (Receiver::start(), Receiver::start());
    let endpoints = Endpoints::new();
    let old_id = endpoints.add(&mut old, &["--from-start"]);
    let server = Server::start_with(endpoints.options(&[]));
    let mut client = server.h2().await;
    let before = create(&mut client, "before").await;
    old.wait_for_events(&server, std::slice::from_ref(&before))
        .await;

    endpoints.add(&mut new, &[]);
    endpoints.cli(&["remove", &old_id]);
    server.signal("HUP");
    server.wait_for_log("reload done", 1);
    let mut after = Vec::new();
    for name in ["after-1", "after-2"] {
        after.push(create(&mut client, name).await);
    }
    let deliveries = new.wait_for_events(&server, &after).await;

    assert_verified(&deliveries);
    let bodies: Vec<Value> = deliveries.iter().map(Delivery::json).collect();
    assert_eq!(bodies, after, "the new endpoint starts at the reload");
    let kept = old.deliveries();
    assert_eq!(
        delivered(&kept),
        [cursor(&before)],
        "the removed endpoint got nothing after the reload: {kept:#?}"
    );
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rotated_endpoint_s_deliveries_carry_a_signature_per_secret_until_the_rotation_ends() {
    let mut receiver = Receiver::start();
    let endpoints = Endpoints::new();
    let endpoint = endpoints.add(&mut receiver, &["--from-start"]);
    let old = receiver.secrets[0].clone();
    let server = Server::start_with(endpoints.options(&[]));
    let mut client = server.h2().await;
    let one = create(&mut client, "one secret").await;
    let deliveries = receiver
        .wait_for_events(&server, std::slice::from_ref(&one))
        .await;
    assert_verified(&deliveries);

    let out = endpoints.cli(&["rotate", &endpoint]);
    let new = out.lines().next().unwrap_or_default().to_owned();
    assert!(new.starts_with("whsec_") && new != old, "{out}");
    receiver.set_secrets(&[old.as_str(), new.as_str()]);
    server.signal("HUP");
    server.wait_for_log("reload done", 1);
    let two = create(&mut client, "two secrets").await;
    let deliveries = receiver
        .wait_for_events(&server, std::slice::from_ref(&two))
        .await;
    let rotating = deliveries.last().expect("the delivery");
    assert_eq!(rotating.id(), cursor(&two));
    let mut verified_with = rotating.verified_with.clone();
    verified_with.sort_unstable();
    assert_eq!(
        verified_with,
        [Some(0), Some(1)],
        "two signatures, one verified with the old secret, one with the new: {rotating:?}"
    );

    endpoints.cli(&["rotate", &endpoint, "--finish"]);
    server.signal("HUP");
    server.wait_for_log("reload done", 2);
    let again = create(&mut client, "the new secret").await;
    let deliveries = receiver
        .wait_for_events(&server, std::slice::from_ref(&again))
        .await;
    let finished = deliveries.last().expect("the delivery");
    assert_eq!(
        finished.verified_with,
        [Some(1)],
        "one signature, with the new secret: {finished:?}"
    );
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn without_allow_private_a_receiver_on_this_machine_gets_nothing_and_the_log_says_why() {
    let receiver = Receiver::start();
    let endpoints = Endpoints::new();
    // The receiver's address as an IPv4 literal, a name, and an IPv4-mapped IPv6 literal.
    let ids: Vec<String> = [
        format!("https://127.0.0.1:{}/hook", receiver.port),
        format!("https://localhost:{}/hook", receiver.port),
        format!("https://[::ffff:127.0.0.1]:{}/hook", receiver.port),
    ]
    .iter()
    .map(|url| endpoints.add_url(url, &["--from-start"]).1)
    .collect();
    let server = Server::start_with(
        endpoints.options_refusing_private(&["--webhook-retry-schedule", "100ms"]),
    );
    let metrics = metrics_address(&server);
    let mut client = server.h2().await;
    create(&mut client, "private").await;

    let deadline = Instant::now() + DELIVERY_WAIT;
    loop {
        let logs = server.logs();
        let refused = |id: &String| {
            logs.lines()
                .any(|line| line.contains(id.as_str()) && line.contains(PRIVATE_REFUSAL))
        };
        if ids.iter().all(refused) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not every endpoint of {ids:?} logged {PRIVATE_REFUSAL:?}:\n{logs}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    wait_for_metric_at_least(metrics, FAILED, 3.0).await;
    let deliveries = receiver.deliveries();
    assert!(deliveries.is_empty(), "{deliveries:#?}");
    assert_eq!(metric(metrics, DELIVERED).await, 0.0);
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_new_endpoint_starts_after_the_events_before_it_was_first_seen_unless_from_start() {
    let (mut newest, mut oldest) = (Receiver::start(), Receiver::start());
    let endpoints = Endpoints::new();
    let server = Server::start_with(endpoints.options(&[]));
    let mut client = server.h2().await;
    let mut events = Vec::new();
    for name in ["before-1", "before-2"] {
        events.push(create(&mut client, name).await);
    }

    endpoints.add(&mut newest, &[]);
    endpoints.add(&mut oldest, &["--from-start"]);
    server.signal("HUP");
    server.wait_for_log("reload done", 1);
    let mut after = Vec::new();
    for name in ["after-1", "after-2"] {
        after.push(create(&mut client, name).await);
    }
    events.extend(after.iter().cloned());
    let from_newest = newest.wait_for_events(&server, &after).await;
    let from_oldest = oldest.wait_for_events(&server, &events).await;

    assert_verified(&from_newest);
    assert_verified(&from_oldest);
    let bodies =
        |deliveries: &[Delivery]| deliveries.iter().map(Delivery::json).collect::<Vec<_>>();
    assert_eq!(bodies(&from_newest), after, "from the reload on");
    assert_eq!(bodies(&from_oldest), events, "from the oldest event kept");
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_endpoint_in_the_file_at_start_gets_every_event_created_once_the_server_listens() {
    let mut receiver = Receiver::start();
    let endpoints = Endpoints::new();
    endpoints.add(&mut receiver, &[]);
    let server = Server::start_with(endpoints.options(&[]));
    let mut client = server.h2().await;
    let mut events = Vec::new();
    for name in ["first", "second"] {
        events.push(create(&mut client, name).await);
    }
    let deliveries = receiver.wait_for_events(&server, &events).await;

    assert_verified(&deliveries);
    let bodies: Vec<Value> = deliveries.iter().map(Delivery::json).collect();
    assert_eq!(bodies, events);
    server.stop();
}

// ------------------------------------------------------------------------------------------
// Two instances on one PostgreSQL database.

#[tokio::test(flavor = "multi_thread")]
async fn on_postgres_one_instance_delivers_and_another_takes_over_within_10s_of_its_sigkill() {
    let cluster = cluster();
    let mut receiver = Receiver::start();
    let endpoints = Endpoints::new();
    endpoints.add(&mut receiver, &["--from-start"]);
    let mut options = endpoints.options(&[]);
    options.db = on_postgres(&cluster).db;
    let servers = [
        Server::start_with(options.clone()),
        Server::start_with(options.clone()),
    ];
    let metrics = [metrics_address(&servers[0]), metrics_address(&servers[1])];
    let mut client = servers[0].h2().await;
    let mut events = Vec::new();
    for name in ["a", "b", "c"] {
        events.push(create(&mut client, name).await);
    }
    receiver.wait_for_events(&servers[0], &events).await;
    // The receiver logs a delivery before it answers: the counts follow the answer.
    poll_until(DELIVERY_WAIT, "three deliveries counted", async || {
        let both = metric(metrics[0], DELIVERED).await + metric(metrics[1], DELIVERED).await;
        (both == 3.0).then_some(())
    })
    .await;
    let counts = [
        metric(metrics[0], DELIVERED).await,
        metric(metrics[1], DELIVERED).await,
    ];
    let delivering = counts
        .iter()
        .position(|&count| count == 3.0)
        .unwrap_or_else(|| panic!("one instance delivered all three: {counts:?}"));
    assert_eq!(counts[1 - delivering], 0.0, "the other none: {counts:?}");

    receiver.answer(json!({"status": 200, "sleep": 3}));
    let in_flight = create(&mut client, "in flight").await;
    receiver
        .wait_for(&servers[0], "the delivery in flight", |d| {
            d.iter()
                .any(|d| d.id.as_deref() == Some(cursor(&in_flight)))
        })
        .await;
    drop(client);
    let [first, second] = servers;
    let (killed, survivor) = if delivering == 0 {
        (first, second)
    } else {
        (second, first)
    };
    let survivor_metrics = metrics[1 - delivering];
    drop(killed.kill());
    let killed_at = Instant::now();
    receiver.answer(json!({"status": 200}));
    events.push(in_flight);
    let mut client = survivor.h2().await;
    let next = create(&mut client, "d").await;
    events.push(next.clone());
    receiver
        .wait_within(
            &survivor,
            Duration::from_secs(10),
            "the surviving instance delivers the next event",
            |d| d.iter().any(|d| d.is_2xx() && d.id() == cursor(&next)),
        )
        .await;
    eprintln!("taken over {:?} after the SIGKILL", killed_at.elapsed());
    let deliveries = receiver.wait_for_events(&survivor, &events).await;

    assert_none_lost_and_only_in_flight_twice(&deliveries, &events, 3);
    assert!(metric(survivor_metrics, DELIVERED).await >= 1.0);

    // `list --db` reads the state the instances keep in the database, beside the one serving
    // (the position is saved just after the receiver's answer, so it may take a moment).
    let url = cluster.url();
    poll_until(
        DELIVERY_WAIT,
        "list --db: delivering, 0 events behind",
        async || {
            let listed = endpoints.cli(&["list", "--db", &url]);
            listed
                .lines()
                .any(|line| {
                    line.starts_with("ep_")
                        && line.contains("delivering")
                        && line.contains(" 0 events")
                })
                .then_some(())
        },
    )
    .await;
    survivor.stop();
}

#[test]
fn list_refuses_a_postgres_database_at_another_schema_version_and_leaves_it_as_it_was() {
    let cluster = crate::pg_cluster::Cluster::start();
    let endpoints = Endpoints::new();
    endpoints.add_url("https://receiver.example/hook", &[]);
    let url = cluster.url();
    let list = || {
        run(&[
            "webhooks".as_ref(),
            "--webhooks".as_ref(),
            endpoints.file.as_os_str(),
            "list".as_ref(),
            "--db".as_ref(),
            url.as_ref(),
        ])
    };
    // One no petstore has opened: an older server's upgrade is its job, not a listing's.
    let (code, stdout, stderr) = list();
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    assert!(
        stderr.contains("schema version 0") && stderr.contains("upgrades it when it starts"),
        "{stderr}"
    );
    assert_eq!(
        cluster.psql("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"),
        "0",
        "a listing created no table"
    );
    // One a newer petstore made: not misread.
    cluster.psql(
        "CREATE TABLE petstore_meta (name text PRIMARY KEY, value bigint NOT NULL);
         INSERT INTO petstore_meta VALUES ('schema_version', 99);",
    );
    let (code, stdout, stderr) = list();
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    assert!(stderr.contains("schema version 99, newer than"), "{stderr}");
    assert_eq!(
        cluster.psql("SELECT string_agg(name || '=' || value, ',') FROM petstore_meta"),
        "schema_version=99",
        "a listing wrote nothing"
    );
}
