//! The pure part of validation: the compact form and JOSE header checked before any key is
//! looked up (RFC 7515 section 5.2, RFC 8725 section 3), and the claims checked after the
//! signature (RFC 9068 section 4). No I/O and no clock: the caller passes the time.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde::{Deserialize, Deserializer};
use tessera_proto::{AccessTokenClaims, Algorithm};

use crate::error::VerifyError;

/// The longest `kid` looked up. Tessera's are 43-character RFC 7638 thumbprints; anything
/// much longer is not a key identifier but an attempt to make the lookup costly.
pub(crate) const MAX_KID_LEN: usize = 128;

/// A compact JWS whose form and header passed, signature not yet checked.
#[derive(Debug)]
pub(crate) struct Unverified<'a> {
    /// `base64url(header) "." base64url(payload)`: what the signature covers
    /// (RFC 7515 section 5.2 step 8).
    pub signing_input: &'a [u8],
    /// The decoded payload; parsed only once the signature verified.
    pub payload: Vec<u8>,
    /// The decoded signature.
    pub signature: Vec<u8>,
    /// The algorithm from the allow-list.
    pub alg: Algorithm,
    /// The key identifier, bounded and printable.
    pub kid: String,
}

/// The JOSE header members this verifier reads. Unknown members are ignored as RFC 7515
/// section 4 requires, except those listed below, whose mere presence refuses the token.
/// serde refuses a repeated member (`duplicate field`), which RFC 7515 section 4 permits.
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
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    serde::de::IgnoredAny::deserialize(d).map(|_| true)
}

/// Checks the form and the header of `token`, in order of cost and without crypto:
/// the length bound, the three parts, base64url without padding, then the header.
pub(crate) fn parse<'a>(
    token: &'a str,
    max_len: usize,
    allowed: &[Algorithm],
) -> Result<Unverified<'a>, VerifyError> {
    if token.len() > max_len {
        return Err(VerifyError::TooLarge { limit: max_len });
    }
    // RFC 7516 section 9: a JWE has four periods, a JWS two.
    match token.bytes().filter(|&b| b == b'.').count() {
        2 => {}
        4 => return Err(VerifyError::Encrypted),
        _ => return Err(VerifyError::Malformed),
    }
    let (signing_input, signature_b64) = token.rsplit_once('.').ok_or(VerifyError::Malformed)?;
    let (header_b64, payload_b64) = signing_input
        .split_once('.')
        .ok_or(VerifyError::Malformed)?;
    if header_b64.is_empty() || payload_b64.is_empty() {
        return Err(VerifyError::Malformed);
    }
    // The URL-safe alphabet without padding (RFC 7515 section 2); the engine also refuses
    // non-canonical trailing bits, so one token has one spelling.
    let decode = |part: &str| {
        URL_SAFE_NO_PAD
            .decode(part)
            .map_err(|_| VerifyError::Malformed)
    };
    let header = decode(header_b64)?;
    let payload = decode(payload_b64)?;
    let signature = decode(signature_b64)?;

    if !is_json_object(&header) {
        return Err(VerifyError::MalformedHeader);
    }
    let header: Header =
        serde_json::from_slice(&header).map_err(|_| VerifyError::MalformedHeader)?;
    if header.jku || header.jwk || header.x5u || header.x5c {
        return Err(VerifyError::UntrustedKeyReference);
    }
    if header.crit {
        return Err(VerifyError::CriticalHeader);
    }
    // `alg` is case-sensitive (RFC 7515 section 4.1.1): `none`, `None`, `HS256`, `eddsa` all
    // fail here, before any key is touched.
    let alg = header
        .alg
        .parse::<Algorithm>()
        .ok()
        .filter(|a| allowed.contains(a))
        .ok_or(VerifyError::AlgorithmNotAllowed)?;
    if !header.typ.as_deref().is_some_and(is_at_jwt) {
        return Err(VerifyError::WrongType);
    }
    let kid = header.kid.ok_or(VerifyError::BadKeyId)?;
    if !is_reasonable_kid(&kid) {
        return Err(VerifyError::BadKeyId);
    }
    Ok(Unverified {
        signing_input: signing_input.as_bytes(),
        payload,
        signature,
        alg,
        kid,
    })
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

/// A `kid` worth a lookup: 1 to [`MAX_KID_LEN`] bytes of printable ASCII without spaces.
/// RFC 7515 section 4.1.4 allows any string; this verifier only needs to match the issuer's.
pub(crate) fn is_reasonable_kid(kid: &str) -> bool {
    !kid.is_empty() && kid.len() <= MAX_KID_LEN && kid.bytes().all(|b| b.is_ascii_graphic())
}

/// What the claims are checked against.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Expected<'a> {
    pub issuer: &'a str,
    /// `None` leaves the audience to the caller (see `Scoped`, which checks the scope first).
    pub audience: Option<&'a str>,
    pub leeway: u64,
    /// Seconds since the epoch.
    pub now: u64,
}

