//! The client kit against the real server: every test starts its own Tessera on port 0 with a
//! fresh database, behind a middleware that counts token requests and can answer some of
//! them itself (a 429 or a 503) before the real endpoint sees them.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use tessera_client::{
    ClientId, ClientSecret, Environment, Error, ErrorCode, RetryPolicy, ScopeSet, TokenCache,
    TokenClient, TokenClientBuilder, Url,
};
use tessera_testkit::TestApp;
use tokio::net::TcpListener;

/// A canned answer the middleware gives instead of the token endpoint.
type Canned = (StatusCode, Vec<(header::HeaderName, &'static str)>);

/// A running server and what the tests look at.
struct TestServer {
    app: TestApp,
    url: Url,
    /// Token requests that reached the middleware, canned answers included.
    token_requests: Arc<AtomicUsize>,
    /// Answers given before the real endpoint is asked, first come first served.
    canned: Arc<Mutex<VecDeque<Canned>>>,
}

impl TestServer {
    /// A server with plan `pro` (market-data-api, news-api; tokens live `ttl` seconds).
    async fn spawn(ttl: u32) -> TestServer {
        let token_requests = Arc::new(AtomicUsize::new(0));
        let canned = Arc::new(Mutex::new(VecDeque::<Canned>::new()));
        let (count, answers) = (token_requests.clone(), canned.clone());
        let app = tessera_testkit::spawn_with(|s| {
            s.pro_ttl = Some(ttl);
            // The server's clock stands still, except that a 429 of its own moves it by
            // the Retry-After it sent: the time the client waits out passes for the server
            // exactly then, however slow this machine is.
            let clock = s.clock.clone();
            let middleware = middleware::from_fn(move |request: Request, next: Next| {
                let (count, answers, clock) = (count.clone(), answers.clone(), clock.clone());
                async move {
                    if request.uri().path() != "/connect/token" {
                        return next.run(request).await;
                    }
                    count.fetch_add(1, Ordering::SeqCst);
                    let answer = answers.lock().unwrap().pop_front();
                    let Some((status, headers)) = answer else {
                        let response = next.run(request).await;
                        if response.status() == StatusCode::TOO_MANY_REQUESTS {
                            let retry: u64 = response.headers()[header::RETRY_AFTER]
                                .to_str()
                                .unwrap()
                                .parse()
                                .unwrap();
                            clock.advance(Duration::from_secs(retry));
                        }
                        return response;
                    };
                    let mut response =
                        Response::new(Body::from(r#"{"error":"temporarily_unavailable"}"#));
                    *response.status_mut() = status;
                    for (name, value) in headers {
                        response.headers_mut().insert(name, value.parse().unwrap());
                    }
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
        }
    }

    /// Registers a client of plan `pro` and makes the running registry see it.
    async fn client(&self) -> (ClientId, ClientSecret) {
        self.app.client().await
    }

    fn requests(&self) -> usize {
        self.token_requests.load(Ordering::SeqCst)
    }

    fn answer_first_with(&self, answers: impl IntoIterator<Item = Canned>) {
        self.canned.lock().unwrap().extend(answers);
    }

    /// A builder for this server's base URL, with quick retries.
    fn builder(&self, id: &ClientId, secret: &ClientSecret, scopes: &str) -> TokenClientBuilder {
        TokenClient::builder()
            .environment(Environment::Custom(self.url.clone()))
            .client_id(id.clone())
            .client_secret(secret.clone())
            .scopes(ScopeSet::parse(scopes).unwrap())
            .retry(RetryPolicy {
                base_delay: Duration::from_millis(50),
                ..RetryPolicy::default()
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
    let started = Instant::now();
    let first = client.token().await.unwrap();
    assert_eq!(client.token().await.unwrap(), first);
    assert_eq!(server.requests(), 1, "a request before expiry");
    // Wait for the renewal itself (a generous bound); it can never come early.
    let second = loop {
        let token = client.token().await.unwrap();
        if token != first {
            break token;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "never renewed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        started.elapsed() >= Duration::from_millis(1800),
        "renewed {:?} after the first request, before its refresh point",
        started.elapsed()
    );
    assert_eq!(server.requests(), 2);
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
    let started = Instant::now();
    client.token().await.unwrap();
    let waited = started.elapsed();
    assert!(waited >= Duration::from_secs(1), "{waited:?}");
    assert!(waited < Duration::from_secs(3), "{waited:?}");
    assert_eq!(server.requests(), 2);
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
    let started = Instant::now();
    client.token().await.unwrap();
    // Backoff of 25-50 ms, then 50-100 ms.
    assert!(started.elapsed() >= Duration::from_millis(75));
    assert_eq!(server.requests(), 3);
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
        .admin()
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
    let settings = tessera_server::admin::PlanSettings {
        token_rate: tessera_server::admin::Change::Set(tessera_store::RateLimit {
            count: 1,
            period_secs: 1,
            burst: 1,
        }),
        ..Default::default()
    };
    server
        .app
        .admin()
        .set_plan_with("pro", "news-api", &settings)
        .await
        .unwrap();
    let client = server.token_client("news-api").await;
    let first = client.token().await.unwrap();
    client.invalidate(&first);
    let started = Instant::now();
    let second = client.token().await.unwrap();
    assert_ne!(second, first);
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "waited for Retry-After"
    );
    assert_eq!(
        server.requests(),
        3,
        "one refused with 429, then one granted"
    );
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
    let started = Instant::now();
    client.token().await.unwrap();
    // Two dropped connections, then the one that reached the server; between them the
    // backoff of 25-50 ms, then 50-100 ms.
    assert_eq!(accepted.load(Ordering::SeqCst), 3);
    assert_eq!(server.requests(), 1);
    assert!(started.elapsed() >= Duration::from_millis(75));
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

    // Nothing listening at all: connections refused, as many attempts.
    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let nobody = Url::parse(&format!("http://{}", closed.local_addr().unwrap())).unwrap();
    drop(closed);
    let started = Instant::now();
    let err = for_url(nobody).token().await.unwrap_err();
    assert!(
        matches!(err, Error::Transport { attempts: 3, .. }),
        "{err:?}"
    );
    // Backoff of 5-10 ms, then 10-20 ms.
    assert!(started.elapsed() >= Duration::from_millis(15));
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
