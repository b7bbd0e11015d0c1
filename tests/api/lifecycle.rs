//! Start and stop: data survives a restart, every bad start-up input stops the server with a
//! message naming the file and the fault (a redb file of a newer petstore, or of an earlier
//! one this build no longer upgrades, the latter refused by `check` too), and `new-key` makes
//! keys the server accepts.

use std::ffi::OsStr;

use serde_json::json;

use crate::support::{Options, Server, cert, run, start_failing};

#[tokio::test(flavor = "multi_thread")]
async fn pets_survive_a_restart_on_the_same_file_and_ids_continue() {
    let server = Server::start();
    let mut client = server.h1().await;
    let rex = client
        .create(r#"{"name":"Rex","categoryId":1,"status":"sold"}"#)
        .await;
    let tom = client.create(r#"{"name":"Tom","categoryId":2}"#).await;
    drop(client);
    let server = server.restart();
    let mut client = server.h2().await;
    assert_eq!(client.get("/v1/pets").await.json(), json!([rex, tom]));
    assert_eq!(
        client.get("/v1/pets?status=sold").await.json(),
        json!([rex])
    );
    assert_eq!(
        client.create(r#"{"name":"Kit","categoryId":3}"#).await["id"],
        3
    );
    let logs = server.stop().logs;
    assert!(
        logs.contains("pets=2"),
        "the start-up line counts the pets:\n{logs}"
    );
}

#[test]
fn a_missing_certificate_stops_startup_naming_the_file() {
    let dir = tempfile::tempdir().expect("temp dir");
    let options = Options {
        tls_cert: dir.path().join("nope.pem"),
        ..Options::default()
    };
    let stderr = start_failing(&dir.path().join("pets.redb"), &options);
    assert!(
        stderr.starts_with("error: reading TLS certificate ") && stderr.contains("nope.pem"),
        "{stderr}"
    );
}

#[test]
fn a_key_that_does_not_match_the_certificate_stops_startup() {
    let dir = tempfile::tempdir().expect("temp dir");
    let options = Options {
        tls_key: cert("dev-server-2.key"),
        ..Options::default()
    };
    let stderr = start_failing(&dir.path().join("pets.redb"), &options);
    assert!(
        stderr.contains("dev-server-2.key does not fit certificate")
            && stderr.contains("dev-server.pem"),
        "{stderr}"
    );
}

#[test]
fn a_file_without_a_key_stops_startup_naming_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let options = Options {
        tls_key: cert("dev-server.pem"),
        ..Options::default()
    };
    let stderr = start_failing(&dir.path().join("pets.redb"), &options);
    assert!(
        stderr.contains("reading TLS key") && stderr.contains("dev-server.pem"),
        "{stderr}"
    );
}

#[test]
fn a_bad_keys_file_line_stops_startup_with_its_number() {
    let dir = tempfile::tempdir().expect("temp dir");
    let keys = dir.path().join("keys");
    std::fs::write(&keys, "# keys\nalice 0123\n").expect("write keys");
    let options = Options {
        api_keys: keys,
        ..Options::default()
    };
    let stderr = start_failing(&dir.path().join("pets.redb"), &options);
    assert!(
        stderr.contains("keys: line 2: expected 64 lowercase hex digits"),
        "{stderr}"
    );
}

#[test]
fn a_missing_keys_file_stops_startup_naming_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let options = Options {
        api_keys: dir.path().join("absent-keys"),
        ..Options::default()
    };
    let stderr = start_failing(&dir.path().join("pets.redb"), &options);
    assert!(
        stderr.contains("reading API keys file") && stderr.contains("absent-keys"),
        "{stderr}"
    );
}

#[test]
fn a_database_in_use_by_another_server_stops_startup() {
    let server = Server::start();
    let stderr = start_failing(&server.db_path(), &Options::default());
    assert!(
        stderr.contains("opening database") && stderr.contains("in use by another process"),
        "{stderr}"
    );
    server.stop();
}

/// A redb file with only a `meta` table holding `entries`: what the start and `check` read
/// first, made with redb directly, the way an earlier petstore would have left it.
fn file_with_meta(path: &std::path::Path, entries: &[(&str, u64)]) {
    let meta: redb::TableDefinition<&str, u64> = redb::TableDefinition::new("meta");
    let db = redb::Database::create(path).expect("create");
    let txn = db.begin_write().expect("write");
    {
        let mut table = txn.open_table(meta).expect("meta");
        for (key, value) in entries {
            table.insert(*key, *value).expect("insert");
        }
    }
    txn.commit().expect("commit");
}

#[test]
fn a_database_from_a_newer_schema_stops_startup() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("pets.redb");
    file_with_meta(&path, &[("schema_version", 99)]);
    let stderr = start_failing(&path, &Options::default());
    assert!(
        stderr.contains("schema version 99, newer than the 7"),
        "{stderr}"
    );
}

