//! Tessera's HTTP server: the token endpoint of the OAuth 2.0 client credentials grant
//! (RFC 6749 section 4.4), issuing RFC 9068 JWT access tokens, with discovery (RFC 8414) and
//! the published keys (RFC 7517).
//!
//! # Layout
//!
//! - [`app`] builds the router from an [`AppState`]; [`run`] serves it on a bound listener
//!   until a shutdown future resolves, so tests bind port 0 (`serve.rs`: the accept loop
//!   and the background tasks; `signal.rs`: SIGINT and SIGTERM).
//! - [`Config`] (`config.rs`): the settings; [`AppState`] (`state.rs`): what every request
//!   shares and how a server is prepared; `housekeeping.rs`: usage written, limiter state
//!   and expired rows pruned, every interval and on stop.
//! - [`clock`]: where every decision by time reads it, settable in tests.
//! - [`routes`]: one module per endpoint family.
//! - Domain logic returns domain results: [`auth`] ([`auth::AuthFailure`]), [`limits`]
//!   ([`limits::Decision`], [`limits::Busy`]); [`error`] is the only place they become
//!   HTTP (status, `WWW-Authenticate`, rate limit fields, the RFC 6749 5.2 body).
//! - [`registry`]: plans, clients and keys held in memory, kept fresh from the store.
//! - [`keys`]: signing keys and the first key's bootstrap; [`secrets`]: the master key and
//!   its policy, secret hashing, sealing.
//! - [`metrics`], [`audit`], [`usage`]: what operators see; [`reuse`]: per-plan token reuse.
//! - [`admin`]: the operations behind the CLI's `plan`, `client` and `keys` commands.

pub mod admin;
pub mod audit;
pub mod auth;
pub mod clock;
mod config;
pub mod error;
mod housekeeping;
pub mod keys;
pub mod limits;
pub mod metrics;
pub mod mtls;
pub mod refusals;
pub mod registry;
pub mod reuse;
pub mod routes;
pub mod secrets;
mod serve;
mod signal;
mod state;
pub mod tls;
pub mod usage;

pub use config::{redact_url, Config};
pub use serve::{app, run, run_health, run_metrics, run_router};
pub use signal::shutdown_signal;
pub use state::AppState;
