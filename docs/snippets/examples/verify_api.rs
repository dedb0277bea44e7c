//! An API that accepts Tessera's tokens for its own scope (docs/resource-server-kit.md).
use axum::routing::get;
use axum::Router;
use tessera_verify::{RequiredScope, Scoped, Verifier};

/// The scope, and audience, of this API.
struct MarketData;
impl RequiredScope for MarketData {
    const SCOPE: &'static str = "market-data-api";
}

/// 401 without a valid token, 403 `insufficient_scope` without `market-data-api`.
async fn quotes(token: Scoped<MarketData>) -> String {
    format!("quotes for {}\n", token.client_id)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let issuer = std::env::var("TESSERA_AUTH_URL")?; // e.g. http://127.0.0.1:8080
    let verifier = Verifier::builder(issuer, "market-data-api").build()?;
    verifier.refresh_keys().await?; // fail at start if the issuer cannot be reached
    let app = Router::new()
        .route("/market-data/v1/quotes", get(quotes))
        .with_state(verifier);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:9090").await?;
    axum::serve(listener, app).await?;
    Ok(())
}
