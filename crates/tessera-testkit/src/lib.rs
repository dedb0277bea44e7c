//! Starts a real Tessera for tests: the production serve lifecycle (`tessera_server::Server`)
//! on port 0, a fresh SQLite file per server (or a database the test names), a clock the
//! test moves, and the log captured. Every test binary of the workspace starts its servers
//! here.
//!
//! ```no_run
//! # async fn example() {
//! let app = tessera_testkit::spawn_app().await;
//! let (id, secret) = app.client().await;
//! let answer = app.token(&id, &secret, "grant_type=client_credentials&scope=news-api").await;
//! assert_eq!(answer.status(), 200);
//! app.clock.advance(std::time::Duration::from_secs(3600)); // no sleeping
//! # }
//! ```

pub mod binary;
pub mod dpop;

use std::io::Write;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tessera_proto::{BasicCredentials, ClientId, ClientSecret};
use tessera_server::clock::ManualClock;
use tessera_server::registrar::Registrar;
use tessera_server::secrets::Secrets;
use tessera_server::{AppState, Config, Listeners, Server};
use tessera_store::{AuthMethod, Store};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The scopes of plan `pro`, which every test server has.
pub const SCOPES: &str = "market-data-api news-api";

/// What a test may change before the server starts.
pub struct Setup {
    /// The server's settings, as `tessera serve` takes them. `listen` is `127.0.0.1:0`;
    /// `[::]:0` makes a dual-stack listener, whose IPv4 peers appear as `::ffff:a.b.c.d`.
    /// An issuer left unset becomes `http://127.0.0.1:PORT`.
    pub config: Config,
    /// The database; `None` is a fresh SQLite file in a temporary folder.
    pub database_url: Option<String>,
    /// The clock the server reads; by default one standing at the current time.
    pub clock: ManualClock,
    /// Token lifetime of plan `pro`, in seconds (default 3600).
    pub pro_ttl: Option<u32>,
    /// Layers around the server's router (a test's middleware), applied last.
    pub wrap: Option<Box<dyn FnOnce(axum::Router) -> axum::Router + Send>>,
}

impl std::fmt::Debug for Setup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Setup")
            .field("config", &self.config)
            .field("database_url", &self.database_url)
            .finish_non_exhaustive()
    }
}

/// A running server and the handles a test needs.
#[derive(Debug)]
pub struct TestApp {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its issuer and base URL, `http://ADDRESS`.
    pub base: String,
    /// Its store, for setting up and inspecting records.
    pub store: Arc<dyn Store>,
    /// Its master secrets (a fixed test key).
    pub secrets: Arc<Secrets>,
    /// Its state.
    pub state: AppState,
    /// The clock it reads: move it instead of sleeping.
    pub clock: ManualClock,
    /// An HTTP client.
    pub http: reqwest::Client,
    /// Its database URL.
    pub db_url: String,
    /// Where its health listener listens, with `config.listen_http`.
    pub health_addr: Option<SocketAddr>,
    /// Where its metrics listener listens, with `config.metrics_listen`.
    pub metrics_addr: Option<SocketAddr>,
    /// Where its admin listener listens, with `config.admin_listen`: the admin API, the
    /// console and `/openapi.json`, which the main listener then does not serve.
    pub admin_addr: Option<SocketAddr>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    server: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    _dir: tempfile::TempDir,
}

/// A server with the defaults.
pub async fn spawn_app() -> TestApp {
    spawn_with(|_| {}).await
}

