//! The state every request shares: settings, the live registry, limiters, counters; and how
//! a server is prepared (the first signing key included). Its periodic housekeeping is in
//! `housekeeping.rs`.

use std::sync::Arc;

use tessera_store::Store;

use crate::clock::Clock;
use crate::config::{Config, Runtime};
use crate::grant::Grantor;
use crate::keys;
use crate::limits::redis::RedisLimiter;
use crate::limits::{self, AuthThrottle, Limiter, LocalLimiter};
use crate::metrics::Metrics;
use crate::registrar::Registrar;
use crate::registry::{Live, LoadError, Registry, Synced, Trigger};
use crate::reuse::ReuseCache;
use crate::secrets::Secrets;
use crate::store_watch::{StoreHealth, WatchedStore};
use crate::usage::UsageCounter;

/// What the admin API keeps between requests (its logic is in `control/admin`): the verifier
/// of this server's own tokens, rebuilt when the published keys change, and one lock that
/// orders this instance's writes, so that an `If-Match` check and the write it guards are
/// not interleaved with another request's here.
#[derive(Debug, Default)]
pub(crate) struct AdminGuard {
    /// The key ids the verifier was built for, and the verifier.
    pub(crate) verifier: std::sync::Mutex<Option<(Vec<String>, tessera_verify::Verifier)>>,
    pub(crate) writes: tokio::sync::Mutex<()>,
}

/// Shared state of every request: cheap to clone.
#[derive(Debug, Clone)]
pub struct AppState {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: Config,
    /// The issuer, clock, TLS state and client CA, beside the plain settings.
    runtime: Runtime,
    secrets: Arc<Secrets>,
    /// The store, its failures watched; shared with a read for an unknown client id.
    store: Arc<WatchedStore>,
    /// Shared with a read for an unknown client id, which runs on a task of its own.
    live: Arc<Live>,
    limiter: Arc<dyn Limiter>,
    /// The limiter again when it is Redis's, for the metrics.
    redis: Option<Arc<RedisLimiter>>,
    throttle: AuthThrottle,
    metrics: Metrics,
    usage: UsageCounter,
    reuse: ReuseCache,
    in_flight: limits::InFlight,
    admin_guard: AdminGuard,
    refusals: crate::refusals::Refusals,
    dpop: crate::grant::dpop::Dpop,
    assertions: crate::grant::assertion::Assertions,
    /// The console's single sign-on, when configured.
    console_sso: Option<Arc<crate::control::console::Sso>>,
}

impl AppState {
    /// Prepares a server: makes sure a signing key of the configured algorithm is active
    /// (generating one on first start) and loads the registry.
    pub async fn prepare(
        config: Config,
        runtime: Runtime,
        store: Arc<dyn Store>,
        secrets: Arc<Secrets>,
    ) -> Result<Self, LoadError> {
        let clock = runtime.clock.clone();
        keys::bootstrap(store.as_ref(), &secrets, config.signing_alg, clock.now()).await?;
        let max_in_flight = config.max_in_flight;
        // This process among the instances sharing the store and Redis: its member of the
        // Redis fleet, and a field of the registry's log lines.
        let instance = crate::secrets::random_token(12);
        let redis = match &config.redis_url {
            Some(url) => Some(Arc::new(
                RedisLimiter::connect(url, &config, clock.clone(), instance.clone()).await?,
            )),
            None => None,
        };
        let limiter: Arc<dyn Limiter> = match &redis {
            Some(redis) => redis.clone(),
            None => Arc::new(LocalLimiter::new(clock.clone())),
        };
        let live = Live::load(store.as_ref(), &secrets, clock.clone(), instance).await?;
        let dpop =
            crate::grant::dpop::Dpop::new(config.dpop_nonce.then(|| secrets.nonce_key().clone()));
        let assertions = crate::grant::assertion::Assertions::new(config.allow_private_jwks_uri);
        let console_sso = crate::control::console::Sso::from_config(&config, &runtime.issuer)
            .map_err(LoadError::ConsoleSignIn)?
            .map(Arc::new);
        let store = WatchedStore::new(store, &config.database, clock);
        Ok(Self {
            inner: Arc::new(Inner {
                assertions,
                throttle: AuthThrottle::new(limiter.clone(), config.auth_failures()),
                limiter,
                redis,
                config,
                runtime,
                secrets,
                store: Arc::new(store),
                live: Arc::new(live),
                metrics: Metrics::default(),
                usage: UsageCounter::default(),
                reuse: ReuseCache::default(),
                admin_guard: AdminGuard::default(),
                refusals: crate::refusals::Refusals::default(),
                dpop,
                console_sso,
                in_flight: limits::InFlight::new(max_in_flight),
            }),
        })
    }

