//! How to reach PostgreSQL: a libpq URL (`postgres://` or `postgresql://`, several hosts,
//! `target_session_attrs`, `connect_timeout`...), the password from its file and TLS by
//! rustls with ring, checked into a `PgTarget` the backend connects with. It reads the
//! password and CA files but opens no socket. Invariants: the password never comes from the
//! command line and never appears in an error; `sslmode` means what it means to libpq.

use std::borrow::Cow;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail, ensure};
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms, ring};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore};
use rustls::{Error as TlsError, SignatureScheme};
use tokio_postgres::config::{Host, SslMode};
use tokio_postgres_rustls::MakeRustlsConnect;

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

/// The `sslmode` values accepted, as libpq spells them.
const SSL_MODES: &str = "disable, prefer, require, verify-ca, verify-full";

/// Where and how to reach PostgreSQL, checked.
pub struct PgTarget {
    /// Hosts, ports, user, database, session attributes and the password from its file. Its
    /// TLS mode is only `Disable`, `Prefer` or `Require`: `tls` decides what is verified.
    pub config: tokio_postgres::Config,
    /// The rustls connector (ring), verifying the server as the URL's `sslmode` asks.
    pub tls: MakeRustlsConnect,
    /// Connections the pool keeps at most; at least 1.
    pub pool_size: usize,
    /// The longest one statement may run; more than zero.
    pub statement_timeout: Duration,
    /// The bound on one connection attempt to one host, also set in `config`.
    pub connect_timeout: Duration,
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
    let url = SplitUrl::from_url(url)?;
    let mut config = tokio_postgres::Config::from_str(&url.rest)
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

    let (mode, check) = plan_tls(url.sslmode.as_deref(), url.sslrootcert.as_deref(), ca_file)?;
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

/// libpq's `sslmode`: tokio-postgres knows only the first three.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LibpqSslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl LibpqSslMode {
    fn parse(text: &str) -> anyhow::Result<LibpqSslMode> {
        Ok(match text {
            "disable" => LibpqSslMode::Disable,
            "prefer" => LibpqSslMode::Prefer,
            "require" => LibpqSslMode::Require,
            "verify-ca" => LibpqSslMode::VerifyCa,
            "verify-full" => LibpqSslMode::VerifyFull,
            other => bail!("--db: sslmode {other:?} is not one of {SSL_MODES}"),
        })
    }

    fn as_str(self) -> &'static str {
        match self {
            LibpqSslMode::Disable => "disable",
            LibpqSslMode::Prefer => "prefer",
            LibpqSslMode::Require => "require",
            LibpqSslMode::VerifyCa => "verify-ca",
            LibpqSslMode::VerifyFull => "verify-full",
        }
    }

    /// Whether a connection without TLS is refused.
    fn is_encrypted_only(self) -> bool {
        !matches!(self, LibpqSslMode::Disable | LibpqSslMode::Prefer)
    }

    fn to_tokio_postgres(self) -> SslMode {
        match self {
            LibpqSslMode::Disable => SslMode::Disable,
            LibpqSslMode::Prefer => SslMode::Prefer,
            LibpqSslMode::Require | LibpqSslMode::VerifyCa | LibpqSslMode::VerifyFull => {
                SslMode::Require
            }
        }
    }
}

/// Where the trusted CA certificates come from.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Roots {
    /// A PEM file, and the flag or URL part that named it (for errors).
    File {
        path: PathBuf,
        named_by: &'static str,
    },
    /// The system's store, through rustls-native-certs.
    System,
}

/// What the client checks of the server's certificate; the handshake's signatures are
/// always checked.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Check {
    /// Any certificate: encryption without authentication.
    Nothing,
    /// A chain to one of the roots, whatever host name it was issued for.
    Chain(Roots),
    /// A chain to one of the roots, issued for the host connected to.
    ChainAndName(Roots),
}

/// The TLS mode and the certificate check for the URL's `sslmode` and `sslrootcert` and the
/// `--db-ca` flag, as libpq reads them.
fn plan_tls(
    sslmode: Option<&str>,
    sslrootcert: Option<&str>,
    ca_file: Option<&Path>,
) -> anyhow::Result<(LibpqSslMode, Check)> {
    let explicit = match (ca_file, sslrootcert) {
        (Some(_), Some(_)) => {
            bail!("--db-ca and the URL's sslrootcert both name CA certificates; give only one")
        }
        (Some(path), None) => Some(Roots::File {
            path: path.to_owned(),
            named_by: "--db-ca",
        }),
        // libpq 16: sslrootcert=system is the system's store, and asks for verify-full.
        (None, Some("system")) => Some(Roots::System),
        (None, Some(path)) => Some(Roots::File {
            path: PathBuf::from(path),
            named_by: "--db: sslrootcert",
        }),
        (None, None) => None,
    };
    let mode = match sslmode {
        Some(text) => LibpqSslMode::parse(text)?,
        None if explicit == Some(Roots::System) => LibpqSslMode::VerifyFull,
        // libpq's default.
        None => LibpqSslMode::Prefer,
    };
    let check = match (mode, explicit) {
        (LibpqSslMode::Disable, _) => Check::Nothing,
        (mode, Some(Roots::System)) if mode != LibpqSslMode::VerifyFull => bail!(
            "--db: sslmode={} may not be used with sslrootcert=system (as libpq): use verify-full",
            mode.as_str()
        ),
        // libpq: once a root certificate file is given, prefer and require check the chain
        // too (require then behaves as verify-ca).
        (LibpqSslMode::Prefer | LibpqSslMode::Require, Some(roots)) => Check::Chain(roots),
        (LibpqSslMode::Prefer | LibpqSslMode::Require, None) => Check::Nothing,
        (LibpqSslMode::VerifyCa, roots) => Check::Chain(roots.unwrap_or(Roots::System)),
        (LibpqSslMode::VerifyFull, roots) => Check::ChainAndName(roots.unwrap_or(Roots::System)),
    };
    Ok((mode, check))
}

