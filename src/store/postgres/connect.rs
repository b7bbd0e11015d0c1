//! How to reach PostgreSQL: `--db` and the other `--db-*` flags checked into the `PgTarget`
//! the backend connects with: the URL as `url` reads it, TLS as `tls` sets it up, bounds where
//! libpq has none (connect timeout, keepalives) and the password from its file. It reads files
//! but opens no socket. Invariants: the password never comes from the command line and never
//! appears in an error; `sslmode` means what it means to libpq.

mod tls;
mod url;

use std::fmt;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail, ensure};
use tokio_postgres::config::Host;
use tokio_postgres_rustls::MakeRustlsConnect;

use tls::{client_config, plan_tls};
pub use url::one_per_host;

/// How long one connection attempt to one host may take when the URL sets no
/// `connect_timeout`.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Keepalive and send bounds when the URL sets none (libpq's `keepalives_idle`,
/// `keepalives_interval`, `keepalives_count`, `tcp_user_timeout`): a peer that vanished
/// without closing (a host gone, a cable pulled) is noticed on an idle pooled connection within
/// about 15 s, and on one with data unacknowledged within 10 s, rather than after the kernel's
/// two hours. They are the backstop: every operation has its own deadline anyway.
pub const DEFAULT_KEEPALIVES_IDLE: Duration = Duration::from_secs(9);
pub const DEFAULT_KEEPALIVES_INTERVAL: Duration = Duration::from_secs(2);
pub const DEFAULT_KEEPALIVES_RETRIES: u32 = 3;
pub const DEFAULT_TCP_USER_TIMEOUT: Duration = Duration::from_secs(10);
/// tokio-postgres's own `keepalives_idle`, which tells that the URL set none.
const TOKIO_POSTGRES_KEEPALIVES_IDLE: Duration = Duration::from_secs(2 * 60 * 60);

/// Where and how to reach PostgreSQL, checked.
pub struct PgTarget {
    /// Hosts, ports, user, database, session attributes and the password from its file. Its
    /// TLS mode is only `Disable`, `Prefer` or `Require`: `tls` decides what is verified.
    config: tokio_postgres::Config,
    /// The rustls connector (ring), verifying the server as the URL's `sslmode` asks.
    tls: MakeRustlsConnect,
    /// Connections the pool keeps at most; at least 1.
    pool_size: usize,
    /// The longest one statement may run; more than zero.
    statement_timeout: Duration,
    /// The bound on one connection attempt to one host, also set in `config`.
    connect_timeout: Duration,
}

impl PgTarget {
    /// What tokio-postgres connects with: hosts, user, database, TLS mode, password, bounds.
    pub(super) fn config(&self) -> &tokio_postgres::Config {
        &self.config
    }

    /// The TLS connector for every connection, checking the server as `sslmode` asks.
    pub(super) fn tls(&self) -> &MakeRustlsConnect {
        &self.tls
    }

    /// Connections the pool keeps at most; at least 1.
    pub(super) fn pool_size(&self) -> usize {
        self.pool_size
    }

    /// The longest one statement may run; more than zero.
    pub(super) fn statement_timeout(&self) -> Duration {
        self.statement_timeout
    }

    /// The bound on one connection attempt to one host.
    pub(super) fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }
}

impl fmt::Debug for PgTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // tokio-postgres's Debug writes the password as redacted.
        f.debug_struct("PgTarget")
            .field("config", &self.config)
            .field("pool_size", &self.pool_size)
            .field("statement_timeout", &self.statement_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .finish_non_exhaustive()
    }
}

