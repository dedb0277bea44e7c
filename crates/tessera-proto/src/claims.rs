//! The claims of a JWT access token (RFC 9068 section 2.2).

use serde::{Deserialize, Serialize};

/// The claims Tessera puts in every access token.
///
/// There is no resource owner in the client credentials grant, so `sub` is the client
/// identifier (RFC 9068 section 2.2) and [`app_only`](Self::app_only) is `true`: a verifier can
/// tell an application's token from a user's without guessing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccessTokenClaims {
    /// The issuer identifier (RFC 8414), compared exactly by verifiers.
    pub iss: String,
    /// The subject: the client identifier, since no user is involved.
    pub sub: String,
    /// The client the token was issued to (RFC 8693 section 4.3).
    pub client_id: String,
    /// The APIs the token may be used with: one per granted scope.
    pub aud: Audience,
    /// The granted scopes, space-separated (RFC 8693 section 4.2).
    pub scope: String,
    /// Issued at, in seconds since the epoch.
    pub iat: u64,
    /// Expiry, `iat + expires_in`.
    pub exp: u64,
    /// Not before; Tessera does not set it, verifiers check it when present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nbf: Option<u64>,
    /// A unique identifier of at least 128 random bits (RFC 7519 section 4.1.7).
    pub jti: String,
    /// `true` when the token represents an application and no user. Tokens without the claim
    /// are taken as app-only too when `sub == client_id`.
    #[serde(default)]
    pub app_only: bool,
    /// The key the token is bound to (RFC 7800), when it is: a client certificate
    /// (RFC 8705 section 3.1). A bound token is accepted only with proof of that key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cnf: Option<Confirmation>,
    /// The plan the client was on when the token was issued (a Tessera claim, not one of
    /// RFC 9068's): an API looks up that plan's request limits for itself in
    /// `GET {issuer}/api-limits/{api}` ([`crate::api_limits`]). Absent from tokens of
    /// issuers that do not know plans.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<String>,
    /// The organization the client belongs to (a Tessera claim, issue 28): an API can
    /// attribute the request to the customer. Absent for a client of no organization.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub org_id: Option<String>,
}

/// The `cnf` claim (RFC 7800 section 3.1).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Confirmation {
    /// RFC 8705 section 3.1: base64url SHA-256 of the DER client certificate.
    #[serde(rename = "x5t#S256", default, skip_serializing_if = "Option::is_none")]
    pub x5t_s256: Option<String>,
    /// RFC 9449 section 6.1: the RFC 7638 thumbprint of the client's DPoP key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jkt: Option<String>,
}

impl AccessTokenClaims {
    /// Whether the token represents a user rather than the application alone.
    pub fn has_user_context(&self) -> bool {
        !self.app_only && self.sub != self.client_id
    }

    /// Whether the token grants `scope`.
    pub fn has_scope(&self, scope: &str) -> bool {
        self.scope.split(' ').any(|s| s == scope)
    }
}

/// The `aud` claim: one string or an array of strings (RFC 7519 section 4.1.3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Audience {
    /// A single audience.
    One(String),
    /// Several audiences.
    Many(Vec<String>),
}

impl Audience {
    /// Whether `audience` is among the values.
    pub fn contains(&self, audience: &str) -> bool {
        match self {
            Self::One(a) => a == audience,
            Self::Many(all) => all.iter().any(|a| a == audience),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn audience_is_one_or_many() {
        let one: Audience = serde_json::from_str("\"news-api\"").unwrap();
        let many: Audience = serde_json::from_str("[\"a\",\"news-api\"]").unwrap();
        assert!(one.contains("news-api") && many.contains("news-api"));
        assert!(!many.contains("oms-api"));
        assert!(serde_json::from_str::<Audience>("3").is_err());
    }

    #[test]
    fn app_tokens_have_no_user_context() {
        let mut claims = AccessTokenClaims {
            iss: "i".into(),
            sub: "c".into(),
            client_id: "c".into(),
            aud: Audience::One("a".into()),
            scope: "a b".into(),
            iat: 0,
            exp: 1,
            nbf: None,
            jti: "j".into(),
            app_only: true,
            cnf: None,
            plan: None,
            org_id: None,
        };
        assert!(!claims.has_user_context());
        claims.app_only = false;
        assert!(!claims.has_user_context(), "sub == client_id is an app");
        claims.sub = "user-1".into();
        assert!(claims.has_user_context());
        assert!(claims.has_scope("b") && !claims.has_scope("a b"));
    }
}
