//! The PostgreSQL store's handle: its connection pool, opened and migrated at start, and the
//! reads. Every wait on the database is bounded (`ANSWER_WITHIN`). A page of pets is one
//! statement that walks one index from the cursor on (for a search, the rows of `pet_words` of
//! one of its terms), so a deep page costs about what the first does.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio_postgres::types::ToSql;

use super::batch::PgWriter;
use super::connect::PgTarget;
use super::errors::pg_error;
use super::pool::Connections;
use super::rows::{READ_RECORD, Walk, from_cursor, record_of, revision, status_code};
use super::schema::migrate;
use crate::event::{EventType, Position};
use crate::pet::PetId;
use crate::search::Sort;
use crate::store::events::{EventPage, EventQuery, FeedState, ReadError, StoredEvent};
use crate::store::model::{Page, PageBuilder, PageQuery, Record, StoreError, StoredPet, short};

/// The longest a request waits on the database, whatever it waits for (a connection, a
/// connect, a statement, its batch's commit): past it, 503. A write still queued or in flight
/// then may yet commit; its client got 503, never a 201, and a retry with the same
/// Idempotency-Key finds out which.
pub(in crate::store) const ANSWER_WITHIN: Duration = Duration::from_secs(5);

/// The feed's identity, newest number and last number purged, as one row `f` of three columns
/// that a query joins its rows to, so both come from the statement's one snapshot.
pub(super) const FEED_NOW: &str = "SELECT f.feed, f.newest, f.trimmed, p.* FROM (
    SELECT max(value) FILTER (WHERE name = 'feed') AS feed,
        max(value) FILTER (WHERE name = 'event_seq') AS newest,
        max(value) FILTER (WHERE name = 'events_trimmed') AS trimmed
    FROM petstore_meta WHERE name IN ('feed', 'event_seq', 'events_trimmed')) f";

/// The feed's state from a row of a query that starts with `FEED_NOW`.
pub(super) fn feed_state(row: &tokio_postgres::Row) -> Result<FeedState, StoreError> {
    let value = |n| {
        row.get::<_, Option<i64>>(n)
            .ok_or_else(|| StoreError::Corrupt("the feed's counters are missing".into()))
    };
    Ok(FeedState {
        // The identity is a u64 kept in a bigint: the same bits.
        feed: value(0)? as u64,
        newest: value(1)?.unsigned_abs(),
        trimmed: value(2)?.unsigned_abs(),
    })
}

/// The read side of the PostgreSQL store; cheap to clone.
#[derive(Clone)]
pub(in crate::store) struct PgStore {
    pub(super) pool: Connections,
    /// How common the commonest terms are, for the choice of the term a search walks.
    shares: Arc<Mutex<TermShares>>,
}

/// How long this process goes by the term shares it read before reading them again:
/// PostgreSQL's statistics change at each ANALYZE, minutes apart at the least.
const SHARES_FOR: Duration = Duration::from_secs(60);

/// The statistics of `pet_words.term` where the table is on the search path: its most common
/// terms and the share of the rows each has, as the last ANALYZE sampled them.
const READ_SHARES: &str = "SELECT s.most_common_vals::text::text[], s.most_common_freqs
     FROM pg_stats s JOIN pg_class c ON c.relname = s.tablename
         JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = s.schemaname
     WHERE c.oid = to_regclass('pet_words') AND s.attname = 'term' AND NOT s.inherited";

/// The shares of `pet_words`' rows that its commonest terms have, and when they were read.
#[derive(Default)]
struct TermShares {
    read_at: Option<Instant>,
    shares: HashMap<String, f32>,
}

impl PgStore {
    /// Connects and migrates the schema under the migration lock. Returns the read side, the
    /// engine for the write front and the number of pets.
    pub(in crate::store) async fn open(
        target: PgTarget,
    ) -> Result<(PgStore, PgWriter, u64), StoreError> {
        let store = PgStore::connect(&target)?;
        // Unbounded as a whole: `migrate` bounds each of its statements, since a version that
        // fills what it adds from every pet takes as long as the store is big. The connect is
        // bounded by the pool.
        let pets = store
            .pool
            .run_within(Duration::MAX, async |client| migrate(client).await)
            .await?;
        let writer = PgWriter {
            pool: store.pool.clone(),
        };
        Ok((store, writer, pets))
    }

