//! The PostgreSQL part (issue 11): durable creates (64 clients) and list20 on a local
//! PostgreSQL beside redb in the same run, and group commit against one transaction per create
//! (`--max-write-batch 1`). The cluster is the tests' throwaway one
//! (`tests/support/pg_cluster.rs`), restarted with `fsync=on` (the tests run it without), so a
//! commit waits for its WAL flush as a redb commit waits for its fsync. PostgreSQL's processes
//! are pinned to the server CPU with petstore and their CPU time counts as the server's: one
//! core holds the whole store.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::check::Expect;
use crate::figures::Kind;
use crate::load::Protocol;
use crate::pg_cluster::Cluster;
use crate::process::{self, Server};
use crate::report::thousands;
use crate::{Bench, CLIENTS, LIST20, Pick, Spec};

/// The create scenarios of the part, one row each.
pub const CREATES: &str = "pg create-64";
pub const CREATES_BATCH1: &str = "pg create-64 batch-1";
/// The list scenario, run as rounds of (baseline, redb, PostgreSQL).
pub const LIST: &str = "pg list20";
/// A list round's warm-up: enough for 64 connections and the pool, on servers that stay up.
const LIST_WARMUP: Duration = Duration::from_secs(1);
/// The second database of the cluster, for the batch-of-1 run's fresh store.
const BATCH1_DB: &str = "petstore_b1";

/// A cluster made durable and pinned, with what the part needs of it.
pub struct Durable {
    pub cluster: Cluster,
    pub postmaster: u32,
    /// The CPUs PostgreSQL may run on, as the kernel says after the pinning.
    cpus: String,
}

impl Durable {
    /// A throwaway cluster, restarted with `fsync=on` and pinned to the server CPU.
    pub fn start() -> Result<Durable, String> {
        let cluster = Cluster::start();
        let data = cluster.psql("SHOW data_directory");
        let bin = cluster.psql("SELECT setting FROM pg_config WHERE name = 'BINDIR'");
        let data = Path::new(&data);
        let log = data
            .parent()
            .ok_or("the data directory has a parent")?
            .join("server.log");
        // The options the harness starts it with, but fsync on: a restart replaces them all.
        let options = format!(
            "-p {port} -k '{data}' -c listen_addresses=127.0.0.1 -c fsync=on",
            port = cluster.port(),
            data = data.display()
        );
        let mut pg_ctl = if is_root() {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]);
            command.arg(Path::new(&bin).join("pg_ctl"));
            command
        } else {
            Command::new(Path::new(&bin).join("pg_ctl"))
        };
        let output = pg_ctl
            .arg("-D")
            .arg(data)
            .args(["-w", "-t", "60", "-l"])
            .arg(&log)
            .args(["-o", &options, "restart"])
            .env("LC_ALL", "C")
            .output()
            .map_err(|e| format!("pg_ctl: {e}"))?;
        if !output.status.success() {
            return Err(format!(
                "pg_ctl restart with fsync=on: {}",
                String::from_utf8_lossy(&output.stderr)
            ));
        }
        let fsync = cluster.psql("SHOW fsync");
        if fsync != "on" {
            return Err(format!("fsync is {fsync} after the restart"));
        }
        let pid = std::fs::read_to_string(data.join("postmaster.pid"))
            .map_err(|e| format!("postmaster.pid: {e}"))?;
        let postmaster = pid
            .lines()
            .next()
            .and_then(|line| line.trim().parse().ok())
            .ok_or("postmaster.pid starts with the pid")?;
        process::pin_tree(postmaster);
        let status = std::fs::read_to_string(format!("/proc/{postmaster}/status"))
            .map_err(|e| format!("the postmaster's status: {e}"))?;
        let cpus = status
            .lines()
            .find_map(|line| line.strip_prefix("Cpus_allowed_list:"))
            .map(str::trim)
            .unwrap_or("?")
            .to_owned();
        cluster.psql(&format!("CREATE DATABASE {BATCH1_DB}"));
        Ok(Durable {
            cluster,
            postmaster,
            cpus,
        })
    }

    /// The URL of `database` on the cluster.
    pub fn url(&self, database: &str) -> String {
        self.cluster
            .url()
            .replace("/petstore?", &format!("/{database}?"))
    }

    /// Transactions committed in `database` so far (`pg_stat_database`, updated when a
    /// backend is idle or ends: read it after the petstore stopped).
    fn commits(&self, database: &str) -> u64 {
        self.cluster
            .psql(&format!(
                "SELECT pg_stat_force_next_flush(); SELECT xact_commit FROM pg_stat_database \
                 WHERE datname = '{database}'"
            ))
            .lines()
            .last()
            .and_then(|line| line.trim().parse().ok())
            .unwrap_or(0)
    }

    fn pets(&self, database: &str) -> u64 {
        let count = self
            .cluster
            .psql(&format!("\\c {database}\nSELECT count(*) FROM pets"));
        count
            .lines()
            .last()
            .and_then(|line| line.trim().parse().ok())
            .unwrap_or(0)
    }
}

