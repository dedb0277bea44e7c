//! Tessera's HTTP server: the token endpoint of the OAuth 2.0 client credentials grant
//! (RFC 6749 section 4.4), issuing RFC 9068 JWT access tokens, with discovery (RFC 8414) and
//! the published keys (RFC 7517).
//!
//! # Layout
//!
//! - [`app`] builds the router from an [`AppState`]; [`run`] serves it on a bound listener
//!   until a shutdown future resolves, so tests bind port 0 (`serve.rs`: the accept loop,
//!   connection caps and keep-alive bounds; `signal.rs`: SIGINT and SIGTERM).
//! - [`tls`]: HTTPS on that listener, certificates reloaded when their files change.
//! - [`Server`] (`lifecycle.rs`): the serve lifecycle of the binary and the test kit alike
//!   (listeners, TLS watched and reloaded on SIGHUP, the issuer check, the side listeners,
//!   the checkpoint on stop).
//! - [`Config`] (`config.rs`): the settings, plain data read from a file, the environment
//!   and flags; [`Runtime`]: the issuer, clock and TLS handles beside them; [`AppState`]
//!   (`state.rs`): what every request shares and how a server is prepared; `housekeeping.rs`: usage written, limiter state
//!   and expired rows pruned, every interval and on stop.
//! - [`clock`]: where every decision by time reads it, settable in tests; `deadline.rs`:
//!   the request timeout of the admin API and the console, which never cuts a request
//!   whose write may have committed.
//! - `routes/`: the data plane, one module per endpoint family: the token endpoint,
//!   introspection, revocation, the keys and metadata, health, metrics.
//! - `control/`: the control plane, the management surface: `control/admin/` the admin
//!   API, `control/console/` the operator console over it, `control/openapi.rs` the whole
//!   surface. It depends on the domain below and on the data plane's request pieces; nothing
//!   imports it but `serve.rs`, which serves it beside the data plane ([`app`]) or on its
//!   own listener ([`admin_app`], [`Config::admin_listen`]).
//! - `grant/`: the client credentials grant as a domain call, no HTTP in it: a parsed token
//!   request and the presented credentials in, the token or a `Refusal` out, with what was
//!   decided (client, plan, rate) for the edge to record. `routes/token.rs` reads the
//!   request and writes the answer. Inside: `client_auth.rs` (client authentication, also
//!   for introspection and revocation), `assertion.rs` (`private_key_jwt`, RFC 7523
//!   section 2.2, and workload identity federation, the keys inline or fetched by
//!   `key_sets.rs`, cached, one fetch per URL at a time, failures backed off, no slot held
//!   while waiting, through `fetch.rs`, which refuses private addresses), `dpop.rs` (DPoP at
//!   the token endpoint, RFC 9449 section 5: proofs checked against the token endpoint URL,
//!   remembered against replay, in Redis when configured; nonces).
//! - Domain logic returns domain results: `grant/`, `mtls.rs` (client certificates and
//!   bound tokens, RFC 8705; `dn.rs` parses and compares the subject DNs it matches, RFC 4514
//!   and RFC 4517), `limits/` (rate limits in memory or in Redis, a `Decision`; the
//!   in-flight cap); `error/` is the only place they become HTTP (status, `WWW-Authenticate`, rate limit
//!   fields, the RFC 6749 5.2 body; `control/problem.rs` has the admin API's RFC 9457 problems).
//! - [`registry`]: plans, clients and keys held in memory, kept fresh from the store;
//!   `store_watch.rs`: the store as the server calls it, each failure counted (for `/readyz`
//!   and `/metrics`) and logged once per episode.
//! - [`keys`]: signing keys and the first key's bootstrap; [`secrets`]: the master key and
//!   its policy (the key file beside the database), secret hashing, sealing.
//! - [`telemetry`]: OpenTelemetry traces over OTLP/HTTP when the `OTEL_` variables ask for
//!   them: a span per request, children for the store, Redis and key fetches.
//! - [`logging`]: the log on stderr, written by a background thread; audit events
//!   formatted there from their raw fields.
//! - [`metrics`], [`audit`], [`usage`], `refusals.rs` (each client's last refusals, for
//!   the console): what operators see; `reuse.rs`: per-plan token reuse.
//! - [`registrar`]: every change to plans, clients, trust policies and keys, whoever asks
//!   (the admin API, the CLI, `--demo`, the test kit).
//!
//! Public are only the modules the binary, the test kit and the benchmark use.

pub mod audit;
pub mod clock;
mod config;
mod control;
mod deadline;
mod dn;
mod error;
mod fetch;
mod grant;
mod housekeeping;
pub mod keys;
mod lifecycle;
mod limits;
pub mod logging;
pub mod metrics;
mod mtls;
mod refusals;
pub mod registrar;
pub mod registry;
mod reuse;
mod routes;
pub mod secrets;
mod serve;
mod signal;
mod state;
mod store_watch;
pub mod telemetry;
pub mod tls;
pub mod usage;

pub use config::{redact_url, Config, ConfigError, Rate, Runtime, Seconds, Switch};
pub use lifecycle::{Listeners, Server, StartError};
pub use limits::FailureRates;
pub use serve::{admin_app, app, run, run_health, run_metrics, run_router};
pub use signal::shutdown_signal;
pub use state::AppState;
