//! The animal as the spec defines it: `Pet`, `NewPet`, `PetPatch`, `PetStatus`, `PetId`, their
//! JSON shape and the rules a client's `NewPet` and `PetPatch` must meet. No HTTP, no storage,
//! no I/O: a rule broken here is an `InvalidPet` sentence that the caller turns into its own
//! error.
//! Invariant: a `Pet` always encodes as `{"id","name","categoryId"[,"status"]}`, never `null`.

use std::collections::HashSet;
use std::fmt;

use serde::de::{Deserializer as _, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The identifier the store assigns to a pet (spec: integer, int64).
pub type PetId = i64;

/// Availability of a pet (spec 2, `PetStatus`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PetStatus {
    Available,
    Pending,
    Sold,
}

impl PetStatus {
    /// The spec's spelling; anything else (other case included) is not a status.
    pub fn parse(text: &str) -> Option<PetStatus> {
        match text {
            "available" => Some(PetStatus::Available),
            "pending" => Some(PetStatus::Pending),
            "sold" => Some(PetStatus::Sold),
            _ => None,
        }
    }

    /// The spec's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            PetStatus::Available => "available",
            PetStatus::Pending => "pending",
            PetStatus::Sold => "sold",
        }
    }

    /// A stable one-byte code for index keys; changing it changes the file format.
    pub fn to_code(self) -> u8 {
        match self {
            PetStatus::Available => 0,
            PetStatus::Pending => 1,
            PetStatus::Sold => 2,
        }
    }
}

/// A stored animal, as returned by every operation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Pet {
    pub id: PetId,
    pub name: String,
    pub category_id: i64,
    // Decision: a pet without a status has no `status` key at all, never `null`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<PetStatus>,
}

impl Pet {
    /// The pet's JSON object, the exact bytes the API sends and the store keeps.
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self)
            .expect("a Pet has only strings, integers and an enum: it always encodes")
    }

    /// Reads back the bytes `to_json` wrote (the store's own, not a client's).
    pub fn from_json(json: &[u8]) -> Result<Pet, serde_json::Error> {
        serde_json::from_slice(json)
    }
}

/// A client's request to add an animal (spec 2, `NewPet`), already checked against every rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewPet {
    pub name: String,
    pub category_id: i64,
    pub status: Option<PetStatus>,
}

/// A client's change to a pet (`PATCH`, a JSON Merge Patch, RFC 7396): each member given
/// replaces the pet's, `status: null` removes the status, and members left out stay as they are.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PetPatch {
    pub name: Option<String>,
    pub category_id: Option<i64>,
    /// `Some(None)` removes the status.
    pub status: Option<Option<PetStatus>>,
}

/// Why a request body is not an acceptable `NewPet` or `PetPatch`, in words meant for the client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidPet(pub String);

impl fmt::Display for InvalidPet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl NewPet {
    /// Reads a request body. The rules: a JSON object; `name` a string; `categoryId` an integer
    /// within int64; `status` one of the three values or absent; `null` is never a value;
    /// unknown keys are ignored; a key given twice is refused.
    pub fn from_json(body: &[u8]) -> Result<NewPet, InvalidPet> {
        let members = Members::read(body, Nulls::Refused)?;
        match (members.name, members.category_id) {
            (None, _) => Err(InvalidPet("name is required".into())),
            (_, None) => Err(InvalidPet("categoryId is required".into())),
            (Some(name), Some(category_id)) => Ok(NewPet {
                name,
                category_id,
                status: members.status.flatten(),
            }),
        }
    }

    /// The pet this request becomes once the store has given it `id`.
    pub fn into_pet(self, id: PetId) -> Pet {
        Pet {
            id,
            name: self.name,
            category_id: self.category_id,
            status: self.status,
        }
    }

    /// The pet's members in one fixed encoding: two requests that would create the same pet,
    /// whatever their member order, spacing or unknown members, give the same bytes.
    pub fn canonical_json(&self) -> Vec<u8> {
        serde_json::to_vec(&(&self.name, self.category_id, self.status))
            .expect("a string, an integer and an enum always encode")
    }
}

