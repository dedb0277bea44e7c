//! The HTTP routes, one module per endpoint family, merged under one layer stack; and the
//! pieces the OAuth endpoints share: form bodies and client authentication.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{ConnectInfo, Request};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, StatusCode};
use axum::Router;
use tessera_proto::form;
use tessera_store::Plan;
use tower_http::sensitive_headers::SetSensitiveRequestHeadersLayer;
use tower_http::timeout::TimeoutLayer;

use crate::assertion::Federated;
use crate::auth::AuthFailure;
use crate::error::OAuthError;
use crate::key_sets::Outbound;
use crate::limits::{canonical, Busy, Slot};
use crate::registry::Registry;
use crate::{audit, auth, secrets, AppState};

pub(crate) mod admin;
pub(crate) mod console;
pub(crate) mod discovery;
pub(crate) mod health;
pub(crate) mod introspection;
pub(crate) mod metrics;
pub(crate) mod openapi;
pub(crate) mod revocation;
pub(crate) mod token;

/// The whole application.
pub(crate) fn router(state: AppState) -> Router {
    let config = state.config();
    let timeout = config.request_timeout;
    Router::new()
        .merge(token::router())
        .merge(introspection::router())
        .merge(revocation::router())
        .merge(discovery::router())
        .merge(health::router())
        .merge(openapi::router())
        .nest("/admin/v1", admin::router())
        .merge(if config.console {
            console::router(&state)
        } else {
            Router::new()
        })
        .merge(if config.metrics_on_main_listener {
            metrics::router()
        } else {
            Router::new()
        })
        .with_state(state)
        // A client that sends its request too slowly is cut off (408).
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            timeout,
        ))
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
pub(crate) async fn split(request: Request, limit: usize) -> (Parts, Result<Bytes, OAuthError>) {
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

/// The client certificate of the request (RFC 8705): the TLS connection's, or, from a
/// trusted proxy only, the one in its `--client-cert-header`. From anyone else that header
/// is ignored: it would let a caller claim any certificate.
pub(crate) fn peer_certificate(
    state: &AppState,
    parts: &Parts,
) -> Option<crate::mtls::PeerCertificate> {
    if let Some(certificate) = parts.extensions.get::<crate::mtls::PeerCertificate>() {
        return Some(certificate.clone());
    }
    let name = state.config().client_cert_header.as_ref()?;
    let peer = parts
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(addr)| canonical(addr.ip()))?;
    let trusted = state
        .config()
        .trusted_proxies
        .iter()
        .any(|proxy| canonical(*proxy) == peer);
    if !trusted {
        return None;
    }
    let mut values = parts.headers.get_all(name).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return None;
    };
    let der = tessera_verify::ClientCertificate::from_header(value.to_str().ok()?)?;
    Some(crate::mtls::PeerCertificate(
        vec![rustls::pki_types::CertificateDer::from(der.0)].into(),
    ))
}

/// Reads an `application/x-www-form-urlencoded` body strictly (RFC 6749 Appendix B).
/// OAuth parameters in the query string are refused (RFC 6749 2.3.1 and 3.2).
pub(crate) fn read_form(
    parts: &Parts,
    body: Result<Bytes, OAuthError>,
    names: &[&str],
) -> Result<Vec<(String, String)>, OAuthError> {
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
    let body = body?;
    let body = std::str::from_utf8(&body)
        .map_err(|_| OAuthError::invalid_request("request body is not UTF-8"))?;
    form::parse(body).map_err(|e| OAuthError::invalid_request(e.to_string()))
}

/// The single value of parameter `name` ([`form::single`]); a repeat is `invalid_request`
/// (RFC 6749 3.2), and an empty value counts as absent (RFC 6749 3.1).
pub(crate) fn single<'a>(
    pairs: &'a [(String, String)],
    name: &str,
) -> Result<Option<&'a str>, OAuthError> {
    let value = form::single(pairs, name)
        .map_err(|repeated| OAuthError::invalid_request(repeated.to_string()))?;
    Ok(value.filter(|v| !v.is_empty()))
}

/// Checks presented credentials: a client assertion first, with the client's registered keys
/// (`private_key_jwt`, `crate::assertion`, which may fetch them) or, for a platform's token
/// (its `iss` is not the client), with the client's trust policies (workload identity
/// federation); then what every method shares.
async fn check(
    state: &AppState,
    registry: &Registry,
    presented: &auth::Presented,
    now: tessera_store::Timestamp,
    client_ca: Option<&dyn rustls::server::danger::ClientCertVerifier>,
    outbound: Outbound<'_>,
) -> Result<(Arc<Plan>, Option<Federated>), AuthFailure> {
    let clients = state.live().clients();
    let mut federated = None;
    if let Some(assertion) = presented.assertion() {
        let id = presented.client_id.as_str();
        let registered = clients.with(id, |client| {
            (client.auth_method == tessera_store::AuthMethod::PrivateKeyJwt)
                .then(|| crate::mtls::decode_match(client.secret_hash()))
                .flatten()
        });
        let Some(keys) = registered else {
            return Err(AuthFailure::Unknown);
        };
        let platform =
            crate::assertion::unverified_claim(assertion, "iss").is_some_and(|iss| iss != id);
        let policies = if platform {
            state
                .assertions()
                .policies_of(state, &presented.client_id)
                .await
        } else {
            Arc::default()
        };
        if !policies.is_empty() {
            federated = Some(
                state
                    .assertions()
                    .verify_federated(state, &policies, assertion, outbound)
                    .await
                    .map_err(AuthFailure::from)?,
            );
        } else {
            match keys {
                // Another method: said only once the client proved itself, as for a secret.
                None => return Err(AuthFailure::WrongSecret),
                Some(keys) => state
                    .assertions()
                    .verify(state, id, &keys, assertion, outbound)
                    .await
                    .map_err(AuthFailure::from)?,
            }
        }
    }
    let plan = auth::authenticate(
        registry,
        clients,
        state.secrets(),
        presented,
        now,
        client_ca,
        federated.is_some(),
    )?;
    Ok((plan, federated))
}

