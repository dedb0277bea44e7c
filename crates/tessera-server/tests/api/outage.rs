//! A database outage, played with a proxy in front of the shared PostgreSQL that the test
//! cuts off and restores: the instance keeps issuing from its last good registry within the
//! staleness bound, says so in its metrics, answers writes with a prompt 503, and recovers
//! without a restart.

use std::time::{Duration, Instant};

use tessera_testkit::*;

const NEWS: &str = "grant_type=client_credentials&scope=news-api";

async fn store_up(app: &TestApp) -> bool {
    app.metrics()
        .await
        .lines()
        .any(|l| l == "tessera_store_up 1")
}

async fn revoke(
    app: &TestApp,
    id: &tessera_proto::ClientId,
    secret: &tessera_proto::ClientSecret,
    token: &str,
) -> reqwest::Response {
    app.http
        .post(app.url("/connect/revocation"))
        .header("authorization", basic(id, secret))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={token}"))
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_database_outage_is_ridden_out_within_the_staleness_bound() {
    let schema = tessera_store::testing::scratch_postgres().await;
    let real: std::net::SocketAddr = "127.0.0.1:5432".parse().unwrap();
    let proxy = CuttableProxy::to(real).await;
    let url = schema
        .url
        .replace("127.0.0.1:5432", &proxy.addr.to_string());
    assert_ne!(url, schema.url, "the test database is at 127.0.0.1:5432");
    let app = spawn_with(|s| {
        s.database_url = Some(url);
        s.config.sync_interval = Duration::from_millis(100);
    })
    .await;
    let (id, secret) = app.client().await;
    assert_eq!(app.token(&id, &secret, NEWS).await.status(), 200);

    proxy.cut();
    until("the outage seen", || async { !store_up(&app).await }).await;
    // Still issuing, still ready: one database down is not the whole fleet down.
    let issued: serde_json::Value = app.token(&id, &secret, NEWS).await.json().await.unwrap();
    let access_token = issued["access_token"].as_str().unwrap().to_owned();
    let ready = app.http.get(app.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 200);
    // A write needs the database: a prompt 503 with Retry-After (RFC 7009 2.2.1).
    let started = Instant::now();
    let refused = revoke(&app, &id, &secret, &access_token).await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(refused.headers()["retry-after"], "5");
    let (status, error, _) = error_of(refused).await;
    assert_eq!((status, error.as_str()), (503, "temporarily_unavailable"));

    // Past the staleness bound: the token endpoint and readiness say 503.
    app.clock.advance(Duration::from_secs(301));
    assert_eq!(app.token(&id, &secret, NEWS).await.status(), 503);
    let ready = app.http.get(app.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 503);

    // The database is back: fresh again, issuing and recording, without a restart.
    proxy.restore();
    until("the store answers again", || async { store_up(&app).await }).await;
    assert_eq!(app.token(&id, &secret, NEWS).await.status(), 200);
    let ready = app.http.get(app.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 200);
    assert_eq!(
        revoke(&app, &id, &secret, &access_token).await.status(),
        200
    );
    drop(schema);
}
