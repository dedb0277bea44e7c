//! Issue 28 at the command line: `tessera org` on the database and through `--admin-url`,
//! its refusals, and the clients of an organization.

use serde_json::Value;

use super::*;

fn json(out: &str) -> Value {
    serde_json::from_str(out.trim()).unwrap()
}

#[test]
fn org_commands_on_the_database() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(d, &["plan", "set", "basic", "--scopes", "news-api"]);
    ok(d, &["plan", "set", "pro", "--scopes", "news-api oms-api"]);

    let created = json(&ok(
        d,
        &[
            "org",
            "create",
            "acme",
            "--plan",
            "basic",
            "--name",
            "Acme Trading",
            "--json",
        ],
    ));
    assert_eq!(created["id"], "acme");
    assert_eq!(created["name"], "Acme Trading");
    assert_eq!(created["plan"], "basic");
    assert_eq!(created["enabled"], true);
    assert_eq!(created["clients"], 0);
    let text = ok(d, &["org", "create", "globex", "--plan", "pro"]);
    assert!(text.contains("organization globex"), "{text}");

    // Refusals: a duplicate, an unknown plan, a bad id; nothing is written by them.
    let err = fails(d, &["org", "create", "acme", "--plan", "basic"]);
    assert!(err.contains("already exists"), "{err}");
    let err = fails(d, &["org", "create", "initech", "--plan", "nope"]);
    assert!(err.contains("nope"), "{err}");
    let err = fails(d, &["org", "create", "bad id", "--plan", "basic"]);
    assert!(err.contains("organization id"), "{err}");
    let list: Vec<Value> = serde_json::from_str(&ok(d, &["org", "list", "--json"])).unwrap();
    let ids: Vec<&str> = list.iter().map(|o| o["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["acme", "globex"]);
    let table = ok(d, &["org", "list"]);
    assert!(table.starts_with("ORG"), "{table}");

    let set = json(&ok(
        d,
        &[
            "org", "set", "acme", "--plan", "pro", "--name", "Acme", "--json",
        ],
    ));
    assert_eq!(
        (set["plan"].as_str(), set["name"].as_str()),
        (Some("pro"), Some("Acme"))
    );
    let err = fails(d, &["org", "set", "acme", "--plan", "nope"]);
    assert!(err.contains("nope"), "{err}");
    let err = usage_error(d, &[], &["org", "set", "acme"]);
    assert!(err.contains("--plan or --name"), "{err}");
    let disabled = json(&ok(d, &["org", "disable", "acme", "--json"]));
    assert_eq!(disabled["enabled"], false);
    let shown = json(&ok(d, &["org", "show", "acme", "--json"]));
    assert_eq!(shown["enabled"], false);
    assert_eq!(shown["plan"], "pro");
    let enabled = json(&ok(d, &["org", "enable", "acme", "--json"]));
    assert_eq!(enabled["enabled"], true);
    let err = fails(d, &["org", "show", "initech"]);
    assert!(err.contains("no organization"), "{err}");

    let err = fails(d, &["org", "delete", "initech"]);
    assert!(err.contains("no organization"), "{err}");
    let deleted = json(&ok(d, &["org", "delete", "globex", "--json"]));
    assert_eq!(deleted["id"], "globex");
    let list: Vec<Value> = serde_json::from_str(&ok(d, &["org", "list", "--json"])).unwrap();
    assert_eq!(list.len(), 1);
}

#[tokio::test]
async fn org_commands_through_the_admin_api() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(d, &["plan", "set", "admin", "--scopes", "tessera-admin"]);
    let (admin_id, admin_secret) = create_client(d, "admin");
    ok(d, &["plan", "set", "basic", "--scopes", "news-api"]);
    ok(d, &["plan", "set", "pro", "--scopes", "news-api oms-api"]);
    let server = serve(d, &[]);
    let base = server.base.clone();
    let elsewhere = tempfile::tempdir().unwrap();
    let r = elsewhere.path();
    let env = [
        ("TESSERA_ADMIN_URL", base.as_str()),
        ("TESSERA_CLIENT_ID", admin_id.as_str()),
        ("TESSERA_CLIENT_SECRET", admin_secret.as_str()),
    ];
    let created = json(&ok_with(
        r,
        &env,
        &[
            "org",
            "create",
            "acme",
            "--plan",
            "basic",
            "--name",
            "Acme Trading",
            "--json",
        ],
    ));
    assert_eq!(
        (created["id"].as_str(), created["clients"].as_u64()),
        (Some("acme"), Some(0))
    );
    let err = fails_with(r, &env, &["org", "create", "acme", "--plan", "basic"]);
    assert!(err.contains("already exists"), "{err}");
    let err = fails_with(r, &env, &["org", "create", "x", "--plan", "nope"]);
    assert!(err.contains("nope"), "{err}");
    let set = json(&ok_with(
        r,
        &env,
        &["org", "set", "acme", "--plan", "pro", "--json"],
    ));
    assert_eq!(set["plan"], "pro");
    let off = json(&ok_with(r, &env, &["org", "disable", "acme", "--json"]));
    assert_eq!(off["enabled"], false);
    let list: Vec<Value> =
        serde_json::from_str(&ok_with(r, &env, &["org", "list", "--json"])).unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0]["enabled"], false);
    let err = fails_with(r, &env, &["org", "show", "initech"]);
    assert!(err.contains("no organization"), "{err}");
    let gone = json(&ok_with(r, &env, &["org", "delete", "acme", "--json"]));
    assert_eq!(gone["id"], "acme");
    let err = fails_with(r, &env, &["org", "show", "acme"]);
    assert!(err.contains("no organization"), "{err}");
    let status = server.terminate().await;
    assert!(status.success(), "{status:?}");
    // What the API wrote is in the database.
    assert_eq!(ok(d, &["org", "list", "--json"]).trim(), "[]");
}

