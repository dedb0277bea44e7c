//! `tessera plan`, `tessera client` and `tessera keys`: thin wrappers that print what
//! `tessera_server::admin` does.

use anyhow::Result;
use clap::Subcommand;
use serde_json::json;
use tessera_proto::Algorithm;
use tessera_server::admin;
use tessera_store::{AuthMethod, Client};

use crate::DataArgs;

#[derive(Debug, Subcommand)]
pub enum PlanCommand {
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
    },
    /// List plans.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum ClientCommand {
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
        /// Print one JSON object.
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
        #[arg(long, default_value_t = 86_400)]
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
}

#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// List signing keys.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Add a key that is published now and signs after --activate-in seconds.
    Rotate {
        /// Seconds between publication and first signature, so verifiers learn the key first.
        #[arg(long, default_value_t = 600)]
        activate_in: i64,
        /// EdDSA or ES256.
        #[arg(long, default_value = "EdDSA", value_parser = crate::parse_alg)]
        alg: Algorithm,
    },
}

fn parse_method(s: &str) -> Result<AuthMethod, String> {
    AuthMethod::parse(s).ok_or_else(|| {
        format!("unknown method {s:?}: use client_secret_basic or client_secret_post")
    })
}

pub async fn plan(data: &DataArgs, cmd: PlanCommand) -> Result<()> {
    let store = data.store().await?;
    match cmd {
        PlanCommand::Set {
            name,
            scopes,
            token_ttl,
        } => {
            let plan = admin::set_plan(store.as_ref(), &name, &scopes, token_ttl).await?;
            println!(
                "plan {} grants {:?}, tokens live {} s",
                plan.name,
                plan.scopes.to_string(),
                plan.token_ttl
            );
        }
        PlanCommand::List { json } => {
            let plans = store.plans().await?;
            if json {
                let list: Vec<_> = plans
                    .iter()
                    .map(|p| json!({"name": p.name, "scopes": p.scopes.to_string(), "token_ttl": p.token_ttl}))
                    .collect();
                println!("{}", serde_json::to_string_pretty(&list)?);
            } else {
                println!("{:<20} {:>9}  SCOPES", "PLAN", "TOKEN_TTL");
                for p in plans {
                    println!("{:<20} {:>9}  {}", p.name, p.token_ttl, p.scopes);
                }
            }
        }
    }
    Ok(())
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

pub async fn client(data: &DataArgs, cmd: ClientCommand) -> Result<()> {
    let store = data.store().await?;
    let store = store.as_ref();
    match cmd {
        ClientCommand::Create {
            plan,
            name,
            auth_method,
            json,
        } => {
            let (secrets, _) = data.secrets(store).await?;
            let (client, secret) =
                admin::create_client(store, &secrets, &plan, &name, auth_method).await?;
            if json {
                let mut out = client_json(&client);
                out["client_secret"] = secret.expose().into();
                println!("{out}");
            } else {
                println!("client_id:     {}", client.id);
                println!("client_secret: {}", secret.expose());
                println!("plan:          {}", client.plan);
                println!("the secret is shown once; only its hash is stored");
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
            let client = admin::client(store, &id).await?;
            let out = client_json(&client);
            if json {
                println!("{out}");
            } else {
                println!("{}", serde_json::to_string_pretty(&out)?);
            }
        }
        ClientCommand::Disable { id } => {
            admin::update_client(store, &id, |c| c.enabled = false).await?;
            println!("client {id} disabled");
        }
        ClientCommand::Enable { id } => {
            admin::update_client(store, &id, |c| c.enabled = true).await?;
            println!("client {id} enabled");
        }
        ClientCommand::SetPlan { id, plan } => {
            admin::update_client(store, &id, |c| c.plan = plan.clone()).await?;
            println!("client {id} is now on plan {plan}");
        }
        ClientCommand::RotateSecret { id, grace, json } => {
            let (secrets, _) = data.secrets(store).await?;
            let (client, secret) = admin::rotate_secret(store, &secrets, &id, grace).await?;
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
            admin::delete_client(store, &id).await?;
            println!("client {id} deleted");
        }
    }
    Ok(())
}

pub async fn keys(data: &DataArgs, cmd: KeysCommand) -> Result<()> {
    let store = data.store().await?;
    let store = store.as_ref();
    match cmd {
        KeysCommand::List { json } => {
            let keys = store.keys().await?;
            let now = tessera_store::now();
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
            let key = admin::rotate_keys(store, &secrets, alg, activate_in).await?;
            println!(
                "key {} ({}) published now, signs from {} (in {activate_in} s)",
                key.kid, key.alg, key.activates_at
            );
        }
    }
    Ok(())
}
