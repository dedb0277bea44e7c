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

/// Ready when a signing key is active and the store answered recently.
async fn ready(State(state): State<AppState>) -> (StatusCode, &'static str) {
    let now = state.clock().now();
    let registry = state.registry();
    let stale = now - state.live().last_sync() > 10;
    match (registry.keys.signing_key(now), stale) {
        (Some(_), false) => (StatusCode::OK, "ready\n"),
        (None, _) => (StatusCode::SERVICE_UNAVAILABLE, "no active signing key\n"),
        (_, true) => (StatusCode::SERVICE_UNAVAILABLE, "store unreachable\n"),
    }
}
