//! Entity tags of a pet and the conditional headers that compare with them (RFC 9110 8.8.3,
//! 13.1): the `ETag` a pet's answers carry, what `If-Match` asks of the pet's revision, and
//! whether `If-None-Match` matches. Pure: header bytes in, facts out; the store checks the
//! revision inside its transaction. Invariant: a tag names one pet at one revision, so it
//! changes with every change of the pet and never matches another pet.

use crate::pet::PetId;

pub use crate::subject::etag;

/// What `If-Match` asks of the pet `id`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IfMatch {
    /// No `If-Match`, or `*`: the pet only has to exist.
    Any,
    /// One of these revisions of the pet. Tags of other pets, weak tags and a malformed value
    /// match no revision, so an empty list never matches (RFC 9110 13.1.1: strong comparison).
    Revisions(Vec<u64>),
}

/// Reads every `If-Match` field line sent (RFC 9110 5.3: lines of a list field combine).
pub fn if_match<'a>(values: impl Iterator<Item = &'a [u8]>, id: PetId) -> IfMatch {
    let mut revisions = Vec::new();
    let mut any_line = false;
    for value in values {
        any_line = true;
        match parse_tags(value) {
            Some(Tags::Any) => return IfMatch::Any,
            Some(Tags::List(tags)) => revisions.extend(
                tags.into_iter()
                    .filter(|tag| !tag.weak)
                    .filter_map(|tag| revision_of(tag.opaque, id)),
            ),
            None => {}
        }
    }
    if any_line {
        IfMatch::Revisions(revisions)
    } else {
        IfMatch::Any
    }
}

/// Whether `If-None-Match` matches pet `id` at `revision` (weak comparison, RFC 9110 13.1.2):
/// then a GET answers 304. A malformed value matches nothing.
pub fn none_match<'a>(values: impl Iterator<Item = &'a [u8]>, id: PetId, revision: u64) -> bool {
    values.filter_map(parse_tags).any(|tags| match tags {
        Tags::Any => true,
        Tags::List(tags) => tags
            .iter()
            .any(|tag| revision_of(tag.opaque, id) == Some(revision)),
    })
}

/// The revision in one of our tags' opaque part (`ID.REVISION`), if it is pet `id`'s.
fn revision_of(opaque: &[u8], id: PetId) -> Option<u64> {
    let text = std::str::from_utf8(opaque).ok()?;
    let (tag_id, revision) = text.split_once('.')?;
    let all_digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let id_digits = tag_id.strip_prefix('-').unwrap_or(tag_id);
    if !all_digits(id_digits) || !all_digits(revision) || tag_id.parse::<PetId>().ok()? != id {
        return None;
    }
    revision.parse().ok()
}

/// One `If-Match` or `If-None-Match` field line.
enum Tags<'a> {
    Any,
    List(Vec<Tag<'a>>),
}

struct Tag<'a> {
    weak: bool,
    opaque: &'a [u8],
}

/// `*` or a comma-separated list of entity tags (RFC 9110 8.8.3: `[W/]"etagc*"`); `None` for
/// anything else.
fn parse_tags(value: &[u8]) -> Option<Tags<'_>> {
    let value = value.trim_ascii();
    if value == b"*" {
        return Some(Tags::Any);
    }
    let mut tags = Vec::new();
    let mut rest = value;
    loop {
        rest = rest.trim_ascii_start();
        if let Some(after) = rest.strip_prefix(b",") {
            rest = after;
            continue;
        }
        if rest.is_empty() {
            break;
        }
        let (weak, quoted) = match rest.strip_prefix(b"W/") {
            Some(quoted) => (true, quoted),
            None => (false, rest),
        };
        let inner = quoted.strip_prefix(b"\"")?;
        let end = inner.iter().position(|&b| b == b'"')?;
        let opaque = &inner[..end];
        // etagc: %x21 / %x23-7E / obs-text; no spaces, controls or quotes.
        if !opaque.iter().all(|&b| b == 0x21 || b >= 0x23 && b != 0x7f) {
            return None;
        }
        tags.push(Tag { weak, opaque });
        rest = inner[end + 1..].trim_ascii_start();
        match rest.first() {
            None => break,
            Some(b',') => {}
            Some(_) => return None,
        }
    }
    if tags.is_empty() {
        return None;
    }
    Some(Tags::List(tags))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn lines(values: &[&'static str]) -> impl Iterator<Item = &'static [u8]> {
        values.iter().map(|v| v.as_bytes())
    }

    #[test]
    fn a_tag_is_quoted_id_and_revision() {
        assert_eq!(etag(7, 3), "\"7.3\"");
        assert_eq!(etag(-2, 1), "\"-2.1\"");
        for tag in [etag(7, 3), etag(i64::MIN, u64::MAX)] {
            assert_eq!(tag.len(), tag.capacity(), "{tag}: no spare room");
        }
    }

    #[test]
    fn if_match_takes_strong_tags_of_this_pet_from_every_line() {
        assert_eq!(if_match(lines(&[]), 7), IfMatch::Any);
        assert_eq!(if_match(lines(&["*"]), 7), IfMatch::Any);
        assert_eq!(
            if_match(lines(&[r#""7.3", "8.4""#, r#"W/"7.5",  "7.6""#]), 7),
            IfMatch::Revisions(vec![3, 6])
        );
        for never in [
            "",
            "7.3",
            r#""7.3"#,
            r#""7.3" x"#,
            r#""7 .3""#,
            r#""07x.3""#,
            r#""7.""#,
            r#"W/"7.3""#,
            r#""8.3""#,
        ] {
            assert_eq!(
                if_match(lines(&[never]), 7),
                IfMatch::Revisions(vec![]),
                "{never}"
            );
        }
    }

    #[test]
    fn if_none_match_compares_weakly() {
        assert!(none_match(lines(&[r#"W/"7.3""#]), 7, 3));
        assert!(none_match(lines(&[r#""1.1", "7.3""#]), 7, 3));
        assert!(none_match(lines(&["*"]), 7, 3));
        assert!(!none_match(lines(&[r#""7.2""#]), 7, 3));
        assert!(!none_match(lines(&["garbage"]), 7, 3));
        assert!(!none_match(lines(&[]), 7, 3));
    }

    proptest! {
        #[test]
        fn any_header_value_is_read_without_panicking(value in any::<Vec<u8>>(), id in any::<i64>()) {
            let _ = if_match(std::iter::once(value.as_slice()), id);
            let _ = none_match(std::iter::once(value.as_slice()), id, 1);
        }

        #[test]
        fn a_pet_s_own_tag_matches_it_and_only_at_its_revision(id in any::<i64>(), revision in any::<u64>()) {
            let tag = etag(id, revision);
            prop_assert_eq!(if_match(std::iter::once(tag.as_bytes()), id), IfMatch::Revisions(vec![revision]));
            prop_assert!(none_match(std::iter::once(tag.as_bytes()), id, revision));
            prop_assert!(!none_match(std::iter::once(tag.as_bytes()), id, revision.wrapping_add(1)));
            prop_assert!(!none_match(std::iter::once(tag.as_bytes()), id.wrapping_add(1), revision));
        }
    }
}
