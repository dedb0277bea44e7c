//! Real tokens from a real Tessera to the real example APIs (`examples/protected_apis.rs`),
//! both on port 0: every answer of RFC 6750 section 3 and RFC 9470, and the isolation of
//! staging from production (seed section 4).

mod dpop;
mod limits;

use tessera_proto::{BasicCredentials, ClientId, ClientSecret};
use tessera_store::AuthMethod;
use tessera_testkit::TestApp;

/// A running Tessera with plans `all` (the three APIs) and `news` (news-api only).
struct Issuer {
    base: String,
    app: TestApp,
}

async fn issuer(alg: tessera_proto::Algorithm) -> Issuer {
    let app = tessera_testkit::spawn_with(|s| s.config.signing_alg = alg).await;
    let admin = app.registrar();
    admin
        .set_plan("all", "market-data-api news-api oms-api", None)
        .await
        .unwrap();
    admin.set_plan("news", "news-api", None).await.unwrap();
    // Known to the server (its registry) before the APIs ask for their limits.
    app.sync().await;
    Issuer {
        base: app.base.clone(),
        app,
    }
}

impl Issuer {
    async fn client(&self, plan: &str) -> (ClientId, ClientSecret) {
        self.app
            .client_on(plan, AuthMethod::ClientSecretBasic)
            .await
    }

    async fn token_response(
        &self,
        id: &ClientId,
        secret: &ClientSecret,
        scope: &str,
    ) -> reqwest::Response {
        let basic = BasicCredentials {
            client_id: id.clone(),
            client_secret: secret.clone(),
        };
        reqwest::Client::new()
            .post(format!("{}/connect/token", self.base))
            .header("authorization", basic.to_header())
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!(
                "grant_type=client_credentials&scope={}",
                scope.replace(' ', "%20")
            ))
            .send()
            .await
            .unwrap()
    }

    /// A token of a new client on `plan` for `scope`.
    async fn token(&self, plan: &str, scope: &str) -> String {
        let (id, secret) = self.client(plan).await;
        let body: serde_json::Value = self
            .token_response(&id, &secret, scope)
            .await
            .json()
            .await
            .unwrap();
        body["access_token"].as_str().unwrap().to_owned()
    }
}

/// The example program `protected_apis` (built by `cargo test` with the tests), running for
/// `issuer` on port 0 until dropped.
struct Apis {
    base: String,
    _process: tokio::process::Child,
}

impl std::fmt::Display for Apis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.base)
    }
}

async fn apis(issuer: &str) -> Apis {
    apis_with(issuer, &[]).await
}

async fn apis_with(issuer: &str, extra: &[&str]) -> Apis {
    use tokio::io::AsyncBufReadExt;
    // target/debug/deps/apis-HASH -> target/debug/examples/protected_apis
    let exe = std::env::current_exe().unwrap();
    let program = exe
        .parent()
        .and_then(|deps| deps.parent())
        .unwrap()
        .join("examples")
        .join(format!("protected_apis{}", std::env::consts::EXE_SUFFIX));
    let mut process = tokio::process::Command::new(&program)
        .args(["--issuer", issuer, "--listen", "127.0.0.1:0"])
        .args(extra)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "{}: {e} (cargo test builds the examples)",
                program.display()
            )
        });
    let stdout = process.stdout.take().unwrap();
    let mut first = String::new();
    tokio::io::BufReader::new(stdout)
        .read_line(&mut first)
        .await
        .unwrap();
    // "protected APIs on http://ADDR for issuer ISSUER"
    let base = first
        .split_whitespace()
        .find(|word| {
            word.starts_with("http://127.0.0.1:") || word.starts_with("https://127.0.0.1:")
        })
        .unwrap_or_else(|| panic!("no address in {first:?}"))
        .to_owned();
    Apis {
        base,
        _process: process,
    }
}

async fn get(url: String, token: Option<&str>) -> reqwest::Response {
    let mut request = reqwest::Client::new().get(url);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    request.send().await.unwrap()
}

fn challenge(response: &reqwest::Response) -> String {
    response.headers()["www-authenticate"]
        .to_str()
        .unwrap()
        .to_owned()
}

/// A 401 whose challenge (RFC 6750 section 3) says `invalid_token` with `description`.
fn refused_as_invalid(response: &reqwest::Response, description: &str) {
    assert_eq!(response.status(), 401);
    let challenge = challenge(response);
    assert!(
        challenge.starts_with("Bearer ") && challenge.contains("error=\"invalid_token\""),
        "{challenge}"
    );
    assert!(
        challenge.contains(&format!("error_description=\"{description}\"")),
        "{challenge}"
    );
}

/// What the API says of a certificate-bound token sent without its certificate.
const UNBOUND: &str = "the token is bound to a client certificate this request did not present";

