//! `tessera serve` and `tessera config check`: the flags, the environment and the
//! configuration file layered into one [`Config`], then the library's serve lifecycle
//! ([`tessera_server::Server`]) and the banner.

use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::parser::ValueSource;
use clap::{ArgMatches, Command, CommandFactory};
use serde::Serialize;
use tessera_proto::Algorithm;
use tessera_server::secrets::MasterKeyOrigin;
use tessera_server::{Config, Listeners, Rate, Seconds, Server};
use tessera_store::AuthMethod;

use crate::DataArgs;

/// Every setting of `serve`. Each is also a key of the `--config` file, named as the long
/// flag, and has a `TESSERA_*` variable; flags win over the environment, the environment
/// over the file, the file over the defaults. The defaults shown are
/// [`Config::default`]'s, set by [`with_defaults`].
#[derive(Debug, clap::Args, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) struct ServeArgs {
    /// Address to listen on: IP:PORT, e.g. 0.0.0.0:8080 (every interface) or
    /// 127.0.0.1:8080 (this machine only).
    #[arg(long, env = "TESSERA_LISTEN", value_name = "IP:PORT", value_parser = parse_address)]
    listen: Option<SocketAddr>,
    /// Issuer identifier (the `iss` of tokens). Default: http://ADDRESS, with the --listen address.
    #[arg(long, env = "TESSERA_ISSUER")]
    issuer: Option<String>,
    /// Algorithm of the signing keys this server generates: EdDSA, ES256, RS256 or PS256 (RSA for API gateways that accept only RSA).
    #[arg(long, env = "TESSERA_SIGNING_ALG", value_parser = crate::parse_alg)]
    signing_alg: Option<Algorithm>,
    /// Create demo plans for market-data-api, news-api and oms-api and a demo client, and
    /// print a ready curl command. The demo clients' secrets come from the master key: the
    /// same on every start with it.
    #[arg(long)]
    demo: bool,
    /// With --demo: serve HTTPS with a self-signed certificate for localhost, generated
    /// beside the database, and print the curl --cacert line.
    #[arg(long)]
    tls: bool,
    /// Log as JSON lines instead of text.
    #[arg(long, env = "TESSERA_LOG_JSON")]
    log_json: bool,
    /// PEM certificate chain: serve HTTPS (HTTP/2 and HTTP/1.1) with --tls-key. Reloaded on
    /// SIGHUP and when the file changes.
    #[arg(long, env = "TESSERA_TLS_CERT")]
    tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, env = "TESSERA_TLS_KEY")]
    tls_key: Option<PathBuf>,
    /// PEM: the CA(s) whose certificates `tls_client_auth` clients present (RFC 8705); with
    /// TLS the handshake asks for (never requires) a client certificate.
    #[arg(long, env = "TESSERA_CLIENT_CA")]
    client_ca: Option<PathBuf>,
    /// TLS session ticket keys shared by the instances behind one name, so that a client
    /// resumes on any of them: one per line, 64 hex digits (openssl rand -hex 32), the
    /// first one seals. Reloaded with the certificate.
    #[arg(long, env = "TESSERA_TLS_TICKET_KEY_FILE", value_name = "FILE")]
    tls_ticket_key_file: Option<PathBuf>,
    /// Behind a TLS-terminating proxy: the header in which it passes the client
    /// certificate on (URL-escaped PEM, as nginx's $ssl_client_escaped_cert), believed only
    /// from --trusted-proxy addresses.
    #[arg(long, env = "TESSERA_CLIENT_CERT_HEADER")]
    client_cert_header: Option<String>,
    /// With TLS: also answer plain HTTP here, for health checks only (/healthz, /readyz),
    /// e.g. for a load balancer.
    #[arg(long, env = "TESSERA_LISTEN_HTTP", value_name = "IP:PORT", value_parser = parse_address)]
    listen_http: Option<SocketAddr>,
    /// Serve /metrics on this address only (e.g. 127.0.0.1:9100), not on --listen.
    #[arg(long, env = "TESSERA_METRICS_LISTEN", value_name = "IP:PORT", value_parser = parse_address)]
    metrics_listen: Option<SocketAddr>,
    /// Serve the admin API (/admin/v1), the console (/console/) and /openapi.json on this
    /// address only (e.g. 10.0.0.5:8443), with --listen's TLS; --listen then serves the
    /// token endpoint and the rest of OAuth alone.
    #[arg(long, env = "TESSERA_ADMIN_LISTEN", value_name = "IP:PORT", value_parser = parse_address)]
    admin_listen: Option<SocketAddr>,
    /// Proxies (IP addresses) whose X-Forwarded-For is believed for rate limits and audit
    /// events; repeat or separate with commas.
    #[arg(
        long = "trusted-proxy",
        env = "TESSERA_TRUSTED_PROXIES",
        value_delimiter = ','
    )]
    #[serde(rename = "trusted-proxy")]
    trusted_proxies: Vec<IpAddr>,
    /// Do not serve the operator console at /console/.
    #[arg(long, env = "TESSERA_NO_CONSOLE")]
    no_console: bool,
    /// Single sign-on for the console: the issuer of the OpenID Connect provider people
    /// sign in with (Keycloak, Okta, Entra ID, Google). Register
    /// ISSUER/console/sign-in/sso/callback (this server's issuer) as its redirect URI.
    #[arg(long, env = "TESSERA_CONSOLE_OIDC_ISSUER", value_name = "URL")]
    console_oidc_issuer: Option<String>,
    /// The console's client id at the --console-oidc-issuer provider.
    #[arg(long, env = "TESSERA_CONSOLE_OIDC_CLIENT_ID", value_name = "ID")]
    console_oidc_client_id: Option<String>,
    /// The file holding the console's client secret at that provider.
    #[arg(
        long,
        env = "TESSERA_CONSOLE_OIDC_CLIENT_SECRET_FILE",
        value_name = "PATH"
    )]
    console_oidc_client_secret_file: Option<PathBuf>,
    /// The ID token claim listing a person's groups: a string or an array of strings; a
    /// dotted path reads into objects (realm_access.roles).
    #[arg(long, env = "TESSERA_CONSOLE_OIDC_ROLE_CLAIM", value_name = "CLAIM")]
    console_oidc_role_claim: Option<String>,
    /// People in this group may change things in the console.
    #[arg(long, env = "TESSERA_CONSOLE_ADMIN_GROUP", value_name = "G")]
    console_admin_group: Option<String>,
    /// People in this group may see everything in the console and change nothing; anyone
    /// in neither group is refused.
    #[arg(long, env = "TESSERA_CONSOLE_READ_GROUP", value_name = "G")]
    console_read_group: Option<String>,
    /// on or off: the console's sign-in with an admin client's id and secret (for
    /// bootstrap); off once single sign-on works.
    #[arg(long, env = "TESSERA_CONSOLE_CLIENT_SIGN_IN", value_name = "on|off")]
    console_client_sign_in: Option<tessera_server::Switch>,
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
    /// How long tokens are issued from the last good registry while the database does not
    /// answer, in seconds; past it the token endpoint answers 503.
    #[arg(long, env = "TESSERA_MAX_STALENESS", value_name = "SECONDS")]
    max_staleness: Option<Seconds>,
    /// How often the database is read for changes made elsewhere (the CLI, other
    /// instances), in seconds: a change is in force within this time.
    #[arg(long, env = "TESSERA_SYNC_INTERVAL", value_name = "SECONDS")]
    sync_interval: Option<Seconds>,
    /// How often the whole registry is read again, in seconds, as a safety net under the
    /// change log.
    #[arg(long, env = "TESSERA_FULL_RELOAD_INTERVAL", value_name = "SECONDS")]
    full_reload_interval: Option<Seconds>,
    /// How often usage counts are written and rate limiter state is pruned, in seconds.
    #[arg(long, env = "TESSERA_HOUSEKEEPING_INTERVAL", value_name = "SECONDS")]
    housekeeping_interval: Option<Seconds>,
    /// How long the audit events of admin and console changes are kept, in seconds
    /// (default a year; at most a million are kept).
    #[arg(long, env = "TESSERA_AUDIT_RETENTION", value_name = "SECONDS")]
    audit_retention: Option<Seconds>,
    /// How long a request may take, body upload included, in seconds (then 408).
    #[arg(long, env = "TESSERA_REQUEST_TIMEOUT", value_name = "SECONDS")]
    request_timeout: Option<Seconds>,
    /// How long a client may take for its TLS handshake and request head, in seconds.
    #[arg(long, env = "TESSERA_HEADER_TIMEOUT", value_name = "SECONDS")]
    header_timeout: Option<Seconds>,
    /// How long a connection may stay open with no request in flight, in seconds.
    #[arg(long, env = "TESSERA_IDLE_TIMEOUT", value_name = "SECONDS")]
    idle_timeout: Option<Seconds>,
    /// At a stop, how long an idle HTTP/1.1 connection stays open for a request its client
    /// may have sent already, in seconds: it is answered with `Connection: close`.
    #[arg(long, env = "TESSERA_SHUTDOWN_DRAIN", value_name = "SECONDS")]
    shutdown_drain: Option<Seconds>,
    /// How long a connection is kept alive, in seconds; then its next answer closes it
    /// (HTTP/1.1) or it is sent GOAWAY (HTTP/2), so that load spreads to new instances.
    #[arg(long, env = "TESSERA_MAX_CONNECTION_AGE", value_name = "SECONDS")]
    max_connection_age: Option<Seconds>,
    /// Requests one connection may carry before it is closed or sent GOAWAY.
    #[arg(
        long,
        env = "TESSERA_MAX_REQUESTS_PER_CONNECTION",
        value_name = "COUNT"
    )]
    max_requests_per_connection: Option<usize>,
    /// Connections open at once; past it the server stops accepting until one closes.
    #[arg(long, env = "TESSERA_MAX_CONNECTIONS", value_name = "COUNT")]
    max_connections: Option<usize>,
    /// Connections one source address may hold at once. Behind a load balancer every
    /// caller has its address: raise this to --max-connections there.
    #[arg(
        long,
        env = "TESSERA_MAX_CONNECTIONS_PER_ADDRESS",
        value_name = "COUNT"
    )]
    max_connections_per_address: Option<usize>,
    /// OAuth requests worked on at once before new ones get 503.
    #[arg(long, env = "TESSERA_MAX_IN_FLIGHT", value_name = "COUNT")]
    max_in_flight: Option<usize>,
    /// The largest request body accepted, in bytes (then 413).
    #[arg(long, env = "TESSERA_BODY_LIMIT", value_name = "BYTES")]
    body_limit: Option<usize>,
    /// The realm of WWW-Authenticate challenges.
    #[arg(long, env = "TESSERA_REALM")]
    realm: Option<String>,
    /// Failed client authentications allowed per source address and client, as
    /// COUNT/UNIT (s, min, hour, day); past it 429.
    #[arg(
        long,
        env = "TESSERA_AUTH_FAILURES_PER_SOURCE_AND_CLIENT",
        value_name = "RATE"
    )]
    auth_failures_per_source_and_client: Option<Rate>,
    /// Failed client authentications allowed per client from every source, as COUNT/UNIT.
    #[arg(long, env = "TESSERA_AUTH_FAILURES_PER_CLIENT", value_name = "RATE")]
    auth_failures_per_client: Option<Rate>,
    /// Failed client authentications allowed per source address, whatever client it
    /// names, as COUNT/UNIT.
    #[arg(long, env = "TESSERA_AUTH_FAILURES_PER_SOURCE", value_name = "RATE")]
    auth_failures_per_source: Option<Rate>,
    /// Failure counters kept in memory at most; past it failures get 429 uncounted.
    #[arg(long, env = "TESSERA_AUTH_FAILURES_MAX_TRACKED", value_name = "COUNT")]
    auth_failures_max_tracked: Option<usize>,
    /// Redis for rate limits shared by every instance (redis://host:port); by default each
    /// instance counts in its own memory.
    #[arg(long, env = "TESSERA_REDIS_URL")]
    redis_url: Option<String>,
    /// The prefix of this deployment's keys in Redis.
    #[arg(long, env = "TESSERA_REDIS_PREFIX")]
    redis_prefix: Option<String>,
    /// How long one call to Redis may take, in seconds; past it the instance counts in its
    /// own memory until Redis answers again.
    #[arg(long, env = "TESSERA_REDIS_TIMEOUT", value_name = "SECONDS")]
    redis_timeout: Option<Seconds>,
    /// The least number of instances sharing the Redis rate limits: while Redis fails, each
    /// counts 1/N of every rate in its own memory, N being the instances last counted
    /// through Redis (they count each other) or this, where it is larger. By default the
    /// count alone.
    #[arg(long, env = "TESSERA_EXPECTED_INSTANCES", value_name = "N")]
    expected_instances: Option<NonZeroU32>,
}

