//! The operator console over plain HTTP, without a browser: its security headers and
//! cookies, CSRF refusals, what a read-only admin sees and may do, sign-in throttling.
//! `tests/browser` drives it in Chromium.

use reqwest::header::{CONTENT_SECURITY_POLICY, COOKIE, LOCATION, SET_COOKIE};
use reqwest::{redirect, Response, StatusCode};
use tessera_proto::{ClientId, ClientSecret};
use tessera_store::{AuthMethod, RateLimit};
use tessera_testkit::{spawn_app, spawn_with, TestApp};

/// A browser without a browser: cookies kept by hand, redirects not followed.
struct Visitor {
    http: reqwest::Client,
    base: String,
    cookies: Vec<(String, String)>,
}

impl Visitor {
    fn new(app: &TestApp) -> Self {
        Self {
            http: reqwest::Client::builder()
                .redirect(redirect::Policy::none())
                .build()
                .unwrap(),
            base: app.base.clone(),
            cookies: Vec::new(),
        }
    }

    fn keep(&mut self, response: &Response) {
        for value in response.headers().get_all(SET_COOKIE) {
            let pair = value.to_str().unwrap().split(';').next().unwrap();
            let (name, value) = pair.split_once('=').unwrap();
            self.cookies.retain(|(n, _)| n != name);
            if !value.is_empty() {
                self.cookies.push((name.to_owned(), value.to_owned()));
            }
        }
    }

    fn cookie_header(&self) -> String {
        self.cookies
            .iter()
            .map(|(n, v)| format!("{n}={v}"))
            .collect::<Vec<_>>()
            .join("; ")
    }

    async fn get(&mut self, path: &str) -> Response {
        let response = self
            .http
            .get(format!("{}{path}", self.base))
            .header(COOKIE, self.cookie_header())
            .send()
            .await
            .unwrap();
        self.keep(&response);
        response
    }

    async fn post(&mut self, path: &str, form: &[(&str, &str)]) -> Response {
        let body = form
            .iter()
            .map(|(n, v)| format!("{n}={}", tessera_proto::form::encode_component(v)))
            .collect::<Vec<_>>()
            .join("&");
        let response = self
            .http
            .post(format!("{}{path}", self.base))
            .header(COOKIE, self.cookie_header())
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
            .await
            .unwrap();
        self.keep(&response);
        response
    }

    async fn sign_in(&mut self, id: &str, secret: &str) -> Response {
        let form = self.get("/console/sign-in").await.text().await.unwrap();
        let csrf = hidden(&form, "csrf");
        self.post(
            "/console/sign-in",
            &[
                ("csrf", &csrf),
                ("client_id", id),
                ("client_secret", secret),
            ],
        )
        .await
    }

    /// The CSRF token of this session's pages.
    async fn csrf(&mut self) -> String {
        let page = self.get("/console/plans").await.text().await.unwrap();
        hidden(&page, "csrf")
    }
}

/// The value of the hidden field `name` in `html`.
fn hidden(html: &str, name: &str) -> String {
    let marker = format!("name=\"{name}\" value=\"");
    let start = html
        .find(&marker)
        .unwrap_or_else(|| panic!("no {name} in {html}"))
        + marker.len();
    html[start..].split('"').next().unwrap().to_owned()
}

/// An admin client on a plan with `scopes`.
async fn admin(app: &TestApp, plan: &str, scopes: &str) -> (ClientId, ClientSecret) {
    app.registrar().set_plan(plan, scopes, None).await.unwrap();
    app.client_on(plan, AuthMethod::ClientSecretBasic).await
}

fn location(response: &Response) -> &str {
    response.headers()[LOCATION].to_str().unwrap()
}

fn set_cookie(response: &Response, name: &str) -> String {
    response
        .headers()
        .get_all(SET_COOKIE)
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .find(|v| v.starts_with(&format!("{name}=")))
        .unwrap_or_else(|| panic!("no cookie {name}"))
}

