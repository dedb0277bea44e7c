//! `/admin/v1/trust-policies`: workload identity federation, which external identities (a
//! Kubernetes service account, a GitHub Actions job, a SPIFFE ID) may act as which client.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use tessera_proto::admin as api;
use tessera_store::TrustPolicy;

use super::auth::{Caller, Read, Write};
use super::extract::{ApiJson, ApiPath};
use super::json;
use super::responses::{ReadErrors, WriteErrors};
use crate::audit;
use crate::control::problem::Problem;
use crate::registrar::views;
use crate::AppState;

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/trust-policies", get(list_policies))
        .route(
            "/trust-policies/{name}",
            get(get_policy).put(put_policy).delete(delete_policy),
        )
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
    responses((status = 200, description = "All trust policies, by name", body = api::TrustPolicyList), ReadErrors),
    security(("admin_token" = ["tessera-admin-read"])))]
pub(crate) async fn list_policies(
    State(state): State<AppState>,
    _caller: Caller<Read>,
) -> Result<Response, Problem> {
    let trust_policies = state
        .store()
        .trust_policies()
        .await?
        .iter()
        .map(views::trust_policy)
        .collect();
    Ok(json(
        StatusCode::OK,
        &api::TrustPolicyList { trust_policies },
        None,
    ))
}

/// Show one trust policy.
#[utoipa::path(get, path = "/admin/v1/trust-policies/{name}", tag = "trust",
    params(("name" = String, Path, pattern = "^[A-Za-z0-9_-]{1,64}$", description = "Policy name")),
    responses(
        (status = 200, description = "The policy", body = api::TrustPolicy),
        (status = 404, description = "No such policy", body = api::Problem, content_type = "application/problem+json"),
        ReadErrors),
    security(("admin_token" = ["tessera-admin-read"])))]
pub(crate) async fn get_policy(
    State(state): State<AppState>,
    _caller: Caller<Read>,
    ApiPath(name): ApiPath<String>,
) -> Result<Response, Problem> {
    Ok(json(
        StatusCode::OK,
        &views::trust_policy(&find(&state, &name).await?),
        None,
    ))
}

/// Create or replace a trust policy.
#[utoipa::path(put, path = "/admin/v1/trust-policies/{name}", tag = "trust",
    params(("name" = String, Path, pattern = "^[A-Za-z0-9_-]{1,64}$", description = "Policy name")),
    request_body(content = api::TrustPolicyInput, content_type = "application/json"),
    responses(
        (status = 200, description = "Replaced", body = api::TrustPolicy),
        (status = 201, description = "Created", body = api::TrustPolicy),
        (status = 404, description = "No such client", body = api::Problem, content_type = "application/problem+json"),
        WriteErrors),
    security(("admin_token" = ["tessera-admin"])))]
pub(crate) async fn put_policy(
    State(state): State<AppState>,
    caller: Caller<Write>,
    ApiPath(name): ApiPath<String>,
    ApiJson(input): ApiJson<api::TrustPolicyInput>,
) -> Result<Response, Problem> {
    let _one_writer = state.admin_guard().writes.lock().await;
    let existed = find(&state, &name).await.is_ok();
    let change = audit::change(
        &state,
        &caller,
        &format!("trust-policy:{name}"),
        if existed { "replaced" } else { "created" },
    );
    let policy = change
        .registrar(state.clock())
        .put_trust_policy(views::trust_policy_input(&name, input))
        .await?;
    change.made().await;
    let status = if existed {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok(json(status, &views::trust_policy(&policy), None))
}

/// Delete a trust policy.
#[utoipa::path(delete, path = "/admin/v1/trust-policies/{name}", tag = "trust",
    params(("name" = String, Path, pattern = "^[A-Za-z0-9_-]{1,64}$", description = "Policy name")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 404, description = "No such policy", body = api::Problem, content_type = "application/problem+json"),
        WriteErrors),
    security(("admin_token" = ["tessera-admin"])))]
pub(crate) async fn delete_policy(
    State(state): State<AppState>,
    caller: Caller<Write>,
    ApiPath(name): ApiPath<String>,
) -> Result<Response, Problem> {
    let _one_writer = state.admin_guard().writes.lock().await;
    let change = audit::change(&state, &caller, &format!("trust-policy:{name}"), "deleted");
    if !change
        .registrar(state.clock())
        .remove_trust_policy(&name)
        .await?
    {
        return Err(Problem::not_found(format!(
            "no trust policy named {name:?}"
        )));
    }
    change.made().await;
    Ok(StatusCode::NO_CONTENT.into_response())
}
