//! The goal lines: which measured figure is held against which target (ratios to the
//! baseline per server core, creates per core, memory, start-up times). It only reads the
//! report's rows and adds lines marked met or NOT met; a missed goal never fails the run.

use std::time::Duration;

use crate::report::{Kind, Report};
use crate::{READ_STORE, SCALE_STEPS};

/// Adds the goal lines; figures a short run did not measure show as "not measured".
pub fn add(
    report: &mut Report,
    read_rss_kib: u64,
    clean_start: Option<Duration>,
    crash_start: Option<Duration>,
) {
    let ratio = |report: &Report, scenario: &str| {
        report
            .find(scenario, Kind::Petstore, Some(READ_STORE))
            .and_then(|row| report.ratio(row))
    };
    for scenario in ["list20", "list20-h2", "get-one"] {
        let value = ratio(report, scenario);
        report.goal(
            &format!("{scenario}: req/s/core vs baseline"),
            value,
            ">= 0.80",
            |v| v >= 0.80,
        );
    }
    let value = ratio(report, "status-filter");
    report.goal(
        "status-filter at 100k: req/s/core vs baseline",
        value,
        ">= 0.75",
        |v| v >= 0.75,
    );
    let per_core = |report: &Report, pets: u64| {
        report
            .find("scale status-filter", Kind::Petstore, Some(pets))
            .map(|row| row.outcome.per_core())
    };
    let value = per_core(report, SCALE_STEPS[2])
        .zip(per_core(report, SCALE_STEPS[0]))
        .map(|(big, small)| big / small);
    report.goal(
        "status-filter req/s/core at 1M over at 10k",
        value,
        ">= 0.90",
        |v| v >= 0.90,
    );
    let value = report
        .find("create-64", Kind::Petstore, None)
        .map(|row| row.outcome.per_core());
    report.goal(
        "create, 64 clients: creates/s per core",
        value,
        ">= 30,000",
        |v| v >= 30_000.0,
    );
    let value = ratio(report, "handshake");
    report.goal("handshake: req/s/core vs baseline", value, ">= 0.95", |v| {
        v >= 0.95
    });
    report.goal(
        "peak RSS on the 100k store, MiB",
        Some(read_rss_kib as f64 / 1024.0),
        "<= 24",
        |v| v <= 24.0,
    );
    for (what, took) in [("clean stop", clean_start), ("crash", crash_start)] {
        report.goal(
            &format!("start-up at 1M after a {what}, ms"),
            took.map(|t| t.as_secs_f64() * 1000.0),
            "< 100",
            |v| v < 100.0,
        );
    }
}
