//! The connections to PostgreSQL: a deadpool pool whose connections are made host by host,
//! each host with its own bound on the whole connect (TCP, TLS, authentication and the
//! `target_session_attrs` check), starting from the host that last worked; and operations run
//! on a leased connection within a deadline. Invariant: a connection goes back to the pool only
//! once the operation on it has finished; one abandoned mid-way (its time ran out, or its
//! caller went away) may still have a statement in flight that the next user would queue
//! behind, so it is closed instead. A database that leaves an operation unanswered past its
//! deadline is taken as silent: the idle connections to it are closed too, and the next
//! connection tries the next host first.

use std::future::Future;
use std::ops::{Deref, DerefMut};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use deadpool_postgres::{
    ClientWrapper, Connect, Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime,
};
use tokio::task::JoinHandle;
use tokio_postgres_rustls::MakeRustlsConnect;

use super::connect::one_per_host;
use super::errors::{describe, pool_error};
use crate::store::model::StoreError;

/// How long a request waits for a pooled connection before it gets 503.
const POOL_WAIT: Duration = Duration::from_secs(2);

/// The pool and what it knows of the hosts; cheap to clone.
#[derive(Clone)]
pub(super) struct Connections {
    pool: Pool,
    /// The host a new connection tries first, shared with `HostByHost`.
    first: Arc<AtomicUsize>,
    hosts: usize,
    /// The bound on an operation, connection included.
    within: Duration,
    /// The bound on making a connection, every host tried.
    connect_within: Duration,
}

