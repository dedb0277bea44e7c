//! Wire and domain types shared by every part of Tessera: the server, the client kit and the
//! resource-server kit. Nothing here does I/O, HTTP or SQL; it is the OAuth vocabulary.
//!
//! # Layout
//!
//! - [`api_limits`]: the plans' request limits an API learns from Tessera, and the usage it
//!   reports back (issue 27).
//! - [`clock`]: [`Clock`], where every decision by time reads it, and [`ManualClock`] for
//!   tests.
//! - [`form`]: the strict `application/x-www-form-urlencoded` decoder (RFC 6749 Appendix B).
//! - [`scope`]: [`Scope`] and [`ScopeSet`], the scope grammar of RFC 6749 section 3.3.
//! - [`client`]: [`ClientId`] and [`ClientSecret`], and HTTP Basic credentials (RFC 6749 2.3.1).
//! - [`token`]: the token request (RFC 6749 4.4.2) and response (RFC 6749 5.1).
//! - [`error`]: the error codes of RFC 6749 5.2, RFC 6750 3.1, RFC 8707, RFC 9449 and
//!   RFC 9470, and the error body.
//! - [`claims`]: the JWT access token claims of RFC 9068.
//! - [`jwk`]: signing algorithms, JSON Web Keys and key sets, public keys and their RFC 7638
//!   thumbprint input (RFC 7517, RFC 7518, RFC 7638, RFC 8037).
//! - [`jws`]: the one reader of access tokens in compact JWS form: form and JOSE header
//!   checked before any crypto (RFC 7515, RFC 8725, RFC 9068 section 4).
//! - [`dpop`]: DPoP proofs (RFC 9449): their header and claims and the `htu` comparison
//!   form; the signature is the caller's.
//! - [`metadata`]: authorization server metadata (RFC 8414).
//! - [`admin`]: the admin API's objects and its RFC 9457 problem document, shared by the
//!   server, the operator console and the CLI (with the `openapi` feature, their schemas).

pub mod admin;
pub mod api_limits;
pub mod claims;
pub mod client;
pub mod clock;
pub mod dpop;
pub mod error;
pub mod form;
pub mod jwk;
pub mod jws;
pub mod metadata;
pub mod scope;
pub mod token;

pub use claims::{AccessTokenClaims, Confirmation};
pub use client::{BasicCredentials, ClientId, ClientSecret};
pub use clock::{Clock, ManualClock};
pub use error::{ErrorCode, ErrorResponse};
pub use jwk::{Algorithm, Jwk, JwkSet, PublicKey};
pub use metadata::AuthorizationServerMetadata;
pub use scope::{Scope, ScopeSet};
pub use token::{GrantType, TokenRequest, TokenResponse};
