//! `petstore copy`: a store copied redb -> PostgreSQL -> redb (and PostgreSQL -> PostgreSQL)
//! serves the same pets at the same revisions, carries its id counter over (deleted ids are
//! never given again) and its live idempotency records (a retry replays the first answer); a
//! non-empty target is refused and left as it was; a copy that fails leaves the target empty;
//! a bad URL or a missing source is a clear error.

use std::ffi::OsStr;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::idempotency::{assert_replay, post_keyed};
use crate::pg_cluster::Cluster;
use crate::support::{Options, Reply, Server, run};

/// Runs `petstore copy --from from --to to`; returns the exit code, stdout and stderr.
fn copy(from: &OsStr, to: &OsStr) -> (Option<i32>, String, String) {
    run(&[
        "copy".as_ref(),
        "--from".as_ref(),
        from,
        "--to".as_ref(),
        to,
    ])
}

/// Copies and asserts success: both sides' tallies printed and equal; returns them.
#[track_caller]
fn copy_ok(from: impl AsRef<OsStr>, to: impl AsRef<OsStr>) -> String {
    let (code, stdout, stderr) = copy(from.as_ref(), to.as_ref());
    assert_eq!(code, Some(0), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stderr.contains("copied "), "progress on stderr:\n{stderr}");
    let side = |name: &str| {
        stdout
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .unwrap_or_else(|| panic!("no {name:?} line in:\n{stdout}"))
            .to_owned()
    };
    let source = side("source: ");
    assert_eq!(source, side("target: "));
    assert!(stdout.contains("the copy matches its source"), "{stdout}");
    source
}

/// Starts a server on `db` (a redb path or a PostgreSQL URL).
fn serve(db: impl AsRef<OsStr>) -> Server {
    let db = db
        .as_ref()
        .to_str()
        .expect("a UTF-8 path or URL")
        .to_owned();
    Server::start_with(Options {
        db: Some(db),
        ..Options::default()
    })
}

/// The pets in id order with the ETag each one's GET answers (its revision).
async fn catalogue(server: &Server) -> Vec<(Value, String)> {
    let mut client = server.h2().await;
    let mut pets = Vec::new();
    for pet in client.list_all("/v1/pets?limit=100").await {
        let reply = client.get(&format!("/v1/pets/{}", pet["id"])).await;
        assert_eq!(reply.json(), pet);
        pets.push((pet, reply.etag().to_owned()));
    }
    pets
}

const KEYED: &str = r#"{"name":"Keyed","categoryId":7,"status":"pending"}"#;

