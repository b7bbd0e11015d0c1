//! The event feed's operation, `list_events`: a page of the feed as a JSON array with a link
//! to the position after it, or the feed live as server-sent events from a position on. What
//! the stream does once it runs is `feed`'s.

use bytes::{BufMut, Bytes, BytesMut};
use hyper::header::{
    ACCEPT, CACHE_CONTROL, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, LINK,
};

use super::{Reply, query_error};
use crate::error::Error;
use crate::feed::Feed;
use crate::query::EventsQuery;
use crate::store::{EventQuery, ReadError, Store};

/// WHATWG HTML 9.2: what an EventSource sends when it reconnects.
const LAST_EVENT_ID: HeaderName = HeaderName::from_static("last-event-id");
const X_ACCEL_BUFFERING: HeaderName = HeaderName::from_static("x-accel-buffering");
const NO_STORE: HeaderValue = HeaderValue::from_static("no-store");
const EVENT_STREAM: HeaderValue = HeaderValue::from_static("text/event-stream");

/// `GET /v1/events` (listEvents): a page of the feed as a JSON array, with a `Link` to the
/// position after it, always; or, when the client accepts `text/event-stream` (and did not
/// send HEAD), the feed live from that position.
pub async fn list_events(
    store: &Store,
    feed: &Feed,
    query: Option<&str>,
    headers: &HeaderMap,
    head: bool,
    allowed: impl FnOnce() -> crate::feed::StillAllowed,
) -> Result<Reply, Error> {
    let streaming = !head && accepts_event_stream(headers);
    // A browser's EventSource reconnects to the URL it first opened, with the id it last got.
    let last_event_id = streaming
        .then(|| headers.get(LAST_EVENT_ID).and_then(|v| v.to_str().ok()))
        .flatten();
    let query = EventsQuery::parse_with_last_event_id(query.unwrap_or_default(), last_event_id)
        .map_err(query_error)?;
    let place = match streaming {
        true => Some(feed.place().ok_or(Error::SubscribersFull {
            max: feed.max_subscribers(),
        })?),
        false => None,
    };
    let read = EventQuery {
        after: query.after,
        types: query.filters.types(),
        limit: query.limit,
        // A filtered page looks at this many events at most, so that a rare type never makes
        // one request scan the whole feed; its next link goes on from where it stopped.
        scan: query.limit.saturating_mul(10).max(10_000),
    };
    let page = store.events(read).await.map_err(|e| match e {
        ReadError::Gone => Error::CursorExpired,
        ReadError::Store(e) => e.into(),
    })?;
    let mut reply = Reply::ok(Bytes::new());
    reply.headers.push((CACHE_CONTROL, NO_STORE));
    if let Some(place) = place {
        reply.headers.push((CONTENT_TYPE, EVENT_STREAM));
        // nginx buffers a proxied answer unless told not to: events would wait in it.
        reply
            .headers
            .push((X_ACCEL_BUFFERING, HeaderValue::from_static("no")));
        reply.stream = Some(feed.stream(place, page, query.filters.types(), allowed()));
        return Ok(reply);
    }
    let mut array = BytesMut::with_capacity(
        64 + page
            .events
            .iter()
            .map(|e| {
                let object = |json: &Option<Bytes>| json.as_ref().map_or(0, Bytes::len);
                object(&e.pet) + object(&e.subject) + 160
            })
            .sum::<usize>(),
    );
    array.put_u8(b'[');
    for (n, event) in page.events.iter().enumerate() {
        if n > 0 {
            array.put_u8(b',');
        }
        event.json_into(page.state.feed, &mut array);
    }
    array.put_u8(b']');
    reply.body = array.freeze();
    let mut link = String::with_capacity(120);
    link.push_str("</v1/events?");
    query.next_into(page.next_position(), &mut link);
    link.push_str(">; rel=\"next\"");
    let link = HeaderValue::try_from(link)
        .expect("a link of hex digits, digits and type names is a valid header value");
    reply.headers.push((LINK, link));
    Ok(reply)
}

/// Whether `Accept` lists `text/event-stream` (with any parameters, in any case).
fn accepts_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get_all(ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|range| {
            let essence = range.split(';').next().unwrap_or_default().trim();
            essence.eq_ignore_ascii_case("text/event-stream")
        })
}
