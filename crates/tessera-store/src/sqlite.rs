//! The embedded SQLite backend: one file, created on first use, WAL with `synchronous=FULL`
//! so that an acknowledged write survives a crash.

use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteRow, SqliteSynchronous,
};
use sqlx::{Row, SqlitePool};
use tessera_proto::{Algorithm, ClientId, ScopeSet};

use crate::{
    AuthMethod, Client, Plan, RateLimit, Result, Revoked, SigningKey, Store, StoreError, Timestamp,
    Usage,
};

/// A store in one SQLite file.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    pool: SqlitePool,
    path: PathBuf,
}

impl SqliteStore {
    /// Opens (and creates) the database at `url`: `sqlite://PATH`, `sqlite:PATH` or a path.
    pub async fn open(url: &str) -> Result<Self> {
        let path = url
            .strip_prefix("sqlite://")
            .or_else(|| url.strip_prefix("sqlite:"))
            .unwrap_or(url);
        if path.is_empty() || path.contains(":memory:") {
            return Err(StoreError::UnsupportedUrl(url.to_owned()));
        }
        let options = SqliteConnectOptions::from_str(&format!("sqlite://{path}"))?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .foreign_keys(true)
            .busy_timeout(Duration::from_secs(5));
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(options)
            .await?;
        sqlx::migrate!("migrations/sqlite").run(&pool).await?;
        Ok(Self {
            pool,
            path: PathBuf::from(path),
        })
    }

    /// The database file.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }
}

fn plan_from(row: &SqliteRow) -> Result<Plan> {
    let scopes: String = row.try_get("scopes")?;
    Ok(Plan {
        name: row.try_get("name")?,
        scopes: ScopeSet::parse_names(&scopes).map_err(|e| corrupt("plans.scopes", e))?,
        token_ttl: row.try_get("token_ttl")?,
        token_rate: match (
            row.try_get::<Option<u32>, _>("rate_count")?,
            row.try_get::<Option<u32>, _>("rate_period")?,
            row.try_get::<Option<u32>, _>("rate_burst")?,
        ) {
            (Some(count), Some(period_secs), Some(burst)) => Some(RateLimit {
                count,
                period_secs,
                burst,
            }),
            _ => None,
        },
        reuse_percent: row.try_get("reuse_percent")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
    })
}

fn client_from(row: &SqliteRow) -> Result<Client> {
    let id: String = row.try_get("id")?;
    let method: String = row.try_get("auth_method")?;
    let previous_hash: Option<Vec<u8>> = row.try_get("previous_secret_hash")?;
    let previous_until: Option<i64> = row.try_get("previous_secret_expires_at")?;
    Ok(Client {
        id: ClientId::parse(&id).ok_or_else(|| corrupt("clients.id", "empty"))?,
        plan: row.try_get("plan")?,
        label: row.try_get("label")?,
        secret_hash: row.try_get("secret_hash")?,
        previous_secret: previous_hash.zip(previous_until),
        auth_method: AuthMethod::parse(&method)
            .ok_or_else(|| corrupt("clients.auth_method", &method))?,
        enabled: row.try_get("enabled")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
    })
}

fn key_from(row: &SqliteRow) -> Result<SigningKey> {
    let alg: String = row.try_get("alg")?;
    Ok(SigningKey {
        kid: row.try_get("kid")?,
        alg: Algorithm::from_str(&alg).map_err(|e| corrupt("signing_keys.alg", e))?,
        public_jwk: row.try_get("public_jwk")?,
        private_sealed: row.try_get("private_sealed")?,
        created_at: row.try_get("created_at")?,
        activates_at: row.try_get("activates_at")?,
    })
}

fn corrupt(column: &str, detail: impl std::fmt::Display) -> StoreError {
    StoreError::Backend(sqlx::Error::Decode(
        format!("bad value in {column}: {detail}").into(),
    ))
}

/// Maps constraint failures to the domain's words.
fn constraint(err: sqlx::Error, what: &str, plan: &str) -> StoreError {
    if let sqlx::Error::Database(db) = &err {
        if db.is_unique_violation() {
            return StoreError::Duplicate(what.to_owned());
        }
        if db.is_foreign_key_violation() {
            return StoreError::UnknownPlan(plan.to_owned());
        }
    }
    StoreError::Backend(err)
}

#[async_trait]
impl Store for SqliteStore {
    async fn revision(&self) -> Result<i64> {
        Ok(
            sqlx::query_scalar("SELECT value FROM revision WHERE id = 1")
                .fetch_one(&self.pool)
                .await?,
        )
    }

