//! A throwaway PostgreSQL cluster for tests: `initdb` in a temp dir, a server on a free
//! loopback port with its socket in the data dir, the database `petstore`, trust auth for the
//! user `postgres`; optionally a synchronous streaming standby to fail over to. As root, every
//! server tool runs as the `postgres` user through `runuser`, since PostgreSQL refuses root.
//! Dropping a cluster stops its server at once and removes its directory. Every wait has a
//! bound; a failure panics with the command's output and the server log.
//!
//! Test support shared by three crates, so self-contained (std and `tempfile` only): the store
//! suite (`src/store/suite.rs`, in the binary's unit tests), the API tests (`tests/api`) and
//! the load bench (`benches/load`) each include this file with `#[path]`.

// Each crate that includes this file uses only part of it.
#![allow(dead_code)]

use std::fmt::Write as _;
use std::fs;
use std::io::Write as _;
use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{OnceLock, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// Where Debian installs each major version's server binaries, as `VERSION/bin/`.
const PG_LIB: &str = "/usr/lib/postgresql";
/// The bound `pg_ctl` puts on its own waits (start, stop, promote), in seconds.
const PG_CTL_SECONDS: u64 = 30;
/// The bound on any one command; above `PG_CTL_SECONDS` so that `pg_ctl` reports first.
const COMMAND_DEADLINE: Duration = Duration::from_secs(PG_CTL_SECONDS + 15);
/// The bound on a standby becoming synchronous, and on a promoted one taking writes.
const REPLICATION_DEADLINE: Duration = Duration::from_secs(30);
/// How often a replication wait asks the server again.
const POLL_INTERVAL: Duration = Duration::from_millis(20);
/// How many free ports a start tries when another process takes the port first.
const START_ATTEMPTS: usize = 5;
/// The database every cluster gets, and its URLs name.
const DATABASE: &str = "petstore";

/// A running (or crashed) PostgreSQL server with its own data directory.
pub struct Cluster {
    /// Holds the data directory and the server log; removed on drop, after the server stops.
    dir: TempDir,
    port: u16,
    /// The processes `freeze` stopped, to continue at `thaw` (and before a drop's stop).
    frozen: Vec<u32>,
}

/// The server binaries and who must run them, found once per test process.
struct Tools {
    bin: PathBuf,
    /// The `postgres` user's uid and gid when this process is root; `None` runs tools as is.
    postgres: Option<(u32, u32)>,
}

fn tools() -> &'static Tools {
    static TOOLS: OnceLock<Tools> = OnceLock::new();
    TOOLS.get_or_init(|| Tools {
        bin: newest_bin_dir(),
        postgres: is_root().then(postgres_ids),
    })
}

/// The `bin` directory of the newest major version under `/usr/lib/postgresql`.
fn newest_bin_dir() -> PathBuf {
    let newest = fs::read_dir(PG_LIB)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").is_file().then_some((version, bin))
        })
        .max_by_key(|(version, _)| *version);
    match newest {
        Some((_, bin)) => bin,
        None => panic!(
            "PostgreSQL tests need {PG_LIB}/*/bin/initdb, which is missing: install Debian's \
             server package (apt-get install -y postgresql)"
        ),
    }
}

/// Whether the effective uid is 0, from `/proc/self/status` ("Uid: real effective ...").
fn is_root() -> bool {
    let status = fs::read_to_string("/proc/self/status").expect("Linux has /proc/self/status");
    let effective = status
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1))
        .expect("/proc/self/status has a Uid line");
    effective == "0"
}

fn postgres_ids() -> (u32, u32) {
    let id = |flag: &str| -> u32 {
        let out = run(Command::new("id").args([flag, "postgres"]), None)
            .unwrap_or_else(|e| panic!("as root, PostgreSQL tests need the user postgres: {e}"));
        out.trim().parse().expect("id prints a number")
    };
    (id("-u"), id("-g"))
}

/// A directory for temp dirs that the `postgres` user can reach: `$TMPDIR` if every ancestor
/// lets others through (a root-only `/root/tmp` would not), else `/tmp`.
fn temp_base() -> PathBuf {
    let base = std::env::temp_dir();
    let traversable = base
        .ancestors()
        .all(|dir| fs::metadata(dir).is_ok_and(|meta| meta.permissions().mode() & 0o001 != 0));
    if tools().postgres.is_none() || traversable {
        base
    } else {
        PathBuf::from("/tmp")
    }
}

