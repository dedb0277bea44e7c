//! Organizations (issue 28) over real HTTP, on SQLite and on PostgreSQL, with two
//! instances sharing the database: clients created in an organization take its plan; a
//! plan move and a disable made at one instance reach the other through its poll of the
//! store (the sync interval); tokens of an organization's clients carry `org_id`.

use serde_json::{json, Value};
use tessera_proto::{ClientId, ClientSecret};
use tessera_store::AuthMethod;

use tessera_testkit::*;

async fn admin(
    app: &TestApp,
    token: &str,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut request = app
        .http
        .request(method, app.url(&format!("/admin/v1{path}")))
        .bearer_auth(token);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// A token request's status and body.
async fn token_for(
    app: &TestApp,
    id: &ClientId,
    secret: &ClientSecret,
    scope: &str,
) -> (u16, Value) {
    let answer = app
        .token(
            id,
            secret,
            &format!("grant_type=client_credentials&scope={scope}"),
        )
        .await;
    let status = answer.status().as_u16();
    (status, answer.json().await.unwrap_or(Value::Null))
}

fn credentials(created: &Value) -> (ClientId, ClientSecret) {
    (
        ClientId::parse(created["client_id"].as_str().unwrap()).unwrap(),
        ClientSecret::new(created["client_secret"].as_str().unwrap().to_owned()),
    )
}

async fn organizations_share_a_plan_and_a_switch(database_url: Option<String>) {
    let a = spawn_with(|s| s.database_url.clone_from(&database_url)).await;
    let shared = a.db_url.clone();
    let b = spawn_with(|s| s.database_url = Some(shared)).await;
    a.registrar()
        .set_plan("basic", "news-api", None)
        .await
        .unwrap();
    let (_, token) = a.admin_token("tessera-admin").await;
    let post = reqwest::Method::POST;

    let (status, org) = admin(
        &a,
        &token,
        post.clone(),
        "/orgs",
        Some(json!({"id": "acme", "plan": "basic", "name": "Acme Trading"})),
    )
    .await;
    assert_eq!(status, 201, "{org}");
    assert_eq!(org["clients"], 0);

    // A plan of its own is refused to a client of an organization, as is an unknown one.
    let (status, problem) = admin(
        &a,
        &token,
        post.clone(),
        "/clients",
        Some(json!({"org": "acme", "plan": "pro"})),
    )
    .await;
    assert_eq!(
        (status, problem["field"].as_str()),
        (400, Some("plan")),
        "{problem}"
    );
    let (status, problem) = admin(
        &a,
        &token,
        post.clone(),
        "/clients",
        Some(json!({"org": "ghost"})),
    )
    .await;
    assert_eq!(
        (status, problem["field"].as_str()),
        (400, Some("org")),
        "{problem}"
    );

    let mut members = Vec::new();
    for name in ["app-1", "app-2"] {
        let (status, created) = admin(
            &a,
            &token,
            post.clone(),
            "/clients",
            Some(json!({"org": "acme", "name": name})),
        )
        .await;
        assert_eq!(status, 201, "{created}");
        assert_eq!(created["plan"], "basic");
        assert_eq!(created["org"], "acme");
        members.push(credentials(&created));
    }
    let (solo, solo_secret) = a.client_on("basic", AuthMethod::ClientSecretBasic).await;
    let (status, org) = admin(&a, &token, reqwest::Method::GET, "/orgs/acme", None).await;
    assert_eq!((status, org["clients"].as_u64()), (200, Some(2)));
    // Its plan is the organization's: a client's own move is refused.
    let (id, _) = &members[0];
    let (status, problem) = admin(
        &a,
        &token,
        reqwest::Method::PATCH,
        &format!("/clients/{id}"),
        Some(json!({"plan": "pro"})),
    )
    .await;
    assert_eq!(
        (status, problem["field"].as_str()),
        (400, Some("plan")),
        "{problem}"
    );

    // At the other instance: the organization's plan, and org_id in the token.
    for (id, secret) in &members {
        let (status, body) = token_for(&b, id, secret, "news-api").await;
        assert_eq!(status, 200, "{body}");
        let claims = claims_of(body["access_token"].as_str().unwrap());
        assert_eq!(claims["org_id"], "acme");
        assert_eq!(claims["plan"], "basic");
        let (status, body) = token_for(&b, id, secret, "market-data-api").await;
        assert_eq!(
            (status, body["error"].as_str()),
            (400, Some("invalid_scope"))
        );
    }
    let (status, body) = token_for(&b, &solo, &solo_secret, "news-api").await;
    assert_eq!(status, 200, "{body}");
    let claims = claims_of(body["access_token"].as_str().unwrap());
    assert!(claims.get("org_id").is_none(), "{claims}");

    // A plan move at one instance moves every client at the other at its next poll.
    let (status, moved) = admin(
        &a,
        &token,
        reqwest::Method::PATCH,
        "/orgs/acme",
        Some(json!({"plan": "pro"})),
    )
    .await;
    assert_eq!(
        (status, moved["plan"].as_str()),
        (200, Some("pro")),
        "{moved}"
    );
    for (id, secret) in &members {
        until("the plan move is seen by the other instance", || async {
            token_for(&b, id, secret, "market-data-api").await.0 == 200
        })
        .await;
    }

    // A disable refuses every client of the organization (invalid_client), no other.
    let (status, off) = admin(
        &a,
        &token,
        reqwest::Method::PATCH,
        "/orgs/acme",
        Some(json!({"enabled": false})),
    )
    .await;
    assert_eq!(
        (status, off["enabled"].as_bool()),
        (200, Some(false)),
        "{off}"
    );
    for (id, secret) in &members {
        until("the disable is seen by the other instance", || async {
            token_for(&b, id, secret, "news-api").await.0 == 401
        })
        .await;
        let (status, body) = token_for(&a, id, secret, "news-api").await;
        assert_eq!(
            (status, body["error"].as_str()),
            (401, Some("invalid_client"))
        );
    }
    assert_eq!(token_for(&b, &solo, &solo_secret, "news-api").await.0, 200);
    // A client's own flag stays its own: it reads enabled, its organization disabled.
    let (status, client) = admin(
        &a,
        &token,
        reqwest::Method::GET,
        &format!("/clients/{id}"),
        None,
    )
    .await;
    assert_eq!((status, client["enabled"].as_bool()), (200, Some(true)));
    let (status, _) = admin(
        &a,
        &token,
        reqwest::Method::PATCH,
        "/orgs/acme",
        Some(json!({"enabled": true})),
    )
    .await;
    assert_eq!(status, 200);
    for (id, secret) in &members {
        until("the enable is seen by the other instance", || async {
            token_for(&b, id, secret, "news-api").await.0 == 200
        })
        .await;
    }

    // Deleting: refused while it has clients (nothing deleted), then with them.
    let (status, problem) = admin(&a, &token, reqwest::Method::DELETE, "/orgs/acme", None).await;
    assert_eq!(status, 409, "{problem}");
    assert_eq!(a.store.org_clients("acme").await.unwrap().len(), 2);
    let (status, problem) = admin(
        &a,
        &token,
        reqwest::Method::DELETE,
        "/orgs/acme?with_clients=maybe",
        None,
    )
    .await;
    assert_eq!(status, 400, "{problem}");
    let (status, _) = admin(
        &a,
        &token,
        reqwest::Method::DELETE,
        "/orgs/acme?with_clients=true",
        None,
    )
    .await;
    assert_eq!(status, 204);
    assert!(a.store.org("acme").await.unwrap().is_none());
    for (id, secret) in &members {
        assert!(a.store.client(id).await.unwrap().is_none());
        assert_eq!(token_for(&a, id, secret, "news-api").await.0, 401);
    }
    let (status, _) = admin(&a, &token, reqwest::Method::GET, "/orgs/acme", None).await;
    assert_eq!(status, 404);
    assert_eq!(token_for(&a, &solo, &solo_secret, "news-api").await.0, 200);
}

#[tokio::test]
async fn organizations_on_sqlite() {
    organizations_share_a_plan_and_a_switch(None).await;
}

#[tokio::test]
async fn organizations_on_postgres() {
    let schema = tessera_store::testing::scratch_postgres().await;
    organizations_share_a_plan_and_a_switch(Some(schema.url.clone())).await;
}

/// The organization endpoints refuse bad input with problem documents and write nothing.
#[tokio::test]
async fn org_endpoints_refuse_bad_input() {
    let app = spawn_app().await;
    let (_, token) = app.admin_token("tessera-admin").await;
    let (_, read_only) = app.admin_token("tessera-admin-read").await;
    let post = reqwest::Method::POST;
    for (body, field) in [
        (json!({"id": "no spaces", "plan": "pro"}), Some("id")),
        (json!({"id": "acme", "plan": "nope"}), Some("plan")),
        (
            json!({"id": "acme", "plan": "pro", "name": "a\u{7}b"}),
            Some("name"),
        ),
        (json!({"id": "acme", "plan": "pro", "extra": 1}), None),
        (json!({"plan": "pro"}), None),
    ] {
        let (status, problem) = admin(&app, &token, post.clone(), "/orgs", Some(body)).await;
        assert_eq!(status, 400, "{problem}");
        if field.is_some() {
            assert_eq!(problem["field"].as_str(), field, "{problem}");
        }
    }
    assert!(app.store.orgs().await.unwrap().is_empty());
    let (status, _) = admin(
        &app,
        &read_only,
        post.clone(),
        "/orgs",
        Some(json!({"id": "acme", "plan": "pro"})),
    )
    .await;
    assert_eq!(status, 403);
    let (status, _) = admin(
        &app,
        &token,
        post.clone(),
        "/orgs",
        Some(json!({"id": "acme", "plan": "pro"})),
    )
    .await;
    assert_eq!(status, 201);
    let (status, _) = admin(
        &app,
        &token,
        post,
        "/orgs",
        Some(json!({"id": "acme", "plan": "pro"})),
    )
    .await;
    assert_eq!(status, 409);
    let (status, list) = admin(&app, &read_only, reqwest::Method::GET, "/orgs", None).await;
    assert_eq!(
        (status, list["orgs"][0]["id"].as_str()),
        (200, Some("acme"))
    );
    let (status, _) = admin(
        &app,
        &token,
        reqwest::Method::PATCH,
        "/orgs/acme",
        Some(json!({"plan": "nope"})),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(app.store.org("acme").await.unwrap().unwrap().plan, "pro");
    let (status, _) = admin(
        &app,
        &token,
        reqwest::Method::PATCH,
        "/orgs/ghost",
        Some(json!({"enabled": false})),
    )
    .await;
    assert_eq!(status, 404);
}

/// Limits per organization (`limit_per: org`): the organization's clients share one token
/// rate, so a second client adds no allowance; a client of no organization on the same plan
/// keeps its own; back to per client, each has its own again. The API limits document says
/// so to the APIs.
#[tokio::test]
async fn limits_per_org_are_shared_by_its_clients() {
    use tessera_server::registrar::{ApiLimitsChange, Change, PlanSettings};
    use tessera_store::{ApiLimit, LimitPer, RateLimit};
    let app = spawn_app().await;
    let rate = RateLimit {
        count: 2,
        period_secs: 3600,
        burst: 2,
    };
    let api = ApiLimit {
        rate: Some(rate),
        quota: None,
    };
    let shared = PlanSettings {
        token_rate: Change::Set(rate),
        limit_per: Some(LimitPer::Org),
        api_limits: ApiLimitsChange::Replace([("news-api".to_owned(), api)].into()),
        ..PlanSettings::default()
    };
    app.registrar()
        .set_plan_with("shared", "news-api", &shared)
        .await
        .unwrap();
    app.registrar()
        .create_org("acme", "", "shared")
        .await
        .unwrap();
    let (_, token) = app.admin_token("tessera-admin").await;
    let mut members = Vec::new();
    for _ in 0..2 {
        let (status, created) = admin(
            &app,
            &token,
            reqwest::Method::POST,
            "/clients",
            Some(json!({"org": "acme"})),
        )
        .await;
        assert_eq!(status, 201, "{created}");
        members.push(credentials(&created));
    }
    let (solo, solo_secret) = app.client_on("shared", AuthMethod::ClientSecretBasic).await;
    let (plan_status, plan) =
        admin(&app, &token, reqwest::Method::GET, "/plans/shared", None).await;
    assert_eq!(
        (plan_status, plan["limit_per"].as_str()),
        (200, Some("org")),
        "{plan}"
    );
    let document: Value = app
        .http
        .get(app.url("/api-limits/news-api"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(document["plans"]["shared"]["per_org"], true, "{document}");

    let (first, first_secret) = &members[0];
    let (second, second_secret) = &members[1];
    for _ in 0..2 {
        assert_eq!(
            token_for(&app, first, first_secret, "news-api").await.0,
            200
        );
    }
    assert_ne!(
        token_for(&app, first, first_secret, "news-api").await.0,
        200
    );
    // The second client of the organization finds the allowance spent.
    let (status, body) = token_for(&app, second, second_secret, "news-api").await;
    assert_ne!(status, 200, "{body}");
    // A client of no organization on the same plan has its own.
    for _ in 0..2 {
        assert_eq!(
            token_for(&app, &solo, &solo_secret, "news-api").await.0,
            200
        );
    }

    // Per client again: the second client has an allowance of its own.
    let per_client = PlanSettings {
        limit_per: Some(LimitPer::Client),
        ..PlanSettings::default()
    };
    app.registrar()
        .set_plan_with("shared", "news-api", &per_client)
        .await
        .unwrap();
    app.sync().await;
    assert_eq!(
        token_for(&app, second, second_secret, "news-api").await.0,
        200
    );
}

/// Limits per organization across instances sharing Redis: two clients of one organization,
/// each asking at another instance, spend one allowance between them.
#[tokio::test]
async fn an_organizations_allowance_is_one_across_instances_with_redis() {
    use tessera_server::registrar::{Change, PlanSettings};
    use tessera_store::{LimitPer, RateLimit};
    let schema = tessera_store::testing::scratch_postgres().await;
    let redis = tessera_testkit::redis_url();
    let prefix = tessera_testkit::unique_redis_prefix("orgs");
    let shared = |s: &mut Setup| {
        s.database_url = Some(schema.url.clone());
        s.config.issuer = Some("https://auth.orgs.test".into());
        s.config.redis_url = Some(redis.clone());
        s.config.redis_prefix = prefix.clone();
    };
    let a = spawn_with(shared).await;
    let b = spawn_with(shared).await;
    let settings = PlanSettings {
        token_rate: Change::Set(RateLimit::parse("2/min").unwrap()),
        limit_per: Some(LimitPer::Org),
        ..PlanSettings::default()
    };
    a.registrar()
        .set_plan_with("metered", "news-api", &settings)
        .await
        .unwrap();
    a.registrar()
        .create_org("acme", "", "metered")
        .await
        .unwrap();
    let placement = a.registrar().placement("", Some("acme")).await.unwrap();
    let mut members = Vec::new();
    for _ in 0..2 {
        let (mut client, secret) = a.registrar().new_client(
            &a.secrets,
            &placement.plan,
            "m",
            AuthMethod::ClientSecretBasic,
        );
        placement.apply(&mut client);
        a.store.insert_client(&client).await.unwrap();
        members.push((client.id, secret));
    }
    a.sync().await;
    b.sync().await;
    let (first, first_secret) = &members[0];
    let (second, second_secret) = &members[1];
    assert_eq!(token_for(&a, first, first_secret, "news-api").await.0, 200);
    assert_eq!(
        token_for(&b, second, second_secret, "news-api").await.0,
        200
    );
    for (app, (id, secret)) in [(&a, &members[1]), (&b, &members[0])] {
        assert_eq!(token_for(app, id, secret, "news-api").await.0, 429);
    }
}