/// A listener's address, IP:PORT; what is wrong with another form says the form wanted,
/// with the address meant where it can be guessed (`8080`, `:8080`, `localhost:8080`).
/// Host names are not taken: which address a name resolves to is the resolver's choice.
fn parse_address(value: &str) -> Result<SocketAddr, String> {
    if let Ok(address) = value.parse() {
        return Ok(address);
    }
    let port = value
        .strip_prefix("localhost:")
        .or_else(|| value.strip_prefix(':'))
        .unwrap_or(value);
    let hint = match port.parse::<u16>() {
        Ok(port) if value.starts_with("localhost:") => {
            format!(": for this machine only, 127.0.0.1:{port} (or [::1]:{port})")
        }
        Ok(port) => format!(
            ": for every interface, 0.0.0.0:{port} (or [::]:{port}); for this machine only, \
             127.0.0.1:{port}"
        ),
        Err(_) => String::from(", e.g. 127.0.0.1:8080, 0.0.0.0:8080 or [::]:8080"),
    };
    Err(format!("expected an IP address and port, IP:PORT{hint}"))
}

/// The command tree with the defaults of `serve`'s settings shown in its help (and in
/// `config check`'s), taken from [`Config::default`] so that they cannot drift.
pub(crate) fn with_defaults(command: Command) -> Command {
    let defaults = defaults();
    let set = |sub: Command| {
        let ids: Vec<(String, String)> = sub
            .get_arguments()
            .filter_map(|arg| {
                let key = arg.get_long()?;
                let value = defaults.get(key)?;
                // Switches default to off, as clap shows them; lists to empty.
                let shown = !value.is_bool() && !value.is_array();
                shown.then(|| (arg.get_id().to_string(), plain(value)))
            })
            .collect();
        ids.into_iter().fold(sub, |sub, (id, value)| {
            sub.mut_arg(id, |arg| arg.default_value(value))
        })
    };
    command
        .mut_subcommand("serve", set)
        .mut_subcommand("config", |config| config.mut_subcommand("check", set))
}

