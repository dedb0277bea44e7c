//! The registry held in memory: plans, clients and signing keys, so that issuing a token
//! touches no database. A background task polls the store's revision counter and reloads the
//! whole registry when another process (the CLI, another instance) changed it.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tessera_store::{AuthMethod, Plan, Store, StoreError, Timestamp};
use thiserror::Error;

use crate::keys::{self, KeyError, KeyRing};
use crate::secrets::Secrets;

/// Why the registry could not be loaded.
#[derive(Debug, Error)]
pub enum LoadError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A signing key could not be opened.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// The shared rate limiter could not be reached.
    #[error("rate limiter: {0}")]
    Limiter(String),
}

/// A client as the token endpoint needs it.
#[derive(Debug)]
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
    /// `jti`s of revoked tokens that have not expired yet.
    pub revoked: HashSet<String>,
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
        let keys = store
            .keys()
            .await?
            .iter()
            .map(|k| keys::load(secrets, k).map(Arc::new))
            .collect::<Result<Vec<_>, _>>()?;
        let revoked = store
            .revoked(tessera_store::now())
            .await?
            .into_iter()
            .map(|r| r.jti)
            .collect();
        let mut plans: Vec<_> = plans.into_values().collect();
        plans.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(Self {
            revision,
            clients,
            plans,
            keys: KeyRing::new(keys),
            revoked,
        })
    }

    /// The longest token lifetime of any plan: how long a retired key stays published.
    /// Never less than an hour, so that a plan shortened since still has its old tokens
    /// verifiable for the lifetime they were issued with.
    pub fn max_token_ttl(&self) -> i64 {
        self.plans
            .iter()
            .map(|p| i64::from(p.token_ttl))
            .max()
            .unwrap_or(0)
            .max(3600)
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

/// The live registry: a snapshot swapped whole when the store changes.
#[derive(Debug)]
pub struct Live {
    current: RwLock<Arc<Registry>>,
    /// When the last poll of the store succeeded, for readiness.
    last_sync: AtomicI64,
}

impl Live {
    /// Starts from `registry`.
    pub fn new(registry: Registry) -> Self {
        Self {
            current: RwLock::new(Arc::new(registry)),
            last_sync: AtomicI64::new(tessera_store::now()),
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

    /// Polls the store once and swaps in a new snapshot if it changed.
    pub async fn sync(&self, store: &dyn Store, secrets: &Secrets) -> Result<bool, LoadError> {
        let revision = store.revision().await?;
        let changed = revision != self.get().revision;
        if changed {
            let fresh = Registry::load(store, secrets).await?;
            *self
                .current
                .write()
                .unwrap_or_else(|poisoned| poisoned.into_inner()) = Arc::new(fresh);
        }
        self.last_sync
            .store(tessera_store::now(), Ordering::Relaxed);
        Ok(changed)
    }

    /// Polls every `interval` until the task is dropped. Failures are logged, and the last
    /// good snapshot stays in use.
    pub async fn sync_forever(&self, store: &dyn Store, secrets: &Secrets, interval: Duration) {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            match self.sync(store, secrets).await {
                Ok(true) => tracing::info!(revision = self.get().revision, "registry reloaded"),
                Ok(false) => {}
                Err(error) => {
                    tracing::error!(%error, "registry reload failed; serving the last good one")
                }
            }
        }
    }
}
