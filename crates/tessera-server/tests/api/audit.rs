//! The audit trail, read from the log the test kit captures.

use tessera_testkit::*;

const NEWS: &str = "grant_type=client_credentials&scope=news-api";

/// The audit events (target `tessera::audit`) naming `client_id`.
fn audit_events(log: &str, client_id: &str) -> Vec<serde_json::Value> {
    audit_events_with(log, "client_id", client_id)
}

/// The fields of the audit events in `log` whose field `name` is `value`, in order.
fn audit_events_with(log: &str, name: &str, value: &str) -> Vec<serde_json::Value> {
    log.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["target"] == "tessera::audit" && e["fields"][name] == value)
        .map(|e| e["fields"].clone())
        .collect()
}

#[tokio::test]
async fn audit_events_name_who_and_what_but_never_a_secret() {
    let app = spawn_app().await;
    // oms-api is some plan's scope (not the client's): logged by name when refused.
    app.registrar()
        .set_plan("orders", "oms-api", None)
        .await
        .unwrap();
    let (id, secret) = app.client().await;
    let body: serde_json::Value = app.token(&id, &secret, NEWS).await.json().await.unwrap();
    let token = body["access_token"].as_str().unwrap().to_owned();
    let bad = "grant_type=client_credentials&scope=oms-api";
    assert_eq!(app.token(&id, &secret, bad).await.status(), 400);
    let revoke = app
        .http
        .post(app.url("/connect/revocation"))
        .header("authorization", basic(&id, &secret))
        // Not a trusted proxy: the header is the caller's to write, and ignored.
        .header("x-forwarded-for", "198.51.100.9")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={token}"))
        .send()
        .await
        .unwrap();
    assert_eq!(revoke.status(), 200);

    let log = app.log();
    let events = audit_events(&log, id.as_str());
    assert_eq!(events.len(), 3, "{events:?}");
    let issued = &events[0];
    assert_eq!(issued["event"], "token_issued");
    assert_eq!(issued["client_id"], id.as_str());
    assert_eq!(issued["plan"], "pro");
    assert_eq!(issued["scope"], "news-api");
    assert_eq!(issued["outcome"], "issued");
    assert_eq!(issued["jti"], claims_of(&token)["jti"]);
    assert_eq!(issued["source"], "127.0.0.1");
    let refused = &events[1];
    assert_eq!(refused["event"], "token_refused");
    assert_eq!(refused["client_id"], id.as_str());
    assert_eq!(refused["plan"], "pro");
    assert_eq!(refused["scope"], "oms-api");
    assert_eq!(refused["outcome"], "invalid_scope");
    assert_eq!(refused["source"], "127.0.0.1");
    assert!(refused.get("jti").is_none());
    let revoked = &events[2];
    assert_eq!(revoked["event"], "token_revoked");
    assert_eq!(revoked["client_id"], id.as_str());
    assert_eq!(revoked["plan"], "pro");
    assert_eq!(revoked["scope"], "news-api");
    assert_eq!(revoked["outcome"], "revoked");
    assert_eq!(revoked["jti"], claims_of(&token)["jti"]);
    assert_eq!(
        revoked["source"], "127.0.0.1",
        "X-Forwarded-For of an untrusted peer"
    );
    assert!(!log.contains(secret.expose()), "no secret in the logs");
    assert!(!log.contains(&token), "no token in the logs");
}

#[tokio::test]
async fn behind_a_trusted_proxy_the_audit_names_the_forwarded_address() {
    let app = spawn_with(|s| {
        s.config.trusted_proxies = vec![std::net::IpAddr::from([127, 0, 0, 1])];
    })
    .await;
    let (id, secret) = app.client().await;
    let answer = app
        .http
        .post(app.url("/connect/token"))
        .header("authorization", basic(&id, &secret))
        // The leftmost entry is the client's own claim; the proxy appended the last one.
        .header("x-forwarded-for", "192.0.2.1, 203.0.113.5")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(NEWS)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let events = audit_events(&app.log(), id.as_str());
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["source"], "203.0.113.5");
}

#[tokio::test]
async fn on_a_dual_stack_listener_ipv4_peers_are_ipv4_addresses() {
    // Behind `--listen [::]:PORT`, a peer at 127.0.0.1 arrives as ::ffff:127.0.0.1; the
    // trusted proxy is named 127.0.0.1 and must still match, and the audit says 127.0.0.1.
    let app = spawn_with(|s| {
        s.config.listen = "[::]:0".parse().unwrap();
        s.config.trusted_proxies = vec![std::net::IpAddr::from([127, 0, 0, 1])];
    })
    .await;
    let (id, secret) = app.client().await;
    let forwarded = app
        .http
        .post(app.url("/connect/token"))
        .header("authorization", basic(&id, &secret))
        .header("x-forwarded-for", "203.0.113.8")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(NEWS)
        .send()
        .await
        .unwrap();
    assert_eq!(forwarded.status(), 200);
    let (other, other_secret) = app.client().await;
    assert_eq!(app.token(&other, &other_secret, NEWS).await.status(), 200);
    let log = app.log();
    assert_eq!(audit_events(&log, id.as_str())[0]["source"], "203.0.113.8");
    assert_eq!(audit_events(&log, other.as_str())[0]["source"], "127.0.0.1");
}

