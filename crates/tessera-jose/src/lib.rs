//! Tessera's JOSE keys: the one implementation of what a key pair does, for the server's
//! signing keys, the client kit's DPoP and `private_key_jwt` keys, and the checks of proofs
//! and assertions.
//!
//! - [`KeyPair`]: an Ed25519 (`EdDSA`, RFC 8037), P-256 (`ES256`) or RSA (`RS256`, `PS256`,
//!   RFC 7518 section 3) private key; its public key as JWK members
//!   ([`tessera_proto::jwk::PublicKey`]), its RFC 7638 thumbprint, JWS signatures and compact
//!   serialization (RFC 7515 section 7.1).
//! - [`VerifyingKey`]: a public key parsed once for one algorithm; [`verify_signature`] for a
//!   key that comes with a request (a DPoP proof's `jwk`, a client's registered keys).
//! - [`thumbprint`], [`sha256_b64`]: RFC 7638 section 3 and the base64url SHA-256 that
//!   `ath` (RFC 9449 section 4.2) and `x5t#S256` (RFC 8705 section 3.1) are written in.
//!
//! A crate of its own rather than a module of `tessera-proto`: the vocabulary stays free of
//! any crypto library, so the wire types build and fuzz without one; this crate adds aws-lc
//! and nothing else (no sqlx, no server), so the client kit can use it.

use std::fmt;

use aws_lc_rs::digest;
use aws_lc_rs::encoding::{AsDer, Pkcs8V1Der};
use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::rsa::KeySize;
use aws_lc_rs::signature::{
    EcdsaKeyPair, Ed25519KeyPair, KeyPair as _, ParsedPublicKey, RsaKeyPair, UnparsedPublicKey,
    ECDSA_P256_SHA256_FIXED, ECDSA_P256_SHA256_FIXED_SIGNING, ED25519, RSA_PKCS1_2048_8192_SHA256,
    RSA_PKCS1_SHA256, RSA_PSS_2048_8192_SHA256, RSA_PSS_SHA256,
};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde_json::{Map, Value};
use tessera_proto::jwk::{rsa_der, PublicKey};
use tessera_proto::{Algorithm, Jwk};
use thiserror::Error;

/// The bytes were not an unencrypted PKCS #8 private key (RFC 5958) of a type Tessera signs
/// with: Ed25519, P-256, or RSA of 2048 to 8192 bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("not an unencrypted PKCS #8 Ed25519, P-256 or RSA (2048 to 8192 bits) private key")]
pub struct KeyError;

/// A private key and the one algorithm it signs with. `Debug` prints the algorithm and the
/// public key's thumbprint, and `[redacted]` for the private key.
pub struct KeyPair {
    pair: Pair,
    alg: Algorithm,
    /// The public key as JWK members.
    public: PublicKey,
    /// The RFC 7638 thumbprint of `public`.
    thumbprint: String,
    /// `public`, parsed for `alg`, to check signatures of this key.
    verifying: VerifyingKey,
}

enum Pair {
    Ed25519(Ed25519KeyPair),
    P256(EcdsaKeyPair),
    /// RS256 or PS256: the algorithm says which padding.
    Rsa(RsaKeyPair),
}

impl fmt::Debug for KeyPair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyPair")
            .field("alg", &self.alg)
            .field("thumbprint", &self.thumbprint)
            .field("private_key", &"[redacted]")
            .finish()
    }
}

impl KeyPair {
    /// A new key for `alg` (RSA keys are 2048 bits).
    ///
    /// # Panics
    ///
    /// Only if the operating system's random source fails.
    pub fn generate(alg: Algorithm) -> Self {
        let pair = match alg {
            Algorithm::EdDSA => {
                Pair::Ed25519(Ed25519KeyPair::generate().expect("the system's random source"))
            }
            Algorithm::ES256 => Pair::P256(
                EcdsaKeyPair::generate(&ECDSA_P256_SHA256_FIXED_SIGNING)
                    .expect("the system's random source"),
            ),
            Algorithm::RS256 | Algorithm::PS256 => Pair::Rsa(
                RsaKeyPair::generate(KeySize::Rsa2048).expect("the system's random source"),
            ),
        };
        Self::new(pair, alg)
    }

