//! The client kit against the real server: every test starts its own Tessera on port 0 with a
//! fresh database, behind a middleware that notes when token requests come, what they carry
//! and how they were answered, and can answer some of them itself (a 429 or a 503) before the
//! real endpoint sees them. DPoP (RFC 9449) has its own module, `dpop.rs`, and so have
//! `private_key_jwt` and assertion files (RFC 7523), `private_key.rs`.
//!
//! Server and clients read one manual clock, which nothing moves but the test and the
//! clients' waits: a client's `Retry-After` or backoff moves it by the wait and takes no real
//! time, so a test sees when a retry came without sleeping for it.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use tessera_client::{
    ClientId, ClientSecret, Clock, Environment, Error, ErrorCode, ManualClock, RetryPolicy,
    ScopeSet, TokenCache, TokenClient, TokenClientBuilder, Url,
};
use tessera_testkit::{Setup, TestApp};
use tokio::net::TcpListener;

mod dpop;
mod private_key;

/// A canned answer the middleware gives instead of the token endpoint.
type Canned = (StatusCode, Vec<(header::HeaderName, &'static str)>);

/// A token request as the middleware saw it.
#[derive(Debug, Clone)]
struct Seen {
    /// When it came, by the clock.
    at: Duration,
    /// Its `DPoP` header.
    proof: Option<String>,
    /// Its `client_assertion`.
    assertion: Option<String>,
    /// The status it was answered with.
    status: StatusCode,
}

/// A running server and what the tests look at.
struct TestServer {
    app: TestApp,
    url: Url,
    /// The token requests that reached the middleware, canned answers included.
    token_requests: Arc<Mutex<Vec<Seen>>>,
    /// Answers given before the real endpoint is asked, first come first served, with the
    /// body of each.
    canned: Arc<Mutex<VecDeque<(Canned, &'static str)>>>,
    /// The waits of this server's clients before their retries, in order.
    waits: Arc<Mutex<Vec<Duration>>>,
}

impl TestServer {
    /// A server with plan `pro` (market-data-api, news-api; tokens live `ttl` seconds).
    async fn spawn(ttl: u32) -> TestServer {
        Self::spawn_with(ttl, |_| {}).await
    }

    /// A server as [`TestServer::spawn`] makes, after `configure` has changed its setup.
    async fn spawn_with(ttl: u32, configure: impl FnOnce(&mut Setup)) -> TestServer {
        let token_requests = Arc::new(Mutex::new(Vec::new()));
        let canned = Arc::new(Mutex::new(VecDeque::new()));
        let (seen, answers) = (token_requests.clone(), canned.clone());
        let app = tessera_testkit::spawn_with(|s| {
            configure(s);
            s.pro_ttl = Some(ttl);
            let clock = Clock::from(s.clock.clone());
            let middleware = middleware::from_fn(move |request: Request, next: Next| {
                let (seen, answers, clock) = (seen.clone(), answers.clone(), clock.clone());
                async move {
                    if request.uri().path() != "/connect/token" {
                        return next.run(request).await;
                    }
                    let at = clock.elapsed();
                    let proof = request
                        .headers()
                        .get("dpop")
                        .map(|v| v.to_str().unwrap().to_owned());
                    let (parts, body) = request.into_parts();
                    let body = axum::body::to_bytes(body, 64 * 1024).await.unwrap();
                    let assertion =
                        Url::parse(&format!("http://form/?{}", String::from_utf8_lossy(&body)))
                            .unwrap()
                            .query_pairs()
                            .find(|(name, _)| name == "client_assertion")
                            .map(|(_, value)| value.into_owned());
                    let request = Request::from_parts(parts, Body::from(body));
                    let answer: Option<(Canned, &str)> = answers.lock().unwrap().pop_front();
                    let response = match answer {
                        None => next.run(request).await,
                        Some(((status, headers), body)) => {
                            let mut response = Response::new(Body::from(body));
                            *response.status_mut() = status;
                            for (name, value) in headers {
                                response.headers_mut().insert(name, value.parse().unwrap());
                            }
                            response
                        }
                    };
                    let status = response.status();
                    seen.lock().unwrap().push(Seen {
                        at,
                        proof,
                        assertion,
                        status,
                    });
                    response
                }
            });
            s.wrap = Some(Box::new(move |router| router.layer(middleware)));
        })
        .await;
        TestServer {
            url: Url::parse(&app.base).unwrap(),
            app,
            token_requests,
            canned,
            waits: Arc::default(),
        }
    }

    /// The clock the server and its clients read.
    fn clock(&self) -> &ManualClock {
        &self.app.clock
    }

    /// Registers a client of plan `pro` and makes the running registry see it.
    async fn client(&self) -> (ClientId, ClientSecret) {
        self.app.client().await
    }

    fn requests(&self) -> usize {
        self.token_requests.lock().unwrap().len()
    }

    /// The time between each token request and the one before it, by the clock.
    fn gaps(&self) -> Vec<Duration> {
        let seen = self.token_requests.lock().unwrap();
        seen.windows(2).map(|w| w[1].at - w[0].at).collect()
    }

    /// The token requests so far.
    fn seen(&self) -> Vec<Seen> {
        self.token_requests.lock().unwrap().clone()
    }

    /// The statuses token requests were answered with so far.
    fn statuses(&self) -> Vec<u16> {
        self.seen().iter().map(|s| s.status.as_u16()).collect()
    }

    /// The waits before retries so far, and forgets them.
    fn take_waits(&self) -> Vec<Duration> {
        std::mem::take(&mut self.waits.lock().unwrap())
    }

    fn answer_first_with(&self, answers: impl IntoIterator<Item = Canned>) {
        let body = r#"{"error":"temporarily_unavailable"}"#;
        let answers = answers.into_iter().map(|answer| (answer, body));
        self.canned.lock().unwrap().extend(answers);
    }

    /// Has the next token request answered with `answer` and the JSON `body`.
    fn answer_first_with_body(&self, answer: Canned, body: &'static str) {
        self.canned.lock().unwrap().push_back((answer, body));
    }

    /// A builder for this server's base URL, with quick retries, on the server's clock: a
    /// wait moves the clock, is noted, and takes no real time.
    fn builder(&self, id: &ClientId, secret: &ClientSecret, scopes: &str) -> TokenClientBuilder {
        self.builder_without_auth(id, scopes)
            .client_secret(secret.clone())
    }

    /// [`TestServer::builder`] without the client's credentials.
    fn builder_without_auth(&self, id: &ClientId, scopes: &str) -> TokenClientBuilder {
        let (clock, waits) = (self.clock().clone(), self.waits.clone());
        TokenClient::builder()
            .environment(Environment::Custom(self.url.clone()))
            .client_id(id.clone())
            .scopes(ScopeSet::parse(scopes).unwrap())
            .retry(RetryPolicy {
                base_delay: Duration::from_millis(50),
                ..RetryPolicy::default()
            })
            .clock(self.clock().clone())
            .sleeper(move |wait| {
                waits.lock().unwrap().push(wait);
                clock.advance(wait);
                std::future::ready(())
            })
    }

    async fn token_client(&self, scopes: &str) -> TokenClient {
        let (id, secret) = self.client().await;
        self.builder(&id, &secret, scopes).build().unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_thousand_concurrent_callers_make_one_token_request() {
    let server = TestServer::spawn(3600).await;
    let client = Arc::new(server.token_client("market-data-api news-api").await);
    let callers: Vec<_> = (0..1000)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move { client.token().await })
        })
        .collect();
    let mut tokens = Vec::new();
    for caller in callers {
        tokens.push(caller.await.unwrap().unwrap());
    }
    assert!(tokens.windows(2).all(|w| w[0] == w[1]));
    assert_eq!(server.requests(), 1);
}

#[tokio::test]
async fn no_request_before_expiry_and_one_after() {
    // Two seconds of lifetime: the skew is 10% (0.2 s), so the token is served for 1.8 s.
    let server = TestServer::spawn(2).await;
    let client = server.token_client("news-api").await;
    let first = client.token().await.unwrap();
    assert_eq!(client.token().await.unwrap(), first);
    server.clock().advance(Duration::from_millis(1_799));
    assert_eq!(client.token().await.unwrap(), first, "renewed before 1.8 s");
    assert_eq!(server.requests(), 1, "a request before the refresh point");
    server.clock().advance(Duration::from_millis(1));
    let second = client.token().await.unwrap();
    assert_ne!(second, first, "not renewed at 1.8 s");
    assert_eq!(server.requests(), 2, "one request at the refresh point");
    assert_eq!(client.token().await.unwrap(), second);
    assert_eq!(server.requests(), 2);
}

#[tokio::test]
async fn a_429_is_retried_after_its_retry_after() {
    let server = TestServer::spawn(3600).await;
    let client = server.token_client("news-api").await;
    server.answer_first_with([(
        StatusCode::TOO_MANY_REQUESTS,
        vec![(header::RETRY_AFTER, "1")],
    )]);
    client.token().await.unwrap();
    assert_eq!(server.requests(), 2);
    // The retry came when Retry-After said, not before and not later.
    assert_eq!(server.gaps(), [Duration::from_secs(1)]);
    assert_eq!(server.take_waits(), [Duration::from_secs(1)]);
}

#[tokio::test]
async fn a_429_asking_too_long_a_wait_fails_at_once() {
    let server = TestServer::spawn(3600).await;
    let (id, secret) = server.client().await;
    let client = server
        .builder(&id, &secret, "news-api")
        .retry(RetryPolicy {
            max_retry_after: Duration::from_secs(5),
            ..RetryPolicy::default()
        })
        .build()
        .unwrap();
    server.answer_first_with([(
        StatusCode::TOO_MANY_REQUESTS,
        vec![(header::RETRY_AFTER, "120")],
    )]);
    let err = client.token().await.unwrap_err();
    assert!(
        matches!(err, Error::RateLimited { retry_after: Some(d), attempts: 1 } if d.as_secs() == 120),
        "{err:?}"
    );
    assert_eq!(server.requests(), 1);
}

#[tokio::test]
async fn a_503_is_retried_with_backoff() {
    let server = TestServer::spawn(3600).await;
    let client = server.token_client("news-api").await;
    let unavailable = (StatusCode::SERVICE_UNAVAILABLE, vec![]);
    server.answer_first_with([unavailable.clone(), unavailable]);
    client.token().await.unwrap();
    assert_eq!(server.requests(), 3);
    // Backoff of 25-50 ms, then 50-100 ms, each before the next request.
    let waits = server.take_waits();
    assert_backoff(&waits, &[25..=50, 50..=100]);
    assert_eq!(server.gaps(), waits);
}

/// Asserts that `waits` were backoffs within `bounds`, in milliseconds.
fn assert_backoff(waits: &[Duration], bounds: &[std::ops::RangeInclusive<u128>]) {
    assert_eq!(waits.len(), bounds.len(), "{waits:?}");
    for (wait, bound) in waits.iter().zip(bounds) {
        assert!(
            bound.contains(&wait.as_millis()),
            "{wait:?} not in {bound:?} ms"
        );
    }
}

#[tokio::test]
async fn server_errors_give_up_after_the_last_attempt() {
    let server = TestServer::spawn(3600).await;
    let (id, secret) = server.client().await;
    let client = server
        .builder(&id, &secret, "news-api")
        .retry(RetryPolicy {
            max_attempts: 3,
            base_delay: Duration::from_millis(10),
            ..RetryPolicy::default()
        })
        .build()
        .unwrap();
    server.answer_first_with(vec![(StatusCode::SERVICE_UNAVAILABLE, vec![]); 5]);
    let err = client.token().await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Server {
                status: StatusCode::SERVICE_UNAVAILABLE,
                code: Some(ErrorCode::TemporarilyUnavailable),
                attempts: 3
            }
        ),
        "{err:?}"
    );
    assert_eq!(server.requests(), 3);
}

