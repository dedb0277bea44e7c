//! What the admin commands work on, one shape for both backends: the objects of the admin
//! API (docs/admin-api.md), which the HTTP backend reads as they come, the database backend
//! builds from the store's rows, and `--json` prints as they are.

use serde::{Deserialize, Serialize};
use tessera_proto::clock::{serde_rfc3339, Timestamp};
use tessera_proto::{Algorithm, ClientId, ClientSecret};
use tessera_store::RateLimit;

/// A plan: `Plan` of the admin API.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Plan {
    pub(crate) name: String,
    pub(crate) scopes: Vec<String>,
    /// Token lifetime in seconds.
    pub(crate) token_ttl: u32,
    pub(crate) token_rate: Option<Rate>,
    pub(crate) reuse_percent: Option<u8>,
    pub(crate) introspect_any: bool,
    /// DPoP for its clients: `required`, `allowed` or `off`.
    #[serde(default = "allowed")]
    pub(crate) dpop: String,
    /// How many clients are on it.
    pub(crate) clients: u64,
    #[serde(with = "serde_rfc3339")]
    pub(crate) created_at: Timestamp,
    #[serde(with = "serde_rfc3339")]
    pub(crate) updated_at: Timestamp,
}

fn allowed() -> String {
    "allowed".to_owned()
}

/// A trust policy: `TrustPolicyView` of the admin API.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct TrustPolicy {
    pub(crate) name: String,
    pub(crate) client_id: String,
    pub(crate) issuer: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) jwks_uri: Option<String>,
    pub(crate) audience: String,
    pub(crate) subject: String,
    #[serde(default)]
    pub(crate) claims: std::collections::BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) max_assertion_ttl: Option<u32>,
    #[serde(with = "serde_rfc3339")]
    pub(crate) created_at: Timestamp,
}

impl From<tessera_store::TrustPolicy> for TrustPolicy {
    fn from(p: tessera_store::TrustPolicy) -> Self {
        Self {
            name: p.name,
            client_id: p.client_id.to_string(),
            issuer: p.issuer,
            jwks_uri: p.jwks_uri,
            audience: p.audience,
            subject: p.subject,
            claims: serde_json::from_str(&p.claims).unwrap_or_default(),
            max_assertion_ttl: p.max_assertion_ttl,
            created_at: p.created_at,
        }
    }
}

/// Token requests per client: `Rate` of the admin API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Rate {
    pub(crate) count: u32,
    pub(crate) period_secs: u32,
    pub(crate) burst: u32,
}

impl From<RateLimit> for Rate {
    fn from(r: RateLimit) -> Self {
        Self {
            count: r.count,
            period_secs: r.period_secs,
            burst: r.burst,
        }
    }
}

impl From<Rate> for RateLimit {
    fn from(r: Rate) -> Self {
        Self {
            count: r.count,
            period_secs: r.period_secs,
            burst: r.burst,
        }
    }
}

/// A client, without its secret: `Client` of the admin API.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Client {
    pub(crate) client_id: ClientId,
    pub(crate) plan: String,
    pub(crate) name: String,
    pub(crate) enabled: bool,
    pub(crate) token_endpoint_auth_method: String,
    /// Until when the secret replaced by the last rotation still works.
    #[serde(with = "serde_rfc3339::option")]
    pub(crate) previous_secret_valid_until: Option<Timestamp>,
    #[serde(with = "serde_rfc3339")]
    pub(crate) created_at: Timestamp,
    #[serde(with = "serde_rfc3339")]
    pub(crate) updated_at: Timestamp,
}

/// A client with the secret it was just given, the only time it is shown:
/// `ClientWithSecret` of the admin API.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ClientWithSecret {
    #[serde(flatten)]
    pub(crate) client: Client,
    /// None for a client that authenticates with a certificate (RFC 8705).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) client_secret: Option<ClientSecret>,
}

/// A client to register: `ClientInput` of the admin API.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct NewClient {
    pub(crate) plan: String,
    pub(crate) name: String,
    pub(crate) token_endpoint_auth_method: &'static str,
    /// RFC 8705 section 2.1.2, for `tls_client_auth`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) tls_client_auth_subject_dn: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) tls_client_auth_san_dns: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) tls_client_auth_san_uri: Option<String>,
    /// For `self_signed_tls_client_auth` and `private_key_jwt`: a JWK Set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) jwks: Option<serde_json::Value>,
    /// For `private_key_jwt`: where the client publishes its keys.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) jwks_uri: Option<String>,
}

impl NewClient {
    /// What a certificate client's certificate must match, if one was given.
    pub(crate) fn certificate(&self) -> Option<tessera_store::CertificateMatch> {
        use tessera_store::CertificateMatch as M;
        (self.tls_client_auth_subject_dn.clone().map(M::SubjectDn))
            .or_else(|| self.tls_client_auth_san_dns.clone().map(M::SanDns))
            .or_else(|| self.tls_client_auth_san_uri.clone().map(M::SanUri))
            .or_else(|| self.jwks.as_ref().map(|j| M::Jwks(j.to_string())))
            .or_else(|| self.jwks_uri.clone().map(M::JwksUri))
    }
}

/// A change to a client; `None` leaves a field as it is: `ClientPatch` of the admin API.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct ClientPatch {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) plan: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) enabled: Option<bool>,
}

/// A client's token requests on one UTC day: an element of `days` in `Usage` of the admin API.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct UsageDay {
    /// `YYYY-MM-DD`.
    pub(crate) day: String,
    pub(crate) issued: u64,
    pub(crate) refused: u64,
}

/// A signing key: `Key` of the admin API.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Key {
    pub(crate) kid: String,
    pub(crate) alg: Algorithm,
    pub(crate) status: KeyStatus,
    #[serde(with = "serde_rfc3339")]
    pub(crate) created_at: Timestamp,
    /// When it signs (or signed) its first token.
    #[serde(with = "serde_rfc3339")]
    pub(crate) activates_at: Timestamp,
}

/// What a published key does now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum KeyStatus {
    /// It signs new tokens.
    Signing,
    /// Published ahead of its activation, so that verifiers know it before they meet it.
    Next,
    /// Superseded; published until its last token has expired.
    Retired,
}

impl KeyStatus {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Signing => "signing",
            Self::Next => "next",
            Self::Retired => "retired",
        }
    }
}
