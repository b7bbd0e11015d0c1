//! The operations of the spec: `list_pets`, `create_pet`, `get_pet`, plus the OpenAPI
//! document. Each parses its input (query, path, body), calls the store and builds a `Reply`
//! with the operation's own headers. It knows no connections, TLS or tables.
//! Invariant: input is fully checked before the store is touched.

use std::borrow::Cow;

use bytes::Bytes;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper::StatusCode;
use hyper::body::Incoming;
use hyper::header::{
    CONTENT_LENGTH, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, LINK, LOCATION,
};

use crate::error::Error;
use crate::pet::{NewPet, PetId, PetStatus};
use crate::store::Store;

/// Bodies larger than this are refused with 413.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// spec 4.1: limit defaults to 20 and ranges over 1..=100.
const DEFAULT_LIMIT: usize = 20;
const MAX_LIMIT: usize = 100;

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
    let query = ListQuery::parse(query.unwrap_or_default())?;
    Ok(Reply::ok(store.list(query.status, query.limit).await?))
}

/// `POST /v1/pets` (createPet): 201 with the stored pet, once it is durably committed.
pub async fn create_pet(
    store: &Store,
    headers: &HeaderMap,
    body: Incoming,
) -> Result<Reply, Error> {
    if !is_json(headers.get(CONTENT_TYPE)) {
        return Err(Error::UnsupportedMediaType);
    }
    let too_large = Error::PayloadTooLarge {
        limit_bytes: MAX_BODY_BYTES,
    };
    // A declared length over the limit is refused before a byte of the body is read.
    let declared = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|length| length > MAX_BODY_BYTES as u64) {
        return Err(too_large);
    }
    let body = Limited::new(body, MAX_BODY_BYTES)
        .collect()
        .await
        .map_err(|e| {
            if e.is::<LengthLimitError>() {
                Error::PayloadTooLarge {
                    limit_bytes: MAX_BODY_BYTES,
                }
            } else {
                Error::InvalidBody("the request body could not be read".into())
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
    let id = parse_pet_id(raw_id)?;
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

/// listPets's query after its rules: limit 1..=100 (default 20) and an optional status.
#[derive(Debug, PartialEq, Eq)]
struct ListQuery {
    limit: usize,
    status: Option<PetStatus>,
}

impl ListQuery {
    fn parse(query: &str) -> Result<ListQuery, Error> {
        let mut limit = None;
        let mut status = None;
        for pair in query.split('&').filter(|pair| !pair.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            match &*decode_component(name) {
                "limit" => set_once(&mut limit, "limit", parse_limit(&decode_component(value)))?,
                "status" => set_once(
                    &mut status,
                    "status",
                    parse_status(&decode_component(value)),
                )?,
                // Decision: unknown parameters are ignored, so clients can add tracing tags.
                _ => {}
            }
        }
        Ok(ListQuery {
            limit: limit.unwrap_or(DEFAULT_LIMIT),
            status,
        })
    }
}

fn set_once<T>(slot: &mut Option<T>, name: &str, value: Result<T, Error>) -> Result<(), Error> {
    if slot.is_some() {
        return Err(Error::InvalidParameter(format!(
            "{name} must be given at most once"
        )));
    }
    *slot = Some(value?);
    Ok(())
}

fn parse_limit(text: &str) -> Result<usize, Error> {
    let invalid =
        || Error::InvalidParameter(format!("limit must be an integer from 1 to {MAX_LIMIT}"));
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid());
    }
    text.parse::<usize>()
        .ok()
        .filter(|n| (1..=MAX_LIMIT).contains(n))
        .ok_or_else(invalid)
}

fn parse_status(text: &str) -> Result<PetStatus, Error> {
    PetStatus::parse(text).ok_or_else(|| {
        Error::InvalidParameter("status must be one of available, pending, sold".into())
    })
}

/// A decimal int64: an optional minus and digits, nothing else (no `+`, spaces or escapes).
fn parse_pet_id(text: &str) -> Result<PetId, Error> {
    let digits = text.strip_prefix('-').unwrap_or(text);
    let invalid = || Error::InvalidParameter("petId must be a decimal integer within int64".into());
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid());
    }
    text.parse().map_err(|_| invalid())
}

