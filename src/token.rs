//! `tessera token`: gets an access token with the client credentials grant and caches it on
//! disk for `expires_in`, so that repeated calls within the lifetime make no request (the
//! seed's rule: rate limits count token requests too).
//!
//! The client authenticates with its secret, its private key (`private_key_jwt`, RFC 7523
//! section 2.2: a new assertion signed for each request) or a JWT its platform writes to a
//! file (read for each request).
//!
//! The cache is one JSON file per user (`$TESSERA_TOKEN_CACHE`, else
//! `$XDG_CACHE_HOME/tessera/tokens.json`, else `~/.cache/tessera/tokens.json`), mode 0600 in a
//! 0700 folder, keyed by environment, token endpoint, client id, scope set and credentials
//! ([`CacheKey`]: a token goes only to whoever holds the secret or key it was issued for,
//! and a rotated or wrong secret asks the server). A damaged file is ignored and
//! rewritten; it never fails the command.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context, Result};
use serde::{Deserialize, Serialize};
use tessera_client::{
    CacheKey, ClientAuth, ClientId, ClientSecret, Environment, RefreshSkew, ScopeSet, TokenClient,
    TokenResponse, Url,
};
use tessera_server::clock::Clock;

#[derive(Debug, clap::Args)]
pub(crate) struct TokenArgs {
    /// production, staging, or a base URL. Production and staging addresses come from
    /// TESSERA_AUTH_URL and TESSERA_AUTH_URL_STAGE.
    #[arg(long = "env", default_value = "production")]
    environment: String,
    /// Space-separated scopes.
    #[arg(long)]
    scope: String,
    /// Print the whole token response as JSON (expires_in is what is left).
    #[arg(long)]
    json: bool,
    /// Ask the server even if a cached token is still valid, and do not cache.
    #[arg(long)]
    no_cache: bool,
    /// The client id.
    #[arg(long, env = "TESSERA_CLIENT_ID", hide_env_values = true)]
    client_id: String,
    /// The client secret; prefer the environment over the command line. The client's
    /// credentials are one of this, --private-key and --assertion-file.
    #[arg(long, env = "TESSERA_CLIENT_SECRET", hide_env_values = true)]
    client_secret: Option<String>,
    /// Authenticate with this private key instead of a secret (private_key_jwt): PKCS #8,
    /// PEM or DER, Ed25519, P-256 or RSA, as `tessera keys generate-client-key` writes it.
    #[arg(long, value_name = "FILE")]
    private_key: Option<PathBuf>,
    /// Authenticate with the JWT in this file instead of a secret, read for each request: a
    /// token the platform issues and rotates, such as a Kubernetes projected service-account
    /// token.
    #[arg(long, value_name = "FILE", env = "TESSERA_CLIENT_ASSERTION_FILE")]
    assertion_file: Option<PathBuf>,
    /// Where tokens are cached. Default: tessera/tokens.json under $XDG_CACHE_HOME, or
    /// under ~/.cache.
    #[arg(long, value_name = "FILE", env = "TESSERA_TOKEN_CACHE")]
    cache_file: Option<PathBuf>,
}

impl TokenArgs {
    /// The one kind of credentials given. Checked here rather than by clap, so that the
    /// message names the variables a value may have come from.
    fn auth(&self) -> Result<ClientAuth> {
        match (&self.client_secret, &self.private_key, &self.assertion_file) {
            (Some(secret), None, None) => Ok(ClientAuth::secret(ClientSecret::new(secret.clone()))),
            (None, Some(key), None) => {
                Ok(ClientAuth::private_key(crate::client_key::read(key)?, None))
            }
            (None, None, Some(path)) => Ok(ClientAuth::assertion_file(path)),
            (None, None, None) => Err(anyhow!(
                "no client credentials: set TESSERA_CLIENT_SECRET, or give --private-key or \
                 --assertion-file (TESSERA_CLIENT_ASSERTION_FILE)"
            )),
            (secret, key, file) => {
                let given: Vec<&str> = [
                    secret
                        .as_ref()
                        .map(|_| "the client secret (TESSERA_CLIENT_SECRET)"),
                    key.as_ref().map(|_| "--private-key"),
                    file.as_ref()
                        .map(|_| "--assertion-file (TESSERA_CLIENT_ASSERTION_FILE)"),
                ]
                .into_iter()
                .flatten()
                .collect();
                Err(anyhow!(
                    "give one kind of client credentials, not {}",
                    given.join(" and ")
                ))
            }
        }
    }
}

