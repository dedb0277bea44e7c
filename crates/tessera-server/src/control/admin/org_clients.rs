//! `/admin/v1/orgs/{id}/clients`: an organization's clients, managed by the organization's
//! own admin (issue 28 item 5) as well as by the provider's. The caller is an
//! [`OrgCaller`], admitted to the organization the path names (`auth::admit`); a client is
//! found here only when it belongs to that organization, so another organization's client
//! is answered as one that does not exist (404), and nothing of it is read or changed.
//!
//! Its plan is the organization's: nothing here names a plan or an organization, so a
//! client made or changed here has no scope its organization's plan does not grant.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use tessera_proto::admin as api;
use tessera_store::Client;

use super::auth::{Caller, OrgCaller, Read, Write};
use super::clients::{check_name, register, MAX_GRACE, MAX_PAGE};
use super::extract::{ApiJson, ApiPath, IfMatch, JsonOrDefault, Query};
use super::idempotency::Idempotent;
use super::responses::{ReadErrors, WriteErrors};
use super::{etag, in_force, json};
use crate::audit;
use crate::control::problem::Problem;
use crate::registrar::{views, RegistrarError};
use crate::AppState;

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route(
            "/orgs/{id}/clients",
            get(list_org_clients).post(create_org_client),
        )
        .route(
            "/orgs/{id}/clients/{client_id}",
            get(get_org_client)
                .patch(patch_org_client)
                .delete(delete_org_client),
        )
        .route(
            "/orgs/{id}/clients/{client_id}/rotate-secret",
            post(rotate_org_client_secret),
        )
}

/// Client `id` of organization `org`; one of another organization, or none, is the same
/// 404.
async fn member(state: &AppState, org: &str, id: &str) -> Result<Client, Problem> {
    let client = state.registrar().client(id).await?;
    if client.org.as_deref() != Some(org) {
        return Err(RegistrarError::UnknownClient(id.to_owned()).into());
    }
    Ok(client)
}

/// [`member`] as it is before a change, read under this instance's write lock (held until
/// the guard is dropped) and checked against `If-Match`.
async fn member_for_write<'s>(
    state: &'s AppState,
    if_match: &IfMatch,
    org: &str,
    id: &str,
) -> Result<(tokio::sync::MutexGuard<'s, ()>, Client), Problem> {
    let guard = state.admin_guard().writes.lock().await;
    let before = member(state, org, id).await?;
    if_match.check(Some(&etag(&before)))?;
    Ok((guard, before))
}

/// A change to a client of `org` and its audit event (kept in the change's transaction):
/// the object names both.
fn audited<R>(
    state: &AppState,
    caller: &Caller<R>,
    org: &str,
    id: &str,
    change: &str,
) -> audit::Change {
    audit::change(state, caller, &format!("org:{org}/client:{id}"), change)
}

/// The path parameters of one client of an organization.
type OrgClientPath = ApiPath<(String, String)>;

/// List an organization's clients, a page at a time, by client id.
#[utoipa::path(get, path = "/admin/v1/orgs/{id}/clients", tag = "orgs",
    params(("id" = String, Path, pattern = "^[A-Za-z0-9_-]{1,64}$", description = "Organization id"),
           ("cursor" = Option<String>, Query, description = "next_cursor of the previous page"),
           ("limit" = Option<u32>, Query, minimum = 1, maximum = 1000,
            description = "Clients per page, 1 to 1000 (default 100)")),
    responses(
        (status = 200, description = "A page of the organization's clients", body = api::ClientPage),
        (status = 404, description = "No such organization (or not the caller's)", body = api::Problem, content_type = "application/problem+json"),
        ReadErrors),
    security(("admin_token" = ["tessera-admin-read", "tessera-org-admin"])))]
