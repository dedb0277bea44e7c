//! Single sign-on for the console (issue 29): people sign in through the company's OpenID
//! Connect provider, with the authorization code flow (RFC 6749 section 4.1, OpenID Connect
//! Core 1.0 section 3.1), PKCE with `S256` (RFC 7636), `state` bound to the browser by a
//! cookie, and `nonce` bound to the ID token.
//!
//! - `GET /console/sign-in/sso` starts: the provider's discovery document (OpenID Connect
//!   Discovery 1.0 section 4) names its endpoints; a fresh `state`, `nonce` and code verifier
//!   are kept here, server-side, under the `state`, which also goes to the browser in a
//!   cookie (`SameSite=Lax`, so that it comes back with the provider's redirect); the browser
//!   is sent to the authorization endpoint.
//! - `GET /console/sign-in/sso/callback` ends: the `state` must be the cookie's and one kept
//!   here (taken, so used once); the code is exchanged at the token endpoint with the
//!   verifier and the console's client secret; the ID token is verified against the
//!   provider's keys (signature, `iss`, `aud`, `azp`, `exp`, `iat`, `nonce`; Core section
//!   3.1.3.7); the role claim must name the admin or the read group. Then a session starts
//!   whose calls name the [`Person`].
//!
//! The discovery document, the key set and the code exchange go through [`Fetcher`], under
//! the rules of every outbound fetch (`https`, public addresses unless
//! `--allow-private-jwks-uri`, no redirects, bounded time and size). The document and the
//! keys are kept an hour; an unknown `kid` fetches the keys again at most every 30 s; a failed
//! fetch is not tried again for 30 s, so that people pressing "sign in" cannot make Tessera
//! hammer a provider that is down.

use std::collections::HashMap;
use std::sync::Mutex;

use serde_json::{Map, Value};
use tessera_proto::clock::Timestamp;
use tessera_proto::jwk::{public_keys, PublicJwk};
use tessera_proto::Algorithm;
use zeroize::Zeroizing;

use crate::config::Config;
use crate::control::admin::auth::Person;
use crate::fetch::{FetchError, Fetcher};

/// Where the provider sends the browser back to, under the console's public URL.
pub(crate) const CALLBACK_PATH: &str = "/console/sign-in/sso/callback";
/// The cookie that binds a sign-in's `state` to the browser that started it.
pub(super) const STATE_COOKIE: &str = "tessera_console_sso";
/// How long a started sign-in may take at the provider, in seconds.
pub(super) const PENDING_LIFETIME: i64 = 600;
/// The most sign-ins under way at once; past it the oldest is forgotten.
const MAX_PENDING: usize = 10_000;
/// How long the discovery document and the keys are used before they are fetched again.
const KEEP_SECS: i64 = 3600;
/// The least time between two fetches of the keys for an unknown `kid`, and after a failure.
const RETRY_SECS: i64 = 30;
/// The clock difference allowed on `exp` and `iat`.
const LEEWAY_SECS: i64 = 60;
/// The longest ID token read.
const MAX_ID_TOKEN: usize = 16 * 1024;
/// The algorithms an ID token may be signed with (RS256 is the one every provider offers,
/// Core section 15.1).
const ALGORITHMS: [Algorithm; 4] = [
    Algorithm::RS256,
    Algorithm::PS256,
    Algorithm::ES256,
    Algorithm::EdDSA,
];

/// The console's single sign-on, as configured, and what it has learnt of the provider.
pub(crate) struct Sso {
    issuer: String,
    client_id: String,
    secret: Zeroizing<String>,
    role_claim: String,
    admin_group: Option<String>,
    read_group: Option<String>,
    redirect_uri: String,
    http: Fetcher,
    /// The discovery document; held while it is fetched, so one fetch at a time.
    provider: tokio::sync::Mutex<Fetched<Provider>>,
    /// The provider's keys, likewise.
    keys: tokio::sync::Mutex<Fetched<Vec<PublicJwk>>>,
    /// The sign-ins under way, by the SHA-256 of their `state`.
    pending: Mutex<HashMap<[u8; 32], Pending>>,
}

impl std::fmt::Debug for Sso {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sso")
            .field("issuer", &self.issuer)
            .field("client_id", &self.client_id)
            .field("secret", &"[redacted]")
            .finish_non_exhaustive()
    }
}

/// A fetched value, when it was fetched, and when a fetch last failed.
struct Fetched<T> {
    value: Option<(T, Timestamp)>,
    failed_at: Option<Timestamp>,
}

