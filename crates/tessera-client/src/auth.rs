//! How the client proves who it is to the token endpoint (RFC 6749 section 2.3): with its
//! secret in HTTP Basic (section 2.3.1), with a JWT it signs with its own private key for
//! each request (`private_key_jwt`, RFC 7523 section 2.2), or with a JWT its platform hands
//! it in a file and renews there (a Kubernetes projected service-account token, for one).
//! A client certificate (RFC 8705 section 2) is set apart, on the builder, since it lives in
//! the TLS layer.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use reqwest::header::HeaderValue;
use serde::Serialize;
use serde_json::{json, Map};
use tessera_proto::clock::Timestamp;
use tessera_proto::{BasicCredentials, ClientId, ClientSecret};
use tokio::io::AsyncReadExt;

use crate::dpop::{random_jti, ClientKey};
use crate::error::Error;
use tessera_jose::sha256_b64;

/// `client_assertion_type` of a JWT (RFC 7523 section 2.2).
pub(crate) const JWT_BEARER: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";

/// How long an assertion the client signs is valid: enough for one request and its clock
/// skew, and well inside the 5 minutes Tessera accepts.
const ASSERTION_LIFETIME_SECS: Timestamp = 60;

/// The explicit type of a client authentication JWT (the `application/client-authentication+jwt`
/// media type of RFC 7523bis section 4), so that it is never mistaken for another kind of JWT.
const ASSERTION_TYP: &str = "client-authentication+jwt";

/// The largest assertion file read; a platform token is a few KiB.
const MAX_ASSERTION_FILE: u64 = 64 * 1024;

/// How the client authenticates at the token endpoint: give it to
/// [`TokenClientBuilder::auth`](crate::TokenClientBuilder::auth).
///
/// - [`secret`](Self::secret): HTTP Basic with the client secret (RFC 6749 section 2.3.1),
///   the default, as [`client_secret`](crate::TokenClientBuilder::client_secret) sets it.
/// - [`private_key`](Self::private_key): `private_key_jwt` (RFC 7523 section 2.2); no secret
///   is shared, the server holds only the public key.
/// - [`assertion_file`](Self::assertion_file): a JWT the platform writes to a file and
///   rotates, read again for every token request.
///
/// `Debug` prints the kind, the public key, the `kid` and the path; never a secret or a
/// private key.
#[derive(Clone)]
pub struct ClientAuth(pub(crate) Method);

#[derive(Clone)]
pub(crate) enum Method {
    Secret(ClientSecret),
    PrivateKey { key: ClientKey, kid: Option<String> },
    AssertionFile(PathBuf),
}

impl ClientAuth {
    /// The client secret, sent with HTTP Basic (RFC 6749 section 2.3.1).
    pub fn secret(secret: ClientSecret) -> Self {
        Self(Method::Secret(secret))
    }

    /// `private_key_jwt` (RFC 7523 section 2.2, OpenID Connect Core section 9): every token
    /// request carries a new JWT signed with `key`, with `iss` and `sub` the client id, `aud`
    /// the server's issuer identifier, `jti` 128 random bits, `iat` now by the client's
    /// [`clock`](crate::TokenClientBuilder::clock) and `exp` 60 s later. `kid` names the key
    /// among those the client registered (its JWK Set's `kid`); without one the server tries
    /// each registered key that fits the algorithm.
    ///
    /// The key is a [`ClientKey`]: Ed25519 (`EdDSA`), P-256 (`ES256`) or RSA (`RS256`), read
    /// with [`ClientKey::from_pkcs8_pem`] or [`ClientKey::from_pkcs8`]. Use another key for
    /// DPoP than this one.
    pub fn private_key(key: ClientKey, kid: Option<String>) -> Self {
        Self(Method::PrivateKey { key, kid })
    }

    /// A JWT read from the file at `path` for every token request and sent as
    /// `client_assertion` (RFC 7521 section 4.2), with surrounding white space trimmed: a
    /// token that the platform issues to the workload and rotates in place, such as a
    /// Kubernetes projected service-account token at `/var/run/secrets/tokens/tessera`.
    pub fn assertion_file(path: impl Into<PathBuf>) -> Self {
        Self(Method::AssertionFile(path.into()))
    }
}

impl fmt::Debug for ClientAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Method::Secret(_) => f.write_str("ClientAuth::Secret([redacted])"),
            Method::PrivateKey { key, kid } => f
                .debug_struct("ClientAuth::PrivateKey")
                .field("key", key)
                .field("kid", kid)
                .finish(),
            Method::AssertionFile(path) => f
                .debug_tuple("ClientAuth::AssertionFile")
                .field(path)
                .finish(),
        }
    }
}

