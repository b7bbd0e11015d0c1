//! The command line: clap's `Cli` (every flag also read from `PETSTORE_*`), the `new-key`,
//! `keys`, `copy` and `check` subcommands, and the validated `Config` the server starts from.
//! It opens no file and no socket: it only says what the operator asked for. `--db` is classified here (a redb path
//! or a PostgreSQL URL); the URL itself is checked by `store::connect`.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::bail;
use clap::{Parser, Subcommand, ValueEnum};

use crate::ratelimit::{Limit, Rate, RateOrOff};

/// Connections to PostgreSQL the pool keeps at most, when `--db-pool-size` is not given.
pub const DEFAULT_DB_POOL_SIZE: usize = 16;

/// The longest a PostgreSQL statement may run, when `--db-statement-timeout` is not given.
pub const DEFAULT_DB_STATEMENT_TIMEOUT: Duration = Duration::from_secs(5);

/// petstore: the Animal Store API over HTTPS, stored in a redb file or in PostgreSQL.
#[derive(Debug, Parser)]
#[command(
    name = "petstore",
    version,
    about,
    subcommand_negates_reqs = true,
    args_conflicts_with_subcommands = true
)]
pub struct Cli {
    #[command(subcommand)]
    command: Option<Command>,

    /// Socket address to serve HTTPS on, e.g. 0.0.0.0:443 or [::]:8443.
    #[arg(long, env = "PETSTORE_LISTEN", default_value = "127.0.0.1:8443")]
    listen: SocketAddr,

