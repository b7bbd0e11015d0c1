//! The handle on the open redb file: the database the writer and the reads share (taken out
//! and put back only by the writer, around a reopen), the snapshot reads share, the
//! idempotency index, and the reads themselves. Invariant: no read runs on a database being
//! closed, and none is served from a database the writer has given up.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{
    Arc, Condvar, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard,
};
use std::time::{Duration, Instant};

use bytes::Bytes;
use redb::{Database, ReadableDatabase};

use super::idempotency::Index;
use super::open::Opened;
use super::snapshot::{PageKey, Snapshot, Snapshots, feed_state};
use super::tables::{META, META_NEXT_ID, PETS, event_head, read_event};
use super::writer::Pace;
use crate::pet::PetId;
use crate::store::events::{EventPage, EventQuery, PageScan, ReadError};
use crate::store::model::{Page, PageBuilder, PageQuery, Record, StoreError, StoredPet};
use crate::store::ops::pets::PETS_BY_STATUS;
use crate::store::resource::{Part, id_range, owner_of};

/// redb's `PreviousIo`, as a `StoreError::Io` says it.
const MARKED_FAILED: &str = "an earlier I/O error left the database read-only";

/// The longest a read waits for the file to be opened again before it gets 503.
const REOPEN_WAIT: Duration = Duration::from_secs(1);

/// The read side of the open file; cheap to clone, shared by every connection.
#[derive(Clone)]
pub(in crate::store) struct RedbStore {
    pub(super) shared: Arc<Shared>,
}

/// What the writer shares with reads: the database it has open and the snapshot of it that
/// reads share.
pub(super) struct Shared {
    /// `None` from a write that failed on I/O until the reopen succeeds, and after the close.
    /// Reads hold the read lock for as long as they use the database, so the writer's write
    /// lock waits them out: no read ever runs on a database being closed.
    pub(super) db: RwLock<Option<Database>>,
    /// Whether the writer is opening the file again (the database is out meanwhile), and the
    /// signal that it is done: a read waits for it rather than fail.
    pub(super) reopening: Mutex<bool>,
    pub(super) reopened: Condvar,
    pub(super) snapshots: Snapshots,
    /// The live idempotency records of the committed file, by scope.
    pub(super) index: Index,
    /// The file, for snapshots that read it through a handle of their own.
    pub(super) path: PathBuf,
    /// Opened for other processes to read beside this one (redb's `SingleWriter` mode).
    pub(super) shared_file: bool,
    /// Snapshots of this process copying the file now: the writer commits without quick-repair
    /// while any is (see `writer::Writer::commit_batch`).
    pub(super) copying: AtomicUsize,
    /// redb's page cache, for a reopen.
    pub(super) cache_bytes: usize,
    /// The number of the last batch the open file holds (`META_BATCH`): the writer's count,
    /// set anew by whoever opens the file again.
    pub(super) batch: AtomicU64,
    /// When the file may be opened again, and the wait after that (`writer::Pace`).
    pub(super) pace: Mutex<Pace>,
    /// Set once the writer has closed the database for good: nothing opens it again.
    pub(super) closed: AtomicBool,
    /// The write-ahead log of a file this process has alone (`None`: `shared_file`, whose
    /// every batch is a durable commit of its own: redb refuses commits without a sync in its
    /// multi-process mode, and another process would not see the log).
    pub(super) wal: Option<super::wal::Wal>,
}

impl Shared {
    /// What the writer and the reads of the file at `path`, just opened, share.
    pub(super) fn new(
        opened: Opened,
        path: &Path,
        cache_bytes: usize,
        shared_file: bool,
    ) -> Shared {
        let wal = (!shared_file).then(|| super::wal::Wal::new(path, opened.wal));
        Shared {
            wal,
            db: RwLock::new(Some(opened.db)),
            reopening: Mutex::new(false),
            reopened: Condvar::new(),
            snapshots: Snapshots::default(),
            index: opened.index,
            path: path.to_owned(),
            shared_file,
            copying: AtomicUsize::new(0),
            cache_bytes,
            batch: AtomicU64::new(opened.batch),
            pace: Mutex::new(Pace::default()),
            closed: AtomicBool::new(false),
        }
    }

