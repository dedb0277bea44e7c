//! `tessera client create --count N` on the embedded SQLite file (issue 17): N distinct
//! clients whose secrets work, written a batch (5,000) to a transaction, each batch printed
//! once committed (issue 24), and a progress bar on stderr only when stderr is a terminal.

use std::collections::HashSet;

use sqlx::{Connection, SqliteConnection};

use super::*;

/// More than one batch of the admin layer (5,000) and a partial chunk of the store (1,000).
const N: usize = 12_345;

fn created(out: &str) -> Vec<serde_json::Value> {
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn listed(dir: &Path) -> usize {
    serde_json::from_str::<Vec<serde_json::Value>>(&ok(dir, &["client", "list", "--json"]))
        .unwrap()
        .len()
}

#[tokio::test]
async fn client_create_count_makes_that_many_usable_clients() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(d, &["plan", "set", "bulk", "--scopes", "news-api oms-api"]);
    let out = tessera_with(
        d,
        &[],
        &[
            "client",
            "create",
            "--plan",
            "bulk",
            "--name",
            "fleet",
            "--count",
            &N.to_string(),
            "--json",
        ],
    );
    assert!(out.status.success());
    // Not a terminal: nothing on stderr, no progress bar.
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
    let clients = created(std::str::from_utf8(&out.stdout).unwrap());
    assert_eq!(clients.len(), N);
    let ids: HashSet<&str> = clients
        .iter()
        .map(|c| c["client_id"].as_str().unwrap())
        .collect();
    let secrets: HashSet<&str> = clients
        .iter()
        .map(|c| c["client_secret"].as_str().unwrap())
        .collect();
    assert_eq!((ids.len(), secrets.len()), (N, N));
    assert!(clients
        .iter()
        .all(|c| c["plan"] == "bulk" && c["name"] == "fleet" && c["enabled"] == true));
    assert_eq!(listed(d), N);

    // A sample of the printed secrets, from the first batch, the middle and the last chunk.
    let server = serve(d, &[]);
    for c in [&clients[0], &clients[N / 2], &clients[N - 1]] {
        let (id, secret) = (
            c["client_id"].as_str().unwrap(),
            c["client_secret"].as_str().unwrap(),
        );
        let (status, body) = answer(token(&server.base, id, secret, "oms-api").await).await;
        assert_eq!(status, 200, "{id}: {body}");
    }
    // A secret of another client is refused: each secret is its own client's.
    let (id, other) = (
        clients[1]["client_id"].as_str().unwrap(),
        clients[2]["client_secret"].as_str().unwrap(),
    );
    assert_eq!(
        answer(token(&server.base, id, other, "oms-api").await)
            .await
            .0,
        401
    );
}

/// A failure part way (the test makes SQLite refuse the 7,001st row, in the second batch)
/// keeps the first batch, committed before it, and prints it; the second batch, and its
/// change for the servers to read, is not written; the error says how many were created
/// and how to make the rest.
#[tokio::test]
async fn client_create_count_keeps_and_prints_the_batches_committed_before_a_failure() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(d, &["plan", "set", "bulk", "--scopes", "news-api"]);
    let before = ok(d, &["client", "create", "--plan", "bulk", "--json"]);
    let url = format!("sqlite://{}", d.join("tessera.db").display());
    let mut db = SqliteConnection::connect(&url).await.unwrap();
    sqlx::query(
        "CREATE TRIGGER refuse_late BEFORE INSERT ON clients \
         WHEN (SELECT count(*) FROM clients) >= 7001 \
         BEGIN SELECT RAISE(ABORT, 'refused by the test'); END",
    )
    .execute(&mut db)
    .await
    .unwrap();
    let changes = || async {
        let mut db = SqliteConnection::connect(&url).await.unwrap();
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM changes WHERE kind = 'client'")
            .fetch_one(&mut db)
            .await
            .unwrap()
    };
    let logged = changes().await;

    let out = tessera_with(
        d,
        &[],
        &[
            "client", "create", "--plan", "bulk", "--count", "10000", "--json",
        ],
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "5000 of 10000 clients created (printed above; `--count 5000` makes the rest), \
             then: "
        ) && stderr.contains("refused by the test"),
        "{stderr}"
    );
    let printed = created(std::str::from_utf8(&out.stdout).unwrap());
    assert_eq!(printed.len(), 5000, "the first batch, printed");
    assert_eq!(
        listed(d),
        5001,
        "the client made before and the first batch"
    );
    assert_eq!(
        changes().await,
        logged + 5000,
        "the first batch's changes only"
    );
    // The printed secrets are the stored ones.
    let server = serve(d, &[]);
    let last = &printed[4999];
    let (id, secret) = (
        last["client_id"].as_str().unwrap(),
        last["client_secret"].as_str().unwrap(),
    );
    let (status, body) = answer(token(&server.base, id, secret, "news-api").await).await;
    assert_eq!(status, 200, "{body}");

    // Without the fault, the rest as the error said.
    sqlx::query("DROP TRIGGER refuse_late")
        .execute(&mut db)
        .await
        .unwrap();
    let out = ok(
        d,
        &[
            "client", "create", "--plan", "bulk", "--count", "5000", "--json",
        ],
    );
    assert_eq!(created(&out).len(), 5000);
    assert_eq!(listed(d), 10_001);
    assert!(ok(d, &["client", "list"]).contains(
        serde_json::from_str::<serde_json::Value>(before.trim()).unwrap()["client_id"]
            .as_str()
            .unwrap()
    ));
}

#[test]
fn client_create_count_on_a_missing_plan_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(d, &["plan", "set", "bulk", "--scopes", "news-api"]);
    let out = tessera_with(
        d,
        &[],
        &[
            "client", "create", "--plan", "nope", "--count", "3000", "--json",
        ],
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no plan named \"nope\""), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "");
    assert_eq!(listed(d), 0);
}

/// README: `client create --count N` "(up to 1,000,000)": one more is refused by the
/// argument parser, naming the range, and nothing is created.
#[test]
fn client_create_count_stops_at_a_million() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(d, &["plan", "set", "bulk", "--scopes", "news-api"]);
    let err = fails(
        d,
        &["client", "create", "--plan", "bulk", "--count", "1000001"],
    );
    assert!(err.contains("1..=1000000"), "{err}");
    assert_eq!(listed(d), 0);
}

/// On a terminal (a pseudo-terminal made by util-linux `script`), stderr shows the bar;
/// the secrets still go to stdout alone.
#[test]
fn client_create_count_shows_progress_on_a_terminal() {
    let script = Command::new("script").arg("--version").output().is_ok();
    if tessera_testkit::skip_without(
        "`script` (util-linux) to run the command on a terminal",
        script,
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(d, &["plan", "set", "bulk", "--scopes", "news-api"]);
    let shell = format!("{BIN} client create --plan bulk --count 5000 --json > created.jsonl");
    let mut script = Command::new("script");
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("TESSERA_") {
            script.env_remove(name);
        }
    }
    let out = script
        .current_dir(d)
        .env("TERM", "xterm")
        .args(["-qec", &shell, "/dev/null"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let terminal = String::from_utf8_lossy(&out.stdout);
    assert!(
        terminal.contains("clients"),
        "no progress bar: {terminal:?}"
    );
    assert!(!terminal.contains("tcs_"), "a secret on the terminal");
    let file = std::fs::read_to_string(d.join("created.jsonl")).unwrap();
    assert_eq!(created(&file).len(), 5000);
}
