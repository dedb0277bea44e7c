//! Custody of the master key: where it comes from (`TESSERA_MASTER_KEY`, a file the operator
//! keeps, or a file generated beside the embedded database, 0600), the checks on a key file
//! (a regular file its owner alone can read), and the check value that ties a database to
//! the key its keys were sealed and its secrets hashed under.

use std::io::Write;
use std::path::{Path, PathBuf};

use aws_lc_rs::rand;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use tessera_proto::ClientSecret;
use thiserror::Error;
use zeroize::Zeroizing;

use super::{Secrets, SecretsError, MASTER_KEY_LEN};

/// Why a server or a command cannot use its master key with its database.
#[derive(Debug, Error)]
pub enum MasterKeyError {
    /// No key was given, and the database has no file beside it to keep a generated one.
    #[error("set TESSERA_MASTER_KEY or --master-key-file for this database")]
    NoDefaultFile,
    /// The key could not be read or generated.
    #[error("the master key is needed to read this database's keys and secrets")]
    Load(#[from] SecretsError),
    /// The database was first used with another key.
    #[error(
        "this master key does not belong to this database: its signing keys and client \
         secrets were sealed under another one"
    )]
    Mismatch,
    /// The default key file outlived its database: see [`ExistingKeyFile`].
    #[error(
        "the database {} {state}, but the master key file {} beside it says a database was \
         there: if it moved, point --database at it or restore a backup (README: Backup and \
         restore); to start a new one under this key, pass --init",
        database.display(),
        key.display()
    )]
    Outlived {
        /// The SQLite file.
        database: PathBuf,
        /// The key file beside it.
        key: PathBuf,
        /// What is wrong with the database: "is missing" or "is empty".
        state: &'static str,
    },
    /// The database failed.
    #[error(transparent)]
    Store(#[from] tessera_store::StoreError),
}

/// What the operator said about the master key.
#[derive(Debug, Clone)]
pub enum MasterKeyChoice {
    /// The key itself, base64url (`TESSERA_MASTER_KEY`).
    Value(ClientSecret),
    /// A file the operator keeps (`--master-key-file`); never generated.
    File(PathBuf),
    /// Nothing: the embedded default keeps it in `DATABASE.key` beside this SQLite file, or
    /// `None` for a database that is no file.
    BesideDatabase(Option<PathBuf>),
}

/// Loads the master key for `store`, by the policy every command and the server share:
///
/// - A key file beside the database is generated only while it is missing and the database
///   holds nothing sealed or hashed under another key (no signing key, no client).
/// - The first use stores a check value in the database; a later key that does not match it
///   is refused, instead of sealing keys and hashing secrets that no server could use.
pub async fn load_master_key(
    choice: MasterKeyChoice,
    store: &dyn tessera_store::Store,
) -> Result<(Secrets, MasterKeyOrigin), MasterKeyError> {
    let source = match choice {
        MasterKeyChoice::Value(value) => MasterKeySource::Value(value),
        MasterKeyChoice::File(path) => MasterKeySource::File {
            path,
            generate: false,
        },
        MasterKeyChoice::BesideDatabase(None) => return Err(MasterKeyError::NoDefaultFile),
        MasterKeyChoice::BesideDatabase(Some(db)) => {
            let path = key_file_beside(&db);
            // Deciding takes reading the registry, so it is asked only when the file is
            // missing.
            let generate = !path.exists()
                && store.keys().await?.is_empty()
                && store.clients_page(None, None, 1).await?.is_empty();
            MasterKeySource::File { path, generate }
        }
    };
    let (secrets, origin) = Secrets::load(&source)?;
    let check = secrets.check_value();
    if store.check_value("master_key_check", &check).await? != check {
        return Err(MasterKeyError::Mismatch);
    }
    Ok((secrets, origin))
}

/// The master key file the embedded default keeps beside the SQLite file `database`: its
/// path with `.key` appended.
pub fn key_file_beside(database: &Path) -> PathBuf {
    let mut path = database.as_os_str().to_owned();
    path.push(".key");
    PathBuf::from(path)
}

