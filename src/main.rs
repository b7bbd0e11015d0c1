//! petstore: the Animal Store API over HTTPS, in one binary. This file only wires the parts
//! together (flags, logging, keys, TLS, socket, store, serve, stop; or a subcommand) and maps
//! the outcome to an exit code: 0 for a clean stop, 1 with `error: ...` on stderr for a failed
//! start or subcommand.

mod acme;
mod api;
mod auth;
mod backup;
mod body;
mod category;
mod check;
mod clock;
mod conditional;
mod config;
mod console;
mod copy;
mod cursor;
mod durable;
mod error;
mod event;
mod feed;
mod keys;
mod lifecycle;
mod log;
mod log_format;
mod metrics;
mod operations;
mod order;
#[cfg(test)]
mod packaging;
mod pet;
mod query;
mod ratelimit;
mod search;
mod server;
mod service;
mod store;
mod subject;
mod tls;
mod webhook;

/// musl's allocator takes one lock for every thread: see Cargo.toml.
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::Parser;

use crate::config::{Action, Cli, Config, Database, LogFormat, TlsSource};

fn main() -> ExitCode {
    one_malloc_arena();
    store::redb_file::install_panic_hook();
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// glibc builds (development, tests, `benches/`; the shipped musl build has mimalloc) share
/// one malloc arena among all threads. glibc gives each thread that allocates an arena of its
/// own, and memory goes back to the arena it came from, where only a later allocation on that
/// arena's threads reuses it. redb's page cache is filled by the writer thread and evicted by
/// request threads, so each arena ended up holding its own copy of the cache's worth of freed
/// pages: the bench's whole-run peak RSS was 24.5 MiB with an arena per thread and 20.7 MiB
/// with one, at the same speed (the server is one runtime worker, a writer and a few helpers;
/// small allocations stay in glibc's per-thread cache without the arena lock). An operator's
/// own `MALLOC_ARENA_MAX` wins.
#[cfg(target_env = "gnu")]
fn one_malloc_arena() {
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt takes two ints and no pointers. Called first in main, before any
        // other thread exists, so no second arena has been made.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 1);
        }
    }
}

#[cfg(not(target_env = "gnu"))]
fn one_malloc_arena() {}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.into_action()? {
        Action::NewKey { label } => {
            let (key, line) = auth::new_key(&label)?;
            println!("{key}");
            println!("{line}");
            eprintln!("the first line is the key: give it to the client, it is shown only once");
            eprintln!(
                "the second line admits it: append it to the API keys file (or use `petstore \
                 keys add`, which does); {}",
                keys::RELOAD_HINT
            );
            Ok(())
        }
        Action::Keys { file, command } => keys::run(&file, command),
        Action::Webhooks { file, command } => webhook::command::run(&file, command),
        Action::Copy(config) => {
            // Progress and the outcome are the command's own lines; the store logs only trouble.
            let _logs = init_logging(LogFormat::Text, Some("warn"))?;
            tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .thread_name("petstore-copy")
                .build()
                .context("starting the async runtime")?
                .block_on(copy::run(config))
        }
        Action::Check(path) => {
            let _logs = init_logging(LogFormat::Text, Some("warn"))?;
            check::run(&path)
        }
        Action::Backup { from, to } => {
            let _logs = init_logging(LogFormat::Text, Some("warn"))?;
            backup::run_once(&from, &to)
        }
        Action::Serve(config) => {
            // Held to the end of `run`, so every line is written before the process exits.
            let _logs = init_logging(config.log_format, config.log_level.as_deref())?;
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .thread_name("petstore")
                .build()
                .context("starting the async runtime")?;
            runtime.block_on(serve(*config))
        }
    }
}

