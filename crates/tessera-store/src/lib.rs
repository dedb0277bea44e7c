//! Tessera's storage: the registry of plans, clients and signing keys.
//!
//! # Layout
//!
//! - [`Store`]: the trait every backend implements; callers know nothing else.
//! - `sql.rs`: `SqlStore<DB>`, the one implementation of [`Store`], generic over the sqlx
//!   database: portable SQL, binding and transactions, with rows mapped to domain types in
//!   `rows.rs`.
//! - [`sqlite`]: the embedded default, one file (mode 0600), migrations in
//!   `migrations/sqlite/`, and its online backup (`SqliteStore::backup_into`).
//! - [`postgres`]: for many instances sharing one database, migrations in
//!   `migrations/postgres/`. Each backend module holds only what its database does its own
//!   way: its store type (`SqlStore` of that database), how it opens, and its `Dialect`
//!   (the SQL it words differently: how revocations are numbered, how its write-ahead log
//!   is checkpointed).
//! - [`open`] and [`open_existing`]: the one place where a database URL picks a backend.
//!
//! The token hot path never calls the store: the server holds the registry in memory and
//! polls [`Store::changes_since`] to apply the changes made by other processes, row by row.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use tessera_proto::{Algorithm, ClientId, ScopeSet};
use thiserror::Error;

pub mod postgres;
mod rows;
mod sql;
pub mod sqlite;
#[cfg(feature = "test-support")]
pub mod testing;

pub use tessera_proto::api_limits::{Period, Quota};
pub use tessera_proto::clock::Timestamp;

/// What can go wrong in a store. Knows nothing of HTTP; the server maps it at its edge.
#[derive(Debug, Error)]
pub enum StoreError {
    /// The named plan does not exist.
    #[error("no plan named {0:?}")]
    UnknownPlan(String),
    /// The record already exists.
    #[error("{0} already exists")]
    Duplicate(String),
    /// The database URL is not one this build understands.
    #[error("unsupported database URL {0:?}: use sqlite://PATH, a file path or postgres://…")]
    UnsupportedUrl(String),
    /// The backend failed.
    #[error("database error: {0}")]
    Backend(#[source] sqlx::Error),
    /// A write waited [`WRITE_LOCK_TIMEOUT`] for a lock another database session holds
    /// (PostgreSQL's `lock_timeout`, SQLSTATE 55P03): the registry's lock, which every change
    /// holds until it commits, kept by a long write or by a session left idle in
    /// transaction. Nothing was written.
    #[error(
        "the write waited {} s for a lock another database session holds (a long write, or \
         a session left idle in transaction: see pg_stat_activity); nothing was written, retry \
         later",
        WRITE_LOCK_TIMEOUT.as_secs()
    )]
    LockTimeout,
    /// PostgreSQL cancelled a statement (SQLSTATE 57014): it ran past `statement_timeout`
    /// ([`WRITE_STATEMENT_TIMEOUT`] for a write), or an operator cancelled it. Nothing was
    /// written.
    #[error(
        "PostgreSQL cancelled the statement (it ran past statement_timeout, or was cancelled); \
         nothing was written, retry later"
    )]
    Cancelled,
    /// Applying the embedded migrations failed.
    #[error("database migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// PostgreSQL did not log a new connection in and answer a first query in time;
    /// `accepted`: whether it took the TCP connection (a hung or partitioned server) or not
    /// (a firewall that drops packets).
    #[error("PostgreSQL at {server} {} within {} s", no_answer(*.accepted), .within.as_secs())]
    NoAnswer {
        /// `host:port`, or the socket's path.
        server: String,
        /// Whether a TCP connection was accepted.
        accepted: bool,
        /// How long it had.
        within: std::time::Duration,
    },
    /// The store gave no answer to one call within `within`, and the caller stopped waiting
    /// (a query on a connection that a hung server or a partition caught mid-flight has no
    /// other bound). A read returned nothing; a write may or may not have committed, as the
    /// message says, so it is not reported as written.
    #[error(
        "the store did not answer within {} s and the call was abandoned (a write's outcome \
         is unknown until the store is read again)",
        .within.as_secs()
    )]
    Unanswered {
        /// How long the caller waited.
        within: std::time::Duration,
    },
    /// PostgreSQL could not be reached or used; `cause` says why, `server` where (host and
    /// port, or the socket's path: never a password). What a pool that timed out, or a
    /// connection that failed, becomes once explained ([`Store::explain`]).
    #[error("PostgreSQL at {server} {cause}")]
    Connection {
        /// `host:port`, or the socket's path.
        server: String,
        /// Why.
        cause: ConnectionFault,
    },
    /// The SQLite file to open without creating it does not exist ([`open_existing`]).
    #[error("no database file at {}", .0.display())]
    Missing(std::path::PathBuf),
    /// Creating or writing a database file failed.
    #[error("{}: {source}", path.display())]
    File {
        /// The file.
        path: std::path::PathBuf,
        /// What failed.
        source: std::io::Error,
    },
}

