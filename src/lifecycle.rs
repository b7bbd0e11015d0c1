//! The process's conversation with its supervisor: signals in (SIGTERM and SIGINT stop,
//! SIGHUP reloads, SIGUSR1 asks for a snapshot) and sd_notify out (READY, RELOADING, STOPPING). It knows nothing of HTTP,
//! pets, keys or certificates. Handlers are installed before the server announces itself, so
//! an early signal is never lost to the default action, which would kill with no drain.

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};

use anyhow::Context;
use tokio::signal::unix::{Signal, SignalKind, signal};

/// The stop signals; `stopped` resolves on the first of them.
pub struct Stop {
    terminate: Signal,
    interrupt: Signal,
}

/// The reload signal, SIGHUP.
pub struct Reload {
    hangup: Signal,
}

/// SIGXFSZ on Linux. Its default action kills a process whose file outgrows its limit
/// (RLIMIT_FSIZE); with a handler installed the write fails with EFBIG instead, which the
/// store reports as a failed commit while the server goes on serving reads.
const SIGXFSZ: i32 = 25;

/// Installs the handlers; must run inside the tokio runtime.
pub fn install() -> anyhow::Result<(Stop, Reload)> {
    let handler = |kind: SignalKind, name: &str| {
        signal(kind).with_context(|| format!("installing the {name} handler"))
    };
    // tokio keeps a handler installed for the life of the process, so the stream can go.
    drop(handler(SignalKind::from_raw(SIGXFSZ), "SIGXFSZ")?);
    Ok((
        Stop {
            terminate: handler(SignalKind::terminate(), "SIGTERM")?,
            interrupt: handler(SignalKind::interrupt(), "SIGINT")?,
        },
        Reload {
            hangup: handler(SignalKind::hangup(), "SIGHUP")?,
        },
    ))
}

/// The snapshot signal, SIGUSR1. Installed whether or not backups are on, so a stray signal
/// is logged instead of killing the server (the default action).
pub struct SnapshotRequests {
    user1: Signal,
}

/// Installs the SIGUSR1 handler; must run inside the tokio runtime.
pub fn install_snapshot() -> anyhow::Result<SnapshotRequests> {
    Ok(SnapshotRequests {
        user1: signal(SignalKind::user_defined1()).context("installing the SIGUSR1 handler")?,
    })
}

impl SnapshotRequests {
    /// Waits for the next SIGUSR1; signals that arrive during a snapshot fold into one more.
    pub async fn requested(&mut self) {
        self.user1.recv().await;
    }
}

impl Stop {
    /// Waits for SIGTERM or SIGINT and returns its name.
    pub async fn stopped(&mut self) -> &'static str {
        tokio::select! {
            _ = self.terminate.recv() => "SIGTERM",
            _ = self.interrupt.recv() => "SIGINT",
        }
    }
}

impl Reload {
    /// Waits for the next SIGHUP; signals that arrive during a reload fold into one more.
    pub async fn requested(&mut self) {
        self.hangup.recv().await;
    }
}

/// What the service manager is told, as sd_notify(3) spells it.
#[derive(Clone, Copy, Debug)]
pub enum State {
    Ready,
    Reloading,
    Stopping,
}

/// Tells systemd about a state change. Outside systemd (no `NOTIFY_SOCKET`) it does nothing;
/// a failure to send is logged, never fatal: the server works without its supervisor.
pub fn notify(state: State) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let message = match state {
        State::Ready => "READY=1\nSTATUS=serving",
        State::Reloading => "RELOADING=1\nSTATUS=reloading",
        State::Stopping => "STOPPING=1\nSTATUS=stopping",
    };
    let sent = UnixDatagram::unbound().and_then(|socket| {
        let bytes = path.as_encoded_bytes();
        // sd_notify(3): a leading '@' names a socket in the abstract namespace.
        let address = match bytes.strip_prefix(b"@") {
            Some(name) => SocketAddr::from_abstract_name(name)?,
            None => SocketAddr::from_pathname(&path)?,
        };
        socket.send_to_addr(message.as_bytes(), &address)
    });
    if let Err(e) = sent {
        tracing::warn!(error = %e, ?state, "sd_notify failed");
    }
}
