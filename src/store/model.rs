//! The store's vocabulary, shared by the face (`store/mod.rs`), the write front
//! (`store/write.rs`) and both engines: what a stored pet, a create's outcome, a page and an
//! idempotency record are, what a change may require, what a committed batch publishes, and
//! `StoreError` by meaning. It knows no engine and no HTTP.

use std::fmt;

use bytes::{BufMut, Bytes, BytesMut};

use super::claims::IdempotencyKey;
use crate::category::{Category, CategoryId};
use crate::clock::{self, Precision};
use crate::event::{EventType, Position};
use crate::order::{Order, OrderAction, OrderId, OrderStatus, Refused};
use crate::pet::{NewPet, PetId, PetStatus};
use crate::search::{Search, Sort};
use crate::subject::{Kind, Subject};

/// A pet as the store keeps it: its id, its revision (1 at creation, one more with every
/// change) and its JSON object.
#[derive(Clone, Debug)]
pub struct StoredPet {
    pub id: PetId,
    pub revision: u64,
    pub json: Bytes,
}

/// A create's outcome: the pet, and whether it was made by an earlier request with the same
/// idempotency key (then `pet` is that request's answer, as it was then).
#[derive(Clone, Debug)]
pub struct Created {
    pub pet: StoredPet,
    pub replayed: bool,
}

/// One page of a list: the pets as one JSON array, the id of the last one, and whether at
/// least one more pet matched when the page was read.
#[derive(Clone, Debug)]
pub struct Page {
    pub json: Bytes,
    /// The id of the page's last record, whatever the list's kind.
    pub last_id: Option<i64>,
    /// The last record's sort key (`search::sort_key`), in a list sorted by name.
    pub last_key: Option<String>,
    pub more: bool,
    /// The event feed's newest position in the same read snapshot: following the feed from
    /// here sees every change the page does not.
    pub events: Position,
}

/// Which page of pets: up to `limit` pets after `after` in the order `sort`, only those with
/// `status`, of `category` and matching `search` if given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PageQuery {
    pub status: Option<PetStatus>,
    pub category: Option<CategoryId>,
    pub search: Search,
    pub sort: Sort,
    pub after: Option<After>,
    pub limit: usize,
}

/// Where a page starts: after the pet `id`, and in a list sorted by name after its sort key
/// `key` (as the cursor carries it: the pet may have been renamed since).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct After {
    pub id: PetId,
    pub key: Option<String>,
}

/// Which page of orders: up to `limit` orders after `after` in id order (`Sort::Newest`:
/// descending), only those with `status`, of `pet_id`, and of a pet whose name matches
/// `search` if given.
#[derive(Clone, Debug)]
pub struct OrderQuery {
    pub status: Option<OrderStatus>,
    pub pet_id: Option<PetId>,
    pub search: Search,
    pub sort: Sort,
    pub after: Option<OrderId>,
    pub limit: usize,
}

/// A placed order's outcome: the order, its pet after it (none on a replay), and whether an
/// earlier request with the same Idempotency-Key placed it (then `order` is as it was
/// answered then: `Order::as_placed`).
#[derive(Clone, Debug)]
pub struct Placed {
    pub order: Order,
    /// The API answers the order alone; the contract suite checks the pet through it.
    #[cfg_attr(not(test), expect(dead_code, reason = "read by the contract suite"))]
    pub pet: Option<StoredPet>,
    pub replayed: bool,
}

/// An order after a change of status, and its pet after the same transaction.
#[derive(Clone, Debug)]
pub struct Moved {
    pub order: Order,
    /// As `Placed::pet`.
    #[cfg_attr(not(test), expect(dead_code, reason = "read by the contract suite"))]
    pub pet: StoredPet,
}

/// Pets by status, as kept in the write transaction: exact at one read snapshot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Inventory {
    pub available: u64,
    pub pending: u64,
    pub sold: u64,
    /// Pets without a status.
    pub unset: u64,
}

impl Inventory {
    pub fn total(&self) -> u64 {
        self.available + self.pending + self.sold + self.unset
    }

    /// The count of pets with `status` (`None`: without one).
    pub fn count_mut(&mut self, status: Option<PetStatus>) -> &mut u64 {
        match status {
            Some(PetStatus::Available) => &mut self.available,
            Some(PetStatus::Pending) => &mut self.pending,
            Some(PetStatus::Sold) => &mut self.sold,
            None => &mut self.unset,
        }
    }
}

