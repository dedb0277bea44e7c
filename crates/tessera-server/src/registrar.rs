//! The registrar: every change to the registry of plans, clients, trust policies and
//! signing keys goes through here, whoever asks for it: the admin API (and the console over
//! it), the CLI's `plan`, `client`, `keys` and `trust` commands on the database, `serve
//! --demo`, the test kit and the benchmark. Each operation validates everything before it
//! writes, and writes once, so that bad input leaves nothing behind. The registry in memory
//! (`registry.rs`) learns of a change from the store's change log.

use std::collections::BTreeMap;
use std::ops::ControlFlow;

use tessera_proto::clock::Timestamp;
use tessera_proto::scope::ScopeError;
use tessera_proto::{Algorithm, ClientId, ClientSecret, ScopeSet};
use tessera_store::{
    ApiLimit, AuthMethod, CertificateMatch, Client, Credential, DpopPolicy, KeySource, LimitPer,
    Org, OrgRemoval, Plan, Quota, RateLimit, SigningKey, Store, StoreError,
};
use thiserror::Error;

use crate::clock::Clock;
use crate::keys;
use crate::secrets::{self, Secrets};

pub use tessera_store::{DEFAULT_TOKEN_TTL, MAX_TOKEN_TTL};

pub mod views;

/// How long an answer to a create with an `Idempotency-Key` is kept for retries, secret
/// included (sealed): a day, as long as the longest retry loop worth supporting.
pub(crate) const IDEMPOTENCY_WINDOW: Timestamp = 86_400;

/// How many clients [`Registrar::create_clients`] writes in one transaction: on
/// PostgreSQL, a change made during an import waited at most 0.23 s for the registry's lock
/// (measured with a debug build of the CLI importing 100,000 clients).
pub const CREATE_BATCH: usize = 5000;

/// Clients registered together, in one transaction, by [`Registrar::create_clients`]: one
/// plan, label, method and creation time, each with its own identifier and its secret,
/// returned this once (only the keyed hash is stored).
#[derive(Debug)]
pub struct CreatedClients {
    /// Their plan.
    pub plan: String,
    /// Their organization, if any.
    pub org: Option<String>,
    /// Their label.
    pub label: String,
    /// How they authenticate: with their secret, in the header or the body.
    pub auth_method: AuthMethod,
    /// When they were created, the time of the transaction that wrote them.
    pub created_at: Timestamp,
    /// Each one's identifier and secret.
    pub credentials: Vec<(ClientId, ClientSecret)>,
}

/// Client `id` with a fresh secret (RFC 6749 section 2.3.1: the password of
/// `client_secret_basic` and `client_secret_post`), and the secret.
fn make_client(
    secrets: &Secrets,
    id: ClientId,
    plan: &str,
    label: &str,
    auth_method: AuthMethod,
    now: Timestamp,
) -> (Client, ClientSecret) {
    let secret = secrets::new_client_secret();
    let client = Client {
        id,
        plan: plan.to_owned(),
        label: label.to_owned(),
        auth_method,
        credential: Credential::secret(secrets.hash_secret(&secret)),
        enabled: true,
        org: None,
        org_enabled: true,
        created_at: now,
        updated_at: now,
    };
    (client, secret)
}

