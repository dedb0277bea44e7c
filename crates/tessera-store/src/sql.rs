//! The one implementation of [`Store`], [`SqlStore`], generic over the sqlx database: the
//! SQL, the binding, the transactions and (with `rows.rs`) the row mapping are written once.
//!
//! The statements are portable. Both schemas have the same tables, columns and 64-bit
//! integer types, so a `u32` is bound as an `i64` everywhere. Both databases know
//! `ON CONFLICT`, `excluded` and `RETURNING`; the last tells whether a statement changed a
//! row, since sqlx reports the count only on each backend's own result type. Such a write is
//! always read to its end (`fetch_all`, never `fetch_optional`): SQLite commits a statement
//! outside a transaction when it runs to completion, and a statement reset after its first
//! row commits there instead, where a failure (a full disk) is lost: the row would report a
//! change that was rolled back. And SQLite reads `$N` as PostgreSQL does (sqlx binds it by
//! number, as it binds `?N`).
//!
//! What truly differs stays with each backend: how it opens (connect options, pool size,
//! migrations) and its [`Dialect`], the statements it words its own way.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use sqlx::migrate::{Migrate, Migrator};
use sqlx::pool::PoolOptions;
use sqlx::{
    ColumnIndex, Connection, Database, Decode, Encode, Executor, IntoArguments, Pool, Type,
};
use tessera_proto::ClientId;

use crate::{
    rows, ApiUsage, AuditEvent, AuditQuery, Changes, Client, IdempotentAnswer, Org, OrgRemoval,
    Plan, PlanRemoval, Result, Revoked, SigningKey, Store, StoreError, Timestamp, Usage,
    WRITE_LOCK_TIMEOUT, WRITE_STATEMENT_TIMEOUT,
};

/// The statements one database needs in its own words.
pub(crate) trait Dialect: Database {
    /// [`Store::revoked_since`]: columns `seq, jti, client_id, exp` of the revocations with
    /// a sequence number above `$1` and `exp` above `$2`, in sequence order.
    const REVOKED_SINCE: &'static str;
    /// A statement that serializes revocations within their transaction, where sequence
    /// numbers could otherwise commit out of order; `None` where writes are serialized
    /// anyway.
    const REVOKE_LOCK: Option<&'static str>;
    /// [`Store::checkpoint`], if the database keeps a log of its own to move into its
    /// file: one row whose column `busy` is 0 when the whole log was moved.
    const CHECKPOINT: Option<&'static str>;
    /// [`Store::clients_page`] as one row, where fetching rows one at a time is slow (sqlx's
    /// SQLite driver hands each row from its worker thread to the caller): a statement
    /// around the page's own (`{page}`) whose one column is a JSON array of the page's
    /// clients, each in the column order `rows::packed_clients` reads.
    const PACKED_CLIENTS: Option<&'static str>;
    /// Parameter `n` (from 1) of a statement with thousands of them, bound in order.
    fn bulk_param(n: usize) -> String;
    /// [`Store::explain`] for a store on `pool`: a database reached over a network names
    /// what failed; by default the error is returned as it is.
    fn explain(
        pool: &Pool<Self>,
        error: StoreError,
    ) -> impl std::future::Future<Output = StoreError> + Send {
        let _ = pool;
        std::future::ready(error)
    }
    /// A statement that bounds the rest of its transaction: how long it waits for a lock
    /// another session holds (`$1`, [`WRITE_LOCK_TIMEOUT`]) and how long one statement runs
    /// (`$2`, [`WRITE_STATEMENT_TIMEOUT`]), both as text such as `3000ms`; `None` where the
    /// database bounds the wait itself (SQLite's busy timeout).
    const WRITE_BOUNDS: Option<&'static str>;
}

/// Begins the transaction of a write to the registry or of a revocation, bounded by
/// [`Dialect::WRITE_BOUNDS`]: such a write takes a lock every other one takes too (the
/// registry's, so that changes commit in number order), and one held by a stuck session
/// (idle in transaction, its client gone) must fail the writes behind it
/// ([`StoreError::LockTimeout`]), not hold them for as long as that session lives.
async fn begin_write<DB>(pool: &Pool<DB>) -> Result<sqlx::Transaction<'static, DB>>
where
    DB: Dialect,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> String: Encode<'q, DB> + Type<DB>,
{
    let mut tx = pool.begin().await?;
    if let Some(bounds) = DB::WRITE_BOUNDS {
        let millis = |d: std::time::Duration| format!("{}ms", d.as_millis());
        sqlx::query(bounds)
            .bind(millis(WRITE_LOCK_TIMEOUT))
            .bind(millis(WRITE_STATEMENT_TIMEOUT))
            .execute(&mut *tx)
            .await?;
    }
    Ok(tx)
}

/// Commits the transaction of a write to the registry, keeping in it, when the write
/// `changed` something, the audit event `pending` holds ([`Store::audited`]): the change and
/// its record commit together or not at all. An event without an object is given
/// `object`, what the write made (a new key's `key:KID`).
async fn commit<DB>(
    mut tx: sqlx::Transaction<'static, DB>,
    pending: &Mutex<Option<AuditEvent>>,
    changed: bool,
    object: impl FnOnce() -> String,
) -> Result<()>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
{
    let event = if changed {
        pending.lock().unwrap_or_else(|p| p.into_inner()).take()
    } else {
        None
    };
    if let Some(mut event) = event {
        if event.object.is_empty() {
            event.object = object();
        }
        sqlx::query(INSERT_AUDIT_EVENT)
            .bind(event.at)
            .bind(event.actor.as_str())
            .bind(event.action.as_str())
            .bind(event.object.as_str())
            .bind(event.source.as_str())
            .bind(event.channel.as_str())
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    Ok(())
}

/// Keeps one audit event.
const INSERT_AUDIT_EVENT: &str =
    "INSERT INTO audit_events (at, actor, action, object, source, channel) \
     VALUES ($1, $2, $3, $4, $5, $6)";

/// A store on a pool of one database; [`SqliteStore`](crate::sqlite::SqliteStore) and
/// [`PostgresStore`](crate::postgres::PostgresStore) are its two kinds.
pub struct SqlStore<DB: Database> {
    pub(crate) pool: Pool<DB>,
    /// The audit event this handle's next write to the registry keeps in its transaction
    /// ([`Store::audited`]); shared by the clones of one handle.
    audit: Arc<Mutex<Option<AuditEvent>>>,
}

impl<DB: Database> std::fmt::Debug for SqlStore<DB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlStore")
            .field("database", &DB::NAME)
            .field("pool", &self.pool)
            .finish()
    }
}

