//! HTTPS, which RFC 6749 section 3.2 requires at the token endpoint: rustls with the
//! aws-lc-rs provider, TLS 1.2 and 1.3 with rustls' safe defaults, HTTP/2 and HTTP/1.1
//! offered through ALPN (RFC 7301), session resumption by tickets (RFC 8446 section 2.2).
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
use rustls::ServerConfig;
use thiserror::Error;
use tokio_rustls::TlsAcceptor;

use crate::mtls::OfferedCertificate;

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
}

/// The TLS configuration in force, reloadable.
pub struct Tls {
    files: TlsFiles,
    current: RwLock<Arc<ServerConfig>>,
    /// Checks chains against `client_ca`, at the token endpoint.
    client_ca: RwLock<Option<Arc<dyn ClientCertVerifier>>>,
    /// The files' modification times and sizes when last loaded, to notice a change.
    seen: Mutex<Option<[(SystemTime, u64); 3]>>,
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
        let (config, client_ca, not_after) = server_config(&files)?;
        Ok(Self {
            files,
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
        let (config, client_ca, not_after) = server_config(&self.files)?;
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

fn stamp(files: &TlsFiles) -> Option<[(SystemTime, u64); 3]> {
    let one = |path: &Path| {
        let meta = std::fs::metadata(path).ok()?;
        Some((meta.modified().ok()?, meta.len()))
    };
    let ca = match &files.client_ca {
        Some(path) => one(path)?,
        None => (SystemTime::UNIX_EPOCH, 0),
    };
    Some([one(&files.cert)?, one(&files.key)?, ca])
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

fn server_config(files: &TlsFiles) -> Result<Loaded, TlsError> {
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
    config.ticketer = rustls::crypto::aws_lc_rs::Ticketer::new()?;
    Ok((config, client_ca, not_after))
}
