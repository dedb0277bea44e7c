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
use tessera_verify::{ClientCertificate, ConfigError, RequiredScope, Scoped, UserToken, Verifier};

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

/// The three APIs at `public_url`, each verifying tokens of `issuer` for its own audience and
/// serving its protected resource metadata (RFC 9728): resource `{public_url}/market-data`
/// and so on.
pub(crate) fn app(issuer: &str, public_url: &str) -> Result<Router, ConfigError> {
    let public_url = public_url.trim_end_matches('/');
    let verifier = |audience: &str, path: &str| {
        Verifier::builder(issuer, audience)
            .resource_url(format!("{public_url}/{path}"))
            .build()
    };
    let market = verifier(MarketData::SCOPE, "market-data")?;
    let news = verifier(News::SCOPE, "news")?;
    let oms = verifier(Oms::SCOPE, "oms")?;
    let metadata = market
        .protected_resource_router(&[MarketData::SCOPE])
        .merge(news.protected_resource_router(&[News::SCOPE]))
        .merge(oms.protected_resource_router(&[Oms::SCOPE]));
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
    Ok(market.merge(news).merge(oms).merge(metadata))
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
    let mut app = app(&args.issuer, &public_url)?;
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
    .await?;
    Ok(())
}