/// A [`ClientAuth`] ready for requests.
#[derive(Clone)]
pub(crate) enum Credentials {
    /// `Authorization: Basic`, marked sensitive, and what names the secret in a cache key.
    Basic { header: HeaderValue, digest: String },
    /// Nothing in the request: the TLS client certificate authenticates (RFC 8705 section 2).
    Certificate,
    /// A new assertion for each request.
    Signed(Arc<Signer>),
    /// The assertion in this file, read for each request.
    File(PathBuf),
}

/// What signs the assertions of one client.
pub(crate) struct Signer {
    key: ClientKey,
    kid: Option<String>,
    /// `base64url(header) + "."`: the same on every assertion.
    header_prefix: String,
    client_id: ClientId,
    /// The issuer identifier, the assertions' `aud`.
    audience: String,
}

/// The claims of an assertion (RFC 7523 section 3).
#[derive(Serialize)]
struct Claims<'a> {
    iss: &'a str,
    sub: &'a str,
    aud: &'a str,
    jti: String,
    iat: Timestamp,
    exp: Timestamp,
}

impl Signer {
    /// An assertion made at `now`.
    ///
    /// # Panics
    ///
    /// Only if the operating system's random source fails.
    pub(crate) fn assertion(&self, now: Timestamp) -> String {
        let id = self.client_id.as_str();
        let claims = Claims {
            iss: id,
            sub: id,
            aud: &self.audience,
            jti: random_jti(),
            iat: now,
            exp: now + ASSERTION_LIFETIME_SECS,
        };
        self.key.compact(&self.header_prefix, &claims)
    }
}

impl Credentials {
    /// `auth` for `client_id`, whose assertions name `audience`.
    pub(crate) fn new(auth: ClientAuth, client_id: &ClientId, audience: &str) -> Self {
        match auth.0 {
            Method::Secret(client_secret) => {
                let digest = sha256_b64(client_secret.expose().as_bytes());
                let credentials = BasicCredentials {
                    client_id: client_id.clone(),
                    client_secret,
                };
                // Base64 after "Basic " is visible ASCII, always a valid header value.
                let mut header = HeaderValue::from_str(&credentials.to_header())
                    .expect("a Basic header is visible ASCII");
                header.set_sensitive(true);
                Self::Basic { header, digest }
            }
            Method::PrivateKey { key, kid } => {
                let mut header = Map::new();
                header.insert("typ".into(), json!(ASSERTION_TYP));
                if let Some(kid) = &kid {
                    header.insert("kid".into(), json!(kid));
                }
                Self::Signed(Arc::new(Signer {
                    header_prefix: key.header_prefix(header),
                    key,
                    kid,
                    client_id: client_id.clone(),
                    audience: audience.to_owned(),
                }))
            }
            Method::AssertionFile(path) => Self::File(path),
        }
    }

    /// The `Authorization` header, for a secret.
    pub(crate) fn authorization(&self) -> Option<&HeaderValue> {
        match self {
            Self::Basic { header, .. } => Some(header),
            _ => None,
        }
    }

    /// What tells these credentials from others of the same client in a
    /// [`CacheKey`](crate::CacheKey), revealing none: the SHA-256 of a secret, the RFC 7638
    /// thumbprint of a private key, the path of an assertion file.
    pub(crate) fn fingerprint(&self) -> Option<String> {
        match self {
            Self::Basic { digest, .. } => Some(format!("secret:{digest}")),
            Self::Certificate => None,
            Self::Signed(signer) => Some(format!("private_key_jwt:{}", signer.key.thumbprint())),
            Self::File(path) => Some(format!("assertion_file:{}", path.display())),
        }
    }

    /// The `client_assertion` of one token request, `None` for credentials that have none:
    /// signed at `now`, or read from the file.
    pub(crate) async fn assertion(&self, now: Timestamp) -> Result<Option<String>, Error> {
        match self {
            Self::Signed(signer) => Ok(Some(signer.assertion(now))),
            Self::File(path) => match read_assertion(path).await {
                Ok(assertion) => Ok(Some(assertion)),
                Err(source) => Err(Error::AssertionFile {
                    path: path.clone(),
                    source: Arc::new(source),
                }),
            },
            Self::Basic { .. } | Self::Certificate => Ok(None),
        }
    }
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Basic { .. } => f.write_str("Basic([redacted])"),
            Self::Certificate => f.write_str("Certificate"),
            Self::Signed(signer) => f
                .debug_struct("PrivateKeyJwt")
                .field("key", &signer.key)
                .field("kid", &signer.kid)
                .field("aud", &signer.audience)
                .finish(),
            Self::File(path) => f.debug_tuple("AssertionFile").field(path).finish(),
        }
    }
}

