//! Process signals: SIGTERM and SIGINT ask the server to stop. Handlers are installed before
//! the server announces its address, so a signal sent as soon as it is up is never lost to
//! the default action (which would kill the process with no drain).

use anyhow::Context;
use tokio::signal::unix::{Signal, SignalKind, signal};

/// The installed stop signals; `stopped` resolves on the first of them.
pub struct Signals {
    terminate: Signal,
    interrupt: Signal,
}

impl Signals {
    /// Installs the handlers; must run inside the tokio runtime.
    pub fn install() -> anyhow::Result<Signals> {
        Ok(Signals {
            terminate: signal(SignalKind::terminate()).context("installing the SIGTERM handler")?,
            interrupt: signal(SignalKind::interrupt()).context("installing the SIGINT handler")?,
        })
    }

    /// Waits for SIGTERM or SIGINT and returns its name.
    pub async fn stopped(&mut self) -> &'static str {
        tokio::select! {
            _ = self.terminate.recv() => "SIGTERM",
            _ = self.interrupt.recv() => "SIGINT",
        }
    }
}