    /// Where the pets are kept: a redb file, created if missing, or a PostgreSQL URL
    /// (libpq syntax) such as
    /// `postgresql://petstore@db1:5432,db2:5432/pets?target_session_attrs=read-write&sslmode=verify-full`;
    /// its password comes from --db-password-file, never from the URL.
    #[arg(
        long,
        env = "PETSTORE_DB",
        default_value = "pets.redb",
        value_name = "PATH|URL"
    )]
    db: OsString,

    /// PostgreSQL only: file holding the database password (a trailing line break is
    /// ignored), e.g. `$CREDENTIALS_DIRECTORY/db-password` with systemd's LoadCredential=.
    #[arg(long, env = "PETSTORE_DB_PASSWORD_FILE", value_name = "PATH")]
    db_password_file: Option<PathBuf>,

    /// PostgreSQL only: PEM file with the CA certificates that sign the server's
    /// certificate; without it, sslmode=verify-ca and verify-full use the system's roots.
    #[arg(long, env = "PETSTORE_DB_CA", value_name = "PATH")]
    db_ca: Option<PathBuf>,

    /// PostgreSQL only: connections the pool keeps at most [default: 16].
    #[arg(long, env = "PETSTORE_DB_POOL_SIZE", value_name = "COUNT", value_parser = clap::value_parser!(u32).range(1..))]
    db_pool_size: Option<u32>,

    /// PostgreSQL only: the longest one statement may run, e.g. `500ms`, `5s`, `1m`
    /// [default: 5s].
    #[arg(
        long,
        env = "PETSTORE_DB_STATEMENT_TIMEOUT",
        value_name = "DURATION",
        value_parser = parse_statement_timeout
    )]
    db_statement_timeout: Option<Duration>,

    /// PEM file with the server certificate, followed by any intermediates (or use
    /// --acme-domain instead).
    #[arg(long, env = "PETSTORE_TLS_CERT", value_name = "PATH")]
    tls_cert: Option<PathBuf>,

    /// PEM file with the certificate's private key (PKCS#8, SEC1 or PKCS#1).
    #[arg(long, env = "PETSTORE_TLS_KEY", value_name = "PATH")]
    tls_key: Option<PathBuf>,

    /// Obtain and renew the certificate over ACME for this DNS name (repeatable; comma-separated
    /// in the variable), answering TLS-ALPN-01 on --listen, which must be reachable on port 443
    /// under these names. Instead of --tls-cert/--tls-key. Agrees to the CA's terms of service.
    #[arg(
        long,
        env = "PETSTORE_ACME_DOMAIN",
        value_name = "NAME",
        value_delimiter = ','
    )]
    acme_domain: Vec<String>,

    /// The ACME CA's directory URL [default: Let's Encrypt production,
    /// https://acme-v02.api.letsencrypt.org/directory].
    #[arg(long, env = "PETSTORE_ACME_DIRECTORY", value_name = "URL")]
    acme_directory: Option<String>,

    /// Contact address given to the ACME CA (expiry and policy notices).
    #[arg(long, env = "PETSTORE_ACME_EMAIL", value_name = "ADDRESS")]
    acme_email: Option<String>,

    /// PEM file with the CA certificates that sign the ACME server's own HTTPS certificate
    /// (a private ACME CA); without it, the system's roots.
    #[arg(long, env = "PETSTORE_ACME_CA_ROOT", value_name = "PATH")]
    acme_ca_root: Option<PathBuf>,

    /// External Account Binding key id, from the CA (with --acme-eab-hmac-key-file).
    #[arg(
        long,
        env = "PETSTORE_ACME_EAB_KID",
        value_name = "KID",
        requires = "acme_eab_hmac_key_file"
    )]
    acme_eab_kid: Option<String>,

    /// File holding the External Account Binding HMAC key, base64url as the CA gives it.
    #[arg(
        long,
        env = "PETSTORE_ACME_EAB_HMAC_KEY_FILE",
        value_name = "PATH",
        requires = "acme_eab_kid"
    )]
    acme_eab_hmac_key_file: Option<PathBuf>,

    /// Directory for the ACME account key and certificates (created if missing, mode 0700)
    /// [default: acme/ in systemd's StateDirectory, else beside a redb --db; required with a
    /// PostgreSQL --db outside systemd].
    #[arg(long, env = "PETSTORE_ACME_STATE_DIR", value_name = "DIR")]
    acme_state_dir: Option<PathBuf>,

    /// API keys file: one `LABEL SHA256HEX [read-only] [expires=TIME]` a line, managed with
    /// `petstore keys`.
    #[arg(long, env = "PETSTORE_API_KEYS", required = true)]
    api_keys: Option<PathBuf>,

    /// Seconds to let requests in flight finish after SIGTERM or SIGINT.
    #[arg(
        long,
        env = "PETSTORE_SHUTDOWN_TIMEOUT",
        default_value_t = 10,
        value_name = "SECONDS"
    )]
    shutdown_timeout: u64,

    /// Connections served at once; further clients wait in the listen backlog until one ends.
    #[arg(long, env = "PETSTORE_MAX_CONNECTIONS", default_value_t = 1024, value_name = "COUNT", value_parser = clap::value_parser!(u32).range(1..))]
    max_connections: u32,

    /// Seconds a client has to finish its TLS handshake.
    #[arg(
        long,
        env = "PETSTORE_HANDSHAKE_TIMEOUT",
        default_value_t = 10,
        value_name = "SECONDS"
    )]
    handshake_timeout: u64,

    /// Seconds a client has to send a whole HTTP/1.1 request head (slowloris).
    #[arg(
        long,
        env = "PETSTORE_HEADER_TIMEOUT",
        default_value_t = 10,
        value_name = "SECONDS"
    )]
    header_timeout: u64,

    /// Seconds a client has to send a whole request body.
    #[arg(
        long,
        env = "PETSTORE_BODY_TIMEOUT",
        default_value_t = 10,
        value_name = "SECONDS"
    )]
    body_timeout: u64,

    /// Seconds after which a connection with nothing in flight and no bytes moving is closed.
    #[arg(
        long,
        env = "PETSTORE_IDLE_TIMEOUT",
        default_value_t = 60,
        value_name = "SECONDS"
    )]
    idle_timeout: u64,

    /// Most memory, in MiB, the database's page cache may hold; bounds the server's memory at
    /// any store size (reads beyond it go to the file and the OS page cache).
    // 6 MiB keeps one server's peak over the whole benchmark (100k preload, every scenario,
    // creates) under issue 12's 24 MiB: 16 MiB gave 30.8, 8 gave 24.9, 6 gave 23.2.
    #[arg(
        long,
        env = "PETSTORE_CACHE_SIZE",
        default_value_t = 6,
        value_name = "MIB"
    )]
    cache_size: usize,

    /// Most queued writes one transaction takes (group commit); 1 commits each write alone,
    /// for measurements. Larger batches trade a little latency for fewer fsyncs.
    #[arg(
        long,
        env = "PETSTORE_MAX_WRITE_BATCH",
        default_value_t = crate::store::DEFAULT_MAX_WRITE_BATCH as u32,
        value_name = "COUNT",
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    max_write_batch: u32,

    /// redb only: let other processes open the live file read-only (`petstore backup` and
    /// `petstore check` beside the server). Each batch is then committed durably by redb
    /// itself, not through the write-ahead log: more CPU and disk writes a create.
    #[arg(
        long,
        env = "PETSTORE_SHARED_READS",
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    shared_reads: bool,

    /// How long a create's Idempotency-Key answers retries, e.g. `90s`, `15m`, `24h`, `7d`.
    #[arg(
        long,
        env = "PETSTORE_IDEMPOTENCY_TTL",
        default_value = "24h",
        value_name = "DURATION",
        value_parser = parse_ttl
    )]
    idempotency_ttl: Duration,

    /// Requests each API key may make, as COUNT/UNIT with s, min, h or d: e.g. `200/s`,
    /// `6000/min`, `100000/h` [default: no limit]. Over it: 429 rate_limited.
    #[arg(long, env = "PETSTORE_RATE_LIMIT", value_name = "RATE")]
    rate_limit: Option<Rate>,

    /// Requests a key may make at once before --rate-limit spaces them out [default: the
    /// RATE's count].
    #[arg(long, env = "PETSTORE_RATE_BURST", value_name = "COUNT", requires = "rate_limit", value_parser = clap::value_parser!(u32).range(1..))]
    rate_burst: Option<u32>,

    /// Requests with an API key that is not valid one client address (IPv4 address, IPv6 /64)
    /// may make, as RATE, or `off`; past it they get 429 instead of 401. Requests without a
    /// key and requests with a valid key never count and are never refused by it.
    #[arg(
        long,
        env = "PETSTORE_AUTH_FAILURE_LIMIT",
        default_value = "20/s",
        value_name = "RATE|off"
    )]
    auth_failure_limit: RateOrOff,

    /// Requests with a key that is not valid an address may make at once before
    /// --auth-failure-limit spaces them out.
    #[arg(long, env = "PETSTORE_AUTH_FAILURE_BURST", default_value_t = 200, value_name = "COUNT", value_parser = clap::value_parser!(u32).range(1..))]
    auth_failure_burst: u32,

    /// Log line format on stderr.
    #[arg(long, env = "PETSTORE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,

    /// Log filter, e.g. `info`, `debug` or `petstore=debug`; when absent, RUST_LOG, else `info`.
    #[arg(long, env = "PETSTORE_LOG_LEVEL", value_name = "FILTER")]
    log_level: Option<String>,

    /// redb only: directory for snapshots of the live file, taken while serving (created if
    /// missing, mode 0700), as `pets-YYYYMMDDTHHMMSSZ.redb`; SIGUSR1 takes one at once.
    #[arg(long, env = "PETSTORE_BACKUP_DIR", value_name = "DIR")]
    backup_dir: Option<PathBuf>,

    /// Snapshots kept in --backup-dir; the oldest beyond these are removed.
    #[arg(long, env = "PETSTORE_BACKUP_KEEP", default_value_t = DEFAULT_BACKUP_KEEP, value_name = "COUNT", requires = "backup_dir", value_parser = clap::value_parser!(u32).range(1..))]
    backup_keep: u32,

    /// Take a snapshot this often, e.g. `1h`, `30m`, `1d` [default: only on SIGUSR1].
    #[arg(long, env = "PETSTORE_BACKUP_EVERY", value_name = "DURATION", requires = "backup_dir", value_parser = parse_ttl)]
    backup_every: Option<Duration>,

    /// Socket address to serve Prometheus metrics on, over plain HTTP at `/metrics`, e.g.
    /// 127.0.0.1:9464; for localhost or a private network only [default: off].
    #[arg(long, env = "PETSTORE_METRICS_LISTEN", value_name = "ADDR")]
    metrics_listen: Option<SocketAddr>,
}

