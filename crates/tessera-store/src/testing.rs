//! Test support (feature `test-support`): a scratch PostgreSQL schema per test, so tests can
//! share one database server without seeing each other's rows, or a scratch database for a
//! test that holds the database's locks; and a small disk to fill.

use std::str::FromStr;

use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection};

/// The server tests use: `TESSERA_TEST_POSTGRES_URL`, by default the local `test` database.
pub fn postgres_base_url() -> String {
    std::env::var("TESSERA_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// A schema created for one test and dropped when this is dropped.
#[derive(Debug)]
pub struct ScratchSchema {
    /// A URL whose connections use only the scratch schema.
    pub url: String,
    name: String,
    base: String,
}

/// Creates a fresh schema; panics with a clear message when PostgreSQL is not reachable.
pub async fn scratch_postgres() -> ScratchSchema {
    let base = postgres_base_url();
    let name = scratch_name();
    let mut admin = admin_connection(&base).await;
    sqlx::query(&format!("CREATE SCHEMA {name}"))
        .execute(&mut admin)
        .await
        .expect("create a scratch schema");
    admin.close().await.ok();
    let separator = if base.contains('?') { '&' } else { '?' };
    let url = format!("{base}{separator}options=-c%20search_path%3D{name}");
    ScratchSchema { url, name, base }
}

impl Drop for ScratchSchema {
    fn drop(&mut self) {
        run_on_drop(
            &self.base,
            format!("DROP SCHEMA IF EXISTS {} CASCADE", self.name),
        );
    }
}

/// A database created for one test and dropped (with any session still on it) when this is
/// dropped. For a test that holds a lock shared by every schema of a database (the
/// advisory locks of the change log and of revocations): in a scratch schema it would
/// hold up the tests running beside it.
#[derive(Debug)]
pub struct ScratchDatabase {
    /// A URL of the scratch database.
    pub url: String,
    name: String,
    base: String,
}

/// Creates a fresh database beside the one `TESSERA_TEST_POSTGRES_URL` names; panics with
/// a clear message when PostgreSQL is not reachable or the role may not create databases.
pub async fn scratch_database() -> ScratchDatabase {
    let base = postgres_base_url();
    let name = scratch_name();
    let mut admin = admin_connection(&base).await;
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut admin)
        .await
        .unwrap_or_else(|e| panic!("this test creates a scratch database: {e}"));
    admin.close().await.ok();
    // The path of the URL names the database: replace it, keep any query.
    let (address, query) = match base.split_once('?') {
        Some((address, query)) => (address, Some(query)),
        None => (base.as_str(), None),
    };
    let host_from = address.find("://").map_or(0, |i| i + 3);
    let path_at = address[host_from..]
        .find('/')
        .map_or(address.len(), |i| host_from + i);
    let mut url = format!("{}/{name}", &address[..path_at]);
    if let Some(query) = query {
        url.push('?');
        url.push_str(query);
    }
    ScratchDatabase { url, name, base }
}

impl Drop for ScratchDatabase {
    fn drop(&mut self) {
        let drop = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        run_on_drop(&self.base, drop);
    }
}

/// A name no other scratch schema or database has, even in another test process: the
/// process id, a count within the process, and the time.
fn scratch_name() -> String {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("tessera_test_{}_{n}_{nanos}", std::process::id())
}

/// A connection to the server at `base`, to create and drop scratch objects.
async fn admin_connection(base: &str) -> sqlx::PgConnection {
    PgConnectOptions::from_str(base)
        .expect("TESSERA_TEST_POSTGRES_URL is a postgres:// URL")
        .connect()
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL at {base} is needed by this test: {e}"))
}

/// Runs `sql` on the server at `base`, from a `Drop`: scratch objects are dropped from async
/// tests too, so on a thread of its own with its own runtime. Failures are ignored (a test
/// that failed may have left the server unreachable).
fn run_on_drop(base: &str, sql: String) {
    let base = base.to_owned();
    let _ = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build();
        if let Ok(runtime) = runtime {
            runtime.block_on(async {
                let Ok(options) = PgConnectOptions::from_str(&base) else {
                    return;
                };
                if let Ok(mut admin) = options.connect().await {
                    let _ = sqlx::query(&sql).execute(&mut admin).await;
                }
            });
        }
    })
    .join();
}

/// A small tmpfs mounted for one test, which the test fills to play a full disk, and
/// unmounts when dropped. Mounting needs root (or `CAP_SYS_ADMIN`).
#[derive(Debug)]
pub struct SmallDisk {
    /// Where it is mounted.
    pub path: std::path::PathBuf,
}

impl SmallDisk {
    /// Mounts a tmpfs of `size` (`mount -o size=`, e.g. `2m`). `None`, with the reason
    /// printed, where mounting is not permitted, so that the test can skip; under `CI=true`
    /// it panics instead, so that a CI run never passes by skipping.
    pub fn mount(size: &str) -> Option<Self> {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("tessera-disk-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&path).expect("a folder to mount on");
        let mounted = std::process::Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(&path)
            .output();
        let reason = match mounted {
            Ok(out) if out.status.success() => return Some(Self { path }),
            Ok(out) => String::from_utf8_lossy(&out.stderr).trim().to_owned(),
            Err(e) => format!("mount could not run: {e}"),
        };
        let _ = std::fs::remove_dir(&path);
        let reason = format!("a tmpfs cannot be mounted here ({reason})");
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{reason}; CI must run the full-disk tests (as root)"
        );
        eprintln!("skipped: {reason}");
        None
    }

    /// Fills the disk with a file of zeros until the file system refuses more.
    pub fn fill(&self) {
        use std::io::Write;
        let mut filler = std::fs::File::create(self.filler()).expect("the filler file");
        for chunk in [1 << 16, 512] {
            let zeros = vec![0u8; chunk];
            while filler.write_all(&zeros).is_ok() {}
        }
    }

    /// Frees the space [`fill`](Self::fill) took.
    pub fn free(&self) {
        std::fs::remove_file(self.filler()).expect("the filler removed");
    }

    fn filler(&self) -> std::path::PathBuf {
        self.path.join("filler")
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        // Lazily: a pool closing in the background may still hold the database open.
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.path)
            .status();
        let _ = std::fs::remove_dir(&self.path);
    }
}
