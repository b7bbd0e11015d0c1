//! The command line as clap reads it: `Cli` with every flag (each also read from
//! `PETSTORE_*`), the `new-key`, `keys`, `copy`, `check` and `backup` subcommands, and their
//! help texts, from which the man pages and completions in pkg/deb/ are generated
//! (`packaging`). It only parses; what the flags mean together is checked by `config`.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};

use super::values::{parse_expiry, parse_statement_timeout, parse_ttl};
use crate::ratelimit::{Rate, RateOrOff};

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
    pub(super) command: Option<Command>,

    /// Socket address to serve HTTPS on, e.g. 0.0.0.0:443 or [::]:8443.
    #[arg(long, env = "PETSTORE_LISTEN", default_value = "127.0.0.1:8443")]
    pub(super) listen: SocketAddr,

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
    pub(super) db: OsString,

    /// PostgreSQL only: file holding the database password (a trailing line break is
    /// ignored), e.g. `$CREDENTIALS_DIRECTORY/db-password` with systemd's LoadCredential=.
    #[arg(long, env = "PETSTORE_DB_PASSWORD_FILE", value_name = "PATH")]
    pub(super) db_password_file: Option<PathBuf>,

    /// PostgreSQL only: PEM file with the CA certificates that sign the server's
    /// certificate; without it, sslmode=verify-ca and verify-full use the system's roots.
    #[arg(long, env = "PETSTORE_DB_CA", value_name = "PATH")]
    pub(super) db_ca: Option<PathBuf>,

    /// PostgreSQL only: connections the pool keeps at most [default: 16].
    #[arg(long, env = "PETSTORE_DB_POOL_SIZE", value_name = "COUNT", value_parser = clap::value_parser!(u32).range(1..))]
    pub(super) db_pool_size: Option<u32>,

    /// PostgreSQL only: the longest one statement may run, e.g. `500ms`, `5s`, `1m`
    /// [default: 5s].
    #[arg(
        long,
        env = "PETSTORE_DB_STATEMENT_TIMEOUT",
        value_name = "DURATION",
        value_parser = parse_statement_timeout
    )]
    pub(super) db_statement_timeout: Option<Duration>,

    /// PEM file with the server certificate, followed by any intermediates (or use
    /// --acme-domain instead).
    #[arg(long, env = "PETSTORE_TLS_CERT", value_name = "PATH")]
    pub(super) tls_cert: Option<PathBuf>,

    /// PEM file with the certificate's private key (PKCS#8, SEC1 or PKCS#1).
    #[arg(long, env = "PETSTORE_TLS_KEY", value_name = "PATH")]
    pub(super) tls_key: Option<PathBuf>,

    /// Obtain and renew the certificate over ACME for this DNS name (repeatable; comma-separated
    /// in the variable), answering TLS-ALPN-01 on --listen, which must be reachable on port 443
    /// under these names. Instead of --tls-cert/--tls-key. Agrees to the CA's terms of service.
    #[arg(
        long,
        env = "PETSTORE_ACME_DOMAIN",
        value_name = "NAME",
        value_delimiter = ','
    )]
    pub(super) acme_domain: Vec<String>,

    /// The ACME CA's directory URL [default: Let's Encrypt production,
    /// https://acme-v02.api.letsencrypt.org/directory].
    #[arg(long, env = "PETSTORE_ACME_DIRECTORY", value_name = "URL")]
    pub(super) acme_directory: Option<String>,

    /// Contact address given to the ACME CA (expiry and policy notices).
    #[arg(long, env = "PETSTORE_ACME_EMAIL", value_name = "ADDRESS")]
    pub(super) acme_email: Option<String>,

    /// PEM file with the CA certificates that sign the ACME server's own HTTPS certificate
    /// (a private ACME CA); without it, the system's roots.
    #[arg(long, env = "PETSTORE_ACME_CA_ROOT", value_name = "PATH")]
    pub(super) acme_ca_root: Option<PathBuf>,

    /// External Account Binding key id, from the CA (with --acme-eab-hmac-key-file).
    #[arg(
        long,
        env = "PETSTORE_ACME_EAB_KID",
        value_name = "KID",
        requires = "acme_eab_hmac_key_file"
    )]
    pub(super) acme_eab_kid: Option<String>,

    /// File holding the External Account Binding HMAC key, base64url as the CA gives it.
    #[arg(
        long,
        env = "PETSTORE_ACME_EAB_HMAC_KEY_FILE",
        value_name = "PATH",
        requires = "acme_eab_kid"
    )]
    pub(super) acme_eab_hmac_key_file: Option<PathBuf>,

    /// Directory for the ACME account key and certificates (created if missing, mode 0700)
    /// [default: acme/ in systemd's StateDirectory, else beside a redb --db; required with a
    /// PostgreSQL --db outside systemd].
    #[arg(long, env = "PETSTORE_ACME_STATE_DIR", value_name = "DIR")]
    pub(super) acme_state_dir: Option<PathBuf>,

    /// API keys file: one `LABEL SHA256HEX [read-only] [expires=TIME]` a line, managed with
    /// `petstore keys`.
    #[arg(long, env = "PETSTORE_API_KEYS", required = true)]
    pub(super) api_keys: Option<PathBuf>,

    /// Seconds to let requests in flight finish after SIGTERM or SIGINT.
    #[arg(
        long,
        env = "PETSTORE_SHUTDOWN_TIMEOUT",
        default_value_t = 10,
        value_name = "SECONDS"
    )]
    pub(super) shutdown_timeout: u64,

    /// Connections served at once; further clients wait in the listen backlog until one ends.
    #[arg(long, env = "PETSTORE_MAX_CONNECTIONS", default_value_t = 1024, value_name = "COUNT", value_parser = clap::value_parser!(u32).range(1..))]
    pub(super) max_connections: u32,

    /// Seconds a client has to finish its TLS handshake.
    #[arg(
        long,
        env = "PETSTORE_HANDSHAKE_TIMEOUT",
        default_value_t = 10,
        value_name = "SECONDS"
    )]
    pub(super) handshake_timeout: u64,

    /// Seconds a client has to send a whole HTTP/1.1 request head (slowloris).
    #[arg(
        long,
        env = "PETSTORE_HEADER_TIMEOUT",
        default_value_t = 10,
        value_name = "SECONDS"
    )]
    pub(super) header_timeout: u64,

    /// Seconds a client has to send a whole request body.
    #[arg(
        long,
        env = "PETSTORE_BODY_TIMEOUT",
        default_value_t = 10,
        value_name = "SECONDS"
    )]
    pub(super) body_timeout: u64,

    /// Seconds after which a connection with nothing in flight and no bytes moving is closed.
    #[arg(
        long,
        env = "PETSTORE_IDLE_TIMEOUT",
        default_value_t = 60,
        value_name = "SECONDS"
    )]
    pub(super) idle_timeout: u64,

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
    pub(super) cache_size: usize,

    /// Most queued writes one transaction takes (group commit); 1 commits each write alone,
    /// for measurements. Larger batches trade a little latency for fewer fsyncs.
    #[arg(
        long,
        env = "PETSTORE_MAX_WRITE_BATCH",
        default_value_t = crate::store::DEFAULT_MAX_WRITE_BATCH as u32,
        value_name = "COUNT",
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub(super) max_write_batch: u32,

    /// redb only: let other processes open the live file read-only (`petstore backup` and
    /// `petstore check` beside the server). Each batch is then committed durably by redb
    /// itself, not through the write-ahead log: more CPU and disk writes a create.
    #[arg(
        long,
        env = "PETSTORE_SHARED_READS",
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub(super) shared_reads: bool,

    /// How long a create's Idempotency-Key answers retries, e.g. `90s`, `15m`, `24h`, `7d`.
    #[arg(
        long,
        env = "PETSTORE_IDEMPOTENCY_TTL",
        default_value = "24h",
        value_name = "DURATION",
        value_parser = parse_ttl
    )]
    pub(super) idempotency_ttl: Duration,

    /// Requests each API key may make, as COUNT/UNIT with s, min, h or d: e.g. `200/s`,
    /// `6000/min`, `100000/h` [default: no limit]. Over it: 429 rate_limited.
    #[arg(long, env = "PETSTORE_RATE_LIMIT", value_name = "RATE")]
    pub(super) rate_limit: Option<Rate>,

    /// Requests a key may make at once before --rate-limit spaces them out [default: the
    /// RATE's count].
    #[arg(long, env = "PETSTORE_RATE_BURST", value_name = "COUNT", requires = "rate_limit", value_parser = clap::value_parser!(u32).range(1..))]
    pub(super) rate_burst: Option<u32>,

    /// Requests with an API key that is not valid one client address (IPv4 address, IPv6 /64)
    /// may make, as RATE, or `off`; past it they get 429 instead of 401. Requests without a
    /// key and requests with a valid key never count and are never refused by it.
    #[arg(
        long,
        env = "PETSTORE_AUTH_FAILURE_LIMIT",
        default_value = "20/s",
        value_name = "RATE|off"
    )]
    pub(super) auth_failure_limit: RateOrOff,

    /// Requests with a key that is not valid an address may make at once before
    /// --auth-failure-limit spaces them out.
    #[arg(long, env = "PETSTORE_AUTH_FAILURE_BURST", default_value_t = 200, value_name = "COUNT", value_parser = clap::value_parser!(u32).range(1..))]
    pub(super) auth_failure_burst: u32,

    /// Log line format on stderr.
    #[arg(long, env = "PETSTORE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub(super) log_format: LogFormat,

    /// Log filter, e.g. `info`, `debug` or `petstore=debug`; when absent, RUST_LOG, else `info`.
    #[arg(long, env = "PETSTORE_LOG_LEVEL", value_name = "FILTER")]
    pub(super) log_level: Option<String>,

    /// redb only: directory for snapshots of the live file, taken while serving (created if
    /// missing, mode 0700), as `pets-YYYYMMDDTHHMMSSZ.redb`; SIGUSR1 takes one at once.
    #[arg(long, env = "PETSTORE_BACKUP_DIR", value_name = "DIR")]
    pub(super) backup_dir: Option<PathBuf>,

    /// Snapshots kept in --backup-dir; the oldest beyond these are removed.
    #[arg(long, env = "PETSTORE_BACKUP_KEEP", default_value_t = DEFAULT_BACKUP_KEEP, value_name = "COUNT", requires = "backup_dir", value_parser = clap::value_parser!(u32).range(1..))]
    pub(super) backup_keep: u32,

    /// Take a snapshot this often, e.g. `1h`, `30m`, `1d` [default: only on SIGUSR1].
    #[arg(long, env = "PETSTORE_BACKUP_EVERY", value_name = "DURATION", requires = "backup_dir", value_parser = parse_ttl)]
    pub(super) backup_every: Option<Duration>,

    /// Socket address to serve Prometheus metrics on, over plain HTTP at `/metrics`, e.g.
    /// 127.0.0.1:9464; for localhost or a private network only [default: off].
    #[arg(long, env = "PETSTORE_METRICS_LISTEN", value_name = "ADDR")]
    pub(super) metrics_listen: Option<SocketAddr>,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cli_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
