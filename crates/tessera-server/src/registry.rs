//! The registry held in memory: plans, clients and signing keys, so that issuing a token
//! touches no database. A background task polls the store's revision counter and reloads the
//! whole registry when another process (the CLI, another instance) changed it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tessera_store::{AuthMethod, Plan, Store, StoreError, Timestamp};
use thiserror::Error;

use crate::clock::Clock;
use crate::keys::{self, KeyRing};
use crate::secrets::Secrets;

/// Why the registry could not be loaded.
#[derive(Debug, Error)]
pub enum LoadError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The shared rate limiter could not be reached.
    #[error("rate limiter: {0}")]
    Limiter(String),
}

/// A client as the token endpoint needs it. `Debug` leaves the hashes out.
pub struct ClientEntry {
    /// Its plan, shared with the other clients of the plan.
    pub plan: Arc<Plan>,
    /// HMAC of the current secret.
    pub secret_hash: Vec<u8>,
    /// HMAC of the previous secret and when it stops working.
    pub previous_secret: Option<(Vec<u8>, Timestamp)>,
    /// How it must authenticate.
    pub auth_method: AuthMethod,
    /// Whether it may get tokens.
    pub enabled: bool,
}

impl std::fmt::Debug for ClientEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientEntry")
            .field("plan", &self.plan.name)
            .field("secret_hash", &"[redacted]")
            .field(
                "previous_secret_until",
                &self.previous_secret.as_ref().map(|(_, t)| t),
            )
            .field("auth_method", &self.auth_method)
            .field("enabled", &self.enabled)
            .finish()
    }
}

/// A consistent snapshot of the registry.
#[derive(Debug, Default)]
pub struct Registry {
    /// The store revision this snapshot reflects.
    pub revision: i64,
    /// Clients by identifier.
    pub clients: HashMap<String, ClientEntry>,
    /// Plans by name.
    pub plans: Vec<Arc<Plan>>,
    /// The signing keys.
    pub keys: KeyRing,
}

impl Registry {
    /// Reads everything from the store.
    pub async fn load(store: &dyn Store, secrets: &Secrets) -> Result<Self, LoadError> {
        // Read the revision first: a change racing with the reads below bumps it again, so
        // the next poll reloads.
        let revision = store.revision().await?;
        let plans: HashMap<String, Arc<Plan>> = store
            .plans()
            .await?
            .into_iter()
            .map(|p| (p.name.clone(), Arc::new(p)))
            .collect();
        let clients = store
            .clients()
            .await?
            .into_iter()
            .filter_map(|c| {
                let plan = plans.get(&c.plan)?.clone();
                let entry = ClientEntry {
                    plan,
                    secret_hash: c.secret_hash,
                    previous_secret: c.previous_secret,
                    auth_method: c.auth_method,
                    enabled: c.enabled,
                };
                Some((c.id.as_str().to_owned(), entry))
            })
            .collect();
        // A key that will not open is left out and logged, not allowed to stop every other
        // change from loading.
        let keys = store
            .keys()
            .await?
            .iter()
            .filter_map(|k| match keys::load(secrets, k) {
                Ok(key) => Some(Arc::new(key)),
                Err(error) => {
                    tracing::error!(%error, "signing key left out");
                    None
                }
            })
            .collect();
        let mut plans: Vec<_> = plans.into_values().collect();
        plans.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(Self {
            revision,
            clients,
            plans,
            keys: KeyRing::new(keys),
        })
    }

    /// Whether some plan grants the scope `name`.
    pub fn knows_scope(&self, name: &str) -> bool {
        self.plans
            .iter()
            .any(|p| p.scopes.iter().any(|s| s.as_str() == name))
    }

    /// Every scope some plan grants.
    pub fn scopes_supported(&self) -> Vec<String> {
        let mut all: Vec<String> = self
            .plans
            .iter()
            .flat_map(|p| p.scopes.iter().map(|s| s.to_string()))
            .collect();
        all.sort();
        all.dedup();
        all
    }
}

/// The live registry: a snapshot swapped whole when the store changes, and the revoked
/// tokens, read incrementally.
#[derive(Debug)]
pub struct Live {
    current: RwLock<Arc<Registry>>,
    /// When the last poll of the store succeeded, for readiness.
    last_sync: AtomicI64,
    /// Whether the last poll succeeded.
    store_up: std::sync::atomic::AtomicBool,
    /// Revoked `jti`s and their `exp`, until then.
    revoked: RwLock<HashMap<String, Timestamp>>,
    /// The highest revocation sequence number read.
    revoked_seq: AtomicI64,
    /// One sync at a time, so that a slow load never replaces a newer snapshot.
    syncing: tokio::sync::Mutex<()>,
    clock: Clock,
}

