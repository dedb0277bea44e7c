//! `tessera serve`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use tessera_proto::Algorithm;
use tessera_server::secrets::MasterKeyOrigin;
use tessera_server::{AppState, Config};
use tessera_store::AuthMethod;

use crate::DataArgs;

#[derive(Debug, clap::Args)]
pub(crate) struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "TESSERA_LISTEN", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Issuer identifier (the `iss` of tokens). Default: http://ADDRESS, with the --listen address.
    #[arg(long, env = "TESSERA_ISSUER")]
    issuer: Option<String>,
    /// Algorithm of the signing keys this server generates: EdDSA (default), ES256, RS256 or PS256 (RSA for API gateways that accept only RSA).
    #[arg(long, env = "TESSERA_SIGNING_ALG", default_value = "EdDSA", value_parser = crate::parse_alg)]
    signing_alg: Algorithm,
    /// Create demo plans for market-data-api, news-api and oms-api and a demo client, and
    /// print a ready curl command.
    #[arg(long)]
    demo: bool,
    /// Redis for rate limits shared by every instance (redis://host:port); by default each
    /// instance counts in its own memory.
    #[arg(long, env = "TESSERA_REDIS_URL")]
    redis_url: Option<String>,
    /// The least number of instances sharing the Redis rate limits: while Redis fails, each
    /// counts 1/N of every rate in its own memory, N being the instances last counted
    /// through Redis (they count each other) or this, where it is larger. By default the
    /// count alone.
    #[arg(long, env = "TESSERA_EXPECTED_INSTANCES")]
    expected_instances: Option<std::num::NonZeroU32>,
    /// Proxies (IP addresses) whose X-Forwarded-For is believed for rate limits and audit
    /// events; repeat or separate with commas.
    #[arg(
        long = "trusted-proxy",
        env = "TESSERA_TRUSTED_PROXIES",
        value_delimiter = ','
    )]
    trusted_proxies: Vec<std::net::IpAddr>,
    /// Log as JSON lines instead of text.
    #[arg(long, env = "TESSERA_LOG_JSON")]
    log_json: bool,
    /// Connections one source address may hold at once (default 1000). Behind a load
    /// balancer every caller has its address: raise this to 10000 there.
    #[arg(long, env = "TESSERA_MAX_CONNECTIONS_PER_ADDRESS")]
    max_connections_per_address: Option<usize>,
    /// Serve /metrics on this address only (e.g. 127.0.0.1:9100), not on --listen.
    #[arg(long, env = "TESSERA_METRICS_LISTEN")]
    metrics_listen: Option<SocketAddr>,
    /// How long tokens are issued from the last good registry while the database does not
    /// answer, in seconds (default 300); past it the token endpoint answers 503.
    #[arg(long, env = "TESSERA_MAX_STALENESS")]
    max_staleness: Option<u64>,
    /// PEM certificate chain: serve HTTPS (HTTP/2 and HTTP/1.1) with --tls-key. Reloaded on
    /// SIGHUP and when the file changes.
    #[arg(long, env = "TESSERA_TLS_CERT", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, env = "TESSERA_TLS_KEY", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// PEM: the CA(s) whose certificates `tls_client_auth` clients present (RFC 8705); with
    /// TLS the handshake asks for (never requires) a client certificate.
    #[arg(long, env = "TESSERA_CLIENT_CA")]
    client_ca: Option<PathBuf>,
    /// Behind a TLS-terminating proxy: the header in which it passes the client
    /// certificate on (URL-escaped PEM, as nginx's $ssl_client_escaped_cert), believed only
    /// from --trusted-proxy addresses.
    #[arg(long, env = "TESSERA_CLIENT_CERT_HEADER", requires = "trusted_proxies")]
    client_cert_header: Option<String>,
    /// With --demo: serve HTTPS with a self-signed certificate for localhost, generated
    /// beside the database, and print the curl --cacert line.
    #[arg(long, requires = "demo", conflicts_with = "tls_cert")]
    tls: bool,
    /// With TLS: also answer plain HTTP here, for health checks only (/healthz, /readyz),
    /// e.g. for a load balancer.
    #[arg(long, env = "TESSERA_LISTEN_HTTP")]
    listen_http: Option<SocketAddr>,
    /// Do not serve the operator console at /console/.
    #[arg(long)]
    no_console: bool,
    /// Require a server nonce in every DPoP proof at the token endpoint (RFC 9449 section 8):
    /// a proof without the current one gets `use_dpop_nonce` and a `DPoP-Nonce` header.
    /// Limits how long a proof made ahead of time stays usable.
    #[arg(long, env = "TESSERA_DPOP_NONCE")]
    dpop_nonce: bool,
    /// Let private_key_jwt clients' jwks_uri (and trust policies' issuers) point at
    /// loopback, private or link-local addresses, and use plain http to those addresses
    /// only: for closed networks. Off by default, so that registering a client cannot make
    /// Tessera probe its own network.
    #[arg(long, env = "TESSERA_ALLOW_PRIVATE_JWKS_URI")]
    allow_private_jwks_uri: bool,
}

