//! The embedded SQLite backend: one file, created on first use readable by its owner only,
//! WAL with `synchronous=FULL` so that an acknowledged write survives a crash. The schema is
//! in `migrations/sqlite/`; the queries are shared with PostgreSQL (`sql.rs`), so this module
//! only connects and gives the statements SQLite words its own way.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Connection, Sqlite};

use crate::sql::{Dialect, SqlStore};
use crate::{Result, StoreError};

/// A [`Store`](crate::Store) in one SQLite file.
pub type SqliteStore = SqlStore<Sqlite>;

impl SqliteStore {
    /// Opens the database at `url` (`sqlite://PATH`, `sqlite:PATH` or a path), creating it
    /// when missing. A new file is readable and writable by its owner only (mode 0600), and
    /// SQLite gives its `-wal` and `-shm` files the mode of the database file.
    pub async fn open(url: &str) -> Result<Self> {
        let (spec, path) = parse(url)?;
        match create_private(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
                return Err(StoreError::File { path, source: e });
            }
            _ => {}
        }
        Self::connect_file(spec).await
    }

    /// Opens the database at `url` like [`open`](Self::open), but only if its file exists:
    /// otherwise [`StoreError::Missing`], and nothing is created.
    pub async fn open_existing(url: &str) -> Result<Self> {
        let (spec, path) = parse(url)?;
        // An error other than absence (a folder without search permission) is SQLite's to
        // report.
        if let Ok(false) = path.try_exists() {
            return Err(StoreError::Missing(path));
        }
        Self::connect_file(spec).await
    }

    /// Writes a consistent copy of the database into the new file `out`, mode 0600, while
    /// other connections and processes go on reading and writing (`VACUUM INTO`, which also
    /// leaves out free pages). An existing `out` is never overwritten; after a failure the
    /// new file is removed.
    pub async fn backup_into(&self, out: &Path) -> Result<()> {
        let file_error = |source| StoreError::File {
            path: out.to_owned(),
            source,
        };
        let target = out.to_str().ok_or_else(|| {
            file_error(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "the path is not UTF-8",
            ))
        })?;
        // Created here for its mode and so that nothing is overwritten: SQLite writes into
        // an empty file as into a missing one.
        create_private(out).map_err(file_error)?;
        let copied = async {
            sqlx::query("VACUUM INTO $1")
                .bind(target)
                .execute(&self.pool)
                .await?;
            // SQLite does not promise to sync what VACUUM INTO wrote.
            std::fs::File::open(out)
                .and_then(|file| file.sync_all())
                .map_err(file_error)
        }
        .await;
        if copied.is_err() {
            let _ = std::fs::remove_file(out);
        }
        copied
    }

    /// Connects to an existing file; SQLite is never asked to create one.
    ///
    /// A connection still inside a transaction when it goes back to the pool is closed, not
    /// reused. A COMMIT that fails with `SQLITE_FULL` (or another I/O error) may have been
    /// rolled back by SQLite itself; sqlx's own ROLLBACK then fails and it goes on counting
    /// the connection as inside a transaction, so that its next transaction begins as a
    /// SAVEPOINT that opens one SQLite never ends: every later "commit" on it would only
    /// release a savepoint (reported as done, never durable) while it holds the write lock
    /// against every other connection, until a restart. Closing it rolls back whatever it
    /// held; the pool opens a fresh one.
    async fn connect_file(spec: &str) -> Result<Self> {
        let options = SqliteConnectOptions::from_str(&format!("sqlite://{spec}"))?
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .foreign_keys(true)
            .busy_timeout(Duration::from_secs(5));
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .after_release(|connection, _| {
                Box::pin(async move {
                    // Runs the rollback a dropped transaction queued, then looks.
                    connection.ping().await?;
                    Ok(!connection.is_in_transaction())
                })
            });
        Self::connect(pool, options, sqlx::migrate!("migrations/sqlite")).await
    }
}

/// The part of `url` after the scheme (with any `?` options) and the file it names.
fn parse(url: &str) -> Result<(&str, PathBuf)> {
    let spec = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
        .unwrap_or(url);
    let path = spec.split('?').next().unwrap_or(spec);
    if path.is_empty() || path.contains(":memory:") {
        return Err(StoreError::UnsupportedUrl(url.to_owned()));
    }
    Ok((spec, PathBuf::from(path)))
}

