//! An organization's own admin (issue 28 items 5 and 6), over real HTTP, on SQLite and on
//! PostgreSQL: a client of organization `acme` whose plan grants `tessera-org-admin`
//! manages acme's clients and reads acme's usage, and each change it makes is an audit
//! event naming it, the organization and the client. Then tenant isolation, as an attacker
//! would try it: acme's admin against every admin API operation with the ids of another
//! customer, `beta`, in paths, bodies, query strings, cursors and idempotency keys. Each
//! answer is compared with the answer for ids that do not exist (the same status and the
//! same body, but for the id sent), so that nothing tells beta's ids from made-up ones, and
//! the database is compared before and after: nothing changed.

use reqwest::Method;
use serde_json::{json, Value};
use tessera_proto::{ClientId, ClientSecret};
use tessera_store::AuditQuery;

use tessera_testkit::*;

/// A request to the admin API with `token`: its status, its headers and its body as text.
async fn send(
    app: &TestApp,
    token: &str,
    method: Method,
    path: &str,
    body: Option<&Value>,
    idempotency_key: Option<&str>,
) -> (u16, reqwest::header::HeaderMap, String) {
    let mut request = app
        .http
        .request(method, app.url(&format!("/admin/v1{path}")))
        .bearer_auth(token);
    if let Some(body) = body {
        request = request.json(body);
    }
    if let Some(key) = idempotency_key {
        request = request.header("idempotency-key", key);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    (status, headers, response.text().await.unwrap())
}

/// [`send`] without a key, its body as JSON (null when it is none).
async fn call(
    app: &TestApp,
    token: &str,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let (status, _, text) = send(app, token, method, path, body.as_ref(), None).await;
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// An access token for `scope`, or a panic.
async fn token_of(app: &TestApp, id: &ClientId, secret: &ClientSecret, scope: &str) -> String {
    let answer = app
        .token(
            id,
            secret,
            &format!("grant_type=client_credentials&scope={scope}"),
        )
        .await;
    assert_eq!(answer.status(), 200, "a token for {scope}");
    let body: Value = answer.json().await.unwrap();
    body["access_token"].as_str().unwrap().to_owned()
}

/// The status of a token request for `news-api`.
async fn news_token_status(app: &TestApp, id: &ClientId, secret: &ClientSecret) -> u16 {
    app.token(id, secret, "grant_type=client_credentials&scope=news-api")
        .await
        .status()
        .as_u16()
}

fn credentials(created: &Value) -> (ClientId, ClientSecret) {
    (
        ClientId::parse(created["client_id"].as_str().unwrap()).unwrap(),
        ClientSecret::new(created["client_secret"].as_str().unwrap().to_owned()),
    )
}

/// Two customers on the plan `portal` (`news-api tessera-org-admin`), each with an admin
/// client and an application, and the provider's admin token.
struct Tenants {
    app: TestApp,
    provider: String,
    /// acme's admin: its client and a `tessera-org-admin` token.
    acme_admin: (ClientId, ClientSecret),
    acme_token: String,
    acme_app: (ClientId, ClientSecret),
    /// beta's admin and application.
    beta_admin: (ClientId, ClientSecret),
    beta_app: (ClientId, ClientSecret),
}

async fn tenants(database_url: Option<String>) -> Tenants {
    let app = spawn_with(|s| s.database_url.clone_from(&database_url)).await;
    app.registrar()
        .set_plan("portal", "news-api tessera-org-admin", None)
        .await
        .unwrap();
    let (_, provider) = app.admin_token("tessera-admin").await;
    let mut made = Vec::new();
    for org in ["acme", "beta"] {
        let (status, body) = call(
            &app,
            &provider,
            Method::POST,
            "/orgs",
            Some(json!({"id": org, "plan": "portal"})),
        )
        .await;
        assert_eq!(status, 201, "{body}");
        for name in ["admin", "app"] {
            let (status, created) = call(
                &app,
                &provider,
                Method::POST,
                "/clients",
                Some(json!({"org": org, "name": format!("{org}-{name}")})),
            )
            .await;
            assert_eq!(status, 201, "{created}");
            made.push(credentials(&created));
        }
    }
    let [acme_admin, acme_app, beta_admin, beta_app] = made.try_into().unwrap();
    let acme_token = token_of(&app, &acme_admin.0, &acme_admin.1, "tessera-org-admin").await;
    Tenants {
        app,
        provider,
        acme_admin,
        acme_token,
        acme_app,
        beta_admin,
        beta_app,
    }
}

/// Everything the admin API can change, as the store reads it: plans, organizations,
/// clients (their credentials' hashes included), trust policies, signing keys, and the
/// audit trail.
async fn database(app: &TestApp) -> String {
    let store = &app.store;
    let audit = store
        .audit_events(&AuditQuery {
            text: String::new(),
            before: None,
            limit: 10_000,
        })
        .await
        .unwrap();
    format!(
        "{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}",
        store.plans().await.unwrap(),
        store.orgs().await.unwrap(),
        store.clients_page(None, None, 10_000).await.unwrap(),
        store.trust_policies().await.unwrap(),
        store.keys().await.unwrap(),
        audit,
    )
}

async fn an_org_admin_manages_its_own_clients(database_url: Option<String>) {
    let t = tenants(database_url).await;
    let (app, token) = (&t.app, t.acme_token.as_str());
    let acme_admin = t.acme_admin.0.to_string();

    // Its own organization, and only its clients, the admin first.
    let (status, org) = call(app, token, Method::GET, "/orgs/acme", None).await;
    assert_eq!((status, org["clients"].as_u64()), (200, Some(2)), "{org}");
    let (status, page) = call(app, token, Method::GET, "/orgs/acme/clients", None).await;
    assert_eq!(status, 200, "{page}");
    let mut listed: Vec<&str> = page["clients"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["client_id"].as_str().unwrap())
        .collect();
    listed.sort_unstable();
    let mut expected = vec![acme_admin.as_str(), t.acme_app.0.as_str()];
    expected.sort_unstable();
    assert_eq!(listed, expected);
    // A page at a time.
    let (status, first) = call(app, token, Method::GET, "/orgs/acme/clients?limit=1", None).await;
    assert_eq!(first["clients"].as_array().unwrap().len(), 1, "{first}");
    let cursor = first["next_cursor"].as_str().unwrap().to_owned();
    let (_, second) = call(
        app,
        token,
        Method::GET,
        &format!("/orgs/acme/clients?limit=1&cursor={cursor}"),
        None,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(second["clients"].as_array().unwrap().len(), 1, "{second}");
    assert!(second["next_cursor"].is_null(), "{second}");
    assert_ne!(first["clients"][0], second["clients"][0]);

    // Create: on the organization's plan, whatever it would like.
    let (status, created) = call(
        app,
        token,
        Method::POST,
        "/orgs/acme/clients",
        Some(json!({"name": "acme-reports"})),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(
        (created["org"].as_str(), created["plan"].as_str()),
        (Some("acme"), Some("portal"))
    );
    let (reports, reports_secret) = credentials(&created);
    app.sync().await;
    assert_eq!(news_token_status(app, &reports, &reports_secret).await, 200);
    // With keys or a certificate instead of a secret.
    for keyed in [
        json!({"name": "acme-keyed", "token_endpoint_auth_method": "private_key_jwt",
               "jwks_uri": "https://keys.acme.example/jwks"}),
        json!({"name": "acme-mtls", "token_endpoint_auth_method": "tls_client_auth",
               "tls_client_auth_san_dns": "billing.acme.example"}),
    ] {
        let (status, created) =
            call(app, token, Method::POST, "/orgs/acme/clients", Some(keyed)).await;
        assert_eq!(status, 201, "{created}");
        assert!(created.get("client_secret").is_none(), "{created}");
        assert_eq!(created["org"], "acme");
    }

    // Rotate: the new secret works, the old one not (no grace asked).
    let (status, rotated) = call(
        app,
        token,
        Method::POST,
        &format!("/orgs/acme/clients/{reports}/rotate-secret"),
        Some(json!({"grace_secs": 0})),
    )
    .await;
    assert_eq!(status, 200, "{rotated}");
    let (_, new_secret) = credentials(&rotated);
    assert_eq!(news_token_status(app, &reports, &new_secret).await, 200);
    assert_eq!(news_token_status(app, &reports, &reports_secret).await, 401);

    // Disable and enable.
    for (enabled, expected) in [(false, 401), (true, 200)] {
        let (status, changed) = call(
            app,
            token,
            Method::PATCH,
            &format!("/orgs/acme/clients/{reports}"),
            Some(json!({"enabled": enabled})),
        )
        .await;
        assert_eq!((status, changed["enabled"].as_bool()), (200, Some(enabled)));
        assert_eq!(
            news_token_status(app, &reports, &new_secret).await,
            expected
        );
    }

    // Its usage, per client and in total, once this instance has written its counts.
    app.state.housekeeping().await;
    let (status, usage) = call(app, token, Method::GET, "/orgs/acme/usage", None).await;
    assert_eq!(
        (status, usage["org"].as_str()),
        (200, Some("acme")),
        "{usage}"
    );
    let issued: u64 = usage["total"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["issued"].as_u64().unwrap())
        .sum();
    // The admin's own token, the new client's three, and none of beta's.
    assert_eq!(issued, 4, "{usage}");

    // Delete.
    let (status, _) = call(
        app,
        token,
        Method::DELETE,
        &format!("/orgs/acme/clients/{reports}"),
        None,
    )
    .await;
    assert_eq!(status, 204);
    assert!(app.store.client(&reports).await.unwrap().is_none());
    assert_eq!(news_token_status(app, &reports, &new_secret).await, 401);

    // Item 6: each change is an audit event naming the admin client, the organization and
    // the client, as the provider reads them.
    let (_, events) = call(
        app,
        &t.provider,
        Method::GET,
        "/audit-events?q=org:acme/",
        None,
    )
    .await;
    let events = events["events"].as_array().unwrap();
    // The provider made acme's first two clients; the rest are the admin's.
    let trail: Vec<(&str, &str)> = events
        .iter()
        .rev()
        .filter(|e| e["actor"] == acme_admin.as_str())
        .map(|e| {
            assert_eq!(e["channel"], "admin-api", "{e}");
            (e["object"].as_str().unwrap(), e["action"].as_str().unwrap())
        })
        .collect();
    let object = format!("org:acme/client:{reports}");
    assert_eq!(trail.len(), 7, "{trail:?}");
    assert_eq!(events.len(), 9, "{events:?}");
    assert_eq!(
        trail[0],
        (
            object.as_str(),
            "created in organization acme on plan portal"
        )
    );
    assert!(trail[1].0.starts_with("org:acme/client:tc_"), "{trail:?}");
    assert!(trail[2].0.starts_with("org:acme/client:tc_"), "{trail:?}");
    assert_eq!(
        &trail[3..],
        [
            (object.as_str(), "secret rotated, previous valid for 0 s"),
            (object.as_str(), "disabled"),
            (object.as_str(), "enabled"),
            (object.as_str(), "deleted"),
        ]
    );

    // When the provider disables the organization, its admin is refused at once.
    let (status, _) = call(
        app,
        &t.provider,
        Method::PATCH,
        "/orgs/acme",
        Some(json!({"enabled": false})),
    )
    .await;
    assert_eq!(status, 200);
    let (status, _) = call(app, token, Method::GET, "/orgs/acme/clients", None).await;
    assert_eq!(status, 401);
    let _ = (&t.beta_admin, &t.beta_app);
}

#[tokio::test]
async fn an_org_admin_manages_its_own_clients_on_sqlite() {
    an_org_admin_manages_its_own_clients(None).await;
}

#[tokio::test]
async fn an_org_admin_manages_its_own_clients_on_postgres() {
    let schema = tessera_store::testing::scratch_postgres().await;
    an_org_admin_manages_its_own_clients(Some(schema.url.clone())).await;
}

/// One request template: `{ORG}`, `{CLIENT}` and `{POLICY}` stand for the other
/// customer's ids, or for ids that do not exist.
struct Try {
    method: Method,
    path: &'static str,
    body: Option<&'static str>,
    /// What it must answer: 404 inside `/orgs/{ORG}`, 403 at the provider's endpoints.
    status: u16,
}

const fn attempt(
    method: Method,
    path: &'static str,
    body: Option<&'static str>,
    status: u16,
) -> Try {
    Try {
        method,
        path,
        body,
        status,
    }
}

/// Every admin API operation, with another customer's ids wherever one fits.
fn attempts() -> Vec<Try> {
    use Method as M;
    vec![
        // The provider's endpoints: refused for the scope, whatever they name.
        attempt(M::GET, "/plans", None, 403),
        attempt(M::GET, "/plans/portal", None, 403),
        attempt(
            M::PUT,
            "/plans/portal",
            Some(r#"{"scopes": ["news-api", "tessera-admin"]}"#),
            403,
        ),
        attempt(M::DELETE, "/plans/portal", None, 403),
        attempt(M::GET, "/plans/portal/usage", None, 403),
        attempt(M::GET, "/usage/hourly", None, 403),
        attempt(M::GET, "/clients", None, 403),
        attempt(M::GET, "/clients?plan=portal&cursor={CLIENT}", None, 403),
        attempt(M::POST, "/clients", Some(r#"{"org": "{ORG}"}"#), 403),
        attempt(M::POST, "/clients", Some(r#"{"plan": "admin"}"#), 403),
        attempt(M::GET, "/clients/{CLIENT}", None, 403),
        attempt(
            M::PATCH,
            "/clients/{CLIENT}",
            Some(r#"{"enabled": false}"#),
            403,
        ),
        attempt(
            M::PATCH,
            "/clients/{CLIENT}",
            Some(r#"{"plan": "admin"}"#),
            403,
        ),
        attempt(M::DELETE, "/clients/{CLIENT}", None, 403),
        attempt(M::POST, "/clients/{CLIENT}/rotate-secret", None, 403),
        attempt(M::GET, "/clients/{CLIENT}/usage", None, 403),
        attempt(M::GET, "/clients/{CLIENT}/refusals", None, 403),
        attempt(M::GET, "/rate-limited", None, 403),
        attempt(M::GET, "/orgs", None, 403),
        attempt(
            M::POST,
            "/orgs",
            Some(r#"{"id": "{ORG}-2", "plan": "admin"}"#),
            403,
        ),
        attempt(M::GET, "/keys", None, 403),
        attempt(M::POST, "/keys/rotate", None, 403),
        attempt(M::GET, "/trust-policies", None, 403),
        attempt(M::GET, "/trust-policies/{POLICY}", None, 403),
        attempt(
            M::PUT,
            "/trust-policies/{POLICY}",
            Some(
                r#"{"client_id": "{CLIENT}", "issuer": "https://evil.example", "audience": "x", "subject": "evil", "jwks_uri": "https://evil.example/keys", "allow_admin": true}"#,
            ),
            403,
        ),
        attempt(
            M::PUT,
            "/trust-policies/evil",
            Some(
                r#"{"client_id": "{CLIENT}", "issuer": "https://evil.example", "audience": "x", "subject": "evil", "jwks_uri": "https://evil.example/keys", "allow_admin": true}"#,
            ),
            403,
        ),
        attempt(M::DELETE, "/trust-policies/{POLICY}", None, 403),
        attempt(M::GET, "/audit-events?q={ORG}", None, 403),
        attempt(M::GET, "/audit-events?q={CLIENT}&before=1000000", None, 403),
        // The other organization: as if it did not exist.
        attempt(M::GET, "/orgs/{ORG}", None, 404),
        attempt(M::PATCH, "/orgs/{ORG}", Some(r#"{"plan": "admin"}"#), 404),
        attempt(M::PATCH, "/orgs/{ORG}", Some(r#"{"enabled": false}"#), 404),
        attempt(M::DELETE, "/orgs/{ORG}?with_clients=true", None, 404),
        attempt(M::GET, "/orgs/{ORG}/usage?from=2020-01-01", None, 404),
        attempt(M::GET, "/orgs/{ORG}/clients", None, 404),
        attempt(
            M::GET,
            "/orgs/{ORG}/clients?cursor={CLIENT}&limit=1",
            None,
            404,
        ),
        attempt(
            M::POST,
            "/orgs/{ORG}/clients",
            Some(r#"{"name": "planted"}"#),
            404,
        ),
        attempt(M::GET, "/orgs/{ORG}/clients/{CLIENT}", None, 404),
        attempt(
            M::PATCH,
            "/orgs/{ORG}/clients/{CLIENT}",
            Some(r#"{"enabled": false}"#),
            404,
        ),
        attempt(M::DELETE, "/orgs/{ORG}/clients/{CLIENT}", None, 404),
        attempt(
            M::POST,
            "/orgs/{ORG}/clients/{CLIENT}/rotate-secret",
            None,
            404,
        ),
        // Its own organization with the other's client.
        attempt(M::GET, "/orgs/acme/clients/{CLIENT}", None, 404),
        attempt(
            M::PATCH,
            "/orgs/acme/clients/{CLIENT}",
            Some(r#"{"enabled": false}"#),
            404,
        ),
        attempt(
            M::PATCH,
            "/orgs/acme/clients/{CLIENT}",
            Some(r#"{"name": "mine now"}"#),
            404,
        ),
        attempt(M::DELETE, "/orgs/acme/clients/{CLIENT}", None, 404),
        attempt(
            M::POST,
            "/orgs/acme/clients/{CLIENT}/rotate-secret",
            Some(r#"{"grace_secs": 0}"#),
            404,
        ),
        // Its own organization, changes it may not make: its plan, its switch, its end.
        attempt(M::PATCH, "/orgs/acme", Some(r#"{"plan": "admin"}"#), 403),
        attempt(M::PATCH, "/orgs/acme", Some(r#"{"name": "{ORG}"}"#), 403),
        attempt(M::DELETE, "/orgs/acme?with_clients=true", None, 403),
        // A client of its own on another plan, or in the other organization: fields the
        // organization's client creation has not.
        attempt(
            M::POST,
            "/orgs/acme/clients",
            Some(r#"{"plan": "admin"}"#),
            400,
        ),
        attempt(
            M::POST,
            "/orgs/acme/clients",
            Some(r#"{"org": "{ORG}"}"#),
            400,
        ),
    ]
}

/// `template` with the ids filled in.
fn fill(template: &str, org: &str, client: &str, policy: &str) -> String {
    template
        .replace("{ORG}", org)
        .replace("{CLIENT}", client)
        .replace("{POLICY}", policy)
}

async fn an_org_admin_reaches_nothing_of_another(database_url: Option<String>) {
    let t = tenants(database_url).await;
    let (app, token) = (&t.app, t.acme_token.as_str());
    // beta's trust policy, made by the provider.
    let (status, policy) = call(
        app,
        &t.provider,
        Method::PUT,
        "/trust-policies/beta-ci",
        Some(
            json!({"client_id": t.beta_app.0.as_str(), "issuer": "https://ci.beta.example",
            "audience": "tessera", "subject": "repo:beta/app:ref:refs/heads/main",
            "jwks_uri": "https://ci.beta.example/keys", "allow_admin": true}),
        ),
    )
    .await;
    assert_eq!(status, 201, "{policy}");
    // A client id that has the form of one but does not exist: made and deleted.
    let (status, gone) = call(
        app,
        &t.provider,
        Method::POST,
        "/clients",
        Some(json!({"plan": "portal"})),
    )
    .await;
    assert_eq!(status, 201);
    let gone = gone["client_id"].as_str().unwrap().to_owned();
    let (status, _) = call(
        app,
        &t.provider,
        Method::DELETE,
        &format!("/clients/{gone}"),
        None,
    )
    .await;
    assert_eq!(status, 204);
    // A client beta's admin created with an idempotency key.
    let (status, _, beta_created) = send(
        app,
        &token_of(app, &t.beta_admin.0, &t.beta_admin.1, "tessera-org-admin").await,
        Method::POST,
        "/orgs/beta/clients",
        Some(&json!({"name": "same"})),
        Some("key-1"),
    )
    .await;
    assert_eq!(status, 201, "{beta_created}");
    let beta_created: Value = serde_json::from_str(&beta_created).unwrap();

    let before = database(app).await;
    let beta = ("beta", t.beta_app.0.to_string(), "beta-ci");
    let ghost = ("ghost", gone.clone(), "ghost-ci");
    for attempt in attempts() {
        let mut answers = Vec::new();
        for (org, client, policy) in [
            (beta.0, beta.1.as_str(), beta.2),
            (ghost.0, ghost.1.as_str(), ghost.2),
        ] {
            let path = fill(attempt.path, org, client, policy);
            let body: Option<Value> = attempt
                .body
                .map(|b| serde_json::from_str(&fill(b, org, client, policy)).unwrap());
            let (status, headers, text) = send(
                app,
                token,
                attempt.method.clone(),
                &path,
                body.as_ref(),
                None,
            )
            .await;
            assert_eq!(status, attempt.status, "{} {path}: {text}", attempt.method);
            // Nothing of the other customer's comes back but what was sent.
            for secret in [t.beta_admin.0.as_str(), "beta-admin", "beta-app", "ci.beta"] {
                assert!(!text.contains(secret), "{} {path}: {text}", attempt.method);
            }
            let challenge = headers
                .get("www-authenticate")
                .map(|v| v.to_str().unwrap().to_owned());
            let said = text
                .replace(policy, "{POLICY}")
                .replace(client, "{CLIENT}")
                .replace(org, "{ORG}");
            answers.push((status, challenge, said));
        }
        assert_eq!(
            answers[0], answers[1],
            "{} {}: the other customer's ids are told from ids that do not exist",
            attempt.method, attempt.path
        );
    }
    // A cursor naming the other's client is a position in its own clients.
    let (status, page) = call(
        app,
        token,
        Method::GET,
        &format!("/orgs/acme/clients?cursor={}", t.beta_app.0),
        None,
    )
    .await;
    assert_eq!(status, 200);
    for client in page["clients"].as_array().unwrap() {
        assert_eq!(client["org"], "acme", "{page}");
    }
    // Its plan in a patch of its own client: not a field there.
    let (status, problem) = call(
        app,
        token,
        Method::PATCH,
        &format!("/orgs/acme/clients/{}", t.acme_app.0),
        Some(json!({"plan": "admin"})),
    )
    .await;
    assert_eq!(status, 400, "{problem}");
    // A token of another scope of its own plan is no admin at all.
    let news = token_of(app, &t.acme_admin.0, &t.acme_admin.1, "news-api").await;
    let (status, _) = call(app, &news, Method::GET, "/orgs/acme/clients", None).await;
    assert_eq!(status, 401);
    assert_eq!(database(app).await, before, "the database changed");

    // The idempotency key beta's admin used is acme's own: a new client of acme, never
    // beta's answer.
    let (status, headers, mine) = send(
        app,
        token,
        Method::POST,
        "/orgs/acme/clients",
        Some(&json!({"name": "same"})),
        Some("key-1"),
    )
    .await;
    assert_eq!(status, 201, "{mine}");
    assert!(headers.get("idempotent-replayed").is_none());
    let mine: Value = serde_json::from_str(&mine).unwrap();
    assert_eq!(mine["org"], "acme");
    assert_ne!(mine["client_id"], beta_created["client_id"]);
    assert_ne!(mine["client_secret"], beta_created["client_secret"]);
    // Beta's clients are as they were, and still get tokens.
    assert_eq!(
        news_token_status(app, &t.beta_app.0, &t.beta_app.1).await,
        200
    );
    assert_eq!(app.store.org_clients("beta").await.unwrap().len(), 3);
}

#[tokio::test]
async fn an_org_admin_reaches_nothing_of_another_on_sqlite() {
    an_org_admin_reaches_nothing_of_another(None).await;
}

#[tokio::test]
async fn an_org_admin_reaches_nothing_of_another_on_postgres() {
    let schema = tessera_store::testing::scratch_postgres().await;
    an_org_admin_reaches_nothing_of_another(Some(schema.url.clone())).await;
}

/// An organization's admin mints no admin beyond its plan: the clients it makes are on the
/// organization's plan, and when that plan stops granting `tessera-org-admin`, the admin's
/// token stops working at once (before it expires).
#[tokio::test]
async fn an_org_admin_mints_nothing_beyond_its_plan() {
    let t = tenants(None).await;
    let (app, token) = (&t.app, t.acme_token.as_str());
    let (status, created) = call(
        app,
        token,
        Method::POST,
        "/orgs/acme/clients",
        Some(json!({"name": "would-be-admin"})),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let (id, secret) = credentials(&created);
    app.sync().await;
    // Its client gets what the plan grants, and no provider scope.
    for scope in ["tessera-admin", "tessera-admin-read"] {
        let answer = app
            .token(
                &id,
                &secret,
                &format!("grant_type=client_credentials&scope={scope}"),
            )
            .await;
        assert_eq!(answer.status(), 400, "{scope}");
    }
    // The provider takes the admin scope from the plan: the token it holds is refused.
    app.registrar()
        .set_plan("portal", "news-api", None)
        .await
        .unwrap();
    app.sync().await;
    let (status, _) = call(app, token, Method::GET, "/orgs/acme/clients", None).await;
    assert_eq!(status, 403);
    let _ = &t.acme_app;
}