impl Connections {
    /// Builds the pool for `config`: its hosts tried in turn, each within `each_host`, and
    /// every operation bounded by `within`.
    pub(super) fn build(
        config: &tokio_postgres::Config,
        tls: MakeRustlsConnect,
        each_host: Duration,
        size: usize,
        within: Duration,
    ) -> Result<Connections, StoreError> {
        let hosts = one_per_host(config);
        let count = hosts.len();
        // Every host may use its whole bound before the last one answers.
        let connect_within = each_host.saturating_mul(u32::try_from(count).unwrap_or(u32::MAX));
        let first = Arc::new(AtomicUsize::new(0));
        let names = hosts.iter().map(host_name).collect();
        let connect = HostByHost {
            hosts,
            names,
            tls,
            each_host,
            first: Arc::clone(&first),
        };
        let manager = Manager::from_connect(
            config.clone(),
            connect,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(size)
            .wait_timeout(Some(POOL_WAIT))
            .create_timeout(Some(connect_within))
            .recycle_timeout(Some(each_host))
            .runtime(Runtime::Tokio1)
            .build()
            .map_err(|e| StoreError::Corrupt(format!("building the connection pool: {e}")))?;
        Ok(Connections {
            pool,
            first,
            hosts: count,
            within,
            connect_within,
        })
    }

    /// The bound on making a connection when every host has to be tried.
    pub(super) fn connect_within(&self) -> Duration {
        self.connect_within
    }

    /// Runs `operation` on a pooled connection within the operation bound; see `run_within`.
    pub(super) async fn run<T>(
        &self,
        operation: impl AsyncFnOnce(&mut ClientWrapper) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.run_within(self.within, operation).await
    }

    /// Runs `operation` on a pooled connection, which goes back to the pool once it has
    /// finished, whatever its outcome. Past `within`, `Io`: the connection is closed, and if
    /// the operation had its connection (the database, not the connect, kept it waiting) the
    /// idle ones are closed and the next host is tried first.
    pub(super) async fn run_within<T>(
        &self,
        within: Duration,
        operation: impl AsyncFnOnce(&mut ClientWrapper) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let leased = AtomicBool::new(false);
        let work = async {
            let mut lease = Lease(Some(self.pool.get().await.map_err(pool_error)?));
            leased.store(true, Ordering::Relaxed);
            let result = operation(&mut lease).await;
            lease.release();
            result
        };
        match tokio::time::timeout(within, work).await {
            Ok(result) => result,
            Err(_) => {
                if leased.load(Ordering::Relaxed) {
                    self.silent();
                }
                Err(StoreError::Io(format!(
                    "no answer from the database within {} s",
                    within.as_secs_f32()
                )))
            }
        }
    }

    /// The database left an open connection unanswered: it most likely leaves every other
    /// one so too, and each would cost a request its whole bound to find out. The connection
    /// in use was to the host tried first (connects start there), which is passed over next.
    fn silent(&self) {
        let closed = self.pool.retain(|_, _| false).removed.len();
        let host = self.first.load(Ordering::Relaxed);
        let _ = self.first.compare_exchange(
            host,
            (host + 1) % self.hosts.max(1),
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
        tracing::warn!(
            idle_closed = closed,
            "the database left an operation unanswered; closed its idle connections"
        );
    }

    /// A connection taken out of the pool for good, for work longer than the operation bound
    /// (`petstore copy`); within the bound on making one.
    pub(super) async fn take_own(&self) -> Result<ClientWrapper, StoreError> {
        let within = self.connect_within.saturating_add(POOL_WAIT);
        match tokio::time::timeout(within, self.pool.get()).await {
            Ok(pooled) => Ok(Object::take(pooled.map_err(pool_error)?)),
            Err(_) => Err(StoreError::Io(format!(
                "no database connection within {} s",
                within.as_secs_f32()
            ))),
        }
    }

    pub(super) fn close(&self) {
        self.pool.close();
    }
}

/// A pooled connection held for one operation; see the module's invariant.
struct Lease(Option<Object>);

impl Lease {
    fn release(mut self) {
        // Dropping the object returns it to the pool.
        self.0.take();
    }
}

impl Deref for Lease {
    type Target = ClientWrapper;

    fn deref(&self) -> &ClientWrapper {
        match &self.0 {
            Some(object) => object,
            None => unreachable!("a lease holds its connection until released or dropped"),
        }
    }
}

impl DerefMut for Lease {
    fn deref_mut(&mut self) -> &mut ClientWrapper {
        match &mut self.0 {
            Some(object) => object,
            None => unreachable!("a lease holds its connection until released or dropped"),
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(object) = self.0.take() {
            // Out of the pool for good; dropping the client ends its connection task, which
            // closes the socket (the server then rolls back whatever was open on it).
            drop(Object::take(object));
            tracing::debug!("closed a database connection abandoned mid-operation");
        }
    }
}

/// Connects to one host at a time, each within `each_host`, beginning with `first`: the host
/// that last worked, or the one after a host that failed or was abandoned mid-connect. So a
/// silent first host costs one attempt its bound, not every attempt: the next goes straight on.
struct HostByHost {
    hosts: Vec<tokio_postgres::Config>,
    /// Each host as the log names it.
    names: Vec<String>,
    tls: MakeRustlsConnect,
    each_host: Duration,
    first: Arc<AtomicUsize>,
}

type Connected = Result<(tokio_postgres::Client, JoinHandle<()>), tokio_postgres::Error>;

impl Connect for HostByHost {
    fn connect(
        &self,
        _all_hosts: &tokio_postgres::Config,
    ) -> Pin<Box<dyn Future<Output = Connected> + Send + '_>> {
        Box::pin(async move {
            let count = self.hosts.len();
            let start = self.first.load(Ordering::Relaxed);
            let mut last_error = None;
            for step in 0..count {
                let host = (start + step) % count;
                let attempt = Attempt {
                    first: &self.first,
                    host,
                    count,
                    succeeded: false,
                };
                let connecting = self.hosts[host].connect(self.tls.clone());
                match tokio::time::timeout(self.each_host, connecting).await {
                    Ok(Ok((client, connection))) => {
                        attempt.succeeded();
                        let task = tokio::spawn(async move {
                            if let Err(e) = connection.await {
                                tracing::warn!(error = %describe(&e), "database connection lost");
                            }
                        });
                        return Ok((client, task));
                    }
                    Ok(Err(e)) => {
                        tracing::warn!(host = %self.names[host], error = %describe(&e), "connecting to a database host failed");
                        last_error = Some(e);
                    }
                    Err(_) => {
                        tracing::warn!(
                            host = %self.names[host],
                            seconds = self.each_host.as_secs_f32(),
                            "a database host did not answer the connect in time"
                        );
                        // tokio-postgres's own timeout error, the one its connect_timeout gives.
                        last_error = Some(tokio_postgres::Error::__private_api_timeout());
                    }
                }
            }
            Err(last_error.unwrap_or_else(tokio_postgres::Error::__private_api_timeout))
        })
    }
}

/// `host:port` (or the socket directory) of a one-host configuration.
fn host_name(config: &tokio_postgres::Config) -> String {
    let port = config.get_ports().first().copied().unwrap_or(5432);
    match (config.get_hosts().first(), config.get_hostaddrs().first()) {
        (Some(tokio_postgres::config::Host::Tcp(host)), _) => format!("{host}:{port}"),
        (Some(tokio_postgres::config::Host::Unix(dir)), _) => dir.display().to_string(),
        (None, Some(addr)) => format!("{addr}:{port}"),
        (None, None) => "(no host)".to_owned(),
    }
}

/// One host's connect; unless it succeeded, dropping it moves `first` past this host.
struct Attempt<'a> {
    first: &'a AtomicUsize,
    host: usize,
    count: usize,
    succeeded: bool,
}

impl Attempt<'_> {
    fn succeeded(mut self) {
        self.first.store(self.host, Ordering::Relaxed);
        self.succeeded = true;
    }
}

impl Drop for Attempt<'_> {
    fn drop(&mut self) {
        if !self.succeeded {
            // Only if no other connect has moved it meanwhile.
            let _ = self.first.compare_exchange(
                self.host,
                (self.host + 1) % self.count,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
    }
}
