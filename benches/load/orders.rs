//! The orders part (issue 29, "Sell a pet once"): what an order costs against a create, that
//! a pet is sold once however many clients race for it, and what the inventory costs at 1M.
//!
//! - Orders against creates (`BENCH_ONLY=orders`): one fresh redb petstore filled with
//!   `ORDER_POOL` available pets, then rounds of 64 clients creating pets and 64 clients
//!   placing orders, windows of the same length back to back on the same server. Each order
//!   asks for a pet no other order asked for (ids from one shared counter), so every answer
//!   must be 201; the goal is the median of the rounds' orders a core over creates a core.
//! - The race: 1,000 available pets on a fresh store, 64 clients each ordering random pets
//!   among those no 201 has taken yet, until every pet has one; then every 201's order is
//!   completed. Each pet must have had exactly one 201 (every other attempt 409
//!   `pet_not_available`), read back `sold`, and the inventory's `sold` must have grown by
//!   1,000. On redb (`orders`), and on PostgreSQL (`orders-pg`) with two petstore instances on
//!   one database, the clients split between them.
//! - The inventory at 1M (`orders`, on the 1M store of the scaling runs): first its counts
//!   against those of the fill, then `GET /v1/store/inventory` against get-one in back-to-back
//!   rounds on the same server, 64 HTTP/1.1 clients each; the goal is their ratio a core.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HOST, HeaderValue};
use hyper::{Method, Request, Uri};
use serde_json::Value;
use tokio::time::{Instant, timeout_at};

use crate::check::Expect;
use crate::client::{BEARER, Conn, Tls};
use crate::figures::{Kind, Race};
use crate::load::{Outcome, Protocol, Sample};
use crate::process::{self, CLK_TCK, Server, cpu_ticks, steal_ticks};
use crate::report::{Report, Row, thousands};
use crate::{Bench, CLIENTS, PAIR_WARMUP, Pick, Spec, WRITER_THREAD, fill, pg};

/// The rows of orders against creates, paired by round.
pub const PLACE: &str = "orders place-64";
pub const CREATE: &str = "orders create-64";
/// The rows of the inventory against get-one on the 1M store, paired by round.
pub const INVENTORY: &str = "orders inventory";
pub const GET_ONE: &str = "orders get-one";
/// The race's row.
pub const RACE: &str = "orders race";
/// Available pets before the first order. The create windows add as many available pets as
/// they create, ahead of the counter; this covers what the orders take beyond that, even at
/// 1.5 times the creates' rate over the default five rounds.
const ORDER_POOL: u64 = 200_000;
/// The pets the race's clients fight over.
pub const RACE_PETS: u64 = 1_000;
/// The race ends by then: a pet whose 201 was lost (a failed connection) is never won again.
const RACE_LIMIT: Duration = Duration::from_secs(60);
/// One request of the set-up and the read-backs, answered or not by then.
const CALL_LIMIT: Duration = Duration::from_secs(30);
const ORDERS_PATH: &str = "/v1/store/orders";
pub const INVENTORY_PATH: &str = "/v1/store/inventory";
const AVAILABLE_PET: &str = r#"{"name":"bench","categoryId":1,"status":"available"}"#;

/// The inventory's counts: available, pending, sold, unset, total.
type Counts = [u64; 5];

