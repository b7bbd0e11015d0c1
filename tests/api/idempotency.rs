//! Idempotency-Key on createPet: a retry replays the first 201 byte for byte and creates
//! nothing, a reused key with another body is refused, keys are scoped per API key, expire
//! after `--idempotency-ttl`, and a retry while the first is in flight gets 409. Also: a POST
//! with no body at all.

use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::Method;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::support::{
    Client, DEV_KEY, Options, Protocol, Reply, Server, start_streaming_create_with, streamed_reply,
};

const REX: &str = r#"{"name":"Rex","categoryId":1,"status":"available"}"#;
const BODY_REQUIRED: &str = "request body is required: a JSON object";
const INVALID_KEY: &str =
    "Idempotency-Key must be 1 to 255 printable ASCII characters, bare or in double quotes";
const IN_FLIGHT: &str = "a request with this Idempotency-Key is still in progress; retry later";

/// `POST /v1/pets` with the development key, a JSON body and `Idempotency-Key: key`.
pub async fn post_keyed(client: &mut Client, key: &str, body: &str) -> Reply {
    let headers = [
        ("content-type", "application/json"),
        ("idempotency-key", key),
    ];
    client
        .send_with(Method::POST, "/v1/pets", &headers, body.to_owned())
        .await
}

/// Asserts that `again` replays `first`: 201, the same body bytes, Location and ETag, and
/// `Idempotent-Replayed: true`, which the first answer did not carry.
pub fn assert_replay(first: &Reply, again: &Reply) {
    assert_eq!(first.status, 201, "{:?}", first.body);
    assert_eq!(first.header("idempotent-replayed"), None);
    assert_eq!(
        (
            again.status,
            &again.body,
            again.header("location"),
            again.header("etag")
        ),
        (
            201,
            &first.body,
            first.header("location"),
            Some(first.etag())
        ),
    );
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
}

