//! The database backend: the operations run in this process on the store, through
//! [`tessera_server::registrar::Registrar`], the same code the server's admin API calls.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::Arc;

use anyhow::{Context, Result};
use tessera_proto::admin::{
    self as api, Client, ClientInput, ClientPatch, ClientWithSecret, Key, Plan, TrustPolicy,
    UsageDay,
};
use tessera_proto::Algorithm;
use tessera_server::audit::Change;
use tessera_server::clock::Clock;
use tessera_server::registrar::{views, CreatedClients, PlanSettings, Registrar};
use tessera_server::secrets::Secrets;
use tessera_store::{AuditEvent, AuthMethod, Store};

use super::progress::Progress;
use super::{created_before, OnCreated, Operations};
use crate::{Access, DataArgs};

/// The store named by `--database`, dated by the system clock.
pub(crate) struct Database<'a> {
    data: &'a DataArgs,
    store: Arc<dyn Store>,
    clock: Clock,
}

impl std::fmt::Debug for Database<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Database")
            .field("url", &tessera_server::redact_url(&self.data.database))
            .finish_non_exhaustive()
    }
}

impl<'a> Database<'a> {
    /// Opens the store for a command that reads or writes (see [`DataArgs::store`]).
    pub(crate) async fn open(data: &'a DataArgs, access: Access) -> Result<Self> {
        Ok(Self {
            data,
            store: data.store(access).await?,
            clock: Clock::system(),
        })
    }

    fn registrar(&self) -> Registrar<'_> {
        Registrar::new(self.store.as_ref(), &self.clock)
    }

    /// A change this command is about to make straight on the database, with its audit
    /// event (issue 29): kept in the change's transaction, naming the local operator
    /// ([`operator`]) and the channel `cli`. An empty `object` is named by the store (a new
    /// client's or key's id).
    fn change(&self, object: &str, action: &str) -> Change {
        Change::new(
            self.store.as_ref(),
            AuditEvent {
                id: 0,
                at: self.clock.now(),
                actor: operator(),
                action: action.to_owned(),
                object: object.to_owned(),
                source: String::new(),
                channel: "cli".into(),
            },
        )
    }

    /// The master key, loaded by the server's policy; only the commands that make a secret
    /// or a key need it.
    async fn secrets(&self) -> Result<Arc<Secrets>> {
        Ok(self.data.secrets(self.store.as_ref()).await?.0)
    }

    /// How many clients each plan has.
    async fn clients_per_plan(&self) -> Result<HashMap<String, u64>> {
        Ok(self.store.clients_per_plan().await?.into_iter().collect())
    }
}

/// Who runs this command, as the audit trail names a change made straight on the database:
/// `cli:` and the operating system's user (`$USER`, else `$LOGNAME`, else the name
/// `/etc/passwd` gives the process's user id, else that id).
fn operator() -> String {
    use std::os::unix::fs::MetadataExt;
    let from_env = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .ok()
        .filter(|u| !u.is_empty());
    let user = from_env.unwrap_or_else(|| {
        let Ok(uid) = std::fs::metadata("/proc/self").map(|m| m.uid()) else {
            return "unknown".into();
        };
        std::fs::read_to_string("/etc/passwd")
            .ok()
            .and_then(|passwd| {
                passwd.lines().find_map(|line| {
                    let mut fields = line.split(':');
                    let name = fields.next()?;
                    (fields.nth(1)? == uid.to_string()).then(|| name.to_owned())
                })
            })
            .unwrap_or_else(|| format!("uid {uid}"))
    });
    format!("cli:{user}")
}

