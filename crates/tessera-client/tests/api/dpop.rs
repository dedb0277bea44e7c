//! DPoP (RFC 9449) against the real server: tokens bound to the client's key, the server's
//! nonces, and plans that require or ignore proofs; then DPoP tokens presented to an API of
//! the test's own, with its nonces and refusals. The proofs the client sent are checked
//! with `tessera_verify::dpop::check_proof` and the thumbprints computed here from RFC 7638,
//! not with the client's own code.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{HeaderValue, Method, Uri};
use serde_json::{Map, Value};
use tessera_client::{ClientKey, ManualClock, TokenType};
use tessera_server::registrar::PlanSettings;
use tessera_store::DpopPolicy;
use tessera_testkit::claims_of;
use tessera_verify::dpop::{check_proof, DpopError, NonceCheck, ProofRequest};
use tessera_verify::replay::ReplayCache;

use crate::{
    header, Error, ErrorCode, HeaderMap, IntoResponse, Router, StatusCode, TcpListener, TestServer,
    TokenClient, Url,
};

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
        .registrar()
        .set_plan_with("pro", tessera_testkit::SCOPES, &settings)
        .await
        .unwrap();
    server.app.sync().await;
}

fn rsa_key() -> ClientKey {
    use aws_lc_rs::encoding::{AsDer, Pkcs8V1Der};
    let pair =
        aws_lc_rs::signature::RsaKeyPair::generate(aws_lc_rs::rsa::KeySize::Rsa2048).unwrap();
    ClientKey::from_pkcs8(AsDer::<Pkcs8V1Der>::as_der(&pair).unwrap().as_ref()).unwrap()
}

