//! What the store keeps of each webhook endpoint (issue 30): its place in the event feed and
//! its retry state, so delivery goes on from there after any restart, and on PostgreSQL the
//! lease that lets one instance deliver to it at a time. Both engines keep the state as these
//! bytes (`encode`), keyed by the endpoint's id from the endpoints file; an endpoint removed
//! from the file keeps its row until the store is copied, harmless and small.
//! Invariant: a saved position only moves forward within one feed, and only after the receiver
//! answered 2xx for every event up to it (or the event was not of the endpoint's types).

use serde::{Deserialize, Serialize};

use super::model::StoreError;

/// An endpoint's delivery state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebhookState {
    /// The feed identity `position` counts in (`event::Position::feed`).
    pub feed: u64,
    /// The sequence number of the last event done with: the next to send is after it.
    pub position: u64,
    /// Failed tries of the event after `position`; 0 while delivering.
    #[serde(default)]
    pub attempts: u32,
    /// When the first of those failed (Unix milliseconds), 0 while delivering.
    #[serde(default)]
    pub failing_since_ms: u64,
    /// When the next try is due (Unix milliseconds), 0 while delivering.
    #[serde(default)]
    pub next_try_ms: u64,
    /// What the last failure was, for `webhooks list` and the log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// Why the endpoint stopped, when it did (a 410, the last try failed, the feed purged past
    /// it, the store's feed replaced); it waits for `petstore webhooks enable`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disabled: Option<String>,
    /// The endpoints file's `resume=` counter last taken: a larger one resumes a disabled
    /// endpoint.
    #[serde(default)]
    pub resume: u64,
}

impl WebhookState {
    pub fn encode(&self) -> Vec<u8> {
        // A struct of numbers and strings always serializes.
        serde_json::to_vec(self).unwrap_or_default()
    }

    pub fn decode(id: &str, bytes: &[u8]) -> Result<WebhookState, StoreError> {
        serde_json::from_slice(bytes).map_err(|e| {
            StoreError::Corrupt(format!(
                "the state of webhook endpoint {id} does not read: {e}"
            ))
        })
    }
}

/// How long a PostgreSQL instance holds an endpoint once it took or renewed its lease: another
/// instance takes over a dead one's endpoints this long after its last renewal.
pub const LEASE: std::time::Duration = std::time::Duration::from_secs(6);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_reads_back_as_written() {
        let state = WebhookState {
            feed: u64::MAX,
            position: 42,
            attempts: 3,
            failing_since_ms: 1,
            next_try_ms: 2,
            last_error: Some("HTTP 500".into()),
            disabled: None,
            resume: 7,
        };
        assert_eq!(
            WebhookState::decode("ep", &state.encode()).ok(),
            Some(state)
        );
        assert!(WebhookState::decode("ep", b"{").is_err());
    }
}
