//! GCRA in Redis, so that every instance of a cluster counts against one allowance. One Lua
//! script does the read, the decision and the write atomically, on Redis's own clock; while
//! Redis answers, its decision is the one that counts.
//!
//! The script, the connection, the bound on each call, the fleet's heartbeat, the switch to
//! this process's memory and the way back are [`tessera_verify::shared_redis`], the one
//! implementation the resource-server kit's plan limits use too (with a quota this limiter
//! does not pass).
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
//! a second into a sorted set under the prefix (`{prefix}fleet`); an instance gone for good
//! leaves the count within 5 s; one restarting is counted twice for that long, which errs
//! towards smaller shares.

use std::num::NonZeroU32;
use std::sync::Arc;

use async_trait::async_trait;
use tessera_store::RateLimit;
use tessera_verify::shared_redis::{self, bounded, Fault, Messages, SharedRedis, CONNECT_TIMEOUT};
use tracing::Instrument as _;

use super::{share, Decision, Limiter, LocalLimiter};
use crate::clock::Clock;
use crate::config::{redact_url, Config};

/// The token limiter's words in the log.
const MESSAGES: Messages = Messages {
    failed: "Redis rate limiter failed; this instance counts 1/fallback_instances of each \
             rate in memory until Redis is back",
    back: "Redis answers again; rate limits are counted in Redis",
    fleet: "instances counted through Redis; while Redis fails, each counts 1/counted of \
            every rate",
    fleet_differs: "the instances counted through Redis differ from --expected-instances; \
                    while Redis fails, each counts 1/fallback_instances of every rate, the \
                    larger of the two",
};

/// A [`Limiter`] whose state lives in Redis, with this process's memory as the fallback.
pub(crate) struct RedisLimiter {
    redis: Arc<SharedRedis>,
    prefix: String,
    /// Counts while Redis does not answer, at the fleet's share of each rate.
    fallback: LocalLimiter,
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
pub type Health = shared_redis::Health;

impl std::fmt::Debug for RedisLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisLimiter")
            .field("prefix", &self.prefix)
            .field("redis", &self.redis)
            .finish_non_exhaustive()
    }
}

