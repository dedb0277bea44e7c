//! The admin API's contract (docs/admin-api.md): the objects `/admin/v1` reads and answers,
//! and its RFC 9457 problem document, defined once for the three programs that speak it:
//! the server, which answers with them; the operator console, which calls the API
//! in-process and reads them; and the CLI, which reads them over `--admin-url` and prints
//! them with `--json`, whichever backend served the command.
//!
//! Times are [`Timestamp`]s in Rust and RFC 3339 strings in UTC on the wire
//! ([`serde_rfc3339`]). Days and hours of usage are labels (`YYYY-MM-DD`, `YYYY-MM-DDTHH`),
//! not instants, so they stay strings.
//!
//! With the `openapi` feature every type derives `utoipa::ToSchema`, for the server's
//! `GET /openapi.json`; without it (the client and verify kits) nothing more is compiled in.
//!
//! Inputs refuse unknown fields; an absent optional field takes its default.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::clock::{serde_rfc3339, Timestamp};
use crate::jwk::Algorithm;
use crate::{ClientId, ClientSecret};

/// The media type of a problem document (RFC 9457 section 3).
pub const PROBLEM_JSON: &str = "application/problem+json";

/// An RFC 9457 problem document: how the admin API says no. `type` is
/// `urn:tessera:problem:` and one of a short fixed list (docs/admin-api.md); `field` names
/// the request field at fault, when one is.
// Every member is optional when read (RFC 9457 section 3.1), so that a problem from
// something else on the way (a proxy) still reads; the server always sends the four.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Problem {
    /// `urn:tessera:problem:` and the kind of problem.
    #[serde(rename = "type", default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub kind: String,
    /// A short summary of the kind.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub title: String,
    /// The HTTP status code.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub status: u16,
    /// What went wrong with this request.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub detail: String,
    /// The request field at fault, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

// ---- Plans ----

/// A plan: the scopes its clients may request, their tokens' lifetime, rate and reuse.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Plan {
    /// Unique name: 1 to 64 of `a-z A-Z 0-9 _ -`.
    pub name: String,
    /// The scopes granted, each naming one API.
    pub scopes: Vec<String>,
    /// Token lifetime in seconds (`expires_in`).
    pub token_ttl: u32,
    /// Token requests per client, or none for no limit.
    pub token_rate: Option<Rate>,
    /// Reuse a client's last token while more than this percentage of its life is left.
    pub reuse_percent: Option<u8>,
    /// Whether its clients may introspect tokens issued to others.
    pub introspect_any: bool,
    /// `org` when the token rate and API limits are shared by the clients of an
    /// organization (issue 28); absent: each client's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(pattern = "^(client|org)$"))]
    pub limit_per: Option<String>,
    /// Whether its clients' tokens are bound to DPoP keys (RFC 9449).
    // Read as `allowed` when absent, as from a server older than DPoP.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub dpop: Dpop,
    /// Limits on its clients' requests to the APIs it grants, by API; an API not named is
    /// not limited. The APIs enforce them, from `GET /api-limits/{api}`.
    // Read as none when absent, as from a server older than API limits.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub api_limits: BTreeMap<String, ApiLimit>,
    /// How many clients are on the plan.
    pub clients: u64,
    /// When it was created.
    #[serde(with = "serde_rfc3339")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub created_at: Timestamp,
    /// When it last changed.
    #[serde(with = "serde_rfc3339")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub updated_at: Timestamp,
}

/// A rate: `count` requests per `period_secs`, with bursts of up to `burst`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Rate {
    /// Requests per period.
    pub count: u32,
    /// The period in seconds.
    pub period_secs: u32,
    /// How many requests may come at once after a quiet spell.
    pub burst: u32,
}

/// DPoP (RFC 9449) for a plan: `required` refuses token requests without a proof, `allowed`
/// binds a token when a proof comes, `off` ignores proofs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Dpop {
    /// A token request without a valid proof is refused.
    Required,
    /// A request with a proof gets a bound token, one without a Bearer token.
    #[default]
    Allowed,
    /// Proofs are ignored; Bearer tokens only.
    Off,
}

impl Dpop {
    /// The name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Required => "required",
            Self::Allowed => "allowed",
            Self::Off => "off",
        }
    }
}

/// All plans.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PlanList {
    /// By name.
    pub plans: Vec<Plan>,
}

