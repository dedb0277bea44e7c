//! `private_key_jwt` client authentication (RFC 7523 section 2.2, RFC 7521 section 4.2,
//! OpenID Connect Core section 9): the client signs a short-lived JWT with its own key and
//! sends it as `client_assertion`; Tessera checks it with the public keys the client
//! registered, inline or at its `jwks_uri`.
//!
//! Rules (RFC 7523 section 3): `iss` and `sub` are the client id; `aud` is this issuer or
//! its token endpoint URL and nothing else (draft-ietf-oauth-rfc7523bis; the issuer is the
//! unambiguous value, see the README); `exp`
//! is present, not past and at most 5 minutes ahead; `nbf` and `iat` not in the future
//! (60 s leeway); `jti` is present and used once until `exp` (remembered in this process,
//! and in Redis when configured so that another instance refuses the replay too); the
//! algorithm is EdDSA, ES256, RS256 or PS256 and fits the key. Every failure is
//! `invalid_client` with a description that helps and never repeats the assertion.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde::Deserialize;
use serde_json::{Map, Value};
use tessera_proto::jwk::{public_keys, PublicJwk};
use tessera_proto::jws::{decode_claims, parse_assertion};
use tessera_proto::Algorithm;
use tessera_store::KeySource;
use tessera_verify::replay::{ReplayCache, ReplayError};

use super::key_sets::{KeySets, Outbound, Source};
use super::replay::Replay;
use crate::clock::Clock;
use crate::limits::redis::RedisLimiter;

/// `client_assertion_type` of a JWT assertion (RFC 7523 section 2.2).
pub(crate) const JWT_BEARER: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";

/// The algorithms an assertion may be signed with; never `none` or HMAC.
pub(crate) const ALGORITHMS: [Algorithm; 4] = [
    Algorithm::EdDSA,
    Algorithm::ES256,
    Algorithm::RS256,
    Algorithm::PS256,
];

/// The longest assertion read: a platform token with many claims fits in 8 KiB.
const MAX_ASSERTION_LEN: usize = 8192;
/// How far ahead `exp` may be.
const MAX_LIFETIME_SECS: i64 = 300;
/// Clock skew allowed on `exp`, `nbf` and `iat`.
const LEEWAY_SECS: i64 = 60;
/// Assertions remembered per generation in this process without Redis. An assertion is
/// usable until `exp` + leeway, at most 7 minutes after it is first seen, so that is how long
/// it is remembered; 2,000,000 per 7 minutes is over 4,700 assertions a second sustained, in
/// at most about 140 MB (BENCHMARKS.md measured 9,500 a second at full load, and at the old
/// 200,000 per 12 minutes found a ceiling of 280 a second). With Redis, Redis remembers.
const REPLAY_CAPACITY: usize = 2_000_000;
/// The most clients whose trust policies are held.
const MAX_CACHED_CLIENTS: usize = 10_000;

