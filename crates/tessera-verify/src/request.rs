//! One way to accept an access token, used by every place that accepts one: the axum
//! extractors of [`crate::extract`], Tessera's own admin API, and any handler that reads the
//! request itself.
//!
//! An [`AccessRequest`] is what a token check needs of a request: the `Authorization`
//! header (RFC 6750 section 2.1, RFC 9449 section 7.1), the `DPoP` proof header, the method
//! and URI the proof must name (RFC 9449 section 4.3), and the client certificate the
//! connection presented (RFC 8705 section 3). [`Verifier::verify_request`] checks the token
//! and then its binding: a token whose `cnf` names a key or a certificate is accepted only
//! with a proof of that key or over that certificate.
//!
//! How the token is read:
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
//! - a form body (RFC 6750 section 2.2) is never read: only the head is.
//!
//! A token bound to a DPoP key (`cnf.jkt`) is accepted only as `DPoP` with one `DPoP` proof
//! header that passes RFC 9449 section 4.3 for this request (method, the URI under the
//! verifier's [`resource_url`](crate::VerifierBuilder::resource_url), `ath` of this token,
//! `iat` within 60 s), is signed by the token's key and was not seen before (a bounded replay
//! memory, shared fairly between keys); anything else is 401 `invalid_dpop_proof` or
//! `invalid_token` with a `DPoP` challenge. An unbound token sent as `DPoP` is refused too.
//! Without a resource URL a verifier refuses DPoP-bound tokens: the only other source of the
//! URL a proof must name is the request's own `Host`, which the caller chooses.

use axum::extract::{OriginalUri, Query};
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use axum::http::{HeaderMap, Method, Uri};

use crate::dpop::{check_proof, proof_header, DpopError, ProofRequest};
use crate::extract::VerifiedToken;
use crate::rejection::{AuthError, AuthRejection};
use crate::{ClientCertificate, Verifier, VerifyError};

/// What a token check reads of a request: its head and the client certificate it came with.
#[derive(Debug, Clone, Copy)]
pub struct AccessRequest<'a> {
    method: &'a Method,
    uri: &'a Uri,
    headers: &'a HeaderMap,
    certificate: Option<&'a ClientCertificate>,
}

impl<'a> AccessRequest<'a> {
    /// A request with this method, URI (its path is the one DPoP proofs must name, so pass
    /// the path as the client sent it, before any routing stripped a prefix) and headers,
    /// and no client certificate.
    pub fn new(method: &'a Method, uri: &'a Uri, headers: &'a HeaderMap) -> Self {
        Self {
            method,
            uri,
            headers,
            certificate: None,
        }
    }

    /// The client certificate the connection presented: from the API's TLS acceptor, or
    /// from a trusted TLS-terminating proxy's header ([`ClientCertificate::from_header`]).
    pub fn with_certificate(mut self, certificate: Option<&'a ClientCertificate>) -> Self {
        self.certificate = certificate;
        self
    }

    /// An axum request's head: the URI before nesting stripped a prefix (`OriginalUri`),
    /// and the [`ClientCertificate`] in its extensions, if the API put one there.
    pub fn from_parts(parts: &'a Parts) -> Self {
        let uri = parts
            .extensions
            .get::<OriginalUri>()
            .map_or(&parts.uri, |OriginalUri(uri)| uri);
        Self::new(&parts.method, uri, &parts.headers)
            .with_certificate(parts.extensions.get::<ClientCertificate>())
    }
}

impl Verifier {
    /// Accepts the access token of `request`: reads it (RFC 6750 section 2.1, RFC 9449
    /// section 7.1), verifies it as [`Verifier::verify`] does, and checks its binding: a
    /// certificate-bound token only with that certificate (RFC 8705 section 3), a DPoP-bound
    /// token only as `DPoP` with a valid proof of its key for this request (RFC 9449
    /// section 7.1). With [`plan_limits`](crate::VerifierBuilder::plan_limits), an accepted
    /// token's request is then counted against its plan's limits: within them, the
    /// token carries the fields to answer with ([`VerifiedToken::rate_limit`]); over them,
    /// the rejection is the 429 ([`AuthError::Limited`]). The rejection is the answer to
    /// send (RFC 6750 section 3).
    pub async fn verify_request(
        &self,
        request: &AccessRequest<'_>,
    ) -> Result<VerifiedToken, AuthRejection> {
        self.verify_request_for(request, None).await
    }

