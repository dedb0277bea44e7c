//! Published keys (RFC 7517), metadata (RFC 8414) and health.

use tessera_testkit::*;

#[tokio::test]
async fn jwks_publishes_public_keys_only() {
    let app = spawn_app().await;
    let jwks = app.jwks().await;
    let keys = jwks["keys"].as_array().unwrap();
    assert_eq!(keys.len(), 1);
    let key = keys[0].as_object().unwrap();
    assert_eq!(key["kty"], "OKP");
    assert_eq!(key["crv"], "Ed25519");
    assert_eq!(key["alg"], "EdDSA");
    assert_eq!(key["use"], "sig");
    for private in ["d", "p", "q", "dp", "dq", "qi", "k"] {
        assert!(!key.contains_key(private), "private member {private}");
    }
}

#[tokio::test]
async fn metadata_describes_the_server_at_both_addresses() {
    let app = spawn_app().await;
    let mut docs = Vec::new();
    for path in [
        "/.well-known/oauth-authorization-server",
        "/.well-known/openid-configuration",
    ] {
        let doc: serde_json::Value = app
            .http
            .get(app.url(path))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        docs.push(doc);
    }
    assert_eq!(docs[0], docs[1]);
    let doc = &docs[0];
    assert_eq!(doc["issuer"], app.base);
    assert_eq!(doc["token_endpoint"], format!("{}/connect/token", app.base));
    assert_eq!(
        doc["jwks_uri"],
        format!("{}/.well-known/jwks.json", app.base)
    );
    assert_eq!(
        doc["grant_types_supported"],
        serde_json::json!(["client_credentials"])
    );
    assert_eq!(
        doc["token_endpoint_auth_methods_supported"],
        serde_json::json!([
            "client_secret_basic",
            "client_secret_post",
            "private_key_jwt"
        ])
    );
    assert_eq!(
        doc["scopes_supported"],
        serde_json::json!(["market-data-api", "news-api"])
    );
    assert_eq!(
        doc["introspection_endpoint"],
        format!("{}/connect/introspect", app.base)
    );
    assert_eq!(
        doc["revocation_endpoint"],
        format!("{}/connect/revocation", app.base)
    );
}

async fn get(app: &TestApp, path: &str) -> (u16, String) {
    let r = app.http.get(app.url(path)).send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

#[tokio::test]
async fn health_and_readiness() {
    // The background poll runs an hour after start: the test decides when the store was
    // last reached.
    let app = spawn_with(|s| s.config.sync_interval = std::time::Duration::from_secs(3600)).await;
    assert_eq!(get(&app, "/healthz").await, (200, "ok\n".into()));
    assert_eq!(get(&app, "/readyz").await, (200, "ready\n".into()));

    // The store not reached for a while: still ready, it issues from its last registry...
    let (id, secret) = app.client().await;
    app.clock.advance(std::time::Duration::from_secs(300));
    assert_eq!(get(&app, "/readyz").await.0, 200);
    let news = "grant_type=client_credentials&scope=news-api";
    assert_eq!(app.token(&id, &secret, news).await.status(), 200);
    // ... until the registry is older than the staleness bound (5 minutes by default):
    // then not ready, and the token endpoint answers 503 with Retry-After; alive all along.
    app.clock.advance(std::time::Duration::from_secs(1));
    let (status, body) = get(&app, "/readyz").await;
    assert_eq!(status, 503);
    assert!(body.contains("staleness"), "{body}");
    assert_eq!(get(&app, "/healthz").await.0, 200);
    let refused = app.token(&id, &secret, news).await;
    assert_eq!(refused.headers()["retry-after"], "5");
    let (status, error, _) = error_of(refused).await;
    assert_eq!((status, error.as_str()), (503, "temporarily_unavailable"));
    // The store answers again: ready, and issuing, without a restart.
    app.sync().await;
    assert_eq!(get(&app, "/readyz").await.0, 200);
    assert_eq!(app.token(&id, &secret, news).await.status(), 200);

    // No key active yet (the clock before the first key's activation): not ready.
    let now = app.clock.now();
    app.clock.set(now - 3600);
    app.sync().await;
    assert_eq!(
        get(&app, "/readyz").await,
        (503, "no active signing key\n".into())
    );
    app.clock.set(now);
    app.sync().await;
    assert_eq!(get(&app, "/readyz").await.0, 200);
}

/// A server started on a store whose only key activates later waits for that key: it
/// generates none of its own (the key was published ahead so that verifiers learn it first,
/// RFC 7517; a new one would sign at once with a key no verifier has seen announced). Until
/// the activation it publishes the waiting key, is not ready and refuses tokens with 503;
/// from then on it signs with that key.
#[tokio::test]
async fn a_store_whose_only_key_activates_later_is_waited_for() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("tessera.db").display());
    let clock = tessera_server::clock::ManualClock::starting_now();
    let now = clock.now();
    let store = tessera_store::open(&url).await.unwrap();
    // The test kit's master key.
    let secrets = tessera_server::secrets::Secrets::from_bytes(&[7; 32]);
    let waiting =
        tessera_server::keys::generate(&secrets, tessera_proto::Algorithm::EdDSA, now, now + 3600);
    store.insert_key(&waiting).await.unwrap();
    let app = spawn_with(|s| {
        s.database_url = Some(url.clone());
        s.clock = clock.clone();
    })
    .await;

    let kids = |store_keys: Vec<tessera_store::SigningKey>| {
        store_keys.into_iter().map(|k| k.kid).collect::<Vec<_>>()
    };
    assert_eq!(
        kids(app.store.keys().await.unwrap()),
        [waiting.kid.as_str()]
    );
    assert_eq!(app.published_kids().await, [waiting.kid.as_str()]);
    assert_eq!(
        get(&app, "/readyz").await,
        (503, "no active signing key\n".into())
    );
    let (id, secret) = app.client().await;
    let news = "grant_type=client_credentials&scope=news-api";
    let (status, error, _) = error_of(app.token(&id, &secret, news).await).await;
    assert_eq!((status, error.as_str()), (503, "temporarily_unavailable"));

    // The activation comes: ready, and the waiting key signs.
    clock.set(now + 3600);
    app.sync().await;
    assert_eq!(get(&app, "/readyz").await, (200, "ready\n".into()));
    let answer: serde_json::Value = app.token(&id, &secret, news).await.json().await.unwrap();
    let token = answer["access_token"].as_str().unwrap();
    assert_eq!(header_of(token)["kid"], waiting.kid.as_str());
    assert_eq!(kids(app.store.keys().await.unwrap()), [waiting.kid]);
}
