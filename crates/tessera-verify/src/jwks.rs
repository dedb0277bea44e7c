//! The issuer's public keys: parsed once from the JWK Set (RFC 7517 section 5), cached, and
//! refreshed under two rules that keep the issuer safe from this verifier:
//!
//! - at most one fetch per `min_refresh_interval`, however many unknown `kid`s arrive, and
//!   never two at once (a single flight behind one lock);
//! - a failed fetch keeps the cached keys, so a down issuer does not stop verification.
//!
//! Keys older than `cache_lifetime` are refreshed in the background while still in use.
//!
//! Keys travel over https, or over plain http only to this machine unless the builder says
//! otherwise: every signature is checked against them, so whoever can rewrite the answer can
//! forge tokens ([`transport`]).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use tessera_proto::Clock;

use serde::de::DeserializeOwned;
use serde::Deserialize;
use tessera_proto::jws::is_reasonable_kid;
use tessera_proto::{Algorithm, Jwk, PublicKey};

use crate::error::KeySourceError;

/// The largest metadata or JWKS document read. A set of a few keys is about 1 KiB.
const MAX_DOCUMENT: usize = 64 * 1024;

/// A public key ready to verify, and the one algorithm it may be used with.
#[derive(Debug)]
pub(crate) struct VerifyingKey {
    pub alg: Algorithm,
    /// The `kid` it was published under, so that a cached token can find its key again.
    pub kid: String,
    /// Parsed once here, which validates the point and spares it on every verification.
    key: tessera_jose::VerifyingKey,
}

impl VerifyingKey {
    /// Builds a key from a JWK, or `None` when the JWK is not one this verifier uses: RFC 7517
    /// section 5 asks to ignore keys that are not understood. The JWK's `kty`, `crv` and `alg`
    /// must agree (RFC 8037 section 2, RFC 7518 sections 6.2 and 6.3), so a token's `alg` is
    /// matched against a key whose type cannot be reinterpreted; an RSA key has at least 2048
    /// bits.
    pub(crate) fn from_jwk(jwk: &Jwk) -> Option<Self> {
        if jwk.use_ != "sig" || !is_reasonable_kid(&jwk.kid) {
            return None;
        }
        let alg: Algorithm = jwk.alg.parse().ok()?;
        let key = tessera_jose::VerifyingKey::new(&PublicKey::of(jwk)?, alg)?;
        Some(Self {
            alg,
            kid: jwk.kid.clone(),
            key,
        })
    }

    /// Whether `other` is this key: the same `kid`, algorithm and public key bytes, as when
    /// a refresh publishes a key again.
    pub(crate) fn same_as(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
            || (self.kid == other.kid
                && self.alg == other.alg
                && self.key.public_bytes() == other.key.public_bytes())
    }

    /// Whether `signature` is this key's signature of `message`.
    pub(crate) fn verify(&self, message: &[u8], signature: &[u8]) -> bool {
        self.key.verify(message, signature)
    }
}

/// The usable keys of one JWK Set, by `kid`.
#[derive(Debug, Default)]
pub(crate) struct KeySet {
    /// Shared with the verified tokens cached under each key (`crate::token_cache`).
    by_kid: HashMap<String, Arc<VerifyingKey>>,
}

impl KeySet {
    /// The usable keys among `jwks`; the first of two keys with one `kid` wins.
    pub(crate) fn new<'a>(jwks: impl IntoIterator<Item = &'a Jwk>) -> Self {
        let mut by_kid = HashMap::new();
        for jwk in jwks {
            match VerifyingKey::from_jwk(jwk) {
                Some(key) => {
                    by_kid.entry(jwk.kid.clone()).or_insert(Arc::new(key));
                }
                None => tracing::debug!(kid = %jwk.kid, kty = %jwk.kty, "JWK ignored"),
            }
        }
        Self { by_kid }
    }

    pub(crate) fn get(&self, kid: &str) -> Option<&Arc<VerifyingKey>> {
        self.by_kid.get(kid)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.by_kid.is_empty()
    }

    pub(crate) fn len(&self) -> usize {
        self.by_kid.len()
    }
}

