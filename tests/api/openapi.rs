//! The OpenAPI document: served without a key, identical to `src/openapi.json`, and true to
//! what the server does.

use bytes::Bytes;
use hyper::Method;
use serde_json::Value;

use crate::operations::OPERATIONS;
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
fn the_document_describes_the_operations_and_bearer_security() {
    let doc = source();
    assert!(doc["openapi"].as_str().expect("version").starts_with("3."));
    assert_eq!(doc["servers"][0]["url"], "/v1");
    assert_eq!(
        doc["components"]["securitySchemes"]["bearerAuth"]["scheme"],
        "bearer"
    );
    for served in OPERATIONS {
        // `/healthz` is outside the document.
        let Some(id) = served.operation_id else {
            continue;
        };
        let path = served.template.strip_prefix("/v1").expect("under /v1");
        let method = served.method.as_str().to_ascii_lowercase();
        let operation = &doc["paths"][path][&method];
        assert_eq!(operation["operationId"], id, "{method} {path}");
        // Only getPet is deprecated.
        let deprecated = operation.get("deprecated") == Some(&Value::Bool(true));
        assert_eq!(deprecated, id == "getPet", "{id} deprecated");
        // The new operations are beta; the spec's three and the document itself carry no
        // stability marker.
        let beta = !["listPets", "createPet", "getPet", "getOpenApi"].contains(&id);
        let stability = operation.get("x-stability");
        if beta {
            assert_eq!(stability, Some(&"beta".into()), "{id}");
        } else {
            assert_eq!(stability, None, "{id}");
        }
    }
    let description = doc["info"]["description"].as_str().expect("a description");
    for named in [
        "patchPet",
        "deletePet",
        "listEvents",
        "placeOrder",
        "completeOrder",
        "cancelOrder",
        "getInventory",
        "createCategory",
        "categoryId",
        "pet_reserved",
        "beta",
        "Events-Cursor",
    ] {
        assert!(
            description.contains(named),
            "info.description names {named}"
        );
    }
    assert_eq!(
        doc["paths"]["/openapi.json"]["get"]["security"],
        serde_json::json!([])
    );
}

