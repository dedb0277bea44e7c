//! A client with a secret gets a token and calls an API with it (docs/client-kit.md).
use tessera_client::{ClientId, ClientSecret, Environment, ScopeSet, TokenClient};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let client_id = std::env::var("TESSERA_CLIENT_ID")?;
    let tokens = TokenClient::builder()
        .environment(Environment::Production)
        .from_env() // {auth_url} from TESSERA_AUTH_URL
        .client_id(ClientId::parse(&client_id).ok_or("TESSERA_CLIENT_ID is not a client id")?)
        .client_secret(ClientSecret::new(std::env::var("TESSERA_CLIENT_SECRET")?))
        .scopes(ScopeSet::parse("market-data-api news-api")?)
        .build()?;
    let token = tokens.token().await?; // cached until shortly before expiry
    println!("a {:?} token", token.token_type());
    // A bearer request; one refresh on 401 invalid_token (at most one per 30 s).
    let quotes = tokens
        .send_authorized(
            reqwest::Client::new().get("https://api.example.com/market-data/v1/quotes"),
        )
        .await?;
    println!("quotes: {}", quotes.status());
    Ok(())
}
