//! Keys fetched over plain http only from this machine, unless the builder allows it.

use std::time::Duration;

use serde_json::json;
use tessera_verify::{ConfigError, KeySourceError, Verifier};

use crate::helpers::{claims, jwks, TestIssuer, TestKey, AUDIENCE};

/// A made-up host: every test here refuses it before a connection is tried, or, once allowed,
/// fails to resolve it (`.example` is reserved, RFC 2606).
const REMOTE: &str = "http://issuer.example";

fn builder(issuer: &str) -> tessera_verify::VerifierBuilder {
    Verifier::builder(issuer, AUDIENCE).http_timeout(Duration::from_secs(2))
}

#[test]
fn plain_http_to_another_host_is_refused_at_build() {
    let refused = |result: Result<Verifier, ConfigError>, url: &str| match result {
        Err(e @ ConfigError::InsecureHttp { .. }) => {
            let message = e.to_string();
            assert!(message.contains(url), "{message}");
            assert!(message.contains("allow_insecure_http"), "{message}");
        }
        other => panic!("{url}: expected InsecureHttp, got {other:?}"),
    };
    refused(builder(REMOTE).build(), REMOTE);
    // A loopback address in the user part or a loopback-looking name is still another host.
    for issuer in [
        "http://127.0.0.1@issuer.example",
        "http://127.0.0.1.issuer.example",
    ] {
        refused(builder(issuer).build(), issuer);
    }
    // A known jwks_uri is held to the same rule, whatever the issuer.
    let keys = "http://keys.example/jwks.json";
    refused(
        builder("https://issuer.example").jwks_uri(keys).build(),
        keys,
    );
    refused(
        builder("http://127.0.0.1:8080").jwks_uri(keys).build(),
        keys,
    );
    // Static keys fetch nothing, but the plan limits still come from the issuer.
    let key = TestKey::ed25519();
    refused(
        builder(REMOTE)
            .static_keys(jwks(&[&key]))
            .plan_limits()
            .build(),
        REMOTE,
    );
}

#[test]
fn plain_http_to_loopback_and_https_anywhere_build() {
    for issuer in [
        "https://issuer.example",
        "http://127.0.0.1:8080",
        "http://127.0.0.2",
        "http://localhost:8080",
        "http://[::1]:8080",
    ] {
        builder(issuer)
            .build()
            .unwrap_or_else(|e| panic!("{issuer}: {e}"));
    }
    builder("https://issuer.example")
        .jwks_uri("http://127.0.0.1:8080/jwks.json")
        .build()
        .unwrap();
    // Static keys fetch nothing: the issuer is only compared with `iss`.
    let key = TestKey::ed25519();
    Verifier::with_static_keys(REMOTE, AUDIENCE, jwks(&[&key])).unwrap();
}

#[tokio::test]
async fn a_loopback_issuer_over_plain_http_works() {
    let key = TestKey::ed25519();
    let issuer = TestIssuer::spawn(jwks(&[&key])).await;
    assert!(issuer.url.starts_with("http://127.0.0.1:"));
    let verifier = builder(&issuer.url).build().unwrap();
    let claims = verifier.verify(&key.sign(&claims(&issuer.url))).await;
    assert_eq!(claims.unwrap().client_id, "client-1");
}

#[tokio::test]
async fn allow_insecure_http_lifts_the_refusal() {
    // Built, and the first fetch gets as far as the network: the name does not resolve.
    let verifier = builder(REMOTE).allow_insecure_http().build().unwrap();
    match verifier.refresh_keys().await {
        Err(KeySourceError::Http { url, .. }) => {
            assert_eq!(
                url,
                format!("{REMOTE}/.well-known/oauth-authorization-server")
            )
        }
        other => panic!("expected a network error, got {other:?}"),
    }
    let verifier = builder("https://issuer.example")
        .jwks_uri("http://keys.example/jwks.json")
        .allow_insecure_http()
        .build()
        .unwrap();
    assert!(matches!(
        verifier.refresh_keys().await,
        Err(KeySourceError::Http { .. })
    ));
}

/// Metadata of a loopback issuer whose keys are on another host, over plain http.
fn remote_keys(issuer: &str) -> serde_json::Value {
    json!({"issuer": issuer, "jwks_uri": "http://keys.example/jwks.json"})
}

#[tokio::test]
async fn a_discovered_plain_http_jwks_uri_on_another_host_is_refused() {
    let issuer = TestIssuer::spawn_with_metadata(jwks(&[]), remote_keys).await;
    let verifier = builder(&issuer.url).build().unwrap();
    assert!(matches!(
        verifier.refresh_keys().await,
        Err(KeySourceError::InsecureJwksUri)
    ));
    assert_eq!(issuer.hits.metadata(), 1);

    let verifier = builder(&issuer.url).allow_insecure_http().build().unwrap();
    assert!(matches!(
        verifier.refresh_keys().await,
        Err(KeySourceError::Http { .. })
    ));
}
