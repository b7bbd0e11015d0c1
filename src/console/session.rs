//! Console sessions (issue 31): a member of staff signs in with an API key once; the browser
//! then holds only a random token in a `__Host-` cookie (`HttpOnly`, `Secure`,
//! `SameSite=Strict`), and the store keeps the token's hash with the key's hash, so a session
//! works on any instance and survives a restart. Each use checks the key against the keys in
//! force, so a key revoked (and reloaded) or expired ends its sessions at the next request, and
//! a session unused for `--session-idle` ends. The cross-origin check for unsafe requests made
//! with a session is here too (`same_origin`).
//! Invariants: the key never leaves the sign-in request; the token is never logged or kept,
//! only its SHA-256.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use bytes::Bytes;
use hyper::header::{
    CACHE_CONTROL, CONTENT_TYPE, COOKIE, HOST, HeaderMap, HeaderValue, ORIGIN, SET_COOKIE,
};
use hyper::http::request::Parts;
use hyper::{Method, StatusCode, Version};
use sha2::{Digest, Sha256};

use crate::api::Reply;
use crate::auth::{AuthFailure, Caller, Keys, decode_hash, encode_hex};
use crate::error::Error;
use crate::store::{SessionRecord, SessionsGone, Store};

/// The cookie's name: `__Host-` makes browsers take it only from a secure origin, for `/`, with
/// no `Domain`, so no other host or path can set or shadow it.
pub const COOKIE_NAME: &str = "__Host-petstore-session";
/// How long a session read from the store is taken as it is before it is read again: the
/// bound on how late another instance's sign-out is seen here.
const CACHE_FOR: Duration = Duration::from_secs(30);
/// A session's last use is written to the store at most this often, not at every request.
const TOUCH_EVERY: Duration = Duration::from_secs(60);
/// Sessions kept in memory before the stale ones are dropped.
const CACHE_MOST: usize = 10_000;
/// How often sessions idle past `--session-idle` are removed from the store.
const PURGE_EVERY: Duration = Duration::from_secs(600);

/// The sessions of this process, in front of the store's.
pub struct Sessions {
    store: Store,
    keys: Arc<Keys>,
    idle: Duration,
    cache: Mutex<HashMap<[u8; 32], Cached>>,
}

struct Cached {
    record: SessionRecord,
    read_at: Instant,
}

/// A session just opened: who it admits, and the cookie that carries it.
pub struct SignedIn {
    pub caller: Caller,
    pub cookie: HeaderValue,
}

impl Sessions {
    pub fn new(store: Store, keys: Arc<Keys>, idle: Duration) -> Arc<Sessions> {
        let sessions = Arc::new(Sessions {
            store,
            keys,
            idle,
            cache: Mutex::new(HashMap::new()),
        });
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(purge_idle(Arc::downgrade(&sessions)));
        }
        sessions
    }

    /// Opens a session for the holder of `key`: `Err(Ok(failure))` when the key admits
    /// nobody, `Err(Err(error))` when the store could not keep the session.
    pub async fn sign_in(&self, key: &[u8]) -> Result<SignedIn, Result<AuthFailure, Error>> {
        let caller = self.keys.check_key(key).map_err(Ok)?;
        let mut token = [0u8; 32];
        getrandom::fill(&mut token)
            .map_err(|e| Err(Error::Internal(format!("no random token: {e}"))))?;
        let token = URL_SAFE_NO_PAD.encode(token);
        let now = crate::store::events::now_ms();
        let record = SessionRecord {
            key: encode_hex(&caller.key_hash),
            created_ms: now,
            used_ms: now,
        };
        let hash = token_hash(&token);
        let cookie = set_cookie(&token).map_err(Err)?;
        self.store
            .save_session(hash, record.clone())
            .await
            .map_err(|e| Err(Error::from(e)))?;
        self.remember(hash, record);
        Ok(SignedIn { caller, cookie })
    }

    /// Who the session with this cookie token admits now.
    pub async fn caller(&self, token: &str) -> Result<Caller, Error> {
        let hash = token_hash(token);
        let now = crate::store::events::now_ms();
        let cached = {
            let cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
            cache
                .get(&hash)
                .filter(|c| c.read_at.elapsed() < CACHE_FOR)
                .map(|c| c.record.clone())
        };
        let record = match cached {
            Some(record) => record,
            None => match self.store.session(hash).await? {
                Some(record) => {
                    self.remember(hash, record.clone());
                    record
                }
                None => {
                    self.forget(&hash);
                    return Err(ended());
                }
            },
        };
        let idle_ms = u64::try_from(self.idle.as_millis()).unwrap_or(u64::MAX);
        if now.saturating_sub(record.used_ms) > idle_ms {
            self.end(hash).await;
            return Err(ended());
        }
        let Ok(key_hash) = decode_hash(&record.key) else {
            self.end(hash).await;
            return Err(ended());
        };
        let caller = match self.keys.by_hash(&key_hash) {
            Ok(caller) => caller,
            Err(_) => {
                self.end(hash).await;
                return Err(ended());
            }
        };
        let touch_ms = u64::try_from(TOUCH_EVERY.as_millis()).unwrap_or(u64::MAX);
        if now.saturating_sub(record.used_ms) >= touch_ms {
            let touched = SessionRecord {
                used_ms: now,
                ..record
            };
            self.remember(hash, touched.clone());
            // A failed touch costs at most a session that ends a minute early.
            if let Err(e) = self.store.save_session(hash, touched).await {
                tracing::warn!(error = %e, "recording a console session's use failed");
            }
        }
        Ok(caller)
    }

    /// Ends the session with this cookie token (signing out).
    pub async fn sign_out(&self, token: &str) -> Result<(), Error> {
        let hash = token_hash(token);
        self.forget(&hash);
        self.store.remove_sessions(SessionsGone::One(hash)).await?;
        Ok(())
    }

    /// Ends a session that admits nobody now; a failure leaves it to the idle purge.
    async fn end(&self, hash: [u8; 32]) {
        self.forget(&hash);
        if let Err(e) = self.store.remove_sessions(SessionsGone::One(hash)).await {
            tracing::warn!(error = %e, "removing an ended console session failed");
        }
    }

    fn remember(&self, hash: [u8; 32], record: SessionRecord) {
        let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        if cache.len() >= CACHE_MOST {
            cache.retain(|_, c| c.read_at.elapsed() < CACHE_FOR);
        }
        cache.insert(
            hash,
            Cached {
                record,
                read_at: Instant::now(),
            },
        );
    }

    fn forget(&self, hash: &[u8; 32]) {
        self.cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(hash);
    }
}

