//! What the README promises and no other test held the server to: lifetime bounds, request
//! and connection limits, key pruning, the reuse threshold, refusals counted against the
//! plan's rate, rate limit fields on errors, metrics of throttled addresses, usage written
//! on shutdown, and revocation of an expired token.

use std::time::{Duration, Instant};

use tessera_proto::Algorithm;
use tessera_server::registrar::{Change, PlanSettings, RegistrarError};
use tessera_store::{AuthMethod, RateLimit, MAX_TOKEN_TTL};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use tessera_testkit::*;

const NEWS: &str = "grant_type=client_credentials&scope=news-api";

async fn plan(app: &TestApp, name: &str, settings: PlanSettings) {
    app.registrar()
        .set_plan_with(name, "news-api", &settings)
        .await
        .unwrap();
}

fn sample(metrics: &str, series: &str) -> Option<u64> {
    metrics
        .lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next())
        .map(|v| v.parse().unwrap())
}

#[tokio::test]
async fn token_lifetimes_go_up_to_a_day_and_no_further() {
    let app = spawn_app().await;
    let day = PlanSettings {
        token_ttl: Some(MAX_TOKEN_TTL),
        ..PlanSettings::default()
    };
    plan(&app, "daily", day).await;
    assert_eq!(MAX_TOKEN_TTL, 86_400);
    let longer = PlanSettings {
        token_ttl: Some(MAX_TOKEN_TTL + 1),
        ..PlanSettings::default()
    };
    let refused = app
        .registrar()
        .set_plan_with("longer", "news-api", &longer)
        .await;
    assert!(
        matches!(refused, Err(RegistrarError::BadTtl)),
        "{refused:?}"
    );
    let (id, secret) = app.client_on("daily", AuthMethod::ClientSecretBasic).await;
    let body: serde_json::Value = app.token(&id, &secret, NEWS).await.json().await.unwrap();
    assert_eq!(body["expires_in"], 86_400);
    let claims = claims_of(body["access_token"].as_str().unwrap());
    assert_eq!(
        claims["exp"].as_i64().unwrap() - claims["iat"].as_i64().unwrap(),
        86_400
    );
}

