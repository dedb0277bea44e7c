//! `/admin/v1/clients`: registered clients, their secrets (shown once) and their usage.

use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use tessera_proto::admin as api;
use tessera_proto::ClientId;
use tessera_store::{AuthMethod, Client};

use super::auth::{Caller, Read, Write};
use super::extract::{ApiJson, ApiPath, IfMatch, JsonOrDefault, Query};
use super::idempotency::Idempotent;
use super::responses::{ReadErrors, WriteErrors};
use super::{etag, in_force, json, usage_within};
use crate::audit;
use crate::control::problem::Problem;
use crate::registrar::{views, RegistrarError};
use crate::AppState;

/// The longest grace period of a rotated secret: a year.
pub(crate) const MAX_GRACE: i64 = 365 * 86_400;
/// The most clients one page holds.
pub(crate) const MAX_PAGE: u32 = 1000;

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/clients", get(list_clients).post(create_client))
        .route(
            "/clients/{id}",
            get(get_client).patch(patch_client).delete(delete_client),
        )
        .route("/clients/{id}/rotate-secret", post(rotate_secret))
        .route("/clients/{id}/usage", get(client_usage))
        .route("/clients/{id}/refusals", get(client_refusals))
        .route("/rate-limited", get(rate_limited))
}

/// A client's last ten refusals with their error codes, as this instance answered them
/// (kept in memory; other instances keep their own).
#[utoipa::path(get, path = "/admin/v1/clients/{id}/refusals", tag = "clients",
    params(("id" = String, Path, description = "Client id")),
    responses(
        (status = 200, description = "Newest first", body = api::RefusalList),
        (status = 404, description = "No such client", body = api::Problem, content_type = "application/problem+json"),
        ReadErrors),
    security(("admin_token" = ["tessera-admin-read"])))]
pub(crate) async fn client_refusals(
    State(state): State<AppState>,
    _caller: Caller<Read>,
    ApiPath(id): ApiPath<String>,
) -> Result<Response, Problem> {
    let client = load(&state, &id).await?;
    let refusals = state
        .refusals()
        .of(client.id.as_str())
        .into_iter()
        .map(|(at, code)| api::Refusal {
            at,
            error: code.as_str().to_owned(),
        })
        .collect();
    Ok(json(StatusCode::OK, &api::RefusalList { refusals }, None))
}

/// The clients this instance refused for their plan's rate within the last `within`
/// seconds (1 to 86400, default 300).
#[utoipa::path(get, path = "/admin/v1/rate-limited", tag = "clients",
    params(("within" = Option<u32>, Query, description = "Seconds back, 1 to 86400 (default 300)",
            minimum = 1, maximum = 86400)),
    responses((status = 200, description = "The most recently refused first", body = api::RateLimitedList), ReadErrors),
    security(("admin_token" = ["tessera-admin-read"])))]
pub(crate) async fn rate_limited(
    State(state): State<AppState>,
    _caller: Caller<Read>,
    query: Query,
) -> Result<Response, Problem> {
    let within = query.number("within", 300, 1..=86_400)?;
    let since = state.clock().now() - within;
    let clients = state
        .refusals()
        .rate_limited_since(since)
        .into_iter()
        .map(|(client_id, refused, last_at)| api::RateLimited {
            client_id,
            refused,
            last_at,
        })
        .collect();
    Ok(json(
        StatusCode::OK,
        &api::RateLimitedList { clients },
        None,
    ))
}

pub(crate) fn check_name(name: &str) -> Result<(), Problem> {
    if name.chars().count() > 256 || name.chars().any(char::is_control) {
        return Err(Problem::invalid_field(
            "name",
            "name must be at most 256 characters, none of them control characters",
        ));
    }
    Ok(())
}