impl Bench<'_> {
    /// Orders against creates on one fresh redb store, then the race on another.
    pub async fn orders(&mut self) {
        self.orders_against_creates().await;
        let dir = tempfile::tempdir().expect("a temp dir for the race's store");
        let server = Server::petstore(&dir.path().join("race.redb"), &self.settings.petstore_args);
        self.race(&[&server], Kind::Petstore).await;
        self.stop(server, "orders race").await;
    }

    /// The race on PostgreSQL (the `postgres` part's cluster: fsync on, pinned with the
    /// servers), two petstore instances on one fresh database: the one-sale rule must hold
    /// across processes, not only within one writer.
    pub async fn orders_pg(&mut self) {
        if !pg::installed() {
            self.report.note(format!(
                "orders race on PostgreSQL skipped: no {}/*/bin/initdb (apt-get install postgresql)",
                pg::PG_LIB
            ));
            return;
        }
        let pg = match pg::Durable::start() {
            Ok(pg) => pg,
            Err(why) => {
                self.report
                    .fail(format!("orders race on PostgreSQL: {why}"));
                return;
            }
        };
        let database = "orders_race";
        pg.cluster.psql(&format!("CREATE DATABASE {database}"));
        let url = pg.url(database);
        let args = &self.settings.petstore_args;
        // One after the other: the first makes the schema, the second finds it. Only the
        // first counts the database's CPU, so that it is counted once.
        let first = Server::petstore(Path::new(&url), args).with_database(pg.postmaster);
        let second = Server::petstore(Path::new(&url), args);
        self.race(&[&first, &second], Kind::Postgres).await;
        self.stop(first, "orders race, PostgreSQL, first").await;
        self.stop(second, "orders race, PostgreSQL, second").await;
        drop(pg);
    }

    /// Rounds of creates then orders on one store, each window as long as the other.
    async fn orders_against_creates(&mut self) {
        let dir = tempfile::tempdir().expect("a temp dir for the orders' store");
        let server = Server::petstore(
            &dir.path().join("orders.redb"),
            &self.settings.petstore_args,
        );
        let filled = fill::fill_available(&server, &self.tls, 0, ORDER_POOL).await;
        self.report.note(format!(
            "{PLACE}: fill of {} available pets in {:.1} s",
            thousands(filled.created),
            filled.took.as_secs_f64()
        ));
        let before = match inventory(&self.tls, server.addr).await {
            Ok(counts) if filled.failed == 0 && counts == [ORDER_POOL, 0, 0, 0, ORDER_POOL] => {
                counts
            }
            Ok(counts) => {
                self.report.fail(format!(
                    "{PLACE}: after the fill ({} creates failed) the inventory is {}, not {} available",
                    filled.failed,
                    counts_text(&counts),
                    thousands(ORDER_POOL)
                ));
                self.stop(server, PLACE).await;
                return;
            }
            Err(why) => {
                self.report
                    .fail(format!("{PLACE}: the inventory after the fill: {why}"));
                self.stop(server, PLACE).await;
                return;
            }
        };

        // Orders take ids 1, 2, ...: the fill made pets 1..=ORDER_POOL on the fresh store, and
        // every create of a window adds the next id, available too.
        let next_pet = Arc::new(AtomicU64::new(1));
        let rounds = self.settings.rounds;
        let window = self.settings.window.div_f64(rounds as f64);
        // 2xx answers and CPU ticks (writer user, writer kernel, others user, others kernel)
        // of each scenario over all its runs, warm-ups included, for the CPU a request.
        let mut answered = [0u64; 2];
        let mut ticks = [[0u64; 4]; 2];
        // Bytes each scenario made the server write to the disk: an order touches more
        // tables than a create, so a commit of orders dirties more pages.
        let mut written = [0u64; 2];
        for round in 0..rounds {
            let warmup = if round == 0 {
                self.settings.warmup
            } else {
                PAIR_WARMUP.min(self.settings.warmup)
            };
            for (i, (scenario, pick, expect)) in [
                (CREATE, Pick::Create, Expect::Created),
                (PLACE, Pick::Order(&next_pet), Expect::Placed),
            ]
            .into_iter()
            .enumerate()
            {
                let spec = Spec {
                    scenario,
                    protocol: Protocol::Http1,
                    clients: CLIENTS,
                    pick,
                    expect,
                    warmup,
                    window,
                    round,
                };
                let pets = before[4] + answered[0];
                let split_before = process::ticks_by_thread(server.pid, WRITER_THREAD);
                let written_before = process::write_bytes(server.pid);
                let (ok, _) = self
                    .measure(&spec, &server, Kind::Petstore, Some(pets))
                    .await;
                let split_after = process::ticks_by_thread(server.pid, WRITER_THREAD);
                if let (Some(before), Some(after)) =
                    (written_before, process::write_bytes(server.pid))
                {
                    written[i] += after.saturating_sub(before);
                }
                answered[i] += ok;
                if let (Some(b), Some(a)) = (split_before, split_after) {
                    for (slot, tick) in ticks[i].iter_mut().enumerate() {
                        let (thread, part) = (slot / 2, slot % 2);
                        let (after, before) = if part == 0 {
                            (a[thread].0, b[thread].0)
                        } else {
                            (a[thread].1, b[thread].1)
                        };
                        *tick += after.saturating_sub(before);
                    }
                }
                let refused = self.report.rows.last().map_or(0, |row| row.outcome.non_2xx);
                if scenario == PLACE && refused > 0 {
                    let asked = next_pet.load(Ordering::Relaxed) - 1;
                    let exist = before[4] + answered[0];
                    let hint = if asked > exist {
                        format!(
                            " (the orders asked up to pet {asked}, but only {exist} exist: raise ORDER_POOL)"
                        )
                    } else {
                        String::new()
                    };
                    self.report.fail(format!(
                        "{PLACE} round {round}: {refused} orders for pets no one had ordered answered other than 2xx{hint}"
                    ));
                }
            }
        }
        for (i, scenario) in [CREATE, PLACE].into_iter().enumerate() {
            let per = |tick: u64| tick as f64 * 1e6 / CLK_TCK / answered[i].max(1) as f64;
            let [w_user, w_sys, r_user, r_sys] = ticks[i].map(per);
            self.report.note(format!(
                "{scenario}: CPU a request {:.1} us: writer thread {w_user:.1} user + {w_sys:.1} kernel, \
                 request threads {r_user:.1} user + {r_sys:.1} kernel; {} bytes to the disk a request \
                 ({} answered over all rounds)",
                w_user + w_sys + r_user + r_sys,
                thousands(written[i] / answered[i].max(1)),
                thousands(answered[i])
            ));
        }

        // Every 201 left its pet pending, every create added one available pet.
        let [created, placed] = answered;
        let want = [
            before[0] + created - placed,
            before[1] + placed,
            before[2],
            before[3],
            before[4] + created,
        ];
        match inventory(&self.tls, server.addr).await {
            Ok(counts) if counts == want => self.report.note(format!(
                "{PLACE}: inventory after {} creates and {} orders: {} (as the answers say)",
                thousands(created),
                thousands(placed),
                counts_text(&counts)
            )),
            Ok(counts) => self.report.fail(format!(
                "{PLACE}: inventory after {created} creates and {placed} orders is {}, want {}",
                counts_text(&counts),
                counts_text(&want)
            )),
            Err(why) => self
                .report
                .fail(format!("{PLACE}: the inventory after the rounds: {why}")),
        }
        self.stop(server, PLACE).await;
    }

    /// The race on `servers` (one store; the clients split between them), pushed as a row and
    /// kept for the goals. Creates its own pets first, so their ids are known, not assumed.
    async fn race(&mut self, servers: &[&Server], kind: Kind) {
        let store = store_name(kind);
        let addrs: Vec<SocketAddr> = servers.iter().map(|server| server.addr).collect();
        let creates = (0..RACE_PETS)
            .map(|_| Call::post("/v1/pets".to_owned(), AVAILABLE_PET.to_owned()))
            .collect();
        let mut pets = Vec::with_capacity(RACE_PETS as usize);
        let mut problems = Vec::new();
        for answer in calls(&self.tls, &addrs, creates).await {
            match answer.and_then(|(status, body)| json_of(status, 201, &body)) {
                Ok(pet) if pet["id"].is_u64() => pets.push(pet["id"].as_u64().unwrap_or(0)),
                Ok(pet) => problems.push(format!("a create answered {pet}")),
                Err(why) => problems.push(format!("a create: {why}")),
            }
        }
        let before = inventory(&self.tls, addrs[0]).await;
        let before = match before {
            Ok(counts) if problems.is_empty() && counts[0] >= RACE_PETS => counts,
            before => {
                problems.push(format!("the inventory before: {before:?}"));
                self.report.fail(format!(
                    "{RACE} on {store}: the set-up failed: {}",
                    summary(&problems)
                ));
                return;
            }
        };

        // The race, with the servers' CPU (and PostgreSQL's, counted by the first) over it.
        let server_ticks = || -> Option<(u64, u64)> {
            servers.iter().try_fold((0, 0), |(all, user), server| {
                let ticks = server.cpu_ticks()?;
                Some((all + ticks.all, user + ticks.user))
            })
        };
        let me = std::process::id();
        let (t0, server0, mine0, steal0) =
            (Instant::now(), server_ticks(), cpu_ticks(me), steal_ticks());
        let shared = Arc::new(Racing {
            tls: Arc::clone(&self.tls),
            remaining: Mutex::new(pets.clone()),
            deadline: t0 + RACE_LIMIT,
            broken: AtomicBool::new(false),
        });
        let mut tasks = tokio::task::JoinSet::new();
        for id in 0..CLIENTS {
            tasks.spawn(racer(Arc::clone(&shared), id, addrs[id % addrs.len()]));
        }
        let mut logs = Vec::with_capacity(CLIENTS);
        while let Some(log) = tasks.join_next().await {
            logs.push(log.expect("a racing client does not panic"));
        }
        let (t1, server1, mine1, steal1) =
            (Instant::now(), server_ticks(), cpu_ticks(me), steal_ticks());
        let took = t1 - t0;
        let seconds = took.as_secs_f64();
        let share = |from: Option<u64>, to: Option<u64>| match (from, to) {
            (Some(from), Some(to)) => to.saturating_sub(from) as f64 / CLK_TCK / seconds,
            _ => 0.0,
        };

        // Each pet: exactly one 201 over all clients; every other answer a 409.
        let mut wins: std::collections::HashMap<u64, Vec<u64>> =
            pets.iter().map(|&pet| (pet, Vec::new())).collect();
        let mut latencies_us = Vec::new();
        let (mut refused, mut errors, mut sample) = (0u64, 0u64, None);
        for log in &mut logs {
            refused += log.refused;
            errors += log.errors;
            latencies_us.append(&mut log.latencies_us);
            problems.append(&mut log.wrong);
            if sample.is_none() {
                sample = log.sample.take();
            }
            for &(pet, order) in &log.won {
                match wins.get_mut(&pet) {
                    Some(orders) => orders.push(order),
                    None => problems.push(format!("a 201 for pet {pet}, not one of the race's")),
                }
            }
        }
        latencies_us.sort_unstable();
        let won: u64 = logs.iter().map(|log| log.won.len() as u64).sum();
        let attempts = won + refused;
        let twice: Vec<String> = wins
            .iter()
            .filter(|(_, orders)| orders.len() > 1)
            .map(|(pet, orders)| format!("pet {pet}: orders {orders:?}"))
            .collect();
        let never = wins.values().filter(|orders| orders.is_empty()).count();
        if !twice.is_empty() {
            problems.push(format!(
                "{} pets got more than one 201: {}",
                twice.len(),
                summary(&twice)
            ));
        }
        if never > 0 {
            problems.push(format!(
                "{never} pets got no 201 within {RACE_LIMIT:?} ({errors} orders lost their answer)"
            ));
        }
        if errors > 0 {
            // An order whose answer was lost may have been placed: the count cannot be exact.
            problems.push(format!("{errors} orders failed on the connection"));
        }

        // Complete every 201's order, then read every pet back.
        let won_orders: Vec<(u64, u64)> = logs
            .iter()
            .flat_map(|log| log.won.iter().copied())
            .collect();
        let completes = won_orders
            .iter()
            .map(|&(_, order)| Call::post(format!("{ORDERS_PATH}/{order}/complete"), String::new()))
            .collect();
        let completed = calls(&self.tls, &addrs, completes).await;
        for (&(pet, order), answer) in won_orders.iter().zip(completed) {
            match answer.and_then(|(status, body)| json_of(status, 200, &body)) {
                Ok(json)
                    if json["status"] == "completed" && json["petId"].as_u64() == Some(pet) => {}
                Ok(json) => problems.push(format!("completing order {order}: {json}")),
                Err(why) => problems.push(format!("completing order {order}: {why}")),
            }
        }
        let reads = pets
            .iter()
            .map(|pet| Call::get(format!("/v1/pets/{pet}")))
            .collect();
        let mut sold_once = 0;
        for (&pet, answer) in pets.iter().zip(calls(&self.tls, &addrs, reads).await) {
            match answer.and_then(|(status, body)| json_of(status, 200, &body)) {
                Ok(json) if json["status"] == "sold" => {
                    if wins[&pet].len() == 1 {
                        sold_once += 1;
                    }
                }
                Ok(json) => problems.push(format!("pet {pet} after the completes: {json}")),
                Err(why) => problems.push(format!("pet {pet} after the completes: {why}")),
            }
        }
        let race_pets = pets.len() as u64;
        let want = [
            before[0] - race_pets,
            before[1],
            before[2] + race_pets,
            before[3],
            before[4],
        ];
        let after = inventory(&self.tls, addrs[0]).await;
        match &after {
            Ok(counts) if *counts == want => {}
            after => problems.push(format!(
                "the inventory after is {after:?}, want {} (before {})",
                counts_text(&want),
                counts_text(&before)
            )),
        }

        let rate = attempts as f64 / seconds;
        self.report.note(format!(
            "{RACE} on {store}, {} instance(s), {CLIENTS} clients, {} pets: {} attempts ({} 201, \
             {} 409 pet_not_available) in {:.2} s, {} attempts/s; {} pets sold exactly once; \
             inventory sold {} -> {}",
            servers.len(),
            thousands(race_pets),
            thousands(attempts),
            thousands(won),
            thousands(refused),
            seconds,
            thousands(rate.round() as u64),
            thousands(sold_once),
            thousands(before[2]),
            after.map_or("?".to_owned(), |counts| thousands(counts[2])),
        ));
        let check = if problems.is_empty() {
            Ok(())
        } else {
            Err(summary(&problems))
        };
        self.report.push(Row {
            scenario: RACE.to_owned(),
            kind,
            pets: Some(race_pets),
            round: 0,
            rss_kib: servers.iter().map(|server| server.peak_rss_kib()).sum(),
            check,
            outcome: Outcome {
                requests: attempts,
                window: took,
                latencies_us,
                // The 409s are the expected answers of the losers, not errors.
                non_2xx: refused,
                errors,
                ok_total: won,
                load_time: took,
                cpu_share: share(server0.map(|t| t.0), server1.map(|t| t.0)),
                user_share: share(server0.map(|t| t.1), server1.map(|t| t.1)),
                client_cpu_share: share(mine0, mine1),
                steal: share(steal0, steal1),
                sample,
            },
        });
        self.report.races.push(Race {
            kind,
            instances: servers.len(),
            sold_once,
            attempts,
            attempts_per_second: rate,
        });
    }

    /// On `server` (the 1M store, only read since its fill): the inventory against the
    /// fill's counts, then inventory and get-one in back-to-back rounds.
    pub async fn inventory_pairs(&mut self, server: &Server, pets: u64) {
        let [available, pending, sold, unset] = fill::statuses(pets);
        let want = [available, pending, sold, unset, pets];
        match inventory(&self.tls, server.addr).await {
            Ok(counts) if counts == want => {}
            Ok(counts) => self.report.fail(format!(
                "{INVENTORY}: the {} store's inventory is {}, its fill made {}",
                thousands(pets),
                counts_text(&counts),
                counts_text(&want)
            )),
            Err(why) => self.report.fail(format!("{INVENTORY}: {why}")),
        }
        let rounds = self.settings.rounds;
        for round in 0..rounds {
            for (scenario, pick, expect) in [
                (GET_ONE, Pick::Ids(pets), Expect::AskedPet),
                (INVENTORY, Pick::Path(INVENTORY_PATH), Expect::Inventory),
            ] {
                // The read scenarios' windows and clients; a warm server only opens its
                // connections after the first round.
                let spec = Spec {
                    scenario,
                    protocol: Protocol::Http1,
                    clients: CLIENTS,
                    pick,
                    expect,
                    warmup: if round == 0 {
                        self.settings.warmup
                    } else {
                        PAIR_WARMUP.min(self.settings.warmup)
                    },
                    window: self.settings.window.div_f64(rounds as f64),
                    round,
                };
                self.measure(&spec, server, Kind::Petstore, Some(pets))
                    .await;
            }
        }
        // The server's time of one request is not in the bench's reach (the drain skips the
        // request lines); its CPU a request and the clients' latencies are.
        let mut line = "orders, 1M store: medians of rounds:".to_owned();
        for scenario in [INVENTORY, GET_ONE] {
            line.push_str(&format!(
                " {scenario} {}",
                medians_text(&self.report, scenario)
            ));
        }
        line.pop();
        self.report.note(line);
    }
}

