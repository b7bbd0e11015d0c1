//! The event feed part (issue 28): live server-sent event streams while clients create.
//!
//! A fresh petstore (redb, or PostgreSQL for `events-pg`) gets `Settings::events_streams`
//! (1,000) streams, `GET /v1/events` with `Accept: text/event-stream` over TLS and HTTP/1.1, one
//! connection each, all open (each has had its first bookmark) before the first create. Then
//! 64 clients create pets at a fixed total rate (`Settings::events_rate`, 100 a second: every
//! create is an event on every stream, so the server writes and this process reads
//! streams x rate events a second, 100,000 at the defaults, each core's share of a 2-core box)
//! for the warm-up and the window. Each create keeps the instant its 201 arrived and its id;
//! each stream keeps, for each `pet.created` event, the pet's id and the instant the read that
//! brought it returned. The check: every stream got every create's event exactly once, with
//! increasing cursors, all in one order; the figure: the delay from a create's 201 to its event
//! on a stream, over all streams and the window's creates (and, beside it, from the create's
//! request). The same run without the streams, on a fresh store, gives the memory the streams
//! cost; on redb, a third run holds as many keep-alive connections without a stream, to tell
//! what of that is the connections' (TLS, HTTP) and what the streams' own.
//!
//! The streams are read without hyper: one task a stream owns its TLS connection, parses the
//! response head, the chunked coding and the SSE lines itself, and keeps 16 bytes an event,
//! so that one client core keeps up with 1,000 streams.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HOST, HeaderValue};
use hyper::{Method, Request, Uri};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{Notify, Semaphore, watch};
use tokio::time::{Instant, sleep_until, timeout_at};

use crate::check::{Expect, check};
use crate::client::{BEARER, Conn, Tls};
use crate::figures::{Feed, Kind, Memory};
use crate::load::{Outcome, Sample};
use crate::process::{CLK_TCK, Server, cpu_ticks, steal_ticks};
use crate::report::{Report, Row, thousands};
use crate::settings::Settings;
use crate::{Bench, CLIENTS, NEW_PET, pg};

/// The rows: the creates with the streams open, and the same creates without them.
pub const WITH_STREAMS: &str = "events streams";
pub const WITHOUT_STREAMS: &str = "events no streams";
/// The diagnostic row: as many idle keep-alive connections as streams.
pub const IDLE_CONNECTIONS: &str = "events idle conns";
/// The goals, as the issue sets them: p99 from a create's 201 to its event on a stream.
const P99_GOAL_REDB_MS: f64 = 50.0;
const P99_GOAL_PG_MS: f64 = 250.0;
/// Server RSS with the streams over the same run without them.
const RSS_GOAL_MIB: f64 = 32.0;
/// Handshakes in flight at once while the streams open: the listen backlog and the server's
/// one core take them in turn rather than all at once.
const OPENING_AT_ONCE: usize = 32;
/// All streams open (each has had its first bookmark) by then, or the run is broken.
const OPEN_LIMIT: Duration = Duration::from_secs(60);
/// After the last create, every stream has its event by then, or the events are missing.
const DRAIN_LIMIT: Duration = Duration::from_secs(10);
/// A create still unanswered this long after the window is an error.
const GRACE: Duration = Duration::from_secs(10);
/// How often the drain looks whether every stream has every event.
const DRAIN_POLL: Duration = Duration::from_millis(5);
/// A response head longer than this is not petstore's.
const HEAD_LIMIT: usize = 8 * 1024;
/// A stream's read buffer: one read takes what the socket holds, a few events at most here.
const READ_BUFFER: usize = 8 * 1024;
/// An idle connection sends a request (`GET /healthz`) this often: HTTP/1.1 keep-alive
/// connections with none close after `--header-timeout` (10 s), hyper's head timer running
/// while they wait (docs/api.md).
const IDLE_REQUEST_EVERY: Duration = Duration::from_secs(4);
/// A stream's count once its task has ended (an error, the server's end): the drain does not
/// wait for it.
const ENDED: u32 = u32::MAX;

/// What a run holds open on the server while its clients create.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Held {
    Nothing,
    /// Keep-alive TLS connections that make a request (`GET /healthz`) every few seconds and
    /// otherwise wait: what a connection costs the server without a stream, to tell the
    /// stream's own share.
    IdleConnections,
    Streams,
}

/// One run's figures: its memory, and with streams, the delays (as in `Feed`).
struct RunFigures {
    memory: Memory,
    from_201_us: Option<[i64; 3]>,
    from_request_us: Option<[i64; 3]>,
}

