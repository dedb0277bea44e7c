//! Client identifiers, client secrets and HTTP Basic client authentication
//! (RFC 6749 section 2.3.1).

use std::fmt;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::form;

/// A client identifier (RFC 6749 section 2.2). Any non-empty string of printable characters
/// up to 256 bytes; Tessera generates URL-safe ones.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ClientId(String);

impl ClientId {
    /// Accepts a client identifier as presented by a client.
    pub fn parse(id: &str) -> Option<Self> {
        let ok = (1..=256).contains(&id.len()) && !id.chars().any(char::is_control);
        ok.then(|| Self(id.to_owned()))
    }

    /// The identifier as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ClientId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A client secret. Its `Debug` prints `[redacted]`, so it never reaches a log by accident;
/// read it with [`ClientSecret::expose`].
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ClientSecret(String);

/// The secret's bytes are overwritten when it is dropped, so that a freed buffer does not
/// keep it.
impl Drop for ClientSecret {
    fn drop(&mut self) {
        zeroize::Zeroize::zeroize(&mut self.0);
    }
}

impl ClientSecret {
    /// Wraps a secret.
    pub fn new(secret: impl Into<String>) -> Self {
        Self(secret.into())
    }

    /// The secret itself, for hashing or for sending to the server.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ClientSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

/// Why an `Authorization: Basic` header could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum BasicError {
    /// Not the `Basic` scheme.
    #[error("authorization scheme is not Basic")]
    NotBasic,
    /// Malformed base64, no colon, an empty id, or malformed form encoding of the parts.
    #[error("malformed Basic credentials")]
    Malformed,
}

/// Client credentials from an `Authorization: Basic` header (RFC 7617).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BasicCredentials {
    /// The client identifier (the user-id).
    pub client_id: ClientId,
    /// The client secret (the password).
    pub client_secret: ClientSecret,
}

impl BasicCredentials {
    /// Parses the value of an `Authorization` header.
    ///
    /// RFC 6749 section 2.3.1 requires the client identifier and the secret to be encoded with
    /// `application/x-www-form-urlencoded` before they are joined with `:` and base64-encoded,
    /// so each part is form-decoded here. A secret made of unreserved characters, as Tessera
    /// generates, is the same either way.
    pub fn from_header(value: &str) -> Result<Self, BasicError> {
        let (scheme, encoded) = value.split_once(' ').ok_or(BasicError::NotBasic)?;
        if !scheme.eq_ignore_ascii_case("basic") {
            return Err(BasicError::NotBasic);
        }
        let decoded = STANDARD
            .decode(encoded.trim())
            .map_err(|_| BasicError::Malformed)?;
        let decoded = String::from_utf8(decoded).map_err(|_| BasicError::Malformed)?;
        let (id, secret) = decoded.split_once(':').ok_or(BasicError::Malformed)?;
        let id = form::decode(id).map_err(|_| BasicError::Malformed)?;
        let secret = form::decode_component(secret).map_err(|_| BasicError::Malformed)?;
        let client_id = ClientId::parse(&id).ok_or(BasicError::Malformed)?;
        Ok(Self {
            client_id,
            client_secret: ClientSecret::new(secret),
        })
    }

    /// Renders the header value, form-encoding both parts first (RFC 6749 section 2.3.1).
    pub fn to_header(&self) -> String {
        let joined = format!(
            "{}:{}",
            form::encode_component(self.client_id.as_str()),
            form::encode_component(self.client_secret.expose())
        );
        format!("Basic {}", STANDARD.encode(joined))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_id_displays_as_itself() {
        let id = ClientId::parse("tc_app").unwrap();
        assert_eq!(id.to_string(), "tc_app");
    }

    #[test]
    fn secret_debug_is_redacted() {
        let secret = ClientSecret::new("hunter2");
        assert_eq!(format!("{secret:?}"), "[redacted]");
        let creds = BasicCredentials {
            client_id: ClientId::parse("app").unwrap(),
            client_secret: secret,
        };
        assert!(!format!("{creds:?}").contains("hunter2"));
    }

    #[test]
    fn basic_parts_are_form_decoded() {
        // "my%3Aapp:s%2Bcr+t" is what a correct client sends for id "my:app", secret "s+cr t".
        let header = format!("Basic {}", STANDARD.encode("my%3Aapp:s%2Bcr+t"));
        let creds = BasicCredentials::from_header(&header).unwrap();
        assert_eq!(creds.client_id.as_str(), "my:app");
        assert_eq!(creds.client_secret.expose(), "s+cr t");
        assert_eq!(creds.to_header(), header);
    }

    #[test]
    fn malformed_basic_is_refused() {
        assert_eq!(
            BasicCredentials::from_header("Bearer x"),
            Err(BasicError::NotBasic)
        );
        for bad in ["Basic !!!", "Basic bm9jb2xvbg==", "Basic OnNlY3JldA=="] {
            assert_eq!(
                BasicCredentials::from_header(bad),
                Err(BasicError::Malformed),
                "{bad}"
            );
        }
    }
}
