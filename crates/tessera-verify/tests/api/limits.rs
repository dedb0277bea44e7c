//! Plan limits (issue 27) over real HTTP: an API built with the kit's extractors on 127.0.0.1:0,
//! its issuer a small server of the test's own that serves keys, the limits document
//! (`GET /api-limits/{api}`, as the contract writes it) and takes usage reports; time from a
//! clock the test sets. Redis is the shared one under a unique prefix, or a throwaway one for
//! the fault.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};
use tessera_proto::{ManualClock, ScopeSet};
use tessera_verify::{RequiredScope, Scoped, Verifier, VerifierBuilder};

use crate::helpers::{jwks, tessera_metadata, TestKey};

const API: &str = "news-api";

/// The scope of the protected route.
struct News;
impl RequiredScope for News {
    const SCOPE: &'static str = API;
}

/// What the issuer serves and what it was sent.
#[derive(Default)]
struct Seen {
    document: RwLock<Value>,
    /// `GET /api-limits/news-api` answered.
    limit_fetches: AtomicUsize,
    /// Answer 503 to the next this many usage reports.
    fail_reports: AtomicUsize,
    /// Every report body, accepted or not, in order.
    reports: Mutex<Vec<(StatusCode, Value)>>,
    /// Answer 503 to the limits document.
    down: std::sync::atomic::AtomicBool,
}

/// An issuer with keys, a limits document and a usage endpoint.
struct Issuer {
    url: String,
    key: TestKey,
    seen: Arc<Seen>,
}

#[derive(Clone)]
struct IssuerState {
    url: String,
    jwks: tessera_proto::JwkSet,
    seen: Arc<Seen>,
}

async fn issuer(document: Value) -> Issuer {
    let key = TestKey::ed25519();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Seen {
        document: RwLock::new(document),
        ..Seen::default()
    });
    let state = IssuerState {
        url: url.clone(),
        jwks: jwks(&[&key]),
        seen: seen.clone(),
    };
    let app = Router::new()
        .route(
            "/.well-known/oauth-authorization-server",
            get(|State(s): State<IssuerState>| async move { Json(tessera_metadata(&s.url)) }),
        )
        .route(
            "/.well-known/jwks.json",
            get(|State(s): State<IssuerState>| async move { Json(s.jwks) }),
        )
        .route("/api-limits/{api}", get(limits_document))
        .route("/api-usage", post(usage_report))
        .route(
            "/connect/token",
            post(|| async {
                Json(
                    json!({"access_token": "usage-token", "token_type": "Bearer",
                            "expires_in": 3600, "scope": "tessera-usage"}),
                )
            }),
        )
        .with_state(state);
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Issuer { url, key, seen }
}

