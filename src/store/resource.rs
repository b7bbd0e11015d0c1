//! What each kind of record declares once (`Resource`), for every part of the store that
//! walks records without knowing their rules: its table, its stored form, and the entries it
//! keeps in its indexes (`Index`, `Entry`). The redb engine keeps every declared index from
//! this alone (its writer, the rebuild at open, `petstore check`, `copy`, backups), and a new
//! index or a new resource adds a declaration, not code in the engine. The declarations sit
//! with each resource's rules (`store/ops/`), whose `each_resource` is the one list of them.
//! An entry's key is ordered parts; `Key` is their
//! encoding as bytes that compare as the parts do. Invariant: every declared index holds
//! exactly the entries its records declare.

use std::borrow::Cow;
use std::fmt::Write as _;

use crate::store::model::{Rows, StoreError};
use crate::subject::Kind;

/// One part of an index key, in the order keys compare.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Part<'a> {
    Int(i64),
    /// A time in Unix seconds or milliseconds.
    Time(u64),
    /// A small code (a status), named in words by its index's `PartKind::Code`.
    Code(u8),
    /// Text; owned only when read back from a key that escaped a 0 byte in it.
    Text(Cow<'a, str>),
}

/// What a part of an index's keys is, to read keys back and name them in words.
#[derive(Clone, Copy, Debug)]
pub(crate) enum PartKind {
    Int,
    Time,
    /// A code and its name, if it has one.
    Code(fn(u8) -> Option<&'static str>),
    Text,
}

/// What an index keeps under each key beside the key itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Holds {
    /// Nothing: the key says it all.
    Nothing,
    /// The record's stored form: a covering index, read without the record's table.
    Stored,
    /// A code (a status) of the record.
    Code,
}

/// An index a resource keeps, declared once.
#[derive(Debug)]
pub(crate) struct Index {
    /// Its table in the redb file.
    pub(crate) name: &'static str,
    /// The index in a problem's words.
    pub(crate) words: &'static str,
    /// Its key's parts; a key of an index that is not `unique` ends with its record's id.
    pub(crate) parts: &'static [PartKind],
    /// Each key names one record, whose id is the value (a name that must be unique); else
    /// many records share the key's parts and the id ends the key.
    pub(crate) unique: bool,
    pub(crate) holds: Holds,
}

impl PartialEq for Index {
    fn eq(&self, other: &Index) -> bool {
        self.name == other.name
    }
}

impl Eq for Index {}

/// What an entry keeps beside its key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Value<'a> {
    Nothing,
    Stored(&'a [u8]),
    Code(u8),
}

/// One entry of a record in one of its indexes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Entry<'a> {
    pub(crate) index: &'static Index,
    /// The whole key, as `Key` encodes it (the owner's id included where the index is not
    /// unique).
    pub(crate) key: Vec<u8>,
    /// The id of the record the entry is of.
    pub(crate) owner: i64,
    pub(crate) value: Value<'a>,
}

impl Index {
    /// The entry of record `owner` under `parts` (as many as the index declares), keeping
    /// `value`.
    pub(crate) fn entry<'a>(
        &'static self,
        owner: i64,
        parts: &[Part],
        value: Value<'a>,
    ) -> Entry<'a> {
        let mut key = Key::default();
        for part in parts {
            key.push(part);
        }
        if !self.unique {
            key.push(&Part::Int(owner));
        }
        Entry {
            index: self,
            key: key.0,
            owner,
            value,
        }
    }

    /// The bytes every key starting with `parts` starts with.
    pub(crate) fn prefix(&self, parts: &[Part]) -> Vec<u8> {
        let mut key = Key::default();
        for part in parts {
            key.push(part);
        }
        key.0
    }

    /// The entry kept under `key` with `value`, read back; `None`: the bytes are no key or
    /// value of this index.
    pub(crate) fn read<'a>(&'static self, key: &[u8], value: &'a [u8]) -> Option<Entry<'a>> {
        let mut rest = key;
        for kind in self.parts {
            Key::take(&mut rest, *kind)?;
        }
        let owner = if self.unique {
            if !rest.is_empty() {
                return None;
            }
            i64_of(value)?
        } else {
            let Part::Int(owner) = Key::take(&mut rest, PartKind::Int)? else {
                return None;
            };
            if !rest.is_empty() {
                return None;
            }
            owner
        };
        let value = match self.holds {
            _ if self.unique => Value::Nothing,
            Holds::Nothing if value.is_empty() => Value::Nothing,
            Holds::Stored => Value::Stored(value),
            Holds::Code if value.len() == 1 => Value::Code(value[0]),
            _ => return None,
        };
        Some(Entry {
            index: self,
            key: key.to_vec(),
            owner,
            value,
        })
    }
}

