//! Token lifetimes and the single-flight refresh.
//!
//! A token is kept for `expires_in` seconds counted from when its response was received
//! (RFC 6749 section 5.1; the seed: "a client caches access_token for the period given by
//! expires_in"), and replaced a little before that, by the [`RefreshSkew`], so that it does
//! not expire on its way to the API.
//!
//! Lifetimes are measured by the [`Clock`] of the client that received the token (its
//! monotonic reading, so that a stepped wall clock moves nothing), so a test can set the time
//! instead of sleeping.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tessera_proto::token::TokenType;
use tessera_proto::{ClientId, Clock, ScopeSet};

use crate::environment::Environment;
use crate::error::Error;

/// What a cached token is for. Two clients with equal keys may share a token; any difference
/// (another deployment, another client, another scope set) gets its own.
///
/// Serializable (the environment as `production`, `staging` or its URL, the scopes
/// space-separated), so that a cache on disk can use the same key.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CacheKey {
    /// The deployment that issued the token.
    pub environment: Environment,
    /// Its token endpoint, as resolved: two clients that both say `Production` but were
    /// given different addresses must not share a token.
    pub token_endpoint: String,
    /// The client it was issued to.
    pub client_id: ClientId,
    /// The scopes requested.
    pub scopes: ScopeSet,
    /// The RFC 7638 thumbprint of the client's DPoP key, if it has one
    /// ([`ClientKey::thumbprint`](crate::ClientKey::thumbprint)): a token bound to one key
    /// (RFC 9449 section 6.1) is of no use with another, or without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dpop_jkt: Option<String>,
    /// What the client authenticated with, so that a client with other credentials (another
    /// secret, another key, none that work) never gets the token of one that had the right
    /// ones: `secret:` and the SHA-256 of the secret, `private_key_jwt:` and the key's RFC
    /// 7638 thumbprint, `assertion_file:` and the path, `certificate:` and the SHA-256 of the
    /// certificate's PEM. It names the credentials and reveals none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential: Option<String>,
}

/// An access token and its type. `Debug` prints the type and `[redacted]`; read the token
/// with [`AccessToken::expose`].
#[derive(Clone, PartialEq, Eq)]
pub struct AccessToken {
    token: Arc<str>,
    token_type: TokenType,
}

impl AccessToken {
    pub(crate) fn new(token: &str, token_type: TokenType) -> Self {
        Self {
            token: token.into(),
            token_type,
        }
    }

    /// The token itself, for an `Authorization` header of its [`token_type`](Self::token_type)
    /// (RFC 6750 section 2.1, RFC 9449 section 7.1).
    pub fn expose(&self) -> &str {
        &self.token
    }

    /// `Bearer`, or `DPoP` for a token bound to the client's DPoP key, which is sent as
    /// `Authorization: DPoP` with a proof (RFC 9449 section 7.1).
    pub fn token_type(&self) -> TokenType {
        self.token_type
    }
}

impl fmt::Debug for AccessToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} [redacted]", self.token_type.as_str())
    }
}

/// How long before expiry a token is replaced: the smaller of `max` and `percent` of the
/// token's lifetime, and never more than the lifetime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefreshSkew {
    /// The longest skew.
    pub max: Duration,
    /// The skew as a share of the lifetime, in percent.
    pub percent: u32,
}

impl Default for RefreshSkew {
    /// min(30 s, 10% of the lifetime).
    fn default() -> Self {
        Self {
            max: Duration::from_secs(30),
            percent: 10,
        }
    }
}

impl RefreshSkew {
    /// The skew for a token living `lifetime`.
    pub fn for_lifetime(&self, lifetime: Duration) -> Duration {
        let share = lifetime.saturating_mul(self.percent.min(100)) / 100;
        share.min(self.max).min(lifetime)
    }
}

/// The least time between two tokens forgotten on an API's word.
pub(crate) const INVALIDATE_INTERVAL: Duration = Duration::from_secs(30);

/// A moment read from a clock, which tells the time since by that same clock. Clients that
/// share a cache may each have a clock of their own (two system clocks count from different
/// origins), so a time kept in the cache carries the clock it was read from.
#[derive(Debug, Clone)]
pub(crate) struct Stamp {
    clock: Clock,
    /// The clock's monotonic reading at the moment.
    at: Duration,
}

impl Stamp {
    /// Now, by `clock`.
    pub(crate) fn now(clock: &Clock) -> Self {
        Self {
            clock: clock.clone(),
            at: clock.elapsed(),
        }
    }

    /// The time since; zero if the clock was set back.
    fn elapsed(&self) -> Duration {
        self.clock.elapsed().saturating_sub(self.at)
    }
}