/// The calling client, authenticated (RFC 6749 2.3.1) with brute-force protection per
/// source address: wrong credentials count against the address, a request without any (a
/// client waiting for the challenge) does not. Also the id presented, whatever the outcome,
/// for the audit trail.
pub(crate) struct Caller {
    /// The client id presented; empty when none could be read.
    pub presented_id: String,
    /// The client's plan, or the answer to give.
    pub plan: Result<Arc<Plan>, OAuthError>,
    /// `x5t#S256` of the certificate the client authenticated with (RFC 8705), if it did:
    /// its tokens are bound to it.
    pub bound_to: Option<String>,
    /// The trust policy and external identity, when a platform's token authenticated it.
    pub federated: Option<Federated>,
}

///
/// Checking an assertion may fetch keys (`crate::key_sets`): only while the caller has
/// failures left for the client, and with the request's in-flight `slot` lent back while
/// it waits.
pub(crate) async fn authenticate_client(
    state: &AppState,
    registry: &Registry,
    headers: &HeaderMap,
    ip: Option<IpAddr>,
    body: auth::FromBody<'_>,
    certificate: Option<&crate::mtls::PeerCertificate>,
    slot: &Slot,
) -> Caller {
    let throttle = state.throttle();
    let realm = &state.config().realm;
    let presented = match auth::presented(headers, body, certificate) {
        Ok(presented) => presented,
        Err(error) => {
            return Caller {
                presented_id: String::new(),
                plan: Err(OAuthError::credentials(error, realm)),
                bound_to: None,
                federated: None,
            }
        }
    };
    // Only a certificate needs the CA: a secret's request takes no lock for it.
    let client_ca = presented
        .certificate()
        .and_then(|_| state.config().client_ca());
    let client_ca = client_ca.as_deref();
    let now = state.clock().now();
    let outbound = Outbound {
        throttle,
        source: ip,
        client: presented.client_id.as_str(),
        slot,
    };
    let mut result = check(state, registry, &presented, now, client_ca, outbound).await;
    // An id of the generated shape may name a client created a moment ago by the CLI or
    // another instance: the store is read (one read at a time, bounded, none while the
    // store does not answer) before it is refused. Client ids are not secret (RFC 6749
    // section 2.2), so that this answer may take longer than a wrong secret's tells nothing
    // that must be kept. The request waits without its in-flight slot, and takes one again
    // only for a client the read found: refusing the rest needs none.
    let id = presented.client_id.as_str();
    if matches!(result, Err(AuthFailure::Unknown)) && secrets::is_generated_client_id(id) {
        match slot
            .lend_then(state.refresh_for_unknown(id), |found| *found)
            .await
        {
            Ok(true) => {
                let registry = state.registry();
                result = check(state, &registry, &presented, now, client_ca, outbound).await;
            }
            Ok(false) => {}
            Err(Busy) => result = Err(AuthFailure::Overloaded),
        }
    }
    // An id that names no client is the caller's to choose (a secret, swapped with the id):
    // it is logged as a digest only.
    let presented_id = if matches!(result, Err(AuthFailure::Unknown)) {
        audit::unregistered(presented.client_id.as_str())
    } else {
        presented.client_id.as_str().to_owned()
    };
    // Only failures are counted, after the check: correct credentials are never throttled.
    // A request that found no slot after a wait failed nothing.
    if let Some(failure) = result
        .as_ref()
        .err()
        .filter(|f| **f != AuthFailure::Overloaded)
    {
        let known = (*failure != AuthFailure::Unknown).then_some(presented.client_id.as_str());
        if let Some(retry) = throttle.failed(ip, known).await {
            return Caller {
                presented_id,
                plan: Err(OAuthError::throttled(throttle.rate(), retry)),
                bound_to: None,
                federated: None,
            };
        }
    }
    let (plan, federated) = match result {
        Ok((plan, federated)) => (Ok(plan), federated),
        Err(failure) => (Err(OAuthError::client_refused(failure, realm)), None),
    };
    Caller {
        presented_id,
        bound_to: plan
            .is_ok()
            .then(|| presented.certificate().and_then(|c| c.thumbprint()))
            .flatten(),
        plan,
        federated,
    }
}
