//! The pet lists that walk an index rather than `pets` in id order: a search by name
//! (`PETS_BY_WORD` in id order, `PETS_BY_WORD_NAME` by name: the terms' ranges walked
//! together, each seeking to the furthest of the others, so a page costs what its matches
//! cost wherever it starts), `sort=name` (`PETS_BY_NAME`) and `sort=-id` (the id-ordered
//! tables walked backwards). Filters are read from the entries (a status from the code they
//! hold, a category by one lookup), never from a pet's JSON. Orders by their pet's name read
//! every matching pet's orders (`ORDERS_BY_PET`): the cost of a page grows with the pets the
//! search matches, not with the store. Invariant: every walk goes in the list's order from
//! just after the cursor, so a page never repeats one before it.

use std::cmp::Ordering;

use redb::{ReadOnlyTable, ReadTransaction};

use super::handle::RedbStore;
use super::indexes;
use super::snapshot::{PageKey, Snapshot, feed_state};
use super::tables::PETS;
use crate::order::Order;
use crate::search::{Search, Sort};
use crate::store::model::{OrderQuery, Page, PageBuilder, PageQuery, StoreError, read_pet};
use crate::store::ops::orders::{ORDERS_BY_PET, ORDERS_BY_STATUS};
use crate::store::ops::pets::{
    PETS_BY_CATEGORY, PETS_BY_NAME, PETS_BY_STATUS, PETS_BY_WORD, PETS_BY_WORD_NAME, STATUS_CODES,
};
use crate::store::resource::{Index, Part, Value, id_key, owner_of, text_at_start};

type IndexTable = ReadOnlyTable<&'static [u8], &'static [u8]>;
/// An entry a walk is at: its key's rest (after the range's prefix) and its value.
type Found = (Vec<u8>, Vec<u8>);

/// Entries a walk steps through before it seeks instead: a seek is a descent of the tree, a
/// step a few comparisons.
const STEPS_BEFORE_SEEK: usize = 8;

/// One range of an index walked in a list's order: the keys under `prefix`, compared by what
/// follows it (their rest), which is in the list's order for every range of a list.
struct Walk<'t> {
    table: &'t IndexTable,
    prefix: Vec<u8>,
    forward: bool,
    entries: redb::Range<'t, &'static [u8], &'static [u8]>,
    /// The entry the walk is at; `None` once past the range.
    at: Option<Found>,
}

impl<'t> Walk<'t> {
    /// A walk of the keys under `prefix` from just after `start` (a rest; `None`: from the
    /// range's first key in the walk's direction).
    fn new(
        table: &'t IndexTable,
        prefix: Vec<u8>,
        forward: bool,
        start: Option<&[u8]>,
    ) -> Result<Walk<'t>, StoreError> {
        let entries = range(table, &prefix, forward, start, false)?;
        let mut walk = Walk {
            table,
            prefix,
            forward,
            entries,
            at: None,
        };
        walk.step()?;
        Ok(walk)
    }

    /// Moves to the next entry.
    fn step(&mut self) -> Result<(), StoreError> {
        let next = match self.forward {
            true => self.entries.next(),
            false => self.entries.next_back(),
        };
        self.at = match next {
            None => None,
            Some(entry) => {
                let (key, value) = entry.map_err(StoreError::storage)?;
                let key = key.value();
                // The range's ends keep every key under the prefix; this is the guard.
                key.strip_prefix(self.prefix.as_slice())
                    .map(|rest| (rest.to_vec(), value.value().to_vec()))
            }
        };
        Ok(())
    }

    /// Whether `rest` comes before `other` in the walk's direction.
    fn before(&self, rest: &[u8], other: &[u8]) -> bool {
        match rest.cmp(other) {
            Ordering::Less => self.forward,
            Ordering::Greater => !self.forward,
            Ordering::Equal => false,
        }
    }

    /// Moves to the first entry at `target` or beyond it in the walk's direction.
    fn reach(&mut self, target: &[u8]) -> Result<(), StoreError> {
        for _ in 0..STEPS_BEFORE_SEEK {
            match &self.at {
                Some((rest, _)) if self.before(rest, target) => self.step()?,
                _ => return Ok(()),
            }
        }
        if matches!(&self.at, Some((rest, _)) if self.before(rest, target)) {
            self.entries = range(self.table, &self.prefix, self.forward, Some(target), true)?;
            self.step()?;
        }
        Ok(())
    }
}

