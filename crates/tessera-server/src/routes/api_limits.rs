//! What the APIs learn from Tessera and tell it back (issue 27), in the contract of
//! [`tessera_proto::api_limits`]:
//!
//! - `GET /api-limits/{api}`: the request limits of every plan that grants the API, public
//!   and cacheable as the JWK Set is, so that the resource-server kit fetches and refreshes
//!   them as it does the keys. It is built from the registry in memory at each request, so a
//!   plan change shows in it as soon as the instance has synced (within a second).
//! - `POST /api-usage`: an API's batch of request counts per client and UTC day, sent with a
//!   token of this issuer carrying [`USAGE_SCOPE`] (RFC 6750 section 2.1, refused as its
//!   section 3 says), added to the store once per batch id.

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::{Path, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use tessera_proto::api_limits::{LimitsDocument, PlanLimits, Rate, UsageReport, USAGE_SCOPE};
use tessera_proto::scope::{names_issuer, Scope};
use tessera_proto::ClientId;
use tessera_store::{ApiLimit, ApiUsage};

use crate::control::admin::auth::own_token;
use crate::control::problem::Problem;
use crate::error::OAuthError;
use crate::routes::split;
use crate::AppState;

/// The `realm` of `POST /api-usage`'s challenges.
const REALM: &str = "tessera-usage";

/// The largest report taken: the verify kit sends up to 1,000 rows (about 100 bytes each) in
/// a batch, far over the OAuth endpoints' form limit.
pub(crate) const REPORT_BODY_LIMIT: usize = 1 << 20;

/// How long a batch id is remembered: a report sent again within it counts once.
pub(crate) const BATCH_MEMORY: tessera_proto::clock::Timestamp = 7 * 86_400;

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/api-limits/{api}", get(limits))
        .route("/api-usage", post(report))
}

/// `GET /api-limits/{api}`: the limits of each plan granting `api` (`{}` for none); 404 when
/// no plan grants it. With an `ETag`, so that a refresh of an unchanged document is a 304
/// (RFC 9110 section 13.1.2).
async fn limits(
    State(state): State<AppState>,
    Path(api): Path<String>,
    headers: HeaderMap,
) -> Response {
    let registry = state.registry();
    let plans: BTreeMap<String, PlanLimits> = registry
        .plans()
        .filter(|plan| plan.scopes.iter().any(|s| s.as_str() == api))
        .map(|plan| {
            (
                plan.name.clone(),
                limits_of(
                    plan.api_limits.get(&api),
                    plan.limit_per == tessera_store::LimitPer::Org,
                ),
            )
        })
        .collect();
    if plans.is_empty() || names_issuer(&api) {
        return Problem::not_found("no plan grants this API").into_response();
    }
    let body = serde_json::to_vec(&LimitsDocument { api, plans }).unwrap_or_default();
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, &body);
    let tag = format!("\"{}\"", base64_url(&digest.as_ref()[..16]));
    let cache = [
        (
            header::CACHE_CONTROL,
            HeaderValue::from_static("public, max-age=30"),
        ),
        (
            header::ETAG,
            HeaderValue::from_str(&tag).expect("base64url is a header value"),
        ),
    ];
    let unchanged = headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| {
            let t = t.trim();
            t == "*" || t.trim_start_matches("W/") == tag
        });
    if unchanged {
        return (StatusCode::NOT_MODIFIED, cache).into_response();
    }
    let json = [(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    )];
    (cache, json, body).into_response()
}

fn base64_url(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// One plan's limits on one API as the document writes them.
fn limits_of(limit: Option<&ApiLimit>, per_org: bool) -> PlanLimits {
    let Some(limit) = limit else {
        return PlanLimits::default();
    };
    PlanLimits {
        per_org,
        rate: limit.rate.map(|r| Rate {
            limit: r.count,
            window_seconds: r.period_secs,
        }),
        burst: limit.rate.map(|r| r.burst),
        quota: limit.quota,
    }
}

/// `POST /api-usage`: 204 once the batch is stored (or was before).
async fn report(State(state): State<AppState>, request: Request) -> Response {
    let (parts, body) = split(request, REPORT_BODY_LIMIT).await;
    let outcome = async {
        let token = own_token(&state, &parts, REALM).await?;
        if !token.holds(USAGE_SCOPE) {
            return Err(Problem::insufficient_scope(REALM, USAGE_SCOPE));
        }
        let usage = read_report(&parts.headers, body)?;
        let (batch, counts) = usage;
        let now = state.clock().now();
        let new = state.store().add_api_usage(&batch, now, &counts).await?;
        if !new {
            tracing::debug!(batch, "an API usage batch came again; counted once");
        }
        Ok(())
    };
    match outcome.await {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(problem) => problem.into_response(),
    }
}

/// The report's batch id and its counts, each field checked; a fault is a 400 problem
/// naming the field.
fn read_report(
    headers: &HeaderMap,
    body: Result<Bytes, OAuthError>,
) -> Result<(String, Vec<ApiUsage>), Problem> {
    let is_json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"));
    if !is_json {
        return Err(Problem::invalid_body(
            "Content-Type must be application/json",
        ));
    }
    let body = body.map_err(|e| match e.status() {
        StatusCode::PAYLOAD_TOO_LARGE => Problem::too_large(REPORT_BODY_LIMIT),
        _ => Problem::invalid_body("the body could not be read in full"),
    })?;
    let report: UsageReport =
        serde_json::from_slice(&body).map_err(|e| Problem::invalid_body(e.to_string()))?;
    let batch_ok = (1..=128).contains(&report.batch.len())
        && report
            .batch
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b));
    if !batch_ok {
        return Err(Problem::invalid_field(
            "batch",
            "batch must be 1 to 128 characters of a-z, A-Z, 0-9, '-', '_', '.' or ':'",
        ));
    }
    if Scope::parse_name(&report.api).is_err() || names_issuer(&report.api) {
        return Err(Problem::invalid_field(
            "api",
            "api must name an API, as a plan's scope does",
        ));
    }
    let mut counts = Vec::with_capacity(report.counts.len());
    for (i, count) in report.counts.into_iter().enumerate() {
        if !tessera_proto::clock::is_day(&count.day) {
            return Err(Problem::invalid_field(
                &format!("counts[{i}].day"),
                "day must be a UTC day, YYYY-MM-DD",
            ));
        }
        if ClientId::parse(&count.client_id).is_none() {
            return Err(Problem::invalid_field(
                &format!("counts[{i}].client_id"),
                "client_id is not a client identifier",
            ));
        }
        if i64::try_from(count.requests.max(count.refused)).is_err() {
            return Err(Problem::invalid_field(
                &format!("counts[{i}]"),
                "requests and refused must fit in 63 bits",
            ));
        }
        counts.push(ApiUsage {
            day: count.day,
            client_id: count.client_id,
            api: report.api.clone(),
            requests: count.requests,
            refused: count.refused,
        });
    }
    Ok((report.batch, counts))
}
