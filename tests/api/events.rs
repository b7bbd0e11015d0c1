//! The event feed (issue 28; every assertion follows `notes/events-contract.md`): JSON pages
//! (member order and values against each write's own answer, `limit`, the next link as a poll
//! loop, the `type` filter, 400 for a malformed cursor, 410 for another feed's, a purged or a
//! future one, read-only keys, 401, no-store), `Events-Cursor` on every list (list, then
//! follow, under concurrent writes: every later change once, in order, and the replay gives the
//! final list), server-sent events over HTTP/1.1 and HTTP/2 (retry and a bookmark of the start
//! first, live events in order, streams killed at random points and resumed by `Last-Event-ID`
//! with nothing lost or repeated, filters and their bookmarks, errors before a stream,
//! `--max-subscribers`, streams as requests in flight, SIGTERM, a reader that stops reading),
//! SIGKILLs between writes (the whole feed replays to exactly the stored pets), backups and
//! copies (new feeds), retention (`--events-keep`), and two instances on one PostgreSQL
//! database. Writers pick their writes at random: a failing run prints `EVENTS_SEED=N`, and
//! setting it repeats the run.

use std::any::Any;
use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::{http1, http2};
use hyper::header::{CONTENT_TYPE, HOST, HeaderMap};
use hyper::{Method, Request};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinSet;

use crate::idempotency::{assert_replay, post_keyed};
use crate::metrics::{metrics_address, scrape, value};
use crate::pg_cluster::Cluster;
use crate::support::{
    Client, DEV_KEY, Options, Protocol, Reply, Rng, Server, cert, run, tls_config, tls_connect,
};

/// An event's members, in the order the contract fixes.
const MEMBERS: [&str; 6] = ["cursor", "type", "at", "petId", "etag", "pet"];
const TYPES: [&str; 3] = ["pet.created", "pet.updated", "pet.deleted"];
/// The longest a test waits for the next thing on a stream that should be sending (a bookmark
/// comes every 15 s at least, so an idle stream is not a failure before that).
const STREAM_WAIT: Duration = Duration::from_secs(10);
/// How soon an event committed through one PostgreSQL instance reaches another's streams.
const ACROSS_INSTANCES: Duration = Duration::from_secs(1);
const MISSING_KEY: &str = "this operation needs an API key: send Authorization: Bearer <key>";

// ------------------------------------------------------------------------------------------
// Small helpers: cursors, ETags, times, member order, a seeded random source.

fn is_cursor(text: &str) -> bool {
    text.len() == 32 && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn cursor(event: &Value) -> &str {
    event["cursor"]
        .as_str()
        .unwrap_or_else(|| panic!("no cursor: {event}"))
}

fn pet_id(event: &Value) -> i64 {
    event["petId"]
        .as_i64()
        .unwrap_or_else(|| panic!("no petId: {event}"))
}

fn kind(event: &Value) -> &str {
    event["type"]
        .as_str()
        .unwrap_or_else(|| panic!("no type: {event}"))
}

fn etag(event: &Value) -> &str {
    event["etag"]
        .as_str()
        .unwrap_or_else(|| panic!("no etag: {event}"))
}

/// The revision of pet `id`'s strong ETag `"ID.REV"`.
fn revision(etag: &str, id: i64) -> u64 {
    let inner = etag
        .strip_prefix('"')
        .and_then(|tag| tag.strip_suffix('"'))
        .unwrap_or_else(|| panic!("not a strong ETag: {etag:?}"));
    let (pet, rev) = inner
        .split_once('.')
        .unwrap_or_else(|| panic!("not \"ID.REV\": {etag:?}"));
    assert_eq!(pet, id.to_string(), "the ETag {etag} is of pet {id}");
    rev.parse()
        .unwrap_or_else(|_| panic!("not \"ID.REV\": {etag:?}"))
}

/// Milliseconds since the epoch of an `at`, which must read `YYYY-MM-DDTHH:MM:SS.mmmZ`.
fn at_millis(at: &str) -> i64 {
    let b = at.as_bytes();
    let shape = b.len() == 24
        && [4, 7].iter().all(|&i| b[i] == b'-')
        && b[10] == b'T'
        && [13, 16].iter().all(|&i| b[i] == b':')
        && b[19] == b'.'
        && b[23] == b'Z'
        && [0..4, 5..7, 8..10, 11..13, 14..16, 17..19, 20..23]
            .into_iter()
            .all(|range| b[range].iter().all(u8::is_ascii_digit));
    assert!(shape, "not RFC 3339 UTC with milliseconds and Z: {at:?}");
    let n = |from: usize, to: usize| at[from..to].parse::<i64>().expect("digits");
    let (year, month, day) = (n(0, 4), n(5, 7), n(8, 10));
    let (hour, minute, second, milli) = (n(11, 13), n(14, 16), n(17, 19), n(20, 23));
    assert!(
        (1..=12).contains(&month)
            && (1..=31).contains(&day)
            && hour < 24
            && minute < 60
            && second < 61,
        "not a real time: {at:?}"
    );
    // Days from the civil date (H. Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let days = era * 146_097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719_468;
    ((days * 24 + hour) * 60 + minute) * 60_000 + second * 1000 + milli
}

fn now_millis() -> i64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("a clock after 1970");
    i64::try_from(since.as_millis()).expect("milliseconds fit")
}

/// The member names of one JSON object, in the order they were written (serde_json's `Value`
/// sorts them).
struct Members(Vec<String>);

impl<'de> Deserialize<'de> for Members {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Members, D::Error> {
        struct Names;
        impl<'de> Visitor<'de> for Names {
            type Value = Members;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members, A::Error> {
                let mut names = Vec::new();
                while let Some(name) = map.next_key::<String>()? {
                    map.next_value::<IgnoredAny>()?;
                    names.push(name);
                }
                Ok(Members(names))
            }
        }
        deserializer.deserialize_map(Names)
    }
}

/// A generator seeded from the clock (or `EVENTS_SEED` to replay a failure); the seed is
/// printed so that a failing run can be repeated.
fn seeded(what: &str) -> Rng {
    let seed = std::env::var("EVENTS_SEED")
        .ok()
        .and_then(|seed| seed.parse().ok())
        .unwrap_or_else(|| {
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .expect("a clock after 1970")
                .subsec_nanos();
            u64::from(nanos) ^ 0x9e37_79b9_7f4a_7c15
        });
    eprintln!("{what}: EVENTS_SEED={seed}");
    Rng(seed | 1)
}

/// A generator of its own, drawn from `rng`.
fn fork(rng: &mut Rng) -> Rng {
    Rng(rng.next() | 1)
}

fn bearer() -> String {
    format!("Bearer {DEV_KEY}")
}

