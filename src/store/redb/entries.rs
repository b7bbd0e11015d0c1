//! The index entries each record keeps, declared once: a pet's in `PETS_BY_STATUS` and
//! `PETS_BY_CATEGORY`, an order's in `ORDERS_BY_STATUS`, `ORDERS_BY_PET` and `HOLD_ENDS`, a
//! category's in `CATEGORY_NAMES`, and the one mapping of an entry to its table (insert,
//! remove, read back). The writer, the rebuild at open, the import and `petstore check` all
//! work from these; none of them spells an entry itself. Invariant: an index holds exactly the
//! entries its records declare, with their values. (`REVISIONS` is no index of this kind.)

use redb::{ReadOnlyTable, ReadTransaction, ReadableTable, ReadableTableMetadata};

use super::tables::{
    CATEGORY_NAMES, HOLD_ENDS, ORDERS_BY_PET, ORDERS_BY_STATUS, PETS_BY_CATEGORY, PETS_BY_STATUS,
    PetIndexes, Sales, category_status_code,
};
use crate::category::{self, Category};
use crate::order::{Order, OrderStatus};
use crate::pet::{Pet, PetStatus};
use crate::store::model::StoreError;

/// The index tables, one per kind of entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Index {
    PetsByStatus,
    PetsByCategory,
    OrdersByStatus,
    OrdersByPet,
    HoldEnds,
    CategoryNames,
}

impl Index {
    pub(super) const ALL: [Index; 6] = [
        Index::PetsByStatus,
        Index::PetsByCategory,
        Index::OrdersByStatus,
        Index::OrdersByPet,
        Index::HoldEnds,
        Index::CategoryNames,
    ];

    /// The table's name in the file.
    pub(super) fn table(self) -> &'static str {
        use redb::TableHandle;
        match self {
            Index::PetsByStatus => PETS_BY_STATUS.name(),
            Index::PetsByCategory => PETS_BY_CATEGORY.name(),
            Index::OrdersByStatus => ORDERS_BY_STATUS.name(),
            Index::OrdersByPet => ORDERS_BY_PET.name(),
            Index::HoldEnds => HOLD_ENDS.name(),
            Index::CategoryNames => CATEGORY_NAMES.name(),
        }
    }

    /// The index in a problem's words.
    pub(super) fn words(self) -> &'static str {
        match self {
            Index::PetsByStatus => "status index",
            Index::PetsByCategory => "category index",
            Index::OrdersByStatus => "order status index",
            Index::OrdersByPet => "order pet index",
            Index::HoldEnds => "hold ends",
            Index::CategoryNames => "category names",
        }
    }

    /// The kind of record whose entries the index holds.
    pub(super) fn owner_kind(self) -> &'static str {
        match self {
            Index::PetsByStatus | Index::PetsByCategory => "pet",
            Index::OrdersByStatus | Index::OrdersByPet | Index::HoldEnds => "order",
            Index::CategoryNames => "category",
        }
    }

    /// A value kept under the right key that is not the record's, in words.
    pub(super) fn other_value(self) -> &'static str {
        match self {
            Index::PetsByStatus => "other JSON than the pet",
            Index::OrdersByPet => "another status",
            Index::CategoryNames => "another id",
            _ => "another value",
        }
    }

    /// A record that keeps no entry here, in words.
    pub(super) fn none(self) -> &'static str {
        match self {
            Index::PetsByStatus => "without a status",
            Index::HoldEnds => "not placed with an end",
            _ => "not in it",
        }
    }
}

/// One index entry: its table (the variant), its key and its value.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Entry<'a> {
    /// (status code, pet id) to the pet's JSON: a covering index.
    PetStatus((u8, i64), &'a [u8]),
    /// (category id, status code or `NO_STATUS`, pet id).
    PetCategory((i64, u8, i64)),
    /// (status code, order id).
    OrderStatus((u8, i64)),
    /// (pet id, order id) to the order's status code.
    OrderPet((i64, i64), u8),
    /// (end of the hold in Unix ms, order id), while placed with an end.
    HoldEnd((u64, i64)),
    /// The name key (`category::name_key`) to the category's id.
    CategoryName(String, i64),
}

