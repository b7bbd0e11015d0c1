//! Requests: `App` takes each request through the auth gate and the route table (the list in
//! `operations`) to `api::serve` (the one `match` on the operation, which calls its handler),
//! turns the handler's `Result<Reply, Error>` into a response in one place, and writes one log
//! line for it. It knows no sockets, TLS or tables. Invariant: every answer, error or not, is
//! JSON with the right status; nothing a client sends makes it panic.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Body as _;
use hyper::body::Incoming;
use hyper::header::{
    AUTHORIZATION, CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, ETAG, HOST, HeaderMap, HeaderValue,
    STRICT_TRANSPORT_SECURITY, TRANSFER_ENCODING, X_CONTENT_TYPE_OPTIONS,
};
use hyper::http::request::Parts;
use hyper::{Method, Request, Response, StatusCode, Version};

use crate::api::{self, Reply};
use crate::auth::{AuthFailure, Keys};
use crate::console::{Console, Place, session};
use crate::error::Error;
use crate::feed::{Feed, Frames};
use crate::metrics;
use crate::operations::{self, Op};
use crate::ratelimit::RateLimits;
use crate::store::Store;

/// The OpenAPI document, the one `/v1` path served without a key.
const OPENAPI_PATH: &str = Op::GetOpenApi.spec().template;
/// Strict-Transport-Security on every answer (RFC 6797): one year.
const HSTS: HeaderValue = HeaderValue::from_static("max-age=31536000");
const NOSNIFF: HeaderValue = HeaderValue::from_static("nosniff");
const JSON: HeaderValue = HeaderValue::from_static("application/json");
/// Room in a response's header map from the start, above the most a common answer carries (a
/// getPet 200: 7 here, and Content-Length over HTTP/2). Starting empty, the map grew at the
/// 7th field of every getPet answer: another allocation and a rehash. A rarer answer with more
/// (429 with its rate-limit fields) still grows it.
const RESPONSE_FIELDS: usize = 12;

/// The fields an answer starts with, built once for each kind: with content or not, answering
/// getPet or not, with an ETag or not (`starting_fields`). Each answer clones one: two small
/// copies, where inserting the fields one by one hashed each name (the clone saved a getPet
/// about 600 instructions; callgrind). Built with room for `RESPONSE_FIELDS`: a clone keeps the
/// index table of that size, so fields added to it need no rehash. An ETag has its place kept
/// (its value is set over a placeholder): appended, it grew the clone's entry list, a
/// reallocation of 520 instructions.
static STARTING_FIELDS: LazyLock<[HeaderMap; 8]> = LazyLock::new(|| {
    std::array::from_fn(|kind| {
        let (has_content, get_pet, has_etag) = (kind & 4 != 0, kind & 2 != 0, kind & 1 != 0);
        let mut fields = HeaderMap::with_capacity(RESPONSE_FIELDS);
        if has_content {
            fields.insert(CONTENT_TYPE, JSON);
        }
        // The API is only ever served over TLS: tell browsers and HTTP clients that keep HSTS
        // state never to try plain HTTP to this host for a year. Not `includeSubDomains`: the
        // API's host does not speak for its siblings.
        fields.insert(STRICT_TRANSPORT_SECURITY, HSTS);
        // An error message may echo the request's path, and a pet's name is a client's text:
        // no browser may read a JSON body as HTML.
        fields.insert(X_CONTENT_TYPE_OPTIONS, NOSNIFF);
        if get_pet {
            fields.extend(api::pets::deprecation_headers());
        }
        if has_etag {
            fields.insert(ETAG, HeaderValue::from_static("\"\""));
        }
        fields
    })
});

/// A clone of the starting fields of an answer of this kind.
fn starting_fields(has_content: bool, get_pet: bool, has_etag: bool) -> HeaderMap {
    let kind = usize::from(has_content) << 2 | usize::from(get_pet) << 1 | usize::from(has_etag);
    STARTING_FIELDS[kind].clone()
}

/// Header fields a request may carry, and their total size (names, values and separators).
const MAX_HEADER_FIELDS: usize = 64;
const MAX_HEADER_BYTES: usize = 16 * 1024;

