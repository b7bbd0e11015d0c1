//! The one point every write of a batch to the redb file passes: `Logged`, a table whose
//! `insert` and `remove` also note the change (table, key and value as redb stores them) in
//! the batch's record, which the writer appends to the write-ahead log (`redb/log.rs`) before
//! the batch commits. `replay` writes a record back into the file, change by change, in order.
//! A batch reads its tables through `Logged` too (it derefs to the table, read-only), and
//! never opens one any other way, so nothing it writes can miss the log; a test replays the
//! log of every kind of write over the file as it was and compares every table
//! (`redb.rs`, `a_replayed_log_gives_every_table_as_the_batches_left_it`).
//!
//! A record is a sequence of changes: a tag (1 insert, 2 remove), the table's name (one byte
//! of length), the key and, for an insert, the value (four bytes of length each).

use std::borrow::Borrow;
use std::cell::RefCell;
use std::ops::Deref;
use std::sync::OnceLock;

use redb::{Key, Table, TableDefinition, TableHandle, Value, WriteTransaction};

use super::tables::{EVENTS, META, RECORDS, REVISIONS, SESSIONS, WEBHOOKS};
use crate::store::model::StoreError;
use crate::store::ops::each_resource;
use crate::store::resource::{ForEach, Resource};

const INSERT: u8 = 1;
const REMOVE: u8 = 2;

thread_local! {
    /// The record of the batch this thread is writing, from `start` to `take`; `None` when
    /// no log is kept (a file shared with other processes commits each batch durably).
    static RECORD: RefCell<Option<Vec<u8>>> = const { RefCell::new(None) };
}

/// Starts the record of a batch on this thread, dropping whatever a failed one left.
pub(super) fn start() {
    RECORD.with_borrow_mut(|record| match record {
        Some(record) => record.clear(),
        None => *record = Some(Vec::with_capacity(4096)),
    });
}

/// The record of the batch this thread wrote, since `start`.
pub(super) fn take() -> Vec<u8> {
    RECORD.with_borrow_mut(|record| record.as_mut().map(std::mem::take).unwrap_or_default())
}

/// Stops recording on this thread: for a file without a log.
pub(super) fn stop() {
    RECORD.with_borrow_mut(|record| *record = None);
}

fn note(tag: u8, table: &str, key: &[u8], value: Option<&[u8]>) {
    RECORD.with_borrow_mut(|record| {
        let Some(record) = record else { return };
        record.push(tag);
        // Table names are short constants (`tables.rs`, the declarations).
        record.push(table.len() as u8);
        record.extend_from_slice(table.as_bytes());
        record.extend_from_slice(&(key.len() as u32).to_le_bytes());
        record.extend_from_slice(key);
        if let Some(value) = value {
            record.extend_from_slice(&(value.len() as u32).to_le_bytes());
            record.extend_from_slice(value);
        }
    });
}

/// A table of the batch's transaction whose every change goes into the batch's record.
pub(super) struct Logged<'txn, K: Key + 'static, V: Value + 'static> {
    table: Table<'txn, K, V>,
    name: String,
}

impl<'txn, K: Key + 'static, V: Value + 'static> Logged<'txn, K, V> {
    pub(super) fn open(
        txn: &'txn WriteTransaction,
        definition: TableDefinition<'_, K, V>,
    ) -> Result<Logged<'txn, K, V>, StoreError> {
        let name = definition.name().to_owned();
        let table = txn.open_table(definition).map_err(StoreError::storage)?;
        Ok(Logged { table, name })
    }

    pub(super) fn insert<'k, 'v>(
        &mut self,
        key: impl Borrow<K::SelfType<'k>>,
        value: impl Borrow<V::SelfType<'v>>,
    ) -> Result<(), StoreError> {
        note(
            INSERT,
            &self.name,
            K::as_bytes(key.borrow()).as_ref(),
            Some(V::as_bytes(value.borrow()).as_ref()),
        );
        self.table
            .insert(key, value)
            .map(drop)
            .map_err(StoreError::storage)
    }

    /// Removes `key`; returns whether it was there.
    pub(super) fn remove<'k>(
        &mut self,
        key: impl Borrow<K::SelfType<'k>>,
    ) -> Result<bool, StoreError> {
        let removed = self
            .table
            .remove(key.borrow())
            .map_err(StoreError::storage)?
            .is_some();
        if removed {
            note(REMOVE, &self.name, K::as_bytes(key.borrow()).as_ref(), None);
        }
        Ok(removed)
    }
}

