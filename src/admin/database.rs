//! The database backend: the operations run in this process on the store, through
//! [`tessera_server::registrar::Registrar`], the same code the server's admin API calls.

use std::collections::HashMap;
use std::sync::Arc;

use anyhow::Result;
use tessera_proto::clock::Timestamp;
use tessera_proto::Algorithm;
use tessera_server::clock::Clock;
use tessera_server::registrar::{CreatedClients, PlanSettings, Registrar, TrustPolicyInput};
use tessera_server::secrets::Secrets;
use tessera_store::{AuthMethod, Store};

use super::model::{
    Client, ClientPatch, ClientWithSecret, Key, KeyStatus, NewClient, Plan, TrustPolicy, UsageDay,
};
use super::progress::Progress;
use super::{OnCreated, Operations};
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

fn plan(p: tessera_store::Plan, clients: u64) -> Plan {
    Plan {
        scopes: p.scopes.iter().map(|s| s.as_str().to_owned()).collect(),
        name: p.name,
        token_ttl: p.token_ttl,
        token_rate: p.token_rate.map(Into::into),
        reuse_percent: p.reuse_percent,
        introspect_any: p.introspect_any,
        dpop: p.dpop.as_str().to_owned(),
        clients,
        created_at: p.created_at,
        updated_at: p.updated_at,
    }
}

fn client(c: tessera_store::Client) -> Client {
    Client {
        client_id: c.id,
        plan: c.plan,
        name: c.label,
        enabled: c.enabled,
        token_endpoint_auth_method: c.auth_method.as_str().to_owned(),
        previous_secret_valid_until: c.previous_secret.map(|(_, until)| until),
        created_at: c.created_at,
        updated_at: c.updated_at,
    }
}

/// The keys with what each does at `now`: the last one active signs, those not yet active
/// are next, the rest retired. `keys` are in order of activation, as the store lists them.
fn keys(keys: Vec<tessera_store::SigningKey>, now: Timestamp) -> Vec<Key> {
    let signing = keys.iter().rposition(|k| k.activates_at <= now);
    keys.into_iter()
        .enumerate()
        .map(|(i, k)| Key {
            status: if Some(i) == signing {
                KeyStatus::Signing
            } else if k.activates_at > now {
                KeyStatus::Next
            } else {
                KeyStatus::Retired
            },
            alg: k.alg,
            created_at: k.created_at,
            activates_at: k.activates_at,
            kid: k.kid,
        })
        .collect()
}

impl Operations for Database<'_> {
    async fn set_plan(&self, name: &str, scopes: &str, settings: &PlanSettings) -> Result<Plan> {
        let written = self
            .registrar()
            .set_plan_with(name, scopes, settings)
            .await?;
        let clients = self.clients_per_plan().await?;
        Ok(plan(written, clients.get(name).copied().unwrap_or(0)))
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
                plan(p, count)
            })
            .collect())
    }

    /// All or none, in one transaction; the secrets are handed to `on_created` only once it
    /// is committed, so none is printed for a client that does not exist.
    async fn create_clients(
        &self,
        new: &NewClient,
        count: u32,
        progress: &Progress,
        on_created: &mut OnCreated<'_>,
    ) -> Result<()> {
        let secrets = self.secrets().await?;
        let method = AuthMethod::parse(new.token_endpoint_auth_method)
            .expect("the command line parsed the method");
        if let Some(certificate) = new.certificate() {
            for _ in 0..count {
                let c = self
                    .registrar()
                    .create_certificate_client(
                        &secrets,
                        &new.plan,
                        &new.name,
                        method,
                        certificate.clone(),
                    )
                    .await?;
                progress.advance(1);
                on_created(&mut std::iter::once(ClientWithSecret {
                    client: client(c),
                    client_secret: None,
                }))?;
            }
            return Ok(());
        }
        let created = self
            .registrar()
            .create_clients(
                &secrets,
                &new.plan,
                &new.name,
                method,
                count as usize,
                &|n| progress.advance(n),
            )
            .await;
        progress.finish();
        let created = created?;
        let CreatedClients {
            plan,
            label,
            auth_method,
            created_at,
            credentials,
        } = created;
        on_created(
            &mut credentials
                .into_iter()
                .map(|(client_id, secret)| ClientWithSecret {
                    client: Client {
                        client_id,
                        plan: plan.clone(),
                        name: label.clone(),
                        enabled: true,
                        token_endpoint_auth_method: auth_method.as_str().to_owned(),
                        previous_secret_valid_until: None,
                        created_at,
                        updated_at: created_at,
                    },
                    client_secret: Some(secret),
                }),
        )
    }

    /// By client id, as the admin API lists them.
    async fn list_clients(&self) -> Result<Vec<Client>> {
        let mut clients = self.store.clients().await?;
        clients.sort_unstable_by(|a, b| a.id.as_str().cmp(b.id.as_str()));
        Ok(clients.into_iter().map(client).collect())
    }

    async fn show_client(&self, id: &str) -> Result<Client> {
        Ok(client(self.registrar().client(id).await?))
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
        Ok(client(updated))
    }

    async fn rotate_secret(&self, id: &str, grace_secs: i64) -> Result<ClientWithSecret> {
        let secrets = self.secrets().await?;
        let (c, secret) = self
            .registrar()
            .rotate_secret(&secrets, id, grace_secs)
            .await?;
        Ok(ClientWithSecret {
            client: client(c),
            client_secret: Some(secret),
        })
    }

    async fn delete_client(&self, id: &str) -> Result<Client> {
        let admin = self.registrar();
        let deleted = admin.client(id).await?;
        admin.delete_client(id).await?;
        Ok(client(deleted))
    }

    async fn usage(&self, id: &str) -> Result<Vec<UsageDay>> {
        let c = self.registrar().client(id).await?;
        Ok(self
            .store
            .usage(&c.id)
            .await?
            .into_iter()
            .map(|u| UsageDay {
                day: u.day,
                issued: u.issued,
                refused: u.refused,
            })
            .collect())
    }

    async fn put_trust_policy(&self, input: &TrustPolicyInput) -> Result<TrustPolicy> {
        Ok(self
            .registrar()
            .put_trust_policy(input.clone())
            .await?
            .into())
    }

    async fn list_trust_policies(&self) -> Result<Vec<TrustPolicy>> {
        Ok(self
            .registrar()
            .trust_policies()
            .await?
            .into_iter()
            .map(Into::into)
            .collect())
    }

    async fn remove_trust_policy(&self, name: &str) -> Result<()> {
        if !self.registrar().remove_trust_policy(name).await? {
            anyhow::bail!("no trust policy named {name:?}");
        }
        Ok(())
    }

    async fn list_keys(&self) -> Result<Vec<Key>> {
        Ok(keys(self.store.keys().await?, self.clock.now()))
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
