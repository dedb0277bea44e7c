//! GCRA in Redis, so that every instance of a cluster counts against one allowance. One Lua
//! script does the read, the decision and the write atomically, on Redis's own clock; while
//! Redis answers, its decision is the one that counts.
//!
//! Every call to Redis is bounded (`Config::redis_timeout`, 50 ms by default). When one fails
//! or times out, the instance counts in its own memory ([`LocalLimiter`], on the server's
//! clock) at its share of each rate, 1/N ([`share`]): never unlimited, and no request waits
//! for Redis again until it is back. A background task asks Redis once a second while it is
//! away, on a fresh connection; its first answer brings the counting back to Redis. The
//! switch and the return are logged once each, at warn and info.
//!
//! N is the fleet as last counted while Redis answered, or `Config::expected_instances`
//! where that is larger (a floor). While Redis is up, the same background task beats once
//! a second: one script puts this instance in a sorted set under the prefix, scored by when
//! it will be forgotten ([`FLEET_TTL`] later, on Redis's clock), drops the members past
//! their time and counts the rest, in one round trip and O(log n) work. An instance gone
//! for good leaves the count within [`FLEET_TTL`]; one restarting is counted twice for that
//! long, which errs towards smaller shares.

use std::future::Future;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;

use async_trait::async_trait;
use redis::aio::MultiplexedConnection;
use tessera_store::RateLimit;

use super::{share, Decision, Limiter, LocalLimiter};
use crate::clock::Clock;
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

/// The fleet count's heartbeat (see the module's documentation): `KEYS[1]` the sorted set,
/// `ARGV[1]` this instance's id, `ARGV[2]` how long a member is counted after its last beat,
/// in milliseconds. Returns the members counted, this one included.
const FLEET: &str = r"
local now_parts = redis.call('TIME')
local now = tonumber(now_parts[1]) * 1000 + math.floor(tonumber(now_parts[2]) / 1000)
local ttl = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
redis.call('PEXPIRE', KEYS[1], ttl)
return redis.call('ZCARD', KEYS[1])
";

/// How long an instance is counted in the fleet after its last heartbeat: five beats, so
/// that a beat or two lost on a busy machine does not shrink the count.
const FLEET_TTL: Duration = Duration::from_secs(5);

/// How long opening a connection may take: at start (where failing stops the server) and in
/// the background probe.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// The pause between two attempts of the probe while Redis is away, and between two
/// heartbeats while it answers.
const PROBE_INTERVAL: Duration = Duration::from_secs(1);

/// A [`Limiter`] whose state lives in Redis, with this process's memory as the fallback.
pub(crate) struct RedisLimiter {
    redis: Arc<Redis>,
    /// Counts while Redis does not answer, at [`Redis::instances`]' share of each rate.
    fallback: LocalLimiter,
}

/// What the requests and the probe share.
struct Redis {
    client: redis::Client,
    script: redis::Script,
    /// The heartbeat ([`FLEET`]).
    fleet_script: redis::Script,
    prefix: String,
    /// This instance's member of the fleet: random, new on each start.
    instance: String,
    /// `Config::expected_instances`: a floor under the counted fleet, if given.
    expected: Option<NonZeroU32>,
    /// The instances counted at the last heartbeat that Redis answered (0 before the first).
    fleet: AtomicU32,
    /// The server's clock, for how long Redis was away.
    clock: Clock,
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
    /// This process counts, since `since` (the clock's monotonic reading).
    Down { since: Duration },
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
pub struct ConnectError {
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
    /// The instances counted through Redis at the last heartbeat it answered, this one
    /// included.
    pub fleet: u32,
    /// The N of the share each instance counts while Redis fails: the counted fleet, or
    /// `Config::expected_instances` where that is larger.
    pub fallback_instances: u32,
}

impl std::fmt::Debug for RedisLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisLimiter")
            .field("url", &self.redis.url)
            .field("prefix", &self.redis.prefix)
            .field("instance", &self.redis.instance)
            .field("expected", &self.redis.expected)
            .finish_non_exhaustive()
    }
}

