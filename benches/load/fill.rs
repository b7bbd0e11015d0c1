//! The fill: grows a petstore database to a given number of pets through the API itself
//! (`POST /v1/pets` over a few HTTP/2 connections with many streams each, so the writer commits
//! large batches). Statuses follow the pet's position: every 100th is sold, the others cycle
//! through available, pending and no status; `fill_available` makes every pet available (the
//! orders part's stock). Invariant: every create must get its 201.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use hyper::http::uri::Uri;

use crate::client::{BEARER, Tls};
use crate::process::Server;

const CONNECTIONS: usize = 4;
/// Below hyper's default limit of 200 concurrent streams per connection.
const STREAMS: usize = 128;

const SOLD: &str = r#"{"name":"bench","categoryId":1,"status":"sold"}"#;
const AVAILABLE: &str = r#"{"name":"bench","categoryId":1,"status":"available"}"#;
const PENDING: &str = r#"{"name":"bench","categoryId":1,"status":"pending"}"#;
const NO_STATUS: &str = r#"{"name":"bench","categoryId":1}"#;

/// The body of the pet at `position` (0-based, in creation order): 1% sold.
fn body(position: u64) -> &'static str {
    if position % 100 == 99 {
        return SOLD;
    }
    match position % 3 {
        0 => AVAILABLE,
        1 => PENDING,
        _ => NO_STATUS,
    }
}

/// The counts of the store `fill` makes of `pets` pets from empty, in the inventory's order:
/// available, pending, sold, unset.
pub fn statuses(pets: u64) -> [u64; 4] {
    let mut counts = [0; 4];
    for position in 0..pets {
        let slot = match body(position) {
            AVAILABLE => 0,
            PENDING => 1,
            SOLD => 2,
            _ => 3,
        };
        counts[slot] += 1;
    }
    counts
}

/// What a fill did.
pub struct Filled {
    pub created: u64,
    pub failed: u64,
    pub took: Duration,
}

/// Creates pets `from..to` (positions, 0-based) on `server`, whose store holds `from` pets.
pub async fn fill(server: &Server, tls: &Tls, from: u64, to: u64) -> Filled {
    fill_with(server, tls, from, to, body).await
}

/// `fill`, every pet `available`.
pub async fn fill_available(server: &Server, tls: &Tls, from: u64, to: u64) -> Filled {
    fill_with(server, tls, from, to, |_| AVAILABLE).await
}

/// `fill` with the body of each position from `body`.
async fn fill_with(
    server: &Server,
    tls: &Tls,
    from: u64,
    to: u64,
    body: fn(u64) -> &'static str,
) -> Filled {
    let started = Instant::now();
    let next = Arc::new(AtomicU64::new(from));
    let uri = Uri::try_from(format!("https://localhost:{}/v1/pets", server.addr.port()))
        .expect("a valid URI");
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..CONNECTIONS {
        let sender = tls
            .http2(server.addr)
            .await
            .expect("the fill connects to petstore");
        for _ in 0..STREAMS {
            let mut sender = sender.clone();
            let next = Arc::clone(&next);
            let uri = uri.clone();
            tasks.spawn(async move {
                let (mut created, mut failed) = (0u64, 0u64);
                loop {
                    let position = next.fetch_add(1, Ordering::Relaxed);
                    if position >= to {
                        break;
                    }
                    let mut request =
                        Request::new(Full::new(Bytes::from_static(body(position).as_bytes())));
                    *request.method_mut() = hyper::Method::POST;
                    *request.uri_mut() = uri.clone();
                    let headers = request.headers_mut();
                    headers.insert(AUTHORIZATION, HeaderValue::from_static(BEARER));
                    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
                    let answer = async {
                        sender.ready().await?;
                        let response = sender.send_request(request).await?;
                        let status = response.status().as_u16();
                        response.into_body().collect().await?;
                        Ok::<_, hyper::Error>(status)
                    };
                    // A create waits for at most one commit (an fsync); a minute is a hang.
                    match tokio::time::timeout(Duration::from_secs(60), answer).await {
                        Ok(Ok(201)) => created += 1,
                        _ => failed += 1,
                    }
                }
                (created, failed)
            });
        }
    }
    let (mut created, mut failed) = (0, 0);
    while let Some(counts) = tasks.join_next().await {
        let (c, f) = counts.expect("a fill task does not panic");
        created += c;
        failed += f;
    }
    Filled {
        created,
        failed,
        took: started.elapsed(),
    }
}
