//! SIGINT and SIGTERM while a request is in flight: the request completes, new connections
//! are refused, the process exits 0. The request is held in flight by SQLite's write lock,
//! taken by the test, which a revocation waits for before it answers.

use sqlx::{Connection, SqliteConnection};

use super::*;
use tessera_testkit::until;

async fn stops_after_the_request_in_flight(signal: &str) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(d, &["plan", "set", "pro", "--scopes", "news-api"]);
    let (id, secret) = create_client(d, "pro");
    let server = serve(d, &[]);
    let base = server.base.clone();
    let issued: serde_json::Value = token(&base, &id, &secret, "news-api")
        .await
        .json()
        .await
        .unwrap();
    let access_token = issued["access_token"].as_str().unwrap().to_owned();

    let mut lock =
        SqliteConnection::connect(&format!("sqlite://{}", d.join("tessera.db").display()))
            .await
            .unwrap();
    sqlx::query("BEGIN IMMEDIATE")
        .execute(&mut lock)
        .await
        .unwrap();
    let revocation = tokio::spawn({
        let (base, id, secret) = (base.clone(), id.clone(), secret.clone());
        async move {
            reqwest::Client::new()
                .post(format!("{base}/connect/revocation"))
                .basic_auth(&id, Some(&secret))
                .form(&[("token", access_token.as_str())])
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    });
    // Wait until the server works on it (and waits for the lock).
    until("the revocation in flight", || {
        let url = format!("{base}/metrics");
        async move {
            let text = reqwest::get(url).await.unwrap().text().await.unwrap();
            text.lines().any(|l| l == "tessera_requests_in_flight 1")
        }
    })
    .await;
    assert!(
        !revocation.is_finished(),
        "the revocation waits for the lock"
    );

    server.signal(signal);
    let addr = base.trim_start_matches("http://").to_owned();
    until("new connections refused", || {
        let addr = addr.clone();
        async move { tokio::net::TcpStream::connect(addr).await.is_err() }
    })
    .await;
    sqlx::query("ROLLBACK").execute(&mut lock).await.unwrap();
    assert_eq!(
        revocation.await.unwrap(),
        200,
        "the request in flight completes"
    );
    let exit = server.exited().await;
    assert!(exit.success(), "{signal}: {exit:?}");
}

#[tokio::test]
async fn sigterm_finishes_the_request_in_flight() {
    stops_after_the_request_in_flight("-TERM").await;
}

#[tokio::test]
async fn sigint_finishes_the_request_in_flight() {
    stops_after_the_request_in_flight("-INT").await;
}

/// A SIGTERM sent as soon as the server says it listens stops it cleanly: the handlers are
/// in place before that line. With `--demo` the signal lands during the demo's set-up, which
/// runs after the line; before the handlers were installed early, the default action killed
/// the process there (exit by signal, not 0).
#[tokio::test]
async fn sigterm_right_after_the_first_line_stops_cleanly() {
    for _ in 0..3 {
        let dir = tempfile::tempdir().unwrap();
        let server = serve(dir.path(), &["--demo"]);
        let status = server.terminate().await;
        assert!(status.success(), "{status:?}");
    }
}