#[tokio::test]
async fn invalid_scope_fails_at_once_naming_the_refused_scopes() {
    let server = TestServer::spawn(3600).await;
    // oms-api is offered by another plan, so the server names it when it refuses it.
    server
        .app
        .registrar()
        .set_plan("orders", "oms-api", None)
        .await
        .unwrap();
    let client = server.token_client("news-api oms-api").await;
    let err = client.token().await.unwrap_err();
    let Error::OAuth(oauth) = &err else {
        panic!("{err:?}");
    };
    assert_eq!(oauth.code, ErrorCode::InvalidScope);
    assert_eq!(oauth.status, StatusCode::BAD_REQUEST);
    let refused: Vec<_> = oauth.refused_scopes.iter().map(|s| s.as_str()).collect();
    assert_eq!(refused, ["oms-api"]);
    assert_eq!(server.requests(), 1);
}

#[tokio::test]
async fn invalid_client_fails_at_once() {
    let server = TestServer::spawn(3600).await;
    let (id, _) = server.client().await;
    let wrong = ClientSecret::new("not-the-secret");
    let client = server.builder(&id, &wrong, "news-api").build().unwrap();
    let err = client.token().await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::InvalidClient));
    assert!(
        matches!(&err, Error::OAuth(e) if e.status == StatusCode::UNAUTHORIZED),
        "{err:?}"
    );
    assert_eq!(server.requests(), 1);
    // The failure is not cached as a token: the next call asks again.
    assert!(client.token().await.is_err());
    assert_eq!(server.requests(), 2);
}

