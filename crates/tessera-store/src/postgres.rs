//! The PostgreSQL backend, for many stateless Tessera instances sharing one database. The
//! schema is in `migrations/postgres/`; the queries are shared with SQLite (`sql.rs`), so
//! this module only connects and gives the statements PostgreSQL words its own way.

use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Pool, Postgres};

use crate::sql::{Dialect, SqlStore};
use crate::{ConnectionFault, Result, StoreError};

/// A [`Store`](crate::Store) in a PostgreSQL database.
pub type PostgresStore = SqlStore<Postgres>;

/// How long a PostgreSQL server has to log a new connection in and answer its first query
/// when the store opens, and the pool to hand out a connection after.
const ANSWER_WITHIN: Duration = Duration::from_secs(5);

/// How long each step of the probe that explains a pool's timeout may take: resolving the
/// name, opening a TCP connection, logging in and answering `SELECT 1`.
const PROBE_STEP: Duration = Duration::from_secs(1);

/// The pool's size.
const CONNECTIONS: u32 = 8;

impl PostgresStore {
    /// Connects to `url` (`postgres://…`) and applies the embedded migrations. A database
    /// that cannot be reached fails at once with the real cause (connection refused, no
    /// such database, authentication), not after the pool's timeout; one that does not
    /// answer fails after 5 s, saying so ([`StoreError::NoAnswer`]), never hangs. Failures
    /// name the server and the cause ([`StoreError::Connection`]).
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
            Ok(Ok(())) => {}
            Ok(Err(error)) => return Err(failed(&options, error).await),
            Err(_) => return Err(silent(&options).await),
        }
        let pool = PgPoolOptions::new()
            .max_connections(CONNECTIONS)
            .acquire_timeout(ANSWER_WITHIN);
        Self::connect(pool, options, sqlx::migrate!("migrations/postgres")).await
    }
}

/// Why a server at `options` did not answer within [`ANSWER_WITHIN`]: whether it accepts a
/// TCP connection at all (tried once more, for a second), so that the message names the
/// cause. Only on that failure: a healthy start opens no connection that logs in nothing.
async fn silent(options: &PgConnectOptions) -> StoreError {
    let accepted = match options.get_socket() {
        Some(_) => true,
        None => {
            let probe = tokio::net::TcpStream::connect((options.get_host(), options.get_port()));
            matches!(tokio::time::timeout(PROBE_STEP, probe).await, Ok(Ok(_)))
        }
    };
    StoreError::NoAnswer {
        server: server(options),
        accepted,
        within: ANSWER_WITHIN,
    }
}

/// Where the server is, for messages: `host:port` (`[v6]:port`), or the socket's path.
/// Never the user or the password.
fn server(options: &PgConnectOptions) -> String {
    if let Some(socket) = options.get_socket() {
        return socket.display().to_string();
    }
    let (host, port) = (options.get_host(), options.get_port());
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// `error`, from connecting to the server at `options` or from a connection to it, with
/// its cause and the server named where it is one of the connection's: refused, TLS, the
/// login; a connection that failed otherwise is probed ([`reach`]), so that a server gone
/// away reads as refused or silent rather than as a reset. Other errors (a query's) are
/// returned as they are.
async fn failed(options: &PgConnectOptions, error: sqlx::Error) -> StoreError {
    let cause = match &error {
        sqlx::Error::Io(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            ConnectionFault::Refused
        }
        sqlx::Error::Io(e) => {
            return reach(options)
                .await
                .unwrap_or_else(|| StoreError::Connection {
                    server: server(options),
                    cause: ConnectionFault::Broken(e.to_string()),
                })
        }
        sqlx::Error::Tls(e) => ConnectionFault::Tls(e.to_string()),
        // Class 28, invalid authorization; 3D000, no such database (PostgreSQL Appendix A).
        sqlx::Error::Database(e)
            if e.code()
                .is_some_and(|code| code.starts_with("28") || code == "3D000") =>
        {
            ConnectionFault::Authentication(e.message().to_owned())
        }
        _ => return StoreError::Backend(error),
    };
    StoreError::Connection {
        server: server(options),
        cause,
    }
}

/// Whether the server at `options` can be reached, a step at a time, each bounded by
/// [`PROBE_STEP`]: its name resolves, and its address takes a TCP connection. `None` when
/// it does (or for a socket path); otherwise why not: the name, refused, no answer.
async fn reach(options: &PgConnectOptions) -> Option<StoreError> {
    if options.get_socket().is_some() {
        return None;
    }
    let fault = |cause| {
        Some(StoreError::Connection {
            server: server(options),
            cause,
        })
    };
    let (host, port) = (options.get_host(), options.get_port());
    if host.parse::<std::net::IpAddr>().is_err() {
        let lookup = tokio::net::lookup_host((host, port));
        let unresolved = match tokio::time::timeout(PROBE_STEP, lookup).await {
            Ok(Ok(mut addresses)) => addresses.next().is_none().then(|| "no address".into()),
            Ok(Err(e)) => Some(e.to_string()),
            Err(_) => Some(format!(
                "no answer from the resolver within {} s",
                PROBE_STEP.as_secs()
            )),
        };
        if let Some(why) = unresolved {
            return fault(ConnectionFault::NameResolution(why));
        }
    }
    let tcp = tokio::net::TcpStream::connect((host, port));
    match tokio::time::timeout(PROBE_STEP, tcp).await {
        Ok(Ok(_)) => None,
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            fault(ConnectionFault::Refused)
        }
        Ok(Err(e)) => fault(ConnectionFault::Broken(e.to_string())),
        Err(_) => Some(StoreError::NoAnswer {
            server: server(options),
            accepted: false,
            within: ANSWER_WITHIN,
        }),
    }
}

