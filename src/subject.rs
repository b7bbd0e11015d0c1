//! What a record is, whatever its resource: its kind and its id (`Subject`), the one
//! vocabulary that the store's not-found answers, the event feed and entity tags share, so a
//! new resource is a new `Kind` rather than another set of pet-shaped fields. Pure.

use std::fmt;

/// The kinds of record the store keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    Pet,
    Order,
    Category,
}

impl Kind {
    /// The kind as the API's messages name it.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Pet => "pet",
            Kind::Order => "order",
            Kind::Category => "category",
        }
    }

    /// Records of the kind, as a count names them.
    pub fn plural(self) -> &'static str {
        match self {
            Kind::Pet => "pets",
            Kind::Order => "orders",
            Kind::Category => "categories",
        }
    }
}

/// One record: its kind and its id (ids are per kind: pet 7 and order 7 are two records).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Subject {
    pub kind: Kind,
    pub id: i64,
}

impl Subject {
    pub fn pet(id: i64) -> Subject {
        Subject {
            kind: Kind::Pet,
            id,
        }
    }

    pub fn order(id: i64) -> Subject {
        Subject {
            kind: Kind::Order,
            id,
        }
    }

    pub fn category(id: i64) -> Subject {
        Subject {
            kind: Kind::Category,
            id,
        }
    }
}

impl fmt::Display for Subject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.kind.name(), self.id)
    }
}

/// The strong entity tag of record `id` at `revision`, quoted, as the `ETag` header carries
/// it: the same shape for every kind, since a tag is only compared with tags of its own
/// record.
pub fn etag(id: i64, revision: u64) -> String {
    // Every answer with a pet carries one: built without `core::fmt`, which cost it a
    // thousand instructions (callgrind), and exactly as long as its capacity, so that a
    // `HeaderValue` made from it keeps the buffer as it is (`bytes` gives a buffer with spare
    // room a second allocation to track it).
    let (mut id_digits, mut revision_digits) = (itoa::Buffer::new(), itoa::Buffer::new());
    let (id, revision) = (id_digits.format(id), revision_digits.format(revision));
    let mut tag = String::with_capacity(id.len() + revision.len() + 3);
    tag.push('"');
    tag.push_str(id);
    tag.push('.');
    tag.push_str(revision);
    tag.push('"');
    tag
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subject_reads_as_its_kind_and_id_and_its_tag_as_id_dot_revision() {
        assert_eq!(Subject::category(5).to_string(), "category 5");
        assert_eq!(etag(7, 3), "\"7.3\"");
        assert_eq!(
            etag(i64::MAX, u64::MAX).len(),
            etag(i64::MAX, u64::MAX).capacity()
        );
    }
}