/// A token and when it stops being served from the cache.
#[derive(Debug, Clone)]
pub(crate) struct CachedToken {
    pub(crate) token: AccessToken,
    /// When its response was received.
    received: Stamp,
    /// `expires_in`: this long after `received` the server refuses it.
    lifetime: Duration,
    /// `lifetime - skew`: from this long after `received` on, a call refreshes it.
    refresh_after: Duration,
}

impl CachedToken {
    pub(crate) fn new(
        token: AccessToken,
        expires_in: u64,
        received: Stamp,
        skew: RefreshSkew,
    ) -> Self {
        let lifetime = Duration::from_secs(expires_in);
        Self {
            token,
            received,
            lifetime,
            refresh_after: lifetime - skew.for_lifetime(lifetime),
        }
    }
}

/// Tokens for any number of [`CacheKey`]s. Cheap to clone; clones share their tokens. Give
/// one to several builders with [`TokenClientBuilder::cache`](crate::TokenClientBuilder::cache)
/// to let their clients share tokens; a client built without one owns a cache of its own.
#[derive(Debug, Clone, Default)]
pub struct TokenCache {
    entries: Arc<Mutex<HashMap<CacheKey, Arc<CacheEntry>>>>,
}

impl TokenCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many keys the cache has seen.
    pub fn len(&self) -> usize {
        lock(&self.entries).len()
    }

    /// Whether no key has been used yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The entry of `key`, created empty if new.
    pub(crate) fn entry(&self, key: &CacheKey) -> Arc<CacheEntry> {
        lock(&self.entries).entry(key.clone()).or_default().clone()
    }
}

/// The token of one key, and the lock that makes its refresh single-flight.
#[derive(Debug, Default)]
pub(crate) struct CacheEntry {
    /// Read on every call without waiting for a refresh in flight.
    state: Mutex<State>,
    /// Held for the whole of a refresh: one token request at a time per key.
    flight: tokio::sync::Mutex<()>,
}

#[derive(Debug, Default)]
struct State {
    token: Option<CachedToken>,
    /// Refreshes finished so far; tells a waiter whether one ended while it waited.
    finished: u64,
    /// How the last finished refresh failed, for those who waited on it.
    failure: Option<Error>,
    /// When a token was last forgotten on an API's word; see [`CacheEntry::invalidate`].
    last_invalidated: Option<Stamp>,
}

impl State {
    fn fresh(&self) -> Option<AccessToken> {
        let t = self.token.as_ref()?;
        (t.received.elapsed() < t.refresh_after).then(|| t.token.clone())
    }

    fn unexpired(&self) -> Option<AccessToken> {
        let t = self.token.as_ref()?;
        (t.received.elapsed() < t.lifetime).then(|| t.token.clone())
    }
}

impl CacheEntry {
    /// The cached token while fresh; otherwise the result of `fetch`, run by one caller at a
    /// time. Whoever waited on a refresh takes its token (checked again after the wait) or
    /// its error, without a request of its own. If a refresh fails while the old token has
    /// not yet expired (it is within the skew), the old token is served.
    pub(crate) async fn get<F, Fut>(&self, fetch: F) -> Result<AccessToken, Error>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<CachedToken, Error>>,
    {
        let seen = {
            let state = lock(&self.state);
            if let Some(token) = state.fresh() {
                return Ok(token);
            }
            state.finished
        };
        let _flight = self.flight.lock().await;
        {
            let state = lock(&self.state);
            if let Some(token) = state.fresh() {
                return Ok(token);
            }
            // A refresh ended while we waited and failed: take its outcome. (A cancelled one
            // does not count as ended, so its waiters try for themselves.)
            if state.finished != seen {
                if let Some(failure) = &state.failure {
                    return state.unexpired().ok_or_else(|| failure.clone());
                }
            }
        }
        let fetched = fetch().await;
        let mut state = lock(&self.state);
        state.finished += 1;
        match fetched {
            Ok(token) => {
                let access = token.token.clone();
                state.token = Some(token);
                state.failure = None;
                Ok(access)
            }
            Err(error) => {
                state.failure = Some(error.clone());
                state.unexpired().ok_or(error)
            }
        }
    }