/// How a batch moves the inventory's counters: one more or one less of each status. Signed,
/// applied once at the end of the transaction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InventoryDelta {
    pub available: i64,
    pub pending: i64,
    pub sold: i64,
    pub unset: i64,
}

impl InventoryDelta {
    /// A pet moved from `from` to `to` (`None` as the outer option: it did not exist before,
    /// or no longer does after).
    pub fn moved(&mut self, from: Option<Option<PetStatus>>, to: Option<Option<PetStatus>>) {
        if let Some(from) = from {
            *self.count_mut(from) -= 1;
        }
        if let Some(to) = to {
            *self.count_mut(to) += 1;
        }
    }

    fn count_mut(&mut self, status: Option<PetStatus>) -> &mut i64 {
        match status {
            Some(PetStatus::Available) => &mut self.available,
            Some(PetStatus::Pending) => &mut self.pending,
            Some(PetStatus::Sold) => &mut self.sold,
            None => &mut self.unset,
        }
    }

    pub fn is_zero(&self) -> bool {
        *self == InventoryDelta::default()
    }

    /// Each status with its change, in the order of `STATUS_KEYS`.
    pub fn each(&self) -> [(Option<PetStatus>, i64); 4] {
        [
            (Some(PetStatus::Available), self.available),
            (Some(PetStatus::Pending), self.pending),
            (Some(PetStatus::Sold), self.sold),
            (None, self.unset),
        ]
    }
}

/// An export under way: its chunks' size, the Unix time records must outlive, and where its
/// chunks go.
pub(crate) struct Exporting {
    pub(crate) chunk: usize,
    pub(crate) now: u64,
    pub(crate) into: tokio::sync::mpsc::Sender<Result<Chunk, StoreError>>,
}

/// What a change requires of the pet's current revision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Precondition {
    /// Any revision: the pet only has to exist.
    None,
    /// One of these revisions (none at all: never).
    RevisionIn(Vec<u64>),
}

impl Precondition {
    pub(crate) fn allows(&self, revision: u64) -> bool {
        match self {
            Precondition::None => true,
            Precondition::RevisionIn(revisions) => revisions.contains(&revision),
        }
    }
}

