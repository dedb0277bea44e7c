//! Token reuse, a per-plan option: while a client's last token for the same scopes has more
//! than the plan's share of its lifetime left, that token is returned again with the
//! remaining `expires_in` (still true, since the seed counts it from when the response is
//! generated), and nothing new is minted. It tames callers that don't cache.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tessera_store::Timestamp;

/// A token kept for reuse. `Debug` leaves the token out.
#[derive(Clone)]
pub(crate) struct Kept {
    /// The token itself.
    pub token: Arc<str>,
    /// Its `jti`, checked against revocations.
    pub jti: Arc<str>,
    /// Its `exp`.
    pub exp: Timestamp,
}

impl std::fmt::Debug for Kept {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kept")
            .field("token", &"[redacted]")
            .field("jti", &self.jti)
            .field("exp", &self.exp)
            .finish()
    }
}

/// Last token per (client, scope set).
#[derive(Debug, Default)]
pub(crate) struct ReuseCache(Mutex<HashMap<(String, String), Kept>>);

impl ReuseCache {
    /// The kept token for `client` and `scope` if more than `percent` of `ttl` is left and
    /// `is_revoked` says no.
    pub(crate) fn get(
        &self,
        client: &str,
        scope: &str,
        now: Timestamp,
        ttl: u32,
        percent: u8,
        is_revoked: impl Fn(&str) -> bool,
    ) -> Option<Kept> {
        let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let kept = map.get(&(client.to_owned(), scope.to_owned()))?;
        let left = kept.exp - now;
        let enough = left > 0 && left * 100 > i64::from(ttl) * i64::from(percent);
        (enough && !is_revoked(&kept.jti)).then(|| kept.clone())
    }

    /// Keeps a new token.
    pub(crate) fn put(&self, client: &str, scope: &str, kept: Kept) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert((client.to_owned(), scope.to_owned()), kept);
    }

    /// Forgets a revoked token at once.
    pub(crate) fn forget_jti(&self, jti: &str) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|_, kept| &*kept.jti != jti);
    }

    /// Drops expired entries.
    pub(crate) fn prune(&self, now: Timestamp) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|_, kept| kept.exp > now);
    }
}
