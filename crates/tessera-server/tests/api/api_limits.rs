//! Issue 27, Tessera's side: plans limit API requests (the admin API's `api_limits`), tokens
//! name their plan, `GET /api-limits/{api}` tells the APIs, and `POST /api-usage` meters
//! what they served, shown in the usage endpoints.

use std::collections::BTreeMap;

use reqwest::{Method, Response};
use serde_json::{json, Value};
use tessera_server::registrar::{ApiLimitEdit, ApiLimitsChange, Change, PlanSettings};
use tessera_store::{AuthMethod, Period, Quota, RateLimit};
use tessera_testkit::*;

async fn admin_put(app: &TestApp, token: &str, plan: &str, body: Value) -> Response {
    app.http
        .request(Method::PUT, app.url(&format!("/admin/v1/plans/{plan}")))
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .unwrap()
}

async fn document(app: &TestApp, api: &str) -> Response {
    app.http
        .get(app.url(&format!("/api-limits/{api}")))
        .send()
        .await
        .unwrap()
}

/// The problem document of a refusal, checked for its RFC 9457 form.
async fn problem(response: Response, status: u16) -> Value {
    assert_eq!(response.status(), status);
    assert_eq!(
        response.headers()["content-type"],
        "application/problem+json"
    );
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["status"], status);
    assert!(!body["detail"].as_str().unwrap().is_empty());
    body
}

