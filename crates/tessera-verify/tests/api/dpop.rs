//! DPoP-bound tokens at an API (RFC 9449 section 7.1), through the extractors: proofs made
//! here from the RFC's definitions (header, claims, `ath`, the RFC 7638 thumbprint as `jkt`),
//! each check of section 4.3 broken once, the replay memory and its per-key share, and the
//! URL a proof names under a nested router.

use aws_lc_rs::digest;
use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use axum::Router;
use serde_json::{json, Value};
use tessera_proto::clock::ManualClock;
use tessera_verify::Verifier;

use crate::helpers::{b64, claims, jwks, TestKey, AUDIENCE, ISSUER};
use crate::router::{app, call, Answer};

const API: &str = "https://api.example.com";

/// A verifier for the API at [`API`] with the signing key `issuer` and the clock `clock`.
fn verifier(issuer: &TestKey, clock: &ManualClock, replay_capacity: usize) -> Verifier {
    Verifier::builder(ISSUER, AUDIENCE)
        .static_keys(jwks(&[issuer]))
        .resource_url(API)
        .clock(clock.clone())
        .dpop_replay_capacity(replay_capacity)
        .build()
        .unwrap()
}

/// The public JWK of a proof key, without `kid`, `alg` or `use`.
fn public_jwk(key: &TestKey) -> Value {
    let mut jwk = json!({"kty": key.jwk.kty, "crv": key.jwk.crv, "x": key.jwk.x});
    if let Some(y) = &key.jwk.y {
        jwk["y"] = json!(y);
    }
    jwk
}

/// The proof header of section 4.2.
fn proof_header(key: &TestKey) -> Value {
    json!({"typ": "dpop+jwt", "alg": key.alg.as_str(), "jwk": public_jwk(key)})
}

/// The proof claims of section 4.2 for `token`.
fn proof_claims(method: &str, url: &str, iat: i64, token: &str, jti: &str) -> Value {
    json!({
        "jti": jti,
        "htm": method,
        "htu": url,
        "iat": iat,
        "ath": b64(digest::digest(&digest::SHA256, token.as_bytes())),
    })
}

/// A token bound to `key` (its RFC 7638 thumbprint, which the test keys use as `kid`).
fn bound_token(issuer: &TestKey, key: &TestKey) -> String {
    let mut claims = claims(ISSUER);
    claims["cnf"] = json!({"jkt": key.kid()});
    issuer.sign(&claims)
}

fn request(method: &str, path: &str, authorization: &str, proofs: &[&str]) -> Request<Body> {
    let mut request = Request::builder()
        .method(method)
        .uri(path)
        .header(header::HOST, "api.example.com")
        .header(header::AUTHORIZATION, authorization);
    for proof in proofs {
        request = request.header("dpop", *proof);
    }
    request.body(Body::empty()).unwrap()
}

fn refused(answer: &Answer, error: &str, description: &str) {
    assert_eq!(answer.status, StatusCode::UNAUTHORIZED, "{}", answer.body);
    assert_eq!(answer.body["error"], error, "{}", answer.body);
    assert_eq!(answer.body["error_description"], description);
    let challenge = answer.challenge.as_deref().unwrap();
    assert!(challenge.starts_with("DPoP realm="), "{challenge}");
    assert!(
        challenge.contains("algs=\"EdDSA ES256 RS256 PS256\""),
        "{challenge}"
    );
}

