//! Liveness and readiness for orchestrators.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;

use crate::AppState;

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready))
}

/// Ready when this instance can issue tokens: a signing key is active and the registry is
/// within the staleness bound. A store that does not answer for a while does not make the
/// instance unready (it issues from its last good registry); see `/metrics` for the store's
/// health and the registry's age. Nor does a store that refuses writes (a full disk): tokens
/// are still issued, so the answer stays 200, and its body says since when writes fail.
async fn ready(State(state): State<AppState>) -> (StatusCode, String) {
    let now = state.clock().now();
    let registry = state.registry();
    let (status, verdict) = match (registry.keys.signing_key(now), state.too_stale()) {
        (Some(_), false) => (StatusCode::OK, "ready"),
        (None, _) => (StatusCode::SERVICE_UNAVAILABLE, "no active signing key"),
        (_, true) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "registry older than the staleness bound: the store does not answer",
        ),
    };
    let mut body = format!("{verdict}\n");
    if let Some(failing) = state.store_health().writes_failing() {
        body.push_str(&format!(
            "store writes failing for {} s ({} failed): admin changes and revocations are \
             refused, usage counts are kept in memory\n",
            now - failing.since,
            failing.failures
        ));
    }
    (status, body)
}