/// Why an assertion was refused: the `error_description` of its `invalid_client`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum AssertionError {
    /// `client_assertion_type` is not the JWT bearer type.
    #[error(
        "client_assertion_type must be urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
    )]
    UnsupportedType,
    /// Not a compact JWS with an acceptable header.
    #[error("the client assertion is not a signed JWT with an accepted header")]
    Malformed,
    /// The algorithm is not accepted.
    #[error("the client assertion algorithm is not one of EdDSA, ES256, RS256, PS256")]
    Algorithm,
    /// No registered key has the `kid` (or fits the algorithm).
    #[error("the client assertion is signed with a key the client has not registered")]
    UnknownKey,
    /// The signature does not verify.
    #[error("the client assertion signature does not verify")]
    Signature,
    /// The claims are not a JSON object of the expected types.
    #[error("the client assertion claims are malformed")]
    Claims,
    /// `iss` or `sub` is not the client id.
    #[error("the client assertion iss and sub must both be the client id")]
    Subject,
    /// `aud` is neither the issuer nor the token endpoint, or names another audience too.
    #[error("the client assertion aud must be this server's issuer identifier, alone")]
    Audience,
    /// `exp` is missing.
    #[error("the client assertion has no exp")]
    NoExpiry,
    /// `exp` has passed.
    #[error("the client assertion has expired")]
    Expired,
    /// `exp` is more than 5 minutes ahead.
    #[error("the client assertion lives longer than 5 minutes")]
    TooLong,
    /// `nbf` or `iat` is in the future.
    #[error("the client assertion is not valid yet")]
    NotYetValid,
    /// `jti` is missing.
    #[error("the client assertion has no jti")]
    NoJti,
    /// The `jti` was used before.
    #[error("the client assertion was used before")]
    Replayed,
    /// Too many assertions at once to remember another.
    #[error("too many client assertions at once; retry")]
    Busy,
    /// The request waited on a key fetch and found no in-flight slot free after: answered
    /// 503 like a request over the cap, not as a refusal of the credentials.
    #[error("the server is busy; retry")]
    Overloaded,
    /// The client's `jwks_uri` could not be read.
    #[error("the client's keys could not be fetched from its jwks_uri")]
    KeysUnavailable,
    /// Federation: no trust policy of the client names the token's issuer.
    #[error("no trust policy of this client accepts tokens of this issuer")]
    NoPolicy,
    /// Federation: the issuer's keys could not be found or fetched.
    #[error("the issuer's keys could not be fetched")]
    IssuerKeysUnavailable,
    /// Federation: `aud` lacks the policy's audience.
    #[error("the token's aud does not hold the trust policy's audience")]
    PolicyAudience,
    /// Federation: `sub` does not match the policy's subject.
    #[error("the token's sub does not match the trust policy's subject")]
    PolicySubject,
    /// Federation: a required claim is missing or has another value.
    #[error("a claim the trust policy requires is missing or has another value")]
    PolicyClaim,
    /// Federation: the token lives longer than the policy allows.
    #[error("the token lives longer than the trust policy allows")]
    PolicyLifetime,
    /// Federation: the policy limits the token's life, and the token has no `iat` to tell it.
    #[error("the trust policy limits the token's lifetime, so the token must carry iat")]
    PolicyNoIssuedAt,
}

/// What a federated token proved: which policy let it in, for whom.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Federated {
    /// The trust policy's name.
    pub(crate) policy: String,
    /// The external issuer.
    pub(crate) issuer: String,
    /// The external subject, recorded in the token as `federated_sub`.
    pub(crate) subject: String,
}

/// A client's trust policies, shared.
type Policies = Arc<Vec<tessera_store::TrustPolicy>>;

/// How long a client's trust policies are used before they are read again.
const POLICIES_LIFETIME_SECS: i64 = 5;

