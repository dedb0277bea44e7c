//! Counting in Redis, so that every instance of an API counts against one allowance per client:
//! two instances and a 10/min plan let 10 through in all, not 20. One Lua script takes a
//! request from the rate (GCRA, on Redis's clock) and the quota (a counter per calendar
//! period, its key expiring at the period's end) atomically, or from neither.
//!
//! The script, the connection, the bound on each call, the switch to this process's memory
//! and the way back are [`crate::shared_redis`], which Tessera's token limiter uses too. Each
//! call is bounded ([`super::LimitsConfig::redis_timeout`], 50 ms by default); when one fails
//! or times out, this instance counts in its own memory at its share, 1/N of each rate,
//! burst and quota (at least one request): never unlimited, and no request waits for Redis
//! again until it is back. A background task asks Redis once a second while it is away, on
//! a fresh connection, and its first answer brings counting back. The switch is logged once
//! at warn, the return once at info, and [`super::LimitsHealth`] shows both. N is the fleet
//! counted by a heartbeat in Redis (each instance beats once a second into a sorted set
//! under the prefix; members are forgotten 5 s after their last beat), or
//! `expected_instances` where that is larger.
//!
//! Unlike Tessera's limiter, which connects at start and fails without Redis, the kit
//! connects at its first request (or [`crate::Verifier::refresh_limits`]) and counts in
//! memory if Redis cannot be reached then.

use std::sync::Arc;
use std::time::Duration;

use tessera_proto::Clock;

use super::fields::{Count, Gcra, QuotaLimit, Reading};
use super::local::LocalCounter;
use crate::shared_redis::{self, Messages, SharedRedis, CONNECT_TIMEOUT};

/// The kit's words in the log.
const MESSAGES: Messages = Messages {
    failed: "Redis failed; plan limits are counted in memory at 1/fallback_instances of each \
             limit until it is back",
    back: "Redis answers again; plan limits are counted in Redis",
    fleet: "API instances counted through Redis; while Redis fails, each counts 1/N of every \
            plan limit",
    fleet_differs: "the API instances counted through Redis differ from expected_instances; \
                    while Redis fails, each counts 1/fallback_instances of every plan limit, \
                    the larger of the two",
};

/// Counters in Redis, with this process's memory as the fallback.
#[derive(Debug)]
pub(crate) struct RedisCounter {
    redis: Arc<SharedRedis>,
    /// Keys are `{prefix}{api}:{client}` with a suffix; the braces keep a client's two keys
    /// in one Redis Cluster slot.
    prefix: String,
    api: String,
    clock: Clock,
    /// The first connection is being opened or was tried.
    first: tokio::sync::OnceCell<()>,
    fallback: LocalCounter,
}

/// What [`super::LimitsHealth`] shows of Redis.
pub(crate) type RedisHealth = shared_redis::Health;

impl RedisCounter {
    /// A counter on `client` (not connected yet: the first request connects, within the
    /// call timeout, or counts locally).
    pub(crate) fn new(
        client: redis::Client,
        url: String,
        prefix: String,
        api: &str,
        expected: u32,
        timeout: Duration,
        clock: Clock,
    ) -> Self {
        Self {
            redis: SharedRedis::new(shared_redis::Settings {
                client,
                url,
                fleet_key: format!("{prefix}{api}:fleet"),
                instance: crate::limits::random_id(),
                expected,
                timeout,
                clock: clock.clone(),
                messages: MESSAGES,
            }),
            prefix,
            api: api.to_owned(),
            clock: clock.clone(),
            first: tokio::sync::OnceCell::new(),
            fallback: LocalCounter::new(clock),
        }
    }

    /// Connects now (at most 2 s) if not yet: for a start that fails fast.
    pub(crate) async fn connect(&self) -> bool {
        self.start(CONNECT_TIMEOUT).await;
        self.redis.current().is_some()
    }

    /// The first connection, once, within `limit`; then the probe, which keeps it.
    async fn start(&self, limit: Duration) {
        self.first
            .get_or_init(|| async {
                match self.redis.open(limit, limit).await {
                    Ok(connection) => {
                        let (generation, _) = self.redis.install(connection);
                        self.redis
                            .count_fleet(generation, self.redis.timeout())
                            .await;
                    }
                    Err(fault) => {
                        self.redis.count_fault(&fault);
                        tracing::warn!(
                            redis = %self.redis.url(), error = %fault,
                            "Redis could not be reached; plan limits are counted in memory at \
                             this instance's share until it answers"
                        );
                    }
                }
                self.redis.spawn_probe();
            })
            .await;
    }

    pub(crate) async fn count(
        &self,
        client: &str,
        rate: Option<Gcra>,
        quota: Option<QuotaLimit>,
    ) -> Count {
        self.start(self.redis.timeout()).await;
        if let Some((generation, connection)) = self.redis.current() {
            match self.count_in_redis(connection, client, rate, quota).await {
                Ok(count) => return count,
                Err(fault) => self.redis.failed(generation, &fault),
            }
        }
        let n = self.redis.instances();
        self.fallback
            .count(client, rate.map(|r| r.share(n)), quota.map(|q| q.share(n)))
    }

    pub(crate) fn health(&self) -> RedisHealth {
        self.redis.health()
    }

    async fn count_in_redis(
        &self,
        connection: redis::aio::MultiplexedConnection,
        client: &str,
        rate: Option<Gcra>,
        quota: Option<QuotaLimit>,
    ) -> Result<Count, shared_redis::Fault> {
        let base = format!("{}{{{}:{client}}}", self.prefix, self.api);
        let wall = self.clock.now();
        let (period_start, period_end) = quota.map_or((0, 0), |q| q.period.bounds(wall));
        let answer = self
            .redis
            .count(
                connection,
                shared_redis::Request {
                    rate_key: &format!("{base}:rate"),
                    quota_key: &format!("{base}:quota:{period_start}"),
                    emission_ms: rate.map_or(0, |r| (r.emission().as_millis() as u64).max(1)),
                    burst: rate.map_or(0, |r| r.burst),
                    quota: quota.map(|q| q.limit),
                    // Kept a minute past the period's end, for clocks a little behind this one.
                    quota_ttl_ms: (period_end - wall + 60).max(1) * 1000,
                },
            )
            .await?;
        let secs = |ms: i64| (ms.max(0) as u64).div_ceil(1000);
        let mut count = Count {
            rate_refused: rate.is_some() && !answer.rate_ok,
            quota_refused: quota.is_some() && !answer.quota_ok,
            ..Count::default()
        };
        if rate.is_some() {
            count.rate = Some(if answer.rate_ok {
                Reading {
                    remaining: answer.rate_value.max(0) as u64,
                    reset_secs: secs(answer.ahead_ms),
                }
            } else {
                Reading {
                    remaining: 0,
                    reset_secs: secs(answer.rate_value).max(1),
                }
            });
        }
        if let Some(q) = quota {
            count.quota = Some(Reading {
                remaining: q.limit.saturating_sub(answer.used.max(0) as u64),
                reset_secs: u64::try_from(period_end - wall).unwrap_or(0),
            });
        }
        Ok(count)
    }
}
