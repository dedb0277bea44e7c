//! The sync engine: [`Live`] keeps the snapshot and the clients fresh from the store's
//! change logs (polled every sync interval, and at once for an unknown client id of the
//! generated shape), reloads everything as a safety net, holds the revoked tokens, and runs
//! the loop that does it all.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tessera_store::{Changes, Client, Store, Timestamp};
use tokio::sync::watch;

use super::clients::{ClientEntry, ClientKey, Clients};
use super::snapshot::Registry;
use super::LoadError;
use crate::clock::Clock;
use crate::keys::{self, KeyRing};
use crate::secrets::Secrets;

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
    /// Unknown client ids that waited for a read another one had begun.
    pub unknown_client_waits: u64,
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
    unknown_client_waits: AtomicU64,
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
    /// This process's id in the fleet ([`Live::instance`]), a field of every line it logs.
    instance: String,
}

impl Live {
    /// Reads everything from the store, reading the time from `clock`. `instance` names
    /// this process in every line the registry logs.
    pub async fn load(
        store: &dyn Store,
        secrets: &Secrets,
        clock: Clock,
        instance: String,
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
            instance,
        };
        live.read_everything(store, secrets, true).await?;
        // Revoked tokens are refused from the first request on, not from the first poll.
        live.reload_revocations(store).await?;
        Ok(live)
    }

    /// The id of this process among the instances sharing the store: random, new on each
    /// start. Every line the registry logs carries it as `instance`, so that the logs of a
    /// fleet, gathered in one place, say which instance lost the store or reloaded.
    pub fn instance(&self) -> &str {
        &self.instance
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
            unknown_client_waits: read(&c.unknown_client_waits),
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
                instance = self.instance,
                %error,
                "the store does not answer; serving the last good registry until it is \
                 older than the staleness bound"
            ),
            Ok(_) if !was_up => tracing::info!(
                instance = self.instance,
                "the store answers again; the registry is fresh"
            ),
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
                instance = self.instance,
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
            tracing::error!(
                instance = self.instance,
                client = %client.id,
                plan = %client.plan,
                "client of a plan without a slot"
            );
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
                    instance = self.instance,
                    removed,
                    "the full reload removed clients no change had removed"
                );
            }
        }
        bump(&self.counters.reloads, 1);
        Ok(())
    }

    /// How many syncs have begun: read it before a lookup, and hand it to
    /// [`Live::refresh_for_unknown`] if the lookup misses.
    pub fn syncs_begun(&self) -> u64 {
        self.begun.load(Ordering::Relaxed)
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
    ///
    /// `asked` is [`Live::syncs_begun`] read before the lookup that missed: a sync begun
    /// after it and finished since has read every change committed before the request, so
    /// the caller looks again without a read of its own.
    pub async fn refresh_for_unknown<R>(
        &self,
        asked: u64,
        interval: Duration,
        read: impl FnOnce() -> R,
    ) -> bool
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
                    bump(&self.counters.unknown_client_waits, 1);
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
                        tracing::info!(
                            instance = self.instance,
                            changes = synced.changes,
                            "registry changes applied"
                        );
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
                    tracing::warn!(
                        instance = self.instance,
                        %error,
                        "the periodic full reload of the registry failed"
                    );
                }
            }
        };
        tokio::join!(poll, reload);
    }
}
