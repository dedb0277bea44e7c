//! The PostgreSQL backend, for many stateless Tessera instances sharing one database. The
//! schema is in `migrations/postgres/`; the queries are shared with SQLite (`sql.rs`), so
//! this module only connects and gives the statements PostgreSQL words its own way.

use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::Postgres;

use crate::sql::{Dialect, SqlStore};
use crate::{Result, StoreError};

/// A [`Store`](crate::Store) in a PostgreSQL database.
pub type PostgresStore = SqlStore<Postgres>;

/// How long a PostgreSQL server has to log a new connection in and answer its first query
/// when the store opens, and the pool to hand out a connection after.
const ANSWER_WITHIN: Duration = Duration::from_secs(5);

impl PostgresStore {
    /// Connects to `url` (`postgres://…`) and applies the embedded migrations. A database
    /// that cannot be reached fails at once with the real cause (connection refused, no
    /// such database, authentication), not after the pool's timeout; one that does not
    /// answer fails after 5 s, saying so ([`StoreError::NoAnswer`]), never hangs.
    pub async fn open(url: &str) -> Result<Self> {
        let options = PgConnectOptions::from_str(url)?;
        // One connection first: the pool would retry until its timeout and report only that.
        let first = async {
            let mut connection =
                <sqlx::PgConnection as sqlx::Connection>::connect_with(&options).await?;
            sqlx::query("SELECT 1").execute(&mut connection).await?;
            sqlx::Connection::close(connection).await
        };
        match tokio::time::timeout(ANSWER_WITHIN, first).await {
            Ok(outcome) => outcome?,
            Err(_) => return Err(silent(&options).await),
        }
        let pool = PgPoolOptions::new()
            .max_connections(8)
            .acquire_timeout(ANSWER_WITHIN);
        Self::connect(pool, options, sqlx::migrate!("migrations/postgres")).await
    }
}

/// Why a server at `options` did not answer within [`ANSWER_WITHIN`]: whether it accepts a
/// TCP connection at all (tried once more, for a second), so that the message names the
/// cause. Only on that failure: a healthy start opens no connection that logs in nothing.
async fn silent(options: &PgConnectOptions) -> StoreError {
    let (server, accepted) = match options.get_socket() {
        Some(socket) => (socket.display().to_string(), true),
        None => {
            let (host, port) = (options.get_host(), options.get_port());
            let probe = tokio::net::TcpStream::connect((host, port));
            let accepted = matches!(
                tokio::time::timeout(Duration::from_secs(1), probe).await,
                Ok(Ok(_))
            );
            let server = if host.contains(':') {
                format!("[{host}]:{port}")
            } else {
                format!("{host}:{port}")
            };
            (server, accepted)
        }
    };
    StoreError::NoAnswer {
        server,
        accepted,
        within: ANSWER_WITHIN,
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
