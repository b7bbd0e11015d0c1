//! The snapshot part (issue 13): 64 clients creating pets on the 1M store, first for a window
//! without a snapshot, then for a window that snapshots (`--backup-dir`, SIGUSR1) cover from
//! its first instant to its last: the first SIGUSR1 opens it, each snapshot that ends while it
//! is shorter than the plain window's length is followed at once by another, and it closes when
//! the last one is taken, so it holds every phase of at least one whole snapshot (the copy, the
//! commit that writes and fsyncs the file, the rename). Each round starts a server of its own
//! on a fresh copy of the 1M file, so every round's snapshots are of the same store. The goal
//! holds the p99 of creates during snapshots against the p99 without.

use std::path::Path;
use std::time::Duration;

use tokio::time::Instant;

use crate::figures::Kind;
use crate::load::Outcome;
use crate::process::Server;
use crate::report::{Report, thousands};
use crate::{Bench, CLIENTS, Spec};

/// The two scenarios of a round, plain first.
pub const PLAIN: &str = "snapshot none";
pub const DURING: &str = "snapshot during";
/// Rounds of (plain, during); the goal is the median of their p99 ratios.
const ROUNDS: usize = 3;
/// A snapshot not taken by then (of about 1.5M pets, at nice 19 under creates) is broken.
const SNAPSHOT_LIMIT: Duration = Duration::from_secs(600);
/// How often the log is looked at for the `snapshot taken` line.
const POLL: Duration = Duration::from_millis(5);

impl Bench<'_> {
    /// The rounds on copies of the 1M store at `db` (closed).
    pub async fn snapshot(&mut self, db: &Path) {
        let dir = tempfile::tempdir_in(db.parent().unwrap_or(Path::new(".")))
            .expect("a temp dir beside the 1M store");
        let live = dir.path().join("pets.redb");
        // BENCH_SNAPSHOT_DIR (a diagnostic): the snapshots go elsewhere, e.g. to a tmpfs, to
        // tell what their disk writes cost from the rest of a snapshot.
        let backups = std::env::var_os("BENCH_SNAPSHOT_DIR")
            .map_or_else(|| dir.path().join("backups"), std::path::PathBuf::from);
        let mut args = self.settings.petstore_args.clone();
        args.extend([
            "--backup-dir".to_owned(),
            backups.display().to_string(),
            "--backup-keep".to_owned(),
            "1".to_owned(),
        ]);
        let window = self.settings.window;
        for round in 0..ROUNDS {
            std::fs::copy(db, &live).expect("the 1M store copies");
            // Written back now: the copy's dirty pages would otherwise go out during the
            // first window, in the way of its commits.
            std::fs::File::open(&live)
                .and_then(|file| file.sync_all())
                .expect("the copy syncs");
            let server = Server::petstore(&live, &args);
            let pets = server.pets_at_start();
            let plain = Spec {
                round,
                ..Spec::create(PLAIN, CLIENTS, window, self.settings.warmup)
            };
            self.measure(&plain, &server, Kind::Petstore, pets).await;
            let during = Spec {
                round,
                // The window's upper bound: the snapshots close it well before.
                ..Spec::create(DURING, CLIENTS, SNAPSHOT_LIMIT, self.settings.warmup)
            };
            let before = server.snapshots().len();
            let opens = Instant::now() + self.settings.warmup;
            let end = snapshots_through(&server, opens, window);
            self.measure_until(&during, &server, Kind::Petstore, pets, end)
                .await;
            let taken = &server.snapshots()[before..];
            let covered = self
                .report
                .rows
                .last()
                .map_or(0.0, |row| row.outcome.window.as_secs_f64());
            let each: Vec<String> = taken
                .iter()
                .map(|(pets, ms)| {
                    format!("{} pets in {:.1} s", thousands(*pets), *ms as f64 / 1000.0)
                })
                .collect();
            self.report.note(format!(
                "{DURING} round {round}: window {covered:.1} s covered by {} snapshot(s) back to back: {}",
                taken.len(),
                each.join(", ")
            ));
            if taken.is_empty() {
                self.report
                    .fail(format!("{DURING} round {round}: no snapshot was taken"));
            }
            self.stop(server, "snapshot round").await;
        }
        let _ = std::fs::remove_file(&live);
    }
}

/// Opens the snapshot window at `opens` with a SIGUSR1, asks for the next snapshot as soon as
/// one is taken while less than `at_least` has passed, and ends once the last is taken (or
/// after `SNAPSHOT_LIMIT` without one, which the run's row then shows as too few snapshots).
async fn snapshots_through(server: &Server, opens: Instant, at_least: Duration) {
    tokio::time::sleep_until(opens).await;
    loop {
        let before = server.snapshots().len();
        server.request_snapshot();
        let deadline = Instant::now() + SNAPSHOT_LIMIT;
        while server.snapshots().len() == before {
            if Instant::now() > deadline || server.logged_errors() > 0 {
                return;
            }
            tokio::time::sleep(POLL).await;
        }
        if opens.elapsed() >= at_least {
            return;
        }
    }
}

/// The goal lines: p99 of creates during snapshots over without, median of the rounds, and
/// the same for p50 and for throughput, reported.
pub fn goals(report: &mut Report) {
    let p99 = |o: &Outcome| f64::from(o.percentile_us(0.99));
    let p50 = |o: &Outcome| f64::from(o.percentile_us(0.50));
    let rounds = |ratios: &[f64]| {
        let each: Vec<String> = ratios.iter().map(|r| format!("{r:.2}")).collect();
        format!("{} rounds ({})", ratios.len(), each.join(" "))
    };
    let what = "create p99, 64 clients, 1M store: during a snapshot over without";
    match report.median_pair_ratio(DURING, PLAIN, p99) {
        Some((median, ratios)) => report.goal(
            &format!("{what}, median of {}", rounds(&ratios)),
            Some(median),
            "<= 2.00",
            |v| v <= 2.0,
        ),
        None => report.goal(what, None, "<= 2.00", |v| v <= 2.0),
    }
    for (name, figure) in [
        ("  the same for p50", p50 as fn(&Outcome) -> f64),
        ("  the same for creates/s", Outcome::rps),
    ] {
        let ratio = report.median_pair_ratio(DURING, PLAIN, figure);
        let name = match &ratio {
            Some((_, ratios)) => format!("{name} ({})", rounds(ratios)),
            None => name.to_owned(),
        };
        report.report_only(&name, ratio.map(|(median, _)| median));
    }
}