/// The keys under `prefix` from `start` on (a rest; `inclusive`: `start` itself too) in the
/// direction of the walk, to the end of the prefix's keys.
fn range<'t>(
    table: &'t IndexTable,
    prefix: &[u8],
    forward: bool,
    start: Option<&[u8]>,
    inclusive: bool,
) -> Result<redb::Range<'t, &'static [u8], &'static [u8]>, StoreError> {
    use std::ops::Bound::{Excluded, Included, Unbounded};
    let from = start.map(|rest| [prefix, rest].concat());
    let end = end_of(prefix);
    let bounds: (std::ops::Bound<&[u8]>, std::ops::Bound<&[u8]>) = match (forward, &from) {
        (true, None) => (Included(prefix), bound_below(&end)),
        (true, Some(from)) if inclusive => (Included(from.as_slice()), bound_below(&end)),
        (true, Some(from)) => (Excluded(from.as_slice()), bound_below(&end)),
        (false, None) => (Included(prefix), bound_below(&end)),
        (false, Some(from)) if inclusive => (Included(prefix), Included(from.as_slice())),
        (false, Some(from)) => (Included(prefix), Excluded(from.as_slice())),
    };
    let bounds = match bounds {
        (Included([]), b) => (Unbounded, b),
        other => other,
    };
    table.range::<&[u8]>(bounds).map_err(StoreError::storage)
}

fn bound_below(end: &Option<Vec<u8>>) -> std::ops::Bound<&[u8]> {
    match end {
        Some(end) => std::ops::Bound::Excluded(end.as_slice()),
        None => std::ops::Bound::Unbounded,
    }
}