/// Where keys come from and how often they may be fetched.
#[derive(Debug)]
pub(crate) struct Remote {
    pub client: reqwest::Client,
    pub issuer: String,
    /// Set up front by the builder, or learned from the metadata on the first fetch.
    pub jwks_uri: Option<String>,
    pub min_refresh_interval: Duration,
    pub cache_lifetime: Duration,
    /// Measures the refresh interval and the cache lifetime.
    pub clock: Clock,
    /// Plain http to a host that is not loopback is allowed (`allow_insecure_http`).
    pub allow_insecure_http: bool,
}

/// How a metadata or key set URL would be fetched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transport {
    /// `https://`.
    Https,
    /// `http://` to `localhost`, 127.0.0.0/8 or `::1`: the traffic never leaves the machine.
    LoopbackHttp,
    /// `http://` to any other host: anyone on the path can read and rewrite it.
    RemoteHttp,
    /// Not an http or https URL.
    NotHttp,
}

/// Classifies `url`. It is parsed by the same parser the HTTP client uses (`reqwest::Url`),
/// so the host judged here is the host connected to: `http://127.0.0.1@evil.example/` is
/// `evil.example`, and `http://127.1/` is 127.0.0.1. Names other than `localhost` are not
/// resolved: `127.0.0.1.example` may point anywhere tomorrow, so it counts as remote.
pub(crate) fn transport(url: &str) -> Transport {
    let Ok(url) = reqwest::Url::parse(url) else {
        return Transport::NotHttp;
    };
    // `host_str` writes an IPv6 address in brackets.
    let host = url
        .host_str()
        .map(|h| h.trim_start_matches('[').trim_end_matches(']'));
    let loopback = host.is_some_and(|h| {
        h.eq_ignore_ascii_case("localhost") || h.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
    });
    match url.scheme() {
        "https" if host.is_some() => Transport::Https,
        "http" if loopback => Transport::LoopbackHttp,
        "http" if host.is_some() => Transport::RemoteHttp,
        _ => Transport::NotHttp,
    }
}

/// The members of the RFC 8414 metadata a verifier reads. RFC 8414 section 2 makes most
/// members optional, and another server's document need not carry what Tessera serves, so
/// this reads only the two used here and ignores the rest (the full type,
/// [`tessera_proto::AuthorizationServerMetadata`], is what the server writes).
#[derive(Deserialize)]
struct Metadata {
    issuer: String,
    jwks_uri: String,
}

#[derive(Debug, Default)]
struct Snapshot {
    keys: Arc<KeySet>,
    /// When `keys` were fetched (the clock's monotonic reading); `None` before the first
    /// success.
    fetched_at: Option<Duration>,
    /// When the last fetch started, successful or not: the rate limit counts attempts.
    attempted_at: Option<Duration>,
}

/// The key cache. Static key sets have no [`Remote`] and never refresh.
#[derive(Debug)]
pub(crate) struct KeyCache {
    snapshot: RwLock<Snapshot>,
    remote: Option<Remote>,
    /// The single flight: held for the whole of a fetch; holds the `jwks_uri` once known.
    fetch: tokio::sync::Mutex<Option<String>>,
    /// A background refresh is scheduled or running; spares spawning one per request.
    background: AtomicBool,
}

impl KeyCache {
    pub(crate) fn fixed(keys: KeySet) -> Self {
        Self {
            snapshot: RwLock::new(Snapshot {
                keys: Arc::new(keys),
                ..Snapshot::default()
            }),
            remote: None,
            fetch: tokio::sync::Mutex::new(None),
            background: AtomicBool::new(false),
        }
    }

    pub(crate) fn remote(remote: Remote) -> Self {
        let jwks_uri = remote.jwks_uri.clone();
        Self {
            snapshot: RwLock::default(),
            remote: Some(remote),
            fetch: tokio::sync::Mutex::new(jwks_uri),
            background: AtomicBool::new(false),
        }
    }

