//! The one reader of JWT access tokens in compact JWS form (RFC 7515 sections 3.1 and 7.1),
//! used by the resource-server kit and by the server's introspection and revocation.
//!
//! [`parse`] checks the form and the JOSE header before any key is looked up (RFC 7515
//! section 5.2, RFC 8725 section 3), and hands back the bytes the signature covers. It does no
//! crypto: the caller verifies [`Unverified::signature`] over [`Unverified::signing_input`]
//! with the key [`Unverified::kid`] names, and only then reads the payload with
//! [`decode_claims`].

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use thiserror::Error;

use crate::jwk::Algorithm;

/// The longest `kid` looked up. Tessera's are 43-character RFC 7638 thumbprints; anything
/// much longer is not a key identifier but an attempt to make the lookup costly.
pub const MAX_KID_LEN: usize = 128;

/// Why [`parse`] refused a token, in the order the checks run. The messages are fixed text
/// and never repeat any part of the token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum JwsError {
    /// Longer than the caller's bound; refused before any decoding.
    #[error("the token is longer than {limit} bytes")]
    TooLarge {
        /// The caller's bound.
        limit: usize,
    },
    /// Five parts: a JWE (RFC 7516 section 9), which Tessera never issues.
    #[error("encrypted tokens are not accepted")]
    Encrypted,
    /// Not three non-empty base64url parts without padding (RFC 7515 section 7.1); the
    /// signature part may be empty.
    #[error("the token is not a compact JWS")]
    Malformed,
    /// The header is not a JSON object with members of the expected types, or repeats a
    /// member (RFC 7515 section 4).
    #[error("the token header is malformed")]
    MalformedHeader,
    /// `jku`, `jwk`, `x5u` or `x5c` is present (RFC 7515 sections 4.1.2 to 4.1.6).
    #[error("the token header refers to a key this server does not trust")]
    UntrustedKeyReference,
    /// `crit` is present (RFC 7515 section 4.1.11).
    #[error("the token header has critical extensions")]
    CriticalHeader,
    /// `alg` is not one of the caller's (RFC 8725 section 3.1).
    #[error("the token algorithm is not accepted")]
    AlgorithmNotAllowed,
    /// `typ` is absent or not `at+jwt` (RFC 9068 section 4, RFC 8725 section 3.11).
    #[error("the token type is not at+jwt")]
    WrongType,
    /// `kid` is absent or fails [`is_reasonable_kid`].
    #[error("the token key identifier is missing or malformed")]
    BadKeyId,
}

/// A compact JWS whose form and header passed; its signature is not checked yet.
#[derive(Debug)]
pub struct Unverified<'a> {
    /// `base64url(header) "." base64url(payload)`: what the signature covers
    /// (RFC 7515 section 5.2 step 8).
    pub signing_input: &'a [u8],
    /// The decoded payload; read it with [`decode_claims`] once the signature verified.
    pub payload: Vec<u8>,
    /// The decoded signature.
    pub signature: Vec<u8>,
    /// The algorithm, one of those the caller allowed (RFC 7515 section 4.1.1).
    pub alg: Algorithm,
    /// The key identifier (RFC 7515 section 4.1.4), bounded and printable.
    pub kid: String,
}

/// The JOSE header members read here. Unknown members are ignored as RFC 7515 section 4
/// requires, except those listed below, whose mere presence refuses the token. serde refuses a
/// repeated member (`duplicate field`), which RFC 7515 section 4 permits.
#[derive(Deserialize)]
struct Header {
    alg: String,
    #[serde(default)]
    kid: Option<String>,
    #[serde(default)]
    typ: Option<String>,
    /// RFC 7515 4.1.2: a URL to fetch keys from. Following it lets the attacker pick the key.
    #[serde(default, deserialize_with = "present")]
    jku: bool,
    /// RFC 7515 4.1.3: the key itself. Trusting it lets the attacker pick the key.
    #[serde(default, deserialize_with = "present")]
    jwk: bool,
    /// RFC 7515 4.1.5: a certificate URL.
    #[serde(default, deserialize_with = "present")]
    x5u: bool,
    /// RFC 7515 4.1.6: a certificate chain.
    #[serde(default, deserialize_with = "present")]
    x5c: bool,
    /// RFC 7515 4.1.11: extensions the recipient must understand; none is.
    #[serde(default, deserialize_with = "present")]
    crit: bool,
}

