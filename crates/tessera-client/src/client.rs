//! [`TokenClient`]: the token request of the client credentials grant (RFC 6749 section
//! 4.4.2), its retries, and the cache in front of it.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use reqwest::{redirect, Response, StatusCode, Url};
use tessera_proto::token::TokenType;
use tessera_proto::{
    form, ClientId, ClientSecret, Clock, ErrorCode, ErrorResponse, ScopeSet, TokenResponse,
};

use crate::auth::{ClientAuth, Credentials, JWT_BEARER};
use crate::cache::{
    AccessToken, CacheEntry, CacheKey, CachedToken, RefreshSkew, Stamp, TokenCache,
};
use crate::dpop::{ClientKey, Dpop, PROOF_HEADER};
use crate::environment::{self, BaseUrls, Environment};
use crate::error::{BuildError, Error, OAuthError};
use crate::retry::{self, Jitter, RetryPolicy, Sleeper};
use tessera_jose::sha256_b64;

/// The largest token endpoint answer read; a token response is a few hundred bytes.
const MAX_BODY: usize = 64 * 1024;

/// Gets, caches and refreshes the access token of one client for one scope set. Cheap to
/// clone; clones share the cache.
///
/// Build one with [`TokenClient::builder`].
#[derive(Clone)]
pub struct TokenClient {
    http: reqwest::Client,
    endpoint: Url,
    key: CacheKey,
    /// How the client authenticates: the `Basic` header of its secret, or an assertion made
    /// or read for each request, or nothing beyond its certificate (RFC 8705).
    credentials: Credentials,
    /// The form body, less any `client_assertion`: the same on every request.
    body: String,
    retry: RetryPolicy,
    skew: RefreshSkew,
    /// What token lifetimes are measured by, and DPoP proofs dated by.
    pub(crate) clock: Clock,
    entry: Arc<CacheEntry>,
    jitter: Arc<Jitter>,
    /// What waits out a `Retry-After` or a backoff.
    sleeper: Sleeper,
    /// The DPoP key every request carries a proof of, and the nonces servers gave it.
    pub(crate) dpop: Option<Arc<Dpop>>,
}

impl fmt::Debug for TokenClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenClient")
            .field("endpoint", &self.endpoint.as_str())
            .field("key", &self.key)
            .field("auth", &self.credentials)
            .field("retry", &self.retry)
            .field("skew", &self.skew)
            .field("cache", &self.entry)
            .field("dpop", &self.dpop.as_ref().map(|d| &d.key))
            .finish_non_exhaustive()
    }
}

impl TokenClient {
    /// A builder with the defaults: 10 s request timeout, [`RetryPolicy::default`],
    /// [`RefreshSkew::default`], the system clock, a cache of its own.
    pub fn builder() -> TokenClientBuilder {
        TokenClientBuilder::default()
    }

    /// An access token for the client's scopes: the cached one while it is fresh, a new one
    /// when it has expired or is within the [`RefreshSkew`] of expiry. However many tasks call
    /// at once, one token request is in flight per [`CacheKey`].
    pub async fn token(&self) -> Result<AccessToken, Error> {
        self.entry
            .get(|| async {
                let (response, received_at) = self.fetch().await?;
                Ok(CachedToken::new(
                    AccessToken::new(&response.access_token, response.token_type),
                    response.expires_in,
                    received_at,
                    self.skew,
                ))
            })
            .await
    }

    /// Asks the token endpoint now, past the cache but with the same retries, and returns the
    /// whole answer (RFC 6749 section 5.1). For callers that keep tokens themselves, such as
    /// a cache on disk; `expires_in` counts from the moment this returns.
    pub async fn request_token(&self) -> Result<TokenResponse, Error> {
        self.fetch().await.map(|(response, _)| response)
    }

    /// Drops `token` from the cache if it is still the cached one, so that the next
    /// [`token`](Self::token) asks for a new one. Call it when an API refuses the token.
    pub fn invalidate(&self, token: &AccessToken) {
        self.entry.invalidate(token, &self.clock);
    }