#[test]
fn the_document_describes_no_operation_the_server_does_not_serve() {
    let doc = source();
    let paths = doc["paths"].as_object().expect("paths");
    for (path, item) in paths {
        for (method, operation) in item.as_object().expect("a path item") {
            let id = operation["operationId"].as_str();
            let served = OPERATIONS.iter().any(|served| {
                served.template.strip_prefix("/v1") == Some(path)
                    && served.method.as_str().eq_ignore_ascii_case(method)
                    && served.operation_id == id
            });
            assert!(served, "{method} {path} ({id:?}) is not in OPERATIONS");
        }
    }
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
            &["200", "400", "401", "429", "431", "500", "503"][..],
        ),
        (
            "/pets",
            "post",
            &[
                "201", "400", "401", "403", "408", "409", "413", "415", "422", "429", "431", "500",
                "503",
            ][..],
        ),
        (
            "/pets/{petId}",
            "get",
            &[
                "200", "304", "400", "401", "404", "429", "431", "500", "503",
            ][..],
        ),
        // 409: a placed order holds the pet (pet_reserved).
        (
            "/pets/{petId}",
            "patch",
            &[
                "200", "400", "401", "403", "404", "408", "409", "412", "413", "415", "429", "431",
                "500", "503",
            ][..],
        ),
        (
            "/pets/{petId}",
            "delete",
            &[
                "204", "400", "401", "403", "404", "409", "412", "429", "431", "500", "503",
            ][..],
        ),
        (
            "/events",
            "get",
            &["200", "400", "401", "410", "429", "431", "500", "503"][..],
        ),
        (
            "/store/orders",
            "post",
            &[
                "201", "400", "401", "403", "404", "408", "409", "413", "415", "422", "429", "431",
                "500", "503",
            ][..],
        ),
        (
            "/store/orders",
            "get",
            &["200", "400", "401", "429", "431", "500", "503"][..],
        ),
        (
            "/store/orders/{orderId}",
            "get",
            &[
                "200", "304", "400", "401", "404", "429", "431", "500", "503",
            ][..],
        ),
        // No body is read: no 408, 413 or 415.
        (
            "/store/orders/{orderId}/complete",
            "post",
            &[
                "200", "400", "401", "403", "404", "409", "412", "429", "431", "500", "503",
            ][..],
        ),
        (
            "/store/orders/{orderId}/cancel",
            "post",
            &[
                "200", "400", "401", "403", "404", "409", "412", "429", "431", "500", "503",
            ][..],
        ),
        (
            "/store/inventory",
            "get",
            &["200", "400", "401", "429", "431", "500", "503"][..],
        ),
        (
            "/categories",
            "get",
            &["200", "400", "401", "429", "431", "500", "503"][..],
        ),
        (
            "/categories",
            "post",
            &[
                "201", "400", "401", "403", "408", "409", "413", "415", "429", "431", "500", "503",
            ][..],
        ),
        (
            "/categories/{categoryId}",
            "get",
            &["200", "400", "401", "404", "429", "431", "500", "503"][..],
        ),
        (
            "/categories/{categoryId}",
            "patch",
            &[
                "200", "400", "401", "403", "404", "408", "409", "413", "415", "429", "431", "500",
                "503",
            ][..],
        ),
        (
            "/categories/{categoryId}",
            "delete",
            &[
                "204", "400", "401", "403", "404", "409", "429", "431", "500", "503",
            ][..],
        ),
    ] {
        for status in statuses {
            assert!(documented(path, method, status), "{method} {path} {status}");
        }
        let all = doc["paths"][path][method]["responses"]
            .as_object()
            .expect("responses");
        for status in all.keys() {
            assert!(
                statuses.contains(&status.as_str()),
                "{method} {path} documents {status}, which it never answers"
            );
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
        "forbidden",
        "not_found",
        "method_not_allowed",
        "payload_too_large",
        "unsupported_media_type",
        "internal_error",
        "unavailable",
        "outcome_unknown",
        "invalid_cursor",
        "cursor_expired",
        "precondition_failed",
        "idempotency_key_reused",
        "idempotency_key_in_flight",
        "invalid_idempotency_key",
        "rate_limited",
        "pet_not_available",
        "pet_reserved",
        "invalid_transition",
        "name_taken",
        "category_in_use",
    ] {
        assert!(
            codes.as_array().expect("enum").contains(&code.into()),
            "{code}"
        );
    }
}

/// Follows one `$ref` (`#/components/...`) if `value` is one.
fn resolve<'a>(doc: &'a Value, value: &'a Value) -> &'a Value {
    match value.get("$ref").and_then(Value::as_str) {
        Some(reference) => {
            let pointer = reference.strip_prefix('#').expect("a local $ref");
            doc.pointer(pointer)
                .unwrap_or_else(|| panic!("{reference} resolves"))
        }
        None => value,
    }
}

/// The operation's parameter `name` in `location`, refs resolved.
fn parameter<'a>(doc: &'a Value, operation: &'a Value, location: &str, name: &str) -> &'a Value {
    operation["parameters"]
        .as_array()
        .expect("parameters")
        .iter()
        .map(|p| resolve(doc, p))
        .find(|p| p["in"] == location && p["name"] == name)
        .unwrap_or_else(|| panic!("{location} parameter {name}"))
}

/// Header `name` of `status` of the operation, refs resolved.
fn header<'a>(doc: &'a Value, operation: &'a Value, status: &str, name: &str) -> &'a Value {
    let response = resolve(doc, &operation["responses"][status]);
    let header = response["headers"]
        .get(name)
        .unwrap_or_else(|| panic!("{status} has header {name}"));
    resolve(doc, header)
}

