//! The key cache against a live issuer on 127.0.0.1:0: discovery, the refresh rate limit,
//! rotation, and carrying on with cached keys when the issuer is down.

use std::time::Duration;

use serde_json::json;
use tessera_proto::ManualClock;
use tessera_verify::{KeySourceError, Verifier, VerifyError};
use tokio::task::JoinSet;

use crate::helpers::{claims, jwks, TestIssuer, TestKey, AUDIENCE};

/// `count` tokens signed by `key` under kids nobody published.
fn random_kid_tokens(key: &TestKey, issuer: &str, count: usize) -> Vec<String> {
    (0..count)
        .map(|i| {
            let mut kid = [0u8; 16];
            aws_lc_rs::rand::fill(&mut kid).unwrap();
            let header = json!({
                "alg": "EdDSA",
                "kid": format!("{i}-{}", crate::helpers::b64(kid)),
                "typ": "at+jwt",
            });
            key.sign_with(&header, &claims(issuer))
        })
        .collect()
}

/// Verifies all `tokens` at once and returns the results.
async fn flood(verifier: &Verifier, tokens: Vec<String>) -> Vec<Result<(), VerifyError>> {
    let mut set = JoinSet::new();
    for token in tokens {
        let verifier = verifier.clone();
        set.spawn(async move { verifier.verify(&token).await.map(drop) });
    }
    set.join_all().await
}