impl RedisLimiter {
    /// Connects to `url` (`redis://host:port/db`), loads the script and counts the fleet
    /// with a first heartbeat, 2 s at most for each, or fails with a message naming the URL
    /// without its password. Takes from `config` the prefix of the keys, the bound on each
    /// call and the expected number of instances; `clock` is the fallback's; `instance` is
    /// this process's member of the fleet.
    pub(crate) async fn connect(
        url: &str,
        config: &Config,
        clock: Clock,
        instance: String,
    ) -> Result<Self, ConnectError> {
        let redacted = redact_url(url);
        let client = redis::Client::open(url).map_err(|e| ConnectError {
            url: redacted.clone(),
            fault: e.into(),
        })?;
        let redis = SharedRedis::new(shared_redis::Settings {
            client,
            url: redacted,
            fleet_key: format!("{}fleet", config.redis_prefix),
            instance,
            expected: config.expected_instances.map_or(0, NonZeroU32::get),
            timeout: config.redis_timeout,
            clock: clock.clone(),
            messages: MESSAGES,
        });
        let connection = redis
            .open(CONNECT_TIMEOUT, CONNECT_TIMEOUT)
            .await
            .map_err(|fault| ConnectError {
                url: redis.url().to_owned(),
                fault,
            })?;
        let (generation, _) = redis.install(connection);
        if let Some(fault) = redis.count_fleet(generation, CONNECT_TIMEOUT).await {
            return Err(ConnectError {
                url: redis.url().to_owned(),
                fault,
            });
        }
        redis.spawn_probe();
        Ok(Self {
            redis,
            prefix: config.redis_prefix.clone(),
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
        set.arg(format!("{}seen:{key}", self.prefix))
            .arg(1)
            .arg("NX")
            .arg("EX")
            .arg(ttl_secs.max(1));
        let span = redis_span("proof seen", "SET");
        match bounded(
            self.redis.timeout(),
            set.query_async::<Option<String>>(&mut connection),
        )
        .instrument(span.clone())
        .await
        {
            Ok(answer) => Some(answer.is_some()),
            Err(fault) => {
                span.record("otel.status_code", "error");
                self.redis.failed(generation, &fault);
                None
            }
        }
    }

    /// Whether Redis counts now, and the calls that failed so far.
    pub(crate) fn health(&self) -> Health {
        self.redis.health()
    }

    /// GCRA in Redis through `connection`, bounded by the call timeout.
    async fn gcra(
        &self,
        connection: redis::aio::MultiplexedConnection,
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
        let answer = self
            .redis
            .count(
                connection,
                shared_redis::Request {
                    rate_key: &key,
                    // No quota: never touched.
                    quota_key: &key,
                    emission_ms,
                    burst: rate.burst.max(1),
                    quota: None,
                    quota_ttl_ms: 0,
                },
            )
            .await?;
        let secs = |ms: i64| (ms.max(0) as u64).div_ceil(1000);
        Ok(if answer.rate_ok {
            Decision::Allowed {
                remaining: answer.rate_value.clamp(0, i64::from(u32::MAX)) as u32,
                reset_secs: secs(answer.ahead_ms),
            }
        } else {
            Decision::Limited {
                retry_after_secs: secs(answer.rate_value).max(1),
            }
        })
    }
}

#[async_trait]
impl Limiter for RedisLimiter {
    async fn check(&self, key: &str, rate: RateLimit) -> Decision {
        if let Some((generation, connection)) = self.redis.current() {
            let span = redis_span("rate limit", "EVALSHA");
            match self
                .gcra(connection, key, rate)
                .instrument(span.clone())
                .await
            {
                Ok(decision) => return decision,
                Err(fault) => {
                    span.record("otel.status_code", "error");
                    self.redis.failed(generation, &fault);
                }
            }
        }
        let n = NonZeroU32::new(self.redis.instances()).unwrap_or(NonZeroU32::MIN);
        self.fallback.check(key, share(rate, n)).await
    }

    fn prune(&self) {
        self.fallback.prune();
    }

    fn tracked(&self) -> usize {
        self.fallback.tracked()
    }
}

/// The span of a Redis command made for the request in progress (`telemetry.rs`): what it
/// is for and the command, never its key (which names the client) nor its arguments.
fn redis_span(what: &'static str, command: &'static str) -> tracing::Span {
    crate::telemetry::child_span!(
        "redis",
        otel.name = format!("redis {what}"),
        otel.kind = "client",
        db.system.name = "redis",
        db.operation.name = command,
        otel.status_code = tracing::field::Empty,
    )
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// "If Redis cannot be reached at start (2 s), the server does not start and names the
    /// URL" (docs/rate-limits.md): a Redis that takes the connection and never answers,
    /// and one whose port refuses it. The runtime's clock is paused, so the 2 s pass at
    /// once, and a longer bound would show as a longer wait.
    #[tokio::test(start_paused = true)]
    async fn an_unreachable_redis_fails_the_start_within_2_s() {
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = silent.local_addr().unwrap();
        let holding = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((stream, _)) = silent.accept().await {
                held.push(stream);
            }
        });
        // Bound and never listening: the kernel refuses a connection to it.
        let refused = tokio::net::TcpSocket::new_v4().unwrap();
        refused.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        for url in [
            format!("redis://:hunter2@{address}"),
            format!("redis://:hunter2@{}", refused.local_addr().unwrap()),
        ] {
            let started = tokio::time::Instant::now();
            let connected =
                RedisLimiter::connect(&url, &Config::default(), Clock::default(), "one".into())
                    .await;
            let waited = started.elapsed();
            let error = connected.expect_err("no Redis to use").to_string();
            assert!(waited <= Duration::from_secs(2), "{url}: {waited:?}");
            assert!(error.starts_with("cannot use Redis at redis://"), "{error}");
            assert!(!error.contains("hunter2"), "{error}");
        }
        holding.abort();
    }
}