    /// The console's single sign-on, when configured.
    pub(crate) fn console_sso(&self) -> Option<&Arc<crate::control::console::Sso>> {
        self.inner.console_sso.as_ref()
    }

    /// The settings.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// The issuer identifier in force: `iss` of every token and base of the metadata URLs.
    pub fn issuer(&self) -> &str {
        &self.inner.runtime.issuer
    }

    /// The clock every decision by time reads.
    pub fn clock(&self) -> &Clock {
        &self.inner.runtime.clock
    }

    /// HTTPS on the listener, when served.
    pub(crate) fn tls(&self) -> Option<&Arc<crate::tls::Tls>> {
        self.inner.runtime.tls.as_ref()
    }

    /// The verifier of `tls_client_auth` chains in force ([`Runtime::client_ca`]).
    pub(crate) fn client_ca(&self) -> Option<Arc<dyn rustls::server::danger::ClientCertVerifier>> {
        self.inner.runtime.client_ca()
    }

    /// The registrar: changes to the registry, on this server's store and clock.
    pub fn registrar(&self) -> Registrar<'_> {
        Registrar::new(self.store(), &self.inner.runtime.clock)
    }

    /// Whether the registry is older than the staleness bound: the store has not answered
    /// for that long, so what it says of clients and keys may no longer hold.
    pub fn too_stale(&self) -> bool {
        let age = u64::try_from(self.inner.live.age()).unwrap_or(0);
        age > self.inner.config.max_staleness.as_secs()
    }

    /// The current snapshot of plans and keys.
    pub fn registry(&self) -> Arc<Registry> {
        self.inner.live.get()
    }

    /// The registry kept fresh from the store: the snapshot, the clients, what syncs did.
    pub fn live(&self) -> &Live {
        &self.inner.live
    }

    /// Whether the token with this `jti` was revoked.
    pub(crate) fn is_revoked(&self, jti: &str) -> bool {
        self.inner.live.is_revoked(jti)
    }

    /// What the client credentials grant and client authentication work with (`grant/`).
    pub(crate) fn grantor(&self) -> Grantor<'_> {
        let inner = &*self.inner;
        Grantor {
            config: &inner.config,
            runtime: &inner.runtime,
            live: &inner.live,
            store: &inner.store,
            secrets: &inner.secrets,
            limiter: inner.limiter.as_ref(),
            throttle: &inner.throttle,
            redis: inner.redis.as_deref(),
            reuse: &inner.reuse,
            dpop: &inner.dpop,
            assertions: &inner.assertions,
        }
    }

    /// Recent refusals of identified clients, in this instance's memory.
    pub(crate) fn refusals(&self) -> &crate::refusals::Refusals {
        &self.inner.refusals
    }

    pub(crate) fn admin_guard(&self) -> &AdminGuard {
        &self.inner.admin_guard
    }

    pub(crate) fn secrets(&self) -> &Secrets {
        &self.inner.secrets
    }

    pub(crate) fn store(&self) -> &dyn Store {
        self.inner.store.as_ref()
    }

    /// What the store's failures have been: whether writes fail now, how many failed.
    pub(crate) fn store_health(&self) -> &StoreHealth {
        self.inner.store.health()
    }

    pub(crate) fn limiter(&self) -> &dyn Limiter {
        self.inner.limiter.as_ref()
    }

    /// The Redis limiter, when rate limits are counted in Redis.
    pub(crate) fn redis(&self) -> Option<&RedisLimiter> {
        self.inner.redis.as_deref()
    }

    pub(crate) fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    pub(crate) fn usage(&self) -> &UsageCounter {
        &self.inner.usage
    }

    pub(crate) fn reuse(&self) -> &ReuseCache {
        &self.inner.reuse
    }

    pub(crate) fn in_flight(&self) -> &limits::InFlight {
        &self.inner.in_flight
    }

    /// Polls the store every `sync_interval` until the task is dropped.
    pub(crate) async fn sync_forever(&self) {
        let inner = &self.inner;
        inner
            .live
            .sync_forever(
                inner.store.as_ref(),
                &inner.secrets,
                inner.config.sync_interval,
                inner.config.full_reload_interval,
            )
            .await;
    }

    /// Polls the store once; tests use it to avoid waiting for the background sync.
    pub async fn sync(&self) -> Result<Synced, LoadError> {
        self.inner
            .live
            .sync(
                self.inner.store.as_ref(),
                &self.inner.secrets,
                Trigger::Poll,
            )
            .await
    }
}
