//! The event object (issues 28 and 29): what a change of a pet, an order or a category is
//! called in the feed, where an event sits in it (`Position`, sent as an opaque cursor), and
//! its JSON as clients read it. The domain: text and numbers in, bytes out; no I/O.

use std::time::{Duration, UNIX_EPOCH};

use bytes::{BufMut, BytesMut};

use crate::clock::{self, Precision};
use crate::pet::PetId;
use crate::subject::Kind;

/// What happened, as the feed names it. The code is what the engines store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventType {
    PetCreated,
    PetUpdated,
    PetDeleted,
    OrderPlaced,
    OrderCompleted,
    OrderCancelled,
    OrderExpired,
    CategoryCreated,
    CategoryUpdated,
    CategoryDeleted,
}

impl EventType {
    pub const ALL: [EventType; 10] = [
        EventType::PetCreated,
        EventType::PetUpdated,
        EventType::PetDeleted,
        EventType::OrderPlaced,
        EventType::OrderCompleted,
        EventType::OrderCancelled,
        EventType::OrderExpired,
        EventType::CategoryCreated,
        EventType::CategoryUpdated,
        EventType::CategoryDeleted,
    ];

    pub fn name(self) -> &'static str {
        match self {
            EventType::PetCreated => "pet.created",
            EventType::PetUpdated => "pet.updated",
            EventType::PetDeleted => "pet.deleted",
            EventType::OrderPlaced => "order.placed",
            EventType::OrderCompleted => "order.completed",
            EventType::OrderCancelled => "order.cancelled",
            EventType::OrderExpired => "order.expired",
            EventType::CategoryCreated => "category.created",
            EventType::CategoryUpdated => "category.updated",
            EventType::CategoryDeleted => "category.deleted",
        }
    }

    pub fn subject(self) -> Kind {
        match self {
            EventType::PetCreated | EventType::PetUpdated | EventType::PetDeleted => Kind::Pet,
            EventType::OrderPlaced
            | EventType::OrderCompleted
            | EventType::OrderCancelled
            | EventType::OrderExpired => Kind::Order,
            EventType::CategoryCreated
            | EventType::CategoryUpdated
            | EventType::CategoryDeleted => Kind::Category,
        }
    }

    /// The event an order's move to `status` makes.
    pub fn of_order(status: crate::order::OrderStatus) -> EventType {
        use crate::order::OrderStatus;
        match status {
            OrderStatus::Placed => EventType::OrderPlaced,
            OrderStatus::Completed => EventType::OrderCompleted,
            OrderStatus::Cancelled => EventType::OrderCancelled,
            OrderStatus::Expired => EventType::OrderExpired,
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
            EventType::OrderPlaced => 4,
            EventType::OrderCompleted => 5,
            EventType::OrderCancelled => 6,
            EventType::OrderExpired => 7,
            EventType::CategoryCreated => 8,
            EventType::CategoryUpdated => 9,
            EventType::CategoryDeleted => 10,
        }
    }

    pub fn from_code(code: u8) -> Option<EventType> {
        EventType::ALL.into_iter().find(|t| t.code() == code)
    }
}

/// A set of event types, for a filter: a bit per code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Types(u16);

impl Types {
    pub const ALL: Types = Types(u16::MAX);

    pub fn only(types: impl IntoIterator<Item = EventType>) -> Types {
        Types(types.into_iter().fold(0, |bits, t| bits | 1 << t.code()))
    }