/// Why the registrar refused an operation.
#[derive(Debug, Error)]
pub enum RegistrarError {
    /// A plan name that is not 1 to 64 of `a-z A-Z 0-9 _ -`.
    #[error("plan name {0:?} must be 1 to 64 characters of a-z, A-Z, 0-9, '_' or '-'")]
    BadPlanName(String),
    /// A bad scope list.
    #[error("{0}")]
    BadScopes(#[from] ScopeError),
    /// A lifetime out of range.
    #[error("token TTL must be between 1 and {MAX_TOKEN_TTL} seconds")]
    BadTtl,
    /// A rate with a zero count, period or burst.
    #[error("token rate must be COUNT/UNIT (sec, min, hour, day) with a burst of at least 1")]
    BadRate,
    /// A reuse share out of range.
    #[error("token reuse must be a percentage between 1 and 99")]
    BadReuse,
    /// A request limit for an API that the plan does not grant (none of its scopes names
    /// it).
    #[error("plan does not grant API {0:?}: a request limit needs one of the plan's scopes")]
    ApiNotGranted(String),
    /// A request limit out of shape: the API, the part (`rate`, `burst`, `quota`) and why.
    #[error("{part} of API {api:?}: {why}")]
    BadApiLimit {
        /// The API.
        api: String,
        /// `rate`, `burst` or `quota`.
        part: &'static str,
        /// Why.
        why: &'static str,
    },
    /// No such client.
    #[error("no client with id {0:?}")]
    UnknownClient(String),
    /// A secret rotation of a client that has no secret: it proves itself with a
    /// certificate or with its own keys.
    #[error(
        "client {0:?} authenticates with a certificate or its own keys: it has no secret to rotate"
    )]
    NoSecret(String),
    /// A certificate method without what the certificate must match, or with the wrong
    /// kind of it (RFC 8705 section 2), or a secret method with one.
    #[error("{0}")]
    BadCertificate(&'static str),
    /// A subject DN that is not an RFC 4514 distinguished name (RFC 8705 section 2.1.2):
    /// where and why.
    #[error(
        "the subject DN is not an RFC 4514 distinguished name ({0}); write it as \
         `openssl x509 -noout -subject -nameopt RFC2253` prints it, e.g. CN=billing,O=Acme"
    )]
    BadSubjectDn(String),
    /// More than one of the fields that say what a certificate or an assertion's keys
    /// must match (RFC 8705 section 2.1.2).
    #[error(
        "give one of tls_client_auth_subject_dn, tls_client_auth_san_dns, \
         tls_client_auth_san_uri, jwks and jwks_uri"
    )]
    ManyMatches,
    /// A trust policy field out of shape: the field and why.
    #[error("{1}")]
    BadTrustPolicy(&'static str, &'static str),
    /// An organization id that is not 1 to 64 of `a-z A-Z 0-9 _ -`.
    #[error("organization id {0:?} must be 1 to 64 characters of a-z, A-Z, 0-9, '_' or '-'")]
    BadOrgId(String),
    /// A name for people that is too long or holds control characters.
    #[error("name must be at most 256 characters, none of them control characters")]
    BadName,
    /// No such organization.
    #[error("no organization with id {0:?}")]
    UnknownOrg(String),
    /// An organization that still has clients, deleted without them.
    #[error(
        "organization {0:?} has {1} client(s): delete them first, or delete it with its clients"
    )]
    OrgHasClients(String, u64),
    /// A client of an organization given a plan of its own: its plan is its
    /// organization's.
    #[error(
        "client {0:?} belongs to organization {1:?}: its plan is the organization's \
         (change the organization's plan)"
    )]
    PlanOfOrg(String, String),
    /// A new client given both a plan and an organization.
    #[error("a client of an organization is on its organization's plan: give the organization or a plan, not both")]
    PlanAndOrg,
    /// A new client given neither a plan nor an organization.
    #[error("a client needs a plan, or an organization whose plan it takes")]
    NoPlan,
    /// A new client of an organization that does not exist.
    #[error("no organization with id {0:?}")]
    NoSuchOrg(String),
    /// The store refused or failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Where a new client goes (issue 28): its plan, and its organization if it has one, whose
/// plan it then is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// Its plan.
    pub plan: String,
    /// Its organization.
    pub org: Option<String>,
    /// Whether its organization is enabled (`true` without one).
    pub org_enabled: bool,
}

impl Placement {
    /// On `plan`, in no organization.
    pub fn plan(plan: &str) -> Self {
        Self {
            plan: plan.to_owned(),
            org: None,
            org_enabled: true,
        }
    }

    /// Puts `client` there.
    pub fn apply(&self, client: &mut Client) {
        self.plan.clone_into(&mut client.plan);
        client.org.clone_from(&self.org);
        client.org_enabled = self.org_enabled;
    }
}

/// A name for people: at most 256 characters, none of them control characters.
pub fn is_display_name(name: &str) -> bool {
    name.chars().count() <= 256 && !name.chars().any(char::is_control)
}

/// A trust policy to create or replace (workload identity federation).
#[derive(Debug, Clone, Default)]
pub struct TrustPolicyInput {
    /// Its name: 1 to 64 of `a-z A-Z 0-9 _ -`.
    pub name: String,
    /// The client the workload acts as.
    pub client_id: String,
    /// The external issuer (`iss`), an https URL (http only for loopback).
    pub issuer: String,
    /// Where the issuer's keys are, if not found through its OIDC discovery.
    pub jwks_uri: Option<String>,
    /// The value `aud` must hold.
    pub audience: String,
    /// The subject: exact, or a prefix followed by a trailing `*`.
    pub subject: String,
    /// Claims that must have these values.
    pub claims: Vec<(String, String)>,
    /// The longest life an accepted token may have, in seconds.
    pub max_assertion_ttl: Option<u32>,
    /// For GitHub Actions' issuer: the operator accepts a policy that pins no immutable id
    /// (`repository_id` or `repository_owner_id`), trusting names in `sub` that can change
    /// hands (a renamed or deleted repository's name can be taken by someone else).
    pub allow_mutable_subject: bool,
    /// The operator accepts a policy on a client whose plan grants an admin scope, so that
    /// external tokens can administer Tessera.
    pub allow_admin: bool,
}

/// GitHub Actions' OIDC issuer; an enterprise's is this followed by `/` and its slug.
const GITHUB_ACTIONS_ISSUER: &str = "https://token.actions.githubusercontent.com";

/// Claims of a GitHub Actions token that never change for a repository or its owner, unlike
/// the names in `sub`, `repository` and `repository_owner`.
const GITHUB_IMMUTABLE_CLAIMS: [&str; 2] = ["repository_id", "repository_owner_id"];

