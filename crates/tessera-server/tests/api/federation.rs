//! Workload identity federation over real HTTP: the three shapes people use (Kubernetes
//! projected service-account tokens, GitHub Actions OIDC tokens, SPIFFE JWT-SVIDs), each
//! signed by the test as its platform would, by a local issuer that serves OIDC discovery and
//! its JWK Set; accepted or refused as the trust policy says.

use serde_json::{json, Value};
use tessera_proto::ClientId;
use tessera_server::registrar::{RegistrarError, TrustPolicyInput};
use tessera_testkit::dpop::ProofKey;
use tessera_testkit::{claims_of, error_of, spawn_with, TestApp};

const JWT_BEARER: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";

/// A platform: an issuer URL under a local server, serving discovery and its keys.
struct Platform {
    issuer: String,
    jwks_uri: String,
    key: ProofKey,
}

impl Platform {
    fn token(&self, claims: &Value) -> String {
        self.key.sign(
            &json!({ "alg": self.key.alg(), "kid": "platform-key", "typ": "JWT" }),
            claims,
        )
    }
}

/// Three platforms on one local server: `/k8s`, `/github`, `/spiffe`.
async fn platforms() -> (Platform, Platform, Platform) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let keys = [ProofKey::ed25519(), ProofKey::p256(), ProofKey::ed25519()];
    let mut router = axum::Router::new();
    for (name, key) in ["k8s", "github", "spiffe"].iter().zip(&keys) {
        let issuer = format!("{base}/{name}");
        let discovery = json!({
            "issuer": issuer,
            "jwks_uri": format!("{issuer}/keys"),
            "id_token_signing_alg_values_supported": [key.alg()],
        });
        let mut jwk = key.jwk().clone();
        jwk["kid"] = json!("platform-key");
        let jwks = json!({ "keys": [jwk] });
        router = router
            .route(
                &format!("/{name}/.well-known/openid-configuration"),
                axum::routing::get(move || async move { axum::Json(discovery) }),
            )
            .route(
                &format!("/{name}/keys"),
                axum::routing::get(move || async move { axum::Json(jwks) }),
            );
    }
    tokio::spawn(async move { axum::serve(listener, router).await });
    let [k8s, github, spiffe] = keys;
    let platform = |name: &str, key| Platform {
        issuer: format!("{base}/{name}"),
        jwks_uri: format!("{base}/{name}/keys"),
        key,
    };
    (
        platform("k8s", k8s),
        platform("github", github),
        platform("spiffe", spiffe),
    )
}

async fn app() -> TestApp {
    spawn_with(|s| {
        s.config.allow_private_jwks_uri = true;
        let many = tessera_store::RateLimit {
            count: 1000,
            period_secs: 60,
            burst: 1000,
        };
        s.config.auth_failures_per_source_and_client = many;
        s.config.auth_failures_per_client = many;
    })
    .await
}

async fn exchange(app: &TestApp, client: &ClientId, token: &str) -> reqwest::Response {
    app.http
        .post(app.url("/connect/token"))
        .form(&[
            ("grant_type", "client_credentials"),
            ("scope", "news-api"),
            ("client_id", client.as_str()),
            ("client_assertion_type", JWT_BEARER),
            ("client_assertion", token),
        ])
        .send()
        .await
        .unwrap()
}

/// The answer's status and, when refused, the description.
async fn outcome(response: reqwest::Response) -> (u16, String) {
    if response.status() == 200 {
        let body: Value = response.json().await.unwrap();
        let claims = claims_of(body["access_token"].as_str().unwrap());
        return (
            200,
            claims["federated_sub"].as_str().unwrap_or("").to_owned(),
        );
    }
    let (status, code, description) = error_of(response).await;
    assert_eq!(code, "invalid_client", "{description}");
    (status, description)
}