#[tokio::test]
async fn a_plans_api_limits_are_in_its_object_and_in_the_apis_document() {
    let app = spawn_app().await;
    let (_, admin) = app.admin_token("tessera-admin").await;
    let free = json!({"scopes": ["news-api", "market-data-api"], "api_limits": {
        "news-api": {"rate": "5/min", "quota": "1000/day"},
        "market-data-api": {"quota": "25/month"}}});
    let created = admin_put(&app, &admin, "free", free).await;
    assert_eq!(created.status(), 201);
    let plan: Value = created.json().await.unwrap();
    assert_eq!(
        plan["api_limits"],
        json!({"news-api": {"rate": "5/min", "burst": 5, "quota": "1000/day"},
               "market-data-api": {"quota": "25/month"}})
    );
    let read: Value = app
        .http
        .get(app.url("/admin/v1/plans/free"))
        .bearer_auth(&admin)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(read["api_limits"], plan["api_limits"]);
    let pro: Value = app
        .http
        .get(app.url("/admin/v1/plans/pro"))
        .bearer_auth(&admin)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(pro["api_limits"], json!({}), "no limits: an empty object");

    // Every plan granting the API, `{}` for one without limits; public and cacheable.
    let answer = document(&app, "news-api").await;
    assert_eq!(answer.status(), 200);
    assert_eq!(answer.headers()["cache-control"], "public, max-age=30");
    let etag = answer.headers()["etag"].to_str().unwrap().to_owned();
    let body: Value = answer.json().await.unwrap();
    assert_eq!(
        body,
        json!({"api": "news-api", "plans": {
            "free": {"rate": {"limit": 5, "window_seconds": 60}, "burst": 5,
                     "quota": {"limit": 1000, "period": "day"}},
            "pro": {}}})
    );
    // It reads as the contract's type, which the verify kit reads.
    let typed: tessera_proto::api_limits::LimitsDocument = serde_json::from_value(body).unwrap();
    assert_eq!(typed.plans.len(), 2);
    let unchanged = app
        .http
        .get(app.url("/api-limits/news-api"))
        .header("if-none-match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(unchanged.status(), 304);
    assert_eq!(unchanged.headers()["etag"], etag.as_str());

    // A plan change is in the document at once (the admin API answers once it is in force).
    let changed = admin_put(
        &app,
        &admin,
        "free",
        json!({"scopes": ["news-api"], "api_limits": {"news-api": {"rate": "10/min", "burst": 2}}}),
    )
    .await;
    assert_eq!(changed.status(), 200);
    let answer = document(&app, "news-api").await;
    assert_ne!(answer.headers()["etag"], etag.as_str());
    let body: Value = answer.json().await.unwrap();
    assert_eq!(
        body["plans"]["free"],
        json!({"rate": {"limit": 10, "window_seconds": 60}, "burst": 2})
    );
    // market-data-api is granted by pro alone now.
    let market: Value = document(&app, "market-data-api")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(market["plans"], json!({"pro": {}}));

    // An API no plan grants, and Tessera's own scopes: 404 problems.
    for api in ["weather-api", "tessera-admin"] {
        let missing = problem(document(&app, api).await, 404).await;
        assert_eq!(missing["type"], "urn:tessera:problem:not-found");
    }
}

#[tokio::test]
async fn a_change_made_elsewhere_reaches_the_document_with_the_registry() {
    let app = spawn_app().await;
    // Written to the store directly, as another instance or the CLI would.
    let mut edits = BTreeMap::new();
    edits.insert(
        "news-api".to_owned(),
        ApiLimitEdit {
            quota: Change::Set(Quota {
                limit: 7,
                period: Period::Month,
            }),
            ..ApiLimitEdit::default()
        },
    );
    let settings = PlanSettings {
        api_limits: ApiLimitsChange::Edit(edits),
        ..PlanSettings::default()
    };
    app.registrar()
        .set_plan_with("pro", SCOPES, &settings)
        .await
        .unwrap();
    // The registry syncs every second; wait for it rather than for the clock.
    until("the registry syncs the plan change", || async {
        let body: Value = document(&app, "news-api").await.json().await.unwrap();
        body["plans"]["pro"] == json!({"quota": {"limit": 7, "period": "month"}})
    })
    .await;
}

#[tokio::test]
async fn a_limit_for_an_api_the_plan_does_not_grant_or_out_of_shape_is_refused() {
    let app = spawn_app().await;
    let (_, admin) = app.admin_token("tessera-admin").await;
    let cases = [
        (json!({"oms-api": {"rate": "5/min"}}), "api_limits.oms-api"),
        (json!({"oms-api": {}}), "api_limits.oms-api"),
        (
            json!({"news-api": {"rate": "5/fortnight"}}),
            "api_limits.news-api.rate",
        ),
        (
            json!({"news-api": {"rate": "0/min"}}),
            "api_limits.news-api.rate",
        ),
        (
            json!({"news-api": {"burst": 3}}),
            "api_limits.news-api.burst",
        ),
        (
            json!({"news-api": {"rate": "5/min", "burst": 0}}),
            "api_limits.news-api.burst",
        ),
        (
            json!({"news-api": {"quota": "10/week"}}),
            "api_limits.news-api.quota",
        ),
        (
            json!({"news-api": {"quota": "0/day"}}),
            "api_limits.news-api.quota",
        ),
    ];
    for (limits, field) in cases {
        let body = json!({"scopes": ["news-api"], "api_limits": limits});
        let refused = problem(admin_put(&app, &admin, "free", body).await, 400).await;
        assert_eq!(refused["field"], field, "{limits}");
        assert_eq!(refused["type"], "urn:tessera:problem:invalid-field");
    }
    let unknown =
        json!({"scopes": ["news-api"], "api_limits": {"news-api": {"rate": "5/min", "cost": 2}}});
    let refused = problem(admin_put(&app, &admin, "free", unknown).await, 400).await;
    assert_eq!(refused["type"], "urn:tessera:problem:invalid-body");
    assert!(
        app.store
            .plans()
            .await
            .unwrap()
            .iter()
            .all(|p| p.name != "free"),
        "nothing was written"
    );
}

#[tokio::test]
async fn an_edit_keeps_the_other_apis_limits_and_drops_those_of_apis_no_longer_granted() {
    let app = spawn_app().await;
    let rate = |count| RateLimit {
        count,
        period_secs: 60,
        burst: count,
    };
    let edit = |api: &str, edit: ApiLimitEdit| PlanSettings {
        api_limits: ApiLimitsChange::Edit([(api.to_owned(), edit)].into()),
        ..PlanSettings::default()
    };
    let set = |settings: PlanSettings, scopes: &'static str| {
        let app = &app;
        async move { app.registrar().set_plan_with("p", scopes, &settings).await }
    };
    let news = ApiLimitEdit {
        rate: Change::Set(rate(5)),
        ..ApiLimitEdit::default()
    };
    set(edit("news-api", news), "news-api oms-api")
        .await
        .unwrap();
    let oms = ApiLimitEdit {
        rate: Change::Set(rate(9)),
        burst: Some(3),
        ..ApiLimitEdit::default()
    };
    let plan = set(edit("oms-api", oms), "news-api oms-api").await.unwrap();
    assert_eq!(plan.api_limits["news-api"].rate, Some(rate(5)));
    assert_eq!(plan.api_limits["oms-api"].rate.unwrap().burst, 3);
    // A burst alone changes the rate kept.
    let burst = ApiLimitEdit {
        burst: Some(2),
        ..ApiLimitEdit::default()
    };
    let plan = set(edit("news-api", burst), "news-api oms-api")
        .await
        .unwrap();
    assert_eq!(plan.api_limits["news-api"].rate.unwrap().burst, 2);
    // Scopes that drop oms-api drop its kept limit; naming it is refused.
    let plan = set(PlanSettings::default(), "news-api").await.unwrap();
    assert!(!plan.api_limits.contains_key("oms-api"));
    let refused = set(edit("oms-api", oms), "news-api").await.unwrap_err();
    assert!(refused.to_string().contains("oms-api"), "{refused}");
    // Clearing the last part removes the API's entry.
    let clear = ApiLimitEdit {
        rate: Change::Clear,
        ..ApiLimitEdit::default()
    };
    let plan = set(edit("news-api", clear), "news-api").await.unwrap();
    assert!(plan.api_limits.is_empty());
}