/// A plan to create or replace; an absent field takes its default (`PUT` replaces).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PlanInput {
    /// The scopes granted, each naming one API: 1 to 128 of `a-z A-Z 0-9 . _ : / -`.
    #[cfg_attr(feature = "openapi", schema(min_items = 1))]
    pub scopes: Vec<String>,
    /// Token lifetime in seconds, 1 to 86400 (default 3600).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 86_400))]
    pub token_ttl: Option<u32>,
    /// Token requests per client; absent or null: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_rate: Option<RateInput>,
    /// 1 to 99; absent or null: no reuse.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 99))]
    pub reuse_percent: Option<u8>,
    /// Default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub introspect_any: Option<bool>,
    /// `client`: each client has its own token rate and API limits; `org`: the clients of
    /// an organization share them. Absent keeps the plan's (`client` for a new plan).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(pattern = "^(client|org)$"))]
    pub limit_per: Option<String>,
    /// Default `allowed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dpop: Option<Dpop>,
    /// Limits on requests to the APIs the plan grants, by API (each one of `scopes`);
    /// default none.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub api_limits: BTreeMap<String, ApiLimit>,
}

/// A plan's limits on each client's requests to one API; an absent part is no limit, and
/// `{}` none at all.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ApiLimit {
    /// Requests per client: `COUNT/UNIT` with UNIT `sec`, `min`, `hour` or `day`, e.g.
    /// `5/min` (GCRA, as the token rate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "openapi",
        schema(pattern = "^[1-9][0-9]*/(sec|min|hour|day)$", example = "5/min")
    )]
    pub rate: Option<String>,
    /// Requests a client may make at once after a quiet spell; only with `rate` (default:
    /// its COUNT).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1))]
    pub burst: Option<u32>,
    /// Requests per client per calendar period in UTC, reset at its start: `COUNT/day` or
    /// `COUNT/month`, e.g. `1000/day`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "openapi",
        schema(pattern = "^[1-9][0-9]*/(day|month)$", example = "1000/day")
    )]
    pub quota: Option<String>,
}

/// A rate to set; `burst` defaults to `count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RateInput {
    /// Requests per period.
    #[cfg_attr(feature = "openapi", schema(minimum = 1))]
    pub count: u32,
    /// The period in seconds.
    #[cfg_attr(feature = "openapi", schema(minimum = 1))]
    pub period_secs: u32,
    /// Requests at once after a quiet spell (default `count`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1))]
    pub burst: Option<u32>,
}

impl From<Rate> for RateInput {
    fn from(rate: Rate) -> Self {
        Self {
            count: rate.count,
            period_secs: rate.period_secs,
            burst: Some(rate.burst),
        }
    }
}

// ---- Usage ----

/// Usage over days, as the usage endpoints answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Usage {
    /// The first day asked for, if any.
    pub from: Option<String>,
    /// The last day asked for, if any.
    pub to: Option<String>,
    /// Per UTC day with any request.
    pub days: Vec<UsageDay>,
}

/// One UTC day of usage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct UsageDay {
    /// `YYYY-MM-DD`.
    pub day: String,
    /// Tokens issued (reused ones included).
    pub issued: u64,
    /// Requests refused after the client was identified.
    pub refused: u64,
    /// Requests to each API, as the APIs reported them (`POST /api-usage`); APIs without
    /// any are left out.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub apis: BTreeMap<String, ApiRequests>,
}

/// Requests to one API on one day.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ApiRequests {
    /// Requests the API served.
    pub requests: u64,
    /// Requests the API refused for the plan's limits.
    pub refused: u64,
}

/// All clients' token requests per UTC hour.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HourlyUsage {
    /// The last 24 hours with any request, oldest first.
    pub hours: Vec<Hour>,
}

/// One UTC hour of all clients' requests.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Hour {
    /// `YYYY-MM-DDTHH`, UTC.
    pub hour: String,
    /// Tokens issued.
    pub issued: u64,
    /// Requests refused after the client was identified.
    pub refused: u64,
}

// ---- Clients ----

