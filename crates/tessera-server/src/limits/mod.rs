//! Rate limits: per client by plan, failed authentication per source address, and a global
//! cap on requests in flight.
//!
//! Per-client limits use GCRA (the generic cell rate algorithm) through the `governor`
//! crate, behind the [`Limiter`] trait so that a distributed backend can take its place.
//! Answers carry the `RateLimit` and `RateLimit-Policy` fields of the IETF httpapi draft
//! (draft-ietf-httpapi-ratelimit-headers-08) and, when refused, `Retry-After` (RFC 9110 10.2.3).

use std::collections::HashMap;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use governor::middleware::StateInformationMiddleware;
use governor::state::keyed::DefaultKeyedStateStore;
use governor::{Quota, RateLimiter};
use tessera_store::RateLimit;
use tokio::sync::Semaphore;

use crate::clock::{Clock, LimiterClock};

pub mod redis;

/// What a limiter decided for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
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
pub trait Limiter: Send + Sync + std::fmt::Debug {
    /// Takes one request from `key`'s allowance under `rate`.
    async fn check(&self, key: &str, rate: RateLimit) -> Decision;
    /// Forgets keys whose allowance is whole again, to bound memory.
    fn prune(&self) {}
}

type Keyed =
    RateLimiter<String, DefaultKeyedStateStore<String>, LimiterClock, StateInformationMiddleware>;

/// GCRA in this process's memory (governor). Instances of a cluster each count on their own;
/// [`redis::RedisLimiter`] counts for all of them.
#[derive(Debug)]
pub struct LocalLimiter {
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
    pub fn new(clock: Clock) -> Self {
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

/// Brute-force protection (RFC 6749 section 2.3.1): failed client authentications are
/// counted per source address; over the rate, the address is refused without a check of
/// its credentials until the limiter allows again.
#[derive(Debug)]
pub struct AuthThrottle {
    limiter: Arc<dyn Limiter>,
    rate: RateLimit,
    /// Until when (on `clock`'s monotonic reading) each blocked address is refused.
    blocked: Mutex<HashMap<IpAddr, Duration>>,
    clock: Clock,
}

impl AuthThrottle {
    /// Allows `rate` failures per address.
    pub fn new(limiter: Arc<dyn Limiter>, rate: RateLimit, clock: Clock) -> Self {
        Self {
            limiter,
            rate,
            blocked: Mutex::default(),
            clock,
        }
    }

    /// Seconds left while `ip` is refused; `None` from the moment its `Retry-After` has
    /// passed, as the limiter itself allows again at that moment.
    pub fn blocked(&self, ip: IpAddr) -> Option<u64> {
        let blocked = self.blocked.lock().unwrap_or_else(|p| p.into_inner());
        let until = *blocked.get(&ip)?;
        let left = until
            .checked_sub(self.clock.elapsed())
            .filter(|left| !left.is_zero())?;
        Some((left.as_secs_f64().ceil() as u64).max(1))
    }

    /// Counts a failure from `ip`.
    pub async fn failed(&self, ip: IpAddr) {
        let key = format!("auth-failure:{ip}");
        if let Decision::Limited { retry_after_secs } = self.limiter.check(&key, self.rate).await {
            let mut blocked = self.blocked.lock().unwrap_or_else(|p| p.into_inner());
            let now = self.clock.elapsed();
            blocked.retain(|_, until| *until > now);
            blocked.insert(ip, now + Duration::from_secs(retry_after_secs));
        }
    }

    /// The allowance of failures per address.
    pub fn rate(&self) -> RateLimit {
        self.rate
    }
}

/// A cap on requests being worked on. A request is admitted once its body has arrived, so
/// slow uploads (bounded by the request timeout) cannot take the slots; over the cap the
/// answer is 503 with `Retry-After: 1` rather than an unbounded queue.
#[derive(Debug)]
pub struct InFlight(Semaphore);

impl InFlight {
    /// Allows `slots` requests at once.
    pub fn new(slots: usize) -> Self {
        Self(Semaphore::new(slots))
    }

    /// A slot for one request, held until the permit is dropped.
    pub fn admit(&self) -> Result<tokio::sync::SemaphorePermit<'_>, Busy> {
        self.0.try_acquire().map_err(|_| Busy)
    }
}

/// Every slot of [`InFlight`] is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Busy;

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
        drop(first);
        assert!(cap.admit().is_ok());
    }
}
