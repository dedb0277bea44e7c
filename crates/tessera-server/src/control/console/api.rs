//! The console's only way to the data: the admin API (docs/admin-api.md) and the token
//! endpoint, called in-process through the same routers that serve them over HTTP, with
//! the session's bearer token (or, for a person signed in through single sign-on, the
//! [`Person`](crate::control::admin::auth::Person) as an extension no HTTP caller can set).
//! So the console can do nothing that the admin API would refuse its caller, and every
//! change it makes is checked, audited and answered as any other admin client's.

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, Method, Request, StatusCode};
use axum::Router;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;
use http_body_util::BodyExt;
use serde::de::DeserializeOwned;
use tessera_proto::admin::Problem;
use tessera_proto::scope::{ADMIN_READ_SCOPE, ADMIN_SCOPE, ORG_ADMIN_SCOPE};
use tessera_proto::{ErrorCode, ErrorResponse, TokenResponse};
use tower::ServiceExt;

use super::session::{Credential, Session};
use crate::control::admin;
use crate::control::admin::auth::ViaConsole;
use crate::routes::token;
use crate::AppState;

/// The token endpoint and the admin API, as a router of their own.
#[derive(Clone)]
pub(super) struct Api {
    router: Router,
}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Api")
    }
}

/// Why an API call gave no answer the console can show.
#[derive(Debug)]
pub(super) enum ApiError {
    /// 401: the session's token is no longer accepted (expired, revoked, client disabled).
    SignedOut,
    /// Any other refusal: the problem document's status, title and detail (RFC 9457).
    Problem {
        status: StatusCode,
        title: String,
        detail: String,
        /// The request field at fault, when the problem names one.
        field: Option<String>,
    },
}

impl ApiError {
    fn internal(detail: impl std::fmt::Display) -> Self {
        Self::Problem {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            title: "Unexpected answer".into(),
            detail: detail.to_string(),
            field: None,
        }
    }
}

/// A successful answer: its status, `ETag` and body.
#[derive(Debug)]
pub(super) struct Answer {
    pub(super) etag: Option<String>,
    body: axum::body::Bytes,
}

impl Answer {
    pub(super) fn json<T: DeserializeOwned>(&self) -> Result<T, ApiError> {
        serde_json::from_slice(&self.body).map_err(ApiError::internal)
    }
}

/// What a sign-in gave.
#[derive(Debug)]
pub(super) enum SignIn {
    /// A token, whether it may write, the organization of an organization's admin, and
    /// its lifetime in seconds.
    Token {
        token: String,
        write: bool,
        org: Option<String>,
        expires_in: u64,
    },
    /// Wrong id or secret, or a client disabled.
    Refused,
    /// The client is fine but its plan grants no admin scope (or `tessera-org-admin` to a
    /// client of no organization).
    NotAdmin,
    /// Too many failures from this address: retry after this many seconds.
    Throttled(Option<u64>),
    /// Anything else, said as it was.
    Failed(String),
}

/// Which scope a sign-in tries: the provider's admin, an organization's, the reader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Write,
    Org,
    Read,
}

/// The `org_id` claim of an access token the token endpoint has just issued in-process
/// (so not verified again here: the admin API verifies it on every call).
fn org_of(token: &str) -> Option<String> {
    let payload = token.split('.').nth(1)?;
    let claims: tessera_proto::AccessTokenClaims =
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).ok()?).ok()?;
    claims.org_id
}

impl Api {
    pub(super) fn new(state: &AppState) -> Self {
        Self {
            router: Router::new()
                .merge(token::router())
                .nest("/admin/v1", admin::router())
                .with_state(state.clone()),
        }
    }