/// Snapshots kept when `--backup-keep` is not given: a week of daily ones.
pub const DEFAULT_BACKUP_KEEP: u32 = 7;

/// How log lines are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// One human-readable line per event.
    Text,
    /// One JSON object per line, for log shippers.
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print a new random API key and the line that admits it in the keys file.
    NewKey {
        /// Name of the key's holder, shown in the logs (A-Z a-z 0-9 . _ -).
        label: String,
    },
    /// Add, list and revoke API keys in the keys file (--api-keys or PETSTORE_API_KEYS, as
    /// the server finds it); a running server takes the change on SIGHUP.
    Keys {
        /// The API keys file to edit, as the server's --api-keys.
        #[arg(long, env = "PETSTORE_API_KEYS", global = true, value_name = "PATH")]
        api_keys: Option<PathBuf>,

        #[command(subcommand)]
        command: KeysCommand,
    },
    /// Copy every pet, the id counter and the live idempotency records from one store into an
    /// empty one (redb or PostgreSQL, either way), then compare both sides.
    Copy {
        /// The store to copy: a redb file or a PostgreSQL URL, as --db takes them.
        #[arg(long, value_name = "PATH|URL")]
        from: OsString,

        /// The store to fill, which must be empty: a redb file (created if missing) or a
        /// PostgreSQL URL.
        #[arg(long, value_name = "PATH|URL")]
        to: OsString,

        /// PostgreSQL only: file holding the database password, for each PostgreSQL side.
        #[arg(long, value_name = "PATH")]
        db_password_file: Option<PathBuf>,

        /// PostgreSQL only: PEM file with the CA certificates to verify each PostgreSQL side
        /// against; without it, the system's roots.
        #[arg(long, value_name = "PATH")]
        db_ca: Option<PathBuf>,
    },
    /// Check a redb file (a snapshot, a stopped server's file, or the live file of a server
    /// started with --shared-reads): every status index entry against its pet and back,
    /// revisions and idempotency records against the ids given out, and, unless a server has
    /// the file open, redb's integrity check; prints the counts per status. Exits 0 only when
    /// everything agrees.
    Check {
        /// The redb file to check. It is never written: a file no server has open is checked
        /// on a copy, a live one from one read transaction beside the server.
        #[arg(long, env = "PETSTORE_DB", value_name = "PATH")]
        db: OsString,
    },
    /// Copy a redb file, the live file of a server started with --shared-reads included, into
    /// a new complete redb file from one read transaction (consistent; the server never waits
    /// for it), as `sqlite3 .backup` does: written to a temp name beside FILE, fsynced,
    /// renamed over FILE, the directory fsynced. For cron or a systemd timer.
    Backup {
        /// The redb file to back up, e.g. the running server's `--db`.
        #[arg(long, env = "PETSTORE_DB", value_name = "PATH")]
        db: OsString,
        /// Where the backup goes; an existing file is replaced only once the new one is whole.
        #[arg(long, value_name = "FILE")]
        to: PathBuf,
    },
}

