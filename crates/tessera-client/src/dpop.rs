//! The client's key ([`ClientKey`], for DPoP and `private_key_jwt`), the DPoP proofs it signs
//! (RFC 9449 section 4.2), and the server nonces it was last given (section 8 for the token
//! endpoint, section 9 for APIs).

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use aws_lc_rs::rand::{SecureRandom, SystemRandom};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde_json::{Map, Value};
use tessera_jose::{sha256_b64, KeyError, KeyPair};
use tessera_proto::clock::Timestamp;
use tessera_proto::dpop::{ProofClaims, TYP};
use tessera_proto::jwk::PublicKey;
use tessera_proto::{Algorithm, Clock};

/// A key of the client's own, [`tessera_jose::KeyPair`]: Ed25519 (`EdDSA`), P-256 (`ES256`)
/// or RSA (`RS256`). It signs DPoP proofs (RFC 9449 section 4.2), given to
/// [`TokenClientBuilder::dpop`](crate::TokenClientBuilder::dpop): tokens issued with its
/// proofs are bound to it (their `cnf.jkt` is its [`thumbprint`](Self::thumbprint)) and are of
/// no use without it. It signs `private_key_jwt` assertions (RFC 7523 section 2.2), given to
/// [`ClientAuth::private_key`](crate::ClientAuth::private_key). Use one key for each.
///
/// Cheap to clone; clones share the key. `Debug` prints the public key and `[redacted]` for
/// the private one.
#[derive(Clone)]
pub struct ClientKey(Arc<Inner>);

struct Inner {
    pair: KeyPair,
    /// The public key as a JWK object of the required members only (RFC 7638 section 3.2).
    jwk: Value,
    /// `base64url(header) + "."` of a DPoP proof: the header is the same on every proof.
    proof_header_prefix: String,
}

impl fmt::Debug for ClientKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientKey")
            .field("alg", &self.0.pair.algorithm())
            .field("jwk", &self.0.jwk)
            .field("private_key", &"[redacted]")
            .finish()
    }
}

impl ClientKey {
    /// A new Ed25519 key (`EdDSA`, RFC 8037): small, fast signatures.
    ///
    /// # Panics
    ///
    /// Only if the operating system's random source fails.
    pub fn generate_ed25519() -> Self {
        Self::new(KeyPair::generate(Algorithm::EdDSA))
    }

    /// A new P-256 key (`ES256`, RFC 7518 section 3.4).
    ///
    /// # Panics
    ///
    /// Only if the operating system's random source fails.
    pub fn generate_p256() -> Self {
        Self::new(KeyPair::generate(Algorithm::ES256))
    }

    /// A key from its unencrypted PKCS #8 DER (RFC 5958), such as `openssl genpkey` writes
    /// (after `openssl pkey -outform DER`): Ed25519 signs `EdDSA`, P-256 `ES256`, and RSA
    /// (2048 to 8192 bits) `RS256`. For a key kept across restarts, so that the tokens
    /// bound to it outlive the process.
    pub fn from_pkcs8(der: &[u8]) -> Result<Self, KeyError> {
        KeyPair::from_pkcs8(der).map(Self::new)
    }

    /// A key from a PEM file of unencrypted PKCS #8 (`-----BEGIN PRIVATE KEY-----`, RFC 7468
    /// section 10), as `openssl genpkey` and `tessera keys generate-client-key` write it;
    /// see [`from_pkcs8`](Self::from_pkcs8).
    pub fn from_pkcs8_pem(pem: &str) -> Result<Self, KeyError> {
        const BEGIN: &str = "-----BEGIN PRIVATE KEY-----";
        const END: &str = "-----END PRIVATE KEY-----";
        let (_, rest) = pem.split_once(BEGIN).ok_or(KeyError)?;
        let (body, _) = rest.split_once(END).ok_or(KeyError)?;
        let base64: String = body.split_ascii_whitespace().collect();
        let der = base64::engine::general_purpose::STANDARD
            .decode(base64)
            .map_err(|_| KeyError)?;
        Self::from_pkcs8(&der)
    }