/// How often each key may draw the deprecated-getPet warning: enough to find the clients to
/// migrate, without a second log line on every call (the request line has every call).
const DEPRECATION_WARNING_INTERVAL: Duration = Duration::from_secs(3600);

thread_local! {
    /// The key label this worker thread last looked up for the deprecated-getPet warning, and
    /// the earliest time that label can draw it again (`App::warn_deprecated`).
    static NEXT_DUE: RefCell<Option<(Arc<str>, Instant)>> = const { RefCell::new(None) };
}

/// Everything a request may need, behind one `Arc`: each connection clones it for every
/// request, and one reference count costs less than one for each handle inside (the store's
/// three, the keys, the limits, the warnings).
#[derive(Clone)]
pub struct App(Arc<Shared>);

struct Shared {
    store: Store,
    keys: Arc<Keys>,
    limits: RateLimits,
    /// When each key label last drew the deprecated-getPet warning.
    warned: Mutex<HashMap<Arc<str>, Instant>>,
    /// A request body must arrive whole within this.
    body_timeout: Duration,
    /// The certificate's part of `/healthz`, when it comes from ACME.
    certificate_health: Option<api::CertificateHealth>,
    /// The event feed's live streams.
    feed: Feed,
    /// The staff console and its sessions; `None` with `--no-console`.
    console: Option<Console>,
}

/// An operation, chosen by method and path, with its path's parameter (an id, checked by the
/// operation; empty when the template has none).
struct Route<'a> {
    op: Op,
    id: &'a str,
}

impl App {
    pub fn new(
        store: Store,
        keys: Arc<Keys>,
        limits: RateLimits,
        body_timeout: Duration,
        certificate_health: Option<api::CertificateHealth>,
        feed: Feed,
        console: Option<Console>,
    ) -> App {
        App(Arc::new(Shared {
            feed,
            console,
            store,
            keys,
            limits,
            warned: Mutex::default(),
            body_timeout,
            certificate_health,
        }))
    }

    /// Answers one request; never fails, since every failure is itself an answer.
    pub async fn handle(&self, request: Request<Incoming>, peer: &str) -> Response<Body> {
        let started = Instant::now();
        let (parts, body) = request.into_parts();
        let (method, version, path) = (&parts.method, parts.version, parts.uri.path());
        // With the line at the end, this one shows requests that are slow or never finish.
        tracing::debug!(method = method.as_str(), path, peer, "request started");
        let place = self
            .0
            .console
            .as_ref()
            .and_then(|console| console.place(path));
        let routed = route(method, path);
        let template = match (place, &routed) {
            (Some(Place::Session), _) => metrics::Route::ConsoleSession,
            (Some(_), _) => metrics::Route::Console,
            // Routed: its operation knows its path, without matching the path again.
            (None, Ok(route)) => metrics::Route::Api(route.op.path()),
            (None, Err(_)) => route_template(path),
        };
        let op = routed.as_ref().ok().map(|route| route.op);
        let deprecated = op == Some(Op::GetPet);
        let health = op == Some(Op::Health);
        let mut label = None;

        let result = match place {
            Some(place) => Box::pin(self.console(&parts, body, place, peer, &mut label)).await,
            None => self.dispatch(&parts, body, routed, peer, &mut label).await,
        };
        if let Err(e) = &result
            && let Some(cause) = e.cause()
        {
            tracing::error!(%method, %path, cause, "request failed");
        }
        let mut response = into_response(result, deprecated, version);
        // 204 and 304 have no content to measure (RFC 9110 8.6, 15.4.5).
        let has_content = !matches!(
            response.status(),
            StatusCode::NO_CONTENT | StatusCode::NOT_MODIFIED
        );
        if method == Method::HEAD && has_content {
            // RFC 9110 9.3.2: HEAD gets GET's headers, Content-Length included, and no content.
            // hyper drops the body of an HTTP/1.1 HEAD answer but sends it over HTTP/2.
            let length = HeaderValue::from(response.body().size_hint().exact().unwrap_or(0));
            response.headers_mut().insert(CONTENT_LENGTH, length);
            *response.body_mut() = Body::Whole(Full::new(Bytes::new()));
        }

        let status = response.status().as_u16();
        let elapsed = started.elapsed();
        metrics::request(template, method, status, elapsed);
        let duration_us = elapsed.as_micros() as u64;
        let key = label.as_deref().unwrap_or("-");
        // Fields as `&str` and integers, the message too: `log_format` writes those without
        // `core::fmt` (a message given as a format string is a `fmt::Arguments`, written
        // through it: 90 instructions more a line; callgrind).
        let (method, protocol) = (method.as_str(), protocol_name(version));
        // Probes poll every few seconds; at info they would drown the lines that matter.
        if health {
            tracing::debug!(
                message = "request",
                method,
                path,
                status,
                duration_us,
                protocol,
                peer,
                key,
            );
        } else {
            tracing::info!(
                message = "request",
                method,
                path,
                status,
                duration_us,
                protocol,
                peer,
                key,
            );
        }
        if deprecated && let Some(label) = &label {
            // The request's own end, rather than another read of the clock.
            self.warn_deprecated(label, started + elapsed);
        }
        response
    }