#[tokio::test]
async fn a_token_requested_with_a_key_is_bound_to_it() {
    // The server's clock, which the client shares, is years from the system's: a proof
    // dated by the system clock would be refused as stale.
    let server = TestServer::spawn_with(3600, |s| s.clock = ManualClock::at(2_000_000_000)).await;
    let (id, secret) = server.client().await;
    let endpoint = tessera_proto::dpop::htu(&server.app.url("/connect/token")).unwrap();
    for key in [
        ClientKey::generate_ed25519(),
        ClientKey::generate_p256(),
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
        .dpop(ClientKey::generate_p256())
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
        .dpop(ClientKey::generate_ed25519())
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
        .dpop(ClientKey::generate_ed25519())
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
            .dpop(ClientKey::generate_ed25519())
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

/// What the DPoP API of [`spawn_api`] saw of one request.
#[derive(Debug, Clone)]
struct Call {
    /// The `Authorization` header.
    authorization: String,
    /// The `DPoP` header.
    proof: Option<String>,
    /// The answer's status.
    status: u16,
}

/// How the API of [`spawn_api`] answers, beyond the checks of RFC 9449 section 7.
#[derive(Debug, Clone, Copy, Default)]
struct Rules {
    /// The nonce every proof must carry (section 9).
    nonce: Option<&'static str>,
    /// Refuse the first token it sees with `invalid_token`, as if it were revoked.
    refuse_first_token: bool,
}

/// An API on `clock` that takes a DPoP token as RFC 9449 section 7 says: `Authorization:
/// DPoP`, and a proof, checked with `tessera_verify::dpop::check_proof`, for this request's
/// method and URL, with the token's hash, by the key the token is bound to, never seen
/// before; by [`Rules`], it asks for a nonce or refuses a token. A token with no `cnf` is
/// taken as `Bearer`. It answers 200 with the method, or 401 with the RFC's challenges.
/// Returns its base URL and what it saw.
async fn spawn_api(clock: ManualClock, rules: Rules) -> (Url, Arc<Mutex<Vec<Call>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let calls = Arc::new(Mutex::new(Vec::<Call>::new()));
    let seen = calls.clone();
    let replay = Arc::new(ReplayCache::new(60, 1000));
    let refused = Arc::new(Mutex::new(None::<String>));
    let origin = base.clone();
    let api = Router::new().fallback(move |method: Method, uri: Uri, headers: HeaderMap| {
        let (clock, seen, replay, refused) =
            (clock.clone(), seen.clone(), replay.clone(), refused.clone());
        let url = format!("{origin}{uri}");
        async move {
            let text = |name: &str| {
                headers
                    .get(name)
                    .map(|v: &HeaderValue| v.to_str().unwrap().to_owned())
            };
            let (authorization, proof) = (text("authorization"), text("dpop"));
            let challenge = |error: &str| {
                let value = format!(r#"DPoP algs="EdDSA ES256", error="{error}""#);
                let mut response = (
                    StatusCode::UNAUTHORIZED,
                    [(header::WWW_AUTHENTICATE, value)],
                )
                    .into_response();
                if error == "use_dpop_nonce" {
                    let nonce = rules.nonce.unwrap();
                    response
                        .headers_mut()
                        .insert("dpop-nonce", nonce.parse().unwrap());
                }
                response
            };
            let answer = match authorization.as_deref().unwrap_or_default().split_once(' ') {
                Some(("Bearer", token)) if claims_of(token).get("cnf").is_none() => {
                    method.to_string().into_response()
                }
                Some(("DPoP", token)) => {
                    let mut refused = refused.lock().unwrap();
                    let jkt = claims_of(token)["cnf"]["jkt"].clone();
                    let is_current = |nonce: &str| Some(nonce) == rules.nonce;
                    let htu = tessera_proto::dpop::htu(&url).unwrap();
                    let request = ProofRequest {
                        method: method.as_str(),
                        htu: &htu,
                        access_token: Some(token),
                        nonce: rules.nonce.map(|_| NonceCheck(&is_current)),
                        window_secs: 0,
                    };
                    let now = clock.now();
                    match check_proof(proof.as_deref().unwrap_or_default(), &request, now) {
                        Err(DpopError::Nonce) => challenge("use_dpop_nonce"),
                        Err(_) => challenge("invalid_dpop_proof"),
                        Ok(checked) if jkt != checked.jkt => challenge("invalid_dpop_proof"),
                        Ok(checked)
                            if replay.first_use(&checked.jkt, &checked.jti, now).is_err() =>
                        {
                            challenge("invalid_dpop_proof")
                        }
                        Ok(_)
                            if rules.refuse_first_token
                                && refused.get_or_insert_with(|| token.to_owned()) == token =>
                        {
                            challenge("invalid_token")
                        }
                        Ok(_) => method.to_string().into_response(),
                    }
                }
                _ => challenge("invalid_token"),
            };
            seen.lock().unwrap().push(Call {
                authorization: authorization.unwrap_or_default(),
                proof,
                status: answer.status().as_u16(),
            });
            answer
        }
    });
    tokio::spawn(async move { axum::serve(listener, api).await });
    (Url::parse(&base).unwrap(), calls)
}

/// A client of plan `pro` with a new Ed25519 DPoP key.
async fn dpop_client(server: &TestServer) -> TokenClient {
    let (id, secret) = server.client().await;
    server
        .builder(&id, &secret, "market-data-api")
        .dpop(ClientKey::generate_ed25519())
        .build()
        .unwrap()
}

fn statuses(calls: &Mutex<Vec<Call>>) -> Vec<u16> {
    calls.lock().unwrap().iter().map(|c| c.status).collect()
}

#[tokio::test]
async fn an_api_request_carries_a_dpop_token_and_a_proof_for_it() {
    let server = TestServer::spawn(3600).await;
    let client = dpop_client(&server).await;
    let (api, calls) = spawn_api(server.clock().clone(), Rules::default()).await;
    let http = reqwest::Client::new();

    let quotes = api.join("/quotes?symbol=ACME#today").unwrap();
    let response = client.send_authorized(http.get(quotes)).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let orders = api.join("/orders").unwrap();
    let response = client
        .send_authorized(http.post(orders).body("buy 10"))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.text().await.unwrap(), "POST");
    assert_eq!(statuses(&calls), [200, 200]);

    let token = client.token().await.unwrap();
    let calls = calls.lock().unwrap().clone();
    for (call, (htm, path)) in calls.iter().zip([("GET", "/quotes"), ("POST", "/orders")]) {
        assert_eq!(call.authorization, format!("DPoP {}", token.expose()));
        let claims = proof_claims(call.proof.as_ref().unwrap());
        assert_eq!(claims["htm"], htm);
        assert_eq!(claims["htu"], api.join(path).unwrap().as_str());
        assert_eq!(claims["ath"], tessera_testkit::dpop::sha256(token.expose()));
        assert_eq!(claims["iat"], server.clock().now());
        assert!(!claims.contains_key("nonce"));
    }
    assert_eq!(server.requests(), 1);
}

#[tokio::test]
async fn an_api_nonce_is_sent_at_once_and_remembered() {
    let server = TestServer::spawn(3600).await;
    let client = dpop_client(&server).await;
    let rules = Rules {
        nonce: Some("api-nonce-1"),
        ..Rules::default()
    };
    let (api, calls) = spawn_api(server.clock().clone(), rules).await;
    let http = reqwest::Client::new();
    let quotes = api.join("/quotes").unwrap();

    let response = client
        .send_authorized(http.get(quotes.clone()))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(statuses(&calls), [401, 200]);
    // The next request to the API carries the nonce from the start.
    let response = client.send_authorized(http.get(quotes)).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(statuses(&calls), [401, 200, 200]);
    let calls = calls.lock().unwrap().clone();
    let nonces: Vec<_> = calls
        .iter()
        .map(|c| {
            proof_claims(c.proof.as_ref().unwrap())
                .get("nonce")
                .cloned()
        })
        .collect();
    assert_eq!(
        nonces,
        [None, Some("api-nonce-1".into()), Some("api-nonce-1".into())]
    );
    // The same token throughout, and the token endpoint's nonce memory is apart: no nonce
    // went to the token endpoint.
    assert_eq!(server.requests(), 1);
    assert!(!proof_claims(server.seen()[0].proof.as_ref().unwrap()).contains_key("nonce"));
}

#[tokio::test]
async fn an_api_that_keeps_asking_for_a_nonce_is_asked_once_more_only() {
    let server = TestServer::spawn(3600).await;
    let client = dpop_client(&server).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    // A new nonce with every refusal; a client that kept asking would get a 200 at the
    // tenth request, so that the test fails rather than hangs.
    let api = Router::new().fallback(move || {
        let n = counter.fetch_add(1, Ordering::SeqCst);
        async move {
            if n >= 9 {
                return StatusCode::OK.into_response();
            }
            let challenge = (header::WWW_AUTHENTICATE, r#"DPoP error="use_dpop_nonce""#);
            let nonce = (
                header::HeaderName::from_static("dpop-nonce"),
                format!("n-{n}"),
            );
            (StatusCode::UNAUTHORIZED, [challenge], [nonce]).into_response()
        }
    });
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/quotes", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, api).await });

    let response = client
        .send_authorized(reqwest::Client::new().get(url))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert_eq!(server.requests(), 1);
}

#[tokio::test]
async fn a_dpop_token_the_api_calls_invalid_is_replaced_once() {
    let server = TestServer::spawn(3600).await;
    let client = dpop_client(&server).await;
    let rules = Rules {
        nonce: Some("api-nonce-1"),
        refuse_first_token: true,
    };
    let (api, calls) = spawn_api(server.clock().clone(), rules).await;
    let first = client.token().await.unwrap();

    let response = client
        .send_authorized(reqwest::Client::new().get(api.join("/quotes").unwrap()))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    // Asked for a nonce, then told the token is invalid, then granted with a new token.
    assert_eq!(statuses(&calls), [401, 401, 200]);
    let second = client.token().await.unwrap();
    assert_ne!(second, first);
    assert_eq!(second.token_type(), TokenType::DPoP);
    let last = calls.lock().unwrap().last().unwrap().clone();
    assert_eq!(last.authorization, format!("DPoP {}", second.expose()));
    assert_eq!(server.requests(), 2);
}

#[tokio::test]
async fn a_bearer_token_is_sent_as_bearer_though_the_client_has_a_key() {
    let server = TestServer::spawn(3600).await;
    set_dpop(&server, DpopPolicy::Off).await;
    let client = dpop_client(&server).await;
    let (api, calls) = spawn_api(server.clock().clone(), Rules::default()).await;
    let response = client
        .send_authorized(reqwest::Client::new().get(api.join("/quotes").unwrap()))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let call = calls.lock().unwrap()[0].clone();
    let token = client.token().await.unwrap();
    assert_eq!(token.token_type(), TokenType::Bearer);
    assert_eq!(call.authorization, format!("Bearer {}", token.expose()));
    assert_eq!(call.proof, None);
}
