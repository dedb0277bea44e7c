//! HTTPS, which RFC 6749 section 3.2 requires at the token endpoint: rustls with the
//! aws-lc-rs provider, TLS 1.2 and 1.3 with rustls' safe defaults, HTTP/2 and HTTP/1.1
//! offered through ALPN (RFC 7301), session resumption by tickets (RFC 8446 section 2.2)
//! and by the server's session cache (TLS 1.2 session IDs, RFC 5246 section 7.4.1.2).
//!
//! Tickets are sealed with a random key of this process, kept across reloads, unless
//! [`TlsFiles::ticket_keys`] names a file of keys that several instances share (`tickets.rs`
//! says how tickets are sealed): then a client resumes on any of them.
//!
//! The certificate and key are PEM files. [`Tls::reload`] reads them again and swaps the
//! configuration that new handshakes use; connections already open keep theirs, so nothing
//! is dropped. A reload that fails (a half-written file, a key that does not match) keeps
//! the previous pair and says why. [`Tls::watch`] reloads when either file changes; the
//! binary also reloads on `SIGHUP`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::danger::ClientCertVerifier;
use rustls::server::ProducesTickets;
use rustls::ServerConfig;
use thiserror::Error;
use tokio_rustls::TlsAcceptor;

use crate::mtls::OfferedCertificate;

mod tickets;

/// Why a certificate and key could not be used.
#[derive(Debug, Error)]
pub enum TlsError {
    /// A file could not be read or holds no PEM object of the kind expected.
    #[error("{}: {why}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// rustls refused the pair (say the key is not the certificate's).
    #[error("the certificate and key cannot be used: {0}")]
    Rustls(#[from] rustls::Error),
}

/// The certificate chain and private key files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// PEM: the server's certificate first, then intermediates.
    pub cert: PathBuf,
    /// PEM: its private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// PEM: the CA(s) of `tls_client_auth` clients (RFC 8705 section 2.1). With it, the
    /// handshake asks for a client certificate (see `mtls.rs`).
    pub client_ca: Option<PathBuf>,
    /// Session ticket keys shared by the instances behind one name: 32 bytes in hex per
    /// line, the first one seals new tickets, every one opens them. `None`: a random key
    /// of this process.
    pub ticket_keys: Option<PathBuf>,
}

/// The TLS configuration in force, reloadable.
pub struct Tls {
    files: TlsFiles,
    current: RwLock<Arc<ServerConfig>>,
    /// Checks chains against `client_ca`, at the token endpoint.
    client_ca: RwLock<Option<Arc<dyn ClientCertVerifier>>>,
    /// The files' modification times and sizes when last loaded, to notice a change.
    seen: Mutex<Option<[(SystemTime, u64); 4]>>,
    /// Without [`TlsFiles::ticket_keys`]: the ticket keys of this process, drawn at start
    /// and kept across reloads, so that a new certificate does not void every ticket.
    own_tickets: Arc<dyn ProducesTickets>,
    /// When the certificate in force expires (its notAfter, RFC 5280 section 4.1.2.5), in
    /// Unix seconds, for `/metrics`.
    not_after: AtomicI64,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls").field("files", &self.files).finish()
    }
}

impl Tls {
    /// Loads the pair; fails if it cannot be used.
    pub fn load(files: TlsFiles) -> Result<Self, TlsError> {
        let seen = stamp(&files);
        let own_tickets = rustls::crypto::aws_lc_rs::Ticketer::new()?;
        let (config, client_ca, not_after) = server_config(&files, &own_tickets)?;
        Ok(Self {
            files,
            own_tickets,
            current: RwLock::new(Arc::new(config)),
            client_ca: RwLock::new(client_ca),
            seen: Mutex::new(seen),
            not_after: AtomicI64::new(not_after),
        })
    }

    /// The files.
    pub fn files(&self) -> &TlsFiles {
        &self.files
    }

    /// Reads the files again and uses them for new connections. On failure the pair in
    /// force stays.
    pub fn reload(&self) -> Result<(), TlsError> {
        let seen = stamp(&self.files);
        let (config, client_ca, not_after) = server_config(&self.files, &self.own_tickets)?;
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(config);
        self.not_after.store(not_after, Ordering::Relaxed);
        *self.client_ca.write().unwrap_or_else(|p| p.into_inner()) = client_ca;
        *self.seen.lock().unwrap_or_else(|p| p.into_inner()) = seen;
        tracing::info!(cert = %self.files.cert.display(), "TLS certificate reloaded");
        Ok(())
    }

