//! `tessera plan`, `client`, `org`, `keys` and `trust`, the commands that manage the registry:
//! each command is one call of [`Operations`], served either by the database
//! ([`Database`], through `tessera_server::registrar`) or, with `--admin-url`, by a
//! Tessera's admin API ([`Http`]). Both answer with the admin API's objects, as the contract shared with the
//! server defines them ([`tessera_proto::admin`]), so the printing below serves both, and
//! `--json` prints those objects.
//!
//! # Layout
//!
//! - this file: the commands, the [`Operations`] they call, and what they print;
//! - [`args`]: their command lines; [`output`]: text or `--json`, one way for all;
//! - [`database`]: the operations on the store; [`http`]: the same over the admin API;
//! - [`progress`]: the bar `client create --count` draws on a terminal.

use std::io::Write;

use anyhow::Result;
use tessera_proto::admin::{
    self as api, Client, ClientInput, ClientPatch, ClientWithSecret, Key, Plan, TrustPolicy,
    UsageDay,
};
use tessera_proto::clock::{rfc3339, Clock};
use tessera_proto::Algorithm;
use tessera_server::registrar::{views, ApiLimitEdit, ApiLimitsChange, Change, PlanSettings};
use tessera_store::{AuthMethod, RateLimit};

use crate::{Access, DataArgs};

mod args;
mod database;
mod http;
mod output;
mod progress;

pub(crate) use args::{ClientCommand, KeysCommand, OrgCommand, PlanCommand, TrustCommand};
use database::Database;
pub(crate) use http::AdminArgs;
use http::Http;
use output::Output;
use progress::Progress;

/// A management command: `plan`, `client`, `keys` or `trust`.
#[derive(Debug)]
pub(crate) enum ManageCommand {
    Plan(PlanCommand),
    Client(ClientCommand),
    Org(OrgCommand),
    Keys(KeysCommand),
    Trust(TrustCommand),
}

impl ManageCommand {
    fn access(&self) -> Access {
        match self {
            Self::Plan(PlanCommand::List { .. })
            | Self::Client(ClientCommand::List { .. })
            | Self::Client(ClientCommand::Show { .. })
            | Self::Client(ClientCommand::Usage { .. })
            | Self::Org(OrgCommand::List { .. })
            | Self::Org(OrgCommand::Show { .. })
            | Self::Org(OrgCommand::Usage { .. })
            | Self::Keys(KeysCommand::List { .. })
            | Self::Trust(TrustCommand::List { .. }) => Access::Read,
            _ => Access::Write,
        }
    }
}

/// The error of `plan set` without `--scopes` for a plan that does not exist.
pub(crate) fn new_plan_needs_scopes(name: &str) -> anyhow::Error {
    anyhow::anyhow!("there is no plan {name} yet: a new plan needs --scopes")
}

/// The context of a failure after `made` of `count` clients were created (and printed):
/// how many exist, and that running the command again makes `count` more, not the rest.
pub(crate) fn created_before(made: u32, count: u32) -> String {
    if made == 0 {
        String::from("no client created")
    } else {
        format!(
            "{made} of {count} clients created (printed above; `--count {}` makes the rest), \
             then",
            count - made
        )
    }
}

/// What receives clients just created, with their secrets: those committed together.
pub(crate) type OnCreated<'a> =
    dyn FnMut(&mut dyn Iterator<Item = ClientWithSecret>) -> Result<()> + 'a;

