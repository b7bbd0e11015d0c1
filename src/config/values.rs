//! Flag values clap cannot read by itself: durations (at least a second, or a millisecond
//! for PostgreSQL's statement timeout), key expiry times, and `--db` (and `copy`'s `--from`,
//! `--to`) classified as a redb path or a PostgreSQL URL. Text in, typed values out; the URL
//! itself is checked by the store's PostgreSQL engine.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::bail;

/// Where the pets are kept, as `--db` says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Database {
    /// The embedded redb file.
    Redb(PathBuf),
    /// A PostgreSQL server, by its `postgres://` or `postgresql://` URL, not yet checked.
    Postgres(String),
}

impl Database {
    /// Classifies a `--db` value (or `--from`, `--to`, as `flag` says): a `postgres://` or
    /// `postgresql://` URL (scheme in any case), another `scheme://` (refused), or else a redb
    /// file path.
    pub(super) fn from_flag(flag: &str, value: OsString) -> anyhow::Result<Database> {
        // A path that is not UTF-8 cannot be a URL.
        let Some(text) = value.to_str() else {
            return Ok(Database::Redb(value.into()));
        };
        let Some((scheme, _)) = text.split_once("://") else {
            return Ok(Database::Redb(value.into()));
        };
        if scheme.eq_ignore_ascii_case("postgres") || scheme.eq_ignore_ascii_case("postgresql") {
            return Ok(Database::Postgres(text.to_owned()));
        }
        bail!(
            "{flag}: unsupported scheme {scheme:?}; use a redb file path (e.g. pets.redb) or a \
             postgres:// or postgresql:// URL"
        )
    }
}

/// A duration as humantime writes it (`90s`, `15m`, `24h`, `7d`, `1h 30m`), at least a second:
/// records are kept to the second.
pub(super) fn parse_ttl(text: &str) -> Result<Duration, String> {
    let ttl = humantime::parse_duration(text).map_err(|e| e.to_string())?;
    if ttl < Duration::from_secs(1) {
        return Err("must be at least 1s".into());
    }
    Ok(ttl)
}

/// An expiry as `keys add --expires` takes it: seconds since the epoch.
pub(super) fn parse_expiry(text: &str) -> Result<u64, String> {
    crate::auth::parse_time(text).map_err(|e| format!("{e:#}"))
}

/// A statement timeout as humantime writes it (`500ms`, `5s`, `1m`), at least a millisecond:
/// PostgreSQL counts it in whole milliseconds and reads 0 as no limit.
pub(super) fn parse_statement_timeout(text: &str) -> Result<Duration, String> {
    let timeout = humantime::parse_duration(text).map_err(|e| e.to_string())?;
    if timeout < Duration::from_millis(1) {
        return Err("must be at least 1ms".into());
    }
    Ok(timeout)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_idempotency_ttl_is_a_duration_of_a_second_or_more() {
        assert_eq!(parse_ttl("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_ttl("7d"), Ok(Duration::from_secs(7 * 86400)));
        for bad in ["", "10", "0s", "500ms", "soon"] {
            assert!(parse_ttl(bad).is_err(), "{bad}");
        }
    }
}