    /// The current keys. Also schedules a background refresh when they are older than the
    /// cache lifetime and the rate limit allows, without waiting for it.
    pub(crate) fn current(self: &Arc<Self>) -> Arc<KeySet> {
        let (keys, stale) = {
            let s = self.snapshot.read().unwrap_or_else(PoisonError::into_inner);
            let stale = match (&self.remote, s.fetched_at) {
                (Some(r), Some(at)) => {
                    r.clock.elapsed().saturating_sub(at) >= r.cache_lifetime && self.may_fetch(&s)
                }
                _ => false,
            };
            (s.keys.clone(), stale)
        };
        if stale && !self.background.swap(true, Ordering::AcqRel) {
            let cache = Arc::clone(self);
            tokio::spawn(async move {
                // The outcome is logged; on failure the cached keys stay.
                let _ = cache.refresh(false).await;
                cache.background.store(false, Ordering::Release);
            });
        }
        keys
    }

    /// The keys after a refresh for a `kid` not in the cache, or the cached keys when the rate
    /// limit says no. Waits for a fetch already in flight, so a new key published during it is
    /// found.
    pub(crate) async fn after_unknown_kid(&self) -> Arc<KeySet> {
        let _ = self.refresh(false).await;
        self.snapshot().keys.clone()
    }

    /// Fetches the key set if `force` or the rate limit allows, and stores it on success.
    pub(crate) async fn refresh(&self, force: bool) -> Result<(), KeySourceError> {
        let Some(remote) = &self.remote else {
            return Ok(());
        };
        let mut jwks_uri = self.fetch.lock().await;
        {
            // Checked under the lock: whoever held it before us may just have fetched.
            let mut s = self
                .snapshot
                .write()
                .unwrap_or_else(PoisonError::into_inner);
            if !force && !self.may_fetch(&s) {
                return Ok(());
            }
            s.attempted_at = Some(remote.clock.elapsed());
        }
        let result = fetch(remote, &mut jwks_uri).await;
        match result {
            Ok(keys) => {
                let mut s = self
                    .snapshot
                    .write()
                    .unwrap_or_else(PoisonError::into_inner);
                s.keys = Arc::new(keys);
                s.fetched_at = Some(remote.clock.elapsed());
                tracing::debug!("JWKS refreshed");
                Ok(())
            }
            Err(e) => {
                tracing::warn!(error = %e, "JWKS refresh failed; keeping the cached keys");
                Err(e)
            }
        }
    }

    fn snapshot(&self) -> std::sync::RwLockReadGuard<'_, Snapshot> {
        self.snapshot.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn may_fetch(&self, s: &Snapshot) -> bool {
        match (&self.remote, s.attempted_at) {
            (None, _) => false,
            (Some(_), None) => true,
            (Some(r), Some(at)) => r.clock.elapsed().saturating_sub(at) >= r.min_refresh_interval,
        }
    }
}

/// Discovers `jwks_uri` if not yet known (RFC 8414 section 3), then fetches the key set.
async fn fetch(remote: &Remote, jwks_uri: &mut Option<String>) -> Result<KeySet, KeySourceError> {
    let uri = match jwks_uri {
        Some(uri) => uri.clone(),
        None => {
            let uri = discover(remote).await?;
            jwks_uri.insert(uri).clone()
        }
    };
    let body = get(&remote.client, &uri).await?;
    read_jwks(&uri, &body)
}

/// Reads a JWK Set document (RFC 7517 section 5) into the usable keys. Pure, for the fuzzer
/// too (`crate::fuzzing`).
pub(crate) fn read_jwks(url: &str, body: &[u8]) -> Result<KeySet, KeySourceError> {
    // Parsed key by key, so one key of an unknown type does not hide the others.
    #[derive(Deserialize)]
    struct RawSet {
        keys: Vec<serde_json::Value>,
    }
    let raw: RawSet = parse_json(url, body)?;
    let jwks: Vec<Jwk> = raw
        .keys
        .into_iter()
        .filter_map(|k| serde_json::from_value(k).ok())
        .collect();
    let keys = KeySet::new(&jwks);
    if keys.is_empty() {
        // An empty or broken set must not wipe the cache.
        return Err(KeySourceError::NoUsableKeys);
    }
    Ok(keys)
}

