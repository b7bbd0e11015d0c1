//! The store interface: what the service needs of a pet database (create, get, list a page
//! after a cursor, patch, delete, idempotency records, health, close), its result types and
//! `StoreError`, by meaning. Each backend lives in its own module and no engine type crosses
//! this one: `redb` is the embedded file, the default; `postgres` serves several instances. Invariants every backend keeps: an
//! answer leaves only after its change is durable; ids are unique, never reused, and increase
//! in commit order, so a cursor walk sees every lasting pet once; a pet, its status index
//! entry, its revision and its idempotency record change together or not at all.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};

use crate::pet::{NewPet, PetId, PetPatch, PetStatus};

mod claims;
#[cfg(test)]
mod pg_cluster;
mod postgres;
mod redb;
#[cfg(test)]
mod suite;
mod write;

pub use claims::{IdempotencyKey, KeyClaim};
pub use postgres::connect::{PgTarget, parse as parse_postgres};
pub use write::DEFAULT_MAX_WRITE_BATCH;

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
#[derive(Debug)]
pub struct Page {
    pub json: Bytes,
    pub last_id: Option<PetId>,
    pub more: bool,
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
    /// Fault: stored data that does not read back, or an engine error that is not the medium's.
    Corrupt(String),
    /// At start: another process has the database open.
    Locked,
    /// At start: the database was written by a newer petstore.
    NewerSchema { found: u64, supported: u64 },
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
            StoreError::Corrupt(what) => write!(f, "stored data is corrupt: {what}"),
            StoreError::Locked => f.write_str("the database is in use by another process"),
            StoreError::NewerSchema { found, supported } => write!(
                f,
                "the database has schema version {found}, newer than the {supported} this petstore understands"
            ),
        }
    }
}

impl std::error::Error for StoreError {}
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
        }
    }
}

impl Page {
    pub(crate) fn empty() -> Page {
        PageBuilder::new(0).finish()
    }
}

/// A stored idempotency record, as the PostgreSQL backend keeps it (redb keeps a shorter one:
/// `redb/idempotency.rs`).
pub(crate) struct Record<'a> {
    pub(crate) fingerprint: &'a [u8],
    pub(crate) expires_at: u64,
    pub(crate) id: PetId,
    pub(crate) json: &'a [u8],
}

impl Record<'_> {
    /// The answer this record gives `key` at `now`: none once it has expired, the first
    /// create's pet (at revision 1, as first answered) for the same fingerprint, and
    /// `IdempotencyKeyReused` for another.
    pub(crate) fn answer(
        &self,
        key: &IdempotencyKey,
        now: u64,
    ) -> Option<Result<Created, StoreError>> {
        if self.expires_at <= now {
            return None;
        }
        if self.fingerprint != key.fingerprint() {
            return Some(Err(StoreError::IdempotencyKeyReused));
        }
        Some(Ok(Created {
            pet: StoredPet {
                id: self.id,
                revision: 1,
                json: Bytes::copy_from_slice(self.json),
            },
            replayed: true,
        }))
    }
}

/// A handle to the open store; cheap to clone, shared by every connection.
#[derive(Clone)]
pub struct Store(Backend);

#[derive(Clone)]
enum Backend {
    Redb(redb::RedbStore),
    Postgres(postgres::PgStore),
}

/// Which store to open.
pub enum Location {
    /// The embedded redb file, with a page cache of at most `cache_bytes`.
    Redb { path: PathBuf, cache_bytes: usize },
    /// A PostgreSQL database, shared by any number of instances.
    Postgres(Box<PgTarget>),
}

/// How a store behaves, whatever its backend.
#[derive(Clone, Copy, Debug)]
pub struct Tuning {
    /// How long an idempotency record answers its key.
    pub idempotency_ttl: Duration,
    /// Most queued writes one transaction takes (1: group commit off, for measurements).
    pub max_write_batch: usize,
}

/// Runs the same future on whichever backend the store has.
macro_rules! on_backend {
    ($store:expr, $backend:ident => $call:expr) => {
        match $store {
            Backend::Redb($backend) => $call,
            Backend::Postgres($backend) => $call,
        }
    };
}

impl Store {
    /// Opens (or creates) the store at `location`. Returns the store and the number of pets
    /// it holds.
    pub async fn open(location: Location, tuning: Tuning) -> Result<(Store, u64), StoreError> {
        match location {
            Location::Redb { path, cache_bytes } => {
                let (store, pets) = redb::RedbStore::open(&path, cache_bytes, tuning)?;
                Ok((Store(Backend::Redb(store)), pets))
            }
            Location::Postgres(target) => {
                let (store, pets) = postgres::PgStore::open(*target, tuning).await?;
                Ok((Store(Backend::Postgres(store)), pets))
            }
        }
    }

    /// Claims an idempotency scope for one request, or `IdempotencyKeyInFlight` while another
    /// request holds it. Claimed before the request's body is read, so a retry sent while the
    /// first request is still arriving is told so.
    pub fn claim_key(&self, scope: [u8; 32]) -> Result<KeyClaim, StoreError> {
        on_backend!(&self.0, store => store.claim_key(scope))
    }

    /// Adds a pet; resolves once it is durably committed. With an idempotency key, a live
    /// record for the key answers instead (`replayed`), a record for another pet is
    /// `IdempotencyKeyReused`, and the record is written with the pet.
    pub async fn create(
        &self,
        pet: NewPet,
        key: Option<IdempotencyKey>,
    ) -> Result<Created, StoreError> {
        on_backend!(&self.0, store => store.create(pet, key).await)
    }

    /// Applies `patch` to the pet `id` if its revision meets `precondition`; returns the pet
    /// at its new revision.
    pub async fn patch(
        &self,
        id: PetId,
        patch: PetPatch,
        precondition: Precondition,
    ) -> Result<StoredPet, StoreError> {
        on_backend!(&self.0, store => store.patch(id, patch, precondition).await)
    }

    /// Removes the pet `id` if its revision meets `precondition`.
    pub async fn delete(&self, id: PetId, precondition: Precondition) -> Result<(), StoreError> {
        on_backend!(&self.0, store => store.delete(id, precondition).await)
    }

    /// The pet with this id.
    pub async fn get(&self, id: PetId) -> Result<Option<StoredPet>, StoreError> {
        on_backend!(&self.0, store => store.get(id).await)
    }

    /// Up to `limit` pets with ids above `after`, in ascending id order, only those with
    /// `status` if one is given; `more` says whether another page follows.
    pub async fn list(
        &self,
        status: Option<PetStatus>,
        after: Option<PetId>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        on_backend!(&self.0, store => store.list(status, after, limit).await)
    }

    /// Whether the store can serve now.
    pub async fn check(&self) -> Result<(), StoreError> {
        on_backend!(&self.0, store => store.check().await)
    }

    /// Finishes the writes already queued and closes the store; later calls get `Closed`.
    pub async fn close(self) {
        on_backend!(self.0, store => store.close().await)
    }
}
