//! Webhook endpoints' delivery state in the redb file (issue 30). One process has the file, so
//! it always holds every endpoint: there is no lease, and a save is a write of the batch like
//! any other, durable before it is answered.

use std::path::Path;

use redb::{ReadTransaction, ReadableDatabase, ReadableTable};

use super::backup::open_live;
use super::handle::RedbStore;
use super::tables::{META, META_EVENT_SEQ, WEBHOOKS, meta_value};
use crate::store::model::StoreError;
use crate::store::webhooks::WebhookState;

impl RedbStore {
    pub(in crate::store) async fn webhook_states(
        &self,
    ) -> Result<Vec<(String, WebhookState)>, StoreError> {
        self.read_txn(states_in)
    }
}

/// `petstore webhooks list`, from a second process: every endpoint's state in the file at
/// `path`, and the feed's newest sequence number, from one read transaction (see `open_live`
/// for when a running server lets it read).
pub fn states_in_file(path: &Path) -> Result<(Vec<(String, WebhookState)>, u64), StoreError> {
    let db = open_live(path)?;
    let txn = db.begin_read().map_err(StoreError::storage)?;
    let newest = match txn.open_table(META) {
        Ok(meta) => meta_value(&meta, META_EVENT_SEQ)?,
        Err(redb::TableError::TableDoesNotExist(_)) => 0,
        Err(e) => return Err(StoreError::storage(e)),
    };
    Ok((states_in(&txn)?, newest))
}

/// Every endpoint's state in `txn`'s view of the file: none before the first save.
fn states_in(txn: &ReadTransaction) -> Result<Vec<(String, WebhookState)>, StoreError> {
    let table = match txn.open_table(WEBHOOKS) {
        Ok(table) => table,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
        Err(e) => return Err(StoreError::storage(e)),
    };
    let mut states = Vec::new();
    for entry in table.iter().map_err(StoreError::storage)? {
        let (id, state) = entry.map_err(StoreError::storage)?;
        let id = id.value().to_owned();
        let state = WebhookState::decode(&id, state.value())?;
        states.push((id, state));
    }
    Ok(states)
}
