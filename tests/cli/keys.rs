//! The master key and the signing keys across commands and restarts: another key or a lost
//! one is refused, never silently replaced; a rotated algorithm is kept.

use super::*;

#[test]
fn another_master_key_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(d, &["plan", "set", "pro", "--scopes", "news-api"]);
    create_client(d, "pro");
    let out = Command::new(BIN)
        .args(["client", "create", "--plan", "pro"])
        .current_dir(d)
        .env("TESSERA_MASTER_KEY", "A".repeat(43))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("does not belong to this database"), "{err}");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&ok(d, &["client", "list", "--json"]))
            .unwrap()
            .as_array()
            .unwrap()
            .len(),
        1,
        "nothing written under the wrong key"
    );
}

/// A restart keeps the rotated key and its algorithm, and says once, at start, that the
/// active key's algorithm is not the configured one (`--signing-alg`, EdDSA by default); a
/// server configured with the key's own algorithm says nothing of it.
#[tokio::test]
async fn a_restart_keeps_a_rotated_algorithm() {
    const ANOTHER: &str = "uses another algorithm than configured";
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(
        d,
        &["keys", "rotate", "--alg", "ES256", "--activate-in", "0"],
    );
    let server = serve(d, &[]);
    let warned = server.log_line(|l| l.contains(ANOTHER)).await;
    assert!(
        warned.contains("active=ES256") && warned.contains("configured=EdDSA"),
        "{warned}"
    );
    drop(server);

    ok(d, &["plan", "set", "pro", "--scopes", "news-api"]);
    let (id, secret) = create_client(d, "pro");
    let server = serve(d, &["--signing-alg", "ES256"]);
    let issued = access_token(token(&server.base, &id, &secret, "news-api").await).await;
    assert_eq!(header_of(&issued)["alg"], "ES256");
    // The log is written in order: once the token's audit line is out, so is every line
    // of the start.
    let jti = claims_of(&issued)["jti"].as_str().unwrap().to_owned();
    server.log_line(|l| l.contains(&jti)).await;
    let said: Vec<String> = server
        .stderr()
        .into_iter()
        .filter(|l| l.contains(ANOTHER))
        .collect();
    assert!(said.is_empty(), "{said:?}");
    assert!(server.terminate().await.success());

    let keys: serde_json::Value =
        serde_json::from_str(&ok(d, &["keys", "list", "--json"])).unwrap();
    let keys = keys.as_array().unwrap();
    assert_eq!(keys.len(), 1, "no unannounced key generated: {keys:?}");
    assert_eq!(keys[0]["alg"], "ES256");
    assert_eq!(keys[0]["status"], "signing");
}

#[test]
fn a_missing_master_key_is_not_silently_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(d, &["plan", "set", "pro", "--scopes", "news-api"]);
    create_client(d, "pro");
    std::fs::remove_file(d.join("tessera.db.key")).unwrap();
    let err = fails(d, &["client", "create", "--plan", "pro"]);
    assert!(err.contains("master key"), "{err}");
    assert!(!d.join("tessera.db.key").exists());
}
