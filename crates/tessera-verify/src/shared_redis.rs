//! Counting in Redis with this process's memory as the fallback: the one implementation
//! behind the kit's plan limits ([`crate::limits`], rate and quota per client and API) and
//! Tessera's token limiter (`tessera-server`, a rate per client). Public for that server
//! only; not part of the kit's API, and it may change in any release.
//!
//! One Lua script ([`COUNT`]) takes a request from a rate (GCRA, on Redis's own clock) and a
//! quota (a counter per calendar period, its key expiring at the period's end) atomically,
//! or from neither; a caller with no quota passes none and the quota key is never touched.
//!
//! Every call is bounded ([`SharedRedis::timeout`]). When one fails or times out, the
//! caller counts in its own memory at its share, 1/N of each limit ([`SharedRedis::instances`]):
//! never unlimited, and no request waits for Redis again until it is back. A background
//! task ([`SharedRedis::spawn_probe`]) asks Redis once a second while it is away, on a fresh
//! connection; its first answer brings counting back to Redis. The switch and the return
//! are logged once each, at warn and info, in the caller's words ([`Messages`]).
//!
//! N is the fleet as last counted while Redis answered, or the expected number of
//! instances where that is larger (a floor). While Redis is up, the same background task
//! beats once a second: one script ([`FLEET`]) puts this instance in a sorted set, scored
//! by when it will be forgotten ([`FLEET_TTL`] later, on Redis's clock), drops the members
//! past their time and counts the rest, in one round trip and O(log n) work. An instance
//! gone for good leaves the count within [`FLEET_TTL`]; one restarting is counted twice for
//! that long, which errs towards smaller shares.

use std::future::Future;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use tessera_proto::Clock;

/// GCRA (the generic cell rate algorithm) and a quota counter, atomically. A key holds the
/// theoretical arrival time (TAT) of its client: a request is allowed when `now >= TAT -
/// tolerance`, where `tolerance` lets `burst` requests come at once; each allowed request
/// moves TAT on by one emission interval.
///
/// `KEYS[1]` the client's TAT, `KEYS[2]` its count in this quota period. `ARGV`: the
/// emission interval in ms and the burst (0: no rate), the quota (-1: none) and the ms
/// until its key expires. On Redis's `TIME`. Returns `{rate_ok, quota_ok, rate_value,
/// tat_ms_ahead, used}`: `rate_value` is the requests left at once when the rate allows,
/// the ms to wait when it refuses.
pub const COUNT: &str = r"
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

/// The fleet count's heartbeat (see the module's documentation): `KEYS[1]` the sorted set,
/// `ARGV[1]` this instance's id, `ARGV[2]` how long a member is counted after its last beat,
/// in milliseconds. Returns the members counted, this one included.
pub const FLEET: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
redis.call('PEXPIRE', KEYS[1], ttl)
return redis.call('ZCARD', KEYS[1])
";

/// How long an instance is counted in the fleet after its last heartbeat: five beats, so
/// that a beat or two lost on a busy machine does not shrink the count.
pub const FLEET_TTL: Duration = Duration::from_secs(5);

/// How long opening a connection may take, at start and in the background probe.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// The pause between two attempts of the probe while Redis is away, and between two
/// heartbeats while it answers.
pub const PROBE_INTERVAL: Duration = Duration::from_secs(1);

/// What the log says, in the words of the limiter that counts.
#[derive(Debug, Clone, Copy)]
pub struct Messages {
    /// At warn when Redis fails (fields `redis`, `error`, `fallback_instances`).
    pub failed: &'static str,
    /// At info when Redis answers again (fields `redis`, `away_secs`).
    pub back: &'static str,
    /// At info when the fleet count changes (fields `redis`, `counted`).
    pub fleet: &'static str,
    /// At warn when the fleet count changes to one that differs from the expected number
    /// (fields `redis`, `counted`, `expected_instances`, `fallback_instances`).
    pub fleet_differs: &'static str,
}

/// What a [`SharedRedis`] is made of.
#[derive(Debug)]
pub struct Settings {
    /// The client, not yet connected.
    pub client: redis::Client,
    /// The URL without its password, for messages and the log.
    pub url: String,
    /// The key of the fleet's sorted set.
    pub fleet_key: String,
    /// This instance's member of the fleet: random, new on each start.
    pub instance: String,
    /// A floor under the counted fleet, 0 for none.
    pub expected: u32,
    /// The bound on each call made for a request.
    pub timeout: Duration,
    /// For how long Redis was away.
    pub clock: Clock,
    /// What the log says.
    pub messages: Messages,
}

/// Redis as the requests and the probe share it.
pub struct SharedRedis {
    client: redis::Client,
    script: redis::Script,
    fleet_script: redis::Script,
    fleet_key: String,
    instance: String,
    expected: u32,
    /// The instances counted at the last heartbeat that Redis answered (0 before the first).
    fleet: AtomicU32,
    clock: Clock,
    timeout: Duration,
    url: String,
    messages: Messages,
    state: RwLock<State>,
    /// Connections opened so far, to tell the current one from those it replaced.
    generations: AtomicU64,
    /// Calls that failed with an error, requests' and the probe's.
    errors: AtomicU64,
    /// Calls that got no answer in time, requests' and the probe's.
    timeouts: AtomicU64,
}