/// A server with plan `pro` granting [`SCOPES`], after `configure` has changed the setup,
/// started and run by the production lifecycle ([`tessera_server::Server`]).
pub async fn spawn_with(configure: impl FnOnce(&mut Setup)) -> TestApp {
    capture_log();
    let dir = tempfile::tempdir().expect("a temporary folder");
    let config = Config {
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        sync_interval: Duration::from_millis(100),
        ..Config::default()
    };
    let mut setup = Setup {
        config,
        database_url: None,
        clock: ManualClock::starting_now(),
        pro_ttl: None,
        wrap: None,
    };
    configure(&mut setup);
    let listeners = Listeners::bind(&setup.config)
        .await
        .expect("a port to listen on");
    let port = listeners.main.local_addr().expect("a bound address").port();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let base = format!("http://{addr}");
    setup.config.issuer.get_or_insert_with(|| base.clone());
    let db_url = setup
        .database_url
        .clone()
        .unwrap_or_else(|| format!("sqlite://{}", dir.path().join("tessera.db").display()));
    setup.config.database.clone_from(&db_url);
    let store = tessera_store::open(&db_url)
        .await
        .expect("the test database");
    let secrets = Arc::new(Secrets::from_bytes(&[7; 32]));
    let clock: tessera_server::clock::Clock = setup.clock.clone().into();
    Registrar::new(store.as_ref(), &clock)
        .set_plan("pro", SCOPES, setup.pro_ttl)
        .await
        .expect("plan pro");
    let server = Server::start(
        setup.config,
        listeners,
        clock,
        store.clone(),
        secrets.clone(),
    )
    .await
    .expect("a started server");
    let (state, health_addr, metrics_addr, admin_addr) = (
        server.state().clone(),
        server.health_addr(),
        server.metrics_addr(),
        server.admin_addr(),
    );
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let stopped = async {
        let _ = rx.await;
    };
    // Without layers of the test's, the server runs as the binary runs it: its token requests
    // skip the router (`tessera_server::serve`); with them, every request goes through.
    let server = match setup.wrap {
        Some(wrap) => tokio::spawn(server.run_with(wrap, stopped)),
        None => tokio::spawn(server.run(stopped)),
    };
    TestApp {
        addr,
        base,
        store,
        secrets,
        state,
        clock: setup.clock,
        http: reqwest::Client::new(),
        db_url,
        health_addr,
        metrics_addr,
        admin_addr,
        shutdown: Some(tx),
        server: Some(server),
        _dir: dir,
    }
}

