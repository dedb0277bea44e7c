//! A full disk under the SQLite store, played with a small tmpfs that the test fills: tokens
//! are still issued; every write fails with a 503 and creates nothing; the failure shows in
//! `/readyz`, in `/metrics` and in one log line; usage counts wait in memory under their day;
//! and once space returns, writes work again without a restart and the counts arrive.

use std::time::Duration;

use reqwest::{Method, RequestBuilder, Response};
use serde_json::{json, Value};
use tessera_proto::{ClientId, ClientSecret};
use tessera_store::testing::SmallDisk;
use tessera_testkit::*;

const NEWS: &str = "grant_type=client_credentials&scope=news-api";

fn call(app: &TestApp, method: Method, path: &str, token: &str) -> RequestBuilder {
    app.http
        .request(method, app.url(&format!("/admin/v1{path}")))
        .bearer_auth(token)
}

/// An admin write refused because the store failed: 503, a problem document, Retry-After.
async fn refused_by_the_store(response: Response, what: &str) {
    assert_eq!(response.status(), 503, "{what}");
    assert_eq!(response.headers()["retry-after"], "1", "{what}");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["type"], "urn:tessera:problem:unavailable", "{what}");
}

async fn access_token(app: &TestApp, id: &ClientId, secret: &ClientSecret) -> String {
    let answer = app.token(id, secret, NEWS).await;
    assert_eq!(answer.status(), 200, "tokens are issued whatever the disk");
    let body: Value = answer.json().await.unwrap();
    body["access_token"].as_str().unwrap().to_owned()
}

async fn revoke(app: &TestApp, id: &ClientId, secret: &ClientSecret, token: &str) -> Response {
    app.http
        .post(app.url("/connect/revocation"))
        .header("authorization", basic(id, secret))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={token}"))
        .send()
        .await
        .unwrap()
}

fn create(app: &TestApp, admin: &str, name: &str, key: Option<&str>) -> RequestBuilder {
    let request = call(app, Method::POST, "/clients", admin).json(&json!({
        "plan": "pro",
        "name": name,
    }));
    match key {
        Some(key) => request.header("idempotency-key", key),
        None => request,
    }
}

async fn metric(app: &TestApp, name: &str) -> Option<u64> {
    let text = app.metrics().await;
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .map(|v| v.parse().unwrap())
}

async fn readyz(app: &TestApp) -> (u16, String) {
    let answer = app.http.get(app.url("/readyz")).send().await.unwrap();
    (answer.status().as_u16(), answer.text().await.unwrap())
}