impl Entry<'_> {
    /// The value as the index keeps it: the owner's id for a unique index.
    pub(crate) fn value_bytes(&self) -> Cow<'_, [u8]> {
        if self.index.unique {
            return Cow::Owned(Key::int(self.owner).to_vec());
        }
        match self.value {
            Value::Nothing => Cow::Borrowed(&[]),
            // A pet's JSON, as it is: no copy on the path of every create.
            Value::Stored(stored) => Cow::Borrowed(stored),
            Value::Code(code) => Cow::Owned(vec![code]),
        }
    }

    /// Whether `other` is kept under the same key of the same index, whatever its value.
    pub(crate) fn same_key(&self, other: &Entry) -> bool {
        self.index == other.index && self.key == other.key
    }

    /// The key in a problem's words: its parts, the id too where it ends the key.
    pub(crate) fn key_text(&self) -> String {
        self.words(!self.index.unique)
    }

    /// What the entry says of its record, in a problem's words: its key's parts.
    pub(crate) fn filed_as(&self) -> String {
        self.words(false)
    }

    fn words(&self, with_owner: bool) -> String {
        let mut rest = self.key.as_slice();
        let mut words = String::new();
        let kinds = self.index.parts.iter().copied();
        let kinds = kinds.chain(with_owner.then_some(PartKind::Int));
        for (n, kind) in kinds.enumerate() {
            if n > 0 {
                words.push_str(", ");
            }
            let _ = match Key::take(&mut rest, kind) {
                Some(Part::Int(n)) => write!(words, "{n}"),
                Some(Part::Time(n)) => write!(words, "{n}"),
                Some(Part::Code(code)) => match kind {
                    PartKind::Code(name) => match name(code) {
                        Some(name) => write!(words, "{name}"),
                        None => write!(words, "{code}"),
                    },
                    _ => write!(words, "{code}"),
                },
                Some(Part::Text(text)) => write!(words, "{text:?}"),
                None => write!(words, "?"),
            };
        }
        words
    }
}

/// An index key being encoded: each part so that bytes compare as the parts do (integers
/// big-endian, signed ones with the sign bit flipped; text with each 0 byte escaped and a
/// two-byte end that sorts below any continuation).
#[derive(Default)]
struct Key(Vec<u8>);

impl Key {
    fn int(n: i64) -> [u8; 8] {
        ((n as u64) ^ (1 << 63)).to_be_bytes()
    }

    fn push(&mut self, part: &Part) {
        match part {
            Part::Int(n) => self.0.extend_from_slice(&Key::int(*n)),
            Part::Time(n) => self.0.extend_from_slice(&n.to_be_bytes()),
            Part::Code(code) => self.0.push(*code),
            Part::Text(text) => {
                for &byte in text.as_bytes() {
                    self.0.push(byte);
                    if byte == 0 {
                        self.0.push(0xFF);
                    }
                }
                self.0.extend_from_slice(&[0, 0]);
            }
        }
    }

    /// The part of `kind` at the start of `rest`, taken off it.
    fn take<'k>(rest: &mut &'k [u8], kind: PartKind) -> Option<Part<'k>> {
        let fixed = |rest: &mut &'k [u8], n: usize| {
            let (head, tail) = rest.split_at_checked(n)?;
            *rest = tail;
            Some(head)
        };
        Some(match kind {
            PartKind::Int => Part::Int(i64_of(fixed(rest, 8)?)?),
            PartKind::Time => Part::Time(u64::from_be_bytes(fixed(rest, 8)?.try_into().ok()?)),
            PartKind::Code(_) => Part::Code(fixed(rest, 1)?[0]),
            PartKind::Text => {
                // A 0 byte is followed by 0xFF where the text had a 0, by 0 where it ends.
                let (mut end, mut escaped) = (0, false);
                loop {
                    end += rest.get(end..)?.iter().position(|&byte| byte == 0)?;
                    match rest.get(end + 1)? {
                        0 => break,
                        0xFF => (escaped, end) = (true, end + 2),
                        _ => return None,
                    }
                }
                let raw = &rest[..end];
                *rest = &rest[end + 2..];
                Part::Text(if escaped {
                    let mut text = Vec::with_capacity(raw.len());
                    let mut bytes = raw.iter();
                    while let Some(&byte) = bytes.next() {
                        text.push(byte);
                        if byte == 0 {
                            bytes.next();
                        }
                    }
                    Cow::Owned(String::from_utf8(text).ok()?)
                } else {
                    Cow::Borrowed(std::str::from_utf8(raw).ok()?)
                })
            }
        })
    }
}