#[test]
fn a_file_needing_an_upgrade_or_log_this_build_lacks_is_refused_at_start_and_by_check_in_one_line()
{
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("pets.redb");
    let what_to_do = "run a petstore built from commit 4a29a84 on it once";
    for (meta, why) in [
        (
            &[("schema_version", 2)][..],
            "the file is at schema version 2, which this petstore no longer upgrades (it opens \
             versions 3 to 7)"
                .to_owned(),
        ),
        (
            &[("schema_version", 5), ("log_epoch", 7)][..],
            format!(
                "the file still expects the write-ahead log an earlier petstore kept beside it \
                 ({}-wal), which this petstore no longer replays",
                path.display()
            ),
        ),
    ] {
        let _ = std::fs::remove_file(&path);
        file_with_meta(&path, meta);
        let stderr = start_failing(&path, &Options::default());
        let line = stderr
            .lines()
            .find(|line| line.starts_with("error: "))
            .expect("an error line");
        assert!(
            line.starts_with(&format!(
                "error: opening database {}: {why}: {what_to_do}",
                path.display()
            )),
            "{stderr}"
        );
        let (code, stdout, stderr) = run(&["check".as_ref(), "--db".as_ref(), path.as_os_str()]);
        assert_eq!(code, Some(1), "{stderr}");
        assert_eq!(stdout, "");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(
            stderr.starts_with(&format!(
                "error: checking {}: {why}: {what_to_do}",
                path.display()
            )),
            "{stderr}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn sec1_and_pkcs1_keys_are_accepted() {
    for (chain, key) in [
        ("dev-server.pem", "dev-server-sec1.key"),
        ("dev-server-rsa.pem", "dev-server-rsa.key"),
    ] {
        let server = Server::start_with(Options {
            tls_cert: cert(chain),
            tls_key: cert(key),
            ..Options::default()
        });
        assert_eq!(server.h2().await.get("/v1/pets").await.status, 200, "{key}");
        server.stop();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn new_key_prints_a_key_that_the_printed_line_admits() {
    let (code, stdout, _) = run(&[OsStr::new("new-key"), OsStr::new("alice")]);
    assert_eq!(code, Some(0));
    let mut lines = stdout.lines();
    let (key, line) = (
        lines.next().expect("the key"),
        lines.next().expect("the keys-file line"),
    );
    assert!(
        key.len() >= 43 && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'),
        "{key}"
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let keys = dir.path().join("keys");
    std::fs::write(&keys, format!("{line}\n")).expect("write keys");
    let server = Server::start_with(Options {
        api_keys: keys,
        ..Options::default()
    });
    let mut client = server.h1().await;
    let request = client
        .request(hyper::Method::GET, "/v1/pets")
        .header("authorization", format!("Bearer {key}"));
    assert_eq!(client.send(request, bytes::Bytes::new()).await.status, 200);
    assert_eq!(
        client.get("/v1/pets").await.status,
        401,
        "the development key is not in this file"
    );
    assert!(server.stop().logs.contains("key=alice"));
}

#[test]
fn help_describes_every_flag_with_its_variable_and_version_prints() {
    let (code, help, _) = run(&[OsStr::new("--help")]);
    assert_eq!(code, Some(0));
    for flag in [
        "listen",
        "db",
        "tls-cert",
        "tls-key",
        "api-keys",
        "shutdown-timeout",
        "cache-size",
        "log-format",
        "log-level",
    ] {
        let variable = format!("PETSTORE_{}", flag.to_uppercase().replace('-', "_"));
        assert!(
            help.contains(&format!("--{flag}")) && help.contains(&variable),
            "{flag}: {help}"
        );
    }
    let (code, version, _) = run(&[OsStr::new("--version")]);
    assert_eq!(
        (code, version.trim()),
        (Some(0), concat!("petstore ", env!("CARGO_PKG_VERSION")))
    );
}

/// Receives one sd_notify datagram, failing past a deadline.
fn next_notification(socket: &std::os::unix::net::UnixDatagram) -> String {
    let mut buf = [0u8; 512];
    let n = socket
        .recv(&mut buf)
        .expect("a notification within the deadline");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[test]
fn systemd_is_told_ready_reloading_ready_and_stopping() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("notify.sock");
    let socket = std::os::unix::net::UnixDatagram::bind(&path).expect("bind the notify socket");
    socket
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .expect("timeout");
    let server = Server::start_with(Options {
        env: vec![("NOTIFY_SOCKET".into(), path.display().to_string())],
        ..Options::default()
    });
    assert!(next_notification(&socket).starts_with("READY=1"));
    server.signal("HUP");
    assert!(next_notification(&socket).starts_with("RELOADING=1"));
    assert!(next_notification(&socket).starts_with("READY=1"));
    server.signal("TERM");
    assert!(next_notification(&socket).starts_with("STOPPING=1"));
    server.wait_exit();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_request_in_flight_at_sigterm_gets_its_201_and_the_pet_is_kept() {
    use http_body_util::BodyExt;
    // The debug line "request started" proves the server has the request before the signal.
    let server = Server::start_with(Options {
        args: vec!["--log-level".into(), "info,petstore::service=debug".into()],
        ..Options::default()
    });
    let (mut body, answer) = crate::support::start_streaming_create(&server).await;
    body.send_data(bytes::Bytes::from_static(br#"{"name":"Late","#))
        .await
        .expect("first half");
    server.wait_for_log("request started method=POST path=/v1/pets", 1);

    server.signal("TERM");
    server.wait_for_log("stopping", 1);
    body.send_data(bytes::Bytes::from_static(br#""categoryId":9}"#))
        .await
        .expect("second half");
    drop(body);

    let response = answer
        .await
        .expect("task")
        .expect("the in-flight request is answered");
    assert_eq!(response.status(), 201);
    let pet: serde_json::Value = serde_json::from_slice(
        &response
            .into_body()
            .collect()
            .await
            .expect("whole body")
            .to_bytes(),
    )
    .expect("json");
    assert_eq!(pet, json!({"id": 1, "name": "Late", "categoryId": 9}));
    let stopped = server.wait_exit();

    let server = Server::start_on(stopped);
    assert_eq!(server.h1().await.get("/v1/pets/1").await.json(), pet);
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn every_create_acknowledged_before_sigterm_is_in_the_database_after() {
    let server = Server::start();
    let acknowledged = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let writers = crate::support::create_until_broken(&server, "stop", &acknowledged).await;
    // Let the writers get going: wait until the log shows a good number of creates.
    server.wait_for_log("status=201", 40);
    let stopped = server.stop();
    writers.join_all().await;

    let acknowledged = acknowledged.lock().expect("lock").clone();
    assert!(acknowledged.len() >= 40);
    let server = Server::start_on(stopped);
    let mut client = server.h2().await;
    client.assert_stored(&acknowledged).await;
    let mut ids: Vec<i64> = acknowledged
        .iter()
        .map(|pet| pet["id"].as_i64().expect("id"))
        .collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), acknowledged.len(), "no id was given twice");
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stalled_request_holds_the_stop_no_longer_than_the_shutdown_timeout() {
    let server = Server::start_with(Options {
        args: [
            "--shutdown-timeout",
            "1",
            "--log-level",
            "info,petstore::service=debug",
        ]
        .map(String::from)
        .to_vec(),
        ..Options::default()
    });
    let (mut body, _answer) = crate::support::start_streaming_create(&server).await;
    body.send_data(bytes::Bytes::from_static(b"{"))
        .await
        .expect("a first byte");
    server.wait_for_log("request started method=POST path=/v1/pets", 1);
    server.wait_for_log("", 0);
    server.signal("TERM");
    let logs = server.wait_exit().logs;
    assert!(logs.contains("drain timed out"), "{logs}");
    drop(body);
}