/// What `petstore keys` does to the keys file.
#[derive(Clone, Debug, PartialEq, Eq, Subcommand)]
pub enum KeysCommand {
    /// Make a new key and admit it: the key is printed once, alone on the first line of
    /// standard output.
    Add {
        /// Name of the key's holder, shown in the logs (A-Z a-z 0-9 . _ -); not yet in the
        /// file.
        label: String,
        /// The key may read but not create, change or delete (403 forbidden).
        #[arg(long)]
        read_only: bool,
        /// When the key stops working: an RFC 3339 date (2027-01-31, from the start of that
        /// day, UTC) or date-time (2027-01-31T12:00:00Z).
        #[arg(long, value_name = "DATE", value_parser = parse_expiry)]
        expires: Option<u64>,
    },
    /// Show each key's label, scope and expiry (never the keys or their hashes).
    List,
    /// Remove every key with this label.
    Revoke {
        /// The label of the key to remove.
        label: String,
    },
}

/// What the operator asked this process to do.
#[derive(Debug)]
pub enum Action {
    Serve(Box<Config>),
    NewKey { label: String },
    Keys { file: PathBuf, command: KeysCommand },
    Copy(CopyConfig),
    Check(PathBuf),
    Backup { from: PathBuf, to: PathBuf },
}

