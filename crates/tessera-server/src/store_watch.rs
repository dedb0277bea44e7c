//! The store as the server uses it: every call goes to the real store, and its outcome is
//! watched, so that a store that refuses writes (a full disk, a read-only file system, a
//! database that does not answer) is seen in `/readyz`, in `/metrics` and in the log, once
//! per episode rather than once per request. A failure is explained by the store first
//! ([`Store::explain`]), so that what is logged and returned names its cause (a refused
//! connection, a server that does not answer) rather than the pool's timeout.
//!
//! A write counts as failed when the store fails it (not when it refuses the caller's
//! input: a duplicate, an unknown plan), and as proof that writes work again only when it
//! surely wrote something: a prune with nothing to prune, or a revocation already made,
//! commits without writing a page, and would otherwise report a full disk as writable.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use tessera_proto::ClientId;
use tessera_store::{
    ApiUsage, AuditEvent, AuditQuery, Changes, Client, IdempotentAnswer, Plan, PlanRemoval, Result,
    Revoked, SigningKey, Store, StoreError, Timestamp, TrustPolicy, Usage,
};

use crate::clock::Clock;

/// A [`Store`] whose failures are counted and logged ([`StoreHealth`]).
#[derive(Debug)]
pub(crate) struct WatchedStore {
    inner: Arc<dyn Store>,
    /// The store's URL with its password hidden ([`crate::config::redact_url`]): named in
    /// each episode's log lines, so that an operator of several stores (and a test of several
    /// servers in one process) can tell whose disk filled.
    name: Arc<str>,
    /// Shared with the handles [`Store::audited`] makes.
    health: Arc<StoreHealth>,
    /// When an episode starts, for `/readyz`.
    clock: Clock,
}

/// What the watch saw: writes (for `/readyz` and the metrics) and reads (for the log).
#[derive(Debug, Default)]
pub(crate) struct StoreHealth {
    writes: Episodes,
    reads: Episodes,
}

/// Failures of one kind, grouped into episodes: from a first failure to the next success.
#[derive(Debug, Default)]
struct Episodes {
    /// Failures ever, for a counter.
    failures: AtomicU64,
    /// The episode going on, if any.
    current: Mutex<Option<Episode>>,
}

#[derive(Debug, Clone, Copy)]
struct Episode {
    since: Timestamp,
    failures: u64,
}

/// Store writes failing now: since when, and how many failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Failing {
    /// When the first of them failed.
    pub(crate) since: Timestamp,
    /// How many failed since.
    pub(crate) failures: u64,
}

impl StoreHealth {
    /// `Some` while writes fail: from a failed write until one succeeds.
    pub(crate) fn writes_failing(&self) -> Option<Failing> {
        self.writes.current().map(|e| Failing {
            since: e.since,
            failures: e.failures,
        })
    }

    /// Writes the store failed since the server started.
    pub(crate) fn write_errors(&self) -> u64 {
        self.writes.failures.load(Ordering::Relaxed)
    }
}

impl Episodes {
    fn current(&self) -> Option<Episode> {
        *self.current.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts a failure; `true` when it begins an episode.
    fn failed(&self, now: Timestamp) -> bool {
        self.failures.fetch_add(1, Ordering::Relaxed);
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        match current.as_mut() {
            Some(episode) => {
                episode.failures += 1;
                false
            }
            None => {
                *current = Some(Episode {
                    since: now,
                    failures: 1,
                });
                true
            }
        }
    }

    /// Ends the episode going on, if any, and returns it.
    fn succeeded(&self) -> Option<Episode> {
        // Most calls find none: a read of the lock, no write.
        self.current().as_ref()?;
        self.current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }
}

/// Whether the store failed (rather than refusing the caller's input). A write that gave
/// up waiting for a lock another session holds, or was cancelled, is not: the store works,
/// and writes that take no such lock (usage, a revocation) go on.
fn is_fault(error: &StoreError) -> bool {
    matches!(
        error,
        StoreError::Backend(_)
            | StoreError::Migrate(_)
            | StoreError::File { .. }
            | StoreError::Connection { .. }
            | StoreError::NoAnswer { .. }
            | StoreError::Unanswered { .. }
    )
}

impl WatchedStore {
    /// `url` is the store's URL as configured; only its redacted form is kept.
    pub(crate) fn new(inner: Arc<dyn Store>, url: &str, clock: Clock) -> Self {
        Self {
            inner,
            name: crate::config::redact_url(url).into(),
            health: Arc::default(),
            clock,
        }
    }

