//! The admin API under `/admin/v1` (docs/admin-api.md): plans, clients, usage and signing
//! keys as JSON resources, for a platform team's own tooling. It is one more client of the
//! same operations as the CLI ([`crate::registrar::Registrar`]), guarded by Tessera's own tokens
//! (`auth.rs`), with RFC 9457 problem documents for every refusal.
//!
//! - `auth.rs`: who calls, [`auth::Caller`]: the bearer token (RFC 6750), verified with
//!   `tessera-verify`, who it is ([`auth::Principal`]: the provider's admin or an
//!   organization's) and what it may reach ([`auth::admit`], the one rule).
//! - `extract.rs`: what else a handler takes, as extractors that answer a problem: JSON
//!   bodies, path and query parameters, `If-Match` (RFC 9110 section 13.1.1).
//! - `plans.rs`, `clients.rs`, `orgs.rs`, `org_clients.rs` (an organization's clients, for
//!   its own admin too), `keys.rs`, `trust.rs`: the resources; `audit.rs`:
//!   the changes made to them; `idempotency.rs`: a
//!   client creation retried with its `Idempotency-Key`.
//! - here: what they share: `ETag`s (RFC 9110 section 8.8.3), JSON answers, and the step
//!   every change ends with.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde::Serialize;

use tessera_proto::admin as api;

use crate::control::problem::Problem;
use crate::registrar::views;
use crate::AppState;

pub(crate) mod audit;
pub(crate) mod auth;
pub(crate) mod clients;
mod extract;
mod idempotency;
pub(crate) mod keys;
pub(crate) mod org_clients;
pub(crate) mod orgs;
pub(crate) mod plans;
mod responses;
pub(crate) mod trust;

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .merge(plans::router())
        .merge(clients::router())
        .merge(keys::router())
        .merge(orgs::router())
        .merge(org_clients::router())
        .merge(trust::router())
        .merge(audit::router())
        .fallback(|| async { Problem::not_found("no such admin resource") })
        .method_not_allowed_fallback(|| async { Problem::method_not_allowed() })
}

pub(crate) use crate::registrar::patch_changes;

/// A strong entity tag of an object's stored state (RFC 9110 section 8.8.3): 128 bits of
/// SHA-256 over what `state` prints, so any change to the object changes it.
pub(crate) fn etag(state: &impl std::fmt::Debug) -> String {
    let digest =
        aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, format!("{state:?}").as_bytes());
    format!("\"{}\"", URL_SAFE_NO_PAD.encode(&digest.as_ref()[..16]))
}

/// A JSON answer with its `ETag`.
pub(crate) fn json(status: StatusCode, body: &impl Serialize, etag: Option<&str>) -> Response {
    let mut response = (
        status,
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            ),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
        ],
        serde_json::to_vec(body).unwrap_or_default(),
    )
        .into_response();
    if let Some(tag) = etag.and_then(|t| HeaderValue::from_str(t).ok()) {
        response.headers_mut().insert(header::ETAG, tag);
    }
    response
}

/// Ends every change: brings this instance's registry up to date before the answer is
/// sent, so the change is in force here at once (others see it at their next poll).
pub(crate) async fn in_force(state: &AppState) {
    if let Err(error) = state.sync().await {
        tracing::warn!(%error, "the change is stored; reading it back failed, the next poll will");
    }
}

/// Usage over days, as the usage endpoints answer: the days within `from` and `to`.
pub(crate) fn usage_within(
    (from, to): (Option<String>, Option<String>),
    usage: Vec<tessera_store::Usage>,
    api_usage: Vec<tessera_store::ApiUsage>,
) -> api::Usage {
    let within = |day: &String| {
        from.as_ref().is_none_or(|f| day >= f) && to.as_ref().is_none_or(|t| day <= t)
    };
    let days = usage.into_iter().filter(|u| within(&u.day)).collect();
    let api_days = api_usage.into_iter().filter(|u| within(&u.day)).collect();
    api::Usage {
        days: views::usage_days(days, api_days),
        from,
        to,
    }
}