/// What `petstore copy` copies, from where to where.
#[derive(Clone, Debug)]
pub struct CopyConfig {
    pub from: Database,
    pub to: Database,
    /// PostgreSQL only: the file holding the password, for each PostgreSQL side.
    pub db_password_file: Option<PathBuf>,
    /// PostgreSQL only: the PEM file of CA certificates, for each PostgreSQL side.
    pub db_ca: Option<PathBuf>,
}

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
    fn from_flag(flag: &str, value: OsString) -> anyhow::Result<Database> {
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

/// Everything the server needs to start, already checked for presence.
#[derive(Clone, Debug)]
pub struct Config {
    pub listen: SocketAddr,
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
    /// Most writes one transaction takes.
    pub max_write_batch: usize,
    /// Other processes may read the redb file meanwhile (no write-ahead log).
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
}

/// The two ways to a certificate: files the operator renews, or ACME.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TlsSource {
    Files { cert: PathBuf, key: PathBuf },
    Acme(crate::acme::Settings),
}

impl Cli {
    /// `--tls-cert/--tls-key` or `--acme-*`: exactly one way, each complete.
    fn tls_source(&mut self, db: &Database) -> anyhow::Result<TlsSource> {
        let files = self.tls_cert.is_some() || self.tls_key.is_some();
        let acme_only: Vec<&str> = [
            ("--acme-directory", self.acme_directory.is_some()),
            ("--acme-email", self.acme_email.is_some()),
            ("--acme-ca-root", self.acme_ca_root.is_some()),
            ("--acme-eab-kid", self.acme_eab_kid.is_some()),
            ("--acme-state-dir", self.acme_state_dir.is_some()),
        ]
        .into_iter()
        .filter_map(|(flag, given)| given.then_some(flag))
        .collect();
        if self.acme_domain.is_empty() {
            if !acme_only.is_empty() {
                bail!(
                    "{}: only with --acme-domain (the certificate comes from --tls-cert and \
                     --tls-key otherwise)",
                    acme_only.join(", ")
                );
            }
            return match (self.tls_cert.take(), self.tls_key.take()) {
                (Some(cert), Some(key)) => Ok(TlsSource::Files { cert, key }),
                (Some(_), None) => bail!("--tls-cert needs --tls-key, the certificate's key"),
                (None, Some(_)) => bail!("--tls-key needs --tls-cert, the key's certificate"),
                (None, None) => bail!(
                    "no certificate: give --tls-cert and --tls-key, or --acme-domain NAME to \
                     obtain one over ACME"
                ),
            };
        }
        if files {
            bail!(
                "--tls-cert/--tls-key and --acme-domain are two ways to the certificate: give \
                     one of them"
            );
        }
        let mut domains = Vec::new();
        for domain in &self.acme_domain {
            let domain = crate::acme::check_domain(domain)
                .map_err(|e| anyhow::anyhow!("--acme-domain {domain:?}: {e}"))?;
            if !domains.contains(&domain) {
                domains.push(domain);
            }
        }
        let state_dir = match self.acme_state_dir.take() {
            Some(dir) => dir,
            None => match std::env::var_os("STATE_DIRECTORY") {
                // systemd joins several StateDirectory= entries with ':'; the first is ours.
                Some(dirs) if !dirs.is_empty() => {
                    let dirs = dirs.to_string_lossy().into_owned();
                    PathBuf::from(dirs.split(':').next().unwrap_or_default()).join("acme")
                }
                _ => match db {
                    Database::Redb(path) => path
                        .parent()
                        .map_or_else(|| PathBuf::from("acme"), |dir| dir.join("acme")),
                    Database::Postgres(_) => bail!(
                        "--acme-state-dir is required with a PostgreSQL --db outside systemd \
                         (no StateDirectory): the ACME account key and certificates live there"
                    ),
                },
            },
        };
        Ok(TlsSource::Acme(crate::acme::Settings {
            domains,
            directory: self
                .acme_directory
                .take()
                .unwrap_or_else(|| crate::acme::LETS_ENCRYPT.to_owned()),
            email: self.acme_email.take(),
            ca_root: self.acme_ca_root.take(),
            eab: self
                .acme_eab_kid
                .take()
                .zip(self.acme_eab_hmac_key_file.take()),
            state_dir,
        }))
    }

