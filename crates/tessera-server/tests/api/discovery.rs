//! Published keys (RFC 7517), metadata (RFC 8414) and health.

use tessera_testkit::*;

#[tokio::test]
async fn jwks_publishes_public_keys_only() {
    let app = spawn_app().await;
    let jwks: serde_json::Value = app
        .http
        .get(app.url("/.well-known/jwks.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
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
        serde_json::json!(["client_secret_basic", "client_secret_post"])
    );
    assert_eq!(
        doc["scopes_supported"],
        serde_json::json!(["market-data-api", "news-api"])
    );
}

#[tokio::test]
async fn health_and_readiness() {
    let app = spawn_app().await;
    let healthz = app.http.get(app.url("/healthz")).send().await.unwrap();
    assert_eq!(healthz.status(), 200);
    let readyz = app.http.get(app.url("/readyz")).send().await.unwrap();
    assert_eq!(readyz.status(), 200);
}