#[tokio::test]
async fn every_answer_carries_a_policy_without_inline_code_and_pages_are_not_stored() {
    let app = spawn_app().await;
    let mut visitor = Visitor::new(&app);
    for path in [
        "/console/sign-in",
        "/console/assets/console.css",
        "/console/assets/console.js",
        "/console/",
    ] {
        let response = visitor.get(path).await;
        let csp = response.headers()[CONTENT_SECURITY_POLICY]
            .to_str()
            .unwrap();
        assert!(!csp.contains("unsafe-inline"), "{path}: {csp}");
        assert!(!csp.contains("unsafe-eval"), "{path}: {csp}");
        assert!(csp.contains("script-src 'self'"), "{path}: {csp}");
        assert!(csp.contains("frame-ancestors 'none'"), "{path}: {csp}");
        assert_eq!(response.headers()["x-content-type-options"], "nosniff");
    }
    let page = visitor.get("/console/sign-in").await;
    assert_eq!(page.headers()["cache-control"], "no-store");
    let html = page.text().await.unwrap();
    assert!(
        !html.contains("<script>") && !html.contains("style="),
        "{html}"
    );
    let unsigned = visitor.get("/console/clients").await;
    assert_eq!(unsigned.status(), StatusCode::SEE_OTHER);
    assert_eq!(location(&unsigned), "/console/sign-in");
}

#[tokio::test]
async fn session_cookies_are_http_only_strict_bounded_and_secure_under_https() {
    let app = spawn_app().await;
    let (id, secret) = admin(&app, "admin", "tessera-admin").await;
    let mut visitor = Visitor::new(&app);
    let signed_in = visitor.sign_in(id.as_str(), secret.expose()).await;
    assert_eq!(signed_in.status(), StatusCode::SEE_OTHER);
    assert_eq!(location(&signed_in), "/console/");
    let cookie = set_cookie(&signed_in, "tessera_console");
    for attribute in [
        "HttpOnly",
        "SameSite=Strict",
        "Path=/console/",
        "Max-Age=3600",
    ] {
        assert!(cookie.contains(attribute), "{cookie}");
    }
    assert!(!cookie.contains("Secure"), "plain http: {cookie}");
    assert!(!cookie.contains(secret.expose()));
    let overview = visitor.get("/console/").await;
    assert_eq!(overview.status(), StatusCode::OK);
    assert!(overview.text().await.unwrap().contains(id.as_str()));

    let app = spawn_with(|s| s.config.issuer = Some("https://tessera.example".into())).await;
    let (id, secret) = admin(&app, "admin", "tessera-admin").await;
    let mut visitor = Visitor::new(&app);
    let form = visitor.get("/console/sign-in").await;
    assert!(set_cookie(&form, "tessera_console_signin").contains("; Secure"));
    let signed_in = visitor.sign_in(id.as_str(), secret.expose()).await;
    assert!(set_cookie(&signed_in, "tessera_console").contains("; Secure"));
}

#[tokio::test]
async fn forms_without_the_session_csrf_token_are_refused() {
    let app = spawn_app().await;
    let (id, secret) = admin(&app, "admin", "tessera-admin").await;
    let mut visitor = Visitor::new(&app);
    visitor.sign_in(id.as_str(), secret.expose()).await;
    let csrf = visitor.csrf().await;
    let plan = [("name", "partner"), ("scopes", "news-api")];
    let missing = visitor.post("/console/plans", &plan).await;
    assert_eq!(missing.status(), StatusCode::FORBIDDEN);
    let wrong = visitor
        .post("/console/plans", &[plan[0], plan[1], ("csrf", "forged")])
        .await;
    assert_eq!(wrong.status(), StatusCode::FORBIDDEN);
    assert!(app
        .store
        .plans()
        .await
        .unwrap()
        .iter()
        .all(|p| p.name != "partner"));
    let right = visitor
        .post("/console/plans", &[plan[0], plan[1], ("csrf", &csrf)])
        .await;
    assert_eq!(right.status(), StatusCode::SEE_OTHER);
    assert!(app
        .store
        .plans()
        .await
        .unwrap()
        .iter()
        .any(|p| p.name == "partner"));

    // Sign-in has no session yet: its token is double-submitted in a cookie of its own.
    let mut stranger = Visitor::new(&app);
    let forged = stranger
        .post(
            "/console/sign-in",
            &[
                ("csrf", "x"),
                ("client_id", id.as_str()),
                ("client_secret", secret.expose()),
            ],
        )
        .await;
    assert_eq!(forged.status(), StatusCode::FORBIDDEN);
    assert!(forged
        .headers()
        .get_all(SET_COOKIE)
        .iter()
        .all(|c| !c.to_str().unwrap().starts_with("tessera_console=")));

    // Signing out ends the session on the server, not only in the browser.
    let old = visitor.cookies.clone();
    let out = visitor.post("/console/sign-out", &[("csrf", &csrf)]).await;
    assert_eq!(location(&out), "/console/sign-in");
    visitor.cookies = old;
    assert_eq!(
        visitor.get("/console/").await.status(),
        StatusCode::SEE_OTHER
    );
}

