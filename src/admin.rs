//! `tessera plan`, `tessera client` and `tessera keys`: thin wrappers that print what
//! `tessera_server::admin` does.

use std::io::Write;

use anyhow::Result;
use clap::Subcommand;
use serde_json::json;
use tessera_proto::Algorithm;
use tessera_server::admin::{self, Admin, Change};
use tessera_server::clock::Clock;
use tessera_store::{AuthMethod, Client, RateLimit};

use crate::{Access, DataArgs};

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
        /// client_secret_basic (default) or client_secret_post.
        #[arg(long, default_value = "client_secret_basic", value_parser = parse_method)]
        auth_method: AuthMethod,
        /// How many clients to create (in one transaction).
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
    },
    /// Allow tokens to a client again.
    Enable {
        /// Client id.
        id: String,
    },
    /// Move a client to another plan; applies to its next token request.
    SetPlan {
        /// Client id.
        id: String,
        /// The new plan.
        plan: String,
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
        /// EdDSA or ES256.
        #[arg(long, default_value = "EdDSA", value_parser = crate::parse_alg)]
        alg: Algorithm,
    },
}

impl PlanCommand {
    fn access(&self) -> Access {
        match self {
            Self::List { .. } => Access::Read,
            Self::Set { .. } => Access::Write,
        }
    }
}

impl ClientCommand {
    fn access(&self) -> Access {
        match self {
            Self::List { .. } | Self::Show { .. } | Self::Usage { .. } => Access::Read,
            Self::Create { .. }
            | Self::Disable { .. }
            | Self::Enable { .. }
            | Self::SetPlan { .. }
            | Self::RotateSecret { .. }
            | Self::Delete { .. } => Access::Write,
        }
    }
}

impl KeysCommand {
    fn access(&self) -> Access {
        match self {
            Self::List { .. } => Access::Read,
            Self::Rotate { .. } => Access::Write,
        }
    }
}

/// The longest grace period or activation delay: a year.
const MAX_DELAY: i64 = 365 * 86_400;

fn parse_method(s: &str) -> Result<AuthMethod, String> {
    AuthMethod::parse(s).ok_or_else(|| {
        format!("unknown method {s:?}: use client_secret_basic or client_secret_post")
    })
}

pub(crate) async fn plan(data: &DataArgs, cmd: PlanCommand) -> Result<()> {
    let store = data.store(cmd.access()).await?;
    let clock = Clock::system();
    let ops = Admin::new(store.as_ref(), &clock);
    match cmd {
        PlanCommand::Set {
            name,
            scopes,
            token_ttl,
            token_rate,
            token_burst,
            reuse_percent,
            introspect_any,
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
            let settings = admin::PlanSettings {
                token_ttl,
                token_rate,
                reuse_percent: match reuse_percent {
                    None => Change::Keep,
                    Some(0) => Change::Clear,
                    Some(p) => Change::Set(p),
                },
                introspect_any,
            };
            let plan = ops.set_plan_with(&name, &scopes, &settings).await?;
            println!("{}", describe(&plan));
        }
        PlanCommand::List { json } => {
            let plans = store.plans().await?;
            if json {
                let list: Vec<_> = plans
                    .iter()
                    .map(|p| {
                        json!({"name": p.name, "scopes": p.scopes.to_string(), "token_ttl": p.token_ttl,
                               "token_rate": p.token_rate.map(|r| json!({"count": r.count, "period_secs": r.period_secs, "burst": r.burst})),
                               "reuse_percent": p.reuse_percent, "introspect_any": p.introspect_any})
                    })
                    .collect();
                println!("{}", serde_json::to_string_pretty(&list)?);
            } else {
                for p in plans {
                    println!("{}", describe(&p));
                }
            }
        }
    }
    Ok(())
}

fn describe(p: &tessera_store::Plan) -> String {
    let rate = p.token_rate.map_or("no rate limit".to_owned(), |r| {
        format!("at most {r} token requests per client")
    });
    let reuse = p.reuse_percent.map_or(String::new(), |r| {
        format!(", tokens reused while over {r}% of their life is left")
    });
    let introspect = if p.introspect_any {
        ", may introspect any token"
    } else {
        ""
    };
    format!(
        "plan {}: scopes \"{}\", tokens live {} s, {rate}{reuse}{introspect}",
        p.name, p.scopes, p.token_ttl
    )
}

fn client_json(c: &Client) -> serde_json::Value {
    json!({
        "client_id": c.id,
        "plan": c.plan,
        "name": c.label,
        "enabled": c.enabled,
        "token_endpoint_auth_method": c.auth_method.as_str(),
        "previous_secret_valid_until": c.previous_secret.as_ref().map(|(_, until)| until),
        "created_at": c.created_at,
        "updated_at": c.updated_at,
    })
}

