//! The accept loop: HTTP/1.1 on a bound listener, with the background tasks that keep the
//! registry fresh and the housekeeping, until a shutdown future resolves.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

use crate::config::Config;
use crate::mtls::PeerCertificate;
use crate::state::AppState;

/// The router with every endpoint and layer.
pub fn app(state: AppState) -> axum::Router {
    crate::routes::router(state)
}

/// Serves `/metrics` alone on `listener` (`--metrics-listen`: a separate, e.g. loopback,
/// address, so that the public one does not expose it; set
/// [`Config::metrics_on_main_listener`] to `false` then). Runs until the task is dropped:
/// scrapes need no draining.
pub async fn run_metrics(listener: TcpListener, state: AppState) -> std::io::Result<()> {
    axum::serve(listener, crate::routes::metrics_only(state)).await
}

/// Serves `/healthz` and `/readyz` alone in plain HTTP on `listener` (`--listen-http`
/// beside HTTPS, for a load balancer's checks). Runs until the task is dropped.
pub async fn run_health(listener: TcpListener, state: AppState) -> std::io::Result<()> {
    axum::serve(listener, crate::routes::health_only(state)).await
}

/// Serves `state` on `listener` until `shutdown` resolves, then lets in-flight requests
/// finish. Keeps the registry in sync with the store meanwhile.
pub async fn run(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let router = app(state.clone());
    run_router(listener, state, router, shutdown).await
}

/// [`run`] with a router built from [`app`] and wrapped in layers of the caller's (a
/// deployment's own middleware, or a test's), served the same way.
pub async fn run_router(
    listener: TcpListener,
    state: AppState,
    router: axum::Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let sync_state = state.clone();
    let sync = tokio::spawn(async move { sync_state.sync_forever().await });
    let (stop_housekeeping, stopped) = tokio::sync::oneshot::channel::<()>();
    let housekeeping = tokio::spawn(crate::housekeeping::every_interval(state.clone(), stopped));
    let served = serve(listener, router, state.config(), shutdown).await;
    sync.abort();
    let _ = stop_housekeeping.send(());
    if let Err(error) = housekeeping.await {
        tracing::warn!(%error, "the housekeeping task failed");
    }
    state.housekeeping().await;
    served
}