    pub fn contains(self, code: u8) -> bool {
        code < 16 && self.0 & (1 << code) != 0
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

/// One event: what happened, when its batch committed (Unix milliseconds), the pet's id,
/// revision after the change and JSON (`None` once deleted; for a category event, none at
/// all), and for an order or a category event, its id and JSON after the change (`None` once
/// a category is deleted).
#[derive(Clone, Copy, Debug)]
pub struct Event<'a> {
    pub kind: EventType,
    pub at_ms: u64,
    pub pet_id: PetId,
    pub revision: u64,
    pub pet: Option<&'a [u8]>,
    pub subject_id: i64,
    pub subject: Option<&'a [u8]>,
}

impl Event<'_> {
    /// The event's JSON object as a client reads it, at `cursor`: `cursor`, `type`, `at` (RFC
    /// 3339, UTC, milliseconds), then by subject:
    /// - a pet's: `petId`, `etag` (the pet's tag after the change; on a delete, the tag of
    ///   the revision deleted) and `pet` (`null` on a delete);
    /// - an order's: `orderId`, `order`, then the pet's three after the change;
    /// - a category's: `categoryId` and `category` (`null` on a delete).
    pub fn json_into(&self, cursor: Position, out: &mut BytesMut) {
        let at = clock::rfc3339(
            UNIX_EPOCH + Duration::from_millis(self.at_ms),
            Precision::Millis,
        );
        let pet = self.pet.unwrap_or(b"null");
        let subject = self.subject.unwrap_or(b"null");
        out.reserve(170 + pet.len() + subject.len());
        out.put_slice(b"{\"cursor\":\"");
        out.put_slice(cursor.cursor().as_bytes());
        out.put_slice(b"\",\"type\":\"");
        out.put_slice(self.kind.name().as_bytes());
        out.put_slice(b"\",\"at\":\"");
        out.put_slice(at.to_string().as_bytes());
        let id = itoa::Buffer::new().format(self.subject_id).to_owned();
        match self.kind.subject() {
            Kind::Pet => {}
            Kind::Order => {
                out.put_slice(b"\",\"orderId\":");
                out.put_slice(id.as_bytes());
                out.put_slice(b",\"order\":");
                out.put_slice(subject);
                out.put_slice(b",\"");
            }
            Kind::Category => {
                out.put_slice(b"\",\"categoryId\":");
                out.put_slice(id.as_bytes());
                out.put_slice(b",\"category\":");
                out.put_slice(subject);
                out.put_u8(b'}');
                return;
            }
        }
        if self.kind.subject() == Kind::Pet {
            out.put_slice(b"\",\"");
        }
        out.put_slice(b"petId\":");
        out.put_slice(itoa::Buffer::new().format(self.pet_id).as_bytes());
        // The tag is a quoted id and revision (digits, a dot, a minus): as a JSON string, its
        // quotes are escaped.
        let etag = crate::subject::etag(self.pet_id, self.revision);
        out.put_slice(b",\"etag\":\"\\\"");
        out.put_slice(etag.trim_matches('"').as_bytes());
        out.put_slice(b"\\\"\",\"pet\":");
        out.put_slice(pet);
        out.put_u8(b'}');
    }
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
        let event = Event {
            kind: EventType::PetUpdated,
            at_ms: 1_795_305_600_123,
            pet_id: -5,
            revision: 2,
            pet: Some(br#"{"id":-5,"name":"Rex"}"#),
            subject_id: 0,
            subject: None,
        };
        let mut out = BytesMut::new();
        event.json_into(Position { feed: 1, seq: 1 }, &mut out);
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
        let text = String::from_utf8_lossy(&out);
        let mut at = 0;
        for name in ["cursor", "type", "at", "petId", "etag", "pet"] {
            at += text[at..].find(&format!("\"{name}\":")).expect(name);
        }
        let deleted = Event {
            kind: EventType::PetDeleted,
            at_ms: 0,
            pet_id: 5,
            revision: 3,
            pet: None,
            subject_id: 0,
            subject: None,
        };
        let mut out = BytesMut::new();
        deleted.json_into(Position { feed: 1, seq: 2 }, &mut out);
        let deleted: serde_json::Value = serde_json::from_slice(&out).expect("JSON");
        assert_eq!(
            (&deleted["pet"], &deleted["etag"]),
            (&serde_json::Value::Null, &serde_json::json!("\"5.3\""))
        );
    }

    #[test]
    fn an_order_event_carries_the_order_then_the_pet_and_a_category_event_the_category() {
        let placed = Event {
            kind: EventType::OrderPlaced,
            at_ms: 0,
            pet_id: 4,
            revision: 2,
            pet: Some(br#"{"id":4}"#),
            subject_id: 9,
            subject: Some(br#"{"id":9,"petId":4}"#),
        };
        let mut out = BytesMut::new();
        placed.json_into(Position { feed: 1, seq: 3 }, &mut out);
        let json: serde_json::Value = serde_json::from_slice(&out).expect("JSON");
        assert_eq!(json["orderId"], 9);
        assert_eq!(json["order"]["petId"], 4);
        assert_eq!(
            (&json["petId"], &json["etag"]),
            (&serde_json::json!(4), &serde_json::json!("\"4.2\""))
        );
        assert_eq!(json["pet"]["id"], 4);
        let deleted = Event {
            kind: EventType::CategoryDeleted,
            at_ms: 0,
            pet_id: 0,
            revision: 0,
            pet: None,
            subject_id: 2,
            subject: None,
        };
        let mut out = BytesMut::new();
        deleted.json_into(Position { feed: 1, seq: 4 }, &mut out);
        let json: serde_json::Value = serde_json::from_slice(&out).expect("JSON");
        assert_eq!(json["categoryId"], 2);
        assert_eq!(json["category"], serde_json::Value::Null);
        assert!(json.get("petId").is_none());
        for kind in EventType::ALL {
            assert_eq!(EventType::from_code(kind.code()), Some(kind));
            assert_eq!(EventType::from_name(kind.name()), Some(kind));
        }
    }
}
