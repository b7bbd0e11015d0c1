//! The server's own settings: the validated `Config` the server starts from, built from a
//! `Cli` without a subcommand. Each flag is checked against the others here (the
//! PostgreSQL-only and redb-only flags against `--db`, the rate limits with their bursts,
//! snapshots), and defaults that depend on them are filled in. It opens no file or socket.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::bail;

use super::certificate::TlsSource;
use super::cli::{Cli, LogFormat};
use super::values::{Database, ListenAddress};
use crate::ratelimit::Limit;

/// Connections to PostgreSQL the pool keeps at most, when `--db-pool-size` is not given.
pub const DEFAULT_DB_POOL_SIZE: usize = 16;

/// The longest a PostgreSQL statement may run, when `--db-statement-timeout` is not given.
pub const DEFAULT_DB_STATEMENT_TIMEOUT: Duration = Duration::from_secs(5);

/// Everything the server needs to start, already checked for presence.
#[derive(Clone, Debug)]
pub struct Config {
    /// Where HTTPS is served: an address, or a name to resolve at start.
    pub listen: ListenAddress,
    pub db: Database,
    /// PostgreSQL only: the file holding the password.
    pub db_password_file: Option<PathBuf>,
    /// PostgreSQL only: the PEM file of CA certificates to verify the server against.
    pub db_ca: Option<PathBuf>,
    /// PostgreSQL only: connections the pool keeps at most; at least 1.
    pub db_pool_size: usize,
    /// PostgreSQL only: the longest one statement may run.
    pub db_statement_timeout: Duration,
    /// Where the served certificate comes from.
    pub tls: TlsSource,
    pub api_keys: PathBuf,
    pub shutdown_timeout: Duration,
    pub max_connections: usize,
    pub handshake_timeout: Duration,
    pub header_timeout: Duration,
    pub body_timeout: Duration,
    pub idle_timeout: Duration,
    /// The database page cache's bound, in bytes.
    pub cache_bytes: usize,
    /// How long an idempotency record answers its key.
    pub idempotency_ttl: Duration,
    /// How long the event feed keeps an event.
    pub events_keep: Duration,
    /// How long a new order holds its pet; `None`: until it is completed or cancelled.
    pub order_hold: Option<Duration>,
    /// Event streams open at once.
    pub max_subscribers: usize,
    /// Most writes one transaction takes.
    pub max_write_batch: usize,
    /// Other processes may read the redb file meanwhile (redb's shared mode).
    pub shared_reads: bool,
    /// Requests per API key label; `None`: no limit.
    pub rate_limit: Option<Limit>,
    /// Requests with a key that is not valid per client address; `None`: off.
    pub auth_failure_limit: Option<Limit>,
    pub log_format: LogFormat,
    pub log_level: Option<String>,
    /// Snapshots while serving; redb only.
    pub backup: Option<crate::backup::Settings>,
    /// Where `/metrics` is served; `None`: nowhere.
    pub metrics_listen: Option<SocketAddr>,
    /// The webhook endpoints file; `None`: no webhooks.
    pub webhooks: Option<PathBuf>,
    /// The waits before each retry of a failed delivery: 1 to 20, each above zero.
    pub webhook_retry_schedule: Vec<Duration>,
    /// Deliveries may go to loopback, private and other addresses that are not public.
    pub webhooks_allow_private: bool,
    /// The PEM file of CA certificates receivers are verified against; `None`: the system's
    /// roots.
    pub webhooks_ca: Option<PathBuf>,
    /// Where the console is served (`/console`); `None`: no console (`--no-console`).
    pub console_path: Option<String>,
    /// How long a console session lasts without use.
    pub session_idle: Duration,
}

