//! The one place where a refused request becomes HTTP: RFC 6750 section 3 challenges, with the
//! RFC 6749 section 5.2 JSON body whenever there is an error code.

use std::borrow::Cow;
use std::sync::Arc;

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use tessera_proto::{ErrorCode, ErrorResponse};

use crate::dpop::ALGS as DPOP_ALGS;
use crate::error::VerifyError;
use crate::limits::LimitRejection;

/// Why a request was refused, and so which answer it gets.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum AuthError {
    /// 401 with a bare `Bearer realm=".."` challenge and no error code (RFC 6750 section 3.1,
    /// last paragraph): no `Authorization` header, or one with another scheme.
    MissingToken,
    /// 400 `invalid_request` (RFC 6750 section 3.1): a malformed `Authorization` header, two of
    /// them, or a token in the URI query (refused, see [`crate::extract`]).
    InvalidRequest(&'static str),
    /// 401 `invalid_token` (RFC 6750 section 3.1): the token failed validation.
    InvalidToken(VerifyError),
    /// 403 `insufficient_scope` with the `scope` the resource needs (RFC 6750 section 3.1).
    InsufficientScope(Cow<'static, str>),
    /// 401 `insufficient_user_authentication` (RFC 9470 section 3): the resource needs a user
    /// and the token represents an application alone.
    UserRequired,
    /// 401 `invalid_dpop_proof` with a `DPoP` challenge (RFC 9449 section 7.1): the token is
    /// DPoP-bound and the proof is missing or fails.
    InvalidDpopProof(crate::dpop::DpopError),
    /// 429 (or 503 before the limits were ever learned), not a challenge: the token is fine
    /// and its plan's limits refused the request ([`crate::limits`]). Its answer is the
    /// [`LimitRejection`]'s.
    Limited(Box<LimitRejection>),
}

impl AuthError {
    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::InvalidRequest(_) => StatusCode::BAD_REQUEST,
            Self::InsufficientScope(_) => StatusCode::FORBIDDEN,
            Self::Limited(limited) => limited.status(),
            Self::MissingToken
            | Self::InvalidToken(_)
            | Self::UserRequired
            | Self::InvalidDpopProof(_) => StatusCode::UNAUTHORIZED,
        }
    }

    /// The error code; `None` when the request carried no token, or was refused by its
    /// plan's limits (an RFC 9457 problem, not an RFC 6750 error).
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            Self::MissingToken | Self::Limited(_) => None,
            Self::InvalidRequest(_) => Some(ErrorCode::InvalidRequest),
            Self::InvalidToken(_) => Some(ErrorCode::InvalidToken),
            Self::InsufficientScope(_) => Some(ErrorCode::InsufficientScope),
            Self::UserRequired => Some(ErrorCode::InsufficientUserAuthentication),
            Self::InvalidDpopProof(_) => Some(ErrorCode::InvalidDpopProof),
        }
    }

    /// Whether the answer challenges with the `DPoP` scheme (RFC 9449 section 7.1): the
    /// request or the token was DPoP's.
    pub fn challenges_dpop(&self) -> bool {
        matches!(
            self,
            Self::InvalidDpopProof(_)
                | Self::InvalidToken(VerifyError::DpopBound | VerifyError::NotDpopBound)
        )
    }

    fn description(&self) -> Cow<'static, str> {
        match self {
            Self::MissingToken => "no bearer token".into(),
            Self::InvalidRequest(why) => (*why).into(),
            Self::InvalidToken(e) => e.to_string().into(),
            Self::InsufficientScope(scope) => format!("the token lacks the scope {scope}").into(),
            Self::UserRequired => {
                "this resource acts for a user; an application-only token cannot use it".into()
            }
            Self::InvalidDpopProof(e) => e.to_string().into(),
            Self::Limited(limited) => limited.to_string().into(),
        }
    }
}

/// What every challenge of one verifier names: its realm (RFC 6750 section 3) and, when the
/// API has a resource URL, where its protected resource metadata is (RFC 9728 section 5.1).
/// Both are quoted-string safe.
#[derive(Debug, Clone)]
pub(crate) struct Challenge {
    pub(crate) realm: Arc<str>,
    pub(crate) resource_metadata: Option<Arc<str>>,
}

