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
use tessera_server::clock::Clock;
use tessera_server::registrar::{views, CreatedClients, PlanSettings, Registrar};
use tessera_server::secrets::Secrets;
use tessera_store::{AuthMethod, Store};

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
        let written = self
            .registrar()
            .set_plan_with(name, scopes, settings)
            .await?;
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
        if let Some(credential) = views::credential(new, method)? {
            for made in 0..count {
                let mut c = self.registrar().new_keyed_client(
                    &placement.plan,
                    &new.name,
                    method,
                    credential.clone(),
                )?;
                placement.apply(&mut c);
                self.store
                    .insert_client(&c)
                    .await
                    .with_context(|| created_before(made, count))?;
                progress.advance(1);
                on_created(&mut std::iter::once(views::with_secret(&c, None)))?;
            }
            return Ok(());
        }
        let mut made = 0;
        let mut unprinted = None;
        let outcome = self
            .registrar()
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
        let updated = self
            .registrar()
            .patch_client(
                id,
                patch.name.as_deref(),
                patch.plan.as_deref(),
                patch.enabled,
            )
            .await?;
        Ok(views::client(&updated))
    }

    async fn rotate_secret(&self, id: &str, grace_secs: i64) -> Result<ClientWithSecret> {
        let secrets = self.secrets().await?;
        let (c, secret) = self
            .registrar()
            .rotate_secret(&secrets, id, grace_secs)
            .await?;
        Ok(views::with_secret(&c, Some(secret)))
    }

    async fn delete_client(&self, id: &str) -> Result<Client> {
        let admin = self.registrar();
        let deleted = admin.client(id).await?;
        admin.delete_client(id).await?;
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
        Ok(views::trust_policy(
            &self.registrar().put_trust_policy(input).await?,
        ))
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
        if !self.registrar().remove_trust_policy(name).await? {
            anyhow::bail!("no trust policy named {name:?}");
        }
        Ok(())
    }

    async fn create_org(&self, new: &api::OrgInput) -> Result<api::Org> {
        let org = self
            .registrar()
            .create_org(&new.id, &new.name, &new.plan)
            .await?;
        Ok(views::org(&org, 0))
    }

    async fn list_orgs(&self) -> Result<Vec<api::Org>> {
        let counts: HashMap<String, u64> =
            self.store.clients_per_org().await?.into_iter().collect();
        Ok(self
            .store
            .orgs()
            .await?
            .iter()
            .map(|o| views::org(o, counts.get(&o.id).copied().unwrap_or(0)))
            .collect())
    }

    async fn show_org(&self, id: &str) -> Result<api::Org> {
        let admin = self.registrar();
        let org = admin.org(id).await?;
        Ok(views::org(&org, admin.org_client_count(id).await?))
    }

    async fn update_org(&self, id: &str, patch: &api::OrgPatch) -> Result<api::Org> {
        let admin = self.registrar();
        let org = admin
            .patch_org(
                id,
                patch.name.as_deref(),
                patch.plan.as_deref(),
                patch.enabled,
            )
            .await?;
        Ok(views::org(&org, admin.org_client_count(id).await?))
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
        let (org, clients) = self.registrar().delete_org(id, with_clients).await?;
        Ok(views::org(&org, clients))
    }

    async fn list_keys(&self) -> Result<Vec<Key>> {
        Ok(views::keys(&self.store.keys().await?, self.clock.now()))
    }

    async fn rotate_keys(&self, alg: Algorithm, activate_in_secs: i64) -> Result<Key> {
        let secrets = self.secrets().await?;
        let added = self
            .registrar()
            .rotate_keys(&secrets, alg, activate_in_secs)
            .await?;
        let listed = self.list_keys().await?;
        Ok(listed
            .into_iter()
            .find(|k| k.kid == added.kid)
            .expect("a key just added is published"))
    }
}