impl MasterKeyChoice {
    /// The default key file beside this choice's SQLite database, when it exists.
    pub fn existing_key_file(&self) -> Option<ExistingKeyFile> {
        let Self::BesideDatabase(Some(database)) = self else {
            return None;
        };
        let key = key_file_beside(database);
        key.exists().then(|| ExistingKeyFile {
            database: database.clone(),
            key,
        })
    }
}

/// The default master key file, found beside an SQLite database before `serve` or a command
/// that writes opens it. The key says a database was there: a missing or empty one beside it
/// was moved or lost (or `--database` is mistyped), and starting afresh would make a new
/// signing key with every client gone, so both are refused (unless the operator says
/// `--init`). A key file that is new too is a first start.
#[derive(Debug, Clone)]
pub struct ExistingKeyFile {
    database: PathBuf,
    key: PathBuf,
}

impl ExistingKeyFile {
    /// Refuses a missing database; asked before opening it, which would create it.
    pub fn refuse_missing_database(&self) -> Result<(), MasterKeyError> {
        if self.database.exists() {
            return Ok(());
        }
        Err(self.outlived("is missing"))
    }

    /// Refuses an empty database, once it is open.
    pub async fn refuse_empty_database(
        &self,
        store: &dyn tessera_store::Store,
    ) -> Result<(), MasterKeyError> {
        if !store.is_empty().await? {
            return Ok(());
        }
        Err(self.outlived("is empty"))
    }

    fn outlived(&self, state: &'static str) -> MasterKeyError {
        MasterKeyError::Outlived {
            database: self.database.clone(),
            key: self.key.clone(),
            state,
        }
    }
}

/// Where the master key comes from.
#[derive(Debug, Clone)]
pub enum MasterKeySource {
    /// The key itself, base64url (from `TESSERA_MASTER_KEY`).
    Value(ClientSecret),
    /// A file holding the key in base64url; `generate` allows creating it when missing.
    File {
        /// The file.
        path: PathBuf,
        /// Whether a missing file may be created with a fresh key.
        generate: bool,
    },
}

/// What loading the master key did, so that the caller can say so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MasterKeyOrigin {
    /// Taken from the environment.
    Env,
    /// Read from this file.
    File(PathBuf),
    /// Generated into this new file.
    Generated(PathBuf),
}