    /// The unencrypted PKCS #8 DER (RFC 5958) of a new key for `alg` (RSA keys are 2048
    /// bits), for a key that is kept: read it back with [`from_pkcs8_for`](Self::from_pkcs8_for).
    ///
    /// # Panics
    ///
    /// Only if the operating system's random source fails.
    pub fn generate_pkcs8(alg: Algorithm) -> Vec<u8> {
        let rng = SystemRandom::new();
        match alg {
            Algorithm::EdDSA => Ed25519KeyPair::generate_pkcs8(&rng).map(|d| d.as_ref().to_vec()),
            Algorithm::ES256 => {
                EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
                    .map(|d| d.as_ref().to_vec())
            }
            Algorithm::RS256 | Algorithm::PS256 => RsaKeyPair::generate(KeySize::Rsa2048)
                .and_then(|pair| AsDer::<Pkcs8V1Der>::as_der(&pair))
                .map(|d| d.as_ref().to_vec()),
        }
        .expect("the system's random source")
    }

    /// A key from its unencrypted PKCS #8 DER, its algorithm told by its type: Ed25519 signs
    /// `EdDSA`, P-256 `ES256`, and RSA (2048 to 8192 bits) `RS256`.
    pub fn from_pkcs8(der: &[u8]) -> Result<Self, KeyError> {
        [Algorithm::EdDSA, Algorithm::ES256, Algorithm::RS256]
            .into_iter()
            .find_map(|alg| Self::from_pkcs8_for(alg, der).ok())
            .ok_or(KeyError)
    }

    /// A key for `alg` from its unencrypted PKCS #8 DER, which must be of `alg`'s type.
    pub fn from_pkcs8_for(alg: Algorithm, der: &[u8]) -> Result<Self, KeyError> {
        let pair = match alg {
            Algorithm::EdDSA => Ed25519KeyPair::from_pkcs8(der).ok().map(Pair::Ed25519),
            Algorithm::ES256 => EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, der)
                .ok()
                .map(Pair::P256),
            Algorithm::RS256 | Algorithm::PS256 => RsaKeyPair::from_pkcs8(der).ok().map(Pair::Rsa),
        };
        pair.map(|pair| Self::new(pair, alg)).ok_or(KeyError)
    }

    fn new(pair: Pair, alg: Algorithm) -> Self {
        let b64 = |bytes: &[u8]| URL_SAFE_NO_PAD.encode(bytes);
        let public = match &pair {
            Pair::Ed25519(p) => PublicKey::Ed25519 {
                x: b64(p.public_key().as_ref()),
            },
            Pair::P256(p) => {
                // An uncompressed SEC1 point: 0x04 || x || y.
                let (x, y) = p.public_key().as_ref()[1..].split_at(32);
                PublicKey::P256 {
                    x: b64(x),
                    y: b64(y),
                }
            }
            Pair::Rsa(p) => {
                let (n, e) = rsa_der::decode(p.public_key().as_ref())
                    .expect("an RSA public key is a DER RSAPublicKey");
                PublicKey::Rsa {
                    n: b64(&n),
                    e: b64(&e),
                }
            }
        };
        let verifying = VerifyingKey::new(&public, alg).expect("a key pair's own public key");
        Self {
            thumbprint: thumbprint(&public),
            pair,
            alg,
            public,
            verifying,
        }
    }

    /// The algorithm it signs with.
    pub fn algorithm(&self) -> Algorithm {
        self.alg
    }

    /// The public key, as JWK members.
    pub fn public_key(&self) -> &PublicKey {
        &self.public
    }

    /// The public key as a published JWK (RFC 7517) for its algorithm, named `kid`.
    pub fn public_jwk(&self, kid: &str) -> Jwk {
        self.public.to_jwk(self.alg, kid)
    }

    /// The public key's RFC 7638 thumbprint, base64url: Tessera's `kid` for its signing
    /// keys, and the `cnf.jkt` of tokens bound to a DPoP key (RFC 9449 section 6.1).
    pub fn thumbprint(&self) -> &str {
        &self.thumbprint
    }

    /// The signature of `message`, a JWS signing input (RFC 7515 section 5.1): ECDSA as
    /// `r || s` (RFC 7518 section 3.4), RSA with PKCS #1 v1.5 or PSS padding by the algorithm.
    ///
    /// # Panics
    ///
    /// Only if the operating system's random source fails.
    pub fn sign(&self, message: &[u8]) -> Vec<u8> {
        match &self.pair {
            Pair::Ed25519(p) => p.sign(message).as_ref().to_vec(),
            Pair::P256(p) => p
                .sign(&SystemRandom::new(), message)
                .expect("the system's random source")
                .as_ref()
                .to_vec(),
            Pair::Rsa(p) => {
                let padding: &dyn aws_lc_rs::signature::RsaEncoding = match self.alg {
                    Algorithm::PS256 => &RSA_PSS_SHA256,
                    _ => &RSA_PKCS1_SHA256,
                };
                let mut signature = vec![0; p.public_modulus_len()];
                p.sign(padding, &SystemRandom::new(), message, &mut signature)
                    .expect("the system's random source");
                signature
            }
        }
    }

    /// `base64url(header) + "."` for a JWS of this key: `header`'s members with `alg` set to
    /// the key's (RFC 7515 section 7.1), to make once and give to
    /// [`sign_compact`](Self::sign_compact) for every JWS with that header.
    pub fn header_prefix(&self, mut header: Map<String, Value>) -> String {
        header.insert("alg".into(), self.alg.as_str().into());
        format!(
            "{}.",
            URL_SAFE_NO_PAD.encode(Value::Object(header).to_string())
        )
    }

    /// The compact JWS (RFC 7515 section 7.1) of `payload` under the header that
    /// `header_prefix` encodes.
    pub fn sign_compact(&self, header_prefix: &str, payload: &[u8]) -> String {
        let mut jws = Vec::with_capacity(header_prefix.len() + payload.len() * 4 / 3 + 100);
        jws.extend_from_slice(header_prefix.as_bytes());
        push_base64url(&mut jws, payload);
        let signature = self.sign(&jws);
        jws.push(b'.');
        push_base64url(&mut jws, &signature);
        // The prefix is a string and the rest base64url and a dot: never an error.
        String::from_utf8(jws).unwrap_or_default()
    }

    /// Whether `signature` is this key's signature of `message`.
    pub fn verify(&self, message: &[u8], signature: &[u8]) -> bool {
        self.verifying.verify(message, signature)
    }
}