/// A pet's entries; `json` is its JSON as `PETS` keeps it.
pub(super) fn pet<'a>(pet: &Pet, json: &'a [u8]) -> [Option<Entry<'a>>; 2] {
    let id = pet.id;
    [
        pet.status
            .map(|status| Entry::PetStatus((status.to_code(), id), json)),
        Some(Entry::PetCategory((
            pet.category_id,
            category_status_code(pet.status),
            id,
        ))),
    ]
}

/// An order's entries.
pub(super) fn order(order: &Order) -> [Option<Entry<'static>>; 3] {
    let (id, code) = (order.id, order.status.code());
    let held = order.status == OrderStatus::Placed;
    [
        Some(Entry::OrderStatus((code, id))),
        Some(Entry::OrderPet((order.pet_id, id), code)),
        order
            .expires_at_ms
            .filter(|_| held)
            .map(|end| Entry::HoldEnd((end, id))),
    ]
}

/// A category's entries.
pub(super) fn category(category: &Category) -> [Option<Entry<'static>>; 1] {
    [Some(Entry::CategoryName(
        category::name_key(&category.name),
        category.id,
    ))]
}

impl Entry<'_> {
    pub(super) fn index(&self) -> Index {
        match self {
            Entry::PetStatus(..) => Index::PetsByStatus,
            Entry::PetCategory(..) => Index::PetsByCategory,
            Entry::OrderStatus(..) => Index::OrdersByStatus,
            Entry::OrderPet(..) => Index::OrdersByPet,
            Entry::HoldEnd(..) => Index::HoldEnds,
            Entry::CategoryName(..) => Index::CategoryNames,
        }
    }

    /// The id of the record the entry is of.
    pub(super) fn owner(&self) -> i64 {
        match *self {
            Entry::PetStatus((_, id), _)
            | Entry::PetCategory((_, _, id))
            | Entry::OrderStatus((_, id))
            | Entry::OrderPet((_, id), _)
            | Entry::HoldEnd((_, id))
            | Entry::CategoryName(_, id) => id,
        }
    }

    /// Whether `other` is kept under the same key of the same table, whatever its value.
    pub(super) fn same_key(&self, other: &Entry) -> bool {
        match (self, other) {
            (Entry::PetStatus(a, _), Entry::PetStatus(b, _)) => a == b,
            (Entry::OrderPet(a, _), Entry::OrderPet(b, _)) => a == b,
            (Entry::CategoryName(a, _), Entry::CategoryName(b, _)) => a == b,
            _ => self == other,
        }
    }

    /// The key, in a problem's words.
    pub(super) fn key_text(&self) -> String {
        match self {
            Entry::PetStatus((code, id), _) => format!("{}, {id}", pet_status(*code)),
            Entry::PetCategory((category, code, id)) => format!("{category}, {code}, {id}"),
            Entry::OrderStatus((code, id)) => format!("{}, {id}", order_status(*code)),
            Entry::OrderPet((pet, id), _) => format!("{pet}, {id}"),
            Entry::HoldEnd((end, id)) => format!("{end}, {id}"),
            Entry::CategoryName(name, _) => format!("{name:?}"),
        }
    }

    /// What the entry says of its record, in a problem's words: a pet's status for the
    /// status index, else the key.
    pub(super) fn filed_as(&self) -> String {
        match self {
            Entry::PetStatus((code, _), _) => pet_status(*code).into(),
            _ => self.key_text(),
        }
    }
}

fn pet_status(code: u8) -> &'static str {
    [PetStatus::Available, PetStatus::Pending, PetStatus::Sold]
        .get(usize::from(code))
        .map_or("an unknown status", |status| status.as_str())
}

fn order_status(code: u8) -> &'static str {
    OrderStatus::from_code(code).map_or("an unknown status", OrderStatus::as_str)
}

/// A change to one index table.
#[derive(Clone, Copy)]
pub(super) enum Change {
    Insert,
    Remove,
}

