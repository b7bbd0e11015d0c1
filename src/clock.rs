//! The wall clock every module shares: Unix seconds for what outlives a restart (idempotency
//! records, key expiry, certificate renewal), and the one way a time is written for people and
//! clients, RFC 3339 in UTC. Nothing else of ours is known here.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use humantime::Rfc3339Timestamp;

/// Seconds since the Unix epoch; 0 on a clock set before it.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs())
}

/// How much of a second an RFC 3339 time shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precision {
    /// `2027-01-01T00:00:00Z`: key expiry, ACME state, snapshot names.
    Seconds,
    /// `2027-01-01T00:00:00.042Z`: the API's times (events, orders).
    Millis,
    /// `2027-01-01T00:00:00.000042Z`: log lines.
    Micros,
}

/// The last instant humantime writes: RFC 3339 has four digits for the year.
const LAST_WRITABLE: Duration = Duration::new(253_402_300_799, 999_999_999);

/// `at` as RFC 3339 in UTC with a `Z`, to `precision`. A time before 1970 shows as the epoch
/// and one past the year 9999 as its last instant: humantime would panic or fail on them, and
/// a wrong clock is not worth a lost log line or a failed answer.
pub fn rfc3339(at: SystemTime, precision: Precision) -> Rfc3339Timestamp {
    let since = at.duration_since(UNIX_EPOCH).unwrap_or_default();
    let at = UNIX_EPOCH + since.min(LAST_WRITABLE);
    match precision {
        Precision::Seconds => humantime::format_rfc3339_seconds(at),
        Precision::Millis => humantime::format_rfc3339_millis(at),
        Precision::Micros => humantime::format_rfc3339_micros(at),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_rfc_3339_utc_to_the_precision_asked() {
        let at = UNIX_EPOCH + Duration::from_micros(1_795_345_876_042_042);
        assert_eq!(
            rfc3339(at, Precision::Seconds).to_string(),
            "2026-11-22T11:11:16Z"
        );
        assert_eq!(
            rfc3339(at, Precision::Millis).to_string(),
            "2026-11-22T11:11:16.042Z"
        );
        assert_eq!(
            rfc3339(at, Precision::Micros).to_string(),
            "2026-11-22T11:11:16.042042Z"
        );
    }

    #[test]
    fn a_time_out_of_rfc_3339_range_shows_as_the_nearest_end() {
        let before = UNIX_EPOCH - Duration::from_secs(1);
        assert_eq!(
            rfc3339(before, Precision::Micros).to_string(),
            "1970-01-01T00:00:00.000000Z"
        );
        let after = UNIX_EPOCH + Duration::from_secs(300_000_000_000);
        assert_eq!(
            rfc3339(after, Precision::Millis).to_string(),
            "9999-12-31T23:59:59.999Z"
        );
    }
}
