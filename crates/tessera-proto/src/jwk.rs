//! Signing algorithms and JSON Web Keys (RFC 7517, RFC 7518, RFC 8037).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The JWS algorithms Tessera signs with (RFC 7518 section 3.1, RFC 8037 section 3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Algorithm {
    /// Ed25519 signatures (RFC 8037): the default, fast and deterministic.
    EdDSA,
    /// ECDSA on P-256 with SHA-256 (RFC 7518 section 3.4), for verifiers without EdDSA.
    ES256,
}

impl Algorithm {
    /// The `alg` header value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::EdDSA => "EdDSA",
            Self::ES256 => "ES256",
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Algorithm {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "EdDSA" => Ok(Self::EdDSA),
            "ES256" => Ok(Self::ES256),
            other => Err(format!(
                "unsupported algorithm {other:?}: use EdDSA or ES256"
            )),
        }
    }
}

/// A public JSON Web Key: `OKP`/`Ed25519` (RFC 8037 section 2) or `EC`/`P-256`
/// (RFC 7518 section 6.2). Never carries private parts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Jwk {
    /// `OKP` or `EC`.
    pub kty: String,
    /// `Ed25519` or `P-256`.
    pub crv: String,
    /// The public key (OKP) or its x coordinate (EC), base64url.
    pub x: String,
    /// The y coordinate of an EC key, base64url.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub y: Option<String>,
    /// The key identifier, matched against the JWS `kid` header.
    pub kid: String,
    /// The algorithm the key is used with.
    pub alg: String,
    /// Always `sig`.
    #[serde(rename = "use")]
    pub use_: String,
}

/// A JWK Set (RFC 7517 section 5), as served at `/.well-known/jwks.json`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JwkSet {
    /// The published keys.
    pub keys: Vec<Jwk>,
}

impl JwkSet {
    /// The key with identifier `kid`.
    pub fn find(&self, kid: &str) -> Option<&Jwk> {
        self.keys.iter().find(|k| k.kid == kid)
    }
}
