//! What an order's writes cost the redb writer against a create's, table by table: the
//! write sets of `src/store/redb/writer.rs` and `sales.rs` (schema 5), each batch a durable
//! two-phase quick-repair commit as the server makes it, on a fresh file of 200,000 available
//! pets. The order's write set is measured whole, then without each of its index writes, then
//! without all of them (what no layout that keeps the issue's indexes can go below), and in
//! two layouts that keep them all: the revision in the pet's row, and the order's four rows
//! as key spaces of one table (docs/performance.md, "Orders").
//!
//! CPU is the writer thread's (`getrusage(RUSAGE_THREAD)`, user and kernel: the commit's page
//! writes and syncs are most of it), pages are the bytes redb hands its file a commit over
//! 4 KiB. The figures are medians of alternating rounds, and the ratio is a create's CPU over
//! the variant's: the writer's share of the load bench's "orders over creates a core".
//!
//! `taskset -c 1 cargo bench --bench layout` (about two minutes).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use redb::backends::FileBackend;
use redb::{Builder, Database, ReadableTable, StorageBackend, TableDefinition, WriteTransaction};

// The server's tables (src/store/redb/tables.rs), with the same key and value types.
const PETS: TableDefinition<i64, &[u8]> = TableDefinition::new("pets");
const PETS_BY_STATUS: TableDefinition<(u8, i64), &[u8]> = TableDefinition::new("pets_by_status");
const PETS_BY_CATEGORY: TableDefinition<(i64, u8, i64), ()> =
    TableDefinition::new("pets_by_category");
const REVISIONS: TableDefinition<i64, u64> = TableDefinition::new("revisions");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const EVENTS: TableDefinition<u64, &[u8]> = TableDefinition::new("events");
const ORDERS: TableDefinition<i64, &[u8]> = TableDefinition::new("orders");
const ORDERS_BY_STATUS: TableDefinition<(u8, i64), ()> = TableDefinition::new("orders_by_status");
const ORDERS_BY_PET: TableDefinition<(i64, i64), u8> = TableDefinition::new("orders_by_pet");
const HOLD_ENDS: TableDefinition<(u64, i64), ()> = TableDefinition::new("hold_ends");
/// A layout to try: the order, its status, pet and hold entries as key spaces of one table.
const SALES: TableDefinition<(u8, i64, i64), &[u8]> = TableDefinition::new("sales");

const AVAILABLE: u8 = 0;
const PENDING: u8 = 1;
const PLACED: u8 = 0;
const CATEGORY: i64 = 1;
/// The load bench's pets before the first order, and the server's mean batch at 64 clients.
const POOL: i64 = 200_000;
const BATCH: i64 = 32;
const COMMITS: i64 = 1_500;
const ROUNDS: usize = 5;
const PAGE: f64 = 4096.0;

/// A write an order makes besides the pet's own row, its status and category moves, the order
/// and the event: the ones a different layout might do without.
#[derive(Clone, Copy, PartialEq)]
enum Index {
    Revision,
    OrderStatus,
    OrderPet,
    HoldEnd,
}

const INDEXES: [Index; 4] = [
    Index::Revision,
    Index::OrderStatus,
    Index::OrderPet,
    Index::HoldEnd,
];

