//! Categories (issue 29, `docs/orders.md`, "Categories"), on the real server: create, get,
//! rename and delete; the name rule (1 to 100 characters, no white space at either end, unique
//! ignoring case); `category_in_use` while a pet names one; listCategories by pages; pets of
//! one category (`GET /v1/pets?categoryId=N`, alone and with `status`) over several pages;
//! the feed's category events; read-only keys.

use bytes::Bytes;
use hyper::Method;
use hyper::header::CONTENT_TYPE;
use serde_json::{Value, json};

use crate::orders::{assert_forbidden, events_of, feed, id, send_as};
use crate::support::{Client, Options, Reply, Server, keys_with_a_reader, member_names};

const CATEGORIES: &str = "/v1/categories";
const PATCH_MEDIA_TYPE: &str =
    "request body must be sent as Content-Type: application/merge-patch+json or application/json";

async fn create(client: &mut Client, name: &str) -> Reply {
    client
        .post_json(CATEGORIES, &json!({ "name": name }).to_string())
        .await
}

/// Creates a category and returns it, asserting 201.
async fn created(client: &mut Client, name: &str) -> Value {
    let reply = create(client, name).await;
    assert_eq!(reply.status, 201, "{name}: {:?}", reply.body);
    reply.json()
}

async fn rename(client: &mut Client, category: i64, body: &str) -> Reply {
    client
        .patch_json(&format!("{CATEGORIES}/{category}"), body)
        .await
}

