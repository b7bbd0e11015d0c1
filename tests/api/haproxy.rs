//! Several instances behind a load balancer: Debian's haproxy runs the example config
//! `tests/haproxy/petstore.cfg` as shipped, with only the instances' addresses, its own port,
//! its stats socket and its log target replaced, in front of two real instances on one real
//! PostgreSQL cluster. Clients through it see one catalogue; an instance that stops is routed
//! around (its check marks it down) and used again once back; with the database away, clients
//! still get petstore's 503 with Retry-After rather than a closed connection.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;
use tempfile::TempDir;

use crate::pg_cluster::Cluster;
use crate::support::{Client, Options, Protocol, Server};

const HAPROXY: &str = "/usr/sbin/haproxy";
/// The bound on haproxy's checks changing their mind: `inter 1s fall 2 rise 2` takes 2-3 s.
const CHECK_DEADLINE: Duration = Duration::from_secs(15);
/// The bound on one request through haproxy, its connect and retries included.
const REQUEST_DEADLINE: Duration = Duration::from_secs(15);
/// The bound on haproxy's start.
const START_DEADLINE: Duration = Duration::from_secs(10);
const POLL: Duration = Duration::from_millis(100);

/// A running haproxy; SIGKILLed on drop.
struct Haproxy {
    child: Mutex<Child>,
    addr: SocketAddr,
    socket: PathBuf,
    log: Arc<Mutex<String>>,
    _dir: TempDir,
}

