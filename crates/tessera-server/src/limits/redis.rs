//! GCRA in Redis, so that every instance of a cluster counts against one allowance. One Lua
//! script does the read, the decision and the write atomically, on Redis's own clock; while
//! Redis answers, its decision is the one that counts.
//!
//! Every call to Redis is bounded (`Config::redis_timeout`, 50 ms by default). When one fails
//! or times out, the instance counts in its own memory ([`LocalLimiter`], on the server's
//! clock) at its share of each rate, 1/`expected_instances` ([`share`]): never unlimited,
//! and no request waits for Redis again until it is back. A background task asks Redis once
//! a second while it is away, on a fresh connection; its first answer brings the counting
//! back to Redis. The switch and the return are logged once each, at warn and info.

use std::future::Future;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, Weak};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use redis::aio::MultiplexedConnection;
use tessera_store::RateLimit;

use super::{share, Decision, Limiter, LocalLimiter};
use crate::config::{redact_url, Config};

/// GCRA (the generic cell rate algorithm): a key holds its theoretical arrival time (TAT).
/// A request is allowed when `now >= TAT - tolerance`, where `tolerance` lets `burst`
/// requests come at once; each allowed request moves TAT on by one emission interval.
/// Returns `{1, remaining, reset_ms}` or `{0, retry_after_ms, reset_ms}`.
const GCRA: &str = r"
local now_parts = redis.call('TIME')
local now = tonumber(now_parts[1]) * 1000 + math.floor(tonumber(now_parts[2]) / 1000)
local emission = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local tolerance = emission * (burst - 1)
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
if now < tat - tolerance then
  return {0, tat - tolerance - now, tat - now}
end
local new_tat = tat + emission
redis.call('SET', KEYS[1], new_tat, 'PX', new_tat - now)
local remaining = math.floor((now - new_tat) / emission) + burst
if remaining < 0 then remaining = 0 end
return {1, remaining, new_tat - now}
";

/// How long opening a connection may take: at start (where failing stops the server) and in
/// the background probe.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// The pause between two attempts of the probe while Redis is away.
const PROBE_INTERVAL: Duration = Duration::from_secs(1);

/// A [`Limiter`] whose state lives in Redis, with this process's memory as the fallback.
pub(crate) struct RedisLimiter {
    redis: Arc<Redis>,
    /// Counts while Redis does not answer, at `instances`' share of each rate.
    fallback: LocalLimiter,
    instances: NonZeroU32,
}

/// What the requests and the probe share.
struct Redis {
    client: redis::Client,
    script: redis::Script,
    prefix: String,
    /// The bound on each call made for a request.
    timeout: Duration,
    /// The URL without its password, for messages and the log.
    url: String,
    state: RwLock<State>,
    /// Connections opened so far, to tell the current one from those it replaced.
    generations: AtomicU64,
    /// Calls that failed with an error, requests' and the probe's.
    errors: AtomicU64,
    /// Calls that got no answer in time, requests' and the probe's.
    timeouts: AtomicU64,
}

/// Whether Redis counts now.
enum State {
    /// Redis counts, through `connection` (opened as number `generation`).
    Up {
        generation: u64,
        connection: MultiplexedConnection,
    },
    /// This process counts, since `since`.
    Down { since: Instant },
}

/// Why a call to Redis gave no decision.
#[derive(Debug, thiserror::Error)]
enum Fault {
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error(transparent)]
    Redis(#[from] redis::RedisError),
}

/// Redis could not be used at start.
#[derive(Debug, thiserror::Error)]
#[error("cannot use Redis at {url}: {fault}")]
pub(crate) struct ConnectError {
    /// The URL without its password.
    url: String,
    fault: Fault,
}

/// What the metrics show of the Redis limiter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Health {
    /// Whether Redis counts now; `false` while this process counts at its share.
    pub up: bool,
    /// Calls to Redis that failed with an error, the probe's included.
    pub errors: u64,
    /// Calls to Redis that got no answer in time, the probe's included.
    pub timeouts: u64,
}