/// Why the store could not do what was asked, by meaning rather than by backend: an answer
/// about the data (not found, a conflict), a state that may pass (unavailable), or a fault.
#[derive(Clone, Debug)]
pub enum StoreError {
    /// No record of this kind has this id.
    NotFound(Subject),
    /// Conflict: an order asked for a pet that is not `available` (its status, if any).
    PetNotAvailable {
        pet: PetId,
        status: Option<PetStatus>,
    },
    /// Conflict: a placed order holds the pet, so its status stays and it stays.
    PetReserved { pet: PetId, order: OrderId },
    /// Conflict: the order is not in a state that allows the action.
    InvalidTransition {
        order: OrderId,
        action: OrderAction,
        refused: Refused,
    },
    /// Conflict: another category has this name (ignoring case).
    NameTaken(String),
    /// Conflict: pets name this category.
    CategoryInUse(CategoryId),
    /// Conflict: the pet is not at a revision the precondition allows; nothing was changed.
    PreconditionFailed,
    /// Conflict: the idempotency key answered a create with another pet.
    IdempotencyKeyReused,
    /// Conflict: a create with this idempotency key has not finished yet.
    IdempotencyKeyInFlight,
    /// Unavailable: the store is shutting down and takes no more writes.
    Closed,
    /// Unavailable: every int64 id has been used.
    IdsExhausted,
    /// Unavailable: a write failed on I/O and the database is not open again yet.
    Reopening,
    /// Unavailable: the medium failed (a disk error, a lost connection); nothing was changed.
    Io(String),
    /// Unavailable: the write-ahead log has no room for the batch (a full disk); nothing was
    /// stored, and writes resume once room is made.
    NoRoom(String),
    /// At start, in a reopen and in `check`: the write-ahead log the redb file names is
    /// missing, of another file, cut short or broken; the text says what was found and what to
    /// do.
    LogLost(String),
    /// Unavailable, outcome unknown: the commit itself failed (a sync the disk refused, a
    /// connection lost during COMMIT), so the write may or may not be stored, whole either way.
    /// A retry with the same Idempotency-Key finds out which.
    InDoubt(String),
    /// This store has no such operation (a snapshot of PostgreSQL).
    Unsupported(String),
    /// At start and in `check`: a file of an earlier petstore that this one no longer opens;
    /// the text says what to do.
    OlderFile(String),
    /// Unavailable: a concurrent transaction got in the way (a serialization failure, a
    /// deadlock); nothing was changed, and the same write may succeed at once.
    Contended(String),
    /// Unavailable, and fatal at start: the database refused our credentials.
    Refused(String),
    /// Fault: stored data that does not read back, or an engine error that is not the medium's.
    Corrupt(String),
    /// At start: another process has the database open.
    Locked,
    /// At start: the database was written by a newer petstore.
    NewerSchema { found: u64, supported: u64 },
    /// A copy's target already holds data: pets, idempotency records, or ids given out.
    NotEmpty {
        pets: u64,
        records: u64,
        next_id: u64,
    },
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::NotFound(Subject { kind, id }) => {
                write!(f, "no {} has id {id}", kind.name())
            }
            StoreError::PetNotAvailable { pet, status } => match status {
                Some(status) => write!(f, "pet {pet} is {}, not available", status.as_str()),
                None => write!(f, "pet {pet} has no status, so it is not available"),
            },
            StoreError::PetReserved { pet, order } => write!(
                f,
                "pet {pet} is held by order {order}: complete or cancel the order first"
            ),
            StoreError::InvalidTransition {
                order,
                action,
                refused,
            } => match refused {
                Refused::NotPlaced(status) => write!(
                    f,
                    "order {order} is {}, which allows no change: only a placed order can be \
                     completed or cancelled (asked: {})",
                    status.as_str(),
                    action.name()
                ),
                Refused::HoldEnded(at_ms) => write!(
                    f,
                    "order {order} is placed but its hold ended at {}: it can only be \
                     cancelled, or it expires",
                    clock::rfc3339(
                        std::time::UNIX_EPOCH + std::time::Duration::from_millis(*at_ms),
                        Precision::Millis
                    )
                ),
            },
            StoreError::NameTaken(name) => write!(f, "a category named {name:?} exists"),
            StoreError::CategoryInUse(id) => write!(
                f,
                "pets name category {id}: move them to another category first"
            ),
            StoreError::PreconditionFailed => f.write_str("the pet is at another revision"),
            StoreError::IdempotencyKeyReused => {
                f.write_str("the idempotency key was used for another pet")
            }
            StoreError::IdempotencyKeyInFlight => {
                f.write_str("a create with this idempotency key is in flight")
            }
            StoreError::Closed => f.write_str("the store is closed"),
            StoreError::IdsExhausted => f.write_str("every pet id has been used"),
            StoreError::Reopening => {
                f.write_str("the database is being reopened after a failed write")
            }
            StoreError::Io(e) => write!(f, "storage I/O failed: {e}"),
            StoreError::InDoubt(e) => {
                write!(f, "the commit failed and its outcome is unknown: {e}")
            }
            StoreError::Unsupported(what) => write!(f, "not supported by this store: {what}"),
            StoreError::OlderFile(what) | StoreError::LogLost(what) => f.write_str(what),
            StoreError::NoRoom(what) => write!(f, "no room to store the write: {what}"),
            StoreError::Contended(e) => write!(f, "a concurrent transaction got in the way: {e}"),
            StoreError::Refused(e) => write!(
                f,
                "the database refused authentication: {e}; check the user in --db and the \
                 password in --db-password-file"
            ),
            StoreError::Corrupt(what) => write!(f, "stored data is corrupt: {what}"),
            StoreError::Locked => f.write_str("the database is in use by another process"),
            StoreError::NewerSchema { found, supported } => write!(
                f,
                "the database has schema version {found}, newer than the {supported} this petstore understands"
            ),
            StoreError::NotEmpty {
                pets,
                records,
                next_id,
            } => write!(
                f,
                "the database is not empty: it holds {pets} pets and {records} idempotency \
                 records, and its next id is {next_id}"
            ),
        }
    }
}

impl std::error::Error for StoreError {}