/// Why PostgreSQL could not be reached or used ([`StoreError::Connection`]). Each reads
/// after "PostgreSQL at HOST:PORT".
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ConnectionFault {
    /// Nothing listens at the address: the server is down, or the port is wrong.
    #[error("refused the connection: nothing listens there")]
    Refused,
    /// The host name does not resolve to an address.
    #[error("cannot be found: the host name does not resolve ({0})")]
    NameResolution(String),
    /// The TLS handshake failed (a server without TLS, a certificate not trusted).
    #[error("failed the TLS handshake ({0})")]
    Tls(String),
    /// The server refused the login: a wrong password, an unknown role, no such database,
    /// no `pg_hba.conf` entry. The server's own words.
    #[error("refused the login ({0})")]
    Authentication(String),
    /// The connection failed or was dropped (reset, no route to the host).
    #[error("failed on the connection ({0})")]
    Broken(String),
    /// The server answers, but every connection of the pool stayed in use for `within`:
    /// queries or locks that hold them, not an outage.
    #[error(
        "answers, but all {connections} connections of the pool stayed in use for {} s",
        .within.as_secs()
    )]
    PoolBusy {
        /// The pool's size.
        connections: u32,
        /// How long a caller waited for one.
        within: std::time::Duration,
    },
}

/// What sqlx reports becomes [`StoreError::Backend`], except PostgreSQL's two timeouts,
/// which get their own variants: the write did not happen, and the caller may retry.
impl From<sqlx::Error> for StoreError {
    fn from(error: sqlx::Error) -> Self {
        let code = error
            .as_database_error()
            .and_then(|e| e.try_downcast_ref::<sqlx::postgres::PgDatabaseError>())
            .map(|e| e.code());
        match code {
            // lock_not_available
            Some("55P03") => Self::LockTimeout,
            // query_canceled
            Some("57014") => Self::Cancelled,
            _ => Self::Backend(error),
        }
    }
}

impl StoreError {
    /// Whether the store refused to wait rather than failed: another write held a lock
    /// past [`WRITE_LOCK_TIMEOUT`], or a statement was cancelled. Nothing was written, the
    /// store itself works, and the same write may succeed when retried.
    pub fn is_timeout(&self) -> bool {
        matches!(self, Self::LockTimeout | Self::Cancelled)
    }
}

fn no_answer(accepted: bool) -> &'static str {
    if accepted {
        "accepted the connection but did not answer"
    } else {
        "did not accept a connection"
    }
}

/// A shorthand for store results.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// How long a write to the registry (a plan, client, key or trust policy) or a revocation
/// waits for a lock that another database session holds before it fails with
/// [`StoreError::LockTimeout`], instead of queueing behind a stuck writer for as long as
/// that one lives (PostgreSQL's `lock_timeout`, set for the write's own transaction).
pub const WRITE_LOCK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

/// How long one statement of such a write may run before PostgreSQL cancels it
/// ([`StoreError::Cancelled`]): `statement_timeout`, for the write's own transaction. Its
/// statements each write at most 1,000 clients.
pub const WRITE_STATEMENT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// The token lifetime of a new plan: the seed's sample of one hour.
pub const DEFAULT_TOKEN_TTL: u32 = 3600;
/// The longest token lifetime a plan may have, and so the longest any token can live: a
/// superseded signing key stays published this long.
pub const MAX_TOKEN_TTL: u32 = 86_400;

/// A plan: the scopes its clients may request and the lifetime of their tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Unique name, e.g. `pro`.
    pub name: String,
    /// The scopes granted; each names one API.
    pub scopes: ScopeSet,
    /// Token lifetime in seconds, sent as `expires_in`.
    pub token_ttl: u32,
    /// How many token requests each client of the plan may make; `None` is unlimited.
    pub token_rate: Option<RateLimit>,
    /// Token reuse: while the client's last token for the same scopes has more than this
    /// percentage of its lifetime left, it is returned again instead of a new one.
    pub reuse_percent: Option<u8>,
    /// Whether its clients may introspect tokens issued to others (RFC 7662 section 4): an
    /// API that checks the tokens it receives. Otherwise a client learns only of its own.
    pub introspect_any: bool,
    /// Whether its clients' tokens are bound to a DPoP key (RFC 9449).
    pub dpop: DpopPolicy,
    /// The limits on its clients' requests to the APIs it grants, by API (each a scope of
    /// the plan); an API without an entry is not limited. The APIs enforce them
    /// (`GET /api-limits/{api}`, issue 27).
    pub api_limits: BTreeMap<String, ApiLimit>,
    /// Whose allowance the token rate and the API limits count (issue 28): each client's,
    /// or, for a client of an organization, the organization's, shared by all its clients.
    pub limit_per: LimitPer,
    /// When the plan was created.
    pub created_at: Timestamp,
    /// When the plan last changed.
    pub updated_at: Timestamp,
}