/// A plan or trust policy name: 1 to 64 of `a-z A-Z 0-9 _ -`.
fn is_plan_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Whether `url` is an http(s) URL: https, or http to a loopback host.
fn is_issuer_url(url: &str) -> bool {
    let host = |rest: &str| {
        rest.split(['/', '?', '#'])
            .next()
            .unwrap_or_default()
            .rsplit_once(':')
            .map_or(rest.split('/').next().unwrap_or_default(), |(h, _)| h)
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned()
    };
    let ok = match url.split_once("://") {
        Some(("https", rest)) => !host(rest).is_empty(),
        Some(("http", rest)) => {
            let h = host(rest);
            h == "localhost"
                || h.parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback())
        }
        _ => false,
    };
    ok && url.len() <= 2048 && !url.contains(char::is_whitespace)
}

/// Whether `uri` may be a `private_key_jwt` client's `jwks_uri`: https, or plain http to a
/// host that is not a public address (one written as a literal address is checked here; a
/// name is checked on the address it resolves to when fetched, [`crate::fetch`]).
fn is_jwks_uri(uri: &str) -> bool {
    let Ok(parsed) = reqwest::Url::parse(uri) else {
        return false;
    };
    let literal = |host: &str| {
        host.trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .ok()
    };
    let scheme_fits = match (parsed.scheme(), parsed.host_str()) {
        ("https", Some(_)) => true,
        ("http", Some(host)) => literal(host).is_none_or(|ip| !crate::fetch::is_public(ip)),
        _ => false,
    };
    scheme_fits && uri.len() <= 2048 && !uri.contains(char::is_whitespace)
}

/// A change to one optional setting of a plan.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Change<T> {
    /// Keep an existing plan's value (none for a new plan).
    #[default]
    Keep,
    /// Remove the setting.
    Clear,
    /// Set it to this value.
    Set(T),
}

impl<T> Change<T> {
    /// The value after the change, given the current one.
    pub fn apply(self, current: Option<T>) -> Option<T> {
        match self {
            Change::Keep => current,
            Change::Clear => None,
            Change::Set(value) => Some(value),
        }
    }

    /// The value being set, if any.
    pub fn set(&self) -> Option<&T> {
        match self {
            Change::Set(value) => Some(value),
            _ => None,
        }
    }
}

/// What `plan set` may change besides the scopes. `None` keeps an existing plan's lifetime
/// (or the default for a new plan).
#[derive(Debug, Clone, Default)]
pub struct PlanSettings {
    /// Token lifetime in seconds.
    pub token_ttl: Option<u32>,
    /// The per-client token request rate.
    pub token_rate: Change<RateLimit>,
    /// Token reuse: the share of lifetime, in percent, that must be left.
    pub reuse_percent: Change<u8>,
    /// Whether its clients may introspect others' tokens; `None` keeps the current value
    /// (off for a new plan).
    pub introspect_any: Option<bool>,
    /// Whose allowance its limits count; `None` keeps the current value (each client's for
    /// a new plan).
    pub limit_per: Option<LimitPer>,
    /// Whether its clients' tokens are bound to DPoP keys (RFC 9449); `None` keeps the
    /// current value (`allowed` for a new plan).
    pub dpop: Option<DpopPolicy>,
    /// The limits on its clients' requests to the APIs it grants.
    pub api_limits: ApiLimitsChange,
}

/// A change to a plan's request limits on the APIs it grants (issue 27).
#[derive(Debug, Clone)]
pub enum ApiLimitsChange {
    /// Change the limits of the APIs named, each part kept, cleared or set, and keep the
    /// others' (`plan set --api-rate/--api-burst/--api-quota`). A kept limit of an API the
    /// new scopes no longer grant goes with it.
    Edit(BTreeMap<String, ApiLimitEdit>),
    /// Replace them all (the admin API's `PUT`).
    Replace(BTreeMap<String, ApiLimit>),
}

impl Default for ApiLimitsChange {
    fn default() -> Self {
        Self::Edit(BTreeMap::new())
    }
}

/// A change to one API's limits on a plan.
#[derive(Debug, Clone, Copy, Default)]
pub struct ApiLimitEdit {
    /// The rate (its burst the count, unless `burst` says otherwise).
    pub rate: Change<RateLimit>,
    /// A new burst for the rate the API has after the change; there must be one.
    pub burst: Option<u32>,
    /// The quota per calendar period.
    pub quota: Change<Quota>,
}

