//! Three small APIs protected by Tessera tokens, on one listener: market data, news and
//! order management. Each requires its own scope and audience; one order endpoint needs a
//! user, so an application's token is refused there (seed section 5.3, RFC 9470).
//!
//! DPoP-bound tokens (RFC 9449) are accepted only as `Authorization: DPoP` with a fresh proof of
//! their key for this request; a replayed proof is refused. Each API serves its protected
//! resource metadata (RFC 9728) at `/.well-known/oauth-protected-resource/<api>`, and its
//! challenges point there; `--public-url` is the URL clients reach the APIs at (by default
//! the address listened on).
//!
//! Tokens bound to a client certificate (RFC 8705 section 3) are accepted only with that
//! certificate: the extractors look for a [`ClientCertificate`] in the request. Behind a
//! TLS-terminating proxy (`--client-cert-header NAME --trusted-proxy IP`), it comes from the
//! proxy's header, believed from that proxy only; with `--tls-cert --tls-key --client-ca` the
//! API terminates TLS itself and inserts the connection's certificate into each request on it.
//!
//! Each API enforces the request limits of the caller's plan (issue 27), learned from the
//! issuer's `GET /api-limits/{api}`: every answer carries `RateLimit-Policy` and `RateLimit`,
//! and a request over a limit gets 429 with `Retry-After` and a `quota-exceeded` problem.
//! Counted in memory, or with `--redis-url` in Redis, shared by every instance of the APIs.
//! With `--usage-client-id ID --usage-client-secret SECRET` (a client on a plan granting
//! `tessera-usage`) the requests per client and day are reported to Tessera, which shows them
//! in `tessera client usage`.
//!
//! ```sh
//! cargo run --release --example protected_apis -- --issuer http://127.0.0.1:8080 --listen 127.0.0.1:9090
//! curl -H "Authorization: Bearer $TOKEN" http://127.0.0.1:9090/market-data/v1/quotes
//! ```

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::ConnectInfo;
use axum::http::Request;
use axum::middleware::Next;
use axum::response::Response;
use axum::routing::get;
use axum::{Json, Router};
use clap::Parser;
use serde_json::{json, Value};
use tessera_verify::{ClientCertificate, RequiredScope, Scoped, UserToken, Verifier};

/// `market-data-api`: quotes.
#[derive(Debug)]
pub(crate) struct MarketData;
impl RequiredScope for MarketData {
    const SCOPE: &'static str = "market-data-api";
}

/// `news-api`: headlines.
#[derive(Debug)]
pub(crate) struct News;
impl RequiredScope for News {
    const SCOPE: &'static str = "news-api";
}

/// `oms-api`: the order management system.
#[derive(Debug)]
pub(crate) struct Oms;
impl RequiredScope for Oms {
    const SCOPE: &'static str = "oms-api";
}

/// `GET /market-data/v1/quotes`: requires market-data-api.
async fn quotes(token: Scoped<MarketData>) -> Json<Value> {
    Json(json!({
        "as_of": "2026-11-25T16:00:00Z",
        "requested_by": token.client_id,
        "quotes": [
            {"symbol": "ACME", "bid": 101.25, "ask": 101.30, "last": 101.27, "currency": "USD"},
            {"symbol": "GLOBX", "bid": 48.10, "ask": 48.14, "last": 48.12, "currency": "USD"},
        ],
    }))
}

/// `GET /news/v1/headlines`: requires news-api.
async fn headlines(_token: Scoped<News>) -> Json<Value> {
    Json(json!({
        "headlines": [
            {"id": "n-1001", "title": "ACME beats third-quarter estimates", "published_at": "2026-11-25T13:05:00Z"},
            {"id": "n-1002", "title": "Central bank holds rates steady", "published_at": "2026-11-25T12:00:00Z"},
        ],
    }))
}

/// `GET /oms/v1/orders`: requires oms-api; an application's own orders.
async fn orders(token: Scoped<Oms>) -> Json<Value> {
    Json(json!({
        "account": token.client_id,
        "orders": [
            {"id": "o-501", "symbol": "ACME", "side": "buy", "quantity": 100, "type": "limit", "limit_price": 101.00, "status": "working"},
        ],
    }))
}

/// `GET /oms/v1/me/orders`: requires oms-api and a signed-in user, so a client credentials
/// token gets 401 `insufficient_user_authentication`.
async fn my_orders(_scope: Scoped<Oms>, user: UserToken) -> Json<Value> {
    Json(json!({ "user": user.sub, "orders": [] }))
}

/// How the APIs count their plans' limits and report usage.
#[derive(Debug, Default)]
pub(crate) struct Limits {
    /// Serve without the plans' limits (`--no-plan-limits`).
    off: bool,
    /// Counters shared through this Redis; in memory without it.
    redis_url: Option<String>,
    /// The APIs' own client, to report usage with.
    usage: Option<(tessera_proto::ClientId, tessera_proto::ClientSecret)>,
}

