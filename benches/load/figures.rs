//! What the parts measure and the report keeps for the goals: which server a row measured,
//! and the figures of the event feed, orders and webhooks parts. Plain data that imports
//! nothing of the bench: the parts fill it and import the report, the report keeps it and
//! imports no part.

/// Which server a row measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// petstore on a redb file.
    Petstore,
    Baseline,
    /// petstore on a local PostgreSQL; its CPU figures include PostgreSQL's processes.
    Postgres,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Petstore => "petstore",
            Kind::Baseline => "baseline",
            Kind::Postgres => "postgres",
        }
    }
}

/// What the event feed part (`events.rs`) measured on one store.
#[derive(Clone, Copy)]
pub struct Feed {
    pub kind: Kind,
    pub streams: usize,
    pub rate: f64,
    /// The delay from a create's 201 reaching its client to its event reaching a stream, over
    /// every stream and every create of the window, in microseconds: p50, p99, max. Negative
    /// when the event came first. `None` when nothing was measured.
    pub from_201_us: Option<[i64; 3]>,
    /// The same from the create's request being sent: what the creating client waits, and
    /// then the streams.
    pub from_request_us: Option<[i64; 3]>,
    /// Server memory at the end of the window: with the streams, without them, and (redb
    /// only) with as many idle keep-alive TLS connections instead.
    pub with: Memory,
    pub without: Memory,
    pub idle: Option<Memory>,
}

/// Server memory at the end of a run's window, in KiB: peak (VmHWM) and now (VmRSS).
#[derive(Clone, Copy)]
pub struct Memory {
    pub peak_kib: u64,
    pub rss_kib: u64,
}

/// What a race of the orders part (`orders.rs`) measured.
#[derive(Clone, Copy)]
pub struct Race {
    pub kind: Kind,
    /// petstore processes on the store.
    pub instances: usize,
    /// Pets with exactly one 201, completed and read back sold.
    pub sold_once: u64,
    /// Orders sent, answered 201 or 409.
    pub attempts: u64,
    pub attempts_per_second: f64,
}

/// What the webhooks part (`webhooks.rs`) measured; `None` where a run did not happen or
/// failed.
#[derive(Default)]
pub struct Figures {
    /// The paced run's creates a second.
    pub rate: f64,
    /// From a create's 201 reaching its client to its delivery reaching a receiver, over
    /// every receiver and the window's creates, in microseconds: p50, p99, max; negative when
    /// the delivery came first. The same from the create's request.
    pub from_201_us: Option<[i64; 3]>,
    pub from_request_us: Option<[i64; 3]>,
    /// The paced run's deliveries that were not once and in order: missing, duplicated, or
    /// behind a later event.
    pub wrong: Option<u64>,
    /// The full-speed runs with endpoints, medians of rounds: deliveries a second over the
    /// window (all receivers), and the events a receiver had yet to get at its end (the mean
    /// of the receivers).
    pub deliveries_per_second: Option<f64>,
    pub behind: Option<f64>,
    /// The server's CPU a create at full speed, microseconds, medians of rounds: with the
    /// endpoints and without.
    pub cpu_with_us: Option<f64>,
    pub cpu_without_us: Option<f64>,
}