impl<T> Default for Fetched<T> {
    fn default() -> Self {
        Self {
            value: None,
            failed_at: None,
        }
    }
}

/// What the discovery document says that the sign-in uses.
#[derive(Debug, Clone)]
pub(super) struct Provider {
    authorization_endpoint: String,
    token_endpoint: String,
    jwks_uri: String,
    /// Whether the client authenticates with HTTP Basic (`client_secret_basic`, the default
    /// of Discovery section 3) rather than in the form (`client_secret_post`).
    basic: bool,
}

/// A sign-in under way.
struct Pending {
    nonce: String,
    verifier: Zeroizing<String>,
    started: Timestamp,
}

/// A sign-in started: where to send the browser, and the `state` for its cookie.
#[derive(Debug)]
pub(super) struct Started {
    pub(super) location: String,
    pub(super) state: String,
}

/// Why a sign-in did not go through, as the sign-in page says it. Never any part of a
/// token, a code or the secret.
#[derive(Debug, thiserror::Error)]
pub(super) enum SsoError {
    #[error("the sign-in provider could not be reached ({0}); try again later")]
    Provider(String),
    #[error("the sign-in provider refused: {0}")]
    Refused(String),
    #[error(
        "this sign-in does not belong to this browser (its state differs, or it expired or \
         was used already): start again"
    )]
    State,
    #[error("the provider's answer lacks the authorization code")]
    NoCode,
    #[error("the provider did not accept the authorization code ({0})")]
    Exchange(String),
    #[error("the ID token was refused: {0}")]
    IdToken(#[from] IdTokenError),
    #[error(
        "your account is in neither the console's admin group nor its read group: ask an \
         administrator"
    )]
    NoRole,
}

/// Why an ID token was refused (OpenID Connect Core section 3.1.3.7).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum IdTokenError {
    #[error("it is not a signed JWT of an accepted algorithm")]
    Malformed,
    #[error("no key of the provider verifies its signature")]
    Signature,
    #[error("it was issued by another issuer")]
    Issuer,
    #[error("it was issued for another client")]
    Audience,
    #[error("it has expired")]
    Expired,
    #[error("it lacks iat, or was issued in the future")]
    IssuedAt,
    #[error("its nonce is not this sign-in's")]
    Nonce,
    #[error("it names no subject")]
    Subject,
}

/// What an ID token must be to be accepted.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Expected<'a> {
    pub(crate) issuer: &'a str,
    pub(crate) client_id: &'a str,
    pub(crate) nonce: &'a str,
    pub(crate) now: Timestamp,
}

/// Verifies an ID token (OpenID Connect Core section 3.1.3.7): a JWS (RFC 7515) whose
/// signature one of `keys` verifies (the key `kid` names, else any that fits the `alg`),
/// then `iss` exactly the issuer (step 2), `aud` the client or an array holding it, with
/// `azp` the client if present and required with several audiences (steps 3 to 5), `exp` not passed (step 9), `iat` present and
/// not in the future (step 10), `nonce` this sign-in's (step 11), and a `sub`. Returns the
/// claims.
pub(crate) fn verify_id_token(
    token: &str,
    keys: &[PublicJwk],
    expected: Expected<'_>,
) -> Result<Map<String, Value>, IdTokenError> {
    let jws = tessera_proto::jws::parse_assertion(token, MAX_ID_TOKEN, &ALGORITHMS)
        .map_err(|_| IdTokenError::Malformed)?;
    let verified = keys
        .iter()
        .filter(|k| jws.kid.is_none() || k.kid == jws.kid)
        .filter(|k| k.alg.as_deref().is_none_or(|a| a == jws.alg.as_str()))
        .filter(|k| k.key.fits(jws.alg))
        .any(|k| {
            tessera_jose::verify_signature(&k.key, jws.alg, jws.signing_input, &jws.signature)
        });
    if !verified {
        return Err(IdTokenError::Signature);
    }
    let claims: Map<String, Value> =
        tessera_proto::jws::decode_claims(&jws.payload).ok_or(IdTokenError::Malformed)?;
    if claims.get("iss").and_then(Value::as_str) != Some(expected.issuer) {
        return Err(IdTokenError::Issuer);
    }
    let audience_ok = match claims.get("aud") {
        Some(Value::String(aud)) => aud == expected.client_id,
        Some(Value::Array(auds)) => auds.iter().any(|a| a.as_str() == Some(expected.client_id)),
        _ => false,
    };
    // Several audiences: `azp` must name this client (Core section 3.1.3.7 steps 4, 5).
    let several = claims
        .get("aud")
        .and_then(Value::as_array)
        .is_some_and(|a| a.len() > 1);
    let azp_ok = match claims.get("azp") {
        Some(azp) => azp.as_str() == Some(expected.client_id),
        None => !several,
    };
    if !audience_ok || !azp_ok {
        return Err(IdTokenError::Audience);
    }
    match claims.get("exp").and_then(Value::as_i64) {
        Some(exp) if exp + LEEWAY_SECS > expected.now => {}
        _ => return Err(IdTokenError::Expired),
    }
    match claims.get("iat").and_then(Value::as_i64) {
        Some(iat) if iat <= expected.now + LEEWAY_SECS => {}
        _ => return Err(IdTokenError::IssuedAt),
    }
    let nonce = claims.get("nonce").and_then(Value::as_str).unwrap_or("");
    if nonce.is_empty() || !super::session::same(nonce, expected.nonce) {
        return Err(IdTokenError::Nonce);
    }
    match claims.get("sub").and_then(Value::as_str) {
        Some(sub) if !sub.is_empty() && sub.len() <= 255 => Ok(claims),
        _ => Err(IdTokenError::Subject),
    }
}