#[tokio::test]
async fn a_bound_token_passes_only_with_a_fresh_proof_of_its_key_for_this_request() {
    let issuer = TestKey::ed25519();
    let key = TestKey::es256();
    let clock = ManualClock::starting_now();
    let app = app(verifier(&issuer, &clock, 1_000));
    let token = bound_token(&issuer, &key);
    let dpop = format!("DPoP {token}");
    let now = clock.now();
    let url = format!("{API}/whoami");
    let proof = |claims: &Value| key.sign_with(&proof_header(&key), claims);
    let good = proof(&proof_claims("GET", &url, now, &token, "first"));

    let answer = call(&app, request("GET", "/whoami", &dpop, &[&good])).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert_eq!(answer.body, "client-1");
    // The same proof again is a replay.
    let answer = call(&app, request("GET", "/whoami", &dpop, &[&good])).await;
    refused(
        &answer,
        "invalid_dpop_proof",
        "the DPoP proof was used before",
    );
    // Default ports and case in htu are normalised (RFC 9449 section 4.3 step 9).
    let loud = proof(&proof_claims(
        "GET",
        "HTTPS://API.example.com:443/whoami?q=1",
        now,
        &token,
        "normalised",
    ));
    let answer = call(&app, request("GET", "/whoami", &dpop, &[&loud])).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);

    let other = TestKey::ed25519();
    let mut no_ath = proof_claims("GET", &url, now, &token, "no-ath");
    no_ath.as_object_mut().unwrap().remove("ath");
    let mut bad_typ = proof_header(&key);
    bad_typ["typ"] = json!("JWT");
    // One signature character changed, well inside its base64url text.
    let mut forged = proof(&proof_claims("GET", &url, now, &token, "forged")).into_bytes();
    let inside = forged.len() - 10;
    forged[inside] = if forged[inside] == b'A' { b'B' } else { b'A' };
    let forged = String::from_utf8(forged).unwrap();
    let cases: Vec<(&str, Vec<String>, &str)> = vec![
        ("no proof", vec![], "a DPoP proof is required"),
        (
            "two proofs",
            vec![
                proof(&proof_claims("GET", &url, now, &token, "a")),
                proof(&proof_claims("GET", &url, now, &token, "b")),
            ],
            "more than one DPoP header",
        ),
        (
            "another method",
            vec![proof(&proof_claims("POST", &url, now, &token, "m"))],
            "the DPoP proof htm is not this request's method",
        ),
        (
            "another path",
            vec![proof(&proof_claims(
                "GET",
                &format!("{API}/other"),
                now,
                &token,
                "p",
            ))],
            "the DPoP proof htu is not this request's URI",
        ),
        (
            "another origin, the request's Host notwithstanding",
            vec![proof(&proof_claims(
                "GET",
                "https://evil.example/whoami",
                now,
                &token,
                "o",
            ))],
            "the DPoP proof htu is not this request's URI",
        ),
        (
            "61 s old",
            vec![proof(&proof_claims("GET", &url, now - 61, &token, "old"))],
            "the DPoP proof iat is too far from the server's time",
        ),
        (
            "61 s ahead",
            vec![proof(&proof_claims("GET", &url, now + 61, &token, "ahead"))],
            "the DPoP proof iat is too far from the server's time",
        ),
        (
            "no ath",
            vec![proof(&no_ath)],
            "the DPoP proof ath is missing or not the hash of the access token",
        ),
        (
            "the ath of another token",
            vec![proof(&proof_claims(
                "GET",
                &url,
                now,
                "another token",
                "ath",
            ))],
            "the DPoP proof ath is missing or not the hash of the access token",
        ),
        (
            "an empty jti",
            vec![proof(&proof_claims("GET", &url, now, &token, ""))],
            "the DPoP proof lacks jti, htm, htu or iat, or one is malformed",
        ),
        (
            "a jti of 257 bytes",
            vec![proof(&proof_claims(
                "GET",
                &url,
                now,
                &token,
                &"j".repeat(257),
            ))],
            "the DPoP proof lacks jti, htm, htu or iat, or one is malformed",
        ),
        (
            "another key's proof",
            vec![other.sign_with(
                &proof_header(&other),
                &proof_claims("GET", &url, now, &token, "k"),
            )],
            "the DPoP proof key is not the key the token is bound to",
        ),
        (
            "a forged signature",
            vec![forged],
            "the DPoP proof signature does not verify with its jwk",
        ),
    ];
    for (what, proofs, description) in cases {
        let proofs: Vec<&str> = proofs.iter().map(String::as_str).collect();
        let answer = call(&app, request("GET", "/whoami", &dpop, &proofs)).await;
        assert_eq!(answer.body["error_description"], description, "{what}");
        refused(&answer, "invalid_dpop_proof", description);
    }
    let answer = call(
        &app,
        request(
            "GET",
            "/whoami",
            &dpop,
            &[&key.sign_with(&bad_typ, &proof_claims("GET", &url, now, &token, "typ"))],
        ),
    )
    .await;
    assert_eq!(answer.body["error"], "invalid_dpop_proof");
    // A jti of exactly 256 bytes is fine.
    let long = proof(&proof_claims("GET", &url, now, &token, &"j".repeat(256)));
    let answer = call(&app, request("GET", "/whoami", &dpop, &[&long])).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    // 60 s either way is within the window.
    for (jti, iat) in [("edge-old", now - 60), ("edge-new", now + 60)] {
        let edge = proof(&proof_claims("GET", &url, iat, &token, jti));
        let answer = call(&app, request("GET", "/whoami", &dpop, &[&edge])).await;
        assert_eq!(answer.status, StatusCode::OK, "{jti}: {}", answer.body);
    }

    // The scheme must match the binding, both ways.
    let answer = call(
        &app,
        request("GET", "/whoami", &format!("Bearer {token}"), &[]),
    )
    .await;
    refused(
        &answer,
        "invalid_token",
        "the token is bound to a DPoP key; send it with the DPoP scheme and a proof",
    );
    let plain = issuer.sign(&claims(ISSUER));
    let answer = call(
        &app,
        request("GET", "/whoami", &format!("DPoP {plain}"), &[&good]),
    )
    .await;
    refused(
        &answer,
        "invalid_token",
        "the token is not DPoP-bound; send it with the Bearer scheme",
    );
}

