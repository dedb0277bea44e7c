//! The admin commands on the database: what they refuse and write nothing for, what `plan set`
//! stores, and each command's effect at the token endpoint of a `serve` beside them.

use super::*;

#[test]
fn admin_commands_validate_and_write_nothing_on_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(
        d,
        &[
            "plan",
            "set",
            "pro",
            "--scopes",
            "market-data-api news-api",
            "--token-ttl",
            "600",
        ],
    );
    let plans = ok(d, &["plan", "list"]);
    assert!(
        plans.contains("pro") && plans.contains("600") && plans.contains("news-api"),
        "{plans}"
    );

    assert!(fails(d, &["plan", "set", "bad plan", "--scopes", "a"]).contains("plan name"));
    assert!(fails(d, &["plan", "set", "x", "--scopes", "ok bad!scope"]).contains("scope name"));
    assert!(fails(d, &["plan", "set", "x", "--scopes", " "]).contains("empty"));
    assert!(fails(
        d,
        &["plan", "set", "x", "--scopes", "a", "--token-ttl", "0"]
    )
    .contains("TTL"));
    let names: Vec<String> =
        serde_json::from_str::<Vec<serde_json::Value>>(&ok(d, &["plan", "list", "--json"]))
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap().to_owned())
            .collect();
    assert_eq!(names, ["pro"], "no half-written plan");

    let err = fails(d, &["client", "create", "--plan", "nope"]);
    assert!(err.contains("no plan named \"nope\""), "{err}");
    assert_eq!(
        ok(d, &["client", "list", "--json"]).trim(),
        "[]",
        "no half-written client"
    );

    let (id, secret) = create_client(d, "pro");
    assert!(id.starts_with("tc_") && secret.starts_with("tcs_"));
    let show = ok(d, &["client", "show", &id, "--json"]);
    assert!(!show.contains(&secret), "the secret is shown once");
    assert!(!show.contains("hash"));
    assert!(ok(d, &["client", "list"]).contains(&id));
    ok(d, &["client", "disable", &id]);
    assert!(ok(d, &["client", "show", &id]).contains("\"enabled\": false"));
    ok(d, &["client", "enable", &id]);
    assert!(ok(d, &["client", "show", &id]).contains("\"enabled\": true"));
    let rotated: serde_json::Value =
        serde_json::from_str(ok(d, &["client", "rotate-secret", &id, "--json"]).trim()).unwrap();
    assert_ne!(rotated["client_secret"].as_str().unwrap(), secret);
    assert!(fails(d, &["client", "show", "tc_nobody"]).contains("no client"));
    assert!(fails(d, &["client", "disable", "tc_nobody"]).contains("no client"));
    ok(d, &["client", "delete", &id]);
    assert!(fails(d, &["client", "delete", &id]).contains("no client"));

    let keys =
        |args: &[&str]| -> Vec<serde_json::Value> { serde_json::from_str(&ok(d, args)).unwrap() };
    assert!(
        keys(&["keys", "list", "--json"]).is_empty(),
        "serve makes the first key"
    );
    ok(d, &["keys", "rotate", "--activate-in", "0"]);
    let before = keys(&["keys", "list", "--json"]);
    assert_eq!(before.len(), 1);
    assert_eq!(before[0]["status"], "signing");
    assert_eq!(before[0]["alg"], "EdDSA");
    let table = ok(d, &["keys", "list"]);
    let first_kid = before[0]["kid"].as_str().unwrap();
    assert!(
        table
            .lines()
            .any(|l| l.starts_with(first_kid) && l.contains("signing")),
        "{table}"
    );
    // A key announced ahead: published as next while the first goes on signing. (Two
    // keys activating in the same second would be ordered by kid, so the test gives the
    // second one a future activation rather than wait for the clock.)
    ok(
        d,
        &["keys", "rotate", "--activate-in", "600", "--alg", "ES256"],
    );
    let after = keys(&["keys", "list", "--json"]);
    assert_eq!(after.len(), 2);
    assert_eq!(after[0]["kid"], before[0]["kid"]);
    assert_eq!(after[0]["status"], "signing");
    assert_eq!(
        (&after[1]["status"], &after[1]["alg"]),
        (&"next".into(), &"ES256".into())
    );

    // The master key was generated beside the database, readable by its owner only.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(d.join("tessera.db.key"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}

