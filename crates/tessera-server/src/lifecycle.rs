//! The serve lifecycle, one for `tessera serve` and the test kit: the listeners bound, TLS
//! loaded, watched and reloaded on SIGHUP, the issuer decided and compared with the one
//! this database was last served under, the state prepared, the side listeners (health
//! checks, metrics) served beside the main one, and the write-ahead log emptied into the
//! database file once the server has stopped.
//!
//! ```no_run
//! # async fn example(
//! #     store: std::sync::Arc<dyn tessera_store::Store>,
//! #     secrets: std::sync::Arc<tessera_server::secrets::Secrets>,
//! # ) -> Result<(), Box<dyn std::error::Error>> {
//! use tessera_server::{Config, Listeners, Server};
//! let config = Config::default();
//! let listeners = Listeners::bind(&config).await?;
//! let clock = tessera_server::clock::Clock::system();
//! let server = Server::start(config, listeners, clock, store, secrets).await?;
//! // Before saying it listens: a SIGTERM from then on stops it cleanly.
//! let shutdown = tessera_server::shutdown_signal();
//! println!("listening on {}", server.addr());
//! server.run(shutdown).await?;
//! # Ok(())
//! # }
//! ```

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tessera_store::{Store, StoreError};
use thiserror::Error;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::clock::Clock;
use crate::config::{Config, ConfigError, Runtime};
use crate::registry::LoadError;
use crate::secrets::Secrets;
use crate::state::AppState;
use crate::tls::{Tls, TlsError, TlsFiles};

/// How often the TLS files are looked at for a change.
const TLS_WATCH_INTERVAL: Duration = Duration::from_secs(2);

