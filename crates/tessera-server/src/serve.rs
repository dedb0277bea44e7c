//! The accept loop: HTTP/1.1 on a bound listener, with the background tasks that keep the
//! registry fresh and the housekeeping, until a shutdown future resolves.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

use crate::config::Config;
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
    // Housekeeping is stopped between rounds, never inside one: a usage flush cancelled
    // after it took the counts and before the store had them would lose them.
    let (stop_housekeeping, mut stopped) = tokio::sync::oneshot::channel::<()>();
    let house_state = state.clone();
    let housekeeping = tokio::spawn(async move {
        let mut tick = tokio::time::interval(house_state.config().housekeeping_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => house_state.housekeeping().await,
                _ = &mut stopped => break,
            }
        }
    });
    let served = serve(listener, router, state.config(), shutdown).await;
    sync.abort();
    let _ = stop_housekeeping.send(());
    if let Err(error) = housekeeping.await {
        tracing::warn!(%error, "the housekeeping task failed");
    }
    state.housekeeping().await;
    served
}

/// Accepts HTTP/1.1 connections until `shutdown`, then lets each connection finish its
/// in-flight request. A client gets `header_timeout` to send its request head (a slowloris
/// defence; the body is bounded by the request timeout layer), and every request sees its
/// peer as `ConnectInfo<SocketAddr>`.
async fn serve(
    listener: TcpListener,
    router: axum::Router,
    config: &Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use axum::extract::ConnectInfo;
    use hyper_util::rt::{TokioIo, TokioTimer};
    use hyper_util::service::TowerToHyperService;
    use tower::ServiceExt;

    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(config.header_timeout)
        // A request head (and what is buffered of a body) fits in 16 KiB; bounding the
        // buffer bounds the memory an unfinished head can hold.
        .max_buf_size(16 * 1024)
        .keep_alive(true);
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
        let served = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (opened, max_requests, max_age) = (
            std::time::Instant::now(),
            config.max_requests_per_connection,
            config.max_connection_age,
        );
        let service = router
            .clone()
            .map_request(move |mut request: axum::extract::Request<_>| {
                request.extensions_mut().insert(ConnectInfo(peer));
                request
            })
            // Keep-alive is bounded: after so many requests or so long, the answer says
            // `Connection: close` and the client opens a new connection (RFC 9112 9.6).
            .map_response(move |mut response: axum::response::Response| {
                let count = served.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                if count >= max_requests || opened.elapsed() >= max_age {
                    response.headers_mut().insert(
                        axum::http::header::CONNECTION,
                        axum::http::HeaderValue::from_static("close"),
                    );
                }
                response
            });
        let connection =
            http.serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            let _slots = (slot, address_slot);
            if let Err(error) = connection.await {
                tracing::debug!(%error, "connection ended with an error");
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
