//! The command line: clap's `Cli` (every flag also read from `PETSTORE_*`), the `new-key`
//! subcommand, and the validated `Config` the server starts from. It opens no file and no
//! socket: it only says what the operator asked for.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};

/// petstore: the Animal Store API over HTTPS, stored in one redb file.
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

    /// The redb database file; created if missing.
    #[arg(long, env = "PETSTORE_DB", default_value = "pets.redb")]
    db: PathBuf,

    /// PEM file with the server certificate, followed by any intermediates.
    #[arg(long, env = "PETSTORE_TLS_CERT", required = true)]
    tls_cert: Option<PathBuf>,

    /// PEM file with the certificate's private key (PKCS#8, SEC1 or PKCS#1).
    #[arg(long, env = "PETSTORE_TLS_KEY", required = true)]
    tls_key: Option<PathBuf>,

    /// API keys file: one `LABEL SHA256HEX` a line, made with `petstore new-key LABEL`.
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
    #[arg(
        long,
        env = "PETSTORE_CACHE_SIZE",
        default_value_t = 16,
        value_name = "MIB"
    )]
    cache_size: usize,

    /// How long a create's Idempotency-Key answers retries, e.g. `90s`, `15m`, `24h`, `7d`.
    #[arg(
        long,
        env = "PETSTORE_IDEMPOTENCY_TTL",
        default_value = "24h",
        value_name = "DURATION",
        value_parser = parse_ttl
    )]
    idempotency_ttl: Duration,

    /// Log line format on stderr.
    #[arg(long, env = "PETSTORE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,

    /// Log filter, e.g. `info`, `debug` or `petstore=debug`; when absent, RUST_LOG, else `info`.
    #[arg(long, env = "PETSTORE_LOG_LEVEL", value_name = "FILTER")]
    log_level: Option<String>,
}

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
}

/// What the operator asked this process to do.
#[derive(Debug)]
pub enum Action {
    Serve(Box<Config>),
    NewKey { label: String },
}

/// Everything the server needs to start, already checked for presence.
#[derive(Clone, Debug)]
pub struct Config {
    pub listen: SocketAddr,
    pub db: PathBuf,
    pub tls_cert: PathBuf,
    pub tls_key: PathBuf,
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
    pub log_format: LogFormat,
    pub log_level: Option<String>,
}

impl Cli {
    pub fn into_action(self) -> anyhow::Result<Action> {
        if let Some(Command::NewKey { label }) = self.command {
            return Ok(Action::NewKey { label });
        }
        // clap enforces `required` whenever no subcommand is given, so these are present; the
        // errors below only guard against that attribute being dropped.
        let missing = |flag: &str| anyhow::anyhow!("{flag} is required");
        Ok(Action::Serve(Box::new(Config {
            listen: self.listen,
            db: self.db,
            tls_cert: self.tls_cert.ok_or_else(|| missing("--tls-cert"))?,
            tls_key: self.tls_key.ok_or_else(|| missing("--tls-key"))?,
            api_keys: self.api_keys.ok_or_else(|| missing("--api-keys"))?,
            shutdown_timeout: Duration::from_secs(self.shutdown_timeout),
            max_connections: self.max_connections as usize,
            handshake_timeout: Duration::from_secs(self.handshake_timeout),
            header_timeout: Duration::from_secs(self.header_timeout),
            body_timeout: Duration::from_secs(self.body_timeout),
            idle_timeout: Duration::from_secs(self.idle_timeout),
            cache_bytes: self.cache_size.saturating_mul(1 << 20),
            idempotency_ttl: self.idempotency_ttl,
            log_format: self.log_format,
            log_level: self.log_level,
        })))
    }
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

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(config.db, PathBuf::from("pets.redb"));
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

    #[test]
    fn new_key_needs_no_server_flags() {
        let action = Cli::try_parse_from(["petstore", "new-key", "alice"])
            .expect("parses")
            .into_action();
        assert!(matches!(action, Ok(Action::NewKey { label }) if label == "alice"));
    }
}
