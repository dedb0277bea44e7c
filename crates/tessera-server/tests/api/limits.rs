//! Rate limits, brute-force protection, the in-flight cap, token reuse, metrics, usage and
//! the audit trail.

use std::time::Duration;

use tessera_server::registrar::PlanSettings;
use tessera_store::{AuthMethod, RateLimit};

use tessera_testkit::*;

const NEWS: &str = "grant_type=client_credentials&scope=news-api";

pub(crate) async fn plan_with(app: &TestApp, name: &str, settings: PlanSettings) {
    app.registrar()
        .set_plan_with(name, "news-api", &settings)
        .await
        .unwrap();
}

pub(crate) fn rate(count: u32, period_secs: u32, burst: u32) -> PlanSettings {
    PlanSettings {
        token_rate: tessera_server::registrar::Change::Set(RateLimit {
            count,
            period_secs,
            burst,
        }),
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

    app.clock.advance(Duration::from_secs(1));
    assert_eq!(app.token(&id, &secret, NEWS).await.status(), 200);
}

pub(crate) fn per_minute(count: u32) -> RateLimit {
    RateLimit {
        count,
        period_secs: 60,
        burst: count,
    }
}

#[tokio::test]
async fn failures_are_throttled_per_client_and_address_and_never_the_right_secret() {
    let app = spawn_with(|s| s.config.auth_failures_per_source_and_client = per_minute(3)).await;
    let (id, secret) = app.client().await;
    let (other, other_secret) = app.client().await;
    // A neighbour behind the same address (a NAT, a load balancer without --trusted-proxy).
    let from = |ip: [u8; 4]| {
        reqwest::Client::builder()
            .local_address(std::net::IpAddr::from(ip))
            .build()
            .unwrap()
    };
    let (attacker, neighbour) = (from([127, 0, 0, 2]), from([127, 0, 0, 2]));
    let attempt = |http: &reqwest::Client, id: &tessera_proto::ClientId, secret: &str| {
        http.post(app.url("/connect/token"))
            .header(
                "authorization",
                basic(id, &tessera_proto::ClientSecret::new(secret.to_owned())),
            )
            .header("content-type", "application/x-www-form-urlencoded")
            .body(NEWS)
            .send()
    };
    for i in 0..3 {
        let r = attempt(&attacker, &id, &format!("guess-{i}"))
            .await
            .unwrap();
        assert_eq!(r.status(), 401, "guess {i}");
    }
    // Over the allowance: the next wrong secret gets 429 with the wait.
    let limited = attempt(&attacker, &id, "guess-3").await.unwrap();
    assert_eq!(limited.status(), 429);
    let retry: u64 = limited.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&retry), "{retry}");
    // The policy named is the failure allowance per address and client, not a plan's.
    assert_eq!(limited.headers()["ratelimit-policy"], "\"token\";q=3;w=60");
    assert_eq!(error_of(limited).await.1, "rate_limited");
    // The right secret from the same address is never refused by the throttle.
    let right = attempt(&attacker, &id, secret.expose()).await.unwrap();
    assert_eq!(right.status(), 200);
    // Another client at the same address is unaffected: its own failures are its own.
    let wrong = attempt(&neighbour, &other, "typo").await.unwrap();
    assert_eq!(wrong.status(), 401);
    let ok = attempt(&neighbour, &other, other_secret.expose())
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    // And from another address, the attacked client goes on as ever.
    assert_eq!(app.token(&id, &secret, NEWS).await.status(), 200);
    assert_eq!(
        app.token(&id, &tessera_proto::ClientSecret::new("typo"), NEWS)
            .await
            .status(),
        401
    );
}

#[tokio::test]
async fn a_flood_of_unknown_ids_meets_the_coarse_cap_of_its_address() {
    let app = spawn_with(|s| s.config.auth_failures_per_source = per_minute(5)).await;
    let (id, secret) = app.client().await;
    let mut statuses = Vec::new();
    for i in 0..7 {
        let unknown = tessera_proto::ClientId::parse(&format!("tc_unknown{i}")).unwrap();
        let r = app
            .token(&unknown, &tessera_proto::ClientSecret::new("x"), NEWS)
            .await;
        statuses.push(r.status().as_u16());
    }
    assert_eq!(statuses, [401, 401, 401, 401, 401, 429, 429]);
    // Correct credentials from that address still pass.
    assert_eq!(app.token(&id, &secret, NEWS).await.status(), 200);
}

#[tokio::test]
async fn ratelimit_says_when_the_allowance_is_whole_again() {
    let app = spawn_app().await;
    // One request per 30 s, two at once: each request taken is 30 s of refill.
    plan_with(&app, "slow", rate(2, 60, 2)).await;
    let (id, secret) = app.client_on("slow", AuthMethod::ClientSecretBasic).await;
    for expected in ["\"token\";r=1;t=30", "\"token\";r=0;t=60"] {
        let ok = app.token(&id, &secret, NEWS).await;
        assert_eq!(ok.status(), 200);
        assert_eq!(ok.headers()["ratelimit"], expected);
    }
    let limited = app.token(&id, &secret, NEWS).await;
    assert_eq!(limited.status(), 429);
    assert_eq!(limited.headers()["retry-after"], "30");
}

