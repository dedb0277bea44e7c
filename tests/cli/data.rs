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
