//! The token endpoint: the client credentials grant (RFC 6749 section 4.4). This is the
//! edge: it reads the request, hands it to the grant (`crate::grant`), records what the
//! grant decided (metrics, usage, audit) and writes the answer.

use std::future::Future as _;
use std::task::Poll;
use std::time::Instant;

use axum::body::{Bytes, HttpBody};
use axum::extract::State;
use axum::http::header::{AUTHORIZATION, CONTENT_TYPE};
use axum::http::request::Parts;
use axum::http::{HeaderValue, Method, Request, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::BoxError;
use axum::Router;
use tessera_proto::{ErrorCode, TokenRequest, TokenResponse};
use tessera_verify::dpop::proof_header;

use crate::audit::{self, Subject};
use crate::error::{rate_limit_fields, set_rate_limit_fields, OAuthError, NO_STORE};
use crate::grant::{Assertion, Authorization, Credentials, Decided, Grant, Issued, TokenGrant};
use crate::metrics::NO_PLAN;
use crate::mtls::peer_certificate;
use crate::mtls::PeerCertificate;
use crate::routes::{authorization, client_ip, read_form, single, split};
use crate::AppState;

/// The token endpoint's path (RFC 6749 section 3.2 leaves it to the server).
const PATH: &str = "/connect/token";

pub(crate) fn router() -> Router<AppState> {
    Router::new().route(PATH, post(token::<axum::body::Body>))
}

/// Whether `request` is for the token endpoint: `POST /connect/token`, whatever its query.
pub(crate) fn is_token_request<B>(request: &Request<B>) -> bool {
    request.method() == Method::POST && request.uri().path() == PATH
}

/// The token endpoint without the router: what [`super::router`] does for a token request,
/// its layers included (the `Authorization` header marked sensitive, the request timeout,
/// 408), called by the accept loop (`crate::serve`) for the requests most of its traffic is,
/// so that they skip the router's per-route boxes and allocations (BENCHMARKS.md, issue 31).
/// The accept loop uses it only where no layer of a caller's wraps the router, and without
/// request spans (`crate::telemetry`), which the router's layer makes.
pub(crate) async fn direct<B>(state: AppState, mut request: Request<B>) -> Response
where
    B: HttpBody<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    if let axum::http::header::Entry::Occupied(mut values) =
        request.headers_mut().entry(AUTHORIZATION)
    {
        for value in values.iter_mut() {
            value.set_sensitive(true);
        }
    }
    let timeout = state.config().request_timeout;
    let mut answer = std::pin::pin!(token(State(state), request));
    // Polled once before the timer is armed: a request whose body is in and whose grant
    // waits on nothing remote is answered in that poll, and costs no entry in tokio's timer
    // wheel. One that waits gets the whole timeout from then, its first poll's few
    // microseconds of work later than the router's layer would start it.
    let first = std::future::poll_fn(|cx| Poll::Ready(answer.as_mut().poll(cx))).await;
    if let Poll::Ready(response) = first {
        return response;
    }
    match tokio::time::timeout(timeout, answer).await {
        Ok(response) => response,
        Err(_) => StatusCode::REQUEST_TIMEOUT.into_response(),
    }
}

/// The body of RFC 6749 section 5.1, written directly rather than through a JSON encoder:
/// the token is base64url and dots, and scopes are scope-tokens (RFC 6749 section 3.3: no
/// `"`, no `\`, no control characters), so nothing in it needs escaping. Pushed piece by
/// piece rather than through `format!`, whose machinery cost a token about 2,600
/// instructions (BENCHMARKS.md, issue 31).
fn response_body(response: &TokenResponse) -> String {
    let mut expires_in = itoa::Buffer::new();
    let mut body = String::with_capacity(response.access_token.len() + 160);
    for part in [
        r#"{"access_token":""#,
        &response.access_token,
        r#"","token_type":""#,
        response.token_type.as_str(),
        r#"","expires_in":"#,
        expires_in.format(response.expires_in),
        r#","scope":""#,
    ] {
        body.push_str(part);
    }
    for (i, scope) in response.scope.iter().enumerate() {
        if i > 0 {
            body.push(' ');
        }
        body.push_str(scope.as_str());
    }
    body.push_str(r#""}"#);
    body
}

/// `POST /connect/token` (RFC 6749 sections 4.4.2 and 4.4.3): read, decide, record, answer.
async fn token<B>(State(state): State<AppState>, request: Request<B>) -> Response
where
    B: HttpBody<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    let started = Instant::now();
    let (parts, body) = split(request, state.config().body_limit).await;
    let slot = match state.in_flight().admit() {
        Ok(slot) => slot,
        Err(busy) => {
            state
                .metrics()
                .refused(NO_PLAN, ErrorCode::TemporarilyUnavailable);
            return OAuthError::from(busy).into_response();
        }
    };
    let source = client_ip(&state, &parts);
    let (decided, result) = if state.too_stale() {
        // What the registry says of clients (disabled since?) and plans may no longer hold.
        let stale = OAuthError::store_unavailable(
            "the registry is out of date: the store does not answer; retry later",
        );
        (Decided::default(), Err(stale))
    } else {
        match read(&parts, body) {
            Err((scope, error)) => (
                Decided {
                    scope,
                    ..Decided::default()
                },
                Err(error),
            ),
            Ok(read) => {
                let certificate = peer_certificate(&state, &parts);
                let grant = TokenGrant {
                    request: &read.request,
                    credentials: read.credentials(&parts, certificate.as_ref()),
                    dpop_proof: proof_header(&parts.headers),
                    source,
                };
                let Grant { decided, result } = state.grantor().issue(grant, &slot).await;
                let realm = &state.config().realm;
                (decided, result.map_err(|r| OAuthError::refused(r, realm)))
            }
        }
    };
    let response = answer(&state, source, &decided, result);
    if crate::telemetry::on() {
        crate::telemetry::record_client(&parts.extensions, &decided.client_id);
    }
    state.metrics().observe(started.elapsed());
    response
}

