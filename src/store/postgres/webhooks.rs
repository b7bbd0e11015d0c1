//! Webhook endpoints' delivery state on PostgreSQL (issue 30), with the lease that makes one
//! instance at a time deliver to an endpoint: taken when free or expired, renewed by each save,
//! and every save is fenced by it, so an instance that lost its lease (paused past it, cut off)
//! can never move the position under the one that took over. Times are the database's.

use super::connect::PgTarget;
use super::errors::pg_error;
use super::handle::PgStore;
use super::schema::require_current;
use crate::store::model::StoreError;
use crate::store::webhooks::{LEASE, WebhookState};

fn lease_ms() -> i64 {
    LEASE.as_millis() as i64
}

/// `petstore webhooks list --db postgres://…`, from outside the servers: every endpoint's
/// state and the feed's newest sequence number, without opening the store: no migration, and
/// no write front whose loops (expiring orders, purging) would write to the servers' database.
pub async fn states_in_database(
    target: PgTarget,
) -> Result<(Vec<(String, WebhookState)>, u64), StoreError> {
    let store = PgStore::connect(&target)?;
    store
        .first(async |client| require_current(client).await)
        .await?;
    let states = store.webhook_states().await?;
    let newest: Option<i64> = store
        .pool
        .run(async |client| {
            client
                .query_opt(
                    "SELECT value FROM petstore_meta WHERE name = 'event_seq'",
                    &[],
                )
                .await
                .map_err(pg_error)
        })
        .await?
        .map(|row| row.get(0));
    Ok((states, newest.map_or(0, i64::unsigned_abs)))
}

impl PgStore {
    pub(in crate::store) async fn webhook_states(
        &self,
    ) -> Result<Vec<(String, WebhookState)>, StoreError> {
        let rows = self
            .pool
            .run(async |client| {
                client
                    .query(
                        "SELECT endpoint, state FROM webhooks ORDER BY endpoint",
                        &[],
                    )
                    .await
                    .map_err(pg_error)
            })
            .await?;
        rows.iter()
            .map(|row| {
                let id: String = row.get(0);
                let state = WebhookState::decode(&id, row.get(1))?;
                Ok((id, state))
            })
            .collect()
    }

    /// Takes or renews `holder`'s lease on endpoint `id` (made with `fresh` if new): its state
    /// when `holder` holds it now, `None` while another instance does.
    pub(in crate::store) async fn lease_webhook(
        &self,
        id: &str,
        holder: &str,
        fresh: &WebhookState,
    ) -> Result<Option<WebhookState>, StoreError> {
        let fresh = fresh.encode();
        let row = self
            .pool
            .run(async |client| {
                client
                    .query_opt(
                        "INSERT INTO webhooks AS w (endpoint, state, holder, lease_until)
                         VALUES ($1, $2, $3, clock_timestamp() + $4::bigint * interval '1 millisecond')
                         ON CONFLICT (endpoint) DO UPDATE
                         SET holder = EXCLUDED.holder, lease_until = EXCLUDED.lease_until
                         WHERE w.holder IS NULL OR w.holder = EXCLUDED.holder
                            OR w.lease_until < clock_timestamp()
                         RETURNING state",
                        &[&id, &fresh, &holder, &lease_ms()],
                    )
                    .await
                    .map_err(pg_error)
            })
            .await?;
        row.map(|row| WebhookState::decode(id, row.get(0)))
            .transpose()
    }

    /// Saves `state` of endpoint `id` and renews the lease, if `holder` still holds it;
    /// `false` when it does not (another instance took over).
    pub(in crate::store) async fn save_webhook(
        &self,
        id: &str,
        holder: &str,
        state: &WebhookState,
    ) -> Result<bool, StoreError> {
        let state = state.encode();
        let updated = self
            .pool
            .run(async |client| {
                client
                    .execute(
                        "UPDATE webhooks SET state = $2,
                             lease_until = clock_timestamp() + $4::bigint * interval '1 millisecond'
                         WHERE endpoint = $1 AND holder = $3 AND lease_until >= clock_timestamp()",
                        &[&id, &state, &holder, &lease_ms()],
                    )
                    .await
                    .map_err(pg_error)
            })
            .await?;
        Ok(updated == 1)
    }

    /// Gives up every lease of `holder`, at a clean stop: another instance takes over at once.
    pub(in crate::store) async fn release_webhooks(&self, holder: &str) -> Result<(), StoreError> {
        self.pool
            .run(async |client| {
                client
                    .execute(
                        "UPDATE webhooks SET holder = NULL, lease_until = '-infinity'
                         WHERE holder = $1",
                        &[&holder],
                    )
                    .await
                    .map_err(pg_error)
            })
            .await
            .map(|_| ())
    }
}