    pub fn into_action(mut self) -> anyhow::Result<Action> {
        match self.command {
            Some(Command::NewKey { label }) => return Ok(Action::NewKey { label }),
            Some(Command::Keys { api_keys, command }) => {
                let file = api_keys.ok_or_else(|| {
                    anyhow::anyhow!(
                        "which keys file? give --api-keys PATH or set PETSTORE_API_KEYS, as for \
                         the server"
                    )
                })?;
                return Ok(Action::Keys { file, command });
            }
            Some(Command::Copy {
                from,
                to,
                db_password_file,
                db_ca,
            }) => {
                let from = Database::from_flag("--from", from)?;
                let to = Database::from_flag("--to", to)?;
                let postgres = [&from, &to]
                    .iter()
                    .any(|db| matches!(db, Database::Postgres(_)));
                if !postgres && (db_password_file.is_some() || db_ca.is_some()) {
                    bail!(
                        "--db-password-file and --db-ca are for PostgreSQL, but --from and --to \
                         are both redb files"
                    );
                }
                return Ok(Action::Copy(CopyConfig {
                    from,
                    to,
                    db_password_file,
                    db_ca,
                }));
            }
            Some(Command::Check { db }) => {
                return match Database::from_flag("--db", db)? {
                    Database::Redb(path) => Ok(Action::Check(path)),
                    Database::Postgres(_) => bail!(
                        "check is for redb files; for PostgreSQL use its own tools \
                         (pg_amcheck for indexes and heap, pg_dump to read every row)"
                    ),
                };
            }
            Some(Command::Backup { db, to }) => {
                return match Database::from_flag("--db", db)? {
                    Database::Redb(from) => Ok(Action::Backup { from, to }),
                    Database::Postgres(_) => bail!(
                        "backup is for redb files; for PostgreSQL use its own tools \
                         (pg_dump, or pg_basebackup with WAL archiving)"
                    ),
                };
            }
            None => {}
        }
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
        Ok(Action::Serve(Box::new(Config {
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
            shutdown_timeout: Duration::from_secs(self.shutdown_timeout),
            max_connections: self.max_connections as usize,
            handshake_timeout: Duration::from_secs(self.handshake_timeout),
            header_timeout: Duration::from_secs(self.header_timeout),
            body_timeout: Duration::from_secs(self.body_timeout),
            idle_timeout: Duration::from_secs(self.idle_timeout),
            cache_bytes: self.cache_size.saturating_mul(1 << 20),
            idempotency_ttl: self.idempotency_ttl,
            max_write_batch: self.max_write_batch as usize,
            shared_reads: self.shared_reads,
            rate_limit,
            auth_failure_limit,
            log_format: self.log_format,
            log_level: self.log_level,
            backup,
            metrics_listen: self.metrics_listen,
        })))
    }
}