impl ApiLimitsChange {
    /// The limits after the change, given the current ones and the plan's new scopes: only
    /// limits that limit something are kept, and each names a granted API.
    pub fn apply(
        &self,
        current: &BTreeMap<String, ApiLimit>,
        scopes: &ScopeSet,
    ) -> Result<BTreeMap<String, ApiLimit>, RegistrarError> {
        let granted = |api: &str| scopes.iter().any(|s| s.as_str() == api);
        let mut limits = match self {
            Self::Replace(all) => all.clone(),
            Self::Edit(edits) => {
                let mut limits: BTreeMap<String, ApiLimit> = current
                    .iter()
                    .filter(|(api, _)| granted(api) || edits.contains_key(*api))
                    .map(|(api, limit)| (api.clone(), *limit))
                    .collect();
                for (api, edit) in edits {
                    let limit = limits.entry(api.clone()).or_default();
                    limit.rate = edit.rate.apply(limit.rate);
                    limit.quota = edit.quota.apply(limit.quota);
                    if let Some(burst) = edit.burst {
                        let Some(rate) = limit.rate.as_mut() else {
                            return Err(bad_limit(api, "burst", "a burst needs a rate"));
                        };
                        rate.burst = burst;
                    }
                }
                limits
            }
        };
        for (api, limit) in &limits {
            if !granted(api) {
                return Err(RegistrarError::ApiNotGranted(api.clone()));
            }
            if let Some(rate) = limit.rate {
                if rate.count == 0 || rate.period_secs == 0 {
                    return Err(bad_limit(
                        api,
                        "rate",
                        "a rate is COUNT/UNIT, COUNT at least 1",
                    ));
                }
                if rate.burst == 0 {
                    return Err(bad_limit(api, "burst", "a burst is at least 1"));
                }
            }
            if limit.quota.is_some_and(|q| q.limit == 0) {
                return Err(bad_limit(api, "quota", "a quota is at least 1"));
            }
        }
        limits.retain(|_, limit| !limit.is_unlimited());
        Ok(limits)
    }
}

fn bad_limit(api: &str, part: &'static str, why: &'static str) -> RegistrarError {
    RegistrarError::BadApiLimit {
        api: api.to_owned(),
        part,
        why,
    }
}

/// What a patch of a client or an organization changes, for the audit trail: its name, its
/// plan (before and after) and whether it is enabled (before and after).
pub fn patch_changes(name_changed: bool, plan: (&str, &str), enabled: (bool, bool)) -> String {
    let mut said = Vec::new();
    if name_changed {
        said.push("name changed".to_owned());
    }
    if plan.0 != plan.1 {
        said.push(format!("plan {} -> {}", plan.0, plan.1));
    }
    if enabled.0 != enabled.1 {
        said.push(if enabled.1 { "enabled" } else { "disabled" }.to_owned());
    }
    if said.is_empty() {
        "unchanged".to_owned()
    } else {
        said.join(", ")
    }
}

/// The registry's operations on one store, reading the time from one clock: the CLI's on the
/// system clock, a server's on its own (so that a test that sets the server's clock sets
/// the deadlines these operations write too).
#[derive(Debug, Clone, Copy)]
pub struct Registrar<'a> {
    store: &'a dyn Store,
    clock: &'a Clock,
}

impl<'a> Registrar<'a> {
    /// Operations on `store`, dated by `clock`.
    pub fn new(store: &'a dyn Store, clock: &'a Clock) -> Self {
        Self { store, clock }
    }

    /// Creates a plan or changes its scopes and TTL; see [`Registrar::set_plan_with`].
    pub async fn set_plan(
        &self,
        name: &str,
        scopes: &str,
        token_ttl: Option<u32>,
    ) -> Result<Plan, RegistrarError> {
        let settings = PlanSettings {
            token_ttl,
            ..PlanSettings::default()
        };
        self.set_plan_with(name, scopes, &settings).await
    }

    /// Creates a plan or changes one. A change applies to each of its clients' next token
    /// request.
    pub async fn set_plan_with(
        &self,
        name: &str,
        scopes: &str,
        settings: &PlanSettings,
    ) -> Result<Plan, RegistrarError> {
        if !is_plan_name(name) {
            return Err(RegistrarError::BadPlanName(name.to_owned()));
        }
        let scopes = ScopeSet::parse_names(scopes)?;
        if settings
            .token_ttl
            .is_some_and(|t| !(1..=MAX_TOKEN_TTL).contains(&t))
        {
            return Err(RegistrarError::BadTtl);
        }
        if let Some(rate) = settings.token_rate.set() {
            if rate.count == 0 || rate.burst == 0 || rate.period_secs == 0 {
                return Err(RegistrarError::BadRate);
            }
        }
        if let Some(p) = settings.reuse_percent.set() {
            if !(1..=99).contains(p) {
                return Err(RegistrarError::BadReuse);
            }
        }
        let existing = self
            .store
            .plans()
            .await?
            .into_iter()
            .find(|p| p.name == name);
        let api_limits = settings.api_limits.apply(
            existing
                .as_ref()
                .map_or(&BTreeMap::new(), |p| &p.api_limits),
            &scopes,
        )?;
        let now = self.clock.now();
        let plan = Plan {
            name: name.to_owned(),
            api_limits,
            scopes,
            token_ttl: settings
                .token_ttl
                .or(existing.as_ref().map(|p| p.token_ttl))
                .unwrap_or(DEFAULT_TOKEN_TTL),
            token_rate: settings
                .token_rate
                .apply(existing.as_ref().and_then(|p| p.token_rate)),
            reuse_percent: settings
                .reuse_percent
                .apply(existing.as_ref().and_then(|p| p.reuse_percent)),
            limit_per: settings
                .limit_per
                .or(existing.as_ref().map(|p| p.limit_per))
                .unwrap_or_default(),
            introspect_any: settings
                .introspect_any
                .or(existing.as_ref().map(|p| p.introspect_any))
                .unwrap_or(false),
            dpop: settings
                .dpop
                .or(existing.as_ref().map(|p| p.dpop))
                .unwrap_or_default(),
            created_at: existing.as_ref().map_or(now, |p| p.created_at),
            updated_at: now,
        };
        self.store.put_plan(&plan).await?;
        Ok(plan)
    }