/// The claims read (RFC 7523 section 3).
#[derive(Debug, Deserialize)]
struct Claims {
    iss: String,
    sub: String,
    aud: Audience,
    #[serde(default)]
    exp: Option<i64>,
    #[serde(default)]
    nbf: Option<i64>,
    #[serde(default)]
    iat: Option<i64>,
    #[serde(default)]
    jti: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Audience {
    One(String),
    Many(Vec<String>),
}

impl Audience {
    /// Whether the audience is one of `wanted` and nothing else: a string, or an array of
    /// that one string (draft-ietf-oauth-rfc7523bis: the authorization server is the sole
    /// audience). An array with any other member is refused, since an assertion made for
    /// several servers could be replayed here by any of them; an array of one names no other
    /// server, and some libraries write every `aud` as an array.
    fn is_only(&self, wanted: &[&str]) -> bool {
        let one = match self {
            Self::One(a) => a,
            Self::Many(all) => match all.as_slice() {
                [a] => a,
                _ => return false,
            },
        };
        wanted.iter().any(|w| one.trim_end_matches('/') == *w)
    }
}

/// The `sub` of an assertion, read without verifying it: only to find which client's keys
/// to verify it with when the body names no `client_id` (RFC 7523 section 3: `sub` is the
/// client id). Nothing else is believed before the signature.
pub(crate) fn claimed_client(assertion: &str) -> Option<String> {
    unverified_claim(assertion, "sub")
}

/// A string claim of an assertion, read without verifying it: only to choose how to verify
/// it (`iss` tells a client's own assertion from a platform's token).
pub(crate) fn unverified_claim(assertion: &str, name: &str) -> Option<String> {
    use base64::Engine;
    if assertion.len() > MAX_ASSERTION_LEN {
        return None;
    }
    let payload = assertion.split('.').nth(1)?;
    let payload = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .ok()?;
    let claims: Map<String, Value> = decode_claims(&payload)?;
    claims.get(name)?.as_str().map(str::to_owned)
}

/// The prefix of a trust policy's subject pattern that ends in a wildcard: what precedes a
/// final `*` written right after a delimiter (`:` or `/`), as in `repo:acme/payments:*`.
/// `None` for any other pattern, which is an exact subject: a `*` elsewhere would let
/// `repo:acme/payments*` take in `repo:acme/payments-evil`, and a bare `*` everyone.
fn wildcard_prefix(pattern: &str) -> Option<&str> {
    pattern
        .strip_suffix('*')
        .filter(|prefix| prefix.ends_with([':', '/']))
}

/// Whether `pattern` may be written as a trust policy's subject: exact with no `*`, or a
/// prefix ending in a delimiter and one trailing `*`; at most 1024 characters.
pub(crate) fn is_subject_pattern(pattern: &str) -> bool {
    let stem = wildcard_prefix(pattern).unwrap_or(pattern);
    !stem.is_empty() && !stem.contains('*') && pattern.len() <= 1024
}

/// Whether `subject` matches `pattern`: starting with its prefix if it ends in a wildcard
/// ([`wildcard_prefix`]), else equal. A pattern stored before the delimiter rule (such as
/// `*` alone) is taken as exact text, so it admits no one it should not.
pub(crate) fn subject_matches(pattern: &str, subject: &str) -> bool {
    match wildcard_prefix(pattern) {
        Some(prefix) => subject.starts_with(prefix),
        None => subject == pattern,
    }
}

/// Whether one of `keys` verifies the assertion: `None` when none has its `kid` (if it
/// names one) and fits its algorithm, else whether one of those verifies the signature.
fn pick(
    keys: &[PublicJwk],
    unverified: &tessera_proto::jws::UnverifiedAssertion<'_>,
) -> Option<bool> {
    let candidates: Vec<&PublicJwk> = keys
        .iter()
        .filter(|k| match (&unverified.kid, &k.kid) {
            (Some(wanted), Some(kid)) => wanted == kid,
            (Some(_), None) => false,
            (None, _) => true,
        })
        .filter(|k| k.key.fits(unverified.alg))
        .filter(|k| {
            k.alg
                .as_deref()
                .is_none_or(|a| a == unverified.alg.as_str())
        })
        .collect();
    if candidates.is_empty() {
        return None;
    }
    Some(candidates.iter().any(|k| {
        tessera_jose::verify_signature(
            &k.key,
            unverified.alg,
            unverified.signing_input,
            &unverified.signature,
        )
    }))
}

/// Whether claim `name` has `value`: equal JSON, or a string claim equal to a string value
/// written otherwise (`true` for a boolean claim, `42` for a number).
fn claim_is(claims: &Map<String, Value>, name: &str, value: &Value) -> bool {
    match (claims.get(name), value) {
        (Some(found), wanted) if found == wanted => true,
        (Some(found), Value::String(wanted)) => {
            !found.is_string() && serde_json::from_str::<Value>(wanted).is_ok_and(|w| w == *found)
        }
        _ => false,
    }
}

/// The claims of a platform token whose signature verified, once its times hold: `exp`
/// present and not past, `nbf` and `iat` not ahead (60 s leeway each).
fn token_claims(
    verified: &tessera_proto::jws::UnverifiedAssertion<'_>,
    now: i64,
) -> Result<Map<String, Value>, AssertionError> {
    let claims: Map<String, Value> =
        decode_claims(&verified.payload).ok_or(AssertionError::Claims)?;
    let number = |name: &str| claims.get(name).and_then(Value::as_i64);
    let exp = number("exp").ok_or(AssertionError::NoExpiry)?;
    if exp + LEEWAY_SECS <= now {
        return Err(AssertionError::Expired);
    }
    if [number("nbf"), number("iat")]
        .into_iter()
        .flatten()
        .any(|t| t > now + LEEWAY_SECS)
    {
        return Err(AssertionError::NotYetValid);
    }
    claims
        .get("sub")
        .and_then(Value::as_str)
        .ok_or(AssertionError::Claims)?;
    Ok(claims)
}

/// Whether trust `policy` admits a platform token with `claims` (its times already
/// checked): `aud` holds the policy's audience, `sub` matches its pattern, each required
/// claim has its value, and the token lives no longer than the policy allows, measured from
/// `iat`, which must then be present (without it, a long-lived token would pass in its last
/// minutes). The subject, when admitted.
fn policy_admits<'c>(
    policy: &tessera_store::TrustPolicy,
    claims: &'c Map<String, Value>,
) -> Result<&'c str, AssertionError> {
    let subject = claims
        .get("sub")
        .and_then(Value::as_str)
        .ok_or(AssertionError::Claims)?;
    let audience = match claims.get("aud") {
        Some(Value::String(a)) => *a == policy.audience,
        Some(Value::Array(all)) => all.iter().any(|a| a.as_str() == Some(&policy.audience)),
        _ => false,
    };
    if !audience {
        return Err(AssertionError::PolicyAudience);
    }
    if !subject_matches(&policy.subject, subject) {
        return Err(AssertionError::PolicySubject);
    }
    let required: Map<String, Value> = serde_json::from_str(&policy.claims).unwrap_or_default();
    if !required
        .iter()
        .all(|(name, value)| claim_is(claims, name, value))
    {
        return Err(AssertionError::PolicyClaim);
    }
    if let Some(max) = policy.max_assertion_ttl {
        let number = |name: &str| claims.get(name).and_then(Value::as_i64);
        let (Some(exp), Some(iat)) = (number("exp"), number("iat")) else {
            return Err(AssertionError::PolicyNoIssuedAt);
        };
        if exp - iat > i64::from(max) {
            return Err(AssertionError::PolicyLifetime);
        }
    }
    Ok(subject)
}

