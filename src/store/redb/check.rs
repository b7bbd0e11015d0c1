//! `petstore check` of a redb file: redb's own integrity check (every page's checksum, the
//! allocator state), run on a private copy so the file itself is never repaired or written,
//! then the store's invariants on that copy: every record has the index entries
//! `redb/entries.rs` declares for it, with their values, and each index holds as many as its
//! records declare (so exactly those; the strays are named); revisions and idempotency records
//! only name ids the counter has given out (revisions only for pets that exist), the counter is
//! above every id, and orders hold their pets and the inventory counts the pets
//! (`check_sales`). A file that is no petstore store at all (empty, not redb, redb without our
//! tables) is said to be so before anything else, and one a server of this build refuses to
//! open is refused with the server's words. It reports; it never fixes.

use std::cell::Cell;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use redb::{Database, ReadTransaction, ReadableDatabase, ReadableTable, ReadableTableMetadata};

use super::handle::caught;
use super::indexes;
use super::open::require_openable;
use super::tables::{
    EVENTS, META, META_EVENT_SEQ, META_EVENTS_TRIMMED, META_FEED, META_INVENTORY, META_NEXT_ID,
    PETS, RECORDS, REVISIONS, SCHEMA_VERSION, holding_order, meta_value, read_event,
};
use crate::clock::unix_now;
use crate::order::{Order, OrderStatus};
use crate::pet::{Pet, PetStatus};
use crate::store::model::StoreError;
use crate::store::ops::each_resource;
use crate::store::ops::orders::ORDERS_BY_PET;
use crate::store::ops::pets::PETS_BY_STATUS;
use crate::store::resource::{ForEach, Holds, Index, Resource};
use crate::subject::Kind;
use std::any::Any;

/// The page cache of the checked copy: each page is read about once, so a small cache costs
/// little time, and the check's memory stays bounded at any file size.
const CHECK_CACHE_BYTES: usize = 16 << 20;

/// Disagreements listed one by one; beyond these only their number is kept.
const LISTED: usize = 50;

/// The first bytes of every redb file (its header's magic number, the same in every redb file
/// format): anything else is not a redb file, and redb would refuse it.
const REDB_MAGIC: [u8; 9] = [b'r', b'e', b'd', b'b', 0x1A, 0x0A, 0xA9, 0x0D, 0x0A];

/// What a check found. `problems` empty: the file is sound.
#[derive(Debug, Default)]
pub struct CheckReport {
    pub pets: u64,
    /// Pets by status, in `STATUSES` order, counted from the pets themselves.
    pub by_status: [u64; 3],
    pub without_status: u64,
    pub index_entries: u64,
    pub revisions: u64,
    pub records: u64,
    pub live_records: u64,
    /// Events the feed keeps.
    pub events: u64,
    /// The records of every other kind, by kind, in `each_resource`'s order.
    pub kinds: Vec<(Kind, u64)>,
    /// Orders that hold their pet now.
    pub placed_orders: u64,
    pub next_id: u64,
    pub schema_version: u64,
    /// The first `LISTED` disagreements, in words.
    pub problems: Vec<String>,
    /// Every disagreement, listed or not.
    pub problem_count: u64,
    /// Why the file is no petstore store at all (empty, not a redb file, a redb file without
    /// our tables); then nothing else was checked and the counts are zero.
    pub not_a_store: Option<String>,
    /// A server had the file open: checked from one read transaction beside it, without
    /// redb's integrity check of every page.
    pub live: bool,
    /// The file names a write-ahead log (a server stopped without its last checkpoint): the
    /// batches the log holds after the file's checkpoint, which the counts above leave out and
    /// the next start replays. A log that does not hold them all is a problem.
    pub logged: Option<u64>,
}

/// The statuses in code order, for `CheckReport::by_status`.
pub const STATUSES: [PetStatus; 3] = [PetStatus::Available, PetStatus::Pending, PetStatus::Sold];

impl CheckReport {
    /// How many records of `kind` the file keeps (of pets, `pets`).
    pub fn count_of(&self, kind: Kind) -> u64 {
        if kind == Kind::Pet {
            return self.pets;
        }
        let counted = self.kinds.iter().find(|(k, _)| *k == kind);
        counted.map_or(0, |(_, n)| *n)
    }

    fn count(&mut self, kind: Kind) {
        if kind == Kind::Pet {
            self.pets += 1;
        } else if let Some((_, n)) = self.kinds.iter_mut().find(|(k, _)| *k == kind) {
            *n += 1;
        } else {
            self.kinds.push((kind, 1));
        }
    }

    fn problem(&mut self, text: String) {
        self.problem_count += 1;
        if self.problems.len() < LISTED {
            self.problems.push(text);
        }
    }
}