    /// Registers a client with a fresh identifier and secret. The secret is returned once and
    /// only its keyed hash is stored.
    pub async fn create_client(
        &self,
        secrets: &Secrets,
        plan: &str,
        label: &str,
        auth_method: AuthMethod,
    ) -> Result<(Client, ClientSecret), RegistrarError> {
        let (client, secret) = self.new_client(secrets, plan, label, auth_method);
        self.store.insert_client(&client).await?;
        Ok((client, secret))
    }

    /// Registers `count` clients on one plan, [`CREATE_BATCH`] to a transaction, and hands
    /// each batch, with its secrets, to `committed` once it is committed; `committed`
    /// stops the rest by answering [`ControlFlow::Break`].
    ///
    /// Each transaction holds the registry's lock (which keeps the change log in commit
    /// order) only while its batch is written, so a write made meanwhile, such as an
    /// emergency `client disable`, waits for one batch at most, never for the whole import,
    /// and a lock held by a stuck writer fails the import after one wait
    /// ([`StoreError::LockTimeout`]). So a failure part way leaves the batches handed on
    /// before it committed, and none after: the caller counts them.
    pub async fn create_clients(
        &self,
        secrets: &Secrets,
        plan: &str,
        label: &str,
        auth_method: AuthMethod,
        count: usize,
        committed: &mut dyn FnMut(CreatedClients) -> ControlFlow<()>,
    ) -> Result<(), RegistrarError> {
        let placement = Placement::plan(plan);
        self.create_clients_at(secrets, &placement, label, auth_method, count, committed)
            .await
    }

    /// [`create_clients`](Self::create_clients) where `placement` says: on a plan, or in an
    /// organization ([`Registrar::placement`]).
    pub async fn create_clients_at(
        &self,
        secrets: &Secrets,
        placement: &Placement,
        label: &str,
        auth_method: AuthMethod,
        count: usize,
        committed: &mut dyn FnMut(CreatedClients) -> ControlFlow<()>,
    ) -> Result<(), RegistrarError> {
        let plan = placement.plan.as_str();
        // Ids in ascending order, so that each statement adds to the right edge of the id
        // indexes instead of to pages all over them: at a million clients, random ids made
        // SQLite's page cache spill to the WAL and read pages back.
        let mut ids: Vec<ClientId> = (0..count).map(|_| secrets::new_client_id()).collect();
        ids.sort_unstable_by(|a, b| a.as_str().cmp(b.as_str()));
        for ids in ids.chunks(CREATE_BATCH) {
            let created_at = self.clock.now();
            let (clients, credentials): (Vec<Client>, Vec<(ClientId, ClientSecret)>) = ids
                .iter()
                .map(|id| {
                    let (mut client, secret) =
                        make_client(secrets, id.clone(), plan, label, auth_method, created_at);
                    placement.apply(&mut client);
                    let credentials = (client.id.clone(), secret);
                    (client, credentials)
                })
                .unzip();
            self.store.insert_clients(&clients).await?;
            let batch = CreatedClients {
                plan: plan.to_owned(),
                org: placement.org.clone(),
                label: label.to_owned(),
                auth_method,
                created_at,
                credentials,
            };
            if committed(batch).is_break() {
                break;
            }
        }
        Ok(())
    }

    /// A new client with a fresh identifier and secret, not yet stored (see
    /// [`Store::insert_clients_once`] for storing it with the answer to remember).
    pub fn new_client(
        &self,
        secrets: &Secrets,
        plan: &str,
        label: &str,
        auth_method: AuthMethod,
    ) -> (Client, ClientSecret) {
        let id = secrets::new_client_id();
        make_client(secrets, id, plan, label, auth_method, self.clock.now())
    }

    /// Registers a client that authenticates with a key of its own: a certificate (RFC 8705),
    /// `tls_client_auth` with a subject DN or SAN to match or `self_signed_tls_client_auth`
    /// with a JWK Set; or signed assertions (`private_key_jwt`, RFC 7523 section 2.2) with a
    /// JWK Set or a `jwks_uri`. It has no secret.
    pub async fn create_keyed_client(
        &self,
        plan: &str,
        label: &str,
        auth_method: AuthMethod,
        credential: Credential,
    ) -> Result<Client, RegistrarError> {
        let client = self.new_keyed_client(plan, label, auth_method, credential)?;
        self.store.insert_client(&client).await?;
        Ok(client)
    }