impl<DB: Database> Clone for SqlStore<DB> {
    fn clone(&self) -> Self {
        Self {
            pool: self.pool.clone(),
            audit: self.audit.clone(),
        }
    }
}

impl<DB: Database> SqlStore<DB>
where
    DB::Connection: Migrate,
{
    /// Connects with `options` and brings the schema up to date with `migrator`.
    pub(crate) async fn connect(
        pool: PoolOptions<DB>,
        options: <DB::Connection as Connection>::Options,
        migrator: Migrator,
    ) -> Result<Self> {
        let pool = pool.connect_with(options).await?;
        migrator.run(&pool).await?;
        Ok(Self {
            pool,
            audit: Arc::default(),
        })
    }
}

/// The most rows one `INSERT` of usage carries, well below every backend's bind limit.
const USAGE_CHUNK: usize = 1000;

/// `rows` rows of `width` parameters for a multi-row `VALUES`, numbered through
/// [`Dialect::bulk_param`] in the order they are bound: `(p1, p2), (p3, p4)`.
fn bulk_values<DB: Dialect>(rows: usize, width: usize) -> String {
    let values: Vec<String> = (0..rows)
        .map(|row| {
            let params: Vec<String> = (1..=width)
                .map(|column| DB::bulk_param(row * width + column))
                .collect();
            format!("({})", params.join(", "))
        })
        .collect();
    values.join(", ")
}

/// Inserts `rows` rows of usage, four parameters to a row, adding to the counts already
/// there.
fn usage_insert<DB: Dialect>(rows: usize) -> String {
    format!(
        "INSERT INTO usage (client_id, day, issued, refused) VALUES {} \
         ON CONFLICT (client_id, day) DO UPDATE \
         SET issued = usage.issued + excluded.issued, refused = usage.refused + excluded.refused",
        bulk_values::<DB>(rows, 4)
    )
}

/// Inserts `rows` rows of API usage, five parameters to a row, adding to the counts already
/// there.
fn api_usage_insert<DB: Dialect>(rows: usize) -> String {
    format!(
        "INSERT INTO api_usage (client_id, day, api, requests, refused) VALUES {} \
         ON CONFLICT (client_id, day, api) DO UPDATE \
         SET requests = api_usage.requests + excluded.requests, \
         refused = api_usage.refused + excluded.refused",
        bulk_values::<DB>(rows, 5)
    )
}

/// One row of API usage as [`api_usage_insert`] binds it.
struct ApiUsageRow<'a> {
    client_id: &'a str,
    day: &'a str,
    api: &'a str,
    requests: u64,
    refused: u64,
}

/// `usage` with the rows of one (client, day, API) added into one, in their first order:
/// PostgreSQL refuses an `INSERT … ON CONFLICT DO UPDATE` that meets the same key twice.
fn merged_api_usage(usage: &[ApiUsage]) -> Vec<ApiUsageRow<'_>> {
    let mut rows: Vec<ApiUsageRow<'_>> = Vec::with_capacity(usage.len());
    let mut seen = std::collections::HashMap::with_capacity(usage.len());
    for u in usage {
        let key = (u.client_id.as_str(), u.day.as_str(), u.api.as_str());
        match seen.get(&key) {
            Some(&i) => {
                let row: &mut ApiUsageRow<'_> = &mut rows[i];
                row.requests = row.requests.saturating_add(u.requests);
                row.refused = row.refused.saturating_add(u.refused);
            }
            None => {
                seen.insert(key, rows.len());
                rows.push(ApiUsageRow {
                    client_id: key.0,
                    day: key.1,
                    api: key.2,
                    requests: u.requests,
                    refused: u.refused,
                });
            }
        }
    }
    rows
}

/// The columns of `clients` one client fills, in the order [`insert_client_rows`] binds them.
const CLIENT_COLUMNS: [&str; 17] = [
    "id",
    "plan",
    "label",
    "secret_hash",
    "previous_secret_hash",
    "previous_secret_expires_at",
    "auth_method",
    "enabled",
    "created_at",
    "updated_at",
    "tls_subject_dn",
    "tls_san_dns",
    "tls_san_uri",
    "jwks",
    "jwks_uri",
    "org_id",
    "org_enabled",
];

/// The most clients one `INSERT` carries: 17,000 parameters, under SQLite's limit of 32,766
/// bound parameters and PostgreSQL's 65,535. One statement for many rows spares a round trip
/// to the database (and, in SQLite, to its worker thread) per client.
const CLIENT_CHUNK: usize = 1000;

/// Inserts `rows` clients, seventeen parameters to a row.
fn client_insert<DB: Dialect>(rows: usize) -> String {
    format!(
        "INSERT INTO clients ({}) VALUES {}",
        CLIENT_COLUMNS.join(", "),
        bulk_values::<DB>(rows, CLIENT_COLUMNS.len())
    )
}

