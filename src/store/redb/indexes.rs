//! The declared records and indexes (`store/resource.rs`) in the redb file: each resource's
//! table (id to its stored form) and each index's table (its encoded keys to their values),
//! named by the declaration. A write transaction opens them as it first needs them (`Open`)
//! and keeps a record's entries with it (`Open::put`, `Open::remove`: moved from the old
//! record's to the new one's); the rebuild at open, the import and `petstore check` work from
//! the same declarations, so none of them spells an entry. Invariant: an index's table holds
//! exactly the entries its records declare, with their values.

use redb::{ReadTransaction, ReadableTable, ReadableTableMetadata, TableDefinition};

use super::logged::{Logged, open_once};

use crate::store::model::StoreError;
use crate::store::ops::each_resource;
use crate::store::resource::{Entry, ForEach, Index, Part, Resource, id_range};

/// The table of an index: its keys as `resource::Key` encodes them.
pub(super) fn table(index: &Index) -> TableDefinition<'static, &'static [u8], &'static [u8]> {
    TableDefinition::new(index.name)
}

/// The table of a resource's records: id to the stored form.
pub(super) fn records<R: Resource>() -> TableDefinition<'static, i64, &'static [u8]> {
    TableDefinition::new(R::TABLE)
}

type IndexTable<'txn> = Logged<'txn, &'static [u8], &'static [u8]>;
type RecordTable<'txn> = Logged<'txn, i64, &'static [u8]>;
type ReadIndex = redb::ReadOnlyTable<&'static [u8], &'static [u8]>;
/// What `Read::each` calls with each entry (`None`: its bytes are none) and its key.
type Visit<'v> = dyn FnMut(Option<&Entry>, &[u8]) -> Result<(), StoreError> + 'v;

/// The declared tables a write transaction has opened, each at its first use, through the
/// log's recording point (`logged.rs`).
pub(super) struct Open<'txn> {
    txn: &'txn redb::WriteTransaction,
    records: Vec<(&'static str, RecordTable<'txn>)>,
    indexes: Vec<(&'static str, IndexTable<'txn>)>,
}

impl<'txn> Open<'txn> {
    pub(super) fn new(txn: &'txn redb::WriteTransaction) -> Open<'txn> {
        Open {
            txn,
            records: Vec::new(),
            indexes: Vec::new(),
        }
    }

    /// The table of `R`'s records.
    pub(super) fn records<R: Resource>(&mut self) -> Result<&mut RecordTable<'txn>, StoreError> {
        let txn = self.txn;
        open_once(&mut self.records, R::TABLE, || {
            Logged::open(txn, records::<R>())
        })
    }

    /// The table of `index`.
    pub(super) fn index(&mut self, index: &Index) -> Result<&mut IndexTable<'txn>, StoreError> {
        let txn = self.txn;
        open_once(&mut self.indexes, index.name, || {
            Logged::open(txn, table(index))
        })
    }

    /// Record `id` of `R`, read back.
    pub(super) fn get<R: Resource>(&mut self, id: i64) -> Result<Option<R>, StoreError> {
        let table = self.records::<R>()?;
        let Some(stored) = table.get(id).map_err(StoreError::storage)? else {
            return Ok(None);
        };
        R::decode(id, stored.value()).map(Some)
    }

    /// Stores `new` as `stored` (its stored form) in place of `old` (`None`: a new record),
    /// with its entries.
    pub(super) fn put<R: Resource>(
        &mut self,
        old: Option<&R>,
        new: &R,
        stored: &[u8],
    ) -> Result<(), StoreError> {
        self.records::<R>()?.insert(new.id(), stored)?;
        // The old entries go in the same transaction as the new ones come: a filter never
        // sees the record twice, or as it was.
        let old = old.map_or_else(Vec::new, |old| old.entries(&[]));
        self.rewrite(&old, &new.entries(stored))
    }

    /// Removes `old` and its entries.
    pub(super) fn remove<R: Resource>(&mut self, old: &R) -> Result<(), StoreError> {
        self.records::<R>()?.remove(old.id())?;
        self.rewrite(&old.entries(&[]), &[])
    }

    /// Moves a record's entries from `old` to `new`: an old entry whose key the new ones lack
    /// is removed, a new one is inserted unless the old ones hold it with the same value. A
    /// key kept with another value is overwritten, not removed first.
    pub(super) fn rewrite(&mut self, old: &[Entry], new: &[Entry]) -> Result<(), StoreError> {
        for gone in old {
            if !new.iter().any(|kept| kept.same_key(gone)) {
                let table = self.index(gone.index)?;
                table.remove(gone.key.as_slice())?;
            }
        }
        for came in new {
            if !old.contains(came) {
                let value = came.value_bytes();
                let table = self.index(came.index)?;
                table.insert(came.key.as_slice(), value.as_ref())?;
            }
        }
        Ok(())
    }

    /// Up to `limit` entries of a non-unique `index` under `parts`, in key order from the
    /// record after `after`: their records' ids and values.
    pub(super) fn scan(
        &mut self,
        index: &Index,
        parts: &[Part],
        after: i64,
        limit: usize,
    ) -> Result<Vec<(i64, Vec<u8>)>, StoreError> {
        let table = self.index(index)?;
        scan(&**table, &index.prefix(parts), after, limit)
    }
}

