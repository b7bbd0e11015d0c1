//! Authentication: 401 for a missing or wrong key on every operation, before routing.

use bytes::Bytes;
use hyper::Method;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE};

use crate::support::{Client, DEV_KEY, Server};

const MISSING: &str = "this operation needs an API key: send Authorization: Bearer <key>";
const INVALID: &str = "the API key is not valid";

/// listPets, createPet and getPet, each with the given Authorization value (or none).
async fn every_operation(
    client: &mut Client,
    authorization: Option<&str>,
) -> Vec<crate::support::Reply> {
    let mut replies = Vec::new();
    for (method, path) in [
        (Method::GET, "/v1/pets"),
        (Method::POST, "/v1/pets"),
        (Method::GET, "/v1/pets/1"),
    ] {
        let mut request = client
            .request(method, path)
            .header(CONTENT_TYPE, "application/json");
        if let Some(value) = authorization {
            request = request.header(AUTHORIZATION, value);
        }
        replies.push(client.send(request, r#"{"name":"a","categoryId":1}"#).await);
    }
    replies
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_key_gets_401_with_www_authenticate_on_every_operation() {
    let server = Server::start();
    let mut client = server.h1().await;
    for authorization in [None, Some("Basic dXNlcjpwYXNz")] {
        for reply in every_operation(&mut client, authorization).await {
            reply.assert_error(401, "unauthorized", MISSING);
            assert_eq!(
                reply.header("www-authenticate"),
                Some(r#"Bearer realm="petstore""#)
            );
        }
    }
    assert_eq!(
        &client.get("/v1/pets").await.body[..],
        b"[]",
        "nothing was created"
    );
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wrong_key_gets_401_with_invalid_token_on_every_operation() {
    let server = Server::start();
    let mut client = server.h2().await;
    for authorization in ["Bearer wrong-key", "Bearer ", &format!("Bearer {DEV_KEY}x")] {
        for reply in every_operation(&mut client, Some(authorization)).await {
            reply.assert_error(401, "unauthorized", INVALID);
            assert_eq!(
                reply.header("www-authenticate"),
                Some(r#"Bearer realm="petstore", error="invalid_token""#)
            );
        }
    }
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn the_bearer_scheme_name_is_case_insensitive() {
    let server = Server::start();
    let mut client = server.h1().await;
    for scheme in ["bearer", "BEARER", "bEaReR"] {
        let request = client
            .request(Method::GET, "/v1/pets")
            .header(AUTHORIZATION, format!("{scheme} {DEV_KEY}"));
        assert_eq!(
            client.send(request, Bytes::new()).await.status,
            200,
            "{scheme}"
        );
    }
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn auth_is_checked_before_routing() {
    let server = Server::start();
    let mut client = server.h1().await;
    let request = client.request(Method::GET, "/v1/no-such-thing");
    client
        .send(request, Bytes::new())
        .await
        .assert_error(401, "unauthorized", MISSING);
    let request = client.request(Method::DELETE, "/v1/pets");
    client
        .send(request, Bytes::new())
        .await
        .assert_error(401, "unauthorized", MISSING);
    client.get("/v1/no-such-thing").await.assert_error(
        404,
        "not_found",
        "no resource at /v1/no-such-thing",
    );
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn the_key_never_reaches_the_log_but_its_label_does() {
    let server = Server::start();
    let mut client = server.h1().await;
    client.get("/v1/pets").await;
    let request = client
        .request(Method::GET, "/v1/pets")
        .header(AUTHORIZATION, "Bearer some-wrong-secret");
    client.send(request, Bytes::new()).await;
    let logs = server.stop().logs;
    assert!(
        logs.contains("status=200") && logs.contains("key=dev"),
        "{logs}"
    );
    assert!(
        !logs.contains(DEV_KEY) && !logs.contains("some-wrong-secret"),
        "{logs}"
    );
}