#[test]
fn plan_set_stores_every_rate_unit_the_burst_and_reuse() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // The units of the README and the aliases `RateLimit::parse` takes.
    let units = [
        ("5/sec", 5, 1),
        ("5/s", 5, 1),
        ("5/second", 5, 1),
        ("7/min", 7, 60),
        ("7/m", 7, 60),
        ("7/minute", 7, 60),
        ("9/hour", 9, 3600),
        ("9/h", 9, 3600),
        ("3/day", 3, 86_400),
        ("3/d", 3, 86_400),
    ];
    for (i, (spec, _, _)) in units.iter().enumerate() {
        let name = format!("p{i}");
        ok(
            d,
            &[
                "plan",
                "set",
                &name,
                "--scopes",
                "news-api",
                "--token-rate",
                spec,
            ],
        );
    }
    let listed = plans(d);
    for (i, (spec, count, period)) in units.iter().enumerate() {
        let rate = &listed[&format!("p{i}")]["token_rate"];
        assert_eq!(rate["count"], *count, "{spec}: {rate}");
        assert_eq!(rate["period_secs"], *period, "{spec}: {rate}");
        assert_eq!(
            rate["burst"], *count,
            "{spec}: the burst defaults to the count"
        );
    }
    for bad in ["5/week", "0/min", "min", "5/", "x/sec"] {
        let err = fails(
            d,
            &[
                "plan",
                "set",
                "bad",
                "--scopes",
                "news-api",
                "--token-rate",
                bad,
            ],
        );
        assert!(err.contains("--token-rate"), "{bad}: {err}");
    }
    assert!(!plans(d).contains_key("bad"));

    // --token-burst goes with a rate, and is stored.
    fails(
        d,
        &[
            "plan",
            "set",
            "pro",
            "--scopes",
            "news-api",
            "--token-burst",
            "3",
        ],
    );
    ok(
        d,
        &[
            "plan",
            "set",
            "pro",
            "--scopes",
            "news-api",
            "--token-rate",
            "60/hour",
            "--token-burst",
            "3",
            "--reuse-percent",
            "40",
        ],
    );
    let pro = &plans(d)["pro"];
    assert_eq!(
        pro["token_rate"],
        serde_json::json!({"count": 60, "period_secs": 3600, "burst": 3})
    );
    assert_eq!(pro["reuse_percent"], 40);

    // Settings not named are kept; `none` and 0 turn them off.
    ok(d, &["plan", "set", "pro", "--scopes", "news-api oms-api"]);
    let pro = &plans(d)["pro"];
    assert_eq!(pro["token_rate"]["burst"], 3);
    assert_eq!(pro["reuse_percent"], 40);
    ok(
        d,
        &[
            "plan",
            "set",
            "pro",
            "--scopes",
            "news-api",
            "--token-rate",
            "none",
            "--reuse-percent",
            "0",
        ],
    );
    let pro = &plans(d)["pro"];
    assert!(pro["token_rate"].is_null(), "{pro}");
    assert!(pro["reuse_percent"].is_null(), "{pro}");

    // --introspect-any, its =false, and a change that names neither keeps it.
    let introspect = |d: &Path| -> serde_json::Value {
        let plans: Vec<serde_json::Value> =
            serde_json::from_str(&ok(d, &["plan", "list", "--json"])).unwrap();
        let api = plans.iter().find(|p| p["name"] == "api").unwrap();
        api["introspect_any"].clone()
    };
    ok(d, &["plan", "set", "api", "--scopes", "news-api"]);
    assert_eq!(introspect(d), false);
    ok(
        d,
        &[
            "plan",
            "set",
            "api",
            "--scopes",
            "news-api",
            "--introspect-any",
        ],
    );
    assert_eq!(introspect(d), true);
    ok(d, &["plan", "set", "api", "--scopes", "news-api oms-api"]);
    assert_eq!(introspect(d), true);
    ok(
        d,
        &[
            "plan",
            "set",
            "api",
            "--scopes",
            "news-api",
            "--introspect-any=false",
        ],
    );
    assert_eq!(introspect(d), false);

    // --dpop: stored, said, kept by a change that does not name it; another value refused.
    let dpop = |d: &Path| plans(d)["api"]["dpop"].clone();
    assert_eq!(dpop(d), "allowed");
    let said = ok(
        d,
        &[
            "plan", "set", "api", "--scopes", "news-api", "--dpop", "required",
        ],
    );
    assert!(said.contains("DPoP required"), "{said}");
    assert_eq!(dpop(d), "required");
    ok(d, &["plan", "set", "api", "--scopes", "news-api oms-api"]);
    assert_eq!(dpop(d), "required");
    ok(
        d,
        &[
            "plan", "set", "api", "--scopes", "news-api", "--dpop", "off",
        ],
    );
    assert_eq!(dpop(d), "off");
    let err = fails(
        d,
        &[
            "plan", "set", "api", "--scopes", "news-api", "--dpop", "maybe",
        ],
    );
    assert!(err.contains("--dpop"), "{err}");
    assert_eq!(dpop(d), "off");
}

