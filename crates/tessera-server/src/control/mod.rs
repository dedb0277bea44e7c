//! The control plane: the management surface, apart from the data plane of `routes/` (the
//! token endpoint, introspection, revocation, the keys and metadata, health and metrics).
//! It changes the registry through the domain (the registrar, the store) and reads the
//! caller through the same pieces as the data plane; nothing below it or in the data plane
//! imports it.
//!
//! - `admin/`: the admin API under `/admin/v1`, guarded by this server's own tokens, with
//!   RFC 9457 problems (`problem.rs`) for every refusal;
//! - `console/`: the operator console at `/console/`, a client of the admin API in-process;
//! - `openapi.rs`: `GET /openapi.json`, the whole HTTP surface, data plane included.
//!
//! Served beside the data plane on one listener, or alone on its own
//! ([`crate::Config::admin_listen`], `serve --admin-listen`), as Ory Hydra separates its
//! public and admin ports.

use axum::http::{header, StatusCode};
use axum::Router;
use tower_http::sensitive_headers::SetSensitiveRequestHeadersLayer;
use tower_http::timeout::TimeoutLayer;

use crate::AppState;

pub(crate) mod admin;
pub(crate) mod console;
pub(crate) mod openapi;
pub(crate) mod problem;

/// The management surface, with its layers: `/admin/v1`, `/console/` unless the console
/// is off, and `/openapi.json`.
pub(crate) fn router(state: AppState) -> Router {
    let config = state.config();
    let timeout = config.request_timeout;
    let document = openapi::router().layer(TimeoutLayer::with_status_code(
        StatusCode::REQUEST_TIMEOUT,
        timeout,
    ));
    // The routes that change the registry: cut off as the OAuth endpoints are, but never
    // once they have sent a write to the store (`deadline.rs`), which is answered with its
    // outcome.
    let writes = Router::new()
        .nest("/admin/v1", admin::router())
        .merge(if config.console() {
            console::router(&state)
        } else {
            Router::new()
        })
        .layer(axum::middleware::from_fn(move |request, next| {
            crate::deadline::bounded(timeout, request, next)
        }));
    document
        .merge(writes)
        .with_state(state)
        .layer(SetSensitiveRequestHeadersLayer::new([
            header::AUTHORIZATION,
        ]))
}
