//! The webhooks part (issue 30): the event feed delivered to `ENDPOINTS` (10) webhook
//! endpoints while clients create, each endpoint a receiver in this process (`receiver.rs`).
//!
//! - Latency (`PACED`): a fresh redb petstore with the 10 endpoints, added with `petstore
//!   webhooks add` before it starts, so each starts at the newest event (none yet). Once every
//!   endpoint's delivery task holds its position (its log line), 64 clients create at a fixed
//!   total rate (`Settings::webhooks_rate`, 100 a second) for the warm-up and the window, as
//!   the event feed part does (`events::creates`). Then, within `DRAIN_LIMIT`, every receiver
//!   must have had every 201's event exactly once, in feed order (cursors increasing), all
//!   receivers in one order, every signature verified. The figure: from a create's 201
//!   reaching its client to its delivery's body reaching a receiver, over every receiver and
//!   every create of the window: p50, p99, max.
//! - The cost (`WITHOUT`, `WITH`): the `create-64` protocol (64 clients at full speed) on a
//!   fresh store without endpoints, then on another with the 10, in back-to-back rounds
//!   (`Settings::rounds`, each the window's share, as the create-keyed part). The goal is the
//!   median of the rounds' creates a core with over without. Beside it, for the runs with:
//!   deliveries a second over the window, events each receiver had yet to get at its end, and
//!   the server's CPU a create of both.

use std::cell::RefCell;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use tokio::time::{Instant, sleep, sleep_until};

use crate::check::{Expect, check};
use crate::events::{self, Creates};
use crate::figures::Kind;
use crate::process::{self, CLK_TCK, Server, cert};
use crate::receiver::{self, HookLog, Receivers};
use crate::report::{Row, thousands};
use crate::{Bench, CLIENTS, Spec, settings};

/// The rows: the paced creates with the endpoints, and the full-speed pairs.
pub const PACED: &str = "webhooks paced";
pub const WITHOUT: &str = "webhooks without";
pub const WITH: &str = "webhooks with 10";
/// Endpoints, each with a receiver of its own.
pub const ENDPOINTS: usize = 10;
/// Every endpoint's delivery task holds its position by then, or the server is broken.
const READY_LIMIT: Duration = Duration::from_secs(30);
/// After the last create, every receiver has every event by then, or events are missing.
const DRAIN_LIMIT: Duration = Duration::from_secs(10);
/// How often the drain and the start look at the counts.
const POLL: Duration = Duration::from_millis(5);
/// After the last event arrived everywhere: time for a duplicate to show.
const SETTLE: Duration = Duration::from_millis(250);

/// A full-speed run with the endpoints, as the receivers saw it.
struct FullRun {
    creates_per_second: f64,
    deliveries_per_second: f64,
    /// Events each receiver had yet to get at the window's end.
    behind: Vec<u64>,
    /// The receivers' thread over the window, in cores.
    receivers_cpu: f64,
}

/// Receiver counts at one instant of a full-speed run.
struct Reading {
    at: Instant,
    delivered: Vec<u64>,
    /// CPU ticks of the receivers' thread.
    ticks: Option<u64>,
}

impl Reading {
    fn now(receivers: &Receivers) -> Reading {
        Reading {
            at: Instant::now(),
            delivered: receivers.delivered(),
            ticks: process::ticks_by_thread(std::process::id(), receiver::THREAD)
                .map(|[(user, system), _]| user + system),
        }
    }
}