impl<'txn, K: Key + 'static, V: Value + 'static> Deref for Logged<'txn, K, V> {
    type Target = Table<'txn, K, V>;

    /// Reads only: a `&Table` cannot insert or remove.
    fn deref(&self) -> &Table<'txn, K, V> {
        &self.table
    }
}

/// The declared tables by name: `true` for a resource's records, `false` for an index.
fn declared() -> &'static [(&'static str, bool)] {
    static DECLARED: OnceLock<Vec<(&'static str, bool)>> = OnceLock::new();
    DECLARED.get_or_init(|| {
        struct Names(Vec<(&'static str, bool)>);
        impl ForEach for Names {
            fn visit<R: Resource>(&mut self) -> Result<(), StoreError> {
                self.0.push((R::TABLE, true));
                self.0
                    .extend(R::INDEXES.iter().map(|index| (index.name, false)));
                Ok(())
            }
        }
        let mut names = Names(Vec::new());
        let _ = each_resource(&mut names);
        names.0
    })
}

fn broken() -> StoreError {
    StoreError::Corrupt("a record of the write-ahead log does not parse".into())
}

/// Reads a record from the front.
struct Reader<'a> {
    record: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], StoreError> {
        let bytes = self.record.get(self.at..self.at + n).ok_or_else(broken)?;
        self.at += n;
        Ok(bytes)
    }

    fn length(&mut self) -> Result<usize, StoreError> {
        let mut word = [0; 4];
        word.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(word) as usize)
    }
}

type Records<'txn> = Table<'txn, i64, &'static [u8]>;
type Entries<'txn> = Table<'txn, &'static [u8], &'static [u8]>;

/// Writes records back into a transaction, each table opened once.
pub(super) struct Replay<'txn> {
    txn: &'txn WriteTransaction,
    records: Vec<(&'static str, Records<'txn>)>,
    entries: Vec<(&'static str, Entries<'txn>)>,
}

impl<'txn> Replay<'txn> {
    pub(super) fn new(txn: &'txn WriteTransaction) -> Replay<'txn> {
        Replay {
            txn,
            records: Vec::new(),
            entries: Vec::new(),
        }
    }

    /// Makes every change of `record` again, in order.
    pub(super) fn apply(&mut self, record: &[u8]) -> Result<(), StoreError> {
        let mut reader = Reader { record, at: 0 };
        while reader.at < record.len() {
            let tag = reader.take(1)?[0];
            let name_length = reader.take(1)?[0] as usize;
            let name = std::str::from_utf8(reader.take(name_length)?).map_err(|_| broken())?;
            let key_length = reader.length()?;
            let key = reader.take(key_length)?;
            let value = match tag {
                INSERT => {
                    let value_length = reader.length()?;
                    Some(reader.take(value_length)?)
                }
                REMOVE => None,
                _ => return Err(broken()),
            };
            self.change(name, key, value)?;
        }
        Ok(())
    }

    fn change(&mut self, name: &str, key: &[u8], value: Option<&[u8]>) -> Result<(), StoreError> {
        let txn = self.txn;
        match name {
            _ if name == REVISIONS.name() => change(txn, REVISIONS, key, value),
            _ if name == RECORDS.name() => change(txn, RECORDS, key, value),
            _ if name == META.name() => change(txn, META, key, value),
            _ if name == EVENTS.name() => change(txn, EVENTS, key, value),
            _ if name == WEBHOOKS.name() => change(txn, WEBHOOKS, key, value),
            _ if name == SESSIONS.name() => change(txn, SESSIONS, key, value),
            _ => match declared().iter().find(|(declared, _)| *declared == name) {
                Some((name, true)) => {
                    let table = opened(&mut self.records, txn, name)?;
                    set(table, key, value)
                }
                Some((name, false)) => {
                    let table = opened(&mut self.entries, txn, name)?;
                    set(table, key, value)
                }
                None => Err(StoreError::Corrupt(format!(
                    "a log record names the table {name:?}, which this build does not have"
                ))),
            },
        }
    }
}

/// The table named `name` among those `open` holds, opened by `make` at its first use: a
/// batch, a replay or the declared tables (`indexes::Open`) open each table once.
pub(super) fn open_once<'o, T>(
    open: &'o mut Vec<(&'static str, T)>,
    name: &'static str,
    make: impl FnOnce() -> Result<T, StoreError>,
) -> Result<&'o mut T, StoreError> {
    let at = match open.iter().position(|(open, _)| *open == name) {
        Some(at) => at,
        None => {
            open.push((name, make()?));
            open.len() - 1
        }
    };
    Ok(&mut open[at].1)
}