impl TestApp {
    /// The registrar, on this server's store and clock.
    pub fn registrar(&self) -> Registrar<'_> {
        self.state.registrar()
    }

    /// Registers a client on `plan` and makes the server see it at once.
    pub async fn client_on(&self, plan: &str, method: AuthMethod) -> (ClientId, ClientSecret) {
        let created = self.client_in_store(plan, "test", method).await;
        self.sync().await;
        created
    }

    /// Registers a client on plan `pro` with HTTP Basic, named `label`, in the store only, as
    /// the CLI or another instance would: the server learns of it by its own means (a poll,
    /// or the first request that names it).
    pub async fn client_unsynced(&self, label: &str) -> (ClientId, ClientSecret) {
        self.client_in_store("pro", label, AuthMethod::ClientSecretBasic)
            .await
    }

    /// Registers a client in the store, unseen by the server until it syncs.
    async fn client_in_store(
        &self,
        plan: &str,
        label: &str,
        method: AuthMethod,
    ) -> (ClientId, ClientSecret) {
        let (client, secret) = self
            .registrar()
            .create_client(&self.secrets, plan, label, method)
            .await
            .expect("a new client");
        (client.id, secret)
    }

    /// Registers a client of organization `org` (on its plan), named `name`, with HTTP
    /// Basic, and makes the server see it at once.
    pub async fn client_of_org(&self, org: &str, name: &str) -> (ClientId, ClientSecret) {
        let placement = self
            .registrar()
            .placement("", Some(org))
            .await
            .expect("an organization");
        let (mut client, secret) = self.registrar().new_client(
            &self.secrets,
            &placement.plan,
            name,
            AuthMethod::ClientSecretBasic,
        );
        placement.apply(&mut client);
        self.store
            .insert_client(&client)
            .await
            .expect("a new client");
        self.sync().await;
        (client.id, secret)
    }

    /// Registers a client on plan `pro` with HTTP Basic.
    pub async fn client(&self) -> (ClientId, ClientSecret) {
        self.client_on("pro", AuthMethod::ClientSecretBasic).await
    }

    /// An admin client on plan `admin` (scopes `tessera-admin tessera-admin-read`, created
    /// if missing) and an access token for it with `scope`, for the admin API.
    pub async fn admin_token(&self, scope: &str) -> (ClientId, String) {
        self.registrar()
            .set_plan("admin", "tessera-admin tessera-admin-read", None)
            .await
            .expect("the admin plan");
        let (id, secret) = self.client_on("admin", AuthMethod::ClientSecretBasic).await;
        let answer = self
            .token(
                &id,
                &secret,
                &format!("grant_type=client_credentials&scope={scope}"),
            )
            .await;
        assert_eq!(answer.status(), 200, "an admin token");
        let body: serde_json::Value = answer.json().await.expect("a JSON answer");
        let token = body["access_token"].as_str().expect("a token").to_owned();
        (id, token)
    }

    /// Makes the server read the store now rather than at its next poll.
    pub async fn sync(&self) {
        self.state.sync().await.expect("the store answers");
    }

    /// `base` + `path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// The published key set, `/.well-known/jwks.json` (RFC 7517 section 5).
    pub async fn jwks(&self) -> serde_json::Value {
        let response = self.http.get(self.url("/.well-known/jwks.json")).send();
        response.await.unwrap().json().await.unwrap()
    }

    /// The `kid`s of the published key set, in its order.
    pub async fn published_kids(&self) -> Vec<String> {
        let jwks = self.jwks().await;
        let keys = jwks["keys"].as_array().unwrap().iter();
        keys.map(|k| k["kid"].as_str().unwrap().to_owned())
            .collect()
    }

    /// A token request with Basic credentials and a form body.
    pub async fn token(
        &self,
        id: &ClientId,
        secret: &ClientSecret,
        body: &str,
    ) -> reqwest::Response {
        self.http
            .post(self.url("/connect/token"))
            .header("authorization", basic(id, secret))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body.to_owned())
            .send()
            .await
            .expect("the server answers")
    }

    /// The text of `GET /metrics`; panics unless it answers 200, so that a missing endpoint
    /// never reads as an absent series.
    pub async fn metrics(&self) -> String {
        let response = self
            .http
            .get(self.url("/metrics"))
            .send()
            .await
            .expect("the server answers");
        assert_eq!(response.status(), 200, "GET /metrics");
        response.text().await.expect("a text body")
    }

    /// Sends raw bytes and returns the raw response.
    pub async fn raw(&self, request: &[u8]) -> String {
        let mut stream = TcpStream::connect(self.addr).await.expect("a connection");
        stream.write_all(request).await.expect("the request sent");
        let mut out = Vec::new();
        stream.read_to_end(&mut out).await.expect("the answer read");
        String::from_utf8_lossy(&out).into_owned()
    }

    /// Stops the server and waits until it has finished.
    pub async fn stop(&mut self) -> std::io::Result<()> {
        self.stop_signal();
        match self.server.take() {
            Some(server) => server.await.expect("the server task ends"),
            None => Ok(()),
        }
    }

    /// Tells the server to stop, without waiting.
    pub fn stop_signal(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }

    /// Waits for the server to have stopped, after [`TestApp::stop_signal`].
    pub async fn stopped(&mut self) -> std::io::Result<()> {
        self.stop().await
    }

    /// Every line logged in this test process so far (JSON, one event a line). Servers of
    /// other tests log here too: look for what is unique to yours (a client id, a token).
    pub fn log(&self) -> String {
        captured()
    }

    /// The lines of [`TestApp::log`] that this server's registry logged and that contain
    /// `said`: those whose `instance` field is its id
    /// ([`tessera_server::registry::Live::instance`]). Unlike the whole log, these can be
    /// counted, and shown to lack a line.
    pub fn registry_said(&self, said: &str) -> Vec<String> {
        let field = format!("\"instance\":\"{}\"", self.state.live().instance());
        captured()
            .lines()
            .filter(|line| line.contains(&field) && line.contains(said))
            .map(str::to_owned)
            .collect()
    }

    /// Waits until `n` more of the registry's polls have begun, and so `n - 1` more have
    /// finished (one runs at a time).
    pub async fn polls(&self, n: u64) {
        let live = self.state.live();
        let from = live.counts().polls;
        until("more polls", || async { live.counts().polls >= from + n }).await;
    }
}

