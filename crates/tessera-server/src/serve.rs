//! The accept loop: HTTP/1.1 on a bound listener, with the background tasks that keep the
//! registry fresh and the housekeeping, until a shutdown future resolves.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};

use tokio::net::TcpListener;

use crate::config::Config;
use crate::mtls::PeerCertificate;
use crate::routes;
use crate::state::AppState;

/// The router of the main listener, with its layers: the data plane, and the control plane
/// beside it unless it has a listener of its own ([`Config::admin_listen`]).
pub fn app(state: AppState) -> axum::Router {
    let data = crate::routes::router(state.clone());
    traced(if state.config().admin_listen.is_some() {
        data
    } else {
        data.merge(crate::control::router(state))
    })
}

/// The router of the admin listener ([`Config::admin_listen`]): the control plane alone,
/// the admin API, the console and `/openapi.json`.
pub fn admin_app(state: AppState) -> axum::Router {
    traced(crate::control::router(state))
}

/// `router` with a span per request when spans are exported (`telemetry.rs`); as it is
/// otherwise, so that an untraced request goes through no layer of tracing at all.
fn traced(router: axum::Router) -> axum::Router {
    if crate::telemetry::on() {
        router.layer(axum::middleware::from_fn(crate::telemetry::trace_request))
    } else {
        router
    }
}

/// Serves `/metrics` alone on `listener` (`--metrics-listen`: a separate, e.g. loopback,
/// address, so that the public one does not expose it; set
/// [`Config::metrics_listen`] then, so that the main listener does not serve it). Runs until the task is dropped:
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
    run_planes(listener, Plane::app(router), None, state, shutdown).await
}

/// [`run`] with a router built from [`app`] and wrapped in layers of the caller's (a
/// deployment's own middleware, or a test's), served the same way.
pub async fn run_router(
    listener: TcpListener,
    state: AppState,
    router: axum::Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    run_planes(listener, Plane::wrapped(router), None, state, shutdown).await
}

/// The router a listener serves, and whether it is [`app`]'s own, with no layer of a
/// caller's around it: then its token requests may be answered without it
/// ([`crate::routes::token::direct`]).
pub(crate) struct Plane {
    router: axum::Router,
    own: bool,
}

impl Plane {
    /// [`app`]'s router, as it made it.
    pub(crate) fn app(router: axum::Router) -> Self {
        Self { router, own: true }
    }

    /// A router wrapped in a caller's layers, or any other: every request goes through it.
    pub(crate) fn wrapped(router: axum::Router) -> Self {
        Self { router, own: false }
    }
}

/// [`run_router`], and with `admin` the management surface on a listener of its own
/// ([`Config::admin_listen`]), served the same way (TLS, caps, timeouts) and stopped by the
/// same `shutdown`.
pub(crate) async fn run_planes(
    listener: TcpListener,
    router: Plane,
    admin: Option<(TcpListener, axum::Router)>,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let sync_state = state.clone();
    let sync = tokio::spawn(async move { sync_state.sync_forever().await });
    let (stop_housekeeping, stopped) = tokio::sync::oneshot::channel::<()>();
    let housekeeping = tokio::spawn(crate::housekeeping::every_interval(state.clone(), stopped));
    if state.config().metrics_on_main_listener() {
        // Allowed, as a convenience for trying Tessera; said once, at start, so that no
        // deployment exposes its metrics without knowing.
        tracing::warn!(
            listen = %listener.local_addr()?,
            "/metrics is public on this listener (plan names, refusals by error, registry \
             size): in production serve it on a private address with --metrics-listen"
        );
    }
    let served = match admin {
        None => serve(listener, router, &state, shutdown).await,
        Some((admin, admin_router)) => {
            // One shutdown for both listeners.
            let (stop, stopping) = tokio::sync::watch::channel(false);
            let signal = tokio::spawn(async move {
                shutdown.await;
                stop.send_replace(true);
            });
            let until_stopped = |mut stopping: tokio::sync::watch::Receiver<bool>| async move {
                let _ = stopping.wait_for(|stopped| *stopped).await;
            };
            let (served, admin_served) = tokio::join!(
                serve(listener, router, &state, until_stopped(stopping.clone())),
                serve(
                    admin,
                    Plane::wrapped(admin_router),
                    &state,
                    until_stopped(stopping)
                ),
            );
            signal.abort();
            served.and(admin_served)
        }
    };
    sync.abort();
    let _ = stop_housekeeping.send(());
    if let Err(error) = housekeeping.await {
        tracing::warn!(%error, "the housekeeping task failed");
    }
    state.housekeeping().await;
    served
}