    /// Asks the token endpoint for a `tessera-admin` token, then a `tessera-org-admin` one
    /// (for a client of an organization: its developer portal), then a `tessera-admin-read`
    /// one, as the admin API ranks them ([`principal`](crate::control::admin::auth)), and as
    /// the browser's own request would: with its peer address and forwarding headers, so
    /// that failures count against the browser's address in the same throttle as any token
    /// request's.
    pub(super) async fn sign_in(&self, from: &Parts, id: &str, secret: &str) -> SignIn {
        let tries = [
            (ADMIN_SCOPE, Role::Write),
            (ORG_ADMIN_SCOPE, Role::Org),
            (ADMIN_READ_SCOPE, Role::Read),
        ];
        for (n, (scope, role)) in tries.into_iter().enumerate() {
            let last = n + 1 == tries.len();
            let credentials = format!(
                "{}:{}",
                tessera_proto::form::encode_component(id),
                tessera_proto::form::encode_component(secret)
            );
            let mut request = Request::builder()
                .method(Method::POST)
                .uri("/connect/token")
                .header(
                    header::AUTHORIZATION,
                    format!("Basic {}", STANDARD.encode(credentials)),
                )
                .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
                .body(Body::from(format!(
                    "grant_type=client_credentials&scope={scope}"
                )))
                .expect("a valid request");
            if let Some(peer) = from.extensions.get::<ConnectInfo<std::net::SocketAddr>>() {
                request.extensions_mut().insert(*peer);
            }
            for value in from.headers.get_all("x-forwarded-for") {
                request
                    .headers_mut()
                    .append("x-forwarded-for", value.clone());
            }
            let (status, headers, body) = match self.send(request).await {
                Ok(answer) => answer,
                Err(e) => return SignIn::Failed(e.to_string()),
            };
            if status == StatusCode::OK {
                let answer = match serde_json::from_slice::<TokenResponse>(&body) {
                    Ok(answer) => answer,
                    Err(e) => return SignIn::Failed(e.to_string()),
                };
                let org = match role {
                    // The admin API takes `tessera-org-admin` only from a client of an
                    // organization: one of none goes on to the reader's scope.
                    Role::Org => match org_of(&answer.access_token) {
                        Some(org) => Some(org),
                        None => continue,
                    },
                    Role::Write | Role::Read => None,
                };
                return SignIn::Token {
                    token: answer.access_token,
                    write: role != Role::Read,
                    org,
                    expires_in: answer.expires_in,
                };
            }
            let refusal = serde_json::from_slice::<ErrorResponse>(&body).ok();
            match (status, refusal.as_ref().map(|r| r.error)) {
                (StatusCode::BAD_REQUEST, Some(ErrorCode::InvalidScope)) if !last => continue,
                (StatusCode::BAD_REQUEST, Some(ErrorCode::InvalidScope)) => {
                    return SignIn::NotAdmin
                }
                (StatusCode::UNAUTHORIZED, _) => return SignIn::Refused,
                (StatusCode::TOO_MANY_REQUESTS, _) => {
                    let retry = headers
                        .get(header::RETRY_AFTER)
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.parse().ok());
                    return SignIn::Throttled(retry);
                }
                _ => {
                    return SignIn::Failed(
                        refusal
                            .map(|r| r.error_description.unwrap_or_default())
                            .unwrap_or_else(|| status.to_string()),
                    )
                }
            }
        }
        SignIn::NotAdmin
    }

    /// `GET path` with the session's token.
    pub(super) async fn get(&self, session: &Session, path: &str) -> Result<Answer, ApiError> {
        self.call(session, Method::GET, path, None::<&()>, &[])
            .await
    }

    /// A call with the session's token and, for writes, a JSON body and extra headers
    /// (`If-Match`, `Idempotency-Key`); with the browser's address and forwarding headers,
    /// and marked as the console's, for the audit trail.
    pub(super) async fn call(
        &self,
        session: &Session,
        method: Method,
        path: &str,
        body: Option<&impl serde::Serialize>,
        extra: &[(&'static str, &str)],
    ) -> Result<Answer, ApiError> {
        let mut request = Request::builder()
            .method(method)
            .uri(format!("/admin/v1{path}"));
        if let Credential::Token(token) = &session.credential {
            request = request.header(header::AUTHORIZATION, format!("Bearer {}", token.as_str()));
        }
        for value in &session.origin.forwarded {
            request = request.header("x-forwarded-for", value.clone());
        }
        if body.is_some() {
            request = request.header(header::CONTENT_TYPE, "application/json");
        }
        for (name, value) in extra {
            if let Ok(value) = HeaderValue::from_str(value) {
                request = request.header(*name, value);
            }
        }
        let mut request = request
            .body(body.map_or_else(Body::empty, |b| {
                Body::from(serde_json::to_vec(b).unwrap_or_default())
            }))
            .map_err(ApiError::internal)?;
        if let Some(peer) = session.origin.peer {
            request.extensions_mut().insert(peer);
        }
        request.extensions_mut().insert(ViaConsole);
        if let Credential::Person(person) = &session.credential {
            request.extensions_mut().insert(person.clone());
        }
        let (status, headers, body) = self.send(request).await.map_err(ApiError::internal)?;
        if status.is_success() {
            return Ok(Answer {
                etag: headers
                    .get(header::ETAG)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned),
                body,
            });
        }
        if status == StatusCode::UNAUTHORIZED {
            return Err(ApiError::SignedOut);
        }
        let problem = serde_json::from_slice::<Problem>(&body).unwrap_or_else(|_| Problem {
            title: status.to_string(),
            ..Problem::default()
        });
        Err(ApiError::Problem {
            status,
            title: problem.title,
            detail: problem.detail,
            field: problem.field,
        })
    }

    async fn send(
        &self,
        request: Request<Body>,
    ) -> Result<(StatusCode, HeaderMap, axum::body::Bytes), axum::Error> {
        let response = match self.router.clone().oneshot(request).await {
            Ok(response) => response,
            Err(never) => match never {},
        };
        let (parts, body) = response.into_parts();
        let body = body.collect().await?.to_bytes();
        Ok((parts.status, parts.headers, body))
    }
}