    /// When the certificate in force expires, in Unix seconds.
    pub fn not_after(&self) -> i64 {
        self.not_after.load(Ordering::Relaxed)
    }

    /// The verifier of `tls_client_auth` chains, when a client CA is configured.
    pub fn client_ca(&self) -> Option<Arc<dyn ClientCertVerifier>> {
        self.client_ca
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// An acceptor with the configuration in force now.
    pub fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(Arc::clone(
            &self.current.read().unwrap_or_else(|p| p.into_inner()),
        ))
    }

    /// Checks the files every `every` and reloads when one changed (its modification time
    /// or size), until the task is dropped. A failed reload is logged once per change.
    pub async fn watch(self: Arc<Self>, every: Duration) {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut failed_at = None;
        loop {
            tick.tick().await;
            let now = stamp(&self.files);
            let known = *self.seen.lock().unwrap_or_else(|p| p.into_inner());
            if now.is_none() || now == known || now == failed_at {
                continue;
            }
            if let Err(error) = self.reload() {
                tracing::error!(%error, "the changed TLS files cannot be used; keeping the previous certificate");
                failed_at = now;
            }
        }
    }
}

fn stamp(files: &TlsFiles) -> Option<[(SystemTime, u64); 4]> {
    let one = |path: &Path| {
        let meta = std::fs::metadata(path).ok()?;
        Some((meta.modified().ok()?, meta.len()))
    };
    let optional = |path: &Option<PathBuf>| match path {
        Some(path) => one(path),
        None => Some((SystemTime::UNIX_EPOCH, 0)),
    };
    Some([
        one(&files.cert)?,
        one(&files.key)?,
        optional(&files.client_ca)?,
        optional(&files.ticket_keys)?,
    ])
}

/// The configuration, the client CA's verifier and the certificate's notAfter.
type Loaded = (ServerConfig, Option<Arc<dyn ClientCertVerifier>>, i64);

/// The verifier of `tls_client_auth` chains against the CA(s) in `path` (PEM).
pub fn client_ca(path: &Path) -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
    client_ca_verifier(
        path,
        Arc::new(rustls::crypto::aws_lc_rs::default_provider()),
    )
}

fn client_ca_verifier(
    path: &Path,
    provider: Arc<rustls::crypto::CryptoProvider>,
) -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
    let file_error = |why: String| TlsError::File {
        path: path.to_owned(),
        why,
    };
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(path).map_err(|e| file_error(e.to_string()))? {
        let cert = cert.map_err(|e| file_error(e.to_string()))?;
        roots
            .add(cert)
            .map_err(|e| file_error(format!("not a CA certificate: {e}")))?;
    }
    if roots.is_empty() {
        return Err(file_error("no CERTIFICATE in it".into()));
    }
    rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .map_err(|e| file_error(e.to_string()))
}

fn server_config(
    files: &TlsFiles,
    own_tickets: &Arc<dyn ProducesTickets>,
) -> Result<Loaded, TlsError> {
    let file_error = |path: &Path, why: String| TlsError::File {
        path: path.to_owned(),
        why,
    };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&files.cert)
        .map_err(|e| file_error(&files.cert, e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| file_error(&files.cert, e.to_string()))?;
    if chain.is_empty() {
        return Err(file_error(&files.cert, "no CERTIFICATE in it".into()));
    }
    let not_after = {
        use x509_parser::prelude::{FromDer, X509Certificate};
        let (_, leaf) = X509Certificate::from_der(&chain[0])
            .map_err(|e| file_error(&files.cert, format!("not an X.509 certificate: {e}")))?;
        leaf.validity().not_after.timestamp()
    };
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .map_err(|e| file_error(&files.key, format!("no usable private key: {e}")))?;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?;
    let (builder, client_ca) = match &files.client_ca {
        None => (builder.with_no_client_auth(), None),
        Some(path) => {
            let ca = client_ca_verifier(path, provider.clone())?;
            let offered = OfferedCertificate::new(provider, ca.root_hint_subjects().to_vec());
            (
                builder.with_client_cert_verifier(Arc::new(offered)),
                Some(ca),
            )
        }
    };
    let mut config = builder.with_single_cert(chain, key)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    // Resumption by tickets as well as by the server's session cache (on by default), so
    // that a returning client skips the full handshake.
    config.ticketer = match &files.ticket_keys {
        Some(path) => {
            Arc::new(tickets::SharedTicketer::from_file(path).map_err(|why| file_error(path, why))?)
        }
        None => Arc::clone(own_tickets),
    };
    Ok((config, client_ca, not_after))
}

