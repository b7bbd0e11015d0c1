//! TLS: the certificate chain and key files into a rustls `ServerConfig` with an explicit
//! crypto provider (ring), TLS 1.2 and 1.3, ALPN `h2` then `http/1.1`, and session tickets;
//! and the live certificate, which a reload (files) or a renewal (ACME) swaps for new
//! handshakes only, plus the TLS-ALPN-01 challenge certificates (RFC 8737) that `acme` puts
//! here while an order is validated. It knows nothing of HTTP routes or keys. Invariant: only
//! a key that matches its certificate is ever served, and a failed reload leaves the old pair
//! in place.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use anyhow::Context;
use rustls::ServerConfig;
use rustls::crypto::{CryptoProvider, ring};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// The ALPN protocol of a TLS-ALPN-01 validation (RFC 8737 section 6.2).
pub const ACME_TLS_ALPN: &[u8] = b"acme-tls/1";

/// The serving certificate's not-after, seconds since the epoch; 0 while there is none.
static NOT_AFTER: AtomicU64 = AtomicU64::new(0);

/// When the certificate served to new handshakes expires, in seconds since the epoch; `None`
/// before the first one (an ACME server still waiting for its order). For gauges and health.
pub fn not_after() -> Option<u64> {
    match NOT_AFTER.load(Ordering::Relaxed) {
        0 => None,
        at => Some(at),
    }
}

/// Where the served pair comes from.
enum Source {
    /// `--tls-cert` and `--tls-key`, read again on reload.
    Files {
        cert_path: PathBuf,
        key_path: PathBuf,
    },
    /// `--acme-domain`: `acme` installs each new pair; a reload has nothing to read.
    Acme,
}

/// The certificate and key in force, where they came from, and the challenge certificates of
/// an ACME order in progress, by domain.
pub struct Certificate {
    source: Source,
    provider: Arc<CryptoProvider>,
    current: RwLock<Option<Arc<CertifiedKey>>>,
    challenges: RwLock<HashMap<String, Arc<CertifiedKey>>>,
}

impl fmt::Debug for Certificate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let source = match &self.source {
            Source::Files { cert_path, .. } => cert_path.display().to_string(),
            Source::Acme => "ACME".to_owned(),
        };
        f.debug_struct("Certificate")
            .field("source", &source)
            .finish_non_exhaustive()
    }
}

impl ResolvesServerCert for Certificate {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        // RFC 8737 section 3: a validation offers exactly `acme-tls/1`; it gets the challenge
        // certificate for its SNI name, or no handshake at all. Everyone else gets the
        // serving pair, whatever else they offer.
        let mut offered = hello.alpn().into_iter().flatten();
        if let (Some(ACME_TLS_ALPN), None) = (offered.next(), offered.next()) {
            let name = hello.server_name()?.to_ascii_lowercase();
            let challenges = self
                .challenges
                .read()
                .unwrap_or_else(PoisonError::into_inner);
            return challenges.get(&name).cloned();
        }
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Certificate {
    /// Reads the files again and, if they hold a matching pair, serves it to new handshakes;
    /// connections already open keep the pair they started with. An ACME certificate has no
    /// files to read: it renews by itself.
    pub fn reload(&self) -> anyhow::Result<()> {
        if let Source::Files {
            cert_path,
            key_path,
        } = &self.source
        {
            let fresh = read_pair(cert_path, key_path, &self.provider)?;
            self.install(fresh);
        }
        Ok(())
    }

    /// Serves `pair` to new handshakes from now on.
    pub fn install(&self, pair: CertifiedKey) {
        let expires = pair
            .end_entity_cert()
            .ok()
            .and_then(|leaf| validity(leaf).ok());
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(pair));
        NOT_AFTER.store(expires.map_or(0, |(_, until)| until), Ordering::Relaxed);
    }

    /// A certificate and key (PKCS#8 DER) into a pair this server can serve.
    pub fn pair(
        &self,
        chain: Vec<CertificateDer<'static>>,
        key: PrivateKeyDer<'static>,
    ) -> anyhow::Result<CertifiedKey> {
        CertifiedKey::from_der(chain, key, &self.provider).context("key does not fit certificate")
    }

    /// A TLS-ALPN-01 challenge pair: its critical acmeIdentifier extension is one webpki
    /// does not know, so the key is not checked against it (both come from `acme` itself).
    pub fn challenge_pair(
        &self,
        cert: CertificateDer<'static>,
        key: PrivateKeyDer<'static>,
    ) -> anyhow::Result<CertifiedKey> {
        let signer = self
            .provider
            .key_provider
            .load_private_key(key)
            .context("loading the challenge key")?;
        Ok(CertifiedKey::new(vec![cert], signer))
    }