    fn warn_deprecated(&self, key: &Arc<str>, now: Instant) {
        // Most calls come long before their key's next warning is due. Each worker thread
        // remembers the last key it looked up and when that key is due at the earliest (a
        // key's due time only ever moves later), so those calls skip the lock and the hash of
        // the shared map: that was 1% of a getPet's CPU (perf). Holding the `Arc` keeps the
        // label alive, so a new label can never reuse its address.
        let not_yet = NEXT_DUE.with_borrow(|next| {
            next.as_ref()
                .is_some_and(|(label, due)| Arc::ptr_eq(label, key) && now < *due)
        });
        if not_yet {
            return;
        }
        let mut warned = self.0.warned.lock().unwrap_or_else(PoisonError::into_inner);
        let last = match warned.get(key) {
            Some(&last) if now.duration_since(last) < DEPRECATION_WARNING_INTERVAL => last,
            _ => {
                warned.insert(Arc::clone(key), now);
                tracing::warn!(%key, "deprecated getPet called: this client should move to listPets with status");
                now
            }
        };
        drop(warned);
        let due = last + DEPRECATION_WARNING_INTERVAL;
        NEXT_DUE.with_borrow_mut(|next| *next = Some((Arc::clone(key), due)));
    }

    async fn dispatch(
        &self,
        parts: &Parts,
        body: Incoming,
        routed: Result<Route<'_>, Error>,
        peer: &str,
        label: &mut Option<Arc<str>>,
    ) -> Result<Reply, Error> {
        check_framing(parts)?;
        let mut caller = None;
        // Auth comes before routing, so without a key nothing under /v1 reveals what exists.
        if needs_key(parts.uri.path()) {
            let credentials = parts
                .headers
                .get_all(AUTHORIZATION)
                .iter()
                .map(HeaderValue::as_bytes);
            // A console's session stands for a key only where no key is sent.
            let session = match (&self.0.console, parts.headers.contains_key(AUTHORIZATION)) {
                (Some(console), false) => {
                    session::cookie_token(&parts.headers).map(|token| (console, token))
                }
                _ => None,
            };
            let checked = match session {
                Some((console, token)) => {
                    let caller = console.sessions.caller(token).await?;
                    if !session::same_origin(parts) {
                        *label = Some(Arc::clone(&caller.label));
                        return Err(Error::CrossOrigin);
                    }
                    Ok(caller)
                }
                None => self.0.keys.check(credentials),
            };
            let checked = match checked {
                Ok(checked) => checked,
                Err(failure) => return Err(self.refused(failure, peer, label)),
            };
            *label = Some(Arc::clone(&checked.label));
            self.0
                .limits
                .check_key(&checked.label)
                .map_err(Error::RateLimited)?;
            caller = Some(checked);
        }
        let Route { op, id } = routed?;
        // After routing, so a read-only key still learns of a 404 or 405 like any other.
        if caller.as_ref().is_some_and(|caller| caller.read_only)
            && let Some(what) = op.writes()
        {
            return Err(Error::Forbidden { what });
        }
        let call = api::Call {
            store: &self.0.store,
            caller,
            headers: &parts.headers,
            body,
            id,
            query: parts.uri.query(),
            head: parts.method == Method::HEAD,
            body_timeout: self.0.body_timeout,
            feed: &self.0.feed,
            keys: &self.0.keys,
            certificate_health: self.0.certificate_health,
        };
        api::serve(op, call).await
    }
}

