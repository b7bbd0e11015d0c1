//! How the store's values sit in PostgreSQL rows and columns beyond their resources'
//! declarations (`store/resource.rs`): an idempotency record, a revision, a pet's status code,
//! a pet's words (`pet_words`), the inventory's counters, and the condition that starts a page
//! at its cursor. Shared by the reads, the batches, the copy and the migrations.

use crate::pet::{PetId, PetStatus};
use crate::search;
use crate::store::model::{Inventory, Record, StoreError};
use crate::store::resource::Resource;

/// An idempotency record, by its scope.
pub(super) const READ_RECORD: &str =
    "SELECT fingerprint, expires_at, pet_id FROM idempotency WHERE scope = $1";

/// An idempotency row (`READ_RECORD`) as the record it is.
pub(super) fn record_of(row: &tokio_postgres::Row) -> Result<Record, StoreError> {
    let fingerprint = row.get::<_, &[u8]>(0).try_into().map_err(|_| {
        StoreError::Corrupt("an idempotency record's fingerprint is not 16 bytes".into())
    })?;
    Ok(Record {
        fingerprint,
        expires_at: row.get::<_, i64>(1).unsigned_abs(),
        id: row.get(2),
    })
}

pub(super) fn revision(stored: i64) -> u64 {
    stored.unsigned_abs()
}

/// The status as the `status` column keeps it: the same stable codes as redb's index.
pub(super) fn status_code(status: Option<PetStatus>) -> Option<i16> {
    status.map(|status| i16::from(status.to_code()))
}

/// `OrderStatus::Placed.code()` as the `orders.status` column keeps it. Statements write the
/// literal `status = 1` rather than a parameter, so the planner can use the partial indexes
/// (`orders_one_placed_per_pet`, `orders_by_expiry`), whose predicate it must match as written.
pub(super) const PLACED: i16 = 1;

/// The inventory's counter rows in `petstore_meta`, in name order (the order a batch locks
/// them in), each with the pets it counts.
pub(super) const INVENTORY_COUNTERS: [(&str, Option<PetStatus>); 4] = [
    ("pets_available", Some(PetStatus::Available)),
    ("pets_pending", Some(PetStatus::Pending)),
    ("pets_sold", Some(PetStatus::Sold)),
    ("pets_unset", None),
];

/// Counts the pets by status into the four inventory counters, made or overwritten, reading
/// every pet once: at the migration that adds them, and at the end of an import. The codes
/// are `PetStatus::to_code`'s (`status_code`).
pub(super) const RECOUNT_INVENTORY: &str = "
    INSERT INTO petstore_meta (name, value)
    SELECT counter.name, counter.value FROM (
        SELECT count(*) FILTER (WHERE status = 0) AS available,
            count(*) FILTER (WHERE status = 1) AS pending,
            count(*) FILTER (WHERE status = 2) AS sold,
            count(*) FILTER (WHERE status IS NULL) AS unset
        FROM pets) AS counts,
    LATERAL (VALUES ('pets_available', counts.available), ('pets_pending', counts.pending),
        ('pets_sold', counts.sold), ('pets_unset', counts.unset)) AS counter(name, value)
    ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value";

/// The four inventory counters in one row, in `INVENTORY_COUNTERS`' order: one statement, so
/// one snapshot, however many writers move them meanwhile.
pub(super) const READ_INVENTORY: &str = "
    SELECT max(value) FILTER (WHERE name = 'pets_available'),
        max(value) FILTER (WHERE name = 'pets_pending'),
        max(value) FILTER (WHERE name = 'pets_sold'),
        max(value) FILTER (WHERE name = 'pets_unset')
    FROM petstore_meta
    WHERE name IN ('pets_available', 'pets_pending', 'pets_sold', 'pets_unset')";

/// The inventory from a `READ_INVENTORY` row.
pub(super) fn inventory_of(row: &tokio_postgres::Row) -> Result<Inventory, StoreError> {
    let mut inventory = Inventory::default();
    for (n, (name, status)) in INVENTORY_COUNTERS.into_iter().enumerate() {
        let value: Option<i64> = row.try_get(n).map_err(|e| {
            StoreError::Corrupt(format!("the inventory counter {name} does not read: {e}"))
        })?;
        let value =
            value.ok_or_else(|| StoreError::Corrupt(format!("the counter {name} is missing")))?;
        *inventory.count_mut(status) = u64::try_from(value)
            .map_err(|_| StoreError::Corrupt(format!("the counter {name} is {value}")))?;
    }
    Ok(inventory)
}

/// The statement reading record `$1` of `R`: its stored form, as text.
pub(super) fn select_one<R: Resource>() -> String {
    format!(
        "SELECT {} FROM {} WHERE id = $1",
        R::POSTGRES.stored,
        R::TABLE
    )
}

/// The statement reading up to `$2` records of `R` with ids above `$1`, in id order: the id
/// and the stored form.
pub(super) fn select_after<R: Resource>() -> String {
    let (stored, table) = (R::POSTGRES.stored, R::TABLE);
    format!("SELECT id, {stored} FROM {table} WHERE id > $1 ORDER BY id LIMIT $2")
}

