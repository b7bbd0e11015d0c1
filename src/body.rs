//! The members of a JSON object a client sent, read strictly for the resources that take no
//! unknown member (orders, categories): every member once, in order, each left for its
//! resource to check. Pure: bytes in, values or a sentence out.

use std::collections::HashSet;

use serde_json::Value;

/// Reads a request body as a JSON object's members; the error is a sentence for the client.
pub fn members(body: &[u8]) -> Result<Vec<(String, Value)>, String> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err("request body is required: a JSON object".into());
    }
    // A map of raw values keeps duplicates out of sight: read pairs, then look for them.
    let pairs: Pairs = serde_json::from_slice(body).map_err(|e| {
        if e.is_data() {
            "request body must be a JSON object".to_owned()
        } else {
            format!("request body is not valid JSON: {e}")
        }
    })?;
    let mut seen = HashSet::new();
    for (name, _) in &pairs.0 {
        if !seen.insert(name.as_str()) {
            return Err(format!("duplicate key {name:?}"));
        }
    }
    Ok(pairs.0)
}

/// An object's members in the order sent, duplicates included.
struct Pairs(Vec<(String, Value)>);

impl<'de> serde::Deserialize<'de> for Pairs {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Pairs, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Pairs;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Pairs, A::Error> {
                let mut pairs = Vec::new();
                while let Some(pair) = map.next_entry::<String, Value>()? {
                    pairs.push(pair);
                }
                Ok(Pairs(pairs))
            }
        }
        deserializer.deserialize_map(Visit)
    }
}

/// An integer member within int64, or the sentence saying what `name` must be.
pub fn int64(name: &str, value: &Value) -> Result<i64, String> {
    match value {
        Value::Number(n) => n.as_i64().ok_or_else(|| {
            format!("{name} must be an integer from -9223372036854775808 to 9223372036854775807")
        }),
        Value::Null => Err(format!("{name} must not be null")),
        _ => Err(format!("{name} must be an integer")),
    }
}

/// A string member of at most `max` characters, or the sentence saying what `name` must be.
pub fn text(name: &str, value: Value, max: usize) -> Result<String, String> {
    match value {
        Value::String(text) if text.chars().count() > max => {
            Err(format!("{name} must be at most {max} characters long"))
        }
        Value::String(text) => Ok(text),
        Value::Null => Err(format!("{name} must not be null")),
        _ => Err(format!("{name} must be a string")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_object_s_members_come_in_order_and_a_duplicate_or_a_non_object_is_refused() {
        let read = members(br#"{"b":1,"a":"x"}"#).expect("an object");
        assert_eq!(read[0].0, "b");
        assert_eq!(read[1].1, Value::from("x"));
        assert_eq!(
            members(br#"{"a":1,"a":2}"#).expect_err("dup"),
            "duplicate key \"a\""
        );
        assert_eq!(
            members(b"[1]").expect_err("array"),
            "request body must be a JSON object"
        );
        assert!(
            members(b"{")
                .expect_err("broken")
                .starts_with("request body is not valid JSON")
        );
        assert_eq!(
            members(b"  ").expect_err("empty"),
            "request body is required: a JSON object"
        );
    }

    #[test]
    fn int64_and_text_check_their_rule() {
        assert_eq!(int64("n", &Value::from(-3)), Ok(-3));
        assert!(int64("n", &serde_json::json!(1.5)).is_err());
        assert!(int64("n", &serde_json::json!(u64::MAX)).is_err());
        assert_eq!(int64("n", &Value::Null), Err("n must not be null".into()));
        assert_eq!(text("t", Value::from("héé"), 3), Ok("héé".into()));
        assert!(text("t", Value::from("abcd"), 3).is_err());
        assert_eq!(
            text("t", Value::from(1), 3),
            Err("t must be a string".into())
        );
    }
}
