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
//! Who the caller is, and what it may reach, is decided in one place, [`admit`], from a
//! [`Principal`]: the provider's own admin (`tessera-admin`, or `tessera-admin-read` for
//! reads) reaches everything; an organization's admin (`tessera-org-admin`, issue 28 item 5)
//! reaches its own organization's clients and usage and nothing else. Handlers say what
//! they reach in their signature: a [`Caller<R>`] for the whole registry (plans, all clients,
//! keys, trust policies, audit events), an [`OrgCaller<R>`] for one organization, the one
//! the path's `{id}` names; both are checked before any other part of the request is read.
//! Outside its own organization an organization's admin is answered 404, as for an
//! organization that does not exist, so that ids of other customers do not leak; at the
//! provider's endpoints, 403 `insufficient_scope`, whatever the path names.

use std::marker::PhantomData;
use std::sync::Arc;

use axum::extract::{FromRequestParts, OriginalUri};
use axum::http::request::Parts;
use axum::http::Uri;
use tessera_proto::scope::{ADMIN_READ_SCOPE, ADMIN_SCOPE, ORG_ADMIN_SCOPE};
use tessera_proto::{AccessTokenClaims, JwkSet};
use tessera_store::Plan;
use tessera_verify::{AccessRequest, ClientCertificate, Verifier};

use crate::control::problem::Problem;
use crate::registrar::RegistrarError;
use crate::state::AdminGuard;
use crate::AppState;

/// The `realm` of the admin API's challenges.
pub(crate) const REALM: &str = "tessera-admin";

/// Who an admin caller is: what its token and its client's plan grant now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Principal {
    /// The provider's operator: `tessera-admin` (`write`) or `tessera-admin-read`.
    Provider {
        /// Whether it may change things (`tessera-admin`).
        write: bool,
    },
    /// An organization's own admin: a client of `org` whose token and plan hold
    /// `tessera-org-admin`. It reads and changes that organization's clients and reads its
    /// usage; it never changes the organization itself (its plan, its limits).
    OrgAdmin {
        /// Its organization.
        org: String,
    },
}

/// The one rule of who may do what at the admin API. `within` is the organization the
/// operation is confined to (`None`: the whole registry); `write` whether it changes
/// anything; `org_admin_may` whether an organization's admin may do it in its own
/// organization (reading it and managing its clients, but not changing the organization).
pub(crate) fn admit(
    principal: &Principal,
    within: Option<&str>,
    write: bool,
    org_admin_may: bool,
) -> Result<(), Problem> {
    match principal {
        Principal::Provider { write: may_write } if write && !may_write => {
            Err(Problem::insufficient_scope(REALM, ADMIN_SCOPE))
        }
        Principal::Provider { .. } => Ok(()),
        Principal::OrgAdmin { .. } if within.is_none() => Err(Problem::insufficient_scope(
            REALM,
            if write { ADMIN_SCOPE } else { ADMIN_READ_SCOPE },
        )),
        // Another organization, or one that does not exist: the same answer either way.
        Principal::OrgAdmin { org } if within != Some(org.as_str()) => Err(Problem::from(
            RegistrarError::UnknownOrg(within.unwrap_or_default().to_owned()),
        )),
        Principal::OrgAdmin { .. } if !org_admin_may => {
            Err(Problem::insufficient_scope(REALM, ADMIN_SCOPE))
        }
        Principal::OrgAdmin { .. } => Ok(()),
    }
}

/// An authenticated admin caller with the right `R` ([`Read`], [`Write`] or [`Govern`]),
/// admitted by [`admit`] to what its handler reaches.
#[derive(Debug, Clone)]
pub(crate) struct Caller<R> {
    /// Who calls, for the audit trail and idempotency keys: the admin client's id, or for a
    /// person signed in to the console through single sign-on, [`Person::actor`].
    pub(crate) client_id: String,
    /// Who it is.
    pub(crate) principal: Principal,
    /// The caller's address, as the token endpoint's audit names it
    /// (`crate::routes::client_ip`), for the audit trail.
    pub(crate) source: Option<std::net::IpAddr>,
    /// `console` when the console made the call on a browser's behalf, else `admin-api`.
    pub(crate) channel: &'static str,
    right: PhantomData<fn() -> R>,
}

/// A [`Caller`] admitted to one organization: `org`, the one the path's `{id}` names.
#[derive(Debug, Clone)]
pub(crate) struct OrgCaller<R> {
    /// The caller.
    pub(crate) caller: Caller<R>,
    /// The organization the path names, which the caller may reach.
    pub(crate) org: String,
}

/// Marks a request the console makes in-process on a browser's behalf (an extension, which
/// no HTTP caller can set), so that its audit events say so.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ViaConsole;

/// A person signed in to the console through its OpenID Connect provider (issue 29): the
/// console's in-process calls carry this as an extension (which no HTTP caller can set)
/// instead of a token, and the admin API takes it as the caller, with the right the
/// person's group gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Person {
    /// The provider's issuer identifier (`iss`).
    pub(crate) issuer: String,
    /// The person's identifier there (`sub`, OpenID Connect Core section 2).
    pub(crate) subject: String,
    /// `name` (or `preferred_username`), when the ID token gave one.
    pub(crate) name: Option<String>,
    /// `email`, when the ID token gave one.
    pub(crate) email: Option<String>,
    /// Whether the person is in the admin group (else the read group).
    pub(crate) write: bool,
}