/// A copy of the file, removed when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
    }
}

/// Checks the redb file at `path`; `Err` only when it cannot be checked at all (missing,
/// unreadable, in use by a running server, no room for the copy) or is one a server of this
/// build refuses to open (`open::require_openable`), with the same words.
pub fn check_file(path: &Path) -> Result<CheckReport, StoreError> {
    // Whether a server has the file open: its redb handle holds a flock on it beside its
    // byte-range locks (shared for a server that shares the file with readers, exclusive for
    // one that does not), so an exclusive flock here fails while one runs. Taken, it keeps a
    // server from opening the file until the copy is done; a copy taken under a server's
    // writes would be torn, and its "problems" the copy's. (A read-only open of a stopped file
    // reads pages unverified and panics on a damaged one, hence the copy.)
    let file =
        fs::File::open(path).map_err(|e| StoreError::Io(format!("{}: {e}", path.display())))?;
    // Before the copy and redb's open, which would only say "magic number mismatch" after a
    // report of zeros.
    if let Some(why) =
        not_redb(&file).map_err(|e| StoreError::Io(format!("{}: {e}", path.display())))?
    {
        return Ok(CheckReport {
            not_a_store: Some(why),
            ..CheckReport::default()
        });
    }
    match file.try_lock() {
        Ok(()) => {}
        Err(fs::TryLockError::WouldBlock) => {
            drop(file);
            return check_live(path);
        }
        // A file system without locks: the check goes on, as redb's open would.
        Err(fs::TryLockError::Error(e)) => {
            tracing::debug!(error = %e, "no lock on the checked file");
        }
    }
    let scratch = scratch_copy(path)?;
    drop(file);

    let mut report = CheckReport::default();
    // The open verifies every page's checksum (instead of trusting the file, where a plain
    // open may panic on one altered outside redb). The repair callback is called at 0.3 only
    // when the last commit does not verify and is rolled back.
    let rolled_back = Rc::new(Cell::new(false));
    let seen = Rc::clone(&rolled_back);
    let opened = caught("checking the file", || {
        Database::builder()
            .set_cache_size(CHECK_CACHE_BYTES)
            .set_check_integrity_on_open(true)
            .set_repair_callback(move |session| {
                if session.progress() > 0.0 && session.progress() < 0.5 {
                    seen.set(true);
                }
            })
            .open(&scratch.0)
    });
    let db = match opened {
        Ok(Ok(db)) => db,
        Ok(Err(e)) => {
            report.problem(format!("file integrity: redb refuses the file: {e}"));
            return Ok(report);
        }
        Err(panic) => {
            report.problem(format!("file integrity: {panic}"));
            return Ok(report);
        }
    };
    if rolled_back.get() {
        report.problem(
            "file integrity: the last commit does not verify (redb would roll it back)".into(),
        );
    }
    // What a start would serve: the file with the batches its log holds since its checkpoint.
    match caught("replaying the write-ahead log", || replay_log(&db, path)) {
        Ok(Ok(logged)) => report.logged = logged,
        Ok(Err(e)) => report.problem(format!("write-ahead log: {e}")),
        Err(panic) => report.problem(format!("write-ahead log: {panic}")),
    }
    let txn = db.begin_read().map_err(StoreError::storage)?;
    match caught("checking the file", || {
        check_tables(&txn, path, &mut report)
    }) {
        Ok(checked) => checked?,
        Err(panic) => report.problem(format!("file integrity: {panic}")),
    }
    drop(txn);
    if let Err(e) = db.close() {
        tracing::warn!(error = %e, "closing the checked copy failed");
    }
    Ok(report)
}

/// Replays into the checked copy `db` the write-ahead log beside the file at `path`, if the
/// file names one (a server stopped without its last checkpoint): the batches it applied, or
/// why the log cannot be trusted (`log::recover`). The copy is the check's own, so the file
/// and its log are left as they are.
fn replay_log(db: &Database, path: &Path) -> Result<Option<u64>, StoreError> {
    let (id, checkpoint) = super::wal::named_log(db)?;
    if id == 0 {
        return Ok(None);
    }
    let txn = db.begin_write().map_err(StoreError::storage)?;
    let recovered = super::wal::replay(&txn, path, id, checkpoint)?;
    txn.commit().map_err(StoreError::storage)?;
    Ok(Some(recovered.applied))
}