/// The id kept as `Key::int` encodes it.
fn i64_of(bytes: &[u8]) -> Option<i64> {
    let bytes: [u8; 8] = bytes.try_into().ok()?;
    Some((u64::from_be_bytes(bytes) ^ (1 << 63)) as i64)
}

/// The first key of `index` after every key of record ids up to `after` under `prefix`
/// (`Index::prefix`), and the last key under it: a page's range in a non-unique index.
pub(crate) fn id_range(prefix: &[u8], after: i64) -> (Vec<u8>, Vec<u8>) {
    let mut first = prefix.to_vec();
    first.extend_from_slice(&Key::int(after));
    let mut last = prefix.to_vec();
    last.extend_from_slice(&Key::int(i64::MAX));
    (first, last)
}

/// An id as the last part of a key encodes it: the rest of a key in id order.
pub(crate) fn id_key(id: i64) -> [u8; 8] {
    Key::int(id)
}

/// The text that starts `bytes`, as a `Part::Text` encodes it.
pub(crate) fn text_at_start(bytes: &[u8]) -> Option<Cow<'_, str>> {
    let mut rest = bytes;
    match Key::take(&mut rest, PartKind::Text)? {
        Part::Text(text) => Some(text),
        _ => None,
    }
}

/// The record id that ends `key`, a key of a non-unique index.
pub(crate) fn owner_of(key: &[u8]) -> Result<i64, StoreError> {
    key.len()
        .checked_sub(8)
        .and_then(|start| i64_of(&key[start..]))
        .ok_or_else(|| StoreError::Corrupt("an index key is shorter than an id".into()))
}

/// A value of one of a record's PostgreSQL columns (`Resource::columns`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Column {
    /// A `bigint`, or NULL.
    Int(Option<i64>),
    /// A `smallint` (a status code), or NULL.
    Code(Option<i16>),
    Text(String),
}

/// How a resource sits in PostgreSQL: a real table named `Resource::TABLE`, which the shop's
/// other tools can query with SQL, its columns beside `id` filled from the record (for its
/// indexes, which are PostgreSQL's own), and the migrations that made it.
#[derive(Debug)]
pub(crate) struct Postgres {
    /// The columns beside `id`, in the order `Resource::columns` fills them.
    pub(crate) columns: &'static [&'static str],
    /// The SQL expression, on a row of the table, of the stored form (`Resource::decode`)
    /// as text.
    pub(crate) stored: &'static str,
    /// What each schema version did to the table, as SQL run in the migration's transaction,
    /// oldest first (`postgres/schema.rs` runs them in version order with its own).
    pub(crate) migrations: &'static [(i64, &'static str)],
}

/// An id counter a transaction gives ids from, declared by its resource
/// (`Resource::COUNTER`). Both engines keep each under its `key` (a key of redb's `meta`, a
/// row of PostgreSQL's `petstore_meta`); `ops::COUNTERS` lists them in the order PostgreSQL
/// locks them in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Counter {
    key: &'static str,
}

impl Counter {
    pub(crate) const fn named(key: &'static str) -> Counter {
        Counter { key }
    }

    /// The name it is kept under.
    pub(crate) const fn key(self) -> &'static str {
        self.key
    }
}

/// The id each counter gives next (1 where none was given yet), as an export reads them and
/// an import sets them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NextIds(pub(crate) Vec<(Counter, u64)>);

impl NextIds {
    /// Every counter at 1: a store that gave no id yet.
    pub(crate) fn untouched() -> NextIds {
        NextIds(Vec::new())
    }

    /// The id `counter` gives next.
    pub(crate) fn of(&self, counter: Counter) -> u64 {
        let found = self.0.iter().find(|(c, _)| *c == counter);
        found.map_or(1, |(_, next)| (*next).max(1))
    }

    pub(crate) fn set(&mut self, counter: Counter, next: u64) {
        match self.0.iter_mut().find(|(c, _)| *c == counter) {
            Some((_, value)) => *value = next,
            None => self.0.push((counter, next)),
        }
    }