pub(crate) async fn run(data: &DataArgs, args: ServeArgs) -> Result<()> {
    // Held until the server stops, so that buffered log lines are written out.
    let _log_guard = init_logging(args.log_json);
    let store = data.store(crate::Access::Write).await?;
    let (secrets, origin) = data.secrets(store.as_ref()).await?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let local = listener.local_addr()?;
    let tls_files = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(tessera_server::tls::TlsFiles {
            cert: cert.clone(),
            key: key.clone(),
            client_ca: args.client_ca.clone(),
        }),
        _ if args.tls => Some(demo_certificate(&data.sqlite_path())?),
        _ => None,
    };
    let tls = match tls_files {
        Some(files) => Some(Arc::new(
            tessera_server::tls::Tls::load(files).context("cannot serve TLS")?,
        )),
        None => None,
    };
    if args.client_ca.is_some() && tls.is_none() && args.client_cert_header.is_none() {
        anyhow::bail!(
            "--client-ca needs TLS here (--tls-cert, --tls-key) or a proxy that passes the \
             certificate on (--client-cert-header with --trusted-proxy)"
        );
    }
    if args.listen_http.is_some() && tls.is_none() {
        anyhow::bail!(
            "--listen-http is for health checks beside HTTPS: give --tls-cert and --tls-key"
        );
    }
    let scheme = if tls.is_some() { "https" } else { "http" };
    let issuer = match args.issuer {
        Some(issuer) => issuer,
        // Clients and APIs must be able to reach the issuer; 0.0.0.0 is not an address.
        None if local.ip().is_unspecified() => anyhow::bail!(
            "listening on {local}: give the address clients use with --issuer (TESSERA_ISSUER)"
        ),
        None => format!("{scheme}://{local}"),
    };
    let mut config = Config::new(issuer.clone());
    config.signing_alg = args.signing_alg;
    config.redis_url = args.redis_url.clone();
    config.expected_instances = args.expected_instances;
    config.trusted_proxies = args.trusted_proxies.clone();
    config.console = !args.no_console;
    config.dpop_nonce = args.dpop_nonce;
    config.allow_private_jwks_uri = args.allow_private_jwks_uri;
    if let Some(cap) = args.max_connections_per_address {
        config.max_connections_per_address = cap;
    }
    if let Some(secs) = args.max_staleness {
        config.max_staleness = std::time::Duration::from_secs(secs);
    }
    let metrics_listener = match args.metrics_listen {
        Some(addr) => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen on {addr} for metrics"))?,
        ),
        None => None,
    };
    config.metrics_on_main_listener = metrics_listener.is_none();
    config.tls = tls.clone();
    if let Some(name) = &args.client_cert_header {
        config.client_cert_header = Some(
            name.parse()
                .with_context(|| format!("--client-cert-header {name:?} is no header name"))?,
        );
        if tls.is_none() {
            if let Some(path) = &args.client_ca {
                config.client_ca =
                    Some(tessera_server::tls::client_ca(path).context("cannot read --client-ca")?);
            }
        }
    }
    let health_listener = match args.listen_http {
        Some(addr) => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen on {addr} for health checks"))?,
        ),
        None => None,
    };
    let state = AppState::prepare(config, store.clone(), secrets.clone()).await?;
    // Tokens carry the issuer and APIs check it: a server on this database that started
    // with another one (say the default of another --listen port) issues tokens they refuse.
    let previous = store
        .replace_value("last_issuer", issuer.as_bytes())
        .await?;
    if let Some(previous) = previous.filter(|p| p != issuer.as_bytes()) {
        tracing::warn!(
            previous = %String::from_utf8_lossy(&previous),
            %issuer,
            "this database was last served under another issuer: this server's tokens carry \
             another iss, which APIs that expect the previous one refuse; give every server \
             on a database the same --issuer"
        );
    }

    println!("tessera listening on {scheme}://{local}");
    println!("  issuer:   {issuer}");
    if let Some(tls) = &tls {
        println!(
            "  TLS:      {} (reloaded on SIGHUP and when it changes)",
            tls.files().cert.display()
        );
        tokio::spawn(tls.clone().watch(std::time::Duration::from_secs(2)));
        tokio::spawn(reload_on_hangup(tls.clone()));
    }
    if let Some(listener) = health_listener {
        println!("  health:   http://{}/readyz", listener.local_addr()?);
        let state = state.clone();
        tokio::spawn(async move {
            if let Err(error) = tessera_server::run_health(listener, state).await {
                tracing::error!(%error, "the health listener failed");
            }
        });
    }
    if let Some(listener) = metrics_listener {
        println!("  metrics:  http://{}/metrics", listener.local_addr()?);
        let state = state.clone();
        tokio::spawn(async move {
            if let Err(error) = tessera_server::run_metrics(listener, state).await {
                tracing::error!(%error, "the metrics listener failed");
            }
        });
    }
    if !args.no_console {
        println!("  console:  {}/console/", issuer.trim_end_matches('/'));
    }
    println!("  database: {}", tessera_server::redact_url(&data.database));
    if let Some(redis) = &args.redis_url {
        let floor = args
            .expected_instances
            .map(|n| format!(", at least {n}"))
            .unwrap_or_default();
        println!(
            "  rate limits shared through {} (instances counted there{floor})",
            tessera_server::redact_url(redis),
        );
    }
    match origin {
        MasterKeyOrigin::Env => println!("  master key: from TESSERA_MASTER_KEY"),
        MasterKeyOrigin::File(path) => println!("  master key: {}", path.display()),
        MasterKeyOrigin::Generated(path) => println!(
            "  master key: generated into {} (mode 0600); keep it safe, it seals the signing keys",
            path.display()
        ),
    }
    if args.demo {
        let cacert = tls
            .as_ref()
            .filter(|_| args.tls)
            .map(|t| t.files().cert.clone());
        demo(
            store.as_ref(),
            &secrets,
            &issuer,
            cacert.as_deref(),
            !args.no_console,
        )
        .await?;
        state.sync().await?;
    }
    tessera_server::run(listener, state, tessera_server::shutdown_signal()).await?;
    // After a clean stop the database file alone holds every change: a copy of it is whole.
    match store.checkpoint().await {
        Ok(true) => {}
        Ok(false) => tracing::warn!(
            "the write-ahead log could not be emptied while other processes read the database; \
             it stays durable and is moved into the file later"
        ),
        Err(error) => tracing::warn!(%error, "checkpoint at shutdown failed"),
    }
    Ok(())
}