impl Live {
    /// Starts from `registry`, reading the time from `clock`.
    pub fn new(registry: Registry, clock: Clock) -> Self {
        Self {
            current: RwLock::new(Arc::new(registry)),
            last_sync: AtomicI64::new(clock.now()),
            store_up: std::sync::atomic::AtomicBool::new(true),
            clock,
            revoked: RwLock::default(),
            revoked_seq: AtomicI64::new(0),
            syncing: tokio::sync::Mutex::new(()),
        }
    }

    /// The current snapshot.
    pub fn get(&self) -> Arc<Registry> {
        self.current
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// When the store was last reached.
    pub fn last_sync(&self) -> Timestamp {
        self.last_sync.load(Ordering::Relaxed)
    }

    /// Seconds since the store was last reached: how old the registry may be.
    pub fn age(&self) -> i64 {
        (self.clock.now() - self.last_sync()).max(0)
    }

    /// Whether the last poll of the store succeeded.
    pub fn store_up(&self) -> bool {
        self.store_up.load(Ordering::Relaxed)
    }

    /// Whether the token with this `jti` was revoked.
    pub fn is_revoked(&self, jti: &str) -> bool {
        self.revoked
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(jti)
    }

    /// Remembers a revocation made here, before the next poll reads it back.
    pub fn add_revoked(&self, jti: &str, exp: Timestamp) {
        self.revoked
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(jti.to_owned(), exp);
    }

    /// Polls the store once: swaps in a new snapshot if the registry changed, and reads the
    /// revocations made since the last poll.
    pub async fn sync(&self, store: &dyn Store, secrets: &Secrets) -> Result<bool, LoadError> {
        let outcome = self.poll(store, secrets).await;
        self.store_up.store(outcome.is_ok(), Ordering::Relaxed);
        outcome
    }

    async fn poll(&self, store: &dyn Store, secrets: &Secrets) -> Result<bool, LoadError> {
        let _one_at_a_time = self.syncing.lock().await;
        let revision = store.revision().await?;
        let changed = revision != self.get().revision;
        if changed {
            let fresh = Registry::load(store, secrets).await?;
            *self
                .current
                .write()
                .unwrap_or_else(|poisoned| poisoned.into_inner()) = Arc::new(fresh);
        }
        let after = self.revoked_seq.load(Ordering::Relaxed);
        let fresh = store.revoked_since(after, self.clock.now()).await?;
        if let Some((last, _)) = fresh.last() {
            self.revoked_seq.store(*last, Ordering::Relaxed);
            let mut revoked = self.revoked.write().unwrap_or_else(|p| p.into_inner());
            for (_, r) in fresh {
                revoked.insert(r.jti, r.exp);
            }
        }
        self.last_sync.store(self.clock.now(), Ordering::Relaxed);
        Ok(changed)
    }

    /// Reads every live revocation again and forgets expired ones. Run now and then: a
    /// database may make a revocation visible after a later one was read.
    pub async fn reload_revocations(&self, store: &dyn Store) -> Result<(), LoadError> {
        let _one_at_a_time = self.syncing.lock().await;
        let now = self.clock.now();
        let all = store.revoked_since(0, now).await?;
        let last = all.last().map_or(0, |(seq, _)| *seq);
        let mut revoked = self.revoked.write().unwrap_or_else(|p| p.into_inner());
        // Keep revocations made here that the database may not show yet.
        revoked.retain(|_, exp| *exp > now);
        for (_, r) in all {
            revoked.insert(r.jti, r.exp);
        }
        self.revoked_seq.fetch_max(last, Ordering::Relaxed);
        Ok(())
    }

    /// Polls every `interval` until the task is dropped. Failures are logged, and the last
    /// good snapshot stays in use.
    pub async fn sync_forever(&self, store: &dyn Store, secrets: &Secrets, interval: Duration) {
        // The first poll one interval from now: the server was prepared from a fresh load.
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let was_up = self.store_up();
            match self.sync(store, secrets).await {
                Ok(changed) => {
                    if !was_up {
                        tracing::info!("the store answers again; the registry is fresh");
                    }
                    if changed {
                        tracing::info!(revision = self.get().revision, "registry reloaded");
                    }
                }
                // Once per outage, not once per poll.
                Err(error) if was_up => tracing::error!(
                    %error,
                    "the store does not answer; serving the last good registry until it is \
                     older than the staleness bound"
                ),
                Err(_) => {}
            }
        }
    }
}
