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
//! The token is read only from the `Authorization` header, `Bearer` (RFC 6750 section 2.1)
//! or `DPoP` (RFC 9449 section 7.1). A token bound to a DPoP key (`cnf.jkt`) is accepted only
//! as `DPoP` with one `DPoP` proof header that passes RFC 9449 section 4.3 for this request
//! (method, URI, `ath` of this token, `iat` within 60 s), is signed by the token's key and was
//! not seen before (a bounded replay memory); anything else is 401 `invalid_dpop_proof` or
//! `invalid_token` with a `DPoP` challenge. An unbound token sent as `DPoP` is refused too.
//! Otherwise:
//!
//! - no header, or another scheme (`Basic` ..): 401 with a bare challenge, no error code;
//! - `Bearer` with an empty or non-`b64token` value, or two `Authorization` headers:
//!   400 `invalid_request` (RFC 6750 section 3.1);
//! - an `access_token` query parameter: 400 `invalid_request`, even beside a good header.
//!   RFC 6750 section 2.3 makes the query method optional, and section 5.3 says not to pass
//!   tokens in page URLs: they end up in logs, history and `Referer`. Answering 401 would
//!   invite the client to retry the same URL; 400 says that the request itself is wrong,
//!   and section 3.1 names `invalid_request` for a request using more than one method or a
//!   method the server does not support;
//! - a form body (RFC 6750 section 2.2) is never read: these extractors only see the head.
//!
//! The first extractor to verify stores the [`VerifiedToken`] in the request extensions, so
//! `Scoped<A>` and `UserToken` in one handler verify the signature once (per verifier).

use std::marker::PhantomData;
use std::ops::Deref;

use axum::extract::{FromRef, FromRequestParts, Query};
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use tessera_proto::AccessTokenClaims;

use crate::dpop::{check_proof, DpopError, ProofRequest};
use crate::rejection::{AuthError, AuthRejection, Challenge};
use crate::Verifier;

/// The claims of a token that passed every check of [`Verifier::verify`]. Only this crate can
/// make one, so holding one proves the check ran.
#[derive(Debug, Clone)]
pub struct VerifiedToken {
    claims: AccessTokenClaims,
    challenge: Challenge,
}

impl VerifiedToken {
    /// The claims.
    pub fn claims(&self) -> &AccessTokenClaims {
        &self.claims
    }

