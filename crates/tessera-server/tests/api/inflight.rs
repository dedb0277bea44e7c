//! Requests held in flight for real: a test takes SQLite's write lock, so that a revocation
//! (which writes before it answers) waits inside its handler, holding its slot, until the
//! test lets go (on PostgreSQL, a lock the test holds does the same). No sleeps: each step
//! waits for the event it needs, with a generous bound.

use std::time::Duration;

use sqlx::{Connection, SqliteConnection};
use tessera_proto::{ClientId, ClientSecret};
use tessera_testkit::*;

const NEWS: &str = "grant_type=client_credentials&scope=news-api";

/// SQLite's write lock on the app's database, held until released or dropped.
struct WriteLock(SqliteConnection);

impl WriteLock {
    async fn take(app: &TestApp) -> Self {
        let mut connection = SqliteConnection::connect(&app.db_url).await.unwrap();
        sqlx::query("BEGIN IMMEDIATE")
            .execute(&mut connection)
            .await
            .unwrap();
        Self(connection)
    }

    pub(crate) async fn release(mut self) {
        sqlx::query("ROLLBACK").execute(&mut self.0).await.unwrap();
    }
}

/// A token of `id`, and a revocation of it sent in the background.
async fn revocation(
    app: &TestApp,
    id: &ClientId,
    secret: &ClientSecret,
) -> tokio::task::JoinHandle<u16> {
    let body: serde_json::Value = app.token(id, secret, NEWS).await.json().await.unwrap();
    let request = app
        .http
        .post(app.url("/connect/revocation"))
        .header("authorization", basic(id, secret))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={}", body["access_token"].as_str().unwrap()));
    tokio::spawn(async move { request.send().await.unwrap().status().as_u16() })
}

#[tokio::test]
async fn the_cap_admits_n_requests_refuses_the_next_and_never_the_metadata() {
    let app = spawn_with(|s| s.config.max_in_flight = 2).await;
    let (id, secret) = app.client().await;
    let lock = WriteLock::take(&app).await;
    let first = revocation(&app, &id, &secret).await;
    // While one slot is free, token requests pass; once both revocations hold one, the
    // next OAuth request is refused with 503.
    let second = revocation(&app, &id, &secret).await;
    until("both slots taken", || async {
        app.token(&id, &secret, NEWS).await.status() == 503
    })
    .await;
    let busy = app.token(&id, &secret, NEWS).await;
    assert_eq!(busy.headers()["retry-after"], "1");
    assert_eq!(error_of(busy).await.1, "temporarily_unavailable");
    for path in [
        "/healthz",
        "/readyz",
        "/.well-known/jwks.json",
        "/.well-known/oauth-authorization-server",
        "/metrics",
    ] {
        let r = app.http.get(app.url(path)).send().await.unwrap();
        assert_eq!(r.status(), 200, "{path} is outside the cap");
    }
    lock.release().await;
    assert_eq!((first.await.unwrap(), second.await.unwrap()), (200, 200));
    assert_eq!(app.token(&id, &secret, NEWS).await.status(), 200);
}

#[tokio::test]
async fn shutdown_refuses_new_connections_and_finishes_the_request_in_flight() {
    let mut app = spawn_with(|s| s.config.max_in_flight = 1).await;
    let (id, secret) = app.client().await;
    let lock = WriteLock::take(&app).await;
    let in_flight = revocation(&app, &id, &secret).await;
    until("the revocation holds the slot", || async {
        app.token(&id, &secret, NEWS).await.status() == 503
    })
    .await;
    app.stop_signal();
    let addr = app.addr;
    until("new connections refused", || async {
        tokio::net::TcpStream::connect(addr).await.is_err()
    })
    .await;
    lock.release().await;
    assert_eq!(
        in_flight.await.unwrap(),
        200,
        "the request in flight completes"
    );
    app.stop().await.unwrap();
}