fn opened<'o, 'txn, K: Key + 'static, V: Value + 'static>(
    open: &'o mut Vec<(&'static str, Table<'txn, K, V>)>,
    txn: &'txn WriteTransaction,
    name: &'static str,
) -> Result<&'o mut Table<'txn, K, V>, StoreError> {
    open_once(open, name, || {
        let definition: TableDefinition<'_, K, V> = TableDefinition::new(name);
        txn.open_table(definition).map_err(StoreError::storage)
    })
}

fn change<K: Key + 'static, V: Value + 'static>(
    txn: &WriteTransaction,
    definition: TableDefinition<'_, K, V>,
    key: &[u8],
    value: Option<&[u8]>,
) -> Result<(), StoreError> {
    let mut table = txn.open_table(definition).map_err(StoreError::storage)?;
    set(&mut table, key, value)
}

fn set<K: Key + 'static, V: Value + 'static>(
    table: &mut Table<'_, K, V>,
    key: &[u8],
    value: Option<&[u8]>,
) -> Result<(), StoreError> {
    let key = K::from_bytes(key);
    match value {
        Some(value) => table
            .insert(key, V::from_bytes(value))
            .map(drop)
            .map_err(StoreError::storage),
        None => table.remove(key).map(drop).map_err(StoreError::storage),
    }
}

/// A table's rows as their bytes: key, value.
#[cfg(test)]
pub(super) type Rows = Vec<(Vec<u8>, Vec<u8>)>;

/// Every table of `db` as its bytes, by name (a table not made yet as an empty one): what a
/// test compares between a file and its copy with the log replayed.
#[cfg(test)]
pub(super) fn dump(db: &redb::Database) -> Vec<(String, Rows)> {
    use redb::{ReadableDatabase, ReadableTable};
    fn table<K: Key + 'static, V: Value + 'static>(
        txn: &redb::ReadTransaction,
        definition: TableDefinition<'_, K, V>,
    ) -> Rows {
        let table = match txn.open_table(definition) {
            Ok(table) => table,
            Err(redb::TableError::TableDoesNotExist(_)) => return Vec::new(),
            Err(e) => panic!("opening a table: {e}"),
        };
        let rows = table.iter().expect("iterates");
        rows.map(|row| {
            let (key, value) = row.expect("a row");
            (
                K::as_bytes(&key.value()).as_ref().to_vec(),
                V::as_bytes(&value.value()).as_ref().to_vec(),
            )
        })
        .collect()
    }
    let txn = db.begin_read().expect("a read transaction");
    let mut tables = vec![
        (REVISIONS.name().to_owned(), table(&txn, REVISIONS)),
        (RECORDS.name().to_owned(), table(&txn, RECORDS)),
        (META.name().to_owned(), table(&txn, META)),
        (EVENTS.name().to_owned(), table(&txn, EVENTS)),
        (WEBHOOKS.name().to_owned(), table(&txn, WEBHOOKS)),
        (SESSIONS.name().to_owned(), table(&txn, SESSIONS)),
    ];
    for (name, records) in declared() {
        let rows = if *records {
            table(&txn, TableDefinition::<i64, &[u8]>::new(name))
        } else {
            table(&txn, TableDefinition::<&[u8], &[u8]>::new(name))
        };
        tables.push(((*name).to_owned(), rows));
    }
    tables
}