    pub(crate) fn health(&self) -> &StoreHealth {
        &self.health
    }

    /// A store error that is a fault, explained by the store ([`Store::explain`]): a pool
    /// that timed out becomes the cause it probed (refused, no answer...).
    async fn explained<T>(&self, outcome: Result<T>) -> Result<T> {
        match outcome {
            Err(error) if is_fault(&error) => Err(self.inner.explain(error).await),
            outcome => outcome,
        }
    }

    /// Makes a write named `what` and records its outcome; `wrote` says whether its success
    /// surely wrote. The request it serves, if any, is past its commit point from here on
    /// (`deadline.rs`).
    async fn write<T>(
        &self,
        what: &'static str,
        write: impl std::future::Future<Output = Result<T>>,
        wrote: fn(&T) -> bool,
    ) -> Result<T> {
        self.write_within(what, CALL_WITHIN, write, wrote).await
    }

    /// [`write`](Self::write), abandoned after `within` rather than [`CALL_WITHIN`].
    async fn write_within<T>(
        &self,
        what: &'static str,
        within: std::time::Duration,
        write: impl std::future::Future<Output = Result<T>>,
        wrote: fn(&T) -> bool,
    ) -> Result<T> {
        crate::deadline::writing();
        let outcome = self.explained(bounded(what, within, write).await).await;
        match &outcome {
            Ok(value) if wrote(value) => {
                if let Some(episode) = self.health.writes.succeeded() {
                    tracing::info!(
                        failures = episode.failures,
                        seconds = self.clock.now() - episode.since,
                        store = %self.name,
                        "the store takes writes again"
                    );
                }
            }
            Ok(_) => {}
            Err(error) if is_fault(error) => {
                if self.health.writes.failed(self.clock.now()) {
                    tracing::error!(
                        %error,
                        write = what,
                        store = %self.name,
                        "the store refuses writes: admin changes and revocations are answered \
                         with 503, usage counts are kept in memory, until a write succeeds"
                    );
                } else {
                    tracing::debug!(%error, write = what, "a store write failed");
                }
            }
            Err(_) => {}
        }
        outcome
    }

    /// Makes a read named `what` and records its outcome.
    async fn read<T>(
        &self,
        what: &'static str,
        read: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        self.read_within(what, CALL_WITHIN, read).await
    }

