//! Rate limits: `--rate-limit` per API key and `--auth-failure-limit` per client address, both
//! GCRA limiters from the governor crate, and `AddressStore`, the bounded state store the
//! per-address limiter keeps its state in. A refusal is a `Refusal`, which `error.rs` turns into
//! a 429 with `Retry-After`, `RateLimit-Policy` and `RateLimit`.
//! Invariants: the auth-failure limit is consulted only for a key that is not valid, so it can
//! turn a 401 into a 429 and never refuse a valid key; its memory is bounded whatever the number
//! of addresses (at most `MAX_ADDRESSES` entries).

use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::num::NonZeroU32;
use std::str::FromStr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::nanos::Nanos;
use governor::state::StateStore;
use governor::state::keyed::{DefaultKeyedStateStore, ShrinkableKeyedStateStore};
use governor::{Quota, RateLimiter};

/// Client addresses the auth-failure limiter remembers at most, over its two generations.
pub const MAX_ADDRESSES: usize = 65_536;

/// The longest a limiter's whole burst may take to refill: beyond it governor's nanosecond
/// arithmetic would overflow, and no operator means it.
const MAX_REFILL: Duration = Duration::from_secs(366 * 86_400);

/// A rate as the flags give it, `COUNT/UNIT`: e.g. `200/s`, `6000/min`, `100000/h`, `1000/d`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rate {
    pub count: NonZeroU32,
    /// The window in whole seconds: 1, 60, 3600 or 86400.
    pub window_secs: u64,
}

impl FromStr for Rate {
    type Err = String;

    fn from_str(text: &str) -> Result<Rate, String> {
        let usage = || format!("{text:?}: expected COUNT/UNIT, e.g. 200/s, 6000/min, 100000/h");
        let (count, unit) = text.split_once('/').ok_or_else(usage)?;
        let count: NonZeroU32 = count.trim().parse().map_err(|_| usage())?;
        let window_secs = match unit.trim() {
            "s" | "sec" | "second" => 1,
            "m" | "min" | "minute" => 60,
            "h" | "hour" => 3600,
            "d" | "day" => 86_400,
            _ => return Err(usage()),
        };
        let rate = Rate { count, window_secs };
        if rate.period().is_zero() {
            return Err(format!("{text:?}: at most one request a nanosecond"));
        }
        Ok(rate)
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let unit = match self.window_secs {
            1 => "s",
            60 => "min",
            3600 => "h",
            _ => "d",
        };
        write!(f, "{}/{unit}", self.count)
    }
}

impl Rate {
    /// The time one request's allowance takes to come back.
    fn period(&self) -> Duration {
        Duration::from_secs(self.window_secs) / self.count.get()
    }
}

/// `--auth-failure-limit`'s value: a rate, or `off`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateOrOff(pub Option<Rate>);

impl FromStr for RateOrOff {
    type Err = String;

    fn from_str(text: &str) -> Result<RateOrOff, String> {
        if text.trim().eq_ignore_ascii_case("off") {
            return Ok(RateOrOff(None));
        }
        text.parse().map(|rate| RateOrOff(Some(rate)))
    }
}

/// A rate with the burst allowed above it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limit {
    pub rate: Rate,
    pub burst: NonZeroU32,
}

impl Limit {
    /// Checks that governor can hold this limit (see `MAX_REFILL`).
    pub fn new(rate: Rate, burst: NonZeroU32) -> anyhow::Result<Limit> {
        let refill = rate.period().checked_mul(burst.get());
        anyhow::ensure!(
            refill.is_some_and(|refill| refill <= MAX_REFILL),
            "a burst of {burst} at {rate} takes more than a year to refill"
        );
        Ok(Limit { rate, burst })
    }

    fn quota(&self) -> Option<Quota> {
        Quota::with_period(self.rate.period()).map(|quota| quota.allow_burst(self.burst))
    }
}

/// Which limit refused a request, as `RateLimit-Policy` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// The policy's name: `per-key` or `auth-failure`.
    pub name: &'static str,
    pub rate: Rate,
}

/// A request over a limit: the policy it broke and how long until one more is allowed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub policy: Policy,
    pub wait: Duration,
}

impl Refusal {
    /// Whole seconds until a request may succeed, rounded up and at least 1: what
    /// `Retry-After` and `RateLimit`'s `t` say.
    pub fn wait_secs(&self) -> u64 {
        let secs = self.wait.as_secs() + u64::from(self.wait.subsec_nanos() > 0);
        secs.max(1)
    }
}