/// The admin operations, one implementation per backend. Each answers with the admin API's
/// objects; an error says what was refused, in words for the operator.
pub(crate) trait Operations {
    /// Creates a plan or changes it; a setting not named keeps its value, the scopes
    /// (`None`) among them. A new plan needs its scopes.
    async fn set_plan(
        &self,
        name: &str,
        scopes: Option<&str>,
        settings: &PlanSettings,
    ) -> Result<Plan>;
    /// Every plan, by name.
    async fn list_plans(&self) -> Result<Vec<Plan>>;
    /// Registers `count` clients, handing them with their secrets to `on_created`, those
    /// written in one transaction together and only once it is committed; `progress` counts
    /// them as they are written.
    async fn create_clients(
        &self,
        new: &ClientInput,
        count: u32,
        progress: &Progress,
        on_created: &mut OnCreated<'_>,
    ) -> Result<()>;
    /// Every client.
    async fn list_clients(&self) -> Result<Vec<Client>>;
    /// One client.
    async fn show_client(&self, id: &str) -> Result<Client>;
    /// Changes a client's name, plan or whether it is enabled.
    async fn update_client(&self, id: &str, patch: &ClientPatch) -> Result<Client>;
    /// Gives a client a new secret; the old one works for `grace_secs` more.
    async fn rotate_secret(&self, id: &str, grace_secs: i64) -> Result<ClientWithSecret>;
    /// Removes a client, returning it as it was.
    async fn delete_client(&self, id: &str) -> Result<Client>;
    /// A client's token requests per UTC day.
    async fn usage(&self, id: &str) -> Result<Vec<UsageDay>>;
    /// Creates an organization.
    async fn create_org(&self, new: &api::OrgInput) -> Result<api::Org>;
    /// Every organization, by id.
    async fn list_orgs(&self) -> Result<Vec<api::Org>>;
    /// One organization.
    async fn show_org(&self, id: &str) -> Result<api::Org>;
    /// Changes an organization's name, plan or whether it is enabled.
    async fn update_org(&self, id: &str, patch: &api::OrgPatch) -> Result<api::Org>;
    /// An organization's usage within the days `from` and `to` (`YYYY-MM-DD`, included).
    async fn org_usage(
        &self,
        id: &str,
        from: Option<&str>,
        to: Option<&str>,
    ) -> Result<api::OrgUsage>;
    /// Removes an organization (with its clients when `with_clients`), returning it as it
    /// was.
    async fn delete_org(&self, id: &str, with_clients: bool) -> Result<api::Org>;
    /// The signing keys, oldest activation first.
    async fn list_keys(&self) -> Result<Vec<Key>>;
    /// Publishes a new key that signs from `activate_in_secs` on.
    async fn rotate_keys(&self, alg: Algorithm, activate_in_secs: i64) -> Result<Key>;
    /// Creates or replaces a trust policy.
    async fn put_trust_policy(
        &self,
        name: &str,
        input: &api::TrustPolicyInput,
    ) -> Result<TrustPolicy>;
    /// Every trust policy, by name.
    async fn list_trust_policies(&self) -> Result<Vec<TrustPolicy>>;
    /// Removes a trust policy.
    async fn remove_trust_policy(&self, name: &str) -> Result<()>;
}

/// Runs an admin command on the database, or with `--admin-url` on that Tessera's admin API.
pub(crate) async fn run(data: &DataArgs, admin: &AdminArgs, command: ManageCommand) -> Result<()> {
    match &admin.admin_url {
        Some(url) => execute(&Http::connect(url, admin)?, command).await,
        None => execute(&Database::open(data, command.access()).await?, command).await,
    }
}

async fn execute(ops: &impl Operations, command: ManageCommand) -> Result<()> {
    match command {
        ManageCommand::Plan(cmd) => plan(ops, cmd).await,
        ManageCommand::Client(cmd) => client(ops, cmd).await,
        ManageCommand::Org(cmd) => org(ops, cmd).await,
        ManageCommand::Keys(cmd) => keys(ops, cmd).await,
        ManageCommand::Trust(cmd) => trust(ops, cmd).await,
    }
}

async fn plan(ops: &impl Operations, cmd: PlanCommand) -> Result<()> {
    match cmd {
        PlanCommand::Set {
            name,
            scopes,
            token_ttl,
            token_rate,
            token_burst,
            reuse_percent,
            introspect_any,
            dpop,
            limit_per,
            api_rate,
            api_burst,
            api_quota,
            json,
        } => {
            let api_limits = api_limit_edits(scopes.as_deref(), api_rate, api_burst, api_quota)?;
            let token_rate = match token_rate.as_deref() {
                None => Change::Keep,
                Some("none") => Change::Clear,
                Some(spec) => {
                    let mut rate = RateLimit::parse(spec).ok_or_else(|| {
                        anyhow::anyhow!("bad --token-rate {spec:?}: use COUNT/UNIT, e.g. 60/min")
                    })?;
                    if let Some(burst) = token_burst {
                        rate.burst = burst;
                    }
                    Change::Set(rate)
                }
            };
            let settings = PlanSettings {
                token_ttl,
                token_rate,
                reuse_percent: match reuse_percent {
                    None => Change::Keep,
                    Some(0) => Change::Clear,
                    Some(p) => Change::Set(p),
                },
                introspect_any,
                limit_per,
                dpop: dpop
                    .map(|d| {
                        d.parse()
                            .map_err(|e: tessera_store::UnknownDpopPolicy| anyhow::anyhow!(e))
                    })
                    .transpose()?,
                api_limits,
            };
            let plan = ops.set_plan(&name, scopes.as_deref(), &settings).await?;
            Output::of(json).object(&plan, output::plan)
        }
        PlanCommand::List { json } => {
            let plans = ops.list_plans().await?;
            Output::of(json).list(&plans, None, output::plan)
        }
    }
}

