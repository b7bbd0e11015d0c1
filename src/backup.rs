//! Backups while serving (`--backup-dir`): when a snapshot is due (every `--backup-every`, on
//! SIGUSR1, or a retry after a failure), where it goes and under which name, and how many are
//! kept. A snapshot is written by the store from one read transaction on a thread of its own at
//! the lowest CPU priority (SCHED_IDLE), to a hidden temp name in the directory; it is fsynced, renamed to
//! `pets-YYYYMMDDTHHMMSSZ.redb` and the directory fsynced, so a visible snapshot is always
//! complete. A failure is logged, counted and retried with backoff; it never stops the server.
//! `petstore backup` (`run_once`) writes one the same way from a second process.

use std::fs;
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use tokio::time::sleep_until;

use crate::clock::{self, Precision};
use crate::durable;
use crate::lifecycle::SnapshotRequests;
use crate::store::Store;

/// The first retry after a failure; each further failure doubles it, up to `MAX_BACKOFF`.
const FIRST_BACKOFF: Duration = Duration::from_secs(5);
const MAX_BACKOFF: Duration = Duration::from_secs(600);

const PREFIX: &str = "pets-";
const SUFFIX: &str = ".redb";
/// Where a snapshot is written before its rename: hidden, so nothing takes it for one.
const TEMP_PREFIX: &str = ".pets-";
const TEMP_SUFFIX: &str = ".redb.tmp";

/// What the operator asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    pub dir: PathBuf,
    /// Snapshots kept; the oldest beyond these are removed. At least 1.
    pub keep: usize,
    /// `None`: only on demand (SIGUSR1).
    pub every: Option<Duration>,
}

/// Counts for the logs (the metrics keep their own, in `metrics`): snapshots written and failed, and when the last
/// good one was taken.
#[derive(Debug, Default)]
pub struct Stats {
    pub taken: AtomicU64,
    pub failed: AtomicU64,
    /// Unix seconds when the last good snapshot began; 0: none yet.
    pub last_good: AtomicU64,
}

/// How the stop reaches a snapshot in progress: `cancel` asks it to end (its reads look every
/// few thousand entries), and the snapshot thread holds `busy` while it touches the directory.
#[derive(Default)]
pub struct Halt {
    cancel: AtomicBool,
    busy: std::sync::Mutex<()>,
}

/// The running backup task, for the stop to end it.
pub struct Backups {
    task: tokio::task::JoinHandle<()>,
    halt: Arc<Halt>,
}

impl Backups {
    /// Stops taking snapshots; a snapshot in progress ends and removes its temp file before
    /// this returns, so the process never exits half way through a rename or a prune.
    pub async fn stop(self) {
        self.halt.cancel.store(true, Ordering::Relaxed);
        self.task.abort();
        let halt = self.halt;
        let _ = tokio::task::spawn_blocking(move || {
            drop(halt.busy.lock().unwrap_or_else(PoisonError::into_inner));
        })
        .await;
    }
}

/// Starts the backup task, or, without `--backup-dir`, one that only says SIGUSR1 has nothing
/// to do.
pub fn start(store: &Store, settings: Option<Settings>, mut requests: SnapshotRequests) -> Backups {
    let halt = Arc::new(Halt::default());
    let task = match settings {
        Some(settings) => tokio::spawn(run(
            store.clone(),
            settings,
            requests,
            Arc::default(),
            Arc::clone(&halt),
        )),
        None => tokio::spawn(async move {
            loop {
                requests.requested().await;
                tracing::warn!("SIGUSR1: no snapshot taken, --backup-dir is not set");
            }
        }),
    };
    Backups { task, halt }
}