/// 201 with the new client's `Location` (under `at`, its collection's path): with its
/// `ETag` when just made, or marked `Idempotent-Replayed` when it is an earlier request's
/// answer again.
fn created(at: &str, answer: &api::ClientWithSecret, tag: Option<&str>) -> Response {
    let mut response = json(StatusCode::CREATED, answer, tag);
    let location = format!("{at}/{}", answer.client.client_id);
    if let Ok(location) = HeaderValue::from_str(&location) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    if tag.is_none() {
        response.headers_mut().insert(
            header::HeaderName::from_static("idempotent-replayed"),
            HeaderValue::from_static("true"),
        );
    }
    response
}

async fn load(state: &AppState, id: &str) -> Result<Client, Problem> {
    state.registrar().client(id).await.map_err(Problem::from)
}

/// The client as it is before a change, read under this instance's write lock (held until
/// the guard is dropped) and checked against `If-Match`.
async fn load_for_write<'s>(
    state: &'s AppState,
    if_match: &IfMatch,
    id: &str,
) -> Result<(tokio::sync::MutexGuard<'s, ()>, Client), Problem> {
    let guard = state.admin_guard().writes.lock().await;
    let before = load(state, id).await?;
    if_match.check(Some(&etag(&before)))?;
    Ok((guard, before))
}

/// List clients, a page at a time, by client id.
#[utoipa::path(get, path = "/admin/v1/clients", tag = "clients",
    params(("plan" = Option<String>, Query, description = "Only the clients of this plan"),
           ("cursor" = Option<String>, Query, description = "next_cursor of the previous page"),
           ("limit" = Option<u32>, Query, minimum = 1, maximum = 1000,
            description = "Clients per page, 1 to 1000 (default 100)")),
    responses((status = 200, description = "A page of clients", body = api::ClientPage), ReadErrors),
    security(("admin_token" = ["tessera-admin-read"])))]
pub(crate) async fn list_clients(
    State(state): State<AppState>,
    _caller: Caller<Read>,
    query: Query,
) -> Result<Response, Problem> {
    let limit = query.number("limit", 100, 1..=MAX_PAGE)?;
    let cursor = match query.single("cursor")? {
        None => None,
        Some(c) => Some(ClientId::parse(c).ok_or_else(|| {
            Problem::invalid_parameter("cursor", "cursor is not one this API gave")
        })?),
    };
    let plan = query.single("plan")?;
    // One more than asked tells whether a next page exists.
    let mut page = state
        .store()
        .clients_page(plan, cursor.as_ref().map(ClientId::as_str), limit + 1)
        .await?;
    let more = page.len() > limit as usize;
    page.truncate(limit as usize);
    let next_cursor = more
        .then(|| page.last().map(|c| c.id.to_string()))
        .flatten();
    let clients = page.iter().map(views::client).collect();
    Ok(json(
        StatusCode::OK,
        &api::ClientPage {
            clients,
            next_cursor,
        },
        None,
    ))
}

/// Register a client. The secret is in this answer only. With an `Idempotency-Key`, a
/// retry gets this same answer again (for 24 hours) instead of a second client.
#[utoipa::path(post, path = "/admin/v1/clients", tag = "clients",
    params(("Idempotency-Key" = Option<String>, Header,
            description = "1 to 255 visible ASCII characters; a retry with the same key gets the first answer")),
    request_body = api::ClientInput,
    responses(
        (status = 201, description = "Created; the secret is shown this once", body = api::ClientWithSecret,
         headers(("Location" = String, description = "The new client"))),
        (status = 422, description = "The Idempotency-Key was used for another request", body = api::Problem,
         content_type = "application/problem+json"),
        WriteErrors),
    security(("admin_token" = ["tessera-admin"])))]
pub(crate) async fn create_client(
    State(state): State<AppState>,
    caller: Caller<Write>,
    request: Idempotent<api::ClientInput>,
) -> Result<Response, Problem> {
    register(
        &state,
        &caller,
        &request,
        &request.input,
        "/admin/v1/clients",
    )
    .await
}

