//! The embedded SQLite backend: one file, created on first use, WAL with `synchronous=FULL`
//! so that an acknowledged write survives a crash. The schema is in `migrations/sqlite/`;
//! the queries are shared with PostgreSQL (`sql.rs`), so this module only connects and
//! gives the one statement SQLite words its own way.

use std::str::FromStr;
use std::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::Sqlite;

use crate::sql::{Dialect, SqlStore};
use crate::{Result, StoreError};

/// A [`Store`](crate::Store) in one SQLite file.
pub type SqliteStore = SqlStore<Sqlite>;

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
        let pool = SqlitePoolOptions::new().max_connections(4);
        Self::connect(pool, options, sqlx::migrate!("migrations/sqlite")).await
    }
}

impl Dialect for Sqlite {
    // `seq` is AUTOINCREMENT (migrations/sqlite/0005): never reused after a prune, and
    // SQLite's one writer at a time commits in number order.
    const REVOKED_SINCE: &'static str = "SELECT seq, jti, client_id, exp \
        FROM revoked_tokens WHERE seq > $1 AND exp > $2 ORDER BY seq";
    const REVOKE_LOCK: Option<&'static str> = None;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The durability promise rests on these two settings of every connection: an
    /// acknowledged write is in the WAL and synced before the answer (SQLite's
    /// `synchronous=FULL` is 2).
    #[tokio::test]
    async fn every_connection_syncs_each_commit_in_wal_mode() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&format!("sqlite://{}", dir.path().join("t.db").display()))
            .await
            .unwrap();
        // More than one connection: each must carry the settings, not only the first.
        let mut held = Vec::new();
        for _ in 0..3 {
            let mut connection = store.pool.acquire().await.unwrap();
            let synchronous: i64 = sqlx::query_scalar("PRAGMA synchronous")
                .fetch_one(&mut *connection)
                .await
                .unwrap();
            let journal: String = sqlx::query_scalar("PRAGMA journal_mode")
                .fetch_one(&mut *connection)
                .await
                .unwrap();
            assert_eq!((synchronous, journal.as_str()), (2, "wal"));
            held.push(connection);
        }
    }
}