/// Whose allowance a plan's limits count ([`Plan::limit_per`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum LimitPer {
    /// Each client has its own.
    #[default]
    Client,
    /// The clients of an organization share one; a client of none has its own.
    Org,
}

impl LimitPer {
    /// The stored and displayed name: `client` or `org`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Client => "client",
            Self::Org => "org",
        }
    }

    /// The value named `client` or `org`.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "client" => Some(Self::Client),
            "org" => Some(Self::Org),
            _ => None,
        }
    }
}

/// Whether a plan's clients bind their tokens to a DPoP key (RFC 9449 section 5).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum DpopPolicy {
    /// A token request without a valid proof is refused with `invalid_dpop_proof`.
    Required,
    /// A request with a valid proof gets a DPoP-bound token, one without a Bearer token.
    #[default]
    Allowed,
    /// Proofs are ignored (RFC 9449 section 5: as a server without DPoP does); every token
    /// is a Bearer token.
    Off,
}

impl DpopPolicy {
    /// The stored and displayed name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Required => "required",
            Self::Allowed => "allowed",
            Self::Off => "off",
        }
    }
}

impl std::fmt::Display for DpopPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A DPoP policy name that is not `required`, `allowed` or `off`.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{0:?} is not required, allowed or off")]
pub struct UnknownDpopPolicy(pub String);

impl std::str::FromStr for DpopPolicy {
    type Err = UnknownDpopPolicy;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "required" => Ok(Self::Required),
            "allowed" => Ok(Self::Allowed),
            "off" => Ok(Self::Off),
            other => Err(UnknownDpopPolicy(other.to_owned())),
        }
    }
}

/// A rate: `count` requests per `period_secs`, with bursts of up to `burst` (GCRA).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RateLimit {
    /// Requests per period.
    pub count: u32,
    /// The period in seconds.
    pub period_secs: u32,
    /// How many requests may come at once after a quiet spell.
    pub burst: u32,
}

impl RateLimit {
    /// Parses `COUNT/UNIT` with UNIT one of `s`/`sec`/`second`, `m`/`min`/`minute`,
    /// `h`/`hour`, `d`/`day`. The burst defaults to the count.
    pub fn parse(spec: &str) -> Option<Self> {
        let (count, unit) = spec.trim().split_once('/')?;
        let count: u32 = count.trim().parse().ok().filter(|c| *c > 0)?;
        let period_secs = match unit.trim() {
            "s" | "sec" | "second" => 1,
            "m" | "min" | "minute" => 60,
            "h" | "hour" => 3600,
            "d" | "day" => 86_400,
            _ => return None,
        };
        Some(Self {
            count,
            period_secs,
            burst: count,
        })
    }
}

impl RateLimit {
    /// The rate as [`RateLimit::parse`] reads it, without the burst: `5/min`; a period of
    /// no named unit in seconds (`5/90s`).
    pub fn spec(&self) -> String {
        match self.period_secs {
            1 => format!("{}/sec", self.count),
            60 => format!("{}/min", self.count),
            3600 => format!("{}/hour", self.count),
            86_400 => format!("{}/day", self.count),
            other => format!("{}/{other}s", self.count),
        }
    }
}

impl std::fmt::Display for RateLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let unit = match self.period_secs {
            1 => "sec".to_owned(),
            60 => "min".to_owned(),
            3600 => "hour".to_owned(),
            86_400 => "day".to_owned(),
            other => format!("{other}s"),
        };
        write!(f, "{}/{unit} (burst {})", self.count, self.burst)
    }
}

/// A plan's limits on its clients' requests to one API: a rate (GCRA, with a burst) and a
/// hard count per calendar period in UTC; each part absent is no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct ApiLimit {
    /// Requests per client per period, with bursts.
    pub rate: Option<RateLimit>,
    /// Requests per client per UTC day or month.
    pub quota: Option<Quota>,
}

impl ApiLimit {
    /// Whether it limits nothing.
    pub fn is_unlimited(&self) -> bool {
        self.rate.is_none() && self.quota.is_none()
    }
}

/// Parses a quota: `COUNT/day` or `COUNT/month`, a count of at least 1.
pub fn parse_quota(spec: &str) -> Option<Quota> {
    let (count, period) = spec.trim().split_once('/')?;
    let limit: u64 = count.trim().parse().ok().filter(|c| *c > 0)?;
    let period = match period.trim() {
        "d" => Period::Day,
        name => Period::from_name(name)?,
    };
    Some(Quota { limit, period })
}

/// A quota as [`parse_quota`] reads it: `1000/day`.
pub fn quota_spec(quota: Quota) -> String {
    format!("{}/{}", quota.limit, quota.period.as_str())
}