/// Accepts connections until `shutdown`, then lets each connection finish its in-flight
/// requests: HTTP/1.1 in plain text, or with TLS ([`crate::Runtime::tls`]) HTTPS with HTTP/2 or HTTP/1.1
/// as ALPN agrees. A client gets `header_timeout` to finish its TLS handshake and to send
/// its request head (a slowloris defence; the body is bounded by the request timeout
/// layer), and every request sees its peer as `ConnectInfo<SocketAddr>`. Every connection,
/// whatever its protocol, ends when idle or spent ([`Lifetime`]).
async fn serve(
    listener: TcpListener,
    plane: Plane,
    state: &AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use hyper::server::conn::{http1, http2};
    use hyper_util::rt::{TokioExecutor, TokioTimer};

    let config = state.config();
    let mut h1 = http1::Builder::new();
    h1.timer(TokioTimer::new())
        .header_read_timeout(config.header_timeout)
        // A request head (and what is buffered of a body) fits in 16 KiB; bounding the
        // buffer bounds the memory an unfinished head can hold.
        .max_buf_size(16 * 1024)
        .keep_alive(true);
    let mut h2 = http2::Builder::new(TokioExecutor::new());
    h2.timer(TokioTimer::new())
        .max_concurrent_streams(MAX_STREAMS)
        .max_header_list_size(16 * 1024)
        .keep_alive_interval(Some(Duration::from_secs(30)));
    // Token requests skip the router where nothing of a caller's, nor a request span, would
    // be skipped with it.
    let direct = (plane.own && !crate::telemetry::on()).then(|| state.clone());
    let connections = Arc::new(tokio::sync::Semaphore::new(config.max_connections));
    let per_address = Arc::new(PerAddress::new(config.max_connections_per_address));
    // Every connection's task holds a receiver; once all are dropped, all have ended.
    let (stop, stopping) = tokio::sync::watch::channel(false);
    // Read by every answer: set, an HTTP/1.1 answer says `Connection: close`.
    let draining = Arc::new(AtomicBool::new(false));
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
        // One address (an IPv6 /64) may hold only its share of the connections (without a
        // trusted proxy in front: behind one, every caller has the proxy's address and the
        // cap is its).
        let Some(address_slot) = per_address.admit(peer.ip()) else {
            tracing::debug!(peer = %peer.ip(), "connection refused: the address holds its share");
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let (h1, h2) = (h1.clone(), h2.clone());
        let (tls, handshake_timeout) = (state.tls().cloned(), config.header_timeout);
        let lifetime = Lifetime::new(config, state.clock(), draining.clone());
        let mut ending = Ending {
            idle: config.idle_timeout,
            grace: config.request_timeout,
            drain: config.shutdown_drain,
            stopping: stopping.clone(),
        };
        let answering = {
            let (router, direct, lifetime) =
                (plane.router.clone(), direct.clone(), lifetime.clone());
            move |certificate, protocol| Answering {
                router,
                direct,
                peer,
                lifetime,
                certificate,
                protocol,
            }
        };
        tokio::spawn(async move {
            let _slots = (slot, address_slot);
            let Some(tls) = tls else {
                let service = answering(None, Protocol::Http);
                let connection = h1.serve_connection(TokioIo::new(stream), service);
                drive(
                    connection,
                    http1::Connection::graceful_shutdown,
                    lifetime,
                    ending,
                )
                .await;
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
                // GOAWAY tells the client which streams were taken: no drain needed.
                ending.drain = Duration::ZERO;
                let service = answering(certificate, Protocol::H2);
                let connection = h2.serve_connection(TokioIo::new(stream), service);
                drive(
                    connection,
                    http2::Connection::graceful_shutdown,
                    lifetime,
                    ending,
                )
                .await;
            } else {
                let service = answering(certificate, Protocol::Https);
                let connection = h1.serve_connection(TokioIo::new(stream), service);
                drive(
                    connection,
                    http1::Connection::graceful_shutdown,
                    lifetime,
                    ending,
                )
                .await;
            }
        });
    }
    // Before the listener closes: a client that finds it closed gets `Connection: close`
    // on any answer still to come.
    draining.store(true, Relaxed);
    stop.send_replace(true);
    drop(listener);
    drop(stopping);
    if tokio::time::timeout(config.request_timeout * 3, stop.closed())
        .await
        .is_err()
    {
        tracing::warn!("connections still open after the grace period; closing them");
    }
    Ok(())
}