/// Why `file` is not a redb file, from its first bytes; `None`: it starts as one does.
fn not_redb(file: &fs::File) -> std::io::Result<Option<String>> {
    let mut head = Vec::with_capacity(REDB_MAGIC.len());
    file.take(REDB_MAGIC.len() as u64).read_to_end(&mut head)?;
    Ok(if head.is_empty() {
        Some("the file is empty".into())
    } else if head != REDB_MAGIC {
        Some("not a redb file (its first bytes are not redb's header)".into())
    } else {
        None
    })
}

/// The live file of a running server: the store's rules on one read transaction of a
/// read-only handle beside the server (`Locked` when the process that has it open does not
/// share it). redb's page checksums are only verified on a file no server has open.
fn check_live(path: &Path) -> Result<CheckReport, StoreError> {
    let db = super::backup::open_live(path)?;
    let txn = db.begin_read().map_err(StoreError::storage)?;
    let mut report = CheckReport {
        live: true,
        ..CheckReport::default()
    };
    check_tables(&txn, path, &mut report)?;
    Ok(report)
}

/// Copies `path` beside itself, else into the temporary directory.
fn scratch_copy(path: &Path) -> Result<Scratch, StoreError> {
    let name = path
        .file_name()
        .map_or_else(|| "pets.redb".into(), |n| n.to_string_lossy().into_owned());
    let private = format!(".{name}.check-{}", std::process::id());
    let beside = path.with_file_name(&private);
    let mut tried = Vec::new();
    for candidate in [beside, std::env::temp_dir().join(&private)] {
        match fs::copy(path, &candidate) {
            Ok(_) => return Ok(Scratch(candidate)),
            Err(e) => {
                let _ = fs::remove_file(&candidate);
                tried.push(format!("{}: {e}", candidate.display()));
            }
        }
    }
    Err(StoreError::Io(format!(
        "copying the file to check it: {}",
        tried.join("; ")
    )))
}

/// The store's own invariants, on one read transaction of the file at `path`.
fn check_tables(
    txn: &ReadTransaction,
    path: &Path,
    report: &mut CheckReport,
) -> Result<(), StoreError> {
    let meta = match txn.open_table(META) {
        Ok(meta) => meta,
        Err(redb::TableError::TableDoesNotExist(_)) => {
            report.not_a_store = Some("a redb file without petstore's tables".into());
            return Ok(());
        }
        Err(e) => return Err(StoreError::storage(e)),
    };
    let read = |name: &str| -> Result<Option<u64>, StoreError> {
        Ok(meta
            .get(name)
            .map_err(StoreError::storage)?
            .map(|v| v.value()))
    };
    report.schema_version = require_openable(&meta, path)?.unwrap_or(0);
    if report.schema_version != SCHEMA_VERSION {
        report.problem(format!(
            "schema version {} where this build checks {SCHEMA_VERSION} (a server of this \
             build upgrades the file when it opens it)",
            report.schema_version
        ));
        return Ok(());
    }
    let Some(next_id) = read(META_NEXT_ID)? else {
        report.problem("the id counter (meta next_id) is missing".into());
        return Ok(());
    };
    report.next_id = next_id;
    let given_out = |id: i64| id >= 1 && u64::try_from(id).is_ok_and(|id| id < next_id);

    let pets = txn.open_table(PETS).map_err(StoreError::storage)?;
    let revisions = txn.open_table(REVISIONS).map_err(StoreError::storage)?;
    let records = txn.open_table(RECORDS).map_err(StoreError::storage)?;
    let mut walk = Walk {
        txn,
        read: indexes::Read::open(txn)?,
        meta: &meta,
        pets: &pets,
        report: &mut *report,
    };
    each_resource(&mut walk)?;
    report.index_entries = walk.read.len(&PETS_BY_STATUS)?;
    check_inventory(&meta, report)?;

    // A pet without an entry is at revision 1, so an entry is only for a pet changed since.
    for entry in revisions.iter().map_err(StoreError::storage)? {
        let (id, revision) = entry.map_err(StoreError::storage)?;
        let (id, revision) = (id.value(), revision.value());
        report.revisions += 1;
        if pets.get(id).map_err(StoreError::storage)?.is_none() {
            report.problem(format!("revisions: pet {id} does not exist"));
        } else if revision < 2 {
            report.problem(format!(
                "revisions: pet {id} at revision {revision} (kept only from 2 on)"
            ));
        }
    }

    // A record names the pet its create made: that pet may have been deleted since, but its
    // id was given out.
    let now = unix_now();
    for entry in records.iter().map_err(StoreError::storage)? {
        let (key, _) = entry.map_err(StoreError::storage)?;
        let (expires_at, id) = key.value();
        report.records += 1;
        if expires_at > now {
            report.live_records += 1;
        }
        // An order's record keeps the order's id negated (`model::record_id`).
        if id < 0 {
            let next_order = meta_value(&meta, Order::COUNTER.key())?;
            if id.unsigned_abs() >= next_order {
                report.problem(format!(
                    "idempotency record: order {} was never given out",
                    -id
                ));
            }
        } else if !given_out(id) {
            report.problem(format!(
                "idempotency record: pet {id} was never given out (counter {next_id})"
            ));
        }
    }
    check_events(txn, &meta, report, &given_out)?;
    let counted = pets.len().map_err(StoreError::storage)?;
    if counted != report.pets {
        report.problem(format!(
            "pets: the table says {counted} entries, {} read",
            report.pets
        ));
    }
    Ok(())
}

