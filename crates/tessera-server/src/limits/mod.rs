//! Rate limits: per client by plan, failed authentication per source address, and a global
//! cap on requests in flight.
//!
//! Per-client limits use GCRA (the generic cell rate algorithm) through the `governor`
//! crate, behind the [`Limiter`] trait so that a distributed backend ([`redis`]) can take
//! its place; that backend falls back to this process's memory at its [`share`] of each
//! rate when Redis fails.
//! Answers carry the `RateLimit` and `RateLimit-Policy` fields of the IETF httpapi draft
//! (draft-ietf-httpapi-ratelimit-headers-08) and, when refused, `Retry-After` (RFC 9110 10.2.3).

use std::collections::HashMap;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use governor::middleware::StateInformationMiddleware;
use governor::state::keyed::DefaultKeyedStateStore;
use governor::{Quota, RateLimiter};
use tessera_store::RateLimit;
use tokio::sync::Semaphore;

use crate::clock::{Clock, LimiterClock};

pub(crate) mod redis;

/// What a limiter decided for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Allowed; `remaining` more may come at once, and the allowance is whole again in
    /// `reset_secs`.
    Allowed {
        /// Requests left in the burst.
        remaining: u32,
        /// Seconds until the burst is whole again.
        reset_secs: u64,
    },
    /// Refused; the next request may come in `retry_after_secs`.
    Limited {
        /// Seconds to wait, rounded up.
        retry_after_secs: u64,
    },
}

/// Counts requests against a rate, per key. One implementation per backend.
#[async_trait]
pub(crate) trait Limiter: Send + Sync + std::fmt::Debug {
    /// Takes one request from `key`'s allowance under `rate`.
    async fn check(&self, key: &str, rate: RateLimit) -> Decision;
    /// Forgets keys whose allowance is whole again, to bound memory.
    fn prune(&self) {}
    /// How many keys are counted in this process's memory (0 where they live elsewhere).
    fn tracked(&self) -> usize {
        0
    }
}

type Keyed =
    RateLimiter<String, DefaultKeyedStateStore<String>, LimiterClock, StateInformationMiddleware>;

/// GCRA in this process's memory (governor). Instances of a cluster each count on their own;
/// [`redis::RedisLimiter`] counts for all of them.
#[derive(Debug)]
pub(crate) struct LocalLimiter {
    /// One keyed limiter per distinct rate; plans with the same rate share one, keyed by
    /// client, so they never interfere.
    by_rate: RwLock<HashMap<RateLimit, Arc<Keyed>>>,
    clock: Clock,
}

fn quota(rate: RateLimit) -> Quota {
    let period = Duration::from_secs(u64::from(rate.period_secs));
    let one = NonZeroU32::MIN;
    let count = NonZeroU32::new(rate.count).unwrap_or(one);
    let burst = NonZeroU32::new(rate.burst).unwrap_or(one);
    Quota::with_period(period / count.get())
        .unwrap_or_else(|| Quota::per_second(count))
        .allow_burst(burst)
}

impl LocalLimiter {
    /// A limiter reading `clock`.
    pub(crate) fn new(clock: Clock) -> Self {
        Self {
            by_rate: RwLock::default(),
            clock,
        }
    }

    fn limiter(&self, rate: RateLimit) -> Arc<Keyed> {
        if let Some(found) = self
            .by_rate
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&rate)
        {
            return found.clone();
        }
        self.by_rate
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .entry(rate)
            .or_insert_with(|| {
                Arc::new(
                    RateLimiter::dashmap_with_clock(quota(rate), LimiterClock(self.clock.clone()))
                        .with_middleware::<StateInformationMiddleware>(),
                )
            })
            .clone()
    }
}

