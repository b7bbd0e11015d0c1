//! Console sessions on PostgreSQL (issue 31): one row each, read and written by single
//! statements outside the write batches (a session is not a change of the store's data and
//! appends no event).

use super::errors::pg_error;
use super::handle::PgStore;
use crate::store::model::StoreError;
use crate::store::sessions::{SessionRecord, SessionsGone};

impl PgStore {
    pub(in crate::store) async fn session(
        &self,
        token: [u8; 32],
    ) -> Result<Option<SessionRecord>, StoreError> {
        let row = self
            .pool
            .run(async |client| {
                client
                    .query_opt(
                        "SELECT record FROM sessions WHERE token = $1",
                        &[&token.as_slice()],
                    )
                    .await
                    .map_err(pg_error)
            })
            .await?;
        row.map(|row| SessionRecord::decode(row.get(0))).transpose()
    }

    pub(in crate::store) async fn save_session(
        &self,
        token: [u8; 32],
        record: &SessionRecord,
    ) -> Result<(), StoreError> {
        let bytes = record.encode();
        let used = i64::try_from(record.used_ms).unwrap_or(i64::MAX);
        self.pool
            .run(async |client| {
                client
                    .execute(
                        "INSERT INTO sessions (token, record, used_ms) VALUES ($1, $2, $3)
                         ON CONFLICT (token) DO UPDATE
                         SET record = EXCLUDED.record, used_ms = EXCLUDED.used_ms",
                        &[&token.as_slice(), &bytes, &used],
                    )
                    .await
                    .map_err(pg_error)
            })
            .await
            .map(|_| ())
    }

    pub(in crate::store) async fn remove_sessions(
        &self,
        gone: SessionsGone,
    ) -> Result<usize, StoreError> {
        let removed = self
            .pool
            .run(async |client| match gone {
                SessionsGone::One(token) => client
                    .execute(
                        "DELETE FROM sessions WHERE token = $1",
                        &[&token.as_slice()],
                    )
                    .await
                    .map_err(pg_error),
                SessionsGone::IdleSince(before_ms) => {
                    let before = i64::try_from(before_ms).unwrap_or(i64::MAX);
                    client
                        .execute("DELETE FROM sessions WHERE used_ms < $1", &[&before])
                        .await
                        .map_err(pg_error)
                }
            })
            .await?;
        Ok(usize::try_from(removed).unwrap_or(usize::MAX))
    }
}