use hyper_util::rt::TokioIo;

/// Requests one HTTP/2 connection may carry at once (SETTINGS_MAX_CONCURRENT_STREAMS, RFC
/// 9113 section 6.5.2): a browser or a client kit needs a handful; a hundred bounds what
/// one connection can make the server hold (half-sent bodies, each alive for the request
/// timeout).
const MAX_STREAMS: u32 = 100;

/// `Strict-Transport-Security` of every answer over TLS (RFC 6797 section 6.1): a browser
/// that has seen the console over https never tries it over plain http for a year, so a
/// network attacker cannot strip TLS from a later visit. Never over plain HTTP (RFC 6797
/// section 7.2); no `includeSubDomains`, since other hosts of
/// the operator's domain are not ours to decide for. A deployment's own layer that sets the
/// header wins.
const HSTS: &str = "max-age=31536000";

/// What a connection is spoken in: the answer headers it needs differ.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Protocol {
    /// HTTP/1.1 in plain text.
    Http,
    /// HTTP/1.1 over TLS.
    Https,
    /// HTTP/2 over TLS.
    H2,
}

/// One connection's bounds and what its requests have done, shared by its service (which
/// counts requests) and the task that drives it (which ends the connection), so that no
/// caller holds a connection forever: it ends once idle for [`Config::idle_timeout`], and
/// is retired once it has served [`Config::max_requests_per_connection`] requests or
/// reached [`Config::max_connection_age`]. A request costs a few atomic operations and no
/// wake-up: the driving task reads the traces when its idle timer fires.
struct Lifetime {
    /// Requests served before the connection is retired.
    max_requests: usize,
    /// Age, by `clock`, past which the connection is retired at its next answer.
    max_age: Duration,
    /// The state's clock: the age is a decision by time, so a test moves it.
    clock: crate::clock::Clock,
    /// When the connection opened, by `clock`.
    opened: Duration,
    /// When the connection opened, by tokio's clock (which the idle timer runs on).
    started: tokio::time::Instant,
    /// Milliseconds after `started` at which the last request ended.
    last_active: AtomicU64,
    /// Requests being worked on now (several at once on HTTP/2).
    in_flight: AtomicUsize,
    /// Requests answered so far.
    served: AtomicUsize,
    /// Set once the connection has served its share.
    retired: AtomicBool,
    /// Wakes the driving task when the connection retires.
    retiring: tokio::sync::Notify,
    /// The server's: set once it stops, when every answer retires its connection.
    draining: Arc<AtomicBool>,
}

impl Lifetime {
    fn new(config: &Config, clock: &crate::clock::Clock, draining: Arc<AtomicBool>) -> Arc<Self> {
        Arc::new(Self {
            draining,
            max_requests: config.max_requests_per_connection,
            max_age: config.max_connection_age,
            opened: clock.elapsed(),
            clock: clock.clone(),
            started: tokio::time::Instant::now(),
            last_active: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            served: AtomicUsize::new(0),
            retired: AtomicBool::new(false),
            retiring: tokio::sync::Notify::new(),
        })
    }