impl Bench<'_> {
    /// The part on redb: the run without the streams, with as many idle connections, then
    /// with the streams, each on a fresh file.
    pub async fn events(&mut self) {
        let dir = tempfile::tempdir().expect("a temp dir for the event feed stores");
        let mut runs = Vec::new();
        for (scenario, held) in [
            (WITHOUT_STREAMS, Held::Nothing),
            (IDLE_CONNECTIONS, Held::IdleConnections),
            (WITH_STREAMS, Held::Streams),
        ] {
            let db = dir.path().join(format!("events-{}.redb", runs.len()));
            let server = Server::petstore(&db, &self.server_args());
            let figures = self.feed_run(scenario, server, Kind::Petstore, held).await;
            runs.push(figures);
        }
        let [without, idle, with] = <[Option<RunFigures>; 3]>::try_from(runs)
            .unwrap_or_else(|_| unreachable!("three runs"));
        self.keep_feed(Kind::Petstore, with, without, idle);
    }

    /// The part on PostgreSQL (the cluster of the `postgres` part: fsync on, pinned with the
    /// server), a database of its own for each run.
    pub async fn events_pg(&mut self) {
        if !pg::installed() {
            self.report.note(format!(
                "event feed on PostgreSQL skipped: no {}/*/bin/initdb (apt-get install postgresql)",
                pg::PG_LIB
            ));
            return;
        }
        let pg = match pg::Durable::start() {
            Ok(pg) => pg,
            Err(why) => {
                self.report.fail(format!("event feed on PostgreSQL: {why}"));
                return;
            }
        };
        let mut runs = Vec::new();
        for (scenario, held) in [
            (WITHOUT_STREAMS, Held::Nothing),
            (WITH_STREAMS, Held::Streams),
        ] {
            let database = format!("events_{}", runs.len());
            pg.cluster.psql(&format!("CREATE DATABASE {database}"));
            let server = Server::petstore(Path::new(&pg.url(&database)), &self.server_args())
                .with_database(pg.postmaster);
            let figures = self.feed_run(scenario, server, Kind::Postgres, held).await;
            runs.push(figures);
        }
        let [without, with] =
            <[Option<RunFigures>; 2]>::try_from(runs).unwrap_or_else(|_| unreachable!("two runs"));
        self.keep_feed(Kind::Postgres, with, without, None);
        drop(pg);
    }

    /// The same flags for every run, so that only what is held open differs: connection slots
    /// for the streams, the creating clients and a margin (the default, 1,024, is fewer than
    /// 1,000 + 64), and subscribers for the streams (the default is 1,000).
    fn server_args(&self) -> Vec<String> {
        let streams = self.settings.events_streams;
        let mut args = vec![
            "--max-connections".to_owned(),
            (streams + CLIENTS + 64).max(1024).to_string(),
            "--max-subscribers".to_owned(),
            streams.max(1).to_string(),
        ];
        args.extend(self.settings.petstore_args.iter().cloned());
        args
    }

    fn keep_feed(
        &mut self,
        kind: Kind,
        with: Option<RunFigures>,
        without: Option<RunFigures>,
        idle: Option<RunFigures>,
    ) {
        let (Some(with), Some(without)) = (with, without) else {
            return;
        };
        let mib = |kib: u64| kib as f64 / 1024.0;
        let streams = thousands(self.settings.events_streams as u64);
        let idle_text = idle.as_ref().map_or_else(String::new, |idle| {
            format!(
                "; with {streams} idle connections {:.1} MiB peak, {:.1} MiB",
                mib(idle.memory.peak_kib),
                mib(idle.memory.rss_kib)
            )
        });
        self.report.note(format!(
            "events on {}: server memory at the end of the window with {streams} streams \
             {:.1} MiB peak, {:.1} MiB now; without {:.1} MiB peak, {:.1} MiB{idle_text}",
            store_name(kind),
            mib(with.memory.peak_kib),
            mib(with.memory.rss_kib),
            mib(without.memory.peak_kib),
            mib(without.memory.rss_kib),
        ));
        self.report.feeds.push(Feed {
            kind,
            streams: self.settings.events_streams,
            rate: self.settings.events_rate,
            from_201_us: with.from_201_us,
            from_request_us: with.from_request_us,
            with: with.memory,
            without: without.memory,
            idle: idle.map(|idle| idle.memory),
        });
    }

    /// One run on `server` (fresh store): open what `held` says (`Settings::events_streams`
    /// of them), create at the set rate for the warm-up and the window, wait for every stream
    /// to have every event, close them, stop the server. Pushes a row (the creates) and
    /// returns the figures; `None` when the server did not stop cleanly.
    async fn feed_run(
        &mut self,
        scenario: &str,
        server: Server,
        kind: Kind,
        held: Held,
    ) -> Option<RunFigures> {
        let settings = self.settings;
        let count = match held {
            Held::Nothing => 0,
            Held::IdleConnections | Held::Streams => settings.events_streams,
        };
        let origin = Instant::now();
        let creates_expected =
            (settings.events_rate * (settings.warmup + settings.window).as_secs_f64()) as usize;
        let shared = Arc::new(Shared {
            tls: Arc::clone(&self.tls),
            request: request(&server, held),
            origin,
            gate: Semaphore::new(OPENING_AT_ONCE),
            settled: AtomicUsize::new(0),
            settled_changed: Notify::new(),
            counts: (0..count).map(|_| AtomicU32::new(0)).collect(),
            capacity: if held == Held::Streams {
                creates_expected + creates_expected / 4 + CLIENTS
            } else {
                0
            },
            addr: server.addr,
        });
        let (stop, stopped) = watch::channel(false);
        let mut readers = tokio::task::JoinSet::new();
        for index in 0..count {
            let (shared, stopped) = (Arc::clone(&shared), stopped.clone());
            if held == Held::Streams {
                readers.spawn(follow(shared, index, stopped));
            } else {
                readers.spawn(hold(shared, index, stopped));
            }
        }
        // Every stream has its first bookmark (every connection its answer), or has failed,
        // before the first create.
        let open_deadline = Instant::now() + OPEN_LIMIT;
        while shared.settled.load(Ordering::Acquire) < count {
            let changed = shared.settled_changed.notified();
            if shared.settled.load(Ordering::Acquire) >= count
                || timeout_at(open_deadline, changed).await.is_err()
            {
                break;
            }
        }
        if count > 0 {
            self.report.note(format!(
                "{scenario} on {}: {} open in {:.2} s",
                store_name(kind),
                thousands(count as u64),
                origin.elapsed().as_secs_f64()
            ));
        }

        let creates = creates(&server, &self.tls, origin, settings, settings.events_rate).await;

        // Wait until every stream has as many events as there were 201s (or has ended).
        let answered = creates.created.len() as u32;
        let drain_deadline = Instant::now() + DRAIN_LIMIT;
        while held == Held::Streams
            && Instant::now() < drain_deadline
            && shared
                .counts
                .iter()
                .any(|count| count.load(Ordering::Relaxed) < answered)
        {
            tokio::time::sleep(DRAIN_POLL).await;
        }
        let _ = stop.send(true);
        let mut logs = Vec::with_capacity(count);
        while let Some(log) = readers.join_next().await {
            logs.push(log.expect("a stream task does not panic"));
        }
        logs.sort_by_key(|log| log.index);
        let delivery = (held == Held::Streams).then(|| deliveries(&creates, &logs));
        let held_failed = if held == Held::IdleConnections {
            idle_failures(&logs)
        } else {
            None
        };

        let errors_logged = server.logged_errors();
        let mut verdict = check(Expect::Created, creates.sample.as_ref());
        if let (Ok(()), Some(Err(why))) = (&verdict, delivery.as_ref().map(|d| &d.verdict)) {
            verdict = Err(why.clone());
        }
        if let (Ok(()), Some(why)) = (&verdict, held_failed) {
            verdict = Err(why);
        }
        if verdict.is_ok() && errors_logged > 0 {
            verdict = Err(format!("the server logged {errors_logged} ERROR lines"));
        }
        let figures = RunFigures {
            memory: creates.memory,
            from_201_us: delivery.as_ref().and_then(|d| d.from_201),
            from_request_us: delivery.as_ref().and_then(|d| d.from_request),
        };
        if let Some(delivery) = &delivery {
            self.report
                .note(delivery.summary(scenario, kind, settings.events_rate));
        }
        let ok_total = creates.outcome.ok_total;
        self.report.push(Row {
            scenario: scenario.to_owned(),
            kind,
            pets: Some(0),
            round: 0,
            rss_kib: creates.memory.peak_kib,
            check: verdict,
            outcome: creates.outcome,
        });
        let stopped_cleanly = match kind {
            Kind::Petstore => self
                .stopped_creates(server, scenario, ok_total)
                .await
                .is_some(),
            _ => {
                self.stop(server, scenario).await;
                true
            }
        };
        stopped_cleanly.then_some(figures)
    }
}