/// The inventory's counters against the pets counted by status.
fn check_inventory(
    meta: &redb::ReadOnlyTable<&'static str, u64>,
    report: &mut CheckReport,
) -> Result<(), StoreError> {
    let counted = [
        report.by_status[0],
        report.by_status[1],
        report.by_status[2],
        report.without_status,
    ];
    for (key, count) in META_INVENTORY.into_iter().zip(counted) {
        let kept = meta_value(meta, key)?;
        if kept != count {
            report.problem(format!(
                "inventory: meta {key} says {kept}, the pets {count}"
            ));
        }
    }
    Ok(())
}

/// The walk through every declared resource: each record reads back, carries its own id, is
/// below its counter and has the entries it declares, and each of its indexes holds as many
/// entries as its records declare (so exactly those; the strays are named). Then what a kind
/// of record promises beyond its entries (`Walk::kept`).
struct Walk<'a> {
    txn: &'a ReadTransaction,
    read: indexes::Read,
    meta: &'a redb::ReadOnlyTable<&'static str, u64>,
    pets: &'a redb::ReadOnlyTable<i64, &'static [u8]>,
    report: &'a mut CheckReport,
}

impl ForEach for Walk<'_> {
    fn visit<R: Resource>(&mut self) -> Result<(), StoreError> {
        let kind = R::KIND.name();
        let next = meta_value(self.meta, R::COUNTER.key())?.max(1);
        let mut declared = vec![0u64; R::INDEXES.len()];
        let table = self.txn.open_table(indexes::records::<R>());
        for row in table
            .map_err(StoreError::storage)?
            .iter()
            .map_err(StoreError::storage)?
        {
            let (id, stored) = row.map_err(StoreError::storage)?;
            let (id, stored) = (id.value(), stored.value());
            if id < 1 || id.unsigned_abs() >= next {
                self.report.problem(format!(
                    "{kind} {id}: id not below the counter ({next}) or not positive"
                ));
            }
            let record = match R::decode(id, stored) {
                Ok(record) if record.id() == id => record,
                Ok(record) => {
                    let says = record.id();
                    self.report
                        .problem(format!("{kind} {id}: it says id {says}"));
                    continue;
                }
                Err(e) => {
                    self.report.problem(format!("{kind} {id}: {}", words(e)));
                    // A record that does not read back still counts.
                    self.report.count(R::KIND);
                    continue;
                }
            };
            for entry in record.entries(stored) {
                let at = R::INDEXES.iter().position(|index| *index == entry.index);
                if let Some(at) = at {
                    declared[at] += 1;
                }
                let (words, filed) = (entry.index.words, entry.filed_as());
                match self.read.holds(&entry)? {
                    Some(true) => {}
                    None => self
                        .report
                        .problem(format!("{kind} {id} ({filed}): missing from the {words}")),
                    Some(false) => self.report.problem(format!(
                        "{kind} {id} ({filed}): the {words} holds {}",
                        other_value(entry.index)
                    )),
                }
            }
            self.report.count(R::KIND);
            self.kept(&record as &dyn Any)?;
        }
        for (index, declared) in R::INDEXES.iter().zip(declared) {
            self.check_length::<R>(index, declared)?;
        }
        Ok(())
    }
}