#[tokio::test]
async fn production_and_staging_are_kept_apart() {
    let production = TestServer::spawn(3600).await;
    let staging = TestServer::spawn(3600).await;
    let (id, secret) = staging.client().await;
    let for_env = |environment: Environment| {
        TokenClient::builder()
            .environment(environment)
            .production_url(production.url.clone())
            .staging_url(staging.url.clone())
            .client_id(id.clone())
            .client_secret(secret.clone())
            .scopes(ScopeSet::parse("news-api").unwrap())
            .build()
            .unwrap()
    };
    let on_staging = for_env(Environment::Staging);
    assert!(on_staging.token().await.is_ok());
    assert_eq!((staging.requests(), production.requests()), (1, 0));

    let on_production = for_env(Environment::Production);
    let err = on_production.token().await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::InvalidClient));
    assert_eq!((staging.requests(), production.requests()), (1, 1));

    // A cache shared by both would keep them apart too: the key holds the environment.
    assert_ne!(on_staging.key(), on_production.key());
}

#[tokio::test]
async fn clients_sharing_a_cache_share_a_token_per_key() {
    let server = TestServer::spawn(3600).await;
    let (id, secret) = server.client().await;
    let cache = TokenCache::new();
    let a = server
        .builder(&id, &secret, "news-api")
        .cache(&cache)
        .build()
        .unwrap();
    let b = server
        .builder(&id, &secret, "news-api")
        .cache(&cache)
        .build()
        .unwrap();
    let other = server
        .builder(&id, &secret, "news-api market-data-api")
        .cache(&cache)
        .build()
        .unwrap();
    assert_eq!(a.token().await.unwrap(), b.token().await.unwrap());
    assert_eq!(server.requests(), 1);
    assert_ne!(other.token().await.unwrap(), a.token().await.unwrap());
    assert_eq!(server.requests(), 2);
    assert_eq!(cache.len(), 2);
}