pub fn store_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Postgres => "PostgreSQL",
        _ => "redb",
    }
}

/// What the stream tasks share.
struct Shared {
    tls: Arc<Tls>,
    addr: std::net::SocketAddr,
    /// The request, the same bytes for every stream.
    request: Vec<u8>,
    /// Arrival instants are microseconds after this.
    origin: Instant,
    /// Limits the handshakes in flight while the streams open.
    gate: Semaphore,
    /// Streams that had their first bookmark or failed before it.
    settled: AtomicUsize,
    settled_changed: Notify,
    /// Each stream's `pet.created` events so far, `ENDED` once its task ended.
    counts: Vec<AtomicU32>,
    /// Events a stream is expected to keep, to allocate once.
    capacity: usize,
}

impl Shared {
    fn settle(&self) {
        self.settled.fetch_add(1, Ordering::AcqRel);
        self.settled_changed.notify_one();
    }

    fn micros(&self, at: Instant) -> u32 {
        u32::try_from((at - self.origin).as_micros()).unwrap_or(u32::MAX)
    }
}

/// What each connection sends first: the stream's request, or an idle connection's one
/// request.
fn request(server: &Server, held: Held) -> Vec<u8> {
    let port = server.addr.port();
    match held {
        Held::Streams => format!(
            "GET /v1/events HTTP/1.1\r\nHost: localhost:{port}\r\nAuthorization: {BEARER}\r\n\
             Accept: text/event-stream\r\n\r\n"
        ),
        Held::IdleConnections | Held::Nothing => {
            format!("GET /healthz HTTP/1.1\r\nHost: localhost:{port}\r\n\r\n")
        }
    }
    .into_bytes()
}

/// One stream as it was read.
struct StreamLog {
    index: usize,
    /// Each `pet.created` event: the pet's id and when the read that brought it returned
    /// (microseconds after `Shared::origin`), in the stream's order.
    events: Vec<(u64, u32)>,
    /// Events of other types.
    others: u64,
    bookmarks: u64,
    /// The first thing that was wrong (the stream went on where it could), and how many were.
    fault: Option<String>,
    faults: u64,
    /// Why the stream ended before the bench closed it.
    ended: Option<String>,
}

impl StreamLog {
    fn new(index: usize, capacity: usize) -> StreamLog {
        StreamLog {
            index,
            events: Vec::with_capacity(capacity),
            others: 0,
            bookmarks: 0,
            fault: None,
            faults: 0,
            ended: None,
        }
    }

    fn fault(&mut self, why: String) {
        self.faults += 1;
        if self.fault.is_none() {
            self.fault = Some(why);
        }
    }
}

/// One stream's task: connect, send the request, read the head, then parse what comes until
/// `stop` says so (or the stream ends, which is a failure).
async fn follow(shared: Arc<Shared>, index: usize, mut stop: watch::Receiver<bool>) -> StreamLog {
    let mut log = StreamLog::new(index, shared.capacity);
    let mut ready = false;
    let outcome = read_stream(&shared, index, &mut stop, &mut log, &mut ready).await;
    if let Err(why) = outcome {
        log.ended = Some(why);
    }
    shared.counts[index].store(ENDED, Ordering::Relaxed);
    if !ready {
        shared.settle();
    }
    log
}

type TlsStream = tokio_rustls::client::TlsStream<tokio::net::TcpStream>;

/// Connects (a few at a time), sends the shared request and reads the response head into
/// `buf`; returns the connection and where the head ends and the bytes read end in `buf`.
async fn open(shared: &Shared, buf: &mut [u8]) -> Result<(TlsStream, usize, usize), String> {
    let deadline = Instant::now() + OPEN_LIMIT;
    let _permit = timeout_at(deadline, shared.gate.acquire())
        .await
        .map_err(|_| "no turn to connect within the open limit".to_owned())?
        .expect("the gate is never closed");
    let mut tls = timeout_at(deadline, shared.tls.raw_http1(shared.addr))
        .await
        .map_err(|_| "the TLS handshake took too long".to_owned())?
        .map_err(|e| format!("connect: {e}"))?;
    tls.write_all(&shared.request)
        .await
        .map_err(|e| format!("send the request: {e}"))?;
    let mut filled = 0;
    loop {
        if let Some(end) = find(&buf[..filled], b"\r\n\r\n") {
            return Ok((tls, end + 4, filled));
        }
        if filled == HEAD_LIMIT.min(buf.len()) {
            return Err("a response head longer than 8 KiB".to_owned());
        }
        let n = timeout_at(deadline, tls.read(&mut buf[filled..]))
            .await
            .map_err(|_| "no response head within the open limit".to_owned())?
            .map_err(|e| format!("read the head: {e}"))?;
        if n == 0 {
            return Err(format!(
                "closed before the head ended: {}",
                String::from_utf8_lossy(&buf[..filled])
            ));
        }
        filled += n;
    }
}