    /// [`create_keyed_client`](Self::create_keyed_client) without storing it.
    pub fn new_keyed_client(
        &self,
        plan: &str,
        label: &str,
        auth_method: AuthMethod,
        credential: Credential,
    ) -> Result<Client, RegistrarError> {
        use AuthMethod::{PrivateKeyJwt, SelfSignedTlsClientAuth, TlsClientAuth};
        use CertificateMatch::{Jwks, SanDns, SanUri, SubjectDn};
        let fits = match (&credential, auth_method) {
            (Credential::Certificate(Jwks(jwks)), SelfSignedTlsClientAuth) => {
                let keys = serde_json::from_str::<serde_json::Value>(jwks)
                    .ok()
                    .and_then(|v| v["keys"].as_array().map(|k| !k.is_empty()));
                if keys != Some(true) {
                    return Err(RegistrarError::BadCertificate(
                        "jwks must be a JWK Set with at least one key",
                    ));
                }
                true
            }
            // RFC 7523 section 2.2: the keys inline, or where the client publishes them.
            (Credential::Keys(KeySource::Jwks(jwks)), PrivateKeyJwt) => {
                if !crate::grant::assertion::has_usable_key(jwks) {
                    return Err(RegistrarError::BadCertificate(
                        "jwks must be a JWK Set with at least one public EdDSA, ES256 or RSA key",
                    ));
                }
                true
            }
            (Credential::Keys(KeySource::JwksUri(uri)), PrivateKeyJwt) => {
                if !is_jwks_uri(uri) {
                    return Err(RegistrarError::BadCertificate(
                        "jwks_uri must be an https URL of at most 2048 characters \
                         (http only to a private or loopback address)",
                    ));
                }
                true
            }
            (Credential::Certificate(SubjectDn(v) | SanDns(v) | SanUri(v)), TlsClientAuth) => {
                !v.trim().is_empty() && v.len() <= 1024
            }
            _ => false,
        };
        if !fits {
            return Err(RegistrarError::BadCertificate(
                "tls_client_auth needs one of a subject DN, a DNS SAN or a URI SAN; \
                 self_signed_tls_client_auth needs a JWK Set; \
                 private_key_jwt needs a JWK Set or a jwks_uri",
            ));
        }
        // Parsed again at each use: this refuses here what would never match there.
        if let Credential::Certificate(SubjectDn(dn)) = &credential {
            crate::dn::Dn::parse(dn).map_err(|e| RegistrarError::BadSubjectDn(e.to_string()))?;
        }
        let now = self.clock.now();
        Ok(Client {
            id: secrets::new_client_id(),
            plan: plan.to_owned(),
            label: label.to_owned(),
            auth_method,
            credential,
            enabled: true,
            org: None,
            org_enabled: true,
            created_at: now,
            updated_at: now,
        })
    }

    /// Creates or replaces the trust policy `input.name` (workload identity federation).
    pub async fn put_trust_policy(
        &self,
        input: TrustPolicyInput,
    ) -> Result<tessera_store::TrustPolicy, RegistrarError> {
        let bad = |field, why| Err(RegistrarError::BadTrustPolicy(field, why));
        if !is_plan_name(&input.name) {
            return bad(
                "name",
                "a trust policy name is 1 to 64 of a-z, A-Z, 0-9, '_' or '-'",
            );
        }
        if !is_issuer_url(&input.issuer) {
            return bad(
                "issuer",
                "issuer must be an https URL (http only to loopback)",
            );
        }
        if input.jwks_uri.as_deref().is_some_and(|u| !is_issuer_url(u)) {
            return bad(
                "jwks_uri",
                "jwks_uri must be an https URL (http only to loopback)",
            );
        }
        if input.audience.trim().is_empty() || input.audience.len() > 1024 {
            return bad("audience", "audience must be 1 to 1024 characters");
        }
        if !crate::grant::assertion::is_subject_pattern(&input.subject) {
            return bad(
                "subject",
                "subject must be exact, or a prefix ending in ':' or '/' followed by one '*' \
                 (e.g. repo:acme/payments:*); a bare '*' is refused",
            );
        }
        if input.claims.iter().any(|(name, _)| name.is_empty()) {
            return bad("claims", "a required claim needs a name");
        }
        let issuer = input.issuer.trim_end_matches('/');
        let github = issuer == GITHUB_ACTIONS_ISSUER
            || issuer
                .strip_prefix(GITHUB_ACTIONS_ISSUER)
                .is_some_and(|rest| rest.starts_with('/'));
        let pinned = input.claims.iter().any(|(name, value)| {
            GITHUB_IMMUTABLE_CLAIMS.contains(&name.as_str()) && !value.is_empty()
        });
        if github && !pinned && !input.allow_mutable_subject {
            return bad(
                "claims",
                "a GitHub Actions policy must also require repository_id or repository_owner_id \
                 (names in sub can change hands; anyone can get a GitHub token for any audience), \
                 or set allow_mutable_subject",
            );
        }
        let client = self.client(&input.client_id).await?;
        let administers = self
            .store
            .plans()
            .await?
            .iter()
            .find(|p| p.name == client.plan)
            .is_some_and(|plan| {
                plan.scopes.iter().any(|s| {
                    tessera_proto::scope::is_admin_scope(s.as_str())
                        || s.as_str() == tessera_proto::scope::ORG_ADMIN_SCOPE
                })
            });
        if administers && !input.allow_admin {
            return bad(
                "allow_admin",
                "the client's plan grants an admin scope: external tokens acting as it could \
                 administer Tessera (or its organization); set allow_admin to mean it",
            );
        }
        let claims: serde_json::Map<String, serde_json::Value> = input
            .claims
            .into_iter()
            .map(|(name, value)| (name, serde_json::Value::String(value)))
            .collect();
        let policy = tessera_store::TrustPolicy {
            name: input.name,
            client_id: client.id,
            issuer: input.issuer,
            jwks_uri: input.jwks_uri,
            audience: input.audience,
            subject: input.subject,
            claims: serde_json::Value::Object(claims).to_string(),
            max_assertion_ttl: input.max_assertion_ttl,
            created_at: self.clock.now(),
        };
        self.store.put_trust_policy(&policy).await?;
        Ok(policy)
    }