#[test]
fn paging_versions_and_retries_are_documented() {
    let doc = source();
    let list = &doc["paths"]["/pets"]["get"];
    let create = &doc["paths"]["/pets"]["post"];
    let get = &doc["paths"]["/pets/{petId}"]["get"];
    let patch = &doc["paths"]["/pets/{petId}"]["patch"];
    let delete = &doc["paths"]["/pets/{petId}"]["delete"];

    // Paging: an optional opaque cursor; the next link only when more pets follow.
    let cursor = parameter(&doc, list, "query", "cursor");
    assert_eq!(cursor["required"], false);
    assert_eq!(cursor["schema"]["type"], "string");
    assert_eq!(header(&doc, list, "200", "Link")["required"], false);

    // Versions: a strong ETag on every answer carrying one pet, and the preconditions.
    for (operation, status) in [(create, "201"), (get, "200"), (get, "304"), (patch, "200")] {
        assert_eq!(header(&doc, operation, status, "ETag")["required"], true);
    }
    assert_eq!(
        parameter(&doc, get, "header", "If-None-Match")["required"],
        false
    );
    for operation in [patch, delete] {
        assert_eq!(
            parameter(&doc, operation, "header", "If-Match")["required"],
            false
        );
    }
    assert!(
        resolve(&doc, &get["responses"]["304"])
            .get("content")
            .is_none()
    );
    assert!(
        resolve(&doc, &delete["responses"]["204"])
            .get("content")
            .is_none()
    );
    for name in ["Deprecation", "Sunset", "Link"] {
        assert_eq!(header(&doc, get, "304", name)["required"], true, "{name}");
    }

    // patchPet: a merge patch of name, categoryId and a nullable status, nothing required.
    let bodies = patch["requestBody"]["content"]
        .as_object()
        .expect("patch bodies");
    let mut types: Vec<&str> = bodies.keys().map(String::as_str).collect();
    types.sort_unstable();
    assert_eq!(types, ["application/json", "application/merge-patch+json"]);
    let schema = resolve(&doc, &bodies["application/merge-patch+json"]["schema"]);
    assert!(
        schema.get("required").is_none(),
        "PetPatch requires nothing"
    );
    assert_eq!(schema["properties"]["name"]["type"], "string");
    assert_eq!(schema["properties"]["categoryId"]["format"], "int64");
    assert_eq!(schema["properties"]["status"]["nullable"], true);
    assert_eq!(header(&doc, patch, "415", "Accept-Patch")["required"], true);

    // Links carry the id and the ETag of an answer into the next request's If-Match.
    for (operation, status) in [(create, "201"), (get, "200"), (patch, "200")] {
        for (name, id) in [("PatchPet", "patchPet"), ("DeletePet", "deletePet")] {
            let link = &operation["responses"][status]["links"][name];
            assert_eq!(link["operationId"], id, "{status} {name}");
            assert_eq!(link["parameters"]["petId"], "$response.body#/id");
            assert_eq!(link["parameters"]["If-Match"], "$response.header.ETag");
        }
    }

    // Idempotency: the key, the replay marker and Retry-After.
    let key = parameter(&doc, create, "header", "Idempotency-Key");
    assert_eq!(key["required"], false);
    assert_eq!(key["schema"]["type"], "string");
    assert_eq!(
        header(&doc, create, "201", "Idempotent-Replayed")["required"],
        false
    );
    assert_eq!(header(&doc, create, "409", "Retry-After")["required"], true);
    for operation in [list, create, get, patch, delete] {
        assert_eq!(
            header(&doc, operation, "503", "Retry-After")["required"],
            false
        );
        // Rate limits: a 429 always says when to retry and which limit it was.
        for name in ["Retry-After", "RateLimit-Policy", "RateLimit"] {
            assert_eq!(
                header(&doc, operation, "429", name)["required"],
                true,
                "{name}"
            );
        }
    }
}