impl Walk<'_> {
    /// What a pet or an order promises beyond its entries: pets are counted by status (for
    /// the inventory), and a placed order holds its pet, which is `pending`.
    fn kept(&mut self, record: &dyn Any) -> Result<(), StoreError> {
        if let Some(pet) = record.downcast_ref::<Pet>() {
            match pet.status {
                Some(status) => self.report.by_status[usize::from(status.to_code())] += 1,
                None => self.report.without_status += 1,
            }
        } else if let Some(order) = record.downcast_ref::<Order>()
            && order.status == OrderStatus::Placed
        {
            self.check_hold(order)?;
        }
        Ok(())
    }

    fn check_hold(&mut self, order: &Order) -> Result<(), StoreError> {
        let (id, pet) = (order.id, order.pet_id);
        self.report.placed_orders += 1;
        // The first placed entry of the pet is the one the writes see as its hold.
        let by_pet = self.txn.open_table(indexes::table(&ORDERS_BY_PET));
        let held = holding_order(&by_pet.map_err(StoreError::storage)?, pet)?;
        if held != Some(id) {
            self.report
                .problem(format!("order {id} is placed but does not hold pet {pet}"));
        }
        let status = self
            .pets
            .get(pet)
            .map_err(StoreError::storage)?
            .and_then(|json| Pet::from_json(json.value()).ok())
            .and_then(|pet| pet.status);
        if status != Some(PetStatus::Pending) {
            self.report
                .problem(format!("order {id} is placed but pet {pet} is not pending"));
        }
        Ok(())
    }

    /// `index` of `R` against the `declared` number of entries its records declare. One that
    /// holds another number (or as many, with some missing) is read through to name the
    /// entries no record declares; a difference none of them explains is named by its count.
    fn check_length<R: Resource>(
        &mut self,
        index: &'static Index,
        declared: u64,
    ) -> Result<(), StoreError> {
        let held = self.read.len(index)?;
        if held == declared {
            return Ok(());
        }
        let records = self.txn.open_table(indexes::records::<R>());
        let records = records.map_err(StoreError::storage)?;
        let (kind, words) = (R::KIND.name(), index.words);
        let mut named = 0;
        let report = &mut *self.report;
        self.read.each(index, &mut |entry, key| {
            let Some(entry) = entry else {
                named += 1;
                report.problem(format!("{words}: entry {key:?} is no entry of it"));
                return Ok(());
            };
            let id = entry.owner;
            let at = format!("{words}: entry ({})", entry.key_text());
            // The record's own entry in this index: `None` when no record reads back.
            let own = records
                .get(id)
                .map_err(StoreError::storage)?
                .and_then(|stored| {
                    let record = R::decode(id, stored.value()).ok()?;
                    let entries = record.entries(stored.value());
                    let own = entries.into_iter().find(|own| own.index == index);
                    Some(own.map(|own| (own.same_key(entry), own.filed_as())))
                });
            let problem = match own {
                None => Some(format!("{at} names no {kind}")),
                Some(Some((true, _))) => None,
                Some(Some((false, filed))) => Some(format!("{at} but {kind} {id} is {filed}")),
                Some(None) => Some(format!("{at} but {kind} {id} has no entry there")),
            };
            if let Some(problem) = problem {
                named += 1;
                report.problem(problem);
            }
            Ok(())
        })?;
        if named == 0 {
            let name = index.name;
            report.problem(format!("{name}: {held} entries where {declared} belong"));
        }
        Ok(())
    }
}

/// A value kept under the right key that is not the record's, in words.
fn other_value(index: &Index) -> &'static str {
    match index.holds {
        _ if index.unique => "another id",
        Holds::Stored => "a stale copy of the record",
        Holds::Code => "another status",
        Holds::Nothing => "another value",
    }
}

/// A store error as a problem's words: a corruption's own, else the error's.
fn words(e: StoreError) -> String {
    match e {
        StoreError::Corrupt(what) => what,
        other => other.to_string(),
    }
}