    /// Every trust policy, by name.
    pub async fn trust_policies(&self) -> Result<Vec<tessera_store::TrustPolicy>, RegistrarError> {
        Ok(self.store.trust_policies().await?)
    }

    /// Removes a trust policy; `false` if there was none of that name.
    pub async fn remove_trust_policy(&self, name: &str) -> Result<bool, RegistrarError> {
        Ok(self.store.delete_trust_policy(name).await?)
    }

    /// Loads a client or says it is unknown.
    pub async fn client(&self, id: &str) -> Result<Client, RegistrarError> {
        let unknown = || RegistrarError::UnknownClient(id.to_owned());
        let id = ClientId::parse(id).ok_or_else(unknown)?;
        self.store.client(&id).await?.ok_or_else(unknown)
    }

    /// Changes a client with `change` and stores it.
    pub async fn update_client(
        &self,
        id: &str,
        change: impl FnOnce(&mut Client),
    ) -> Result<Client, RegistrarError> {
        let mut client = self.client(id).await?;
        change(&mut client);
        client.updated_at = self.clock.now();
        if !self.store.update_client(&client).await? {
            return Err(RegistrarError::UnknownClient(id.to_owned()));
        }
        Ok(client)
    }

    /// Changes a client's name, plan or enabled flag, each only when given: the PATCH of
    /// the admin API and the CLI's `enable`, `disable` and `set-plan`.
    pub async fn patch_client(
        &self,
        id: &str,
        name: Option<&str>,
        plan: Option<&str>,
        enabled: Option<bool>,
    ) -> Result<Client, RegistrarError> {
        if let Some(plan) = plan {
            let client = self.client(id).await?;
            if let Some(org) = client.org.filter(|_| client.plan != plan) {
                return Err(RegistrarError::PlanOfOrg(id.to_owned(), org));
            }
        }
        self.update_client(id, |c| {
            if let Some(name) = name {
                name.clone_into(&mut c.label);
            }
            if let Some(plan) = plan {
                plan.clone_into(&mut c.plan);
            }
            if let Some(enabled) = enabled {
                c.enabled = enabled;
            }
        })
        .await
    }

    /// Where a new client goes: on `plan`, or with `org` in that organization, on its plan
    /// (then `plan` must be empty).
    pub async fn placement(
        &self,
        plan: &str,
        org: Option<&str>,
    ) -> Result<Placement, RegistrarError> {
        match org {
            None if plan.is_empty() => Err(RegistrarError::NoPlan),
            None => Ok(Placement::plan(plan)),
            Some(_) if !plan.is_empty() => Err(RegistrarError::PlanAndOrg),
            Some(id) => {
                let org = self
                    .store
                    .org(id)
                    .await?
                    .ok_or_else(|| RegistrarError::NoSuchOrg(id.to_owned()))?;
                Ok(Placement {
                    plan: org.plan,
                    org: Some(org.id),
                    org_enabled: org.enabled,
                })
            }
        }
    }

    /// Creates organization `id` on `plan` (issue 28).
    pub async fn create_org(
        &self,
        id: &str,
        name: &str,
        plan: &str,
    ) -> Result<Org, RegistrarError> {
        if !is_plan_name(id) {
            return Err(RegistrarError::BadOrgId(id.to_owned()));
        }
        if !is_display_name(name) {
            return Err(RegistrarError::BadName);
        }
        let now = self.clock.now();
        let org = Org {
            id: id.to_owned(),
            name: name.to_owned(),
            plan: plan.to_owned(),
            enabled: true,
            created_at: now,
            updated_at: now,
        };
        self.store.insert_org(&org).await?;
        Ok(org)
    }

