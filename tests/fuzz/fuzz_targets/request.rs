//! Fuzzes the request parsing path: one input is split at its first three newlines into a
//! query string, a path id, a Content-Type value and a body, and each goes through the parser
//! the server runs on it. Any outcome but a panic is allowed; a value that parses must mean
//! what was written (the round trips below), as the property tests in src/ also check.

#![no_main]

use libfuzzer_sys::fuzz_target;

// src/ is a binary crate, but these modules are pure (serde, base64 and each other only), so
// the fuzz crate compiles the very files the server does; `query.rs` finds `pet`, `cursor`,
// `event` and `order` as `crate::pet` and so on, and `order` finds `body`.
#[allow(dead_code)]
#[path = "../../../src/body.rs"]
mod body;
#[allow(dead_code)]
#[path = "../../../src/cursor.rs"]
mod cursor;
#[allow(dead_code)]
#[path = "../../../src/event.rs"]
mod event;
#[allow(dead_code)]
#[path = "../../../src/order.rs"]
mod order;
#[allow(dead_code)]
#[path = "../../../src/pet.rs"]
mod pet;
#[allow(dead_code)]
#[path = "../../../src/query.rs"]
mod query;

use pet::NewPet;
use query::ListQuery;

fuzz_target!(|data: &[u8]| {
    let mut parts = data.splitn(4, |&b| b == b'\n');
    let mut text = || String::from_utf8_lossy(parts.next().unwrap_or_default()).into_owned();
    let (query, id, content_type) = (text(), text(), text());
    let body = parts.next().unwrap_or_default();

    if let Ok(list) = ListQuery::parse(&query) {
        assert!(
            (1..=100).contains(&list.limit),
            "{query:?} gave limit {}",
            list.limit
        );
        // A next link's query must read back as the same list, one page on.
        let mut link = String::new();
        list.next_into(i64::MAX, &mut link);
        let next = ListQuery::parse(&link).expect("a next query parses");
        assert_eq!(
            (next.limit, next.filters, next.after),
            (list.limit, list.filters, Some(i64::MAX))
        );
    }

    if let Ok(id_value) = query::parse_id("petId", &id) {
        assert_eq!(id.parse::<i64>().ok(), Some(id_value), "{id:?}");
        assert_eq!(query::parse_id("petId", &id_value.to_string()), Ok(id_value));
    }

    // The server passes only visible-ASCII header values (hyper's `to_str`); any text is
    // fuzzed here, a superset.
    if query::is_json(Some(&content_type)) {
        let essence = content_type.split(';').next().unwrap_or_default();
        assert!(
            essence.trim().eq_ignore_ascii_case("application/json"),
            "{content_type:?}"
        );
    }

    // The Content-Type line doubles as an Idempotency-Key value.
    if let Ok(key) = query::parse_idempotency_key(content_type.as_bytes()) {
        assert!((1..=255).contains(&key.len()), "{content_type:?}");
    }
    // A merge patch follows the NewPet rules on every member it has.
    if let Ok(patch) = pet::PetPatch::from_json(body) {
        if let Ok(new_pet) = NewPet::from_json(body) {
            assert_eq!(Some(&new_pet.name), patch.name.as_ref());
            assert_eq!(Some(new_pet.category_id), patch.category_id);
        }
    }

    if let Ok(new_pet) = NewPet::from_json(body) {
        // The stored form (the pet with an id) must read back as the same request, since the
        // id is an unknown key and unknown keys are ignored.
        let stored = new_pet.clone().into_pet(i64::MAX).to_json();
        assert_eq!(
            NewPet::from_json(&stored).as_ref(),
            Ok(&new_pet),
            "{body:?}"
        );
    }
});
