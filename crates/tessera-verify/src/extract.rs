//! axum extractors for protected handlers.
//!
//! The [`Verifier`] is found in the router state through `FromRef`, as any substate is: use the
//! verifier itself as the state, or a state struct with `impl FromRef<AppState> for Verifier`.
//! No layer is needed, and a route that forgets its extractor simply is not protected, which
//! a handler signature makes visible.
//!
//! - [`VerifiedToken`]: a valid token, whatever its scopes.
//! - [`Scoped<S>`]: a valid token with the scope named by the marker type `S`
//!   ([`RequiredScope`]); 403 `insufficient_scope` otherwise.
//! - [`UserToken`]: a valid token that acts for a user; 401
//!   `insufficient_user_authentication` (RFC 9470) for an application-only token.
//!
//! For a check the types cannot express, [`VerifiedToken::require_scope`] and
//! [`VerifiedToken::require_user`] return the same rejections from inside a handler.
//!
//! Each extractor accepts the token through [`Verifier::verify_request`] (see
//! [`crate::request`] for how the token is read and its binding checked), with the request's
//! `OriginalUri` and the [`ClientCertificate`](crate::ClientCertificate) the API put in the
//! request's extensions.
//!
//! The first extractor to verify stores the [`VerifiedToken`] in the request extensions, so
//! `Scoped<A>` and `UserToken` in one handler verify the signature once (per verifier), and
//! the request is counted once against its plan's limits ([`crate::limits`]: over them, the
//! rejection is a 429; within them, the fields reach the answer through
//! [`rate_limit_headers`](crate::limits::rate_limit_headers)).

use std::marker::PhantomData;
use std::ops::Deref;
use std::sync::Arc;

use axum::extract::{FromRef, FromRequestParts};
use axum::http::request::Parts;
use tessera_proto::AccessTokenClaims;

use crate::limits::{Allowance, FieldsSlot};
use crate::rejection::{AuthError, AuthRejection, Challenge};
use crate::{AccessRequest, Verifier};

/// The claims of a token that passed every check of [`Verifier::verify_request`]: its
/// signature, claims and binding. Only this crate can make one, so holding one proves the
/// check ran.
#[derive(Debug, Clone)]
pub struct VerifiedToken {
    /// Shared with the cache of verified tokens (and every clone of this one).
    claims: Arc<AccessTokenClaims>,
    challenge: Challenge,
    rate_limit: Option<Allowance>,
}

impl VerifiedToken {
    pub(crate) fn new(
        claims: Arc<AccessTokenClaims>,
        challenge: Challenge,
        rate_limit: Option<Allowance>,
    ) -> Self {
        Self {
            claims,
            challenge,
            rate_limit,
        }
    }

    /// The `RateLimit-Policy` and `RateLimit` fields to answer this request with, when the
    /// verifier enforces plan limits and the token's plan has some
    /// ([`crate::limits`]). The extractors hand them to
    /// [`rate_limit_headers`](crate::limits::rate_limit_headers); elsewhere, add them with
    /// [`Allowance::apply`].
    pub fn rate_limit(&self) -> Option<&Allowance> {
        self.rate_limit.as_ref()
    }

    /// The claims.
    pub fn claims(&self) -> &AccessTokenClaims {
        &self.claims
    }

    /// The claims, owned: a copy while the cache of verified tokens (or a clone of this
    /// token) still holds them.
    pub fn into_claims(self) -> AccessTokenClaims {
        Arc::unwrap_or_clone(self.claims)
    }

    /// 403 `insufficient_scope` unless the token grants `scope`.
    pub fn require_scope(&self, scope: &str) -> Result<(), AuthRejection> {
        if self.claims.has_scope(scope) {
            Ok(())
        } else {
            Err(self.reject(AuthError::InsufficientScope(scope.to_owned().into())))
        }
    }

    /// 401 `insufficient_user_authentication` unless the token acts for a user.
    pub fn require_user(&self) -> Result<(), AuthRejection> {
        if self.claims.has_user_context() {
            Ok(())
        } else {
            Err(self.reject(AuthError::UserRequired))
        }
    }

    fn reject(&self, error: AuthError) -> AuthRejection {
        AuthRejection::new(self.challenge.clone(), error)
    }
}

