//! Key rotation as verifiers see it.

use std::time::Duration;

use tessera_proto::Algorithm;

use tessera_testkit::*;

async fn published_kids(app: &TestApp) -> Vec<String> {
    let jwks: serde_json::Value = app
        .http
        .get(app.url("/.well-known/jwks.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    jwks["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["kid"].as_str().unwrap().to_owned())
        .collect()
}

async fn signing_kid(app: &TestApp) -> String {
    let (id, secret) = app.client().await;
    let body: serde_json::Value = app
        .token(&id, &secret, "grant_type=client_credentials&scope=news-api")
        .await
        .json()
        .await
        .unwrap();
    let token = body["access_token"].as_str().unwrap();
    jsonwebtoken::decode_header(token).unwrap().kid.unwrap()
}

#[tokio::test]
async fn a_new_key_is_published_before_it_signs_and_the_old_one_stays() {
    let app = spawn_app().await;
    let old = signing_kid(&app).await;
    let new = app
        .admin()
        .rotate_keys(&app.secrets, Algorithm::EdDSA, 2)
        .await
        .unwrap()
        .kid;
    app.state.sync().await.unwrap();
    // Published at once, not yet signing.
    assert_eq!(published_kids(&app).await, [old.clone(), new.clone()]);
    assert_eq!(signing_kid(&app).await, old);
    app.clock.advance(Duration::from_secs(2));
    // Signing now; the old key stays published while its tokens may live.
    assert_eq!(signing_kid(&app).await, new);
    assert_eq!(published_kids(&app).await, [old, new]);
}
