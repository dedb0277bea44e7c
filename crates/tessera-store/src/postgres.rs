//! The PostgreSQL backend, for many stateless Tessera instances sharing one database. The
//! schema is in `migrations/postgres/`; the queries are shared with SQLite (`sql.rs`), so
//! this module only connects and gives the statements PostgreSQL words its own way.

use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::Postgres;

use crate::sql::{Dialect, SqlStore};
use crate::Result;

/// A [`Store`](crate::Store) in a PostgreSQL database.
pub type PostgresStore = SqlStore<Postgres>;

impl PostgresStore {
    /// Connects to `url` (`postgres://…`) and applies the embedded migrations. A database
    /// that cannot be reached fails at once with the real cause (connection refused, no
    /// such database, authentication), not after the pool's timeout.
    pub async fn open(url: &str) -> Result<Self> {
        let options = PgConnectOptions::from_str(url)?;
        // One connection first: the pool would retry until its timeout and report only that.
        sqlx::Connection::close(
            <sqlx::PgConnection as sqlx::Connection>::connect_with(&options).await?,
        )
        .await?;
        let pool = PgPoolOptions::new()
            .max_connections(8)
            .acquire_timeout(Duration::from_secs(5));
        Self::connect(pool, options, sqlx::migrate!("migrations/postgres")).await
    }
}

impl Dialect for Postgres {
    // The sequence behind `seq` (migrations/postgres/0002) numbers revocations.
    const REVOKED_SINCE: &'static str = "SELECT seq, jti, client_id, exp \
        FROM revoked_tokens WHERE seq > $1 AND exp > $2 ORDER BY seq";
    // Sequence values are taken at insert and may commit out of order, so a reader could
    // see 8 before 7 commits and then never read 7. Revocations take this lock for their
    // transaction, so that they number and commit one after another (they are rare).
    const REVOKE_LOCK: Option<&'static str> = Some("SELECT pg_advisory_xact_lock(7289504519)");
    // The server checkpoints its own write-ahead log.
    const CHECKPOINT: Option<&'static str> = None;
    // Rows come off the connection's socket buffer on the caller's thread: cheap as they are.
    const PACKED_CLIENTS: Option<&'static str> = None;
    fn bulk_param(n: usize) -> String {
        format!("${n}")
    }
}
