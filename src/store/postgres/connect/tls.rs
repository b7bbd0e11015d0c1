//! TLS to PostgreSQL as libpq sets it up: the URL's `sslmode` and `sslrootcert` and the
//! `--db-ca` flag planned into the mode tokio-postgres takes and what is checked of the
//! server's certificate (CA files or the system's roots), and the rustls client configuration
//! (ring, TLS 1.2 and 1.3, ALPN `postgresql`) with the verifiers for `require` and `verify-ca`.
//! It reads CA files but opens no socket. Invariant: `sslmode` means what it means to libpq.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail};
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms, ring};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore};
use rustls::{Error as TlsError, SignatureScheme};
use tokio_postgres::config::SslMode;

/// The `sslmode` values accepted, as libpq spells them.
pub(super) const SSL_MODES: &str = "disable, prefer, require, verify-ca, verify-full";

/// libpq's `sslmode`: tokio-postgres knows only the first three.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum LibpqSslMode {
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

    pub(super) fn as_str(self) -> &'static str {
        match self {
            LibpqSslMode::Disable => "disable",
            LibpqSslMode::Prefer => "prefer",
            LibpqSslMode::Require => "require",
            LibpqSslMode::VerifyCa => "verify-ca",
            LibpqSslMode::VerifyFull => "verify-full",
        }
    }

    /// Whether a connection without TLS is refused.
    pub(super) fn is_encrypted_only(self) -> bool {
        !matches!(self, LibpqSslMode::Disable | LibpqSslMode::Prefer)
    }

    pub(super) fn to_tokio_postgres(self) -> SslMode {
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
pub(super) enum Roots {
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
pub(super) enum Check {
    /// Any certificate: encryption without authentication.
    Nothing,
    /// A chain to one of the roots, whatever host name it was issued for.
    Chain(Roots),
    /// A chain to one of the roots, issued for the host connected to.
    ChainAndName(Roots),
}

/// The TLS mode and the certificate check for the URL's `sslmode` and `sslrootcert` and the
/// `--db-ca` flag, as libpq reads them.
pub(super) fn plan_tls(
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
pub(super) fn client_config(check: &Check) -> anyhow::Result<ClientConfig> {
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
        Check::Nothing => Arc::new(Lenient {
            algorithms: provider.signature_verification_algorithms,
            chain: None,
        }),
        Check::Chain(roots) => Arc::new(Lenient {
            algorithms: provider.signature_verification_algorithms,
            chain: Some(webpki(roots)?),
        }),
        Check::ChainAndName(roots) => webpki(roots)?,
    })
}

fn load_roots(roots: &Roots) -> anyhow::Result<RootCertStore> {
    let ca = match roots {
        Roots::File { path, named_by } => Some((path.as_path(), *named_by)),
        Roots::System => None,
    };
    crate::tls::client_roots(ca, "the database server", "--db-ca")
}

/// A verifier that takes more than webpki would: any certificate (`require` without a CA), or
/// a good chain issued for another name (`verify-ca`). The handshake's signatures are still
/// checked either way, so the server must hold the key of the certificate it sent.
#[derive(Debug)]
struct Lenient {
    algorithms: WebPkiSupportedAlgorithms,
    /// `None`: any certificate. Some: webpki's full verification, except that a certificate
    /// issued for another name is taken; webpki checks the chain before the name, so a name
    /// error means the chain was good.
    chain: Option<Arc<WebPkiServerVerifier>>,
}

impl ServerCertVerifier for Lenient {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, TlsError> {
        let Some(webpki) = &self.chain else {
            return Ok(ServerCertVerified::assertion());
        };
        match webpki.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
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

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use rustls::pki_types::pem::PemObject;

    use rustls::pki_types::PrivateKeyDer;

    /// A file of the development certificates in `certs/`.
    pub(crate) fn cert(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("certs")
            .join(name)
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
}
