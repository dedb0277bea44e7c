//! Issue 24 item 3 at the admin API, on PostgreSQL in a scratch database of its own (the
//! registry's lock is the database's, shared by every schema in it): a write behind a
//! stuck writer is answered 503 with `Retry-After` once it gave up waiting, not held for as
//! long as that writer lives; and a write that commits after the request timeout is
//! answered with its success, not with 408.

use std::time::Duration;

use reqwest::{Method, Response};
use serde_json::{json, Value};
use sqlx::{Connection, PgConnection};
use tessera_testkit::*;

const NEWS: &str = "grant_type=client_credentials&scope=news-api";

/// A bound on an answer that must come once the write gives up: far above the store's
/// lock timeout (3 s), so that it only catches a request that waits as long as the lock is
/// held.
const NOT_FOREVER: Duration = Duration::from_secs(30);

/// An admin API request with `token`, a JSON `body` and, for a create, an
/// `Idempotency-Key`; its answer, which must come.
async fn admin(app: &TestApp, method: Method, path: &str, token: &str, body: Value) -> Response {
    let request = app
        .http
        .request(method, app.url(&format!("/admin/v1{path}")))
        .bearer_auth(token)
        .header("idempotency-key", "k-behind-the-stuck-one")
        .json(&body)
        .send();
    tokio::time::timeout(NOT_FOREVER, request)
        .await
        .expect("an answer instead of a wait for the stuck writer")
        .unwrap()
}

/// A session whose registry write took the registry's lock and then went quiet (its client
/// partitioned away mid-transaction: idle in transaction), holding it until released.
struct StuckWriter(PgConnection);

impl StuckWriter {
    async fn start(url: &str) -> Self {
        let mut session = PgConnection::connect(url).await.unwrap();
        sqlx::raw_sql("BEGIN; UPDATE plans SET updated_at = updated_at WHERE name = 'pro'")
            .execute(&mut session)
            .await
            .unwrap();
        Self(session)
    }

    /// Rolls its write back, releasing the locks.
    async fn release(mut self) {
        sqlx::raw_sql("ROLLBACK")
            .execute(&mut self.0)
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_behind_a_stuck_writer_is_503_with_retry_after_instead_of_a_wait() {
    let db = tessera_store::testing::scratch_database().await;
    let app = spawn_with(|s| s.database_url = Some(db.url.clone())).await;
    let (_, token) = app.admin_token("tessera-admin").await;
    let (id, secret) = app.client().await;
    let stuck = StuckWriter::start(&db.url).await;

    // A disable, a create and a key rotation, each behind the stuck writer (the key is the
    // create's, ignored by the others).
    let path = format!("/clients/{id}");
    let (disable, create, rotate) = tokio::join!(
        admin(
            &app,
            Method::PATCH,
            &path,
            &token,
            json!({"enabled": false})
        ),
        admin(
            &app,
            Method::POST,
            "/clients",
            &token,
            json!({"plan": "pro"})
        ),
        admin(&app, Method::POST, "/keys/rotate", &token, json!({})),
    );
    for answer in [disable, create, rotate] {
        assert_eq!(answer.status(), 503);
        // RFC 9110 section 10.2.3: as long as the write waited.
        assert_eq!(answer.headers()["retry-after"], "3");
        assert_eq!(answer.headers()["content-type"], "application/problem+json");
        let body: Value = answer.json().await.unwrap();
        assert_eq!(body["type"], "urn:tessera:problem:unavailable");
        assert_eq!(body["status"], 503);
        let detail = body["detail"].as_str().unwrap();
        assert!(
            detail.contains("waited 3 s for a lock another database session holds")
                && detail.contains("idle in transaction")
                && detail.contains("nothing was written"),
            "{detail}"
        );
    }
    // Tokens go on, the instance stays ready, and nothing was written.
    assert_eq!(app.token(&id, &secret, NEWS).await.status(), 200);
    let ready = app.http.get(app.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 200);
    assert!(app.store.client(&id).await.unwrap().unwrap().enabled);
    assert_eq!(app.store.clients().await.unwrap().len(), 2, "admin and id");

    // The stuck session is gone: the same writes go through, the create under the same
    // Idempotency-Key (the refused one left nothing to replay).
    stuck.release().await;
    let disabled = admin(
        &app,
        Method::PATCH,
        &path,
        &token,
        json!({"enabled": false}),
    )
    .await;
    assert_eq!(disabled.status(), 200);
    assert_eq!(app.token(&id, &secret, NEWS).await.status(), 401);
    let created = admin(
        &app,
        Method::POST,
        "/clients",
        &token,
        json!({"plan": "pro"}),
    )
    .await;
    assert_eq!(created.status(), 201);
    assert!(created.headers().get("idempotent-replayed").is_none());
    let rotated = admin(&app, Method::POST, "/keys/rotate", &token, json!({})).await;
    assert_eq!(rotated.status(), 201);
}

/// The fault on main: a create that waited 7 s for the lock committed, and was answered
/// 408 at the 10 s request timeout, its secret lost. Here the request timeout is 500 ms and
/// the write waits for the test's stuck writer: the timeout passes with the write in
/// flight (the server logs it), no answer comes, and once the writer is gone the write
/// commits and the answer is its 201, with a secret that works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_that_commits_after_the_request_timeout_is_answered_with_its_success() {
    let db = tessera_store::testing::scratch_database().await;
    let app = spawn_with(|s| {
        s.database_url = Some(db.url.clone());
        s.config.request_timeout = Duration::from_millis(500);
    })
    .await;
    let (_, token) = app.admin_token("tessera-admin").await;
    let stuck = StuckWriter::start(&db.url).await;

    let sent = std::time::Instant::now();
    let create = tokio::spawn({
        let request = app
            .http
            .post(app.url("/admin/v1/clients"))
            .bearer_auth(&token)
            .header("idempotency-key", "k-late")
            .json(&json!({"plan": "pro", "name": "late"}));
        async move {
            let answer = request.send().await.unwrap();
            let status = answer.status().as_u16();
            (status, answer.text().await.unwrap())
        }
    });
    until(
        "the request timeout passed with the write in flight",
        || async {
            // The log is the whole process's and names no request: the time makes sure
            // that this request, whichever server logged the line, is past its timeout.
            create.is_finished()
                || (sent.elapsed() >= Duration::from_millis(500)
                    && app.log().contains("while its store write was in flight"))
        },
    )
    .await;
    assert!(
        !create.is_finished(),
        "answered while its write was waiting: {:?}",
        create.await
    );

    stuck.release().await;
    let (status, body) = create.await.unwrap();
    assert_eq!(status, 201, "{body}");
    let created: Value = serde_json::from_str(&body).unwrap();
    let id = tessera_proto::ClientId::parse(created["client_id"].as_str().unwrap()).unwrap();
    let secret = tessera_proto::ClientSecret::new(created["client_secret"].as_str().unwrap());
    assert_eq!(app.token(&id, &secret, NEWS).await.status(), 200);
}
