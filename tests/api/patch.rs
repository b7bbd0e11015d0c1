//! patchPet and deletePet: merge patches, every refused body, 404/400/405/415, ETags,
//! If-Match and If-None-Match, races between writers holding the same tag, and a status index
//! that stays exact under concurrent patches.

use std::collections::BTreeSet;

use bytes::Bytes;
use hyper::Method;
use serde_json::{Value, json};

use crate::get::assert_deprecation_headers;
use crate::support::{Client, Reply, Server, create_many};

const REX: &str = r#"{"name":"Rex","categoryId":1,"status":"available"}"#;
const BODY_REQUIRED: &str = "request body is required: a JSON object";
const STALE: &str = "If-Match does not match the pet's current ETag";
const MEDIA_TYPE: &str =
    "request body must be sent as Content-Type: application/merge-patch+json or application/json";

/// Creates Rex (id 1) and returns the 201 answer.
async fn create_rex(client: &mut Client) -> Reply {
    let reply = client.post_json("/v1/pets", REX).await;
    assert_eq!(reply.status, 201, "{:?}", reply.body);
    reply
}

/// PATCH `path` as merge-patch JSON with `If-Match: if_match`.
async fn patch_if_match(client: &mut Client, path: &str, if_match: &str, body: &str) -> Reply {
    let headers = [
        ("content-type", "application/merge-patch+json"),
        ("if-match", if_match),
    ];
    client
        .send_with(Method::PATCH, path, &headers, body.to_owned())
        .await
}

/// PATCH `path` with the given Content-Type.
async fn patch_as(client: &mut Client, path: &str, content_type: &str, body: &str) -> Reply {
    let headers = [("content-type", content_type)];
    client
        .send_with(Method::PATCH, path, &headers, body.to_owned())
        .await
}

/// Asserts that pet 1 is still `pet`, with the tag `etag`.
async fn assert_unchanged(client: &mut Client, pet: &Value, etag: &str) {
    let reply = client.get("/v1/pets/1").await;
    assert_eq!(
        (&reply.json(), reply.etag()),
        (pet, etag),
        "nothing changed"
    );
}

