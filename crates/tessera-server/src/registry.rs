//! The registry held in memory: plans, clients and signing keys, so that issuing a token
//! touches no database.
//!
//! Clients are many (a million and more): they live in [`Clients`], a map in shards that a
//! change updates in place, one entry at a time, never copied whole. Plans and keys are few:
//! they form a snapshot, [`Registry`], swapped whole when one of them changes. A client names
//! its plan by [`PlanSlot`], looked up in the snapshot at each request, so that a plan change
//! reaches every client of the plan at once without touching any of them.
//!
//! [`Live`] keeps both fresh. Every sync interval it reads the store's change log
//! ([`Store::changes_since`]) after the last change it applied and applies each changed row:
//! one disabled client costs one row, whatever the number of clients. An unknown client id of
//! the generated shape triggers such a read at once ([`Live::refresh_for_unknown`]), so that
//! a client created a moment ago elsewhere is served; one read at a time, on a task of its
//! own, and none while the store does not answer. A full reload runs only as a safety net
//! ([`Live::reload`]), in pages of clients replaced in place, so that it never holds a second
//! copy of the registry.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tessera_store::{AuthMethod, Changes, Client, Plan, Store, StoreError, Timestamp};
use thiserror::Error;
use tokio::sync::watch;

use crate::clock::Clock;
use crate::keys::{self, KeyRing};
use crate::limits::redis::ConnectError;
use crate::secrets::Secrets;

/// Why the registry could not be loaded.
#[derive(Debug, Error)]
pub enum LoadError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The shared rate limiter could not be reached.
    #[error("rate limiter: {0}")]
    Limiter(#[from] ConnectError),
}

/// Changes read from the store per query: a burst of changes (a bulk import) is applied in
/// rounds of this many, never held all at once.
const CHANGES_PAGE: u32 = 10_000;

/// Clients read per query in a full reload, and so the most a reload holds besides the
/// registry itself.
const RELOAD_PAGE: u32 = 10_000;

/// How long the store keeps a change for instances that have not read it yet. An instance
/// that falls further behind (cut off from the store for longer) reads everything again.
pub const CHANGE_RETENTION: Duration = Duration::from_secs(3600);

/// How long requests wait on a read of the store for an unknown client id. The change log
/// answers in milliseconds when the store is well: a read still running after this is an
/// outage beginning, and the requests are refused rather than held.
pub const UNKNOWN_READ_WAIT: Duration = Duration::from_secs(1);

/// Shards of the client map: a change locks one shard for an instant, and a shard that grows
/// reallocates only its own share of the clients.
const SHARDS: usize = 64;

/// Where a client's plan sits in the [`Registry`]: a plan name's slot stays the same while
/// the process runs, whatever becomes of the plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanSlot(u32);

/// A client as the token endpoint needs it, in 48 bytes and no allocation of its own for a
/// client with a secret (the common case). `Debug` leaves the hashes out.
pub struct ClientEntry {
    /// HMAC-SHA-256 of the current secret. When [`Extra::credential`] is set, it holds the
    /// credential instead and this is zero.
    hash: [u8; 32],
    /// What few clients have: a certificate or key to match, a previous secret.
    extra: Option<Box<Extra>>,
    /// Its plan, in the registry snapshot.
    pub plan: PlanSlot,
    /// How it must authenticate.
    pub auth_method: AuthMethod,
    /// Whether it may get tokens.
    pub enabled: bool,
    /// The mark of the last full reload that read it, or that a change wrote: the reload
    /// removes what it did not mark (deleted without a change it read). One byte where the
    /// layout has padding, so it costs nothing.
    mark: u8,
}

/// The rarer parts of a client, behind one pointer.
struct Extra {
    /// For a certificate or key method (RFC 8705, RFC 7523), what the certificate or
    /// assertion must match, encoded by `mtls::encode_match`; or a secret's hash that is not
    /// 32 bytes long.
    credential: Option<Box<[u8]>>,
    /// HMAC of the previous secret and when it stops working.
    previous_secret: Option<(Box<[u8]>, Timestamp)>,
}