#[tokio::test]
async fn the_three_platform_shapes_are_accepted_or_refused_as_their_policy_says() {
    let app = app().await;
    let (k8s, github, spiffe) = platforms().await;
    let (client, _) = app.client().await;
    let now = app.clock.now();
    let admin = app.registrar();
    let policy =
        |name: &str, platform: &Platform, audience: &str, subject: &str| TrustPolicyInput {
            name: name.into(),
            client_id: client.to_string(),
            issuer: platform.issuer.clone(),
            jwks_uri: None,
            audience: audience.into(),
            subject: subject.into(),
            claims: Vec::new(),
            max_assertion_ttl: None,
            ..TrustPolicyInput::default()
        };
    admin
        .put_trust_policy(policy(
            "k8s-payments",
            &k8s,
            "tessera",
            "system:serviceaccount:payments:*",
        ))
        .await
        .unwrap();
    admin
        .put_trust_policy(TrustPolicyInput {
            claims: vec![
                ("repository".into(), "acme/payments".into()),
                ("ref".into(), "refs/heads/main".into()),
            ],
            max_assertion_ttl: Some(600),
            ..policy(
                "gha-main",
                &github,
                "https://github.com/acme",
                "repo:acme/payments:*",
            )
        })
        .await
        .unwrap();
    admin
        .put_trust_policy(TrustPolicyInput {
            jwks_uri: Some(spiffe.jwks_uri.clone()),
            ..policy(
                "spiffe-billing",
                &spiffe,
                "tessera",
                "spiffe://acme.example/ns/prod/sa/billing",
            )
        })
        .await
        .unwrap();

    // Kubernetes: a projected service-account token (an hour long, kubernetes.io claims).
    let sa = |namespace: &str, aud: Value| {
        k8s.token(&json!({
            "iss": k8s.issuer, "aud": aud, "iat": now, "nbf": now, "exp": now + 3600,
            "sub": format!("system:serviceaccount:{namespace}:api"),
            "kubernetes.io": { "namespace": namespace, "serviceaccount": { "name": "api" } },
        }))
    };
    let token = sa("payments", json!(["tessera"]));
    assert_eq!(
        outcome(exchange(&app, &client, &token).await).await,
        (200, "system:serviceaccount:payments:api".to_owned())
    );
    // Platform tokens are reused until they expire: the same one works again.
    assert_eq!(outcome(exchange(&app, &client, &token).await).await.0, 200);
    let (status, why) =
        outcome(exchange(&app, &client, &sa("other", json!(["tessera"]))).await).await;
    assert_eq!(status, 401);
    assert!(why.contains("sub does not match"), "{why}");
    let (_, why) = outcome(exchange(&app, &client, &sa("payments", json!(["vault"]))).await).await;
    assert!(why.contains("aud"), "{why}");

    // GitHub Actions: the repository and ref claims, and a short life.
    let job = |git_ref: &str, lifetime: i64| {
        github.token(&json!({
            "iss": github.issuer, "aud": "https://github.com/acme", "iat": now, "nbf": now,
            "exp": now + lifetime, "jti": "run-1",
            "sub": format!("repo:acme/payments:ref:{git_ref}"),
            "repository": "acme/payments", "repository_owner": "acme", "ref": git_ref,
            "workflow": "deploy", "event_name": "push",
        }))
    };
    assert_eq!(
        outcome(exchange(&app, &client, &job("refs/heads/main", 300)).await).await,
        (200, "repo:acme/payments:ref:refs/heads/main".to_owned())
    );
    let (_, why) = outcome(exchange(&app, &client, &job("refs/heads/dev", 300)).await).await;
    assert!(why.contains("claim"), "{why}");
    let (_, why) = outcome(exchange(&app, &client, &job("refs/heads/main", 3600)).await).await;
    assert!(why.contains("longer than the trust policy"), "{why}");

    // SPIFFE: a JWT-SVID, keys from the policy's jwks_uri.
    let svid = |id: &str| {
        spiffe.token(&json!({
            "iss": spiffe.issuer, "aud": ["tessera"], "iat": now, "exp": now + 300, "sub": id,
        }))
    };
    assert_eq!(
        outcome(
            exchange(
                &app,
                &client,
                &svid("spiffe://acme.example/ns/prod/sa/billing")
            )
            .await
        )
        .await,
        (200, "spiffe://acme.example/ns/prod/sa/billing".to_owned())
    );
    let (status, why) = outcome(
        exchange(
            &app,
            &client,
            &svid("spiffe://acme.example/ns/prod/sa/billing2"),
        )
        .await,
    )
    .await;
    assert_eq!(status, 401);
    assert!(why.contains("sub does not match"), "{why}");

    // Signed by another key, expired, or from an issuer no policy names.
    let forged = ProofKey::ed25519().sign(
        &json!({ "alg": "EdDSA", "kid": "platform-key" }),
        &json!({ "iss": k8s.issuer, "aud": ["tessera"], "exp": now + 60,
                 "sub": "system:serviceaccount:payments:api" }),
    );
    let (_, why) = outcome(exchange(&app, &client, &forged).await).await;
    assert!(why.contains("signature"), "{why}");
    let expired = k8s.token(
        &json!({ "iss": k8s.issuer, "aud": ["tessera"], "exp": now - 600,
                                    "sub": "system:serviceaccount:payments:api" }),
    );
    let (_, why) = outcome(exchange(&app, &client, &expired).await).await;
    assert!(why.contains("expired"), "{why}");
    // "`exp`/`nbf` (60 s leeway)", to the second on the server's clock.
    let timed = |exp: i64, nbf: i64| {
        k8s.token(
            &json!({ "iss": k8s.issuer, "aud": ["tessera"], "exp": exp, "nbf": nbf,
                           "sub": "system:serviceaccount:payments:api" }),
        )
    };
    let at = |token: String| {
        let (app, client) = (&app, &client);
        async move { outcome(exchange(app, client, &token).await).await }
    };
    assert_eq!(at(timed(now - 59, now - 600)).await.0, 200, "59 s past exp");
    let (status, why) = at(timed(now - 60, now - 600)).await;
    assert_eq!(status, 401);
    assert!(why.contains("expired"), "60 s past exp: {why}");
    assert_eq!(
        at(timed(now + 600, now + 60)).await.0,
        200,
        "nbf 60 s ahead"
    );
    let (status, why) = at(timed(now + 600, now + 61)).await;
    assert_eq!(status, 401);
    assert!(why.contains("not valid yet"), "nbf 61 s ahead: {why}");
    let elsewhere = k8s.token(&json!({ "iss": "https://elsewhere.example", "aud": ["tessera"],
                                      "exp": now + 60, "sub": "system:serviceaccount:payments:api" }));
    let (_, why) = outcome(exchange(&app, &client, &elsewhere).await).await;
    assert!(why.contains("no trust policy"), "{why}");

    // A policy binds its own client only.
    let (other, _) = app.client().await;
    let (status, why) = outcome(exchange(&app, &other, &token).await).await;
    assert_eq!(status, 401);
    // Another client: refused with the generic reason, nothing about the policy.
    assert_eq!(why, "client authentication failed");

    // The audit line names the policy, the platform (its issuer, whose port is this test's
    // own) and the external subject.
    let log = app.log();
    assert!(
        log.lines().any(|l| l.contains("token_issued")
            && l.contains("trust_policy")
            && l.contains("k8s-payments")
            && l.contains("federated_iss")
            && l.contains(&k8s.issuer)
            && l.contains("federated_sub")
            && l.contains("system:serviceaccount:payments:api")),
        "{log}"
    );

    // A removed policy stops letting tokens in within seconds.
    assert!(admin.remove_trust_policy("k8s-payments").await.unwrap());
    app.clock.advance(std::time::Duration::from_secs(6));
    app.sync().await;
    let (_, why) = outcome(exchange(&app, &client, &token).await).await;
    assert!(why.contains("no trust policy"), "{why}");
}

