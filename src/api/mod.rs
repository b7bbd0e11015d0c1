//! The operations: the spec's `list_pets`, `create_pet`, `get_pet`, this server's
//! `patch_pet` and `delete_pet`, plus the OpenAPI document and the health probe. Each checks
//! its input (with `query`, `conditional` and `pet`), calls the store and builds a `Reply` with
//! the operation's own headers (Link, Location, ETag). It knows no connections, TLS or tables.
//! Invariant: input is fully checked before the store is touched.

use std::time::Duration;

use bytes::Bytes;
use bytes::{BufMut, BytesMut};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper::StatusCode;
use hyper::body::Incoming;
use hyper::header::{
    ACCEPT, CACHE_CONTROL, CONTENT_LENGTH, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue,
    IF_MATCH, IF_NONE_MATCH, LINK, LOCATION,
};
use sha2::{Digest, Sha256};

use crate::auth::Caller;
use crate::conditional::{self, IfMatch};
use crate::error::Error;
use crate::feed::Feed;
use crate::pet::{NewPet, PetId, PetPatch};
use crate::query::{self, EventsQuery, InvalidQuery, ListQuery};
use crate::store::{EventQuery, Precondition, ReadError, Store, StoredPet};

/// Bodies larger than this are refused with 413.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

const OPENAPI: &str = include_str!("openapi.json");

/// draft-ietf-httpapi-idempotency-key-header-07.
const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");
/// Tells a client that a 201 answers an earlier request with its Idempotency-Key, as Stripe's
/// `Idempotent-Replayed` does.
const IDEMPOTENT_REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");
/// On every listPets answer: the event feed's position at the page's read snapshot.
const EVENTS_CURSOR: HeaderName = HeaderName::from_static("events-cursor");
/// WHATWG HTML 9.2: what an EventSource sends when it reconnects.
const LAST_EVENT_ID: HeaderName = HeaderName::from_static("last-event-id");
const X_ACCEL_BUFFERING: HeaderName = HeaderName::from_static("x-accel-buffering");
const NO_STORE: HeaderValue = HeaderValue::from_static("no-store");
const EVENT_STREAM: HeaderValue = HeaderValue::from_static("text/event-stream");

/// A successful answer: status, JSON body and the operation's extra headers.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub body: Bytes,
    /// The pet's ETag, on every answer that carries one pet or stands for it. Apart from the
    /// other headers, since nearly every answer with a pet has no other: the service keeps its
    /// place in the fields an answer starts with.
    pub etag: Option<HeaderValue>,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// An event stream's frames, sent as the body in place of `body` while they come.
    pub stream: Option<crate::feed::Frames>,
}

impl Reply {
    fn ok(body: Bytes) -> Reply {
        Reply {
            status: StatusCode::OK,
            body,
            etag: None,
            headers: Vec::new(),
            stream: None,
        }
    }

    /// A 200 (or `status`) carrying one pet, with its ETag.
    fn pet(status: StatusCode, pet: StoredPet) -> Reply {
        Reply {
            status,
            etag: Some(etag(&pet)),
            headers: Vec::new(),
            body: pet.json,
            stream: None,
        }
    }

    /// An answer without content: 204, or 304 with the ETag of the 200 it stands for.
    fn empty(status: StatusCode, etag: Option<HeaderValue>) -> Reply {
        Reply {
            status,
            body: Bytes::new(),
            etag,
            headers: Vec::new(),
            stream: None,
        }
    }
}

/// `GET /v1/pets` (listPets): a page, and a `Link` to the next one when more pets matched.
pub async fn list_pets(store: &Store, query: Option<&str>) -> Result<Reply, Error> {
    let query = ListQuery::parse(query.unwrap_or_default()).map_err(|e| match e {
        InvalidQuery::Parameter(e) => Error::InvalidParameter(e.0),
        InvalidQuery::Cursor(problem) => Error::InvalidCursor(problem),
    })?;
    let page = store
        .list(query.status, None, query.after, query.limit)
        .await?;
    let mut reply = Reply::ok(page.json);
    let events = HeaderValue::try_from(page.events.cursor())
        .expect("a cursor of hex digits is a valid header value");
    reply.headers.push((EVENTS_CURSOR, events));
    if page.more
        && let Some(last_id) = page.last_id
    {
        // RFC 8288; the target is relative to the server, as Location is.
        let mut link = String::with_capacity(80);
        link.push_str("</v1/pets?");
        query.next_into(last_id, &mut link);
        link.push_str(">; rel=\"next\"");
        let link = HeaderValue::try_from(link)
            .expect("a link of digits, names and base64url characters is a valid header value");
        reply.headers.push((LINK, link));
    }
    Ok(reply)
}

