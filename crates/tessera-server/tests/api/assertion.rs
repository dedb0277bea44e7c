//! `private_key_jwt` (RFC 7523 section 2.2) over real HTTP: assertions signed by
//! `jsonwebtoken` with keys registered inline or served at a `jwks_uri` by a local server,
//! every rule broken in turn, replay across instances, key rollover and the SSRF guard.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};
use tessera_proto::ClientId;
use tessera_store::{AuthMethod, Credential, KeySource};
use tessera_testkit::dpop::ProofKey;
use tessera_testkit::{basic, error_of, spawn_app, spawn_with, TestApp};

const JWT_BEARER: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";

/// A client key with a `kid`, and its JWK Set.
fn jwks(keys: &[(&ProofKey, &str)]) -> Value {
    let keys: Vec<Value> = keys
        .iter()
        .map(|(key, kid)| {
            let mut jwk = key.jwk().clone();
            jwk["kid"] = json!(kid);
            jwk["use"] = json!("sig");
            jwk
        })
        .collect();
    json!({ "keys": keys })
}

async fn register(app: &TestApp, keys: KeySource) -> ClientId {
    let client = app
        .registrar()
        .create_keyed_client(
            "pro",
            "pk",
            AuthMethod::PrivateKeyJwt,
            Credential::Keys(keys),
        )
        .await
        .unwrap();
    app.sync().await;
    client.id
}

/// Claims that pass, for `id` at `app`.
fn good_claims(app: &TestApp, id: &ClientId) -> Value {
    let now = app.clock.now();
    let mut jti = [0u8; 12];
    aws_lc_rs::rand::fill(&mut jti).unwrap();
    json!({
        "iss": id.as_str(), "sub": id.as_str(), "aud": app.state.issuer(),
        "iat": now, "exp": now + 60, "jti": format!("{jti:?}"),
    })
}

fn sign(key: &ProofKey, kid: &str, claims: &Value) -> String {
    key.sign(
        &json!({ "alg": key.alg(), "kid": kid, "typ": "JWT" }),
        claims,
    )
}