/// Writes `clients` in `tx`, [`CLIENT_CHUNK`] to a statement. A unique or foreign key
/// violation names the client and plan when the statement had one client, and the batch
/// otherwise (the database does not say which row failed).
async fn insert_client_rows<DB>(
    tx: &mut sqlx::Transaction<'_, DB>,
    clients: &[Client],
) -> Result<()>
where
    DB: Dialect,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> &'q [u8]: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'q> Option<i64>: Encode<'q, DB> + Type<DB>,
    for<'q> bool: Encode<'q, DB> + Type<DB>,
    for<'q> Option<&'q [u8]>: Encode<'q, DB> + Type<DB>,
    for<'q> Option<&'q str>: Encode<'q, DB> + Type<DB>,
{
    for chunk in clients.chunks(CLIENT_CHUNK) {
        let sql = client_insert::<DB>(chunk.len());
        let mut query = sqlx::query(&sql);
        for client in chunk {
            let columns = rows::credential_columns(client);
            let [dn, dns, uri, jwks, jwks_uri] = columns.keys;
            let previous = columns.previous;
            query = query
                .bind(client.id.as_str())
                .bind(client.plan.as_str())
                .bind(client.label.as_str())
                .bind(columns.secret_hash)
                .bind(previous.map(|(hash, _)| hash))
                .bind(previous.map(|(_, until)| until))
                .bind(client.auth_method.as_str())
                .bind(client.enabled)
                .bind(client.created_at)
                .bind(client.updated_at)
                .bind(dn)
                .bind(dns)
                .bind(uri)
                .bind(jwks)
                .bind(jwks_uri)
                .bind(client.org.as_deref())
                .bind(client.org_enabled);
        }
        query.execute(&mut **tx).await.map_err(|e| match chunk {
            [client] => rows::constraint(e, &format!("client {}", client.id), &client.plan),
            _ => {
                let mut plans: Vec<&str> = chunk.iter().map(|c| c.plan.as_str()).collect();
                plans.sort_unstable();
                plans.dedup();
                let what = format!("the id of one of {} clients", chunk.len());
                rows::constraint(e, &what, &plans.join(" or "))
            }
        })?;
    }
    Ok(())
}