/// Index tables open in a write transaction: `PetIndexes` keeps a pet's entries, `Sales` an
/// order's and a category's.
pub(super) trait Indexes {
    fn apply(&mut self, change: Change, entry: &Entry) -> Result<(), StoreError>;
}

/// An entry given to tables that do not keep it: a bug of the caller, refused.
fn elsewhere(entry: &Entry) -> StoreError {
    StoreError::Corrupt(format!(
        "an entry of {} given to the wrong tables",
        entry.index().table()
    ))
}

impl Indexes for PetIndexes<'_> {
    fn apply(&mut self, change: Change, entry: &Entry) -> Result<(), StoreError> {
        let e = StoreError::storage;
        match (change, entry) {
            (Change::Insert, Entry::PetStatus(key, json)) => {
                self.by_status.insert(*key, *json).map_err(e)?;
            }
            (Change::Remove, Entry::PetStatus(key, _)) => {
                self.by_status.remove(*key).map_err(e)?;
            }
            (Change::Insert, Entry::PetCategory(key)) => {
                self.by_category.insert(*key, ()).map_err(e)?;
            }
            (Change::Remove, Entry::PetCategory(key)) => {
                self.by_category.remove(*key).map_err(e)?;
            }
            _ => return Err(elsewhere(entry)),
        }
        Ok(())
    }
}

impl Indexes for Sales<'_> {
    fn apply(&mut self, change: Change, entry: &Entry) -> Result<(), StoreError> {
        let e = StoreError::storage;
        match (change, entry) {
            (Change::Insert, Entry::OrderStatus(key)) => {
                self.orders_by_status.insert(*key, ()).map_err(e)?;
            }
            (Change::Remove, Entry::OrderStatus(key)) => {
                self.orders_by_status.remove(*key).map_err(e)?;
            }
            (Change::Insert, Entry::OrderPet(key, code)) => {
                self.orders_by_pet.insert(*key, *code).map_err(e)?;
            }
            (Change::Remove, Entry::OrderPet(key, _)) => {
                self.orders_by_pet.remove(*key).map_err(e)?;
            }
            (Change::Insert, Entry::HoldEnd(key)) => {
                self.hold_ends.insert(*key, ()).map_err(e)?;
            }
            (Change::Remove, Entry::HoldEnd(key)) => {
                self.hold_ends.remove(*key).map_err(e)?;
            }
            (Change::Insert, Entry::CategoryName(name, id)) => {
                self.category_names.insert(name.as_str(), *id).map_err(e)?;
            }
            (Change::Remove, Entry::CategoryName(name, _)) => {
                self.category_names.remove(name.as_str()).map_err(e)?;
            }
            _ => return Err(elsewhere(entry)),
        }
        Ok(())
    }
}

/// Moves a record's entries from `old` (empty for a new record) to `new` (empty for one
/// removed): an old entry whose key the new ones lack is removed, a new one is inserted unless
/// the old ones hold it with the same value. A key kept with another value is overwritten, not
/// removed first. An old pet's JSON is not at hand: it is passed empty, and since no pet's
/// JSON is, its covering entry is always written again.
pub(super) fn rewrite(
    tables: &mut impl Indexes,
    old: &[Option<Entry>],
    new: &[Option<Entry>],
) -> Result<(), StoreError> {
    for gone in old.iter().flatten() {
        if !new.iter().flatten().any(|kept| kept.same_key(gone)) {
            tables.apply(Change::Remove, gone)?;
        }
    }
    for came in new.iter().flatten() {
        if !old.iter().flatten().any(|had| had == came) {
            tables.apply(Change::Insert, came)?;
        }
    }
    Ok(())
}

/// The index tables as a read transaction sees them, for `petstore check`.
pub(super) struct Read {
    pets_by_status: ReadOnlyTable<(u8, i64), &'static [u8]>,
    pets_by_category: ReadOnlyTable<(i64, u8, i64), ()>,
    orders_by_status: ReadOnlyTable<(u8, i64), ()>,
    orders_by_pet: ReadOnlyTable<(i64, i64), u8>,
    hold_ends: ReadOnlyTable<(u64, i64), ()>,
    category_names: ReadOnlyTable<&'static str, i64>,
}