impl App {
    /// The answer to a key that was refused (a bearer key, or a console's sign-in).
    fn refused(&self, failure: AuthFailure, peer: &str, label: &mut Option<Arc<str>>) -> Error {
        match failure {
            // Only a key that is not valid counts against its address, so the limit can slow
            // a key guesser but never refuse a valid key, whoever shares the address.
            AuthFailure::Invalid => match self.0.limits.check_auth_failure(peer) {
                Ok(()) => AuthFailure::Invalid.into(),
                Err(refusal) => Error::RateLimited(refusal),
            },
            // A key that expired is one we issued, not a guess: it names its holder in the
            // log and does not count against the address.
            AuthFailure::Expired { label: expired } => {
                *label = Some(Arc::clone(&expired));
                AuthFailure::Expired { label: expired }.into()
            }
            failure => failure.into(),
        }
    }

    /// A request under the console's prefix: its page and files, or its session.
    async fn console(
        &self,
        parts: &Parts,
        body: Incoming,
        place: Place<'_>,
        peer: &str,
        label: &mut Option<Arc<str>>,
    ) -> Result<Reply, Error> {
        check_framing(parts)?;
        let Some(console) = &self.0.console else {
            return Err(Error::NotFound("no console here".into()));
        };
        let headers = &parts.headers;
        let mut reply = match (place, &parts.method) {
            (Place::Session, &Method::POST) => {
                if !session::same_origin(parts) {
                    return Err(Error::CrossOrigin);
                }
                let timeout = self.0.body_timeout;
                match session::sign_in_request(&console.sessions, headers, body, timeout).await {
                    Ok(reply) => reply,
                    // A sign-in's key is refused as a bearer key is.
                    Err(Ok(failure)) => return Err(self.refused(failure, peer, label)),
                    Err(Err(e)) => return Err(e),
                }
            }
            (Place::Session, &Method::GET | &Method::HEAD) => {
                session::session_request(&console.sessions, headers).await?
            }
            (Place::Session, &Method::DELETE) => {
                if !session::same_origin(parts) {
                    return Err(Error::CrossOrigin);
                }
                session::sign_out_request(&console.sessions, headers).await?
            }
            (place, method) => console.serve(place, method, headers)?,
        };
        if matches!(place, Place::Session) {
            reply.headers.extend(crate::console::locked_down());
        }
        Ok(reply)
    }
}

/// The version as the request line logs it.
fn protocol_name(version: Version) -> &'static str {
    match version {
        Version::HTTP_09 => "HTTP/0.9",
        Version::HTTP_10 => "HTTP/1.0",
        Version::HTTP_11 => "HTTP/1.1",
        Version::HTTP_2 => "HTTP/2.0",
        Version::HTTP_3 => "HTTP/3.0",
        _ => "HTTP/?",
    }
}

fn needs_key(path: &str) -> bool {
    path != OPENAPI_PATH && (path == "/v1" || path.starts_with("/v1/"))
}

/// The route table's answer (`operations::OPERATIONS`): the operation, a 404, or a 405 with
/// the methods the path has.
fn route<'a>(method: &Method, path: &'a str) -> Result<Route<'a>, Error> {
    let Some((at, id)) = operations::find(path) else {
        return Err(Error::NotFound(format!("no resource at {path}")));
    };
    match at.operation(method) {
        Some(op) => Ok(Route { op, id }),
        None => Err(Error::MethodNotAllowed { allow: at.allow() }),
    }
}