#[async_trait]
impl<DB> Store for SqlStore<DB>
where
    DB: Dialect,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'n> &'n str: ColumnIndex<DB::Row>,
    // The SQL types of the schemas, bound and read.
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> &'q [u8]: Encode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> Option<String>: Decode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> Option<i64>: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> bool: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> Vec<u8>: Decode<'q, DB> + Type<DB>,
    for<'q> Option<Vec<u8>>: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> Option<&'q str>: Encode<'q, DB> + Type<DB>,
    for<'q> Option<&'q [u8]>: Encode<'q, DB> + Type<DB>,
    for<'q> Option<String>: Decode<'q, DB> + Type<DB>,
{
    async fn explain(&self, error: StoreError) -> StoreError {
        DB::explain(&self.pool, error).await
    }

    async fn revision(&self) -> Result<i64> {
        let row = sqlx::query("SELECT value FROM revision WHERE id = 1")
            .fetch_one(&self.pool)
            .await?;
        rows::get(&row, "value")
    }

    async fn insert_org(&self, org: &Org) -> Result<()> {
        let mut tx = begin_write(&self.pool).await?;
        sqlx::query(
            "INSERT INTO orgs (id, name, plan, enabled, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(org.id.as_str())
        .bind(org.name.as_str())
        .bind(org.plan.as_str())
        .bind(org.enabled)
        .bind(org.created_at)
        .bind(org.updated_at)
        .execute(&mut *tx)
        .await
        .map_err(|e| rows::constraint(e, &format!("organization {}", org.id), &org.plan))?;
        commit(tx, &self.audit, true, String::new).await?;
        Ok(())
    }

    async fn orgs(&self) -> Result<Vec<Org>> {
        sqlx::query("SELECT * FROM orgs ORDER BY id")
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(rows::org)
            .collect()
    }

    async fn org(&self, id: &str) -> Result<Option<Org>> {
        sqlx::query("SELECT * FROM orgs WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?
            .as_ref()
            .map(rows::org)
            .transpose()
    }

    async fn update_org(&self, org: &Org) -> Result<bool> {
        let mut tx = begin_write(&self.pool).await?;
        let changed = sqlx::query(
            "UPDATE orgs SET name = $2, plan = $3, enabled = $4, updated_at = $5 \
             WHERE id = $1 RETURNING id",
        )
        .bind(org.id.as_str())
        .bind(org.name.as_str())
        .bind(org.plan.as_str())
        .bind(org.enabled)
        .bind(org.updated_at)
        .fetch_all(&mut *tx)
        .await
        .map_err(|e| rows::constraint(e, &format!("organization {}", org.id), &org.plan))?;
        if changed.is_empty() {
            return Ok(false);
        }
        // Each client row that changes is logged (the clients' triggers): every instance
        // applies the new plan or flag at its next poll, as for any client change.
        sqlx::query(
            "UPDATE clients SET plan = $2, org_enabled = $3 \
             WHERE org_id = $1 AND (plan <> $2 OR org_enabled <> $3)",
        )
        .bind(org.id.as_str())
        .bind(org.plan.as_str())
        .bind(org.enabled)
        .execute(&mut *tx)
        .await?;
        commit(tx, &self.audit, true, String::new).await?;
        Ok(true)
    }

    async fn delete_org(&self, id: &str, with_clients: bool) -> Result<OrgRemoval> {
        let mut tx = begin_write(&self.pool).await?;
        if with_clients {
            sqlx::query("DELETE FROM clients WHERE org_id = $1")
                .bind(id)
                .execute(&mut *tx)
                .await?;
        }
        let gone = sqlx::query(
            "DELETE FROM orgs WHERE id = $1 \
             AND NOT EXISTS (SELECT 1 FROM clients WHERE org_id = $1) RETURNING id",
        )
        .bind(id)
        .fetch_all(&mut *tx)
        .await
        // A client added to it meanwhile (PostgreSQL checks the reference).
        .map_err(|e| rows::constraint(e, &format!("a client of organization {id}"), ""))?;
        if gone.is_empty() {
            let exists = sqlx::query("SELECT 1 FROM orgs WHERE id = $1")
                .bind(id)
                .fetch_optional(&mut *tx)
                .await?;
            // Nothing of this transaction is kept: the clients stay with their organization.
            tx.rollback().await?;
            return Ok(if exists.is_some() {
                OrgRemoval::HasClients
            } else {
                OrgRemoval::Unknown
            });
        }
        commit(tx, &self.audit, true, String::new).await?;
        Ok(OrgRemoval::Removed)
    }

    async fn clients_per_org(&self) -> Result<Vec<(String, u64)>> {
        sqlx::query(
            "SELECT org_id, COUNT(*) AS n FROM clients WHERE org_id IS NOT NULL \
             GROUP BY org_id ORDER BY org_id",
        )
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(|row| {
            Ok((
                rows::get(row, "org_id")?,
                rows::get::<_, i64>(row, "n")? as u64,
            ))
        })
        .collect()
    }

    async fn org_clients(&self, id: &str) -> Result<Vec<Client>> {
        sqlx::query("SELECT * FROM clients WHERE org_id = $1 ORDER BY id")
            .bind(id)
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(rows::client)
            .collect()
    }

    async fn put_trust_policy(&self, policy: &crate::TrustPolicy) -> Result<()> {
        let mut tx = begin_write(&self.pool).await?;
        sqlx::query(
            "INSERT INTO trust_policies (name, client_id, issuer, jwks_uri, audience, subject, \
             claims, max_assertion_ttl, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
             ON CONFLICT (name) DO UPDATE SET client_id = $2, issuer = $3, jwks_uri = $4, \
             audience = $5, subject = $6, claims = $7, max_assertion_ttl = $8",
        )
        .bind(policy.name.as_str())
        .bind(policy.client_id.as_str())
        .bind(policy.issuer.as_str())
        .bind(policy.jwks_uri.as_deref())
        .bind(policy.audience.as_str())
        .bind(policy.subject.as_str())
        .bind(policy.claims.as_str())
        .bind(policy.max_assertion_ttl.map(i64::from))
        .bind(policy.created_at)
        .execute(&mut *tx)
        .await
        .map_err(|e| rows::constraint(e, &format!("trust policy {}", policy.name), ""))?;
        commit(tx, &self.audit, true, String::new).await?;
        Ok(())
    }

    async fn trust_policies(&self) -> Result<Vec<crate::TrustPolicy>> {
        sqlx::query("SELECT * FROM trust_policies ORDER BY name")
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(rows::trust_policy)
            .collect()
    }

    async fn trust_policies_of(&self, client: &ClientId) -> Result<Vec<crate::TrustPolicy>> {
        sqlx::query("SELECT * FROM trust_policies WHERE client_id = $1 ORDER BY name")
            .bind(client.as_str())
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(rows::trust_policy)
            .collect()
    }

    async fn delete_trust_policy(&self, name: &str) -> Result<bool> {
        let mut tx = begin_write(&self.pool).await?;
        let gone = sqlx::query("DELETE FROM trust_policies WHERE name = $1 RETURNING name")
            .bind(name)
            .fetch_all(&mut *tx)
            .await?;
        commit(tx, &self.audit, !gone.is_empty(), String::new).await?;
        Ok(!gone.is_empty())
    }

    async fn put_plan(&self, plan: &Plan) -> Result<()> {
        let mut tx = begin_write(&self.pool).await?;
        sqlx::query(
            "INSERT INTO plans (name, scopes, token_ttl, created_at, updated_at, \
             rate_count, rate_period, rate_burst, reuse_percent, introspect_any, dpop, \
             api_limits, limit_per) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) \
             ON CONFLICT (name) DO UPDATE SET scopes = $2, token_ttl = $3, updated_at = $5, \
             rate_count = $6, rate_period = $7, rate_burst = $8, reuse_percent = $9, \
             introspect_any = $10, dpop = $11, api_limits = $12, limit_per = $13",
        )
        .bind(plan.name.as_str())
        .bind(plan.scopes.to_string())
        .bind(i64::from(plan.token_ttl))
        .bind(plan.created_at)
        .bind(plan.updated_at)
        .bind(plan.token_rate.map(|r| i64::from(r.count)))
        .bind(plan.token_rate.map(|r| i64::from(r.period_secs)))
        .bind(plan.token_rate.map(|r| i64::from(r.burst)))
        .bind(plan.reuse_percent.map(i64::from))
        .bind(plan.introspect_any)
        .bind(plan.dpop.as_str())
        .bind(rows::api_limits_column(&plan.api_limits))
        .bind(plan.limit_per.as_str())
        .execute(&mut *tx)
        .await?;
        commit(tx, &self.audit, true, String::new).await?;
        Ok(())
    }

    async fn plans(&self) -> Result<Vec<Plan>> {
        sqlx::query("SELECT * FROM plans ORDER BY name")
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(rows::plan)
            .collect()
    }

    async fn delete_plan(&self, name: &str) -> Result<PlanRemoval> {
        let mut tx = begin_write(&self.pool).await?;
        let gone = sqlx::query(
            "DELETE FROM plans WHERE name = $1 \
             AND NOT EXISTS (SELECT 1 FROM clients WHERE plan = $1) \
             AND NOT EXISTS (SELECT 1 FROM orgs WHERE plan = $1) RETURNING name",
        )
        .bind(name)
        .fetch_all(&mut *tx)
        .await
        // A client added to the plan meanwhile (PostgreSQL checks the reference).
        .map_err(|e| rows::constraint(e, "", name))?;
        commit(tx, &self.audit, !gone.is_empty(), String::new).await?;
        if !gone.is_empty() {
            return Ok(PlanRemoval::Removed);
        }
        let exists = sqlx::query("SELECT 1 FROM plans WHERE name = $1")
            .bind(name)
            .fetch_optional(&self.pool)
            .await?;
        Ok(if exists.is_some() {
            PlanRemoval::InUse
        } else {
            PlanRemoval::Unknown
        })
    }

    async fn clients_per_plan(&self) -> Result<Vec<(String, u64)>> {
        sqlx::query("SELECT plan, COUNT(*) AS n FROM clients GROUP BY plan ORDER BY plan")
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(|row| {
                Ok((
                    rows::get(row, "plan")?,
                    rows::get::<_, i64>(row, "n")? as u64,
                ))
            })
            .collect()
    }

    async fn clients_page(
        &self,
        plan: Option<&str>,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Client>> {
        // One statement per filter, each a plain range over an index: a reload pages
        // through every client this way, and `$1 IS NULL OR …` would scan them all. The
        // parameters are numbered in the order plan, after, limit.
        let page = match (plan, after) {
            (None, None) => "SELECT * FROM clients ORDER BY id LIMIT $1",
            (None, Some(_)) => "SELECT * FROM clients WHERE id > $1 ORDER BY id LIMIT $2",
            (Some(_), None) => "SELECT * FROM clients WHERE plan = $1 ORDER BY id LIMIT $2",
            (Some(_), Some(_)) => {
                "SELECT * FROM clients WHERE plan = $1 AND id > $2 ORDER BY id LIMIT $3"
            }
        };
        let packed = DB::PACKED_CLIENTS.map(|packed| packed.replace("{page}", page));
        let mut query = sqlx::query(packed.as_deref().unwrap_or(page));
        for value in [plan, after].into_iter().flatten() {
            query = query.bind(value);
        }
        let query = query.bind(i64::from(limit));
        if packed.is_none() {
            return query
                .fetch_all(&self.pool)
                .await?
                .iter()
                .map(rows::client)
                .collect();
        }
        let row = query.fetch_one(&self.pool).await?;
        let json: String = rows::get(&row, "page")?;
        let mut clients = rows::packed_clients(&json)?;
        // An aggregate keeps the order its input had, but nothing promises it.
        clients.sort_unstable_by(|a, b| a.id.as_str().cmp(b.id.as_str()));
        Ok(clients)
    }

    async fn insert_clients_once(
        &self,
        clients: &[Client],
        answer: Option<&IdempotentAnswer>,
    ) -> Result<Option<IdempotentAnswer>> {
        let mut tx = begin_write(&self.pool).await?;
        if let Some(answer) = answer {
            let claimed = sqlx::query(
                "INSERT INTO idempotent_answers (owner, key, fingerprint, answer, created_at) \
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT (owner, key) DO NOTHING RETURNING key",
            )
            .bind(answer.owner.as_str())
            .bind(answer.key.as_str())
            .bind(answer.fingerprint.as_slice())
            .bind(answer.answer.as_slice())
            .bind(answer.created_at)
            .fetch_all(&mut *tx)
            .await?;
            if claimed.is_empty() {
                drop(tx);
                let first = self.idempotent_answer(&answer.owner, &answer.key).await?;
                // Forgotten between the two statements: the key is free again, but a retry
                // now is as good as the first try.
                return first.map(Some).ok_or_else(|| {
                    StoreError::Duplicate(format!("idempotency key {:?}", answer.key))
                });
            }
        }
        insert_client_rows(&mut tx, clients).await?;
        commit(tx, &self.audit, !clients.is_empty(), || match clients {
            [one] => format!("client:{}", one.id),
            [first, ..] => format!("client:{} and {} more", first.id, clients.len() - 1),
            [] => String::new(),
        })
        .await?;
        Ok(None)
    }

    async fn idempotent_answer(&self, owner: &str, key: &str) -> Result<Option<IdempotentAnswer>> {
        sqlx::query("SELECT * FROM idempotent_answers WHERE owner = $1 AND key = $2")
            .bind(owner)
            .bind(key)
            .fetch_optional(&self.pool)
            .await?
            .map(|row| {
                Ok(IdempotentAnswer {
                    owner: rows::get(&row, "owner")?,
                    key: rows::get(&row, "key")?,
                    fingerprint: rows::get(&row, "fingerprint")?,
                    answer: rows::get(&row, "answer")?,
                    created_at: rows::get(&row, "created_at")?,
                })
            })
            .transpose()
    }

    async fn prune_idempotent_answers(&self, before: Timestamp) -> Result<()> {
        sqlx::query("DELETE FROM idempotent_answers WHERE created_at < $1")
            .bind(before)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn plan_usage(&self, plan: &str) -> Result<Vec<Usage>> {
        sqlx::query(
            "SELECT '' AS client_id, u.day AS day, CAST(SUM(u.issued) AS BIGINT) AS issued, \
             CAST(SUM(u.refused) AS BIGINT) AS refused FROM usage u JOIN clients c ON c.id = u.client_id \
             WHERE c.plan = $1 GROUP BY u.day ORDER BY u.day",
        )
        .bind(plan)
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(rows::usage)
        .collect()
    }

    async fn org_usage(&self, org: &str) -> Result<Vec<Usage>> {
        sqlx::query(
            "SELECT u.client_id AS client_id, u.day AS day, u.issued AS issued, \
             u.refused AS refused FROM usage u JOIN clients c ON c.id = u.client_id \
             WHERE c.org_id = $1 ORDER BY u.day, u.client_id",
        )
        .bind(org)
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(rows::usage)
        .collect()
    }

    async fn org_api_usage(&self, org: &str) -> Result<Vec<ApiUsage>> {
        sqlx::query(
            "SELECT u.client_id AS client_id, u.day AS day, u.api AS api, \
             u.requests AS requests, u.refused AS refused \
             FROM api_usage u JOIN clients c ON c.id = u.client_id \
             WHERE c.org_id = $1 ORDER BY u.day, u.client_id, u.api",
        )
        .bind(org)
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(rows::api_usage)
        .collect()
    }

    async fn clients(&self) -> Result<Vec<Client>> {
        sqlx::query("SELECT * FROM clients ORDER BY created_at, id")
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(rows::client)
            .collect()
    }

    async fn client(&self, id: &ClientId) -> Result<Option<Client>> {
        sqlx::query("SELECT * FROM clients WHERE id = $1")
            .bind(id.as_str())
            .fetch_optional(&self.pool)
            .await?
            .as_ref()
            .map(rows::client)
            .transpose()
    }

    async fn update_client(&self, client: &Client) -> Result<bool> {
        let columns = rows::credential_columns(client);
        let (prev_hash, prev_until) = columns.previous.unzip();
        let [dn, dns, uri, jwks, jwks_uri] = columns.keys;
        let mut tx = begin_write(&self.pool).await?;
        let changed = sqlx::query(
            "UPDATE clients SET \
             plan = COALESCE((SELECT o.plan FROM orgs o WHERE o.id = clients.org_id), $2), \
             label = $3, secret_hash = $4, \
             previous_secret_hash = $5, previous_secret_expires_at = $6, auth_method = $7, \
             enabled = $8, updated_at = $9, tls_subject_dn = $10, tls_san_dns = $11, \
             tls_san_uri = $12, jwks = $13, jwks_uri = $14 WHERE id = $1 RETURNING id",
        )
        .bind(client.id.as_str())
        .bind(client.plan.as_str())
        .bind(client.label.as_str())
        .bind(columns.secret_hash)
        .bind(prev_hash)
        .bind(prev_until)
        .bind(client.auth_method.as_str())
        .bind(client.enabled)
        .bind(client.updated_at)
        .bind(dn)
        .bind(dns)
        .bind(uri)
        .bind(jwks)
        .bind(jwks_uri)
        .fetch_all(&mut *tx)
        .await
        .map_err(|e| rows::constraint(e, &format!("client {}", client.id), &client.plan))?;
        commit(tx, &self.audit, !changed.is_empty(), String::new).await?;
        Ok(!changed.is_empty())
    }

    async fn delete_client(&self, id: &ClientId) -> Result<bool> {
        let mut tx = begin_write(&self.pool).await?;
        let gone = sqlx::query("DELETE FROM clients WHERE id = $1 RETURNING id")
            .bind(id.as_str())
            .fetch_all(&mut *tx)
            .await?;
        commit(tx, &self.audit, !gone.is_empty(), String::new).await?;
        Ok(!gone.is_empty())
    }

    async fn insert_key(&self, key: &SigningKey) -> Result<()> {
        let mut tx = begin_write(&self.pool).await?;
        sqlx::query(
            "INSERT INTO signing_keys (kid, alg, public_jwk, private_sealed, created_at, activates_at) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(key.kid.as_str())
        .bind(key.alg.as_str())
        .bind(key.public_jwk.as_str())
        .bind(key.private_sealed.as_slice())
        .bind(key.created_at)
        .bind(key.activates_at)
        .execute(&mut *tx)
        .await
        .map_err(|e| rows::constraint(e, &format!("key {}", key.kid), ""))?;
        commit(tx, &self.audit, true, || format!("key:{}", key.kid)).await?;
        Ok(())
    }

    async fn keys(&self) -> Result<Vec<SigningKey>> {
        sqlx::query("SELECT * FROM signing_keys ORDER BY activates_at, created_at, kid")
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(rows::key)
            .collect()
    }

    async fn delete_key(&self, kid: &str) -> Result<bool> {
        let mut tx = begin_write(&self.pool).await?;
        let gone = sqlx::query("DELETE FROM signing_keys WHERE kid = $1 RETURNING kid")
            .bind(kid)
            .fetch_all(&mut *tx)
            .await?;
        commit(tx, &self.audit, !gone.is_empty(), String::new).await?;
        Ok(!gone.is_empty())
    }

    async fn latest_change(&self) -> Result<i64> {
        let row = sqlx::query(
            "SELECT (SELECT MAX(seq) FROM changes) AS latest, \
             (SELECT through FROM changes_pruned WHERE id = 1) AS pruned",
        )
        .fetch_one(&self.pool)
        .await?;
        let latest: Option<i64> = rows::get(&row, "latest")?;
        let pruned: Option<i64> = rows::get(&row, "pruned")?;
        Ok(latest.unwrap_or(0).max(pruned.unwrap_or(0)))
    }

    async fn changes_since(&self, after: i64, limit: u32) -> Result<Option<Changes>> {
        // The page's last number first: every change up to it has committed (they commit in
        // number order), so the reads below, each of the rows as they are by then, see a
        // state at least as new as every change they report.
        let page = sqlx::query(
            "SELECT MAX(seq) AS through, COUNT(*) AS n FROM \
             (SELECT seq FROM changes WHERE seq > $1 ORDER BY seq LIMIT $2) AS page",
        )
        .bind(after)
        .bind(i64::from(limit))
        .fetch_one(&self.pool)
        .await?;
        let through: Option<i64> = rows::get(&page, "through")?;
        let read: i64 = rows::get(&page, "n")?;
        let mut changes = Changes {
            through: through.unwrap_or(after),
            more: read >= i64::from(limit),
            ..Changes::default()
        };
        if let Some(through) = through {
            // One row per changed id, joined with its current row: NULL columns where it
            // was deleted.
            let changed = |table: &str, key: &str, kind: &str| {
                format!(
                    "SELECT ch.change_id, {table}.* FROM \
                     (SELECT DISTINCT id AS change_id FROM changes \
                      WHERE kind = '{kind}' AND seq > $1 AND seq <= $2) AS ch \
                     LEFT JOIN {table} ON {table}.{key} = ch.change_id"
                )
            };
            let read = |sql: String| {
                let pool = &self.pool;
                async move {
                    sqlx::query(&sql)
                        .bind(after)
                        .bind(through)
                        .fetch_all(pool)
                        .await
                }
            };
            for row in read(changed("plans", "name", "plan")).await? {
                let name: String = rows::get(&row, "change_id")?;
                let present: Option<String> = rows::get(&row, "name")?;
                let plan = present.map(|_| rows::plan(&row)).transpose()?;
                changes.plans.push((name, plan));
            }
            for row in read(changed("clients", "id", "client")).await? {
                let id: String = rows::get(&row, "change_id")?;
                let id = ClientId::parse(&id).ok_or_else(|| rows::corrupt("changes.id", &id))?;
                let present: Option<String> = rows::get(&row, "id")?;
                let client = present.map(|_| rows::client(&row)).transpose()?;
                changes.clients.push((id, client));
            }
            for row in read(changed("signing_keys", "kid", "key")).await? {
                let kid: String = rows::get(&row, "change_id")?;
                let present: Option<String> = rows::get(&row, "kid")?;
                let key = present.map(|_| rows::key(&row)).transpose()?;
                changes.keys.push((kid, key));
            }
        }
        // Read after the changes: a prune that removed some of them before they were read
        // has committed by now, and shows here.
        let row = sqlx::query("SELECT through FROM changes_pruned WHERE id = 1")
            .fetch_one(&self.pool)
            .await?;
        let pruned: i64 = rows::get(&row, "through")?;
        Ok((pruned <= after).then_some(changes))
    }

    async fn prune_changes(&self, through: i64) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("UPDATE changes_pruned SET through = $1 WHERE id = 1 AND through < $1")
            .bind(through)
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM changes WHERE seq <= $1")
            .bind(through)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn revoke(&self, revoked: &Revoked) -> Result<()> {
        // Numbered and committed in one order, so that an incremental reader misses none.
        let mut tx = begin_write(&self.pool).await?;
        if let Some(lock) = DB::REVOKE_LOCK {
            sqlx::query(lock).execute(&mut *tx).await?;
        }
        sqlx::query(
            "INSERT INTO revoked_tokens (jti, client_id, exp) VALUES ($1, $2, $3) \
             ON CONFLICT (jti) DO NOTHING",
        )
        .bind(revoked.jti.as_str())
        .bind(revoked.client_id.as_str())
        .bind(revoked.exp)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn revoked_since(&self, after: i64, now: Timestamp) -> Result<Vec<(i64, Revoked)>> {
        sqlx::query(DB::REVOKED_SINCE)
            .bind(after)
            .bind(now)
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(|row| Ok((rows::get(row, "seq")?, rows::revoked(row)?)))
            .collect()
    }

    async fn prune_revoked(&self, now: Timestamp) -> Result<()> {
        sqlx::query("DELETE FROM revoked_tokens WHERE exp <= $1")
            .bind(now)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn is_empty(&self) -> Result<bool> {
        let any = sqlx::query(
            "SELECT 1 FROM plans UNION ALL SELECT 1 FROM clients \
             UNION ALL SELECT 1 FROM signing_keys UNION ALL SELECT 1 FROM meta LIMIT 1",
        )
        .fetch_optional(&self.pool)
        .await?;
        Ok(any.is_none())
    }

    async fn check_value(&self, name: &str, proposed: &[u8]) -> Result<Vec<u8>> {
        sqlx::query("INSERT INTO meta (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING")
            .bind(name)
            .bind(proposed)
            .execute(&self.pool)
            .await?;
        let row = sqlx::query("SELECT value FROM meta WHERE name = $1")
            .bind(name)
            .fetch_one(&self.pool)
            .await?;
        rows::get(&row, "value")
    }

    async fn replace_value(&self, name: &str, value: &[u8]) -> Result<Option<Vec<u8>>> {
        let previous = sqlx::query("SELECT value FROM meta WHERE name = $1")
            .bind(name)
            .fetch_optional(&self.pool)
            .await?
            .map(|row| rows::get(&row, "value"))
            .transpose()?;
        sqlx::query(
            "INSERT INTO meta (name, value) VALUES ($1, $2) \
             ON CONFLICT (name) DO UPDATE SET value = excluded.value",
        )
        .bind(name)
        .bind(value)
        .execute(&self.pool)
        .await?;
        Ok(previous)
    }

    async fn checkpoint(&self) -> Result<bool> {
        let Some(checkpoint) = DB::CHECKPOINT else {
            return Ok(true);
        };
        let row = sqlx::query(checkpoint).fetch_one(&self.pool).await?;
        Ok(rows::get::<_, i64>(&row, "busy")? == 0)
    }

    async fn add_usage(&self, usage: &[Usage]) -> Result<()> {
        // Many rows per statement: a flush carries one row per active client.
        let mut tx = self.pool.begin().await?;
        for chunk in usage.chunks(USAGE_CHUNK) {
            let sql = usage_insert::<DB>(chunk.len());
            let mut insert = sqlx::query(&sql);
            for u in chunk {
                insert = insert
                    .bind(u.client_id.as_str())
                    .bind(u.day.as_str())
                    .bind(u.issued as i64)
                    .bind(u.refused as i64);
            }
            insert.execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn add_hourly_usage(&self, hour: &str, issued: u64, refused: u64) -> Result<()> {
        sqlx::query(
            "INSERT INTO usage_hourly (hour, issued, refused) VALUES ($1, $2, $3) \
             ON CONFLICT (hour) DO UPDATE SET issued = usage_hourly.issued + excluded.issued, \
             refused = usage_hourly.refused + excluded.refused",
        )
        .bind(hour)
        .bind(issued as i64)
        .bind(refused as i64)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn hourly_usage(&self, from: &str) -> Result<Vec<(String, u64, u64)>> {
        sqlx::query("SELECT hour, issued, refused FROM usage_hourly WHERE hour >= $1 ORDER BY hour")
            .bind(from)
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(|row| {
                Ok((
                    rows::get(row, "hour")?,
                    rows::get::<_, i64>(row, "issued")? as u64,
                    rows::get::<_, i64>(row, "refused")? as u64,
                ))
            })
            .collect()
    }

    async fn prune_hourly_usage(&self, before: &str) -> Result<()> {
        sqlx::query("DELETE FROM usage_hourly WHERE hour < $1")
            .bind(before)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn usage(&self, client_id: &ClientId) -> Result<Vec<Usage>> {
        sqlx::query(
            "SELECT client_id, day, issued, refused FROM usage WHERE client_id = $1 ORDER BY day",
        )
        .bind(client_id.as_str())
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(rows::usage)
        .collect()
    }

    async fn add_api_usage(
        &self,
        batch: &str,
        received_at: Timestamp,
        usage: &[ApiUsage],
    ) -> Result<bool> {
        // The batch and its counts commit together: a batch is counted once, and whole.
        let mut tx = self.pool.begin().await?;
        let new = sqlx::query(
            "INSERT INTO api_usage_batches (batch, received_at) VALUES ($1, $2) \
             ON CONFLICT (batch) DO NOTHING RETURNING batch",
        )
        .bind(batch)
        .bind(received_at)
        .fetch_all(&mut *tx)
        .await?;
        if new.is_empty() {
            return Ok(false);
        }
        // One statement per [`USAGE_CHUNK`] rows (a kit's batch is 1,000), not one per row.
        for chunk in merged_api_usage(usage).chunks(USAGE_CHUNK) {
            let sql = api_usage_insert::<DB>(chunk.len());
            let mut insert = sqlx::query(&sql);
            for u in chunk {
                insert = insert
                    .bind(u.client_id)
                    .bind(u.day)
                    .bind(u.api)
                    .bind(i64::try_from(u.requests).unwrap_or(i64::MAX))
                    .bind(i64::try_from(u.refused).unwrap_or(i64::MAX));
            }
            insert.execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(true)
    }

    fn audited(&self, event: AuditEvent) -> Arc<dyn Store> {
        Arc::new(Self {
            pool: self.pool.clone(),
            audit: Arc::new(Mutex::new(Some(event))),
        })
    }

    fn unkept_audit(&self) -> Option<AuditEvent> {
        self.audit.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    async fn add_audit_event(&self, event: &AuditEvent) -> Result<()> {
        sqlx::query(INSERT_AUDIT_EVENT)
            .bind(event.at)
            .bind(event.actor.as_str())
            .bind(event.action.as_str())
            .bind(event.object.as_str())
            .bind(event.source.as_str())
            .bind(event.channel.as_str())
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn audit_events(&self, query: &AuditQuery) -> Result<Vec<AuditEvent>> {
        // A substring of any field, any case: LIKE with its wildcards in the text escaped.
        let mut pattern = String::from("%");
        for c in query.text.to_lowercase().chars() {
            if matches!(c, '%' | '_' | '\\') {
                pattern.push('\\');
            }
            pattern.push(c);
        }
        pattern.push('%');
        sqlx::query(
            "SELECT id, at, actor, action, object, source, channel FROM audit_events \
             WHERE id < $1 AND LOWER(actor || ' ' || action || ' ' || object || ' ' || \
             source || ' ' || channel) LIKE $2 ESCAPE '\\' ORDER BY id DESC LIMIT $3",
        )
        .bind(query.before.unwrap_or(i64::MAX))
        .bind(pattern)
        .bind(i64::from(query.limit))
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(rows::audit_event)
        .collect()
    }

    async fn prune_audit_events(&self, before: Timestamp, keep: u64) -> Result<()> {
        sqlx::query("DELETE FROM audit_events WHERE at < $1")
            .bind(before)
            .execute(&self.pool)
            .await?;
        sqlx::query(
            "DELETE FROM audit_events WHERE id <= \
             (SELECT id FROM audit_events ORDER BY id DESC LIMIT 1 OFFSET $1)",
        )
        .bind(i64::try_from(keep).unwrap_or(i64::MAX))
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn prune_api_usage_batches(&self, before: Timestamp) -> Result<()> {
        sqlx::query("DELETE FROM api_usage_batches WHERE received_at < $1")
            .bind(before)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn api_usage(&self, client_id: &ClientId) -> Result<Vec<ApiUsage>> {
        sqlx::query(
            "SELECT client_id, day, api, requests, refused FROM api_usage WHERE client_id = $1 \
             ORDER BY day, api",
        )
        .bind(client_id.as_str())
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(rows::api_usage)
        .collect()
    }

    async fn plan_api_usage(&self, plan: &str) -> Result<Vec<ApiUsage>> {
        sqlx::query(
            "SELECT '' AS client_id, u.day AS day, u.api AS api, \
             CAST(SUM(u.requests) AS BIGINT) AS requests, \
             CAST(SUM(u.refused) AS BIGINT) AS refused \
             FROM api_usage u JOIN clients c ON c.id = u.client_id \
             WHERE c.plan = $1 GROUP BY u.day, u.api ORDER BY u.day, u.api",
        )
        .bind(plan)
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(rows::api_usage)
        .collect()
    }
}
