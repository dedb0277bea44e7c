//! Signing keys: generation, sealing at rest, JWT signing (RFC 7515 compact serialization,
//! RFC 9068 header) and the published key set (RFC 7517).
//!
//! Rotation: a key is published from its creation and signs from `activates_at`, so verifiers
//! can fetch it before they meet it. When a newer key activates, the old one stays published
//! until every token it signed has expired.

use std::sync::Arc;

use serde::Serialize;
use tessera_jose::KeyPair;
use tessera_proto::{jws, AccessTokenClaims, Algorithm, Jwk};
use tessera_store::{SigningKey, Store, StoreError, Timestamp, MAX_TOKEN_TTL};
use thiserror::Error;

use crate::secrets::{Secrets, SecretsError};

/// Why a stored key could not be used.
#[derive(Debug, Error)]
pub enum KeyError {
    /// The private key would not decrypt.
    #[error("signing key {kid}: {source}")]
    Unseal {
        /// The key.
        kid: String,
        /// Why.
        source: SecretsError,
    },
    /// The decrypted bytes are not a key of the stated algorithm.
    #[error("signing key {0}: not a valid private key")]
    Invalid(String),
}

/// A signing key ready for use, with its JWT header encoded once.
pub struct LoadedKey {
    /// The key identifier: the RFC 7638 thumbprint of the public key.
    pub kid: String,
    /// The algorithm.
    pub alg: Algorithm,
    /// The public key as published.
    pub jwk: Jwk,
    /// When it was created, and so first published.
    pub created_at: Timestamp,
    /// When it starts signing.
    pub activates_at: Timestamp,
    /// `base64url(header) + "."`, computed once per key.
    header_prefix: String,
    pair: KeyPair,
}

impl std::fmt::Debug for LoadedKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedKey")
            .field("kid", &self.kid)
            .field("alg", &self.alg)
            .field("activates_at", &self.activates_at)
            .finish_non_exhaustive()
    }
}

/// Generates a new key pair and seals its private half for the store.
pub fn generate(
    secrets: &Secrets,
    alg: Algorithm,
    now: Timestamp,
    activates_at: Timestamp,
) -> SigningKey {
    let pkcs8 = KeyPair::generate_pkcs8(alg);
    let pair = KeyPair::from_pkcs8_for(alg, &pkcs8).expect("a key just generated parses");
    // The RFC 7638 thumbprint is the key's `kid`.
    let jwk = pair.public_jwk(pair.thumbprint());
    SigningKey {
        kid: jwk.kid.clone(),
        alg,
        public_jwk: serde_json::to_string(&jwk).expect("JWK serializes"),
        private_sealed: secrets.seal(&jwk.kid, &pkcs8),
        created_at: now,
        activates_at,
    }
}

/// Opens a stored key, or logs why it would not open: such a key is left out, not allowed
/// to stop every other change from loading.
pub fn load_or_log(secrets: &Secrets, record: &SigningKey) -> Option<Arc<LoadedKey>> {
    match load(secrets, record) {
        Ok(key) => Some(Arc::new(key)),
        Err(error) => {
            tracing::error!(%error, "signing key left out");
            None
        }
    }
}

/// Opens a stored key.
pub fn load(secrets: &Secrets, record: &SigningKey) -> Result<LoadedKey, KeyError> {
    let pkcs8 = secrets
        .open(&record.kid, &record.private_sealed)
        .map_err(|source| KeyError::Unseal {
            kid: record.kid.clone(),
            source,
        })?;
    let pair = KeyPair::from_pkcs8_for(record.alg, &pkcs8)
        .map_err(|_| KeyError::Invalid(record.kid.clone()))?;
    if pair.thumbprint() != record.kid {
        return Err(KeyError::Invalid(record.kid.clone()));
    }
    let jwk = pair.public_jwk(&record.kid);
    let mut header = serde_json::Map::new();
    header.insert("typ".into(), "at+jwt".into());
    header.insert("kid".into(), jwk.kid.clone().into());
    let header_prefix = pair.header_prefix(header);
    Ok(LoadedKey {
        kid: jwk.kid.clone(),
        alg: record.alg,
        jwk,
        created_at: record.created_at,
        activates_at: record.activates_at,
        header_prefix,
        pair,
    })
}

impl LoadedKey {
    /// Signs `claims` as a compact JWS (RFC 7515 section 7.1) with the `at+jwt` header.
    pub fn sign_jwt<C: Serialize>(&self, claims: &C) -> String {
        let payload = serde_json::to_vec(claims).expect("claims serialize");
        self.sign_payload(&payload)
    }

    /// Signs `payload`, claims already written as JSON, as a compact JWS with the `at+jwt`
    /// header.
    pub fn sign_payload(&self, payload: &[u8]) -> String {
        self.pair.sign_compact(&self.header_prefix, payload)
    }
}

