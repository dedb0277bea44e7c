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
    /// RSASSA-PKCS1-v1_5 with SHA-256 (RFC 7518 section 3.3), for gateways that accept only
    /// RSA (AWS API Gateway's JWT authorizer, for one). 2048-bit keys.
    RS256,
    /// RSASSA-PSS with SHA-256 and MGF1 (RFC 7518 section 3.5). 2048-bit keys.
    PS256,
}

impl Algorithm {
    /// The `alg` header value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::EdDSA => "EdDSA",
            Self::ES256 => "ES256",
            Self::RS256 => "RS256",
            Self::PS256 => "PS256",
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
            "RS256" => Ok(Self::RS256),
            "PS256" => Ok(Self::PS256),
            other => Err(format!(
                "unsupported algorithm {other:?}: use EdDSA, ES256, RS256 or PS256"
            )),
        }
    }
}

/// A public JSON Web Key: `OKP`/`Ed25519` (RFC 8037 section 2), `EC`/`P-256`
/// (RFC 7518 section 6.2) or `RSA` (RFC 7518 section 6.3). Never carries private parts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Jwk {
    /// `OKP`, `EC` or `RSA`.
    pub kty: String,
    /// `Ed25519` or `P-256`; empty for RSA.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub crv: String,
    /// The public key (OKP) or its x coordinate (EC), base64url; empty for RSA.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub x: String,
    /// The y coordinate of an EC key, base64url.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub y: Option<String>,
    /// The modulus of an RSA key, base64url (unsigned big-endian).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n: Option<String>,
    /// The public exponent of an RSA key, base64url.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub e: Option<String>,
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

/// The DER `RSAPublicKey` of PKCS #1 (RFC 8017 appendix A.1.1), the form RSA libraries read
/// and write public keys in: `SEQUENCE { modulus INTEGER, publicExponent INTEGER }`.
pub mod rsa_der {
    /// `(n, e)` of a DER `RSAPublicKey`, unsigned big-endian, or `None` if it is not one.
    pub fn decode(der: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
        let (body, rest) = element(der, 0x30)?;
        if !rest.is_empty() {
            return None;
        }
        let (n, rest) = element(body, 0x02)?;
        let (e, rest) = element(rest, 0x02)?;
        rest.is_empty().then(|| (unsigned(n), unsigned(e)))
    }

    /// The DER `RSAPublicKey` of `n` and `e` (unsigned big-endian).
    pub fn encode(n: &[u8], e: &[u8]) -> Vec<u8> {
        let mut body = integer(n);
        body.extend(integer(e));
        let mut der = vec![0x30];
        der.extend(length(body.len()));
        der.extend(body);
        der
    }

    fn unsigned(bytes: &[u8]) -> Vec<u8> {
        let start = bytes.iter().position(|&b| b != 0).unwrap_or(bytes.len());
        bytes[start..].to_vec()
    }

    fn integer(value: &[u8]) -> Vec<u8> {
        let value = unsigned(value);
        let mut content = Vec::with_capacity(value.len() + 1);
        // A leading 0x00 keeps a high first bit from reading as negative.
        if value.first().is_none_or(|b| b & 0x80 != 0) {
            content.push(0);
        }
        content.extend(value);
        let mut der = vec![0x02];
        der.extend(length(content.len()));
        der.extend(content);
        der
    }

    fn length(len: usize) -> Vec<u8> {
        if len < 0x80 {
            return vec![len as u8];
        }
        let bytes: Vec<u8> = len
            .to_be_bytes()
            .into_iter()
            .skip_while(|&b| b == 0)
            .collect();
        let mut out = vec![0x80 | bytes.len() as u8];
        out.extend(bytes);
        out
    }

    /// One element with tag `tag`: its content and what follows it.
    fn element(der: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
        let (&first, rest) = der.split_first()?;
        if first != tag {
            return None;
        }
        let (&len_byte, rest) = rest.split_first()?;
        let (len, rest) = if len_byte < 0x80 {
            (usize::from(len_byte), rest)
        } else {
            let count = usize::from(len_byte & 0x7f);
            if count == 0 || count > 4 || rest.len() < count {
                return None;
            }
            let (len_bytes, rest) = rest.split_at(count);
            let len = len_bytes
                .iter()
                .fold(0usize, |acc, &b| acc << 8 | usize::from(b));
            (len, rest)
        };
        (rest.len() >= len).then(|| rest.split_at(len))
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn round_trips_and_refuses_garbage() {
            let n: Vec<u8> = (0..256).map(|i| (i as u8) | 0x80).collect();
            let e = [1, 0, 1];
            let der = encode(&n, &e);
            assert_eq!(decode(&der), Some((n, e.to_vec())));
            assert_eq!(decode(&der[..der.len() - 1]), None);
            assert_eq!(decode(&[0x30, 0x00]), None);
            assert_eq!(decode(b"not der"), None);
        }
    }
}
