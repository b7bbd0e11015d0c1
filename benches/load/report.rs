//! The report: one row per run (scenario x server x store size), printed as each run ends and
//! again as one aligned plain-text table, the create and start-up figures, and the goal lines
//! marked met or NOT met. It computes ratios but measures nothing; timings are only reported,
//! while a failed correctness check marks the whole report as failed.

use std::fmt::Write as _;

use crate::figures::{Feed, Figures, Kind, Race};
use crate::load::Outcome;

/// One measured run.
pub struct Row {
    pub scenario: String,
    pub kind: Kind,
    /// Pets in the store; `None` for the baseline, which has none.
    pub pets: Option<u64>,
    /// Which back-to-back pair of a read scenario this is; 0 for single runs.
    pub round: usize,
    pub outcome: Outcome,
    pub rss_kib: u64,
    pub check: Result<(), String>,
}

/// A goal line: what was measured against what was wanted.
struct Goal {
    text: String,
    met: Option<bool>,
}

/// Everything measured, in order.
#[derive(Default)]
pub struct Report {
    pub rows: Vec<Row>,
    /// Lines of figures that are not rows: create batches, start-up times, fills.
    pub notes: Vec<String>,
    /// Problems beyond a row's check (a durability loss, a bad exit status).
    pub failures: Vec<String>,
    /// The event feed part's figures, one a store (`events.rs`).
    pub feeds: Vec<Feed>,
    /// The orders part's races, one a store (`orders.rs`).
    pub races: Vec<Race>,
    /// The webhooks part's figures (`webhooks.rs`).
    pub webhooks: Figures,
    goals: Vec<Goal>,
}

const HEADER: [&str; 15] = [
    "scenario",
    "server",
    "pets",
    "req/s",
    "cpu",
    "req/s/core",
    "vs base",
    "p50 ms",
    "p99 ms",
    "non-2xx",
    "errors",
    "rss MiB",
    "client cpu",
    "steal",
    "check",
];

/// Column widths for the lines printed as runs end, before the table's own are known.
const PROGRESS_WIDTHS: [usize; 15] = [19, 8, 9, 7, 4, 10, 7, 6, 6, 7, 6, 7, 10, 5, 6];

impl Report {
    /// Prints the column names above the lines `push` prints.
    pub fn print_header(&self) {
        print_progress(HEADER.iter().copied());
    }

    /// Adds a row and prints it at once, so a long run shows its progress.
    pub fn push(&mut self, row: Row) {
        if let Err(why) = &row.check {
            println!(
                "!!! CHECK FAILED: {} on {}: {why}",
                row.scenario,
                row.kind.name()
            );
        }
        print_progress(self.cells(&row).iter().map(String::as_str));
        self.rows.push(row);
    }

    pub fn note(&mut self, line: String) {
        println!("  {line}");
        self.notes.push(line);
    }

    pub fn fail(&mut self, line: String) {
        println!("!!! FAILED: {line}");
        self.failures.push(line);
    }

    /// The row of `scenario` on `kind`, at `pets` when given.
    pub fn find(&self, scenario: &str, kind: Kind, pets: Option<u64>) -> Option<&Row> {
        self.rows.iter().find(|row| {
            row.scenario == scenario && row.kind == kind && (pets.is_none() || row.pets == pets)
        })
    }

    /// petstore's requests per core over the baseline's, for the same scenario and round.
    pub fn ratio(&self, row: &Row) -> Option<f64> {
        if row.kind == Kind::Baseline {
            return None;
        }
        let base = self.rows.iter().find(|base| {
            base.kind == Kind::Baseline && base.scenario == row.scenario && base.round == row.round
        })?;
        let base = base.outcome.per_core();
        (base > 0.0).then(|| row.outcome.per_core() / base)
    }