impl Person {
    /// How the audit trail names the person: name and email as given, then the subject at
    /// its issuer, which together identify the person (OpenID Connect Core section 5.7).
    pub(crate) fn actor(&self) -> String {
        let shown = match (&self.name, &self.email) {
            (Some(name), Some(email)) => format!("{name} <{email}> "),
            (Some(one), None) | (None, Some(one)) => format!("{one} "),
            (None, None) => String::new(),
        };
        format!("{shown}(sub {} at {})", self.subject, self.issuer)
    }

    /// How the console's header names the person.
    pub(crate) fn shown(&self) -> &str {
        self.name
            .as_deref()
            .or(self.email.as_deref())
            .unwrap_or(&self.subject)
    }
}

/// What an admin handler may do; the scope it needs.
pub(crate) trait Right {
    /// Whether it changes anything: writes need `tessera-admin`, reads either admin scope.
    const WRITE: bool;
    /// Whether an organization's admin may do it within its own organization.
    const ORG_ADMIN: bool;
}

/// Reads: `tessera-admin-read` or `tessera-admin`; within its organization,
/// `tessera-org-admin`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Read;

impl Right for Read {
    const WRITE: bool = false;
    const ORG_ADMIN: bool = true;
}

/// Writes: `tessera-admin`; to its organization's clients, `tessera-org-admin`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Write;

impl Right for Write {
    const WRITE: bool = true;
    const ORG_ADMIN: bool = true;
}

/// Writes to an organization itself (its plan, name, switch, deletion): `tessera-admin`
/// only, never the organization's own admin.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Govern;

impl Right for Govern {
    const WRITE: bool = true;
    const ORG_ADMIN: bool = false;
}

impl<R: Right> Caller<R> {
    /// Authenticates the request's caller, not yet admitted to anything: a person the
    /// console signed in (the provider's admin, with the right the person's group gave), or
    /// the token's client.
    async fn authenticate(parts: &Parts, state: &AppState) -> Result<Self, Problem> {
        let (client_id, principal) = match parts.extensions.get::<Arc<Person>>() {
            Some(person) => (
                person.actor(),
                Principal::Provider {
                    write: person.write,
                },
            ),
            None => principal(state, parts, R::WRITE).await?,
        };
        let channel = if parts.extensions.get::<ViaConsole>().is_some() {
            "console"
        } else {
            "admin-api"
        };
        Ok(Self {
            client_id,
            principal,
            source: crate::routes::client_ip(state, parts),
            channel,
            right: PhantomData,
        })
    }
}

impl<R: Right> FromRequestParts<AppState> for Caller<R> {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Problem> {
        let caller = Self::authenticate(parts, state).await?;
        admit(&caller.principal, None, R::WRITE, R::ORG_ADMIN)?;
        Ok(caller)
    }
}

impl<R: Right> FromRequestParts<AppState> for OrgCaller<R> {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Problem> {
        let caller = Caller::<R>::authenticate(parts, state).await?;
        let params = axum::extract::RawPathParams::from_request_parts(parts, state)
            .await
            .map_err(|e| Problem::invalid_parameter("path", e.body_text()))?;
        let org = params
            .iter()
            .find(|(name, _)| *name == "id")
            .map(|(_, value)| value.to_owned())
            .ok_or_else(|| Problem::invalid_parameter("path", "no organization in the path"))?;
        admit(&caller.principal, Some(&org), R::WRITE, R::ORG_ADMIN)?;
        Ok(Self { caller, org })
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

/// Authenticates the caller of an admin request: its client id, and who it is by the
/// scopes its token and its client's plan both hold now. `tessera-admin` makes the
/// provider's admin; else `tessera-org-admin` on a client of an organization that
/// organization's admin; else `tessera-admin-read` the provider's reader. Any other token
/// is refused as lacking the scope a `write` (or a read) needs.
async fn principal(
    state: &AppState,
    parts: &Parts,
    write: bool,
) -> Result<(String, Principal), Problem> {
    let token = own_token(state, parts, REALM).await?;
    let principal = if token.holds(ADMIN_SCOPE) {
        Principal::Provider { write: true }
    } else if let Some(org) = token.org.as_ref().filter(|_| token.holds(ORG_ADMIN_SCOPE)) {
        Principal::OrgAdmin {
            org: org.to_string(),
        }
    } else if token.holds(ADMIN_READ_SCOPE) {
        Principal::Provider { write: false }
    } else {
        return Err(Problem::insufficient_scope(
            REALM,
            if write { ADMIN_SCOPE } else { ADMIN_READ_SCOPE },
        ));
    };
    Ok((token.claims.client_id, principal))
}

/// An access token this server issued for its own audience (the issuer), accepted by
/// [`own_token`]: its claims and its client's plan now.
pub(crate) struct OwnToken {
    /// The token's claims.
    pub(crate) claims: AccessTokenClaims,
    /// The plan its client is on now.
    pub(crate) plan: Arc<Plan>,
    /// The organization its client belongs to now, if any.
    pub(crate) org: Option<Arc<str>>,
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
    let (plan, org) = state
        .live()
        .clients()
        .with(&claims.client_id, |c| {
            c.enabled.then(|| (c.plan, c.org().cloned()))
        })
        .flatten()
        .and_then(|(slot, org)| registry.plan(slot).cloned().map(|plan| (plan, org)))
        .ok_or_else(|| invalid("the token's client is disabled or gone"))?;
    Ok(OwnToken { claims, plan, org })
}
