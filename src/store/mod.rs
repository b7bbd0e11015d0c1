//! The store interface: what the service needs of a pet database (create, get, list a page
//! after a cursor, patch, delete, idempotency records, health, close), its result types and
//! `StoreError`, by meaning. Each backend lives in its own module and no engine type crosses
//! this one: `redb` is the embedded file, the default. Invariants every backend keeps: an
//! answer leaves only after its change is durable; ids are unique, never reused, and increase
//! in commit order, so a cursor walk sees every lasting pet once; a pet, its status index
//! entry, its revision and its idempotency record change together or not at all.

use std::fmt;
use std::path::Path;
use std::time::Duration;

use bytes::Bytes;

use crate::pet::{NewPet, PetId, PetPatch, PetStatus};

mod claims;
#[cfg(test)]
pub mod pg_cluster;
mod redb;

pub use claims::{IdempotencyKey, KeyClaim};

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
/// A handle to the open store; cheap to clone, shared by every connection.
#[derive(Clone)]
pub struct Store(Backend);

#[derive(Clone)]
enum Backend {
    Redb(redb::RedbStore),
}

impl Store {
    /// Opens (or creates) the redb database at `path` with a page cache of at most
    /// `cache_bytes`; idempotency records answer for `idempotency_ttl`. Returns the store and
    /// the number of pets it holds.
    pub fn open(
        path: &Path,
        cache_bytes: usize,
        idempotency_ttl: Duration,
    ) -> Result<(Store, u64), StoreError> {
        let (store, pets) = redb::RedbStore::open(path, cache_bytes, idempotency_ttl)?;
        Ok((Store(Backend::Redb(store)), pets))
    }

    /// Claims an idempotency scope for one request, or `IdempotencyKeyInFlight` while another
    /// request holds it. Claimed before the request's body is read, so a retry sent while the
    /// first request is still arriving is told so.
    pub fn claim_key(&self, scope: [u8; 32]) -> Result<KeyClaim, StoreError> {
        match &self.0 {
            Backend::Redb(store) => store.claim_key(scope),
        }
    }

    /// Adds a pet; resolves once it is durably committed. With an idempotency key, a live
    /// record for the key answers instead (`replayed`), a record for another pet is
    /// `IdempotencyKeyReused`, and the record is written with the pet.
    pub async fn create(
        &self,
        pet: NewPet,
        key: Option<IdempotencyKey>,
    ) -> Result<Created, StoreError> {
        match &self.0 {
            Backend::Redb(store) => store.create(pet, key).await,
        }
    }

    /// Applies `patch` to the pet `id` if its revision meets `precondition`; returns the pet
    /// at its new revision.
    pub async fn patch(
        &self,
        id: PetId,
        patch: PetPatch,
        precondition: Precondition,
    ) -> Result<StoredPet, StoreError> {
        match &self.0 {
            Backend::Redb(store) => store.patch(id, patch, precondition).await,
        }
    }

    /// Removes the pet `id` if its revision meets `precondition`.
    pub async fn delete(&self, id: PetId, precondition: Precondition) -> Result<(), StoreError> {
        match &self.0 {
            Backend::Redb(store) => store.delete(id, precondition).await,
        }
    }

    /// The pet with this id.
    pub async fn get(&self, id: PetId) -> Result<Option<StoredPet>, StoreError> {
        match &self.0 {
            Backend::Redb(store) => store.get(id).await,
        }
    }

    /// Up to `limit` pets with ids above `after`, in ascending id order, only those with
    /// `status` if one is given; `more` says whether another page follows.
    pub async fn list(
        &self,
        status: Option<PetStatus>,
        after: Option<PetId>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        match &self.0 {
            Backend::Redb(store) => store.list(status, after, limit).await,
        }
    }

    /// Whether the store can serve now.
    pub async fn check(&self) -> Result<(), StoreError> {
        match &self.0 {
            Backend::Redb(store) => store.check().await,
        }
    }

    /// Finishes the writes already queued and closes the store; later calls get `Closed`.
    pub async fn close(self) {
        match self.0 {
            Backend::Redb(store) => store.close().await,
        }
    }
}