/// What the round trip checks on each copy: the same catalogue, the key replays its first
/// answer, and a create gets an id above every id the source ever gave.
async fn assert_same_store(
    server: &Server,
    catalogue_before: &[(Value, String)],
    keyed: &Reply,
    above: i64,
) -> i64 {
    assert_eq!(catalogue(server).await, catalogue_before);
    let mut client = server.h1().await;
    assert_replay(keyed, &post_keyed(&mut client, "copied-key", KEYED).await);
    let created = client
        .create(r#"{"name":"After the copy","categoryId":1}"#)
        .await;
    let id = created["id"].as_i64().expect("an id");
    assert!(
        id > above,
        "a create on the copy got id {id}, not above {above}"
    );
    id
}

#[tokio::test(flavor = "multi_thread")]
async fn a_store_copied_to_postgresql_and_back_serves_the_same_pets_ids_and_keys() {
    let server = Server::start();
    let mut client = server.h2().await;
    for (i, status) in ["available", "pending", "sold", ""]
        .iter()
        .cycle()
        .take(12)
        .enumerate()
    {
        let status = match *status {
            "" => String::new(),
            status => format!(r#","status":"{status}""#),
        };
        client
            .create(&format!(r#"{{"name":"pet-{i}","categoryId":{i}{status}}}"#))
            .await;
    }
    let keyed = post_keyed(&mut client, "copied-key", KEYED).await;
    assert_eq!(keyed.status, 201, "{:?}", keyed.body);
    for (id, patch) in [
        (2, r#"{"status":"sold"}"#),
        (2, r#"{"name":"twice"}"#),
        (4, r#"{"status":null}"#),
        (13, r#"{"status":"available"}"#),
    ] {
        let reply = client.patch_json(&format!("/v1/pets/{id}"), patch).await;
        assert_eq!(reply.status, 200, "{:?}", reply.body);
    }
    let last = client.create(r#"{"name":"deleted","categoryId":1}"#).await;
    let last = last["id"].as_i64().expect("an id");
    for id in [3, last] {
        assert_eq!(client.delete(&format!("/v1/pets/{id}")).await.status, 204);
    }
    let before = catalogue(&server).await;
    assert_eq!(before.len(), 12);
    drop(client);
    let redb = server.stop().dir;
    let source = redb.path().join("pets.redb");

    let cluster = Cluster::start();
    let tally = copy_ok(&source, cluster.url());
    assert!(tally.starts_with("12 pets, "), "{tally}");
    assert!(
        tally.contains(&format!("next id {}; 1 idempotency records", last + 1)),
        "{tally}"
    );
    assert_eq!(cluster.psql("SELECT revision FROM pets WHERE id = 2"), "3");
    let on_postgres = serve(cluster.url());
    let created = assert_same_store(&on_postgres, &before, &keyed, last).await;
    let before = catalogue(&on_postgres).await;
    on_postgres.stop();

    // A target that is not empty is refused and left as it was.
    let (code, _, stderr) = copy(source.as_os_str(), cluster.url().as_ref());
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("is not empty"), "{stderr}");
    assert!(stderr.contains("13 pets"), "{stderr}");
    assert_eq!(cluster.psql("SELECT count(*) FROM pets"), "13");

    // PostgreSQL to PostgreSQL, another database on the same server.
    cluster.psql("CREATE DATABASE other");
    let other = cluster.url().replace("/petstore?", "/other?");
    copy_ok(cluster.url(), &other);

    // And back to redb, from the other database.
    let back = tempfile::tempdir().expect("temp dir");
    let target = back.path().join("copied.redb");
    copy_ok(&other, &target);
    let on_redb = serve(&target);
    assert_same_store(&on_redb, &before, &keyed, created).await;
    on_redb.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_redb_copy_refuses_a_target_with_pets_or_used_ids_and_leaves_it_as_it_was() {
    let source = Server::start();
    let mut client = source.h1().await;
    for name in ["a", "b"] {
        client
            .create(&format!(r#"{{"name":"{name}","categoryId":1}}"#))
            .await;
    }
    drop(client);
    let source = source.stop().dir;
    let source = source.path().join("pets.redb");

    let target = Server::start();
    let mut client = target.h1().await;
    let kept = client.create(r#"{"name":"kept","categoryId":2}"#).await;
    let gone = client.create(r#"{"name":"gone","categoryId":2}"#).await;
    assert_eq!(
        client
            .delete(&format!("/v1/pets/{}", gone["id"]))
            .await
            .status,
        204
    );
    drop(client);
    let target = target.stop().dir;
    let target_path = target.path().join("pets.redb");

    let (code, stdout, stderr) = copy(source.as_os_str(), target_path.as_os_str());
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    assert!(
        stderr.contains(&format!(
            "--to {}: the database is not empty: it holds 1 pets and 0 idempotency records, \
             and its next id is 3; copy only into a new or empty store",
            target_path.display()
        )),
        "{stderr}"
    );
    let server = serve(&target_path);
    let mut client = server.h1().await;
    assert_eq!(client.list_all("/v1/pets").await, [kept]);
    let next = client.create(r#"{"name":"next","categoryId":2}"#).await;
    assert_eq!(next["id"], 3, "the counter as it was");
    drop(client);
    server.stop();

    // A store whose pets were all deleted is not empty either: its ids are used.
    let empty = tempfile::tempdir().expect("temp dir");
    let copied = empty.path().join("copied.redb");
    copy_ok(&source, &copied);
    let server = serve(&copied);
    let mut client = server.h1().await;
    for id in [1, 2] {
        assert_eq!(client.delete(&format!("/v1/pets/{id}")).await.status, 204);
    }
    drop(client);
    server.stop();
    let (code, _, stderr) = copy(source.as_os_str(), copied.as_os_str());
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("its next id is 3"), "{stderr}");
}

/// Fills the PostgreSQL store at `cluster` with `count` pets straight in SQL, as the API
/// would have stored them, the last one with JSON that does not read back if `broken`.
fn fill(cluster: &Cluster, count: u32, broken: bool) {
    cluster.psql(&format!(
        "INSERT INTO pets (id, status, category_id, revision, json, name_key)
             SELECT g, 0, 1, 1, format('{{\"id\":%s,\"name\":\"p%s\",\"categoryId\":1,\"status\":\"available\"}}', g, g), format('p%s', g)
             FROM generate_series(1, {count}) AS g;
         UPDATE petstore_meta SET value = {count} + 1 WHERE name = 'next_id';
         UPDATE petstore_meta SET value = value + {count} WHERE name = 'pets_available';"
    ));
    if broken {
        cluster.psql(&format!(
            "UPDATE pets SET json = 'not a pet' WHERE id = {count}"
        ));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_copy_that_fails_midway_leaves_the_target_empty() {
    let cluster = Cluster::start();
    // A server makes the schema; the pets go in by SQL, past the first chunks.
    serve(cluster.url()).stop();
    fill(&cluster, 50_000, true);
    cluster.psql("CREATE DATABASE other");
    let other = cluster.url().replace("/petstore?", "/other?");

    let (code, _, stderr) = copy(cluster.url().as_ref(), other.as_ref());
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("the copy failed; the target was left empty"),
        "{stderr}"
    );
    assert!(stderr.contains("pet 50000 does not read back"), "{stderr}");
    assert_eq!(
        cluster.psql("SELECT count(*) FROM pets"),
        "50000",
        "the source as it was"
    );

    let dir = tempfile::tempdir().expect("temp dir");
    let target = dir.path().join("copied.redb");
    let (code, _, stderr) = copy(cluster.url().as_ref(), target.as_os_str());
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("the copy failed; the target was left empty"),
        "{stderr}"
    );
    // Both targets are empty: a copy into them now goes through.
    cluster.psql(
        "UPDATE pets SET json = '{\"id\":50000,\"name\":\"p\",\"categoryId\":1}' WHERE id = 50000",
    );
    let tally = copy_ok(cluster.url(), &other);
    assert!(tally.starts_with("50000 pets, "), "{tally}");
    assert_eq!(copy_ok(cluster.url(), &target), tally);
    let server = serve(&target);
    let reply = server.h1().await.get("/v1/pets/50000").await;
    assert_eq!(reply.json()["name"], "p");
    server.stop();
}

#[test]
fn a_bad_url_an_unreachable_database_or_a_missing_source_is_a_clear_error() {
    let dir = tempfile::tempdir().expect("temp dir");
    let missing = dir.path().join("missing.redb");
    let target = dir.path().join("target.redb");
    for (from, to, message) in [
        (
            missing.as_os_str(),
            target.as_os_str(),
            format!("error: --from {}: no such file", missing.display()),
        ),
        (
            target.as_os_str(),
            "mysql://app@db/pets".as_ref(),
            "error: --to: unsupported scheme \"mysql\"; use a redb file path (e.g. pets.redb) \
             or a postgres:// or postgresql:// URL"
                .to_owned(),
        ),
        (
            missing.as_os_str(),
            missing.as_os_str(),
            format!(
                "error: --from and --to are the same file {}",
                missing.display()
            ),
        ),
    ] {
        let (code, _, stderr) = copy(from, to);
        assert_eq!(code, Some(1), "{stderr}");
        assert!(stderr.starts_with(&message), "{stderr}");
    }
    assert!(
        !Path::new(&target).exists(),
        "no target made for a failed start"
    );
    // Nothing listens on port 1: refused at once.
    let unreachable = "postgres://postgres@127.0.0.1:1/petstore?sslmode=disable";
    let source = dir.path().join("source.redb");
    let (code, _, stderr) = copy(unreachable.as_ref(), source.as_os_str());
    assert_eq!(code, Some(1), "{stderr}");
    // The store's own warning naming the host may come first.
    assert!(
        stderr.contains(&format!(
            "error: opening --from {unreachable}: storage I/O failed: error connecting to \
             server: Connection refused"
        )),
        "{stderr}"
    );
    assert!(
        !source.exists(),
        "the target is not made before the source opens"
    );
}

/// Asks `sql` until it answers `expected`; fails past a generous deadline.
#[track_caller]
fn wait_for(cluster: &Cluster, sql: &str, expected: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while cluster.psql(sql) != expected {
        assert!(Instant::now() < deadline, "{sql} never gave {expected}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_source_written_during_the_copy_fails_the_check_with_both_sides_printed() {
    let cluster = Cluster::start();
    serve(cluster.url()).stop();
    fill(&cluster, 1000, false);
    cluster.psql("CREATE DATABASE other");
    let other = cluster.url().replace("/petstore?", "/other?");
    serve(&other).stop();

    // The target's pets are locked against writes until the test opens a gate, so the copy
    // stops at its first chunk, after the source's snapshot was taken; the source gets a pet
    // meanwhile.
    cluster.psql("\\c other\nCREATE TABLE gate (open int)");
    let outcome = {
        let locked = "SELECT count(*) FROM pg_locks WHERE locktype = 'relation' \
                      AND mode = 'ShareLock' AND granted";
        let cluster = &cluster;
        std::thread::scope(|threads| {
            let holder = threads.spawn(move || {
                cluster.psql(
                    "\\c other
                     BEGIN;
                     LOCK TABLE pets IN SHARE MODE;
                     DO $$ BEGIN
                         FOR i IN 1..3000 LOOP
                             EXIT WHEN EXISTS (SELECT 1 FROM gate);
                             PERFORM pg_sleep(0.01);
                         END LOOP;
                     END $$;
                     COMMIT;",
                )
            });
            wait_for(cluster, locked, "1");
            let copier = threads.spawn(|| copy(cluster.url().as_ref(), other.as_ref()));
            wait_for(
                cluster,
                "SELECT count(*) FROM pg_locks WHERE locktype = 'relation' AND NOT granted",
                "1",
            );
            fill_one(cluster, 1001);
            cluster.psql("\\c other\nINSERT INTO gate VALUES (1)");
            (copier.join().expect("the copy runs"), holder.join().is_ok())
        })
    };
    let ((code, stdout, stderr), held) = outcome;
    assert!(held, "the lock was held and let go");
    assert_eq!(code, Some(1), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(
        stderr.contains("error: the target does not match the source"),
        "{stderr}"
    );
    assert!(stdout.contains("source: 1001 pets, "), "{stdout}");
    assert!(stdout.contains("target: 1000 pets, "), "{stdout}");
}

/// Adds the pet `id` to the PostgreSQL store at `cluster` straight in SQL.
fn fill_one(cluster: &Cluster, id: u32) {
    cluster.psql(&format!(
        "INSERT INTO pets (id, status, category_id, revision, json, name_key)
             VALUES ({id}, NULL, 1, 1, '{{\"id\":{id},\"name\":\"late\",\"categoryId\":1}}', 'late');
         UPDATE petstore_meta SET value = {id} + 1 WHERE name = 'next_id';
         UPDATE petstore_meta SET value = value + 1 WHERE name = 'pets_unset';"
    ));
}