#[tokio::test]
async fn a_trust_policy_must_be_well_formed() {
    let app = app().await;
    let (client, _) = app.client().await;
    let good = TrustPolicyInput {
        name: "ok".into(),
        client_id: client.to_string(),
        issuer: "https://token.actions.githubusercontent.com".into(),
        jwks_uri: None,
        audience: "tessera".into(),
        subject: "repo:acme/*".into(),
        claims: vec![("repository_owner_id".into(), "1342004".into())],
        max_assertion_ttl: None,
        ..TrustPolicyInput::default()
    };
    app.registrar()
        .put_trust_policy(good.clone())
        .await
        .unwrap();
    let refusals = [
        (
            TrustPolicyInput {
                name: "bad name".into(),
                ..good.clone()
            },
            ("name", "name"),
        ),
        (
            TrustPolicyInput {
                issuer: "http://issuer.example".into(),
                ..good.clone()
            },
            ("issuer", "issuer"),
        ),
        (
            TrustPolicyInput {
                issuer: "token.actions".into(),
                ..good.clone()
            },
            ("issuer", "issuer"),
        ),
        (
            TrustPolicyInput {
                jwks_uri: Some("ftp://x".into()),
                ..good.clone()
            },
            ("jwks_uri", "jwks_uri"),
        ),
        (
            TrustPolicyInput {
                audience: " ".into(),
                ..good.clone()
            },
            ("audience", "audience"),
        ),
        (
            TrustPolicyInput {
                client_id: "tc_nobody00000000000000000".into(),
                ..good.clone()
            },
            ("client_id", "client"),
        ),
        // M3: the subject's wildcard only at the end, right after ':' or '/'.
        (
            TrustPolicyInput {
                subject: "repo:*:main".into(),
                ..good.clone()
            },
            ("subject", "subject"),
        ),
        (
            TrustPolicyInput {
                subject: String::new(),
                ..good.clone()
            },
            ("subject", "subject"),
        ),
        (
            TrustPolicyInput {
                subject: "*".into(),
                allow_mutable_subject: true,
                ..good.clone()
            },
            ("subject", "subject"),
        ),
        (
            TrustPolicyInput {
                subject: "repo:acme/payments*".into(),
                ..good.clone()
            },
            ("subject", "subject"),
        ),
        (
            TrustPolicyInput {
                subject: "repo:acme/*/*".into(),
                ..good.clone()
            },
            ("subject", "subject"),
        ),
        // GitHub Actions: names in sub change hands; an immutable id must be pinned.
        (
            TrustPolicyInput {
                claims: vec![("repository".into(), "acme/payments".into())],
                ..good.clone()
            },
            ("claims", "repository_id"),
        ),
        (
            TrustPolicyInput {
                issuer: "https://token.actions.githubusercontent.com/acme-enterprise".into(),
                claims: Vec::new(),
                ..good.clone()
            },
            ("claims", "repository_id"),
        ),
        (
            TrustPolicyInput {
                claims: vec![("repository_id".into(), String::new())],
                ..good.clone()
            },
            ("claims", "repository_id"),
        ),
    ];
    for (bad, (field, said)) in refusals {
        let refused = app
            .registrar()
            .put_trust_policy(bad.clone())
            .await
            .unwrap_err();
        // Refused for its input, at the field at fault, and the message says why.
        let at = match &refused {
            RegistrarError::BadTrustPolicy(field, _) => *field,
            RegistrarError::UnknownClient(_) => "client_id",
            other => panic!("{bad:?}: not a refusal of the input: {other:?}"),
        };
        assert_eq!(at, field, "{bad:?}: {refused}");
        assert!(refused.to_string().contains(said), "{bad:?}: {refused}");
    }
    assert_eq!(app.registrar().trust_policies().await.unwrap().len(), 1);
    // Named exceptions: the operator says so.
    for fine in [
        TrustPolicyInput {
            name: "by-name".into(),
            claims: vec![("repository".into(), "acme/payments".into())],
            allow_mutable_subject: true,
            ..good.clone()
        },
        TrustPolicyInput {
            name: "by-id".into(),
            subject: "repo:acme/payments:ref:refs/heads/main".into(),
            claims: vec![("repository_id".into(), "892375".into())],
            ..good.clone()
        },
        TrustPolicyInput {
            name: "k8s".into(),
            issuer: "https://kubernetes.default.svc".into(),
            subject: "system:serviceaccount:payments:*".into(),
            claims: Vec::new(),
            ..good.clone()
        },
    ] {
        app.registrar().put_trust_policy(fine).await.unwrap();
    }

    // A client whose plan administers Tessera: only with allow_admin.
    let (admin_client, _) = app.admin_token("tessera-admin-read").await;
    let on_admin = TrustPolicyInput {
        name: "to-admin".into(),
        client_id: admin_client.to_string(),
        issuer: "https://kubernetes.default.svc".into(),
        subject: "system:serviceaccount:ops:deployer".into(),
        claims: Vec::new(),
        ..good.clone()
    };
    let refused = app
        .registrar()
        .put_trust_policy(on_admin.clone())
        .await
        .unwrap_err();
    assert!(
        matches!(refused, RegistrarError::BadTrustPolicy("allow_admin", _)),
        "{refused:?}"
    );
    assert!(refused.to_string().contains("admin scope"), "{refused}");
    app.registrar()
        .put_trust_policy(TrustPolicyInput {
            allow_admin: true,
            ..on_admin
        })
        .await
        .unwrap();
    assert_eq!(app.registrar().trust_policies().await.unwrap().len(), 5);
}

