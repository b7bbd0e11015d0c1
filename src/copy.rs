//! `petstore copy --from DB --to DB`: copies a whole store (every pet with its revision, the
//! id counter, the live idempotency records) into an empty one through the store's export and
//! import, whichever backend either side is, with progress on stderr. Then it reads both stores
//! again and compares what they hold (count and checksum of the pets, the counter, count and
//! checksum of the records); a difference fails the command. A copy that fails leaves the
//! target empty, so it can simply be run again.

use std::fmt;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use sha2::{Digest, Sha256};

use crate::clock::unix_now;
use crate::config::{CopyConfig, Database};
use crate::store::{self, Chunk, Import, Location, NextIds, Store, StoreError, Tuning};
use crate::subject::Kind;

/// Pets per chunk: the unit read, written (one transaction or one `COPY` each) and counted.
const CHUNK: usize = 20_000;
/// How often progress is shown.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);
/// The redb page cache of each redb side.
const REDB_CACHE_BYTES: usize = 64 << 20;
/// Connections of each PostgreSQL side: the export or the import takes one, opening another.
const PG_POOL_SIZE: usize = 2;
/// The statement bound of the PostgreSQL sides' pooled connections; the copy's own statements
/// set a longer one (see `store::postgres::copy`).
const PG_STATEMENT_TIMEOUT: Duration = Duration::from_secs(5);
/// The check compares the idempotency records still live this long after it starts: records
/// expiring sooner may be purged from one side and not the other while it reads.
const RECORDS_LIVE_FOR: u64 = 600;

/// Runs the copy and its check; any failure is an error, so the process exits non-zero.
pub async fn run(config: CopyConfig) -> anyhow::Result<()> {
    if let (Database::Redb(from), Database::Redb(to)) = (&config.from, &config.to)
        && same_file(from, to)
    {
        bail!("--from and --to are the same file {}", from.display());
    }
    // Opening a redb path creates the file: a mistyped source must not become an empty one.
    if let Database::Redb(path) = &config.from
        && !path.is_file()
    {
        bail!("--from {}: no such file", path.display());
    }
    let (source, pets) = open(&config, &config.from, "--from").await?;
    let target = match open(&config, &config.to, "--to").await {
        Ok((target, _)) => target,
        Err(e) => {
            source.close().await;
            return Err(e);
        }
    };
    let result = copy_and_check(&source, &target, pets, &config).await;
    source.close().await;
    target.close().await;
    result
}

