//! DPoP at the token endpoint (RFC 9449 section 5) and resource indicators (RFC 8707), over
//! real HTTP, with proofs signed by `jsonwebtoken` (tessera_testkit::dpop).

use serde_json::{json, Value};
use tessera_proto::{ClientId, ClientSecret};
use tessera_server::registrar::PlanSettings;
use tessera_store::DpopPolicy;
use tessera_testkit::dpop::{claims, ProofKey};
use tessera_testkit::{basic, claims_of, error_of, spawn_app, spawn_with, TestApp, SCOPES};

const FORM: &str = "grant_type=client_credentials&scope=news-api";

async fn token_with(
    app: &TestApp,
    (id, secret): &(ClientId, ClientSecret),
    body: &str,
    proofs: &[&str],
) -> reqwest::Response {
    let mut request = app
        .http
        .post(app.url("/connect/token"))
        .header("authorization", basic(id, secret))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body.to_owned());
    for proof in proofs {
        request = request.header("dpop", *proof);
    }
    request.send().await.expect("the server answers")
}

fn endpoint(app: &TestApp) -> String {
    app.url("/connect/token")
}

fn now(app: &TestApp) -> i64 {
    app.clock.now()
}

async fn set_dpop(app: &TestApp, policy: DpopPolicy) {
    let settings = PlanSettings {
        dpop: Some(policy),
        ..PlanSettings::default()
    };
    app.registrar()
        .set_plan_with("pro", SCOPES, &settings)
        .await
        .unwrap();
    app.sync().await;
}

