//! The live side of the event feed: one follower per process reads what the store committed
//! (woken by this process's own commits, and on PostgreSQL also every `POLL_SHARED`, since
//! other instances commit too) into a ring of encoded server-sent-event frames, and every open
//! stream copies from that ring at its own pace, or from the store while it is further
//! behind. It knows the store's feed vocabulary and HTTP's body frames, not routes or keys.
//! Invariants: a stream sends events in feed order, each once, with nothing skipped; a stream
//! that cannot keep that promise (its reader stalled, the feed purged past it) ends, and its
//! client resumes from the last `id:` it got.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, broadcast, mpsc, watch};

use crate::event::{Position, Types};
use crate::metrics::{self, StreamClosed};
use crate::store::{EventPage, EventQuery, ReadError, Settled, Store};

/// Events the ring keeps: a stream further behind reads the store instead.
const RING: usize = 4096;
/// How often a follower on a store other instances write to reads it for their events.
const POLL_SHARED: Duration = Duration::from_millis(100);
/// How often a follower on a store only this process writes reads it anyway, in case a wake
/// was missed (a commit whose outcome was settled after a reopen).
const POLL_OWN: Duration = Duration::from_secs(1);
/// Every stream sends a bookmark this often, whatever else it sends.
pub const BOOKMARK_EVERY: Duration = Duration::from_secs(15);
/// What a client waits before reconnecting, as the stream's `retry:` tells it.
const RETRY_MS: u32 = 2000;
/// Frames a stream's send buffer holds; each is at most `FRAME_BYTES` and a little.
const SEND_BUFFER: usize = 16;
const FRAME_BYTES: usize = 16 * 1024;
/// A stream whose send buffer stays full this long has a reader that stopped reading: it ends.
const STALL_LIMIT: Duration = Duration::from_secs(10);
/// Events one read of the store returns at most, and looks at, for a stream catching up.
const CATCH_UP_LIMIT: usize = 1000;
const CATCH_UP_SCAN: usize = 10_000;

/// Whether the client that opened a stream may still read it: asked at each bookmark, so a
/// stream whose key was revoked (or expired) ends within `BOOKMARK_EVERY` of the reload.
pub type StillAllowed = Box<dyn Fn() -> bool + Send + Sync>;

/// A stream's frames as its response body takes them. Boxed: a channel allocates its slots 32
/// at a time, so a slot of 8 bytes rather than 32 saves 768 bytes a stream.
pub type Frames = mpsc::Receiver<Box<Bytes>>;

/// The live feed of one process; cheap to clone.
#[derive(Clone)]
pub struct Feed(Arc<Inner>);

struct Inner {
    store: Store,
    ring: Mutex<Ring>,
    /// The newest sequence number in the ring; changes wake the streams.
    newest: watch::Sender<u64>,
    /// A place for each stream under `--max-subscribers`.
    places: Arc<Semaphore>,
    max_places: usize,
    /// Set once the server stops: every stream ends.
    stopping: watch::Sender<bool>,
    /// Ticks every `BOOKMARK_EVERY`: each stream sends a bookmark. One timer for all of them,
    /// not one each.
    bookmarks: watch::Sender<u64>,
    /// Wakes the follower when the first stream opens.
    wake: Arc<tokio::sync::Notify>,
}

/// Recent events of one feed, encoded as stream frames, with no gap: `(base, last]`.
struct Ring {
    feed: u64,
    /// The position before the first event kept; `None` until the follower first read.
    base: Option<u64>,
    events: VecDeque<RingEvent>,
}

struct RingEvent {
    seq: u64,
    code: u8,
    /// `id:`, `event:` and `data:` lines and the blank line: the whole frame.
    frame: Bytes,
}

impl Ring {
    fn last(&self) -> Option<u64> {
        self.events.back().map(|e| e.seq).or(self.base)
    }

    /// Appends the events of `page`, read after `last()`, dropping the oldest beyond `RING`.
    fn extend(&mut self, page: &EventPage) {
        for event in &page.events {
            self.events.push_back(RingEvent {
                seq: event.seq,
                code: event.kind.code(),
                frame: event_frame(page.state.feed, event),
            });
        }
        while self.events.len() > RING {
            if let Some(dropped) = self.events.pop_front() {
                self.base = Some(dropped.seq);
            }
        }
    }

    /// Lets go of every event: the next read starts the ring again at the newest.
    fn reset(&mut self) {
        self.base = None;
        self.events.clear();
    }