    /// The median over rounds of petstore's ratio for `scenario` at `pets`, with every
    /// round's ratio in run order.
    pub fn median_ratio(&self, scenario: &str, pets: u64) -> Option<(f64, Vec<f64>)> {
        let ratios: Vec<f64> = self
            .rows
            .iter()
            .filter(|row| {
                row.scenario == scenario && row.kind == Kind::Petstore && row.pets == Some(pets)
            })
            .filter_map(|row| self.ratio(row))
            .collect();
        median(ratios)
    }

    /// The median over rounds of `kind`'s ratio to the baseline for `scenario`, any store size.
    pub fn median_ratio_of(&self, scenario: &str, kind: Kind) -> Option<(f64, Vec<f64>)> {
        let ratios: Vec<f64> = self
            .rows
            .iter()
            .filter(|row| row.scenario == scenario && row.kind == kind)
            .filter_map(|row| self.ratio(row))
            .collect();
        median(ratios)
    }

    /// Where each server's CPU went in `scenario`: microseconds a request in user space and in
    /// the kernel, medians over its rounds. The ratio alone does not say which side differs.
    pub fn cpu_split(&self, scenario: &str) -> Option<String> {
        let mut line = format!("{scenario}: CPU a request, medians of rounds:");
        for kind in [Kind::Petstore, Kind::Baseline] {
            let (user, kernel): (Vec<f64>, Vec<f64>) = self
                .rows
                .iter()
                .filter(|row| row.scenario == scenario && row.kind == kind)
                .map(|row| row.outcome.cpu_per_request_us())
                .filter(|&(user, kernel)| user + kernel > 0.0)
                .unzip();
            let (user, _) = median(user)?;
            let (kernel, _) = median(kernel)?;
            let _ = write!(
                line,
                " {} {:.1} us (user {user:.1} + kernel {kernel:.1});",
                kind.name(),
                user + kernel
            );
        }
        line.pop();
        Some(line)
    }

    /// The median over rounds of `figure` (req/s, req/s/core) of `top` over that of `bottom`
    /// (rows of the same server, matched by round), with every round's ratio in run order.
    pub fn median_pair_ratio(
        &self,
        top: &str,
        bottom: &str,
        figure: fn(&Outcome) -> f64,
    ) -> Option<(f64, Vec<f64>)> {
        let ratios: Vec<f64> = self
            .rows
            .iter()
            .filter(|row| row.scenario == top && row.kind != Kind::Baseline)
            .filter_map(|row| {
                let under = self.rows.iter().find(|under| {
                    under.scenario == bottom && under.kind == row.kind && under.round == row.round
                })?;
                let under = figure(&under.outcome);
                (under > 0.0).then(|| figure(&row.outcome) / under)
            })
            .collect();
        median(ratios)
    }

    fn cells(&self, row: &Row) -> Vec<String> {
        let o = &row.outcome;
        vec![
            row.scenario.clone(),
            row.kind.name().to_owned(),
            row.pets.map_or("-".to_owned(), thousands),
            thousands(o.rps().round() as u64),
            format!("{:.2}", o.cpu_share),
            thousands(o.per_core().round() as u64),
            self.ratio(row)
                .map_or("-".to_owned(), |ratio| format!("{ratio:.2}")),
            format!("{:.2}", f64::from(o.percentile_us(0.50)) / 1000.0),
            format!("{:.2}", f64::from(o.percentile_us(0.99)) / 1000.0),
            o.non_2xx.to_string(),
            o.errors.to_string(),
            format!("{:.1}", row.rss_kib as f64 / 1024.0),
            format!("{:.2}", o.client_cpu_share),
            format!("{:.2}", o.steal),
            if row.check.is_ok() { "ok" } else { "FAILED" }.to_owned(),
        ]
    }

    /// Records a goal: `value` against `limit`, met when `met(value)`; `None` when the value
    /// was not measured in this run.
    pub fn goal(&mut self, name: &str, value: Option<f64>, want: &str, met: impl Fn(f64) -> bool) {
        let (shown, met) = match value {
            Some(value) => (format_value(value), Some(met(value))),
            None => ("not measured".to_owned(), None),
        };
        self.goals.push(Goal {
            text: format!("{name:<80} {shown:>8}  (want {want})"),
            met,
        });
    }