/// Whether a JWK Set has at least one key an assertion could be verified with.
pub(crate) fn has_usable_key(jwks: &str) -> bool {
    !public_keys(jwks).is_empty()
}

/// What checking one request's assertion works with.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Checking<'a> {
    /// The clock the times are checked by.
    pub(crate) clock: &'a Clock,
    /// This server's issuer identifier: the `aud` of a client's own assertion.
    pub(crate) issuer: &'a str,
    /// Redis, when limits are counted there: a `jti` used at any instance is a replay.
    pub(crate) redis: Option<&'a RedisLimiter>,
    /// What fetching keys may do on the request's behalf.
    pub(crate) outbound: Outbound<'a>,
}

/// The `private_key_jwt` state of one server.
#[derive(Debug)]
pub(crate) struct Assertions {
    /// The `jti`s of assertions seen.
    replay: Replay,
    /// Keys registered by URL.
    key_sets: KeySets,
    /// Trust policies by client, with when they were read.
    policies: Mutex<HashMap<String, (i64, Policies)>>,
}

impl Assertions {
    /// Fetches from private and loopback addresses only when `allow_private`.
    pub(crate) fn new(allow_private: bool) -> Self {
        Self {
            replay: Replay::new(
                "jti:",
                ReplayCache::remembering(MAX_LIFETIME_SECS + 2 * LEEWAY_SECS, REPLAY_CAPACITY),
            ),
            key_sets: KeySets::new(allow_private),
            policies: Mutex::new(HashMap::new()),
        }
    }