#[tokio::test]
async fn a_wildcard_stops_at_a_delimiter() {
    let app = app().await;
    let (k8s, _, _) = platforms().await;
    let (client, _) = app.client().await;
    app.registrar()
        .put_trust_policy(TrustPolicyInput {
            name: "payments".into(),
            client_id: client.to_string(),
            issuer: k8s.issuer.clone(),
            audience: "tessera".into(),
            subject: "repo:acme/payments:*".into(),
            ..TrustPolicyInput::default()
        })
        .await
        .unwrap();
    let now = app.clock.now();
    let token = |sub: &str| {
        k8s.token(&json!({ "iss": k8s.issuer, "aud": "tessera", "iat": now,
                           "exp": now + 300, "sub": sub }))
    };
    assert_eq!(
        outcome(
            exchange(
                &app,
                &client,
                &token("repo:acme/payments:ref:refs/heads/main")
            )
            .await
        )
        .await
        .0,
        200
    );
    let (status, why) = outcome(
        exchange(
            &app,
            &client,
            &token("repo:acme/payments-evil:ref:refs/heads/main"),
        )
        .await,
    )
    .await;
    assert_eq!(status, 401);
    assert!(why.contains("sub does not match"), "{why}");

    // Patterns stored before these rules (written to the store directly here, as an older
    // version would have) are taken as exact text: `*` alone admits no one.
    for (name, subject) in [
        ("legacy-any", "*"),
        ("legacy-prefix", "repo:acme/payments*"),
    ] {
        app.store
            .put_trust_policy(&tessera_store::TrustPolicy {
                name: name.into(),
                client_id: client.clone(),
                issuer: k8s.issuer.clone(),
                jwks_uri: None,
                audience: "tessera".into(),
                subject: subject.into(),
                claims: "{}".into(),
                max_assertion_ttl: None,
                created_at: now,
            })
            .await
            .unwrap();
    }
    app.clock.advance(std::time::Duration::from_secs(6));
    app.sync().await;
    for sub in [
        "repo:evil/anything:ref:refs/heads/x",
        "repo:acme/payments-evil:ref:x",
    ] {
        let (status, why) = outcome(exchange(&app, &client, &token(sub)).await).await;
        assert_eq!(status, 401, "{sub}");
        assert!(why.contains("sub does not match"), "{why}");
    }
}

