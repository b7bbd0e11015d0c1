//! Input parsing for the operations: the query strings of the lists (listPets, listOrders,
//! listCategories, listEvents) with their cursors, path ids, the media type of a request body
//! and the Idempotency-Key. Pure functions over text, no HTTP types and no I/O, so property
//! tests and the fuzz target can drive them alone. A rule broken here is a sentence naming the
//! parameter, for the caller's own error. Every list's query is read, and linked on to its next
//! page, by the one `Query`; a list only declares its filters and its cursor (`Filters`).

use std::borrow::Cow;
use std::fmt;

use crate::cursor::{Cursor, List};
use crate::event::{EventType, Position, Types};
use crate::order::OrderStatus;
use crate::pet::{PetId, PetStatus};
use crate::search::{Search, Sort};

/// Why a query or path parameter is refused, in words meant for the client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidParameter(pub String);

impl fmt::Display for InvalidParameter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Why a list's query is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InvalidQuery {
    /// `limit` or a filter is malformed or repeated.
    Parameter(InvalidParameter),
    /// `cursor` is malformed, repeated, or made for another list or other filters.
    Cursor(&'static str),
}

impl From<InvalidParameter> for InvalidQuery {
    fn from(e: InvalidParameter) -> InvalidQuery {
        InvalidQuery::Parameter(e)
    }
}

/// A list's query after its rules: how many items, which ones (`F`, the list's filters), and
/// where the page starts (from the cursor).
#[derive(Debug, PartialEq, Eq)]
pub struct Query<F: Filters> {
    pub limit: usize,
    pub filters: F,
    pub after: Option<F::After>,
}

/// listPets's query: limit 1..=100 (default 20), an optional status, category, search and
/// order, and the pet after which the page starts.
pub type ListQuery = Query<PetFilters>;
/// listOrders's query: limit as listPets's, an optional status and pet.
pub type OrdersQuery = Query<OrderFilters>;
/// listCategories's query: a limit and where the page starts.
pub type CategoriesQuery = Query<CategoryFilters>;
/// listEvents's query: where to start (a feed position, kept as sent for the 410 check), how
/// many, which types.
pub type EventsQuery = Query<EventFilters>;

/// A list's declaration: the filters its query takes besides `limit` and the cursor (their
/// `Default` is a query that names none), its page size, and what its pages start after.
/// `Query::parse` and `Query::next_into` follow it, so a new list is a declaration and not
/// another parser.
pub trait Filters: Default + 'static {
    /// spec 4.1: limit defaults to 20 and ranges over 1..=100.
    const LIMIT: Limit = Limit {
        default: 20,
        max: 100,
    };
    /// The filter parameters, in the order the next link names them after `limit`.
    const PARAMS: &'static [Param<Self>];
    /// What a page starts after, and the cursor parameter that carries it.
    type After: Start<Self>;
}

/// One filter of a list's query: its name, as the spec spells it, and where its value sits in
/// the list's filters (one accessor to write it into the next link, one to read it from the
/// query). It may be given at most once, which `Query` checks before reading it.
pub struct Param<F> {
    name: &'static str,
    get: fn(&F) -> &dyn Slot,
    set: fn(&mut F) -> &mut dyn Slot,
}

impl<F> Param<F> {
    /// The parameter `name`, whose value `get` and `set` find in the filters.
    pub const fn of(
        name: &'static str,
        get: fn(&F) -> &dyn Slot,
        set: fn(&mut F) -> &mut dyn Slot,
    ) -> Param<F> {
        Param { name, get, set }
    }
}

/// A filter's place in a list's filters: empty until its parameter is read.
pub trait Slot {
    /// Reads the decoded value of the parameter `name`, or says why it is refused.
    fn read(&mut self, name: &str, text: &str) -> Result<(), InvalidParameter>;
    /// Appends the value as the next link carries it, in characters a URL takes as they are;
    /// `false`, with nothing appended, when the filter was not given.
    fn write(&self, out: &mut String) -> bool;
}

impl<V: Value> Slot for Option<V> {
    fn read(&mut self, name: &str, text: &str) -> Result<(), InvalidParameter> {
        *self = Some(V::parse(name, text)?);
        Ok(())
    }

    fn write(&self, out: &mut String) -> bool {
        self.as_ref().map(|value| value.write(out)).is_some()
    }
}

/// What a filter holds, as the query spells it.
pub trait Value: Sized {
    /// The value of the parameter `name` in `text`.
    fn parse(name: &str, text: &str) -> Result<Self, InvalidParameter>;
    /// Appends the value as `parse` reads it back.
    fn write(&self, out: &mut String);
}

/// An id filter (`categoryId`, `petId`): a decimal int64.
impl Value for i64 {
    fn parse(name: &str, text: &str) -> Result<i64, InvalidParameter> {
        parse_id(name, text)
    }

    fn write(&self, out: &mut String) {
        out.push_str(itoa::Buffer::new().format(*self));
    }
}

impl Value for PetStatus {
    fn parse(_: &str, text: &str) -> Result<PetStatus, InvalidParameter> {
        PetStatus::parse(text).ok_or_else(|| {
            InvalidParameter("status must be one of available, pending, sold".into())
        })
    }

    fn write(&self, out: &mut String) {
        out.push_str(self.as_str());
    }
}

impl Value for OrderStatus {
    fn parse(_: &str, text: &str) -> Result<OrderStatus, InvalidParameter> {
        OrderStatus::parse(text).ok_or_else(|| {
            InvalidParameter("status must be one of placed, completed, cancelled, expired".into())
        })
    }

    fn write(&self, out: &mut String) {
        out.push_str(self.as_str());
    }
}

/// `q`: a search by name (`search.rs`). The next link carries its terms, which read back as
/// the same search.
impl Value for Search {
    fn parse(_: &str, text: &str) -> Result<Search, InvalidParameter> {
        Search::parse(text).map_err(|e| InvalidParameter(e.0.into()))
    }

