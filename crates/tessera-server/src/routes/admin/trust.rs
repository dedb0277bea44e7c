//! `/admin/v1/trust-policies`: workload identity federation, which external identities (a
//! Kubernetes service account, a GitHub Actions job, a SPIFFE ID) may act as which client.

use std::collections::BTreeMap;

use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde::{Deserialize, Serialize};
use tessera_proto::clock::rfc3339;
use tessera_store::TrustPolicy;

use super::auth::{Caller, Read, Write};
use super::{json, path, read_json, run};
use crate::audit;
use crate::error::problem::Problem;
use crate::registrar::TrustPolicyInput;
use crate::routes::openapi::{ReadErrors, WriteErrors};
use crate::AppState;

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/trust-policies", get(list_policies))
        .route(
            "/trust-policies/{name}",
            get(get_policy).put(put_policy).delete(delete_policy),
        )
}

/// A trust policy: tokens of `issuer` whose `aud` holds `audience`, whose `sub` matches
/// `subject` (exact, or a prefix ending in `:` or `/` and a `*`) and whose claims hold `claims`
/// authenticate as `client_id`.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub(crate) struct TrustPolicyView {
    name: String,
    client_id: String,
    issuer: String,
    /// Where the issuer's keys are; absent: its OpenID Connect discovery document says.
    #[serde(skip_serializing_if = "Option::is_none")]
    jwks_uri: Option<String>,
    audience: String,
    subject: String,
    /// Claims that must have these values.
    claims: BTreeMap<String, String>,
    /// The longest life of an accepted token, in seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    max_assertion_ttl: Option<u32>,
    /// RFC 3339.
    created_at: String,
}

/// All trust policies.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct TrustPolicyList {
    trust_policies: Vec<TrustPolicyView>,
}

/// A trust policy to create or replace.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct TrustPolicyInputBody {
    /// The client the workload acts as.
    client_id: String,
    /// The external issuer (`iss`): an https URL.
    issuer: String,
    /// Where the issuer's keys are, if not found through its OIDC discovery.
    #[serde(default)]
    jwks_uri: Option<String>,
    /// A value `aud` must hold.
    audience: String,
    /// The subject: exact, or a prefix ending in `:` or `/` followed by `*`; not `*` alone.
    subject: String,
    /// Claims that must have these values (for GitHub Actions, `repository_id` or
    /// `repository_owner_id` among them, unless `allow_mutable_subject`).
    #[serde(default)]
    claims: BTreeMap<String, String>,
    /// The longest life of an accepted token, in seconds.
    #[serde(default)]
    #[schema(minimum = 1)]
    max_assertion_ttl: Option<u32>,
    /// For GitHub Actions' issuer: accept a policy that requires neither `repository_id` nor
    /// `repository_owner_id`, trusting names that can change hands. Checked when written.
    #[serde(default)]
    allow_mutable_subject: bool,
    /// Accept a policy on a client whose plan grants an admin scope. Checked when written.
    #[serde(default)]
    allow_admin: bool,
}

fn view(policy: &TrustPolicy) -> TrustPolicyView {
    TrustPolicyView {
        name: policy.name.clone(),
        client_id: policy.client_id.to_string(),
        issuer: policy.issuer.clone(),
        jwks_uri: policy.jwks_uri.clone(),
        audience: policy.audience.clone(),
        subject: policy.subject.clone(),
        claims: serde_json::from_str(&policy.claims).unwrap_or_default(),
        max_assertion_ttl: policy.max_assertion_ttl,
        created_at: rfc3339(policy.created_at),
    }
}

async fn find(state: &AppState, name: &str) -> Result<TrustPolicy, Problem> {
    state
        .store()
        .trust_policies()
        .await?
        .into_iter()
        .find(|p| p.name == name)
        .ok_or_else(|| Problem::not_found(format!("no trust policy named {name:?}")))
}

/// List the trust policies.
#[utoipa::path(get, path = "/admin/v1/trust-policies", tag = "trust",
    responses((status = 200, description = "All trust policies, by name", body = TrustPolicyList), ReadErrors),
    security(("admin_token" = ["tessera-admin-read"])))]