impl ClientEntry {
    fn new(client: Client, plan: PlanSlot, mark: u8) -> Self {
        let credential = match &client.certificate {
            Some(certificate) if client.auth_method.is_keyed() => {
                crate::mtls::encode_match(certificate)
            }
            _ => client.secret_hash,
        };
        let (hash, credential) = match <[u8; 32]>::try_from(credential.as_slice()) {
            Ok(hash) => (hash, None),
            Err(_) => ([0; 32], Some(credential.into_boxed_slice())),
        };
        let previous_secret = client
            .previous_secret
            .map(|(hash, until)| (hash.into_boxed_slice(), until));
        let extra = (credential.is_some() || previous_secret.is_some()).then(|| {
            Box::new(Extra {
                credential,
                previous_secret,
            })
        });
        Self {
            hash,
            extra,
            plan,
            auth_method: client.auth_method,
            enabled: client.enabled,
            mark,
        }
    }

    /// HMAC of the current secret; for a certificate or key method, what the certificate
    /// or assertion must match instead (see `mtls::decode_match`).
    pub fn secret_hash(&self) -> &[u8] {
        self.extra
            .as_ref()
            .and_then(|extra| extra.credential.as_deref())
            .unwrap_or(&self.hash)
    }

    /// HMAC of the previous secret and when it stops working, after a rotation.
    pub fn previous_secret(&self) -> Option<(&[u8], Timestamp)> {
        let (hash, until) = self.extra.as_ref()?.previous_secret.as_ref()?;
        Some((hash, *until))
    }
}

impl std::fmt::Debug for ClientEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientEntry")
            .field("plan", &self.plan)
            .field("secret_hash", &"[redacted]")
            .field(
                "previous_secret_until",
                &self.previous_secret().map(|(_, t)| t),
            )
            .field("auth_method", &self.auth_method)
            .field("enabled", &self.enabled)
            .finish()
    }
}

/// A client id as a map key: inline when it is as short as generated ids are (`tc_` and 22
/// characters), so that a client costs no allocation for its id; boxed otherwise. Hashed and
/// compared as its bytes, so that a map of them is searched by `&[u8]`.
#[derive(Clone)]
pub(crate) enum ClientKey {
    Inline { len: u8, bytes: [u8; INLINE_ID] },
    Boxed(Box<str>),
}

/// The longest id held inline: generated ids are 25 bytes.
const INLINE_ID: usize = 30;

impl ClientKey {
    pub(crate) fn new(id: &str) -> Self {
        match u8::try_from(id.len()) {
            Ok(len) if id.len() <= INLINE_ID => {
                let mut bytes = [0; INLINE_ID];
                bytes[..id.len()].copy_from_slice(id.as_bytes());
                Self::Inline { len, bytes }
            }
            _ => Self::Boxed(id.into()),
        }
    }

    fn as_bytes(&self) -> &[u8] {
        match self {
            Self::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Self::Boxed(id) => id.as_bytes(),
        }
    }

    /// The id. Made from a `&str`, so always UTF-8.
    pub(crate) fn as_str(&self) -> &str {
        match self {
            Self::Inline { .. } => std::str::from_utf8(self.as_bytes()).unwrap_or_default(),
            Self::Boxed(id) => id,
        }
    }
}

impl std::fmt::Debug for ClientKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq for ClientKey {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for ClientKey {}

impl std::hash::Hash for ClientKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        // As `[u8]` hashes, which `Borrow` requires.
        self.as_bytes().hash(state);
    }
}

impl std::borrow::Borrow<[u8]> for ClientKey {
    fn borrow(&self) -> &[u8] {
        self.as_bytes()
    }
}

/// The shard of `id`: FNV-1a over its bytes, with a per-process seed. Only a lock stripe,
/// never a search, depends on it (each shard's map hashes with its own random key), so a
/// cheap function serves; the maps' SipHash is paid once per search, not twice.
fn shard_of(id: &[u8], seed: u64) -> usize {
    let hash = id
        .iter()
        .copied()
        .fold(0xcbf2_9ce4_8422_2325 ^ seed, |hash, byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
        });
    // The high bits mix best.
    (hash >> 32) as usize % SHARDS
}

/// One shard of the clients: a map by id, and the room its table has.
#[derive(Default)]
struct Shard {
    map: HashMap<ClientKey, ClientEntry>,
    /// How many clients the map's table holds before it grows: what its memory is sized
    /// by. Kept here because the map's own `capacity()` leaves out the slots that removed
    /// entries left marked as deleted, and so understates the table after deletes, just
    /// when it matters. Exact after the map grows or is rebuilt, which clears those marks.
    room: usize,
}