/// Behind `Router::nest`, the proof names the whole path the client called.
#[tokio::test]
async fn a_nested_api_checks_the_path_the_client_called() {
    let issuer = TestKey::ed25519();
    let key = TestKey::ed25519();
    let clock = ManualClock::starting_now();
    let app = Router::new().nest("/market", app(verifier(&issuer, &clock, 1_000)));
    let token = bound_token(&issuer, &key);
    let dpop = format!("DPoP {token}");
    let proof = |url: &str, jti: &str| {
        key.sign_with(
            &proof_header(&key),
            &proof_claims("GET", url, clock.now(), &token, jti),
        )
    };
    let whole = proof(&format!("{API}/market/whoami"), "whole");
    let answer = call(&app, request("GET", "/market/whoami", &dpop, &[&whole])).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    let stripped = proof(&format!("{API}/whoami"), "stripped");
    let answer = call(&app, request("GET", "/market/whoami", &dpop, &[&stripped])).await;
    refused(
        &answer,
        "invalid_dpop_proof",
        "the DPoP proof htu is not this request's URI",
    );
}

/// RFC 9449 section 11.1 with a bound: one key that fills its share of the replay memory is
/// refused alone; other keys go on, and its share comes back with the next generation.
#[tokio::test]
async fn one_key_cannot_fill_the_replay_memory_for_all() {
    let issuer = TestKey::ed25519();
    let greedy = TestKey::ed25519();
    let polite = TestKey::es256();
    let clock = ManualClock::starting_now();
    // A sixteenth of 32: two proofs per key and generation.
    let app = app(verifier(&issuer, &clock, 32));
    let url = format!("{API}/whoami");
    let send = |key: &TestKey, jti: &str| {
        let token = bound_token(&issuer, key);
        let proof = key.sign_with(
            &proof_header(key),
            &proof_claims("GET", &url, clock.now(), &token, jti),
        );
        call(
            &app,
            request("GET", "/whoami", &format!("DPoP {token}"), &[&proof]),
        )
    };
    assert_eq!(send(&greedy, "1").await.status, StatusCode::OK);
    assert_eq!(send(&greedy, "2").await.status, StatusCode::OK);
    refused(
        &send(&greedy, "3").await,
        "invalid_dpop_proof",
        "too many DPoP proofs at once; retry with a new proof",
    );
    assert_eq!(send(&polite, "1").await.status, StatusCode::OK);
    clock.advance(std::time::Duration::from_secs(120));
    assert_eq!(send(&greedy, "3").await.status, StatusCode::OK);
}

/// Two extractors in one handler verify the token once: the second takes the first one's
/// result rather than checking the proof again, which would refuse it as a replay.
#[tokio::test]
async fn two_extractors_check_one_proof_once() {
    let issuer = TestKey::ed25519();
    let key = TestKey::ed25519();
    let clock = ManualClock::starting_now();
    let app = app(verifier(&issuer, &clock, 1_000));
    let mut user = claims(ISSUER);
    user["cnf"] = json!({"jkt": key.kid()});
    user["sub"] = json!("user-7");
    user["app_only"] = json!(false);
    let token = issuer.sign(&user);
    let proof = key.sign_with(
        &proof_header(&key),
        &proof_claims(
            "GET",
            &format!("{API}/me/quotes"),
            clock.now(),
            &token,
            "once",
        ),
    );
    let answer = call(
        &app,
        request("GET", "/me/quotes", &format!("DPoP {token}"), &[&proof]),
    )
    .await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert_eq!(answer.body, "user-7");
}

/// The server's nonce (RFC 9449 section 8), which only the token endpoint asks for: a proof
/// without it or with another one fails with `use_dpop_nonce`.
#[test]
fn a_proof_must_carry_the_nonce_when_one_is_asked_for() {
    use tessera_verify::dpop::{check_proof, DpopError, NonceCheck, ProofRequest};
    let key = TestKey::es256();
    let now = 1_700_000_000;
    let url = "https://auth.example.com/connect/token";
    let proof = |nonce: Option<&str>| {
        let mut claims = json!({"jti": "n", "htm": "POST", "htu": url, "iat": now});
        if let Some(nonce) = nonce {
            claims["nonce"] = json!(nonce);
        }
        key.sign_with(&proof_header(&key), &claims)
    };
    let is_current = |nonce: &str| nonce == "current";
    let request = ProofRequest {
        method: "POST",
        htu: url,
        access_token: None,
        nonce: Some(NonceCheck(&is_current)),
        window_secs: 60,
    };
    assert_eq!(format!("{:?}", request.nonce.unwrap()), "NonceCheck");
    let checked = check_proof(&proof(Some("current")), &request, now).unwrap();
    assert_eq!(checked.jkt, key.kid());
    assert_eq!((checked.jti.as_str(), checked.iat), ("n", now));
    for nonce in [None, Some("stale")] {
        let refused = check_proof(&proof(nonce), &request, now).unwrap_err();
        assert_eq!(refused, DpopError::Nonce, "{nonce:?}");
        assert_eq!(refused.code().as_str(), "use_dpop_nonce");
    }
    // Without a nonce requirement, none is needed.
    let request = ProofRequest {
        nonce: None,
        ..request
    };
    assert!(check_proof(&proof(None), &request, now).is_ok());
}
