//! The fill: grows a petstore database to a given number of pets through the API itself
//! (`POST /v1/pets` over a few HTTP/2 connections with many streams each, so the writer commits
//! large batches). Statuses follow the pet's position: every 100th is sold, the others cycle
//! through available, pending and no status; `fill_available` makes every pet available (the
//! orders part's stock). Names follow the position too, from `names.rs`'s list. Invariant:
//! every create must get its 201.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use hyper::http::uri::Uri;

use crate::client::{BEARER, Tls};
use crate::names;
use crate::process::Server;

const CONNECTIONS: usize = 4;
/// Below hyper's default limit of 200 concurrent streams per connection.
const STREAMS: usize = 128;

/// The statuses, in the inventory's order: available, pending, sold, unset.
const STATUSES: [Option<&str>; 4] = [Some("available"), Some("pending"), Some("sold"), None];

/// The slot in `STATUSES` of the pet at `position` (0-based, in creation order): 1% sold.
fn status(position: u64) -> usize {
    if position % 100 == 99 {
        return 2;
    }
    match position % 3 {
        0 => 0,
        1 => 1,
        _ => 3,
    }
}

/// Whether the pet at `position` is made `available` (what `status=available` finds).
pub fn is_available(position: u64) -> bool {
    status(position) == 0
}

/// The JSON body of a pet named `name` with the status of slot `status`.
fn pet(name: &str, status: usize) -> Bytes {
    let name = serde_json::to_string(name).expect("a string serializes");
    Bytes::from(match STATUSES[status] {
        Some(status) => format!(r#"{{"name":{name},"categoryId":1,"status":"{status}"}}"#),
        None => format!(r#"{{"name":{name},"categoryId":1}}"#),
    })
}

/// The body of the pet at `position`.
fn body(position: u64) -> Bytes {
    pet(&names::name(position), status(position))
}

/// `count` bodies of available pets named as the fill names them, for creates that carry
/// realistic names (a name's index entries grow with its words and letters). Their positions
/// are far past any fill's, so they are not the fill's first pets again.
pub fn named_creates(count: u64) -> Vec<Bytes> {
    (0..count)
        .map(|i| pet(&names::name((1 << 40) + i), 0))
        .collect()
}

/// The counts of the store `fill` makes of `pets` pets from empty, in the inventory's order:
/// available, pending, sold, unset.
pub fn statuses(pets: u64) -> [u64; 4] {
    let mut counts = [0; 4];
    for position in 0..pets {
        counts[status(position)] += 1;
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
    fill_with(server, tls, from, to, |position| {
        pet(&names::name(position), 0)
    })
    .await
}

/// `fill` with the body of each position from `body`.
async fn fill_with(
    server: &Server,
    tls: &Tls,
    from: u64,
    to: u64,
    body: fn(u64) -> Bytes,
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
                    let mut request = Request::new(Full::new(body(position)));
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