/// Requests one client made to one API on one UTC day, as the API reported them
/// (`POST /api-usage`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiUsage {
    /// `YYYY-MM-DD`, UTC.
    pub day: String,
    /// The client.
    pub client_id: String,
    /// The API.
    pub api: String,
    /// Requests the API served.
    pub requests: u64,
    /// Requests the API refused for the plan's limits.
    pub refused: u64,
}

/// One change made through the admin API (or the console, which calls it): who made it,
/// what it did to what, when and from where; kept by the store for the activity page and
/// `GET /admin/v1/audit-events` (issue 29), within a retention period and a count
/// ([`Store::prune_audit_events`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AuditEvent {
    /// Its number, rising with each event the store keeps (0 in one not stored yet).
    pub id: i64,
    /// When.
    pub at: Timestamp,
    /// Who: the admin client's id (a person once sign-in names people).
    pub actor: String,
    /// What was done: `created`, `updated`, `deleted`, `rotated secret`, …
    pub action: String,
    /// To what: `plan:NAME`, `client:ID`, `key:KID`, `trust-policy:NAME`.
    pub object: String,
    /// From where: the caller's address (see the server's `client_ip`), empty when unknown.
    pub source: String,
    /// Through what: `admin-api` or `console`.
    pub channel: String,
}

/// Which audit events [`Store::audit_events`] reads: those whose actor, action, object,
/// source or channel contains `text` (any case; empty matches all), numbered below
/// `before` (all when `None`), the newest first, at most `limit`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AuditQuery {
    /// A text some field contains; empty for all.
    pub text: String,
    /// Only events numbered below this one (the next page of older events).
    pub before: Option<i64>,
    /// The most events read.
    pub limit: u32,
}

/// Token requests of one client on one UTC day.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Usage {
    /// The client.
    pub client_id: String,
    /// `YYYY-MM-DD`, UTC.
    pub day: String,
    /// Tokens issued (reused ones included).
    pub issued: u64,
    /// Requests refused after the client was identified.
    pub refused: u64,
}

/// A revoked token, remembered until `exp`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Revoked {
    /// The token's `jti`.
    pub jti: String,
    /// The client it was issued to.
    pub client_id: String,
    /// When it would have expired.
    pub exp: Timestamp,
}

/// How a client authenticates at the token endpoint (RFC 6749 section 2.3.1, RFC 7591 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthMethod {
    /// HTTP Basic, the default and the seed's method.
    ClientSecretBasic,
    /// `client_id` and `client_secret` in the form body.
    ClientSecretPost,
    /// A client certificate from the configured CA naming the client (RFC 8705 2.1).
    TlsClientAuth,
    /// A self-signed client certificate whose key the client registered (RFC 8705 2.2).
    SelfSignedTlsClientAuth,
    /// A JWT the client signs with its own private key (RFC 7523 section 2.2, OpenID Connect
    /// Core section 9); its public keys are registered inline or at a `jwks_uri`.
    PrivateKeyJwt,
}

impl AuthMethod {
    /// The RFC 7591 name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ClientSecretBasic => "client_secret_basic",
            Self::ClientSecretPost => "client_secret_post",
            Self::TlsClientAuth => "tls_client_auth",
            Self::SelfSignedTlsClientAuth => "self_signed_tls_client_auth",
            Self::PrivateKeyJwt => "private_key_jwt",
        }
    }

    /// Reads an RFC 7591 name.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "client_secret_basic" => Some(Self::ClientSecretBasic),
            "client_secret_post" => Some(Self::ClientSecretPost),
            "tls_client_auth" => Some(Self::TlsClientAuth),
            "self_signed_tls_client_auth" => Some(Self::SelfSignedTlsClientAuth),
            "private_key_jwt" => Some(Self::PrivateKeyJwt),
            _ => None,
        }
    }

    /// Whether the client proves itself with a key of its own (a certificate or a signed
    /// assertion) rather than a secret.
    pub fn is_keyed(self) -> bool {
        self.is_mtls() || self == Self::PrivateKeyJwt
    }

    /// Whether the client proves itself with a certificate rather than a secret.
    pub fn is_mtls(self) -> bool {
        matches!(self, Self::TlsClientAuth | Self::SelfSignedTlsClientAuth)
    }
}

/// How a client proves who it is at the token endpoint (RFC 6749 section 2.3), with what the
/// proof is checked against. Its [`AuthMethod`] says how it presents it (a secret in Basic or
/// in the body, say).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credential {
    /// A secret (`client_secret_basic`, `client_secret_post`). The secret itself is never
    /// stored, only its keyed hash.
    Secret {
        /// HMAC-SHA-256 of the current secret.
        hash: Vec<u8>,
        /// The previous secret's hash and the moment it stops being accepted, after a
        /// rotation.
        previous: Option<(Vec<u8>, Timestamp)>,
    },
    /// A client certificate (`tls_client_auth`, `self_signed_tls_client_auth`, RFC 8705
    /// section 2): what it must match.
    Certificate(CertificateMatch),
    /// JWTs signed with the client's own keys (`private_key_jwt`, RFC 7523 section 2.2):
    /// where those keys are.
    Keys(KeySource),
}

