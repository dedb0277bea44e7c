//! The audit trail, read from the log the test kit captures.

use tessera_testkit::*;

const NEWS: &str = "grant_type=client_credentials&scope=news-api";

/// The audit events (target `tessera::audit`) naming `client_id`.
fn audit_events(log: &str, client_id: &str) -> Vec<serde_json::Value> {
    log.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["target"] == "tessera::audit" && e["fields"]["client_id"] == client_id)
        .map(|e| e["fields"].clone())
        .collect()
}

#[tokio::test]
async fn audit_events_name_who_and_what_but_never_a_secret() {
    let app = spawn_app().await;
    let (id, secret) = app.client().await;
    let body: serde_json::Value = app.token(&id, &secret, NEWS).await.json().await.unwrap();
    let token = body["access_token"].as_str().unwrap().to_owned();
    let bad = "grant_type=client_credentials&scope=oms-api";
    assert_eq!(app.token(&id, &secret, bad).await.status(), 400);

    let log = app.log();
    let events = audit_events(&log, id.as_str());
    assert_eq!(events.len(), 2, "{events:?}");
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
    assert_eq!(refused["outcome"], "invalid_scope");
    assert!(!log.contains(secret.expose()), "no secret in the logs");
    assert!(!log.contains(&token), "no token in the logs");
}
