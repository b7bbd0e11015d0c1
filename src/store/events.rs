//! The event feed as the store keeps it, shared by the write front and both engines: the event
//! a change appends (encoded once, when its batch commits, by the domain's `event`), the
//! feed's state in one snapshot, and what a read of the feed asks and answers. Invariants: sequence numbers
//! are given in commit order, one more per event, never twice in one feed; a stored event
//! never holds its cursor, so a copy that starts a new feed identity keeps its events valid.

use std::time::UNIX_EPOCH;

use bytes::{Bytes, BytesMut};

use super::model::{Change, StoreError};
use crate::event::{Event, EventType, Position, Types};
use crate::pet::PetId;
use crate::subject::Kind;

/// What the feed holds now, as one read snapshot sees it: its identity, the newest sequence
/// number, and the highest one purged (every event at or below it is gone).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FeedState {
    pub feed: u64,
    pub newest: u64,
    pub trimmed: u64,
}

impl FeedState {
    pub fn newest_position(self) -> Position {
        Position {
            feed: self.feed,
            seq: self.newest,
        }
    }

    /// Where a read from `after` starts, or why it cannot: a position of another feed, one
    /// whose next event was purged, or one past the newest (a store rolled back) is gone.
    pub fn start(self, after: Option<Position>) -> Result<u64, Gone> {
        let Some(after) = after else {
            return Ok(self.trimmed);
        };
        if after.feed != self.feed || after.seq < self.trimmed || after.seq > self.newest {
            return Err(Gone);
        }
        Ok(after.seq)
    }
}

/// A cursor this feed can no longer (or never could) continue from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gone;

/// A read of the feed: up to `limit` events of `types` after `after` (`None`: from the oldest
/// kept), looking at no more than `scan` events.
#[derive(Clone, Copy, Debug)]
pub struct EventQuery {
    pub after: Option<Position>,
    pub types: Types,
    pub limit: usize,
    pub scan: usize,
}

/// An event as the engines keep it: its number, what happened, when, and the pet's id,
/// revision and JSON after the change (none once deleted). Its JSON is made when it is read
/// (`event::Event`), so the file keeps about half the bytes.
#[derive(Clone, Debug)]
pub struct StoredEvent {
    pub seq: u64,
    pub kind: EventType,
    /// When its batch committed, in Unix milliseconds.
    pub at_ms: u64,
    pub pet_id: PetId,
    pub revision: u64,
    pub pet: Option<Bytes>,
    /// The order's or the category's id (0 for a pet's event), and its JSON after the change
    /// (none for a pet's event or a deleted category).
    pub subject_id: i64,
    pub subject: Option<Bytes>,
}

impl StoredEvent {
    /// The event as the batch that made `change` at `at_ms` appends it, numbered `seq`.
    pub(crate) fn of(seq: u64, change: &Change, at_ms: u64) -> StoredEvent {
        StoredEvent {
            seq,
            kind: change.kind,
            at_ms,
            // As the feed keeps them: a category's event has no pet (0, 0), and a pet's no
            // subject of its own beside the pet (0).
            pet_id: change.pet.as_ref().map_or(0, |pet| pet.id),
            revision: change.pet.as_ref().map_or(0, |pet| pet.revision),
            pet: change.pet.as_ref().and_then(|pet| pet.json.clone()),
            subject_id: match change.subject.kind {
                Kind::Pet => 0,
                _ => change.subject.id,
            },
            subject: change.json.clone(),
        }
    }

    /// The event's JSON object as a client reads it, its cursor in `feed` first.
    pub fn json_into(&self, feed: u64, out: &mut BytesMut) {
        let event = Event {
            kind: self.kind,
            at_ms: self.at_ms,
            pet_id: self.pet_id,
            revision: self.revision,
            pet: self.pet.as_deref(),
            subject_id: self.subject_id,
            subject: self.subject.as_deref(),
        };
        event.json_into(
            Position {
                feed,
                seq: self.seq,
            },
            out,
        );
    }
}

/// One read of the feed: the events found, in order, the position the read reached (after the
/// last event returned, or as far as a filtered scan looked), and the feed it read.
#[derive(Clone, Debug)]
pub struct EventPage {
    /// The position the read started after.
    pub start: u64,
    pub events: Vec<StoredEvent>,
    pub reached: u64,
    pub state: FeedState,
}

