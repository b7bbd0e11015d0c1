//! The operations of the spec: `list_pets`, `create_pet`, `get_pet`, plus the OpenAPI
//! document and the health probe. Each checks its input (with `query` and `pet`), calls the
//! store and builds a `Reply` with the operation's own headers. It knows no connections, TLS
//! or tables. Invariant: input is fully checked before the store is touched.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper::StatusCode;
use hyper::body::Incoming;
use hyper::header::{
    CONTENT_LENGTH, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, LINK, LOCATION,
};

use crate::error::Error;
use crate::pet::NewPet;
use crate::query::{self, ListQuery};
use crate::store::Store;

/// Bodies larger than this are refused with 413.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

const OPENAPI: &str = include_str!("openapi.json");

/// A successful answer: status, JSON body and the operation's extra headers.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub body: Bytes,
    pub headers: Vec<(HeaderName, HeaderValue)>,
}

impl Reply {
    fn ok(body: Bytes) -> Reply {
        Reply {
            status: StatusCode::OK,
            body,
            headers: Vec::new(),
        }
    }
}

/// `GET /v1/pets` (listPets).
pub async fn list_pets(store: &Store, query: Option<&str>) -> Result<Reply, Error> {
    let query =
        ListQuery::parse(query.unwrap_or_default()).map_err(|e| Error::InvalidParameter(e.0))?;
    Ok(Reply::ok(store.list(query.status, query.limit).await?))
}

/// `POST /v1/pets` (createPet): 201 with the stored pet, once it is durably committed.
pub async fn create_pet(
    store: &Store,
    headers: &HeaderMap,
    body: Incoming,
    body_timeout: Duration,
) -> Result<Reply, Error> {
    if !query::is_json(headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok())) {
        return Err(Error::UnsupportedMediaType);
    }
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
    let pet = NewPet::from_json(&body).map_err(|e| Error::InvalidBody(e.0))?;
    let stored = store.create(pet).await?;
    let location = HeaderValue::try_from(format!("/v1/pets/{}", stored.id))
        .expect("a path of digits is a valid header value");
    Ok(Reply {
        status: StatusCode::CREATED,
        body: stored.json,
        headers: vec![(LOCATION, location)],
    })
}

/// `GET /v1/pets/{petId}` (getPet, deprecated). The caller adds `deprecation_headers`.
pub async fn get_pet(store: &Store, raw_id: &str) -> Result<Reply, Error> {
    let id = query::parse_pet_id(raw_id).map_err(|e| Error::InvalidParameter(e.0))?;
    match store.get(id).await? {
        Some(json) => Ok(Reply::ok(json)),
        None => Err(Error::NotFound(format!("no pet has id {id}"))),
    }
}

/// `GET /healthz`: 200 while the store answers a read, 503 otherwise.
pub async fn healthz(store: &Store) -> Result<Reply, Error> {
    store
        .check()
        .await
        .map_err(|e| Error::Unavailable(format!("health check: {e}")))?;
    Ok(Reply::ok(Bytes::from_static(br#"{"status":"ok"}"#)))
}

/// `GET /v1/openapi.json`: the document describing this server.
pub fn openapi() -> Reply {
    Reply::ok(Bytes::from_static(OPENAPI.as_bytes()))
}

/// Headers on every getPet answer: it is deprecated and goes away on 5 December 2030.
pub fn deprecation_headers() -> [(HeaderName, HeaderValue); 3] {
    [
        // RFC 9745: Deprecation is an sf-date; the operation has been deprecated since this
        // server's first release, 2026-11-22.
        (
            HeaderName::from_static("deprecation"),
            HeaderValue::from_static("@1795305600"),
        ),
        // RFC 8594: Sunset is an HTTP-date.
        (
            HeaderName::from_static("sunset"),
            HeaderValue::from_static("Thu, 05 Dec 2030 00:00:00 GMT"),
        ),
        // spec 4.3: clients are directed to listPets with its status filter.
        (
            LINK,
            HeaderValue::from_static(r#"</v1/pets>; rel="successor-version""#),
        ),
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
            let (store, _) = Store::open(&dir.path().join("pets.redb"), 1 << 20).expect("open");
            let ok = healthz(&store).await.expect("healthy");
            assert_eq!(
                (ok.status, &ok.body[..]),
                (StatusCode::OK, &br#"{"status":"ok"}"#[..])
            );
            let handle = store.clone();
            store.close().await;
            let error = healthz(&handle)
                .await
                .expect_err("a closed store is unhealthy");
            assert_eq!(
                (error.status(), error.code()),
                (StatusCode::SERVICE_UNAVAILABLE, "unavailable")
            );
        });
    }
}