/// `GET /v1/events` (listEvents): a page of the feed as a JSON array, with a `Link` to the
/// position after it, always; or, when the client accepts `text/event-stream` (and did not
/// send HEAD), the feed live from that position.
pub async fn list_events(
    store: &Store,
    feed: &Feed,
    query: Option<&str>,
    headers: &HeaderMap,
    head: bool,
) -> Result<Reply, Error> {
    let streaming = !head && accepts_event_stream(headers);
    // A browser's EventSource reconnects to the URL it first opened, with the id it last got.
    let last_event_id = streaming
        .then(|| headers.get(LAST_EVENT_ID).and_then(|v| v.to_str().ok()))
        .flatten();
    let query =
        EventsQuery::parse(query.unwrap_or_default(), last_event_id).map_err(|e| match e {
            InvalidQuery::Parameter(e) => Error::InvalidParameter(e.0),
            InvalidQuery::Cursor(problem) => Error::InvalidCursor(problem),
        })?;
    let place = match streaming {
        true => Some(feed.place().ok_or(Error::SubscribersFull {
            max: feed.max_subscribers(),
        })?),
        false => None,
    };
    let read = EventQuery {
        after: query.after,
        types: query.types,
        limit: query.limit,
        // A filtered page looks at this many events at most, so that a rare type never makes
        // one request scan the whole feed; its next link goes on from where it stopped.
        scan: query.limit.saturating_mul(10).max(10_000),
    };
    let page = store.events(read).await.map_err(|e| match e {
        ReadError::Gone => Error::CursorExpired,
        ReadError::Store(e) => e.into(),
    })?;
    let mut reply = Reply::ok(Bytes::new());
    reply.headers.push((CACHE_CONTROL, NO_STORE));
    if let Some(place) = place {
        reply.headers.push((CONTENT_TYPE, EVENT_STREAM));
        // nginx buffers a proxied answer unless told not to: events would wait in it.
        reply
            .headers
            .push((X_ACCEL_BUFFERING, HeaderValue::from_static("no")));
        reply.stream = Some(feed.stream(place, page, query.types));
        return Ok(reply);
    }
    let mut array = BytesMut::with_capacity(
        64 + page
            .events
            .iter()
            .map(|e| e.pet.as_ref().map_or(0, Bytes::len) + 160)
            .sum::<usize>(),
    );
    array.put_u8(b'[');
    for (n, event) in page.events.iter().enumerate() {
        if n > 0 {
            array.put_u8(b',');
        }
        event.json_into(page.state.feed, &mut array);
    }
    array.put_u8(b']');
    reply.body = array.freeze();
    let mut link = String::with_capacity(120);
    link.push_str("</v1/events?");
    query.next_into(page.next_position(), &mut link);
    link.push_str(">; rel=\"next\"");
    let link = HeaderValue::try_from(link)
        .expect("a link of hex digits, digits and type names is a valid header value");
    reply.headers.push((LINK, link));
    Ok(reply)
}

/// Whether `Accept` lists `text/event-stream` (with any parameters, in any case).
fn accepts_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get_all(ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|range| {
            let essence = range.split(';').next().unwrap_or_default().trim();
            essence.eq_ignore_ascii_case("text/event-stream")
        })
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
    // Claimed before the body is read: a retry sent while this request is still arriving
    // gets 409, not a second pet.
    let claim = match idempotency_key(headers)? {
        Some(key) => Some(
            store.claim_key(
                // Scoped per API key: another client's identical key is another record.
                Sha256::new()
                    .chain_update(caller.key_hash)
                    .chain_update(key.as_bytes())
                    .finalize()
                    .into(),
            )?,
        ),
        None => None,
    };
    if claim.is_some() {
        tracing::debug!("idempotency key claimed");
    }
    let body = read_body(headers, body, body_timeout).await?;
    if !query::is_json(content_type(headers)) {
        return Err(Error::UnsupportedMediaType);
    }
    let pet = NewPet::from_json(&body).map_err(|e| Error::InvalidBody(e.0))?;
    // Decision: the same pet is the same request, however its JSON was written.
    let key = claim.map(|claim| claim.for_pet(Sha256::digest(pet.canonical_json()).into()));
    let created = store.create(pet, key).await?;
    let location = HeaderValue::try_from(format!("/v1/pets/{}", created.pet.id))
        .expect("a path of digits is a valid header value");
    let mut reply = Reply::pet(StatusCode::CREATED, created.pet);
    reply.headers.push((LOCATION, location));
    if created.replayed {
        reply
            .headers
            .push((IDEMPOTENT_REPLAYED, HeaderValue::from_static("true")));
    }
    Ok(reply)
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
    Ok(Reply::pet(StatusCode::OK, pet))
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
    let pet = store.patch(id, patch, precondition(headers, id)).await?;
    Ok(Reply::pet(StatusCode::OK, pet))
}

/// `DELETE /v1/pets/{petId}` (deletePet): 204 once the pet is gone, if `If-Match` allows.
pub async fn delete_pet(store: &Store, raw_id: &str, headers: &HeaderMap) -> Result<Reply, Error> {
    let id = pet_id(raw_id)?;
    store.delete(id, precondition(headers, id)).await?;
    Ok(Reply::empty(StatusCode::NO_CONTENT, None))
}

fn pet_id(raw_id: &str) -> Result<PetId, Error> {
    query::parse_pet_id(raw_id).map_err(|e| Error::InvalidParameter(e.0))
}

fn not_found(id: PetId) -> Error {
    Error::NotFound(format!("no pet has id {id}"))
}

