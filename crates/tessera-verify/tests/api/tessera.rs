//! Plan limits against the real Tessera (tessera-testkit, port 0): plans set through the
//! admin API, tokens with their `plan` claim from the token endpoint, the limits document
//! from `GET /api-limits/{api}`, and usage reported to `POST /api-usage` read back from the
//! admin API's client usage (what `tessera client usage` shows). Time from the server's
//! clock, which the test sets and the verifier reads too.

use std::time::Duration;

use serde_json::{json, Value};
use tessera_proto::{ClientId, ClientSecret, ScopeSet};
use tessera_store::AuthMethod;
use tessera_testkit::TestApp;
use tessera_verify::Verifier;

use crate::limits::{api, call, member, members};

/// Creates or replaces `plan` through the admin API.
async fn put_plan(app: &TestApp, admin: &str, plan: &str, body: Value) {
    let answer = app
        .http
        .put(app.url(&format!("/admin/v1/plans/{plan}")))
        .bearer_auth(admin)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert!(
        answer.status().is_success(),
        "{}",
        answer.text().await.unwrap()
    );
}

/// A token for a new client on `plan` for `news-api`, and the client.
async fn token(app: &TestApp, plan: &str) -> (ClientId, String) {
    let (id, secret) = app.client_on(plan, AuthMethod::ClientSecretBasic).await;
    let answer = app
        .token(&id, &secret, "grant_type=client_credentials&scope=news-api")
        .await;
    assert_eq!(answer.status(), 200);
    let body: Value = answer.json().await.unwrap();
    (id, body["access_token"].as_str().unwrap().to_owned())
}

/// The API's own client, on a plan granting `tessera-usage`.
async fn metering_client(app: &TestApp) -> (ClientId, ClientSecret) {
    app.registrar()
        .set_plan("metering", "tessera-usage", None)
        .await
        .unwrap();
    app.client_on("metering", AuthMethod::ClientSecretBasic)
        .await
}

#[tokio::test]
async fn tessera_s_plans_are_enforced_at_the_api_and_metered_back() {
    let app = tessera_testkit::spawn_app().await;
    let (_, admin) = app.admin_token("tessera-admin").await;
    put_plan(
        &app,
        &admin,
        "free",
        json!({"scopes": ["news-api"], "api_limits": {
            "news-api": {"rate": "5/min", "quota": "1000/day"}}}),
    )
    .await;
    let (meter_id, meter_secret) = metering_client(&app).await;
    let reporter = tessera_client::TokenClient::builder()
        .environment(tessera_client::Environment::Production)
        .production_url(app.base.parse().unwrap())
        .client_id(meter_id)
        .client_secret(meter_secret)
        .scopes(ScopeSet::parse("tessera-usage").unwrap())
        .clock(app.clock.clone())
        .build()
        .unwrap();
    let verifier = Verifier::builder(&app.base, "news-api")
        .plan_limits()
        .report_usage(reporter)
        .usage_interval(Duration::from_secs(3600))
        .clock(app.clock.clone())
        .build()
        .unwrap();
    let url = api(verifier.clone()).await;

    // 5 a minute, then 429 with Retry-After and the fields; another client is unaffected.
    let (alice, alice_token) = token(&app, "free").await;
    for n in 1..=5 {
        let answer = call(&url, &alice_token).await;
        assert_eq!(answer.status(), 200, "request {n}");
        assert_eq!(
            members(&answer, "ratelimit-policy")[0],
            member("free-rate", &[("q", 5), ("w", 60)])
        );
    }
    let refused = call(&url, &alice_token).await;
    assert_eq!(refused.status(), 429);
    assert_eq!(refused.headers()["retry-after"], "12");
    let problem: Value = refused.json().await.unwrap();
    assert_eq!(problem["violated-policies"], json!(["free-rate"]));
    let (_, bob_token) = token(&app, "free").await;
    assert_eq!(call(&url, &bob_token).await.status(), 200);

    // The operator cuts free to 1/min: enforced within 60 s, with the same token.
    put_plan(
        &app,
        &admin,
        "free",
        json!({"scopes": ["news-api"], "api_limits": {"news-api": {"rate": "1/min"}}}),
    )
    .await;
    app.sync().await;
    app.clock.advance(Duration::from_secs(60));
    call(&url, &bob_token).await;
    tessera_testkit::until("the new limits fetched", || async {
        verifier.limits_health().unwrap().document_fetches >= 2
    })
    .await;
    app.clock.advance(Duration::from_secs(60));
    let answer = call(&url, &bob_token).await;
    assert_eq!(answer.status(), 200);
    assert_eq!(
        members(&answer, "ratelimit-policy"),
        [member("free-rate", &[("q", 1), ("w", 60)])]
    );
    assert_eq!(call(&url, &bob_token).await.status(), 429);

    // The counts reach Tessera and show in the client's usage, per API.
    verifier.flush_usage().await.unwrap();
    let usage: Value = app
        .http
        .get(app.url(&format!("/admin/v1/clients/{alice}/usage")))
        .bearer_auth(&admin)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let today = tessera_proto::clock::utc_day(app.clock.now());
    let day = usage["days"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["day"] == today.as_str())
        .unwrap_or_else(|| panic!("no {today} in {usage}"));
    assert_eq!(
        day["apis"]["news-api"],
        json!({"requests": 5, "refused": 1}),
        "{usage}"
    );
}