/// Sends a request head with one header of `filler` bytes and reads the answer until the
/// server closes (or resets) the connection.
async fn head_of_size(app: &TestApp, filler: usize) -> String {
    let request = format!(
        "GET /healthz HTTP/1.1\r\nhost: x\r\nx-filler: {}\r\nconnection: close\r\n\r\n",
        "a".repeat(filler)
    );
    let mut stream = TcpStream::connect(app.addr).await.unwrap();
    // The head fits in the socket buffers, so it is all sent before the server reads; the
    // server stops reading an oversized head at 16 KiB, answers, and closes with bytes
    // unread: a reset, which the answer precedes on the wire.
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = stream.read(&mut buf).await {
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn a_request_head_must_fit_in_16_kib() {
    let app = spawn_app().await;
    let fits = head_of_size(&app, 15 * 1024).await;
    assert!(fits.starts_with("HTTP/1.1 200"), "{fits}");
    // Refused with 431, not dropped: an empty answer (a reset or a crash) fails here.
    let too_big = head_of_size(&app, 17 * 1024).await;
    assert!(too_big.starts_with("HTTP/1.1 431"), "{too_big:?}");
    // And the server is still there.
    assert_eq!(
        app.http
            .get(app.url("/healthz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
}

/// Sends `GET /healthz` on `stream` and reads its answer (headers and the short body).
async fn health_on(stream: &mut TcpStream) -> String {
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 1024];
    let n = stream.read(&mut buf).await.unwrap();
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[tokio::test]
async fn at_the_connection_cap_the_next_connection_waits_for_one_to_close() {
    let app = spawn_with(|s| s.config.max_connections = 1).await;
    // The one connection the cap allows, kept open after an answer.
    let mut first = TcpStream::connect(app.addr).await.unwrap();
    assert!(health_on(&mut first).await.starts_with("HTTP/1.1 200"));

    // A second one is accepted by the kernel (its backlog) and its request sent...
    let mut second = TcpStream::connect(app.addr).await.unwrap();
    second
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    // ...but not served while the first is open. No wall-clock window: the server answers
    // 50 requests on the first connection meanwhile, so it is running, and a server that
    // broke the cap would have had those 50 turns to accept and answer the second; however
    // slow the machine, the second must still be unanswered after them.
    for _ in 0..50 {
        assert!(health_on(&mut first).await.starts_with("HTTP/1.1 200"));
    }
    let mut probe = [0u8; 64];
    match second.try_read(&mut probe) {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("served past the connection cap: {other:?}"),
    }

    // Once the first closes, the second is served.
    drop(first);
    let mut answer = Vec::new();
    second.read_to_end(&mut answer).await.unwrap();
    assert!(
        answer.starts_with(b"HTTP/1.1 200"),
        "served once a slot was free"
    );
}

#[tokio::test]
async fn rotation_deletes_keys_whose_last_token_has_expired() {
    let app = spawn_app().await;
    let first = app.store.keys().await.unwrap();
    assert_eq!(first.len(), 1);
    let admin = app.registrar();
    let kids = || async {
        let keys = app.store.keys().await.unwrap();
        keys.into_iter().map(|k| k.kid).collect::<Vec<String>>()
    };
    // The second key signs from one second on: a later second than the first key's, so
    // that the two are ordered by time, not by kid.
    let second = admin
        .rotate_keys(&app.secrets, Algorithm::EdDSA, 1)
        .await
        .unwrap();
    // The first key is superseded from then on; it stays while a token it signed may live.
    app.clock
        .advance(Duration::from_secs(u64::from(MAX_TOKEN_TTL)));
    admin
        .rotate_keys(&app.secrets, Algorithm::EdDSA, 0)
        .await
        .unwrap();
    assert!(kids().await.contains(&first[0].kid), "pruned too early");
    app.clock.advance(Duration::from_secs(1));
    admin
        .rotate_keys(&app.secrets, Algorithm::EdDSA, 0)
        .await
        .unwrap();
    let kids = kids().await;
    assert!(
        !kids.contains(&first[0].kid),
        "a key no token can need is deleted"
    );
    assert!(
        kids.contains(&second.kid),
        "the key superseded a day ago is kept"
    );
    assert_eq!(kids.len(), 3);
}

/// The token and `expires_in` of a token request for news-api.
async fn news_token(
    app: &TestApp,
    id: &tessera_proto::ClientId,
    secret: &tessera_proto::ClientSecret,
) -> (String, u64) {
    let body: serde_json::Value = app.token(id, secret, NEWS).await.json().await.unwrap();
    (
        body["access_token"].as_str().unwrap().to_owned(),
        body["expires_in"].as_u64().unwrap(),
    )
}

#[tokio::test]
async fn reuse_stops_when_too_little_life_is_left_and_is_counted() {
    let app = spawn_app().await;
    let reusing = PlanSettings {
        token_ttl: Some(100),
        reuse_percent: Change::Set(50),
        ..PlanSettings::default()
    };
    plan(&app, "reusing", reusing).await;
    let (id, secret) = app
        .client_on("reusing", AuthMethod::ClientSecretBasic)
        .await;
    let (first, _) = news_token(&app, &id, &secret).await;
    // 51 s left of 100: more than half, the same token.
    app.clock.advance(Duration::from_secs(49));
    assert_eq!(news_token(&app, &id, &secret).await, (first.clone(), 51));
    // 50 s left: no longer more than half, a new one.
    app.clock.advance(Duration::from_secs(1));
    let (second, left) = news_token(&app, &id, &secret).await;
    assert_ne!(second, first);
    assert_eq!(left, 100);
    let text = app.metrics().await;
    assert_eq!(
        sample(&text, "tessera_tokens_reused_total{plan=\"reusing\"}"),
        Some(1)
    );
    assert_eq!(
        sample(&text, "tessera_tokens_issued_total{plan=\"reusing\"}"),
        Some(3)
    );
}

#[tokio::test]
async fn refusals_count_against_the_rate_and_carry_its_fields() {
    let app = spawn_app().await;
    let limited = PlanSettings {
        token_rate: Change::Set(RateLimit {
            count: 2,
            period_secs: 60,
            burst: 2,
        }),
        ..PlanSettings::default()
    };
    plan(&app, "limited", limited).await;
    let (id, secret) = app
        .client_on("limited", AuthMethod::ClientSecretBasic)
        .await;
    // A refused request of an identified client takes its share, and says so.
    let refused = app
        .token(&id, &secret, "grant_type=client_credentials&scope=oms-api")
        .await;
    assert_eq!(refused.status(), 400);
    assert_eq!(refused.headers()["ratelimit-policy"], "\"token\";q=2;w=60");
    assert_eq!(refused.headers()["ratelimit"], "\"token\";r=1;t=30");
    assert_eq!(error_of(refused).await.1, "invalid_scope");
    assert_eq!(app.token(&id, &secret, NEWS).await.status(), 200);
    let over = app.token(&id, &secret, NEWS).await;
    assert_eq!(over.status(), 429);
    assert_eq!(over.headers()["retry-after"], "30");
}

#[tokio::test]
async fn throttled_addresses_are_counted_in_the_metrics() {
    let app = spawn_with(|s| {
        s.config.auth_failures_per_source_and_client = RateLimit {
            count: 1,
            period_secs: 60,
            burst: 1,
        };
    })
    .await;
    let (id, _) = app.client().await;
    let wrong = tessera_proto::ClientSecret::new("guess");
    assert_eq!(app.token(&id, &wrong, NEWS).await.status(), 401);
    assert_eq!(app.token(&id, &wrong, NEWS).await.status(), 429);
    let text = app.metrics().await;
    assert_eq!(
        sample(&text, "tessera_rate_limited_total{limit=\"auth_failure\"}"),
        Some(1)
    );
}

#[tokio::test]
async fn usage_is_written_on_shutdown() {
    let mut app = spawn_app().await;
    let (id, secret) = app.client().await;
    assert_eq!(app.token(&id, &secret, NEWS).await.status(), 200);
    assert!(
        app.store.usage(&id).await.unwrap().is_empty(),
        "not yet written"
    );
    app.stop().await.unwrap();
    let usage = app.store.usage(&id).await.unwrap();
    assert_eq!(usage.len(), 1);
    assert_eq!((usage[0].issued, usage[0].refused), (1, 0));
}

/// With housekeeping running all the time, stopping the server lands in the middle of a
/// usage flush more often than not; the counts it holds must still reach the store.
#[tokio::test]
async fn a_stop_during_housekeeping_loses_no_usage() {
    let mut app = spawn_with(|s| s.config.housekeeping_interval = Duration::from_millis(1)).await;
    let (id, secret) = app.client().await;
    for _ in 0..20 {
        assert_eq!(app.token(&id, &secret, NEWS).await.status(), 200);
    }
    app.stop().await.unwrap();
    let issued: u64 = app
        .store
        .usage(&id)
        .await
        .unwrap()
        .iter()
        .map(|u| u.issued)
        .sum();
    assert_eq!(issued, 20);
}

#[tokio::test]
async fn revoking_an_expired_token_answers_200() {
    let app = spawn_app().await;
    let (id, secret) = app.client().await;
    let body: serde_json::Value = app.token(&id, &secret, NEWS).await.json().await.unwrap();
    app.clock.advance(Duration::from_secs(3601));
    let answer = app
        .http
        .post(app.url("/connect/revocation"))
        .header("authorization", basic(&id, &secret))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={}", body["access_token"].as_str().unwrap()))
        .send()
        .await
        .unwrap();
    assert_eq!(
        answer.status(),
        200,
        "RFC 7009 2.2: nothing to revoke is no error"
    );
    assert_eq!(answer.headers()["cache-control"], "no-store");
}

/// A connection from `ip` that has been served one request (so it is open and counted).
async fn held_connection(app: &TestApp, ip: [u8; 4]) -> Option<TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(std::net::SocketAddr::from((ip, 0))).unwrap();
    let mut stream = socket.connect(app.addr).await.unwrap();
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .ok()?;
    let mut buf = [0u8; 512];
    match stream.read(&mut buf).await {
        Ok(n) if buf[..n].starts_with(b"HTTP/1.1 200") => Some(stream),
        _ => None,
    }
}

#[tokio::test]
async fn one_address_cannot_hold_every_connection() {
    let app = spawn_with(|s| s.config.max_connections_per_address = 2).await;
    let first = held_connection(&app, [127, 0, 0, 3]).await.expect("first");
    let second = held_connection(&app, [127, 0, 0, 3]).await.expect("second");
    assert!(
        held_connection(&app, [127, 0, 0, 3]).await.is_none(),
        "a third connection from the same address is closed"
    );
    assert!(
        held_connection(&app, [127, 0, 0, 4]).await.is_some(),
        "another address is served"
    );
    drop(first);
    // Its place is given back once the server sees the close.
    let started = Instant::now();
    while held_connection(&app, [127, 0, 0, 3]).await.is_none() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "never given back"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(second);
}

#[tokio::test]
async fn keep_alive_ends_after_the_request_cap() {
    let app = spawn_with(|s| s.config.max_requests_per_connection = 2).await;
    let mut stream = TcpStream::connect(app.addr).await.unwrap();
    let request = b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n";
    stream.write_all(request).await.unwrap();
    let mut buf = [0u8; 512];
    let n = stream.read(&mut buf).await.unwrap();
    let first = String::from_utf8_lossy(&buf[..n]).to_lowercase();
    assert!(first.starts_with("http/1.1 200") && !first.contains("connection: close"));
    stream.write_all(request).await.unwrap();
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut rest))
        .await
        .expect("the server closes the connection after the second answer")
        .unwrap();
    let second = String::from_utf8_lossy(&rest).to_lowercase();
    assert!(
        second.starts_with("http/1.1 200") && second.contains("connection: close"),
        "{second}"
    );
}

#[tokio::test]
async fn keep_alive_ends_once_the_connection_is_older_than_its_age() {
    let app = spawn_with(|s| s.config.max_connection_age = Duration::from_secs(60)).await;
    let mut stream = TcpStream::connect(app.addr).await.unwrap();
    let request = b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n";
    let mut buf = [0u8; 512];
    // Younger than its age, however many answers: the connection stays open.
    for _ in 0..2 {
        stream.write_all(request).await.unwrap();
        let n = stream.read(&mut buf).await.unwrap();
        let answer = String::from_utf8_lossy(&buf[..n]).to_lowercase();
        assert!(
            answer.starts_with("http/1.1 200") && !answer.contains("connection: close"),
            "{answer}"
        );
    }
    app.clock.advance(Duration::from_secs(60));
    stream.write_all(request).await.unwrap();
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut rest))
        .await
        .expect("the server closes the connection once it has reached its age")
        .unwrap();
    let last = String::from_utf8_lossy(&rest).to_lowercase();
    assert!(
        last.starts_with("http/1.1 200") && last.contains("connection: close"),
        "{last}"
    );
}