/// An idle connection's task: a request and its whole answer every `IDLE_REQUEST_EVERY`,
/// nothing else, until `stop`.
async fn hold(shared: Arc<Shared>, index: usize, mut stop: watch::Receiver<bool>) -> StreamLog {
    let mut log = StreamLog::new(index, 0);
    let mut ready = false;
    if let Err(why) = idle(&shared, index, &mut stop, &mut ready).await {
        log.ended = Some(why);
    }
    shared.counts[index].store(ENDED, Ordering::Relaxed);
    if !ready {
        shared.settle();
    }
    log
}

async fn idle(
    shared: &Shared,
    index: usize,
    stop: &mut watch::Receiver<bool>,
    ready: &mut bool,
) -> Result<(), String> {
    let mut buf = vec![0u8; HEAD_LIMIT];
    let (mut tls, _, filled) = open(shared, &mut buf).await?;
    whole_answer(&mut tls, &mut buf, filled).await?;
    *ready = true;
    shared.settle();
    // Spread over the interval, so the requests do not come all at once.
    let spread = IDLE_REQUEST_EVERY.mul_f64(index as f64 / shared.counts.len().max(1) as f64);
    let mut next = Instant::now() + spread;
    loop {
        tokio::select! {
            changed = stop.changed() => {
                if changed.is_err() || *stop.borrow() {
                    return Ok(());
                }
            }
            () = sleep_until(next) => {
                next += IDLE_REQUEST_EVERY;
                tls.write_all(&shared.request)
                    .await
                    .map_err(|e| format!("send a request: {e}"))?;
                timeout_at(Instant::now() + OPEN_LIMIT, whole_answer(&mut tls, &mut buf, 0))
                    .await
                    .map_err(|_| "no answer within the open limit".to_owned())??;
            }
            n = tls.read(&mut buf) => match n {
                Ok(0) => return Err("the server closed an idle connection".to_owned()),
                Ok(_) => return Err("bytes on an idle connection".to_owned()),
                Err(e) => return Err(format!("an idle connection failed: {e}")),
            },
        }
    }
}

/// Reads a whole 200 answer with a Content-Length into `buf`, which holds `filled` bytes of it.
async fn whole_answer(
    tls: &mut TlsStream,
    buf: &mut [u8],
    mut filled: usize,
) -> Result<(), String> {
    let (head_end, length) = loop {
        if let Some(end) = find(&buf[..filled], b"\r\n\r\n") {
            let text = String::from_utf8_lossy(&buf[..end]);
            if !text.starts_with("HTTP/1.1 200") {
                return Err(format!("answered {}", text.trim_end()));
            }
            let length: usize = text
                .split("\r\n")
                .find_map(|line| {
                    let (name, value) = line.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse().ok())?
                })
                .ok_or("an answer without Content-Length")?;
            break (end + 4, length);
        }
        filled += read_more(tls, buf, filled).await?;
    };
    while filled < head_end + length {
        filled += read_more(tls, buf, filled).await?;
    }
    if filled > head_end + length {
        return Err("bytes after the answer".to_owned());
    }
    Ok(())
}

/// Reads into `buf` after its first `filled` bytes; how many came.
async fn read_more(tls: &mut TlsStream, buf: &mut [u8], filled: usize) -> Result<usize, String> {
    if filled == buf.len() {
        return Err("an answer longer than 8 KiB".to_owned());
    }
    match tls.read(&mut buf[filled..]).await {
        Ok(0) => Err("closed before the answer ended".to_owned()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("read the answer: {e}")),
    }
}

/// Why idle connections failed, if any did.
fn idle_failures(logs: &[StreamLog]) -> Option<String> {
    let failed: Vec<String> = logs
        .iter()
        .filter_map(|log| Some(format!("connection {}: {}", log.index, log.ended.as_ref()?)))
        .collect();
    let first = failed.first()?;
    Some(format!(
        "{} of {} idle connections failed; the first: {first}",
        failed.len(),
        logs.len()
    ))
}

async fn read_stream(
    shared: &Shared,
    index: usize,
    stop: &mut watch::Receiver<bool>,
    log: &mut StreamLog,
    ready: &mut bool,
) -> Result<(), String> {
    let mut buf = vec![0u8; READ_BUFFER];
    let (mut tls, head_end, filled) = open(shared, &mut buf).await?;
    let chunked = head(&buf[..head_end])?;
    let mut parser = Parser::new(chunked);
    let mut at = shared.origin;
    let mut pending = head_end..filled;
    loop {
        if !pending.is_empty() {
            parser.feed(&buf[pending.clone()], shared.micros(at), log)?;
            shared.counts[index].store(log.events.len() as u32, Ordering::Relaxed);
            if !*ready && log.bookmarks > 0 {
                *ready = true;
                shared.settle();
            }
            if parser.ended() {
                return Err(format!(
                    "the server ended the stream after {} events",
                    log.events.len()
                ));
            }
        }
        let n = tokio::select! {
            biased;
            changed = stop.changed() => {
                if changed.is_err() || *stop.borrow() {
                    return Ok(());
                }
                continue;
            }
            n = tls.read(&mut buf) => {
                n.map_err(|e| format!("read after {} events: {e}", log.events.len()))?
            }
        };
        if n == 0 {
            return Err(format!(
                "the connection closed after {} events",
                log.events.len()
            ));
        }
        at = Instant::now();
        pending = 0..n;
    }
}