/// Why the pool at `options` timed out handing out a connection: [`reach`], then a new
/// connection that must log in and answer `SELECT 1` within [`PROBE_STEP`] (TLS, the
/// login, no answer). When all of it works, the pool's connections were all in use.
async fn probe(options: &PgConnectOptions) -> StoreError {
    if let Some(unreachable) = reach(options).await {
        return unreachable;
    }
    let login = async {
        let mut connection =
            <sqlx::PgConnection as sqlx::Connection>::connect_with(options).await?;
        sqlx::query("SELECT 1").execute(&mut connection).await?;
        sqlx::Connection::close(connection).await
    };
    match tokio::time::timeout(PROBE_STEP, login).await {
        Ok(Ok(())) => StoreError::Connection {
            server: server(options),
            cause: ConnectionFault::PoolBusy {
                connections: CONNECTIONS,
                within: ANSWER_WITHIN,
            },
        },
        Ok(Err(error)) => failed(options, error).await,
        Err(_) => StoreError::NoAnswer {
            server: server(options),
            accepted: true,
            within: ANSWER_WITHIN,
        },
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
    // For the transaction only (`set_config(…, true)`, as `SET LOCAL`): the role's own
    // settings hold for everything else, migrations and long reads included.
    const WRITE_BOUNDS: Option<&'static str> = Some(
        "SELECT set_config('lock_timeout', $1, true), set_config('statement_timeout', $2, true)",
    );
    fn bulk_param(n: usize) -> String {
        format!("${n}")
    }
    async fn explain(pool: &Pool<Self>, error: StoreError) -> StoreError {
        let options = pool.connect_options();
        let error = match error {
            StoreError::Backend(error) => error,
            // A call that got no answer: the server silent, or only that call slow (the
            // probe logs in and is answered: then the call's own error says it best).
            StoreError::Unanswered { .. } => {
                return match probe(&options).await {
                    StoreError::Connection {
                        cause: ConnectionFault::PoolBusy { .. },
                        ..
                    } => error,
                    cause => cause,
                }
            }
            other => return other,
        };
        match error {
            sqlx::Error::PoolTimedOut => probe(&options).await,
            other => failed(&options, other).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What opening says when PostgreSQL cannot be used: the cause and the server, never the
    /// URL's password. Against the shared test server (`TESSERA_TEST_POSTGRES_URL`), which
    /// trusts every login it has a role for and speaks no TLS with this build.
    #[tokio::test]
    async fn a_connection_that_fails_names_its_cause_and_the_server() {
        // The test server as `TESSERA_TEST_POSTGRES_URL` names it: its user, its
        // `host:port` and the rest (database and options), so that each case changes one.
        let base = crate::testing::postgres_base_url();
        let after_scheme = base
            .split_once("://")
            .map_or(base.as_str(), |(_, rest)| rest);
        let (authority, rest) = after_scheme
            .find(['/', '?'])
            .map_or((after_scheme, ""), |i| after_scheme.split_at(i));
        let (userinfo, server) = authority
            .rsplit_once('@')
            .unwrap_or(("postgres", authority));
        let user = userinfo.split(':').next().unwrap_or("postgres");
        let server = if server.contains(':') {
            server.to_owned()
        } else {
            format!("{server}:5432")
        };
        let at = |user_host: &str, query: &str| {
            let joined = if rest.contains('?') {
                query.replacen('?', "&", 1)
            } else {
                query.to_owned()
            };
            format!("postgres://{user_host}{rest}{joined}")
        };
        let refused = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let closed = refused.local_addr().unwrap();
        drop(refused);
        let cases = [
            (
                at(&format!("{user}:Sesame-42@{closed}"), ""),
                format!("PostgreSQL at {closed} refused the connection: nothing listens there"),
            ),
            (
                at(&format!("{user}:Sesame-42@no-such-host.invalid:5432"), ""),
                "PostgreSQL at no-such-host.invalid:5432 cannot be found: the host name does \
                 not resolve ("
                    .to_owned(),
            ),
            (
                at(&format!("{user}:Sesame-42@{server}"), "?sslmode=require"),
                format!("PostgreSQL at {server} failed the TLS handshake ("),
            ),
            (
                at(&format!("no_such_role:Sesame-42@{server}"), ""),
                format!(
                    "PostgreSQL at {server} refused the login (role \"no_such_role\" does not \
                     exist)"
                ),
            ),
        ];
        for (url, expected) in cases {
            let error = PostgresStore::open(&url).await.unwrap_err();
            let message = error.to_string();
            assert!(
                matches!(error, StoreError::Connection { .. }),
                "{url}: {error:?}"
            );
            assert!(message.starts_with(&expected), "{url}: {message}");
            assert!(!message.contains("Sesame-42"), "{message}");
        }
    }
}