    /// What the cached token is for.
    pub fn key(&self) -> &CacheKey {
        &self.key
    }

    /// The token endpoint asked: `{base}/connect/token`.
    pub fn token_endpoint(&self) -> &Url {
        &self.endpoint
    }

    /// Asks the token endpoint, retrying as the [`RetryPolicy`] says.
    async fn fetch(&self) -> Result<(TokenResponse, Stamp), Error> {
        #[cfg(feature = "otel")]
        {
            use tracing::Instrument as _;
            let span = tracing::info_span!(
                target: "tessera_client",
                "token",
                otel.name = "tessera_client token",
                otel.kind = "client",
                otel.status_code = tracing::field::Empty,
                http.request.method = "POST",
                server.address = self.endpoint.host_str().unwrap_or_default(),
                tessera.client_id = self.key.client_id.as_str(),
                http.response.status_code = tracing::field::Empty,
            );
            let fetched = self.fetch_untraced().instrument(span.clone()).await;
            if fetched.is_err() {
                span.record("otel.status_code", "error");
            }
            fetched
        }
        #[cfg(not(feature = "otel"))]
        self.fetch_untraced().await
    }

    async fn fetch_untraced(&self) -> Result<(TokenResponse, Stamp), Error> {
        let attempts = self.retry.attempts();
        let mut attempt = 1;
        loop {
            let (error, after) = match self.request(attempt).await {
                Outcome::Done(result) => return result,
                Outcome::UseNonce(error) => return Err(error),
                Outcome::Retry { error, after } => (error, after),
            };
            if attempt >= attempts {
                return Err(error);
            }
            let wait = match after {
                Some(after) if after > self.retry.max_retry_after => return Err(error),
                Some(after) => after,
                None => self.retry.backoff(attempt, &self.jitter),
            };
            self.sleeper.sleep(wait).await;
            attempt += 1;
        }
    }

    /// One token request and what to make of its answer; with a DPoP key, sent once more at
    /// once when the server refuses it for want of the nonce it now gives (RFC 9449 section
    /// 8). That second request is not one of the [`RetryPolicy`]'s attempts.
    async fn request(&self, attempt: u32) -> Outcome {
        match self.exchange(attempt).await {
            Outcome::UseNonce(_) => match self.exchange(attempt).await {
                Outcome::UseNonce(error) => Outcome::Done(Err(error)),
                other => other,
            },
            other => other,
        }
    }

