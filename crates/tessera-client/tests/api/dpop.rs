//! DPoP (RFC 9449) against the real server: tokens bound to the client's key, the server's
//! nonces, and plans that require or ignore proofs. The proofs the client sent are checked
//! with `tessera_verify::dpop::check_proof` and the thumbprints computed here from RFC 7638,
//! not with the client's own code.

use std::time::Duration;

use serde_json::{Map, Value};
use tessera_client::{DpopKey, ManualClock, TokenType};
use tessera_server::admin::PlanSettings;
use tessera_store::DpopPolicy;
use tessera_testkit::claims_of;
use tessera_verify::dpop::{check_proof, ProofRequest};

use crate::{header, Error, ErrorCode, StatusCode, TestServer};

/// The RFC 7638 thumbprint of a public JWK: SHA-256 over its required members in
/// lexicographic order, no white space (section 3.2).
fn thumbprint(jwk: &Value) -> String {
    let members: &[&str] = match jwk["kty"].as_str() {
        Some("OKP") => &["crv", "kty", "x"],
        Some("EC") => &["crv", "kty", "x", "y"],
        _ => &["e", "kty", "n"],
    };
    let mut canonical = String::from("{");
    for (i, member) in members.iter().enumerate() {
        let value = jwk[*member].as_str().expect("a string member");
        let comma = if i == 0 { "" } else { "," };
        canonical.push_str(&format!(r#"{comma}"{member}":"{value}""#));
    }
    canonical.push('}');
    tessera_testkit::dpop::sha256(&canonical)
}

/// The claims of a proof, read without checking it.
fn proof_claims(proof: &str) -> Map<String, Value> {
    match claims_of(proof) {
        Value::Object(claims) => claims,
        other => panic!("{other}"),
    }
}

/// Sets plan `pro`'s DPoP policy and makes the running registry see it.
async fn set_dpop(server: &TestServer, policy: DpopPolicy) {
    let settings = PlanSettings {
        dpop: Some(policy),
        ..PlanSettings::default()
    };
    server
        .app
        .admin()
        .set_plan_with("pro", tessera_testkit::SCOPES, &settings)
        .await
        .unwrap();
    server.app.sync().await;
}

fn rsa_key() -> DpopKey {
    use aws_lc_rs::encoding::{AsDer, Pkcs8V1Der};
    let pair =
        aws_lc_rs::signature::RsaKeyPair::generate(aws_lc_rs::rsa::KeySize::Rsa2048).unwrap();
    DpopKey::from_pkcs8(AsDer::<Pkcs8V1Der>::as_der(&pair).unwrap().as_ref()).unwrap()
}

#[tokio::test]
async fn a_token_requested_with_a_key_is_bound_to_it() {
    // The server's clock, which the client shares, is years from the system's: a proof
    // dated by the system clock would be refused as stale.
    let server = TestServer::spawn_with(3600, |s| s.clock = ManualClock::at(2_000_000_000)).await;
    let (id, secret) = server.client().await;
    let endpoint = tessera_proto::dpop::htu(&server.app.url("/connect/token")).unwrap();
    for key in [
        DpopKey::generate_ed25519(),
        DpopKey::generate_p256(),
        rsa_key(),
    ] {
        let client = server
            .builder(&id, &secret, "news-api")
            .dpop(key.clone())
            .build()
            .unwrap();
        let token = client.token().await.unwrap();
        assert_eq!(token.token_type(), TokenType::DPoP, "{key:?}");
        let claims = claims_of(token.expose());
        assert_eq!(
            claims["cnf"]["jkt"],
            thumbprint(key.public_jwk()),
            "{key:?}"
        );
        assert_eq!(claims["cnf"]["jkt"], key.thumbprint());

        let sent = server.seen().last().unwrap().proof.clone().unwrap();
        let request = ProofRequest {
            method: "POST",
            htu: &endpoint,
            access_token: None,
            nonce: None,
            window_secs: 0,
        };
        let checked = check_proof(&sent, &request, 2_000_000_000).unwrap();
        assert_eq!(checked.jkt, key.thumbprint());
        let claims = proof_claims(&sent);
        assert!(!claims.contains_key("ath") && !claims.contains_key("nonce"));

        // Past the cache too, the whole answer says DPoP.
        let response = client.request_token().await.unwrap();
        assert_eq!(response.token_type, TokenType::DPoP);
    }
    // Each request carried a proof of its own.
    let jtis: std::collections::HashSet<_> = server
        .seen()
        .iter()
        .map(|s| proof_claims(s.proof.as_ref().unwrap())["jti"].clone())
        .collect();
    assert_eq!((jtis.len(), server.statuses()), (6, vec![200; 6]));

    // A client without the key, sharing nothing, gets a Bearer token.
    let plain = server.builder(&id, &secret, "news-api").build().unwrap();
    assert_eq!(plain.token().await.unwrap().token_type(), TokenType::Bearer);
    assert_eq!(server.seen().last().unwrap().proof, None);
}

/// Moves the clock of `server` and its clients by `secs`, and lets the server catch up.
async fn advance(server: &TestServer, secs: u64) {
    server.clock().advance(Duration::from_secs(secs));
    server.app.sync().await;
}

#[tokio::test]
async fn a_nonce_the_server_asks_for_is_sent_at_once_and_remembered() {
    // Tessera's nonces change every 300 s and are good for their period and the next; the
    // clock starts at the start of a period.
    let start = 1_800_000_000;
    let server = TestServer::spawn_with(3600, |s| {
        s.config.dpop_nonce = true;
        s.clock = ManualClock::at(start);
    })
    .await;
    let (id, secret) = server.client().await;
    let client = server
        .builder(&id, &secret, "news-api")
        .dpop(DpopKey::generate_p256())
        .build()
        .unwrap();
    let last_nonce = || {
        let proof = server.seen().last().unwrap().proof.clone().unwrap();
        proof_claims(&proof)["nonce"].clone()
    };

    // Refused for want of a nonce, then granted with the nonce of the refusal.
    let token = client.token().await.unwrap();
    assert_eq!(token.token_type(), TokenType::DPoP);
    assert_eq!(server.statuses(), [400, 200]);
    assert!(!proof_claims(server.seen()[0].proof.as_ref().unwrap()).contains_key("nonce"));
    let first = last_nonce();
    assert!(first.is_string());
    // No wait: the second request is not a retry of the policy.
    assert!(server.take_waits().is_empty());

    // The next request carries the remembered nonce and is granted at once.
    client.request_token().await.unwrap();
    assert_eq!(server.statuses(), [400, 200, 200]);
    assert_eq!(last_nonce(), first);

    // In the next period the first nonce is still good, and the answer brings a new one ...
    advance(&server, 400).await;
    client.request_token().await.unwrap();
    assert_eq!(last_nonce(), first);
    // ... which the client keeps: a period later the first one would be refused.
    advance(&server, 300).await;
    client.request_token().await.unwrap();
    assert_ne!(last_nonce(), first);
    assert_eq!(server.statuses(), [400, 200, 200, 200, 200]);

    // Once the nonce is stale the server asks again, and is answered again.
    advance(&server, 900).await;
    client.request_token().await.unwrap();
    assert_eq!(server.statuses(), [400, 200, 200, 200, 200, 400, 200]);
}

#[tokio::test]
async fn a_server_that_keeps_asking_for_a_nonce_is_asked_once_more_only() {
    let server = TestServer::spawn(3600).await;
    let (id, secret) = server.client().await;
    let client = server
        .builder(&id, &secret, "news-api")
        .dpop(DpopKey::generate_ed25519())
        .build()
        .unwrap();
    let use_nonce = r#"{"error":"use_dpop_nonce"}"#;
    for nonce in ["n-1", "n-2", "n-3"] {
        let answer = (
            StatusCode::BAD_REQUEST,
            vec![(header::HeaderName::from_static("dpop-nonce"), nonce)],
        );
        server.answer_first_with_body(answer, use_nonce);
    }
    let err = client.token().await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::UseDpopNonce), "{err:?}");
    assert_eq!(server.statuses(), [400, 400]);
    let second = server.seen()[1].proof.clone().unwrap();
    assert_eq!(proof_claims(&second)["nonce"], "n-1");

    // Without a DPoP-Nonce header there is no nonce to send: no second request.
    server.canned.lock().unwrap().clear();
    server.answer_first_with_body((StatusCode::BAD_REQUEST, vec![]), use_nonce);
    let err = client.token().await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::UseDpopNonce));
    assert_eq!(server.requests(), 3);
}