/// A client; never its secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Client {
    /// The generated client identifier.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub client_id: ClientId,
    /// The plan deciding its scopes.
    pub plan: String,
    /// The organization it belongs to, if any; its plan is the organization's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub org: Option<String>,
    /// A label for people.
    pub name: String,
    /// Whether it may get tokens (its organization, if any, must be enabled too).
    pub enabled: bool,
    /// `client_secret_basic`, `client_secret_post`, `private_key_jwt` (RFC 7591 section 2),
    /// `tls_client_auth` or `self_signed_tls_client_auth` (RFC 8705 section 2).
    pub token_endpoint_auth_method: String,
    /// Until when the secret replaced by the last rotation still works.
    #[serde(default, with = "serde_rfc3339::option")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, format = DateTime))]
    pub previous_secret_valid_until: Option<Timestamp>,
    /// When it was registered.
    #[serde(with = "serde_rfc3339")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub created_at: Timestamp,
    /// When it last changed.
    #[serde(with = "serde_rfc3339")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub updated_at: Timestamp,
    /// What its certificate must match (RFC 8705 section 2.1.2), for `tls_client_auth`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_client_auth_subject_dn: Option<String>,
    /// See `tls_client_auth_subject_dn`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_client_auth_san_dns: Option<String>,
    /// See `tls_client_auth_subject_dn`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_client_auth_san_uri: Option<String>,
    /// The keys of a `self_signed_tls_client_auth` client's certificate, or of a
    /// `private_key_jwt` client's assertions: a JWK Set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub jwks: Option<serde_json::Value>,
    /// Where a `private_key_jwt` client publishes its keys (RFC 7591 section 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jwks_uri: Option<String>,
}

/// A client with its new secret: the only time the secret is shown. A client that
/// authenticates with a certificate or signed assertions has none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ClientWithSecret {
    /// The client.
    #[serde(flatten)]
    pub client: Client,
    /// The secret; only its keyed hash is stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub client_secret: Option<ClientSecret>,
}

/// A page of clients, by client id.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ClientPage {
    /// The clients of this page.
    pub clients: Vec<Client>,
    /// Pass as `cursor` for the next page; null on the last.
    pub next_cursor: Option<String>,
}

/// A client to register.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ClientInput {
    /// The plan deciding its scopes; left out (or empty) for a client of an organization,
    /// whose plan is the organization's.
    #[serde(default)]
    pub plan: String,
    /// The organization it belongs to (issue 28); its plan is then the organization's, and
    /// `plan` must be left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub org: Option<String>,
    /// A label for people (default empty), at most 256 characters.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(max_length = 256))]
    pub name: String,
    /// `client_secret_basic` (default), `client_secret_post`, `tls_client_auth` (with one
    /// of the three `tls_client_auth_*`), `self_signed_tls_client_auth` (with `jwks`) or
    /// `private_key_jwt` (with `jwks` or `jwks_uri`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "openapi",
        schema(
            pattern = "^(client_secret_basic|client_secret_post|tls_client_auth|self_signed_tls_client_auth|private_key_jwt)$"
        )
    )]
    pub token_endpoint_auth_method: Option<String>,
    /// RFC 8705 section 2.1.2: the certificate's subject DN, RFC 4514 form.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_client_auth_subject_dn: Option<String>,
    /// A DNS name among the certificate's SANs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_client_auth_san_dns: Option<String>,
    /// A URI among the certificate's SANs, e.g. a SPIFFE ID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_client_auth_san_uri: Option<String>,
    /// For `self_signed_tls_client_auth`: the certificate's public keys; for
    /// `private_key_jwt`: the keys its assertions are signed with. A JWK Set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub jwks: Option<serde_json::Value>,
    /// For `private_key_jwt`: an https URL where the client publishes its JWK Set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(max_length = 2048))]
    pub jwks_uri: Option<String>,
}

/// What to change in a client; absent fields stay.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ClientPatch {
    /// A label for people, at most 256 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(max_length = 256))]
    pub name: Option<String>,
    /// The plan to move it to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<String>,
    /// Whether it may get tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
}

// ---- Organizations (issue 28) ----

/// An organization: a customer that holds clients, all on its plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Org {
    /// Its id, 1 to 64 of `a-z A-Z 0-9 _ -`.
    pub id: String,
    /// A name for people.
    pub name: String,
    /// The plan of all its clients.
    pub plan: String,
    /// The scopes that plan grants: what its clients may request (empty when the plan is
    /// gone). An organization's own admin, who cannot read plans, learns them here.
    #[serde(default)]
    pub scopes: Vec<String>,
    /// Whether its clients may get tokens.
    pub enabled: bool,
    /// How many clients it has.
    pub clients: u64,
    /// When it was created.
    #[serde(with = "serde_rfc3339")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub created_at: Timestamp,
    /// When it last changed.
    #[serde(with = "serde_rfc3339")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub updated_at: Timestamp,
}