/// Parses the verified payload and checks it (RFC 9068 section 4 steps 3 to 6, RFC 7519
/// sections 4.1.4 and 4.1.5). Claims of the wrong JSON type fail to deserialize.
pub(crate) fn check_claims(
    payload: &[u8],
    expected: Expected<'_>,
) -> Result<AccessTokenClaims, VerifyError> {
    if !is_json_object(payload) {
        return Err(VerifyError::MalformedClaims);
    }
    let claims: AccessTokenClaims =
        serde_json::from_slice(payload).map_err(|_| VerifyError::MalformedClaims)?;
    if claims.iss != expected.issuer {
        return Err(VerifyError::WrongIssuer);
    }
    // Valid while now < exp (RFC 7519 4.1.4) and now >= nbf (4.1.5), each give or take leeway.
    if expected.now >= claims.exp.saturating_add(expected.leeway) {
        return Err(VerifyError::Expired);
    }
    if claims
        .nbf
        .is_some_and(|nbf| expected.now.saturating_add(expected.leeway) < nbf)
    {
        return Err(VerifyError::NotYetValid);
    }
    if expected
        .audience
        .is_some_and(|aud| !claims.aud.contains(aud))
    {
        return Err(VerifyError::WrongAudience);
    }
    Ok(claims)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Algorithm; 2] = [Algorithm::EdDSA, Algorithm::ES256];

    fn b64(s: &str) -> String {
        URL_SAFE_NO_PAD.encode(s)
    }

    fn token(header: &str) -> String {
        format!("{}.{}.{}", b64(header), b64("{}"), b64("sig"))
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
            "",
            "é",
        ] {
            assert!(!is_at_jwt(bad), "{bad}");
        }
    }

    #[test]
    fn header_is_strict() {
        let ok = r#"{"alg":"EdDSA","kid":"k","typ":"at+jwt","other":1}"#;
        assert!(parse(&token(ok), 8192, &ALL).is_ok());
        let cases = [
            (
                r#"{"alg":"EdDSA","alg":"EdDSA","kid":"k","typ":"at+jwt"}"#,
                VerifyError::MalformedHeader,
            ),
            (
                r#"{"alg":7,"kid":"k","typ":"at+jwt"}"#,
                VerifyError::MalformedHeader,
            ),
            (r#"["EdDSA"]"#, VerifyError::MalformedHeader),
            (
                r#"{"alg":"EdDSA","kid":"k","typ":"at+jwt","x5c":null}"#,
                VerifyError::UntrustedKeyReference,
            ),
            (
                r#"{"alg":"EdDSA","kid":"k","typ":"at+jwt","crit":["exp"]}"#,
                VerifyError::CriticalHeader,
            ),
            (r#"{"alg":"EdDSA","typ":"at+jwt"}"#, VerifyError::BadKeyId),
            (
                r#"{"alg":"EdDSA","kid":"","typ":"at+jwt"}"#,
                VerifyError::BadKeyId,
            ),
            (r#"{"alg":"EdDSA","kid":"k"}"#, VerifyError::WrongType),
            (
                r#"{"alg":"RS256","kid":"k","typ":"at+jwt"}"#,
                VerifyError::AlgorithmNotAllowed,
            ),
        ];
        for (header, want) in cases {
            assert_eq!(
                parse(&token(header), 8192, &ALL).unwrap_err(),
                want,
                "{header}"
            );
        }
        let es_only = parse(&token(ok), 8192, &[Algorithm::ES256]).unwrap_err();
        assert_eq!(es_only, VerifyError::AlgorithmNotAllowed);
    }

    #[test]
    fn compact_form_is_checked_first() {
        let h = b64(r#"{"alg":"EdDSA","kid":"k","typ":"at+jwt"}"#);
        for (t, want) in [
            (format!("{h}.e30"), VerifyError::Malformed),
            (format!("{h}.e30.c2ln.x"), VerifyError::Malformed),
            (format!("{h}..c2ln"), VerifyError::Malformed),
            (format!("{h}.e30=.c2ln"), VerifyError::Malformed),
            (format!("{h}.e30.c2ln="), VerifyError::Malformed),
            (format!("{h}.e3+.c2ln"), VerifyError::Malformed),
            (format!("{h}.e31.c2ln"), VerifyError::Malformed), // non-canonical last bits
            ("a.b.c.d.e".to_owned(), VerifyError::Encrypted),
            ("x".repeat(101), VerifyError::TooLarge { limit: 100 }),
        ] {
            assert_eq!(parse(&t, 100, &ALL).unwrap_err(), want, "{t}");
        }
    }

    #[test]
    fn time_claims_honour_the_leeway() {
        let claims = |exp: u64, nbf: Option<u64>| {
            serde_json::json!({
                "iss": "i", "sub": "c", "client_id": "c", "aud": ["api"], "scope": "s",
                "iat": 100, "exp": exp, "nbf": nbf, "jti": "j", "app_only": true
            })
            .to_string()
        };
        let at = |now| Expected {
            issuer: "i",
            audience: Some("api"),
            leeway: 10,
            now,
        };
        assert!(check_claims(claims(200, None).as_bytes(), at(209)).is_ok());
        assert_eq!(
            check_claims(claims(200, None).as_bytes(), at(210)).unwrap_err(),
            VerifyError::Expired
        );
        assert!(check_claims(claims(900, Some(300)).as_bytes(), at(290)).is_ok());
        assert_eq!(
            check_claims(claims(900, Some(300)).as_bytes(), at(289)).unwrap_err(),
            VerifyError::NotYetValid
        );
        let array = r#"["i","c","c",["api"],"s",1,9999,null,"j",true]"#;
        assert_eq!(
            check_claims(array.as_bytes(), at(0)).unwrap_err(),
            VerifyError::MalformedClaims
        );
        let wrong_type = r#"{"iss":"i","sub":"c","client_id":"c","aud":["api"],"scope":"s",
            "iat":1,"exp":"never","jti":"j"}"#;
        assert_eq!(
            check_claims(wrong_type.as_bytes(), at(0)).unwrap_err(),
            VerifyError::MalformedClaims
        );
    }
}
