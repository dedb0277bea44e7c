//! A client that proves itself with a private key instead of a secret (docs/client-kit.md).
use tessera_client::{ClientAuth, ClientId, ClientKey, Environment, ScopeSet, TokenClient};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let client_id = std::env::var("TESSERA_CLIENT_ID")?;
    let key = ClientKey::from_pkcs8_pem(&std::fs::read_to_string("billing.pem")?)?;
    let tokens = TokenClient::builder()
        .environment(Environment::Production) // aud = {auth_url}, the issuer
        .from_env() // {auth_url} from TESSERA_AUTH_URL
        .client_id(ClientId::parse(&client_id).ok_or("TESSERA_CLIENT_ID is not a client id")?)
        .auth(ClientAuth::private_key(key, Some("billing-1".into())))
        // or .auth(ClientAuth::assertion_file("/var/run/secrets/tokens/tessera"))
        .scopes(ScopeSet::parse("news-api")?)
        .build()?;
    let token = tokens.token().await?;
    println!("a {:?} token", token.token_type());
    Ok(())
}
