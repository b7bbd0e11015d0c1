//! The operations, one file per resource: `pets` (the spec's three and patchPet, deletePet),
//! `events` (the feed's pages and stream), `orders` (orders and the inventory), `categories`;
//! here, the dispatch to them (`serve`: the one `match` on `Op`, given a routed request's
//! `Call`), what they share (`Reply`, reading a body, the Idempotency-Key, `If-Match`, next
//! links) and the OpenAPI document and health probe. Each operation checks its input (with
//! `query`, `conditional` and the domain), calls the store and builds a `Reply` with its own
//! headers (Link, Location, ETag). It knows no connections, TLS or tables.
//! Invariant: input is fully checked before the store is touched.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper::StatusCode;
use hyper::body::Incoming;
use hyper::header::{
    CONTENT_LENGTH, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, IF_MATCH, LINK, LOCATION,
};
use sha2::{Digest, Sha256};

use crate::auth::{AuthFailure, Caller, Keys};
use crate::conditional::{self, IfMatch};
use crate::error::Error;
use crate::feed::Feed;
use crate::operations::Op;
use crate::order::OrderAction;
use crate::query::{self, InvalidQuery};
use crate::store::{KeyClaim, Precondition, Store};

pub mod categories;
pub mod events;
pub mod orders;
pub mod pets;

/// Bodies larger than this are refused with 413.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

const OPENAPI: &str = include_str!("../openapi.json");

/// draft-ietf-httpapi-idempotency-key-header-07.
const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");
/// Tells a client that a 201 answers an earlier request with its Idempotency-Key, as Stripe's
/// `Idempotent-Replayed` does.
const IDEMPOTENT_REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");

/// What the operations take of a request and of the server, gathered by `service` once the
/// request passed the auth gate, the rate limit and routing.
pub(crate) struct Call<'a> {
    pub store: &'a Store,
    /// The key or console session that passed the gate; `None` only on a path that needs no
    /// key (`/healthz`, the OpenAPI document).
    pub caller: Option<Caller>,
    pub headers: &'a HeaderMap,
    pub body: Incoming,
    /// The path's parameter, checked by the operation; empty when its template has none.
    pub id: &'a str,
    pub query: Option<&'a str>,
    /// The request is a HEAD: an event stream is not started for one.
    pub head: bool,
    /// A request body must arrive whole within this.
    pub body_timeout: Duration,
    pub feed: &'a Feed,
    /// The keys, for a stream to check its key again as it goes.
    pub keys: &'a Arc<Keys>,
    pub certificate_health: Option<CertificateHealth>,
}

/// Runs the operation `op` for a request that was let through and routed to it: the one
/// `match` on `Op`, calling its handler.
pub(crate) async fn serve(op: Op, call: Call<'_>) -> Result<Reply, Error> {
    // The writes' futures (a body read under a timeout, a wait on the writer) are boxed, as
    // the store's are on PostgreSQL, so that a read's request future stays small: HTTP/2
    // copies it into each stream's task, and memcpy was the largest cost of an HTTP/2 list
    // under callgrind. With the PostgreSQL reads still inline it was 3,264 bytes; measured on
    // 2026-12-02, `App::dispatch`'s future is 2,648 bytes and this one's 504.
    // The reads of orders, categories and the inventory are boxed too: they are rarer than
    // a pet's, and inline the largest of them would set the size of every request's future.
    let Call {
        store,
        caller,
        headers,
        body,
        id,
        query,
        head,
        body_timeout: timeout,
        feed,
        keys,
        certificate_health,
    } = call;
    match op {
        Op::ListPets => pets::list_pets(store, query).await,
        Op::CreatePet => {
            // Every /v1 path needs a key; none is a 401, never a panic, should that change.
            let caller = caller.ok_or(AuthFailure::Missing)?;
            Box::pin(pets::create_pet(store, &caller, headers, body, timeout)).await
        }
        Op::GetPet => pets::get_pet(store, id, headers).await,
        Op::PatchPet => Box::pin(pets::patch_pet(store, id, headers, body, timeout)).await,
        Op::DeletePet => Box::pin(pets::delete_pet(store, id, headers)).await,
        Op::ListEvents => {
            // A stream outlives its request's check: its key is checked again as it goes
            // (made only for a stream, not for every page).
            let key = caller.as_ref().map(|caller| caller.key_hash);
            let allowed = || -> crate::feed::StillAllowed {
                let keys = Arc::clone(keys);
                Box::new(move || key.is_some_and(|key| keys.by_hash(&key).is_ok()))
            };
            Box::pin(events::list_events(
                store, feed, query, headers, head, allowed,
            ))
            .await
        }
        Op::PlaceOrder => {
            let caller = caller.ok_or(AuthFailure::Missing)?;
            Box::pin(orders::place_order(store, &caller, headers, body, timeout)).await
        }
        Op::ListOrders => Box::pin(orders::list_orders(store, query)).await,
        Op::GetOrder => Box::pin(orders::get_order(store, id, headers)).await,
        Op::CompleteOrder => {
            let action = OrderAction::Complete;
            Box::pin(orders::move_order(store, id, action, headers)).await
        }
        Op::CancelOrder => {
            let action = OrderAction::Cancel;
            Box::pin(orders::move_order(store, id, action, headers)).await
        }
        Op::GetInventory => Box::pin(orders::get_inventory(store)).await,
        Op::ListCategories => Box::pin(categories::list_categories(store, query)).await,
        Op::CreateCategory => {
            Box::pin(categories::create_category(store, headers, body, timeout)).await
        }
        Op::GetCategory => Box::pin(categories::get_category(store, id)).await,
        Op::PatchCategory => {
            Box::pin(categories::patch_category(
                store, id, headers, body, timeout,
            ))
            .await
        }
        Op::DeleteCategory => Box::pin(categories::delete_category(store, id)).await,
        Op::GetOpenApi => Ok(openapi()),
        Op::Health => healthz(store, certificate_health).await,
    }
}