/// Appends the base64url encoding of `bytes`, without padding (RFC 7515 section 2), to
/// `out`, encoded in place rather than through `Engine::encode_string`'s chunked writes
/// (BENCHMARKS.md, issue 31).
fn push_base64url(out: &mut Vec<u8>, bytes: &[u8]) {
    let start = out.len();
    let len = base64::encoded_len(bytes.len(), false).unwrap_or(0);
    out.resize(start + len, 0);
    let written = URL_SAFE_NO_PAD
        .encode_slice(bytes, &mut out[start..])
        .unwrap_or(0);
    out.truncate(start + written);
}

/// A public key parsed once for the one algorithm it may be used with, to check signatures.
#[derive(Debug)]
pub struct VerifyingKey {
    alg: Algorithm,
    key: ParsedPublicKey,
}

impl VerifyingKey {
    /// `key` for `alg`, or `None` when it is not a key of `alg`'s type (RFC 8725 section
    /// 3.1: the key decides the algorithm), not a valid point or modulus, or an RSA key of
    /// fewer than 2048 bits.
    pub fn new(key: &PublicKey, alg: Algorithm) -> Option<Self> {
        if !key.fits(alg) {
            return None;
        }
        let decode = |b64: &str| URL_SAFE_NO_PAD.decode(b64).ok();
        let coordinate = |b64: &str| decode(b64).filter(|bytes| bytes.len() == 32);
        let parsed = match key {
            PublicKey::Ed25519 { x } => UnparsedPublicKey::new(&ED25519, coordinate(x)?).parse(),
            PublicKey::P256 { x, y } => {
                // SEC1 uncompressed point: 0x04 || x || y.
                let mut point = vec![0x04];
                point.extend(coordinate(x)?);
                point.extend(coordinate(y)?);
                UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, point).parse()
            }
            PublicKey::Rsa { n, e } => {
                // RFC 7518 section 6.3.1: unsigned big-endian; at least 2048 bits.
                let (n, e) = (decode(n)?, decode(e)?);
                let bits = n.iter().skip_while(|&&b| b == 0).count() * 8;
                if bits < 2048 {
                    return None;
                }
                let der = rsa_der::encode(&n, &e);
                match alg {
                    Algorithm::PS256 => {
                        UnparsedPublicKey::new(&RSA_PSS_2048_8192_SHA256, der).parse()
                    }
                    _ => UnparsedPublicKey::new(&RSA_PKCS1_2048_8192_SHA256, der).parse(),
                }
            }
        };
        Some(Self {
            alg,
            key: parsed.ok()?,
        })
    }

    /// The algorithm it checks signatures of.
    pub fn algorithm(&self) -> Algorithm {
        self.alg
    }

    /// The public key's bytes as parsed (a point, or a DER `RSAPublicKey`): two keys with the
    /// same bytes and algorithm are the same key.
    pub fn public_bytes(&self) -> &[u8] {
        self.key.as_ref()
    }

    /// Whether `signature` over `message` verifies with this key.
    pub fn verify(&self, message: &[u8], signature: &[u8]) -> bool {
        self.key.verify_sig(message, signature).is_ok()
    }
}