    async fn put_plan(&self, plan: &Plan) -> Result<()> {
        sqlx::query(
            "INSERT INTO plans (name, scopes, token_ttl, created_at, updated_at, \
             rate_count, rate_period, rate_burst, reuse_percent) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) \
             ON CONFLICT (name) DO UPDATE SET scopes = ?2, token_ttl = ?3, updated_at = ?5, \
             rate_count = ?6, rate_period = ?7, rate_burst = ?8, reuse_percent = ?9",
        )
        .bind(&plan.name)
        .bind(plan.scopes.to_string())
        .bind(plan.token_ttl)
        .bind(plan.created_at)
        .bind(plan.updated_at)
        .bind(plan.token_rate.map(|r| r.count))
        .bind(plan.token_rate.map(|r| r.period_secs))
        .bind(plan.token_rate.map(|r| r.burst))
        .bind(plan.reuse_percent)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn plans(&self) -> Result<Vec<Plan>> {
        sqlx::query("SELECT * FROM plans ORDER BY name")
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(plan_from)
            .collect()
    }

    async fn insert_clients(&self, clients: &[Client]) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        for client in clients {
            let (prev_hash, prev_until) = client.previous_secret.clone().unzip();
            sqlx::query(
                "INSERT INTO clients (id, plan, label, secret_hash, previous_secret_hash, \
                 previous_secret_expires_at, auth_method, enabled, created_at, updated_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            )
            .bind(client.id.as_str())
            .bind(&client.plan)
            .bind(&client.label)
            .bind(&client.secret_hash)
            .bind(prev_hash)
            .bind(prev_until)
            .bind(client.auth_method.as_str())
            .bind(client.enabled)
            .bind(client.created_at)
            .bind(client.updated_at)
            .execute(&mut *tx)
            .await
            .map_err(|e| constraint(e, &format!("client {}", client.id), &client.plan))?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn clients(&self) -> Result<Vec<Client>> {
        sqlx::query("SELECT * FROM clients ORDER BY created_at, id")
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(client_from)
            .collect()
    }

    async fn client(&self, id: &ClientId) -> Result<Option<Client>> {
        sqlx::query("SELECT * FROM clients WHERE id = ?1")
            .bind(id.as_str())
            .fetch_optional(&self.pool)
            .await?
            .as_ref()
            .map(client_from)
            .transpose()
    }

    async fn update_client(&self, client: &Client) -> Result<bool> {
        let (prev_hash, prev_until) = client.previous_secret.clone().unzip();
        let done = sqlx::query(
            "UPDATE clients SET plan = ?2, label = ?3, secret_hash = ?4, \
             previous_secret_hash = ?5, previous_secret_expires_at = ?6, auth_method = ?7, \
             enabled = ?8, updated_at = ?9 WHERE id = ?1",
        )
        .bind(client.id.as_str())
        .bind(&client.plan)
        .bind(&client.label)
        .bind(&client.secret_hash)
        .bind(prev_hash)
        .bind(prev_until)
        .bind(client.auth_method.as_str())
        .bind(client.enabled)
        .bind(client.updated_at)
        .execute(&self.pool)
        .await
        .map_err(|e| constraint(e, &format!("client {}", client.id), &client.plan))?;
        Ok(done.rows_affected() == 1)
    }

    async fn delete_client(&self, id: &ClientId) -> Result<bool> {
        let done = sqlx::query("DELETE FROM clients WHERE id = ?1")
            .bind(id.as_str())
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn insert_key(&self, key: &SigningKey) -> Result<()> {
        sqlx::query(
            "INSERT INTO signing_keys (kid, alg, public_jwk, private_sealed, created_at, activates_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )
        .bind(&key.kid)
        .bind(key.alg.as_str())
        .bind(&key.public_jwk)
        .bind(&key.private_sealed)
        .bind(key.created_at)
        .bind(key.activates_at)
        .execute(&self.pool)
        .await
        .map_err(|e| constraint(e, &format!("key {}", key.kid), ""))?;
        Ok(())
    }

    async fn keys(&self) -> Result<Vec<SigningKey>> {
        sqlx::query("SELECT * FROM signing_keys ORDER BY activates_at, created_at, kid")
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(key_from)
            .collect()
    }

    async fn delete_key(&self, kid: &str) -> Result<bool> {
        let done = sqlx::query("DELETE FROM signing_keys WHERE kid = ?1")
            .bind(kid)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn revoke(&self, revoked: &Revoked) -> Result<()> {
        sqlx::query(
            "INSERT INTO revoked_tokens (jti, client_id, exp) VALUES (?1, ?2, ?3) \
             ON CONFLICT (jti) DO NOTHING",
        )
        .bind(&revoked.jti)
        .bind(&revoked.client_id)
        .bind(revoked.exp)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn revoked(&self, now: Timestamp) -> Result<Vec<Revoked>> {
        sqlx::query("DELETE FROM revoked_tokens WHERE exp <= ?1")
            .bind(now)
            .execute(&self.pool)
            .await?;
        let rows = sqlx::query("SELECT jti, client_id, exp FROM revoked_tokens")
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|row| {
                Ok(Revoked {
                    jti: row.try_get("jti")?,
                    client_id: row.try_get("client_id")?,
                    exp: row.try_get("exp")?,
                })
            })
            .collect()
    }

    async fn add_usage(&self, usage: &[Usage]) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        for u in usage {
            sqlx::query(
                "INSERT INTO usage (client_id, day, issued, refused) VALUES (?1, ?2, ?3, ?4) \
                 ON CONFLICT (client_id, day) DO UPDATE SET issued = issued + ?3, refused = refused + ?4",
            )
            .bind(&u.client_id)
            .bind(&u.day)
            .bind(u.issued as i64)
            .bind(u.refused as i64)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn usage(&self, client_id: &ClientId) -> Result<Vec<Usage>> {
        let rows = sqlx::query(
            "SELECT client_id, day, issued, refused FROM usage WHERE client_id = ?1 ORDER BY day",
        )
        .bind(client_id.as_str())
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(Usage {
                    client_id: row.try_get("client_id")?,
                    day: row.try_get("day")?,
                    issued: row.try_get::<i64, _>("issued")? as u64,
                    refused: row.try_get::<i64, _>("refused")? as u64,
                })
            })
            .collect()
    }
}
