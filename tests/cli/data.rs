//! Data safety on the embedded default (an SQLite file with its master key file beside it):
//! no fresh start over a lost database, no database made by a command that only reads, an
//! empty WAL after a clean stop, backups taken while serving, the issuer a database was
//! served with, the files' modes, and a full disk.

use super::*;

/// The permission bits of `path`, in octal.
#[cfg(unix)]
fn mode(path: &Path) -> String {
    use std::os::unix::fs::PermissionsExt;
    let metadata = std::fs::metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    format!("{:o}", metadata.permissions().mode() & 0o777)
}

/// The database holds the registry (client secret hashes, sealed signing keys): it and its
/// WAL files are readable by their owner only, whatever the umask leaves.
#[cfg(unix)]
#[tokio::test]
async fn database_files_are_created_0600() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // While the server runs, SQLite holds the WAL and its index beside the file.
    let server = serve(d, &[]);
    for name in ["tessera.db", "tessera.db-wal", "tessera.db-shm"] {
        assert_eq!(mode(&d.join(name)), "600", "{name}");
    }
    server.terminate().await;
}

/// A command that only reads, pointed at a mistyped path, fails naming it and creates
/// nothing; `serve` and the commands that write create the database.
#[test]
fn read_only_commands_create_no_database() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let reads: [&[&str]; 5] = [
        &["plan", "list"],
        &["client", "list"],
        &["client", "show", "tc_nobody"],
        &["client", "usage", "tc_nobody"],
        &["keys", "list"],
    ];
    for args in reads {
        let err = fails(d, &[args, &["--database", "sqlite://typo.db"]].concat());
        assert!(
            err.contains("no database file at typo.db"),
            "{args:?}: {err}"
        );
        let err = fails(d, args);
        assert!(
            err.contains("no database file at tessera.db"),
            "{args:?}: {err}"
        );
        let created: Vec<_> = std::fs::read_dir(d).unwrap().collect();
        assert!(created.is_empty(), "{args:?} created {created:?}");
    }
    ok(d, &["plan", "set", "pro", "--scopes", "news-api"]);
    assert!(ok(d, &["plan", "list"]).contains("pro"));
}

/// Deletes the default database's files, as an operator might by mistake.
fn remove_database(d: &Path) {
    for name in ["tessera.db", "tessera.db-wal", "tessera.db-shm"] {
        match std::fs::remove_file(d.join(name)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => panic!("{name}: {e}"),
            _ => {}
        }
    }
}

/// `serve` on an unspecified address without `--issuer`: it opens the database and loads
/// the master key, then stops, so that a test of what comes before never leaves a server
/// running.
const SERVE_AND_STOP: [&str; 3] = ["serve", "--listen", "0.0.0.0:0"];

/// A master key file beside a missing or empty database says the data was moved or lost:
/// `serve` and the commands that write refuse to start afresh (a new signing key, every
/// client gone), naming both files, until `--init` says so.
#[tokio::test]
async fn a_lost_database_beside_its_key_is_not_replaced_silently() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(d, &["plan", "set", "pro", "--scopes", "news-api"]);
    create_client(d, "pro");
    remove_database(d);
    let writes: [&[&str]; 4] = [
        &SERVE_AND_STOP,
        &["plan", "set", "pro", "--scopes", "news-api"],
        &["client", "delete", "tc_nobody"],
        &["keys", "rotate"],
    ];
    for args in writes {
        let err = fails(d, args);
        assert!(
            err.contains("the database tessera.db is missing")
                && err.contains("master key file tessera.db.key")
                && err.contains("--init"),
            "{args:?}: {err}"
        );
        assert!(!d.join("tessera.db").exists(), "{args:?} created it");
    }
    // An empty file (or a freshly migrated schema) is no better.
    std::fs::write(d.join("tessera.db"), "").unwrap();
    let err = fails(d, &SERVE_AND_STOP);
    assert!(err.contains("the database tessera.db is empty"), "{err}");
    let err = fails(d, &["--init", "plan", "list"]);
    assert!(err.contains("--init is for `serve`"), "{err}");

    // --init starts a new database under the key; from then on it is the key's database.
    let server = serve(d, &["--init"]);
    server.terminate().await;
    ok(d, &["plan", "set", "pro", "--scopes", "news-api"]);
    let (id, secret) = create_client(d, "pro");
    let server = serve(d, &[]);
    assert_eq!(
        token(&server.base, &id, &secret, "news-api").await.status(),
        200
    );
}

