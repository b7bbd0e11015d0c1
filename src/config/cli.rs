//! The command line as clap reads it: `Cli` with every flag (each also read from
//! `PETSTORE_*`) under the help heading an operator looks under, the `new-key`, `keys`,
//! `webhooks`, `copy`, `check` and `backup` subcommands, and their help texts, from which the
//! man pages and completions in pkg/deb/ are generated (`packaging`). It only parses; what the
//! flags mean together is checked by `config`. Value names say what a flag holds: `<FILE>`,
//! `<DIR>`, `<ADDR>`, `<DURATION>`, `<N>`, `<URL>`.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};

use super::values::{
    Hold, ListenAddress, RetrySchedule, parse_expiry, parse_hold, parse_retry_schedule,
    parse_statement_timeout, parse_timeout, parse_ttl,
};
use crate::ratelimit::{Rate, RateOrOff};

// The help headings, in the order `--help` shows them (the order of the fields below).
const LISTENER: &str = "Listener and TLS";
const ACME: &str = "ACME";
const STORE: &str = "Store";
const POSTGRESQL: &str = "PostgreSQL";
const LIMITS: &str = "Limits";
const BACKUPS: &str = "Backups";
const WEBHOOKS: &str = "Webhooks";
const CONSOLE: &str = "Console";

/// A console prefix: `/` and then segments of letters, digits, `-`, `_` and `.`, without a
/// trailing `/`, and not under `/v1` (the API's) or `/healthz`.
fn parse_console_path(text: &str) -> Result<String, String> {
    let segments: Vec<&str> = text
        .strip_prefix('/')
        .map(|rest| rest.split('/').collect())
        .unwrap_or_default();
    let fine = !segments.is_empty()
        && segments.iter().all(|segment| {
            !segment.is_empty()
                && segment != &"."
                && segment != &".."
                && segment
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        });
    if !fine {
        return Err(format!(
            "{text:?}: a path such as /console or /shop/admin (letters, digits, - _ . between \
             slashes, no trailing slash)"
        ));
    }
    if segments[0] == "v1" || segments[0] == "healthz" {
        return Err(format!("{text:?} is the API's: pick another path"));
    }
    Ok(text.to_owned())
}
const METRICS: &str = "Metrics";
const LOGGING: &str = "Logging";

/// petstore: the Animal Store API over HTTPS, stored in a redb file or in PostgreSQL.
#[derive(Debug, Parser)]
#[command(
    name = "petstore",
    version,
    about,
    subcommand_negates_reqs = true,
    args_conflicts_with_subcommands = true,
    after_help = "Reload (the certificate, its key and the API keys file): `systemctl reload \
                  petstore`; without systemd, `kill -HUP <pid>` with the pid of the `listening \
                  on` log line. Snapshot into --backup-dir: `systemctl kill -s USR1 petstore`. \
                  Stop: `systemctl stop petstore` (SIGTERM), after the requests in flight \
                  (--shutdown-timeout)."
)]
pub struct Cli {
    #[command(subcommand)]
    pub(super) command: Option<Command>,