    fn new(pair: KeyPair) -> Self {
        // RFC 7638 section 3.2: the required members only.
        let jwk = match pair.public_key() {
            PublicKey::Ed25519 { x } => {
                serde_json::json!({ "kty": "OKP", "crv": "Ed25519", "x": x })
            }
            PublicKey::P256 { x, y } => {
                serde_json::json!({ "kty": "EC", "crv": "P-256", "x": x, "y": y })
            }
            PublicKey::Rsa { n, e } => serde_json::json!({ "kty": "RSA", "n": n, "e": e }),
        };
        let mut header = Map::new();
        header.insert("typ".into(), TYP.into());
        header.insert("jwk".into(), jwk.clone());
        let proof_header_prefix = pair.header_prefix(header);
        Self(Arc::new(Inner {
            pair,
            jwk,
            proof_header_prefix,
        }))
    }

    /// The algorithm it signs with.
    pub fn algorithm(&self) -> Algorithm {
        self.0.pair.algorithm()
    }

    /// The public key as a JWK (RFC 7517) of its required members: `kty`, `crv`, `x` (and
    /// `y`) or `kty`, `n`, `e`. It rides in every proof's `jwk` header.
    pub fn public_jwk(&self) -> &Value {
        &self.0.jwk
    }

    /// The key's RFC 7638 thumbprint, base64url: the `cnf.jkt` of the tokens bound to it
    /// (RFC 9449 section 6.1).
    pub fn thumbprint(&self) -> &str {
        self.0.pair.thumbprint()
    }

    /// A proof (RFC 9449 section 4.2) for a request of method `htm` to `htu`, made now by the
    /// system clock; see [`proof_at`](Self::proof_at).
    pub fn proof(
        &self,
        htm: &str,
        htu: &str,
        access_token: Option<&str>,
        nonce: Option<&str>,
    ) -> String {
        self.proof_at(Clock::system().now(), htm, htu, access_token, nonce)
    }

    /// A proof made at `iat` (seconds since the epoch): a compact JWS with the header
    /// `{typ: dpop+jwt, alg, jwk}` and the claims `jti` (128 random bits), `htm`, `htu`
    /// without its query and fragment, `iat`, `ath` (base64url SHA-256 of `access_token`,
    /// for a request to an API) and `nonce` (the server's, when it gave one).
    ///
    /// # Panics
    ///
    /// Only if the operating system's random source fails.
    pub fn proof_at(
        &self,
        iat: Timestamp,
        htm: &str,
        htu: &str,
        access_token: Option<&str>,
        nonce: Option<&str>,
    ) -> String {
        let claims = ProofClaims {
            jti: random_jti(),
            htm: htm.to_owned(),
            htu: htu.split(['?', '#']).next().unwrap_or_default().to_owned(),
            iat,
            ath: access_token.map(|token| sha256_b64(token.as_bytes())),
            nonce: nonce.map(str::to_owned),
        };
        self.compact(&self.0.proof_header_prefix, &claims)
    }

    /// `base64url(header) + "."` for a JWS of this key with `header`'s members and its `alg`
    /// (RFC 7515 section 7.1), to be given to [`compact`](Self::compact).
    pub(crate) fn header_prefix(&self, header: Map<String, Value>) -> String {
        self.0.pair.header_prefix(header)
    }

    /// A compact JWS (RFC 7515 section 7.1) of `claims` under the header that `header_prefix`
    /// encodes.
    pub(crate) fn compact(&self, header_prefix: &str, claims: &impl serde::Serialize) -> String {
        let payload = serde_json::to_vec(claims).expect("claims serialize");
        self.0.pair.sign_compact(header_prefix, &payload)
    }
}

/// 128 random bits, base64url: a `jti`.
///
/// # Panics
///
/// Only if the operating system's random source fails.
pub(crate) fn random_jti() -> String {
    let mut jti = [0u8; 16];
    SystemRandom::new()
        .fill(&mut jti)
        .expect("the system's random source");
    URL_SAFE_NO_PAD.encode(jti)
}

/// The most servers whose nonces are kept; past that, all are forgotten and asked for again.
const MAX_NONCES: usize = 64;

/// A client's DPoP key and the last nonce each server gave it (`DPoP-Nonce`, RFC 9449
/// sections 8 and 9), so that its next proof carries it without being refused first.
#[derive(Debug)]
pub(crate) struct Dpop {
    pub(crate) key: ClientKey,
    /// By server: the token endpoint's URL, or an API's origin.
    nonces: Mutex<HashMap<String, String>>,
}

impl Dpop {
    pub(crate) fn new(key: ClientKey) -> Self {
        Self {
            key,
            nonces: Mutex::default(),
        }
    }