    /// [`read`](Self::read), abandoned after `within` rather than [`CALL_WITHIN`].
    async fn read_within<T>(
        &self,
        what: &'static str,
        within: std::time::Duration,
        read: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        let outcome = self.explained(bounded(what, within, read).await).await;
        match &outcome {
            Ok(_) => {
                if let Some(episode) = self.health.reads.succeeded() {
                    tracing::info!(
                        failures = episode.failures,
                        seconds = self.clock.now() - episode.since,
                        store = %self.name,
                        "the store answers reads again"
                    );
                }
            }
            Err(error) if is_fault(error) => {
                if self.health.reads.failed(self.clock.now()) {
                    tracing::warn!(%error, read = what, store = %self.name, "a store read failed");
                } else {
                    tracing::debug!(%error, read = what, "a store read failed");
                }
            }
            Err(_) => {}
        }
        outcome
    }
}

/// How long one call to the store may go unanswered before the caller stops waiting
/// ([`StoreError::Unanswered`]): the only bound on a query that a hung server or a partition
/// catches on an open connection, which neither the pool's timeout (5 s, for a connection)
/// nor PostgreSQL's own (3 s for a lock, 5 s for a statement of a write) can end, since the
/// server never hears of it. Longer than those, so that they speak first when they can.
const CALL_WITHIN: std::time::Duration = std::time::Duration::from_secs(10);

/// The same for the calls that read or write many rows at once (every client, a batch of
/// thousands of new clients, a checkpoint of SQLite's log): they take longer when healthy.
const BULK_WITHIN: std::time::Duration = std::time::Duration::from_secs(60);

/// `call`, named `what`, abandoned once it has gone unanswered for `within`; a span of the
/// request it serves, if traced (`telemetry.rs`).
async fn bounded<T>(
    what: &'static str,
    within: std::time::Duration,
    call: impl std::future::Future<Output = Result<T>>,
) -> Result<T> {
    use tracing::Instrument as _;
    let span = crate::telemetry::child_span!(
        "store",
        otel.name = format!("store {what}"),
        otel.kind = "client",
        db.operation.name = what,
        otel.status_code = tracing::field::Empty,
    );
    let outcome = tokio::time::timeout(within, call)
        .instrument(span.clone())
        .await
        .unwrap_or(Err(StoreError::Unanswered { within }));
    if outcome.is_err() {
        span.record("otel.status_code", "error");
    }
    outcome
}

fn always<T>(_: &T) -> bool {
    true
}

fn never<T>(_: &T) -> bool {
    false
}

fn if_true(changed: &bool) -> bool {
    *changed
}

#[async_trait]
impl Store for WatchedStore {
    async fn revision(&self) -> Result<i64> {
        self.read("revision", self.inner.revision()).await
    }

    async fn put_plan(&self, plan: &Plan) -> Result<()> {
        self.write("plan", self.inner.put_plan(plan), always).await
    }

    async fn plans(&self) -> Result<Vec<Plan>> {
        self.read("plans", self.inner.plans()).await
    }

    async fn delete_plan(&self, name: &str) -> Result<PlanRemoval> {
        let write = self.inner.delete_plan(name);
        self.write("plan removal", write, |r| *r == PlanRemoval::Removed)
            .await
    }

    async fn clients_per_plan(&self) -> Result<Vec<(String, u64)>> {
        self.read("clients per plan", self.inner.clients_per_plan())
            .await
    }

    async fn clients(&self) -> Result<Vec<Client>> {
        self.read_within("every client", BULK_WITHIN, self.inner.clients())
            .await
    }

    async fn client(&self, id: &ClientId) -> Result<Option<Client>> {
        self.read("client", self.inner.client(id)).await
    }