/// Checks a stream's response head; whether its body is chunked.
fn head(head: &[u8]) -> Result<bool, String> {
    let text = String::from_utf8_lossy(head);
    let mut lines = text.split("\r\n");
    let status = lines.next().unwrap_or_default();
    if !status.starts_with("HTTP/1.1 200") {
        return Err(format!("answered {}", text.trim_end()));
    }
    let (mut chunked, mut sse, mut no_store, mut length) = (false, false, false, false);
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim().to_ascii_lowercase();
        match name.trim().to_ascii_lowercase().as_str() {
            "transfer-encoding" => chunked = value.contains("chunked"),
            "content-type" => sse = value.starts_with("text/event-stream"),
            "cache-control" => no_store = value.contains("no-store"),
            "content-length" => length = true,
            _ => {}
        }
    }
    if !sse || !no_store || length {
        return Err(format!(
            "not an event stream (Content-Type text/event-stream, Cache-Control no-store, \
             no Content-Length): {}",
            text.trim_end()
        ));
    }
    Ok(chunked)
}

/// Where `needle` starts in `haystack`.
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Where the chunked coding is.
#[derive(Clone, Copy)]
enum Chunk {
    /// In a size line: the size so far, whether a digit came, whether the extensions began.
    Size(u64, bool, bool),
    /// In a chunk's data: the bytes left.
    Data(u64),
    /// After a chunk's data: its CRLF.
    DataEnd,
    /// After the last chunk (size 0): the body ended.
    Done,
}

/// The kind of the frame being read.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Frame {
    None,
    Bookmark,
    Created,
    Other,
}

/// The body's parser: the chunked coding, then the SSE lines and frames, keeping only what
/// the checks need.
struct Parser {
    chunked: bool,
    chunk: Chunk,
    /// A line split over reads, until its end arrives.
    line: Vec<u8>,
    /// The frame being read: its `id:` (a position: 32 lowercase hex), `event:`, and from its
    /// `data:` the pet's id and whether the data's cursor is the `id:`.
    id: Option<[u8; 32]>,
    frame: Frame,
    data: bool,
    pet: Option<u64>,
    data_cursor_matches: bool,
    /// The newest position seen (an event's cursor or a bookmark's).
    position: Option<[u8; 32]>,
}

impl Parser {
    fn new(chunked: bool) -> Parser {
        Parser {
            chunked,
            chunk: Chunk::Size(0, false, false),
            line: Vec::with_capacity(1024),
            id: None,
            frame: Frame::None,
            data: false,
            pet: None,
            data_cursor_matches: false,
            position: None,
        }
    }

    fn ended(&self) -> bool {
        matches!(self.chunk, Chunk::Done)
    }

    /// Takes bytes of the body as they came in one read at `at`; `Err` when the coding is
    /// broken (the stream cannot be read on).
    fn feed(&mut self, mut bytes: &[u8], at: u32, log: &mut StreamLog) -> Result<(), String> {
        if !self.chunked {
            self.body(bytes, at, log);
            return Ok(());
        }
        while let Some((&first, rest)) = bytes.split_first() {
            match self.chunk {
                Chunk::Size(size, digit, extension) => {
                    bytes = rest;
                    self.chunk = match first {
                        b'\n' if !digit => return Err("a chunk size line without a size".into()),
                        b'\n' if size == 0 => Chunk::Done,
                        b'\n' => Chunk::Data(size),
                        _ if extension => Chunk::Size(size, digit, true),
                        b';' => Chunk::Size(size, digit, true),
                        b'\r' => Chunk::Size(size, digit, extension),
                        _ => {
                            let value = (first as char)
                                .to_digit(16)
                                .ok_or_else(|| format!("a chunk size with {first:?}"))?;
                            if size >> 60 != 0 {
                                return Err("a chunk size too large".into());
                            }
                            Chunk::Size(size << 4 | u64::from(value), true, false)
                        }
                    };
                }
                Chunk::Data(left) => {
                    let take = usize::try_from(left).unwrap_or(usize::MAX).min(bytes.len());
                    self.body(&bytes[..take], at, log);
                    bytes = &bytes[take..];
                    let left = left - take as u64;
                    self.chunk = if left == 0 {
                        Chunk::DataEnd
                    } else {
                        Chunk::Data(left)
                    };
                }
                Chunk::DataEnd => {
                    bytes = rest;
                    match first {
                        b'\r' => {}
                        b'\n' => self.chunk = Chunk::Size(0, false, false),
                        _ => return Err("no CRLF after a chunk".into()),
                    }
                }
                Chunk::Done => return Err("bytes after the last chunk".into()),
            }
        }
        Ok(())
    }

    /// The body's bytes (the chunked coding removed), cut into lines.
    fn body(&mut self, mut bytes: &[u8], at: u32, log: &mut StreamLog) {
        while let Some(end) = bytes.iter().position(|&b| b == b'\n') {
            if self.line.is_empty() {
                self.line_done(&bytes[..end], at, log);
            } else {
                let mut line = std::mem::take(&mut self.line);
                line.extend_from_slice(&bytes[..end]);
                self.line_done(&line, at, log);
                line.clear();
                self.line = line;
            }
            bytes = &bytes[end + 1..];
        }
        self.line.extend_from_slice(bytes);
    }

