//! petstore: the Animal Store API over HTTPS, in one binary. This file only wires the parts
//! together (flags, logging, keys, TLS, socket, store, serve, stop) and maps the outcome to
//! an exit code: 0 for a clean stop, 1 with `error: ...` on stderr for a failed start.

mod api;
mod auth;
mod config;
mod error;
mod lifecycle;
mod pet;
mod server;
mod service;
mod store;
mod tls;

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::Parser;

use crate::config::{Action, Cli, Config};

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.into_action()? {
        Action::NewKey { label } => {
            let (key, line) = auth::new_key(&label)?;
            println!("{key}");
            println!("{line}");
            eprintln!("the first line is the key: give it to the client, it is shown only once");
            eprintln!("the second line admits it: append it to the API keys file");
            Ok(())
        }
        Action::Serve(config) => {
            init_logging();
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .thread_name("petstore")
                .build()
                .context("starting the async runtime")?;
            runtime.block_on(serve(config))
        }
    }
}

async fn serve(config: Config) -> anyhow::Result<()> {
    let mut signals = lifecycle::Signals::install()?;
    let keys = auth::KeySet::load(&config.api_keys)?;
    let tls = tls::load(&config.tls_cert, &config.tls_key)?;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("listening on {}", config.listen))?;
    let address = listener.local_addr().context("reading the bound address")?;
    let (store, pets) = store::Store::open(&config.db)
        .with_context(|| format!("opening database {}", config.db.display()))?;

    tracing::info!(path = %config.db.display(), pets, "database open");
    tracing::info!(keys = keys.len(), "API keys loaded");
    tracing::info!(%address, "listening on");

    let app = service::App::new(store.clone(), Arc::new(keys));
    let stop = async {
        let signal = signals.stopped().await;
        tracing::info!(signal, "stopping");
    };
    server::serve(listener, tls, app, stop, config.shutdown_timeout).await;
    store.close().await;
    tracing::info!("stopped");
    Ok(())
}

/// Logs go to stderr, where journald or the terminal takes them; `RUST_LOG` sets the level.
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}