    /// Counts an answer; whether the connection has now served its share (and is retired),
    /// or the server is stopping.
    fn answered(&self) -> bool {
        let count = self.served.fetch_add(1, Relaxed) + 1;
        let age = self.clock.elapsed().saturating_sub(self.opened);
        if count >= self.max_requests || age >= self.max_age || self.draining.load(Relaxed) {
            self.retired.store(true, Relaxed);
            // Kept for the waiter if it is not waiting yet.
            self.retiring.notify_one();
            return true;
        }
        false
    }

    /// Resolves once the connection is retired, or has had no request in flight for
    /// `idle`.
    async fn spent(&self, idle: Duration) {
        loop {
            if self.retired.load(Relaxed) {
                return;
            }
            let now = tokio::time::Instant::now();
            // Acquire: a request that has ended has written `last_active` before.
            let look_again = if self.in_flight.load(Acquire) > 0 {
                // Busy: not idle, whatever the timeout; looked at again later.
                now + idle.max(Duration::from_secs(1))
            } else {
                let quiet_until =
                    self.started + Duration::from_millis(self.last_active.load(Relaxed)) + idle;
                if quiet_until <= now {
                    return;
                }
                quiet_until
            };
            tokio::select! {
                () = self.retiring.notified() => {}
                () = tokio::time::sleep_until(look_again) => {}
            }
        }
    }
}

/// One request in flight on a connection, from the service's call until its answer (or
/// until it is dropped, say when the client resets the stream).
struct Working(Arc<Lifetime>);

impl Working {
    fn begin(lifetime: &Arc<Lifetime>) -> Self {
        lifetime.in_flight.fetch_add(1, Relaxed);
        Self(Arc::clone(lifetime))
    }
}

