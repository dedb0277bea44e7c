//! `GET /openapi.json`: the whole HTTP surface as an OpenAPI 3.1 document, generated with
//! `utoipa` from the admin handlers and their types, and from the descriptions below of
//! the OAuth endpoints (whose handlers read the raw request, so they are described here,
//! beside the shapes of RFC 6749 section 5, RFC 7662 section 2.2, RFC 7517 and RFC 8414).
//! `.ci/run` checks the running server against it with Schemathesis.

use axum::http::{header, HeaderValue};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::openapi::Required;
use utoipa::{Modify, OpenApi, ToSchema};

use tessera_proto::admin::Problem;
use tessera_proto::ErrorResponse as OAuthError;

use crate::control::admin;
use crate::AppState;

pub(crate) fn router() -> Router<AppState> {
    Router::new().route("/openapi.json", get(document))
}

async fn document() -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        ApiDoc::openapi().to_json().unwrap_or_default(),
    )
}

/// The document.
#[derive(OpenApi)]
#[openapi(
    info(title = "Tessera", description = "OAuth 2.0 Client Credentials token service and its admin API"),
    paths(
        token, introspect, revoke, jwks, metadata, openid_configuration, api_limits, api_usage,
        healthz, readyz, metrics, openapi,
        admin::plans::list_plans, admin::plans::get_plan, admin::plans::put_plan,
        admin::plans::delete_plan, admin::plans::plan_usage, admin::plans::hourly_usage,
        admin::clients::list_clients, admin::clients::create_client, admin::clients::get_client,
        admin::clients::patch_client, admin::clients::delete_client,
        admin::clients::rotate_secret, admin::clients::client_usage,
        admin::clients::client_refusals, admin::clients::rate_limited,
        admin::orgs::list_orgs, admin::orgs::create_org, admin::orgs::get_org,
        admin::orgs::patch_org, admin::orgs::delete_org, admin::orgs::org_usage,
        admin::org_clients::list_org_clients, admin::org_clients::create_org_client,
        admin::org_clients::get_org_client, admin::org_clients::patch_org_client,
        admin::org_clients::delete_org_client, admin::org_clients::rotate_org_client_secret,
        admin::keys::list_keys, admin::keys::rotate_keys,
        admin::trust::list_policies, admin::trust::get_policy, admin::trust::put_policy,
        admin::trust::delete_policy, admin::audit::list_audit_events,
    ),
    components(schemas(Problem, OAuthError, TokenForm, TokenAnswer, IntrospectionForm,
        Introspection, RevocationForm, Jwks, Metadata, LimitsDocument, PlanLimits, LimitRate,
        LimitQuota, UsageReport, UsageCount)),
    modifiers(&Security, &OptionalBodies),
    tags((name = "oauth", description = "RFC 6749 and the endpoints around it"),
         (name = "plans"), (name = "clients"),
         (name = "orgs", description = "Organizations: customers that hold clients and a plan"),
         (name = "keys"),
         (name = "trust", description = "Workload identity federation"),
         (name = "audit", description = "Who changed what, when, from where"),
         (name = "operations", description = "Health and metrics"))
)]
#[derive(Debug)]
pub(crate) struct ApiDoc;

/// The two security schemes: HTTP Basic client authentication at the OAuth endpoints
/// (RFC 6749 section 2.3.1), and bearer tokens of this server at the admin API.
struct Security;

impl Modify for Security {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "client_basic",
            SecurityScheme::Http(Http::new(HttpAuthScheme::Basic)),
        );
        components.add_security_scheme(
            "admin_token",
            SecurityScheme::Http(
                Http::builder()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("JWT")
                    .description(Some(
                        "An access token of this server with scope tessera-admin \
                         (or tessera-admin-read for GET); under /admin/v1/orgs/{id}, the \
                         scope tessera-org-admin of a client of that organization too. A DPoP-bound token is sent as \
                         `Authorization: DPoP <token>` with a DPoP proof for the request \
                         (RFC 9449 section 7.1); a certificate-bound one over a connection \
                         presenting its certificate (RFC 8705 section 3)",
                    ))
                    .build(),
            ),
        );
    }
}

/// The request bodies that may be left out, an empty body taking the defaults. utoipa
/// marks a body optional only when its type is an `Option`, which also makes a JSON `null`
/// valid; the server reads no `null`, so the flag is set here instead.
struct OptionalBodies;

impl Modify for OptionalBodies {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        for path in [
            "/admin/v1/clients/{id}/rotate-secret",
            "/admin/v1/orgs/{id}/clients/{client_id}/rotate-secret",
            "/admin/v1/keys/rotate",
        ] {
            let body = openapi
                .paths
                .paths
                .get_mut(path)
                .and_then(|item| item.post.as_mut())
                .and_then(|operation| operation.request_body.as_mut());
            if let Some(body) = body {
                body.required = Some(Required::False);
            }
        }
    }
}

