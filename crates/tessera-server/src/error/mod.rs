//! The one place where domain results become HTTP: the error body of RFC 6749 section 5.2,
//! with `Cache-Control: no-store` and `Pragma: no-cache` (RFC 6749 section 5.1); the
//! `WWW-Authenticate` challenge of a failed client authentication; and the rate limit
//! fields of a limiter's decision. The admin API answers with RFC 9457 problem documents
//! instead, in the control plane (`control/problem.rs`).

use axum::body::Bytes;
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use tessera_proto::{ErrorCode, ErrorResponse};
use tessera_store::RateLimit;

use crate::grant::{AuthFailure, CredentialsError, Refusal, ScopeRefusal, TargetRefusal};

use crate::limits::{Busy, Decision};

/// An OAuth error as the token endpoint sends it.
#[derive(Debug)]
pub(crate) struct OAuthError {
    status: StatusCode,
    body: ErrorResponse,
    /// Extra headers: `WWW-Authenticate` for 401 (RFC 6749 5.2), rate limit fields for 429.
    /// Boxed, since most errors carry none and a `Result` should stay small.
    headers: Option<Box<HeaderMap>>,
}

impl OAuthError {
    /// 400 `invalid_request`: malformed, repeated or missing parameters.
    pub(crate) fn invalid_request(description: impl Into<String>) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            ErrorCode::InvalidRequest,
            description,
        )
    }

    /// The answer to a refused token request or client authentication (RFC 6749 section 5.2;
    /// RFC 8707 section 2 for a resource; RFC 9449 sections 5 and 8 for a DPoP proof), with a
    /// `realm` in the challenge of a 401.
    pub(crate) fn refused(refusal: Refusal, realm: &str) -> Self {
        match refusal {
            Refusal::Credentials(error) => Self::credentials(error, realm),
            Refusal::Client(failure) => Self::client_refused(failure, realm),
            Refusal::Throttled {
                rate,
                retry_after_secs,
            } => Self::throttled(rate, retry_after_secs),
            Refusal::OverPlanRate {
                rate,
                retry_after_secs,
            } => Self::over_plan_rate(rate, retry_after_secs),
            // The value is not echoed: the caller chose it, and it could be anything.
            Refusal::UnsupportedGrantType => Self::unsupported_grant_type(
                "this grant_type is not supported; use client_credentials",
            ),
            Refusal::Dpop { error, nonce } => Self::dpop(&error, nonce.as_deref()),
            Refusal::Scope(ScopeRefusal::Malformed) => {
                Self::invalid_scope("scope must be scope names separated by single spaces")
            }
            Refusal::Scope(ScopeRefusal::Missing) => Self::invalid_scope("scope is required"),
            Refusal::Scope(ScopeRefusal::OutsidePlan { named, unknown }) => {
                // Scopes some plan grants are named; anything else is only counted, so that
                // nothing a caller mistyped into the field (a secret) is echoed back.
                let mut parts = named;
                match unknown {
                    0 => {}
                    1 => parts.push("1 scope no plan grants".to_owned()),
                    n => parts.push(format!("{n} scopes no plan grants")),
                }
                Self::invalid_scope(format!("not in the client's plan: {}", parts.join(", ")))
            }
            Refusal::Target(TargetRefusal::NotCovered(Some(resource))) => Self::invalid_target(
                format!("the client's plan does not cover the resource {resource}"),
            ),
            Refusal::Target(TargetRefusal::NotCovered(None)) => {
                Self::invalid_target("a resource is not an API of the client's plan")
            }
            Refusal::Target(TargetRefusal::NoneCovered) => {
                Self::invalid_target("the client's plan covers none of the resources")
            }
            Refusal::Target(TargetRefusal::NoScopeForThem) => {
                Self::invalid_target("none of the requested scopes is for the requested resources")
            }
            Refusal::NoSigningKey => Self::unavailable("no active signing key"),
        }
    }

    /// 401 `invalid_client` for credentials that were checked and refused. An unknown
    /// client and a wrong secret get the same words.
    fn client_refused(failure: AuthFailure, realm: &str) -> Self {
        let description = match failure {
            // Not a refusal: no in-flight slot was free after a wait.
            AuthFailure::Overloaded => return Busy.into(),
            AuthFailure::Unknown | AuthFailure::WrongSecret => {
                "client authentication failed".to_owned()
            }
            AuthFailure::WrongMethod(method) => {
                format!("this client must authenticate with {}", method.as_str())
            }
            AuthFailure::Disabled => "client is disabled".to_owned(),
            AuthFailure::Assertion(e) => e.to_string(),
        };
        Self::invalid_client(realm, description)
    }

    /// The answer to credentials that could not be read: 401 with a challenge when there
    /// are none or they are not Basic (RFC 6749 5.2), 400 `invalid_request` when they are
    /// malformed or sent twice (RFC 6749 2.3).
    fn credentials(error: CredentialsError, realm: &str) -> Self {
        let invalid = Self::invalid_request;
        match error {
            CredentialsError::Missing => {
                Self::invalid_client(realm, "client authentication required")
            }
            CredentialsError::NotBasic => {
                Self::invalid_client(realm, "use HTTP Basic client authentication")
            }
            CredentialsError::RepeatedHeader => invalid("more than one Authorization header"),
            CredentialsError::TwoMethods => {
                invalid("client credentials sent both in the Authorization header and in the body")
            }
            CredentialsError::MalformedHeader => invalid("malformed Authorization header"),
            CredentialsError::MalformedBasic => invalid("malformed Basic credentials"),
            CredentialsError::ConflictingId => {
                invalid("client_id in the body differs from the Authorization header")
            }
            // RFC 7521 section 4.2.1: an assertion that cannot be used is invalid_client.
            CredentialsError::AssertionType => Self::invalid_client(
                realm,
                crate::grant::assertion::AssertionError::UnsupportedType.to_string(),
            ),
            CredentialsError::AssertionWithoutClient => Self::invalid_client(
                realm,
                "the client assertion names no client: send client_id or a sub",
            ),
        }
    }

    /// 401 `invalid_client` with a Basic challenge (RFC 6749 5.2, RFC 7617).
    fn invalid_client(realm: &str, description: impl Into<String>) -> Self {
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
    fn invalid_scope(description: impl Into<String>) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            ErrorCode::InvalidScope,
            description,
        )
    }

    /// 400 `unsupported_grant_type`.
    fn unsupported_grant_type(description: impl Into<String>) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            ErrorCode::UnsupportedGrantType,
            description,
        )
    }

    /// 429 `rate_limited` for a client over its plan's rate, with `Retry-After` and the
    /// rate limit fields.
    fn over_plan_rate(rate: RateLimit, retry_after_secs: u64) -> Self {
        Self::rate_limited(
            format!(
                "too many token requests; retry after {retry_after_secs} s and cache tokens \
                 for expires_in"
            ),
            rate,
            retry_after_secs,
        )
    }

    /// 429 `rate_limited` for an address over its allowance of failed authentications.
    fn throttled(rate: RateLimit, retry_after_secs: u64) -> Self {
        Self::rate_limited(
            "too many failed client authentications from this address",
            rate,
            retry_after_secs,
        )
    }

    fn rate_limited(description: impl Into<String>, rate: RateLimit, retry: u64) -> Self {
        let mut e = Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            ErrorCode::RateLimited,
            description,
        );
        let limited = Decision::Limited {
            retry_after_secs: retry,
        };
        e.headers = Some(Box::new(rate_limit_fields(rate, limited)));
        e
    }

    /// Adds headers to the answer.
    pub(crate) fn with_headers(mut self, headers: HeaderMap) -> Self {
        if !headers.is_empty() {
            self.headers.get_or_insert_default().extend(headers);
        }
        self
    }

    /// 400 `invalid_target` (RFC 8707 section 2): a `resource` the client's plan does not
    /// cover, or one that is malformed.
    pub(crate) fn invalid_target(description: impl Into<String>) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            ErrorCode::InvalidTarget,
            description,
        )
    }

    /// 400 `invalid_dpop_proof` or `use_dpop_nonce` (RFC 9449 sections 5 and 8), the latter
    /// with the nonce to use in `DPoP-Nonce`.
    fn dpop(error: &tessera_verify::dpop::DpopError, nonce: Option<&str>) -> Self {
        let mut e = Self::new(StatusCode::BAD_REQUEST, error.code(), error.to_string());
        if let Some(value) = nonce.and_then(|n| HeaderValue::from_str(n).ok()) {
            let mut headers = HeaderMap::new();
            headers.insert(HeaderName::from_static("dpop-nonce"), value);
            e = e.with_headers(headers);
        }
        e
    }

    /// 413: the body is over the limit; still an `invalid_request` body.
    pub(crate) fn too_large(limit: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            ErrorCode::InvalidRequest,
            format!("request body is larger than {limit} bytes"),
        )
    }

    /// 503 `temporarily_unavailable`: the server cannot issue now (no active signing key).
    pub(crate) fn unavailable(description: impl Into<String>) -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::TemporarilyUnavailable,
            description,
        )
    }

    /// 503 `temporarily_unavailable` with `Retry-After` (RFC 6749 5.2, RFC 7009 2.2.1): the
    /// store does not answer, for a write, or for longer than the staleness bound.
    pub(crate) fn store_unavailable(description: impl Into<String>) -> Self {
        let mut headers = HeaderMap::new();
        headers.insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
        Self::unavailable(description).with_headers(headers)
    }

    fn new(status: StatusCode, code: ErrorCode, description: impl Into<String>) -> Self {
        Self {
            status,
            body: ErrorResponse::new(code, description),
            headers: None,
        }
    }

    /// The error code.
    pub(crate) fn code(&self) -> ErrorCode {
        self.body.error
    }

    /// The HTTP status.
    pub(crate) fn status(&self) -> StatusCode {
        self.status
    }
}

