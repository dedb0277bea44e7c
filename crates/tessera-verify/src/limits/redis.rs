//! Counting in Redis, so that every instance of an API counts against one allowance per client:
//! two instances and a 10/min plan let 10 through in all, not 20. One Lua script takes a
//! request from the rate (GCRA, on Redis's clock) and the quota (a counter per calendar
//! period, its key expiring at the period's end) atomically, or from neither.
//!
//! It degrades as Tessera's token limiter does (`tessera-server/src/limits/redis.rs`, whose
//! approach this follows): every call is bounded ([`super::LimitsConfig::redis_timeout`], 50 ms
//! by default); when one fails or times out, this instance counts in its own memory at its
//! share, 1/N of each rate, burst and quota (at least one request): never unlimited, and no
//! request waits for Redis again until it is back. A background task asks Redis once a second
//! while it is away, on a fresh connection, and its first answer brings counting back. The
//! switch is logged once at warn, the return once at info, and [`super::LimitsHealth`] shows
//! both. N is the fleet counted by a heartbeat in Redis (each instance beats once a second
//! into a sorted set under the prefix; members are forgotten 5 s after their last beat), or
//! `expected_instances` where that is larger.
//!
//! The script differs from the token limiter's (which counts a rate alone), so the two are
//! not one: the token limiter's lives in the server, which the kit does not depend on.

use std::future::Future;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use tessera_proto::Clock;

use super::fields::{Count, Gcra, QuotaLimit, Reading};
use super::local::LocalCounter;

/// `KEYS[1]` the client's TAT, `KEYS[2]` its count in this quota period. `ARGV`: the emission
/// interval in ms and the burst (0: no rate), the quota (-1: none) and the ms until the
/// period ends. GCRA as in `super::local`, on Redis's `TIME`. Returns
/// `{rate_ok, quota_ok, rate_value, tat_ms_ahead, used}`: `rate_value` is the requests left
/// at once when the rate allows, the ms to wait when it refuses.
const COUNT: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local emission = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local quota = tonumber(ARGV[3])
local ttl = tonumber(ARGV[4])
local rate_ok, quota_ok, tat, tolerance, used = 1, 1, now, 0, 0
if burst > 0 then
  tolerance = emission * (burst - 1)
  tat = tonumber(redis.call('GET', KEYS[1]) or now)
  if tat < now then tat = now end
  if now + tolerance < tat then rate_ok = 0 end
end
if quota >= 0 then
  used = tonumber(redis.call('GET', KEYS[2]) or 0)
  if used >= quota then quota_ok = 0 end
end
if rate_ok == 1 and quota_ok == 1 then
  if burst > 0 then
    tat = tat + emission
    redis.call('SET', KEYS[1], tat, 'PX', tat - now)
  end
  if quota >= 0 then
    used = redis.call('INCR', KEYS[2])
    if used == 1 then redis.call('PEXPIRE', KEYS[2], ttl) end
  end
end
local value = 0
if burst > 0 then
  if rate_ok == 1 then
    value = math.floor((now + tolerance + emission - tat) / emission)
  else
    value = tat - tolerance - now
  end
end
return {rate_ok, quota_ok, value, tat - now, used}
";

/// The fleet heartbeat: `KEYS[1]` the sorted set, `ARGV[1]` this instance, `ARGV[2]` how long
/// a member counts after its beat (ms). Returns the members counted.
const FLEET: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return redis.call('ZCARD', KEYS[1])
";

const FLEET_TTL: Duration = Duration::from_secs(5);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
const PROBE_INTERVAL: Duration = Duration::from_secs(1);

/// Counters in Redis, with this process's memory as the fallback.
#[derive(Debug)]
pub(crate) struct RedisCounter {
    redis: Arc<Redis>,
    fallback: LocalCounter,
}

struct Redis {
    client: redis::Client,
    script: redis::Script,
    fleet_script: redis::Script,
    /// Keys are `{prefix}{api}:{client}` with a suffix; the braces keep a client's two keys
    /// in one Redis Cluster slot.
    prefix: String,
    api: String,
    instance: String,
    expected: u32,
    fleet: AtomicU32,
    clock: Clock,
    timeout: Duration,
    /// The URL without its password.
    url: String,
    state: RwLock<State>,
    /// The first connection is being opened or was tried.
    first: tokio::sync::OnceCell<()>,
    generations: AtomicU64,
    errors: AtomicU64,
    timeouts: AtomicU64,
}

