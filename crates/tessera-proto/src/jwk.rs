//! Signing algorithms and JSON Web Keys (RFC 7517, RFC 7518, RFC 8037): the published
//! [`Jwk`] and [`JwkSet`], and [`PublicKey`], the public half of a key as its members, with
//! its RFC 7638 thumbprint input. No crypto here: keys that sign and verify are
//! `tessera-jose`'s.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

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

/// An `alg` name that is not one of the [`Algorithm`]s Tessera signs with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unsupported algorithm {0:?}: use EdDSA, ES256, RS256 or PS256")]
pub struct UnknownAlgorithm(pub String);

impl FromStr for Algorithm {
    type Err = UnknownAlgorithm;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "EdDSA" => Ok(Self::EdDSA),
            "ES256" => Ok(Self::ES256),
            "RS256" => Ok(Self::RS256),
            "PS256" => Ok(Self::PS256),
            other => Err(UnknownAlgorithm(other.to_owned())),
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

/// A public key as a JWK carries it: an Ed25519 or P-256 point, or an RSA modulus and
/// exponent, each base64url (RFC 8037 section 2, RFC 7518 section 6). The key of a DPoP
/// proof's `jwk` header, of a client's registered JWK Set, of Tessera's own signing keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PublicKey {
    /// `OKP` / `Ed25519`: `x`.
    Ed25519 {
        /// The public key.
        x: String,
    },
    /// `EC` / `P-256`: `x`, `y`.
    P256 {
        /// The x coordinate.
        x: String,
        /// The y coordinate.
        y: String,
    },
    /// `RSA`: `n`, `e`.
    Rsa {
        /// The modulus.
        n: String,
        /// The public exponent.
        e: String,
    },
}

