//! Authorization server metadata (RFC 8414 section 2).

use serde::{Deserialize, Serialize};

/// The metadata document served at `/.well-known/oauth-authorization-server` and, for
/// libraries that only look there, `/.well-known/openid-configuration`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthorizationServerMetadata {
    /// The issuer identifier; equal to the `iss` of every token.
    pub issuer: String,
    /// The token endpoint (RFC 6749 section 3.2).
    pub token_endpoint: String,
    /// Where the public signing keys are published.
    pub jwks_uri: String,
    /// Only `client_credentials`.
    pub grant_types_supported: Vec<String>,
    /// `client_secret_basic` and `client_secret_post`.
    pub token_endpoint_auth_methods_supported: Vec<String>,
    /// Every scope some plan grants.
    pub scopes_supported: Vec<String>,
    /// No authorization endpoint exists, so no response type is supported (RFC 8414 2 makes
    /// the member required; an empty list says so).
    pub response_types_supported: Vec<String>,
    /// The introspection endpoint (RFC 7662), when served.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub introspection_endpoint: Option<String>,
    /// The revocation endpoint (RFC 7009), when served.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revocation_endpoint: Option<String>,
    /// RFC 8705 section 3.3: the server binds tokens to client certificates.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tls_client_certificate_bound_access_tokens: bool,
    /// RFC 8414 section 2: the algorithms `private_key_jwt` assertions may be signed with.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub token_endpoint_auth_signing_alg_values_supported: Vec<String>,
    /// RFC 9449 section 5.1: the algorithms DPoP proofs may be signed with.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dpop_signing_alg_values_supported: Vec<String>,
}
