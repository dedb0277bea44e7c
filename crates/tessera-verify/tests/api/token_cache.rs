//! The cache of verified tokens: a repeat is a lookup, but never for other bytes, past `exp`
//! by the verifier's clock, after its key is retired, or beyond the capacity; and what is
//! checked per request still is.

use std::time::Duration;

use axum::http::StatusCode;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde_json::json;
use tessera_proto::ManualClock;
use tessera_verify::{ClientCertificate, TokenCacheStats, Verifier, VerifyError};

use crate::helpers::{b64, claims, jwks, static_verifier, TestIssuer, TestKey, AUDIENCE, ISSUER};
use crate::router::{app, bearer, call, whoami_with_certificate};

fn stats(verifier: &Verifier) -> (u64, u64, usize) {
    let TokenCacheStats {
        hits,
        misses,
        entries,
        ..
    } = verifier.token_cache_stats();
    (hits, misses, entries)
}

/// Claims valid from `iat` for ten minutes.
fn claims_at(iat: i64) -> serde_json::Value {
    let mut c = claims(ISSUER);
    c["iat"] = json!(iat);
    c["exp"] = json!(iat + 600);
    c
}

#[tokio::test]
async fn a_repeated_token_is_served_from_the_cache() {
    let key = TestKey::ed25519();
    let verifier = static_verifier(&[&key]);
    let token = key.sign(&claims(ISSUER));
    let first = verifier.verify(&token).await.unwrap();
    assert_eq!(stats(&verifier), (0, 1, 1));
    for i in 1..=3 {
        let again = verifier.verify(&token).await.unwrap();
        assert_eq!(again, first);
        assert_eq!(stats(&verifier), (i, 1, 1));
    }
    // Through the extractors too: the second request is a hit.
    let app = app(verifier.clone());
    let other = key.sign(&claims(ISSUER).tap_jti("another"));
    assert_eq!(bearer(&app, "/quotes", &other).await.status, StatusCode::OK);
    assert_eq!(stats(&verifier), (3, 2, 2));
    assert_eq!(bearer(&app, "/quotes", &other).await.status, StatusCode::OK);
    assert_eq!(stats(&verifier), (4, 2, 2));
}

/// A small helper so a test can change one claim inline.
trait TapJti {
    fn tap_jti(self, jti: &str) -> Self;
}

impl TapJti for serde_json::Value {
    fn tap_jti(mut self, jti: &str) -> Self {
        self["jti"] = json!(jti);
        self
    }
}

#[tokio::test]
async fn a_token_differing_in_one_byte_is_refused_after_the_original_was_cached() {
    let key = TestKey::ed25519();
    let verifier = static_verifier(&[&key]);
    let token = key.sign(&claims(ISSUER));
    verifier.verify(&token).await.unwrap();
    verifier.verify(&token).await.unwrap();
    assert_eq!(stats(&verifier).0, 1, "the original is cached");

    let (header, rest) = token.split_once('.').unwrap();
    let (payload, signature) = rest.split_once('.').unwrap();
    // One bit of the signature.
    let mut sig = URL_SAFE_NO_PAD.decode(signature).unwrap();
    sig[10] ^= 1;
    let bad_signature = format!("{header}.{payload}.{}", b64(&sig));
    // One byte of the payload: `client-1` becomes `client-2`, the signature kept.
    let mut body = URL_SAFE_NO_PAD.decode(payload).unwrap();
    let at = body.windows(8).position(|w| w == b"client-1").unwrap();
    body[at + 7] = b'2';
    let bad_payload = format!("{header}.{}.{signature}", b64(&body));
    for forged in [&bad_signature, &bad_payload] {
        assert_eq!(forged.len(), token.len());
        assert_eq!(
            verifier.verify(forged).await,
            Err(VerifyError::BadSignature)
        );
    }
    assert_eq!(stats(&verifier), (1, 3, 1), "not served, not remembered");
    assert!(verifier.verify(&token).await.is_ok());
}

#[tokio::test]
async fn a_cached_token_expires_by_the_verifiers_clock() {
    let key = TestKey::ed25519();
    let clock = ManualClock::at(1_000_000);
    let verifier = Verifier::builder(ISSUER, AUDIENCE)
        .static_keys(jwks(&[&key]))
        .leeway(Duration::from_secs(30))
        .clock(clock.clone())
        .build()
        .unwrap();
    let token = key.sign(&claims_at(1_000_000));
    verifier.verify(&token).await.unwrap();
    // exp is 1,000,600; with 30 s of leeway the last valid second is 1,000,629.
    clock.set(1_000_629);
    verifier.verify(&token).await.unwrap();
    assert_eq!(stats(&verifier).0, 1, "served from the cache");
    clock.set(1_000_630);
    assert_eq!(verifier.verify(&token).await, Err(VerifyError::Expired));
    assert_eq!(verifier.verify(&token).await, Err(VerifyError::Expired));
}

