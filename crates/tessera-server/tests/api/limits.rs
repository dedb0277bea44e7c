//! Rate limits, brute-force protection, the in-flight cap, token reuse, metrics, usage and
//! the audit trail.

use std::time::Duration;

use tessera_server::admin::{self, PlanSettings};
use tessera_store::{AuthMethod, RateLimit};

use crate::helpers::*;

const NEWS: &str = "grant_type=client_credentials&scope=news-api";

async fn plan_with(app: &TestApp, name: &str, settings: PlanSettings) {
    admin::set_plan_with(app.store.as_ref(), name, "news-api", &settings)
        .await
        .unwrap();
}

fn rate(count: u32, period_secs: u32, burst: u32) -> PlanSettings {
    PlanSettings {
        token_rate: Some(Some(RateLimit {
            count,
            period_secs,
            burst,
        })),
        ..PlanSettings::default()
    }
}

#[tokio::test]
async fn the_request_over_the_limit_gets_429_and_later_ones_succeed() {
    let app = spawn_app().await;
    plan_with(&app, "limited", rate(2, 1, 2)).await;
    let (id, secret) = app
        .client_on("limited", AuthMethod::ClientSecretBasic)
        .await;
    let (other, other_secret) = app
        .client_on("limited", AuthMethod::ClientSecretBasic)
        .await;

    for remaining in [1, 0] {
        let ok = app.token(&id, &secret, NEWS).await;
        assert_eq!(ok.status(), 200);
        assert_eq!(ok.headers()["ratelimit-policy"], "\"token\";q=2;w=1");
        let current = ok.headers()["ratelimit"].to_str().unwrap().to_owned();
        assert!(
            current.starts_with(&format!("\"token\";r={remaining};t=")),
            "{current}"
        );
    }
    let limited = app.token(&id, &secret, NEWS).await;
    assert_eq!(limited.status(), 429);
    assert_eq!(limited.headers()["retry-after"], "1");
    assert_eq!(limited.headers()["ratelimit"], "\"token\";r=0;t=1");
    assert_eq!(limited.headers()["ratelimit-policy"], "\"token\";q=2;w=1");
    let (_, error, description) = error_of(limited).await;
    assert_eq!(error, "rate_limited");
    assert!(description.contains("retry after 1 s"), "{description}");

    // Another client of the same plan is not affected.
    assert_eq!(app.token(&other, &other_secret, NEWS).await.status(), 200);

    tokio::time::sleep(Duration::from_millis(1050)).await;
    assert_eq!(app.token(&id, &secret, NEWS).await.status(), 200);
}

#[tokio::test]
async fn brute_force_from_one_address_is_throttled_while_others_get_tokens() {
    let app = spawn_with(|c| {
        c.auth_failure_rate = RateLimit {
            count: 3,
            period_secs: 60,
            burst: 3,
        }
    })
    .await;
    let (id, secret) = app.client().await;
    let attacker = reqwest::Client::builder()
        .local_address(std::net::IpAddr::from([127, 0, 0, 2]))
        .build()
        .unwrap();
    let attempt = |secret: String| {
        attacker
            .post(app.url("/connect/token"))
            .header(
                "authorization",
                basic(&id, &tessera_proto::ClientSecret::new(secret)),
            )
            .header("content-type", "application/x-www-form-urlencoded")
            .body(NEWS)
            .send()
    };
    for i in 0..4 {
        let r = attempt(format!("guess-{i}")).await.unwrap();
        assert_eq!(r.status(), 401, "guess {i}");
    }
    // Now even the right secret from that address is refused, unchecked.
    let blocked = attempt(secret.expose().to_owned()).await.unwrap();
    assert_eq!(blocked.status(), 429);
    let retry: u64 = blocked.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&retry), "{retry}");
    assert_eq!(error_of(blocked).await.1, "rate_limited");
    // Another address still gets tokens.
    assert_eq!(app.token(&id, &secret, NEWS).await.status(), 200);
}