/// Where Debian puts each major version's server binaries, as the harness looks for them.
pub const PG_LIB: &str = "/usr/lib/postgresql";

/// Whether the harness will find server binaries (it panics when it does not).
pub fn installed() -> bool {
    std::fs::read_dir(PG_LIB)
        .into_iter()
        .flatten()
        .flatten()
        .any(|entry| entry.path().join("bin/initdb").is_file())
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
}

impl Bench<'_> {
    /// The whole part; `baseline` is the running baseline server for the list rounds.
    pub async fn postgres(&mut self, baseline: &Server) {
        if !installed() {
            self.report.note(format!(
                "PostgreSQL part skipped: no {PG_LIB}/*/bin/initdb (apt-get install postgresql)"
            ));
            return;
        }
        let pg = match Durable::start() {
            Ok(pg) => pg,
            Err(why) => {
                self.report.fail(format!("PostgreSQL part: {why}"));
                return;
            }
        };
        self.report.note(format!(
            "PostgreSQL {} on CPU {} with fsync=on, synchronous_commit={}",
            pg.cluster.psql("SHOW server_version"),
            pg.cpus,
            pg.cluster.psql("SHOW synchronous_commit")
        ));
        let args = self.settings.petstore_args.clone();
        let window = self.settings.window;

        // redb, on a fresh file, kept for its list rounds.
        let dir = tempfile::tempdir().expect("a temp dir for the redb store");
        let redb_file = dir.path().join("pets.redb");
        let server = Server::petstore(&redb_file, &args);
        let spec = Spec::create(CREATES, CLIENTS, window, self.settings.warmup);
        if let Some(closed) = self.create_run(&spec, server, Kind::Petstore, None).await {
            self.report.note(format!(
                "{CREATES} on redb: mean batch {:.1} ({} commits)",
                closed.pets_written as f64 / closed.commits.max(1) as f64,
                thousands(closed.commits)
            ));
        }

        // PostgreSQL, group commit, then one transaction per create on a database of its own.
        for (scenario, database, extra) in [
            (CREATES, "petstore", None),
            (CREATES_BATCH1, BATCH1_DB, Some("1")),
        ] {
            let mut server_args = vec!["--max-write-batch".to_owned()];
            server_args.push(extra.unwrap_or("1024").to_owned());
            server_args.extend(args.iter().cloned());
            let server = Server::petstore(Path::new(&pg.url(database)), &server_args)
                .with_database(pg.postmaster);
            let before = pg.commits(database);
            let spec = Spec::create(scenario, CLIENTS, window, self.settings.warmup);
            let (answered, _) = self.measure(&spec, &server, Kind::Postgres, Some(0)).await;
            self.stop(server, scenario).await;
            let commits = pg.commits(database).saturating_sub(before);
            let pets = pg.pets(database);
            self.report.note(format!(
                "{scenario} on PostgreSQL: {} pets in about {} transactions: mean batch {:.1}",
                thousands(pets),
                thousands(commits),
                pets as f64 / commits.max(1) as f64
            ));
            if pets < answered {
                self.report.fail(format!(
                    "{scenario}: {answered} creates answered 201 but PostgreSQL holds {pets} pets"
                ));
            }
        }

        // list20 on both stores as they are after their create runs, against the baseline.
        let redb = Server::petstore(&redb_file, &args);
        let postgres =
            Server::petstore(Path::new(&pg.url("petstore")), &args).with_database(pg.postmaster);
        let (redb_pets, pg_pets) = (redb.pets_at_start(), postgres.pets_at_start());
        for round in 0..self.settings.rounds {
            for (target, kind, pets) in [
                (baseline, Kind::Baseline, None),
                (&redb, Kind::Petstore, redb_pets),
                (&postgres, Kind::Postgres, pg_pets),
            ] {
                let spec = Spec {
                    scenario: LIST,
                    protocol: Protocol::Http1,
                    clients: CLIENTS,
                    pick: Pick::Path(LIST20),
                    expect: Expect::List20,
                    warmup: LIST_WARMUP.min(self.settings.warmup),
                    window: self.settings.window.div_f64(self.settings.rounds as f64),
                    round,
                };
                self.measure(&spec, target, kind, pets).await;
            }
        }
        self.stop(redb, "redb list").await;
        self.stop(postgres, "PostgreSQL list").await;
        drop(pg);
    }
}