/// `--init` on a command that writes, instead of `serve --init`, starts the new database
/// under the key file: the change is made, and from then on no command needs `--init`.
#[tokio::test]
async fn init_on_a_command_that_writes_starts_the_new_database() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(d, &["plan", "set", "pro", "--scopes", "news-api"]);
    create_client(d, "pro");
    let key = std::fs::read(d.join("tessera.db.key")).unwrap();
    remove_database(d);
    let err = fails(d, &["plan", "set", "basic", "--scopes", "news-api"]);
    assert!(err.contains("--init"), "{err}");
    assert!(!d.join("tessera.db").exists());

    ok(
        d,
        &["--init", "plan", "set", "basic", "--scopes", "news-api"],
    );
    assert_eq!(
        std::fs::read(d.join("tessera.db.key")).unwrap(),
        key,
        "same key"
    );
    let names: Vec<String> =
        serde_json::from_str::<Vec<serde_json::Value>>(&ok(d, &["plan", "list", "--json"]))
            .unwrap()
            .iter()
            .map(|plan| plan["name"].as_str().unwrap().to_owned())
            .collect();
    assert_eq!(names, ["basic"]);
    let (id, secret) = create_client(d, "basic");
    let server = serve(d, &[]);
    assert_eq!(
        token(&server.base, &id, &secret, "news-api").await.status(),
        200
    );
}

/// A first start that stopped after it tied the new database to its new key file (here the
/// port was taken) lost nothing: the next start needs no `--init`.
#[test]
fn a_first_start_that_stopped_needs_no_init() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = taken.local_addr().unwrap().to_string();
    let err = fails(d, &["serve", "--listen", &address]);
    assert!(err.contains("cannot listen"), "{err}");
    assert!(d.join("tessera.db.key").exists());
    drop(serve(d, &[]));
}

/// After a clean stop the database file alone holds every change: the WAL is checkpointed
/// into it and emptied.
#[tokio::test]
async fn sigterm_leaves_an_empty_wal() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(d, &["plan", "set", "pro", "--scopes", "news-api"]);
    let (id, secret) = create_client(d, "pro");
    let server = serve(d, &[]);
    // Usage is written on shutdown, so the server has a write of its own to checkpoint.
    assert_eq!(
        token(&server.base, &id, &secret, "news-api").await.status(),
        200
    );
    assert!(server.terminate().await.success());
    let wal = std::fs::metadata(d.join("tessera.db-wal")).map_or(0, |m| m.len());
    assert_eq!(wal, 0, "bytes left in tessera.db-wal");
    let usage = ok(d, &["client", "usage", &id, "--json"]);
    assert!(usage.contains("\"issued\": 1"), "{usage}");
}

/// `tessera backup` copies the database while a server runs on it. Restored elsewhere with
/// the master key file copied beside it, the copy serves the clients created before the
/// backup (and not those created after).
#[tokio::test]
async fn a_backup_taken_while_serving_restores_with_its_key() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(d, &["plan", "set", "pro", "--scopes", "news-api"]);
    let (id, secret) = create_client(d, "pro");
    let server = serve(d, &[]);
    assert_eq!(
        token(&server.base, &id, &secret, "news-api").await.status(),
        200
    );
    let said = ok(d, &["backup", "--out", "copy.db"]);
    assert!(
        said.contains("tessera.db.key"),
        "names the key to keep: {said}"
    );
    let (later, later_secret) = create_client(d, "pro");
    #[cfg(unix)]
    assert_eq!(mode(&d.join("copy.db")), "600");

    // An existing file is never overwritten.
    let copy = std::fs::read(d.join("copy.db")).unwrap();
    let err = fails(d, &["backup", "--out", "copy.db"]);
    assert!(err.contains("copy.db"), "{err}");
    assert_eq!(std::fs::read(d.join("copy.db")).unwrap(), copy);

    let restored = tempfile::tempdir().unwrap();
    let r = restored.path();
    std::fs::copy(d.join("copy.db"), r.join("tessera.db")).unwrap();
    std::fs::copy(d.join("tessera.db.key"), r.join("tessera.db.key")).unwrap();
    let second = serve(r, &[]);
    assert_eq!(
        token(&second.base, &id, &secret, "news-api").await.status(),
        200
    );
    let after = token(&second.base, &later, &later_secret, "news-api").await;
    assert_eq!(after.status(), 401);
    server.terminate().await;

    // Nothing to copy: no database, or one that is no file.
    let err = fails(
        r,
        &["backup", "--out", "x.db", "--database", "sqlite://none.db"],
    );
    assert!(err.contains("no database file at none.db"), "{err}");
    let refused = tessera_testkit::RefusedPort::bind();
    let nowhere = format!("postgres://tessera@127.0.0.1:{}/none", refused.port);
    let postgres = ["--database", nowhere.as_str()];
    let err = fails(r, &[&["backup", "--out", "x.db"], &postgres[..]].concat());
    assert!(err.contains("pg_dump"), "{err}");
    assert!(!r.join("x.db").exists() && !r.join("none.db").exists());
}