impl Haproxy {
    /// Starts haproxy on a free loopback port with the example config, its two instances
    /// replaced by `first` and `second`.
    fn start(first: SocketAddr, second: SocketAddr) -> Haproxy {
        let dir = tempfile::tempdir().expect("temp dir");
        let port = free_port();
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let socket = dir.path().join("admin.sock");
        let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/haproxy/petstore.cfg");
        let config = std::fs::read_to_string(&shipped).expect("the example config");
        let config = replace(&config, "bind [::]:443 v4v6", &format!("bind {addr}"));
        let config = replace(&config, "10.0.0.11:8443", &first.to_string());
        let config = replace(&config, "10.0.0.12:8443", &second.to_string());
        let config = replace(
            &config,
            "/run/haproxy/admin.sock",
            &socket.display().to_string(),
        );
        // Connection lines and check verdicts go to the test's output on failure.
        let config = replace(
            &config,
            "log /dev/log local0",
            "log stderr format raw local0 info",
        );
        let path = dir.path().join("petstore.cfg");
        std::fs::write(&path, config).expect("write the config");

        let mut child = Command::new(HAPROXY)
            .arg("-db")
            .arg("-f")
            .arg(&path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{HAPROXY} does not start ({e}): apt-get install haproxy"));
        let log = Arc::new(Mutex::new(String::new()));
        let stderr = child.stderr.take().expect("stderr is piped");
        let sink = Arc::clone(&log);
        thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let mut log = sink.lock().expect("log lock");
                log.push_str(&line);
                log.push('\n');
            }
        });
        let haproxy = Haproxy {
            child: Mutex::new(child),
            addr,
            socket,
            log,
            _dir: dir,
        };
        haproxy.wait_until(
            "haproxy answers on its stats socket",
            START_DEADLINE,
            |_| true,
        );
        haproxy
    }

    /// `svname -> status` of the backend's servers ("UP", "DOWN", "UP 1/2", "no check"...), from
    /// `show stat` on the stats socket; `None` while the socket does not answer.
    fn servers(&self) -> Option<HashMap<String, String>> {
        let mut stream = UnixStream::connect(&self.socket).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        stream.write_all(b"show stat\n").ok()?;
        let mut text = String::new();
        stream.read_to_string(&mut text).ok()?;
        let mut lines = text.lines();
        let header: Vec<&str> = lines.next()?.trim_start_matches("# ").split(',').collect();
        let column = |name: &str| header.iter().position(|field| *field == name);
        let (proxy, server, status) = (column("pxname")?, column("svname")?, column("status")?);
        Some(
            lines
                .map(|line| line.split(',').collect::<Vec<_>>())
                .filter(|fields| fields.get(proxy) == Some(&"petstore"))
                .filter_map(|fields| {
                    Some((
                        fields.get(server)?.to_string(),
                        fields.get(status)?.to_string(),
                    ))
                })
                .collect(),
        )
    }

    /// Polls the servers' states until `done` holds; fails past `deadline` with haproxy's log.
    fn wait_until(
        &self,
        what: &str,
        deadline: Duration,
        mut done: impl FnMut(&HashMap<String, String>) -> bool,
    ) {
        let start = Instant::now();
        let mut last = None;
        loop {
            if let Some(servers) = self.servers() {
                if done(&servers) {
                    return;
                }
                last = Some(servers);
            }
            if let Ok(Some(status)) = self.child.lock().expect("child lock").try_wait() {
                panic!("haproxy exited with {status}:\n{}", self.log());
            }
            assert!(
                start.elapsed() < deadline,
                "{what}: not within {deadline:?}; servers {last:?}\nhaproxy:\n{}",
                self.log()
            );
            thread::sleep(POLL);
        }
    }

    /// Waits until the server `name` has the status `status` (exactly: "UP", "DOWN").
    fn wait_status(&self, name: &str, status: &str) {
        self.wait_until(&format!("{name} {status}"), CHECK_DEADLINE, |servers| {
            servers.get(name).map(String::as_str) == Some(status)
        });
    }

    fn status(&self, name: &str) -> String {
        self.servers()
            .and_then(|mut servers| servers.remove(name))
            .unwrap_or_default()
    }

    fn log(&self) -> String {
        self.log.lock().expect("log lock").clone()
    }

    /// A new HTTP/1.1 connection through haproxy (so to the instance it picks).
    async fn connect(&self) -> Client {
        tokio::time::timeout(
            REQUEST_DEADLINE,
            Client::connect(self.addr, Protocol::Http1),
        )
        .await
        .unwrap_or_else(|_| panic!("no TLS connection through haproxy:\n{}", self.log()))
    }

    /// Creates a pet on a new connection through haproxy; returns the whole reply.
    async fn create_fresh(&self, name: &str) -> crate::support::Reply {
        let mut client = self.connect().await;
        let body = format!(r#"{{"name":"{name}","categoryId":7}}"#);
        tokio::time::timeout(REQUEST_DEADLINE, client.post_json("/v1/pets", &body))
            .await
            .unwrap_or_else(|_| panic!("no answer through haproxy:\n{}", self.log()))
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        if let Ok(child) = self.child.get_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `text` with every `from` replaced by `to`; the example config must hold `from`.
fn replace(text: &str, from: &str, to: &str) -> String {
    assert!(
        text.contains(from),
        "tests/haproxy/petstore.cfg no longer holds {from:?}, which this test replaces"
    );
    text.replace(from, to)
}

fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port()
}

fn on(cluster: &Cluster, listen: Option<SocketAddr>) -> Server {
    Server::start_with(Options {
        db: Some(cluster.url()),
        listen,
        ..Options::default()
    })
}

fn ids(pets: &[Value]) -> Vec<i64> {
    pets.iter()
        .map(|pet| pet["id"].as_i64().expect("an integer id"))
        .collect()
}

/// Opens `count` connections through haproxy and keeps them all open, so `leastconn` spreads
/// them over the instances that are up; each creates a pet, then walks the catalogue.
async fn through_both(haproxy: &Haproxy, count: usize, tag: &str) -> Vec<Vec<i64>> {
    let mut clients = Vec::new();
    for _ in 0..count {
        clients.push(haproxy.connect().await);
    }
    for (i, client) in clients.iter_mut().enumerate() {
        client
            .create(&format!(r#"{{"name":"{tag}-{i}","categoryId":1}}"#))
            .await;
    }
    let mut walks = Vec::new();
    for client in &mut clients {
        walks.push(ids(&client.list_all("/v1/pets?limit=7").await));
    }
    walks
}

#[tokio::test(flavor = "multi_thread")]
async fn behind_haproxy_two_instances_serve_one_catalogue_and_a_stopped_one_is_routed_around() {
    let cluster = Cluster::start();
    let first = on(&cluster, None);
    let second = on(&cluster, None);
    let first_addr = first.addr;
    let haproxy = Haproxy::start(first.addr, second.addr);
    haproxy.wait_status("pets1", "UP");
    haproxy.wait_status("pets2", "UP");

    // Four connections held open: leastconn gives each instance two.
    let walks = through_both(&haproxy, 4, "before").await;
    assert_eq!(walks[0].len(), 4, "{walks:?}");
    assert!(walks.iter().all(|walk| *walk == walks[0]), "{walks:?}");
    first.wait_for_log("path=/v1/pets status=201", 2);
    second.wait_for_log("path=/v1/pets status=201", 2);
    // Each instance on its own sees the same catalogue too.
    for server in [&first, &second] {
        let mut direct = server.h2().await;
        assert_eq!(ids(&direct.list_all("/v1/pets").await), walks[0]);
    }

    // Stopped: every new connection still gets its 201, at first by haproxy's retry on the
    // other instance, then because the check has taken the stopped one out.
    first.stop();
    let mut created = walks[0].len();
    let stopped = Instant::now();
    while haproxy.status("pets1") != "DOWN" {
        let reply = haproxy.create_fresh("while-checks-notice").await;
        assert_eq!(reply.status, 201, "{:?}\n{}", reply.body, haproxy.log());
        created += 1;
        assert!(
            stopped.elapsed() < CHECK_DEADLINE,
            "the check did not mark the stopped instance down:\n{}",
            haproxy.log()
        );
    }
    for i in 0..4 {
        let reply = haproxy.create_fresh(&format!("while-down-{i}")).await;
        assert_eq!(reply.status, 201, "{:?}", reply.body);
        created += 1;
    }
    second.wait_for_log("path=/v1/pets status=201", created - 2);
    assert_eq!(haproxy.status("pets2"), "UP");

    // Back on the same address: the check brings it in again and haproxy uses it.
    let first = on(&cluster, Some(first_addr));
    haproxy.wait_status("pets1", "UP");
    let walks = through_both(&haproxy, 4, "after").await;
    assert_eq!(walks[0].len(), created + 4, "{walks:?}");
    assert!(walks.iter().all(|walk| *walk == walks[0]), "{walks:?}");
    first.wait_for_log("path=/v1/pets status=201", 2);
    assert!(walks[0].windows(2).all(|pair| pair[0] < pair[1]));
}

#[tokio::test(flavor = "multi_thread")]
async fn behind_haproxy_a_database_away_gives_503_with_retry_after_then_writes_resume() {
    let cluster = Cluster::start();
    let first = on(&cluster, None);
    let second = on(&cluster, None);
    let haproxy = Haproxy::start(first.addr, second.addr);
    haproxy.wait_status("pets1", "UP");
    haproxy.wait_status("pets2", "UP");
    assert_eq!(haproxy.create_fresh("before").await.status, 201);

    cluster.crash();
    // Both checks fail at once. Before they notice, the instances answer 503 themselves; once
    // both are out, the unchecked fallback entries carry the connections to the same answer.
    let both_down = |servers: &HashMap<String, String>| {
        servers.get("pets1").map(String::as_str) == Some("DOWN")
            && servers.get("pets2").map(String::as_str) == Some("DOWN")
    };
    let start = Instant::now();
    let mut fallback = 0;
    while fallback < 4 {
        let down = haproxy.servers().is_some_and(|servers| both_down(&servers));
        let reply = haproxy.create_fresh("database-away").await;
        reply.assert_error_prefix(503, "unavailable", "");
        assert!(reply.header("retry-after").is_some(), "{:?}", reply.headers);
        fallback += usize::from(down);
        assert!(
            start.elapsed() < CHECK_DEADLINE,
            "checks did not mark both instances down: {:?}\n{}",
            haproxy.servers(),
            haproxy.log()
        );
    }

    cluster.restart();
    haproxy.wait_status("pets1", "UP");
    haproxy.wait_status("pets2", "UP");
    for i in 0..4 {
        let reply = haproxy.create_fresh(&format!("after-{i}")).await;
        assert_eq!(reply.status, 201, "{:?}", reply.body);
    }
}
