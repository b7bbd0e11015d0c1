//! TLS: the certificate chain and key files into a rustls `ServerConfig` with an explicit
//! crypto provider (ring), TLS 1.2 and 1.3, ALPN `h2` then `http/1.1`, and session tickets.
//! It knows nothing of HTTP routes or keys. Invariant: a config is only built from a key that
//! matches the certificate's public key.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use rustls::ServerConfig;
use rustls::crypto::ring;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// A client that has not finished its handshake by then is dropped.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Builds the server's TLS configuration from PEM files; every failure names the file.
pub fn load(cert_path: &Path, key_path: &Path) -> anyhow::Result<Arc<ServerConfig>> {
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

    let provider = Arc::new(ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .context("enabling TLS 1.2 and 1.3")?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .with_context(|| {
            format!(
                "TLS key {} does not fit certificate {}",
                key_path.display(),
                cert_path.display()
            )
        })?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    // Resumed sessions skip the certificate signature, the costliest step of a handshake.
    config.ticketer = ring::Ticketer::new().context("creating the TLS session ticketer")?;
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert(name: &str) -> std::path::PathBuf {
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
            let config = load(&cert(chain), &cert(key)).unwrap_or_else(|e| panic!("{key}: {e:#}"));
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
}