/// Creates `path` empty with mode 0600, failing if it exists. SQLite takes an empty file for
/// a new database, and gives its `-wal` and `-shm` files the mode of the database file, so
/// that the registry is never readable by others, not even for a moment.
fn create_private(path: &Path) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path).map(drop)
}

impl Dialect for Sqlite {
    // `seq` is AUTOINCREMENT (migrations/sqlite/0005): never reused after a prune, and
    // SQLite's one writer at a time commits in number order.
    const REVOKED_SINCE: &'static str = "SELECT seq, jti, client_id, exp \
        FROM revoked_tokens WHERE seq > $1 AND exp > $2 ORDER BY seq";
    const REVOKE_LOCK: Option<&'static str> = None;
    // TRUNCATE: the -wal file is left empty, not only marked as reusable.
    const CHECKPOINT: Option<&'static str> = Some("PRAGMA wal_checkpoint(TRUNCATE)");
    // hex(NULL) is '', so the previous hash is spelled out as null.
    const PACKED_CLIENTS: Option<&'static str> = Some(
        "SELECT coalesce(json_group_array(json_array(id, plan, label, hex(secret_hash), \
         CASE WHEN previous_secret_hash IS NULL THEN NULL ELSE hex(previous_secret_hash) END, \
         previous_secret_expires_at, auth_method, enabled, created_at, updated_at, \
         tls_subject_dn, tls_san_dns, tls_san_uri, jwks, jwks_uri, \
         json_array(org_id, org_enabled))), '[]') AS page FROM ({page})",
    );
    // sqlx binds a numbered parameter after asking SQLite its name, which SQLite finds by
    // scanning the statement's list of names: 15,000 `$N` made each statement quadratic
    // (30 s of CPU for 100,000 clients). Plain `?` has no name and binds in order.
    // One writer at a time, waited for up to the busy timeout (5 s) and no longer.
    const WRITE_BOUNDS: Option<&'static str> = None;
    fn bulk_param(_: usize) -> String {
        "?".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn open_existing_creates_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("typo.db");
        let url = format!("sqlite://{}", path.display());
        let err = SqliteStore::open_existing(&url).await.unwrap_err();
        assert!(
            matches!(&err, StoreError::Missing(p) if *p == path),
            "{err}"
        );
        assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none());
        drop(SqliteStore::open(&url).await.unwrap());
        SqliteStore::open_existing(&url).await.unwrap();
    }

    #[tokio::test]
    async fn a_backup_is_a_new_private_file() {
        use crate::Store;
        let dir = tempfile::tempdir().unwrap();
        let url = |name: &str| format!("sqlite://{}", dir.path().join(name).display());
        let store = SqliteStore::open(&url("t.db")).await.unwrap();
        store.check_value("k", b"v").await.unwrap();
        let out = dir.path().join("copy.db");
        store.backup_into(&out).await.unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&out).unwrap().permissions().mode();
            assert_eq!(format!("{:o}", mode & 0o777), "600");
        }
        // Never overwritten.
        let before = std::fs::read(&out).unwrap();
        let err = store.backup_into(&out).await.unwrap_err();
        assert!(
            matches!(&err, StoreError::File { path, .. } if *path == out),
            "{err}"
        );
        assert_eq!(std::fs::read(&out).unwrap(), before);
        let copy = SqliteStore::open_existing(&url("copy.db")).await.unwrap();
        assert_eq!(copy.check_value("k", b"other").await.unwrap(), b"v");
    }

    #[tokio::test]
    async fn a_checkpoint_empties_the_wal() {
        use crate::Store;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let store = SqliteStore::open(&format!("sqlite://{}", path.display()))
            .await
            .unwrap();
        let wal = || {
            std::fs::metadata(dir.path().join("t.db-wal"))
                .unwrap()
                .len()
        };
        store.check_value("k", b"v").await.unwrap();
        assert!(wal() > 0);
        assert!(store.checkpoint().await.unwrap());
        assert_eq!(wal(), 0);
    }

    /// Transactions that fail one after another on a full disk (a tmpfs the test fills):
    /// none is reported done unless it is durable, and writes work again as soon as space
    /// returns, with the same store. A connection whose COMMIT failed was reused, and every
    /// later transaction on it only released a savepoint.
    #[tokio::test]
    async fn on_a_full_disk_no_write_is_reported_done_unless_durable_and_writes_recover() {
        use crate::Store;
        let Some(disk) = crate::testing::SmallDisk::mount("2m") else {
            return;
        };
        let url = format!("sqlite://{}", disk.path.join("t.db").display());
        let store = SqliteStore::open(&url).await.unwrap();
        store.put_plan(&sample_plan()).await.unwrap();
        disk.fill();
        let mut reported = Vec::new();
        let mut failed = 0;
        for n in 0..12 {
            match store.insert_client(&sample_client(n)).await {
                Ok(()) => reported.push(n),
                Err(StoreError::Backend(_)) => failed += 1,
                Err(other) => panic!("{other}"),
            }
        }
        assert!(
            failed > 0,
            "the disk was not full: {reported:?} all written"
        );
        // Another connection (a CLI, another process) sees what was reported done.
        let other = SqliteStore::open_existing(&url).await.unwrap();
        for &n in &reported {
            let id = sample_client(n).id;
            assert!(
                other.client(&id).await.unwrap().is_some(),
                "{id} was reported done"
            );
        }
        disk.free();
        // No restart: the same store writes at once, and so does the other connection.
        for n in 100..103 {
            store.insert_client(&sample_client(n)).await.unwrap();
            assert!(other.client(&sample_client(n).id).await.unwrap().is_some());
        }
        other.insert_client(&sample_client(200)).await.unwrap();
        store.pool.close().await;
        other.pool.close().await;
    }

    /// A full disk (a tmpfs the test fills) fails every kind of write with an error, none
    /// reported done, and nothing of them is stored; once space returns the same store
    /// writes again, without a restart, and another connection is never locked out.
    #[tokio::test]
    async fn on_a_full_disk_every_write_fails_unreported_and_writes_recover() {
        use crate::{IdempotentAnswer, Revoked, SigningKey, Store, TrustPolicy, Usage};
        let Some(disk) = crate::testing::SmallDisk::mount("2m") else {
            return;
        };
        let url = format!("sqlite://{}", disk.path.join("t.db").display());
        let store = SqliteStore::open(&url).await.unwrap();
        let other = SqliteStore::open_existing(&url).await.unwrap();
        let plan = |name: &str| crate::Plan {
            name: name.into(),
            ..sample_plan()
        };
        let key = |kid: &str| SigningKey {
            kid: kid.into(),
            alg: tessera_proto::Algorithm::EdDSA,
            public_jwk: "{}".into(),
            private_sealed: vec![9; 48],
            created_at: 0,
            activates_at: 0,
        };
        let policy = |name: &str| TrustPolicy {
            name: name.into(),
            client_id: sample_client(0).id,
            issuer: "https://issuer.example".into(),
            jwks_uri: None,
            audience: "tessera".into(),
            subject: "s".into(),
            claims: "{}".into(),
            max_assertion_ttl: None,
            created_at: 0,
        };
        store.put_plan(&plan("p")).await.unwrap();
        store.put_plan(&plan("unused")).await.unwrap();
        store.insert_client(&sample_client(0)).await.unwrap();
        store.insert_client(&sample_client(1)).await.unwrap();
        store.insert_key(&key("k0")).await.unwrap();
        store.put_trust_policy(&policy("t0")).await.unwrap();
        let before = (
            store.clients().await.unwrap(),
            store.plans().await.unwrap(),
            store.keys().await.unwrap(),
            store.trust_policies().await.unwrap(),
        );
        let relabelled = crate::Client {
            label: "changed".into(),
            ..sample_client(0)
        };
        let answer = IdempotentAnswer {
            owner: "admin".into(),
            key: "k".into(),
            fingerprint: vec![1],
            answer: vec![2],
            created_at: 0,
        };
        let revoked = Revoked {
            jti: "j".into(),
            client_id: "c0".into(),
            exp: i64::MAX,
        };
        let usage = Usage {
            client_id: "c0".into(),
            day: "2030-01-01".into(),
            issued: 1,
            refused: 0,
        };
        // An empty log: each write must grow it.
        assert!(store.checkpoint().await.unwrap());

        disk.fill();
        let answered: Vec<(&str, Result<()>)> = vec![
            ("insert", store.insert_client(&sample_client(2)).await),
            (
                "insert once",
                store
                    .insert_clients_once(&[sample_client(3)], Some(&answer))
                    .await
                    .map(drop),
            ),
            ("update", store.update_client(&relabelled).await.map(drop)),
            (
                "delete",
                store.delete_client(&sample_client(1).id).await.map(drop),
            ),
            ("plan", store.put_plan(&plan("new")).await),
            ("plan removal", store.delete_plan("unused").await.map(drop)),
            ("key", store.insert_key(&key("k1")).await),
            ("key removal", store.delete_key("k0").await.map(drop)),
            ("policy", store.put_trust_policy(&policy("t1")).await),
            (
                "policy removal",
                store.delete_trust_policy("t0").await.map(drop),
            ),
            ("revocation", store.revoke(&revoked).await),
            ("usage", store.add_usage(std::slice::from_ref(&usage)).await),
            ("note", store.replace_value("n", b"v").await.map(drop)),
        ];
        for (what, outcome) in &answered {
            assert!(
                matches!(outcome, Err(StoreError::Backend(_))),
                "{what} on a full disk: {outcome:?}"
            );
        }
        disk.free();

        // Nothing of it is stored, as another connection sees it; and it is not locked out.
        let after = (
            other.clients().await.unwrap(),
            other.plans().await.unwrap(),
            other.keys().await.unwrap(),
            other.trust_policies().await.unwrap(),
        );
        assert_eq!(after, before);
        assert!(other.revoked_since(0, 0).await.unwrap().is_empty());
        assert!(other.usage(&sample_client(0).id).await.unwrap().is_empty());
        other.put_plan(&plan("from another")).await.unwrap();
        // The same store writes again, at once.
        store.insert_client(&sample_client(2)).await.unwrap();
        assert!(store.update_client(&relabelled).await.unwrap());
        assert!(store.delete_client(&sample_client(1).id).await.unwrap());
        store.insert_key(&key("k1")).await.unwrap();
        store.revoke(&revoked).await.unwrap();
        store.add_usage(&[usage]).await.unwrap();
        let clients = other.clients().await.unwrap();
        let labels: Vec<(&str, &str)> = clients
            .iter()
            .map(|c| (c.id.as_str(), c.label.as_str()))
            .collect();
        assert_eq!(labels[0], ("c0", "changed"));
        assert_eq!(labels[1].0, "c2");
        assert_eq!(other.keys().await.unwrap().len(), 2);
        assert_eq!(other.revoked_since(0, 0).await.unwrap().len(), 1);
        assert_eq!(other.usage(&sample_client(0).id).await.unwrap().len(), 1);
        store.pool.close().await;
        other.pool.close().await;
    }

    fn sample_plan() -> crate::Plan {
        crate::Plan {
            name: "p".into(),
            scopes: tessera_proto::ScopeSet::parse_names("a").unwrap(),
            token_ttl: 60,
            token_rate: None,
            reuse_percent: None,
            introspect_any: false,
            limit_per: crate::LimitPer::Client,
            dpop: crate::DpopPolicy::Allowed,
            api_limits: Default::default(),
            created_at: 0,
            updated_at: 0,
        }
    }

    /// A client whose row takes a few hundred bytes, so that a full disk refuses it.
    fn sample_client(n: usize) -> crate::Client {
        crate::Client {
            id: tessera_proto::ClientId::parse(&format!("c{n}")).unwrap(),
            plan: "p".into(),
            label: "x".repeat(300),
            auth_method: crate::AuthMethod::ClientSecretBasic,
            credential: crate::Credential::secret(vec![1; 32]),
            enabled: true,
            org: None,
            org_enabled: true,
            created_at: 0,
            updated_at: 0,
        }
    }

    /// The durability promise rests on these two settings of every connection: an
    /// acknowledged write is in the WAL and synced before the answer (SQLite's
    /// `synchronous=FULL` is 2).
    #[tokio::test]
    async fn every_connection_syncs_each_commit_in_wal_mode() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&format!("sqlite://{}", dir.path().join("t.db").display()))
            .await
            .unwrap();
        // More than one connection: each must carry the settings, not only the first.
        let mut held = Vec::new();
        for _ in 0..3 {
            let mut connection = store.pool.acquire().await.unwrap();
            let synchronous: i64 = sqlx::query_scalar("PRAGMA synchronous")
                .fetch_one(&mut *connection)
                .await
                .unwrap();
            let journal: String = sqlx::query_scalar("PRAGMA journal_mode")
                .fetch_one(&mut *connection)
                .await
                .unwrap();
            assert_eq!((synchronous, journal.as_str()), (2, "wal"));
            held.push(connection);
        }
    }

    /// 0013 rebuilds `clients` in id order: every client, its change triggers and the trust
    /// policies that reference it (which the drop of the old table would cascade away) are
    /// all still there, and the clients come back from a packed page as they went in.
    #[tokio::test]
    async fn clustering_clients_by_id_keeps_clients_triggers_and_trust_policies() {
        use crate::Store;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let options = SqliteConnectOptions::from_str(&format!("sqlite://{}", path.display()))
            .unwrap()
            .create_if_missing(true)
            .foreign_keys(true);
        let mut before = sqlx::migrate!("migrations/sqlite");
        let upto: Vec<_> = before
            .migrations
            .iter()
            .filter(|m| m.version < 13)
            .cloned()
            .collect();
        before.migrations = upto.into();
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(options.clone())
            .await
            .unwrap();
        before.run(&pool).await.unwrap();
        for statement in [
            "INSERT INTO plans (name, scopes, token_ttl, created_at, updated_at) \
             VALUES ('p', 'a', 60, 0, 0)",
            "INSERT INTO clients (id, plan, label, secret_hash, previous_secret_hash, \
             previous_secret_expires_at, auth_method, enabled, created_at, updated_at) \
             VALUES ('tc_b', 'p', 'second', x'0102', x'0304', 99, 'client_secret_basic', 1, 1, 2)",
            "INSERT INTO clients (id, plan, label, secret_hash, auth_method, enabled, \
             created_at, updated_at, jwks_uri) \
             VALUES ('tc_a', 'p', 'first', x'05', 'private_key_jwt', 0, 3, 4, 'https://k')",
            "INSERT INTO trust_policies (name, client_id, issuer, audience, subject, claims, \
             created_at) VALUES ('t', 'tc_a', 'https://i', 'aud', 'sub', '{}', 5)",
        ] {
            sqlx::query(statement).execute(&pool).await.unwrap();
        }
        pool.close().await;

        let store = SqliteStore::open_existing(&format!("sqlite://{}", path.display()))
            .await
            .unwrap();
        let table: String =
            sqlx::query_scalar("SELECT sql FROM sqlite_master WHERE name = 'clients'")
                .fetch_one(&store.pool)
                .await
                .unwrap();
        assert!(table.ends_with("WITHOUT ROWID"), "{table}");
        let clients = store.clients_page(None, None, 10).await.unwrap();
        let ids: Vec<&str> = clients.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["tc_a", "tc_b"]);
        assert_eq!(
            clients[0].credential,
            crate::Credential::Keys(crate::KeySource::JwksUri("https://k".into()))
        );
        assert!(!clients[0].enabled);
        assert_eq!(clients[1].label, "second");
        assert_eq!(
            clients[1].credential,
            crate::Credential::Secret {
                hash: vec![1, 2],
                previous: Some((vec![3, 4], 99)),
            }
        );
        assert_eq!((clients[1].created_at, clients[1].updated_at), (1, 2));
        let policies = store.trust_policies().await.unwrap();
        assert_eq!(policies.len(), 1);
        // The change triggers came back with the table.
        let latest = store.latest_change().await.unwrap();
        sqlx::query("UPDATE clients SET enabled = 1 WHERE id = 'tc_a'")
            .execute(&store.pool)
            .await
            .unwrap();
        let changes = store.changes_since(latest, 10).await.unwrap().unwrap();
        assert_eq!(changes.clients.len(), 1);
    }
}