    async fn clients_page(
        &self,
        plan: Option<&str>,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Client>> {
        let outcome = self.inner.clients_page(plan, after, limit);
        self.read("a page of clients", outcome).await
    }

    async fn insert_clients_once(
        &self,
        clients: &[Client],
        answer: Option<&IdempotentAnswer>,
    ) -> Result<Option<IdempotentAnswer>> {
        let write = self.inner.insert_clients_once(clients, answer);
        // An earlier answer returned: nothing was written.
        self.write_within("clients", BULK_WITHIN, write, Option::is_none)
            .await
    }

    async fn idempotent_answer(&self, owner: &str, key: &str) -> Result<Option<IdempotentAnswer>> {
        let outcome = self.inner.idempotent_answer(owner, key);
        self.read("idempotent answer", outcome).await
    }

    async fn prune_idempotent_answers(&self, before: Timestamp) -> Result<()> {
        let write = self.inner.prune_idempotent_answers(before);
        self.write("idempotent answers pruned", write, never).await
    }

    async fn update_client(&self, client: &Client) -> Result<bool> {
        self.write("client", self.inner.update_client(client), if_true)
            .await
    }

    async fn delete_client(&self, id: &ClientId) -> Result<bool> {
        self.write("client removal", self.inner.delete_client(id), if_true)
            .await
    }

    async fn insert_org(&self, org: &tessera_store::Org) -> Result<()> {
        self.write("organization", self.inner.insert_org(org), always)
            .await
    }

    async fn orgs(&self) -> Result<Vec<tessera_store::Org>> {
        self.read("organizations", self.inner.orgs()).await
    }

    async fn org(&self, id: &str) -> Result<Option<tessera_store::Org>> {
        self.read("organization", self.inner.org(id)).await
    }

    async fn update_org(&self, org: &tessera_store::Org) -> Result<bool> {
        let write = self.inner.update_org(org);
        self.write_within("organization", BULK_WITHIN, write, if_true)
            .await
    }

    async fn delete_org(&self, id: &str, with_clients: bool) -> Result<tessera_store::OrgRemoval> {
        let write = self.inner.delete_org(id, with_clients);
        self.write_within("organization removal", BULK_WITHIN, write, |r| {
            *r == tessera_store::OrgRemoval::Removed
        })
        .await
    }

    async fn clients_per_org(&self) -> Result<Vec<(String, u64)>> {
        self.read("clients per organization", self.inner.clients_per_org())
            .await
    }

    async fn org_clients(&self, id: &str) -> Result<Vec<Client>> {
        self.read_within(
            "an organization's clients",
            BULK_WITHIN,
            self.inner.org_clients(id),
        )
        .await
    }

    async fn org_usage(&self, org: &str) -> Result<Vec<Usage>> {
        self.read("organization usage", self.inner.org_usage(org))
            .await
    }

    async fn org_api_usage(&self, org: &str) -> Result<Vec<ApiUsage>> {
        self.read("organization API usage", self.inner.org_api_usage(org))
            .await
    }

    async fn put_trust_policy(&self, policy: &TrustPolicy) -> Result<()> {
        let write = self.inner.put_trust_policy(policy);
        self.write("trust policy", write, always).await
    }

    async fn trust_policies(&self) -> Result<Vec<TrustPolicy>> {
        self.read("trust policies", self.inner.trust_policies())
            .await
    }

    async fn trust_policies_of(&self, client: &ClientId) -> Result<Vec<TrustPolicy>> {
        self.read("trust policies", self.inner.trust_policies_of(client))
            .await
    }

    async fn delete_trust_policy(&self, name: &str) -> Result<bool> {
        let write = self.inner.delete_trust_policy(name);
        self.write("trust policy removal", write, if_true).await
    }

    async fn insert_key(&self, key: &SigningKey) -> Result<()> {
        self.write("signing key", self.inner.insert_key(key), always)
            .await
    }

    async fn keys(&self) -> Result<Vec<SigningKey>> {
        self.read("signing keys", self.inner.keys()).await
    }

    async fn delete_key(&self, kid: &str) -> Result<bool> {
        self.write("signing key removal", self.inner.delete_key(kid), if_true)
            .await
    }

    async fn latest_change(&self) -> Result<i64> {
        self.read("latest change", self.inner.latest_change()).await
    }

    async fn changes_since(&self, after: i64, limit: u32) -> Result<Option<Changes>> {
        self.read("changes", self.inner.changes_since(after, limit))
            .await
    }

    async fn prune_changes(&self, through: i64) -> Result<()> {
        let write = self.inner.prune_changes(through);
        self.write("changes pruned", write, never).await
    }

    async fn revoke(&self, revoked: &Revoked) -> Result<()> {
        // A token revoked before is not written again.
        self.write("revocation", self.inner.revoke(revoked), never)
            .await
    }

    async fn revoked_since(&self, after: i64, now: Timestamp) -> Result<Vec<(i64, Revoked)>> {
        self.read("revocations", self.inner.revoked_since(after, now))
            .await
    }

    async fn prune_revoked(&self, now: Timestamp) -> Result<()> {
        let write = self.inner.prune_revoked(now);
        self.write("revocations pruned", write, never).await
    }

    async fn is_empty(&self) -> Result<bool> {
        self.read("emptiness", self.inner.is_empty()).await
    }

    async fn check_value(&self, name: &str, proposed: &[u8]) -> Result<Vec<u8>> {
        let write = self.inner.check_value(name, proposed);
        self.write("check value", write, never).await
    }

    async fn replace_value(&self, name: &str, value: &[u8]) -> Result<Option<Vec<u8>>> {
        let write = self.inner.replace_value(name, value);
        self.write("note", write, always).await
    }

    async fn checkpoint(&self) -> Result<bool> {
        self.write_within("checkpoint", BULK_WITHIN, self.inner.checkpoint(), never)
            .await
    }

    async fn add_usage(&self, usage: &[Usage]) -> Result<()> {
        let wrote = if usage.is_empty() { never } else { always };
        self.write("usage", self.inner.add_usage(usage), wrote)
            .await
    }

    async fn add_hourly_usage(&self, hour: &str, issued: u64, refused: u64) -> Result<()> {
        let write = self.inner.add_hourly_usage(hour, issued, refused);
        self.write("hourly usage", write, always).await
    }

    async fn hourly_usage(&self, from: &str) -> Result<Vec<(String, u64, u64)>> {
        self.read("hourly usage", self.inner.hourly_usage(from))
            .await
    }

    async fn prune_hourly_usage(&self, before: &str) -> Result<()> {
        let write = self.inner.prune_hourly_usage(before);
        self.write("hourly usage pruned", write, never).await
    }

    async fn usage(&self, client_id: &ClientId) -> Result<Vec<Usage>> {
        self.read("usage", self.inner.usage(client_id)).await
    }

    async fn plan_usage(&self, plan: &str) -> Result<Vec<Usage>> {
        self.read("plan usage", self.inner.plan_usage(plan)).await
    }

    async fn add_api_usage(
        &self,
        batch: &str,
        received_at: Timestamp,
        usage: &[ApiUsage],
    ) -> Result<bool> {
        let write = self.inner.add_api_usage(batch, received_at, usage);
        self.write("API usage", write, if_true).await
    }

    async fn prune_api_usage_batches(&self, before: Timestamp) -> Result<()> {
        let write = self.inner.prune_api_usage_batches(before);
        self.write("API usage batches pruned", write, never).await
    }

    async fn api_usage(&self, client_id: &ClientId) -> Result<Vec<ApiUsage>> {
        self.read("API usage", self.inner.api_usage(client_id))
            .await
    }

    async fn plan_api_usage(&self, plan: &str) -> Result<Vec<ApiUsage>> {
        self.read("plan API usage", self.inner.plan_api_usage(plan))
            .await
    }

    fn audited(&self, event: AuditEvent) -> Arc<dyn Store> {
        Arc::new(Self {
            inner: self.inner.audited(event),
            name: self.name.clone(),
            health: self.health.clone(),
            clock: self.clock.clone(),
        })
    }

    fn unkept_audit(&self) -> Option<AuditEvent> {
        self.inner.unkept_audit()
    }

    async fn add_audit_event(&self, event: &AuditEvent) -> Result<()> {
        let write = self.inner.add_audit_event(event);
        self.write("audit event", write, never).await
    }

    async fn audit_events(&self, query: &AuditQuery) -> Result<Vec<AuditEvent>> {
        self.read("audit events", self.inner.audit_events(query))
            .await
    }

    async fn prune_audit_events(&self, before: Timestamp, keep: u64) -> Result<()> {
        let write = self.inner.prune_audit_events(before, keep);
        self.write("audit events pruned", write, never).await
    }
}