/// An API that refuses the first bearer token it sees with `invalid_token` and accepts the
/// others; it answers with the token it accepted.
async fn spawn_api() -> (Url, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let refused = Arc::new(Mutex::new(None::<String>));
    let counter = calls.clone();
    let api = Router::new().route(
        "/quotes",
        get(move |headers: HeaderMap| {
            let (counter, refused) = (counter.clone(), refused.clone());
            async move {
                counter.fetch_add(1, Ordering::SeqCst);
                let bearer = headers
                    .get(header::AUTHORIZATION)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.strip_prefix("Bearer "))
                    .unwrap_or_default()
                    .to_owned();
                let mut refused = refused.lock().unwrap();
                if refused.get_or_insert_with(|| bearer.clone()) == &bearer {
                    let challenge =
                        r#"Bearer realm="api", error="invalid_token", error_description="revoked""#;
                    return (
                        StatusCode::UNAUTHORIZED,
                        [(header::WWW_AUTHENTICATE, challenge)],
                    )
                        .into_response();
                }
                bearer.into_response()
            }
        }),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, api).await });
    (Url::parse(&format!("http://{addr}/quotes")).unwrap(), calls)
}

#[tokio::test]
async fn the_bearer_helper_refreshes_once_on_invalid_token() {
    let server = TestServer::spawn(3600).await;
    let client = server.token_client("market-data-api").await;
    let (api_url, api_calls) = spawn_api().await;
    let http = reqwest::Client::new();

    let refused = client.token().await.unwrap();
    let response = client
        .send_authorized(http.get(api_url.clone()))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let accepted = response.text().await.unwrap();
    assert_ne!(accepted, refused.expose());
    assert_eq!(accepted, client.token().await.unwrap().expose());
    assert_eq!(api_calls.load(Ordering::SeqCst), 2);
    assert_eq!(server.requests(), 2);

    // The new token is kept: no further token request.
    let response = client.send_authorized(http.get(api_url)).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(api_calls.load(Ordering::SeqCst), 3);
    assert_eq!(server.requests(), 2);
}