/// A count clap has already checked to be at least 1.
fn nonzero(count: Option<u32>) -> Option<std::num::NonZeroU32> {
    count.and_then(std::num::NonZeroU32::new)
}

/// A duration as humantime writes it (`90s`, `15m`, `24h`, `7d`, `1h 30m`), at least a second:
/// records are kept to the second.
fn parse_ttl(text: &str) -> Result<Duration, String> {
    let ttl = humantime::parse_duration(text).map_err(|e| e.to_string())?;
    if ttl < Duration::from_secs(1) {
        return Err("must be at least 1s".into());
    }
    Ok(ttl)
}

/// An expiry as `keys add --expires` takes it: seconds since the epoch.
fn parse_expiry(text: &str) -> Result<u64, String> {
    crate::auth::parse_time(text).map_err(|e| format!("{e:#}"))
}

/// A statement timeout as humantime writes it (`500ms`, `5s`, `1m`), at least a millisecond:
/// PostgreSQL counts it in whole milliseconds and reads 0 as no limit.
fn parse_statement_timeout(text: &str) -> Result<Duration, String> {
    let timeout = humantime::parse_duration(text).map_err(|e| e.to_string())?;
    if timeout < Duration::from_millis(1) {
        return Err("must be at least 1ms".into());
    }
    Ok(timeout)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn the_cli_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn serving_needs_the_three_files_and_defaults_the_rest() {
        let cli = Cli::try_parse_from([
            "petstore",
            "--tls-cert",
            "c.pem",
            "--tls-key",
            "k.pem",
            "--api-keys",
            "keys",
        ]);
        let Ok(Action::Serve(config)) = cli.expect("parses").into_action() else {
            panic!("expected a serve action");
        };
        assert_eq!(config.listen, "127.0.0.1:8443".parse().expect("address"));
        assert_eq!(config.db, Database::Redb(PathBuf::from("pets.redb")));
        assert_eq!(config.shutdown_timeout, Duration::from_secs(10));
        assert_eq!(config.idempotency_ttl, Duration::from_secs(24 * 3600));
        assert_eq!(
            (config.log_format, config.log_level),
            (LogFormat::Text, None)
        );
        assert!(Cli::try_parse_from(["petstore", "--tls-cert", "c.pem"]).is_err());
    }

    #[test]
    fn an_idempotency_ttl_is_a_duration_of_a_second_or_more() {
        assert_eq!(parse_ttl("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_ttl("7d"), Ok(Duration::from_secs(7 * 86400)));
        for bad in ["", "10", "0s", "500ms", "soon"] {
            assert!(parse_ttl(bad).is_err(), "{bad}");
        }
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
    fn check_takes_a_redb_file_and_refuses_a_url() {
        let parse = |args: &[&str]| Cli::try_parse_from(args)?.into_action();
        let action = parse(&["petstore", "check", "--db", "snap.redb"]).expect("parses");
        assert!(matches!(action, Action::Check(path) if path == Path::new("snap.redb")));
        let error = parse(&["petstore", "check", "--db", "postgres://db/pets"]).expect_err("no");
        assert!(error.to_string().contains("pg_amcheck"), "{error}");
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
    fn acme_takes_the_place_of_the_files_with_its_state_beside_the_database() {
        let parse = |args: &[&str]| {
            let args = [
                "petstore",
                "--api-keys",
                "keys",
                "--db",
                "/srv/pets/pets.redb",
            ]
            .iter()
            .chain(args);
            match Cli::try_parse_from(args)?.into_action()? {
                Action::Serve(config) => Ok::<_, anyhow::Error>(config.tls),
                _ => panic!("expected a serve action"),
            }
        };
        let Ok(TlsSource::Acme(settings)) = parse(&[
            "--acme-domain",
            "Pets.Example.com",
            "--acme-domain",
            "api.example.com",
            "--acme-domain",
            "pets.example.com",
        ]) else {
            panic!("ACME settings");
        };
        assert_eq!(settings.domains, ["pets.example.com", "api.example.com"]);
        assert_eq!(settings.directory, crate::acme::LETS_ENCRYPT);
        if std::env::var_os("STATE_DIRECTORY").is_none() {
            assert_eq!(settings.state_dir, PathBuf::from("/srv/pets/acme"));
        }
        assert!(parse(&["--acme-eab-kid", "k", "--acme-domain", "a.example"]).is_err());
        assert!(matches!(
            parse(&["--tls-cert", "c", "--tls-key", "k"]),
            Ok(TlsSource::Files { .. })
        ));
    }

    #[test]
    fn new_key_needs_no_server_flags() {
        let action = Cli::try_parse_from(["petstore", "new-key", "alice"])
            .expect("parses")
            .into_action();
        assert!(matches!(action, Ok(Action::NewKey { label }) if label == "alice"));
    }

    #[test]
    fn keys_finds_the_file_as_the_server_does_and_takes_scope_and_expiry() {
        let keys = |args: &[&str]| {
            let args = ["petstore", "keys"].iter().chain(args);
            Cli::try_parse_from(args)?.into_action()
        };
        let Ok(Action::Keys { file, command }) = keys(&[
            "add",
            "alice",
            "--read-only",
            "--expires",
            "2027-01-01",
            "--api-keys",
            "k",
        ]) else {
            panic!("expected a keys action");
        };
        assert_eq!(file, PathBuf::from("k"));
        assert_eq!(
            command,
            KeysCommand::Add {
                label: "alice".into(),
                read_only: true,
                expires: Some(1_798_761_600)
            }
        );
        assert!(matches!(
            keys(&["--api-keys", "k", "revoke", "bob"]),
            Ok(Action::Keys { command: KeysCommand::Revoke { label }, .. }) if label == "bob"
        ));
        assert!(keys(&["add", "a", "--expires", "soon", "--api-keys", "k"]).is_err());
        if std::env::var_os("PETSTORE_API_KEYS").is_none() {
            let error = keys(&["list"]).expect_err("no file");
            assert!(format!("{error:#}").contains("--api-keys"), "{error:#}");
        }
    }

    fn copy(args: &[&str]) -> anyhow::Result<CopyConfig> {
        let args = ["petstore", "copy"].iter().chain(args);
        match Cli::try_parse_from(args)?.into_action()? {
            Action::Copy(config) => Ok(config),
            _ => panic!("expected a copy action"),
        }
    }

    #[test]
    fn copy_takes_two_stores_as_db_does_and_no_server_flags() {
        let config =
            copy(&["--from", "pets.redb", "--to", "postgres://app@db/pets"]).expect("parses");
        assert_eq!(config.from, Database::Redb(PathBuf::from("pets.redb")));
        assert_eq!(
            config.to,
            Database::Postgres("postgres://app@db/pets".into())
        );
        let config = copy(&[
            "--from",
            "postgresql://app@h1,h2/pets",
            "--to",
            "new.redb",
            "--db-password-file",
            "pw",
            "--db-ca",
            "ca.pem",
        ])
        .expect("parses");
        assert_eq!(config.db_password_file, Some(PathBuf::from("pw")));
        assert_eq!(config.db_ca, Some(PathBuf::from("ca.pem")));
        let error = copy(&["--from", "a.redb", "--to", "mysql://db/pets"]).expect_err("refused");
        assert!(
            format!("{error:#}").starts_with("--to: unsupported scheme \"mysql\""),
            "{error:#}"
        );
        let error = copy(&["--from", "a.redb", "--to", "b.redb", "--db-ca", "ca.pem"])
            .expect_err("refused");
        assert!(
            format!("{error:#}").contains("both redb files"),
            "{error:#}"
        );
        assert!(copy(&["--from", "a.redb"]).is_err(), "--to is required");
        assert!(copy(&["--to", "a.redb"]).is_err(), "--from is required");
    }
}