impl Read {
    pub(super) fn open(txn: &ReadTransaction) -> Result<Read, StoreError> {
        let e = StoreError::storage;
        Ok(Read {
            pets_by_status: txn.open_table(PETS_BY_STATUS).map_err(e)?,
            pets_by_category: txn.open_table(PETS_BY_CATEGORY).map_err(e)?,
            orders_by_status: txn.open_table(ORDERS_BY_STATUS).map_err(e)?,
            orders_by_pet: txn.open_table(ORDERS_BY_PET).map_err(e)?,
            hold_ends: txn.open_table(HOLD_ENDS).map_err(e)?,
            category_names: txn.open_table(CATEGORY_NAMES).map_err(e)?,
        })
    }

    /// Whether `entry`'s key is kept (`None`: it is not) and then with `entry`'s value.
    pub(super) fn holds(&self, entry: &Entry) -> Result<Option<bool>, StoreError> {
        let e = StoreError::storage;
        Ok(match entry {
            Entry::PetStatus(key, json) => {
                let held = self.pets_by_status.get(*key).map_err(e)?;
                held.map(|held| held.value() == *json)
            }
            Entry::PetCategory(key) => self.pets_by_category.get(*key).map_err(e)?.map(|_| true),
            Entry::OrderStatus(key) => self.orders_by_status.get(*key).map_err(e)?.map(|_| true),
            Entry::OrderPet(key, code) => {
                let held = self.orders_by_pet.get(*key).map_err(e)?;
                held.map(|held| held.value() == *code)
            }
            Entry::HoldEnd(key) => self.hold_ends.get(*key).map_err(e)?.map(|_| true),
            Entry::CategoryName(name, id) => {
                let held = self.category_names.get(name.as_str()).map_err(e)?;
                held.map(|held| held.value() == *id)
            }
        })
    }

    /// The number of entries `index` holds.
    pub(super) fn len(&self, index: Index) -> Result<u64, StoreError> {
        match index {
            Index::PetsByStatus => self.pets_by_status.len(),
            Index::PetsByCategory => self.pets_by_category.len(),
            Index::OrdersByStatus => self.orders_by_status.len(),
            Index::OrdersByPet => self.orders_by_pet.len(),
            Index::HoldEnds => self.hold_ends.len(),
            Index::CategoryNames => self.category_names.len(),
        }
        .map_err(StoreError::storage)
    }

    /// Calls `visit` with every entry `index` holds, in key order.
    pub(super) fn each(
        &self,
        index: Index,
        visit: &mut dyn FnMut(&Entry) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        // Every row of a table as an entry, to `visit`: a macro, as each table's key and value
        // types differ and their borrowed forms do not fit one generic function's bounds.
        macro_rules! scan {
            ($table:expr, |$key:pat_param, $value:pat_param| $entry:expr) => {
                for row in $table.iter().map_err(StoreError::storage)? {
                    let (key, value) = row.map_err(StoreError::storage)?;
                    let ($key, $value) = (key.value(), value.value());
                    visit(&$entry)?;
                }
            };
        }
        match index {
            Index::PetsByStatus => scan!(self.pets_by_status, |k, v| Entry::PetStatus(k, v)),
            Index::PetsByCategory => scan!(self.pets_by_category, |k, ()| Entry::PetCategory(k)),
            Index::OrdersByStatus => scan!(self.orders_by_status, |k, ()| Entry::OrderStatus(k)),
            Index::OrdersByPet => scan!(self.orders_by_pet, |k, v| Entry::OrderPet(k, v)),
            Index::HoldEnds => scan!(self.hold_ends, |k, ()| Entry::HoldEnd(k)),
            Index::CategoryNames => {
                scan!(self.category_names, |k, v| Entry::CategoryName(
                    k.to_owned(),
                    v
                ))
            }
        }
        Ok(())
    }
}