/// Whether this process's log holds the warning that `/metrics` is public on `addr`.
fn warned_of_public_metrics(app: &TestApp) -> bool {
    let listen = format!("\"listen\":\"{}\"", app.addr);
    app.log().lines().any(|line| {
        line.contains(&listen)
            && line.contains("/metrics is public on this listener")
            && line.contains("--metrics-listen")
    })
}

/// `/metrics` on the main listener is allowed, and said at start (L8); with a listener of
/// its own, nothing is said.
#[tokio::test]
async fn metrics_on_the_main_listener_are_warned_of_at_start() {
    let public = spawn_app().await;
    until("the warning is logged", || async {
        warned_of_public_metrics(&public)
    })
    .await;
    assert!(!public.metrics().await.is_empty());

    let private = spawn_with(|s| s.config.metrics_listen = Some(([127, 0, 0, 1], 0).into())).await;
    // Answered, so past the point where the warning would have been logged.
    let health = private
        .http
        .get(private.url("/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    assert!(!warned_of_public_metrics(&private));
}

#[tokio::test]
async fn metrics_can_live_on_a_listener_of_their_own() {
    let app = spawn_with(|s| s.config.metrics_listen = Some(([127, 0, 0, 1], 0).into())).await;
    let main = app.http.get(app.url("/metrics")).send().await.unwrap();
    assert_eq!(main.status(), 404, "not on the public listener");
    let addr = app.metrics_addr.expect("the metrics listener");
    let (id, secret) = app.client().await;
    assert_eq!(app.token(&id, &secret, NEWS).await.status(), 200);
    let text = reqwest::get(format!("http://{addr}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(
        sample(&text, "tessera_tokens_issued_total{plan=\"pro\"}"),
        Some(1)
    );
    let token = reqwest::Client::new()
        .post(format!("http://{addr}/connect/token"))
        .send()
        .await
        .unwrap();
    assert_eq!(token.status(), 404, "only /metrics there");
}