#[tokio::test]
async fn a_proof_binds_the_token_to_its_key() {
    let app = spawn_app().await;
    let client = app.client().await;
    for key in [ProofKey::ed25519(), ProofKey::p256()] {
        let proof = key.proof("POST", &endpoint(&app), now(&app));
        let answer = token_with(&app, &client, FORM, &[&proof]).await;
        assert_eq!(answer.status(), 200);
        let body: Value = answer.json().await.unwrap();
        assert_eq!(body["token_type"], "DPoP");
        let token = body["access_token"].as_str().unwrap();
        let claims = claims_of(token);
        assert_eq!(claims["cnf"], json!({ "jkt": key.thumbprint() }));

        // Introspection (RFC 9449 section 6.2) says it is a DPoP token and to which key.
        let (id, secret) = &client;
        let seen: Value = app
            .http
            .post(app.url("/connect/introspect"))
            .header("authorization", basic(id, secret))
            .form(&[("token", token)])
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(seen["active"], true);
        assert_eq!(seen["token_type"], "DPoP");
        assert_eq!(seen["cnf"]["jkt"], key.thumbprint().as_str());
    }
    // Without a proof the same client gets a Bearer token, unbound.
    let body: Value = token_with(&app, &client, FORM, &[])
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(body["token_type"], "Bearer");
    assert!(claims_of(body["access_token"].as_str().unwrap())
        .get("cnf")
        .is_none());

    let metadata: Value = app
        .http
        .get(app.url("/.well-known/oauth-authorization-server"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        metadata["dpop_signing_alg_values_supported"],
        json!(["EdDSA", "ES256", "RS256", "PS256"])
    );
}

#[tokio::test]
async fn every_bad_proof_is_refused_and_issues_nothing() {
    let app = spawn_app().await;
    let client = app.client().await;
    let key = ProofKey::ed25519();
    let other = ProofKey::ed25519();
    let (htu, t) = (endpoint(&app), now(&app));

    let used = key.proof("POST", &htu, t);
    assert_eq!(
        token_with(&app, &client, FORM, &[&used]).await.status(),
        200
    );

    let mut private_jwk = key.header();
    private_jwk["jwk"]["d"] = json!("AAAA");
    let mut hmac = key.header();
    hmac["alg"] = json!("HS256");
    let mut typ_jwt = key.header();
    typ_jwt["typ"] = json!("JWT");
    let mut other_key_in_header = other.header();
    other_key_in_header["alg"] = json!(key.alg());
    let mut no_jti = claims("POST", &htu, t);
    no_jti.as_object_mut().unwrap().remove("jti");
    let unsigned = {
        let b64 = |v: &Value| {
            use base64::Engine;
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
        };
        let mut header = key.header();
        header["alg"] = json!("none");
        format!("{}.{}.", b64(&header), b64(&claims("POST", &htu, t)))
    };

    let cases: Vec<(&str, Vec<String>)> = vec![
        ("replayed", vec![used.clone()]),
        ("another method", vec![key.proof("GET", &htu, t)]),
        (
            "another URL",
            vec![key.proof("POST", &app.url("/connect/introspect"), t)],
        ),
        (
            "another host",
            vec![key.proof("POST", "https://elsewhere.example/connect/token", t)],
        ),
        ("stale", vec![key.proof("POST", &htu, t - 120)]),
        ("from the future", vec![key.proof("POST", &htu, t + 120)]),
        // README: "`iat` within 60 s": a second more either way is refused...
        ("61 s old", vec![key.proof("POST", &htu, t - 61)]),
        ("61 s ahead", vec![key.proof("POST", &htu, t + 61)]),
        (
            "signed by another key",
            vec![key.sign(&other_key_in_header, &claims("POST", &htu, t))],
        ),
        (
            "a private key in the header",
            vec![key.sign(&private_jwk, &claims("POST", &htu, t))],
        ),
        ("HS256", vec![key.sign(&hmac, &claims("POST", &htu, t))]),
        ("alg none", vec![unsigned]),
        (
            "typ JWT",
            vec![key.sign(&typ_jwt, &claims("POST", &htu, t))],
        ),
        ("no jti", vec![key.sign(&key.header(), &no_jti)]),
        ("not a JWS", vec!["not-a-proof".to_owned()]),
        (
            "two DPoP headers",
            vec![key.proof("POST", &htu, t), key.proof("POST", &htu, t)],
        ),
    ];
    for (why, proofs) in cases {
        let proofs: Vec<&str> = proofs.iter().map(String::as_str).collect();
        let answer = token_with(&app, &client, FORM, &proofs).await;
        let (status, code, description) = error_of(answer).await;
        assert_eq!(
            (status, code.as_str()),
            (400, "invalid_dpop_proof"),
            "{why}"
        );
        assert!(!description.is_empty(), "{why}");
        for proof in &proofs {
            assert!(!description.contains(proof), "{why}: the proof is echoed");
        }
    }
    // Only the first request issued a token; every refusal counted as one.
    let metrics = app.metrics().await;
    assert!(
        metrics.contains(
            "tessera_token_requests_refused_total{plan=\"pro\",error=\"invalid_dpop_proof\"} 16"
        ),
        "{metrics}"
    );
    // ...and 60 s either way is accepted.
    for iat in [t - 60, t + 60] {
        let proof = key.proof("POST", &htu, iat);
        let answer = token_with(&app, &client, FORM, &[&proof]).await;
        assert_eq!(answer.status(), 200, "iat {} s from now", iat - t);
    }
}

#[tokio::test]
async fn a_plan_decides_whether_dpop_is_required_allowed_or_off() {
    let app = spawn_app().await;
    let client = app.client().await;
    let key = ProofKey::ed25519();

    set_dpop(&app, DpopPolicy::Required).await;
    let (status, code, _) = error_of(token_with(&app, &client, FORM, &[]).await).await;
    assert_eq!((status, code.as_str()), (400, "invalid_dpop_proof"));
    let proof = key.proof("POST", &endpoint(&app), now(&app));
    let body: Value = token_with(&app, &client, FORM, &[&proof])
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(body["token_type"], "DPoP");

    // Off: proofs are ignored, as by a server without DPoP (section 5).
    set_dpop(&app, DpopPolicy::Off).await;
    let proof = key.proof("POST", &endpoint(&app), now(&app));
    let body: Value = token_with(&app, &client, FORM, &[&proof])
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(body["token_type"], "Bearer");
    assert!(claims_of(body["access_token"].as_str().unwrap())
        .get("cnf")
        .is_none());
    // Even a broken one: a Bearer token, bound to no key.
    let answer = token_with(&app, &client, FORM, &["garbage"]).await;
    assert_eq!(answer.status(), 200);
    let body: Value = answer.json().await.unwrap();
    assert_eq!(body["token_type"], "Bearer");
    assert!(claims_of(body["access_token"].as_str().unwrap())
        .get("cnf")
        .is_none());
}

#[tokio::test]
async fn with_nonces_a_proof_must_carry_the_current_one() {
    let app = spawn_with(|s| s.config.dpop_nonce = true).await;
    let client = app.client().await;
    let key = ProofKey::ed25519();
    let htu = endpoint(&app);

    let answer = token_with(&app, &client, FORM, &[&key.proof("POST", &htu, now(&app))]).await;
    let nonce = answer.headers()["dpop-nonce"].to_str().unwrap().to_owned();
    let (status, code, _) = error_of(answer).await;
    assert_eq!((status, code.as_str()), (400, "use_dpop_nonce"));

    let with_nonce = |nonce: &str| {
        let mut c = claims("POST", &htu, now(&app));
        c["nonce"] = json!(nonce);
        key.sign(&key.header(), &c)
    };
    let answer = token_with(&app, &client, FORM, &[&with_nonce(&nonce)]).await;
    assert_eq!(answer.status(), 200);
    assert!(answer.headers().contains_key("dpop-nonce"));
    let (status, code, _) =
        error_of(token_with(&app, &client, FORM, &[&with_nonce("made-up")]).await).await;
    assert_eq!((status, code.as_str()), (400, "use_dpop_nonce"));

    // A nonce is good for its period and the next, not longer.
    app.clock.advance(std::time::Duration::from_secs(301));
    app.sync().await;
    let answer = token_with(&app, &client, FORM, &[&with_nonce(&nonce)]).await;
    assert_eq!(answer.status(), 200);
    app.clock.advance(std::time::Duration::from_secs(600));
    app.sync().await;
    let answer = token_with(&app, &client, FORM, &[&with_nonce(&nonce)]).await;
    let fresh = answer.headers()["dpop-nonce"].to_str().unwrap().to_owned();
    assert_ne!(fresh, nonce);
    let (status, code, _) = error_of(answer).await;
    assert_eq!((status, code.as_str()), (400, "use_dpop_nonce"));
    assert_eq!(
        token_with(&app, &client, FORM, &[&with_nonce(&fresh)])
            .await
            .status(),
        200
    );
}

#[tokio::test]
async fn a_proof_replayed_at_another_instance_is_refused_through_redis() {
    let prefix = tessera_testkit::unique_redis_prefix("dpop");
    let setup = |issuer: &'static str, prefix: String, db: Option<String>| {
        move |s: &mut tessera_testkit::Setup| {
            s.config.issuer = Some(issuer.to_owned());
            s.config.redis_url = Some(tessera_testkit::redis_url());
            s.config.redis_prefix = prefix;
            s.database_url = db;
        }
    };
    let keys_seen = format!("{prefix}seen:*");
    let first = spawn_with(setup("http://tessera.test", prefix.clone(), None)).await;
    let second = spawn_with(setup(
        "http://tessera.test",
        prefix,
        Some(first.db_url.clone()),
    ))
    .await;
    let client = first.client().await;
    second.sync().await;
    let key = ProofKey::ed25519();
    let proof = key.proof("POST", "http://tessera.test/connect/token", now(&first));
    assert_eq!(
        token_with(&first, &client, FORM, &[&proof]).await.status(),
        200
    );
    // Remembered for as long as its iat can be accepted, 60 s either way of the clock:
    // two windows and a second (Redis counts in its own time, not the test's clock).
    let ttls = super::redis_ttls(&keys_seen).await;
    let [ttl] = ttls[..] else {
        panic!("one key seen: {ttls:?}")
    };
    assert!((120..=121).contains(&ttl), "{ttl}");
    let (status, code, description) =
        error_of(token_with(&second, &client, FORM, &[&proof]).await).await;
    assert_eq!((status, code.as_str()), (400, "invalid_dpop_proof"));
    assert!(description.contains("used before"), "{description}");
}

