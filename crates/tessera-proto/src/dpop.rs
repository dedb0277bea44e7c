//! DPoP proofs (RFC 9449): the form, the header and the claims, without crypto.
//!
//! A proof is a JWS the client signs for one request with a key of its own, whose public half
//! rides in the header (RFC 9449 section 4.2). [`parse_proof`] checks the form and the header
//! (section 4.3 steps 2 to 7, except the signature) and hands back the public key
//! ([`PublicKey`], with its RFC 7638 thumbprint input) and the bytes the signature covers; the caller verifies the
//! signature, then reads [`ProofClaims`] with [`crate::jws::decode_claims`] and checks them
//! against the request. [`htu`] is the comparison form of a request URI (section 4.3 step 9).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use thiserror::Error;

use crate::jwk::{Algorithm, PublicKey};
use crate::jws::{present, split, JwsError};

/// The proof's `typ` (RFC 9449 section 4.2).
pub const TYP: &str = "dpop+jwt";

/// The longest proof read. A proof with an RSA 4096 key is under 2 KB.
pub const MAX_PROOF_LEN: usize = 4096;

/// The signature algorithms a proof may use: asymmetric only (RFC 9449 section 4.2), and
/// those Tessera verifies. Also `dpop_signing_alg_values_supported` in the metadata.
pub const ALGORITHMS: [Algorithm; 4] = [
    Algorithm::EdDSA,
    Algorithm::ES256,
    Algorithm::RS256,
    Algorithm::PS256,
];

/// Why a proof's form or header was refused. The messages are fixed text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum ProofError {
    /// The compact form is wrong (see [`JwsError`]).
    #[error("the DPoP proof is not a compact JWS: {0}")]
    Form(JwsError),
    /// The header is not a JSON object of the expected members.
    #[error("the DPoP proof header is malformed")]
    MalformedHeader,
    /// `typ` is not `dpop+jwt`.
    #[error("the DPoP proof typ is not dpop+jwt")]
    WrongType,
    /// `alg` is not an asymmetric algorithm Tessera verifies (never `none` or HMAC).
    #[error("the DPoP proof alg is not one of EdDSA, ES256, RS256, PS256")]
    AlgorithmNotAllowed,
    /// `jwk` is missing, carries private members, or is not a key of the `alg`.
    #[error("the DPoP proof jwk is missing, private or not a public key for its alg")]
    BadKey,
    /// `jku`, `x5u`, `x5c` or `crit` is present.
    #[error("the DPoP proof header names other keys or critical extensions")]
    ForbiddenHeader,
}

/// A proof whose form and header passed; its signature is not checked yet.
#[derive(Debug)]
pub struct UnverifiedProof<'a> {
    /// What the signature covers.
    pub signing_input: &'a [u8],
    /// The payload; read it as [`ProofClaims`] once the signature verified.
    pub payload: Vec<u8>,
    /// The decoded signature.
    pub signature: Vec<u8>,
    /// The algorithm, one of [`ALGORITHMS`], and one `key` is a key for.
    pub alg: Algorithm,
    /// The public key of the `jwk` header.
    pub key: PublicKey,
}

/// The claims of a proof (RFC 9449 section 4.2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProofClaims {
    /// A unique identifier of this proof, for replay detection.
    pub jti: String,
    /// The HTTP method of the request.
    pub htm: String,
    /// The request URI without query and fragment.
    pub htu: String,
    /// When the proof was made, in seconds since the epoch.
    pub iat: i64,
    /// With an access token: base64url SHA-256 of it (section 4.2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ath: Option<String>,
    /// The server's nonce, when it asked for one (section 8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nonce: Option<String>,
}

#[derive(Deserialize)]
struct ProofHeader {
    alg: String,
    #[serde(default)]
    typ: Option<String>,
    #[serde(default)]
    jwk: Option<Map<String, Value>>,
    #[serde(default, deserialize_with = "present")]
    jku: bool,
    #[serde(default, deserialize_with = "present")]
    x5u: bool,
    #[serde(default, deserialize_with = "present")]
    x5c: bool,
    #[serde(default, deserialize_with = "present")]
    crit: bool,
}

/// Checks a proof's form and header (RFC 9449 section 4.3 steps 2 to 7 but the signature):
/// one compact JWS of at most [`MAX_PROOF_LEN`] bytes, `typ` `dpop+jwt`, an `alg` of
/// [`ALGORITHMS`], and a public `jwk` of that algorithm's key type with no private member.
pub fn parse_proof(proof: &str) -> Result<UnverifiedProof<'_>, ProofError> {
    let parts = split(proof, MAX_PROOF_LEN).map_err(ProofError::Form)?;
    let header: ProofHeader =
        serde_json::from_slice(&parts.header).map_err(|_| ProofError::MalformedHeader)?;
    if header.jku || header.x5u || header.x5c || header.crit {
        return Err(ProofError::ForbiddenHeader);
    }
    if !header.typ.as_deref().is_some_and(|t| {
        t.eq_ignore_ascii_case(TYP) || t.eq_ignore_ascii_case("application/dpop+jwt")
    }) {
        return Err(ProofError::WrongType);
    }
    let alg = header
        .alg
        .parse::<Algorithm>()
        .ok()
        .filter(|a| ALGORITHMS.contains(a))
        .ok_or(ProofError::AlgorithmNotAllowed)?;
    let key = header
        .jwk
        .as_ref()
        .and_then(PublicKey::from_jwk)
        .filter(|key| key.fits(alg))
        .ok_or(ProofError::BadKey)?;
    Ok(UnverifiedProof {
        signing_input: parts.signing_input,
        payload: parts.payload,
        signature: parts.signature,
        alg,
        key,
    })
}

