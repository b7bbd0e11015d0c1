//! The store's vocabulary, shared by the face (`store/mod.rs`), the write front
//! (`store/write.rs`) and both engines: what a stored pet, a create's outcome, a page and an
//! idempotency record are, what a change may require, what a committed batch publishes, and
//! `StoreError` by meaning. It knows no engine and no HTTP.

use std::fmt;

use bytes::{BufMut, Bytes, BytesMut};

use super::claims::IdempotencyKey;
use crate::event::Position;
use crate::pet::{NewPet, PetId, PetStatus};

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
    pub last_id: Option<PetId>,
    pub more: bool,
    /// The event feed's newest position in the same read snapshot: following the feed from
    /// here sees every change the page does not.
    pub events: Position,
}

/// Which page of a list: up to `limit` pets with ids above `after`, in ascending id order,
/// only those with `status` if one is given.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PageQuery {
    pub(crate) status: Option<PetStatus>,
    pub(crate) after: Option<PetId>,
    pub(crate) limit: usize,
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
    /// No pet has this id.
    NotFound(PetId),
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
    /// Unavailable, outcome unknown: the commit itself failed (a sync the disk refused, a
    /// connection lost during COMMIT), so the write may or may not be stored, whole either way.
    /// A retry with the same Idempotency-Key finds out which.
    InDoubt(String),
    /// This store has no such operation (a snapshot of PostgreSQL).
    Unsupported(String),
    /// At start: the file expects the write-ahead log of an earlier petstore, which is gone;
    /// the text says what to do.
    MissingLog(String),
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
            StoreError::NotFound(id) => write!(f, "no pet has id {id}"),
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
            StoreError::MissingLog(what) => f.write_str(what),
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

/// One pet's change as a batch committed it, for whoever listens to the store (`Store::
/// subscribe`): the pet's revision after the change and its JSON object, or `None` once
/// deleted (then `revision` is the one it was deleted at).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    pub id: PetId,
    pub revision: u64,
    pub pet: Option<Bytes>,
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
    last_id: Option<PetId>,
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
            more: false,
        }
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
/// then every live idempotency record, in chunks.
#[derive(Debug)]
pub enum Chunk {
    Pets(Vec<StoredPet>),
    Records(Vec<IdempotencyRecord>),
}

/// The status a stored pet's JSON gives it, for the index an import writes beside it.
pub(crate) fn pet_status(pet: &StoredPet) -> Result<Option<PetStatus>, StoreError> {
    crate::pet::Pet::from_json(&pet.json)
        .map(|read| read.status)
        .map_err(|e| StoreError::Corrupt(format!("pet {} does not read back: {e}", pet.id)))
}