impl Secrets {
    /// Loads the master key and derives the pepper and the sealing key.
    pub fn load(source: &MasterKeySource) -> Result<(Self, MasterKeyOrigin), SecretsError> {
        match source {
            MasterKeySource::Value(value) => {
                Ok((Self::from_encoded(value.expose())?, MasterKeyOrigin::Env))
            }
            MasterKeySource::File { path, generate } => {
                match std::fs::read_to_string(path).map(Zeroizing::new) {
                    Ok(text) => {
                        private_to_owner(path)?;
                        Ok((
                            Self::from_encoded(text.trim())?,
                            MasterKeyOrigin::File(path.clone()),
                        ))
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound && *generate => {
                        match generate_key_file(path) {
                            Ok(secrets) => Ok((secrets, MasterKeyOrigin::Generated(path.clone()))),
                            // Another process created it first: use theirs.
                            Err(SecretsError::Io { source, .. })
                                if source.kind() == std::io::ErrorKind::AlreadyExists =>
                            {
                                Self::load(&MasterKeySource::File {
                                    path: path.clone(),
                                    generate: false,
                                })
                            }
                            Err(e) => Err(e),
                        }
                    }
                    Err(source) => Err(SecretsError::Io {
                        path: path.clone(),
                        source,
                    }),
                }
            }
        }
    }
}

/// Refuses a key file that is not a regular file owned by this process's user with no
/// group or other permission bits: anyone else who can read it can unseal every signing
/// key and forge the pepper. (A symbolic link is followed, as secret mounts use them.)
fn private_to_owner(path: &Path) -> Result<(), SecretsError> {
    let exposed = |reason: String| SecretsError::Exposed {
        path: path.to_owned(),
        reason,
    };
    let meta = std::fs::metadata(path).map_err(|source| SecretsError::Io {
        path: path.to_owned(),
        source,
    })?;
    if !meta.is_file() {
        return Err(exposed("not a regular file".into()));
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        if meta.mode() & 0o077 != 0 {
            return Err(exposed(format!(
                "its mode {:o} lets others than its owner in",
                meta.mode() & 0o777
            )));
        }
        // This process's user: the owner of its own /proc entry (Linux), without unsafe code.
        if let Ok(me) = std::fs::metadata("/proc/self") {
            if meta.uid() != me.uid() {
                return Err(exposed(format!(
                    "owned by uid {}, not by this process's uid {}",
                    meta.uid(),
                    me.uid()
                )));
            }
        }
    }
    Ok(())
}

fn generate_key_file(path: &Path) -> Result<Secrets, SecretsError> {
    let mut raw = Zeroizing::new([0u8; MASTER_KEY_LEN]);
    rand::fill(raw.as_mut()).expect("system random source");
    let io = |source| SecretsError::Io {
        path: path.to_owned(),
        source,
    };
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(path).map_err(io)?;
    let encoded = Zeroizing::new(URL_SAFE_NO_PAD.encode(raw.as_ref()));
    writeln!(file, "{}", encoded.as_str()).map_err(io)?;
    file.sync_all().map_err(io)?;
    Ok(Secrets::from_bytes(&raw))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secrets::tests::secrets;

    #[test]
    fn key_file_is_generated_once_with_mode_0600() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.key");
        let source = MasterKeySource::File {
            path: path.clone(),
            generate: true,
        };
        let (a, origin) = Secrets::load(&source).unwrap();
        assert_eq!(origin, MasterKeyOrigin::Generated(path.clone()));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let (b, origin) = Secrets::load(&source).unwrap();
        assert_eq!(origin, MasterKeyOrigin::File(path));
        let secret = ClientSecret::new("x");
        assert!(b.verify_secret(&secret, &a.hash_secret(&secret)));
        assert!(Secrets::from_encoded("short").is_err());
        assert_eq!(format!("{a:?}"), "Secrets([redacted])");
    }

    fn io_kind(result: Result<(Secrets, MasterKeyOrigin), SecretsError>) -> std::io::ErrorKind {
        match result {
            Err(SecretsError::Io { source, .. }) => source.kind(),
            other => panic!("{:?}", other.map(|(_, origin)| origin)),
        }
    }

