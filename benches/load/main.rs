//! The load benchmark (`cargo bench --bench load`): the release petstore against a baseline
//! server of the same crates and TLS setup that does no work, each pinned to one CPU while the
//! load generator runs on the other, reported per server core. This file orchestrates the
//! runs (fills, scenarios, store sizes, start-up, crash) and prints the report; it never
//! asserts on a timing, and exits non-zero only when an answer or a stop was wrong.

mod baseline;
mod builds;
mod check;
mod client;
mod deep;
mod events;
mod figures;
mod fill;
mod goals;
mod load;
mod names;
// The server's rules for names, which the search part checks its pages by.
#[path = "../../src/search.rs"]
#[allow(
    dead_code,
    reason = "the bench uses the matching and sorting rules only"
)]
mod name_rules;
mod orders;
mod pg;
#[path = "../../tests/support/pg_cluster.rs"]
mod pg_cluster;
mod process;
mod receiver;
mod report;
mod search;
mod settings;
mod snapshot;
mod webhooks;

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use crate::check::{Expect, check};
use crate::client::Tls;
use crate::figures::Kind;
use crate::load::{Protocol, Workload};
use crate::process::Server;
use crate::report::{Report, Row, thousands};
use crate::settings::Settings;

/// The argument that makes this binary the baseline server instead of the benchmark.
pub const BASELINE_FLAG: &str = "--baseline-server";

/// HTTP/1.1 clients, each with its own keep-alive connection.
const CLIENTS: usize = 64;
const H2: Protocol = Protocol::Http2 {
    connections: 4,
    streams: 16,
};
const LIST20: &str = "/v1/pets?limit=20";
const SOLD20: &str = "/v1/pets?status=sold&limit=20";
const NEW_PET: &str = r#"{"name":"bench","categoryId":1,"status":"available"}"#;
/// The create-keyed part's scenarios: creates without a key, and each with its own key.
pub const KEYED_PLAIN: &str = "create-keyed plain";
pub const KEYED_KEYED: &str = "create-keyed keyed";
/// The read scenarios' store, and the steps of the scaling runs.
pub const READ_STORE: u64 = 100_000;
pub const SCALE_STEPS: [u64; 3] = [10_000, 100_000, 1_000_000];
/// The status filter on a copy of the 10k store (first) and on the 1M store, in back-to-back
/// rounds: the scaling goal compares these, as the single windows above run minutes apart
/// on a host whose speed drifts.
pub const SCALE_PAIR: [&str; 2] = ["scale pair sold20 10k", "scale pair sold20 1M"];
/// A paired round's warm-up on a warm server: only its connections are new.
const PAIR_WARMUP: Duration = Duration::from_millis(500);
/// How long the creates run before the crash's SIGKILL, and in all.
/// The name petstore gives its redb writer thread (src/store.rs).
const WRITER_THREAD: &str = "petstore-writer";
const CRASH_AFTER: Duration = Duration::from_secs(1);
const CRASH_LOAD: Duration = Duration::from_secs(3);
/// A start-up that takes longer than this is reported as not answering.
const START_LIMIT: Duration = Duration::from_secs(60);

/// What the columns mean, printed above the first row.
const LEGEND: &str = "\
servers pinned to CPU 1 (one core each), load generator (one thread) on CPU 0
server      petstore = on a redb file; postgres = on a local PostgreSQL, itself pinned to CPU 1,
            whose processes' CPU counts in the cpu column
cpu         server CPU time / wall time over the window (1.00 = one core busy)
req/s/core  req/s / cpu; vs base = petstore's req/s/core over the baseline's
non-2xx     answers other than 2xx, errors = connection or I/O failures (warm-up included)
rss         the server's peak resident memory (VmHWM) at the end of the run
client cpu  the same as cpu for this process (load generator and log drain) on CPU 0
steal       CPU time the hypervisor took from CPUs 0 and 1, in cores (a disturbed window)
";