    /// [`verify_request`](Self::verify_request); with `scope`, the scope is checked before
    /// the audience: Tessera's audiences are the APIs its scopes name, so an authentic,
    /// unexpired token for other APIs lacks both, and the helpful answer is
    /// 403 `insufficient_scope` naming the scope, not 401 `invalid_token`. A token with the
    /// scope but without this API's audience is still 401 `invalid_token`.
    pub(crate) async fn verify_request_for(
        &self,
        request: &AccessRequest<'_>,
        scope: Option<&str>,
    ) -> Result<VerifiedToken, AuthRejection> {
        #[cfg(feature = "otel")]
        {
            use tracing::Instrument as _;
            let span = crate::otel::check_span(request.headers);
            let checked = self
                .check_request(request, scope)
                .instrument(span.clone())
                .await;
            crate::otel::checked(&span, &checked);
            checked
        }
        #[cfg(not(feature = "otel"))]
        self.check_request(request, scope).await
    }

    async fn check_request(
        &self,
        request: &AccessRequest<'_>,
        scope: Option<&str>,
    ) -> Result<VerifiedToken, AuthRejection> {
        let reject = |error| AuthRejection::new(self.challenge(), error);
        let (scheme, token) = access_token(request.uri, request.headers).map_err(reject)?;
        let audience = scope.is_none().then(|| self.audience());
        let claims = self.verify_token(token, audience).await.map_err(|e| {
            tracing::debug!(error = %e, "bearer token refused");
            reject(AuthError::InvalidToken(e))
        })?;
        // RFC 8705 section 3: a token bound to a certificate only with that certificate.
        if let Some(bound) = claims.cnf.as_ref().and_then(|c| c.x5t_s256.as_deref()) {
            let presented = request.certificate.map(ClientCertificate::thumbprint);
            if presented.as_deref() != Some(bound) {
                return Err(reject(AuthError::InvalidToken(
                    VerifyError::CertificateMismatch,
                )));
            }
        }
        // RFC 9449 section 7: a DPoP-bound token only as DPoP, with a proof of its key.
        match (scheme, claims.cnf.as_ref().and_then(|c| c.jkt.as_deref())) {
            (Scheme::Bearer, None) => {}
            (Scheme::Bearer, Some(_)) => {
                return Err(reject(AuthError::InvalidToken(VerifyError::DpopBound)))
            }
            (Scheme::DPoP, None) => {
                return Err(reject(AuthError::InvalidToken(VerifyError::NotDpopBound)))
            }
            (Scheme::DPoP, Some(jkt)) => {
                check_dpop(request, self, token, jkt)
                    .map_err(|e| reject(AuthError::InvalidDpopProof(e)))?;
            }
        }
        if let Some(scope) = scope {
            if !claims.has_scope(scope) {
                return Err(reject(AuthError::InsufficientScope(
                    scope.to_owned().into(),
                )));
            }
            if !claims.aud.contains(self.audience()) {
                return Err(reject(AuthError::InvalidToken(VerifyError::WrongAudience)));
            }
        }
        // The token is accepted: the request counts against its plan's limits.
        let fields = match self.limits() {
            Some(limits) => limits
                .admit(&claims)
                .await
                .map_err(|e| reject(AuthError::Limited(Box::new(e))))?,
            None => None,
        };
        Ok(VerifiedToken::new(claims, self.challenge(), fields))
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
fn access_token<'h>(uri: &Uri, headers: &'h HeaderMap) -> Result<(Scheme, &'h str), AuthError> {
    if uri.query().is_some() {
        let in_query = Query::<Vec<(String, String)>>::try_from_uri(uri)
            .is_ok_and(|Query(pairs)| pairs.iter().any(|(k, _)| k == "access_token"));
        if in_query {
            return Err(AuthError::InvalidRequest(
                "access tokens are not accepted in the URI query; send an Authorization: Bearer header",
            ));
        }
    }
    let mut values = headers.get_all(AUTHORIZATION).iter();
    let Some(value) = values.next() else {
        return Err(AuthError::MissingToken);
    };
    if values.next().is_some() {
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
/// the URI under the verifier's resource URL, for this token, signed by the key the token is
/// bound to, and never seen before (the key's share of the replay memory).
fn check_dpop(
    request: &AccessRequest<'_>,
    verifier: &Verifier,
    token: &str,
    jkt: &str,
) -> Result<(), DpopError> {
    let proof = proof_header(request.headers)?.ok_or(DpopError::Missing)?;
    // The request's Host is the caller's to choose: a proof made for another API with the
    // same token would pass here. Only the API's own URL says where the proof must point.
    let Some(resource) = verifier.resource_url() else {
        tracing::warn!(
            "a DPoP-bound token was refused: this verifier has no resource_url, so the URL \
             a DPoP proof must name is unknown (VerifierBuilder::resource_url)"
        );
        return Err(DpopError::NoResourceUrl);
    };
    let (origin, _) = crate::resource::split_origin(resource);
    let htu = format!("{origin}{}", request.uri.path());
    let now = verifier.now();
    let proof_request = ProofRequest {
        method: request.method.as_str(),
        htu: &htu,
        access_token: Some(token),
        nonce: None,
        window_secs: crate::dpop::DEFAULT_WINDOW_SECS,
    };
    let checked = check_proof(proof, &proof_request, now)?;
    if checked.jkt != jkt {
        return Err(DpopError::KeyMismatch);
    }
    Ok(verifier
        .replay()
        .first_use(&checked.jkt, &checked.jti, now)?)
}

/// `b64token = 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"="`
/// (RFC 6750 section 2.1).
///
/// Every byte of every request's token is read here, so the test is arithmetic without
/// branches, which the compiler does 16 bytes at a time (issue 31 item 4): an early exit
/// per byte, as `all` takes, cost more than the rest of a repeated token's check.
fn is_b64token(token: &[u8]) -> bool {
    let body_len = token.len() - token.iter().rev().take_while(|&&b| b == b'=').count();
    body_len > 0
        && token[..body_len]
            .iter()
            .fold(true, |ok, &b| ok & is_b64token_byte(b))
}

/// `ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/"`, without a branch.
fn is_b64token_byte(b: u8) -> bool {
    let letter = (b | 0x20).wrapping_sub(b'a') < 26;
    let digit = b.wrapping_sub(b'0') < 10;
    letter
        | digit
        | (b == b'-')
        | (b == b'.')
        | (b == b'_')
        | (b == b'~')
        | (b == b'+')
        | (b == b'/')
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn head(uri: &str, authorization: &[&[u8]]) -> (Uri, HeaderMap) {
        let mut headers = HeaderMap::new();
        for value in authorization {
            headers.append(AUTHORIZATION, HeaderValue::from_bytes(value).unwrap());
        }
        (uri.parse().unwrap(), headers)
    }

    fn read(uri: &str, authorization: &[&[u8]]) -> Result<(Scheme, String), AuthError> {
        let (uri, headers) = head(uri, authorization);
        access_token(&uri, &headers).map(|(s, t)| (s, t.to_owned()))
    }

    #[test]
    fn bearer_header_grammar() {
        let ok = |v: &[u8]| read("/", &[v]).map(|(_, t)| t);
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
            read("/", &[b"dpop  abc"]),
            Ok((Scheme::DPoP, "abc".to_owned()))
        );
        assert_eq!(read("/", &[]), Err(AuthError::MissingToken));
        assert!(matches!(
            read("/", &[b"Bearer a", b"Bearer b"]),
            Err(AuthError::InvalidRequest(_))
        ));
    }

    /// The branch-free test against the plain one, on every byte.
    #[test]
    fn b64token_bytes_are_exactly_the_grammars() {
        for b in 0..=u8::MAX {
            assert_eq!(
                is_b64token_byte(b),
                b.is_ascii_alphanumeric() || b"-._~+/".contains(&b),
                "{b:#04x}"
            );
        }
        assert!(is_b64token(&[b'a'; 1000]));
        for at in [0, 15, 16, 17, 999] {
            let mut long = [b'a'; 1000];
            long[at] = b'!';
            assert!(!is_b64token(&long), "{at}");
        }
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
                    read(uri, &[b"Bearer abc"]),
                    Err(AuthError::InvalidRequest(_))
                ),
                "{uri}"
            );
        }
        assert!(read("/?token=abc", &[b"Bearer abc"]).is_ok());
    }
}
