//! `tessera plan`, `tessera client` and `tessera keys`: each command is one call of
//! [`Operations`], served either by the database ([`Database`], through
//! `tessera_server::registrar`) or, with `--admin-url`, by a Tessera's admin API
//! ([`Http`]). Both answer with the admin API's objects, as the contract shared with the
//! server defines them ([`tessera_proto::admin`]), so the printing below serves both, and
//! `--json` prints those objects.
//!
//! # Layout
//!
//! - this file: the commands, the [`Operations`] they call, and what they print;
//! - [`database`]: the operations on the store; [`http`]: the same over the admin API;
//! - [`progress`]: the bar `client create --count` draws on a terminal.

use std::io::Write;

use anyhow::Result;
use clap::Subcommand;
use tessera_proto::admin::{
    self as api, Client, ClientInput, ClientPatch, ClientWithSecret, Key, Plan, TrustPolicy,
    UsageDay,
};
use tessera_proto::clock::{rfc3339, Clock};
use tessera_proto::Algorithm;
use tessera_server::registrar::{views, Change, PlanSettings};
use tessera_store::{AuthMethod, RateLimit};

use crate::{Access, DataArgs};

mod database;
mod http;
mod progress;

use database::Database;
use http::Http;
use progress::Progress;

#[derive(Debug, Subcommand)]
pub(crate) enum PlanCommand {
    /// Create a plan or change its scopes and token lifetime.
    Set {
        /// Plan name.
        name: String,
        /// Space-separated scope names, each naming one API.
        #[arg(long)]
        scopes: String,
        /// Token lifetime in seconds (default 3600 for a new plan).
        #[arg(long)]
        token_ttl: Option<u32>,
        /// Token requests per client: COUNT/UNIT with UNIT sec, min, hour or day
        /// (e.g. 60/min), or "none" for no limit.
        #[arg(long)]
        token_rate: Option<String>,
        /// Requests a client may make at once after a quiet spell (default: the rate's COUNT).
        #[arg(long, requires = "token_rate")]
        token_burst: Option<u32>,
        /// Token reuse: while a client's last token for the same scopes has more than this
        /// percentage of its lifetime left, return it again; 0 turns reuse off.
        #[arg(long)]
        reuse_percent: Option<u8>,
        /// Let the plan's clients introspect tokens issued to other clients (an API that
        /// checks the tokens it receives); `--introspect-any=false` turns it off. Without
        /// it a client learns the state of its own tokens only (RFC 7662 section 4).
        #[arg(long, num_args = 0..=1, default_missing_value = "true")]
        introspect_any: Option<bool>,
        /// DPoP (RFC 9449) for the plan's clients: `required` refuses a token request
        /// without a DPoP proof, `allowed` (the default) binds the token to the proof's key
        /// when one comes, `off` ignores proofs and issues Bearer tokens only.
        #[arg(long, value_parser = ["required", "allowed", "off"])]
        dpop: Option<String>,
        /// Print the plan as JSON.
        #[arg(long)]
        json: bool,
    },
    /// List plans.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum ClientCommand {
    /// Register a client; prints its secret once.
    Create {
        /// The plan deciding its scopes.
        #[arg(long)]
        plan: String,
        /// A label for people.
        #[arg(long, default_value = "")]
        name: String,
        /// client_secret_basic (default), client_secret_post; with a certificate
        /// (RFC 8705): tls_client_auth (with --tls-subject-dn, --tls-san-dns or
        /// --tls-san-uri) or self_signed_tls_client_auth (with --jwks-file); with signed
        /// assertions (RFC 7523): private_key_jwt (with --jwks-file or --jwks-uri).
        #[arg(long, default_value = "client_secret_basic", value_parser = parse_method)]
        auth_method: AuthMethod,
        /// tls_client_auth: the subject DN its certificate must carry, in RFC 4514 form as
        /// `openssl x509 -noout -subject -nameopt RFC2253` prints it (CN=billing,O=Acme).
        #[arg(long, group = "certificate")]
        tls_subject_dn: Option<String>,
        /// tls_client_auth: a DNS name its certificate must carry as a SAN.
        #[arg(long, group = "certificate")]
        tls_san_dns: Option<String>,
        /// tls_client_auth: a URI its certificate must carry as a SAN (a SPIFFE ID).
        #[arg(long, group = "certificate")]
        tls_san_uri: Option<String>,
        /// self_signed_tls_client_auth: a JWK Set file with the certificate's public key;
        /// private_key_jwt: with the public keys its assertions are signed with.
        #[arg(long, group = "certificate")]
        jwks_file: Option<std::path::PathBuf>,
        /// private_key_jwt: the https URL where the client publishes its JWK Set (fetched
        /// when needed, so a key rollover there needs no admin action).
        #[arg(long, group = "certificate")]
        jwks_uri: Option<String>,
        /// How many clients to create: in one transaction, or over --admin-url one request
        /// each.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
        count: u32,
        /// Print one JSON object per client, one per line.
        #[arg(long)]
        json: bool,
    },
    /// List clients.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show one client.
    Show {
        /// Client id.
        id: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Refuse tokens to a client.
    Disable {
        /// Client id.
        id: String,
        /// Print the client as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Allow tokens to a client again.
    Enable {
        /// Client id.
        id: String,
        /// Print the client as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Move a client to another plan; applies to its next token request.
    SetPlan {
        /// Client id.
        id: String,
        /// The new plan.
        plan: String,
        /// Print the client as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Give a client a new secret; the old one works for --grace seconds more.
    RotateSecret {
        /// Client id.
        id: String,
        /// Seconds the old secret stays valid.
        #[arg(long, default_value_t = 86_400, value_parser = clap::value_parser!(i64).range(0..=MAX_DELAY))]
        grace: i64,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Remove a client.
    Delete {
        /// Client id.
        id: String,
        /// Print the deleted client as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Token requests per UTC day, for metering (written by the server every 30 s and on
    /// shutdown).
    Usage {
        /// Client id.
        id: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum KeysCommand {
    /// List signing keys.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Add a key that is published now and signs after --activate-in seconds.
    Rotate {
        /// Seconds between publication and first signature, so verifiers learn the key first.
        #[arg(long, default_value_t = 600, value_parser = clap::value_parser!(i64).range(0..=MAX_DELAY))]
        activate_in: i64,
        /// EdDSA, ES256, RS256 or PS256 (RSA for gateways that accept only RSA).
        #[arg(long, default_value = "EdDSA", value_parser = crate::parse_alg)]
        alg: Algorithm,
        /// Print the new key as JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum TrustCommand {
    /// Let tokens of an external issuer (a Kubernetes cluster, GitHub Actions, a SPIFFE
    /// trust domain) act as a client: workload identity federation.
    Add {
        /// Policy name.
        name: String,
        /// The client the workload acts as.
        #[arg(long)]
        client: String,
        /// The external issuer, as its tokens name it in `iss` (an https URL).
        #[arg(long)]
        issuer: String,
        /// Where the issuer's keys are; by default found through its OpenID Connect
        /// discovery document.
        #[arg(long)]
        jwks_uri: Option<String>,
        /// A value the token's `aud` must hold.
        #[arg(long)]
        audience: String,
        /// The token's `sub`: exact, or a prefix ending in `:` or `/` followed by `*`
        /// (e.g. `system:serviceaccount:payments:*`); `*` alone is refused.
        #[arg(long)]
        subject: String,
        /// A claim the token must carry with this value (repeatable), e.g.
        /// `--claim repository_id=123456 --claim ref=refs/heads/main`. GitHub Actions'
        /// issuer needs `repository_id` or `repository_owner_id` among them.
        #[arg(long = "claim", value_parser = parse_claim)]
        claims: Vec<(String, String)>,
        /// The longest life an accepted token may have, in seconds (tokens must then
        /// carry `iat`).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
        max_assertion_ttl: Option<u32>,
        /// For GitHub Actions' issuer: accept a policy without a `repository_id` or
        /// `repository_owner_id` claim, trusting repository names, which can change hands.
        #[arg(long)]
        allow_mutable_subject: bool,
        /// Accept a policy on a client whose plan grants tessera-admin or
        /// tessera-admin-read: tokens from outside could then administer Tessera.
        #[arg(long)]
        allow_admin: bool,
        /// Print the policy as JSON.
        #[arg(long)]
        json: bool,
    },
    /// List trust policies.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove a trust policy.
    Remove {
        /// Policy name.
        name: String,
    },
}

fn parse_claim(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok((name.to_owned(), value.to_owned())),
        _ => Err(format!("{s:?} is not NAME=VALUE")),
    }
}

/// An admin command: `plan`, `client`, `keys` or `trust`.
#[derive(Debug)]
pub(crate) enum AdminCommand {
    Plan(PlanCommand),
    Client(ClientCommand),
    Keys(KeysCommand),
    Trust(TrustCommand),
}

impl AdminCommand {
    fn access(&self) -> Access {
        match self {
            Self::Plan(PlanCommand::List { .. })
            | Self::Client(ClientCommand::List { .. })
            | Self::Client(ClientCommand::Show { .. })
            | Self::Client(ClientCommand::Usage { .. })
            | Self::Keys(KeysCommand::List { .. })
            | Self::Trust(TrustCommand::List { .. }) => Access::Read,
            _ => Access::Write,
        }
    }
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
    /// Creates a plan or changes it; a setting not named keeps its value.
    async fn set_plan(&self, name: &str, scopes: &str, settings: &PlanSettings) -> Result<Plan>;
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

/// Runs an admin command on the database, or with `admin_url` on that Tessera's admin API.
pub(crate) async fn run(
    data: &DataArgs,
    admin_url: Option<&str>,
    command: AdminCommand,
) -> Result<()> {
    match admin_url {
        Some(url) => execute(&Http::connect(url)?, command).await,
        None => execute(&Database::open(data, command.access()).await?, command).await,
    }
}

async fn execute(ops: &impl Operations, command: AdminCommand) -> Result<()> {
    match command {
        AdminCommand::Plan(cmd) => plan(ops, cmd).await,
        AdminCommand::Client(cmd) => client(ops, cmd).await,
        AdminCommand::Keys(cmd) => keys(ops, cmd).await,
        AdminCommand::Trust(cmd) => trust(ops, cmd).await,
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
            if json {
                print_json(&policy)?;
            } else {
                println!("{}", describe_trust(&policy));
            }
        }
        TrustCommand::List { json } => {
            let policies = ops.list_trust_policies().await?;
            if json {
                print_json_pretty(&policies)?;
            } else {
                for policy in &policies {
                    println!("{}", describe_trust(policy));
                }
            }
        }
        TrustCommand::Remove { name } => {
            ops.remove_trust_policy(&name).await?;
            println!("trust policy {name} removed");
        }
    }
    Ok(())
}

fn describe_trust(p: &TrustPolicy) -> String {
    let claims: Vec<String> = p.claims.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!(
        "trust policy {}: tokens of {} for audience {:?} with sub {:?}{}{} act as client {}",
        p.name,
        p.issuer,
        p.audience,
        p.subject,
        if claims.is_empty() {
            String::new()
        } else {
            format!(" and {}", claims.join(", "))
        },
        p.max_assertion_ttl
            .map_or(String::new(), |t| format!(", living at most {t} s")),
        p.client_id
    )
}

/// The longest grace period or activation delay: a year.
const MAX_DELAY: i64 = 365 * 86_400;

fn parse_method(s: &str) -> Result<AuthMethod, String> {
    AuthMethod::parse(s).ok_or_else(|| {
        format!(
            "unknown method {s:?}: use client_secret_basic, client_secret_post, \
             private_key_jwt, tls_client_auth or self_signed_tls_client_auth"
        )
    })
}

/// Prints `value` as one line of JSON.
fn print_json(value: &impl serde::Serialize) -> Result<()> {
    println!("{}", serde_json::to_string(value)?);
    Ok(())
}

/// Prints `value` as indented JSON.
fn print_json_pretty(value: &impl serde::Serialize) -> Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
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
            json,
        } => {
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
                dpop: dpop
                    .map(|d| {
                        d.parse()
                            .map_err(|e: tessera_store::UnknownDpopPolicy| anyhow::anyhow!(e))
                    })
                    .transpose()?,
            };
            let plan = ops.set_plan(&name, &scopes, &settings).await?;
            if json {
                print_json(&plan)?;
            } else {
                println!("{}", describe(&plan));
            }
        }
        PlanCommand::List { json } => {
            let plans = ops.list_plans().await?;
            if json {
                print_json_pretty(&plans)?;
            } else {
                for p in plans {
                    println!("{}", describe(&p));
                }
            }
        }
    }
    Ok(())
}

fn describe(p: &Plan) -> String {
    let rate = p.token_rate.map_or("no rate limit".to_owned(), |r| {
        format!("at most {} token requests per client", views::rate_limit(r))
    });
    let reuse = p.reuse_percent.map_or(String::new(), |r| {
        format!(", tokens reused while over {r}% of their life is left")
    });
    let introspect = if p.introspect_any {
        ", may introspect any token"
    } else {
        ""
    };
    let dpop = match p.dpop {
        api::Dpop::Required => ", DPoP required",
        api::Dpop::Off => ", DPoP off",
        api::Dpop::Allowed => "",
    };
    format!(
        "plan {}: scopes \"{}\", tokens live {} s, {rate}{reuse}{introspect}{dpop}",
        p.name,
        p.scopes.join(" "),
        p.token_ttl
    )
}

async fn client(ops: &impl Operations, cmd: ClientCommand) -> Result<()> {
    match cmd {
        ClientCommand::Create {
            plan,
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
                plan,
                name,
                token_endpoint_auth_method: Some(auth_method.as_str().to_owned()),
                tls_client_auth_subject_dn: tls_subject_dn,
                tls_client_auth_san_dns: tls_san_dns,
                tls_client_auth_san_uri: tls_san_uri,
                jwks,
                jwks_uri,
            };
            if auth_method.is_keyed() && views::certificate_match(&new)?.is_none() {
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
            let progress = Progress::clients(count);
            let mut out = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
            let mut print = |created: &mut dyn Iterator<Item = ClientWithSecret>| {
                progress.suspend(|| -> Result<()> {
                    for created in created {
                        if json {
                            serde_json::to_writer(&mut out, &created)?;
                            out.write_all(b"\n")?;
                        } else {
                            writeln!(out, "client_id:     {}", created.client.client_id)?;
                            if let Some(secret) = &created.client_secret {
                                writeln!(out, "client_secret: {}", secret.expose())?;
                            }
                            writeln!(out, "plan:          {}", created.client.plan)?;
                        }
                    }
                    out.flush()?;
                    Ok(())
                })
            };
            let outcome = ops.create_clients(&new, count, &progress, &mut print).await;
            progress.finish();
            if outcome.is_ok() && !json {
                writeln!(out, "the secret is shown once; only its hash is stored")?;
            }
            out.flush()?;
            outcome?;
        }
        ClientCommand::List { json } => {
            let clients = ops.list_clients().await?;
            if json {
                print_json_pretty(&clients)?;
            } else {
                println!("{:<26} {:<16} {:<8} NAME", "CLIENT_ID", "PLAN", "ENABLED");
                for c in clients {
                    println!(
                        "{:<26} {:<16} {:<8} {}",
                        c.client_id.as_str(),
                        c.plan,
                        c.enabled,
                        c.name
                    );
                }
            }
        }
        ClientCommand::Show { id, json } => {
            let client = ops.show_client(&id).await?;
            if json {
                print_json(&client)?;
            } else {
                print_json_pretty(&client)?;
            }
        }
        ClientCommand::Disable { id, json } => {
            let patch = ClientPatch {
                enabled: Some(false),
                ..ClientPatch::default()
            };
            let client = ops.update_client(&id, &patch).await?;
            if json {
                print_json(&client)?;
            } else {
                println!("client {id} disabled");
            }
        }
        ClientCommand::Enable { id, json } => {
            let patch = ClientPatch {
                enabled: Some(true),
                ..ClientPatch::default()
            };
            let client = ops.update_client(&id, &patch).await?;
            if json {
                print_json(&client)?;
            } else {
                println!("client {id} enabled");
            }
        }
        ClientCommand::SetPlan { id, plan, json } => {
            let patch = ClientPatch {
                plan: Some(plan),
                ..ClientPatch::default()
            };
            let client = ops.update_client(&id, &patch).await?;
            if json {
                print_json(&client)?;
            } else {
                println!("client {id} is now on plan {}", client.plan);
            }
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
            if json {
                print_json(&rotated)?;
            } else {
                println!("client_id:     {}", rotated.client.client_id);
                if let Some(secret) = &rotated.client_secret {
                    println!("client_secret: {}", secret.expose());
                }
                match rotated.client.previous_secret_valid_until {
                    Some(until) => println!(
                        "the previous secret stays valid until {} ({grace} s)",
                        rfc3339(until)
                    ),
                    None => println!("the previous secret no longer works"),
                }
            }
        }
        ClientCommand::Delete { id, json } => {
            let deleted = ops.delete_client(&id).await?;
            if json {
                print_json(&deleted)?;
            } else {
                println!("client {id} deleted");
            }
        }
        ClientCommand::Usage { id, json } => {
            let days = ops.usage(&id).await?;
            if json {
                print_json_pretty(&days)?;
            } else {
                println!("{:<10} {:>10} {:>10}", "DAY", "ISSUED", "REFUSED");
                for u in days {
                    println!("{:<10} {:>10} {:>10}", u.day, u.issued, u.refused);
                }
            }
        }
    }
    Ok(())
}

async fn keys(ops: &impl Operations, cmd: KeysCommand) -> Result<()> {
    match cmd {
        KeysCommand::List { json } => {
            let keys = ops.list_keys().await?;
            if json {
                print_json_pretty(&keys)?;
            } else {
                println!("{:<44} {:<6} {:<8} ACTIVATES_AT", "KID", "ALG", "STATUS");
                for k in &keys {
                    println!(
                        "{:<44} {:<6} {:<8} {}",
                        k.kid,
                        k.alg.as_str(),
                        k.status.as_str(),
                        rfc3339(k.activates_at)
                    );
                }
            }
        }
        KeysCommand::Rotate {
            activate_in,
            alg,
            json,
        } => {
            let key = ops.rotate_keys(alg, activate_in).await?;
            if json {
                print_json(&key)?;
            } else {
                println!(
                    "key {} ({}) published now, signs from {} (in {activate_in} s)",
                    key.kid,
                    key.alg.as_str(),
                    rfc3339(key.activates_at)
                );
            }
        }
    }
    Ok(())
}
