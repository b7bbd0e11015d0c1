//! A sale of one animal (issue 29): `Order`, `NewOrder`, `OrderStatus`, `OrderAction`, their
//! JSON and the rules of a hold. An order is `placed` (it holds its pet, `pending`), then
//! `completed` (the pet `sold`), `cancelled` or `expired` (the pet `available` again); those
//! three are final. Pure: no HTTP, no storage; both engines apply `Order::apply` alike.

use std::time::{Duration, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::body;
use crate::clock::{self, Precision};
use crate::pet::{PetId, PetStatus};

/// The identifier the store assigns to an order, from 1 up, never reused.
pub type OrderId = i64;

/// Most characters of an order's note.
pub const MAX_NOTE_CHARS: usize = 500;

/// Where an order stands. The code is what the engines store and index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OrderStatus {
    Placed,
    Completed,
    Cancelled,
    Expired,
}

impl OrderStatus {
    pub const ALL: [OrderStatus; 4] = [
        OrderStatus::Placed,
        OrderStatus::Completed,
        OrderStatus::Cancelled,
        OrderStatus::Expired,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            OrderStatus::Placed => "placed",
            OrderStatus::Completed => "completed",
            OrderStatus::Cancelled => "cancelled",
            OrderStatus::Expired => "expired",
        }
    }

    pub fn parse(text: &str) -> Option<OrderStatus> {
        OrderStatus::ALL.into_iter().find(|s| s.as_str() == text)
    }

    /// A stable code for keys and columns; changing it changes the stored format.
    pub fn code(self) -> u8 {
        match self {
            OrderStatus::Placed => 1,
            OrderStatus::Completed => 2,
            OrderStatus::Cancelled => 3,
            OrderStatus::Expired => 4,
        }
    }

    pub fn from_code(code: u8) -> Option<OrderStatus> {
        OrderStatus::ALL.into_iter().find(|s| s.code() == code)
    }
}

/// What a client (complete, cancel) or the hold's end (expire) does to a placed order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OrderAction {
    Complete,
    Cancel,
    Expire,
}

impl OrderAction {
    /// The status the order takes.
    pub fn status(self) -> OrderStatus {
        match self {
            OrderAction::Complete => OrderStatus::Completed,
            OrderAction::Cancel => OrderStatus::Cancelled,
            OrderAction::Expire => OrderStatus::Expired,
        }
    }

    /// The status the order's pet takes with it.
    pub fn pet_status(self) -> PetStatus {
        match self {
            OrderAction::Complete => PetStatus::Sold,
            OrderAction::Cancel | OrderAction::Expire => PetStatus::Available,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            OrderAction::Complete => "complete",
            OrderAction::Cancel => "cancel",
            OrderAction::Expire => "expire",
        }
    }
}

/// Why an action cannot apply to an order as it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// Only a placed order moves; this one is already final.
    NotPlaced(OrderStatus),
    /// The hold ended at this Unix millisecond: the order expires, it cannot complete.
    HoldEnded(u64),
}

/// A client's order (`POST /v1/store/orders`), checked: the pet, and a note.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewOrder {
    pub pet_id: PetId,
    pub note: Option<String>,
}

impl NewOrder {
    /// Reads a request body: an object with `petId` (int64, required) and `note` (a string of
    /// at most `MAX_NOTE_CHARS` characters); `id` and any other member are refused, since an
    /// order's every other field is the server's.
    pub fn from_json(body: &[u8]) -> Result<NewOrder, String> {
        let mut pet_id = None;
        let mut note = None;
        for (name, value) in body::members(body)? {
            match name.as_str() {
                "petId" => pet_id = Some(body::int64("petId", &value)?),
                "note" => note = Some(body::text("note", value, MAX_NOTE_CHARS)?),
                "id" => return Err("id is assigned by the server: leave it out".into()),
                other => {
                    return Err(format!(
                        "unknown member {other:?}: an order takes petId and note"
                    ));
                }
            }
        }
        let pet_id = pet_id.ok_or("petId is required")?;
        Ok(NewOrder { pet_id, note })
    }

    /// The same order however its JSON was written, for an Idempotency-Key's fingerprint;
    /// marked as an order's, so a key used for a pet never matches it.
    pub fn canonical_json(&self) -> Vec<u8> {
        let mut out = b"order:".to_vec();
        serde_json::to_writer(&mut out, &(self.pet_id, &self.note))
            .expect("an id and a string always encode");
        out
    }
}