#[tokio::test]
async fn a_tessera_quota_resets_at_midnight_utc() {
    let app = tessera_testkit::spawn_app().await;
    // 23:59:50 UTC of today.
    let now = app.clock.now();
    app.clock.set(now - now.rem_euclid(86_400) + 86_390);
    let (_, admin) = app.admin_token("tessera-admin").await;
    put_plan(
        &app,
        &admin,
        "trial",
        json!({"scopes": ["news-api"], "api_limits": {"news-api": {"quota": "2/day"}}}),
    )
    .await;
    let verifier = Verifier::builder(&app.base, "news-api")
        .plan_limits()
        .clock(app.clock.clone())
        .build()
        .unwrap();
    let url = api(verifier).await;
    let (_, token) = token(&app, "trial").await;
    assert_eq!(call(&url, &token).await.status(), 200);
    assert_eq!(call(&url, &token).await.status(), 200);
    let refused = call(&url, &token).await;
    assert_eq!(refused.status(), 429);
    assert_eq!(refused.headers()["retry-after"], "10");
    app.clock.advance(Duration::from_secs(10));
    let answer = call(&url, &token).await;
    assert_eq!(answer.status(), 200, "a new day");
    assert_eq!(
        members(&answer, "ratelimit"),
        [member("trial-quota", &[("r", 1), ("t", 86_400)])]
    );
}

/// A reporter for `news-api` on the client `id`, asking for `scope`; only the test flushes.
fn reporting_verifier(app: &TestApp, id: ClientId, secret: ClientSecret, scope: &str) -> Verifier {
    let reporter = tessera_client::TokenClient::builder()
        .environment(tessera_client::Environment::Production)
        .production_url(app.base.parse().unwrap())
        .client_id(id)
        .client_secret(secret)
        .scopes(ScopeSet::parse(scope).unwrap())
        .clock(app.clock.clone())
        .build()
        .unwrap();
    Verifier::builder(&app.base, "news-api")
        .report_usage(reporter)
        .usage_interval(Duration::from_secs(3600))
        .clock(app.clock.clone())
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_report_tessera_refuses_for_good_is_dropped_not_sent_forever() {
    let app = tessera_testkit::spawn_app().await;
    app.registrar()
        .set_plan("free", "news-api", None)
        .await
        .unwrap();
    // The API's own client was put on a plan granting another of Tessera's own scopes, not
    // `tessera-usage`: Tessera answers 403 to every report of it, however often it comes.
    app.registrar()
        .set_plan("operators", "tessera-admin-read", None)
        .await
        .unwrap();
    let (id, secret) = app
        .client_on("operators", AuthMethod::ClientSecretBasic)
        .await;
    let verifier = reporting_verifier(&app, id, secret, "tessera-admin-read");
    let url = api(verifier.clone()).await;
    let (_, alice) = token(&app, "free").await;
    assert_eq!(call(&url, &alice).await.status(), 200);

    let refused = verifier.flush_usage().await.unwrap_err();
    assert!(
        matches!(refused, tessera_verify::limits::UsageError::Refused(403)),
        "{refused:?}"
    );
    let health = verifier.limits_health().unwrap();
    assert_eq!(
        (
            health.usage_batches_refused,
            health.usage_failures,
            health.usage_pending,
            health.usage_batches_sent
        ),
        (1, 0, 0, 0),
        "dropped at once, not kept"
    );
    // Nothing is sent again; later counts go in a batch of their own (refused too).
    verifier.flush_usage().await.unwrap();
    assert_eq!(verifier.limits_health().unwrap().usage_batches_refused, 1);
    assert_eq!(call(&url, &alice).await.status(), 200);
    assert!(verifier.flush_usage().await.is_err());
    assert_eq!(verifier.limits_health().unwrap().usage_batches_refused, 2);
}

#[tokio::test]
async fn a_report_that_cannot_reach_tessera_is_kept_for_six_days_then_dropped() {
    let mut app = tessera_testkit::spawn_app().await;
    app.registrar()
        .set_plan("free", "news-api", None)
        .await
        .unwrap();
    let (meter_id, meter_secret) = metering_client(&app).await;
    let verifier = reporting_verifier(&app, meter_id, meter_secret, "tessera-usage");
    let url = api(verifier.clone()).await;
    let (_, alice) = token(&app, "free").await;
    assert_eq!(call(&url, &alice).await.status(), 200);

    // Tessera is gone: no answer at all. The batch is kept and sent again...
    app.stop().await.unwrap();
    assert!(verifier.flush_usage().await.is_err());
    app.clock
        .advance(tessera_verify::limits::USAGE_RETRY_FOR - Duration::from_secs(1));
    assert!(verifier.flush_usage().await.is_err());
    let health = verifier.limits_health().unwrap();
    assert_eq!(
        (
            health.usage_pending,
            health.usage_failures,
            health.usage_batches_expired
        ),
        (1, 2, 0)
    );
    // ...until six days after its first attempt, under the seven Tessera remembers its id.
    app.clock.advance(Duration::from_secs(1));
    assert!(verifier.flush_usage().await.is_err());
    let health = verifier.limits_health().unwrap();
    assert_eq!(
        (
            health.usage_pending,
            health.usage_batches_expired,
            health.usage_batches_refused
        ),
        (0, 1, 0)
    );
}
