//! Requests held in flight for real: a test takes SQLite's write lock, so that a revocation
//! (which writes before it answers) waits inside its handler, holding its slot, until the
//! test lets go. No sleeps: each step waits for the event it needs, with a generous bound.

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

    async fn release(mut self) {
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