fn main() -> ExitCode {
    // cargo passes `--bench` (and any filter) to a bench binary; only the baseline flag counts.
    if std::env::args().skip(1).any(|arg| arg == BASELINE_FLAG) {
        baseline::run();
        return ExitCode::SUCCESS;
    }
    process::pin_self();
    let settings = Settings::from_env();
    // One thread on CPU 0: the load generator has exactly the core the servers do not use.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("the client runtime starts");
    let started = std::time::Instant::now();
    let mut report = runtime.block_on(bench(&settings));
    report.note(format!(
        "the benchmark took {:.0} s",
        started.elapsed().as_secs_f64()
    ));
    println!("\n{}", report.render());
    if report.failed() {
        println!("the run FAILED: see the checks above");
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// The scenarios run against both servers on the read store, in this order.
fn read_scenarios(pets: u64) -> [(&'static str, Protocol, Expect, Pick<'static>); 5] {
    [
        (
            "list20",
            Protocol::Http1,
            Expect::List20,
            Pick::Path(LIST20),
        ),
        ("list20-h2", H2, Expect::List20, Pick::Path(LIST20)),
        (
            "status-filter",
            Protocol::Http1,
            Expect::OnlySold,
            Pick::Path(SOLD20),
        ),
        (
            "get-one",
            Protocol::Http1,
            Expect::AskedPet,
            Pick::Ids(pets),
        ),
        (
            "handshake",
            Protocol::Handshake,
            Expect::List20,
            Pick::Path(LIST20),
        ),
    ]
}

/// Which requests a scenario sends.
#[derive(Clone, Copy)]
enum Pick<'a> {
    Path(&'a str),
    Ids(u64),
    Create,
    /// Creates, each with an `Idempotency-Key` of its own.
    CreateKeyed,
    /// Creates with these bodies in turn (named pets, `fill::named_creates`).
    CreateNamed(&'a [bytes::Bytes]),
    /// Orders, each for the next pet of this counter.
    Order(&'a Arc<AtomicU64>),
}

impl Pick<'_> {
    fn workload(self, server: &Server, protocol: Protocol) -> Workload {
        match self {
            Pick::Path(path) => Workload::get(server.addr, protocol, path),
            Pick::Ids(pets) => Workload::get_one(server.addr, protocol, pets),
            Pick::Create => Workload::create(server.addr, protocol, NEW_PET),
            Pick::CreateKeyed => Workload::create_keyed(server.addr, protocol, NEW_PET),
            Pick::CreateNamed(bodies) => {
                Workload::create_named(server.addr, protocol, bodies.to_vec())
            }
            Pick::Order(next_pet) => Workload::order(server.addr, protocol, Arc::clone(next_pet)),
        }
    }
}

/// One scenario as run: what is sent, how, by how many clients, and for how long.
struct Spec<'a> {
    scenario: &'a str,
    protocol: Protocol,
    /// HTTP/1.1 clients; an HTTP/2 protocol brings its own count.
    clients: usize,
    pick: Pick<'a>,
    expect: Expect,
    warmup: Duration,
    window: Duration,
    /// Which back-to-back pair this run belongs to (see `Settings::rounds`).
    round: usize,
}

impl Spec<'_> {
    /// One round of a back-to-back pair on `path` (the deep pages, the scaling pairs): the
    /// scaling window split over the rounds. A server that is already warm only opens its
    /// connections (`PAIR_WARMUP`); a `cold` one gets the full warm-up in round 0.
    fn paired<'a>(
        scenario: &'a str,
        path: &'a str,
        expect: Expect,
        round: usize,
        settings: &Settings,
        cold: bool,
    ) -> Spec<'a> {
        Spec {
            scenario,
            protocol: Protocol::Http1,
            clients: CLIENTS,
            pick: Pick::Path(path),
            expect,
            warmup: if cold && round == 0 {
                settings.warmup
            } else {
                PAIR_WARMUP.min(settings.warmup)
            },
            window: settings.scale_window.div_f64(settings.rounds as f64),
            round,
        }
    }

    fn create(scenario: &str, clients: usize, window: Duration, warmup: Duration) -> Spec<'_> {
        Spec {
            scenario,
            protocol: Protocol::Http1,
            clients,
            pick: Pick::Create,
            expect: Expect::Created,
            warmup,
            window,
            round: 0,
        }
    }
}

/// The shared parts of every run.
struct Bench<'a> {
    settings: &'a Settings,
    tls: Arc<Tls>,
    report: Report,
}

