//! Introspection (RFC 7662) and revocation (RFC 7009).

use std::time::Duration;

use tessera_proto::{ClientId, ClientSecret};
use tessera_server::registrar::PlanSettings;
use tessera_store::AuthMethod;

use tessera_testkit::*;

const NEWS: &str = "grant_type=client_credentials&scope=news-api";

async fn issue(app: &TestApp, id: &ClientId, secret: &ClientSecret) -> String {
    let body: serde_json::Value = app.token(id, secret, NEWS).await.json().await.unwrap();
    body["access_token"].as_str().unwrap().to_owned()
}

async fn post(
    app: &TestApp,
    path: &str,
    id: &ClientId,
    secret: &ClientSecret,
    body: String,
) -> reqwest::Response {
    app.http
        .post(app.url(path))
        .header("authorization", basic(id, secret))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body)
        .send()
        .await
        .unwrap()
}

async fn introspect(
    app: &TestApp,
    id: &ClientId,
    secret: &ClientSecret,
    token: &str,
) -> serde_json::Value {
    let r = post(
        app,
        "/connect/introspect",
        id,
        secret,
        format!("token={token}"),
    )
    .await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["cache-control"], "no-store");
    r.json().await.unwrap()
}

/// A client on a plan that may introspect any token: an API checking what it receives.
async fn api_client(app: &TestApp) -> (ClientId, ClientSecret) {
    let settings = PlanSettings {
        introspect_any: Some(true),
        ..PlanSettings::default()
    };
    app.registrar()
        .set_plan_with("apis", "news-api", &settings)
        .await
        .unwrap();
    app.client_on("apis", AuthMethod::ClientSecretBasic).await
}

