//! Counting in this process's memory: GCRA for the rate and a counter per calendar period for
//! the quota, both in one slot per client, decided under one lock so that a request is taken
//! from both allowances or from neither.
//!
//! GCRA (the generic cell rate algorithm) keeps one time per client, the theoretical arrival
//! time (TAT): a request may pass when `now >= TAT - tolerance`, where `tolerance` =
//! `emission * (burst - 1)` lets `burst` requests come at once; each one that passes moves TAT
//! on by one `emission` (`window / limit`). It is written here rather than taken from
//! `governor`, whose keyed limiters share one quota for every key (boinkor-net/governor#193):
//! per-plan rates would need one limiter per rate, and the quota a map of its own beside it.
//!
//! Rates run on the clock's monotonic reading, quotas on its wall time (calendar periods in
//! UTC). Memory: one slot per client that called; a slot whose rate is whole again and whose
//! quota period is over is dropped when its shard grows past [`PRUNE_AT`].

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tessera_proto::Clock;

use super::fields::{Count, Gcra, QuotaLimit, Reading};

const SHARDS: usize = 16;
/// A shard past this many slots drops those with nothing left to remember.
const PRUNE_AT: usize = 4096;

#[derive(Debug, Default, Clone, Copy)]
struct Slot {
    /// The theoretical arrival time, on the clock's monotonic reading.
    tat: Duration,
    /// The start of the quota period `used` counts in (seconds since the epoch).
    period_start: i64,
    /// Its end: after it, the slot has no quota to remember.
    period_end: i64,
    used: u64,
}

/// Counters per client, in memory.
#[derive(Debug)]
pub(crate) struct LocalCounter {
    hasher: RandomState,
    shards: Box<[Mutex<Shard>]>,
    clock: Clock,
}

#[derive(Debug, Default)]
struct Shard {
    slots: HashMap<Box<str>, Slot>,
    /// The size past which the shard is pruned next.
    prune_at: usize,
}

impl LocalCounter {
    pub(crate) fn new(clock: Clock) -> Self {
        Self {
            hasher: RandomState::new(),
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            clock,
        }
    }

    /// Counts one request of `client` against `rate` and `quota`.
    pub(crate) fn count(
        &self,
        client: &str,
        rate: Option<Gcra>,
        quota: Option<QuotaLimit>,
    ) -> Count {
        self.count_at(client, rate, quota, self.clock.now())
    }

    /// [`count`](Self::count) with the clock's wall time read already (`wall`, seconds since
    /// the epoch), by a caller that needs it too: one reading of the clock fewer per request.
    pub(crate) fn count_at(
        &self,
        client: &str,
        rate: Option<Gcra>,
        quota: Option<QuotaLimit>,
        wall: i64,
    ) -> Count {
        let now = self.clock.elapsed();
        let shard = (self.hasher.hash_one(client) >> 60) as usize % self.shards.len();
        let mut shard = self.shards[shard]
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // A client seen before: one lookup (issue 31 item 4).
        if let Some(slot) = shard.slots.get_mut(client) {
            return decide(slot, now, wall, rate, quota);
        }
        if shard.slots.len() >= shard.prune_at.max(PRUNE_AT) {
            shard
                .slots
                .retain(|_, s| s.tat > now || s.period_end > wall);
            shard.prune_at = shard.slots.len() * 2;
        }
        let slot = shard.slots.entry(client.into()).or_default();
        decide(slot, now, wall, rate, quota)
    }

    /// Clients remembered now.
    pub(crate) fn tracked(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(PoisonError::into_inner).slots.len())
            .sum()
    }
}

/// GCRA and the quota on one slot: the request is taken from both or from neither.
fn decide(
    slot: &mut Slot,
    now: Duration,
    wall: i64,
    rate: Option<Gcra>,
    quota: Option<QuotaLimit>,
) -> Count {
    let mut count = Count::default();
    let tat = slot.tat.max(now);
    let mut rate_parts = None;
    if let Some(rate) = rate {
        let emission = rate.emission();
        let tolerance = emission * (rate.burst - 1);
        count.rate_refused = now + tolerance < tat;
        rate_parts = Some((emission, tolerance));
    }
    let mut period = None;
    if let Some(quota) = quota {
        let (start, end) = quota.period.bounds(wall);
        if slot.period_start != start {
            slot.period_start = start;
            slot.period_end = end;
            slot.used = 0;
        }
        count.quota_refused = slot.used >= quota.limit;
        period = Some((quota, end));
    }
    let allowed = count.allowed();
    if let Some((emission, tolerance)) = rate_parts {
        let tat = if allowed { tat + emission } else { tat };
        if allowed {
            slot.tat = tat;
        }
        count.rate = Some(if count.rate_refused {
            Reading {
                remaining: 0,
                reset_secs: ceil_secs(tat - tolerance - now),
            }
        } else {
            // (now + tolerance + emission - TAT) / emission: what may still come at once.
            let room = (now + tolerance + emission).saturating_sub(tat);
            Reading {
                remaining: (room.as_nanos() / emission.as_nanos().max(1)) as u64,
                reset_secs: ceil_secs(tat.saturating_sub(now)),
            }
        });
    }
    if let Some((quota, end)) = period {
        if allowed {
            slot.used += 1;
        }
        count.quota = Some(Reading {
            remaining: quota.limit.saturating_sub(slot.used),
            reset_secs: u64::try_from(end - wall).unwrap_or(0),
        });
    }
    count
}

fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_proto::api_limits::Period;
    use tessera_proto::ManualClock;

    const FIVE_A_MINUTE: Gcra = Gcra {
        limit: 5,
        window_secs: 60,
        burst: 5,
    };

    #[test]
    fn gcra_allows_the_burst_then_one_per_emission() {
        let clock = ManualClock::at(1_800_000_000);
        let counter = LocalCounter::new(clock.clone().into());
        for left in (0..5).rev() {
            let c = counter.count("a", Some(FIVE_A_MINUTE), None);
            assert!(c.allowed());
            assert_eq!(c.rate.unwrap().remaining, left);
        }
        let refused = counter.count("a", Some(FIVE_A_MINUTE), None);
        assert!(refused.rate_refused);
        assert_eq!(
            refused.rate,
            Some(Reading {
                remaining: 0,
                reset_secs: 12
            })
        );
        // Another client has its own allowance.
        assert!(counter.count("b", Some(FIVE_A_MINUTE), None).allowed());
        clock.advance(Duration::from_secs(11));
        assert!(!counter.count("a", Some(FIVE_A_MINUTE), None).allowed());
        clock.advance(Duration::from_secs(1));
        let c = counter.count("a", Some(FIVE_A_MINUTE), None);
        assert!(c.allowed());
        assert_eq!(
            c.rate.unwrap(),
            Reading {
                remaining: 0,
                reset_secs: 60
            }
        );
    }

    #[test]
    fn a_quota_resets_at_the_start_of_the_next_period() {
        // 2026-11-27T23:59:00Z
        let clock = ManualClock::at(1_795_823_940);
        let counter = LocalCounter::new(clock.clone().into());
        let quota = QuotaLimit {
            limit: 2,
            period: Period::Day,
        };
        assert_eq!(
            counter
                .count("a", None, Some(quota))
                .quota
                .unwrap()
                .remaining,
            1
        );
        let c = counter.count("a", None, Some(quota));
        assert_eq!(
            c.quota,
            Some(Reading {
                remaining: 0,
                reset_secs: 60
            })
        );
        let refused = counter.count("a", None, Some(quota));
        assert!(refused.quota_refused);
        clock.advance(Duration::from_secs(59));
        assert!(!counter.count("a", None, Some(quota)).allowed());
        clock.advance(Duration::from_secs(1));
        let c = counter.count("a", None, Some(quota));
        assert!(c.allowed());
        assert_eq!(c.quota.unwrap().remaining, 1);
        assert_eq!(c.quota.unwrap().reset_secs, 86_400);
    }

    #[test]
    fn a_refusal_takes_nothing_from_either_allowance() {
        let clock = ManualClock::at(1_800_000_000);
        let counter = LocalCounter::new(clock.clone().into());
        let quota = QuotaLimit {
            limit: 1,
            period: Period::Month,
        };
        let one = Gcra {
            limit: 1,
            window_secs: 60,
            burst: 1,
        };
        assert!(counter.count("a", Some(one), Some(quota)).allowed());
        // Over the quota: the rate is not charged, so a new month passes at once.
        clock.advance(Duration::from_secs(60));
        let c = counter.count("a", Some(one), Some(quota));
        assert!(c.quota_refused && !c.rate_refused);
        assert_eq!(c.rate.unwrap().remaining, 1);
        // Over the rate: the quota is not charged.
        let fresh = LocalCounter::new(clock.into());
        let two = QuotaLimit { limit: 2, ..quota };
        assert!(fresh.count("a", Some(one), Some(two)).allowed());
        let c = fresh.count("a", Some(one), Some(two));
        assert!(c.rate_refused && !c.quota_refused);
        assert_eq!(c.quota.unwrap().remaining, 1);
    }

    /// Slots with nothing left to remember are swept only once a shard is full, not at
    /// every new client: a sweep per request would cost a pass over the shard each time.
    #[test]
    fn idle_clients_are_kept_until_a_shard_is_full() {
        let clock = ManualClock::at(1_800_000_000);
        let counter = LocalCounter::new(clock.clone().into());
        for i in 0..256 {
            counter.count(&format!("c{i}"), Some(FIVE_A_MINUTE), None);
        }
        clock.advance(Duration::from_secs(60));
        for i in 0..256 {
            counter.count(&format!("d{i}"), Some(FIVE_A_MINUTE), None);
        }
        assert_eq!(counter.tracked(), 512);
    }

    #[test]
    fn idle_clients_are_forgotten_once_a_shard_grows() {
        let clock = ManualClock::at(1_800_000_000);
        let counter = LocalCounter::new(clock.clone().into());
        for i in 0..SHARDS * PRUNE_AT {
            counter.count(&format!("c{i}"), Some(FIVE_A_MINUTE), None);
        }
        let full = counter.tracked();
        clock.advance(Duration::from_secs(60));
        for i in 0..full {
            counter.count(&format!("d{i}"), Some(FIVE_A_MINUTE), None);
        }
        // Without pruning there would be 2 * full.
        assert!(
            counter.tracked() < 2 * full - PRUNE_AT,
            "{}",
            counter.tracked()
        );
    }
}