    fn line_done(&mut self, line: &[u8], at: u32, log: &mut StreamLog) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            self.dispatch(at, log);
            return;
        }
        if line[0] == b':' {
            return;
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        match field {
            b"id" => match cursor(value) {
                Some(id) => self.id = Some(id),
                None => log.fault(format!(
                    "an id that is not 32 lowercase hex: {:?}",
                    String::from_utf8_lossy(value)
                )),
            },
            b"event" => {
                self.frame = match value {
                    b"bookmark" => Frame::Bookmark,
                    b"pet.created" => Frame::Created,
                    _ => Frame::Other,
                };
            }
            b"data" => {
                self.data = true;
                self.pet = pet_id(value);
                self.data_cursor_matches = value
                    .strip_prefix(b"{\"cursor\":\"")
                    .and_then(|rest| rest.get(..32))
                    .is_some_and(|c| self.id.is_some_and(|id| id == c));
            }
            _ => {}
        }
    }

    /// A blank line: the frame is complete.
    fn dispatch(&mut self, at: u32, log: &mut StreamLog) {
        let (id, frame, data, pet, matches) = (
            self.id.take(),
            std::mem::replace(&mut self.frame, Frame::None),
            std::mem::take(&mut self.data),
            self.pet.take(),
            std::mem::take(&mut self.data_cursor_matches),
        );
        // The `retry:` block, or a comment's: no data, no frame.
        if !data {
            return;
        }
        let Some(id) = id else {
            log.fault("a frame without an id".to_owned());
            return;
        };
        if !matches {
            log.fault("a frame whose data's cursor is not its id".to_owned());
        }
        let newer = self.position.is_none_or(|last| id > last);
        match frame {
            Frame::Bookmark => {
                if !newer && self.position != Some(id) {
                    log.fault("a bookmark behind the stream's position".to_owned());
                }
                log.bookmarks += 1;
            }
            Frame::Created | Frame::Other | Frame::None => {
                if !newer {
                    log.fault(format!(
                        "cursor {} after {}: not increasing",
                        String::from_utf8_lossy(&id),
                        self.position
                            .map_or_else(String::new, |p| String::from_utf8_lossy(&p).into()),
                    ));
                }
                match (frame, pet) {
                    (Frame::Created, Some(pet)) => log.events.push((pet, at)),
                    (Frame::Created, None) => log.fault("pet.created without a petId".to_owned()),
                    _ => log.others += 1,
                }
            }
        }
        if newer {
            self.position = Some(id);
        }
    }
}

/// A cursor: 32 lowercase hex characters.
fn cursor(value: &[u8]) -> Option<[u8; 32]> {
    let id: [u8; 32] = value.try_into().ok()?;
    id.iter()
        .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        .then_some(id)
}

/// The number after `"petId":` in an event's JSON.
fn pet_id(data: &[u8]) -> Option<u64> {
    const KEY: &[u8] = b"\"petId\":";
    let start = find(data, KEY)? + KEY.len();
    let digits = &data[start..];
    let end = digits
        .iter()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(digits.len());
    std::str::from_utf8(&digits[..end]).ok()?.parse().ok()
}

/// The creates of a run, as the clients saw them.
pub struct Creates {
    pub created: Vec<Created>,
    pub outcome: Outcome,
    pub sample: Option<Sample>,
    pub memory: Memory,
}

/// One 201: the pet's id, when its request was sent and when the answer arrived
/// (microseconds after the run's origin), and whether it arrived in the window.
#[derive(Clone, Copy)]
pub struct Created {
    pub pet: u64,
    pub sent_us: u32,
    pub done_us: u32,
    pub inside: bool,
}

/// What one creating client saw.
#[derive(Default)]
struct CreatorLog {
    /// Each 201's pet, request sent, answer arrived.
    created: Vec<(u64, Instant, Instant)>,
    /// Request to answer, for the answers that arrived in the window, microseconds.
    latencies_us: Vec<u32>,
    in_window: u64,
    non_2xx: u64,
    errors: u64,
    sample: Option<Sample>,
}

/// The creating clients' schedule.
struct Pace {
    start: Instant,
    window_start: Instant,
    window_end: Instant,
    rate: f64,
    clients: usize,
    addr: std::net::SocketAddr,
    tls: Arc<Tls>,
    host: HeaderValue,
}

/// `CLIENTS` clients create at `rate` a second together for the warm-up and the window: client
/// `i`'s `k`-th create is due at `(k * CLIENTS + i) / rate` seconds (or at once when the one
/// before was late). The server's CPU is sampled over the window, its memory at the end. The
/// 201s' instants count from `origin`, as the streams' (and the webhook receivers') arrivals do.
pub async fn creates(
    server: &Server,
    tls: &Arc<Tls>,
    origin: Instant,
    settings: &Settings,
    rate: f64,
) -> Creates {
    let start = Instant::now();
    let window_start = start + settings.warmup;
    let window_end = window_start + settings.window;
    let pace = Arc::new(Pace {
        start,
        window_start,
        window_end,
        rate,
        clients: CLIENTS,
        addr: server.addr,
        tls: Arc::clone(tls),
        host: HeaderValue::try_from(format!("localhost:{}", server.addr.port()))
            .expect("host:port is a valid header"),
    });
    let mut clients = tokio::task::JoinSet::new();
    for id in 0..CLIENTS {
        clients.spawn(creator(Arc::clone(&pace), id));
    }
    sleep_until(window_start).await;
    let me = std::process::id();
    let (t0, server0, mine0, steal0) = (
        Instant::now(),
        server.cpu_ticks(),
        cpu_ticks(me),
        steal_ticks(),
    );
    sleep_until(window_end).await;
    let (t1, server1, mine1, steal1) = (
        Instant::now(),
        server.cpu_ticks(),
        cpu_ticks(me),
        steal_ticks(),
    );
    let memory = Memory {
        peak_kib: server.peak_rss_kib(),
        rss_kib: server.rss_kib(),
    };
    let ticks = |from: Option<u64>, to: Option<u64>| match (from, to) {
        (Some(from), Some(to)) => to.saturating_sub(from) as f64 / CLK_TCK,
        _ => 0.0,
    };
    let seconds = (t1 - t0).as_secs_f64();
    let mut total = CreatorLog::default();
    let mut created = Vec::new();
    while let Some(log) = clients.join_next().await {
        let log = log.expect("a creating client does not panic");
        total.in_window += log.in_window;
        total.non_2xx += log.non_2xx;
        total.errors += log.errors;
        total.latencies_us.extend_from_slice(&log.latencies_us);
        if total.sample.is_none() {
            total.sample = log.sample;
        }
        let micros = |at: Instant| u32::try_from((at - origin).as_micros()).unwrap_or(u32::MAX);
        created.extend(log.created.into_iter().map(|(pet, sent, done)| Created {
            pet,
            sent_us: micros(sent),
            done_us: micros(done),
            inside: done >= window_start && done <= window_end,
        }));
    }
    total.latencies_us.sort_unstable();
    let outcome = Outcome {
        requests: total.in_window,
        window: window_end - window_start,
        latencies_us: total.latencies_us,
        non_2xx: total.non_2xx,
        errors: total.errors,
        ok_total: created.len() as u64,
        load_time: start.elapsed(),
        cpu_share: ticks(server0.map(|t| t.all), server1.map(|t| t.all)) / seconds,
        user_share: ticks(server0.map(|t| t.user), server1.map(|t| t.user)) / seconds,
        client_cpu_share: ticks(mine0, mine1) / seconds,
        steal: ticks(steal0, steal1) / seconds,
        sample: None,
    };
    Creates {
        created,
        outcome,
        sample: total.sample,
        memory,
    }
}