#[tokio::test]
async fn resource_narrows_the_audience_and_the_scopes() {
    let app = spawn_app().await;
    let (id, secret) = app.client().await;
    app.registrar()
        .set_plan("oms", "oms-api", None)
        .await
        .unwrap();
    app.sync().await;
    let token = |body: &'static str| app.token(&id, &secret, body);

    let body: Value =
        token("grant_type=client_credentials&scope=market-data-api%20news-api&resource=news-api")
            .await
            .json()
            .await
            .unwrap();
    assert_eq!(body["scope"], "news-api");
    let claims = claims_of(body["access_token"].as_str().unwrap());
    assert_eq!(claims["aud"], json!(["news-api"]));
    assert_eq!(claims["scope"], "news-api");

    // Without scope, the resources name the scopes.
    let body: Value =
        token("grant_type=client_credentials&resource=market-data-api&resource=news-api")
            .await
            .json()
            .await
            .unwrap();
    assert_eq!(body["scope"], "market-data-api news-api");
    assert_eq!(
        claims_of(body["access_token"].as_str().unwrap())["aud"],
        json!(["market-data-api", "news-api"])
    );

    let (status, code, description) =
        error_of(token("grant_type=client_credentials&scope=news-api&resource=oms-api").await)
            .await;
    assert_eq!((status, code.as_str()), (400, "invalid_target"));
    // An API of another plan is named, since some plan grants it.
    assert!(description.contains("oms-api"), "{description}");
    for (body, secret) in [
        // Not an API at all: not echoed (it could be a mistyped secret).
        (
            "grant_type=client_credentials&scope=news-api&resource=s3cr3t-value",
            Some("s3cr3t-value"),
        ),
        // The scope asked for is not for the resource.
        (
            "grant_type=client_credentials&scope=news-api&resource=market-data-api",
            None,
        ),
        (
            "grant_type=client_credentials&scope=news-api&resource=",
            None,
        ),
        (
            "grant_type=client_credentials&scope=news-api&resource=https://a.example/%23frag",
            None,
        ),
    ] {
        let (status, code, description) = error_of(token(body).await).await;
        assert_eq!((status, code.as_str()), (400, "invalid_target"), "{body}");
        if let Some(secret) = secret {
            assert!(!description.contains(secret), "{description}");
        }
    }
}