#[tokio::test]
async fn requests_over_the_in_flight_cap_get_503() {
    use tokio::io::AsyncWriteExt;
    let app = spawn_with(|c| c.max_in_flight = 1).await;
    let (id, secret) = app.client().await;
    // One request stalls mid-body and holds the only slot.
    let head = format!(
        "POST /connect/token HTTP/1.1\r\nhost: x\r\nauthorization: {}\r\ncontent-type: application/x-www-form-urlencoded\r\ncontent-length: {}\r\n\r\ngrant",
        basic(&id, &secret),
        NEWS.len()
    );
    let mut stalled = tokio::net::TcpStream::connect(app.addr).await.unwrap();
    stalled.write_all(head.as_bytes()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let busy = app.token(&id, &secret, NEWS).await;
    assert_eq!(busy.status(), 503);
    assert_eq!(busy.headers()["retry-after"], "1");
    assert_eq!(error_of(busy).await.1, "temporarily_unavailable");
    drop(stalled);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(app.token(&id, &secret, NEWS).await.status(), 200);
}

#[tokio::test]
async fn reuse_returns_the_same_token_with_less_time_and_never_a_revoked_one() {
    let app = spawn_app().await;
    plan_with(
        &app,
        "reusing",
        PlanSettings {
            token_ttl: Some(60),
            reuse_percent: Some(Some(50)),
            ..PlanSettings::default()
        },
    )
    .await;
    let (id, secret) = app
        .client_on("reusing", AuthMethod::ClientSecretBasic)
        .await;
    let first: serde_json::Value = app.token(&id, &secret, NEWS).await.json().await.unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let second: serde_json::Value = app.token(&id, &secret, NEWS).await.json().await.unwrap();
    assert_eq!(first["access_token"], second["access_token"]);
    assert_eq!(first["expires_in"], 60);
    let left = second["expires_in"].as_u64().unwrap();
    assert!((57..=59).contains(&left), "{left}");
    // expires_in stays true: iat + ttl - now.
    let claims = claims_of(second["access_token"].as_str().unwrap());
    let now = tessera_store::now() as u64;
    assert!(claims["exp"].as_u64().unwrap().abs_diff(now + left) <= 1);

    // The same scope set, spelt differently, is the same token.
    let both: serde_json::Value = app
        .token(
            &id,
            &secret,
            "grant_type=client_credentials&scope=news-api+news-api",
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(both["access_token"], first["access_token"]);

    // Revoked: never handed out again.
    let revoke = app
        .http
        .post(app.url("/connect/revocation"))
        .header("authorization", basic(&id, &secret))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={}", first["access_token"].as_str().unwrap()))
        .send()
        .await
        .unwrap();
    assert_eq!(revoke.status(), 200);
    let third: serde_json::Value = app.token(&id, &secret, NEWS).await.json().await.unwrap();
    assert_ne!(third["access_token"], first["access_token"]);
    assert_eq!(third["expires_in"], 60);
}

async fn metric(app: &TestApp, line_start: &str) -> u64 {
    let text = app
        .http
        .get(app.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find(|l| l.starts_with(line_start))
        .and_then(|l| l.rsplit(' ').next())
        .map_or(0, |v| v.parse().unwrap())
}

#[tokio::test]
async fn metrics_and_usage_follow_the_requests() {
    let app = spawn_app().await;
    plan_with(&app, "limited", rate(1, 60, 1)).await;
    let (id, secret) = app.client().await;
    let (lim, lim_secret) = app
        .client_on("limited", AuthMethod::ClientSecretBasic)
        .await;

    let issued = "tessera_tokens_issued_total{plan=\"pro\"}";
    let scope_refused =
        "tessera_token_requests_refused_total{plan=\"pro\",error=\"invalid_scope\"}";
    let client_refused =
        "tessera_token_requests_refused_total{plan=\"none\",error=\"invalid_client\"}";
    let limited = "tessera_rate_limited_total{limit=\"limited\"}";
    let count = "tessera_token_request_duration_seconds_count";
    assert_eq!(metric(&app, issued).await, 0);

    assert_eq!(app.token(&id, &secret, NEWS).await.status(), 200);
    assert_eq!(app.token(&id, &secret, NEWS).await.status(), 200);
    let bad_scope = "grant_type=client_credentials&scope=oms-api";
    assert_eq!(app.token(&id, &secret, bad_scope).await.status(), 400);
    let wrong = tessera_proto::ClientSecret::new("nope");
    assert_eq!(app.token(&id, &wrong, NEWS).await.status(), 401);
    assert_eq!(app.token(&lim, &lim_secret, NEWS).await.status(), 200);
    assert_eq!(app.token(&lim, &lim_secret, NEWS).await.status(), 429);

    assert_eq!(metric(&app, issued).await, 2);
    assert_eq!(metric(&app, scope_refused).await, 1);
    assert_eq!(metric(&app, client_refused).await, 1);
    assert_eq!(metric(&app, limited).await, 1);
    assert_eq!(metric(&app, count).await, 6);
    let text = app
        .http
        .get(app.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(text.contains("tessera_signing_key_age_seconds "));
    assert!(!text.contains(id.as_str()), "no per-client labels");

    // Usage per client and day, once written.
    app.state.housekeeping().await;
    let usage = app.store.usage(&id).await.unwrap();
    assert_eq!(usage.len(), 1);
    // The wrong secret did not identify the client, so only the scope refusal counts.
    assert_eq!((usage[0].issued, usage[0].refused), (2, 1));
    assert_eq!(
        usage[0].day,
        tessera_server::usage::utc_day(tessera_store::now())
    );
}

#[tokio::test]
async fn audit_events_name_who_and_what_but_never_a_secret() {
    use std::sync::{Arc, Mutex};
    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buf = Buf::default();
    let writer = buf.clone();
    let subscriber = tracing_subscriber::fmt()
        .json()
        .with_max_level(tracing::Level::INFO)
        .with_writer(move || writer.clone())
        .finish();
    // The test runtime has one thread, so the server's tasks log here too.
    let _guard = tracing::subscriber::set_default(subscriber);

    let app = spawn_app().await;
    let (id, secret) = app.client().await;
    let body: serde_json::Value = app.token(&id, &secret, NEWS).await.json().await.unwrap();
    let token = body["access_token"].as_str().unwrap().to_owned();
    let bad = "grant_type=client_credentials&scope=oms-api";
    assert_eq!(app.token(&id, &secret, bad).await.status(), 400);

    let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
    let events: Vec<serde_json::Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|e: &serde_json::Value| e["target"] == "tessera::audit")
        .collect();
    assert_eq!(events.len(), 2, "{text}");
    let issued = &events[0]["fields"];
    assert_eq!(issued["event"], "token_issued");
    assert_eq!(issued["client_id"], id.as_str());
    assert_eq!(issued["plan"], "pro");
    assert_eq!(issued["scope"], "news-api");
    assert_eq!(issued["outcome"], "issued");
    assert_eq!(issued["jti"], claims_of(&token)["jti"]);
    assert_eq!(issued["source"], "127.0.0.1");
    let refused = &events[1]["fields"];
    assert_eq!(refused["event"], "token_refused");
    assert_eq!(refused["outcome"], "invalid_scope");
    assert!(!text.contains(secret.expose()), "no secret in the logs");
    assert!(!text.contains(&token), "no token in the logs");
}