    /// Where to serve HTTPS, as HOST:PORT: an IP address (`0.0.0.0:443`, `[::]:8443`) or a
    /// host name (`localhost:8443`).
    ///
    /// A name is resolved once, at start, and served on every address it resolves to, on
    /// the same port (port 0: one free port, the same on each); an address this host does
    /// not have (`::1` with IPv6 off) is skipped with a warning. A name that does not
    /// resolve stops the start.
    #[arg(
        long,
        env = "PETSTORE_LISTEN",
        default_value = "127.0.0.1:8443",
        value_name = "ADDR",
        help_heading = LISTENER
    )]
    pub(super) listen: ListenAddress,

    /// PEM file with the certificate chain, leaf first, then any intermediates (or
    /// --acme-domain instead); re-read on reload.
    #[arg(long, env = "PETSTORE_TLS_CERT", value_name = "FILE", help_heading = LISTENER)]
    pub(super) tls_cert: Option<PathBuf>,

    /// PEM file with the certificate's private key: PKCS#8, SEC1 or PKCS#1; re-read on reload.
    #[arg(long, env = "PETSTORE_TLS_KEY", value_name = "FILE", help_heading = LISTENER)]
    pub(super) tls_key: Option<PathBuf>,

    /// API keys file: one `LABEL SHA256HEX [read-only] [expires=TIME]` a line, managed with
    /// `petstore keys`; re-read on reload.
    #[arg(
        long,
        env = "PETSTORE_API_KEYS",
        required = true,
        value_name = "FILE",
        help_heading = LISTENER
    )]
    pub(super) api_keys: Option<PathBuf>,

    /// Obtain and renew the certificate over ACME for this DNS name, instead of
    /// --tls-cert/--tls-key (repeatable; comma-separated in the variable).
    ///
    /// The server answers TLS-ALPN-01 on --listen, which must be reachable on port 443 under
    /// these names. Agrees to the CA's terms of service.
    #[arg(
        long,
        env = "PETSTORE_ACME_DOMAIN",
        value_name = "NAME",
        value_delimiter = ',',
        help_heading = ACME
    )]
    pub(super) acme_domain: Vec<String>,

    /// The ACME CA's directory URL [default: Let's Encrypt production,
    /// https://acme-v02.api.letsencrypt.org/directory].
    #[arg(long, env = "PETSTORE_ACME_DIRECTORY", value_name = "URL", help_heading = ACME)]
    pub(super) acme_directory: Option<String>,

    /// Contact address given to the ACME CA (expiry and policy notices).
    #[arg(long, env = "PETSTORE_ACME_EMAIL", value_name = "EMAIL", help_heading = ACME)]
    pub(super) acme_email: Option<String>,

    /// PEM file with the CA certificates that sign the ACME server's own HTTPS certificate
    /// (a private ACME CA); without it, the system's roots.
    #[arg(long, env = "PETSTORE_ACME_CA_ROOT", value_name = "FILE", help_heading = ACME)]
    pub(super) acme_ca_root: Option<PathBuf>,

    /// External Account Binding key id, from the CA (with --acme-eab-hmac-key-file).
    #[arg(
        long,
        env = "PETSTORE_ACME_EAB_KID",
        value_name = "KID",
        requires = "acme_eab_hmac_key_file",
        help_heading = ACME
    )]
    pub(super) acme_eab_kid: Option<String>,

    /// File holding the External Account Binding HMAC key, base64url as the CA gives it.
    #[arg(
        long,
        env = "PETSTORE_ACME_EAB_HMAC_KEY_FILE",
        value_name = "FILE",
        requires = "acme_eab_kid",
        help_heading = ACME
    )]
    pub(super) acme_eab_hmac_key_file: Option<PathBuf>,

    /// Directory for the ACME account key and certificates (created if missing, mode 0700)
    /// [default: acme/ in systemd's StateDirectory, else beside a redb --db; required with a
    /// PostgreSQL --db outside systemd].
    #[arg(long, env = "PETSTORE_ACME_STATE_DIR", value_name = "DIR", help_heading = ACME)]
    pub(super) acme_state_dir: Option<PathBuf>,

    /// Where the pets are kept: a redb file, created if missing, or a PostgreSQL URL.
    ///
    /// The URL is in libpq syntax (several hosts as `@db1,db2/`), such as
    /// `postgresql://petstore@db/pets?sslmode=verify-full`; its password comes from
    /// --db-password-file, never from the URL.
    #[arg(
        long,
        env = "PETSTORE_DB",
        default_value = "pets.redb",
        value_name = "PATH|URL",
        help_heading = STORE
    )]
    pub(super) db: OsString,

    /// Most memory, in MiB, redb's page cache may hold.
    ///
    /// It bounds the server's memory at any store size: reads beyond it go to the file and
    /// the OS page cache.
    // 6 MiB keeps one server's peak over the whole benchmark (100k preload, every scenario,
    // creates) under issue 12's 24 MiB: 16 MiB gave 30.8, 8 gave 24.9, 6 gave 23.2.
    #[arg(
        long,
        env = "PETSTORE_CACHE_SIZE",
        default_value_t = 6,
        value_name = "MIB",
        help_heading = STORE
    )]
    pub(super) cache_size: usize,

    /// Most queued writes one transaction takes (group commit).
    ///
    /// Larger batches trade a little latency for fewer fsyncs; 1 commits each write alone,
    /// for measurements.
    #[arg(
        long,
        env = "PETSTORE_MAX_WRITE_BATCH",
        default_value_t = crate::store::DEFAULT_MAX_WRITE_BATCH as u32,
        value_name = "N",
        value_parser = clap::value_parser!(u32).range(1..),
        help_heading = STORE
    )]
    pub(super) max_write_batch: u32,

    /// redb only: let `petstore backup` and `petstore check` open the live file from another
    /// process.
    ///
    /// The file is then opened in redb's shared mode: each read transaction also takes a
    /// byte-range lock, and each commit looks for the oldest reader in any process.
    #[arg(
        long,
        env = "PETSTORE_SHARED_READS",
        value_parser = clap::builder::BoolishValueParser::new(),
        help_heading = STORE
    )]
    pub(super) shared_reads: bool,

    /// How long a create's Idempotency-Key is remembered and answers retries, e.g. `90s`,
    /// `15m`, `24h`, `7d`.
    #[arg(
        long,
        env = "PETSTORE_IDEMPOTENCY_TTL",
        default_value = "24h",
        value_name = "DURATION",
        value_parser = parse_ttl,
        help_heading = STORE
    )]
    pub(super) idempotency_ttl: Duration,

    /// How long the event feed (`GET /v1/events`) keeps an event, e.g. `12h`, `7d`, `30d`.
    ///
    /// Older events are purged; a client whose cursor is older gets 410 and lists again.
    #[arg(
        long,
        env = "PETSTORE_EVENTS_KEEP",
        default_value = "7d",
        value_name = "DURATION",
        value_parser = parse_ttl,
        help_heading = STORE
    )]
    pub(super) events_keep: Duration,

    /// How long a new order holds its pet before it expires, e.g. `15m`, `2h`, `1d`; `0` for
    /// no expiry.
    ///
    /// An order keeps the hold it was placed with; a change applies to new orders only.
    #[arg(
        long,
        env = "PETSTORE_ORDER_HOLD",
        default_value_t = Hold(Some(crate::store::DEFAULT_ORDER_HOLD)),
        value_name = "DURATION",
        value_parser = parse_hold,
        help_heading = STORE
    )]
    pub(super) order_hold: Hold,

    /// PostgreSQL only: file holding the database password (a trailing line break is
    /// ignored), e.g. `$CREDENTIALS_DIRECTORY/db-password` with systemd's LoadCredential=.
    #[arg(
        long,
        env = "PETSTORE_DB_PASSWORD_FILE",
        value_name = "FILE",
        help_heading = POSTGRESQL
    )]
    pub(super) db_password_file: Option<PathBuf>,

    /// PostgreSQL only: PEM file with the CA certificates that sign the server's
    /// certificate; without it, sslmode=verify-ca and verify-full use the system's roots.
    #[arg(long, env = "PETSTORE_DB_CA", value_name = "FILE", help_heading = POSTGRESQL)]
    pub(super) db_ca: Option<PathBuf>,

    /// PostgreSQL only: connections the pool keeps at most [default: 16].
    #[arg(
        long,
        env = "PETSTORE_DB_POOL_SIZE",
        value_name = "N",
        value_parser = clap::value_parser!(u32).range(1..),
        help_heading = POSTGRESQL
    )]
    pub(super) db_pool_size: Option<u32>,

    /// PostgreSQL only: the longest one statement may run, e.g. `500ms`, `5s`, `1m`
    /// [default: 5s].
    #[arg(
        long,
        env = "PETSTORE_DB_STATEMENT_TIMEOUT",
        value_name = "DURATION",
        value_parser = parse_statement_timeout,
        help_heading = POSTGRESQL
    )]
    pub(super) db_statement_timeout: Option<Duration>,

    /// Connections served at once; beyond it the connection idle longest is closed to make
    /// room.
    ///
    /// When every place is taken, a new connection makes room by closing the connection idle
    /// longest (no request in flight, TLS handshake done or not), as nginx closes reusable
    /// keep-alive connections; a connection with a request in flight never is. Only when
    /// every one has a request in flight does the new one wait until one ends, and clients
    /// after it wait in the listen backlog. The server never refuses a connection itself.
    #[arg(
        long,
        env = "PETSTORE_MAX_CONNECTIONS",
        default_value_t = 1024,
        value_name = "N",
        value_parser = clap::value_parser!(u32).range(1..),
        help_heading = LIMITS
    )]
    pub(super) max_connections: u32,

    /// Event streams (`GET /v1/events` as text/event-stream) open at once; one more gets 503.
    ///
    /// Each stream also holds one of the --max-connections places while it is open.
    #[arg(
        long,
        env = "PETSTORE_MAX_SUBSCRIBERS",
        default_value_t = 1000,
        value_name = "N",
        value_parser = clap::value_parser!(u32).range(1..),
        help_heading = LIMITS
    )]
    pub(super) max_subscribers: u32,

    /// Time a client has to finish its TLS handshake, e.g. `10s`, `1m`.
    ///
    /// A bare number is seconds.
    #[arg(
        long,
        env = "PETSTORE_HANDSHAKE_TIMEOUT",
        default_value = "10",
        value_name = "DURATION",
        value_parser = parse_timeout,
        help_heading = LIMITS
    )]
    pub(super) handshake_timeout: Duration,

    /// Time a client has to send a whole HTTP/1.1 request head (slowloris), e.g. `10s`.
    ///
    /// A bare number is seconds.
    #[arg(
        long,
        env = "PETSTORE_HEADER_TIMEOUT",
        default_value = "10",
        value_name = "DURATION",
        value_parser = parse_timeout,
        help_heading = LIMITS
    )]
    pub(super) header_timeout: Duration,

    /// Time a client has to send a whole request body, e.g. `10s`, `1m`.
    ///
    /// A bare number is seconds.
    #[arg(
        long,
        env = "PETSTORE_BODY_TIMEOUT",
        default_value = "10",
        value_name = "DURATION",
        value_parser = parse_timeout,
        help_heading = LIMITS
    )]
    pub(super) body_timeout: Duration,

    /// A connection with nothing in flight and no bytes moving is closed after this, e.g.
    /// `60s`, `5m`.
    ///
    /// A bare number is seconds.
    #[arg(
        long,
        env = "PETSTORE_IDLE_TIMEOUT",
        default_value = "60",
        value_name = "DURATION",
        value_parser = parse_timeout,
        help_heading = LIMITS
    )]
    pub(super) idle_timeout: Duration,

    /// How long requests in flight may take to finish after SIGTERM or SIGINT, e.g. `10s`,
    /// `1m`.
    ///
    /// A bare number is seconds.
    #[arg(
        long,
        env = "PETSTORE_SHUTDOWN_TIMEOUT",
        default_value = "10",
        value_name = "DURATION",
        value_parser = parse_timeout,
        help_heading = LIMITS
    )]
    pub(super) shutdown_timeout: Duration,

    /// Requests each API key may make, as COUNT/UNIT with s, min, h or d: e.g. `200/s`,
    /// `6000/min`, `100000/h` [default: no limit]. Over it: 429 rate_limited.
    #[arg(long, env = "PETSTORE_RATE_LIMIT", value_name = "RATE", help_heading = LIMITS)]
    pub(super) rate_limit: Option<Rate>,

    /// Requests a key may make at once before --rate-limit spaces them out [default: the
    /// RATE's count].
    #[arg(
        long,
        env = "PETSTORE_RATE_BURST",
        value_name = "N",
        requires = "rate_limit",
        value_parser = clap::value_parser!(u32).range(1..),
        help_heading = LIMITS
    )]
    pub(super) rate_burst: Option<u32>,

    /// Requests with an API key that is not valid one client address may make, as RATE, or
    /// `off`; past it they get 429 instead of 401.
    ///
    /// A client address is an IPv4 address or an IPv6 /64. Requests without a key and
    /// requests with a valid key never count and are never refused by it.
    #[arg(
        long,
        env = "PETSTORE_AUTH_FAILURE_LIMIT",
        default_value = "20/s",
        value_name = "RATE|off",
        help_heading = LIMITS
    )]
    pub(super) auth_failure_limit: RateOrOff,

    /// Requests with a key that is not valid an address may make at once before
    /// --auth-failure-limit spaces them out.
    #[arg(
        long,
        env = "PETSTORE_AUTH_FAILURE_BURST",
        default_value_t = 200,
        value_name = "N",
        value_parser = clap::value_parser!(u32).range(1..),
        help_heading = LIMITS
    )]
    pub(super) auth_failure_burst: u32,

    /// redb only: directory for snapshots of the live file, taken while serving.
    ///
    /// Created if missing (mode 0700); each snapshot is `pets-YYYYMMDDTHHMMSSZ.redb`.
    /// SIGUSR1 (`systemctl kill -s USR1 petstore`) takes one at once.
    #[arg(long, env = "PETSTORE_BACKUP_DIR", value_name = "DIR", help_heading = BACKUPS)]
    pub(super) backup_dir: Option<PathBuf>,

    /// Snapshots kept in --backup-dir; the oldest beyond these are removed.
    #[arg(
        long,
        env = "PETSTORE_BACKUP_KEEP",
        default_value_t = DEFAULT_BACKUP_KEEP,
        value_name = "N",
        requires = "backup_dir",
        value_parser = clap::value_parser!(u32).range(1..),
        help_heading = BACKUPS
    )]
    pub(super) backup_keep: u32,

    /// Take a snapshot this often, e.g. `1h`, `30m`, `1d` [default: only on SIGUSR1].
    #[arg(
        long,
        env = "PETSTORE_BACKUP_EVERY",
        value_name = "DURATION",
        requires = "backup_dir",
        value_parser = parse_ttl,
        help_heading = BACKUPS
    )]
    pub(super) backup_every: Option<Duration>,

    /// Webhook endpoints file: one `ID url=https://… secret=whsec_… [types=…] [label=…]` a
    /// line, managed with `petstore webhooks`; re-read on reload [default: no webhooks].
    ///
    /// Each endpoint is a durable reader of the event feed: every event of its types is
    /// POSTed to its URL, signed as the Standard Webhooks specification says. A missing file
    /// means no endpoints.
    #[arg(long, env = "PETSTORE_WEBHOOKS", value_name = "FILE", help_heading = WEBHOOKS)]
    pub(super) webhooks: Option<PathBuf>,

    /// How long to wait before each retry of a delivery that failed, comma-separated: 1 to
    /// 20 durations, each above zero.
    ///
    /// After the last retry fails, the endpoint is disabled until `petstore webhooks enable`
    /// and a reload.
    #[arg(
        long,
        env = "PETSTORE_WEBHOOK_RETRY_SCHEDULE",
        default_value = "5s,5m,30m,2h,5h,10h,10h",
        value_name = "LIST",
        value_parser = parse_retry_schedule,
        help_heading = WEBHOOKS
    )]
    pub(super) webhook_retry_schedule: RetrySchedule,

    /// Deliver to receivers at loopback, private, link-local and other addresses that are
    /// not public; by default a URL whose host resolves to one is refused.
    ///
    /// For receivers on a private network, and for tests. Without it, a webhook URL cannot
    /// make the server reach into its own network.
    #[arg(
        long,
        env = "PETSTORE_WEBHOOKS_ALLOW_PRIVATE",
        value_parser = clap::builder::BoolishValueParser::new(),
        help_heading = WEBHOOKS
    )]
    pub(super) webhooks_allow_private: bool,

    /// PEM file with the CA certificates receivers' certificates are verified against,
    /// instead of the system's roots.
    #[arg(long, env = "PETSTORE_WEBHOOKS_CA", value_name = "FILE", help_heading = WEBHOOKS)]
    pub(super) webhooks_ca: Option<PathBuf>,

    /// Where the staff console is served on the listener: a path prefix such as `/console` or
    /// `/shop/admin`.
    #[arg(
        long,
        env = "PETSTORE_CONSOLE_PATH",
        default_value = "/console",
        value_name = "PATH",
        value_parser = parse_console_path,
        help_heading = CONSOLE
    )]
    pub(super) console_path: String,

    /// Serve no console: its paths answer 404 and no session is accepted.
    #[arg(
        long,
        env = "PETSTORE_NO_CONSOLE",
        value_parser = clap::builder::BoolishValueParser::new(),
        help_heading = CONSOLE
    )]
    pub(super) no_console: bool,

    /// How long a console session lasts without use, e.g. `30m`, `12h`, `7d`.
    #[arg(
        long,
        env = "PETSTORE_SESSION_IDLE",
        default_value = "12h",
        value_name = "DURATION",
        value_parser = parse_ttl,
        help_heading = CONSOLE
    )]
    pub(super) session_idle: Duration,

    /// Socket address (an IP address and port) to serve Prometheus metrics on, over plain
    /// HTTP at `/metrics`, e.g. 127.0.0.1:9464; for localhost or a private network only
    /// [default: off].
    #[arg(long, env = "PETSTORE_METRICS_LISTEN", value_name = "ADDR", help_heading = METRICS)]
    pub(super) metrics_listen: Option<SocketAddr>,

    /// Log line format on stderr.
    #[arg(
        long,
        env = "PETSTORE_LOG_FORMAT",
        value_enum,
        default_value_t = LogFormat::Text,
        value_name = "FORMAT",
        help_heading = LOGGING
    )]
    pub(super) log_format: LogFormat,

    /// Log filter, e.g. `info`, `debug` or `petstore=debug`; when absent, RUST_LOG, else `info`.
    #[arg(long, env = "PETSTORE_LOG_LEVEL", value_name = "FILTER", help_heading = LOGGING)]
    pub(super) log_level: Option<String>,
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
pub(super) enum Command {
    /// Print a new random API key and the line that admits it in the keys file.
    ///
    /// Nothing is written: append the line to the keys file yourself, or use `petstore keys
    /// add`, which does.
    NewKey {
        /// Name of the key's holder, shown in the logs (A-Z a-z 0-9 . _ -).
        label: String,
    },
    /// Add, list and revoke API keys in the keys file.
    ///
    /// The file is --api-keys or PETSTORE_API_KEYS, as the server finds it. A running server
    /// takes the change on reload: `systemctl reload petstore` (without systemd: `kill -HUP
    /// <pid>`).
    Keys {
        /// The API keys file to edit, as the server's --api-keys.
        #[arg(long, env = "PETSTORE_API_KEYS", global = true, value_name = "FILE")]
        api_keys: Option<PathBuf>,

        #[command(subcommand)]
        command: KeysCommand,
    },
    /// Add, list, remove and enable webhook endpoints, and rotate their secrets, in the
    /// endpoints file.
    ///
    /// The file is --webhooks or PETSTORE_WEBHOOKS, as the server finds it. A running server
    /// takes the change on reload: `systemctl reload petstore` (without systemd: `kill -HUP
    /// <pid>`).
    Webhooks {
        /// The webhooks file to edit, as the server's --webhooks.
        #[arg(long, env = "PETSTORE_WEBHOOKS", global = true, value_name = "FILE")]
        webhooks: Option<PathBuf>,

        #[command(subcommand)]
        command: WebhooksCommand,
    },
    /// Copy one store into an empty one (redb or PostgreSQL, either way).
    ///
    /// Copies every pet, the id counter and the live idempotency records, then compares both
    /// sides.
    Copy {
        /// The store to copy: a redb file or a PostgreSQL URL, as --db takes them.
        #[arg(long, value_name = "PATH|URL")]
        from: OsString,

        /// The store to fill, which must be empty: a redb file (created if missing) or a
        /// PostgreSQL URL.
        #[arg(long, value_name = "PATH|URL")]
        to: OsString,

        /// PostgreSQL only: file holding the database password, for each PostgreSQL side.
        #[arg(long, value_name = "FILE")]
        db_password_file: Option<PathBuf>,

        /// PostgreSQL only: PEM file with the CA certificates to verify each PostgreSQL side
        /// against; without it, the system's roots.
        #[arg(long, value_name = "FILE")]
        db_ca: Option<PathBuf>,
    },
    /// Check a redb file: its indexes, ids and pages; exits 0 only when everything agrees.
    ///
    /// The file may be a snapshot, a stopped server's file, or the live file of a server
    /// started with --shared-reads. Checks every status index entry against its pet and back,
    /// revisions and idempotency records against the ids given out, and, unless a server has
    /// the file open, redb's integrity check; prints the counts per status. A file that is no
    /// petstore store (empty, not redb) is said to be so in one line, and exits 1.
    Check {
        /// The redb file to check. It is never written: a file no server has open is checked
        /// on a copy, a live one from one read transaction beside the server.
        #[arg(long, env = "PETSTORE_DB", value_name = "FILE")]
        db: OsString,
    },
    /// Copy a redb file, a live one included, into a new complete redb file.
    ///
    /// The live file must be a server's started with --shared-reads. The copy is taken from
    /// one read transaction (consistent; the server never waits for it), as `sqlite3 .backup`
    /// does: written to a temp name beside the --to file, fsynced, renamed over it, the
    /// directory fsynced. For cron or a systemd timer.
    Backup {
        /// The redb file to back up, e.g. the running server's `--db`.
        #[arg(long, env = "PETSTORE_DB", value_name = "FILE")]
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

/// What `petstore webhooks` does to the endpoints file.
#[derive(Clone, Debug, PartialEq, Eq, Subcommand)]
pub enum WebhooksCommand {
    /// Add an endpoint: its new signing secret (`whsec_…`) is printed alone on the first line
    /// of standard output, and `id ep_…` on the second. Makes the file (mode 0600) if missing.
    Add {
        /// Where deliveries are POSTed: an absolute https:// URL, without a user or a
        /// fragment.
        url: String,
        /// Deliver only these event types, comma-separated, e.g. `pet.created,order.placed`
        /// [default: every type].
        #[arg(long, value_name = "TYPES")]
        types: Option<String>,
        /// A name for the endpoint in metrics and logs (A-Z a-z 0-9 . _ -).
        #[arg(long, value_name = "LABEL")]
        label: Option<String>,
        /// Start at the oldest event the store keeps, not at the newest.
        #[arg(long)]
        from_start: bool,
    },
    /// Show each endpoint's id, label, URL, types, number of secrets and start (never a
    /// secret), and with --db its delivery state.
    List {
        /// The server's store, a redb file or a PostgreSQL URL as --db takes them: each
        /// endpoint's state (delivering, retrying since, disabled and why) and how many events
        /// it is behind. A running server lets another process read its redb file with
        /// --shared-reads (as for `petstore backup`).
        #[arg(long, env = "PETSTORE_DB", value_name = "PATH|URL")]
        db: Option<OsString>,

        /// PostgreSQL only: file holding the database password, as the server's.
        #[arg(long, env = "PETSTORE_DB_PASSWORD_FILE", value_name = "FILE")]
        db_password_file: Option<PathBuf>,

        /// PostgreSQL only: PEM file with the CA certificates to verify the server against.
        #[arg(long, env = "PETSTORE_DB_CA", value_name = "FILE")]
        db_ca: Option<PathBuf>,
    },
    /// Remove the endpoint with this id: its deliveries stop.
    Remove {
        /// The endpoint's id (ep_…), as `list` shows it.
        id: String,
    },
    /// Resume an endpoint the server disabled, from the event it could not deliver.
    ///
    /// Counts up the endpoint's resume= in the file: a running server resumes it when it
    /// reloads the file.
    Enable {
        /// The endpoint's id (ep_…), as `list` shows it.
        id: String,
    },
    /// Add a new secret (printed alone on the first line of standard output) after the
    /// endpoint's others; deliveries are signed with every one until --finish.
    Rotate {
        /// The endpoint's id (ep_…), as `list` shows it.
        id: String,
        /// Keep only the newest secret, once the receiver verifies with it.
        #[arg(long)]
        finish: bool,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    use clap::CommandFactory;

    #[test]
    fn the_cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    /// What a value name may be: the common ones say what a flag holds, the rest its syntax.
    const VALUE_NAMES: [&str; 20] = [
        "FILE", "DIR", "ADDR", "DURATION", "N", "URL", "PATH|URL", "NAME", "EMAIL", "KID", "MIB",
        "RATE", "RATE|off", "FORMAT", "FILTER", "DATE", "LIST", "TYPES", "LABEL", "PATH",
    ];

    #[test]
    fn every_server_flag_sits_under_a_heading_in_the_manual_order() {
        let headings = [
            LISTENER, ACME, STORE, POSTGRESQL, LIMITS, BACKUPS, WEBHOOKS, CONSOLE, METRICS, LOGGING,
        ];
        let mut command = Cli::command();
        command.build();
        for arg in command.get_arguments() {
            let flag = arg.get_id().as_str();
            if matches!(flag, "help" | "version") {
                continue;
            }
            let heading = arg.get_help_heading();
            assert!(
                heading.is_some_and(|h| headings.contains(&h)),
                "--{flag} is under {heading:?}"
            );
        }
        let help = command.render_long_help().to_string();
        let at: Vec<usize> = headings
            .iter()
            .map(|h| help.find(&format!("\n{h}:\n")).expect(h))
            .collect();
        assert!(at.is_sorted(), "{headings:?} at {at:?}");
    }

    #[test]
    fn every_value_name_says_what_the_flag_holds() {
        let mut command = Cli::command();
        command.build();
        let mut commands = vec![command];
        while let Some(command) = commands.pop() {
            for arg in command.get_arguments().filter(|a| !a.is_positional()) {
                if !arg.get_action().takes_values() {
                    continue;
                }
                let names = arg.get_value_names().unwrap_or_default();
                assert!(
                    names.len() == 1 && VALUE_NAMES.contains(&names[0].as_str()),
                    "{} --{}: {names:?}",
                    command.get_name(),
                    arg.get_id()
                );
            }
            commands.extend(command.get_subcommands().cloned());
        }
    }
}