impl Shard {
    /// Notes the table's room after it may have grown.
    fn grown(&mut self) {
        self.room = self.room.max(self.map.capacity());
    }

    /// Gives memory back once the shard holds under a quarter of its room (clients deleted
    /// en masse, a bulk import undone): the table is rebuilt with room for twice what it
    /// holds. A map never shrinks by itself, so the memory of a peak would stay until
    /// restart. The gap between growing (when full) and shrinking (at a quarter) keeps a
    /// shard whose size hovers from being rebuilt back and forth: each rebuild, O(its
    /// clients), follows at least as many removals, and holds the lock of this shard only.
    fn shrink_if_sparse(&mut self) {
        if self.map.len() < self.room / 4 {
            self.map.shrink_to(self.map.len() * 2);
            self.room = self.map.capacity();
        }
    }
}

/// The clients by id, in shards each behind its own lock: readers of one shard never wait
/// for each other, and a change holds one shard's lock only while it writes one entry.
pub struct Clients {
    shards: Box<[RwLock<Shard>]>,
    /// Mixed into the shard choice, per process.
    seed: u64,
}

impl std::fmt::Debug for Clients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Clients").field("len", &self.len()).finish()
    }
}

impl Default for Clients {
    fn default() -> Self {
        Self {
            shards: (0..SHARDS).map(|_| RwLock::default()).collect(),
            seed: std::hash::BuildHasher::hash_one(
                &std::collections::hash_map::RandomState::new(),
                0u8,
            ),
        }
    }
}

impl Clients {
    fn shard(&self, id: &[u8]) -> &RwLock<Shard> {
        &self.shards[shard_of(id, self.seed)]
    }

    /// Calls `read` with the client `id`, under its shard's read lock; `None` if unknown.
    /// `read` must be quick: it holds up changes to the shard (never the other readers).
    pub fn with<R>(&self, id: &str, read: impl FnOnce(&ClientEntry) -> R) -> Option<R> {
        let shard = self
            .shard(id.as_bytes())
            .read()
            .unwrap_or_else(|p| p.into_inner());
        shard.map.get(id.as_bytes()).map(read)
    }

    /// How many clients there are.
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.read().unwrap_or_else(|p| p.into_inner()).map.len())
            .sum()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many clients the shards' tables hold before they grow: what their memory is
    /// sized by (an 80-byte slot each, see the tests), whatever they hold now.
    pub fn capacity(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.read().unwrap_or_else(|p| p.into_inner()).room)
            .sum()
    }

    fn put(&self, id: ClientKey, entry: ClientEntry) {
        let mut shard = self
            .shard(id.as_bytes())
            .write()
            .unwrap_or_else(|p| p.into_inner());
        // One search: the key costs no allocation to make, and an existing one is kept.
        shard.map.insert(id, entry);
        shard.grown();
    }

    /// Makes room for `more` clients beyond those held, spread over the shards, so that a
    /// first load grows no shard step by step.
    fn reserve(&self, more: usize) {
        for shard in self.shards.iter() {
            let mut shard = shard.write().unwrap_or_else(|p| p.into_inner());
            shard.map.reserve(more / SHARDS + 1);
            shard.grown();
        }
    }

    fn remove(&self, id: &str) {
        let mut shard = self
            .shard(id.as_bytes())
            .write()
            .unwrap_or_else(|p| p.into_inner());
        if shard.map.remove(id.as_bytes()).is_some() {
            shard.shrink_if_sparse();
        }
    }

    /// Removes every client not marked `mark`; returns how many.
    fn sweep(&self, mark: u8) -> usize {
        self.shards
            .iter()
            .map(|shard| {
                let mut shard = shard.write().unwrap_or_else(|p| p.into_inner());
                let before = shard.map.len();
                shard.map.retain(|_, entry| entry.mark == mark);
                shard.shrink_if_sparse();
                before - shard.map.len()
            })
            .sum()
    }
}

/// The plans and signing keys: a snapshot, replaced whole when one of them changes.
#[derive(Debug, Default, Clone)]
pub struct Registry {
    /// Plans by slot; `None` for a name whose plan is gone (or not read yet).
    plans: Vec<Option<Arc<Plan>>>,
    /// Each plan name's slot. Names are only added: a slot is never given to another name.
    slots: HashMap<String, PlanSlot>,
    /// The signing keys.
    pub keys: KeyRing,
}