    /// The pool `target` names, with no connection made yet and nothing migrated.
    pub(super) fn connect(target: &PgTarget) -> Result<PgStore, StoreError> {
        let mut config = target.config().clone();
        // Every statement is bounded, so a stuck lock or a database that stops answering
        // mid-query becomes a 503, never a hung request.
        config.options(with_statement_timeout(
            config.get_options(),
            target.statement_timeout(),
        ));
        let pool = Connections::build(
            &config,
            target.tls().clone(),
            target.connect_timeout(),
            target.pool_size(),
            ANSWER_WITHIN,
        )?;
        Ok(PgStore {
            pool,
            shares: Arc::default(),
        })
    }

    /// Runs the first `operation` of a process: every host may have to be tried before the
    /// one that takes writes, so it may take the connects' time as well as an answer's.
    pub(super) async fn first<T>(
        &self,
        operation: impl AsyncFnOnce(&mut deadpool_postgres::ClientWrapper) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let within = self.pool.connect_within() + ANSWER_WITHIN;
        self.pool.run_within(within, operation).await
    }

    /// Stores `stored` as order `id`'s record, past every rule: damage, for the tests of what
    /// the store does with a record that does not read back.
    #[cfg(test)]
    pub(in crate::store) async fn damage_order(&self, id: i64, stored: &str) {
        let update = async |client: &mut deadpool_postgres::ClientWrapper| {
            let sql = "UPDATE orders SET record = $1 WHERE id = $2";
            client.execute(sql, &[&stored, &id]).await.map_err(pg_error)
        };
        assert_eq!(self.pool.run(update).await.expect("update"), 1);
    }

    /// The idempotency record of `scope`, live or not, if there is one.
    pub(in crate::store) async fn record(
        &self,
        scope: &[u8; 32],
    ) -> Result<Option<Record>, StoreError> {
        let row = self
            .pool
            .run(async |client| {
                client
                    .query_opt(READ_RECORD, &[&short(*scope).as_slice()])
                    .await
                    .map_err(pg_error)
            })
            .await?;
        row.map(|row| record_of(&row)).transpose()
    }

    pub(in crate::store) async fn get(&self, id: PetId) -> Result<Option<StoredPet>, StoreError> {
        self.pool
            .run(async |client| {
                let statement = client
                    .prepare_cached("SELECT revision, json FROM pets WHERE id = $1")
                    .await
                    .map_err(pg_error)?;
                let row = client
                    .query_opt(&statement, &[&id])
                    .await
                    .map_err(pg_error)?;
                Ok(row.map(|row| StoredPet {
                    id,
                    revision: revision(row.get(0)),
                    json: Bytes::from(row.get::<_, String>(1)),
                }))
            })
            .await
    }

    /// A page of pets and the feed's newest position, in one statement: one snapshot. See
    /// `pets_page` for which index each query walks.
    pub(in crate::store) async fn list(&self, query: PageQuery) -> Result<Page, StoreError> {
        let limit = query.limit;
        // One more than the page, to tell whether another follows.
        let fetch = i64::try_from(limit + 1).unwrap_or(i64::MAX);
        let by_name = query.sort == Sort::Name;
        let (after, key) = start_of(&query);
        let status = query.status.map(|status| status_code(Some(status)));
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![&after, &fetch];
        if by_name {
            params.push(&key);
        }
        let terms = query.search.terms();
        let first_term = params.len() + 1;
        params.extend(terms.iter().map(|term| term as &(dyn ToSql + Sync)));
        let mut equal = Vec::new();
        if let Some(category) = &query.category {
            params.push(category);
            equal.push(("category_id", params.len()));
        }
        if let Some(status) = &status {
            params.push(status);
            equal.push(("status", params.len()));
        }
        let numbers: Vec<usize> = (first_term..first_term + terms.len()).collect();
        self.pool
            .run(async |client| {
                let walked = self.walked(client, terms).await;
                let sql = pets_page(query.sort, &numbers, &equal, walked);
                let statement = client.prepare_cached(&sql).await.map_err(pg_error)?;
                let rows = client.query(&statement, &params).await.map_err(pg_error)?;
                let mut page = PageBuilder::new(limit);
                let mut events = Position { feed: 0, seq: 0 };
                for row in &rows {
                    events = feed_state(row)?.newest_position();
                    let Some(id) = row.get::<_, Option<i64>>(3) else {
                        continue;
                    };
                    let json = row.get::<_, &str>(4).as_bytes();
                    if by_name {
                        page.push_keyed(id, json, row.get::<_, &str>(5));
                    } else {
                        page.push(id, json);
                    }
                }
                Ok(page.finish().at(events))
            })
            .await
    }

