//! `Error`, the one way a request fails, and `ErrorBody`, the spec's Error object. Each variant
//! fixes its HTTP status, its `code`, its message and the headers HTTP requires with it.
//! Invariant: the body's `status` is always the response's status, and an internal cause is
//! logged, never sent.

use std::borrow::Cow;
use std::time::Duration;

use hyper::StatusCode;
use hyper::header::{ALLOW, HeaderName, HeaderValue, RETRY_AFTER, WWW_AUTHENTICATE};
use serde::Serialize;

use crate::auth::AuthFailure;
use crate::ratelimit::Refusal;
use crate::store::StoreError;

/// Why a request failed, in terms a client can act on.
#[derive(Debug)]
pub enum Error {
    /// The request breaks HTTP's own framing rules (no Host, ambiguous length); the
    /// connection is closed after the answer, since its framing cannot be trusted.
    InvalidRequest(&'static str),
    /// Too many header fields, or too many bytes of them.
    HeadersTooLarge {
        max_fields: usize,
        max_bytes: usize,
    },
    /// The request body did not arrive in time; the connection is closed after the answer.
    RequestTimeout {
        limit: Duration,
    },
    /// A query or path parameter is malformed; the message names it.
    InvalidParameter(String),
    /// The `cursor` of a list is malformed, repeated or made for another status filter.
    InvalidCursor(&'static str),
    /// The `Idempotency-Key` header is malformed or repeated.
    InvalidIdempotencyKey(&'static str),
    /// The request body breaks a `NewPet` or `PetPatch` rule; the message says which.
    InvalidBody(String),
    Unauthorized(AuthFailure),
    /// A read-only key asked to create, change or delete; `what` names the resource
    /// (`pets`, `orders`, `categories`).
    Forbidden {
        what: &'static str,
    },
    /// An unsafe request made with a console session came from another site (its
    /// `Sec-Fetch-Site` or `Origin`): refused, as a forged request would be.
    CrossOrigin,
    /// Nothing at this path, or no pet with this id; the message says which.
    NotFound(String),
    /// The path exists but not for this method; `allow` lists the methods it has.
    MethodNotAllowed {
        allow: &'static str,
    },
    PayloadTooLarge {
        limit_bytes: usize,
    },
    UnsupportedMediaType,
    /// A PATCH body that is not a merge patch; the answer lists the types taken (RFC 5789 2.2).
    UnsupportedPatchType,
    /// `If-Match` names no current tag of what it asked about (`pet`, `order`); nothing was
    /// changed.
    PreconditionFailed(&'static str),
    /// A create with this Idempotency-Key has not been answered yet.
    IdempotencyKeyInFlight,
    /// Over `--rate-limit` for this key, or over `--auth-failure-limit` for this address.
    RateLimited(Refusal),
    /// This Idempotency-Key answered a request with another body.
    IdempotencyKeyReused,
    /// A fault of ours; the cause is for the log only.
    Internal(String),
    /// We cannot take this request now (a write failed, the store is reopening its file or
    /// stopping); the cause is for the log.
    Unavailable(String),
    /// The write's commit failed and whether it was stored is unknown (whole, if it was); the
    /// cause is for the log.
    OutcomeUnknown(String),
    /// An event feed cursor this feed cannot continue from: purged, of another store or of an
    /// earlier feed of this one.
    CursorExpired,
    /// `--max-subscribers` event streams are open.
    SubscribersFull {
        max: usize,
    },
    /// The request conflicts with the state of what it names (a pet not available or held by
    /// an order, an order already final, a name taken, a category in use); `code` says which
    /// and the message names the state.
    Conflict {
        code: &'static str,
        message: String,
    },
}

/// The spec's Error object (section 2).
#[derive(Debug, Serialize)]
pub struct ErrorBody<'a> {
    pub code: &'static str,
    pub message: Cow<'a, str>,
    pub status: u16,
}

impl Error {
    /// RFC 9110 8.6: a repeated Content-Length, equal or not, leaves the body's end in doubt.
    pub const REPEATED_CONTENT_LENGTH: Error =
        Error::InvalidRequest("Content-Length must be given at most once");

    pub fn status(&self) -> StatusCode {
        match self {
            Error::InvalidRequest(_)
            | Error::InvalidParameter(_)
            | Error::InvalidCursor(_)
            | Error::InvalidIdempotencyKey(_)
            | Error::InvalidBody(_) => StatusCode::BAD_REQUEST,
            Error::HeadersTooLarge { .. } => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            Error::RequestTimeout { .. } => StatusCode::REQUEST_TIMEOUT,
            Error::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            Error::Forbidden { .. } | Error::CrossOrigin => StatusCode::FORBIDDEN,
            Error::NotFound(_) => StatusCode::NOT_FOUND,
            Error::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            Error::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Error::UnsupportedMediaType | Error::UnsupportedPatchType => {
                StatusCode::UNSUPPORTED_MEDIA_TYPE
            }
            Error::PreconditionFailed(_) => StatusCode::PRECONDITION_FAILED,
            Error::IdempotencyKeyInFlight | Error::Conflict { .. } => StatusCode::CONFLICT,
            Error::IdempotencyKeyReused => StatusCode::UNPROCESSABLE_ENTITY,
            Error::RateLimited(_) => StatusCode::TOO_MANY_REQUESTS,
            Error::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            Error::Unavailable(_) | Error::OutcomeUnknown(_) | Error::SubscribersFull { .. } => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            Error::CursorExpired => StatusCode::GONE,
        }
    }

    pub fn code(&self) -> &'static str {
        match self {
            Error::InvalidRequest(_) => "invalid_request",
            Error::HeadersTooLarge { .. } => "header_fields_too_large",
            Error::RequestTimeout { .. } => "request_timeout",
            Error::InvalidParameter(_) => "invalid_parameter",
            Error::InvalidCursor(_) => "invalid_cursor",
            Error::InvalidIdempotencyKey(_) => "invalid_idempotency_key",
            Error::InvalidBody(_) => "invalid_body",
            Error::Unauthorized(_) => "unauthorized",
            Error::Forbidden { .. } => "forbidden",
            Error::CrossOrigin => "cross_origin",
            Error::NotFound(_) => "not_found",
            Error::MethodNotAllowed { .. } => "method_not_allowed",
            Error::PayloadTooLarge { .. } => "payload_too_large",
            Error::UnsupportedMediaType | Error::UnsupportedPatchType => "unsupported_media_type",
            Error::PreconditionFailed(_) => "precondition_failed",
            Error::IdempotencyKeyInFlight => "idempotency_key_in_flight",
            Error::IdempotencyKeyReused => "idempotency_key_reused",
            Error::RateLimited(_) => "rate_limited",
            Error::Internal(_) => "internal_error",
            Error::Unavailable(_) | Error::SubscribersFull { .. } => "unavailable",
            Error::OutcomeUnknown(_) => "outcome_unknown",
            Error::CursorExpired => "cursor_expired",
            Error::Conflict { code, .. } => code,
        }
    }

    pub fn message(&self) -> Cow<'_, str> {
        match self {
            Error::InvalidParameter(m)
            | Error::InvalidBody(m)
            | Error::NotFound(m)
            | Error::Conflict { message: m, .. } => Cow::Borrowed(m),
            Error::InvalidRequest(m) | Error::InvalidCursor(m) | Error::InvalidIdempotencyKey(m) => {
                Cow::Borrowed(m)
            }
            Error::HeadersTooLarge {
                max_fields,
                max_bytes,
            } => {
                format!("request headers must be at most {max_fields} fields and {max_bytes} bytes")
                    .into()
            }
            Error::RequestTimeout { limit } => format!(
                "the request body must arrive within {} seconds",
                limit.as_secs()
            )
            .into(),
            Error::Unauthorized(AuthFailure::Missing) => {
                "this operation needs an API key: send Authorization: Bearer <key>".into()
            }
            Error::Unauthorized(AuthFailure::Invalid) => "the API key is not valid".into(),
            Error::Unauthorized(AuthFailure::SessionEnded) => "the console session has ended \
                (signed out, unused too long, or its key revoked): sign in again"
                .into(),
            Error::CrossOrigin => "a request from another site may not make changes with a \
                console session"
                .into(),
            Error::Unauthorized(AuthFailure::Expired { .. }) => {
                "the API key has expired: ask for a new one".into()
            }
            Error::Forbidden { what } => {
                format!("this API key is read-only: it may not create, change or delete {what}")
                    .into()
            }
            Error::MethodNotAllowed { allow } => {
                format!("method not allowed here; allowed: {allow}").into()
            }
            Error::PayloadTooLarge { limit_bytes } => {
                format!("request body must be at most {limit_bytes} bytes").into()
            }
            Error::UnsupportedMediaType => {
                "request body must be sent as Content-Type: application/json".into()
            }
            Error::UnsupportedPatchType => "request body must be sent as Content-Type: application/merge-patch+json or application/json".into(),
            Error::PreconditionFailed(what) => {
                format!("If-Match does not match the {what}'s current ETag").into()
            }
            Error::IdempotencyKeyInFlight => {
                "a request with this Idempotency-Key is still in progress; retry later".into()
            }
            Error::IdempotencyKeyReused => {
                "this Idempotency-Key was already used with a different request body".into()
            }
            Error::RateLimited(refusal) => {
                let whom = match refusal.policy.name {
                    "per-key" => "this API key",
                    _ => "API keys that are not valid from this address",
                };
                format!(
                    "too many requests: {whom} may make {}; retry after {} seconds",
                    refusal.policy.rate,
                    refusal.wait_secs()
                )
                .into()
            }
            Error::Internal(_) => "internal error".into(),
            Error::Unavailable(_) => {
                "the service cannot take this request now; try again later".into()
            }
            Error::OutcomeUnknown(_) => "the write may or may not have been stored: its commit \
                failed; retry it (a create with the same Idempotency-Key) or read it back to \
                learn which"
                .into(),
            Error::CursorExpired => "this cursor is gone: its events were purged, or it belongs \
                to another store or an earlier copy of this one; list the pets again (GET \
                /v1/pets) and follow the feed from that answer's Events-Cursor"
                .into(),
            Error::SubscribersFull { max } => format!(
                "{max} event streams are open, the most this server takes (--max-subscribers); \
                 retry later, or poll GET /v1/events as JSON pages"
            )
            .into(),
        }
    }

    /// Headers HTTP requires or advises with this answer: `WWW-Authenticate` with a 401 (RFC
    /// 9110 11.6.1, RFC 6750 3), `Allow` with a 405 (RFC 9110 15.5.6), `Accept-Patch` with a
    /// PATCH's 415 (RFC 5789 2.2), `Retry-After` where trying again soon may work, and with a
    /// 429 the `RateLimit-Policy` and `RateLimit` fields of draft-ietf-httpapi-ratelimit-headers
    /// (-10).
    pub fn headers(&self) -> Vec<(HeaderName, HeaderValue)> {
        let one = |name, value| vec![(name, HeaderValue::from_static(value))];
        match self {
            Error::Unauthorized(AuthFailure::Missing) => {
                one(WWW_AUTHENTICATE, r#"Bearer realm="petstore""#)
            }
            Error::Unauthorized(AuthFailure::Invalid) => one(
                WWW_AUTHENTICATE,
                r#"Bearer realm="petstore", error="invalid_token""#,
            ),
            // RFC 6750 3.1: invalid_token covers an expired token; the description tells
            // the client which.
            Error::Unauthorized(AuthFailure::Expired { .. }) => one(
                WWW_AUTHENTICATE,
                r#"Bearer realm="petstore", error="invalid_token", error_description="the API key has expired""#,
            ),
            Error::Unauthorized(AuthFailure::SessionEnded) => one(
                WWW_AUTHENTICATE,
                r#"Bearer realm="petstore", error="invalid_token", error_description="the console session has ended""#,
            ),
            Error::MethodNotAllowed { allow } => one(ALLOW, allow),
            Error::UnsupportedPatchType => one(
                HeaderName::from_static("accept-patch"),
                "application/merge-patch+json, application/json",
            ),
            // A second is about what a create or a reopen takes; RFC 9110 10.2.3.
            Error::IdempotencyKeyInFlight | Error::Unavailable(_) | Error::OutcomeUnknown(_) => {
                one(RETRY_AFTER, "1")
            }
            Error::RateLimited(refusal) => rate_limit_headers(refusal),
            // A place frees when a stream ends; clients reconnect about that often anyway.
            Error::SubscribersFull { .. } => one(RETRY_AFTER, "5"),
            _ => Vec::new(),
        }
    }

    /// Whether the connection must close after this answer (HTTP/1.1): what follows on it
    /// could not be told apart from the rest of this request.
    pub fn closes_connection(&self) -> bool {
        matches!(
            self,
            Error::InvalidRequest(_) | Error::RequestTimeout { .. }
        )
    }

    /// The cause to log for failures that are ours, not the client's.
    pub fn cause(&self) -> Option<&str> {
        match self {
            Error::Internal(cause) | Error::Unavailable(cause) | Error::OutcomeUnknown(cause) => {
                Some(cause)
            }
            _ => None,
        }
    }

    pub fn body(&self) -> ErrorBody<'_> {
        ErrorBody {
            code: self.code(),
            message: self.message(),
            status: self.status().as_u16(),
        }
    }

    /// The body as it goes on the wire.
    pub fn json(&self) -> Vec<u8> {
        serde_json::to_vec(&self.body())
            .expect("an ErrorBody is strings and an integer: it always encodes")
    }
}

/// `Retry-After` and the draft's two structured fields: the policy as a String item with its
/// quota `q` and window `w` in seconds, and the state, nothing remaining (`r=0`) for `t`
/// seconds.
fn rate_limit_headers(refusal: &Refusal) -> Vec<(HeaderName, HeaderValue)> {
    let (policy, wait) = (&refusal.policy, refusal.wait_secs());
    [
        (RETRY_AFTER, wait.to_string()),
        (
            HeaderName::from_static("ratelimit-policy"),
            format!(
                "\"{}\";q={};w={}",
                policy.name, policy.rate.count, policy.rate.window_secs
            ),
        ),
        (
            HeaderName::from_static("ratelimit"),
            format!("\"{}\";r=0;t={wait}", policy.name),
        ),
    ]
    .into_iter()
    // Digits, quotes and a fixed name: always a valid field value.
    .filter_map(|(name, value)| Some((name, HeaderValue::try_from(value).ok()?)))
    .collect()
}

impl From<AuthFailure> for Error {
    fn from(failure: AuthFailure) -> Error {
        Error::Unauthorized(failure)
    }
}

impl From<StoreError> for Error {
    fn from(e: StoreError) -> Error {
        match e {
            StoreError::NotFound(_) => Error::NotFound(e.to_string()),
            StoreError::PetNotAvailable { .. } => Error::Conflict {
                code: "pet_not_available",
                message: e.to_string(),
            },
            StoreError::PetReserved { .. } => Error::Conflict {
                code: "pet_reserved",
                message: e.to_string(),
            },
            StoreError::InvalidTransition { .. } => Error::Conflict {
                code: "invalid_transition",
                message: e.to_string(),
            },
            StoreError::NameTaken(_) => Error::Conflict {
                code: "name_taken",
                message: e.to_string(),
            },
            StoreError::CategoryInUse(_) => Error::Conflict {
                code: "category_in_use",
                message: e.to_string(),
            },
            // The store's only precondition outside an order's move, whose handler names the
            // order instead.
            StoreError::PreconditionFailed => Error::PreconditionFailed("pet"),
            StoreError::IdempotencyKeyInFlight => Error::IdempotencyKeyInFlight,
            StoreError::IdempotencyKeyReused => Error::IdempotencyKeyReused,
            // A failed commit, a medium that failed, a reopen after one or a store that is
            // stopping leaves the data as it was: the request may be retried, so say so rather
            // than claim a fault.
            // Stored data that does not read back (a damaged file, a panic inside redb that
            // the store contained) is a fault of the medium, not of the request: 503 too, and
            // the cause is logged for the operator, never sent.
            StoreError::Io(_)
            | StoreError::NoRoom(_)
            | StoreError::LogLost(_)
            | StoreError::Corrupt(_)
            | StoreError::Contended(_)
            | StoreError::Refused(_)
            | StoreError::Closed
            | StoreError::IdsExhausted
            | StoreError::Reopening => Error::Unavailable(e.to_string()),
            StoreError::InDoubt(_) => Error::OutcomeUnknown(e.to_string()),
            StoreError::Unsupported(_)
            | StoreError::OlderFile(_)
            | StoreError::Locked
            | StoreError::NewerSchema { .. }
            | StoreError::NotEmpty { .. } => Error::Internal(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::subject::Subject;

    const REFUSAL: Refusal = Refusal {
        policy: crate::ratelimit::Policy {
            name: "per-key",
            rate: crate::ratelimit::Rate {
                count: std::num::NonZeroU32::new(200).expect("nonzero"),
                window_secs: 1,
            },
        },
        wait: Duration::from_millis(1500),
    };

    fn every_variant() -> Vec<Error> {
        vec![
            Error::InvalidRequest("HTTP/1.1 requests must carry a Host header"),
            Error::HeadersTooLarge {
                max_fields: 64,
                max_bytes: 16384,
            },
            Error::RequestTimeout {
                limit: Duration::from_secs(10),
            },
            Error::InvalidParameter("limit must be an integer from 1 to 100".into()),
            Error::InvalidCursor("cursor must be given at most once"),
            Error::InvalidIdempotencyKey("Idempotency-Key must be given at most once"),
            Error::InvalidBody("name is required".into()),
            Error::Unauthorized(AuthFailure::Missing),
            Error::Unauthorized(AuthFailure::Invalid),
            Error::Unauthorized(AuthFailure::Expired {
                label: "old".into(),
            }),
            Error::Unauthorized(AuthFailure::SessionEnded),
            Error::Forbidden { what: "pets" },
            Error::CrossOrigin,
            Error::NotFound("no pet has id 7".into()),
            Error::MethodNotAllowed { allow: "GET, HEAD" },
            Error::PayloadTooLarge { limit_bytes: 65536 },
            Error::UnsupportedMediaType,
            Error::UnsupportedPatchType,
            Error::PreconditionFailed("pet"),
            Error::IdempotencyKeyInFlight,
            Error::IdempotencyKeyReused,
            Error::RateLimited(REFUSAL),
            Error::Internal("disk on fire".into()),
            Error::Conflict {
                code: "pet_reserved",
                message: "pet 1 is held by order 2".into(),
            },
            Error::Unavailable("commit failed".into()),
            Error::OutcomeUnknown("fdatasync: EIO".into()),
        ]
    }

    #[test]
    fn body_status_equals_http_status_for_every_variant() {
        for error in every_variant() {
            assert_eq!(error.body().status, error.status().as_u16(), "{error:?}");
            assert!(!error.message().is_empty(), "{error:?}");
        }
    }

    #[test]
    fn codes_are_the_documented_ones() {
        let codes: Vec<&str> = every_variant().iter().map(Error::code).collect();
        assert_eq!(
            codes,
            [
                "invalid_request",
                "header_fields_too_large",
                "request_timeout",
                "invalid_parameter",
                "invalid_cursor",
                "invalid_idempotency_key",
                "invalid_body",
                "unauthorized",
                "unauthorized",
                "unauthorized",
                "unauthorized",
                "forbidden",
                "cross_origin",
                "not_found",
                "method_not_allowed",
                "payload_too_large",
                "unsupported_media_type",
                "unsupported_media_type",
                "precondition_failed",
                "idempotency_key_in_flight",
                "idempotency_key_reused",
                "rate_limited",
                "internal_error",
                "pet_reserved",
                "unavailable",
                "outcome_unknown"
            ]
        );
    }

    #[test]
    fn internal_causes_never_reach_the_body() {
        for error in [
            Error::Internal("disk on fire".into()),
            Error::Unavailable("disk on fire".into()),
            Error::OutcomeUnknown("disk on fire".into()),
        ] {
            let body = serde_json::to_string(&error.body()).expect("encode");
            assert!(!body.contains("disk"), "{body}");
            assert_eq!(error.cause(), Some("disk on fire"));
        }
    }

    #[test]
    fn the_wire_body_is_the_error_object() {
        let error = Error::REPEATED_CONTENT_LENGTH;
        let body: serde_json::Value = serde_json::from_slice(&error.json()).expect("JSON");
        assert_eq!(
            body,
            serde_json::json!({
                "code": "invalid_request",
                "message": "Content-Length must be given at most once",
                "status": 400
            })
        );
        assert!(error.closes_connection());
    }

    #[test]
    fn store_errors_map_by_meaning() {
        let status = |e: StoreError| Error::from(e).status().as_u16();
        assert_eq!(status(StoreError::NotFound(Subject::pet(7))), 404);
        assert_eq!(status(StoreError::PreconditionFailed), 412);
        assert_eq!(status(StoreError::IdempotencyKeyInFlight), 409);
        assert_eq!(status(StoreError::IdempotencyKeyReused), 422);
        for unavailable in [
            StoreError::Io("EIO".into()),
            StoreError::Contended("40001".into()),
            StoreError::Refused("28P01".into()),
            StoreError::Closed,
            StoreError::IdsExhausted,
            StoreError::Reopening,
        ] {
            assert_eq!(status(unavailable), 503);
        }
        assert_eq!(status(StoreError::InDoubt("EIO on fdatasync".into())), 503);
        assert_eq!(
            Error::from(StoreError::InDoubt("EIO".into())).code(),
            "outcome_unknown"
        );
        assert_eq!(status(StoreError::Corrupt("bad page".into())), 503);
        for (e, message) in [
            (StoreError::NotFound(Subject::order(4)), "no order has id 4"),
            (
                StoreError::NotFound(Subject::category(5)),
                "no category has id 5",
            ),
        ] {
            let e = Error::from(e);
            assert_eq!((e.status().as_u16(), e.code()), (404, "not_found"));
            assert_eq!(e.message(), message);
        }
        for (e, code) in [
            (
                StoreError::PetNotAvailable {
                    pet: 1,
                    status: Some(crate::pet::PetStatus::Sold),
                },
                "pet_not_available",
            ),
            (StoreError::PetReserved { pet: 1, order: 2 }, "pet_reserved"),
            (
                StoreError::InvalidTransition {
                    order: 2,
                    action: crate::order::OrderAction::Complete,
                    refused: crate::order::Refused::NotPlaced(crate::order::OrderStatus::Cancelled),
                },
                "invalid_transition",
            ),
            (StoreError::NameTaken("Dogs".into()), "name_taken"),
            (StoreError::CategoryInUse(3), "category_in_use"),
        ] {
            let message = e.to_string();
            let e = Error::from(e);
            assert_eq!((e.status().as_u16(), e.code()), (409, code));
            assert_eq!(e.message(), message);
        }
        assert_eq!(
            Error::from(StoreError::PreconditionFailed).message(),
            "If-Match does not match the pet's current ETag"
        );
        assert_eq!(
            Error::Forbidden { what: "pets" }.message(),
            "this API key is read-only: it may not create, change or delete pets"
        );
    }

    #[test]
    fn only_401_405_409_415_of_a_patch_429_and_503_carry_headers() {
        for error in every_variant() {
            let headers = error.headers();
            let names: Vec<&str> = headers.iter().map(|(name, _)| name.as_str()).collect();
            match (error.status().as_u16(), &error) {
                (401, _) => assert_eq!(names, ["www-authenticate"]),
                (405, _) => assert_eq!(names, ["allow"]),
                // A conflict with the data stays until the data changes: no time to retry in.
                (409, Error::Conflict { .. }) => assert_eq!(names, [] as [&str; 0]),
                (409 | 503, _) => assert_eq!(names, ["retry-after"]),
                (415, Error::UnsupportedPatchType) => assert_eq!(names, ["accept-patch"]),
                (429, _) => assert_eq!(names, ["retry-after", "ratelimit-policy", "ratelimit"]),
                _ => assert_eq!(names, [] as [&str; 0], "{error:?}"),
            }
        }
    }

    #[test]
    fn a_429_says_when_to_retry_in_whole_seconds_and_names_its_policy() {
        let error = Error::RateLimited(REFUSAL);
        let headers = error.headers();
        let values: Vec<&str> = headers
            .iter()
            .map(|(_, value)| value.to_str().expect("ASCII"))
            .collect();
        assert_eq!(
            values,
            ["2", r#""per-key";q=200;w=1"#, r#""per-key";r=0;t=2"#]
        );
        assert_eq!(
            error.message(),
            "too many requests: this API key may make 200/s; retry after 2 seconds"
        );
        let soon = Refusal {
            wait: Duration::from_millis(3),
            ..REFUSAL
        };
        assert_eq!(soon.wait_secs(), 1);
        let now = Refusal {
            wait: Duration::ZERO,
            ..REFUSAL
        };
        assert_eq!(now.wait_secs(), 1);
    }
}