/// Every organization, by id.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct OrgList {
    /// The organizations.
    pub orgs: Vec<Org>,
}

/// A new organization.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct OrgInput {
    /// Its id, 1 to 64 of `a-z A-Z 0-9 _ -`.
    #[cfg_attr(feature = "openapi", schema(pattern = "^[A-Za-z0-9_-]{1,64}$"))]
    pub id: String,
    /// The plan of all its clients.
    pub plan: String,
    /// A name for people (default empty), at most 256 characters.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(max_length = 256))]
    pub name: String,
}

/// What to change in an organization; absent fields stay. A new plan or `enabled` applies
/// to all its clients.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct OrgPatch {
    /// A name for people, at most 256 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(max_length = 256))]
    pub name: Option<String>,
    /// The plan to move it, and all its clients, to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<String>,
    /// Whether its clients may get tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
}

/// A client to register in an organization, under `/admin/v1/orgs/{id}/clients` (issue 28
/// item 5): a [`ClientInput`] without `plan` and `org`, which are the organization's. A
/// body that names either is refused.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct OrgClientInput {
    /// A label for people (default empty), at most 256 characters.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(max_length = 256))]
    pub name: String,
    /// As in [`ClientInput`]: `client_secret_basic` (default), `client_secret_post`,
    /// `tls_client_auth`, `self_signed_tls_client_auth` or `private_key_jwt`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "openapi",
        schema(
            pattern = "^(client_secret_basic|client_secret_post|tls_client_auth|self_signed_tls_client_auth|private_key_jwt)$"
        )
    )]
    pub token_endpoint_auth_method: Option<String>,
    /// RFC 8705 section 2.1.2: the certificate's subject DN, RFC 4514 form.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_client_auth_subject_dn: Option<String>,
    /// A DNS name among the certificate's SANs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_client_auth_san_dns: Option<String>,
    /// A URI among the certificate's SANs, e.g. a SPIFFE ID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_client_auth_san_uri: Option<String>,
    /// For `self_signed_tls_client_auth` or `private_key_jwt`: a JWK Set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub jwks: Option<serde_json::Value>,
    /// For `private_key_jwt`: an https URL where the client publishes its JWK Set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(max_length = 2048))]
    pub jwks_uri: Option<String>,
}

impl OrgClientInput {
    /// The same registration as a [`ClientInput`] in organization `org`.
    pub fn in_org(self, org: &str) -> ClientInput {
        ClientInput {
            plan: String::new(),
            org: Some(org.to_owned()),
            name: self.name,
            token_endpoint_auth_method: self.token_endpoint_auth_method,
            tls_client_auth_subject_dn: self.tls_client_auth_subject_dn,
            tls_client_auth_san_dns: self.tls_client_auth_san_dns,
            tls_client_auth_san_uri: self.tls_client_auth_san_uri,
            jwks: self.jwks,
            jwks_uri: self.jwks_uri,
        }
    }
}

/// What to change in a client of an organization (issue 28 item 5); absent fields stay.
/// Its plan is the organization's, so there is no `plan`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct OrgClientPatch {
    /// A label for people, at most 256 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(max_length = 256))]
    pub name: Option<String>,
    /// Whether it may get tokens: `false` disables it, `true` enables it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
}

/// An organization's usage (issue 28): each client's per UTC day, and the total per day.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct OrgUsage {
    /// The organization.
    pub org: String,
    /// The first day asked for, if any.
    pub from: Option<String>,
    /// The last day asked for, if any.
    pub to: Option<String>,
    /// Its clients with any request in the days asked for, by id.
    pub clients: Vec<ClientUsage>,
    /// All its clients' requests per day.
    pub total: Vec<UsageDay>,
}

/// One client's usage per UTC day.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ClientUsage {
    /// The client.
    pub client_id: String,
    /// Its label.
    pub name: String,
    /// Per day with any request.
    pub days: Vec<UsageDay>,
}

/// A secret rotation.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Rotation {
    /// Seconds the previous secret keeps working, 0 to 31536000 (default 86400).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = 0, maximum = 31_536_000))]
    pub grace_secs: Option<i64>,
}

/// A client's last refusals, as one instance saw them.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RefusalList {
    /// Newest first, at most ten.
    pub refusals: Vec<Refusal>,
}