/// Plans for the seed's three APIs and a client on the plan with all three; and an admin
/// plan with an admin client, for the admin API. Their secrets are new on each start.
async fn demo(
    store: &dyn tessera_store::Store,
    secrets: &tessera_server::secrets::Secrets,
    issuer: &str,
    cacert: Option<&Path>,
    console: bool,
) -> Result<()> {
    let clock = tessera_server::clock::Clock::system();
    let ops = tessera_server::registrar::Registrar::new(store, &clock);
    ops.set_plan("market-data", "market-data-api", None).await?;
    ops.set_plan("news", "news-api", None).await?;
    ops.set_plan("full", "market-data-api news-api oms-api", None)
        .await?;
    ops.set_plan("admin", "tessera-admin tessera-admin-read", None)
        .await?;
    let existing = store.clients().await?;
    let demo_client = |label: &'static str, plan: &'static str| {
        let found = existing.iter().find(|c| c.label == label).cloned();
        async move {
            match found {
                Some(c) => ops.rotate_secret(secrets, c.id.as_str(), 0).await,
                None => {
                    ops.create_client(secrets, plan, label, AuthMethod::ClientSecretBasic)
                        .await
                }
            }
        }
    };
    let (client, secret) = demo_client("demo", "full").await?;
    let (admin, admin_secret) = demo_client("demo-admin", "admin").await?;
    let issuer = issuer.trim_end_matches('/');
    // With the demo certificate, curl must be told to trust it.
    let curl = match cacert {
        Some(path) => format!("curl --cacert {}", path.display()),
        None => "curl".to_owned(),
    };
    println!();
    println!("demo plans: market-data, news, full; demo client on plan full:");
    println!("  client_id:     {}", client.id);
    println!("  client_secret: {}", secret.expose());
    println!("get a token:");
    println!(
        "  {curl} -s -u '{}:{}' -d grant_type=client_credentials -d 'scope=market-data-api news-api' {issuer}/connect/token",
        client.id,
        secret.expose(),
    );
    println!();
    println!("demo admin client on plan admin (scopes tessera-admin, tessera-admin-read):");
    println!("  client_id:     {}", admin.id);
    println!("  client_secret: {}", admin_secret.expose());
    println!("call the admin API (docs/admin-api.md; the whole surface: {issuer}/openapi.json):");
    println!(
        "  TOKEN=$({curl} -s -u '{}:{}' -d grant_type=client_credentials -d scope=tessera-admin {issuer}/connect/token | sed -E 's/.*\"access_token\":\"([^\"]+)\".*/\\1/')",
        admin.id,
        admin_secret.expose(),
    );
    println!("  {curl} -s -H \"Authorization: Bearer $TOKEN\" {issuer}/admin/v1/clients");
    if console {
        println!("or sign in to the console at {issuer}/console/ with that client id and secret");
    }
    println!();
    Ok(())
}