impl PetPatch {
    /// Reads a merge-patch body with `NewPet`'s rules, except that every member is optional
    /// and `status` may be `null` (RFC 7396: null removes). `name` and `categoryId` cannot be
    /// removed, so `null` for them is refused with createPet's message.
    pub fn from_json(body: &[u8]) -> Result<PetPatch, InvalidPet> {
        let members = Members::read(body, Nulls::RemoveStatus)?;
        Ok(PetPatch {
            name: members.name,
            category_id: members.category_id,
            status: members.status,
        })
    }

    /// The pet with this patch applied.
    pub fn apply(self, pet: Pet) -> Pet {
        Pet {
            id: pet.id,
            name: self.name.unwrap_or(pet.name),
            category_id: self.category_id.unwrap_or(pet.category_id),
            status: self.status.unwrap_or(pet.status),
        }
    }
}

/// Whether a body may remove the status with `null`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Nulls {
    Refused,
    RemoveStatus,
}

/// The members of a pet body, each already checked against its rule.
struct Members {
    name: Option<String>,
    category_id: Option<i64>,
    status: Option<Option<PetStatus>>,
}

impl Members {
    fn read(body: &[u8], nulls: Nulls) -> Result<Members, InvalidPet> {
        if body.iter().all(u8::is_ascii_whitespace) {
            return Err(InvalidPet("request body is required: a JSON object".into()));
        }
        let mut deserializer = serde_json::Deserializer::from_slice(body);
        let read = (&mut deserializer)
            .deserialize_map(MembersVisitor { nulls })
            .and_then(|checked| deserializer.end().map(|()| checked));
        match read {
            Ok(Checked(result)) => result,
            Err(e) if e.is_data() => Err(InvalidPet("request body must be a JSON object".into())),
            Err(e) => Err(InvalidPet(format!("request body is not valid JSON: {e}"))),
        }
    }
}

/// The outcome of reading a JSON object's members. A broken rule is carried as the `Ok` value
/// so that its message stays ours (serde_json would append a position to it) and so that the
/// rest of the object is still read, keeping syntax errors distinct from rule errors.
struct Checked(Result<Members, InvalidPet>);

struct MembersVisitor {
    nulls: Nulls,
}