#[tokio::test]
async fn a_cached_token_is_refused_once_its_key_is_retired() {
    let old = TestKey::ed25519();
    let new = TestKey::ed25519();
    let issuer = TestIssuer::spawn(jwks(&[&old])).await;
    let verifier = Verifier::builder(&issuer.url, AUDIENCE)
        .clock(ManualClock::starting_now())
        .build()
        .unwrap();
    let token = old.sign(&claims(&issuer.url));
    verifier.verify(&token).await.unwrap();
    verifier.verify(&token).await.unwrap();
    assert_eq!(stats(&verifier).0, 1, "cached");

    *issuer.keys.write().unwrap() = jwks(&[&new]);
    verifier.refresh_keys().await.unwrap();
    assert_eq!(verifier.verify(&token).await, Err(VerifyError::UnknownKey));
    assert_eq!(stats(&verifier), (1, 2, 0), "the entry went with its key");

    // Another key published under the retired key's kid does not revive the entry either.
    let mut impostor = TestKey::ed25519();
    impostor.jwk.kid = old.kid().to_owned();
    let token = old.sign(&claims(&issuer.url).tap_jti("second"));
    *issuer.keys.write().unwrap() = jwks(&[&old]);
    verifier.refresh_keys().await.unwrap();
    verifier.verify(&token).await.unwrap();
    *issuer.keys.write().unwrap() = jwks(&[&impostor]);
    verifier.refresh_keys().await.unwrap();
    assert_eq!(
        verifier.verify(&token).await,
        Err(VerifyError::BadSignature)
    );

    // The same key fetched again keeps its entries.
    let token = new.sign(&claims(&issuer.url));
    *issuer.keys.write().unwrap() = jwks(&[&new]);
    verifier.refresh_keys().await.unwrap();
    verifier.verify(&token).await.unwrap();
    verifier.refresh_keys().await.unwrap();
    let hits = stats(&verifier).0;
    verifier.verify(&token).await.unwrap();
    assert_eq!(stats(&verifier).0, hits + 1);
}

#[tokio::test]
async fn the_cache_holds_at_most_its_capacity() {
    let key = TestKey::ed25519();
    let verifier = Verifier::builder(ISSUER, AUDIENCE)
        .static_keys(jwks(&[&key]))
        .token_cache_capacity(10)
        .build()
        .unwrap();
    assert_eq!(verifier.token_cache_stats().capacity, 10);
    let busy = key.sign(&claims(ISSUER).tap_jti("busy"));
    let first = key.sign(&claims(ISSUER).tap_jti("first"));
    verifier.verify(&first).await.unwrap();
    for i in 0..100 {
        verifier.verify(&busy).await.unwrap();
        let token = key.sign(&claims(ISSUER).tap_jti(&format!("jti-{i}")));
        verifier.verify(&token).await.unwrap();
        assert!(stats(&verifier).2 <= 10);
    }
    // The busy token survived every turnover; the first one was evicted.
    let (hits, misses, _) = stats(&verifier);
    assert_eq!(hits, 99);
    verifier.verify(&first).await.unwrap();
    assert_eq!(stats(&verifier).1, misses + 1);
}

/// `token_cache_capacity`: "default 10,000" (rounded down to whole generations, as an
/// explicit 10,000 is).
#[tokio::test]
async fn the_cache_holds_10_000_tokens_by_default() {
    let key = TestKey::ed25519();
    let capacity = |tokens: Option<usize>| {
        let builder = Verifier::builder(ISSUER, AUDIENCE).static_keys(jwks(&[&key]));
        let builder = match tokens {
            Some(tokens) => builder.token_cache_capacity(tokens),
            None => builder,
        };
        builder.build().unwrap().token_cache_stats().capacity
    };
    let default = capacity(None);
    assert_eq!(default, capacity(Some(10_000)));
    assert!((9_900..=10_000).contains(&default), "{default}");
    assert_ne!(default, capacity(Some(20_000)));
}

