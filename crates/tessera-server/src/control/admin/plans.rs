//! `/admin/v1/plans`: the scopes a client may request, its token lifetime, rate and reuse,
//! and the limits on its requests to the APIs.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use tessera_proto::admin as api;
use tessera_store::{DpopPolicy, Plan, PlanRemoval, RateLimit};

use super::auth::{Caller, Read, Write};
use super::extract::{ApiJson, ApiPath, IfMatch, Query};
use super::responses::{ReadErrors, WriteErrors};
use super::{etag, in_force, json, usage_within};
use crate::audit;
use crate::control::problem::Problem;
use crate::registrar::{
    views, ApiLimitsChange, Change, PlanSettings, RegistrarError, DEFAULT_TOKEN_TTL,
};
use crate::AppState;

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/plans", get(list_plans))
        .route(
            "/plans/{name}",
            get(get_plan).put(put_plan).delete(delete_plan),
        )
        .route("/plans/{name}/usage", get(plan_usage))
        .route("/usage/hourly", get(hourly_usage))
}

/// Token requests of all clients per UTC hour, over the last 24 hours (written with the
/// usage counts, every 30 s).
#[utoipa::path(get, path = "/admin/v1/usage/hourly", tag = "plans",
    responses((status = 200, description = "Issued and refused per hour", body = api::HourlyUsage), ReadErrors),
    security(("admin_token" = ["tessera-admin-read"])))]
pub(crate) async fn hourly_usage(
    State(state): State<AppState>,
    _caller: Caller<Read>,
) -> Result<Response, Problem> {
    let from = tessera_proto::clock::utc_hour(state.clock().now() - 23 * 3600);
    let hours = state
        .store()
        .hourly_usage(&from)
        .await?
        .into_iter()
        .map(|(hour, issued, refused)| api::Hour {
            hour,
            issued,
            refused,
        })
        .collect();
    Ok(json(StatusCode::OK, &api::HourlyUsage { hours }, None))
}

async fn find(state: &AppState, name: &str) -> Result<Option<Plan>, Problem> {
    Ok(state
        .store()
        .plans()
        .await?
        .into_iter()
        .find(|p| p.name == name))
}

async fn count(state: &AppState, name: &str) -> Result<u64, Problem> {
    Ok(state
        .store()
        .clients_per_plan()
        .await?
        .into_iter()
        .find(|(plan, _)| plan == name)
        .map_or(0, |(_, n)| n))
}

/// List the plans.
#[utoipa::path(get, path = "/admin/v1/plans", tag = "plans",
    responses((status = 200, description = "All plans, by name", body = api::PlanList), ReadErrors),
    security(("admin_token" = ["tessera-admin-read"])))]
pub(crate) async fn list_plans(
    State(state): State<AppState>,
    _caller: Caller<Read>,
) -> Result<Response, Problem> {
    let counts = state.store().clients_per_plan().await?;
    let plans = state.store().plans().await?;
    let plans = plans
        .iter()
        .map(|p| {
            let n = counts
                .iter()
                .find(|(name, _)| *name == p.name)
                .map_or(0, |c| c.1);
            views::plan(p, n)
        })
        .collect();
    Ok(json(StatusCode::OK, &api::PlanList { plans }, None))
}

/// Show one plan.
#[utoipa::path(get, path = "/admin/v1/plans/{name}", tag = "plans",
    params(("name" = String, Path, pattern = "^[A-Za-z0-9_-]{1,64}$", description = "Plan name")),
    responses(
        (status = 200, description = "The plan", body = api::Plan,
         headers(("ETag" = String, description = "Its version, for If-Match"))),
        (status = 404, description = "No such plan", body = api::Problem, content_type = "application/problem+json"),
        ReadErrors),
    security(("admin_token" = ["tessera-admin-read"])))]
pub(crate) async fn get_plan(
    State(state): State<AppState>,
    _caller: Caller<Read>,
    ApiPath(name): ApiPath<String>,
) -> Result<Response, Problem> {
    let plan = find(&state, &name)
        .await?
        .ok_or_else(|| Problem::not_found(format!("no plan named {name:?}")))?;
    let n = count(&state, &name).await?;
    Ok(json(
        StatusCode::OK,
        &views::plan(&plan, n),
        Some(&etag(&plan)),
    ))
}

/// Create a plan or replace one. A change applies to each of its clients' next token
/// request.
#[utoipa::path(put, path = "/admin/v1/plans/{name}", tag = "plans",
    params(("name" = String, Path, pattern = "^[A-Za-z0-9_-]{1,64}$", description = "Plan name"),
           ("If-Match" = Option<String>, Header, description = "The ETag read: replace only that version")),
    request_body = api::PlanInput,
    responses(
        (status = 200, description = "Replaced", body = api::Plan, headers(("ETag" = String))),
        (status = 201, description = "Created", body = api::Plan, headers(("ETag" = String))),
        WriteErrors),
    security(("admin_token" = ["tessera-admin"])))]
