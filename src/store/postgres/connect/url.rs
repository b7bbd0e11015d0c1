//! The libpq URL (`postgres://` or `postgresql://`, several hosts, `target_session_attrs`,
//! `connect_timeout`...) read into a tokio-postgres `Config`, with the parameters tokio-postgres
//! does not know (`sslmode`, `sslrootcert`) taken out for `tls`; and that `Config` made into one
//! per host for the pool. Invariants: a password in the URL is refused before any error that
//! quotes a URL part; a parameter means what it means to libpq.

use std::borrow::Cow;
use std::str::FromStr;

use anyhow::{Context, bail, ensure};
use tokio_postgres::config::Host;

/// The URL read: what tokio-postgres takes, and the TLS parameters it does not know.
#[derive(Debug)]
pub(super) struct Url {
    /// Hosts, ports, user, database and the other parameters; no password, at least one host.
    pub(super) config: tokio_postgres::Config,
    pub(super) sslmode: Option<String>,
    pub(super) sslrootcert: Option<String>,
}

/// Reads `--db` into a `Url`, with the checks tokio-postgres would make only at a connect.
///
/// # Errors
/// Each names the URL part at fault, never a password: a password in the URL (refused before
/// anything that would quote the URL), no user, no host, or what tokio-postgres refuses.
pub(super) fn read(url: &str) -> anyhow::Result<Url> {
    let url = SplitUrl::from_url(url)?;
    let config = tokio_postgres::Config::from_str(&url.rest)
        .context("--db: not a PostgreSQL URL tokio-postgres accepts")?;
    // Checked before any error that quotes a URL part, so none is written next to it.
    ensure!(
        config.get_password().is_none(),
        "--db: the URL holds a password; put it in a file named by --db-password-file \
         (systemd: LoadCredential=), never on the command line"
    );
    ensure!(
        config.get_user().is_some(),
        "--db: the URL names no user; write postgres://USER@HOST/DBNAME"
    );
    check_hosts(&config)?;
    Ok(Url {
        config,
        sslmode: url.sslmode,
        sslrootcert: url.sslrootcert,
    })
}

/// One configuration for each host of `config` (with its `hostaddr` and port), the same in all
/// else, so that each host can be tried with its own bound: tokio-postgres bounds only the
/// TCP connect of each, not its TLS handshake, authentication or `target_session_attrs`
/// check, and offers no way to take hosts out of a `Config`.
pub fn one_per_host(config: &tokio_postgres::Config) -> Vec<tokio_postgres::Config> {
    let count = config.get_hosts().len().max(config.get_hostaddrs().len());
    (0..count)
        .map(|i| {
            let mut one = tokio_postgres::Config::new();
            match config.get_hosts().get(i) {
                Some(Host::Tcp(host)) => {
                    one.host(host);
                }
                Some(Host::Unix(dir)) => {
                    one.host_path(dir);
                }
                None => {}
            }
            if let Some(addr) = config.get_hostaddrs().get(i) {
                one.hostaddr(*addr);
            }
            let ports = config.get_ports();
            if let Some(port) = ports.get(i).or(ports.first()) {
                one.port(*port);
            }
            if let Some(user) = config.get_user() {
                one.user(user);
            }
            if let Some(password) = config.get_password() {
                one.password(password);
            }
            if let Some(dbname) = config.get_dbname() {
                one.dbname(dbname);
            }
            if let Some(options) = config.get_options() {
                one.options(options);
            }
            if let Some(name) = config.get_application_name() {
                one.application_name(name);
            }
            if let Some(timeout) = config.get_connect_timeout() {
                one.connect_timeout(*timeout);
            }
            if let Some(timeout) = config.get_tcp_user_timeout() {
                one.tcp_user_timeout(*timeout);
            }
            if let Some(interval) = config.get_keepalives_interval() {
                one.keepalives_interval(interval);
            }
            if let Some(retries) = config.get_keepalives_retries() {
                one.keepalives_retries(retries);
            }
            one.keepalives(config.get_keepalives())
                .keepalives_idle(config.get_keepalives_idle())
                .ssl_mode(config.get_ssl_mode())
                .ssl_negotiation(config.get_ssl_negotiation())
                .target_session_attrs(config.get_target_session_attrs())
                .channel_binding(config.get_channel_binding());
            one
        })
        .collect()
}

/// The URL with the parameters tokio-postgres does not know taken out, and their values.
#[derive(Debug, PartialEq, Eq)]
struct SplitUrl {
    /// `postgresql://` and the rest of the URL, without `sslmode` and `sslrootcert`.
    rest: String,
    sslmode: Option<String>,
    sslrootcert: Option<String>,
}

