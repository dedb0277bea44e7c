//! `/admin/v1/orgs`: organizations, the customers that hold clients and a plan (issue 28).
//! An organization's own admin reads its organization and its usage here
//! ([`OrgCaller<Read>`]); listing and creating organizations, and changing or deleting one
//! ([`OrgCaller<Govern>`]), are the provider's. Its clients are in `org_clients.rs`.

use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use tessera_proto::admin as api;
use tessera_store::Org;

use super::auth::{Caller, Govern, OrgCaller, Read, Write};
use super::extract::{ApiJson, ApiPath, IfMatch, Query};
use super::responses::{ReadErrors, WriteErrors};
use super::{etag, in_force, json};
use crate::audit;
use crate::control::problem::Problem;
use crate::registrar::views;
use crate::AppState;

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/orgs", get(list_orgs).post(create_org))
        .route(
            "/orgs/{id}",
            get(get_org).patch(patch_org).delete(delete_org),
        )
        .route("/orgs/{id}/usage", get(org_usage))
}

/// Token and API requests of an organization's clients per UTC day: each client's, and
/// the total.
#[utoipa::path(get, path = "/admin/v1/orgs/{id}/usage", tag = "orgs",
    params(("id" = String, Path, pattern = "^[A-Za-z0-9_-]{1,64}$", description = "Organization id"),
           ("from" = Option<String>, Query, format = Date, description = "First day, YYYY-MM-DD"),
           ("to" = Option<String>, Query, format = Date, description = "Last day, YYYY-MM-DD")),
    responses(
        (status = 200, description = "Per client and in total, per day", body = api::OrgUsage),
        (status = 404, description = "No such organization (or not the caller's)", body = api::Problem, content_type = "application/problem+json"),
        ReadErrors),
    security(("admin_token" = ["tessera-admin-read", "tessera-org-admin"])))]
pub(crate) async fn org_usage(
    State(state): State<AppState>,
    _caller: OrgCaller<Read>,
    ApiPath(id): ApiPath<String>,
    query: Query,
) -> Result<Response, Problem> {
    let range = query.day_range()?;
    let org = state.registrar().org(&id).await?;
    let store = state.store();
    let clients = store.org_clients(&org.id).await?;
    let usage = store.org_usage(&org.id).await?;
    let api_usage = store.org_api_usage(&org.id).await?;
    Ok(json(
        StatusCode::OK,
        &views::org_usage(&org.id, range, &clients, usage, api_usage),
        None,
    ))
}

/// The organization as the API shows it, with its count of clients.
async fn view(state: &AppState, org: &Org) -> Result<api::Org, Problem> {
    let clients = state.registrar().org_client_count(&org.id).await?;
    Ok(views::org(
        org,
        clients,
        state.registry().plans().map(|p| &**p),
    ))
}

/// List the organizations.
#[utoipa::path(get, path = "/admin/v1/orgs", tag = "orgs",
    responses((status = 200, description = "All organizations, by id", body = api::OrgList), ReadErrors),
    security(("admin_token" = ["tessera-admin-read"])))]
pub(crate) async fn list_orgs(
    State(state): State<AppState>,
    _caller: Caller<Read>,
) -> Result<Response, Problem> {
    let counts = state.store().clients_per_org().await?;
    let registry = state.registry();
    let orgs = state
        .store()
        .orgs()
        .await?
        .iter()
        .map(|o| {
            let n = counts.iter().find(|(id, _)| *id == o.id).map_or(0, |c| c.1);
            views::org(o, n, registry.plans().map(|p| &**p))
        })
        .collect();
    Ok(json(StatusCode::OK, &api::OrgList { orgs }, None))
}

/// Create an organization on a plan.
#[utoipa::path(post, path = "/admin/v1/orgs", tag = "orgs",
    request_body = api::OrgInput,
    responses(
        (status = 201, description = "Created", body = api::Org,
         headers(("Location" = String, description = "The new organization"), ("ETag" = String))),
        WriteErrors),
    security(("admin_token" = ["tessera-admin"])))]
pub(crate) async fn create_org(
    State(state): State<AppState>,
    caller: Caller<Write>,
    ApiJson(input): ApiJson<api::OrgInput>,
) -> Result<Response, Problem> {
    let _one_writer = state.admin_guard().writes.lock().await;
    let change = audit::change(
        &state,
        &caller,
        &format!("org:{}", input.id),
        &format!("created on plan {}", input.plan),
    );
    let org = change
        .registrar(state.clock())
        .create_org(&input.id, &input.name, &input.plan)
        .await?;
    change.made().await;
    let mut response = json(
        StatusCode::CREATED,
        &views::org(&org, 0, state.registry().plans().map(|p| &**p)),
        Some(&etag(&org)),
    );
    if let Ok(location) = HeaderValue::from_str(&format!("/admin/v1/orgs/{}", org.id)) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    Ok(response)
}