impl Bench<'_> {
    /// The latency run, then the rounds at full speed.
    pub async fn webhooks(&mut self) {
        self.report.webhooks.rate = self.settings.webhooks_rate;
        self.paced().await;
        self.full_speed().await;
    }

    /// petstore's flags for a server with the endpoints of `file`: receivers at loopback, with
    /// the development CA's certificate.
    fn hooked_args(&self, file: &Path) -> Vec<String> {
        let mut args = vec![
            "--webhooks".to_owned(),
            file.display().to_string(),
            "--webhooks-allow-private".to_owned(),
            "--webhooks-ca".to_owned(),
            cert("dev-ca.pem").display().to_string(),
        ];
        args.extend(self.settings.petstore_args.iter().cloned());
        args
    }

    /// A petstore on a fresh store in `dir` with an endpoint for each of `receivers`, once
    /// every endpoint's delivery task holds its position.
    async fn hooked_server(
        &mut self,
        scenario: &str,
        dir: &Path,
        receivers: &Receivers,
    ) -> Option<Server> {
        let file = dir.join("webhooks");
        if let Err(why) = add_endpoints(&file, receivers) {
            self.report.fail(format!("{scenario}: {why}"));
            return None;
        }
        let server = Server::petstore(&dir.join("pets.redb"), &self.hooked_args(&file));
        let deadline = Instant::now() + READY_LIMIT;
        while server.webhooks_delivering() < ENDPOINTS as u64 && Instant::now() < deadline {
            sleep(POLL).await;
        }
        let holding = server.webhooks_delivering();
        if holding < ENDPOINTS as u64 {
            self.report.fail(format!(
                "{scenario}: {holding} of {ENDPOINTS} endpoints delivering after {READY_LIMIT:?}:\n{}",
                server.tail()
            ));
            self.stop(server, scenario).await;
            return None;
        }
        Some(server)
    }

    /// Creates at the set rate with the endpoints; every event to every receiver once, in
    /// order, and the delays.
    async fn paced(&mut self) {
        let settings = self.settings;
        let dir = tempfile::tempdir().expect("a temp dir for the webhooks' store");
        let origin = Instant::now();
        let receivers = Receivers::start(ENDPOINTS, origin.into_std());
        let Some(server) = self.hooked_server(PACED, dir.path(), &receivers).await else {
            return;
        };
        let creates =
            events::creates(&server, &self.tls, origin, settings, settings.webhooks_rate).await;

        // Until every receiver has as many events as there were 201s, then a moment more.
        let answered = creates.created.len() as u64;
        let drain_deadline = Instant::now() + DRAIN_LIMIT;
        while Instant::now() < drain_deadline && receivers.delivered().iter().any(|&n| n < answered)
        {
            sleep(POLL).await;
        }
        sleep(SETTLE).await;
        let logs = receivers.stop();
        let delivery = deliveries(&creates, &logs);

        let errors_logged = server.logged_errors();
        let failed_tries = server.webhook_failures();
        let mut verdict = check(Expect::Created, creates.sample.as_ref());
        if let (Ok(()), Err(why)) = (&verdict, &delivery.verdict) {
            verdict = Err(why.clone());
        }
        if verdict.is_ok() && errors_logged > 0 {
            verdict = Err(format!("the server logged {errors_logged} ERROR lines"));
        }
        let cpu = creates.outcome.cpu_share;
        self.report.note(format!(
            "{PACED} on redb: {ENDPOINTS} endpoints x {} creates ({} /s), {} deliveries of the \
             window's creates: from a create's 201 to its delivery {} ({} came before their \
             201); from the create's request {}; {} signatures verified, {} failed tries \
             logged; server cpu {cpu:.2}",
            thousands(answered),
            settings.webhooks_rate,
            thousands(delivery.measured as u64),
            delays_text(delivery.from_201),
            thousands(delivery.early),
            delays_text(delivery.from_request),
            thousands(delivery.verified),
            thousands(failed_tries),
        ));
        let figures = &mut self.report.webhooks;
        figures.from_201_us = delivery.from_201;
        figures.from_request_us = delivery.from_request;
        figures.wrong = Some(delivery.wrong);
        let ok_total = creates.outcome.ok_total;
        self.report.push(Row {
            scenario: PACED.to_owned(),
            kind: Kind::Petstore,
            pets: Some(0),
            round: 0,
            rss_kib: creates.memory.peak_kib,
            check: verdict,
            outcome: creates.outcome,
        });
        self.stopped_creates(server, PACED, ok_total).await;
    }

    /// Rounds of creates at full speed without endpoints, then with them, on fresh stores.
    async fn full_speed(&mut self) {
        let rounds = self.settings.rounds;
        let window = self.settings.window.div_f64(rounds as f64);
        let mut runs = Vec::new();
        for round in 0..rounds {
            for scenario in [WITHOUT, WITH] {
                let spec = Spec {
                    round,
                    ..Spec::create(scenario, CLIENTS, window, self.settings.warmup)
                };
                if scenario == WITH {
                    runs.extend(self.full_hooked(&spec).await);
                } else {
                    let dir = tempfile::tempdir().expect("a temp dir for the create database");
                    let server = Server::petstore(
                        &dir.path().join("pets.redb"),
                        &self.settings.petstore_args,
                    );
                    self.create_run(&spec, server, Kind::Petstore, None).await;
                }
            }
        }
        self.keep_full_speed(&runs);
    }

    /// One full-speed run with the endpoints: the row, and what the receivers saw.
    async fn full_hooked(&mut self, spec: &Spec<'_>) -> Option<FullRun> {
        let dir = tempfile::tempdir().expect("a temp dir for the webhooks' store");
        let receivers = Receivers::start(ENDPOINTS, std::time::Instant::now());
        let server = self
            .hooked_server(spec.scenario, dir.path(), &receivers)
            .await?;
        // The receivers' counts at the window's start, read beside the clients (this never
        // ends the window), and once the run is over: a reading at the window's end could
        // lose the race with the window's own timer, and the 201s are all counted only then.
        let first = RefCell::new(None);
        let start = Instant::now();
        let sampler = async {
            sleep_until(start + spec.warmup).await;
            *first.borrow_mut() = Some(Reading::now(&receivers));
            std::future::pending::<()>().await;
        };
        let (answered, _) = self
            .measure_until(spec, &server, Kind::Petstore, Some(0), sampler)
            .await;
        let last = Reading::now(&receivers);
        let failed_tries = server.webhook_failures();
        self.stopped_creates(server, spec.scenario, answered).await;
        let logs = receivers.stop();

        let problems: Vec<String> = logs
            .iter()
            .enumerate()
            .filter_map(|(i, log)| order_problems(log).map(|why| format!("receiver {i}: {why}")))
            .collect();
        if !problems.is_empty() {
            self.report.fail(format!(
                "{} round {}: {}",
                spec.scenario,
                spec.round,
                problems.join("; ")
            ));
        }
        let first = first.into_inner()?;
        let seconds = (last.at - first.at).as_secs_f64();
        let delivered: u64 =
            last.delivered.iter().sum::<u64>() - first.delivered.iter().sum::<u64>();
        let rps = self.report.rows.last().map_or(0.0, |row| row.outcome.rps());
        let run = FullRun {
            creates_per_second: rps,
            deliveries_per_second: delivered as f64 / seconds,
            // The 201s of the whole run, less what each receiver had when the last came.
            behind: last
                .delivered
                .iter()
                .map(|&n| answered.saturating_sub(n))
                .collect(),
            receivers_cpu: match (first.ticks, last.ticks) {
                (Some(a), Some(b)) => b.saturating_sub(a) as f64 / CLK_TCK / seconds,
                _ => 0.0,
            },
        };
        let (least, most) = (
            run.behind.iter().min().copied().unwrap_or(0),
            run.behind.iter().max().copied().unwrap_or(0),
        );
        self.report.note(format!(
            "{} round {}: {} creates/s; {} deliveries/s over the window ({} an endpoint); at its \
             end each receiver was {} to {} events behind; receivers' thread {:.2} of CPU 0; {} \
             failed tries logged",
            spec.scenario,
            spec.round,
            thousands(run.creates_per_second.round() as u64),
            thousands(run.deliveries_per_second.round() as u64),
            thousands((run.deliveries_per_second / ENDPOINTS as f64).round() as u64),
            thousands(least),
            thousands(most),
            run.receivers_cpu,
            thousands(failed_tries),
        ));
        Some(run)
    }

    /// The medians of the full-speed rounds, and whether the deliveries kept up.
    fn keep_full_speed(&mut self, runs: &[FullRun]) {
        let cpu_us = |scenario: &str| {
            let each: Vec<f64> = self
                .report
                .rows
                .iter()
                .filter(|row| row.scenario == scenario && row.kind == Kind::Petstore)
                .map(|row| {
                    let (user, kernel) = row.outcome.cpu_per_request_us();
                    user + kernel
                })
                .filter(|us| *us > 0.0)
                .collect();
            median(each)
        };
        let (with, without) = (cpu_us(WITH), cpu_us(WITHOUT));
        let figures = &mut self.report.webhooks;
        figures.cpu_with_us = with;
        figures.cpu_without_us = without;
        figures.deliveries_per_second =
            median(runs.iter().map(|r| r.deliveries_per_second).collect());
        figures.behind = median(
            runs.iter()
                .map(|r| r.behind.iter().sum::<u64>() as f64 / r.behind.len().max(1) as f64)
                .collect(),
        );
        let creates = median(runs.iter().map(|r| r.creates_per_second).collect());
        let (Some(deliveries), Some(creates)) = (figures.deliveries_per_second, creates) else {
            return;
        };
        let behind = figures.behind.unwrap_or(0.0);
        let each = deliveries / ENDPOINTS as f64;
        // What a delivery costs the server, roughly: the CPU a create gained, over the
        // deliveries made a create.
        let per_create = median(
            runs.iter()
                .map(|r| r.deliveries_per_second / r.creates_per_second.max(f64::MIN_POSITIVE))
                .collect(),
        );
        let per_delivery = match (with, without, per_create) {
            (Some(with), Some(without), Some(share)) if share > 0.0 => {
                format!(
                    "; {share:.3} deliveries a create, so about {:.0} us of server CPU a delivery",
                    (with - without) / share
                )
            }
            _ => String::new(),
        };
        self.report.note(format!(
            "{WITH}, medians of {} rounds: server CPU a create {} us with the endpoints, {} us \
             without{per_delivery}",
            runs.len(),
            with.map_or("?".to_owned(), |us| format!("{us:.1}")),
            without.map_or("?".to_owned(), |us| format!("{us:.1}")),
        ));
        if each < 0.95 * creates {
            self.report.note(format!(
                "{WITH}: at full speed the deliveries do NOT keep up: {} creates/s against {} \
                 deliveries/s an endpoint (one POST at a time, each followed by a durable save \
                 of the position); each endpoint falls {} events a second further behind, {} \
                 events at the window's end, {:.0} s of its deliveries",
                thousands(creates.round() as u64),
                thousands(each.round() as u64),
                thousands((creates - each).max(0.0).round() as u64),
                thousands(behind.round() as u64),
                behind / each.max(f64::MIN_POSITIVE),
            ));
        }
    }
}