/// A successful answer: status, JSON body and the operation's extra headers.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub body: Bytes,
    /// The ETag of the pet or order the answer carries or stands for. Apart from the other
    /// headers, since nearly every answer with one has no other: the service keeps its place
    /// in the fields an answer starts with.
    pub etag: Option<HeaderValue>,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// An event stream's frames, sent as the body in place of `body` while they come.
    pub stream: Option<crate::feed::Frames>,
}

impl Reply {
    fn ok(body: Bytes) -> Reply {
        Reply::tagged(StatusCode::OK, body, None)
    }

    /// An answer with a body and, for one pet or order, its ETag.
    fn tagged(status: StatusCode, body: Bytes, etag: Option<HeaderValue>) -> Reply {
        Reply {
            status,
            body,
            etag,
            headers: Vec::new(),
            stream: None,
        }
    }

    /// An answer without content: 204, or 304 with the ETag of the 200 it stands for.
    fn empty(status: StatusCode, etag: Option<HeaderValue>) -> Reply {
        Reply::tagged(status, Bytes::new(), etag)
    }

    /// Adds `Location` with the path of what a 201 created.
    fn located(mut self, path: &str, id: i64) -> Reply {
        let location = HeaderValue::try_from(format!("{path}{id}"))
            .expect("a path of ours and digits is a valid header value");
        self.headers.push((LOCATION, location));
        self
    }

    /// Adds `Idempotent-Replayed: true` when the answer repeats an earlier request's.
    fn replayed(mut self, replayed: bool) -> Reply {
        if replayed {
            self.headers
                .push((IDEMPOTENT_REPLAYED, HeaderValue::from_static("true")));
        }
        self
    }

    /// Adds `Link: <{path}?{query}>; rel="next"` when more matched than a page ending at
    /// `last_id` holds (`Page::more`, `Page::last_id`); `query` writes the next page's query.
    fn link_next<T>(
        &mut self,
        (more, last_id): (bool, Option<T>),
        path: &str,
        query: impl FnOnce(T, &mut String),
    ) {
        if more && let Some(last_id) = last_id {
            // RFC 8288; the target is relative to the server, as Location is.
            let mut link = String::with_capacity(96);
            link.push('<');
            link.push_str(path);
            link.push('?');
            query(last_id, &mut link);
            link.push_str(">; rel=\"next\"");
            let link = HeaderValue::try_from(link).expect(
                "a link of our path, digits, names and base64url characters is a valid header value",
            );
            self.headers.push((LINK, link));
        }
    }
}

/// A strong ETag (`"ID.REVISION"`) as a header value.
fn etag_value(tag: String) -> HeaderValue {
    HeaderValue::try_from(tag).expect("a quoted id and revision is a valid header value")
}

/// A list's query error as the client gets it.
fn query_error(e: InvalidQuery) -> Error {
    match e {
        InvalidQuery::Parameter(e) => Error::InvalidParameter(e.0),
        InvalidQuery::Cursor(problem) => Error::InvalidCursor(problem),
    }
}

/// A path id, or 400 naming the parameter (`petId`, `orderId`, `categoryId`).
fn path_id(name: &str, raw_id: &str) -> Result<i64, Error> {
    query::parse_id(name, raw_id).map_err(|e| Error::InvalidParameter(e.0))
}

/// What `If-Match` asks of the pet or order `id`, in the store's terms.
fn precondition(headers: &HeaderMap, id: i64) -> Precondition {
    let sent = headers.get_all(IF_MATCH).iter().map(HeaderValue::as_bytes);
    match conditional::if_match(sent, id) {
        // `*` asks that it exist, which every change asks anyway.
        IfMatch::Any => Precondition::None,
        IfMatch::Revisions(revisions) => Precondition::RevisionIn(revisions),
    }
}

fn content_type(headers: &HeaderMap) -> Option<&str> {
    headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok())
}

/// Claims the request's Idempotency-Key, if it sent one, before its body is read: a retry
/// sent while this request is still arriving gets 409, not a second create.
fn claim_idempotency_key(
    store: &Store,
    caller: &Caller,
    headers: &HeaderMap,
) -> Result<Option<KeyClaim>, Error> {
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
    Ok(claim)
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
pub(crate) async fn read_body(
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

    #[test]
    fn a_next_link_is_added_only_while_more_matched() {
        let links = |page: (bool, Option<i64>)| {
            let mut reply = Reply::ok(Bytes::new());
            reply.link_next(page, "/v1/categories", |last, out| {
                out.push_str("after=");
                out.push_str(&last.to_string());
            });
            reply.headers
        };
        assert!(links((false, Some(3))).is_empty());
        assert!(links((true, None)).is_empty());
        assert_eq!(
            links((true, Some(3))),
            [(
                LINK,
                HeaderValue::from_static("</v1/categories?after=3>; rel=\"next\"")
            )]
        );
    }
}
