//! Backups while serving and `petstore check`: SIGUSR1 during a burst of creates gives a
//! snapshot that checks clean, holds every pet acknowledged before the signal, and serves them
//! all once restored in place of `--db`; `--backup-keep` keeps the newest; a snapshot that
//! cannot be written (a path through a file, a full disk) is logged and retried while the
//! server goes on serving; the flags are refused with PostgreSQL; `check` fails on a damaged
//! file and says first, in one line, that a text or empty file is no store. A second process backs up and checks the live file of a server under creates, and
//! the backup restores every pet acknowledged before it began; a file held by a process that
//! does not share it, or left mid-commit by a crash, is refused with a clear message. A
//! snapshot restored over a crashed file serves what the snapshot holds and its counter goes on.

use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use crate::support::{Client, Options, Server, run};

/// Starts a server with snapshots into `dir` and the extra flags.
fn with_backups(dir: &Path, extra: &[&str]) -> Server {
    let mut args = vec!["--backup-dir".to_owned(), dir.display().to_string()];
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    Server::start_with(Options {
        args,
        ..Options::default()
    })
}

/// The snapshots in `dir`, oldest first.
fn snapshots(dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = fs::read_dir(dir)
        .expect("the backup dir lists")
        .map(|entry| entry.expect("an entry").path())
        .filter(|path| {
            let name = path.file_name().and_then(OsStr::to_str).unwrap_or("");
            name.starts_with("pets-") && name.ends_with(".redb")
        })
        .collect();
    found.sort();
    found
}

/// Runs `petstore check --db path`; returns the exit code, stdout and stderr.
fn check(path: &Path) -> (Option<i32>, String, String) {
    run(&["check".as_ref(), "--db".as_ref(), path.as_os_str()])
}