    pub(super) fn db(&self) -> RwLockReadGuard<'_, Option<Database>> {
        self.db.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// The database for a read. While the file is being opened again after a failed write
    /// (15-20 ms with quick-repair), the read waits for it; after a write failed and the file
    /// is out (a reopen failed, or was not yet due), the read opens it again itself once the
    /// pace allows: reads must not wait for a write to come and do it. Either way at most
    /// `REOPEN_WAIT`: a read after a failure is late, not refused. Reads stall their worker for
    /// that wait, as they do for a disk read (see `read`).
    pub(super) fn db_for_read(&self) -> RwLockReadGuard<'_, Option<Database>> {
        let deadline = Instant::now() + REOPEN_WAIT;
        loop {
            let db = self.db();
            if db.is_some() || self.closed.load(Ordering::Acquire) {
                return db;
            }
            drop(db);
            let now = Instant::now();
            if now >= deadline {
                return self.db();
            }
            let due = self.pace().next;
            let reopening = self
                .reopening
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if *reopening || due > now {
                // Woken when a reopen ends; else looks again when one is due.
                let until = if *reopening {
                    deadline
                } else {
                    due.min(deadline)
                };
                drop(
                    self.reopened
                        .wait_timeout(reopening, until - now)
                        .unwrap_or_else(PoisonError::into_inner),
                );
            } else {
                drop(reopening);
                self.reopen();
            }
        }
    }

    pub(super) fn pace(&self) -> MutexGuard<'_, Pace> {
        self.pace.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Marks a reopen begun, or returns `false` after waiting for the one another thread has
    /// begun (at most `REOPEN_WAIT`).
    pub(super) fn begin_reopen(&self) -> bool {
        let mut reopening = self
            .reopening
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if !*reopening {
            *reopening = true;
            return true;
        }
        drop(
            self.reopened
                .wait_timeout_while(reopening, REOPEN_WAIT, |reopening| *reopening)
                .unwrap_or_else(PoisonError::into_inner),
        );
        false
    }

    /// Marks a reopen over, waking the reads that wait for it.
    pub(super) fn end_reopen(&self) {
        *self
            .reopening
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = false;
        self.reopened.notify_all();
    }

    /// Takes the database out, for the caller to close; reads get `Reopening` or `Closed` until
    /// one is put back.
    pub(super) fn take_db(&self) -> Option<Database> {
        let mut db = self.db_mut();
        // Counted like a commit, under the write lock: no read is running, and none can cache
        // a snapshot of the old database after this, so none is served again.
        self.snapshots.committed();
        db.take()
    }

    pub(super) fn put_db(&self, db: Database) {
        *self.db_mut() = Some(db);
    }

    pub(super) fn db_mut(&self) -> RwLockWriteGuard<'_, Option<Database>> {
        self.db.write().unwrap_or_else(PoisonError::into_inner)
    }
}

impl StoreError {
    /// A redb failure, by meaning: the medium's (I/O now, or the mark an earlier one left until
    /// the reopen) is `Io`, anything else a fault of the data or the engine.
    pub(super) fn storage(e: impl Into<redb::Error>) -> StoreError {
        match e.into() {
            redb::Error::Io(e) => StoreError::Io(e.to_string()),
            redb::Error::PreviousIo => StoreError::Io(MARKED_FAILED.into()),
            e => StoreError::Corrupt(e.to_string()),
        }
    }

    /// redb's mark of an earlier failed I/O on the file (`PreviousIo`): the database must be
    /// opened again, the file is not at fault.
    fn is_marked_failed(&self) -> bool {
        matches!(self, StoreError::Io(what) if what == MARKED_FAILED)
    }
}

impl RedbStore {
    /// Stores `stored` as order `id`'s record, past every rule: damage, for the tests of what
    /// the store does with a record that does not read back.
    #[cfg(test)]
    pub(in crate::store) fn damage_order(&self, id: i64, stored: &[u8]) {
        let db = self.shared.db();
        let db = db.as_ref().expect("open");
        let txn = db.begin_write().expect("write");
        {
            let records = super::indexes::records::<crate::order::Order>();
            let mut table = txn.open_table(records).expect("orders");
            table.insert(id, stored).expect("insert");
        }
        txn.commit().expect("commit");
        self.shared.snapshots.committed();
        // Past the log too: a replay of it cannot give this back (`assert_log_replays`).
        DAMAGED.set(true);
    }

    /// The idempotency record of `scope`, if the committed file holds one.
    pub(in crate::store) fn record(&self, scope: &[u8; 32]) -> Option<Record> {
        self.shared.index.get(scope)
    }