    /// Answers TLS-ALPN-01 validations for `domain` with `pair` (or stops, with `None`).
    pub fn set_challenge(&self, domain: &str, pair: Option<CertifiedKey>) {
        let mut challenges = self
            .challenges
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        match pair {
            Some(pair) => challenges.insert(domain.to_ascii_lowercase(), Arc::new(pair)),
            None => challenges.remove(&domain.to_ascii_lowercase()),
        };
    }
}

/// A DER certificate's validity: not-before and not-after, in seconds since the epoch (0 for
/// a time before it).
pub fn validity(der: &[u8]) -> anyhow::Result<(u64, u64)> {
    let (_, parsed) =
        x509_parser::parse_x509_certificate(der).context("parsing the certificate")?;
    let seconds = |time: &x509_parser::time::ASN1Time| u64::try_from(time.timestamp()).unwrap_or(0);
    let validity = parsed.validity();
    Ok((seconds(&validity.not_before), seconds(&validity.not_after)))
}

/// The DNS names a DER certificate is for (its subjectAltName), lowercased.
pub fn dns_names(der: &[u8]) -> anyhow::Result<Vec<String>> {
    let (_, parsed) =
        x509_parser::parse_x509_certificate(der).context("parsing the certificate")?;
    let names = parsed
        .subject_alternative_name()
        .context("reading the certificate's subjectAltName")?
        .map(|extension| {
            extension
                .value
                .general_names
                .iter()
                .filter_map(|name| match name {
                    x509_parser::extensions::GeneralName::DNSName(dns) => {
                        Some(dns.to_ascii_lowercase())
                    }
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(names)
}

/// The TLS configuration for certificates obtained over ACME: `acme` installs them into the
/// returned `Certificate`; until the first arrives, only TLS-ALPN-01 validations complete a
/// handshake.
pub fn acme() -> anyhow::Result<(Arc<ServerConfig>, Arc<Certificate>)> {
    let provider = Arc::new(ring::default_provider());
    let certificate = Arc::new(Certificate {
        source: Source::Acme,
        provider: Arc::clone(&provider),
        current: RwLock::new(None),
        challenges: RwLock::new(HashMap::new()),
    });
    let mut config = server_config(provider, &certificate)?;
    // Last: rustls picks the first of ours the client offers, so an ordinary client offering
    // it too still gets HTTP.
    config.alpn_protocols.push(ACME_TLS_ALPN.to_vec());
    Ok((Arc::new(config), certificate))
}

/// Builds the server's TLS configuration from PEM files; every failure names the file.
pub fn load(
    cert_path: &Path,
    key_path: &Path,
) -> anyhow::Result<(Arc<ServerConfig>, Arc<Certificate>)> {
    let provider = Arc::new(ring::default_provider());
    let pair = read_pair(cert_path, key_path, &provider)?;
    let certificate = Arc::new(Certificate {
        source: Source::Files {
            cert_path: cert_path.to_owned(),
            key_path: key_path.to_owned(),
        },
        provider: Arc::clone(&provider),
        current: RwLock::new(None),
        challenges: RwLock::new(HashMap::new()),
    });
    certificate.install(pair);
    let config = server_config(provider, &certificate)?;
    Ok((Arc::new(config), certificate))
}

fn server_config(
    provider: Arc<CryptoProvider>,
    certificate: &Arc<Certificate>,
) -> anyhow::Result<ServerConfig> {
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .context("enabling TLS 1.2 and 1.3")?
        .with_no_client_auth()
        .with_cert_resolver(Arc::clone(certificate) as Arc<dyn ResolvesServerCert>);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    // Our order (the provider's: AES-256-GCM, AES-128-GCM, then ChaCha20) wins over the
    // client's, as TLS graders ask: a client listing a weaker suite first does not get it.
    config.ignore_client_order = true;
    // Resumed sessions skip the certificate signature, the costliest step of a handshake.
    config.ticketer = ring::Ticketer::new().context("creating the TLS session ticketer")?;
    Ok(config)
}

fn read_pair(
    cert_path: &Path,
    key_path: &Path,
    provider: &CryptoProvider,
) -> anyhow::Result<CertifiedKey> {
    let chain = CertificateDer::pem_file_iter(cert_path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .with_context(|| format!("reading TLS certificate {}", cert_path.display()))?;
    anyhow::ensure!(
        !chain.is_empty(),
        "TLS certificate {}: no CERTIFICATE block found",
        cert_path.display()
    );
    // PrivateKeyDer takes the first of PKCS#8, SEC1 (EC) or PKCS#1 (RSA) in the file.
    let key = PrivateKeyDer::from_pem_file(key_path).with_context(|| {
        format!(
            "reading TLS key {} (PKCS#8, SEC1 or PKCS#1 PEM)",
            key_path.display()
        )
    })?;
    CertifiedKey::from_der(chain, key, provider).with_context(|| {
        format!(
            "TLS key {} does not fit certificate {}",
            key_path.display(),
            cert_path.display()
        )
    })
}

/// A client's TLS to servers (`what`, for errors): ring, its default versions, and the CA
/// certificates of the file given as `flag`, else the system's roots. The arguments come in
/// `client_roots`'s order.
pub fn client_config(
    ca: Option<&Path>,
    what: &str,
    flag: &str,
) -> anyhow::Result<rustls::ClientConfig> {
    let roots = client_roots(ca.map(|ca| (ca, flag)), what, flag)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .with_context(|| format!("TLS versions for {what}"))?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// The roots a client of ours verifies servers against: the PEM certificates of `ca` (a file,
/// and the flag or URL part that named it, for errors), else the system's. `what` names the
/// servers and `flag` the way to give a CA instead, for the error when the system has none.
pub fn client_roots(
    ca: Option<(&Path, &str)>,
    what: &str,
    flag: &str,
) -> anyhow::Result<rustls::RootCertStore> {
    let mut roots = rustls::RootCertStore::empty();
    match ca {
        Some((path, named_by)) => {
            let certs = CertificateDer::pem_file_iter(path)
                .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                .with_context(|| {
                    format!("{named_by} {}: reading CA certificates", path.display())
                })?;
            anyhow::ensure!(
                !certs.is_empty(),
                "{named_by} {}: no CERTIFICATE block found",
                path.display()
            );
            for (n, cert) in certs.into_iter().enumerate() {
                roots.add(cert).with_context(|| {
                    format!(
                        "{named_by} {}: certificate {} is not a usable CA certificate",
                        path.display(),
                        n + 1
                    )
                })?;
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            let (added, _) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                let why = found
                    .errors
                    .first()
                    .map_or_else(|| "none found".to_owned(), ToString::to_string);
                anyhow::bail!(
                    "no system CA certificates to verify {what} with ({why}); name the CA with \
                     {flag}"
                );
            }
        }
    }
    Ok(roots)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("certs")
            .join(name)
    }

    #[test]
    fn each_key_encoding_loads_and_offers_both_protocols() {
        for (chain, key) in [
            ("dev-server.pem", "dev-server.key"),
            ("dev-server.pem", "dev-server-sec1.key"),
            ("dev-server-rsa.pem", "dev-server-rsa.key"),
        ] {
            let (config, _) =
                load(&cert(chain), &cert(key)).unwrap_or_else(|e| panic!("{key}: {e:#}"));
            assert_eq!(
                config.alpn_protocols,
                [b"h2".to_vec(), b"http/1.1".to_vec()]
            );
        }
    }

    #[test]
    fn a_key_of_another_certificate_is_refused() {
        let message = format!(
            "{:#}",
            load(&cert("dev-server.pem"), &cert("dev-server-2.key")).expect_err("mismatch")
        );
        assert!(message.contains("does not fit certificate"), "{message}");
    }

    #[test]
    fn a_file_without_pem_blocks_is_refused_by_name() {
        let keys = cert("dev-keys.txt");
        let message = format!(
            "{:#}",
            load(&keys, &cert("dev-server.key")).expect_err("no cert")
        );
        assert!(
            message.contains("dev-keys.txt") && message.contains("no CERTIFICATE"),
            "{message}"
        );
        let message = format!(
            "{:#}",
            load(&cert("dev-server.pem"), &keys).expect_err("no key")
        );
        assert!(message.contains("dev-keys.txt"), "{message}");
    }

    #[test]
    fn a_reload_swaps_the_pair_and_a_broken_one_keeps_the_old() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (cert_path, key_path) = (dir.path().join("c.pem"), dir.path().join("k.pem"));
        let copy = |from: &str, to: &Path| std::fs::copy(cert(from), to).map(drop);
        copy("dev-server.pem", &cert_path)
            .and_then(|()| copy("dev-server.key", &key_path))
            .expect("copy");
        let (_, certificate) = load(&cert_path, &key_path).expect("load");
        let leaf = || {
            let current = certificate.current.read().expect("lock");
            current.as_ref().expect("a pair").cert[0].clone()
        };
        let first = leaf();

        copy("dev-server-2.pem", &cert_path).expect("copy");
        assert!(
            certificate.reload().is_err(),
            "new certificate with the old key"
        );
        assert_eq!(leaf(), first);

        copy("dev-server-2.key", &key_path).expect("copy");
        certificate.reload().expect("a matching pair reloads");
        assert_ne!(leaf(), first);
    }

    #[test]
    fn the_leaf_not_after_is_read() {
        // `openssl x509 -enddate`: Nov 19 07:22:50 2036 GMT.
        for name in ["dev-server.pem", "dev-server-rsa.pem"] {
            let leaf = CertificateDer::pem_file_iter(cert(name))
                .expect("read")
                .next()
                .expect("one")
                .expect("pem");
            assert_eq!(validity(&leaf).expect("parsed").1, 2_110_692_170, "{name}");
        }
    }
}