    /// The trust policies of `client`, read from the store at most every 5 s.
    pub(crate) async fn policies_of(
        &self,
        clock: &Clock,
        store: &dyn tessera_store::Store,
        client: &tessera_proto::ClientId,
    ) -> Arc<Vec<tessera_store::TrustPolicy>> {
        let now = clock.now();
        if let Some((at, policies)) = self
            .policies
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(client.as_str())
        {
            if now - at < POLICIES_LIFETIME_SECS {
                return policies.clone();
            }
        }
        let read = match store.trust_policies_of(client).await {
            Ok(policies) => Arc::new(policies),
            Err(e) => {
                tracing::warn!(error = %e, "cannot read trust policies");
                return Arc::new(Vec::new());
            }
        };
        let mut cached = self.policies.lock().unwrap_or_else(|p| p.into_inner());
        if cached.len() >= MAX_CACHED_CLIENTS {
            cached.clear();
        }
        cached.insert(client.as_str().to_owned(), (now, read.clone()));
        read
    }

    /// Verifies a platform's token (workload identity federation) against the trust
    /// `policies` of client `client_id`: for each policy naming the token's issuer, the
    /// signature with that policy's own keys (its `jwks_uri`, or the issuer's OIDC discovery),
    /// so that a policy trusting one key set never admits a token for a sibling that trusts
    /// another; `exp`/`nbf`/`iat`; and the policy's audience, subject pattern, claims and
    /// lifetime. Platform tokens are reused until they expire (a projected service-account
    /// token is), so `jti` is not single-use.
    pub(crate) async fn verify_federated(
        &self,
        checking: Checking<'_>,
        policies: &[tessera_store::TrustPolicy],
        token: &str,
    ) -> Result<Federated, AssertionError> {
        let now = checking.clock.now();
        let issuer = unverified_claim(token, "iss").ok_or(AssertionError::Claims)?;
        let candidates: Vec<&tessera_store::TrustPolicy> =
            policies.iter().filter(|p| p.issuer == issuer).collect();
        if candidates.is_empty() {
            return Err(AssertionError::NoPolicy);
        }
        let unverified =
            parse_assertion(token, MAX_ASSERTION_LEN, &ALGORITHMS).map_err(|e| match e {
                tessera_proto::jws::JwsError::AlgorithmNotAllowed => AssertionError::Algorithm,
                _ => AssertionError::Malformed,
            })?;
        // What each key source said of the signature: policies sharing one ask it once.
        let mut signed: Vec<(Option<&str>, Result<(), AssertionError>)> = Vec::new();
        let mut claims: Option<Map<String, Value>> = None;
        // Why the token was refused: a policy's own reason once some key set verified it.
        let (mut key_refusal, mut policy_refusal) = (None, None);
        for policy in candidates {
            let jwks_uri = policy.jwks_uri.as_deref();
            let outcome = match signed.iter().find(|(uri, _)| *uri == jwks_uri) {
                Some((_, outcome)) => *outcome,
                None => {
                    let outcome = self
                        .signed_by(checking, &issuer, jwks_uri, &unverified)
                        .await;
                    signed.push((jwks_uri, outcome));
                    outcome
                }
            };
            if let Err(refusal) = outcome {
                key_refusal.get_or_insert(refusal);
                continue;
            }
            let claims = match &mut claims {
                Some(claims) => &*claims,
                None => &*claims.insert(token_claims(&unverified, now)?),
            };
            match policy_admits(policy, claims) {
                Ok(subject) => {
                    return Ok(Federated {
                        policy: policy.name.clone(),
                        issuer,
                        subject: subject.to_owned(),
                    })
                }
                Err(refusal) => policy_refusal = Some(refusal),
            }
        }
        Err(policy_refusal
            .or(key_refusal)
            .unwrap_or(AssertionError::NoPolicy))
    }

