//! `petstore check --db FILE`: runs the store's check of a redb file (stopped or live) and
//! prints what it found, counts first, then every disagreement; the exit code says whether all
//! agree. A file that is no petstore store is said to be so in one line, and nothing else.

use std::path::Path;

use anyhow::bail;

use crate::store::{self, StoreError};
use crate::subject::Kind;

/// Checks the file and prints the report on stdout; `Err` when it does not check clean or
/// cannot be checked.
pub fn run(path: &Path) -> anyhow::Result<()> {
    let report = match store::redb_file::check(path) {
        Ok(report) => report,
        Err(StoreError::Locked) => bail!(
            "{} is open in another process that does not share it (a petstore serving it \
             without --shared-reads, or another check of it): check a snapshot (--backup-dir, \
             SIGUSR1), or start the server with --shared-reads",
            path.display()
        ),
        Err(e) => bail!("checking {}: {e}", path.display()),
    };
    if let Some(why) = &report.not_a_store {
        bail!("{} is not a petstore store: {why}", path.display());
    }
    println!("file: {}", path.display());
    if report.live {
        println!(
            "live: a server has the file open; checked from one read transaction beside it \
             (redb's check of every page runs only on a file no server has open, such as a \
             backup)"
        );
    }
    println!(
        "schema version: {}, next id: {}",
        report.schema_version, report.next_id
    );
    let statuses: Vec<String> = store::redb_file::STATUSES
        .iter()
        .zip(report.by_status)
        .map(|(status, count)| format!("{} {count}", status.as_str()))
        .collect();
    println!(
        "pets: {} ({}, no status {})",
        report.pets,
        statuses.join(", "),
        report.without_status
    );
    println!("status index entries: {}", report.index_entries);
    println!("revisions: {}", report.revisions);
    println!(
        "idempotency records: {} ({} live)",
        report.records, report.live_records
    );
    println!("events: {}", report.events);
    // Every other kind of record after these two, by its plural.
    let others: String = report
        .kinds
        .iter()
        .filter(|(kind, _)| !matches!(kind, Kind::Order | Kind::Category))
        .map(|(kind, n)| format!("; {}: {n}", kind.plural()))
        .collect();
    println!(
        "orders: {} ({} placed); categories: {}{others}",
        report.count_of(Kind::Order),
        report.placed_orders,
        report.count_of(Kind::Category)
    );
    if let Some(batches) = report.logged {
        // The counts above are of the file with them, as the next start serves it.
        println!(
            "write-ahead log: {batches} batch(es) after the file's last checkpoint, replayed into the checked copy (the next start replays them into the file)"
        );
    }
    for problem in &report.problems {
        println!("problem: {problem}");
    }
    let unlisted = report.problem_count - report.problems.len() as u64;
    if unlisted > 0 {
        println!("problem: ... and {unlisted} more");
    }
    if report.problem_count > 0 {
        bail!(
            "{}: {} disagreement(s), see the problem lines; do not restore from this file",
            path.display(),
            report.problem_count
        );
    }
    println!("ok: the file and its indexes agree");
    Ok(())
}
