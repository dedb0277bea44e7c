//! Issue 24 item 3 on the CLI, on PostgreSQL in a scratch database of its own (the
//! registry's lock, which keeps the change log in commit order, is the database's, shared
//! by every schema in it): a bulk create commits batch by batch, so an emergency disable
//! made meanwhile waits for one batch and not for the whole import; and a write behind a
//! stuck writer fails, naming the cause, instead of waiting for as long as that one lives.

use std::io::Read;

use sqlx::{Connection, PgConnection};

use super::*;

/// A command that does not exit within this is waiting for the stuck writer (the store
/// gives up after 3 s): it is killed, and the test fails.
const NOT_FOREVER: Duration = Duration::from_secs(30);

/// `tessera ARGS` with the `TESSERA_*` variables in `env`, killed if it runs past
/// [`NOT_FOREVER`]. For commands that print little: nothing is read until it exits.
fn bounded(dir: &Path, env: &[(&str, &str)], args: &[&str]) -> Output {
    let mut child = command(dir)
        .args(args)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > NOT_FOREVER {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "{args:?} still waiting after {NOT_FOREVER:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// A scratch database, a master key and the variables that point the CLI at them.
struct Postgres {
    db: tessera_store::testing::ScratchDatabase,
    key: String,
}

impl Postgres {
    async fn new() -> Self {
        Self {
            db: tessera_store::testing::scratch_database().await,
            key: master_key(),
        }
    }

    fn env(&self) -> [(&'static str, &str); 2] {
        [
            ("TESSERA_DATABASE_URL", self.db.url.as_str()),
            ("TESSERA_MASTER_KEY", self.key.as_str()),
        ]
    }

    async fn connect(&self) -> PgConnection {
        PgConnection::connect(&self.db.url).await.unwrap()
    }
}

async fn scalar(db: &mut PgConnection, sql: &str) -> i64 {
    sqlx::query_scalar::<_, i64>(sql)
        .fetch_one(db)
        .await
        .unwrap()
}

/// A writer partitioned away mid-transaction leaves its session idle in transaction,
/// holding the registry's lock (here a client's update, as a `client disable` that lost
/// its network would). Every CLI write behind it, on the database or through a server's
/// admin API, exits 1 naming the cause within the store's lock timeout (3 s), writing
/// nothing; once the session is gone, the same commands work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_behind_a_stuck_writer_fails_naming_the_cause_instead_of_waiting() {
    let pg = Postgres::new().await;
    let env = pg.env();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok_with(d, &env, &["plan", "set", "p", "--scopes", "news-api"]);
    let (id, _) = create_client_with(d, &env, &[], "p");
    let (other, _) = create_client_with(d, &env, &[], "p");
    ok_with(
        d,
        &env,
        &["plan", "set", "admin", "--scopes", "tessera-admin"],
    );
    let (admin_id, admin_secret) = create_client_with(d, &env, &[], "admin");
    let server = spawn(d, &env, &["serve", "--listen", "127.0.0.1:0"]);
    let remote = [
        ("TESSERA_ADMIN_URL", server.base.as_str()),
        ("TESSERA_CLIENT_ID", admin_id.as_str()),
        ("TESSERA_CLIENT_SECRET", admin_secret.as_str()),
    ];

    let mut stuck = pg.connect().await;
    sqlx::raw_sql(&format!(
        "BEGIN; UPDATE clients SET label = 'stuck' WHERE id = '{other}'"
    ))
    .execute(&mut stuck)
    .await
    .unwrap();
    let mut db = pg.connect().await;
    let changes = scalar(&mut db, "SELECT count(*) FROM changes").await;

    for (how, env) in [("database", &env[..]), ("admin API", &remote[..])] {
        let out = bounded(d, env, &["client", "disable", &id]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{how}: {stderr}");
        assert!(
            stderr.contains("the write waited 3 s for a lock another database session holds")
                && stderr.contains("idle in transaction")
                && stderr.contains("nothing was written"),
            "{how}: {stderr}"
        );
    }
    let out = bounded(
        d,
        &env,
        &[
            "client", "create", "--plan", "p", "--count", "12000", "--json",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.starts_with("error: no client created: the write waited 3 s"),
        "{stderr}"
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "",
        "no secret printed"
    );
    assert_eq!(
        scalar(&mut db, "SELECT count(*) FROM changes").await,
        changes
    );
    assert_eq!(scalar(&mut db, "SELECT count(*) FROM clients").await, 3);

    // The stuck session is gone: the same writes go through.
    sqlx::raw_sql("ROLLBACK").execute(&mut stuck).await.unwrap();
    let out = ok_with(d, &env, &["client", "disable", &id]);
    assert_eq!(out.trim(), format!("client {id} disabled"));
    let out = ok_with(d, &remote, &["client", "enable", &id]);
    assert_eq!(out.trim(), format!("client {id} enabled"));
}

/// The fault on main: during a 300,000-client import an emergency `client disable` waited
/// 7.5 s, as long as the import's one transaction held the registry's lock. Here the disable
/// starts once the import's first batch is committed, and the change log shows it made
/// while the import was still writing: its change lies between the import's first batch
/// and its last, rather than after all of them. The import is then complete and printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disable_during_a_bulk_create_is_made_while_the_import_goes_on() {
    /// Twelve batches: the import goes on for a while after its first batch commits.
    const N: usize = 60_000;
    let pg = Postgres::new().await;
    let env = pg.env();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok_with(d, &env, &["plan", "set", "bulk", "--scopes", "news-api"]);
    let (target, _) = create_client_with(d, &env, &[], "bulk");
    let mut db = pg.connect().await;
    let before = scalar(&mut db, "SELECT max(seq) FROM changes").await;

    let mut import = command(d)
        .envs(env)
        .args(["client", "create", "--plan", "bulk", "--count"])
        .arg(N.to_string())
        .arg("--json")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Read as it is printed, so the import never waits on a full pipe.
    let mut stdout = import.stdout.take().unwrap();
    let printed = std::thread::spawn(move || {
        let mut out = String::new();
        stdout.read_to_string(&mut out).unwrap();
        out
    });
    tessera_testkit::until("the import's first batch committed", || async {
        scalar(&mut pg.connect().await, "SELECT count(*) FROM clients").await > 1
    })
    .await;
    let out = ok_with(d, &env, &["client", "disable", &target]);
    assert_eq!(out.trim(), format!("client {target} disabled"));
    let status = import.wait().unwrap();
    let mut stderr = String::new();
    import
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(status.success(), "{stderr}");
    assert_eq!(printed.join().unwrap().lines().count(), N);
    assert_eq!(
        scalar(&mut db, "SELECT count(*) FROM clients").await,
        N as i64 + 1
    );

    let disabled = scalar(
        &mut db,
        &format!("SELECT max(seq) FROM changes WHERE id = '{target}'"),
    )
    .await;
    let imported = |bound: &str| {
        format!(
            "SELECT count(*) FROM changes WHERE kind = 'client' AND id <> '{target}' \
             AND seq > {before} AND seq {bound} {disabled}"
        )
    };
    let (earlier, later) = (
        scalar(&mut db, &imported("<")).await,
        scalar(&mut db, &imported(">")).await,
    );
    assert_eq!(earlier + later, N as i64);
    assert!(
        earlier >= 5000 && later > 0,
        "the disable's change after {earlier} and before {later} of the import's"
    );
    assert!(
        earlier % 5000 == 0,
        "between two batches, not inside one: after {earlier}"
    );
}
