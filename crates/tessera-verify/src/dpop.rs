//! DPoP proof checks (RFC 9449 section 4.3), shared by the resource-server extractors and
//! Tessera's token endpoint.
//!
//! [`check_proof`] runs the section 4.3 checks but the replay one, which needs state: the
//! caller records the proof in a [`ReplayCache`](crate::replay::ReplayCache) (or a shared
//! store) only once it passed, so that invalid proofs cannot fill the cache (section 11.1).

use tessera_proto::dpop::{parse_proof, ProofClaims, ProofError};
use tessera_proto::jws::decode_claims;
use tessera_proto::ErrorCode;
use thiserror::Error;

use crate::replay::ReplayError;

/// The proof algorithms accepted: the `algs` of a `DPoP` challenge (RFC 9449 section 7.1).
pub const ALGS: &str = "EdDSA ES256 RS256 PS256";

/// How far a proof's `iat` may be from the verifier's clock, either way, by default.
pub const DEFAULT_WINDOW_SECS: i64 = 60;

/// What a proof must match: the request it came with.
#[derive(Debug, Clone, Copy)]
pub struct ProofRequest<'a> {
    /// The request's HTTP method; `htm` must equal it (case-sensitive, RFC 9110 9.1).
    pub method: &'a str,
    /// The request URI in [`tessera_proto::dpop::htu`] form; `htu` must equal it in that form.
    pub htu: &'a str,
    /// The access token sent with the proof, whose hash `ath` must be (section 4.2).
    pub access_token: Option<&'a str>,
    /// The nonce the proof must carry (section 8), when the server asks for one.
    pub nonce: Option<NonceCheck<'a>>,
    /// How far `iat` may be from `now`, either way, in seconds.
    pub window_secs: i64,
}

/// A nonce requirement: the caller decides which nonces are current.
#[derive(Clone, Copy)]
pub struct NonceCheck<'a>(pub &'a (dyn Fn(&str) -> bool + Sync));

impl std::fmt::Debug for NonceCheck<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NonceCheck")
    }
}

/// A proof that passed [`check_proof`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckedProof {
    /// The RFC 7638 thumbprint of the proof's key: `cnf.jkt` of the token it binds or uses.
    pub jkt: String,
    /// The proof's `jti`, to record against replay.
    pub jti: String,
    /// The proof's `iat`.
    pub iat: i64,
}

/// Why a proof was refused. The messages are fixed text that never repeats the proof, and
/// say enough for the client's developer to fix the proof.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum DpopError {
    /// No `DPoP` header where one is required.
    #[error("a DPoP proof is required")]
    Missing,
    /// More than one `DPoP` header (section 4.3 step 1).
    #[error("more than one DPoP header")]
    Repeated,
    /// The form or header failed (section 4.3 steps 2 to 7).
    #[error("{0}")]
    Header(ProofError),
    /// The signature does not verify with the proof's own key (step 6).
    #[error("the DPoP proof signature does not verify with its jwk")]
    Signature,
    /// The claims are not a JSON object with `jti`, `htm`, `htu` and `iat` (step 8).
    #[error("the DPoP proof lacks jti, htm, htu or iat, or one is malformed")]
    Claims,
    /// `htm` is not the request's method (step 8).
    #[error("the DPoP proof htm is not this request's method")]
    Method,
    /// `htu` is not the request's URI (step 9).
    #[error("the DPoP proof htu is not this request's URI")]
    Uri,
    /// `iat` is outside the window (step 11).
    #[error("the DPoP proof iat is too far from the server's time")]
    Stale,
    /// `ath` is missing or not the hash of the access token sent (step 12).
    #[error("the DPoP proof ath is missing or not the hash of the access token")]
    AccessTokenHash,
    /// The proof lacks the current server nonce (step 10, section 8): `use_dpop_nonce`.
    #[error("the DPoP proof must carry the server's current nonce")]
    Nonce,
    /// The `jti` was seen within the window (step 12, section 11.1).
    #[error("the DPoP proof was used before")]
    Replayed,
    /// Too many proofs were seen within the window, of this holder or of all, to remember
    /// another one.
    #[error("too many DPoP proofs at once; retry with a new proof")]
    Busy,
    /// The API checking the proof has no resource URL, so it cannot know which `htu` a proof
    /// must name (step 9): a configuration fault, refused rather than guessed from `Host`.
    #[error("this API cannot check DPoP proofs: it has no resource URL configured")]
    NoResourceUrl,
    /// The proof's key is not the one the token is bound to (section 7.1).
    #[error("the DPoP proof key is not the key the token is bound to")]
    KeyMismatch,
}