/// `true` when the member is there, whatever its value (even `null`).
pub(crate) fn present<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    serde::de::IgnoredAny::deserialize(d).map(|_| true)
}

/// The JOSE header checks every reader shares (RFC 7515 section 5.2 steps 2 to 5): a JSON
/// object of the expected members, no key reference, no `crit`, and an `alg` among `allowed`.
fn checked_header(header: &[u8], allowed: &[Algorithm]) -> Result<(Header, Algorithm), JwsError> {
    let header: Header = serde_json::from_slice(header).map_err(|_| JwsError::MalformedHeader)?;
    if header.jku || header.jwk || header.x5u || header.x5c {
        return Err(JwsError::UntrustedKeyReference);
    }
    if header.crit {
        return Err(JwsError::CriticalHeader);
    }
    // `alg` is case-sensitive (RFC 7515 section 4.1.1): `none`, `None`, `HS256`, `eddsa` all
    // fail here, before any key is touched (RFC 8725 sections 3.1 and 3.2).
    let alg = header
        .alg
        .parse::<Algorithm>()
        .ok()
        .filter(|a| allowed.contains(a))
        .ok_or(JwsError::AlgorithmNotAllowed)?;
    Ok((header, alg))
}

/// Checks the form and the header of `token`, in order of cost and without crypto: the length
/// bound, the three parts (RFC 7515 section 7.1), base64url without padding, then the header
/// (RFC 7515 section 5.2 steps 1 to 5): no key reference, no `crit`, `alg` among `allowed`,
/// `typ` `at+jwt` and a reasonable `kid`.
pub fn parse<'a>(
    token: &'a str,
    max_len: usize,
    allowed: &[Algorithm],
) -> Result<Unverified<'a>, JwsError> {
    let Parts {
        signing_input,
        header,
        payload,
        signature,
    } = split(token, max_len)?;
    let (header, alg) = checked_header(&header, allowed)?;
    if !header.typ.as_deref().is_some_and(is_at_jwt) {
        return Err(JwsError::WrongType);
    }
    let kid = header.kid.ok_or(JwsError::BadKeyId)?;
    if !is_reasonable_kid(&kid) {
        return Err(JwsError::BadKeyId);
    }
    Ok(Unverified {
        signing_input,
        payload,
        signature,
        alg,
        kid,
    })
}

/// A compact JWS taken apart: its form checked, its parts decoded, nothing interpreted.
pub(crate) struct Parts<'a> {
    pub(crate) signing_input: &'a [u8],
    pub(crate) header: Vec<u8>,
    pub(crate) payload: Vec<u8>,
    pub(crate) signature: Vec<u8>,
}

/// The length bound, the three parts (RFC 7515 section 7.1, a JWE refused by its five) and
/// base64url without padding; a header that is not a JSON object is refused too.
pub(crate) fn split(token: &str, max_len: usize) -> Result<Parts<'_>, JwsError> {
    if token.len() > max_len {
        return Err(JwsError::TooLarge { limit: max_len });
    }
    // RFC 7516 section 9: a JWE has four periods, a JWS two.
    match token.bytes().filter(|&b| b == b'.').count() {
        2 => {}
        4 => return Err(JwsError::Encrypted),
        _ => return Err(JwsError::Malformed),
    }
    let (signing_input, signature_b64) = token.rsplit_once('.').ok_or(JwsError::Malformed)?;
    let (header_b64, payload_b64) = signing_input.split_once('.').ok_or(JwsError::Malformed)?;
    if header_b64.is_empty() || payload_b64.is_empty() {
        return Err(JwsError::Malformed);
    }
    // The URL-safe alphabet without padding (RFC 7515 section 2); the engine also refuses
    // non-canonical trailing bits, so one token has one spelling.
    let decode = |part: &str| {
        URL_SAFE_NO_PAD
            .decode(part)
            .map_err(|_| JwsError::Malformed)
    };
    let parts = Parts {
        signing_input: signing_input.as_bytes(),
        header: decode(header_b64)?,
        payload: decode(payload_b64)?,
        signature: decode(signature_b64)?,
    };
    if !is_json_object(&parts.header) {
        return Err(JwsError::MalformedHeader);
    }
    Ok(parts)
}