/// The feed: numbers in a row from just above the last purged to the newest, each event of a
/// known type, its JSON an object that names a pet id given out.
fn check_events(
    txn: &ReadTransaction,
    meta: &redb::ReadOnlyTable<&'static str, u64>,
    report: &mut CheckReport,
    given_out: &dyn Fn(i64) -> bool,
) -> Result<(), StoreError> {
    if meta_value(meta, META_FEED)? == 0 {
        report.problem("the feed's identity (meta feed) is missing".into());
    }
    let newest = meta_value(meta, META_EVENT_SEQ)?;
    let trimmed = meta_value(meta, META_EVENTS_TRIMMED)?;
    let events = txn.open_table(EVENTS).map_err(StoreError::storage)?;
    let mut expected = trimmed + 1;
    for entry in events.iter().map_err(StoreError::storage)? {
        let (seq, value) = entry.map_err(StoreError::storage)?;
        let seq = seq.value();
        report.events += 1;
        if seq != expected {
            report.problem(format!(
                "events: {seq} follows {} (numbers run on from the last purged, {trimmed}, \
                 without a gap)",
                expected - 1
            ));
        }
        expected = seq + 1;
        let event = match read_event(seq, value.value()) {
            Ok(event) => event,
            Err(e) => {
                report.problem(format!("event {seq}: {e}"));
                continue;
            }
        };
        // A category's event names no pet.
        if event.kind.subject() != crate::subject::Kind::Category && !given_out(event.pet_id) {
            report.problem(format!(
                "event {seq}: pet {} was never given out",
                event.pet_id
            ));
        }
        if let Some(pet) = &event.pet {
            match Pet::from_json(pet) {
                Ok(pet) if pet.id == event.pet_id => {}
                Ok(pet) => report.problem(format!(
                    "event {seq}: for pet {}, its JSON says id {}",
                    event.pet_id, pet.id
                )),
                Err(e) => report.problem(format!("event {seq}: its pet does not read back: {e}")),
            }
        }
    }
    if expected - 1 != newest.max(trimmed) {
        report.problem(format!(
            "events: the newest is {}, the counter (meta event_seq) says {newest}",
            expected - 1
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pet::NewPet;
    use crate::store::ops::CreateCategory;
    use crate::store::ops::any_revision::{deleting, patching};
    use crate::store::ops::categories::CATEGORY_NAMES;
    use crate::store::ops::orders::{HOLD_ENDS, ORDERS_BY_STATUS};
    use crate::store::ops::pets::PETS_BY_CATEGORY;
    use crate::store::resource::{Part, Value};
    use crate::store::{Location, Store, Tuning};
    use std::time::Duration;

    async fn open(path: &Path, shared: bool) -> Store {
        let location = Location::Redb {
            path: path.to_owned(),
            cache_bytes: 1 << 20,
            shared,
        };
        Store::open(location, tuning()).await.expect("opens").0
    }

    fn tuning() -> Tuning {
        Tuning {
            events_keep: crate::store::DEFAULT_EVENTS_KEEP,
            idempotency_ttl: Duration::from_secs(3600),
            max_write_batch: 64,
            order_hold: None,
        }
    }

    /// A closed store file with a few pets of each kind, one of them patched.
    fn sample(path: &Path) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let store = open(path, false).await;
            for (n, status) in [
                Some(PetStatus::Available),
                Some(PetStatus::Pending),
                Some(PetStatus::Sold),
                None,
                Some(PetStatus::Available),
            ]
            .into_iter()
            .enumerate()
            {
                let pet = NewPet {
                    name: format!("pet {n}"),
                    category_id: 1,
                    status,
                };
                store.create(pet, None).await.expect("created");
            }
            let patch = crate::pet::PetPatch {
                status: Some(Some(PetStatus::Sold)),
                ..Default::default()
            };
            store.write(patching(1, patch)).await.expect("patched");
            store.write(deleting(2)).await.expect("deleted");
            store.close().await;
        });
    }

    #[test]
    fn a_sound_file_checks_clean_with_its_counts() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("pets.redb");
        sample(&path);
        let report = check_file(&path).expect("checks");
        assert_eq!(report.problems, Vec::<String>::new());
        assert_eq!(report.pets, 4);
        assert_eq!(report.by_status, [1, 0, 2]);
        assert_eq!(report.without_status, 1);
        assert_eq!(report.index_entries, 3);
        assert_eq!(report.revisions, 1);
        assert_eq!(report.next_id, 6);
        let mut left: Vec<_> = fs::read_dir(dir.path())
            .expect("lists")
            .map(|entry| entry.expect("an entry").file_name())
            .collect();
        left.sort();
        assert_eq!(left, ["pets.redb"], "the scratch copy is removed");
    }

    /// Keeps record `owner`'s entry under `parts` in `index`, as a bug would.
    fn put(
        txn: &redb::WriteTransaction,
        index: &'static Index,
        owner: i64,
        parts: &[Part],
        value: Value,
    ) {
        let entry = index.entry(owner, parts, value);
        let mut table = txn.open_table(indexes::table(index)).expect("opens");
        let value = entry.value_bytes();
        table
            .insert(entry.key.as_slice(), value.as_ref())
            .expect("inserts");
    }

    /// Removes record `owner`'s entry under `parts` from `index`, which holds it.
    fn remove(txn: &redb::WriteTransaction, index: &'static Index, owner: i64, parts: &[Part]) {
        let entry = index.entry(owner, parts, Value::Nothing);
        let mut table = txn.open_table(indexes::table(index)).expect("opens");
        let removed = table.remove(entry.key.as_slice()).expect("removes");
        assert!(removed.is_some(), "{} held the entry", index.name);
    }

    /// Writes straight into the closed file, as a bug or an outside edit would.
    fn tamper(path: &Path, edit: impl FnOnce(&redb::WriteTransaction)) {
        let db = Database::open(path).expect("opens");
        let txn = db.begin_write().expect("begins");
        edit(&txn);
        txn.commit().expect("commits");
    }

    #[test]
    fn every_kind_of_disagreement_is_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("pets.redb");
        sample(&path);
        tamper(&path, |txn| {
            // Pet 5 (available) loses its entry; pet 3 (sold) gets a stale second one.
            remove(txn, &PETS_BY_STATUS, 5, &[Part::Code(0)]);
            put(
                txn,
                &PETS_BY_STATUS,
                3,
                &[Part::Code(1)],
                Value::Stored(br#"{"id":3}"#),
            );
            // Pet 1's entry holds old JSON; an entry for the deleted pet 2.
            let old = Value::Stored(br#"{"id":1,"name":"old"}"#);
            put(txn, &PETS_BY_STATUS, 1, &[Part::Code(2)], old);
            put(
                txn,
                &PETS_BY_STATUS,
                2,
                &[Part::Code(1)],
                Value::Stored(br#"{"id":2}"#),
            );
            let mut revisions = txn.open_table(REVISIONS).expect("revisions");
            revisions.insert(2i64, 2u64).expect("inserts");
            let mut records = txn.open_table(RECORDS).expect("records");
            records
                .insert((u64::MAX, 99i64), [0u8; 32])
                .expect("inserts");
        });
        let report = check_file(&path).expect("checks");
        let all = report.problems.join("\n");
        for expected in [
            "pet 5 (available): missing from the status index",
            "pet 1 (sold): the status index holds a stale copy",
            "entry (pending, 3) but pet 3 is sold",
            "entry (pending, 2) names no pet",
            "revisions: pet 2 does not exist",
            "idempotency record: pet 99 was never given out",
        ] {
            assert!(all.contains(expected), "{expected:?} not in:\n{all}");
        }
        assert_eq!(report.problem_count, 6, "{all}");
    }

    /// A closed store file with a category, a pet in it and an order placed on the pet with a
    /// hold's end: one entry in each index.
    fn sample_with_sales(path: &Path) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let location = Location::Redb {
                path: path.to_owned(),
                cache_bytes: 1 << 20,
                shared: false,
            };
            let held = Tuning {
                order_hold: Some(Duration::from_secs(600)),
                ..tuning()
            };
            let store = Store::open(location, held).await.expect("opens").0;
            let category = crate::category::NewCategory {
                name: "Dogs".into(),
            };
            let category = store
                .write(CreateCategory(category))
                .await
                .expect("created");
            let pet = NewPet {
                name: "Rex".into(),
                category_id: category.id,
                status: Some(PetStatus::Available),
            };
            let pet = store.create(pet, None).await.expect("created");
            let order = crate::order::NewOrder {
                pet_id: pet.pet.id,
                note: None,
            };
            store.place_order(order, None).await.expect("placed");
            store.close().await;
        });
    }

    #[test]
    fn each_index_missing_an_entry_holding_a_stray_or_another_value_is_named() {
        type Damage = fn(&redb::WriteTransaction);
        let damages: [(Damage, &str); 14] = [
            (
                |txn| remove(txn, &PETS_BY_STATUS, 1, &[Part::Code(1)]),
                "pet 1 (pending): missing from the status index",
            ),
            (
                |txn| {
                    put(
                        txn,
                        &PETS_BY_STATUS,
                        9,
                        &[Part::Code(0)],
                        Value::Stored(b"{}"),
                    )
                },
                "status index: entry (available, 9) names no pet",
            ),
            (
                |txn| {
                    put(
                        txn,
                        &PETS_BY_STATUS,
                        1,
                        &[Part::Code(1)],
                        Value::Stored(b"{}"),
                    )
                },
                "pet 1 (pending): the status index holds a stale copy of the record",
            ),
            (
                |txn| remove(txn, &PETS_BY_CATEGORY, 1, &[Part::Int(1), Part::Code(1)]),
                "pet 1 (1, pending): missing from the category index",
            ),
            (
                |txn| {
                    let parts = [Part::Int(2), Part::Code(1)];
                    put(txn, &PETS_BY_CATEGORY, 1, &parts, Value::Nothing)
                },
                "category index: entry (2, pending, 1) but pet 1 is 1, pending",
            ),
            (
                |txn| remove(txn, &ORDERS_BY_STATUS, 1, &[Part::Code(1)]),
                "order 1 (placed): missing from the order status index",
            ),
            (
                |txn| put(txn, &ORDERS_BY_STATUS, 7, &[Part::Code(2)], Value::Nothing),
                "order status index: entry (completed, 7) names no order",
            ),
            (
                |txn| remove(txn, &ORDERS_BY_PET, 1, &[Part::Int(1)]),
                "order 1 (1): missing from the order pet index",
            ),
            (
                |txn| put(txn, &ORDERS_BY_PET, 1, &[Part::Int(3)], Value::Code(0)),
                "order pet index: entry (3, 1) but order 1 is 1",
            ),
            (
                |txn| put(txn, &ORDERS_BY_PET, 1, &[Part::Int(1)], Value::Code(2)),
                "order 1 (1): the order pet index holds another status",
            ),
            (
                |txn| {
                    let mut ends = txn.open_table(indexes::table(&HOLD_ENDS)).expect("opens");
                    let end = ends
                        .first()
                        .expect("reads")
                        .expect("one")
                        .0
                        .value()
                        .to_vec();
                    ends.remove(end.as_slice()).expect("removes");
                },
                "missing from the hold ends",
            ),
            (
                |txn| put(txn, &HOLD_ENDS, 4, &[Part::Time(5)], Value::Nothing),
                "hold ends: entry (5, 4) names no order",
            ),
            (
                |txn| {
                    put(
                        txn,
                        &CATEGORY_NAMES,
                        1,
                        &[Part::Text("cats".into())],
                        Value::Nothing,
                    )
                },
                "category names: entry (\"cats\") but category 1 is \"dogs\"",
            ),
            (
                |txn| {
                    put(
                        txn,
                        &CATEGORY_NAMES,
                        2,
                        &[Part::Text("dogs".into())],
                        Value::Nothing,
                    )
                },
                "category 1 (\"dogs\"): the category names holds another id",
            ),
        ];
        let dir = tempfile::tempdir().expect("tempdir");
        let sound = dir.path().join("sound.redb");
        sample_with_sales(&sound);
        let report = check_file(&sound).expect("checks");
        assert_eq!(report.problems, Vec::<String>::new());
        for (damage, expected) in damages {
            let path = dir.path().join("damaged.redb");
            fs::copy(&sound, &path).expect("copies");
            tamper(&path, damage);
            let report = check_file(&path).expect("checks");
            let all = report.problems.join("\n");
            assert!(all.contains(expected), "{expected:?} not in:\n{all}");
        }
    }

    #[test]
    fn a_counter_below_an_id_is_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("pets.redb");
        sample(&path);
        tamper(&path, |txn| {
            let mut meta = txn.open_table(META).expect("meta");
            meta.insert(META_NEXT_ID, 4).expect("inserts");
        });
        let report = check_file(&path).expect("checks");
        assert!(
            report
                .problems
                .iter()
                .any(|p| p.starts_with("pet 5: id not below")),
            "{:?}",
            report.problems
        );
    }

    #[test]
    fn a_damaged_page_fails_the_integrity_check() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("pets.redb");
        sample(&path);
        let mut bytes = fs::read(&path).expect("reads");
        // Past redb's header (the first pages), every byte flipped: each page's checksum fails.
        for byte in bytes.iter_mut().skip(4096) {
            *byte ^= 0x5a;
        }
        fs::write(&path, &bytes).expect("writes");
        let report = check_file(&path).expect("checks");
        assert!(
            report
                .problems
                .iter()
                .any(|p| p.starts_with("file integrity")),
            "{:?}",
            report.problems
        );
    }

    #[test]
    fn the_file_of_a_sharing_store_is_checked_live_beside_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("pets.redb");
        sample(&path);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let store = open(&path, true).await;
            let report = check_file(&path).expect("checks");
            assert!(report.live);
            assert_eq!(report.problems, Vec::<String>::new());
            assert_eq!(report.pets, 4);
            store.close().await;
        });
        assert!(!check_file(&path).expect("checks").live);
    }

    #[test]
    fn a_file_that_is_empty_not_redb_or_not_ours_is_no_store_and_left_as_it_was() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("pets.redb");
        let other = dir.path().join("other.redb");
        drop(Database::create(&other).expect("creates"));
        let cases = [
            (Vec::new(), "the file is empty"),
            (b"pets: 3\n".to_vec(), "not a redb file"),
            (b"redb".to_vec(), "not a redb file"),
            (
                fs::read(&other).expect("reads"),
                "a redb file without petstore's tables",
            ),
        ];
        for (contents, why) in cases {
            fs::write(&path, &contents).expect("writes");
            let report = check_file(&path).expect("checks");
            let said = report.not_a_store.as_deref().unwrap_or_default();
            assert!(said.starts_with(why), "{said:?}, for {why}");
            assert_eq!((report.pets, report.problem_count), (0, 0));
            assert_eq!(fs::read(&path).expect("reads"), contents, "never written");
        }
    }

    #[test]
    fn a_file_in_use_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("pets.redb");
        let _db = Database::create(&path).expect("creates");
        assert!(matches!(check_file(&path), Err(StoreError::Locked)));
    }
}