/// Record `id` of `R` from its stored form in `row`'s column `at`.
pub(super) fn record_in<R: Resource>(
    id: i64,
    row: &tokio_postgres::Row,
    at: usize,
) -> Result<R, StoreError> {
    R::decode(id, row.get::<_, &str>(at).as_bytes())
}

/// Inserts the rows of `Words` (`$1` to `$3`) into `pet_words`.
pub(super) const INSERT_WORDS: &str = "INSERT INTO pet_words (term, pet_id, name_key)
     SELECT * FROM UNNEST($1::text[], $2::bigint[], $3::text[])";

/// Rows of `pet_words` for some pets, as the three arrays an `UNNEST` takes: every term each
/// pet's name is found by (`search::prefixes`), beside its pet and the pet's sort key
/// (`search::sort_key`), which the rows keep so that a search sorted by name walks one index.
#[derive(Default)]
pub(super) struct Words {
    pub(super) terms: Vec<String>,
    pub(super) pets: Vec<PetId>,
    pub(super) keys: Vec<String>,
}

impl Words {
    /// The rows of pet `id`, named `name`, folded once; answers the name's sort key, which
    /// `pets.name_key` keeps too.
    pub(super) fn add(&mut self, id: PetId, name: &str) -> String {
        let search::Indexed { sort_key, terms } = search::index(name);
        for term in terms {
            self.terms.push(term);
            self.pets.push(id);
            self.keys.push(sort_key.clone());
        }
        sort_key
    }
}

/// Which way a list walks its index from the cursor.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Walk {
    Up,
    Down,
}

/// The condition of a page that walks an index of `equal` columns, then `order` columns, from
/// a cursor: each of `equal` is a column and the number of the parameter it must equal (the
/// filter), each of `order` a column and the parameter of the cursor's value of it (the
/// list's order, ending with the id). Written as a row comparison on the index's columns, so
/// even a generic plan, which knows no values, reads that index from the cursor on; with a
/// bare `id > $1` the planner may prefer the primary key and filter, which on a deep page of a
/// rare value reads past every row of the others.
pub(super) fn from_cursor(equal: &[(&str, usize)], order: &[(&str, usize)], walk: Walk) -> String {
    let mut condition = String::new();
    let (mut columns, mut params) = (Vec::new(), Vec::new());
    for (column, param) in equal {
        condition.push_str(&format!("{column} = ${param} AND "));
        columns.push(column.to_string());
        params.push(format!("${param}"));
    }
    for (column, param) in order {
        columns.push(column.to_string());
        params.push(format!("${param}"));
    }
    let op = match walk {
        Walk::Up => ">",
        Walk::Down => "<",
    };
    match columns.len() {
        1 => condition.push_str(&format!("{} {op} {}", columns[0], params[0])),
        _ => condition.push_str(&format!(
            "({}) {op} ({})",
            columns.join(", "),
            params.join(", ")
        )),
    }
    condition
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filtered_page_starts_at_the_cursor_in_its_index() {
        let id = [("id", 1)];
        assert_eq!(from_cursor(&[], &id, Walk::Up), "id > $1");
        assert_eq!(
            from_cursor(&[("category_id", 3), ("status", 4)], &id, Walk::Up),
            "category_id = $3 AND status = $4 AND (category_id, status, id) > ($3, $4, $1)"
        );
        assert_eq!(
            from_cursor(&[("status", 3)], &id, Walk::Down),
            "status = $3 AND (status, id) < ($3, $1)"
        );
        assert_eq!(
            from_cursor(
                &[("w.term", 4)],
                &[("w.name_key", 3), ("w.pet_id", 1)],
                Walk::Up
            ),
            "w.term = $4 AND (w.term, w.name_key, w.pet_id) > ($4, $3, $1)"
        );
    }

    #[test]
    fn a_pet_s_words_are_its_name_s_prefixes_each_with_its_sort_key() {
        let mut words = Words::default();
        assert_eq!(words.add(7, "Bo Bob"), "bo bob");
        let mut terms = words.terms.clone();
        terms.sort();
        assert_eq!(terms, ["b", "bo", "bob"]);
        assert_eq!(words.pets, [7, 7, 7]);
        assert!(words.keys.iter().all(|key| key == "bo bob"));
    }

    #[test]
    fn the_placed_code_and_the_counters_match_the_domain_s_codes() {
        assert_eq!(PLACED, i16::from(crate::order::OrderStatus::Placed.code()));
        let mut names: Vec<&str> = INVENTORY_COUNTERS.iter().map(|(name, _)| *name).collect();
        names.sort_unstable();
        assert_eq!(
            names,
            INVENTORY_COUNTERS.map(|(name, _)| name),
            "name order"
        );
        for (status, code) in [
            (PetStatus::Available, 0),
            (PetStatus::Pending, 1),
            (PetStatus::Sold, 2),
        ] {
            assert_eq!(
                status_code(Some(status)),
                Some(code),
                "RECOUNT_INVENTORY's codes"
            );
        }
    }
}