/// A client assertion (RFC 7523 section 3) whose form and header passed; its signature is not
/// checked yet.
#[derive(Debug)]
pub struct UnverifiedAssertion<'a> {
    /// What the signature covers.
    pub signing_input: &'a [u8],
    /// The decoded payload.
    pub payload: Vec<u8>,
    /// The decoded signature.
    pub signature: Vec<u8>,
    /// The algorithm, one of those the caller allowed.
    pub alg: Algorithm,
    /// The key identifier, when there is one (RFC 7523 does not require it).
    pub kid: Option<String>,
}

/// Checks the form and the header of a client assertion (RFC 7523 section 3, RFC 7515
/// section 5.2): as [`parse`], but `kid` is optional and `typ` may be absent or anything but
/// the types of Tessera's own tokens and proofs (`at+jwt`, `dpop+jwt`), so that an access
/// token or a DPoP proof is never taken for an assertion (RFC 8725 section 3.11).
pub fn parse_assertion<'a>(
    token: &'a str,
    max_len: usize,
    allowed: &[Algorithm],
) -> Result<UnverifiedAssertion<'a>, JwsError> {
    let Parts {
        signing_input,
        header,
        payload,
        signature,
    } = split(token, max_len)?;
    let (header, alg) = checked_header(&header, allowed)?;
    if header.typ.as_deref().is_some_and(|t| {
        is_at_jwt(t)
            || t.eq_ignore_ascii_case("dpop+jwt")
            || t.eq_ignore_ascii_case("application/dpop+jwt")
    }) {
        return Err(JwsError::WrongType);
    }
    if header
        .kid
        .as_deref()
        .is_some_and(|kid| !is_reasonable_kid(kid))
    {
        return Err(JwsError::BadKeyId);
    }
    Ok(UnverifiedAssertion {
        signing_input,
        payload,
        signature,
        alg,
        kid: header.kid,
    })
}

/// Reads a verified payload as the claims `T`, or `None` when it is not a JSON object of
/// them (RFC 7519 section 7.2 step 10, RFC 9068 section 2.2): a claim missing, of the wrong
/// type, or repeated.
pub fn decode_claims<T: DeserializeOwned>(payload: &[u8]) -> Option<T> {
    if !is_json_object(payload) {
        return None;
    }
    serde_json::from_slice(payload).ok()
}

/// A `kid` worth a lookup: 1 to [`MAX_KID_LEN`] bytes of printable ASCII without spaces.
/// RFC 7515 section 4.1.4 allows any string; a Tessera reader only needs to match the issuer's.
pub fn is_reasonable_kid(kid: &str) -> bool {
    !kid.is_empty() && kid.len() <= MAX_KID_LEN && kid.bytes().all(|b| b.is_ascii_graphic())
}

/// The header and the claims are JSON objects (RFC 7515 section 4, RFC 7519 section 4), but a
/// derived `Deserialize` also takes an array of the fields in order: refuse that shape first.
fn is_json_object(json: &[u8]) -> bool {
    json.trim_ascii_start().first() == Some(&b'{')
}