pub(crate) async fn list_org_clients(
    State(state): State<AppState>,
    OrgCaller { org, .. }: OrgCaller<Read>,
    query: Query,
) -> Result<Response, Problem> {
    let limit = query.number("limit", 100, 1..=MAX_PAGE)?;
    let cursor = query.single("cursor")?.map(str::to_owned);
    if cursor
        .as_deref()
        .is_some_and(|c| tessera_proto::ClientId::parse(c).is_none())
    {
        return Err(Problem::invalid_parameter(
            "cursor",
            "cursor is not one this API gave",
        ));
    }
    let org = state.registrar().org(&org).await?;
    let mut clients = state.store().org_clients(&org.id).await?;
    clients.sort_by(|a, b| a.id.as_str().cmp(b.id.as_str()));
    // A cursor is a position in this organization's clients, whatever client it names.
    let page: Vec<&Client> = clients
        .iter()
        .filter(|c| cursor.as_deref().is_none_or(|after| c.id.as_str() > after))
        .take(limit as usize + 1)
        .collect();
    let more = page.len() > limit as usize;
    let page = &page[..page.len().min(limit as usize)];
    let next_cursor = more
        .then(|| page.last().map(|c| c.id.to_string()))
        .flatten();
    Ok(json(
        StatusCode::OK,
        &api::ClientPage {
            clients: page.iter().map(|c| views::client(c)).collect(),
            next_cursor,
        },
        None,
    ))
}

/// Register a client in the organization, on its plan. The secret is in this answer only.
/// With an `Idempotency-Key`, a retry by the same admin client gets this same answer again
/// (for 24 hours) instead of a second client.
#[utoipa::path(post, path = "/admin/v1/orgs/{id}/clients", tag = "orgs",
    params(("id" = String, Path, pattern = "^[A-Za-z0-9_-]{1,64}$", description = "Organization id"),
           ("Idempotency-Key" = Option<String>, Header,
            description = "1 to 255 visible ASCII characters; a retry with the same key gets the first answer")),
    request_body = api::OrgClientInput,
    responses(
        (status = 201, description = "Created; the secret is shown this once", body = api::ClientWithSecret,
         headers(("Location" = String, description = "The new client"))),
        (status = 404, description = "No such organization (or not the caller's)", body = api::Problem, content_type = "application/problem+json"),
        (status = 422, description = "The Idempotency-Key was used for another request", body = api::Problem,
         content_type = "application/problem+json"),
        WriteErrors),
    security(("admin_token" = ["tessera-admin", "tessera-org-admin"])))]
pub(crate) async fn create_org_client(
    State(state): State<AppState>,
    OrgCaller { caller, org }: OrgCaller<Write>,
    request: Idempotent<api::OrgClientInput>,
) -> Result<Response, Problem> {
    // Unknown to the provider too: 404, not the 400 of `POST /clients` with a bad `org`.
    state.registrar().org(&org).await?;
    let input = request.input.clone().in_org(&org);
    let at = format!("/admin/v1/orgs/{org}/clients");
    register(&state, &caller, &request, &input, &at).await
}

/// Show one client of the organization.
#[utoipa::path(get, path = "/admin/v1/orgs/{id}/clients/{client_id}", tag = "orgs",
    params(("id" = String, Path, pattern = "^[A-Za-z0-9_-]{1,64}$", description = "Organization id"),
           ("client_id" = String, Path, description = "Client id")),
    responses(
        (status = 200, description = "The client", body = api::Client,
         headers(("ETag" = String, description = "Its version, for If-Match"))),
        (status = 404, description = "No such client in this organization", body = api::Problem, content_type = "application/problem+json"),
        ReadErrors),
    security(("admin_token" = ["tessera-admin-read", "tessera-org-admin"])))]
pub(crate) async fn get_org_client(
    State(state): State<AppState>,
    OrgCaller { org, .. }: OrgCaller<Read>,
    ApiPath((_, id)): OrgClientPath,
) -> Result<Response, Problem> {
    let client = member(&state, &org, &id).await?;
    Ok(json(
        StatusCode::OK,
        &views::client(&client),
        Some(&etag(&client)),
    ))
}

/// Rename, disable (`enabled: false`) or enable a client of the organization. Applies to
/// its next token request.
#[utoipa::path(patch, path = "/admin/v1/orgs/{id}/clients/{client_id}", tag = "orgs",
    params(("id" = String, Path, pattern = "^[A-Za-z0-9_-]{1,64}$", description = "Organization id"),
           ("client_id" = String, Path, description = "Client id"),
           ("If-Match" = Option<String>, Header, description = "The ETag read: change only that version")),
    request_body = api::OrgClientPatch,
    responses(
        (status = 200, description = "The changed client", body = api::Client, headers(("ETag" = String))),
        (status = 404, description = "No such client in this organization", body = api::Problem, content_type = "application/problem+json"),
        WriteErrors),
    security(("admin_token" = ["tessera-admin", "tessera-org-admin"])))]
