//! Periodic housekeeping: usage counts written to the store, limiter and reuse state pruned,
//! expired revocations, old rows and audit events past their retention forgotten, revocations read again. A round runs every
//! [`Config::housekeeping_interval`](crate::Config::housekeeping_interval) while the server
//! runs, and once more when it stops.

use tokio::sync::oneshot;

use crate::state::AppState;

/// The note [`AppState::housekeeping`] writes while store writes fail, to see when they work
/// again: the time of the last try.
const WRITE_PROBE: &str = "write_probe";

impl AppState {
    /// One round: writes usage counts, prunes limiter and reuse state, forgets expired
    /// revocations and old rows, and reads the live revocations again. While store writes
    /// fail, it also tries one, so that their recovery is seen without waiting for an
    /// admin change. Store failures are logged by the store's watch (`store_watch.rs`),
    /// once per episode; here only at debug level.
    pub async fn housekeeping(&self) {
        let now = self.clock().now();
        if let Err(error) = self.usage().flush(self.store(), now).await {
            tracing::debug!(%error, "writing usage counts failed; kept for the next try");
        }
        self.limiter().prune();
        self.reuse().prune(now);
        if let Err(error) = self.store().prune_revoked(now).await {
            tracing::debug!(%error, "forgetting expired revocations failed");
        }
        let two_days_ago = tessera_proto::clock::utc_hour(now - 2 * 86_400);
        if let Err(error) = self.store().prune_hourly_usage(&two_days_ago).await {
            tracing::debug!(%error, "forgetting old hourly usage failed");
        }
        let batches_since = now - crate::routes::api_limits::BATCH_MEMORY;
        if let Err(error) = self.store().prune_api_usage_batches(batches_since).await {
            tracing::debug!(%error, "forgetting old API usage batches failed");
        }
        let remembered_since = now - crate::registrar::IDEMPOTENCY_WINDOW;
        if let Err(error) = self
            .store()
            .prune_idempotent_answers(remembered_since)
            .await
        {
            tracing::debug!(%error, "forgetting old idempotent answers failed");
        }
        let audit_since = now - self.config().audit_retention.as_secs() as i64;
        if let Err(error) = self
            .store()
            .prune_audit_events(audit_since, crate::config::MAX_AUDIT_EVENTS)
            .await
        {
            tracing::debug!(%error, "forgetting old audit events failed");
        }
        if let Err(error) = self.live().reload_revocations(self.store()).await {
            tracing::debug!(%error, "reading revocations failed");
        }
        if let Err(error) = self.live().prune_changes(self.store()).await {
            tracing::debug!(%error, "pruning the registry's change log failed");
        }
        if self.store_health().writes_failing().is_some() {
            // A row the store rewrites each time: a write that surely writes.
            let probe = self
                .store()
                .replace_value(WRITE_PROBE, now.to_string().as_bytes())
                .await;
            if let Err(error) = probe {
                tracing::debug!(%error, "the store still refuses writes");
            }
        }
    }
}

/// Runs a round every housekeeping interval until `stop` says so. It is stopped between
/// rounds, never inside one: a usage flush cancelled after it took the counts and before the
/// store had them would lose them.
pub(crate) async fn every_interval(state: AppState, mut stop: oneshot::Receiver<()>) {
    let mut tick = tokio::time::interval(state.config().housekeeping_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => state.housekeeping().await,
            _ = &mut stop => break,
        }
    }
}
