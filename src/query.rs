//! Input parsing for the operations: listPets's query string, getPet's path id and the media
//! type of a request body. Pure functions over text, no HTTP types and no I/O, so property
//! tests and the fuzz target can drive them alone. A rule broken here is an
//! `InvalidParameter` sentence naming the parameter.

use std::borrow::Cow;
use std::fmt;

use crate::pet::{PetId, PetStatus};

/// spec 4.1: limit defaults to 20 and ranges over 1..=100.
const DEFAULT_LIMIT: usize = 20;
const MAX_LIMIT: usize = 100;

/// Why a query or path parameter is refused, in words meant for the client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidParameter(pub String);

impl fmt::Display for InvalidParameter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// listPets's query after its rules: limit 1..=100 (default 20) and an optional status.
#[derive(Debug, PartialEq, Eq)]
pub struct ListQuery {
    pub limit: usize,
    pub status: Option<PetStatus>,
}

impl ListQuery {
    pub fn parse(query: &str) -> Result<ListQuery, InvalidParameter> {
        let mut limit = None;
        let mut status = None;
        for pair in query.split('&').filter(|pair| !pair.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            match &*decode_component(name) {
                "limit" => set_once(&mut limit, "limit", parse_limit(&decode_component(value)))?,
                "status" => set_once(
                    &mut status,
                    "status",
                    parse_status(&decode_component(value)),
                )?,
                // Decision: unknown parameters are ignored, so clients can add tracing tags.
                _ => {}
            }
        }
        Ok(ListQuery {
            limit: limit.unwrap_or(DEFAULT_LIMIT),
            status,
        })
    }
}

fn set_once<T>(
    slot: &mut Option<T>,
    name: &str,
    value: Result<T, InvalidParameter>,
) -> Result<(), InvalidParameter> {
    if slot.is_some() {
        return Err(InvalidParameter(format!(
            "{name} must be given at most once"
        )));
    }
    *slot = Some(value?);
    Ok(())
}

fn parse_limit(text: &str) -> Result<usize, InvalidParameter> {
    let invalid = || InvalidParameter(format!("limit must be an integer from 1 to {MAX_LIMIT}"));
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid());
    }
    text.parse::<usize>()
        .ok()
        .filter(|n| (1..=MAX_LIMIT).contains(n))
        .ok_or_else(invalid)
}

fn parse_status(text: &str) -> Result<PetStatus, InvalidParameter> {
    PetStatus::parse(text)
        .ok_or_else(|| InvalidParameter("status must be one of available, pending, sold".into()))
}

/// A decimal int64: an optional minus and digits, nothing else (no `+`, spaces or escapes).
pub fn parse_pet_id(text: &str) -> Result<PetId, InvalidParameter> {
    let digits = text.strip_prefix('-').unwrap_or(text);
    let invalid = || InvalidParameter("petId must be a decimal integer within int64".into());
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid());
    }
    text.parse().map_err(|_| invalid())
}

/// Form-style decoding of a query component: `+` is a space and `%XX` a byte. As in the
/// WHATWG URL standard, a `%` not followed by two hex digits stays as it is.
pub fn decode_component(text: &str) -> Cow<'_, str> {
    if !text.bytes().any(|b| b == b'%' || b == b'+') {
        return Cow::Borrowed(text);
    }
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| char::from(b).to_digit(16);
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(high), Some(low)) => {
                    out.push((high * 16 + low) as u8);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    Cow::Owned(String::from_utf8_lossy(&out).into_owned())
}

/// RFC 8259 JSON is `application/json`; parameters are allowed, but a charset other than
/// UTF-8 is not JSON.
pub fn is_json(content_type: Option<&str>) -> bool {
    let Some(value) = content_type else {
        return false;
    };
    let mut parts = value.split(';');
    let essence = parts.next().unwrap_or_default().trim();
    essence.eq_ignore_ascii_case("application/json")
        && parts.all(|param| match param.split_once('=') {
            Some((name, value)) if name.trim().eq_ignore_ascii_case("charset") => {
                value.trim().trim_matches('"').eq_ignore_ascii_case("utf-8")
            }
            _ => true,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(result: Result<ListQuery, InvalidParameter>) -> String {
        result.expect_err("an invalid query").0
    }

    #[test]
    fn limit_defaults_to_20_and_accepts_1_to_100() {
        assert_eq!(
            ListQuery::parse("").ok(),
            Some(ListQuery {
                limit: 20,
                status: None
            })
        );
        for (query, limit) in [
            ("limit=1", 1),
            ("limit=100", 100),
            ("limit=007", 7),
            ("limit=%35%30", 50),
            ("x=1&limit=3&&", 3),
        ] {
            assert_eq!(
                ListQuery::parse(query).map(|q| q.limit).ok(),
                Some(limit),
                "{query}"
            );
        }
    }

    #[test]
    fn a_bad_or_repeated_limit_names_the_parameter() {
        for query in [
            "limit=0",
            "limit=101",
            "limit=-1",
            "limit=+5",
            "limit=1.5",
            "limit=",
            "limit",
            "limit=abc",
            "limit=99999999999999999999999",
            "limit=%ZZ",
        ] {
            assert_eq!(
                message(ListQuery::parse(query)),
                "limit must be an integer from 1 to 100",
                "{query}"
            );
        }
        assert_eq!(
            message(ListQuery::parse("limit=1&limit=1")),
            "limit must be given at most once"
        );
    }

    #[test]
    fn status_must_be_one_of_the_three_values_once() {
        assert_eq!(
            ListQuery::parse("status=sold").map(|q| q.status).ok(),
            Some(Some(PetStatus::Sold))
        );
        for query in ["status=SOLD", "status=", "status=gone", "status=sold+"] {
            assert_eq!(
                message(ListQuery::parse(query)),
                "status must be one of available, pending, sold",
                "{query}"
            );
        }
        assert_eq!(
            message(ListQuery::parse("status=sold&status=sold")),
            "status must be given at most once"
        );
    }

    #[test]
    fn pet_ids_are_decimal_int64() {
        assert_eq!(parse_pet_id("42").ok(), Some(42));
        assert_eq!(parse_pet_id("-9223372036854775808").ok(), Some(i64::MIN));
        for text in [
            "",
            "-",
            "+1",
            "1a",
            "abc",
            "9223372036854775808",
            " 1",
            "%31",
            "1.0",
        ] {
            assert!(parse_pet_id(text).is_err(), "{text}");
        }
    }

    #[test]
    fn percent_decoding_is_lenient_about_stray_percent_signs() {
        assert_eq!(decode_component("a%20b+c"), "a b c");
        assert_eq!(decode_component("100%"), "100%");
        assert_eq!(decode_component("%4"), "%4");
        assert_eq!(decode_component("%zz"), "%zz");
        assert_eq!(decode_component("%e2%82%ac"), "\u{20ac}");
    }

    #[test]
    fn only_json_media_types_are_accepted() {
        let check = |value: &str| is_json(Some(value));
        for ok in [
            "application/json",
            "Application/JSON",
            "application/json; charset=utf-8",
            "application/json;charset=\"UTF-8\"",
        ] {
            assert!(check(ok), "{ok}");
        }
        for bad in [
            "text/plain",
            "application/jsonx",
            "application/json; charset=latin1",
            "multipart/form-data",
            "",
        ] {
            assert!(!check(bad), "{bad}");
        }
        assert!(!is_json(None));
    }
}
