//! Flag values clap cannot read by itself: durations (at least a second, or a millisecond
//! for PostgreSQL's statement timeout; timeouts also as bare seconds), the webhook retry
//! schedule (a list of durations), key expiry times,
//! `--listen`'s `HOST:PORT`, and `--db` (and `copy`'s `--from`, `--to`) classified as a redb
//! path or a PostgreSQL URL. Text in, typed values out: a host name is resolved when the
//! server starts, and the URL is checked by the store's PostgreSQL engine.

use std::ffi::OsString;
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;
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
    pub fn from_flag(flag: &str, value: OsString) -> anyhow::Result<Database> {
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

/// Where `--listen` serves: `HOST:PORT`, checked for form only.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListenAddress {
    /// An IP address and a port, bound as they are.
    Socket(SocketAddr),
    /// A host name and a port; the name is resolved when the server starts.
    Name { host: String, port: u16 },
}

impl FromStr for ListenAddress {
    type Err = String;

    fn from_str(text: &str) -> Result<ListenAddress, String> {
        if let Ok(address) = text.parse::<SocketAddr>() {
            return Ok(ListenAddress::Socket(address));
        }
        let expected = "expected HOST:PORT, e.g. 0.0.0.0:443, [::]:8443 or localhost:8443";
        let Some((host, port)) = text.rsplit_once(':') else {
            return Err(format!("no port; {expected}"));
        };
        let Ok(port) = port.parse::<u16>() else {
            return Err(format!("{port:?} is not a port (0 to 65535); {expected}"));
        };
        if host.is_empty() {
            return Err(format!(
                "no host before the port; {expected} (0.0.0.0 or [::] for every address)"
            ));
        }
        // Without brackets, the port of an IPv6 address cannot be told from its last group.
        if host.contains([':', '[', ']']) {
            return Err(format!(
                "{host:?} is not an IP address or a host name; an IPv6 address goes in \
                 brackets, e.g. [::1]:8443"
            ));
        }
        // RFC 1123 names (and `_`, which resolvers accept in /etc/hosts): nothing a resolver
        // would read as syntax.
        if !host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
        {
            return Err(format!(
                "{host:?} is not an IP address or a host name; {expected}"
            ));
        }
        Ok(ListenAddress::Name {
            host: host.to_owned(),
            port,
        })
    }
}

impl fmt::Display for ListenAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ListenAddress::Socket(address) => address.fmt(f),
            ListenAddress::Name { host, port } => write!(f, "{host}:{port}"),
        }
    }
}

/// A timeout as the connection limits take it: a bare number of seconds (the form the unit
/// files use) or a duration as humantime writes it (`500ms`, `30s`, `5m`).
pub(super) fn parse_timeout(text: &str) -> Result<Duration, String> {
    if let Ok(seconds) = text.parse::<u64>() {
        return Ok(Duration::from_secs(seconds));
    }
    humantime::parse_duration(text)
        .map_err(|e| format!("{e}; a duration is e.g. `30s` or `5m`, a bare number seconds"))
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

/// `--order-hold`'s value: how long a new order holds its pet, `None` for no expiry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hold(pub Option<Duration>);

impl fmt::Display for Hold {
    /// As `parse_hold` reads it: for clap to show the default.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            None => f.write_str("0"),
            Some(hold) => humantime::format_duration(hold).fmt(f),
        }
    }
}