/// One refused token request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Refusal {
    /// When.
    #[serde(with = "serde_rfc3339")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub at: Timestamp,
    /// The OAuth error code answered (RFC 6749 section 5.2, `rate_limited`, …).
    pub error: String,
}

/// Clients refused by their plan's rate lately.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RateLimitedList {
    /// The most recently refused first.
    pub clients: Vec<RateLimited>,
}

/// A client the rate limit refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RateLimited {
    /// The client.
    pub client_id: String,
    /// Rate-limit refusals within the window (of the last ten refusals kept).
    pub refused: usize,
    /// The last one.
    #[serde(with = "serde_rfc3339")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub last_at: Timestamp,
}

// ---- Signing keys ----

/// A signing key; never its private half.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Key {
    /// The key identifier (`kid`).
    pub kid: String,
    /// `EdDSA`, `ES256`, `RS256` or `PS256`.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub alg: Algorithm,
    /// `signing` (signs now), `next` (published, signs later) or `retired` (published
    /// while tokens it signed may live).
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub status: KeyStatus,
    /// When it was created and first published.
    #[serde(with = "serde_rfc3339")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub created_at: Timestamp,
    /// From when it signs.
    #[serde(with = "serde_rfc3339")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub activates_at: Timestamp,
    /// When it stops signing: the next key's activation, if one is scheduled.
    #[serde(default, with = "serde_rfc3339::option")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, format = DateTime))]
    pub retires_at: Option<Timestamp>,
    /// When it leaves the JWK Set: a day after it retires, when the last token it signed
    /// has expired.
    #[serde(default, with = "serde_rfc3339::option")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, format = DateTime))]
    pub unpublished_at: Option<Timestamp>,
}

/// What a published key does now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KeyStatus {
    /// It signs new tokens.
    Signing,
    /// Published ahead of its activation, so that verifiers know it before they meet it.
    Next,
    /// Superseded; published until its last token has expired.
    Retired,
}

impl KeyStatus {
    /// The name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Signing => "signing",
            Self::Next => "next",
            Self::Retired => "retired",
        }
    }
}

/// All keys.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct KeyList {
    /// Oldest activation first.
    pub keys: Vec<Key>,
}

/// A key rotation.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct KeyRotation {
    /// Seconds between publication and first signature, 0 to 31536000 (default 600), so
    /// that verifiers learn the key before they meet it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = 0, maximum = 31_536_000))]
    pub activate_in_secs: Option<i64>,
    /// `EdDSA`, `ES256`, `RS256` or `PS256` (default: the server's signing algorithm).
    // A string, so that another value is refused as a bad field, not a bad body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(pattern = "^(EdDSA|ES256|RS256|PS256)$"))]
    pub alg: Option<String>,
}

// ---- Trust policies ----

/// A trust policy: tokens of `issuer` whose `aud` holds `audience`, whose `sub` matches
/// `subject` (exact, or a prefix ending in `:` or `/` and a `*`) and whose claims hold `claims`
/// authenticate as `client_id` (workload identity federation).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TrustPolicy {
    /// Unique name.
    pub name: String,
    /// The client the workload acts as.
    pub client_id: String,
    /// The external issuer (`iss`).
    pub issuer: String,
    /// Where the issuer's keys are; absent: its OpenID Connect discovery document says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jwks_uri: Option<String>,
    /// A value `aud` must hold.
    pub audience: String,
    /// The subject: exact, or a prefix and a `*`.
    pub subject: String,
    /// Claims that must have these values.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub claims: BTreeMap<String, String>,
    /// The longest life of an accepted token, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_assertion_ttl: Option<u32>,
    /// When it was created.
    #[serde(with = "serde_rfc3339")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub created_at: Timestamp,
}

/// All trust policies.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TrustPolicyList {
    /// By name.
    pub trust_policies: Vec<TrustPolicy>,
}

