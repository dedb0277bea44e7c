//! The console's single sign-on over plain HTTP, without a browser (issue 29): the error
//! paths a real provider never takes, against a provider written here that signs whatever ID
//! token a test asks for. `tests/browser` signs in through node-oidc-provider in Chromium.
//!
//! The provider checks what a real one checks at its token endpoint: the client's Basic
//! credentials, the code (used once), the redirect URI and the PKCE verifier against the
//! challenge of the authorization request (RFC 7636 section 4.6).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode as AxumStatus};
use axum::response::IntoResponse;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;
use reqwest::StatusCode;
use serde_json::{json, Value};
use tessera_testkit::dpop::ProofKey;
use tessera_testkit::{spawn_with, TestApp};

use crate::console::{admin, hidden, location, Visitor};

const CLIENT_ID: &str = "tessera-console";
const SECRET: &str = "console-secret-at-the-provider";

/// A code the provider will exchange: the challenge it was issued for, and the claims of its
/// ID token.
struct Grant {
    challenge: String,
    redirect_uri: String,
    claims: Value,
}

#[derive(Clone)]
struct Provider {
    codes: Arc<Mutex<HashMap<String, Grant>>>,
    key: Arc<ProofKey>,
}

/// The provider: discovery, keys and the token endpoint, on 127.0.0.1 (or `host` in its
/// issuer, for the address guard); its issuer.
async fn provider(scheme: &str) -> (String, Provider) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let issuer = format!("{scheme}://{}", listener.local_addr().unwrap());
    let state = Provider {
        codes: Arc::default(),
        key: Arc::new(ProofKey::p256()),
    };
    let mut jwk = state.key.jwk().clone();
    jwk["kid"] = json!("idp-key");
    let discovery = json!({
        "issuer": issuer,
        "authorization_endpoint": format!("{issuer}/authorize"),
        "token_endpoint": format!("{issuer}/token"),
        "jwks_uri": format!("{issuer}/keys"),
        "token_endpoint_auth_methods_supported": ["client_secret_basic"],
    });
    let jwks = json!({ "keys": [jwk] });
    let router = axum::Router::new()
        .route(
            "/.well-known/openid-configuration",
            axum::routing::get(move || async move { axum::Json(discovery) }),
        )
        .route(
            "/keys",
            axum::routing::get(move || async move { axum::Json(jwks) }),
        )
        .route("/token", axum::routing::post(token))
        .with_state(state.clone());
    tokio::spawn(async move { axum::serve(listener, router).await });
    (issuer, state)
}

/// The token endpoint (RFC 6749 section 4.1.3).
async fn token(
    State(provider): State<Provider>,
    headers: HeaderMap,
    body: String,
) -> axum::response::Response {
    let refuse = |error: &str| {
        (
            AxumStatus::BAD_REQUEST,
            axum::Json(json!({ "error": error })),
        )
            .into_response()
    };
    let basic = format!("Basic {}", STANDARD.encode(format!("{CLIENT_ID}:{SECRET}")));
    if headers.get("authorization").and_then(|v| v.to_str().ok()) != Some(basic.as_str()) {
        return (
            AxumStatus::UNAUTHORIZED,
            axum::Json(json!({ "error": "invalid_client" })),
        )
            .into_response();
    }
    let form: HashMap<String, String> = tessera_proto::form::parse(&body)
        .unwrap()
        .into_iter()
        .collect();
    let field = |name: &str| form.get(name).cloned().unwrap_or_default();
    let Some(grant) = provider.codes.lock().unwrap().remove(&field("code")) else {
        return refuse("invalid_grant");
    };
    let verifier_ok =
        tessera_jose::sha256_b64(field("code_verifier").as_bytes()) == grant.challenge;
    if field("grant_type") != "authorization_code"
        || field("redirect_uri") != grant.redirect_uri
        || !verifier_ok
    {
        return refuse("invalid_grant");
    }
    let key = &provider.key;
    let id_token = key.sign(
        &json!({ "alg": key.alg(), "kid": "idp-key", "typ": "JWT" }),
        &grant.claims,
    );
    axum::Json(json!({ "access_token": "at", "token_type": "Bearer", "id_token": id_token }))
        .into_response()
}

