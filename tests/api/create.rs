//! createPet: the 201 answer, id assignment, every kind of invalid body, 415 and 413.

use hyper::Method;
use hyper::header::CONTENT_TYPE;
use serde_json::json;

use crate::support::{DEV_KEY, Server, raw_exchange};

#[tokio::test(flavor = "multi_thread")]
async fn a_new_pet_gets_201_with_its_fields_its_id_and_location() {
    let server = Server::start();
    let mut client = server.h1().await;
    let reply = client
        .post_json(
            "/v1/pets",
            r#"{"name":"Rex","categoryId":7,"status":"available"}"#,
        )
        .await;
    assert_eq!(reply.status, 201);
    assert_eq!(
        reply.json(),
        json!({"id": 1, "name": "Rex", "categoryId": 7, "status": "available"})
    );
    assert_eq!(reply.header("location"), Some("/v1/pets/1"));
    assert_eq!(reply.header("content-type"), Some("application/json"));
    assert_eq!(client.get("/v1/pets/1").await.json(), reply.json());
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn ids_start_at_1_and_increase_by_one() {
    let server = Server::start();
    let mut client = server.h2().await;
    for expected in 1..=5 {
        let pet = client
            .create(&format!(r#"{{"name":"p{expected}","categoryId":1}}"#))
            .await;
        assert_eq!(pet["id"], expected);
    }
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pet_without_status_has_no_status_key() {
    let server = Server::start();
    let mut client = server.h1().await;
    let reply = client
        .post_json("/v1/pets", r#"{"name":"","categoryId":-4}"#)
        .await;
    assert_eq!(&reply.body[..], br#"{"id":1,"name":"","categoryId":-4}"#);
    assert_eq!(
        &client.get("/v1/pets").await.body[..],
        br#"[{"id":1,"name":"","categoryId":-4}]"#
    );
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn unknown_fields_are_ignored_and_not_stored() {
    let server = Server::start();
    let mut client = server.h1().await;
    let pet = client
        .create(r#"{"id":999,"name":"Tom","categoryId":2,"colour":"grey"}"#)
        .await;
    assert_eq!(pet, json!({"id": 1, "name": "Tom", "categoryId": 2}));
    assert_eq!(client.get("/v1/pets/1").await.json(), pet);
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn each_invalid_body_gets_400_with_its_reason_and_stores_nothing() {
    let server = Server::start();
    let mut client = server.h2().await;
    let range = "categoryId must be an integer from -9223372036854775808 to 9223372036854775807";
    let cases = [
        (r#"{"categoryId":1}"#, "name is required"),
        (r#"{"name":"a"}"#, "categoryId is required"),
        (r#"{"name":null,"categoryId":1}"#, "name must not be null"),
        (r#"{"name":7,"categoryId":1}"#, "name must be a string"),
        (
            r#"{"name":"a","categoryId":"1"}"#,
            "categoryId must be an integer",
        ),
        (
            r#"{"name":"a","categoryId":null}"#,
            "categoryId must not be null",
        ),
        (r#"{"name":"a","categoryId":1.5}"#, range),
        (r#"{"name":"a","categoryId":9223372036854775808}"#, range),
        (
            r#"{"name":"a","categoryId":1,"status":"lost"}"#,
            "status must be one of available, pending, sold",
        ),
        (
            r#"{"name":"a","categoryId":1,"status":null}"#,
            "status must not be null",
        ),
        (
            r#"{"name":"a","categoryId":1,"name":"b"}"#,
            r#"duplicate key "name""#,
        ),
        (
            r#"[{"name":"a","categoryId":1}]"#,
            "request body must be a JSON object",
        ),
        ("", "request body is required: a JSON object"),
    ];
    for (body, message) in cases {
        client
            .post_json("/v1/pets", body)
            .await
            .assert_error(400, "invalid_body", message);
    }
    for body in [
        r#"{"name":"a","categoryId":1"#,
        r#"{"name":"a","categoryId":1}{}"#,
        "name=a",
    ] {
        client
            .post_json("/v1/pets", body)
            .await
            .assert_error_prefix(400, "invalid_body", "request body is not valid JSON: ");
    }
    assert_eq!(&client.get("/v1/pets").await.body[..], b"[]");
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_body_that_is_not_application_json_gets_415() {
    let server = Server::start();
    let mut client = server.h1().await;
    let body = r#"{"name":"a","categoryId":1}"#;
    for content_type in [
        Some("text/plain"),
        Some("application/json; charset=latin1"),
        Some("application/x-www-form-urlencoded"),
        None,
    ] {
        let mut request = client.authed(Method::POST, "/v1/pets");
        if let Some(content_type) = content_type {
            request = request.header(CONTENT_TYPE, content_type);
        }
        client.send(request, body).await.assert_error(
            415,
            "unsupported_media_type",
            "request body must be sent as Content-Type: application/json",
        );
    }
    let request = client
        .authed(Method::POST, "/v1/pets")
        .header(CONTENT_TYPE, "application/json; charset=UTF-8");
    assert_eq!(client.send(request, body).await.status, 201);
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_body_of_exactly_64_kib_is_accepted_and_one_byte_more_gets_413() {
    let server = Server::start();
    let mut client = server.h2().await;
    let envelope = r#"{"name":"","categoryId":1}"#.len();
    let name = "x".repeat(64 * 1024 - envelope);
    let body = format!(r#"{{"name":"{name}","categoryId":1}}"#);
    assert_eq!(body.len(), 65536);
    assert_eq!(client.post_json("/v1/pets", &body).await.status, 201);
    let body = format!(r#"{{"name":"{name}x","categoryId":1}}"#);
    client.post_json("/v1/pets", &body).await.assert_error(
        413,
        "payload_too_large",
        "request body must be at most 65536 bytes",
    );
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_declared_length_over_64_kib_gets_413_before_the_body_is_sent() {
    let server = Server::start();
    let head = format!(
        "POST /v1/pets HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {DEV_KEY}\r\n\
         Content-Type: application/json\r\nContent-Length: 10000000\r\nConnection: close\r\n\r\n"
    );
    let (status, body) = raw_exchange(server.addr, head.as_bytes())
        .await
        .status_and_json();
    assert_eq!(
        (status, body),
        (
            413,
            json!({"code": "payload_too_large", "message": "request body must be at most 65536 bytes", "status": 413})
        )
    );
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_chunked_body_is_cut_off_at_64_kib_with_413() {
    let server = Server::start();
    let head = format!(
        "POST /v1/pets HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {DEV_KEY}\r\n\
         Content-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    );
    let chunk = format!("2000\r\n{}\r\n", " ".repeat(0x2000));
    let (status, body) = raw_exchange(
        server.addr,
        [head.as_bytes(), chunk.repeat(9).as_bytes()]
            .concat()
            .as_slice(),
    )
    .await
    .status_and_json();
    assert_eq!((status, &body["code"]), (413, &json!("payload_too_large")));
    server.stop();
}