/// One creating client: a keep-alive HTTP/1.1 connection, one create at a time, on schedule.
async fn creator(pace: Arc<Pace>, id: usize) -> CreatorLog {
    let mut log = CreatorLog::default();
    let mut conn: Option<Conn> = None;
    let hard_end = pace.window_end + GRACE;
    for k in 0.. {
        let due = pace.start + Duration::from_secs_f64((k * pace.clients + id) as f64 / pace.rate);
        if due >= pace.window_end {
            break;
        }
        sleep_until(due).await;
        let mut sender = match conn.take() {
            Some(sender) => sender,
            None => match timeout_at(hard_end, pace.tls.http1(pace.addr)).await {
                Ok(Ok(sender)) => sender,
                _ => {
                    log.errors += 1;
                    continue;
                }
            },
        };
        let started = Instant::now();
        let answer = timeout_at(hard_end, exchange(&mut sender, &pace)).await;
        let done = Instant::now();
        match answer {
            Ok(Ok((status, body))) => {
                conn = Some(sender);
                if done >= pace.window_start && done <= pace.window_end {
                    log.in_window += 1;
                    let micros = (done - started).as_micros();
                    log.latencies_us
                        .push(u32::try_from(micros).unwrap_or(u32::MAX));
                }
                let pet = (status == 201)
                    .then(|| serde_json::from_slice::<serde_json::Value>(&body).ok())
                    .flatten()
                    .and_then(|json| json["id"].as_u64());
                match pet {
                    Some(pet) => log.created.push((pet, started, done)),
                    None => log.non_2xx += 1,
                }
                if log.sample.is_none() {
                    log.sample = Some(Sample {
                        path: "/v1/pets".to_owned(),
                        status,
                        body,
                    });
                }
            }
            Ok(Err(_)) => log.errors += 1,
            Err(_) => {
                log.errors += 1;
                break;
            }
        }
    }
    log
}

async fn exchange(conn: &mut Conn, pace: &Pace) -> hyper::Result<(u16, Bytes)> {
    let mut request = Request::new(Full::new(Bytes::from_static(NEW_PET.as_bytes())));
    *request.method_mut() = Method::POST;
    *request.uri_mut() = Uri::from_static("/v1/pets");
    let headers = request.headers_mut();
    headers.insert(HOST, pace.host.clone());
    headers.insert(AUTHORIZATION, HeaderValue::from_static(BEARER));
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    let response = conn.send(request).await?;
    let status = response.status().as_u16();
    let body = response.into_body().collect().await?.to_bytes();
    Ok((status, body))
}

/// The streams held against the creates.
struct Delivery {
    streams: usize,
    creates: usize,
    /// Deliveries measured (the window's creates on every stream), and of them those that
    /// reached a stream before their 201 reached the creating client.
    measured: usize,
    early: usize,
    /// p50, p99, max in microseconds, from the 201 and from the request.
    from_201: Option<[i64; 3]>,
    from_request: Option<[i64; 3]>,
    verdict: Result<(), String>,
}

impl Delivery {
    fn summary(&self, scenario: &str, kind: Kind, rate: f64) -> String {
        let text = |figures: Option<[i64; 3]>| {
            figures.map_or("nothing measured".to_owned(), |[p50, p99, max]| {
                let ms = |us: i64| us as f64 / 1000.0;
                format!(
                    "p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
                    ms(p50),
                    ms(p99),
                    ms(max)
                )
            })
        };
        format!(
            "{scenario} on {}: {} streams x {} creates ({rate} /s), {} deliveries of the \
             window's creates: from a create's 201 to its event on a stream {} ({} events came \
             before their 201); from the create's request {}",
            store_name(kind),
            thousands(self.streams as u64),
            thousands(self.creates as u64),
            thousands(self.measured as u64),
            text(self.from_201),
            thousands(self.early as u64),
            text(self.from_request),
        )
    }
}

/// p50, p99 and max of `values`, sorting them.
pub fn percentiles(values: &mut [i32]) -> Option<[i64; 3]> {
    values.sort_unstable();
    let last = values.len().checked_sub(1)?;
    let at = |p: f64| i64::from(values[(last as f64 * p).round() as usize]);
    Some([at(0.50), at(0.99), i64::from(values[last])])
}

/// How the readers of the creates' events (streams, webhook receivers) got them, one reader at
/// a time: the delays of the window's creates from their 201 and from their request, and what
/// came early, twice or unasked for.
pub(crate) struct Arrivals<'a> {
    creates: &'a Creates,
    index: HashMap<u64, usize>,
    seen: Vec<bool>,
    pub(crate) from_201: Vec<i32>,
    pub(crate) from_request: Vec<i32>,
    /// Events that came before their create's 201.
    pub(crate) early: usize,
    pub(crate) duplicates: usize,
    /// Events of pets no create made.
    pub(crate) unknown: usize,
}

