//! Two builds side by side (`BENCH_ONLY=create-ab`, with BENCH_BEFORE_BIN naming an older
//! petstore): creates of the older build and of this one in alternating rounds, each run on a
//! fresh redb store of its own, first 64 clients and then one, the same named pets
//! (`fill::named_creates`: a name's index entries grow with its words and letters) for both.
//! The report shows both builds' creates a second, a core and CPU a create side by side, and
//! the goals hold this build's creates a core over the older one's, median of the rounds
//! (issue 40: the name index costs creates at most a tenth). Without BENCH_BEFORE_BIN the part
//! only says so, and its goals read "not measured".

use std::path::Path;

use crate::check::Expect;
use crate::figures::Kind;
use crate::load::{Outcome, Protocol};
use crate::process::{self, CLK_TCK, Server};
use crate::report::thousands;
use crate::{Bench, CLIENTS, Pick, Spec, WRITER_THREAD, fill, settings};

/// The client counts, and each one's rows of the older build and of this one.
pub const CLIENT_COUNTS: [usize; 2] = [CLIENTS, 1];
pub const BEFORE: [&str; 2] = ["create-ab before 64", "create-ab before 1"];
pub const THIS: [&str; 2] = ["create-ab this 64", "create-ab this 1"];
/// Distinct named bodies the clients take in turn.
const NAMED_BODIES: u64 = 4_096;

/// One build's CPU over its runs of one client count: 2xx answers, and clock ticks of the
/// writer thread and of the others, warm-ups included.
#[derive(Default)]
struct Spent {
    answered: u64,
    writer_ticks: u64,
    other_ticks: u64,
}

impl Spent {
    /// CPU microseconds a create: the whole process's, and the writer thread's.
    fn per_create_us(&self) -> (f64, f64) {
        let us = |ticks: u64| ticks as f64 * 1e6 / CLK_TCK / self.answered.max(1) as f64;
        (
            us(self.writer_ticks + self.other_ticks),
            us(self.writer_ticks),
        )
    }
}

impl Bench<'_> {
    /// The alternating create rounds of the older build and this one.
    pub async fn create_ab(&mut self) {
        let Some(before) = self.settings.before_exe.clone() else {
            self.report.note(
                "create-ab skipped: set BENCH_BEFORE_BIN to an older petstore to compare creates"
                    .to_owned(),
            );
            return;
        };
        if !before.is_file() {
            self.report.fail(format!(
                "create-ab: BENCH_BEFORE_BIN {} is not a file",
                before.display()
            ));
            return;
        }
        let this = settings::petstore_exe();
        self.report.note(format!(
            "create-ab: before = {}, this = {}",
            before.display(),
            this.display()
        ));
        let bodies = fill::named_creates(NAMED_BODIES);
        let rounds = self.settings.rounds;
        let window = self.settings.window.div_f64(rounds as f64);
        for (c, clients) in CLIENT_COUNTS.into_iter().enumerate() {
            let mut spent = [Spent::default(), Spent::default()];
            for round in 0..rounds {
                // The older build first in every round, as the baseline goes first in the read
                // pairs; each run on a fresh store, so neither inherits the other's file.
                let builds = [(BEFORE[c], before.as_path()), (THIS[c], this)];
                for (b, (scenario, exe)) in builds.into_iter().enumerate() {
                    let spec = Spec {
                        scenario,
                        protocol: Protocol::Http1,
                        clients,
                        pick: Pick::CreateNamed(&bodies),
                        expect: Expect::CreatedNamed,
                        warmup: self.settings.warmup,
                        window,
                        round,
                    };
                    self.create_with(&spec, exe, &mut spent[b]).await;
                }
            }
            self.side_by_side(c, &spent);
        }
    }

    /// One create run of `spec` by the petstore `exe` on a fresh store, its CPU added to `spent`.
    async fn create_with(&mut self, spec: &Spec<'_>, exe: &Path, spent: &mut Spent) {
        let dir = tempfile::tempdir().expect("a temp dir for the create database");
        let server = Server::petstore_from(
            exe,
            &dir.path().join("pets.redb"),
            &self.settings.petstore_args,
        );
        let ticks_before = process::ticks_by_thread(server.pid, WRITER_THREAD);
        let (answered, _) = self.measure(spec, &server, Kind::Petstore, Some(0)).await;
        let ticks_after = process::ticks_by_thread(server.pid, WRITER_THREAD);
        if let (Some(b), Some(a)) = (ticks_before, ticks_after) {
            let ticks = |i: usize| (a[i].0 + a[i].1).saturating_sub(b[i].0 + b[i].1);
            spent.answered += answered;
            spent.writer_ticks += ticks(0);
            spent.other_ticks += ticks(1);
        }
        self.stopped_creates(server, spec.scenario, answered).await;
    }

    /// The notes of client count `c`: each build's medians over the rounds and this over before.
    fn side_by_side(&mut self, c: usize, spent: &[Spent; 2]) {
        let medians = |scenario: &str, figure: fn(&Outcome) -> f64| {
            let mut values: Vec<f64> = self
                .report
                .rows
                .iter()
                .filter(|row| row.scenario == scenario)
                .map(|row| figure(&row.outcome))
                .collect();
            values.sort_by(f64::total_cmp);
            match values.len() {
                0 => 0.0,
                n if n % 2 == 1 => values[n / 2],
                n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
            }
        };
        let mut line = format!(
            "create-ab, {} client(s), medians of {} rounds:",
            CLIENT_COUNTS[c], self.settings.rounds
        );
        for (b, (scenario, build)) in [(BEFORE[c], "before"), (THIS[c], "this")]
            .into_iter()
            .enumerate()
        {
            let (cpu, writer) = spent[b].per_create_us();
            line.push_str(&format!(
                " {build} {} creates/s, {} a core, CPU a create {cpu:.1} us (writer thread {writer:.1});",
                thousands(medians(scenario, Outcome::rps).round() as u64),
                thousands(medians(scenario, Outcome::per_core).round() as u64),
            ));
        }
        line.pop();
        self.report.note(line);
    }
}