/// The three APIs at `public_url`, each verifying tokens of `issuer` for its own audience,
/// enforcing the plans' limits for it, and serving its protected resource metadata
/// (RFC 9728): resource `{public_url}/market-data` and so on. Also returns the verifiers, to
/// flush their usage at shutdown.
pub(crate) fn app(
    issuer: &str,
    public_url: &str,
    limits: &Limits,
) -> Result<(Router, Vec<Verifier>), Box<dyn std::error::Error>> {
    let public_url = public_url.trim_end_matches('/');
    let verifier = |audience: &str, path: &str| -> Result<Verifier, Box<dyn std::error::Error>> {
        let mut builder =
            Verifier::builder(issuer, audience).resource_url(format!("{public_url}/{path}"));
        if !limits.off {
            builder = builder.plan_limits();
        }
        if let Some(url) = &limits.redis_url {
            builder = builder.redis_url(url);
        }
        if let Some((id, secret)) = &limits.usage {
            let reporter = tessera_client::TokenClient::builder()
                .environment(tessera_client::Environment::Production)
                .production_url(issuer.parse()?)
                .client_id(id.clone())
                .client_secret(secret.clone())
                .scopes(tessera_proto::ScopeSet::parse(
                    tessera_proto::api_limits::USAGE_SCOPE,
                )?)
                .build()?;
            builder = builder.report_usage(reporter);
        }
        Ok(builder.build()?)
    };
    let market = verifier(MarketData::SCOPE, "market-data")?;
    let news = verifier(News::SCOPE, "news")?;
    let oms = verifier(Oms::SCOPE, "oms")?;
    let metadata = market
        .protected_resource_router(&[MarketData::SCOPE])
        .merge(news.protected_resource_router(&[News::SCOPE]))
        .merge(oms.protected_resource_router(&[Oms::SCOPE]));
    let verifiers = vec![market.clone(), news.clone(), oms.clone()];
    let market = Router::new()
        .route("/market-data/v1/quotes", get(quotes))
        .with_state(market);
    let news = Router::new()
        .route("/news/v1/headlines", get(headlines))
        .with_state(news);
    let oms = Router::new()
        .route("/oms/v1/orders", get(orders))
        .route("/oms/v1/me/orders", get(my_orders))
        .with_state(oms);
    // The extractors count each request; this adds the RateLimit fields to the answers.
    let apis = market
        .merge(news)
        .merge(oms)
        .layer(axum::middleware::from_fn(
            tessera_verify::limits::rate_limit_headers,
        ));
    Ok((apis.merge(metadata), verifiers))
}

/// Where a trusted proxy puts the client certificate, and who that proxy is.
#[derive(Debug)]
struct Proxy {
    header: axum::http::HeaderName,
    address: IpAddr,
}

/// Takes the client certificate from the proxy's header, if the request came from the
/// proxy; from anyone else the header is ignored (it would let a caller claim any
/// certificate).
async fn certificate_from_proxy(
    proxy: Arc<Proxy>,
    mut request: axum::extract::Request,
    next: Next,
) -> Response {
    let from_proxy = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .is_some_and(|ConnectInfo(peer)| peer.ip() == proxy.address);
    let certificate = from_proxy
        .then(|| request.headers().get(&proxy.header)?.to_str().ok())
        .flatten()
        .and_then(ClientCertificate::from_header);
    if let Some(certificate) = certificate {
        request.extensions_mut().insert(certificate);
    }
    next.run(request).await
}

#[derive(Debug, Parser)]
struct Args {
    /// The Tessera issuer whose tokens are accepted.
    #[arg(long, env = "TESSERA_ISSUER")]
    issuer: String,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:9090")]
    listen: SocketAddr,
    /// The URL clients reach these APIs at (DPoP proofs name it; the protected resource
    /// metadata says it); by default the address listened on.
    #[arg(long)]
    public_url: Option<String>,
    /// Behind a TLS-terminating proxy: the header with the client certificate (URL-escaped
    /// PEM), for certificate-bound tokens.
    #[arg(long, requires = "trusted_proxy")]
    client_cert_header: Option<axum::http::HeaderName>,
    /// The proxy whose header is believed.
    #[arg(long, requires = "client_cert_header")]
    trusted_proxy: Option<IpAddr>,
    /// Serve HTTPS with this PEM certificate (and --tls-key), asking clients for a
    /// certificate from --client-ca: bound tokens are then checked against the connection's.
    #[arg(long, requires_all = ["tls_key", "client_ca"])]
    tls_cert: Option<std::path::PathBuf>,
    /// The PEM key of --tls-cert.
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<std::path::PathBuf>,
    /// PEM: the CA of the client certificates asked for (optional for clients).
    #[arg(long, requires = "tls_cert")]
    client_ca: Option<std::path::PathBuf>,
    /// Do not enforce the plans' limits (an issuer that does not serve `/api-limits`, or a
    /// baseline for the benchmark).
    #[arg(long, conflicts_with = "redis_url")]
    no_plan_limits: bool,
    /// Count the plans' limits in this Redis (`redis://host:port/db`), shared by every
    /// instance of the APIs; in memory without it.
    #[arg(long, env = "TESSERA_APIS_REDIS_URL")]
    redis_url: Option<String>,
    /// The APIs' own client (on a plan granting tessera-usage), to report the requests per
    /// client and day to Tessera.
    #[arg(long, requires = "usage_client_secret")]
    usage_client_id: Option<String>,
    /// Its secret.
    #[arg(
        long,
        env = "TESSERA_USAGE_CLIENT_SECRET",
        requires = "usage_client_id",
        hide_env_values = true
    )]
    usage_client_secret: Option<String>,
}