#[tokio::test]
async fn a_policy_with_a_maximum_lifetime_needs_iat() {
    let app = app().await;
    let (k8s, _, _) = platforms().await;
    let (client, _) = app.client().await;
    app.registrar()
        .put_trust_policy(TrustPolicyInput {
            name: "short".into(),
            client_id: client.to_string(),
            issuer: k8s.issuer.clone(),
            jwks_uri: None,
            audience: "tessera".into(),
            subject: "system:serviceaccount:payments:api".into(),
            claims: Vec::new(),
            max_assertion_ttl: Some(600),
            ..TrustPolicyInput::default()
        })
        .await
        .unwrap();
    let now = app.clock.now();
    let token = |iat: Option<i64>, exp: i64| {
        let mut claims = json!({ "iss": k8s.issuer, "aud": "tessera", "exp": exp,
                                 "sub": "system:serviceaccount:payments:api" });
        if let Some(iat) = iat {
            claims["iat"] = json!(iat);
        }
        k8s.token(&claims)
    };
    // A day-long token in its last 500 s: within 600 s of its end, but not of its start.
    let (status, why) = outcome(exchange(&app, &client, &token(None, now + 500)).await).await;
    assert_eq!(status, 401);
    assert!(why.contains("must carry iat"), "{why}");
    let (_, why) =
        outcome(exchange(&app, &client, &token(Some(now - 86_000), now + 500)).await).await;
    assert!(why.contains("longer than the trust policy"), "{why}");
    assert_eq!(
        outcome(exchange(&app, &client, &token(Some(now), now + 500)).await)
            .await
            .0,
        200
    );
}

