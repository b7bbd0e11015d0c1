//! The pet operations: the spec's `list_pets`, `create_pet`, `get_pet` (deprecated, with its
//! deprecation headers), and this server's `patch_pet` and `delete_pet`. Every answer with one
//! pet carries its ETag; listPets links to its next page and says where the event feed stood.

use std::time::Duration;

use hyper::StatusCode;
use hyper::body::Incoming;
use hyper::header::{HeaderMap, HeaderName, HeaderValue, IF_NONE_MATCH, LINK};
use sha2::{Digest, Sha256};

use super::{
    Reply, claim_idempotency_key, content_type, etag_value, path_id, precondition, query_error,
    read_body,
};
use crate::auth::Caller;
use crate::conditional;
use crate::error::Error;
use crate::pet::{NewPet, PetId, PetPatch};
use crate::query::{self, ListQuery, PetStart};
use crate::store::ops::{DeletePet, PatchPet};
use crate::store::{After, PageQuery, Store, StoredPet};

/// On every listPets answer: the event feed's position at the page's read snapshot.
const EVENTS_CURSOR: HeaderName = HeaderName::from_static("events-cursor");

/// `GET /v1/pets` (listPets): a page, and a `Link` to the next one when more pets matched.
pub async fn list_pets(store: &Store, query: Option<&str>) -> Result<Reply, Error> {
    let query = ListQuery::parse(query.unwrap_or_default()).map_err(query_error)?;
    let filters = &query.filters;
    let page = store
        .find(PageQuery {
            status: filters.status,
            category: filters.category,
            search: filters.search(),
            sort: filters.sort.unwrap_or_default(),
            after: query.after.clone().map(|at| After {
                id: at.id,
                key: at.key,
            }),
            limit: query.limit,
        })
        .await?;
    let events = HeaderValue::try_from(page.events.cursor())
        .expect("a cursor of hex digits is a valid header value");
    let mut reply = Reply::ok(page.json);
    reply.headers.push((EVENTS_CURSOR, events));
    let last = page.last_id.map(|id| PetStart {
        id,
        key: page.last_key,
    });
    reply.link_next((page.more, last), "/v1/pets", |last, out| {
        query.next_into(last, out)
    });
    Ok(reply)
}

/// `POST /v1/pets` (createPet): 201 with the stored pet, once it is durably committed; with
/// an Idempotency-Key, the first answer again for a retry.
pub async fn create_pet(
    store: &Store,
    caller: &Caller,
    headers: &HeaderMap,
    body: Incoming,
    body_timeout: Duration,
) -> Result<Reply, Error> {
    let claim = claim_idempotency_key(store, caller, headers)?;
    let body = read_body(headers, body, body_timeout).await?;
    if !query::is_json(content_type(headers)) {
        return Err(Error::UnsupportedMediaType);
    }
    let pet = NewPet::from_json(&body).map_err(|e| Error::InvalidBody(e.0))?;
    // Decision: the same pet is the same request, however its JSON was written.
    let key = claim.map(|claim| claim.for_body(Sha256::digest(pet.canonical_json()).into()));
    let created = store.create(pet, key).await?;
    let id = created.pet.id;
    Ok(reply(StatusCode::CREATED, created.pet)
        .located("/v1/pets/", id)
        .replayed(created.replayed))
}

/// `GET /v1/pets/{petId}` (getPet, deprecated): the pet with its ETag, or 304 when
/// `If-None-Match` names the current one. The caller adds `deprecation_headers`.
pub async fn get_pet(store: &Store, raw_id: &str, headers: &HeaderMap) -> Result<Reply, Error> {
    let id = pet_id(raw_id)?;
    let pet = store.get(id).await?.ok_or_else(|| not_found(id))?;
    let sent = headers
        .get_all(IF_NONE_MATCH)
        .iter()
        .map(HeaderValue::as_bytes);
    if conditional::none_match(sent, id, pet.revision) {
        // RFC 9110 15.4.5: a 304 carries the ETag the 200 would have.
        return Ok(Reply::empty(StatusCode::NOT_MODIFIED, Some(etag(&pet))));
    }
    Ok(reply(StatusCode::OK, pet))
}

/// `PATCH /v1/pets/{petId}` (patchPet): applies a JSON Merge Patch, if `If-Match` allows;
/// 200 with the changed pet and its new ETag.
pub async fn patch_pet(
    store: &Store,
    raw_id: &str,
    headers: &HeaderMap,
    body: Incoming,
    body_timeout: Duration,
) -> Result<Reply, Error> {
    let id = pet_id(raw_id)?;
    let body = read_body(headers, body, body_timeout).await?;
    if !query::is_merge_patch(content_type(headers)) {
        return Err(Error::UnsupportedPatchType);
    }
    let patch = PetPatch::from_json(&body).map_err(|e| Error::InvalidBody(e.0))?;
    let precondition = precondition(headers, id);
    let pet = store
        .write(PatchPet {
            id,
            patch,
            precondition,
        })
        .await?;
    Ok(reply(StatusCode::OK, pet))
}

/// `DELETE /v1/pets/{petId}` (deletePet): 204 once the pet is gone, if `If-Match` allows.
pub async fn delete_pet(store: &Store, raw_id: &str, headers: &HeaderMap) -> Result<Reply, Error> {
    let id = pet_id(raw_id)?;
    let precondition = precondition(headers, id);
    store.write(DeletePet { id, precondition }).await?;
    Ok(Reply::empty(StatusCode::NO_CONTENT, None))
}

/// A 200 (or `status`) carrying one pet, with its ETag.
fn reply(status: StatusCode, pet: StoredPet) -> Reply {
    let etag = etag(&pet);
    Reply::tagged(status, pet.json, Some(etag))
}

fn pet_id(raw_id: &str) -> Result<PetId, Error> {
    path_id("petId", raw_id)
}

fn not_found(id: PetId) -> Error {
    Error::NotFound(format!("no pet has id {id}"))
}

fn etag(pet: &StoredPet) -> HeaderValue {
    etag_value(conditional::etag(pet.id, pet.revision))
}

/// Headers on every getPet answer: it is deprecated and goes away on 5 December 2030.
pub fn deprecation_headers() -> [(HeaderName, HeaderValue); 3] {
    // Constants, so that the names and values are checked once at compile time rather than
    // on every call.
    // RFC 9745: Deprecation is an sf-date; the operation has been deprecated since this
    // server's first release, 2026-11-22.
    const DEPRECATION: HeaderName = HeaderName::from_static("deprecation");
    const DEPRECATED_SINCE: HeaderValue = HeaderValue::from_static("@1795305600");
    // RFC 8594: Sunset is an HTTP-date.
    const SUNSET: HeaderName = HeaderName::from_static("sunset");
    const SUNSET_AT: HeaderValue = HeaderValue::from_static("Thu, 05 Dec 2030 00:00:00 GMT");
    // spec 4.3: clients are directed to listPets with its status filter.
    const SUCCESSOR: HeaderValue =
        HeaderValue::from_static(r#"</v1/pets>; rel="successor-version""#);
    [
        (DEPRECATION, DEPRECATED_SINCE),
        (SUNSET, SUNSET_AT),
        (LINK, SUCCESSOR),
    ]
}
