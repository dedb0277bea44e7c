//! Token introspection (RFC 7662): a caller that authenticates as a client learns whether a
//! token of its own is active and what it carries; a client whose plan has `introspect_any`
//! learns it of any token (RFC 7662 section 4).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::json;
use tessera_proto::{AccessTokenClaims, ClientId, ClientSecret};
use tessera_store::Plan;

use crate::error::{OAuthError, NO_STORE};
use crate::grant::{Assertion, Credentials};
use crate::limits::Slot;
use crate::mtls::peer_certificate;
use crate::registry::Registry;
use crate::routes::{authorization, client_ip, read_form, single, split};
use crate::AppState;

pub(crate) fn router() -> Router<AppState> {
    Router::new().route("/connect/introspect", post(introspect))
}

/// `POST /connect/introspect` (RFC 7662 section 2).
async fn introspect(State(state): State<AppState>, request: Request) -> Response {
    let (parts, body) = split(request, state.config().body_limit).await;
    let slot = match state.in_flight().admit() {
        Ok(slot) => slot,
        Err(busy) => return OAuthError::from(busy).into_response(),
    };
    match answer(&state, &parts, body, &slot).await {
        Ok(body) => (NO_STORE, Json(body)).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn answer(
    state: &AppState,
    parts: &Parts,
    body: Result<Bytes, OAuthError>,
    slot: &Slot,
) -> Result<serde_json::Value, OAuthError> {
    if state.too_stale() {
        return Err(OAuthError::store_unavailable(
            "the registry is out of date: the store does not answer; retry later",
        ));
    }
    let request = TokenRequestOfClient::read(state, parts, body, slot).await?;
    let Some(claims) = active_claims(state, &request.registry, &request.token) else {
        return Ok(json!({ "active": false }));
    };
    // RFC 7662 section 4: a client learns of its own tokens; of others' only when its plan
    // grants it (an API checking the tokens it receives). To anyone else they are inactive.
    let may_see = claims.client_id == request.caller || request.plan.introspect_any;
    if !may_see {
        return Ok(json!({ "active": false }));
    }
    // RFC 9449 section 6.2 and RFC 8705 section 3.2: a bound token says so, with its `cnf`.
    let dpop = claims.cnf.as_ref().is_some_and(|c| c.jkt.is_some());
    let mut answer = json!({
        "active": true,
        "token_type": if dpop { "DPoP" } else { "Bearer" },
        "scope": claims.scope,
        "client_id": claims.client_id,
        "sub": claims.sub,
        "aud": claims.aud,
        "iss": claims.iss,
        "iat": claims.iat,
        "exp": claims.exp,
        "jti": claims.jti,
        "app_only": claims.app_only,
    });
    if let Some(cnf) = &claims.cnf {
        answer["cnf"] = json!(cnf);
    }
    Ok(answer)
}

/// An introspection or revocation request (RFC 7662 2.1, RFC 7009 2.1): a `token`
/// parameter, sent by an authenticated client.
pub(crate) struct TokenRequestOfClient {
    /// The registry the caller was authenticated against.
    pub registry: Arc<Registry>,
    /// The authenticated caller's client id.
    pub caller: String,
    /// The caller's plan.
    pub plan: Arc<Plan>,
    /// The `token` parameter.
    pub token: String,
}

impl TokenRequestOfClient {
    /// Reads the form and authenticates the caller as the token endpoint does (with the
    /// request's in-flight `slot` to lend while it waits on a key fetch).
    pub(crate) async fn read(
        state: &AppState,
        parts: &Parts,
        body: Result<Bytes, OAuthError>,
        slot: &Slot,
    ) -> Result<Self, OAuthError> {
        let names = [
            "token",
            "token_type_hint",
            "client_id",
            "client_secret",
            "client_assertion",
            "client_assertion_type",
        ];
        let form = read_form(parts, body, &names)?;
        let pairs = form.pairs()?;
        single(&pairs, "token_type_hint")?;
        let token = single(&pairs, "token")?
            .ok_or_else(|| OAuthError::invalid_request("missing parameter token"))?
            .to_owned();
        let id = single(&pairs, "client_id")?
            .map(|id| {
                ClientId::parse(id)
                    .ok_or_else(|| OAuthError::invalid_request("malformed client_id"))
            })
            .transpose()?;
        let secret = single(&pairs, "client_secret")?.map(ClientSecret::new);
        let assertion = single(&pairs, "client_assertion")?;
        let assertion_type = single(&pairs, "client_assertion_type")?;
        let certificate = peer_certificate(state, parts);
        let credentials = Credentials {
            authorization: authorization(&parts.headers),
            client_id: id.as_ref(),
            client_secret: secret.as_ref(),
            assertion: assertion.map(|jwt| Assertion {
                kind: assertion_type,
                jwt,
            }),
            certificate: certificate.as_ref(),
        };
        let authentication = state
            .grantor()
            .authenticate(credentials, client_ip(state, parts), slot)
            .await;
        let client = authentication
            .outcome
            .map_err(|refusal| OAuthError::refused(refusal, &state.config().realm))?;
        if crate::telemetry::on() {
            crate::telemetry::record_client(&parts.extensions, &authentication.presented_id);
        }
        Ok(Self {
            registry: state.registry(),
            caller: authentication.presented_id,
            plan: client.plan,
            token,
        })
    }
}

/// The claims of a token this server issued that is still active: signed by one of its keys,
/// of its issuer, not expired, not revoked, and of a client that still exists and is
/// enabled (disabling or deleting a client ends its tokens here, RFC 7662 2.2).
pub(crate) fn active_claims(
    state: &AppState,
    registry: &Registry,
    token: &str,
) -> Option<AccessTokenClaims> {
    let claims = registry.keys.verify(token)?;
    let now = state.clock().now().max(0) as u64;
    let valid = claims.iss == state.issuer()
        && claims.exp > now
        && claims.nbf.is_none_or(|nbf| nbf <= now)
        && !state.live().is_revoked(&claims.jti)
        && state
            .live()
            .clients()
            .with(&claims.client_id, |client| client.enabled)
            .unwrap_or(false);
    valid.then_some(claims)
}