#[tokio::test]
async fn a_read_only_admin_sees_no_write_buttons_and_a_forged_write_is_refused() {
    let app = spawn_app().await;
    let (id, secret) = admin(&app, "auditors", "tessera-admin-read").await;
    let (target, _) = app.client().await;
    let mut visitor = Visitor::new(&app);
    let signed_in = visitor.sign_in(id.as_str(), secret.expose()).await;
    assert_eq!(location(&signed_in), "/console/");
    let client_page = format!("/console/clients/{target}");
    let page = visitor.get(&client_page).await.text().await.unwrap();
    assert!(page.contains("read-only"));
    for write in ["Rotate secret", "Disable client", "Delete client", "Move"] {
        assert!(!page.contains(write), "{write} shown to a read-only admin");
    }
    let plans = visitor.get("/console/plans").await.text().await.unwrap();
    assert!(!plans.contains("Create a plan"));
    let keys = visitor.get("/console/keys").await.text().await.unwrap();
    assert!(!keys.contains("Rotate signing key"));

    let csrf = visitor.csrf().await;
    let forged = visitor
        .post(
            &format!("{client_page}/change"),
            &[("csrf", &csrf), ("enabled", "false")],
        )
        .await;
    assert_eq!(location(&forged), client_page);
    let shown = visitor.get(&client_page).await.text().await.unwrap();
    assert!(
        shown.contains("tessera-admin"),
        "the refusal is shown: {shown}"
    );
    let client = app.store.client(&target).await.unwrap().unwrap();
    assert!(client.enabled, "the admin API refused the read-only token");
}

