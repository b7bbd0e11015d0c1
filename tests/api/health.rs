//! The health probe: no key, `{"status":"ok"}`, and quiet at info level.

use bytes::Bytes;
use hyper::Method;
use serde_json::json;

use crate::support::Server;

#[tokio::test(flavor = "multi_thread")]
async fn healthz_answers_ok_without_a_key_and_is_not_logged_at_info() {
    let server = Server::start();
    let mut client = server.h1().await;
    let request = client.request(Method::GET, "/healthz");
    let reply = client.send(request, Bytes::new()).await;
    assert_eq!((reply.status, reply.json()), (200, json!({"status": "ok"})));
    assert_eq!(reply.header("content-type"), Some("application/json"));
    client.get("/v1/pets").await;
    let logs = server.stop().logs;
    assert!(
        logs.contains("path=/v1/pets") && !logs.contains("path=/healthz"),
        "{logs}"
    );
}
