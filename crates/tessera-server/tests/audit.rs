//! The audit trail, in a test binary of its own: it installs a `tracing` subscriber, and
//! tracing's per-callsite caches are process-wide, so other tests running beside it could
//! hide events from it.

use tessera_testkit::*;

const NEWS: &str = "grant_type=client_credentials&scope=news-api";

#[tokio::test]
async fn audit_events_name_who_and_what_but_never_a_secret() {
    use std::sync::{Arc, Mutex};
    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buf = Buf::default();
    let writer = buf.clone();
    let subscriber = tracing_subscriber::fmt()
        .json()
        .with_max_level(tracing::Level::INFO)
        .with_writer(move || writer.clone())
        .finish();
    // The test runtime has one thread, so the server's tasks log here too.
    let _guard = tracing::subscriber::set_default(subscriber);

    let app = spawn_app().await;
    let (id, secret) = app.client().await;
    let body: serde_json::Value = app.token(&id, &secret, NEWS).await.json().await.unwrap();
    let token = body["access_token"].as_str().unwrap().to_owned();
    let bad = "grant_type=client_credentials&scope=oms-api";
    assert_eq!(app.token(&id, &secret, bad).await.status(), 400);

    let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
    let events: Vec<serde_json::Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|e: &serde_json::Value| e["target"] == "tessera::audit")
        .collect();
    assert_eq!(events.len(), 2, "{text}");
    let issued = &events[0]["fields"];
    assert_eq!(issued["event"], "token_issued");
    assert_eq!(issued["client_id"], id.as_str());
    assert_eq!(issued["plan"], "pro");
    assert_eq!(issued["scope"], "news-api");
    assert_eq!(issued["outcome"], "issued");
    assert_eq!(issued["jti"], claims_of(&token)["jti"]);
    assert_eq!(issued["source"], "127.0.0.1");
    let refused = &events[1]["fields"];
    assert_eq!(refused["event"], "token_refused");
    assert_eq!(refused["outcome"], "invalid_scope");
    assert!(!text.contains(secret.expose()), "no secret in the logs");
    assert!(!text.contains(&token), "no token in the logs");
}
