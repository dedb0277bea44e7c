//! DPoP proofs (RFC 9449): the client's key, the proofs it signs (section 4.2), and the
//! server nonces it was last given (section 8 for the token endpoint, section 9 for APIs).

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use aws_lc_rs::digest;
use aws_lc_rs::rand::{SecureRandom, SystemRandom};
use aws_lc_rs::signature::{
    EcdsaKeyPair, Ed25519KeyPair, KeyPair, RsaKeyPair, ECDSA_P256_SHA256_FIXED_SIGNING,
    RSA_PKCS1_SHA256,
};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde_json::{json, Value};
use tessera_proto::clock::Timestamp;
use tessera_proto::dpop::{ProofClaims, TYP};
use tessera_proto::jwk::rsa_der;
use tessera_proto::{Algorithm, Clock};

use crate::error::DpopKeyError;

/// A key that DPoP proofs are signed with (RFC 9449 section 4.2): Ed25519 (`EdDSA`), P-256
/// (`ES256`) or RSA (`RS256`). Tokens issued with its proofs are bound to it (their
/// `cnf.jkt` is its [`thumbprint`](Self::thumbprint)) and are of no use without it.
///
/// Give it to [`TokenClientBuilder::dpop`](crate::TokenClientBuilder::dpop). Cheap to clone;
/// clones share the key. `Debug` prints the public key and `[redacted]` for the private one.
#[derive(Clone)]
pub struct DpopKey(Arc<Inner>);

struct Inner {
    pair: Pair,
    alg: Algorithm,
    /// The public key as a JWK object of the required members only (RFC 7638 section 3.2).
    jwk: Value,
    /// The RFC 7638 thumbprint: `cnf.jkt` of the tokens bound to the key.
    thumbprint: String,
    /// `base64url(header) + "."`: the header is the same on every proof.
    header_prefix: String,
}

enum Pair {
    Ed25519(Ed25519KeyPair),
    P256(EcdsaKeyPair),
    Rsa(RsaKeyPair),
}

impl fmt::Debug for DpopKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DpopKey")
            .field("alg", &self.0.alg)
            .field("jwk", &self.0.jwk)
            .field("private_key", &"[redacted]")
            .finish()
    }
}

impl DpopKey {
    /// A new Ed25519 key (`EdDSA`, RFC 8037): small, fast proofs.
    ///
    /// # Panics
    ///
    /// Only if the operating system's random source fails.
    pub fn generate_ed25519() -> Self {
        let pair = Ed25519KeyPair::generate().expect("the system's random source");
        Self::new(Pair::Ed25519(pair), Algorithm::EdDSA)
    }

    /// A new P-256 key (`ES256`, RFC 7518 section 3.4).
    ///
    /// # Panics
    ///
    /// Only if the operating system's random source fails.
    pub fn generate_p256() -> Self {
        let pair = EcdsaKeyPair::generate(&ECDSA_P256_SHA256_FIXED_SIGNING)
            .expect("the system's random source");
        Self::new(Pair::P256(pair), Algorithm::ES256)
    }