/// Reads the metadata at `{issuer}/.well-known/oauth-authorization-server`, where Tessera
/// serves it, and returns its `jwks_uri`. For an issuer without a path this is the URL of
/// RFC 8414 section 3.1.
async fn discover(remote: &Remote) -> Result<String, KeySourceError> {
    let url = format!(
        "{}/.well-known/oauth-authorization-server",
        remote.issuer.trim_end_matches('/')
    );
    let body = get(&remote.client, &url).await?;
    read_metadata(&url, &body, &remote.issuer, remote.allow_insecure_http)
}

/// Reads a metadata document (RFC 8414 section 3.2) of `issuer` and returns its `jwks_uri`,
/// if this verifier may fetch it. Pure, for the fuzzer too (`crate::fuzzing`).
pub(crate) fn read_metadata(
    url: &str,
    body: &[u8],
    issuer: &str,
    allow_insecure_http: bool,
) -> Result<String, KeySourceError> {
    let metadata: Metadata = parse_json(url, body)?;
    // RFC 8414 section 3.3: the issuer must be identical, or the document must not be used.
    if metadata.issuer != issuer {
        return Err(KeySourceError::IssuerMismatch);
    }
    // RFC 8414 section 2: jwks_uri uses https. An https issuer may not downgrade; a plain-http
    // issuer (a local setup, or one allowed by the builder) may name plain-http keys on the
    // same terms as it was itself allowed: loopback, or anywhere with `allow_insecure_http`.
    let https_issuer = transport(issuer) == Transport::Https;
    let allowed = match transport(&metadata.jwks_uri) {
        Transport::Https => true,
        Transport::LoopbackHttp => !https_issuer,
        Transport::RemoteHttp => !https_issuer && allow_insecure_http,
        Transport::NotHttp => false,
    };
    if !allowed {
        return Err(KeySourceError::InsecureJwksUri);
    }
    Ok(metadata.jwks_uri)
}

/// GETs a document: status 200 only (redirects are not followed), at most [`MAX_DOCUMENT`]
/// bytes.
pub(crate) async fn get(client: &reqwest::Client, url: &str) -> Result<Vec<u8>, KeySourceError> {
    #[cfg(feature = "otel")]
    {
        use tracing::Instrument as _;
        let span = crate::otel::fetch_span(url);
        let fetched = get_untraced(client, url).instrument(span.clone()).await;
        if fetched.is_err() {
            span.record("otel.status_code", "error");
        }
        fetched
    }
    #[cfg(not(feature = "otel"))]
    get_untraced(client, url).await
}