/// Headers every token endpoint answer carries (RFC 6749 section 5.1).
pub(crate) const NO_STORE: [(header::HeaderName, HeaderValue); 2] = [
    (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
    (header::PRAGMA, HeaderValue::from_static("no-cache")),
];

/// 503 with `Retry-After: 1`: overload is the server's state, not the client's fault.
impl From<Busy> for OAuthError {
    fn from(_: Busy) -> Self {
        let mut headers = HeaderMap::new();
        headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        Self::unavailable("server busy; retry shortly").with_headers(headers)
    }
}

/// The `RateLimit-Policy` and `RateLimit` fields of draft-ietf-httpapi-ratelimit-headers-08
/// for a decision under `rate`, and `Retry-After` (RFC 9110 10.2.3) when refused.
pub(crate) fn rate_limit_fields(rate: RateLimit, decision: Decision) -> HeaderMap {
    let mut headers = HeaderMap::new();
    set_rate_limit_fields(&mut headers, rate, decision);
    headers
}

/// [`rate_limit_fields`], set in `headers`: on the token path, straight into the answer's
/// own, each value written digit by digit (no `format!`, no map of its own; BENCHMARKS.md,
/// issue 31).
pub(crate) fn set_rate_limit_fields(headers: &mut HeaderMap, rate: RateLimit, decision: Decision) {
    let (remaining, reset) = match decision {
        Decision::Allowed {
            remaining,
            reset_secs,
        } => (u64::from(remaining), reset_secs),
        Decision::Limited { retry_after_secs } => (0, retry_after_secs),
    };
    let field = |a: &str, x: u64, b: &str, y: u64| {
        let (mut x_digits, mut y_digits) = (itoa::Buffer::new(), itoa::Buffer::new());
        let mut value = Vec::with_capacity(32);
        for part in [a, x_digits.format(x), b, y_digits.format(y)] {
            value.extend_from_slice(part.as_bytes());
        }
        // Digits and fixed ASCII: always a valid field value.
        HeaderValue::from_maybe_shared(Bytes::from(value)).ok()
    };
    let policy = field(
        "\"token\";q=",
        u64::from(rate.count),
        ";w=",
        u64::from(rate.period_secs),
    );
    let current = field("\"token\";r=", remaining, ";t=", reset);
    for (name, value) in [("ratelimit-policy", policy), ("ratelimit", current)] {
        if let Some(value) = value {
            headers.insert(HeaderName::from_static(name), value);
        }
    }
    if let Decision::Limited { retry_after_secs } = decision {
        headers.insert(header::RETRY_AFTER, HeaderValue::from(retry_after_secs));
    }
}

impl IntoResponse for OAuthError {
    fn into_response(self) -> Response {
        let headers = self.headers.map(|h| *h).unwrap_or_default();
        (self.status, NO_STORE, headers, Json(self.body)).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_follow_the_draft() {
        let rate = RateLimit {
            count: 60,
            period_secs: 60,
            burst: 60,
        };
        let h = rate_limit_fields(
            rate,
            Decision::Limited {
                retry_after_secs: 3,
            },
        );
        assert_eq!(h["ratelimit-policy"], "\"token\";q=60;w=60");
        assert_eq!(h["ratelimit"], "\"token\";r=0;t=3");
        assert_eq!(h["retry-after"], "3");
    }
}
