//! The operator console over plain HTTP, without a browser: its security headers and
//! cookies, CSRF refusals, what a read-only admin sees and may do, sign-in throttling.
//! `tests/browser` drives it in Chromium.

use reqwest::header::{CONTENT_SECURITY_POLICY, COOKIE, LOCATION, SET_COOKIE};
use reqwest::{redirect, Response, StatusCode};
use tessera_proto::{ClientId, ClientSecret};
use tessera_store::{AuthMethod, RateLimit};
use tessera_testkit::{spawn_app, spawn_with, TestApp};

/// A browser without a browser: cookies kept by hand, redirects not followed.
pub(crate) struct Visitor {
    http: reqwest::Client,
    base: String,
    cookies: Vec<(String, String)>,
}

impl Visitor {
    pub(crate) fn new(app: &TestApp) -> Self {
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

    /// The value of cookie `name`, as kept.
    pub(crate) fn cookie(&self, name: &str) -> String {
        self.cookies
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    }

    fn cookie_header(&self) -> String {
        self.cookies
            .iter()
            .map(|(n, v)| format!("{n}={v}"))
            .collect::<Vec<_>>()
            .join("; ")
    }

    pub(crate) async fn get(&mut self, path: &str) -> Response {
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

    pub(crate) async fn post(&mut self, path: &str, form: &[(&str, &str)]) -> Response {
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

    pub(crate) async fn sign_in(&mut self, id: &str, secret: &str) -> Response {
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
pub(crate) fn hidden(html: &str, name: &str) -> String {
    let marker = format!("name=\"{name}\" value=\"");
    let start = html
        .find(&marker)
        .unwrap_or_else(|| panic!("no {name} in {html}"))
        + marker.len();
    html[start..].split('"').next().unwrap().to_owned()
}

/// An admin client on a plan with `scopes`.
pub(crate) async fn admin(app: &TestApp, plan: &str, scopes: &str) -> (ClientId, ClientSecret) {
    app.registrar().set_plan(plan, scopes, None).await.unwrap();
    app.client_on(plan, AuthMethod::ClientSecretBasic).await
}

pub(crate) fn location(response: &Response) -> &str {
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
            &[("csrf", &csrf), ("enabled", "false"), ("confirmed", "yes")],
        )
        .await;
    assert_eq!(forged.status(), StatusCode::FORBIDDEN);
    let shown = forged.text().await.unwrap();
    assert!(
        shown.contains("tessera-admin-read only"),
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
    let (status, page) = page_of(visitor.post("/console/plans/free", &form).await).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        page.contains("does not grant API"),
        "the page names the fault: {page}"
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

/// The HTML of `response`, with its status.
pub(crate) async fn page_of(response: Response) -> (StatusCode, String) {
    let status = response.status();
    (status, response.text().await.unwrap())
}

/// The clients registered on `plan`.
async fn clients_on(app: &TestApp, plan: &str) -> usize {
    app.store
        .clients_page(Some(plan), None, 1000)
        .await
        .unwrap()
        .len()
}

/// Issue 29 item 3: "Create a client" chooses no plan beforehand, marks admin plans and
/// creates a client on one only once the admin confirms it; a refused form keeps what was
/// typed.
#[tokio::test]
async fn create_a_client_chooses_no_plan_and_an_admin_plan_needs_a_confirmation() {
    let app = spawn_app().await;
    let (id, secret) = admin(&app, "admin", "tessera-admin").await;
    app.registrar()
        .set_plan("partner", "news-api", None)
        .await
        .unwrap();
    let mut visitor = Visitor::new(&app);
    visitor.sign_in(id.as_str(), secret.expose()).await;
    let form = visitor
        .get("/console/clients/new")
        .await
        .text()
        .await
        .unwrap();
    let select = form.split("id=\"client-plan\"").nth(1).unwrap();
    let select = select.split("</select>").next().unwrap();
    assert_eq!(select.matches(" selected").count(), 1, "{select}");
    assert!(
        select.contains("<option value=\"\" disabled selected>"),
        "{select}"
    );
    assert!(select.contains("data-admin=\"yes\">admin (tessera-admin) — admin"));
    assert!(!select.contains("value=\"partner\" selected"));
    assert!(form.contains("id=\"admin-warning\""));
    let csrf = hidden(&form, "csrf");
    let create = |plan: &'static str, confirm: Option<&'static str>| {
        let mut form = vec![
            ("csrf", csrf.clone()),
            ("plan", plan.to_owned()),
            ("name", "Ops <tool>".to_owned()),
            ("auth_method", "client_secret_post".to_owned()),
        ];
        if let Some(c) = confirm {
            form.push(("confirm_admin", c.to_owned()));
        }
        form
    };
    let post = |visitor: &Visitor, form: Vec<(&'static str, String)>| {
        let body = form
            .iter()
            .map(|(n, v)| format!("{n}={}", tessera_proto::form::encode_component(v)))
            .collect::<Vec<_>>()
            .join("&");
        visitor
            .http
            .post(format!("{}/console/clients", visitor.base))
            .header(COOKIE, visitor.cookie_header())
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
    };

    // No plan: refused beside the plan field; the name and method are kept.
    let (status, page) = page_of(post(&visitor, create("", None)).await.unwrap()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(page.contains("id=\"error-plan\""), "{page}");
    assert!(page.contains("Choose the plan"));
    assert!(
        page.contains("value=\"Ops &lt;tool&gt;\""),
        "the name is kept: {page}"
    );
    assert!(page.contains("value=\"client_secret_post\" selected"));

    // An admin plan without the confirmation: refused, nothing created, all kept.
    let (status, page) = page_of(post(&visitor, create("admin", None)).await.unwrap()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let error = page.split("id=\"error-plan\"").nth(1).unwrap();
    assert!(error.contains("grants the admin API"), "{error}");
    assert!(
        page.contains("value=\"admin\" selected"),
        "the plan is kept"
    );
    assert!(page.contains("aria-invalid=\"true\""));
    assert_eq!(
        clients_on(&app, "admin").await,
        1,
        "only the signed-in admin"
    );

    // Confirmed: created.
    let (status, page) = page_of(post(&visitor, create("admin", Some("yes"))).await.unwrap()).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(page.contains("id=\"client-secret\""));
    assert_eq!(clients_on(&app, "admin").await, 2);
    // A plan that grants no admin scope needs no confirmation.
    let (status, _) = page_of(post(&visitor, create("partner", None)).await.unwrap()).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(clients_on(&app, "partner").await, 1);
}

/// Issue 29 item 3: a refused plan form comes back with what was typed and the error
/// beside its field, escaped once (by the HTML, not also as a Rust string).
#[tokio::test]
async fn a_refused_plan_form_keeps_what_was_typed_and_says_why_beside_the_field() {
    let app = spawn_app().await;
    let (id, secret) = admin(&app, "admin", "tessera-admin").await;
    let mut visitor = Visitor::new(&app);
    visitor.sign_in(id.as_str(), secret.expose()).await;
    let csrf = visitor.csrf().await;
    let typed = |scopes: &'static str, ttl: &'static str| {
        [
            ("name", "silver"),
            ("scopes", scopes),
            ("token_ttl", ttl),
            ("rate_count", "10"),
            ("rate_period", "3600"),
            ("reuse_percent", "50"),
            ("dpop", "required"),
            ("limit_api", "news-api"),
            ("limit_rate", "5/min"),
            ("limit_burst", ""),
            ("limit_quota", ""),
        ]
    };
    let with_csrf = |fields: &[(&'static str, &'static str)]| {
        let mut form = vec![("csrf", csrf.as_str())];
        form.extend_from_slice(fields);
        form
    };
    let (status, page) = page_of(
        visitor
            .post(
                "/console/plans",
                &with_csrf(&typed("news-api \"x\"", "1800")),
            )
            .await,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let error = page.split("id=\"error-scopes\"").nth(1).unwrap();
    let error = error.split("</p>").next().unwrap();
    assert!(
        error.contains("scope name “&quot;x&quot;” must be"),
        "escaped once: {error}"
    );
    assert!(!error.contains('\\') && !error.contains("&amp;"), "{error}");
    for kept in [
        "value=\"silver\"",
        "value=\"news-api &quot;x&quot;\"",
        "value=\"1800\"",
        "value=\"10\"",
        "value=\"3600\" selected",
        "value=\"50\"",
        "value=\"required\" selected",
        "value=\"5/min\"",
    ] {
        assert!(page.contains(kept), "{kept} kept: {page}");
    }
    // The console's own check: beside the lifetime.
    let (status, page) = page_of(
        visitor
            .post("/console/plans", &with_csrf(&typed("news-api", "soon")))
            .await,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let error = page.split("id=\"error-token_ttl\"").nth(1).unwrap();
    assert!(error.starts_with(" role=\"alert\">The token lifetime must be a whole number"));
    assert!(app
        .store
        .plans()
        .await
        .unwrap()
        .iter()
        .all(|p| p.name != "silver"));
    // Saved, then a second plan of that name: beside the name.
    let saved = visitor
        .post("/console/plans", &with_csrf(&typed("news-api", "1800")))
        .await;
    assert_eq!(saved.status(), StatusCode::SEE_OTHER);
    let (status, page) = page_of(
        visitor
            .post("/console/plans", &with_csrf(&typed("news-api", "1800")))
            .await,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(page
        .split("id=\"error-name\"")
        .nth(1)
        .unwrap()
        .contains("exists"));

    // The edit form too: a limit on an API the plan does not grant, beside the limits.
    let page = visitor
        .get("/console/plans/silver")
        .await
        .text()
        .await
        .unwrap();
    let etag = hidden(&page, "etag").replace("&quot;", "\"");
    let form = [
        ("csrf", csrf.as_str()),
        ("etag", etag.as_str()),
        ("scopes", "news-api"),
        ("token_ttl", "900"),
        ("limit_api", "oms-api"),
        ("limit_rate", "7/hour"),
        ("limit_burst", ""),
        ("limit_quota", ""),
    ];
    let (status, page) = page_of(visitor.post("/console/plans/silver", &form).await).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(page
        .split("id=\"error-limits\"")
        .nth(1)
        .unwrap()
        .contains("does not grant"));
    assert!(page.contains("value=\"900\"") && page.contains("value=\"7/hour\""));
    let plan = app
        .store
        .plans()
        .await
        .unwrap()
        .into_iter()
        .find(|p| p.name == "silver")
        .unwrap();
    assert_eq!(plan.token_ttl, 1800, "nothing saved");
}

/// Issue 29 item 3: disabling a client, rotating its secret and deleting it each take a
/// second step, a page that says what it does; the first step changes nothing.
#[tokio::test]
async fn disable_rotate_and_delete_ask_for_a_confirmation_first() {
    let app = spawn_app().await;
    let (id, secret) = admin(&app, "admin", "tessera-admin").await;
    let (target, _) = app.client().await;
    let mut visitor = Visitor::new(&app);
    visitor.sign_in(id.as_str(), secret.expose()).await;
    let client_page = format!("/console/clients/{target}");
    let page = visitor.get(&client_page).await.text().await.unwrap();
    let csrf = hidden(&page, "csrf");
    let etag = hidden(&page, "etag").replace("&quot;", "\"");

    // Disable.
    let change = format!("{client_page}/change");
    let first = [
        ("csrf", csrf.as_str()),
        ("etag", etag.as_str()),
        ("enabled", "false"),
    ];
    let (status, page) = page_of(visitor.post(&change, &first).await).await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains(&format!("Disable {target}")), "{page}");
    assert!(page.contains("name=\"confirmed\" value=\"yes\""));
    assert!(page.contains(&format!("href=\"{client_page}\">Cancel")));
    assert!(app.store.client(&target).await.unwrap().unwrap().enabled);
    let mut confirmed = first.to_vec();
    confirmed.push(("confirmed", "yes"));
    let done = visitor.post(&change, &confirmed).await;
    assert_eq!(location(&done), client_page);
    assert!(!app.store.client(&target).await.unwrap().unwrap().enabled);

    // Rotate.
    let rotate = format!("{client_page}/rotate");
    let first = [("csrf", csrf.as_str()), ("grace_secs", "0")];
    let (status, page) = page_of(visitor.post(&rotate, &first).await).await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("stops working at once"), "{page}");
    assert!(!page.contains("id=\"client-secret\""), "no new secret yet");
    let before = app.store.client(&target).await.unwrap().unwrap();
    let mut confirmed = first.to_vec();
    confirmed.push(("confirmed", "yes"));
    let (status, page) = page_of(visitor.post(&rotate, &confirmed).await).await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("id=\"client-secret\""));
    assert_ne!(
        app.store.client(&target).await.unwrap().unwrap().credential,
        before.credential
    );

    // Delete.
    let delete = format!("{client_page}/delete");
    let page = visitor.get(&client_page).await.text().await.unwrap();
    let etag = hidden(&page, "etag").replace("&quot;", "\"");
    let first = [("csrf", csrf.as_str()), ("etag", etag.as_str())];
    let (status, page) = page_of(visitor.post(&delete, &first).await).await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains(&format!("Delete {target}")));
    assert!(app.store.client(&target).await.unwrap().is_some());
    let mut confirmed = first.to_vec();
    confirmed.push(("confirmed", "yes"));
    let done = visitor.post(&delete, &confirmed).await;
    assert_eq!(location(&done), "/console/clients");
    assert!(app.store.client(&target).await.unwrap().is_none());
}

/// Issue 29 item 3 (and first-hour F27): a disabled client that still calls is seen: its
/// refusals are listed and counted; the page says how fresh its counts are.
#[tokio::test]
async fn a_disabled_clients_refused_calls_are_listed_and_counted() {
    let app = spawn_app().await;
    let (id, secret) = admin(&app, "ops", "tessera-admin-read").await;
    let (caller, caller_secret) = app.client().await;
    app.registrar()
        .patch_client(caller.as_str(), None, None, Some(false))
        .await
        .unwrap();
    app.sync().await;
    let news = "grant_type=client_credentials&scope=news-api";
    assert_eq!(app.token(&caller, &caller_secret, news).await.status(), 401);
    // A wrong secret proves nothing: not the client's refusal.
    let wrong = ClientSecret::new("tcs_wrong");
    assert_eq!(app.token(&caller, &wrong, news).await.status(), 401);
    app.state.housekeeping().await;

    let mut visitor = Visitor::new(&app);
    visitor.sign_in(id.as_str(), secret.expose()).await;
    let page = visitor
        .get(&format!("/console/clients/{caller}"))
        .await
        .text()
        .await
        .unwrap();
    let refusals = page.split("Last refusals").nth(1).unwrap();
    assert_eq!(refusals.matches("invalid_client").count(), 1, "{refusals}");
    assert!(
        page.contains("This client: 0 tokens issued and 1 requests refused"),
        "{page}"
    );
    let freshness = page.split("id=\"usage-freshness\"").nth(1).unwrap();
    assert!(freshness.contains("every 30 s"), "{freshness}");
}

/// The text of the element with id `id` in `html`, its entities decoded.
fn text_of(html: &str, id: &str) -> String {
    let start = html
        .find(&format!("id=\"{id}\">"))
        .unwrap_or_else(|| panic!("no #{id} in {html}"))
        + id.len()
        + 6;
    let text = &html[start..];
    let text = &text[..text.find('<').unwrap()];
    text.replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// Issue 29 item 4: the page that shows a new client's secret has a quick start with the
/// client's values; its curl snippet, run by a shell, gets a token from the real server
/// (for either way of sending the secret), and its Rust snippet is the kit's compiled
/// example.
#[tokio::test]
async fn the_quick_start_of_a_new_client_gets_a_token_as_pasted() {
    let app = spawn_app().await;
    let (id, secret) = admin(&app, "admin", "tessera-admin").await;
    app.registrar()
        .set_plan("partner", "news-api market-data-api", None)
        .await
        .unwrap();
    let mut visitor = Visitor::new(&app);
    visitor.sign_in(id.as_str(), secret.expose()).await;
    for method in ["client_secret_basic", "client_secret_post"] {
        let form = visitor
            .get("/console/clients/new")
            .await
            .text()
            .await
            .unwrap();
        let (csrf, key) = (hidden(&form, "csrf"), hidden(&form, "idempotency_key"));
        let (status, page) = page_of(
            visitor
                .post(
                    "/console/clients",
                    &[
                        ("csrf", &csrf),
                        ("idempotency_key", &key),
                        ("plan", "partner"),
                        ("auth_method", method),
                    ],
                )
                .await,
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        let client_id = text_of(&page, "client-id");
        let client_secret = text_of(&page, "client-secret");
        let env = text_of(&page, "snippet-env");
        let curl = text_of(&page, "snippet-curl");
        assert!(
            env.contains(&format!("TESSERA_CLIENT_ID='{client_id}'")),
            "{env}"
        );
        assert!(env.contains(&format!("TESSERA_CLIENT_SECRET='{client_secret}'")));
        assert!(env.contains("TESSERA_SCOPES='market-data-api news-api'"));
        assert!(
            curl.contains(&client_id) && !curl.contains(&client_secret),
            "{curl}"
        );
        assert!(
            curl.contains(&format!("'{}/connect/token'", app.base)),
            "{curl}"
        );
        let script = format!("{env}\n{curl}");
        let out = tokio::task::spawn_blocking(move || {
            std::process::Command::new("sh")
                .arg("-c")
                .arg(script)
                .output()
                .expect("sh runs")
        })
        .await
        .unwrap();
        assert!(out.status.success(), "{out:?}");
        let answer: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
        assert_eq!(answer["scope"], "market-data-api news-api", "{answer}");
        assert!(answer["access_token"].is_string());

        let python = text_of(&page, "snippet-python");
        assert!(python.contains(&format!("\"{client_id}\"")), "{python}");
        assert!(python.contains(&format!("token_endpoint_auth_method=\"{method}\"")));
        assert!(python.contains(&format!("\"{}/connect/token\"", app.base)));
        assert!(!python.contains(&client_secret));
        let rust = text_of(&page, "snippet-rust");
        let example = include_str!("../../../tessera-client/examples/quickstart.rs");
        assert_eq!(rust, example, "the page shows the kit's example as it is");
    }
}

/// Issue 29 item 2: every change through the admin API or the console is kept as an audit
/// event (who, what, to what, when, from where, through what), read back newest first from
/// `GET /admin/v1/audit-events` (searchable, paged, its bad parameters refused) and on the
/// console's activity page; never a secret; forgotten after the retention period.
#[tokio::test]
async fn every_change_is_kept_as_an_audit_event_and_shown_on_the_activity_page() {
    use serde_json::{json, Value};
    let app = spawn_with(|s| s.config.audit_retention = std::time::Duration::from_secs(7200)).await;
    let (api_admin, token) = app.admin_token("tessera-admin").await;
    let events = |query: &str| {
        app.http
            .get(app.url(&format!("/admin/v1/audit-events{query}")))
            .bearer_auth(&token)
            .send()
    };
    let body = |r: Response| async move {
        assert_eq!(r.status(), StatusCode::OK);
        r.json::<Value>().await.unwrap()
    };
    assert_eq!(body(events("").await.unwrap()).await["events"], json!([]));

    // Through the admin API.
    let put = app
        .http
        .put(app.url("/admin/v1/plans/gold"))
        .bearer_auth(&token)
        .json(&json!({ "scopes": ["news-api"] }))
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), StatusCode::CREATED);
    app.clock.advance(std::time::Duration::from_secs(60));

    // Through the console, as another admin client.
    let (console_admin, secret) = admin(&app, "ops", "tessera-admin").await;
    let mut visitor = Visitor::new(&app);
    visitor
        .sign_in(console_admin.as_str(), secret.expose())
        .await;
    let form = visitor
        .get("/console/clients/new")
        .await
        .text()
        .await
        .unwrap();
    let (csrf, key) = (hidden(&form, "csrf"), hidden(&form, "idempotency_key"));
    let (_, page) = page_of(
        visitor
            .post(
                "/console/clients",
                &[("csrf", &csrf), ("idempotency_key", &key), ("plan", "gold")],
            )
            .await,
    )
    .await;
    let client = text_of(&page, "client-id");
    let client_secret = text_of(&page, "client-secret");
    let rotate = format!("/console/clients/{client}/rotate");
    visitor
        .post(
            &rotate,
            &[("csrf", &csrf), ("grace_secs", "0"), ("confirmed", "yes")],
        )
        .await;

    let all = body(events("").await.unwrap()).await;
    let list = all["events"].as_array().unwrap();
    assert_eq!(list.len(), 3, "{all}");
    assert!(!all.to_string().contains(&client_secret), "no secret");
    assert_eq!(list[0]["actor"], console_admin.as_str());
    assert_eq!(list[0]["object"], format!("client:{client}"));
    assert_eq!(list[0]["action"], "secret rotated, previous valid for 0 s");
    assert_eq!(list[0]["channel"], "console");
    assert_eq!(list[0]["source"], "127.0.0.1");
    assert_eq!(list[1]["action"], "created on plan gold");
    assert_eq!(list[2]["actor"], api_admin.as_str());
    assert_eq!(list[2]["object"], "plan:gold");
    assert_eq!(list[2]["action"], "created");
    assert_eq!(list[2]["channel"], "admin-api");
    assert_eq!(list[2]["source"], "127.0.0.1");
    let at = |e: &Value| tessera_proto::clock::parse_rfc3339(e["at"].as_str().unwrap());
    assert_eq!(at(&list[0]), Some(app.clock.now()));
    assert_eq!(at(&list[2]), Some(app.clock.now() - 60));

    // Searched and paged.
    let found = body(
        events(&format!("?q={}", api_admin.as_str().to_uppercase()))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(found["events"].as_array().unwrap().len(), 1);
    let first = body(events("?limit=2").await.unwrap()).await;
    assert_eq!(first["events"].as_array().unwrap().len(), 2);
    let next = first["next_before"].as_i64().expect("an older page");
    let rest = body(events(&format!("?limit=2&before={next}")).await.unwrap()).await;
    assert_eq!(rest["events"][0]["object"], "plan:gold");
    assert_eq!(rest["next_before"], Value::Null);
    for bad in [
        "?limit=0",
        "?limit=501",
        "?before=x",
        &format!("?q={}", "x".repeat(257)),
    ] {
        let refused = events(bad).await.unwrap();
        assert_eq!(refused.status(), StatusCode::BAD_REQUEST, "{bad}");
        assert_eq!(
            refused.headers()["content-type"],
            "application/problem+json"
        );
    }
    let anonymous = app
        .http
        .get(app.url("/admin/v1/audit-events"))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);

    // The console's activity page, with its search.
    let activity = visitor.get("/console/activity").await.text().await.unwrap();
    let table = activity.split("id=\"activity\"").nth(1).unwrap();
    assert_eq!(table.matches("<tr>").count(), 4, "a head and three rows");
    assert!(table.contains(&format!("href=\"/console/clients/{client}\"")));
    let searched = visitor
        .get("/console/activity?q=plan%3Agold")
        .await
        .text()
        .await
        .unwrap();
    let table = searched.split("id=\"activity\"").nth(1).unwrap();
    assert_eq!(table.matches("<tr>").count(), 2, "{table}");

    // Past the retention period, housekeeping forgets them.
    app.clock
        .advance(std::time::Duration::from_secs(7200 - 60 + 1));
    app.state.housekeeping().await;
    let (_, fresh) = app.admin_token("tessera-admin-read").await;
    let left: Value = app
        .http
        .get(app.url("/admin/v1/audit-events"))
        .bearer_auth(&fresh)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let objects: Vec<&str> = left["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["object"].as_str().unwrap())
        .collect();
    assert_eq!(
        objects,
        [format!("client:{client}"), format!("client:{client}")],
        "{left}"
    );
}

/// Issue 29 item 2, "from where": behind a trusted proxy, a change made in the console is
/// recorded with the browser's forwarded address, as the token endpoint's audit names it;
/// the console passes the browser's request on to the admin API it calls in-process.
#[tokio::test]
async fn behind_a_trusted_proxy_a_console_change_names_the_forwarded_address() {
    let app = spawn_with(|s| {
        s.config.trusted_proxies = vec![std::net::IpAddr::from([127, 0, 0, 1])];
    })
    .await;
    let (id, secret) = admin(&app, "admin", "tessera-admin").await;
    let mut visitor = Visitor::new(&app);
    visitor.sign_in(id.as_str(), secret.expose()).await;
    let csrf = visitor.csrf().await;
    let created = visitor
        .http
        .post(app.url("/console/plans"))
        .header(COOKIE, visitor.cookie_header())
        .header("x-forwarded-for", "198.51.100.7")
        .form(&[
            ("csrf", csrf.as_str()),
            ("name", "bronze"),
            ("scopes", "news-api"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), StatusCode::SEE_OTHER);
    let events = app
        .store
        .audit_events(&tessera_store::AuditQuery {
            text: String::new(),
            before: None,
            limit: 10,
        })
        .await
        .unwrap();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].object, "plan:bronze");
    assert_eq!(events[0].source, "198.51.100.7");
    assert_eq!(events[0].channel, "console");
    assert_eq!(events[0].actor, id.as_str());
}

/// The organizations' pages (issue 28): the list, and one organization with its clients;
/// an unknown one is the console's 404.
#[tokio::test]
async fn the_organization_pages_list_them_and_show_one_with_its_clients() {
    let app = spawn_app().await;
    let (id, secret) = admin(&app, "ops", "tessera-admin-read").await;
    app.registrar()
        .set_plan("basic", "news-api", None)
        .await
        .unwrap();
    app.registrar()
        .create_org("acme", "Acme Trading", "basic")
        .await
        .unwrap();
    let placement = app.registrar().placement("", Some("acme")).await.unwrap();
    let (mut member, _) = app.registrar().new_client(
        &app.secrets,
        &placement.plan,
        "acme-billing",
        AuthMethod::ClientSecretBasic,
    );
    placement.apply(&mut member);
    app.store.insert_client(&member).await.unwrap();
    let (outsider, _) = app.client_on("basic", AuthMethod::ClientSecretBasic).await;

    let mut visitor = Visitor::new(&app);
    visitor.sign_in(id.as_str(), secret.expose()).await;
    let list = visitor.get("/console/orgs").await;
    assert_eq!(list.status(), StatusCode::OK);
    let list = list.text().await.unwrap();
    assert!(list.contains("href=\"/console/orgs/acme\""), "{list}");
    assert!(list.contains("Acme Trading"), "{list}");
    let (status, page) = page_of(visitor.get("/console/orgs/acme").await).await;
    assert_eq!(status, StatusCode::OK);
    let clients = page
        .split("id=\"org-clients\"")
        .nth(1)
        .expect("a table of its clients");
    assert!(clients.contains(member.id.as_str()), "{clients}");
    assert!(clients.contains("acme-billing"), "{clients}");
    assert!(!page.contains(outsider.as_str()), "{page}");
    assert!(page.contains("Usage, last 30 days"), "{page}");
    let (status, _) = page_of(visitor.get("/console/orgs/ghost").await).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

/// On an organization's page a write admin disables it after a confirmation, which its
/// clients feel at once, enables it, and moves it to another plan.
#[tokio::test]
async fn an_organization_is_disabled_after_a_confirmation_and_moved_from_its_page() {
    let app = spawn_app().await;
    let (id, secret) = admin(&app, "ops", "tessera-admin").await;
    for plan in ["basic", "pro-2"] {
        app.registrar()
            .set_plan(plan, "news-api", None)
            .await
            .unwrap();
    }
    app.registrar()
        .create_org("acme", "", "basic")
        .await
        .unwrap();
    let placement = app.registrar().placement("", Some("acme")).await.unwrap();
    let (mut member, member_secret) = app.registrar().new_client(
        &app.secrets,
        &placement.plan,
        "m",
        AuthMethod::ClientSecretBasic,
    );
    placement.apply(&mut member);
    app.store.insert_client(&member).await.unwrap();
    app.sync().await;
    let news = "grant_type=client_credentials&scope=news-api";
    assert_eq!(
        app.token(&member.id, &member_secret, news).await.status(),
        200
    );

    let mut visitor = Visitor::new(&app);
    visitor.sign_in(id.as_str(), secret.expose()).await;
    let page = visitor
        .get("/console/orgs/acme")
        .await
        .text()
        .await
        .unwrap();
    let csrf = hidden(&page, "csrf");
    let etag = hidden(&page, "etag").replace("&quot;", "\"");
    // The first step only asks.
    let (status, asked) = page_of(
        visitor
            .post(
                "/console/orgs/acme/change",
                &[("csrf", &csrf), ("etag", &etag), ("enabled", "false")],
            )
            .await,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert!(asked.contains("Disable acme"), "{asked}");
    assert!(app.store.org("acme").await.unwrap().unwrap().enabled);
    let done = visitor
        .post(
            "/console/orgs/acme/change",
            &[
                ("csrf", &csrf),
                ("etag", &etag),
                ("enabled", "false"),
                ("confirmed", "yes"),
            ],
        )
        .await;
    assert_eq!(location(&done), "/console/orgs/acme");
    assert!(!app.store.org("acme").await.unwrap().unwrap().enabled);
    assert_eq!(
        app.token(&member.id, &member_secret, news).await.status(),
        401
    );
    let page = visitor
        .get("/console/orgs/acme")
        .await
        .text()
        .await
        .unwrap();
    assert!(page.contains("disabled: its clients"), "{page}");
    let etag = hidden(&page, "etag").replace("&quot;", "\"");
    visitor
        .post(
            "/console/orgs/acme/change",
            &[("csrf", &csrf), ("etag", &etag), ("enabled", "true")],
        )
        .await;
    assert!(app.store.org("acme").await.unwrap().unwrap().enabled);
    let page = visitor
        .get("/console/orgs/acme")
        .await
        .text()
        .await
        .unwrap();
    let etag = hidden(&page, "etag").replace("&quot;", "\"");
    visitor
        .post(
            "/console/orgs/acme/change",
            &[("csrf", &csrf), ("etag", &etag), ("plan", "pro-2")],
        )
        .await;
    assert_eq!(app.store.org("acme").await.unwrap().unwrap().plan, "pro-2");
    assert_eq!(
        app.store.client(&member.id).await.unwrap().unwrap().plan,
        "pro-2"
    );
}

/// The list of organizations creates one; a taken id is refused and nothing is written.
#[tokio::test]
async fn an_organization_is_created_from_the_list() {
    let app = spawn_app().await;
    let (id, secret) = admin(&app, "ops", "tessera-admin").await;
    app.registrar()
        .set_plan("basic", "news-api", None)
        .await
        .unwrap();
    let mut visitor = Visitor::new(&app);
    visitor.sign_in(id.as_str(), secret.expose()).await;
    let csrf = visitor.csrf().await;
    let form = [
        ("csrf", csrf.as_str()),
        ("id", "acme"),
        ("name", "Acme Trading"),
        ("plan", "basic"),
    ];
    let made = visitor.post("/console/orgs", &form).await;
    assert_eq!(location(&made), "/console/orgs/acme");
    let org = app.store.org("acme").await.unwrap().unwrap();
    assert_eq!(
        (org.name.as_str(), org.plan.as_str()),
        ("Acme Trading", "basic")
    );
    let refused = visitor.post("/console/orgs", &form).await;
    assert_eq!(location(&refused), "/console/orgs");
    let list = visitor.get("/console/orgs").await.text().await.unwrap();
    assert!(list.contains("already exists"), "{list}");
    assert_eq!(app.store.orgs().await.unwrap().len(), 1);
}
