//! Finding pets by name over HTTP (issue 40): `q` and `sort` on listPets and listOrders, their
//! next links and cursors, the 400s of a bad `q`, `sort` or foreign cursor, and the indexes
//! after a SIGKILL (checked by `petstore check`, then served by the restarted server). The
//! rules of every combination of filters walked against a model are the store suite's.

use serde_json::Value;

use crate::support::{Client, Server};

/// The names of every pet `path` lists, following its next links.
async fn names(client: &mut Client, path: &str) -> Vec<String> {
    let pets = client.list_all(path).await;
    pets.iter()
        .map(|pet| pet["name"].as_str().expect("a name").to_owned())
        .collect()
}

async fn create_named(client: &mut Client, names: &[&str]) -> Vec<Value> {
    let mut pets = Vec::new();
    for (n, name) in names.iter().enumerate() {
        let body = serde_json::json!({"name": name, "categoryId": n % 2, "status": "available"});
        pets.push(client.create(&body.to_string()).await);
    }
    pets
}

const NAMES: &[&str] = &["Bella", "Sir Belvedere", "Zoë", "Max", "belle", "Zoe-Rose"];

#[tokio::test(flavor = "multi_thread")]
async fn q_finds_pets_by_the_start_of_any_word_ignoring_case_and_accents_in_every_order() {
    let server = Server::start();
    let mut client = server.h2().await;
    create_named(&mut client, NAMES).await;
    for (query, want) in [
        ("q=bel", &["Bella", "Sir Belvedere", "belle"][..]),
        ("q=BEL&sort=-id", &["belle", "Sir Belvedere", "Bella"]),
        ("q=bel&sort=name", &["Bella", "belle", "Sir Belvedere"]),
        ("q=sir%20bel", &["Sir Belvedere"]),
        ("q=sir+bel", &["Sir Belvedere"]),
        ("q=zoe", &["Zoë", "Zoe-Rose"]),
        ("q=Zo%C3%AB&sort=name", &["Zoë", "Zoe-Rose"]),
        ("q=rose", &["Zoe-Rose"]),
        ("q=oe", &[]),
        ("q=bel&categoryId=1", &["Sir Belvedere"]),
        ("q=bel&status=sold", &[]),
        (
            "q=",
            &["Bella", "Sir Belvedere", "Zoë", "Max", "belle", "Zoe-Rose"],
        ),
        (
            "sort=name",
            &["Bella", "belle", "Max", "Sir Belvedere", "Zoë", "Zoe-Rose"],
        ),
        (
            "sort=-id",
            &["Zoe-Rose", "belle", "Max", "Zoë", "Sir Belvedere", "Bella"],
        ),
    ] {
        for limit in ["", "&limit=1"] {
            let path = format!("/v1/pets?{query}{limit}");
            assert_eq!(names(&mut client, &path).await, want, "{path}");
        }
    }
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_next_link_keeps_q_and_sort_and_a_cursor_fits_only_its_own() {
    let server = Server::start();
    let mut client = server.h1().await;
    create_named(&mut client, NAMES).await;
    let first = client.get("/v1/pets?q=bel&sort=name&limit=1").await;
    assert_eq!(first.status, 200);
    let next = first.next_link().expect("more pets match");
    assert!(
        next.starts_with("/v1/pets?limit=1&q=bel&sort=name&cursor="),
        "{next}"
    );
    let cursor = next.rsplit_once("cursor=").expect("a cursor").1.to_owned();
    assert!(
        cursor
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
        "{cursor}"
    );
    let second = client.get(&next).await;
    assert_eq!(second.pets()[0]["name"], "belle");
    for (path, message) in [
        (
            format!("/v1/pets?q=zoe&sort=name&limit=1&cursor={cursor}"),
            "cursor belongs to a list with another q",
        ),
        (
            format!("/v1/pets?q=bel&limit=1&cursor={cursor}"),
            "cursor belongs to a list with another sort",
        ),
    ] {
        client
            .get(&path)
            .await
            .assert_error(400, "invalid_cursor", message);
    }
    // The same search spelled otherwise is the same search.
    let again = client
        .get(&format!("/v1/pets?q=BEL&sort=name&limit=1&cursor={cursor}"))
        .await;
    assert_eq!(again.status, 200, "{:?}", again.body);
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bad_q_or_sort_is_a_400_naming_the_parameter() {
    let server = Server::start();
    let mut client = server.h1().await;
    const Q: &str = "q must be at most 100 characters and 8 words (a word: letters and digits)";
    let long = "b".repeat(101);
    let many = "a+".repeat(9);
    for (path, message) in [
        (format!("/v1/pets?q={long}"), Q),
        (format!("/v1/pets?q={many}"), Q),
        (
            "/v1/pets?q=a&q=b".to_owned(),
            "q must be given at most once",
        ),
        (
            "/v1/pets?sort=NAME".to_owned(),
            "sort must be one of id, -id, name",
        ),
        (
            "/v1/pets?sort=".to_owned(),
            "sort must be one of id, -id, name",
        ),
        (
            "/v1/store/orders?sort=name".to_owned(),
            "sort must be one of id, -id",
        ),
        (format!("/v1/store/orders?q={long}"), Q),
    ] {
        client
            .get(&path)
            .await
            .assert_error(400, "invalid_parameter", message);
    }
    let fine = client.get(&format!("/v1/pets?q={}", "b".repeat(100))).await;
    assert_eq!((fine.status, fine.pets()), (200, vec![]));
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn orders_are_found_by_their_pet_s_name_newest_first() {
    let server = Server::start();
    let mut client = server.h1().await;
    let pets = create_named(&mut client, NAMES).await;
    let mut orders = Vec::new();
    for pet in &pets {
        let body = serde_json::json!({"petId": pet["id"]});
        let reply = client
            .post_json("/v1/store/orders", &body.to_string())
            .await;
        assert_eq!(reply.status, 201, "{:?}", reply.body);
        orders.push(reply.json()["id"].as_i64().expect("an id"));
    }
    let ids = |replies: Vec<Value>| -> Vec<i64> {
        replies
            .iter()
            .map(|o| o["id"].as_i64().expect("id"))
            .collect()
    };
    let bel = vec![orders[0], orders[1], orders[4]];
    assert_eq!(
        ids(client.list_all("/v1/store/orders?q=bel&limit=1").await),
        bel
    );
    let newest: Vec<i64> = bel.iter().rev().copied().collect();
    assert_eq!(
        ids(client
            .list_all("/v1/store/orders?q=bel&sort=-id&limit=2")
            .await),
        newest
    );
    let pet = pets[2]["id"].as_i64().expect("id");
    assert_eq!(
        ids(client
            .list_all(&format!("/v1/store/orders?q=zoe&petId={pet}"))
            .await),
        vec![orders[2]]
    );
    assert_eq!(
        ids(client
            .list_all("/v1/store/orders?q=bel&status=completed")
            .await),
        Vec::<i64>::new()
    );
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn after_a_sigkill_mid_renames_the_indexes_check_clean_and_find_every_acknowledged_name() {
    let server = Server::start();
    let mut client = server.h2().await;
    let pets = create_named(&mut client, NAMES).await;
    let path = |pet: &Value| format!("/v1/pets/{}", pet["id"]);
    let renamed = client
        .patch_json(&path(&pets[3]), r#"{"name":"Belinda"}"#)
        .await;
    assert_eq!(renamed.status, 200, "{:?}", renamed.body);
    assert_eq!(client.delete(&path(&pets[0])).await.status, 204);
    let dir = server.kill();
    let crashed = dir.path().join("pets.redb");
    let (code, stdout, stderr) =
        crate::support::run(&["check".as_ref(), "--db".as_ref(), crashed.as_os_str()]);
    assert_eq!(code, Some(0), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("pets: 5 "), "{stdout}");
    let server = Server::start_after_crash(dir);
    let mut client = server.h1().await;
    assert_eq!(
        names(&mut client, "/v1/pets?q=bel&sort=name").await,
        ["Belinda", "belle", "Sir Belvedere"]
    );
    assert_eq!(
        names(&mut client, "/v1/pets?q=max").await,
        Vec::<String>::new()
    );
    server.stop();
}
