//! The admin API over real HTTP (docs/admin-api.md): who may call it, each resource, each
//! class of error, ETag conflicts, idempotent retries, and that a change is in force before
//! the answer.

use reqwest::{Method, RequestBuilder, Response};
use serde_json::{json, Value};
use tessera_proto::{ClientId, ClientSecret};
use tessera_testkit::*;

const NEWS: &str = "grant_type=client_credentials&scope=news-api";

/// A request to the admin API with `token`.
fn call(app: &TestApp, method: Method, path: &str, token: &str) -> RequestBuilder {
    app.http
        .request(method, app.url(&format!("/admin/v1{path}")))
        .bearer_auth(token)
}

/// The status and problem document of a refusal, checked for its RFC 9457 form.
async fn problem(response: Response) -> (u16, Value) {
    let status = response.status().as_u16();
    assert_eq!(
        response.headers()["content-type"],
        "application/problem+json"
    );
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["status"], status);
    assert!(body["type"]
        .as_str()
        .unwrap()
        .starts_with("urn:tessera:problem:"));
    assert!(!body["title"].as_str().unwrap().is_empty());
    assert!(!body["detail"].as_str().unwrap().is_empty());
    (status, body)
}

fn kind(body: &Value) -> &str {
    body["type"]
        .as_str()
        .unwrap()
        .trim_start_matches("urn:tessera:problem:")
}

async fn json_of(response: Response, status: u16) -> Value {
    assert_eq!(response.status(), status, "{:?}", response.headers());
    response.json().await.unwrap()
}