    /// The id the next pet gets.
    pub fn pets(&self) -> u64 {
        self.of(crate::pet::Pet::COUNTER)
    }
}

#[cfg(test)]
impl crate::store::model::Chunk {
    /// A chunk of `records` of a resource other than pets (which travel with their revisions,
    /// `Chunk::Pets`), in their stored form.
    pub(crate) fn rows<R: Resource>(records: &[R]) -> crate::store::model::Chunk {
        crate::store::model::Chunk::Rows(Rows {
            kind: R::KIND,
            records: records.iter().map(|r| (r.id(), r.encode())).collect(),
        })
    }
}

/// Work on the records of `rows`, read back as the resource they are of (`Rows::each`).
pub(crate) trait WithRecords {
    fn with<R: Resource>(&mut self, records: Vec<R>, stored: &Rows) -> Result<(), StoreError>;
}

/// A kind of record, declared once: where it is kept, in what form, and what it keeps in its
/// indexes.
pub(crate) trait Resource: Sized + 'static {
    const KIND: Kind;
    /// The counter its ids come from.
    const COUNTER: Counter;
    /// Its table (on redb, id to the stored form).
    const TABLE: &'static str;
    const INDEXES: &'static [&'static Index];
    const POSTGRES: Postgres;

    fn id(&self) -> i64;

    /// Its PostgreSQL columns beside `id`, in `POSTGRES.columns`' order.
    fn columns(&self) -> Vec<Column>;

    /// The record as stored.
    fn encode(&self) -> Vec<u8>;

    /// The record as the API sends it.
    fn json(&self) -> Vec<u8>;

    /// The record stored under `id` as `stored`, read back.
    fn decode(id: i64, stored: &[u8]) -> Result<Self, StoreError>;

    /// Its entries in its indexes; `stored` is its stored form, kept by a covering index (an
    /// old record's is not at hand: passed empty, its covering entry is always written
    /// again).
    fn entries<'a>(&self, stored: &'a [u8]) -> Vec<Entry<'a>>;
}

/// Work done for each kind of record in turn (`ops::each_resource`).
pub(crate) trait ForEach {
    fn visit<R: Resource>(&mut self) -> Result<(), StoreError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    static BY_NAME: Index = Index {
        name: "t",
        words: "t",
        parts: &[PartKind::Text, PartKind::Code(|_| None)],
        unique: false,
        holds: Holds::Nothing,
    };

    #[test]
    fn keys_compare_as_their_parts_and_read_back() {
        let key = |name: &str, code, id| {
            BY_NAME
                .entry(
                    id,
                    &[Part::Text(name.into()), Part::Code(code)],
                    Value::Nothing,
                )
                .key
        };
        let mut keys = vec![
            key("b", 0, 1),
            key("a", 9, -5),
            key("ab", 0, 2),
            key("a\0", 0, 3),
            key("a", 1, i64::MIN),
            key("a", 1, 7),
        ];
        keys.sort();
        assert_eq!(
            keys,
            vec![
                key("a", 1, i64::MIN),
                key("a", 1, 7),
                key("a", 9, -5),
                key("a\0", 0, 3),
                key("ab", 0, 2),
                key("b", 0, 1),
            ]
        );
        let entry = BY_NAME.read(&key("ab", 4, -9), &[]).expect("reads back");
        assert_eq!(
            (entry.owner, entry.key_text()),
            (-9, "\"ab\", 4, -9".to_owned())
        );
        // A 0 in text is escaped and read back as it was, borrowed where nothing was escaped.
        for text in ["\u{d5}\0", "\0\0", "a\0b", "\0"] {
            let entry = BY_NAME.read(&key(text, 1, 3), &[]).expect("reads back");
            assert_eq!(entry.key_text(), format!("{text:?}, 1, 3"));
        }
        let mut rest = &key("a\0", 0, 3)[..];
        assert_eq!(
            Key::take(&mut rest, PartKind::Text),
            Some(Part::Text(Cow::Owned("a\0".into())))
        );
        assert!(matches!(
            Key::take(&mut &key("ab", 0, 3)[..], PartKind::Text),
            Some(Part::Text(Cow::Borrowed("ab")))
        ));
        let cut = key("ab", 4, -9);
        assert!(BY_NAME.read(&cut[..cut.len() - 1], &[]).is_none());
        assert_eq!(owner_of(&key("x", 0, 42)).ok(), Some(42));
    }
}