/// [`Config::default`] as a table of keys and values.
fn defaults() -> toml::Table {
    toml::Table::try_from(Config::default()).expect("the settings serialize")
}

/// A value as a flag takes it: a string without its quotes.
fn plain(value: &toml::Value) -> String {
    match value {
        toml::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Where a setting's value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Source {
    Default,
    File,
    /// The variable's name.
    Env(String),
    Flag,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Default => f.write_str("default"),
            Self::File => f.write_str("file"),
            Self::Env(name) => write!(f, "env {name}"),
            Self::Flag => f.write_str("flag"),
        }
    }
}

/// The settings of `serve`: the defaults, under the `--config` file, under the
/// environment, under the flags; checked. With each key's source, in `--help` order.
pub(crate) fn configuration(
    data: &DataArgs,
    args: &ServeArgs,
    matches: &ArgMatches,
) -> Result<(Config, Vec<(String, Source)>)> {
    let file = match &data.config {
        Some(path) => read_file(path)?,
        None => toml::Table::new(),
    };
    let mut given = toml::Table::try_from(args).context("the flags")?;
    given.extend(toml::Table::try_from(data).context("the flags")?);
    let mut sources = Vec::new();
    let mut layer = toml::Table::new();
    for (key, id, env) in settings(matches) {
        let source = match matches.value_source(&id) {
            Some(ValueSource::CommandLine) => Some(Source::Flag),
            Some(ValueSource::EnvVariable) => Some(Source::Env(env.unwrap_or_default())),
            _ => None,
        };
        let source = match (source, given.remove(&key)) {
            (Some(source), Some(value)) => {
                layer.insert(key.clone(), value);
                source
            }
            _ if file.contains_key(&key) => Source::File,
            _ => Source::Default,
        };
        sources.push((key, source));
    }
    let config = Config::layered([&file, &layer])?;
    config.check()?;
    Ok((config, sources))
}