    /// Which of `terms` a search walks, the others looked up for each row: the rarest, as
    /// PostgreSQL's statistics tell (read again past `SHARES_FOR`). A term they do not list is
    /// rarer than every one they do; between two such, the longer (every name with "bell" has
    /// "bel"). Without statistics (none read, none made yet), the longest.
    async fn walked(&self, client: &deadpool_postgres::ClientWrapper, terms: &[String]) -> usize {
        if terms.len() < 2 {
            return 0;
        }
        let stale = {
            let mut known = self.shares.lock().unwrap_or_else(PoisonError::into_inner);
            let stale = known.read_at.is_none_or(|at| at.elapsed() >= SHARES_FOR);
            if stale {
                // One page reads them; those beside it go by the shares as they were.
                known.read_at = Some(Instant::now());
            }
            stale
        };
        if stale {
            match read_shares(client).await {
                Ok(shares) => {
                    let mut known = self.shares.lock().unwrap_or_else(PoisonError::into_inner);
                    known.shares = shares;
                }
                // The page is still answered, by the shares as they were.
                Err(e) => tracing::debug!(error = %e, "reading the term statistics failed"),
            }
        }
        let known = self.shares.lock().unwrap_or_else(PoisonError::into_inner);
        rarest(terms, &known.shares)
    }

    /// A page of the event feed and the feed's state, in one statement: one snapshot. Sequence
    /// numbers have no gaps (`batch.rs`), so a filtered scan of `scan` events is a range.
    pub(in crate::store) async fn events(&self, query: EventQuery) -> Result<EventPage, ReadError> {
        let after = query
            .after
            .map(|after| i64::try_from(after.seq).unwrap_or(i64::MAX));
        let limit = i64::try_from(query.limit).unwrap_or(i64::MAX);
        let scan = i64::try_from(query.scan).unwrap_or(i64::MAX);
        let types = if query.types.is_all() {
            None
        } else {
            Some(query.types.codes())
        };
        let rows = self
            .pool
            .run(async |client| {
                let statement = client
                    .prepare_cached(&format!(
                        "{FEED_NOW} LEFT JOIN LATERAL (
                             SELECT seq, type, at_ms, pet_id, revision, pet, subject_id, subject
                             FROM events
                             WHERE seq > COALESCE($1, f.trimmed)
                                 AND seq <= COALESCE($1, f.trimmed) + $3
                                 AND ($4::smallint[] IS NULL OR type = ANY($4))
                             ORDER BY seq LIMIT $2
                         ) p ON true ORDER BY p.seq"
                    ))
                    .await
                    .map_err(pg_error)?;
                client
                    .query(&statement, &[&after, &limit, &scan, &types])
                    .await
                    .map_err(pg_error)
            })
            .await?;
        let Some(first) = rows.first() else {
            return Err(StoreError::Corrupt("the feed's counters are missing".into()).into());
        };
        let state = feed_state(first)?;
        let start = state.start(query.after).map_err(|_| ReadError::Gone)?;
        let mut events = Vec::with_capacity(rows.len());
        for row in &rows {
            let Some(seq) = row.get::<_, Option<i64>>(3) else {
                continue;
            };
            let kind = u8::try_from(row.get::<_, i16>(4))
                .ok()
                .and_then(EventType::from_code)
                .ok_or_else(|| StoreError::Corrupt(format!("event {seq} has no known type")))?;
            events.push(StoredEvent {
                seq: seq.unsigned_abs(),
                kind,
                at_ms: row.get::<_, i64>(5).unsigned_abs(),
                pet_id: row.get(6),
                revision: row.get::<_, i64>(7).unsigned_abs(),
                pet: row.get::<_, Option<String>>(8).map(Bytes::from),
                // NULL for a pet's event.
                subject_id: row.get::<_, Option<i64>>(9).unwrap_or(0),
                subject: row.get::<_, Option<String>>(10).map(Bytes::from),
            });
        }
        let reached = match events.last() {
            Some(last) if events.len() == query.limit => last.seq,
            _ => start.saturating_add(query.scan as u64).min(state.newest),
        };
        Ok(EventPage {
            start,
            events,
            reached,
            state,
        })
    }

    pub(in crate::store) async fn check(&self) -> Result<(), StoreError> {
        self.pool
            .run(async |client| {
                client.execute("SELECT 1", &[]).await.map_err(pg_error)?;
                Ok(())
            })
            .await
    }

    /// Closes the pool's connections.
    pub(in crate::store) fn close(self) {
        self.pool.close();
    }
}

