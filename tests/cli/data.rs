//! Data safety on the embedded default: the files' modes.

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
    let server = Server::start(d, &[]);
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
