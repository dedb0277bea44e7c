//! Changes the CLI makes straight on the database are audited as the admin API's are
//! (issue 29): each event names the local operator (`cli:` and the operating system's user)
//! and the channel `cli`, and is written in the change's own transaction.

use super::*;

#[tokio::test]
async fn changes_made_on_the_database_name_the_local_operator() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let as_ada = [("USER", "ada")];
    ok_with(d, &as_ada, &["plan", "set", "gold", "--scopes", "news-api"]);
    ok_with(
        d,
        &as_ada,
        &["plan", "set", "gold", "--scopes", "news-api oms-api"],
    );
    let (id, _) = create_client_with(d, &as_ada, &[], "gold");
    ok_with(d, &as_ada, &["client", "disable", &id]);
    // A refused change (no such client) leaves no event.
    assert!(
        !tessera_with(d, &as_ada, &["client", "disable", "tc_nobody"])
            .status
            .success()
    );

    let url = format!("sqlite://{}", d.join("tessera.db").display());
    let store = tessera_store::open_existing(&url).await.unwrap();
    let events = store
        .audit_events(&tessera_store::AuditQuery {
            limit: 100,
            ..Default::default()
        })
        .await
        .unwrap();
    let said: Vec<String> = events
        .iter()
        .rev()
        .map(|e| format!("{} {} {} {}", e.actor, e.channel, e.object, e.action))
        .collect();
    assert_eq!(
        said,
        [
            "cli:ada cli plan:gold created".to_owned(),
            "cli:ada cli plan:gold replaced".to_owned(),
            format!("cli:ada cli client:{id} created on plan gold"),
            format!("cli:ada cli client:{id} disabled"),
        ]
    );
}