/// Where a page of `query` starts, as the statements of `pets_page` compare it: after the pet
/// id (`$1`) and, sorted by name, the sort key (`$3`). Without a cursor, before every pet in the
/// list's order (no id is `i64::MAX`: the counter stops short of it).
fn start_of(query: &PageQuery) -> (PetId, String) {
    let Some(after) = &query.after else {
        let id = match query.sort {
            Sort::Newest => i64::MAX,
            Sort::Id | Sort::Name => i64::MIN,
        };
        return (id, String::new());
    };
    let key = after.key.as_deref().unwrap_or_default();
    match key.split_once('\0') {
        // Only a made-up cursor has a NUL, which no sort key has and PostgreSQL's text
        // cannot hold. The keys after such a key are those after its part before the NUL,
        // that part itself excluded: after it with the highest id.
        Some((before, _)) => (i64::MAX, before.to_owned()),
        None => (after.id, key.to_owned()),
    }
}

/// The most common terms and their shares of `pet_words`' rows (`READ_SHARES`); none before
/// the table's first ANALYZE.
async fn read_shares(
    client: &deadpool_postgres::ClientWrapper,
) -> Result<HashMap<String, f32>, StoreError> {
    let statement = client.prepare_cached(READ_SHARES).await.map_err(pg_error)?;
    let row = client.query_opt(&statement, &[]).await.map_err(pg_error)?;
    let Some(row) = row else {
        return Ok(HashMap::new());
    };
    let terms: Option<Vec<String>> = row.try_get(0).map_err(pg_error)?;
    let shares: Option<Vec<f32>> = row.try_get(1).map_err(pg_error)?;
    let pairs = terms
        .unwrap_or_default()
        .into_iter()
        .zip(shares.unwrap_or_default());
    Ok(pairs.collect())
}

/// The index in `terms` of the rarest by `shares` (a term not there rarer than any that is),
/// the longer of two alike, the first of two of the same length.
fn rarest(terms: &[String], shares: &HashMap<String, f32>) -> usize {
    let share = |term: &String| shares.get(term).copied().unwrap_or(0.0);
    let mut best = 0;
    for (n, term) in terms.iter().enumerate().skip(1) {
        let (this, held) = (share(term), share(&terms[best]));
        if this < held || this == held && term.len() > terms[best].len() {
            best = n;
        }
    }
    best
}

/// The statement of a page of pets sorted by `sort`, with the search's terms the parameters
/// numbered `terms` (the one at `walked` the one walked: `PgStore::walked`), and the filters `equal` (each a
/// column of `pets` and its parameter), after the cursor `start_of` makes. Its rows: the
/// feed's state, then each pet's id and JSON, and its sort key when sorted by name. One text
/// for each combination, so each plan reads the index its combination needs from the cursor
/// on, which one text with parameters that may be NULL ("any") could not:
/// - no search, by id either way: `pets_by_category_status`, `pets_by_category`,
///   `pets_by_status` or the primary key, as the filters give;
/// - no search, by name: `pets_by_name`, the filters checked on each pet;
/// - a search: the walked term's rows of `pet_words` (its primary key in id order,
///   `pet_words_by_name` in name order), each other term a lookup of its primary key, then
///   the pet by its id, the filters checked on it.
fn pets_page(sort: Sort, terms: &[usize], equal: &[(&str, usize)], walked: usize) -> String {
    let walk = match sort {
        Sort::Newest => Walk::Down,
        Sort::Id | Sort::Name => Walk::Up,
    };
    let desc = if walk == Walk::Down { " DESC" } else { "" };
    let filters: String = equal
        .iter()
        .map(|(column, param)| format!(" AND {column} = ${param}"))
        .collect();
    let (inner, outer) = match (terms.get(walked), sort) {
        (None, Sort::Name) => (
            format!(
                "SELECT id, json, name_key FROM pets WHERE {}{filters}
                 ORDER BY name_key, id LIMIT $2",
                from_cursor(&[], &[("name_key", 3), ("id", 1)], walk)
            ),
            "p.name_key, p.id".to_owned(),
        ),
        (None, _) => (
            format!(
                "SELECT id, json FROM pets WHERE {} ORDER BY id{desc} LIMIT $2",
                from_cursor(equal, &[("id", 1)], walk)
            ),
            format!("p.id{desc}"),
        ),
        (Some(&term), _) => {
            let (order, select, outer): (&[(&str, usize)], _, _) = match sort {
                Sort::Name => (
                    &[("w.name_key", 3), ("w.pet_id", 1)],
                    ", w.name_key",
                    "p.name_key, p.id".to_owned(),
                ),
                Sort::Id | Sort::Newest => (&[("w.pet_id", 1)], "", format!("p.id{desc}")),
            };
            // Each other term and the pet are looked up for each row walked, in forms the
            // planner keeps as such (a scalar subquery; a lateral one with a LIMIT): as
            // joins, it may merge them from their first rows (every pet before the cursor)
            // or hash every row of a common term, and sort every match.
            let others: String = terms
                .iter()
                .filter(|other| **other != term)
                .map(|other| {
                    format!(
                        " AND (SELECT true FROM pet_words o
                             WHERE o.term = ${other} AND o.pet_id = w.pet_id)"
                    )
                })
                .collect();
            let by: Vec<String> = order
                .iter()
                .map(|(column, _)| format!("{column}{desc}"))
                .collect();
            (
                format!(
                    "SELECT pet.id, pet.json{select} FROM pet_words w
                     CROSS JOIN LATERAL (
                         SELECT id, json FROM pets WHERE id = w.pet_id{filters} LIMIT 1
                     ) pet
                     WHERE {}{others}
                     ORDER BY {} LIMIT $2",
                    from_cursor(&[("w.term", term)], order, walk),
                    by.join(", ")
                ),
                outer,
            )
        }
    };
    format!("{FEED_NOW} LEFT JOIN LATERAL ({inner}) p ON true ORDER BY {outer}")
}