/// A command line that names something it may not (exit status 2, as clap's own usage
/// errors).
#[derive(Debug)]
pub(crate) struct BadUsage(pub(crate) String);

impl std::fmt::Display for BadUsage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadUsage {}

/// The `--api-rate`, `--api-burst` and `--api-quota` of `plan set` as one edit per API; an
/// API that `--scopes`, when given, does not grant is refused here (without it, the plan's
/// scopes are checked where they are known).
fn api_limit_edits(
    scopes: Option<&str>,
    rates: Vec<(String, Change<RateLimit>)>,
    bursts: Vec<(String, u32)>,
    quotas: Vec<(String, Change<tessera_store::Quota>)>,
) -> Result<ApiLimitsChange> {
    let mut edits = std::collections::BTreeMap::<String, ApiLimitEdit>::new();
    let check = |flag: &str, api: &str| -> Result<()> {
        let Some(scopes) = scopes else {
            return Ok(());
        };
        if scopes.split_whitespace().any(|s| s == api) {
            return Ok(());
        }
        Err(BadUsage(format!(
            "{flag} {api}=…: the plan does not grant API {api:?} (it is not in --scopes), so              it cannot limit requests to it"
        ))
        .into())
    };
    for (api, rate) in rates {
        check("--api-rate", &api)?;
        edits.entry(api).or_default().rate = rate;
    }
    for (api, burst) in bursts {
        check("--api-burst", &api)?;
        edits.entry(api).or_default().burst = Some(burst);
    }
    for (api, quota) in quotas {
        check("--api-quota", &api)?;
        edits.entry(api).or_default().quota = quota;
    }
    Ok(ApiLimitsChange::Edit(edits))
}