#[tokio::test]
async fn a_full_disk_refuses_every_write_visibly_keeps_usage_and_recovers_by_itself() {
    let Some(disk) = SmallDisk::mount("2m") else {
        return;
    };
    let url = format!("sqlite://{}", disk.path.join("tessera.db").display());
    let app = spawn_with(|s| {
        s.database_url = Some(url.clone());
        // The test runs each round itself.
        s.config.housekeeping_interval = Duration::from_secs(3600);
    })
    .await;
    let (_, admin) = app.admin_token("tessera-admin").await;
    let (id, secret) = app.client().await;
    let day_one = tessera_server::usage::utc_day(app.clock.now());
    // Counts from the setup written; the log file emptied, so that each write must grow it.
    app.state.housekeeping().await;
    assert!(app.store.checkpoint().await.unwrap());
    assert_eq!(metric(&app, "tessera_store_writable").await, Some(1));
    assert_eq!(
        metric(&app, "tessera_store_write_errors_total").await,
        Some(0)
    );

    disk.fill();
    let mut day_one_tokens = Vec::new();
    for _ in 0..3 {
        day_one_tokens.push(access_token(&app, &id, &secret).await);
    }
    // The usage flush fails; the counts are kept.
    app.state.housekeeping().await;
    assert_eq!(metric(&app, "tessera_store_writable").await, Some(0));
    assert!(metric(&app, "tessera_store_write_errors_total").await >= Some(1));
    let (status, body) = readyz(&app).await;
    assert_eq!(status, 200, "tokens are still issued: {body}");
    assert!(
        body.starts_with("ready\nstore writes failing for "),
        "{body}"
    );

    // Every write path: a 503, never a 201 for what is not there.
    for key in [None, Some("first-try"), None] {
        let answer = create(&app, &admin, "during-outage", key)
            .send()
            .await
            .unwrap();
        refused_by_the_store(answer, "client create").await;
    }
    let rotate_secret = call(
        &app,
        Method::POST,
        &format!("/clients/{id}/rotate-secret"),
        &admin,
    )
    .send()
    .await
    .unwrap();
    refused_by_the_store(rotate_secret, "secret rotation").await;
    let rotate_keys = call(&app, Method::POST, "/keys/rotate", &admin)
        .send()
        .await
        .unwrap();
    refused_by_the_store(rotate_keys, "key rotation").await;
    let refused = revoke(&app, &id, &secret, &day_one_tokens[0]).await;
    assert_eq!(refused.headers()["retry-after"], "5");
    let (status, error, _) = error_of(refused).await;
    assert_eq!((status, error.as_str()), (503, "temporarily_unavailable"));

    // Midnight passes during the outage: the counts keep their days.
    app.clock.advance(Duration::from_secs(86_400));
    // Reads still work: the registry is fresh at the new time.
    app.sync().await;
    let day_two = tessera_server::usage::utc_day(app.clock.now());
    let day_two_token = access_token(&app, &id, &secret).await;
    access_token(&app, &id, &secret).await;
    app.state.housekeeping().await;
    assert_eq!(metric(&app, "tessera_store_writable").await, Some(0));

    // Space returns. No restart: another connection writes at once (the server holds no
    // write lock), and the server's next round writes the kept counts and sees writes work.
    disk.free();
    let other = tessera_store::open_existing(&url).await.unwrap();
    other
        .check_value("another process", b"writes")
        .await
        .unwrap();
    app.state.housekeeping().await;
    assert_eq!(metric(&app, "tessera_store_writable").await, Some(1));
    let (status, body) = readyz(&app).await;
    assert_eq!((status, body.as_str()), (200, "ready\n"));
    let usage: Vec<(String, u64)> = other
        .usage(&id)
        .await
        .unwrap()
        .into_iter()
        .map(|u| (u.day, u.issued))
        .collect();
    assert_eq!(usage, [(day_one.clone(), 3), (day_two.clone(), 2)]);

    // Nothing of the refused writes was stored, as another connection sees it.
    let clients = other.clients().await.unwrap();
    assert!(
        clients.iter().all(|c| c.label != "during-outage"),
        "{clients:?}"
    );
    assert_eq!(other.keys().await.unwrap().len(), 1);
    // And every write works again: the admin token of day one has expired, so a new one.
    let (_, admin) = app.admin_token("tessera-admin").await;
    let created = create(&app, &admin, "after-outage", Some("first-try"))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    assert!(created.headers().get("idempotent-replayed").is_none());
    let created: Value = created.json().await.unwrap();
    let new_id = ClientId::parse(created["client_id"].as_str().unwrap()).unwrap();
    assert!(other.client(&new_id).await.unwrap().is_some());
    let new_secret = ClientSecret::new(created["client_secret"].as_str().unwrap().to_owned());
    access_token(&app, &new_id, &new_secret).await;
    let rotated = call(
        &app,
        Method::POST,
        &format!("/clients/{id}/rotate-secret"),
        &admin,
    )
    .send()
    .await
    .unwrap();
    assert_eq!(rotated.status(), 200);
    let rotated: Value = rotated.json().await.unwrap();
    let secret = ClientSecret::new(rotated["client_secret"].as_str().unwrap().to_owned());
    let rotate_keys = call(&app, Method::POST, "/keys/rotate", &admin)
        .send()
        .await
        .unwrap();
    assert_eq!(rotate_keys.status(), 201);
    assert_eq!(other.keys().await.unwrap().len(), 2);
    assert_eq!(
        revoke(&app, &id, &secret, &day_two_token).await.status(),
        200
    );

    // One episode, logged once: the first failure and the recovery, each naming this
    // server's store (the log is the process's: other tests' stores have other paths).
    let log = app.log();
    let ours = |message: &str| -> Vec<&str> {
        log.lines()
            .filter(|l| l.contains(message) && l.contains(&url))
            .collect()
    };
    let refused = ours("the store refuses writes");
    assert_eq!(refused.len(), 1, "{log}");
    assert!(refused[0].contains("disk is full"), "{log}");
    assert_eq!(ours("the store takes writes again").len(), 1, "{log}");
}
