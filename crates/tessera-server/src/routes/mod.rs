//! The data plane's HTTP routes, one module per endpoint family, merged under one layer
//! stack: the token endpoint, introspection, revocation, the keys and metadata, the plans'
//! API limits and the APIs' usage reports, health and metrics, and a page of links at `/`
//! (the management surface is the control plane, `control/`); and the pieces of a request the
//! OAuth endpoints read alike: the body and its form, the caller's address and
//! `Authorization` header (its client certificate: `crate::mtls::peer_certificate`).

use std::net::{IpAddr, SocketAddr};

use axum::body::Bytes;
use axum::extract::{ConnectInfo, Request};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, StatusCode};
use axum::Router;
use tessera_proto::form::{self, Pairs};
use tower_http::sensitive_headers::SetSensitiveRequestHeadersLayer;
use tower_http::timeout::TimeoutLayer;

use crate::error::OAuthError;
use crate::grant::Authorization;
use crate::limits::canonical;
use crate::AppState;

pub(crate) mod api_limits;
pub(crate) mod discovery;
pub(crate) mod health;
pub(crate) mod home;
pub(crate) mod introspection;
pub(crate) mod metrics;
pub(crate) mod revocation;
pub(crate) mod token;

/// The data plane, with its layers.
pub(crate) fn router(state: AppState) -> Router {
    let config = state.config();
    let timeout = config.request_timeout;
    // A request not done in time is cut off (408), a client that sends its request too
    // slowly among them. `token::direct` does what these layers do for the token requests
    // the accept loop answers without this router: a layer added here belongs there too.
    Router::new()
        .merge(token::router())
        .merge(introspection::router())
        .merge(revocation::router())
        .merge(discovery::router())
        .merge(api_limits::router())
        .merge(health::router())
        .merge(home::router())
        .merge(if config.metrics_on_main_listener() {
            metrics::router()
        } else {
            Router::new()
        })
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            timeout,
        ))
        .with_state(state)
        .layer(SetSensitiveRequestHeadersLayer::new([
            header::AUTHORIZATION,
        ]))
}

/// `/healthz` and `/readyz` alone, for a plain HTTP listener beside HTTPS.
pub(crate) fn health_only(state: AppState) -> Router {
    health::router().with_state(state)
}

/// `/metrics` alone, for a listener of its own (e.g. on loopback).
pub(crate) fn metrics_only(state: AppState) -> Router {
    metrics::router().with_state(state)
}

/// Splits a request into its head and its body, read up to `limit` bytes (413 past it).
/// The endpoints take the whole request rather than extractors, so that the head is
/// borrowed, not copied, on the token path.
pub(crate) async fn split<B>(
    request: Request<B>,
    limit: usize,
) -> (Parts, Result<Bytes, OAuthError>)
where
    B: axum::body::HttpBody<Data = Bytes>,
    B::Error: Into<axum::BoxError>,
{
    use http_body_util::{BodyExt, LengthLimitError, Limited};
    let (parts, body) = request.into_parts();
    let body = match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => {
            Err(OAuthError::too_large(limit))
        }
        Err(_) => Err(OAuthError::invalid_request(
            "could not read the request body",
        )),
    };
    (parts, body)
}

/// The caller's address: the peer's, or, when the peer is a trusted proxy, the last address
/// in `X-Forwarded-For` that is not a trusted proxy itself (the leftmost entries are the
/// client's to write, so only what trusted proxies appended is believed).
pub(crate) fn client_ip(state: &AppState, parts: &Parts) -> Option<IpAddr> {
    let peer = parts
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(addr)| canonical(addr.ip()))?;
    let headers = &parts.headers;
    let trusted = |ip: IpAddr| {
        state
            .config()
            .trusted_proxies
            .iter()
            .any(|proxy| canonical(*proxy) == ip)
    };
    if !trusted(peer) {
        return Some(peer);
    }
    let forwarded: Vec<&str> = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .collect();
    for hop in forwarded.iter().rev() {
        match hop.parse::<IpAddr>().map(canonical) {
            Ok(ip) if trusted(ip) => continue,
            Ok(ip) => return Some(ip),
            Err(_) => break,
        }
    }
    Some(peer)
}

/// An `application/x-www-form-urlencoded` body (RFC 6749 Appendix B) whose request
/// [`read_form`] accepted, to be read as pairs.
pub(crate) struct Form(Bytes);

impl Form {
    /// Its name-value pairs, decoded strictly, each borrowed from the body when it has
    /// nothing to decode.
    pub(crate) fn pairs(&self) -> Result<Pairs<'_>, OAuthError> {
        let body = std::str::from_utf8(&self.0)
            .map_err(|_| OAuthError::invalid_request("request body is not UTF-8"))?;
        form::parse_borrowed(body).map_err(|e| OAuthError::invalid_request(e.to_string()))
    }
}

/// Takes an `application/x-www-form-urlencoded` body (RFC 6749 Appendix B) once its
/// content type is checked; [`Form::pairs`] decodes it strictly. OAuth parameters in the
/// query string are refused (RFC 6749 2.3.1 and 3.2).
pub(crate) fn read_form(
    parts: &Parts,
    body: Result<Bytes, OAuthError>,
    names: &[&str],
) -> Result<Form, OAuthError> {
    let headers = &parts.headers;
    if let Some(query) = parts.uri.query() {
        // A query that does not parse cannot be shown to hold no credentials.
        let pairs = form::parse(query)
            .map_err(|_| OAuthError::invalid_request("malformed query string"))?;
        if pairs.iter().any(|(name, _)| names.contains(&name.as_str())) {
            return Err(OAuthError::invalid_request(
                "OAuth parameters must be sent in the body, not the query string",
            ));
        }
    }
    let is_form = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| {
            v.trim()
                .eq_ignore_ascii_case("application/x-www-form-urlencoded")
        });
    if !is_form {
        return Err(OAuthError::invalid_request(
            "Content-Type must be application/x-www-form-urlencoded",
        ));
    }
    body.map(Form)
}

/// The single value of parameter `name` ([`form::single`]); a repeat is `invalid_request`
/// (RFC 6749 3.2), and an empty value counts as absent (RFC 6749 3.1).
pub(crate) fn single<'a>(pairs: &'a Pairs<'_>, name: &str) -> Result<Option<&'a str>, OAuthError> {
    let value = form::single(pairs, name)
        .map_err(|repeated| OAuthError::invalid_request(repeated.to_string()))?;
    Ok(value.filter(|v| !v.is_empty()))
}

/// The request's `Authorization` header, for client authentication (`crate::grant`).
pub(crate) fn authorization(headers: &HeaderMap) -> Authorization<'_> {
    let mut values = headers.get_all(header::AUTHORIZATION).iter();
    match (values.next(), values.next()) {
        (None, _) => Authorization::Absent,
        (Some(_), Some(_)) => Authorization::Repeated,
        (Some(value), None) => value
            .to_str()
            .map_or(Authorization::NotAscii, Authorization::Value),
    }
}
