//! The store interface: what the service needs of a pet database (create, get, list a page
//! after a cursor, patch, delete, idempotency records, health, close), what `petstore copy`
//! needs (a whole-store export, a bulk import into an empty store), its result types and
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
pub use redb::backup::backup_live as backup_redb;
pub use redb::check::{STATUSES, check_file as check_redb};
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
#[derive(Clone, Debug)]
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
    /// The embedded redb file, with a page cache of at most `cache_bytes`. `shared`: other
    /// processes may open it read-only while this one writes (`petstore backup` and `check`
    /// beside a server); without it the file is this process's alone.
    Redb {
        path: PathBuf,
        cache_bytes: usize,
        shared: bool,
    },
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
        on_backend!(Backend; $store, $backend => $call)
    };
    ($kind:ident; $store:expr, $backend:ident => $call:expr) => {
        match $store {
            $kind::Redb($backend) => $call,
            $kind::Postgres($backend) => $call,
        }
    };
}

impl Store {
    /// Opens (or creates) the store at `location`. Returns the store and the number of pets
    /// it holds.
    pub async fn open(location: Location, tuning: Tuning) -> Result<(Store, u64), StoreError> {
        match location {
            Location::Redb {
                path,
                cache_bytes,
                shared,
            } => {
                let (store, pets) = redb::RedbStore::open_as(&path, cache_bytes, shared, tuning)?;
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

    /// The pet with this id. The reads on PostgreSQL are boxed: their futures are KiBs long,
    /// and inline they would lengthen every request's future on redb too, which HTTP/2 copies
    /// into each stream's task.
    pub async fn get(&self, id: PetId) -> Result<Option<StoredPet>, StoreError> {
        match &self.0 {
            Backend::Redb(store) => store.get(id).await,
            Backend::Postgres(store) => Box::pin(store.get(id)).await,
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
            Backend::Postgres(store) => Box::pin(store.list(status, after, limit)).await,
        }
    }

    /// Pets per status (`None`: pets without one). Reads every pet's index entry: for the
    /// metrics, which bound how often they ask.
    pub async fn count_by_status(&self) -> Result<Vec<(Option<PetStatus>, u64)>, StoreError> {
        on_backend!(&self.0, store => store.count_by_status().await)
    }

    /// Whether the store can serve now.
    pub async fn check(&self) -> Result<(), StoreError> {
        match &self.0 {
            Backend::Redb(store) => store.check().await,
            Backend::Postgres(store) => Box::pin(store.check()).await,
        }
    }

    /// Writes a consistent copy of the whole store, one read transaction's, into a new redb
    /// file at `to` (which must not exist) and makes it durable; returns its number of pets.
    /// Blocking, for a thread of its own; writes never wait for it. Stops early with `Closed`
    /// once `cancel` is set. Only the redb store has one: PostgreSQL has its own tools.
    pub fn snapshot_to(
        &self,
        to: &std::path::Path,
        cancel: &std::sync::atomic::AtomicBool,
    ) -> Result<u64, StoreError> {
        match &self.0 {
            Backend::Redb(store) => store.snapshot_to(to, cancel),
            Backend::Postgres(_) => Err(StoreError::Corrupt(
                "snapshots are for the redb store; use PostgreSQL's own backup tools".into(),
            )),
        }
    }

    /// Finishes the writes already queued and closes the store; later calls get `Closed`.
    pub async fn close(self) {
        on_backend!(self.0, store => store.close().await)
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

/// A streaming read of a whole store from one snapshot, for a copy: the id counter, then the
/// chunks as the backend reads them; it reads ahead of the consumer by a chunk or two.
pub struct Export {
    /// The id the next create would get: above every id ever given, deleted pets' included.
    pub next_id: u64,
    chunks: tokio::sync::mpsc::Receiver<Result<Chunk, StoreError>>,
}

impl Export {
    /// The next chunk; `None` once the whole store has been read. An error ends the export.
    pub async fn next(&mut self) -> Option<Result<Chunk, StoreError>> {
        self.chunks.recv().await
    }
}

/// The status a stored pet's JSON gives it, for the index an import writes beside it.
pub(crate) fn pet_status(pet: &StoredPet) -> Result<Option<PetStatus>, StoreError> {
    crate::pet::Pet::from_json(&pet.json)
        .map(|read| read.status)
        .map_err(|e| StoreError::Corrupt(format!("pet {} does not read back: {e}", pet.id)))
}

/// How far ahead of the consumer an export reads, in chunks.
const EXPORT_AHEAD: usize = 2;

/// A bulk write into an empty store, for a copy: chunks in the order an export yields them,
/// then the id counter with `commit`. Nothing of it survives a crash before `commit`; after a
/// failure, `abort` leaves the store empty.
pub struct Import {
    backend: ImportBackend,
    /// The highest pet id written so far: the counter set at the commit stays above it.
    max_id: Option<PetId>,
}

enum ImportBackend {
    Redb(redb::copy::RedbImport),
    Postgres(postgres::copy::PgImport),
}

impl Store {
    /// Starts a read of every pet (in chunks of up to `chunk` pets, ascending id order), the
    /// id counter and every idempotency record still live at Unix time `now`, all from one
    /// snapshot.
    pub async fn export(&self, chunk: usize, now: u64) -> Result<Export, StoreError> {
        let (sender, chunks) = tokio::sync::mpsc::channel(EXPORT_AHEAD);
        let chunk = chunk.max(1);
        let next_id = on_backend!(&self.0, store => store.export(chunk, now, sender).await)?;
        Ok(Export { next_id, chunks })
    }

    /// Starts a bulk write into this store, which must be empty: no pet, no idempotency record,
    /// no id given out; else `NotEmpty`, and the store is left as it was.
    pub async fn import(&self) -> Result<Import, StoreError> {
        let backend = match &self.0 {
            Backend::Redb(store) => ImportBackend::Redb(store.import().await?),
            Backend::Postgres(store) => ImportBackend::Postgres(store.import().await?),
        };
        Ok(Import {
            backend,
            max_id: None,
        })
    }
}

impl Import {
    /// Writes one chunk: pets go in with their revisions, records as they are.
    pub async fn write(&mut self, chunk: Chunk) -> Result<(), StoreError> {
        if let Chunk::Pets(pets) = &chunk {
            self.max_id = pets.iter().map(|pet| pet.id).chain(self.max_id).max();
        }
        on_backend!(ImportBackend; &mut self.backend, import => import.write(chunk).await)
    }

    /// Sets the id counter to `next_id`, or above the highest id written if that is higher,
    /// and makes everything written durable at once.
    pub async fn commit(self, next_id: u64) -> Result<(), StoreError> {
        let above = self
            .max_id
            .map_or(1, |id| u64::try_from(id).unwrap_or(0).saturating_add(1));
        let next_id = next_id.max(above);
        on_backend!(ImportBackend; self.backend, import => import.commit(next_id).await)
    }

    /// Gives up: the store is left empty, as the import found it.
    pub async fn abort(self) -> Result<(), StoreError> {
        on_backend!(ImportBackend; self.backend, import => import.abort().await)
    }
}