#[test]
fn orders_and_categories_are_documented_with_their_versions_filters_and_retries() {
    let doc = source();
    let place = &doc["paths"]["/store/orders"]["post"];
    let list = &doc["paths"]["/store/orders"]["get"];
    let get = &doc["paths"]["/store/orders/{orderId}"]["get"];
    let complete = &doc["paths"]["/store/orders/{orderId}/complete"]["post"];
    let cancel = &doc["paths"]["/store/orders/{orderId}/cancel"]["post"];

    // An order's answers carry its ETag; its moves take If-Match, getOrder If-None-Match.
    for (operation, status) in [
        (place, "201"),
        (get, "200"),
        (get, "304"),
        (complete, "200"),
        (cancel, "200"),
    ] {
        assert_eq!(header(&doc, operation, status, "ETag")["required"], true);
    }
    assert_eq!(
        parameter(&doc, get, "header", "If-None-Match")["required"],
        false
    );
    for operation in [complete, cancel] {
        assert_eq!(
            parameter(&doc, operation, "header", "If-Match")["required"],
            false
        );
        assert!(operation.get("requestBody").is_none(), "no body is read");
    }
    // A retry of placeOrder is createPet's; its 409 is a retry (in flight) or not (the pet).
    assert_eq!(
        parameter(&doc, place, "header", "Idempotency-Key"),
        parameter(
            &doc,
            &doc["paths"]["/pets"]["post"],
            "header",
            "Idempotency-Key"
        )
    );
    assert_eq!(header(&doc, place, "201", "Location")["required"], true);
    assert_eq!(
        header(&doc, place, "201", "Idempotent-Replayed")["required"],
        false
    );
    assert_eq!(header(&doc, place, "409", "Retry-After")["required"], false);
    let new_order = resolve(
        &doc,
        &place["requestBody"]["content"]["application/json"]["schema"],
    );
    assert_eq!(new_order["required"], serde_json::json!(["petId"]));
    assert_eq!(new_order["additionalProperties"], false);
    let order = resolve(
        &doc,
        &resolve(&doc, &get["responses"]["200"])["content"]["application/json"]["schema"],
    );
    assert_eq!(
        order["required"],
        serde_json::json!(["id", "petId", "status", "placedAt"])
    );
    assert_eq!(
        resolve(&doc, &order["properties"]["status"])["enum"],
        serde_json::json!(["placed", "completed", "cancelled", "expired"])
    );

    // Filters, a bound cursor and a next link on each list; categoryId on listPets.
    for (operation, names) in [
        (list, &["limit", "status", "petId", "cursor"][..]),
        (
            &doc["paths"]["/categories"]["get"],
            &["limit", "cursor"][..],
        ),
        (
            &doc["paths"]["/pets"]["get"],
            &["limit", "status", "categoryId", "cursor"][..],
        ),
    ] {
        for name in names {
            assert_eq!(
                parameter(&doc, operation, "query", name)["required"],
                false,
                "{name}"
            );
        }
        assert_eq!(header(&doc, operation, "200", "Link")["required"], false);
    }
    let category = parameter(&doc, &doc["paths"]["/pets"]["get"], "query", "categoryId");
    assert_eq!(category["schema"]["format"], "int64");

    // The inventory's five counts, in their order (the order of `required`: serde_json's map
    // sorts the properties).
    let inventory = resolve(
        &doc,
        &doc["paths"]["/store/inventory"]["get"]["responses"]["200"]["content"]["application/json"]
            ["schema"],
    );
    assert_eq!(
        inventory["required"],
        serde_json::json!(["available", "pending", "sold", "unset", "total"])
    );
    assert_eq!(
        inventory["properties"].as_object().map(|p| p.len()),
        Some(5)
    );

    // patchCategory takes a merge patch, as patchPet does, and says so on a 415.
    let patch = &doc["paths"]["/categories/{categoryId}"]["patch"];
    let mut types: Vec<&str> = patch["requestBody"]["content"]
        .as_object()
        .expect("patch bodies")
        .keys()
        .map(String::as_str)
        .collect();
    types.sort_unstable();
    assert_eq!(types, ["application/json", "application/merge-patch+json"]);
    assert_eq!(header(&doc, patch, "415", "Accept-Patch")["required"], true);
    for (path, schema) in [
        ("/categories", "NewCategory"),
        ("/categories/{categoryId}", "CategoryPatch"),
    ] {
        let method = if path == "/categories" {
            "post"
        } else {
            "patch"
        };
        let body = &doc["paths"][path][method]["requestBody"]["content"]["application/json"]["schema"]
            ["$ref"];
        assert_eq!(body, &format!("#/components/schemas/{schema}"));
    }
}

