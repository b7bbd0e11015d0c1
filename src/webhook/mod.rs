//! Webhooks (issue 30): durable readers of the event feed that POST each event, signed as the
//! Standard Webhooks specification says (`sign`), to the endpoints an operator lists in a file.
//! `endpoints` owns that file's format, `command` the `petstore webhooks` subcommand that edits
//! it, `deliver` the delivery to each endpoint, `target` where a delivery may connect. The file
//! never holds delivery state, which is the store's. This file ties them to the server:
//! started with it, reloaded with it, stopped before the store.

pub mod command;
pub mod deliver;
pub mod endpoints;
pub mod sign;
pub mod target;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;

use crate::store::Store;
use deliver::{Settings, Webhooks};
use endpoints::Endpoint;

/// The server's webhooks: the endpoints file it reads and the deliveries to its endpoints.
pub struct Running {
    path: PathBuf,
    webhooks: Webhooks,
}

impl Running {
    /// Reads the endpoints file at `path` and starts delivering: a file that does not read
    /// fails the start, as a broken keys file does; a missing one is no endpoints yet.
    pub async fn start(
        store: &Store,
        path: &Path,
        schedule: Vec<Duration>,
        allow_private: bool,
        ca: Option<&Path>,
    ) -> anyhow::Result<Running> {
        let endpoints = read(path).with_context(|| format!("--webhooks {}", path.display()))?;
        let settings = Settings {
            schedule,
            allow_private,
            tls: deliver::client_tls(ca)?,
        };
        tracing::info!(endpoints = endpoints.len(), file = %path.display(), "webhooks loaded");
        Ok(Running {
            path: path.to_owned(),
            webhooks: Webhooks::start(store.clone(), settings, endpoints).await,
        })
    }

    /// Reads the file again; on an error the endpoints stay as they were. Returns how many
    /// there are now.
    pub async fn reload(&self) -> anyhow::Result<usize> {
        let endpoints = read(&self.path)?;
        let count = endpoints.len();
        self.webhooks.reload(endpoints).await;
        Ok(count)
    }

    pub async fn stop(&self) {
        self.webhooks.stop().await;
    }
}

fn read(path: &Path) -> anyhow::Result<Vec<Endpoint>> {
    match endpoints::load(path)? {
        Some(endpoints) => Ok(endpoints),
        None => {
            tracing::info!(file = %path.display(), "no webhooks file there yet: no endpoints");
            Ok(Vec::new())
        }
    }
}