#[derive(Clone, Copy)]
enum Variant {
    Create,
    /// An order, without the index writes listed.
    Order(&'static [Index]),
    /// An order in another layout.
    Layout(Layout),
}

/// Where an order's rows go; the server's (schema 5) is both false.
#[derive(Clone, Copy, Default)]
struct Layout {
    /// The revision in front of the pet's JSON in its row, not in a row of its own.
    revision_in_row: bool,
    /// The order, its status, pet and hold entries as key spaces of one table (`SALES`).
    one_table: bool,
}

const VARIANTS: [(&str, Variant); 9] = [
    (
        "create (pet, status and category entries, event)",
        Variant::Create,
    ),
    ("order, as the server writes it", Variant::Order(&[])),
    (
        "order without the pet's revision row",
        Variant::Order(&[Index::Revision]),
    ),
    (
        "order without orders_by_status",
        Variant::Order(&[Index::OrderStatus]),
    ),
    (
        "order without orders_by_pet",
        Variant::Order(&[Index::OrderPet]),
    ),
    ("order without hold_ends", Variant::Order(&[Index::HoldEnd])),
    ("order without any of these four", Variant::Order(&INDEXES)),
    (
        "order, the revision in the pet's row",
        Variant::Layout(Layout {
            revision_in_row: true,
            one_table: false,
        }),
    ),
    (
        "order, its four rows in one table",
        Variant::Layout(Layout {
            revision_in_row: false,
            one_table: true,
        }),
    ),
];

/// redb's own file backend, counting the bytes redb writes through it.
#[derive(Debug)]
struct Counted {
    inner: FileBackend,
    bytes: Arc<AtomicU64>,
}

impl StorageBackend for Counted {
    fn len(&self) -> std::io::Result<u64> {
        self.inner.len()
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> std::io::Result<()> {
        self.inner.read(offset, out)
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.inner.set_len(len)
    }
    fn sync_data(&self) -> std::io::Result<()> {
        self.inner.sync_data()
    }
    fn write(&self, offset: u64, data: &[u8]) -> std::io::Result<()> {
        self.bytes.fetch_add(data.len() as u64, Ordering::Relaxed);
        self.inner.write(offset, data)
    }
    fn close(&self) -> std::io::Result<()> {
        self.inner.close()
    }
}

/// A pet's JSON as the load bench's fill makes it.
fn pet(id: i64, status: &str) -> Vec<u8> {
    format!(r#"{{"id":{id},"name":"bench","categoryId":{CATEGORY},"status":"{status}"}}"#)
        .into_bytes()
}

/// The revision of a pet's row in the `revision_in_row` layout: after a marker byte (0, which
/// no JSON starts with), big-endian; a row that is the JSON alone is at revision 1.
fn in_row_revision(row: &[u8]) -> u64 {
    match row {
        [0, revision @ ..] if revision.len() >= 8 => {
            let mut bytes = [0; 8];
            bytes.copy_from_slice(&revision[..8]);
            u64::from_be_bytes(bytes)
        }
        _ => 1,
    }
}

/// User plus kernel CPU seconds of the calling thread.
fn thread_cpu() -> f64 {
    // SAFETY: getrusage writes the struct it is given and nothing else.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_THREAD, &mut usage);
        usage
    };
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

struct Store {
    db: Database,
    bytes: Arc<AtomicU64>,
    next_pet: i64,
    next_order: i64,
    /// The next available pet an order takes: ids in order, as the load bench's clients do.
    next_ordered: i64,
    event_seq: u64,
}

impl Store {
    fn new(dir: &std::path::Path) -> Store {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.join("layout.redb"))
            .expect("a database file");
        let bytes = Arc::new(AtomicU64::new(0));
        let backend = Counted {
            inner: FileBackend::new(file).expect("a file backend"),
            bytes: bytes.clone(),
        };
        let db = Builder::new()
            .create_with_backend(backend)
            .expect("a database");
        let mut store = Store {
            db,
            bytes,
            next_pet: 1,
            next_order: 1,
            next_ordered: 1,
            event_seq: 0,
        };
        for _ in 0..POOL / 1000 {
            store.creates(1000);
        }
        store
    }

    fn begin(&self) -> WriteTransaction {
        let mut txn = self.db.begin_write().expect("begin");
        txn.set_two_phase_commit(true);
        txn.set_quick_repair(true);
        txn
    }

    fn event(&mut self, events: &mut redb::Table<u64, &[u8]>, kind: u8, json: &[&[u8]]) {
        self.event_seq += 1;
        // Type code and time, then the JSON (src/store/events.rs).
        let mut value = vec![kind; 9];
        for part in json {
            value.extend_from_slice(part);
        }
        events
            .insert(self.event_seq, value.as_slice())
            .expect("event");
    }

    fn creates(&mut self, n: i64) {
        let txn = self.begin();
        {
            let mut pets = txn.open_table(PETS).expect("pets");
            let mut by_status = txn.open_table(PETS_BY_STATUS).expect("by status");
            let mut by_category = txn.open_table(PETS_BY_CATEGORY).expect("by category");
            let mut events = txn.open_table(EVENTS).expect("events");
            let mut meta = txn.open_table(META).expect("meta");
            for _ in 0..n {
                let id = self.next_pet;
                self.next_pet += 1;
                let json = pet(id, "available");
                pets.insert(id, json.as_slice()).expect("pet");
                by_status
                    .insert((AVAILABLE, id), json.as_slice())
                    .expect("status");
                by_category
                    .insert((CATEGORY, AVAILABLE, id), ())
                    .expect("category");
                self.event(&mut events, 1, &[&json]);
            }
            for key in ["next_id", "event_seq", "pets_available", "batch"] {
                meta.insert(key, self.event_seq).expect("meta");
            }
        }
        txn.commit().expect("commit");
    }

    fn orders(&mut self, n: i64, without: &[Index], layout: Layout) {
        let with = |index: Index| !without.contains(&index);
        let revision_row = with(Index::Revision) && !layout.revision_in_row;
        let txn = self.begin();
        {
            let mut pets = txn.open_table(PETS).expect("pets");
            let mut by_status = txn.open_table(PETS_BY_STATUS).expect("by status");
            let mut by_category = txn.open_table(PETS_BY_CATEGORY).expect("by category");
            let mut revisions = txn.open_table(REVISIONS).expect("revisions");
            let mut events = txn.open_table(EVENTS).expect("events");
            let mut meta = txn.open_table(META).expect("meta");
            let mut orders = txn.open_table(ORDERS).expect("orders");
            let mut orders_by_status = txn.open_table(ORDERS_BY_STATUS).expect("by status");
            let mut orders_by_pet = txn.open_table(ORDERS_BY_PET).expect("by pet");
            let mut hold_ends = txn.open_table(HOLD_ENDS).expect("hold ends");
            // Opened only by the layout that writes it: opening makes it.
            let mut sales = layout
                .one_table
                .then(|| txn.open_table(SALES).expect("sales"));
            for _ in 0..n {
                let id = self.next_ordered;
                self.next_ordered += 1;
                let revision = {
                    let row = pets.get(id).expect("read").expect("the pool's pet");
                    let row = row.value();
                    assert!(row.ends_with(br#""available"}"#), "pet {id} is available");
                    if layout.revision_in_row {
                        in_row_revision(row)
                    } else if revision_row {
                        revisions.get(id).expect("read").map_or(1, |r| r.value())
                    } else {
                        1
                    }
                };
                let json = pet(id, "pending");
                if layout.revision_in_row {
                    // A marker byte that no JSON starts with, the revision, the JSON.
                    let mut row = Vec::with_capacity(9 + json.len());
                    row.push(0);
                    row.extend_from_slice(&(revision + 1).to_be_bytes());
                    row.extend_from_slice(&json);
                    pets.insert(id, row.as_slice()).expect("pet");
                } else {
                    pets.insert(id, json.as_slice()).expect("pet");
                }
                by_status.remove((AVAILABLE, id)).expect("status");
                by_status
                    .insert((PENDING, id), json.as_slice())
                    .expect("status");
                by_category
                    .remove((CATEGORY, AVAILABLE, id))
                    .expect("category");
                by_category
                    .insert((CATEGORY, PENDING, id), ())
                    .expect("category");
                if revision_row {
                    revisions.insert(id, revision + 1).expect("revision");
                }
                let order = self.next_order;
                self.next_order += 1;
                let end = 1_800_000_000_000 + order as u64;
                let record = format!(
                    r#"{{"id":{order},"petId":{id},"status":"placed","placedAt":1764320000000,"expiresAt":{end},"revision":1}}"#
                );
                if let Some(sales) = &mut sales {
                    sales
                        .insert((0, order, 0), record.as_bytes())
                        .expect("order");
                    let placed = i64::from(PLACED);
                    sales.insert((1, placed, order), &[][..]).expect("status");
                    sales.insert((2, id, order), &[PLACED][..]).expect("pet");
                    sales.insert((3, end as i64, order), &[][..]).expect("hold");
                } else {
                    orders.insert(order, record.as_bytes()).expect("order");
                    if with(Index::OrderStatus) {
                        orders_by_status
                            .insert((PLACED, order), ())
                            .expect("order status");
                    }
                    if with(Index::OrderPet) {
                        orders_by_pet
                            .insert((id, order), PLACED)
                            .expect("order pet");
                    }
                    if with(Index::HoldEnd) {
                        hold_ends.insert((end, order), ()).expect("hold end");
                    }
                }
                self.event(&mut events, 5, &[record.as_bytes(), &json]);
            }
            for key in [
                "next_order_id",
                "event_seq",
                "pets_available",
                "pets_pending",
                "batch",
            ] {
                meta.insert(key, self.event_seq).expect("meta");
            }
        }
        txn.commit().expect("commit");
    }
}

/// Writer CPU a write in µs and pages a commit, over `COMMITS` batches on a fresh store.
fn round(variant: Variant) -> (f64, f64) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let mut store = Store::new(dir.path());
    let (cpu, bytes) = (thread_cpu(), store.bytes.load(Ordering::Relaxed));
    for _ in 0..COMMITS {
        match variant {
            Variant::Create => store.creates(BATCH),
            Variant::Order(without) => store.orders(BATCH, without, Layout::default()),
            Variant::Layout(layout) => store.orders(BATCH, &[], layout),
        }
    }
    let writes = (COMMITS * BATCH) as f64;
    let written = (store.bytes.load(Ordering::Relaxed) - bytes) as f64;
    (
        (thread_cpu() - cpu) / writes * 1e6,
        written / PAGE / COMMITS as f64,
    )
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    println!(
        "writer thread, {COMMITS} commits of {BATCH} writes a round on {POOL} pets, {ROUNDS} alternating rounds"
    );
    let mut cpu = [const { Vec::new() }; VARIANTS.len()];
    let mut pages = [const { Vec::new() }; VARIANTS.len()];
    for _ in 0..ROUNDS {
        for (slot, (name, variant)) in VARIANTS.into_iter().enumerate() {
            let (us, per_commit) = round(variant);
            println!("  {name:<52} CPU a write {us:5.2} us, {per_commit:4.1} pages a commit");
            cpu[slot].push(us);
            pages[slot].push(per_commit);
        }
    }
    let cpu = cpu.map(median);
    let pages = pages.map(median);
    println!("medians; a create's CPU over the variant's:");
    for (slot, (name, _)) in VARIANTS.into_iter().enumerate() {
        println!(
            "  {name:<52} CPU a write {:5.2} us ({:.2}), {:4.1} pages a commit",
            cpu[slot],
            cpu[0] / cpu[slot],
            pages[slot]
        );
    }
}
