//! DPoP proof checks (RFC 9449 section 4.3), shared by the resource-server extractors and
//! Tessera's token endpoint, and the bounded memory of proofs already seen (section 11.1).
//!
//! [`check_proof`] runs the section 4.3 checks but the replay one, which needs state: the
//! caller records the proof in a [`ReplayCache`] (or a shared store) only once it passed, so
//! that invalid proofs cannot fill the cache.

use std::collections::hash_map::RandomState;
use std::collections::{HashMap, HashSet};
use std::hash::BuildHasher;
use std::sync::Mutex;

use aws_lc_rs::digest;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use tessera_proto::dpop::{parse_proof, ProofClaims, ProofError, PublicKey};
use tessera_proto::jws::decode_claims;
use tessera_proto::ErrorCode;
use thiserror::Error;

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

/// base64url SHA-256 of `input`, as a thumbprint (RFC 7638 section 3) or `ath` (RFC 9449
/// section 4.2) is written.
pub fn sha256_b64(input: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(digest::digest(&digest::SHA256, input))
}

/// The RFC 7638 thumbprint of a proof key: its `cnf.jkt` (RFC 9449 section 6.1).
pub fn thumbprint(key: &PublicKey) -> String {
    sha256_b64(key.thumbprint_input().as_bytes())
}

/// Checks a proof against the request it came with (RFC 9449 section 4.3, all steps but the
/// replay check, which is [`ReplayCache::first_use`]'s). `now` is the verifier's clock, in
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

/// The proofs seen lately, by key and `jti`, in bounded memory (RFC 9449 section 11.1).
///
/// Two generations of 128-bit digests: a proof is a replay if either holds it. The current
/// generation becomes the previous one every `remember` seconds, so an entry is remembered
/// for `remember` to `2 * remember` seconds. For DPoP proofs `remember` is twice the `iat`
/// window ([`ReplayCache::new`]), as long as a proof with an `iat` at the window's far edge
/// stays acceptable. At most `capacity` entries per generation (a `HashSet<u128>`: at most about
/// 35 bytes each): past that, new ones are refused ([`DpopError::Busy`]) rather than
/// forgotten, so replay protection never lapses. Size `capacity` for the sustained rate
/// times `remember`.
///
/// Each entry is charged to a holder: the key at an API, the client at the token endpoint
/// ([`ReplayCache::first_use_by`]). One holder may fill at most its share of a generation
/// (a sixteenth of the capacity unless [`ReplayCache::with_share`] says otherwise), so a
/// holder that sends proofs as fast as it can is refused alone, and the others go on.
#[derive(Debug)]
pub struct ReplayCache {
    span_secs: i64,
    capacity: usize,
    share: usize,
    /// Keys the per-holder counts; seeded per process, so holders cannot aim at one slot.
    hasher: RandomState,
    generations: Mutex<Generations>,
}

#[derive(Debug, Default)]
struct Generations {
    started: i64,
    current: HashSet<u128>,
    previous: HashSet<u128>,
    /// Entries of the current generation per holder (by the holder's hash).
    held: HashMap<u64, usize>,
}

impl ReplayCache {
    /// A cache for proofs accepted within `window_secs` of the clock, holding at most
    /// `capacity` proofs per generation.
    pub fn new(window_secs: i64, capacity: usize) -> Self {
        Self::remembering(2 * window_secs, capacity)
    }

    /// A cache that remembers each entry for at least `remember_secs`, holding at most
    /// `capacity` entries per generation.
    pub fn remembering(remember_secs: i64, capacity: usize) -> Self {
        Self {
            span_secs: remember_secs.max(1),
            capacity,
            share: (capacity / 16).max(1),
            hasher: RandomState::new(),
            generations: Mutex::new(Generations::default()),
        }
    }

    /// At most `share` entries per holder and generation.
    pub fn with_share(mut self, share: usize) -> Self {
        self.share = share.max(1);
        self
    }

    /// Records the proof `jti` of the key `jkt` at `now`, charged to the key: `Ok` the first
    /// time, `Replayed` after, `Busy` when the generation or the key's share of it is full.
    pub fn first_use(&self, jkt: &str, jti: &str, now: i64) -> Result<(), DpopError> {
        self.first_use_by(jkt, jkt, jti, now)
    }

    /// Records `jti` of `key` at `now`, charged to `holder` (the client that sent it, say):
    /// `Ok` the first time, `Replayed` after, `Busy` when the generation or the holder's
    /// share of it is full.
    pub fn first_use_by(
        &self,
        holder: &str,
        key: &str,
        jti: &str,
        now: i64,
    ) -> Result<(), DpopError> {
        let digest = proof_digest(key, jti);
        let holder = self.hasher.hash_one(holder);
        let mut g = self.generations.lock().unwrap_or_else(|p| p.into_inner());
        if now >= g.started + 2 * self.span_secs {
            g.previous.clear();
            g.current.clear();
            g.held.clear();
            g.started = now;
        } else if now >= g.started + self.span_secs {
            g.previous = std::mem::take(&mut g.current);
            g.held.clear();
            g.started = now;
        }
        if g.previous.contains(&digest) || g.current.contains(&digest) {
            return Err(DpopError::Replayed);
        }
        let held = g.held.get(&holder).copied().unwrap_or(0);
        if g.current.len() >= self.capacity || held >= self.share {
            return Err(DpopError::Busy);
        }
        g.current.insert(digest);
        g.held.insert(holder, held + 1);
        Ok(())
    }
}