impl std::fmt::Debug for SharedRedis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedRedis")
            .field("url", &self.url)
            .field("fleet_key", &self.fleet_key)
            .field("instance", &self.instance)
            .field("expected", &self.expected)
            .finish_non_exhaustive()
    }
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
#[non_exhaustive]
pub enum Fault {
    /// No answer in time.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// An error: refused, closed, or one of Redis's own.
    #[error(transparent)]
    Redis(#[from] redis::RedisError),
}

/// What the metrics show of Redis.
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
    /// the expected number of instances where that is larger.
    pub fallback_instances: u32,
}

/// What one run of [`COUNT`] answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counted {
    /// The rate allowed the request (always, with no rate).
    pub rate_ok: bool,
    /// The quota allowed it (always, with no quota).
    pub quota_ok: bool,
    /// Allowed by the rate: the requests left at once; refused: the ms to wait.
    pub rate_value: i64,
    /// The ms until the rate's allowance is whole again.
    pub ahead_ms: i64,
    /// The count in this quota period, this request included when it was allowed.
    pub used: i64,
}

/// One request for [`SharedRedis::count`].
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// The key of the client's TAT.
    pub rate_key: &'a str,
    /// The key of its count in this quota period (never touched without a quota).
    pub quota_key: &'a str,
    /// The emission interval in ms (ignored without a rate).
    pub emission_ms: u64,
    /// The burst, 0 for no rate.
    pub burst: u32,
    /// The quota, `None` for none.
    pub quota: Option<u64>,
    /// How long the quota key lives from its first count, in ms.
    pub quota_ttl_ms: i64,
}

impl SharedRedis {
    /// Not connected yet: see [`SharedRedis::open`] and [`SharedRedis::install`].
    pub fn new(settings: Settings) -> Arc<Self> {
        Arc::new(Self {
            client: settings.client,
            script: redis::Script::new(COUNT),
            fleet_script: redis::Script::new(FLEET),
            fleet_key: settings.fleet_key,
            instance: settings.instance,
            expected: settings.expected,
            fleet: AtomicU32::new(0),
            state: RwLock::new(State::Down {
                since: settings.clock.elapsed(),
            }),
            clock: settings.clock,
            timeout: settings.timeout,
            url: settings.url,
            messages: settings.messages,
            generations: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            timeouts: AtomicU64::new(0),
        })
    }

    /// The URL without its password.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The bound on each call made for a request.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The connection and its generation while Redis counts.
    pub fn current(&self) -> Option<(u64, MultiplexedConnection)> {
        match &*self.state.read().unwrap_or_else(|p| p.into_inner()) {
            State::Up {
                generation,
                connection,
            } => Some((*generation, connection.clone())),
            State::Down { .. } => None,
        }
    }

    /// A new connection (within `connect`) with the script loaded, which also proves that
    /// Redis answers (within `answer`).
    pub async fn open(
        &self,
        connect: Duration,
        answer: Duration,
    ) -> Result<MultiplexedConnection, Fault> {
        let mut connection =
            bounded(connect, self.client.get_multiplexed_async_connection()).await?;
        bounded(answer, self.script.load_async(&mut connection)).await?;
        Ok(connection)
    }

    /// Makes `connection` the one requests use; returns its generation and how long Redis
    /// was away, on the clock.
    pub fn install(&self, connection: MultiplexedConnection) -> (u64, Duration) {
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
    pub fn instances(&self) -> u32 {
        self.fleet.load(Ordering::Relaxed).max(self.expected).max(1)
    }

    /// One heartbeat through the current connection (`answer` at most): counts the fleet,
    /// and logs when the count changes. A failure is handled as a request's would be (the
    /// switch to the fallback) and returned.
    pub async fn count_fleet(&self, generation: u64, answer: Duration) -> Option<Fault> {
        let (current, mut connection) = self.current()?;
        if current != generation {
            return None;
        }
        let mut beat = self.fleet_script.key(&self.fleet_key);
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
            if self.expected != 0 && self.expected != counted {
                tracing::warn!(
                    redis = %self.url,
                    counted,
                    expected_instances = self.expected,
                    fallback_instances = self.instances(),
                    "{}",
                    self.messages.fleet_differs
                );
            } else {
                tracing::info!(redis = %self.url, counted, "{}", self.messages.fleet);
            }
        }
        None
    }

