//! The command line's meaning: what the operator asked this process to do (`Action`), from
//! clap's `Cli` (`cli`) through the subcommands' settings, checked here, or the server's
//! `Config` (`serve`, with `certificate` and `values`). It opens no file and no socket: it
//! only says what was asked. `--db` is only classified (`values`: a redb path or a PostgreSQL
//! URL); the URL itself is checked by the store's PostgreSQL engine.

mod certificate;
mod cli;
mod serve;
mod values;

use std::path::PathBuf;

use anyhow::bail;

pub use certificate::TlsSource;
use cli::Command;
pub use cli::{Cli, KeysCommand, LogFormat, WebhooksCommand};
pub use serve::Config;
pub use values::Database;

/// What the operator asked this process to do.
#[derive(Debug)]
pub enum Action {
    Serve(Box<Config>),
    NewKey {
        label: String,
    },
    Keys {
        file: PathBuf,
        command: KeysCommand,
    },
    Webhooks {
        file: PathBuf,
        command: WebhooksCommand,
    },
    Copy(CopyConfig),
    Check(PathBuf),
    Backup {
        from: PathBuf,
        to: PathBuf,
    },
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

impl Cli {
    /// What the command line asks for, each flag checked against the others.
    pub fn into_action(mut self) -> anyhow::Result<Action> {
        match self.command.take() {
            Some(Command::NewKey { label }) => return Ok(Action::NewKey { label }),
            Some(Command::Keys { api_keys, command }) => {
                let file = api_keys.ok_or_else(|| {
                    anyhow::anyhow!(
                        "which keys file? give --api-keys FILE or set PETSTORE_API_KEYS, as for \
                         the server"
                    )
                })?;
                return Ok(Action::Keys { file, command });
            }
            Some(Command::Webhooks { webhooks, command }) => {
                let file = webhooks.ok_or_else(|| {
                    anyhow::anyhow!(
                        "which webhooks file? give --webhooks FILE or set PETSTORE_WEBHOOKS, as \
                         for the server"
                    )
                })?;
                return Ok(Action::Webhooks { file, command });
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
        Ok(Action::Serve(Box::new(self.into_config()?)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::path::Path;

    use clap::Parser;

    #[test]
    fn check_takes_a_redb_file_and_refuses_a_url() {
        let parse = |args: &[&str]| Cli::try_parse_from(args)?.into_action();
        let action = parse(&["petstore", "check", "--db", "snap.redb"]).expect("parses");
        assert!(matches!(action, Action::Check(path) if path == Path::new("snap.redb")));
        let error = parse(&["petstore", "check", "--db", "postgres://db/pets"]).expect_err("no");
        assert!(error.to_string().contains("pg_amcheck"), "{error}");
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

    #[test]
    fn webhooks_finds_the_file_as_the_server_does() {
        let webhooks = |args: &[&str]| {
            let args = ["petstore", "webhooks"].iter().chain(args);
            Cli::try_parse_from(args)?.into_action()
        };
        let Ok(Action::Webhooks { file, command }) = webhooks(&[
            "add",
            "https://shop.example/hooks",
            "--types",
            "pet.created",
            "--from-start",
            "--webhooks",
            "w",
        ]) else {
            panic!("expected a webhooks action");
        };
        assert_eq!(file, PathBuf::from("w"));
        assert_eq!(
            command,
            WebhooksCommand::Add {
                url: "https://shop.example/hooks".into(),
                types: Some("pet.created".into()),
                label: None,
                from_start: true,
            }
        );
        assert!(matches!(
            webhooks(&["--webhooks", "w", "rotate", "ep_0000000a", "--finish"]),
            Ok(Action::Webhooks {
                command: WebhooksCommand::Rotate { id, finish: true },
                ..
            }) if id == "ep_0000000a"
        ));
        if std::env::var_os("PETSTORE_WEBHOOKS").is_none() {
            let error = webhooks(&["list"]).expect_err("no file");
            assert!(
                format!("{error:#}").contains("--webhooks FILE"),
                "{error:#}"
            );
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