impl std::fmt::Debug for Redis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redis")
            .field("url", &self.url)
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

enum State {
    Up {
        generation: u64,
        connection: MultiplexedConnection,
    },
    Down,
}

#[derive(Debug, thiserror::Error)]
enum Fault {
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error(transparent)]
    Redis(#[from] redis::RedisError),
}

/// What [`super::LimitsHealth`] shows of Redis.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RedisHealth {
    pub up: bool,
    pub errors: u64,
    pub timeouts: u64,
    pub fleet: u32,
    pub fallback_instances: u32,
}

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
            redis: Arc::new(Redis {
                client,
                script: redis::Script::new(COUNT),
                fleet_script: redis::Script::new(FLEET),
                prefix,
                api: api.to_owned(),
                instance: crate::limits::random_id(),
                expected,
                fleet: AtomicU32::new(0),
                clock: clock.clone(),
                timeout,
                url,
                state: RwLock::new(State::Down),
                first: tokio::sync::OnceCell::new(),
                generations: AtomicU64::new(0),
                errors: AtomicU64::new(0),
                timeouts: AtomicU64::new(0),
            }),
            fallback: LocalCounter::new(clock),
        }
    }

    /// Connects now (at most 2 s) if not yet: for a start that fails fast.
    pub(crate) async fn connect(&self) -> bool {
        self.redis.start(CONNECT_TIMEOUT).await;
        self.redis.current().is_some()
    }

    pub(crate) async fn count(
        &self,
        client: &str,
        rate: Option<Gcra>,
        quota: Option<QuotaLimit>,
    ) -> Count {
        self.redis.start(self.redis.timeout).await;
        if let Some((generation, connection)) = self.redis.current() {
            match self.redis.count(connection, client, rate, quota).await {
                Ok(count) => return count,
                Err(fault) => self.redis.failed(generation, &fault),
            }
        }
        let n = self.redis.instances();
        self.fallback
            .count(client, rate.map(|r| r.share(n)), quota.map(|q| q.share(n)))
    }

    pub(crate) fn health(&self) -> RedisHealth {
        RedisHealth {
            up: self.redis.current().is_some(),
            errors: self.redis.errors.load(Ordering::Relaxed),
            timeouts: self.redis.timeouts.load(Ordering::Relaxed),
            fleet: self.redis.fleet.load(Ordering::Relaxed),
            fallback_instances: self.redis.instances(),
        }
    }
}

impl Redis {
    /// The first connection, once, within `limit`; then the probe, which keeps it.
    async fn start(self: &Arc<Self>, limit: Duration) {
        self.first
            .get_or_init(|| async {
                match self.open(limit, limit).await {
                    Ok(connection) => {
                        let generation = self.install(connection);
                        self.beat(generation).await;
                    }
                    Err(fault) => {
                        self.count_fault(&fault);
                        tracing::warn!(
                            redis = %self.url, error = %fault,
                            "Redis could not be reached; plan limits are counted in memory at \
                             this instance's share until it answers"
                        );
                    }
                }
                tokio::spawn(probe(Arc::downgrade(self)));
            })
            .await;
    }

    fn current(&self) -> Option<(u64, MultiplexedConnection)> {
        match &*self.state.read().unwrap_or_else(|p| p.into_inner()) {
            State::Up {
                generation,
                connection,
            } => Some((*generation, connection.clone())),
            State::Down => None,
        }
    }

    /// A new connection (within `connect`) with the script loaded (within `answer`).
    async fn open(
        &self,
        connect: Duration,
        answer: Duration,
    ) -> Result<MultiplexedConnection, Fault> {
        let mut connection =
            bounded(connect, self.client.get_multiplexed_async_connection()).await?;
        bounded(answer, self.script.load_async(&mut connection)).await?;
        Ok(connection)
    }

    fn install(&self, connection: MultiplexedConnection) -> u64 {
        let generation = self.generations.fetch_add(1, Ordering::Relaxed) + 1;
        *self.state.write().unwrap_or_else(|p| p.into_inner()) = State::Up {
            generation,
            connection,
        };
        generation
    }

    /// The share's N: the fleet last counted, or `expected` where larger; at least 1.
    fn instances(&self) -> u32 {
        self.fleet.load(Ordering::Relaxed).max(self.expected).max(1)
    }