    /// The pet with this id.
    pub(in crate::store) async fn get(&self, id: PetId) -> Result<Option<StoredPet>, StoreError> {
        self.read(move |snapshot| {
            let Some(json) = snapshot.pets.get(id).map_err(StoreError::storage)? else {
                return Ok(None);
            };
            let revision = snapshot
                .revisions
                .get(id)
                .map_err(StoreError::storage)?
                .map_or(1, |r| r.value());
            Ok(Some(StoredPet {
                id,
                revision,
                json: Bytes::copy_from_slice(json.value()),
            }))
        })
    }

    /// Up to `limit` pets with ids above `after`, in ascending id order, only those with
    /// `status` if one is given, as one JSON array built from the stored objects without
    /// decoding them. One more pet is read to tell whether another page follows; where the page
    /// starts costs nothing, since both tables are ordered by id within a status.
    pub(in crate::store) async fn list(&self, query: PageQuery) -> Result<Page, StoreError> {
        if !query.search.is_empty() || query.sort != crate::search::Sort::Id {
            return self.find(&query);
        }
        let after = query.after.as_ref().map(|after| after.id);
        let (status, limit) = (query.status, query.limit);
        let first = match after {
            None => i64::MIN,
            Some(after) => match after.checked_add(1) {
                Some(first) => first,
                None => {
                    return self
                        .read(|snapshot| Ok(Page::empty().at(snapshot.feed.newest_position())));
                }
            },
        };
        if query.category.is_some() {
            // Not from the shared snapshot, whose tables are the pets' alone: one read
            // transaction gives the page and its feed position.
            return self.read_txn(|txn| {
                let pets = txn.open_table(PETS).map_err(StoreError::storage)?;
                let feed = feed_state(txn)?;
                let page = self.list_category(txn, &pets, &query, after.unwrap_or(i64::MIN))?;
                Ok(page.at(feed.newest_position()))
            });
        }
        let key = PageKey::Ids {
            status,
            first,
            limit,
        };
        self.read(move |snapshot| {
            snapshot.page(key.clone(), || {
                let mut page = PageBuilder::new(limit);
                match status {
                    None => {
                        let entries = snapshot.pets.range(first..).map_err(StoreError::storage)?;
                        for entry in entries.take(limit + 1) {
                            let (id, json) = entry.map_err(StoreError::storage)?;
                            page.push(id.value(), json.value());
                        }
                    }
                    Some(status) => {
                        let prefix = PETS_BY_STATUS.prefix(&[Part::Code(status.to_code())]);
                        let (first, last) = id_range(&prefix, first);
                        let entries = snapshot
                            .by_status
                            .range(first.as_slice()..=last.as_slice())
                            .map_err(StoreError::storage)?;
                        for entry in entries.take(limit + 1) {
                            let (key, json) = entry.map_err(StoreError::storage)?;
                            page.push(owner_of(key.value())?, json.value());
                        }
                    }
                }
                Ok(page.finish().at(snapshot.feed.newest_position()))
            })
        })
    }

    /// A page of the event feed, from the snapshot every read shares.
    pub(in crate::store) async fn events(&self, query: EventQuery) -> Result<EventPage, ReadError> {
        let page = self.read(|snapshot| {
            let state = snapshot.feed;
            let Ok(start) = state.start(query.after) else {
                return Ok(None);
            };
            let mut scan = PageScan::new(query, state, start);
            let mut exhausted = true;
            if start < state.newest {
                let entries = snapshot
                    .events
                    .range(start + 1..)
                    .map_err(StoreError::storage)?;
                for entry in entries {
                    let (seq, value) = entry.map_err(StoreError::storage)?;
                    let (seq, value) = (seq.value(), value.value());
                    let (code, _) = event_head(value)?;
                    if !scan.push(seq, code, || read_event(seq, value))? {
                        exhausted = false;
                        break;
                    }
                }
            }
            Ok(Some(scan.finish(exhausted)))
        })?;
        page.ok_or(ReadError::Gone)
    }

    /// Whether the database answers a read now.
    pub(in crate::store) async fn check(&self) -> Result<(), StoreError> {
        // A fresh transaction, not the shared snapshot: this asks whether the file reads now.
        self.shared.on_sound_database(|db| {
            contain("a health check", || {
                let txn = db.begin_read().map_err(StoreError::storage)?;
                let meta = txn.open_table(META).map_err(StoreError::storage)?;
                meta.get(META_NEXT_ID).map_err(StoreError::storage)?;
                Ok(())
            })
        })
    }