#[test]
fn the_event_feed_is_documented_as_pages_and_as_a_stream() {
    let doc = source();
    let events = &doc["paths"]["/events"]["get"];
    let list = &doc["paths"]["/pets"]["get"];

    // Parameters: a position, a page size of 1 to 1000, a comma-separated type filter, and the
    // header an EventSource resumes with.
    let after = parameter(&doc, events, "query", "after");
    assert_eq!(after["required"], false);
    let cursor = resolve(&doc, &after["schema"]);
    assert_eq!(cursor["type"], "string");
    assert_eq!(cursor["pattern"], "^[0-9a-f]{32}$");
    let limit = &parameter(&doc, events, "query", "limit")["schema"];
    assert_eq!(limit["minimum"], 1);
    assert_eq!(limit["maximum"], 1000);
    assert_eq!(limit["default"], 100);
    let filter = parameter(&doc, events, "query", "type");
    assert_eq!(filter["style"], "form");
    assert_eq!(filter["explode"], false);
    let types = &resolve(&doc, &filter["schema"]["items"])["enum"];
    assert_eq!(
        types,
        &serde_json::json!([
            "pet.created",
            "pet.updated",
            "pet.deleted",
            "order.placed",
            "order.completed",
            "order.cancelled",
            "order.expired",
            "category.created",
            "category.updated",
            "category.deleted"
        ])
    );
    assert_eq!(
        parameter(&doc, events, "header", "Last-Event-ID")["required"],
        false
    );

    // One 200, two media types: a JSON page of events, or the live stream.
    let ok = resolve(&doc, &events["responses"]["200"]);
    let mut media: Vec<&str> = ok["content"]
        .as_object()
        .expect("200 content")
        .keys()
        .map(String::as_str)
        .collect();
    media.sort_unstable();
    assert_eq!(media, ["application/json", "text/event-stream"]);
    let page = resolve(&doc, &ok["content"]["application/json"]["schema"]);
    assert_eq!(page["type"], "array");
    let event = resolve(&doc, &page["items"]);
    // Which members follow `at` depends on the type: a pet's, an order's or a category's.
    assert_eq!(
        event["required"],
        serde_json::json!(["cursor", "type", "at"])
    );
    assert_eq!(event["additionalProperties"], false);
    // serde_json's map sorts the members; their order on the wire is in the description.
    let members: Vec<&str> = event["properties"]
        .as_object()
        .expect("members")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        members,
        [
            "at",
            "category",
            "categoryId",
            "cursor",
            "etag",
            "order",
            "orderId",
            "pet",
            "petId",
            "type"
        ]
    );
    assert_eq!(
        event["properties"]["order"]["allOf"][0]["$ref"],
        "#/components/schemas/Order"
    );
    assert_eq!(event["properties"]["category"]["nullable"], true);
    assert_eq!(event["properties"]["at"]["format"], "date-time");
    assert_eq!(event["properties"]["petId"]["format"], "int64");
    assert_eq!(event["properties"]["pet"]["nullable"], true);
    assert_eq!(
        event["properties"]["pet"]["allOf"][0]["$ref"],
        "#/components/schemas/Pet"
    );
    let stream = &ok["content"]["text/event-stream"]["schema"];
    assert_eq!(stream["type"], "string");
    let frames = stream["description"]
        .as_str()
        .expect("the stream described");
    for named in [
        "retry: 2000",
        "bookmark",
        "id:",
        "event:",
        "data:",
        "Last-Event-ID",
    ] {
        assert!(
            frames.contains(named),
            "the stream's description names {named}"
        );
    }
    assert_eq!(header(&doc, events, "200", "Link")["required"], false);
    assert_eq!(
        header(&doc, events, "200", "Cache-Control")["schema"]["enum"],
        serde_json::json!(["no-store"])
    );

    // A position the store no longer has is 410 cursor_expired; a refused stream says when
    // to come back.
    let gone = resolve(&doc, &events["responses"]["410"]);
    assert!(
        gone["description"]
            .as_str()
            .expect("410")
            .contains("cursor_expired")
    );
    assert_eq!(
        gone["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/Error"
    );
    assert_eq!(
        header(&doc, events, "503", "Retry-After")["required"],
        false
    );
    for name in ["Retry-After", "RateLimit-Policy", "RateLimit"] {
        assert_eq!(
            header(&doc, events, "429", name)["required"],
            true,
            "{name}"
        );
    }

    // listPets: every page says where the feed stood in its snapshot.
    let position = header(&doc, list, "200", "Events-Cursor");
    assert_eq!(position["required"], true);
    assert_eq!(
        resolve(&doc, &position["schema"])["pattern"],
        "^[0-9a-f]{32}$"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_allow_header_lists_the_documented_methods() {
    // A 405 names exactly the methods the document has for the path, plus HEAD wherever GET is.
    let doc = source();
    let server = Server::start();
    let mut client = server.h1().await;
    for (path, probe) in [
        ("/pets", "/v1/pets"),
        ("/pets/{petId}", "/v1/pets/1"),
        ("/events", "/v1/events"),
        ("/store/orders", "/v1/store/orders"),
        ("/store/orders/{orderId}", "/v1/store/orders/1"),
        (
            "/store/orders/{orderId}/complete",
            "/v1/store/orders/1/complete",
        ),
        (
            "/store/orders/{orderId}/cancel",
            "/v1/store/orders/1/cancel",
        ),
        ("/store/inventory", "/v1/store/inventory"),
        ("/categories", "/v1/categories"),
        ("/categories/{categoryId}", "/v1/categories/1"),
    ] {
        let mut methods: Vec<String> = doc["paths"][path]
            .as_object()
            .expect("a path item")
            .keys()
            .filter(|key| ["get", "post", "put", "patch", "delete"].contains(&key.as_str()))
            .map(|method| method.to_uppercase())
            .collect();
        if methods.iter().any(|m| m == "GET") {
            methods.push("HEAD".to_owned());
        }
        let request = client.authed(Method::OPTIONS, probe);
        let reply = client.send(request, Bytes::new()).await;
        assert_eq!(reply.status, 405, "OPTIONS {probe}");
        let allow = reply.header("allow").expect("Allow");
        let mut allowed: Vec<&str> = allow.split(", ").collect();
        allowed.sort_unstable();
        methods.sort_unstable();
        assert_eq!(allowed, methods, "Allow of {probe}");
        let description = doc["info"]["description"].as_str().expect("a description");
        assert!(
            description.contains(&format!("`Allow: {allow}`")),
            "info.description gives `Allow: {allow}`"
        );
    }
    server.stop();
}

#[test]
fn the_category_name_pattern_spells_out_the_white_space_the_server_trims() {
    // The server trims with `str::trim` (Unicode White_Space) and refuses control characters
    // (`char::is_control`, general category Cc) anywhere; regex dialects disagree on `\s`
    // (Python's also takes U+001C..U+001F), so the pattern lists the characters by hand.
    let doc = source();
    let pattern = doc["components"]["schemas"]["Category"]["properties"]["name"]["pattern"]
        .as_str()
        .expect("a pattern");
    let ends = class(|c| c.is_whitespace() || c.is_control());
    let inside = class(char::is_control);
    assert_eq!(pattern, format!("^[^{ends}]([^{inside}]*[^{ends}])?$"));
}

/// The characters `take` takes, as a regex class's contents: runs as ranges.
fn class(take: impl Fn(char) -> bool) -> String {
    let mut class = String::new();
    let codes: Vec<u32> = (0..=0x10ffff_u32)
        .filter_map(char::from_u32)
        .filter(|c| take(*c))
        .map(u32::from)
        .collect();
    let mut at = 0;
    while at < codes.len() {
        let mut end = at;
        while end + 1 < codes.len() && codes[end + 1] == codes[end] + 1 {
            end += 1;
        }
        let one = |code: u32| format!("\\u{code:04x}");
        class.push_str(&one(codes[at]));
        if end > at {
            // A run of two is written as two, as a range would be as long.
            class.push_str(if end == at + 1 { "" } else { "-" });
            class.push_str(&one(codes[end]));
        }
        at = end + 1;
    }
    class
}