#[tokio::test]
async fn a_token_names_its_clients_plan_and_the_next_one_a_new_plan() {
    let app = spawn_app().await;
    let (id, secret) = app.client().await;
    let token = |body: Value| body["access_token"].as_str().unwrap().to_owned();
    let body: Value = app
        .token(&id, &secret, "grant_type=client_credentials&scope=news-api")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(claims_of(&token(body))["plan"], "pro");

    app.registrar()
        .set_plan("partner", "news-api", None)
        .await
        .unwrap();
    let mut client = app.store.client(&id).await.unwrap().unwrap();
    client.plan = "partner".into();
    app.store.update_client(&client).await.unwrap();
    app.sync().await;
    let body: Value = app
        .token(&id, &secret, "grant_type=client_credentials&scope=news-api")
        .await
        .json()
        .await
        .unwrap();
    let claims = claims_of(&token(body));
    assert_eq!(claims["plan"], "partner");
    // The verify kit's type reads it.
    let typed: tessera_proto::AccessTokenClaims = serde_json::from_value(claims).unwrap();
    assert_eq!(typed.plan.as_deref(), Some("partner"));
}

/// A client of plan `metering` (scope `tessera-usage`) and a token for it.
async fn usage_token(app: &TestApp) -> String {
    app.registrar()
        .set_plan("metering", "tessera-usage", None)
        .await
        .unwrap();
    let (id, secret) = app
        .client_on("metering", AuthMethod::ClientSecretBasic)
        .await;
    let answer = app
        .token(
            &id,
            &secret,
            "grant_type=client_credentials&scope=tessera-usage",
        )
        .await;
    assert_eq!(answer.status(), 200);
    let body: Value = answer.json().await.unwrap();
    body["access_token"].as_str().unwrap().to_owned()
}

