//! The embedded SQLite backend: one file, created on first use, WAL with `synchronous=FULL`
//! so that an acknowledged write survives a crash.

use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::SqlitePool;
use tessera_proto::ClientId;

use crate::{rows, Client, Plan, Result, Revoked, SigningKey, Store, StoreError, Timestamp, Usage};

/// A store in one SQLite file.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    pool: SqlitePool,
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
        Ok(Self { pool })
    }
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
            .map(rows::plan)
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
            .map_err(|e| rows::constraint(e, &format!("client {}", client.id), &client.plan))?;
        }
        tx.commit().await?;
        Ok(())
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
        sqlx::query("SELECT * FROM clients WHERE id = ?1")
            .bind(id.as_str())
            .fetch_optional(&self.pool)
            .await?
            .as_ref()
            .map(rows::client)
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
        .map_err(|e| rows::constraint(e, &format!("client {}", client.id), &client.plan))?;
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
        .map_err(|e| rows::constraint(e, &format!("key {}", key.kid), ""))?;
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

    async fn revoked_since(&self, after: i64, now: Timestamp) -> Result<Vec<(i64, Revoked)>> {
        sqlx::query(
            "SELECT rowid AS seq, jti, client_id, exp FROM revoked_tokens \
             WHERE rowid > ?1 AND exp > ?2 ORDER BY rowid",
        )
        .bind(after)
        .bind(now)
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(|row| Ok((sqlx::Row::try_get(row, "seq")?, rows::revoked(row)?)))
        .collect()
    }

    async fn prune_revoked(&self, now: Timestamp) -> Result<()> {
        sqlx::query("DELETE FROM revoked_tokens WHERE exp <= ?1")
            .bind(now)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn check_value(&self, name: &str, proposed: &[u8]) -> Result<Vec<u8>> {
        sqlx::query("INSERT INTO meta (name, value) VALUES (?1, ?2) ON CONFLICT (name) DO NOTHING")
            .bind(name)
            .bind(proposed)
            .execute(&self.pool)
            .await?;
        Ok(sqlx::query_scalar("SELECT value FROM meta WHERE name = ?1")
            .bind(name)
            .fetch_one(&self.pool)
            .await?)
    }

    async fn add_usage(&self, usage: &[Usage]) -> Result<()> {
        // Many rows per statement: a flush carries one row per active client.
        let mut tx = self.pool.begin().await?;
        for chunk in usage.chunks(1000) {
            let mut insert = sqlx::QueryBuilder::<sqlx::Sqlite>::new(
                "INSERT INTO usage (client_id, day, issued, refused) ",
            );
            insert.push_values(chunk, |mut row, u| {
                row.push_bind(&u.client_id)
                    .push_bind(&u.day)
                    .push_bind(u.issued as i64)
                    .push_bind(u.refused as i64);
            });
            insert.push(
                " ON CONFLICT (client_id, day) DO UPDATE \
                 SET issued = usage.issued + excluded.issued, refused = usage.refused + excluded.refused",
            );
            insert.build().execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn usage(&self, client_id: &ClientId) -> Result<Vec<Usage>> {
        sqlx::query(
            "SELECT client_id, day, issued, refused FROM usage WHERE client_id = ?1 ORDER BY day",
        )
        .bind(client_id.as_str())
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(rows::usage)
        .collect()
    }
}