/// A proof that the replay memory refused: seen before, or no room to remember it.
impl From<ReplayError> for DpopError {
    fn from(error: ReplayError) -> Self {
        match error {
            ReplayError::Replayed => Self::Replayed,
            ReplayError::Busy => Self::Busy,
        }
    }
}

impl DpopError {
    /// The error code of the answer: `use_dpop_nonce` for [`DpopError::Nonce`] at the token
    /// endpoint (section 8), `invalid_dpop_proof` otherwise (sections 5 and 7.1).
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::Nonce => ErrorCode::UseDpopNonce,
            _ => ErrorCode::InvalidDpopProof,
        }
    }
}

/// The single `DPoP` header of a request: `None` without one, `Err` for two or more or one
/// that is not ASCII (section 4.3 step 1).
pub fn proof_header(headers: &axum::http::HeaderMap) -> Result<Option<&str>, DpopError> {
    let mut values = headers.get_all("dpop").iter();
    let Some(first) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(DpopError::Repeated);
    }
    first
        .to_str()
        .map(Some)
        .map_err(|_| DpopError::Header(tessera_proto::dpop::ProofError::MalformedHeader))
}

/// base64url SHA-256, as `ath` (RFC 9449 section 4.2) is written; and the RFC 7638
/// thumbprint of a proof key, its `cnf.jkt` (section 6.1).
pub use tessera_jose::{sha256_b64, thumbprint};

/// Checks a proof against the request it came with (RFC 9449 section 4.3, all steps but the
/// replay check, which is [`ReplayCache::first_use`](crate::replay::ReplayCache::first_use)'s). `now` is the verifier's clock, in
/// seconds since the epoch.
pub fn check_proof(
    proof: &str,
    request: &ProofRequest<'_>,
    now: i64,
) -> Result<CheckedProof, DpopError> {
    let unverified = parse_proof(proof).map_err(DpopError::Header)?;
    if !crate::verify_signature(
        &unverified.key,
        unverified.alg,
        unverified.signing_input,
        &unverified.signature,
    ) {
        return Err(DpopError::Signature);
    }
    let claims: ProofClaims = decode_claims(&unverified.payload).ok_or(DpopError::Claims)?;
    if claims.jti.is_empty() || claims.jti.len() > 256 {
        return Err(DpopError::Claims);
    }
    if claims.htm != request.method {
        return Err(DpopError::Method);
    }
    if tessera_proto::dpop::htu(&claims.htu).as_deref() != Some(request.htu) {
        return Err(DpopError::Uri);
    }
    if (claims.iat - now).abs() > request.window_secs {
        return Err(DpopError::Stale);
    }
    if let Some(token) = request.access_token {
        let expected = sha256_b64(token.as_bytes());
        if claims.ath.as_deref() != Some(expected.as_str()) {
            return Err(DpopError::AccessTokenHash);
        }
    }
    if let Some(NonceCheck(is_current)) = request.nonce {
        if !claims.nonce.as_deref().is_some_and(is_current) {
            return Err(DpopError::Nonce);
        }
    }
    Ok(CheckedProof {
        jkt: thumbprint(&unverified.key),
        jti: claims.jti,
        iat: claims.iat,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_nonce_error_asks_for_a_nonce() {
        assert_eq!(DpopError::Nonce.code(), ErrorCode::UseDpopNonce);
        assert_eq!(DpopError::Replayed.code(), ErrorCode::InvalidDpopProof);
    }
}
