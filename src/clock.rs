//! The wall clock every module shares: Unix seconds for what outlives a restart (idempotency
//! records, key expiry, certificate renewal). Nothing else of ours is known here.

use std::time::{SystemTime, UNIX_EPOCH};

/// Seconds since the Unix epoch; 0 on a clock set before it.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs())
}