#[tokio::test]
async fn the_bearer_helper_retries_only_once() {
    let server = TestServer::spawn(3600).await;
    let client = server.token_client("market-data-api").await;
    let api = Router::new().route(
        "/quotes",
        get(|| async {
            (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, r#"Bearer error="invalid_token""#)],
            )
        }),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, api).await });

    let http = reqwest::Client::new();
    let response = client
        .send_authorized(http.get(format!("http://{addr}/quotes")))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(server.requests(), 2);
}

#[tokio::test]
async fn the_servers_own_rate_limit_is_waited_out() {
    let server = TestServer::spawn(3600).await;
    // A real per-plan limit: one token request a second.
    let settings = tessera_server::registrar::PlanSettings {
        token_rate: tessera_server::registrar::Change::Set(tessera_store::RateLimit {
            count: 1,
            period_secs: 1,
            burst: 1,
        }),
        ..Default::default()
    };
    server
        .app
        .registrar()
        .set_plan_with("pro", "news-api", &settings)
        .await
        .unwrap();
    let client = server.token_client("news-api").await;
    let first = client.token().await.unwrap();
    client.invalidate(&first);
    let second = client.token().await.unwrap();
    assert_ne!(second, first);
    assert_eq!(
        server.requests(),
        3,
        "one refused with 429, then one granted"
    );
    // The server said Retry-After: 1, and the client waited that long by the server's clock.
    assert_eq!(server.take_waits(), [Duration::from_secs(1)]);
    assert_eq!(server.gaps()[1], Duration::from_secs(1));
}

/// A front for the server at `target`: it accepts and at once drops the first `dropped`
/// connections (the client sees the connection closed without an answer) and forwards
/// the others. Returns its URL and the number of connections it accepted.
async fn flaky_front(target: std::net::SocketAddr, dropped: usize) -> (Url, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = Url::parse(&format!("http://{}", listener.local_addr().unwrap())).unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        loop {
            let (mut inbound, _) = listener.accept().await.unwrap();
            if count.fetch_add(1, Ordering::SeqCst) < dropped {
                drop(inbound);
                continue;
            }
            tokio::spawn(async move {
                let mut outbound = tokio::net::TcpStream::connect(target).await.unwrap();
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            });
        }
    });
    (url, accepted)
}

