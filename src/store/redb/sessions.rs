//! Console sessions in the redb file (issue 31): written by the batch like any other write,
//! read from a read transaction.

use redb::ReadableTable;

use super::handle::RedbStore;
use super::logged::Logged;
use super::tables::SESSIONS;
use crate::store::model::StoreError;
use crate::store::sessions::{SessionRecord, SessionsGone};

impl RedbStore {
    pub(in crate::store) async fn session(
        &self,
        token: [u8; 32],
    ) -> Result<Option<SessionRecord>, StoreError> {
        self.read_txn(|txn| {
            let table = match txn.open_table(SESSIONS) {
                Ok(table) => table,
                Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
                Err(e) => return Err(StoreError::storage(e)),
            };
            let Some(value) = table.get(token).map_err(StoreError::storage)? else {
                return Ok(None);
            };
            SessionRecord::decode(value.value()).map(Some)
        })
    }
}

/// Removes the sessions `gone` names, in the batch's transaction; returns how many.
pub(super) fn remove(
    txn: &redb::WriteTransaction,
    gone: SessionsGone,
) -> Result<usize, StoreError> {
    let mut table = Logged::open(txn, SESSIONS)?;
    match gone {
        SessionsGone::One(token) => Ok(usize::from(table.remove(token)?)),
        SessionsGone::IdleSince(before_ms) => {
            let mut idle = Vec::new();
            for entry in table.iter().map_err(StoreError::storage)? {
                let (token, value) = entry.map_err(StoreError::storage)?;
                // A record that does not read admits nobody: it goes too.
                let used = SessionRecord::decode(value.value()).map_or(0, |r| r.used_ms);
                if used < before_ms {
                    idle.push(token.value());
                }
            }
            for token in &idle {
                table.remove(token)?;
            }
            Ok(idle.len())
        }
    }
}