#[tokio::test]
async fn each_address_is_throttled_for_its_retry_after_and_no_longer() {
    let app = spawn_with(|s| s.config.auth_failures_per_source_and_client = per_minute(1)).await;
    let (id, _) = app.client().await;
    let wrong = tessera_proto::ClientSecret::new("guess");
    let from = |last: u8| {
        reqwest::Client::builder()
            .local_address(std::net::IpAddr::from([127, 0, 0, last]))
            .build()
            .unwrap()
    };
    let (a, b) = (from(2), from(3));
    let ask = |client: &reqwest::Client| {
        client
            .post(app.url("/connect/token"))
            .header("authorization", basic(&id, &wrong))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(NEWS)
            .send()
    };
    let retry_after = |response: &reqwest::Response| {
        assert_eq!(response.status(), 429);
        response.headers()["retry-after"]
            .to_str()
            .unwrap()
            .to_owned()
    };

    // One failure a minute per address and client: A's second waits 60 s.
    assert_eq!(ask(&a).await.unwrap().status(), 401);
    assert_eq!(retry_after(&ask(&a).await.unwrap()), "60");

    // Half-way, B uses up its own allowance; A's wait is untouched by it.
    app.clock.advance(Duration::from_secs(30));
    assert_eq!(ask(&b).await.unwrap().status(), 401);
    assert_eq!(retry_after(&ask(&a).await.unwrap()), "30");
    assert_eq!(retry_after(&ask(&b).await.unwrap()), "60");

    // Once Retry-After has passed, to the second, A is heard again; B still waits.
    app.clock.advance(Duration::from_secs(30));
    assert_eq!(ask(&a).await.unwrap().status(), 401);
    assert_eq!(retry_after(&ask(&b).await.unwrap()), "30");
}

#[tokio::test]
async fn a_slow_upload_holds_no_slot_and_the_cap_answers_503() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let app = spawn_with(|s| s.config.max_in_flight = 1).await;
    let (id, secret) = app.client().await;
    // Requests stalled mid-body do not hold the only slot: it is taken once a body is in.
    // Each asks `Expect: 100-continue`, and the server says `100 Continue` when it starts
    // reading the body: so all three are known to be read up to their bodies, and stalled
    // there, before the next request asks for the slot.
    let head = format!(
        "POST /connect/token HTTP/1.1\r\nhost: x\r\nauthorization: {}\r\ncontent-type: application/x-www-form-urlencoded\r\ncontent-length: {}\r\nexpect: 100-continue\r\n\r\n",
        basic(&id, &secret),
        NEWS.len()
    );
    let mut stalled = Vec::new();
    for _ in 0..3 {
        let mut stream = tokio::net::TcpStream::connect(app.addr).await.unwrap();
        stream.write_all(head.as_bytes()).await.unwrap();
        let mut continued = Vec::new();
        while !continued.ends_with(b"\r\n\r\n") {
            let mut byte = [0u8; 1];
            stream.read_exact(&mut byte).await.unwrap();
            continued.push(byte[0]);
        }
        assert!(
            continued.starts_with(b"HTTP/1.1 100"),
            "{}",
            String::from_utf8_lossy(&continued)
        );
        stream.write_all(b"grant").await.unwrap();
        stalled.push(stream);
    }
    assert_eq!(app.token(&id, &secret, NEWS).await.status(), 200);
    drop(stalled);

    // With no slot at all, OAuth requests get 503 and Retry-After; health and keys still answer.
    let closed = spawn_with(|s| s.config.max_in_flight = 0).await;
    let (id, secret) = closed.client().await;
    let busy = closed.token(&id, &secret, NEWS).await;
    assert_eq!(busy.status(), 503);
    assert_eq!(busy.headers()["retry-after"], "1");
    assert_eq!(error_of(busy).await.1, "temporarily_unavailable");
    for path in ["/healthz", "/.well-known/jwks.json"] {
        let r = closed.http.get(closed.url(path)).send().await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
    }
}