async fn get_untraced(client: &reqwest::Client, url: &str) -> Result<Vec<u8>, KeySourceError> {
    let http = |source| KeySourceError::Http {
        url: url.to_owned(),
        source,
    };
    let request = client
        .get(url)
        .header(reqwest::header::ACCEPT, "application/json");
    #[cfg(feature = "otel")]
    let request = {
        let mut headers = reqwest::header::HeaderMap::new();
        tessera_client::otel::inject(&mut headers);
        request.headers(headers)
    };
    let mut response = request.send().await.map_err(http)?;
    #[cfg(feature = "otel")]
    tracing::Span::current().record("http.response.status_code", response.status().as_u16());
    if response.status() != reqwest::StatusCode::OK {
        return Err(KeySourceError::Status {
            url: url.to_owned(),
            status: response.status().as_u16(),
        });
    }
    let too_large = || KeySourceError::TooLarge {
        url: url.to_owned(),
        limit: MAX_DOCUMENT,
    };
    if response
        .content_length()
        .is_some_and(|n| n > MAX_DOCUMENT as u64)
    {
        return Err(too_large());
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(http)? {
        if body.len() + chunk.len() > MAX_DOCUMENT {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

fn parse_json<T: DeserializeOwned>(url: &str, body: &[u8]) -> Result<T, KeySourceError> {
    serde_json::from_slice(body).map_err(|source| KeySourceError::Json {
        url: url.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine;

    fn jwk(kty: &str, crv: &str, alg: &str, x: &str, y: Option<&str>) -> Jwk {
        Jwk {
            kty: kty.into(),
            crv: crv.into(),
            x: x.into(),
            y: y.map(Into::into),
            n: None,
            e: None,
            kid: "k".into(),
            alg: alg.into(),
            use_: "sig".into(),
        }
    }

    #[test]
    fn only_loopback_hosts_pass_plain_http() {
        use Transport::*;
        for (url, want) in [
            ("https://auth.example", Https),
            ("https://auth.example/tenant/", Https),
            ("http://127.0.0.1:8080", LoopbackHttp),
            ("http://127.255.0.9", LoopbackHttp),
            ("http://127.1/", LoopbackHttp),
            ("http://[::1]:8080/jwks", LoopbackHttp),
            ("http://localhost:3000", LoopbackHttp),
            ("http://LOCALHOST", LoopbackHttp),
            ("http://issuer.example", RemoteHttp),
            ("http://10.0.0.1", RemoteHttp),
            ("http://0.0.0.0:8080", RemoteHttp),
            ("http://[::ffff:127.0.0.1]", RemoteHttp),
            ("http://localhost.evil.example", RemoteHttp),
            ("http://127.0.0.1.evil.example", RemoteHttp),
            ("http://127.0.0.1@evil.example/", RemoteHttp),
            ("http://evil.example#@127.0.0.1", RemoteHttp),
            ("ftp://127.0.0.1/jwks", NotHttp),
            ("file:///etc/jwks.json", NotHttp),
            ("https://", NotHttp),
            ("auth.example", NotHttp),
        ] {
            assert_eq!(transport(url), want, "{url}");
        }
    }

    /// RSA keys (RFC 7518 section 6.3): `alg` RS256 or PS256, no `crv`, and a modulus of at
    /// least 2048 bits.
    #[test]
    fn rsa_keys_need_their_own_shape_and_size() {
        let rsa = |alg: &str, crv: &str, bits: usize| Jwk {
            kty: "RSA".into(),
            crv: crv.into(),
            x: String::new(),
            y: None,
            n: Some(URL_SAFE_NO_PAD.encode(vec![0xc5u8; bits / 8])),
            e: Some("AQAB".into()),
            kid: "k".into(),
            alg: alg.into(),
            use_: "sig".into(),
        };
        assert_eq!(
            VerifyingKey::from_jwk(&rsa("RS256", "", 2048)).map(|k| k.alg),
            Some(Algorithm::RS256)
        );
        assert_eq!(
            VerifyingKey::from_jwk(&rsa("PS256", "", 3072)).map(|k| k.alg),
            Some(Algorithm::PS256)
        );
        for bad in [
            rsa("RS256", "", 1024),
            rsa("ES256", "", 2048),
            rsa("RS256", "P-256", 2048),
        ] {
            assert!(VerifyingKey::from_jwk(&bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn only_consistent_keys_are_usable() {
        let x = URL_SAFE_NO_PAD.encode([7u8; 32]);
        assert!(VerifyingKey::from_jwk(&jwk("OKP", "Ed25519", "EdDSA", &x, None)).is_some());
        // kty/crv/alg that disagree, short keys, and a point not on the curve.
        for bad in [
            jwk("OKP", "Ed25519", "ES256", &x, None),
            jwk("EC", "Ed25519", "EdDSA", &x, None),
            jwk("OKP", "Ed25519", "EdDSA", "AAAA", None),
            jwk("EC", "P-256", "ES256", &x, None),
            jwk("EC", "P-256", "ES256", &x, Some(&x)),
            jwk("oct", "", "HS256", &x, None),
        ] {
            assert!(VerifyingKey::from_jwk(&bad).is_none(), "{bad:?}");
        }
        let mut enc = jwk("OKP", "Ed25519", "EdDSA", &x, None);
        enc.use_ = "enc".into();
        assert!(VerifyingKey::from_jwk(&enc).is_none());
    }
}
