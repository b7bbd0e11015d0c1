//! Idempotency keys in flight: a request claims its key's scope before its body is read and
//! holds it until the write that uses it is answered, so a second request with the same key
//! meanwhile is told so instead of racing the first. The claims live in this process's memory,
//! shared by every backend. Invariant: at most one claim per scope exists at a time.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// An Idempotency-Key as the store sees it: its claim and what it was sent with.
#[derive(Debug)]
pub struct IdempotencyKey {
    claim: KeyClaim,
    /// A digest of the pet the request asks for: a retry must ask for the same one.
    fingerprint: [u8; 32],
}

impl IdempotencyKey {
    /// The record's key: a digest of the API key and the Idempotency-Key.
    pub(super) fn scope(&self) -> [u8; 32] {
        self.claim.scope
    }

    pub(super) fn fingerprint(&self) -> [u8; 32] {
        self.fingerprint
    }
}

/// A key a write carries into its batch, with the expiry its record gets if the write goes
/// ahead.
pub(crate) struct Keyed {
    pub(crate) key: IdempotencyKey,
    pub(crate) expires_at: u64,
}

/// The scopes claimed in this process.
#[derive(Debug, Default)]
pub(super) struct Claims(Mutex<HashSet<[u8; 32]>>);

/// A scope claimed from before the request's body is read until the write that uses it is
/// answered, or until the request is dropped without one.
#[derive(Debug)]
pub struct KeyClaim {
    claims: Arc<Claims>,
    scope: [u8; 32],
}

impl KeyClaim {
    /// The key for a request whose body digests to `fingerprint` (its canonical form, marked
    /// with its kind, so a pet's and an order's never match).
    pub fn for_body(self, fingerprint: [u8; 32]) -> IdempotencyKey {
        IdempotencyKey {
            claim: self,
            fingerprint,
        }
    }
}

impl Claims {
    /// Claims `scope`, or `None` while another request holds it.
    pub(super) fn claim(self: &Arc<Claims>, scope: [u8; 32]) -> Option<KeyClaim> {
        // The lock is let go before a `KeyClaim` exists: dropping one takes it again.
        let claimed = self.set().insert(scope);
        claimed.then(|| KeyClaim {
            claims: Arc::clone(self),
            scope,
        })
    }

    fn set(&self) -> MutexGuard<'_, HashSet<[u8; 32]>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for KeyClaim {
    fn drop(&mut self) {
        self.claims.set().remove(&self.scope);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scope_is_claimed_once_until_its_claim_is_dropped() {
        let claims = Arc::new(Claims::default());
        let first = claims.claim([1; 32]).expect("free");
        assert!(claims.claim([1; 32]).is_none(), "held");
        assert!(claims.claim([2; 32]).is_some(), "another scope");
        drop(first);
        assert!(claims.claim([1; 32]).is_some(), "released");
    }
}