impl<'de> Visitor<'de> for MembersVisitor {
    type Value = Checked;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Checked, A::Error> {
        let mut members = Members {
            name: None,
            category_id: None,
            status: None,
        };
        let mut others = HashSet::new();
        let mut problem: Option<InvalidPet> = None;

        while let Some(key) = map.next_key::<String>()? {
            if problem.is_some() {
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            let seen = match key.as_str() {
                "name" => members.name.is_some(),
                "categoryId" => members.category_id.is_some(),
                "status" => members.status.is_some(),
                _ => !others.insert(key.clone()),
            };
            if seen {
                problem = Some(InvalidPet(format!("duplicate key {key:?}")));
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            let checked = match key.as_str() {
                "name" => read_name(map.next_value()?).map(|v| members.name = Some(v)),
                "categoryId" => {
                    read_category_id(map.next_value()?).map(|v| members.category_id = Some(v))
                }
                "status" => match map.next_value()? {
                    Value::Null if self.nulls == Nulls::RemoveStatus => {
                        members.status = Some(None);
                        Ok(())
                    }
                    value => read_status(value).map(|v| members.status = Some(Some(v))),
                },
                _ => map.next_value::<IgnoredAny>().map(|_| Ok(()))?,
            };
            problem = checked.err();
        }
        Ok(Checked(match problem {
            Some(problem) => Err(problem),
            None => Ok(members),
        }))
    }
}

fn read_name(value: Value) -> Result<String, InvalidPet> {
    match value {
        Value::String(name) => Ok(name),
        Value::Null => Err(InvalidPet("name must not be null".into())),
        _ => Err(InvalidPet("name must be a string".into())),
    }
}

fn read_category_id(value: Value) -> Result<i64, InvalidPet> {
    match value {
        // serde_json keeps an integer literal as i64 or u64; a fraction, an exponent or an
        // integer beyond u64 becomes f64, which is not an int64 whatever its value.
        Value::Number(n) => n.as_i64().ok_or_else(|| {
            InvalidPet(
                "categoryId must be an integer from -9223372036854775808 to 9223372036854775807"
                    .into(),
            )
        }),
        Value::Null => Err(InvalidPet("categoryId must not be null".into())),
        _ => Err(InvalidPet("categoryId must be an integer".into())),
    }
}

fn read_status(value: Value) -> Result<PetStatus, InvalidPet> {
    let invalid = || InvalidPet("status must be one of available, pending, sold".into());
    match value {
        Value::String(text) => PetStatus::parse(&text).ok_or_else(invalid),
        Value::Null => Err(InvalidPet("status must not be null".into())),
        _ => Err(invalid()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(body: &str) -> Result<NewPet, String> {
        NewPet::from_json(body.as_bytes()).map_err(|e| e.0)
    }

    #[test]
    fn a_full_new_pet_is_read() {
        assert_eq!(
            parse(r#"{"name":"Rex","categoryId":7,"status":"sold"}"#),
            Ok(NewPet {
                name: "Rex".into(),
                category_id: 7,
                status: Some(PetStatus::Sold)
            })
        );
    }

    #[test]
    fn status_is_optional_and_name_may_be_empty() {
        assert_eq!(
            parse(r#"{"name":"","categoryId":-3}"#),
            Ok(NewPet {
                name: String::new(),
                category_id: -3,
                status: None
            })
        );
    }

    #[test]
    fn unknown_keys_are_ignored_whatever_their_value() {
        let pet = parse(r#"{"id":99,"extra":{"a":[1,null]},"name":"a","categoryId":1}"#);
        assert_eq!(pet.map(|p| p.name), Ok("a".into()));
    }

    #[test]
    fn int64_bounds_are_accepted_and_beyond_is_refused() {
        assert_eq!(
            parse(r#"{"name":"a","categoryId":9223372036854775807}"#).map(|p| p.category_id),
            Ok(i64::MAX)
        );
        assert_eq!(
            parse(r#"{"name":"a","categoryId":-9223372036854775808}"#).map(|p| p.category_id),
            Ok(i64::MIN)
        );
        for n in [
            "9223372036854775808",
            "-9223372036854775809",
            "1.5",
            "1.0",
            "1e2",
            "100000000000000000000000",
        ] {
            let body = format!(r#"{{"name":"a","categoryId":{n}}}"#);
            assert_eq!(
                parse(&body),
                Err("categoryId must be an integer from -9223372036854775808 to 9223372036854775807".into()),
                "{n}"
            );
        }
    }

    #[test]
    fn each_broken_rule_has_its_own_message() {
        let cases = [
            (r#"{"categoryId":1}"#, "name is required"),
            (r#"{"name":"a"}"#, "categoryId is required"),
            (r#"{"name":null,"categoryId":1}"#, "name must not be null"),
            (r#"{"name":5,"categoryId":1}"#, "name must be a string"),
            (
                r#"{"name":"a","categoryId":"1"}"#,
                "categoryId must be an integer",
            ),
            (
                r#"{"name":"a","categoryId":null}"#,
                "categoryId must not be null",
            ),
            (
                r#"{"name":"a","categoryId":1,"status":"SOLD"}"#,
                "status must be one of available, pending, sold",
            ),
            (
                r#"{"name":"a","categoryId":1,"status":1}"#,
                "status must be one of available, pending, sold",
            ),
            (
                r#"{"name":"a","categoryId":1,"status":null}"#,
                "status must not be null",
            ),
            (
                r#"{"name":"a","name":"b","categoryId":1}"#,
                r#"duplicate key "name""#,
            ),
            (
                r#"{"x":1,"name":"a","x":2,"categoryId":1}"#,
                r#"duplicate key "x""#,
            ),
            (
                r#"[{"name":"a","categoryId":1}]"#,
                "request body must be a JSON object",
            ),
            (r#""name""#, "request body must be a JSON object"),
            ("", "request body is required: a JSON object"),
            ("  \n", "request body is required: a JSON object"),
        ];
        for (body, message) in cases {
            assert_eq!(parse(body), Err(message.to_string()), "{body}");
        }
    }

    #[test]
    fn broken_json_is_reported_as_such() {
        for body in [
            r#"{"name":"a","categoryId":1"#,
            r#"{"name":"a","categoryId":1} x"#,
            "{'name':1}",
            "\u{0}",
        ] {
            let message = parse(body).expect_err(body);
            assert!(
                message.starts_with("request body is not valid JSON: "),
                "{body}: {message}"
            );
        }
        let invalid_utf8 = NewPet::from_json(b"{\"name\":\"\xff\",\"categoryId\":1}");
        assert!(invalid_utf8.is_err());
    }

    #[test]
    fn a_pet_encodes_without_status_when_it_has_none() {
        let pet = NewPet {
            name: "Rex".into(),
            category_id: 2,
            status: None,
        }
        .into_pet(5);
        assert_eq!(pet.to_json(), br#"{"id":5,"name":"Rex","categoryId":2}"#);
        let sold = Pet {
            status: Some(PetStatus::Sold),
            ..pet
        };
        assert_eq!(
            sold.to_json(),
            br#"{"id":5,"name":"Rex","categoryId":2,"status":"sold"}"#
        );
    }

    #[test]
    fn a_patch_takes_each_member_alone_and_null_removes_only_the_status() {
        let patch = |body: &str| PetPatch::from_json(body.as_bytes()).map_err(|e| e.0);
        assert_eq!(patch("{}"), Ok(PetPatch::default()));
        assert_eq!(
            patch(r#"{"status":null,"id":4}"#),
            Ok(PetPatch {
                status: Some(None),
                ..PetPatch::default()
            })
        );
        assert_eq!(
            patch(r#"{"name":"Rex","categoryId":-1,"status":"pending"}"#),
            Ok(PetPatch {
                name: Some("Rex".into()),
                category_id: Some(-1),
                status: Some(Some(PetStatus::Pending)),
            })
        );
        for (body, message) in [
            (r#"{"name":null}"#, "name must not be null"),
            (r#"{"categoryId":null}"#, "categoryId must not be null"),
            (
                r#"{"categoryId":1.5}"#,
                "categoryId must be an integer from -9223372036854775808 to 9223372036854775807",
            ),
            (
                r#"{"status":"gone"}"#,
                "status must be one of available, pending, sold",
            ),
            (
                r#"{"status":null,"status":null}"#,
                r#"duplicate key "status""#,
            ),
            ("[]", "request body must be a JSON object"),
            ("null", "request body must be a JSON object"),
            ("", "request body is required: a JSON object"),
        ] {
            assert_eq!(patch(body), Err(message.to_string()), "{body}");
        }
    }

    #[test]
    fn a_patch_changes_only_what_it_names() {
        let pet = Pet {
            id: 3,
            name: "Rex".into(),
            category_id: 2,
            status: Some(PetStatus::Available),
        };
        let renamed = PetPatch {
            name: Some("Max".into()),
            ..PetPatch::default()
        }
        .apply(pet.clone());
        assert_eq!(
            renamed,
            Pet {
                name: "Max".into(),
                ..pet.clone()
            }
        );
        let unsold = PetPatch {
            status: Some(None),
            ..PetPatch::default()
        }
        .apply(pet.clone());
        assert_eq!(unsold.to_json(), br#"{"id":3,"name":"Rex","categoryId":2}"#);
        assert_eq!(Pet::from_json(&pet.to_json()).ok(), Some(pet));
    }

    #[test]
    fn the_canonical_form_ignores_member_order_spacing_and_unknown_members() {
        let a =
            NewPet::from_json(br#"{"name":"a","categoryId":1,"status":"sold"}"#).expect("valid");
        let b =
            NewPet::from_json(br#" { "status" : "sold", "x": [1], "categoryId":1, "name":"a" } "#)
                .expect("valid");
        assert_eq!(a.canonical_json(), b.canonical_json());
        let c = NewPet::from_json(br#"{"name":"a","categoryId":1}"#).expect("valid");
        assert_ne!(a.canonical_json(), c.canonical_json());
    }

    #[test]
    fn status_codes_are_distinct_and_stable() {
        let all = [PetStatus::Available, PetStatus::Pending, PetStatus::Sold];
        let codes: Vec<u8> = all.iter().map(|s| s.to_code()).collect();
        assert_eq!(codes, [0, 1, 2]);
    }

    // Property tests: any body is a NewPet or an `InvalidPet` (a 400), never a panic, and a
    // NewPet written by serde_json, unknown keys and all, reads back as itself.
    use proptest::prelude::*;

    fn status() -> impl Strategy<Value = Option<PetStatus>> {
        prop_oneof![
            Just(None),
            Just(Some(PetStatus::Available)),
            Just(Some(PetStatus::Pending)),
            Just(Some(PetStatus::Sold)),
        ]
    }

    fn new_pet() -> impl Strategy<Value = NewPet> {
        (any::<String>(), any::<i64>(), status()).prop_map(|(name, category_id, status)| NewPet {
            name,
            category_id,
            status,
        })
    }

    /// Any JSON value, nested a few levels, for the values of unknown keys.
    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            any::<String>().prop_map(Value::from),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
                prop::collection::btree_map(any::<String>(), inner, 0..4)
                    .prop_map(|map| Value::Object(map.into_iter().collect())),
            ]
        })
    }

    /// Up to four keys a NewPet does not have, each with a value.
    fn unknown_keys() -> impl Strategy<Value = Vec<(String, Value)>> {
        prop::collection::btree_map(any::<String>(), json_value(), 0..4).prop_map(|map| {
            map.into_iter()
                .filter(|(key, _)| !matches!(key.as_str(), "name" | "categoryId" | "status"))
                .collect()
        })
    }

    /// The pet's own keys and the unknown ones, in the order given, as one JSON object.
    fn object(members: &[(String, Value)]) -> String {
        let members: Vec<String> = members
            .iter()
            .map(|(key, value)| {
                let key = serde_json::to_string(key).expect("a string encodes");
                let value = serde_json::to_string(value).expect("a JSON value encodes");
                format!("{key}:{value}")
            })
            .collect();
        format!("{{{}}}", members.join(","))
    }

    fn members(pet: &NewPet) -> Vec<(String, Value)> {
        let mut members = vec![
            ("name".to_owned(), Value::from(pet.name.clone())),
            ("categoryId".to_owned(), Value::from(pet.category_id)),
        ];
        if let Some(status) = pet.status {
            let status = serde_json::to_value(status).expect("a status encodes");
            members.push(("status".to_owned(), status));
        }
        members
    }

    proptest! {
        #[test]
        fn any_bytes_are_a_new_pet_or_invalid_without_panicking(
            body in prop_oneof![
                prop::collection::vec(any::<u8>(), 0..256),
                "[{}\\[\\]\":, 0-9a-zA-Z.eE+-]{0,64}".prop_map(String::into_bytes),
            ],
        ) {
            let _ = NewPet::from_json(&body);
        }

        #[test]
        fn any_json_value_is_a_new_pet_or_invalid_without_panicking(value in json_value()) {
            let body = serde_json::to_vec(&value).expect("a JSON value encodes");
            let _ = NewPet::from_json(&body);
        }

        #[test]
        fn a_new_pet_written_with_unknown_keys_in_any_order_reads_back_as_itself(
            (pet, body) in (new_pet(), unknown_keys()).prop_flat_map(|(pet, unknown)| {
                let mut all = members(&pet);
                all.extend(unknown);
                (Just(pet), Just(all).prop_shuffle().prop_map(|all| object(&all)))
            }),
        ) {
            prop_assert_eq!(NewPet::from_json(body.as_bytes()), Ok(pet), "{}", body);
        }

        #[test]
        fn a_stored_pet_encodes_exactly_its_fields_and_reads_back_as_its_new_pet(
            pet in new_pet(),
            id in any::<PetId>(),
        ) {
            let json = pet.clone().into_pet(id).to_json();
            let value: Value = serde_json::from_slice(&json).expect("a pet is JSON");
            let mut expected = serde_json::Map::new();
            expected.insert("id".into(), Value::from(id));
            expected.extend(members(&pet));
            prop_assert_eq!(value, Value::Object(expected));
            // The id is an unknown key to a NewPet, so the stored bytes are a valid request too.
            prop_assert_eq!(NewPet::from_json(&json), Ok(pet));
        }
    }
}
