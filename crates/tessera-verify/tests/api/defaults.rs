//! The defaults the README promises, on the verifier's own clock: 30 s of leeway on `exp`
//! and `nbf`, and at most one JWKS fetch per 30 s for unknown `kid`s.

use std::time::Duration;

use serde_json::json;
use tessera_proto::ManualClock;
use tessera_verify::{Verifier, VerifyError};

use crate::helpers::{claims, jwks, TestIssuer, TestKey, AUDIENCE, ISSUER};

#[tokio::test]
async fn exp_and_nbf_have_30_s_of_leeway() {
    let key = TestKey::ed25519();
    let t: u64 = 1_800_000_000;
    let clock = ManualClock::at(t as i64);
    let verifier = Verifier::builder(ISSUER, AUDIENCE)
        .static_keys(jwks(&[&key]))
        .clock(clock.clone())
        .build()
        .unwrap();
    let at = |secs: u64| clock.set(secs as i64);
    let with = |times: serde_json::Value| {
        let mut c = claims(ISSUER);
        for (name, value) in times.as_object().unwrap() {
            c[name] = value.clone();
        }
        key.sign(&c)
    };

    // Expired at t: still taken 29 s later, not 30 s later (valid while now < exp + 30).
    let expiring = with(json!({"iat": t - 600, "exp": t}));
    at(t + 29);
    verifier.verify(&expiring).await.unwrap();
    for late in [30, 31] {
        at(t + late);
        assert_eq!(
            verifier.verify(&expiring).await,
            Err(VerifyError::Expired),
            "{late} s after exp"
        );
    }

    // Not before t + 1000: taken from 30 s earlier, not 31 s earlier.
    let early = with(json!({"iat": t, "nbf": t + 1000, "exp": t + 2000}));
    at(t + 1000 - 30);
    verifier.verify(&early).await.unwrap();
    at(t + 1000 - 31);
    assert_eq!(verifier.verify(&early).await, Err(VerifyError::NotYetValid));
}

#[tokio::test]
async fn an_unknown_kid_fetches_the_keys_again_after_30_s_not_before() {
    let old = TestKey::ed25519();
    let new = TestKey::ed25519();
    let issuer = TestIssuer::spawn(jwks(&[&old])).await;
    let clock = ManualClock::starting_now();
    let verifier = Verifier::builder(&issuer.url, AUDIENCE)
        .clock(clock.clone())
        .build()
        .unwrap();
    verifier
        .verify(&old.sign(&claims(&issuer.url)))
        .await
        .unwrap();
    assert_eq!(issuer.hits.jwks(), 1);

    // A key published just after the fetch: its tokens wait for the interval to pass.
    *issuer.keys.write().unwrap() = jwks(&[&old, &new]);
    let token = new.sign(&claims(&issuer.url));
    clock.advance(Duration::from_secs(30) - Duration::from_millis(1));
    assert_eq!(verifier.verify(&token).await, Err(VerifyError::UnknownKey));
    assert_eq!(issuer.hits.jwks(), 1, "fetched again within 30 s");
    clock.advance(Duration::from_millis(1));
    verifier.verify(&token).await.unwrap();
    assert_eq!(issuer.hits.jwks(), 2);
}