/// Checks `--db` (a `postgres://` or `postgresql://` URL) with the other `--db-*` flags and
/// reads the password and CA files they name.
///
/// # Errors
/// Each names the flag or the URL part at fault, never the password: a password in the URL,
/// an unreadable or empty password file, an unknown `sslmode`, an unreadable CA file, no
/// system roots for `verify-ca`/`verify-full`, or what tokio-postgres refuses in the URL.
pub fn parse(
    url: &str,
    password_file: Option<&Path>,
    ca_file: Option<&Path>,
    pool_size: usize,
    statement_timeout: Duration,
) -> anyhow::Result<PgTarget> {
    ensure!(pool_size >= 1, "--db-pool-size must be at least 1");
    ensure!(
        !statement_timeout.is_zero(),
        "--db-statement-timeout must be more than 0"
    );
    let url::Url {
        mut config,
        sslmode,
        sslrootcert,
    } = url::read(url)?;
    let (mode, check) = plan_tls(sslmode.as_deref(), sslrootcert.as_deref(), ca_file)?;
    if mode.is_encrypted_only() {
        // libpq ignores sslmode for a socket directory; tokio-postgres would ask the server
        // for TLS there and fail at every connection instead.
        let socket = config.get_hosts().iter().find_map(|host| match host {
            Host::Tcp(_) => None,
            Host::Unix(dir) => Some(dir),
        });
        if let Some(dir) = socket {
            bail!(
                "--db: sslmode={} cannot reach the socket directory {}: PostgreSQL has no TLS \
                 over Unix sockets; use sslmode=prefer or disable",
                mode.as_str(),
                dir.display()
            );
        }
    }
    config.ssl_mode(mode.to_tokio_postgres());

    let connect_timeout = match config.get_connect_timeout() {
        Some(timeout) => *timeout,
        None => {
            config.connect_timeout(DEFAULT_CONNECT_TIMEOUT);
            DEFAULT_CONNECT_TIMEOUT
        }
    };
    if config.get_keepalives_idle() == TOKIO_POSTGRES_KEEPALIVES_IDLE {
        config.keepalives_idle(DEFAULT_KEEPALIVES_IDLE);
    }
    if config.get_keepalives_interval().is_none() {
        config.keepalives_interval(DEFAULT_KEEPALIVES_INTERVAL);
    }
    if config.get_keepalives_retries().is_none() {
        config.keepalives_retries(DEFAULT_KEEPALIVES_RETRIES);
    }
    if config.get_tcp_user_timeout().is_none() {
        config.tcp_user_timeout(DEFAULT_TCP_USER_TIMEOUT);
    }
    if config.get_application_name().is_none() {
        config.application_name("petstore");
    }
    if let Some(path) = password_file {
        config.password(read_password(path)?);
    }

    Ok(PgTarget {
        config,
        tls: MakeRustlsConnect::new(client_config(&check)?),
        pool_size,
        statement_timeout,
        connect_timeout,
    })
}

