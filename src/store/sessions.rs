//! What the store keeps of each console session (issue 31): the key it was opened with (its
//! hash: the key itself is never kept) and when it was last used, by the SHA-256 of the
//! session's token (the token is only ever in the browser's cookie). Kept in the store, so a
//! session works through any instance and survives a restart. Whether it still admits anyone is
//! decided at each use, against the keys in force: a revoked or expired key ends its sessions.

use serde::{Deserialize, Serialize};

use super::model::StoreError;

/// One session.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRecord {
    /// The SHA-256 of the key it was opened with, in hex.
    pub key: String,
    /// When it was opened and last used, Unix milliseconds.
    pub created_ms: u64,
    pub used_ms: u64,
}

impl SessionRecord {
    pub fn encode(&self) -> Vec<u8> {
        // Strings and numbers always serialize.
        serde_json::to_vec(self).unwrap_or_default()
    }

    pub fn decode(bytes: &[u8]) -> Result<SessionRecord, StoreError> {
        serde_json::from_slice(bytes)
            .map_err(|e| StoreError::Corrupt(format!("a console session does not read: {e}")))
    }
}

/// A removal of sessions.
#[derive(Clone, Copy, Debug)]
pub enum SessionsGone {
    /// The one with this token hash (signed out).
    One([u8; 32]),
    /// Every one not used since this Unix time in milliseconds (the idle purge).
    IdleSince(u64),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_reads_back_as_written() {
        let record = SessionRecord {
            key: "ab".repeat(32),
            created_ms: 1,
            used_ms: 2,
        };
        assert_eq!(SessionRecord::decode(&record.encode()).ok(), Some(record));
        assert!(SessionRecord::decode(b"[]").is_err());
    }
}