    /// One token request (RFC 6749 section 4.4.2), with a fresh DPoP proof (RFC 9449 section
    /// 5) when the client has a key, and what to make of its answer.
    async fn exchange(&self, attempt: u32) -> Outcome {
        let mut request = self.http.post(self.endpoint.clone());
        if let Some(authorization) = self.credentials.authorization() {
            request = request.header(AUTHORIZATION, authorization.clone());
        }
        // RFC 7521 section 4.2: a new assertion for every request, since each is used once.
        let body = match self.credentials.assertion(self.clock.now()).await {
            Ok(None) => self.body.clone(),
            Ok(Some(assertion)) => format!(
                "{}&client_assertion_type={}&client_assertion={}",
                self.body,
                form::encode_component(JWT_BEARER),
                form::encode_component(&assertion)
            ),
            Err(error) => return Outcome::Done(Err(error)),
        };
        if let Some(dpop) = &self.dpop {
            let endpoint = self.endpoint.as_str();
            let nonce = dpop.nonce(endpoint);
            let proof =
                dpop.key
                    .proof_at(self.clock.now(), "POST", endpoint, None, nonce.as_deref());
            request = request.header(PROOF_HEADER, proof);
        }
        #[cfg(feature = "otel")]
        {
            let mut headers = reqwest::header::HeaderMap::new();
            crate::otel::inject(&mut headers);
            request = request.headers(headers);
        }
        let sent = request
            .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(ACCEPT, "application/json")
            .body(body)
            .send()
            .await;
        let transport = |e: reqwest::Error| Error::Transport {
            source: Arc::new(e),
            attempts: attempt,
        };
        let response = match sent {
            Ok(response) => response,
            Err(e) if e.is_builder() => return Outcome::Done(Err(transport(e))),
            Err(e) => {
                return Outcome::Retry {
                    error: transport(e),
                    after: None,
                }
            }
        };
        // The lifetime counts from here (RFC 6749 section 5.1, `expires_in`).
        let received_at = Stamp::now(&self.clock);
        let status = response.status();
        #[cfg(feature = "otel")]
        tracing::Span::current().record("http.response.status_code", status.as_u16());
        // RFC 9449 section 8: a nonce for the next proof, on a refusal or with a token.
        let new_nonce = self
            .dpop
            .as_ref()
            .is_some_and(|dpop| dpop.remember(self.endpoint.as_str(), response.headers()));
        let retry_after = retry::retry_after(response.headers());
        let body = match read_limited(response).await {
            Ok(Some(body)) => body,
            Ok(None) => {
                return Outcome::Done(Err(Error::UnexpectedResponse {
                    status,
                    detail: format!("answer larger than {MAX_BODY} bytes"),
                }))
            }
            Err(e) => {
                return Outcome::Retry {
                    error: transport(e),
                    after: None,
                }
            }
        };

        if status == StatusCode::TOO_MANY_REQUESTS {
            return Outcome::Retry {
                error: Error::RateLimited {
                    retry_after,
                    attempts: attempt,
                },
                after: retry_after,
            };
        }
        if status.is_success() {
            return Outcome::Done(self.read_token(status, &body, received_at));
        }
        let oauth = serde_json::from_slice::<ErrorResponse>(&body).ok();
        if status.is_server_error() || status == StatusCode::REQUEST_TIMEOUT {
            return Outcome::Retry {
                error: Error::Server {
                    status,
                    code: oauth.map(|e| e.error),
                    attempts: attempt,
                },
                // A 503 may say when to come back (RFC 9110 section 10.2.3).
                after: retry_after,
            };
        }
        Outcome::Done(Err(match oauth {
            Some(body) if status.is_client_error() => {
                let use_nonce = new_nonce && body.error == ErrorCode::UseDpopNonce;
                let error = OAuthError::new(status, body, &self.key.scopes).into();
                if use_nonce {
                    return Outcome::UseNonce(error);
                }
                error
            }
            _ if status.is_redirection() => Error::UnexpectedResponse {
                status,
                detail: "redirects are not followed".into(),
            },
            _ => Error::UnexpectedResponse {
                status,
                detail: "no RFC 6749 error body".into(),
            },
        }))
    }

    /// Reads a successful answer (RFC 6749 section 5.1).
    fn read_token(
        &self,
        status: StatusCode,
        body: &[u8],
        received_at: Stamp,
    ) -> Result<(TokenResponse, Stamp), Error> {
        let unexpected = |detail: String| Error::UnexpectedResponse { status, detail };
        let response: TokenResponse = serde_json::from_slice(body)
            .map_err(|e| unexpected(format!("not a token response: {e}")))?;
        if response.access_token.is_empty() {
            return Err(unexpected("empty access_token".into()));
        }
        // It goes into an Authorization header (RFC 6750 section 2.1: b64token).
        if !response.access_token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(unexpected("access_token is not visible ASCII".into()));
        }
        // A Bearer token is taken even with a key: the server does not bind tokens for this
        // client (RFC 9449 section 5), and it is sent as Bearer.
        if response.token_type == TokenType::DPoP && self.dpop.is_none() {
            return Err(unexpected(
                "a DPoP token, but the client has no DPoP key".into(),
            ));
        }
        Ok((response, received_at))
    }
}

enum Outcome {
    /// A token or an error that another attempt would not change.
    Done(Result<(TokenResponse, Stamp), Error>),
    /// Worth another attempt, after `after` if the server said.
    Retry {
        error: Error,
        after: Option<Duration>,
    },
    /// `use_dpop_nonce`, with the nonce to send: worth one more request at once.
    UseNonce(Error),
}

