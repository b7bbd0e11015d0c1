//! listPets: page size, order, the status filter and its parameter errors.

use crate::support::{Server, create_many};

const STATUSES: [Option<&str>; 4] = [None, Some("available"), Some("pending"), Some("sold")];

#[tokio::test(flavor = "multi_thread")]
async fn an_empty_store_lists_an_empty_array() {
    let server = Server::start();
    let reply = server.h1().await.get("/v1/pets").await;
    assert_eq!((reply.status, &reply.body[..]), (200, &b"[]"[..]));
    assert_eq!(reply.header("content-type"), Some("application/json"));
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn without_limit_the_first_20_pets_come_in_ascending_id_order() {
    let server = Server::start();
    create_many(&server, 25, |_| None).await;
    let reply = server.h1().await.get("/v1/pets").await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.ids(), (1..=20).collect::<Vec<_>>());
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn limit_1_and_limit_100_bound_the_page() {
    let server = Server::start();
    create_many(&server, 105, |_| None).await;
    let mut client = server.h2().await;
    assert_eq!(client.get("/v1/pets?limit=1").await.ids(), [1]);
    assert_eq!(
        client.get("/v1/pets?limit=100").await.ids(),
        (1..=100).collect::<Vec<_>>()
    );
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn each_status_filter_returns_only_pets_with_that_status() {
    let server = Server::start();
    let ids = create_many(&server, 40, |i| STATUSES[i % 4]).await;
    let mut client = server.h2().await;
    for (offset, status) in STATUSES.iter().enumerate().skip(1) {
        let status = status.expect("a status");
        let reply = client
            .get(&format!("/v1/pets?status={status}&limit=100"))
            .await;
        assert_eq!(reply.status, 200);
        let pets = reply.json();
        let pets = pets.as_array().expect("an array");
        assert!(
            pets.iter().all(|pet| pet["status"] == status),
            "{status}: {pets:?}"
        );
        // create_many gives pet i the name pet-i and status STATUSES[i % 4].
        let expected: Vec<String> = (0..40)
            .filter(|i| i % 4 == offset)
            .map(|i| format!("pet-{i}"))
            .collect();
        let mut names: Vec<String> = pets
            .iter()
            .map(|pet| pet["name"].as_str().expect("name").to_owned())
            .collect();
        names.sort();
        let mut expected_sorted = expected.clone();
        expected_sorted.sort();
        assert_eq!(names, expected_sorted, "{status}");
        let listed = reply.ids();
        assert!(
            listed.windows(2).all(|w| w[0] < w[1]),
            "ascending ids: {listed:?}"
        );
        assert!(listed.iter().all(|id| ids.contains(id)));
    }
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn the_status_filter_and_limit_combine() {
    let server = Server::start();
    create_many(&server, 40, |i| STATUSES[i % 4]).await;
    let reply = server.h1().await.get("/v1/pets?status=sold&limit=3").await;
    assert_eq!(reply.ids().len(), 3);
    assert!(
        reply
            .json()
            .as_array()
            .expect("array")
            .iter()
            .all(|pet| pet["status"] == "sold")
    );
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_limit_outside_1_to_100_or_not_an_integer_gets_400_naming_limit() {
    let server = Server::start();
    let mut client = server.h1().await;
    for value in [
        "0",
        "101",
        "-1",
        "abc",
        "1.5",
        "",
        "+5",
        "1e2",
        "99999999999999999999",
    ] {
        client
            .get(&format!("/v1/pets?limit={value}"))
            .await
            .assert_error(
                400,
                "invalid_parameter",
                "limit must be an integer from 1 to 100",
            );
    }
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_repeated_parameter_gets_400_naming_it() {
    let server = Server::start();
    let mut client = server.h1().await;
    client.get("/v1/pets?limit=5&limit=5").await.assert_error(
        400,
        "invalid_parameter",
        "limit must be given at most once",
    );
    client
        .get("/v1/pets?status=sold&status=pending")
        .await
        .assert_error(
            400,
            "invalid_parameter",
            "status must be given at most once",
        );
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unknown_status_gets_400_naming_status() {
    let server = Server::start();
    let mut client = server.h1().await;
    for value in ["SOLD", "lost", "", "sold%20"] {
        client
            .get(&format!("/v1/pets?status={value}"))
            .await
            .assert_error(
                400,
                "invalid_parameter",
                "status must be one of available, pending, sold",
            );
    }
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn unknown_query_parameters_are_ignored() {
    let server = Server::start();
    create_many(&server, 3, |_| None).await;
    let reply = server
        .h1()
        .await
        .get("/v1/pets?page=2&limit=2&order=desc")
        .await;
    assert_eq!(reply.ids(), [1, 2]);
    server.stop();
}
