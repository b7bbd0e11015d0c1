//! The read snapshot that every read shares between two commits: one read transaction and its
//! open tables. It exists for speed (see `Snapshots`); `store` decides when reads use it and
//! the writer says when a commit makes it stale. It also keeps the last few list pages read
//! from it, which a commit drops with it. Invariant: a snapshot taken before a commit (and so
//! any page read from it) is never served after the writer has counted that commit.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use redb::{Database, ReadOnlyTable, ReadableDatabase};

use super::tables::{
    EVENTS, META, META_EVENT_SEQ, META_EVENTS_TRIMMED, META_FEED, PETS, REVISIONS, meta_value,
};
use crate::pet::{PetId, PetStatus};
use crate::store::events::FeedState;
use crate::store::model::{Page, PageQuery, StoreError};
use crate::store::ops::pets::{
    PETS_BY_CATEGORY, PETS_BY_NAME, PETS_BY_STATUS, PETS_BY_WORD, PETS_BY_WORD_NAME,
};

/// List pages a snapshot keeps: enough for the first pages that clients poll (all pets, each
/// status), few enough that a walk through every page replaces them without growing; at most
/// 100 pets a page, a few tens of KiB in all.
const PAGES_KEPT: usize = 8;

/// The tables of one read transaction, shared by every read until the next commit.
pub(super) struct Snapshot {
    pub(super) pets: ReadOnlyTable<i64, &'static [u8]>,
    pub(super) by_status: ReadOnlyTable<&'static [u8], &'static [u8]>,
    /// The other indexes of pets, for the lists that walk them (`redb/finds.rs`): opened with
    /// the rest, since opening a table costs a list about what reading a few entries does.
    pub(super) by_category: ReadOnlyTable<&'static [u8], &'static [u8]>,
    pub(super) by_name: ReadOnlyTable<&'static [u8], &'static [u8]>,
    pub(super) by_word: ReadOnlyTable<&'static [u8], &'static [u8]>,
    pub(super) by_word_name: ReadOnlyTable<&'static [u8], &'static [u8]>,
    pub(super) revisions: ReadOnlyTable<i64, u64>,
    pub(super) events: ReadOnlyTable<u64, &'static [u8]>,
    /// The counters, for the inventory: four lookups in a small table, so the inventory costs
    /// what a get of one pet does.
    pub(super) meta: ReadOnlyTable<&'static str, u64>,
    /// The event feed as of this transaction.
    pub(super) feed: FeedState,
    /// Pages already listed from these tables. A page of 20 cost about 10,000 instructions to
    /// read from redb and join (callgrind), a fifth of the request; the same page read again
    /// from the same snapshot is the same bytes, so it is kept until the next commit.
    pages: Mutex<Pages>,
}

/// What a list asked for: the same ask gives the same page from one snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum PageKey {
    /// A page in id order, by status or of every pet.
    Ids {
        status: Option<PetStatus>,
        /// The lowest id the page may hold.
        first: PetId,
        limit: usize,
    },
    /// Any other page of pets (`redb/finds.rs`).
    Found(PageQuery),
}

/// The kept pages, the oldest replaced first.
#[derive(Default)]
struct Pages {
    kept: Vec<(PageKey, Page)>,
    next: usize,
}

impl Snapshot {
    /// The page for `key`, from the kept ones or else read by `read` and kept.
    pub(super) fn page(
        &self,
        key: PageKey,
        read: impl FnOnce() -> Result<Page, StoreError>,
    ) -> Result<Page, StoreError> {
        if let Some((_, page)) = self.pages().kept.iter().find(|(k, _)| *k == key) {
            return Ok(page.clone());
        }
        // Read outside the lock: another reader of another page need not wait for this one.
        let page = read()?;
        let mut pages = self.pages();
        if !pages.kept.iter().any(|(k, _)| *k == key) {
            if pages.kept.len() < PAGES_KEPT {
                pages.kept.push((key, page.clone()));
            } else {
                let slot = pages.next;
                pages.kept[slot] = (key, page.clone());
                pages.next = (slot + 1) % PAGES_KEPT;
            }
        }
        Ok(page)
    }