/// Whether `signature` over `message` verifies with the public `key` under `alg`: for keys
/// that come with the request or the client rather than from the issuer (a DPoP proof's
/// `jwk`, RFC 9449 section 4.3; a `private_key_jwt` client's keys, RFC 7523 section 3). The
/// key must be of `alg`'s type, and an RSA key at least 2048 bits.
pub fn verify_signature(key: &PublicKey, alg: Algorithm, message: &[u8], signature: &[u8]) -> bool {
    VerifyingKey::new(key, alg).is_some_and(|k| k.verify(message, signature))
}

/// The RFC 7638 thumbprint of `key`, base64url: SHA-256 over its required members in
/// lexicographic order ([`PublicKey::thumbprint_input`]).
pub fn thumbprint(key: &PublicKey) -> String {
    sha256_b64(key.thumbprint_input().as_bytes())
}

/// base64url SHA-256 of `input`: a thumbprint (RFC 7638 section 3), `ath` (RFC 9449 section
/// 4.2) or `x5t#S256` (RFC 8705 section 3.1).
pub fn sha256_b64(input: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(digest::digest(&digest::SHA256, input))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALGORITHMS: [Algorithm; 4] = [
        Algorithm::EdDSA,
        Algorithm::ES256,
        Algorithm::RS256,
        Algorithm::PS256,
    ];

    #[test]
    fn base64url_appended_in_place_is_the_engines_encoding() {
        let bytes: Vec<u8> = (0..=255u8).rev().collect();
        for len in 0..70 {
            let mut out = b"prefix.".to_vec();
            push_base64url(&mut out, &bytes[..len]);
            let expected = format!("prefix.{}", URL_SAFE_NO_PAD.encode(&bytes[..len]));
            assert_eq!(String::from_utf8(out).unwrap(), expected, "{len} bytes");
        }
    }

    #[test]
    fn a_key_verifies_its_own_signatures_and_no_one_elses() {
        for alg in ALGORITHMS {
            let key = KeyPair::generate(alg);
            let other = KeyPair::generate(alg);
            let signature = key.sign(b"message");
            assert!(key.verify(b"message", &signature), "{alg}");
            assert!(!key.verify(b"another", &signature), "{alg}");
            assert!(!other.verify(b"message", &signature), "{alg}");
            assert!(verify_signature(
                key.public_key(),
                alg,
                b"message",
                &signature
            ));
        }
        // PKCS #1 v1.5 and PSS signatures of one RSA key are not each other's.
        let der = KeyPair::generate_pkcs8(Algorithm::RS256);
        let rs = KeyPair::from_pkcs8_for(Algorithm::RS256, &der).unwrap();
        let ps = KeyPair::from_pkcs8_for(Algorithm::PS256, &der).unwrap();
        assert_eq!(rs.thumbprint(), ps.thumbprint());
        let signature = rs.sign(b"m");
        assert!(rs.verify(b"m", &signature));
        assert!(!ps.verify(b"m", &signature));
    }

    #[test]
    fn a_key_kept_as_pkcs8_is_the_same_key_and_its_type_tells_the_algorithm() {
        for alg in ALGORITHMS {
            let der = KeyPair::generate_pkcs8(alg);
            let a = KeyPair::from_pkcs8_for(alg, &der).unwrap();
            let b = KeyPair::from_pkcs8(&der).unwrap();
            assert_eq!(a.thumbprint(), b.thumbprint(), "{alg}");
            let told = if alg == Algorithm::PS256 {
                Algorithm::RS256
            } else {
                alg
            };
            assert_eq!(b.algorithm(), told);
        }
        let ed = KeyPair::generate_pkcs8(Algorithm::EdDSA);
        assert_eq!(
            KeyPair::from_pkcs8_for(Algorithm::ES256, &ed).unwrap_err(),
            KeyError
        );
        assert!(KeyPair::from_pkcs8(b"not a key").is_err());
    }

    /// RFC 7638 section 3.1's example key and thumbprint.
    #[test]
    fn the_thumbprint_is_rfc_7638s() {
        let key = PublicKey::Rsa {
            n: "0vx7agoebGcQSuuPiLJXZptN9nndrQmbXEps2aiAFbWhM78LhWx4cbbfAAtVT86zwu1RK7aPFFxuhDR1L6tSoc_BJECPebWKRXjBZCiFV4n3oknjhMstn64tZ_2W-5JsGY4Hc5n9yBXArwl93lqt7_RN5w6Cf0h4QyQ5v-65YGjQR0_FDW2QvzqY368QQMicAtaSqzs8KJZgnYb9c7d0zgdAZHzu6qMQvRL5hajrn1n91CbOpbISD08qNLyrdkt-bFTWhAI4vMQFh6WeZu0fM4lFd2NcRwr3XPksINHaQ-G_xBniIqbw0Ls1jF44-csFCur-kEgU8awapJzKnqDKgw".into(),
            e: "AQAB".into(),
        };
        assert_eq!(
            thumbprint(&key),
            "NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs"
        );
    }

    #[test]
    fn a_jws_is_the_header_the_payload_and_the_signature() {
        let key = KeyPair::generate(Algorithm::EdDSA);
        let mut header = Map::new();
        header.insert("typ".into(), "JWT".into());
        let prefix = key.header_prefix(header);
        let jws = key.sign_compact(&prefix, br#"{"a":1}"#);
        let parts: Vec<&str> = jws.split('.').collect();
        assert_eq!(parts.len(), 3);
        let header: Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[0]).unwrap()).unwrap();
        assert_eq!(header, serde_json::json!({"alg": "EdDSA", "typ": "JWT"}));
        assert_eq!(URL_SAFE_NO_PAD.decode(parts[1]).unwrap(), br#"{"a":1}"#);
        let signing_input = format!("{}.{}", parts[0], parts[1]);
        let signature = URL_SAFE_NO_PAD.decode(parts[2]).unwrap();
        assert!(key.verify(signing_input.as_bytes(), &signature));
    }

    #[test]
    fn a_public_key_of_another_type_or_too_short_does_not_verify() {
        let ed = KeyPair::generate(Algorithm::EdDSA);
        assert!(VerifyingKey::new(ed.public_key(), Algorithm::ES256).is_none());
        let short = PublicKey::Rsa {
            n: URL_SAFE_NO_PAD.encode([0xff; 255]),
            e: "AQAB".into(),
        };
        assert!(VerifyingKey::new(&short, Algorithm::RS256).is_none());
        let bad_point = PublicKey::P256 {
            x: URL_SAFE_NO_PAD.encode([1; 32]),
            y: URL_SAFE_NO_PAD.encode([2; 32]),
        };
        assert!(VerifyingKey::new(&bad_point, Algorithm::ES256).is_none());
    }

    #[test]
    fn debug_never_prints_the_private_key() {
        let key = KeyPair::generate(Algorithm::EdDSA);
        let printed = format!("{key:?}");
        assert!(printed.contains("[redacted]"), "{printed}");
        assert!(printed.contains(key.thumbprint()), "{printed}");
    }
}
