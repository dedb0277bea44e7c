//! The token request of the client credentials grant (RFC 6749 section 4.4.2) and the token
//! response (RFC 6749 section 5.1).

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::{ErrorCode, ErrorResponse};
use crate::{ClientId, ClientSecret, ScopeSet};

/// The `grant_type` of a token request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GrantType {
    /// `client_credentials` (RFC 6749 section 4.4.2), the only grant Tessera serves.
    ClientCredentials,
    /// Any other value, refused with `unsupported_grant_type`.
    Other(String),
}

/// A token request as read from its form body, before the client is authenticated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRequest {
    /// The grant type; present, since a request without one is refused while parsing.
    pub grant_type: GrantType,
    /// The raw `scope` parameter, `None` when absent or empty (RFC 6749 3.1: a parameter
    /// without a value is treated as omitted). Parsed later, after client authentication, so
    /// that an unauthenticated caller learns nothing about scopes.
    pub scope: Option<String>,
    /// `client_id` from the body (`client_secret_post`, RFC 6749 section 2.3.1).
    pub client_id: Option<ClientId>,
    /// `client_secret` from the body (`client_secret_post`).
    pub client_secret: Option<ClientSecret>,
    /// The `resource` parameters (RFC 8707 section 2), in order, without repeats: the APIs
    /// the token is for. Empty when there are none.
    pub resource: Vec<String>,
}

const KNOWN: [&str; 4] = ["grant_type", "scope", "client_id", "client_secret"];

/// The longest `resource` value read, and the most `resource` parameters in one request.
const MAX_RESOURCE_LEN: usize = 512;
const MAX_RESOURCES: usize = 32;

impl TokenRequest {
    /// Reads the decoded form pairs of a token request.
    ///
    /// Refuses with `invalid_request` a parameter of this grant that appears more than once
    /// (RFC 6749 section 3.2) and a missing `grant_type`. Unknown parameters are ignored
    /// (RFC 6749 section 3.2).
    ///
    /// `resource` may repeat (RFC 8707 section 2); more than 32 of them, an empty one, or one
    /// longer than 512 bytes or with a fragment is `invalid_target`.
    pub fn from_form<N, V>(pairs: &[(N, V)]) -> Result<Self, ErrorResponse>
    where
        N: AsRef<str>,
        V: AsRef<str>,
    {
        let mut values: [Option<&str>; 4] = [None; 4];
        let mut resource: Vec<String> = Vec::new();
        for (name, value) in pairs {
            let (name, value) = (name.as_ref(), value.as_ref());
            if name == "resource" {
                if value.is_empty() || value.len() > MAX_RESOURCE_LEN || value.contains('#') {
                    return Err(ErrorResponse::new(
                        ErrorCode::InvalidTarget,
                        "a resource is empty, longer than 512 bytes or has a fragment",
                    ));
                }
                if resource.len() == MAX_RESOURCES {
                    return Err(ErrorResponse::new(
                        ErrorCode::InvalidTarget,
                        "more than 32 resource parameters",
                    ));
                }
                if !resource.iter().any(|r| r == value) {
                    resource.push(value.to_owned());
                }
                continue;
            }
            let Some(i) = KNOWN.iter().position(|k| *k == name) else {
                continue;
            };
            if values[i].is_some() {
                return Err(ErrorResponse::new(
                    ErrorCode::InvalidRequest,
                    format!("parameter {name} is repeated"),
                ));
            }
            values[i] = Some(value);
        }
        // RFC 6749 3.1: parameters sent without a value are treated as omitted.
        let [grant_type, scope, client_id, client_secret] =
            values.map(|v| v.filter(|v| !v.is_empty()));
        let grant_type = match grant_type {
            None => {
                return Err(ErrorResponse::new(
                    ErrorCode::InvalidRequest,
                    "missing parameter grant_type",
                ))
            }
            Some("client_credentials") => GrantType::ClientCredentials,
            Some(other) => GrantType::Other(other.to_owned()),
        };
        let client_id = match client_id {
            None => None,
            Some(id) => Some(ClientId::parse(id).ok_or_else(|| {
                ErrorResponse::new(ErrorCode::InvalidRequest, "malformed client_id")
            })?),
        };
        Ok(Self {
            grant_type,
            scope: scope.map(str::to_owned),
            client_id,
            client_secret: client_secret.map(ClientSecret::new),
            resource,
        })
    }
}