/// Asserts a 409 `name_taken` naming the name asked for.
fn taken(reply: &Reply, name: &str) {
    reply.assert_error(
        409,
        "name_taken",
        &format!("a category named {name:?} exists"),
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_category_is_created_read_renamed_listed_and_deleted() {
    let server = Server::start();
    let mut client = server.h1().await;
    let reply = create(&mut client, "Dogs").await;
    assert_eq!(reply.status, 201, "{:?}", reply.body);
    assert_eq!(reply.header("content-type"), Some("application/json"));
    assert_eq!(reply.header("location"), Some("/v1/categories/1"));
    assert_eq!(member_names(&reply.body), ["id", "name"]);
    let dogs = reply.json();
    assert_eq!(dogs, json!({"id": 1, "name": "Dogs"}));
    let cats = created(&mut client, "Cats").await;
    assert_eq!(cats, json!({"id": 2, "name": "Cats"}));

    let got = client.get(&format!("{CATEGORIES}/1")).await;
    assert_eq!((got.status, got.json()), (200, dogs.clone()));

    let renamed = rename(&mut client, 1, r#"{"name":"Hounds"}"#).await;
    assert_eq!(renamed.status, 200, "{:?}", renamed.body);
    assert_eq!(renamed.json(), json!({"id": 1, "name": "Hounds"}));
    // application/json is a merge patch too; an empty patch changes nothing.
    let headers = [("content-type", "application/json")];
    let again = client
        .send_with(
            Method::PATCH,
            "/v1/categories/1",
            &headers,
            r#"{"name":"Dogs"}"#,
        )
        .await;
    assert_eq!(
        (again.status, again.json()),
        (200, json!({"id": 1, "name": "Dogs"}))
    );
    let empty = rename(&mut client, 1, "{}").await;
    assert_eq!((empty.status, empty.json()), (200, dogs.clone()));
    let plain = client
        .send_with(
            Method::PATCH,
            "/v1/categories/1",
            &[("content-type", "text/plain")],
            r#"{"name":"Pups"}"#,
        )
        .await;
    plain.assert_error(415, "unsupported_media_type", PATCH_MEDIA_TYPE);

    assert_eq!(client.list_all(CATEGORIES).await, [dogs, cats.clone()]);
    let deleted = client.delete("/v1/categories/1").await;
    assert_eq!((deleted.status, &deleted.body[..]), (204, &b""[..]));
    let gone = "no category has id 1";
    client
        .get("/v1/categories/1")
        .await
        .assert_error(404, "not_found", gone);
    rename(&mut client, 1, r#"{"name":"x"}"#)
        .await
        .assert_error(404, "not_found", gone);
    client
        .delete("/v1/categories/1")
        .await
        .assert_error(404, "not_found", gone);
    assert_eq!(client.list_all(CATEGORIES).await, [cats]);
    // Ids are never given again.
    assert_eq!(id(&created(&mut client, "Birds").await), 3);
    client.get("/v1/categories/abc").await.assert_error(
        400,
        "invalid_parameter",
        "categoryId must be a decimal integer within int64",
    );
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_name_is_1_to_100_characters_without_outer_white_space_and_id_or_another_member_is_400() {
    let server = Server::start();
    let mut client = server.h2().await;
    let long = "a".repeat(101);
    let cases = [
        ("{}".to_owned(), "name is required"),
        (
            r#"{"name":""}"#.to_owned(),
            "name must not be empty or only white space",
        ),
        (
            r#"{"name":"  "}"#.to_owned(),
            "name must not be empty or only white space",
        ),
        (
            r#"{"name":" Dogs"}"#.to_owned(),
            "name must not begin or end with white space",
        ),
        (
            r#"{"name":"Dogs\n"}"#.to_owned(),
            "name must not begin or end with white space",
        ),
        (
            r#"{"name":"\u00d5\u0000"}"#.to_owned(),
            "name must not hold control characters (U+0000 to U+001F, U+007F to U+009F)",
        ),
        (
            r#"{"name":"Do\u0085gs"}"#.to_owned(),
            "name must not hold control characters (U+0000 to U+001F, U+007F to U+009F)",
        ),
        (
            format!(r#"{{"name":"{long}"}}"#),
            "name must be at most 100 characters long",
        ),
        (r#"{"name":1}"#.to_owned(), "name must be a string"),
        (r#"{"name":null}"#.to_owned(), "name must not be null"),
        (
            r#"{"name":"Dogs","id":1}"#.to_owned(),
            "id is assigned by the server: leave it out",
        ),
        (
            r#"{"name":"Dogs","kind":"mammal"}"#.to_owned(),
            r#"unknown member "kind": a category takes name"#,
        ),
        (
            r#"["Dogs"]"#.to_owned(),
            "request body must be a JSON object",
        ),
        (String::new(), "request body is required: a JSON object"),
    ];
    for (body, message) in &cases {
        client
            .post_json(CATEGORIES, body)
            .await
            .assert_error(400, "invalid_body", message);
    }
    let request = client
        .authed(Method::POST, CATEGORIES)
        .header(CONTENT_TYPE, "text/plain");
    client
        .send(request, Bytes::from_static(br#"{"name":"Dogs"}"#))
        .await
        .assert_error(
            415,
            "unsupported_media_type",
            "request body must be sent as Content-Type: application/json",
        );
    assert_eq!(client.list_all(CATEGORIES).await, Vec::<Value>::new());

    // One character and a hundred (not bytes: characters) are names.
    let hundred = "ü".repeat(100);
    for name in ["X", hundred.as_str()] {
        assert_eq!(created(&mut client, name).await["name"], name);
    }
    // A patch follows the same rule.
    for (body, message) in &cases[1..8] {
        rename(&mut client, 1, body)
            .await
            .assert_error(400, "invalid_body", message);
    }
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_name_taken_ignoring_case_is_409_name_taken_on_create_and_on_rename() {
    let server = Server::start();
    let mut client = server.h1().await;
    let dogs = created(&mut client, "Dogs").await;
    let cats = created(&mut client, "Cats").await;
    for name in ["Dogs", "dogs", "DOGS", "dOgS"] {
        taken(&create(&mut client, name).await, name);
        let body = json!({ "name": name }).to_string();
        taken(&rename(&mut client, id(&cats), &body).await, name);
    }
    assert_eq!(client.list_all(CATEGORIES).await, [dogs, cats.clone()]);
    // Once renamed, the old name is free again.
    let renamed = rename(&mut client, 1, r#"{"name":"Hounds"}"#).await;
    assert_eq!(renamed.status, 200, "{:?}", renamed.body);
    let dogs = rename(&mut client, id(&cats), r#"{"name":"dogs"}"#).await;
    assert_eq!(
        (dogs.status, dogs.json()),
        (200, json!({"id": cats["id"], "name": "dogs"}))
    );
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_category_a_pet_names_is_409_category_in_use_until_no_pet_names_it() {
    let server = Server::start();
    let mut client = server.h2().await;
    let dogs = id(&created(&mut client, "Dogs").await);
    let in_use = format!("pets name category {dogs}: move them to another category first");
    let rex = client
        .create(&format!(r#"{{"name":"Rex","categoryId":{dogs}}}"#))
        .await;
    let fido = client
        .create(&format!(r#"{{"name":"Fido","categoryId":{dogs}}}"#))
        .await;
    let path = format!("{CATEGORIES}/{dogs}");
    client
        .delete(&path)
        .await
        .assert_error(409, "category_in_use", &in_use);
    let moved = client
        .patch_json(&format!("/v1/pets/{}", id(&rex)), r#"{"categoryId":99}"#)
        .await;
    assert_eq!(moved.status, 200, "{:?}", moved.body);
    client
        .delete(&path)
        .await
        .assert_error(409, "category_in_use", &in_use);
    let gone = client.delete(&format!("/v1/pets/{}", id(&fido))).await;
    assert_eq!(gone.status, 204);
    assert_eq!(client.delete(&path).await.status, 204);
    // A pet may still name a category that does not exist.
    let stray = client
        .create(&format!(r#"{{"name":"Stray","categoryId":{dogs}}}"#))
        .await;
    assert_eq!(stray["categoryId"], dogs);
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn categories_list_in_id_order_by_pages_and_refuse_a_bad_limit_or_cursor() {
    let server = Server::start();
    let mut client = server.h1().await;
    let mut all = Vec::new();
    for i in 0..7 {
        all.push(created(&mut client, &format!("kind {i}")).await);
    }
    let first = client.get(&format!("{CATEGORIES}?limit=3")).await;
    assert_eq!(first.status, 200, "{:?}", first.body);
    assert_eq!(first.pets(), all[..3]);
    assert!(first.next_link().is_some());
    assert_eq!(client.list_all(&format!("{CATEGORIES}?limit=3")).await, all);
    assert_eq!(client.list_all(&format!("{CATEGORIES}?limit=1")).await, all);
    let whole = client.get(CATEGORIES).await;
    assert_eq!((whole.pets(), whole.next_link()), (all.clone(), None));
    for limit in ["0", "101", "x"] {
        client
            .get(&format!("{CATEGORIES}?limit={limit}"))
            .await
            .assert_error(
                400,
                "invalid_parameter",
                "limit must be an integer from 1 to 100",
            );
    }
    client
        .get(&format!("{CATEGORIES}?cursor=not-a-cursor"))
        .await
        .assert_error(
            400,
            "invalid_cursor",
            "cursor is not valid: pass the cursor of a next link unchanged",
        );
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn pets_of_one_category_list_alone_or_with_a_status_over_several_pages() {
    const STATUSES: [Option<&str>; 4] = [Some("available"), None, Some("pending"), Some("sold")];
    let server = Server::start();
    let mut client = server.h2().await;
    let mut pets = Vec::new();
    for i in 0..40 {
        let mut body = json!({"name": format!("pet-{i}"), "categoryId": i % 3 + 1});
        if let Some(status) = STATUSES[i % 4] {
            body["status"] = status.into();
        }
        pets.push(client.create(&body.to_string()).await);
    }
    let of = |category: i64, status: Option<&str>| -> Vec<Value> {
        pets.iter()
            .filter(|pet| pet["categoryId"] == category)
            .filter(|pet| status.is_none_or(|status| pet["status"] == status))
            .cloned()
            .collect()
    };
    for category in 1..=3 {
        let expected = of(category, None);
        assert!(expected.len() > 9, "several pages");
        for limit in [2, 5] {
            let path = format!("/v1/pets?categoryId={category}&limit={limit}");
            assert_eq!(client.list_all(&path).await, expected, "{path}");
        }
        for status in ["available", "pending", "sold"] {
            let expected = of(category, Some(status));
            assert!(expected.len() > 2, "several pages");
            let path = format!("/v1/pets?categoryId={category}&status={status}&limit=2");
            let first = client.get(&path).await;
            let next = first.next_link().expect("more than one page");
            assert!(
                next.contains(&format!("categoryId={category}"))
                    && next.contains(&format!("status={status}")),
                "the next link keeps the filters: {next}"
            );
            assert_eq!(client.list_all(&path).await, expected, "{path}");
            let path = format!("/v1/pets?status={status}&categoryId={category}");
            assert_eq!(client.list_all(&path).await, expected, "{path}");
        }
    }
    assert_eq!(
        client.list_all("/v1/pets?categoryId=7").await,
        Vec::<Value>::new()
    );

    // A cursor is good only for the filters it was made with.
    let next = client
        .get("/v1/pets?categoryId=1&limit=2")
        .await
        .next_link()
        .expect("more than one page");
    let cursor = next
        .split('&')
        .find_map(|pair| pair.strip_prefix("cursor="))
        .unwrap_or_else(|| panic!("a cursor in {next}"));
    let other_category = "cursor belongs to a list with another categoryId filter";
    for (other, message) in [
        (
            format!("/v1/pets?categoryId=2&limit=2&cursor={cursor}"),
            other_category,
        ),
        (format!("/v1/pets?limit=2&cursor={cursor}"), other_category),
        (
            format!("/v1/pets?categoryId=1&status=sold&limit=2&cursor={cursor}"),
            "cursor belongs to a list with another status filter",
        ),
    ] {
        client
            .get(&other)
            .await
            .assert_error(400, "invalid_cursor", message);
    }
    client.get("/v1/pets?categoryId=dogs").await.assert_error(
        400,
        "invalid_parameter",
        "categoryId must be a decimal integer within int64",
    );
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn every_category_change_is_an_event_with_the_category_after_it_and_type_filters_keep_them() {
    let server = Server::start();
    let mut client = server.h1().await;
    let dogs = created(&mut client, "Dogs").await;
    let renamed = rename(&mut client, id(&dogs), r#"{"name":"Hounds"}"#).await;
    assert_eq!(renamed.status, 200, "{:?}", renamed.body);
    let cats = created(&mut client, "Cats").await;
    assert_eq!(client.delete("/v1/categories/1").await.status, 204);

    let events = events_of(&mut client, "category.").await;
    let seen: Vec<(&Value, &Value, &Value)> = events
        .iter()
        .map(|event| (&event["type"], &event["categoryId"], &event["category"]))
        .collect();
    assert_eq!(
        seen,
        [
            (&json!("category.created"), &json!(1), &dogs),
            (&json!("category.updated"), &json!(1), &renamed.json()),
            (&json!("category.created"), &json!(2), &cats),
            (&json!("category.deleted"), &json!(1), &Value::Null),
        ]
    );
    let filtered = feed(
        &mut client,
        "/v1/events?type=category.created,category.deleted&limit=1",
    )
    .await;
    assert_eq!(
        filtered,
        [&events[0], &events[2], &events[3]].map(Clone::clone)
    );
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_read_only_key_reads_categories_and_gets_403_on_every_category_write() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (keys, reader) = keys_with_a_reader(dir.path());
    let server = Server::start_with(Options {
        api_keys: keys,
        ..Options::default()
    });
    let mut client = server.h2().await;
    let dogs = created(&mut client, "Dogs").await;
    for path in [CATEGORIES, "/v1/categories/1", "/v1/pets?categoryId=1"] {
        let reply = send_as(&mut client, &reader, Method::GET, path, "").await;
        assert_eq!(reply.status, 200, "{path}: {:?}", reply.body);
    }
    for (method, path, body) in [
        (Method::POST, CATEGORIES, r#"{"name":"Cats"}"#),
        (Method::PATCH, "/v1/categories/1", r#"{"name":"Cats"}"#),
        (Method::DELETE, "/v1/categories/1", ""),
    ] {
        assert_forbidden(
            &send_as(&mut client, &reader, method, path, body).await,
            "categories",
        );
    }
    assert_eq!(client.list_all(CATEGORIES).await, [dogs]);
    server.stop();
}