/// One change as a batch committed it, what its event tells, for whoever listens to the store
/// (`Store::subscribe`): what happened, to which record, that record's JSON after it, and the
/// pet as it left it where the event carries one (a pet's change, an order's).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    pub kind: EventType,
    /// The record changed: a pet, an order or a category.
    pub subject: Subject,
    /// The pet after the change, for a pet's change and an order's.
    pub pet: Option<PetState>,
    /// An order's or a category's JSON after the change: `None` once a category is deleted,
    /// and for a pet's change (its JSON is `pet`'s).
    pub json: Option<Bytes>,
}

/// A pet as a change left it: its revision after the change (or the one it was deleted at)
/// and its JSON (`None` once deleted).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PetState {
    pub id: PetId,
    pub revision: u64,
    pub json: Option<Bytes>,
}

impl Change {
    /// A pet created (revision 1), changed, or deleted (`pet` none).
    pub fn pet(id: PetId, revision: u64, pet: Option<Bytes>) -> Change {
        let kind = match (&pet, revision) {
            (None, _) => EventType::PetDeleted,
            (Some(_), 1) => EventType::PetCreated,
            (Some(_), _) => EventType::PetUpdated,
        };
        Change {
            kind,
            subject: Subject::pet(id),
            pet: Some(PetState {
                id,
                revision,
                json: pet,
            }),
            json: None,
        }
    }

    /// An order placed or moved, with its pet after the same transaction.
    pub fn order(order: &Order, pet: &StoredPet) -> Change {
        Change {
            kind: EventType::of_order(order.status),
            subject: Subject::order(order.id),
            pet: Some(PetState {
                id: pet.id,
                revision: pet.revision,
                json: Some(pet.json.clone()),
            }),
            json: Some(Bytes::from(order.to_json())),
        }
    }

    /// A category created, renamed, or deleted (`category` none).
    pub fn category(kind: EventType, id: CategoryId, category: Option<&Category>) -> Change {
        Change {
            kind,
            subject: Subject::category(id),
            pet: None,
            json: category.map(|c| Bytes::from(c.to_json())),
        }
    }
}

/// Every change one committed transaction made, in the order its writes ran; batches are
/// published in commit order.
pub type Settled = std::sync::Arc<[Change]>;

/// A page assembled from already-encoded objects: the first `limit` pushed go in, one more
/// only says that the list goes on.
pub(crate) struct PageBuilder {
    array: BytesMut,
    limit: usize,
    count: usize,
    last_id: Option<i64>,
    last_key: Option<String>,
    more: bool,
}

impl PageBuilder {
    pub(crate) fn new(limit: usize) -> PageBuilder {
        let mut array = BytesMut::with_capacity(2048);
        array.put_u8(b'[');
        PageBuilder {
            array,
            limit,
            count: 0,
            last_id: None,
            last_key: None,
            more: false,
        }
    }

    /// `push`, in a list sorted by name: `key` is the record's sort key.
    pub(crate) fn push_keyed(&mut self, id: PetId, object: &[u8], key: &str) {
        if self.count < self.limit {
            self.last_key = Some(key.to_owned());
        }
        self.push(id, object);
    }

    /// Whether the page has all it takes (one more than a page, to tell whether one follows).
    pub(crate) fn is_full(&self) -> bool {
        self.more
    }

    pub(crate) fn push(&mut self, id: PetId, object: &[u8]) {
        if self.count == self.limit {
            self.more = true;
            return;
        }
        if self.count > 0 {
            self.array.put_u8(b',');
        }
        self.array.extend_from_slice(object);
        self.count += 1;
        self.last_id = Some(id);
    }

    pub(crate) fn finish(mut self) -> Page {
        self.array.put_u8(b']');
        Page {
            json: self.array.freeze(),
            last_id: self.last_id,
            last_key: self.last_key,
            more: self.more,
            events: Position { feed: 0, seq: 0 },
        }
    }
}

impl Page {
    pub(crate) fn empty() -> Page {
        PageBuilder::new(0).finish()
    }

    /// The page, read at the feed's position `events`.
    pub(crate) fn at(mut self, events: Position) -> Page {
        self.events = events;
        self
    }
}

/// Bytes of a SHA-256 digest that a stored idempotency record keeps of its scope and of its
/// fingerprint, in both backends: 128 bits make a collision between two live keys, or two
/// bodies under one key, as unlikely as guessing a random key.
pub(crate) const SHORT_DIGEST: usize = 16;

/// A digest cut to what a stored record keeps.
pub(crate) fn short(digest: [u8; 32]) -> [u8; SHORT_DIGEST] {
    let mut cut = [0; SHORT_DIGEST];
    cut.copy_from_slice(&digest[..SHORT_DIGEST]);
    cut
}

