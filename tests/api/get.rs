//! getPet: the pet, 404 and 400, and the deprecation headers on every answer.

use bytes::Bytes;
use hyper::Method;
use serde_json::json;

use crate::support::{Protocol, Reply, Server};

/// Asserts the three headers every getPet answer carries.
pub fn assert_deprecation_headers(reply: &Reply) {
    assert_eq!(reply.header("deprecation"), Some("@1795305600"));
    assert_eq!(
        reply.header("sunset"),
        Some("Thu, 05 Dec 2030 00:00:00 GMT")
    );
    assert_eq!(
        reply.header("link"),
        Some(r#"</v1/pets>; rel="successor-version""#)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_existing_pet_is_returned_with_sunset_deprecation_and_link() {
    let server = Server::start();
    let mut client = server.h1().await;
    client
        .create(r#"{"name":"Rex","categoryId":3,"status":"pending"}"#)
        .await;
    let reply = client.get("/v1/pets/1").await;
    assert_eq!(
        (reply.status, reply.json()),
        (
            200,
            json!({"id": 1, "name": "Rex", "categoryId": 3, "status": "pending"})
        )
    );
    assert_deprecation_headers(&reply);
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unknown_id_gets_404_with_the_deprecation_headers() {
    let server = Server::start();
    let mut client = server.h1().await;
    for (id, message) in [
        ("1", "no pet has id 1"),
        ("-5", "no pet has id -5"),
        ("9223372036854775807", "no pet has id 9223372036854775807"),
    ] {
        let reply = client.get(&format!("/v1/pets/{id}")).await;
        reply.assert_error(404, "not_found", message);
        assert_deprecation_headers(&reply);
    }
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_id_that_is_not_a_decimal_int64_gets_400() {
    let server = Server::start();
    let mut client = server.h1().await;
    for id in ["abc", "1.0", "9223372036854775808", "+1", "0x10", "%31"] {
        let reply = client.get(&format!("/v1/pets/{id}")).await;
        reply.assert_error(
            400,
            "invalid_parameter",
            "petId must be a decimal integer within int64",
        );
        assert_deprecation_headers(&reply);
    }
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn head_answers_like_get_without_a_body_on_both_protocols() {
    let server = Server::start();
    server
        .h1()
        .await
        .create(r#"{"name":"Rex","categoryId":3}"#)
        .await;
    for protocol in [Protocol::Http1, Protocol::Http2] {
        let mut client = crate::support::Client::connect(server.addr, protocol).await;
        let request = client.authed(Method::HEAD, "/v1/pets/1");
        let reply = client.send(request, Bytes::new()).await;
        assert_eq!((reply.status, reply.body.len()), (200, 0), "{protocol:?}");
        assert_eq!(reply.header("content-length"), Some("36"), "{protocol:?}");
        assert_deprecation_headers(&reply);
    }
    server.stop();
}