#[tokio::test]
async fn network_errors_are_retried_with_backoff() {
    let server = TestServer::spawn(3600).await;
    let (id, secret) = server.client().await;
    let (front, accepted) = flaky_front(server.app.addr, 2).await;
    let client = server
        .builder(&id, &secret, "news-api")
        .environment(Environment::Custom(front))
        .build()
        .unwrap();
    client.token().await.unwrap();
    // Two dropped connections, then the one that reached the server; between them the
    // backoff of 25-50 ms, then 50-100 ms.
    assert_eq!(accepted.load(Ordering::SeqCst), 3);
    assert_eq!(server.requests(), 1);
    assert_backoff(&server.take_waits(), &[25..=50, 50..=100]);
}

#[tokio::test]
async fn network_errors_give_up_after_the_last_attempt() {
    let server = TestServer::spawn(3600).await;
    let (id, secret) = server.client().await;
    let (front, accepted) = flaky_front(server.app.addr, usize::MAX).await;
    let for_url = |url: Url| {
        server
            .builder(&id, &secret, "news-api")
            .environment(Environment::Custom(url))
            .retry(RetryPolicy {
                max_attempts: 3,
                base_delay: Duration::from_millis(10),
                ..RetryPolicy::default()
            })
            .build()
            .unwrap()
    };

    // Connections accepted and dropped: one per attempt, then the error.
    let err = for_url(front).token().await.unwrap_err();
    assert!(
        matches!(err, Error::Transport { attempts: 3, .. }),
        "{err:?}"
    );
    assert_eq!(accepted.load(Ordering::SeqCst), 3);
    assert_eq!(server.requests(), 0);
    assert_backoff(&server.take_waits(), &[5..=10, 10..=20]);

    // Nothing listening at all: connections refused, as many attempts.
    // A port held and never listened on: a dropped listener's port could be taken by a
    // server of another test meanwhile.
    let refused = tessera_testkit::RefusedPort::bind();
    let nobody = Url::parse(&format!("http://127.0.0.1:{}", refused.port)).unwrap();
    let err = for_url(nobody).token().await.unwrap_err();
    assert!(
        matches!(err, Error::Transport { attempts: 3, .. }),
        "{err:?}"
    );
    // Backoff of 5-10 ms, then 10-20 ms.
    assert_backoff(&server.take_waits(), &[5..=10, 10..=20]);
}

#[tokio::test]
async fn redirects_are_not_followed() {
    let server = TestServer::spawn(3600).await;
    let client = server.token_client("news-api").await;
    // Every redirect status, each to the real token endpoint, which would issue a token.
    for status in [301, 302, 303, 307, 308] {
        let status = StatusCode::from_u16(status).unwrap();
        server.answer_first_with([(status, vec![(header::LOCATION, "/connect/token")])]);
        let before = server.requests();
        let err = client.token().await.unwrap_err();
        assert!(
            matches!(err, Error::UnexpectedResponse { status: s, .. } if s == status),
            "{status}: {err:?}"
        );
        assert_eq!(server.requests(), before + 1, "{status} was followed");
    }
    // The endpoint itself works: only the redirects were refused.
    client.token().await.unwrap();
}

#[tokio::test]
async fn a_token_that_cannot_go_in_a_header_is_not_taken() {
    let server = TestServer::spawn(3600).await;
    let client = server.token_client("news-api").await;
    let body =
        r#"{"access_token":"a b\n","token_type":"Bearer","expires_in":60,"scope":"news-api"}"#;
    server.answer_first_with_body((StatusCode::OK, vec![]), body);
    let err = client.token().await.unwrap_err();
    assert!(
        matches!(&err, Error::UnexpectedResponse { detail, .. } if detail.contains("ASCII")),
        "{err:?}"
    );
}