    #[test]
    fn a_missing_key_file_is_generated_only_when_allowed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.key");
        let source = MasterKeySource::File {
            path: path.clone(),
            generate: false,
        };
        assert_eq!(
            io_kind(Secrets::load(&source)),
            std::io::ErrorKind::NotFound
        );
        assert!(!path.exists());
    }

    #[cfg(unix)]
    #[test]
    fn a_key_path_taken_meanwhile_is_read_and_never_replaced() {
        // A dangling link reads as missing, yet creating the file finds the name taken: the
        // position of a server that lost the race to create the file. It reads what is
        // there instead of writing over it, and here nothing can be read.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.key");
        std::os::unix::fs::symlink(dir.path().join("elsewhere"), &path).unwrap();
        let source = MasterKeySource::File {
            path: path.clone(),
            generate: true,
        };
        assert_eq!(
            io_kind(Secrets::load(&source)),
            std::io::ErrorKind::NotFound
        );
        assert!(std::fs::symlink_metadata(&path).unwrap().is_symlink());
        assert!(!dir.path().join("elsewhere").exists());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_key_file_that_cannot_be_created_says_why() {
        // Reading "m.key/" finds nothing; creating it fails because a file name cannot end
        // in a slash. The error is the creation's, not a second "not found".
        let dir = tempfile::tempdir().unwrap();
        let path = PathBuf::from(format!("{}/m.key/", dir.path().display()));
        let source = MasterKeySource::File {
            path,
            generate: true,
        };
        assert_eq!(
            io_kind(Secrets::load(&source)),
            std::io::ErrorKind::IsADirectory
        );
    }

    async fn fresh_store(dir: &Path) -> (PathBuf, std::sync::Arc<dyn tessera_store::Store>) {
        let db = dir.join("t.db");
        let url = format!("sqlite://{}", db.display());
        (db, tessera_store::open(&url).await.unwrap())
    }

    #[tokio::test]
    async fn the_key_beside_a_database_is_made_once_and_another_key_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (db, store) = fresh_store(dir.path()).await;
        let beside = || MasterKeyChoice::BesideDatabase(Some(db.clone()));
        let key_file = dir.path().join("t.db.key");

        let (first, origin) = load_master_key(beside(), store.as_ref()).await.unwrap();
        assert_eq!(origin, MasterKeyOrigin::Generated(key_file.clone()));
        let (again, origin) = load_master_key(beside(), store.as_ref()).await.unwrap();
        assert_eq!(origin, MasterKeyOrigin::File(key_file));
        assert_eq!(again.check_value(), first.check_value());

        let other = ClientSecret::new(URL_SAFE_NO_PAD.encode([9; MASTER_KEY_LEN]));
        assert_ne!(
            Secrets::from_encoded(other.expose()).unwrap().check_value(),
            first.check_value()
        );
        let refused = load_master_key(MasterKeyChoice::Value(other), store.as_ref()).await;
        assert!(matches!(refused, Err(MasterKeyError::Mismatch)));
        let no_file = load_master_key(MasterKeyChoice::BesideDatabase(None), store.as_ref()).await;
        assert!(matches!(no_file, Err(MasterKeyError::NoDefaultFile)));
    }

    #[tokio::test]
    async fn no_key_is_generated_for_a_database_that_holds_a_key_or_a_client() {
        for holds in ["a signing key", "a client"] {
            let dir = tempfile::tempdir().unwrap();
            let (db, store) = fresh_store(dir.path()).await;
            let clock: crate::clock::Clock = crate::clock::ManualClock::at(1_000).into();
            let admin = crate::registrar::Registrar::new(store.as_ref(), &clock);
            let earlier = secrets();
            if holds == "a signing key" {
                let alg = tessera_proto::Algorithm::EdDSA;
                admin.rotate_keys(&earlier, alg, 0).await.unwrap();
            } else {
                admin.set_plan("p", "news-api", None).await.unwrap();
                let method = tessera_store::AuthMethod::ClientSecretBasic;
                admin
                    .create_client(&earlier, "p", "c", method)
                    .await
                    .unwrap();
            }
            let choice = MasterKeyChoice::BesideDatabase(Some(db));
            let result = load_master_key(choice, store.as_ref()).await;
            assert!(
                matches!(result, Err(MasterKeyError::Load(SecretsError::Io { .. }))),
                "{holds}"
            );
            assert!(!dir.path().join("t.db.key").exists(), "{holds}");
        }
    }

    #[cfg(unix)]
    #[test]
    fn a_key_file_others_could_read_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.key");
        let source = MasterKeySource::File {
            path: path.clone(),
            generate: true,
        };
        Secrets::load(&source).unwrap();
        for mode in [0o640, 0o604, 0o644] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            let refused = Secrets::load(&source).unwrap_err();
            assert!(matches!(refused, SecretsError::Exposed { .. }), "{mode:o}");
            let message = refused.to_string();
            assert!(
                message.contains("chmod 600") && !message.contains("generate"),
                "{message}"
            );
        }
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o400)).unwrap();
        assert!(
            Secrets::load(&source).is_ok(),
            "read-only for the owner is fine"
        );
        // A directory where the file should be is no key file.
        let folder = MasterKeySource::File {
            path: dir.path().to_owned(),
            generate: false,
        };
        assert!(Secrets::load(&folder).is_err());
    }
}