/// Reads one HTTP/1.1 answer from `stream`: its head, in lower case, and its body, by its
/// `Content-Length`. `None` when the connection ends (or is reset) before a whole answer.
async fn read_answer(stream: &mut tokio::net::TcpStream) -> Option<(String, String)> {
    use tokio::io::AsyncReadExt;
    let mut buffer = Vec::new();
    let mut more = async |buffer: &mut Vec<u8>| {
        let mut chunk = [0; 4096];
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => false,
            Ok(n) => {
                buffer.extend_from_slice(&chunk[..n]);
                true
            }
        }
    };
    let head_end = loop {
        if let Some(at) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        if !more(&mut buffer).await {
            return None;
        }
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).to_lowercase();
    assert!(!head.contains("transfer-encoding"), "{head}");
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map_or(0, |v| v.trim().parse().unwrap());
    while buffer.len() < head_end + length {
        if !more(&mut buffer).await {
            return None;
        }
    }
    let body = String::from_utf8_lossy(&buffer[head_end..head_end + length]).into_owned();
    Some((head, body))
}

/// Waits until the listener refuses connections: the server is stopping.
async fn until_refused(app: &TestApp) {
    let addr = app.addr;
    until("new connections refused", || async {
        tokio::net::TcpStream::connect(addr).await.is_err()
    })
    .await;
}

/// Whether the connection has been closed by the server, with nothing more sent.
async fn closed(stream: &mut tokio::net::TcpStream) -> bool {
    use tokio::io::AsyncReadExt;
    let mut rest = Vec::new();
    matches!(stream.read_to_end(&mut rest).await, Ok(0))
}

/// Issue 24 item 6: a stop closed idle keep-alive connections at once, and with them the
/// requests their clients had just sent (16 per run of wrk, one per connection). Now a
/// request that comes on an open connection while the server stops is answered, with
/// `Connection: close`, and then the connection is closed (RFC 9112 section 9.6).
#[tokio::test]
async fn a_request_on_a_kept_alive_connection_during_shutdown_is_answered_then_closed() {
    use tokio::io::AsyncWriteExt;
    // A drain longer than the test: what ends the connection is the answer, not a timer.
    let mut app = spawn_with(|s| s.config.shutdown_drain = Duration::from_secs(3600)).await;
    let healthz = b"GET /healthz HTTP/1.1\r\nHost: tessera\r\n\r\n";
    let mut kept = tokio::net::TcpStream::connect(app.addr).await.unwrap();
    kept.write_all(healthz).await.unwrap();
    let (head, _) = read_answer(&mut kept).await.expect("an answer");
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(!head.contains("connection: close"), "kept alive: {head}");

    app.stop_signal();
    until_refused(&app).await;
    kept.write_all(healthz).await.unwrap();
    let (head, body) = read_answer(&mut kept)
        .await
        .expect("the request sent during the stop is answered");
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(head.contains("connection: close\r\n"), "{head}");
    assert!(!body.is_empty());
    assert!(closed(&mut kept).await, "and the connection then closed");
    app.stopped().await.unwrap();
}

/// A request in flight on a kept-alive connection when the stop begins is answered too,
/// saying `Connection: close`, so that its client sends nothing more on that connection.
#[tokio::test]
async fn the_request_in_flight_at_shutdown_is_answered_with_connection_close() {
    use tokio::io::AsyncWriteExt;
    let mut app = spawn_with(|s| s.config.max_in_flight = 1).await;
    let (id, secret) = app.client().await;
    let issued: serde_json::Value = app.token(&id, &secret, NEWS).await.json().await.unwrap();
    let body = format!("token={}", issued["access_token"].as_str().unwrap());
    let lock = WriteLock::take(&app).await;
    let mut kept = tokio::net::TcpStream::connect(app.addr).await.unwrap();
    let revocation = format!(
        "POST /connect/revocation HTTP/1.1\r\nHost: tessera\r\nAuthorization: {}\r\n\
         Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{body}",
        basic(&id, &secret),
        body.len()
    );
    kept.write_all(revocation.as_bytes()).await.unwrap();
    until("the revocation holds the slot", || async {
        app.token(&id, &secret, NEWS).await.status() == 503
    })
    .await;

    app.stop_signal();
    until_refused(&app).await;
    lock.release().await;
    let (head, _) = read_answer(&mut kept)
        .await
        .expect("the request in flight is answered");
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(head.contains("connection: close\r\n"), "{head}");
    assert!(closed(&mut kept).await, "and the connection then closed");
    app.stopped().await.unwrap();
}