    /// Runs a read on the calling task. Reads come from redb's page cache or the OS page
    /// cache, a few microseconds; handing them to a blocking thread cost more than the read on
    /// a one-core server (see benches/load). A read that must wait on the disk stalls this
    /// worker for that wait, a trade accepted for a store that fits in memory.
    pub(super) fn read<T>(
        &self,
        work: impl Fn(&Snapshot) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.shared
            .on_sound_database(|db| contain("a read", || work(&*self.shared.snapshots.get(db)?)))
    }
}

impl Shared {
    /// Runs `read` on the open database. A read that meets the mark of a failed write (redb
    /// fails every page it does not have cached once any I/O of its file failed, until the
    /// file is opened again) takes that database out, unless a commit or a reopen has replaced
    /// it meanwhile, and runs once more on the one opened again: the writer's failure is not
    /// the read's, and the file on the disk is as sound as before it.
    pub(super) fn on_sound_database<T>(
        &self,
        read: impl Fn(&Database) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let seen = self.snapshots.count();
        {
            // Held until the work is done, so that a reopen waits for this read to end.
            let db = self.db_for_read();
            // Between a failed write and the reopen; the face says `Closed` once the writer is.
            let db = db.as_ref().ok_or(StoreError::Reopening)?;
            match read(db) {
                Err(e) if e.is_marked_failed() => {}
                outcome => return outcome,
            }
        }
        self.close_db(Some(seen));
        let db = self.db_for_read();
        read(db.as_ref().ok_or(StoreError::Reopening)?)
    }

    /// Takes the database out and closes it. One `Database` per file per process: the old one
    /// must be closed before the file is opened again; its close fails with the I/O error it
    /// latched, already logged, and writes nothing then. With `seen`, only if no commit or
    /// reopen has come since the snapshot count was `seen` (a commit proves the database
    /// sound, a reopen has replaced it).
    pub(super) fn close_db(&self, seen: Option<u64>) {
        let old = {
            let mut db = self.db_mut();
            if seen.is_some_and(|seen| self.snapshots.count() != seen) {
                return;
            }
            // Counted like a commit, under the write lock, as in `take_db`.
            self.snapshots.committed();
            db.take()
        };
        if let Some(old) = old {
            let _ = caught("the close of a failed database", || old.close());
        }
    }
}

/// Runs `work`, the store's use of redb, and makes a panic inside it an error of the data
/// (`Corrupt`: 503 to a client), logged: redb asserts on some damage its checksums do not
/// reach (a page of zeros where a branch was, an allocator state that does not add up), and
/// the process must stay up to answer every other request and to say what happened. The
/// writer opens the file again after one (`writer.rs`), since a panic may leave redb's own
/// state in the middle of a change.
pub(super) fn contain<T>(
    during: &'static str,
    work: impl FnOnce() -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    caught(during, work).unwrap_or_else(|message| Err(StoreError::Corrupt(message)))
}

/// `work`'s outcome, or what a panic inside it said, logged and counted.
pub(super) fn caught<T>(during: &'static str, work: impl FnOnce() -> T) -> Result<T, String> {
    let outer = CATCHING.replace(true);
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work));
    CATCHING.set(outer);
    outcome.map_err(|payload| {
        let message = payload
            .downcast_ref::<&str>()
            .map(|text| (*text).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "no message".to_owned());
        let at = CAUGHT_AT.take().unwrap_or_default();
        crate::metrics::store_panicked();
        tracing::error!(
            during,
            panic = %message,
            at,
            "redb failed inside; the file may be damaged: run `petstore check` on it"
        );
        format!("redb failed during {during} ({message})")
    })
}

#[cfg(test)]
thread_local! {
    /// Whether this thread's test damaged its store past the log (`damage_order`).
    pub(super) static DAMAGED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

thread_local! {
    /// Whether this thread is inside `caught`: its panic is reported there, once, as a log
    /// line, not by the default hook's lines on stderr.
    static CATCHING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Where the panic being caught came from, for `caught`'s line.
    static CAUGHT_AT: std::cell::Cell<Option<String>> = const { std::cell::Cell::new(None) };
}

/// The process's panic hook: a panic `caught` contains is kept for its log line; any other
/// is left to Rust's default hook (its message, and a backtrace under `RUST_BACKTRACE`).
pub fn install_panic_hook() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if CATCHING.get() {
            CAUGHT_AT.set(info.location().map(ToString::to_string));
        } else {
            default(info);
        }
    }));
}
