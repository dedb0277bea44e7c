//! The HTTP routes, one module per endpoint family, merged under one layer stack.

use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::http::{header, StatusCode};
use axum::Router;
use tower_http::sensitive_headers::SetSensitiveRequestHeadersLayer;
use tower_http::timeout::TimeoutLayer;

use crate::AppState;

pub mod discovery;
pub mod health;
pub mod token;

/// The whole application.
pub fn router(state: AppState) -> Router {
    let config = state.config();
    let timeout = config.request_timeout;
    let body_limit = config.body_limit;
    Router::new()
        .merge(token::router())
        .merge(discovery::router())
        .merge(health::router())
        .with_state(state)
        .layer(DefaultBodyLimit::max(body_limit))
        // A client that sends its request too slowly is cut off (408).
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            timeout,
        ))
        .layer(SetSensitiveRequestHeadersLayer::new([
            header::AUTHORIZATION,
        ]))
}

/// The default time a request may take, body upload included.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