/// The trimmed text of an assertion file: not empty, at most [`MAX_ASSERTION_FILE`] bytes.
async fn read_assertion(path: &Path) -> io::Result<String> {
    let invalid = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_owned());
    let file = tokio::fs::File::open(path).await?;
    let mut bytes = Vec::new();
    file.take(MAX_ASSERTION_FILE + 1)
        .read_to_end(&mut bytes)
        .await?;
    if bytes.len() as u64 > MAX_ASSERTION_FILE {
        return Err(invalid("larger than 64 KiB"));
    }
    let text = String::from_utf8(bytes).map_err(|_| invalid("not UTF-8 text"))?;
    let assertion = text.trim();
    if assertion.is_empty() {
        return Err(invalid("empty"));
    }
    Ok(assertion.to_owned())
}

#[cfg(test)]
mod tests {
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine;
    use serde_json::Value;

    use super::*;

    fn claims(jwt: &str) -> Value {
        let part = |i: usize| {
            let bytes = URL_SAFE_NO_PAD
                .decode(jwt.split('.').nth(i).unwrap())
                .unwrap();
            serde_json::from_slice::<Value>(&bytes).unwrap()
        };
        json!({ "header": part(0), "claims": part(1) })
    }

    #[test]
    fn each_assertion_is_new_and_names_the_client_and_the_issuer() {
        let id = ClientId::parse("tc_app").unwrap();
        let auth = ClientAuth::private_key(ClientKey::generate_p256(), Some("k1".into()));
        let Credentials::Signed(signer) = Credentials::new(auth, &id, "https://auth.example")
        else {
            panic!("a signer")
        };
        let (a, b) = (
            claims(&signer.assertion(1_800_000_000)),
            claims(&signer.assertion(1_800_000_000)),
        );
        assert_eq!(
            a["header"],
            json!({"alg": "ES256", "typ": "client-authentication+jwt", "kid": "k1"})
        );
        let c = &a["claims"];
        assert_eq!(
            (c["iss"].as_str(), c["sub"].as_str()),
            (Some("tc_app"), Some("tc_app"))
        );
        assert_eq!(c["aud"], "https://auth.example");
        assert_eq!(
            (c["iat"].as_i64(), c["exp"].as_i64()),
            (Some(1_800_000_000), Some(1_800_000_060))
        );
        let jti = c["jti"].as_str().unwrap();
        assert_eq!(URL_SAFE_NO_PAD.decode(jti).unwrap().len(), 16);
        assert_ne!(a["claims"]["jti"], b["claims"]["jti"]);
    }

    #[test]
    fn debug_names_the_kind_and_never_the_secret() {
        let secret = ClientAuth::secret(ClientSecret::new("hunter2"));
        let id = ClientId::parse("app").unwrap();
        let printed = format!(
            "{secret:?} {:?}",
            Credentials::new(secret.clone(), &id, "x")
        );
        assert!(!printed.contains("hunter2"), "{printed}");
        assert!(printed.contains("[redacted]"), "{printed}");
        let key = ClientKey::generate_ed25519();
        let printed = format!("{:?}", ClientAuth::private_key(key.clone(), None));
        assert!(printed.contains("[redacted]"), "{printed}");
        assert!(printed.contains(key.public_jwk()["x"].as_str().unwrap()));
        let file = ClientAuth::assertion_file("/var/run/secrets/tokens/tessera");
        assert!(format!("{file:?}").contains("/var/run/secrets/tokens/tessera"));
    }

    #[tokio::test]
    async fn an_assertion_file_is_trimmed_and_must_hold_something() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        let file = Credentials::File(path.clone());
        assert!(matches!(
            file.assertion(0).await,
            Err(Error::AssertionFile { .. })
        ));
        std::fs::write(&path, "  eyJ.a.b\n").unwrap();
        assert_eq!(file.assertion(0).await.unwrap().as_deref(), Some("eyJ.a.b"));
        std::fs::write(&path, " \n").unwrap();
        let empty = file.assertion(0).await.unwrap_err();
        assert!(with_sources(&empty).contains("empty"), "{empty:?}");
        std::fs::write(&path, vec![b'a'; MAX_ASSERTION_FILE as usize + 1]).unwrap();
        assert!(file.assertion(0).await.is_err());
    }

    /// The error and its sources, as one line.
    fn with_sources(error: &dyn std::error::Error) -> String {
        let mut out = error.to_string();
        let mut source = error.source();
        while let Some(s) = source {
            out.push_str(": ");
            out.push_str(&s.to_string());
            source = s.source();
        }
        out
    }
}