/// The rustls client configuration for `check`, with ring as its only crypto provider.
fn client_config(check: &Check) -> anyhow::Result<ClientConfig> {
    let provider = Arc::new(ring::default_provider());
    let verifier = verifier(check, &provider)?;
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .context("enabling TLS 1.2 and 1.3")?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    // PostgreSQL 17 requires this ALPN for direct TLS (sslnegotiation=direct); libpq 17 sends
    // it always and older servers ignore it.
    config.alpn_protocols = vec![b"postgresql".to_vec()];
    Ok(config)
}

fn verifier(
    check: &Check,
    provider: &Arc<CryptoProvider>,
) -> anyhow::Result<Arc<dyn ServerCertVerifier>> {
    let webpki = |roots: &Roots| -> anyhow::Result<Arc<WebPkiServerVerifier>> {
        WebPkiServerVerifier::builder_with_provider(Arc::new(load_roots(roots)?), provider.clone())
            .build()
            .context("building the PostgreSQL certificate verifier")
    };
    Ok(match check {
        Check::Nothing => Arc::new(AnyCertificate {
            algorithms: provider.signature_verification_algorithms,
        }),
        Check::Chain(roots) => Arc::new(AnyName {
            webpki: webpki(roots)?,
        }),
        Check::ChainAndName(roots) => webpki(roots)?,
    })
}

fn load_roots(roots: &Roots) -> anyhow::Result<RootCertStore> {
    let mut store = RootCertStore::empty();
    match roots {
        Roots::File { path, named_by } => {
            let certs = CertificateDer::pem_file_iter(path)
                .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                .with_context(|| {
                    format!("{named_by} {}: reading CA certificates", path.display())
                })?;
            ensure!(
                !certs.is_empty(),
                "{named_by} {}: no CERTIFICATE block found",
                path.display()
            );
            for (n, cert) in certs.into_iter().enumerate() {
                store.add(cert).with_context(|| {
                    format!(
                        "{named_by} {}: certificate {} is not a usable CA certificate",
                        path.display(),
                        n + 1
                    )
                })?;
            }
        }
        Roots::System => {
            let found = rustls_native_certs::load_native_certs();
            let (added, _) = store.add_parsable_certificates(found.certs);
            if added == 0 {
                let why = found
                    .errors
                    .first()
                    .map_or_else(|| "none found".to_owned(), ToString::to_string);
                bail!(
                    "--db: no system CA certificates to verify the server with ({why}); \
                     name the CA with --db-ca"
                );
            }
        }
    }
    Ok(store)
}