impl Cli {
    /// The `Config` to serve with, every flag checked against the others.
    pub(super) fn into_config(mut self) -> anyhow::Result<Config> {
        // clap enforces `required` whenever no subcommand is given, so these are present; the
        // errors below only guard against that attribute being dropped.
        let missing = |flag: &str| anyhow::anyhow!("{flag} is required");
        let db = Database::from_flag("--db", std::mem::take(&mut self.db))?;
        let tls = self.tls_source(&db)?;
        if let Database::Redb(path) = &db {
            let given: Vec<&str> = [
                ("--db-password-file", self.db_password_file.is_some()),
                ("--db-ca", self.db_ca.is_some()),
                ("--db-pool-size", self.db_pool_size.is_some()),
                (
                    "--db-statement-timeout",
                    self.db_statement_timeout.is_some(),
                ),
            ]
            .into_iter()
            .filter_map(|(flag, is_given)| is_given.then_some(flag))
            .collect();
            if !given.is_empty() {
                bail!(
                    "{}: PostgreSQL only, but --db is the redb file {} (a PostgreSQL --db is \
                     a postgres:// or postgresql:// URL)",
                    given.join(", "),
                    path.display()
                );
            }
        }
        let backup = self.backup_dir.map(|dir| crate::backup::Settings {
            dir,
            keep: self.backup_keep as usize,
            every: self.backup_every,
        });
        if self.shared_reads && matches!(db, Database::Postgres(_)) {
            bail!("--shared-reads is for the redb store; PostgreSQL serves any number of readers");
        }
        if backup.is_some() && matches!(db, Database::Postgres(_)) {
            bail!(
                "--backup-dir: snapshots are for the redb store; with PostgreSQL, back up with \
                 its own tools: pg_dump (logical), pg_basebackup with WAL archiving \
                 (point-in-time recovery)"
            );
        }
        let rate_limit = self
            .rate_limit
            .map(|rate| Limit::new(rate, nonzero(self.rate_burst).unwrap_or(rate.count)))
            .transpose()
            .map_err(|e| anyhow::anyhow!("--rate-limit, --rate-burst: {e}"))?;
        let auth_failure_limit = self
            .auth_failure_limit
            .0
            .map(|rate| {
                let burst = nonzero(Some(self.auth_failure_burst)).unwrap_or(rate.count);
                Limit::new(rate, burst)
            })
            .transpose()
            .map_err(|e| anyhow::anyhow!("--auth-failure-limit, --auth-failure-burst: {e}"))?;
        Ok(Config {
            listen: self.listen,
            db,
            db_password_file: self.db_password_file,
            db_ca: self.db_ca,
            db_pool_size: self
                .db_pool_size
                .map_or(DEFAULT_DB_POOL_SIZE, |size| size as usize),
            db_statement_timeout: self
                .db_statement_timeout
                .unwrap_or(DEFAULT_DB_STATEMENT_TIMEOUT),
            tls,
            api_keys: self.api_keys.ok_or_else(|| missing("--api-keys"))?,
            shutdown_timeout: self.shutdown_timeout,
            max_connections: self.max_connections as usize,
            handshake_timeout: self.handshake_timeout,
            header_timeout: self.header_timeout,
            body_timeout: self.body_timeout,
            idle_timeout: self.idle_timeout,
            cache_bytes: self.cache_size.saturating_mul(1 << 20),
            idempotency_ttl: self.idempotency_ttl,
            events_keep: self.events_keep,
            order_hold: self.order_hold.0,
            max_subscribers: self.max_subscribers as usize,
            max_write_batch: self.max_write_batch as usize,
            shared_reads: self.shared_reads,
            rate_limit,
            auth_failure_limit,
            log_format: self.log_format,
            log_level: self.log_level,
            backup,
            metrics_listen: self.metrics_listen,
            webhooks: self.webhooks,
            webhook_retry_schedule: self.webhook_retry_schedule.0,
            webhooks_allow_private: self.webhooks_allow_private,
            webhooks_ca: self.webhooks_ca,
            console_path: (!self.no_console).then_some(self.console_path),
            session_idle: self.session_idle,
        })
    }
}

/// A count clap has already checked to be at least 1.
fn nonzero(count: Option<u32>) -> Option<std::num::NonZeroU32> {
    count.and_then(std::num::NonZeroU32::new)
}

#[cfg(test)]
mod tests {
    use super::*;

    use clap::Parser;

    use super::super::cli::DEFAULT_BACKUP_KEEP;
    use super::super::values::parse_statement_timeout;
    use crate::config::Action;
    use crate::ratelimit::Rate;

    #[test]
    fn serving_needs_the_three_files_and_defaults_the_rest() {
        let cli = Cli::try_parse_from(SERVE);
        let Ok(Action::Serve(config)) = cli.expect("parses").into_action() else {
            panic!("expected a serve action");
        };
        assert_eq!(
            config.listen,
            ListenAddress::Socket("127.0.0.1:8443".parse().expect("address"))
        );
        assert_eq!(config.db, Database::Redb(PathBuf::from("pets.redb")));
        assert_eq!(config.shutdown_timeout, Duration::from_secs(10));
        assert_eq!(config.idle_timeout, Duration::from_secs(60));
        assert_eq!(config.idempotency_ttl, Duration::from_secs(24 * 3600));
        assert_eq!(config.order_hold, Some(Duration::from_secs(30 * 60)));
        assert_eq!(
            (config.log_format, config.log_level),
            (LogFormat::Text, None)
        );
        assert!(Cli::try_parse_from(["petstore", "--tls-cert", "c.pem"]).is_err());
    }

