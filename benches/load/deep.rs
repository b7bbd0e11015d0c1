//! The deep page (issue 10): on the 1M store, list20's first page against a page past id
//! 900,000, with and without `status=sold`. The deep page is reached as a client reaches it,
//! by following `Link: rel="next"` from the first page (100 pets a page), never by making a
//! cursor; only the link's `limit` is then set to 20, the page size measured. Both pages run
//! as back-to-back pairs, and the goal holds their req/s against each other.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{AUTHORIZATION, HOST, HeaderValue, LINK};
use hyper::{Request, Uri};

use crate::check::Expect;
use crate::client::{BEARER, Conn};
use crate::figures::Kind;
use crate::process::Server;
use crate::{Bench, Spec};

/// The deep page starts past this id.
pub const DEEP_AFTER: i64 = 900_000;
/// The page size of the walk to the deep page: the API's largest.
const WALK_LIMIT: &str = "limit=100";

/// The two lists of the part, as (first-page scenario, deep-page scenario, first page, what
/// each page must hold).
pub const PAGES: [(&str, &str, &str, Expect); 2] = [
    (
        "deep list20 p1",
        "deep list20 p900k",
        crate::LIST20,
        Expect::List20,
    ),
    (
        "deep sold20 p1",
        "deep sold20 p900k",
        crate::SOLD20,
        Expect::OnlySold,
    ),
];

impl Bench<'_> {
    /// The deep-page pairs on `server`, which holds at least 1M pets.
    pub async fn deep_page(&mut self, server: &Server, pets: u64) {
        for (first_name, deep_name, first, expect) in PAGES {
            let Some(deep) = self.walk_to_deep_page(server, first).await else {
                continue;
            };
            self.report.note(format!(
                "{deep_name}: {deep} (reached by following next links)"
            ));
            for round in 0..self.settings.rounds {
                for (scenario, path) in [(first_name, first), (deep_name, deep.as_str())] {
                    let spec = Spec::paired(scenario, path, expect, round, self.settings, false);
                    self.measure(&spec, server, Kind::Petstore, Some(pets))
                        .await;
                }
            }
        }
    }

    /// Follows next links from `first` (with 100 pets a page) until a page ends at or past
    /// `DEEP_AFTER`; returns that page's next link with `limit=20`, after checking that it
    /// starts past `DEEP_AFTER`. `None` (and a failure in the report) when the walk broke.
    async fn walk_to_deep_page(&mut self, server: &Server, first: &str) -> Option<String> {
        let started = std::time::Instant::now();
        let mut path = first.replace("limit=20", WALK_LIMIT);
        let mut pages = 0u64;
        let mut conn = None;
        loop {
            let page = match self.fetch(server, &mut conn, &path).await {
                Ok(page) => page,
                Err(why) => {
                    self.report.fail(format!(
                        "walk from {first}: {path} after {pages} pages: {why}"
                    ));
                    return None;
                }
            };
            pages += 1;
            let Some(next) = page.next else {
                self.report.fail(format!(
                    "walk from {first}: no next link after {pages} pages, last id {:?}",
                    page.ids.last()
                ));
                return None;
            };
            if page.ids.last().is_some_and(|&id| id >= DEEP_AFTER) {
                let deep = next.replace(WALK_LIMIT, "limit=20");
                if deep == next {
                    self.report.fail(format!(
                        "walk from {first}: the next link {next} has no {WALK_LIMIT}"
                    ));
                    return None;
                }
                // The deep page itself: 20 pets (or sold ones), all past the mark.
                let checked = self.fetch(server, &mut conn, &deep).await;
                match checked {
                    Ok(page) if page.ids.first().is_some_and(|&id| id > DEEP_AFTER) => {}
                    Ok(page) => {
                        self.report.fail(format!(
                            "walk from {first}: {deep} starts at id {:?}",
                            page.ids.first()
                        ));
                        return None;
                    }
                    Err(why) => {
                        self.report
                            .fail(format!("walk from {first}: {deep}: {why}"));
                        return None;
                    }
                }
                self.report.note(format!(
                    "walk from {first}: {pages} pages of 100 to id {} in {:.1} s",
                    page.ids.last().copied().unwrap_or(0),
                    started.elapsed().as_secs_f64()
                ));
                return Some(deep);
            }
            path = next;
        }
    }

    /// One `GET path` over a kept HTTP/1.1 connection (opened when there is none): the ids of
    /// the page, its next link and its body.
    pub async fn fetch(
        &self,
        server: &Server,
        conn: &mut Option<Conn>,
        path: &str,
    ) -> Result<Page, String> {
        let mut sender = match conn.take() {
            Some(sender) => sender,
            None => self
                .tls
                .http1(server.addr)
                .await
                .map_err(|e| format!("connect: {e}"))?,
        };
        let mut request = Request::new(Full::new(Bytes::new()));
        *request.uri_mut() = Uri::try_from(path).map_err(|e| format!("not a path: {e}"))?;
        let headers = request.headers_mut();
        let host = format!("localhost:{}", server.addr.port());
        headers.insert(
            HOST,
            HeaderValue::try_from(host).map_err(|e| e.to_string())?,
        );
        headers.insert(AUTHORIZATION, HeaderValue::from_static(BEARER));
        let answer = tokio::time::timeout(Duration::from_secs(30), async {
            let response = sender.send(request).await.map_err(|e| e.to_string())?;
            let status = response.status().as_u16();
            let next = response
                .headers()
                .get_all(LINK)
                .iter()
                .filter_map(|value| value.to_str().ok())
                .find_map(next_target);
            let body = response
                .into_body()
                .collect()
                .await
                .map_err(|e| e.to_string())?
                .to_bytes();
            Ok::<_, String>((status, next, body))
        })
        .await
        .map_err(|_| "no answer within 30 s".to_owned())??;
        let (status, next, body) = answer;
        if status != 200 {
            return Err(format!(
                "status {status}: {}",
                String::from_utf8_lossy(&body)
            ));
        }
        let pets: serde_json::Value =
            serde_json::from_slice(&body).map_err(|e| format!("body is not JSON: {e}"))?;
        let ids = pets
            .as_array()
            .ok_or("body is not an array")?
            .iter()
            .map(|pet| pet["id"].as_i64().ok_or("a pet without an integer id"))
            .collect::<Result<Vec<i64>, _>>()?;
        *conn = Some(sender);
        Ok(Page { ids, next, pets })
    }
}

/// What a walk needs of a page.
pub struct Page {
    pub ids: Vec<i64>,
    pub next: Option<String>,
    /// The body as read.
    pub pets: serde_json::Value,
}

/// The target of a `Link` value's `rel="next"` entry, e.g. `</v1/pets?...>; rel="next"`.
fn next_target(value: &str) -> Option<String> {
    value.split(',').find_map(|link| {
        let (target, params) = link.trim().strip_prefix('<')?.split_once('>')?;
        params
            .split(';')
            .any(|param| {
                let param = param.trim().replace(' ', "");
                param == "rel=\"next\"" || param == "rel=next"
            })
            .then(|| target.to_owned())
    })
}