pub(crate) async fn patch_org_client(
    State(state): State<AppState>,
    OrgCaller { caller, org }: OrgCaller<Write>,
    ApiPath((_, id)): OrgClientPath,
    if_match: IfMatch,
    ApiJson(patch): ApiJson<api::OrgClientPatch>,
) -> Result<Response, Problem> {
    if let Some(name) = &patch.name {
        check_name(name)?;
    }
    let (_one_writer, before) = member_for_write(&state, &if_match, &org, &id).await?;
    // What the patch changes, said before it is made (the event commits with it).
    let after = super::patch_changes(
        patch.name.as_ref().is_some_and(|n| *n != before.label),
        (&before.plan, &before.plan),
        (before.enabled, patch.enabled.unwrap_or(before.enabled)),
    );
    let change = audited(&state, &caller, &org, &id, &after);
    let client = change
        .registrar(state.clock())
        .patch_client(&id, patch.name.as_deref(), None, patch.enabled)
        .await?;
    change.made().await;
    in_force(&state).await;
    Ok(json(
        StatusCode::OK,
        &views::client(&client),
        Some(&etag(&client)),
    ))
}

/// Delete a client of the organization. Its tokens stop being accepted at introspection
/// at once.
#[utoipa::path(delete, path = "/admin/v1/orgs/{id}/clients/{client_id}", tag = "orgs",
    params(("id" = String, Path, pattern = "^[A-Za-z0-9_-]{1,64}$", description = "Organization id"),
           ("client_id" = String, Path, description = "Client id"),
           ("If-Match" = Option<String>, Header, description = "The ETag read: delete only that version")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 404, description = "No such client in this organization", body = api::Problem, content_type = "application/problem+json"),
        WriteErrors),
    security(("admin_token" = ["tessera-admin", "tessera-org-admin"])))]
pub(crate) async fn delete_org_client(
    State(state): State<AppState>,
    OrgCaller { caller, org }: OrgCaller<Write>,
    ApiPath((_, id)): OrgClientPath,
    if_match: IfMatch,
) -> Result<Response, Problem> {
    let (_one_writer, _) = member_for_write(&state, &if_match, &org, &id).await?;
    let change = audited(&state, &caller, &org, &id, "deleted");
    change.registrar(state.clock()).delete_client(&id).await?;
    change.made().await;
    in_force(&state).await;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// Give a client of the organization a new secret; the previous one works for
/// `grace_secs` more.
#[utoipa::path(post, path = "/admin/v1/orgs/{id}/clients/{client_id}/rotate-secret", tag = "orgs",
    params(("id" = String, Path, pattern = "^[A-Za-z0-9_-]{1,64}$", description = "Organization id"),
           ("client_id" = String, Path, description = "Client id"),
           ("If-Match" = Option<String>, Header, description = "The ETag read: rotate only that version")),
    request_body(content = api::Rotation, description = "Optional; an empty body takes the defaults"),
    responses(
        (status = 200, description = "The new secret, shown this once", body = api::ClientWithSecret,
         headers(("ETag" = String))),
        (status = 404, description = "No such client in this organization", body = api::Problem, content_type = "application/problem+json"),
        WriteErrors),
    security(("admin_token" = ["tessera-admin", "tessera-org-admin"])))]
pub(crate) async fn rotate_org_client_secret(
    State(state): State<AppState>,
    OrgCaller { caller, org }: OrgCaller<Write>,
    ApiPath((_, id)): OrgClientPath,
    if_match: IfMatch,
    JsonOrDefault(rotation): JsonOrDefault<api::Rotation>,
) -> Result<Response, Problem> {
    let grace = rotation.grace_secs.unwrap_or(86_400);
    if !(0..=MAX_GRACE).contains(&grace) {
        return Err(Problem::invalid_field(
            "grace_secs",
            format!("grace_secs must be between 0 and {MAX_GRACE}"),
        ));
    }
    let (_one_writer, _) = member_for_write(&state, &if_match, &org, &id).await?;
    let change = audited(
        &state,
        &caller,
        &org,
        &id,
        &format!("secret rotated, previous valid for {grace} s"),
    );
    let (client, secret) = change
        .registrar(state.clock())
        .rotate_secret(state.secrets(), &id, grace)
        .await?;
    change.made().await;
    in_force(&state).await;
    Ok(json(
        StatusCode::OK,
        &views::with_secret(&client, Some(secret)),
        Some(&etag(&client)),
    ))
}