/// "Bound tokens are never reused": on a plan that reuses tokens, a client asking with a
/// DPoP proof gets a new token each time, even with the same key (the next request may
/// come with another), while its bearer requests share one token.
#[tokio::test]
async fn dpop_bound_tokens_are_never_reused() {
    use tessera_server::registrar::Change;
    let app = spawn_app().await;
    let reusing = PlanSettings {
        reuse_percent: Change::Set(50),
        ..PlanSettings::default()
    };
    app.registrar()
        .set_plan_with("reusing", "news-api", &reusing)
        .await
        .unwrap();
    let client = app
        .client_on("reusing", tessera_store::AuthMethod::ClientSecretBasic)
        .await;
    let key = ProofKey::ed25519();
    let mut bound = Vec::new();
    for _ in 0..3 {
        let proof = key.proof("POST", &endpoint(&app), now(&app));
        let answer = token_with(&app, &client, FORM, &[&proof]).await;
        assert_eq!(answer.status(), 200);
        let body: Value = answer.json().await.unwrap();
        assert_eq!(body["token_type"], "DPoP");
        let token = body["access_token"].as_str().unwrap().to_owned();
        assert_eq!(claims_of(&token)["cnf"]["jkt"], key.thumbprint().as_str());
        assert!(!bound.contains(&token), "a bound token was reused");
        bound.push(token);
    }
    let bearer = || async {
        let body: Value = token_with(&app, &client, FORM, &[])
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(body["token_type"], "Bearer");
        body["access_token"].as_str().unwrap().to_owned()
    };
    let first = bearer().await;
    assert!(
        !bound.contains(&first),
        "a bound token given as a bearer one"
    );
    assert!(claims_of(&first).get("cnf").is_none());
    assert_eq!(bearer().await, first, "the plan reuses bearer tokens");
}

/// The issuer is the resource of the admin scopes (RFC 8707 section 2; their tokens' `aud` is
/// the issuer): asked for it, with or without a trailing slash, a plan with admin scopes gets
/// those and only those; an API's name stays its own resource on such a plan, and an admin
/// scope's name is no resource. A plan without admin scopes is refused the issuer.
/// (Mutation testing: `resources`' issuer arm and its plan check, grant/mod.rs.)
#[tokio::test]
async fn the_issuer_is_the_resource_of_the_admin_scopes() {
    let app = spawn_app().await;
    app.registrar()
        .set_plan("ops", "tessera-admin-read news-api", None)
        .await
        .unwrap();
    let ops = app
        .client_on("ops", tessera_store::AuthMethod::ClientSecretBasic)
        .await;
    let pro = app.client().await;
    let asking = |client, body: String| {
        let app = &app;
        async move { token_with(app, client, &body, &[]).await }
    };

    for issuer in [app.base.clone(), format!("{}/", app.base)] {
        let answer = asking(
            &ops,
            format!("grant_type=client_credentials&resource={issuer}"),
        );
        let body: Value = answer.await.json().await.unwrap();
        assert_eq!(body["scope"], "tessera-admin-read", "{issuer}: {body}");
        let claims = claims_of(body["access_token"].as_str().unwrap());
        assert_eq!(claims["aud"], json!([app.base]), "{issuer}");
    }
    let both = "grant_type=client_credentials&scope=tessera-admin-read%20news-api";
    let body: Value = asking(&ops, format!("{both}&resource=news-api"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(body["scope"], "news-api", "{body}");
    assert_eq!(
        claims_of(body["access_token"].as_str().unwrap())["aud"],
        json!(["news-api"])
    );

    let refused = [
        (&ops, format!("{both}&resource=tessera-admin-read")),
        (
            &pro,
            format!("grant_type=client_credentials&resource={}", app.base),
        ),
    ];
    for (client, body) in refused {
        let (status, code, _) = error_of(asking(client, body.clone()).await).await;
        assert_eq!((status, code.as_str()), (400, "invalid_target"), "{body}");
    }
}