/// Records what was decided (metrics, usage, refusals, the audit trail) and writes the
/// answer: the token (RFC 6749 section 5.1) or the error (section 5.2), with the rate limit
/// fields of the plan's rate when the request was allowed under one.
fn answer(
    state: &AppState,
    source: Option<std::net::IpAddr>,
    decided: &Decided,
    result: Result<Issued, OAuthError>,
) -> Response {
    let plan = decided.plan.as_ref().map_or(NO_PLAN, |p| p.name.as_str());
    // A refused request's scope may hold anything: only names some plan grants are logged.
    let scope = match &result {
        Ok(_) => std::borrow::Cow::Borrowed(decided.scope.as_str()),
        Err(_) => {
            let registry = state.registry();
            audit::scope_for_log(&decided.scope, |name| registry.knows_scope(name)).into()
        }
    };
    let subject = Subject {
        client_id: &decided.client_id,
        plan,
        scope: &scope,
        source,
    };
    match result {
        Ok(issued) => {
            state.metrics().issued(plan, issued.reused);
            state.usage().count(&decided.client_id, true);
            let federated = decided.federated.as_ref();
            audit::issued(&subject, &issued.jti, issued.reused, federated);
            let mut response = (
                StatusCode::OK,
                NO_STORE,
                [(CONTENT_TYPE, HeaderValue::from_static("application/json"))],
                response_body(&issued.response),
            )
                .into_response();
            if let Some((rate, decision)) = decided.allowed_under {
                set_rate_limit_fields(response.headers_mut(), rate, decision);
            }
            // RFC 9449 section 8.2: the nonce for the client's next proof.
            if let Some(nonce) = issued.dpop_nonce {
                if let Ok(value) = HeaderValue::from_str(&nonce) {
                    response.headers_mut().insert("dpop-nonce", value);
                }
            }
            response
        }
        Err(error) => {
            state.metrics().refused(plan, error.code());
            // An identified client's refusal, a disabled one's too, is metered and listed.
            if decided.plan.is_some() || decided.disabled {
                state.usage().count(&decided.client_id, false);
                let now = state.clock().now();
                state
                    .refusals()
                    .record(&decided.client_id, error.code(), now);
            }
            audit::refused(&subject, error.code());
            let rate_fields = decided
                .allowed_under
                .map(|(rate, decision)| rate_limit_fields(rate, decision))
                .unwrap_or_default();
            error.with_headers(rate_fields).into_response()
        }
    }
}

/// A token request's body as read: the grant's parameters and the client assertion.
struct Read {
    request: TokenRequest,
    /// `client_assertion` (RFC 7521 section 4.2).
    assertion: Option<String>,
    /// `client_assertion_type`.
    assertion_type: Option<String>,
}

impl Read {
    /// The credentials the request carries: in the body, the `Authorization` header of
    /// `parts`, or the client `certificate`.
    fn credentials<'a>(
        &'a self,
        parts: &'a Parts,
        certificate: Option<&'a PeerCertificate>,
    ) -> Credentials<'a> {
        let authorization: Authorization<'a> = authorization(&parts.headers);
        Credentials {
            authorization,
            client_id: self.request.client_id.as_ref(),
            client_secret: self.request.client_secret.as_ref(),
            assertion: self.assertion.as_deref().map(|jwt| Assertion {
                kind: self.assertion_type.as_deref(),
                jwt,
            }),
            certificate,
        }
    }
}

/// Reads the form of a token request (RFC 6749 section 4.4.2, RFC 7521 section 4.2); an
/// error with the scope requested when the request got as far as naming one.
fn read(parts: &Parts, body: Result<Bytes, OAuthError>) -> Result<Read, (String, OAuthError)> {
    let names = [
        "grant_type",
        "scope",
        "client_id",
        "client_secret",
        "client_assertion",
        "client_assertion_type",
    ];
    let form = read_form(parts, body, &names).map_err(|e| (String::new(), e))?;
    let pairs = form.pairs().map_err(|e| (String::new(), e))?;
    let request = TokenRequest::from_form(&pairs).map_err(|e| {
        let description = e.error_description.unwrap_or_default();
        let error = match e.error {
            ErrorCode::InvalidTarget => OAuthError::invalid_target(description),
            _ => OAuthError::invalid_request(description),
        };
        (String::new(), error)
    })?;
    let assertion = |name| {
        single(&pairs, name)
            .map(|v| v.map(str::to_owned))
            .map_err(|e| (request.scope.clone().unwrap_or_default(), e))
    };
    Ok(Read {
        assertion: assertion("client_assertion")?,
        assertion_type: assertion("client_assertion_type")?,
        request,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_proto::token::TokenType;
    use tessera_proto::ScopeSet;

    #[test]
    fn the_written_body_is_the_json_of_the_response() {
        let response = TokenResponse {
            access_token: "eyJh.eyJz.c2ln-_".into(),
            token_type: TokenType::Bearer,
            expires_in: 3600,
            scope: ScopeSet::parse("news-api a!#$%&'()*+,-./:;<=>?@[]^_`{|}~").unwrap(),
        };
        let written: TokenResponse = serde_json::from_str(&response_body(&response)).unwrap();
        assert_eq!(written, response);
    }
}
