//! Key lifecycle with the real binary: `petstore keys add | list | revoke` edit a keys file a
//! running server uses, SIGHUP puts the edit in force, a read-only key gets 403 on writes, an
//! expired one its own 401, and requests in flight across reloads are all answered.

use std::ffi::OsStr;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use bytes::Bytes;
use hyper::Method;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE};

use crate::support::{
    Client, Options, Reply, Server, cert, start_streaming_create, streamed_reply,
};

/// A keys file of the first format (`LABEL HASH` lines, comments), owned by the test.
fn own_keys(dir: &Path) -> (PathBuf, String) {
    let path = dir.join("api-keys");
    let text = format!(
        "# operator's notes: keep me\n{}\n# trailing note\n",
        std::fs::read_to_string(cert("dev-keys.txt")).expect("dev keys")
    );
    std::fs::write(&path, &text).expect("write keys");
    (path, text)
}

/// Runs `petstore keys ARGS` on `file`, named by `PETSTORE_API_KEYS` as the server's unit
/// does, or by `--api-keys` when `by_flag`.
fn keys(file: &Path, by_flag: bool, args: &[&str]) -> (Option<i32>, String, String) {
    let named = ("--api-keys", "PETSTORE_API_KEYS");
    crate::support::run_on_file("keys", named, file, by_flag, args)
}

/// `keys add`: the key alone on the only line of standard output.
fn add(file: &Path, args: &[&str]) -> String {
    let (code, stdout, stderr) = keys(file, true, &[&["add"], args].concat());
    assert_eq!(code, Some(0), "{stderr}");
    let key = stdout.strip_suffix('\n').expect("one line");
    assert!(
        key.starts_with("pk_") && !key.contains(char::is_whitespace),
        "{stdout:?}"
    );
    key.to_owned()
}

async fn send(client: &mut Client, method: Method, path: &str, key: &str, body: &str) -> Reply {
    let mut request = client
        .request(method, path)
        .header(AUTHORIZATION, format!("Bearer {key}"));
    if !body.is_empty() {
        let media = if path == "/v1/pets" {
            "application/json"
        } else {
            "application/merge-patch+json"
        };
        request = request.header(CONTENT_TYPE, media);
    }
    client.send(request, Bytes::from(body.to_owned())).await
}

fn server_with(keys: &Path) -> Server {
    Server::start_with(Options {
        api_keys: keys.to_owned(),
        ..Options::default()
    })
}

