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
    status: Option<tokio::task::JoinHandle<()>>,
}

/// How often a redb server refreshes its status file (`status_file`).
const STATUS_EVERY: Duration = Duration::from_secs(2);

/// Where a server on the redb file `db` shows its endpoints' delivery state to `petstore
/// webhooks list --db`, which cannot open a file a server holds (unless `--shared-reads`).
pub fn status_file(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push(".webhooks");
    PathBuf::from(name)
}

/// What the status file holds: the feed's newest event and each endpoint's state.
#[derive(serde::Serialize, serde::Deserialize, PartialEq)]
pub struct Status {
    pub newest: u64,
    pub states: Vec<(String, crate::store::WebhookState)>,
}

impl Running {
    /// Reads the endpoints file at `path` and starts delivering: a file that does not read
    /// fails the start, as a broken keys file does; a missing one is no endpoints yet. With
    /// `status`, the endpoints' state is written there as it changes (`status_file`).
    pub async fn start(
        store: &Store,
        path: &Path,
        status: Option<PathBuf>,
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
            status: status.map(|file| tokio::spawn(keep_status(store.clone(), file))),
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
        if let Some(status) = &self.status {
            status.abort();
        }
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

/// Writes the status file whenever the state changed, every `STATUS_EVERY`. A view, not a
/// record: replaced whole (temp file and rename, so a reader never sees half of one) but not
/// synced; the store holds the state itself.
async fn keep_status(store: Store, file: PathBuf) {
    let mut last = Vec::new();
    let temp = {
        let mut name = file.as_os_str().to_owned();
        name.push(".tmp");
        PathBuf::from(name)
    };
    let mut first = true;
    loop {
        if !std::mem::take(&mut first) {
            tokio::time::sleep(STATUS_EVERY).await;
        }
        let (Ok(states), Ok(feed)) = (store.webhook_states().await, store.feed_state().await)
        else {
            continue;
        };
        let status = Status {
            newest: feed.newest,
            states,
        };
        let Ok(bytes) = serde_json::to_vec(&status) else {
            continue;
        };
        if bytes == last {
            continue;
        }
        let written = std::fs::write(&temp, &bytes).and_then(|()| std::fs::rename(&temp, &file));
        match written {
            Ok(()) => last = bytes,
            Err(e) => {
                tracing::debug!(file = %file.display(), error = %e, "writing the webhooks status file failed");
            }
        }
    }
}
