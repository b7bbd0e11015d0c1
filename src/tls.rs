//! TLS: the certificate chain and key files into a rustls `ServerConfig` with an explicit
//! crypto provider (ring), TLS 1.2 and 1.3, ALPN `h2` then `http/1.1`, and session tickets;
//! and the live certificate, which a reload swaps for new handshakes only. It knows nothing
//! of HTTP routes or keys. Invariant: only a key that matches its certificate is ever served,
//! and a failed reload leaves the old pair in place.

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

/// The serving certificate's notAfter in Unix seconds; 0 before one is loaded, or when its
/// date could not be read.
static NOT_AFTER: AtomicU64 = AtomicU64::new(0);

/// When the certificate in force expires (its leaf's notAfter), in Unix seconds; for the
/// metrics. `None` before a certificate is loaded.
pub fn not_after() -> Option<u64> {
    Some(NOT_AFTER.load(Ordering::Relaxed)).filter(|at| *at > 0)
}

/// Records the notAfter of `leaf`, the certificate now served: every path that installs a
/// certificate (the files at start and on reload, an ACME renewal) calls it.
pub fn record_not_after(leaf: &CertificateDer<'_>) {
    match leaf_not_after(leaf) {
        Ok(at) => NOT_AFTER.store(at, Ordering::Relaxed),
        // rustls accepted it, so this is only our reader's limit: no expiry metric, still served.
        Err(e) => {
            tracing::warn!(error = %e, "reading the certificate's notAfter failed");
            NOT_AFTER.store(0, Ordering::Relaxed);
        }
    }
}

fn leaf_not_after(leaf: &CertificateDer<'_>) -> Result<u64, x509_cert::der::Error> {
    use x509_cert::der::Decode;
    let cert = x509_cert::Certificate::from_der(leaf)?;
    Ok(cert
        .tbs_certificate
        .validity
        .not_after
        .to_unix_duration()
        .as_secs())
}

/// The certificate and key in force, and the files they came from.
pub struct Certificate {
    cert_path: PathBuf,
    key_path: PathBuf,
    provider: Arc<CryptoProvider>,
    current: RwLock<Arc<CertifiedKey>>,
}

impl fmt::Debug for Certificate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Certificate")
            .field("cert_path", &self.cert_path)
            .finish_non_exhaustive()
    }
}

impl ResolvesServerCert for Certificate {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(Arc::clone(
            &self.current.read().unwrap_or_else(PoisonError::into_inner),
        ))
    }
}

impl Certificate {
    /// Reads the files again and, if they hold a matching pair, serves it to new handshakes;
    /// connections already open keep the pair they started with.
    pub fn reload(&self) -> anyhow::Result<()> {
        let fresh = read_pair(&self.cert_path, &self.key_path, &self.provider)?;
        if let Some(leaf) = fresh.cert.first() {
            record_not_after(leaf);
        }
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(fresh);
        Ok(())
    }
}

/// Builds the server's TLS configuration from PEM files; every failure names the file.
pub fn load(
    cert_path: &Path,
    key_path: &Path,
) -> anyhow::Result<(Arc<ServerConfig>, Arc<Certificate>)> {
    let provider = Arc::new(ring::default_provider());
    let pair = read_pair(cert_path, key_path, &provider)?;
    if let Some(leaf) = pair.cert.first() {
        record_not_after(leaf);
    }
    let certificate = Arc::new(Certificate {
        cert_path: cert_path.to_owned(),
        key_path: key_path.to_owned(),
        provider: Arc::clone(&provider),
        current: RwLock::new(Arc::new(pair)),
    });
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .context("enabling TLS 1.2 and 1.3")?
        .with_no_client_auth()
        .with_cert_resolver(Arc::clone(&certificate) as Arc<dyn ResolvesServerCert>);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    // Our order (the provider's: AES-256-GCM, AES-128-GCM, then ChaCha20) wins over the
    // client's, as TLS graders ask: a client listing a weaker suite first does not get it.
    config.ignore_client_order = true;
    // Resumed sessions skip the certificate signature, the costliest step of a handshake.
    config.ticketer = ring::Ticketer::new().context("creating the TLS session ticketer")?;
    Ok((Arc::new(config), certificate))
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
        let leaf = || certificate.current.read().expect("lock").cert[0].clone();
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
            assert_eq!(
                leaf_not_after(&leaf).expect("parsed"),
                2_110_692_170,
                "{name}"
            );
        }
    }
}