/// An order as it is stored and answered.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Order {
    #[serde(rename = "i")]
    pub id: OrderId,
    #[serde(rename = "p")]
    pub pet_id: PetId,
    #[serde(rename = "s", with = "status_code")]
    pub status: OrderStatus,
    /// 1 when placed, one more with each change: the ETag's revision.
    #[serde(rename = "r")]
    pub revision: u64,
    /// Unix milliseconds.
    #[serde(rename = "t")]
    pub placed_at_ms: u64,
    #[serde(rename = "e", default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<u64>,
    /// When it became final.
    #[serde(rename = "c", default, skip_serializing_if = "Option::is_none")]
    pub closed_at_ms: Option<u64>,
    #[serde(rename = "n", default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

mod status_code {
    use super::OrderStatus;

    pub fn serialize<S: serde::Serializer>(s: &OrderStatus, to: S) -> Result<S::Ok, S::Error> {
        to.serialize_u8(s.code())
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(from: D) -> Result<OrderStatus, D::Error> {
        let code = <u8 as serde::Deserialize>::deserialize(from)?;
        OrderStatus::from_code(code)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown order status {code}")))
    }
}

impl Order {
    /// A new order `id` for `new`, placed at `now_ms`, held for `hold` (none: until completed
    /// or cancelled).
    pub fn place(id: OrderId, new: NewOrder, now_ms: u64, hold: Option<Duration>) -> Order {
        Order {
            id,
            pet_id: new.pet_id,
            status: OrderStatus::Placed,
            revision: 1,
            placed_at_ms: now_ms,
            expires_at_ms: hold.map(|hold| now_ms.saturating_add(hold.as_millis() as u64)),
            closed_at_ms: None,
            note: new.note,
        }
    }

    /// The order after `action` at `now_ms`, or why it cannot be done. A hold that has ended
    /// cannot complete, even before the store has expired it; it can still be cancelled.
    pub fn apply(&self, action: OrderAction, now_ms: u64) -> Result<Order, Refused> {
        if self.status != OrderStatus::Placed {
            return Err(Refused::NotPlaced(self.status));
        }
        if action == OrderAction::Complete
            && let Some(end) = self.expires_at_ms
            && end <= now_ms
        {
            return Err(Refused::HoldEnded(end));
        }
        Ok(Order {
            status: action.status(),
            revision: self.revision + 1,
            closed_at_ms: Some(now_ms),
            ..self.clone()
        })
    }

    /// The order as it was answered when placed: what a retry with its Idempotency-Key gets.
    pub fn as_placed(&self) -> Order {
        Order {
            status: OrderStatus::Placed,
            revision: 1,
            closed_at_ms: None,
            ..self.clone()
        }
    }

    /// The bytes the engines keep (short member names, times in milliseconds).
    pub fn to_record(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("an order has only numbers and a string: it encodes")
    }

    pub fn from_record(record: &[u8]) -> Result<Order, serde_json::Error> {
        serde_json::from_slice(record)
    }

    /// The order's JSON object as the API sends it: `id`, `petId`, `status`, `placedAt`,
    /// then `expiresAt`, `closedAt` and `note` when it has them (RFC 3339, UTC, milliseconds).
    pub fn to_json(&self) -> Vec<u8> {
        // Written in place (every answer and every event of an order has one): a
        // `serde_json::Map` built it key by key, an allocation each.
        let mut out = Vec::with_capacity(160 + self.note.as_ref().map_or(0, String::len));
        let mut int = itoa::Buffer::new();
        let time = |out: &mut Vec<u8>, name: &[u8], ms: u64| {
            let at = clock::rfc3339(UNIX_EPOCH + Duration::from_millis(ms), Precision::Millis);
            out.extend_from_slice(b",\"");
            out.extend_from_slice(name);
            out.extend_from_slice(b"\":\"");
            out.extend_from_slice(at.to_string().as_bytes());
            out.push(b'"');
        };
        out.extend_from_slice(b"{\"id\":");
        out.extend_from_slice(int.format(self.id).as_bytes());
        out.extend_from_slice(b",\"petId\":");
        out.extend_from_slice(int.format(self.pet_id).as_bytes());
        out.extend_from_slice(b",\"status\":\"");
        out.extend_from_slice(self.status.as_str().as_bytes());
        out.push(b'"');
        time(&mut out, b"placedAt", self.placed_at_ms);
        if let Some(at) = self.expires_at_ms {
            time(&mut out, b"expiresAt", at);
        }
        if let Some(at) = self.closed_at_ms {
            time(&mut out, b"closedAt", at);
        }
        if let Some(note) = &self.note {
            out.extend_from_slice(b",\"note\":");
            serde_json::to_writer(&mut out, note).expect("a string always encodes");
        }
        out.push(b'}');
        out
    }

