//! GCRA in Redis, so that every instance of a cluster counts against one allowance. One Lua
//! script does the read, the decision and the write atomically, on Redis's own clock.
//! When Redis cannot be reached the request is allowed (and the failure logged, at most
//! every 10 s): a rate limiter must not take the token service down with it.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tessera_store::RateLimit;

use super::{Decision, Limiter};
use crate::clock::Clock;

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

/// A [`Limiter`] whose state lives in Redis.
pub struct RedisLimiter {
    connection: ConnectionManager,
    script: redis::Script,
    prefix: String,
    /// When an unreachable Redis was last logged, so that an outage logs every 10 s only.
    last_complaint: AtomicI64,
    clock: Clock,
}

impl std::fmt::Debug for RedisLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisLimiter")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl RedisLimiter {
    /// Connects to `url` (`redis://host:port/db`); keys start with `prefix`. Rate limits
    /// run on Redis's clock; `clock` only paces complaints about an unreachable Redis.
    pub async fn connect(url: &str, prefix: &str, clock: Clock) -> redis::RedisResult<Self> {
        let client = redis::Client::open(url)?;
        // The defaults retry a refused connection for minutes (a first wait of 1 s, then up
        // to 60 s, six times): a server pointed at a Redis that is not there would hang
        // instead of failing to start. Two retries a second or two apart, and a bound on
        // each connection attempt, give up within seconds.
        let config = ConnectionManagerConfig::new()
            .set_number_of_retries(2)
            .set_max_delay(1_000)
            .set_connection_timeout(Duration::from_secs(2));
        let connection = ConnectionManager::new_with_config(client, config).await?;
        Ok(Self {
            connection,
            script: redis::Script::new(GCRA),
            prefix: prefix.to_owned(),
            last_complaint: AtomicI64::new(0),
            clock,
        })
    }
}

#[async_trait]
impl Limiter for RedisLimiter {
    async fn check(&self, key: &str, rate: RateLimit) -> Decision {
        let emission_ms =
            (u64::from(rate.period_secs) * 1000 / u64::from(rate.count.max(1))).max(1);
        // The rate is part of the key: a changed plan starts a fresh allowance, as locally.
        let key = format!(
            "{}{}/{}/{}:{key}",
            self.prefix, rate.count, rate.period_secs, rate.burst
        );
        let mut connection = self.connection.clone();
        let answer: redis::RedisResult<(i64, i64, i64)> = self
            .script
            .key(key)
            .arg(emission_ms)
            .arg(rate.burst.max(1))
            .invoke_async(&mut connection)
            .await;
        let secs = |ms: i64| (ms.max(0) as u64).div_ceil(1000);
        match answer {
            Ok((1, remaining, reset_ms)) => Decision::Allowed {
                remaining: remaining.clamp(0, i64::from(u32::MAX)) as u32,
                reset_secs: secs(reset_ms),
            },
            Ok((_, retry_ms, _)) => Decision::Limited {
                retry_after_secs: secs(retry_ms).max(1),
            },
            Err(error) => {
                let now = self.clock.now();
                if now - self.last_complaint.swap(now, Ordering::Relaxed) >= 10 {
                    tracing::error!(%error, "Redis rate limiter unreachable; allowing requests");
                }
                Decision::Allowed {
                    remaining: rate.burst,
                    reset_secs: 0,
                }
            }
        }
    }
}