/// Each setting's key (the long flag), clap id and variable: the global database and
/// master key flags, then `serve`'s own, in `--help` order.
fn settings(matches: &ArgMatches) -> Vec<(String, String, Option<String>)> {
    // Unbuilt: each command holds its own arguments, in declaration order.
    let command = crate::Cli::command();
    let serve = command.find_subcommand("serve").expect("the serve command");
    let global = ["database", "master_key_file", "master_key"];
    let data = command
        .get_arguments()
        .filter(|arg| global.contains(&arg.get_id().as_str()));
    data.chain(serve.get_arguments())
        .filter(|arg| arg.get_id() != "config")
        .filter(|arg| matches.try_get_raw(arg.get_id().as_str()).is_ok())
        .filter_map(|arg| {
            let key = arg.get_long()?.to_owned();
            let env = arg.get_env().map(|e| e.to_string_lossy().into_owned());
            Some((key, arg.get_id().to_string(), env))
        })
        .collect()
}

/// The settings in the file at `path`, checked key by key; an error names the file, the
/// line and the key.
pub(crate) fn read_file(path: &Path) -> Result<toml::Table> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the configuration file {}", path.display()))?;
    let (_, table) = Config::from_toml(&text)
        .with_context(|| format!("configuration file {}", path.display()))?;
    Ok(table)
}