    /// The strong entity tag of the order at its revision.
    pub fn etag(&self) -> String {
        crate::subject::etag(self.id, self.revision)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn placed(hold: Option<Duration>) -> Order {
        let new = NewOrder {
            pet_id: 7,
            note: Some("for Ann".into()),
        };
        Order::place(3, new, 1_795_305_600_000, hold)
    }

    #[test]
    fn a_new_order_takes_pet_id_and_note_and_refuses_everything_else() {
        assert_eq!(
            NewOrder::from_json(br#"{"petId":5}"#),
            Ok(NewOrder {
                pet_id: 5,
                note: None
            })
        );
        assert_eq!(
            NewOrder::from_json(br#"{"note":"x","petId":-1}"#).map(|o| o.note),
            Ok(Some("x".into()))
        );
        for (body, message) in [
            (r#"{}"#, "petId is required"),
            (r#"{"petId":1,"id":2}"#, "id is assigned"),
            (
                r#"{"petId":1,"status":"placed"}"#,
                "unknown member \"status\"",
            ),
            (r#"{"petId":"1"}"#, "petId must be an integer"),
            (r#"{"petId":1,"note":null}"#, "note must not be null"),
            (r#"{"petId":1,"petId":2}"#, "duplicate key"),
        ] {
            let refused = NewOrder::from_json(body.as_bytes()).expect_err(body);
            assert!(refused.starts_with(message), "{body}: {refused}");
        }
        let long = format!(r#"{{"petId":1,"note":"{}"}}"#, "é".repeat(501));
        assert!(NewOrder::from_json(long.as_bytes()).is_err());
        let fits = format!(r#"{{"petId":1,"note":"{}"}}"#, "é".repeat(500));
        assert!(NewOrder::from_json(fits.as_bytes()).is_ok());
    }

    #[test]
    fn only_a_placed_order_moves_and_an_ended_hold_cannot_complete() {
        let order = placed(Some(Duration::from_secs(60)));
        let now = order.placed_at_ms + 1000;
        let done = order.apply(OrderAction::Complete, now).expect("completes");
        assert_eq!(
            (done.status, done.revision, done.closed_at_ms),
            (OrderStatus::Completed, 2, Some(now))
        );
        assert_eq!(
            done.apply(OrderAction::Cancel, now),
            Err(Refused::NotPlaced(OrderStatus::Completed))
        );
        let late = order.placed_at_ms + 60_000;
        assert_eq!(
            order.apply(OrderAction::Complete, late),
            Err(Refused::HoldEnded(late))
        );
        assert!(order.apply(OrderAction::Cancel, late).is_ok());
        assert!(order.apply(OrderAction::Expire, late).is_ok());
        assert!(placed(None).apply(OrderAction::Complete, u64::MAX).is_ok());
        assert_eq!(done.as_placed(), order);
    }

    #[test]
    fn an_order_reads_back_from_its_record_and_answers_api_json() {
        use serde_json::Value;
        let order = placed(Some(Duration::from_secs(1800)));
        assert_eq!(
            Order::from_record(&order.to_record()).expect("reads"),
            order
        );
        let json: Value = serde_json::from_slice(&order.to_json()).expect("JSON");
        assert_eq!(
            json,
            serde_json::json!({
                "id": 3, "petId": 7, "status": "placed",
                "placedAt": "2026-11-22T00:00:00.000Z",
                "expiresAt": "2026-11-22T00:30:00.000Z",
                "note": "for Ann",
            })
        );
        let quoted = Order {
            note: Some("for \"Ann\"\n\u{1}é".into()),
            ..order.clone()
        };
        let read: Value = serde_json::from_slice(&quoted.to_json()).expect("JSON");
        assert_eq!(read["note"], "for \"Ann\"\n\u{1}é");
        let bare: Value = serde_json::from_slice(&placed(None).to_json()).expect("JSON");
        assert!(bare.get("expiresAt").is_none() && bare.get("closedAt").is_none());
        assert_ne!(
            NewOrder {
                pet_id: 1,
                note: None
            }
            .canonical_json(),
            NewOrder {
                pet_id: 1,
                note: Some(String::new())
            }
            .canonical_json()
        );
    }

    #[test]
    fn status_codes_are_distinct_and_read_back() {
        for status in OrderStatus::ALL {
            assert_eq!(OrderStatus::from_code(status.code()), Some(status));
            assert_eq!(OrderStatus::parse(status.as_str()), Some(status));
        }
    }
}
