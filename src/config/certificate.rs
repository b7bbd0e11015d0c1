//! Where the served certificate comes from, as the flags say: `--tls-cert` with `--tls-key`,
//! or `--acme-domain` with the other `--acme-*` flags and the state directory found for it.
//! Exactly one way, each complete; the domains are checked and deduplicated here, the files
//! are read later by `tls` and `acme`.

use std::path::PathBuf;

use anyhow::bail;

use super::cli::Cli;
use super::values::Database;

/// The two ways to a certificate: files the operator renews, or ACME.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TlsSource {
    Files { cert: PathBuf, key: PathBuf },
    Acme(crate::acme::Settings),
}

impl Cli {
    /// `--tls-cert/--tls-key` or `--acme-*`: exactly one way, each complete.
    pub(super) fn tls_source(&mut self, db: &Database) -> anyhow::Result<TlsSource> {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    use clap::Parser;

    use crate::config::Action;

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
}
