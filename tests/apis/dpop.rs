//! DPoP-bound tokens (RFC 9449) and resource indicators (RFC 8707) from a real Tessera at the
//! real example APIs, with proofs signed by `jsonwebtoken` (an implementation independent of
//! Tessera's: tessera_testkit::dpop), and the APIs' protected resource metadata (RFC 9728).

use serde_json::{json, Value};
use tessera_proto::BasicCredentials;
use tessera_testkit::dpop::{claims, ProofKey};

use super::{apis, challenge, get, issuer, Issuer};

/// The system clock, which the example APIs read.
fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// A DPoP-bound token for `scope` of a new client on plan `all`, bound to `key`.
async fn dpop_token(issuer: &Issuer, key: &ProofKey, scope: &str) -> String {
    let (id, secret) = issuer.client("all").await;
    let endpoint = format!("{}/connect/token", issuer.base);
    let basic = BasicCredentials {
        client_id: id,
        client_secret: secret,
    };
    let body: Value = reqwest::Client::new()
        .post(&endpoint)
        .header("authorization", basic.to_header())
        .header("dpop", key.proof("POST", &endpoint, issuer.app.clock.now()))
        .form(&[("grant_type", "client_credentials"), ("scope", scope)])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(body["token_type"], "DPoP", "{body}");
    body["access_token"].as_str().unwrap().to_owned()
}

async fn call(url: &str, scheme: &str, token: &str, proofs: &[&str]) -> reqwest::Response {
    let mut request = reqwest::Client::new()
        .get(url)
        .header("authorization", format!("{scheme} {token}"));
    for proof in proofs {
        request = request.header("dpop", *proof);
    }
    request.send().await.unwrap()
}

/// The `error` of a 401 and its `WWW-Authenticate` scheme.
async fn refusal(response: reqwest::Response) -> (u16, String, String) {
    let status = response.status().as_u16();
    let scheme = challenge(&response)
        .split(' ')
        .next()
        .unwrap_or_default()
        .to_owned();
    let body: Value = response.json().await.unwrap_or_default();
    (
        status,
        scheme,
        body["error"].as_str().unwrap_or_default().to_owned(),
    )
}

#[tokio::test]
async fn a_dpop_token_works_only_with_a_fresh_proof_of_its_key_for_the_request() {
    let issuer = issuer(tessera_proto::Algorithm::EdDSA).await;
    let apis = apis(&issuer.base).await;
    let key = ProofKey::p256();
    let other = ProofKey::ed25519();
    let token = dpop_token(&issuer, &key, "market-data-api news-api").await;
    let url = format!("{apis}/market-data/v1/quotes");
    let t = now();

    let good = key.proof_with_token("GET", &url, t, &token);
    let answer = call(&url, "DPoP", &token, &[&good]).await;
    assert_eq!(answer.status(), 200);
    // Query strings are not part of htu (RFC 9449 section 4.3 step 9).
    let with_query = format!("{url}?symbol=ACME");
    let fresh = key.proof_with_token("GET", &url, t, &token);
    assert_eq!(
        call(&with_query, "DPoP", &token, &[&fresh]).await.status(),
        200
    );

    let other_token = dpop_token(&issuer, &key, "market-data-api").await;
    let mut no_ath = claims("GET", &url, t);
    no_ath["ath"] = Value::Null;
    let cases: Vec<(&str, &str, Vec<String>, &str)> = vec![
        ("replayed", "DPoP", vec![good.clone()], "invalid_dpop_proof"),
        ("no proof", "DPoP", vec![], "invalid_dpop_proof"),
        (
            "another method",
            "DPoP",
            vec![key.proof_with_token("POST", &url, t, &token)],
            "invalid_dpop_proof",
        ),
        (
            "another URL",
            "DPoP",
            vec![key.proof_with_token("GET", &format!("{apis}/news/v1/headlines"), t, &token)],
            "invalid_dpop_proof",
        ),
        (
            "stale",
            "DPoP",
            vec![key.proof_with_token("GET", &url, t - 300, &token)],
            "invalid_dpop_proof",
        ),
        (
            "another key",
            "DPoP",
            vec![other.proof_with_token("GET", &url, t, &token)],
            "invalid_dpop_proof",
        ),
        (
            "the hash of another token",
            "DPoP",
            vec![key.proof_with_token("GET", &url, t, &other_token)],
            "invalid_dpop_proof",
        ),
        (
            "no ath",
            "DPoP",
            vec![key.sign(&key.header(), &no_ath)],
            "invalid_dpop_proof",
        ),
        (
            "two proofs",
            "DPoP",
            vec![
                key.proof_with_token("GET", &url, t, &token),
                key.proof_with_token("GET", &url, t, &token),
            ],
            "invalid_dpop_proof",
        ),
        (
            "sent as Bearer",
            "Bearer",
            vec![key.proof_with_token("GET", &url, t, &token)],
            "invalid_token",
        ),
    ];
    for (why, scheme, proofs, error) in cases {
        let proofs: Vec<&str> = proofs.iter().map(String::as_str).collect();
        let (status, challenged, code) = refusal(call(&url, scheme, &token, &proofs).await).await;
        assert_eq!(
            (status, challenged.as_str(), code.as_str()),
            (401, "DPoP", error),
            "{why}"
        );
    }

    // A Bearer token sent with the DPoP scheme is refused as well (section 7.2).
    let bearer = issuer.token("all", "market-data-api").await;
    let proof = key.proof_with_token("GET", &url, t, &bearer);
    let (status, _, code) = refusal(call(&url, "DPoP", &bearer, &[&proof]).await).await;
    assert_eq!((status, code.as_str()), (401, "invalid_token"));
    // And as Bearer it works.
    assert_eq!(get(url.clone(), Some(&bearer)).await.status(), 200);
    // A token is still checked first: a forged one gets invalid_token, whatever the proof.
    let forged = format!("{}x", &token[..token.len() - 1]);
    let proof = key.proof_with_token("GET", &url, t, &forged);
    let (status, _, code) = refusal(call(&url, "DPoP", &forged, &[&proof]).await).await;
    assert_eq!((status, code.as_str()), (401, "invalid_token"));
}