/// A stored idempotency record, as either backend finds it by its scope. The first answer is
/// not stored: see `answer`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Record {
    pub(crate) fingerprint: [u8; SHORT_DIGEST],
    pub(crate) expires_at: u64,
    pub(crate) id: PetId,
}

impl Record {
    /// The answer this record gives a create of `pet` under `key` at `now`: none once it has
    /// expired, the first create's answer for the same fingerprint, `IdempotencyKeyReused` for
    /// another. The same fingerprint is the same pet (`NewPet::canonical_json`), so the first
    /// answer is that pet under the recorded id, at revision 1; it is rebuilt, not stored.
    pub(crate) fn answer(
        &self,
        key: &IdempotencyKey,
        pet: &NewPet,
        now: u64,
    ) -> Option<Result<Created, StoreError>> {
        if self.expires_at <= now {
            return None;
        }
        if self.fingerprint != short(key.fingerprint()) {
            return Some(Err(StoreError::IdempotencyKeyReused));
        }
        Some(Ok(Created {
            pet: StoredPet {
                id: self.id,
                revision: 1,
                json: Bytes::from(pet.clone().into_pet(self.id).to_json()),
            },
            replayed: true,
        }))
    }
}

impl Record {
    /// The order a live record names for a place of an order under `key` at `now`: none once
    /// it has expired, `IdempotencyKeyReused` when the key was sent with another body (or for
    /// a pet).
    pub(crate) fn order_answer(
        &self,
        key: &IdempotencyKey,
        now: u64,
    ) -> Option<Result<OrderId, StoreError>> {
        if self.expires_at <= now {
            return None;
        }
        match self.subject() {
            Subject {
                kind: Kind::Order,
                id,
            } if self.fingerprint == short(key.fingerprint()) => Some(Ok(id)),
            _ => Some(Err(StoreError::IdempotencyKeyReused)),
        }
    }

    /// What the record answers with: a pet or an order (`record_id`).
    pub(crate) fn subject(&self) -> Subject {
        if self.id < 0 {
            Subject::order(-self.id)
        } else {
            Subject::pet(self.id)
        }
    }
}

/// The id an idempotency record keeps for `subject`, in the one table of records of every
/// kind: a pet's id as it is, an order's negated (ids are positive, so the two never meet).
/// No other kind keeps records: one that takes an Idempotency-Key needs a place of its own
/// here (and a layout that says so).
pub(crate) fn record_id(subject: Subject) -> Result<i64, StoreError> {
    match subject.kind {
        Kind::Pet => Ok(subject.id),
        Kind::Order => Ok(-subject.id),
        _ => Err(StoreError::Corrupt(format!(
            "{subject} was given an idempotency record"
        ))),
    }
}

/// An idempotency record as a copy carries it from one store to another, whatever either
/// keeps: the scope it answers for and what it answers with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdempotencyRecord {
    /// A digest of the API key and the Idempotency-Key, cut to `SHORT_DIGEST` bytes.
    pub scope: [u8; SHORT_DIGEST],
    /// A digest of the pet the first create asked for, cut the same way.
    pub fingerprint: [u8; SHORT_DIGEST],
    /// Unix seconds from which the record answers nothing.
    pub expires_at: u64,
    pub pet_id: PetId,
}

/// A piece of a store in transit: an export yields every pet in ascending id order, in chunks,
/// then every live idempotency record, then the records of every other resource, a resource at
/// a time in `each_resource`'s order, each in id order, in chunks.
#[derive(Debug)]
pub enum Chunk {
    Pets(Vec<StoredPet>),
    Records(Vec<IdempotencyRecord>),
    Rows(Rows),
}

/// Records of one resource other than pets, in their stored form (`Resource::encode`).
#[derive(Debug)]
pub struct Rows {
    pub kind: Kind,
    /// Each record's id and stored form, in id order.
    pub records: Vec<(i64, Vec<u8>)>,
}

/// Pet `id` from the JSON a store keeps of it; `Corrupt` if it does not read back.
pub(crate) fn read_pet(id: PetId, json: &[u8]) -> Result<crate::pet::Pet, StoreError> {
    crate::pet::Pet::from_json(json)
        .map_err(|e| StoreError::Corrupt(format!("pet {id} does not read back: {e}")))
}
