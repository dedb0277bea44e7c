//! The one place where a refused request becomes HTTP: RFC 6750 section 3 challenges, with the
//! RFC 6749 section 5.2 JSON body whenever there is an error code.

use std::borrow::Cow;
use std::sync::Arc;

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use tessera_proto::{ErrorCode, ErrorResponse};

use crate::error::VerifyError;

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
}

impl AuthError {
    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::InvalidRequest(_) => StatusCode::BAD_REQUEST,
            Self::InsufficientScope(_) => StatusCode::FORBIDDEN,
            Self::MissingToken | Self::InvalidToken(_) | Self::UserRequired => {
                StatusCode::UNAUTHORIZED
            }
        }
    }

    /// The error code; `None` when the request carried no token.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            Self::MissingToken => None,
            Self::InvalidRequest(_) => Some(ErrorCode::InvalidRequest),
            Self::InvalidToken(_) => Some(ErrorCode::InvalidToken),
            Self::InsufficientScope(_) => Some(ErrorCode::InsufficientScope),
            Self::UserRequired => Some(ErrorCode::InsufficientUserAuthentication),
        }
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
        }
    }
}

/// A refused request: the [`AuthError`] and the realm to challenge with. The rejection of
/// every extractor in [`crate::extract`]; handlers may return it too.
#[derive(Debug, Clone)]
pub struct AuthRejection {
    realm: Arc<str>,
    error: AuthError,
}

impl AuthRejection {
    pub(crate) fn new(realm: Arc<str>, error: AuthError) -> Self {
        Self { realm, error }
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
        let status = self.error.status();
        let mut challenge = format!("Bearer realm=\"{}\"", self.realm);
        let Some(code) = self.error.code() else {
            return (
                status,
                [(header::WWW_AUTHENTICATE, header_value(challenge))],
            )
                .into_response();
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
        let r = AuthRejection::new("api".into(), error).into_response();
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
    }
}
