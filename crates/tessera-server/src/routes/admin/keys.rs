//! `/admin/v1/keys`: the signing keys, and rotation to a new one.

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use serde::{Deserialize, Serialize};
use tessera_proto::clock::rfc3339;
use tessera_proto::Algorithm;
use tessera_store::{SigningKey, Timestamp};

use super::auth::{Caller, Read, Write};
use super::{in_force, json, read_json, run};
use crate::audit;
use crate::error::problem::Problem;
use crate::routes::openapi::{ReadErrors, WriteErrors};
use crate::AppState;

/// The longest delay between a key's publication and its first signature: a year.
const MAX_ACTIVATE_IN: i64 = 365 * 86_400;

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/keys", get(list_keys))
        .route("/keys/rotate", post(rotate_keys))
}

/// A signing key; never its private half.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct KeyView {
    /// The key identifier (`kid`).
    kid: String,
    /// `EdDSA`, `ES256`, `RS256` or `PS256`.
    alg: String,
    /// `signing` (signs now), `next` (published, signs later) or `retired` (published
    /// while tokens it signed may live).
    status: &'static str,
    /// When it was created and first published (RFC 3339).
    created_at: String,
    /// From when it signs (RFC 3339).
    activates_at: String,
    /// When it stops signing: the next key's activation (RFC 3339), if one is scheduled.
    retires_at: Option<String>,
    /// When it leaves the JWK Set: a day after it retires, when the last token it signed
    /// has expired (RFC 3339).
    unpublished_at: Option<String>,
}

/// All keys.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct KeyList {
    keys: Vec<KeyView>,
}

/// A rotation.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct KeyRotation {
    /// Seconds between publication and first signature, 0 to 31536000 (default 600), so
    /// that verifiers learn the key before they meet it.
    #[schema(minimum = 0, maximum = 31_536_000)]
    activate_in_secs: Option<i64>,
    /// `EdDSA`, `ES256`, `RS256` or `PS256` (default: the server's signing algorithm).
    #[schema(pattern = "^(EdDSA|ES256|RS256|PS256)$")]
    alg: Option<String>,
}

/// The status of each key at `now`: the newest active one signs.
fn views(keys: &[SigningKey], now: Timestamp) -> Vec<KeyView> {
    let signing = keys.iter().rev().find(|k| k.activates_at <= now);
    let keep = i64::from(crate::registrar::MAX_TOKEN_TTL);
    keys.iter()
        .enumerate()
        .map(|(i, k)| (k, keys.get(i + 1).map(|next| next.activates_at)))
        .map(|(k, retires)| KeyView {
            retires_at: retires.map(rfc3339),
            unpublished_at: retires.map(|t| rfc3339(t + keep)),
            kid: k.kid.clone(),
            alg: k.alg.as_str().to_owned(),
            status: if signing.is_some_and(|s| s.kid == k.kid) {
                "signing"
            } else if k.activates_at > now {
                "next"
            } else {
                "retired"
            },
            created_at: rfc3339(k.created_at),
            activates_at: rfc3339(k.activates_at),
        })
        .collect()
}

/// List the signing keys, oldest activation first.
#[utoipa::path(get, path = "/admin/v1/keys", tag = "keys",
    responses((status = 200, description = "The signing keys", body = KeyList), ReadErrors),
    security(("admin_token" = ["tessera-admin-read"])))]
pub(crate) async fn list_keys(State(state): State<AppState>, _caller: Caller<Read>) -> Response {
    run(async {
        let keys = state.store().keys().await?;
        let keys = views(&keys, state.clock().now());
        Ok(json(StatusCode::OK, &KeyList { keys }, None))
    })
    .await
}

/// Add a key that is published now and signs after `activate_in_secs`; keys no longer
/// published are dropped.
#[utoipa::path(post, path = "/admin/v1/keys/rotate", tag = "keys",
    request_body(content = KeyRotation, description = "Optional; an empty body takes the defaults"),
    responses((status = 201, description = "The new key", body = KeyView), WriteErrors),
    security(("admin_token" = ["tessera-admin"])))]
pub(crate) async fn rotate_keys(
    State(state): State<AppState>,
    caller: Caller<Write>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    run(async {
        let rotation: KeyRotation = read_json(&headers, body, true).await?;
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
        let key = state
            .registrar()
            .rotate_keys(state.secrets(), alg, activate_in)
            .await?;
        in_force(&state).await;
        audit::admin_change(
            &caller.client_id,
            &format!("key:{}", key.kid),
            &format!("created, signs from {}", rfc3339(key.activates_at)),
        );
        let all = state.store().keys().await?;
        let view = views(&all, state.clock().now())
            .into_iter()
            .find(|k| k.kid == key.kid)
            .ok_or_else(|| Problem::unavailable(&"the new key was not read back"))?;
        Ok(json(StatusCode::CREATED, &view, None))
    })
    .await
}