/// Adds an endpoint for each receiver to the endpoints file at `file` with `petstore webhooks
/// add`, as an operator does, and gives each receiver the secret it printed.
fn add_endpoints(file: &Path, receivers: &Receivers) -> Result<(), String> {
    for (i, hook) in receivers.hooks.iter().enumerate() {
        let mut command = Command::new(settings::petstore_exe());
        command.arg("webhooks").arg("--webhooks").arg(file).args([
            "add",
            &hook.url(),
            "--label",
            &format!("bench-{i}"),
        ]);
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("PETSTORE_") {
                command.env_remove(name);
            }
        }
        let output = command
            .output()
            .map_err(|e| format!("petstore webhooks add: {e}"))?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        let mut lines = stdout.lines();
        let (secret, id) = (lines.next(), lines.next());
        if !output.status.success() || !id.is_some_and(|id| id.starts_with("id ep_")) {
            return Err(format!(
                "petstore webhooks add {} exited {}: {}",
                hook.url(),
                output.status,
                String::from_utf8_lossy(&output.stderr).trim_end()
            ));
        }
        hook.set_secret(secret.unwrap_or_default())?;
    }
    Ok(())
}

/// What a receiver's log says is wrong, whatever the run: duplicates, events out of order,
/// signatures that did not verify, deliveries that were not the event.
fn order_problems(log: &HookLog) -> Option<String> {
    let mut wrong = Vec::new();
    if log.duplicates > 0 {
        wrong.push(format!("{} delivered twice", log.duplicates));
    }
    if log.out_of_order > 0 {
        wrong.push(format!("{} behind a later event", log.out_of_order));
    }
    if log.bad_signatures > 0 {
        wrong.push(format!(
            "{} signatures that do not verify",
            log.bad_signatures
        ));
    }
    if let Some(fault) = &log.fault {
        wrong.push(format!("{fault} ({} such)", log.faults));
    }
    (!wrong.is_empty()).then(|| wrong.join(", "))
}