/// A self-signed certificate for `localhost`, `127.0.0.1` and `::1`, new on each start,
/// written beside the database (or in the working directory): `tessera-demo-cert.pem` and
/// `tessera-demo-key.pem` (mode 0600).
fn demo_certificate(database: &Option<PathBuf>) -> Result<tessera_server::tls::TlsFiles> {
    let dir = database
        .as_deref()
        .and_then(Path::parent)
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let names = vec![
        "localhost".to_owned(),
        "127.0.0.1".to_owned(),
        "::1".to_owned(),
    ];
    let generated = rcgen::generate_simple_self_signed(names)
        .context("cannot generate the demo certificate")?;
    let files = tessera_server::tls::TlsFiles {
        cert: dir.join("tessera-demo-cert.pem"),
        key: dir.join("tessera-demo-key.pem"),
        client_ca: None,
    };
    std::fs::write(&files.cert, generated.cert.pem())
        .with_context(|| format!("cannot write {}", files.cert.display()))?;
    let mut key = std::fs::OpenOptions::new();
    key.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut key, 0o600);
    std::io::Write::write_all(
        &mut key
            .open(&files.key)
            .with_context(|| format!("cannot write {}", files.key.display()))?,
        generated.key_pair.serialize_pem().as_bytes(),
    )?;
    Ok(files)
}

/// Reloads the certificate on each SIGHUP.
async fn reload_on_hangup(tls: Arc<tessera_server::tls::Tls>) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let Ok(mut hangups) = signal(SignalKind::hangup()) else {
            return;
        };
        while hangups.recv().await.is_some() {
            if let Err(error) = tls.reload() {
                tracing::error!(%error, "SIGHUP: the TLS files cannot be used; keeping the previous certificate");
            }
        }
    }
    #[cfg(not(unix))]
    drop(tls);
}

/// Logs to stderr through a background writer, so that the token path never waits on a
/// write system call, nor formats its audit line (see `tessera_server::logging`). Lossless:
/// when the queue is full, logging waits rather than drop an audit event.
fn init_logging(json: bool) -> tessera_server::logging::Guard {
    use tessera_server::logging::{self, Format};
    let format = if json {
        Format::Json
    } else {
        Format::Text {
            ansi: std::io::IsTerminal::is_terminal(&std::io::stderr()),
        }
    };
    logging::init(format, "info,sqlx=warn", std::io::stderr())
}
