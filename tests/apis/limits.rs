//! Plan limits at the example APIs (issue 27 item 6): a plan set through Tessera's admin API,
//! enforced by `protected_apis` with its fields and 429, and the requests reported back to
//! Tessera when the APIs stop, read from the client's usage.

use serde_json::{json, Value};
use tessera_store::AuthMethod;

use super::{apis_with, get, issuer};

#[tokio::test]
async fn the_example_apis_enforce_a_plan_and_report_usage_to_tessera() {
    let issuer = issuer(tessera_proto::Algorithm::EdDSA).await;
    let app = &issuer.app;
    let (_, admin) = app.admin_token("tessera-admin").await;
    let free = json!({"scopes": ["news-api", "market-data-api"], "api_limits": {
        "news-api": {"rate": "5/min", "quota": "1000/day"}}});
    let created = app
        .http
        .put(app.url("/admin/v1/plans/free"))
        .bearer_auth(&admin)
        .json(&free)
        .send()
        .await
        .unwrap();
    assert!(created.status().is_success());
    app.registrar()
        .set_plan("metering", "tessera-usage", None)
        .await
        .unwrap();
    let (meter, meter_secret) = app
        .client_on("metering", AuthMethod::ClientSecretBasic)
        .await;
    let mut apis = apis_with(
        &issuer.base,
        &[
            "--usage-client-id",
            meter.as_str(),
            "--usage-client-secret",
            meter_secret.expose(),
        ],
    )
    .await;

    let (id, secret) = issuer.client("free").await;
    let body: Value = issuer
        .token_response(&id, &secret, "news-api market-data-api")
        .await
        .json()
        .await
        .unwrap();
    let token = body["access_token"].as_str().unwrap();
    let news = format!("{apis}/news/v1/headlines");
    for n in 1..=5 {
        let answer = get(news.clone(), Some(token)).await;
        assert_eq!(answer.status(), 200, "request {n}");
        assert_eq!(
            answer.headers()["ratelimit-policy"],
            "\"free-rate\";q=5;w=60, \"free-quota\";q=1000;w=86400"
        );
        let left = answer.headers()["ratelimit"].to_str().unwrap().to_owned();
        assert!(
            left.starts_with(&format!("\"free-rate\";r={};t=", 5 - n)),
            "{left}"
        );
    }
    let refused = get(news.clone(), Some(token)).await;
    assert_eq!(refused.status(), 429);
    let wait: u64 = refused.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=12).contains(&wait), "{wait}");
    assert!(refused.headers().get("www-authenticate").is_none());
    let problem: Value = refused.json().await.unwrap();
    assert_eq!(
        problem["type"],
        "https://iana.org/assignments/http-problem-types#quota-exceeded"
    );
    assert_eq!(problem["violated-policies"], json!(["free-rate"]));
    // market-data-api has no limits on this plan: served, without fields.
    let quotes = get(format!("{apis}/market-data/v1/quotes"), Some(token)).await;
    assert_eq!(quotes.status(), 200);
    assert!(quotes.headers().get("ratelimit").is_none());

    // Stopped with Ctrl-C, the APIs report what they counted.
    let pid = apis._process.id().unwrap().to_string();
    let sent = std::process::Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap();
    assert!(sent.success());
    assert!(apis._process.wait().await.unwrap().success());
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
    let today = tessera_proto::clock::utc_day(tessera_proto::Clock::system().now());
    let day = usage["days"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["day"] == today.as_str())
        .unwrap_or_else(|| panic!("no {today} in {usage}"));
    assert_eq!(
        day["apis"],
        json!({"news-api": {"requests": 5, "refused": 1},
               "market-data-api": {"requests": 1, "refused": 0}}),
        "{usage}"
    );
}