/// The values of the claim at `path` (dots read into objects): a string, or the strings of
/// an array.
fn claim_values<'c>(claims: &'c Map<String, Value>, path: &str) -> Vec<&'c str> {
    let mut parts = path.split('.');
    let first = parts.next().unwrap_or_default();
    let mut value = claims.get(first);
    for part in parts {
        value = value.and_then(|v| v.get(part));
    }
    match value {
        Some(Value::String(one)) => vec![one.as_str()],
        Some(Value::Array(many)) => many.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

/// A string claim, bounded, if present and not empty.
fn text_claim(claims: &Map<String, Value>, name: &str) -> Option<String> {
    claims
        .get(name)
        .and_then(Value::as_str)
        .filter(|v| !v.is_empty())
        .map(|v| v.chars().take(128).collect())
}

impl Sso {
    /// The single sign-on `config` sets up for a console at `issuer` (its public URL), its
    /// client secret read from its file; `None` when it sets none up.
    pub(crate) fn from_config(config: &Config, issuer: &str) -> Result<Option<Self>, String> {
        let Some(provider) = &config.console_oidc_issuer else {
            return Ok(None);
        };
        let path = config
            .console_oidc_client_secret_file
            .as_ref()
            .ok_or("--console-oidc-client-secret-file is needed with --console-oidc-issuer")?;
        let secret = Zeroizing::new(
            std::fs::read_to_string(path)
                .map_err(|e| {
                    format!(
                        "cannot read --console-oidc-client-secret-file {}: {e}",
                        path.display()
                    )
                })?
                .trim()
                .to_owned(),
        );
        if secret.is_empty() {
            return Err(format!(
                "--console-oidc-client-secret-file {} is empty",
                path.display()
            ));
        }
        Ok(Some(Self {
            issuer: provider.clone(),
            client_id: config.console_oidc_client_id.clone().unwrap_or_default(),
            secret,
            role_claim: config.console_oidc_role_claim.clone(),
            admin_group: config.console_admin_group.clone(),
            read_group: config.console_read_group.clone(),
            redirect_uri: format!("{}{CALLBACK_PATH}", issuer.trim_end_matches('/')),
            http: Fetcher::new(config.allow_private_jwks_uri),
            provider: Default::default(),
            keys: Default::default(),
            pending: Mutex::default(),
        }))
    }

    /// The discovery document: the one held if younger than an hour, else fetched (not
    /// within 30 s of a failure).
    async fn provider(&self, now: Timestamp) -> Result<Provider, SsoError> {
        let mut held = self.provider.lock().await;
        if let Some((provider, at)) = &held.value {
            if now - at < KEEP_SECS {
                return Ok(provider.clone());
            }
        }
        if held.failed_at.is_some_and(|at| now - at < RETRY_SECS) {
            return match &held.value {
                Some((provider, _)) => Ok(provider.clone()),
                None => Err(SsoError::Provider(
                    "its discovery failed moments ago".into(),
                )),
            };
        }
        match self.discover().await {
            Ok(provider) => {
                held.value = Some((provider.clone(), now));
                held.failed_at = None;
                Ok(provider)
            }
            Err(e) => {
                held.failed_at = Some(now);
                tracing::warn!(issuer = %self.issuer, error = %e, "console sign-in: the provider's discovery failed");
                match &held.value {
                    Some((provider, _)) => Ok(provider.clone()),
                    None => Err(e),
                }
            }
        }
    }

    /// Fetches and reads the discovery document (Discovery section 4): its `issuer` must be
    /// the one configured (section 4.3).
    async fn discover(&self) -> Result<Provider, SsoError> {
        let url = format!(
            "{}/.well-known/openid-configuration",
            self.issuer.trim_end_matches('/')
        );
        let failed = |e: FetchError| SsoError::Provider(format!("discovery: {e}"));
        let body = self.http.get(&url).await.map_err(failed)?;
        let document: Value = serde_json::from_slice(&body)
            .map_err(|_| SsoError::Provider("discovery: not a JSON document".into()))?;
        if document["issuer"].as_str() != Some(self.issuer.as_str()) {
            return Err(SsoError::Provider(
                "discovery: the document names another issuer".into(),
            ));
        }
        let endpoint = |name: &str| {
            document[name]
                .as_str()
                .filter(|u| u.starts_with("https://") || u.starts_with("http://"))
                .map(str::to_owned)
                .ok_or_else(|| SsoError::Provider(format!("discovery: no {name}")))
        };
        let methods = document["token_endpoint_auth_methods_supported"].as_array();
        let offers = |m: &str| methods.is_none_or(|ms| ms.iter().any(|v| v.as_str() == Some(m)));
        Ok(Provider {
            authorization_endpoint: endpoint("authorization_endpoint")?,
            token_endpoint: endpoint("token_endpoint")?,
            jwks_uri: endpoint("jwks_uri")?,
            basic: offers("client_secret_basic") || !offers("client_secret_post"),
        })
    }

    /// The provider's keys: those held if younger than an hour, unless `again` (a token
    /// named a key they lack) and the last fetch is over 30 s old.
    async fn keys(
        &self,
        provider: &Provider,
        now: Timestamp,
        again: bool,
    ) -> Result<Vec<PublicJwk>, SsoError> {
        let mut held = self.keys.lock().await;
        if let Some((keys, at)) = &held.value {
            let fresh = now - at < KEEP_SECS && !(again && now - at >= RETRY_SECS);
            if fresh {
                return Ok(keys.clone());
            }
        }
        if held.failed_at.is_some_and(|at| now - at < RETRY_SECS) {
            return match &held.value {
                Some((keys, _)) => Ok(keys.clone()),
                None => Err(SsoError::Provider("its keys failed moments ago".into())),
            };
        }
        match self.http.get(&provider.jwks_uri).await {
            Ok(body) => {
                let keys = public_keys(&String::from_utf8_lossy(&body));
                held.value = Some((keys.clone(), now));
                held.failed_at = None;
                Ok(keys)
            }
            Err(e) => {
                held.failed_at = Some(now);
                tracing::warn!(issuer = %self.issuer, error = %e, "console sign-in: the provider's keys could not be fetched");
                match &held.value {
                    Some((keys, _)) => Ok(keys.clone()),
                    None => Err(SsoError::Provider(format!("keys: {e}"))),
                }
            }
        }
    }

    /// Starts a sign-in: a fresh `state`, `nonce` and PKCE verifier, kept here, and the
    /// authorization request (Core section 3.1.2.1, RFC 7636 section 4.3) to send the
    /// browser to.
    pub(super) async fn start(&self, now: Timestamp) -> Result<Started, SsoError> {
        let provider = self.provider(now).await?;
        let state = super::session::random_token();
        let nonce = super::session::random_token();
        let verifier = Zeroizing::new(super::session::random_token());
        let challenge = tessera_jose::sha256_b64(verifier.as_bytes());
        {
            let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
            pending.retain(|_, p| now - p.started < PENDING_LIFETIME);
            if pending.len() >= MAX_PENDING {
                let oldest = pending
                    .iter()
                    .min_by_key(|(_, p)| p.started)
                    .map(|(k, _)| *k);
                if let Some(oldest) = oldest {
                    pending.remove(&oldest);
                }
            }
            pending.insert(
                key(&state),
                Pending {
                    nonce: nonce.clone(),
                    verifier,
                    started: now,
                },
            );
        }
        let enc = tessera_proto::form::encode_component;
        let query = [
            ("response_type", "code"),
            ("client_id", self.client_id.as_str()),
            ("redirect_uri", self.redirect_uri.as_str()),
            ("scope", "openid profile email"),
            ("state", state.as_str()),
            ("nonce", nonce.as_str()),
            ("code_challenge", challenge.as_str()),
            ("code_challenge_method", "S256"),
        ]
        .iter()
        .map(|(k, v)| format!("{k}={}", enc(v)))
        .collect::<Vec<_>>()
        .join("&");
        let separator = if provider.authorization_endpoint.contains('?') {
            '&'
        } else {
            '?'
        };
        Ok(Started {
            location: format!("{}{separator}{query}", provider.authorization_endpoint),
            state,
        })
    }

    /// Ends a sign-in from the provider's redirect (`query`, Core section 3.1.2.5): the
    /// `state` must be `cookie` and one under way (it is used up); the code is exchanged
    /// (RFC 6749 section 4.1.3, RFC 7636 section 4.5) and the ID token verified; the person
    /// must be in a group.
    pub(super) async fn finish(
        &self,
        query: &[(String, String)],
        cookie: Option<&str>,
        now: Timestamp,
    ) -> Result<Person, SsoError> {
        let param = |name: &str| super::field(query, name).filter(|v| !v.is_empty());
        let state = param("state").unwrap_or_default();
        let matches = cookie.is_some_and(|c| !state.is_empty() && super::session::same(state, c));
        // Taken whatever follows, so a state is used once.
        let pending = {
            let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
            if matches {
                pending.remove(&key(state))
            } else {
                None
            }
        };
        if let Some(error) = param("error") {
            let error: String = error
                .chars()
                .filter(|c| c.is_ascii_graphic())
                .take(64)
                .collect();
            return Err(SsoError::Refused(error));
        }
        let pending = pending
            .filter(|p| now - p.started < PENDING_LIFETIME)
            .ok_or(SsoError::State)?;
        let code = param("code").ok_or(SsoError::NoCode)?;
        let provider = self.provider(now).await?;
        let id_token = self.exchange(&provider, code, &pending.verifier).await?;
        let expected = Expected {
            issuer: &self.issuer,
            client_id: &self.client_id,
            nonce: &pending.nonce,
            now,
        };
        let keys = self.keys(&provider, now, false).await?;
        let claims = match verify_id_token(&id_token, &keys, expected) {
            Err(IdTokenError::Signature) => {
                let keys = self.keys(&provider, now, true).await?;
                verify_id_token(&id_token, &keys, expected)?
            }
            other => other?,
        };
        let groups = claim_values(&claims, &self.role_claim);
        let is_in = |group: &Option<String>| group.as_deref().is_some_and(|g| groups.contains(&g));
        let write = if is_in(&self.admin_group) {
            true
        } else if is_in(&self.read_group) {
            false
        } else {
            return Err(SsoError::NoRole);
        };
        Ok(Person {
            issuer: self.issuer.clone(),
            subject: text_claim(&claims, "sub").unwrap_or_default(),
            name: text_claim(&claims, "name").or_else(|| text_claim(&claims, "preferred_username")),
            email: text_claim(&claims, "email"),
            write,
        })
    }

    /// The code exchange at the token endpoint; the ID token of its answer.
    async fn exchange(
        &self,
        provider: &Provider,
        code: &str,
        verifier: &str,
    ) -> Result<String, SsoError> {
        let enc = tessera_proto::form::encode_component;
        let mut form = format!(
            "grant_type=authorization_code&code={}&redirect_uri={}&code_verifier={}",
            enc(code),
            enc(&self.redirect_uri),
            enc(verifier)
        );
        // RFC 6749 section 2.3.1: the id and secret are form-encoded, then put in Basic.
        let (id, secret) = (
            Zeroizing::new(enc(&self.client_id)),
            Zeroizing::new(enc(&self.secret)),
        );
        let basic = if provider.basic {
            Some((id.as_str(), secret.as_str()))
        } else {
            form.push_str(&format!(
                "&client_id={}&client_secret={}",
                id.as_str(),
                secret.as_str()
            ));
            None
        };
        let form = Zeroizing::new(form);
        let body = self
            .http
            .post_form(&provider.token_endpoint, basic, &form)
            .await
            .map_err(|e| match e {
                FetchError::Status(status) => SsoError::Exchange(format!("it answered {status}")),
                other => SsoError::Provider(format!("token endpoint: {other}")),
            })?;
        let answer: Value = serde_json::from_slice(&body)
            .map_err(|_| SsoError::Exchange("its answer is not JSON".into()))?;
        answer["id_token"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| SsoError::Exchange("its answer holds no ID token".into()))
    }
}

/// The key a sign-in under way is kept under: the SHA-256 of its `state`.
fn key(state: &str) -> [u8; 32] {
    let mut key = [0; 32];
    key.copy_from_slice(
        aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, state.as_bytes()).as_ref(),
    );
    key
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine;
    use serde_json::json;
    use tessera_jose::KeyPair;

    fn sign(pair: &KeyPair, kid: &str, claims: &Value) -> String {
        let mut header = Map::new();
        header.insert("kid".into(), json!(kid));
        header.insert("typ".into(), json!("JWT"));
        let prefix = pair.header_prefix(header);
        pair.sign_compact(&prefix, claims.to_string().as_bytes())
    }

    fn claims() -> Value {
        json!({ "iss": "https://idp.example", "aud": "console", "sub": "ada",
                "exp": 1_000 + 300, "iat": 1_000, "nonce": "n-1", "groups": ["ops"] })
    }

    fn expected() -> Expected<'static> {
        Expected {
            issuer: "https://idp.example",
            client_id: "console",
            nonce: "n-1",
            now: 1_000,
        }
    }

    #[test]
    fn an_id_token_is_checked_claim_by_claim() {
        let pair = KeyPair::generate(Algorithm::RS256);
        let keys = public_keys(&json!({ "keys": [pair.public_jwk("k1")] }).to_string());
        let good = sign(&pair, "k1", &claims());
        let verified = verify_id_token(&good, &keys, expected()).unwrap();
        assert_eq!(claim_values(&verified, "groups"), ["ops"]);
        let with = |name: &str, value: Value| {
            let mut c = claims();
            c[name] = value;
            sign(&pair, "k1", &c)
        };
        let cases = [
            (
                with("iss", json!("https://evil.example")),
                IdTokenError::Issuer,
            ),
            (with("aud", json!("other")), IdTokenError::Audience),
            (
                with("aud", json!(["other", "console"])),
                IdTokenError::Audience,
            ),
            (with("exp", json!(1_000 - 61)), IdTokenError::Expired),
            (with("iat", json!(1_000 + 61)), IdTokenError::IssuedAt),
            (with("nonce", json!("n-2")), IdTokenError::Nonce),
            (with("sub", json!("")), IdTokenError::Subject),
        ];
        for (token, error) in cases {
            assert_eq!(
                verify_id_token(&token, &keys, expected()).unwrap_err(),
                error
            );
        }
        let mut many = claims();
        many["aud"] = json!(["other", "console"]);
        many["azp"] = json!("console");
        assert!(verify_id_token(&sign(&pair, "k1", &many), &keys, expected()).is_ok());
        // Another key, a tampered payload, alg none.
        let other = KeyPair::generate(Algorithm::RS256);
        assert_eq!(
            verify_id_token(&sign(&other, "k1", &claims()), &keys, expected()).unwrap_err(),
            IdTokenError::Signature
        );
        let mut parts: Vec<String> = good.split('.').map(str::to_owned).collect();
        let mut forged = claims();
        forged["groups"] = json!(["admins"]);
        parts[1] = URL_SAFE_NO_PAD.encode(forged.to_string());
        assert_eq!(
            verify_id_token(&parts.join("."), &keys, expected()).unwrap_err(),
            IdTokenError::Signature
        );
        let none = format!(
            "{}.{}.",
            URL_SAFE_NO_PAD.encode(r#"{"alg":"none"}"#),
            URL_SAFE_NO_PAD.encode(claims().to_string())
        );
        assert_eq!(
            verify_id_token(&none, &keys, expected()).unwrap_err(),
            IdTokenError::Malformed
        );
    }

    #[test]
    fn a_role_claim_may_be_a_string_an_array_or_a_path() {
        let claims = json!({ "groups": "ops", "realm_access": { "roles": ["a", "b", 3] } });
        let claims = claims.as_object().unwrap();
        assert_eq!(claim_values(claims, "groups"), ["ops"]);
        assert_eq!(claim_values(claims, "realm_access.roles"), ["a", "b"]);
        assert!(claim_values(claims, "missing.path").is_empty());
    }

    #[test]
    fn the_audit_trail_names_the_person_by_name_email_subject_and_issuer() {
        let person = Person {
            issuer: "https://idp.example".into(),
            subject: "248289761001".into(),
            name: Some("Ada Lovelace".into()),
            email: Some("ada@example.com".into()),
            write: true,
        };
        assert_eq!(
            person.actor(),
            "Ada Lovelace <ada@example.com> (sub 248289761001 at https://idp.example)"
        );
    }
}