/// RFC 6749 section 4.4.2.
#[derive(ToSchema)]
#[allow(dead_code)]
struct TokenForm {
    /// `client_credentials`.
    #[schema(pattern = "^client_credentials$")]
    grant_type: String,
    /// Space-separated scopes, each naming one API.
    scope: Option<String>,
    /// With `client_secret_post` only.
    client_id: Option<String>,
    /// With `client_secret_post` only.
    client_secret: Option<String>,
}

/// RFC 6749 section 5.1.
#[derive(ToSchema)]
#[allow(dead_code)]
struct TokenAnswer {
    access_token: String,
    /// `Bearer`.
    token_type: String,
    expires_in: u64,
    scope: String,
}

/// RFC 7662 section 2.1.
#[derive(ToSchema)]
#[allow(dead_code)]
struct IntrospectionForm {
    #[schema(min_length = 1)]
    token: String,
    token_type_hint: Option<String>,
}

/// RFC 7662 section 2.2; only `active` when the token is not.
#[derive(ToSchema)]
#[allow(dead_code)]
struct Introspection {
    active: bool,
    scope: Option<String>,
    client_id: Option<String>,
    token_type: Option<String>,
    exp: Option<u64>,
    iat: Option<u64>,
    sub: Option<String>,
    aud: Option<Vec<String>>,
    iss: Option<String>,
    jti: Option<String>,
}

/// RFC 7009 section 2.1.
#[derive(ToSchema)]
#[allow(dead_code)]
struct RevocationForm {
    #[schema(min_length = 1)]
    token: String,
    token_type_hint: Option<String>,
}

/// RFC 7517 section 5.
#[derive(ToSchema)]
#[allow(dead_code)]
struct Jwks {
    keys: Vec<serde_json::Value>,
}

/// RFC 8414 section 2.
#[derive(ToSchema)]
#[allow(dead_code)]
struct Metadata {
    issuer: String,
    token_endpoint: String,
    jwks_uri: String,
    grant_types_supported: Vec<String>,
    token_endpoint_auth_methods_supported: Vec<String>,
    scopes_supported: Vec<String>,
    response_types_supported: Vec<String>,
    introspection_endpoint: Option<String>,
    revocation_endpoint: Option<String>,
}

/// `GET /api-limits/{api}` (`tessera_proto::api_limits::LimitsDocument`).
#[derive(ToSchema)]
#[allow(dead_code)]
struct LimitsDocument {
    /// The API.
    api: String,
    /// Every plan that grants the API, by name: its limits, `{}` for none.
    plans: std::collections::BTreeMap<String, PlanLimits>,
}

/// One plan's limits on one API; an absent part is no limit.
#[derive(ToSchema)]
#[allow(dead_code)]
struct PlanLimits {
    rate: Option<LimitRate>,
    /// Requests at once after a quiet spell.
    #[schema(minimum = 1)]
    burst: Option<u32>,
    quota: Option<LimitQuota>,
    /// The clients of an organization share the limits, counted by the token's `org_id`.
    per_org: Option<bool>,
}

/// `limit` requests per `window_seconds` (GCRA).
#[derive(ToSchema)]
#[allow(dead_code)]
struct LimitRate {
    #[schema(minimum = 1)]
    limit: u32,
    #[schema(minimum = 1)]
    window_seconds: u32,
}

/// `limit` requests per calendar `period` in UTC, reset at its start.
#[derive(ToSchema)]
#[allow(dead_code)]
struct LimitQuota {
    #[schema(minimum = 1)]
    limit: u64,
    #[schema(pattern = "^(day|month)$")]
    period: String,
}

/// `POST /api-usage` (`tessera_proto::api_limits::UsageReport`).
#[derive(ToSchema)]
#[allow(dead_code)]
struct UsageReport {
    /// Chosen by the API, the same on every retry: a batch counts once.
    #[schema(pattern = "^[A-Za-z0-9._:-]{1,128}$")]
    batch: String,
    /// The API that served the requests.
    api: String,
    counts: Vec<UsageCount>,
}

/// Requests of one client to the API on one UTC day.
#[derive(ToSchema)]
#[allow(dead_code)]
struct UsageCount {
    #[schema(format = Date)]
    day: String,
    client_id: String,
    requests: u64,
    refused: u64,
}

/// The request limits of every plan that grants an API, for the API to enforce (issue 27);
/// public and cacheable, as the JWK Set.
#[utoipa::path(get, path = "/api-limits/{api}", tag = "oauth",
    params(("api" = String, Path, description = "The API: a scope that names it")),
    responses(
        (status = 200, description = "The limits, by plan", body = LimitsDocument,
         headers(("ETag" = String), ("Cache-Control" = String))),
        (status = 304, description = "Unchanged since the ETag in If-None-Match"),
        (status = 404, description = "No plan grants the API", body = Problem, content_type = "application/problem+json")))]
#[allow(dead_code)]
fn api_limits() {}