    fn write(&self, out: &mut String) {
        for byte in self.canonical().bytes() {
            match byte {
                b' ' => out.push('+'),
                b if b.is_ascii_alphanumeric() => out.push(char::from(b)),
                b => {
                    const HEX: &[u8; 16] = b"0123456789ABCDEF";
                    out.push('%');
                    out.push(char::from(HEX[usize::from(b >> 4)]));
                    out.push(char::from(HEX[usize::from(b & 15)]));
                }
            }
        }
    }
}

/// listPets's `sort`: `id`, `-id` or `name`.
impl Value for Sort {
    fn parse(_: &str, text: &str) -> Result<Sort, InvalidParameter> {
        Sort::parse(text)
            .ok_or_else(|| InvalidParameter("sort must be one of id, -id, name".into()))
    }

    fn write(&self, out: &mut String) {
        out.push_str(self.as_str());
    }
}

/// listOrders's `sort`: `id` or `-id` (an order has no name of its own).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OrderSort(pub Sort);

impl Value for OrderSort {
    fn parse(_: &str, text: &str) -> Result<OrderSort, InvalidParameter> {
        match Sort::parse(text) {
            Some(sort) if sort != Sort::Name => Ok(OrderSort(sort)),
            _ => Err(InvalidParameter("sort must be one of id, -id".into())),
        }
    }

    fn write(&self, out: &mut String) {
        out.push_str(self.0.as_str());
    }
}

/// listEvents's `type`: a comma-separated list of event types, each known, at least one;
/// kept in the order asked, without repeats.
impl Value for Vec<EventType> {
    fn parse(_: &str, text: &str) -> Result<Vec<EventType>, InvalidParameter> {
        let known: Vec<&str> = EventType::ALL.iter().map(|t| t.name()).collect();
        let invalid = || {
            InvalidParameter(format!(
                "type must be a comma-separated list of event types: {}",
                known.join(", ")
            ))
        };
        let mut types = Vec::new();
        for name in text.split(',') {
            let kind = EventType::from_name(name).ok_or_else(invalid)?;
            if !types.contains(&kind) {
                types.push(kind);
            }
        }
        Ok(types)
    }

    fn write(&self, out: &mut String) {
        for (n, kind) in self.iter().enumerate() {
            if n > 0 {
                out.push(',');
            }
            out.push_str(kind.name());
        }
    }
}

/// How many items a list's page holds: `default` when `limit` is not given, at most `max`.
pub struct Limit {
    pub default: usize,
    pub max: usize,
}

impl Limit {
    fn parse(&self, text: &str) -> Result<usize, InvalidParameter> {
        let invalid =
            || InvalidParameter(format!("limit must be an integer from 1 to {}", self.max));
        if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
            return Err(invalid());
        }
        text.parse::<usize>()
            .ok()
            .filter(|n| (1..=self.max).contains(n))
            .ok_or_else(invalid)
    }
}

/// What a list's pages start after, as its cursor parameter carries it. The cursor is read
/// after every filter, since whether it fits may depend on them.
pub trait Start<F>: Clone + fmt::Debug + Eq {
    /// The cursor parameter's name.
    const NAME: &'static str;
    /// Why a second cursor is refused, whatever either says.
    const REPEATED: &'static str;
    /// Whether the next link names the cursor first rather than last.
    const LEADS: bool = false;
    /// Where a decoded cursor says a page of the list with `filters` starts, or why it says
    /// nothing of the kind.
    fn read(text: &str, filters: &F) -> Result<Self, &'static str>;
    /// Appends the cursor, in characters a URL takes as they are.
    fn write(self, filters: &F, out: &mut String);
}

/// The filters of a list that pages by the opaque cursor of cursor.rs: which list they make.
pub trait Listed {
    fn list(&self) -> List;
}

/// The cursor of cursor.rs, decoded and checked against the list and filters of `filters`.
fn read_cursor<F: Listed>(text: &str, filters: &F) -> Result<Cursor, &'static str> {
    let cursor = Cursor::decode(text)
        .ok_or("cursor is not valid: pass the cursor of a next link unchanged")?;
    let list = filters.list();
    match cursor.list == list {
        true => Ok(cursor),
        false => Err(foreign(cursor.list, list)),
    }
}

/// The opaque cursor of cursor.rs: the id a page starts after, good only for the list and the
/// filters it was made for.
impl<F: Listed> Start<F> for i64 {
    const NAME: &'static str = "cursor";
    const REPEATED: &'static str = "cursor must be given at most once";

    fn read(text: &str, filters: &F) -> Result<i64, &'static str> {
        read_cursor(text, filters).map(|cursor| cursor.after)
    }

    fn write(self, filters: &F, out: &mut String) {
        Cursor {
            list: filters.list(),
            after: self,
            key: None,
        }
        .encode_into(out);
    }
}

/// Where a page of pets starts: after pet `id`, and sorted by name after the sort key `key`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PetStart {
    pub id: PetId,
    pub key: Option<String>,
}

impl From<PetId> for PetStart {
    fn from(id: PetId) -> PetStart {
        PetStart { id, key: None }
    }
}

impl Start<PetFilters> for PetStart {
    const NAME: &'static str = "cursor";
    const REPEATED: &'static str = "cursor must be given at most once";

    fn read(text: &str, filters: &PetFilters) -> Result<PetStart, &'static str> {
        let cursor = read_cursor(text, filters)?;
        Ok(PetStart {
            id: cursor.after,
            key: cursor.key,
        })
    }

    fn write(self, filters: &PetFilters, out: &mut String) {
        Cursor {
            list: filters.list(),
            after: self.id,
            key: self.key,
        }
        .encode_into(out);
    }
}

/// listEvents's `after`: a position in the feed, whatever the types asked.
impl Start<EventFilters> for Position {
    const NAME: &'static str = "after";
    const REPEATED: &'static str = "after must be given at most once";
    const LEADS: bool = true;

    fn read(text: &str, _: &EventFilters) -> Result<Position, &'static str> {
        Position::parse(text).ok_or("after is not a cursor of this feed: pass a cursor unchanged")
    }

    fn write(self, _: &EventFilters, out: &mut String) {
        out.push_str(&self.cursor());
    }
}

/// A cursor parameter as sent (not yet decoded), or why a second one is refused.
type SentCursor<'a> = Option<Result<&'a str, &'static str>>;

