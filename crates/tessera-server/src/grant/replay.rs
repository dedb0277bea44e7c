//! Values a client may use once at the token endpoint: DPoP proofs (RFC 9449 section 11.1)
//! and client assertions (RFC 7523 section 3). They are remembered in Redis when rate limits
//! are counted there, so that one replayed at another instance is refused too; in this
//! process otherwise, and while Redis does not answer.

use tessera_verify::replay::{self, ReplayCache, ReplayError};

use crate::limits::redis::RedisLimiter;

/// The memory of one kind of single-use value.
#[derive(Debug)]
pub(crate) struct Replay {
    /// What the values are, in their Redis keys: `""` for DPoP proofs, `"jti:"` for
    /// assertions (the keys earlier versions wrote, so that instances of both agree).
    kind: &'static str,
    /// This process's memory.
    local: ReplayCache,
}

impl Replay {
    /// A memory of values of `kind`, held in `local` without Redis.
    pub(crate) fn new(kind: &'static str, local: ReplayCache) -> Self {
        Self { kind, local }
    }

    /// Records `jti` of `key` at `now`, charged to `holder` in this process's memory (each
    /// holder may fill only its share), for `ttl_secs` in Redis: `Ok` the first time,
    /// [`ReplayError::Replayed`] after, [`ReplayError::Busy`] when this process's memory is
    /// full.
    pub(crate) async fn first_use(
        &self,
        redis: Option<&RedisLimiter>,
        holder: &str,
        key: &str,
        jti: &str,
        now: i64,
        ttl_secs: u64,
    ) -> Result<(), ReplayError> {
        let shared = match redis {
            Some(redis) => {
                let digest = replay::digest(key, jti);
                let name = format!("{}{digest:032x}", self.kind);
                redis.first_use(&name, ttl_secs).await
            }
            None => None,
        };
        match shared {
            Some(true) => Ok(()),
            Some(false) => Err(ReplayError::Replayed),
            None => self.local.first_use_by(holder, key, jti, now),
        }
    }
}