#[tokio::test]
async fn only_this_servers_admin_tokens_get_in() {
    let app = spawn_app().await;
    let (admin_id, admin) = app.admin_token("tessera-admin").await;
    let (_, reader) = app.admin_token("tessera-admin-read").await;

    // No token: the bare challenge (RFC 6750 section 3.1).
    let answer = app
        .http
        .get(app.url("/admin/v1/plans"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        answer.headers()["www-authenticate"],
        "Bearer realm=\"tessera-admin\""
    );
    assert_eq!(problem(answer).await.0, 401);

    // Not a token of this server, or one for an API: invalid_token.
    let (id, secret) = app.client().await;
    let body = json_of(app.token(&id, &secret, NEWS).await, 200).await;
    let api_token = body["access_token"].as_str().unwrap();
    for token in ["not-a-jwt", api_token] {
        let answer = call(&app, Method::GET, "/plans", token)
            .send()
            .await
            .unwrap();
        let challenge = answer.headers()["www-authenticate"]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(challenge.contains("error=\"invalid_token\""), "{challenge}");
        assert_eq!(problem(answer).await.0, 401);
    }

    // The read scope reads and may not write: 403 insufficient_scope.
    let answer = call(&app, Method::GET, "/plans", &reader)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let answer = call(&app, Method::PUT, "/plans/x", &reader)
        .json(&json!({"scopes": ["news-api"]}))
        .send()
        .await
        .unwrap();
    let challenge = answer.headers()["www-authenticate"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        challenge.contains("error=\"insufficient_scope\"")
            && challenge.contains("scope=\"tessera-admin\""),
        "{challenge}"
    );
    let (status, body) = problem(answer).await;
    assert_eq!((status, kind(&body)), (403, "forbidden"));
    // Nothing was written: no plan "x".
    assert!(!app
        .store
        .plans()
        .await
        .unwrap()
        .iter()
        .any(|p| p.name == "x"));

    // The admin scope's audience is the issuer itself.
    let claims = claims_of(&admin);
    assert_eq!(claims["aud"], json!([app.state.issuer()]));

    // Taking the right away takes effect at once: a disabled admin client's token is refused.
    app.registrar()
        .update_client(admin_id.as_str(), |c| c.enabled = false)
        .await
        .unwrap();
    app.sync().await;
    let answer = call(&app, Method::GET, "/plans", &admin)
        .send()
        .await
        .unwrap();
    assert_eq!(problem(answer).await.0, 401);
}

#[tokio::test]
async fn a_revoked_admin_token_is_refused() {
    let app = spawn_app().await;
    app.registrar()
        .set_plan("admin", "tessera-admin", None)
        .await
        .unwrap();
    let (id, secret) = app
        .client_on("admin", tessera_store::AuthMethod::ClientSecretBasic)
        .await;
    let body = json_of(
        app.token(
            &id,
            &secret,
            "grant_type=client_credentials&scope=tessera-admin",
        )
        .await,
        200,
    )
    .await;
    let token = body["access_token"].as_str().unwrap();
    assert_eq!(
        call(&app, Method::GET, "/keys", token)
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let revoked = app
        .http
        .post(app.url("/connect/revocation"))
        .header("authorization", basic(&id, &secret))
        .form(&[("token", token)])
        .send()
        .await
        .unwrap();
    assert_eq!(revoked.status(), 200);
    let answer = call(&app, Method::GET, "/keys", token)
        .send()
        .await
        .unwrap();
    assert_eq!(problem(answer).await.0, 401);

    // The plan no longer grants the scope: the token it got before no longer works.
    let (_, other) = app.admin_token("tessera-admin").await;
    app.registrar()
        .set_plan("admin", "news-api", None)
        .await
        .unwrap();
    app.sync().await;
    let answer = call(&app, Method::GET, "/keys", &other)
        .send()
        .await
        .unwrap();
    assert_eq!(problem(answer).await.0, 403);
}

#[tokio::test]
async fn plans_are_created_replaced_guarded_and_deleted() {
    let app = spawn_app().await;
    let (_, admin) = app.admin_token("tessera-admin").await;
    let put = |name: &str, body: Value| {
        call(&app, Method::PUT, &format!("/plans/{name}"), &admin).json(&body)
    };

    let created = put(
        "gold",
        json!({"scopes": ["news-api", "oms-api"], "token_ttl": 600,
        "token_rate": {"count": 10, "period_secs": 60}, "reuse_percent": 50}),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(created.status(), 201);
    let first_tag = created.headers()["etag"].to_str().unwrap().to_owned();
    let plan: Value = created.json().await.unwrap();
    assert_eq!(plan["scopes"], json!(["news-api", "oms-api"]));
    assert_eq!(
        plan["token_rate"],
        json!({"count": 10, "period_secs": 60, "burst": 10})
    );
    assert_eq!(plan["clients"], 0);
    assert!(plan["created_at"].as_str().unwrap().ends_with('Z'));

    // A stale If-Match is 412 and changes nothing; the current one replaces (PUT: absent
    // fields take their defaults).
    let replaced = put("gold", json!({"scopes": ["news-api"]}))
        .header("if-match", &first_tag)
        .send()
        .await
        .unwrap();
    assert_eq!(replaced.status(), 200);
    let second_tag = replaced.headers()["etag"].to_str().unwrap().to_owned();
    assert_ne!(second_tag, first_tag);
    let plan: Value = replaced.json().await.unwrap();
    assert_eq!(
        (plan["token_ttl"].clone(), plan["token_rate"].clone()),
        (json!(3600), Value::Null)
    );
    let stale = put("gold", json!({"scopes": ["oms-api"]}))
        .header("if-match", &first_tag)
        .send()
        .await
        .unwrap();
    let (status, body) = problem(stale).await;
    assert_eq!((status, kind(&body)), (412, "precondition-failed"));
    let read = call(&app, Method::GET, "/plans/gold", &admin)
        .send()
        .await
        .unwrap();
    assert_eq!(read.headers()["etag"], second_tag.as_str());
    assert_eq!(
        read.json::<Value>().await.unwrap()["scopes"],
        json!(["news-api"])
    );

    // In force before the answer: a client of the plan gets the new scopes at once.
    let (id, secret) = app
        .client_on("gold", tessera_store::AuthMethod::ClientSecretBasic)
        .await;
    assert_eq!(app.token(&id, &secret, NEWS).await.status(), 200);
    put("gold", json!({"scopes": ["oms-api"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(app.token(&id, &secret, NEWS).await.status(), 400);

    // Listed with its clients; in use, it cannot go (409); unused, it can (204).
    let list = json_of(
        call(&app, Method::GET, "/plans", &admin)
            .send()
            .await
            .unwrap(),
        200,
    )
    .await;
    let gold = list["plans"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "gold")
        .unwrap();
    assert_eq!(gold["clients"], 1);
    let answer = call(&app, Method::DELETE, "/plans/gold", &admin)
        .send()
        .await
        .unwrap();
    let (status, body) = problem(answer).await;
    assert_eq!((status, kind(&body)), (409, "conflict"));
    app.registrar().delete_client(id.as_str()).await.unwrap();
    let answer = call(&app, Method::DELETE, "/plans/gold", &admin)
        .header("if-match", "\"stale\"")
        .send()
        .await
        .unwrap();
    assert_eq!(problem(answer).await.0, 412);
    let answer = call(&app, Method::DELETE, "/plans/gold", &admin)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 204);
    let answer = call(&app, Method::GET, "/plans/gold", &admin)
        .send()
        .await
        .unwrap();
    let (status, body) = problem(answer).await;
    assert_eq!((status, kind(&body)), (404, "not-found"));
}

#[tokio::test]
async fn bad_input_of_every_kind_is_a_clear_4xx_and_writes_nothing() {
    let app = spawn_app().await;
    let (_, admin) = app.admin_token("tessera-admin").await;
    let plans_before = app.store.plans().await.unwrap();
    let put = |name: &str| call(&app, Method::PUT, &format!("/plans/{name}"), &admin);
    let cases: Vec<(RequestBuilder, u16, &str, Option<&str>)> = vec![
        (
            put("bad%20name").json(&json!({"scopes": ["news-api"]})),
            400,
            "invalid-field",
            Some("name"),
        ),
        (
            put("p").json(&json!({"scopes": ["bad\"scope"]})),
            400,
            "invalid-field",
            Some("scopes"),
        ),
        (
            put("p").json(&json!({"scopes": ["two words"]})),
            400,
            "invalid-field",
            Some("scopes"),
        ),
        (
            put("p").json(&json!({"scopes": ["news-api"], "token_ttl": 0})),
            400,
            "invalid-field",
            Some("token_ttl"),
        ),
        (
            put("p").json(&json!({"scopes": ["news-api"], "token_ttl": 86_401})),
            400,
            "invalid-field",
            Some("token_ttl"),
        ),
        (
            put("p").json(&json!({"scopes": ["news-api"], "token_ttl": "long"})),
            400,
            "invalid-body",
            Some("token_ttl"),
        ),
        (
            put("p").json(&json!({"scopes": ["news-api"], "reuse_percent": 100})),
            400,
            "invalid-field",
            Some("reuse_percent"),
        ),
        (
            put("p").json(
                &json!({"scopes": ["news-api"], "token_rate": {"count": 0, "period_secs": 1}}),
            ),
            400,
            "invalid-field",
            Some("token_rate"),
        ),
        (
            put("p").json(&json!({"scopes": ["news-api"], "colour": "red"})),
            400,
            "invalid-body",
            Some("colour"),
        ),
        (
            put("p").json(&json!({"token_ttl": 60})),
            400,
            "invalid-body",
            None,
        ),
        (
            put("p")
                .header("content-type", "application/json")
                .body("{\"scopes\": ["),
            400,
            "invalid-body",
            Some("scopes"),
        ),
        (
            put("p")
                .header("content-type", "application/json")
                .body("{} {}"),
            400,
            "invalid-body",
            None,
        ),
        (
            put("p")
                .header("content-type", "text/plain")
                .body("{\"scopes\": []}"),
            415,
            "unsupported-media-type",
            None,
        ),
        (
            put("p")
                .header("content-type", "application/json")
                .body(vec![b' '; 70_000]),
            413,
            "body-too-large",
            None,
        ),
        (
            call(&app, Method::POST, "/clients", &admin).json(&json!({"plan": "nope"})),
            400,
            "invalid-field",
            Some("plan"),
        ),
        (
            call(&app, Method::POST, "/clients", &admin)
                .json(&json!({"plan": "pro", "name": "a\u{7}b"})),
            400,
            "invalid-field",
            Some("name"),
        ),
        (
            call(&app, Method::POST, "/clients", &admin)
                .json(&json!({"plan": "pro", "token_endpoint_auth_method": "none"})),
            400,
            "invalid-field",
            Some("token_endpoint_auth_method"),
        ),
        (
            call(&app, Method::POST, "/clients", &admin).json(&json!({
                "plan": "pro",
                "token_endpoint_auth_method": "tls_client_auth",
                "tls_client_auth_subject_dn": "CN=billing;O=Acme",
            })),
            400,
            "invalid-field",
            Some("tls_client_auth_subject_dn"),
        ),
        (
            call(&app, Method::GET, "/clients?limit=0", &admin),
            400,
            "invalid-parameter",
            Some("limit"),
        ),
        (
            call(&app, Method::GET, "/clients?limit=x", &admin),
            400,
            "invalid-parameter",
            Some("limit"),
        ),
        (
            call(&app, Method::GET, "/clients?cursor=%00", &admin),
            400,
            "invalid-parameter",
            Some("cursor"),
        ),
        (
            call(
                &app,
                Method::GET,
                "/plans/pro/usage?from=2026-02-30",
                &admin,
            ),
            400,
            "invalid-parameter",
            Some("from"),
        ),
        (
            call(&app, Method::GET, "/clients/nobody", &admin),
            404,
            "not-found",
            None,
        ),
        (
            call(&app, Method::GET, "/nothing-here", &admin),
            404,
            "not-found",
            None,
        ),
        (
            call(&app, Method::PATCH, "/plans/pro", &admin),
            405,
            "method-not-allowed",
            None,
        ),
        (
            call(&app, Method::POST, "/keys/rotate", &admin).json(&json!({"activate_in_secs": -1})),
            400,
            "invalid-field",
            Some("activate_in_secs"),
        ),
        (
            call(&app, Method::POST, "/keys/rotate", &admin).json(&json!({"alg": "HS256"})),
            400,
            "invalid-field",
            Some("alg"),
        ),
    ];
    for (request, want_status, want_kind, want_field) in cases {
        let request = request.build().unwrap();
        let what = format!("{} {}", request.method(), request.url());
        let (status, body) = problem(app.http.execute(request).await.unwrap()).await;
        assert_eq!(
            (status, kind(&body)),
            (want_status, want_kind),
            "{what}: {body}"
        );
        assert_eq!(body["field"].as_str(), want_field, "{what}: {body}");
    }
    assert_eq!(app.store.plans().await.unwrap(), plans_before);
    assert_eq!(
        app.store.clients().await.unwrap().len(),
        1,
        "only the admin client"
    );
    assert_eq!(app.store.keys().await.unwrap().len(), 1);
}

#[tokio::test]
async fn clients_are_created_usable_at_once_paged_changed_rotated_and_deleted() {
    let app = spawn_app().await;
    let (_, admin) = app.admin_token("tessera-admin").await;

    let created = call(&app, Method::POST, "/clients", &admin)
        .json(&json!({"plan": "pro", "name": "acme"}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    let body: Value = created.json().await.unwrap();
    let id = ClientId::parse(body["client_id"].as_str().unwrap()).unwrap();
    let secret = ClientSecret::new(body["client_secret"].as_str().unwrap().to_owned());
    assert_eq!(body["name"], "acme");
    // Usable at once, on this instance, without waiting for a poll.
    assert_eq!(app.token(&id, &secret, NEWS).await.status(), 200);

    // Shown without its secret, with a Location that reads it back.
    let read = call(&app, Method::GET, &format!("/clients/{id}"), &admin)
        .send()
        .await
        .unwrap();
    let tag = read.headers()["etag"].to_str().unwrap().to_owned();
    let shown: Value = read.json().await.unwrap();
    assert!(shown.get("client_secret").is_none());
    assert_eq!(shown["token_endpoint_auth_method"], "client_secret_basic");

    // PATCH disables, at once; a stale If-Match changes nothing.
    let patch =
        |body: Value| call(&app, Method::PATCH, &format!("/clients/{id}"), &admin).json(&body);
    let answer = patch(json!({"enabled": false}))
        .header("if-match", &tag)
        .send()
        .await
        .unwrap();
    let patched = json_of(answer, 200).await;
    assert_eq!(patched["enabled"], false);
    assert_eq!(app.token(&id, &secret, NEWS).await.status(), 401);
    let answer = patch(json!({"enabled": true}))
        .header("if-match", &tag)
        .send()
        .await
        .unwrap();
    assert_eq!(problem(answer).await.0, 412);
    assert_eq!(app.token(&id, &secret, NEWS).await.status(), 401);
    let answer = patch(json!({"enabled": true, "plan": "nope"}))
        .send()
        .await
        .unwrap();
    let (status, body) = problem(answer).await;
    assert_eq!((status, body["field"].as_str()), (400, Some("plan")));
    assert_eq!(
        app.token(&id, &secret, NEWS).await.status(),
        401,
        "nothing half-written"
    );
    json_of(
        patch(json!({"enabled": true, "name": "acme ltd"}))
            .send()
            .await
            .unwrap(),
        200,
    )
    .await;
    assert_eq!(app.token(&id, &secret, NEWS).await.status(), 200);

    // Rotation: the new secret at once, the old one through the grace period.
    let rotated = call(
        &app,
        Method::POST,
        &format!("/clients/{id}/rotate-secret"),
        &admin,
    )
    .json(&json!({"grace_secs": 60}))
    .send()
    .await
    .unwrap();
    let rotated = json_of(rotated, 200).await;
    let new_secret = ClientSecret::new(rotated["client_secret"].as_str().unwrap().to_owned());
    assert!(rotated["previous_secret_valid_until"].is_string());
    assert_eq!(app.token(&id, &new_secret, NEWS).await.status(), 200);
    assert_eq!(app.token(&id, &secret, NEWS).await.status(), 200);
    app.clock.advance(std::time::Duration::from_secs(61));
    assert_eq!(app.token(&id, &secret, NEWS).await.status(), 401);

    // Usage, per day, from the store once the counts are written.
    let outside_the_plan = "grant_type=client_credentials&scope=oms-api";
    assert_eq!(
        app.token(&id, &new_secret, outside_the_plan).await.status(),
        400
    );
    app.state.housekeeping().await;
    let usage = json_of(
        call(&app, Method::GET, &format!("/clients/{id}/usage"), &admin)
            .send()
            .await
            .unwrap(),
        200,
    )
    .await;
    let days = usage["days"].as_array().unwrap();
    assert_eq!(days.len(), 1);
    // Refused: the three requests while it was disabled (issue 29: a disabled client's
    // calls are counted) and the one outside its plan; not the expired previous secret's.
    assert_eq!(
        (days[0]["issued"].clone(), days[0]["refused"].clone()),
        (json!(4), json!(4))
    );
    let plan_usage = json_of(
        call(
            &app,
            Method::GET,
            "/plans/pro/usage?from=2000-01-01",
            &admin,
        )
        .send()
        .await
        .unwrap(),
        200,
    )
    .await;
    assert_eq!(plan_usage["days"][0]["issued"], 4);
    // All clients per hour, for the last day's chart: the admin's token, this client's four
    // and its four refusals.
    let hourly = json_of(
        call(&app, Method::GET, "/usage/hourly", &admin)
            .send()
            .await
            .unwrap(),
        200,
    )
    .await;
    assert_eq!(
        hourly["hours"],
        json!([{"hour": tessera_proto::clock::utc_hour(app.clock.now()), "issued": 5, "refused": 4}])
    );
    let none = json_of(
        call(&app, Method::GET, "/plans/pro/usage?to=2000-01-01", &admin)
            .send()
            .await
            .unwrap(),
        200,
    )
    .await;
    assert_eq!(none["days"], json!([]));

    // Deleted: 204, then 404, and its secret no longer works.
    let answer = call(&app, Method::DELETE, &format!("/clients/{id}"), &admin)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 204);
    let answer = call(&app, Method::DELETE, &format!("/clients/{id}"), &admin)
        .send()
        .await
        .unwrap();
    assert_eq!(problem(answer).await.0, 404);
    assert_eq!(app.token(&id, &new_secret, NEWS).await.status(), 401);
}

/// A client that proves itself with its own keys has no secret: rotating one is refused
/// with 409 and a reason, and the client keeps what it was registered with.
#[tokio::test]
async fn a_keyed_client_has_no_secret_to_rotate() {
    let app = spawn_app().await;
    let (_, admin) = app.admin_token("tessera-admin").await;
    let created = call(&app, Method::POST, "/clients", &admin)
        .json(&json!({"plan": "pro", "name": "keyed",
            "token_endpoint_auth_method": "private_key_jwt",
            "jwks_uri": "https://keys.example/jwks"}))
        .send()
        .await
        .unwrap();
    let created = json_of(created, 201).await;
    assert!(created.get("client_secret").is_none());
    let id = created["client_id"].as_str().unwrap().to_owned();
    let rotated = call(
        &app,
        Method::POST,
        &format!("/clients/{id}/rotate-secret"),
        &admin,
    )
    .json(&json!({"grace_secs": 60}))
    .send()
    .await
    .unwrap();
    let (status, body) = problem(rotated).await;
    assert_eq!(status, 409);
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("no secret to rotate"),
        "{body}"
    );
    let shown = call(&app, Method::GET, &format!("/clients/{id}"), &admin)
        .send()
        .await
        .unwrap();
    let shown = json_of(shown, 200).await;
    assert_eq!(shown["jwks_uri"], "https://keys.example/jwks");
    assert!(shown["previous_secret_valid_until"].is_null(), "{shown}");
}

/// The admin API's certificate and key fields (docs/admin-api.md, docs/https.md):
/// `tls_client_auth_subject_dn`, `_san_dns` and `_san_uri` for `tls_client_auth`, `jwks` for
/// `self_signed_tls_client_auth`, each registered, answered and shown as given, with no
/// secret; two at once, or one for the wrong method, refused (400) naming the field.
#[tokio::test]
async fn certificate_clients_are_registered_with_the_field_they_match() {
    let app = spawn_app().await;
    let (_, admin) = app.admin_token("tessera-admin").await;
    let key = tessera_testkit::dpop::ProofKey::p256().jwk().clone();
    let cases = [
        (
            "tls_client_auth",
            "tls_client_auth_subject_dn",
            json!("CN=billing,O=Acme"),
        ),
        (
            "tls_client_auth",
            "tls_client_auth_san_dns",
            json!("billing.example"),
        ),
        (
            "tls_client_auth",
            "tls_client_auth_san_uri",
            json!("spiffe://acme.example/billing"),
        ),
        (
            "self_signed_tls_client_auth",
            "jwks",
            json!({ "keys": [key] }),
        ),
    ];
    let fields = [
        "tls_client_auth_subject_dn",
        "tls_client_auth_san_dns",
        "tls_client_auth_san_uri",
        "jwks",
        "jwks_uri",
    ];
    for (method, field, value) in &cases {
        let mut body = json!({"plan": "pro", "name": field, "token_endpoint_auth_method": method});
        body[field] = value.clone();
        let created = call(&app, Method::POST, "/clients", &admin)
            .json(&body)
            .send()
            .await
            .unwrap();
        let created = json_of(created, 201).await;
        assert!(created.get("client_secret").is_none(), "{created}");
        let id = created["client_id"].as_str().unwrap().to_owned();
        let shown = call(&app, Method::GET, &format!("/clients/{id}"), &admin)
            .send()
            .await
            .unwrap();
        let shown = json_of(shown, 200).await;
        for view in [&created, &shown] {
            assert_eq!(view["token_endpoint_auth_method"], *method, "{view}");
            assert_eq!(view[field], *value, "{view}");
            for other in fields.iter().filter(|f| *f != field) {
                assert!(view.get(other).is_none(), "{other} in {view}");
            }
        }
    }

    // Two fields at once, and a subject DN for a client of secrets: 400 naming a field, and
    // nothing created.
    let before = call(&app, Method::GET, "/clients", &admin)
        .send()
        .await
        .unwrap();
    let before = json_of(before, 200).await;
    let refused = [
        (
            json!({"plan": "pro", "token_endpoint_auth_method": "tls_client_auth",
                "tls_client_auth_subject_dn": "CN=a", "tls_client_auth_san_dns": "a.example"}),
            "tls_client_auth_subject_dn",
        ),
        (
            json!({"plan": "pro", "token_endpoint_auth_method": "client_secret_basic",
                "tls_client_auth_subject_dn": "CN=a"}),
            "token_endpoint_auth_method",
        ),
    ];
    for (body, field) in refused {
        let answer = call(&app, Method::POST, "/clients", &admin)
            .json(&body)
            .send()
            .await
            .unwrap();
        let (status, problem) = problem(answer).await;
        assert_eq!(
            (status, kind(&problem), problem["field"].as_str()),
            (400, "invalid-field", Some(field)),
            "{body}: {problem}"
        );
    }
    let after = call(&app, Method::GET, "/clients", &admin)
        .send()
        .await
        .unwrap();
    assert_eq!(json_of(after, 200).await, before);
}

#[tokio::test]
async fn pages_follow_the_cursor_in_a_stable_order() {
    let app = spawn_app().await;
    let (admin_id, admin) = app.admin_token("tessera-admin-read").await;
    let mut ids = vec![admin_id.to_string()];
    for _ in 0..5 {
        ids.push(app.client().await.0.to_string());
    }
    ids.sort();
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/clients?limit=2&cursor={c}"),
            None => "/clients?limit=2".to_owned(),
        };
        let page = json_of(
            call(&app, Method::GET, &path, &admin).send().await.unwrap(),
            200,
        )
        .await;
        let clients = page["clients"].as_array().unwrap();
        assert!(clients.len() <= 2);
        seen.extend(
            clients
                .iter()
                .map(|c| c["client_id"].as_str().unwrap().to_owned()),
        );
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    assert_eq!(seen, ids);
    let only_admin = json_of(
        call(&app, Method::GET, "/clients?plan=admin", &admin)
            .send()
            .await
            .unwrap(),
        200,
    )
    .await;
    assert_eq!(only_admin["clients"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn a_retried_create_returns_the_first_answer() {
    let app = spawn_app().await;
    let (admin_id, admin) = app.admin_token("tessera-admin").await;
    let create = |key: &str, body: Value| {
        call(&app, Method::POST, "/clients", &admin)
            .header("idempotency-key", key)
            .json(&body)
    };
    let first = create("onboard-42", json!({"plan": "pro", "name": "acme"}))
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), 201);
    let location = first.headers()["location"].to_str().unwrap().to_owned();
    let first: Value = first.json().await.unwrap();
    let retry = create("onboard-42", json!({"plan": "pro", "name": "acme"}))
        .send()
        .await
        .unwrap();
    assert_eq!(retry.status(), 201);
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    assert_eq!(retry.headers()["location"], location.as_str());
    assert_eq!(
        retry.json::<Value>().await.unwrap(),
        first,
        "secret included"
    );
    assert_eq!(
        app.store.clients().await.unwrap().len(),
        2,
        "the admin client and one more"
    );

    // The same key with another body is refused; another admin's key space is its own.
    let answer = create("onboard-42", json!({"plan": "pro", "name": "other"}))
        .send()
        .await
        .unwrap();
    let (status, body) = problem(answer).await;
    assert_eq!((status, kind(&body)), (422, "idempotency-key-reused"));
    let (_, second_admin) = app.admin_token("tessera-admin").await;
    let theirs = call(&app, Method::POST, "/clients", &second_admin)
        .header("idempotency-key", "onboard-42")
        .json(&json!({"plan": "pro", "name": "acme"}))
        .send()
        .await
        .unwrap();
    let theirs = json_of(theirs, 201).await;
    assert_ne!(theirs["client_id"], first["client_id"]);

    // A key that is no key is refused; the remembered answer is sealed, not stored plain.
    let answer = create("", json!({"plan": "pro"})).send().await.unwrap();
    assert_eq!(problem(answer).await.0, 400);
    let stored = app
        .store
        .idempotent_answer(admin_id.as_str(), "onboard-42")
        .await
        .unwrap()
        .expect("remembered under the admin client");
    let secret = first["client_secret"].as_str().unwrap();
    assert!(!stored
        .answer
        .windows(secret.len())
        .any(|w| w == secret.as_bytes()));
}

#[tokio::test]
async fn keys_are_listed_and_rotated() {
    let app = spawn_app().await;
    let (_, admin) = app.admin_token("tessera-admin").await;
    let keys = json_of(
        call(&app, Method::GET, "/keys", &admin)
            .send()
            .await
            .unwrap(),
        200,
    )
    .await;
    let keys = keys["keys"].as_array().unwrap();
    assert_eq!(keys.len(), 1);
    assert_eq!(keys[0]["status"], "signing");
    let rotated = call(&app, Method::POST, "/keys/rotate", &admin)
        .json(&json!({"activate_in_secs": 300}))
        .send()
        .await
        .unwrap();
    let key = json_of(rotated, 201).await;
    assert_eq!(
        (key["status"].as_str(), key["alg"].as_str()),
        (Some("next"), Some("EdDSA"))
    );
    // Published at once, so verifiers learn it before it signs.
    let jwks = app.jwks().await;
    assert!(jwks["keys"]
        .as_array()
        .unwrap()
        .iter()
        .any(|k| k["kid"] == key["kid"]));
    // The key in use retires when the new one signs, and leaves the JWK Set a day later.
    let listed = json_of(
        call(&app, Method::GET, "/keys", &admin)
            .send()
            .await
            .unwrap(),
        200,
    )
    .await;
    let listed = listed["keys"].as_array().unwrap();
    assert_eq!(listed[0]["retires_at"], key["activates_at"]);
    let retires = app.clock.now() + 300;
    assert_eq!(
        listed[0]["unpublished_at"],
        tessera_proto::clock::rfc3339(retires + 86_400)
    );
    assert_eq!(listed[1]["retires_at"], serde_json::Value::Null);
    // An empty body takes the defaults: EdDSA, signing in ten minutes (README: 600 s).
    let answer = call(&app, Method::POST, "/keys/rotate", &admin)
        .send()
        .await
        .unwrap();
    let key = json_of(answer, 201).await;
    assert_eq!(
        (key["status"].as_str(), key["alg"].as_str()),
        (Some("next"), Some("EdDSA"))
    );
    assert_eq!(
        key["activates_at"],
        tessera_proto::clock::rfc3339(app.clock.now() + 600)
    );
}

#[tokio::test]
async fn every_change_is_audited_without_secrets() {
    let app = spawn_app().await;
    let (admin_id, admin) = app.admin_token("tessera-admin").await;
    let body = json_of(
        call(&app, Method::POST, "/clients", &admin)
            .json(&json!({"plan": "pro"}))
            .send()
            .await
            .unwrap(),
        201,
    )
    .await;
    let id = body["client_id"].as_str().unwrap();
    let secret = body["client_secret"].as_str().unwrap();
    // No body: the old secret keeps working for the default grace, a day (README).
    let rotated = json_of(
        call(
            &app,
            Method::POST,
            &format!("/clients/{id}/rotate-secret"),
            &admin,
        )
        .send()
        .await
        .unwrap(),
        200,
    )
    .await;
    assert_eq!(
        rotated["previous_secret_valid_until"],
        tessera_proto::clock::rfc3339(app.clock.now() + 86_400)
    );
    let log = app.log();
    let ours: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("\"event\":\"admin\"") && l.contains(&format!("client:{id}")))
        .collect();
    assert_eq!(ours.len(), 2, "{ours:?}");
    assert!(
        ours.iter().all(|l| l.contains(admin_id.as_str())),
        "{ours:?}"
    );
    assert!(ours[0].contains("created on plan pro"), "{ours:?}");
    assert!(ours[1].contains("secret rotated"), "{ours:?}");
    assert!(!log.contains(secret), "a secret in the log");
    assert!(!log.contains(&admin), "a token in the log");
}

#[tokio::test]
async fn the_openapi_document_describes_the_whole_surface() {
    let app = spawn_app().await;
    let doc: Value = app
        .http
        .get(app.url("/openapi.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.1"));
    for path in [
        "/connect/token",
        "/connect/introspect",
        "/connect/revocation",
        "/.well-known/jwks.json",
        "/.well-known/oauth-authorization-server",
        "/healthz",
        "/readyz",
        "/metrics",
        "/admin/v1/plans",
        "/admin/v1/plans/{name}",
        "/admin/v1/plans/{name}/usage",
        "/admin/v1/clients",
        "/admin/v1/clients/{id}",
        "/admin/v1/clients/{id}/rotate-secret",
        "/admin/v1/clients/{id}/usage",
        "/admin/v1/keys",
        "/admin/v1/keys/rotate",
        "/admin/v1/audit-events",
    ] {
        assert!(doc["paths"][path].is_object(), "{path} missing");
    }
    let schemes = &doc["components"]["securitySchemes"];
    assert_eq!(schemes["client_basic"]["scheme"], "basic");
    assert_eq!(schemes["admin_token"]["scheme"], "bearer");
    let create = &doc["paths"]["/admin/v1/clients"]["post"]["responses"];
    for status in [
        "201", "400", "401", "403", "412", "413", "415", "422", "503",
    ] {
        assert!(
            create[status].is_object(),
            "POST /admin/v1/clients lacks {status}"
        );
    }
}

/// What scripts/conformance.sh (Schemathesis) found where the document and the server
/// disagreed: each answer here is as the document says.
#[tokio::test]
async fn the_openapi_document_says_what_the_server_answers() {
    let app = spawn_app().await;
    let (_, admin) = app.admin_token("tessera-admin").await;
    let doc: Value = app
        .http
        .get(app.url("/openapi.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let paths = &doc["paths"];

    // /metrics is the Prometheus text format, not OpenMetrics.
    let metrics = app.http.get(app.url("/metrics")).send().await.unwrap();
    let content_type = metrics.headers()["content-type"].to_str().unwrap();
    let documented = paths["/metrics"]["get"]["responses"]["200"]["content"]
        .as_object()
        .unwrap();
    assert!(
        documented
            .keys()
            .any(|t| content_type.starts_with(t.as_str())),
        "{content_type} is not in {documented:?}"
    );

    // The two rotations take an empty body, and the document does not require one.
    for path in [
        "/admin/v1/clients/{id}/rotate-secret",
        "/admin/v1/keys/rotate",
    ] {
        let body = &paths[path]["post"]["requestBody"];
        assert_ne!(body["required"], true, "{path}");
    }
    let rotated = call(&app, Method::POST, "/keys/rotate", &admin)
        .send()
        .await
        .unwrap();
    assert_eq!(rotated.status(), 201);

    // A write can time out (408), and the document describes itself.
    assert!(paths["/admin/v1/plans/{name}"]["put"]["responses"]["408"].is_object());
    assert!(paths["/openapi.json"]["get"]["responses"]["200"].is_object());
}

#[tokio::test]
async fn last_refusals_and_the_clients_being_rate_limited() {
    let app = spawn_app().await;
    let (_, admin) = app.admin_token("tessera-admin-read").await;
    let rate = tessera_store::RateLimit {
        count: 1,
        period_secs: 60,
        burst: 1,
    };
    app.registrar()
        .set_plan_with(
            "metered",
            "news-api",
            &tessera_server::registrar::PlanSettings {
                token_rate: tessera_server::registrar::Change::Set(rate),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let (id, secret) = app
        .client_on("metered", tessera_store::AuthMethod::ClientSecretBasic)
        .await;
    let (calm, calm_secret) = app.client().await;
    assert_eq!(
        app.token(
            &calm,
            &calm_secret,
            "grant_type=client_credentials&scope=oms-api"
        )
        .await
        .status(),
        400
    );
    assert_eq!(app.token(&id, &secret, NEWS).await.status(), 200);
    assert_eq!(app.token(&id, &secret, NEWS).await.status(), 429);

    let refusals = json_of(
        call(
            &app,
            Method::GET,
            &format!("/clients/{id}/refusals"),
            &admin,
        )
        .send()
        .await
        .unwrap(),
        200,
    )
    .await;
    assert_eq!(refusals["refusals"].as_array().unwrap().len(), 1);
    assert_eq!(refusals["refusals"][0]["error"], "rate_limited");
    let calm_refusals = json_of(
        call(
            &app,
            Method::GET,
            &format!("/clients/{calm}/refusals"),
            &admin,
        )
        .send()
        .await
        .unwrap(),
        200,
    )
    .await;
    assert_eq!(calm_refusals["refusals"][0]["error"], "invalid_scope");

    let limited = json_of(
        call(&app, Method::GET, "/rate-limited", &admin)
            .send()
            .await
            .unwrap(),
        200,
    )
    .await;
    let ids: Vec<&str> = limited["clients"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["client_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [id.as_str()], "only the client the rate refused");
    // Ten minutes on, it is no longer being limited "now".
    app.clock.advance(std::time::Duration::from_secs(600));
    let later = json_of(
        call(&app, Method::GET, "/rate-limited", &admin)
            .send()
            .await
            .unwrap(),
        200,
    )
    .await;
    assert_eq!(later["clients"], json!([]));
    let answer = call(&app, Method::GET, "/rate-limited?within=0", &admin)
        .send()
        .await
        .unwrap();
    assert_eq!(problem(answer).await.0, 400);
}

/// An admin client on plan `admin` with a secret.
async fn admin_client(app: &TestApp) -> (ClientId, ClientSecret) {
    app.registrar()
        .set_plan("admin", "tessera-admin tessera-admin-read", None)
        .await
        .unwrap();
    app.client_on("admin", tessera_store::AuthMethod::ClientSecretBasic)
        .await
}

fn challenge_of(response: &Response) -> String {
    response.headers()["www-authenticate"]
        .to_str()
        .unwrap()
        .to_owned()
}

async fn has_plan(app: &TestApp, name: &str) -> bool {
    app.store
        .plans()
        .await
        .unwrap()
        .iter()
        .any(|p| p.name == name)
}

/// RFC 9449 section 7.1: a DPoP-bound admin token is accepted only as `DPoP`, with a fresh
/// proof of its key for this request; as `Bearer`, or with a replayed, foreign or misdirected
/// proof, it is refused and nothing is written.
#[tokio::test]
async fn a_dpop_bound_admin_token_needs_a_proof_of_its_key() {
    use tessera_testkit::dpop::ProofKey;
    let app = spawn_app().await;
    let (id, secret) = admin_client(&app).await;
    let key = ProofKey::p256();
    let endpoint = app.url("/connect/token");
    let body: Value = app
        .http
        .post(&endpoint)
        .header("authorization", basic(&id, &secret))
        .header("dpop", key.proof("POST", &endpoint, app.clock.now()))
        .form(&[
            ("grant_type", "client_credentials"),
            ("scope", "tessera-admin"),
        ])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(body["token_type"], "DPoP", "{body}");
    let token = body["access_token"].as_str().unwrap();
    let plans = app.url("/admin/v1/plans");
    let stolen = app.url("/admin/v1/plans/stolen");
    let plan = json!({"scopes": ["news-api"]});

    // As a bearer token, read or write: 401 with a DPoP challenge, and no plan.
    let answer = app
        .http
        .get(&plans)
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    assert!(
        challenge_of(&answer).starts_with("DPoP realm=\"tessera-admin\", error=\"invalid_token\""),
        "{}",
        challenge_of(&answer)
    );
    assert_eq!(problem(answer).await.0, 401);
    let answer = app
        .http
        .put(&stolen)
        .bearer_auth(token)
        .json(&plan)
        .send()
        .await
        .unwrap();
    assert_eq!(problem(answer).await.0, 401);
    assert!(!has_plan(&app, "stolen").await);

    // As DPoP with a proof of its key for this method and URL: in.
    let dpop = |method: reqwest::Method, url: &str, proof: Option<String>| {
        let mut request = app
            .http
            .request(method, url)
            .header("authorization", format!("DPoP {token}"));
        if let Some(proof) = proof {
            request = request.header("dpop", proof);
        }
        request
    };
    let t = app.clock.now();
    let read = key.proof_with_token("GET", &plans, t, token);
    let answer = dpop(Method::GET, &plans, Some(read.clone()))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let write = key.proof_with_token("PUT", &stolen, t, token);
    let answer = dpop(Method::PUT, &stolen, Some(write))
        .json(&plan)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 201);
    assert!(has_plan(&app, "stolen").await);

    // Refused with invalid_dpop_proof: a replayed proof, none, another key's, one for
    // another URL or method.
    let other = ProofKey::ed25519();
    for (what, method, proof) in [
        ("replayed", Method::GET, Some(read)),
        ("missing", Method::GET, None),
        (
            "another key",
            Method::GET,
            Some(other.proof_with_token("GET", &plans, t, token)),
        ),
        (
            "another URL",
            Method::GET,
            Some(key.proof_with_token("GET", &app.url("/admin/v1/clients"), t, token)),
        ),
        (
            "another method",
            Method::GET,
            Some(key.proof_with_token("DELETE", &plans, t, token)),
        ),
    ] {
        let answer = dpop(method, &plans, proof).send().await.unwrap();
        let challenge = challenge_of(&answer);
        assert!(
            challenge.starts_with("DPoP realm=\"tessera-admin\", error=\"invalid_dpop_proof\""),
            "{what}: {challenge}"
        );
        assert_eq!(problem(answer).await.0, 401, "{what}");
    }
}

/// RFC 8705 section 3: an admin token bound to a client certificate is accepted only on a
/// request that presents that certificate (here from a trusted TLS-terminating proxy's
/// header); without it, or with another certificate, 401 and nothing written.
#[tokio::test]
async fn a_certificate_bound_admin_token_needs_its_certificate() {
    use base64::Engine;
    let app = spawn_with(|setup| {
        setup.config.client_cert_header =
            Some(axum::http::HeaderName::from_static("x-client-cert"));
        setup.config.trusted_proxies = vec!["127.0.0.1".parse().unwrap()];
    })
    .await;
    app.registrar()
        .set_plan("admin", "tessera-admin tessera-admin-read", None)
        .await
        .unwrap();
    let self_signed = |name: &str| {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        let cert = params.self_signed(&key).unwrap();
        (escaped_pem(&cert.pem()), key.public_key_raw().to_vec())
    };
    let (presented, public) = self_signed("admin-robot");
    let (another, _) = self_signed("admin-robot");
    let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
    let jwks = json!({"keys": [{"kty": "EC", "crv": "P-256",
        "x": b64(&public[1..33]), "y": b64(&public[33..65])}]});
    let client = app
        .registrar()
        .create_keyed_client(
            "admin",
            "robot",
            tessera_store::AuthMethod::SelfSignedTlsClientAuth,
            tessera_store::Credential::Certificate(tessera_store::CertificateMatch::Jwks(
                jwks.to_string(),
            )),
        )
        .await
        .unwrap();
    app.sync().await;
    let body: Value = app
        .http
        .post(app.url("/connect/token"))
        .header("x-client-cert", &presented)
        .form(&[
            ("grant_type", "client_credentials"),
            ("scope", "tessera-admin"),
            ("client_id", client.id.as_str()),
        ])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let token = body["access_token"].as_str().expect("a token").to_owned();
    assert!(claims_of(&token)["cnf"]["x5t#S256"].is_string());

    let put = |name: &str, certificate: Option<&str>| {
        let mut request = call(&app, Method::PUT, &format!("/plans/{name}"), &token)
            .json(&json!({"scopes": ["news-api"]}));
        if let Some(certificate) = certificate {
            request = request.header("x-client-cert", certificate);
        }
        request.send()
    };
    for (name, certificate) in [("without", None), ("another", Some(another.as_str()))] {
        let answer = put(name, certificate).await.unwrap();
        let challenge = challenge_of(&answer);
        assert!(
            challenge.contains("error=\"invalid_token\"")
                && challenge.contains("client certificate"),
            "{name}: {challenge}"
        );
        assert_eq!(problem(answer).await.0, 401, "{name}");
        assert!(!has_plan(&app, name).await, "{name}");
    }
    assert_eq!(put("with", Some(&presented)).await.unwrap().status(), 201);
    assert!(has_plan(&app, "with").await);
}