async fn report(app: &TestApp, token: Option<&str>, body: &Value) -> Response {
    let mut request = app.http.post(app.url("/api-usage")).json(body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    request.send().await.unwrap()
}

#[tokio::test]
async fn reported_usage_counts_once_per_batch_and_shows_beside_token_requests() {
    let app = spawn_app().await;
    let (id, secret) = app.client().await;
    assert_eq!(
        app.token(&id, &secret, "grant_type=client_credentials&scope=news-api")
            .await
            .status(),
        200
    );
    app.state.housekeeping().await;
    let reporter = usage_token(&app).await;
    // The usage scope names no API: its token is for the issuer itself.
    assert_eq!(claims_of(&reporter)["aud"], json!([app.base.clone()]));
    let today = tessera_proto::clock::utc_day(app.clock.now());
    let batch = json!({"batch": "b-1", "api": "news-api", "counts": [
        {"day": today, "client_id": id.as_str(), "requests": 120, "refused": 3}]});
    for _ in 0..2 {
        assert_eq!(report(&app, Some(&reporter), &batch).await.status(), 204);
    }
    let more = json!({"batch": "b-2", "api": "market-data-api", "counts": [
        {"day": today, "client_id": id.as_str(), "requests": 4, "refused": 0},
        {"day": "2026-01-01", "client_id": id.as_str(), "requests": 1, "refused": 1}]});
    assert_eq!(report(&app, Some(&reporter), &more).await.status(), 204);

    let (_, admin) = app.admin_token("tessera-admin-read").await;
    let usage: Value = app
        .http
        .get(app.url(&format!("/admin/v1/clients/{id}/usage")))
        .bearer_auth(&admin)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let days = usage["days"].as_array().unwrap();
    assert_eq!(
        days[0],
        json!({"day": "2026-01-01", "issued": 0, "refused": 0,
               "apis": {"market-data-api": {"requests": 1, "refused": 1}}})
    );
    let last = days.last().unwrap();
    assert_eq!(last["day"], today.as_str());
    assert_eq!(last["issued"], 1);
    assert_eq!(
        last["apis"],
        json!({"news-api": {"requests": 120, "refused": 3},
               "market-data-api": {"requests": 4, "refused": 0}})
    );
    // The verify kit's batches of 1,000 rows are taken whole; a body past 1 MiB is a 413.
    let rows: Vec<Value> = (0..1000)
        .map(|i| {
            json!({"day": "2026-02-01", "client_id": format!("tc_{i:040}"),
                        "requests": 1, "refused": 0})
        })
        .collect();
    let big = json!({"batch": "b-3", "api": "news-api", "counts": rows});
    assert_eq!(report(&app, Some(&reporter), &big).await.status(), 204);
    let too_big = json!({"batch": "b-4", "api": "news-api", "counts": [],
                         "padding": "x".repeat(1 << 20)});
    problem(report(&app, Some(&reporter), &too_big).await, 413).await;
    let plan: Value = app
        .http
        .get(app.url("/admin/v1/plans/pro/usage?from=2026-02-01"))
        .bearer_auth(&admin)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(plan["days"].as_array().unwrap().len(), 1, "{plan}");
    assert_eq!(plan["days"][0]["apis"]["news-api"]["requests"], 120);
}

#[tokio::test]
async fn a_usage_report_needs_a_token_of_this_issuer_with_the_usage_scope() {
    let app = spawn_app().await;
    let body = json!({"batch": "b", "api": "news-api", "counts": []});

    // No token: 401 and the bare challenge (RFC 6750 section 3.1).
    let none = report(&app, None, &body).await;
    assert_eq!(none.status(), 401);
    let challenge = none.headers()["www-authenticate"].to_str().unwrap();
    assert!(
        challenge.starts_with("Bearer realm=\"tessera-usage\""),
        "{challenge}"
    );
    assert!(!challenge.contains("error="), "{challenge}");

    // A token that is not one: 401 invalid_token.
    let bad = report(&app, Some("not.a.token"), &body).await;
    assert_eq!(bad.status(), 401);
    let challenge = bad.headers()["www-authenticate"].to_str().unwrap();
    assert!(challenge.contains("error=\"invalid_token\""), "{challenge}");

    // A token of this issuer for an API, not for the issuer: 401 invalid_token too.
    let (id, secret) = app.client().await;
    let body_of: Value = app
        .token(&id, &secret, "grant_type=client_credentials&scope=news-api")
        .await
        .json()
        .await
        .unwrap();
    let api_token = body_of["access_token"].as_str().unwrap();
    let wrong = report(&app, Some(api_token), &body).await;
    assert_eq!(wrong.status(), 401);

    // A token for the issuer without the usage scope: 403 insufficient_scope.
    let (_, reader) = app.admin_token("tessera-admin-read").await;
    let forbidden = report(&app, Some(&reader), &body).await;
    assert_eq!(forbidden.status(), 403);
    let challenge = forbidden.headers()["www-authenticate"].to_str().unwrap();
    assert!(
        challenge.contains("error=\"insufficient_scope\""),
        "{challenge}"
    );
    assert!(challenge.contains("scope=\"tessera-usage\""), "{challenge}");

    // The scope taken off the plan: its tokens stop counting at once.
    let reporter = usage_token(&app).await;
    assert_eq!(report(&app, Some(&reporter), &body).await.status(), 204);
    app.registrar()
        .set_plan("metering", "tessera-admin-read", None)
        .await
        .unwrap();
    app.sync().await;
    assert_eq!(report(&app, Some(&reporter), &body).await.status(), 403);
}

#[tokio::test]
async fn a_usage_report_out_of_shape_is_a_400_problem_naming_the_field() {
    let app = spawn_app().await;
    let reporter = usage_token(&app).await;
    let count = |day: &str, client: &str| {
        json!({"batch": "b", "api": "news-api", "counts": [
            {"day": "2026-11-27", "client_id": "tc_ok", "requests": 1, "refused": 0},
            {"day": day, "client_id": client, "requests": 1, "refused": 0}]})
    };
    let cases = [
        (
            json!({"batch": "", "api": "news-api", "counts": []}),
            Some("batch"),
        ),
        (
            json!({"batch": "a b", "api": "news-api", "counts": []}),
            Some("batch"),
        ),
        (
            json!({"batch": "b", "api": "news api", "counts": []}),
            Some("api"),
        ),
        (
            json!({"batch": "b", "api": "tessera-usage", "counts": []}),
            Some("api"),
        ),
        (count("2026-13-01", "tc_ok"), Some("counts[1].day")),
        (count("2026-11-27", ""), Some("counts[1].client_id")),
        (json!({"batch": "b", "api": "news-api"}), None),
        (
            json!({"batch": "b", "api": "news-api", "counts": [{"day": "2026-11-27"}]}),
            None,
        ),
        (json!([1, 2]), None),
    ];
    for (body, field) in cases {
        let refused = problem(report(&app, Some(&reporter), &body).await, 400).await;
        assert_eq!(refused["field"].as_str(), field, "{body}");
    }
    let not_json = app
        .http
        .post(app.url("/api-usage"))
        .bearer_auth(&reporter)
        .header("content-type", "text/plain")
        .body("{}")
        .send()
        .await
        .unwrap();
    problem(not_json, 400).await;
    // Nothing of the refused reports was counted, not even their valid rows.
    let ok = tessera_proto::ClientId::parse("tc_ok").unwrap();
    assert!(app.store.api_usage(&ok).await.unwrap().is_empty());
}
