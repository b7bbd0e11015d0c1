//! Crash safety: a pet acknowledged with 201 survives SIGKILL unchanged and its id is never
//! given again, and so does the Idempotency-Key record committed with it, a patch or a
//! delete; a write the disk refuses gets 503, leaves the database as it was, and reads go on;
//! once the disk takes writes again, creates resume without a restart. The SIGKILLs under
//! creates run on redb both ways it opens its file and on PostgreSQL. (Faults caused inside
//! the commit itself, and power cuts, are in `faults.rs`.)

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::idempotency::{assert_replay, post_keyed};
use crate::support::{Client, Options, Server, create_until_broken};

#[tokio::test(flavor = "multi_thread")]
async fn every_pet_acknowledged_before_a_sigkill_survives_and_no_id_is_reused() {
    sigkills_under_creates(Options::default()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn with_shared_reads_every_pet_acknowledged_before_a_sigkill_survives() {
    sigkills_under_creates(Options {
        args: vec!["--shared-reads".to_owned()],
        ..Options::default()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn on_postgres_every_pet_acknowledged_before_a_sigkill_survives() {
    let cluster = tokio::task::block_in_place(crate::pg_cluster::Cluster::start);
    sigkills_under_creates(Options {
        db: Some(cluster.url()),
        ..Options::default()
    })
    .await;
}

/// Three rounds of creates from four clients, each ended by a SIGKILL of the server: every
/// pet acknowledged is served after the restart, no id is given twice, and the next create
/// gets an id above every one before.
async fn sigkills_under_creates(options: Options) {
    let mut server = Server::start_with(options.clone());
    let acknowledged = Arc::new(Mutex::new(Vec::new()));
    for round in 0..3 {
        let writers = create_until_broken(&server, &format!("round{round}"), &acknowledged).await;
        server.wait_for_log("status=201", 30);
        let dir = server.kill();
        writers.join_all().await;
        server = Server::start_after_crash_with(dir, options.clone());

        let pets = acknowledged.lock().expect("lock").clone();
        let mut by_id = BTreeMap::new();
        for pet in &pets {
            assert!(
                by_id.insert(pet["id"].as_i64().expect("id"), pet).is_none(),
                "id given twice: {pet}"
            );
        }
        let mut client = server.h2().await;
        client.assert_stored(&pets).await;
        let next = client.create(r#"{"name":"after","categoryId":0}"#).await;
        let highest = by_id.keys().next_back().copied().unwrap_or(0);
        assert!(
            next["id"].as_i64().expect("id") > highest,
            "a new id after {highest}: {next}"
        );
        acknowledged.lock().expect("lock").push(next);
    }
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_keyed_create_acknowledged_before_a_sigkill_is_replayed_after_the_restart() {
    let body = r#"{"name":"Rex","categoryId":1,"status":"sold"}"#;
    let server = Server::start();
    let first = post_keyed(&mut server.h1().await, "before-the-crash", body).await;
    let server = Server::start_after_crash(server.kill());
    let mut client = server.h2().await;
    assert_replay(
        &first,
        &post_keyed(&mut client, "before-the-crash", body).await,
    );
    assert_eq!(client.list_all("/v1/pets").await, [first.json()]);
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn patches_and_deletes_acknowledged_before_a_sigkill_survive_with_their_revisions() {
    let server = Server::start();
    let mut client = server.h1().await;
    let a = client
        .create(r#"{"name":"a","categoryId":1,"status":"available"}"#)
        .await;
    let b = client
        .create(r#"{"name":"b","categoryId":1,"status":"pending"}"#)
        .await;
    let c = client.create(r#"{"name":"c","categoryId":1}"#).await;
    let path = |pet: &serde_json::Value| format!("/v1/pets/{}", pet["id"]);
    let patched = client
        .patch_json(&path(&a), r#"{"name":"a2","status":"sold"}"#)
        .await;
    assert_eq!(patched.status, 200, "{:?}", patched.body);
    let patched_again = client.patch_json(&path(&a), r#"{"categoryId":7}"#).await;
    assert_eq!(patched_again.status, 200, "{:?}", patched_again.body);
    let given_status = client
        .patch_json(&path(&c), r#"{"status":"pending"}"#)
        .await;
    assert_eq!(given_status.status, 200, "{:?}", given_status.body);
    assert_eq!(client.delete(&path(&b)).await.status, 204);

    // Every acknowledged write is in the file or in its write-ahead log: a check of them as
    // the crash left them (the log replayed into the check's copy) finds the store's rules
    // kept, and the two pets.
    let dir = server.kill();
    let crashed = dir.path().join("pets.redb");
    let (code, stdout, stderr) =
        crate::support::run(&["check".as_ref(), "--db".as_ref(), crashed.as_os_str()]);
    assert_eq!(code, Some(0), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("pets: 2 "), "{stdout}");
    let server = Server::start_after_crash(dir);
    let mut client = server.h2().await;
    let a_now = client.get(&path(&a)).await;
    assert_eq!(
        (a_now.json(), a_now.etag()),
        (patched_again.json(), patched_again.etag()),
        "the last patch and its revision"
    );
    assert_eq!(client.get(&path(&b)).await.status, 404, "still deleted");
    let c_now = client.get(&path(&c)).await;
    assert_eq!(
        (c_now.json(), c_now.etag()),
        (given_status.json(), given_status.etag())
    );
    let ids = |pets: Vec<serde_json::Value>| -> Vec<i64> {
        pets.iter().map(|p| p["id"].as_i64().expect("id")).collect()
    };
    let id = |pet: &serde_json::Value| pet["id"].as_i64().expect("id");
    for (status, want) in [
        ("available", vec![]),
        ("pending", vec![id(&c)]),
        ("sold", vec![id(&a)]),
    ] {
        let listed = client.list_all(&format!("/v1/pets?status={status}")).await;
        assert_eq!(ids(listed), want, "status {status}");
    }
    let next = client.create(r#"{"name":"d","categoryId":1}"#).await;
    assert_eq!(id(&next), id(&c) + 1, "no id given twice");

    // The file keeps the store's rules after the restart too.
    let stopped = server.stop();
    let db = stopped.dir.path().join("pets.redb");
    let (code, stdout, stderr) =
        crate::support::run(&["check".as_ref(), "--db".as_ref(), db.as_os_str()]);
    assert_eq!(code, Some(0), "stdout:\n{stdout}\nstderr:\n{stderr}");
    // A clean stop leaves the file whole: no log to replay.
    assert!(!stdout.contains("log:"), "{stdout}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_write_the_disk_refuses_gets_503_leaves_the_database_as_it_was_and_reads_go_on() {
    // The file may not grow past its first size plus a little: a full disk, for this process.
    let server = under_file_limit("--fsize=12000000");
    let mut client = server.h1().await;
    let acknowledged = create_until_refused(&mut client).await;
    let last = acknowledged.last().expect("a pet");
    assert_eq!(
        &client.get(&format!("/v1/pets/{}", last["id"])).await.json(),
        last,
        "reads go on"
    );
    assert_eq!(client.get("/v1/pets?limit=1").await.status, 200);
    let stopped = server.stop();
    assert!(
        stopped.logs.contains("File too large"),
        "the cause is logged: {}",
        stopped.logs
    );

    // Without the limit, the database holds exactly the acknowledged pets, and takes more.
    let server = Server::start_on(stopped);
    let mut client = server.h2().await;
    client.assert_stored(&acknowledged).await;
    let after = acknowledged.len() + 1;
    assert_eq!(
        client.get(&format!("/v1/pets/{after}")).await.status,
        404,
        "no half-written pet"
    );
    assert_eq!(
        client.create(r#"{"name":"more","categoryId":2}"#).await["id"],
        after
    );
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn writes_resume_without_a_restart_once_the_disk_takes_them_again() {
    // Only the soft limit: raising a hard limit needs a privilege the operator has, not a test.
    let server = under_file_limit("--fsize=12000000:unlimited");
    let mut client = server.h1().await;
    let body = big_pet();
    let mut acknowledged = create_until_refused(&mut client).await;
    client.assert_stored(&acknowledged).await;
    assert_eq!(
        client.post_json("/v1/pets", &body).await.status,
        503,
        "still refused while the limit holds"
    );

    // The operator frees space: the running process may grow its file again.
    let lifted = std::process::Command::new("prlimit")
        .arg(format!("--pid={}", server.pid()))
        .arg("--fsize=unlimited:unlimited")
        .status()
        .expect("prlimit runs");
    assert!(lifted.success(), "prlimit --pid failed");
    let highest = acknowledged
        .iter()
        .map(|pet| pet["id"].as_i64().expect("id"))
        .max()
        .expect("a pet");
    // The first creates after the lift may still fail: the writer reopens at most once a
    // second (REOPEN_INTERVAL in store.rs), and the create that triggers it gets 503.
    let mut resumed = None;
    for _ in 0..20 {
        let reply = client.post_json("/v1/pets", &body).await;
        if reply.status == 201 {
            resumed = Some(reply.json());
            break;
        }
        assert_eq!(reply.status, 503, "{:?}", reply.body);
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    let resumed = resumed.expect("a create succeeds again without a restart");
    assert!(
        resumed["id"].as_i64().expect("id") > highest,
        "a new id after {highest}: {resumed}"
    );
    acknowledged.push(resumed);
    client.assert_stored(&acknowledged).await;
    server.wait_for_log("database reopened after a write failure", 1);

    let server = Server::start_on(server.stop());
    let mut client = server.h2().await;
    client.assert_stored(&acknowledged).await;
    let next = client.create(r#"{"name":"more","categoryId":2}"#).await;
    let resumed_id = acknowledged.last().expect("a pet")["id"]
        .as_i64()
        .expect("id");
    assert!(next["id"].as_i64().expect("id") > resumed_id, "{next}");
    server.stop();
}

/// A server whose file may not grow past `limit` (a `prlimit` option): a full disk for it.
/// Above the write-ahead log's segments (8 MiB each, made whole before their first use), so
/// that the limit bites the database file as it grows.
fn under_file_limit(limit: &str) -> Server {
    Server::start_with(Options {
        wrapper: ["prlimit", limit, "--"].map(String::from).to_vec(),
        ..Options::default()
    })
}

/// A pet large enough that a few thousand of them reach the file limit.
fn big_pet() -> String {
    format!(r#"{{"name":"{}","categoryId":1}}"#, "x".repeat(2000))
}

/// Creates big pets until one is refused, checks that the refusal is the 503 of a failed
/// write, and returns the pets that were acknowledged (at least one).
async fn create_until_refused(client: &mut Client) -> Vec<serde_json::Value> {
    let body = big_pet();
    let mut acknowledged = Vec::new();
    let refused = loop {
        let reply = client.post_json("/v1/pets", &body).await;
        match reply.status {
            201 => acknowledged.push(reply.json()),
            _ => break reply,
        }
        assert!(acknowledged.len() < 5000, "the file limit never bit");
    };
    refused.assert_error(
        503,
        "unavailable",
        "the service cannot take this request now; try again later",
    );
    assert!(!acknowledged.is_empty(), "the limit bit before any create");
    acknowledged
}

/// A file a server was killed over names its write-ahead log, which holds the batches since
/// the file's last checkpoint: a start without the log, with another file's log, or with a
/// segment cut short is refused in one line that names the log and what to do, and `petstore
/// check` reports the same and exits 1; with its own log back, every acknowledged pet is
/// served.
#[tokio::test(flavor = "multi_thread")]
async fn a_start_without_its_log_with_a_foreign_one_or_a_short_one_is_refused_in_one_line() {
    let server = Server::start();
    let ids = crate::support::create_many(&server, 300, |_| None).await;
    let killed = server.kill();
    let other = Server::start();
    crate::support::create_many(&other, 10, |_| None).await;
    let foreign = other.kill();

    let log_of = |dir: &std::path::Path| dir.join("pets.redb-log");
    assert!(
        log_of(killed.path()).exists(),
        "the killed store has its log"
    );
    for (case, says) in [
        ("missing", "is missing"),
        ("foreign", "belongs to another file's log"),
        ("short", "cut short"),
    ] {
        // Each case on a copy: the file, and the log as the case leaves it.
        let copy = tempfile::tempdir().expect("temp dir");
        std::fs::copy(
            killed.path().join("pets.redb"),
            copy.path().join("pets.redb"),
        )
        .expect("copy the file");
        let log = log_of(copy.path());
        match case {
            "missing" => {}
            "foreign" => copy_dir(&log_of(foreign.path()), &log),
            _ => {
                copy_dir(&log_of(killed.path()), &log);
                let segment = std::fs::OpenOptions::new()
                    .write(true)
                    .open(log.join(format!("{:016}.log", 1)))
                    .expect("the first segment");
                segment.set_len(4096 * 3).expect("cut the segment short");
            }
        }
        let db = copy.path().join("pets.redb");
        let (code, stdout, _) =
            crate::support::run(&["check".as_ref(), "--db".as_ref(), db.as_os_str()]);
        assert_eq!(code, Some(1), "{case}: check exits 1:\n{stdout}");
        assert!(
            stdout.contains("problem: write-ahead log:") && stdout.contains(says),
            "{case}: check names the log:\n{stdout}"
        );
        let refused = match Server::try_start_in(copy, Options::default()) {
            Ok(server) => panic!("{case}: started on {:?}", server.db_path()),
            Err(logs) => logs,
        };
        let error: Vec<&str> = refused
            .lines()
            .filter(|l| l.starts_with("error:"))
            .collect();
        assert_eq!(error.len(), 1, "{case}: one line:\n{refused}");
        assert!(
            error[0].contains(says)
                && error[0].contains("pets.redb-log")
                && error[0].contains("petstore check")
                && error[0].contains("snapshot"),
            "{case}: the line says what was found and what to do: {}",
            error[0]
        );
    }
    // The file with its own log: every pet it acknowledged.
    let server = Server::start_after_crash(killed);
    let mut client = server.h2().await;
    let served = client.list_all("/v1/pets?limit=100").await;
    let served: Vec<i64> = served.iter().filter_map(|p| p["id"].as_i64()).collect();
    for id in &ids {
        assert!(served.contains(id), "pet {id} is served after the restart");
    }
    let stopped = server.stop();
    assert!(
        !log_of(stopped.dir.path()).exists(),
        "a clean stop leaves the file whole, with no log"
    );
}

/// Copies the directory `from` (a log's segments) to `to`.
fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).expect("the directory");
    for entry in std::fs::read_dir(from).expect("the directory to copy") {
        let entry = entry.expect("an entry");
        std::fs::copy(entry.path(), to.join(entry.file_name())).expect("copy a file");
    }
}