/// The form in which `htu` is compared with a request URI (RFC 9449 section 4.3 step 9,
/// RFC 3986 sections 6.2.2 and 6.2.3): an absolute `http` or `https` URI, its scheme and host
/// in lower case, the default port dropped, an empty path as `/`, query and fragment removed.
/// `None` when it is not such a URI.
pub fn htu(uri: &str) -> Option<String> {
    let (scheme, rest) = uri.split_once("://")?;
    let scheme = scheme.to_ascii_lowercase();
    let default_port = match scheme.as_str() {
        "https" => ":443",
        "http" => ":80",
        _ => return None,
    };
    let rest = rest.split(['?', '#']).next().unwrap_or_default();
    let (authority, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, "/"),
    };
    if authority.is_empty() || authority.contains('@') || authority.bytes().any(|b| b <= b' ') {
        return None;
    }
    let authority = authority.to_ascii_lowercase();
    let authority = authority.strip_suffix(default_port).unwrap_or(&authority);
    Some(format!("{scheme}://{authority}{path}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine;

    fn proof(header: &str) -> String {
        let b64 = |s: &str| URL_SAFE_NO_PAD.encode(s);
        format!("{}.{}.{}", b64(header), b64("{}"), b64("sig"))
    }

    const OKP: &str =
        r#"{"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}"#;

    #[test]
    fn a_good_header_hands_back_the_key() {
        let p = proof(&format!(
            r#"{{"typ":"dpop+jwt","alg":"EdDSA","jwk":{OKP}}}"#
        ));
        let parsed = parse_proof(&p).unwrap();
        assert_eq!(parsed.alg, Algorithm::EdDSA);
        assert_eq!(
            parsed.key.thumbprint_input(),
            r#"{"crv":"Ed25519","kty":"OKP","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}"#
        );
    }

    #[test]
    fn every_bad_header_is_refused_for_its_reason() {
        let ec = r#"{"kty":"EC","crv":"P-256","x":"a","y":"b"}"#;
        let cases = [
            (format!(r#"{{"typ":"at+jwt","alg":"EdDSA","jwk":{OKP}}}"#), ProofError::WrongType),
            (format!(r#"{{"alg":"EdDSA","jwk":{OKP}}}"#), ProofError::WrongType),
            (format!(r#"{{"typ":"dpop+jwt","alg":"none","jwk":{OKP}}}"#), ProofError::AlgorithmNotAllowed),
            (format!(r#"{{"typ":"dpop+jwt","alg":"HS256","jwk":{OKP}}}"#), ProofError::AlgorithmNotAllowed),
            (r#"{"typ":"dpop+jwt","alg":"EdDSA"}"#.to_owned(), ProofError::BadKey),
            // The key must be of the algorithm's type.
            (format!(r#"{{"typ":"dpop+jwt","alg":"ES256","jwk":{OKP}}}"#), ProofError::BadKey),
            (format!(r#"{{"typ":"dpop+jwt","alg":"EdDSA","jwk":{ec}}}"#), ProofError::BadKey),
            // Private members.
            (r#"{"typ":"dpop+jwt","alg":"EdDSA","jwk":{"kty":"OKP","crv":"Ed25519","x":"a","d":"b"}}"#.to_owned(), ProofError::BadKey),
            (r#"{"typ":"dpop+jwt","alg":"EdDSA","jwk":{"kty":"oct","k":"a"}}"#.to_owned(), ProofError::BadKey),
            (r#"{"typ":"dpop+jwt","alg":"RS256","jwk":{"kty":"RSA","n":"a","e":"AQAB","p":"x"}}"#.to_owned(), ProofError::BadKey),
            (r#"{"typ":"dpop+jwt","alg":"EdDSA","jwk":{"kty":"OKP","crv":"Ed25519","x":"a\"b"}}"#.to_owned(), ProofError::BadKey),
            (format!(r#"{{"typ":"dpop+jwt","alg":"EdDSA","jwk":{OKP},"crit":["b64"]}}"#), ProofError::ForbiddenHeader),
            (format!(r#"{{"typ":"dpop+jwt","alg":"EdDSA","jwk":{OKP},"jku":"https://a"}}"#), ProofError::ForbiddenHeader),
            (format!(r#"{{"typ":"dpop+jwt","alg":"EdDSA","jwk":{OKP},"x5c":[]}}"#), ProofError::ForbiddenHeader),
            (r#"{"typ":"dpop+jwt","alg":"EdDSA","jwk":"key"}"#.to_owned(), ProofError::MalformedHeader),
        ];
        for (header, why) in cases {
            assert_eq!(parse_proof(&proof(&header)).unwrap_err(), why, "{header}");
        }
        assert!(matches!(parse_proof("a.b"), Err(ProofError::Form(_))));
        assert!(matches!(
            parse_proof(&"a".repeat(MAX_PROOF_LEN + 1)),
            Err(ProofError::Form(JwsError::TooLarge { .. }))
        ));
    }

    #[test]
    fn htu_compares_in_normal_form() {
        for (uri, normal) in [
            (
                "https://API.example.com:443/Quotes?x=1#f",
                "https://api.example.com/Quotes",
            ),
            ("HTTP://127.0.0.1:80", "http://127.0.0.1/"),
            (
                "http://127.0.0.1:8080/connect/token",
                "http://127.0.0.1:8080/connect/token",
            ),
            ("https://[::1]:8443/a", "https://[::1]:8443/a"),
        ] {
            assert_eq!(htu(uri).as_deref(), Some(normal), "{uri}");
        }
        for bad in [
            "/quotes",
            "ftp://a/b",
            "https:///a",
            "https://u@host/",
            "quotes",
        ] {
            assert_eq!(htu(bad), None, "{bad}");
        }
    }
}