impl Credential {
    /// A secret's, without a previous one.
    pub fn secret(hash: Vec<u8>) -> Self {
        Self::Secret {
            hash,
            previous: None,
        }
    }

    /// When the previous secret stops being accepted, after a rotation.
    pub fn previous_secret_until(&self) -> Option<Timestamp> {
        match self {
            Self::Secret {
                previous: Some((_, until)),
                ..
            } => Some(*until),
            _ => None,
        }
    }
}

/// What a client's certificate must match (RFC 8705 section 2; the names of its client
/// metadata, section 2.1.2 and RFC 7591).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CertificateMatch {
    /// `tls_client_auth_subject_dn`: the subject DN, RFC 4514 form.
    SubjectDn(String),
    /// `tls_client_auth_san_dns`: a DNS name in the subject alternative names.
    SanDns(String),
    /// `tls_client_auth_san_uri`: a URI there, e.g. a SPIFFE ID.
    SanUri(String),
    /// `jwks`: for a self-signed certificate, the public keys it may carry (a JWK Set).
    Jwks(String),
}

/// Where a `private_key_jwt` client's public keys are (RFC 7523 section 2.2; RFC 7591
/// section 2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    /// `jwks`: the keys themselves, a JWK Set.
    Jwks(String),
    /// `jwks_uri`: where the client publishes them.
    JwksUri(String),
}

/// A registered client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Client {
    /// The generated client identifier.
    pub id: ClientId,
    /// The plan deciding its scopes and token lifetime.
    pub plan: String,
    /// A label for people.
    pub label: String,
    /// How the client authenticates.
    pub auth_method: AuthMethod,
    /// What it proves itself with.
    pub credential: Credential,
    /// A disabled client gets `invalid_client`.
    pub enabled: bool,
    /// The organization it belongs to, if any (issue 28): its plan is then the
    /// organization's.
    pub org: Option<String>,
    /// Whether its organization is enabled (`true` without one): a client of a disabled
    /// organization gets `invalid_client`. The store writes it, with the plan, in the
    /// transaction that changes the organization ([`Store::update_org`]).
    pub org_enabled: bool,
    /// When the client was created.
    pub created_at: Timestamp,
    /// When the client last changed.
    pub updated_at: Timestamp,
}

impl Client {
    /// Whether it may get tokens: it and its organization are enabled.
    pub fn active(&self) -> bool {
        self.enabled && self.org_enabled
    }
}

/// An organization (issue 28): a customer that holds clients, all on its plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Org {
    /// Unique id, 1 to 64 of `a-z A-Z 0-9 _ -`, e.g. `acme`.
    pub id: String,
    /// A name for people, e.g. `Acme Trading`.
    pub name: String,
    /// The plan of all its clients.
    pub plan: String,
    /// A disabled organization's clients get `invalid_client`.
    pub enabled: bool,
    /// When it was created.
    pub created_at: Timestamp,
    /// When it last changed.
    pub updated_at: Timestamp,
}

/// What [`Store::delete_org`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OrgRemoval {
    /// The organization is gone, with its clients when asked.
    Removed,
    /// No organization has that id.
    Unknown,
    /// It has clients, and they were not to be deleted with it: it was kept.
    HasClients,
}

/// A signing key pair; the private half sealed under the operator's master key.
#[derive(Clone, PartialEq, Eq)]
pub struct SigningKey {
    /// The key identifier (`kid`).
    pub kid: String,
    /// The algorithm it signs with.
    pub alg: Algorithm,
    /// The public JWK, as JSON.
    pub public_jwk: String,
    /// The private key (PKCS#8), encrypted.
    pub private_sealed: Vec<u8>,
    /// When the key was created and first published.
    pub created_at: Timestamp,
    /// From when the key signs: published first, so verifiers know it before they meet it.
    pub activates_at: Timestamp,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey")
            .field("kid", &self.kid)
            .field("alg", &self.alg)
            .field("private_sealed", &"[redacted]")
            .field("created_at", &self.created_at)
            .field("activates_at", &self.activates_at)
            .finish()
    }
}

/// What [`Store::delete_plan`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlanRemoval {
    /// The plan is gone.
    Removed,
    /// No plan has that name.
    Unknown,
    /// Clients are on the plan; it was kept.
    InUse,
}

/// The answer to an admin request sent with an `Idempotency-Key`, remembered so that a
/// retry gets it again. `answer` is sealed by the caller: it may hold a client secret.
#[derive(Clone, PartialEq, Eq)]
pub struct IdempotentAnswer {
    /// Who sent the request (an admin client id): keys are per sender.
    pub owner: String,
    /// The `Idempotency-Key`.
    pub key: String,
    /// A digest of the request, so that the key reused for another request is noticed.
    pub fingerprint: Vec<u8>,
    /// The response, sealed.
    pub answer: Vec<u8>,
    /// When it was first answered.
    pub created_at: Timestamp,
}