/// What `scan` reads a non-unique index's entries under `prefix` with: the record ids above
/// `after`, in order, with their values, at most `limit`.
pub(super) fn scan(
    table: &impl ReadableTable<&'static [u8], &'static [u8]>,
    prefix: &[u8],
    after: i64,
    limit: usize,
) -> Result<Vec<(i64, Vec<u8>)>, StoreError> {
    let mut found = Vec::new();
    if after == i64::MAX || limit == 0 {
        return Ok(found);
    }
    let (first, last) = id_range(prefix, after + 1);
    for entry in table
        .range(first.as_slice()..=last.as_slice())
        .map_err(StoreError::storage)?
        .take(limit)
    {
        let (key, value) = entry.map_err(StoreError::storage)?;
        let id = crate::store::resource::owner_of(key.value())?;
        found.push((id, value.value().to_vec()));
    }
    Ok(found)
}

/// Writes every record's entries into its indexes, in the transaction `txn`: for a file
/// whose indexes are new (an upgrade) or empty (an import, which writes records alone).
pub(super) fn rebuild(txn: &redb::WriteTransaction) -> Result<(), StoreError> {
    struct Rebuild<'t, 'txn>(&'t mut Open<'txn>);
    impl ForEach for Rebuild<'_, '_> {
        fn visit<R: Resource>(&mut self) -> Result<(), StoreError> {
            let records = self.0.txn.open_table(records::<R>());
            let records = records.map_err(StoreError::storage)?;
            for row in records.iter().map_err(StoreError::storage)? {
                let (id, stored) = row.map_err(StoreError::storage)?;
                let record = R::decode(id.value(), stored.value())?;
                self.0.rewrite(&[], &record.entries(stored.value()))?;
            }
            Ok(())
        }
    }
    let mut open = Open::new(txn);
    each_resource(&mut Rebuild(&mut open))
}

/// The index tables as a read transaction sees them, for `petstore check`.
pub(super) struct Read {
    tables: Vec<(&'static str, ReadIndex)>,
}

impl Read {
    pub(super) fn open(txn: &ReadTransaction) -> Result<Read, StoreError> {
        let mut tables = Vec::new();
        for index in crate::store::ops::all_indexes() {
            let table = txn.open_table(table(index)).map_err(StoreError::storage)?;
            tables.push((index.name, table));
        }
        Ok(Read { tables })
    }

    fn table(&self, index: &Index) -> Result<&ReadIndex, StoreError> {
        self.tables
            .iter()
            .find(|(name, _)| *name == index.name)
            .map(|(_, table)| table)
            .ok_or_else(|| StoreError::Corrupt(format!("no table {} was opened", index.name)))
    }

    /// Whether `entry`'s key is kept (`None`: it is not) and then with `entry`'s value.
    pub(super) fn holds(&self, entry: &Entry) -> Result<Option<bool>, StoreError> {
        let held = self
            .table(entry.index)?
            .get(entry.key.as_slice())
            .map_err(StoreError::storage)?;
        Ok(held.map(|held| held.value() == entry.value_bytes().as_ref()))
    }

    /// The number of entries `index` holds.
    pub(super) fn len(&self, index: &Index) -> Result<u64, StoreError> {
        self.table(index)?.len().map_err(StoreError::storage)
    }

    /// Calls `visit` with every entry `index` holds, in key order (`None`: bytes that are no
    /// entry of it).
    pub(super) fn each(&self, index: &'static Index, visit: &mut Visit) -> Result<(), StoreError> {
        for row in self.table(index)?.iter().map_err(StoreError::storage)? {
            let (key, value) = row.map_err(StoreError::storage)?;
            let (key, value) = (key.value(), value.value());
            visit(index.read(key, value).as_ref(), key)?;
        }
        Ok(())
    }
}