/// The first 128 bits of SHA-256 over the key thumbprint and the `jti`: two proofs of
/// different keys may share a `jti`.
pub fn proof_digest(jkt: &str, jti: &str) -> u128 {
    let mut context = digest::Context::new(&digest::SHA256);
    context.update(jkt.as_bytes());
    context.update(&[0]);
    context.update(jti.as_bytes());
    let digest = context.finish();
    let mut first = [0u8; 16];
    first.copy_from_slice(&digest.as_ref()[..16]);
    u128::from_be_bytes(first)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proof_is_remembered_for_two_windows_and_then_forgotten() {
        let cache = ReplayCache::new(60, 10).with_share(10);
        assert_eq!(cache.first_use("k", "a", 1_000), Ok(()));
        assert_eq!(cache.first_use("k", "a", 1_000), Err(DpopError::Replayed));
        // Another key may use the same jti.
        assert_eq!(cache.first_use("other", "a", 1_000), Ok(()));
        // After one rotation the proof is in the previous generation: still a replay.
        assert_eq!(cache.first_use("k", "b", 1_120), Ok(()));
        assert_eq!(cache.first_use("k", "a", 1_239), Err(DpopError::Replayed));
        // Two rotations later it is gone; by then its iat is far outside the window.
        assert_eq!(cache.first_use("k", "c", 1_240), Ok(()));
        assert_eq!(cache.first_use("k", "a", 1_240), Ok(()));
        // A long quiet spell clears both.
        assert_eq!(cache.first_use("k", "b", 9_999), Ok(()));
        // A gap of one to two spans turns the generation over rather than clearing it.
        let cache = ReplayCache::new(60, 10).with_share(10);
        assert_eq!(cache.first_use("k", "a", 0), Ok(()));
        assert_eq!(cache.first_use("k", "a", 200), Err(DpopError::Replayed));
    }

    #[test]
    fn an_assertion_cache_remembers_for_as_long_as_asked() {
        let cache = ReplayCache::remembering(420, 10).with_share(10);
        assert_eq!(cache.first_use("client", "a", 0), Ok(()));
        assert_eq!(
            cache.first_use("client", "a", 419),
            Err(DpopError::Replayed)
        );
        assert_eq!(cache.first_use("client", "b", 420), Ok(()));
        assert_eq!(
            cache.first_use("client", "a", 839),
            Err(DpopError::Replayed)
        );
        assert_eq!(cache.first_use("client", "a", 840), Ok(()));
    }

    #[test]
    fn one_holder_fills_only_its_own_share() {
        let cache = ReplayCache::new(60, 4).with_share(2);
        assert_eq!(cache.first_use_by("greedy", "k", "1", 0), Ok(()));
        assert_eq!(cache.first_use_by("greedy", "k2", "2", 0), Ok(()));
        // Its share is full, whichever key it uses; others go on.
        assert_eq!(
            cache.first_use_by("greedy", "k3", "3", 0),
            Err(DpopError::Busy)
        );
        assert_eq!(cache.first_use_by("other", "k", "3", 0), Ok(()));
        // A replay is still a replay, whoever sends it.
        assert_eq!(
            cache.first_use_by("other", "k", "1", 0),
            Err(DpopError::Replayed)
        );
        // The next generation gives the share back.
        assert_eq!(cache.first_use_by("greedy", "k3", "3", 120), Ok(()));
        // The default share is a sixteenth of the capacity.
        let cache = ReplayCache::new(60, 32);
        assert_eq!(cache.first_use("k", "1", 0), Ok(()));
        assert_eq!(cache.first_use("k", "2", 0), Ok(()));
        assert_eq!(cache.first_use("k", "3", 0), Err(DpopError::Busy));
        assert_eq!(cache.first_use("j", "3", 0), Ok(()));
    }

    #[test]
    fn a_full_generation_refuses_rather_than_forgets() {
        let cache = ReplayCache::new(60, 2).with_share(2);
        assert_eq!(cache.first_use("k", "1", 0), Ok(()));
        assert_eq!(cache.first_use("k", "2", 0), Ok(()));
        assert_eq!(cache.first_use("k", "3", 0), Err(DpopError::Busy));
        assert_eq!(cache.first_use("k", "1", 0), Err(DpopError::Replayed));
        assert_eq!(cache.first_use("k", "3", 120), Ok(()));
    }

    #[test]
    fn only_the_nonce_error_asks_for_a_nonce() {
        assert_eq!(DpopError::Nonce.code(), ErrorCode::UseDpopNonce);
        assert_eq!(DpopError::Replayed.code(), ErrorCode::InvalidDpopProof);
    }
}