impl<F: Filters> Query<F> {
    /// Reads a query string. A bad `limit` or filter is reported before a bad cursor, since
    /// whether a cursor fits depends on the filters; of those, the first in the query wins.
    pub fn parse(query: &str) -> Result<Query<F>, InvalidQuery> {
        let (mut parsed, cursor) = Query::read(query)?;
        if let Some(sent) = cursor {
            let text = sent.map_err(InvalidQuery::Cursor)?;
            let after = F::After::read(&decode_component(text), &parsed.filters)
                .map_err(InvalidQuery::Cursor)?;
            parsed.after = Some(after);
        }
        Ok(parsed)
    }

    /// Reads `limit` and the filters, each at most once, and returns the cursor as sent.
    fn read(query: &str) -> Result<(Query<F>, SentCursor<'_>), InvalidParameter> {
        // One bit a filter marks it given, with no allocation per request.
        const { assert!(F::PARAMS.len() <= 32, "a list takes at most 32 filters") };
        let mut given = 0u32;
        let mut limit = None;
        let mut filters = F::default();
        let mut cursor: SentCursor<'_> = None;
        for (name, value) in pairs(query) {
            if name == "limit" {
                if limit.is_some() {
                    return Err(repeated("limit"));
                }
                limit = Some(F::LIMIT.parse(&decode_component(value))?);
            } else if name == F::After::NAME {
                cursor = Some(match cursor {
                    Some(_) => Err(F::After::REPEATED),
                    None => Ok(value),
                });
            } else if let Some(n) = F::PARAMS.iter().position(|param| param.name == name) {
                let param = &F::PARAMS[n];
                if given & 1 << n != 0 {
                    return Err(repeated(param.name));
                }
                given |= 1 << n;
                (param.set)(&mut filters).read(param.name, &decode_component(value))?;
            }
            // Decision: unknown parameters are ignored, so clients can add tracing tags.
        }
        let parsed = Query {
            limit: limit.unwrap_or(F::LIMIT.default),
            filters,
            after: None,
        };
        Ok((parsed, cursor))
    }

    #[cfg(test)]
    pub fn next(&self, last: F::After) -> String {
        let mut next = String::with_capacity(48);
        self.next_into(last, &mut next);
        next
    }

    /// Appends the query of the page after this one, which ends at `last`: the same limit
    /// and filters, and a cursor. Its characters need no escaping in a URL. Every page with
    /// more after it builds one, so it is written piece by piece, without `core::fmt`.
    pub fn next_into(&self, last: F::After, out: &mut String) {
        let mut last = Some(last);
        let mut cursor = |out: &mut String| {
            if let Some(last) = last.take() {
                out.push_str(F::After::NAME);
                out.push('=');
                last.write(&self.filters, out);
            }
        };
        if F::After::LEADS {
            cursor(out);
            out.push('&');
        }
        out.push_str("limit=");
        out.push_str(itoa::Buffer::new().format(self.limit));
        for param in F::PARAMS {
            let unfiltered = out.len();
            out.push('&');
            out.push_str(param.name);
            out.push('=');
            if !(param.get)(&self.filters).write(out) {
                out.truncate(unfiltered);
            }
        }
        if !F::After::LEADS {
            out.push('&');
            cursor(out);
        }
    }
}

impl EventsQuery {
    /// Reads listEvents's query string; `last_event_id`, a stream's Last-Event-ID, wins over
    /// `after` (which is then not even checked).
    pub fn parse_with_last_event_id(
        query: &str,
        last_event_id: Option<&str>,
    ) -> Result<EventsQuery, InvalidQuery> {
        let Some(id) = last_event_id.filter(|id| !id.is_empty()) else {
            return EventsQuery::parse(query);
        };
        let (mut parsed, _) = EventsQuery::read(query)?;
        let after = Position::parse(id).ok_or(InvalidQuery::Cursor(
            "Last-Event-ID is not a cursor of this feed: pass the id of an event unchanged",
        ))?;
        parsed.after = Some(after);
        Ok(parsed)
    }
}

/// listPets's filters: by status and by category, a search by name (`q`, beta) and an
/// order (`sort`, beta).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PetFilters {
    pub status: Option<PetStatus>,
    pub category: Option<i64>,
    pub q: Option<Search>,
    pub sort: Option<Sort>,
}

impl PetFilters {
    /// The search asked for (none: an empty one).
    pub fn search(&self) -> Search {
        self.q.clone().unwrap_or_default()
    }
}

impl Filters for PetFilters {
    const PARAMS: &'static [Param<PetFilters>] = &[
        Param::of("status", |f| &f.status, |f| &mut f.status),
        Param::of("categoryId", |f| &f.category, |f| &mut f.category),
        Param::of("q", |f| &f.q, |f| &mut f.q),
        Param::of("sort", |f| &f.sort, |f| &mut f.sort),
    ];
    type After = PetStart;
}

impl Listed for PetFilters {
    fn list(&self) -> List {
        List::Pets {
            status: self.status,
            category: self.category,
            sort: self.sort.unwrap_or_default(),
            search: self.q.as_ref().map_or(0, Search::fingerprint),
        }
    }
}

/// listOrders's filters: by status and by pet, by their pet's name (`q`, beta) and an order
/// (`sort`, beta).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OrderFilters {
    pub status: Option<OrderStatus>,
    pub pet_id: Option<PetId>,
    pub q: Option<Search>,
    pub sort: Option<OrderSort>,
}

impl OrderFilters {
    /// The search asked for (none: an empty one).
    pub fn search(&self) -> Search {
        self.q.clone().unwrap_or_default()
    }
}

impl Filters for OrderFilters {
    const PARAMS: &'static [Param<OrderFilters>] = &[
        Param::of("status", |f| &f.status, |f| &mut f.status),
        Param::of("petId", |f| &f.pet_id, |f| &mut f.pet_id),
        Param::of("q", |f| &f.q, |f| &mut f.q),
        Param::of("sort", |f| &f.sort, |f| &mut f.sort),
    ];
    type After = i64;
}

impl Listed for OrderFilters {
    fn list(&self) -> List {
        List::Orders {
            status: self.status,
            pet: self.pet_id,
            sort: self.sort.unwrap_or_default().0,
            search: self.q.as_ref().map_or(0, Search::fingerprint),
        }
    }
}