/// Which way a returning client resumes, each way checked alone: with the server's session
/// cache switched off a resumption can only be by ticket, with tickets switched off only by
/// the cache, and with both off the second handshake is full (so these checks can fail).
/// rustls runs both ends in memory; `tests/cli/tls.rs` checks the same over TCP, through
/// the binary.
#[cfg(test)]
mod tests {
    use rustls::server::NoServerSessionStorage;
    use rustls::{ClientConfig, ClientConnection, HandshakeKind, ServerConnection};

    use super::*;

    const KEY_A: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
    const KEY_B: &str = "202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f";

    /// Tickets switched off, as rustls' default `ServerConfig` has them.
    #[derive(Debug)]
    struct NoTickets;

    impl ProducesTickets for NoTickets {
        fn enabled(&self) -> bool {
            false
        }
        fn lifetime(&self) -> u32 {
            0
        }
        fn encrypt(&self, _: &[u8]) -> Option<Vec<u8>> {
            None
        }
        fn decrypt(&self, _: &[u8]) -> Option<Vec<u8>> {
            None
        }
    }

    struct Setup {
        dir: tempfile::TempDir,
        cert: String,
    }

    impl Setup {
        fn new() -> Self {
            let dir = tempfile::tempdir().unwrap();
            let generated = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
            std::fs::write(dir.path().join("cert.pem"), generated.cert.pem()).unwrap();
            std::fs::write(
                dir.path().join("key.pem"),
                generated.key_pair.serialize_pem(),
            )
            .unwrap();
            Self {
                dir,
                cert: generated.cert.pem(),
            }
        }

        /// The TLS of an instance with these ticket keys (lines of the file), or its own.
        fn instance(&self, name: &str, keys: Option<&[&str]>) -> Tls {
            let ticket_keys = keys.map(|keys| {
                let path = self.dir.path().join(format!("{name}.keys"));
                std::fs::write(&path, keys.join("\n")).unwrap();
                path
            });
            Tls::load(TlsFiles {
                cert: self.dir.path().join("cert.pem"),
                key: self.dir.path().join("key.pem"),
                client_ca: None,
                ticket_keys,
            })
            .unwrap()
        }

        /// A client that trusts the certificate, with its own session store.
        fn client(&self, version: &'static rustls::SupportedProtocolVersion) -> Arc<ClientConfig> {
            let mut roots = rustls::RootCertStore::empty();
            roots
                .add(CertificateDer::from_pem_slice(self.cert.as_bytes()).unwrap())
                .unwrap();
            let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
            Arc::new(
                ClientConfig::builder_with_provider(provider)
                    .with_protocol_versions(&[version])
                    .unwrap()
                    .with_root_certificates(roots)
                    .with_no_client_auth(),
            )
        }
    }

    /// The configuration in force at `tls`, changed by `change`.
    fn config_of(tls: &Tls, change: impl FnOnce(&mut ServerConfig)) -> Arc<ServerConfig> {
        let mut config = ServerConfig::clone(&tls.current.read().unwrap());
        change(&mut config);
        Arc::new(config)
    }

    fn only_tickets(config: &mut ServerConfig) {
        config.session_storage = Arc::new(NoServerSessionStorage {});
    }

    /// One handshake in memory, and what follows it (TLS 1.3 sends its tickets after the
    /// handshake): how it went.
    fn connect(server: &Arc<ServerConfig>, client: &Arc<ClientConfig>) -> HandshakeKind {
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let mut client = ClientConnection::new(Arc::clone(client), name).unwrap();
        let mut server = ServerConnection::new(Arc::clone(server)).unwrap();
        loop {
            let mut moved = false;
            while client.wants_write() {
                let mut bytes = Vec::new();
                client.write_tls(&mut bytes).unwrap();
                let mut rest = &bytes[..];
                while !rest.is_empty() {
                    server.read_tls(&mut rest).unwrap();
                    server.process_new_packets().unwrap();
                }
                moved = true;
            }
            while server.wants_write() {
                let mut bytes = Vec::new();
                server.write_tls(&mut bytes).unwrap();
                let mut rest = &bytes[..];
                while !rest.is_empty() {
                    client.read_tls(&mut rest).unwrap();
                    client.process_new_packets().unwrap();
                }
                moved = true;
            }
            if !moved {
                break;
            }
        }
        assert!(!client.is_handshaking() && !server.is_handshaking());
        client.handshake_kind().unwrap()
    }