async fn client(ops: &impl Operations, cmd: ClientCommand) -> Result<()> {
    match cmd {
        ClientCommand::Create {
            plan,
            org,
            name,
            auth_method,
            tls_subject_dn,
            tls_san_dns,
            tls_san_uri,
            jwks_file,
            jwks_uri,
            count,
            json,
        } => {
            let jwks = match jwks_file {
                Some(path) => Some(
                    serde_json::from_slice(&anyhow::Context::with_context(
                        std::fs::read(&path),
                        || format!("cannot read {}", path.display()),
                    )?)
                    .map_err(|e| anyhow::anyhow!("{} is not JSON: {e}", path.display()))?,
                ),
                None => None,
            };
            let new = ClientInput {
                plan: plan.unwrap_or_default(),
                org,
                name,
                token_endpoint_auth_method: Some(auth_method.as_str().to_owned()),
                tls_client_auth_subject_dn: tls_subject_dn,
                tls_client_auth_san_dns: tls_san_dns,
                tls_client_auth_san_uri: tls_san_uri,
                jwks,
                jwks_uri,
            };
            if auth_method.is_keyed() && views::credential(&new, auth_method)?.is_none() {
                anyhow::bail!(
                    "{} needs its keys: --jwks-file{}",
                    auth_method.as_str(),
                    match auth_method {
                        AuthMethod::PrivateKeyJwt => " or --jwks-uri",
                        AuthMethod::TlsClientAuth =>
                            ", --tls-subject-dn, --tls-san-dns or --tls-san-uri",
                        _ => "",
                    }
                );
            }
            // Clients are printed (and flushed) as soon as they exist, those committed
            // together at once, so that a failure part way (on the database, after some
            // batches; over HTTP, one client per request) loses no secret.
            let output = Output::of(json);
            let progress = Progress::clients(count);
            let mut out = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
            let mut print = |created: &mut dyn Iterator<Item = ClientWithSecret>| {
                progress.suspend(|| -> Result<()> {
                    for created in created {
                        output.write(&mut out, &created, |c| {
                            let mut text = format!("client_id:     {}\n", c.client.client_id);
                            if let Some(secret) = &c.client_secret {
                                text += &format!("client_secret: {}\n", secret.expose());
                            }
                            if let Some(org) = &c.client.org {
                                text += &format!("org:           {org}\n");
                            }
                            text + &format!("plan:          {}", c.client.plan)
                        })?;
                    }
                    out.flush()?;
                    Ok(())
                })
            };
            let outcome = ops.create_clients(&new, count, &progress, &mut print).await;
            progress.finish();
            if outcome.is_ok() && output == Output::Text {
                writeln!(out, "the secret is shown once; only its hash is stored")?;
            }
            out.flush()?;
            outcome
        }
        ClientCommand::List { json } => {
            let clients = ops.list_clients().await?;
            let header = format!("{:<26} {:<16} {:<8} NAME", "CLIENT_ID", "PLAN", "ENABLED");
            Output::of(json).list(&clients, Some(header), |c| {
                format!(
                    "{:<26} {:<16} {:<8} {}",
                    c.client_id.as_str(),
                    c.plan,
                    c.enabled,
                    c.name
                )
            })
        }
        ClientCommand::Show { id, json } => {
            let client = ops.show_client(&id).await?;
            // For people too: every field, indented.
            Output::of(json).object(&client, |c| {
                serde_json::to_string_pretty(c).unwrap_or_default()
            })
        }
        ClientCommand::Disable { id, json } => {
            let patch = ClientPatch {
                enabled: Some(false),
                ..ClientPatch::default()
            };
            let client = ops.update_client(&id, &patch).await?;
            Output::of(json).object(&client, |_| format!("client {id} disabled"))
        }
        ClientCommand::Enable { id, json } => {
            let patch = ClientPatch {
                enabled: Some(true),
                ..ClientPatch::default()
            };
            let client = ops.update_client(&id, &patch).await?;
            Output::of(json).object(&client, |_| format!("client {id} enabled"))
        }
        ClientCommand::SetPlan { id, plan, json } => {
            let patch = ClientPatch {
                plan: Some(plan),
                ..ClientPatch::default()
            };
            let client = ops.update_client(&id, &patch).await?;
            Output::of(json).object(&client, |c| {
                format!("client {id} is now on plan {}", c.plan)
            })
        }
        ClientCommand::RotateSecret { id, grace, json } => {
            let before = ops.show_client(&id).await?;
            let cut_short = before
                .previous_secret_valid_until
                .is_some_and(|until| until > Clock::system().now());
            let rotated = ops.rotate_secret(&id, grace).await?;
            if cut_short {
                eprintln!(
                    "note: the secret replaced by the earlier rotation stops working now; \
                     only one previous secret is kept"
                );
            }
            Output::of(json).object(&rotated, |r| {
                let mut text = format!("client_id:     {}\n", r.client.client_id);
                if let Some(secret) = &r.client_secret {
                    text += &format!("client_secret: {}\n", secret.expose());
                }
                text + &match r.client.previous_secret_valid_until {
                    Some(until) => format!(
                        "the previous secret stays valid until {} ({grace} s)",
                        rfc3339(until)
                    ),
                    None => "the previous secret no longer works".to_owned(),
                }
            })
        }
        ClientCommand::Delete { id, json } => {
            let deleted = ops.delete_client(&id).await?;
            Output::of(json).object(&deleted, |_| format!("client {id} deleted"))
        }
        ClientCommand::Usage { id, json } => {
            let days = ops.usage(&id).await?;
            let header = format!(
                "{:<10} {:>10} {:>10}  API REQUESTS (SERVED/REFUSED)",
                "DAY", "ISSUED", "REFUSED"
            );
            Output::of(json).list(&days, Some(header), |u| {
                let apis: Vec<String> = u
                    .apis
                    .iter()
                    .map(|(api, n)| format!("{api} {}/{}", n.requests, n.refused))
                    .collect();
                let row = format!("{:<10} {:>10} {:>10}", u.day, u.issued, u.refused);
                if apis.is_empty() {
                    row
                } else {
                    format!("{row}  {}", apis.join(", "))
                }
            })
        }
    }
}