    const SERVE: [&str; 7] = [
        "petstore",
        "--tls-cert",
        "c.pem",
        "--tls-key",
        "k.pem",
        "--api-keys",
        "keys",
    ];

    fn serve(flags: &[&str]) -> anyhow::Result<Config> {
        let args = SERVE.iter().chain(flags);
        match Cli::try_parse_from(args)?.into_action()? {
            Action::Serve(config) => Ok(*config),
            _ => panic!("expected a serve action"),
        }
    }

    #[test]
    fn an_order_hold_of_0_means_no_expiry() {
        let hold = |flags: &[&str]| serve(flags).map(|config| config.order_hold).ok();
        assert_eq!(hold(&["--order-hold", "0"]), Some(None));
        assert_eq!(
            hold(&["--order-hold", "2h"]),
            Some(Some(Duration::from_secs(7200)))
        );
        assert_eq!(hold(&["--order-hold", "5"]), None);
    }

    #[test]
    fn backup_flags_are_for_redb_and_need_a_directory() {
        let config = serve(&["--backup-dir", "b"]).expect("parses");
        assert_eq!(
            config.backup,
            Some(crate::backup::Settings {
                dir: PathBuf::from("b"),
                keep: DEFAULT_BACKUP_KEEP as usize,
                every: None,
            })
        );
        let config = serve(&[
            "--backup-dir",
            "b",
            "--backup-keep",
            "2",
            "--backup-every",
            "1h",
        ])
        .expect("parses");
        let backup = config.backup.expect("on");
        assert_eq!(
            (backup.keep, backup.every),
            (2, Some(Duration::from_secs(3600)))
        );
        assert_eq!(serve(&[]).expect("parses").backup, None);
        for flags in [
            &["--backup-keep", "2"][..],
            &["--backup-every", "1h"],
            &["--backup-dir", "b", "--backup-keep", "0"],
        ] {
            assert!(serve(flags).is_err(), "{flags:?}");
        }
        let error =
            serve(&["--db", "postgres://app@db/pets", "--backup-dir", "b"]).expect_err("refused");
        assert!(error.to_string().contains("pg_basebackup"), "{error}");
    }

    #[test]
    fn a_postgres_url_in_any_case_is_postgresql_and_anything_else_a_path() {
        for url in [
            "postgres://app@db/pets",
            "postgresql://app@h1:5432,h2:5432/pets?target_session_attrs=read-write",
            "PostgreSQL://app@db/pets",
            "POSTGRES://app@db/pets",
        ] {
            let config = serve(&["--db", url]).expect("parses");
            assert_eq!(config.db, Database::Postgres(url.to_owned()));
        }
        for path in [
            "pets.redb",
            "/var/lib/petstore/pets.redb",
            "postgres",
            "postgres:db",
        ] {
            let config = serve(&["--db", path]).expect("parses");
            assert_eq!(config.db, Database::Redb(PathBuf::from(path)));
        }
    }

    #[test]
    fn another_scheme_is_refused_with_the_accepted_forms() {
        let error = serve(&["--db", "mysql://app@db/pets"]).expect_err("refused");
        assert_eq!(
            format!("{error:#}"),
            "--db: unsupported scheme \"mysql\"; use a redb file path (e.g. pets.redb) or a \
             postgres:// or postgresql:// URL"
        );
    }

    #[test]
    fn the_postgresql_flags_default_and_are_kept() {
        let url = ["--db", "postgres://app@db/pets"];
        let config = serve(&url).expect("parses");
        assert_eq!(
            (
                config.db_password_file,
                config.db_ca,
                config.db_pool_size,
                config.db_statement_timeout
            ),
            (None, None, 16, Duration::from_secs(5))
        );
        let flags = [
            "--db-password-file",
            "/run/credentials/petstore.service/db-password",
            "--db-ca",
            "ca.pem",
            "--db-pool-size",
            "4",
            "--db-statement-timeout",
            "1500ms",
        ];
        let config = serve(&[&url[..], &flags[..]].concat()).expect("parses");
        assert_eq!(
            config.db_password_file,
            Some(PathBuf::from(
                "/run/credentials/petstore.service/db-password"
            ))
        );
        assert_eq!(config.db_ca, Some(PathBuf::from("ca.pem")));
        assert_eq!(config.db_pool_size, 4);
        assert_eq!(config.db_statement_timeout, Duration::from_millis(1500));
    }

    #[test]
    fn a_pool_size_is_at_least_one_and_a_statement_timeout_at_least_a_millisecond() {
        let url = ["--db", "postgres://app@db/pets"];
        for bad in [
            ["--db-pool-size", "0"],
            ["--db-pool-size", "many"],
            ["--db-statement-timeout", "0s"],
            ["--db-statement-timeout", "5"],
        ] {
            assert!(serve(&[&url[..], &bad[..]].concat()).is_err(), "{bad:?}");
        }
        assert_eq!(parse_statement_timeout("1ms"), Ok(Duration::from_millis(1)));
        assert!(parse_statement_timeout("500us").is_err());
    }