/// Runs a command to its end with `stdin` as its input, within `COMMAND_DEADLINE`; returns its
/// stdout, or what went wrong with its whole output.
fn run(command: &mut Command, stdin: Option<&str>) -> Result<String, String> {
    let shown = std::iter::once(command.get_program())
        .chain(command.get_args())
        .map(|arg| arg.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ");
    let mut child = command
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{shown}: cannot run: {e}"))?;
    let pid = child.id();
    let input = child.stdin.take().zip(stdin.map(str::to_owned));
    let (done, finished) = mpsc::channel();
    thread::spawn(move || {
        if let Some((mut pipe, text)) = input {
            // A command that fails early closes its input; its output says why.
            let _ = pipe.write_all(text.as_bytes());
        }
        let _ = done.send(child.wait_with_output());
    });
    let output: Output = match finished.recv_timeout(COMMAND_DEADLINE) {
        Ok(output) => output.map_err(|e| format!("{shown}: {e}"))?,
        Err(_) => {
            // TERM first: runuser passes it on to the tool it runs, where KILL would not.
            let _ = Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
            if finished.recv_timeout(Duration::from_secs(5)).is_err() {
                let _ = Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
            }
            return Err(format!("{shown}: no exit within {COMMAND_DEADLINE:?}"));
        }
    };
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    if output.status.success() {
        Ok(stdout)
    } else {
        Err(format!(
            "{shown}: {}\nstdout:\n{stdout}\nstderr:\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

/// A command for the tool `name` from the server binaries, started in `cwd`, with no `PG*`
/// variable of the caller's (they would redirect it) and English messages. `server_side`
/// tools (initdb, pg_ctl, pg_basebackup) run as `postgres` when this process is root.
fn tool(name: &str, cwd: &Path, server_side: bool) -> Command {
    let tools = tools();
    let program = tools.bin.join(name);
    let mut command = if server_side && tools.postgres.is_some() {
        let mut command = Command::new("runuser");
        command.args(["-u", "postgres", "--"]).arg(program);
        command
    } else {
        Command::new(program)
    };
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("PG") {
            command.env_remove(key);
        }
    }
    command
        .current_dir(cwd)
        .env("LC_ALL", "C")
        .env("PGCONNECT_TIMEOUT", "10");
    command
}

/// A port nobody listens on now. The kernel may hand it to someone else before the server
/// binds it; a start that then finds it taken tries another.
fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|listener| listener.local_addr())
        .expect("binding 127.0.0.1:0 gives a free port")
        .port()
}

impl Cluster {
    /// Makes a new cluster with the database `petstore` and starts it on a free port.
    #[track_caller]
    pub fn start() -> Cluster {
        let mut cluster = Cluster::empty();
        let mut initdb = tool("initdb", cluster.dir.path(), true);
        // C collation and UTF-8 whatever the environment says; no fsync, as at the server.
        initdb
            .arg("-D")
            .arg(cluster.data())
            .args(["-A", "trust", "-U", "postgres"])
            .args(["-E", "UTF8", "--locale=C", "-N"]);
        if let Err(e) = run(&mut initdb, None) {
            panic!("initdb failed: {e}");
        }
        cluster.start_on_free_port();
        let mut createdb = tool("createdb", cluster.dir.path(), false);
        createdb
            .args(["-h", "127.0.0.1", "-p", &cluster.port.to_string()])
            .args(["-U", "postgres", DATABASE]);
        if let Err(e) = run(&mut createdb, None) {
            cluster.fail(&format!("createdb failed: {e}"));
        }
        cluster
    }

    /// A temp dir the `postgres` user owns (mode 755), for a data dir and a log not yet made.
    fn empty() -> Cluster {
        let dir = tempfile::Builder::new()
            .prefix("petstore-pg-")
            .tempdir_in(temp_base())
            .expect("a temp dir for a PostgreSQL cluster");
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755))
            .expect("the temp dir is ours to chmod");
        if let Some((uid, gid)) = tools().postgres {
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid))
                .expect("root can give the temp dir to postgres");
        }
        Cluster {
            dir,
            port: 0,
            frozen: Vec::new(),
        }
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("server.log")
    }

    /// The server log so far, for failure messages.
    pub fn log(&self) -> String {
        fs::read_to_string(self.log_path()).unwrap_or_else(|e| format!("(no server log: {e})"))
    }

    #[track_caller]
    fn fail(&self, what: &str) -> ! {
        panic!(
            "{what}\nserver log ({}):\n{}",
            self.log_path().display(),
            self.log()
        )
    }

    /// The URL of the database `petstore` on this server, for the store's configuration.
    pub fn url(&self) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/{DATABASE}?sslmode=disable",
            self.port
        )
    }

    /// The TCP port on 127.0.0.1, the same across `crash` and `restart`.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Starts the server on a new free port, trying another when one was taken meanwhile.
    #[track_caller]
    fn start_on_free_port(&mut self) {
        for attempt in 1..=START_ATTEMPTS {
            self.port = free_port();
            let before = fs::metadata(self.log_path()).map_or(0, |log| log.len() as usize);
            match self.pg_ctl_start() {
                Ok(()) => return,
                Err(e) => {
                    let clash = self
                        .log()
                        .get(before..)
                        .is_some_and(|new| new.contains("Address already in use"));
                    if !(clash && attempt < START_ATTEMPTS) {
                        self.fail(&format!("PostgreSQL did not start: {e}"));
                    }
                }
            }
        }
    }

    /// `pg_ctl start` on this cluster's port, waiting until the server takes connections.
    fn pg_ctl_start(&self) -> Result<(), String> {
        let data = self.data();
        let data = data.to_str().expect("temp dir paths are UTF-8");
        // pg_ctl hands `-o` to a shell; tempfile names hold no quote.
        assert!(!data.contains('\''), "a data dir path without quotes");
        // fsync=off: a commit still reaches the kernel before it is acknowledged, so it
        // survives the server's crash, which is all a test makes happen; and the restart
        // after a crash no longer fsyncs the whole data dir first (seconds here).
        let options = format!(
            "-p {port} -k '{data}' -c listen_addresses=127.0.0.1 -c cluster_name=petstore-{port} \
             -c fsync=off",
            port = self.port
        );
        let log = self.log_path();
        let log = log.to_str().expect("temp dir paths are UTF-8");
        self.pg_ctl(&["-l", log, "-o", &options, "start"])
    }

    /// `pg_ctl -m immediate stop`: the server dies as in a crash, and recovers at `restart`.
    fn pg_ctl_stop(&self) -> Result<(), String> {
        self.pg_ctl(&["-m", "immediate", "stop"])
    }

    /// `pg_ctl` on this cluster's data dir, waiting (within its bound) for the action's end.
    fn pg_ctl(&self, args: &[&str]) -> Result<(), String> {
        let mut pg_ctl = tool("pg_ctl", self.dir.path(), true);
        pg_ctl
            .arg("-D")
            .arg(self.data())
            .args(["-w", "-t", &PG_CTL_SECONDS.to_string()])
            .args(args);
        run(&mut pg_ctl, None).map(drop)
    }

    /// Kills the server as a crash would (`pg_ctl -m immediate stop`); the data stays.
    #[track_caller]
    pub fn crash(&self) {
        if let Err(e) = self.pg_ctl_stop() {
            self.fail(&format!("the immediate stop failed: {e}"));
        }
    }

    /// Starts the server again on the same port and data, after `crash`.
    #[track_caller]
    pub fn restart(&self) {
        if let Err(e) = self.pg_ctl_start() {
            self.fail(&format!("PostgreSQL did not start again: {e}"));
        }
    }

    /// Makes the server go silent without closing anything: SIGSTOP to the postmaster, then to
    /// every one of its children (backends, walsender, checkpointer...). Open connections stay
    /// open and unanswered, and a new one is accepted by the kernel and then never answered, as
    /// with a hung server or a host gone behind a firewall that drops packets. `thaw` ends it.
    #[track_caller]
    pub fn freeze(&mut self) {
        assert!(self.frozen.is_empty(), "the cluster is frozen already");
        let postmaster = self.postmaster_pid();
        // The postmaster first, so that it forks no child after the children are listed.
        signal(postmaster, "STOP");
        self.frozen.push(postmaster);
        for child in children(postmaster) {
            signal(child, "STOP");
            self.frozen.push(child);
        }
    }

    /// Lets the processes `freeze` stopped run again (children first, as they were stopped last).
    pub fn thaw(&mut self) {
        for pid in self.frozen.drain(..).rev() {
            signal(pid, "CONT");
        }
    }

    /// The postmaster's pid, the first line of `postmaster.pid` in the data dir.
    #[track_caller]
    fn postmaster_pid(&self) -> u32 {
        let text = fs::read_to_string(self.data().join("postmaster.pid"))
            .unwrap_or_else(|e| self.fail(&format!("no postmaster.pid: {e}")));
        text.lines()
            .next()
            .and_then(|line| line.trim().parse().ok())
            .unwrap_or_else(|| self.fail(&format!("postmaster.pid without a pid: {text:?}")))
    }

    /// Runs SQL (one or more statements) in the database `petstore` with `psql -At`; returns
    /// the rows it printed, one per line, without the last newline. Panics if a statement fails.
    #[track_caller]
    pub fn psql(&self, sql: &str) -> String {
        match self.try_psql(sql) {
            Ok(out) => out,
            Err(e) => self.fail(&e),
        }
    }

    fn try_psql(&self, sql: &str) -> Result<String, String> {
        let mut psql = tool("psql", self.dir.path(), false);
        // From standard input, psql sends each statement on its own, so that statements that
        // refuse a transaction block (ALTER SYSTEM) can share a script.
        psql.args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1"])
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(["-U", "postgres", "-d", DATABASE, "-f", "-"]);
        let out = run(&mut psql, Some(sql))?;
        Ok(out.strip_suffix('\n').unwrap_or(&out).to_owned())
    }

    /// Adds the role `user`, owner of the database `petstore`, who must give `password`
    /// (scram-sha-256) over TCP; `postgres` keeps trust. Returns once the server asks for it.
    #[track_caller]
    pub fn add_password_user(&self, user: &str, password: &str) {
        self.psql(&format!(
            "CREATE ROLE {user} LOGIN PASSWORD '{password}';\n\
             ALTER DATABASE {DATABASE} OWNER TO {user};"
        ));
        let hba = self.data().join("pg_hba.conf");
        let rules = fs::read_to_string(&hba).unwrap_or_else(|e| self.fail(&format!("{e}")));
        // The first matching line decides, so this one goes first.
        let rule = format!("host all {user} 127.0.0.1/32 scram-sha-256\n");
        fs::write(&hba, rule + &rules).unwrap_or_else(|e| self.fail(&format!("{e}")));
        self.psql("SELECT pg_reload_conf();");
        // The reload reaches the postmaster in its own time; until then `user` gets in freely.
        let deadline = Instant::now() + REPLICATION_DEADLINE;
        loop {
            let mut psql = tool("psql", self.dir.path(), false);
            psql.args(["-X", "-w", "-A", "-t", "-c", "SELECT 1"])
                .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
                .args(["-U", user, "-d", DATABASE]);
            match run(&mut psql, None) {
                Err(e) if e.contains("password") => return,
                _ if Instant::now() > deadline => {
                    self.fail(&format!("{user} still gets in without a password"))
                }
                _ => thread::sleep(POLL_INTERVAL),
            }
        }
    }

    /// Turns TLS on with the certificate chain and key in these PEM files (copied into the
    /// data dir, owned by the server's user, mode 0600 as PostgreSQL demands of a key), and
    /// returns once a new connection can use it.
    #[track_caller]
    pub fn enable_tls(&self, cert: &Path, key: &Path) {
        for (from, name) in [(cert, "server.crt"), (key, "server.key")] {
            let to = self.data().join(name);
            fs::copy(from, &to).unwrap_or_else(|e| self.fail(&format!("{e}")));
            fs::set_permissions(&to, fs::Permissions::from_mode(0o600))
                .unwrap_or_else(|e| self.fail(&format!("{e}")));
            if let Some((uid, gid)) = tools().postgres {
                std::os::unix::fs::chown(&to, Some(uid), Some(gid))
                    .unwrap_or_else(|e| self.fail(&format!("{e}")));
            }
        }
        self.psql("ALTER SYSTEM SET ssl = on;\nSELECT pg_reload_conf();");
        let deadline = Instant::now() + REPLICATION_DEADLINE;
        while self.psql("SHOW ssl") != "on" {
            if Instant::now() > deadline {
                self.fail("ssl is still off after the reload");
            }
            thread::sleep(POLL_INTERVAL);
        }
    }

    /// Makes a streaming standby of this server on another free port and makes it synchronous,
    /// so that every commit acknowledged here is on the standby too. Meant for one standby per
    /// primary: returns once this one shows `sync_state = 'sync'` in `pg_stat_replication`.
    #[track_caller]
    pub fn start_standby(&self) -> Cluster {
        self.psql("ALTER SYSTEM SET synchronous_standby_names = '*';\nSELECT pg_reload_conf();");
        let mut standby = Cluster::empty();
        let mut backup = tool("pg_basebackup", standby.dir.path(), true);
        // -R writes standby.signal and primary_conninfo; a fast checkpoint starts the copy now.
        let port = self.port.to_string();
        backup
            .args(["-h", "127.0.0.1", "-p", &port, "-U", "postgres"])
            .arg("-D")
            .arg(standby.data())
            .args(["-R", "-X", "stream", "-c", "fast", "-N"]);
        if let Err(e) = run(&mut backup, None) {
            self.fail(&format!("pg_basebackup failed: {e}"));
        }
        standby.start_on_free_port();
        // The walreceiver's application_name is the standby's cluster_name.
        let query = format!(
            "SELECT sync_state FROM pg_stat_replication \
             WHERE application_name = 'petstore-{}'",
            standby.port
        );
        let deadline = Instant::now() + REPLICATION_DEADLINE;
        loop {
            let state = self.psql(&query);
            if state == "sync" {
                return standby;
            }
            if Instant::now() > deadline {
                standby.fail(&format!(
                    "the standby on port {} is not synchronous after {REPLICATION_DEADLINE:?} \
                     (sync_state {state:?});\nprimary log:\n{}",
                    standby.port,
                    self.log()
                ));
            }
            thread::sleep(POLL_INTERVAL);
        }
    }

    /// Promotes a standby (`pg_ctl promote`) and returns once it commits writes on its own.
    #[track_caller]
    pub fn promote(&self) {
        if let Err(e) = self.pg_ctl(&["promote"]) {
            self.fail(&format!("pg_ctl promote failed: {e}"));
        }
        // pg_basebackup copied synchronous_standby_names = '*': left alone, the new primary
        // would wait for a standby of its own at every commit. Patroni resets it too.
        self.psql("ALTER SYSTEM RESET synchronous_standby_names;\nSELECT pg_reload_conf();");
        // pg_ctl returns once the control file says "in production", a moment before
        // transactions may write; and the reload reaches the server's processes in its time.
        // A commit with an xid waits for both (a waiting commit is released by the reload).
        let deadline = Instant::now() + REPLICATION_DEADLINE;
        loop {
            match self.try_psql("SELECT txid_current();") {
                Ok(_) => return,
                Err(e) if Instant::now() > deadline => {
                    self.fail(&format!("the promoted server takes no writes: {e}"))
                }
                Err(_) => thread::sleep(POLL_INTERVAL),
            }
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // A stopped postmaster would leave its SIGQUIT pending and pg_ctl waiting.
        self.thaw();
        // It may have crashed already, or never started: then there is nothing to stop.
        let _ = self.pg_ctl_stop();
    }
}