/// `require` without a CA: any certificate is taken, as by libpq, but the handshake's
/// signatures are still checked, so the server must hold the key of the one it sent.
#[derive(Debug)]
struct AnyCertificate {
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, TlsError> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// `verify-ca`: webpki's full verification, except that a certificate issued for another
/// name is taken. webpki checks the chain before the name, so a name error means the chain
/// was good.
#[derive(Debug)]
struct AnyName {
    webpki: Arc<WebPkiServerVerifier>,
}

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, TlsError> {
        match self.webpki.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            Err(TlsError::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
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

    use rustls::pki_types::PrivateKeyDer;

    fn cert(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("certs")
            .join(name)
    }

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

    fn leaf(name: &str) -> CertificateDer<'static> {
        CertificateDer::from_pem_file(cert(name)).expect("leaf certificate")
    }

    fn verify(check: &Check, leaf: &CertificateDer<'_>, name: &str) -> Result<(), TlsError> {
        let provider = Arc::new(ring::default_provider());
        let name = ServerName::try_from(name).expect("server name");
        verifier(check, &provider)
            .expect("verifier")
            .verify_server_cert(leaf, &[], &name, &[], UnixTime::now())
            .map(drop)
    }

    /// A whole TLS handshake in memory between the client configuration for `check` and a
    /// server presenting `dev-server.pem`, asked for as `name`.
    fn handshake(check: &Check, name: &str) -> Result<(), TlsError> {
        let chain = vec![leaf("dev-server.pem")];
        let key = PrivateKeyDer::from_pem_file(cert("dev-server.key")).expect("key");
        let server =
            rustls::ServerConfig::builder_with_provider(Arc::new(ring::default_provider()))
                .with_safe_default_protocol_versions()
                .expect("versions")
                .with_no_client_auth()
                .with_single_cert(chain, key)
                .expect("server config");
        let mut server = rustls::ServerConnection::new(Arc::new(server)).expect("server");
        let config = Arc::new(client_config(check).expect("client config"));
        let name = ServerName::try_from(name.to_owned()).expect("server name");
        let mut client = rustls::ClientConnection::new(config, name).expect("client");
        while client.is_handshaking() || server.is_handshaking() {
            let mut bytes = Vec::new();
            while client.wants_write() {
                client.write_tls(&mut bytes).expect("to memory");
            }
            server.read_tls(&mut bytes.as_slice()).expect("from memory");
            server.process_new_packets()?;
            bytes.clear();
            while server.wants_write() {
                server.write_tls(&mut bytes).expect("to memory");
            }
            client.read_tls(&mut bytes.as_slice()).expect("from memory");
            client.process_new_packets()?;
        }
        Ok(())
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
    fn sslrootcert_system_means_verify_full_and_refuses_weaker_modes() {
        assert_eq!(
            plan_tls(None, Some("system"), None).expect("plans"),
            (LibpqSslMode::VerifyFull, Check::ChainAndName(Roots::System))
        );
        let refused = plan_tls(Some("require"), Some("system"), None).expect_err("weak");
        assert!(
            format!("{refused:#}").contains("use verify-full"),
            "{refused:#}"
        );
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
    fn the_scheme_may_be_any_case_and_other_schemes_are_refused() {
        let target = target("PostgreSQL://app@db/pets").expect("parses");
        assert_eq!(target.config.get_hosts(), [Host::Tcp("db".into())]);
        assert!(message(self::target("mysql://app@db/pets")).contains("unsupported scheme"));
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
    fn the_url_needs_a_user_and_a_host() {
        assert!(message(target("postgres://db/pets")).contains("names no user"));
        assert!(message(target("postgres://app@/pets")).contains("names no host"));
        assert!(
            message(target("postgres://app@h1,h2/pets?port=5433")).contains("3 ports for 2 hosts")
        );
    }

    #[test]
    fn an_encrypted_only_mode_refuses_a_socket_directory() {
        let socket = "postgres://app@%2Fvar%2Frun%2Fpostgresql/pets";
        assert!(target(socket).is_ok());
        let text = message(target(&format!("{socket}?sslmode=require")));
        assert!(text.contains("no TLS over Unix sockets"), "{text}");
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

    #[test]
    fn a_ca_file_loads_every_certificate_and_a_file_without_any_is_refused() {
        let roots = load_roots(&dev_ca()).expect("loads");
        assert_eq!(roots.len(), 1);
        let text = format!(
            "{:#}",
            load_roots(&Roots::File {
                path: cert("dev-keys.txt"),
                named_by: "--db-ca"
            })
            .expect_err("no certificate")
        );
        assert!(
            text.contains("--db-ca") && text.contains("dev-keys.txt"),
            "{text}"
        );
    }

    #[test]
    fn verify_ca_takes_a_wrong_name_but_not_an_unknown_ca() {
        let leaf = leaf("dev-server.pem");
        verify(&Check::Chain(dev_ca()), &leaf, "db.example.com").expect("any name");
        let other = Roots::File {
            path: cert("dev-other-ca.pem"),
            named_by: "--db-ca",
        };
        assert_eq!(
            verify(&Check::Chain(other), &leaf, "localhost"),
            Err(TlsError::InvalidCertificate(
                CertificateError::UnknownIssuer
            ))
        );
    }

    #[test]
    fn verify_full_needs_the_name_too() {
        let leaf = leaf("dev-server.pem");
        verify(&Check::ChainAndName(dev_ca()), &leaf, "localhost").expect("its name");
        verify(&Check::ChainAndName(dev_ca()), &leaf, "127.0.0.1").expect("its address");
        assert!(matches!(
            verify(&Check::ChainAndName(dev_ca()), &leaf, "db.example.com"),
            Err(TlsError::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. }
            ))
        ));
    }

    #[test]
    fn require_takes_any_certificate() {
        verify(&Check::Nothing, &leaf("dev-server.pem"), "db.example.com").expect("taken");
        verify(&Check::Nothing, &leaf("dev-ca.pem"), "db.example.com").expect("taken");
    }

    #[test]
    fn handshakes_succeed_or_fail_as_each_check_says() {
        let other = Roots::File {
            path: cert("dev-other-ca.pem"),
            named_by: "--db-ca",
        };
        handshake(&Check::Nothing, "db.example.com").expect("require");
        handshake(&Check::Chain(dev_ca()), "db.example.com").expect("verify-ca");
        handshake(&Check::ChainAndName(dev_ca()), "localhost").expect("verify-full");
        assert!(handshake(&Check::Chain(other), "localhost").is_err());
        assert!(handshake(&Check::ChainAndName(dev_ca()), "db.example.com").is_err());
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