/// `tessera config check`: the effective settings of `serve` with these flags and this
/// environment, each with where it came from, secrets redacted; an error names the key.
pub(crate) fn check(data: &DataArgs, args: &ServeArgs, matches: &ArgMatches) -> Result<()> {
    let (config, sources) = configuration(data, args, matches)?;
    config.check_issuer()?;
    let shown = toml::Table::try_from(&config).context("the settings")?;
    let mut out = String::new();
    match &data.config {
        Some(path) => out.push_str(&format!(
            "# tessera serve: the effective configuration, with {}\n",
            path.display()
        )),
        None => out.push_str("# tessera serve: the effective configuration, with no file\n"),
    }
    let width = sources.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    for (key, source) in &sources {
        let line = match shown.get(key) {
            Some(value) => format!("{key} = {value}"),
            None => format!("# {key} is not set"),
        };
        out.push_str(&format!("{line:<w$}  # {source}\n", w = width + 24));
    }
    std::io::Write::write_all(&mut std::io::stdout(), out.as_bytes())?;
    Ok(())
}

pub(crate) async fn run(data: &DataArgs, args: &ServeArgs, matches: &ArgMatches) -> Result<()> {
    let (mut config, _) = configuration(data, args, matches)?;
    // Held until the server stops, so that buffered log lines are written out.
    let telemetry = tessera_server::telemetry::Telemetry::from_env()?;
    let traces = telemetry.as_ref().map(|t| t.destination());
    let _log_guard = init_logging(config.log_json, telemetry);
    let data = DataArgs {
        database: config.database.clone(),
        master_key_file: config.master_key_file.clone(),
        master_key: config.master_key.as_ref().map(|k| k.expose().to_owned()),
        init: data.init,
        config: data.config.clone(),
    };
    let store = data.store(crate::Access::Write).await?;
    let (secrets, origin) = data.secrets(store.as_ref()).await?;
    // --demo --tls: a certificate of our own, handed to the server as the files it serves.
    let demo_tls = config.tls;
    if demo_tls {
        let files = demo_certificate(&data.sqlite_path())?;
        config.tls = false;
        config.tls_cert = Some(files.cert);
        config.tls_key = Some(files.key);
    }
    let listeners = Listeners::bind(&config).await?;
    // Before the first line that says it listens: a SIGTERM from then on stops it cleanly.
    let shutdown = tessera_server::shutdown_signal();
    let (demo, console, redis, expected) = (
        config.demo,
        config.console(),
        config.redis_url.clone(),
        config.expected_instances,
    );
    let clock = tessera_server::clock::Clock::system();
    let server = Server::start(config, listeners, clock, store.clone(), secrets.clone()).await?;
    let tls = server.tls().cloned();
    let scheme = if tls.is_some() { "https" } else { "http" };
    let issuer = server.state().issuer().to_owned();

    println!("tessera listening on {scheme}://{}", server.addr());
    println!("  issuer:   {issuer}");
    if let Some(tls) = &tls {
        println!(
            "  TLS:      {} (reloaded on SIGHUP and when it changes)",
            tls.files().cert.display()
        );
    }
    if let Some(addr) = server.health_addr() {
        println!("  health:   http://{addr}/readyz");
    }
    if let Some(addr) = server.metrics_addr() {
        println!("  metrics:  http://{addr}/metrics");
    }
    let admin = match server.admin_addr() {
        Some(addr) => {
            println!(
                "  admin:    {scheme}://{addr}/admin/v1 (and /openapi.json) on this listener only"
            );
            format!("{scheme}://{addr}")
        }
        None => issuer.trim_end_matches('/').to_owned(),
    };
    if console {
        println!("  console:  {admin}/console/");
    }
    println!("  database: {}", tessera_server::redact_url(&data.database));
    if let Some(redis) = &redis {
        let floor = expected
            .map(|n| format!(", at least {n}"))
            .unwrap_or_default();
        println!(
            "  rate limits shared through {} (instances counted there{floor})",
            tessera_server::redact_url(redis),
        );
    }
    if let Some(traces) = &traces {
        println!("  traces:   OTLP/HTTP to {traces}");
    }
    match origin {
        MasterKeyOrigin::Env => println!("  master key: from TESSERA_MASTER_KEY"),
        MasterKeyOrigin::File(path) => println!("  master key: {}", path.display()),
        MasterKeyOrigin::Generated(path) => println!(
            "  master key: generated into {} (mode 0600); keep it safe, it seals the signing keys",
            path.display()
        ),
    }
    if demo {
        let cacert = tls
            .as_ref()
            .filter(|_| demo_tls)
            .map(|t| t.files().cert.clone());
        self::demo(
            store.as_ref(),
            &secrets,
            &issuer,
            &admin,
            cacert.as_deref(),
            console,
        )
        .await?;
        server.state().sync().await?;
    }
    server.run(shutdown).await?;
    Ok(())
}