/// listCategories has no filter.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CategoryFilters;

impl Filters for CategoryFilters {
    const PARAMS: &'static [Param<CategoryFilters>] = &[];
    type After = i64;
}

impl Listed for CategoryFilters {
    fn list(&self) -> List {
        List::Categories
    }
}

/// listEvents's filter: which types of event, all unless `type` is given.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct EventFilters {
    /// The types as asked, for the next link: `None` for all.
    pub type_names: Option<Vec<EventType>>,
}

impl EventFilters {
    /// The types asked, as the store filters by them.
    pub fn types(&self) -> Types {
        self.type_names
            .as_ref()
            .map_or(Types::ALL, |types| Types::only(types.iter().copied()))
    }
}

impl Filters for EventFilters {
    /// listEvents: limit defaults to 100 and ranges over 1..=1000.
    const LIMIT: Limit = Limit {
        default: 100,
        max: 1000,
    };
    const PARAMS: &'static [Param<EventFilters>] =
        &[Param::of("type", |f| &f.type_names, |f| &mut f.type_names)];
    type After = Position;
}

/// A query's `name=value` pairs, the name decoded and the value as sent (each parameter
/// decodes its own, so an unknown one costs nothing).
fn pairs(query: &str) -> impl Iterator<Item = (Cow<'_, str>, &str)> {
    query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            (decode_component(name), value)
        })
}

/// Why a cursor made for the list `made` does not fit the list `used`: the first filter that
/// differs, in the order the next links name them.
fn foreign(made: List, used: List) -> &'static str {
    const STATUS: &str = "cursor belongs to a list with another status filter";
    let ((made_sort, made_search), (used_sort, used_search)) = (made.order(), used.order());
    if made_sort != used_sort {
        return "cursor belongs to a list with another sort";
    }
    if made_search != used_search {
        return "cursor belongs to a list with another q";
    }
    match (made, used) {
        (List::Pets { status: a, .. }, List::Pets { status: b, .. }) if a != b => STATUS,
        (List::Pets { .. }, List::Pets { .. }) => {
            "cursor belongs to a list with another categoryId filter"
        }
        (List::Orders { status: a, .. }, List::Orders { status: b, .. }) if a != b => STATUS,
        (List::Orders { .. }, List::Orders { .. }) => {
            "cursor belongs to a list with another petId filter"
        }
        _ => "cursor belongs to another list: pass the cursor of this list's next link unchanged",
    }
}

/// The answer to a second `limit` or filter, whatever either says.
fn repeated(name: &str) -> InvalidParameter {
    InvalidParameter(format!("{name} must be given at most once"))
}

/// A pet's id in a path: see `parse_id`.
#[cfg(test)]
pub fn parse_pet_id(text: &str) -> Result<PetId, InvalidParameter> {
    parse_id("petId", text)
}

/// A decimal int64: an optional minus and digits, nothing else (no `+`, spaces or escapes).
/// `name` is the parameter's, for the message.
pub fn parse_id(name: &str, text: &str) -> Result<i64, InvalidParameter> {
    let digits = text.strip_prefix('-').unwrap_or(text);
    let invalid = || InvalidParameter(format!("{name} must be a decimal integer within int64"));
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
    is_media_type(content_type, &["application/json"])
}

/// A merge patch (RFC 7396) is `application/merge-patch+json`; plain `application/json` is
/// taken too, for clients that know no other type.
pub fn is_merge_patch(content_type: Option<&str>) -> bool {
    is_media_type(
        content_type,
        &["application/merge-patch+json", "application/json"],
    )
}

/// Whether `content_type` is one of `essences` (any case), with any parameters but a charset
/// other than UTF-8.
fn is_media_type(content_type: Option<&str>, essences: &[&str]) -> bool {
    let Some(value) = content_type else {
        return false;
    };
    let mut parts = value.split(';');
    let essence = parts.next().unwrap_or_default().trim();
    essences.iter().any(|e| essence.eq_ignore_ascii_case(e))
        && parts.all(|param| match param.split_once('=') {
            Some((name, value)) if name.trim().eq_ignore_ascii_case("charset") => {
                value.trim().trim_matches('"').eq_ignore_ascii_case("utf-8")
            }
            _ => true,
        })
}

/// Most characters an Idempotency-Key may have.
pub const MAX_IDEMPOTENCY_KEY_CHARS: usize = 255;