impl Bench<'_> {
    /// One run of `spec` on `server`, checked and reported as a row. Returns the 2xx answers
    /// of the whole run and its length, which a create run needs.
    async fn measure(
        &mut self,
        spec: &Spec<'_>,
        server: &Server,
        kind: Kind,
        pets: Option<u64>,
    ) -> (u64, Duration) {
        let never = std::future::pending();
        self.measure_until(spec, server, kind, pets, never).await
    }

    /// `measure`, whose window also closes when `end` finishes (see `load::run_until`).
    async fn measure_until(
        &mut self,
        spec: &Spec<'_>,
        server: &Server,
        kind: Kind,
        pets: Option<u64>,
        end: impl std::future::Future<Output = ()>,
    ) -> (u64, Duration) {
        let errors_before = server.logged_errors();
        let work = spec.pick.workload(server, spec.protocol);
        let outcome = load::run_until(
            server,
            &self.tls,
            spec.protocol,
            spec.protocol.clients(spec.clients),
            work,
            spec.warmup,
            spec.window,
            end,
        )
        .await;
        // The baseline answers every request with the list, whatever was asked.
        let expect = match kind {
            Kind::Petstore | Kind::Postgres => spec.expect,
            Kind::Baseline => Expect::List20,
        };
        let verdict = check(expect, outcome.sample.as_ref());
        let errors = server.logged_errors() - errors_before;
        let verdict = match verdict {
            Ok(()) if errors > 0 => Err(format!("the server logged {errors} ERROR lines")),
            verdict => verdict,
        };
        // The row keeps the figures; the caller gets the counts a create run needs.
        let counts = (outcome.ok_total, outcome.load_time);
        self.report.push(Row {
            scenario: spec.scenario.to_owned(),
            kind,
            pets,
            round: spec.round,
            rss_kib: server.peak_rss_kib(),
            check: verdict,
            outcome,
        });
        counts
    }

    /// Grows the store at `db` from `from` to `to` pets with a petstore of its own, stopped
    /// cleanly afterwards so the file is closed.
    async fn grow(&mut self, db: &Path, from: u64, to: u64) {
        let server = Server::petstore(db, &self.settings.petstore_args);
        let filled = fill::fill(&server, &self.tls, from, to).await;
        let (status, _) = server.stop().await;
        self.report.note(format!(
            "fill {} -> {} pets: {} creates in {:.1} s ({} /s)",
            thousands(from),
            thousands(to),
            thousands(filled.created),
            filled.took.as_secs_f64(),
            thousands((filled.created as f64 / filled.took.as_secs_f64()).round() as u64),
        ));
        if filled.failed > 0 || !status.success() {
            self.report.fail(format!(
                "fill to {to}: {} creates failed, server exit {status}",
                filled.failed
            ));
        }
    }

    /// status-filter and get-one on a store of `pets`, with the shorter scaling window.
    async fn scale(&mut self, server: &Server, pets: u64) {
        if !self.settings.wants("scale") {
            return;
        }
        let window = self.settings.scale_window;
        for (scenario, expect, pick) in [
            ("scale status-filter", Expect::OnlySold, Pick::Path(SOLD20)),
            ("scale get-one", Expect::AskedPet, Pick::Ids(pets)),
        ] {
            let spec = Spec {
                scenario,
                protocol: Protocol::Http1,
                clients: CLIENTS,
                pick,
                expect,
                warmup: self.settings.warmup,
                window,
                round: 0,
            };
            self.measure(&spec, server, Kind::Petstore, Some(pets))
                .await;
        }
    }

    /// The status filter on `small` (a copy of the 10k store) and on `big` (the 1M store) in
    /// back-to-back rounds, for the scaling goal.
    async fn scale_pairs(&mut self, small: &Server, big: &Server) {
        for round in 0..self.settings.rounds {
            for (scenario, server, pets) in [
                (SCALE_PAIR[0], small, SCALE_STEPS[0]),
                (SCALE_PAIR[1], big, self.settings.big_store),
            ] {
                // The copy's server starts cold.
                let spec = Spec::paired(
                    scenario,
                    SOLD20,
                    Expect::OnlySold,
                    round,
                    self.settings,
                    true,
                );
                self.measure(&spec, server, Kind::Petstore, Some(pets))
                    .await;
            }
        }
    }

    /// Stops a petstore and reports a stop that was not clean.
    async fn stop(&mut self, server: Server, what: &str) -> Option<process::StoreClosed> {
        let (status, closed) = server.stop().await;
        if !status.success() {
            self.report
                .fail(format!("petstore ({what}) exited with {status} on SIGTERM"));
        }
        closed
    }

    /// A create run on a fresh petstore and a fresh database, with its commit figures.
    async fn create(&mut self, clients: usize) {
        let dir = tempfile::tempdir().expect("a temp dir for the create database");
        let server = Server::petstore(&dir.path().join("pets.redb"), &self.settings.petstore_args);
        let scenario = format!("create-{clients}");
        let spec = Spec::create(
            &scenario,
            clients,
            self.settings.window,
            self.settings.warmup,
        );
        let before = process::ticks_by_thread(server.pid, WRITER_THREAD);
        let written_before = process::write_bytes(server.pid);
        let (answered, load_time) = self.measure(&spec, &server, Kind::Petstore, Some(0)).await;
        let after = process::ticks_by_thread(server.pid, WRITER_THREAD);
        let written = process::write_bytes(server.pid)
            .zip(written_before)
            .map(|(after, before)| after.saturating_sub(before));
        if let (Some(before), Some(after)) = (before, after) {
            // Where a create's CPU goes: the writer thread (redb, fsync) or the request
            // threads (TLS, HTTP, JSON, the hand-off), each split into user and kernel time.
            let per_create = |after: u64, before: u64| {
                (after - before) as f64 * 1e6 / process::CLK_TCK / answered.max(1) as f64
            };
            let [(w_user, w_sys), (r_user, r_sys)] = [0, 1].map(|i| {
                (
                    per_create(after[i].0, before[i].0),
                    per_create(after[i].1, before[i].1),
                )
            });
            self.report.note(format!(
                "{scenario}: CPU per create {:.1} us: writer thread {w_user:.1} user + {w_sys:.1} kernel, \
                 request threads {r_user:.1} user + {r_sys:.1} kernel",
                w_user + w_sys + r_user + r_sys
            ));
        }
        let Some(closed) = self.stopped_creates(server, &scenario, answered).await else {
            return;
        };
        let seconds = load_time.as_secs_f64();
        self.report.note(format!(
            "{scenario}: {} commits for {} pets: mean batch {:.1}, {} commits/s (each a write-ahead log append and one fdatasync) over {:.1} s of load",
            thousands(closed.commits),
            thousands(closed.pets_written),
            closed.pets_written as f64 / closed.commits.max(1) as f64,
            thousands((closed.commits as f64 / seconds).round() as u64),
            seconds,
        ));
        if let Some(written) = written {
            // What a commit costs the disk: its log record, and the checkpoints' pages.
            let per_create = written / answered.max(1);
            self.report.note(format!(
                "{scenario}: {} bytes written to the disk during the load: {} a commit, {} a create",
                thousands(written),
                thousands(written / closed.commits.max(1)),
                thousands(per_create),
            ));
            let (most, want) = if clients == 1 {
                (8_000, "<= 8,000")
            } else {
                (2_000, "<= 2,000")
            };
            self.report.goal(
                &format!("{scenario}: bytes written to the disk a create"),
                Some(per_create as f64),
                want,
                |v| v <= most as f64,
            );
        }
        if clients == 1 {
            // The disk's own pace, measured now on the same file system: one client's creates
            // wait for one sync each, so they can come at most this fast.
            let syncs = Self::fdatasync_rate(dir.path());
            let creates = answered as f64 / seconds;
            self.report.note(format!(
                "{scenario}: the file system does {syncs:.0} 4-KiB fdatasyncs a second; one client's creates, {creates:.0} a second"
            ));
            self.report.goal(
                "create-1: creates/s over the file system's 4-KiB fdatasyncs/s",
                Some(creates / syncs),
                ">= 0.50",
                |v| v >= 0.5,
            );
        }
    }

    /// How many times a second this file system takes a 4-KiB write and its `fdatasync`, one
    /// after another, into a file whose blocks are written already (as the log's are): the pace
    /// a single client's creates are held against. Two seconds, in `dir`.
    fn fdatasync_rate(dir: &std::path::Path) -> f64 {
        use std::os::unix::fs::FileExt;
        const BYTES: u64 = 4 << 20;
        let path = dir.join("fdatasync-rate");
        let file = std::fs::File::create(&path).expect("a file for the fdatasync rate");
        let page = [0u8; 4096];
        for at in (0..BYTES).step_by(4096) {
            file.write_all_at(&page, at).expect("zero-fill");
        }
        file.sync_all().expect("sync");
        let (began, mut syncs) = (std::time::Instant::now(), 0u64);
        while began.elapsed() < std::time::Duration::from_secs(2) {
            let at = (syncs * 4096) % BYTES;
            file.write_all_at(&[syncs as u8; 4096], at)
                .expect("a write");
            file.sync_data().expect("fdatasync");
            syncs += 1;
        }
        let rate = syncs as f64 / began.elapsed().as_secs_f64();
        let _ = std::fs::remove_file(&path);
        rate
    }

    /// Stops a redb petstore after `answered` creates and checks that the writer wrote every
    /// pet the client saw a 201 for; returns its counters.
    async fn stopped_creates(
        &mut self,
        server: Server,
        scenario: &str,
        answered: u64,
    ) -> Option<process::StoreClosed> {
        let Some(closed) = self.stop(server, scenario).await else {
            self.report
                .fail(format!("{scenario}: no `store closed` line in the log"));
            return None;
        };
        if closed.pets_written < answered {
            self.report.fail(format!(
                "{scenario}: {answered} creates answered 201 but only {} pets written",
                closed.pets_written
            ));
        }
        Some(closed)
    }

    /// One create run of `spec` on `server` (redb, fresh), stopped after it; its counters.
    async fn create_run(
        &mut self,
        spec: &Spec<'_>,
        server: Server,
        kind: Kind,
        pets: Option<u64>,
    ) -> Option<process::StoreClosed> {
        let (answered, _) = self.measure(spec, &server, kind, pets.or(Some(0))).await;
        self.stopped_creates(server, spec.scenario, answered).await
    }

    /// Creates with a unique Idempotency-Key each against creates without, as back-to-back
    /// pairs on fresh stores, so the goal compares the same window on the same machine.
    async fn create_keyed(&mut self) {
        let rounds = self.settings.rounds;
        let window = self.settings.window.div_f64(rounds as f64);
        let mut totals = [(0u64, 0u64); 2];
        for round in 0..rounds {
            for (i, (scenario, pick)) in [
                (KEYED_PLAIN, Pick::Create),
                (KEYED_KEYED, Pick::CreateKeyed),
            ]
            .into_iter()
            .enumerate()
            {
                let dir = tempfile::tempdir().expect("a temp dir for the create database");
                let server =
                    Server::petstore(&dir.path().join("pets.redb"), &self.settings.petstore_args);
                let spec = Spec {
                    pick,
                    round,
                    ..Spec::create(scenario, CLIENTS, window, self.settings.warmup)
                };
                if let Some(closed) = self.create_run(&spec, server, Kind::Petstore, None).await {
                    totals[i].0 += closed.commits;
                    totals[i].1 += closed.pets_written;
                }
            }
        }
        for ((commits, pets), scenario) in totals.into_iter().zip([KEYED_PLAIN, KEYED_KEYED]) {
            self.report.note(format!(
                "{scenario}: {} commits for {} pets over {rounds} runs: mean batch {:.1}",
                thousands(commits),
                thousands(pets),
                pets as f64 / commits.max(1) as f64
            ));
        }
    }

    /// Issue 12's memory figure: one petstore on a fresh file takes the preload of 100,000 pets
    /// through the API, every read scenario and the 64-client creates; its VmHWM at the end is
    /// the peak of that whole life, which a server started after the preload does not see.
    /// Each scenario runs for one round's share of the window: the peak follows the clients
    /// and the store, not the length.
    async fn whole_run_rss(&mut self) -> Option<u64> {
        let dir = tempfile::tempdir().expect("a temp dir for the whole-run database");
        let server = Server::petstore(&dir.path().join("pets.redb"), &self.settings.petstore_args);
        let filled = fill::fill(&server, &self.tls, 0, READ_STORE).await;
        if filled.failed > 0 {
            self.report.fail(format!(
                "whole run: {} preload creates failed",
                filled.failed
            ));
        }
        let window = self.settings.window.div_f64(self.settings.rounds as f64);
        for (scenario, protocol, expect, pick) in read_scenarios(READ_STORE) {
            let name = format!("whole-run {scenario}");
            let spec = Spec {
                scenario: &name,
                protocol,
                clients: CLIENTS,
                pick,
                expect,
                warmup: Duration::ZERO,
                window,
                round: 0,
            };
            self.measure(&spec, &server, Kind::Petstore, Some(READ_STORE))
                .await;
        }
        let spec = Spec::create("whole-run create-64", CLIENTS, window, Duration::ZERO);
        self.measure(&spec, &server, Kind::Petstore, Some(READ_STORE))
            .await;
        let kib = server.peak_rss_kib();
        self.report.note(format!(
            "whole run (preload of {} pets, every read scenario, creates) on one petstore: peak RSS {:.1} MiB",
            thousands(READ_STORE),
            kib as f64 / 1024.0
        ));
        self.stop(server, "whole run").await;
        Some(kib)
    }

    /// Times a start on `db`: process start to the first answered `GET /healthz`.
    async fn timed_start(&mut self, db: &Path, what: &str) -> (Server, Option<Duration>) {
        let server = Server::petstore(db, &self.settings.petstore_args);
        let took = client::first_answer(&server, &self.tls, START_LIMIT).await;
        match took {
            Some(took) => self.report.note(format!(
                "start-up at {} pets {what}: {:.1} ms to the first answer",
                server.pets_at_start().map_or("?".to_owned(), thousands),
                took.as_secs_f64() * 1000.0
            )),
            None => self
                .report
                .fail(format!("start-up {what}: no answer within {START_LIMIT:?}")),
        }
        (server, took)
    }

    /// Creates on `server` until a SIGKILL, then a timed start on the same file, and a check
    /// that every acknowledged create survived.
    async fn crash(&mut self, server: Server, db: &Path) -> Option<Duration> {
        let before = server.pets_at_start().unwrap_or(0);
        let work = Workload::create(server.addr, Protocol::Http1, NEW_PET);
        let kill = async {
            tokio::time::sleep(CRASH_AFTER).await;
            server.crash();
        };
        let (outcome, ()) = tokio::join!(
            load::run(
                &server,
                &self.tls,
                Protocol::Http1,
                CLIENTS,
                work,
                Duration::ZERO,
                CRASH_LOAD,
            ),
            kill
        );
        server.reap().await;
        let acknowledged = outcome.ok_total;
        let (restarted, took) = self.timed_start(db, "after SIGKILL under creates").await;
        let after = restarted.pets_at_start().unwrap_or(0);
        self.report.note(format!(
            "crash: {} creates answered 201 before SIGKILL; pets {} before, {} after restart",
            thousands(acknowledged),
            thousands(before),
            thousands(after)
        ));
        if after < before + acknowledged {
            self.report.fail(format!(
                "crash lost acknowledged creates: {before} + {acknowledged} > {after}"
            ));
        }
        self.stop(restarted, "after the crash").await;
        took
    }
}