/// Form-style decoding of a query component: `+` is a space and `%XX` a byte. As in the
/// WHATWG URL standard, a `%` not followed by two hex digits stays as it is.
fn decode_component(text: &str) -> Cow<'_, str> {
    if !text.bytes().any(|b| b == b'%' || b == b'+') {
        return Cow::Borrowed(text);
    }
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| char::from(b).to_digit(16);
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(high), Some(low)) => {
                    out.push((high * 16 + low) as u8);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    Cow::Owned(String::from_utf8_lossy(&out).into_owned())
}

/// RFC 8259 JSON is `application/json`; parameters are allowed, but a charset other than
/// UTF-8 is not JSON.
fn is_json(content_type: Option<&HeaderValue>) -> bool {
    let Some(value) = content_type.and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let mut parts = value.split(';');
    let essence = parts.next().unwrap_or_default().trim();
    essence.eq_ignore_ascii_case("application/json")
        && parts.all(|param| match param.split_once('=') {
            Some((name, value)) if name.trim().eq_ignore_ascii_case("charset") => {
                value.trim().trim_matches('"').eq_ignore_ascii_case("utf-8")
            }
            _ => true,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(result: Result<ListQuery, Error>) -> String {
        match result {
            Err(Error::InvalidParameter(message)) => message,
            other => panic!("expected invalid_parameter, got {other:?}"),
        }
    }

    #[test]
    fn limit_defaults_to_20_and_accepts_1_to_100() {
        assert_eq!(
            ListQuery::parse("").ok(),
            Some(ListQuery {
                limit: 20,
                status: None
            })
        );
        for (query, limit) in [
            ("limit=1", 1),
            ("limit=100", 100),
            ("limit=007", 7),
            ("limit=%35%30", 50),
            ("x=1&limit=3&&", 3),
        ] {
            assert_eq!(
                ListQuery::parse(query).map(|q| q.limit).ok(),
                Some(limit),
                "{query}"
            );
        }
    }

    #[test]
    fn a_bad_or_repeated_limit_names_the_parameter() {
        for query in [
            "limit=0",
            "limit=101",
            "limit=-1",
            "limit=+5",
            "limit=1.5",
            "limit=",
            "limit",
            "limit=abc",
            "limit=99999999999999999999999",
            "limit=%ZZ",
        ] {
            assert_eq!(
                message(ListQuery::parse(query)),
                "limit must be an integer from 1 to 100",
                "{query}"
            );
        }
        assert_eq!(
            message(ListQuery::parse("limit=1&limit=1")),
            "limit must be given at most once"
        );
    }

    #[test]
    fn status_must_be_one_of_the_three_values_once() {
        assert_eq!(
            ListQuery::parse("status=sold").map(|q| q.status).ok(),
            Some(Some(PetStatus::Sold))
        );
        for query in ["status=SOLD", "status=", "status=gone", "status=sold+"] {
            assert_eq!(
                message(ListQuery::parse(query)),
                "status must be one of available, pending, sold",
                "{query}"
            );
        }
        assert_eq!(
            message(ListQuery::parse("status=sold&status=sold")),
            "status must be given at most once"
        );
    }

    #[test]
    fn pet_ids_are_decimal_int64() {
        assert_eq!(parse_pet_id("42").ok(), Some(42));
        assert_eq!(parse_pet_id("-9223372036854775808").ok(), Some(i64::MIN));
        for text in [
            "",
            "-",
            "+1",
            "1a",
            "abc",
            "9223372036854775808",
            " 1",
            "%31",
            "1.0",
        ] {
            assert!(
                matches!(parse_pet_id(text), Err(Error::InvalidParameter(_))),
                "{text}"
            );
        }
    }

    #[test]
    fn percent_decoding_is_lenient_about_stray_percent_signs() {
        assert_eq!(decode_component("a%20b+c"), "a b c");
        assert_eq!(decode_component("100%"), "100%");
        assert_eq!(decode_component("%4"), "%4");
        assert_eq!(decode_component("%zz"), "%zz");
        assert_eq!(decode_component("%e2%82%ac"), "\u{20ac}");
    }

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

    #[test]
    fn only_json_media_types_are_accepted() {
        let check = |value: &str| is_json(Some(&HeaderValue::from_str(value).expect("header")));
        for ok in [
            "application/json",
            "Application/JSON",
            "application/json; charset=utf-8",
            "application/json;charset=\"UTF-8\"",
        ] {
            assert!(check(ok), "{ok}");
        }
        for bad in [
            "text/plain",
            "application/jsonx",
            "application/json; charset=latin1",
            "multipart/form-data",
            "",
        ] {
            assert!(!check(bad), "{bad}");
        }
        assert!(!is_json(None));
    }
}
