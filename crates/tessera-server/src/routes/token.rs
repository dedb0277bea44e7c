//! The token endpoint: the client credentials grant (RFC 6749 section 4.4).

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use tessera_proto::claims::Audience;
use tessera_proto::token::TokenType;
use tessera_proto::{form, AccessTokenClaims, GrantType, ScopeSet, TokenRequest, TokenResponse};

use crate::error::{OAuthError, NO_STORE};
use crate::{auth, secrets, AppState};

pub(crate) fn router() -> Router<AppState> {
    Router::new().route("/connect/token", post(token))
}

/// `POST /connect/token` (RFC 6749 sections 4.4.2 and 4.4.3).
async fn token(
    State(state): State<AppState>,
    uri: Uri,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    match issue(&state, &uri, &headers, body) {
        Ok(response) => (StatusCode::OK, NO_STORE, Json(response)).into_response(),
        Err(error) => {
            tracing::debug!(error = %error.code(), "token request refused");
            error.into_response()
        }
    }
}

fn issue(
    state: &AppState,
    uri: &Uri,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<TokenResponse, OAuthError> {
    let config = state.config();
    // RFC 6749 2.3.1 and 3.2: parameters go in the body, never in the URI.
    if let Some(query) = uri.query() {
        let names = form::parse(query).unwrap_or_default();
        if names.iter().any(|(name, _)| {
            matches!(
                name.as_str(),
                "client_id" | "client_secret" | "grant_type" | "scope"
            )
        }) {
            return Err(OAuthError::invalid_request(
                "token request parameters must be sent in the body, not the query string",
            ));
        }
    }
    let is_form = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| {
            v.trim()
                .eq_ignore_ascii_case("application/x-www-form-urlencoded")
        });
    if !is_form {
        return Err(OAuthError::invalid_request(
            "Content-Type must be application/x-www-form-urlencoded",
        ));
    }
    let body = body.map_err(|rejection| match rejection.status() {
        StatusCode::PAYLOAD_TOO_LARGE => OAuthError::too_large(config.body_limit),
        _ => OAuthError::invalid_request("could not read the request body"),
    })?;
    let body = std::str::from_utf8(&body)
        .map_err(|_| OAuthError::invalid_request("request body is not UTF-8"))?;
    let pairs = form::parse(body).map_err(|e| OAuthError::invalid_request(e.to_string()))?;
    let request = TokenRequest::from_form(&pairs)
        .map_err(|e| OAuthError::invalid_request(e.error_description.unwrap_or_default()))?;

    let presented = auth::presented(headers, &request, &config.realm)?;
    let registry = state.registry();
    let now = tessera_store::now();
    let client = auth::authenticate(&registry, state.secrets(), &presented, now, &config.realm)?;

    if let GrantType::Other(grant) = &request.grant_type {
        return Err(OAuthError::unsupported_grant_type(format!(
            "grant_type {grant} is not supported; use client_credentials"
        )));
    }
    let scope = request
        .scope
        .as_deref()
        .ok_or_else(|| OAuthError::invalid_scope("scope is required"))?;
    let scopes = ScopeSet::parse(scope).map_err(|_| {
        OAuthError::invalid_scope("scope must be scope names separated by single spaces")
    })?;
    let refused = scopes.outside(&client.plan.scopes);
    if !refused.is_empty() {
        let names: Vec<&str> = refused.iter().map(|s| s.as_str()).collect();
        return Err(OAuthError::invalid_scope(format!(
            "not in the client's plan: {}",
            names.join(" ")
        )));
    }

    let key = registry
        .keys
        .signing_key(now)
        .ok_or_else(|| OAuthError::unavailable("no active signing key"))?;
    let expires_in = u64::from(client.plan.token_ttl);
    let iat = now.max(0) as u64;
    let client_id = presented.client_id.as_str();
    let claims = AccessTokenClaims {
        iss: config.issuer.clone(),
        sub: client_id.to_owned(),
        client_id: client_id.to_owned(),
        aud: Audience::Many(scopes.iter().map(|s| s.to_string()).collect()),
        scope: scopes.to_string(),
        iat,
        exp: iat + expires_in,
        nbf: None,
        jti: secrets::random_token(16),
        app_only: true,
    };
    let access_token = key.sign_jwt(&claims);
    tracing::debug!(client_id, scope = %claims.scope, jti = %claims.jti, "token issued");
    Ok(TokenResponse {
        access_token,
        token_type: TokenType::Bearer,
        expires_in,
        scope: scopes,
    })
}
