//! The server on PostgreSQL, on real throwaway clusters: start-up (migrations once among
//! instances starting together, a newer schema, a refused password, an unknown scheme), several
//! instances on one database (unique ids in commit order, cursor walks through any instance,
//! idempotency keys and preconditions that hold across instances), and the database's faults:
//! killed and restarted, failed over to its standby, gone silent. Through every fault: no 500,
//! no hang (every answer within `ANSWER_DEADLINE`), 503 `unavailable` with Retry-After while it
//! lasts, no acknowledged pet lost, no id given twice, and service back without a restart.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::Method;
use hyper::header::CONTENT_TYPE;
use serde_json::{Value, json};

use crate::idempotency::{assert_replay, post_keyed};
use crate::pg_cluster::{Cluster, hosts_url};
use crate::support::{Client, Options, Reply, Server, start_failing};

/// The longest any answer may take while the database is down, failing over or silent: the
/// server's own bound is 5 s; the rest is margin for a machine shared with other builds.
const ANSWER_DEADLINE: Duration = Duration::from_secs(8);
/// How soon writes must succeed once the database is back (issue 11: 5 s).
const BACK_WITHIN: Duration = Duration::from_secs(5);
/// How soon writes must succeed once the standby is promoted (issue 11: 10 s).
const FAILOVER_WITHIN: Duration = Duration::from_secs(10);

fn on(url: &str) -> Options {
    Options {
        db: Some(url.to_owned()),
        ..Options::default()
    }
}

fn start(url: &str) -> Server {
    Server::start_with(on(url))
}

/// Runs a blocking cluster action (a crash, a restart, a promotion) off the async workers, so
/// that the load keeps running meanwhile.
async fn blocking<T: Send + 'static>(action: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(action)
        .await
        .expect("the cluster action")
}

/// A request with the development key, a JSON body if any, and `headers`.
fn request(
    client: &Client,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<String>,
) -> hyper::Request<Full<Bytes>> {
    let mut builder = client.authed(method, path);
    if body.is_some() {
        builder = builder.header(CONTENT_TYPE, "application/json");
    }
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    builder
        .body(Full::new(Bytes::from(body.unwrap_or_default())))
        .expect("a valid request")
}

/// Sends a request and reads its answer, failing the test if that takes longer than
/// `ANSWER_DEADLINE` (a hang) or if the answer is a 5xx other than a proper 503 `unavailable`
/// with Retry-After. `None` when the connection broke.
async fn timed(client: &mut Client, request: hyper::Request<Full<Bytes>>) -> Option<Reply> {
    let what = format!("{} {}", request.method(), request.uri());
    let started = Instant::now();
    let reply = tokio::time::timeout(ANSWER_DEADLINE, client.try_send(request))
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within {ANSWER_DEADLINE:?}"))?;
    if reply.status >= 500 {
        assert_unavailable(&reply, &what);
    }
    assert!(
        started.elapsed() < ANSWER_DEADLINE,
        "{what}: answered after {:?}",
        started.elapsed()
    );
    Some(reply)
}

fn assert_unavailable(reply: &Reply, what: &str) {
    // A write whose COMMIT was on its way when the database went may or may not be stored,
    // and says so; anything else was not done at all.
    let code = reply.json()["code"].clone();
    let allowed = if what.starts_with("GET") {
        vec![json!("unavailable")]
    } else {
        vec![json!("unavailable"), json!("outcome_unknown")]
    };
    assert!(
        reply.status == 503 && allowed.contains(&code),
        "{what}: {:?}",
        reply.body
    );
    assert_eq!(reply.header("retry-after"), Some("1"), "{what}");
}