pub(crate) async fn client(data: &DataArgs, cmd: ClientCommand) -> Result<()> {
    let store = data.store(cmd.access()).await?;
    let store = store.as_ref();
    let clock = Clock::system();
    let ops = Admin::new(store, &clock);
    match cmd {
        ClientCommand::Create {
            plan,
            name,
            auth_method,
            count,
            json,
        } => {
            let (secrets, _) = data.secrets(store).await?;
            let created = ops
                .create_clients(&secrets, &plan, &name, auth_method, count as usize)
                .await?;
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            for (client, secret) in &created {
                if json {
                    let mut line = client_json(client);
                    line["client_secret"] = secret.expose().into();
                    writeln!(out, "{line}")?;
                } else {
                    writeln!(out, "client_id:     {}", client.id)?;
                    writeln!(out, "client_secret: {}", secret.expose())?;
                    writeln!(out, "plan:          {}", client.plan)?;
                }
            }
            if !json {
                writeln!(out, "the secret is shown once; only its hash is stored")?;
            }
        }
        ClientCommand::List { json } => {
            let clients = store.clients().await?;
            if json {
                let list: Vec<_> = clients.iter().map(client_json).collect();
                println!("{}", serde_json::to_string_pretty(&list)?);
            } else {
                println!("{:<26} {:<16} {:<8} NAME", "CLIENT_ID", "PLAN", "ENABLED");
                for c in clients {
                    println!("{:<26} {:<16} {:<8} {}", c.id, c.plan, c.enabled, c.label);
                }
            }
        }
        ClientCommand::Show { id, json } => {
            let client = ops.client(&id).await?;
            let out = client_json(&client);
            if json {
                println!("{out}");
            } else {
                println!("{}", serde_json::to_string_pretty(&out)?);
            }
        }
        ClientCommand::Disable { id } => {
            ops.update_client(&id, |c| c.enabled = false).await?;
            println!("client {id} disabled");
        }
        ClientCommand::Enable { id } => {
            ops.update_client(&id, |c| c.enabled = true).await?;
            println!("client {id} enabled");
        }
        ClientCommand::SetPlan { id, plan } => {
            ops.update_client(&id, |c| c.plan = plan.clone()).await?;
            println!("client {id} is now on plan {plan}");
        }
        ClientCommand::RotateSecret { id, grace, json } => {
            let (secrets, _) = data.secrets(store).await?;
            let before = ops.client(&id).await?;
            let cut_short = before
                .previous_secret
                .as_ref()
                .is_some_and(|(_, until)| *until > clock.now());
            let (client, secret) = ops.rotate_secret(&secrets, &id, grace).await?;
            if cut_short {
                eprintln!(
                    "note: the secret replaced by the earlier rotation stops working now; \
                     only one previous secret is kept"
                );
            }
            if json {
                let mut out = client_json(&client);
                out["client_secret"] = secret.expose().into();
                println!("{out}");
            } else {
                println!("client_id:     {}", client.id);
                println!("client_secret: {}", secret.expose());
                println!("the previous secret stays valid for {grace} s");
            }
        }
        ClientCommand::Delete { id } => {
            ops.delete_client(&id).await?;
            println!("client {id} deleted");
        }
        ClientCommand::Usage { id, json } => {
            let client = ops.client(&id).await?;
            let days = store.usage(&client.id).await?;
            if json {
                let list: Vec<_> = days
                    .iter()
                    .map(|u| json!({"day": u.day, "issued": u.issued, "refused": u.refused}))
                    .collect();
                println!("{}", serde_json::to_string_pretty(&list)?);
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

pub(crate) async fn keys(data: &DataArgs, cmd: KeysCommand) -> Result<()> {
    let store = data.store(cmd.access()).await?;
    let store = store.as_ref();
    let clock = Clock::system();
    let ops = Admin::new(store, &clock);
    match cmd {
        KeysCommand::List { json } => {
            let keys = store.keys().await?;
            let now = clock.now();
            let signing = keys
                .iter()
                .rev()
                .find(|k| k.activates_at <= now)
                .map(|k| k.kid.clone());
            let status = |k: &tessera_store::SigningKey| {
                if Some(&k.kid) == signing.as_ref() {
                    "signing"
                } else if k.activates_at > now {
                    "next"
                } else {
                    "retired"
                }
            };
            if json {
                let list: Vec<_> = keys
                    .iter()
                    .map(|k| {
                        json!({"kid": k.kid, "alg": k.alg.as_str(), "created_at": k.created_at,
                                    "activates_at": k.activates_at, "status": status(k)})
                    })
                    .collect();
                println!("{}", serde_json::to_string_pretty(&list)?);
            } else {
                println!(
                    "{:<44} {:<6} {:<8} {:>12}",
                    "KID", "ALG", "STATUS", "ACTIVATES_AT"
                );
                for k in &keys {
                    println!(
                        "{:<44} {:<6} {:<8} {:>12}",
                        k.kid,
                        k.alg,
                        status(k),
                        k.activates_at
                    );
                }
            }
        }
        KeysCommand::Rotate { activate_in, alg } => {
            let (secrets, _) = data.secrets(store).await?;
            let key = ops.rotate_keys(&secrets, alg, activate_in).await?;
            println!(
                "key {} ({}) published now, signs from {} (in {activate_in} s)",
                key.kid, key.alg, key.activates_at
            );
        }
    }
    Ok(())
}