pub(crate) async fn list_policies(
    State(state): State<AppState>,
    _caller: Caller<Read>,
) -> Response {
    run(async {
        let trust_policies = state
            .store()
            .trust_policies()
            .await?
            .iter()
            .map(view)
            .collect();
        Ok(json(
            StatusCode::OK,
            &TrustPolicyList { trust_policies },
            None,
        ))
    })
    .await
}

/// Show one trust policy.
#[utoipa::path(get, path = "/admin/v1/trust-policies/{name}", tag = "trust",
    params(("name" = String, Path, pattern = "^[A-Za-z0-9_-]{1,64}$", description = "Policy name")),
    responses(
        (status = 200, description = "The policy", body = TrustPolicyView),
        (status = 404, description = "No such policy", body = Problem, content_type = "application/problem+json"),
        ReadErrors),
    security(("admin_token" = ["tessera-admin-read"])))]
pub(crate) async fn get_policy(
    State(state): State<AppState>,
    _caller: Caller<Read>,
    name: Result<Path<String>, PathRejection>,
) -> Response {
    run(async {
        let name = path(name)?;
        Ok(json(
            StatusCode::OK,
            &view(&find(&state, &name).await?),
            None,
        ))
    })
    .await
}

/// Create or replace a trust policy.
#[utoipa::path(put, path = "/admin/v1/trust-policies/{name}", tag = "trust",
    params(("name" = String, Path, pattern = "^[A-Za-z0-9_-]{1,64}$", description = "Policy name")),
    request_body(content = TrustPolicyInputBody, content_type = "application/json"),
    responses(
        (status = 200, description = "Replaced", body = TrustPolicyView),
        (status = 201, description = "Created", body = TrustPolicyView),
        (status = 404, description = "No such client", body = Problem, content_type = "application/problem+json"),
        WriteErrors),
    security(("admin_token" = ["tessera-admin"])))]
pub(crate) async fn put_policy(
    State(state): State<AppState>,
    caller: Caller<Write>,
    name: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    run(async {
        let name = path(name)?;
        let input: TrustPolicyInputBody = read_json(&headers, body, false).await?;
        let _one_writer = state.admin_guard().writes.lock().await;
        let existed = find(&state, &name).await.is_ok();
        let policy = state
            .registrar()
            .put_trust_policy(TrustPolicyInput {
                name: name.clone(),
                client_id: input.client_id,
                issuer: input.issuer,
                jwks_uri: input.jwks_uri,
                audience: input.audience,
                subject: input.subject,
                claims: input.claims.into_iter().collect(),
                max_assertion_ttl: input.max_assertion_ttl,
                allow_mutable_subject: input.allow_mutable_subject,
                allow_admin: input.allow_admin,
            })
            .await?;
        audit::admin_change(
            &caller.client_id,
            &format!("trust-policy:{name}"),
            if existed { "replaced" } else { "created" },
        );
        let status = if existed {
            StatusCode::OK
        } else {
            StatusCode::CREATED
        };
        Ok(json(status, &view(&policy), None))
    })
    .await
}

/// Delete a trust policy.
#[utoipa::path(delete, path = "/admin/v1/trust-policies/{name}", tag = "trust",
    params(("name" = String, Path, pattern = "^[A-Za-z0-9_-]{1,64}$", description = "Policy name")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 404, description = "No such policy", body = Problem, content_type = "application/problem+json"),
        WriteErrors),
    security(("admin_token" = ["tessera-admin"])))]
pub(crate) async fn delete_policy(
    State(state): State<AppState>,
    caller: Caller<Write>,
    name: Result<Path<String>, PathRejection>,
) -> Response {
    run(async {
        let name = path(name)?;
        let _one_writer = state.admin_guard().writes.lock().await;
        if !state.registrar().remove_trust_policy(&name).await? {
            return Err(Problem::not_found(format!(
                "no trust policy named {name:?}"
            )));
        }
        audit::admin_change(
            &caller.client_id,
            &format!("trust-policy:{name}"),
            "deleted",
        );
        Ok(StatusCode::NO_CONTENT.into_response())
    })
    .await
}