/// Polls `check` every 20 ms until it holds; fails the test past `within`.
async fn wait_until(within: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !check() {
        assert!(Instant::now() < deadline, "not within {within:?}: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Scrapes until `series` is at least `at_least`; returns it. Fails past `within`.
async fn metric_reaches(address: SocketAddr, series: &str, at_least: f64, within: Duration) -> f64 {
    let deadline = Instant::now() + within;
    loop {
        let now = value(&scrape(address).await, series);
        if now >= at_least {
            return now;
        }
        assert!(
            Instant::now() < deadline,
            "{series} is {now}, not {at_least} within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn with_args(args: &[&str]) -> Options {
    Options {
        args: args.iter().map(|arg| (*arg).to_owned()).collect(),
        ..Options::default()
    }
}

fn on_postgres(url: String) -> Options {
    Options {
        db: Some(url),
        ..Options::default()
    }
}

// ------------------------------------------------------------------------------------------
// Events and pages.

/// Checks one event against the contract: members in order, the form of each value.
fn check_event(event: &Value, members: &[String]) {
    assert_eq!(members, MEMBERS, "members in the contract's order: {event}");
    assert!(is_cursor(cursor(event)), "not 32 lowercase hex: {event}");
    assert!(TYPES.contains(&kind(event)), "unknown type: {event}");
    at_millis(event["at"].as_str().expect("at is a string"));
    let id = pet_id(event);
    revision(etag(event), id);
    if kind(event) == "pet.deleted" {
        assert!(event["pet"].is_null(), "a delete's pet is null: {event}");
    } else {
        assert_eq!(event["pet"]["id"], id, "the pet is the event's: {event}");
    }
}

/// The events of a page body, each checked.
fn events_of(body: &[u8]) -> Vec<Value> {
    let text = String::from_utf8_lossy(body);
    let events: Vec<Value> =
        serde_json::from_slice(body).unwrap_or_else(|e| panic!("not an array ({e}): {text}"));
    let members: Vec<Members> =
        serde_json::from_slice(body).unwrap_or_else(|e| panic!("not objects ({e}): {text}"));
    for (event, members) in events.iter().zip(&members) {
        check_event(event, &members.0);
    }
    events
}

/// A next link, which must read `/v1/events?after=C&limit=N[&type=T]`.
#[derive(Debug)]
struct Next {
    path: String,
    after: String,
    limit: String,
    types: Option<String>,
}

fn next_of(reply: &Reply) -> Next {
    let path = reply
        .next_link()
        .unwrap_or_else(|| panic!("an events page always has a next link: {:?}", reply.headers));
    let query = path
        .strip_prefix("/v1/events?")
        .unwrap_or_else(|| panic!("not an events link: {path}"));
    let mut parts = query.split('&');
    let mut part = |name: &str| {
        parts
            .next()
            .and_then(|part| part.strip_prefix(name))
            .map(str::to_owned)
    };
    let after = part("after=").unwrap_or_else(|| panic!("after first: {path}"));
    let limit = part("limit=").unwrap_or_else(|| panic!("then limit: {path}"));
    // A comma may be sent as is or percent-encoded.
    let types = part("type=").map(|types| types.replace("%2C", ",").replace("%2c", ","));
    assert!(parts.next().is_none(), "nothing more: {path}");
    assert!(is_cursor(&after), "a cursor: {path}");
    Next {
        path,
        after,
        limit,
        types,
    }
}

/// A query parameter of a request path.
fn param(path: &str, name: &str) -> Option<String> {
    path.split_once('?')?
        .1
        .split('&')
        .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
        .map(str::to_owned)
}

struct Page {
    events: Vec<Value>,
    next: Next,
}

/// Reads one page and checks it whole: 200, JSON, no-store, each event, cursors increasing and
/// past `after`, the filter kept, at most `limit`, and the next link where the contract says.
async fn page(client: &mut Client, path: &str) -> Page {
    let reply = client.get(path).await;
    assert_eq!(
        reply.status,
        200,
        "{path}: {}",
        String::from_utf8_lossy(&reply.body)
    );
    assert_eq!(reply.header("content-type"), Some("application/json"));
    assert_eq!(reply.header("cache-control"), Some("no-store"), "{path}");
    let events = events_of(&reply.body);
    let next = next_of(&reply);
    let after = param(path, "after");
    let limit = param(path, "limit").unwrap_or_else(|| "100".to_owned());
    let types = param(path, "type");
    assert_eq!(
        (&next.limit, &next.types),
        (&limit, &types),
        "{path}: the next link repeats limit and type"
    );
    assert!(
        events.len() <= limit.parse().expect("a numeric limit"),
        "{path}"
    );
    let mut previous = after.clone();
    for event in &events {
        if let Some(previous) = &previous {
            assert!(cursor(event) > previous.as_str(), "{path}: out of order");
        }
        previous = Some(cursor(event).to_owned());
        if let Some(types) = &types {
            assert!(
                types.split(',').any(|t| t == kind(event)),
                "{path}: filtered out: {event}"
            );
        }
    }
    match (events.last(), &after) {
        (Some(last), _) if types.is_none() => {
            assert_eq!(next.after, cursor(last), "{path}: next after the last");
        }
        // The contract says the last event's cursor here too; the type filter test checks
        // that apart, so that it alone fails on it.
        (Some(last), _) => assert!(next.after.as_str() >= cursor(last), "{path}: never back"),
        (None, Some(after)) if types.is_none() => {
            assert_eq!(
                &next.after, after,
                "{path}: an empty page stays where it was"
            );
        }
        (None, Some(after)) => assert!(next.after >= *after, "{path}: never back"),
        (None, None) => {}
    }
    Page { events, next }
}

/// Follows next links from `path` until a page is empty and its next link stays at the
/// position asked for (the poll loop has caught up); returns the events and that position.
async fn follow(client: &mut Client, path: &str) -> (Vec<Value>, String) {
    let mut events = Vec::new();
    let mut path = path.to_owned();
    for _ in 0..100_000 {
        let page = page(client, &path).await;
        let caught_up = page.events.is_empty()
            && param(&path, "after").as_deref() == Some(page.next.after.as_str());
        events.extend(page.events);
        if caught_up {
            return (events, page.next.after);
        }
        path = page.next.path;
    }
    panic!("following next links never caught up at {path}");
}

/// Every event kept, from the oldest.
async fn whole_feed(client: &mut Client) -> Vec<Value> {
    follow(client, "/v1/events?limit=1000").await.0
}

/// The events of `feed` after `position`.
fn after(feed: &[Value], position: &str) -> Vec<Value> {
    feed.iter()
        .filter(|event| cursor(event) > position)
        .cloned()
        .collect()
}

/// Asserts the whole Error body of a 410 `cursor_expired`, which tells to list again.
fn assert_expired(reply: &Reply, what: &str) {
    let error = reply.json();
    assert_eq!(
        (reply.status, &error["code"], &error["status"]),
        (410, &json!("cursor_expired"), &json!(410)),
        "{what}: {error}"
    );
    let message = error["message"].as_str().expect("a message");
    assert!(
        message.contains("list") && message.contains("Events-Cursor"),
        "{what}: the message says to list again and follow from the new Events-Cursor: {message}"
    );
    assert_eq!(
        error.as_object().map(|e| e.len()),
        Some(3),
        "{what}: {error}"
    );
    assert_eq!(reply.header("content-type"), Some("application/json"));
}

// ------------------------------------------------------------------------------------------
// Writes, and what the feed must say about them.

/// A write the server acknowledged: what its event must hold.
#[derive(Clone, Debug)]
struct Write {
    kind: &'static str,
    pet_id: i64,
    etag: String,
    /// The answer's body; null for a delete.
    pet: Value,
}

impl Write {
    fn key(&self) -> (String, i64, String) {
        (self.kind.to_owned(), self.pet_id, self.etag.clone())
    }
}

/// The exact event of an acknowledged write, given its cursor and time.
fn event_of(write: &Write, cursor: &str, at: &str) -> Value {
    json!({
        "cursor": cursor, "type": write.kind, "at": at, "petId": write.pet_id,
        "etag": write.etag, "pet": write.pet,
    })
}

type WriteLog = Arc<Mutex<Vec<Write>>>;

fn logged(log: &WriteLog) -> Vec<Write> {
    log.lock().expect("log lock").clone()
}

/// One client's sequence of creates, patches and deletes, of its own pets (and patches of
/// `shared` pets, which it never deletes).
struct Writer {
    client: Client,
    rng: Rng,
    name: String,
    own: Vec<(i64, String)>,
    max_live: usize,
    shared: Vec<i64>,
    steps: usize,
}

impl Writer {
    fn new(client: Client, name: &str, rng: Rng) -> Writer {
        Writer {
            client,
            rng,
            name: name.to_owned(),
            own: Vec::new(),
            max_live: 6,
            shared: Vec::new(),
            steps: 0,
        }
    }

    async fn send(
        &mut self,
        method: Method,
        path: &str,
        media: &str,
        body: String,
    ) -> Option<Reply> {
        let mut request = self.client.authed(method, path);
        if !media.is_empty() {
            request = request.header(CONTENT_TYPE, media);
        }
        let request = request
            .body(Full::new(Bytes::from(body)))
            .expect("a valid request");
        self.client.try_send(request).await
    }

    fn new_name(&mut self) -> String {
        format!("{}-{}", self.name, self.steps)
    }

    /// One create, patch or delete; the acknowledged write, or `None` if the connection broke.
    async fn step(&mut self) -> Option<Write> {
        self.steps += 1;
        let roll = self.rng.below(100);
        let live = self.own.len();
        if live == 0 || (roll < 40 && live < self.max_live) {
            let statuses = [None, Some("available"), Some("pending"), Some("sold")];
            let mut body = json!({"name": self.new_name(), "categoryId": self.steps});
            if let Some(status) = statuses[self.rng.below(4)] {
                body["status"] = status.into();
            }
            let reply = self
                .send(
                    Method::POST,
                    "/v1/pets",
                    "application/json",
                    body.to_string(),
                )
                .await?;
            assert_eq!(reply.status, 201, "{:?}", reply.body);
            let pet = reply.json();
            let id = pet["id"].as_i64().expect("an id");
            self.own.push((id, reply.etag().to_owned()));
            Some(Write {
                kind: "pet.created",
                pet_id: id,
                etag: reply.etag().to_owned(),
                pet,
            })
        } else if live >= self.max_live || roll < 60 {
            let (id, etag) = self.own.swap_remove(self.rng.below(live));
            let reply = self
                .send(Method::DELETE, &format!("/v1/pets/{id}"), "", String::new())
                .await?;
            assert_eq!(reply.status, 204, "{:?}", reply.body);
            Some(Write {
                kind: "pet.deleted",
                pet_id: id,
                etag,
                pet: Value::Null,
            })
        } else {
            let shared = !self.shared.is_empty() && roll.is_multiple_of(3);
            let (id, own) = if shared {
                (self.shared[self.rng.below(self.shared.len())], None)
            } else {
                let index = self.rng.below(live);
                (self.own[index].0, Some(index))
            };
            let patch = match self.rng.below(4) {
                0 => json!({"name": self.new_name()}),
                1 => json!({"status": "sold"}),
                2 => json!({"status": null}),
                _ => json!({"categoryId": self.steps}),
            };
            let reply = self
                .send(
                    Method::PATCH,
                    &format!("/v1/pets/{id}"),
                    "application/merge-patch+json",
                    patch.to_string(),
                )
                .await?;
            assert_eq!(reply.status, 200, "{:?}", reply.body);
            if let Some(index) = own {
                self.own[index].1 = reply.etag().to_owned();
            }
            Some(Write {
                kind: "pet.updated",
                pet_id: id,
                etag: reply.etag().to_owned(),
                pet: reply.json(),
            })
        }
    }

    /// `steps` writes (or until the connection breaks), each logged once acknowledged.
    async fn run(mut self, steps: usize, log: WriteLog) {
        for _ in 0..steps {
            let Some(write) = self.step().await else {
                break;
            };
            log.lock().expect("log lock").push(write);
        }
    }
}

/// `count` writers (HTTP/1.1 and HTTP/2 in turn) running `steps` writes each.
async fn spawn_writers(
    server: &Server,
    count: usize,
    steps: usize,
    shared: &[i64],
    log: &WriteLog,
    rng: &mut Rng,
) -> JoinSet<()> {
    let mut writers = JoinSet::new();
    for n in 0..count {
        let client = if n % 2 == 0 {
            server.h1().await
        } else {
            server.h2().await
        };
        let mut writer = Writer::new(client, &format!("w{n}"), fork(rng));
        writer.shared = shared.to_vec();
        writers.spawn(writer.run(steps, Arc::clone(log)));
    }
    writers
}

/// Creates `count` pets that writers share, logging the creates.
async fn create_shared(client: &mut Client, count: usize, log: &WriteLog) -> Vec<i64> {
    let mut ids = Vec::new();
    for n in 0..count {
        let reply = client
            .post_json(
                "/v1/pets",
                &format!(r#"{{"name":"shared-{n}","categoryId":0}}"#),
            )
            .await;
        assert_eq!(reply.status, 201, "{:?}", reply.body);
        let pet = reply.json();
        let id = pet["id"].as_i64().expect("an id");
        log.lock().expect("log lock").push(Write {
            kind: "pet.created",
            pet_id: id,
            etag: reply.etag().to_owned(),
            pet,
        });
        ids.push(id);
    }
    ids
}

/// Applies events to pets as a follower would; a create of a pet already there, or an update
/// or delete of one that is not, fails the test.
fn replay(pets: &mut BTreeMap<i64, Value>, events: &[Value]) {
    for event in events {
        let id = pet_id(event);
        match kind(event) {
            "pet.created" => assert!(
                pets.insert(id, event["pet"].clone()).is_none(),
                "a create of a pet already there: {event}"
            ),
            "pet.updated" => assert!(
                pets.insert(id, event["pet"].clone()).is_some(),
                "an update of a pet not there: {event}"
            ),
            _ => assert!(
                pets.remove(&id).is_some(),
                "a delete of a pet not there: {event}"
            ),
        }
    }
}

/// Along a whole feed each pet is created once, each update raises its revision, and its
/// delete carries the revision it deleted (the one the previous event gave).
fn assert_revisions_follow(feed: &[Value]) {
    let mut last: BTreeMap<i64, (u64, bool)> = BTreeMap::new();
    for event in feed {
        let id = pet_id(event);
        let rev = revision(etag(event), id);
        match (kind(event), last.get(&id).copied()) {
            ("pet.created", None) => {}
            ("pet.updated", Some((before, false))) => {
                assert!(rev > before, "an update lowers the revision: {event}");
            }
            ("pet.deleted", Some((before, false))) => {
                assert_eq!(rev, before, "a delete names the revision deleted: {event}");
            }
            (_, state) => panic!("{event} after {state:?} (revision, deleted)"),
        }
        last.insert(id, (rev, kind(event) == "pet.deleted"));
    }
}

/// The feed holds every acknowledged write exactly once, as the write's answer said, and at
/// most `unacknowledged` other events (writes whose answers a crash took).
fn assert_feed_is_writes(feed: &[Value], writes: &[Write], unacknowledged: usize) {
    let mut events = BTreeMap::new();
    for event in feed {
        let key = (
            kind(event).to_owned(),
            pet_id(event),
            etag(event).to_owned(),
        );
        assert!(
            events.insert(key, event).is_none(),
            "two events of one write: {event}"
        );
    }
    for write in writes {
        let event = events
            .remove(&write.key())
            .unwrap_or_else(|| panic!("no event for an acknowledged write: {write:?}"));
        assert_eq!(event["pet"], write.pet, "the event's pet is the answer's");
    }
    assert!(
        events.len() <= unacknowledged,
        "events of no acknowledged write: {:?}",
        events.values().collect::<Vec<_>>()
    );
}

fn by_id(pets: Vec<Value>) -> BTreeMap<i64, Value> {
    pets.into_iter()
        .map(|pet| (pet["id"].as_i64().expect("an id"), pet))
        .collect()
}

/// One `GET /v1/pets?limit=100` holding every pet: the pets and the page's Events-Cursor.
async fn snapshot(client: &mut Client) -> (BTreeMap<i64, Value>, String) {
    let reply = client.get("/v1/pets?limit=100").await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    assert_eq!(reply.next_link(), None, "one page holds every pet");
    let position = reply
        .header("events-cursor")
        .unwrap_or_else(|| panic!("no Events-Cursor on a list: {:?}", reply.headers))
        .to_owned();
    assert!(is_cursor(&position), "Events-Cursor: {position:?}");
    (by_id(reply.pets()), position)
}

// ------------------------------------------------------------------------------------------
// Server-sent events: a client that reads the stream as it comes, and its parser.

/// One dispatched event, with its fields in the order the server wrote them.
#[derive(Clone, Debug)]
struct SseEvent {
    id: Option<String>,
    event: String,
    data: String,
    fields: Vec<String>,
}

#[derive(Debug)]
enum Item {
    Retry(u64),
    Event(SseEvent),
    End { clean: bool },
}

/// The WHATWG stream format: lines of `field: value`, a blank line dispatches; `:` comments.
#[derive(Default)]
struct SseParser {
    buf: Vec<u8>,
    fields: Vec<String>,
    id: Option<String>,
    event: Option<String>,
    data: Option<String>,
    ready: VecDeque<Item>,
}

impl SseParser {
    fn feed(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
        while let Some(end) = self.buf.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.buf.drain(..=end).collect();
            let line = String::from_utf8(line).expect("a stream is UTF-8");
            let line = line.strip_suffix('\n').unwrap_or(&line);
            self.line(line.strip_suffix('\r').unwrap_or(line));
        }
    }

    fn line(&mut self, line: &str) {
        if line.is_empty() {
            self.dispatch();
            return;
        }
        if line.starts_with(':') {
            return;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "id" => self.id = Some(value.to_owned()),
            "event" => self.event = Some(value.to_owned()),
            "data" => match &mut self.data {
                Some(data) => {
                    data.push('\n');
                    data.push_str(value);
                }
                None => self.data = Some(value.to_owned()),
            },
            "retry" => {
                let retry = value
                    .parse()
                    .unwrap_or_else(|_| panic!("not a retry: {line:?}"));
                self.ready.push_back(Item::Retry(retry));
                return;
            }
            _ => panic!("a field the contract does not send: {line:?}"),
        }
        self.fields.push(field.to_owned());
    }

    fn dispatch(&mut self) {
        let fields = std::mem::take(&mut self.fields);
        let (id, event) = (self.id.take(), self.event.take());
        match self.data.take() {
            Some(data) => self.ready.push_back(Item::Event(SseEvent {
                id,
                event: event.unwrap_or_else(|| "message".to_owned()),
                data,
                fields,
            })),
            None => assert!(fields.is_empty(), "a block without data: {fields:?}"),
        }
    }

    /// Whether the input so far ended at a block boundary.
    fn between_blocks(&self) -> bool {
        self.buf.is_empty() && self.fields.is_empty()
    }
}

/// Aborts the connection's task when dropped: the TCP connection goes with it.
struct Connection(tokio::task::JoinHandle<()>);

impl Drop for Connection {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// An open stream. Dropping it drops its connection (a killed client).
struct Sse {
    headers: HeaderMap,
    body: Incoming,
    parser: SseParser,
    ended: Option<bool>,
    /// The id of the last event dispatched, which a browser sends back as Last-Event-ID.
    last_id: Option<String>,
    /// What the next event must come after: the last event or later bookmark (the opening
    /// bookmark's own position is checked where a test is about it).
    order: Option<String>,
    /// The request sender, kept so that the connection is not closed under the stream.
    _sender: Box<dyn Any + Send>,
    connection: Option<Connection>,
}

/// `GET path` with exactly `headers`: the stream when the answer is one (200,
/// text/event-stream), else the whole answer.
async fn open(
    addr: SocketAddr,
    protocol: Protocol,
    path: &str,
    headers: &[(&str, &str)],
) -> Result<Sse, Reply> {
    let tls = tls_connect(addr, tls_config(protocol.alpn(), rustls::DEFAULT_VERSIONS))
        .await
        .expect("TLS connects");
    let io = TokioIo::new(tls);
    let authority = format!("localhost:{}", addr.port());
    let mut request = match protocol {
        Protocol::Http1 => Request::get(path).header(HOST, &authority),
        Protocol::Http2 => Request::get(format!("https://{authority}{path}")),
    };
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request
        .body(Full::new(Bytes::new()))
        .expect("a valid request");
    let (response, sender, connection): (_, Box<dyn Any + Send>, _) = match protocol {
        Protocol::Http1 => {
            let (mut sender, conn) = http1::handshake(io).await.expect("HTTP/1.1 handshake");
            let connection = Connection(tokio::spawn(async move {
                let _ = conn.await;
            }));
            sender.ready().await.expect("connection ready");
            let response = sender.send_request(request).await.expect("an answer");
            (response, Box::new(sender), connection)
        }
        Protocol::Http2 => {
            let (mut sender, conn) = http2::handshake(TokioExecutor::new(), io)
                .await
                .expect("HTTP/2 handshake");
            let connection = Connection(tokio::spawn(async move {
                let _ = conn.await;
            }));
            sender.ready().await.expect("connection ready");
            let response = sender.send_request(request).await.expect("an answer");
            (response, Box::new(sender), connection)
        }
    };
    let (parts, body) = response.into_parts();
    let is_stream = parts.status == 200
        && parts
            .headers
            .get(CONTENT_TYPE)
            .is_some_and(|media| media.as_bytes().starts_with(b"text/event-stream"));
    if !is_stream {
        let body = body.collect().await.expect("the whole answer").to_bytes();
        return Err(Reply {
            status: parts.status.as_u16(),
            headers: parts.headers,
            body,
        });
    }
    Ok(Sse {
        headers: parts.headers,
        body,
        parser: SseParser::default(),
        ended: None,
        last_id: None,
        order: None,
        _sender: sender,
        connection: Some(connection),
    })
}

/// A stream request with the development key and `Accept: text/event-stream`, plus `extra`.
async fn stream(
    addr: SocketAddr,
    protocol: Protocol,
    path: &str,
    extra: &[(&str, &str)],
) -> Result<Sse, Reply> {
    let bearer = bearer();
    let mut headers = vec![
        ("authorization", bearer.as_str()),
        ("accept", "text/event-stream"),
    ];
    headers.extend_from_slice(extra);
    open(addr, protocol, path, &headers).await
}

fn streaming(opened: Result<Sse, Reply>) -> Sse {
    opened.unwrap_or_else(|reply| {
        panic!(
            "not a stream: {} {:?} {}",
            reply.status,
            reply.headers,
            String::from_utf8_lossy(&reply.body)
        )
    })
}

fn refused(opened: Result<Sse, Reply>) -> Reply {
    match opened {
        Ok(sse) => panic!("a stream where an error was due: {:?}", sse.headers),
        Err(reply) => reply,
    }
}

/// A bookmark's position; asserts its exact form.
fn bookmark(event: &SseEvent) -> String {
    assert_eq!(event.event, "bookmark", "{event:?}");
    assert_eq!(event.fields, ["id", "event", "data"], "{event:?}");
    let id = event.id.clone().expect("a bookmark has an id");
    assert!(is_cursor(&id), "{event:?}");
    assert_eq!(event.data, format!(r#"{{"cursor":"{id}"}}"#), "{event:?}");
    id
}

/// A feed event's JSON; asserts the stream's form of it (`id`, `event`, one `data` line
/// holding the event with its members in order).
fn event_value(event: &SseEvent) -> Value {
    assert_eq!(event.fields, ["id", "event", "data"], "{event:?}");
    let value: Value = serde_json::from_str(&event.data)
        .unwrap_or_else(|e| panic!("data is not JSON ({e}): {event:?}"));
    let members: Members = serde_json::from_str(&event.data).expect("an object");
    check_event(&value, &members.0);
    assert_eq!(
        event.id.as_deref(),
        Some(cursor(&value)),
        "id is the cursor"
    );
    assert_eq!(event.event, kind(&value), "event is the type");
    value
}

impl Sse {
    /// The next item, or `None` if nothing came within `within`.
    async fn item(&mut self, within: Duration) -> Option<Item> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(item) = self.parser.ready.pop_front() {
                if let Item::Event(event) = &item {
                    let id = event
                        .id
                        .clone()
                        .unwrap_or_else(|| panic!("an event without an id: {event:?}"));
                    if let Some(last) = &self.order {
                        if event.event == "bookmark" {
                            assert!(id >= *last, "a bookmark went back: {event:?}");
                        } else {
                            assert!(id > *last, "an event out of order: {event:?}");
                        }
                    }
                    self.order = Some(id.clone());
                    self.last_id = Some(id);
                }
                return Some(item);
            }
            if let Some(clean) = self.ended {
                if clean {
                    assert!(self.parser.between_blocks(), "a clean end inside an event");
                }
                return Some(Item::End { clean });
            }
            match tokio::time::timeout_at(deadline, self.body.frame()).await {
                Err(_) => return None,
                Ok(None) => self.ended = Some(true),
                Ok(Some(Err(_))) => self.ended = Some(false),
                Ok(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data() {
                        self.parser.feed(&data);
                    }
                }
            }
        }
    }

    async fn next(&mut self) -> Item {
        self.item(STREAM_WAIT)
            .await
            .unwrap_or_else(|| panic!("nothing on the stream for {STREAM_WAIT:?}"))
    }

    /// The start every stream makes, `retry: 2000` and a bookmark; returns its position.
    async fn start(&mut self) -> String {
        match self.next().await {
            Item::Retry(2000) => {}
            other => panic!("a stream begins with retry: 2000, not {other:?}"),
        }
        let position = match self.next().await {
            Item::Event(event) => bookmark(&event),
            other => panic!("then a bookmark, not {other:?}"),
        };
        self.order = None;
        position
    }

    /// Reads until the event whose cursor is `last` (bookmarks checked and skipped); returns
    /// the events.
    async fn until(&mut self, last: &str) -> Vec<Value> {
        let mut events = Vec::new();
        loop {
            match self.next().await {
                Item::Event(event) if event.event == "bookmark" => {
                    bookmark(&event);
                }
                Item::Event(event) => {
                    let value = event_value(&event);
                    let at = cursor(&value).to_owned();
                    events.push(value);
                    if at == last {
                        return events;
                    }
                    assert!(at.as_str() < last, "past {last}: {at}");
                }
                other => panic!("before {last}: {other:?}"),
            }
        }
    }

    /// Reads to the end of the stream; returns the events (bookmarks skipped) and whether the
    /// body ended cleanly.
    async fn read_to_end(&mut self, within: Duration) -> (Vec<Value>, bool) {
        let deadline = Instant::now() + within;
        let mut events = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.item(left).await {
                None => panic!("the stream did not end within {within:?}"),
                Some(Item::End { clean }) => return (events, clean),
                Some(Item::Event(event)) if event.event == "bookmark" => {
                    bookmark(&event);
                }
                Some(Item::Event(event)) => events.push(event_value(&event)),
                Some(other) => panic!("mid-stream: {other:?}"),
            }
        }
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(name)
            .map(|v| v.to_str().expect("a text header"))
    }

    /// Asserts the stream's headers.
    fn assert_headers(&self) {
        assert_eq!(self.header("content-type"), Some("text/event-stream"));
        assert_eq!(self.header("cache-control"), Some("no-store"));
        assert_eq!(self.header("x-accel-buffering"), Some("no"));
        assert_eq!(
            self.header("content-length"),
            None,
            "a stream has no length"
        );
        assert_eq!(self.header("content-encoding"), None, "never compressed");
    }
}

/// Forwards a stream's feed events (bookmarks checked and skipped) with the instant each
/// arrived, until it ends or stays silent for a minute.
fn forward(mut sse: Sse) -> tokio::sync::mpsc::UnboundedReceiver<(Value, Instant)> {
    let (send, receive) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(Item::Event(event)) = sse.item(Duration::from_secs(60)).await {
            if event.event == "bookmark" {
                bookmark(&event);
            } else if send.send((event_value(&event), Instant::now())).is_err() {
                break;
            }
        }
    });
    receive
}

/// Receives forwarded events until the one whose cursor is `last`.
async fn receive_until(
    receive: &mut tokio::sync::mpsc::UnboundedReceiver<(Value, Instant)>,
    last: &str,
    what: &str,
) -> Vec<Value> {
    let mut events = Vec::new();
    loop {
        let (event, _) = tokio::time::timeout(STREAM_WAIT, receive.recv())
            .await
            .unwrap_or_else(|_| panic!("{what}: no event for {STREAM_WAIT:?} before {last}"))
            .unwrap_or_else(|| panic!("{what}: the stream ended before {last}"));
        let at = cursor(&event).to_owned();
        events.push(event);
        if at == last {
            return events;
        }
    }
}

// ------------------------------------------------------------------------------------------
// Pages.

#[tokio::test(flavor = "multi_thread")]
async fn an_empty_feed_is_an_empty_page_whose_next_link_stays_where_it_is() {
    let server = Server::start();
    let mut client = server.h1().await;
    let first = page(&mut client, "/v1/events").await;
    assert!(first.events.is_empty());
    assert_eq!(first.next.limit, "100", "the default limit");
    // Following next for ever stays at the same position while nothing happens.
    let mut path = first.next.path.clone();
    for _ in 0..3 {
        let again = page(&mut client, &path).await;
        assert!(again.events.is_empty());
        assert_eq!(again.next.path, path);
        path = again.next.path;
    }
    // The list's Events-Cursor is a position too: following from it finds the next change.
    let (pets, position) = snapshot(&mut client).await;
    assert!(pets.is_empty());
    let rex = client.create(r#"{"name":"Rex","categoryId":1}"#).await;
    let from_list = page(&mut client, &format!("/v1/events?after={position}")).await;
    let from_link = page(&mut client, &path).await;
    assert_eq!(from_list.events, from_link.events);
    assert_eq!(from_list.events.len(), 1);
    assert_eq!(from_list.events[0]["pet"], rex);

    // HEAD answers as GET, without a body; HTTP/2 pages are the same.
    let head = client
        .send(client.authed(Method::HEAD, &path), Bytes::new())
        .await;
    assert_eq!(head.status, 200);
    assert!(head.body.is_empty());
    assert_eq!(head.header("content-type"), Some("application/json"));
    assert_eq!(head.header("cache-control"), Some("no-store"));
    assert_eq!(next_of(&head).path, from_link.next.path);
    let mut h2 = server.h2().await;
    assert_eq!(page(&mut h2, &path).await.events, from_link.events);
    server.stop();
}

/// Sends a write; returns its answer and the clock (ms) just before and just after.
async fn timed_send(
    client: &mut Client,
    method: Method,
    path: &str,
    body: &str,
) -> (Reply, i64, i64) {
    let media = match method {
        Method::POST => "application/json",
        _ => "application/merge-patch+json",
    };
    let headers: &[(&str, &str)] = if body.is_empty() {
        &[]
    } else {
        &[("content-type", media)]
    };
    let before = now_millis();
    let reply = client
        .send_with(method, path, headers, body.to_owned())
        .await;
    (reply, before, now_millis())
}

#[tokio::test(flavor = "multi_thread")]
async fn create_patch_and_delete_each_make_one_event_holding_the_answer_s_etag_and_pet() {
    let server = Server::start();
    let mut client = server.h1().await;
    let (_, start) = follow(&mut client, "/v1/events").await;
    let mut expected: Vec<Write> = Vec::new();
    let mut times = Vec::new();
    let (created, before, after_) = timed_send(
        &mut client,
        Method::POST,
        "/v1/pets",
        r#"{"name":"Rex","categoryId":1,"status":"available"}"#,
    )
    .await;
    assert_eq!(created.status, 201);
    let id = created.json()["id"].as_i64().expect("id");
    let path = format!("/v1/pets/{id}");
    expected.push(Write {
        kind: "pet.created",
        pet_id: id,
        etag: created.etag().to_owned(),
        pet: created.json(),
    });
    times.push((before, after_));
    for patch in [r#"{"name":"Max","status":"sold"}"#, "{}"] {
        let (patched, before, after_) = timed_send(&mut client, Method::PATCH, &path, patch).await;
        assert_eq!(patched.status, 200, "{patch}");
        expected.push(Write {
            kind: "pet.updated",
            pet_id: id,
            etag: patched.etag().to_owned(),
            pet: patched.json(),
        });
        times.push((before, after_));
    }

    // Writes that change nothing make no event: a refused body, a stale If-Match, an unknown
    // id, and a keyed create's replay (its first answer made one).
    let stale = client
        .send_with(
            Method::PATCH,
            &path,
            &[
                ("content-type", "application/merge-patch+json"),
                ("if-match", created.etag()),
            ],
            r#"{"name":"never"}"#,
        )
        .await;
    assert_eq!(stale.status, 412);
    assert_eq!(client.patch_json("/v1/pets/999", "{}").await.status, 404);
    assert_eq!(client.delete("/v1/pets/999").await.status, 404);
    assert_eq!(client.post_json("/v1/pets", "{}").await.status, 400);
    let body = r#"{"name":"Tom","categoryId":2}"#;
    let before = now_millis();
    let keyed = post_keyed(&mut client, "once", body).await;
    times.push((before, now_millis()));
    assert_replay(&keyed, &post_keyed(&mut client, "once", body).await);
    expected.push(Write {
        kind: "pet.created",
        pet_id: keyed.json()["id"].as_i64().expect("id"),
        etag: keyed.etag().to_owned(),
        pet: keyed.json(),
    });

    let last_tag = expected[2].etag.clone();
    let (deleted, before, after_) = timed_send(&mut client, Method::DELETE, &path, "").await;
    assert_eq!(deleted.status, 204);
    expected.push(Write {
        kind: "pet.deleted",
        pet_id: id,
        etag: last_tag,
        pet: Value::Null,
    });
    times.push((before, after_));

    let events = page(&mut client, &format!("/v1/events?after={start}")).await;
    assert_eq!(events.events.len(), expected.len(), "{:?}", events.events);
    for ((event, write), (before, after_)) in events.events.iter().zip(&expected).zip(&times) {
        let at = event["at"].as_str().expect("at");
        assert_eq!(event, &event_of(write, cursor(event), at));
        let millis = at_millis(at);
        assert!(
            (before - 2..=after_ + 2).contains(&millis),
            "{at} is not between the request ({before}) and its answer ({after_})"
        );
    }
    // Nothing more, and the list is at the last event's position.
    let last = cursor(events.events.last().expect("events")).to_owned();
    assert_eq!(events.next.after, last);
    assert!(page(&mut client, &events.next.path).await.events.is_empty());
    let (_, position) = snapshot(&mut client).await;
    assert_eq!(position, last, "Events-Cursor is the newest position");
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn limit_bounds_a_page_from_1_to_1000_default_100_and_anything_else_is_400() {
    let server = Server::start();
    crate::support::create_many(&server, 150, |_| None).await;
    let mut client = server.h2().await;
    let first = page(&mut client, "/v1/events").await;
    assert_eq!(first.events.len(), 100, "the default limit");
    let second = page(&mut client, &first.next.path).await;
    assert_eq!(second.events.len(), 50);
    let third = page(&mut client, &second.next.path).await;
    assert!(third.events.is_empty());
    assert_eq!(third.next.path, second.next.path);
    let all: Vec<Value> = first.events.into_iter().chain(second.events).collect();
    for limit in [1, 7, 149, 150, 1000] {
        let page = page(&mut client, &format!("/v1/events?limit={limit}")).await;
        assert_eq!(page.events[..], all[..limit.min(150)], "limit={limit}");
        let (followed, _) = follow(&mut client, &format!("/v1/events?limit={limit}")).await;
        assert_eq!(followed, all, "following with limit={limit}");
    }
    for query in [
        "limit=0",
        "limit=1001",
        "limit=-1",
        "limit=ten",
        "limit=",
        "limit=1.5",
        "limit=5&limit=5",
        "type=pet.created&type=pet.created",
    ] {
        for accept in ["application/json", "text/event-stream"] {
            let reply = client
                .send_with(
                    Method::GET,
                    &format!("/v1/events?{query}"),
                    &[("accept", accept)],
                    Bytes::new(),
                )
                .await;
            reply.assert_error_prefix(400, "invalid_parameter", "");
        }
    }
    // Unknown parameters are ignored, as on /v1/pets.
    let ignored = page(&mut client, "/v1/events?limit=2&sort=desc&page=3").await;
    assert_eq!(ignored.events[..], all[..2]);
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn following_next_links_for_ever_is_a_poll_loop_that_sees_each_change_once() {
    let server = Server::start();
    let mut reader = server.h1().await;
    let mut rng = seeded("poll loop");
    let mut writer = Writer::new(server.h2().await, "poll", fork(&mut rng));
    let mut writes = Vec::new();
    let mut seen = Vec::new();
    let mut path = "/v1/events?limit=3".to_owned();
    for _ in 0..30 {
        for _ in 0..rng.below(6) {
            writes.push(writer.step().await.expect("the server answers"));
        }
        // One poll: follow until the page comes back empty at the position asked for.
        loop {
            let page = page(&mut reader, &path).await;
            let empty = page.events.is_empty();
            seen.extend(page.events);
            path = page.next.path;
            if empty {
                break;
            }
        }
    }
    assert_eq!(seen, whole_feed(&mut reader).await);
    assert_feed_is_writes(&seen, &writes, 0);
    assert_revisions_follow(&seen);
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn the_type_filter_keeps_its_types_and_an_unknown_or_empty_type_is_400() {
    let server = Server::start();
    let mut client = server.h1().await;
    let mut writer = Writer::new(server.h2().await, "filter", seeded("type filter"));
    let mut writes = Vec::new();
    for _ in 0..60 {
        writes.push(writer.step().await.expect("an answer"));
    }
    let feed = whole_feed(&mut client).await;
    assert_feed_is_writes(&feed, &writes, 0);
    for types in [
        "pet.deleted",
        "pet.created",
        "pet.updated",
        "pet.created,pet.deleted",
        "pet.deleted,pet.updated,pet.created",
    ] {
        let wanted: Vec<Value> = feed
            .iter()
            .filter(|event| types.split(',').any(|t| t == kind(event)))
            .cloned()
            .collect();
        for limit in [1, 2, 1000] {
            let (got, end) = follow(
                &mut client,
                &format!("/v1/events?limit={limit}&type={types}"),
            )
            .await;
            assert_eq!(got, wanted, "type={types} limit={limit}");
            // The filtered scan ends at the newest position, past events of other types.
            assert_eq!(end, cursor(feed.last().expect("events")), "type={types}");
        }
    }
    for types in [
        "pet.sold",
        "",
        "pet.created,",
        ",pet.created",
        "PET.CREATED",
        "pet",
    ] {
        client
            .get(&format!("/v1/events?type={types}"))
            .await
            .assert_error_prefix(400, "invalid_parameter", "");
    }
    // The contract: a page that returned events links on from the last one it returned. At
    // the end of the feed for certain: a create, then two patches, read for creates only.
    let (_, before) = snapshot(&mut client).await;
    let rex = client.create(r#"{"name":"Rex","categoryId":1}"#).await;
    for patch in [r#"{"status":"sold"}"#, r#"{"categoryId":2}"#] {
        let path = format!("/v1/pets/{}", rex["id"]);
        assert_eq!(client.patch_json(&path, patch).await.status, 200);
    }
    let mut past = Vec::new();
    let path = format!("/v1/events?after={before}&limit=2&type=pet.created");
    let created = page(&mut client, &path).await;
    assert_eq!(created.events.len(), 1);
    assert_eq!(created.events[0]["pet"], rex);
    if created.next.after != cursor(&created.events[0]) {
        past.push(format!(
            "{path} returned only {} and links to {}",
            cursor(&created.events[0]),
            created.next.path
        ));
    }
    for types in ["pet.deleted", "pet.created", "pet.created,pet.updated"] {
        let mut path = format!("/v1/events?limit=2&type={types}");
        loop {
            let page = page(&mut client, &path).await;
            match page.events.last() {
                Some(last) if page.next.after != cursor(last) => past.push(format!(
                    "{path} returned up to {} and links to {}",
                    cursor(last),
                    page.next.path
                )),
                Some(_) => {}
                None if param(&path, "after").as_deref() == Some(page.next.after.as_str()) => {
                    break;
                }
                None => {}
            }
            path = page.next.path;
        }
    }
    assert!(
        past.is_empty(),
        "filtered pages link past the last event they returned:\n{}",
        past.join("\n")
    );
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_malformed_or_repeated_cursor_is_400_invalid_cursor_on_pages_and_streams() {
    let server = Server::start();
    let mut client = server.h1().await;
    client.create(r#"{"name":"Rex","categoryId":1}"#).await;
    let good = cursor(&whole_feed(&mut client).await[0]).to_owned();
    let malformed = [
        "xyz".to_owned(),
        String::new(),
        good[..31].to_owned(),
        format!("{good}0"),
        format!("{}g", &good[..31]),
        format!("{}%20", &good[..30]),
    ];
    for bad in &malformed {
        let path = format!("/v1/events?after={bad}");
        client
            .get(&path)
            .await
            .assert_error_prefix(400, "invalid_cursor", "");
        let reply = refused(stream(server.addr, Protocol::Http2, &path, &[]).await);
        reply.assert_error_prefix(400, "invalid_cursor", "");
        if !bad.is_empty() && !bad.contains('%') {
            let reply = refused(
                stream(
                    server.addr,
                    Protocol::Http1,
                    "/v1/events",
                    &[("last-event-id", bad.as_str())],
                )
                .await,
            );
            reply.assert_error_prefix(400, "invalid_cursor", "");
        }
    }
    let twice = format!("/v1/events?after={good}&after={good}");
    client
        .get(&twice)
        .await
        .assert_error_prefix(400, "invalid_cursor", "");
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cursor_of_another_store_s_feed_is_410_cursor_expired_on_pages_and_streams() {
    let (ours, theirs) = (Server::start(), Server::start());
    let mut client = ours.h1().await;
    let mut other = theirs.h2().await;
    for n in 0..3 {
        client
            .create(&format!(r#"{{"name":"ours-{n}","categoryId":1}}"#))
            .await;
        other
            .create(&format!(r#"{{"name":"theirs-{n}","categoryId":1}}"#))
            .await;
    }
    let (_, their_position) = snapshot(&mut other).await;
    let mut foreign: Vec<String> = whole_feed(&mut other)
        .await
        .iter()
        .map(|event| cursor(event).to_owned())
        .collect();
    foreign.push(their_position);
    let our_feed = whole_feed(&mut client).await;
    for theirs in &foreign {
        let path = format!("/v1/events?after={theirs}");
        assert_expired(&client.get(&path).await, &path);
        let reply = refused(stream(ours.addr, Protocol::Http1, &path, &[]).await);
        assert_expired(&reply, "a stream after a foreign cursor");
        let reply = refused(
            stream(
                ours.addr,
                Protocol::Http2,
                "/v1/events",
                &[("last-event-id", theirs)],
            )
            .await,
        );
        assert_expired(&reply, "a stream with a foreign Last-Event-ID");
    }
    // And the other way round.
    for event in &our_feed {
        let path = format!("/v1/events?after={}", cursor(event));
        assert_expired(&other.get(&path).await, &path);
    }
    ours.stop();
    theirs.stop();
}

/// A position beyond the newest this store has gets 410, never a silent wait for (or replay
/// of) other events: as after a store file is put back from an older copy of itself.
#[tokio::test(flavor = "multi_thread")]
async fn a_position_beyond_the_newest_of_the_store_gets_410_as_after_an_older_file_is_restored() {
    let server = Server::start();
    let mut client = server.h1().await;
    for n in 0..3 {
        client
            .create(&format!(r#"{{"name":"old-{n}","categoryId":1}}"#))
            .await;
    }
    let (_, then) = snapshot(&mut client).await;
    drop(client);
    let stopped = server.stop();
    let older = stopped.dir.path().join("older.redb");
    std::fs::copy(stopped.dir.path().join("pets.redb"), &older).expect("a copy of the file");
    let server = Server::start_on(stopped);
    let mut client = server.h1().await;
    for n in 0..3 {
        client
            .create(&format!(r#"{{"name":"new-{n}","categoryId":1}}"#))
            .await;
    }
    let (_, newer) = snapshot(&mut client).await;
    assert!(newer > then);
    drop(client);
    let stopped = server.stop();
    let server = Server::start_with(Options {
        db: Some(older.display().to_string()),
        ..Options::default()
    });
    let mut client = server.h2().await;
    let (_, here) = snapshot(&mut client).await;
    assert_eq!(here, then, "the older file's own position");
    let path = format!("/v1/events?after={newer}");
    assert_expired(&client.get(&path).await, &path);
    let reply = refused(stream(server.addr, Protocol::Http1, &path, &[]).await);
    assert_expired(&reply, "a stream from beyond the newest position");
    assert!(
        page(&mut client, &format!("/v1/events?after={then}"))
            .await
            .events
            .is_empty()
    );
    server.stop();
    drop(stopped);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_read_only_key_reads_the_feed_and_no_key_gets_401() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (keys, reader) = crate::support::keys_with_a_reader(dir.path());
    let server = Server::start_with(Options {
        api_keys: keys,
        ..Options::default()
    });
    let mut client = server.h1().await;
    let rex = client.create(r#"{"name":"Rex","categoryId":1}"#).await;
    let as_reader = format!("Bearer {reader}");
    let reply = client
        .send(
            client
                .request(Method::GET, "/v1/events")
                .header("authorization", &as_reader),
            Bytes::new(),
        )
        .await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    let events = events_of(&reply.body);
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["pet"], rex);
    let mut sse = streaming(
        open(
            server.addr,
            Protocol::Http2,
            "/v1/events",
            &[
                ("authorization", as_reader.as_str()),
                ("accept", "text/event-stream"),
            ],
        )
        .await,
    );
    sse.start().await;
    assert_eq!(sse.until(cursor(&events[0])).await, events);

    for accept in ["application/json", "text/event-stream"] {
        let request = client
            .request(Method::GET, "/v1/events")
            .header("accept", accept);
        let reply = client.send(request, Bytes::new()).await;
        reply.assert_error(401, "unauthorized", MISSING_KEY);
        assert_eq!(
            reply.header("www-authenticate"),
            Some(r#"Bearer realm="petstore""#)
        );
    }
    let wrong = refused(
        open(
            server.addr,
            Protocol::Http1,
            "/v1/events",
            &[
                ("authorization", "Bearer wrong"),
                ("accept", "text/event-stream"),
            ],
        )
        .await,
    );
    assert_eq!(wrong.status, 401);
    server.stop();
}

// ------------------------------------------------------------------------------------------
// List, then follow.

#[tokio::test(flavor = "multi_thread")]
async fn listing_then_following_sees_every_later_change_once_under_concurrent_writes() {
    list_then_follow(Options::default()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn on_postgres_listing_then_following_sees_every_later_change_once() {
    let cluster = tokio::task::block_in_place(Cluster::start);
    list_then_follow(on_postgres(cluster.url())).await;
}

/// Four writers create, patch and delete while three readers, at different moments, each list
/// once (one page: the pets stay under 100) and follow the feed from that list's
/// Events-Cursor until the writers are done. For each reader: the followed events are exactly
/// the feed's events after its cursor, the feed up to its cursor replays to exactly its list,
/// and its list with the followed events replayed is exactly the final list.
async fn list_then_follow(options: Options) {
    let server = Server::start_with(options);
    let log = WriteLog::default();
    let mut rng = seeded("list then follow");
    let shared = create_shared(&mut server.h1().await, 3, &log).await;
    let done = Arc::new(AtomicBool::new(false));
    let mut readers = JoinSet::new();
    for n in 0..3 {
        let mut client = server.h2().await;
        let (log, done) = (Arc::clone(&log), Arc::clone(&done));
        readers.spawn(async move {
            wait_until(Duration::from_secs(60), "writes go on", || {
                logged(&log).len() >= 20 + 50 * n
            })
            .await;
            let (listed, position) = snapshot(&mut client).await;
            let mut followed = Vec::new();
            let mut path = format!("/v1/events?after={position}&limit=5");
            loop {
                let finished = done.load(Ordering::SeqCst);
                let (events, end) = follow(&mut client, &path).await;
                followed.extend(events);
                path = format!("/v1/events?after={end}&limit=5");
                if finished {
                    return (listed, position, followed);
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        });
    }
    let writers = spawn_writers(&server, 4, 50, &shared, &log, &mut rng).await;
    writers.join_all().await;
    done.store(true, Ordering::SeqCst);
    let readers = readers.join_all().await;

    let mut client = server.h1().await;
    let feed = whole_feed(&mut client).await;
    assert_feed_is_writes(&feed, &logged(&log), 0);
    assert_revisions_follow(&feed);
    let (last, _) = snapshot(&mut client).await;
    for (n, (listed, position, followed)) in readers.into_iter().enumerate() {
        assert_eq!(
            followed,
            after(&feed, &position),
            "reader {n}: every change after once"
        );
        let mut before = BTreeMap::new();
        let upto: Vec<Value> = feed
            .iter()
            .filter(|event| cursor(event) <= position.as_str())
            .cloned()
            .collect();
        replay(&mut before, &upto);
        assert_eq!(
            before, listed,
            "reader {n}: the list is the feed up to its cursor"
        );
        let mut now = listed;
        replay(&mut now, &followed);
        assert_eq!(now, last, "reader {n}: the list and the changes after it");
    }
    server.stop();
}

// ------------------------------------------------------------------------------------------
// Server-sent events.

#[tokio::test(flavor = "multi_thread")]
async fn a_stream_starts_with_retry_and_a_bookmark_then_sends_live_events_in_order() {
    let server = Server::start();
    let mut client = server.h1().await;
    let (_, empty) = follow(&mut client, "/v1/events").await;
    let bearer = bearer();
    let mut streams = Vec::new();
    for (protocol, accept) in [
        (Protocol::Http1, "text/event-stream"),
        (
            Protocol::Http2,
            "application/json;q=0.5, Text/Event-Stream; charset=utf-8",
        ),
    ] {
        let headers = [
            ("authorization", bearer.as_str()),
            ("accept", accept),
            ("accept-encoding", "gzip, br"),
        ];
        let mut sse = streaming(open(server.addr, protocol, "/v1/events", &headers).await);
        sse.assert_headers();
        assert_eq!(
            sse.start().await,
            empty,
            "{protocol:?}: the start of an empty feed"
        );
        streams.push(sse);
    }
    let mut writer = Writer::new(server.h2().await, "live", seeded("live"));
    let mut writes = Vec::new();
    for _ in 0..30 {
        writes.push(writer.step().await.expect("an answer"));
    }
    let feed = whole_feed(&mut client).await;
    assert_feed_is_writes(&feed, &writes, 0);
    let last = cursor(feed.last().expect("events")).to_owned();
    for sse in &mut streams {
        assert_eq!(sse.until(&last).await, feed, "the same events as the pages");
    }

    // Last-Event-ID wins over after; an empty one is no Last-Event-ID.
    let (nine, four) = (cursor(&feed[9]).to_owned(), cursor(&feed[4]).to_owned());
    let path = format!("/v1/events?after={four}");
    let mut resumed = streaming(
        stream(
            server.addr,
            Protocol::Http1,
            &path,
            &[("last-event-id", nine.as_str())],
        )
        .await,
    );
    resumed.start().await;
    assert_eq!(resumed.until(&last).await, feed[10..]);
    let mut from_after = streaming(
        stream(
            server.addr,
            Protocol::Http2,
            &path,
            &[("last-event-id", "")],
        )
        .await,
    );
    from_after.start().await;
    assert_eq!(from_after.until(&last).await, feed[5..]);
    // A stream from the newest position is a live one: the next write is its next event.
    let mut at_end = streaming(
        stream(
            server.addr,
            Protocol::Http2,
            &format!("/v1/events?after={last}"),
            &[],
        )
        .await,
    );
    assert_eq!(at_end.start().await, last);
    let write = writer.step().await.expect("an answer");
    match at_end.next().await {
        Item::Event(event) => {
            let value = event_value(&event);
            assert_eq!(
                value,
                event_of(&write, cursor(&value), value["at"].as_str().expect("at"))
            );
        }
        other => panic!("the live event, not {other:?}"),
    }
    // Without text/event-stream in Accept, the same URL is a page.
    let reply = client
        .send_with(
            Method::GET,
            &path,
            &[("accept", "application/json")],
            Bytes::new(),
        )
        .await;
    assert_eq!(reply.header("content-type"), Some("application/json"));
    let feed = whole_feed(&mut client).await;
    assert_eq!(events_of(&reply.body), after(&feed, &four));
    server.stop();
}

/// The stream opens with a bookmark of its starting position. A browser takes a bookmark's
/// `id:` as its Last-Event-ID like any other, so an opening bookmark past the events sent
/// after it would make a client that reconnects right after it skip them: each way of
/// opening a stream here is left just after its bookmark and resumed from it, and must get
/// every event after its start.
#[tokio::test(flavor = "multi_thread")]
async fn a_stream_s_opening_bookmark_is_its_start_so_resuming_from_it_loses_nothing() {
    let server = Server::start();
    let mut client = server.h1().await;
    let (_, start) = follow(&mut client, "/v1/events").await;
    for n in 0..3 {
        client
            .create(&format!(r#"{{"name":"early-{n}","categoryId":1}}"#))
            .await;
    }
    let first = cursor(&whole_feed(&mut client).await[0]).to_owned();
    let mut wrong = Vec::new();
    for (path, last_event_id, from) in [
        ("/v1/events".to_owned(), "", &start),
        (format!("/v1/events?after={start}"), "", &start),
        ("/v1/events".to_owned(), start.as_str(), &start),
        (format!("/v1/events?after={first}"), "", &first),
    ] {
        let what = format!("{path} with Last-Event-ID {last_event_id:?}");
        let mut sse = streaming(
            stream(
                server.addr,
                Protocol::Http1,
                &path,
                &[("last-event-id", last_event_id)],
            )
            .await,
        );
        let opening = sse.start().await;
        drop(sse);
        let mut resumed = streaming(
            stream(
                server.addr,
                Protocol::Http2,
                "/v1/events",
                &[("last-event-id", opening.as_str())],
            )
            .await,
        );
        resumed.start().await;
        client.create(r#"{"name":"marker","categoryId":1}"#).await;
        let feed = whole_feed(&mut client).await;
        let got = resumed.until(cursor(feed.last().expect("events"))).await;
        let due = after(&feed, from);
        if opening != *from {
            wrong.push(format!(
                "{what}: the opening bookmark is {opening}, not the start {from}"
            ));
        }
        if got != due {
            wrong.push(format!(
                "{what}: resumed from that bookmark, {} events came of the {} after the start",
                got.len(),
                due.len()
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stream_killed_at_random_points_and_resumed_by_last_event_id_sees_every_event_once() {
    killed_and_resumed(true).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stream_killed_at_random_points_and_resumed_from_its_last_event_sees_every_event_once() {
    killed_and_resumed(false).await;
}

/// Three writers create, patch and delete while a reader reads a stream in pieces: each piece
/// (HTTP/1.1 and HTTP/2 in turn) is killed after a random number of items (its connection
/// closed, or on HTTP/2 only its stream reset) and the next resumes with Last-Event-ID, and an
/// `after` at the very start that it must lose to. Across the pieces: every event once, in
/// order. As a browser (`browser`), the resume point is the id of the last event dispatched,
/// bookmarks included; otherwise the cursor of the last feed event received.
async fn killed_and_resumed(browser: bool) {
    let server = Server::start();
    let mut client = server.h1().await;
    let (_, start) = follow(&mut client, "/v1/events").await;
    let log = WriteLog::default();
    let mut rng = seeded("killed and resumed");
    let writers = spawn_writers(&server, 3, 60, &[], &log, &mut rng).await;
    let writing = tokio::spawn(writers.join_all());

    let mut got: Vec<Value> = Vec::new();
    let mut position = start.clone();
    let mut last: Option<String> = None;
    let mut kept_connection = None;
    let mut pieces = 0;
    loop {
        if last.is_none() && writing.is_finished() {
            let feed = whole_feed(&mut client).await;
            last = Some(cursor(feed.last().expect("events")).to_owned());
        }
        if last.is_some() && got.last().map(cursor) == last.as_deref() {
            break;
        }
        pieces += 1;
        assert!(pieces < 2000, "no end in sight");
        let protocol = if pieces % 2 == 0 {
            Protocol::Http1
        } else {
            Protocol::Http2
        };
        // `after` names the very start: a server that took it over Last-Event-ID would
        // send events again.
        let mut sse = streaming(
            stream(
                server.addr,
                protocol,
                &format!("/v1/events?after={start}"),
                &[("last-event-id", position.as_str())],
            )
            .await,
        );
        let opening = sse.start().await;
        if browser {
            assert_eq!(
                opening, position,
                "the opening bookmark is at Last-Event-ID (else a client resuming from its id \
                 skips the events sent after it)"
            );
        }
        for _ in 0..rng.below(12) {
            match sse.item(Duration::from_millis(300)).await {
                None => break,
                Some(Item::Event(event)) if event.event == "bookmark" => {
                    bookmark(&event);
                }
                Some(Item::Event(event)) => {
                    let value = event_value(&event);
                    if !browser {
                        position = cursor(&value).to_owned();
                    }
                    got.push(value);
                }
                Some(other) => panic!("mid-stream: {other:?}"),
            }
        }
        if browser {
            position = sse.last_id.clone().expect("a stream has a position");
        }
        // Killed: the whole connection, or (HTTP/2) only the stream, the connection kept a
        // little longer.
        if protocol == Protocol::Http2 && rng.below(2) == 0 {
            kept_connection = sse.connection.take();
        } else {
            kept_connection = None;
        }
        drop(sse);
    }
    drop(kept_connection);
    let feed = whole_feed(&mut client).await;
    assert_eq!(
        got,
        after(&feed, &start),
        "every event once, in order, over {pieces} pieces"
    );
    assert_feed_is_writes(&feed, &logged(&log), 0);
    assert!(pieces >= 10, "only {pieces} pieces");
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_filtered_stream_gets_only_its_types_and_its_bookmarks_move_past_the_others() {
    let server = Server::start();
    let mut client = server.h1().await;
    let mut deletes = streaming(
        stream(
            server.addr,
            Protocol::Http2,
            "/v1/events?type=pet.deleted",
            &[],
        )
        .await,
    );
    let start = deletes.start().await;
    let mut two = streaming(
        stream(
            server.addr,
            Protocol::Http1,
            "/v1/events?type=pet.created,pet.updated",
            &[],
        )
        .await,
    );
    assert_eq!(two.start().await, start);
    let mut writer = Writer::new(server.h2().await, "filtered", seeded("filtered"));
    for _ in 0..50 {
        writer.step().await.expect("an answer");
    }
    let feed = whole_feed(&mut client).await;
    let of = |types: &[&str]| -> Vec<Value> {
        feed.iter()
            .filter(|event| types.contains(&kind(event)))
            .cloned()
            .collect()
    };
    let (deleted, others) = (of(&["pet.deleted"]), of(&["pet.created", "pet.updated"]));
    assert!(!deleted.is_empty() && !others.is_empty());
    assert_eq!(
        deletes.until(cursor(deleted.last().expect("one"))).await,
        deleted
    );
    assert_eq!(two.until(cursor(others.last().expect("one"))).await, others);

    // Only creates now: the deletes' stream sends no event, but within 15 s a bookmark at the
    // newest position, from which it resumes.
    let mut newest = String::new();
    for n in 0..3 {
        let pet = client
            .create(&format!(r#"{{"name":"late-{n}","categoryId":1}}"#))
            .await;
        let (_, position) = snapshot(&mut client).await;
        assert!(position > newest, "{pet}");
        newest = position;
    }
    let moved = loop {
        match deletes.item(Duration::from_secs(20)).await {
            Some(Item::Event(event)) => {
                let position = bookmark(&event);
                if position == newest {
                    break position;
                }
            }
            other => panic!("a bookmark at {newest} within 20 s, not {other:?}"),
        }
    };
    let mut resumed = streaming(
        stream(
            server.addr,
            Protocol::Http1,
            "/v1/events?type=pet.deleted",
            &[("last-event-id", moved.as_str())],
        )
        .await,
    );
    assert_eq!(resumed.start().await, moved);
    // HTTP/1.1 connections idle that long may have been closed: a new one.
    let mut client = server.h2().await;
    writer.own.push((
        client.create(r#"{"name":"gone","categoryId":1}"#).await["id"]
            .as_i64()
            .expect("id"),
        String::new(),
    ));
    while let Some((id, _)) = writer.own.pop() {
        assert_eq!(client.delete(&format!("/v1/pets/{id}")).await.status, 204);
    }
    let feed = whole_feed(&mut client).await;
    let wanted: Vec<Value> = after(&feed, &moved)
        .into_iter()
        .filter(|event| kind(event) == "pet.deleted")
        .collect();
    assert_eq!(
        resumed
            .until(cursor(wanted.last().expect("a delete")))
            .await,
        wanted
    );
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stream_s_400s_are_json_answers_before_any_stream() {
    let server = Server::start();
    let mut client = server.h1().await;
    client.create(r#"{"name":"Rex","categoryId":1}"#).await;
    for protocol in [Protocol::Http1, Protocol::Http2] {
        for (query, code) in [
            ("after=nothex", "invalid_cursor"),
            ("limit=0", "invalid_parameter"),
            ("limit=1001", "invalid_parameter"),
            ("type=pet.sold", "invalid_parameter"),
            ("type=", "invalid_parameter"),
        ] {
            let path = format!("/v1/events?{query}");
            let reply = refused(stream(server.addr, protocol, &path, &[]).await);
            reply.assert_error_prefix(400, code, "");
        }
        // limit is checked, then ignored.
        let mut sse = streaming(stream(server.addr, protocol, "/v1/events?limit=1", &[]).await);
        sse.start().await;
        let feed = whole_feed(&mut client).await;
        assert_eq!(sse.until(cursor(&feed[0])).await, feed);
    }
    // A 410 is in the cursor test with another store's feed, and the retention test.
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn one_stream_more_than_max_subscribers_gets_503_unavailable_with_retry_after() {
    let server = Server::start_with(with_args(&[
        "--max-subscribers",
        "2",
        "--metrics-listen",
        "127.0.0.1:0",
    ]));
    let metrics = metrics_address(&server);
    let mut first = streaming(stream(server.addr, Protocol::Http1, "/v1/events", &[]).await);
    first.start().await;
    let mut second = streaming(stream(server.addr, Protocol::Http2, "/v1/events", &[]).await);
    second.start().await;
    assert_eq!(
        value(&scrape(metrics).await, "petstore_event_subscribers"),
        2.0
    );
    for protocol in [Protocol::Http1, Protocol::Http2] {
        let reply = refused(stream(server.addr, protocol, "/v1/events", &[]).await);
        reply.assert_error_prefix(503, "unavailable", "");
        let retry = reply.header("retry-after").expect("Retry-After");
        assert!(
            retry.parse::<u32>().is_ok_and(|seconds| seconds >= 1),
            "Retry-After: {retry}"
        );
    }
    // Pages are not streams.
    let mut client = server.h1().await;
    page(&mut client, "/v1/events").await;
    // Both streams still work.
    let rex = client.create(r#"{"name":"Rex","categoryId":1}"#).await;
    let feed = whole_feed(&mut client).await;
    for sse in [&mut first, &mut second] {
        let events = sse.until(cursor(&feed[0])).await;
        assert_eq!(events[0]["pet"], rex);
    }
    // One goes (its HTTP/2 connection closed): its place is free again.
    drop(second);
    metric_reaches(
        metrics,
        r#"petstore_event_streams_closed_total{reason="client"}"#,
        1.0,
        Duration::from_secs(5),
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut third = loop {
        match stream(server.addr, Protocol::Http1, "/v1/events", &[]).await {
            Ok(sse) => break sse,
            Err(reply) => {
                assert_eq!(reply.status, 503);
                assert!(Instant::now() < deadline, "the freed place is not taken");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    third.start().await;
    drop(first);
    // The feed's metrics on a page promtool finds nothing wrong with.
    let page = scrape(metrics).await;
    assert_eq!(
        value(&page, "petstore_events_appended_total"),
        1.0,
        "one create"
    );
    crate::metrics::promtool_check(&page);
    server.stop();
}

/// A stream is a request in flight: with `--idle-timeout 1` it outlives seconds without a
/// byte, and with `--max-connections 2` taken by two streams a third connection waits for a
/// place rather than closing one; once a stream ends, it gets that place.
#[tokio::test(flavor = "multi_thread")]
async fn a_stream_is_a_request_in_flight_never_closed_as_idle_and_holds_its_connection_place() {
    let server = Server::start_with(with_args(&[
        "--idle-timeout",
        "1",
        "--max-connections",
        "2",
    ]));
    let mut kept = streaming(stream(server.addr, Protocol::Http1, "/v1/events", &[]).await);
    kept.start().await;
    let mut other = streaming(stream(server.addr, Protocol::Http2, "/v1/events", &[]).await);
    other.start().await;
    let addr = server.addr;
    let waiting = tokio::spawn(async move {
        let mut client = Client::connect(addr, Protocol::Http1).await;
        client.create(r#"{"name":"Rex","categoryId":1}"#).await
    });
    // Time passes, with nothing to send: past the idle timeout, the third still waits.
    assert!(
        kept.item(Duration::from_millis(2500)).await.is_none(),
        "the stream stays open, with nothing to send"
    );
    assert!(!waiting.is_finished(), "a stream's place was given away");
    drop(other);
    let pet = tokio::time::timeout(STREAM_WAIT, waiting)
        .await
        .expect("the third connection gets the freed place")
        .expect("the create");
    match kept.next().await {
        Item::Event(event) => assert_eq!(event_value(&event)["pet"], pet),
        other => panic!("the idle stream is still open: {other:?}"),
    }
    server.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_ends_open_streams_and_the_server_exits_well_within_its_drain_timeout() {
    let server = Server::start_with(with_args(&["--shutdown-timeout", "30"]));
    let mut client = server.h1().await;
    let mut streams = Vec::new();
    for protocol in [Protocol::Http1, Protocol::Http2, Protocol::Http2] {
        let mut sse = streaming(stream(server.addr, protocol, "/v1/events", &[]).await);
        sse.start().await;
        streams.push(sse);
    }
    client.create(r#"{"name":"Rex","categoryId":1}"#).await;
    let feed = whole_feed(&mut client).await;
    let mut reading = JoinSet::new();
    for mut sse in streams {
        let last = cursor(&feed[0]).to_owned();
        reading.spawn(async move {
            sse.until(&last).await;
            let (events, clean) = sse.read_to_end(Duration::from_secs(20)).await;
            assert!(events.is_empty(), "{events:?}");
            (clean, Instant::now())
        });
    }
    let stopping = Instant::now();
    server.signal("TERM");
    let stopped = tokio::task::spawn_blocking(move || server.wait_exit())
        .await
        .expect("the wait");
    let exited = stopping.elapsed();
    for (clean, ended) in reading.join_all().await {
        assert!(clean, "the stream ended cleanly");
        assert!(
            ended.duration_since(stopping) < Duration::from_secs(3),
            "a stream ended {:?} after SIGTERM",
            ended.duration_since(stopping)
        );
    }
    assert!(
        exited < Duration::from_secs(5),
        "exit {exited:?} after SIGTERM, with a 30 s drain"
    );
    assert!(
        !stopped.logs.contains("drain timed out"),
        "{}",
        stopped.logs
    );
}

/// A reader that stops reading: the stream is opened on a socket with a small receive buffer
/// and not read while large events are written; the server ends it once its send buffer has
/// stayed full for 10 s; what was buffered then reads to a clean end, and a resume with
/// Last-Event-ID gets the rest, nothing lost or repeated.
#[tokio::test(flavor = "multi_thread")]
async fn a_reader_that_stops_reading_is_closed_and_resumes_without_loss() {
    const PETS: usize = 120;
    let server = Server::start_with(with_args(&["--metrics-listen", "127.0.0.1:0"]));
    let metrics = metrics_address(&server);
    let socket = tokio::net::TcpSocket::new_v4().expect("a socket");
    socket.set_recv_buffer_size(4096).expect("a small buffer");
    let tcp = socket.connect(server.addr).await.expect("connects");
    let name = rustls::pki_types::ServerName::try_from("localhost").expect("a name");
    let mut tls =
        tokio_rustls::TlsConnector::from(tls_config(b"http/1.1", rustls::DEFAULT_VERSIONS))
            .connect(name, tcp)
            .await
            .expect("TLS connects");
    let request = format!(
        "GET /v1/events HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {DEV_KEY}\r\n\
         Accept: text/event-stream\r\nConnection: close\r\n\r\n"
    );
    tls.write_all(request.as_bytes()).await.expect("sent");
    tls.flush().await.expect("sent");
    metric_reaches(metrics, "petstore_event_subscribers", 1.0, STREAM_WAIT).await;
    let opened = Instant::now();

    let mut client = server.h2().await;
    let name = "x".repeat(60_000);
    for n in 0..PETS {
        client
            .create(&format!(r#"{{"name":"{n}-{name}","categoryId":{n}}}"#))
            .await;
    }
    metric_reaches(
        metrics,
        r#"petstore_event_streams_closed_total{reason="slow"}"#,
        1.0,
        Duration::from_secs(45),
    )
    .await;
    assert!(
        opened.elapsed() >= Duration::from_secs(10),
        "closed after {:?}, before 10 s of stall",
        opened.elapsed()
    );

    // Everything buffered reads to a clean end of the body.
    let mut received = Vec::new();
    tokio::time::timeout(STREAM_WAIT, tls.read_to_end(&mut received))
        .await
        .expect("the server closed the connection")
        .ok();
    let split = received
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a head");
    let head = String::from_utf8_lossy(&received[..split]).to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(head.contains("content-type: text/event-stream"), "{head}");
    assert!(head.contains("transfer-encoding: chunked"), "{head}");
    let (body, complete) = dechunk(&received[split + 4..]);
    assert!(complete, "the body ended with its last chunk");
    let mut parser = SseParser::default();
    parser.feed(&body);
    assert!(parser.between_blocks(), "the stream ended between events");
    let mut items = parser.ready.into_iter();
    assert!(matches!(items.next(), Some(Item::Retry(2000))));
    let mut got = Vec::new();
    let mut position = match items.next() {
        Some(Item::Event(event)) => bookmark(&event),
        other => panic!("a bookmark, not {other:?}"),
    };
    for item in items {
        match item {
            Item::Event(event) if event.event == "bookmark" => position = bookmark(&event),
            Item::Event(event) => {
                let value = event_value(&event);
                position = cursor(&value).to_owned();
                got.push(value);
            }
            other => panic!("{other:?}"),
        }
    }
    let feed = whole_feed(&mut client).await;
    assert_eq!(feed.len(), PETS);
    assert!(
        got.len() < PETS,
        "the stalled stream got every event: it never stalled"
    );
    assert_eq!(got[..], feed[..got.len()], "a prefix of the feed");

    let mut resumed = streaming(
        stream(
            server.addr,
            Protocol::Http1,
            "/v1/events",
            &[("last-event-id", position.as_str())],
        )
        .await,
    );
    resumed.start().await;
    got.extend(resumed.until(cursor(feed.last().expect("events"))).await);
    assert_eq!(got, feed, "nothing lost, nothing twice");
    server.stop();
}

/// Decodes a chunked HTTP/1.1 body; returns the data and whether the last chunk came.
fn dechunk(mut body: &[u8]) -> (Vec<u8>, bool) {
    let mut data = Vec::new();
    loop {
        let Some(end) = body.windows(2).position(|w| w == b"\r\n") else {
            return (data, false);
        };
        let line = std::str::from_utf8(&body[..end]).expect("a chunk size");
        let size_hex = line.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_hex, 16)
            .unwrap_or_else(|_| panic!("not a chunk size: {line:?}"));
        body = &body[end + 2..];
        if size == 0 {
            return (data, body.starts_with(b"\r\n"));
        }
        if body.len() < size + 2 {
            return (data, false);
        }
        data.extend_from_slice(&body[..size]);
        assert_eq!(&body[size..size + 2], b"\r\n", "a chunk ends with CRLF");
        body = &body[size + 2..];
    }
}

/// The feed's events without their cursors: what a backup keeps.
fn without_cursors(feed: &[Value]) -> Vec<Value> {
    feed.iter()
        .map(|event| {
            let mut event = event.clone();
            event["cursor"] = Value::Null;
            event
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restored_backup_keeps_every_event_under_a_new_feed_where_old_cursors_get_410() {
    backup_or_copy("backup").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_copied_store_starts_a_new_empty_feed_where_old_cursors_get_410() {
    backup_or_copy("copy").await;
}

/// `petstore backup` keeps every event under a new feed identity, `petstore copy` starts a
/// new, empty feed: on both, the old store's cursors get 410 (never a wrong replay), the pets
/// are served as they were, and the new feed goes on.
async fn backup_or_copy(command: &str) {
    let server = Server::start();
    let mut writer = Writer::new(server.h2().await, "kept", seeded("backup and copy"));
    for _ in 0..20 {
        writer.step().await.expect("an answer");
    }
    let mut client = server.h1().await;
    let feed = whole_feed(&mut client).await;
    let (pets, position) = snapshot(&mut client).await;
    drop((writer, client));
    let stopped = server.stop();
    let db = stopped.dir.path().join("pets.redb");
    let file = stopped.dir.path().join("made.redb");
    let flag = if command == "backup" {
        "--db"
    } else {
        "--from"
    };
    let args = [
        command.as_ref(),
        flag.as_ref(),
        db.as_os_str(),
        "--to".as_ref(),
        file.as_os_str(),
    ];
    let (code, stdout, stderr) = run(&args);
    assert_eq!(code, Some(0), "{command}:\n{stdout}\n{stderr}");
    let old: Vec<&str> = [cursor(&feed[0]), cursor(&feed[10]), position.as_str()].into();
    let kept = command == "backup";
    let server = Server::start_with(Options {
        db: Some(file.display().to_string()),
        ..Options::default()
    });
    let mut client = server.h1().await;
    let (served, _) = snapshot(&mut client).await;
    assert_eq!(served, pets, "{command}: the pets");
    let restored = whole_feed(&mut client).await;
    if kept {
        assert_eq!(
            without_cursors(&restored),
            without_cursors(&feed),
            "every event"
        );
    } else {
        assert!(
            restored.is_empty(),
            "a copy starts a new, empty feed: {restored:?}"
        );
    }
    for gone in &old {
        let path = format!("/v1/events?after={gone}");
        assert_expired(&client.get(&path).await, &path);
        let reply = refused(stream(server.addr, Protocol::Http2, &path, &[]).await);
        assert_expired(&reply, "a stream after the old store's cursor");
    }
    // The new feed goes on from its own positions.
    let (_, now) = snapshot(&mut client).await;
    let pet = client.create(r#"{"name":"new","categoryId":1}"#).await;
    let next = page(&mut client, &format!("/v1/events?after={now}")).await;
    assert_eq!(next.events.len(), 1);
    assert_eq!(next.events[0]["pet"], pet);
    server.stop();
}

// ------------------------------------------------------------------------------------------
// Crashes.

#[tokio::test(flavor = "multi_thread")]
async fn after_sigkills_between_writes_the_whole_feed_replays_to_exactly_the_stored_pets() {
    sigkills_between_writes(Options::default()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn on_postgres_after_sigkills_the_whole_feed_replays_to_exactly_the_stored_pets() {
    let cluster = tokio::task::block_in_place(Cluster::start);
    sigkills_between_writes(on_postgres(cluster.url())).await;
}

/// Three rounds of creates, patches and deletes from four clients, each ended by a SIGKILL and
/// a restart on the same store. Then: replaying the whole feed gives exactly the stored pets
/// (each at the ETag of its last event), every acknowledged write has its event, at most one
/// per client and crash has none, a position read before a crash still follows on, and new
/// events come after the old ones.
async fn sigkills_between_writes(options: Options) {
    const WRITERS: usize = 4;
    const ROUNDS: usize = 3;
    let mut server = Server::start_with(options.clone());
    let log = WriteLog::default();
    let mut rng = seeded("sigkills");
    let mut positions = Vec::new();
    for round in 0..ROUNDS {
        let writers = spawn_writers(&server, WRITERS, usize::MAX, &[], &log, &mut rng).await;
        let mut client = server.h1().await;
        wait_until(Duration::from_secs(60), "writes go on", || {
            logged(&log).len() >= 40 * (round + 1)
        })
        .await;
        positions.push(snapshot_position(&mut client).await);
        wait_until(Duration::from_secs(60), "more writes", || {
            logged(&log).len() >= 40 * (round + 1) + 20
        })
        .await;
        let dir = server.kill();
        writers.join_all().await;
        server = Server::start_after_crash_with(dir, options.clone());
    }
    let mut client = server.h2().await;
    let feed = whole_feed(&mut client).await;
    assert_revisions_follow(&feed);
    let mut replayed = BTreeMap::new();
    replay(&mut replayed, &feed);
    let stored = by_id(client.list_all("/v1/pets?limit=100").await);
    assert_eq!(replayed, stored, "the feed replays to the stored pets");
    let mut last_tags = BTreeMap::new();
    for event in &feed {
        last_tags.insert(pet_id(event), etag(event).to_owned());
    }
    for id in stored.keys() {
        let reply = client.get(&format!("/v1/pets/{id}")).await;
        assert_eq!(reply.etag(), last_tags[id], "pet {id} is at its last event");
    }
    assert_feed_is_writes(&feed, &logged(&log), WRITERS * ROUNDS);
    for position in &positions {
        let (followed, _) = follow(
            &mut client,
            &format!("/v1/events?after={position}&limit=1000"),
        )
        .await;
        assert_eq!(
            followed,
            after(&feed, position),
            "after a crash, from {position}"
        );
    }
    let pet = client.create(r#"{"name":"after","categoryId":1}"#).await;
    let last = cursor(feed.last().expect("events"));
    let newer = page(&mut client, &format!("/v1/events?after={last}")).await;
    assert_eq!(newer.events.len(), 1);
    assert_eq!(newer.events[0]["pet"], pet);
    server.stop();
}

/// The Events-Cursor of `GET /v1/pets?limit=1`.
async fn snapshot_position(client: &mut Client) -> String {
    let reply = client.get("/v1/pets?limit=1").await;
    assert_eq!(reply.status, 200);
    let position = reply
        .header("events-cursor")
        .expect("Events-Cursor")
        .to_owned();
    assert!(is_cursor(&position));
    position
}

// ------------------------------------------------------------------------------------------
// Retention.

#[test]
fn events_keep_refuses_0_and_durations_that_are_not_one() {
    for keep in ["0", "0s", "soon"] {
        let dir = tempfile::tempdir().expect("temp dir");
        let db = dir.path().join("pets.redb");
        let (key, crt, keys) = (
            cert("dev-server.key"),
            cert("dev-server.pem"),
            cert("dev-keys.txt"),
        );
        let args = [
            "--listen".as_ref(),
            "127.0.0.1:0".as_ref(),
            "--db".as_ref(),
            db.as_os_str(),
            "--tls-cert".as_ref(),
            crt.as_os_str(),
            "--tls-key".as_ref(),
            key.as_os_str(),
            "--api-keys".as_ref(),
            keys.as_os_str(),
            "--events-keep".as_ref(),
            keep.as_ref(),
        ];
        let (code, _, stderr) = run(&args);
        assert!(code.is_some_and(|code| code != 0), "{keep}: {stderr}");
        assert!(stderr.contains("events-keep"), "{keep}: {stderr}");
        assert!(!stderr.contains("listening on"), "{keep}: {stderr}");
    }
}

/// With `--events-keep 2s`, the purge (every 60 s by the contract, so this test may take about
/// a minute) removes the events older than two seconds while one is created every quarter
/// second: cursors from before the oldest kept get 410 on pages and streams, while the
/// position just before the oldest event kept is still served.
#[tokio::test(flavor = "multi_thread")]
async fn events_past_events_keep_are_purged_and_their_cursors_get_410() {
    let server = Server::start_with(with_args(&[
        "--events-keep",
        "2s",
        "--metrics-listen",
        "127.0.0.1:0",
    ]));
    let metrics = metrics_address(&server);
    let mut client = server.h1().await;
    let (_, start) = follow(&mut client, "/v1/events").await;
    let mut all: Vec<Value> = Vec::new();
    let mut position = start.clone();
    let deadline = Instant::now() + Duration::from_secs(75);
    let mut n = 0;
    loop {
        n += 1;
        client
            .create(&format!(r#"{{"name":"tick-{n}","categoryId":1}}"#))
            .await;
        let (events, end) = follow(
            &mut client,
            &format!("/v1/events?after={position}&limit=1000"),
        )
        .await;
        all.extend(events);
        position = end;
        let oldest = page(&mut client, "/v1/events?limit=1").await;
        if oldest.events[0] != all[0] {
            break;
        }
        assert!(Instant::now() < deadline, "no purge within 75 s");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // The oldest event kept, and the position just before it, which loses nothing and so is
    // served, on a page and as a stream. A purge may run again between two requests (this
    // server purges a short retention every quarter of it): then the oldest kept has moved,
    // and the check starts again from the new one.
    let mut first = 0;
    for attempt in 1.. {
        assert!(attempt <= 5, "the oldest kept moved under every check");
        // A new event, so that something is kept whatever the purges did meanwhile.
        client
            .create(&format!(r#"{{"name":"check-{attempt}","categoryId":1}}"#))
            .await;
        let (events, end) = follow(
            &mut client,
            &format!("/v1/events?after={position}&limit=1000"),
        )
        .await;
        all.extend(events);
        position = end;
        let kept = whole_feed(&mut client).await;
        first = all
            .iter()
            .position(|event| cursor(event) == cursor(&kept[0]))
            .expect("the oldest kept is one we read");
        assert!(first >= 2, "only {first} purged");
        assert_eq!(kept[..], all[first..], "the newer events are all kept");
        let just_before = cursor(&all[first - 1]).to_owned();
        let path = format!("/v1/events?after={just_before}&limit=1000");
        let reply = client.get(&path).await;
        if reply.status == 410 && cursor(&whole_feed(&mut client).await[0]) != cursor(&kept[0]) {
            continue;
        }
        assert_eq!(reply.status, 200, "{path}: {:?}", reply.body);
        assert_eq!(events_of(&reply.body), kept, "{path}");
        let mut sse = match stream(server.addr, Protocol::Http1, &path, &[]).await {
            Ok(sse) => sse,
            Err(reply) => {
                let moved = cursor(&whole_feed(&mut client).await[0]) != cursor(&kept[0]);
                if reply.status == 410 && moved {
                    continue;
                }
                panic!("{path} as a stream: {} {:?}", reply.status, reply.body);
            }
        };
        sse.start().await;
        assert_eq!(sse.until(cursor(kept.last().expect("kept"))).await, kept);
        break;
    }
    // Older positions stay gone.
    for gone in [start.as_str(), cursor(&all[0]), cursor(&all[first - 2])] {
        let path = format!("/v1/events?after={gone}");
        assert_expired(&client.get(&path).await, &path);
        let reply = refused(stream(server.addr, Protocol::Http2, &path, &[]).await);
        assert_expired(&reply, "a stream after a purged cursor");
        let reply = refused(
            stream(
                server.addr,
                Protocol::Http1,
                "/v1/events",
                &[("last-event-id", gone)],
            )
            .await,
        );
        assert_expired(&reply, "a stream resuming at a purged cursor");
    }
    // The metric follows (it is read every 10 s): the oldest kept is young.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let page = scrape(metrics).await;
        let series = "petstore_events_oldest_age_seconds";
        assert!(
            page.contains(&format!("\n{series} ")),
            "no {series}:\n{page}"
        );
        let age = value(&page, series);
        if age < 10.0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the oldest kept is still {age} s old"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    server.stop();
}

// ------------------------------------------------------------------------------------------
// Two instances on one PostgreSQL database.

#[tokio::test(flavor = "multi_thread")]
async fn on_postgres_every_instance_streams_every_event_within_1s_in_one_order_without_gaps() {
    let cluster = tokio::task::block_in_place(Cluster::start);
    let (a, b) = (
        Server::start_with(on_postgres(cluster.url())),
        Server::start_with(on_postgres(cluster.url())),
    );
    let mut sa = streaming(stream(a.addr, Protocol::Http2, "/v1/events", &[]).await);
    let mut sb = streaming(stream(b.addr, Protocol::Http1, "/v1/events", &[]).await);
    assert_eq!(sa.start().await, sb.start().await, "one feed, one start");
    let (mut ra, mut rb) = (forward(sa), forward(sb));
    let (mut ca, mut cb) = (a.h1().await, b.h2().await);
    let (mut seen_a, mut seen_b) = (Vec::new(), Vec::new());

    // One write at a time, through either instance: both streams have it within 1 s.
    for n in 0..10 {
        let (client, through) = if n % 2 == 0 {
            (&mut ca, "A")
        } else {
            (&mut cb, "B")
        };
        let pet = client
            .create(&format!(r#"{{"name":"one-{n}","categoryId":1}}"#))
            .await;
        let acknowledged = Instant::now();
        for (receive, seen, on) in [(&mut ra, &mut seen_a, "A"), (&mut rb, &mut seen_b, "B")] {
            let (event, arrived) = tokio::time::timeout(STREAM_WAIT, receive.recv())
                .await
                .unwrap_or_else(|_| panic!("no event on {on} for a create through {through}"))
                .expect("the stream goes on");
            assert_eq!(event["pet"], pet, "on {on}, through {through}");
            let late = arrived.saturating_duration_since(acknowledged);
            assert!(
                late <= ACROSS_INSTANCES,
                "a create through {through} reached {on}'s stream {late:?} after its 201"
            );
            seen.push(event);
        }
    }

    // Interleaved writes on both instances, some on the same pets: both streams see the same
    // events as a page read, in the same order, none missing.
    let log = WriteLog::default();
    let mut rng = seeded("two instances");
    let shared = create_shared(&mut ca, 3, &log).await;
    let on_a = spawn_writers(&a, 3, 40, &shared, &log, &mut rng).await;
    let on_b = spawn_writers(&b, 3, 40, &shared, &log, &mut rng).await;
    on_a.join_all().await;
    on_b.join_all().await;
    let feed = whole_feed(&mut cb).await;
    let last = cursor(feed.last().expect("events")).to_owned();
    seen_a.extend(receive_until(&mut ra, &last, "A").await);
    seen_b.extend(receive_until(&mut rb, &last, "B").await);
    assert_eq!(seen_a, feed, "instance A's stream is the feed");
    assert_eq!(seen_b, feed, "instance B's stream is the feed");
    assert_eq!(
        whole_feed(&mut ca).await,
        feed,
        "both instances page the same feed"
    );
    assert_revisions_follow(&feed);
    assert_feed_is_writes(&feed[10..], &logged(&log), 0);
    a.stop();
    b.stop();
}

// ------------------------------------------------------------------------------------------
// The tests' own tools, checked without a server.

#[test]
fn the_sse_parser_reads_fields_across_chunks_and_dispatches_on_a_blank_line() {
    let mut parser = SseParser::default();
    let text = "retry: 2000\n\nid: 0123456789abcdef0123456789abcdef\nevent: bookmark\n\
                data: {\"cursor\":\"0123456789abcdef0123456789abcdef\"}\n\n: comment\r\n\
                id: b\r\nevent: pet.created\r\ndata: x\r\ndata:y\r\n\r\nid: c\nda";
    for chunk in text.as_bytes().chunks(3) {
        parser.feed(chunk);
    }
    assert!(!parser.between_blocks(), "an event is cut short");
    let items: Vec<Item> = parser.ready.drain(..).collect();
    assert!(matches!(items[0], Item::Retry(2000)), "{items:?}");
    let Item::Event(first) = &items[1] else {
        panic!("{items:?}")
    };
    assert_eq!(bookmark(first), "0123456789abcdef0123456789abcdef");
    let Item::Event(second) = &items[2] else {
        panic!("{items:?}")
    };
    assert_eq!(
        (
            second.id.as_deref(),
            second.event.as_str(),
            second.data.as_str()
        ),
        (Some("b"), "pet.created", "x\ny")
    );
    assert_eq!(second.fields, ["id", "event", "data", "data"]);
    assert_eq!(items.len(), 3);
}

#[test]
fn dechunk_at_millis_revision_and_members_read_what_they_should() {
    assert_eq!(
        dechunk(b"3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n"),
        (b"abcde".to_vec(), true)
    );
    assert_eq!(dechunk(b"3\r\nabc\r\n2\r\nd"), (b"abc".to_vec(), false));
    assert_eq!(at_millis("1970-01-01T00:00:00.000Z"), 0);
    assert_eq!(at_millis("2000-03-01T00:00:01.250Z"), 951_868_801_250);
    assert_eq!(at_millis("2026-11-27T21:43:22.123Z"), 1_795_815_802_123);
    assert_eq!(revision("\"7.2\"", 7), 2);
    let members: Members = serde_json::from_str(r#"{"b":1,"a":{"z":2},"c":null}"#).expect("json");
    assert_eq!(members.0, ["b", "a", "c"]);
    assert!(is_cursor("0123456789abcdef0123456789abcdef"));
    assert!(!is_cursor("0123456789ABCDEF0123456789abcdef"));
}

/// A stream outlives the request that opened it: when its key is revoked (and the keys
/// reloaded), it ends at its next bookmark instead of going on for ever.
#[tokio::test(flavor = "multi_thread")]
async fn a_stream_ends_within_a_bookmark_of_its_key_being_revoked() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("api-keys");
    std::fs::copy(cert("dev-keys.txt"), &file).expect("the keys file");
    let key = crate::support::keys_on(&file, &["add", "relay"]);
    let bearer = format!("Bearer {}", key.trim());
    let server = Server::start_with(Options {
        api_keys: file.clone(),
        ..Options::default()
    });
    let headers = [
        ("authorization", bearer.as_str()),
        ("accept", "text/event-stream"),
    ];
    let mut sse = streaming(open(server.addr, Protocol::Http1, "/v1/events", &headers).await);
    sse.start().await;
    crate::support::keys_on(&file, &["revoke", "relay"]);
    server.signal("HUP");
    server.wait_for_log("reload done", 1);
    let ended_by = Instant::now();
    let (_, clean) = sse.read_to_end(Duration::from_secs(20)).await;
    assert!(clean, "the stream's body ends cleanly");
    assert!(
        ended_by.elapsed() <= Duration::from_secs(16),
        "{:?}",
        ended_by.elapsed()
    );
    server.stop();
}