    #[test]
    fn shared_reads_is_off_by_default_and_for_redb_only() {
        assert!(!serve(&[]).expect("parses").shared_reads);
        assert!(serve(&["--shared-reads"]).expect("parses").shared_reads);
        let error =
            serve(&["--db", "postgres://app@db/pets", "--shared-reads"]).expect_err("refused");
        assert!(
            format!("{error:#}").starts_with("--shared-reads is for the redb store"),
            "{error:#}"
        );
    }

    #[test]
    fn the_postgresql_flags_are_refused_with_a_redb_file() {
        let error = serve(&["--db-pool-size", "4", "--db-ca", "ca.pem"]).expect_err("refused");
        assert_eq!(
            format!("{error:#}"),
            "--db-ca, --db-pool-size: PostgreSQL only, but --db is the redb file pets.redb \
             (a PostgreSQL --db is a postgres:// or postgresql:// URL)"
        );
        for flag in [
            ["--db-password-file", "pw"],
            ["--db-statement-timeout", "5s"],
        ] {
            let error = serve(&flag).expect_err("refused");
            assert!(format!("{error:#}").starts_with(flag[0]), "{error:#}");
        }
    }

    #[test]
    fn rate_limits_default_to_none_per_key_and_20_a_second_per_address() {
        let rate = |text: &str| text.parse::<Rate>().expect("a rate");
        let burst = |count| std::num::NonZeroU32::new(count).expect("nonzero");
        let config = serve(&[]).expect("parses");
        assert_eq!(config.rate_limit, None);
        assert_eq!(
            config.auth_failure_limit,
            Some(Limit::new(rate("20/s"), burst(200)).expect("a limit"))
        );
        let config =
            serve(&["--rate-limit", "6000/min", "--auth-failure-limit", "off"]).expect("parses");
        assert_eq!(
            config.rate_limit,
            Some(Limit::new(rate("6000/min"), burst(6000)).expect("a limit"))
        );
        assert_eq!(config.auth_failure_limit, None);
        let config = serve(&[
            "--rate-limit",
            "200/s",
            "--rate-burst",
            "10",
            "--auth-failure-limit",
            "5/min",
            "--auth-failure-burst",
            "7",
        ])
        .expect("parses");
        assert_eq!(
            config.rate_limit,
            Some(Limit::new(rate("200/s"), burst(10)).expect("a limit"))
        );
        assert_eq!(
            config.auth_failure_limit,
            Some(Limit::new(rate("5/min"), burst(7)).expect("a limit"))
        );
        for bad in [
            &["--rate-burst", "10"][..],
            &["--rate-limit", "200"],
            &["--rate-limit", "0/s"],
            &["--rate-limit", "200/s", "--rate-burst", "0"],
            &["--rate-limit", "1/d", "--rate-burst", "1000"],
            &["--auth-failure-limit", "none"],
            &["--auth-failure-burst", "0"],
        ] {
            assert!(serve(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_webhook_flags_default_to_none_and_the_standard_schedule() {
        let config = serve(&[]).expect("parses");
        assert_eq!((config.webhooks, config.webhooks_ca), (None, None));
        assert!(!config.webhooks_allow_private);
        let hours = |h: u64| Duration::from_secs(h * 3600);
        assert_eq!(
            config.webhook_retry_schedule,
            [
                Duration::from_secs(5),
                Duration::from_secs(300),
                Duration::from_secs(1800),
                hours(2),
                hours(5),
                hours(10),
                hours(10)
            ]
        );
        let config = serve(&[
            "--webhooks",
            "/etc/petstore/webhooks",
            "--webhook-retry-schedule",
            "1s,1m",
            "--webhooks-allow-private",
            "--webhooks-ca",
            "ca.pem",
        ])
        .expect("parses");
        assert_eq!(
            config.webhooks,
            Some(PathBuf::from("/etc/petstore/webhooks"))
        );
        assert_eq!(
            config.webhook_retry_schedule,
            [Duration::from_secs(1), Duration::from_secs(60)]
        );
        assert!(config.webhooks_allow_private);
        assert_eq!(config.webhooks_ca, Some(PathBuf::from("ca.pem")));
        let error = serve(&["--webhook-retry-schedule", "5s,0s"]).expect_err("refused");
        assert!(
            error.to_string().contains("each wait must be above zero"),
            "{error}"
        );
    }
}