impl RedisLimiter {
    /// Connects to `url` (`redis://host:port/db`), loads the script and counts the fleet
    /// with a first heartbeat, 2 s at most for each, or fails with a message naming the URL
    /// without its password. Takes from `config` the prefix of the keys, the bound on each
    /// call and the expected number of instances; `clock` is the fallback's.
    pub(crate) async fn connect(
        url: &str,
        config: &Config,
        clock: Clock,
    ) -> Result<Self, ConnectError> {
        let redacted = redact_url(url);
        let client = redis::Client::open(url).map_err(|e| ConnectError {
            url: redacted.clone(),
            fault: e.into(),
        })?;
        let redis = Arc::new(Redis {
            client,
            script: redis::Script::new(GCRA),
            fleet_script: redis::Script::new(FLEET),
            prefix: config.redis_prefix.clone(),
            instance: crate::secrets::random_token(12),
            expected: config.expected_instances,
            fleet: AtomicU32::new(0),
            clock: clock.clone(),
            timeout: config.redis_timeout,
            url: redacted,
            state: RwLock::new(State::Down {
                since: clock.elapsed(),
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
        let (generation, _) = redis.install(connection);
        let first = redis.count_fleet(generation, CONNECT_TIMEOUT).await;
        if let Some(fault) = first {
            return Err(ConnectError {
                url: redis.url.clone(),
                fault,
            });
        }
        tokio::spawn(probe(Arc::downgrade(&redis)));
        Ok(Self {
            redis,
            fallback: LocalLimiter::new(clock),
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
                self.redis.failed(generation, &fault);
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
            fleet: self.redis.fleet.load(Ordering::Relaxed),
            fallback_instances: self.redis.instances().get(),
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

    /// Makes `connection` the one requests use; returns its generation and how long Redis
    /// was away, on the server's clock.
    fn install(&self, connection: MultiplexedConnection) -> (u64, Duration) {
        let generation = self.generations.fetch_add(1, Ordering::Relaxed) + 1;
        let mut state = self.state.write().unwrap_or_else(|p| p.into_inner());
        let away = match *state {
            State::Down { since } => self.clock.elapsed().saturating_sub(since),
            State::Up { .. } => Duration::ZERO,
        };
        *state = State::Up {
            generation,
            connection,
        };
        (generation, away)
    }

    /// The N of the share each instance counts while Redis fails: the fleet as last
    /// counted, or the expected number of instances where that is larger; at least 1.
    fn instances(&self) -> NonZeroU32 {
        let counted =
            NonZeroU32::new(self.fleet.load(Ordering::Relaxed)).unwrap_or(NonZeroU32::MIN);
        self.expected
            .map_or(counted, |expected| expected.max(counted))
    }

    /// One heartbeat through the current connection (`answer` at most): counts the fleet,
    /// and logs when the count changes. A failure is handled as a request's would be (the
    /// switch to the fallback) and returned.
    async fn count_fleet(&self, generation: u64, answer: Duration) -> Option<Fault> {
        let (current, mut connection) = self.current()?;
        if current != generation {
            return None;
        }
        let mut beat = self.fleet_script.key(format!("{}fleet", self.prefix));
        beat.arg(&self.instance)
            .arg(u64::try_from(FLEET_TTL.as_millis()).unwrap_or(u64::MAX));
        let counted: u32 = match bounded(answer, beat.invoke_async(&mut connection)).await {
            Ok(counted) => counted,
            Err(fault) => {
                self.failed(generation, &fault);
                return Some(fault);
            }
        };
        let before = self.fleet.swap(counted, Ordering::Relaxed);
        if before != counted {
            match self.expected {
                Some(expected) if expected.get() != counted => tracing::warn!(
                    redis = %self.url,
                    counted,
                    expected_instances = expected.get(),
                    fallback_instances = self.instances().get(),
                    "the instances counted through Redis differ from --expected-instances; \
                     while Redis fails, each counts 1/fallback_instances of every rate, the \
                     larger of the two"
                ),
                _ => tracing::info!(
                    redis = %self.url,
                    counted,
                    "instances counted through Redis; while Redis fails, each counts 1/counted \
                     of every rate"
                ),
            }
        }
        None
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
    fn failed(&self, generation: u64, fault: &Fault) {
        self.count(fault);
        let mut state = self.state.write().unwrap_or_else(|p| p.into_inner());
        if matches!(*state, State::Up { generation: current, .. } if current == generation) {
            *state = State::Down {
                since: self.clock.elapsed(),
            };
            tracing::warn!(
                redis = %self.url,
                error = %fault,
                fallback_instances = self.instances().get(),
                "Redis rate limiter failed; this instance counts 1/fallback_instances of each \
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

/// Once a second: while Redis answers, a heartbeat that counts the fleet; while it is away,
/// a fresh connection, until one answers within the call timeout. Ends when the limiter is
/// dropped.
async fn probe(redis: Weak<Redis>) {
    loop {
        tokio::time::sleep(PROBE_INTERVAL).await;
        let Some(redis) = redis.upgrade() else {
            return;
        };
        if let Some((generation, _)) = redis.current() {
            redis.count_fleet(generation, redis.timeout).await;
            continue;
        }
        match redis.open(redis.timeout).await {
            Ok(connection) => {
                let (generation, away) = redis.install(connection);
                tracing::info!(
                    redis = %redis.url,
                    away_secs = away.as_secs(),
                    "Redis answers again; rate limits are counted in Redis"
                );
                redis.count_fleet(generation, redis.timeout).await;
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
                Err(fault) => self.redis.failed(generation, &fault),
            }
        }
        self.fallback
            .check(key, share(rate, self.redis.instances()))
            .await
    }

    fn prune(&self) {
        self.fallback.prune();
    }

    fn tracked(&self) -> usize {
        self.fallback.tracked()
    }
}