/// Registers the client `input` describes, for `caller`, answering a retry of `request`
/// (its `Idempotency-Key`) with the first answer; `at` is the path of the collection it
/// joins. The client creation of `POST /admin/v1/clients` and of an organization's
/// `POST /admin/v1/orgs/{id}/clients`.
pub(crate) async fn register<R, T>(
    state: &AppState,
    caller: &Caller<R>,
    request: &Idempotent<T>,
    input: &api::ClientInput,
    at: &str,
) -> Result<Response, Problem> {
    check_name(&input.name)?;
    let method = match input.token_endpoint_auth_method.as_deref() {
        None => AuthMethod::ClientSecretBasic,
        Some(name) => AuthMethod::parse(name).ok_or_else(|| {
            Problem::invalid_field(
                "token_endpoint_auth_method",
                "use client_secret_basic, client_secret_post, tls_client_auth or \
                 self_signed_tls_client_auth",
            )
        })?,
    };
    let credential = views::credential(input, method)?;
    if let Some(first) = request.earlier(state, &caller.client_id).await? {
        return Ok(created(at, &first, None));
    }
    let placement = state
        .registrar()
        .placement(&input.plan, input.org.as_deref())
        .await?;
    let (mut client, secret) = match credential {
        Some(credential) => (
            state
                .registrar()
                .new_keyed_client(&placement.plan, &input.name, method, credential)?,
            None,
        ),
        None if method.is_keyed() => {
            return Err(Problem::invalid_field(
                "token_endpoint_auth_method",
                "tls_client_auth needs a tls_client_auth_* field; \
                 self_signed_tls_client_auth needs jwks; private_key_jwt needs jwks or \
                 jwks_uri",
            ))
        }
        None => {
            let (client, secret) =
                state
                    .registrar()
                    .new_client(state.secrets(), &placement.plan, &input.name, method);
            (client, Some(secret))
        }
    };
    placement.apply(&mut client);
    let answer = views::with_secret(&client, secret);
    let remembered = request.remember(state, &caller.client_id, &answer);
    let (object, action) = match &client.org {
        Some(org) => (
            format!("org:{org}/client:{}", client.id),
            format!("created in organization {org} on plan {}", client.plan),
        ),
        None => (
            format!("client:{}", client.id),
            format!("created on plan {}", client.plan),
        ),
    };
    let change = audit::change(state, caller, &object, &action);
    let earlier = change
        .store()
        .insert_clients_once(std::slice::from_ref(&client), remembered.as_ref())
        .await
        .map_err(RegistrarError::from)?;
    if let Some(first) = earlier {
        // A retry that raced the first try here: no change, no event.
        return Ok(created(at, &request.replay(state, &first)?, None));
    }
    change.made().await;
    in_force(state).await;
    Ok(created(at, &answer, Some(&etag(&client))))
}

/// Show one client.
#[utoipa::path(get, path = "/admin/v1/clients/{id}", tag = "clients",
    params(("id" = String, Path, description = "Client id")),
    responses(
        (status = 200, description = "The client", body = api::Client,
         headers(("ETag" = String, description = "Its version, for If-Match"))),
        (status = 404, description = "No such client", body = api::Problem, content_type = "application/problem+json"),
        ReadErrors),
    security(("admin_token" = ["tessera-admin-read"])))]
pub(crate) async fn get_client(
    State(state): State<AppState>,
    _caller: Caller<Read>,
    ApiPath(id): ApiPath<String>,
) -> Result<Response, Problem> {
    let client = load(&state, &id).await?;
    Ok(json(
        StatusCode::OK,
        &views::client(&client),
        Some(&etag(&client)),
    ))
}

/// Change a client's name, plan or whether it is enabled. Applies to its next token
/// request.
#[utoipa::path(patch, path = "/admin/v1/clients/{id}", tag = "clients",
    params(("id" = String, Path, description = "Client id"),
           ("If-Match" = Option<String>, Header, description = "The ETag read: change only that version")),
    request_body = api::ClientPatch,
    responses(
        (status = 200, description = "The changed client", body = api::Client, headers(("ETag" = String))),
        (status = 404, description = "No such client", body = api::Problem, content_type = "application/problem+json"),
        WriteErrors),
    security(("admin_token" = ["tessera-admin"])))]