/// Show one organization.
#[utoipa::path(get, path = "/admin/v1/orgs/{id}", tag = "orgs",
    params(("id" = String, Path, pattern = "^[A-Za-z0-9_-]{1,64}$", description = "Organization id")),
    responses(
        (status = 200, description = "The organization", body = api::Org,
         headers(("ETag" = String, description = "Its version, for If-Match"))),
        (status = 404, description = "No such organization (or not the caller's)", body = api::Problem, content_type = "application/problem+json"),
        ReadErrors),
    security(("admin_token" = ["tessera-admin-read", "tessera-org-admin"])))]
pub(crate) async fn get_org(
    State(state): State<AppState>,
    _caller: OrgCaller<Read>,
    ApiPath(id): ApiPath<String>,
) -> Result<Response, Problem> {
    let org = state.registrar().org(&id).await?;
    Ok(json(
        StatusCode::OK,
        &view(&state, &org).await?,
        Some(&etag(&org)),
    ))
}

/// Change an organization's name, plan or whether it is enabled. A new plan, or a disable,
/// applies to every one of its clients' next token request (on every instance within its
/// sync interval).
#[utoipa::path(patch, path = "/admin/v1/orgs/{id}", tag = "orgs",
    params(("id" = String, Path, pattern = "^[A-Za-z0-9_-]{1,64}$", description = "Organization id"),
           ("If-Match" = Option<String>, Header, description = "The ETag read: change only that version")),
    request_body = api::OrgPatch,
    responses(
        (status = 200, description = "The changed organization", body = api::Org, headers(("ETag" = String))),
        (status = 404, description = "No such organization", body = api::Problem, content_type = "application/problem+json"),
        WriteErrors),
    security(("admin_token" = ["tessera-admin"])))]
pub(crate) async fn patch_org(
    State(state): State<AppState>,
    OrgCaller { caller, .. }: OrgCaller<Govern>,
    ApiPath(id): ApiPath<String>,
    if_match: IfMatch,
    ApiJson(patch): ApiJson<api::OrgPatch>,
) -> Result<Response, Problem> {
    let _one_writer = state.admin_guard().writes.lock().await;
    let before = state.registrar().org(&id).await?;
    if_match.check(Some(&etag(&before)))?;
    // What the patch changes, said before it is made (the event commits with it).
    let after = super::patch_changes(
        patch.name.as_ref().is_some_and(|n| *n != before.name),
        (&before.plan, patch.plan.as_deref().unwrap_or(&before.plan)),
        (before.enabled, patch.enabled.unwrap_or(before.enabled)),
    );
    let change = audit::change(&state, &caller, &format!("org:{id}"), &after);
    let org = change
        .registrar(state.clock())
        .patch_org(
            &id,
            patch.name.as_deref(),
            patch.plan.as_deref(),
            patch.enabled,
        )
        .await?;
    change.made().await;
    in_force(&state).await;
    Ok(json(
        StatusCode::OK,
        &view(&state, &org).await?,
        Some(&etag(&org)),
    ))
}

/// Delete an organization. One with clients is refused (409) unless `with_clients=true`,
/// which deletes them with it, in one transaction.
#[utoipa::path(delete, path = "/admin/v1/orgs/{id}", tag = "orgs",
    params(("id" = String, Path, pattern = "^[A-Za-z0-9_-]{1,64}$", description = "Organization id"),
           ("with_clients" = Option<bool>, Query, description = "Delete its clients with it (default false)"),
           ("If-Match" = Option<String>, Header, description = "The ETag read: delete only that version")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 404, description = "No such organization", body = api::Problem, content_type = "application/problem+json"),
        (status = 409, description = "It has clients", body = api::Problem, content_type = "application/problem+json"),
        WriteErrors),
    security(("admin_token" = ["tessera-admin"])))]
pub(crate) async fn delete_org(
    State(state): State<AppState>,
    OrgCaller { caller, .. }: OrgCaller<Govern>,
    ApiPath(id): ApiPath<String>,
    if_match: IfMatch,
    query: Query,
) -> Result<Response, Problem> {
    let with_clients = match query.single("with_clients")? {
        None | Some("false") => false,
        Some("true") => true,
        Some(_) => {
            return Err(Problem::invalid_parameter(
                "with_clients",
                "with_clients is true or false",
            ))
        }
    };
    let _one_writer = state.admin_guard().writes.lock().await;
    let before = state.registrar().org(&id).await?;
    if_match.check(Some(&etag(&before)))?;
    // Its clients, counted under the write lock: those that go with it.
    let clients = if with_clients {
        state.registrar().org_client_count(&id).await?
    } else {
        0
    };
    let change = audit::change(
        &state,
        &caller,
        &format!("org:{id}"),
        &format!("deleted with {clients} client(s)"),
    );
    change
        .registrar(state.clock())
        .delete_org(&id, with_clients)
        .await?;
    change.made().await;
    in_force(&state).await;
    Ok(StatusCode::NO_CONTENT.into_response())
}