/// RFC 9068 section 4: `typ` is `at+jwt` or `application/at+jwt`; media types compare
/// case-insensitively (RFC 7515 section 4.1.9, RFC 2045 section 5.1).
fn is_at_jwt(typ: &str) -> bool {
    const PREFIX: &str = "application/";
    let bare = match typ.get(..PREFIX.len()) {
        Some(p) if p.eq_ignore_ascii_case(PREFIX) => &typ[PREFIX.len()..],
        _ => typ,
    };
    bare.eq_ignore_ascii_case("at+jwt")
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Algorithm; 2] = [Algorithm::EdDSA, Algorithm::ES256];
    const GOOD: &str = r#"{"alg":"EdDSA","kid":"k","typ":"at+jwt","other":1}"#;

    fn b64(s: &str) -> String {
        URL_SAFE_NO_PAD.encode(s)
    }

    fn token(header: &str) -> String {
        format!("{}.{}.{}", b64(header), b64("{}"), b64("sig"))
    }

    fn refusal(token: &str) -> JwsError {
        parse(token, 8192, &ALL).unwrap_err()
    }

    #[test]
    fn a_good_token_hands_back_what_the_signature_covers() {
        let t = token(GOOD);
        let jws = parse(&t, 8192, &ALL).unwrap();
        assert_eq!(jws.signing_input, t.rsplit_once('.').unwrap().0.as_bytes());
        assert_eq!(jws.payload, b"{}");
        assert_eq!(jws.signature, b"sig");
        assert_eq!((jws.alg, jws.kid.as_str()), (Algorithm::EdDSA, "k"));
        // An empty signature is well-formed; verifying it is the caller's business.
        assert!(parse(&format!("{}.{}.", b64(GOOD), b64("{}")), 8192, &ALL).is_ok());
    }

    #[test]
    fn an_assertion_header_needs_no_kid_and_is_never_a_token_or_a_proof() {
        let ok = |header: &str| parse_assertion(&token(header), 8192, &ALL).map(|a| a.kid);
        assert_eq!(ok(r#"{"alg":"EdDSA"}"#), Ok(None));
        assert_eq!(
            ok(r#"{"alg":"ES256","kid":"k","typ":"client-authentication+jwt"}"#),
            Ok(Some("k".into()))
        );
        assert_eq!(ok(r#"{"alg":"EdDSA","typ":"JWT"}"#), Ok(None));
        for (header, why) in [
            (r#"{"alg":"EdDSA","typ":"at+jwt"}"#, JwsError::WrongType),
            (r#"{"alg":"EdDSA","typ":"DPoP+JWT"}"#, JwsError::WrongType),
            (r#"{"alg":"none"}"#, JwsError::AlgorithmNotAllowed),
            (
                r#"{"alg":"EdDSA","jwk":{}}"#,
                JwsError::UntrustedKeyReference,
            ),
            (r#"{"alg":"EdDSA","crit":[]}"#, JwsError::CriticalHeader),
            (r#"{"alg":"EdDSA","kid":""}"#, JwsError::BadKeyId),
        ] {
            assert_eq!(ok(header), Err(why), "{header}");
        }
    }

    #[test]
    fn typ_accepts_the_rfc_9068_spellings_only() {
        for ok in [
            "at+jwt",
            "AT+JWT",
            "application/at+jwt",
            "Application/At+Jwt",
        ] {
            assert!(is_at_jwt(ok), "{ok}");
        }
        for bad in [
            "JWT",
            "jwt",
            "at+jwt ",
            "application/jwt",
            "application/",
            // Twelve characters before at+jwt, but not the application/ prefix.
            "applicationXat+jwt",
            "vnd.example/at+jwt",
            "",
            "é",
        ] {
            assert!(!is_at_jwt(bad), "{bad}");
        }
    }

    #[test]
    fn each_key_reference_and_crit_refuses_whatever_its_value() {
        for member in ["jku", "jwk", "x5u", "x5c", "crit"] {
            for value in [
                r#""https://evil.example/""#,
                r#"{"kty":"OKP"}"#,
                r#"["exp"]"#,
                "[]",
                "null",
            ] {
                let header =
                    format!(r#"{{"alg":"EdDSA","kid":"k","typ":"at+jwt","{member}":{value}}}"#);
                let want = match member {
                    "crit" => JwsError::CriticalHeader,
                    _ => JwsError::UntrustedKeyReference,
                };
                assert_eq!(refusal(&token(&header)), want, "{header}");
            }
        }
    }

    #[test]
    fn header_is_strict() {
        let cases = [
            (
                r#"{"alg":"EdDSA","alg":"EdDSA","kid":"k","typ":"at+jwt"}"#,
                JwsError::MalformedHeader,
            ),
            (
                r#"{"alg":7,"kid":"k","typ":"at+jwt"}"#,
                JwsError::MalformedHeader,
            ),
            (r#"{"alg":"EdDSA","typ":"at+jwt"}"#, JwsError::BadKeyId),
            (
                r#"{"alg":"EdDSA","kid":"","typ":"at+jwt"}"#,
                JwsError::BadKeyId,
            ),
            (
                r#"{"alg":"EdDSA","kid":"a b","typ":"at+jwt"}"#,
                JwsError::BadKeyId,
            ),
            (r#"{"alg":"EdDSA","kid":"k"}"#, JwsError::WrongType),
            (
                r#"{"alg":"EdDSA","kid":"k","typ":"JWT"}"#,
                JwsError::WrongType,
            ),
            (
                r#"{"alg":"RS256","kid":"k","typ":"at+jwt"}"#,
                JwsError::AlgorithmNotAllowed,
            ),
            (
                r#"{"alg":"none","kid":"k","typ":"at+jwt"}"#,
                JwsError::AlgorithmNotAllowed,
            ),
        ];
        for (header, want) in cases {
            assert_eq!(refusal(&token(header)), want, "{header}");
        }
        let long_kid = format!(
            r#"{{"alg":"EdDSA","kid":"{}","typ":"at+jwt"}}"#,
            "k".repeat(129)
        );
        assert_eq!(refusal(&token(&long_kid)), JwsError::BadKeyId);
        let longest_kid = format!(
            r#"{{"alg":"EdDSA","kid":"{}","typ":"at+jwt"}}"#,
            "k".repeat(MAX_KID_LEN)
        );
        assert!(parse(&token(&longest_kid), 8192, &ALL).is_ok());
        let es_only = parse(&token(GOOD), 8192, &[Algorithm::ES256]).unwrap_err();
        assert_eq!(es_only, JwsError::AlgorithmNotAllowed);
    }

    #[test]
    fn a_header_that_is_not_a_json_object_is_refused() {
        for header in [
            r#"["EdDSA"]"#,
            r#"["EdDSA","k","at+jwt"]"#,
            r#""EdDSA""#,
            "7",
            "null",
            "{",
        ] {
            assert_eq!(
                refusal(&token(header)),
                JwsError::MalformedHeader,
                "{header}"
            );
        }
    }

    #[test]
    fn compact_form_is_checked_first() {
        let h = b64(r#"{"alg":"EdDSA","kid":"k","typ":"at+jwt"}"#);
        for (t, want) in [
            (format!("{h}.e30"), JwsError::Malformed),
            (format!("{h}.e30.c2ln.x"), JwsError::Malformed),
            ("".to_owned(), JwsError::Malformed),
            (format!("{h}..c2ln"), JwsError::Malformed),
            (".e30.c2ln".to_owned(), JwsError::Malformed),
            (format!("{h}.e30=.c2ln"), JwsError::Malformed),
            (format!("{h}.e30.c2ln="), JwsError::Malformed),
            (format!("{h}.e3+.c2ln"), JwsError::Malformed),
            (format!("{h}.e30.c2l/"), JwsError::Malformed),
            (format!("{h}.e31.c2ln"), JwsError::Malformed), // non-canonical last bits
            ("a.b.c.d.e".to_owned(), JwsError::Encrypted),
            ("x".repeat(101), JwsError::TooLarge { limit: 100 }),
        ] {
            assert_eq!(parse(&t, 100, &ALL).unwrap_err(), want, "{t}");
        }
    }

    #[test]
    fn oversize_is_refused_before_anything_else() {
        let t = token(GOOD);
        assert!(parse(&t, t.len(), &ALL).is_ok());
        let limit = t.len() - 1;
        assert_eq!(
            parse(&t, limit, &ALL).unwrap_err(),
            JwsError::TooLarge { limit }
        );
        // Even a token that would fail every other check.
        let junk = "!".repeat(9000);
        assert_eq!(refusal(&junk), JwsError::TooLarge { limit: 8192 });
    }

    #[test]
    fn claims_are_a_json_object() {
        #[derive(Debug, Deserialize, PartialEq)]
        struct Claims {
            iss: String,
            exp: u64,
        }
        let ok: Option<Claims> = decode_claims(br#" {"iss":"i","exp":1,"other":true}"#);
        assert_eq!(
            ok,
            Some(Claims {
                iss: "i".into(),
                exp: 1
            })
        );
        for bad in [
            r#"["i",1]"#,
            r#"{"iss":"i","exp":"never"}"#,
            r#"{"iss":"i","iss":"j","exp":1}"#,
            r#"{"iss":"i"}"#,
            "null",
            "",
        ] {
            assert_eq!(decode_claims::<Claims>(bad.as_bytes()), None, "{bad}");
        }
    }
}