    /// Counts `fault` as an error or a timeout.
    pub fn count_fault(&self, fault: &Fault) {
        let counter = match fault {
            Fault::Timeout(_) => &self.timeouts,
            Fault::Redis(_) => &self.errors,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// A call through connection `generation` failed: the first failure of that connection
    /// switches to the fallback and logs it; later ones (calls already under way) are only
    /// counted.
    pub fn failed(&self, generation: u64, fault: &Fault) {
        self.count_fault(fault);
        let mut state = self.state.write().unwrap_or_else(|p| p.into_inner());
        if matches!(*state, State::Up { generation: current, .. } if current == generation) {
            *state = State::Down {
                since: self.clock.elapsed(),
            };
            tracing::warn!(
                redis = %self.url,
                error = %fault,
                fallback_instances = self.instances(),
                "{}",
                self.messages.failed
            );
        }
    }

    /// [`COUNT`] through `connection`, bounded by the call timeout.
    pub async fn count(
        &self,
        mut connection: MultiplexedConnection,
        request: Request<'_>,
    ) -> Result<Counted, Fault> {
        let mut invocation = self.script.key(request.rate_key);
        invocation
            .key(request.quota_key)
            .arg(request.emission_ms)
            .arg(request.burst)
            .arg(
                request
                    .quota
                    .map_or(-1, |q| i64::try_from(q).unwrap_or(i64::MAX)),
            )
            .arg(request.quota_ttl_ms);
        let (rate_ok, quota_ok, rate_value, ahead_ms, used): (i64, i64, i64, i64, i64) =
            bounded(self.timeout, invocation.invoke_async(&mut connection)).await?;
        Ok(Counted {
            rate_ok: rate_ok == 1,
            quota_ok: quota_ok == 1,
            rate_value,
            ahead_ms,
            used,
        })
    }

    /// Whether Redis counts now, and the calls that failed so far.
    pub fn health(&self) -> Health {
        Health {
            up: self.current().is_some(),
            errors: self.errors.load(Ordering::Relaxed),
            timeouts: self.timeouts.load(Ordering::Relaxed),
            fleet: self.fleet.load(Ordering::Relaxed),
            fallback_instances: self.instances(),
        }
    }

    /// Starts the background task (see the module's documentation); it ends when the last
    /// `Arc` is dropped.
    pub fn spawn_probe(self: &Arc<Self>) {
        tokio::spawn(probe(Arc::downgrade(self)));
    }
}

/// `call`, or [`Fault::Timeout`] once `limit` has passed.
pub async fn bounded<T>(
    limit: Duration,
    call: impl Future<Output = redis::RedisResult<T>>,
) -> Result<T, Fault> {
    match tokio::time::timeout(limit, call).await {
        Ok(answer) => Ok(answer?),
        Err(_) => Err(Fault::Timeout(limit)),
    }
}

/// Once a second: while Redis answers, a heartbeat that counts the fleet; while it is away,
/// a fresh connection, until one answers within the call timeout.
async fn probe(redis: Weak<SharedRedis>) {
    loop {
        tokio::time::sleep(PROBE_INTERVAL).await;
        let Some(redis) = redis.upgrade() else {
            return;
        };
        if let Some((generation, _)) = redis.current() {
            redis.count_fleet(generation, redis.timeout).await;
            continue;
        }
        match redis.open(CONNECT_TIMEOUT, redis.timeout).await {
            Ok(connection) => {
                let (generation, away) = redis.install(connection);
                tracing::info!(
                    redis = %redis.url,
                    away_secs = away.as_secs(),
                    "{}",
                    redis.messages.back
                );
                redis.count_fleet(generation, redis.timeout).await;
            }
            Err(fault) => redis.count_fault(&fault),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// "Asks Redis once a second while it is away" (docs/rate-limits.md, docs/failures.md):
    /// on a paused clock, the probe's attempts on a port that refuses come one a second,
    /// none in between.
    #[tokio::test(start_paused = true)]
    async fn the_probe_asks_once_a_second_while_redis_is_away() {
        // Bound and never listening: the kernel refuses a connection to it.
        let refused = tokio::net::TcpSocket::new_v4().unwrap();
        refused.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let url = format!("redis://{}", refused.local_addr().unwrap());
        let redis = SharedRedis::new(Settings {
            client: redis::Client::open(url.as_str()).unwrap(),
            url,
            fleet_key: "fleet".into(),
            instance: "this".into(),
            expected: 0,
            timeout: Duration::from_millis(50),
            clock: Clock::default(),
            messages: Messages {
                failed: "failed",
                back: "back",
                fleet: "fleet",
                fleet_differs: "fleet differs",
            },
        });
        redis.spawn_probe();
        let attempts = || {
            let health = redis.health();
            health.errors + health.timeouts
        };
        for second in 1..=3 {
            tokio::time::sleep(Duration::from_millis(999)).await;
            assert_eq!(attempts(), second - 1, "an attempt before second {second}");
            tokio::time::sleep(Duration::from_millis(1)).await;
            // The attempt is due now: let it run without moving the clock (a task that
            // yields keeps the paused clock where it is).
            for _ in 0..1_000_000 {
                if attempts() == second {
                    break;
                }
                tokio::task::yield_now().await;
            }
            assert_eq!(attempts(), second, "no attempt at second {second}");
            assert!(!redis.health().up);
        }
    }
}