#[tokio::test]
async fn forged_tokens_are_never_remembered() {
    let key = TestKey::ed25519();
    let verifier = static_verifier(&[&key]);
    let good = key.sign(&claims(ISSUER));
    verifier.verify(&good).await.unwrap();
    // Signed by another key under the published kid, each with other bytes.
    let mut attacker = TestKey::ed25519();
    attacker.jwk.kid = key.kid().to_owned();
    for i in 0..200 {
        let forged = attacker.sign(&claims(ISSUER).tap_jti(&format!("f-{i}")));
        assert_eq!(
            verifier.verify(&forged).await,
            Err(VerifyError::BadSignature)
        );
        assert_eq!(
            verifier.verify(&forged).await,
            Err(VerifyError::BadSignature)
        );
    }
    assert_eq!(stats(&verifier), (0, 401, 1));
    verifier.verify(&good).await.unwrap();
    assert_eq!(stats(&verifier).0, 1);
}

#[tokio::test]
async fn capacity_zero_turns_the_cache_off() {
    let key = TestKey::ed25519();
    let verifier = Verifier::builder(ISSUER, AUDIENCE)
        .static_keys(jwks(&[&key]))
        .token_cache_capacity(0)
        .build()
        .unwrap();
    let token = key.sign(&claims(ISSUER));
    for _ in 0..3 {
        verifier.verify(&token).await.unwrap();
    }
    assert_eq!(verifier.token_cache_stats(), TokenCacheStats::default());
}

/// The audience and what the extractors check per request (scope, certificate binding) are
/// checked on a hit as on a first verification.
#[tokio::test]
async fn per_request_checks_still_run_on_a_hit() {
    let key = TestKey::ed25519();
    let verifier = static_verifier(&[&key]);
    let app = app(verifier.clone());

    // Audience: a token for another API with the scope is cached through `Scoped`, which
    // leaves the audience to itself; a verification that names the audience still refuses it.
    let mut other_api = claims(ISSUER);
    other_api["aud"] = json!(["news-api"]);
    let other_api = key.sign(&other_api);
    assert_eq!(
        bearer(&app, "/quotes", &other_api).await.status,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(stats(&verifier).2, 1, "authentic, so remembered");
    assert_eq!(
        verifier.verify(&other_api).await,
        Err(VerifyError::WrongAudience)
    );
    assert_eq!(stats(&verifier).0, 1, "a hit, and still refused");

    // Scope: the same cached token, a route needing a scope it lacks.
    let token = key.sign(&claims(ISSUER));
    assert_eq!(bearer(&app, "/quotes", &token).await.status, StatusCode::OK);
    let request = axum::http::Request::post("/orders")
        .header("authorization", format!("Bearer {token}"))
        .body(axum::body::Body::empty())
        .unwrap();
    assert_eq!(call(&app, request).await.status, StatusCode::FORBIDDEN);

    // Certificate binding: cached with its certificate, refused without it.
    let certificate = ClientCertificate(b"the client's DER certificate".to_vec());
    let mut bound = claims(ISSUER);
    bound["cnf"] = json!({"x5t#S256": certificate.thumbprint()});
    let bound = key.sign(&bound);
    let with = |presented| whoami_with_certificate(&bound, presented);
    assert_eq!(
        call(&app, with(Some(certificate.clone()))).await.status,
        StatusCode::OK
    );
    let hits = stats(&verifier).0;
    assert_eq!(
        call(&app, with(None)).await.status,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        stats(&verifier).0,
        hits + 1,
        "served from the cache, refused"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_workers_share_the_cache() {
    let key = TestKey::ed25519();
    let verifier = static_verifier(&[&key]);
    let tokens: Vec<String> = (0..10)
        .map(|i| key.sign(&claims(ISSUER).tap_jti(&format!("t-{i}"))))
        .collect();
    let mut set = tokio::task::JoinSet::new();
    for w in 0..8 {
        let verifier = verifier.clone();
        let tokens = tokens.clone();
        set.spawn(async move {
            for i in 0..500 {
                let token = &tokens[(w + i) % tokens.len()];
                assert_eq!(verifier.verify(token).await.unwrap().iss, ISSUER);
            }
        });
    }
    set.join_all().await;
    let (hits, misses, entries) = stats(&verifier);
    assert_eq!(hits + misses, 4000);
    assert_eq!(entries, 10);
    assert!(hits >= 4000 - 8 * 10, "{hits} hits");
}

#[tokio::test]
async fn debug_never_shows_a_cached_token_or_its_claims() {
    let key = TestKey::ed25519();
    let verifier = static_verifier(&[&key]);
    let token = key.sign(&claims(ISSUER));
    verifier.verify(&token).await.unwrap();
    let printed = format!("{verifier:?}");
    let (_, rest) = token.split_once('.').unwrap();
    let (payload, signature) = rest.split_once('.').unwrap();
    for secret in [payload, signature, "7f1c6c3a9b2e4d5f8a0b1c2d3e4f5a6b"] {
        assert!(!printed.contains(secret), "{printed}");
    }
    assert!(printed.contains("entries: 1"), "{printed}");
}