    /// The claims, owned.
    pub fn into_claims(self) -> AccessTokenClaims {
        self.claims
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

/// Verifies the request's bearer token once per verifier and request. With `scope`, the
/// scope is checked before the audience: Tessera's audiences are the APIs its scopes name, so
/// an authentic, unexpired token for other APIs lacks both, and the helpful answer is
/// 403 `insufficient_scope` naming the scope, not 401 `invalid_token`. A token with the scope
/// but without this API's audience is still 401 `invalid_token`.
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
    let reject = |error| AuthRejection::new(verifier.challenge(), error);
    let (scheme, token) = access_token(parts).map_err(reject)?;
    let audience = scope.is_none().then(|| verifier.audience());
    let claims = verifier.verify_for(token, audience).await.map_err(|e| {
        tracing::debug!(error = %e, "bearer token refused");
        reject(AuthError::InvalidToken(e))
    })?;
    // RFC 8705 section 3: a token bound to a certificate only with that certificate.
    if let Some(bound) = claims.cnf.as_ref().and_then(|c| c.x5t_s256.as_deref()) {
        let presented = parts
            .extensions
            .get::<crate::ClientCertificate>()
            .map(crate::ClientCertificate::thumbprint);
        if presented.as_deref() != Some(bound) {
            return Err(reject(AuthError::InvalidToken(
                crate::VerifyError::CertificateMismatch,
            )));
        }
    }
    // RFC 9449 section 7: a DPoP-bound token only as DPoP, with a proof of its key.
    match (scheme, claims.cnf.as_ref().and_then(|c| c.jkt.as_deref())) {
        (Scheme::Bearer, None) => {}
        (Scheme::Bearer, Some(_)) => {
            return Err(reject(AuthError::InvalidToken(
                crate::VerifyError::DpopBound,
            )))
        }
        (Scheme::DPoP, None) => {
            return Err(reject(AuthError::InvalidToken(
                crate::VerifyError::NotDpopBound,
            )))
        }
        (Scheme::DPoP, Some(jkt)) => {
            check_dpop(parts, verifier, token, jkt)
                .map_err(|e| reject(AuthError::InvalidDpopProof(e)))?;
        }
    }
    if let Some(scope) = scope {
        if !claims.has_scope(scope) {
            return Err(reject(AuthError::InsufficientScope(scope.into())));
        }
        if !claims.aud.contains(verifier.audience()) {
            return Err(reject(AuthError::InvalidToken(
                crate::VerifyError::WrongAudience,
            )));
        }
    }
    let token = VerifiedToken {
        claims,
        challenge: verifier.challenge(),
    };
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

/// How the token came (RFC 6750 section 2.1, RFC 9449 section 7.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scheme {
    Bearer,
    DPoP,
}

/// The token of the `Authorization` header, `Bearer` (RFC 6750 section 2.1) or `DPoP`
/// (RFC 9449 section 7.1), after refusing a token in the query (section 2.3, see the module
/// docs).
fn access_token(parts: &Parts) -> Result<(Scheme, &str), AuthError> {
    if parts.uri.query().is_some() {
        let in_query = Query::<Vec<(String, String)>>::try_from_uri(&parts.uri)
            .is_ok_and(|Query(pairs)| pairs.iter().any(|(k, _)| k == "access_token"));
        if in_query {
            return Err(AuthError::InvalidRequest(
                "access tokens are not accepted in the URI query; send an Authorization: Bearer header",
            ));
        }
    }
    let mut headers = parts.headers.get_all(AUTHORIZATION).iter();
    let Some(value) = headers.next() else {
        return Err(AuthError::MissingToken);
    };
    if headers.next().is_some() {
        return Err(AuthError::InvalidRequest(
            "more than one Authorization header",
        ));
    }
    let value = value.as_bytes();
    let (scheme, credentials) = match value.iter().position(|&b| b == b' ') {
        Some(i) => (&value[..i], &value[i..]),
        None => (value, &[][..]),
    };
    // The scheme is case-insensitive (RFC 7235 section 2.1); another one is no token.
    let scheme = if scheme.eq_ignore_ascii_case(b"Bearer") {
        Scheme::Bearer
    } else if scheme.eq_ignore_ascii_case(b"DPoP") {
        Scheme::DPoP
    } else {
        return Err(AuthError::MissingToken);
    };
    // credentials = scheme 1*SP b64token (token68 for DPoP, the same characters)
    let spaces = credentials.iter().take_while(|&&b| b == b' ').count();
    let token = &credentials[spaces..];
    if spaces == 0 || !is_b64token(token) {
        return Err(AuthError::InvalidRequest(
            "the credentials are not a b64token (RFC 6750 section 2.1)",
        ));
    }
    // is_b64token admits ASCII only.
    let token = std::str::from_utf8(token).map_err(|_| AuthError::InvalidRequest("not ASCII"))?;
    Ok((scheme, token))
}

/// The DPoP proof of a request with a token bound to `jkt` (RFC 9449 section 7.1): one
/// `DPoP` header whose proof passes the checks of section 4.3 for this request's method and
/// URI and this token, signed by the key the token is bound to, and never seen before.
fn check_dpop(parts: &Parts, verifier: &Verifier, token: &str, jkt: &str) -> Result<(), DpopError> {
    let mut headers = parts.headers.get_all("dpop").iter();
    let proof = headers.next().ok_or(DpopError::Missing)?;
    if headers.next().is_some() {
        return Err(DpopError::Repeated);
    }
    let proof = proof
        .to_str()
        .map_err(|_| DpopError::Header(tessera_proto::dpop::ProofError::MalformedHeader))?;
    let now = verifier.now();
    let path = parts.uri.path();
    // With a resource URL, its origin and the path; without, the request's host and path
    // under either scheme (the API may sit behind TLS termination).
    let candidates: Vec<String> = match verifier.resource_url() {
        Some(resource) => {
            let (origin, _) = crate::resource::split_origin(resource);
            vec![format!("{origin}{path}")]
        }
        None => {
            let host = parts
                .uri
                .authority()
                .map(|a| a.as_str().to_owned())
                .or_else(|| {
                    parts
                        .headers
                        .get(axum::http::header::HOST)
                        .and_then(|h| h.to_str().ok())
                        .map(str::to_owned)
                })
                .ok_or(DpopError::Uri)?;
            ["https", "http"]
                .iter()
                .filter_map(|scheme| tessera_proto::dpop::htu(&format!("{scheme}://{host}{path}")))
                .collect()
        }
    };
    let mut outcome = Err(DpopError::Uri);
    for htu in &candidates {
        let request = ProofRequest {
            method: parts.method.as_str(),
            htu,
            access_token: Some(token),
            nonce: None,
            window_secs: crate::dpop::DEFAULT_WINDOW_SECS,
        };
        outcome = check_proof(proof, &request, now);
        if !matches!(outcome, Err(DpopError::Uri)) {
            break;
        }
    }
    let checked = outcome?;
    if checked.jkt != jkt {
        return Err(DpopError::KeyMismatch);
    }
    verifier.replay().first_use(&checked.jkt, &checked.jti, now)
}

/// `b64token = 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"="`
/// (RFC 6750 section 2.1).
fn is_b64token(token: &[u8]) -> bool {
    let body_len = token.len() - token.iter().rev().take_while(|&&b| b == b'=').count();
    body_len > 0
        && token[..body_len]
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || b"-._~+/".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::Request;

    fn parts(uri: &str, authorization: &[&[u8]]) -> Parts {
        let mut req = Request::builder().uri(uri);
        for value in authorization {
            req = req.header(AUTHORIZATION, *value);
        }
        req.body(()).unwrap().into_parts().0
    }

    #[test]
    fn bearer_header_grammar() {
        let ok = |v: &[u8]| access_token(&parts("/", &[v])).map(|(_, t)| t.to_owned());
        assert_eq!(ok(b"Bearer a.b-c_d~e+f/g==").unwrap(), "a.b-c_d~e+f/g==");
        assert_eq!(ok(b"bearer   abc").unwrap(), "abc");
        for missing in [
            &b"Basic dXNlcjpwYXNz"[..],
            b"Bearerabc",
            b"Token abc",
            b"\xff abc",
        ] {
            assert_eq!(ok(missing), Err(AuthError::MissingToken));
        }
        for malformed in [
            &b"Bearer"[..],
            b"Bearer ",
            b"Bearer a b",
            b"Bearer ===",
            b"Bearer a=b",
            b"Bearer \xc3\xa9",
        ] {
            assert!(
                matches!(ok(malformed), Err(AuthError::InvalidRequest(_))),
                "{malformed:?}"
            );
        }
        assert_eq!(
            access_token(&parts("/", &[b"dpop  abc"])),
            Ok((Scheme::DPoP, "abc"))
        );
        assert_eq!(access_token(&parts("/", &[])), Err(AuthError::MissingToken));
        assert!(matches!(
            access_token(&parts("/", &[b"Bearer a", b"Bearer b"])),
            Err(AuthError::InvalidRequest(_))
        ));
    }

    #[test]
    fn a_token_in_the_query_is_refused() {
        for uri in [
            "/?access_token=abc",
            "/?a=1&access%5Ftoken=abc",
            "/?access_token",
        ] {
            assert!(
                matches!(
                    access_token(&parts(uri, &[b"Bearer abc"])),
                    Err(AuthError::InvalidRequest(_))
                ),
                "{uri}"
            );
        }
        assert!(access_token(&parts("/?token=abc", &[b"Bearer abc"])).is_ok());
    }
}