/// The route template a path falls under, for the metrics: by path alone, so a 405 still
/// counts under the resource it asked for.
fn route_template(path: &str) -> metrics::Route {
    operations::find(path).map_or(metrics::Route::Unmatched, |(at, _)| metrics::Route::Api(at))
}

fn into_response(
    result: Result<Reply, Error>,
    deprecated: bool,
    version: Version,
) -> Response<Body> {
    // HTTP/2 has no Connection header (RFC 9113 8.2.2): each stream stands alone.
    let close = matches!(&result, Err(e) if e.closes_connection()) && version < Version::HTTP_2;
    let reply = result.unwrap_or_else(|error| Reply {
        status: error.status(),
        body: Bytes::from(error.json()),
        etag: None,
        headers: error.headers(),
        stream: None,
    });
    let has_content = !matches!(
        reply.status,
        StatusCode::NO_CONTENT | StatusCode::NOT_MODIFIED
    );
    let body = match reply.stream {
        None => Body::Whole(Full::new(reply.body)),
        Some(frames) => Body::Stream { frames, held: None },
    };
    let mut response = Response::new(body);
    *response.status_mut() = reply.status;
    let headers = response.headers_mut();
    *headers = starting_fields(has_content, deprecated, reply.etag.is_some());
    if let Some(etag) = reply.etag {
        headers.insert(ETAG, etag);
    }
    for (name, value) in reply.headers {
        // An operation's own Content-Type (an event stream's) replaces the JSON one.
        if name == CONTENT_TYPE {
            headers.insert(name, value);
        } else {
            headers.append(name, value);
        }
    }
    if close {
        headers.insert(CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// An answer's body: whole, or an event stream's frames as they come.
pub enum Body {
    Whole(Full<Bytes>),
    Stream {
        frames: Frames,
        /// What must live as long as the stream: the connection's count of requests in
        /// flight, so that a connection with an open stream is never taken for idle.
        held: Option<Box<dyn Send + Sync>>,
    },
}

impl Body {
    /// Keeps `guard` until the body ends, if it is a stream; drops it now otherwise.
    pub fn hold(&mut self, guard: impl Send + Sync + 'static) {
        if let Body::Stream { held, .. } = self {
            *held = Some(Box::new(guard));
        }
    }
}

impl hyper::body::Body for Body {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        match self.get_mut() {
            Body::Whole(whole) => std::pin::Pin::new(whole).poll_frame(cx),
            Body::Stream { frames, .. } => frames
                .poll_recv(cx)
                .map(|frame| frame.map(|bytes| Ok(hyper::body::Frame::data(*bytes)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Body::Whole(whole) => whole.is_end_stream(),
            Body::Stream { .. } => false,
        }
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        match self {
            Body::Whole(whole) => whole.size_hint(),
            Body::Stream { .. } => hyper::body::SizeHint::default(),
        }
    }
}

/// HTTP's own rules for a request hyper parsed, checked before anything else reads it: RFC
/// 9112 3.2 (an HTTP/1.1 request has a Host), our bound on header size, one Content-Length,
/// and no transfer coding but `chunked` (RFC 9112 6.1: hyper frames `gzip, chunked` by its
/// last coding, and we would read gzip as JSON). hyper has already refused, with its own
/// bodiless 400, the heads it cannot frame (differing Content-Lengths, an unknown last coding);
/// with both Transfer-Encoding and Content-Length it framed by the first and closes after the
/// answer, so nothing can be smuggled behind it. The Content-Length check covers HTTP/2, where
/// a repeat reaches us.
fn check_framing(parts: &Parts) -> Result<(), Error> {
    let headers = &parts.headers;
    let bytes: usize = headers
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 4)
        .sum();
    if headers.len() > MAX_HEADER_FIELDS || bytes > MAX_HEADER_BYTES {
        return Err(Error::HeadersTooLarge {
            max_fields: MAX_HEADER_FIELDS,
            max_bytes: MAX_HEADER_BYTES,
        });
    }
    if parts.version == Version::HTTP_11 && !headers.contains_key(HOST) {
        return Err(Error::InvalidRequest(
            "HTTP/1.1 requests must carry a Host header",
        ));
    }
    let mut codings = headers.get_all(TRANSFER_ENCODING).iter();
    if let Some(coding) = codings.next()
        && (codings.next().is_some() || !coding.as_bytes().eq_ignore_ascii_case(b"chunked"))
    {
        return Err(Error::InvalidRequest(
            "Transfer-Encoding must be given once, as exactly chunked",
        ));
    }
    if headers.get_all(CONTENT_LENGTH).iter().count() > 1 {
        return Err(Error::REPEATED_CONTENT_LENGTH);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_route_table_answers_404_and_405_with_allow() {
        assert!(matches!(
            route(&Method::GET, "/v1/pets"),
            Ok(Route {
                op: Op::ListPets,
                ..
            })
        ));
        assert!(matches!(
            route(&Method::HEAD, "/v1/pets"),
            Ok(Route {
                op: Op::ListPets,
                ..
            })
        ));
        assert!(matches!(
            route(&Method::POST, "/v1/pets"),
            Ok(Route {
                op: Op::CreatePet,
                ..
            })
        ));
        assert!(matches!(
            route(&Method::GET, "/v1/pets/12"),
            Ok(Route {
                op: Op::GetPet,
                id: "12"
            })
        ));
        assert!(matches!(
            route(&Method::GET, "/v1/openapi.json"),
            Ok(Route {
                op: Op::GetOpenApi,
                ..
            })
        ));
        assert!(matches!(
            route(&Method::GET, "/healthz"),
            Ok(Route { op: Op::Health, .. })
        ));
        for path in [
            "/",
            "/v1",
            "/v1/",
            "/v1/pets/",
            "/v1/pets/1/x",
            "/v2/pets",
            "/v1/petsx",
        ] {
            assert!(
                matches!(route(&Method::GET, path), Err(Error::NotFound(_))),
                "{path}"
            );
        }
        let allowed = |method: Method, path| match route(&method, path) {
            Err(Error::MethodNotAllowed { allow }) => allow,
            _ => "",
        };
        assert_eq!(allowed(Method::DELETE, "/v1/pets"), "GET, HEAD, POST");
        assert_eq!(
            allowed(Method::POST, "/v1/pets/1"),
            "GET, HEAD, PATCH, DELETE"
        );
        assert_eq!(
            allowed(Method::PUT, "/v1/pets/1"),
            "GET, HEAD, PATCH, DELETE"
        );
        assert!(matches!(
            route(&Method::PATCH, "/v1/pets/12"),
            Ok(Route {
                op: Op::PatchPet,
                id: "12"
            })
        ));
        assert!(matches!(
            route(&Method::DELETE, "/v1/pets/12"),
            Ok(Route {
                op: Op::DeletePet,
                id: "12"
            })
        ));
        assert_eq!(allowed(Method::POST, "/healthz"), "GET, HEAD");
    }

    #[test]
    fn orders_categories_and_the_inventory_have_their_routes_and_allow() {
        let routed = |method: Method, path| route(&method, path);
        assert!(matches!(
            routed(Method::POST, "/v1/store/orders"),
            Ok(Route {
                op: Op::PlaceOrder,
                ..
            })
        ));
        assert!(matches!(
            routed(Method::HEAD, "/v1/store/orders"),
            Ok(Route {
                op: Op::ListOrders,
                ..
            })
        ));
        assert!(matches!(
            routed(Method::GET, "/v1/store/orders/7"),
            Ok(Route {
                op: Op::GetOrder,
                id: "7"
            })
        ));
        assert!(matches!(
            routed(Method::POST, "/v1/store/orders/x/complete"),
            Ok(Route {
                op: Op::CompleteOrder,
                id: "x"
            })
        ));
        assert!(matches!(
            routed(Method::POST, "/v1/store/orders/7/cancel"),
            Ok(Route {
                op: Op::CancelOrder,
                id: "7"
            })
        ));
        assert!(matches!(
            routed(Method::GET, "/v1/store/inventory"),
            Ok(Route {
                op: Op::GetInventory,
                ..
            })
        ));
        assert!(matches!(
            routed(Method::GET, "/v1/categories"),
            Ok(Route {
                op: Op::ListCategories,
                ..
            })
        ));
        assert!(matches!(
            routed(Method::POST, "/v1/categories"),
            Ok(Route {
                op: Op::CreateCategory,
                ..
            })
        ));
        assert!(matches!(
            routed(Method::HEAD, "/v1/categories/3"),
            Ok(Route {
                op: Op::GetCategory,
                id: "3"
            })
        ));
        assert!(matches!(
            routed(Method::PATCH, "/v1/categories/3"),
            Ok(Route {
                op: Op::PatchCategory,
                id: "3"
            })
        ));
        assert!(matches!(
            routed(Method::DELETE, "/v1/categories/3"),
            Ok(Route {
                op: Op::DeleteCategory,
                id: "3"
            })
        ));
        let allowed = |method: Method, path| match route(&method, path) {
            Err(Error::MethodNotAllowed { allow }) => allow,
            _ => "",
        };
        for (method, path, allow) in [
            (Method::DELETE, "/v1/store/orders", "GET, HEAD, POST"),
            (Method::POST, "/v1/store/orders/1", "GET, HEAD"),
            (Method::DELETE, "/v1/store/orders/1", "GET, HEAD"),
            (Method::GET, "/v1/store/orders/1/complete", "POST"),
            (Method::PUT, "/v1/store/orders/1/cancel", "POST"),
            (Method::POST, "/v1/store/inventory", "GET, HEAD"),
            (Method::PATCH, "/v1/categories", "GET, HEAD, POST"),
            (Method::POST, "/v1/categories/1", "GET, HEAD, PATCH, DELETE"),
        ] {
            assert_eq!(allowed(method.clone(), path), allow, "{method} {path}");
        }
        for path in [
            "/v1/store",
            "/v1/store/",
            "/v1/store/orders/",
            "/v1/store/orders/1/",
            "/v1/store/orders/1/x",
            "/v1/store/orders//complete",
            "/v1/store/orders/1/complete/",
            "/v1/store/orders/1/cancel/x",
            "/v1/store/ordersx",
            "/v1/store/inventory/",
            "/v1/categories/",
            "/v1/categories/1/x",
            "/v1/categoriesx",
        ] {
            for method in [Method::GET, Method::POST] {
                assert!(
                    matches!(route(&method, path), Err(Error::NotFound(_))),
                    "{method} {path}"
                );
            }
        }
    }

    #[test]
    fn every_write_and_only_a_write_is_forbidden_to_a_read_only_key() {
        let writes = |method: Method, path| match route(&method, path) {
            Ok(route) => route.op.writes(),
            Err(e) => panic!("{method} {path}: {e:?}"),
        };
        for (method, path, what) in [
            (Method::POST, "/v1/pets", "pets"),
            (Method::PATCH, "/v1/pets/1", "pets"),
            (Method::DELETE, "/v1/pets/1", "pets"),
            (Method::POST, "/v1/store/orders", "orders"),
            (Method::POST, "/v1/store/orders/1/complete", "orders"),
            (Method::POST, "/v1/store/orders/1/cancel", "orders"),
            (Method::POST, "/v1/categories", "categories"),
            (Method::PATCH, "/v1/categories/1", "categories"),
            (Method::DELETE, "/v1/categories/1", "categories"),
        ] {
            assert_eq!(writes(method.clone(), path), Some(what), "{method} {path}");
        }
        for path in [
            "/v1/pets",
            "/v1/pets/1",
            "/v1/events",
            "/v1/store/orders",
            "/v1/store/orders/1",
            "/v1/store/inventory",
            "/v1/categories",
            "/v1/categories/1",
            OPENAPI_PATH,
            "/healthz",
        ] {
            for method in [Method::GET, Method::HEAD] {
                assert_eq!(writes(method.clone(), path), None, "{method} {path}");
            }
        }
    }

    #[test]
    fn metrics_count_by_route_template_never_by_raw_path() {
        use metrics::Route as Template;
        let label = |path| match route_template(path) {
            Template::Api(at) => operations::PATHS[at.index()],
            other => panic!("{path}: {other:?}"),
        };
        assert_eq!(label("/v1/pets"), "/v1/pets");
        assert_eq!(label("/v1/pets/12"), "/v1/pets/{petId}");
        assert_eq!(label("/v1/pets/not-an-id"), "/v1/pets/{petId}");
        assert_eq!(label(OPENAPI_PATH), "/v1/openapi.json");
        assert_eq!(label("/healthz"), "/healthz");
        for (path, template) in [
            ("/v1/events", "/v1/events"),
            ("/v1/store/orders", "/v1/store/orders"),
            ("/v1/store/orders/12", "/v1/store/orders/{orderId}"),
            (
                "/v1/store/orders/x/complete",
                "/v1/store/orders/{orderId}/complete",
            ),
            (
                "/v1/store/orders/12/cancel",
                "/v1/store/orders/{orderId}/cancel",
            ),
            ("/v1/store/inventory", "/v1/store/inventory"),
            ("/v1/categories", "/v1/categories"),
            ("/v1/categories/dogs", "/v1/categories/{categoryId}"),
        ] {
            assert_eq!(label(path), template, "{path}");
        }
        for path in [
            "/v1/store/orders/1/x",
            "/v1/store/orders/",
            "/v1/categories/1/x",
            "/",
            "/v1",
            "/v1/pets/",
            "/v1/pets/1/x",
            "/v1/petsx",
            "/metrics",
        ] {
            assert_eq!(route_template(path), Template::Unmatched, "{path}");
        }
    }

    #[test]
    fn every_answer_starts_with_the_fields_of_its_kind() {
        let names = |result: Result<Reply, Error>, get_pet: bool| {
            let response = into_response(result, get_pet, Version::HTTP_11);
            let names: Vec<String> = response.headers().keys().map(|n| n.to_string()).collect();
            names.join(" ")
        };
        let pet = || Reply {
            status: StatusCode::OK,
            body: Bytes::from_static(b"{}"),
            etag: Some(HeaderValue::from_static("\"1.1\"")),
            headers: Vec::new(),
            stream: None,
        };
        let common = "strict-transport-security x-content-type-options";
        let deprecation = "deprecation sunset link";
        assert_eq!(
            names(Ok(pet()), true),
            format!("content-type {common} {deprecation} etag")
        );
        assert_eq!(
            names(Ok(pet()), false),
            format!("content-type {common} etag")
        );
        let no_content = |status| Reply {
            status,
            body: Bytes::new(),
            etag: None,
            headers: Vec::new(),
            stream: None,
        };
        assert_eq!(names(Ok(no_content(StatusCode::NO_CONTENT)), false), common);
        assert_eq!(
            names(Ok(no_content(StatusCode::NOT_MODIFIED)), true),
            format!("{common} {deprecation}")
        );
        // A 304 stands for the 200: its ETag is the pet's, never the placeholder.
        let not_modified = Reply {
            etag: Some(HeaderValue::from_static("\"7.2\"")),
            ..no_content(StatusCode::NOT_MODIFIED)
        };
        let etags = |reply: Reply, get_pet: bool, version: Version| {
            let response = into_response(Ok(reply), get_pet, version);
            let etags: Vec<_> = response.headers().get_all(ETAG).iter().cloned().collect();
            etags
        };
        assert_eq!(etags(not_modified, true, Version::HTTP_2), ["\"7.2\""]);
        assert_eq!(etags(pet(), false, Version::HTTP_11), ["\"1.1\""]);
        assert_eq!(
            names(Err(Error::NotFound("no pet".into())), true),
            format!("content-type {common} {deprecation}")
        );
        // A clone of a starting map, not the map: one answer's fields never reach the next.
        assert_eq!(names(Ok(no_content(StatusCode::NO_CONTENT)), false), common);
    }

    #[test]
    fn only_v1_paths_but_the_openapi_document_need_a_key() {
        assert!(needs_key("/v1/pets") && needs_key("/v1") && needs_key("/v1/nothing"));
        assert!(
            !needs_key(OPENAPI_PATH)
                && !needs_key("/")
                && !needs_key("/v1x")
                && !needs_key("/healthz")
        );
    }
}
