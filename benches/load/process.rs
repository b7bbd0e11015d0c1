//! Process control: pinning (this process to CPU 0, servers to CPU 1 with `taskset`), starting
//! petstore and the baseline as child processes, draining their output, reading their CPU time
//! and peak memory from /proc, and stopping them with SIGTERM or SIGKILL. It knows nothing of
//! HTTP. Invariant: every wait on a child has a deadline, and a child is killed on drop.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

/// The CPU the servers run on; the load generator (this process) runs on `CLIENT_CPU`.
const SERVER_CPU: &str = "1";
const CLIENT_CPU: &str = "0";
/// /proc/<pid>/stat counts CPU time in clock ticks; Linux reports 100 a second to user space.
pub const CLK_TCK: f64 = 100.0;
/// A server that has not said where it listens by then is broken, not slow.
const START_DEADLINE: Duration = Duration::from_secs(60);
/// petstore drains for at most 10 s by default, then closes the store: more is a hang.
const EXIT_DEADLINE: Duration = Duration::from_secs(30);
/// Lines of a server's log kept for a failure message.
const TAIL_LINES: usize = 30;

/// Pins this process to the client CPU. Only the calling thread is pinned, and every thread
/// created later inherits its mask, so call it before the runtime or any thread exists.
pub fn pin_self() {
    let status = Command::new("taskset")
        .args(["-p", "-c", CLIENT_CPU, &std::process::id().to_string()])
        .stdout(Stdio::null())
        .status()
        .expect("taskset runs (util-linux)");
    assert!(status.success(), "taskset -p -c {CLIENT_CPU} failed");
}

/// The development file `name` in `certs/`.
pub fn cert(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("certs")
        .join(name)
}

/// A server's TLS with the development certificate and key, as petstore's (`src/tls.rs`): ring,
/// TLS 1.3 and 1.2. The caller sets its ALPN.
pub fn dev_server_tls() -> rustls::ServerConfig {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain = CertificateDer::pem_file_iter(cert("dev-server.pem"))
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .expect("certs/dev-server.pem holds certificates");
    let key = PrivateKeyDer::from_pem_file(cert("dev-server.key"))
        .expect("certs/dev-server.key holds a private key");
    rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .expect("the ring provider supports TLS 1.2 and 1.3")
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .expect("the development key fits its certificate")
}

/// What a server's log said that the benchmark needs, collected by the drain thread.
#[derive(Default)]
struct Log {
    /// The `store closed commits=N writes=M` line (redb only).
    store_closed: Option<String>,
    /// The `database open path=... pets=N` line.
    database_open: Option<String>,
    errors: u64,
    /// Each `snapshot taken` line's pets and milliseconds, in order.
    snapshots: Vec<(u64, u64)>,
    /// `delivering to webhook endpoint` lines: endpoints whose delivery task holds its
    /// position, from which it delivers every later event.
    webhooks_delivering: u64,
    /// `webhook delivery failed` lines: tries that will be retried.
    webhook_failures: u64,
    tail: VecDeque<String>,
}

/// A server process pinned to the server CPU.
pub struct Server {
    child: Option<Child>,
    pub addr: SocketAddr,
    pub pid: u32,
    /// From just before the spawn, for start-up timing.
    pub spawned: Instant,
    log: Arc<Mutex<Log>>,
    drain: Option<thread::JoinHandle<()>>,
    /// A database server (PostgreSQL's postmaster) whose processes' CPU counts as this one's.
    database_pid: Option<u32>,
}

/// Counters of a finished petstore writer, from its last log line.
#[derive(Clone, Copy, Debug)]
pub struct StoreClosed {
    pub commits: u64,
    pub pets_written: u64,
}

impl Server {
    /// Starts petstore on `db` the way an operator runs it: development files, default (info)
    /// logging with one line per request on stderr, which is drained here. `extra` flags go
    /// last (a diagnostic such as a log filter; empty for the real figures).
    pub fn petstore(db: &Path, extra: &[String]) -> Server {
        Server::petstore_from(crate::settings::petstore_exe(), db, extra)
    }