#[tokio::test]
async fn client_commands_take_effect_at_the_token_endpoint() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(d, &["plan", "set", "news", "--scopes", "news-api"]);
    ok(d, &["plan", "set", "market", "--scopes", "market-data-api"]);
    let (mover, mover_secret) = create_client(d, "news");
    let (metered, metered_secret) = create_client(d, "news");
    let (rotated, first_secret) = create_client(d, "news");
    let server = serve(d, &[]);
    let base = server.base.as_str();
    let day_before = tessera_server::usage::utc_day(tessera_server::clock::Clock::system().now());

    // set-plan: the next token request gets the scopes of the new plan, and only those.
    assert_eq!(
        answer(token(base, &mover, &mover_secret, "news-api").await)
            .await
            .0,
        200
    );
    ok(d, &["client", "set-plan", &mover, "market"]);
    server.sees_changes(d, &[]).await;
    let (status, body) = answer(token(base, &mover, &mover_secret, "market-data-api").await).await;
    assert_eq!(
        (status, &body["scope"]),
        (200, &"market-data-api".into()),
        "{body}"
    );
    let (status, body) = answer(token(base, &mover, &mover_secret, "news-api").await).await;
    assert_eq!(
        (status, &body["error"]),
        (400, &"invalid_scope".into()),
        "{body}"
    );

    // create --count N: N distinct clients, each with its own working secret.
    let out = ok(
        d,
        &[
            "client", "create", "--plan", "news", "--count", "5", "--json",
        ],
    );
    let created: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(created.len(), 5, "{out}");
    let ids: std::collections::HashSet<_> = created.iter().map(|c| &c["client_id"]).collect();
    let secrets: std::collections::HashSet<_> =
        created.iter().map(|c| &c["client_secret"]).collect();
    assert_eq!((ids.len(), secrets.len()), (5, 5));
    assert_eq!(
        serde_json::from_str::<Vec<serde_json::Value>>(&ok(d, &["client", "list", "--json"]))
            .unwrap()
            .len(),
        3 + 5
    );
    server.sees_changes(d, &[]).await;
    for c in &created {
        let (id, secret) = (
            c["client_id"].as_str().unwrap(),
            c["client_secret"].as_str().unwrap(),
        );
        assert_eq!(
            answer(token(base, id, secret, "news-api").await).await.0,
            200,
            "{id}"
        );
    }

    // --auth-method client_secret_post: credentials in the body, and only there.
    let out = ok(
        d,
        &[
            "client",
            "create",
            "--plan",
            "news",
            "--auth-method",
            "client_secret_post",
            "--json",
        ],
    );
    let post: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(post["token_endpoint_auth_method"], "client_secret_post");
    let (post_id, post_secret) = (
        post["client_id"].as_str().unwrap(),
        post["client_secret"].as_str().unwrap(),
    );
    server.sees_changes(d, &[]).await;
    let (status, body) = answer(token(base, post_id, post_secret, "news-api").await).await;
    assert_eq!(
        (status, &body["error"]),
        (401, &"invalid_client".into()),
        "{body}"
    );
    let (status, body) = answer(token_post(base, post_id, post_secret, "news-api").await).await;
    assert_eq!(status, 200, "{body}");
    // And a client_secret_basic client may not use the body.
    let (status, body) =
        answer(token_post(base, &mover, &mover_secret, "market-data-api").await).await;
    assert_eq!(
        (status, &body["error"]),
        (401, &"invalid_client".into()),
        "{body}"
    );

    // rotate-secret --grace: the old secret works on during the grace, beside the new one.
    let rotation = |grace: &str| {
        let out = ok(
            d,
            &[
                "client",
                "rotate-secret",
                &rotated,
                "--grace",
                grace,
                "--json",
            ],
        );
        let json: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
        json["client_secret"].as_str().unwrap().to_owned()
    };
    let second_secret = rotation("3600");
    server.sees_changes(d, &[]).await;
    for secret in [&first_secret, &second_secret] {
        assert_eq!(
            answer(token(base, &rotated, secret, "news-api").await)
                .await
                .0,
            200
        );
    }
    // --grace 0: the replaced secret stops at once (and the one before it with it).
    let third_secret = rotation("0");
    server.sees_changes(d, &[]).await;
    assert_eq!(
        answer(token(base, &rotated, &third_secret, "news-api").await)
            .await
            .0,
        200
    );
    for secret in [&first_secret, &second_secret] {
        let (status, body) = answer(token(base, &rotated, secret, "news-api").await).await;
        assert_eq!(
            (status, &body["error"]),
            (401, &"invalid_client".into()),
            "{body}"
        );
    }

    // usage: token requests per UTC day, issued and refused, written on shutdown.
    for _ in 0..3 {
        assert_eq!(
            answer(token(base, &metered, &metered_secret, "news-api").await)
                .await
                .0,
            200
        );
    }
    for _ in 0..2 {
        assert_eq!(
            answer(token(base, &metered, &metered_secret, "oms-api").await)
                .await
                .0,
            400
        );
    }
    let status = server.terminate().await;
    assert!(status.success(), "{status:?}");
    let day_after = tessera_server::usage::utc_day(tessera_server::clock::Clock::system().now());
    let usage: Vec<serde_json::Value> =
        serde_json::from_str(&ok(d, &["client", "usage", &metered, "--json"])).unwrap();
    assert_eq!(usage.len(), 1, "{usage:?}");
    assert!(
        [&day_before, &day_after].contains(&&usage[0]["day"].as_str().unwrap().to_owned()),
        "{usage:?}"
    );
    assert_eq!(
        (&usage[0]["issued"], &usage[0]["refused"]),
        (&3.into(), &2.into()),
        "{usage:?}"
    );
    let table = ok(d, &["client", "usage", &metered]);
    assert!(
        table
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>()
                == [usage[0]["day"].as_str().unwrap(), "3", "2"]),
        "{table}"
    );
}