#[tokio::test]
async fn failed_sign_ins_are_throttled_as_token_requests_are() {
    let app = spawn_with(|s| {
        s.config.auth_failures_per_source_and_client = RateLimit {
            count: 2,
            period_secs: 60,
            burst: 2,
        }
    })
    .await;
    let (id, secret) = admin(&app, "admin", "tessera-admin").await;
    let mut visitor = Visitor::new(&app);
    let mut statuses = Vec::new();
    for _ in 0..4 {
        let response = visitor.sign_in(id.as_str(), "tcs_wrong").await;
        statuses.push(response.status());
        if response.status() == StatusCode::TOO_MANY_REQUESTS {
            assert!(response
                .text()
                .await
                .unwrap()
                .contains("Too many failed sign-ins"));
        }
    }
    assert_eq!(statuses[0], StatusCode::UNAUTHORIZED);
    assert_eq!(statuses[3], StatusCode::TOO_MANY_REQUESTS, "{statuses:?}");
    // The token endpoint counts the same failures for this address and client.
    let token = app
        .token(
            &id,
            &ClientSecret::new("tcs_wrong"),
            "grant_type=client_credentials&scope=tessera-admin",
        )
        .await;
    assert_eq!(token.status(), 429);
    // Correct credentials are never throttled.
    let signed_in = visitor.sign_in(id.as_str(), secret.expose()).await;
    assert_eq!(signed_in.status(), StatusCode::SEE_OTHER);

    let (plain, plain_secret) = app.client().await;
    let not_admin = Visitor::new(&app)
        .sign_in(plain.as_str(), plain_secret.expose())
        .await;
    assert_eq!(not_admin.status(), StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn no_console_serves_nothing_under_console() {
    let app = spawn_with(|s| s.config.no_console = true).await;
    let mut visitor = Visitor::new(&app);
    assert_eq!(
        visitor.get("/console/").await.status(),
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        visitor.get("/console/sign-in").await.status(),
        StatusCode::NOT_FOUND
    );
}

/// The overview names the clients being rate-limited now; a client's page lists its last
/// refusals with their error codes; and the hourly chart counts the last day.
#[tokio::test]
async fn refusals_and_the_last_day_are_on_the_pages() {
    let app = spawn_app().await;
    let (id, secret) = admin(&app, "ops", "tessera-admin-read").await;
    let rate = tessera_store::RateLimit {
        count: 1,
        period_secs: 60,
        burst: 1,
    };
    app.registrar()
        .set_plan_with(
            "metered",
            "news-api",
            &tessera_server::registrar::PlanSettings {
                token_rate: tessera_server::registrar::Change::Set(rate),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let (caller, caller_secret) = app
        .client_on("metered", tessera_store::AuthMethod::ClientSecretBasic)
        .await;
    let news = "grant_type=client_credentials&scope=news-api";
    assert_eq!(app.token(&caller, &caller_secret, news).await.status(), 200);
    assert_eq!(app.token(&caller, &caller_secret, news).await.status(), 429);
    app.state.housekeeping().await;

    let mut visitor = Visitor::new(&app);
    visitor.sign_in(id.as_str(), secret.expose()).await;
    let overview = visitor.get("/console/").await.text().await.unwrap();
    let limited = overview.split("Rate-limited now").nth(1).unwrap();
    assert!(limited.contains(caller.as_str()), "{limited}");
    assert!(overview.contains("last 24 hours"));
    let page = visitor
        .get(&format!("/console/clients/{caller}"))
        .await
        .text()
        .await
        .unwrap();
    let refusals = page.split("Last refusals").nth(1).unwrap();
    assert!(refusals.contains("rate_limited"), "{refusals}");
}

/// A read-only admin signing in again and again (past the whole store's 1,024 sessions)
/// ends only its own oldest sessions, never another admin's (issue 23, item 16).
#[tokio::test]
async fn signing_in_repeatedly_evicts_only_ones_own_sessions() {
    let app = spawn_app().await;
    let (writer, writer_secret) = admin(&app, "admin", "tessera-admin").await;
    let (reader, reader_secret) = admin(&app, "reader", "tessera-admin-read").await;
    let mut victim = Visitor::new(&app);
    victim
        .sign_in(writer.as_str(), writer_secret.expose())
        .await;
    assert_eq!(victim.get("/console/").await.status(), StatusCode::OK);
    // The victim's session is now the one closest to its end (the old eviction's choice).
    app.clock.advance(std::time::Duration::from_secs(1));

    // The attacker keeps one sign-in form (double-submit cookie and field) and posts it.
    let mut attacker = Visitor::new(&app);
    let form = attacker.get("/console/sign-in").await.text().await.unwrap();
    let csrf = hidden(&form, "csrf");
    let signed_in_as_reader = || async {
        let response = attacker
            .http
            .post(app.url("/console/sign-in"))
            .header(COOKIE, format!("tessera_console_signin={csrf}"))
            .form(&[
                ("csrf", csrf.as_str()),
                ("client_id", reader.as_str()),
                ("client_secret", reader_secret.expose()),
            ])
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::SEE_OTHER);
        set_cookie(&response, "tessera_console")
    };
    let first = signed_in_as_reader().await;
    for _ in 0..1030 {
        signed_in_as_reader().await;
    }
    let last = signed_in_as_reader().await;

    assert_eq!(
        victim.get("/console/").await.status(),
        StatusCode::OK,
        "the other admin is still signed in"
    );
    let page_with = |cookie: String| {
        let pair = cookie.split(';').next().unwrap().to_owned();
        attacker
            .http
            .get(app.url("/console/"))
            .header(COOKIE, pair)
            .send()
    };
    assert_eq!(page_with(last).await.unwrap().status(), StatusCode::OK);
    let evicted = page_with(first).await.unwrap();
    assert_eq!(
        evicted.status(),
        StatusCode::SEE_OTHER,
        "its own oldest gave way"
    );
    assert_eq!(location(&evicted), "/console/sign-in");
}

/// With the management surface on a listener of its own, the console is there: signing in
/// (which asks the token endpoint in-process), reading and changing through the admin API
/// all work on that listener, and the console is not found on the main one.
#[tokio::test]
async fn the_console_works_on_the_admin_listener() {
    let app = spawn_with(|s| s.config.admin_listen = Some(([127, 0, 0, 1], 0).into())).await;
    let (id, secret) = admin(&app, "admin", "tessera-admin").await;
    let admin_base = format!("http://{}", app.admin_addr.unwrap());
    let mut visitor = Visitor {
        base: admin_base,
        ..Visitor::new(&app)
    };
    let signed_in = visitor.sign_in(id.as_str(), secret.expose()).await;
    assert_eq!(signed_in.status(), StatusCode::SEE_OTHER);
    assert_eq!(location(&signed_in), "/console/");
    assert_eq!(visitor.get("/console/").await.status(), 200);
    let csrf = visitor.csrf().await;
    let created = visitor
        .post(
            "/console/plans",
            &[
                ("csrf", &csrf),
                ("name", "reports"),
                ("scopes", "reports-api"),
            ],
        )
        .await;
    assert_eq!(created.status(), StatusCode::SEE_OTHER);
    assert!(app
        .store
        .plans()
        .await
        .unwrap()
        .iter()
        .any(|p| p.name == "reports"));
    let mut elsewhere = Visitor::new(&app);
    assert_eq!(elsewhere.get("/console/sign-in").await.status(), 404);
}

/// README: the session cookie lives "as long as the token (at most 8 h)": with a token good
/// for a day, the cookie says 8 h, and by the server's clock the session ends at 8 h.
#[tokio::test]
async fn a_session_lasts_at_most_8_hours_whatever_its_token() {
    use tessera_server::registrar::PlanSettings;
    let app = spawn_app().await;
    let daily = PlanSettings {
        token_ttl: Some(86_400),
        ..PlanSettings::default()
    };
    app.registrar()
        .set_plan_with("admin", "tessera-admin", &daily)
        .await
        .unwrap();
    let (id, secret) = app.client_on("admin", AuthMethod::ClientSecretBasic).await;
    let mut visitor = Visitor::new(&app);
    let signed_in = visitor.sign_in(id.as_str(), secret.expose()).await;
    let cookie = set_cookie(&signed_in, "tessera_console");
    assert!(cookie.contains("Max-Age=28800"), "{cookie}");
    app.clock
        .advance(std::time::Duration::from_secs(8 * 3600 - 1));
    assert_eq!(visitor.get("/console/").await.status(), StatusCode::OK);
    app.clock.advance(std::time::Duration::from_secs(2));
    let ended = visitor.get("/console/").await;
    assert_eq!(ended.status(), StatusCode::SEE_OTHER);
    assert_eq!(location(&ended), "/console/sign-in");
}

/// Issue 27: the plan form sets each API's limits (a typed form, refused with the API's
/// problem when a limit names an API the plan does not grant), the plan pages show them,
/// and a client's page charts the API requests its APIs reported.
#[tokio::test]
async fn the_plan_form_sets_api_limits_and_the_client_page_charts_api_requests() {
    let app = spawn_app().await;
    let (id, secret) = admin(&app, "admin", "tessera-admin").await;
    let mut visitor = Visitor::new(&app);
    visitor.sign_in(id.as_str(), secret.expose()).await;
    let csrf = visitor.csrf().await;
    let created = visitor
        .post(
            "/console/plans",
            &[
                ("csrf", &csrf),
                ("name", "free"),
                ("scopes", "news-api market-data-api"),
                ("limit_api", "news-api"),
                ("limit_rate", "5/min"),
                ("limit_burst", ""),
                ("limit_quota", "1000/day"),
                ("limit_api", ""),
                ("limit_rate", ""),
                ("limit_burst", ""),
                ("limit_quota", ""),
                ("limit_api", "market-data-api"),
                ("limit_rate", ""),
                ("limit_burst", ""),
                ("limit_quota", "25/month"),
            ],
        )
        .await;
    assert_eq!(created.status(), StatusCode::SEE_OTHER);
    assert_eq!(location(&created), "/console/plans");
    let plan = app
        .store
        .plans()
        .await
        .unwrap()
        .into_iter()
        .find(|p| p.name == "free")
        .expect("plan free");
    assert_eq!(plan.api_limits.len(), 2);
    assert_eq!(plan.api_limits["news-api"].rate.unwrap().count, 5);
    assert_eq!(plan.api_limits["market-data-api"].quota.unwrap().limit, 25);
    let list = visitor.get("/console/plans").await.text().await.unwrap();
    assert!(
        list.contains("news-api: 5/min (burst 5), 1000/day"),
        "{list}"
    );

    // The edit form has a row per API the plan grants, filled in.
    let page = visitor
        .get("/console/plans/free")
        .await
        .text()
        .await
        .unwrap();
    assert!(page.contains("value=\"1000/day\""), "{page}");
    let etag = hidden(&page, "etag").replace("&quot;", "\"");
    let edit = |rate: &'static str, api: &'static str| {
        [
            ("scopes", "news-api market-data-api"),
            ("limit_api", api),
            ("limit_rate", rate),
            ("limit_burst", "2"),
            ("limit_quota", ""),
        ]
    };
    let mut form = vec![("csrf", csrf.as_str()), ("etag", etag.as_str())];
    form.extend(edit("9/hour", "oms-api"));
    let refused = visitor.post("/console/plans/free", &form).await;
    assert_eq!(location(&refused), "/console/plans/free");
    let page = visitor
        .get("/console/plans/free")
        .await
        .text()
        .await
        .unwrap();
    assert!(
        page.contains("does not grant API"),
        "the flash names the fault: {page}"
    );
    let mut form = vec![("csrf", csrf.as_str()), ("etag", etag.as_str())];
    form.extend(edit("9/hour", "news-api"));
    let saved = visitor.post("/console/plans/free", &form).await;
    assert_eq!(location(&saved), "/console/plans/free");
    let plan = app
        .store
        .plans()
        .await
        .unwrap()
        .into_iter()
        .find(|p| p.name == "free")
        .unwrap();
    let rate = plan.api_limits["news-api"].rate.unwrap();
    assert_eq!((rate.count, rate.period_secs, rate.burst), (9, 3600, 2));
    assert!(plan.api_limits["news-api"].quota.is_none());
    assert!(
        !plan.api_limits.contains_key("market-data-api"),
        "its row came empty"
    );

    // A client's page: a chart of each API's reported requests.
    let (caller, _) = app.client_on("free", AuthMethod::ClientSecretBasic).await;
    let today = tessera_proto::clock::utc_day(app.clock.now());
    let reported = tessera_store::ApiUsage {
        day: today,
        client_id: caller.as_str().to_owned(),
        api: "news-api".into(),
        requests: 42,
        refused: 4,
    };
    app.store
        .add_api_usage("console-test", app.clock.now(), &[reported])
        .await
        .unwrap();
    let page = visitor
        .get(&format!("/console/clients/{caller}"))
        .await
        .text()
        .await
        .unwrap();
    let charts = page.split("API requests, last 30 days").nth(1).unwrap();
    assert!(
        charts.contains("Requests to news-api: 42 requests served and 4 requests refused"),
        "{charts}"
    );
}