/// Clients committed together, as `client create` prints them, secrets included.
fn with_secrets(created: CreatedClients) -> impl Iterator<Item = ClientWithSecret> {
    let CreatedClients {
        plan,
        org,
        label,
        auth_method,
        created_at,
        credentials,
    } = created;
    credentials
        .into_iter()
        .map(move |(client_id, secret)| ClientWithSecret {
            client: Client {
                client_id,
                plan: plan.clone(),
                org: org.clone(),
                name: label.clone(),
                enabled: true,
                token_endpoint_auth_method: auth_method.as_str().to_owned(),
                previous_secret_valid_until: None,
                created_at,
                updated_at: created_at,
                tls_client_auth_subject_dn: None,
                tls_client_auth_san_dns: None,
                tls_client_auth_san_uri: None,
                jwks: None,
                jwks_uri: None,
            },
            client_secret: Some(secret),
        })
}

impl Operations for Database<'_> {
    async fn set_plan(
        &self,
        name: &str,
        scopes: Option<&str>,
        settings: &PlanSettings,
    ) -> Result<Plan> {
        let kept;
        let scopes = match scopes {
            Some(scopes) => scopes,
            None => {
                let plans = self.store.plans().await?;
                let plan = plans.iter().find(|p| p.name == name);
                kept = plan
                    .ok_or_else(|| super::new_plan_needs_scopes(name))?
                    .scopes
                    .to_string();
                &kept
            }
        };
        let existed = self.store.plans().await?.iter().any(|p| p.name == name);
        let change = self.change(
            &format!("plan:{name}"),
            if existed { "replaced" } else { "created" },
        );
        let written = change
            .registrar(&self.clock)
            .set_plan_with(name, scopes, settings)
            .await?;
        change.made().await;
        let clients = self.clients_per_plan().await?;
        Ok(views::plan(
            &written,
            clients.get(name).copied().unwrap_or(0),
        ))
    }

    async fn list_plans(&self) -> Result<Vec<Plan>> {
        let clients = self.clients_per_plan().await?;
        Ok(self
            .store
            .plans()
            .await?
            .into_iter()
            .map(|p| {
                let count = clients.get(&p.name).copied().unwrap_or(0);
                views::plan(&p, count)
            })
            .collect())
    }

    /// In batches of `CREATE_BATCH`, one transaction each, so that the registry's lock is
    /// held for one batch at a time (other writes, on every instance, wait for one batch at
    /// most); each batch's secrets are handed to `on_created` once it is committed, so none
    /// is printed for a client that does not exist, and none of those that do is lost when
    /// a later batch fails: the error then says how many were created.
    async fn create_clients(
        &self,
        new: &ClientInput,
        count: u32,
        progress: &Progress,
        on_created: &mut OnCreated<'_>,
    ) -> Result<()> {
        let secrets = self.secrets().await?;
        let method = new
            .token_endpoint_auth_method
            .as_deref()
            .map_or(Some(AuthMethod::ClientSecretBasic), AuthMethod::parse)
            .expect("the command line parsed the method");
        let placement = self
            .registrar()
            .placement(&new.plan, new.org.as_deref())
            .await?;
        let created = match &placement.org {
            Some(org) => format!("created in organization {org} on plan {}", placement.plan),
            None => format!("created on plan {}", placement.plan),
        };
        if let Some(credential) = views::credential(new, method)? {
            for made in 0..count {
                let mut c = self.registrar().new_keyed_client(
                    &placement.plan,
                    &new.name,
                    method,
                    credential.clone(),
                )?;
                placement.apply(&mut c);
                let change = self.change(&format!("client:{}", c.id), &created);
                change
                    .store()
                    .insert_client(&c)
                    .await
                    .with_context(|| created_before(made, count))?;
                change.made().await;
                progress.advance(1);
                on_created(&mut std::iter::once(views::with_secret(&c, None)))?;
            }
            return Ok(());
        }
        let mut made = 0;
        let mut unprinted = None;
        // One event for the whole command, kept with its first batch (the store names the
        // batch's clients).
        let action = if count == 1 {
            created
        } else {
            format!("{count} clients {created}")
        };
        let change = self.change("", &action);
        let outcome = change
            .registrar(&self.clock)
            .create_clients_at(
                &secrets,
                &placement,
                &new.name,
                method,
                count as usize,
                &mut |batch| {
                    let n = batch.credentials.len() as u32;
                    progress.advance(n as usize);
                    made += n;
                    match on_created(&mut with_secrets(batch)) {
                        Ok(()) => ControlFlow::Continue(()),
                        Err(e) => {
                            unprinted = Some((e, n));
                            ControlFlow::Break(())
                        }
                    }
                },
            )
            .await;
        progress.finish();
        if made > 0 {
            change.made().await;
        }
        if let Some((error, n)) = unprinted {
            return Err(error.context(format!(
                "{made} of {count} clients created, the last {n} of them without their \
                 secrets printed (delete them: `client list` shows them), then"
            )));
        }
        outcome.with_context(|| created_before(made, count))
    }

    /// By client id, as the admin API lists them.
    async fn list_clients(&self) -> Result<Vec<Client>> {
        let mut clients = self.store.clients().await?;
        clients.sort_unstable_by(|a, b| a.id.as_str().cmp(b.id.as_str()));
        Ok(clients.iter().map(views::client).collect())
    }

    async fn show_client(&self, id: &str) -> Result<Client> {
        Ok(views::client(&self.registrar().client(id).await?))
    }

    async fn update_client(&self, id: &str, patch: &ClientPatch) -> Result<Client> {
        let before = self.registrar().client(id).await?;
        let change = self.change(
            &format!("client:{}", before.id),
            &tessera_server::registrar::patch_changes(
                patch.name.as_ref().is_some_and(|n| *n != before.label),
                (&before.plan, patch.plan.as_deref().unwrap_or(&before.plan)),
                (before.enabled, patch.enabled.unwrap_or(before.enabled)),
            ),
        );
        let updated = change
            .registrar(&self.clock)
            .patch_client(
                id,
                patch.name.as_deref(),
                patch.plan.as_deref(),
                patch.enabled,
            )
            .await?;
        change.made().await;
        Ok(views::client(&updated))
    }

    async fn rotate_secret(&self, id: &str, grace_secs: i64) -> Result<ClientWithSecret> {
        let secrets = self.secrets().await?;
        let change = self.change(
            &format!("client:{id}"),
            &format!("secret rotated, previous valid for {grace_secs} s"),
        );
        let (c, secret) = change
            .registrar(&self.clock)
            .rotate_secret(&secrets, id, grace_secs)
            .await?;
        change.made().await;
        Ok(views::with_secret(&c, Some(secret)))
    }

    async fn delete_client(&self, id: &str) -> Result<Client> {
        let deleted = self.registrar().client(id).await?;
        let change = self.change(&format!("client:{}", deleted.id), "deleted");
        change.registrar(&self.clock).delete_client(id).await?;
        change.made().await;
        Ok(views::client(&deleted))
    }

    async fn usage(&self, id: &str) -> Result<Vec<UsageDay>> {
        let c = self.registrar().client(id).await?;
        let usage = self.store.usage(&c.id).await?;
        Ok(views::usage_days(usage, self.store.api_usage(&c.id).await?))
    }

    async fn put_trust_policy(
        &self,
        name: &str,
        input: &api::TrustPolicyInput,
    ) -> Result<TrustPolicy> {
        let input = views::trust_policy_input(name, input.clone());
        let existed = self
            .registrar()
            .trust_policies()
            .await?
            .iter()
            .any(|p| p.name == name);
        let change = self.change(
            &format!("trust-policy:{name}"),
            if existed { "replaced" } else { "created" },
        );
        let policy = change
            .registrar(&self.clock)
            .put_trust_policy(input)
            .await?;
        change.made().await;
        Ok(views::trust_policy(&policy))
    }

    async fn list_trust_policies(&self) -> Result<Vec<TrustPolicy>> {
        Ok(self
            .registrar()
            .trust_policies()
            .await?
            .iter()
            .map(views::trust_policy)
            .collect())
    }

    async fn remove_trust_policy(&self, name: &str) -> Result<()> {
        let change = self.change(&format!("trust-policy:{name}"), "deleted");
        if !change
            .registrar(&self.clock)
            .remove_trust_policy(name)
            .await?
        {
            anyhow::bail!("no trust policy named {name:?}");
        }
        change.made().await;
        Ok(())
    }

    async fn create_org(&self, new: &api::OrgInput) -> Result<api::Org> {
        let change = self.change(
            &format!("org:{}", new.id),
            &format!("created on plan {}", new.plan),
        );
        let org = change
            .registrar(&self.clock)
            .create_org(&new.id, &new.name, &new.plan)
            .await?;
        change.made().await;
        Ok(views::org(&org, 0, &self.store.plans().await?))
    }

    async fn list_orgs(&self) -> Result<Vec<api::Org>> {
        let counts: HashMap<String, u64> =
            self.store.clients_per_org().await?.into_iter().collect();
        let plans = self.store.plans().await?;
        Ok(self
            .store
            .orgs()
            .await?
            .iter()
            .map(|o| views::org(o, counts.get(&o.id).copied().unwrap_or(0), &plans))
            .collect())
    }

    async fn show_org(&self, id: &str) -> Result<api::Org> {
        let admin = self.registrar();
        let org = admin.org(id).await?;
        let plans = self.store.plans().await?;
        Ok(views::org(&org, admin.org_client_count(id).await?, &plans))
    }

    async fn update_org(&self, id: &str, patch: &api::OrgPatch) -> Result<api::Org> {
        let admin = self.registrar();
        let before = admin.org(id).await?;
        let change = self.change(
            &format!("org:{id}"),
            &tessera_server::registrar::patch_changes(
                patch.name.as_ref().is_some_and(|n| *n != before.name),
                (&before.plan, patch.plan.as_deref().unwrap_or(&before.plan)),
                (before.enabled, patch.enabled.unwrap_or(before.enabled)),
            ),
        );
        let org = change
            .registrar(&self.clock)
            .patch_org(
                id,
                patch.name.as_deref(),
                patch.plan.as_deref(),
                patch.enabled,
            )
            .await?;
        change.made().await;
        let plans = self.store.plans().await?;
        Ok(views::org(&org, admin.org_client_count(id).await?, &plans))
    }

    async fn org_usage(
        &self,
        id: &str,
        from: Option<&str>,
        to: Option<&str>,
    ) -> Result<api::OrgUsage> {
        let org = self.registrar().org(id).await?;
        let clients = self.store.org_clients(&org.id).await?;
        let usage = self.store.org_usage(&org.id).await?;
        let api_usage = self.store.org_api_usage(&org.id).await?;
        let range = (from.map(str::to_owned), to.map(str::to_owned));
        Ok(views::org_usage(&org.id, range, &clients, usage, api_usage))
    }

    async fn delete_org(&self, id: &str, with_clients: bool) -> Result<api::Org> {
        let clients = if with_clients {
            self.registrar().org_client_count(id).await?
        } else {
            0
        };
        let change = self.change(
            &format!("org:{id}"),
            &format!("deleted with {clients} client(s)"),
        );
        let (org, clients) = change
            .registrar(&self.clock)
            .delete_org(id, with_clients)
            .await?;
        change.made().await;
        Ok(views::org(&org, clients, &self.store.plans().await?))
    }

    async fn list_keys(&self) -> Result<Vec<Key>> {
        Ok(views::keys(&self.store.keys().await?, self.clock.now()))
    }

    async fn rotate_keys(&self, alg: Algorithm, activate_in_secs: i64) -> Result<Key> {
        let secrets = self.secrets().await?;
        let change = self.change(
            "",
            &format!(
                "created, signs from {}",
                tessera_proto::clock::rfc3339(self.clock.now() + activate_in_secs.max(0))
            ),
        );
        let added = change
            .registrar(&self.clock)
            .rotate_keys(&secrets, alg, activate_in_secs)
            .await?;
        change.made_as(&format!("key:{}", added.kid)).await;
        let listed = self.list_keys().await?;
        Ok(listed
            .into_iter()
            .find(|k| k.kid == added.kid)
            .expect("a key just added is published"))
    }
}