/// The body, or `None` if it is over [`MAX_BODY`].
async fn read_limited(mut response: Response) -> Result<Option<Vec<u8>>, reqwest::Error> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        if body.len() + chunk.len() > MAX_BODY {
            return Ok(None);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Some(body))
}

/// Settings of a [`TokenClient`]. `environment`, `client_id`, the credentials
/// ([`client_secret`](Self::client_secret), [`auth`](Self::auth) or a
/// [`client_certificate`](Self::client_certificate)) and `scopes` are required.
#[derive(Debug)]
pub struct TokenClientBuilder {
    environment: Option<Environment>,
    urls: BaseUrls,
    client_id: Option<ClientId>,
    auth: Option<ClientAuth>,
    /// The issuer identifier assertions name, when not the base URL.
    issuer: Option<String>,
    identity: Option<reqwest::Identity>,
    /// SHA-256 of the certificate's PEM: tokens bound to one certificate are not another's.
    certificate_digest: Option<String>,
    roots: Vec<reqwest::Certificate>,
    scopes: Option<ScopeSet>,
    timeout: Duration,
    connect_timeout: Duration,
    retry: RetryPolicy,
    skew: RefreshSkew,
    clock: Clock,
    sleeper: Sleeper,
    cache: Option<TokenCache>,
    dpop: Option<ClientKey>,
    /// Whether [`build`](Self::build) reads the base URLs not set here from the process
    /// environment ([`from_env`](Self::from_env)).
    from_env: bool,
}

impl Default for TokenClientBuilder {
    fn default() -> Self {
        Self {
            environment: None,
            urls: BaseUrls::default(),
            client_id: None,
            auth: None,
            issuer: None,
            identity: None,
            certificate_digest: None,
            roots: Vec::new(),
            scopes: None,
            timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(5),
            retry: RetryPolicy::default(),
            skew: RefreshSkew::default(),
            clock: Clock::system(),
            sleeper: Sleeper::default(),
            cache: None,
            dpop: None,
            from_env: false,
        }
    }
}

impl TokenClientBuilder {
    /// Which deployment to ask.
    pub fn environment(mut self, environment: Environment) -> Self {
        self.environment = Some(environment);
        self
    }

    /// The production base URL, `{auth_url}`; with [`from_env`](Self::from_env), otherwise
    /// read from [`PRODUCTION_URL_VAR`](crate::PRODUCTION_URL_VAR).
    pub fn production_url(mut self, url: Url) -> Self {
        self.urls.production = Some(url);
        self
    }

    /// The staging base URL, `{auth_url_stage}`; with [`from_env`](Self::from_env),
    /// otherwise read from [`STAGING_URL_VAR`](crate::STAGING_URL_VAR).
    pub fn staging_url(mut self, url: Url) -> Self {
        self.urls.staging = Some(url);
        self
    }

    /// Read the base URL of the production or staging environment, when not set with
    /// [`production_url`](Self::production_url) or [`staging_url`](Self::staging_url), from
    /// [`PRODUCTION_URL_VAR`](crate::PRODUCTION_URL_VAR) or
    /// [`STAGING_URL_VAR`](crate::STAGING_URL_VAR) when [`build`](Self::build) runs. Without
    /// it the kit reads nothing from the process environment.
    pub fn from_env(mut self) -> Self {
        self.from_env = true;
        self
    }

    /// Accept plain `http` to hosts other than loopback. Off by default: the client secret
    /// would travel in the clear.
    pub fn allow_http(mut self, allow: bool) -> Self {
        self.urls.allow_http = allow;
        self
    }

    /// The client identifier (RFC 6749 section 2.2).
    pub fn client_id(mut self, id: ClientId) -> Self {
        self.client_id = Some(id);
        self
    }

    /// The client secret, sent with HTTP Basic: the same as
    /// [`auth(ClientAuth::secret(secret))`](Self::auth).
    pub fn client_secret(self, secret: ClientSecret) -> Self {
        self.auth(ClientAuth::secret(secret))
    }

