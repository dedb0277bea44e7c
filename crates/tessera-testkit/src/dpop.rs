//! DPoP proofs (RFC 9449 section 4) signed by `jsonwebtoken`, an implementation independent
//! of Tessera's, with thumbprints (RFC 7638) and `ath` computed here from their definitions:
//! what a test checks Tessera against is not Tessera's own code.

use aws_lc_rs::digest;
use aws_lc_rs::rand::{SecureRandom, SystemRandom};
use aws_lc_rs::signature::{
    EcdsaKeyPair, Ed25519KeyPair, KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING,
};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use jsonwebtoken::{Algorithm, EncodingKey};
use serde_json::{json, Value};

/// A client's DPoP key pair.
pub struct ProofKey {
    alg: Algorithm,
    key: EncodingKey,
    jwk: Value,
}

impl std::fmt::Debug for ProofKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProofKey")
            .field("alg", &self.alg)
            .field("jwk", &self.jwk)
            .finish()
    }
}

impl ProofKey {
    /// A fresh Ed25519 key (`EdDSA`).
    pub fn ed25519() -> Self {
        let pkcs8 = Ed25519KeyPair::generate_pkcs8(&SystemRandom::new()).expect("a key");
        let pair = Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).expect("its own key");
        Self {
            alg: Algorithm::EdDSA,
            key: EncodingKey::from_ed_der(pkcs8.as_ref()),
            jwk: json!({
                "kty": "OKP",
                "crv": "Ed25519",
                "x": URL_SAFE_NO_PAD.encode(pair.public_key().as_ref()),
            }),
        }
    }

    /// A fresh P-256 key (`ES256`).
    pub fn p256() -> Self {
        let rng = SystemRandom::new();
        let pkcs8 =
            EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).expect("a key");
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref())
            .expect("its own key");
        let point = pair.public_key().as_ref();
        Self {
            alg: Algorithm::ES256,
            key: EncodingKey::from_ec_der(pkcs8.as_ref()),
            jwk: json!({
                "kty": "EC",
                "crv": "P-256",
                "x": URL_SAFE_NO_PAD.encode(&point[1..33]),
                "y": URL_SAFE_NO_PAD.encode(&point[33..65]),
            }),
        }
    }

    /// The public JWK.
    pub fn jwk(&self) -> &Value {
        &self.jwk
    }

    /// The `alg` header value.
    pub fn alg(&self) -> &'static str {
        match self.alg {
            Algorithm::EdDSA => "EdDSA",
            _ => "ES256",
        }
    }

    /// The RFC 7638 thumbprint: SHA-256 over the required members in lexicographic order.
    pub fn thumbprint(&self) -> String {
        let members: &[&str] = match self.jwk["kty"].as_str() {
            Some("OKP") => &["crv", "kty", "x"],
            _ => &["crv", "kty", "x", "y"],
        };
        let canonical: serde_json::Map<String, Value> = members
            .iter()
            .map(|m| ((*m).to_owned(), self.jwk[*m].clone()))
            .collect();
        sha256(&serde_json::to_string(&canonical).expect("JSON"))
    }

    /// A proof for `htm` `htu` at `iat`, with a fresh `jti`.
    pub fn proof(&self, htm: &str, htu: &str, iat: i64) -> String {
        self.sign(&self.header(), &claims(htm, htu, iat))
    }

    /// A proof for a request to a resource server with `access_token` (`ath`).
    pub fn proof_with_token(&self, htm: &str, htu: &str, iat: i64, access_token: &str) -> String {
        let mut claims = claims(htm, htu, iat);
        claims["ath"] = json!(sha256(access_token));
        self.sign(&self.header(), &claims)
    }

    /// The usual header: `typ` `dpop+jwt`, the algorithm, the public key.
    pub fn header(&self) -> Value {
        json!({ "typ": "dpop+jwt", "alg": self.alg(), "jwk": self.jwk })
    }

    /// `header` and `claims` signed with this key, whatever they say.
    pub fn sign(&self, header: &Value, claims: &Value) -> String {
        let b64 = |v: &Value| URL_SAFE_NO_PAD.encode(serde_json::to_vec(v).expect("JSON"));
        let input = format!("{}.{}", b64(header), b64(claims));
        let signature =
            jsonwebtoken::crypto::sign(input.as_bytes(), &self.key, self.alg).expect("signed");
        format!("{input}.{signature}")
    }
}

/// The claims of a proof with a fresh random `jti`.
pub fn claims(htm: &str, htu: &str, iat: i64) -> Value {
    let mut jti = [0u8; 16];
    SystemRandom::new().fill(&mut jti).expect("random bytes");
    json!({ "jti": URL_SAFE_NO_PAD.encode(jti), "htm": htm, "htu": htu, "iat": iat })
}

/// base64url SHA-256 of `text`.
pub fn sha256(text: &str) -> String {
    URL_SAFE_NO_PAD.encode(digest::digest(&digest::SHA256, text.as_bytes()))
}

#[cfg(test)]
mod tests {
    #[test]
    fn sha256_is_base64url_without_padding() {
        // SHA-256("abc") from FIPS 180-2 appendix B.1, base64url-encoded (RFC 4648 section 5).
        assert_eq!(
            super::sha256("abc"),
            "ungWv48Bz-pBQUDeXa4iI7ADYaOWF3qctBD_YfIAFa0"
        );
    }
}