    /// A key from its unencrypted PKCS #8 DER (RFC 5958), such as `openssl genpkey` writes
    /// (after `openssl pkey -outform DER`): Ed25519 signs `EdDSA`, P-256 `ES256`, and RSA
    /// (2048 to 8192 bits) `RS256`. For a key kept across restarts, so that the tokens
    /// bound to it outlive the process.
    pub fn from_pkcs8(der: &[u8]) -> Result<Self, DpopKeyError> {
        if let Ok(pair) = Ed25519KeyPair::from_pkcs8(der) {
            return Ok(Self::new(Pair::Ed25519(pair), Algorithm::EdDSA));
        }
        if let Ok(pair) = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, der) {
            return Ok(Self::new(Pair::P256(pair), Algorithm::ES256));
        }
        if let Ok(pair) = RsaKeyPair::from_pkcs8(der) {
            return Ok(Self::new(Pair::Rsa(pair), Algorithm::RS256));
        }
        Err(DpopKeyError)
    }

    /// A key from a PEM file of unencrypted PKCS #8 (`-----BEGIN PRIVATE KEY-----`, RFC 7468
    /// section 10), as `openssl genpkey` and `tessera keys generate-client-key` write it;
    /// see [`from_pkcs8`](Self::from_pkcs8).
    pub fn from_pkcs8_pem(pem: &str) -> Result<Self, DpopKeyError> {
        const BEGIN: &str = "-----BEGIN PRIVATE KEY-----";
        const END: &str = "-----END PRIVATE KEY-----";
        let (_, rest) = pem.split_once(BEGIN).ok_or(DpopKeyError)?;
        let (body, _) = rest.split_once(END).ok_or(DpopKeyError)?;
        let base64: String = body.split_ascii_whitespace().collect();
        let der = base64::engine::general_purpose::STANDARD
            .decode(base64)
            .map_err(|_| DpopKeyError)?;
        Self::from_pkcs8(&der)
    }

    fn new(pair: Pair, alg: Algorithm) -> Self {
        let b64 = |bytes: &[u8]| URL_SAFE_NO_PAD.encode(bytes);
        // RFC 7638 section 3.2: the required members, in lexicographic order, no white space;
        // the values are base64url or fixed names, so nothing needs escaping.
        let (jwk, canonical) = match &pair {
            Pair::Ed25519(p) => {
                let x = b64(p.public_key().as_ref());
                let canonical = format!(r#"{{"crv":"Ed25519","kty":"OKP","x":"{x}"}}"#);
                (json!({ "kty": "OKP", "crv": "Ed25519", "x": x }), canonical)
            }
            Pair::P256(p) => {
                // An uncompressed SEC1 point: 0x04 || x || y.
                let (x, y) = p.public_key().as_ref()[1..].split_at(32);
                let (x, y) = (b64(x), b64(y));
                let canonical = format!(r#"{{"crv":"P-256","kty":"EC","x":"{x}","y":"{y}"}}"#);
                let jwk = json!({ "kty": "EC", "crv": "P-256", "x": x, "y": y });
                (jwk, canonical)
            }
            Pair::Rsa(p) => {
                let (n, e) = rsa_der::decode(p.public_key().as_ref())
                    .expect("an RSA public key is a DER RSAPublicKey");
                let (n, e) = (b64(&n), b64(&e));
                let canonical = format!(r#"{{"e":"{e}","kty":"RSA","n":"{n}"}}"#);
                (json!({ "kty": "RSA", "n": n, "e": e }), canonical)
            }
        };
        let thumbprint = sha256_b64(canonical.as_bytes());
        let header = json!({ "typ": TYP, "alg": alg.as_str(), "jwk": jwk });
        let header_prefix = format!("{}.", b64(header.to_string().as_bytes()));
        Self(Arc::new(Inner {
            pair,
            alg,
            jwk,
            thumbprint,
            header_prefix,
        }))
    }

    /// The algorithm proofs are signed with.
    pub fn algorithm(&self) -> Algorithm {
        self.0.alg
    }

    /// The public key as a JWK (RFC 7517) of its required members: `kty`, `crv`, `x` (and
    /// `y`) or `kty`, `n`, `e`. It rides in every proof's `jwk` header.
    pub fn public_jwk(&self) -> &Value {
        &self.0.jwk
    }

    /// The key's RFC 7638 thumbprint, base64url: the `cnf.jkt` of the tokens bound to it
    /// (RFC 9449 section 6.1).
    pub fn thumbprint(&self) -> &str {
        &self.0.thumbprint
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
        let rng = SystemRandom::new();
        let mut jti = [0u8; 16];
        rng.fill(&mut jti).expect("the system's random source");
        let claims = ProofClaims {
            jti: URL_SAFE_NO_PAD.encode(jti),
            htm: htm.to_owned(),
            htu: htu.split(['?', '#']).next().unwrap_or_default().to_owned(),
            iat,
            ath: access_token.map(|token| sha256_b64(token.as_bytes())),
            nonce: nonce.map(str::to_owned),
        };
        self.compact(&self.0.header_prefix, &claims, &rng)
    }

    /// `base64url(header) + "."` for a JWS of this key with `header`'s members and its `alg`
    /// (RFC 7515 section 7.1), to be given to [`compact`](Self::compact).
    pub(crate) fn header_prefix(&self, mut header: serde_json::Map<String, Value>) -> String {
        header.insert("alg".into(), self.0.alg.as_str().into());
        let header = Value::Object(header).to_string();
        format!("{}.", URL_SAFE_NO_PAD.encode(header))
    }

    /// A compact JWS (RFC 7515 section 7.1) of `claims` under the header that `header_prefix`
    /// encodes.
    pub(crate) fn compact(
        &self,
        header_prefix: &str,
        claims: &impl serde::Serialize,
        rng: &SystemRandom,
    ) -> String {
        let payload = serde_json::to_vec(claims).expect("claims serialize");
        let mut jws = header_prefix.to_owned();
        URL_SAFE_NO_PAD.encode_string(payload, &mut jws);
        let signature = self.sign(jws.as_bytes(), rng);
        jws.push('.');
        URL_SAFE_NO_PAD.encode_string(signature, &mut jws);
        jws
    }

    /// Signs the JWS signing input (RFC 7515 section 5.1); ECDSA as `r || s` (RFC 7518
    /// section 3.4).
    fn sign(&self, message: &[u8], rng: &SystemRandom) -> Vec<u8> {
        match &self.0.pair {
            Pair::Ed25519(p) => p.sign(message).as_ref().to_vec(),
            Pair::P256(p) => p
                .sign(rng, message)
                .expect("the system's random source")
                .as_ref()
                .to_vec(),
            Pair::Rsa(p) => {
                let mut signature = vec![0; p.public_modulus_len()];
                p.sign(&RSA_PKCS1_SHA256, rng, message, &mut signature)
                    .expect("the system's random source");
                signature
            }
        }
    }
}

pub(crate) fn sha256_b64(input: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(digest::digest(&digest::SHA256, input))
}

/// The most servers whose nonces are kept; past that, all are forgotten and asked for again.
const MAX_NONCES: usize = 64;

/// A client's DPoP key and the last nonce each server gave it (`DPoP-Nonce`, RFC 9449
/// sections 8 and 9), so that its next proof carries it without being refused first.
#[derive(Debug)]
pub(crate) struct Dpop {
    pub(crate) key: DpopKey,
    /// By server: the token endpoint's URL, or an API's origin.
    nonces: Mutex<HashMap<String, String>>,
}

impl Dpop {
    pub(crate) fn new(key: DpopKey) -> Self {
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

    fn rsa() -> DpopKey {
        let pair = RsaKeyPair::generate(KeySize::Rsa2048).unwrap();
        let der = AsDer::<Pkcs8V1Der>::as_der(&pair).unwrap();
        DpopKey::from_pkcs8(der.as_ref()).unwrap()
    }

    fn claims(proof: &str) -> Value {
        let payload = proof.split('.').nth(1).unwrap();
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).unwrap()).unwrap()
    }

    #[test]
    fn proofs_of_every_key_type_pass_the_verifiers_checks() {
        for key in [DpopKey::generate_ed25519(), DpopKey::generate_p256(), rsa()] {
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
        let key = DpopKey::generate_ed25519();
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
        let a = DpopKey::from_pkcs8(ed.as_ref()).unwrap();
        let b = DpopKey::from_pkcs8(ed.as_ref()).unwrap();
        assert_eq!(
            (a.algorithm(), a.thumbprint()),
            (Algorithm::EdDSA, b.thumbprint())
        );
        let ec = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        assert_eq!(
            DpopKey::from_pkcs8(ec.as_ref()).unwrap().algorithm(),
            Algorithm::ES256
        );
        assert_eq!(rsa().algorithm(), Algorithm::RS256);
        assert!(DpopKey::from_pkcs8(b"not a key").is_err());
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
        let from_pem = DpopKey::from_pkcs8_pem(&pem).unwrap();
        let from_der = DpopKey::from_pkcs8(der.as_ref()).unwrap();
        assert_eq!(from_pem.thumbprint(), from_der.thumbprint());
        // Another PEM type, or a damaged body, is refused.
        let sec1 = pem.replace("PRIVATE KEY", "EC PRIVATE KEY");
        assert!(DpopKey::from_pkcs8_pem(&sec1).is_err());
        let damaged = pem.replacen(&lines[0][..8], "!!!!!!!!", 1);
        assert!(DpopKey::from_pkcs8_pem(&damaged).is_err());
        assert!(DpopKey::from_pkcs8_pem("").is_err());
    }

    #[test]
    fn debug_shows_the_public_key_only() {
        let rng = SystemRandom::new();
        let pkcs8 = Ed25519KeyPair::generate_pkcs8(&rng).unwrap();
        let key = DpopKey::from_pkcs8(pkcs8.as_ref()).unwrap();
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
        let dpop = Dpop::new(DpopKey::generate_ed25519());
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