impl Registry {
    /// The plan in `slot`, if it exists.
    pub fn plan(&self, slot: PlanSlot) -> Option<&Arc<Plan>> {
        self.plans.get(slot.0 as usize)?.as_ref()
    }

    /// Every plan.
    pub fn plans(&self) -> impl Iterator<Item = &Arc<Plan>> {
        self.plans.iter().flatten()
    }

    /// The slot of plan `name`, given one if it has none yet.
    fn slot(&mut self, name: &str) -> PlanSlot {
        if let Some(slot) = self.slots.get(name) {
            return *slot;
        }
        let slot = PlanSlot(u32::try_from(self.plans.len()).expect("fewer than 2^32 plans"));
        self.plans.push(None);
        self.slots.insert(name.to_owned(), slot);
        slot
    }

    fn set_plan(&mut self, name: &str, plan: Option<Plan>) {
        let slot = self.slot(name);
        self.plans[slot.0 as usize] = plan.map(Arc::new);
    }

    /// Whether some plan grants the scope `name`.
    pub fn knows_scope(&self, name: &str) -> bool {
        self.plans()
            .any(|p| p.scopes.iter().any(|s| s.as_str() == name))
    }

    /// Every scope some plan grants.
    pub fn scopes_supported(&self) -> Vec<String> {
        let mut all: Vec<String> = self
            .plans()
            .flat_map(|p| p.scopes.iter().map(|s| s.to_string()))
            .collect();
        all.sort();
        all.dedup();
        all
    }
}

/// What started a sync, for the metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// The periodic poll (or a caller that wants the store read now).
    Poll,
    /// A token request with a client id the registry did not know.
    UnknownClient,
}

/// What one sync did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Synced {
    /// Changed rows applied.
    pub changes: usize,
    /// Whether the store had pruned changes this instance had not read, so that it read
    /// everything again instead.
    pub reloaded: bool,
}

/// Counts of what the registry's syncs did since start, for `/metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SyncCounts {
    /// Syncs by the periodic poll.
    pub polls: u64,
    /// Syncs for an unknown client id.
    pub unknown_client_syncs: u64,
    /// Unknown client ids refused without a sync: one had just run, one has run longer than
    /// [`UNKNOWN_READ_WAIT`], or the store does not answer.
    pub unknown_client_skipped: u64,
    /// Changed plans applied.
    pub plan_changes: u64,
    /// Changed clients applied.
    pub client_changes: u64,
    /// Changed keys applied.
    pub key_changes: u64,
    /// Full reloads: the first load, the safety net, and after falling behind the log.
    pub reloads: u64,
    /// Clients held now.
    pub clients: u64,
    /// Clients the registry's maps have room for ([`Clients::capacity`]): their memory.
    pub client_slots: u64,
}

#[derive(Debug, Default)]
struct Counters {
    polls: AtomicU64,
    unknown_client_syncs: AtomicU64,
    unknown_client_skipped: AtomicU64,
    plan_changes: AtomicU64,
    client_changes: AtomicU64,
    key_changes: AtomicU64,
    reloads: AtomicU64,
}

fn bump(counter: &AtomicU64, by: usize) {
    counter.fetch_add(by as u64, Ordering::Relaxed);
}

/// The syncs for unknown client ids ([`Live::refresh_for_unknown`]).
#[derive(Debug, Default)]
struct UnknownReads {
    /// When (on the clock's monotonic reading) the last one began: at most one per interval.
    last: Option<Duration>,
    /// The last one: when it began (on the runtime's timer), and once it is over, whether
    /// it succeeded.
    current: Option<(tokio::time::Instant, watch::Receiver<Option<bool>>)>,
}

/// The live registry: the plan and key snapshot, the clients, and the revoked tokens, each
/// kept fresh from the store's change logs.
#[derive(Debug)]
pub struct Live {
    current: RwLock<Arc<Registry>>,
    clients: Clients,
    /// The number of the last change applied.
    applied: AtomicI64,
    /// The mark of the current (or last) full reload; see [`ClientEntry::mark`].
    mark: AtomicU8,
    /// When the last poll of the store succeeded, for readiness.
    last_sync: AtomicI64,
    /// Whether the last poll succeeded.
    store_up: AtomicBool,
    /// Revoked `jti`s and their `exp`, until then.
    revoked: RwLock<HashMap<String, Timestamp>>,
    /// The highest revocation sequence number read.
    revoked_seq: AtomicI64,
    /// One writer at a time: a sync, or one page of a full reload.
    syncing: tokio::sync::Mutex<()>,
    /// Syncs begun, numbered from 1.
    begun: AtomicU64,
    /// The number of the last sync that finished: one numbered above what a caller saw
    /// begun had begun after it, and so read every change committed before it asked.
    finished: AtomicU64,
    /// The syncs for unknown client ids: one at a time, shared by every miss.
    unknown_reads: Mutex<UnknownReads>,
    /// The latest change number, sampled at each housekeeping round: what to prune once it
    /// is older than [`CHANGE_RETENTION`].
    change_samples: Mutex<VecDeque<(Timestamp, i64)>>,
    counters: Counters,
    clock: Clock,
}