/// HTTPS with optional client certificates: each connection's certificate goes into every
/// request on it as a [`ClientCertificate`], which the extractors compare with a bound
/// token's `cnf` (RFC 8705 section 3).
async fn serve_tls(
    listener: tokio::net::TcpListener,
    app: Router,
    args: &Args,
) -> Result<(), Box<dyn std::error::Error>> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let (Some(cert), Some(key), Some(ca)) = (&args.tls_cert, &args.tls_key, &args.client_ca) else {
        return Err("--tls-cert, --tls-key and --client-ca go together".into());
    };
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_file_iter(ca)? {
        roots.add(ca?)?;
    }
    let clients =
        rustls::server::WebPkiClientVerifier::builder_with_provider(roots.into(), provider.clone())
            .allow_unauthenticated()
            .build()?;
    let chain = CertificateDer::pem_file_iter(cert)?.collect::<Result<Vec<_>, _>>()?;
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(clients)
        .with_single_cert(chain, PrivateKeyDer::from_pem_file(key)?)?;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    loop {
        let (tcp, peer) = listener.accept().await?;
        let (acceptor, app) = (acceptor.clone(), app.clone());
        tokio::spawn(async move {
            let Ok(tls) = acceptor.accept(tcp).await else {
                return;
            };
            let certificate = tls
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|chain| chain.first())
                .map(|der| ClientCertificate(der.to_vec()));
            let service =
                hyper::service::service_fn(move |request: Request<hyper::body::Incoming>| {
                    let mut request = request.map(axum::body::Body::new);
                    request.extensions_mut().insert(ConnectInfo(peer));
                    if let Some(certificate) = &certificate {
                        request.extensions_mut().insert(certificate.clone());
                    }
                    tower::ServiceExt::oneshot(app.clone(), request)
                });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                .await;
        });
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    let scheme = if args.tls_cert.is_some() {
        "https"
    } else {
        "http"
    };
    let public_url = match &args.public_url {
        Some(url) => url.clone(),
        None => format!("{scheme}://{}", listener.local_addr()?),
    };
    let usage = match (&args.usage_client_id, &args.usage_client_secret) {
        (Some(id), Some(secret)) => Some((
            tessera_proto::ClientId::parse(id).ok_or("--usage-client-id is not a client id")?,
            tessera_proto::ClientSecret::new(secret.clone()),
        )),
        _ => None,
    };
    let limits = Limits {
        off: args.no_plan_limits,
        redis_url: args.redis_url.clone(),
        usage,
    };
    let (mut app, verifiers) = app(&args.issuer, &public_url, &limits)?;
    // Learn the limits now; an issuer not up yet is learned from at the first request.
    for verifier in &verifiers {
        match verifier.refresh_limits().await {
            Ok(true) => {}
            Ok(false) => eprintln!(
                "{}: Redis did not answer; counting in memory at this instance's share until \
                 it does",
                verifier.audience()
            ),
            Err(e) => eprintln!(
                "{}: the plan limits are not known yet: {e}",
                verifier.audience()
            ),
        }
    }
    if let (Some(header), Some(address)) = (args.client_cert_header.clone(), args.trusted_proxy) {
        let proxy = Arc::new(Proxy { header, address });
        app = app.layer(axum::middleware::from_fn(move |request, next| {
            certificate_from_proxy(proxy.clone(), request, next)
        }));
    }
    println!(
        "protected APIs on {scheme}://{} for issuer {}",
        listener.local_addr()?,
        args.issuer
    );
    if args.tls_cert.is_some() {
        return serve_tls(listener, app, &args).await;
    }
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await?;
    // Counts not reported yet go now.
    for verifier in &verifiers {
        if let Err(e) = verifier.flush_usage().await {
            eprintln!("{}: usage not reported: {e}", verifier.audience());
        }
    }
    Ok(())
}