#[tokio::test]
async fn each_api_serves_a_token_with_its_scope() {
    for alg in [
        tessera_proto::Algorithm::EdDSA,
        tessera_proto::Algorithm::ES256,
        tessera_proto::Algorithm::RS256,
        tessera_proto::Algorithm::PS256,
    ] {
        let issuer = issuer(alg).await;
        let apis = apis(&issuer.base).await;
        let token = issuer
            .token("all", "market-data-api news-api oms-api")
            .await;
        for (path, field) in [
            ("/market-data/v1/quotes", "quotes"),
            ("/news/v1/headlines", "headlines"),
            ("/oms/v1/orders", "orders"),
        ] {
            let response = get(format!("{apis}{path}"), Some(&token)).await;
            assert_eq!(response.status(), 200, "{alg:?} {path}");
            let body: serde_json::Value = response.json().await.unwrap();
            assert!(
                body[field]
                    .as_array()
                    .is_some_and(|a| !a.is_empty() || field == "orders"),
                "{body}"
            );
        }
    }
}

#[tokio::test]
async fn a_token_without_the_scope_gets_403_insufficient_scope() {
    let issuer = issuer(tessera_proto::Algorithm::EdDSA).await;
    let apis = apis(&issuer.base).await;
    let news_only = issuer.token("news", "news-api").await;
    assert_eq!(
        get(format!("{apis}/news/v1/headlines"), Some(&news_only))
            .await
            .status(),
        200
    );
    for (path, scope) in [
        ("/market-data/v1/quotes", "market-data-api"),
        ("/oms/v1/orders", "oms-api"),
    ] {
        let response = get(format!("{apis}{path}"), Some(&news_only)).await;
        assert_eq!(response.status(), 403, "{path}");
        let challenge = challenge(&response);
        assert!(challenge.starts_with("Bearer realm="), "{challenge}");
        assert!(
            challenge.contains("error=\"insufficient_scope\""),
            "{challenge}"
        );
        assert!(
            challenge.contains(&format!("scope=\"{scope}\"")),
            "{challenge}"
        );
    }
}

#[tokio::test]
async fn an_app_token_is_unauthorised_where_a_user_is_required() {
    let issuer = issuer(tessera_proto::Algorithm::EdDSA).await;
    let apis = apis(&issuer.base).await;
    let token = issuer.token("all", "oms-api").await;
    assert_eq!(
        get(format!("{apis}/oms/v1/orders"), Some(&token))
            .await
            .status(),
        200
    );
    let response = get(format!("{apis}/oms/v1/me/orders"), Some(&token)).await;
    assert_eq!(response.status(), 401);
    let challenge = challenge(&response);
    assert!(
        challenge.contains("error=\"insufficient_user_authentication\""),
        "{challenge}"
    );
    assert!(challenge.contains("error_description="), "{challenge}");
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["error"], "insufficient_user_authentication");
}

#[tokio::test]
async fn missing_invalid_and_misplaced_tokens() {
    let issuer = issuer(tessera_proto::Algorithm::EdDSA).await;
    let apis = apis(&issuer.base).await;
    let url = format!("{apis}/news/v1/headlines");

    // No token: 401, a bare challenge without an error code.
    let response = get(url.clone(), None).await;
    assert_eq!(response.status(), 401);
    let bare = challenge(&response);
    assert!(
        bare.starts_with("Bearer realm=\"") && !bare.contains("error="),
        "{bare}"
    );

    // A damaged token: 401 invalid_token.
    let token = issuer.token("all", "news-api").await;
    // One character of the signature changed: its first, which carries six bits of the
    // signature (the last carries padding bits too, and changing those makes the token
    // undecodable rather than wrongly signed).
    let at = token.rfind('.').unwrap() + 1;
    let swapped = if token[at..].starts_with('A') {
        "B"
    } else {
        "A"
    };
    let damaged = format!("{}{swapped}{}", &token[..at], &token[at + 1..]);
    for (bad, description) in [
        (damaged.as_str(), "the token signature is invalid"),
        ("not-a-jwt", "the token is not a compact JWS"),
        ("a.b.c", "the token is not a compact JWS"),
    ] {
        let response = get(url.clone(), Some(bad)).await;
        refused_as_invalid(&response, description);
    }

    // A token in the query string is not accepted.
    let response = get(format!("{url}?access_token={token}"), None).await;
    assert_eq!(response.status(), 400);
    assert!(
        !response.text().await.unwrap().contains(&token),
        "the token is not echoed"
    );
    // The API goes on serving good tokens.
    assert_eq!(get(url, Some(&token)).await.status(), 200);
}

#[tokio::test]
async fn staging_and_production_are_isolated() {
    let production = issuer(tessera_proto::Algorithm::EdDSA).await;
    let staging = issuer(tessera_proto::Algorithm::EdDSA).await;
    let production_apis = apis(&production.base).await;
    let staging_apis = apis(&staging.base).await;
    let path = "/market-data/v1/quotes";
    let production_token = production.token("all", "market-data-api").await;
    let staging_token = staging.token("all", "market-data-api").await;

    assert_eq!(
        get(format!("{production_apis}{path}"), Some(&production_token))
            .await
            .status(),
        200
    );
    assert_eq!(
        get(format!("{staging_apis}{path}"), Some(&staging_token))
            .await
            .status(),
        200
    );
    for (apis, token) in [
        (&production_apis, &staging_token),
        (&staging_apis, &production_token),
    ] {
        let response = get(format!("{apis}{path}"), Some(token)).await;
        refused_as_invalid(&response, "the token was signed with an unknown key");
    }

    // Staging credentials are unknown to production.
    let (id, secret) = staging.client("all").await;
    let response = production
        .token_response(&id, &secret, "market-data-api")
        .await;
    assert_eq!(response.status(), 401);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["error"], "invalid_client");
}