/// A hold as `--order-hold` takes it: `0` (any zero duration) for no expiry, else a duration
/// as `--idempotency-ttl` takes it, at least a second.
pub(super) fn parse_hold(text: &str) -> Result<Hold, String> {
    if text.trim() == "0" {
        return Ok(Hold(None));
    }
    match humantime::parse_duration(text) {
        Ok(hold) if hold.is_zero() => Ok(Hold(None)),
        _ => parse_ttl(text)
            .map(|hold| Hold(Some(hold)))
            .map_err(|e| format!("{e}; `0` for no expiry")),
    }
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

/// `--webhook-retry-schedule`'s value: the waits before each retry of a failed delivery.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetrySchedule(pub Vec<Duration>);

/// Most retries a schedule may hold: past a handful, a receiver that is down for days is
/// better disabled and resumed by the operator than retried forever.
const MAX_RETRIES: usize = 20;

/// A retry schedule: 1 to 20 comma-separated durations as humantime writes them (`5s`,
/// `30m`, `2h`), each above zero.
pub(super) fn parse_retry_schedule(text: &str) -> Result<RetrySchedule, String> {
    let form = "a comma-separated list of durations, e.g. `5s,5m,30m,2h,5h,10h,10h`";
    let mut waits = Vec::new();
    for (n, part) in text.split(',').map(str::trim).enumerate() {
        let wait = humantime::parse_duration(part)
            .map_err(|e| format!("retry {}: {part:?}: {e}; expected {form}", n + 1))?;
        if wait.is_zero() {
            return Err(format!(
                "retry {}: {part:?}: each wait must be above zero",
                n + 1
            ));
        }
        waits.push(wait);
    }
    if waits.len() > MAX_RETRIES {
        return Err(format!(
            "{} retries; at most {MAX_RETRIES} (a receiver down longer is disabled, and \
             `petstore webhooks enable` resumes it)",
            waits.len()
        ));
    }
    Ok(RetrySchedule(waits))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listen_address_is_an_ip_address_or_a_host_name_with_a_port() {
        let parse = |text: &str| text.parse::<ListenAddress>();
        for text in ["127.0.0.1:8443", "0.0.0.0:443", "[::]:8443", "[::1]:0"] {
            let address = text.parse::<SocketAddr>().expect("a socket address");
            assert_eq!(parse(text), Ok(ListenAddress::Socket(address)));
            assert_eq!(address.to_string(), text, "shown as given");
        }
        for (text, host, port) in [
            ("localhost:8443", "localhost", 8443),
            ("pets.example.com:443", "pets.example.com", 443),
            ("localhost:0", "localhost", 0),
        ] {
            let address = parse(text).expect("a name");
            assert_eq!(
                address,
                ListenAddress::Name {
                    host: host.into(),
                    port
                }
            );
            assert_eq!(address.to_string(), text);
        }
        for (text, says) in [
            ("localhost", "no port"),
            ("8443", "no port"),
            (":8443", "no host before the port"),
            ("localhost:https", "\"https\" is not a port"),
            ("localhost:65536", "\"65536\" is not a port"),
            ("::1:8443", "an IPv6 address goes in brackets"),
            ("[::1:8443", "an IPv6 address goes in brackets"),
            ("pets example:443", "is not an IP address or a host name"),
        ] {
            let error = parse(text).expect_err(text);
            assert!(error.contains(says), "{text}: {error}");
        }
    }

    #[test]
    fn a_timeout_is_a_duration_or_a_bare_number_of_seconds() {
        assert_eq!(parse_timeout("10"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_timeout("0"), Ok(Duration::ZERO));
        assert_eq!(parse_timeout("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_timeout("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_timeout("500ms"), Ok(Duration::from_millis(500)));
        for bad in ["", "-1", "soon", "10 parsecs"] {
            assert!(parse_timeout(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn an_order_hold_is_a_duration_of_a_second_or_more_or_0_for_none() {
        assert_eq!(parse_hold("30m"), Ok(Hold(Some(Duration::from_secs(1800)))));
        assert_eq!(parse_hold("1s"), Ok(Hold(Some(Duration::from_secs(1)))));
        for none in ["0", "0s", "0m"] {
            assert_eq!(parse_hold(none), Ok(Hold(None)), "{none}");
        }
        for hold in [Hold(None), Hold(Some(Duration::from_secs(5400)))] {
            assert_eq!(parse_hold(&hold.to_string()), Ok(hold));
        }
        for bad in ["", "10", "500ms", "soon", "-1"] {
            let error = parse_hold(bad).expect_err(bad);
            assert!(error.ends_with("`0` for no expiry"), "{bad}: {error}");
        }
    }

    #[test]
    fn an_idempotency_ttl_is_a_duration_of_a_second_or_more() {
        assert_eq!(parse_ttl("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_ttl("7d"), Ok(Duration::from_secs(7 * 86400)));
        for bad in ["", "10", "0s", "500ms", "soon"] {
            assert!(parse_ttl(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_webhook_retry_schedule_is_1_to_20_durations_above_zero() {
        assert_eq!(
            parse_retry_schedule("5s, 5m,2h"),
            Ok(RetrySchedule(vec![
                Duration::from_secs(5),
                Duration::from_secs(300),
                Duration::from_secs(7200)
            ]))
        );
        assert_eq!(
            parse_retry_schedule("1m 30s"),
            Ok(RetrySchedule(vec![Duration::from_secs(90)]))
        );
        let twenty = vec!["1s"; 20].join(",");
        assert_eq!(parse_retry_schedule(&twenty).map(|s| s.0.len()), Ok(20));
        for (bad, says) in [
            ("", "retry 1: \"\""),
            ("5s,,5m", "retry 2: \"\""),
            ("5s,0s", "retry 2: \"0s\": each wait must be above zero"),
            ("5s,soon", "retry 2: \"soon\""),
            ("10", "retry 1: \"10\""),
            (&format!("{twenty},1s"), "21 retries; at most 20"),
        ] {
            let error = parse_retry_schedule(bad).expect_err(bad);
            assert!(error.starts_with(says), "{bad}: {error}");
        }
    }
}