/// A trust policy to create or replace (its name is in the path).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct TrustPolicyInput {
    /// The client the workload acts as.
    pub client_id: String,
    /// The external issuer (`iss`): an https URL.
    pub issuer: String,
    /// Where the issuer's keys are, if not found through its OIDC discovery.
    #[serde(default)]
    pub jwks_uri: Option<String>,
    /// A value `aud` must hold.
    pub audience: String,
    /// The subject: exact, or a prefix ending in `:` or `/` followed by `*`; not `*` alone.
    pub subject: String,
    /// Claims that must have these values (for GitHub Actions, `repository_id` or
    /// `repository_owner_id` among them, unless `allow_mutable_subject`).
    #[serde(default)]
    pub claims: BTreeMap<String, String>,
    /// The longest life of an accepted token, in seconds.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(minimum = 1))]
    pub max_assertion_ttl: Option<u32>,
    /// For GitHub Actions' issuer: accept a policy that requires neither `repository_id` nor
    /// `repository_owner_id`, trusting names that can change hands. Checked when written.
    #[serde(default)]
    pub allow_mutable_subject: bool,
    /// Accept a policy on a client whose plan grants an admin scope. Checked when written.
    #[serde(default)]
    pub allow_admin: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client() -> Client {
        Client {
            client_id: ClientId::parse("c1").unwrap(),
            plan: "pro".into(),
            name: "billing".into(),
            enabled: true,
            token_endpoint_auth_method: "client_secret_basic".into(),
            previous_secret_valid_until: None,
            org: None,
            created_at: 1_795_645_359,
            updated_at: 1_795_645_360,
            tls_client_auth_subject_dn: None,
            tls_client_auth_san_dns: None,
            tls_client_auth_san_uri: None,
            jwks: None,
            jwks_uri: None,
        }
    }

    #[test]
    fn times_are_rfc3339_on_the_wire_and_timestamps_when_read() {
        let json = serde_json::to_value(client()).unwrap();
        assert_eq!(json["created_at"], "2026-11-25T22:22:39Z");
        assert_eq!(json["previous_secret_valid_until"], serde_json::Value::Null);
        assert!(
            json.get("jwks").is_none(),
            "absent options are left out: {json}"
        );
        let back: Client = serde_json::from_value(json).unwrap();
        assert_eq!(back, client());
        let bad = serde_json::json!({"at": 1_795_645_359, "error": "invalid_client"});
        assert!(serde_json::from_value::<Refusal>(bad).is_err());
    }

    #[test]
    fn a_secret_is_flattened_beside_the_client_and_redacted_in_debug() {
        let with = ClientWithSecret {
            client: client(),
            client_secret: Some(ClientSecret::new("s3cr3t")),
        };
        let json = serde_json::to_value(&with).unwrap();
        assert_eq!(json["client_secret"], "s3cr3t");
        assert_eq!(json["client_id"], "c1");
        assert!(!format!("{with:?}").contains("s3cr3t"));
        assert_eq!(
            serde_json::from_value::<ClientWithSecret>(json).unwrap(),
            with
        );
    }

    #[test]
    fn inputs_refuse_unknown_fields_and_problems_read_with_members_missing() {
        let input = serde_json::json!({"scopes": ["a"], "token_tll": 5});
        let error = serde_json::from_value::<PlanInput>(input).unwrap_err();
        assert!(error.to_string().contains("token_tll"), "{error}");
        let problem: Problem = serde_json::from_str(r#"{"title": "Bad gateway"}"#).unwrap();
        assert_eq!((problem.title.as_str(), problem.status), ("Bad gateway", 0));
        let plan = serde_json::json!({"name": "p", "scopes": [], "token_ttl": 1,
            "token_rate": null, "reuse_percent": null, "introspect_any": false, "clients": 0,
            "created_at": "2026-11-25T22:22:39Z", "updated_at": "2026-11-25T22:22:39Z"});
        let plan: Plan = serde_json::from_value(plan).unwrap();
        assert_eq!(plan.dpop, Dpop::Allowed);
    }
}

// ---- Audit events ----

/// One change made through the admin API or the console (issue 29).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AuditEvent {
    /// Its number: rising, so that `before` pages to older events.
    pub id: i64,
    /// When.
    #[serde(with = "serde_rfc3339")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub at: Timestamp,
    /// Who: the admin client's id.
    pub actor: String,
    /// What was done: `created`, `deleted`, `disabled`, `secret rotated, …`, ….
    pub action: String,
    /// To what: `plan:NAME`, `client:ID`, `key:KID` or `trust-policy:NAME`.
    pub object: String,
    /// From where: the caller's address (behind a trusted proxy, the forwarded one); empty
    /// when unknown.
    pub source: String,
    /// Through what: `admin-api` or `console`.
    pub channel: String,
}

/// A page of audit events, the newest first.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AuditEventPage {
    /// The events of this page.
    pub events: Vec<AuditEvent>,
    /// Pass as `before` for the next (older) page; null on the last.
    pub next_before: Option<i64>,
}