#[async_trait]
impl Limiter for LocalLimiter {
    async fn check(&self, key: &str, rate: RateLimit) -> Decision {
        let limiter = self.limiter(rate);
        let emission = Duration::from_secs(u64::from(rate.period_secs)) / rate.count.max(1);
        match limiter.check_key(&key.to_owned()) {
            Ok(snapshot) => {
                let remaining = snapshot.remaining_burst_capacity();
                let missing = rate.burst.saturating_sub(remaining);
                Decision::Allowed {
                    remaining,
                    reset_secs: (emission * missing).as_secs_f64().ceil() as u64,
                }
            }
            Err(not_until) => Decision::Limited {
                retry_after_secs: (not_until
                    .wait_time_from(self.clock.elapsed())
                    .as_secs_f64()
                    .ceil() as u64)
                    .max(1),
            },
        }
    }

    fn tracked(&self) -> usize {
        self.by_rate
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .map(|limiter| limiter.len())
            .sum()
    }

    fn prune(&self) {
        for limiter in self
            .by_rate
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
        {
            limiter.retain_recent();
            limiter.shrink_to_fit();
        }
    }
}

/// One instance's share of `rate` when `instances` count apart (the Redis limiter's
/// fallback): a rate `instances` times slower, and the burst divided likewise but at least
/// one request. Never unlimited; `4/min` over 2 instances is `2/min`, burst 2, at each.
pub(crate) fn share(rate: RateLimit, instances: NonZeroU32) -> RateLimit {
    let n = instances.get();
    RateLimit {
        count: rate.count,
        period_secs: rate.period_secs.saturating_mul(n),
        burst: (rate.burst / n).max(1),
    }
}

/// Allowances of failed client authentications (RFC 6749 section 2.3.1, RFC 6819 section
/// 5.1.4.2.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailureRates {
    /// Per source address and client: one caller's mistakes with one client.
    pub per_source_and_client: RateLimit,
    /// Per client, from every source: guessing spread over many addresses.
    pub per_client: RateLimit,
    /// Per source address, whatever client it names: a coarse cap far above legitimate
    /// rates, so that one neighbour behind a NAT cannot exhaust it for the others.
    pub per_source: RateLimit,
    /// How many counters are kept in memory at most. Past this, under a flood of distinct
    /// addresses and client ids, a failure is answered 429 without a counter of its own,
    /// so memory stays bounded; correct credentials are never affected.
    pub max_tracked: usize,
}

impl Default for FailureRates {
    fn default() -> Self {
        let per_minute = |count| RateLimit {
            count,
            period_secs: 60,
            burst: count,
        };
        Self {
            per_source_and_client: per_minute(10),
            per_client: per_minute(100),
            per_source: per_minute(1_000),
            max_tracked: 100_000,
        }
    }
}

/// Failed client authentications, counted so that floods cost little. Generated secrets
/// carry 256 random bits, so guessing cannot succeed: the throttle bounds the cost and log
/// volume of floods, not what an attacker learns. It is asked only after credentials
/// failed, so correct credentials are never refused by it, and one client's failures from
/// an address leave the other clients at that address alone.
#[derive(Debug)]
pub(crate) struct AuthThrottle {
    limiter: Arc<dyn Limiter>,
    rates: FailureRates,
}

impl AuthThrottle {
    /// Counts failures in `limiter` under `rates`.
    pub(crate) fn new(limiter: Arc<dyn Limiter>, rates: FailureRates) -> Self {
        Self { limiter, rates }
    }

    /// Counts a failed authentication from `source` naming `client` (only a registered
    /// client's id: an unknown id is the caller's to vary, and counts for its source
    /// alone). Returns the seconds to wait when an allowance is exhausted.
    pub(crate) async fn failed(&self, source: Option<IpAddr>, client: Option<&str>) -> Option<u64> {
        if self.limiter.tracked() >= self.rates.max_tracked {
            return Some(1);
        }
        let bucket = source.map(source_bucket);
        let mut checks: Vec<(String, RateLimit)> = Vec::with_capacity(3);
        if let Some(bucket) = &bucket {
            checks.push((format!("auth-failure:src:{bucket}"), self.rates.per_source));
        }
        if let Some(client) = client {
            checks.push((
                format!("auth-failure:client:{client}"),
                self.rates.per_client,
            ));
            if let Some(bucket) = &bucket {
                checks.push((
                    format!("auth-failure:pair:{bucket}:{client}"),
                    self.rates.per_source_and_client,
                ));
            }
        }
        let mut wait = None;
        for (key, rate) in checks {
            if let Decision::Limited { retry_after_secs } = self.limiter.check(&key, rate).await {
                wait = wait.max(Some(retry_after_secs));
            }
        }
        wait
    }

