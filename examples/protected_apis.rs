//! Three small APIs protected by Tessera tokens, on one listener: market data, news and
//! order management. Each requires its own scope and audience; one order endpoint needs a
//! user, so an application's token is refused there (seed section 5.3, RFC 9470).
//!
//! ```sh
//! cargo run --release --example protected_apis -- --issuer http://127.0.0.1:8080 --listen 127.0.0.1:9090
//! curl -H "Authorization: Bearer $TOKEN" http://127.0.0.1:9090/market-data/v1/quotes
//! ```

use std::net::SocketAddr;

use axum::routing::get;
use axum::{Json, Router};
use clap::Parser;
use serde_json::{json, Value};
use tessera_verify::{ConfigError, RequiredScope, Scoped, UserToken, Verifier};

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

#[derive(Debug, Parser)]
struct Args {
    /// The Tessera issuer whose tokens are accepted.
    #[arg(long, env = "TESSERA_ISSUER")]
    issuer: String,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:9090")]
    listen: SocketAddr,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let app = app(&args.issuer)?;
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    println!(
        "protected APIs on http://{} for issuer {}",
        listener.local_addr()?,
        args.issuer
    );
    axum::serve(listener, app).await?;
    Ok(())
}
