//! Cursor paging of listPets: the next link (present exactly when more matches exist, keeping
//! limit and status), walks that see every pet once in id order even while others write, the
//! cursor errors, and HEAD.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use hyper::Method;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::support::{Client, Protocol, Reply, Server, create_many};

const STATUSES: [Option<&str>; 4] = [None, Some("available"), Some("pending"), Some("sold")];
const MALFORMED: &str = "cursor is not valid: pass the cursor of a next link unchanged";
const REPEATED: &str = "cursor must be given at most once";
const FOREIGN: &str = "cursor belongs to a list with another status filter";

/// Checks a next link's shape (`limit`, then `status` when filtered, then `cursor`, in that
/// order) and returns its cursor.
fn cursor_of(link: &str, limit: u32, status: Option<&str>) -> String {
    let prefix = match status {
        Some(status) => format!("/v1/pets?limit={limit}&status={status}&cursor="),
        None => format!("/v1/pets?limit={limit}&cursor="),
    };
    let cursor = link
        .strip_prefix(&prefix)
        .unwrap_or_else(|| panic!("{link:?} does not start with {prefix:?}"));
    assert!(
        !cursor.is_empty()
            && cursor
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'),
        "not a URL-safe cursor: {cursor:?}"
    );
    cursor.to_owned()
}

/// The cursor of the next link of `path`'s answer, which must have one.
async fn next_cursor(client: &mut Client, path: &str, limit: u32, status: Option<&str>) -> String {
    let reply = client.get(path).await;
    assert_eq!(reply.status, 200, "{path}: {:?}", reply.body);
    let link = reply
        .next_link()
        .unwrap_or_else(|| panic!("{path}: no next link"));
    cursor_of(&link, limit, status)
}

/// Asserts that listing with each of `queries` gets 400 `invalid_cursor` with `message`.
async fn assert_cursor_refused(
    client: &mut Client,
    queries: impl IntoIterator<Item = impl AsRef<str>>,
    message: &str,
) {
    for query in queries {
        let path = format!("/v1/pets?{}", query.as_ref());
        client
            .get(&path)
            .await
            .assert_error(400, "invalid_cursor", message);
    }
}

/// A server holding three pets, a client, and the cursor after the first pet (limit 1).
async fn three_pets_and_a_cursor() -> (Server, Client, String) {
    let server = Server::start();
    create_many(&server, 3, |_| None).await;
    let mut client = server.h1().await;
    let cursor = next_cursor(&mut client, "/v1/pets?limit=1", 1, None).await;
    (server, client, cursor)
}