/// `POST {console}/session`: `{"key": "..."}` in, who it admits out, and the cookie.
/// `Err(Ok(failure))` for a key that admits nobody (the caller counts it against the address).
pub async fn sign_in_request(
    sessions: &Sessions,
    headers: &HeaderMap,
    body: hyper::body::Incoming,
    body_timeout: Duration,
) -> Result<Reply, Result<AuthFailure, Error>> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct SignIn {
        key: String,
    }
    let body = crate::api::read_body(headers, body, body_timeout)
        .await
        .map_err(Err)?;
    let content_type = headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok());
    if !crate::query::is_json(content_type) {
        return Err(Err(Error::UnsupportedMediaType));
    }
    let sign_in: SignIn = serde_json::from_slice(&body).map_err(|_| {
        Err(Error::InvalidBody(
            "the body must be {\"key\": \"<API key>\"}".into(),
        ))
    })?;
    if sign_in.key.is_empty() {
        return Err(Err(Error::InvalidBody("key is required".into())));
    }
    let signed = sessions.sign_in(sign_in.key.as_bytes()).await?;
    let mut reply = who(&signed.caller);
    reply.headers.push((SET_COOKIE, signed.cookie));
    Ok(reply)
}

/// `GET {console}/session`: who the session admits.
pub async fn session_request(sessions: &Sessions, headers: &HeaderMap) -> Result<Reply, Error> {
    let token = cookie_token(headers).ok_or_else(ended)?;
    Ok(who(&sessions.caller(token).await?))
}

/// `DELETE {console}/session`: signs out, whatever the cookie was.
pub async fn sign_out_request(sessions: &Sessions, headers: &HeaderMap) -> Result<Reply, Error> {
    if let Some(token) = cookie_token(headers) {
        sessions.sign_out(token).await?;
    }
    Ok(Reply {
        status: StatusCode::NO_CONTENT,
        body: Bytes::new(),
        etag: None,
        headers: vec![
            (SET_COOKIE, clear_cookie()),
            (CACHE_CONTROL, HeaderValue::from_static("no-store")),
        ],
        stream: None,
    })
}

/// The session's holder as the console shows it: the key's label and whether it may write.
fn who(caller: &Caller) -> Reply {
    let body = serde_json::json!({
        "label": &*caller.label,
        "readOnly": caller.read_only,
    });
    Reply {
        status: StatusCode::OK,
        body: Bytes::from(body.to_string()),
        etag: None,
        headers: vec![(CACHE_CONTROL, HeaderValue::from_static("no-store"))],
        stream: None,
    }
}

fn ended() -> Error {
    Error::Unauthorized(AuthFailure::SessionEnded)
}