    /// Whether a request from `source` naming `client` may make Tessera fetch a document
    /// on its behalf (a client's `jwks_uri`, an issuer's keys): asked before the fetch, it
    /// counts the request against that address's allowance of failures for that client, and
    /// says no once it is used up, so that a caller refused for failures causes no more
    /// outbound requests. Keys are cached and one fetch serves every request waiting on it,
    /// so correct credentials seldom pass here, and only their own address's mistakes with
    /// their own client can refuse them.
    pub(crate) async fn allows_fetch(&self, source: Option<IpAddr>, client: &str) -> bool {
        let Some(source) = source else {
            return true;
        };
        if self.limiter.tracked() >= self.rates.max_tracked {
            return false;
        }
        let key = format!("auth-failure:pair:{}:{client}", source_bucket(source));
        matches!(
            self.limiter
                .check(&key, self.rates.per_source_and_client)
                .await,
            Decision::Allowed { .. }
        )
    }

    /// The allowance per source address and client, for the rate limit fields.
    pub(crate) fn rate(&self) -> RateLimit {
        self.rates.per_source_and_client
    }
}

/// What a source address is counted as: an IPv4 address, or the /64 of an IPv6 address
/// (one host is usually given a whole /64). IPv4-mapped IPv6 addresses count as IPv4.
pub(crate) fn source_bucket(ip: IpAddr) -> IpAddr {
    match canonical(ip) {
        IpAddr::V6(v6) => {
            let mut octets = v6.octets();
            octets[8..].fill(0);
            IpAddr::from(octets)
        }
        v4 => v4,
    }
}

/// `::ffff:a.b.c.d` as `a.b.c.d`, so that a dual-stack listener's peers compare, throttle
/// and audit as the IPv4 addresses they are.
pub(crate) fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

/// A cap on requests being worked on. A request is admitted once its body has arrived, so
/// slow uploads (bounded by the request timeout) cannot take the slots; over the cap the
/// answer is 503 with `Retry-After: 1` rather than an unbounded queue.
#[derive(Debug)]
pub(crate) struct InFlight {
    slots: Arc<Semaphore>,
    capacity: usize,
}

impl InFlight {
    /// Allows `slots` requests at once.
    pub(crate) fn new(slots: usize) -> Self {
        Self {
            slots: Arc::new(Semaphore::new(slots)),
            capacity: slots,
        }
    }

    /// How many requests are being worked on now.
    pub(crate) fn in_use(&self) -> usize {
        self.capacity - self.slots.available_permits()
    }

    /// A slot for one request, held until it is dropped.
    pub(crate) fn admit(&self) -> Result<Slot, Busy> {
        let permit = self.slots.clone().try_acquire_owned().map_err(|_| Busy)?;
        Ok(Slot {
            slots: self.slots.clone(),
            permit: std::sync::Mutex::new(Some(permit)),
        })
    }
}

/// One request's place under [`InFlight`]'s cap. The request gives it back while it waits
/// on something that is not its own work (a key fetch that one request started for all,
/// `crate::grant::assertion`), so that many requests waiting on one slow host cannot take every
/// slot from the other clients, and takes one again after.
#[derive(Debug)]
pub(crate) struct Slot {
    slots: Arc<Semaphore>,
    /// `None` while lent.
    permit: std::sync::Mutex<Option<tokio::sync::OwnedSemaphorePermit>>,
}

impl Slot {
    /// Awaits `wait` without holding the slot, then takes one again: [`Busy`] when the cap
    /// is full by then, for the same 503 as at admission.
    pub(crate) async fn lend<T>(
        &self,
        wait: impl std::future::Future<Output = T>,
    ) -> Result<T, Busy> {
        self.lend_then(wait, |_| true).await
    }