async fn bench(settings: &Settings) -> Report {
    println!(
        "petstore load benchmark: warm-up {} s, window {} s (read scenarios: {} back-to-back \
         pairs of {:.1} s; scaling runs {} s), {CLIENTS} clients",
        settings.warmup.as_secs_f64(),
        settings.window.as_secs_f64(),
        settings.rounds,
        settings.window.as_secs_f64() / settings.rounds as f64,
        settings.scale_window.as_secs_f64()
    );
    println!("{LEGEND}");
    if !settings.petstore_args.is_empty() {
        println!(
            "DIAGNOSTIC RUN: petstore gets the extra flags {:?}; these are not the real figures\n",
            settings.petstore_args
        );
    }
    if settings.big_store != settings::BIG_STORE {
        println!(
            "DIAGNOSTIC RUN: the big store holds {} pets (BENCH_BIG_STORE), not {}; its figures are not the 1M ones\n",
            thousands(settings.big_store),
            thousands(settings::BIG_STORE)
        );
    }
    if settings::petstore_exe_replaced() {
        println!(
            "petstore executable: {} (BENCH_PETSTORE_BIN)\n",
            settings::petstore_exe().display()
        );
    }
    let mut bench = Bench {
        settings,
        tls: Arc::new(Tls::new()),
        report: Report::default(),
    };
    bench.report.print_header();
    let dir = tempfile::tempdir().expect("a temp dir for the databases");
    let db = dir.path().join("pets.redb");
    let baseline = Server::baseline();

    bench.grow(&db, 0, SCALE_STEPS[0]).await;
    let server = Server::petstore(&db, &settings.petstore_args);
    bench.scale(&server, SCALE_STEPS[0]).await;
    bench.stop(server, "10k store").await;
    // Kept for the scaling pairs on the 1M store; the copy is of a cleanly stopped file.
    let db_10k = dir.path().join("pets-10k.redb");
    std::fs::copy(&db, &db_10k).expect("a copy of the 10k store");

    bench.grow(&db, SCALE_STEPS[0], READ_STORE).await;
    let server = Server::petstore(&db, &settings.petstore_args);
    for (scenario, protocol, expect, pick) in read_scenarios(READ_STORE) {
        if !settings.wants(scenario) {
            continue;
        }
        // Back to back, so both servers see the same machine noise; the baseline first, so
        // petstore's line can show the ratio. Several short pairs rather than one long one.
        for round in 0..settings.rounds {
            for (target, kind, pets) in [
                (&baseline, Kind::Baseline, None),
                (&server, Kind::Petstore, Some(READ_STORE)),
            ] {
                let spec = Spec {
                    scenario,
                    protocol,
                    clients: CLIENTS,
                    pick,
                    expect,
                    warmup: settings.warmup,
                    window: settings.window.div_f64(settings.rounds as f64),
                    round,
                };
                bench.measure(&spec, target, kind, pets).await;
            }
        }
        if let Some(split) = bench.report.cpu_split(scenario) {
            bench.report.note(split);
        }
    }
    // Only the read scenarios make the figure: an idle server's memory says nothing.
    let read_ran = read_scenarios(READ_STORE)
        .iter()
        .any(|(scenario, ..)| settings.wants(scenario));
    let read_rss_kib = read_ran.then(|| server.peak_rss_kib());
    bench.scale(&server, READ_STORE).await;
    bench.stop(server, "100k store").await;

    for clients in [CLIENTS, 1] {
        if !settings.wants("create") {
            break;
        }
        let scenario = format!("create-{clients}");
        let spec = Spec::create(&scenario, clients, settings.window, settings.warmup);
        bench.measure(&spec, &baseline, Kind::Baseline, None).await;
        bench.create(clients).await;
    }
    if settings.wants("create-ab") {
        bench.create_ab().await;
    }
    if settings.wants("create-keyed") {
        bench.create_keyed().await;
    }
    if settings.wants("postgres") {
        bench.postgres(&baseline).await;
    }
    if settings.wants("events") {
        bench.events().await;
    }
    if settings.wants("events-pg") {
        bench.events_pg().await;
    }
    if settings.wants("orders") {
        bench.orders().await;
    }
    if settings.wants("orders-pg") {
        bench.orders_pg().await;
    }
    if settings.wants("webhooks") {
        bench.webhooks().await;
    }

    let whole_rss_kib = if settings.wants("rss") {
        bench.whole_run_rss().await
    } else {
        None
    };

    let (mut clean_start, mut crash_start) = (None, None);
    let wants_1m = ["1m", "scale", "deep-page", "search", "snapshot", "orders"]
        .iter()
        .any(|part| settings.wants(part));
    if settings.skip_1m || !wants_1m {
        bench
            .report
            .note("1M store skipped (BENCH_SKIP_1M or BENCH_ONLY)".to_owned());
    } else {
        let big = settings.big_store;
        bench.grow(&db, READ_STORE, big).await;
        let (server, took) = bench.timed_start(&db, "after a clean stop").await;
        clean_start = took;
        bench.scale(&server, big).await;
        if settings.wants("scale") {
            let small = Server::petstore(&db_10k, &settings.petstore_args);
            bench.scale_pairs(&small, &server).await;
            bench.stop(small, "10k copy").await;
        }
        if settings.wants("orders") {
            bench.inventory_pairs(&server, big).await;
        }
        if settings.wants("deep-page") && big >= SCALE_STEPS[2] {
            bench.deep_page(&server, big).await;
        } else if settings.wants("deep-page") {
            bench
                .report
                .note("deep-page skipped: its deep page is past id 900,000".to_owned());
        }
        if settings.wants("search") {
            bench.search(&server, big).await;
        }
        if settings.wants("1m") {
            crash_start = bench.crash(server, &db).await;
        } else {
            bench.stop(server, "1M store").await;
        }
        if settings.wants("snapshot") {
            bench.snapshot(&db).await;
        }
    }
    let (status, _) = baseline.stop().await;
    if !status.success() {
        bench
            .report
            .fail(format!("the baseline exited with {status} on SIGTERM"));
    }

    goals::add(
        &mut bench.report,
        whole_rss_kib,
        read_rss_kib,
        clean_start,
        crash_start,
    );
    bench.report
}
