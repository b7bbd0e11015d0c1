//! The event object (issue 28): what a change of a pet is called in the feed, where an event
//! sits in it (`Position`, sent as an opaque cursor), and its JSON as clients read it. The
//! domain: text and numbers in, bytes out; no I/O.

use std::time::{Duration, UNIX_EPOCH};

use bytes::{BufMut, Bytes, BytesMut};

use crate::pet::{self, PetId};

/// What happened, as the feed names it. The code is what the engines store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[expect(
    clippy::enum_variant_names,
    reason = "named as the feed names them; orders and categories join them"
)]
pub enum EventType {
    PetCreated,
    PetUpdated,
    PetDeleted,
}

impl EventType {
    pub const ALL: [EventType; 3] = [
        EventType::PetCreated,
        EventType::PetUpdated,
        EventType::PetDeleted,
    ];

    pub fn name(self) -> &'static str {
        match self {
            EventType::PetCreated => "pet.created",
            EventType::PetUpdated => "pet.updated",
            EventType::PetDeleted => "pet.deleted",
        }
    }

    pub fn from_name(name: &str) -> Option<EventType> {
        EventType::ALL.into_iter().find(|t| t.name() == name)
    }

    pub fn code(self) -> u8 {
        match self {
            EventType::PetCreated => 1,
            EventType::PetUpdated => 2,
            EventType::PetDeleted => 3,
        }
    }

    pub fn from_code(code: u8) -> Option<EventType> {
        EventType::ALL.into_iter().find(|t| t.code() == code)
    }
}

/// A set of event types, for a filter: a bit per code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Types(u8);

impl Types {
    pub const ALL: Types = Types(u8::MAX);

    pub fn only(types: impl IntoIterator<Item = EventType>) -> Types {
        Types(types.into_iter().fold(0, |bits, t| bits | 1 << t.code()))
    }

    pub fn contains(self, code: u8) -> bool {
        code < 8 && self.0 & (1 << code) != 0
    }

    pub fn is_all(self) -> bool {
        self == Types::ALL
    }

    /// The codes in the set, for a query that filters in the database.
    pub fn codes(self) -> Vec<i16> {
        EventType::ALL
            .into_iter()
            .filter(|t| self.contains(t.code()))
            .map(|t| i16::from(t.code()))
            .collect()
    }
}

/// A place in one feed: after the event numbered `seq` (0: before the first). The feed's
/// identity is random, made when the store (or a copy of it) is made: a cursor of another
/// store, or of an older copy of this one, is told apart rather than misread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Position {
    pub feed: u64,
    pub seq: u64,
}

impl Position {
    /// The opaque cursor: 32 lowercase hex digits, the feed's identity then the sequence
    /// number, so that later positions of one feed compare greater as strings too.
    pub fn cursor(self) -> String {
        // Every listPets answer carries one: hex digits by hand, without `core::fmt`.
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut text = String::with_capacity(32);
        for value in [self.feed, self.seq] {
            for shift in (0..16).rev() {
                text.push(char::from(HEX[(value >> (shift * 4)) as usize & 0xf]));
            }
        }
        text
    }

    /// Reads a cursor; `None` when it is not one this server makes.
    pub fn parse(cursor: &str) -> Option<Position> {
        let valid = cursor.len() == 32
            && cursor
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if !valid {
            return None;
        }
        let feed = u64::from_str_radix(&cursor[..16], 16).ok()?;
        let seq = u64::from_str_radix(&cursor[16..], 16).ok()?;
        Some(Position { feed, seq })
    }
}

/// When a batch's changes committed, as every one of its events says it: formatted once.
pub struct At(String);

impl At {
    /// RFC 3339, UTC, milliseconds, from Unix milliseconds.
    pub fn from_unix_ms(at_ms: u64) -> At {
        At(humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(at_ms)).to_string())
    }
}

/// An event's JSON object without its cursor: `type`, `at` (RFC 3339, UTC, milliseconds),
/// `petId`, `etag` (the pet's tag after the change; on a delete, the tag of the revision
/// deleted) and `pet` (the pet's JSON after the change; `null` on a delete).
pub fn encode(kind: EventType, at: &At, id: PetId, revision: u64, pet: Option<&[u8]>) -> Bytes {
    let at = &at.0;
    let etag = pet::etag(id, revision);
    let pet = pet.unwrap_or(b"null");
    let mut body = BytesMut::with_capacity(96 + pet.len());
    body.put_slice(b"{\"type\":\"");
    body.put_slice(kind.name().as_bytes());
    body.put_slice(b"\",\"at\":\"");
    body.put_slice(at.as_bytes());
    body.put_slice(b"\",\"petId\":");
    body.put_slice(itoa::Buffer::new().format(id).as_bytes());
    // The tag is a quoted id and revision: digits, a dot, a minus; as a JSON string its
    // quotes are escaped.
    body.put_slice(b",\"etag\":\"\\\"");
    body.put_slice(etag.trim_matches('"').as_bytes());
    body.put_slice(b"\\\"\",\"pet\":");
    body.put_slice(pet);
    body.put_u8(b'}');
    body.freeze()
}

/// The whole event as a client reads it: `{"cursor":…,` then the members `encode` made.
pub fn with_cursor(cursor: Position, encoded: &[u8], out: &mut BytesMut) {
    out.put_slice(b"{\"cursor\":\"");
    out.put_slice(cursor.cursor().as_bytes());
    out.put_slice(b"\",");
    // The encoded object begins with `{`; everything after it follows the cursor.
    out.put_slice(encoded.get(1..).unwrap_or_default());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_reads_back_and_orders_as_its_position() {
        let a = Position {
            feed: 0xfeed,
            seq: 9,
        };
        let b = Position {
            feed: 0xfeed,
            seq: 10,
        };
        assert_eq!(Position::parse(&a.cursor()), Some(a));
        assert!(a.cursor() < b.cursor());
        assert_eq!(a.cursor().len(), 32);
        for bad in [
            "",
            "x",
            &a.cursor().to_uppercase(),
            &format!("{}0", a.cursor()),
        ] {
            assert_eq!(Position::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn an_event_is_json_with_its_cursor_first() {
        let encoded = encode(
            EventType::PetUpdated,
            &At::from_unix_ms(1_795_305_600_123),
            -5,
            2,
            Some(br#"{"id":-5,"name":"Rex"}"#),
        );
        let mut out = BytesMut::new();
        with_cursor(Position { feed: 1, seq: 1 }, &encoded, &mut out);
        let json: serde_json::Value = serde_json::from_slice(&out).expect("JSON");
        assert_eq!(
            json,
            serde_json::json!({
                "cursor": "00000000000000010000000000000001",
                "type": "pet.updated",
                "at": "2026-11-22T00:00:00.123Z",
                "petId": -5,
                "etag": "\"-5.2\"",
                "pet": {"id": -5, "name": "Rex"},
            })
        );
        let order: Vec<&str> = ["cursor", "type", "at", "petId", "etag", "pet"].to_vec();
        let text = String::from_utf8_lossy(&out);
        let mut at = 0;
        for name in order {
            let found = text[at..].find(&format!("\"{name}\":")).expect(name);
            at += found;
        }
        let deleted = encode(EventType::PetDeleted, &At::from_unix_ms(0), 5, 3, None);
        let deleted: serde_json::Value = serde_json::from_slice(&deleted).expect("JSON");
        assert_eq!(
            (&deleted["pet"], &deleted["etag"]),
            (&serde_json::Value::Null, &serde_json::json!("\"5.3\""))
        );
    }
}