impl EventPage {
    #[cfg(test)]
    pub fn reached_position(&self) -> Position {
        Position {
            feed: self.state.feed,
            seq: self.reached,
        }
    }

    /// Where the next page starts: after the last event returned; after as far as this one
    /// looked when it returned none (a filtered page moves past events of other types, so a
    /// poll loop never reads them again).
    pub fn next_position(&self) -> Position {
        Position {
            feed: self.state.feed,
            seq: self.events.last().map_or(self.reached, |event| event.seq),
        }
    }
}

/// Why a read of the feed failed.
#[derive(Debug)]
pub enum ReadError {
    /// The cursor is of another feed, purged, or past the newest.
    Gone,
    Store(StoreError),
}

impl From<StoreError> for ReadError {
    fn from(e: StoreError) -> ReadError {
        ReadError::Store(e)
    }
}

/// Collects a page from events read in sequence order after `start`: keeps those of `types`,
/// up to `limit`, having looked at no more than `scan`.
pub(crate) struct PageScan {
    query: EventQuery,
    scanned: usize,
    pub(crate) page: EventPage,
}

impl PageScan {
    pub(crate) fn new(query: EventQuery, state: FeedState, start: u64) -> PageScan {
        PageScan {
            query,
            scanned: 0,
            page: EventPage {
                start,
                events: Vec::new(),
                reached: start,
                state,
            },
        }
    }

    /// Takes the next event in order, read by `read` only if the page keeps it; `false` once
    /// the page is full or the scan is done.
    pub(crate) fn push(
        &mut self,
        seq: u64,
        code: u8,
        read: impl FnOnce() -> Result<StoredEvent, StoreError>,
    ) -> Result<bool, StoreError> {
        if seq > self.page.state.newest
            || self.page.events.len() >= self.query.limit
            || self.scanned >= self.query.scan
        {
            return Ok(false);
        }
        self.scanned += 1;
        self.page.reached = seq;
        if self.query.types.contains(code) {
            self.page.events.push(read()?);
        }
        Ok(true)
    }

    /// The page; a scan that ran out of events reached the newest.
    pub(crate) fn finish(mut self, exhausted: bool) -> EventPage {
        if exhausted {
            self.page.reached = self.page.reached.max(self.page.state.newest);
        }
        self.page
    }
}

/// Unix milliseconds now; 0 on a clock set before 1970.
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A new feed identity, random; never 0, so a zeroed field is never mistaken for one.
pub(crate) fn new_feed_id() -> u64 {
    let mut bytes = [0; 8];
    // Without the OS's randomness, the clock still makes two stores' identities differ.
    if getrandom::fill(&mut bytes).is_err() {
        bytes = now_ms().to_le_bytes();
    }
    u64::from_le_bytes(bytes).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_start_outside_the_kept_feed_is_gone() {
        let state = FeedState {
            feed: 3,
            newest: 10,
            trimmed: 4,
        };
        let at = |seq| Some(Position { feed: 3, seq });
        assert_eq!(state.start(None), Ok(4));
        assert_eq!(state.start(at(4)), Ok(4));
        assert_eq!(state.start(at(10)), Ok(10));
        assert_eq!(state.start(at(3)), Err(Gone));
        assert_eq!(state.start(at(11)), Err(Gone));
        assert_eq!(state.start(Some(Position { feed: 2, seq: 5 })), Err(Gone));
    }

    #[test]
    fn a_filtered_scan_reaches_as_far_as_it_looked() {
        let state = FeedState {
            feed: 1,
            newest: 10,
            trimmed: 0,
        };
        let query = EventQuery {
            after: None,
            types: Types::only([EventType::PetDeleted]),
            limit: 2,
            scan: 4,
        };
        let mut scan = PageScan::new(query, state, 0);
        let mut more = true;
        for seq in 1..=10 {
            let read = || Err(StoreError::Corrupt("not read: filtered out".into()));
            if !scan
                .push(seq, EventType::PetCreated.code(), read)
                .expect("scans")
            {
                more = false;
                break;
            }
        }
        let page = scan.finish(more);
        assert_eq!((page.events.len(), page.reached), (0, 4));
    }
}