    /// A way to serve: its name, what it changes in the configuration, and how a
    /// returning client's handshake goes.
    type Case = (&'static str, fn(&mut ServerConfig), HandshakeKind);

    const VERSIONS: [&rustls::SupportedProtocolVersion; 2] =
        [&rustls::version::TLS12, &rustls::version::TLS13];

    #[test]
    fn a_client_resumes_by_ticket_alone_and_by_the_session_cache_alone() {
        use HandshakeKind::{Full, Resumed};
        let setup = Setup::new();
        let tls = setup.instance("own", None);
        for version in VERSIONS {
            let cases: [Case; 4] = [
                ("as served", |_| {}, Resumed),
                ("tickets alone", only_tickets, Resumed),
                (
                    "the session cache alone",
                    |c| c.ticketer = Arc::new(NoTickets),
                    Resumed,
                ),
                (
                    "neither",
                    |c| {
                        c.ticketer = Arc::new(NoTickets);
                        c.session_storage = Arc::new(NoServerSessionStorage {});
                    },
                    Full,
                ),
            ];
            for (what, change, second) in cases {
                let server = config_of(&tls, change);
                let client = setup.client(version);
                assert_eq!(connect(&server, &client), Full, "{version:?}, {what}");
                assert_eq!(connect(&server, &client), second, "{version:?}, {what}");
            }
        }
    }

    #[test]
    fn tickets_resume_on_another_instance_when_it_holds_the_key() {
        use HandshakeKind::{Full, Resumed};
        let setup = Setup::new();
        // Instances with their own random keys, and instances sharing a file. The cache is
        // off, so that only a ticket can resume; the first instance always resumes its own.
        let own = [setup.instance("a", None), setup.instance("b", None)];
        let shared = [
            setup.instance("shared-a", Some(&[KEY_A])),
            // Rotated: a new first key, the previous one kept.
            setup.instance("shared-b", Some(&["# rotated", KEY_B, KEY_A])),
        ];
        let other = [
            setup.instance("other-a", Some(&[KEY_A])),
            setup.instance("other-b", Some(&[KEY_B])),
        ];
        for version in VERSIONS {
            for (what, [first, second], elsewhere) in [
                ("own keys", &own, Full),
                ("a shared key", &shared, Resumed),
                ("different files", &other, Full),
            ] {
                let (first, second) = (
                    config_of(first, only_tickets),
                    config_of(second, only_tickets),
                );
                let client = setup.client(version);
                assert_eq!(connect(&first, &client), Full, "{version:?}, {what}");
                assert_eq!(connect(&first, &client), Resumed, "{version:?}, {what}");
                assert_eq!(connect(&second, &client), elsewhere, "{version:?}, {what}");
            }
        }
    }

    #[test]
    fn tickets_outlive_a_reload_and_follow_a_changed_key_file() {
        use HandshakeKind::{Full, Resumed};
        let setup = Setup::new();
        let own = setup.instance("own", None);
        let shared = setup.instance("shared", Some(&[KEY_A]));
        let client = setup.client(&rustls::version::TLS13);
        // A reload (say a renewed certificate) keeps the process's own keys.
        assert_eq!(connect(&config_of(&own, only_tickets), &client), Full);
        own.reload().unwrap();
        assert_eq!(connect(&config_of(&own, only_tickets), &client), Resumed);
        // A file that no longer holds the key of a ticket: a full handshake.
        let client = setup.client(&rustls::version::TLS13);
        assert_eq!(connect(&config_of(&shared, only_tickets), &client), Full);
        std::fs::write(shared.files().ticket_keys.as_ref().unwrap(), KEY_B).unwrap();
        shared.reload().unwrap();
        assert_eq!(connect(&config_of(&shared, only_tickets), &client), Full);
        // A file without a key is refused, and the keys in force stay.
        std::fs::write(shared.files().ticket_keys.as_ref().unwrap(), "# none\n").unwrap();
        let error = shared.reload().unwrap_err().to_string();
        assert!(
            error.ends_with("shared.keys: no ticket key in it (64 hex digits per line)"),
            "{error}"
        );
        assert_eq!(connect(&config_of(&shared, only_tickets), &client), Resumed);
    }
}
