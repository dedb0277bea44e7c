//! The claims checked once the signature verified (RFC 9068 section 4). The compact form and
//! the JOSE header are checked before, by [`tessera_proto::jws`]. No I/O and no clock: the
//! caller passes the time.

use tessera_proto::{jws, AccessTokenClaims};

use crate::error::VerifyError;

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
    let claims: AccessTokenClaims =
        jws::decode_claims(payload).ok_or(VerifyError::MalformedClaims)?;
    if claims.iss != expected.issuer {
        return Err(VerifyError::WrongIssuer);
    }
    check_current(&claims, expected)?;
    Ok(claims)
}

/// The checks that depend on the moment and on the caller rather than on the token alone:
/// the time window and the audience. They run on every verification, the cached ones too.
pub(crate) fn check_current(
    claims: &AccessTokenClaims,
    expected: Expected<'_>,
) -> Result<(), VerifyError> {
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
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
