//! Tessera's resource-server kit: validates the JWT access tokens a Tessera server issues
//! (RFC 9068, with the RFC 8725 best practices) and guards axum handlers with them
//! (RFC 6750). No database and no server code: an API depends on this crate alone.
//!
//! A [`Verifier`] learns the issuer's keys through its metadata (RFC 8414) and JWK Set
//! (RFC 7517), caches them, and checks each token's form, header, signature and claims. The
//! extractors turn a request into a [`VerifiedToken`] or an RFC 6750 challenge.
//!
//! # Layout
//!
//! - [`verifier`]: [`Verifier`], its builder and defaults; the order of the checks.
//! - `validate`: the claims, checked after the signature (RFC 9068 section 4). Pure
//!   functions, no I/O. The compact form and JOSE header are checked before any crypto by
//!   [`tessera_proto::jws`], the parser the server reads its own tokens with too.
//! - `jwks`: JWK parsing (RFC 8037, RFC 7518 6.2), the key cache, discovery and fetching,
//!   with the refresh rate limit, the keep-keys-when-down rule, and plain http only to
//!   loopback unless [`VerifierBuilder::allow_insecure_http`].
//! - [`error`]: [`VerifyError`] (why a token was refused), [`ConfigError`],
//!   [`KeySourceError`]. No HTTP in them.
//! - `token_cache`: tokens that passed, kept whole, so that the same bytes again cost a
//!   lookup; bounded, and each entry used only while its key is published and its `exp`
//!   not passed.
//! - [`request`]: [`AccessRequest`] and [`Verifier::verify_request`], the one way a token
//!   is accepted: how it is read (RFC 6750 section 2) and its binding checked (RFC 9449
//!   section 7.1, RFC 8705 section 3). Every extractor goes through it, and so does
//!   Tessera's admin API.
//! - [`extract`]: the axum extractors [`VerifiedToken`], [`Scoped`] and [`UserToken`].
//! - [`binding`]: [`ClientCertificate`], for tokens bound to a client certificate
//!   (RFC 8705 section 3).
//! - [`dpop`]: DPoP proof checks (RFC 9449 section 4.3), used by [`request`] for DPoP-bound
//!   tokens and by Tessera's token endpoint.
//! - [`replay`]: the bounded memory of single-use values seen lately: DPoP proofs here and at
//!   the token endpoint, client assertions there.
//! - [`resource`]: protected resource metadata (RFC 9728), served by the API and named in
//!   its challenges.
//! - [`limits`]: plan limits enforced at the API (issue 27): the limits document learned
//!   from Tessera, GCRA rates and calendar quotas counted in memory or in Redis, the
//!   `RateLimit` fields, the 429 problem, and usage reported back to Tessera.
//! - [`rejection`]: [`AuthRejection`], the only place errors become HTTP answers
//!   (RFC 6750 section 3, RFC 9470 section 3, and the plan limits' 429).
//! - `otel` (with the `otel` feature, off by default): a span per token check, the child of
//!   the request's W3C `traceparent` when the application traces nothing of it, and per
//!   document fetched, which sends `traceparent` on.
//! - `fuzzing`: hidden entry points to the document readers, for `fuzz/` only.
//!
//! # Example
//!
//! ```no_run
//! use axum::routing::get;
//! use axum::Router;
//! use tessera_verify::{RequiredScope, Scoped, VerifiedToken, Verifier};
//!
//! /// The scope the quotes endpoint needs.
//! struct QuotesRead;
//! impl RequiredScope for QuotesRead {
//!     const SCOPE: &'static str = "quotes:read";
//! }
//!
//! async fn quotes(token: Scoped<QuotesRead>) -> String {
//!     format!("quotes for {}", token.client_id)
//! }
//!
//! async fn whoami(token: VerifiedToken) -> String {
//!     token.sub.clone()
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let verifier = Verifier::builder("https://auth.example.com", "market-data-api").build()?;
//!     // Optional: fail at start-up rather than on the first request if the issuer is down.
//!     verifier.refresh_keys().await?;
//!
//!     let app = Router::new()
//!         .route("/quotes", get(quotes))
//!         .route("/whoami", get(whoami))
//!         .with_state(verifier);
//!     let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//!     axum::serve(listener, app).await?;
//!     Ok(())
//! }
//! ```
//!
//! With a larger state, implement `FromRef<AppState> for Verifier` and the extractors find it.

pub mod binding;
pub mod dpop;
pub mod error;
pub mod extract;
#[doc(hidden)]
pub mod fuzzing;
mod jwks;
pub mod limits;
#[cfg(feature = "otel")]
mod otel;
pub mod rejection;
pub mod replay;
pub mod request;
pub mod resource;
#[doc(hidden)]
pub mod shared_redis;
mod token_cache;
mod validate;
pub mod verifier;

pub use binding::ClientCertificate;
pub use error::{ConfigError, KeySourceError, VerifyError};
pub use extract::{RequiredScope, Scoped, UserToken, VerifiedToken};
pub use limits::{Allowance, LimitRejection, LimitsHealth, UsageError};
pub use rejection::{AuthError, AuthRejection};
pub use request::AccessRequest;
pub use tessera_jose::verify_signature;
pub use tessera_proto::{AccessTokenClaims, Algorithm, JwkSet};
pub use token_cache::TokenCacheStats;
pub use verifier::{defaults, Verifier, VerifierBuilder};
