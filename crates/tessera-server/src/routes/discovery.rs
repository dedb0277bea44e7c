//! Discovery: the published keys (RFC 7517 section 5) and the server metadata (RFC 8414).

use axum::extract::State;
use axum::http::{header, HeaderValue};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use tessera_proto::{AuthorizationServerMetadata, JwkSet};

use crate::AppState;

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/.well-known/jwks.json", get(jwks))
        .route("/.well-known/oauth-authorization-server", get(metadata))
        .route("/.well-known/openid-configuration", get(metadata))
}

/// The public keys verifiers need: upcoming, current and recently retired ones.
async fn jwks(State(state): State<AppState>) -> impl IntoResponse {
    let registry = state.registry();
    let now = state.clock().now();
    let keys = registry
        .keys
        .published(now)
        .into_iter()
        .map(|k| k.jwk.clone())
        .collect();
    (
        [(
            header::CACHE_CONTROL,
            HeaderValue::from_static("public, max-age=300"),
        )],
        Json(JwkSet { keys }),
    )
}

/// RFC 8414 section 3.2: the metadata document.
async fn metadata(State(state): State<AppState>) -> Json<AuthorizationServerMetadata> {
    let issuer = state.issuer().trim_end_matches('/').to_owned();
    Json(AuthorizationServerMetadata {
        token_endpoint: format!("{issuer}/connect/token"),
        jwks_uri: format!("{issuer}/.well-known/jwks.json"),
        grant_types_supported: vec!["client_credentials".into()],
        token_endpoint_auth_methods_supported: auth_methods(&state),
        scopes_supported: state.registry().scopes_supported(),
        response_types_supported: vec![],
        introspection_endpoint: Some(format!("{issuer}/connect/introspect")),
        revocation_endpoint: Some(format!("{issuer}/connect/revocation")),
        tls_client_certificate_bound_access_tokens: mtls_on(&state),
        token_endpoint_auth_signing_alg_values_supported: crate::grant::assertion::ALGORITHMS
            .iter()
            .map(|a| a.as_str().to_owned())
            .collect(),
        dpop_signing_alg_values_supported: tessera_proto::dpop::ALGORITHMS
            .iter()
            .map(|a| a.as_str().to_owned())
            .collect(),
        issuer: state.issuer().to_owned(),
    })
}

/// Whether clients can authenticate with certificates (`serve --client-ca`, on the TLS
/// handshake or through a trusted proxy's header).
fn mtls_on(state: &AppState) -> bool {
    state.client_ca().is_some()
}

/// The client authentication methods (RFC 8414 section 2), with those of RFC 8705 when
/// client certificates are asked for.
fn auth_methods(state: &AppState) -> Vec<String> {
    let mut methods = vec![
        "client_secret_basic".into(),
        "client_secret_post".into(),
        "private_key_jwt".into(),
    ];
    if mtls_on(state) {
        methods.push("tls_client_auth".into());
        methods.push("self_signed_tls_client_auth".into());
    }
    methods
}