/// Asserts that the store holds exactly the pets of `replies` (201 answers), in that order.
async fn assert_only(client: &mut Client, replies: &[&Reply]) {
    let pets: Vec<_> = replies.iter().map(|reply| reply.json()).collect();
    assert_eq!(client.list_all("/v1/pets?limit=100").await, pets);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_same_key_and_body_again_replays_the_first_answer_and_creates_nothing() {
    let server = Server::start();
    let mut client = server.h1().await;
    let first = post_keyed(&mut client, "abc", REX).await;
    for _ in 0..2 {
        assert_replay(&first, &post_keyed(&mut client, "abc", REX).await);
    }
    assert_only(&mut client, &[&first]).await;
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn formatting_member_order_and_unknown_members_do_not_change_the_body() {
    let server = Server::start();
    let mut client = server.h2().await;
    let first = post_keyed(&mut client, "abc", REX).await;
    for body in [
        r#"{"status":"available","categoryId":1,"name":"Rex"}"#,
        r#" { "name" : "Rex" , "categoryId" : 1 , "status" : "available" } "#,
        r#"{"name":"Rex","categoryId":1,"status":"available","colour":"brown"}"#,
        r#"{"id":7,"name":"Rex","categoryId":1,"status":"available"}"#,
    ] {
        assert_replay(&first, &post_keyed(&mut client, "abc", body).await);
    }
    assert_only(&mut client, &[&first]).await;
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn the_quoted_and_the_bare_form_are_the_same_key() {
    let server = Server::start();
    let mut client = server.h1().await;
    let first = post_keyed(&mut client, r#""abc""#, REX).await;
    assert_replay(&first, &post_keyed(&mut client, "abc", REX).await);
    let other = post_keyed(&mut client, "xyz", REX).await;
    assert_replay(&other, &post_keyed(&mut client, r#""xyz""#, REX).await);
    assert_only(&mut client, &[&first, &other]).await;
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn the_same_key_with_another_body_gets_422_and_the_first_still_replays() {
    let server = Server::start();
    let mut client = server.h1().await;
    let first = post_keyed(&mut client, "abc", REX).await;
    for body in [
        r#"{"name":"Max","categoryId":1,"status":"available"}"#,
        r#"{"name":"Rex","categoryId":2,"status":"available"}"#,
        r#"{"name":"Rex","categoryId":1,"status":"sold"}"#,
        r#"{"name":"Rex","categoryId":1}"#,
    ] {
        post_keyed(&mut client, "abc", body).await.assert_error(
            422,
            "idempotency_key_reused",
            "this Idempotency-Key was already used with a different request body",
        );
    }
    assert_replay(&first, &post_keyed(&mut client, "abc", REX).await);
    assert_only(&mut client, &[&first]).await;
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_key_that_is_empty_too_long_or_not_printable_ascii_gets_400() {
    let server = Server::start();
    let mut client = server.h2().await;
    let long = "k".repeat(256);
    for key in [
        "".to_owned(),
        r#""""#.to_owned(),
        long.clone(),
        format!(r#""{long}""#),
        "a\tb".to_owned(),
    ] {
        post_keyed(&mut client, &key, REX).await.assert_error(
            400,
            "invalid_idempotency_key",
            INVALID_KEY,
        );
    }
    // Bytes past ASCII can only be sent as a raw header value (obs-text).
    let request = client
        .authed(Method::POST, "/v1/pets")
        .header(CONTENT_TYPE, "application/json")
        .header(
            "idempotency-key",
            HeaderValue::from_bytes("caf\u{e9}".as_bytes()).expect("obs-text"),
        );
    client
        .send(request, REX)
        .await
        .assert_error(400, "invalid_idempotency_key", INVALID_KEY);
    assert_only(&mut client, &[]).await;
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_key_of_255_characters_is_accepted_bare_or_quoted() {
    let server = Server::start();
    let mut client = server.h1().await;
    let long = "k".repeat(255);
    let first = post_keyed(&mut client, &long, REX).await;
    assert_replay(
        &first,
        &post_keyed(&mut client, &format!(r#""{long}""#), REX).await,
    );
    assert_only(&mut client, &[&first]).await;
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn the_header_given_twice_gets_400() {
    let server = Server::start();
    let mut client = server.h1().await;
    for (one, two) in [("abc", "abc"), ("abc", "xyz")] {
        let headers = [
            ("content-type", "application/json"),
            ("idempotency-key", one),
            ("idempotency-key", two),
        ];
        client
            .send_with(Method::POST, "/v1/pets", &headers, REX)
            .await
            .assert_error(
                400,
                "invalid_idempotency_key",
                "Idempotency-Key must be given at most once",
            );
    }
    assert_only(&mut client, &[]).await;
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn two_api_keys_sending_the_same_key_create_two_pets() {
    const OTHER_KEY: &str = "another-test-key-for-idempotency";
    let dir = tempfile::tempdir().expect("temp dir");
    let keys = dir.path().join("api-keys");
    let line = |label: &str, key: &str| {
        let hash: String = Sha256::digest(key.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        format!("{label} {hash}\n")
    };
    std::fs::write(&keys, line("dev", DEV_KEY) + &line("other", OTHER_KEY)).expect("keys file");
    let server = Server::start_with(Options {
        api_keys: keys,
        ..Options::default()
    });
    let mut client = server.h2().await;
    let post_as_other = |client: &Client| {
        client
            .request(Method::POST, "/v1/pets")
            .header(AUTHORIZATION, format!("Bearer {OTHER_KEY}"))
            .header(CONTENT_TYPE, "application/json")
            .header("idempotency-key", "abc")
    };
    let mine = post_keyed(&mut client, "abc", REX).await;
    let theirs = client.send(post_as_other(&client), REX).await;
    assert_eq!((mine.status, theirs.status), (201, 201));
    assert_ne!(mine.json()["id"], theirs.json()["id"]);
    assert_replay(&mine, &post_keyed(&mut client, "abc", REX).await);
    assert_replay(&theirs, &client.send(post_as_other(&client), REX).await);
    assert_only(&mut client, &[&mine, &theirs]).await;
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replay_returns_the_pet_as_created_even_after_a_patch_or_a_delete() {
    let server = Server::start();
    let mut client = server.h1().await;
    let first = post_keyed(&mut client, "abc", REX).await;
    let patched = client
        .patch_json("/v1/pets/1", r#"{"name":"Max","status":null}"#)
        .await;
    assert_eq!(patched.status, 200);
    assert_replay(&first, &post_keyed(&mut client, "abc", REX).await);
    assert_eq!(client.get("/v1/pets/1").await.json(), patched.json());
    assert_eq!(client.delete("/v1/pets/1").await.status, 204);
    assert_replay(&first, &post_keyed(&mut client, "abc", REX).await);
    assert_only(&mut client, &[]).await;
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_invalid_body_with_a_key_records_nothing() {
    let server = Server::start();
    let mut client = server.h1().await;
    post_keyed(&mut client, "abc", r#"{"name":"Rex"}"#)
        .await
        .assert_error(400, "invalid_body", "categoryId is required");
    let first = post_keyed(&mut client, "abc", REX).await;
    assert_eq!(
        (first.status, first.header("idempotent-replayed")),
        (201, None)
    );
    assert_replay(&first, &post_keyed(&mut client, "abc", REX).await);
    assert_only(&mut client, &[&first]).await;
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn after_the_ttl_the_same_key_creates_a_new_pet() {
    let server = Server::start_with(Options {
        args: vec!["--idempotency-ttl".into(), "1s".into()],
        ..Options::default()
    });
    let mut client = server.h2().await;
    let first = post_keyed(&mut client, "abc", REX).await;
    assert_eq!(first.status, 201);
    // Waiting out the TTL is the behaviour under test: retry until a new pet comes back.
    let deadline = Instant::now() + Duration::from_secs(10);
    let second = loop {
        let again = post_keyed(&mut client, "abc", REX).await;
        if again.body != first.body {
            break again;
        }
        assert_replay(&first, &again);
        assert!(Instant::now() < deadline, "the record outlived its 1 s TTL");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        (second.status, second.header("idempotent-replayed")),
        (201, None)
    );
    assert_eq!(second.json()["id"], 2);
    assert_only(&mut client, &[&first, &second]).await;
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_retry_while_the_first_request_is_in_flight_gets_409_with_retry_after() {
    // The debug line "idempotency key claimed" shows the server holds the first request's key.
    let server = Server::start_with(Options {
        args: vec!["--log-level".into(), "info,petstore::api=debug".into()],
        ..Options::default()
    });
    let (mut body, answer) =
        start_streaming_create_with(&server, &[("idempotency-key", "slow")]).await;
    body.send_data(Bytes::from_static(br#"{"name":"Rex","#))
        .await
        .expect("first half");
    server.wait_for_log("idempotency key claimed", 1);

    let mut client = server.h1().await;
    let retry = post_keyed(&mut client, "slow", REX).await;
    retry.assert_error(409, "idempotency_key_in_flight", IN_FLIGHT);
    assert_eq!(retry.header("retry-after"), Some("1"));

    body.send_data(Bytes::from_static(
        br#""categoryId":1,"status":"available"}"#,
    ))
    .await
    .expect("second half");
    drop(body);
    let first = streamed_reply(answer).await;
    assert_eq!(
        (first.status, first.json()),
        (
            201,
            json!({"id": 1, "name": "Rex", "categoryId": 1, "status": "available"})
        )
    );
    assert_replay(&first, &post_keyed(&mut client, "slow", REX).await);
    assert_only(&mut client, &[&first]).await;
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn many_concurrent_posts_with_the_same_key_create_one_pet() {
    let server = Server::start();
    let client = server.h2().await;
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..16 {
        let mut client = client.share();
        tasks.spawn(async move { post_keyed(&mut client, "once", REX).await });
    }
    let replies = tasks.join_all().await;
    let (created, busy): (Vec<&Reply>, Vec<&Reply>) =
        replies.iter().partition(|reply| reply.status == 201);
    for reply in busy {
        reply.assert_error(409, "idempotency_key_in_flight", IN_FLIGHT);
        assert_eq!(reply.header("retry-after"), Some("1"));
    }
    let (first, replays): (Vec<&Reply>, Vec<&Reply>) = created
        .into_iter()
        .partition(|reply| reply.header("idempotent-replayed").is_none());
    assert_eq!(first.len(), 1, "one answer created the pet: {replies:?}");
    for replay in replays {
        assert_replay(first[0], replay);
    }
    let mut client = client.share();
    assert_only(&mut client, &first).await;
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_post_without_a_body_gets_400_whatever_the_media_type() {
    let server = Server::start();
    for protocol in [Protocol::Http1, Protocol::Http2] {
        let mut client = Client::connect(server.addr, protocol).await;
        for headers in [
            &[][..],
            &[("content-type", "text/plain")][..],
            &[("content-type", "application/json")][..],
            &[
                ("content-type", "application/json"),
                ("content-length", "0"),
            ][..],
        ] {
            client
                .send_with(Method::POST, "/v1/pets", headers, Bytes::new())
                .await
                .assert_error(400, "invalid_body", BODY_REQUIRED);
        }
        assert_only(&mut client, &[]).await;
    }
    server.stop();
}
