use std::sync::Arc;
use std::time::Duration;

use tessera_proto::{BasicCredentials, ClientId, ClientSecret};
use tessera_server::secrets::Secrets;
use tessera_server::{admin, AppState, Config};
use tessera_store::{AuthMethod, Store};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub const SCOPES: &str = "market-data-api news-api";

pub struct TestApp {
    pub addr: std::net::SocketAddr,
    pub base: String,
    pub store: Arc<dyn Store>,
    pub secrets: Arc<Secrets>,
    pub state: AppState,
    pub http: reqwest::Client,
    pub db_url: String,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    pub server: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    _dir: tempfile::TempDir,
}

pub async fn spawn_app() -> TestApp {
    spawn_with(|_| {}).await
}

/// Starts a server on port 0 with a plan `pro` granting [`SCOPES`], on a fresh SQLite file.
pub async fn spawn_with(tweak: impl FnOnce(&mut Config)) -> TestApp {
    spawn_on(None, tweak).await
}

/// Starts a server on `db_url`, or on a fresh SQLite file.
pub async fn spawn_on(db_url: Option<&str>, tweak: impl FnOnce(&mut Config)) -> TestApp {
    let dir = tempfile::tempdir().unwrap();
    let db_url = db_url.map_or_else(
        || format!("sqlite://{}", dir.path().join("tessera.db").display()),
        str::to_owned,
    );
    let store = tessera_store::open(&db_url).await.unwrap();
    let secrets = Arc::new(Secrets::from_bytes(&[7; 32]));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let base = format!("http://{addr}");
    let mut config = Config::new(base.clone());
    config.sync_interval = Duration::from_millis(100);
    tweak(&mut config);
    admin::set_plan(store.as_ref(), "pro", SCOPES, None)
        .await
        .unwrap();
    let state = AppState::prepare(config, store.clone(), secrets.clone())
        .await
        .unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(tessera_server::run(listener, state.clone(), async {
        let _ = rx.await;
    }));
    TestApp {
        addr,
        base,
        store,
        secrets,
        state,
        http: reqwest::Client::new(),
        db_url,
        shutdown: Some(tx),
        server: Some(server),
        _dir: dir,
    }
}

impl TestApp {
    /// Registers a client on `plan` and makes the server see it at once.
    pub async fn client_on(&self, plan: &str, method: AuthMethod) -> (ClientId, ClientSecret) {
        let (client, secret) =
            admin::create_client(self.store.as_ref(), &self.secrets, plan, "test", method)
                .await
                .unwrap();
        self.state.sync().await.unwrap();
        (client.id, secret)
    }

    pub async fn client(&self) -> (ClientId, ClientSecret) {
        self.client_on("pro", AuthMethod::ClientSecretBasic).await
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
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
            .unwrap()
    }

    /// Sends raw bytes and returns the raw response.
    pub async fn raw(&self, request: &[u8]) -> String {
        let mut stream = TcpStream::connect(self.addr).await.unwrap();
        stream.write_all(request).await.unwrap();
        let mut out = Vec::new();
        stream.read_to_end(&mut out).await.unwrap();
        String::from_utf8_lossy(&out).into_owned()
    }

    pub async fn stop(&mut self) -> std::io::Result<()> {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        self.server.take().unwrap().await.unwrap()
    }

    pub fn stop_signal(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

pub fn basic(id: &ClientId, secret: &ClientSecret) -> String {
    BasicCredentials {
        client_id: id.clone(),
        client_secret: secret.clone(),
    }
    .to_header()
}

/// Reads an error answer: status, `error`, `error_description`, and checks the RFC 6749 5.1
/// cache headers every token endpoint answer carries.
pub async fn error_of(response: reqwest::Response) -> (u16, String, String) {
    let status = response.status().as_u16();
    assert_eq!(response.headers()["cache-control"], "no-store");
    assert_eq!(response.headers()["pragma"], "no-cache");
    let body: serde_json::Value = response.json().await.unwrap();
    (
        status,
        body["error"].as_str().unwrap().to_owned(),
        body["error_description"].as_str().unwrap_or("").to_owned(),
    )
}

pub fn claims_of(token: &str) -> serde_json::Value {
    use base64::Engine;
    let payload = token.split('.').nth(1).unwrap();
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}
