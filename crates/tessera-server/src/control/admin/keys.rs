//! `/admin/v1/keys`: the signing keys, and rotation to a new one.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use tessera_proto::admin as api;
use tessera_proto::clock::rfc3339;
use tessera_proto::Algorithm;

use super::auth::{Caller, Read, Write};
use super::extract::JsonOrDefault;
use super::responses::{ReadErrors, WriteErrors};
use super::{in_force, json};
use crate::audit;
use crate::control::problem::Problem;
use crate::registrar::views;
use crate::AppState;

/// The longest delay between a key's publication and its first signature: a year.
const MAX_ACTIVATE_IN: i64 = 365 * 86_400;

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/keys", get(list_keys))
        .route("/keys/rotate", post(rotate_keys))
}

/// List the signing keys, oldest activation first.
#[utoipa::path(get, path = "/admin/v1/keys", tag = "keys",
    responses((status = 200, description = "The signing keys", body = api::KeyList), ReadErrors),
    security(("admin_token" = ["tessera-admin-read"])))]
pub(crate) async fn list_keys(
    State(state): State<AppState>,
    _caller: Caller<Read>,
) -> Result<Response, Problem> {
    let keys = state.store().keys().await?;
    let keys = views::keys(&keys, state.clock().now());
    Ok(json(StatusCode::OK, &api::KeyList { keys }, None))
}

/// Add a key that is published now and signs after `activate_in_secs`; keys no longer
/// published are dropped.
#[utoipa::path(post, path = "/admin/v1/keys/rotate", tag = "keys",
    request_body(content = api::KeyRotation, description = "Optional; an empty body takes the defaults"),
    responses((status = 201, description = "The new key", body = api::Key), WriteErrors),
    security(("admin_token" = ["tessera-admin"])))]
pub(crate) async fn rotate_keys(
    State(state): State<AppState>,
    caller: Caller<Write>,
    JsonOrDefault(rotation): JsonOrDefault<api::KeyRotation>,
) -> Result<Response, Problem> {
    let activate_in = rotation.activate_in_secs.unwrap_or(600);
    if !(0..=MAX_ACTIVATE_IN).contains(&activate_in) {
        return Err(Problem::invalid_field(
            "activate_in_secs",
            format!("activate_in_secs must be between 0 and {MAX_ACTIVATE_IN}"),
        ));
    }
    let alg = match rotation.alg.as_deref() {
        None => state.config().signing_alg,
        Some(name) => name.parse::<Algorithm>().map_err(|_| {
            Problem::invalid_field("alg", "alg must be EdDSA, ES256, RS256 or PS256")
        })?,
    };
    let _one_writer = state.admin_guard().writes.lock().await;
    // The key's id is made with it: the store names it in the event (an empty object).
    let activates_at = state.clock().now() + activate_in.max(0);
    let change = audit::change(
        &state,
        &caller,
        "",
        &format!("created, signs from {}", rfc3339(activates_at)),
    );
    let key = change
        .registrar(state.clock())
        .rotate_keys(state.secrets(), alg, activate_in)
        .await?;
    change.made_as(&format!("key:{}", key.kid)).await;
    in_force(&state).await;
    let all = state.store().keys().await?;
    let view = views::keys(&all, state.clock().now())
        .into_iter()
        .find(|k| k.kid == key.kid)
        .ok_or_else(|| Problem::unavailable(&"the new key was not read back"))?;
    Ok(json(StatusCode::CREATED, &view, None))
}
