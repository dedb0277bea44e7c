//! OAuth error codes and the error response body.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The error codes Tessera sends and understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// RFC 6749 5.2: a missing or repeated parameter, or an otherwise malformed request.
    InvalidRequest,
    /// RFC 6749 5.2: client authentication failed.
    InvalidClient,
    /// RFC 6749 5.2: the grant is invalid.
    InvalidGrant,
    /// RFC 6749 5.2: the client may not use this grant type.
    UnauthorizedClient,
    /// RFC 6749 5.2: the grant type is not supported.
    UnsupportedGrantType,
    /// RFC 6749 5.2: a requested scope is invalid, unknown, or outside the client's plan.
    InvalidScope,
    /// RFC 7009 2.2.1: the token type cannot be revoked.
    UnsupportedTokenType,
    /// RFC 6750 3.1: the access token is expired, revoked, malformed or otherwise invalid.
    InvalidToken,
    /// RFC 6750 3.1: the token lacks the scope the resource requires.
    InsufficientScope,
    /// RFC 9470 3: the resource requires a user, and the token represents an application.
    InsufficientUserAuthentication,
    /// RFC 8707 2: a `resource` the client may not have a token for, or not one this server
    /// issues tokens for.
    InvalidTarget,
    /// RFC 9449 7.1 and 5: the DPoP proof is missing where required, malformed or invalid.
    InvalidDpopProof,
    /// RFC 9449 8: the proof must carry the nonce the server sent in `DPoP-Nonce`.
    UseDpopNonce,
    /// Too many requests: a rate limit applies (sent with HTTP 429 and `Retry-After`).
    RateLimited,
    /// RFC 6749 4.1.2.1: the server cannot handle the request now.
    TemporarilyUnavailable,
    /// RFC 6749 4.1.2.1: an unexpected condition on the server.
    ServerError,
}

impl ErrorCode {
    /// The code as the RFCs spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InvalidRequest => "invalid_request",
            Self::InvalidClient => "invalid_client",
            Self::InvalidGrant => "invalid_grant",
            Self::UnauthorizedClient => "unauthorized_client",
            Self::UnsupportedGrantType => "unsupported_grant_type",
            Self::InvalidScope => "invalid_scope",
            Self::UnsupportedTokenType => "unsupported_token_type",
            Self::InvalidToken => "invalid_token",
            Self::InsufficientScope => "insufficient_scope",
            Self::InsufficientUserAuthentication => "insufficient_user_authentication",
            Self::InvalidTarget => "invalid_target",
            Self::InvalidDpopProof => "invalid_dpop_proof",
            Self::UseDpopNonce => "use_dpop_nonce",
            Self::RateLimited => "rate_limited",
            Self::TemporarilyUnavailable => "temporarily_unavailable",
            Self::ServerError => "server_error",
        }
    }

    /// Every code, for metrics and documentation.
    pub const ALL: [ErrorCode; 16] = [
        Self::InvalidRequest,
        Self::InvalidClient,
        Self::InvalidGrant,
        Self::UnauthorizedClient,
        Self::UnsupportedGrantType,
        Self::InvalidScope,
        Self::UnsupportedTokenType,
        Self::InvalidToken,
        Self::InsufficientScope,
        Self::InsufficientUserAuthentication,
        Self::InvalidTarget,
        Self::InvalidDpopProof,
        Self::UseDpopNonce,
        Self::RateLimited,
        Self::TemporarilyUnavailable,
        Self::ServerError,
    ];
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error response body of RFC 6749 section 5.2.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = OAuthError))]
pub struct ErrorResponse {
    /// `invalid_request`, `invalid_client`, `invalid_grant`, `unauthorized_client`,
    /// `unsupported_grant_type`, `invalid_scope`, `temporarily_unavailable`, …
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub error: ErrorCode,
    /// Human-readable text for the developer; printable ASCII without `"` and `\`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_description: Option<String>,
}

impl ErrorResponse {
    /// An error with a description. Characters that RFC 6749 5.2 does not allow in
    /// `error_description` (anything outside `%x20-21 / %x23-5B / %x5D-7E`) become `?`.
    pub fn new(error: ErrorCode, description: impl Into<String>) -> Self {
        let description = description
            .into()
            .chars()
            .map(|c| match c {
                ' '..='~' if c != '"' && c != '\\' => c,
                _ => '?',
            })
            .collect();
        Self {
            error,
            error_description: Some(description),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_render_as_the_rfcs_spell_them() {
        for code in ErrorCode::ALL {
            let json = serde_json::to_string(&code).unwrap();
            assert_eq!(json, format!("\"{}\"", code.as_str()));
        }
    }

    #[test]
    fn description_keeps_to_the_allowed_characters() {
        let e = ErrorResponse::new(ErrorCode::InvalidScope, "bad \"x\" \\ é\n");
        assert_eq!(e.error_description.as_deref(), Some("bad ?x? ? ??"));
    }
}