/// Every algorithm this server signs with, and so reads its own tokens with.
const ALL_ALGORITHMS: &[Algorithm] = &[
    Algorithm::EdDSA,
    Algorithm::ES256,
    Algorithm::RS256,
    Algorithm::PS256,
];

/// The largest token the server reads back (introspection, revocation).
const MAX_TOKEN_LEN: usize = 8 * 1024;

/// The loaded keys, oldest activation first.
#[derive(Debug, Default, Clone)]
pub struct KeyRing {
    keys: Vec<Arc<LoadedKey>>,
}

impl KeyRing {
    /// A ring of these keys; sorts them by activation.
    pub fn new(mut keys: Vec<Arc<LoadedKey>>) -> Self {
        keys.sort_by_key(|k| (k.activates_at, k.created_at));
        Self { keys }
    }

    /// This ring with key `kid` replaced by `key`, or removed when `key` is `None`.
    pub fn replace(&self, kid: &str, key: Option<Arc<LoadedKey>>) -> Self {
        let mut keys: Vec<Arc<LoadedKey>> =
            self.keys.iter().filter(|k| k.kid != kid).cloned().collect();
        keys.extend(key);
        Self::new(keys)
    }

    /// The key that signs now: the newest one whose activation has come.
    pub fn signing_key(&self, now: Timestamp) -> Option<&Arc<LoadedKey>> {
        self.keys.iter().rev().find(|k| k.activates_at <= now)
    }

    /// The keys to publish now (RFC 7517 section 5). Every key not yet active is published,
    /// so that verifiers learn it ahead of time; a key replaced by a newer active one stays
    /// published for [`MAX_TOKEN_TTL`] after it stopped signing: the longest any token can
    /// live, not the current plans' longest, since a plan shortened since may still have
    /// tokens out.
    pub fn published(&self, now: Timestamp) -> Vec<&Arc<LoadedKey>> {
        let retire_after = i64::from(MAX_TOKEN_TTL);
        self.keys
            .iter()
            .enumerate()
            .filter(|(i, _)| match self.keys.get(i + 1) {
                // Superseded once the next key activated.
                Some(next) if next.activates_at <= now => now < next.activates_at + retire_after,
                _ => true,
            })
            .map(|(_, k)| k)
            .collect()
    }

    /// Reads back a token this server signed: the form and header pass the parser every
    /// reader of Tessera tokens uses ([`jws::parse`]: no `jku`, `jwk`, `x5u`, `x5c` or `crit`,
    /// `typ` `at+jwt`), `kid` names a key of this ring whose algorithm is `alg`, and the
    /// signature verifies (RFC 7515 section 5.2). Says nothing of expiry or issuer; the caller
    /// checks those.
    pub fn verify(&self, token: &str) -> Option<AccessTokenClaims> {
        let jws = jws::parse(token, MAX_TOKEN_LEN, ALL_ALGORITHMS).ok()?;
        let key = self.keys.iter().find(|k| k.kid == jws.kid)?;
        if key.alg != jws.alg || !key.pair.verify(jws.signing_input, &jws.signature) {
            return None;
        }
        jws::decode_claims(&jws.payload)
    }
}