    /// Frames of `types` after `after`, up to about `FRAME_BYTES`, joined, and the position
    /// they reach; `None` when the ring does not hold what follows `after`.
    fn after(&self, feed: u64, after: u64, types: Types) -> Option<(Bytes, u64)> {
        let base = self.base?;
        if feed != self.feed || after < base {
            return None;
        }
        let start = self.events.partition_point(|e| e.seq <= after);
        let mut joined = BytesMut::new();
        let mut reached = after;
        for event in self.events.range(start..) {
            if joined.len() >= FRAME_BYTES {
                break;
            }
            reached = event.seq;
            if types.contains(event.code) {
                joined.put_slice(&event.frame);
            }
        }
        Some((joined.freeze(), reached))
    }
}

impl Feed {
    /// Starts the follower of `store`'s feed.
    pub fn start(store: Store, max_subscribers: usize) -> Feed {
        let (newest, _) = watch::channel(0);
        let (stopping, _) = watch::channel(false);
        let (bookmarks, _) = watch::channel(0);
        let feed = Feed(Arc::new(Inner {
            store,
            ring: Mutex::new(Ring {
                feed: 0,
                base: None,
                events: VecDeque::new(),
            }),
            newest,
            places: Arc::new(Semaphore::new(max_subscribers)),
            max_places: max_subscribers,
            stopping,
            bookmarks,
            wake: Arc::default(),
        }));
        tokio::spawn(follow(Arc::downgrade(&feed.0)));
        tokio::spawn(tick_bookmarks(Arc::downgrade(&feed.0)));
        feed
    }

    /// Ends every stream and takes no more: the server is stopping.
    pub fn stop(&self) {
        self.0.stopping.send_replace(true);
        self.0.places.close();
    }

    /// The most streams open at once.
    pub fn max_subscribers(&self) -> usize {
        self.0.max_places
    }

    /// A place for one more stream, or `None` when `--max-subscribers` are open (or the
    /// server is stopping).
    pub fn place(&self) -> Option<OwnedSemaphorePermit> {
        Arc::clone(&self.0.places).try_acquire_owned().ok()
    }

    /// Opens a stream that starts with `first`, a page read after the client's position, and
    /// goes on live; returns the receiving end of its frames, for the response body.
    pub fn stream(
        &self,
        place: OwnedSemaphorePermit,
        first: EventPage,
        types: Types,
        allowed: StillAllowed,
    ) -> Frames {
        let (frames, body) = mpsc::channel(SEND_BUFFER);
        let stream = Stream {
            feed: Arc::clone(&self.0),
            frames,
            feed_id: first.state.feed,
            position: first.reached,
            types,
            allowed,
            _place: place,
            _counted: metrics::Subscriber::enter(),
        };
        self.0.wake.notify_one();
        tokio::spawn(stream.run(first));
        body
    }
}