    /// How the client authenticates: its secret, its private key (`private_key_jwt`, RFC
    /// 7523), or a JWT its platform writes to a file. See [`ClientAuth`]. The last one given
    /// (here or with [`client_secret`](Self::client_secret)) counts.
    pub fn auth(mut self, auth: ClientAuth) -> Self {
        self.auth = Some(auth);
        self
    }

    /// The issuer identifier of the server (RFC 8414 section 2), which the assertions of
    /// [`ClientAuth::private_key`] name as their audience. By default the base URL without
    /// a trailing slash, which is Tessera's issuer when the client reaches the server at the
    /// address the server names itself by; give it when the client reaches it elsewhere.
    pub fn issuer(mut self, issuer: impl Into<String>) -> Self {
        self.issuer = Some(issuer.into());
        self
    }

    /// Authenticate with a client certificate instead of a secret (RFC 8705 section 2:
    /// `tls_client_auth` or `self_signed_tls_client_auth`): `pem` holds the certificate
    /// (chain) and its private key. The tokens are then bound to the certificate, so the
    /// APIs must see it too.
    pub fn client_certificate(mut self, pem: &[u8]) -> Result<Self, BuildError> {
        self.identity = Some(reqwest::Identity::from_pem(pem).map_err(BuildError::Http)?);
        self.certificate_digest = Some(sha256_b64(pem));
        Ok(self)
    }

    /// Also trust the CA certificate(s) in `pem` for the token endpoint: a private CA, or
    /// a server's own self-signed certificate (`tessera serve --demo --tls`).
    pub fn root_certificate(mut self, pem: &[u8]) -> Result<Self, BuildError> {
        let certificates = reqwest::Certificate::from_pem_bundle(pem).map_err(BuildError::Http)?;
        self.roots.extend(certificates);
        Ok(self)
    }

    /// The scopes to request; at least one.
    pub fn scopes(mut self, scopes: ScopeSet) -> Self {
        self.scopes = Some(scopes);
        self
    }

    /// How long one token request may take, answer included. Default 10 s.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// How long connecting may take. Default 5 s.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How token requests are retried.
    pub fn retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// How long before expiry a token is replaced.
    pub fn refresh_skew(mut self, skew: RefreshSkew) -> Self {
        self.skew = skew;
        self
    }

    /// The clock that token lifetimes are measured by: the system's by default. A test gives
    /// a [`ManualClock`](crate::ManualClock) and moves it to a token's refresh point instead
    /// of sleeping until then, and a [`sleeper`](Self::sleeper) that moves it for the waits
    /// between retries.
    ///
    /// Its monotonic reading ([`Clock::elapsed`]) is what counts, so stepping the wall clock
    /// neither ages nor rejuvenates a cached token. Clients that share a
    /// [`cache`](Self::cache) may each have their own clock: a token is timed by the clock of
    /// the client that received it.
    pub fn clock(mut self, clock: impl Into<Clock>) -> Self {
        self.clock = clock.into();
        self
    }

    /// How the client waits out a `Retry-After` (RFC 9110 section 10.2.3) or a backoff
    /// before it asks again: `sleep(wait)` is a future that ends when it may.
    /// [`tokio::time::sleep`] by default.
    ///
    /// For tests: a sleeper that moves a [`ManualClock`](crate::ManualClock) by `wait` and
    /// ends at once lets a test see a retry come `Retry-After` later without waiting for it;
    /// [the crate docs](crate#time-in-tests) show one. Pausing tokio's time does the same
    /// only for a test without real I/O: while a real server's answer is on its way the
    /// paused runtime has nothing to do, so it jumps to its next timer and timeouts fire
    /// early.
    pub fn sleeper<F, W>(mut self, sleep: F) -> Self
    where
        F: Fn(Duration) -> W + Send + Sync + 'static,
        W: Future<Output = ()> + Send + 'static,
    {
        self.sleeper = Sleeper::new(sleep);
        self
    }