#[tokio::test]
async fn a_secret_in_any_position_never_reaches_the_log() {
    let app = spawn_app().await;
    let (id, secret) = app.client().await;
    let s = secret.expose();
    let form = "application/x-www-form-urlencoded";
    let post = |body: String| {
        app.http
            .post(app.url("/connect/token"))
            .header("content-type", form)
            .body(body)
    };
    let basic_raw = |user: &str, password: &str| {
        use base64::Engine;
        let pair = format!("{user}:{password}");
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(pair)
        )
    };
    let requests = [
        // Swapped: the secret where the id goes.
        post(NEWS.to_owned()).header("authorization", basic_raw(s, id.as_str())),
        post(NEWS.to_owned()).header("authorization", basic_raw(s, s)),
        post(format!("{NEWS}&client_id={s}&client_secret={s}")),
        post(format!("grant_type=client_credentials&scope={s}"))
            .header("authorization", basic(&id, &secret)),
        post(format!("grant_type={s}&scope=news-api")).header("authorization", basic(&id, &secret)),
        post(format!("{NEWS}&client_id={s}")).header("authorization", basic(&id, &secret)),
        app.http
            .post(app.url(&format!("/connect/token?client_secret={s}")))
            .header("content-type", form)
            .header("authorization", basic(&id, &secret))
            .body(NEWS),
        app.http
            .post(app.url("/connect/introspect"))
            .header("content-type", form)
            .header("authorization", basic_raw(s, "x"))
            .body(format!("token={s}")),
        app.http
            .post(app.url("/connect/revocation"))
            .header("content-type", form)
            .header("authorization", basic(&id, &secret))
            .body(format!("token={s}")),
    ];
    for request in requests {
        let answer = request.send().await.unwrap();
        assert_ne!(answer.status(), 500);
        let body = answer.text().await.unwrap();
        assert!(!body.contains(s), "echoed in an answer: {body}");
    }
    let log = app.log();
    assert!(!log.is_empty());
    assert!(!log.contains(s), "a secret reached the log");
    // What was refused is still there to see, under a digest.
    assert!(log.contains("unregistered:"), "{log}");
}

/// README's audit fields: `outcome` is "`issued`, `reused`, the OAuth error code, or
/// `revoked`", and `client_id` is the client presented, "an id that names no client as
/// `unregistered:` and 6 bytes of its SHA-256", never as given (it may be a secret pasted in
/// the wrong field).
#[tokio::test]
async fn a_reused_token_and_an_unknown_client_id_are_audited_as_the_readme_says() {
    use tessera_server::registrar::{Change, PlanSettings};
    let app = spawn_app().await;
    let reusing = PlanSettings {
        reuse_percent: Change::Set(50),
        ..PlanSettings::default()
    };
    app.registrar()
        .set_plan_with("reusing", "news-api", &reusing)
        .await
        .unwrap();
    let (id, secret) = app
        .client_on("reusing", tessera_store::AuthMethod::ClientSecretBasic)
        .await;
    let first: serde_json::Value = app.token(&id, &secret, NEWS).await.json().await.unwrap();
    let again: serde_json::Value = app.token(&id, &secret, NEWS).await.json().await.unwrap();
    assert_eq!(first["access_token"], again["access_token"]);
    let events = audit_events(&app.log(), id.as_str());
    let outcomes: Vec<&str> = events
        .iter()
        .map(|e| e["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["issued", "reused"], "{events:?}");
    let jti = claims_of(first["access_token"].as_str().unwrap())["jti"].clone();
    assert_eq!(events[1]["jti"], jti, "the reused token's own jti");

    // An unknown id: refused, and audited as a digest.
    let long = format!("tc_{}", "x".repeat(97));
    let basic = {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(format!("{long}:tcs_guess"))
    };
    let refused = app
        .http
        .post(app.url("/connect/token"))
        .header("authorization", format!("Basic {basic}"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(NEWS)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, long.as_bytes());
    let hex: String = digest.as_ref()[..6]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let log = app.log();
    let events = audit_events(&log, &format!("unregistered:{hex}"));
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["event"], "token_refused");
    assert_eq!(events[0]["outcome"], "invalid_client");
    assert!(!log.contains(&long), "the id is never logged as given");
}

/// A request refused before its client is known still has its scope audited, since some plan
/// grants it: one refused as its form was read, after the scope (a repeated
/// `client_assertion`, RFC 6749 section 3.2), and one whose secret is wrong. (Mutation
/// testing: the `scope` of the `Decided` of routes/token.rs's read error and of the grant's
/// failed authentication.)
#[tokio::test]
async fn a_request_refused_before_its_client_is_known_is_audited_with_its_scope() {
    let app = spawn_app().await;
    // A scope no other test names, to find this test's events among every server's.
    let scope = "refused-scope-audit-api";
    app.registrar()
        .set_plan("probe", scope, None)
        .await
        .unwrap();
    let (id, _) = app.client().await;
    let form = format!("grant_type=client_credentials&scope={scope}");
    let answer = app
        .http
        .post(app.url("/connect/token"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("{form}&client_assertion=a&client_assertion=b"))
        .send()
        .await
        .unwrap();
    let (status, code, _) = error_of(answer).await;
    assert_eq!((status, code.as_str()), (400, "invalid_request"));
    let wrong = tessera_proto::ClientSecret::new("nope");
    assert_eq!(app.token(&id, &wrong, &form).await.status(), 401);

    let log = app.log();
    let refused = audit_events_with(&log, "scope", scope);
    assert_eq!(refused.len(), 2, "{log}");
    assert_eq!(refused[0]["event"], "token_refused");
    assert_eq!(refused[0]["outcome"], "invalid_request");
    assert_eq!(refused[1]["event"], "token_refused");
    assert_eq!(refused[1]["outcome"], "invalid_client");
    assert_eq!(refused[1]["client_id"], id.as_str());
}