/// `client create --org`: the organization's plan, `--plan` refused beside it (exit 2), and
/// a running server that follows the organization's plan move and disable made on the
/// database, with `org_id` in the tokens.
#[tokio::test]
async fn clients_of_an_organization_follow_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(d, &["plan", "set", "basic", "--scopes", "news-api"]);
    ok(d, &["plan", "set", "pro", "--scopes", "news-api oms-api"]);
    ok(d, &["org", "create", "acme", "--plan", "basic"]);
    let err = usage_error(
        d,
        &[],
        &["client", "create", "--org", "acme", "--plan", "pro"],
    );
    assert!(err.contains("--plan") && err.contains("--org"), "{err}");
    let err = fails(d, &["client", "create", "--org", "ghost"]);
    assert!(err.contains("no organization"), "{err}");
    let created = json(&ok(
        d,
        &[
            "client", "create", "--org", "acme", "--name", "app", "--json",
        ],
    ));
    assert_eq!(
        (created["plan"].as_str(), created["org"].as_str()),
        (Some("basic"), Some("acme"))
    );
    let id = created["client_id"].as_str().unwrap().to_owned();
    let secret = created["client_secret"].as_str().unwrap().to_owned();
    let text = ok(d, &["client", "create", "--org", "acme", "--count", "2"]);
    assert_eq!(text.matches("org:           acme").count(), 2, "{text}");
    let shown = json(&ok(d, &["org", "show", "acme", "--json"]));
    assert_eq!(shown["clients"], 3);
    let err = fails(d, &["client", "set-plan", &id, "pro"]);
    assert!(err.contains("organization"), "{err}");
    let err = fails(d, &["org", "delete", "acme"]);
    assert!(err.contains("3 client"), "{err}");

    let server = serve(d, &[]);
    let base = server.base.clone();
    let body = access_token(token(&base, &id, &secret, "news-api").await).await;
    let claims = claims_of(&body);
    assert_eq!(
        (claims["org_id"].as_str(), claims["plan"].as_str()),
        (Some("acme"), Some("basic"))
    );
    let (status, _) = answer(token(&base, &id, &secret, "oms-api").await).await;
    assert_eq!(status, 400);

    ok(d, &["org", "set", "acme", "--plan", "pro"]);
    server.sees_changes(d, &[]).await;
    let body = access_token(token(&base, &id, &secret, "oms-api").await).await;
    assert_eq!(claims_of(&body)["plan"], "pro");

    ok(d, &["org", "disable", "acme"]);
    server.sees_changes(d, &[]).await;
    let (status, body) = answer(token(&base, &id, &secret, "news-api").await).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (401, Some("invalid_client")),
        "{body}"
    );
    ok(d, &["org", "enable", "acme"]);
    server.sees_changes(d, &[]).await;
    access_token(token(&base, &id, &secret, "news-api").await).await;

    let gone = json(&ok(
        d,
        &["org", "delete", "acme", "--with-clients", "--json"],
    ));
    assert_eq!(gone["clients"], 3);
    server.sees_changes(d, &[]).await;
    let (status, _) = answer(token(&base, &id, &secret, "news-api").await).await;
    assert_eq!(status, 401);
    let clients: Vec<Value> = serde_json::from_str(&ok(d, &["client", "list", "--json"])).unwrap();
    assert!(clients.is_empty(), "{clients:?}");
}