    /// Keep tokens in `cache`, shared with other clients built with it; clients with equal
    /// [`CacheKey`]s then share one token and one refresh.
    pub fn cache(mut self, cache: &TokenCache) -> Self {
        self.cache = Some(cache.clone());
        self
    }

    /// Bind tokens to `key` with DPoP (RFC 9449). Every token request then carries a proof
    /// of it (section 5), and the token, `token_type` `DPoP`, is of no use to whoever copies
    /// it without the key. [`send_authorized`](TokenClient::send_authorized) sends such a
    /// token as `Authorization: DPoP` with a proof for the request (section 7.1).
    ///
    /// A server that asks for a nonce (`use_dpop_nonce`, section 8) is asked once more at
    /// once with it, and the last nonce each server gave is put in the next proof to it. A
    /// server that does not bind this client's tokens answers `token_type` `Bearer`; such a
    /// token is used as a bearer token. Tokens are cached per key (the key's thumbprint is in
    /// the [`CacheKey`]).
    pub fn dpop(mut self, key: ClientKey) -> Self {
        self.dpop = Some(key);
        self
    }

    /// Builds the client; a base URL not given here is read from its environment variable
    /// only after [`from_env`](Self::from_env).
    pub fn build(self) -> Result<TokenClient, BuildError> {
        let from_env = self.from_env;
        self.build_with(|name| from_env.then(|| std::env::var(name).ok()).flatten())
    }

