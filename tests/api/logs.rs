//! Logs: start-up lines, one line per request with its fields, warnings for deprecated calls,
//! and the JSON format.

use serde_json::Value;

use crate::support::{Options, Server};

#[tokio::test(flavor = "multi_thread")]
async fn startup_lines_give_the_address_pid_database_pets_and_keys() {
    let server = Server::start();
    let logs = server.logs();
    let db = server.db_path().display().to_string();
    assert!(
        logs.contains(&format!("database open database={db} pets=0")),
        "{logs}"
    );
    assert!(logs.contains("API keys loaded keys=1"), "{logs}");
    assert!(
        logs.contains(&format!(
            "listening on address={} pid={}",
            server.addr,
            server.pid()
        )),
        "{logs}"
    );
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn deprecated_get_pet_calls_are_warned_with_the_key_label() {
    let server = Server::start();
    let mut client = server.h1().await;
    client.get("/v1/pets/1").await;
    client.get("/v1/pets/2").await;
    let logs = server.stop().logs;
    assert_eq!(
        logs.matches("deprecated getPet").count(),
        1,
        "once an hour per key: {logs}"
    );
    let warning = logs
        .lines()
        .find(|line| line.contains("deprecated getPet"))
        .unwrap_or_else(|| panic!("{logs}"));
    assert!(
        warning.contains("WARN") && warning.contains("key=dev"),
        "{warning}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn json_logs_hold_one_object_a_line_with_every_request_field() {
    let server = Server::start_with(Options {
        args: vec!["--log-format".into(), "json".into()],
        ..Options::default()
    });
    let peer = {
        let mut client = server.h2().await;
        client.create(r#"{"name":"Rex","categoryId":1}"#).await;
        server.addr
    };
    let logs = server.stop().logs;
    let lines: Vec<Value> = logs
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
        .collect();
    let request = lines
        .iter()
        .find(|line| line["message"] == "request")
        .expect("a request line");
    assert_eq!(request["method"], "POST");
    assert_eq!(request["path"], "/v1/pets");
    assert_eq!(request["status"], 201);
    assert_eq!(request["protocol"], "HTTP/2.0");
    assert_eq!(request["key"], "dev");
    assert!(request["duration_us"].is_u64(), "{request}");
    assert!(
        request["peer"]
            .as_str()
            .is_some_and(|p| p.starts_with("127.0.0.1:")),
        "{request}"
    );
    assert_ne!(
        request["peer"],
        peer.to_string(),
        "the peer is the client's address, not the server's"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_log_filter_can_quiet_the_request_lines() {
    let server = Server::start_with(Options {
        args: vec!["--log-level".into(), "info,petstore::service=warn".into()],
        ..Options::default()
    });
    server.h1().await.get("/v1/pets").await;
    let logs = server.stop().logs;
    assert!(!logs.contains("path=/v1/pets"), "{logs}");
}
