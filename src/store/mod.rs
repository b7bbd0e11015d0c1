//! The store's face: what the service needs of a pet database (create, get, list a page
//! after a cursor, patch, delete, idempotency keys, health, close, a feed of what committed),
//! what `petstore copy` needs (a whole-store export, a bulk import into an empty store) and
//! which store to open. Its vocabulary is `store/model.rs`; every write is a rule of `store/ops/`
//! (`Store::write`) through the one write front, `store/write.rs`; the engines under it are `redb` (the embedded file, the
//! default) and `postgres` (for several instances), and no engine type crosses this module.
//! Invariants every engine keeps: an answer leaves only after its change is durable; ids are
//! unique, never reused, and increase in commit order, so a cursor walk sees every lasting pet
//! once; a pet, its status index entry, its revision and its idempotency record change
//! together or not at all.

use std::path::PathBuf;
use std::time::Instant;

use crate::category::{Category, CategoryId};
use crate::order::{NewOrder, Order, OrderId};
use crate::pet::{NewPet, PetId};
use model::Record;

mod claims;
pub(crate) mod events;
pub(crate) mod model;
pub(crate) mod ops;
mod postgres;
mod redb;
mod resource;
pub(crate) mod sessions;
#[cfg(test)]
mod suite;
mod txn;
pub(crate) mod webhooks;
mod write;

pub use claims::{IdempotencyKey, KeyClaim};
pub use events::{EventPage, EventQuery, FeedState, ReadError, StoredEvent};
pub use model::{
    After, Chunk, Created, Inventory, OrderQuery, Page, PageQuery, Placed, Precondition, Settled,
    StoreError, StoredPet,
};
pub use postgres::connect::{PgTarget, parse as parse_postgres};
pub use resource::NextIds;
pub use sessions::{SessionRecord, SessionsGone};
pub use webhooks::WebhookState;
pub use write::{DEFAULT_EVENTS_KEEP, DEFAULT_MAX_WRITE_BATCH, DEFAULT_ORDER_HOLD, Tuning};
use write::{Front, Runs};

/// What only the redb file has, for the `backup` and `check` subcommands: PostgreSQL has its
/// own tools for both.
pub mod redb_file {
    pub use super::redb::backup::backup_live as backup;
    pub use super::redb::check::{STATUSES, check_file as check};
    pub use super::redb::handle::install_panic_hook;
    pub use super::redb::webhooks::states_in_file as webhook_states;
}

/// What `petstore webhooks list` reads of a PostgreSQL database, without opening the store.
pub mod postgres_db {
    pub use super::postgres::states_in_database as webhook_states;
}

/// The same read on whichever engine is open: `store` names it. PostgreSQL's futures are
/// boxed: they are KiBs long, and inline they would lengthen every request's future on redb
/// too, which HTTP/2 copies into each stream's task.
macro_rules! on_engine {
    ($self:ident, $store:ident => $read:expr) => {
        match &$self.backend {
            Backend::Redb($store) => $read.await,
            Backend::Postgres($store) => Box::pin($read).await,
        }
    };
}

/// `on_engine!`, with a failure after `close` told as `Closed` (`Store::closed_or`).
macro_rules! read {
    ($self:ident, $store:ident => $read:expr) => {
        on_engine!($self, $store => $read).map_err(|e| $self.closed_or(e))
    };
}

/// A handle to the open store; cheap to clone, shared by every connection.
#[derive(Clone)]
pub struct Store {
    front: Front,
    backend: Backend,
}

