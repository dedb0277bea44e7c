//! Who may call the admin API: a bearer token (RFC 6750 section 2.1) that this Tessera
//! issued, checked by `tessera-verify` as any API checks its tokens, for the audience of
//! the issuer itself; then, against the live registry, that it is not revoked and that its
//! client still exists, is enabled and is on a plan that grants the scope used. So taking
//! the admin right away (disabling the client, changing its plan) takes effect at once,
//! not when its token expires.

use std::sync::Mutex;

use axum::http::{header, HeaderMap};
use tessera_proto::JwkSet;
use tessera_verify::Verifier;

use super::{ADMIN_READ_SCOPE, ADMIN_SCOPE};
use crate::error::problem::Problem;
use crate::AppState;

/// The `realm` of the admin API's challenges.
pub(crate) const REALM: &str = "tessera-admin";

/// An authenticated admin caller.
#[derive(Debug, Clone)]
pub(crate) struct Caller {
    /// The admin client's id, for the audit trail and idempotency keys.
    pub(crate) client_id: String,
}

/// The admin API's own state: the verifier, rebuilt when the published keys change, and
/// one lock that orders this instance's writes, so that an `If-Match` check and the write
/// it guards are not interleaved with another request's here.
#[derive(Debug, Default)]
pub(crate) struct AdminGuard {
    verifier: Mutex<Option<(Vec<String>, Verifier)>>,
    pub(crate) writes: tokio::sync::Mutex<()>,
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
        let issuer = &state.config().issuer;
        let jwks = JwkSet {
            keys: published.iter().map(|k| k.jwk.clone()).collect(),
        };
        let verifier = Verifier::builder(issuer.clone(), issuer.clone())
            .static_keys(jwks)
            .realm(REALM)
            .clock(state.clock().clone())
            .build()
            .map_err(|e| Problem::unavailable(&e))?;
        *cached = Some((kids, verifier.clone()));
        Ok(verifier)
    }
}

/// Authenticates the caller of an admin request; `write` needs `tessera-admin`, a read
/// either admin scope.
pub(crate) async fn authorize(
    state: &AppState,
    headers: &HeaderMap,
    write: bool,
) -> Result<Caller, Problem> {
    let mut values = headers.get_all(header::AUTHORIZATION).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return Err(Problem::unauthorized(
            REALM,
            None,
            "a bearer token is required",
        ));
    };
    let token = value
        .to_str()
        .ok()
        .and_then(|v| {
            let (scheme, token) = v.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
        })
        .filter(|t| !t.is_empty())
        .ok_or_else(|| Problem::unauthorized(REALM, None, "a bearer token is required"))?;
    let invalid = |why: &str| Problem::unauthorized(REALM, Some("invalid_token"), why);
    let claims = state
        .admin_guard()
        .verifier(state)?
        .verify(token)
        .await
        .map_err(|e| invalid(&e.to_string()))?;
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
    // A scope counts only while both the token and the client's plan carry it.
    let holds = |scope: &str| {
        claims.scope.split(' ').any(|s| s == scope)
            && plan.scopes.iter().any(|s| s.as_str() == scope)
    };
    let allowed = holds(ADMIN_SCOPE) || (!write && holds(ADMIN_READ_SCOPE));
    if !allowed {
        return Err(Problem::insufficient_scope(
            REALM,
            if write { ADMIN_SCOPE } else { ADMIN_READ_SCOPE },
        ));
    }
    Ok(Caller {
        client_id: claims.client_id,
    })
}