/// Takes snapshots as `settings` and SIGUSR1 ask until the task is dropped.
async fn run(
    store: Store,
    settings: Settings,
    mut requests: SnapshotRequests,
    stats: Arc<Stats>,
    halt: Arc<Halt>,
) {
    tracing::info!(
        dir = %settings.dir.display(),
        keep = settings.keep,
        every = %settings.every.map_or_else(|| "on demand (SIGUSR1)".to_owned(), |d| humantime::format_duration(d).to_string()),
        "backups on"
    );
    // Made now, so an operator sees a bad directory at start; a failure is only logged, and
    // every snapshot tries again.
    if let Err(e) = ensure_dir(&settings.dir) {
        tracing::warn!(dir = %settings.dir.display(), error = %e, "backup directory cannot be made; snapshots will fail until it can");
    }
    let mut scheduled = settings.every.map(|every| Instant::now() + every);
    let mut retry: Option<Instant> = None;
    let mut failures: u32 = 0;
    loop {
        let due = match (scheduled, retry) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let reason = tokio::select! {
            () = requests.requested() => "SIGUSR1",
            () = wait(due) => if retry.is_some_and(|r| r <= Instant::now()) { "retry" } else { "schedule" },
        };
        let began = Instant::now();
        let outcome = take(store.clone(), settings.clone(), Arc::clone(&halt)).await;
        if let Some(every) = settings.every {
            scheduled = Some(Instant::now() + every);
        }
        match outcome {
            Ok((path, pets, started)) => {
                failures = 0;
                retry = None;
                stats.taken.fetch_add(1, Ordering::Relaxed);
                stats.last_good.store(started, Ordering::Relaxed);
                crate::metrics::snapshot_taken(started);
                tracing::info!(
                    file = %path.display(),
                    pets,
                    reason,
                    ms = began.elapsed().as_millis() as u64,
                    "snapshot taken"
                );
            }
            Err(e) => {
                failures = failures.saturating_add(1);
                let failed = stats.failed.fetch_add(1, Ordering::Relaxed) + 1;
                crate::metrics::snapshot_failed();
                let backoff = FIRST_BACKOFF
                    .saturating_mul(1 << failures.saturating_sub(1).min(16))
                    .min(MAX_BACKOFF);
                retry = Some(Instant::now() + backoff);
                tracing::error!(
                    dir = %settings.dir.display(),
                    error = %e,
                    reason,
                    failed,
                    retry_in_s = backoff.as_secs(),
                    "snapshot failed; serving goes on"
                );
            }
        }
    }
}

/// Waits until `due`, or for ever without one.
async fn wait(due: Option<Instant>) {
    match due {
        Some(due) => sleep_until(due.into()).await,
        None => std::future::pending().await,
    }
}

/// One snapshot, on a thread of its own; returns its path, its number of pets and the Unix
/// second it began.
async fn take(
    store: Store,
    settings: Settings,
    halt: Arc<Halt>,
) -> anyhow::Result<(PathBuf, u64, u64)> {
    let (done, outcome) = tokio::sync::oneshot::channel();
    // Not tokio's blocking pool: the thread lowers its own priority, which must not outlive
    // the snapshot on a pooled thread.
    std::thread::Builder::new()
        .name("petstore-snapshot".into())
        .spawn(move || {
            let _busy = halt.busy.lock().unwrap_or_else(PoisonError::into_inner);
            // Checked under the lock: once the stop has had it, nothing more is written.
            if halt.cancel.load(Ordering::Relaxed) {
                return;
            }
            lower_priority();
            let _ = done.send(take_blocking(&store, &settings, &halt.cancel));
        })
        .map_err(|e| anyhow::anyhow!("starting the snapshot thread: {e}"))?;
    outcome
        .await
        .map_err(|_| anyhow::anyhow!("the snapshot thread ended without an answer"))?
}