    /// Loads an organization or says it is unknown.
    pub async fn org(&self, id: &str) -> Result<Org, RegistrarError> {
        self.store
            .org(id)
            .await?
            .ok_or_else(|| RegistrarError::UnknownOrg(id.to_owned()))
    }

    /// Changes an organization's name, plan or enabled flag, each only when given. A new
    /// plan or flag applies to all its clients at once: the store writes them in the same
    /// transaction, and every instance applies them within its sync interval.
    pub async fn patch_org(
        &self,
        id: &str,
        name: Option<&str>,
        plan: Option<&str>,
        enabled: Option<bool>,
    ) -> Result<Org, RegistrarError> {
        if name.is_some_and(|n| !is_display_name(n)) {
            return Err(RegistrarError::BadName);
        }
        let mut org = self.org(id).await?;
        if let Some(name) = name {
            name.clone_into(&mut org.name);
        }
        if let Some(plan) = plan {
            plan.clone_into(&mut org.plan);
        }
        if let Some(enabled) = enabled {
            org.enabled = enabled;
        }
        org.updated_at = self.clock.now();
        if !self.store.update_org(&org).await? {
            return Err(RegistrarError::UnknownOrg(id.to_owned()));
        }
        Ok(org)
    }

    /// Removes an organization; one with clients only `with_clients`, and them with it.
    /// Returns it as it was, and how many clients went with it.
    pub async fn delete_org(
        &self,
        id: &str,
        with_clients: bool,
    ) -> Result<(Org, u64), RegistrarError> {
        let org = self.org(id).await?;
        let clients = self.org_client_count(id).await?;
        match self.store.delete_org(id, with_clients).await? {
            OrgRemoval::Removed => Ok((org, if with_clients { clients } else { 0 })),
            OrgRemoval::Unknown => Err(RegistrarError::UnknownOrg(id.to_owned())),
            OrgRemoval::HasClients => Err(RegistrarError::OrgHasClients(
                id.to_owned(),
                self.org_client_count(id).await?,
            )),
        }
    }

    /// How many clients organization `id` has.
    pub async fn org_client_count(&self, id: &str) -> Result<u64, RegistrarError> {
        Ok(self
            .store
            .clients_per_org()
            .await?
            .into_iter()
            .find(|(org, _)| org == id)
            .map_or(0, |(_, n)| n))
    }

    /// Gives a client a new secret. The old one keeps working for `grace_secs`, so callers can
    /// switch without downtime.
    pub async fn rotate_secret(
        &self,
        secrets: &Secrets,
        id: &str,
        grace_secs: i64,
    ) -> Result<(Client, ClientSecret), RegistrarError> {
        let secret = secrets::new_client_secret();
        let hash = secrets.hash_secret(&secret);
        let deadline = self.clock.now() + grace_secs.max(0);
        if !matches!(self.client(id).await?.credential, Credential::Secret { .. }) {
            return Err(RegistrarError::NoSecret(id.to_owned()));
        }
        let client = self
            .update_client(id, |c| {
                if let Credential::Secret {
                    hash: current,
                    previous,
                } = &mut c.credential
                {
                    let old = std::mem::replace(current, hash);
                    *previous = (grace_secs > 0).then_some((old, deadline));
                }
            })
            .await?;
        Ok((client, secret))
    }

    /// Removes a client.
    pub async fn delete_client(&self, id: &str) -> Result<(), RegistrarError> {
        let client = self.client(id).await?;
        if self.store.delete_client(&client.id).await? {
            Ok(())
        } else {
            Err(RegistrarError::UnknownClient(id.to_owned()))
        }
    }

    /// Adds a new signing key that is published now and signs from `activate_in_secs` on, and
    /// drops keys that are no longer published.
    pub async fn rotate_keys(
        &self,
        secrets: &Secrets,
        alg: Algorithm,
        activate_in_secs: i64,
    ) -> Result<SigningKey, RegistrarError> {
        let now = self.clock.now();
        let key = keys::generate(secrets, alg, now, now + activate_in_secs.max(0));
        self.store.insert_key(&key).await?;
        self.prune_keys(now).await?;
        Ok(key)
    }

    /// Deletes keys whose last token has expired: superseded for longer than MAX_TOKEN_TTL.
    async fn prune_keys(&self, now: i64) -> Result<(), RegistrarError> {
        // No plan may issue tokens living longer than MAX_TOKEN_TTL (set_plan refuses it), and
        // the JWKS publishes a superseded key for exactly that long.
        let keep_for = i64::from(MAX_TOKEN_TTL);
        let keys = self.store.keys().await?;
        for pair in keys.windows(2) {
            if pair[1].activates_at <= now && now >= pair[1].activates_at + keep_for {
                self.store.delete_key(&pair[0].kid).await?;
            }
        }
        Ok(())
    }
}