impl Drop for Working {
    fn drop(&mut self) {
        let lifetime = &self.0;
        let since_start = u64::try_from(lifetime.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        lifetime.last_active.fetch_max(since_start, Relaxed);
        lifetime.in_flight.fetch_sub(1, Release);
    }
}

/// What ends a connection from outside its requests.
struct Ending {
    /// How long it may stay without a request in flight.
    idle: Duration,
    /// How long its requests may take to finish once it is asked to end: the request
    /// timeout, the longest any takes. A client that keeps it open longer (say one that
    /// never acknowledges HTTP/2's shutdown PING) is cut off.
    grace: Duration,
    /// When the server stops, how long an HTTP/1.1 connection stays open before it is asked
    /// to end ([`Config::shutdown_drain`]); zero for HTTP/2.
    drain: Duration,
    /// Becomes `true` when the server shuts down.
    stopping: tokio::sync::watch::Receiver<bool>,
}

/// Serves `connection` until it ends by itself, or until it is idle or spent
/// ([`Lifetime::spent`]) or the server stops: then it is asked to end gracefully, with
/// `graceful_shutdown` (HTTP/2: GOAWAY, RFC 9113 section 6.8; HTTP/1.1: closed once the
/// answer in progress is sent), and given [`Ending::grace`] to do so.
///
/// When the server stops, an HTTP/1.1 connection is asked to end only after
/// [`Ending::drain`]: HTTP/1.1 has no way to say which requests were taken, and one closed
/// while idle loses a request its client had already sent (in the network, or in the
/// socket's buffer). Meanwhile every answer says `Connection: close` (RFC 9112 section
/// 9.6), so that a request that comes is answered and its connection then closed.
async fn drive<C, E>(
    connection: C,
    graceful_shutdown: fn(std::pin::Pin<&mut C>),
    lifetime: Arc<Lifetime>,
    mut ending: Ending,
) where
    C: Future<Output = Result<(), E>>,
    E: std::fmt::Display,
{
    let mut connection = std::pin::pin!(connection);
    let stopping = tokio::select! {
        result = connection.as_mut() => return log_end(result),
        _ = ending.stopping.wait_for(|stop| *stop) => true,
        () = lifetime.spent(ending.idle) => false,
    };
    if stopping && !ending.drain.is_zero() {
        tokio::select! {
            result = connection.as_mut() => return log_end(result),
            () = tokio::time::sleep(ending.drain) => {}
        }
    }
    let why = if stopping {
        "the server is stopping"
    } else {
        "idle or spent"
    };
    tracing::debug!(why, "ending a connection");
    graceful_shutdown(connection.as_mut());
    match tokio::time::timeout(ending.grace, connection).await {
        Ok(result) => log_end(result),
        Err(_) => tracing::debug!("a connection did not end within its grace; closed"),
    }
}

fn log_end<E: std::fmt::Display>(result: Result<(), E>) {
    if let Err(error) = result {
        tracing::debug!(%error, "connection ended with an error");
    }
}

/// The router as one connection's service: each request learns its peer (and the client
/// certificate it presented, if any) and counts in the connection's [`Lifetime`]. Once the
/// connection has served its share, or the server is stopping, an HTTP/1.1 answer says
/// `Connection: close`, so the client opens a new one (RFC 9112 section 9.6), and an HTTP/2
/// connection is sent GOAWAY ([`drive`]). Over TLS every answer carries [`HSTS`].
///
/// With `direct`, a token request is answered by [`routes::token::direct`] rather than
/// through the router: the same answer without the router's boxes, for the requests that
/// are most of a token service's traffic.
#[derive(Clone)]
struct Answering {
    router: axum::Router,
    /// Set when no layer of a caller's wraps `router` and requests are not traced.
    direct: Option<AppState>,
    peer: std::net::SocketAddr,
    lifetime: Arc<Lifetime>,
    certificate: Option<PeerCertificate>,
    protocol: Protocol,
}

impl hyper::service::Service<axum::extract::Request<hyper::body::Incoming>> for Answering {
    type Response = axum::response::Response;
    type Error = std::convert::Infallible;
    type Future = std::pin::Pin<
        Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send + 'static>,
    >;