/// Accepts connections until `shutdown`, then lets each connection finish its in-flight
/// request: HTTP/1.1 in plain text, or with [`Config::tls`] HTTPS with HTTP/2 or HTTP/1.1
/// as ALPN agrees. A client gets `header_timeout` to finish its TLS handshake and to send
/// its request head (a slowloris defence; the body is bounded by the request timeout
/// layer), and every request sees its peer as `ConnectInfo<SocketAddr>`.
async fn serve(
    listener: TcpListener,
    router: axum::Router,
    config: &Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use hyper_util::rt::{TokioExecutor, TokioTimer};

    if config.metrics_on_main_listener {
        // Allowed, as a convenience for trying Tessera; said once, at start, so that no
        // deployment exposes its metrics without knowing.
        tracing::warn!(
            listen = %listener.local_addr()?,
            "/metrics is public on this listener (plan names, refusals by error, registry \
             size): in production serve it on a private address with --metrics-listen"
        );
    }
    let mut http1 = hyper::server::conn::http1::Builder::new();
    http1
        .timer(TokioTimer::new())
        .header_read_timeout(config.header_timeout)
        // A request head (and what is buffered of a body) fits in 16 KiB; bounding the
        // buffer bounds the memory an unfinished head can hold.
        .max_buf_size(16 * 1024)
        .keep_alive(true);
    let mut http2 = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    http2
        .timer(TokioTimer::new())
        // As many requests at once on one connection as one address may hold connections.
        .max_concurrent_streams(
            u32::try_from(config.max_connections_per_address).unwrap_or(u32::MAX),
        )
        .max_header_list_size(16 * 1024)
        .keep_alive_interval(Some(Duration::from_secs(30)));
    let connections = Arc::new(tokio::sync::Semaphore::new(config.max_connections));
    let per_address = Arc::new(PerAddress::new(config.max_connections_per_address));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        // At the cap, stop accepting (the kernel's backlog holds the rest) until one closes.
        let slot = tokio::select! {
            () = &mut shutdown => break,
            slot = connections.clone().acquire_owned() => slot.expect("the semaphore is never closed"),
        };
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        // One address may hold only its share of the connections (without a trusted proxy
        // in front: behind one, every caller has the proxy's address and the cap is its).
        let Some(address_slot) = per_address.admit(crate::limits::canonical(peer.ip())) else {
            tracing::debug!(peer = %peer.ip(), "connection refused: the address holds its share");
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let watcher = graceful.watcher();
        let (http1, http2, router) = (http1.clone(), http2.clone(), router.clone());
        let (tls, handshake_timeout) = (config.tls.clone(), config.header_timeout);
        let bounds = KeepAlive {
            max_requests: config.max_requests_per_connection,
            max_age: config.max_connection_age,
            clock: config.clock.clone(),
        };
        tokio::spawn(async move {
            let _slots = (slot, address_slot);
            let Some(tls) = tls else {
                let service = service(router, peer, Some(bounds), None, false);
                let connection = http1.serve_connection(TokioIo::new(stream), service);
                finish(watcher.watch(connection)).await;
                return;
            };
            let stream = match tokio::time::timeout(
                handshake_timeout,
                tls.acceptor().accept(stream),
            )
            .await
            {
                Ok(Ok(stream)) => stream,
                Ok(Err(error)) => {
                    tracing::debug!(%error, %peer, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!(%peer, "TLS handshake timed out");
                    return;
                }
            };
            let session = stream.get_ref().1;
            let certificate = session.peer_certificates().map(|chain| {
                PeerCertificate(chain.iter().map(|c| c.clone().into_owned()).collect())
            });
            if session.alpn_protocol() == Some(b"h2") {
                // HTTP/2 has no Connection: close; its streams end with the connection.
                let service = service(router, peer, None, certificate, true);
                let connection = http2.serve_connection(TokioIo::new(stream), service);
                finish(watcher.watch(connection)).await;
            } else {
                let service = service(router, peer, Some(bounds), certificate, true);
                let connection = http1.serve_connection(TokioIo::new(stream), service);
                finish(watcher.watch(connection)).await;
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(config.request_timeout * 3, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("connections still open after the grace period; closing them");
    }
    Ok(())
}

use hyper_util::rt::TokioIo;

/// `Strict-Transport-Security` of every answer over TLS (RFC 6797 section 6.1): a browser
/// that has seen the console over https never tries it over plain http for a year, so a
/// network attacker cannot strip TLS from a later visit. Never over plain HTTP (RFC 6797
/// section 7.2); no `includeSubDomains`, since other hosts of
/// the operator's domain are not ours to decide for. A deployment's own layer that sets the
/// header wins.
const HSTS: &str = "max-age=31536000";

/// How long an HTTP/1.1 connection may be kept alive, so that no caller holds one forever.
#[derive(Clone)]
struct KeepAlive {
    /// Requests served before the answer says `Connection: close`.
    max_requests: usize,
    /// Age, by `clock`, past which the next answer says `Connection: close`.
    max_age: Duration,
    /// The state's clock: the age is a decision by time, so a test moves it.
    clock: crate::clock::Clock,
}

/// The router as one connection's service: each request learns its peer (and the client
/// certificate it presented, if any), and with
/// `keep_alive` bounds (requests, age) an HTTP/1.1 answer says `Connection: close` once
/// the connection has served its share, so the client opens a new one (RFC 9112 9.6).
/// Over TLS (`https`) every answer carries [`HSTS`].
fn service(
    router: axum::Router,
    peer: std::net::SocketAddr,
    keep_alive: Option<KeepAlive>,
    certificate: Option<PeerCertificate>,
    https: bool,
) -> hyper_util::service::TowerToHyperService<
    impl tower::Service<
            axum::extract::Request<hyper::body::Incoming>,
            Response = axum::response::Response,
            Error = std::convert::Infallible,
            Future = impl Send,
        > + Clone,
> {
    use axum::extract::ConnectInfo;
    use tower::ServiceExt;
    let served = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let keep_alive = keep_alive.map(|bounds| (bounds.clock.elapsed(), bounds));
    let service = router
        .map_request(move |mut request: axum::extract::Request<_>| {
            request.extensions_mut().insert(ConnectInfo(peer));
            if let Some(certificate) = &certificate {
                request.extensions_mut().insert(certificate.clone());
            }
            request
        })
        .map_response(move |mut response: axum::response::Response| {
            if https {
                response
                    .headers_mut()
                    .entry(axum::http::header::STRICT_TRANSPORT_SECURITY)
                    .or_insert(axum::http::HeaderValue::from_static(HSTS));
            }
            if let Some((opened, bounds)) = &keep_alive {
                let count = served.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                let age = bounds.clock.elapsed().saturating_sub(*opened);
                if count >= bounds.max_requests || age >= bounds.max_age {
                    response.headers_mut().insert(
                        axum::http::header::CONNECTION,
                        axum::http::HeaderValue::from_static("close"),
                    );
                }
            }
            response
        });
    hyper_util::service::TowerToHyperService::new(service)
}

async fn finish<E: std::fmt::Display>(connection: impl Future<Output = Result<(), E>>) {
    if let Err(error) = connection.await {
        tracing::debug!(%error, "connection ended with an error");
    }
}

/// Open connections per source address, so that one address cannot hold them all.
#[derive(Debug)]
struct PerAddress {
    open: std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, usize>>,
    cap: usize,
}

/// One connection's place in its address's share; given back on drop.
struct AddressSlot {
    owner: Arc<PerAddress>,
    ip: std::net::IpAddr,
}

impl PerAddress {
    fn new(cap: usize) -> Self {
        Self {
            open: std::sync::Mutex::default(),
            cap,
        }
    }

    /// A place for one more connection from `ip`, unless it holds its share already. The
    /// map holds only addresses with open connections, so it is bounded by the global cap.
    fn admit(self: &Arc<Self>, ip: std::net::IpAddr) -> Option<AddressSlot> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let count = open.entry(ip).or_default();
        if *count >= self.cap {
            return None;
        }
        *count += 1;
        Some(AddressSlot {
            owner: Arc::clone(self),
            ip,
        })
    }
}

impl Drop for AddressSlot {
    fn drop(&mut self) {
        let mut open = self.owner.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(count) = open.get_mut(&self.ip) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.ip);
            }
        }
    }
}