/// Makes sure the store has a signing key, generating one of algorithm `alg` on a server's
/// first start only. A server configured for another algorithm than the active key's does
/// not replace it unannounced (rotation publishes first): it warns.
pub async fn bootstrap(
    store: &dyn Store,
    secrets: &Secrets,
    alg: Algorithm,
    now: Timestamp,
) -> Result<(), StoreError> {
    let records = store.keys().await?;
    let ring = KeyRing::new(
        records
            .iter()
            .filter_map(|record| load_or_log(secrets, record))
            .collect(),
    );
    match ring.signing_key(now) {
        Some(key) if key.alg != alg => {
            tracing::warn!(
                active = %key.alg,
                configured = %alg,
                "the active signing key uses another algorithm than configured; \
                 run `tessera keys rotate --alg {alg}` to change it",
            );
        }
        Some(_) => {}
        // The store's keys, not the ring: a key that would not open is no reason for
        // another.
        None if records.is_empty() => {
            let key = generate(secrets, alg, now, now);
            store.insert_key(&key).await?;
            tracing::info!(kid = %key.kid, alg = %key.alg, "generated a signing key");
        }
        // Only keys that are not active yet: wait for the first one (readiness says so).
        None => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine;

    fn secrets() -> Secrets {
        Secrets::from_bytes(&[3; 32])
    }

    fn loaded(alg: Algorithm, activates_at: Timestamp) -> Arc<LoadedKey> {
        let s = secrets();
        Arc::new(load(&s, &generate(&s, alg, activates_at - 10, activates_at)).unwrap())
    }

    /// `Debug` names the key and leaves its pair out: what a log line may show.
    #[test]
    fn debug_names_the_key_and_leaves_the_pair_out() {
        let key = loaded(Algorithm::EdDSA, 100);
        let shown = format!("{key:?}");
        assert!(
            shown.contains(key.kid.as_str())
                && shown.contains("EdDSA")
                && shown.contains("activates_at: 100"),
            "{shown}"
        );
        assert!(!shown.contains("pair"), "{shown}");
    }

    #[test]
    fn keys_round_trip_through_the_store_format() {
        for alg in [Algorithm::EdDSA, Algorithm::ES256] {
            let s = secrets();
            let record = generate(&s, alg, 1, 1);
            assert!(
                !record.public_jwk.contains("\"d\""),
                "no private part in the JWK"
            );
            let key = load(&s, &record).unwrap();
            assert_eq!(key.kid, record.kid);
            let jwt = key.sign_jwt(&serde_json::json!({"a": 1}));
            assert_eq!(jwt.split('.').count(), 3);
            let wrong = Secrets::from_bytes(&[4; 32]);
            assert!(matches!(
                load(&wrong, &record),
                Err(KeyError::Unseal { .. })
            ));
        }
    }

    #[test]
    fn the_ring_reads_back_its_own_tokens_only() {
        let key = loaded(Algorithm::ES256, 10);
        let other = loaded(Algorithm::EdDSA, 10);
        let ring = KeyRing::new(vec![key.clone()]);
        let claims = serde_json::json!({"iss": "i", "sub": "c", "client_id": "c", "aud": ["a"],
            "scope": "a", "iat": 1, "exp": 2, "jti": "j", "app_only": true});
        let good = key.sign_jwt(&claims);
        assert_eq!(ring.verify(&good).unwrap().jti, "j");
        assert!(
            ring.verify(&other.sign_jwt(&claims)).is_none(),
            "unknown kid"
        );
        let mut tampered = good.clone();
        tampered.insert(good.find('.').unwrap() + 3, 'A');
        assert!(ring.verify(&tampered).is_none());
        assert!(ring.verify("a.b").is_none());
        assert!(ring.verify(&format!("{good}.x")).is_none());
    }

    #[test]
    fn the_ring_refuses_hostile_headers_even_under_its_own_signature() {
        let key = loaded(Algorithm::EdDSA, 10);
        let ring = KeyRing::new(vec![key.clone()]);
        let claims = serde_json::json!({"iss": "i", "sub": "c", "client_id": "c", "aud": ["a"],
            "scope": "a", "iat": 1, "exp": 2, "jti": "j", "app_only": true});
        // A token with this header and these claims, correctly signed by `key`.
        let signed = |header: &serde_json::Value| {
            let input = format!(
                "{}.{}",
                URL_SAFE_NO_PAD.encode(header.to_string()),
                URL_SAFE_NO_PAD.encode(claims.to_string())
            );
            let signature = URL_SAFE_NO_PAD.encode(key.pair.sign(input.as_bytes()));
            format!("{input}.{signature}")
        };
        let plain = serde_json::json!({"alg": "EdDSA", "typ": "at+jwt", "kid": key.kid});
        assert_eq!(ring.verify(&signed(&plain)).unwrap().jti, "j");
        let with = |name: &str, value: serde_json::Value| {
            let mut header = plain.clone();
            header[name] = value;
            signed(&header)
        };
        // Each of these passed the server's former parser, which ignored unknown members and
        // took an array for the header object (RFC 7515 sections 4.1.2 to 4.1.6, 4.1.11).
        for hostile in [
            with("crit", serde_json::json!(["exp"])),
            with("jku", serde_json::json!("https://evil.example/jwks.json")),
            with("x5u", serde_json::json!("https://evil.example/cert.pem")),
            with("jwk", serde_json::to_value(&key.jwk).unwrap()),
            with("x5c", serde_json::json!(["MIIB"])),
            signed(&serde_json::json!(["EdDSA", key.kid, "at+jwt"])),
        ] {
            assert!(ring.verify(&hostile).is_none(), "{hostile}");
        }
    }

    #[test]
    fn rotation_publishes_ahead_and_retires_late() {
        let old = loaded(Algorithm::EdDSA, 100);
        let new = loaded(Algorithm::EdDSA, 200);
        let ring = KeyRing::new(vec![new.clone(), old.clone()]);
        let kids =
            |now| -> Vec<String> { ring.published(now).iter().map(|k| k.kid.clone()).collect() };
        // Before the new key activates: the old one signs, both are published.
        assert_eq!(ring.signing_key(150).unwrap().kid, old.kid);
        assert_eq!(kids(150), [old.kid.clone(), new.kid.clone()]);
        // After: the new one signs; the old one stays until its last token expired.
        assert_eq!(ring.signing_key(200).unwrap().kid, new.kid);
        let retired = 200 + i64::from(MAX_TOKEN_TTL);
        assert_eq!(kids(retired - 1), [old.kid.clone(), new.kid.clone()]);
        assert_eq!(kids(retired), std::slice::from_ref(&new.kid));
        assert!(ring.signing_key(99).is_none());
    }
}