/// The lowest CPU priority for the calling thread only (on Linux a thread has its own policy
/// and nice value): SCHED_IDLE, which any other thread preempts as soon as it wakes, so the
/// snapshot runs only on CPU time the server leaves. Nice 19 alone still let it hold the CPU for
/// a scheduler slice after each wake-up of a server thread: on one core, creates ran at 0.42 of
/// their rate with p50 2.8x during back-to-back snapshots (benches/load, `snapshot`). Nice 19 is
/// the fallback where SCHED_IDLE is refused. Best effort.
fn lower_priority() {
    // The kernel's `struct sched_param` is one int (libc's musl struct adds fields the kernel
    // never reads, so it is not built here).
    let param: libc::c_int = 0;
    // SAFETY: gettid takes nothing; sched_setscheduler reads `param`, which outlives the call,
    // and setpriority takes no pointers. The raw syscall, not libc's wrapper: musl's wrapper
    // only returns ENOSYS.
    let outcome = unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::pid_t;
        if libc::syscall(
            libc::SYS_sched_setscheduler,
            tid,
            libc::SCHED_IDLE,
            &raw const param,
        ) == 0
        {
            0
        } else {
            libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, 19)
        }
    };
    if outcome != 0 {
        tracing::debug!(error = %io::Error::last_os_error(), "the snapshot thread keeps its priority");
    }
}

fn take_blocking(
    store: &Store,
    settings: &Settings,
    cancel: &AtomicBool,
) -> anyhow::Result<(PathBuf, u64, u64)> {
    use anyhow::Context;
    let dir = &settings.dir;
    ensure_dir(dir).with_context(|| format!("making {}", dir.display()))?;
    remove_stale_temps(dir);
    let started = SystemTime::now();
    let stamp = stamp(started);
    let temp = dir.join(format!("{TEMP_PREFIX}{stamp}{TEMP_SUFFIX}"));
    let path = dir.join(format!("{PREFIX}{stamp}{SUFFIX}"));
    let written = write_snapshot(store, &temp, &path, cancel);
    if written.is_err() {
        let _ = fs::remove_file(&temp);
    }
    let pets = written?;
    prune(dir, settings.keep);
    let unix = started
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    Ok((path, pets, unix))
}

fn write_snapshot(
    store: &Store,
    temp: &Path,
    path: &Path,
    cancel: &AtomicBool,
) -> anyhow::Result<u64> {
    let _ = fs::remove_file(temp);
    let pets = store
        .snapshot_to(temp, cancel)
        .map_err(|e| anyhow::anyhow!("writing {}: {e}", temp.display()))?;
    // The pets are the store's, not for other users of the machine: 0600.
    durable::publish_private(temp, path)?;
    Ok(pets)
}

