//! The OpenAPI document: served without a key, identical to `src/openapi.json`, and true to
//! what the server does.

use bytes::Bytes;
use hyper::Method;
use serde_json::Value;

use crate::support::Server;

fn source() -> Value {
    let text = include_str!("../../src/openapi.json");
    serde_json::from_str(text).expect("src/openapi.json is JSON")
}

#[tokio::test(flavor = "multi_thread")]
async fn the_document_is_served_without_a_key_and_is_the_source_file() {
    let server = Server::start();
    let mut client = server.h1().await;
    let request = client.request(Method::GET, "/v1/openapi.json");
    let reply = client.send(request, Bytes::new()).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("content-type"), Some("application/json"));
    assert_eq!(reply.json(), source());
    server.stop();
}

#[test]
fn the_document_describes_the_three_operations_and_bearer_security() {
    let doc = source();
    assert!(doc["openapi"].as_str().expect("version").starts_with("3."));
    assert_eq!(doc["servers"][0]["url"], "/v1");
    assert_eq!(
        doc["components"]["securitySchemes"]["bearerAuth"]["scheme"],
        "bearer"
    );
    assert_eq!(doc["paths"]["/pets"]["get"]["operationId"], "listPets");
    assert_eq!(doc["paths"]["/pets"]["post"]["operationId"], "createPet");
    assert_eq!(
        doc["paths"]["/pets/{petId}"]["get"]["operationId"],
        "getPet"
    );
    assert_eq!(doc["paths"]["/pets/{petId}"]["get"]["deprecated"], true);
    assert_eq!(
        doc["paths"]["/openapi.json"]["get"]["security"],
        serde_json::json!([])
    );
}

#[test]
fn every_status_the_server_answers_is_documented_for_its_operation() {
    let doc = source();
    let documented = |path: &str, method: &str, status: &str| {
        doc["paths"][path][method]["responses"]
            .get(status)
            .is_some()
    };
    for (path, method, statuses) in [
        (
            "/pets",
            "get",
            &["200", "400", "401", "431", "500", "503"][..],
        ),
        (
            "/pets",
            "post",
            &[
                "201", "400", "401", "408", "413", "415", "431", "500", "503",
            ][..],
        ),
        (
            "/pets/{petId}",
            "get",
            &["200", "400", "401", "404", "431", "500", "503"][..],
        ),
    ] {
        for status in statuses {
            assert!(documented(path, method, status), "{method} {path} {status}");
        }
    }
    let codes = &doc["components"]["schemas"]["Error"]["properties"]["code"]["enum"];
    for code in [
        "invalid_request",
        "header_fields_too_large",
        "request_timeout",
        "invalid_parameter",
        "invalid_body",
        "unauthorized",
        "not_found",
        "method_not_allowed",
        "payload_too_large",
        "unsupported_media_type",
        "internal_error",
        "unavailable",
    ] {
        assert!(
            codes.as_array().expect("enum").contains(&code.into()),
            "{code}"
        );
    }
}
