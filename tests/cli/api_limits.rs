//! Issue 27 at the command line: `plan set --api-rate/--api-burst/--api-quota` on the
//! database and through `--admin-url`, what `plan list` prints of them, the refusal of a
//! limit for an API the plan does not grant (exit 2), and `client usage` showing the API
//! requests an API reported beside the token requests.

use serde_json::json;

use super::*;

#[test]
fn plan_set_limits_api_requests_and_plan_list_shows_them() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let scopes = "news-api market-data-api";
    ok(
        d,
        &[
            "plan",
            "set",
            "free",
            "--scopes",
            scopes,
            "--api-rate",
            "news-api=5/min",
            "--api-quota",
            "news-api=1000/day",
            "--api-quota",
            "market-data-api=25/month",
        ],
    );
    let free = &plans(d)["free"];
    assert_eq!(
        free["api_limits"],
        json!({"news-api": {"rate": "5/min", "burst": 5, "quota": "1000/day"},
               "market-data-api": {"quota": "25/month"}})
    );
    let text = ok(d, &["plan", "list"]);
    assert!(
        text.contains("news-api 5/min (burst 5) and 1000/day")
            && text.contains("market-data-api 25/month"),
        "{text}"
    );

    // A burst alone changes the kept rate; limits not named are kept; none removes one.
    ok(
        d,
        &[
            "plan",
            "set",
            "free",
            "--scopes",
            scopes,
            "--api-burst",
            "news-api=2",
        ],
    );
    ok(
        d,
        &[
            "plan",
            "set",
            "free",
            "--scopes",
            scopes,
            "--api-quota",
            "market-data-api=none",
        ],
    );
    assert_eq!(
        plans(d)["free"]["api_limits"],
        json!({"news-api": {"rate": "5/min", "burst": 2, "quota": "1000/day"}})
    );

    // A limit for an API the plan does not grant: a usage error, and nothing written.
    let err = usage_error(
        d,
        &[],
        &[
            "plan",
            "set",
            "free",
            "--scopes",
            scopes,
            "--api-rate",
            "oms-api=5/min",
        ],
    );
    assert!(err.contains("oms-api") && err.contains("--scopes"), "{err}");
    // Values out of shape, refused by the parser.
    for (flag, value) in [
        ("--api-rate", "news-api=5/week"),
        ("--api-rate", "news-api"),
        ("--api-burst", "news-api=0"),
        ("--api-quota", "news-api=10/hour"),
        ("--api-quota", "=10/day"),
    ] {
        let err = usage_error(
            d,
            &[],
            &["plan", "set", "free", "--scopes", scopes, flag, value],
        );
        assert!(err.contains(flag), "{flag} {value}: {err}");
    }
    // A burst with no rate to go with.
    let err = fails(
        d,
        &[
            "plan",
            "set",
            "free",
            "--scopes",
            scopes,
            "--api-burst",
            "market-data-api=3",
        ],
    );
    assert!(err.contains("a burst needs a rate"), "{err}");
    assert_eq!(
        plans(d)["free"]["api_limits"],
        json!({"news-api": {"rate": "5/min", "burst": 2, "quota": "1000/day"}})
    );
}

/// Through `--admin-url` the same commands print the same plan, and an API's usage report
/// shows in `client usage`, remote and on the database.
#[tokio::test]
async fn limits_through_the_admin_api_and_reported_usage_in_client_usage() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(d, &["plan", "set", "admin", "--scopes", "tessera-admin"]);
    let (admin_id, admin_secret) = create_client(d, "admin");
    ok(d, &["plan", "set", "metering", "--scopes", "tessera-usage"]);
    let (meter_id, meter_secret) = create_client(d, "metering");
    ok(d, &["plan", "set", "free", "--scopes", "news-api"]);
    let (id, secret) = create_client(d, "free");
    let server = serve(d, &[]);
    let base = server.base.clone();
    let elsewhere = tempfile::tempdir().unwrap();
    let r = elsewhere.path();
    let env = [
        ("TESSERA_ADMIN_URL", base.as_str()),
        ("TESSERA_CLIENT_ID", admin_id.as_str()),
        ("TESSERA_CLIENT_SECRET", admin_secret.as_str()),
    ];
    let set = [
        "plan",
        "set",
        "free",
        "--scopes",
        "news-api",
        "--api-rate",
        "news-api=5/min",
        "--api-quota",
        "news-api=100/month",
        "--json",
    ];
    let plan: serde_json::Value = serde_json::from_str(&ok_with(r, &env, &set)).unwrap();
    assert_eq!(
        plan["api_limits"],
        json!({"news-api": {"rate": "5/min", "burst": 5, "quota": "100/month"}})
    );
    let burst = [
        "plan",
        "set",
        "free",
        "--scopes",
        "news-api",
        "--api-burst",
        "news-api=9",
    ];
    ok_with(r, &env, &burst);
    let document: serde_json::Value = reqwest::get(format!("{base}/api-limits/news-api"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        document["plans"]["free"],
        json!({"rate": {"limit": 5, "window_seconds": 60}, "burst": 9,
               "quota": {"limit": 100, "period": "month"}})
    );
    let refused = [
        "plan",
        "set",
        "free",
        "--scopes",
        "news-api",
        "--api-rate",
        "oms-api=1/sec",
    ];
    let err = usage_error(r, &env, &refused);
    assert!(err.contains("oms-api"), "{err}");

    // A token request, and the API's report of 120 requests to news-api (sent twice).
    access_token(token(&base, &id, &secret, "news-api").await).await;
    let meter = access_token(token(&base, &meter_id, &meter_secret, "tessera-usage").await).await;
    let today = tessera_server::usage::utc_day(tessera_server::clock::Clock::system().now());
    let report = json!({"batch": "cli-1", "api": "news-api", "counts": [
        {"day": today, "client_id": id, "requests": 120, "refused": 3}]});
    for _ in 0..2 {
        let answer = reqwest::Client::new()
            .post(format!("{base}/api-usage"))
            .bearer_auth(&meter)
            .json(&report)
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 204);
    }
    let remote: Vec<serde_json::Value> =
        serde_json::from_str(&ok_with(r, &env, &["client", "usage", &id, "--json"])).unwrap();
    assert_eq!(
        remote.last().unwrap()["apis"],
        json!({"news-api": {"requests": 120, "refused": 3}})
    );
    let status = server.terminate().await;
    assert!(status.success(), "{status:?}");
    let local: Vec<serde_json::Value> =
        serde_json::from_str(&ok(d, &["client", "usage", &id, "--json"])).unwrap();
    assert_eq!(local.len(), 1, "{local:?}");
    assert_eq!(local[0]["issued"], 1);
    assert_eq!(local[0]["apis"]["news-api"]["requests"], 120);
    let table = ok(d, &["client", "usage", &id]);
    assert!(table.contains("API REQUESTS"), "{table}");
    assert!(
        table
            .lines()
            .any(|l| l.starts_with(&today) && l.ends_with("news-api 120/3")),
        "{table}"
    );
}