    fn call(&self, mut request: axum::extract::Request<hyper::body::Incoming>) -> Self::Future {
        use axum::extract::ConnectInfo;
        use axum::http::{header, HeaderValue};
        use tower::ServiceExt;
        request.extensions_mut().insert(ConnectInfo(self.peer));
        if let Some(certificate) = &self.certificate {
            request.extensions_mut().insert(certificate.clone());
        }
        let working = Working::begin(&self.lifetime);
        let protocol = self.protocol;
        let direct = match &self.direct {
            Some(state) if routes::token::is_token_request(&request) => Ok(state.clone()),
            _ => Err(self.router.clone()),
        };
        Box::pin(async move {
            let mut response = match direct {
                Ok(state) => routes::token::direct(state, request).await,
                Err(router) => match router.oneshot(request).await {
                    Ok(response) => response,
                    Err(never) => match never {},
                },
            };
            let headers = response.headers_mut();
            if protocol != Protocol::Http {
                headers
                    .entry(header::STRICT_TRANSPORT_SECURITY)
                    .or_insert(HeaderValue::from_static(HSTS));
            }
            // HTTP/2 has no Connection header (RFC 9113 section 8.2.2): GOAWAY instead.
            if working.0.answered() && protocol != Protocol::H2 {
                headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            drop(working);
            Ok(response)
        })
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

    /// A place for one more connection from `peer`, unless its address holds its share
    /// already: an IPv4 address, or an IPv6 /64 (IPv4-mapped IPv6 counts as IPv4), as
    /// [`crate::limits::source_bucket`] counts sources. The map holds only addresses with
    /// open connections, so it is bounded by the global cap.
    fn admit(self: &Arc<Self>, peer: std::net::IpAddr) -> Option<AddressSlot> {
        let ip = crate::limits::source_bucket(peer);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    fn ip(text: &str) -> std::net::IpAddr {
        text.parse().unwrap()
    }

    /// The per-address cap counts an IPv6 /64 as one address (one host is usually given a
    /// whole /64), and an IPv4-mapped address as the IPv4 address it is (issue 23, M2).
    #[test]
    fn one_ipv6_64_holds_one_share_of_connections() {
        let cap = Arc::new(PerAddress::new(2));
        let admit = |text: &str| cap.admit(ip(text));
        let held = [
            admit("2001:db8:1:2::1").unwrap(),
            admit("2001:db8:1:2:ffff:ffff:ffff:fffe").unwrap(),
        ];
        assert!(admit("2001:db8:1:2::3").is_none(), "the same /64");
        assert!(admit("2001:db8:1:3::1").is_some(), "another /64");
        let v4 = admit("192.0.2.7").unwrap();
        let _mapped = admit("::ffff:192.0.2.7").unwrap();
        assert!(
            admit("192.0.2.7").is_none(),
            "mapped and plain IPv4 count as one"
        );
        drop(v4);
        assert!(admit("::ffff:192.0.2.7").is_some());
        drop(held);
        assert!(admit("2001:db8:1:2::9").is_some(), "given back on close");
    }

    fn lifetime(configure: impl FnOnce(&mut Config)) -> (Arc<Lifetime>, ManualClock) {
        let clock = ManualClock::at(1_000);
        let mut config = Config::default();
        configure(&mut config);
        (
            Lifetime::new(&config, &clock.clone().into(), Arc::default()),
            clock,
        )
    }

    /// Whether `spent` resolves at once (polled until nothing more is ready).
    async fn spent_now(lifetime: &Lifetime, idle: Duration) -> bool {
        tokio::time::timeout(Duration::ZERO, lifetime.spent(idle))
            .await
            .is_ok()
    }

    /// Waits for `spent` as for an event (20 s at most).
    async fn spent_soon(lifetime: &Lifetime, idle: Duration) -> bool {
        tokio::time::timeout(Duration::from_secs(20), lifetime.spent(idle))
            .await
            .is_ok()
    }

    /// A connection without a request in flight for the idle timeout is spent; one with a
    /// request in flight is not, whatever the timeout.
    #[tokio::test]
    async fn a_connection_is_spent_once_idle_for_the_timeout() {
        let (lifetime, _) = lifetime(|_| {});
        assert!(!spent_now(&lifetime, Duration::from_secs(3600)).await);
        assert!(spent_soon(&lifetime, Duration::ZERO).await);

        let working = Working::begin(&lifetime);
        assert!(
            !spent_now(&lifetime, Duration::ZERO).await,
            "a request is in flight"
        );
        drop(working);
        assert!(spent_soon(&lifetime, Duration::ZERO).await);
        assert!(!spent_now(&lifetime, Duration::from_secs(3600)).await);
    }

    /// Retired by its request count or by its age on the state's clock, checked at each
    /// answer, whatever the idle timeout and with requests in flight.
    #[tokio::test]
    async fn a_connection_retires_after_its_requests_or_its_age() {
        let idle = Duration::from_secs(3600);
        let (by_count, _) = lifetime(|c| c.max_requests_per_connection = 2);
        assert!(!by_count.answered());
        assert!(!spent_now(&by_count, idle).await);
        assert!(by_count.answered());
        assert!(spent_now(&by_count, idle).await);

        let (by_age, clock) = lifetime(|c| c.max_connection_age = Duration::from_secs(600));
        let working = Working::begin(&by_age);
        assert!(!by_age.answered());
        clock.advance(Duration::from_secs(599));
        assert!(!by_age.answered());
        assert!(!spent_now(&by_age, idle).await);
        clock.advance(Duration::from_secs(1));
        assert!(by_age.answered());
        assert!(spent_now(&by_age, idle).await);
        drop(working);
    }
}