impl std::fmt::Debug for RedisLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisLimiter")
            .field("url", &self.redis.url)
            .field("prefix", &self.redis.prefix)
            .field("instances", &self.instances)
            .finish_non_exhaustive()
    }
}

impl RedisLimiter {
    /// Connects to `url` (`redis://host:port/db`) and loads the script, 2 s at most for
    /// each, or fails with a message naming the URL without its password. Takes from `config` the prefix
    /// of the keys, the bound on each call, the expected number of instances and the clock
    /// of the fallback.
    pub(crate) async fn connect(url: &str, config: &Config) -> Result<Self, ConnectError> {
        let redacted = redact_url(url);
        let client = redis::Client::open(url).map_err(|e| ConnectError {
            url: redacted.clone(),
            fault: e.into(),
        })?;
        let redis = Arc::new(Redis {
            client,
            script: redis::Script::new(GCRA),
            prefix: config.redis_prefix.clone(),
            timeout: config.redis_timeout,
            url: redacted,
            state: RwLock::new(State::Down {
                since: Instant::now(),
            }),
            generations: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            timeouts: AtomicU64::new(0),
        });
        let connection = redis
            .open(CONNECT_TIMEOUT)
            .await
            .map_err(|fault| ConnectError {
                url: redis.url.clone(),
                fault,
            })?;
        redis.install(connection);
        tokio::spawn(probe(Arc::downgrade(&redis)));
        Ok(Self {
            redis,
            fallback: LocalLimiter::new(config.clock.clone()),
            instances: config.expected_instances,
        })
    }

    /// Records `key` for `ttl_secs` unless it is there already (`SET NX EX`): `Some(true)`
    /// the first time, `Some(false)` after, `None` when Redis does not answer (the caller
    /// then decides in its own memory). Used for DPoP proofs seen (RFC 9449 section 11.1),
    /// so that a proof replayed at another instance is refused too.
    pub(crate) async fn first_use(&self, key: &str, ttl_secs: u64) -> Option<bool> {
        let (generation, mut connection) = self.redis.current()?;
        let mut set = redis::cmd("SET");
        set.arg(format!("{}seen:{key}", self.redis.prefix))
            .arg(1)
            .arg("NX")
            .arg("EX")
            .arg(ttl_secs.max(1));
        match bounded(
            self.redis.timeout,
            set.query_async::<Option<String>>(&mut connection),
        )
        .await
        {
            Ok(answer) => Some(answer.is_some()),
            Err(fault) => {
                self.redis.failed(generation, &fault, self.instances);
                None
            }
        }
    }

    /// Whether Redis counts now, and the calls that failed so far.
    pub(crate) fn health(&self) -> Health {
        Health {
            up: matches!(
                *self.redis.state.read().unwrap_or_else(|p| p.into_inner()),
                State::Up { .. }
            ),
            errors: self.redis.errors.load(Ordering::Relaxed),
            timeouts: self.redis.timeouts.load(Ordering::Relaxed),
        }
    }
}

impl Redis {
    /// The connection and its generation while Redis counts.
    fn current(&self) -> Option<(u64, MultiplexedConnection)> {
        match &*self.state.read().unwrap_or_else(|p| p.into_inner()) {
            State::Up {
                generation,
                connection,
            } => Some((*generation, connection.clone())),
            State::Down { .. } => None,
        }
    }

    /// A new connection (2 s at most) with the script loaded, which also proves that Redis
    /// answers (`answer` at most).
    async fn open(&self, answer: Duration) -> Result<MultiplexedConnection, Fault> {
        let mut connection = bounded(
            CONNECT_TIMEOUT,
            self.client.get_multiplexed_async_connection(),
        )
        .await?;
        bounded(answer, self.script.load_async(&mut connection)).await?;
        Ok(connection)
    }

    /// Makes `connection` the one requests use; returns how long Redis was away.
    fn install(&self, connection: MultiplexedConnection) -> Duration {
        let generation = self.generations.fetch_add(1, Ordering::Relaxed) + 1;
        let mut state = self.state.write().unwrap_or_else(|p| p.into_inner());
        let away = match *state {
            State::Down { since } => since.elapsed(),
            State::Up { .. } => Duration::ZERO,
        };
        *state = State::Up {
            generation,
            connection,
        };
        away
    }