impl Deref for VerifiedToken {
    type Target = AccessTokenClaims;
    fn deref(&self) -> &AccessTokenClaims {
        &self.claims
    }
}

impl<S> FromRequestParts<S> for VerifiedToken
where
    Verifier: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = AuthRejection;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        verified(parts, &Verifier::from_ref(state), None).await
    }
}

/// Verifies the request's token once per verifier and request, with `scope` checked before
/// the audience ([`Verifier::verify_request`] and its scope-first order).
async fn verified(
    parts: &mut Parts,
    verifier: &Verifier,
    scope: Option<&'static str>,
) -> Result<VerifiedToken, AuthRejection> {
    if let Some(done) = parts.extensions.get::<VerifiedBy>() {
        if done.verifier.same_as(verifier) {
            return match scope {
                Some(scope) => done.token.require_scope(scope).map(|()| done.token.clone()),
                None => Ok(done.token.clone()),
            };
        }
    }
    let token = verifier
        .verify_request_for(&AccessRequest::from_parts(parts), scope)
        .await?;
    if let (Some(fields), Some(slot)) = (token.rate_limit(), parts.extensions.get::<FieldsSlot>()) {
        *slot
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(fields.clone());
    }
    parts.extensions.insert(VerifiedBy {
        verifier: verifier.clone(),
        token: token.clone(),
    });
    Ok(token)
}

/// A token already verified in this request, and by which verifier: two routers with
/// different audiences must not share the result. Private, so no one else can insert one.
#[derive(Debug, Clone)]
struct VerifiedBy {
    verifier: Verifier,
    token: VerifiedToken,
}

/// Names the scope a [`Scoped`] extractor requires. One marker type per scope:
///
/// ```
/// use tessera_verify::RequiredScope;
///
/// struct QuotesRead;
/// impl RequiredScope for QuotesRead {
///     const SCOPE: &'static str = "quotes:read";
/// }
/// ```
pub trait RequiredScope {
    /// The scope token (RFC 6749 section 3.3).
    const SCOPE: &'static str;
}

/// A [`VerifiedToken`] that grants `S::SCOPE`; otherwise 403 `insufficient_scope` with
/// `scope="S::SCOPE"` in the challenge (RFC 6750 section 3.1).
pub struct Scoped<S> {
    token: VerifiedToken,
    _scope: PhantomData<fn() -> S>,
}

impl<S> Scoped<S> {
    /// The verified token.
    pub fn into_inner(self) -> VerifiedToken {
        self.token
    }
}

impl<S: RequiredScope> std::fmt::Debug for Scoped<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scoped")
            .field("scope", &S::SCOPE)
            .field("token", &self.token)
            .finish()
    }
}

impl<S> Deref for Scoped<S> {
    type Target = VerifiedToken;
    fn deref(&self) -> &VerifiedToken {
        &self.token
    }
}

impl<St, S> FromRequestParts<St> for Scoped<S>
where
    Verifier: FromRef<St>,
    St: Send + Sync,
    S: RequiredScope,
{
    type Rejection = AuthRejection;

    async fn from_request_parts(parts: &mut Parts, state: &St) -> Result<Self, Self::Rejection> {
        let token = verified(parts, &Verifier::from_ref(state), Some(S::SCOPE)).await?;
        Ok(Self {
            token,
            _scope: PhantomData,
        })
    }
}

/// A [`VerifiedToken`] that acts for a user (`AccessTokenClaims::has_user_context`); an
/// application-only token gets 401 `insufficient_user_authentication` (RFC 9470 section 3).
/// Tessera issues only application tokens, so this guards endpoints meant for another issuer's
/// user tokens, or not yet open to applications.
#[derive(Debug, Clone)]
pub struct UserToken(VerifiedToken);

impl UserToken {
    /// The verified token.
    pub fn into_inner(self) -> VerifiedToken {
        self.0
    }
}

impl Deref for UserToken {
    type Target = VerifiedToken;
    fn deref(&self) -> &VerifiedToken {
        &self.0
    }
}

impl<S> FromRequestParts<S> for UserToken
where
    Verifier: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = AuthRejection;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let token = VerifiedToken::from_request_parts(parts, state).await?;
        token.require_user()?;
        Ok(Self(token))
    }
}