/// A Tessera whose console signs in through `issuer`, admins and readers by group; the
/// secret's file is kept until the test ends.
async fn app_with(issuer: &str, allow_private: bool) -> (TestApp, tempfile::NamedTempFile) {
    let secret = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(secret.path(), format!("{SECRET}\n")).unwrap();
    let path = secret.path().to_owned();
    let issuer = issuer.to_owned();
    let app = spawn_with(move |s| {
        s.config.allow_private_jwks_uri = allow_private;
        s.config.console_oidc_issuer = Some(issuer);
        s.config.console_oidc_client_id = Some(CLIENT_ID.into());
        s.config.console_oidc_client_secret_file = Some(path);
        s.config.console_admin_group = Some("tessera-admins".into());
        s.config.console_read_group = Some("tessera-readers".into());
    })
    .await;
    (app, secret)
}

/// The query parameters of a URL.
fn query_of(url: &str) -> HashMap<String, String> {
    let query = url.split_once('?').map_or("", |(_, q)| q);
    tessera_proto::form::parse(query)
        .unwrap()
        .into_iter()
        .collect()
}

/// A sign-in started by `visitor`: the authorization request's parameters.
async fn start(visitor: &mut Visitor) -> HashMap<String, String> {
    let started = visitor.get("/console/sign-in/sso").await;
    assert_eq!(started.status(), StatusCode::SEE_OTHER);
    let cookie = started
        .headers()
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .find(|c| c.starts_with("tessera_console_sso="))
        .expect("the state cookie");
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Lax"),
        "{cookie}"
    );
    query_of(location(&started))
}

/// What the provider does once the person signed in: a code for an ID token of `claims`
/// (over the good ones for this request), and the redirect back to the console.
fn authorize(
    app: &TestApp,
    provider: &Provider,
    issuer: &str,
    request: &HashMap<String, String>,
    claims: &Value,
) -> String {
    let now = app.clock.now();
    let mut all = json!({
        "iss": issuer, "aud": CLIENT_ID, "sub": "248289761001",
        "name": "Ada Lovelace", "email": "ada@example.com",
        "groups": ["tessera-admins"], "iat": now, "exp": now + 300,
        "nonce": request["nonce"],
    });
    for (name, value) in claims.as_object().unwrap() {
        all[name] = value.clone();
    }
    let code = URL_SAFE_NO_PAD.encode(format!("code-{}", CODES.fetch_add(1, Ordering::Relaxed)));
    assert_eq!(request["code_challenge_method"], "S256");
    provider.codes.lock().unwrap().insert(
        code.clone(),
        Grant {
            challenge: request["code_challenge"].clone(),
            redirect_uri: request["redirect_uri"].clone(),
            claims: all,
        },
    );
    assert_eq!(
        request["redirect_uri"],
        format!("{}/console/sign-in/sso/callback", app.base)
    );
    format!(
        "/console/sign-in/sso/callback?code={code}&state={}",
        tessera_proto::form::encode_component(&request["state"])
    )
}

/// Codes told apart by number.
static CODES: AtomicU64 = AtomicU64::new(0);

/// The sign-in page's error message.
async fn refusal(response: reqwest::Response) -> (StatusCode, String) {
    let status = response.status();
    let page = response.text().await.unwrap();
    let message = page
        .split("role=\"alert\">")
        .nth(1)
        .and_then(|rest| rest.split('<').next())
        .unwrap_or_default()
        .to_owned();
    (status, message)
}