/// SIGHUP, then waits for the `n`th reload to be done and checks it loaded `count` keys.
fn reload(server: &Server, n: usize, count: usize) {
    server.signal("HUP");
    server.wait_for_log("reload done", n);
    let logs = server.logs();
    let line = logs
        .lines()
        .filter(|l| l.contains("API keys reloaded"))
        .nth(n - 1)
        .unwrap_or_else(|| panic!("no reload {n} of the keys:\n{logs}"));
    let expected = format!("keys={count}");
    assert!(line.split_whitespace().any(|w| w == expected), "{line}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_key_added_by_the_command_works_after_a_reload_and_stops_when_revoked() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (file, original) = own_keys(dir.path());
    // Someone else's file, not ours and not the default mode: the edit keeps both.
    std::os::unix::fs::chown(&file, Some(4321), Some(4322)).expect("chown");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o640)).expect("chmod");
    let server = server_with(&file);
    let mut client = server.h1().await;

    let alice = add(&file, &["alice"]);
    let edited = std::fs::read_to_string(&file).expect("read");
    let added = edited.strip_prefix(&original).expect("every line kept");
    assert!(
        added.starts_with("alice ") && added.ends_with('\n') && added.lines().count() == 1,
        "{added:?}"
    );
    let meta = std::fs::metadata(&file).expect("stat");
    assert_eq!(
        (meta.uid(), meta.gid(), meta.mode() & 0o7777),
        (4321, 4322, 0o640)
    );
    assert_eq!(
        send(&mut client, Method::GET, "/v1/pets", &alice, "")
            .await
            .status,
        401,
        "not in force before the reload"
    );

    reload(&server, 1, 2);
    let reply = send(&mut client, Method::GET, "/v1/pets", &alice, "").await;
    assert_eq!(reply.status, 200, "added, on the same connection");
    let reply = send(
        &mut client,
        Method::POST,
        "/v1/pets",
        &alice,
        r#"{"name":"Rex","categoryId":1}"#,
    )
    .await;
    assert_eq!(reply.status, 201, "read-write unless told otherwise");
    assert_eq!(client.get("/v1/pets").await.status, 200, "dev still works");

    let (code, listed, stderr) = keys(&file, false, &["list"]);
    assert_eq!(code, Some(0), "{stderr}");
    let rows: Vec<Vec<&str>> = listed
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows,
        [
            vec!["LABEL", "SCOPE", "EXPIRES"],
            vec!["dev", "read-write", "never"],
            vec!["alice", "read-write", "never"],
        ]
    );
    assert!(!listed.contains(&alice) && !listed.contains("pk_"));

    let (code, _, stderr) = keys(&file, false, &["revoke", "alice"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(std::fs::read_to_string(&file).expect("read"), original);
    let meta = std::fs::metadata(&file).expect("stat");
    assert_eq!(
        (meta.uid(), meta.gid(), meta.mode() & 0o7777),
        (4321, 4322, 0o640)
    );
    reload(&server, 2, 1);
    send(&mut client, Method::GET, "/v1/pets", &alice, "")
        .await
        .assert_error(401, "unauthorized", "the API key is not valid");
    let (code, _, stderr) = keys(&file, true, &["revoke", "alice"]);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("no key is labelled alice"), "{stderr}");

    let logs = server.stop().logs;
    assert!(
        logs.lines()
            .any(|l| l.contains("status=201") && l.contains("key=alice")),
        "the access log names the label:\n{logs}"
    );
}

#[test]
fn add_and_revoke_say_to_reload_with_systemctl_and_kill_hup_only_without_systemd() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (file, _) = own_keys(dir.path());
    let hint = "a running server takes it on reload: `systemctl reload petstore` (without \
                systemd: `kill -HUP <pid>`, the pid of its `listening on` log line)";
    for args in [&["add", "alice"][..], &["revoke", "alice"]] {
        let (code, _, stderr) = keys(&file, true, args);
        assert_eq!(code, Some(0), "{stderr}");
        assert!(stderr.trim_end().ends_with(hint), "{args:?}: {stderr}");
        assert!(!stderr.contains("pidof"), "{stderr}");
    }
}