#[tokio::test]
async fn a_token_narrowed_by_resource_is_refused_at_the_other_apis() {
    let issuer = issuer(tessera_proto::Algorithm::EdDSA).await;
    let apis = apis(&issuer.base).await;
    let (id, secret) = issuer.client("all").await;
    let body: Value = reqwest::Client::new()
        .post(format!("{}/connect/token", issuer.base))
        .header(
            "authorization",
            BasicCredentials {
                client_id: id,
                client_secret: secret,
            }
            .to_header(),
        )
        .form(&[
            ("grant_type", "client_credentials"),
            ("scope", "market-data-api news-api oms-api"),
            ("resource", "news-api"),
        ])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let token = body["access_token"].as_str().unwrap();
    assert_eq!(
        get(format!("{apis}/news/v1/headlines"), Some(token))
            .await
            .status(),
        200
    );
    for path in ["/market-data/v1/quotes", "/oms/v1/orders"] {
        assert_eq!(
            get(format!("{apis}{path}"), Some(token)).await.status(),
            403,
            "{path}"
        );
    }
}

#[tokio::test]
async fn each_api_describes_itself_and_its_challenges_point_there() {
    let issuer = issuer(tessera_proto::Algorithm::EdDSA).await;
    let apis = apis(&issuer.base).await;
    let metadata_url = format!("{apis}/.well-known/oauth-protected-resource/market-data");
    let metadata: Value = reqwest::get(&metadata_url)
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        metadata,
        json!({
            "resource": format!("{apis}/market-data"),
            "authorization_servers": [issuer.base],
            "scopes_supported": ["market-data-api"],
            "bearer_methods_supported": ["header"],
            "dpop_signing_alg_values_supported": ["EdDSA", "ES256", "RS256", "PS256"],
        })
    );
    let answer = get(format!("{apis}/market-data/v1/quotes"), None).await;
    let challenges: Vec<String> = answer
        .headers()
        .get_all("www-authenticate")
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .collect();
    assert!(
        challenges[0].contains(&format!("resource_metadata=\"{metadata_url}\"")),
        "{challenges:?}"
    );
    // Both schemes are offered (RFC 9449 section 7.1).
    assert!(
        challenges
            .iter()
            .any(|c| c.starts_with("DPoP ") && c.contains("algs=")),
        "{challenges:?}"
    );
}

/// The example APIs' `--public-url`: "the URL clients reach them at". Their metadata and
/// challenges name it, and a DPoP proof must be made for it, not for the address they
/// listen on (as behind a proxy).
#[tokio::test]
async fn the_public_url_is_the_one_the_apis_describe_and_proofs_name() {
    let issuer = issuer(tessera_proto::Algorithm::EdDSA).await;
    let public = "https://apis.example";
    let apis = super::apis_with(&issuer.base, &["--public-url", "https://apis.example/"]).await;
    let metadata: Value = reqwest::get(format!(
        "{apis}/.well-known/oauth-protected-resource/market-data"
    ))
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(metadata["resource"], format!("{public}/market-data"));
    let answer = get(format!("{apis}/market-data/v1/quotes"), None).await;
    assert!(
        challenge(&answer).contains(&format!(
            "resource_metadata=\"{public}/.well-known/oauth-protected-resource/market-data\""
        )),
        "{}",
        challenge(&answer)
    );

    let key = ProofKey::p256();
    let token = dpop_token(&issuer, &key, "market-data-api").await;
    let listened = format!("{apis}/market-data/v1/quotes");
    let reached = format!("{public}/market-data/v1/quotes");
    let t = now();
    let for_listened = key.proof_with_token("GET", &listened, t, &token);
    let (status, scheme, code) =
        refusal(call(&listened, "DPoP", &token, &[&for_listened]).await).await;
    assert_eq!(
        (status, scheme.as_str(), code.as_str()),
        (401, "DPoP", "invalid_dpop_proof")
    );
    let for_public = key.proof_with_token("GET", &reached, t, &token);
    assert_eq!(
        call(&listened, "DPoP", &token, &[&for_public])
            .await
            .status(),
        200
    );
}