async fn serve(config: Config) -> anyhow::Result<()> {
    let (mut stop, mut reload) = lifecycle::install()?;
    let snapshot_requests = lifecycle::install_snapshot()?;
    let keys = Arc::new(auth::Keys::load(&config.api_keys)?);
    let limits = ratelimit::RateLimits::new(config.rate_limit, config.auth_failure_limit)?;
    let (tls, certificate, acme) = match &config.tls {
        TlsSource::Files { cert, key } => {
            let (tls, certificate) = tls::load(cert, key)?;
            (tls, certificate, None)
        }
        TlsSource::Acme(settings) => {
            let (tls, certificate) = tls::acme()?;
            let manager = acme::Manager::new(settings.clone(), Arc::clone(&certificate))?;
            (tls, certificate, Some(manager))
        }
    };
    let listeners = server::bind(&config.listen.to_string())
        .await
        .with_context(|| format!("--listen {}", config.listen))?;
    let metrics_listener = match config.metrics_listen {
        Some(address) => Some(metrics::bind(address).await?),
        None => None,
    };
    let (location, name) = match &config.db {
        Database::Redb(path) => (
            store::Location::Redb {
                path: path.clone(),
                cache_bytes: config.cache_bytes,
                shared: config.shared_reads,
            },
            path.display().to_string(),
        ),
        // The URL never holds a password (`--db-password-file` does), so it may be shown.
        Database::Postgres(url) => (
            store::Location::Postgres(Box::new(store::parse_postgres(
                url,
                config.db_password_file.as_deref(),
                config.db_ca.as_deref(),
                config.db_pool_size,
                config.db_statement_timeout,
            )?)),
            url.clone(),
        ),
    };
    let tuning = store::Tuning {
        idempotency_ttl: config.idempotency_ttl,
        events_keep: config.events_keep,
        max_write_batch: config.max_write_batch,
        order_hold: config.order_hold,
    };
    let (store, pets) = store::Store::open(location, tuning)
        .await
        .with_context(|| format!("opening database {name}"))?;
    tracing::info!(database = %name, pets, "database open");
    tracing::info!(keys = keys.len(), "API keys loaded");
    // One line per address a name resolved to; tests and tools read the first. The pid is
    // what `kill -HUP` takes outside systemd (under it, `systemctl reload petstore`).
    let pid = std::process::id();
    for listener in &listeners {
        let address = listener.local_addr().context("reading the bound address")?;
        tracing::info!(%address, pid, "listening on");
    }
    let metrics = match metrics_listener {
        Some(listener) => {
            let address = listener.local_addr().context("reading the bound address")?;
            tracing::info!(%address, "serving metrics on");
            let counted = store.clone();
            let sources = metrics::Sources {
                pets: Box::new(move || {
                    let store = counted.clone();
                    Box::pin(async move {
                        let counts = store.inventory().await?;
                        Ok(vec![
                            (Some("available"), counts.available),
                            (Some("pending"), counts.pending),
                            (Some("sold"), counts.sold),
                            (None, counts.unset),
                        ])
                    })
                }),
                certificate_not_after: tls::not_after,
                backups: config.backup.is_some(),
                acme: acme.is_some(),
            };
            Some(tokio::spawn(metrics::serve(listener, sources)))
        }
        None => None,
    };

    let webhooks = match &config.webhooks {
        Some(path) => Some(Arc::new(
            webhook::Running::start(
                &store,
                path,
                match &config.db {
                    Database::Redb(db) => Some(webhook::status_file(db)),
                    Database::Postgres(_) => None,
                },
                config.webhook_retry_schedule.clone(),
                config.webhooks_allow_private,
                config.webhooks_ca.as_deref(),
            )
            .await?,
        )),
        None => None,
    };
    let reloads = {
        let keys = Arc::clone(&keys);
        let webhooks = webhooks.clone();
        tokio::spawn(async move {
            loop {
                reload.requested().await;
                lifecycle::notify(lifecycle::State::Reloading);
                // Each part keeps its old value when its files are broken: a bad reload
                // must never take the server down or leave it without keys.
                let certificate_ok = match certificate.reload() {
                    Ok(()) => true,
                    Err(e) => {
                        tracing::warn!(error = %format!("{e:#}"), "TLS certificate reload failed; keeping the old one");
                        false
                    }
                };
                let keys_ok = match keys.reload() {
                    Ok(count) => {
                        tracing::info!(keys = count, "API keys reloaded");
                        true
                    }
                    Err(e) => {
                        tracing::warn!(error = %format!("{e:#}"), "API keys reload failed; keeping the old ones");
                        false
                    }
                };
                let reloaded = match &webhooks {
                    Some(webhooks) => Some(webhooks.reload().await),
                    None => None,
                };
                let webhooks_ok = match reloaded {
                    None => true,
                    Some(Ok(count)) => {
                        tracing::info!(endpoints = count, "webhooks reloaded");
                        true
                    }
                    Some(Err(e)) => {
                        tracing::warn!(error = %format!("{e:#}"), "webhooks reload failed; keeping the old endpoints");
                        false
                    }
                };
                tracing::info!(certificate_ok, keys_ok, webhooks_ok, "reload done");
                lifecycle::notify(lifecycle::State::Ready);
            }
        })
    };

    let backups = backup::start(&store, config.backup.clone(), snapshot_requests);
    // Only an ACME certificate has a renewal whose state `/healthz` reports.
    let certificate_health = acme
        .is_some()
        .then_some(acme::health as api::CertificateHealth);
    let feed = feed::Feed::start(store.clone(), config.max_subscribers);
    let console = config.console_path.as_deref().map(|path| {
        tracing::info!(path, "console served");
        console::Console::new(path, store.clone(), Arc::clone(&keys), config.session_idle)
    });
    let app = service::App::new(
        store.clone(),
        keys,
        limits,
        config.body_timeout,
        certificate_health,
        feed.clone(),
        console,
    );
    let stopping = async move {
        let signal = stop.stopped().await;
        lifecycle::notify(lifecycle::State::Stopping);
        tracing::info!(signal, "stopping");
        // Streams never end by themselves: ended now, the drain waits only for answers.
        feed.stop();
    };
    let limits = server::Limits {
        max_connections: config.max_connections,
        handshake_timeout: config.handshake_timeout,
        header_timeout: config.header_timeout,
        idle_timeout: config.idle_timeout,
        drain_timeout: config.shutdown_timeout,
    };
    // Accepting before the first ACME certificate: the CA validates on this very listener.
    let mut serving = tokio::spawn(server::serve(listeners, tls, app, stopping, limits));
    let mut renewals = None;
    let mut failed = None;
    let mut ready = true;
    let mut served = false;
    if let Some(mut manager) = acme {
        tokio::select! {
            first = manager.first_certificate() => match first {
                Ok(()) => renewals = Some(tokio::spawn(manager.renew())),
                Err(e) => {
                    serving.abort();
                    ready = false;
                    failed = Some(e.context("ACME: no certificate"));
                }
            },
            // Stopped before the first certificate came.
            _ = &mut serving => (ready, served) = (false, true),
        }
    }
    if ready {
        lifecycle::notify(lifecycle::State::Ready);
    }
    if !served {
        let _ = serving.await;
    }
    if let Some(renewals) = renewals {
        renewals.abort();
    }
    reloads.abort();
    if let Some(metrics) = metrics {
        metrics.abort();
    }
    // A delivery in flight is abandoned (resent after the next start), and on PostgreSQL the
    // leases are given up, so another instance goes on at once.
    if let Some(webhooks) = &webhooks {
        webhooks.stop().await;
    }
    // A snapshot in progress stops and removes its temp file, within a few thousand entries.
    backups.stop().await;
    store.close().await;
    tracing::info!("stopped");
    failed.map_or(Ok(()), Err)
}

/// Logs go to stderr, where journald or the terminal takes them, through `log`'s buffer. The
/// filter is the flag's, else `RUST_LOG`'s, else `info`. The returned flusher writes what is
/// left when dropped.
fn init_logging(format: LogFormat, level: Option<&str>) -> anyhow::Result<log::Flusher> {
    use tracing_subscriber::EnvFilter;
    let filter = match level {
        Some(level) => {
            EnvFilter::try_new(level).with_context(|| format!("--log-level {level:?}"))?
        }
        None => EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
    };
    let (sink, flusher) =
        log::start(std::io::stderr()).context("starting the log writer thread")?;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(sink)
        .event_format(log_format::LineFormat {
            json: matches!(format, LogFormat::Json),
        })
        .init();
    Ok(flusher)
}