async fn limits_document(
    State(s): State<IssuerState>,
    axum::extract::Path(api): axum::extract::Path<String>,
) -> Response {
    if s.seen.down.load(Ordering::SeqCst) || api != API {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    s.seen.limit_fetches.fetch_add(1, Ordering::SeqCst);
    let document = s.seen.document.read().unwrap().clone();
    ([("cache-control", "public, max-age=30")], Json(document)).into_response()
}

async fn usage_report(
    State(s): State<IssuerState>,
    headers: HeaderMap,
    body: Json<Value>,
) -> StatusCode {
    assert_eq!(headers["authorization"], "Bearer usage-token");
    let failing = s
        .seen
        .fail_reports
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok();
    let status = if failing {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::NO_CONTENT
    };
    s.seen.reports.lock().unwrap().push((status, body.0));
    status
}

/// The document of the brief: free at 5/min with a daily quota, partner at 600/min, pro open.
fn document(free: &Value) -> Value {
    json!({"api": API, "plans": {
        "free": free,
        "partner": {"rate": {"limit": 600, "window_seconds": 60}, "burst": 600},
        "pro": {}
    }})
}

fn five_a_minute() -> Value {
    json!({"rate": {"limit": 5, "window_seconds": 60}, "burst": 5,
           "quota": {"limit": 1000, "period": "day"}})
}

impl Issuer {
    /// A token of `client` on `plan` (none: no claim), valid for a day by `clock`.
    fn token(&self, client: &str, plan: Option<&str>, clock: &ManualClock) -> String {
        let now = clock.now() as u64;
        let mut claims = json!({
            "iss": self.url, "sub": client, "client_id": client, "aud": [API],
            "scope": API, "iat": now, "exp": now + 86_400, "app_only": true,
            "jti": format!("{client}-{now}-{}", plan.unwrap_or("-")),
        });
        if let Some(plan) = plan {
            claims["plan"] = json!(plan);
        }
        self.key.sign(&claims)
    }

    /// A token of `client` of organization `org` on `plan`, valid for a day by `clock`.
    fn org_token(&self, client: &str, org: &str, plan: &str, clock: &ManualClock) -> String {
        let now = clock.now() as u64;
        self.key.sign(&json!({
            "iss": self.url, "sub": client, "client_id": client, "aud": [API],
            "scope": API, "iat": now, "exp": now + 86_400, "app_only": true,
            "plan": plan, "org_id": org, "jti": format!("{client}-{now}-{org}"),
        }))
    }

    fn builder(&self, clock: &ManualClock) -> VerifierBuilder {
        Verifier::builder(&self.url, API)
            .plan_limits()
            .clock(clock.clone())
    }
}

/// The API: `GET /news` behind `Scoped<News>`, with the fields added to every answer.
pub(crate) async fn api(verifier: Verifier) -> String {
    let app = Router::new()
        .route(
            "/news",
            get(|token: Scoped<News>| async move { token.client_id.clone() }),
        )
        .layer(axum::middleware::from_fn(
            tessera_verify::limits::rate_limit_headers,
        ))
        .with_state(verifier);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/news", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

pub(crate) async fn call(url: &str, token: &str) -> reqwest::Response {
    reqwest::Client::new()
        .get(url)
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
}

/// A member of an RFC 8941 List field, parsed: its name and integer parameters.
#[derive(Debug, PartialEq)]
pub(crate) struct Member {
    name: String,
    params: Vec<(String, i64)>,
}

/// Parses a `RateLimit` or `RateLimit-Policy` field with an RFC 8941 parser.
pub(crate) fn members(response: &reqwest::Response, field: &str) -> Vec<Member> {
    let value = response
        .headers()
        .get(field)
        .unwrap_or_else(|| panic!("no {field}"))
        .to_str()
        .unwrap();
    let list: sfv::List = sfv::Parser::new(value)
        .parse()
        .unwrap_or_else(|e| panic!("{field}: {value:?} is not an sf-list: {e:?}"));
    list.into_iter()
        .map(|entry| match entry {
            sfv::ListEntry::Item(item) => Member {
                name: item
                    .bare_item
                    .as_string()
                    .expect("a policy name is an sf-string")
                    .as_str()
                    .to_owned(),
                params: item
                    .params
                    .iter()
                    .map(|(k, v)| {
                        let n = v.as_integer().expect("an integer parameter");
                        (k.as_str().to_owned(), i64::from(n))
                    })
                    .collect(),
            },
            sfv::ListEntry::InnerList(_) => panic!("an inner list in {field}"),
        })
        .collect()
}

pub(crate) fn member(name: &str, params: &[(&str, i64)]) -> Member {
    Member {
        name: name.to_owned(),
        params: params.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect(),
    }
}

#[tokio::test]
async fn five_a_minute_then_429_with_retry_after_and_the_fields() {
    let issuer = issuer(document(&five_a_minute())).await;
    // 2026-11-27T12:00:00Z: 12 h left of the day.
    let clock = ManualClock::at(1_795_780_800);
    let url = api(issuer.builder(&clock).build().unwrap()).await;
    let alice = issuer.token("alice", Some("free"), &clock);
    for n in 1..=5i64 {
        let answer = call(&url, &alice).await;
        assert_eq!(answer.status(), 200, "request {n}");
        assert_eq!(
            members(&answer, "ratelimit-policy"),
            [
                member("free-rate", &[("q", 5), ("w", 60)]),
                member("free-quota", &[("q", 1000), ("w", 86_400)]),
            ]
        );
        assert_eq!(
            members(&answer, "ratelimit"),
            [
                member("free-rate", &[("r", 5 - n), ("t", 12 * n)]),
                member("free-quota", &[("r", 1000 - n), ("t", 43_200)]),
            ]
        );
    }
    let refused = call(&url, &alice).await;
    assert_eq!(refused.status(), 429);
    assert_eq!(refused.headers()["retry-after"], "12");
    assert_eq!(
        refused.headers()["content-type"],
        "application/problem+json"
    );
    assert_eq!(refused.headers()["cache-control"], "no-store");
    assert!(
        refused.headers().get("www-authenticate").is_none(),
        "the token is fine"
    );
    assert_eq!(
        members(&refused, "ratelimit"),
        [
            member("free-rate", &[("r", 0), ("t", 12)]),
            member("free-quota", &[("r", 995), ("t", 43_200)]),
        ]
    );
    assert_eq!(members(&refused, "ratelimit-policy").len(), 2);
    let problem: Value = refused.json().await.unwrap();
    assert_eq!(
        problem["type"],
        "https://iana.org/assignments/http-problem-types#quota-exceeded"
    );
    assert_eq!(problem["status"], 429);
    assert_eq!(problem["violated-policies"], json!(["free-rate"]));
    let detail = problem["detail"].as_str().unwrap();
    assert!(
        detail.contains("5 requests per 60 s") && detail.contains("free"),
        "{detail}"
    );

    // Another client on the same plan is unaffected; a plan without limits gets no fields.
    let bob = call(&url, &issuer.token("bob", Some("free"), &clock)).await;
    assert_eq!(bob.status(), 200);
    assert_eq!(
        members(&bob, "ratelimit")[0],
        member("free-rate", &[("r", 4), ("t", 12)])
    );
    let pro = call(&url, &issuer.token("carol", Some("pro"), &clock)).await;
    assert_eq!(pro.status(), 200);
    assert!(pro.headers().get("ratelimit").is_none());

    // Twelve seconds later, one more.
    clock.advance(Duration::from_secs(12));
    assert_eq!(call(&url, &alice).await.status(), 200);
    assert_eq!(call(&url, &alice).await.status(), 429);
}

/// A plan the document marks `per_org` (issue 28 item 3): the kit counts by the token's
/// `org_id`, so two clients of one organization share one allowance, while a client of
/// another organization, and one of none on the same plan, each have their own.
#[tokio::test]
async fn two_clients_of_one_org_share_one_allowance() {
    let mut shared = five_a_minute();
    shared["per_org"] = json!(true);
    let issuer = issuer(json!({"api": API, "plans": {"team": shared}})).await;
    let clock = ManualClock::at(1_795_780_800);
    let url = api(issuer.builder(&clock).build().unwrap()).await;
    let alice = issuer.org_token("alice", "acme", "team", &clock);
    let bob = issuer.org_token("bob", "acme", "team", &clock);
    for n in 1..=3i64 {
        let answer = call(&url, &alice).await;
        assert_eq!(answer.status(), 200, "alice's request {n}");
        assert_eq!(
            members(&answer, "ratelimit")[0],
            member("team-rate", &[("r", 5 - n), ("t", 12 * n)])
        );
    }
    // Bob, of the same organization, finds what Alice left: two.
    for n in 4..=5i64 {
        let answer = call(&url, &bob).await;
        assert_eq!(
            answer.status(),
            200,
            "bob's request, {n} of the organization's"
        );
        assert_eq!(
            members(&answer, "ratelimit")[0],
            member("team-rate", &[("r", 5 - n), ("t", 12 * n)])
        );
    }
    assert_eq!(call(&url, &bob).await.status(), 429);
    assert_eq!(call(&url, &alice).await.status(), 429);
    // Another organization, and a client of none, on the same plan: their own five.
    let carol = issuer.org_token("carol", "beta", "team", &clock);
    let dave = issuer.token("dave", Some("team"), &clock);
    for token in [&carol, &dave] {
        for n in 1..=5 {
            assert_eq!(call(&url, token).await.status(), 200, "request {n}");
        }
        assert_eq!(call(&url, token).await.status(), 429);
    }
    // Twelve seconds later, one more for the organization, whichever client asks.
    clock.advance(Duration::from_secs(12));
    assert_eq!(call(&url, &bob).await.status(), 200);
    assert_eq!(call(&url, &alice).await.status(), 429);
}

#[tokio::test]
async fn refresh_limits_fetches_the_document_now_and_reports_a_failure() {
    let issuer = issuer(document(&five_a_minute())).await;
    let clock = ManualClock::at(1_795_780_800);
    let verifier = issuer.builder(&clock).build().unwrap();
    assert!(verifier.refresh_limits().await.unwrap());
    assert_eq!(issuer.seen.limit_fetches.load(Ordering::SeqCst), 1);
    issuer.seen.down.store(true, Ordering::SeqCst);
    assert!(verifier.refresh_limits().await.is_err());
}

#[tokio::test]
async fn a_plan_change_is_enforced_within_a_refresh() {
    let issuer = issuer(document(&five_a_minute())).await;
    let clock = ManualClock::at(1_795_780_800);
    let verifier = issuer.builder(&clock).build().unwrap();
    let url = api(verifier.clone()).await;
    let token = issuer.token("alice", Some("free"), &clock);
    assert_eq!(call(&url, &token).await.status(), 200);
    assert_eq!(issuer.seen.limit_fetches.load(Ordering::SeqCst), 1);

    // The operator cuts free to 1/min.
    *issuer.seen.document.write().unwrap() =
        document(&json!({"rate": {"limit": 1, "window_seconds": 60}}));
    // Within 30 s the old limits still apply, and nothing is fetched.
    clock.advance(Duration::from_secs(29));
    assert_eq!(call(&url, &token).await.status(), 200);
    assert_eq!(issuer.seen.limit_fetches.load(Ordering::SeqCst), 1);
    // At 30 s a request notices and a refresh runs beside it.
    clock.advance(Duration::from_secs(1));
    call(&url, &token).await;
    tessera_testkit::until("the new limits fetched", || async {
        verifier.limits_health().unwrap().document_fetches == 2
    })
    .await;
    let answer = call(&url, &token).await;
    assert_eq!(
        answer.status(),
        429,
        "the new plan applies with the same token"
    );
    assert_eq!(
        members(&answer, "ratelimit-policy"),
        [member("free-rate", &[("q", 1), ("w", 60)])]
    );
}

#[tokio::test]
async fn a_quota_resets_at_the_start_of_the_period() {
    let issuer = issuer(document(&json!({"quota": {"limit": 2, "period": "day"}}))).await;
    // 2026-11-27T23:59:50Z
    let clock = ManualClock::at(1_795_823_990);
    let url = api(issuer.builder(&clock).build().unwrap()).await;
    let token = issuer.token("alice", Some("free"), &clock);
    assert_eq!(call(&url, &token).await.status(), 200);
    assert_eq!(call(&url, &token).await.status(), 200);
    let refused = call(&url, &token).await;
    assert_eq!(refused.status(), 429);
    assert_eq!(refused.headers()["retry-after"], "10", "until midnight UTC");
    let problem: Value = refused.json().await.unwrap();
    assert_eq!(problem["violated-policies"], json!(["free-quota"]));
    clock.advance(Duration::from_secs(9));
    assert_eq!(call(&url, &token).await.status(), 429);
    clock.advance(Duration::from_secs(1));
    let answer = call(&url, &token).await;
    assert_eq!(answer.status(), 200, "a new day");
    assert_eq!(
        members(&answer, "ratelimit"),
        [member("free-quota", &[("r", 1), ("t", 86_400)])]
    );
}

#[tokio::test]
async fn an_unknown_plan_is_refetched_once_then_held_to_the_tightest_limits() {
    let issuer = issuer(document(&five_a_minute())).await;
    let clock = ManualClock::at(1_795_780_800);
    let verifier = issuer.builder(&clock).build().unwrap();
    let url = api(verifier.clone()).await;
    // Known plans first: one fetch.
    assert_eq!(
        call(&url, &issuer.token("a", Some("pro"), &clock))
            .await
            .status(),
        200
    );
    assert_eq!(issuer.seen.limit_fetches.load(Ordering::SeqCst), 1);

    // A plan created since: the first of its requests fetches again (30 s after the last).
    *issuer.seen.document.write().unwrap() = json!({"api": API, "plans": {
        "free": five_a_minute(), "pro": {}, "trial": {"rate": {"limit": 2, "window_seconds": 60}}
    }});
    clock.advance(Duration::from_secs(30));
    let trial = issuer.token("t", Some("trial"), &clock);
    let answer = call(&url, &trial).await;
    assert_eq!(members(&answer, "ratelimit-policy")[0].name, "trial-rate");
    assert_eq!(issuer.seen.limit_fetches.load(Ordering::SeqCst), 2);

    // A plan the document does not list, and a token without any plan: the tightest rate
    // and quota of any plan (free's), named `unlisted`, never unlimited; no more fetches
    // within 30 s, however many come.
    for token in [
        issuer.token("ghost", Some("gone"), &clock),
        issuer.token("old", None, &clock),
    ] {
        let answer = call(&url, &token).await;
        assert_eq!(answer.status(), 200);
        assert_eq!(
            members(&answer, "ratelimit-policy"),
            [
                member("unlisted-rate", &[("q", 2), ("w", 60)]),
                member("unlisted-quota", &[("q", 1000), ("w", 86_400)]),
            ]
        );
        assert_eq!(call(&url, &token).await.status(), 200);
        assert_eq!(call(&url, &token).await.status(), 429);
    }
    assert_eq!(issuer.seen.limit_fetches.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn the_last_limits_apply_while_the_issuer_is_down_and_none_means_503() {
    let issuer = issuer(document(&five_a_minute())).await;
    let clock = ManualClock::at(1_795_780_800);
    // Never learned: 503 with a problem, and the keys were fine.
    issuer.seen.down.store(true, Ordering::SeqCst);
    let url = api(issuer.builder(&clock).build().unwrap()).await;
    let token = issuer.token("alice", Some("free"), &clock);
    let answer = call(&url, &token).await;
    assert_eq!(answer.status(), 503);
    assert_eq!(answer.headers()["retry-after"], "1");
    let problem: Value = answer.json().await.unwrap();
    assert_eq!(
        problem["type"],
        "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
    );

    // Learned, then the issuer goes away: the limits go on applying.
    issuer.seen.down.store(false, Ordering::SeqCst);
    clock.advance(Duration::from_secs(30));
    for _ in 0..5 {
        assert_eq!(call(&url, &token).await.status(), 200);
    }
    issuer.seen.down.store(true, Ordering::SeqCst);
    clock.advance(Duration::from_secs(600));
    for _ in 0..5 {
        assert_eq!(call(&url, &token).await.status(), 200);
    }
    assert_eq!(call(&url, &token).await.status(), 429);
}

#[tokio::test]
async fn two_instances_on_one_redis_hold_the_sum() {
    let issuer = issuer(document(
        &json!({"rate": {"limit": 10, "window_seconds": 60}, "burst": 10}),
    ))
    .await;
    let clock = ManualClock::at(1_795_780_800);
    let prefix = tessera_testkit::unique_redis_prefix("kit-sum");
    let instance = || {
        issuer
            .builder(&clock)
            .redis_url(tessera_testkit::redis_url())
            .redis_prefix(prefix.clone())
            // A loaded test machine; the bound itself is the fault test's subject.
            .redis_timeout(Duration::from_secs(2))
            .build()
            .unwrap()
    };
    let (one, two) = (instance(), instance());
    assert!(one.refresh_limits().await.unwrap() && two.refresh_limits().await.unwrap());
    let urls = [api(one.clone()).await, api(two.clone()).await];
    let token = issuer.token("alice", Some("free"), &clock);
    let mut passed = 0;
    for i in 0..20 {
        if call(&urls[i % 2], &token).await.status() == 200 {
            passed += 1;
        }
    }
    assert_eq!(passed, 10, "10 in all, not 10 at each");
    assert_eq!(one.limits_health().unwrap().redis_up, Some(true));
    // Another client has its own allowance at both.
    let bob = issuer.token("bob", Some("free"), &clock);
    assert_eq!(call(&urls[1], &bob).await.status(), 200);
}

#[tokio::test]
async fn a_frozen_redis_degrades_to_this_instances_share_and_recovers() {
    capture_log();
    let mut redis = tessera_testkit::ThrowawayRedis::start();
    let issuer = issuer(document(
        &json!({"rate": {"limit": 10, "window_seconds": 60}, "burst": 10}),
    ))
    .await;
    let clock = ManualClock::at(1_795_780_800);
    let verifier = issuer
        .builder(&clock)
        .redis_url(redis.url())
        .expected_instances(2)
        .build()
        .unwrap();
    assert!(verifier.refresh_limits().await.unwrap());
    let url = api(verifier.clone()).await;
    let token = issuer.token("alice", Some("free"), &clock);
    for _ in 0..3 {
        assert_eq!(call(&url, &token).await.status(), 200);
    }
    // Frozen: each request waits the bound at most once, then memory counts at 1/2.
    redis.freeze();
    let mut passed = 0;
    for _ in 0..8 {
        if call(&url, &token).await.status() == 200 {
            passed += 1;
        }
    }
    assert_eq!(passed, 5, "half the burst of 10, never unlimited");
    let health = verifier.limits_health().unwrap();
    assert_eq!(health.redis_up, Some(false));
    assert!(health.redis_timeouts >= 1, "{health:?}");
    assert_eq!(health.fallback_instances, 2);
    assert!(
        logged("Redis failed; plan limits are counted in memory"),
        "a warning"
    );
    // Back: the probe finds it and Redis counts again: 7 were left there of the 10, less
    // this request, less the call that timed out, which a frozen Redis still had in its
    // socket and ran on waking (counted at both: the error errs towards refusing).
    redis.thaw();
    tessera_testkit::until("Redis counts again", || async {
        verifier.limits_health().unwrap().redis_up == Some(true)
    })
    .await;
    let answer = call(&url, &token).await;
    assert_eq!(answer.status(), 200);
    let left = members(&answer, "ratelimit")[0].params[0].1;
    assert!((5..=6).contains(&left), "counted in Redis again: r={left}");
    redis.kill();
}

/// Whether this test process logged `text` (at warn or above) since [`capture_log`].
fn logged(text: &str) -> bool {
    String::from_utf8_lossy(&CAPTURED.lock().unwrap()).contains(text)
}

static CAPTURED: Mutex<Vec<u8>> = Mutex::new(Vec::new());

/// Installs, once per process, a subscriber that keeps warnings in [`CAPTURED`].
fn capture_log() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    struct Writer;
    impl std::io::Write for Writer {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            CAPTURED.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    ONCE.call_once(|| {
        let _ = tracing::subscriber::set_global_default(
            tracing_subscriber::fmt()
                .with_writer(|| Writer)
                .with_max_level(tracing::Level::WARN)
                .finish(),
        );
    });
}

#[tokio::test]
async fn usage_is_reported_and_a_failed_batch_goes_again_with_its_id() {
    let issuer = issuer(document(
        &json!({"rate": {"limit": 2, "window_seconds": 60}}),
    ))
    .await;
    let clock = ManualClock::at(1_795_780_800);
    let reporter = tessera_client::TokenClient::builder()
        .environment(tessera_client::Environment::Production)
        .production_url(issuer.url.parse().unwrap())
        .client_id(tessera_proto::ClientId::parse("tc_usage").unwrap())
        .client_secret(tessera_proto::ClientSecret::new("usage-secret"))
        .scopes(ScopeSet::parse("tessera-usage").unwrap())
        .build()
        .unwrap();
    let verifier = issuer
        .builder(&clock)
        .report_usage(reporter)
        // Only the test flushes.
        .usage_interval(Duration::from_secs(3600))
        .build()
        .unwrap();
    let url = api(verifier.clone()).await;
    let alice = issuer.token("alice", Some("free"), &clock);
    for _ in 0..3 {
        call(&url, &alice).await;
    }
    call(&url, &issuer.token("bob", Some("pro"), &clock)).await;

    // Tessera refuses the first report: the counts are kept, with their batch id.
    issuer.seen.fail_reports.store(1, Ordering::SeqCst);
    assert!(verifier.flush_usage().await.is_err());
    assert_eq!(verifier.limits_health().unwrap().usage_pending, 2);
    // A request meanwhile goes into the next batch, not into the one in flight.
    call(&url, &alice).await;
    verifier.flush_usage().await.unwrap();
    let reports = issuer.seen.reports.lock().unwrap().clone();
    assert_eq!(reports.len(), 3, "{reports:?}");
    let (first, again, next) = (&reports[0].1, &reports[1].1, &reports[2].1);
    assert_eq!(reports[0].0, 503);
    assert_eq!(first, again, "the same batch, id and counts");
    assert_ne!(first["batch"], next["batch"]);
    assert_eq!(first["api"], API);
    let mut rows: Vec<Value> = first["counts"].as_array().unwrap().clone();
    rows.sort_by_key(|r| r["client_id"].as_str().unwrap().to_owned());
    assert_eq!(
        rows,
        [
            json!({"day": "2026-11-27", "client_id": "alice", "requests": 2, "refused": 1}),
            json!({"day": "2026-11-27", "client_id": "bob", "requests": 1, "refused": 0}),
        ]
    );
    assert_eq!(
        next["counts"],
        json!([{"day": "2026-11-27", "client_id": "alice", "requests": 0, "refused": 1}])
    );
    let health = verifier.limits_health().unwrap();
    assert_eq!(
        (
            health.usage_batches_sent,
            health.usage_failures,
            health.usage_pending
        ),
        (2, 1, 0)
    );
}
