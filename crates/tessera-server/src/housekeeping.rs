//! Periodic housekeeping: usage counts written to the store, limiter and reuse state pruned,
//! expired revocations and old rows forgotten, revocations read again. A round runs every
//! [`Config::housekeeping_interval`](crate::Config::housekeeping_interval) while the server
//! runs, and once more when it stops.

use tokio::sync::oneshot;

use crate::state::AppState;

impl AppState {
    /// One round: writes usage counts, prunes limiter and reuse state, forgets expired
    /// revocations and old rows, and reads the live revocations again.
    pub async fn housekeeping(&self) {
        let now = self.clock().now();
        if let Err(error) = self.usage().flush(self.store(), now).await {
            tracing::warn!(%error, "writing usage counts failed; kept for the next try");
        }
        self.limiter().prune();
        self.reuse().prune(now);
        if let Err(error) = self.store().prune_revoked(now).await {
            tracing::warn!(%error, "forgetting expired revocations failed");
        }
        let two_days_ago = tessera_proto::clock::utc_hour(now - 2 * 86_400);
        if let Err(error) = self.store().prune_hourly_usage(&two_days_ago).await {
            tracing::warn!(%error, "forgetting old hourly usage failed");
        }
        let remembered_since = now - crate::routes::admin::clients::IDEMPOTENCY_WINDOW;
        if let Err(error) = self
            .store()
            .prune_idempotent_answers(remembered_since)
            .await
        {
            tracing::warn!(%error, "forgetting old idempotent answers failed");
        }
        if let Err(error) = self.live().reload_revocations(self.store()).await {
            tracing::warn!(%error, "reading revocations failed");
        }
        if let Err(error) = self.live().prune_changes(self.store()).await {
            tracing::warn!(%error, "pruning the registry's change log failed");
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