/// Removes idle sessions from the store every `PURGE_EVERY` while the sessions live.
async fn purge_idle(sessions: std::sync::Weak<Sessions>) {
    loop {
        tokio::time::sleep(PURGE_EVERY).await;
        let Some(sessions) = sessions.upgrade() else {
            return;
        };
        let idle_ms = u64::try_from(sessions.idle.as_millis()).unwrap_or(u64::MAX);
        let before = crate::store::events::now_ms().saturating_sub(idle_ms);
        match sessions
            .store
            .remove_sessions(SessionsGone::IdleSince(before))
            .await
        {
            Ok(0) => {}
            Ok(removed) => tracing::info!(removed, "idle console sessions removed"),
            Err(e) => tracing::warn!(error = %e, "removing idle console sessions failed"),
        }
    }
}

fn token_hash(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// The `Set-Cookie` value that gives the browser `token`: for the whole origin (`/`), never
/// readable by scripts, sent over TLS only and never with a request another site starts. No
/// `Max-Age`: it ends with the browser; the server ends it sooner when unused.
fn set_cookie(token: &str) -> Result<HeaderValue, Error> {
    HeaderValue::from_str(&format!(
        "{COOKIE_NAME}={token}; Path=/; Secure; HttpOnly; SameSite=Strict"
    ))
    .map_err(|e| Error::Internal(format!("a session cookie: {e}")))
}

/// The `Set-Cookie` value that removes the cookie (sign-out).
pub fn clear_cookie() -> HeaderValue {
    HeaderValue::from_static(
        "__Host-petstore-session=; Path=/; Secure; HttpOnly; SameSite=Strict; Max-Age=0",
    )
}

/// The session token in the request's cookies, if it has one.
pub fn cookie_token(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .find_map(|pair| {
            let (name, value) = pair.trim().split_once('=')?;
            (name == COOKIE_NAME && !value.is_empty()).then_some(value)
        })
}

/// Whether an unsafe request may act with a session: Go 1.25's `CrossOriginProtection`. A
/// browser's `Sec-Fetch-Site` must say `same-origin` (or `none`: typed by the user); without
/// it, an `Origin` must name this host; a request with neither is not a browser's.
pub fn same_origin(parts: &Parts) -> bool {
    if matches!(parts.method, Method::GET | Method::HEAD | Method::OPTIONS) {
        return true;
    }
    let headers = &parts.headers;
    if let Some(site) = headers.get("sec-fetch-site") {
        return matches!(site.as_bytes(), b"same-origin" | b"none");
    }
    let Some(origin) = headers.get(ORIGIN).and_then(|v| v.to_str().ok()) else {
        return true;
    };
    // HTTP/2 carries the host as the :authority, which hyper puts in the URI.
    let host = match parts.version {
        Version::HTTP_2 => parts.uri.authority().map(|a| a.as_str().to_owned()),
        _ => None,
    }
    .or_else(|| {
        headers
            .get(HOST)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    });
    let Some(host) = host else {
        return false;
    };
    origin
        .strip_prefix("https://")
        .is_some_and(|origin_host| origin_host.eq_ignore_ascii_case(&host))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(method: Method, fields: &[(&str, &str)]) -> Parts {
        let mut builder = hyper::Request::builder().method(method).uri("/v1/pets");
        for (name, value) in fields {
            builder = builder.header(*name, *value);
        }
        builder.body(()).expect("a request").into_parts().0
    }

    #[test]
    fn unsafe_requests_from_another_site_are_told_apart() {
        let post = |fields: &[(&str, &str)]| same_origin(&parts(Method::POST, fields));
        assert!(post(&[("sec-fetch-site", "same-origin")]));
        assert!(post(&[("sec-fetch-site", "none")]));
        assert!(!post(&[("sec-fetch-site", "cross-site")]));
        assert!(!post(&[("sec-fetch-site", "same-site")]));
        assert!(post(&[]), "not a browser's request");
        assert!(post(&[
            ("origin", "https://shop.example:8443"),
            ("host", "shop.example:8443")
        ]));
        assert!(!post(&[
            ("origin", "https://evil.example"),
            ("host", "shop.example")
        ]));
        assert!(!post(&[
            ("origin", "http://shop.example"),
            ("host", "shop.example")
        ]));
        assert!(!post(&[("origin", "null"), ("host", "shop.example")]));
        assert!(same_origin(&parts(
            Method::GET,
            &[("sec-fetch-site", "cross-site")]
        )));
    }

    #[test]
    fn the_cookie_is_found_among_others() {
        let mut headers = HeaderMap::new();
        headers.append(
            COOKIE,
            HeaderValue::from_static("a=1; __Host-petstore-session=tok; b=2"),
        );
        assert_eq!(cookie_token(&headers), Some("tok"));
        let mut none = HeaderMap::new();
        none.append(COOKIE, HeaderValue::from_static("__Host-petstore-session="));
        assert_eq!(cookie_token(&none), None);
    }
}
