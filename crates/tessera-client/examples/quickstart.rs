//! A new client's first token with the client kit. The console shows this program, with the
//! `export` lines that set its variables to the client's values, on the page that shows the
//! client's secret (docs/console.md); `cargo run -p tessera-client --example quickstart`
//! runs it.
use tessera_client::{ClientId, ClientSecret, Environment, ScopeSet, TokenClient};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let var = |name: &str| std::env::var(name).map_err(|_| format!("set {name}"));
    let client_id = var("TESSERA_CLIENT_ID")?;
    let scopes = var("TESSERA_SCOPES")?;
    let tokens = TokenClient::builder()
        .environment(Environment::Production)
        .from_env() // the server's base URL from TESSERA_AUTH_URL
        .client_id(ClientId::parse(&client_id).ok_or("TESSERA_CLIENT_ID is not a client id")?)
        .client_secret(ClientSecret::new(var("TESSERA_CLIENT_SECRET")?))
        .scopes(ScopeSet::parse(&scopes)?)
        .build()?;
    let token = tokens.token().await?; // cached until shortly before it expires
    println!(
        "{client_id} has a {:?} token for {scopes}",
        token.token_type()
    );
    Ok(())
}