async fn with_assertion(
    app: &TestApp,
    assertion: &str,
    extra: &[(&str, &str)],
) -> reqwest::Response {
    let mut form = vec![
        ("grant_type", "client_credentials"),
        ("scope", "news-api"),
        ("client_assertion_type", JWT_BEARER),
        ("client_assertion", assertion),
    ];
    form.extend_from_slice(extra);
    app.http
        .post(app.url("/connect/token"))
        .form(&form)
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn every_assertion_rule_is_enforced() {
    // Two dozen refusals of one client from one address: above the failure throttle's
    // default allowance, which is not what this test is about.
    let app = spawn_with(|s| {
        let many = tessera_store::RateLimit {
            count: 1000,
            period_secs: 60,
            burst: 1000,
        };
        s.config.auth_failures_per_source_and_client = many;
        s.config.auth_failures_per_client = many;
    })
    .await;
    let key = ProofKey::ed25519();
    let stranger = ProofKey::ed25519();
    let id = register(&app, KeySource::Jwks(jwks(&[(&key, "k1")]).to_string())).await;

    let answer = with_assertion(&app, &sign(&key, "k1", &good_claims(&app, &id)), &[]).await;
    assert_eq!(answer.status(), 200);
    let body: Value = answer.json().await.unwrap();
    assert_eq!(
        tessera_testkit::claims_of(body["access_token"].as_str().unwrap())["client_id"],
        id.as_str()
    );
    // The token endpoint URL is an audience too, and an array of the one audience is taken;
    // client_id may be sent.
    for aud in [
        json!(app.url("/connect/token")),
        json!([app.base]),
        json!([app.url("/connect/token")]),
    ] {
        let mut claims = good_claims(&app, &id);
        claims["aud"] = aud;
        let answer = with_assertion(
            &app,
            &sign(&key, "k1", &claims),
            &[("client_id", id.as_str())],
        )
        .await;
        assert_eq!(answer.status(), 200);
    }

    let now = app.clock.now();
    let replayed = sign(&key, "k1", &good_claims(&app, &id));
    assert_eq!(with_assertion(&app, &replayed, &[]).await.status(), 200);
    let change = |name: &str, value: Value| {
        let mut claims = good_claims(&app, &id);
        if value.is_null() {
            claims.as_object_mut().unwrap().remove(name);
        } else {
            claims[name] = value;
        }
        sign(&key, "k1", &claims)
    };
    let header = |header: Value| key.sign(&header, &good_claims(&app, &id));
    // The bounds hold to the second: at most 5 minutes ahead, 60 s of leeway either way.
    for (name, value) in [
        ("exp", json!(now + 360)),
        ("exp", json!(now - 59)),
        ("nbf", json!(now + 60)),
    ] {
        let answer = with_assertion(&app, &change(name, value.clone()), &[]).await;
        assert_eq!(answer.status(), 200, "{name} {value}");
    }
    type Case<'a> = (&'a str, String, Vec<(&'a str, &'a str)>, &'a str);
    let cases: Vec<Case> = vec![
        ("replayed", replayed.clone(), vec![], "used before"),
        (
            "iss",
            change("iss", json!("tc_someoneelse0000000000")),
            vec![],
            "iss and sub",
        ),
        (
            "sub",
            change("sub", json!("tc_someoneelse0000000000")),
            vec![("client_id", id.as_str())],
            "iss and sub",
        ),
        (
            "aud",
            change("aud", json!("https://elsewhere.example")),
            vec![],
            "aud",
        ),
        (
            "another audience beside the issuer",
            change("aud", json!(["https://elsewhere.example", app.base])),
            vec![],
            "aud",
        ),
        (
            "the issuer and the token endpoint",
            change("aud", json!([app.base, app.url("/connect/token")])),
            vec![],
            "aud",
        ),
        ("no exp", change("exp", Value::Null), vec![], "no exp"),
        (
            "expired",
            change("exp", json!(now - 120)),
            vec![],
            "expired",
        ),
        (
            "too long",
            change("exp", json!(now + 3600)),
            vec![],
            "longer than 5 minutes",
        ),
        (
            "a second too long",
            change("exp", json!(now + 361)),
            vec![],
            "longer than 5 minutes",
        ),
        (
            "nbf ahead",
            change("nbf", json!(now + 600)),
            vec![],
            "not valid yet",
        ),
        (
            "iat ahead",
            change("iat", json!(now + 600)),
            vec![],
            "not valid yet",
        ),
        ("no jti", change("jti", Value::Null), vec![], "no jti"),
        (
            "unknown kid",
            sign(&key, "k9", &good_claims(&app, &id)),
            vec![],
            "not registered",
        ),
        (
            "another key under the kid",
            sign(&stranger, "k1", &good_claims(&app, &id)),
            vec![],
            "signature",
        ),
        (
            "HS256",
            header(json!({"alg": "HS256", "kid": "k1"})),
            vec![],
            "algorithm",
        ),
        (
            "none",
            header(json!({"alg": "none", "kid": "k1"})),
            vec![],
            "algorithm",
        ),
        (
            "an access token's typ",
            header(json!({"alg": "EdDSA", "kid": "k1", "typ": "at+jwt"})),
            vec![],
            "not a signed JWT",
        ),
        (
            "a key in the header",
            header(json!({"alg": "EdDSA", "kid": "k1", "jwk": key.jwk()})),
            vec![],
            "not a signed JWT",
        ),
        (
            "another client_id",
            sign(&key, "k1", &good_claims(&app, &id)),
            vec![("client_id", "tc_someoneelse0000000000")],
            "client authentication failed",
        ),
        (
            "garbage",
            "a.b.c".to_owned(),
            vec![("client_id", id.as_str())],
            "not a signed JWT",
        ),
    ];
    for (why, assertion, extra, said) in cases {
        let (status, code, description) =
            error_of(with_assertion(&app, &assertion, &extra).await).await;
        assert_eq!((status, code.as_str()), (401, "invalid_client"), "{why}");
        assert!(description.contains(said), "{why}: {description}");
        assert!(
            !description.contains(&assertion),
            "{why}: the assertion is echoed"
        );
    }

    // The assertion type must be the JWT bearer one.
    let form = [
        ("grant_type", "client_credentials"),
        ("scope", "news-api"),
        ("client_assertion_type", "urn:example:saml"),
        ("client_assertion", replayed.as_str()),
    ];
    let answer = app
        .http
        .post(app.url("/connect/token"))
        .form(&form)
        .send()
        .await
        .unwrap();
    let (status, code, description) = error_of(answer).await;
    assert_eq!((status, code.as_str()), (401, "invalid_client"));
    assert!(
        description.contains("client_assertion_type"),
        "{description}"
    );

    // An assertion beside Basic credentials is two methods: invalid_request.
    let (secret_id, secret) = app.client().await;
    let answer = app
        .http
        .post(app.url("/connect/token"))
        .header("authorization", basic(&secret_id, &secret))
        .form(&form)
        .send()
        .await
        .unwrap();
    assert_eq!(error_of(answer).await.1, "invalid_request");
    // A secret client cannot authenticate with an assertion.
    let mut claims = good_claims(&app, &secret_id);
    claims["iss"] = json!(secret_id.as_str());
    let (status, code, _) =
        error_of(with_assertion(&app, &sign(&key, "k1", &claims), &[]).await).await;
    assert_eq!((status, code.as_str()), (401, "invalid_client"));

    let metadata: Value = app
        .http
        .get(app.url("/.well-known/oauth-authorization-server"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(metadata["token_endpoint_auth_methods_supported"]
        .as_array()
        .unwrap()
        .contains(&json!("private_key_jwt")));
    assert_eq!(
        metadata["token_endpoint_auth_signing_alg_values_supported"],
        json!(["EdDSA", "ES256", "RS256", "PS256"])
    );
}

/// A JWKS server the test controls: the keys it serves and how often it was asked.
struct KeyServer {
    url: String,
    keys: Arc<Mutex<Value>>,
    hits: Arc<AtomicUsize>,
}

async fn key_server(keys: Value) -> KeyServer {
    let keys = Arc::new(Mutex::new(keys));
    let hits = Arc::new(AtomicUsize::new(0));
    let (served, counted) = (keys.clone(), hits.clone());
    let router = axum::Router::new().route(
        "/jwks.json",
        axum::routing::get(move || {
            let (served, counted) = (served.clone(), counted.clone());
            async move {
                counted.fetch_add(1, Ordering::SeqCst);
                let keys = served.lock().unwrap().clone();
                axum::Json(keys)
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/jwks.json", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await });
    KeyServer { url, keys, hits }
}

#[tokio::test]
async fn keys_at_a_jwks_uri_roll_over_without_an_admin() {
    let app = spawn_with(|s| s.config.allow_private_jwks_uri = true).await;
    let old = ProofKey::ed25519();
    let new = ProofKey::p256();
    let server = key_server(jwks(&[(&old, "old")])).await;
    let id = register(&app, KeySource::JwksUri(server.url.clone())).await;

    let app = &app;
    let id = &id;
    let token = |key: &ProofKey, kid: &str| {
        let assertion = sign(key, kid, &good_claims(app, id));
        async move { with_assertion(app, &assertion, &[]).await.status() }
    };
    assert_eq!(token(&old, "old").await, 200);
    assert_eq!(token(&old, "old").await, 200);
    assert_eq!(server.hits.load(Ordering::SeqCst), 1, "keys are cached");

    // The client rolls over at its jwks_uri; the first fetch was just now, so an unknown kid
    // fetches again only 30 s after it.
    *server.keys.lock().unwrap() = jwks(&[(&new, "new")]);
    let assertion = sign(&new, "new", &good_claims(app, id));
    let (status, code, description) = error_of(with_assertion(app, &assertion, &[]).await).await;
    assert_eq!(
        (status, code.as_str(), description.as_str()),
        (
            401,
            "invalid_client",
            "the client assertion is signed with a key the client has not registered"
        )
    );
    assert_eq!(
        server.hits.load(Ordering::SeqCst),
        1,
        "at most one fetch per 30 s"
    );
    app.clock.advance(std::time::Duration::from_secs(31));
    app.sync().await;
    assert_eq!(token(&new, "new").await, 200);
    assert_eq!(server.hits.load(Ordering::SeqCst), 2);
    assert_eq!(token(&new, "new").await, 200);
    assert_eq!(server.hits.load(Ordering::SeqCst), 2);
}

/// Each client's keys stay cached while other clients' key sets are fetched: one fetch per
/// key set, however the clients take turns.
#[tokio::test]
async fn key_sets_of_several_clients_are_cached_side_by_side() {
    let app = spawn_with(|s| s.config.allow_private_jwks_uri = true).await;
    let mut clients = Vec::new();
    for _ in 0..3 {
        let key = ProofKey::ed25519();
        let server = key_server(jwks(&[(&key, "k")])).await;
        let id = register(&app, KeySource::JwksUri(server.url.clone())).await;
        clients.push((key, server, id));
    }
    for _ in 0..2 {
        for (key, _, id) in &clients {
            let assertion = sign(key, "k", &good_claims(&app, id));
            assert_eq!(with_assertion(&app, &assertion, &[]).await.status(), 200);
        }
    }
    for (_, server, _) in &clients {
        assert_eq!(server.hits.load(Ordering::SeqCst), 1, "{}", server.url);
    }
}

#[tokio::test]
async fn a_jwks_uri_on_a_private_address_is_never_fetched() {
    let app = spawn_app().await;
    let key = ProofKey::ed25519();
    let server = key_server(jwks(&[(&key, "k")])).await;
    let id = register(&app, KeySource::JwksUri(server.url.clone())).await;
    let assertion = sign(&key, "k", &good_claims(&app, &id));
    let (status, code, description) = error_of(with_assertion(&app, &assertion, &[]).await).await;
    assert_eq!((status, code.as_str()), (401, "invalid_client"));
    assert!(
        description.contains("could not be fetched"),
        "{description}"
    );
    assert_eq!(server.hits.load(Ordering::SeqCst), 0, "no request was made");
    // Nor through a name that resolves to loopback.
    let by_name = server.url.replace("127.0.0.1", "localhost");
    let id = register(&app, KeySource::JwksUri(by_name.clone())).await;
    let assertion = sign(&key, "k", &good_claims(&app, &id));
    let (status, code, description) = error_of(with_assertion(&app, &assertion, &[]).await).await;
    assert_eq!((status, code.as_str()), (401, "invalid_client"));
    assert!(
        description.contains("could not be fetched"),
        "{description}"
    );
    assert_eq!(server.hits.load(Ordering::SeqCst), 0);
    // The operator's log says why, for this key set (its port is this test's own), without
    // the assertion.
    let log = app.log();
    assert!(
        log.lines()
            .any(|l| l.contains("cannot fetch a jwks_uri") && l.contains(&by_name)),
        "{log}"
    );
    assert!(!log.contains(&assertion));
}

#[tokio::test]
async fn an_assertion_replayed_at_another_instance_is_refused_through_redis() {
    let prefix = tessera_testkit::unique_redis_prefix("jti");
    let setup = |prefix: String, db: Option<String>| {
        move |s: &mut tessera_testkit::Setup| {
            s.config.issuer = Some("http://tessera.test".to_owned());
            s.config.redis_url = Some(tessera_testkit::redis_url());
            s.config.redis_prefix = prefix;
            s.database_url = db;
        }
    };
    let keys_seen = format!("{prefix}seen:jti:*");
    let first = spawn_with(setup(prefix.clone(), None)).await;
    let second = spawn_with(setup(prefix, Some(first.db_url.clone()))).await;
    let key = ProofKey::ed25519();
    let id = register(&first, KeySource::Jwks(jwks(&[(&key, "k")]).to_string())).await;
    second.sync().await;
    let assertion = sign(&key, "k", &good_claims(&first, &id));
    assert_eq!(with_assertion(&first, &assertion, &[]).await.status(), 200);
    // Remembered until the assertion's exp and its leeway have passed: 60 + 60 s here
    // (Redis counts in its own time, not the test's clock).
    let ttls = super::redis_ttls(&keys_seen).await;
    let [ttl] = ttls[..] else {
        panic!("one key seen: {ttls:?}")
    };
    assert!((110..=120).contains(&ttl), "{ttl}");
    let (status, _, description) = error_of(with_assertion(&second, &assertion, &[]).await).await;
    assert_eq!(status, 401);
    assert!(description.contains("used before"), "{description}");
}

#[tokio::test]
async fn a_plain_http_jwks_uri_is_registered_only_for_a_private_or_loopback_address() {
    let app = spawn_app().await;
    let create = |uri: &str| {
        let uri = uri.to_owned();
        let app = &app;
        async move {
            app.registrar()
                .create_keyed_client(
                    "pro",
                    "pk",
                    AuthMethod::PrivateKeyJwt,
                    Credential::Keys(KeySource::JwksUri(uri)),
                )
                .await
        }
    };
    for public in [
        "http://93.184.216.34/jwks.json",
        "http://[2606:2800:220:1::1]/jwks.json",
    ] {
        let refused = create(public).await.unwrap_err().to_string();
        assert!(
            refused.contains("private or loopback"),
            "{public}: {refused}"
        );
    }
    // A name is judged by the address it resolves to, when fetched (fetch.rs).
    for fine in [
        "http://10.0.0.5/jwks.json",
        "http://127.0.0.1:8080/jwks.json",
        "http://[fd00::5]/jwks.json",
        "http://keys.cluster.local/jwks.json",
        "https://93.184.216.34/jwks.json",
    ] {
        assert!(create(fine).await.is_ok(), "{fine}");
    }
}

/// A JWK Set host that is down: it counts the connections it gets and holds each without an
/// answer until the test releases it, then answers 503; it counts the connections Tessera
/// gave up on (its fetch timed out) too.
struct DownHost {
    url: String,
    hits: Arc<AtomicUsize>,
    abandoned: Arc<AtomicUsize>,
    first_hit: Arc<tokio::sync::Notify>,
    release: tokio::sync::watch::Sender<bool>,
}

async fn down_host() -> DownHost {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/jwks.json", listener.local_addr().unwrap());
    let (release, released) = tokio::sync::watch::channel(false);
    let hits = Arc::new(AtomicUsize::new(0));
    let abandoned = Arc::new(AtomicUsize::new(0));
    let first_hit = Arc::new(tokio::sync::Notify::new());
    let (counted, given_up, hit) = (hits.clone(), abandoned.clone(), first_hit.clone());
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            hit.notify_one();
            let (mut reader, mut writer) = stream.into_split();
            let (mut released, given_up) = (released.clone(), given_up.clone());
            tokio::spawn(async move {
                let closed = async {
                    let mut buffer = [0u8; 1024];
                    while let Ok(1..) = reader.read(&mut buffer).await {}
                };
                let released = async move { released.wait_for(|r| *r).await.is_ok() };
                tokio::select! {
                    _ = released => {
                        let _ = writer
                            .write_all(b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n")
                            .await;
                    }
                    () = closed => {
                        given_up.fetch_add(1, Ordering::SeqCst);
                    }
                }
            });
        }
    });
    DownHost {
        url,
        hits,
        abandoned,
        first_hit,
        release,
    }
}

/// Failure allowances far above what a test sends, so that only what it is about decides.
fn many_failures(s: &mut tessera_testkit::Setup) {
    let many = tessera_store::RateLimit {
        count: 10_000,
        period_secs: 60,
        burst: 10_000,
    };
    s.config.auth_failures_per_source_and_client = many;
    s.config.auth_failures_per_client = many;
    s.config.auth_failures_per_source = many;
}

/// An assertion naming client `id`, signed by a key nobody registered.
fn junk(app: &TestApp, id: &ClientId) -> String {
    sign(&ProofKey::ed25519(), "k", &good_claims(app, id))
}

#[tokio::test]
async fn junk_assertions_toward_a_hanging_host_share_one_fetch_and_hold_no_slot() {
    let app = spawn_with(|s| {
        s.config.allow_private_jwks_uri = true;
        s.config.max_in_flight = 4;
        many_failures(s);
    })
    .await;
    let host = down_host().await;
    let id = register(&app, KeySource::JwksUri(host.url.clone())).await;
    let (other, secret) = app.client().await;

    // 20 unauthenticated requests at once, each naming the client.
    let app = Arc::new(app);
    let sent: Vec<_> = (0..20)
        .map(|_| {
            let (app, assertion) = (app.clone(), junk(&app, &id));
            tokio::spawn(async move { with_assertion(&app, &assertion, &[]).await.status() })
        })
        .collect();
    // Bounded, as `until` is: a server that never asks the host fails here, not by hanging.
    tokio::time::timeout(
        std::time::Duration::from_secs(20),
        host.first_hit.notified(),
    )
    .await
    .expect("the host is asked for the keys");
    // While the host hangs, the requests waiting on it hold no in-flight slot: another
    // client is served (on the old code, only once a hung fetch was given up after 5 s).
    tessera_testkit::until("another client is served", || async {
        app.token(
            &other,
            &secret,
            "grant_type=client_credentials&scope=news-api",
        )
        .await
        .status()
            == 200
    })
    .await;
    assert_eq!(
        host.abandoned.load(Ordering::SeqCst),
        0,
        "served only after a fetch was given up"
    );

    host.release.send(true).unwrap();
    let mut statuses = Vec::new();
    for request in sent {
        statuses.push(request.await.unwrap().as_u16());
    }
    // 503: no slot free at admission, or when the wait was over (4 slots for 20).
    assert!(
        statuses.iter().all(|s| [401, 503].contains(s)) && statuses.contains(&401),
        "{statuses:?}"
    );
    assert_eq!(host.hits.load(Ordering::SeqCst), 1, "one fetch for all");
}

#[tokio::test]
async fn a_failed_fetch_is_tried_again_only_after_a_growing_backoff() {
    let app = spawn_with(|s| {
        s.config.allow_private_jwks_uri = true;
        many_failures(s);
    })
    .await;
    let host = down_host().await;
    host.release.send(true).unwrap();
    let id = register(&app, KeySource::JwksUri(host.url.clone())).await;
    let hits = || host.hits.load(Ordering::SeqCst);
    let refused = || async {
        let (status, _, description) =
            error_of(with_assertion(&app, &junk(&app, &id), &[]).await).await;
        assert_eq!(status, 401, "{description}");
        assert!(
            description.contains("could not be fetched"),
            "{description}"
        );
    };
    let wait = |secs| {
        app.clock.advance(std::time::Duration::from_secs(secs));
        app.sync()
    };

    refused().await;
    assert_eq!(hits(), 1);
    // Remembered for 30 s, whoever asks.
    for _ in 0..12 {
        refused().await;
    }
    wait(29).await;
    refused().await;
    assert_eq!(hits(), 1, "tried again within 30 s of a failure");
    wait(2).await;
    refused().await;
    assert_eq!(hits(), 2);
    // A second failure in a row: 60 s.
    wait(31).await;
    refused().await;
    assert_eq!(hits(), 2, "the backoff did not grow");
    wait(30).await;
    refused().await;
    assert_eq!(hits(), 3);
}

#[tokio::test]
async fn a_caller_out_of_failures_for_a_client_causes_no_fetch() {
    let app = spawn_with(|s| {
        s.config.allow_private_jwks_uri = true;
        many_failures(s);
        // Two failures per hour per address and client.
        s.config.auth_failures_per_source_and_client = tessera_store::RateLimit {
            count: 2,
            period_secs: 3600,
            burst: 2,
        };
        s.config.trusted_proxies = vec!["127.0.0.1".parse().unwrap()];
    })
    .await;
    let host = down_host().await;
    host.release.send(true).unwrap();
    let id = register(&app, KeySource::JwksUri(host.url.clone())).await;
    let from = |address: &'static str| {
        let app = &app;
        let assertion = junk(app, &id);
        async move {
            app.http
                .post(app.url("/connect/token"))
                .header("x-forwarded-for", address)
                .form(&[
                    ("grant_type", "client_credentials"),
                    ("client_assertion_type", JWT_BEARER),
                    ("client_assertion", assertion.as_str()),
                ])
                .send()
                .await
                .unwrap()
                .status()
        }
    };
    // The first failure uses up this address's allowance (one for the fetch, one for the
    // failure).
    assert_eq!(from("203.0.113.7").await, 401);
    assert_eq!(host.hits.load(Ordering::SeqCst), 1);
    // Past the backoff, the same caller is refused before anything is fetched.
    app.clock.advance(std::time::Duration::from_secs(31));
    app.sync().await;
    assert_eq!(from("203.0.113.7").await, 429);
    assert_eq!(
        host.hits.load(Ordering::SeqCst),
        1,
        "a throttled caller caused a fetch"
    );
    // Another address still may.
    assert_eq!(from("198.51.100.9").await, 401);
    assert_eq!(host.hits.load(Ordering::SeqCst), 2);
}

/// A `jwks_uri` (docs/private-key-jwt.md): "at most 64 KiB, no redirects", and its keys
/// "cached for an hour", to the byte and the second. The server below answers the JWK Set
/// padded to exactly 64 KiB and to one byte more, and a redirect to the keys.
#[tokio::test]
async fn a_jwks_uri_is_read_to_64_kib_without_redirects_and_kept_an_hour() {
    let app = spawn_with(|s| s.config.allow_private_jwks_uri = true).await;
    let key = ProofKey::ed25519();
    let keys = jwks(&[(&key, "k")]);
    // The JWK Set with a member that pads its JSON to `size` bytes.
    let padded = |size: usize| {
        let mut body = keys.clone();
        body["pad"] = json!("");
        let bare = body.to_string().len();
        body["pad"] = json!("x".repeat(size - bare));
        let text = body.to_string();
        assert_eq!(text.len(), size);
        text
    };
    let (at_limit, over_limit) = (padded(64 * 1024), padded(64 * 1024 + 1));
    let hits = Arc::new(AtomicUsize::new(0));
    let redirected = Arc::new(AtomicUsize::new(0));
    let json_body = |text: String| {
        move || {
            let text = text.clone();
            async move { ([("content-type", "application/json")], text) }
        }
    };
    let counted = hits.clone();
    let target_hits = redirected.clone();
    let plain = keys.to_string();
    let router = axum::Router::new()
        .route("/at-limit.json", axum::routing::get(json_body(at_limit)))
        .route(
            "/over-limit.json",
            axum::routing::get(json_body(over_limit)),
        )
        .route(
            "/jwks.json",
            axum::routing::get(move || {
                counted.fetch_add(1, Ordering::SeqCst);
                let plain = plain.clone();
                async move { ([("content-type", "application/json")], plain) }
            }),
        )
        .route(
            "/target.json",
            axum::routing::get(move || {
                target_hits.fetch_add(1, Ordering::SeqCst);
                async { "{}" }
            }),
        )
        .route(
            "/moved.json",
            axum::routing::get(|| async {
                (
                    axum::http::StatusCode::FOUND,
                    [("location", "/target.json")],
                )
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await });
    let outcome = |id: ClientId| {
        let assertion = sign(&key, "k", &good_claims(&app, &id));
        let app = &app;
        async move { with_assertion(app, &assertion, &[]).await }
    };

    let at = register(&app, KeySource::JwksUri(format!("{base}/at-limit.json"))).await;
    assert_eq!(outcome(at).await.status(), 200, "64 KiB is read");
    for path in ["over-limit.json", "moved.json"] {
        let id = register(&app, KeySource::JwksUri(format!("{base}/{path}"))).await;
        let (status, code, description) = error_of(outcome(id).await).await;
        assert_eq!((status, code.as_str()), (401, "invalid_client"), "{path}");
        assert!(
            description.contains("could not be fetched"),
            "{path}: {description}"
        );
    }
    assert_eq!(redirected.load(Ordering::SeqCst), 0, "no redirect followed");

    // Kept an hour: fetched again at 3,600 s, not at 3,599 s.
    let id = register(&app, KeySource::JwksUri(format!("{base}/jwks.json"))).await;
    assert_eq!(outcome(id.clone()).await.status(), 200);
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    app.clock.advance(std::time::Duration::from_secs(3599));
    app.sync().await;
    assert_eq!(outcome(id.clone()).await.status(), 200);
    assert_eq!(hits.load(Ordering::SeqCst), 1, "cached within the hour");
    app.clock.advance(std::time::Duration::from_secs(1));
    app.sync().await;
    assert_eq!(outcome(id).await.status(), 200);
    assert_eq!(
        hits.load(Ordering::SeqCst),
        2,
        "fetched again after an hour"
    );
}