#[test]
fn add_into_a_directory_that_is_missing_says_to_create_it_and_exits_1() {
    let dir = tempfile::tempdir().expect("temp dir");
    let missing = dir.path().join("petstore");
    let file = missing.join("api-keys");
    let (code, stdout, stderr) = keys(&file, true, &["add", "alice"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert_eq!(stdout, "", "no key is shown for a key not admitted");
    let missing = missing.display();
    assert_eq!(
        stderr,
        format!(
            "error: creating {missing}/api-keys: the directory {missing} does not exist; create \
             it first (mkdir -p {missing}), then add the key again\n"
        )
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_read_only_key_reads_and_gets_403_forbidden_on_every_write() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (file, _) = own_keys(dir.path());
    let server = server_with(&file);
    let reader = add(&file, &["reader", "--read-only", "--expires", "2999-12-31"]);
    reload(&server, 1, 2);
    let mut client = server.h2().await;
    let pet = client.create(r#"{"name":"Rex","categoryId":1}"#).await;

    for path in ["/v1/pets", "/v1/pets/1"] {
        let reply = send(&mut client, Method::GET, path, &reader, "").await;
        assert_eq!(reply.status, 200, "{path}");
    }
    let forbidden = "this API key is read-only: it may not create, change or delete pets";
    for (method, path, body) in [
        (Method::POST, "/v1/pets", r#"{"name":"Tom","categoryId":1}"#),
        (Method::PATCH, "/v1/pets/1", r#"{"status":"sold"}"#),
        (Method::DELETE, "/v1/pets/1", ""),
    ] {
        send(&mut client, method.clone(), path, &reader, body)
            .await
            .assert_error(403, "forbidden", forbidden);
    }
    // Routing answers first, as for any key.
    let reply = send(&mut client, Method::DELETE, "/v1/pets", &reader, "").await;
    assert_eq!(reply.status, 405);
    client.assert_stored(&[pet]).await;

    let (code, listed, _) = keys(&file, true, &["list"]);
    assert_eq!(code, Some(0));
    let row = listed
        .lines()
        .find(|l| l.starts_with("reader"))
        .expect("listed");
    assert_eq!(
        row.split_whitespace().collect::<Vec<_>>(),
        ["reader", "read-only", "2999-12-31T00:00:00Z"]
    );
    let logs = server.stop().logs;
    assert!(
        logs.lines()
            .any(|l| l.contains("status=403") && l.contains("key=reader")),
        "{logs}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_expired_key_gets_its_own_401_and_is_named_in_the_log() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (file, _) = own_keys(dir.path());
    let (code, stdout, stderr) = keys(&file, true, &["add", "late", "--expires", "2020-01-01"]);
    assert_eq!((code, stdout.as_str()), (Some(1), ""), "refused: {stderr}");
    assert!(stderr.contains("already past"), "{stderr}");

    // An expired line, as a hand edit or the passing of time leaves it.
    let (code, stdout, _) = crate::support::run(&[OsStr::new("new-key"), OsStr::new("old")]);
    assert_eq!(code, Some(0));
    let (old, line) = stdout.split_once('\n').expect("two lines");
    let mut text = std::fs::read_to_string(&file).expect("read");
    text.push_str(&format!(
        "{} expires=2020-01-01T00:00:00Z  # left\n",
        line.trim()
    ));
    std::fs::write(&file, text).expect("write");
    let server = server_with(&file);
    let mut client = server.h1().await;

    let reply = send(&mut client, Method::GET, "/v1/pets", old, "").await;
    reply.assert_error(
        401,
        "unauthorized",
        "the API key has expired: ask for a new one",
    );
    assert_eq!(
        reply.header("www-authenticate"),
        Some(
            r#"Bearer realm="petstore", error="invalid_token", error_description="the API key has expired""#
        )
    );
    let unknown = send(&mut client, Method::GET, "/v1/pets", "pk_unknown", "").await;
    unknown.assert_error(401, "unauthorized", "the API key is not valid");

    let (_, listed, _) = keys(&file, true, &["list"]);
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with("old ")
                && l.ends_with("read-write  2020-01-01T00:00:00Z (expired)")),
        "{listed}"
    );
    let logs = server.stop().logs;
    assert!(
        logs.lines()
            .any(|l| l.contains("status=401") && l.contains("key=old")),
        "{logs}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn requests_in_flight_across_reloads_are_all_answered() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (file, _) = own_keys(dir.path());
    let server = server_with(&file);
    // A create whose body is still arriving while every reload happens.
    let (mut body, streaming) = start_streaming_create(&server).await;
    body.send_data(Bytes::from_static(br#"{"name":"Slow","#))
        .await
        .expect("first half");

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut clients = tokio::task::JoinSet::new();
    for n in 0..4 {
        let mut client = if n % 2 == 0 {
            server.h1().await
        } else {
            server.h2().await
        };
        let stop = std::sync::Arc::clone(&stop);
        clients.spawn(async move {
            let mut answered = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let reply = if answered % 2 == 0 {
                    client.get("/v1/pets?limit=5").await
                } else {
                    client
                        .post_json("/v1/pets", r#"{"name":"Busy","categoryId":2}"#)
                        .await
                };
                assert!(matches!(reply.status, 200 | 201), "{reply:?}");
                answered += 1;
            }
            answered
        });
    }
    for round in 1..=10 {
        add(&file, &[&format!("k{round}")]);
        reload(&server, round, round + 1);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    while let Some(answered) = clients.join_next().await {
        assert!(answered.expect("the client task") > 0);
    }
    body.send_data(Bytes::from_static(br#""categoryId":7}"#))
        .await
        .expect("second half");
    drop(body);
    let reply = streamed_reply(streaming).await;
    assert_eq!(reply.status, 201, "{:?}", reply.body);

    let mut client = server.h1().await;
    assert_eq!(
        client.get("/v1/pets").await.status,
        200,
        "the first key still works"
    );
    server.stop();
}

/// The commands of one `Exec…=` kind in the shipped `pets.service`, as systemd would run them
/// here: `%t` is `runtime`, the operator's keys file is `etc_keys`, `$MAINPID` is `pid`.
fn unit_commands(kind: &str, runtime: &Path, etc_keys: &Path, pid: u32) -> Vec<Vec<String>> {
    crate::support::unit_commands(
        "pets.service",
        kind,
        &[
            ("%t", runtime.display().to_string()),
            ("/etc/petstore/api-keys", etc_keys.display().to_string()),
            ("$MAINPID", pid.to_string()),
        ],
    )
}

/// `keys add` on /etc/petstore/api-keys, then `systemctl reload`: what the shipped unit's
/// ExecStartPre= and ExecReload= lines do (systemd itself is not PID 1 on the test machines, so
/// its lines are run as it would run them), with a client asking all along.
#[tokio::test(flavor = "multi_thread")]
async fn the_shipped_units_reload_puts_a_new_key_in_force_without_a_failed_request() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    let dir = tempfile::tempdir().expect("temp dir");
    let (etc_keys, _) = own_keys(dir.path());
    let runtime = dir.path().join("run");
    std::fs::create_dir_all(runtime.join("petstore")).expect("RuntimeDirectory=");
    crate::support::run_unit_commands(&unit_commands("ExecStartPre", &runtime, &etc_keys, 0));
    let server = server_with(&runtime.join("petstore/api-keys"));

    let stop = Arc::new(AtomicBool::new(false));
    let (answered, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut asking = server.h1().await;
    let asker = {
        let (stop, answered, failed) = (stop.clone(), answered.clone(), failed.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let status = asking.get("/v1/pets").await.status;
                let count = if status == 200 { &answered } else { &failed };
                count.fetch_add(1, Ordering::Relaxed);
            }
        })
    };

    let carol = add(&etc_keys, &["carol"]);
    let mut client = server.h1().await;
    assert_eq!(
        send(&mut client, Method::GET, "/v1/pets", &carol, "")
            .await
            .status,
        401,
        "not in force before the reload"
    );
    crate::support::run_unit_commands(&unit_commands(
        "ExecReload",
        &runtime,
        &etc_keys,
        server.pid(),
    ));
    server.wait_for_log("reload done", 1);
    assert_eq!(
        send(&mut client, Method::GET, "/v1/pets", &carol, "")
            .await
            .status,
        200,
        "in force after the unit's reload"
    );

    let (code, _, stderr) = keys(&etc_keys, false, &["revoke", "carol"]);
    assert_eq!(code, Some(0), "{stderr}");
    crate::support::run_unit_commands(&unit_commands(
        "ExecReload",
        &runtime,
        &etc_keys,
        server.pid(),
    ));
    server.wait_for_log("reload done", 2);
    assert_eq!(
        send(&mut client, Method::GET, "/v1/pets", &carol, "")
            .await
            .status,
        401,
        "revoked"
    );

    stop.store(true, Ordering::Relaxed);
    asker.await.expect("the asking client");
    assert_eq!(failed.load(Ordering::Relaxed), 0, "no request failed");
    assert!(answered.load(Ordering::Relaxed) > 0);
    server.stop();
}