/// Waits for an event instead of a time: polls `ready` every 10 ms until it says yes, and
/// panics naming `what` after 20 s, a bound generous enough for a loaded 2-core machine.
pub async fn until<F: std::future::Future<Output = bool>>(
    what: &str,
    mut ready: impl FnMut() -> F,
) {
    let started = std::time::Instant::now();
    while !ready().await {
        assert!(started.elapsed() < Duration::from_secs(20), "never: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The shared Redis the tests use: `TESSERA_TEST_REDIS_URL`, by default the local one.
pub fn redis_url() -> String {
    std::env::var("TESSERA_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

/// A Redis key prefix no other test, run or process shares: `what`, the pid, the wall time
/// in nanoseconds and a per-process count, so two tests of one run never see each other's
/// keys and a rerun never sees a previous run's.
pub fn unique_redis_prefix(what: &str) -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("tessera-test-{what}-{}-{nanos}-{n}:", std::process::id())
}

/// Where a `postgres://` URL points: the address its server resolves to (port 5432 when the
/// URL writes none), so a fault proxy can stand in front of whichever server
/// `TESSERA_TEST_POSTGRES_URL` names.
pub fn postgres_server(url: &str) -> SocketAddr {
    let written = postgres_host(url).1;
    let with_port = match written.rsplit_once(':') {
        Some((_, port)) if !written.ends_with(']') && port.parse::<u16>().is_ok() => {
            written.to_owned()
        }
        _ => format!("{written}:5432"),
    };
    std::net::ToSocketAddrs::to_socket_addrs(&with_port)
        .ok()
        .and_then(|mut found| found.next())
        .unwrap_or_else(|| panic!("cannot resolve the PostgreSQL server {with_port}"))
}

/// `url` with its server replaced by `proxy`: the same database, user and options.
pub fn postgres_through(url: &str, proxy: SocketAddr) -> String {
    let (at, written) = postgres_host(url);
    format!("{}{proxy}{}", &url[..at], &url[at + written.len()..])
}

/// The `host[:port]` of a `postgres://` URL as written, and where it starts.
fn postgres_host(url: &str) -> (usize, &str) {
    let start = url.find("://").map_or(0, |i| i + 3);
    let authority = url[start..].split(['/', '?']).next().unwrap_or_default();
    let written = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    (start + authority.len() - written.len(), written)
}

/// Whether a test must skip for want of an outside `tool` (say, util-linux `script`): `true`
/// when it is missing on a developer's machine, saying so on stderr. Under `CI=true` a
/// missing tool fails the test instead, so CI never passes a test it did not run.
pub fn skip_without(tool: &str, present: bool) -> bool {
    if present {
        return false;
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "CI=true and this test needs {tool}, which is missing"
    );
    eprintln!("skipped: no {tool}");
    true
}

/// A port of 127.0.0.1 that refuses connections while this lives: bound, so nothing else can
/// take it, and never listening, so the kernel answers a connection with a reset (Linux).
/// Unlike an assumed-closed port (1, 9), it cannot turn out to have a service behind it.
#[derive(Debug)]
pub struct RefusedPort {
    /// The port.
    pub port: u16,
    _socket: tokio::net::TcpSocket,
}

impl RefusedPort {
    /// Binds a fresh one.
    pub fn bind() -> Self {
        let socket = tokio::net::TcpSocket::new_v4().expect("a TCP socket");
        socket
            .bind(SocketAddr::from(([127, 0, 0, 1], 0)))
            .expect("bind 127.0.0.1:0");
        let port = socket.local_addr().expect("its address").port();
        Self {
            port,
            _socket: socket,
        }
    }
}

/// The `Authorization` value for HTTP Basic with these credentials (RFC 6749 2.3.1).
pub fn basic(id: &ClientId, secret: &ClientSecret) -> String {
    BasicCredentials {
        client_id: id.clone(),
        client_secret: secret.clone(),
    }
    .to_header()
}

/// Reads an error answer: status, `error`, `error_description`; checks the RFC 6749 5.1
/// cache headers every token endpoint answer carries.
pub async fn error_of(response: reqwest::Response) -> (u16, String, String) {
    let status = response.status().as_u16();
    assert_eq!(response.headers()["cache-control"], "no-store");
    assert_eq!(response.headers()["pragma"], "no-cache");
    let body: serde_json::Value = response.json().await.expect("a JSON body");
    (
        status,
        body["error"].as_str().expect("an error code").to_owned(),
        body["error_description"].as_str().unwrap_or("").to_owned(),
    )
}

/// A PEM certificate as a TLS-terminating proxy passes it on in a header: nginx's
/// `$ssl_client_escaped_cert`, every byte but ASCII letters and digits percent-escaped.
pub fn escaped_pem(pem: &str) -> String {
    pem.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' => char::from(b).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The claims of a JWT, read without verification.
pub fn claims_of(token: &str) -> serde_json::Value {
    jwt_part(token, 1)
}

/// The JOSE header of a JWT (RFC 7515 section 4), read without verification.
pub fn header_of(token: &str) -> serde_json::Value {
    jwt_part(token, 0)
}

/// Part `index` of a JWS in compact form, base64url-decoded and parsed as JSON.
fn jwt_part(token: &str, index: usize) -> serde_json::Value {
    use base64::Engine;
    let part = token.split('.').nth(index).expect("a JWT");
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(part)
        .expect("base64url");
    serde_json::from_slice(&bytes).expect("a JSON object")
}

/// A `redis-server` of the test's own on a free port of 127.0.0.1, for fault tests: kill it,
/// start it again on the same port, freeze it and thaw it. Nothing is saved to disk; it is
/// killed when dropped. Needs `redis-server` on the `PATH`.
#[derive(Debug)]
pub struct ThrowawayRedis {
    /// Its port.
    pub port: u16,
    child: Option<std::process::Child>,
    /// Its working folder, so that nothing lands in the test's.
    dir: tempfile::TempDir,
}

impl ThrowawayRedis {
    /// Starts one and waits until it answers. redis-server cannot be told to bind port 0
    /// and say which port it got (port 0 turns TCP off), so it is given a port that was
    /// free a moment ago; if another process took that port in between, it is started
    /// again on a fresh one, ten times at most.
    pub fn start() -> Self {
        let mut redis = Self {
            port: 0,
            child: None,
            dir: tempfile::tempdir().expect("a temporary folder"),
        };
        for _ in 0..10 {
            redis.port = std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("a free port")
                .port();
            match redis.launch() {
                Ok(()) => return redis,
                Err(log) if log.contains("in use") => continue,
                Err(log) => panic!("redis-server did not start: {log}"),
            }
        }
        panic!("redis-server found its port taken ten times over");
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Kills it with SIGKILL and waits for it to be gone.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it (again) on the same port, empty, and waits (10 s at most) until it
    /// answers. The port is the one the server under test was given, so it cannot change:
    /// if another process took it while this one was down, this fails and says so.
    pub fn restart(&mut self) {
        self.kill();
        if let Err(log) = self.launch() {
            panic!(
                "redis-server could not start again on port {}: {log}",
                self.port
            );
        }
    }

    /// Spawns redis-server on `self.port` and waits (10 s at most) until it says it is
    /// ready and answers, or until it exits: then its log is the error.
    fn launch(&mut self) -> Result<(), String> {
        let log = self.dir.path().join("redis.log");
        let _ = std::fs::remove_file(&log);
        let child = std::process::Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .args(["--logfile", "redis.log"])
            .current_dir(self.dir.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("redis-server on the PATH");
        self.child = Some(child);
        let started = std::time::Instant::now();
        // Its own log saying it is ready, not just a PONG on the port: another process's
        // Redis could answer there.
        let ready = || {
            std::fs::read_to_string(&log).is_ok_and(|l| l.contains("Ready to accept connections"))
        };
        while !(ready() && self.answers()) {
            let exited = self
                .child
                .as_mut()
                .and_then(|child| child.try_wait().ok().flatten());
            if let Some(status) = exited {
                self.child = None;
                let said = std::fs::read_to_string(&log).unwrap_or_default();
                return Err(format!("{status}: {said}"));
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "redis-server on port {} not answering after 10 s",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// Stops it with SIGSTOP: connections stay open and nothing is answered.
    pub fn freeze(&self) {
        self.signal("-STOP");
    }

    /// Lets a frozen server go on with SIGCONT.
    pub fn thaw(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        let child = self.child.as_ref().expect("a running redis-server");
        let status = std::process::Command::new("kill")
            .args([signal, &child.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success(), "kill {signal}");
    }

    /// Whether it answers PING with PONG.
    fn answers(&self) -> bool {
        use std::io::{Read, Write};
        let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
        let mut reply = [0u8; 7];
        stream.write_all(b"PING\r\n").is_ok()
            && stream.read_exact(&mut reply).is_ok()
            && &reply == b"+PONG\r\n"
    }
}

impl Drop for ThrowawayRedis {
    fn drop(&mut self) {
        // SIGKILL ends a frozen server too.
        self.kill();
    }
}

/// The process-wide log buffer.
fn buffer() -> &'static Arc<Mutex<Vec<u8>>> {
    static BUFFER: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    BUFFER.get_or_init(Arc::default)
}

#[derive(Clone)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Installs, once per process, a global subscriber that writes every event at INFO and
/// above as JSON into the buffer. A global one, not a scoped one: servers log from tasks
/// on any thread, and tracing caches per call site which subscribers are interested.
fn capture_log() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        let writer = Capture(buffer().clone());
        // No spans of the target the server exports traces on (`tessera::trace`): the
        // server then runs as it does without `OTEL_` settings, untraced, and answers token
        // requests without its router (`tessera_server::serve`).
        let untraced = tracing_subscriber::filter::filter_fn(|metadata| {
            metadata.target() != tessera_server::telemetry::TARGET
        });
        let subscriber = tracing_subscriber::layer::SubscriberExt::with(
            tracing_subscriber::fmt()
                .json()
                .with_max_level(tracing::Level::INFO)
                .with_writer(move || writer.clone())
                .finish(),
            untraced,
        );
        // Another subscriber installed by the test binary wins; then nothing is captured.
        let _ = tracing::subscriber::set_global_default(subscriber);
    });
}

fn captured() -> String {
    String::from_utf8_lossy(&buffer().lock().unwrap_or_else(|p| p.into_inner())).into_owned()
}

/// A TCP proxy in front of a real server (PostgreSQL, Redis) that a test can cut off and
/// restore, to play an outage without stopping the shared server: cut (connections closed
/// and refused) or hung (connections kept open, nothing forwarded: a partition, a frozen
/// host, which is the harder case for a caller without timeouts).
#[derive(Debug)]
pub struct CuttableProxy {
    /// Where clients connect instead of the real server.
    pub addr: SocketAddr,
    mode: tokio::sync::watch::Sender<ProxyMode>,
    links: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
    accept: tokio::task::JoinHandle<()>,
}

/// What a [`CuttableProxy`] does with connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ProxyMode {
    Forward,
    Cut,
    Hang,
}

impl CuttableProxy {
    /// Forwards 127.0.0.1:PORT to `target` until cut.
    pub async fn to(target: SocketAddr) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a port for the proxy");
        let addr = listener.local_addr().expect("a bound address");
        let (mode, watching) = tokio::sync::watch::channel(ProxyMode::Forward);
        let links: Arc<Mutex<Vec<tokio::task::AbortHandle>>> = Arc::default();
        let accept = tokio::spawn({
            let links = links.clone();
            async move {
                while let Ok((mut inbound, _)) = listener.accept().await {
                    let now = *watching.borrow();
                    if now == ProxyMode::Cut {
                        continue; // dropped: the connection is closed at once
                    }
                    let mut watching = watching.clone();
                    let link = tokio::spawn(async move {
                        if now == ProxyMode::Forward {
                            let Ok(mut outbound) = TcpStream::connect(target).await else {
                                return;
                            };
                            // Forwards until the proxy hangs, then holds both ends.
                            tokio::select! {
                                _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => return,
                                _ = watching.wait_for(|mode| *mode == ProxyMode::Hang) => {}
                            }
                            std::future::pending::<()>().await;
                            drop(outbound);
                        }
                        // Hung: accepted, never answered, until restored or cut.
                        std::future::pending::<()>().await;
                        drop(inbound);
                    });
                    links
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(link.abort_handle());
                }
            }
        });
        Self {
            addr,
            mode,
            links,
            accept,
        }
    }

    /// Closes every open connection and refuses new ones, as if the server were gone.
    pub fn cut(&self) {
        self.mode.send_replace(ProxyMode::Cut);
        self.close_links();
    }

    /// Forwards nothing more, on open connections and new ones, but keeps them open: the
    /// server seems to accept and never answers.
    pub fn hang(&self) {
        self.mode.send_replace(ProxyMode::Hang);
    }

    /// Lets connections through again; connections held by [`CuttableProxy::hang`] are
    /// closed, as a caller's own timeout would have closed them.
    pub fn restore(&self) {
        if self.mode.send_replace(ProxyMode::Forward) == ProxyMode::Hang {
            self.close_links();
        }
    }

    fn close_links(&self) {
        for link in self
            .links
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
        {
            link.abort();
        }
    }
}

impl Drop for CuttableProxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}

#[cfg(test)]
mod postgres_url_tests {
    use super::*;

    #[test]
    fn a_proxy_stands_in_for_the_server_a_url_names() {
        let proxy: SocketAddr = "127.0.0.1:40000".parse().unwrap();
        for (url, server, through) in [
            (
                "postgres://postgres@127.0.0.1:5433/test?options=x",
                "127.0.0.1:5433",
                "postgres://postgres@127.0.0.1:40000/test?options=x",
            ),
            (
                "postgres://u:p@127.0.0.1/test",
                "127.0.0.1:5432",
                "postgres://u:p@127.0.0.1:40000/test",
            ),
            (
                "postgresql://[::1]:6000/db",
                "[::1]:6000",
                "postgresql://127.0.0.1:40000/db",
            ),
        ] {
            assert_eq!(postgres_server(url), server.parse().unwrap(), "{url}");
            assert_eq!(postgres_through(url, proxy), through, "{url}");
        }
    }

    #[test]
    fn a_refused_port_refuses() {
        let refused = RefusedPort::bind();
        let error = std::net::TcpStream::connect(("127.0.0.1", refused.port)).unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::ConnectionRefused);
    }
}