pub(crate) async fn put_plan(
    State(state): State<AppState>,
    caller: Caller<Write>,
    ApiPath(name): ApiPath<String>,
    if_match: IfMatch,
    ApiJson(input): ApiJson<api::PlanInput>,
) -> Result<Response, Problem> {
    if let Some(bad) = input
        .scopes
        .iter()
        .find(|s| s.is_empty() || s.contains(' '))
    {
        return Err(Problem::invalid_field(
            "scopes",
            format!(
                "{} is not one scope name",
                tessera_proto::scope::Quoted(bad)
            ),
        ));
    }
    let token_rate = match input.token_rate {
        None => Change::Clear,
        Some(r) => Change::Set(RateLimit {
            count: r.count,
            period_secs: r.period_secs,
            burst: r.burst.unwrap_or(r.count),
        }),
    };
    let api_limits = input
        .api_limits
        .iter()
        .map(|(api, limit)| Ok((api.clone(), views::api_limit_of(api, limit)?)))
        .collect::<Result<_, RegistrarError>>()?;
    let settings = PlanSettings {
        api_limits: ApiLimitsChange::Replace(api_limits),
        token_ttl: Some(input.token_ttl.unwrap_or(DEFAULT_TOKEN_TTL)),
        token_rate,
        reuse_percent: input.reuse_percent.map_or(Change::Clear, Change::Set),
        introspect_any: Some(input.introspect_any.unwrap_or(false)),
        // Absent keeps the plan's (each client's for a new plan), so that a client that
        // does not know the field (an older CLI, the console's form) leaves it as it is.
        limit_per: input
            .limit_per
            .as_deref()
            .map(|name| {
                tessera_store::LimitPer::from_name(name).ok_or_else(|| {
                    Problem::invalid_field("limit_per", "limit_per is client or org")
                })
            })
            .transpose()?,
        dpop: Some(input.dpop.map_or(DpopPolicy::Allowed, views::dpop_policy)),
    };
    let _one_writer = state.admin_guard().writes.lock().await;
    let before = find(&state, &name).await?;
    if_match.check(before.as_ref().map(etag).as_deref())?;
    let change = audit::change(
        &state,
        &caller,
        &format!("plan:{name}"),
        if before.is_some() {
            "replaced"
        } else {
            "created"
        },
    );
    let plan = change
        .registrar(state.clock())
        .set_plan_with(&name, &input.scopes.join(" "), &settings)
        .await?;
    change.made().await;
    in_force(&state).await;
    let n = count(&state, &name).await?;
    let status = if before.is_some() {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok(json(status, &views::plan(&plan, n), Some(&etag(&plan))))
}

/// Delete a plan no client is on.
#[utoipa::path(delete, path = "/admin/v1/plans/{name}", tag = "plans",
    params(("name" = String, Path, pattern = "^[A-Za-z0-9_-]{1,64}$", description = "Plan name"),
           ("If-Match" = Option<String>, Header, description = "The ETag read: delete only that version")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 404, description = "No such plan", body = api::Problem, content_type = "application/problem+json"),
        (status = 409, description = "Clients are on the plan", body = api::Problem, content_type = "application/problem+json"),
        WriteErrors),
    security(("admin_token" = ["tessera-admin"])))]
pub(crate) async fn delete_plan(
    State(state): State<AppState>,
    caller: Caller<Write>,
    ApiPath(name): ApiPath<String>,
    if_match: IfMatch,
) -> Result<Response, Problem> {
    let _one_writer = state.admin_guard().writes.lock().await;
    let before = find(&state, &name)
        .await?
        .ok_or_else(|| Problem::not_found(format!("no plan named {name:?}")))?;
    if_match.check(Some(&etag(&before)))?;
    let change = audit::change(&state, &caller, &format!("plan:{name}"), "deleted");
    match change.store().delete_plan(&name).await? {
        PlanRemoval::Removed => {}
        PlanRemoval::Unknown => return Err(Problem::not_found(format!("no plan named {name:?}"))),
        PlanRemoval::InUse => {
            return Err(Problem::conflict(format!(
                "clients are on plan {name:?}: move or delete them first"
            )))
        }
    }
    change.made().await;
    in_force(&state).await;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// Token requests of the plan's clients per UTC day.
#[utoipa::path(get, path = "/admin/v1/plans/{name}/usage", tag = "plans",
    params(("name" = String, Path, pattern = "^[A-Za-z0-9_-]{1,64}$", description = "Plan name"),
           ("from" = Option<String>, Query, format = Date, description = "First day, YYYY-MM-DD"),
           ("to" = Option<String>, Query, format = Date, description = "Last day, YYYY-MM-DD")),
    responses(
        (status = 200, description = "Tokens issued and refused per day, and requests to each API as the APIs reported them", body = api::Usage),
        (status = 404, description = "No such plan", body = api::Problem, content_type = "application/problem+json"),
        ReadErrors),
    security(("admin_token" = ["tessera-admin-read"])))]
pub(crate) async fn plan_usage(
    State(state): State<AppState>,
    _caller: Caller<Read>,
    ApiPath(name): ApiPath<String>,
    query: Query,
) -> Result<Response, Problem> {
    let range = query.day_range()?;
    find(&state, &name)
        .await?
        .ok_or_else(|| Problem::not_found(format!("no plan named {name:?}")))?;
    let usage = state.store().plan_usage(&name).await?;
    let api_usage = state.store().plan_api_usage(&name).await?;
    Ok(json(
        StatusCode::OK,
        &usage_within(range, usage, api_usage),
        None,
    ))
}
