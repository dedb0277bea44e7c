//! Errors: [`BuildError`] when a client cannot be built, [`KeyError`](crate::KeyError) when a key
//! cannot be read, [`Error`] when no token can be had.

use std::sync::Arc;
use std::time::Duration;

use reqwest::StatusCode;
use tessera_proto::{ErrorCode, ErrorResponse, Scope, ScopeSet};
use thiserror::Error;

/// Why [`TokenClientBuilder::build`](crate::TokenClientBuilder::build) failed.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum BuildError {
    /// A required setting was not given: `environment`, `client_id`, `client_secret` (or
    /// another [`ClientAuth`](crate::ClientAuth), or a client certificate) or `scopes`.
    #[error("{0} is required")]
    Missing(&'static str),
    /// Neither the builder nor (with `from_env`) the environment variable gave the base
    /// URL.
    #[error(
        "no base URL for {environment}: set it on the builder, or in {variable} with from_env()"
    )]
    MissingBaseUrl {
        /// `production` or `staging`.
        environment: String,
        /// The variable that was read.
        variable: &'static str,
    },
    /// The base URL could not be used.
    #[error("base URL {url:?} is not usable: {reason}")]
    InvalidBaseUrl {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Plain `http` to a host other than loopback, without `allow_http`: the token request
    /// carries the client secret and must go over TLS (RFC 6749 section 2.3.1).
    #[error("{url} is not https; the client secret must travel over TLS")]
    InsecureUrl {
        /// The URL as given.
        url: String,
    },
    /// The HTTP client could not be set up (TLS backend).
    #[error("could not build the HTTP client")]
    Http(#[source] reqwest::Error),
}

/// Why no token (or, from [`send_authorized`](crate::TokenClient::send_authorized), no API
/// response) could be had.
///
/// Cheap to clone, so that every task waiting on one refresh gets its outcome.
#[derive(Debug, Clone, Error)]
#[non_exhaustive]
pub enum Error {
    /// The token endpoint refused the request with an RFC 6749 section 5.2 error (400, 401 and
    /// other 4xx answers). Not retried: the same request would be refused again.
    #[error(transparent)]
    OAuth(#[from] OAuthError),
    /// Still rate limited (429) when the attempts ran out, or asked to wait longer than
    /// [`RetryPolicy::max_retry_after`](crate::RetryPolicy::max_retry_after).
    #[error("rate limited by the token endpoint after {attempts} attempt(s)")]
    RateLimited {
        /// The last `Retry-After`, when it was in seconds.
        retry_after: Option<Duration>,
        /// Requests made.
        attempts: u32,
    },
    /// A server error (5xx, or 408) on every attempt.
    #[error("token endpoint answered {status} after {attempts} attempt(s)")]
    Server {
        /// The last status.
        status: StatusCode,
        /// The error code of the last answer, when it had an RFC 6749 body.
        code: Option<ErrorCode>,
        /// Requests made.
        attempts: u32,
    },
    /// The token endpoint could not be reached, or its answer not read, on every attempt.
    #[error("could not reach the token endpoint after {attempts} attempt(s)")]
    Transport {
        /// The last failure.
        #[source]
        source: Arc<reqwest::Error>,
        /// Requests made.
        attempts: u32,
    },
    /// An answer that is neither a token (RFC 6749 section 5.1) nor an error
    /// (section 5.2), such as a redirect, which is never followed.
    #[error("unexpected answer from the token endpoint ({status}): {detail}")]
    UnexpectedResponse {
        /// The status received.
        status: StatusCode,
        /// What was wrong with it.
        detail: String,
    },
    /// The assertion file of [`ClientAuth::assertion_file`](crate::ClientAuth::assertion_file)
    /// could not be read, or held nothing. Not retried: the platform writes the file, and
    /// a missing one is a deployment to fix.
    #[error("cannot read the client assertion file {}", .path.display())]
    AssertionFile {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: Arc<std::io::Error>,
    },
    /// The API request of [`send_authorized`](crate::TokenClient::send_authorized) failed.
    #[error("the API request failed")]
    Api(#[source] Arc<reqwest::Error>),
}

impl Error {
    /// The OAuth error code, when the server sent one.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            Self::OAuth(e) => Some(e.code),
            Self::Server { code, .. } => *code,
            _ => None,
        }
    }
}

/// An error answer of the token endpoint (RFC 6749 section 5.2).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("token endpoint refused the request: {code} ({status}){}", describe(.description))]
#[non_exhaustive]
pub struct OAuthError {
    /// The HTTP status: 400 for most codes, 401 for `invalid_client`.
    pub status: StatusCode,
    /// The error code.
    pub code: ErrorCode,
    /// The server's `error_description`.
    pub description: Option<String>,
    /// For `invalid_scope`, the requested scopes the server named as refused.
    pub refused_scopes: Vec<Scope>,
}

fn describe(description: &Option<String>) -> String {
    description
        .as_deref()
        .map(|d| format!(": {d}"))
        .unwrap_or_default()
}

impl OAuthError {
    /// Reads an error body. For `invalid_scope` the refused scopes are the requested ones
    /// that the description names after its last `:`, separated by commas (Tessera says
    /// "not in the client's plan: a, b, 1 scope no plan grants"); only requested scopes
    /// count, so other wording yields none.
    pub(crate) fn new(status: StatusCode, body: ErrorResponse, requested: &ScopeSet) -> Self {
        let refused_scopes = match (&body.error, &body.error_description) {
            (ErrorCode::InvalidScope, Some(description)) => {
                let named = description.rsplit_once(':').map_or("", |(_, names)| names);
                named
                    .split(',')
                    .map(str::trim)
                    .filter_map(|name| requested.iter().find(|s| s.as_str() == name))
                    .cloned()
                    .collect()
            }
            _ => Vec::new(),
        };
        Self {
            status,
            code: body.error,
            description: body.error_description,
            refused_scopes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refused_scopes_are_read_from_the_description() {
        let requested = ScopeSet::parse("news-api oms-api x plan").unwrap();
        let body = ErrorResponse::new(
            ErrorCode::InvalidScope,
            "not in the client's plan: oms-api, x, 1 scope no plan grants",
        );
        let e = OAuthError::new(StatusCode::BAD_REQUEST, body, &requested);
        let refused: Vec<_> = e.refused_scopes.iter().map(Scope::as_str).collect();
        assert_eq!(refused, ["oms-api", "x"]);
        assert_eq!(
            e.to_string(),
            "token endpoint refused the request: invalid_scope (400 Bad Request): \
             not in the client's plan: oms-api, x, 1 scope no plan grants"
        );

        let other = ErrorResponse::new(ErrorCode::InvalidScope, "scope is required");
        let e = OAuthError::new(StatusCode::BAD_REQUEST, other, &requested);
        assert!(e.refused_scopes.is_empty());
        let client = ErrorResponse {
            error: ErrorCode::InvalidClient,
            error_description: None,
        };
        let e = Error::from(OAuthError::new(
            StatusCode::UNAUTHORIZED,
            client,
            &requested,
        ));
        assert_eq!(e.code(), Some(ErrorCode::InvalidClient));
        assert!(e.to_string().ends_with("(401 Unauthorized)"));
    }
}