/// `petstore backup --db LIVE --to FILE`, from a second process (cron, a systemd timer): the
/// store copies LIVE from one read transaction into a hidden temp file beside FILE, which is
/// given mode 0600, fsynced and renamed over FILE, and the directory fsynced, so FILE is
/// always a whole backup, the new one or the one before.
pub fn run_once(from: &Path, to: &Path) -> anyhow::Result<()> {
    use anyhow::Context;
    let name = to
        .file_name()
        .with_context(|| format!("--to {}: names no file", to.display()))?;
    let dir = match to.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let temp = dir.join(format!(
        ".{}.tmp-{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let began = Instant::now();
    let written = write_backup(from, &temp, to);
    if written.is_err() {
        let _ = fs::remove_file(&temp);
    }
    let pets = written?;
    println!(
        "backup: {pets} pets from {} to {} in {} ms",
        from.display(),
        to.display(),
        began.elapsed().as_millis()
    );
    Ok(())
}

fn write_backup(from: &Path, temp: &Path, to: &Path) -> anyhow::Result<u64> {
    let _ = fs::remove_file(temp);
    let pets = match crate::store::redb_file::backup(from, temp) {
        Ok(pets) => pets,
        Err(crate::store::StoreError::Locked) => anyhow::bail!(
            "{} is open in a process that does not share it (a petstore serving it without \
             --shared-reads, or a `petstore check` of it): take a snapshot in the server \
             (--backup-dir, SIGUSR1), or start the server with --shared-reads",
            from.display()
        ),
        Err(e) => anyhow::bail!("backing up {} into {}: {e}", from.display(), temp.display()),
    };
    durable::publish_private(temp, to)?;
    Ok(pets)
}

/// Creates the directory (and its parents) with mode 0700 if it is missing.
fn ensure_dir(dir: &Path) -> io::Result<()> {
    match fs::metadata(dir) {
        Ok(meta) if meta.is_dir() => Ok(()),
        Ok(_) => Err(io::Error::new(
            io::ErrorKind::NotADirectory,
            "exists and is not a directory",
        )),
        Err(e) if e.kind() == io::ErrorKind::NotFound => fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir),
        Err(e) => Err(e),
    }
}

/// `pets-YYYYMMDDTHHMMSSZ`'s stamp for `time`, in UTC.
fn stamp(time: SystemTime) -> String {
    clock::rfc3339(time, Precision::Seconds)
        .to_string()
        .replace(['-', ':'], "")
}

/// Whether `name` is a snapshot's: `pets-` + 16 stamp characters + `.redb`.
fn is_snapshot(name: &str) -> bool {
    name.strip_prefix(PREFIX)
        .and_then(|rest| rest.strip_suffix(SUFFIX))
        .is_some_and(|stamp| {
            stamp.len() == 16
                && stamp.bytes().enumerate().all(|(i, b)| match i {
                    8 => b == b'T',
                    15 => b == b'Z',
                    _ => b.is_ascii_digit(),
                })
        })
}

/// Temp files a crash or a kill left mid-snapshot: only this process's one task writes them.
fn remove_stale_temps(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with(TEMP_PREFIX) && name.ends_with(TEMP_SUFFIX) {
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// Removes the oldest snapshots beyond `keep`; the stamp orders names as it orders time. A
/// failure is logged: the new snapshot is good all the same.
fn prune(dir: &Path, keep: usize) {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) => {
            tracing::warn!(dir = %dir.display(), error = %e, "listing snapshots to prune failed");
            return;
        }
    };
    let mut names: Vec<String> = entries
        .flatten()
        .filter_map(|entry| entry.file_name().into_string().ok())
        .filter(|name| is_snapshot(name))
        .collect();
    names.sort_unstable();
    let excess = names.len().saturating_sub(keep);
    let mut removed = false;
    for name in &names[..excess] {
        let path = dir.join(name);
        match fs::remove_file(&path) {
            Ok(()) => {
                removed = true;
                tracing::info!(file = %path.display(), "old snapshot removed");
            }
            Err(e) => {
                tracing::warn!(file = %path.display(), error = %e, "removing an old snapshot failed")
            }
        }
    }
    if removed && let Err(e) = durable::sync_dir(dir) {
        tracing::warn!(dir = %dir.display(), error = %e, "syncing the backup directory failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn stamps_are_utc_and_sort_as_time() {
        let time = SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_000_000);
        assert_eq!(stamp(time), "20261118T110640Z");
        assert!(is_snapshot(&format!("{PREFIX}{}{SUFFIX}", stamp(time))));
        for other in [
            "pets-20261118T110640Z.redb.tmp",
            ".pets-20261118T110640Z.redb.tmp",
            "pets-2026111xT081320Z.redb",
            "pets.redb",
            "pets-20261118T1106400.redb",
        ] {
            assert!(!is_snapshot(other), "{other}");
        }
    }

    #[test]
    fn prune_keeps_the_newest_and_leaves_other_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        for name in [
            "pets-20260101T000000Z.redb",
            "pets-20260301T000000Z.redb",
            "pets-20260201T000000Z.redb",
            "notes.txt",
        ] {
            fs::write(dir.path().join(name), b"x").expect("writes");
        }
        prune(dir.path(), 2);
        let mut left: Vec<String> = fs::read_dir(dir.path())
            .expect("lists")
            .map(|e| e.expect("entry").file_name().into_string().expect("utf-8"))
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                "notes.txt",
                "pets-20260201T000000Z.redb",
                "pets-20260301T000000Z.redb"
            ]
        );
    }

    #[test]
    fn the_directory_is_made_private_and_a_file_in_the_way_is_an_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let backups = dir.path().join("a/backups");
        ensure_dir(&backups).expect("made");
        let mode = fs::metadata(&backups).expect("exists").permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        let file = dir.path().join("file");
        fs::write(&file, b"x").expect("writes");
        assert!(ensure_dir(&file).is_err());
        assert!(ensure_dir(&file.join("below")).is_err());
    }
}