/// What the racing clients share.
struct Racing {
    tls: Arc<Tls>,
    /// The pets no 201 has been seen for: a client orders one of these at random, so that at
    /// the end all clients fight over the last few.
    remaining: Mutex<Vec<u64>>,
    deadline: Instant,
    /// Set at the first wrong answer: the run has failed, and a server that answers wrong
    /// would otherwise be asked again until the deadline.
    broken: AtomicBool,
}

/// One racing client's answers.
#[derive(Default)]
struct RacerLog {
    /// (pet, order) of each 201.
    won: Vec<(u64, u64)>,
    refused: u64,
    errors: u64,
    latencies_us: Vec<u32>,
    /// Answers that were neither a placed order for the pet asked for nor a 409
    /// `pet_not_available`.
    wrong: Vec<String>,
    sample: Option<Sample>,
}

/// One client of the race: orders a random pet of those still without a 201 until none is
/// left (or the race's limit).
async fn racer(racing: Arc<Racing>, id: usize, addr: SocketAddr) -> RacerLog {
    let mut log = RacerLog::default();
    let mut conn: Option<Conn> = None;
    let host = host(addr);
    // xorshift64, a seed of its own per client.
    let mut state = 0x9e37_79b9_7f4a_7c15_u64 ^ ((id as u64 + 1) << 32);
    while Instant::now() < racing.deadline && !racing.broken.load(Ordering::Relaxed) {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let pet = {
            let remaining = racing.remaining.lock().expect("remaining lock");
            if remaining.is_empty() {
                break;
            }
            remaining[(state % remaining.len() as u64) as usize]
        };
        let mut sender = match conn.take() {
            Some(sender) => sender,
            None => match timeout_at(racing.deadline, racing.tls.http1(addr)).await {
                Ok(Ok(sender)) => sender,
                _ => {
                    log.errors += 1;
                    continue;
                }
            },
        };
        let call = Call::post(ORDERS_PATH.to_owned(), format!(r#"{{"petId":{pet}}}"#));
        let started = Instant::now();
        let answer = timeout_at(racing.deadline, send(&mut sender, &host, &call)).await;
        let (status, body) = match answer {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => {
                log.errors += 1;
                continue;
            }
            Err(_) => {
                log.errors += 1;
                break;
            }
        };
        conn = Some(sender);
        let micros = started.elapsed().as_micros();
        log.latencies_us
            .push(u32::try_from(micros).unwrap_or(u32::MAX));
        let json: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        match status {
            201 if json["petId"].as_u64() == Some(pet) && json["status"] == "placed" => {
                let Some(order) = json["id"].as_u64() else {
                    log.wrong.push(format!("a 201 without an order id: {json}"));
                    racing.broken.store(true, Ordering::Relaxed);
                    continue;
                };
                log.won.push((pet, order));
                let mut remaining = racing.remaining.lock().expect("remaining lock");
                if let Some(at) = remaining.iter().position(|&p| p == pet) {
                    remaining.swap_remove(at);
                }
                if log.sample.is_none() {
                    log.sample = Some(Sample {
                        path: ORDERS_PATH.to_owned(),
                        status,
                        body,
                    });
                }
            }
            409 if json["code"] == "pet_not_available" => log.refused += 1,
            _ => {
                log.wrong.push(format!(
                    "an order for pet {pet} answered {status}: {}",
                    String::from_utf8_lossy(&body)
                ));
                racing.broken.store(true, Ordering::Relaxed);
            }
        }
    }
    log
}

/// One request of the set-up, the completes or the read-backs.
struct Call {
    method: Method,
    path: String,
    /// JSON; empty for none.
    body: String,
}

impl Call {
    fn get(path: String) -> Call {
        Call {
            method: Method::GET,
            path,
            body: String::new(),
        }
    }

    fn post(path: String, body: String) -> Call {
        Call {
            method: Method::POST,
            path,
            body,
        }
    }
}

/// Sends `calls` over up to `CLIENTS` keep-alive connections, spread over `addrs`; the
/// answers (status and body) in the order of the calls.
async fn calls(
    tls: &Arc<Tls>,
    addrs: &[SocketAddr],
    calls: Vec<Call>,
) -> Vec<Result<(u16, Bytes), String>> {
    let calls = Arc::new(calls);
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for worker in 0..CLIENTS.min(calls.len()) {
        let (calls, next, tls) = (Arc::clone(&calls), Arc::clone(&next), Arc::clone(tls));
        let addr = addrs[worker % addrs.len()];
        tasks.spawn(async move {
            let host = host(addr);
            let mut conn: Option<Conn> = None;
            let mut answers = Vec::new();
            loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                let Some(call) = calls.get(index) else {
                    break;
                };
                let deadline = Instant::now() + CALL_LIMIT;
                let answer = timeout_at(deadline, async {
                    let mut sender = match conn.take() {
                        Some(sender) => sender,
                        None => tls.http1(addr).await.map_err(|e| format!("connect: {e}"))?,
                    };
                    let answer = send(&mut sender, &host, call)
                        .await
                        .map_err(|e| e.to_string())?;
                    conn = Some(sender);
                    Ok(answer)
                })
                .await
                .unwrap_or_else(|_| Err(format!("no answer within {CALL_LIMIT:?}")));
                answers.push((index, answer));
            }
            answers
        });
    }
    let mut answers: Vec<Option<Result<(u16, Bytes), String>>> =
        (0..calls.len()).map(|_| None).collect();
    while let Some(done) = tasks.join_next().await {
        for (index, answer) in done.expect("a call task does not panic") {
            answers[index] = Some(answer);
        }
    }
    answers
        .into_iter()
        .map(|answer| answer.unwrap_or_else(|| Err("not sent".to_owned())))
        .collect()
}

/// One call on a kept connection: the status and the whole body.
async fn send(conn: &mut Conn, host: &HeaderValue, call: &Call) -> hyper::Result<(u16, Bytes)> {
    let mut request = Request::new(Full::new(Bytes::from(call.body.clone())));
    *request.method_mut() = call.method.clone();
    *request.uri_mut() = Uri::try_from(call.path.as_str()).expect("a valid request target");
    let headers = request.headers_mut();
    headers.insert(HOST, host.clone());
    headers.insert(AUTHORIZATION, HeaderValue::from_static(BEARER));
    if !call.body.is_empty() {
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    }
    let response = conn.send(request).await?;
    let status = response.status().as_u16();
    let body = response.into_body().collect().await?.to_bytes();
    Ok((status, body))
}

fn host(addr: SocketAddr) -> HeaderValue {
    HeaderValue::try_from(format!("localhost:{}", addr.port()))
        .expect("host:port is a valid header")
}

/// The JSON of an answer that had to be `want`.
fn json_of(status: u16, want: u16, body: &[u8]) -> Result<Value, String> {
    if status != want {
        return Err(format!(
            "answered {status} (wanted {want}): {}",
            String::from_utf8_lossy(body)
        ));
    }
    serde_json::from_slice(body).map_err(|e| format!("not JSON ({e})"))
}

/// `GET /v1/store/inventory` once.
async fn inventory(tls: &Arc<Tls>, addr: SocketAddr) -> Result<Counts, String> {
    let answer = calls(tls, &[addr], vec![Call::get(INVENTORY_PATH.to_owned())])
        .await
        .pop()
        .unwrap_or_else(|| Err("no answer".to_owned()));
    let json = answer.and_then(|(status, body)| json_of(status, 200, &body))?;
    let mut counts = [0; 5];
    for (count, name) in counts
        .iter_mut()
        .zip(["available", "pending", "sold", "unset", "total"])
    {
        *count = json[name]
            .as_u64()
            .ok_or_else(|| format!("no count {name:?} in {json}"))?;
    }
    Ok(counts)
}

fn counts_text(counts: &Counts) -> String {
    let [available, pending, sold, unset, total] = counts.map(thousands);
    format!("available {available}, pending {pending}, sold {sold}, unset {unset}, total {total}")
}

/// The first problems, and how many more there were.
fn summary(problems: &[String]) -> String {
    let mut shown: Vec<String> = problems.iter().take(5).cloned().collect();
    if problems.len() > 5 {
        shown.push(format!("and {} more", problems.len() - 5));
    }
    shown.join("; ")
}

/// "CPU 9.1 us (user 4.0 + kernel 5.1), p50 0.61 ms, p99 1.20 ms;": medians over the rounds
/// of `scenario`'s rows.
fn medians_text(report: &Report, scenario: &str) -> String {
    let rows: Vec<&Outcome> = report
        .rows
        .iter()
        .filter(|row| row.scenario == scenario)
        .map(|row| &row.outcome)
        .collect();
    let median = |mut values: Vec<f64>| {
        values.sort_by(f64::total_cmp);
        values.get(values.len() / 2).copied().unwrap_or(0.0)
    };
    let user = median(rows.iter().map(|o| o.cpu_per_request_us().0).collect());
    let kernel = median(rows.iter().map(|o| o.cpu_per_request_us().1).collect());
    let p50 = median(
        rows.iter()
            .map(|o| f64::from(o.percentile_us(0.50)))
            .collect(),
    );
    let p99 = median(
        rows.iter()
            .map(|o| f64::from(o.percentile_us(0.99)))
            .collect(),
    );
    format!(
        "CPU a request {:.1} us (user {user:.1} + kernel {kernel:.1}), p50 {:.2} ms, p99 {:.2} ms;",
        user + kernel,
        p50 / 1000.0,
        p99 / 1000.0
    )
}

fn store_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Postgres => "PostgreSQL",
        _ => "redb",
    }
}