/// A second server on the same database with another default issuer (another `--listen`
/// port, no `--issuer`) warns: its tokens carry another `iss`. The first start and a
/// restart under the issuer the database last saw say nothing.
#[tokio::test]
async fn another_issuer_on_the_same_database_is_warned_about() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let first = serve(d, &[]);
    let second = serve(d, &[]);
    let warning = second.log_line(|l| l.contains("another issuer")).await;
    assert!(
        warning.contains("WARN")
            && warning.contains(&format!("previous={}", first.base))
            && warning.contains(&format!("issuer={}", second.base)),
        "{warning}"
    );
    let third = serve(d, &["--issuer", &second.base]);
    for server in [first, third] {
        server.signal("-TERM");
        // Every line before it has been read.
        server.log_line(|l| l.contains("shutting down")).await;
        let log = server.stderr().join("\n");
        assert!(!log.contains("another issuer"), "{log}");
    }
}

/// A full disk (a tmpfs the test fills) under a running server: `client create` exits
/// non-zero naming the cause, prints no secret and creates nothing; the server's revocations
/// fail meanwhile; once space returns both write again, and the server's failed
/// transactions hold no lock that would keep the CLI out ("database is locked").
#[tokio::test]
async fn a_full_disk_fails_cli_and_server_writes_clearly_and_both_recover() {
    let Some(disk) = tessera_store::testing::SmallDisk::mount("2m") else {
        return;
    };
    let d = disk.path.as_path();
    ok(d, &["plan", "set", "pro", "--scopes", "news-api"]);
    let (id, secret) = create_client(d, "pro");
    let server = serve(d, &[]);
    server.sees_changes(d, &[]).await;
    let answer: serde_json::Value = token(&server.base, &id, &secret, "news-api")
        .await
        .json()
        .await
        .unwrap();
    let access_token = answer["access_token"].as_str().unwrap().to_owned();
    let revoke = || async {
        reqwest::Client::new()
            .post(format!("{}/connect/revocation", server.base))
            .basic_auth(&id, Some(&secret))
            .form(&[("token", access_token.as_str())])
            .send()
            .await
            .unwrap()
            .status()
    };
    // An empty WAL, so that every write must take new space.
    let url = format!("sqlite://{}", d.join("tessera.db").display());
    let store = tessera_store::open_existing(&url).await.unwrap();
    assert!(store.checkpoint().await.unwrap());
    drop(store);

    disk.fill();
    let out = tessera_with(
        d,
        &[],
        &[
            "client",
            "create",
            "--plan",
            "pro",
            "--name",
            "on-full-disk",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("database or disk is full"), "{stderr}");
    assert!(out.stdout.is_empty(), "no secret for what was not created");
    // More failed transactions than the server has connections.
    for _ in 0..8 {
        assert_eq!(revoke().await, 503);
    }

    disk.free();
    create_client(d, "pro");
    assert!(!ok(d, &["client", "list"]).contains("on-full-disk"));
    assert_eq!(revoke().await, 200);
    server.terminate().await;
}