async fn org(ops: &impl Operations, cmd: OrgCommand) -> Result<()> {
    let patch = |name, plan, enabled| api::OrgPatch {
        name,
        plan,
        enabled,
    };
    match cmd {
        OrgCommand::Create {
            id,
            plan,
            name,
            json,
        } => {
            let org = ops.create_org(&api::OrgInput { id, plan, name }).await?;
            Output::of(json).object(&org, output::org)
        }
        OrgCommand::List { json } => {
            let orgs = ops.list_orgs().await?;
            let header = format!(
                "{:<24} {:<16} {:<8} {:>8} NAME",
                "ORG", "PLAN", "ENABLED", "CLIENTS"
            );
            Output::of(json).list(&orgs, Some(header), |o| {
                format!(
                    "{:<24} {:<16} {:<8} {:>8} {}",
                    o.id, o.plan, o.enabled, o.clients, o.name
                )
            })
        }
        OrgCommand::Show { id, json } => {
            let org = ops.show_org(&id).await?;
            Output::of(json).object(&org, |o| {
                serde_json::to_string_pretty(o).unwrap_or_default()
            })
        }
        OrgCommand::Set {
            id,
            plan,
            name,
            json,
        } => {
            if plan.is_none() && name.is_none() {
                return Err(BadUsage("org set needs --plan or --name".to_owned()).into());
            }
            let org = ops.update_org(&id, &patch(name, plan, None)).await?;
            Output::of(json).object(&org, output::org)
        }
        OrgCommand::Disable { id, json } => {
            let org = ops.update_org(&id, &patch(None, None, Some(false))).await?;
            Output::of(json).object(&org, |o| {
                format!(
                    "organization {id} disabled: its {} client(s) get no tokens",
                    o.clients
                )
            })
        }
        OrgCommand::Enable { id, json } => {
            let org = ops.update_org(&id, &patch(None, None, Some(true))).await?;
            Output::of(json).object(&org, |_| format!("organization {id} enabled"))
        }
        OrgCommand::Usage {
            id,
            month,
            csv,
            json,
        } => {
            let (from, to) = match &month {
                Some(m) => {
                    // The month's last day: the first of 31, 30, 29, 28 that is a date.
                    let last = ["31", "30", "29", "28"]
                        .iter()
                        .map(|d| format!("{m}-{d}"))
                        .find(|day| tessera_proto::clock::is_day(day));
                    (Some(format!("{m}-01")), last)
                }
                None => (None, None),
            };
            let usage = ops.org_usage(&id, from.as_deref(), to.as_deref()).await?;
            let mut out = std::io::stdout().lock();
            if json {
                writeln!(out, "{}", serde_json::to_string_pretty(&usage)?)?;
            } else if csv {
                out.write_all(output::org_usage_csv(&usage).as_bytes())?;
            } else {
                out.write_all(output::org_usage_text(&usage).as_bytes())?;
            }
            Ok(())
        }
        OrgCommand::Delete {
            id,
            with_clients,
            json,
        } => {
            let org = ops.delete_org(&id, with_clients).await?;
            Output::of(json).object(&org, |o| {
                if with_clients {
                    format!("organization {id} deleted with its {} client(s)", o.clients)
                } else {
                    format!("organization {id} deleted")
                }
            })
        }
    }
}

async fn keys(ops: &impl Operations, cmd: KeysCommand) -> Result<()> {
    match cmd {
        KeysCommand::List { json } => {
            let keys = ops.list_keys().await?;
            let header = format!("{:<44} {:<6} {:<8} ACTIVATES_AT", "KID", "ALG", "STATUS");
            Output::of(json).list(&keys, Some(header), |k| {
                format!(
                    "{:<44} {:<6} {:<8} {}",
                    k.kid,
                    k.alg.as_str(),
                    k.status.as_str(),
                    rfc3339(k.activates_at)
                )
            })
        }
        KeysCommand::Rotate {
            activate_in,
            alg,
            json,
        } => {
            let key = ops.rotate_keys(alg, activate_in).await?;
            Output::of(json).object(&key, |k| {
                format!(
                    "key {} ({}) published now, signs from {} (in {activate_in} s)",
                    k.kid,
                    k.alg.as_str(),
                    rfc3339(k.activates_at)
                )
            })
        }
    }
}

async fn trust(ops: &impl Operations, cmd: TrustCommand) -> Result<()> {
    match cmd {
        TrustCommand::Add {
            name,
            client,
            issuer,
            jwks_uri,
            audience,
            subject,
            claims,
            max_assertion_ttl,
            allow_mutable_subject,
            allow_admin,
            json,
        } => {
            let policy = ops
                .put_trust_policy(
                    &name,
                    &api::TrustPolicyInput {
                        client_id: client,
                        issuer,
                        jwks_uri,
                        audience,
                        subject,
                        claims: claims.into_iter().collect(),
                        max_assertion_ttl,
                        allow_mutable_subject,
                        allow_admin,
                    },
                )
                .await?;
            Output::of(json).object(&policy, output::trust_policy)
        }
        TrustCommand::List { json } => {
            let policies = ops.list_trust_policies().await?;
            Output::of(json).list(&policies, None, output::trust_policy)
        }
        TrustCommand::Remove { name } => {
            ops.remove_trust_policy(&name).await?;
            let said = format!("trust policy {name} removed\n");
            std::io::Write::write_all(&mut std::io::stdout(), said.as_bytes())?;
            Ok(())
        }
    }
}