/// The read side of each engine.
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
    /// Opens (or creates) the store at `location` and starts its write front. Returns the
    /// store and the number of pets it holds.
    pub async fn open(location: Location, tuning: Tuning) -> Result<(Store, u64), StoreError> {
        match location {
            Location::Redb {
                path,
                cache_bytes,
                shared,
            } => {
                let (store, writer, pets) = redb::open(&path, cache_bytes, shared)?;
                // redb blocks on the disk: its batches run on a thread of their own, and a
                // write waits for its answer however long the disk takes.
                let front = Front::start(writer, tuning, None, Runs::OnThread("petstore-writer"))?;
                let backend = Backend::Redb(store);
                Ok((Store { front, backend }, pets))
            }
            Location::Postgres(target) => {
                let (store, writer, pets) = postgres::PgStore::open(*target).await?;
                let within = Some(postgres::ANSWER_WITHIN);
                let front = Front::start(writer, tuning, within, Runs::OnRuntime)?;
                let backend = Backend::Postgres(store);
                Ok((Store { front, backend }, pets))
            }
        }
    }

    /// Claims an idempotency scope for one request, or `IdempotencyKeyInFlight` while another
    /// request holds it. Claimed before the request's body is read, so a retry sent while the
    /// first request is still arriving is told so.
    pub fn claim_key(&self, scope: [u8; 32]) -> Result<KeyClaim, StoreError> {
        self.front.claim_key(scope)
    }

    /// Runs a resource's write (`store/ops/`) in the next batch; resolves once it is durably
    /// committed, with what it answers.
    pub(crate) async fn write<R: ops::Rule>(&self, rule: R) -> Result<R::Answer, StoreError>
    where
        ops::Write: From<ops::Job<R>>,
    {
        self.front.write(rule).await
    }

    /// Adds a pet; resolves once it is durably committed. With an idempotency key, a live
    /// record for the key answers instead (`replayed`), a record for another pet is
    /// `IdempotencyKeyReused`, and the record is written with the pet.
    pub async fn create(
        &self,
        pet: NewPet,
        key: Option<IdempotencyKey>,
    ) -> Result<Created, StoreError> {
        let started = Instant::now();
        let answer = |record: Record, key: &IdempotencyKey, now| record.answer(key, &pet, now);
        let keyed = match self.keyed(started, key, answer).await? {
            Ok(keyed) => keyed,
            Err(answer) => return Ok(answer),
        };
        self.front
            .write_since(started, ops::CreatePet { pet, keyed })
            .await
    }

    /// The key a keyed write carries into its batch (none without one), or what the engine's
    /// live record of its scope answers instead (`Front::keyed`); the engine checks again in
    /// its transaction.
    async fn keyed<A>(
        &self,
        started: Instant,
        key: Option<IdempotencyKey>,
        answer: impl FnOnce(Record, &IdempotencyKey, u64) -> Option<Result<A, StoreError>>,
    ) -> Result<Result<Option<claims::Keyed>, A>, StoreError> {
        let Some(key) = key else {
            return Ok(Ok(None));
        };
        let scope = key.scope();
        let record = async move {
            match &self.backend {
                Backend::Redb(store) => Ok(store.record(&scope)),
                Backend::Postgres(store) => Box::pin(store.record(&scope)).await,
            }
        };
        Ok(self
            .front
            .keyed(started, key, record, answer)
            .await?
            .map(Some))
    }

    /// Places an order for a pet that is `available`: in one transaction the order is stored
    /// and the pet becomes `pending`. With an idempotency key, a live record for the key
    /// answers instead (`replayed`, the order as it was placed), a record for another body is
    /// `IdempotencyKeyReused`, and the record is written with the order.
    pub async fn place_order(
        &self,
        order: NewOrder,
        key: Option<IdempotencyKey>,
    ) -> Result<Placed, StoreError> {
        let started = Instant::now();
        let answer = |record: Record, key: &IdempotencyKey, now| record.order_answer(key, now);
        let keyed = match self.keyed(started, key, answer).await? {
            Ok(keyed) => keyed,
            Err(id) => return self.replayed(id).await,
        };
        let hold = self.front.order_hold();
        let place = ops::PlaceOrder { order, keyed, hold };
        self.front.write_since(started, place).await
    }

    /// What a live idempotency record answers a retried order: order `id` as it was placed.
    async fn replayed(&self, id: OrderId) -> Result<Placed, StoreError> {
        let order = self.get_order(id).await?.ok_or_else(|| {
            StoreError::Corrupt(format!("order {id} has a record but is missing"))
        })?;
        Ok(Placed {
            order: order.as_placed(),
            pet: None,
            replayed: true,
        })
    }

    pub async fn get_order(&self, id: OrderId) -> Result<Option<Order>, StoreError> {
        self.get_record(id).await
    }

    /// A page of orders as the API sends it (`Page::json` holds their JSON objects).
    pub async fn list_orders(&self, query: OrderQuery) -> Result<Page, StoreError> {
        read!(self, store => store.list_orders(query))
    }

    /// Pets by status, exact at one read snapshot, read from counters the writes keep.
    pub async fn inventory(&self) -> Result<Inventory, StoreError> {
        read!(self, store => store.inventory())
    }

    /// Removes the events from before `before_ms`, as the purge does when they are older than
    /// `--events-keep`.
    #[cfg(test)]
    pub async fn trim_events(&self, before_ms: u64) -> Result<usize, StoreError> {
        self.front.trim(before_ms).await
    }

    /// Expires the placed orders whose hold ended by `now_ms` now, as the once-a-second loop
    /// does; answers how many. For tests, which cannot wait for the loop.
    #[cfg(test)]
    pub async fn expire_holds(&self, now_ms: u64) -> Result<usize, StoreError> {
        self.front.expire(now_ms).await
    }

    pub async fn get_category(&self, id: CategoryId) -> Result<Option<Category>, StoreError> {
        self.get_record(id).await
    }

    /// Up to `limit` categories with ids above `after`, in ascending id order.
    pub async fn list_categories(
        &self,
        after: Option<CategoryId>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        self.list_records::<Category>(after, limit).await
    }

    /// Stores `stored` as order `id`'s record, past every rule (`RedbStore::damage_order`).
    #[cfg(test)]
    pub(crate) async fn damage_order(&self, id: OrderId, stored: &str) {
        match &self.backend {
            Backend::Redb(store) => store.damage_order(id, stored.as_bytes()),
            Backend::Postgres(store) => store.damage_order(id, stored).await,
        }
    }

    /// Record `id` of any declared resource (`store/resource.rs`) but pets, which are read
    /// with their revision (`get`).
    pub(crate) async fn get_record<R: resource::Resource>(
        &self,
        id: i64,
    ) -> Result<Option<R>, StoreError> {
        read!(self, store => store.get_record(id))
    }

    /// Up to `limit` records of `R` with ids above `after`, in id order, as the API sends them.
    pub(crate) async fn list_records<R: resource::Resource>(
        &self,
        after: Option<i64>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        read!(self, store => store.list_records::<R>(after, limit))
    }

    /// Every batch this process commits from now on, in commit order, with each pet's
    /// revision after the change. A listener that falls `SETTLED_BACKLOG` batches behind is
    /// told how many it missed.
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<Settled> {
        self.front.subscribe()
    }

    /// Changes whenever a commit of this process appended events (its value counts them): a
    /// cheap wake for readers of the feed, which then read the store for what is new.
    pub fn appended(&self) -> tokio::sync::watch::Receiver<u64> {
        self.front.appended()
    }

    /// The pet with this id.
    pub async fn get(&self, id: PetId) -> Result<Option<StoredPet>, StoreError> {
        read!(self, store => store.get(id))
    }

    /// Up to `limit` pets with ids above `after`, in ascending id order, only those with
    /// `status` and of `category` if given; `more` says whether another page follows.
    #[cfg(test)]
    pub async fn list(
        &self,
        status: Option<crate::pet::PetStatus>,
        category: Option<CategoryId>,
        after: Option<PetId>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        let query = PageQuery {
            status,
            category,
            search: crate::search::Search::default(),
            sort: crate::search::Sort::Id,
            after: after.map(|id| After { id, key: None }),
            limit,
        };
        self.find(query).await
    }

    /// A page of pets as `query` asks: filtered, searched by name and sorted, after a cursor.
    pub async fn find(&self, query: PageQuery) -> Result<Page, StoreError> {
        read!(self, store => store.list(query.clone()))
    }

    /// Up to `query.limit` events of the feed after `query.after`, as one read snapshot sees
    /// the feed; `Gone` for a cursor of another feed, or from before the oldest event kept.
    pub async fn events(&self, query: EventQuery) -> Result<EventPage, ReadError> {
        let read = on_engine!(self, store => store.events(query));
        read.map_err(|e| match e {
            ReadError::Store(e) => ReadError::Store(self.closed_or(e)),
            gone => gone,
        })
    }

    /// Every webhook endpoint's delivery state the store keeps, by endpoint id (`petstore
    /// webhooks list` reads a redb file directly: `redb_file::webhook_states`).
    pub async fn webhook_states(&self) -> Result<Vec<(String, WebhookState)>, StoreError> {
        read!(self, store => store.webhook_states())
    }

    /// Takes (or keeps) the right of this process, named `holder`, to deliver to endpoint
    /// `id`, whose state starts as `fresh` if the store has none: its state while this process
    /// holds it, `None` while another instance does (PostgreSQL). A redb file has one process:
    /// it always holds every endpoint.
    pub async fn lease_webhook(
        &self,
        id: &str,
        holder: &str,
        fresh: &WebhookState,
    ) -> Result<Option<WebhookState>, StoreError> {
        let leased = match &self.backend {
            Backend::Redb(store) => {
                let kept = store.webhook_states().await?;
                match kept.into_iter().find(|(kept, _)| kept == id) {
                    Some((_, state)) => Ok(Some(state)),
                    None => self
                        .front
                        .save_webhook(id.to_owned(), fresh.clone())
                        .await
                        .map(|()| Some(fresh.clone())),
                }
            }
            Backend::Postgres(store) => Box::pin(store.lease_webhook(id, holder, fresh)).await,
        };
        leased.map_err(|e| self.closed_or(e))
    }

    /// Saves endpoint `id`'s state, durably, and renews `holder`'s lease on it; `false` when
    /// another instance holds it now, and the state was not saved.
    pub async fn save_webhook(
        &self,
        id: &str,
        holder: &str,
        state: &WebhookState,
    ) -> Result<bool, StoreError> {
        let saved = match &self.backend {
            Backend::Redb(_) => self
                .front
                .save_webhook(id.to_owned(), state.clone())
                .await
                .map(|()| true),
            Backend::Postgres(store) => Box::pin(store.save_webhook(id, holder, state)).await,
        };
        saved.map_err(|e| self.closed_or(e))
    }

    /// The console session whose token hashes to `token`, if the store has it.
    pub async fn session(&self, token: [u8; 32]) -> Result<Option<SessionRecord>, StoreError> {
        read!(self, store => store.session(token))
    }

    /// Keeps a console session, durably, under its token's hash.
    pub async fn save_session(
        &self,
        token: [u8; 32],
        record: SessionRecord,
    ) -> Result<(), StoreError> {
        let saved = match &self.backend {
            Backend::Redb(_) => self.front.save_session(token, record).await,
            Backend::Postgres(store) => Box::pin(store.save_session(token, &record)).await,
        };
        saved.map_err(|e| self.closed_or(e))
    }

    /// Removes console sessions; returns how many went.
    pub async fn remove_sessions(&self, gone: SessionsGone) -> Result<usize, StoreError> {
        let removed = match &self.backend {
            Backend::Redb(_) => self.front.remove_sessions(gone).await,
            Backend::Postgres(store) => Box::pin(store.remove_sessions(gone)).await,
        };
        removed.map_err(|e| self.closed_or(e))
    }

    /// Gives up `holder`'s leases at a clean stop, so another instance takes over at once.
    pub async fn release_webhooks(&self, holder: &str) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Redb(_) => Ok(()),
            Backend::Postgres(store) => Box::pin(store.release_webhooks(holder)).await,
        }
    }

    /// The feed as one read sees it now: its identity, newest and last purged numbers.
    pub async fn feed_state(&self) -> Result<FeedState, StoreError> {
        let query = EventQuery {
            after: None,
            types: crate::event::Types::only([]),
            limit: 1,
            scan: 1,
        };
        match self.events(query).await {
            Ok(page) => Ok(page.state),
            Err(ReadError::Store(e)) => Err(e),
            // A read from the oldest kept is never gone.
            Err(ReadError::Gone) => Err(StoreError::Corrupt(
                "the feed refused a read from its start".into(),
            )),
        }
    }

    /// Whether another instance may commit to this store: then the feed must be read again
    /// from time to time, since this process hears only of its own commits.
    pub fn shared_by_instances(&self) -> bool {
        matches!(self.backend, Backend::Postgres(_))
    }

    /// Whether the store can serve now: its writer runs and its engine answers a read.
    pub async fn check(&self) -> Result<(), StoreError> {
        if self.front.is_closed() {
            return Err(StoreError::Closed);
        }
        on_engine!(self, store => store.check())
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
        match &self.backend {
            Backend::Redb(store) => store.snapshot_to(to, cancel),
            Backend::Postgres(_) => Err(StoreError::Unsupported(
                "snapshots are for the redb store; use PostgreSQL's own backup tools".into(),
            )),
        }
    }

    /// Finishes the writes already queued and closes the store; later calls get `Closed`.
    pub async fn close(self) {
        self.front.close().await;
        if let Backend::Postgres(store) = self.backend {
            store.close();
        }
    }

    /// A read's failure once the store is closed is `Closed`, whatever the engine saw.
    fn closed_or(&self, e: StoreError) -> StoreError {
        if self.front.is_closed() {
            StoreError::Closed
        } else {
            e
        }
    }
}