/// A PostgreSQL session holding a lock until it rolls back.
pub(crate) struct PgLock(sqlx::PgConnection);

impl PgLock {
    pub(crate) async fn take(url: &str, sql: &str) -> Self {
        let mut session = sqlx::PgConnection::connect(url).await.unwrap();
        sqlx::raw_sql(&format!("BEGIN; {sql}"))
            .execute(&mut session)
            .await
            .unwrap();
        Self(session)
    }

    pub(crate) async fn release(mut self) {
        sqlx::raw_sql("ROLLBACK")
            .execute(&mut self.0)
            .await
            .unwrap();
    }
}

/// An unknown id of the generated shape waits for a store read without its slot, and one
/// the read did not find is refused without taking a slot again: 401 `invalid_client` even
/// while every slot is taken meanwhile, never 503. On PostgreSQL: the read is held by a
/// lock on `revoked_tokens` (which a sync reads last), and the slot by a revocation held by
/// the revocation lock; the read must end within its 1 s wait (`UNKNOWN_READ_WAIT`), so a
/// round that a loaded machine made too slow is run again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_id_the_store_read_did_not_find_takes_no_slot_to_be_refused() {
    let db = tessera_store::testing::scratch_database().await;
    let app = spawn_with(|s| {
        s.database_url = Some(db.url.clone());
        s.config.max_in_flight = 1;
    })
    .await;
    let (id, secret) = app.client().await;
    let syncs = "tessera_registry_syncs_total{trigger=\"unknown_client\"}";
    let in_flight = "tessera_requests_in_flight ";
    for round in 1..=5 {
        // A later round comes after the unknown-read interval, with the store answering.
        app.clock.advance(Duration::from_secs(1));
        until("the store answers", || async {
            crate::limits::metric(&app, "tessera_store_up ").await == Some(1)
        })
        .await;
        let before = crate::limits::metric(&app, syncs).await.unwrap_or(0);
        let read_held = PgLock::take(
            &db.url,
            "LOCK TABLE revoked_tokens IN ACCESS EXCLUSIVE MODE",
        )
        .await;
        let revoke_held = PgLock::take(&db.url, "SELECT pg_advisory_xact_lock(7289504519)").await;
        let unknown = tessera_server::secrets::new_client_id();
        let refused = {
            let request = app
                .http
                .post(app.url("/connect/token"))
                .header(
                    "authorization",
                    basic(&unknown, &ClientSecret::new("wrong")),
                )
                .header("content-type", "application/x-www-form-urlencoded")
                .body(NEWS);
            tokio::spawn(async move { error_of(request.send().await.unwrap()).await })
        };
        until("the unknown id's store read began", || async {
            crate::limits::metric(&app, syncs).await.unwrap_or(0) > before
        })
        .await;
        // Its slot is free while it waits: a revocation takes it, and holds it.
        let holder = revocation(&app, &id, &secret).await;
        until("the revocation holds the slot", || async {
            crate::limits::metric(&app, in_flight).await == Some(1)
        })
        .await;
        let in_time = !refused.is_finished();
        read_held.release().await;
        let answer = refused.await.unwrap();
        revoke_held.release().await;
        holder.await.unwrap();
        if !in_time {
            continue;
        }
        assert_eq!(
            (answer.0, answer.1.as_str()),
            (401, "invalid_client"),
            "round {round}: {answer:?}"
        );
        return;
    }
    panic!("in none of 5 rounds did the store read end within its 1 s wait");
}