#[tokio::test]
async fn policies_sharing_an_issuer_are_each_verified_with_their_own_keys() {
    let app = app().await;
    // Two key sets published for one issuer: a development one (whose key more people
    // hold) and the production one.
    let (dev, _, prod) = platforms().await;
    let (client, _) = app.client().await;
    let issuer = "https://spire.acme.example";
    let policy = |name: &str, keys: &Platform, subject: &str| TrustPolicyInput {
        name: name.into(),
        client_id: client.to_string(),
        issuer: issuer.into(),
        jwks_uri: Some(keys.jwks_uri.clone()),
        audience: "tessera".into(),
        subject: subject.into(),
        claims: Vec::new(),
        max_assertion_ttl: None,
        ..TrustPolicyInput::default()
    };
    // Listed by name: the development policy comes first.
    for input in [
        policy("a-dev", &dev, "spiffe://acme.example/dev/*"),
        policy("b-prod", &prod, "spiffe://acme.example/prod/billing"),
    ] {
        app.registrar().put_trust_policy(input).await.unwrap();
    }
    let now = app.clock.now();
    let svid = |keys: &Platform, sub: &str| {
        keys.token(
            &json!({ "iss": issuer, "aud": "tessera", "iat": now, "exp": now + 300,
                            "sub": sub }),
        )
    };
    // The production subject signed with the development key: not production's key (the
    // answer gives the development policy's reason, whose key did sign it).
    let (status, why) = outcome(
        exchange(
            &app,
            &client,
            &svid(&dev, "spiffe://acme.example/prod/billing"),
        )
        .await,
    )
    .await;
    assert_eq!(status, 401, "a dev key passed for the prod policy");
    assert!(why.contains("sub does not match"), "{why}");
    // Each policy admits what its own keys signed.
    for (keys, sub) in [
        (&prod, "spiffe://acme.example/prod/billing"),
        (&dev, "spiffe://acme.example/dev/tests"),
    ] {
        assert_eq!(
            outcome(exchange(&app, &client, &svid(keys, sub)).await).await,
            (200, sub.to_owned())
        );
    }
}

