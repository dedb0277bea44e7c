//! Token revocation (RFC 7009): a client revokes its own tokens. A revoked `jti` is
//! remembered until the token's `exp`; introspection then answers inactive and token reuse
//! never hands it out again.

use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use tessera_store::Revoked;

use crate::audit::{self, Subject};
use crate::error::{OAuthError, NO_STORE};
use crate::routes::introspection::{active_claims, TokenRequestOfClient};
use crate::routes::{client_ip, split};
use crate::AppState;

/// How long a revocation waits for the store before answering 503.
const STORE_WRITE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

pub(crate) fn router() -> Router<AppState> {
    Router::new().route("/connect/revocation", post(revoke))
}

/// `POST /connect/revocation` (RFC 7009 section 2.1).
async fn revoke(State(state): State<AppState>, request: Request) -> Response {
    let (parts, body) = split(request, state.config().body_limit).await;
    let slot = match state.in_flight().admit() {
        Ok(slot) => slot,
        Err(busy) => return OAuthError::from(busy).into_response(),
    };
    match run(&state, &parts, body, &slot).await {
        Ok(()) => (StatusCode::OK, NO_STORE).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn run(
    state: &AppState,
    parts: &Parts,
    body: Result<Bytes, OAuthError>,
    slot: &crate::limits::Slot,
) -> Result<(), OAuthError> {
    let TokenRequestOfClient {
        registry,
        caller,
        plan,
        token,
    } = TokenRequestOfClient::read(state, parts, body, slot).await?;
    // RFC 7009 2.2: an invalid, expired or unknown token is answered with 200 all the same.
    let Some(claims) = active_claims(state, &registry, &token) else {
        return Ok(());
    };
    // Another client's token is left alone, with the same 200 as an invalid one: an error
    // here would tell the caller that the token is active (RFC 7662 section 4's concern).
    if claims.client_id != caller {
        return Ok(());
    }
    let revoked = Revoked {
        jti: claims.jti.clone(),
        client_id: claims.client_id,
        exp: claims.exp as i64,
    };
    // A store that does not answer gets a prompt 503, not a wait for the pool's timeout.
    match tokio::time::timeout(STORE_WRITE_TIMEOUT, state.store().revoke(&revoked)).await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => {
            // The store's watch logs the failure once per episode.
            tracing::debug!(%error, "recording a revocation failed");
            return Err(OAuthError::store_unavailable(
                "the revocation could not be recorded; retry later",
            ));
        }
        Err(_) => {
            tracing::error!("recording a revocation timed out: the store does not answer");
            return Err(OAuthError::store_unavailable(
                "the revocation could not be recorded; retry later",
            ));
        }
    }
    state.reuse().forget_jti(&claims.jti);
    state.live().add_revoked(&revoked.jti, revoked.exp);
    let subject = Subject {
        client_id: &caller,
        plan: &plan.name,
        scope: &claims.scope,
        source: client_ip(state, parts),
    };
    audit::revoked(&subject, &claims.jti);
    Ok(())
}