    fn pages(&self) -> MutexGuard<'_, Pages> {
        self.pages.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn open_index(
    txn: &redb::ReadTransaction,
    index: &crate::store::resource::Index,
) -> Result<ReadOnlyTable<&'static [u8], &'static [u8]>, StoreError> {
    txn.open_table(super::indexes::table(index))
        .map_err(StoreError::storage)
}

impl Snapshot {
    /// The table of one of the pets' indexes.
    pub(super) fn index(
        &self,
        index: &crate::store::resource::Index,
    ) -> Result<&ReadOnlyTable<&'static [u8], &'static [u8]>, StoreError> {
        [
            (&PETS_BY_STATUS, &self.by_status),
            (&PETS_BY_CATEGORY, &self.by_category),
            (&PETS_BY_NAME, &self.by_name),
            (&PETS_BY_WORD, &self.by_word),
            (&PETS_BY_WORD_NAME, &self.by_word_name),
        ]
        .into_iter()
        .find(|(held, _)| *held == index)
        .map(|(_, table)| table)
        .ok_or_else(|| StoreError::Corrupt(format!("no snapshot of the {}", index.words)))
    }
}

/// The feed as the read transaction `txn` sees it.
pub(super) fn feed_state(txn: &redb::ReadTransaction) -> Result<FeedState, StoreError> {
    feed_of(&txn.open_table(META).map_err(StoreError::storage)?)
}

fn feed_of(meta: &ReadOnlyTable<&'static str, u64>) -> Result<FeedState, StoreError> {
    Ok(FeedState {
        feed: meta_value(meta, META_FEED)?,
        newest: meta_value(meta, META_EVENT_SEQ)?,
        trimmed: meta_value(meta, META_EVENTS_TRIMMED)?,
    })
}

/// Reads share one snapshot between commits: beginning a read transaction and opening its
/// tables cost a list of 20 about 4,000 instructions, a twentieth of the request (callgrind).
/// Invariant: a snapshot is served only while `commits` still holds the count it was taken
/// under, and the writer counts a commit before it answers any create of it, so a client
/// always reads its own acknowledged writes.
#[derive(Default)]
pub(super) struct Snapshots {
    commits: AtomicU64,
    current: Mutex<Option<(u64, Arc<Snapshot>)>>,
}

impl Snapshots {
    pub(super) fn current(&self) -> MutexGuard<'_, Option<(u64, Arc<Snapshot>)>> {
        self.current.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A snapshot that holds every commit counted so far.
    pub(super) fn get(&self, db: &Database) -> Result<Arc<Snapshot>, StoreError> {
        let commits = self.commits.load(Ordering::Acquire);
        if let Some((taken, snapshot)) = &*self.current()
            && *taken == commits
        {
            return Ok(Arc::clone(snapshot));
        }
        // Begun after `commits` was read, so it holds at least those commits.
        let txn = db.begin_read().map_err(StoreError::storage)?;
        let meta = txn.open_table(META).map_err(StoreError::storage)?;
        let feed = feed_of(&meta)?;
        let snapshot = Arc::new(Snapshot {
            events: txn.open_table(EVENTS).map_err(StoreError::storage)?,
            feed,
            meta,
            pets: txn.open_table(PETS).map_err(StoreError::storage)?,
            by_status: open_index(&txn, &PETS_BY_STATUS)?,
            by_category: open_index(&txn, &PETS_BY_CATEGORY)?,
            by_name: open_index(&txn, &PETS_BY_NAME)?,
            by_word: open_index(&txn, &PETS_BY_WORD)?,
            by_word_name: open_index(&txn, &PETS_BY_WORD_NAME)?,
            revisions: txn.open_table(REVISIONS).map_err(StoreError::storage)?,
            pages: Mutex::default(),
        });
        let mut current = self.current();
        // A commit since `commits` was read makes this one stale to the next reader; keep it
        // out rather than replace a newer one.
        if self.commits.load(Ordering::Acquire) == commits {
            *current = Some((commits, Arc::clone(&snapshot)));
        }
        Ok(snapshot)
    }

    /// Commits (and reopens) counted so far.
    pub(super) fn count(&self) -> u64 {
        self.commits.load(Ordering::Acquire)
    }

    /// Counts a commit (or a reopen) and lets go of the old snapshot, whose pages redb may then
    /// reuse.
    pub(super) fn committed(&self) {
        self.commits.fetch_add(1, Ordering::Release);
        let stale = self.current().take();
        drop(stale);
    }
}