    fn build_with(
        self,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<TokenClient, BuildError> {
        let environment = self.environment.ok_or(BuildError::Missing("environment"))?;
        let client_id = self.client_id.ok_or(BuildError::Missing("client_id"))?;
        if self.auth.is_none() && self.identity.is_none() {
            return Err(BuildError::Missing("client_secret"));
        }
        let scopes = self
            .scopes
            .filter(|s| !s.is_empty())
            .ok_or(BuildError::Missing("scopes"))?;
        let base = self.urls.base(&environment, lookup)?;
        let endpoint = environment::token_endpoint(&base);
        let issuer = self.issuer.unwrap_or_else(|| environment::issuer(&base));

        let mut http = reqwest::Client::builder()
            .redirect(redirect::Policy::none())
            .timeout(self.timeout)
            .connect_timeout(self.connect_timeout)
            .user_agent(concat!("tessera-client/", env!("CARGO_PKG_VERSION")));
        if let Some(identity) = self.identity {
            http = http.identity(identity);
        }
        for root in self.roots {
            http = http.add_root_certificate(root);
        }
        let http = http.build().map_err(BuildError::Http)?;

        let credentials = match self.auth {
            Some(auth) => Credentials::new(auth, &client_id, &issuer),
            None => Credentials::Certificate,
        };
        // RFC 6749 section 4.4.2; the scopes are joined with %20, as the seed shows.
        let scope = scopes
            .iter()
            .map(|s| form::encode_component(s.as_str()))
            .collect::<Vec<_>>()
            .join("%20");
        let mut body = format!("grant_type=client_credentials&scope={scope}");
        if credentials.authorization().is_none() {
            // RFC 8705 section 2 and RFC 7521 section 4.2: without Basic, the client names
            // itself in the body.
            body.push_str("&client_id=");
            body.push_str(&form::encode_component(client_id.as_str()));
        }
        let credential = match (credentials.fingerprint(), self.certificate_digest) {
            (Some(auth), Some(certificate)) => Some(format!("{auth} certificate:{certificate}")),
            (Some(auth), None) => Some(auth),
            (None, certificate) => certificate.map(|c| format!("certificate:{c}")),
        };

        let key = CacheKey {
            environment,
            token_endpoint: endpoint.to_string(),
            client_id,
            scopes,
            dpop_jkt: self.dpop.as_ref().map(|key| key.thumbprint().to_owned()),
            credential,
        };
        let entry = self.cache.unwrap_or_default().entry(&key);
        Ok(TokenClient {
            http,
            endpoint,
            key,
            credentials,
            body,
            retry: self.retry,
            skew: self.skew,
            clock: self.clock,
            entry,
            jitter: Arc::new(Jitter::from_clock()),
            sleeper: self.sleeper,
            dpop: self.dpop.map(|key| Arc::new(Dpop::new(key))),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kit reads the process environment only when told: `build()` alone leaves a
    /// production base URL in TESSERA_AUTH_URL unread (issue 25, item 6).
    #[test]
    fn the_environment_is_read_only_after_from_env() {
        // No other test of this binary reads this variable.
        std::env::set_var(crate::PRODUCTION_URL_VAR, "https://auth.from-env.example");
        let unread = builder()
            .environment(Environment::Production)
            .build()
            .unwrap_err();
        assert!(
            matches!(unread, BuildError::MissingBaseUrl { .. }),
            "{unread:?}"
        );
        let read = builder()
            .environment(Environment::Production)
            .from_env()
            .build()
            .unwrap();
        assert_eq!(
            read.endpoint.as_str(),
            "https://auth.from-env.example/connect/token"
        );
    }

    fn builder() -> TokenClientBuilder {
        TokenClient::builder()
            .environment(Environment::Staging)
            .staging_url(Url::parse("https://auth-stage.example.com").unwrap())
            .client_id(ClientId::parse("app").unwrap())
            .client_secret(ClientSecret::new("hunter2"))
            .scopes(ScopeSet::parse("news-api market-data-api").unwrap())
    }

    #[test]
    fn builds_the_request_of_rfc_6749_4_4_2() {
        let client = builder().build_with(|_| None).unwrap();
        assert_eq!(
            client.token_endpoint().as_str(),
            "https://auth-stage.example.com/connect/token"
        );
        assert_eq!(
            client.body,
            "grant_type=client_credentials&scope=market-data-api%20news-api"
        );
        let header = client
            .credentials
            .authorization()
            .unwrap()
            .to_str()
            .unwrap();
        let creds = tessera_proto::BasicCredentials::from_header(header).unwrap();
        assert_eq!(creds.client_secret.expose(), "hunter2");
        assert!(client.credentials.authorization().unwrap().is_sensitive());
        assert_eq!(client.key().environment, Environment::Staging);
    }

    #[test]
    fn each_required_setting_is_named() {
        let missing = |b: TokenClientBuilder| match b.build_with(|_| None) {
            Err(BuildError::Missing(what)) => what,
            other => panic!("{other:?}"),
        };
        assert_eq!(missing(TokenClient::builder()), "environment");
        let b = TokenClient::builder().environment(Environment::Production);
        assert_eq!(missing(b), "client_id");
        let b = builder().scopes(ScopeSet::default());
        assert_eq!(missing(b), "scopes");
        let no_url = builder().environment(Environment::Production);
        assert!(matches!(
            no_url.build_with(|_| None),
            Err(BuildError::MissingBaseUrl { .. })
        ));
    }

    #[tokio::test]
    async fn debug_hides_the_secret_and_the_token() {
        let client = builder().build_with(|_| None).unwrap();
        client.entry.put(CachedToken::new(
            AccessToken::new("eyJ.token.sig", TokenType::Bearer),
            3600,
            Stamp::now(&client.clock),
            RefreshSkew::default(),
        ));
        assert_eq!(client.token().await.unwrap().expose(), "eyJ.token.sig");
        let printed = format!("{client:?} {:?}", builder());
        assert!(!printed.contains("hunter2"), "{printed}");
        assert!(!printed.contains("eyJ.token.sig"), "{printed}");
        assert!(printed.contains("[redacted]"));
        let b64 = client
            .credentials
            .authorization()
            .unwrap()
            .to_str()
            .unwrap()
            .to_owned();
        assert!(!printed.contains(&b64[6..]), "{printed}");
    }

    #[test]
    fn clients_of_one_key_share_a_cache_entry() {
        let cache = TokenCache::new();
        let a = builder().cache(&cache).build_with(|_| None).unwrap();
        let b = builder().cache(&cache).build_with(|_| None).unwrap();
        assert!(Arc::ptr_eq(&a.entry, &b.entry));
        let own = builder().build_with(|_| None).unwrap();
        assert!(!Arc::ptr_eq(&a.entry, &own.entry));
    }

    #[test]
    fn clients_that_authenticate_otherwise_never_share_a_token() {
        let cache = TokenCache::new();
        let key = ClientKey::generate_ed25519();
        let with = |auth: ClientAuth| {
            builder()
                .auth(auth)
                .cache(&cache)
                .build_with(|_| None)
                .unwrap()
        };
        let clients = [
            with(ClientAuth::secret(ClientSecret::new("hunter2"))),
            with(ClientAuth::secret(ClientSecret::new("hunter3"))),
            with(ClientAuth::private_key(key.clone(), None)),
            with(ClientAuth::private_key(ClientKey::generate_ed25519(), None)),
            with(ClientAuth::assertion_file(
                "/var/run/secrets/tokens/tessera",
            )),
            with(ClientAuth::assertion_file("/elsewhere")),
        ];
        for (i, a) in clients.iter().enumerate() {
            for b in &clients[i + 1..] {
                assert!(!Arc::ptr_eq(&a.entry, &b.entry), "{:?} {:?}", a.key, b.key);
            }
        }
        // The same credentials share one.
        let again = with(ClientAuth::private_key(key.clone(), Some("k1".into())));
        assert!(Arc::ptr_eq(&clients[2].entry, &again.entry));
        assert_eq!(
            again.key().credential.as_deref(),
            Some(format!("private_key_jwt:{}", key.thumbprint()).as_str())
        );
        // The key names the secret by its digest only.
        let secret = format!("{:?}", clients[0].key());
        assert!(!secret.contains("hunter2"), "{secret}");
    }

    #[test]
    fn an_assertion_client_names_itself_in_the_body_and_signs_for_the_issuer() {
        let key = ClientKey::generate_ed25519();
        let client = builder()
            .auth(ClientAuth::private_key(key.clone(), None))
            .build_with(|_| None)
            .unwrap();
        assert!(client.credentials.authorization().is_none());
        assert_eq!(
            client.body,
            "grant_type=client_credentials&scope=market-data-api%20news-api&client_id=app"
        );
        let printed = format!("{:?}", client.credentials);
        assert!(printed.starts_with("PrivateKeyJwt"), "{printed}");
        assert!(
            printed.contains("aud: \"https://auth-stage.example.com\""),
            "{printed}"
        );
        // Given elsewhere, the issuer wins.
        let client = builder()
            .auth(ClientAuth::private_key(key, None))
            .issuer("https://auth.example.com")
            .build_with(|_| None)
            .unwrap();
        assert!(format!("{client:?}").contains("aud: \"https://auth.example.com\""));
    }

    #[test]
    fn tokens_bound_to_one_dpop_key_are_not_shared_with_another() {
        let cache = TokenCache::new();
        let key = ClientKey::generate_ed25519();
        let with_key = |key: &ClientKey| {
            builder()
                .cache(&cache)
                .dpop(key.clone())
                .build_with(|_| None)
                .unwrap()
        };
        let (a, b) = (with_key(&key), with_key(&key));
        assert!(Arc::ptr_eq(&a.entry, &b.entry));
        assert_eq!(a.key().dpop_jkt.as_deref(), Some(key.thumbprint()));
        let other = with_key(&ClientKey::generate_ed25519());
        assert!(!Arc::ptr_eq(&a.entry, &other.entry));
        let none = builder().cache(&cache).build_with(|_| None).unwrap();
        assert!(!Arc::ptr_eq(&a.entry, &none.entry));
        // The client's Debug names the key, never its private half.
        let printed = format!("{a:?}");
        assert!(
            printed.contains(key.public_jwk()["x"].as_str().unwrap()),
            "{printed}"
        );
    }
}