/// The key in an `Idempotency-Key` value (draft-ietf-httpapi-idempotency-key-header-07): a
/// structured-field string (`"abc"`, with `\"` and `\\` escapes) or, as many clients send it,
/// the bare characters. Either way 1 to 255 printable ASCII characters; `"abc"` and `abc` are
/// the same key.
pub fn parse_idempotency_key(value: &[u8]) -> Result<String, &'static str> {
    const INVALID: &str =
        "Idempotency-Key must be 1 to 255 printable ASCII characters, bare or in double quotes";
    let value = value.trim_ascii();
    let key = match value.strip_prefix(b"\"") {
        Some(quoted) => {
            let mut key = Vec::with_capacity(quoted.len());
            let mut bytes = quoted.iter();
            loop {
                match bytes.next() {
                    Some(b'"') if bytes.as_slice().is_empty() => break,
                    Some(b'\\') => match bytes.next() {
                        Some(&b) if b == b'"' || b == b'\\' => key.push(b),
                        _ => return Err(INVALID),
                    },
                    Some(&b) if (0x20..0x7f).contains(&b) && b != b'"' => key.push(b),
                    _ => return Err(INVALID),
                }
            }
            key
        }
        None if value.iter().all(|b| (0x21..0x7f).contains(b)) => value.to_vec(),
        None => return Err(INVALID),
    };
    if key.is_empty() || key.len() > MAX_IDEMPOTENCY_KEY_CHARS {
        return Err(INVALID);
    }
    String::from_utf8(key).map_err(|_| INVALID)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(result: Result<ListQuery, InvalidQuery>) -> String {
        match result.expect_err("an invalid query") {
            InvalidQuery::Parameter(e) => e.0,
            InvalidQuery::Cursor(problem) => format!("cursor: {problem}"),
        }
    }

    #[test]
    fn limit_defaults_to_20_and_accepts_1_to_100() {
        assert_eq!(
            ListQuery::parse("").ok(),
            Some(ListQuery {
                limit: 20,
                filters: PetFilters::default(),
                after: None
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
            ListQuery::parse("status=sold")
                .map(|q| q.filters.status)
                .ok(),
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

    // Property tests: whatever a client sends, a parser returns a value or an
    // `InvalidParameter` (a 400), never a panic, and what it accepts means what was written.
    use proptest::prelude::*;

    /// One `name=value` pair of a generated query and what `ListQuery::parse` must make of it.
    #[derive(Clone, Debug)]
    enum Pair {
        /// `limit=` with a value; `Some(n)` when the value is a valid limit.
        Limit(String, Option<usize>),
        /// `status=` with a value; `Some(s)` when the value is a status spelled exactly.
        Status(String, Option<PetStatus>),
        /// `categoryId=` with a value; `Some(id)` when the value is a decimal int64.
        Category(String, Option<i64>),
        /// Any other name: ignored whatever its value.
        Unknown(String, String),
    }

    /// Percent-encodes `text` as a client might: each character is left as it is (when that
    /// keeps its meaning) or written as `%XX` in either case, picked by `choices`. `&`, `=`,
    /// `%`, `+` (and `#`, which would end a URL's query) are always escaped, since a literal one
    /// would change what the query says.
    fn encode(text: &str, choices: &[u8]) -> String {
        let mut out = String::new();
        for (index, c) in text.chars().enumerate() {
            let reserved = matches!(c, '&' | '=' | '%' | '+' | '#');
            match choices[index % choices.len()] {
                3 if c == ' ' => out.push('+'),
                0 | 3 if !reserved => out.push(c),
                1 => c
                    .to_string()
                    .bytes()
                    .for_each(|b| out.push_str(&format!("%{b:02X}"))),
                _ => c
                    .to_string()
                    .bytes()
                    .for_each(|b| out.push_str(&format!("%{b:02x}"))),
            }
        }
        out
    }

    fn choices() -> impl Strategy<Value = Vec<u8>> {
        prop::collection::vec(0u8..4, 1..8)
    }

    /// True when `text` is what the spec calls a limit: decimal digits for 1 to 100.
    fn is_valid_limit(text: &str) -> bool {
        !text.is_empty()
            && text.bytes().all(|b| b.is_ascii_digit())
            && text.trim_start_matches('0').len() <= 3
            && (1..=100).contains(&text.trim_start_matches('0').parse::<u32>().unwrap_or(0))
    }

    fn limit_pair() -> impl Strategy<Value = Pair> {
        let valid = (1usize..=100, 0usize..4)
            .prop_map(|(n, zeros)| Pair::Limit(format!("{}{n}", "0".repeat(zeros)), Some(n)));
        let invalid = prop_oneof![
            any::<String>(),
            (101u64..).prop_map(|n| n.to_string()),
            "0{1,4}",
            "[-+ ]?[0-9]{1,3}(\\.[0-9])?",
        ]
        .prop_filter("a valid limit", |text| !is_valid_limit(text))
        .prop_map(|text| Pair::Limit(text, None));
        prop_oneof![valid, invalid]
    }

    fn status_pair() -> impl Strategy<Value = Pair> {
        let valid = prop_oneof![
            Just(PetStatus::Available),
            Just(PetStatus::Pending),
            Just(PetStatus::Sold),
        ]
        .prop_map(|status| {
            let text = serde_json::to_value(status).expect("a status encodes");
            let text = text.as_str().expect("a status is a string").to_owned();
            Pair::Status(text, Some(status))
        });
        let invalid = prop_oneof![any::<String>(), "(?i)(available|pending|sold) ?"]
            .prop_filter("a valid status", |text| PetStatus::parse(text).is_none())
            .prop_map(|text| Pair::Status(text, None));
        prop_oneof![valid, invalid]
    }

    fn category_pair() -> impl Strategy<Value = Pair> {
        let valid = any::<i64>().prop_map(|id| Pair::Category(id.to_string(), Some(id)));
        let invalid = prop_oneof![any::<String>(), "[-+ ]?[0-9]{1,20}(\\.[0-9])?"]
            .prop_filter("a valid id", |text| parse_id("categoryId", text).is_err())
            .prop_map(|text| Pair::Category(text, None));
        prop_oneof![valid, invalid]
    }

    fn unknown_pair() -> impl Strategy<Value = Pair> {
        (any::<String>(), any::<String>())
            .prop_filter("a known name", |(name, _)| {
                !name.is_empty() && !["limit", "status", "categoryId", "cursor"].contains(&&**name)
            })
            .prop_map(|(name, value)| Pair::Unknown(name, value))
    }

    /// A query string of up to five pairs, each name and value encoded at random.
    fn query() -> impl Strategy<Value = (String, Vec<Pair>)> {
        let pair = prop_oneof![limit_pair(), status_pair(), category_pair(), unknown_pair()];
        prop::collection::vec((pair, choices(), choices(), 1usize..3), 0..5).prop_map(|pairs| {
            let mut text = String::new();
            for (pair, name_choices, value_choices, separators) in &pairs {
                let (name, value) = match pair {
                    Pair::Limit(value, _) => ("limit", value.as_str()),
                    Pair::Status(value, _) => ("status", value.as_str()),
                    Pair::Category(value, _) => ("categoryId", value.as_str()),
                    Pair::Unknown(name, value) => (name.as_str(), value.as_str()),
                };
                text.push_str(&encode(name, name_choices));
                text.push('=');
                text.push_str(&encode(value, value_choices));
                text.push_str(&"&".repeat(*separators));
            }
            (text, pairs.into_iter().map(|(pair, ..)| pair).collect())
        })
    }

    /// What the spec says of a query: the first repeated or invalid parameter is the answer.
    fn expected(pairs: &[Pair]) -> Result<ListQuery, InvalidQuery> {
        let mut limit = None;
        let mut status = None;
        let mut category = None;
        let invalid = |text: &str| Err(InvalidQuery::Parameter(InvalidParameter(text.into())));
        for pair in pairs {
            match pair {
                Pair::Limit(..) if limit.is_some() => {
                    return invalid("limit must be given at most once");
                }
                Pair::Limit(_, Some(n)) => limit = Some(*n),
                Pair::Limit(_, None) => return invalid("limit must be an integer from 1 to 100"),
                Pair::Status(..) if status.is_some() => {
                    return invalid("status must be given at most once");
                }
                Pair::Status(_, Some(s)) => status = Some(*s),
                Pair::Status(_, None) => {
                    return invalid("status must be one of available, pending, sold");
                }
                Pair::Category(..) if category.is_some() => {
                    return invalid("categoryId must be given at most once");
                }
                Pair::Category(_, Some(id)) => category = Some(*id),
                Pair::Category(_, None) => {
                    return invalid("categoryId must be a decimal integer within int64");
                }
                Pair::Unknown(..) => {}
            }
        }
        Ok(ListQuery {
            limit: limit.unwrap_or(20),
            filters: PetFilters {
                status,
                category,
                ..Default::default()
            },
            after: None,
        })
    }

    #[test]
    fn a_next_query_keeps_limit_and_status_and_its_cursor_reads_back() {
        let query = ListQuery::parse("status=sold&limit=5").expect("valid");
        let next = query.next(41.into());
        assert!(next.starts_with("limit=5&status=sold&cursor="), "{next}");
        let again = ListQuery::parse(&next).expect("a next query is valid");
        assert_eq!(
            (again.limit, again.filters.status, again.after),
            (5, Some(PetStatus::Sold), Some(41.into()))
        );
        let unfiltered = ListQuery::parse("").expect("valid").next(7.into());
        assert!(unfiltered.starts_with("limit=20&cursor="), "{unfiltered}");
        assert_eq!(
            ListQuery::parse(&unfiltered).expect("valid").after,
            Some(7.into())
        );
    }

    #[test]
    fn a_bad_repeated_or_foreign_cursor_is_refused_after_limit_and_status() {
        let sold = ListQuery::parse("status=sold")
            .expect("valid")
            .next(3.into());
        let sold_cursor = sold.rsplit_once('=').expect("a cursor").1;
        let all = ListQuery::parse("").expect("valid").next(3.into());
        let all_cursor = all.rsplit_once('=').expect("a cursor").1;
        let malformed = "cursor: cursor is not valid: pass the cursor of a next link unchanged";
        let foreign = "cursor: cursor belongs to a list with another status filter";
        for (query, expected) in [
            ("cursor=".to_owned(), malformed),
            ("cursor".to_owned(), malformed),
            ("cursor=abc".to_owned(), malformed),
            (format!("cursor={sold_cursor}"), foreign),
            (format!("status=pending&cursor={sold_cursor}"), foreign),
            (format!("cursor={all_cursor}&status=sold"), foreign),
            (
                format!("cursor={all_cursor}&cursor={all_cursor}"),
                "cursor: cursor must be given at most once",
            ),
            (
                "cursor=abc&limit=0".to_owned(),
                "limit must be an integer from 1 to 100",
            ),
        ] {
            assert_eq!(message(ListQuery::parse(&query)), expected, "{query}");
        }
        assert_eq!(
            ListQuery::parse(&format!("status=sold&cursor={sold_cursor}")).map(|q| q.after),
            Ok(Some(3.into()))
        );
    }

    /// The cursor at the end of a next query.
    fn cursor_in(next: &str) -> &str {
        next.rsplit_once("cursor=").expect("a cursor").1
    }

    #[test]
    fn a_category_filter_is_an_int64_given_once_and_comes_back_in_the_next_query() {
        let query = ListQuery::parse("categoryId=-4&status=sold&limit=3").expect("valid");
        assert_eq!(
            (query.filters.status, query.filters.category),
            (Some(PetStatus::Sold), Some(-4))
        );
        let next = query.next(9.into());
        assert!(
            next.starts_with("limit=3&status=sold&categoryId=-4&cursor="),
            "{next}"
        );
        let again = ListQuery::parse(&next).expect("a next query is valid");
        assert_eq!(
            again,
            ListQuery {
                limit: 3,
                filters: PetFilters {
                    status: Some(PetStatus::Sold),
                    category: Some(-4),
                    ..Default::default()
                },
                after: Some(9.into())
            }
        );
        assert_eq!(
            ListQuery::parse("categoryId=%37").map(|q| q.filters.category),
            Ok(Some(7))
        );
        for (text, expected) in [
            (
                "categoryId=",
                "categoryId must be a decimal integer within int64",
            ),
            (
                "categoryId=x",
                "categoryId must be a decimal integer within int64",
            ),
            (
                "categoryId=9223372036854775808",
                "categoryId must be a decimal integer within int64",
            ),
            (
                "categoryId=1&categoryId=1",
                "categoryId must be given at most once",
            ),
        ] {
            assert_eq!(message(ListQuery::parse(text)), expected, "{text}");
        }
        // Without a category, the next query is the one listPets always made.
        let plain = ListQuery::parse("status=sold&limit=5")
            .expect("valid")
            .next(41.into());
        assert_eq!(plain, "limit=5&status=sold&cursor=AQMAAAAAAAAAKU4t");
    }

    #[test]
    fn a_pets_cursor_is_bound_to_its_category_filter() {
        let dogs = ListQuery::parse("categoryId=1")
            .expect("valid")
            .next(3.into());
        let cats = ListQuery::parse("categoryId=2")
            .expect("valid")
            .next(3.into());
        let all = ListQuery::parse("").expect("valid").next(3.into());
        let sold_dogs = ListQuery::parse("categoryId=1&status=sold")
            .expect("valid")
            .next(3.into());
        let category = "cursor: cursor belongs to a list with another categoryId filter";
        let status = "cursor: cursor belongs to a list with another status filter";
        for (query, expected) in [
            (
                format!("categoryId=1&cursor={}", cursor_in(&cats)),
                category,
            ),
            (format!("cursor={}", cursor_in(&dogs)), category),
            (format!("categoryId=1&cursor={}", cursor_in(&all)), category),
            (
                format!("categoryId=1&cursor={}", cursor_in(&sold_dogs)),
                status,
            ),
            (format!("status=sold&cursor={}", cursor_in(&dogs)), status),
        ] {
            assert_eq!(message(ListQuery::parse(&query)), expected, "{query}");
        }
        assert_eq!(
            ListQuery::parse(&format!("categoryId=1&cursor={}", cursor_in(&dogs))).map(|q| q.after),
            Ok(Some(3.into()))
        );
    }

    #[test]
    fn orders_take_an_order_status_and_a_pet_and_link_on_with_both() {
        assert_eq!(
            OrdersQuery::parse(""),
            Ok(OrdersQuery {
                limit: 20,
                filters: OrderFilters::default(),
                after: None
            })
        );
        let query = OrdersQuery::parse("petId=5&status=placed&limit=2").expect("valid");
        let mut next = String::new();
        query.next_into(11, &mut next);
        assert!(
            next.starts_with("limit=2&status=placed&petId=5&cursor="),
            "{next}"
        );
        assert_eq!(
            OrdersQuery::parse(&next),
            Ok(OrdersQuery {
                limit: 2,
                filters: OrderFilters {
                    status: Some(OrderStatus::Placed),
                    pet_id: Some(5),
                    ..Default::default()
                },
                after: Some(11)
            })
        );
        let refused = |text: &str| match OrdersQuery::parse(text).expect_err(text) {
            InvalidQuery::Parameter(e) => e.0,
            InvalidQuery::Cursor(problem) => format!("cursor: {problem}"),
        };
        for (text, expected) in [
            (
                "status=available",
                "status must be one of placed, completed, cancelled, expired",
            ),
            (
                "status=placed&status=placed",
                "status must be given at most once",
            ),
            ("petId=one", "petId must be a decimal integer within int64"),
            ("limit=0", "limit must be an integer from 1 to 100"),
            (
                "cursor=abc",
                "cursor: cursor is not valid: pass the cursor of a next link unchanged",
            ),
        ] {
            assert_eq!(refused(text), expected, "{text}");
        }
        let other_pet = format!("petId=6&limit=2&status=placed&cursor={}", cursor_in(&next));
        assert_eq!(
            refused(&other_pet),
            "cursor: cursor belongs to a list with another petId filter"
        );
        let other_status = format!("petId=5&status=completed&cursor={}", cursor_in(&next));
        assert_eq!(
            refused(&other_status),
            "cursor: cursor belongs to a list with another status filter"
        );
    }

    #[test]
    fn a_cursor_of_one_list_is_refused_by_every_other() {
        let pets = ListQuery::parse("").expect("valid").next(1.into());
        let dogs = ListQuery::parse("categoryId=1")
            .expect("valid")
            .next(1.into());
        let mut orders = String::new();
        OrdersQuery::parse("")
            .expect("valid")
            .next_into(1, &mut orders);
        let mut categories = String::new();
        CategoriesQuery::parse("")
            .expect("valid")
            .next_into(1, &mut categories);
        assert!(categories.starts_with("limit=20&cursor="), "{categories}");
        let another = InvalidQuery::Cursor(
            "cursor belongs to another list: pass the cursor of this list's next link unchanged",
        );
        for pets in [&pets, &dogs] {
            let pets = format!("cursor={}", cursor_in(pets));
            assert_eq!(OrdersQuery::parse(&pets), Err(another.clone()));
            assert_eq!(CategoriesQuery::parse(&pets), Err(another.clone()));
        }
        let orders = format!("cursor={}", cursor_in(&orders));
        assert_eq!(ListQuery::parse(&orders), Err(another.clone()));
        assert_eq!(CategoriesQuery::parse(&orders), Err(another.clone()));
        let categories = format!("cursor={}", cursor_in(&categories));
        assert_eq!(ListQuery::parse(&categories), Err(another.clone()));
        assert_eq!(OrdersQuery::parse(&categories), Err(another));
        assert_eq!(
            CategoriesQuery::parse(&format!("limit=7&{categories}")),
            Ok(CategoriesQuery {
                limit: 7,
                filters: CategoryFilters,
                after: Some(1)
            })
        );
    }

    #[test]
    fn an_idempotency_key_is_a_token_or_a_quoted_string_of_1_to_255_characters() {
        let parse = |value: &str| parse_idempotency_key(value.as_bytes());
        assert_eq!(parse("abc"), Ok("abc".into()));
        assert_eq!(parse(r#""abc""#), Ok("abc".into()));
        assert_eq!(parse(r#""a b\"c\\""#), Ok(r#"a b"c\"#.into()));
        assert_eq!(parse(" 8e0f-11 "), Ok("8e0f-11".into()));
        assert_eq!(parse(&"k".repeat(255)), Ok("k".repeat(255)));
        assert_eq!(
            parse(&format!("\"{}\"", "k".repeat(255))),
            Ok("k".repeat(255))
        );
        for bad in [
            String::new(),
            r#""""#.into(),
            "k".repeat(256),
            format!("\"{}\"", "k".repeat(256)),
            "a b".into(),
            r#""abc"#.into(),
            r#""a"b""#.into(),
            r#""a\b""#.into(),
            "caf\u{e9}".into(),
            "tab\there".into(),
        ] {
            assert!(parse(&bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_merge_patch_is_merge_patch_json_or_json() {
        assert!(is_merge_patch(Some("application/merge-patch+json")));
        assert!(is_merge_patch(Some("application/json; charset=utf-8")));
        assert!(!is_merge_patch(Some("application/json-patch+json")));
        assert!(!is_merge_patch(None));
    }

    proptest! {
        #[test]
        fn any_query_string_is_a_query_or_an_invalid_parameter(
            text in prop_oneof![any::<String>(), "[a-z=&%+0-9A-Fs]{0,40}"],
        ) {
            if let Ok(query) = ListQuery::parse(&text) {
                prop_assert!((1..=100).contains(&query.limit));
            }
        }

        #[test]
        fn a_generated_query_parses_to_what_its_pairs_say((text, pairs) in query()) {
            prop_assert_eq!(ListQuery::parse(&text), expected(&pairs), "{}", text);
        }

        #[test]
        fn any_query_string_is_an_orders_or_categories_query_or_refused(
            text in prop_oneof![any::<String>(), "[a-zA-Z=&%+0-9-]{0,40}"],
        ) {
            if let Ok(query) = OrdersQuery::parse(&text) {
                prop_assert!((1..=100).contains(&query.limit));
            }
            if let Ok(query) = CategoriesQuery::parse(&text) {
                prop_assert!((1..=100).contains(&query.limit));
            }
        }

        #[test]
        fn every_next_query_reads_back_as_its_list_one_page_on(
            limit in 1usize..=100,
            status in proptest::option::of(prop_oneof![
                Just(PetStatus::Available),
                Just(PetStatus::Pending),
                Just(PetStatus::Sold),
            ]),
            order_status in proptest::option::of(prop_oneof![
                Just(OrderStatus::Placed),
                Just(OrderStatus::Completed),
                Just(OrderStatus::Cancelled),
                Just(OrderStatus::Expired),
            ]),
            filter in proptest::option::of(any::<i64>()),
            last in any::<i64>(),
        ) {
            let pets = ListQuery {
                limit,
                filters: PetFilters { status, category: filter, ..Default::default() },
                after: None,
            };
            prop_assert_eq!(
                ListQuery::parse(&pets.next(last.into())),
                Ok(ListQuery { after: Some(last.into()), ..pets })
            );
            let orders = OrdersQuery {
                limit,
                filters: OrderFilters { status: order_status, pet_id: filter, ..Default::default() },
                after: None,
            };
            let mut next = String::new();
            orders.next_into(last, &mut next);
            prop_assert_eq!(
                OrdersQuery::parse(&next),
                Ok(OrdersQuery { after: Some(last), ..orders })
            );
            let categories = CategoriesQuery { limit, filters: CategoryFilters, after: None };
            let mut next = String::new();
            categories.next_into(last, &mut next);
            prop_assert_eq!(
                CategoriesQuery::parse(&next),
                Ok(CategoriesQuery { limit, filters: CategoryFilters, after: Some(last) })
            );
        }

        #[test]
        fn any_i64_printed_in_decimal_parses_back_to_itself(id in any::<i64>()) {
            prop_assert_eq!(parse_pet_id(&id.to_string()), Ok(id));
        }

        #[test]
        fn a_sign_and_digits_parse_exactly_when_they_fit_in_i64(text in "-?[0-9]{1,25}") {
            let wide = text.parse::<i128>().expect("digits are an i128");
            prop_assert_eq!(parse_pet_id(&text).ok(), i64::try_from(wide).ok(), "{}", text);
        }

        #[test]
        fn any_string_is_a_pet_id_only_if_it_is_a_sign_and_digits(text in any::<String>()) {
            if let Ok(id) = parse_pet_id(&text) {
                let digits = text.strip_prefix('-').unwrap_or(&text);
                prop_assert!(!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()));
                prop_assert_eq!(text.parse::<i64>(), Ok(id));
            }
        }

        #[test]
        fn a_pet_id_with_any_other_character_is_refused(
            before in "-?[0-9]{0,5}",
            other in prop_oneof!["[^0-9-]", "[0-9]-"],
            after in "[0-9]{0,5}",
        ) {
            let text = format!("{before}{other}{after}");
            prop_assert!(parse_pet_id(&text).is_err(), "{}", text);
        }

        #[test]
        fn decoding_any_string_never_panics(text in prop_oneof![any::<String>(), "[%+0-9a-fA-Fg]{0,12}"]) {
            let decoded = decode_component(&text);
            if !text.contains(['%', '+']) {
                prop_assert_eq!(decoded, text.as_str());
            }
        }

        #[test]
        fn percent_encoding_every_byte_then_decoding_gives_the_string_back(
            text in any::<String>(),
            upper in any::<bool>(),
        ) {
            let encoded: String = text
                .bytes()
                .map(|b| if upper { format!("%{b:02X}") } else { format!("%{b:02x}") })
                .collect();
            prop_assert_eq!(decode_component(&encoded), text.as_str());
        }

        #[test]
        fn encoding_some_characters_then_decoding_gives_the_string_back(
            text in any::<String>(),
            choices in choices(),
        ) {
            let encoded = encode(&text, &choices);
            prop_assert_eq!(decode_component(&encoded), text.as_str());
        }

        #[test]
        fn any_content_type_is_json_or_not_without_panicking(
            value in proptest::option::of(prop_oneof![
                any::<String>(),
                "(?i)application/json[ ;=\"a-z0-9-]{0,20}",
            ]),
        ) {
            let _ = is_json(value.as_deref());
        }

        #[test]
        fn application_json_in_any_case_with_other_parameters_is_json(
            uppercase in prop::collection::vec(any::<bool>(), 16),
            parameters in prop::collection::vec(
                (
                    "[a-zA-Z][a-zA-Z0-9!#$&^_.+-]{0,10}",
                    prop_oneof!["[a-zA-Z0-9!#$&^_.+-]{0,10}", "\"[a-zA-Z0-9 ,=/-]{0,10}\""],
                    " {0,2}",
                    " {0,2}",
                ),
                0..4,
            ),
            charset in proptest::option::of("(?i)utf-8|\"utf-8\""),
        ) {
            let essence: String = "application/json"
                .chars()
                .zip(&uppercase)
                .map(|(c, &upper)| if upper { c.to_ascii_uppercase() } else { c })
                .collect();
            let mut value = essence;
            for (name, text, before, after) in &parameters {
                prop_assume!(!name.eq_ignore_ascii_case("charset"));
                value.push_str(&format!("{before};{after}{name}={text}"));
            }
            if let Some(charset) = charset {
                value.push_str(&format!("; charset={charset}"));
            }
            prop_assert!(is_json(Some(&value)), "{}", value);
        }

        #[test]
        fn a_charset_other_than_utf_8_is_not_json(charset in "[a-zA-Z0-9_-]{1,12}") {
            prop_assume!(!charset.eq_ignore_ascii_case("utf-8"));
            let value = format!("application/json; charset={charset}");
            prop_assert!(!is_json(Some(&value)), "{}", value);
        }
    }
}