/// Federation key fetches (docs/federation.md): "no private addresses" unless
/// `--allow-private-jwks-uri`, "no redirects, 64 KiB at most". A trust policy whose issuer
/// is on loopback is never asked without the flag; with it, a discovery document that
/// redirects, or a JWK Set one byte over 64 KiB, is refused, and the redirect's target is
/// never asked.
#[tokio::test]
async fn federation_keys_are_fetched_under_the_fetchers_rules() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let key = ProofKey::ed25519();
    let mut jwk = key.jwk().clone();
    jwk["kid"] = json!("platform-key");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let hits = Arc::new(AtomicUsize::new(0));
    let discovery = |name: &str, jwks_uri: String| {
        let body = json!({ "issuer": format!("{base}/{name}"), "jwks_uri": jwks_uri });
        let hits = hits.clone();
        move || {
            hits.fetch_add(1, Ordering::SeqCst);
            let body = body.clone();
            async move { axum::Json(body) }
        }
    };
    // A JWK Set one byte over 64 KiB: the key and a member that pads it.
    let mut big = json!({ "keys": [jwk.clone()], "pad": "" });
    let bare = big.to_string().len();
    big["pad"] = json!("x".repeat(64 * 1024 + 1 - bare));
    let big = big.to_string();
    assert_eq!(big.len(), 64 * 1024 + 1);
    let small = json!({ "keys": [jwk] }).to_string();
    let (counted, target) = (hits.clone(), Arc::new(AtomicUsize::new(0)));
    let target_hits = target.clone();
    let router = axum::Router::new()
        .route(
            "/ok/.well-known/openid-configuration",
            axum::routing::get(discovery("ok", format!("{base}/ok/keys"))),
        )
        .route(
            "/ok/keys",
            axum::routing::get(move || {
                counted.fetch_add(1, Ordering::SeqCst);
                let small = small.clone();
                async move { ([("content-type", "application/json")], small) }
            }),
        )
        .route(
            "/big/.well-known/openid-configuration",
            axum::routing::get(discovery("big", format!("{base}/big/keys"))),
        )
        .route(
            "/big/keys",
            axum::routing::get(move || {
                let big = big.clone();
                async move { ([("content-type", "application/json")], big) }
            }),
        )
        .route(
            "/moved/.well-known/openid-configuration",
            axum::routing::get(|| async {
                (axum::http::StatusCode::FOUND, [("location", "/target")])
            }),
        )
        .route(
            "/target",
            axum::routing::get(move || {
                target_hits.fetch_add(1, Ordering::SeqCst);
                async { "" }
            }),
        );
    tokio::spawn(async move { axum::serve(listener, router).await });

    for allow_private in [false, true] {
        let app = spawn_with(|s| {
            s.config.allow_private_jwks_uri = allow_private;
            let many = tessera_store::RateLimit {
                count: 1000,
                period_secs: 60,
                burst: 1000,
            };
            s.config.auth_failures_per_source_and_client = many;
            s.config.auth_failures_per_client = many;
        })
        .await;
        let (client, _) = app.client().await;
        let now = app.clock.now();
        for name in ["ok", "big", "moved"] {
            app.registrar()
                .put_trust_policy(TrustPolicyInput {
                    name: format!("policy-{name}"),
                    client_id: client.to_string(),
                    issuer: format!("{base}/{name}"),
                    jwks_uri: None,
                    audience: "tessera".into(),
                    subject: "workload".into(),
                    claims: Vec::new(),
                    max_assertion_ttl: None,
                    ..TrustPolicyInput::default()
                })
                .await
                .unwrap();
        }
        app.sync().await;
        let token = |name: &str| {
            key.sign(
                &json!({ "alg": key.alg(), "kid": "platform-key", "typ": "JWT" }),
                &json!({ "iss": format!("{base}/{name}"), "aud": ["tessera"], "iat": now,
                         "exp": now + 300, "sub": "workload" }),
            )
        };
        let before = hits.load(Ordering::SeqCst);
        let (status, why) = outcome(exchange(&app, &client, &token("ok")).await).await;
        if !allow_private {
            assert_eq!(status, 401);
            assert!(why.contains("keys could not be fetched"), "{why}");
            assert_eq!(hits.load(Ordering::SeqCst), before, "loopback never asked");
            continue;
        }
        assert_eq!((status, why.as_str()), (200, "workload"));
        assert_eq!(
            hits.load(Ordering::SeqCst),
            before + 2,
            "discovery, then keys"
        );
        for name in ["big", "moved"] {
            let (status, why) = outcome(exchange(&app, &client, &token(name)).await).await;
            assert_eq!(status, 401, "{name}");
            assert!(why.contains("keys could not be fetched"), "{name}: {why}");
        }
        assert_eq!(target.load(Ordering::SeqCst), 0);
    }
}