#[tokio::test]
async fn plan_limits_take_effect_at_the_token_endpoint() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let set = |name: &str, extra: &[&str]| {
        let args = [&["plan", "set", name, "--scopes", "news-api"], extra].concat();
        ok(d, &args);
    };
    set("two", &["--token-rate", "2/min"]);
    set("burst", &["--token-rate", "60/hour", "--token-burst", "3"]);
    set("daily", &["--token-rate", "1/day"]);
    set("reuse", &["--reuse-percent", "50"]);
    let two = create_client(d, "two");
    let burst = create_client(d, "burst");
    let daily = create_client(d, "daily");
    let reuse = create_client(d, "reuse");
    let server = serve(d, &[]);
    let base = server.base.as_str();
    async fn ask(base: &str, (id, secret): &(String, String)) -> reqwest::Response {
        token(base, id, secret, "news-api").await
    }

    // 2/min: the burst is the count, then 429 with the policy's count and period.
    for _ in 0..2 {
        assert_eq!(ask(base, &two).await.status(), 200);
    }
    let refused = ask(base, &two).await;
    assert_eq!(refused.status(), 429);
    assert_eq!(refused.headers()["ratelimit-policy"], r#""token";q=2;w=60"#);
    assert_eq!(answer(refused).await.1["error"], "rate_limited");

    // 60/hour with --token-burst 3: three at once, not sixty.
    for _ in 0..3 {
        assert_eq!(ask(base, &burst).await.status(), 200);
    }
    let refused = ask(base, &burst).await;
    assert_eq!(refused.status(), 429);
    assert_eq!(
        refused.headers()["ratelimit-policy"],
        r#""token";q=60;w=3600"#
    );

    // --token-rate none removes the limit from the running server.
    assert_eq!(ask(base, &daily).await.status(), 200);
    assert_eq!(ask(base, &daily).await.status(), 429);
    set("daily", &["--token-rate", "none"]);
    server.sees_changes(d, &[]).await;
    for _ in 0..3 {
        let response = ask(base, &daily).await;
        assert_eq!(response.status(), 200);
        assert!(response.headers().get("ratelimit-policy").is_none());
    }

    // --reuse-percent 50: the same token again; 0 turns reuse off.
    let access_token = |r: reqwest::Response| async move {
        let (status, body) = answer(r).await;
        assert_eq!(status, 200, "{body}");
        body["access_token"].as_str().unwrap().to_owned()
    };
    let first = access_token(ask(base, &reuse).await).await;
    assert_eq!(access_token(ask(base, &reuse).await).await, first, "reused");
    set("reuse", &["--reuse-percent", "0"]);
    server.sees_changes(d, &[]).await;
    let fresh = access_token(ask(base, &reuse).await).await;
    assert_ne!(fresh, first);
    assert_ne!(
        access_token(ask(base, &reuse).await).await,
        fresh,
        "reuse is off"
    );
}