impl Live {
    /// Reads everything from the store, reading the time from `clock`.
    pub async fn load(
        store: &dyn Store,
        secrets: &Secrets,
        clock: Clock,
    ) -> Result<Self, LoadError> {
        let live = Self {
            current: RwLock::default(),
            clients: Clients::default(),
            applied: AtomicI64::new(0),
            mark: AtomicU8::new(0),
            last_sync: AtomicI64::new(clock.now()),
            store_up: AtomicBool::new(true),
            revoked: RwLock::default(),
            revoked_seq: AtomicI64::new(0),
            syncing: tokio::sync::Mutex::new(()),
            begun: AtomicU64::new(0),
            finished: AtomicU64::new(0),
            unknown_reads: Mutex::default(),
            change_samples: Mutex::default(),
            counters: Counters::default(),
            clock,
        };
        live.read_everything(store, secrets, true).await?;
        // Revoked tokens are refused from the first request on, not from the first poll.
        live.reload_revocations(store).await?;
        Ok(live)
    }

    /// The current plan and key snapshot.
    pub fn get(&self) -> Arc<Registry> {
        self.current
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    fn swap(&self, registry: Registry) {
        *self
            .current
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Arc::new(registry);
    }

    /// The clients.
    pub fn clients(&self) -> &Clients {
        &self.clients
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

    /// What the syncs did since start.
    pub fn counts(&self) -> SyncCounts {
        let c = &self.counters;
        let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        SyncCounts {
            polls: read(&c.polls),
            unknown_client_syncs: read(&c.unknown_client_syncs),
            unknown_client_skipped: read(&c.unknown_client_skipped),
            plan_changes: read(&c.plan_changes),
            client_changes: read(&c.client_changes),
            key_changes: read(&c.key_changes),
            reloads: read(&c.reloads),
            clients: self.clients.len() as u64,
            client_slots: self.clients.capacity() as u64,
        }
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

    /// Reads the store once: applies the registry changes made since the last sync, and
    /// reads the revocations made since. Logs when the store stops answering (once per
    /// outage, whichever sync sees it first) and when it answers again.
    pub async fn sync(
        &self,
        store: &dyn Store,
        secrets: &Secrets,
        trigger: Trigger,
    ) -> Result<Synced, LoadError> {
        let outcome = self.poll(store, secrets, trigger).await;
        let was_up = self.store_up.swap(outcome.is_ok(), Ordering::Relaxed);
        match &outcome {
            Err(error) if was_up => tracing::error!(
                %error,
                "the store does not answer; serving the last good registry until it is \
                 older than the staleness bound"
            ),
            Ok(_) if !was_up => tracing::info!("the store answers again; the registry is fresh"),
            _ => {}
        }
        outcome
    }

    async fn poll(
        &self,
        store: &dyn Store,
        secrets: &Secrets,
        trigger: Trigger,
    ) -> Result<Synced, LoadError> {
        let guard = self.syncing.lock().await;
        let number = self.begun.fetch_add(1, Ordering::Relaxed) + 1;
        bump(
            match trigger {
                Trigger::Poll => &self.counters.polls,
                Trigger::UnknownClient => &self.counters.unknown_client_syncs,
            },
            1,
        );
        let mut synced = Synced::default();
        loop {
            let after = self.applied.load(Ordering::Relaxed);
            let Some(changes) = store.changes_since(after, CHANGES_PAGE).await? else {
                synced.reloaded = true;
                break;
            };
            let more = changes.more;
            synced.changes += self.apply(changes, secrets);
            if !more {
                break;
            }
        }
        drop(guard);
        if synced.reloaded {
            tracing::warn!(
                "changes this instance had not read were pruned from the store; reading \
                 the whole registry again"
            );
            self.read_everything(store, secrets, true).await?;
        }
        let after = self.revoked_seq.load(Ordering::Relaxed);
        let fresh = store.revoked_since(after, self.clock.now()).await?;
        if let Some((last, _)) = fresh.last() {
            self.revoked_seq.fetch_max(*last, Ordering::Relaxed);
            let mut revoked = self.revoked.write().unwrap_or_else(|p| p.into_inner());
            for (_, r) in fresh {
                revoked.insert(r.jti, r.exp);
            }
        }
        self.last_sync.store(self.clock.now(), Ordering::Relaxed);
        self.finished.fetch_max(number, Ordering::Relaxed);
        Ok(synced)
    }

    /// Applies one page of changes; the caller holds `syncing`. Returns the rows applied.
    fn apply(&self, changes: Changes, secrets: &Secrets) -> usize {
        let applied = changes.len();
        let c = &self.counters;
        bump(&c.plan_changes, changes.plans.len());
        bump(&c.client_changes, changes.clients.len());
        bump(&c.key_changes, changes.keys.len());
        let current = self.get();
        // Plans and keys first: a client may name a plan created in the same page.
        let new_plans = changes
            .clients
            .iter()
            .filter_map(|(_, c)| c.as_ref())
            .any(|c| !current.slots.contains_key(&c.plan));
        if !changes.plans.is_empty() || !changes.keys.is_empty() || new_plans {
            let mut next = (*current).clone();
            for (name, plan) in changes.plans {
                next.set_plan(&name, plan);
            }
            for (kid, key) in changes.keys {
                let key = key.and_then(|record| keys::load_or_log(secrets, &record));
                next.keys = next.keys.replace(&kid, key);
            }
            for client in changes.clients.iter().filter_map(|(_, c)| c.as_ref()) {
                next.slot(&client.plan);
            }
            self.swap(next);
        }
        let registry = self.get();
        let mark = self.mark.load(Ordering::Relaxed);
        for (id, client) in changes.clients {
            match client {
                Some(client) => self.put_client(&registry, client, mark),
                None => self.clients.remove(id.as_str()),
            }
        }
        self.applied.fetch_max(changes.through, Ordering::Relaxed);
        applied
    }

    fn put_client(&self, registry: &Registry, client: Client, mark: u8) {
        let Some(plan) = registry.slots.get(&client.plan).copied() else {
            // Every plan a client names was given a slot before its clients are written.
            tracing::error!(client = %client.id, plan = %client.plan, "client of a plan without a slot");
            return;
        };
        let id = ClientKey::new(client.id.as_str());
        self.clients.put(id, ClientEntry::new(client, plan, mark));
    }

    /// Reads every plan, client and key again, as a safety net against a change the log
    /// would have missed (a row changed by hand in the database, without the triggers).
    ///
    /// Peak memory stays near one registry: clients are read in pages of 10,000 in id order
    /// and written over their entries in place, each marked; at the end, the entries no
    /// page marked (deleted) are removed. Changes go on being
    /// applied between pages (each page holds the sync lock only while it is written), so
    /// a reload never delays a change by more than one page.
    pub async fn reload(&self, store: &dyn Store, secrets: &Secrets) -> Result<(), LoadError> {
        self.read_everything(store, secrets, false).await
    }

    /// A full reload; `restart_log`: go on reading the change log from the latest change
    /// now, rather than from the last change applied (at start, or after falling behind a
    /// prune).
    async fn read_everything(
        &self,
        store: &dyn Store,
        secrets: &Secrets,
        restart_log: bool,
    ) -> Result<(), LoadError> {
        let mark = {
            let _one_at_a_time = self.syncing.lock().await;
            // The latest change before anything is read: every later one is applied as a
            // change, over what the pages read.
            let latest = store.latest_change().await?;
            let plans = store.plans().await?;
            let records = store.keys().await?;
            let mut next = (*self.get()).clone();
            for slot in &mut next.plans {
                *slot = None;
            }
            for plan in plans {
                next.set_plan(&plan.name.clone(), Some(plan));
            }
            next.keys = KeyRing::new(
                records
                    .iter()
                    .filter_map(|record| keys::load_or_log(secrets, record))
                    .collect(),
            );
            self.swap(next);
            if restart_log {
                self.applied.store(latest, Ordering::Relaxed);
            }
            let mark = self.mark.load(Ordering::Relaxed).wrapping_add(1);
            self.mark.store(mark, Ordering::Relaxed);
            mark
        };
        if self.clients.is_empty() {
            // The first load: every shard sized once for what is there.
            let total: u64 = store.clients_per_plan().await?.iter().map(|(_, n)| n).sum();
            self.clients
                .reserve(usize::try_from(total).unwrap_or(usize::MAX));
        }
        let mut after: Option<String> = None;
        loop {
            let _one_at_a_time = self.syncing.lock().await;
            let page = store
                .clients_page(None, after.as_deref(), RELOAD_PAGE)
                .await?;
            let full = page.len() >= RELOAD_PAGE as usize;
            if let Some(last) = page.last() {
                after = Some(last.id.as_str().to_owned());
            }
            let mut registry = self.get();
            if page.iter().any(|c| !registry.slots.contains_key(&c.plan)) {
                let mut next = (*registry).clone();
                for client in &page {
                    next.slot(&client.plan);
                }
                self.swap(next);
                registry = self.get();
            }
            // The mark is read again: a sync between pages may not change it, but a second
            // reload may have begun.
            let current_mark = self.mark.load(Ordering::Relaxed);
            for client in page {
                self.put_client(&registry, client, current_mark);
            }
            if !full {
                break;
            }
        }
        let _one_at_a_time = self.syncing.lock().await;
        if self.mark.load(Ordering::Relaxed) == mark {
            let removed = self.clients.sweep(mark);
            if removed > 0 {
                tracing::warn!(
                    removed,
                    "the full reload removed clients no change had removed"
                );
            }
        }
        bump(&self.counters.reloads, 1);
        Ok(())
    }

    /// For a client id the registry does not know: a sync, so that a client created a
    /// moment ago (by the CLI, another instance) is known; says whether one succeeded since
    /// the call (look again) or not (refuse). `read` makes the sync's future.
    ///
    /// Shaped for requests anyone can send (client ids are not secret):
    /// - none while the store does not answer ([`Live::store_up`]): refused at once;
    /// - one at a time, on a task of its own, whose outcome every miss meanwhile shares;
    ///   a miss waits for it at most [`UNKNOWN_READ_WAIT`] after it began, and one that
    ///   comes later is refused at once;
    /// - at most one per `interval` on the clock: a miss after it is refused without a
    ///   read, so that a flood of unknown ids costs at most as many reads as the poll.
    pub async fn refresh_for_unknown<R>(&self, interval: Duration, read: impl FnOnce() -> R) -> bool
    where
        R: std::future::Future<Output = Result<Synced, LoadError>> + Send + 'static,
    {
        let skipped = || {
            bump(&self.counters.unknown_client_skipped, 1);
            false
        };
        if !self.store_up() {
            return skipped();
        }
        let asked = self.begun.load(Ordering::Relaxed);
        let (began, mut done) = {
            let mut reads = self.unknown_reads.lock().unwrap_or_else(|p| p.into_inner());
            if self.finished.load(Ordering::Relaxed) > asked {
                return true;
            }
            match &reads.current {
                Some((began, done)) if done.borrow().is_none() => {
                    if began.elapsed() >= UNKNOWN_READ_WAIT {
                        return skipped();
                    }
                    (*began, done.clone())
                }
                _ => {
                    let now = self.clock.elapsed();
                    if reads.last.is_some_and(|at| now < at + interval) {
                        return skipped();
                    }
                    reads.last = Some(now);
                    let (over, done) = watch::channel(None);
                    let began = tokio::time::Instant::now();
                    reads.current = Some((began, done.clone()));
                    // Apart from the requests: one that goes away cancels nothing.
                    let read = read();
                    tokio::spawn(async move {
                        let _ = over.send(Some(read.await.is_ok()));
                    });
                    (began, done)
                }
            }
        };
        let outcome = tokio::time::timeout_at(began + UNKNOWN_READ_WAIT, async {
            // An error: the task ended without saying so (it panicked); a failure.
            done.wait_for(Option::is_some)
                .await
                .is_ok_and(|over| *over == Some(true))
        });
        outcome.await.unwrap_or(false)
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

    /// Prunes the store's change log of changes older than [`CHANGE_RETENTION`], by this
    /// instance's clock: samples the latest change number at each call, and prunes through
    /// the newest sample that old.
    pub async fn prune_changes(&self, store: &dyn Store) -> Result<(), LoadError> {
        let now = self.clock.now();
        let latest = store.latest_change().await?;
        let retention = i64::try_from(CHANGE_RETENTION.as_secs()).unwrap_or(i64::MAX);
        let through = {
            let mut samples = self
                .change_samples
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            // One sample a second at most, so that the samples stay few however often
            // housekeeping runs.
            if samples.back().is_none_or(|(at, _)| *at < now) {
                samples.push_back((now, latest));
            }
            let mut through = None;
            while samples.front().is_some_and(|(at, _)| now - at >= retention) {
                through = samples.pop_front().map(|(_, seq)| seq);
            }
            through
        };
        if let Some(through) = through.filter(|seq| *seq > 0) {
            store.prune_changes(through).await?;
        }
        Ok(())
    }

    /// Polls every `interval`, and reads everything again every `reload_interval`, until
    /// the task is dropped. Failures are logged, and the last good registry stays in use.
    pub async fn sync_forever(
        &self,
        store: &dyn Store,
        secrets: &Secrets,
        interval: Duration,
        reload_interval: Duration,
    ) {
        // Each first one interval from now: the server was prepared from a fresh load.
        let ticks = |every: Duration| {
            let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick
        };
        let poll = async {
            let mut tick = ticks(interval);
            loop {
                tick.tick().await;
                // A failure is logged by `sync`, once per outage.
                if let Ok(synced) = self.sync(store, secrets, Trigger::Poll).await {
                    if synced.changes > 0 {
                        tracing::info!(changes = synced.changes, "registry changes applied");
                    }
                }
            }
        };
        // The safety net runs beside the poll, so that changes go on being applied during
        // a reload.
        let reload = async {
            let mut tick = ticks(reload_interval);
            loop {
                tick.tick().await;
                if let Err(error) = self.reload(store, secrets).await {
                    tracing::warn!(%error, "the periodic full reload of the registry failed");
                }
            }
        };
        tokio::join!(poll, reload);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Memory per client matters at a million clients: a generated id and a secret's hash
    /// are held inline, the reload mark rides in padding, and the plan is a slot, not a
    /// pointer: 80 bytes a map slot, nothing on the heap.
    #[test]
    fn a_client_costs_an_80_byte_map_slot() {
        assert_eq!(std::mem::size_of::<ClientEntry>(), 48);
        assert_eq!(std::mem::size_of::<ClientKey>(), 32);
        let generated = crate::secrets::new_client_id();
        assert!(matches!(
            ClientKey::new(generated.as_str()),
            ClientKey::Inline { .. }
        ));
        let long = "x".repeat(INLINE_ID + 1);
        assert_eq!(ClientKey::new(&long).as_bytes(), long.as_bytes());
        assert!(matches!(ClientKey::new(&long), ClientKey::Boxed(_)));
    }

    fn entry(mark: u8) -> ClientEntry {
        ClientEntry {
            hash: [0; 32],
            extra: None,
            plan: PlanSlot(0),
            auth_method: AuthMethod::ClientSecretBasic,
            enabled: true,
            mark,
        }
    }

    /// A shard gives memory back after deletes, removed one by one (the change log) or
    /// swept (a full reload), and only once under a quarter full: a shard near its size is
    /// not rebuilt at each change.
    #[test]
    fn shards_shrink_after_mass_deletes_but_not_at_each_removal() {
        let clients = Clients::default();
        let ids: Vec<String> = (0..10_000)
            .map(|_| crate::secrets::new_client_id().as_str().to_owned())
            .collect();
        for id in &ids {
            clients.put(ClientKey::new(id), entry(1));
        }
        let peak = clients.capacity();
        assert!(peak >= 10_000, "{peak}");
        // A quarter removed: no shard is under a quarter full, nothing is rebuilt.
        for id in &ids[..2_500] {
            clients.remove(id);
        }
        assert_eq!(clients.capacity(), peak);
        for id in &ids[2_500..9_000] {
            clients.remove(id);
        }
        let shrunk = clients.capacity();
        assert_eq!(clients.len(), 1_000);
        assert!(
            shrunk <= 4 * 1_000 + 4 * SHARDS,
            "{shrunk} slots for 1,000 of {peak}"
        );
        // The rest swept by a reload that marked none of them.
        assert_eq!(clients.sweep(2), 1_000);
        assert_eq!(clients.capacity(), 0);
    }
}