impl<'a> Arrivals<'a> {
    pub(crate) fn new(creates: &'a Creates, readers: usize) -> Arrivals<'a> {
        let inside = creates.created.iter().filter(|c| c.inside).count();
        Arrivals {
            creates,
            index: creates
                .created
                .iter()
                .enumerate()
                .map(|(i, created)| (created.pet, i))
                .collect(),
            seen: vec![false; creates.created.len()],
            from_201: Vec::with_capacity(readers * inside),
            from_request: Vec::with_capacity(readers * inside),
            early: 0,
            duplicates: 0,
            unknown: 0,
        }
    }

    /// Counts one reader's events, each a pet and the instant it arrived (µs); returns how
    /// many of the creates it got.
    pub(crate) fn count(&mut self, events: &[(u64, u32)]) -> usize {
        let delay =
            |at: u32, from: u32| i32::try_from(i64::from(at) - i64::from(from)).unwrap_or(i32::MAX);
        self.seen.fill(false);
        let mut distinct = 0;
        for &(pet, at) in events {
            let Some(&i) = self.index.get(&pet) else {
                self.unknown += 1;
                continue;
            };
            if self.seen[i] {
                self.duplicates += 1;
                continue;
            }
            self.seen[i] = true;
            distinct += 1;
            let created = self.creates.created[i];
            if created.inside {
                if at < created.done_us {
                    self.early += 1;
                }
                self.from_201.push(delay(at, created.done_us));
                self.from_request.push(delay(at, created.sent_us));
            }
        }
        distinct
    }
}

/// Holds every stream against the creates: every 201's pet once on each, in one order for all
/// (cursors increasing, which the parser checked), and the delays.
fn deliveries(creates: &Creates, logs: &[StreamLog]) -> Delivery {
    let n = creates.created.len();
    let mut arrivals = Arrivals::new(creates, logs.len());
    let mut problems: Vec<String> = Vec::new();
    let (mut missing_streams, mut missing) = (0, 0);
    let mut reference: Option<&StreamLog> = None;
    let mut reordered = 0;
    for log in logs {
        let distinct = arrivals.count(&log.events);
        if distinct < n {
            missing_streams += 1;
            missing += n - distinct;
        }
        match reference {
            None => reference = Some(log),
            Some(first) => {
                let same = first.events.len() == log.events.len()
                    && first
                        .events
                        .iter()
                        .zip(&log.events)
                        .all(|(a, b)| a.0 == b.0);
                if !same {
                    reordered += 1;
                }
            }
        }
        if let Some(why) = &log.ended {
            problems.push(format!("stream {}: {why}", log.index));
        }
        if let Some(why) = &log.fault {
            problems.push(format!("stream {}: {why} ({} such)", log.index, log.faults));
        }
        if log.bookmarks == 0 {
            problems.push(format!("stream {}: no bookmark", log.index));
        }
    }
    // An event of a pet no 201 named: a create that failed on the client's side may have
    // committed; with no failed create, it is wrong.
    let failed_creates = creates.outcome.errors + creates.outcome.non_2xx;
    let mut summary = Vec::new();
    if reordered > 0 {
        summary.push(format!(
            "{reordered} streams saw the events in another order than the first"
        ));
    }
    if arrivals.unknown > 0 && failed_creates == 0 {
        let unknown = arrivals.unknown;
        summary.push(format!("{unknown} events of pets no create made"));
    }
    if arrivals.duplicates > 0 {
        let duplicates = arrivals.duplicates;
        summary.push(format!("{duplicates} events delivered twice"));
    }
    if missing_streams > 0 {
        summary.push(format!(
            "{missing_streams} of {} streams missed events ({missing} in all)",
            logs.len()
        ));
    }
    summary.append(&mut problems);
    let verdict = if summary.is_empty() {
        Ok(())
    } else {
        let more = summary.len().saturating_sub(5);
        summary.truncate(5);
        if more > 0 {
            summary.push(format!("and {more} more"));
        }
        Err(summary.join("; "))
    };
    Delivery {
        streams: logs.len(),
        creates: n,
        measured: arrivals.from_201.len(),
        early: arrivals.early,
        from_201: percentiles(&mut arrivals.from_201),
        from_request: percentiles(&mut arrivals.from_request),
        verdict,
    }
}

/// The goal lines of the part.
pub fn goals(report: &mut Report) {
    for (kind, p99_goal) in [
        (Kind::Petstore, P99_GOAL_REDB_MS),
        (Kind::Postgres, P99_GOAL_PG_MS),
    ] {
        let store = store_name(kind);
        let feed = report.feeds.iter().find(|feed| feed.kind == kind).copied();
        let head = feed.map_or_else(
            || format!("events on {store}"),
            |feed| {
                format!(
                    "events on {store}, {} streams, {} creates/s",
                    thousands(feed.streams as u64),
                    feed.rate
                )
            },
        );
        let ms = |figures: Option<[i64; 3]>, i: usize| figures.map(|f| f[i] as f64 / 1000.0);
        let from_201 = feed.and_then(|feed| feed.from_201_us);
        let from_request = feed.and_then(|feed| feed.from_request_us);
        report.goal(
            &format!("{head}: p99 201 to event, ms"),
            ms(from_201, 1),
            &format!("<= {p99_goal}"),
            |v| v <= p99_goal,
        );
        report.report_only("  the same, p50, ms", ms(from_201, 0));
        report.report_only("  the same, max, ms", ms(from_201, 2));
        report.report_only(
            "  from the create's request to its event, p99, ms",
            ms(from_request, 1),
        );
        let over = |base: fn(&Feed) -> Option<Memory>, figure: fn(&Memory) -> u64| {
            feed.and_then(|feed| {
                let base = base(&feed)?;
                Some((figure(&feed.with) as f64 - figure(&base) as f64) / 1024.0)
            })
        };
        report.goal(
            &format!("events on {store}: server peak RSS with the streams over without, MiB"),
            over(|feed| Some(feed.without), |m| m.peak_kib),
            &format!("<= {RSS_GOAL_MIB}"),
            |v| v <= RSS_GOAL_MIB,
        );
        report.report_only(
            "  the same, RSS at the end of the window, MiB",
            over(|feed| Some(feed.without), |m| m.rss_kib),
        );
        if kind == Kind::Petstore {
            report.report_only(
                "  the streams over as many idle TLS connections, peak RSS, MiB",
                over(|feed| feed.idle, |m| m.peak_kib),
            );
        }
    }
    // Issue 28's third figure is an A/B of two builds, which one run cannot measure.
    report.goal(
        "create-64 per core, this build over the one before the feed (A/B: performance.md)",
        None,
        ">= 0.90",
        |v| v >= 0.90,
    );
}
