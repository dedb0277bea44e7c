//! Three small APIs protected by Tessera tokens, on one listener: market data, news and
//! order management. Each requires its own scope and audience; one order endpoint needs a
//! user, so an application's token is refused there (seed section 5.3, RFC 9470).
//!
//! Tokens bound to a client certificate (RFC 8705 section 3) are accepted only with that
//! certificate: the extractors look for a [`ClientCertificate`] in the request. Behind a
//! TLS-terminating proxy (`--client-cert-header NAME --trusted-proxy IP`), it comes from the
//! proxy's header, believed from that proxy only; an API that terminates TLS itself inserts
//! the connection's certificate the same way, once per connection (as `tessera serve` does).
//!
//! ```sh
//! cargo run --release --example protected_apis -- --issuer http://127.0.0.1:8080 --listen 127.0.0.1:9090
//! curl -H "Authorization: Bearer $TOKEN" http://127.0.0.1:9090/market-data/v1/quotes
//! ```

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::{ConnectInfo, Request};
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

/// The three APIs, each verifying tokens of `issuer` for its own audience.
pub(crate) fn app(issuer: &str) -> Result<Router, ConfigError> {
    let verifier = |audience: &str| Verifier::builder(issuer, audience).build();
    let market = Router::new()
        .route("/market-data/v1/quotes", get(quotes))
        .with_state(verifier(MarketData::SCOPE)?);
    let news = Router::new()
        .route("/news/v1/headlines", get(headlines))
        .with_state(verifier(News::SCOPE)?);
    let oms = Router::new()
        .route("/oms/v1/orders", get(orders))
        .route("/oms/v1/me/orders", get(my_orders))
        .with_state(verifier(Oms::SCOPE)?);
    Ok(market.merge(news).merge(oms))
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
async fn certificate_from_proxy(proxy: Arc<Proxy>, mut request: Request, next: Next) -> Response {
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
    /// Behind a TLS-terminating proxy: the header with the client certificate (URL-escaped
    /// PEM), for certificate-bound tokens.
    #[arg(long, requires = "trusted_proxy")]
    client_cert_header: Option<axum::http::HeaderName>,
    /// The proxy whose header is believed.
    #[arg(long, requires = "client_cert_header")]
    trusted_proxy: Option<IpAddr>,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let mut app = app(&args.issuer)?;
    if let (Some(header), Some(address)) = (args.client_cert_header, args.trusted_proxy) {
        let proxy = Arc::new(Proxy { header, address });
        app = app.layer(axum::middleware::from_fn(move |request, next| {
            certificate_from_proxy(proxy.clone(), request, next)
        }));
    }
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    println!(
        "protected APIs on http://{} for issuer {}",
        listener.local_addr()?,
        args.issuer
    );
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}