async fn copy_and_check(
    source: &Store,
    target: &Store,
    pets: u64,
    config: &CopyConfig,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut import = target.import().await.map_err(|e| match e {
        StoreError::NotEmpty { .. } => anyhow!(
            "--to {}: {e}; copy only into a new or empty store (it was left as it was)",
            name(&config.to)
        ),
        e => anyhow!(e).context(format!("--to {}", name(&config.to))),
    })?;
    let copied = match transfer(source, &mut import, pets).await {
        Ok(copied) => copied,
        Err(e) => {
            let e = match import.abort().await {
                Ok(()) => e.context("the copy failed; the target was left empty"),
                Err(abort) => e.context(format!(
                    "the copy failed, and emptying the target again failed too ({abort}): \
                     remove what it holds before copying again"
                )),
            };
            return Err(e);
        }
    };
    import
        .commit(copied.next_ids)
        .await
        .context("committing the copy; the target was left empty")?;
    let seconds = started.elapsed().as_secs_f64();
    eprintln!(
        "copied {} pets, {} idempotency records, {} in {seconds:.1} s ({:.0} pets/s)",
        copied.pets,
        copied.records,
        counted(&copied.others),
        copied.pets as f64 / seconds.max(0.001)
    );

    let started = Instant::now();
    eprintln!("checking: reading both stores again");
    let live_after = unix_now().saturating_add(RECORDS_LIVE_FOR);
    let (from, to) = tokio::join!(Tally::of(source, live_after), Tally::of(target, live_after));
    let from = from.context("reading --from again")?;
    let to = to.context("reading --to again")?;
    println!("source: {from}");
    println!("target: {to}");
    if from != to {
        bail!(
            "the target does not match the source (was the source written to during the \
             copy?)"
        );
    }
    println!(
        "the copy matches its source (checked in {:.1} s)",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// What the copy moved, and the counters to commit.
struct Copied {
    pets: u64,
    records: u64,
    /// How many records of each other kind, in the export's order.
    others: Vec<(Kind, u64)>,
    next_ids: NextIds,
}

/// Adds `n` records of `kind` to `counts`.
fn count(counts: &mut Vec<(Kind, u64)>, kind: Kind, n: usize) {
    match counts.iter_mut().find(|(k, _)| *k == kind) {
        Some((_, count)) => *count += n as u64,
        None => counts.push((kind, n as u64)),
    }
}

/// "3 categories and 2 orders": every kind of `counts` (those of `NextIds::others`, a kind
/// with none too), in words.
fn counted(counts: &[(Kind, u64)]) -> String {
    listed(
        counts
            .iter()
            .map(|(kind, n)| format!("{n} {}", kind.plural())),
    )
}

/// "a, b and c".
fn listed(words: impl Iterator<Item = String>) -> String {
    let words: Vec<String> = words.collect();
    match words.split_last() {
        None => String::new(),
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
    }
}

/// Streams the source's export into the import, chunk by chunk; the export reads the next
/// chunks while one is written.
async fn transfer(source: &Store, import: &mut Import, total: u64) -> anyhow::Result<Copied> {
    let mut export = source
        .export(CHUNK, unix_now())
        .await
        .context("reading --from")?;
    let others = export.next_ids.others().into_iter();
    let mut copied = Copied {
        pets: 0,
        records: 0,
        others: others.map(|(kind, _)| (kind, 0)).collect(),
        next_ids: export.next_ids.clone(),
    };
    let started = Instant::now();
    let mut shown = started;
    while let Some(chunk) = export.next().await {
        let chunk = chunk.context("reading --from")?;
        match &chunk {
            Chunk::Pets(pets) => copied.pets += pets.len() as u64,
            Chunk::Records(records) => copied.records += records.len() as u64,
            Chunk::Rows(rows) => count(&mut copied.others, rows.kind, rows.records.len()),
        }
        import.write(chunk).await.context("writing --to")?;
        if shown.elapsed() >= PROGRESS_EVERY {
            shown = Instant::now();
            let rate = copied.pets as f64 / started.elapsed().as_secs_f64().max(0.001);
            let percent = (copied.pets * 100)
                .checked_div(total)
                .unwrap_or(100)
                .min(100);
            eprintln!(
                "copying: {} of {total} pets ({percent}%), {rate:.0} pets/s, {} idempotency records",
                copied.pets, copied.records
            );
        }
    }
    Ok(copied)
}

/// What a store holds, as the check compares it: counts and SHA-256 digests, over every pet's
/// id, revision and JSON in id order, over every record still live at a given time in scope
/// order (each backend lists its records in its own order: redb by expiry, PostgreSQL by
/// scope), and over every category and order in id order.
#[derive(PartialEq, Eq)]
struct Tally {
    pets: u64,
    pets_digest: [u8; 32],
    next_ids: NextIds,
    records: u64,
    records_digest: [u8; 32],
    /// How many records of each other kind, in the export's order.
    others: Vec<(Kind, u64)>,
    others_digest: [u8; 32],
}

impl Tally {
    async fn of(store: &Store, live_after: u64) -> Result<Tally, StoreError> {
        let mut export = store.export(CHUNK, live_after).await?;
        let (mut pets, mut pets_digest) = (0, Sha256::new());
        let mut records = Vec::new();
        let others = export.next_ids.others().into_iter();
        let mut others: Vec<(Kind, u64)> = others.map(|(kind, _)| (kind, 0)).collect();
        let mut others_digest = Sha256::new();
        while let Some(chunk) = export.next().await {
            match chunk? {
                Chunk::Pets(chunk) => {
                    for pet in &chunk {
                        pets_digest.update(pet.id.to_be_bytes());
                        pets_digest.update(pet.revision.to_be_bytes());
                        pets_digest.update((pet.json.len() as u64).to_be_bytes());
                        pets_digest.update(&pet.json);
                    }
                    pets += chunk.len() as u64;
                }
                Chunk::Records(chunk) => records.extend(chunk),
                Chunk::Rows(rows) => {
                    for (id, stored) in &rows.records {
                        others_digest.update(rows.kind.name());
                        others_digest.update(id.to_be_bytes());
                        others_digest.update((stored.len() as u64).to_be_bytes());
                        others_digest.update(stored);
                    }
                    count(&mut others, rows.kind, rows.records.len());
                }
            }
        }
        records.sort_unstable_by_key(|record| record.scope);
        let mut records_digest = Sha256::new();
        for record in &records {
            records_digest.update(record.scope);
            records_digest.update(record.fingerprint);
            records_digest.update(record.expires_at.to_be_bytes());
            records_digest.update(record.pet_id.to_be_bytes());
        }
        Ok(Tally {
            pets,
            pets_digest: pets_digest.finalize().into(),
            next_ids: export.next_ids,
            records: records.len() as u64,
            records_digest: records_digest.finalize().into(),
            others,
            others_digest: others_digest.finalize().into(),
        })
    }
}

impl fmt::Display for Tally {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} pets, sha256 {}, next id {}; {} idempotency records, sha256 {}; {}, sha256 {}, \
             next ids {}",
            self.pets,
            hex(&self.pets_digest),
            self.next_ids.pets(),
            self.records,
            hex(&self.records_digest),
            counted(&self.others),
            hex(&self.others_digest),
            counted_ids(&self.next_ids),
        )
    }
}