    async fn beat(&self, generation: u64) {
        let Some((current, mut connection)) = self.current() else {
            return;
        };
        if current != generation {
            return;
        }
        let mut beat = self
            .fleet_script
            .key(format!("{}{}:fleet", self.prefix, self.api));
        beat.arg(&self.instance)
            .arg(u64::try_from(FLEET_TTL.as_millis()).unwrap_or(u64::MAX));
        match bounded(self.timeout, beat.invoke_async::<u32>(&mut connection)).await {
            Ok(counted) => {
                if self.fleet.swap(counted, Ordering::Relaxed) != counted {
                    tracing::info!(
                        redis = %self.url, api = %self.api, counted,
                        "API instances counted through Redis; while Redis fails, each counts \
                         1/N of every plan limit"
                    );
                }
            }
            Err(fault) => self.failed(generation, &fault),
        }
    }

    fn count_fault(&self, fault: &Fault) {
        match fault {
            Fault::Timeout(_) => &self.timeouts,
            Fault::Redis(_) => &self.errors,
        }
        .fetch_add(1, Ordering::Relaxed);
    }

    fn failed(&self, generation: u64, fault: &Fault) {
        self.count_fault(fault);
        let mut state = self.state.write().unwrap_or_else(|p| p.into_inner());
        if matches!(*state, State::Up { generation: current, .. } if current == generation) {
            *state = State::Down;
            tracing::warn!(
                redis = %self.url, error = %fault, fallback_instances = self.instances(),
                "Redis failed; plan limits are counted in memory at 1/fallback_instances of \
                 each limit until it is back"
            );
        }
    }

    async fn count(
        &self,
        mut connection: MultiplexedConnection,
        client: &str,
        rate: Option<Gcra>,
        quota: Option<QuotaLimit>,
    ) -> Result<Count, Fault> {
        let base = format!("{}{{{}:{client}}}", self.prefix, self.api);
        let wall = self.clock.now();
        let (period_start, period_end) = quota.map_or((0, 0), |q| q.period.bounds(wall));
        let mut invocation = self.script.key(format!("{base}:rate"));
        invocation.key(format!("{base}:quota:{period_start}"));
        let emission_ms = rate.map_or(0, |r| (r.emission().as_millis() as u64).max(1));
        invocation
            .arg(emission_ms)
            .arg(rate.map_or(0, |r| r.burst))
            .arg(quota.map_or(-1, |q| i64::try_from(q.limit).unwrap_or(i64::MAX)))
            // Kept a minute past the period's end, for clocks a little behind this one.
            .arg((period_end - wall + 60).max(1) * 1000);
        let (rate_ok, quota_ok, value, ahead_ms, used): (i64, i64, i64, i64, i64) =
            bounded(self.timeout, invocation.invoke_async(&mut connection)).await?;
        let secs = |ms: i64| (ms.max(0) as u64).div_ceil(1000);
        let mut count = Count {
            rate_refused: rate.is_some() && rate_ok == 0,
            quota_refused: quota.is_some() && quota_ok == 0,
            ..Count::default()
        };
        if rate.is_some() {
            count.rate = Some(if rate_ok == 1 {
                Reading {
                    remaining: value.max(0) as u64,
                    reset_secs: secs(ahead_ms),
                }
            } else {
                Reading {
                    remaining: 0,
                    reset_secs: secs(value).max(1),
                }
            });
        }
        if let Some(q) = quota {
            count.quota = Some(Reading {
                remaining: q.limit.saturating_sub(used.max(0) as u64),
                reset_secs: u64::try_from(period_end - wall).unwrap_or(0),
            });
        }
        Ok(count)
    }
}

async fn bounded<T>(
    limit: Duration,
    call: impl Future<Output = redis::RedisResult<T>>,
) -> Result<T, Fault> {
    match tokio::time::timeout(limit, call).await {
        Ok(answer) => Ok(answer?),
        Err(_) => Err(Fault::Timeout(limit)),
    }
}

/// Once a second: a heartbeat while Redis answers; a fresh connection while it is away.
async fn probe(redis: Weak<Redis>) {
    loop {
        tokio::time::sleep(PROBE_INTERVAL).await;
        let Some(redis) = redis.upgrade() else {
            return;
        };
        if let Some((generation, _)) = redis.current() {
            redis.beat(generation).await;
            continue;
        }
        match redis.open(CONNECT_TIMEOUT, redis.timeout).await {
            Ok(connection) => {
                let generation = redis.install(connection);
                tracing::info!(
                    redis = %redis.url,
                    "Redis answers again; plan limits are counted in Redis"
                );
                redis.beat(generation).await;
            }
            Err(fault) => redis.count_fault(&fault),
        }
    }
}