type KeyLimiter = RateLimiter<Arc<str>, DefaultKeyedStateStore<Arc<str>>, DefaultClock>;
type AddressLimiter = RateLimiter<Ipv6Addr, AddressStore, DefaultClock>;

/// The limits in force, shared by every request.
pub struct RateLimits {
    per_key: Option<(Policy, KeyLimiter)>,
    auth_failures: Option<(Policy, AddressLimiter)>,
}

impl RateLimits {
    pub fn new(per_key: Option<Limit>, auth_failures: Option<Limit>) -> anyhow::Result<RateLimits> {
        let per_key = per_key
            .map(|limit| -> anyhow::Result<_> {
                let policy = Policy {
                    name: "per-key",
                    rate: limit.rate,
                };
                Ok((policy, RateLimiter::keyed(quota(&limit)?)))
            })
            .transpose()?;
        let auth_failures = auth_failures
            .map(|limit| -> anyhow::Result<_> {
                let policy = Policy {
                    name: "auth-failure",
                    rate: limit.rate,
                };
                let limiter = RateLimiter::new(
                    quota(&limit)?,
                    AddressStore::new(MAX_ADDRESSES),
                    DefaultClock::default(),
                );
                Ok((policy, limiter))
            })
            .transpose()?;
        Ok(RateLimits {
            per_key,
            auth_failures,
        })
    }

    /// Counts one request of the key labelled `label`. Keys are told apart by label, so a
    /// holder with two keys under one label (during a rotation) has one budget.
    pub fn check_key(&self, label: &Arc<str>) -> Result<(), Refusal> {
        let Some((policy, limiter)) = &self.per_key else {
            return Ok(());
        };
        limiter.check_key(label).map_err(|not_until| Refusal {
            policy: *policy,
            wait: not_until.wait_time_from(limiter.clock().now()),
        })
    }

    /// Counts one request from `peer` (as `SocketAddr`'s `Display` writes it) whose key is not
    /// valid. Only that path parses the address, so the hot path pays nothing for it.
    pub fn check_auth_failure(&self, peer: &str) -> Result<(), Refusal> {
        let Some((policy, limiter)) = &self.auth_failures else {
            return Ok(());
        };
        // A peer that does not parse cannot happen; it shares one budget rather than none.
        let address = peer
            .parse::<SocketAddr>()
            .map_or(Ipv6Addr::UNSPECIFIED, |peer| address_key(peer.ip()));
        limiter.check_key(&address).map_err(|not_until| Refusal {
            policy: *policy,
            wait: not_until.wait_time_from(limiter.clock().now()),
        })
    }
}

fn quota(limit: &Limit) -> anyhow::Result<Quota> {
    limit
        .quota()
        .ok_or_else(|| anyhow::anyhow!("{}: a rate needs a period above zero", limit.rate))
}

/// The budget an address draws on: its own for IPv4, its /64 for IPv6 (one host or LAN is
/// usually given a whole /64, so a single address would be a budget per guess). IPv4 is kept
/// IPv4-mapped, which no masked /64 can equal (their low 64 bits are zero).
pub fn address_key(ip: IpAddr) -> Ipv6Addr {
    match ip.to_canonical() {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => Ipv6Addr::from_bits(v6.to_bits() & !u128::from(u64::MAX)),
    }
}

/// A governor state store of bounded size: two generations of at most `cap / 2` addresses
/// each. An address is looked up in both and kept in the current one; when the current one is
/// full it becomes the previous one and the older is dropped, so an address unseen for a whole
/// generation starts again with a fresh burst. One mutex, since only requests with a key that is
/// not valid come here.
pub struct AddressStore {
    generations: Mutex<Generations>,
}

struct Generations {
    current: HashMap<Ipv6Addr, Nanos>,
    previous: HashMap<Ipv6Addr, Nanos>,
    /// Entries one generation holds at most.
    per_generation: usize,
}