/// One cached token.
#[derive(Serialize, Deserialize)]
struct Entry {
    /// What the token is for, with the credentials it was issued to.
    key: CacheKey,
    access_token: String,
    scope: ScopeSet,
    /// Unix seconds: when the response was received plus `expires_in`.
    expires_at: i64,
    /// Unix seconds: when the response was received.
    received_at: i64,
}

#[derive(Serialize, Deserialize, Default)]
struct CacheFile {
    tokens: Vec<Entry>,
}

pub(crate) async fn run(args: TokenArgs) -> Result<()> {
    let environment =
        match args.environment.as_str() {
            "production" => Environment::Production,
            "staging" => Environment::Staging,
            url => Environment::Custom(Url::parse(url).with_context(|| {
                format!("--env must be production, staging or a URL, not {url:?}")
            })?),
        };
    let client_id =
        ClientId::parse(&args.client_id).ok_or_else(|| anyhow!("TESSERA_CLIENT_ID is empty"))?;
    let scopes = ScopeSet::parse(&args.scope).map_err(|e| anyhow!("--scope: {e}"))?;
    let client = TokenClient::builder()
        .environment(environment)
        .from_env()
        .client_id(client_id)
        .auth(args.auth()?)
        .scopes(scopes)
        .build()?;

    let path = cache_path(&args);
    let now = Clock::system().now();
    let mut file = if args.no_cache {
        CacheFile::default()
    } else {
        path.as_deref().map(load).unwrap_or_default()
    };
    let skew = |entry: &Entry| {
        let lifetime = entry.expires_at.saturating_sub(entry.received_at).max(0);
        let lifetime = std::time::Duration::from_secs(lifetime as u64);
        RefreshSkew::default().for_lifetime(lifetime).as_secs() as i64
    };
    let cached = file
        .tokens
        .iter()
        .find(|e| e.key == *client.key() && now < e.expires_at.saturating_sub(skew(e)));
    let response = match cached {
        Some(entry) => TokenResponse {
            access_token: entry.access_token.clone(),
            token_type: tessera_proto::token::TokenType::Bearer,
            expires_in: entry.expires_at.saturating_sub(now).max(0) as u64,
            scope: entry.scope.clone(),
        },
        None => {
            let response = client.request_token().await?;
            if !args.no_cache {
                if let Some(path) = &path {
                    let received_at = now;
                    file.tokens
                        .retain(|e| e.expires_at > received_at && e.key != *client.key());
                    file.tokens.push(Entry {
                        key: client.key().clone(),
                        access_token: response.access_token.clone(),
                        scope: response.scope.clone(),
                        expires_at: received_at
                            .saturating_add(i64::try_from(response.expires_in).unwrap_or(i64::MAX)),
                        received_at,
                    });
                    if let Err(e) = save(path, &file) {
                        eprintln!(
                            "warning: could not write the token cache {}: {e:#}",
                            path.display()
                        );
                    }
                }
            }
            response
        }
    };
    let mut out = std::io::stdout().lock();
    if args.json {
        writeln!(out, "{}", serde_json::to_string(&response)?)?;
    } else {
        writeln!(out, "{}", response.access_token)?;
    }
    Ok(())
}

/// `--cache-file`, or the user's cache folder by the XDG base directory convention.
fn cache_path(args: &TokenArgs) -> Option<PathBuf> {
    if let Some(path) = &args.cache_file {
        return Some(path.clone());
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("tessera").join("tokens.json"))
}

/// Reads the cache; a missing or damaged file is an empty cache, and so is one that others
/// could have written or read (group or other permission bits).
fn load(path: &Path) -> CacheFile {
    #[cfg(unix)]
    if let Ok(meta) = std::fs::metadata(path) {
        use std::os::unix::fs::PermissionsExt;
        if meta.permissions().mode() & 0o077 != 0 {
            eprintln!(
                "warning: ignoring the token cache at {}: it is open to other users",
                path.display()
            );
            return CacheFile::default();
        }
    }
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|_| {
            eprintln!(
                "warning: ignoring a damaged token cache at {}",
                path.display()
            );
            CacheFile::default()
        }),
        Err(_) => CacheFile::default(),
    }
}

/// Writes the cache atomically: a new temporary file with a random name, mode 0600, created
/// exclusively (never one that someone else prepared), then renamed over the old one. The
/// folder is made 0700.
fn save(path: &Path, file: &CacheFile) -> Result<()> {
    let dir = path.parent().ok_or_else(|| anyhow!("no folder"))?;
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)?;
    let mut out = tempfile::Builder::new()
        .prefix(".tokens.")
        .suffix(".tmp")
        .tempfile_in(dir)?;
    out.write_all(&serde_json::to_vec(file)?)?;
    out.as_file().sync_all()?;
    out.persist(path)?;
    Ok(())
}