/// The receivers held against the paced creates.
struct Delivery {
    /// Deliveries measured (the window's creates at every receiver), and of them those that
    /// reached a receiver before their 201 reached the creating client.
    measured: usize,
    early: u64,
    /// p50, p99, max in microseconds, from the 201 and from the request.
    from_201: Option<[i64; 3]>,
    from_request: Option<[i64; 3]>,
    verified: u64,
    /// Events missing, delivered twice or behind a later one, over all receivers.
    wrong: u64,
    verdict: Result<(), String>,
}

/// Holds every receiver against the creates: every 201's pet once at each, in feed order, all
/// in one order, signed; and the delays.
fn deliveries(creates: &Creates, logs: &[HookLog]) -> Delivery {
    let n = creates.created.len();
    let mut arrivals = events::Arrivals::new(creates, logs.len());
    let (mut missing, mut duplicates, mut verified) = (0, 0, 0);
    let (mut out_of_order, mut reordered) = (0, 0);
    let mut problems = Vec::new();
    for (r, log) in logs.iter().enumerate() {
        missing += n - arrivals.count(&log.events);
        duplicates += log.duplicates;
        out_of_order += log.out_of_order;
        verified += log.verified;
        if logs[0]
            .events
            .iter()
            .map(|e| e.0)
            .ne(log.events.iter().map(|e| e.0))
        {
            reordered += 1;
        }
        if let Some(why) = order_problems(log) {
            problems.push(format!("receiver {r}: {why}"));
        }
    }
    let failed_creates = creates.outcome.errors + creates.outcome.non_2xx;
    let mut summary = Vec::new();
    if missing > 0 {
        summary.push(format!(
            "{missing} of {} deliveries missing",
            thousands((n * logs.len()) as u64)
        ));
    }
    if reordered > 0 {
        summary.push(format!(
            "{reordered} receivers got the events in another order than the first"
        ));
    }
    // A create that failed on the client's side may have committed; with none, it is wrong.
    if arrivals.unknown > 0 && failed_creates == 0 {
        let unknown = arrivals.unknown;
        summary.push(format!("{unknown} events of pets no create made"));
    }
    summary.append(&mut problems);
    let verdict = if summary.is_empty() {
        Ok(())
    } else {
        Err(summary.join("; "))
    };
    Delivery {
        measured: arrivals.from_201.len(),
        early: arrivals.early as u64,
        from_201: events::percentiles(&mut arrivals.from_201),
        from_request: events::percentiles(&mut arrivals.from_request),
        verified,
        wrong: missing as u64 + duplicates + arrivals.duplicates as u64 + out_of_order,
        verdict,
    }
}

fn delays_text(figures: Option<[i64; 3]>) -> String {
    figures.map_or("nothing measured".to_owned(), |[p50, p99, max]| {
        let ms = |us: i64| us as f64 / 1000.0;
        format!(
            "p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            ms(p50),
            ms(p99),
            ms(max)
        )
    })
}

/// The median of `values`; `None` when there are none.
fn median(mut values: Vec<f64>) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(values[n / 2]),
        _ => Some((values[n / 2 - 1] + values[n / 2]) / 2.0),
    }
}