/// The first key after every key that starts with `prefix`; `None` for none (an empty
/// prefix, or one of 0xFF bytes alone).
fn end_of(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xFF {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// How a list's walks make its entries: those every walk holds (the terms of a search), or
/// those any walk holds (the statuses of a category).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Join {
    Every,
    Any,
}

/// The next entry of the walks joined by `join`, in their order: its rest and the value the
/// first walk holding it keeps. The walk it came from has not stepped past it yet.
fn next(walks: &mut [Walk], join: Join) -> Result<Option<Found>, StoreError> {
    match join {
        Join::Any => {
            let mut best: Option<usize> = None;
            for (n, walk) in walks.iter().enumerate() {
                let Some((rest, _)) = &walk.at else { continue };
                let better = match best.and_then(|b| walks[b].at.as_ref()) {
                    None => true,
                    Some((held, _)) => walk.before(rest, held),
                };
                if better {
                    best = Some(n);
                }
            }
            let Some(best) = best else { return Ok(None) };
            let found = walks[best].at.clone();
            walks[best].step()?;
            Ok(found)
        }
        Join::Every => loop {
            // The furthest entry any walk is at: none before it is held by every walk.
            let mut target: Option<Vec<u8>> = None;
            for walk in walks.iter() {
                let Some((rest, _)) = &walk.at else {
                    return Ok(None);
                };
                if target.as_ref().is_none_or(|t| walk.before(t, rest)) {
                    target = Some(rest.clone());
                }
            }
            let Some(target) = target else {
                return Ok(None);
            };
            let mut all = true;
            for walk in walks.iter_mut() {
                walk.reach(&target)?;
                match &walk.at {
                    None => return Ok(None),
                    Some((rest, _)) if *rest != target => all = false,
                    Some(_) => {}
                }
            }
            if all {
                let found = walks[0].at.clone();
                walks[0].step()?;
                return Ok(found);
            }
        },
    }
}

impl RedbStore {
    /// A page of pets for a query with a search or another order than the id's, from the
    /// snapshot every read shares (and its pages kept until the next commit).
    pub(super) fn find(&self, query: &PageQuery) -> Result<Page, StoreError> {
        self.read(|snapshot| {
            snapshot.page(PageKey::Found(query.clone()), || {
                Ok(find_in(snapshot, query)?.at(snapshot.feed.newest_position()))
            })
        })
    }
}

impl RedbStore {
    /// A page of orders for a query with a search or newest first.
    pub(super) fn find_orders(&self, query: &OrderQuery) -> Result<Page, StoreError> {
        self.read_txn(|txn| {
            let feed = feed_state(txn)?;
            Ok(find_orders_in(txn, query)?.at(feed.newest_position()))
        })
    }
}

/// Every pet whose name matches `search`, in id order.
fn matching_pets(txn: &ReadTransaction, search: &Search) -> Result<Vec<i64>, StoreError> {
    let table = open_index(txn, &PETS_BY_WORD)?;
    let mut walks = Vec::new();
    for term in search.terms() {
        let prefix = PETS_BY_WORD.prefix(&[Part::Text(term.as_str().into())]);
        walks.push(Walk::new(&table, prefix, true, None)?);
    }
    let mut ids = Vec::new();
    while let Some((rest, _)) = next(&mut walks, Join::Every)? {
        ids.push(owner_of(&rest)?);
    }
    Ok(ids)
}

/// The page of orders `query` asks for, as `txn` sees them.
fn find_orders_in(txn: &ReadTransaction, query: &OrderQuery) -> Result<Page, StoreError> {
    let forward = query.sort != Sort::Newest;
    let wanted = query.limit + 1;
    let after = query.after;
    let beyond = |id: i64| match (after, forward) {
        (None, _) => true,
        (Some(after), true) => id > after,
        (Some(after), false) => id < after,
    };
    let status = query.status.map(|status| status.code());
    let mut ids: Vec<i64> = Vec::new();
    if !query.search.is_empty() {
        let pets = match query.pet_id {
            Some(pet) => {
                let table = txn.open_table(PETS).map_err(StoreError::storage)?;
                let json = table.get(pet).map_err(StoreError::storage)?;
                match json {
                    Some(json) if query.search.matches(&read_pet(pet, json.value())?.name) => {
                        vec![pet]
                    }
                    _ => Vec::new(),
                }
            }
            None => matching_pets(txn, &query.search)?,
        };
        let by_pet = open_index(txn, &ORDERS_BY_PET)?;
        for pet in pets {
            let prefix = ORDERS_BY_PET.prefix(&[Part::Int(pet)]);
            for (id, code) in indexes::scan(&by_pet, &prefix, i64::MIN, usize::MAX)? {
                if beyond(id) && status.is_none_or(|status| code.as_slice() == [status]) {
                    ids.push(id);
                }
            }
        }
        ids.sort_unstable();
        if !forward {
            ids.reverse();
        }
        ids.truncate(wanted);
    } else {
        let start = after.map(|after| id_key(after).to_vec());
        let (index, prefix) = match (query.pet_id, status) {
            (Some(pet), _) => (&ORDERS_BY_PET, ORDERS_BY_PET.prefix(&[Part::Int(pet)])),
            (None, Some(code)) => (
                &ORDERS_BY_STATUS,
                ORDERS_BY_STATUS.prefix(&[Part::Code(code)]),
            ),
            (None, None) => {
                let orders = txn
                    .open_table(indexes::records::<Order>())
                    .map_err(StoreError::storage)?;
                let rows = match after {
                    None => orders.range::<i64>(..),
                    Some(after) => orders.range(..after),
                };
                for row in rows.map_err(StoreError::storage)?.rev().take(wanted) {
                    ids.push(row.map_err(StoreError::storage)?.0.value());
                }
                return orders_page(txn, ids, query.limit);
            }
        };
        let table = open_index(txn, index)?;
        let mut walks = vec![Walk::new(&table, prefix, forward, start.as_deref())?];
        while ids.len() < wanted {
            let Some((rest, code)) = next(&mut walks, Join::Every)? else {
                break;
            };
            // Of a pet's few orders, a status filter reads the code its entries hold.
            if index.name == ORDERS_BY_PET.name
                && status.is_some_and(|status| code.as_slice() != [status])
            {
                continue;
            }
            ids.push(owner_of(&rest)?);
        }
    }
    orders_page(txn, ids, query.limit)
}

/// The page of the orders `ids`, in that order.
fn orders_page(txn: &ReadTransaction, ids: Vec<i64>, limit: usize) -> Result<Page, StoreError> {
    let mut page = PageBuilder::new(limit);
    for id in ids {
        let order: Order = super::sales::get(txn, id)?
            .ok_or_else(|| StoreError::Corrupt(format!("an order index names {id}")))?;
        page.push(id, &order.to_json());
    }
    Ok(page.finish())
}

fn open_index(txn: &ReadTransaction, index: &Index) -> Result<IndexTable, StoreError> {
    txn.open_table(indexes::table(index))
        .map_err(StoreError::storage)
}

/// The page `query` asks for, as `snapshot` sees the pets.
fn find_in(snapshot: &Snapshot, query: &PageQuery) -> Result<Page, StoreError> {
    let pets = &snapshot.pets;
    let forward = query.sort != Sort::Newest;
    let by_name = query.sort == Sort::Name;
    // Where the walk starts: the rest of the cursor's pet's key in each range.
    let start = query
        .after
        .as_ref()
        .map(|after| match (&after.key, by_name) {
            (Some(key), true) => {
                let name = [Part::Text(key.as_str().into())];
                PETS_BY_NAME.entry(after.id, &name, Value::Nothing).key
            }
            _ => id_key(after.id).to_vec(),
        });
    let start = start.as_deref();
    let mut page = PageBuilder::new(query.limit);
    let terms = query.search.terms();
    if terms.is_empty() && !by_name && query.category.is_none() && query.status.is_none() {
        // Newest first over every pet: `pets` itself, backwards.
        let last = start.map_or(Some(i64::MAX), |_| {
            query.after.as_ref().and_then(|a| a.id.checked_sub(1))
        });
        if let Some(last) = last {
            let rows = pets.range(..=last).map_err(StoreError::storage)?;
            for row in rows.rev().take(query.limit + 1) {
                let (id, json) = row.map_err(StoreError::storage)?;
                page.push(id.value(), json.value());
            }
        }
        return Ok(page.finish());
    }
    // Which index's ranges the list walks, and how they join.
    let (index, join, prefixes): (&Index, Join, Vec<Vec<u8>>) = if !terms.is_empty() {
        let index = if by_name {
            &PETS_BY_WORD_NAME
        } else {
            &PETS_BY_WORD
        };
        let prefixes = terms
            .iter()
            .map(|term| index.prefix(&[Part::Text(term.as_str().into())]))
            .collect();
        (index, Join::Every, prefixes)
    } else if by_name {
        (&PETS_BY_NAME, Join::Every, vec![Vec::new()])
    } else if let Some(category) = query.category {
        let codes = match query.status {
            Some(status) => vec![status.to_code()],
            None => STATUS_CODES.to_vec(),
        };
        let prefixes = codes
            .into_iter()
            .map(|code| PETS_BY_CATEGORY.prefix(&[Part::Int(category), Part::Code(code)]))
            .collect();
        (&PETS_BY_CATEGORY, Join::Any, prefixes)
    } else {
        let status = query.status.map_or(0, |status| status.to_code());
        let prefix = PETS_BY_STATUS.prefix(&[Part::Code(status)]);
        (&PETS_BY_STATUS, Join::Every, vec![prefix])
    };
    let table = snapshot.index(index)?;
    let categories = &snapshot.by_category;
    let mut walks = Vec::with_capacity(prefixes.len());
    for prefix in prefixes {
        walks.push(Walk::new(table, prefix, forward, start)?);
    }
    while !page.is_full() {
        let Some((rest, value)) = next(&mut walks, join)? else {
            break;
        };
        let id = owner_of(&rest)?;
        // The entries of the word and name indexes hold the pet's category code.
        if index.name != PETS_BY_STATUS.name && index.name != PETS_BY_CATEGORY.name {
            let code = *value.first().ok_or_else(|| {
                StoreError::Corrupt(format!("{} holds no code for pet {id}", index.words))
            })?;
            if query.status.is_some_and(|status| status.to_code() != code) {
                continue;
            }
            if let Some(category) = query.category {
                let parts = [Part::Int(category), Part::Code(code)];
                let entry = PETS_BY_CATEGORY.entry(id, &parts, Value::Nothing);
                if categories
                    .get(entry.key.as_slice())
                    .map_err(StoreError::storage)?
                    .is_none()
                {
                    continue;
                }
            }
        }
        let json = if index.name == PETS_BY_STATUS.name {
            value
        } else {
            let json = pets.get(id).map_err(StoreError::storage)?;
            let json = json.ok_or_else(|| {
                StoreError::Corrupt(format!("the {} names pet {id}", index.words))
            })?;
            json.value().to_vec()
        };
        if by_name {
            // The rest of a name-ordered key is (sort key, id).
            let key = text_at_start(&rest).ok_or_else(|| {
                StoreError::Corrupt(format!("the {} has a key without a name", index.words))
            })?;
            page.push_keyed(id, &json, &key);
        } else {
            page.push(id, &json);
        }
    }
    Ok(page.finish())
}
