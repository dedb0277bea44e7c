//! Who may call the admin API: an access token that this Tessera issued, accepted as any
//! API accepts its tokens, through `tessera-verify`'s [`Verifier::verify_request`]: `Bearer`
//! (RFC 6750 section 2.1) or `DPoP` with a proof (RFC 9449 section 7.1), for the audience of
//! the issuer itself, and a bound token only with what binds it: its DPoP key's proof for
//! this request, or the client certificate it was issued to (RFC 8705 section 3) on this
//! connection or from the trusted proxy. Then, against the live registry, that it is not
//! revoked and that its client still exists, is enabled and is on a plan that grants the
//! scope used. So taking the admin right away (disabling the client, changing its plan)
//! takes effect at once, not when its token expires.
//!
//! Handlers say what they need in their signature: a [`Caller<Read>`] or a
//! [`Caller<Write>`] argument, checked before any other part of the request is read.

use std::marker::PhantomData;
use std::sync::Arc;

use axum::extract::{FromRequestParts, OriginalUri};
use axum::http::request::Parts;
use axum::http::Uri;
use tessera_proto::scope::{ADMIN_READ_SCOPE, ADMIN_SCOPE};
use tessera_proto::{AccessTokenClaims, JwkSet};
use tessera_store::Plan;
use tessera_verify::{AccessRequest, ClientCertificate, Verifier};

use crate::control::problem::Problem;
use crate::state::AdminGuard;
use crate::AppState;

/// The `realm` of the admin API's challenges.
pub(crate) const REALM: &str = "tessera-admin";

/// An authenticated admin caller with the right `R`: [`Read`] or [`Write`].
#[derive(Debug, Clone)]
pub(crate) struct Caller<R> {
    /// The admin client's id, for the audit trail and idempotency keys.
    pub(crate) client_id: String,
    /// The caller's address, as the token endpoint's audit names it
    /// (`crate::routes::client_ip`), for the audit trail.
    pub(crate) source: Option<std::net::IpAddr>,
    /// `console` when the console made the call on a browser's behalf, else `admin-api`.
    pub(crate) channel: &'static str,
    right: PhantomData<fn() -> R>,
}

/// Marks a request the console makes in-process on a browser's behalf (an extension, which
/// no HTTP caller can set), so that its audit events say so.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ViaConsole;

/// What an admin handler may do; the scope it needs.
pub(crate) trait Right {
    /// Whether it changes anything: writes need `tessera-admin`, reads either admin scope.
    const WRITE: bool;
}

/// Reads: `tessera-admin-read` or `tessera-admin`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Read;

impl Right for Read {
    const WRITE: bool = false;
}

/// Writes: `tessera-admin`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Write;

impl Right for Write {
    const WRITE: bool = true;
}

impl<R: Right> FromRequestParts<AppState> for Caller<R> {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Problem> {
        let client_id = authorize(state, parts, R::WRITE).await?;
        let channel = if parts.extensions.get::<ViaConsole>().is_some() {
            "console"
        } else {
            "admin-api"
        };
        Ok(Self {
            client_id,
            source: crate::routes::client_ip(state, parts),
            channel,
            right: PhantomData,
        })
    }
}

impl AdminGuard {
    /// A verifier for the keys this server publishes now, the one built before while they
    /// have not changed.
    fn verifier(&self, state: &AppState) -> Result<Verifier, Problem> {
        let registry = state.registry();
        let published = registry.keys.published(state.clock().now());
        let kids: Vec<String> = published.iter().map(|k| k.kid.clone()).collect();
        let mut cached = self.verifier.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((seen, verifier)) = cached.as_ref() {
            if *seen == kids {
                return Ok(verifier.clone());
            }
        }
        let issuer = state.issuer();
        let jwks = JwkSet {
            keys: published.iter().map(|k| k.jwk.clone()).collect(),
        };
        // The issuer is the admin API's resource URL: the origin its DPoP proofs name.
        let verifier = Verifier::builder(issuer, issuer)
            .static_keys(jwks)
            .resource_url(issuer)
            .realm(REALM)
            .clock(state.clock().clone())
            .build()
            .map_err(|e| Problem::unavailable(&e))?;
        *cached = Some((kids, verifier.clone()));
        Ok(verifier)
    }
}

/// Authenticates the caller of an admin request and returns its client id; `write` needs
/// `tessera-admin`, a read either admin scope.
async fn authorize(state: &AppState, parts: &Parts, write: bool) -> Result<String, Problem> {
    let token = own_token(state, parts, REALM).await?;
    let allowed = token.holds(ADMIN_SCOPE) || (!write && token.holds(ADMIN_READ_SCOPE));
    if !allowed {
        return Err(Problem::insufficient_scope(
            REALM,
            if write { ADMIN_SCOPE } else { ADMIN_READ_SCOPE },
        ));
    }
    Ok(token.claims.client_id)
}

/// An access token this server issued for its own audience (the issuer), accepted by
/// [`own_token`]: its claims and its client's plan now.
pub(crate) struct OwnToken {
    /// The token's claims.
    pub(crate) claims: AccessTokenClaims,
    /// The plan its client is on now.
    pub(crate) plan: Arc<Plan>,
}

impl OwnToken {
    /// Whether the token grants `scope`: a scope counts only while both the token and the
    /// client's plan carry it.
    pub(crate) fn holds(&self, scope: &str) -> bool {
        self.claims.has_scope(scope) && self.plan.scopes.iter().any(|s| s.as_str() == scope)
    }
}

/// Accepts a request's access token as one this server issued for itself, as the module
/// says (the admin API's and `POST /api-usage`'s): verified, not revoked, its client still
/// there and enabled. A refusal is the problem of RFC 6750 section 3 in `realm`.
pub(crate) async fn own_token(
    state: &AppState,
    parts: &Parts,
    realm: &str,
) -> Result<OwnToken, Problem> {
    // The URL a DPoP proof names: the issuer's, and the path under it that the client called,
    // whatever prefix routing stripped.
    let path = parts
        .extensions
        .get::<OriginalUri>()
        .map_or(&parts.uri, |OriginalUri(uri)| uri)
        .path();
    let issuer_path = state
        .issuer()
        .split_once("://")
        .and_then(|(_, rest)| rest.find('/').map(|i| &rest[i..]))
        .unwrap_or("")
        .trim_end_matches('/');
    let uri: Uri = format!("{issuer_path}{path}")
        .parse()
        .map_err(|_| Problem::invalid_parameter("path", "the request path is malformed"))?;
    let certificate = crate::mtls::peer_certificate(state, parts).and_then(|presented| {
        presented
            .end_entity()
            .map(|der| ClientCertificate(der.to_vec()))
    });
    let request = AccessRequest::new(&parts.method, &uri, &parts.headers)
        .with_certificate(certificate.as_ref());
    let claims = state
        .admin_guard()
        .verifier(state)?
        .verify_request(&request)
        .await
        .map_err(|rejection| Problem::refused_token(realm, &rejection))?
        .into_claims();
    let invalid = |why: &str| Problem::unauthorized(realm, Some("invalid_token"), why);
    if state.is_revoked(&claims.jti) {
        return Err(invalid("the token was revoked"));
    }
    let registry = state.registry();
    let plan = state
        .live()
        .clients()
        .with(&claims.client_id, |c| c.enabled.then_some(c.plan))
        .flatten()
        .and_then(|slot| registry.plan(slot).cloned())
        .ok_or_else(|| invalid("the token's client is disabled or gone"))?;
    Ok(OwnToken { claims, plan })
}