    /// Whether `unverified` is signed by a key of `issuer` from `jwks_uri`, or from the
    /// issuer's discovery document when there is none.
    async fn signed_by(
        &self,
        checking: Checking<'_>,
        issuer: &str,
        jwks_uri: Option<&str>,
        unverified: &tessera_proto::jws::UnverifiedAssertion<'_>,
    ) -> Result<(), AssertionError> {
        let source = match jwks_uri {
            Some(url) => Source::Jwks(url.to_owned()),
            None => Source::Discovery(issuer.to_owned()),
        };
        let verified = self
            .verified_at(checking, &source, unverified)
            .await?
            .ok_or(AssertionError::IssuerKeysUnavailable)?;
        match verified {
            None => Err(AssertionError::UnknownKey),
            Some(false) => Err(AssertionError::Signature),
            Some(true) => Ok(()),
        }
    }

    /// Whether one of the keys at `source` verifies `unverified` (as [`pick`] says), fetched
    /// again once if none has its `kid`: the owner may have rolled its keys over. `None`
    /// when no keys could be had at all.
    async fn verified_at(
        &self,
        checking: Checking<'_>,
        source: &Source,
        unverified: &tessera_proto::jws::UnverifiedAssertion<'_>,
    ) -> Result<Option<Option<bool>>, AssertionError> {
        let Checking {
            clock, outbound, ..
        } = checking;
        let busy = |_| AssertionError::Overloaded;
        let first = self
            .key_sets
            .keys(clock, source, false, outbound)
            .await
            .map_err(busy)?;
        if let Some(verified) = first.as_deref().and_then(|keys| pick(keys, unverified)) {
            return Ok(Some(Some(verified)));
        }
        let again = self
            .key_sets
            .keys(clock, source, true, outbound)
            .await
            .map_err(busy)?;
        Ok(match (again, first) {
            (Some(keys), _) => Some(pick(&keys, unverified)),
            (None, None) => None,
            (None, Some(_)) => Some(None),
        })
    }