/// The password file's content without its trailing line break.
fn read_password(path: &Path) -> anyhow::Result<Vec<u8>> {
    let mut password = std::fs::read(path)
        .with_context(|| format!("--db-password-file {}: reading", path.display()))?;
    while password.last().is_some_and(|b| matches!(b, b'\n' | b'\r')) {
        password.pop();
    }
    ensure!(
        !password.is_empty(),
        "--db-password-file {}: empty; it must hold the password",
        path.display()
    );
    Ok(password)
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::path::PathBuf;

    use tls::tests::cert;
    use tls::{Check, Roots, SSL_MODES};
    use tokio_postgres::config::SslMode;

    fn target(url: &str) -> anyhow::Result<PgTarget> {
        parse(url, None, None, 16, Duration::from_secs(5))
    }

    fn message(result: anyhow::Result<PgTarget>) -> String {
        format!("{:#}", result.expect_err("refused"))
    }

    fn dev_ca() -> Roots {
        Roots::File {
            path: cert("dev-ca.pem"),
            named_by: "--db-ca",
        }
    }

    #[test]
    fn each_sslmode_maps_to_its_tls_mode_and_check() {
        use Check::{Chain, ChainAndName, Nothing};
        for (sslmode, tls_mode, without_ca, with_ca) in [
            (Some("disable"), SslMode::Disable, Nothing, Nothing),
            (Some("prefer"), SslMode::Prefer, Nothing, Chain(dev_ca())),
            (None, SslMode::Prefer, Nothing, Chain(dev_ca())),
            (Some("require"), SslMode::Require, Nothing, Chain(dev_ca())),
            (
                Some("verify-ca"),
                SslMode::Require,
                Chain(Roots::System),
                Chain(dev_ca()),
            ),
            (
                Some("verify-full"),
                SslMode::Require,
                ChainAndName(Roots::System),
                ChainAndName(dev_ca()),
            ),
        ] {
            let (mode, check) = plan_tls(sslmode, None, None).expect("plans");
            assert_eq!(
                (mode.to_tokio_postgres(), check),
                (tls_mode, without_ca),
                "{sslmode:?}"
            );
            let (_, check) = plan_tls(sslmode, None, Some(&cert("dev-ca.pem"))).expect("plans");
            assert_eq!(check, with_ca, "{sslmode:?} with --db-ca");

            let query = sslmode.map_or(String::new(), |m| format!("?sslmode={m}"));
            let url = format!("postgres://app@db.example/pets{query}");
            let ca = cert("dev-ca.pem");
            let target = parse(&url, None, Some(&ca), 16, Duration::from_secs(5))
                .unwrap_or_else(|e| panic!("{url}: {e:#}"));
            assert_eq!(target.config.get_ssl_mode(), tls_mode, "{url}");
        }
    }

    #[test]
    fn sslrootcert_is_a_ca_file_and_conflicts_with_the_flag() {
        let path = cert("dev-ca.pem");
        let (_, check) =
            plan_tls(Some("verify-full"), path.to_str(), None).expect("sslrootcert plans");
        assert_eq!(
            check,
            Check::ChainAndName(Roots::File {
                path: path.clone(),
                named_by: "--db: sslrootcert"
            })
        );
        let url = format!(
            "postgres://app@db.example/pets?sslrootcert={}&sslmode=verify-full",
            path.display()
        );
        let refused = parse(&url, None, Some(&path), 16, Duration::from_secs(5));
        assert!(message(refused).contains("--db-ca and the URL's sslrootcert"));
    }

    #[test]
    fn an_unknown_sslmode_is_refused_with_the_accepted_ones() {
        for bad in ["allow", "VERIFY-FULL", "verify_full", ""] {
            let text = message(target(&format!("postgres://app@db/pets?sslmode={bad}")));
            assert!(
                text.contains(&format!("sslmode {bad:?} is not one of {SSL_MODES}")),
                "{text}"
            );
        }
    }

    #[test]
    fn several_hosts_keep_their_ports_and_read_write_is_kept() {
        let target = target(
            "postgresql://app@h1:5432,h2:5433/pets?target_session_attrs=read-write&sslmode=require",
        )
        .expect("parses");
        let hosts: Vec<_> = target.config.get_hosts().to_vec();
        assert_eq!(
            hosts,
            [Host::Tcp("h1".into()), Host::Tcp("h2".into())],
            "{:?}",
            target.config
        );
        assert_eq!(target.config.get_ports(), [5432, 5433]);
        assert_eq!(
            target.config.get_target_session_attrs(),
            tokio_postgres::config::TargetSessionAttrs::ReadWrite
        );
        assert_eq!(target.config.get_user(), Some("app"));
        assert_eq!(target.config.get_dbname(), Some("pets"));
        assert_eq!(target.config.get_ssl_mode(), SslMode::Require);
    }

    #[test]
    fn each_host_gets_its_own_configuration_with_everything_else_kept() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("password");
        std::fs::write(&path, "s3cret\n").expect("write");
        let url = "postgresql://app@h1:5432,h2:5433/pets?target_session_attrs=read-write\
                   &sslmode=require&connect_timeout=3&keepalives_idle=30&application_name=x\
                   &options=-c%20search_path%3Dpets";
        let target = parse(url, Some(&path), None, 16, Duration::from_secs(5)).expect("parses");
        let hosts = one_per_host(&target.config);
        assert_eq!(hosts.len(), 2);
        for (one, (host, port)) in hosts.iter().zip([("h1", 5432), ("h2", 5433)]) {
            assert_eq!(one.get_hosts(), [Host::Tcp(host.into())]);
            assert_eq!(one.get_ports(), [port]);
            // Everything but the host list, as tokio-postgres shows it.
            let rest = |config: &tokio_postgres::Config| {
                let text = format!("{config:?}");
                let (_, after) = text.split_once("connect_timeout").expect("field");
                let before = text.split_once("host:").expect("field").0.to_owned();
                before + after
            };
            assert_eq!(rest(one), rest(&target.config));
            assert_eq!(one.get_password(), Some(&b"s3cret"[..]));
            assert_eq!(one.get_keepalives_idle(), Duration::from_secs(30));
        }
    }

    #[test]
    fn keepalives_and_the_send_bound_have_defaults_the_url_may_override() {
        let default = target("postgres://app@db/pets").expect("parses");
        assert!(default.config.get_keepalives());
        assert_eq!(
            (
                default.config.get_keepalives_idle(),
                default.config.get_keepalives_interval(),
                default.config.get_keepalives_retries(),
                default.config.get_tcp_user_timeout(),
            ),
            (
                DEFAULT_KEEPALIVES_IDLE,
                Some(DEFAULT_KEEPALIVES_INTERVAL),
                Some(DEFAULT_KEEPALIVES_RETRIES),
                Some(&DEFAULT_TCP_USER_TIMEOUT)
            )
        );
        let set = target(
            "postgres://app@db/pets?keepalives_idle=60&keepalives_interval=5\
             &keepalives_retries=9&tcp_user_timeout=20",
        )
        .expect("parses");
        assert_eq!(
            (
                set.config.get_keepalives_idle(),
                set.config.get_keepalives_interval(),
                set.config.get_keepalives_retries(),
                set.config.get_tcp_user_timeout(),
            ),
            (
                Duration::from_secs(60),
                Some(Duration::from_secs(5)),
                Some(9),
                Some(&Duration::from_secs(20))
            )
        );
    }

    #[test]
    fn the_connect_timeout_defaults_to_5s_and_is_never_unbounded() {
        let default = target("postgres://app@db/pets").expect("parses");
        assert_eq!(default.connect_timeout, DEFAULT_CONNECT_TIMEOUT);
        assert_eq!(
            default.config.get_connect_timeout(),
            Some(&DEFAULT_CONNECT_TIMEOUT)
        );
        let set = target("postgres://app@db/pets?connect_timeout=12").expect("parses");
        assert_eq!(set.connect_timeout, Duration::from_secs(12));
        assert_eq!(
            set.config.get_connect_timeout(),
            Some(&Duration::from_secs(12))
        );
        for bad in ["0", "-1", "soon"] {
            let text = message(target(&format!(
                "postgres://app@db/pets?connect_timeout={bad}"
            )));
            assert!(text.contains("connect_timeout"), "{text}");
        }
    }

    #[test]
    fn the_password_file_is_read_and_its_line_break_trimmed() {
        let dir = tempfile::tempdir().expect("temp dir");
        for (content, password) in [
            ("s3cret\n", "s3cret"),
            ("s3cret\r\n", "s3cret"),
            ("s3 cret", "s3 cret"),
        ] {
            let path = dir.path().join("password");
            std::fs::write(&path, content).expect("write");
            let target = parse(
                "postgres://app@db/pets",
                Some(&path),
                None,
                16,
                Duration::from_secs(5),
            )
            .expect("parses");
            assert_eq!(target.config.get_password(), Some(password.as_bytes()));
            assert!(!format!("{target:?}").contains(password), "{target:?}");
        }
    }

    #[test]
    fn an_empty_or_missing_password_file_is_refused_by_name() {
        let dir = tempfile::tempdir().expect("temp dir");
        let empty = dir.path().join("empty");
        std::fs::write(&empty, "\n").expect("write");
        for path in [empty, dir.path().join("missing")] {
            let text = message(parse(
                "postgres://app@db/pets",
                Some(&path),
                None,
                16,
                Duration::from_secs(5),
            ));
            assert!(
                text.contains("--db-password-file") && text.contains(&*path.to_string_lossy()),
                "{text}"
            );
        }
    }

    #[test]
    fn no_error_shows_the_password() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("password");
        std::fs::write(&path, "s3cret\n").expect("write");
        let ca = cert("dev-ca.pem");
        let keys = cert("dev-keys.txt");
        for (url, ca) in [
            ("postgres://app:s3cret@db/pets", None),
            ("postgres://app:s3cret@db:port/pets", None),
            ("postgres://app@db/pets?password=s3cret&bogus=1", None),
            ("postgres://app:s3cret@db/pets?sslmode=bogus", None),
            ("postgres://app@db/pets?sslmode=bogus", None),
            ("postgres://app@db:nope/pets", None),
            ("postgres://app@db/pets?unknown=1", None),
            ("postgres://app@db/pets?sslrootcert=/nowhere", Some(&ca)),
            ("postgres://app@db/pets?sslmode=verify-ca", Some(&keys)),
            ("postgres://db/pets", None),
        ] {
            let result = parse(
                url,
                Some(&path),
                ca.map(PathBuf::as_path),
                16,
                Duration::from_secs(5),
            );
            let text = message(result);
            assert!(!text.contains("s3cret"), "{url}: {text}");
        }
    }

    #[test]
    fn an_encrypted_only_mode_refuses_a_socket_directory() {
        let socket = "postgres://app@%2Fvar%2Frun%2Fpostgresql/pets";
        assert!(target(socket).is_ok());
        let text = message(target(&format!("{socket}?sslmode=require")));
        assert!(text.contains("no TLS over Unix sockets"), "{text}");
    }

    #[test]
    fn the_pool_size_and_statement_timeout_are_checked_and_kept() {
        let target = parse(
            "postgres://app@db/pets",
            None,
            None,
            3,
            Duration::from_millis(1500),
        )
        .expect("parses");
        assert_eq!(
            (target.pool_size, target.statement_timeout),
            (3, Duration::from_millis(1500))
        );
        assert!(
            parse(
                "postgres://app@db/pets",
                None,
                None,
                0,
                Duration::from_secs(1)
            )
            .is_err()
        );
        assert!(parse("postgres://app@db/pets", None, None, 1, Duration::ZERO).is_err());
    }
}