#[tokio::test]
async fn an_admin_and_a_reader_sign_in_through_the_provider_and_changes_name_the_person() {
    let (issuer, provider) = provider("http").await;
    let (app, _secret) = app_with(&issuer, true).await;
    let mut ada = Visitor::new(&app);
    let page = ada.get("/console/sign-in").await.text().await.unwrap();
    assert!(page.contains("Sign in with single sign-on") && page.contains("client_secret"));
    let request = start(&mut ada).await;
    assert_eq!(request["client_id"], CLIENT_ID);
    assert!(request["scope"].split(' ').any(|s| s == "openid"));
    let back = authorize(&app, &provider, &issuer, &request, &json!({}));
    let signed_in = ada.get(&back).await;
    assert_eq!(signed_in.status(), StatusCode::OK);
    let cookie = signed_in
        .headers()
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .find(|c| c.starts_with("tessera_console="))
        .expect("a session cookie");
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let overview = ada.get("/console/").await.text().await.unwrap();
    assert!(overview.contains("Ada Lovelace"), "{overview}");

    // A change, audited as the person.
    let plans = ada.get("/console/plans").await.text().await.unwrap();
    let csrf = hidden(&plans, "csrf");
    let created = ada
        .post(
            "/console/plans",
            &[("csrf", &csrf), ("name", "gold"), ("scopes", "news-api")],
        )
        .await;
    assert_eq!(created.status(), StatusCode::SEE_OTHER);
    assert!(app
        .store
        .plans()
        .await
        .unwrap()
        .iter()
        .any(|p| p.name.as_str() == "gold"));
    let events = app
        .store
        .audit_events(&tessera_store::AuditQuery {
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(
        events[0].actor,
        format!("Ada Lovelace <ada@example.com> (sub 248289761001 at {issuer})")
    );
    assert_eq!(events[0].object, "plan:gold");
    assert_eq!(events[0].channel, "console");

    // A reader sees the pages and no forms; a forged change is refused by the admin API.
    let mut grace = Visitor::new(&app);
    let request = start(&mut grace).await;
    let back = authorize(
        &app,
        &provider,
        &issuer,
        &request,
        &json!({ "sub": "g-1", "name": "Grace Hopper", "groups": "tessera-readers" }),
    );
    assert_eq!(grace.get(&back).await.status(), StatusCode::OK);
    let plans = grace.get("/console/plans").await.text().await.unwrap();
    assert!(plans.contains("gold") && plans.contains("read-only"));
    assert!(!plans.contains("Create a plan"));
    let csrf = hidden(&plans, "csrf");
    let forged = grace
        .post(
            "/console/plans",
            &[("csrf", &csrf), ("name", "silver"), ("scopes", "news-api")],
        )
        .await;
    assert_eq!(forged.status(), StatusCode::FORBIDDEN);
    let shown = forged.text().await.unwrap();
    assert!(
        shown.contains("read group"),
        "the refusal is shown: {shown}"
    );
    assert!(!app
        .store
        .plans()
        .await
        .unwrap()
        .iter()
        .any(|p| p.name.as_str() == "silver"));
}

#[tokio::test]
async fn bad_state_replayed_codes_and_bad_id_tokens_are_refused() {
    let (issuer, provider) = provider("http").await;
    let (app, _secret) = app_with(&issuer, true).await;
    let mut visitor = Visitor::new(&app);
    let signed_in = |r: &reqwest::Response| {
        r.headers().get_all("set-cookie").iter().any(|c| {
            c.to_str().unwrap().starts_with("tessera_console=")
                && !c.to_str().unwrap().starts_with("tessera_console=;")
        })
    };

    // A state that is not the cookie's (tampered, or another browser's sign-in).
    let request = start(&mut visitor).await;
    let mut tampered = request.clone();
    tampered.insert("state".into(), format!("{}x", request["state"]));
    let back = authorize(&app, &provider, &issuer, &tampered, &json!({}));
    let answer = visitor.get(&back).await;
    assert!(!signed_in(&answer));
    let (status, message) = refusal(answer).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(message.contains("state differs"), "{message}");
    // The cookie alone is not enough either: without it, the right state is refused.
    let request = start(&mut visitor).await;
    let back = authorize(&app, &provider, &issuer, &request, &json!({}));
    let mut stranger = Visitor::new(&app);
    let (status, _) = refusal(stranger.get(&back).await).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    // A code used once: the same redirect again (state used up), then the code with a new
    // sign-in's state (the provider refuses it).
    let request = start(&mut visitor).await;
    let back = authorize(&app, &provider, &issuer, &request, &json!({}));
    let first = visitor.get(&back).await;
    assert!(signed_in(&first));
    let (status, _) = refusal(visitor.get(&back).await).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "a state is used once");
    let code = query_of(&back)["code"].clone();
    let again = start(&mut visitor).await;
    let replay = format!(
        "/console/sign-in/sso/callback?code={code}&state={}",
        tessera_proto::form::encode_component(&again["state"])
    );
    let (status, message) = refusal(visitor.get(&replay).await).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(
        message.contains("did not accept the authorization code"),
        "{message}"
    );

    // ID tokens a sign-in must refuse.
    let now = app.clock.now();
    for (claims, why) in [
        (
            json!({ "aud": "another-client" }),
            "issued for another client",
        ),
        (
            json!({ "aud": ["another-client", CLIENT_ID] }),
            "issued for another client",
        ),
        (
            json!({ "iss": "https://evil.example" }),
            "issued by another issuer",
        ),
        (json!({ "exp": now - 120, "iat": now - 420 }), "has expired"),
        (
            json!({ "nonce": "not-this-sign-in" }),
            "nonce is not this sign-in",
        ),
        (
            json!({ "groups": ["sales"] }),
            "neither the console's admin group nor its read group",
        ),
        (
            json!({ "groups": null }),
            "neither the console's admin group nor its read group",
        ),
    ] {
        let request = start(&mut visitor).await;
        let back = authorize(&app, &provider, &issuer, &request, &claims);
        let answer = visitor.get(&back).await;
        assert!(!signed_in(&answer), "{claims}");
        let (status, message) = refusal(answer).await;
        let expected = if why.contains("group") {
            StatusCode::FORBIDDEN
        } else {
            StatusCode::UNAUTHORIZED
        };
        assert_eq!(status, expected, "{claims}: {message}");
        assert!(message.contains(why), "{claims}: {message}");
    }
    // The provider's own refusal is said, bounded and escaped.
    let request = start(&mut visitor).await;
    let (status, message) = refusal(
        visitor
            .get(&format!(
                "/console/sign-in/sso/callback?error=access_denied%3Cb%3E&state={}",
                tessera_proto::form::encode_component(&request["state"])
            ))
            .await,
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(message.contains("access_denied&lt;b&gt;"), "{message}");
}

#[tokio::test]
async fn discovery_on_a_private_address_is_refused_unless_allowed() {
    // https to 127.0.0.1: the setting is an https URL, but the guard refuses the address.
    let (issuer, _provider) = provider("https").await;
    let (app, _secret) = app_with(&issuer, false).await;
    let mut visitor = Visitor::new(&app);
    let (status, message) = refusal(visitor.get("/console/sign-in/sso").await).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(message.contains("private, loopback"), "{message}");
}

#[tokio::test]
async fn the_client_secret_sign_in_can_be_turned_off() {
    let (issuer, _provider) = provider("http").await;
    let secret = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(secret.path(), SECRET).unwrap();
    let path = secret.path().to_owned();
    let app = spawn_with(move |s| {
        s.config.allow_private_jwks_uri = true;
        s.config.console_oidc_issuer = Some(issuer);
        s.config.console_oidc_client_id = Some(CLIENT_ID.into());
        s.config.console_oidc_client_secret_file = Some(path);
        s.config.console_admin_group = Some("tessera-admins".into());
        s.config.console_client_sign_in = tessera_server::Switch::Off;
    })
    .await;
    let (id, secret) = admin(&app, "ops", "tessera-admin").await;
    let mut visitor = Visitor::new(&app);
    let page = visitor.get("/console/sign-in").await.text().await.unwrap();
    assert!(page.contains("Sign in with single sign-on"));
    assert!(!page.contains("client_secret"), "no client form: {page}");
    // The form posted all the same, with the sign-in cookie's token: refused.
    let csrf = visitor.cookie("tessera_console_signin");
    let answer = visitor
        .post(
            "/console/sign-in",
            &[
                ("csrf", &csrf),
                ("client_id", id.as_str()),
                ("client_secret", secret.expose()),
            ],
        )
        .await;
    let (status, message) = refusal(answer).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(message.contains("turned off"), "{message}");
}