    /// Verifies `assertion` as client `client_id`'s, whose keys are `registered`.
    pub(crate) async fn verify(
        &self,
        checking: Checking<'_>,
        client_id: &str,
        registered: &KeySource,
        assertion: &str,
    ) -> Result<(), AssertionError> {
        let now = checking.clock.now();
        let unverified =
            parse_assertion(assertion, MAX_ASSERTION_LEN, &ALGORITHMS).map_err(|e| match e {
                tessera_proto::jws::JwsError::AlgorithmNotAllowed => AssertionError::Algorithm,
                _ => AssertionError::Malformed,
            })?;
        let pick = |keys: &[PublicJwk]| pick(keys, &unverified);
        let verified = match registered {
            KeySource::Jwks(jwks) => pick(&public_keys(jwks)),
            KeySource::JwksUri(url) => self
                .verified_at(checking, &Source::Jwks(url.clone()), &unverified)
                .await?
                .ok_or(AssertionError::KeysUnavailable)?,
        };
        match verified {
            None => return Err(AssertionError::UnknownKey),
            Some(false) => return Err(AssertionError::Signature),
            Some(true) => {}
        }

        let claims: Claims = decode_claims(&unverified.payload).ok_or(AssertionError::Claims)?;
        if claims.iss != client_id || claims.sub != client_id {
            return Err(AssertionError::Subject);
        }
        let issuer = checking.issuer.trim_end_matches('/');
        let endpoint = format!("{issuer}/connect/token");
        if !claims.aud.is_only(&[issuer, endpoint.as_str()]) {
            return Err(AssertionError::Audience);
        }
        let exp = claims.exp.ok_or(AssertionError::NoExpiry)?;
        if exp + LEEWAY_SECS <= now {
            return Err(AssertionError::Expired);
        }
        if exp > now + MAX_LIFETIME_SECS + LEEWAY_SECS {
            return Err(AssertionError::TooLong);
        }
        if [claims.nbf, claims.iat]
            .into_iter()
            .flatten()
            .any(|t| t > now + LEEWAY_SECS)
        {
            return Err(AssertionError::NotYetValid);
        }
        let jti = claims
            .jti
            .filter(|j| !j.is_empty() && j.len() <= 256)
            .ok_or(AssertionError::NoJti)?;
        // Remembered until the assertion expires; charged to the client.
        let ttl = (exp + LEEWAY_SECS - now).max(1) as u64;
        self.replay
            .first_use(checking.redis, client_id, client_id, &jti, now, ttl)
            .await
            .map_err(|e| match e {
                ReplayError::Busy => AssertionError::Busy,
                ReplayError::Replayed => AssertionError::Replayed,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use aws_lc_rs::signature::{Ed25519KeyPair, KeyPair};
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine;

    /// An EdDSA JWS with `kid` over `claims`, and the JWK Set entry of its key with `alg`.
    fn signed(claims: &Value, kid: &str, alg: Option<&str>) -> (String, String) {
        let pair = Ed25519KeyPair::generate().unwrap();
        let header = serde_json::json!({"alg": "EdDSA", "kid": kid, "typ": "JWT"});
        let input = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let signature = URL_SAFE_NO_PAD.encode(pair.sign(input.as_bytes()));
        let mut jwk = serde_json::json!({"kty": "OKP", "crv": "Ed25519", "kid": kid,
            "x": URL_SAFE_NO_PAD.encode(pair.public_key().as_ref())});
        if let Some(alg) = alg {
            jwk["alg"] = Value::from(alg);
        }
        let jwks = serde_json::json!({ "keys": [jwk] }).to_string();
        (format!("{input}.{signature}"), jwks)
    }

    /// A key that names its `alg` verifies assertions of that algorithm only.
    #[test]
    fn a_key_with_an_alg_verifies_that_algorithm_only() {
        let claims = serde_json::json!({"sub": "tc_a"});
        for (alg, verified) in [
            (None, Some(true)),
            (Some("EdDSA"), Some(true)),
            (Some("ES256"), None),
        ] {
            let (token, jwks) = signed(&claims, "k1", alg);
            let unverified = parse_assertion(&token, MAX_ASSERTION_LEN, &ALGORITHMS).unwrap();
            assert_eq!(pick(&public_keys(&jwks), &unverified), verified, "{alg:?}");
        }
    }

    /// A platform token's times hold within 60 s of leeway, to the second.
    #[test]
    fn a_platform_tokens_times_hold_within_the_leeway() {
        let now = 1_700_000_000;
        let times = |exp: i64, nbf: Option<i64>, iat: Option<i64>| {
            let mut claims = serde_json::json!({"sub": "repo:acme/x:ref:main", "exp": exp});
            if let Some(nbf) = nbf {
                claims["nbf"] = Value::from(nbf);
            }
            if let Some(iat) = iat {
                claims["iat"] = Value::from(iat);
            }
            let (token, _) = signed(&claims, "k1", None);
            let unverified = parse_assertion(&token, MAX_ASSERTION_LEN, &ALGORITHMS).unwrap();
            token_claims(&unverified, now).map(drop)
        };
        assert_eq!(times(now - 59, None, None), Ok(()));
        assert_eq!(times(now - 60, None, None), Err(AssertionError::Expired));
        assert_eq!(times(now + 600, Some(now + 60), Some(now + 60)), Ok(()));
        assert_eq!(
            times(now + 600, Some(now + 61), None),
            Err(AssertionError::NotYetValid)
        );
        assert_eq!(
            times(now + 600, None, Some(now + 61)),
            Err(AssertionError::NotYetValid)
        );
    }

    /// A policy's maximum lifetime admits a token that lives exactly that long.
    #[test]
    fn a_policy_admits_a_lifetime_up_to_its_maximum() {
        let policy = tessera_store::TrustPolicy {
            name: "p".into(),
            client_id: tessera_proto::ClientId::parse("tc_app").unwrap(),
            issuer: "https://issuer.example".into(),
            jwks_uri: None,
            audience: "tessera".into(),
            subject: "repo:acme/x:*".into(),
            claims: "{}".into(),
            max_assertion_ttl: Some(600),
            created_at: 0,
        };
        let lifetime = |seconds: i64| {
            let claims: Map<String, Value> = serde_json::from_value(serde_json::json!({
                "sub": "repo:acme/x:ref:main", "aud": "tessera",
                "iat": 1_000, "exp": 1_000 + seconds,
            }))
            .unwrap();
            policy_admits(&policy, &claims).map(str::to_owned)
        };
        assert_eq!(lifetime(600).as_deref(), Ok("repo:acme/x:ref:main"));
        assert_eq!(lifetime(601), Err(AssertionError::PolicyLifetime));
    }

    /// Only a JWK Set with a public key an assertion could be verified with is usable.
    #[test]
    fn a_key_set_is_usable_with_one_public_key() {
        let (_, jwks) = signed(&serde_json::json!({}), "k1", None);
        assert!(has_usable_key(&jwks));
        assert!(!has_usable_key(r#"{"keys": []}"#));
        assert!(!has_usable_key(
            r#"{"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}"#
        ));
        assert!(!has_usable_key("not json"));
    }

    /// The unverified `sub` is read from an assertion of up to 8 KiB, not from a longer one.
    #[test]
    fn claims_are_read_unverified_from_assertions_up_to_the_bound() {
        let (token, _) = signed(&serde_json::json!({"sub": "tc_a"}), "k1", None);
        let padded = |len: usize| format!("{token}{}", "A".repeat(len - token.len()));
        assert_eq!(
            claimed_client(&padded(MAX_ASSERTION_LEN)).as_deref(),
            Some("tc_a")
        );
        assert_eq!(claimed_client(&padded(MAX_ASSERTION_LEN + 1)), None);
    }

    /// A `--claim NAME=VALUE` matches equal JSON, or a claim of another type written as text.
    #[test]
    fn a_claim_value_matches_as_json_or_as_text() {
        let claims: Map<String, Value> = serde_json::from_value(serde_json::json!({
            "repository_id": 892375, "ref": "refs/heads/main", "protected": true,
        }))
        .unwrap();
        let is = |name: &str, value: Value| claim_is(&claims, name, &value);
        assert!(is("repository_id", Value::from("892375")));
        assert!(is("repository_id", Value::from(892375)));
        assert!(!is("repository_id", Value::from("892376")));
        assert!(is("protected", Value::from("true")));
        assert!(is("ref", Value::from("refs/heads/main")));
        // A string claim is compared as the string, never parsed.
        assert!(!is("ref", Value::from("\"refs/heads/main\"")));
        assert!(!is("missing", Value::from("x")));
    }

    #[test]
    fn a_wildcard_ends_a_pattern_right_after_a_delimiter() {
        for good in [
            "repo:acme/payments:*",
            "repo:acme/*",
            "system:serviceaccount:payments:*",
            "spiffe://acme.example/ns/prod/*",
            "spiffe://acme.example/ns/prod/sa/billing",
        ] {
            assert!(is_subject_pattern(good), "{good}");
        }
        for bad in [
            "",
            "*",
            "**",
            "repo:acme/payments*",
            "repo:*:main",
            "repo:acme/*/*",
            "a*b",
        ] {
            assert!(!is_subject_pattern(bad), "{bad}");
        }
        assert!(subject_matches(
            "repo:acme/payments:*",
            "repo:acme/payments:ref:x"
        ));
        assert!(!subject_matches(
            "repo:acme/payments:*",
            "repo:acme/payments-evil:ref:x"
        ));
        // A pattern an older version stored is exact text.
        assert!(!subject_matches("*", "repo:evil/x:ref:y"));
        assert!(!subject_matches(
            "repo:acme/payments*",
            "repo:acme/payments-evil"
        ));
        assert!(subject_matches("exact", "exact"));
        assert!(!subject_matches("exact", "exact2"));
    }
}