fn assert_strong(etag: &str) {
    assert!(
        etag.len() >= 2 && etag.starts_with('"') && etag.ends_with('"'),
        "not a strong entity tag: {etag:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_merge_patch_sets_each_given_member_and_keeps_the_others() {
    let server = Server::start();
    let mut client = server.h1().await;
    create_rex(&mut client).await;
    for (patch, expected) in [
        (
            r#"{"name":"Max"}"#,
            json!({"id": 1, "name": "Max", "categoryId": 1, "status": "available"}),
        ),
        (
            r#"{"categoryId":-9223372036854775808}"#,
            json!({"id": 1, "name": "Max", "categoryId": i64::MIN, "status": "available"}),
        ),
        (
            r#"{"status":"sold"}"#,
            json!({"id": 1, "name": "Max", "categoryId": i64::MIN, "status": "sold"}),
        ),
        (
            r#"{"name":"","categoryId":7,"status":"pending"}"#,
            json!({"id": 1, "name": "", "categoryId": 7, "status": "pending"}),
        ),
    ] {
        let reply = client.patch_json("/v1/pets/1", patch).await;
        assert_eq!(
            (reply.status, reply.json()),
            (200, expected.clone()),
            "{patch}"
        );
        assert_eq!(reply.header("content-type"), Some("application/json"));
        assert_strong(reply.etag());
        assert_eq!(client.get("/v1/pets/1").await.json(), expected);
    }
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn application_json_and_media_type_parameters_are_accepted() {
    let server = Server::start();
    let mut client = server.h2().await;
    create_rex(&mut client).await;
    for (i, content_type) in [
        "application/json",
        "application/merge-patch+json; charset=utf-8",
        "application/json; charset=UTF-8",
    ]
    .into_iter()
    .enumerate()
    {
        let reply = patch_as(
            &mut client,
            "/v1/pets/1",
            content_type,
            &format!(r#"{{"categoryId":{i}}}"#),
        )
        .await;
        assert_eq!(
            (reply.status, &reply.json()["categoryId"]),
            (200, &json!(i))
        );
    }
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn status_null_removes_the_status_from_the_pet_and_from_every_list() {
    let server = Server::start();
    let mut client = server.h1().await;
    create_rex(&mut client).await;
    let other = client.create(REX).await;
    let expected = json!({"id": 1, "name": "Rex", "categoryId": 1});
    let reply = client.patch_json("/v1/pets/1", r#"{"status":null}"#).await;
    assert_eq!((reply.status, reply.json()), (200, expected.clone()));
    assert_eq!(client.get("/v1/pets/1").await.json(), expected);
    assert_eq!(
        client.get("/v1/pets").await.json(),
        json!([expected, other])
    );
    assert_eq!(
        client.get("/v1/pets?status=available").await.json(),
        json!([other])
    );
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn unknown_members_are_ignored_and_an_empty_patch_still_makes_a_new_version() {
    let server = Server::start();
    let mut client = server.h1().await;
    let created = create_rex(&mut client).await;
    let mut etag = created.etag().to_owned();
    for patch in [r#"{"id":99,"colour":"red"}"#, "{}", " { } "] {
        let reply = client.patch_json("/v1/pets/1", patch).await;
        assert_eq!(
            (reply.status, reply.json()),
            (200, created.json()),
            "{patch}"
        );
        assert_ne!(reply.etag(), etag, "a new version for {patch}");
        etag = reply.etag().to_owned();
        assert_unchanged(&mut client, &created.json(), &etag).await;
    }
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unknown_id_gets_404_on_patch_and_delete() {
    let server = Server::start();
    let mut client = server.h1().await;
    create_rex(&mut client).await;
    for id in ["2", "-5", "9223372036854775807"] {
        let path = format!("/v1/pets/{id}");
        let message = format!("no pet has id {id}");
        client
            .patch_json(&path, r#"{"name":"x"}"#)
            .await
            .assert_error(404, "not_found", &message);
        client
            .delete(&path)
            .await
            .assert_error(404, "not_found", &message);
    }
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_id_that_is_not_a_decimal_int64_gets_400_on_patch_and_delete() {
    let server = Server::start();
    let mut client = server.h2().await;
    let message = "petId must be a decimal integer within int64";
    for id in ["abc", "1.0", "9223372036854775808", "+1", "0x10"] {
        let path = format!("/v1/pets/{id}");
        client
            .patch_json(&path, r#"{"name":"x"}"#)
            .await
            .assert_error(400, "invalid_parameter", message);
        client
            .delete(&path)
            .await
            .assert_error(400, "invalid_parameter", message);
    }
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn each_invalid_body_gets_400_with_its_reason_and_changes_nothing() {
    let server = Server::start();
    let mut client = server.h2().await;
    let created = create_rex(&mut client).await;
    let range = "categoryId must be an integer from -9223372036854775808 to 9223372036854775807";
    let not_object = "request body must be a JSON object";
    for (body, message) in [
        (r#"{"name":null}"#, "name must not be null"),
        (r#"{"categoryId":null}"#, "categoryId must not be null"),
        (r#"{"name":7}"#, "name must be a string"),
        (r#"{"categoryId":"1"}"#, "categoryId must be an integer"),
        (r#"{"categoryId":1.5}"#, range),
        (r#"{"categoryId":9223372036854775808}"#, range),
        (
            r#"{"status":"lost"}"#,
            "status must be one of available, pending, sold",
        ),
        (
            r#"{"status":"SOLD"}"#,
            "status must be one of available, pending, sold",
        ),
        (r#"{"name":"a","name":"b"}"#, r#"duplicate key "name""#),
        (r#"[{"name":"a"}]"#, not_object),
        (r#""name""#, not_object),
        ("3", not_object),
        ("null", not_object),
        ("", BODY_REQUIRED),
    ] {
        client
            .patch_json("/v1/pets/1", body)
            .await
            .assert_error(400, "invalid_body", message);
    }
    for body in [r#"{"name":"a""#, r#"{"name":"a"}{}"#, "name=a"] {
        client
            .patch_json("/v1/pets/1", body)
            .await
            .assert_error_prefix(400, "invalid_body", "request body is not valid JSON: ");
    }
    assert_unchanged(&mut client, &created.json(), created.etag()).await;
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_body_of_another_media_type_gets_415_with_accept_patch() {
    let server = Server::start();
    let mut client = server.h1().await;
    let created = create_rex(&mut client).await;
    for content_type in [
        Some("text/plain"),
        Some("application/json-patch+json"),
        Some("application/x-www-form-urlencoded"),
        Some("application/json; charset=latin1"),
        Some("application/merge-patch+json; charset=iso-8859-1"),
        None,
    ] {
        let headers: Vec<(&str, &str)> = content_type
            .map(|value| ("content-type", value))
            .into_iter()
            .collect();
        let reply = client
            .send_with(Method::PATCH, "/v1/pets/1", &headers, r#"{"name":"Max"}"#)
            .await;
        reply.assert_error(415, "unsupported_media_type", MEDIA_TYPE);
        assert_eq!(
            reply.header("accept-patch"),
            Some("application/merge-patch+json, application/json"),
            "{content_type:?}"
        );
    }
    assert_unchanged(&mut client, &created.json(), created.etag()).await;
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_empty_patch_body_gets_400_whatever_the_media_type() {
    let server = Server::start();
    let mut client = server.h1().await;
    create_rex(&mut client).await;
    for headers in [
        &[][..],
        &[("content-type", "text/plain")][..],
        &[("content-type", "application/merge-patch+json")][..],
    ] {
        client
            .send_with(Method::PATCH, "/v1/pets/1", headers, Bytes::new())
            .await
            .assert_error(400, "invalid_body", BODY_REQUIRED);
    }
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn patch_checks_the_id_then_the_body_then_the_pet_then_if_match() {
    let server = Server::start();
    let mut client = server.h1().await;
    create_rex(&mut client).await;
    patch_as(&mut client, "/v1/pets/abc", "text/plain", "x")
        .await
        .assert_error(
            400,
            "invalid_parameter",
            "petId must be a decimal integer within int64",
        );
    patch_as(&mut client, "/v1/pets/9", "text/plain", r#"{"name":"x"}"#)
        .await
        .assert_error(415, "unsupported_media_type", MEDIA_TYPE);
    let stale = r#""not-the-tag""#;
    patch_if_match(&mut client, "/v1/pets/9", stale, r#"{"name":7}"#)
        .await
        .assert_error(400, "invalid_body", "name must be a string");
    patch_if_match(&mut client, "/v1/pets/9", stale, r#"{"name":"x"}"#)
        .await
        .assert_error(404, "not_found", "no pet has id 9");
    patch_if_match(&mut client, "/v1/pets/1", stale, r#"{"name":7}"#)
        .await
        .assert_error(400, "invalid_body", "name must be a string");
    patch_if_match(&mut client, "/v1/pets/1", stale, r#"{"name":"x"}"#)
        .await
        .assert_error(412, "precondition_failed", STALE);
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn delete_answers_204_and_the_pet_is_gone_from_get_and_every_list() {
    let server = Server::start();
    let mut client = server.h1().await;
    create_rex(&mut client).await;
    let other = client.create(REX).await;
    let reply = client.delete("/v1/pets/1").await;
    assert_eq!((reply.status, &reply.body[..]), (204, &b""[..]));
    assert_eq!(reply.header("content-type"), None);
    let gone = "no pet has id 1";
    client
        .get("/v1/pets/1")
        .await
        .assert_error(404, "not_found", gone);
    client
        .delete("/v1/pets/1")
        .await
        .assert_error(404, "not_found", gone);
    assert_eq!(client.get("/v1/pets").await.json(), json!([other]));
    assert_eq!(
        client.get("/v1/pets?status=available").await.json(),
        json!([other])
    );
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn every_answer_with_a_pet_has_a_strong_etag_that_changes_only_with_a_patch() {
    let server = Server::start();
    let mut client = server.h1().await;
    let created = create_rex(&mut client).await;
    let mut etag = created.etag().to_owned();
    assert_strong(&etag);
    for patch in [r#"{"name":"Max"}"#, "{}"] {
        for _ in 0..2 {
            assert_eq!(client.get("/v1/pets/1").await.etag(), etag);
        }
        let head = client
            .send_with(Method::HEAD, "/v1/pets/1", &[], Bytes::new())
            .await;
        assert_eq!(head.etag(), etag);
        let patched = client.patch_json("/v1/pets/1", patch).await;
        assert_eq!(patched.status, 200);
        assert_strong(patched.etag());
        assert_ne!(patched.etag(), etag, "{patch} made a new version");
        etag = patched.etag().to_owned();
        assert_eq!(client.get("/v1/pets/1").await.etag(), etag);
    }
    server.stop();
}

/// Creates Rex, patches him once, and returns (the stale tag, the pet, the current tag).
async fn rex_with_a_stale_tag(client: &mut Client) -> (String, Value, String) {
    let stale = create_rex(client).await.etag().to_owned();
    let current = client.patch_json("/v1/pets/1", r#"{"name":"Max"}"#).await;
    assert_eq!(current.status, 200);
    (stale, current.json(), current.etag().to_owned())
}

#[tokio::test(flavor = "multi_thread")]
async fn if_match_without_the_current_strong_tag_gets_412_and_changes_nothing() {
    let server = Server::start();
    let mut client = server.h2().await;
    let (stale, pet, current) = rex_with_a_stale_tag(&mut client).await;
    let weak = format!("W/{current}");
    for if_match in [
        stale.clone(),
        weak.clone(),
        format!("{stale}, {weak}"),
        "nonsense".to_owned(),
        r#""""#.to_owned(),
        current.trim_matches('"').to_owned(),
    ] {
        patch_if_match(&mut client, "/v1/pets/1", &if_match, r#"{"name":"X"}"#)
            .await
            .assert_error(412, "precondition_failed", STALE);
        client
            .send_with(
                Method::DELETE,
                "/v1/pets/1",
                &[("if-match", &if_match)],
                Bytes::new(),
            )
            .await
            .assert_error(412, "precondition_failed", STALE);
        assert_unchanged(&mut client, &pet, &current).await;
    }
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn if_match_with_the_current_tag_or_star_lets_patch_and_delete_through() {
    let server = Server::start();
    let mut client = server.h1().await;
    let (stale, _, mut current) = rex_with_a_stale_tag(&mut client).await;
    for (i, if_match) in ["{current}", "{stale}, {current}", "*"]
        .into_iter()
        .enumerate()
    {
        let if_match = if_match
            .replace("{current}", &current)
            .replace("{stale}", &stale);
        let reply = patch_if_match(
            &mut client,
            "/v1/pets/1",
            &if_match,
            &format!(r#"{{"categoryId":{i}}}"#),
        )
        .await;
        assert_eq!(
            (reply.status, &reply.json()["categoryId"]),
            (200, &json!(i)),
            "{if_match}"
        );
        current = reply.etag().to_owned();
    }
    let reply = client
        .send_with(
            Method::DELETE,
            "/v1/pets/1",
            &[("if-match", &current)],
            Bytes::new(),
        )
        .await;
    assert_eq!(reply.status, 204);
    client.create(REX).await;
    let reply = client
        .send_with(
            Method::DELETE,
            "/v1/pets/2",
            &[("if-match", "*")],
            Bytes::new(),
        )
        .await;
    assert_eq!(reply.status, 204);
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn if_none_match_with_a_matching_tag_gets_304_with_etag_and_deprecation_headers() {
    let server = Server::start();
    let mut client = server.h2().await;
    let (stale, _, current) = rex_with_a_stale_tag(&mut client).await;
    for method in [Method::GET, Method::HEAD] {
        for if_none_match in [
            current.clone(),
            format!("W/{current}"),
            format!("{stale}, {current}"),
            "*".to_owned(),
        ] {
            let headers = [("if-none-match", if_none_match.as_str())];
            let reply = client
                .send_with(method.clone(), "/v1/pets/1", &headers, Bytes::new())
                .await;
            assert_eq!(
                (reply.status, &reply.body[..]),
                (304, &b""[..]),
                "{if_none_match}"
            );
            assert_eq!(reply.etag(), current);
            assert_deprecation_headers(&reply);
        }
    }
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn if_none_match_without_the_current_tag_gets_the_pet() {
    let server = Server::start();
    let mut client = server.h1().await;
    let (stale, pet, current) = rex_with_a_stale_tag(&mut client).await;
    for if_none_match in [stale.as_str(), r#""other""#] {
        let reply = client
            .send_with(
                Method::GET,
                "/v1/pets/1",
                &[("if-none-match", if_none_match)],
                Bytes::new(),
            )
            .await;
        assert_eq!((reply.status, reply.json()), (200, pet.clone()));
        assert_eq!(reply.etag(), current);
        assert_deprecation_headers(&reply);
    }
    server.stop();
}

/// Sends `count` requests at once over one HTTP/2 connection, request `i` made by `request(i)`
/// as (method, extra headers, body), and returns the answers in order.
async fn at_once(
    client: &Client,
    path: &str,
    count: usize,
    request: impl Fn(usize) -> (Method, Vec<(String, String)>, String),
) -> Vec<Reply> {
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..count {
        let mut client = client.share();
        let (method, headers, body) = request(i);
        let path = path.to_owned();
        tasks.spawn(async move {
            let headers: Vec<(&str, &str)> = headers
                .iter()
                .map(|(name, value)| (name.as_str(), value.as_str()))
                .collect();
            (i, client.send_with(method, &path, &headers, body).await)
        });
    }
    let mut replies = tasks.join_all().await;
    replies.sort_by_key(|(i, _)| *i);
    replies.into_iter().map(|(_, reply)| reply).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn of_concurrent_patches_with_the_same_if_match_exactly_one_wins() {
    let server = Server::start();
    let mut client = server.h2().await;
    let etag = create_rex(&mut client).await.etag().to_owned();
    let replies = at_once(&client, "/v1/pets/1", 8, |i| {
        let headers = vec![
            ("content-type".into(), "application/merge-patch+json".into()),
            ("if-match".into(), etag.clone()),
        ];
        (Method::PATCH, headers, format!(r#"{{"name":"racer-{i}"}}"#))
    })
    .await;
    let (winners, losers): (Vec<&Reply>, Vec<&Reply>) =
        replies.iter().partition(|reply| reply.status == 200);
    assert_eq!(winners.len(), 1, "{replies:?}");
    for loser in losers {
        loser.assert_error(412, "precondition_failed", STALE);
    }
    let stored = client.get("/v1/pets/1").await;
    assert_eq!(
        (stored.json(), stored.etag()),
        (winners[0].json(), winners[0].etag())
    );
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn of_concurrent_deletes_with_the_same_if_match_exactly_one_wins() {
    let server = Server::start();
    let mut client = server.h2().await;
    let etag = create_rex(&mut client).await.etag().to_owned();
    let replies = at_once(&client, "/v1/pets/1", 8, |_| {
        (
            Method::DELETE,
            vec![("if-match".into(), etag.clone())],
            String::new(),
        )
    })
    .await;
    let (winners, losers): (Vec<&Reply>, Vec<&Reply>) =
        replies.iter().partition(|reply| reply.status == 204);
    assert_eq!(winners.len(), 1, "{replies:?}");
    // A loser that comes after the delete finds no pet at all, which is a 404.
    for loser in losers {
        match loser.status {
            404 => loser.assert_error(404, "not_found", "no pet has id 1"),
            _ => loser.assert_error(412, "precondition_failed", STALE),
        }
    }
    assert_eq!(client.get("/v1/pets/1").await.status, 404);
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn after_concurrent_status_patches_each_pet_is_listed_under_its_status_only() {
    let server = Server::start();
    let ids = create_many(&server, 30, |_| Some("available")).await;
    let mut client = server.h2().await;
    let statuses = [r#""available""#, r#""pending""#, r#""sold""#, "null"];
    // 8 writers at once, 40 patches each, several of them on the same pet at a time.
    let mut tasks = tokio::task::JoinSet::new();
    for writer in 0..8usize {
        let mut client = client.share();
        let ids = ids.clone();
        tasks.spawn(async move {
            for step in 0..40usize {
                let id = ids[(writer * 7 + step * 13) % ids.len()];
                let status = statuses[(writer + step) % 4];
                let reply = client
                    .patch_json(
                        &format!("/v1/pets/{id}"),
                        &format!(r#"{{"status":{status}}}"#),
                    )
                    .await;
                assert_eq!(reply.status, 200, "{:?}", reply.body);
            }
        });
    }
    tasks.join_all().await;

    let mut current = Vec::new();
    for id in &ids {
        current.push(client.get(&format!("/v1/pets/{id}")).await.json());
    }
    for status in ["available", "pending", "sold"] {
        let listed: Vec<i64> = client
            .list_all(&format!("/v1/pets?status={status}&limit=7"))
            .await
            .iter()
            .map(|pet| pet["id"].as_i64().expect("id"))
            .collect();
        assert!(
            listed.windows(2).all(|w| w[0] < w[1]),
            "{status}: {listed:?}"
        );
        let expected: BTreeSet<i64> = current
            .iter()
            .filter(|pet| pet["status"] == status)
            .map(|pet| pet["id"].as_i64().expect("id"))
            .collect();
        assert_eq!(
            listed.into_iter().collect::<BTreeSet<_>>(),
            expected,
            "{status}"
        );
    }
    server.stop();
}