#[tokio::test]
async fn behind_a_trusted_proxy_the_forwarded_address_is_throttled() {
    let app = spawn_with(|s| {
        s.config.trusted_proxies = vec![std::net::IpAddr::from([127, 0, 0, 1])];
        s.config.auth_failures_per_source_and_client = per_minute(2);
    })
    .await;
    let (id, secret) = app.client().await;
    let wrong = tessera_proto::ClientSecret::new("guess");
    let from = |ip: &'static str, secret: &tessera_proto::ClientSecret| {
        app.http
            .post(app.url("/connect/token"))
            .header("authorization", basic(&id, secret))
            .header("x-forwarded-for", format!("203.0.113.7, {ip}"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(NEWS)
            .send()
    };
    // Requests without credentials (a client waiting for the challenge) do not count.
    for _ in 0..5 {
        let anonymous = app
            .http
            .post(app.url("/connect/token"))
            .header("x-forwarded-for", "198.51.100.1")
            .header("content-type", "application/x-www-form-urlencoded")
            .body(NEWS)
            .send()
            .await
            .unwrap();
        assert_eq!(anonymous.status(), 401);
    }
    for _ in 0..2 {
        assert_eq!(from("198.51.100.1", &wrong).await.unwrap().status(), 401);
    }
    // The address the proxy saw is throttled (the leftmost entry, the client's own claim,
    // is not what counts); another address behind the same proxy is not.
    assert_eq!(from("198.51.100.1", &wrong).await.unwrap().status(), 429);
    assert_eq!(from("198.51.100.2", &wrong).await.unwrap().status(), 401);
    assert_eq!(from("198.51.100.1", &secret).await.unwrap().status(), 200);
}

#[tokio::test]
async fn an_untrusted_peer_cannot_escape_the_throttle_with_x_forwarded_for() {
    // The loopback peer is no trusted proxy here: its X-Forwarded-For is the caller's to
    // write, so a new address in each request must not buy a new allowance.
    let app = spawn_with(|s| s.config.auth_failures_per_source_and_client = per_minute(2)).await;
    let (id, _) = app.client().await;
    let wrong = tessera_proto::ClientSecret::new("guess");
    let mut statuses = Vec::new();
    for i in 1..=4 {
        let r = app
            .http
            .post(app.url("/connect/token"))
            .header("authorization", basic(&id, &wrong))
            .header("x-forwarded-for", format!("198.51.100.{i}"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(NEWS)
            .send()
            .await
            .unwrap();
        statuses.push(r.status().as_u16());
    }
    // The same as without the header: two failures allowed, then 429.
    assert_eq!(statuses, [401, 401, 429, 429]);
}

#[tokio::test]
async fn reuse_returns_the_same_token_with_less_time_and_never_a_revoked_one() {
    let app = spawn_app().await;
    plan_with(
        &app,
        "reusing",
        PlanSettings {
            token_ttl: Some(60),
            reuse_percent: tessera_server::registrar::Change::Set(50),
            ..PlanSettings::default()
        },
    )
    .await;
    let (id, secret) = app
        .client_on("reusing", AuthMethod::ClientSecretBasic)
        .await;
    let first: serde_json::Value = app.token(&id, &secret, NEWS).await.json().await.unwrap();
    app.clock.advance(Duration::from_secs(2));
    let second: serde_json::Value = app.token(&id, &secret, NEWS).await.json().await.unwrap();
    assert_eq!(first["access_token"], second["access_token"]);
    assert_eq!(first["expires_in"], 60);
    // The kept token never shows in a Debug dump of the state.
    let state_dump = format!("{:?}", app.state);
    assert!(!state_dump.contains(first["access_token"].as_str().unwrap()));
    assert!(!state_dump.contains(secret.expose()));
    let left = second["expires_in"].as_u64().unwrap();
    assert!((57..=59).contains(&left), "{left}");
    // expires_in stays true: iat + ttl - now.
    let claims = claims_of(second["access_token"].as_str().unwrap());
    let now = app.clock.now() as u64;
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

/// The value of the sample `series` in `/metrics`; `None` when the series is absent (a
/// label set not yet counted). Panics unless `/metrics` answers 200, and unless a present
/// series has its family's TYPE line, so that a missing endpoint never reads as zero.
pub(crate) async fn metric(app: &TestApp, series: &str) -> Option<u64> {
    let text = app.metrics().await;
    let value = text
        .lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next())
        .map(|v| v.parse().unwrap());
    if value.is_some() {
        let family = series.split('{').next().unwrap();
        let family = family.strip_suffix("_count").unwrap_or(family);
        let family = family.strip_suffix("_total").unwrap_or(family);
        assert!(
            text.lines()
                .any(|l| l.starts_with("# TYPE ") && l[7..].starts_with(family)),
            "no family {family} in {text}"
        );
    }
    value
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
    assert_eq!(metric(&app, issued).await, None, "nothing issued yet");

    assert_eq!(app.token(&id, &secret, NEWS).await.status(), 200);
    assert_eq!(app.token(&id, &secret, NEWS).await.status(), 200);
    let bad_scope = "grant_type=client_credentials&scope=oms-api";
    assert_eq!(app.token(&id, &secret, bad_scope).await.status(), 400);
    let wrong = tessera_proto::ClientSecret::new("nope");
    assert_eq!(app.token(&id, &wrong, NEWS).await.status(), 401);
    assert_eq!(app.token(&lim, &lim_secret, NEWS).await.status(), 200);
    assert_eq!(app.token(&lim, &lim_secret, NEWS).await.status(), 429);

    assert_eq!(metric(&app, issued).await, Some(2));
    assert_eq!(metric(&app, scope_refused).await, Some(1));
    assert_eq!(metric(&app, client_refused).await, Some(1));
    assert_eq!(metric(&app, limited).await, Some(1));
    assert_eq!(metric(&app, count).await, Some(6));
    let text = app.metrics().await;
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
        tessera_server::usage::utc_day(app.clock.now())
    );
}