    /// As [`Slot::lend`], but takes a slot again only when `goes_on` says that the request
    /// has work left with what it waited for; otherwise it finishes without one (a refusal
    /// is no work), so that many requests woken at once take no slot only to refuse.
    pub(crate) async fn lend_then<T>(
        &self,
        wait: impl std::future::Future<Output = T>,
        goes_on: impl FnOnce(&T) -> bool,
    ) -> Result<T, Busy> {
        let held = self.permit.lock().unwrap_or_else(|p| p.into_inner()).take();
        let lent = held.is_some();
        drop(held);
        let outcome = wait.await;
        if lent && goes_on(&outcome) {
            let permit = self.slots.clone().try_acquire_owned().map_err(|_| Busy)?;
            *self.permit.lock().unwrap_or_else(|p| p.into_inner()) = Some(permit);
        }
        Ok(outcome)
    }
}

/// Every slot of [`InFlight`] is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Busy;

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn gcra_allows_the_burst_then_refuses_with_a_wait() {
        let clock = crate::clock::ManualClock::at(1_000);
        let limiter = LocalLimiter::new(clock.clone().into());
        let rate = RateLimit {
            count: 2,
            period_secs: 60,
            burst: 2,
        };
        assert!(matches!(
            limiter.check("a", rate).await,
            Decision::Allowed { remaining: 1, .. }
        ));
        assert!(matches!(
            limiter.check("a", rate).await,
            Decision::Allowed { remaining: 0, .. }
        ));
        match limiter.check("a", rate).await {
            Decision::Limited { retry_after_secs } => assert_eq!(retry_after_secs, 30),
            other => panic!("{other:?}"),
        }
        // Another key has its own allowance.
        assert!(matches!(
            limiter.check("b", rate).await,
            Decision::Allowed { .. }
        ));
        // One emission interval later, one more request.
        clock.advance(Duration::from_secs(29));
        assert!(matches!(
            limiter.check("a", rate).await,
            Decision::Limited {
                retry_after_secs: 1
            }
        ));
        clock.advance(Duration::from_secs(1));
        assert!(matches!(
            limiter.check("a", rate).await,
            Decision::Allowed { remaining: 0, .. }
        ));
    }

    #[tokio::test]
    async fn a_share_allows_its_part_of_the_burst_and_of_the_rate() {
        let clock = crate::clock::ManualClock::at(1_000);
        let limiter = LocalLimiter::new(clock.clone().into());
        let two = NonZeroU32::new(2).unwrap();
        let rate = RateLimit {
            count: 4,
            period_secs: 60,
            burst: 4,
        };
        assert_eq!(share(rate, NonZeroU32::MIN), rate);
        let half = share(rate, two);
        for _ in 0..2 {
            assert!(matches!(
                limiter.check("a", half).await,
                Decision::Allowed { .. }
            ));
        }
        // 2/min: the next one in 30 s, as 4/min over two instances.
        match limiter.check("a", half).await {
            Decision::Limited { retry_after_secs } => assert_eq!(retry_after_secs, 30),
            other => panic!("{other:?}"),
        }
        // A burst smaller than the instances still lets one request through.
        let one = RateLimit {
            count: 1,
            period_secs: 86_400,
            burst: 1,
        };
        let third = share(one, NonZeroU32::new(3).unwrap());
        assert_eq!((third.burst, third.period_secs), (1, 3 * 86_400));
    }

    #[test]
    fn addresses_are_bucketed_as_a_host_sees_them() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(canonical(ip("::ffff:10.0.0.5")), ip("10.0.0.5"));
        assert_eq!(canonical(ip("2001:db8::1")), ip("2001:db8::1"));
        assert_eq!(source_bucket(ip("::ffff:10.0.0.5")), ip("10.0.0.5"));
        assert_eq!(
            source_bucket(ip("2001:db8:1:2:aaaa::1")),
            source_bucket(ip("2001:db8:1:2:bbbb::2")),
            "one /64, one bucket"
        );
        assert_ne!(
            source_bucket(ip("2001:db8:1:2::1")),
            source_bucket(ip("2001:db8:1:3::1"))
        );
    }

    #[tokio::test]
    async fn a_flood_of_distinct_sources_and_ids_keeps_memory_bounded() {
        let clock = crate::clock::ManualClock::at(1_000);
        let limiter = Arc::new(LocalLimiter::new(clock.into()));
        let rates = FailureRates {
            max_tracked: 1_000,
            ..FailureRates::default()
        };
        let throttle = AuthThrottle::new(limiter.clone(), rates);
        let mut refused = 0;
        for i in 0..5_000u32 {
            let source = IpAddr::from((0x0a00_0000 + i).to_be_bytes());
            let client = format!("tc_{i}");
            if throttle.failed(Some(source), Some(&client)).await.is_some() {
                refused += 1;
            }
        }
        // Three counters per failure (source, client, both) until the cap, then none.
        assert!(limiter.tracked() <= 1_000 + 2, "{}", limiter.tracked());
        assert!(refused >= 5_000 - 334, "{refused}");
    }

    #[tokio::test]
    async fn prune_forgets_only_keys_whose_allowance_is_whole_again() {
        let clock = crate::clock::ManualClock::at(1_000);
        let limiter = LocalLimiter::new(clock.clone().into());
        let rate = RateLimit {
            count: 1,
            period_secs: 60,
            burst: 1,
        };
        limiter.check("a", rate).await;
        limiter.prune();
        assert_eq!(
            limiter.limiter(rate).len(),
            1,
            "a key still refilling is kept"
        );
        // Whole again after 60 s; governor forgets a key one emission interval after that.
        clock.advance(Duration::from_secs(121));
        limiter.prune();
        assert_eq!(limiter.limiter(rate).len(), 0);
    }

    #[test]
    fn in_flight_slots_are_returned() {
        let cap = InFlight::new(1);
        let first = cap.admit().unwrap();
        assert_eq!(cap.admit().unwrap_err(), Busy);
        assert_eq!(cap.in_use(), 1);
        drop(first);
        assert_eq!(cap.in_use(), 0);
        assert!(cap.admit().is_ok());
    }

    #[tokio::test]
    async fn a_lent_slot_serves_another_request_and_is_taken_back_if_free() {
        let cap = InFlight::new(1);
        let waiting = cap.admit().unwrap();
        let lent = waiting
            .lend(async {
                // While it waits, another request gets the one slot, and finishes.
                let other = cap.admit().expect("the lent slot");
                assert_eq!(cap.in_use(), 1);
                drop(other);
            })
            .await;
        assert_eq!((lent, cap.in_use()), (Ok(()), 1), "taken back");
        assert_eq!(cap.admit().unwrap_err(), Busy);
        drop(waiting);
        assert_eq!(cap.in_use(), 0);
        // Taken by someone else meanwhile: Busy, and no slot counted for the waiter.
        let waiting = cap.admit().unwrap();
        let mut other = None;
        let lent = waiting.lend(async { other = cap.admit().ok() }).await;
        assert_eq!(lent, Err(Busy));
        assert!(other.is_some());
        drop(waiting);
        assert_eq!(cap.in_use(), 1);
    }

    #[tokio::test]
    async fn a_request_with_nothing_left_to_do_takes_no_slot_back() {
        let cap = InFlight::new(1);
        let waiting = cap.admit().unwrap();
        let mut other = None;
        // The cap is full when the wait ends, but the request only refuses: no 503.
        let lent = waiting
            .lend_then(async { other = cap.admit().ok() }, |_| false)
            .await;
        assert_eq!(lent, Ok(()));
        assert!(other.is_some());
        drop(other);
        assert_eq!(cap.in_use(), 0, "none held for the refusal");
        drop(waiting);
        assert_eq!(cap.in_use(), 0);
        // With work left, it takes one back as `lend` does.
        let waiting = cap.admit().unwrap();
        let lent = waiting.lend_then(async { 7 }, |n| *n == 7).await;
        assert_eq!((lent, cap.in_use()), (Ok(7), 1));
    }
}