fn assert_last_page(reply: &Reply, ids: &[i64]) {
    assert_eq!((reply.status, reply.ids()), (200, ids.to_vec()));
    assert_eq!(reply.header("link"), None, "the last page has no Link");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_page_holding_every_match_has_no_link_and_one_more_match_adds_it() {
    let server = Server::start();
    create_many(&server, 3, |_| None).await;
    let mut client = server.h1().await;
    assert_last_page(&client.get("/v1/pets?limit=3").await, &[1, 2, 3]);
    client.create(r#"{"name":"fourth","categoryId":4}"#).await;
    let reply = client.get("/v1/pets?limit=3").await;
    assert_eq!(reply.ids(), [1, 2, 3]);
    let link = reply.next_link().expect("a next link");
    cursor_of(&link, 3, None);
    assert_last_page(&client.get(&link).await, &[4]);
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn without_limit_the_link_names_the_default_limit_20() {
    let server = Server::start();
    create_many(&server, 20, |_| None).await;
    let mut client = server.h2().await;
    let all: Vec<i64> = (1..=20).collect();
    assert_last_page(&client.get("/v1/pets").await, &all);
    client.create(r#"{"name":"21st","categoryId":21}"#).await;
    let reply = client.get("/v1/pets").await;
    assert_eq!(reply.ids(), all);
    let link = reply.next_link().expect("a next link");
    cursor_of(&link, 20, None);
    assert_last_page(&client.get(&link).await, &[21]);
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn only_pets_with_the_status_count_toward_the_next_link() {
    let server = Server::start();
    // Two sold pets among six, then a pet with another status after them.
    create_many(&server, 6, |i| if i < 2 { Some("sold") } else { None }).await;
    let mut client = server.h1().await;
    client
        .create(r#"{"name":"p","categoryId":1,"status":"pending"}"#)
        .await;
    let page = client.get("/v1/pets?status=sold&limit=2").await;
    assert_eq!((page.status, page.ids().len()), (200, 2));
    assert_eq!(page.header("link"), None, "no further sold pet");

    let last = client
        .create(r#"{"name":"s","categoryId":1,"status":"sold"}"#)
        .await;
    let cursor = next_cursor(&mut client, "/v1/pets?status=sold&limit=2", 2, Some("sold")).await;
    let reply = client
        .get(&format!("/v1/pets?limit=2&status=sold&cursor={cursor}"))
        .await;
    assert_eq!(reply.json(), json!([last]));
    assert_eq!(reply.header("link"), None);
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn the_next_link_names_limit_then_status_then_cursor_whatever_the_request_order() {
    let server = Server::start();
    create_many(&server, 7, |_| Some("pending")).await;
    let mut client = server.h1().await;
    let first = client
        .get("/v1/pets?order=desc&status=pending&limit=2")
        .await;
    assert_eq!(first.ids(), [1, 2]);
    let link = first.next_link().expect("a next link");
    cursor_of(&link, 2, Some("pending"));

    // A page reached by a link links on in the same shape; unknown parameters change nothing.
    let second = client.get(&link).await;
    assert_eq!(second.ids(), [3, 4]);
    let with_unknown = client.get(&format!("{link}&page=9")).await;
    assert_eq!(with_unknown.ids(), [3, 4]);
    let link = second.next_link().expect("a next link");
    cursor_of(&link, 2, Some("pending"));
    assert_eq!(client.get(&link).await.ids(), [5, 6]);
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn following_next_links_walks_every_pet_once_in_id_order() {
    let server = Server::start();
    create_many(&server, 45, |_| None).await;
    let mut client = server.h2().await;
    let mut sizes = Vec::new();
    let mut ids = Vec::new();
    let mut next = Some("/v1/pets?limit=10".to_owned());
    while let Some(path) = next {
        let reply = client.get(&path).await;
        assert_eq!(reply.status, 200, "{path}");
        sizes.push(reply.ids().len());
        ids.extend(reply.ids());
        next = reply.next_link();
        if let Some(link) = &next {
            cursor_of(link, 10, None);
        }
    }
    assert_eq!(sizes, [10, 10, 10, 10, 5]);
    assert_eq!(ids, (1..=45).collect::<Vec<_>>());
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_walk_with_a_status_sees_exactly_the_pets_of_the_full_walk_with_that_status() {
    let server = Server::start();
    create_many(&server, 60, |i| STATUSES[i % 4]).await;
    let mut client = server.h2().await;
    let all = client.list_all("/v1/pets?limit=7").await;
    assert_eq!(all.len(), 60);
    for status in STATUSES.into_iter().flatten() {
        let expected: Vec<Value> = all
            .iter()
            .filter(|pet| pet["status"] == status)
            .cloned()
            .collect();
        assert_eq!(expected.len(), 15);
        let walked = client
            .list_all(&format!("/v1/pets?status={status}&limit=4"))
            .await;
        assert_eq!(walked, expected, "{status}");
    }
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cursor_not_made_by_the_server_gets_400_invalid_cursor() {
    let server = Server::start();
    create_many(&server, 3, |_| Some("sold")).await;
    let mut client = server.h1().await;
    let queries = [
        "cursor=",
        "cursor=abc",
        "cursor=%21%21",
        "cursor=AAAAAAAAAAAAAAAAAAAAAAAA",
        "cursor=-_-_",
        "limit=2&cursor=",
        "status=sold&cursor=",
        "status=sold&cursor=abc",
    ];
    assert_cursor_refused(&mut client, queries, MALFORMED).await;
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cursor_changed_by_the_client_gets_400_invalid_cursor() {
    let (server, mut client, cursor) = three_pets_and_a_cursor().await;
    let first = if cursor.starts_with('A') { "B" } else { "A" };
    let queries = [
        format!("{first}{}", &cursor[1..]),
        cursor[..cursor.len() - 1].to_owned(),
        format!("{cursor}{cursor}"),
    ]
    .map(|changed| format!("limit=1&cursor={changed}"));
    assert_cursor_refused(&mut client, queries, MALFORMED).await;
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_repeated_cursor_gets_400_invalid_cursor() {
    let (server, mut client, cursor) = three_pets_and_a_cursor().await;
    let queries = [
        "cursor=a&cursor=b".to_owned(),
        "cursor=&cursor=".to_owned(),
        format!("limit=1&cursor={cursor}&cursor={cursor}"),
    ];
    assert_cursor_refused(&mut client, queries, REPEATED).await;
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cursor_used_with_another_status_filter_gets_400_invalid_cursor() {
    let server = Server::start();
    create_many(&server, 3, |_| Some("sold")).await;
    let mut client = server.h1().await;
    let unfiltered = next_cursor(&mut client, "/v1/pets?limit=1", 1, None).await;
    let sold = next_cursor(&mut client, "/v1/pets?limit=1&status=sold", 1, Some("sold")).await;
    let queries = [
        format!("limit=1&status=sold&cursor={unfiltered}"),
        format!("limit=1&cursor={sold}"),
        format!("limit=1&status=pending&cursor={sold}"),
    ];
    assert_cursor_refused(&mut client, queries, FOREIGN).await;
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bad_limit_or_status_is_reported_before_a_bad_cursor() {
    let (server, mut client, unfiltered) = three_pets_and_a_cursor().await;
    let limit = "limit must be an integer from 1 to 100";
    let status = "status must be one of available, pending, sold";
    for (query, message) in [
        ("limit=0&cursor=".to_owned(), limit),
        ("limit=abc&cursor=a&cursor=b".to_owned(), limit),
        ("status=lost&cursor=garbage".to_owned(), status),
        (format!("status=lost&cursor={unfiltered}"), status),
    ] {
        client.get(&format!("/v1/pets?{query}")).await.assert_error(
            400,
            "invalid_parameter",
            message,
        );
    }
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cursor_past_the_end_gives_an_empty_page_without_link() {
    let (server, mut client, cursor) = three_pets_and_a_cursor().await;
    for id in [2, 3] {
        let reply = client.delete(&format!("/v1/pets/{id}")).await;
        assert_eq!(reply.status, 204);
    }
    let reply = client
        .get(&format!("/v1/pets?limit=1&cursor={cursor}"))
        .await;
    assert_eq!((reply.status, &reply.body[..]), (200, &b"[]"[..]));
    assert_eq!(reply.header("link"), None);
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn head_carries_the_next_link_on_both_protocols() {
    let server = Server::start();
    create_many(&server, 3, |_| None).await;
    for protocol in [Protocol::Http1, Protocol::Http2] {
        let mut client = Client::connect(server.addr, protocol).await;
        let head = client
            .send_with(Method::HEAD, "/v1/pets?limit=2", &[], Bytes::new())
            .await;
        assert_eq!((head.status, head.body.len()), (200, 0), "{protocol:?}");
        let link = head.next_link().expect("a next link on HEAD");
        cursor_of(&link, 2, None);
        assert_last_page(&client.get(&link).await, &[3]);

        let whole = client
            .send_with(Method::HEAD, "/v1/pets?limit=3", &[], Bytes::new())
            .await;
        assert_eq!(whole.status, 200);
        assert_eq!(whole.header("link"), None, "{protocol:?}");
    }
    server.stop();
}

/// A write a busy task sends: its method, path, JSON body (empty for none) and the statuses
/// it may get.
struct Write {
    method: Method,
    path: String,
    body: String,
    expected: &'static [u16],
}

impl Write {
    fn create(i: u64) -> Write {
        Write {
            method: Method::POST,
            path: "/v1/pets".to_owned(),
            body: format!(r#"{{"name":"new-{i}","categoryId":{i}}}"#),
            expected: &[201],
        }
    }

    fn patch(id: i64, body: String, expected: &'static [u16]) -> Write {
        Write {
            method: Method::PATCH,
            path: format!("/v1/pets/{id}"),
            body,
            expected,
        }
    }

    fn delete(id: i64) -> Write {
        Write {
            method: Method::DELETE,
            path: format!("/v1/pets/{id}"),
            body: String::new(),
            expected: &[204],
        }
    }
}

/// Tasks that write while a walk goes on; they count their writes, so that the walk can wait
/// for some of them between two pages, and they stop when the walk is done.
struct Writers {
    stop: Arc<AtomicBool>,
    count: Arc<watch::Sender<u64>>,
    tasks: tokio::task::JoinSet<()>,
}

/// Writes the walk waits for between two pages.
const WRITES_PER_PAGE: u64 = 6;

impl Writers {
    fn new() -> Writers {
        Writers {
            stop: Arc::new(AtomicBool::new(false)),
            count: Arc::new(watch::Sender::new(0)),
            tasks: tokio::task::JoinSet::new(),
        }
    }

    /// Spawns a task sending `write(0)`, `write(1)`, ... until the walk is done or `write`
    /// has nothing more.
    fn spawn(&mut self, mut client: Client, write: impl Fn(u64) -> Option<Write> + Send + 'static) {
        let (stop, count) = (Arc::clone(&self.stop), Arc::clone(&self.count));
        self.tasks.spawn(async move {
            for i in 0.. {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let Some(write) = write(i) else { break };
                let headers: &[(&str, &str)] = if write.body.is_empty() {
                    &[]
                } else {
                    &[("content-type", "application/json")]
                };
                let reply = client
                    .send_with(write.method.clone(), &write.path, headers, write.body)
                    .await;
                assert!(
                    write.expected.contains(&reply.status),
                    "{} {}: {} {:?}",
                    write.method,
                    write.path,
                    reply.status,
                    reply.body
                );
                count.send_modify(|n| *n += 1);
            }
        });
    }

    /// Follows next links from `first`, waiting between two pages for the writers to write;
    /// returns every pet seen, asserting that ids strictly increase over the whole walk.
    async fn walk(&self, client: &mut Client, first: &str) -> Vec<Value> {
        let mut progress = self.count.subscribe();
        let mut pets: Vec<Value> = Vec::new();
        let mut path = first.to_owned();
        loop {
            let reply = client.get(&path).await;
            assert_eq!(reply.status, 200, "{path}: {:?}", reply.body);
            for pet in reply.pets() {
                if let Some(last) = pets.last() {
                    assert!(
                        pet["id"].as_i64() > last["id"].as_i64(),
                        "{pet} after {last}"
                    );
                }
                pets.push(pet);
            }
            let Some(next) = reply.next_link() else {
                return pets;
            };
            let seen = *progress.borrow_and_update();
            tokio::time::timeout(
                Duration::from_secs(30),
                progress.wait_for(|&n| n >= seen + WRITES_PER_PAGE),
            )
            .await
            .expect("the writers go on writing")
            .expect("the writers' counter lives");
            path = next;
        }
    }

    /// Stops the writers and waits for them, failing on any write that failed.
    async fn finish(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        while let Some(done) = self.tasks.join_next().await {
            done.expect("a writer succeeded");
        }
    }
}

/// Asserts that each of `ids` is among `pets` exactly once.
fn assert_each_seen_once(pets: &[Value], ids: &BTreeSet<i64>) {
    let mut seen: HashMap<i64, usize> = HashMap::new();
    for pet in pets {
        *seen.entry(pet["id"].as_i64().expect("id")).or_default() += 1;
    }
    let missed: Vec<_> = ids.iter().filter(|id| seen.get(id) != Some(&1)).collect();
    assert!(missed.is_empty(), "not seen exactly once: {missed:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_walk_while_others_create_patch_and_delete_sees_every_lasting_pet_once_in_order() {
    let server = Server::start();
    let before = create_many(&server, 1200, |i| STATUSES[i % 4]).await;
    // Pets whose id is a multiple of 3 may be deleted; the others last for the whole walk.
    let (doomed, lasting): (Vec<i64>, Vec<i64>) = before.iter().partition(|id| *id % 3 == 0);
    let count = before.len() as u64;

    let mut writers = Writers::new();
    writers.spawn(server.h2().await, |i| (i < 600).then(|| Write::create(i)));
    // Deletes jump around the store so that some land behind the walk and some ahead of it.
    writers.spawn(server.h2().await, move |i| {
        let at = (i as usize * 37) % doomed.len();
        (i < doomed.len() as u64).then(|| Write::delete(doomed[at]))
    });
    writers.spawn(server.h2().await, move |i| {
        let id = ((i * 7919) % count) as i64 + 1;
        let status = ["available", "pending", "sold"][(i % 3) as usize];
        let body = format!(r#"{{"name":"patched-{i}","status":"{status}"}}"#);
        // A pet the deleter got to first answers 404.
        let expected: &[u16] = if id % 3 == 0 { &[200, 404] } else { &[200] };
        Some(Write::patch(id, body, expected))
    });

    let mut client = server.h2().await;
    let pets = writers.walk(&mut client, "/v1/pets?limit=50").await;
    writers.finish().await;
    assert_each_seen_once(&pets, &lasting.into_iter().collect());
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_status_walk_under_concurrent_status_patches_shows_only_pets_with_that_status() {
    let server = Server::start();
    create_many(&server, 1000, |i| STATUSES[i % 4]).await;
    let mut client = server.h2().await;
    let all = client.list_all("/v1/pets?limit=100").await;
    // Available pets with an even id keep their status; every other pet keeps changing.
    let (lasting, changing): (Vec<&Value>, Vec<&Value>) = all
        .iter()
        .partition(|pet| pet["status"] == "available" && pet["id"].as_i64().expect("id") % 2 == 0);
    let lasting: BTreeSet<i64> = lasting
        .iter()
        .map(|pet| pet["id"].as_i64().expect("id"))
        .collect();
    let changing: Arc<Vec<i64>> = Arc::new(
        changing
            .iter()
            .map(|pet| pet["id"].as_i64().expect("id"))
            .collect(),
    );

    let mut writers = Writers::new();
    for writer in 0..3u64 {
        let changing = Arc::clone(&changing);
        writers.spawn(server.h2().await, move |i| {
            let id = changing[((i * 131 + writer * 17) as usize) % changing.len()];
            let status = [r#""available""#, r#""pending""#, r#""sold""#, "null"];
            let body = format!(r#"{{"status":{}}}"#, status[((i + writer) % 4) as usize]);
            Some(Write::patch(id, body, &[200]))
        });
    }
    let pets = writers
        .walk(&mut client, "/v1/pets?status=available&limit=50")
        .await;
    writers.finish().await;
    for pet in &pets {
        assert_eq!(pet["status"], "available", "{pet}");
    }
    assert_each_seen_once(&pets, &lasting);
    server.stop();
}
