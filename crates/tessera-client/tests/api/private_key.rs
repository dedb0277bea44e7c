//! Client authentication without a shared secret against the real server: `private_key_jwt`
//! (RFC 7523 section 2.2), where the client signs a new assertion for every token request,
//! and an assertion file that the platform rewrites, which the client reads for every
//! request. The assertions the file holds are signed here by `jsonwebtoken`
//! (`tessera_testkit::dpop::ProofKey`), not by the client kit.

use serde_json::{json, Value};
use tessera_client::{ClientAuth, ClientKey};
use tessera_store::{AuthMethod, Credential, KeySource};
use tessera_testkit::claims_of;
use tessera_testkit::dpop::ProofKey;

use crate::{ClientId, Error, ErrorCode, TestServer};

/// Registers a `private_key_jwt` client of plan `pro` with the JWK Set `jwks`.
async fn register(server: &TestServer, jwks: Value) -> ClientId {
    let app = &server.app;
    let client = app
        .registrar()
        .create_keyed_client(
            "pro",
            "pk",
            AuthMethod::PrivateKeyJwt,
            Credential::Keys(KeySource::Jwks(jwks.to_string())),
        )
        .await
        .unwrap();
    app.sync().await;
    client.id
}

/// The JWK Set of one public key under `kid`, as a client registers it.
fn jwks(public: &Value, kid: &str, alg: &str) -> Value {
    let mut jwk = public.clone();
    jwk["kid"] = json!(kid);
    jwk["alg"] = json!(alg);
    jwk["use"] = json!("sig");
    json!({ "keys": [jwk] })
}

/// The `client_assertion`s the server was sent so far.
fn assertions(server: &TestServer) -> Vec<String> {
    server
        .seen()
        .into_iter()
        .filter_map(|seen| seen.assertion)
        .collect()
}

#[tokio::test]
async fn a_private_key_client_signs_a_new_assertion_for_each_request() {
    let server = TestServer::spawn(3600).await;
    for key in [ClientKey::generate_ed25519(), ClientKey::generate_p256()] {
        let alg = key.algorithm().as_str();
        let id = register(&server, jwks(key.public_jwk(), "k1", alg)).await;
        let client = server
            .builder_without_auth(&id, "news-api")
            .auth(ClientAuth::private_key(key, Some("k1".into())))
            .build()
            .unwrap();
        let before = assertions(&server).len();
        let first = client.request_token().await.unwrap();
        let second = client.request_token().await.unwrap();
        assert_eq!(claims_of(&first.access_token)["client_id"], id.as_str());
        assert_ne!(first.access_token, second.access_token);
        assert_eq!(&server.statuses()[before..], [200, 200]);

        let sent = &assertions(&server)[before..];
        let (a, b) = (claims_of(&sent[0]), claims_of(&sent[1]));
        assert_ne!(a["jti"], b["jti"], "{alg}: a new jti per request");
        // iss = sub = the client id; aud = the issuer exactly (RFC 7523bis); 60 s by the
        // client's clock, which the server shares here.
        assert_eq!(
            (&a["iss"], &a["sub"]),
            (&json!(id.as_str()), &json!(id.as_str()))
        );
        assert_eq!(a["aud"], server.app.base);
        assert_eq!(a["iat"], server.clock().now());
        assert_eq!(a["exp"], server.clock().now() + 60);
        let header: Value = {
            use base64::Engine;
            let part = sent[0].split('.').next().unwrap();
            let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(part)
                .unwrap();
            serde_json::from_slice(&bytes).unwrap()
        };
        assert_eq!(header["kid"], "k1");
        assert_eq!(header["alg"], alg);

        // The cached path asks once for both calls.
        let requests = server.requests();
        client.token().await.unwrap();
        client.token().await.unwrap();
        assert_eq!(server.requests(), requests + 1);
    }
}

#[tokio::test]
async fn an_assertion_file_is_read_again_for_every_request() {
    let server = TestServer::spawn(3600).await;
    let platform = ProofKey::ed25519();
    let id = register(&server, jwks(platform.jwk(), "platform", "EdDSA")).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tessera");
    let issue = |jti: &str| {
        let now = server.clock().now();
        let claims = json!({
            "iss": id.as_str(), "sub": id.as_str(), "aud": server.app.base,
            "iat": now, "exp": now + 300, "jti": jti,
        });
        platform.sign(&json!({ "alg": "EdDSA", "kid": "platform" }), &claims)
    };
    let client = server
        .builder_without_auth(&id, "news-api")
        .auth(ClientAuth::assertion_file(&path))
        .build()
        .unwrap();

    // The platform writes the file, with a line end, after the client was built.
    let first = issue("rotation-1");
    std::fs::write(&path, format!("{first}\n")).unwrap();
    client.request_token().await.unwrap();
    // Rotated: the next request sends the new one. Sent again, the old one would be
    // refused as a replay.
    let second = issue("rotation-2");
    std::fs::write(&path, &second).unwrap();
    client.request_token().await.unwrap();
    assert_eq!(assertions(&server), [first.clone(), second]);
    assert_eq!(server.statuses(), [200, 200]);

    // The old one again: the server refuses the replay, and the client says so.
    std::fs::write(&path, &first).unwrap();
    let refused = client.request_token().await.unwrap_err();
    assert_eq!(refused.code(), Some(ErrorCode::InvalidClient));

    // No file: no request, and the error names the file.
    std::fs::remove_file(&path).unwrap();
    let requests = server.requests();
    let missing = client.request_token().await.unwrap_err();
    assert!(
        matches!(&missing, Error::AssertionFile { path: p, .. } if *p == path),
        "{missing:?}"
    );
    assert!(missing.to_string().contains("tessera"), "{missing}");
    assert_eq!(server.requests(), requests);
}

#[tokio::test]
async fn a_wrong_key_is_invalid_client_at_once() {
    let server = TestServer::spawn(3600).await;
    let registered = ClientKey::generate_ed25519();
    let id = register(&server, jwks(registered.public_jwk(), "k1", "EdDSA")).await;
    let cases = [
        (
            ClientKey::generate_ed25519(),
            Some("k1"),
            "signature does not verify",
        ),
        (ClientKey::generate_p256(), Some("k1"), "has not registered"),
        (
            ClientKey::generate_ed25519(),
            None,
            "signature does not verify",
        ),
    ];
    for (key, kid, said) in cases {
        let client = server
            .builder_without_auth(&id, "news-api")
            .auth(ClientAuth::private_key(key, kid.map(str::to_owned)))
            .build()
            .unwrap();
        let requests = server.requests();
        let Error::OAuth(refused) = client.token().await.unwrap_err() else {
            panic!("not an OAuth error")
        };
        assert_eq!(refused.status, 401);
        assert_eq!(refused.code, ErrorCode::InvalidClient);
        let description = refused.description.unwrap_or_default();
        assert!(description.contains(said), "{kid:?}: {description}");
        // Not retried: the same key would be refused again.
        assert_eq!(server.requests(), requests + 1);
    }
}