/// Reads the store's new events into the ring whenever something may have committed, while
/// any stream is open. Ends with the feed.
async fn follow(feed: std::sync::Weak<Inner>) {
    let poll = match feed.upgrade() {
        Some(feed) if feed.store.shared_by_instances() => POLL_SHARED,
        Some(_) => POLL_OWN,
        None => return,
    };
    // Held only while a stream is open: without a listener the writer publishes nothing and
    // wakes nobody, so the feed costs a create nothing but its event row.
    let mut settled: Option<broadcast::Receiver<Settled>> = None;
    let mut ticks = tokio::time::interval(poll);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut oldest_checked = tokio::time::Instant::now();
    loop {
        let Some(inner) = feed.upgrade() else { return };
        if *inner.stopping.borrow() {
            return;
        }
        let idle = inner.places.available_permits() == inner.max_places;
        if oldest_checked.elapsed() >= Duration::from_secs(10) {
            oldest_checked = tokio::time::Instant::now();
            report_oldest(&inner.store).await;
        }
        if idle {
            // Nobody listens: the ring is let go, and the next stream starts it again.
            settled = None;
            inner
                .ring
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .reset();
        } else {
            // Subscribed before the read: a commit after it wakes the next one.
            if settled.is_none() {
                settled = Some(inner.store.subscribe());
            }
            read_new(&inner).await;
        }
        let wake = Arc::clone(&inner.wake);
        drop(inner);
        let heard = async {
            match settled.as_mut() {
                Some(settled) => settled.recv().await.map(drop),
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            heard = heard => {
                // Lagging behind the broadcast is only a wake; its end is the store's.
                if let Err(broadcast::error::RecvError::Closed) = heard {
                    return;
                }
            }
            _ = ticks.tick() => {}
            () = wake.notified() => {}
        }
    }
}

/// Tells every stream to send a bookmark, every `BOOKMARK_EVERY`, until the feed stops.
async fn tick_bookmarks(feed: std::sync::Weak<Inner>) {
    let mut ticks = tokio::time::interval(BOOKMARK_EVERY);
    ticks.reset();
    loop {
        ticks.tick().await;
        let Some(inner) = feed.upgrade() else { return };
        if *inner.stopping.borrow() {
            return;
        }
        inner.bookmarks.send_modify(|tick| *tick += 1);
    }
}

/// Reads every event committed after the ring's last into it, a page at a time, and wakes the
/// streams. A ring not started yet starts at the newest position: streams behind it read the
/// store.
async fn read_new(inner: &Inner) {
    loop {
        let (feed, last) = {
            let ring = inner.ring.lock().unwrap_or_else(PoisonError::into_inner);
            (ring.feed, ring.last())
        };
        let query = EventQuery {
            after: last.map(|seq| Position { feed, seq }),
            types: Types::ALL,
            limit: if last.is_some() { CATCH_UP_LIMIT } else { 0 },
            scan: CATCH_UP_LIMIT,
        };
        let page = match inner.store.events(query).await {
            Ok(page) => page,
            Err(ReadError::Gone) => {
                // Purged past the ring, or another feed: start again from the newest.
                inner
                    .ring
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .reset();
                continue;
            }
            Err(ReadError::Store(e)) => {
                tracing::debug!(error = %e, "reading the event feed failed; trying again at the next wake");
                return;
            }
        };
        let full = last.is_none() || page.events.len() == CATCH_UP_LIMIT;
        let newest = {
            let mut ring = inner.ring.lock().unwrap_or_else(PoisonError::into_inner);
            if last.is_none() {
                ring.feed = page.state.feed;
                ring.base = Some(page.state.newest);
            } else {
                ring.extend(&page);
            }
            ring.last()
        };
        if let Some(newest) = newest {
            inner.newest.send_if_modified(|known| {
                let moved = *known != newest;
                *known = newest;
                moved
            });
        }
        if !full {
            return;
        }
    }
}

/// Sets the metric of the oldest event's age.
async fn report_oldest(store: &Store) {
    let query = EventQuery {
        after: None,
        types: Types::ALL,
        limit: 1,
        scan: 1,
    };
    if let Ok(page) = store.events(query).await {
        metrics::events_oldest(page.events.first().map(|e| e.at_ms));
    }
}

/// One open stream.
struct Stream {
    feed: Arc<Inner>,
    frames: mpsc::Sender<Box<Bytes>>,
    feed_id: u64,
    /// The newest position this stream has sent or looked past.
    position: u64,
    types: Types,
    allowed: StillAllowed,
    _place: OwnedSemaphorePermit,
    _counted: metrics::Subscriber,
}

/// Why a send did not go.
enum Ended {
    Closed(StreamClosed),
}

impl Stream {
    async fn run(mut self, first: EventPage) {
        let mut opening = BytesMut::new();
        opening.put_slice(format!("retry: {RETRY_MS}\n\n").as_bytes());
        // The position the stream starts after, before any event: a client that loses the
        // connection at once resumes from there, and ids only ever grow.
        opening.put_slice(&bookmark(self.feed_id, first.start));
        for event in &first.events {
            opening.put_slice(&event_frame(first.state.feed, event));
        }
        // Not kept for the stream's life: a first page may hold a thousand pets.
        drop(first);
        let reason = match self.serve(opening.freeze()).await {
            Ok(()) => StreamClosed::Client,
            Err(Ended::Closed(reason)) => reason,
        };
        metrics::stream_closed(reason);
        match reason {
            // The ordinary ends: a client leaving, the server stopping.
            StreamClosed::Client | StreamClosed::Shutdown => {
                tracing::debug!(?reason, "event stream ended");
            }
            StreamClosed::Slow
            | StreamClosed::Expired
            | StreamClosed::Error
            | StreamClosed::Revoked => {
                tracing::info!(
                    ?reason,
                    position = self.position,
                    "event stream ended; its client resumes from its last id"
                );
            }
        }
    }

    async fn serve(&mut self, opening: Bytes) -> Result<(), Ended> {
        self.send(opening).await?;
        let mut newest = self.feed.newest.subscribe();
        let mut stopping = self.feed.stopping.subscribe();
        let mut bookmarks = self.feed.bookmarks.subscribe();
        loop {
            if *stopping.borrow_and_update() {
                return Err(Ended::Closed(StreamClosed::Shutdown));
            }
            let ring_last = *newest.borrow_and_update();
            if self.position < ring_last {
                let from_ring = {
                    let ring = self
                        .feed
                        .ring
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner);
                    ring.after(self.feed_id, self.position, self.types)
                };
                let (frames, reached) = match from_ring {
                    Some(found) => found,
                    None => self.read_store().await?,
                };
                let moved = reached > self.position;
                self.position = self.position.max(reached);
                if !frames.is_empty() {
                    self.send(frames).await?;
                }
                if moved {
                    continue;
                }
            }
            tokio::select! {
                changed = newest.changed() => {
                    if changed.is_err() {
                        return Err(Ended::Closed(StreamClosed::Shutdown));
                    }
                }
                ticked = bookmarks.changed() => {
                    if ticked.is_err() {
                        return Err(Ended::Closed(StreamClosed::Shutdown));
                    }
                    if !(self.allowed)() {
                        return Err(Ended::Closed(StreamClosed::Revoked));
                    }
                    let bookmark = self.bookmark();
                    self.send(bookmark).await?;
                }
                _ = stopping.changed() => {}
                () = self.frames.closed() => return Ok(()),
            }
        }
    }

    /// The frames after this stream's position from the store, for a stream the ring has
    /// left behind.
    async fn read_store(&self) -> Result<(Bytes, u64), Ended> {
        let query = EventQuery {
            after: Some(Position {
                feed: self.feed_id,
                seq: self.position,
            }),
            types: self.types,
            limit: CATCH_UP_LIMIT.min(64),
            scan: CATCH_UP_SCAN,
        };
        match self.feed.store.events(query).await {
            Ok(page) => {
                let mut joined = BytesMut::new();
                for event in &page.events {
                    joined.put_slice(&event_frame(page.state.feed, event));
                }
                Ok((joined.freeze(), page.reached))
            }
            Err(ReadError::Gone) => Err(Ended::Closed(StreamClosed::Expired)),
            Err(ReadError::Store(e)) => {
                tracing::warn!(error = %e, "an event stream could not read the feed; it ends and its client resumes");
                Err(Ended::Closed(StreamClosed::Error))
            }
        }
    }

    fn bookmark(&self) -> Bytes {
        bookmark(self.feed_id, self.position)
    }

    /// Sends one frame, waiting for room at most `STALL_LIMIT`.
    async fn send(&self, frame: Bytes) -> Result<(), Ended> {
        match tokio::time::timeout(STALL_LIMIT, self.frames.send(Box::new(frame))).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err(Ended::Closed(StreamClosed::Client)),
            Err(_) => Err(Ended::Closed(StreamClosed::Slow)),
        }
    }
}

/// A bookmark frame: the position as `id:` (what a client resumes from) and as its data.
fn bookmark(feed: u64, seq: u64) -> Bytes {
    let cursor = Position { feed, seq }.cursor();
    Bytes::from(format!(
        "id: {cursor}\nevent: bookmark\ndata: {{\"cursor\":\"{cursor}\"}}\n\n"
    ))
}

/// An event as a server-sent-events frame (WHATWG HTML 9.2): its cursor as `id:`, its type as
/// `event:`, its JSON on one `data:` line (JSON has no raw line breaks).
pub fn event_frame(feed: u64, event: &crate::store::StoredEvent) -> Bytes {
    let kind = event.kind.name();
    let cursor = Position {
        feed,
        seq: event.seq,
    }
    .cursor();
    let mut frame = BytesMut::with_capacity(event.pet.as_ref().map_or(0, Bytes::len) + 240);
    frame.put_slice(b"id: ");
    frame.put_slice(cursor.as_bytes());
    frame.put_slice(b"\nevent: ");
    frame.put_slice(kind.as_bytes());
    frame.put_slice(b"\ndata: ");
    event.json_into(feed, &mut frame);
    frame.put_slice(b"\n\n");
    frame.freeze()
}
