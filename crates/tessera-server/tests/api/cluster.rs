//! Several stateless instances sharing one PostgreSQL database behave as one server.

use tessera_server::registrar;
use tessera_store::AuthMethod;

use tessera_testkit::*;

const NEWS: &str = "grant_type=client_credentials&scope=news-api";

#[tokio::test]
async fn instances_sharing_postgres_share_clients_keys_and_revocations() {
    let schema = tessera_store::testing::scratch_postgres().await;
    let issuer = "https://auth.cluster.test";
    let a = spawn_with(|s| {
        s.database_url = Some(schema.url.clone());
        s.config.issuer = Some(issuer.into());
    })
    .await;
    let b = spawn_with(|s| {
        s.database_url = Some(schema.url.clone());
        s.config.issuer = Some(issuer.into());
    })
    .await;

    // A client registered through one instance's store (as the CLI would) works at both.
    let (client, secret) = a
        .registrar()
        .create_client(&a.secrets, "pro", "shared", AuthMethod::ClientSecretBasic)
        .await
        .unwrap();
    a.state.sync().await.unwrap();
    b.state.sync().await.unwrap();
    let from_a: serde_json::Value = a
        .token(&client.id, &secret, NEWS)
        .await
        .json()
        .await
        .unwrap();
    let from_b: serde_json::Value = b
        .token(&client.id, &secret, NEWS)
        .await
        .json()
        .await
        .unwrap();
    let (token_a, token_b) = (
        from_a["access_token"].as_str().unwrap(),
        from_b["access_token"].as_str().unwrap(),
    );

    // One key set: both publish the same keys, and each verifies the other's tokens.
    let jwks = |app: &TestApp| {
        let url = app.url("/.well-known/jwks.json");
        let http = app.http.clone();
        async move { http.get(url).send().await.unwrap().text().await.unwrap() }
    };
    assert_eq!(jwks(&a).await, jwks(&b).await);
    let introspect = |app: &TestApp, token: &str| {
        let request = app
            .http
            .post(app.url("/connect/introspect"))
            .header("authorization", basic(&client.id, &secret))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!("token={token}"));
        async move {
            request
                .send()
                .await
                .unwrap()
                .json::<serde_json::Value>()
                .await
                .unwrap()
        }
    };
    assert_eq!(introspect(&b, token_a).await["active"], true);
    assert_eq!(introspect(&a, token_b).await["active"], true);

    // A revocation at one instance reaches the other through the database.
    let revoked = a
        .http
        .post(a.url("/connect/revocation"))
        .header("authorization", basic(&client.id, &secret))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={token_a}"))
        .send()
        .await
        .unwrap();
    assert_eq!(revoked.status(), 200);
    // It arrives with the other instance's next poll of the database (every 100 ms of
    // real time): an event waited for, with the test kit's loose bound, not a deadline.
    until("the revocation is seen by the other instance", || async {
        introspect(&b, token_a).await["active"] == false
    })
    .await;

    // Disabling the client through the database stops both instances.
    b.registrar()
        .update_client(client.id.as_str(), |c| c.enabled = false)
        .await
        .unwrap();
    a.state.sync().await.unwrap();
    b.state.sync().await.unwrap();
    assert_eq!(a.token(&client.id, &secret, NEWS).await.status(), 401);
    assert_eq!(b.token(&client.id, &secret, NEWS).await.status(), 401);
}

#[tokio::test]
async fn instances_sharing_redis_share_each_clients_rate_limit() {
    let schema = tessera_store::testing::scratch_postgres().await;
    let redis = tessera_testkit::redis_url();
    // A prefix of this test's own, so runs and tests never share counts.
    let prefix = tessera_testkit::unique_redis_prefix("cluster");
    let shared = |s: &mut Setup| {
        s.database_url = Some(schema.url.clone());
        s.config.issuer = Some("https://auth.cluster.test".into());
        s.config.redis_url = Some(redis.clone());
        s.config.redis_prefix = prefix.clone();
    };
    let a = spawn_with(shared).await;
    let b = spawn_with(shared).await;
    let settings = registrar::PlanSettings {
        token_rate: tessera_server::registrar::Change::Set(
            tessera_store::RateLimit::parse("2/min").unwrap(),
        ),
        ..Default::default()
    };
    a.registrar()
        .set_plan_with("metered", "news-api", &settings)
        .await
        .unwrap();
    let (client, secret) = a
        .registrar()
        .create_client(
            &a.secrets,
            "metered",
            "shared",
            AuthMethod::ClientSecretBasic,
        )
        .await
        .unwrap();
    a.state.sync().await.unwrap();
    b.state.sync().await.unwrap();

    // Two requests, one at each instance, use up the allowance of both.
    let first = a.token(&client.id, &secret, NEWS).await;
    assert_eq!(first.status(), 200);
    assert_eq!(
        first.headers()["ratelimit"]
            .to_str()
            .unwrap()
            .split(';')
            .nth(1),
        Some("r=1")
    );
    assert_eq!(b.token(&client.id, &secret, NEWS).await.status(), 200);
    for app in [&a, &b] {
        let limited = app.token(&client.id, &secret, NEWS).await;
        assert_eq!(limited.status(), 429);
        let retry: u64 = limited.headers()["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!((1..=30).contains(&retry), "{retry}");
    }
}