impl SplitUrl {
    fn from_url(url: &str) -> anyhow::Result<SplitUrl> {
        let (scheme, after) = url
            .split_once("://")
            .context("--db: not a URL (postgres://USER@HOST/DBNAME)")?;
        // Any case is accepted here, tokio-postgres wants it lower case.
        ensure!(
            scheme.eq_ignore_ascii_case("postgres") || scheme.eq_ignore_ascii_case("postgresql"),
            "--db: unsupported scheme {scheme:?}; use a postgres:// or postgresql:// URL"
        );
        let (base, query) = after.split_once('?').unwrap_or((after, ""));
        let mut split = SplitUrl {
            rest: format!("postgresql://{base}"),
            sslmode: None,
            sslrootcert: None,
        };
        let mut kept = Vec::new();
        for pair in query.split('&').filter(|pair| !pair.is_empty()) {
            let Some((key, value)) = pair.split_once('=') else {
                bail!("--db: a query parameter has no `=` (write key=value)");
            };
            // libpq: a parameter given twice takes its last value.
            match percent_decode(key).as_deref() {
                Ok("sslmode") => split.sslmode = Some(decode_param("sslmode", value)?),
                Ok("sslrootcert") => split.sslrootcert = Some(decode_param("sslrootcert", value)?),
                Ok("connect_timeout") => {
                    // tokio-postgres drops 0, which libpq reads as "wait forever".
                    let seconds = decode_param("connect_timeout", value)?;
                    ensure!(
                        seconds.trim().parse::<i64>().is_ok_and(|s| s >= 1),
                        "--db: connect_timeout must be a whole number of seconds, at least 1 \
                         (petstore never waits without a bound)"
                    );
                    kept.push(pair);
                }
                _ => kept.push(pair),
            }
        }
        if !kept.is_empty() {
            split.rest.push('?');
            split.rest.push_str(&kept.join("&"));
        }
        Ok(split)
    }
}

fn decode_param(name: &str, value: &str) -> anyhow::Result<String> {
    percent_decode(value)
        .map(Cow::into_owned)
        .map_err(|_| anyhow::anyhow!("--db: {name} is not UTF-8 once percent-decoded"))
}

/// `%XX` escapes decoded as libpq does: a `%` not followed by two hex digits stays as it is.
fn percent_decode(text: &str) -> Result<Cow<'_, str>, std::string::FromUtf8Error> {
    if !text.contains('%') {
        return Ok(Cow::Borrowed(text));
    }
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |at: usize| bytes.get(at).and_then(|b| (*b as char).to_digit(16));
        match (bytes[i], hex(i + 1), hex(i + 2)) {
            (b'%', Some(high), Some(low)) => {
                decoded.push((high * 16 + low) as u8);
                i += 3;
            }
            (byte, _, _) => {
                decoded.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8(decoded).map(Cow::Owned)
}

/// The checks tokio-postgres makes only when it connects, made at start-up instead.
fn check_hosts(config: &tokio_postgres::Config) -> anyhow::Result<()> {
    let (hosts, addrs) = (config.get_hosts().len(), config.get_hostaddrs().len());
    ensure!(
        hosts + addrs > 0,
        "--db: the URL names no host; write postgres://USER@HOST[:PORT]/DBNAME"
    );
    ensure!(
        hosts == 0 || addrs == 0 || hosts == addrs,
        "--db: {hosts} hosts but {addrs} hostaddr values; give one hostaddr per host"
    );
    let ports = config.get_ports().len();
    ensure!(
        ports <= 1 || ports == hosts.max(addrs),
        "--db: {ports} ports for {} hosts; give one port, or one per host",
        hosts.max(addrs)
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    // Named as in `connect`'s tests, which reach this module's checks through `parse`.
    fn target(url: &str) -> anyhow::Result<Url> {
        read(url)
    }

    fn message(result: anyhow::Result<Url>) -> String {
        format!("{:#}", result.expect_err("refused"))
    }

    #[test]
    fn the_scheme_may_be_any_case_and_other_schemes_are_refused() {
        let target = target("PostgreSQL://app@db/pets").expect("parses");
        assert_eq!(target.config.get_hosts(), [Host::Tcp("db".into())]);
        assert!(message(self::target("mysql://app@db/pets")).contains("unsupported scheme"));
    }

    #[test]
    fn a_password_in_the_url_is_refused() {
        for url in [
            "postgres://app:s3cret@db/pets",
            "postgres://app@db/pets?password=s3cret",
            "postgres://app:s3cret@db/pets?sslmode=bogus",
        ] {
            let text = message(target(url));
            assert!(
                text.contains("the URL holds a password") && text.contains("--db-password-file"),
                "{text}"
            );
        }
    }

    #[test]
    fn the_url_needs_a_user_and_a_host() {
        assert!(message(target("postgres://db/pets")).contains("names no user"));
        assert!(message(target("postgres://app@/pets")).contains("names no host"));
        assert!(
            message(target("postgres://app@h1,h2/pets?port=5433")).contains("3 ports for 2 hosts")
        );
    }

    #[test]
    fn the_other_parameters_reach_tokio_postgres_and_unknown_ones_are_refused() {
        let split = SplitUrl::from_url(
            "postgres://app@db/pets?sslmode=verify-ca&application_name=x&sslrootcert=%2Fetc%2Fca.pem",
        )
        .expect("splits");
        assert_eq!(
            split,
            SplitUrl {
                rest: "postgresql://app@db/pets?application_name=x".into(),
                sslmode: Some("verify-ca".into()),
                sslrootcert: Some("/etc/ca.pem".into()),
            }
        );
        let text = message(target("postgres://app@db/pets?sslcert=client.pem"));
        assert!(text.contains("unknown option `sslcert`"), "{text}");
    }
}