/// An API's report of the requests it served, per client and UTC day, with a token of the
/// scope `tessera-usage`; a batch sent again counts once.
#[utoipa::path(post, path = "/api-usage", tag = "oauth",
    request_body(content = UsageReport, content_type = "application/json"),
    responses(
        (status = 204, description = "Counted (or counted before)"),
        (status = 400, description = "The body or a field is not as described", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No token, or not one of this issuer's (RFC 6750 section 3)", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "insufficient_scope: the token lacks tessera-usage", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The store does not answer", body = Problem, content_type = "application/problem+json")),
    security(("admin_token" = ["tessera-usage"])))]
#[allow(dead_code)]
fn api_usage() {}

/// Issue an access token to a client acting on its own behalf (RFC 6749 section 4.4).
#[utoipa::path(post, path = "/connect/token", tag = "oauth",
    request_body(content = TokenForm, content_type = "application/x-www-form-urlencoded"),
    responses(
        (status = 200, description = "The token", body = TokenAnswer),
        (status = 400, description = "invalid_request, unsupported_grant_type, invalid_scope", body = OAuthError),
        (status = 401, description = "invalid_client", body = OAuthError),
        (status = 408, description = "The request was sent too slowly"),
        (status = 413, description = "Body too large", body = OAuthError),
        (status = 429, description = "Over the plan's rate, or too many failed authentications", body = OAuthError),
        (status = 503, description = "Busy, or the registry is out of date", body = OAuthError)),
    security(("client_basic" = []), ()))]
#[allow(dead_code)]
fn token() {}

/// Whether a token is active, for APIs that ask the issuer (RFC 7662).
#[utoipa::path(post, path = "/connect/introspect", tag = "oauth",
    request_body(content = IntrospectionForm, content_type = "application/x-www-form-urlencoded"),
    responses(
        (status = 200, description = "The token's state", body = Introspection),
        (status = 400, description = "invalid_request", body = OAuthError),
        (status = 401, description = "invalid_client", body = OAuthError),
        (status = 408, description = "The request was sent too slowly"),
        (status = 413, description = "Body too large", body = OAuthError),
        (status = 429, description = "Too many failed authentications", body = OAuthError),
        (status = 503, description = "Busy, or the registry is out of date", body = OAuthError)),
    security(("client_basic" = []), ()))]
#[allow(dead_code)]
fn introspect() {}

/// Revoke a token of the calling client (RFC 7009).
#[utoipa::path(post, path = "/connect/revocation", tag = "oauth",
    request_body(content = RevocationForm, content_type = "application/x-www-form-urlencoded"),
    responses(
        (status = 200, description = "Revoked, or nothing to revoke"),
        (status = 400, description = "invalid_request, unsupported_token_type", body = OAuthError),
        (status = 401, description = "invalid_client", body = OAuthError),
        (status = 408, description = "The request was sent too slowly"),
        (status = 413, description = "Body too large", body = OAuthError),
        (status = 429, description = "Too many failed authentications", body = OAuthError),
        (status = 503, description = "Busy, or the store does not answer", body = OAuthError)),
    security(("client_basic" = []), ()))]
#[allow(dead_code)]
fn revoke() {}

/// The public signing keys: upcoming, current and recently retired (RFC 7517).
#[utoipa::path(get, path = "/.well-known/jwks.json", tag = "oauth",
    responses((status = 200, description = "The JWK Set", body = Jwks)))]
#[allow(dead_code)]
fn jwks() {}

/// Authorization server metadata (RFC 8414).
#[utoipa::path(get, path = "/.well-known/oauth-authorization-server", tag = "oauth",
    responses((status = 200, description = "The metadata", body = Metadata)))]
#[allow(dead_code)]
fn metadata() {}

/// The same metadata at the OpenID Connect Discovery location.
#[utoipa::path(get, path = "/.well-known/openid-configuration", tag = "oauth",
    responses((status = 200, description = "The metadata", body = Metadata)))]
#[allow(dead_code)]
fn openid_configuration() {}

/// This document.
#[utoipa::path(get, path = "/openapi.json", tag = "operations",
    responses((status = 200, description = "The OpenAPI 3.1 document", body = Object)))]
#[allow(dead_code)]
fn openapi() {}

/// Liveness.
#[utoipa::path(get, path = "/healthz", tag = "operations",
    responses((status = 200, description = "The process answers", body = String, content_type = "text/plain")))]
#[allow(dead_code)]
fn healthz() {}

/// Readiness: a signing key is active and the registry is fresh.
#[utoipa::path(get, path = "/readyz", tag = "operations",
    responses((status = 200, description = "Ready", body = String, content_type = "text/plain"),
              (status = 503, description = "Not ready, and why", body = String, content_type = "text/plain")))]
#[allow(dead_code)]
fn readyz() {}

/// Prometheus metrics (on this listener unless `--metrics-listen` moves them).
#[utoipa::path(get, path = "/metrics", tag = "operations",
    responses((status = 200, description = "The Prometheus text format, version 0.0.4", body = String, content_type = "text/plain")))]
#[allow(dead_code)]
fn metrics() {}