/// Plans for the seed's three APIs and a client on the plan with all three; and an admin
/// plan with an admin client, for the admin API (at `admin_base`, the issuer unless it has
/// a listener of its own). Their secrets are the same on every start with this master key
/// ([`demo_client`]).
async fn demo(
    store: &dyn tessera_store::Store,
    secrets: &tessera_server::secrets::Secrets,
    issuer: &str,
    admin_base: &str,
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
    let (client, secret) = demo_client(&ops, store, secrets, &existing, "demo", "full").await?;
    let (admin, admin_secret) =
        demo_client(&ops, store, secrets, &existing, "demo-admin", "admin").await?;
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
    println!(
        "call the admin API (docs/admin-api.md; the whole surface: {admin_base}/openapi.json):"
    );
    println!(
        "  TOKEN=$({curl} -s -u '{}:{}' -d grant_type=client_credentials -d scope=tessera-admin {issuer}/connect/token | sed -E 's/.*\"access_token\":\"([^\"]+)\".*/\\1/')",
        admin.id,
        admin_secret.expose(),
    );
    println!("  {curl} -s -H \"Authorization: Bearer $TOKEN\" {admin_base}/admin/v1/clients");
    if console {
        println!(
            "or sign in to the console at {admin_base}/console/ with that client id and secret"
        );
    }
    println!();
    Ok(())
}

/// The demo client `label` on `plan`, with its secret: [`Secrets::demo_secret`], derived
/// from the master key, so that a restart prints (and accepts) the secret of the last start.
/// A demo client whose secret was changed since (rotated in the console, or made by a
/// Tessera that drew demo secrets at random) gets the derived one back, and that is said
/// loudly on stderr: the other secret no longer works.
///
/// [`Secrets::demo_secret`]: tessera_server::secrets::Secrets::demo_secret
async fn demo_client(
    ops: &tessera_server::registrar::Registrar<'_>,
    store: &dyn tessera_store::Store,
    secrets: &tessera_server::secrets::Secrets,
    existing: &[tessera_store::Client],
    label: &str,
    plan: &str,
) -> Result<(tessera_store::Client, tessera_proto::ClientSecret)> {
    use tessera_store::Credential;
    let Some(found) = existing.iter().find(|c| c.label == label) else {
        let (mut client, _) = ops.new_client(secrets, plan, label, AuthMethod::ClientSecretBasic);
        let secret = secrets.demo_secret(&client.id);
        client.credential = Credential::secret(secrets.hash_secret(&secret));
        store.insert_client(&client).await?;
        return Ok((client, secret));
    };
    let secret = secrets.demo_secret(&found.id);
    let kept = matches!(&found.credential, Credential::Secret { hash, previous: None }
        if secrets.verify_secret(&secret, hash));
    if kept {
        return Ok((found.clone(), secret));
    }
    let hash = secrets.hash_secret(&secret);
    let client = ops
        .update_client(found.id.as_str(), |c| {
            c.credential = Credential::secret(hash);
            c.auth_method = AuthMethod::ClientSecretBasic;
        })
        .await?;
    eprintln!(
        "NOTE: the secret of the demo client {label} ({}) had been changed since the demo set \
         it; --demo has set it back to the one printed below, and the other one no longer \
         works",
        client.id
    );
    Ok((client, secret))
}

