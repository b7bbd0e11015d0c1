//! The staff console (issue 31): a page and its files, embedded in the binary (`assets`), served
//! under one prefix (`--console-path`, `/console` by default) on the API's own listener, and the
//! sessions that let a browser use the `/v1` API with a cookie instead of a key (`session`).
//! Every path under the prefix that is not a file or the session is the page: the console
//! routes real paths itself. Every answer here is locked down: a CSP that allows only this
//! origin's files (no inline script or style, no `eval`), no framing, no referrer.

pub mod assets;
pub mod session;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hyper::header::{HeaderMap, HeaderName, HeaderValue, LOCATION};
use hyper::{Method, StatusCode};

use crate::api::Reply;
use crate::auth::Keys;
use crate::error::Error;
use crate::store::Store;
use assets::{FILES, HASH, PAGE, Served};
use session::Sessions;

/// What the console's answers say to the browser about what the page may do.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; font-src 'self'; manifest-src 'self'; \
                   frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

/// The console of this server.
pub struct Console {
    base: String,
    page: Served,
    files: HashMap<&'static str, Served>,
    pub sessions: Arc<Sessions>,
}

/// A path under the console's prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place<'a> {
    /// The prefix without its slash: redirected to the page.
    Bare,
    /// The page, for any path of the console's own.
    Page,
    /// A file, by its path under the assets' directory (hash included).
    Asset(&'a str),
    /// Sign in (POST), who is signed in (GET), sign out (DELETE).
    Session,
}

impl Console {
    pub fn new(base: &str, store: Store, keys: Arc<Keys>, idle: Duration) -> Console {
        let mut files = HashMap::new();
        let mut page = None;
        for file in FILES {
            if file.name == PAGE {
                page = Some(Served::page(file.raw, base));
            } else {
                files.insert(file.name, Served::asset(file));
            }
        }
        Console {
            base: base.to_owned(),
            // build.rs embeds the directory with its page; a missing one is an empty page.
            page: page.unwrap_or_else(|| Served::page(b"", base)),
            files,
            sessions: Sessions::new(store, keys, idle),
        }
    }

    /// Where `path` is in the console, if it is in it.
    pub fn place<'a>(&self, path: &'a str) -> Option<Place<'a>> {
        place_in(&self.base, path)
    }

    /// The answer to a request for the page, a file or the bare prefix.
    pub fn serve(
        &self,
        place: Place<'_>,
        method: &Method,
        headers: &HeaderMap,
    ) -> Result<Reply, Error> {
        if !matches!(*method, Method::GET | Method::HEAD) {
            return Err(Error::MethodNotAllowed { allow: "GET, HEAD" });
        }
        let mut reply = match place {
            Place::Bare => Reply {
                status: StatusCode::PERMANENT_REDIRECT,
                body: Bytes::new(),
                etag: None,
                headers: vec![(
                    LOCATION,
                    HeaderValue::from_str(&format!("{}/", self.base))
                        .map_err(|e| Error::Internal(format!("the console's path: {e}")))?,
                )],
                stream: None,
            },
            Place::Page => self.page.reply(headers),
            Place::Asset(asset) => {
                let file = asset
                    .strip_prefix(HASH)
                    .and_then(|name| name.strip_prefix('/'))
                    .and_then(|name| self.files.get(name))
                    .ok_or_else(|| {
                        Error::NotFound("no such file in this build of the console".into())
                    })?;
                file.reply(headers)
            }
            Place::Session => {
                return Err(Error::MethodNotAllowed {
                    allow: "GET, POST, DELETE",
                });
            }
        };
        reply.headers.extend(locked_down());
        Ok(reply)
    }
}

/// Where `path` is in a console served under `base`.
fn place_in<'a>(base: &str, path: &'a str) -> Option<Place<'a>> {
    let rest = path.strip_prefix(base)?;
    if rest.is_empty() {
        return Some(Place::Bare);
    }
    let rest = rest.strip_prefix('/')?;
    if rest == "session" {
        return Some(Place::Session);
    }
    if let Some(asset) = rest.strip_prefix("assets/") {
        return Some(Place::Asset(asset));
    }
    Some(Place::Page)
}

/// The fields every console answer carries (the service adds HSTS and `nosniff` to all).
pub fn locked_down() -> [(HeaderName, HeaderValue); 4] {
    [
        (
            HeaderName::from_static("content-security-policy"),
            HeaderValue::from_static(CSP),
        ),
        (
            HeaderName::from_static("referrer-policy"),
            HeaderValue::from_static("no-referrer"),
        ),
        (
            HeaderName::from_static("x-frame-options"),
            HeaderValue::from_static("DENY"),
        ),
        (
            HeaderName::from_static("cross-origin-opener-policy"),
            HeaderValue::from_static("same-origin"),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_under_the_prefix_are_told_apart() {
        let place = |path| place_in("/shop/admin", path);
        assert_eq!(place("/shop/admin"), Some(Place::Bare));
        assert_eq!(place("/shop/admin/"), Some(Place::Page));
        assert_eq!(place("/shop/admin/pets/12"), Some(Place::Page));
        assert_eq!(place("/shop/admin/session"), Some(Place::Session));
        assert_eq!(
            place("/shop/admin/assets/abc/app.js"),
            Some(Place::Asset("abc/app.js"))
        );
        assert_eq!(place("/shop/adminx"), None);
        assert_eq!(place("/v1/pets"), None);
    }
}