pub(crate) async fn patch_client(
    State(state): State<AppState>,
    caller: Caller<Write>,
    ApiPath(id): ApiPath<String>,
    if_match: IfMatch,
    ApiJson(patch): ApiJson<api::ClientPatch>,
) -> Result<Response, Problem> {
    if let Some(name) = &patch.name {
        check_name(name)?;
    }
    let (_one_writer, before) = load_for_write(&state, &if_match, &id).await?;
    // What the patch changes, said before it is made (the event commits with it): each
    // field given replaces the one read under the write lock.
    let after = super::patch_changes(
        patch.name.as_ref().is_some_and(|n| *n != before.label),
        (&before.plan, patch.plan.as_deref().unwrap_or(&before.plan)),
        (before.enabled, patch.enabled.unwrap_or(before.enabled)),
    );
    let change = audit::change(&state, &caller, &format!("client:{id}"), &after);
    let client = change
        .registrar(state.clock())
        .patch_client(
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
        &views::client(&client),
        Some(&etag(&client)),
    ))
}

/// Delete a client. Its tokens stop being accepted at introspection at once.
#[utoipa::path(delete, path = "/admin/v1/clients/{id}", tag = "clients",
    params(("id" = String, Path, description = "Client id"),
           ("If-Match" = Option<String>, Header, description = "The ETag read: delete only that version")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 404, description = "No such client", body = api::Problem, content_type = "application/problem+json"),
        WriteErrors),
    security(("admin_token" = ["tessera-admin"])))]
pub(crate) async fn delete_client(
    State(state): State<AppState>,
    caller: Caller<Write>,
    ApiPath(id): ApiPath<String>,
    if_match: IfMatch,
) -> Result<Response, Problem> {
    let (_one_writer, _) = load_for_write(&state, &if_match, &id).await?;
    let change = audit::change(&state, &caller, &format!("client:{id}"), "deleted");
    change.registrar(state.clock()).delete_client(&id).await?;
    change.made().await;
    in_force(&state).await;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// Give a client a new secret; the previous one works for `grace_secs` more.
#[utoipa::path(post, path = "/admin/v1/clients/{id}/rotate-secret", tag = "clients",
    params(("id" = String, Path, description = "Client id")),
    request_body(content = api::Rotation, description = "Optional; an empty body takes the defaults"),
    responses(
        (status = 200, description = "The new secret, shown this once", body = api::ClientWithSecret,
         headers(("ETag" = String))),
        (status = 404, description = "No such client", body = api::Problem, content_type = "application/problem+json"),
        WriteErrors),
    security(("admin_token" = ["tessera-admin"])))]
pub(crate) async fn rotate_secret(
    State(state): State<AppState>,
    caller: Caller<Write>,
    ApiPath(id): ApiPath<String>,
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
    let (_one_writer, _) = load_for_write(&state, &if_match, &id).await?;
    let change = audit::change(
        &state,
        &caller,
        &format!("client:{id}"),
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

/// Token requests of one client per UTC day.
#[utoipa::path(get, path = "/admin/v1/clients/{id}/usage", tag = "clients",
    params(("id" = String, Path, description = "Client id"),
           ("from" = Option<String>, Query, format = Date, description = "First day, YYYY-MM-DD"),
           ("to" = Option<String>, Query, format = Date, description = "Last day, YYYY-MM-DD")),
    responses(
        (status = 200, description = "Tokens issued and refused per day, and requests to each API as the APIs reported them", body = api::Usage),
        (status = 404, description = "No such client", body = api::Problem, content_type = "application/problem+json"),
        ReadErrors),
    security(("admin_token" = ["tessera-admin-read"])))]
pub(crate) async fn client_usage(
    State(state): State<AppState>,
    _caller: Caller<Read>,
    ApiPath(id): ApiPath<String>,
    query: Query,
) -> Result<Response, Problem> {
    let range = query.day_range()?;
    let client = load(&state, &id).await?;
    let usage = state.store().usage(&client.id).await?;
    let api_usage = state.store().api_usage(&client.id).await?;
    Ok(json(
        StatusCode::OK,
        &usage_within(range, usage, api_usage),
        None,
    ))
}