/// "4 and 3": the next id of every kind but pets, in `counted`'s order.
fn counted_ids(next: &NextIds) -> String {
    listed(next.others().iter().map(|(_, id)| id.to_string()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Opens one side; returns it and its number of pets.
async fn open(config: &CopyConfig, db: &Database, flag: &str) -> anyhow::Result<(Store, u64)> {
    let location = match db {
        Database::Redb(path) => Location::Redb {
            path: path.clone(),
            cache_bytes: REDB_CACHE_BYTES,
            // The import's chunks are not durable until the last (redb refuses that on a
            // shared file), and nothing else should read a store while it is being filled.
            shared: false,
        },
        Database::Postgres(url) => Location::Postgres(Box::new(
            store::parse_postgres(
                url,
                config.db_password_file.as_deref(),
                config.db_ca.as_deref(),
                PG_POOL_SIZE,
                PG_STATEMENT_TIMEOUT,
            )
            .with_context(|| format!("{flag} {url}"))?,
        )),
    };
    // Neither side serves creates, so these only have to be valid.
    let tuning = Tuning {
        // A copy runs no purge long enough to matter; the target's server keeps its own.
        events_keep: crate::store::DEFAULT_EVENTS_KEEP,
        idempotency_ttl: Duration::from_secs(24 * 3600),
        max_write_batch: store::DEFAULT_MAX_WRITE_BATCH,
        order_hold: None,
    };
    Store::open(location, tuning)
        .await
        .with_context(|| format!("opening {flag} {}", name(db)))
}

/// The store as the operator named it; a URL never holds the password.
fn name(db: &Database) -> String {
    match db {
        Database::Redb(path) => path.display().to_string(),
        Database::Postgres(url) => url.clone(),
    }
}

/// Whether two paths name one file: the same path, or, for files that exist, the same inode.
fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}