#[track_caller]
fn assert_checks_clean(path: &Path) -> String {
    let (code, stdout, stderr) = check(path);
    assert_eq!(code, Some(0), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(
        stdout.contains("ok: the file and its indexes agree"),
        "{stdout}"
    );
    stdout
}

/// Eight clients creating pets (statuses in turn) until stopped; every answered pet is kept.
struct Burst {
    acknowledged: Arc<Mutex<Vec<Value>>>,
    stop: Arc<AtomicBool>,
    writers: tokio::task::JoinSet<()>,
}

impl Burst {
    /// Starts the writers on `client`'s connection; `prefix` starts each pet's name.
    fn start(client: &Client, prefix: &'static str) -> Burst {
        let acknowledged = Arc::new(Mutex::new(Vec::<Value>::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let mut writers = tokio::task::JoinSet::new();
        for w in 0..8 {
            let mut client = client.share();
            let acknowledged = Arc::clone(&acknowledged);
            let stop = Arc::clone(&stop);
            writers.spawn(async move {
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    let status = ["available", "pending", "sold"][n % 3];
                    let body = format!(
                        r#"{{"name":"{prefix}{w}-{n}","categoryId":{n},"status":"{status}"}}"#
                    );
                    let pet = client.create(&body).await;
                    acknowledged.lock().expect("lock").push(pet);
                    n += 1;
                }
            });
        }
        Burst {
            acknowledged,
            stop,
            writers,
        }
    }

    /// Waits until `count` creates have been answered.
    async fn reach(&self, count: usize) {
        while self.acknowledged.lock().expect("lock").len() < count {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The pets answered so far.
    fn acknowledged(&self) -> Vec<Value> {
        self.acknowledged.lock().expect("lock").clone()
    }

    /// Stops the writers and returns every pet they were answered.
    async fn stop(self) -> Vec<Value> {
        self.stop.store(true, Ordering::Relaxed);
        let acknowledged = self.acknowledged;
        self.writers.join_all().await;
        acknowledged.lock().expect("lock").clone()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_taken_on_sigusr1_during_creates_checks_clean_and_restores_every_acknowledged_pet()
 {
    let root = tempfile::tempdir().expect("temp dir");
    let backups = root.path().join("backups");
    let server = with_backups(&backups, &[]);
    let mode = fs::metadata(&backups)
        .expect("made at start")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700);

    let client = server.h2().await;
    let burst = Burst::start(&client, "w");
    // Let the burst get going, then ask for a snapshot in the middle of it.
    burst.reach(300).await;
    let before_signal = burst.acknowledged();
    server.signal("USR1");
    tokio::task::block_in_place(|| server.wait_for_log("snapshot taken", 1));
    // Still creating while it was taken: the writer never waited for it.
    let during = burst.stop().await.len();
    assert!(
        during > before_signal.len(),
        "creates went on during the snapshot"
    );

    let taken = snapshots(&backups);
    assert_eq!(taken.len(), 1, "{taken:?}");
    let stopped = tokio::task::block_in_place(|| server.stop());
    assert!(
        !stopped.logs.contains("snapshot failed"),
        "{}",
        stopped.logs
    );
    let report = assert_checks_clean(&taken[0]);
    assert!(report.contains("pets: "), "{report}");

    // The restore: the server is stopped; the checked snapshot goes in place of --db.
    let restored_dir = tempfile::tempdir().expect("temp dir");
    let restored = restored_dir.path().join("pets.redb");
    fs::copy(&taken[0], &restored).expect("copied into place");
    let server = Server::start_with(Options {
        db: Some(restored.display().to_string()),
        ..Options::default()
    });
    let mut client = server.h2().await;
    client.assert_stored(&before_signal).await;
    let served = client.list_all("/v1/pets?limit=100").await;
    assert!(served.len() >= before_signal.len());
    // New pets get ids above every id of the snapshot.
    let max = served
        .iter()
        .filter_map(|p| p["id"].as_i64())
        .max()
        .expect("pets");
    let pet = client.create(r#"{"name":"after","categoryId":1}"#).await;
    assert!(pet["id"].as_i64().expect("id") > max);
    tokio::task::block_in_place(|| server.stop());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backup_keep_keeps_the_newest_snapshots_and_removes_the_older_ones() {
    let root = tempfile::tempdir().expect("temp dir");
    let backups = root.path().join("backups");
    let server = with_backups(&backups, &["--backup-keep", "2"]);
    let mut client = server.h1().await;
    let mut names = Vec::new();
    for n in 1..=3 {
        client
            .create(&format!(r#"{{"name":"pet {n}","categoryId":{n}}}"#))
            .await;
        server.signal("USR1");
        tokio::task::block_in_place(|| server.wait_for_log("snapshot taken", n));
        let newest = snapshots(&backups).pop().expect("a snapshot");
        names.push(newest);
        // Names are to the second: the next one must have its own.
        tokio::time::sleep(Duration::from_millis(1100)).await;
    }
    assert_eq!(snapshots(&backups), names[1..], "the two newest are kept");
    // The newest holds all three pets; each was complete when taken.
    let report = assert_checks_clean(&names[2]);
    assert!(report.contains("pets: 3 "), "{report}");
    tokio::task::block_in_place(|| server.stop());
}

#[test]
fn backup_every_takes_snapshots_on_its_own_and_keeps_the_newest() {
    let root = tempfile::tempdir().expect("temp dir");
    let backups = root.path().join("backups");
    let server = with_backups(&backups, &["--backup-every", "1s", "--backup-keep", "2"]);
    server.wait_for_log("reason=schedule", 3);
    let stopped = server.stop();
    assert!(!stopped.logs.contains("SIGUSR1"), "{}", stopped.logs);
    let taken = snapshots(&backups);
    assert_eq!(taken.len(), 2, "{taken:?}");
    assert_checks_clean(&taken[1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_that_cannot_be_written_is_logged_and_retried_while_serving_goes_on() {
    let root = tempfile::tempdir().expect("temp dir");
    // A file where the directory's parent should be: nothing can be made below it.
    let blocker = root.path().join("not-a-dir");
    fs::write(&blocker, b"x").expect("writes");
    let backups = blocker.join("backups");
    let server = with_backups(&backups, &[]);
    let mut client = server.h1().await;
    let pet = client.create(r#"{"name":"kept","categoryId":1}"#).await;
    server.signal("USR1");
    tokio::task::block_in_place(|| server.wait_for_log("snapshot failed", 1));
    client.assert_stored(&[pet]).await;
    let more = client.create(r#"{"name":"still","categoryId":2}"#).await;
    client.assert_stored(&[more]).await;
    assert!(server.logs().contains("failed=1"), "{}", server.logs());

    // Once the way is clear, the retry (not another signal) takes it.
    fs::remove_file(&blocker).expect("removed");
    tokio::task::block_in_place(|| server.wait_for_log("snapshot taken", 1));
    assert!(server.logs().contains("reason=retry"), "{}", server.logs());
    let taken = snapshots(&backups);
    assert_eq!(taken.len(), 1);
    tokio::task::block_in_place(|| server.stop());
    let report = assert_checks_clean(&taken[0]);
    assert!(report.contains("pets: 2 "), "{report}");
}

/// A tmpfs mounted for a test, unmounted when dropped.
struct Mount(PathBuf);

impl Mount {
    /// A tmpfs of `size` at `path`, or `None` where mounting is not allowed.
    fn tmpfs(path: &Path, size: &str) -> Option<Mount> {
        fs::create_dir_all(path).expect("mount point");
        let status = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(path)
            .status()
            .ok()?;
        status.success().then(|| Mount(path.to_owned()))
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_backup_disk_fails_the_snapshot_leaves_no_partial_file_and_serving_goes_on() {
    let root = tempfile::tempdir().expect("temp dir");
    let backups = root.path().join("full");
    let Some(_mount) = Mount::tmpfs(&backups, "64k") else {
        eprintln!("skipped: mounting a tmpfs is not allowed here");
        return;
    };
    let server = with_backups(&backups, &[]);
    // Enough pets that their copy does not fit in 64 KiB.
    let ids = crate::support::create_many(&server, 1500, |_| Some("available")).await;
    server.signal("USR1");
    tokio::task::block_in_place(|| server.wait_for_log("snapshot failed", 1));
    assert!(snapshots(&backups).is_empty());
    let left: Vec<_> = fs::read_dir(&backups).expect("lists").collect();
    assert!(left.is_empty(), "the partial copy is removed: {left:?}");
    let mut client = server.h2().await;
    let reply = client.get(&format!("/v1/pets/{}", ids[0])).await;
    assert_eq!(reply.status, 200);
    client.create(r#"{"name":"after","categoryId":1}"#).await;
    let stopped = tokio::task::block_in_place(|| server.stop());
    assert!(
        stopped.logs.contains("No space left on device"),
        "{}",
        stopped.logs
    );
}

#[test]
fn backup_flags_with_postgresql_are_refused_naming_its_own_tools() {
    let certs = Options::default();
    let (code, _, stderr) = run(&[
        "--db".as_ref(),
        "postgres://app@127.0.0.1/pets".as_ref(),
        "--backup-dir".as_ref(),
        "/tmp/unused".as_ref(),
        "--tls-cert".as_ref(),
        certs.tls_cert.as_os_str(),
        "--tls-key".as_ref(),
        certs.tls_key.as_os_str(),
        "--api-keys".as_ref(),
        certs.api_keys.as_os_str(),
    ]);
    assert_eq!(code, Some(1), "{stderr}");
    for tool in ["pg_dump", "pg_basebackup"] {
        assert!(stderr.contains(tool), "{stderr}");
    }
}

#[test]
fn check_fails_on_a_damaged_file_and_checks_a_live_one_beside_its_server() {
    let server = Server::start_with(shared_reads());
    let (code, stdout, stderr) = check(&server.db_path());
    assert_eq!(code, Some(0), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(
        stdout.contains("live: a server has the file open"),
        "{stdout}"
    );
    assert!(
        stdout.contains("ok: the file and its indexes agree"),
        "{stdout}"
    );
    let stopped = server.stop();
    let db = stopped.dir.path().join("pets.redb");
    let stdout = assert_checks_clean(&db);
    assert!(
        stdout.contains("pets: 0 (available 0, pending 0, sold 0, no status 0)"),
        "{stdout}"
    );

    let damaged = stopped.dir.path().join("damaged.redb");
    let mut bytes = fs::read(&db).expect("reads");
    for byte in bytes.iter_mut().skip(4096) {
        *byte ^= 0x5a;
    }
    fs::write(&damaged, &bytes).expect("writes");
    let (code, stdout, stderr) = check(&damaged);
    assert_eq!(code, Some(1), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("problem: file integrity"), "{stdout}");
    assert!(stderr.contains("disagreement"), "{stderr}");

    let garbage = stopped.dir.path().join("garbage.redb");
    fs::write(&garbage, vec![7u8; 100_000]).expect("writes");
    let (code, stdout, stderr) = check(&garbage);
    assert_eq!(code, Some(1), "stdout:\n{stdout}\nstderr:\n{stderr}");

    let (code, _, stderr) = check(&stopped.dir.path().join("missing.redb"));
    assert_eq!(code, Some(1));
    assert!(stderr.contains("missing.redb"), "{stderr}");
    assert!(
        !stopped.dir.path().join("missing.redb").exists(),
        "check never creates"
    );
}

/// Runs `petstore backup --db from --to to`; returns the exit code, stdout and stderr.
/// `check` on a file that is no store: exit 1, nothing on stdout, one line on stderr.
#[track_caller]
fn assert_check_says(path: &Path, why: &str) {
    let (code, stdout, stderr) = check(path);
    assert_eq!(code, Some(1), "stderr:\n{stderr}");
    assert_eq!(stdout, "");
    assert_eq!(
        stderr,
        format!("error: {} is not a petstore store: {why}\n", path.display())
    );
}

#[test]
fn check_says_a_text_file_is_not_a_petstore_store_in_one_line_and_exits_1() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("pets.txt");
    fs::write(&path, "Rex, available\nTom, sold\n").expect("write");
    assert_check_says(
        &path,
        "not a redb file (its first bytes are not redb's header)",
    );
}

#[test]
fn check_says_an_empty_file_is_not_a_petstore_store_in_one_line_and_exits_1() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("pets.redb");
    fs::write(&path, "").expect("write");
    assert_check_says(&path, "the file is empty");
    assert_eq!(
        fs::metadata(&path).expect("stat").len(),
        0,
        "left as it was"
    );
}

fn backup(from: &Path, to: &Path) -> (Option<i32>, String, String) {
    run(&[
        "backup".as_ref(),
        "--db".as_ref(),
        from.as_os_str(),
        "--to".as_ref(),
        to.as_os_str(),
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_process_backs_up_and_checks_the_live_file_under_creates_and_the_backup_restores()
{
    let server = Server::start_with(shared_reads());
    let live = server.db_path();
    let client = server.h2().await;
    let burst = Burst::start(&client, "b");
    burst.reach(300).await;
    let root = tempfile::tempdir().expect("temp dir");
    let target = root.path().join("pets-backup.redb");
    // Two backups over one name: the second replaces the first only once it is whole.
    let mut before_backup = Vec::new();
    for _ in 0..2 {
        before_backup = burst.acknowledged();
        let (code, stdout, stderr) = tokio::task::block_in_place(|| backup(&live, &target));
        assert_eq!(code, Some(0), "stdout:\n{stdout}\nstderr:\n{stderr}");
        assert!(stdout.starts_with("backup: "), "{stdout}");
    }
    let (code, stdout, stderr) = tokio::task::block_in_place(|| check(&live));
    let during = burst.stop().await.len();
    assert_eq!(code, Some(0), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(
        stdout.contains("live: a server has the file open"),
        "{stdout}"
    );
    assert!(
        during > before_backup.len(),
        "creates went on while the second process read the file"
    );
    let left: Vec<String> = fs::read_dir(root.path())
        .expect("lists")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, ["pets-backup.redb"], "no temp file is left");
    let mode = fs::metadata(&target).expect("exists").permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let stopped = tokio::task::block_in_place(|| server.stop());
    assert!(!stopped.logs.contains(" ERROR "), "{}", stopped.logs);
    // Not live any more: the backup gets redb's full integrity check too.
    let report = assert_checks_clean(&target);
    assert!(!report.contains("live:"), "{report}");

    let restored_dir = tempfile::tempdir().expect("temp dir");
    let restored = restored_dir.path().join("pets.redb");
    fs::copy(&target, &restored).expect("copied into place");
    let server = Server::start_with(Options {
        db: Some(restored.display().to_string()),
        ..Options::default()
    });
    let mut client = server.h2().await;
    client.assert_stored(&before_backup).await;
    tokio::task::block_in_place(|| server.stop());
}

#[tokio::test(flavor = "multi_thread")]
async fn backup_and_check_refuse_a_file_held_unshared_or_left_mid_commit_with_a_clear_message() {
    let dir = tempfile::tempdir().expect("temp dir");
    // A process that opens the file as redb does by default (a petstore that predates shared
    // reads): it does not share the file.
    let held = dir.path().join("held.redb");
    let holder = redb::Database::create(&held).expect("creates");
    let target = dir.path().join("backup.redb");
    let (code, _, stderr) = backup(&held, &target);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("does not share it"), "{stderr}");
    let (code, _, stderr) = check(&held);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("open in another process"), "{stderr}");
    drop(holder);
    let names: Vec<String> = fs::read_dir(dir.path())
        .expect("lists")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["held.redb"], "nothing written beside it");

    // A server killed in the middle of its life leaves the file for the next start to
    // repair (and, by default, its log to replay); a reader must not read it before that.
    for options in [Options::default(), shared_reads()] {
        let server = Server::start_with(options.clone());
        let mut client = server.h1().await;
        client.create(r#"{"name":"logged","categoryId":1}"#).await;
        let crashed = server.db_path();
        let dir = server.kill();
        let (code, _, stderr) = backup(&crashed, &target);
        assert_eq!(code, Some(1), "{stderr}");
        assert!(stderr.contains("mid-commit"), "{stderr}");
        assert!(!target.exists());
        // The next start repairs it; a backup of the stopped server's file then holds the pet.
        let server = Server::start_after_crash_with(dir, options);
        let stopped = server.stop();
        let db = stopped.dir.path().join("pets.redb");
        let (code, stdout, stderr) = backup(&db, &target);
        assert_eq!(code, Some(0), "stdout:\n{stdout}\nstderr:\n{stderr}");
        assert!(stdout.contains("backup: 1 pets"), "{stdout}");
        fs::remove_file(&target).expect("removed");
    }

    // Without --shared-reads, the live file is the server's alone: both say what to do.
    let server = Server::start();
    let (code, _, stderr) = backup(&server.db_path(), &target);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("--shared-reads") && stderr.contains("SIGUSR1"),
        "{stderr}"
    );
    let (code, _, stderr) = check(&server.db_path());
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("--shared-reads"), "{stderr}");
    server.stop();
}

/// Options for a server whose file other processes may read while it runs.
fn shared_reads() -> Options {
    Options {
        args: vec!["--shared-reads".to_owned()],
        ..Options::default()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_snapshot_restored_over_a_crashed_file_serves_the_snapshot_and_its_counter_goes_on() {
    let root = tempfile::tempdir().expect("temp dir");
    let backups = root.path().join("backups");
    let server = with_backups(&backups, &[]);
    let mut client = server.h1().await;
    let kept = client.create(r#"{"name":"kept","categoryId":1}"#).await;
    server.signal("USR1");
    tokio::task::block_in_place(|| server.wait_for_log("snapshot taken", 1));
    // Acknowledged after the snapshot began: in the live file, not in the snapshot.
    let after = client.create(r#"{"name":"after","categoryId":1}"#).await;
    let dir = server.kill();
    let taken = snapshots(&backups);
    assert_eq!(taken.len(), 1, "{taken:?}");
    fs::copy(&taken[0], dir.path().join("pets.redb")).expect("copied into place");

    let server = Server::start_after_crash(dir);
    let mut client = server.h2().await;
    assert_eq!(client.list_all("/v1/pets").await, [kept]);
    let next = client.create(r#"{"name":"next","categoryId":1}"#).await;
    assert_eq!(next["id"], after["id"], "the snapshot's counter goes on");
    tokio::task::block_in_place(|| server.stop());
}