impl std::fmt::Debug for IdempotentAnswer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdempotentAnswer")
            .field("owner", &self.owner)
            .field("key", &self.key)
            .field("answer", &"[redacted]")
            .field("created_at", &self.created_at)
            .finish()
    }
}

/// What changed in the registry after a sequence number ([`Store::changes_since`]): each
/// changed row as it is now, or `None` where it was deleted (a tombstone). A row changed
/// several times appears once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    /// The sequence number read through: the `after` of the next call.
    pub through: i64,
    /// Whether more changes follow `through`: the call returned as many as its limit.
    pub more: bool,
    /// Changed plans, by name.
    pub plans: Vec<(String, Option<Plan>)>,
    /// Changed clients, by id.
    pub clients: Vec<(ClientId, Option<Client>)>,
    /// Changed signing keys, by kid.
    pub keys: Vec<(String, Option<SigningKey>)>,
}

impl Changes {
    /// How many rows changed.
    pub fn len(&self) -> usize {
        self.plans.len() + self.clients.len() + self.keys.len()
    }

    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A trust policy (workload identity federation): tokens of an external `issuer` whose
/// `aud` holds `audience`, whose `sub` matches `subject` (exact, or a prefix with a trailing
/// `*`) and whose claims hold `claims` authenticate as client `client_id`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustPolicy {
    /// Unique name, e.g. `payments-prod`.
    pub name: String,
    /// The client the workload acts as.
    pub client_id: ClientId,
    /// The external issuer, compared exactly with `iss`.
    pub issuer: String,
    /// Where the issuer's keys are; `None`: its OIDC discovery document says.
    pub jwks_uri: Option<String>,
    /// A value `aud` must hold.
    pub audience: String,
    /// The subject: exact, or a prefix followed by `*`.
    pub subject: String,
    /// Claims that must have these values, as a JSON object of strings.
    pub claims: String,
    /// The longest life an accepted token may have, in seconds.
    pub max_assertion_ttl: Option<u32>,
    /// When the policy was made.
    pub created_at: Timestamp,
}

/// The registry's storage. One implementation serves every backend (`sql.rs`); see [`open`].
#[async_trait]
pub trait Store: Send + Sync + std::fmt::Debug {
    /// A counter that grows with every change to plans, clients or keys, by any process.
    async fn revision(&self) -> Result<i64>;

    /// Creates a plan, or replaces the scopes and lifetime of an existing one.
    async fn put_plan(&self, plan: &Plan) -> Result<()>;
    /// All plans, by name.
    async fn plans(&self) -> Result<Vec<Plan>>;
    /// Removes a plan no client is on.
    async fn delete_plan(&self, name: &str) -> Result<PlanRemoval>;
    /// How many clients each plan has, by plan name (plans without clients left out).
    async fn clients_per_plan(&self) -> Result<Vec<(String, u64)>>;