#[tokio::test]
async fn a_plan_that_requires_dpop_refuses_a_client_without_a_key() {
    let server = TestServer::spawn(3600).await;
    set_dpop(&server, DpopPolicy::Required).await;
    let (id, secret) = server.client().await;

    let with_key = server
        .builder(&id, &secret, "news-api")
        .dpop(DpopKey::generate_ed25519())
        .build()
        .unwrap();
    assert_eq!(
        with_key.token().await.unwrap().token_type(),
        TokenType::DPoP
    );

    let without = server.builder(&id, &secret, "news-api").build().unwrap();
    let err = without.token().await.unwrap_err();
    let Error::OAuth(refused) = &err else {
        panic!("{err:?}");
    };
    assert_eq!(
        (refused.status, refused.code),
        (StatusCode::BAD_REQUEST, ErrorCode::InvalidDpopProof)
    );
    assert_eq!(server.statuses(), [200, 400]);
}

#[tokio::test]
async fn a_plan_without_dpop_gives_a_bearer_token_to_a_client_with_a_key() {
    let server = TestServer::spawn(3600).await;
    set_dpop(&server, DpopPolicy::Off).await;
    let client = {
        let (id, secret) = server.client().await;
        server
            .builder(&id, &secret, "news-api")
            .dpop(DpopKey::generate_ed25519())
            .build()
            .unwrap()
    };
    let token = client.token().await.unwrap();
    assert_eq!(token.token_type(), TokenType::Bearer);
    assert!(claims_of(token.expose()).get("cnf").is_none());
    // The proof was sent; the server ignored it.
    assert!(server.seen()[0].proof.is_some());
}

#[tokio::test]
async fn a_dpop_token_for_a_client_without_a_key_is_not_taken() {
    let server = TestServer::spawn(3600).await;
    let client = server.token_client("news-api").await;
    let body = r#"{"access_token":"a.b.c","token_type":"DPoP","expires_in":60,"scope":"news-api"}"#;
    server.answer_first_with_body((StatusCode::OK, vec![]), body);
    let err = client.token().await.unwrap_err();
    assert!(
        matches!(&err, Error::UnexpectedResponse { detail, .. } if detail.contains("DPoP")),
        "{err:?}"
    );
}