#[tokio::test]
async fn introspection_describes_active_tokens_only() {
    let app = spawn_app().await;
    let (id, secret) = app.client().await;
    let (api, api_secret) = api_client(&app).await;
    let (other, other_secret) = app.client().await;
    let token = issue(&app, &id, &secret).await;

    // RFC 7662 section 4: another client without the right learns nothing.
    assert_eq!(
        introspect(&app, &other, &other_secret, &token).await,
        serde_json::json!({"active": false})
    );
    // The client itself does, and so does a client whose plan grants it (say, an API).
    assert_eq!(introspect(&app, &id, &secret, &token).await["active"], true);
    let active = introspect(&app, &api, &api_secret, &token).await;
    assert_eq!(active["active"], true);
    assert_eq!(active["client_id"], id.as_str());
    assert_eq!(active["scope"], "news-api");
    assert_eq!(active["iss"], app.base);
    assert_eq!(active["token_type"], "Bearer");
    assert_eq!(active["app_only"], true);
    let claims = claims_of(&token);
    assert_eq!(active["sub"], id.as_str());
    assert_eq!(active["aud"], serde_json::json!(["news-api"]));
    assert_eq!(active["iat"], app.clock.now());
    assert_eq!(active["exp"], app.clock.now() + 3600);
    assert_eq!(active["jti"], claims["jti"]);
    assert_eq!(
        active["jti"].as_str().unwrap().len(),
        22,
        "128 bits in base64url"
    );

    for junk in [
        "abc",
        "a.b.c",
        &format!("{token}x"),
        &token[..token.len() - 4],
    ] {
        assert_eq!(
            introspect(&app, &api, &api_secret, junk).await,
            serde_json::json!({"active": false}),
            "{junk}"
        );
    }

    // A token from another server (another issuer and keys) is foreign.
    let other = spawn_app().await;
    let (oid, osecret) = other.client().await;
    let foreign = issue(&other, &oid, &osecret).await;
    assert_eq!(
        introspect(&app, &api, &api_secret, &foreign).await["active"],
        false
    );

    // The caller must authenticate.
    let anonymous = app
        .http
        .post(app.url("/connect/introspect"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={token}"))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 401);
    // The token parameter is required (RFC 7662 section 2.1), and an empty one is missing.
    for form in ["", "token="] {
        let (status, error, description) = error_of(
            post(
                &app,
                "/connect/introspect",
                &api,
                &api_secret,
                form.to_owned(),
            )
            .await,
        )
        .await;
        assert_eq!(
            (status, error.as_str(), description.as_str()),
            (400, "invalid_request", "missing parameter token"),
            "{form:?}"
        );
    }
}

#[tokio::test]
async fn expired_tokens_are_inactive() {
    let app = spawn_app().await;
    app.registrar()
        .set_plan("short", "news-api", Some(1))
        .await
        .unwrap();
    let (id, secret) = app
        .client_on("short", tessera_store::AuthMethod::ClientSecretBasic)
        .await;
    let token = issue(&app, &id, &secret).await;
    assert_eq!(introspect(&app, &id, &secret, &token).await["active"], true);
    app.clock.advance(Duration::from_secs(1));
    assert_eq!(
        introspect(&app, &id, &secret, &token).await["active"],
        false
    );
}

#[tokio::test]
async fn a_client_revokes_its_own_tokens_only() {
    let app = spawn_app().await;
    let (id, secret) = app.client().await;
    let (other, other_secret) = app.client().await;
    let token = issue(&app, &id, &secret).await;

    // Another client may not revoke it, and is not told whether it is active: the same
    // 200 as for an invalid token.
    let r = post(
        &app,
        "/connect/revocation",
        &other,
        &other_secret,
        format!("token={token}"),
    )
    .await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["cache-control"], "no-store");
    assert_eq!(r.text().await.unwrap(), "");
    assert_eq!(introspect(&app, &id, &secret, &token).await["active"], true);

    let r = post(
        &app,
        "/connect/revocation",
        &id,
        &secret,
        format!("token={token}&token_type_hint=access_token"),
    )
    .await;
    assert_eq!(r.status(), 200);
    assert_eq!(
        introspect(&app, &id, &secret, &token).await["active"],
        false
    );
    // Remembered until its exp.
    let revoked: Vec<_> = app
        .store
        .revoked_since(0, app.clock.now())
        .await
        .unwrap()
        .into_iter()
        .map(|(_, r)| r)
        .collect();
    let claims = claims_of(&token);
    assert_eq!(revoked.len(), 1);
    assert_eq!(revoked[0].jti, claims["jti"].as_str().unwrap());
    assert_eq!(revoked[0].exp, claims["exp"].as_i64().unwrap());

    // Revoking again, or revoking garbage, is answered 200 (RFC 7009 2.2).
    for body in [format!("token={token}"), "token=garbage".to_owned()] {
        assert_eq!(
            post(&app, "/connect/revocation", &id, &secret, body)
                .await
                .status(),
            200
        );
    }
    // Unauthenticated: 401; no token: 400.
    let wrong = ClientSecret::new("wrong");
    assert_eq!(
        post(
            &app,
            "/connect/revocation",
            &id,
            &wrong,
            format!("token={token}")
        )
        .await
        .status(),
        401
    );
    assert_eq!(
        post(&app, "/connect/revocation", &id, &secret, String::new())
            .await
            .status(),
        400
    );
    // Other tokens of the client stay active.
    let fresh = issue(&app, &id, &secret).await;
    assert_eq!(introspect(&app, &id, &secret, &fresh).await["active"], true);
}

#[tokio::test]
async fn tokens_of_a_disabled_or_deleted_client_are_inactive() {
    let app = spawn_app().await;
    let (id, secret) = app.client().await;
    let (api, api_secret) = api_client(&app).await;
    let token = issue(&app, &id, &secret).await;
    assert_eq!(
        introspect(&app, &api, &api_secret, &token).await["active"],
        true
    );
    app.registrar()
        .update_client(id.as_str(), |c| c.enabled = false)
        .await
        .unwrap();
    app.state.sync().await.unwrap();
    assert_eq!(
        introspect(&app, &api, &api_secret, &token).await["active"],
        false
    );
    app.registrar()
        .update_client(id.as_str(), |c| c.enabled = true)
        .await
        .unwrap();
    app.state.sync().await.unwrap();
    assert_eq!(
        introspect(&app, &api, &api_secret, &token).await["active"],
        true
    );
    app.registrar().delete_client(id.as_str()).await.unwrap();
    app.state.sync().await.unwrap();
    assert_eq!(
        introspect(&app, &api, &api_secret, &token).await["active"],
        false
    );
}

/// A token of this server well over a kilobyte (a plan granting 40 APIs: 40 scopes and 40
/// audiences) is read back whole: introspection (RFC 7662 section 2.2) describes it and
/// revocation (RFC 7009 section 2.1) revokes it. The reader takes tokens up to 8 KiB.
#[tokio::test]
async fn a_long_token_is_introspected_and_revoked() {
    let app = spawn_app().await;
    let scopes: Vec<String> = (0..40)
        .map(|i| format!("wide-api-{i:02}-for-a-long-token"))
        .collect();
    let scopes = scopes.join(" ");
    app.registrar()
        .set_plan("wide", &scopes, None)
        .await
        .unwrap();
    let (id, secret) = app
        .client_on("wide", tessera_store::AuthMethod::ClientSecretBasic)
        .await;
    let answer = app
        .token(
            &id,
            &secret,
            &format!(
                "grant_type=client_credentials&scope={}",
                scopes.replace(' ', "+")
            ),
        )
        .await;
    assert_eq!(answer.status(), 200);
    let body: serde_json::Value = answer.json().await.unwrap();
    let token = body["access_token"].as_str().unwrap().to_owned();
    assert!(
        (2048..8192).contains(&token.len()),
        "a long token, within the limit: {} bytes",
        token.len()
    );

    let active = introspect(&app, &id, &secret, &token).await;
    assert_eq!(active["active"], true);
    assert_eq!(active["scope"], scopes.as_str());
    assert_eq!(active["jti"], claims_of(&token)["jti"]);

    let r = post(
        &app,
        "/connect/revocation",
        &id,
        &secret,
        format!("token={token}"),
    )
    .await;
    assert_eq!(r.status(), 200);
    assert_eq!(
        introspect(&app, &id, &secret, &token).await["active"],
        false
    );
    let revoked = app.store.revoked_since(0, app.clock.now()).await.unwrap();
    assert_eq!(revoked.len(), 1);
    assert_eq!(revoked[0].1.jti, claims_of(&token)["jti"].as_str().unwrap());
}