    /// Adds a client; its plan must exist.
    async fn insert_client(&self, client: &Client) -> Result<()> {
        self.insert_clients(std::slice::from_ref(client)).await
    }
    /// Adds several clients in one transaction: all of them or none. Many clients are
    /// better written a few thousand at a time, each batch in a call of its own (as
    /// `Registrar::create_clients` in tessera-server does): a transaction holds the registry's
    /// lock from its first client until it commits, and every other write waits for it.
    async fn insert_clients(&self, clients: &[Client]) -> Result<()> {
        self.insert_clients_once(clients, None).await.map(|_| ())
    }
    /// All clients, oldest first.
    async fn clients(&self) -> Result<Vec<Client>>;
    /// One client.
    async fn client(&self, id: &ClientId) -> Result<Option<Client>>;
    /// Up to `limit` clients with an id above `after`, by id (a stable order to page
    /// through while clients come and go), only those on `plan` if given: a page, read
    /// without holding every client at once.
    async fn clients_page(
        &self,
        plan: Option<&str>,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Client>>;
    /// [`insert_clients`](Store::insert_clients) and, if given, the answer to remember for a
    /// retry, in one transaction. If an answer is already remembered under the same owner
    /// and key, nothing is written and that answer is returned.
    async fn insert_clients_once(
        &self,
        clients: &[Client],
        answer: Option<&IdempotentAnswer>,
    ) -> Result<Option<IdempotentAnswer>>;
    /// The answer remembered under `owner` and `key`.
    async fn idempotent_answer(&self, owner: &str, key: &str) -> Result<Option<IdempotentAnswer>>;
    /// Forgets answers first given before `before`.
    async fn prune_idempotent_answers(&self, before: Timestamp) -> Result<()>;
    /// Replaces a client's plan, label, secrets, method and flag. `Ok(false)` if unknown.
    async fn update_client(&self, client: &Client) -> Result<bool>;
    /// Removes a client. `Ok(false)` if unknown.
    async fn delete_client(&self, id: &ClientId) -> Result<bool>;

    /// Adds an organization; its plan must exist.
    async fn insert_org(&self, org: &Org) -> Result<()>;
    /// All organizations, by id.
    async fn orgs(&self) -> Result<Vec<Org>>;
    /// One organization.
    async fn org(&self, id: &str) -> Result<Option<Org>>;
    /// Replaces an organization's name, plan and flag and, in the same transaction, the
    /// plan and `org_enabled` of each of its clients whose differ, so that every instance
    /// learns of the change from the clients' change log. `Ok(false)` if unknown.
    async fn update_org(&self, org: &Org) -> Result<bool>;
    /// Removes an organization that has no clients or, with `with_clients`, its clients
    /// with it, in one transaction.
    async fn delete_org(&self, id: &str, with_clients: bool) -> Result<OrgRemoval>;
    /// How many clients each organization has, by id (those without clients left out).
    async fn clients_per_org(&self) -> Result<Vec<(String, u64)>>;
    /// The clients of one organization, by id.
    async fn org_clients(&self, id: &str) -> Result<Vec<Client>>;

    /// Creates or replaces a trust policy; its client must exist.
    async fn put_trust_policy(&self, policy: &TrustPolicy) -> Result<()>;
    /// All trust policies, by name.
    async fn trust_policies(&self) -> Result<Vec<TrustPolicy>>;
    /// The trust policies of one client, by name.
    async fn trust_policies_of(&self, client: &ClientId) -> Result<Vec<TrustPolicy>>;
    /// Removes a trust policy. `Ok(false)` if unknown.
    async fn delete_trust_policy(&self, name: &str) -> Result<bool>;

    /// Adds a signing key.
    async fn insert_key(&self, key: &SigningKey) -> Result<()>;
    /// All signing keys, oldest activation first.
    async fn keys(&self) -> Result<Vec<SigningKey>>;
    /// Removes a key that is no longer published.
    async fn delete_key(&self, kid: &str) -> Result<bool>;

    /// The number of the latest change to a plan, client or key (0 before the first): where
    /// a reader that has just read everything starts reading [`changes`](Store::changes_since).
    async fn latest_change(&self) -> Result<i64>;
    /// The plans, clients and keys changed after change number `after`, as they are now,
    /// reading at most `limit` changes. Every change is numbered in the transaction that
    /// makes it, and numbers commit in order, so a reader that passes each answer's
    /// [`through`](Changes::through) as its next `after` misses none. `Ok(None)` when
    /// changes after `after` were pruned since ([`prune_changes`](Store::prune_changes)):
    /// the reader must read everything again.
    async fn changes_since(&self, after: i64, limit: u32) -> Result<Option<Changes>>;
    /// Forgets the changes numbered up to `through`; a reader that had not read them gets
    /// `None` from [`changes_since`](Store::changes_since).
    async fn prune_changes(&self, through: i64) -> Result<()>;

    /// Remembers a revoked token (RFC 7009); revoking twice is harmless. Revocations do not
    /// bump the [`revision`](Store::revision): servers read them incrementally with
    /// [`revoked_since`](Store::revoked_since), so that one revocation never reloads the
    /// whole registry.
    async fn revoke(&self, revoked: &Revoked) -> Result<()>;
    /// Revoked tokens not expired by `now` whose sequence number is above `after`, in
    /// sequence order, each with its sequence number.
    async fn revoked_since(&self, after: i64, now: Timestamp) -> Result<Vec<(i64, Revoked)>>;
    /// Forgets revocations of tokens that have expired by `now`.
    async fn prune_revoked(&self, now: Timestamp) -> Result<()>;

    /// Whether nothing was ever stored: no plan, client or signing key, and no check value
    /// (a freshly migrated schema). A database whose first start stopped after it was tied
    /// to its master key (see [`check_value`](Store::check_value)) is not empty.
    async fn is_empty(&self) -> Result<bool>;

    /// The value stored under `name`, storing `proposed` first if there is none: a check
    /// value that ties the database to its master key.
    async fn check_value(&self, name: &str, proposed: &[u8]) -> Result<Vec<u8>>;

    /// Stores `value` under `name` and returns the value it replaced, if any: a note the
    /// database keeps about itself, such as the issuer a server last started with. (Read
    /// and then written: two callers at once may both get the older value.)
    async fn replace_value(&self, name: &str, value: &[u8]) -> Result<Option<Vec<u8>>>;

    /// Moves what the write-ahead log holds into the database file and empties the log,
    /// so that after a clean stop the file alone holds every change (SQLite; a backend
    /// without such a log has nothing to do). `Ok(false)` when readers in other processes
    /// kept part of the log: it stays durable there and is moved later.
    async fn checkpoint(&self) -> Result<bool>;

    /// Adds counts to the usage table.
    async fn add_usage(&self, usage: &[Usage]) -> Result<()>;
    /// Adds the counts of all clients in one UTC hour (`YYYY-MM-DDTHH`).
    async fn add_hourly_usage(&self, hour: &str, issued: u64, refused: u64) -> Result<()>;
    /// All clients' counts per UTC hour from `from` on, oldest first: (hour, issued, refused).
    async fn hourly_usage(&self, from: &str) -> Result<Vec<(String, u64, u64)>>;
    /// Forgets the hours before `before`.
    async fn prune_hourly_usage(&self, before: &str) -> Result<()>;
    /// One client's usage, by day.
    async fn usage(&self, client_id: &ClientId) -> Result<Vec<Usage>>;
    /// The usage of the clients now on `plan`, summed per day (`client_id` left empty).
    async fn plan_usage(&self, plan: &str) -> Result<Vec<Usage>>;
    /// The usage of the clients now in organization `org`, per client and day, by day.
    async fn org_usage(&self, org: &str) -> Result<Vec<Usage>>;
    /// Their API requests per client, day and API, by day.
    async fn org_api_usage(&self, org: &str) -> Result<Vec<ApiUsage>>;
    /// Adds the API requests of report `batch` (`POST /api-usage`) to those stored, in one
    /// transaction, unless that batch was counted before: `false` then, and nothing is
    /// written.
    async fn add_api_usage(
        &self,
        batch: &str,
        received_at: Timestamp,
        usage: &[ApiUsage],
    ) -> Result<bool>;
    /// Forgets the report batches received before `before` (a batch sent again after that
    /// would count again).
    async fn prune_api_usage_batches(&self, before: Timestamp) -> Result<()>;
    /// One client's API requests per UTC day and API, oldest first.
    async fn api_usage(&self, client_id: &ClientId) -> Result<Vec<ApiUsage>>;
    /// The API requests of a plan's clients per UTC day and API (`client_id` empty).
    async fn plan_api_usage(&self, plan: &str) -> Result<Vec<ApiUsage>>;

    /// A handle on this store whose first write to the registry that changes something (a
    /// plan, client, organization, trust policy or key put or removed) also keeps `event`,
    /// in the same transaction: the change and its record commit together or not at all
    /// (issue 29). An event without an object is given what the write made (`key:KID` for a
    /// new key). Reads and other writes go to this store as they are.
    fn audited(&self, event: AuditEvent) -> Arc<dyn Store>;
    /// The event handed to [`audited`](Store::audited) that no write has kept, taken (the
    /// change it was for went through no write that keeps one); `None` once kept.
    fn unkept_audit(&self) -> Option<AuditEvent>;
    /// Keeps an audit event (its `id` is the store's to give).
    async fn add_audit_event(&self, event: &AuditEvent) -> Result<()>;
    /// The audit events `query` selects, the newest first.
    async fn audit_events(&self, query: &AuditQuery) -> Result<Vec<AuditEvent>>;
    /// Forgets the audit events from before `before`, and all but the newest `keep`.
    async fn prune_audit_events(&self, before: Timestamp, keep: u64) -> Result<()>;

    /// `error`, from a call to this store, with its cause named where the driver's own
    /// error does not: a pool that timed out waiting for a connection is probed (is the
    /// name resolved, does the address take a TCP connection, does the server log in and
    /// answer, within a second each) and becomes [`StoreError::Connection`] or
    /// [`StoreError::NoAnswer`]; a connection that failed (refused, TLS, login, reset)
    /// becomes [`StoreError::Connection`] with the server's address. Anything else comes
    /// back as it is, as it does from a backend without a network (SQLite).
    async fn explain(&self, error: StoreError) -> StoreError {
        error
    }
}

/// Opens the store a URL names, creating and migrating it when needed.
///
/// `postgres://…` (or `postgresql://…`) selects PostgreSQL; `sqlite://PATH`, `sqlite:PATH` or
/// a bare file path select the embedded SQLite backend.
pub async fn open(url: &str) -> Result<Arc<dyn Store>> {
    open_with(url, true).await
}

/// Opens the store a URL names like [`open`], but never creates an SQLite file: a missing
/// one is [`StoreError::Missing`]. For the commands that only read, so that a mistyped path
/// leaves nothing behind. (An existing database is still migrated; PostgreSQL opens as with
/// [`open`], since a database there is never created.)
pub async fn open_existing(url: &str) -> Result<Arc<dyn Store>> {
    open_with(url, false).await
}

async fn open_with(url: &str, create: bool) -> Result<Arc<dyn Store>> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return Ok(Arc::new(postgres::PostgresStore::open(url).await?));
    }
    if url.contains("://") && !url.starts_with("sqlite://") {
        return Err(StoreError::UnsupportedUrl(url.to_owned()));
    }
    Ok(Arc::new(if create {
        sqlite::SqliteStore::open(url).await?
    } else {
        sqlite::SqliteStore::open_existing(url).await?
    }))
}

#[cfg(test)]
mod contract;