impl PublicKey {
    /// The RFC 7638 section 3 input whose SHA-256 is the key's thumbprint (`cnf.jkt`,
    /// RFC 9449 section 6.1): the required members in lexicographic order, no white space.
    /// The values are base64url or fixed names, so none needs JSON escaping.
    pub fn thumbprint_input(&self) -> String {
        match self {
            Self::Ed25519 { x } => format!(r#"{{"crv":"Ed25519","kty":"OKP","x":"{x}"}}"#),
            Self::P256 { x, y } => {
                format!(r#"{{"crv":"P-256","kty":"EC","x":"{x}","y":"{y}"}}"#)
            }
            Self::Rsa { n, e } => format!(r#"{{"e":"{e}","kty":"RSA","n":"{n}"}}"#),
        }
    }

    /// The key as a [`Jwk`] for `alg`, named `kid`.
    pub fn to_jwk(&self, alg: Algorithm, kid: &str) -> Jwk {
        let mut jwk = Jwk {
            kty: String::new(),
            crv: String::new(),
            x: String::new(),
            y: None,
            n: None,
            e: None,
            kid: kid.to_owned(),
            alg: alg.as_str().to_owned(),
            use_: "sig".to_owned(),
        };
        match self {
            Self::Ed25519 { x } => {
                (jwk.kty, jwk.crv, jwk.x) = ("OKP".into(), "Ed25519".into(), x.clone())
            }
            Self::P256 { x, y } => {
                (jwk.kty, jwk.crv, jwk.x, jwk.y) =
                    ("EC".into(), "P-256".into(), x.clone(), Some(y.clone()));
            }
            Self::Rsa { n, e } => {
                (jwk.kty, jwk.n, jwk.e) = ("RSA".into(), Some(n.clone()), Some(e.clone()))
            }
        }
        jwk
    }

    /// The public key of a JWK object, or `None` when it has a private or symmetric member
    /// or is not a complete Ed25519, P-256 or RSA public key of base64url members.
    pub fn from_jwk(jwk: &Map<String, Value>) -> Option<Self> {
        const PRIVATE: [&str; 8] = ["d", "p", "q", "dp", "dq", "qi", "oth", "k"];
        if PRIVATE.iter().any(|m| jwk.contains_key(*m)) {
            return None;
        }
        let member = |name: &str| {
            jwk.get(name)
                .and_then(Value::as_str)
                .filter(|v| is_base64url(v))
                .map(str::to_owned)
        };
        match (
            jwk.get("kty").and_then(Value::as_str)?,
            jwk.get("crv").and_then(Value::as_str),
        ) {
            ("OKP", Some("Ed25519")) => Some(Self::Ed25519 { x: member("x")? }),
            ("EC", Some("P-256")) => Some(Self::P256 {
                x: member("x")?,
                y: member("y")?,
            }),
            ("RSA", None) => Some(Self::Rsa {
                n: member("n")?,
                e: member("e")?,
            }),
            _ => None,
        }
    }

    /// The public key of a published [`Jwk`] whose `kty` and `crv` name an Ed25519, P-256 or
    /// RSA key; its `alg` and `use` are the caller's to check.
    pub fn of(jwk: &Jwk) -> Option<Self> {
        match (jwk.kty.as_str(), jwk.crv.as_str()) {
            ("OKP", "Ed25519") => Some(Self::Ed25519 { x: jwk.x.clone() }),
            ("EC", "P-256") => Some(Self::P256 {
                x: jwk.x.clone(),
                y: jwk.y.clone()?,
            }),
            ("RSA", "") => Some(Self::Rsa {
                n: jwk.n.clone()?,
                e: jwk.e.clone()?,
            }),
            _ => None,
        }
    }

    /// Whether this is a key of `alg`'s type (RFC 8725 section 3.1: the key decides).
    pub fn fits(&self, alg: Algorithm) -> bool {
        matches!(
            (self, alg),
            (Self::Ed25519 { .. }, Algorithm::EdDSA)
                | (Self::P256 { .. }, Algorithm::ES256)
                | (Self::Rsa { .. }, Algorithm::RS256 | Algorithm::PS256)
        )
    }
}

/// A usable public key of a JWK Set, with the `kid` and `alg` it names, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicJwk {
    /// The key identifier.
    pub kid: Option<String>,
    /// The one algorithm the key may be used with.
    pub alg: Option<String>,
    /// The key.
    pub key: PublicKey,
}

/// The usable public keys of a JWK Set as JSON (RFC 7517 section 5): those for signatures
/// (`use` absent or `sig`) that [`PublicKey::from_jwk`] reads; private, symmetric and unknown
/// keys are skipped, and a document that is not a JWK Set has none.
pub fn public_keys(set: &str) -> Vec<PublicJwk> {
    let Ok(set) = serde_json::from_str::<Value>(set) else {
        return Vec::new();
    };
    set["keys"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_object)
        .filter(|jwk| {
            jwk.get("use")
                .and_then(Value::as_str)
                .is_none_or(|u| u == "sig")
        })
        .filter_map(|jwk| {
            Some(PublicJwk {
                kid: jwk.get("kid").and_then(Value::as_str).map(str::to_owned),
                alg: jwk.get("alg").and_then(Value::as_str).map(str::to_owned),
                key: PublicKey::from_jwk(jwk)?,
            })
        })
        .collect()
}

fn is_base64url(value: &str) -> bool {
    !value.is_empty()
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_public_key_reads_back_from_its_jwk() {
        let keys = [
            (PublicKey::Ed25519 { x: "eA".into() }, Algorithm::EdDSA),
            (
                PublicKey::P256 {
                    x: "eA".into(),
                    y: "eQ".into(),
                },
                Algorithm::ES256,
            ),
            (
                PublicKey::Rsa {
                    n: "bg".into(),
                    e: "AQAB".into(),
                },
                Algorithm::PS256,
            ),
        ];
        for (key, alg) in keys {
            let jwk = key.to_jwk(alg, "k");
            assert_eq!(PublicKey::of(&jwk).as_ref(), Some(&key), "{jwk:?}");
            let json = serde_json::to_value(&jwk).unwrap();
            let members = json.as_object().unwrap();
            assert_eq!(PublicKey::from_jwk(members).as_ref(), Some(&key), "{json}");
        }
    }

    #[test]
    fn a_key_set_yields_only_its_usable_public_keys() {
        let set = r#"{"keys": [
            {"kty": "OKP", "crv": "Ed25519", "x": "eA", "kid": "a", "alg": "EdDSA"},
            {"kty": "OKP", "crv": "Ed25519", "x": "eA", "use": "enc"},
            {"kty": "OKP", "crv": "Ed25519", "x": "eA", "d": "cHJpdmF0ZQ"},
            {"kty": "oct", "k": "c2VjcmV0"},
            {"kty": "OKP", "crv": "X25519", "x": "eA"}
        ]}"#;
        assert_eq!(
            public_keys(set),
            [PublicJwk {
                kid: Some("a".into()),
                alg: Some("EdDSA".into()),
                key: PublicKey::Ed25519 { x: "eA".into() },
            }]
        );
        assert!(public_keys(r#"{"keys": []}"#).is_empty());
        assert!(public_keys("not json").is_empty());
    }
}
