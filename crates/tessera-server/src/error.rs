//! The one place where errors become HTTP responses: the error body of RFC 6749 section 5.2,
//! with `Cache-Control: no-store` and `Pragma: no-cache` (RFC 6749 section 5.1).

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use tessera_proto::{ErrorCode, ErrorResponse};

/// An OAuth error as the token endpoint sends it.
#[derive(Debug)]
pub struct OAuthError {
    status: StatusCode,
    body: ErrorResponse,
    /// Extra headers: `WWW-Authenticate` for 401 (RFC 6749 5.2), rate limit fields for 429.
    /// Boxed, since most errors carry none and a `Result` should stay small.
    headers: Option<Box<HeaderMap>>,
}

impl OAuthError {
    /// 400 `invalid_request`: malformed, repeated or missing parameters.
    pub fn invalid_request(description: impl Into<String>) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            ErrorCode::InvalidRequest,
            description,
        )
    }

    /// 401 `invalid_client` with a Basic challenge: client authentication failed.
    pub fn invalid_client(realm: &str, description: impl Into<String>) -> Self {
        let mut e = Self::new(
            StatusCode::UNAUTHORIZED,
            ErrorCode::InvalidClient,
            description,
        );
        if let Ok(challenge) =
            HeaderValue::from_str(&format!("Basic realm=\"{realm}\", charset=\"UTF-8\""))
        {
            e.headers
                .get_or_insert_default()
                .insert(header::WWW_AUTHENTICATE, challenge);
        }
        e
    }

    /// 400 `invalid_scope`: a scope that is malformed, missing or outside the plan.
    pub fn invalid_scope(description: impl Into<String>) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            ErrorCode::InvalidScope,
            description,
        )
    }

    /// 400 `unsupported_grant_type`.
    pub fn unsupported_grant_type(description: impl Into<String>) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            ErrorCode::UnsupportedGrantType,
            description,
        )
    }

    /// 429 `rate_limited`, with `Retry-After` and the rate limit fields in `headers`.
    pub fn rate_limited(description: impl Into<String>, headers: HeaderMap) -> Self {
        let mut e = Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            ErrorCode::RateLimited,
            description,
        );
        e.headers = Some(Box::new(headers));
        e
    }

    /// Adds headers to the answer.
    pub fn with_headers(mut self, headers: HeaderMap) -> Self {
        if !headers.is_empty() {
            self.headers.get_or_insert_default().extend(headers);
        }
        self
    }

    /// 400 `unauthorized_client`, from RFC 7009 2.1: a client revoking another's token.
    pub fn unauthorized_client(description: impl Into<String>) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            ErrorCode::UnauthorizedClient,
            description,
        )
    }

    /// 413: the body is over the limit; still an `invalid_request` body.
    pub fn too_large(limit: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            ErrorCode::InvalidRequest,
            format!("request body is larger than {limit} bytes"),
        )
    }

    /// 503 `temporarily_unavailable`: the server cannot issue now (no active signing key).
    pub fn unavailable(description: impl Into<String>) -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::TemporarilyUnavailable,
            description,
        )
    }

    /// 500 `server_error`. The cause is logged here and never sent.
    pub fn internal(cause: &dyn std::fmt::Display) -> Self {
        tracing::error!(%cause, "internal error");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            ErrorCode::ServerError,
            "internal error",
        )
    }

    fn new(status: StatusCode, code: ErrorCode, description: impl Into<String>) -> Self {
        Self {
            status,
            body: ErrorResponse::new(code, description),
            headers: None,
        }
    }

    /// The error code.
    pub fn code(&self) -> ErrorCode {
        self.body.error
    }
}

/// Headers every token endpoint answer carries (RFC 6749 section 5.1).
pub(crate) const NO_STORE: [(header::HeaderName, HeaderValue); 2] = [
    (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
    (header::PRAGMA, HeaderValue::from_static("no-cache")),
];

impl IntoResponse for OAuthError {
    fn into_response(self) -> Response {
        let headers = self.headers.map(|h| *h).unwrap_or_default();
        (self.status, NO_STORE, headers, Json(self.body)).into_response()
    }
}