    fn count(&self, fault: &Fault) {
        let counter = match fault {
            Fault::Timeout(_) => &self.timeouts,
            Fault::Redis(_) => &self.errors,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// A call through connection `generation` failed: the first failure of that connection
    /// switches to the fallback and logs it; later ones (calls already under way) are only
    /// counted.
    fn failed(&self, generation: u64, fault: &Fault, instances: NonZeroU32) {
        self.count(fault);
        let mut state = self.state.write().unwrap_or_else(|p| p.into_inner());
        if matches!(*state, State::Up { generation: current, .. } if current == generation) {
            *state = State::Down {
                since: Instant::now(),
            };
            tracing::warn!(
                redis = %self.url,
                error = %fault,
                expected_instances = instances.get(),
                "Redis rate limiter failed; this instance counts 1/expected_instances of each \
                 rate in memory until Redis is back"
            );
        }
    }

    /// GCRA in Redis through `connection`, bounded by the call timeout.
    async fn gcra(
        &self,
        mut connection: MultiplexedConnection,
        key: &str,
        rate: RateLimit,
    ) -> Result<Decision, Fault> {
        let emission_ms =
            (u64::from(rate.period_secs) * 1000 / u64::from(rate.count.max(1))).max(1);
        // The rate is part of the key: a changed plan starts a fresh allowance, as locally.
        let key = format!(
            "{}{}/{}/{}:{key}",
            self.prefix, rate.count, rate.period_secs, rate.burst
        );
        let mut invocation = self.script.key(key);
        invocation.arg(emission_ms).arg(rate.burst.max(1));
        let (allowed, value, reset_ms): (i64, i64, i64) =
            bounded(self.timeout, invocation.invoke_async(&mut connection)).await?;
        let secs = |ms: i64| (ms.max(0) as u64).div_ceil(1000);
        Ok(if allowed == 1 {
            Decision::Allowed {
                remaining: value.clamp(0, i64::from(u32::MAX)) as u32,
                reset_secs: secs(reset_ms),
            }
        } else {
            Decision::Limited {
                retry_after_secs: secs(value).max(1),
            }
        })
    }
}

/// `call`, or [`Fault::Timeout`] once `limit` has passed.
async fn bounded<T>(
    limit: Duration,
    call: impl Future<Output = redis::RedisResult<T>>,
) -> Result<T, Fault> {
    match tokio::time::timeout(limit, call).await {
        Ok(answer) => Ok(answer?),
        Err(_) => Err(Fault::Timeout(limit)),
    }
}

/// While Redis is away, opens a connection once a second until one answers within the call
/// timeout. Ends when the limiter is dropped.
async fn probe(redis: Weak<Redis>) {
    loop {
        tokio::time::sleep(PROBE_INTERVAL).await;
        let Some(redis) = redis.upgrade() else {
            return;
        };
        if redis.current().is_some() {
            continue;
        }
        match redis.open(redis.timeout).await {
            Ok(connection) => {
                let away = redis.install(connection);
                tracing::info!(
                    redis = %redis.url,
                    away_secs = away.as_secs(),
                    "Redis answers again; rate limits are counted in Redis"
                );
            }
            Err(fault) => redis.count(&fault),
        }
    }
}

#[async_trait]
impl Limiter for RedisLimiter {
    async fn check(&self, key: &str, rate: RateLimit) -> Decision {
        if let Some((generation, connection)) = self.redis.current() {
            match self.redis.gcra(connection, key, rate).await {
                Ok(decision) => return decision,
                Err(fault) => self.redis.failed(generation, &fault, self.instances),
            }
        }
        self.fallback.check(key, share(rate, self.instances)).await
    }

    fn prune(&self) {
        self.fallback.prune();
    }

    fn tracked(&self) -> usize {
        self.fallback.tracked()
    }
}