fn etag(pet: &StoredPet) -> HeaderValue {
    HeaderValue::try_from(conditional::etag(pet.id, pet.revision))
        .expect("a quoted id and revision is a valid header value")
}

/// What `If-Match` asks of the pet, in the store's terms.
fn precondition(headers: &HeaderMap, id: PetId) -> Precondition {
    let sent = headers.get_all(IF_MATCH).iter().map(HeaderValue::as_bytes);
    match conditional::if_match(sent, id) {
        // `*` asks that the pet exist, which every change asks anyway.
        IfMatch::Any => Precondition::None,
        IfMatch::Revisions(revisions) => Precondition::RevisionIn(revisions),
    }
}

fn content_type(headers: &HeaderMap) -> Option<&str> {
    headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok())
}

/// The request's Idempotency-Key, if it sent one.
fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, Error> {
    let mut values = headers.get_all(IDEMPOTENCY_KEY).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(Error::InvalidIdempotencyKey(
            "Idempotency-Key must be given at most once",
        ));
    }
    query::parse_idempotency_key(value.as_bytes())
        .map(Some)
        .map_err(Error::InvalidIdempotencyKey)
}

/// Reads a request body whole, within `MAX_BODY_BYTES` and `body_timeout`. An empty body is
/// refused here, whatever its Content-Type says: there is nothing to be of a wrong type.
async fn read_body(
    headers: &HeaderMap,
    body: Incoming,
    body_timeout: Duration,
) -> Result<Bytes, Error> {
    let too_large = || Error::PayloadTooLarge {
        limit_bytes: MAX_BODY_BYTES,
    };
    // A declared length over the limit is refused before a byte of the body is read.
    let declared = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|length| length > MAX_BODY_BYTES as u64) {
        return Err(too_large());
    }
    // A body that trickles or stops holds a connection and a buffer; bound its whole arrival.
    let collected =
        tokio::time::timeout(body_timeout, Limited::new(body, MAX_BODY_BYTES).collect())
            .await
            .map_err(|_| Error::RequestTimeout {
                limit: body_timeout,
            })?;
    let body = collected
        .map_err(|e| {
            if e.is::<LengthLimitError>() {
                too_large()
            } else {
                // A body whose framing broke (a malformed chunk, the stream ending early):
                // nothing after it on the connection can be trusted.
                Error::InvalidRequest("the request body could not be read")
            }
        })?
        .to_bytes();
    if body.is_empty() {
        return Err(Error::InvalidBody(
            "request body is required: a JSON object".into(),
        ));
    }
    Ok(body)
}

/// What `/healthz` reports of the certificate beside the store (ACME's renewal state), handed
/// in by `main`; `None` from it while there is nothing to say.
pub type CertificateHealth = fn() -> Option<serde_json::Value>;

/// `GET /healthz`: 200 while the store answers a read, 503 otherwise.
pub async fn healthz(
    store: &Store,
    certificate: Option<CertificateHealth>,
) -> Result<Reply, Error> {
    store
        .check()
        .await
        .map_err(|e| Error::Unavailable(format!("health check: {e}")))?;
    match certificate.and_then(|health| health()) {
        None => Ok(Reply::ok(Bytes::from_static(br#"{"status":"ok"}"#))),
        // The store answers either way; an old certificate still serves while renewal fails.
        Some(certificate) => Ok(Reply::ok(Bytes::from(
            serde_json::json!({"status": "ok", "certificate": certificate}).to_string(),
        ))),
    }
}

/// `GET /v1/openapi.json`: the document describing this server.
pub fn openapi() -> Reply {
    Reply::ok(Bytes::from_static(OPENAPI.as_bytes()))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn healthz_is_ok_while_the_store_serves_and_503_once_it_is_closed() {
        let dir = tempfile::tempdir().expect("temp dir");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let location = crate::store::Location::Redb {
                path: dir.path().join("pets.redb"),
                cache_bytes: 1 << 20,
                shared: true,
            };
            let tuning = crate::store::Tuning {
                events_keep: crate::store::DEFAULT_EVENTS_KEEP,
                idempotency_ttl: Duration::from_secs(60),
                max_write_batch: crate::store::DEFAULT_MAX_WRITE_BATCH,
                order_hold: None,
            };
            let (store, _) = Store::open(location, tuning).await.expect("open");
            let ok = healthz(&store, None).await.expect("healthy");
            assert_eq!(
                (ok.status, &ok.body[..]),
                (StatusCode::OK, &br#"{"status":"ok"}"#[..])
            );
            let certificate = healthz(&store, Some(|| Some(serde_json::json!({"domains": []}))))
                .await
                .expect("healthy");
            assert_eq!(
                &certificate.body[..],
                &br#"{"certificate":{"domains":[]},"status":"ok"}"#[..]
            );
            let handle = store.clone();
            store.close().await;
            let error = healthz(&handle, None)
                .await
                .expect_err("a closed store is unhealthy");
            assert_eq!(
                (error.status(), error.code()),
                (StatusCode::SERVICE_UNAVAILABLE, "unavailable")
            );
        });
    }
}