    /// The last nonce `server` gave.
    pub(crate) fn nonce(&self, server: &str) -> Option<String> {
        let nonces = self.nonces.lock().unwrap_or_else(PoisonError::into_inner);
        nonces.get(server).cloned()
    }

    /// Keeps the nonce of a `DPoP-Nonce` header from `server`, if the answer had one; whether
    /// it had.
    pub(crate) fn remember(&self, server: &str, headers: &reqwest::header::HeaderMap) -> bool {
        let Some(nonce) = headers.get(NONCE_HEADER).and_then(|v| v.to_str().ok()) else {
            return false;
        };
        let mut nonces = self.nonces.lock().unwrap_or_else(PoisonError::into_inner);
        if nonces.len() >= MAX_NONCES && !nonces.contains_key(server) {
            nonces.clear();
        }
        nonces.insert(server.to_owned(), nonce.to_owned());
        true
    }
}

/// The request header that carries a proof (RFC 9449 section 4.1).
pub(crate) const PROOF_HEADER: &str = "dpop";

/// The response header that carries a server's nonce (RFC 9449 section 8.1).
pub(crate) const NONCE_HEADER: &str = "dpop-nonce";

#[cfg(test)]
mod tests {
    use aws_lc_rs::encoding::{AsDer, Pkcs8V1Der};
    use aws_lc_rs::rsa::KeySize;
    use aws_lc_rs::signature::{
        EcdsaKeyPair, Ed25519KeyPair, RsaKeyPair, ECDSA_P256_SHA256_FIXED_SIGNING,
    };
    use reqwest::header::{HeaderMap, HeaderValue};
    use tessera_verify::dpop::{check_proof, NonceCheck, ProofRequest};

    use super::*;

    const NOW: Timestamp = 1_800_000_000;

    /// Checks `proof` with the resource servers' and the token endpoint's own checker.
    fn check(
        proof: &str,
        method: &str,
        url: &str,
        token: Option<&str>,
        nonce: Option<&str>,
    ) -> Result<String, tessera_verify::dpop::DpopError> {
        let htu = tessera_proto::dpop::htu(url).unwrap();
        let is = |n: &str| Some(n) == nonce;
        let request = ProofRequest {
            method,
            htu: &htu,
            access_token: token,
            nonce: nonce.map(|_| NonceCheck(&is)),
            window_secs: 60,
        };
        check_proof(proof, &request, NOW).map(|checked| checked.jkt)
    }

    fn rsa() -> ClientKey {
        let pair = RsaKeyPair::generate(KeySize::Rsa2048).unwrap();
        let der = AsDer::<Pkcs8V1Der>::as_der(&pair).unwrap();
        ClientKey::from_pkcs8(der.as_ref()).unwrap()
    }