/// Creates `body` through `client`, retrying each 503 (the database may be coming back), for at
/// most `within`; returns the 201 answer.
async fn create_within(client: &mut Client, body: &str, within: Duration) -> Reply {
    let started = Instant::now();
    let deadline = started + within;
    loop {
        let post = request(client, Method::POST, "/v1/pets", &[], Some(body.to_owned()));
        let reply = timed(client, post).await.expect("the connection holds");
        if reply.status == 201 {
            eprintln!(
                "a create succeeded {:?} after the first try",
                started.elapsed()
            );
            return reply;
        }
        assert_eq!(reply.status, 503, "{:?}", reply.body);
        assert!(
            Instant::now() < deadline,
            "no 201 within {within:?}: {:?}",
            reply.body
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `/healthz`: its status.
async fn health(client: &mut Client) -> u16 {
    let probe = client
        .request(Method::GET, "/healthz")
        .body(Full::new(Bytes::new()))
        .expect("a valid request");
    timed(client, probe)
        .await
        .expect("the connection holds")
        .status
}

/// Walks the whole catalogue through the instances in turn, one page from each, so a cursor
/// made by one is followed by the next; returns the pets in the order they came.
async fn walk(clients: &mut [Client], limit: usize) -> Vec<Value> {
    let mut pets = Vec::new();
    let mut next = Some(format!("/v1/pets?limit={limit}"));
    let mut turn = 0;
    while let Some(path) = next {
        let client = &mut clients[turn % clients.len()];
        let reply = client.get(&path).await;
        assert_eq!(reply.status, 200, "{path}: {:?}", reply.body);
        pets.extend(reply.pets());
        next = reply.next_link();
        turn += 1;
    }
    pets
}

/// Asserts that `pets` (a walk) are exactly `expected`, by id, in ascending id order.
fn assert_walk(pets: &[Value], expected: &BTreeMap<i64, Value>, what: &str) {
    let ids: Vec<i64> = pets
        .iter()
        .map(|pet| pet["id"].as_i64().expect("an id"))
        .collect();
    assert!(
        ids.windows(2).all(|pair| pair[0] < pair[1]),
        "{what}: ids not strictly increasing: {ids:?}"
    );
    let found: BTreeMap<i64, Value> = ids.iter().copied().zip(pets.iter().cloned()).collect();
    assert_eq!(
        found.keys().collect::<Vec<_>>(),
        expected.keys().collect::<Vec<_>>(),
        "{what}: not every surviving pet once"
    );
    for (id, pet) in expected {
        assert_eq!(
            &found[id], pet,
            "{what}: pet {id} is not as last acknowledged"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_on_postgres_creates_lists_patches_and_deletes() {
    let cluster = Cluster::start();
    let server = start(&cluster.url());
    let mut client = server.h1().await;
    let rex = client
        .create(r#"{"name":"Rex","categoryId":1,"status":"available"}"#)
        .await;
    let tom = client.create(r#"{"name":"Tom","categoryId":2}"#).await;
    assert!(tom["id"].as_i64() > rex["id"].as_i64(), "{rex} {tom}");
    assert_eq!(
        client.list_all("/v1/pets").await,
        [rex.clone(), tom.clone()]
    );

    let patched = client
        .patch_json(&format!("/v1/pets/{}", rex["id"]), r#"{"status":"sold"}"#)
        .await;
    assert_eq!(patched.status, 200, "{:?}", patched.body);
    assert_eq!(patched.json()["status"], "sold");
    assert_eq!(
        client.list_all("/v1/pets?status=sold").await,
        [patched.json()]
    );
    assert_eq!(
        client
            .delete(&format!("/v1/pets/{}", tom["id"]))
            .await
            .status,
        204
    );
    assert_eq!(
        client.get(&format!("/v1/pets/{}", tom["id"])).await.status,
        404
    );
    assert_eq!(client.list_all("/v1/pets").await, [patched.json()]);

    // What was acknowledged is in the database, as the API showed it.
    let stored = cluster.psql("SELECT id, revision, json FROM pets ORDER BY id");
    let (id, rest) = stored.split_once('|').expect("one row");
    let (revision, stored_json) = rest.split_once('|').expect("three columns");
    assert_eq!(id, rex["id"].to_string());
    assert_eq!(revision, "2");
    assert_eq!(
        serde_json::from_str::<Value>(stored_json).expect("JSON"),
        patched.json()
    );
    server.stop();
}

#[test]
fn five_servers_starting_at_once_on_a_new_database_migrate_it_once_and_all_serve() {
    let cluster = Cluster::start();
    let url = cluster.url();
    let starting: Vec<_> = (0..5)
        .map(|_| {
            let url = url.clone();
            std::thread::spawn(move || start(&url))
        })
        .collect();
    let servers: Vec<Server> = starting
        .into_iter()
        .map(|start| start.join().expect("a server starts"))
        .collect();
    let created: usize = servers
        .iter()
        .map(|server| server.logs().matches("database schema created").count())
        .sum();
    assert_eq!(created, 1, "the schema is created by exactly one instance");
    let upgraded: usize = servers
        .iter()
        .map(|server| server.logs().matches("database schema upgraded").count())
        .sum();
    assert_eq!(
        upgraded, 5,
        "and each of the five later migrations applied by exactly one"
    );
    // One feed, made once: its identity is random, the rest is as a new store starts.
    assert_eq!(
        cluster.psql("SELECT name, value FROM petstore_meta WHERE name <> 'feed' ORDER BY name"),
        "event_seq|0\nevents_trimmed|0\nnext_category_id|1\nnext_id|1\nnext_order_id|1\n\
         pets_available|0\npets_pending|0\npets_sold|0\npets_unset|0\nschema_version|6"
    );
    assert_eq!(
        cluster.psql("SELECT count(*) FROM petstore_meta WHERE name = 'feed'"),
        "1"
    );
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    runtime.block_on(async {
        for (i, server) in servers.iter().enumerate() {
            let body = format!(r#"{{"name":"from-{i}","categoryId":{i}}}"#);
            server.h1().await.create(&body).await;
        }
        let names: Vec<Value> = servers[0]
            .h1()
            .await
            .list_all("/v1/pets")
            .await
            .iter()
            .map(|pet| pet["name"].clone())
            .collect();
        assert_eq!(
            names,
            ["from-0", "from-1", "from-2", "from-3", "from-4"].map(Value::from)
        );
    });
    for server in servers {
        server.stop();
    }
}

#[test]
fn a_newer_schema_or_an_unknown_scheme_stops_start_up_and_says_why() {
    let cluster = Cluster::start();
    cluster.psql(
        "CREATE TABLE petstore_meta (name text PRIMARY KEY, value bigint NOT NULL);\n\
         INSERT INTO petstore_meta VALUES ('schema_version', 8);",
    );
    let stderr = start_failing(Path::new(&cluster.url()), &Options::default());
    assert!(
        stderr.contains("schema version 8, newer than the 6 this petstore understands"),
        "{stderr}"
    );
    // Nothing was changed by the refused start.
    assert_eq!(
        cluster.psql("SELECT value FROM petstore_meta WHERE name = 'schema_version'"),
        "8"
    );

    let stderr = start_failing(Path::new("mysql://app@db/pets"), &Options::default());
    assert!(
        stderr.contains(
            "--db: unsupported scheme \"mysql\"; use a redb file path (e.g. pets.redb) or a \
             postgres:// or postgresql:// URL"
        ),
        "{stderr}"
    );
}

#[test]
fn a_wrong_or_missing_password_stops_start_up_naming_authentication() {
    let cluster = Cluster::start();
    cluster.add_password_user("app", "right-one");
    let url = cluster.url().replace("postgres@", "app@");
    let dir = tempfile::tempdir().expect("temp dir");
    let password_file = dir.path().join("db-password");
    let with_password = |password: &str| {
        std::fs::write(&password_file, format!("{password}\n")).expect("write");
        let mut options = on(&url);
        options.args = vec![
            "--db-password-file".into(),
            password_file.display().to_string(),
        ];
        options
    };

    let stderr = fails_to_start(&url, &with_password("wrong-one"));
    assert!(
        stderr.contains("the database refused authentication")
            && stderr.contains("28P01")
            && stderr.contains("password authentication failed for user \"app\"")
            && stderr.contains("--db-password-file")
            && !stderr.contains("wrong-one")
            && !stderr.contains("corrupt"),
        "{stderr}"
    );
    let stderr = fails_to_start(&url, &on(&url));
    assert!(
        stderr.contains("the database refused authentication")
            && stderr.contains("password missing"),
        "{stderr}"
    );

    let server = Server::start_with(with_password("right-one"));
    server.stop();
}

/// Runs the server as `Server::start_with` would, expecting start-up to fail; returns stderr.
fn fails_to_start(url: &str, options: &Options) -> String {
    let mut args: Vec<std::ffi::OsString> = vec![
        "--listen".into(),
        "127.0.0.1:0".into(),
        "--db".into(),
        url.into(),
        "--tls-cert".into(),
        options.tls_cert.clone().into(),
        "--tls-key".into(),
        options.tls_key.clone().into(),
        "--api-keys".into(),
        options.api_keys.clone().into(),
    ];
    args.extend(options.args.iter().map(Into::into));
    let args: Vec<&std::ffi::OsStr> = args.iter().map(|arg| arg.as_os_str()).collect();
    let (code, _, stderr) = crate::support::run(&args);
    assert_eq!(code, Some(1), "expected exit 1, stderr:\n{stderr}");
    assert!(!stderr.contains("listening on"), "{stderr}");
    stderr
}

#[tokio::test(flavor = "multi_thread")]
async fn three_instances_under_concurrent_writes_keep_ids_unique_and_increasing_and_walks_whole() {
    const WORKERS: usize = 6;
    const OPERATIONS: usize = 40;
    let cluster = Cluster::start();
    let servers: Vec<Server> = (0..3).map(|_| start(&cluster.url())).collect();
    // Every id acknowledged so far, and every id a delete has been sent for.
    let created: Arc<Mutex<BTreeSet<i64>>> = Arc::default();
    let deleted: Arc<Mutex<BTreeSet<i64>>> = Arc::default();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let walker = {
        let mut clients = Vec::new();
        for server in &servers {
            clients.push(server.h2().await);
        }
        let (created, deleted, stop) = (created.clone(), deleted.clone(), stop.clone());
        // Walks while the writes go on: each finds every pet acknowledged before it began
        // and not deleted since, whichever instance committed it, in id order.
        tokio::spawn(async move {
            let mut walks = 0;
            // At least one walk, however soon the writes end.
            while walks == 0 || !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let before = created.lock().expect("lock").clone();
                let pets = walk(&mut clients, 4).await;
                let ids: Vec<i64> = pets.iter().filter_map(|pet| pet["id"].as_i64()).collect();
                assert!(ids.windows(2).all(|pair| pair[0] < pair[1]), "{ids:?}");
                let seen: BTreeSet<i64> = ids.into_iter().collect();
                let deleted = deleted.lock().expect("lock").clone();
                let missed: Vec<_> = before
                    .difference(&seen)
                    .filter(|id| !deleted.contains(id))
                    .collect();
                assert!(
                    missed.is_empty(),
                    "a walk during the writes missed {missed:?}"
                );
                walks += 1;
            }
            walks
        })
    };
    let mut workers = tokio::task::JoinSet::new();
    for worker in 0..WORKERS {
        let mut clients = Vec::new();
        for server in &servers {
            clients.push(server.h1().await);
        }
        let (created, deleted) = (created.clone(), deleted.clone());
        workers.spawn(async move {
            // This worker's surviving pets as last acknowledged, and its ids in the order
            // their creates were acknowledged.
            let mut mine: BTreeMap<i64, Value> = BTreeMap::new();
            let mut ids = Vec::new();
            for op in 0..OPERATIONS {
                // Round-robin over the instances.
                let client = &mut clients[op % 3];
                match op % 4 {
                    0 | 1 => {
                        let body = format!(
                            r#"{{"name":"w{worker}-{op}","categoryId":{op},"status":"pending"}}"#
                        );
                        let pet = client.create(&body).await;
                        let id = pet["id"].as_i64().expect("an id");
                        if let Some(last) = ids.last() {
                            assert!(id > *last, "worker {worker}: id {id} after {last}");
                        }
                        ids.push(id);
                        created.lock().expect("lock").insert(id);
                        mine.insert(id, pet);
                    }
                    2 => {
                        let (&id, _) = mine.last_key_value().expect("a pet of mine");
                        let status = if op % 8 == 2 { "sold" } else { "available" };
                        let reply = client
                            .patch_json(
                                &format!("/v1/pets/{id}"),
                                &format!(r#"{{"status":"{status}"}}"#),
                            )
                            .await;
                        assert_eq!(reply.status, 200, "{:?}", reply.body);
                        mine.insert(id, reply.json());
                    }
                    _ => {
                        let (&id, _) = mine.first_key_value().expect("a pet of mine");
                        deleted.lock().expect("lock").insert(id);
                        let reply = client.delete(&format!("/v1/pets/{id}")).await;
                        assert_eq!(reply.status, 204, "{:?}", reply.body);
                        mine.remove(&id);
                    }
                }
            }
            (ids, mine)
        });
    }
    let results = workers.join_all().await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let walks = walker.await.expect("the walker");
    eprintln!("{walks} walks during the writes");
    let mut every_id = BTreeSet::new();
    let mut surviving = BTreeMap::new();
    for (ids, mine) in results {
        for id in ids {
            assert!(every_id.insert(id), "id {id} given twice");
        }
        surviving.extend(mine);
    }
    assert_eq!(every_id.len(), WORKERS * OPERATIONS / 2);

    let mut clients = Vec::new();
    for server in &servers {
        clients.push(server.h2().await);
    }
    for (i, client) in clients.iter_mut().enumerate() {
        let pets = client.list_all("/v1/pets?limit=7").await;
        assert_walk(&pets, &surviving, &format!("a walk through instance {i}"));
    }
    let pets = walk(&mut clients, 5).await;
    assert_walk(&pets, &surviving, "a walk hopping instances");
    for server in servers {
        server.stop();
    }
}

/// Creates pets from `count` clients of `server` until `stop`, recording every 201 in
/// `acknowledged`; every other answer must be a proper 503 within the deadline (see `timed`).
async fn load(
    server: &Server,
    count: usize,
    tag: &str,
    acknowledged: &Arc<Mutex<Vec<Value>>>,
    stop: &Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinSet<usize> {
    let mut writers = tokio::task::JoinSet::new();
    for writer in 0..count {
        let mut client = server.h1().await;
        let (acknowledged, stop) = (Arc::clone(acknowledged), Arc::clone(stop));
        let tag = tag.to_owned();
        writers.spawn(async move {
            let mut refused = 0;
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                i += 1;
                let body = format!(r#"{{"name":"{tag}-{writer}-{i}","categoryId":{i}}}"#);
                let post = request(&client, Method::POST, "/v1/pets", &[], Some(body));
                let reply = timed(&mut client, post)
                    .await
                    .expect("the connection holds");
                match reply.status {
                    201 => acknowledged.lock().expect("lock").push(reply.json()),
                    503 => {
                        refused += 1;
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    status => panic!("{status}: {:?}", reply.body),
                }
            }
            refused
        });
    }
    writers
}

/// Waits until at least `count` pets have been acknowledged.
async fn until_acknowledged(acknowledged: &Arc<Mutex<Vec<Value>>>, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while acknowledged.lock().expect("lock").len() < count {
        assert!(
            Instant::now() < deadline,
            "fewer than {count} creates in 30 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Ends a load once 20 more creates than now have been acknowledged: stops the writers and
/// asserts that they met the fault (`what`) with 503s; returns every acknowledged pet.
async fn wind_down(
    acknowledged: &Arc<Mutex<Vec<Value>>>,
    stop: &std::sync::atomic::AtomicBool,
    writers: Vec<tokio::task::JoinSet<usize>>,
    what: &str,
) -> Vec<Value> {
    let before = acknowledged.lock().expect("lock").len();
    until_acknowledged(acknowledged, before + 20).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut refused = 0;
    for writers in writers {
        refused += writers.join_all().await.into_iter().sum::<usize>();
    }
    assert!(refused > 0, "the load met {what}");
    acknowledged.lock().expect("lock").clone()
}

/// Asserts that every acknowledged pet is stored as it was acknowledged, once, and that no id
/// was given twice; returns the highest id.
async fn assert_all_stored(client: &mut Client, acknowledged: &[Value]) -> i64 {
    let mut expected = BTreeMap::new();
    for pet in acknowledged {
        let id = pet["id"].as_i64().expect("an id");
        assert!(
            expected.insert(id, pet.clone()).is_none(),
            "id {id} given twice"
        );
    }
    let stored = client.list_all("/v1/pets?limit=100").await;
    let stored: BTreeMap<i64, Value> = stored
        .into_iter()
        .map(|pet| (pet["id"].as_i64().expect("an id"), pet))
        .collect();
    for (id, pet) in &expected {
        assert_eq!(
            stored.get(id),
            Some(pet),
            "acknowledged pet {id} lost or changed"
        );
    }
    expected.keys().next_back().copied().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_database_killed_and_restarted_under_load_means_503s_then_writes_again_losing_nothing()
{
    let cluster = Arc::new(Cluster::start());
    let server = start(&cluster.url());
    let acknowledged = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers = load(&server, 4, "crash", &acknowledged, &stop).await;
    until_acknowledged(&acknowledged, 20).await;

    let down = Arc::clone(&cluster);
    blocking(move || down.crash()).await;
    let mut probe = server.h1().await;
    assert_eq!(
        health(&mut probe).await,
        503,
        "not ready while the database is down"
    );
    let post = request(
        &probe,
        Method::POST,
        "/v1/pets",
        &[],
        Some(r#"{"name":"x","categoryId":0}"#.into()),
    );
    let reply = timed(&mut probe, post).await.expect("the connection holds");
    assert_unavailable(&reply, "a create while the database is down");
    let get = request(&probe, Method::GET, "/v1/pets?limit=3", &[], None);
    let reply = timed(&mut probe, get).await.expect("the connection holds");
    assert_unavailable(&reply, "a list while the database is down");
    // The load goes on against the dead database for a while.
    tokio::time::sleep(Duration::from_millis(500)).await;

    let up = Arc::clone(&cluster);
    blocking(move || up.restart()).await;
    let back = create_within(&mut probe, r#"{"name":"back","categoryId":0}"#, BACK_WITHIN).await;
    assert_eq!(health(&mut probe).await, 200);
    acknowledged.lock().expect("lock").push(back.json());
    let acknowledged = wind_down(&acknowledged, &stop, vec![writers], "the dead database").await;
    assert_all_stored(&mut probe, &acknowledged).await;
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failover_to_the_synchronous_standby_under_load_loses_nothing_and_reuses_no_id() {
    let primary = Cluster::start();
    let standby = primary.start_standby();
    let url = hosts_url(&[&primary, &standby]);
    let servers = [start(&url), start(&url)];
    let acknowledged = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers = load(&servers[0], 2, "a", &acknowledged, &stop).await;
    let more = load(&servers[1], 2, "b", &acknowledged, &stop).await;
    until_acknowledged(&acknowledged, 30).await;

    let _primary = blocking(move || {
        primary.crash();
        primary
    })
    .await;
    let highest_before = {
        let acknowledged = acknowledged.lock().expect("lock");
        acknowledged
            .iter()
            .filter_map(|pet| pet["id"].as_i64())
            .max()
            .expect("pets")
    };
    let standby = blocking(move || {
        standby.promote();
        standby
    })
    .await;
    for server in &servers {
        let mut probe = server.h1().await;
        let after = create_within(
            &mut probe,
            r#"{"name":"after","categoryId":0}"#,
            FAILOVER_WITHIN,
        )
        .await;
        assert!(
            after.json()["id"].as_i64().expect("an id") > highest_before,
            "an id after the failover above every one before: {:?}",
            after.body
        );
        acknowledged.lock().expect("lock").push(after.json());
    }
    let acknowledged = wind_down(&acknowledged, &stop, vec![writers, more], "the failover").await;
    for server in &servers {
        assert_all_stored(&mut server.h2().await, &acknowledged).await;
    }
    // A create that got 503 as its commit was cut off may have committed all the same.
    let stored: usize = standby
        .psql("SELECT count(*) FROM pets")
        .parse()
        .expect("a count");
    assert!(stored >= acknowledged.len(), "{stored} stored");
    for server in servers {
        server.stop();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn idempotency_keys_and_preconditions_hold_across_instances() {
    let cluster = Cluster::start();
    let (a, b) = (start(&cluster.url()), start(&cluster.url()));
    let (mut on_a, mut on_b) = (a.h1().await, b.h1().await);
    let body = r#"{"name":"Rex","categoryId":1}"#;
    let first = post_keyed(&mut on_a, "once-across", body).await;
    assert_replay(&first, &post_keyed(&mut on_b, "once-across", body).await);
    let other = post_keyed(&mut on_b, "once-across", r#"{"name":"Tom","categoryId":1}"#).await;
    assert_eq!(other.status, 422, "{:?}", other.body);

    for round in 0..10 {
        let pet = on_a.create(r#"{"name":"raced","categoryId":3}"#).await;
        let path = format!("/v1/pets/{}", pet["id"]);
        let etag = on_a.get(&path).await.etag().to_owned();
        let patch = |client: &Client, status: &str| {
            let body = format!(r#"{{"status":"{status}"}}"#);
            let headers = [
                ("content-type", "application/merge-patch+json"),
                ("if-match", etag.as_str()),
            ];
            let mut request = client.authed(Method::PATCH, &path);
            for (name, value) in headers {
                request = request.header(name, value);
            }
            request
                .body(Full::new(Bytes::from(body)))
                .expect("a valid request")
        };
        let (from_a, from_b) = (patch(&on_a, "sold"), patch(&on_b, "pending"));
        let (reply_a, reply_b) = tokio::join!(on_a.try_send(from_a), on_b.try_send(from_b));
        let (reply_a, reply_b) = (reply_a.expect("an answer"), reply_b.expect("an answer"));
        let mut statuses = [reply_a.status, reply_b.status];
        statuses.sort_unstable();
        assert_eq!(statuses, [200, 412], "round {round}");
        let winner = if reply_a.status == 200 {
            reply_a
        } else {
            reply_b
        };
        assert_eq!(on_b.get(&path).await.json(), winner.json());
    }
    a.stop();
    b.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_keyed_create_whose_commit_is_in_doubt_gets_503_and_its_retry_the_true_answer() {
    let cluster = Arc::new(Cluster::start());
    let server = start(&cluster.url());
    // Every keyed create sent, with its first answer (a 201's pet, or None).
    let sent: Arc<Mutex<BTreeMap<String, Option<Value>>>> = Arc::default();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut writers = tokio::task::JoinSet::new();
    for writer in 0..4 {
        let mut client = server.h2().await;
        let (sent, stop) = (Arc::clone(&sent), Arc::clone(&stop));
        writers.spawn(async move {
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                i += 1;
                let key = format!("k-{writer}-{i}");
                let body = format!(r#"{{"name":"{key}","categoryId":1}}"#);
                let headers = [("idempotency-key", key.as_str())];
                let post = request(&client, Method::POST, "/v1/pets", &headers, Some(body));
                let reply = timed(&mut client, post)
                    .await
                    .expect("the connection holds");
                let pet = match reply.status {
                    201 => Some(reply.json()),
                    503 => None,
                    status => panic!("{status}: {:?}", reply.body),
                };
                sent.lock().expect("lock").insert(key, pet);
            }
        });
    }
    let acknowledged = || {
        let sent = sent.lock().expect("lock");
        sent.values().filter(|pet| pet.is_some()).count()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while acknowledged() < 20 {
        assert!(Instant::now() < deadline, "too few creates");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let down = Arc::clone(&cluster);
    blocking(move || down.crash()).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let up = Arc::clone(&cluster);
    blocking(move || up.restart()).await;
    let mut probe = server.h1().await;
    create_within(&mut probe, r#"{"name":"back","categoryId":0}"#, BACK_WITHIN).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writers.join_all().await;

    // Each key, retried with the same body until it gets its true answer.
    let sent = sent.lock().expect("lock").clone();
    let mut answers = BTreeMap::new();
    let (mut replayed, mut created) = (0, 0);
    for (key, first) in &sent {
        let body = format!(r#"{{"name":"{key}","categoryId":1}}"#);
        let deadline = Instant::now() + Duration::from_secs(20);
        let again = loop {
            let reply = post_keyed(&mut probe, key, &body).await;
            match reply.status {
                201 => break reply,
                // The first request may still hold the key, or the database be catching up.
                409 | 503 if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                status => panic!("{key}: {status}: {:?}", reply.body),
            }
        };
        match (first, again.header("idempotent-replayed")) {
            (Some(first), replay) => {
                assert_eq!(replay, Some("true"), "{key} was acknowledged");
                assert_eq!(&again.json(), first, "{key}");
            }
            (None, Some(_)) => replayed += 1,
            (None, None) => created += 1,
        }
        answers.insert(key.clone(), again.json());
    }
    assert!(replayed + created > 0, "some creates met the crash");
    eprintln!("503'd keyed creates: {replayed} had committed, {created} had not");

    // The database holds each key's pet once, as its answer says.
    let stored = probe.list_all("/v1/pets?limit=100").await;
    let mut by_name: BTreeMap<String, Value> = BTreeMap::new();
    for pet in stored {
        let name = pet["name"].as_str().expect("a name").to_owned();
        if name == "back" {
            continue;
        }
        assert!(by_name.insert(name.clone(), pet).is_none(), "{name} twice");
    }
    assert_eq!(by_name, answers.into_iter().collect());
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_silent_database_gets_503s_within_the_bound_never_a_hang_and_service_resumes() {
    let mut cluster = Cluster::start();
    let server = start(&cluster.url());
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(server.h1().await);
    }
    let mut pets = Vec::new();
    for client in &mut clients {
        pets.push(client.create(r#"{"name":"before","categoryId":0}"#).await);
    }
    // Several pooled connections open: reads at once take one each.
    let mut reading = tokio::task::JoinSet::new();
    for mut client in clients.drain(..) {
        reading.spawn(async move {
            for _ in 0..5 {
                assert_eq!(client.get("/v1/pets?limit=2").await.status, 200);
            }
            client
        });
    }
    clients = reading.join_all().await;
    let id = pets[0]["id"].clone();
    let ask = |clients: &mut Vec<Client>| {
        let mut asking = tokio::task::JoinSet::new();
        for (i, mut client) in clients.drain(..).enumerate() {
            let id = id.clone();
            asking.spawn(async move {
                let request = match i % 4 {
                    0 => request(&client, Method::GET, &format!("/v1/pets/{id}"), &[], None),
                    1 => request(&client, Method::GET, "/v1/pets?limit=2", &[], None),
                    2 => request(
                        &client,
                        Method::POST,
                        "/v1/pets",
                        &[],
                        Some(r#"{"name":"x","categoryId":0}"#.into()),
                    ),
                    _ => client
                        .request(Method::GET, "/healthz")
                        .body(Full::new(Bytes::new()))
                        .expect("a valid request"),
                };
                let what = format!("{} {}", request.method(), request.uri());
                let reply = timed(&mut client, request)
                    .await
                    .expect("the connection holds");
                assert_unavailable(&reply, &what);
                client
            });
        }
        asking
    };

    cluster.freeze();
    // Twice: on the connections open when it went silent, then on new ones.
    for _ in 0..2 {
        let asking = ask(&mut clients);
        clients = asking.join_all().await;
    }
    cluster.thaw();

    let mut probe = server.h1().await;
    pets.push(
        create_within(
            &mut probe,
            r#"{"name":"after","categoryId":0}"#,
            BACK_WITHIN,
        )
        .await
        .json(),
    );
    assert_eq!(health(&mut probe).await, 200);
    probe.assert_stored(&pets).await;
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_silent_first_host_is_passed_over_for_the_next() {
    let mut silent = Cluster::start();
    let live = Cluster::start();
    silent.freeze();
    // Each host gets 2 s: the silent one uses them up, the live one is tried next.
    let url = format!("{}&connect_timeout=2", hosts_url(&[&silent, &live]));
    let server = start(&url);
    let mut client = server.h1().await;
    let pet = client
        .create(r#"{"name":"on the second host","categoryId":0}"#)
        .await;
    assert_eq!(live.psql("SELECT id FROM pets"), pet["id"].to_string());
    server.stop();
    silent.thaw();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_primary_gone_silent_under_load_is_failed_over_and_writes_resume() {
    let mut primary = Cluster::start();
    let standby = primary.start_standby();
    // Each host gets 2 s to connect: the silent primary uses them up once, then is passed over.
    let url = format!("{}&connect_timeout=2", hosts_url(&[&primary, &standby]));
    let server = start(&url);
    let acknowledged = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers = load(&server, 4, "silent", &acknowledged, &stop).await;
    until_acknowledged(&acknowledged, 20).await;

    // Writes and their connections are stuck on the silent primary; nothing closes them.
    primary.freeze();
    let standby = blocking(move || {
        standby.promote();
        standby
    })
    .await;
    let mut probe = server.h1().await;
    let after = create_within(
        &mut probe,
        r#"{"name":"after","categoryId":0}"#,
        FAILOVER_WITHIN,
    )
    .await;
    acknowledged.lock().expect("lock").push(after.json());
    let acknowledged = wind_down(&acknowledged, &stop, vec![writers], "the silence").await;
    assert_all_stored(&mut probe, &acknowledged).await;
    server.stop();
    drop(standby);
    // Thawed only once no instance could reach it, as a fenced old primary.
    primary.thaw();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_commit_stuck_on_a_stalled_standby_gets_503_and_its_retry_replays_it() {
    let primary = Cluster::start();
    let mut standby = primary.start_standby();
    let server = start(&primary.url());
    let client = server.h2().await;
    let body = |key: &str| format!(r#"{{"name":"{key}","categoryId":2}}"#);
    let before = post_keyed(&mut client.share(), "before", &body("before")).await;
    assert_eq!(before.status, 201, "{:?}", before.body);

    // The primary writes each commit, then waits for the standby, which does not answer: the
    // outcome is unknown when the bound runs out.
    standby.freeze();
    let keys: Vec<String> = (0..4).map(|i| format!("stalled-{i}")).collect();
    let mut sending = tokio::task::JoinSet::new();
    for key in &keys {
        let mut client = client.share();
        let (key, body) = (key.clone(), body(key));
        sending.spawn(async move {
            let headers = [("idempotency-key", key.as_str())];
            let post = request(&client, Method::POST, "/v1/pets", &headers, Some(body));
            let reply = timed(&mut client, post)
                .await
                .expect("the connection holds");
            assert_unavailable(&reply, &key);
        });
    }
    sending.join_all().await;
    standby.thaw();

    // Each retry finds what happened: a create whose commit was written before the wait holds
    // and is replayed; one whose batch never ran (its client had given up) is made now.
    let mut client = client.share();
    let mut pets = vec![before.json()];
    let mut replayed = 0;
    for key in &keys {
        let deadline = Instant::now() + Duration::from_secs(20);
        let again = loop {
            let reply = post_keyed(&mut client, key, &body(key)).await;
            match reply.status {
                201 => break reply,
                409 | 503 if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                status => panic!("{key}: {status}: {:?}", reply.body),
            }
        };
        if again.header("idempotent-replayed") == Some("true") {
            replayed += 1;
        }
        assert_eq!(again.json()["name"], key.as_str());
        pets.push(again.json());
    }
    // The first batch had reached its commit: it was in doubt, and it had committed.
    assert!(replayed > 0, "no create was in doubt");
    pets.sort_by_key(|pet| pet["id"].as_i64());
    assert_eq!(
        client.list_all("/v1/pets").await,
        pets,
        "each key's pet once"
    );
    server.stop();
}

/// The connections petstore holds to the cluster (not psql's own): how many, and how many of
/// them are encrypted.
fn petstore_connections(cluster: &Cluster) -> String {
    cluster.psql(
        "SELECT count(*), count(*) FILTER (WHERE s.ssl) FROM pg_stat_activity a \
         JOIN pg_stat_ssl s USING (pid) \
         WHERE a.backend_type = 'client backend' AND a.pid <> pg_backend_pid()",
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn tls_to_the_database_is_checked_as_sslmode_says() {
    let cluster = Cluster::start();
    let cert = crate::support::cert;
    cluster.enable_tls(&cert("dev-server.pem"), &cert("dev-server.key"));
    let base = format!("postgres://postgres@localhost:{}/petstore", cluster.port());
    let with_ca = |url: String, ca: &str| Options {
        db: Some(url),
        args: vec!["--db-ca".into(), cert(ca).display().to_string()],
        ..Options::default()
    };

    // verify-full against the CA that signed the server's certificate, for its name.
    let server = Server::start_with(with_ca(format!("{base}?sslmode=verify-full"), "dev-ca.pem"));
    server
        .h1()
        .await
        .create(r#"{"name":"sealed","categoryId":1}"#)
        .await;
    let (open, sealed) = petstore_connections(&cluster)
        .split_once('|')
        .map(|(a, b)| (a.to_owned(), b.to_owned()))
        .expect("two counts");
    assert_eq!(open, sealed, "every connection of petstore's is encrypted");
    assert_ne!(open, "0");
    drop(server);

    // Another CA: verify-ca and verify-full refuse the server, and start-up says why.
    for mode in ["verify-ca", "verify-full"] {
        let options = with_ca(format!("{base}?sslmode={mode}"), "dev-other-ca.pem");
        let stderr = fails_to_start(&format!("{base}?sslmode={mode}"), &options);
        assert!(
            stderr.to_lowercase().contains("certificate"),
            "{mode}: {stderr}"
        );
    }

    // require encrypts without checking; disable does not encrypt.
    let server = start(&format!("{base}?sslmode=require"));
    server
        .h1()
        .await
        .create(r#"{"name":"unchecked","categoryId":1}"#)
        .await;
    drop(server);
    let server = start(&format!("{base}?sslmode=disable"));
    server
        .h1()
        .await
        .create(r#"{"name":"plain","categoryId":1}"#)
        .await;
    // The earlier servers' connections end in PostgreSQL's own time after they are gone.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let counts = petstore_connections(&cluster);
        if counts.ends_with("|0") && !counts.starts_with("0|") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still encrypted: {counts}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(server);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_statement_timeout_during_the_standby_wait_never_turns_into_a_201() {
    // PostgreSQL answers a COMMIT whose wait for the synchronous standby is cancelled with
    // success and a warning: the pet would be acknowledged while only the primary has it. A
    // statement timeout does not cancel that wait (PostgreSQL lifts it before the commit
    // itself); this pins that a statement bound far below ours still ends in our 503.
    let primary = Cluster::start();
    let mut standby = primary.start_standby();
    let server = Server::start_with(Options {
        db: Some(primary.url()),
        args: vec!["--db-statement-timeout".into(), "300ms".into()],
        ..Options::default()
    });
    let mut client = server.h1().await;
    assert_eq!(
        create_within(
            &mut client,
            r#"{"name":"before","categoryId":1}"#,
            ANSWER_DEADLINE
        )
        .await
        .status,
        201
    );
    standby.freeze();
    let body = r#"{"name":"stalled","categoryId":1}"#.to_owned();
    let post = request(&client, Method::POST, "/v1/pets", &[], Some(body));
    let reply = timed(&mut client, post)
        .await
        .expect("the connection holds");
    assert_unavailable(&reply, "a commit the standby has not confirmed");
    standby.thaw();
    server.stop();
}