/// A streaming read of a whole store from one snapshot, for a copy: the id counter, then the
/// chunks as the backend reads them; it reads ahead of the consumer by a chunk or two.
pub struct Export {
    /// The ids the next creates would get: above every id ever given, deleted pets' included.
    pub next_ids: NextIds,
    chunks: tokio::sync::mpsc::Receiver<Result<Chunk, StoreError>>,
}

impl Export {
    /// The next chunk; `None` once the whole store has been read. An error ends the export.
    pub async fn next(&mut self) -> Option<Result<Chunk, StoreError>> {
        self.chunks.recv().await
    }
}

/// How far ahead of the consumer an export reads, in chunks.
const EXPORT_AHEAD: usize = 2;

/// A bulk write into an empty store, for a copy: chunks in the order an export yields them,
/// then the id counters with `commit`. Nothing of it survives a crash before `commit`; after a
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
    /// id counters, every idempotency record still live at Unix time `now`, every category
    /// and every order, all from one snapshot.
    pub async fn export(&self, chunk: usize, now: u64) -> Result<Export, StoreError> {
        let (sender, chunks) = tokio::sync::mpsc::channel(EXPORT_AHEAD);
        let chunk = chunk.max(1);
        let to = model::Exporting {
            chunk,
            now,
            into: sender,
        };
        let next_ids = on_backend!(&self.backend, store => store.export(to).await)?;
        Ok(Export { next_ids, chunks })
    }

    /// Starts a bulk write into this store, which must be empty: no pet, no idempotency record,
    /// no id given out; else `NotEmpty`, and the store is left as it was.
    pub async fn import(&self) -> Result<Import, StoreError> {
        let backend = match &self.backend {
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

    /// Sets the id counters to `next`, the pets' above the highest id written if that is
    /// higher, recounts the inventory, and makes everything written durable at once.
    pub async fn commit(self, next: NextIds) -> Result<(), StoreError> {
        let above = self
            .max_id
            .map_or(1, |id| u64::try_from(id).unwrap_or(0).saturating_add(1));
        let mut next = next;
        let pets = <crate::pet::Pet as resource::Resource>::COUNTER;
        next.set(pets, next.of(pets).max(above));
        on_backend!(ImportBackend; self.backend, import => import.commit(next).await)
    }

    /// Gives up: the store is left empty, as the import found it.
    pub async fn abort(self) -> Result<(), StoreError> {
        on_backend!(ImportBackend; self.backend, import => import.abort().await)
    }
}