    /// `petstore`, with the executable `exe` (another build, for an A/B in one run).
    pub fn petstore_from(exe: &Path, db: &Path, extra: &[String]) -> Server {
        let mut command = pinned(exe);
        command
            .arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--db")
            .arg(db)
            .arg("--tls-cert")
            .arg(cert("dev-server.pem"))
            .arg("--tls-key")
            .arg(cert("dev-server.key"))
            .arg("--api-keys")
            .arg(cert("dev-keys.txt"))
            .args(extra);
        // Settings from the caller's environment would make this run differ from the default.
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("PETSTORE_") {
                command.env_remove(name);
            }
        }
        command
            .env_remove("RUST_LOG")
            .env_remove("NOTIFY_SOCKET")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let spawned = Instant::now();
        let mut child = command.spawn().expect("taskset starts petstore");
        let stderr = child.stderr.take().expect("stderr is piped");
        let (found, address) = mpsc::channel();
        let log = Arc::new(Mutex::new(Log::default()));
        let sink = Arc::clone(&log);
        let drain = thread::spawn(move || drain_petstore(stderr, &sink, &found));
        Server::started(child, address, spawned, log, Some(drain))
    }

    /// Starts this benchmark binary again as the baseline server; it prints its address on
    /// stdout and logs nothing.
    pub fn baseline() -> Server {
        let exe = std::env::current_exe().expect("the benchmark knows its own path");
        let mut command = pinned(&exe);
        command
            .arg(crate::BASELINE_FLAG)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let spawned = Instant::now();
        let mut child = command.spawn().expect("taskset starts the baseline");
        let stdout = child.stdout.take().expect("stdout is piped");
        let (found, address) = mpsc::channel();
        let drain = thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = found.send(line.trim().to_owned());
            }
        });
        let log = Arc::new(Mutex::new(Log::default()));
        Server::started(child, address, spawned, log, Some(drain))
    }

    fn started(
        mut child: Child,
        address: mpsc::Receiver<String>,
        spawned: Instant,
        log: Arc<Mutex<Log>>,
        drain: Option<thread::JoinHandle<()>>,
    ) -> Server {
        let pid = child.id();
        let addr = match address.recv_timeout(START_DEADLINE) {
            Ok(addr) => addr,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                let log = log.lock().expect("log lock");
                let tail: Vec<&str> = log.tail.iter().map(String::as_str).collect();
                panic!("server {pid} did not start:\n{}", tail.join("\n"));
            }
        };
        let addr: SocketAddr = addr
            .parse()
            .unwrap_or_else(|_| panic!("{addr:?} is not a socket address"));
        // The load goes to this machine only, never to an address a log line might name.
        assert!(addr.ip().is_loopback(), "server {pid} listens on {addr}");
        Server {
            child: Some(child),
            addr,
            pid,
            spawned,
            log,
            drain,
            database_pid: None,
        }
    }

    /// Counts the CPU of the database server at `postmaster` (and of all its children) as
    /// this server's, so that a store in another process is not free in the figures.
    pub fn with_database(mut self, postmaster: u32) -> Server {
        self.database_pid = Some(postmaster);
        self
    }

    /// User + system CPU ticks of the whole process, every thread included, and of its
    /// database server's processes; `None` once the process is gone.
    pub fn cpu_ticks(&self) -> Option<CpuTicks> {
        let (user, system) = user_and_system_ticks(self.pid)?;
        let (db_user, db_system) = self.database_pid.map_or((0, 0), tree_ticks);
        Some(CpuTicks {
            all: user + system + db_user + db_system,
            user: user + db_user,
        })
    }

    /// Peak resident memory (VmHWM) in KiB.
    pub fn peak_rss_kib(&self) -> u64 {
        self.status_kib("VmHWM:")
    }

    /// Resident memory now (VmRSS) in KiB.
    pub fn rss_kib(&self) -> u64 {
        self.status_kib("VmRSS:")
    }

    /// A `Vm...:` line of /proc/<pid>/status, in KiB.
    fn status_kib(&self, name: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid))
            .expect("the server's /proc/<pid>/status is readable while it runs");
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("status has {name} in kB"))
    }

    /// ERROR lines the server has logged so far.
    pub fn logged_errors(&self) -> u64 {
        self.log.lock().expect("log lock").errors
    }

    /// Webhook endpoints whose delivery task has taken its position so far.
    pub fn webhooks_delivering(&self) -> u64 {
        self.log.lock().expect("log lock").webhooks_delivering
    }

    /// Failed webhook delivery tries the server has logged so far.
    pub fn webhook_failures(&self) -> u64 {
        self.log.lock().expect("log lock").webhook_failures
    }

    /// The pet count from the server's `database open` line.
    pub fn pets_at_start(&self) -> Option<u64> {
        let log = self.log.lock().expect("log lock");
        let line = log.database_open.as_deref()?;
        field(line, "pets=")
    }

    /// The snapshots the server has logged as taken so far, as (pets, milliseconds).
    pub fn snapshots(&self) -> Vec<(u64, u64)> {
        self.log.lock().expect("log lock").snapshots.clone()
    }

    /// SIGUSR1: petstore takes a snapshot (with `--backup-dir`).
    pub fn request_snapshot(&self) {
        signal(self.pid, "USR1");
    }

    /// The last lines of the server's log, for a failure message.
    pub fn tail(&self) -> String {
        let log = self.log.lock().expect("log lock");
        log.tail.iter().cloned().collect::<Vec<_>>().join("\n")
    }

    /// SIGTERM, then waits for the exit (async, so that the client's connections keep being
    /// served their GOAWAY and close while the server drains). Returns the exit status and
    /// the writer's counters if the server logged them.
    pub async fn stop(mut self) -> (ExitStatus, Option<StoreClosed>) {
        signal(self.pid, "TERM");
        let status = self.wait_exit().await;
        if let Some(drain) = self.drain.take() {
            // The pipe closed with the process, so the drain has reached its end.
            let _ = drain.join();
        }
        let log = self.log.lock().expect("log lock");
        let closed = log.store_closed.as_deref().and_then(|line| {
            Some(StoreClosed {
                commits: field(line, "commits=")?,
                // Every write of a create run is a create.
                pets_written: field(line, "writes=").or_else(|| field(line, "pets_written="))?,
            })
        });
        (status, closed)
    }

    /// SIGKILL, as a crash: no drain, no store close. `reap` collects the process after.
    pub fn crash(&self) {
        signal(self.pid, "KILL");
    }

    /// Waits for a crashed (or otherwise ending) process to exit.
    pub async fn reap(mut self) -> ExitStatus {
        self.wait_exit().await
    }

    async fn wait_exit(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("the server is running");
        let deadline = Instant::now() + EXIT_DEADLINE;
        loop {
            if let Some(status) = child.try_wait().expect("waitpid on our own child") {
                return status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "server {} did not exit within {EXIT_DEADLINE:?}:\n{}",
                    self.pid,
                    self.tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A server's CPU ticks, read at one instant (its database server's with them): all of them,
/// and their user-space part.
#[derive(Clone, Copy, Debug)]
pub struct CpuTicks {
    pub all: u64,
    pub user: u64,
}

/// User + system CPU ticks of process `pid` (all its threads) from /proc/<pid>/stat.
pub fn cpu_ticks(pid: u32) -> Option<u64> {
    user_and_system_ticks(pid).map(|(user, system)| user + system)
}

/// User and system CPU ticks of process `pid` (all its threads) from /proc/<pid>/stat.
fn user_and_system_ticks(pid: u32) -> Option<(u64, u64)> {
    proc_stat(pid).map(|(_, [user, system, ..])| (user, system))
}

/// User and system CPU ticks of `root`, of its children that ended (which it waited for) and
/// of those that run: for PostgreSQL's postmaster, the whole server with its backends.
fn tree_ticks(root: u32) -> (u64, u64) {
    let own = proc_stat(root).map_or((0, 0), |(_, [user, system, child_user, child_system])| {
        (user + child_user, system + child_system)
    });
    children(root)
        .into_iter()
        .filter_map(proc_stat)
        .fold(own, |(user, system), (_, t)| (user + t[0], system + t[1]))
}

/// Pins `root` and its running children to the server CPU; children forked later inherit it.
pub fn pin_tree(root: u32) {
    for pid in std::iter::once(root).chain(children(root)) {
        // A child may end meanwhile: nothing to pin then.
        let _ = Command::new("taskset")
            .args(["-a", "-p", "-c", SERVER_CPU, &pid.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// The pids whose parent is `root`.
fn children(root: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| proc_stat(pid).is_some_and(|(ppid, _)| ppid == root))
        .collect()
}

/// ppid and (utime, stime, cutime, cstime) of `pid` from /proc/<pid>/stat.
fn proc_stat(pid: u32) -> Option<(u32, [u64; 4])> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    // Fields after the state (field 3): ppid is field 4; utime to cstime fields 14 to 17.
    let ppid = fields.get(1)?.parse().ok()?;
    let mut ticks = [0; 4];
    for (i, tick) in ticks.iter_mut().enumerate() {
        *tick = fields.get(11 + i)?.parse().ok()?;
    }
    Some((ppid, ticks))
}

/// CPU ticks of a process split by thread: (user, system) of the threads named `name` and
/// of all the others, from /proc/<pid>/task/*/stat. Threads that ended are not counted.
pub fn ticks_by_thread(pid: u32, name: &str) -> Option<[(u64, u64); 2]> {
    let mut split = [(0, 0); 2];
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).ok()? {
        let Ok(stat) = std::fs::read_to_string(task.ok()?.path().join("stat")) else {
            continue;
        };
        let (head, rest) = stat.rsplit_once(')')?;
        let comm = head.split_once('(')?.1;
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let (user, system): (u64, u64) =
            (fields.get(11)?.parse().ok()?, fields.get(12)?.parse().ok()?);
        let slot = &mut split[usize::from(comm != name)];
        slot.0 += user;
        slot.1 += system;
    }
    Some(split)
}

/// Ticks the hypervisor took from the two benchmark CPUs (the `steal` column of /proc/stat),
/// which shows a window the host disturbed: a VM's CPU can be taken for another guest.
pub fn steal_ticks() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let mut total = 0;
    for cpu in [CLIENT_CPU, SERVER_CPU] {
        let prefix = format!("cpu{cpu} ");
        let line = stat.lines().find(|line| line.starts_with(&prefix))?;
        // cpuN user nice system idle iowait irq softirq steal ...
        total += line.split_whitespace().nth(8)?.parse::<u64>().ok()?;
    }
    Some(total)
}

/// `taskset -c SERVER_CPU program`: taskset execs the program, so the child's pid is the
/// server's and /proc/<pid> describes the server.
fn pinned(program: &Path) -> Command {
    let mut command = Command::new("taskset");
    command
        .args(["-c", SERVER_CPU])
        .arg(program)
        .stdin(Stdio::null());
    command
}

fn signal(pid: u32, name: &str) {
    let status = Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill -{name} {pid} failed");
}

/// Reads petstore's stderr to its end: one line per request at full load, so it keeps only
/// what the benchmark asks for and reuses one buffer.
fn drain_petstore(stderr: impl std::io::Read, log: &Mutex<Log>, found: &mpsc::Sender<String>) {
    let mut reader = BufReader::with_capacity(1 << 16, stderr);
    let mut line = Vec::with_capacity(512);
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        // The per-request lines (and getPet's deprecation warning) are most of the volume
        // and none of the interest: skip them before any copy or lock.
        if contains(&line, b"service: request method=") || contains(&line, b"deprecated getPet") {
            continue;
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end();
        let mut log = log.lock().expect("log lock");
        if log.tail.len() == TAIL_LINES {
            log.tail.pop_front();
        }
        log.tail.push_back(text.to_owned());
        if text.contains(" ERROR ") {
            log.errors += 1;
        } else if text.contains("listening on") {
            if let Some(address) = text
                .split_once("address=")
                .and_then(|(_, rest)| rest.split_whitespace().next())
            {
                let _ = found.send(address.to_owned());
            }
        } else if text.contains("store closed") {
            log.store_closed = Some(text.to_owned());
        } else if text.contains("database open") {
            log.database_open = Some(text.to_owned());
        } else if text.contains("delivering to webhook endpoint") {
            log.webhooks_delivering += 1;
        } else if text.contains("webhook delivery failed") {
            log.webhook_failures += 1;
        } else if text.contains("snapshot taken") {
            let taken = (
                field(text, " pets=").unwrap_or(0),
                field(text, " ms=").unwrap_or(0),
            );
            log.snapshots.push(taken);
        }
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// The number after `name` (e.g. `commits=`) in a text log line.
fn field(line: &str, name: &str) -> Option<u64> {
    let (_, rest) = line.split_once(name)?;
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// The bytes a process has caused to be written to storage so far (`write_bytes` of
/// /proc/<pid>/io); None where the kernel does not count them.
pub fn write_bytes(pid: u32) -> Option<u64> {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).ok()?;
    io.lines()
        .find_map(|line| line.strip_prefix("write_bytes:"))
        .and_then(|rest| rest.trim().parse().ok())
}