/// The `token_type` of an access token response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TokenType {
    /// A bearer token (RFC 6750).
    Bearer,
    /// A token bound to the key of the client's DPoP proofs (RFC 9449 section 5): usable
    /// only with a fresh proof signed by that key.
    DPoP,
}

impl TokenType {
    /// The `token_type` value, which is also the `Authorization` scheme the token is sent with.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Bearer => "Bearer",
            Self::DPoP => "DPoP",
        }
    }
}

/// A successful access token response (RFC 6749 section 5.1). There is never a refresh token
/// in the client credentials grant (RFC 6749 section 4.4.3).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenResponse {
    /// The access token, an RFC 9068 JWT.
    pub access_token: String,
    /// Always `Bearer`.
    pub token_type: TokenType,
    /// Lifetime in seconds, counted from when the response was generated.
    pub expires_in: u64,
    /// The scopes granted.
    pub scope: ScopeSet,
}

impl fmt::Debug for TokenResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenResponse")
            .field("access_token", &"[redacted]")
            .field("token_type", &self.token_type)
            .field("expires_in", &self.expires_in)
            .field("scope", &self.scope)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(raw: &[(&str, &str)]) -> Vec<(String, String)> {
        raw.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn reads_a_client_credentials_request() {
        let req = TokenRequest::from_form(&pairs(&[
            ("grant_type", "client_credentials"),
            ("scope", "news-api"),
            ("unknown", "ignored"),
            ("unknown", "twice"),
        ]))
        .unwrap();
        assert_eq!(req.grant_type, GrantType::ClientCredentials);
        assert_eq!(req.scope.as_deref(), Some("news-api"));
        assert!(req.client_id.is_none());
    }

    #[test]
    fn refuses_repeats_and_a_missing_grant_type() {
        let repeated = pairs(&[
            ("grant_type", "client_credentials"),
            ("scope", "a"),
            ("scope", "b"),
        ]);
        let err = TokenRequest::from_form(&repeated).unwrap_err();
        assert_eq!(err.error, ErrorCode::InvalidRequest);
        let missing = pairs(&[("grant_type", ""), ("scope", "a")]);
        assert_eq!(
            TokenRequest::from_form(&missing).unwrap_err().error,
            ErrorCode::InvalidRequest
        );
    }

    #[test]
    fn response_debug_hides_the_token() {
        let resp = TokenResponse {
            access_token: "eyJsecret".into(),
            token_type: TokenType::Bearer,
            expires_in: 3600,
            scope: ScopeSet::parse("a").unwrap(),
        };
        assert!(!format!("{resp:?}").contains("eyJsecret"));
        let json = serde_json::to_value(&resp).unwrap();
        assert_eq!(json["token_type"], "Bearer");
        assert_eq!(json["scope"], "a");
    }

    #[test]
    fn resource_may_repeat_and_is_bounded() {
        let req = TokenRequest::from_form(&pairs(&[
            ("grant_type", "client_credentials"),
            ("resource", "news-api"),
            ("resource", "https://oms.example.com/"),
            ("resource", "news-api"),
        ]))
        .unwrap();
        assert_eq!(req.resource, ["news-api", "https://oms.example.com/"]);
        let long = "r".repeat(513);
        for bad in ["", "https://a.example/#f", long.as_str()] {
            let err = TokenRequest::from_form(&pairs(&[
                ("grant_type", "client_credentials"),
                ("resource", bad),
            ]))
            .unwrap_err();
            assert_eq!(err.error, ErrorCode::InvalidTarget, "{bad}");
        }
        let many: Vec<(String, String)> = (0..33)
            .map(|i| ("resource".to_owned(), format!("api-{i}")))
            .chain([("grant_type".to_owned(), "client_credentials".to_owned())])
            .collect();
        assert_eq!(
            TokenRequest::from_form(&many).unwrap_err().error,
            ErrorCode::InvalidTarget
        );
    }
}