/// `org usage`: each client's token and API requests per day and the total, on the
/// database and through the admin API, and the month's CSV for billing.
#[tokio::test]
async fn org_usage_adds_up_per_client_and_in_total() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(d, &["plan", "set", "admin", "--scopes", "tessera-admin"]);
    let (admin_id, admin_secret) = create_client(d, "admin");
    ok(d, &["plan", "set", "metering", "--scopes", "tessera-usage"]);
    let (meter_id, meter_secret) = create_client(d, "metering");
    ok(d, &["plan", "set", "basic", "--scopes", "news-api"]);
    ok(d, &["org", "create", "acme", "--plan", "basic"]);
    let mut members = Vec::new();
    for name in ["billing", "reports, daily"] {
        let created = json(&ok(
            d,
            &[
                "client", "create", "--org", "acme", "--name", name, "--json",
            ],
        ));
        members.push((
            created["client_id"].as_str().unwrap().to_owned(),
            created["client_secret"].as_str().unwrap().to_owned(),
        ));
    }
    let (solo, solo_secret) = create_client(d, "basic");
    let server = serve(d, &[]);
    let base = server.base.clone();
    for _ in 0..2 {
        access_token(token(&base, &members[0].0, &members[0].1, "news-api").await).await;
    }
    access_token(token(&base, &members[1].0, &members[1].1, "news-api").await).await;
    access_token(token(&base, &solo, &solo_secret, "news-api").await).await;
    let meter = access_token(token(&base, &meter_id, &meter_secret, "tessera-usage").await).await;
    let today = tessera_server::usage::utc_day(tessera_server::clock::Clock::system().now());
    let report = serde_json::json!({"batch": "org-1", "api": "news-api", "counts": [
        {"day": today, "client_id": members[0].0, "requests": 40, "refused": 2},
        {"day": today, "client_id": members[1].0, "requests": 10, "refused": 0},
        {"day": today, "client_id": solo, "requests": 99, "refused": 9}]});
    let answer = reqwest::Client::new()
        .post(format!("{base}/api-usage"))
        .bearer_auth(&meter)
        .json(&report)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 204);
    let status = server.terminate().await;
    assert!(status.success(), "{status:?}");

    let usage = json(&ok(d, &["org", "usage", "acme", "--json"]));
    assert_eq!(usage["clients"].as_array().unwrap().len(), 2, "{usage}");
    assert_eq!(usage["total"][0]["day"], today.as_str());
    assert_eq!(usage["total"][0]["issued"], 3);
    assert_eq!(usage["total"][0]["apis"]["news-api"]["requests"], 50);
    assert_eq!(usage["total"][0]["apis"]["news-api"]["refused"], 2);
    let month = &today[..7];
    let csv = ok(d, &["org", "usage", "acme", "--month", month, "--csv"]);
    let mut lines: Vec<&str> = csv.lines().collect();
    assert_eq!(
        lines.remove(0),
        "day,client_id,client_name,tokens_issued,tokens_refused,api_requests,api_refused"
    );
    let mut expected = vec![
        format!("{today},{},billing,2,0,40,2", members[0].0),
        format!("{today},{},\"reports, daily\",1,0,10,0", members[1].0),
    ];
    expected.sort();
    expected.push(format!("{today},total,,3,0,50,2"));
    assert_eq!(lines, expected);
    let none = ok(d, &["org", "usage", "acme", "--month", "1999-01", "--csv"]);
    assert_eq!(none.lines().count(), 1, "{none}");
    let err = usage_error(d, &[], &["org", "usage", "acme", "--month", "2026-13"]);
    assert!(err.contains("YYYY-MM"), "{err}");
    let text = ok(d, &["org", "usage", "acme"]);
    assert!(text.contains("total"), "{text}");

    // Through the admin API: the same numbers.
    let server = serve(d, &[]);
    let env = [
        ("TESSERA_ADMIN_URL", server.base.as_str()),
        ("TESSERA_CLIENT_ID", admin_id.as_str()),
        ("TESSERA_CLIENT_SECRET", admin_secret.as_str()),
    ];
    let elsewhere = tempfile::tempdir().unwrap();
    let remote = json(&ok_with(
        elsewhere.path(),
        &env,
        &["org", "usage", "acme", "--month", month, "--json"],
    ));
    assert_eq!(remote["total"], usage["total"]);
    assert_eq!(remote["from"], format!("{month}-01"));
    let err = fails_with(elsewhere.path(), &env, &["org", "usage", "initech"]);
    assert!(err.contains("no organization"), "{err}");
}