/// Sends a signal by name; a process that has already gone is no error.
fn signal(pid: u32, name: &str) {
    let _ = Command::new("kill")
        .args([format!("-{name}"), pid.to_string()])
        .stderr(Stdio::null())
        .status();
}

/// The processes whose parent is `parent`, from `/proc/*/stat` (field 4 is the parent's pid,
/// after the command name in parentheses, which may itself hold spaces and parentheses).
fn children(parent: u32) -> Vec<u32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let stat = fs::read_to_string(entry.path().join("stat")).ok()?;
            let (_, after_name) = stat.rsplit_once(')')?;
            let ppid: u32 = after_name.split_whitespace().nth(1)?.parse().ok()?;
            (ppid == parent).then_some(pid)
        })
        .collect()
}

/// A URL naming every cluster's host, for a client that must find the one taking writes
/// (`target_session_attrs=read-write`), as after a failover.
pub fn hosts_url(clusters: &[&Cluster]) -> String {
    let mut hosts = String::new();
    for (i, cluster) in clusters.iter().enumerate() {
        let comma = if i == 0 { "" } else { "," };
        let _ = write!(hosts, "{comma}127.0.0.1:{}", cluster.port);
    }
    format!(
        "postgres://postgres@{hosts}/{DATABASE}?sslmode=disable&target_session_attrs=read-write"
    )
}