/// Why a server could not start. Each says which setting or step failed.
#[derive(Debug, Error)]
pub enum StartError {
    /// The settings do not hold together.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A listener could not be bound.
    #[error("cannot listen on {addr}{what}: {source}")]
    Bind {
        /// Which listener: empty for the main one.
        what: &'static str,
        /// Its address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The certificate and key cannot be served.
    #[error("cannot serve TLS: {0}")]
    Tls(#[source] TlsError),
    /// `--client-ca` cannot be read.
    #[error("cannot read --client-ca: {0}")]
    ClientCa(#[source] TlsError),
    /// The signing keys or the registry could not be loaded, or Redis not reached.
    #[error(transparent)]
    Prepare(#[from] LoadError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The listeners of a server, bound before anything else is done, so that a port in use is
/// said at once, and so that a test can bind port 0 and learn the port.
#[derive(Debug)]
pub struct Listeners {
    /// The token endpoint and everything else (`--listen`).
    pub main: TcpListener,
    /// Plain HTTP health checks beside HTTPS (`--listen-http`).
    pub health: Option<TcpListener>,
    /// `/metrics` alone (`--metrics-listen`).
    pub metrics: Option<TcpListener>,
    /// The management surface alone (`--admin-listen`): the admin API, the console and
    /// `/openapi.json`, with the main listener's TLS.
    pub admin: Option<TcpListener>,
}

impl Listeners {
    /// Binds the addresses `config` names.
    pub async fn bind(config: &Config) -> Result<Self, StartError> {
        let bind = |addr: SocketAddr, what: &'static str| async move {
            TcpListener::bind(addr)
                .await
                .map_err(|source| StartError::Bind { what, addr, source })
        };
        let main = bind(config.listen, "").await?;
        let health = match config.listen_http {
            Some(addr) => Some(bind(addr, " for health checks").await?),
            None => None,
        };
        let metrics = match config.metrics_listen {
            Some(addr) => Some(bind(addr, " for metrics").await?),
            None => None,
        };
        let admin = match config.admin_listen {
            Some(addr) => Some(bind(addr, " for the admin API").await?),
            None => None,
        };
        Ok(Self {
            main,
            health,
            metrics,
            admin,
        })
    }
}

/// A server ready to serve: bound, its state prepared, not yet accepting.
#[derive(Debug)]
pub struct Server {
    state: AppState,
    store: Arc<dyn Store>,
    listeners: Listeners,
    /// SIGHUP, handled from the start on, so that a `systemctl reload` never ends the
    /// process, not even before it serves ([`reload_on_hangup`]).
    hangups: Hangups,
}

/// The stream of SIGHUPs; `None` where it cannot be had.
#[cfg(unix)]
type Hangups = Option<tokio::signal::unix::Signal>;
#[cfg(not(unix))]
type Hangups = Option<()>;

impl Server {
    /// Prepares a server of `config` on `listeners`: checks the settings, loads TLS,
    /// decides the issuer (`http(s)://` and the main listener's address unless
    /// `config.issuer` names one), prepares the state ([`AppState::prepare`]) and warns when
    /// this database was last served under another issuer.
    pub async fn start(
        config: Config,
        listeners: Listeners,
        clock: Clock,
        store: Arc<dyn Store>,
        secrets: Arc<Secrets>,
    ) -> Result<Self, StartError> {
        config.check()?;
        config.check_issuer()?;
        let tls = match (&config.tls_cert, &config.tls_key) {
            (Some(cert), Some(key)) => Some(Arc::new(
                Tls::load(TlsFiles {
                    cert: cert.clone(),
                    key: key.clone(),
                    client_ca: config.client_ca.clone(),
                    ticket_keys: config.tls_ticket_key_file.clone(),
                })
                .map_err(StartError::Tls)?,
            )),
            _ => None,
        };
        // Without TLS here, the CA checks the certificates a trusted proxy passes on.
        let client_ca = match (&tls, &config.client_ca, &config.client_cert_header) {
            (None, Some(path), Some(_)) => {
                Some(crate::tls::client_ca(path).map_err(StartError::ClientCa)?)
            }
            _ => None,
        };
        let scheme = if tls.is_some() { "https" } else { "http" };
        let local = listeners
            .main
            .local_addr()
            .map_err(|source| StartError::Bind {
                what: "",
                addr: config.listen,
                source,
            })?;
        let issuer = match &config.issuer {
            Some(issuer) => issuer.clone(),
            None => format!("{scheme}://{local}"),
        };
        let runtime = Runtime {
            issuer: issuer.clone(),
            clock,
            tls,
            client_ca,
        };
        let state = AppState::prepare(config, runtime, store.clone(), secrets).await?;
        // Tokens carry the issuer and APIs check it: a server on this database that started
        // with another one (say the default of another --listen port) issues tokens they
        // refuse.
        let previous = store
            .replace_value("last_issuer", issuer.as_bytes())
            .await?;
        if let Some(previous) = previous.filter(|p| p != issuer.as_bytes()) {
            tracing::warn!(
                previous = %String::from_utf8_lossy(&previous),
                %issuer,
                "this database was last served under another issuer: this server's tokens \
                 carry another iss, which APIs that expect the previous one refuse; give \
                 every server on a database the same --issuer"
            );
        }
        #[cfg(unix)]
        let hangups = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
        #[cfg(not(unix))]
        let hangups = None;
        Ok(Self {
            state,
            store,
            listeners,
            hangups,
        })
    }

    /// Its state.
    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// The main listener's address.
    pub fn addr(&self) -> SocketAddr {
        self.listeners
            .main
            .local_addr()
            .expect("a bound listener has an address")
    }

    /// The health listener's address, when there is one.
    pub fn health_addr(&self) -> Option<SocketAddr> {
        self.listeners
            .health
            .as_ref()
            .and_then(|l| l.local_addr().ok())
    }

    /// The metrics listener's address, when there is one.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.listeners
            .metrics
            .as_ref()
            .and_then(|l| l.local_addr().ok())
    }

    /// The admin listener's address, when the management surface has its own.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.listeners
            .admin
            .as_ref()
            .and_then(|l| l.local_addr().ok())
    }

    /// The TLS certificate served, when TLS is.
    pub fn tls(&self) -> Option<&Arc<Tls>> {
        self.state.tls()
    }

    /// Serves until `shutdown` resolves ([`Self::run_with`] without layers of the caller's).
    pub async fn run(
        self,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        self.serve_plane(crate::serve::Plane::app, shutdown).await
    }

    /// Serves the router of [`crate::app`], wrapped by `wrap` (a deployment's or a test's
    /// layers), until `shutdown` resolves, with the TLS files watched and reloaded on
    /// SIGHUP and the side listeners served, and [`crate::admin_app`] on the admin listener
    /// when there is one; then lets requests finish ([`crate::run_router`]) and empties the
    /// write-ahead log into the database file, so that a copy of the file alone is whole.
    pub async fn run_with(
        self,
        wrap: impl FnOnce(axum::Router) -> axum::Router,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        self.serve_plane(
            |router| crate::serve::Plane::wrapped(wrap(router)),
            shutdown,
        )
        .await
    }

    /// [`Self::run_with`], with the router of [`crate::app`] made into the main listener's
    /// plane by `plane`.
    async fn serve_plane(
        self,
        plane: impl FnOnce(axum::Router) -> crate::serve::Plane,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let Self {
            state,
            store,
            listeners,
            hangups,
        } = self;
        let mut beside: Vec<JoinHandle<()>> = Vec::new();
        if let Some(tls) = state.tls() {
            beside.push(tokio::spawn(tls.clone().watch(TLS_WATCH_INTERVAL)));
        }
        // Always: without a handler, SIGHUP (a unit's `systemctl reload`) would end the
        // process.
        beside.push(tokio::spawn(reload_on_hangup(
            state.tls().cloned(),
            hangups,
        )));
        if let Some(listener) = listeners.health {
            let state = state.clone();
            beside.push(tokio::spawn(async move {
                if let Err(error) = crate::run_health(listener, state).await {
                    tracing::error!(%error, "the health listener failed");
                }
            }));
        }
        if let Some(listener) = listeners.metrics {
            let state = state.clone();
            beside.push(tokio::spawn(async move {
                if let Err(error) = crate::run_metrics(listener, state).await {
                    tracing::error!(%error, "the metrics listener failed");
                }
            }));
        }
        let router = plane(crate::app(state.clone()));
        let admin = listeners
            .admin
            .map(|listener| (listener, crate::admin_app(state.clone())));
        let served = crate::serve::run_planes(listeners.main, router, admin, state, shutdown).await;
        for task in beside {
            task.abort();
        }
        // After a clean stop the database file alone holds every change: a copy of it is
        // whole.
        match store.checkpoint().await {
            Ok(true) => {}
            Ok(false) => tracing::warn!(
                "the write-ahead log could not be emptied while other processes read the \
                 database; it stays durable and is moved into the file later"
            ),
            Err(error) => tracing::warn!(%error, "checkpoint at shutdown failed"),
        }
        served
    }
}

/// Reloads the certificate on each SIGHUP, until the task is dropped; without TLS, says
/// that there is nothing to reload. The other settings are read at start only: a change
/// to them needs a restart.
async fn reload_on_hangup(tls: Option<Arc<Tls>>, hangups: Hangups) {
    #[cfg(unix)]
    {
        let Some(mut hangups) = hangups else {
            return;
        };
        while hangups.recv().await.is_some() {
            match &tls {
                Some(tls) => {
                    if let Err(error) = tls.reload() {
                        tracing::error!(
                            %error,
                            "SIGHUP: the TLS files cannot be used; keeping the previous \
                             certificate"
                        );
                    }
                }
                None => tracing::info!(
                    "SIGHUP: nothing to reload without TLS; the other settings are read at \
                     start, a change to them needs a restart"
                ),
            }
        }
    }
    #[cfg(not(unix))]
    drop((tls, hangups));
}