/// A refused request: the [`AuthError`] and the realm to challenge with. The rejection of
/// every extractor in [`crate::extract`]; handlers may return it too.
#[derive(Debug, Clone)]
pub struct AuthRejection {
    challenge: Challenge,
    error: AuthError,
}

impl AuthRejection {
    pub(crate) fn new(challenge: Challenge, error: AuthError) -> Self {
        Self { challenge, error }
    }

    /// Why.
    pub fn error(&self) -> &AuthError {
        &self.error
    }
}

impl std::fmt::Display for AuthRejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.error.description())
    }
}

impl std::error::Error for AuthRejection {}

impl IntoResponse for AuthRejection {
    fn into_response(self) -> Response {
        if let AuthError::Limited(limited) = self.error {
            return limited.into_response();
        }
        let status = self.error.status();
        let scheme = if self.error.challenges_dpop() {
            "DPoP"
        } else {
            "Bearer"
        };
        let mut challenge = format!("{scheme} realm=\"{}\"", self.challenge.realm);
        if let Some(url) = &self.challenge.resource_metadata {
            challenge.push_str(&format!(", resource_metadata=\"{url}\""));
        }
        let Some(code) = self.error.code() else {
            // No token: both schemes this API takes (RFC 9449 section 7.1).
            let dpop = format!(
                "DPoP realm=\"{}\", algs=\"{DPOP_ALGS}\"",
                self.challenge.realm
            );
            let mut response = (
                status,
                [(header::WWW_AUTHENTICATE, header_value(challenge))],
            )
                .into_response();
            response
                .headers_mut()
                .append(header::WWW_AUTHENTICATE, header_value(dpop));
            return response;
        };
        // ErrorResponse::new keeps the description to the characters RFC 6750 section 3 allows
        // in the quoted string, so the same text goes in the header and the body.
        let body = ErrorResponse::new(code, self.error.description());
        let description = body.error_description.as_deref().unwrap_or_default();
        challenge.push_str(&format!(
            ", error=\"{code}\", error_description=\"{description}\""
        ));
        if let AuthError::InsufficientScope(scope) = &self.error {
            let scope: String = scope
                .chars()
                .map(|c| if c == '"' || c == '\\' { '?' } else { c })
                .collect();
            challenge.push_str(&format!(", scope=\"{scope}\""));
        }
        if self.error.challenges_dpop() {
            challenge.push_str(&format!(", algs=\"{DPOP_ALGS}\""));
        }
        (
            status,
            [
                (header::WWW_AUTHENTICATE, header_value(challenge)),
                (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
            ],
            Json(body),
        )
            .into_response()
    }
}

/// The challenge as a header value; every part was kept to printable ASCII, so the fallback
/// is only there to avoid a panic.
fn header_value(challenge: String) -> HeaderValue {
    HeaderValue::try_from(challenge).unwrap_or_else(|_| HeaderValue::from_static("Bearer"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn challenge(error: AuthError) -> (StatusCode, String) {
        let challenge = Challenge {
            realm: "api".into(),
            resource_metadata: None,
        };
        let r = AuthRejection::new(challenge, error).into_response();
        let h = r.headers()[header::WWW_AUTHENTICATE].to_str().unwrap();
        (r.status(), h.to_owned())
    }

    #[test]
    fn challenges_follow_rfc_6750_section_3() {
        assert_eq!(
            challenge(AuthError::MissingToken),
            (StatusCode::UNAUTHORIZED, "Bearer realm=\"api\"".into())
        );
        assert_eq!(
            challenge(AuthError::InvalidToken(VerifyError::Expired)),
            (
                StatusCode::UNAUTHORIZED,
                "Bearer realm=\"api\", error=\"invalid_token\", \
                 error_description=\"the token has expired\""
                    .into()
            )
        );
        let (status, h) = challenge(AuthError::InsufficientScope("a\"b".into()));
        assert_eq!(status, StatusCode::FORBIDDEN);
        assert!(h.ends_with(", scope=\"a?b\""), "{h}");
        assert!(!h.contains("a\"b"), "{h}");
        assert_eq!(
            challenge(AuthError::InvalidDpopProof(
                crate::dpop::DpopError::Replayed
            )),
            (
                StatusCode::UNAUTHORIZED,
                "DPoP realm=\"api\", error=\"invalid_dpop_proof\", \
                 error_description=\"the DPoP proof was used before\", \
                 algs=\"EdDSA ES256 RS256 PS256\""
                    .into()
            )
        );
    }
}