    /// Forgets `token` if it is still the cached one, so that the next call refreshes. A
    /// token that has already been replaced stays replaced: many requests rejected with the
    /// same old token cause one refresh. At most one token is forgotten per
    /// [`INVALIDATE_INTERVAL`]: an API that refuses every token (a wrong audience, say) must
    /// not turn each of its calls into a token request against the issuer's rate limit.
    /// `clock` is the caller's.
    pub(crate) fn invalidate(&self, token: &AccessToken, clock: &Clock) -> bool {
        let mut state = lock(&self.state);
        if state
            .last_invalidated
            .as_ref()
            .is_some_and(|at| at.elapsed() < INVALIDATE_INTERVAL)
        {
            return false;
        }
        let current = state.token.as_ref().is_some_and(|t| t.token == *token);
        if current {
            state.token = None;
            state.last_invalidated = Some(Stamp::now(clock));
        }
        current
    }

    #[cfg(test)]
    pub(crate) fn put(&self, token: CachedToken) {
        lock(&self.state).token = Some(token);
    }
}

/// The data stays consistent if a holder panicked: every write is a single assignment.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use reqwest::StatusCode;
    use tessera_proto::ManualClock;

    use super::*;

    /// Token `n`, received now by `clock`.
    fn token_at(n: u32, expires_in: u64, clock: &Clock) -> CachedToken {
        CachedToken::new(
            AccessToken::new(&format!("token-{n}"), TokenType::Bearer),
            expires_in,
            Stamp::now(clock),
            RefreshSkew::default(),
        )
    }

    /// Token `n`, for tests where its lifetime does not matter.
    fn token(n: u32, expires_in: u64) -> CachedToken {
        token_at(n, expires_in, &Clock::system())
    }

    /// A clock standing still and the handle that moves it.
    fn manual() -> (ManualClock, Clock) {
        let manual = ManualClock::at(1_800_000_000);
        (manual.clone(), manual.into())
    }

    fn unavailable() -> Error {
        Error::Server {
            status: StatusCode::SERVICE_UNAVAILABLE,
            code: None,
            attempts: 1,
        }
    }

    #[test]
    fn skew_is_the_smaller_of_30_s_and_a_tenth() {
        let skew = RefreshSkew::default();
        assert_eq!(
            skew.for_lifetime(Duration::from_secs(3600)),
            Duration::from_secs(30)
        );
        assert_eq!(
            skew.for_lifetime(Duration::from_secs(60)),
            Duration::from_secs(6)
        );
        let all = RefreshSkew {
            max: Duration::MAX,
            percent: 500,
        };
        assert_eq!(
            all.for_lifetime(Duration::from_secs(5)),
            Duration::from_secs(5)
        );
    }

    #[tokio::test]
    async fn served_from_cache_until_the_skew_then_refreshed() {
        let (time, clock) = manual();
        let entry = CacheEntry::default();
        let fetches = AtomicU32::new(0);
        let fetch = || async {
            let n = fetches.fetch_add(1, Ordering::SeqCst) + 1;
            Ok(token_at(n, 100, &clock))
        };
        let first = entry.get(fetch).await.unwrap();
        assert_eq!(first.expose(), "token-1");
        // 100 s lifetime: the skew is 10 s, so the token is served for 90 s.
        time.advance(Duration::from_millis(89_900));
        assert_eq!(entry.get(fetch).await.unwrap(), first);
        assert_eq!(fetches.load(Ordering::SeqCst), 1);
        time.advance(Duration::from_millis(200));
        assert_eq!(entry.get(fetch).await.unwrap().expose(), "token-2");
        assert_eq!(fetches.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn one_flight_for_many_callers() {
        let entry = Arc::new(CacheEntry::default());
        let fetches = Arc::new(AtomicU32::new(0));
        let callers: Vec<_> = (0..100)
            .map(|_| {
                let entry = entry.clone();
                let fetches = fetches.clone();
                tokio::spawn(async move {
                    entry
                        .get(|| async move {
                            fetches.fetch_add(1, Ordering::SeqCst);
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            Ok(token(1, 3600))
                        })
                        .await
                })
            })
            .collect();
        for caller in callers {
            assert_eq!(caller.await.unwrap().unwrap().expose(), "token-1");
        }
        assert_eq!(fetches.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn waiters_share_a_failure_then_the_next_call_tries_again() {
        let entry = Arc::new(CacheEntry::default());
        let fetches = Arc::new(AtomicU32::new(0));
        let callers: Vec<_> = (0..20)
            .map(|_| {
                let entry = entry.clone();
                let fetches = fetches.clone();
                tokio::spawn(async move {
                    entry
                        .get(|| async move {
                            fetches.fetch_add(1, Ordering::SeqCst);
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            Err(unavailable())
                        })
                        .await
                })
            })
            .collect();
        for caller in callers {
            assert!(matches!(caller.await.unwrap(), Err(Error::Server { .. })));
        }
        assert_eq!(fetches.load(Ordering::SeqCst), 1);
        let again = entry.get(|| async { Ok(token(2, 3600)) }).await.unwrap();
        assert_eq!(again.expose(), "token-2");
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancelled_refresh_leaves_the_next_caller_free_to_refresh() {
        let entry = Arc::new(CacheEntry::default());
        let first = entry.get(|| async { Err(unavailable()) }).await;
        assert!(first.is_err());
        let slow = {
            let entry = entry.clone();
            tokio::spawn(async move {
                entry
                    .get(|| async {
                        tokio::time::sleep(Duration::from_secs(60)).await;
                        Ok(token(1, 3600))
                    })
                    .await
            })
        };
        tokio::time::sleep(Duration::from_millis(10)).await;
        let waiter = {
            let entry = entry.clone();
            tokio::spawn(async move { entry.get(|| async { Ok(token(2, 3600)) }).await })
        };
        tokio::time::sleep(Duration::from_millis(10)).await;
        slow.abort();
        // The waiter does not take the old failure for the cancelled refresh's outcome.
        assert_eq!(waiter.await.unwrap().unwrap().expose(), "token-2");
    }

    #[tokio::test]
    async fn a_failed_refresh_serves_the_unexpired_token() {
        let (time, clock) = manual();
        let entry = CacheEntry::default();
        entry.put(token_at(1, 100, &clock));
        time.advance(Duration::from_secs(95));
        let served = entry.get(|| async { Err(unavailable()) }).await.unwrap();
        assert_eq!(served.expose(), "token-1");
        time.advance(Duration::from_secs(5));
        assert!(entry.get(|| async { Err(unavailable()) }).await.is_err());
    }

    #[tokio::test]
    async fn invalidating_forgets_only_the_current_token() {
        let clock = Clock::system();
        let entry = CacheEntry::default();
        entry.put(token(1, 3600));
        assert!(!entry.invalidate(&AccessToken::new("token-0", TokenType::Bearer), &clock));
        assert!(entry.invalidate(&AccessToken::new("token-1", TokenType::Bearer), &clock));
        let next = entry.get(|| async { Ok(token(2, 3600)) }).await.unwrap();
        assert_eq!(next.expose(), "token-2");
    }

    #[test]
    fn shared_cache_hands_out_one_entry_per_key() {
        let cache = TokenCache::new();
        let key = |scopes: &str| CacheKey {
            environment: Environment::Staging,
            token_endpoint: "https://staging.example/connect/token".into(),
            client_id: ClientId::parse("app").unwrap(),
            scopes: ScopeSet::parse(scopes).unwrap(),
            dpop_jkt: None,
            credential: None,
        };
        let a = cache.entry(&key("a b"));
        let b = cache.entry(&key("b a"));
        assert!(Arc::ptr_eq(&a, &b));
        let c = cache.entry(&key("a"));
        assert!(!Arc::ptr_eq(&a, &c));
        assert_eq!(cache.len(), 2);
        let json = serde_json::to_string(&key("b a")).unwrap();
        assert_eq!(
            json,
            r#"{"environment":"staging","token_endpoint":"https://staging.example/connect/token","client_id":"app","scopes":"a b"}"#
        );
        assert_eq!(serde_json::from_str::<CacheKey>(&json).unwrap(), key("a b"));
        // The same environment name at another address is another entry.
        let elsewhere = CacheKey {
            token_endpoint: "https://other.example/connect/token".into(),
            ..key("a b")
        };
        assert!(!Arc::ptr_eq(&a, &cache.entry(&elsewhere)));
    }

    #[test]
    fn debug_hides_tokens() {
        let entry = CacheEntry::default();
        entry.put(token(7, 60));
        let printed = format!(
            "{entry:?} {:?}",
            AccessToken::new("token-7", TokenType::Bearer)
        );
        assert!(!printed.contains("token-7"), "{printed}");
        assert!(printed.contains("[redacted]"));
    }

    #[test]
    fn an_api_refusing_every_token_forces_one_refresh_per_interval() {
        let (time, clock) = manual();
        let entry = CacheEntry::default();
        let first = token_at(1, 3600, &clock);
        entry.put(first.clone());
        assert!(entry.invalidate(&first.token, &clock));
        let second = token_at(2, 3600, &clock);
        entry.put(second.clone());
        assert!(
            !entry.invalidate(&second.token, &clock),
            "a second refusal right away is ignored"
        );
        time.advance(INVALIDATE_INTERVAL - Duration::from_millis(1));
        assert!(!entry.invalidate(&second.token, &clock));
        time.advance(Duration::from_millis(1));
        assert!(entry.invalidate(&second.token, &clock));
    }
}
