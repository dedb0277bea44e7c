//! The control plane (the admin API, the console, `/openapi.json`) beside the data plane on
//! one listener, or on a listener of its own with `admin_listen` (`serve --admin-listen`):
//! then it answers there alone, and the data plane only on the main listener.

use std::net::SocketAddr;

use reqwest::StatusCode;
use tessera_testkit::{spawn_app, spawn_with, TestApp};

/// `GET base+path`, with `token` as a bearer token when given: its status.
async fn status(app: &TestApp, base: &str, path: &str, token: Option<&str>) -> StatusCode {
    let mut request = app.http.get(format!("{base}{path}"));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    request.send().await.expect("an answer").status()
}

/// A client credentials request at `base` for plan `pro`'s client: its status.
async fn token_status(app: &TestApp, base: &str) -> StatusCode {
    let (id, secret) = app.client().await;
    app.http
        .post(format!("{base}/connect/token"))
        .basic_auth(id.as_str(), Some(secret.expose()))
        .form(&[
            ("grant_type", "client_credentials"),
            ("scope", "market-data-api"),
        ])
        .send()
        .await
        .expect("an answer")
        .status()
}

/// The management surface's paths: the document, the admin API, the console.
const MANAGEMENT: [&str; 4] = [
    "/openapi.json",
    "/admin/v1/plans",
    "/console/sign-in",
    "/console/assets/console.css",
];

#[tokio::test]
async fn without_an_admin_listener_both_planes_answer_on_one() {
    let app = spawn_app().await;
    assert_eq!(app.admin_addr, None);
    let (_, token) = app.admin_token("tessera-admin-read").await;
    for path in MANAGEMENT {
        assert_eq!(
            status(&app, &app.base, path, Some(&token)).await,
            200,
            "{path}"
        );
    }
    assert_eq!(token_status(&app, &app.base).await, 200);
    assert_eq!(
        status(&app, &app.base, "/.well-known/jwks.json", None).await,
        200
    );
}

#[tokio::test]
async fn with_an_admin_listener_the_management_surface_answers_there_alone() {
    let app =
        spawn_with(|s| s.config.admin_listen = Some(SocketAddr::from(([127, 0, 0, 1], 0)))).await;
    let admin_addr = app.admin_addr.expect("an admin listener");
    assert_ne!(admin_addr, app.addr);
    let admin = format!("http://{admin_addr}");
    // The admin token comes from the token endpoint on the main listener.
    let (_, token) = app.admin_token("tessera-admin").await;

    for path in MANAGEMENT {
        assert_eq!(
            status(&app, &admin, path, Some(&token)).await,
            200,
            "{path}"
        );
        assert_eq!(
            status(&app, &app.base, path, Some(&token)).await,
            404,
            "{path} on the main listener"
        );
    }
    // The admin API's own refusals and fallback stay as they were, on its listener.
    assert_eq!(status(&app, &admin, "/admin/v1/plans", None).await, 401);
    assert_eq!(
        status(&app, &admin, "/admin/v1/nothing", Some(&token)).await,
        404
    );
    assert_eq!(status(&app, &app.base, "/console/", None).await, 404);

    // The data plane is on the main listener only.
    assert_eq!(token_status(&app, &app.base).await, 200);
    assert_eq!(token_status(&app, &admin).await, 404);
    for path in [
        "/.well-known/jwks.json",
        "/.well-known/oauth-authorization-server",
        "/healthz",
        "/metrics",
    ] {
        assert_eq!(status(&app, &app.base, path, None).await, 200, "{path}");
        assert_eq!(
            status(&app, &admin, path, None).await,
            404,
            "{path} on the admin listener"
        );
    }

    // A change made on the admin listener is in force at the token endpoint.
    let put = app
        .http
        .put(format!("{admin}/admin/v1/plans/reports"))
        .bearer_auth(&token)
        .json(&serde_json::json!({ "scopes": ["reports-api"] }))
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), 201);
    let (id, secret) = app
        .client_on("reports", tessera_store::AuthMethod::ClientSecretBasic)
        .await;
    let issued = app
        .token(
            &id,
            &secret,
            "grant_type=client_credentials&scope=reports-api",
        )
        .await;
    assert_eq!(issued.status(), 200);
}

#[tokio::test]
async fn the_admin_listener_must_be_another_address() {
    let listen: SocketAddr = "127.0.0.1:8080".parse().unwrap();
    let config = tessera_server::Config {
        listen,
        admin_listen: Some(listen),
        ..tessera_server::Config::default()
    };
    let refused = config.check().expect_err("the same address twice");
    assert!(refused.to_string().contains("admin-listen"), "{refused}");
}