/// The URL's own `options` (e.g. `-c search_path=pets`) with our statement bound after them,
/// so that ours wins over a `statement_timeout` there and nothing of theirs is lost.
fn with_statement_timeout(options: Option<&str>, timeout: Duration) -> String {
    let ours = format!("-c statement_timeout={}", timeout.as_millis());
    match options.map(str::trim).filter(|o| !o.is_empty()) {
        Some(theirs) => format!("{theirs} {ours}"),
        None => ours,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_search_walks_its_rarest_term_by_the_statistics_else_its_longest() {
        let terms: Vec<String> = ["bel", "max", "sir"].map(String::from).into();
        let none = HashMap::new();
        assert_eq!(rarest(&terms, &none), 0, "the first of the longest");
        let shares = HashMap::from([("bel".to_owned(), 0.014), ("max".to_owned(), 0.007)]);
        assert_eq!(rarest(&terms, &shares), 2, "sir is not among the commonest");
        let terms: Vec<String> = ["bel", "max"].map(String::from).into();
        assert_eq!(rarest(&terms, &shares), 1);
        let terms: Vec<String> = ["ka", "zenomi"].map(String::from).into();
        assert_eq!(rarest(&terms, &none), 1);
    }

    #[test]
    fn a_name_sorted_cursor_starts_after_its_key_and_a_made_up_key_stays_in_order() {
        use crate::search::Search;
        use crate::store::model::After;
        let query = |sort, after| PageQuery {
            status: None,
            category: None,
            search: Search::default(),
            sort,
            after,
            limit: 20,
        };
        assert_eq!(start_of(&query(Sort::Id, None)), (i64::MIN, String::new()));
        assert_eq!(
            start_of(&query(Sort::Newest, None)),
            (i64::MAX, String::new())
        );
        let after = |key: &str| {
            Some(After {
                id: 7,
                key: Some(key.into()),
            })
        };
        assert_eq!(
            start_of(&query(Sort::Name, after("bella"))),
            (7, "bella".into())
        );
        assert_eq!(
            start_of(&query(Sort::Name, after("bel\0x"))),
            (i64::MAX, "bel".into())
        );
    }

    #[test]
    fn the_statement_bound_follows_the_url_s_own_options() {
        let five = Duration::from_secs(5);
        assert_eq!(
            with_statement_timeout(None, five),
            "-c statement_timeout=5000"
        );
        assert_eq!(
            with_statement_timeout(Some(" "), five),
            "-c statement_timeout=5000"
        );
        assert_eq!(
            with_statement_timeout(Some("-c search_path=pets"), five),
            "-c search_path=pets -c statement_timeout=5000"
        );
    }
}
