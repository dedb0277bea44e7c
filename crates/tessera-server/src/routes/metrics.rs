//! `GET /metrics` in the Prometheus text format.

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

use crate::metrics::Gauges;
use crate::AppState;

pub(crate) fn router() -> Router<AppState> {
    Router::new().route("/metrics", get(metrics))
}

async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    let now = state.clock().now();
    let age = state
        .registry()
        .keys
        .signing_key(now)
        .map(|k| now - k.activates_at.max(k.created_at));
    (
        [(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)],
        state.metrics().render(&Gauges {
            key_age_secs: age,
            tls_not_after: state.tls().map(|tls| tls.not_after()),
            in_flight: state.in_flight().in_use(),
            registry_age_secs: state.live().age(),
            store_up: state.live().store_up(),
            store_writable: state.store_health().writes_failing().is_none(),
            store_write_errors: state.store_health().write_errors(),
            redis: state.redis().map(|redis| redis.health()),
            registry: state.live().counts(),
        }),
    )
}