impl AddressStore {
    pub fn new(cap: usize) -> AddressStore {
        AddressStore {
            generations: Mutex::new(Generations {
                current: HashMap::new(),
                previous: HashMap::new(),
                per_generation: (cap / 2).max(1),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Generations> {
        self.generations
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl Generations {
    fn insert(&mut self, key: Ipv6Addr, state: Nanos) {
        if let Some(slot) = self.current.get_mut(&key) {
            *slot = state;
            return;
        }
        if self.current.len() >= self.per_generation {
            self.previous = std::mem::take(&mut self.current);
        }
        self.current.insert(key, state);
    }
}

impl ShrinkableKeyedStateStore<Ipv6Addr> for AddressStore {
    fn retain_recent(&self, drop_below: Nanos) {
        let mut generations = self.lock();
        generations.current.retain(|_, state| *state > drop_below);
        generations.previous.retain(|_, state| *state > drop_below);
    }

    fn len(&self) -> usize {
        let generations = self.lock();
        generations.current.len() + generations.previous.len()
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl StateStore for AddressStore {
    type Key = Ipv6Addr;

    fn measure_and_replace<T, F, E>(&self, key: &Ipv6Addr, f: F) -> Result<T, E>
    where
        F: Fn(Option<Nanos>) -> Result<(T, Nanos), E>,
    {
        let mut generations = self.lock();
        let state = match generations.current.get(key) {
            Some(state) => Some(*state),
            // Moved forward even when refused below, so an address that keeps guessing stays.
            None => generations.previous.remove(key).inspect(|state| {
                generations.insert(*key, *state);
            }),
        };
        let (outcome, state) = f(state)?;
        generations.insert(*key, state);
        Ok(outcome)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_count_slash_unit() {
        let rate = |count: u32, window_secs| Rate {
            count: NonZeroU32::new(count).expect("nonzero"),
            window_secs,
        };
        assert_eq!("200/s".parse(), Ok(rate(200, 1)));
        assert_eq!("6000/min".parse(), Ok(rate(6000, 60)));
        assert_eq!("100000/h".parse(), Ok(rate(100_000, 3600)));
        assert_eq!("5/d".parse(), Ok(rate(5, 86_400)));
        for bad in [
            "",
            "200",
            "0/s",
            "-1/s",
            "10/week",
            "/s",
            "1.5/s",
            "2000000000/s",
        ] {
            assert!(bad.parse::<Rate>().is_err(), "{bad}");
        }
        assert_eq!("off".parse(), Ok(RateOrOff(None)));
        assert_eq!("20/s".parse(), Ok(RateOrOff(Some(rate(20, 1)))));
        assert_eq!(rate(6000, 60).to_string(), "6000/min");
        let one_a_day = rate(1, 86_400);
        assert!(Limit::new(one_a_day, NonZeroU32::new(366).expect("nonzero")).is_ok());
        assert!(Limit::new(one_a_day, NonZeroU32::new(367).expect("nonzero")).is_err());
    }

    #[test]
    fn ipv4_is_keyed_per_address_and_ipv6_per_64() {
        let key = |text: &str| address_key(text.parse().expect("an address"));
        assert_ne!(key("192.0.2.1"), key("192.0.2.2"));
        assert_eq!(key("192.0.2.1"), key("::ffff:192.0.2.1"));
        assert_eq!(key("2001:db8:1:2::1"), key("2001:db8:1:2:ffff::9"));
        assert_ne!(key("2001:db8:1:2::1"), key("2001:db8:1:3::1"));
        assert_ne!(key("0.0.0.0"), key("::"));
    }

    #[test]
    fn a_million_addresses_stay_within_the_cap_and_a_recent_one_keeps_its_state() {
        // An hour a request: nothing comes back while the test runs, however slow the machine.
        let quota = Quota::with_period(Duration::from_secs(3600))
            .expect("a period")
            .allow_burst(NonZeroU32::new(3).expect("nonzero"));
        let limiter: AddressLimiter = RateLimiter::new(
            quota,
            AddressStore::new(MAX_ADDRESSES),
            DefaultClock::default(),
        );
        let recent = address_key("198.51.100.7".parse().expect("an address"));
        for n in 0..1_000_000u32 {
            let address = address_key(IpAddr::from(n.to_be_bytes()));
            assert!(
                limiter.check_key(&address).is_ok(),
                "a new address has its burst"
            );
            // The recent address keeps asking among the crowd: it uses its burst once and stays
            // refused, however many others come and go.
            if n % 1000 == 0 {
                let outcome = limiter.check_key(&recent);
                assert_eq!(outcome.is_ok(), n < 3000, "request {n}");
                assert!(
                    limiter.len() <= MAX_ADDRESSES,
                    "{} addresses",
                    limiter.len()
                );
            }
        }
        assert!(limiter.len() <= MAX_ADDRESSES);
        assert!(
            limiter.len() >= MAX_ADDRESSES / 2,
            "a generation is kept whole"
        );
        assert!(limiter.check_key(&recent).is_err(), "still refused");
    }
}