/// A self-signed ECDSA P-256 certificate for `localhost`, `127.0.0.1` and `::1`, new on each start,
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
    // ECDSA P-256: every TLS client accepts it, browsers included; Ed25519's handshake is a
    // little cheaper, but browsers refuse it (docs/https.md, "Which key for the certificate").
    let generated = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
        .and_then(|key_pair| {
            let cert = rcgen::CertificateParams::new(names)?.self_signed(&key_pair)?;
            Ok(rcgen::CertifiedKey { cert, key_pair })
        })
        .context("cannot generate the demo certificate")?;
    let files = tessera_server::tls::TlsFiles {
        cert: dir.join("tessera-demo-cert.pem"),
        key: dir.join("tessera-demo-key.pem"),
        client_ca: None,
        ticket_keys: None,
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

/// Logs to stderr through a background writer, so that the token path never waits on a
/// write system call, nor formats its audit line (see `tessera_server::logging`). Lossless:
/// when the queue is full, logging waits rather than drop an audit event.
/// With `telemetry` (the `OTEL_` variables), spans are exported too.
fn init_logging(
    json: bool,
    telemetry: Option<tessera_server::telemetry::Telemetry>,
) -> tessera_server::logging::Guard {
    use tessera_server::logging::{self, Format};
    let format = if json {
        Format::Json
    } else {
        Format::Text {
            ansi: std::io::IsTerminal::is_terminal(&std::io::stderr()),
        }
    };
    logging::init(format, "info,sqlx=warn", std::io::stderr(), telemetry)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The file's keys are the flags' long names: every flag of `serve` (and the global
    /// database and master key flags) is a key of [`Config`], and every key a flag.
    #[test]
    fn every_setting_is_a_flag_and_a_key() {
        crate::Cli::command_with_defaults().debug_assert();
        let command = crate::Cli::command();
        let serve = command.find_subcommand("serve").unwrap();
        let mut flags: Vec<String> = serve
            .get_arguments()
            .filter_map(|arg| arg.get_long().map(str::to_owned))
            .filter(|long| long != "config")
            .chain(["database", "master-key-file", "master-key"].map(String::from))
            .collect();
        flags.sort();
        let every = Config {
            issuer: Some("https://x".into()),
            master_key_file: Some("k".into()),
            master_key: Some(tessera_proto::ClientSecret::new("k")),
            tls_cert: Some("c".into()),
            tls_key: Some("k".into()),
            client_ca: Some("ca".into()),
            tls_ticket_key_file: Some("t".into()),
            client_cert_header: Some(reqwest::header::HeaderName::from_static("x-cert")),
            listen_http: Some(SocketAddr::from(([127, 0, 0, 1], 1))),
            metrics_listen: Some(SocketAddr::from(([127, 0, 0, 1], 2))),
            admin_listen: Some(SocketAddr::from(([127, 0, 0, 1], 3))),
            redis_url: Some("redis://x".into()),
            expected_instances: Some(NonZeroU32::MIN),
            console_oidc_issuer: Some("https://idp".into()),
            console_oidc_client_id: Some("tessera".into()),
            console_oidc_client_secret_file: Some("s".into()),
            console_admin_group: Some("admins".into()),
            console_read_group: Some("readers".into()),
            ..Config::default()
        };
        let mut keys: Vec<String> = toml::Table::try_from(every)
            .unwrap()
            .keys()
            .cloned()
            .collect();
        keys.sort();
        assert_eq!(flags, keys);
        // And each has a variable, TESSERA_ and its name, but the modes of --demo.
        for arg in serve.get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            let wanted = format!("TESSERA_{}", long.to_uppercase().replace('-', "_"));
            let env = arg.get_env().map(|e| e.to_string_lossy().into_owned());
            match long {
                "demo" | "tls" => assert_eq!(env, None),
                "trusted-proxy" => assert_eq!(env.as_deref(), Some("TESSERA_TRUSTED_PROXIES")),
                _ => assert_eq!(env, Some(wanted), "{long}"),
            }
        }
    }
}