#[tokio::test]
async fn unknown_kids_cost_at_most_one_fetch_per_interval() {
    let key = TestKey::ed25519();
    let issuer = TestIssuer::spawn(jwks(&[&key])).await;
    let interval = Duration::from_millis(1500);
    let clock = ManualClock::starting_now();
    let verifier = Verifier::builder(&issuer.url, AUDIENCE)
        .min_refresh_interval(interval)
        .clock(clock.clone())
        .build()
        .unwrap();

    // The first token discovers the key set: one metadata and one JWKS fetch.
    verifier
        .verify(&key.sign(&claims(&issuer.url)))
        .await
        .unwrap();
    assert_eq!((issuer.hits.metadata(), issuer.hits.jwks()), (1, 1));

    // Within the interval, unknown kids fetch nothing.
    let results = flood(&verifier, random_kid_tokens(&key, &issuer.url, 300)).await;
    assert!(results.iter().all(|r| *r == Err(VerifyError::UnknownKey)));
    assert_eq!(issuer.hits.jwks(), 1);

    // After it, 300 concurrent unknown kids cost exactly one fetch; the next 300 none.
    clock.advance(interval);
    let results = flood(&verifier, random_kid_tokens(&key, &issuer.url, 300)).await;
    assert!(results.iter().all(|r| *r == Err(VerifyError::UnknownKey)));
    assert_eq!(issuer.hits.jwks(), 2);
    flood(&verifier, random_kid_tokens(&key, &issuer.url, 300)).await;
    assert_eq!(issuer.hits.jwks(), 2);
    assert_eq!(issuer.hits.metadata(), 1, "jwks_uri is discovered once");

    // The known key went on verifying throughout.
    verifier
        .verify(&key.sign(&claims(&issuer.url)))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_rotated_key_is_fetched_when_first_seen() {
    let old = TestKey::ed25519();
    let new = TestKey::es256();
    let issuer = TestIssuer::spawn(jwks(&[&old])).await;
    let clock = ManualClock::starting_now();
    let verifier = Verifier::builder(&issuer.url, AUDIENCE)
        .min_refresh_interval(Duration::from_millis(100))
        .clock(clock.clone())
        .build()
        .unwrap();
    verifier.refresh_keys().await.unwrap();
    assert_eq!(
        verifier.verify(&new.sign(&claims(&issuer.url))).await,
        Err(VerifyError::UnknownKey),
        "not published yet, and within the interval"
    );

    *issuer.keys.write().unwrap() = jwks(&[&old, &new]);
    clock.advance(Duration::from_millis(100));
    let before = issuer.hits.jwks();
    verifier
        .verify(&new.sign(&claims(&issuer.url)))
        .await
        .unwrap();
    verifier
        .verify(&old.sign(&claims(&issuer.url)))
        .await
        .unwrap();
    assert_eq!(issuer.hits.jwks(), before + 1);
}

/// Verifies `token` (which must pass) until the issuer has served more JWKS fetches than
/// `before`, moving `clock` past the refresh interval each time; panics after 10 s.
async fn until_more_fetches(
    issuer: &TestIssuer,
    verifier: &Verifier,
    clock: &ManualClock,
    token: &str,
    before: usize,
) {
    let started = std::time::Instant::now();
    while issuer.hits.jwks() <= before {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no refresh tried"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
        clock.advance(Duration::from_millis(10));
        verifier.verify(token).await.unwrap();
    }
}

#[tokio::test]
async fn cached_keys_keep_working_when_the_issuer_is_down() {
    let key = TestKey::ed25519();
    let issuer = TestIssuer::spawn(jwks(&[&key])).await;
    // Keys go stale at once, and may be refetched every 10 ms: every verification below
    // tries to refresh, and every try fails.
    let clock = ManualClock::starting_now();
    let verifier = Verifier::builder(&issuer.url, AUDIENCE)
        .cache_lifetime(Duration::ZERO)
        .min_refresh_interval(Duration::from_millis(10))
        .clock(clock.clone())
        .build()
        .unwrap();
    let token = key.sign(&claims(&issuer.url));
    verifier.verify(&token).await.unwrap();

    // Down with an error status: an empty key set answers 503. Each verification of stale
    // keys starts a background refresh; the test waits for each to reach the issuer.
    issuer.keys.write().unwrap().keys.clear();
    for _ in 0..3 {
        let before = issuer.hits.jwks();
        until_more_fetches(&issuer, &verifier, &clock, &token, before).await;
    }
    assert!(matches!(
        verifier.refresh_keys().await,
        Err(KeySourceError::Status { status: 503, .. })
    ));
    assert!(issuer.hits.jwks() >= 3, "refreshes were tried");

    // Down for good: connections are refused.
    issuer.shut_down().await;
    for _ in 0..3 {
        clock.advance(Duration::from_millis(10));
        verifier.verify(&token).await.unwrap();
    }
    assert!(matches!(
        verifier.refresh_keys().await,
        Err(KeySourceError::Http { .. })
    ));
    verifier.verify(&token).await.unwrap();
    let stranger = TestKey::ed25519();
    assert_eq!(
        verifier.verify(&stranger.sign(&claims(&issuer.url))).await,
        Err(VerifyError::UnknownKey)
    );
}

#[tokio::test]
async fn redirects_are_not_followed() {
    let key = TestKey::ed25519();
    let issuer = TestIssuer::spawn(jwks(&[&key])).await;
    let verifier = Verifier::builder(&issuer.url, AUDIENCE)
        .jwks_uri(format!("{}/moved/jwks.json", issuer.url))
        .build()
        .unwrap();
    assert!(matches!(
        verifier.refresh_keys().await,
        Err(KeySourceError::Status { status: 307, .. })
    ));
    assert_eq!(issuer.hits.jwks(), 0);
    assert_eq!(
        verifier.verify(&key.sign(&claims(&issuer.url))).await,
        Err(VerifyError::UnknownKey)
    );
}

#[tokio::test]
async fn metadata_for_another_issuer_is_not_used() {
    let key = TestKey::ed25519();
    let issuer = TestIssuer::spawn(jwks(&[&key])).await;
    // RFC 8414 3.3: the document says `http://127.0.0.1:PORT`, not this spelling.
    let verifier = Verifier::builder(format!("{}/", issuer.url), AUDIENCE)
        .build()
        .unwrap();
    assert!(matches!(
        verifier.refresh_keys().await,
        Err(KeySourceError::IssuerMismatch)
    ));
    assert_eq!(issuer.hits.jwks(), 0);
}

#[tokio::test]
async fn a_minimal_metadata_document_is_enough() {
    // RFC 8414 section 2 requires only `issuer` (and `response_types_supported`, which a
    // verifier has no use for); `jwks_uri` is all a verifier needs besides.
    fn minimal(issuer: &str) -> serde_json::Value {
        json!({"issuer": issuer, "jwks_uri": format!("{issuer}/.well-known/jwks.json")})
    }
    let key = TestKey::es256();
    let issuer = TestIssuer::spawn_with_metadata(jwks(&[&key]), minimal).await;
    let verifier = Verifier::builder(&issuer.url, AUDIENCE).build().unwrap();
    verifier.refresh_keys().await.unwrap();
    let claims = verifier.verify(&key.sign(&claims(&issuer.url))).await;
    assert_eq!(claims.unwrap().client_id, "client-1");
    assert_eq!((issuer.hits.metadata(), issuer.hits.jwks()), (1, 1));
}