    /// Records a figure that has no target, shown among the goals.
    pub fn report_only(&mut self, name: &str, value: Option<f64>) {
        let shown = value.map_or("not measured".to_owned(), format_value);
        self.goals.push(Goal {
            text: format!("{name:<80} {shown:>8}  (reported, no target)"),
            met: None,
        });
    }

    /// Whether anything was wrong (not slow: wrong).
    pub fn failed(&self) -> bool {
        !self.failures.is_empty() || self.rows.iter().any(|row| row.check.is_err())
    }

    /// The whole table, the notes and the goals, as plain text.
    pub fn render(&self) -> String {
        let mut table: Vec<Vec<String>> = vec![HEADER.iter().map(|h| (*h).to_owned()).collect()];
        table.extend(self.rows.iter().map(|row| self.cells(row)));
        let widths: Vec<usize> = (0..HEADER.len())
            .map(|c| table.iter().map(|r| r[c].len()).max().unwrap_or(0))
            .collect();
        let mut out = String::new();
        for (i, cells) in table.iter().enumerate() {
            let line: Vec<String> = cells
                .iter()
                .enumerate()
                .map(|(c, cell)| align(c, cell, widths[c]))
                .collect();
            let _ = writeln!(out, "{}", line.join("  ").trim_end());
            if i == 0 {
                let total = widths.iter().sum::<usize>() + 2 * (widths.len() - 1);
                let _ = writeln!(out, "{}", "-".repeat(total));
            }
        }
        if !self.notes.is_empty() {
            let _ = writeln!(out);
            for note in &self.notes {
                let _ = writeln!(out, "{note}");
            }
        }
        let _ = writeln!(out, "\ngoals");
        for goal in &self.goals {
            let mark = match goal.met {
                Some(true) => "met",
                Some(false) => "NOT met",
                None => "-",
            };
            let _ = writeln!(out, "  {:<8} {}", mark, goal.text);
        }
        for row in &self.rows {
            if let Err(why) = &row.check {
                let _ = writeln!(
                    out,
                    "\nCHECK FAILED: {} on {}: {why}",
                    row.scenario,
                    row.kind.name()
                );
            }
        }
        for failure in &self.failures {
            let _ = writeln!(out, "\nFAILED: {failure}");
        }
        out
    }
}

/// The median of `ratios` and the ratios as given; `None` when there are none.
fn median(ratios: Vec<f64>) -> Option<(f64, Vec<f64>)> {
    let mut sorted = ratios.clone();
    sorted.sort_by(f64::total_cmp);
    let median = match sorted.len() {
        0 => return None,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    };
    Some((median, ratios))
}

/// One line as runs end, in the fixed widths of `PROGRESS_WIDTHS`.
fn print_progress<'a>(cells: impl Iterator<Item = &'a str>) {
    let cells: Vec<String> = cells
        .zip(PROGRESS_WIDTHS)
        .enumerate()
        .map(|(c, (cell, width))| align(c, cell, width))
        .collect();
    println!("{}", cells.join("  ").trim_end());
}

/// Text columns (scenario, server, check) to the left, numbers to the right.
fn align(column: usize, cell: &str, width: usize) -> String {
    if column < 2 || column == HEADER.len() - 1 {
        format!("{cell:<width$}")
    } else {
        format!("{cell:>width$}")
    }
}

/// A goal's value: ratios and small figures with decimals, large counts with separators.
fn format_value(value: f64) -> String {
    if value.abs() < 1000.0 {
        format!("{value:.2}")
    } else {
        thousands(value.round() as u64)
    }
}

/// 1234567 as "1,234,567".
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, d) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(d);
    }
    out
}