    fn claims(proof: &str) -> Value {
        let payload = proof.split('.').nth(1).unwrap();
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).unwrap()).unwrap()
    }

    #[test]
    fn proofs_of_every_key_type_pass_the_verifiers_checks() {
        for key in [
            ClientKey::generate_ed25519(),
            ClientKey::generate_p256(),
            rsa(),
        ] {
            let url = "https://api.example.com/quotes?symbol=X#top";
            let proof = key.proof_at(NOW, "GET", url, Some("the.access.token"), Some("n-1"));
            let jkt = check(&proof, "GET", url, Some("the.access.token"), Some("n-1"));
            assert_eq!(
                jkt.as_deref(),
                Ok(key.thumbprint()),
                "{:?}",
                key.algorithm()
            );

            let claims = claims(&proof);
            assert_eq!(claims["htu"], "https://api.example.com/quotes");
            assert_eq!(claims["iat"], NOW);
            let jti = claims["jti"].as_str().unwrap();
            assert_eq!(URL_SAFE_NO_PAD.decode(jti).unwrap().len(), 16);
            // Another request, another token: refused.
            let other = check(&proof, "POST", url, Some("the.access.token"), Some("n-1"));
            assert!(other.is_err());
            let other = check(&proof, "GET", url, Some("another.token"), Some("n-1"));
            assert!(other.is_err());
        }
    }

    #[test]
    fn a_token_request_proof_has_neither_ath_nor_a_nonce_unless_given() {
        let key = ClientKey::generate_ed25519();
        let url = "http://127.0.0.1:8080/connect/token";
        let proof = key.proof_at(NOW, "POST", url, None, None);
        assert!(check(&proof, "POST", url, None, None).is_ok());
        let claims = claims(&proof);
        assert!(claims.get("ath").is_none() && claims.get("nonce").is_none());
        // Each proof is new: another jti.
        let again = key.proof_at(NOW, "POST", url, None, None);
        assert_ne!(claims["jti"], self::claims(&again)["jti"]);
        // The system clock by default.
        let now = key.proof("POST", url, None, None);
        let iat = self::claims(&now)["iat"].as_i64().unwrap();
        assert!((iat - Clock::system().now()).abs() <= 1);
    }

    #[test]
    fn a_key_read_from_pkcs8_is_the_same_key() {
        let rng = SystemRandom::new();
        let ed = Ed25519KeyPair::generate_pkcs8(&rng).unwrap();
        let a = ClientKey::from_pkcs8(ed.as_ref()).unwrap();
        let b = ClientKey::from_pkcs8(ed.as_ref()).unwrap();
        assert_eq!(
            (a.algorithm(), a.thumbprint()),
            (Algorithm::EdDSA, b.thumbprint())
        );
        let ec = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        assert_eq!(
            ClientKey::from_pkcs8(ec.as_ref()).unwrap().algorithm(),
            Algorithm::ES256
        );
        assert_eq!(rsa().algorithm(), Algorithm::RS256);
        assert!(ClientKey::from_pkcs8(b"not a key").is_err());
    }

    #[test]
    fn a_key_reads_from_pkcs8_pem() {
        let rng = SystemRandom::new();
        let der = Ed25519KeyPair::generate_pkcs8(&rng).unwrap();
        let body = base64::engine::general_purpose::STANDARD.encode(der.as_ref());
        let lines: Vec<&str> = body
            .as_bytes()
            .chunks(64)
            .map(|l| std::str::from_utf8(l).unwrap())
            .collect();
        let pem = format!(
            "-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n",
            lines.join("\n")
        );
        let from_pem = ClientKey::from_pkcs8_pem(&pem).unwrap();
        let from_der = ClientKey::from_pkcs8(der.as_ref()).unwrap();
        assert_eq!(from_pem.thumbprint(), from_der.thumbprint());
        // Another PEM type, or a damaged body, is refused.
        let sec1 = pem.replace("PRIVATE KEY", "EC PRIVATE KEY");
        assert!(ClientKey::from_pkcs8_pem(&sec1).is_err());
        let damaged = pem.replacen(&lines[0][..8], "!!!!!!!!", 1);
        assert!(ClientKey::from_pkcs8_pem(&damaged).is_err());
        assert!(ClientKey::from_pkcs8_pem("").is_err());
    }

    #[test]
    fn debug_shows_the_public_key_only() {
        let rng = SystemRandom::new();
        let pkcs8 = Ed25519KeyPair::generate_pkcs8(&rng).unwrap();
        let key = ClientKey::from_pkcs8(pkcs8.as_ref()).unwrap();
        let printed = format!("{key:?}");
        assert!(printed.contains("[redacted]"), "{printed}");
        assert!(printed.contains(key.public_jwk()["x"].as_str().unwrap()));
        // The seed is the last 32 bytes of a v2 document's private key OCTET STRING; no
        // 8-byte run of the document beyond the public key shows up, in any encoding.
        let secret = &pkcs8.as_ref()[16..48];
        for encoded in [
            URL_SAFE_NO_PAD.encode(secret),
            format!("{secret:?}"),
            secret.iter().map(|b| format!("{b:02x}")).collect(),
        ] {
            assert!(!printed.contains(&encoded[..12]), "{printed}");
        }
    }

    #[test]
    fn nonces_are_kept_per_server_and_bounded() {
        let dpop = Dpop::new(ClientKey::generate_ed25519());
        let mut headers = HeaderMap::new();
        assert!(!dpop.remember("https://a", &headers));
        headers.insert(NONCE_HEADER, HeaderValue::from_static("n-1"));
        assert!(dpop.remember("https://a", &headers));
        assert_eq!(dpop.nonce("https://a").as_deref(), Some("n-1"));
        assert_eq!(dpop.nonce("https://b"), None);
        for i in 0..MAX_NONCES {
            dpop.remember(&format!("https://{i}"), &headers);
        }
        assert!(dpop.nonces.lock().unwrap().len() <= MAX_NONCES);
    }
}
