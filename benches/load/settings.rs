//! The benchmark's knobs, read once from the environment: the warm-up and window lengths, and
//! switches for quick iterations and diagnostics. Defaults are the recorded run's settings;
//! nothing here changes what a run measures, only how long and which parts.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

/// Knobs from the environment, so a quick iteration needs no edit: BENCH_SECONDS, BENCH_WARMUP,
/// BENCH_SCALE_SECONDS, BENCH_ROUNDS, BENCH_SKIP_1M=1,
/// BENCH_ONLY=list20,get-one,scale,create,create-ab,create-keyed,postgres,rss,1m,deep-page,search,snapshot,events,events-pg,orders,orders-pg,webhooks,
/// BENCH_EVENTS_STREAMS and BENCH_EVENTS_RATE (the event feed part's streams and creates/s),
/// BENCH_WEBHOOKS_RATE (the webhooks part's creates/s in its latency run),
/// BENCH_PETSTORE_ARGS="--log-level info,petstore::service=warn" (a diagnostic: the real
/// figures use none; the `listening on` line must stay, so the filter keeps `info`) and
/// BENCH_PETSTORE_BIN=target/x86_64-unknown-linux-musl/release/petstore (the shipped static
/// build, with its own allocator, in place of the host build `cargo bench` made),
/// BENCH_BEFORE_BIN=/tmp/petstore-before (an older build: `create-ab` runs its creates in
/// rounds alternating with this one's) and BENCH_BIG_STORE=400000 (a diagnostic: the big
/// store's pets, 1,000,000 unless set, for a quick `search`).
pub struct Settings {
    pub warmup: Duration,
    pub window: Duration,
    pub scale_window: Duration,
    /// Read scenarios run as this many back-to-back pairs (baseline, petstore), each with a
    /// share of the window; their goal is the median of the pairs' ratios, so a burst of host
    /// noise in one window moves one pair, not the verdict.
    pub rounds: usize,
    pub skip_1m: bool,
    /// Parts to run (read scenario names, `scale`, `create`, `create-ab`, `create-keyed`, `postgres`, `rss`, `1m`,
    /// `deep-page`, `search`, `snapshot`, `events`, `events-pg`, `orders`, `orders-pg`, `webhooks`); all when empty. `deep-page`,
    /// `search`, `snapshot` and `orders` build the 1M store without `1m`'s crash.
    pub only: Vec<String>,
    /// Extra petstore flags, for diagnostics such as a log filter without the request lines.
    pub petstore_args: Vec<String>,
    /// The event feed part: live streams open while the clients create (BENCH_EVENTS_STREAMS,
    /// default 1,000, the server's default `--max-subscribers`), and the creates a second all
    /// clients together send (BENCH_EVENTS_RATE, default 100): every stream gets every event,
    /// so the server writes, and this process reads, streams x rate events a second.
    pub events_streams: usize,
    pub events_rate: f64,
    /// The webhooks part's latency run: the creates a second all clients together send
    /// (BENCH_WEBHOOKS_RATE, default 100, as the event feed part): every endpoint gets every
    /// event, so the server delivers endpoints x rate a second.
    pub webhooks_rate: f64,
    /// An older petstore executable (BENCH_BEFORE_BIN): `create-ab` runs the creates of it and
    /// of this build in alternating rounds, for goals of one build over another. `None`: not
    /// measured.
    pub before_exe: Option<PathBuf>,
    /// The pets of the big store (BENCH_BIG_STORE; 1,000,000 unless set, at least 100,000): a
    /// diagnostic for a quick run of `search`, whose 1,000th page of "bella" needs at least
    /// 250,000. The goals name 1M whatever it is; `deep-page` needs the full million and is
    /// skipped below it.
    pub big_store: u64,
}

/// The big store's pets when BENCH_BIG_STORE is unset: the 1M of the scaling goals.
pub const BIG_STORE: u64 = 1_000_000;

impl Settings {
    /// The settings in force, defaults for whatever is unset or unreadable.
    pub fn from_env() -> Settings {
        let seconds = |name: &str, default: f64| {
            let value = std::env::var(name)
                .ok()
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(default);
            Duration::from_secs_f64(value.max(0.0))
        };
        // Creates a second: 100 unless set to a positive number.
        let rate = |name: &str| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.parse::<f64>().ok())
                .filter(|rate| rate.is_finite() && *rate > 0.0)
                .unwrap_or(100.0)
        };
        Settings {
            warmup: seconds("BENCH_WARMUP", 2.0),
            window: seconds("BENCH_SECONDS", 10.0),
            scale_window: seconds("BENCH_SCALE_SECONDS", 5.0),
            rounds: std::env::var("BENCH_ROUNDS")
                .ok()
                .and_then(|v| v.parse::<usize>().ok())
                .unwrap_or(5)
                .max(1),
            skip_1m: std::env::var("BENCH_SKIP_1M").is_ok_and(|v| !v.is_empty() && v != "0"),
            only: words("BENCH_ONLY", ','),
            petstore_args: words("BENCH_PETSTORE_ARGS", ' '),
            events_streams: std::env::var("BENCH_EVENTS_STREAMS")
                .ok()
                .and_then(|v| v.parse::<usize>().ok())
                .unwrap_or(1000),
            events_rate: rate("BENCH_EVENTS_RATE"),
            webhooks_rate: rate("BENCH_WEBHOOKS_RATE"),
            before_exe: std::env::var_os("BENCH_BEFORE_BIN")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from),
            big_store: std::env::var("BENCH_BIG_STORE")
                .ok()
                .and_then(|v| v.replace(['_', ','], "").parse::<u64>().ok())
                .unwrap_or(BIG_STORE)
                .max(crate::READ_STORE),
        }
    }

    /// Whether the part named `part` runs (all do when BENCH_ONLY is unset).
    pub fn wants(&self, part: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|p| p == part)
    }
}

/// The petstore executable every server of the run starts: BENCH_PETSTORE_BIN, else the one
/// `cargo bench` built beside this benchmark. Read once, like the other knobs, but kept out of
/// `Settings` because every `Server::petstore` call needs it.
pub fn petstore_exe() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| {
        std::env::var_os("BENCH_PETSTORE_BIN")
            .filter(|v| !v.is_empty())
            .map_or_else(
                || PathBuf::from(env!("CARGO_BIN_EXE_petstore")),
                PathBuf::from,
            )
    })
}

/// Whether BENCH_PETSTORE_BIN replaced the executable `cargo bench` built.
pub fn petstore_exe_replaced() -> bool {
    petstore_exe() != Path::new(env!("CARGO_BIN_EXE_petstore"))
}

/// The non-empty items of an environment variable split at `separator`.
fn words(name: &str, separator: char) -> Vec<String> {
    std::env::var(name)
        .unwrap_or_default()
        .split(separator)
        .map(str::trim)
        .filter(|w| !w.is_empty())
        .map(str::to_owned)
        .collect()
}
