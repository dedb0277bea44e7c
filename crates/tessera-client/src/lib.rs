//! The Tessera client kit: gets access tokens with the OAuth 2.0 client credentials grant
//! (RFC 6749 section 4.4), keeps each one for its lifetime, and presents it as a bearer token
//! (RFC 6750 section 2.1), or as a DPoP token bound to a key of the client's (RFC 9449).
//!
//! The service's rate limits count token requests too, so a token is requested again only
//! when it has expired or is about to, and however many tasks ask at once, one request is in
//! flight.
//!
//! # Layout
//!
//! - [`TokenClient`] and its [`TokenClientBuilder`] (`client.rs`): the token request, its
//!   retries, and [`TokenClient::send_authorized`], which attaches the token to an API request
//!   (with a DPoP proof for a DPoP token) and sends it again once when the API asks for a
//!   DPoP nonce and once when it says the token is invalid (`authorized.rs`).
//! - [`ClientAuth`] (`auth.rs`): how the client authenticates: its secret, its private key
//!   (`private_key_jwt`, RFC 7523), or a JWT its platform writes to a file.
//! - [`ClientKey`] (`dpop.rs`): the client's own key (a `tessera_jose::KeyPair`), for DPoP
//!   proofs and `private_key_jwt` assertions; the proofs, and the nonces servers gave.
//! - [`Environment`] (`environment.rs`): production, staging or a URL of your own; where the
//!   token endpoint is.
//! - [`TokenCache`], [`CacheKey`], [`AccessToken`], [`RefreshSkew`] (`cache.rs`): lifetimes,
//!   measured by the client's [`Clock`], and the single-flight refresh.
//! - [`RetryPolicy`] (`retry.rs`): `Retry-After`, jittered exponential backoff, and the
//!   sleeper that waits them out.
//! - [`Error`], [`OAuthError`], [`BuildError`] (`error.rs`).
//! - `otel` (with the `otel` feature, off by default): a span per token request, and W3C
//!   `traceparent` on it and on [`TokenClient::send_authorized`]'s requests.
//!
//! Nothing here follows a redirect: a token request carries the client's credentials, and
//! RFC 6749 section 3.2 names the token endpoint, not wherever it points.
//!
//! # Example
//!
//! ```no_run
//! use tessera_client::{ClientId, ClientSecret, Environment, ScopeSet, TokenClient};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! // The staging base URL comes from TESSERA_AUTH_URL_STAGE, read because of `from_env`,
//! // unless set with `staging_url`.
//! let tokens = TokenClient::builder()
//!     .environment(Environment::Staging)
//!     .from_env()
//!     .client_id(ClientId::parse("my-app").ok_or("bad client id")?)
//!     .client_secret(ClientSecret::new(std::env::var("MY_APP_SECRET")?))
//!     .scopes(ScopeSet::parse("market-data-api news-api")?)
//!     .build()?;
//!
//! // Cached: later calls return the same token until shortly before it expires.
//! let token = tokens.token().await?;
//! assert!(!token.expose().is_empty());
//!
//! // A bearer request; a 401 `invalid_token` answer is refreshed and retried once.
//! let api = reqwest::Client::new();
//! let response = tokens
//!     .send_authorized(api.get("https://api.example.com/market-data/quotes"))
//!     .await?;
//! println!("{}", response.status());
//! # Ok(())
//! # }
//! ```
//!
//! # DPoP: tokens that are useless without the client's key
//!
//! A bearer token works for whoever holds it, so one copied from a log or taken by one API
//! can be replayed at another. With [`dpop`](TokenClientBuilder::dpop), every token request
//! carries a proof signed with a key that never leaves the process (RFC 9449 section 4.2),
//! and the server binds the token to that key (section 5; its `cnf.jkt` is the key's RFC
//! 7638 [thumbprint](ClientKey::thumbprint), section 6.1). [`TokenClient::send_authorized`]
//! then sends `Authorization: DPoP <token>` with a new proof for each request, naming its
//! method and URL and carrying the token's hash (section 7.1); an API that checks them
//! refuses the token from anyone else.
//!
//! Servers that ask for a nonce (`use_dpop_nonce` with a `DPoP-Nonce` header: the token
//! endpoint with status 400, section 8; an API with 401, section 9) are asked once more at
//! once with it, and the last nonce each gave goes into the next proof to it. A server that
//! does not bind this client's tokens (a plan with `dpop off`) answers `token_type`
//! `Bearer`, and the token is used as a bearer token; one that requires DPoP refuses a
//! client without a key with [`ErrorCode::InvalidDpopProof`].
//!
//! ```no_run
//! use tessera_client::{
//!     ClientId, ClientSecret, ClientKey, Environment, ScopeSet, TokenClient, TokenType,
//! };
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! // A new key per process; `ClientKey::from_pkcs8` reads one kept on disk.
//! let key = ClientKey::generate_ed25519();
//! let tokens = TokenClient::builder()
//!     .environment(Environment::Production)
//!     .from_env()
//!     .client_id(ClientId::parse("my-app").ok_or("bad client id")?)
//!     .client_secret(ClientSecret::new(std::env::var("MY_APP_SECRET")?))
//!     .scopes(ScopeSet::parse("market-data-api")?)
//!     .dpop(key.clone())
//!     .build()?;
//!
//! let token = tokens.token().await?;
//! assert_eq!(token.token_type(), TokenType::DPoP);
//!
//! // Authorization: DPoP <token>, and a DPoP proof for GET https://api.example.com/quotes.
//! let api = reqwest::Client::new();
//! let response = tokens
//!     .send_authorized(api.get("https://api.example.com/quotes?symbol=ACME"))
//!     .await?;
//! println!("{}", response.status());
//!
//! // With an HTTP client of your own: a proof for each request, with the token's hash.
//! let proof = key.proof("GET", "https://api.example.com/news", Some(token.expose()), None);
//! # let _ = proof;
//! # Ok(())
//! # }
//! ```
//!
//! # Without a shared secret: a private key, or the platform's token
//!
//! A secret is copied into CI variables and config files and must be rotated by hand. With
//! [`ClientAuth::private_key`] the client registers only its public key (`tessera client
//! create --auth-method private_key_jwt --jwks-file jwks.json`) and signs a new assertion
//! for each token request (RFC 7523 section 2.2): `iss` and `sub` its id, `aud` the server's
//! issuer identifier (the base URL; see [`issuer`](TokenClientBuilder::issuer)), a random
//! `jti`, and `exp` 60 s after `iat`. With [`ClientAuth::assertion_file`] it sends a JWT that
//! its platform issues and rewrites in a file (a Kubernetes projected service-account token,
//! say), read again for every request.
//!
//! ```no_run
//! use tessera_client::{ClientAuth, ClientId, ClientKey, Environment, ScopeSet, TokenClient};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! // Written by `tessera keys generate-client-key --out client.pem --kid k1`.
//! let key = ClientKey::from_pkcs8_pem(&std::fs::read_to_string("client.pem")?)?;
//! let tokens = TokenClient::builder()
//!     .environment(Environment::Production)
//!     .from_env()
//!     .client_id(ClientId::parse("my-app").ok_or("bad client id")?)
//!     .auth(ClientAuth::private_key(key, Some("k1".into())))
//!     .scopes(ScopeSet::parse("market-data-api")?)
//!     .build()?;
//! let token = tokens.token().await?;
//!
//! // Or the token the platform projects into the pod, read for every request:
//! let federated = TokenClient::builder()
//!     .environment(Environment::Production)
//!     .from_env()
//!     .client_id(ClientId::parse("my-app").ok_or("bad client id")?)
//!     .auth(ClientAuth::assertion_file("/var/run/secrets/tokens/tessera"))
//!     .scopes(ScopeSet::parse("market-data-api")?)
//!     .build()?;
//! # let _ = (token, federated);
//! # Ok(())
//! # }
//! ```
//!
//! # Time in tests
//!
//! The client decides by time in two places: whether a cached token is still fresh, and how
//! long to wait before a retry. It reads the first from a [`Clock`] and waits through a
//! sleeper, both the system's unless the builder is given others
//! ([`clock`](TokenClientBuilder::clock), [`sleeper`](TokenClientBuilder::sleeper)). A test
//! gives a [`ManualClock`] and a sleeper that moves it: it then moves the clock past a
//! token's refresh point instead of sleeping until then, and a retry after `Retry-After: 30`
//! comes at once, with the clock 30 s further on. Tessera's own tests give the server under
//! test that same clock, so both sides see one time.
//!
//! ```
//! use std::time::Duration;
//! use tessera_client::{
//!     ClientId, ClientSecret, Environment, ManualClock, ScopeSet, TokenClient, Url,
//! };
//!
//! # fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let time = ManualClock::starting_now();
//! let waits = time.clone();
//! let tokens = TokenClient::builder()
//!     .environment(Environment::Custom(Url::parse("http://127.0.0.1:8080")?))
//!     .client_id(ClientId::parse("my-app").ok_or("bad client id")?)
//!     .client_secret(ClientSecret::new("test-secret"))
//!     .scopes(ScopeSet::parse("news-api")?)
//!     .clock(time.clone())
//!     // Waiting moves the clock and takes no time.
//!     .sleeper(move |wait| {
//!         waits.advance(wait);
//!         std::future::ready(())
//!     })
//!     .build()?;
//! // Get a token with `tokens.token().await`; then, instead of sleeping for an hour:
//! time.advance(Duration::from_secs(3600));
//! // the next `tokens.token().await` asks for a new one.
//! # drop(tokens);
//! # Ok(())
//! # }
//! # run().unwrap();
//! ```

mod auth;
mod authorized;
mod cache;
mod client;
mod dpop;
mod environment;
mod error;
#[cfg(feature = "otel")]
pub mod otel;
mod retry;

pub use auth::ClientAuth;
pub use cache::{AccessToken, CacheKey, RefreshSkew, TokenCache};
pub use client::{TokenClient, TokenClientBuilder};
pub use dpop::ClientKey;
pub use environment::{Environment, PRODUCTION_URL_VAR, STAGING_URL_VAR};
pub use error::{BuildError, Error, OAuthError};
pub use retry::RetryPolicy;
pub use tessera_jose::KeyError;

pub use reqwest::Url;
pub use tessera_proto::token::TokenType;
pub use tessera_proto::{
    ClientId, ClientSecret, Clock, ErrorCode, ManualClock, Scope, ScopeSet, TokenResponse,
};
