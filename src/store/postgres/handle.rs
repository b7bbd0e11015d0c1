//! The PostgreSQL store's handle: its connection pool, opened and migrated at start, and the
//! reads. Every wait on the database is bounded (`ANSWER_WITHIN`).

use std::time::Duration;

use bytes::Bytes;
use tokio_postgres::types::ToSql;

use super::batch::PgWriter;
use super::connect::PgTarget;
use super::errors::pg_error;
use super::pool::Connections;
use super::rows::{READ_RECORD, after_cursor, record_of, revision, status_code};
use super::schema::migrate;
use crate::event::{EventType, Position};
use crate::pet::PetId;
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
}

impl PgStore {
    /// Connects and migrates the schema under the migration lock. Returns the read side, the
    /// engine for the write front and the number of pets.
    pub(in crate::store) async fn open(
        target: PgTarget,
    ) -> Result<(PgStore, PgWriter, u64), StoreError> {
        let store = PgStore::connect(&target)?;
        let pets = store.first(async |client| migrate(client).await).await?;
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
        Ok(PgStore { pool })
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

    /// A page of pets and the feed's newest position, in one statement: one snapshot. Each
    /// combination of filters reads its own index (`pets_by_status`, `pets_by_category`,
    /// `pets_by_category_status`) from the cursor on, so a deep page costs what the first does.
    pub(in crate::store) async fn list(&self, query: PageQuery) -> Result<Page, StoreError> {
        if !query.search.is_empty() || query.sort != crate::search::Sort::Id {
            return Err(StoreError::Unsupported(
                "search and sort on PostgreSQL".into(),
            ));
        }
        let limit = query.limit;
        let after = query.after.as_ref().map_or(i64::MIN, |after| after.id);
        // One more than the page, to tell whether another follows.
        let fetch = i64::try_from(limit + 1).unwrap_or(i64::MAX);
        let status = query.status.map(|status| status_code(Some(status)));
        // One statement text for each combination of filters: a parameter that may be NULL
        // ("any") would make a plan that cannot use the index of the filter given.
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![&after, &fetch];
        let mut equal = Vec::new();
        if let Some(category) = &query.category {
            params.push(category);
            equal.push(("category_id", params.len()));
        }
        if let Some(status) = &status {
            params.push(status);
            equal.push(("status", params.len()));
        }
        let sql = format!(
            "{FEED_NOW} LEFT JOIN LATERAL (
                 SELECT id, json FROM pets WHERE {} ORDER BY id LIMIT $2
             ) p ON true ORDER BY p.id",
            after_cursor(&equal)
        );
        self.pool
            .run(async |client| {
                let statement = client.prepare_cached(&sql).await.map_err(pg_error)?;
                let rows = client.query(&statement, &params).await.map_err(pg_error)?;
                let mut page = PageBuilder::new(limit);
                let mut events = Position { feed: 0, seq: 0 };
                for row in &rows {
                    events = feed_state(row)?.newest_position();
                    if let Some(id) = row.get::<_, Option<i64>>(3) {
                        page.push(id, row.get::<_, &str>(4).as_bytes());
                    }
                }
                Ok(page.finish().at(events))
            })
            .await
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