/// RFC 8705 section 3 at the API: a token bound to a client certificate works only with that
/// certificate, which a trusted TLS-terminating proxy passes on in a header.
#[tokio::test]
async fn a_certificate_bound_token_works_only_with_its_certificate() {
    use tessera_store::{CertificateMatch, Credential};
    let dir = tempfile::tempdir().unwrap();
    // A CA and a client certificate it signs for a SPIFFE ID.
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let uri = "spiffe://example.org/ns/prod/sa/trader";
    let leaf_and_key = |uri: &str| {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.subject_alt_names = vec![rcgen::SanType::URI(uri.try_into().unwrap())];
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        let cert = params.signed_by(&key, &ca, &ca_key).unwrap().pem();
        (cert, key.serialize_pem())
    };
    let leaf = |uri: &str| leaf_and_key(uri).0;
    let escape = tessera_testkit::escaped_pem;
    let ca_path = dir.path().join("ca.pem");
    std::fs::write(&ca_path, ca.pem()).unwrap();
    let app = tessera_testkit::spawn_with(|s| {
        s.config.client_cert_header = Some("x-client-cert".parse().unwrap());
        s.config.client_ca = Some(ca_path.clone());
        s.config.trusted_proxies = vec!["127.0.0.1".parse().unwrap()];
    })
    .await;
    app.registrar()
        .set_plan("all", "market-data-api", None)
        .await
        .unwrap();
    let client = app
        .registrar()
        .create_keyed_client(
            "all",
            "trader",
            AuthMethod::TlsClientAuth,
            Credential::Certificate(CertificateMatch::SanUri(uri.into())),
        )
        .await
        .unwrap();
    app.sync().await;
    let (pem, pem_key) = leaf_and_key(uri);
    let cert = escape(&pem);
    let answer: serde_json::Value = reqwest::Client::new()
        .post(format!("{}/connect/token", app.base))
        .header("x-client-cert", &cert)
        .form(&[
            ("grant_type", "client_credentials"),
            ("scope", "market-data-api"),
            ("client_id", client.id.as_str()),
        ])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let token = answer["access_token"].as_str().expect("a bound token");

    let behind_proxy = apis_with(
        &app.base,
        &[
            "--client-cert-header",
            "x-client-cert",
            "--trusted-proxy",
            "127.0.0.1",
        ],
    )
    .await;
    let quotes = format!("{behind_proxy}/market-data/v1/quotes");
    let call = |presented: Option<String>| {
        let mut request = reqwest::Client::new()
            .get(quotes.clone())
            .bearer_auth(token);
        if let Some(presented) = presented {
            request = request.header("x-client-cert", presented);
        }
        async move { request.send().await.unwrap() }
    };
    assert_eq!(call(Some(cert.clone())).await.status(), 200);
    for presented in [None, Some(escape(&leaf(uri)))] {
        refused_as_invalid(&call(presented).await, UNBOUND);
    }
    // An API that takes no certificate from anywhere refuses the bound token outright.
    let direct = apis(&app.base).await;
    let refused = get(format!("{direct}/market-data/v1/quotes"), Some(token)).await;
    refused_as_invalid(&refused, UNBOUND);

    // An API that terminates TLS itself takes the connection's certificate.
    let server = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
    let (server_pem, server_key) = (dir.path().join("api.pem"), dir.path().join("api.key"));
    std::fs::write(&server_pem, server.cert.pem()).unwrap();
    std::fs::write(&server_key, server.key_pair.serialize_pem()).unwrap();
    let tls_api = apis_with(
        &app.base,
        &[
            "--tls-cert",
            server_pem.to_str().unwrap(),
            "--tls-key",
            server_key.to_str().unwrap(),
            "--client-ca",
            ca_path.to_str().unwrap(),
        ],
    )
    .await;
    let https = |identity: Option<(&str, &str)>| {
        let mut builder = reqwest::Client::builder()
            .tls_built_in_root_certs(false)
            .add_root_certificate(
                reqwest::Certificate::from_pem(server.cert.pem().as_bytes()).unwrap(),
            );
        if let Some((cert, key)) = identity {
            builder = builder
                .identity(reqwest::Identity::from_pem(format!("{cert}{key}").as_bytes()).unwrap());
        }
        builder.build().unwrap()
    };
    let quotes = format!("{tls_api}/market-data/v1/quotes");
    let with_own = https(Some((&pem, &pem_key)))
        .get(&quotes)
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    assert_eq!(with_own.status(), 200);
    let (other, other_key) = leaf_and_key(uri);
    for client in [https(Some((&other, &other_key))), https(None)] {
        let refused = client.get(&quotes).bearer_auth(token).send().await.unwrap();
        refused_as_invalid(&refused, UNBOUND);
    }
}
