//! The `tessera` binary as an operator uses it: admin commands, `serve` on port 0 beside
//! them (each command's effect seen at the token endpoint), every flag and `TESSERA_*`
//! variable of `serve` and `token`, crash durability and signals.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod bulk;
mod client_keys;
mod config;
mod data;
mod operator;
mod remote;
mod signals;
mod subject_dn;
mod tls;

const BIN: &str = env!("CARGO_BIN_EXE_tessera");

/// `tessera` in `dir` with none of the test's own `TESSERA_*` variables: each test sets
/// the ones it means.
fn command(dir: &Path) -> Command {
    let mut command = Command::new(BIN);
    command.current_dir(dir);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("TESSERA_") {
            command.env_remove(name);
        }
    }
    command
}

fn tessera_with(dir: &Path, env: &[(&str, &str)], args: &[&str]) -> Output {
    command(dir)
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

fn ok(dir: &Path, args: &[&str]) -> String {
    ok_with(dir, &[], args)
}

fn ok_with(dir: &Path, env: &[(&str, &str)], args: &[&str]) -> String {
    let out = tessera_with(dir, env, args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn fails(dir: &Path, args: &[&str]) -> String {
    fails_with(dir, &[], args)
}

fn fails_with(dir: &Path, env: &[(&str, &str)], args: &[&str]) -> String {
    let out = tessera_with(dir, env, args);
    assert!(!out.status.success(), "{args:?} should fail");
    String::from_utf8(out.stderr).unwrap()
}

struct Server {
    child: Child,
    base: String,
    /// What the server wrote to stderr so far, line by line.
    stderr: Arc<Mutex<Vec<String>>>,
}

impl Server {
    fn start(dir: &Path, extra: &[&str]) -> Self {
        let args = [&["serve", "--listen", "127.0.0.1:0"], extra].concat();
        Self::start_with(dir, &[], &args)
    }

    /// `tessera ARGS` (a `serve` command) with the `TESSERA_*` variables in `env` only.
    fn start_with(dir: &Path, env: &[(&str, &str)], args: &[&str]) -> Self {
        let mut child = command(dir)
            .args(args)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let (lines, sink) = (BufReader::new(child.stderr.take().unwrap()), stderr.clone());
        std::thread::spawn(move || {
            for line in lines.lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        let mut lines = BufReader::new(child.stdout.take().unwrap());
        let mut first = String::new();
        lines.read_line(&mut first).unwrap();
        let base = first
            .trim()
            .strip_prefix("tessera listening on ")
            .unwrap_or_else(|| {
                panic!(
                    "unexpected first line {first:?}; stderr: {:?}",
                    stderr.lock().unwrap()
                )
            })
            .to_owned();
        // Keep draining stdout so the server never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines.lines() {});
        Self {
            child,
            base,
            stderr,
        }
    }

    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Stops the server with SIGTERM and waits (10 s at most) for it to exit.
    async fn terminate(mut self) -> std::process::ExitStatus {
        self.signal("-TERM");
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "still running 10 s after SIGTERM"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The first stderr line that `wanted` accepts, waited for 10 s at most.
    async fn log_line(&self, wanted: impl Fn(&str) -> bool) -> String {
        let started = Instant::now();
        loop {
            if let Some(line) = self.stderr.lock().unwrap().iter().find(|l| wanted(l)) {
                return line.clone();
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "no such log line within 10 s: {:?}",
                self.stderr.lock().unwrap()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits (10 s at most) until the server has loaded every change made so far to the
    /// database in `dir` by the CLI (run with `env`): a plan written now with a scope of its
    /// own shows in the metadata once the server has polled, and it reloads the registry
    /// whole, so everything written before shows with it. Checking through the metadata
    /// costs no token request and no failed authentication.
    async fn sees_changes(&self, dir: &Path, env: &[(&str, &str)]) {
        static BARRIER: AtomicUsize = AtomicUsize::new(0);
        let scope = format!("sync-{}-api", BARRIER.fetch_add(1, Ordering::Relaxed));
        ok_with(dir, env, &["plan", "set", &scope, "--scopes", &scope]);
        let started = Instant::now();
        loop {
            let metadata: serde_json::Value = reqwest::get(format!(
                "{}/.well-known/oauth-authorization-server",
                self.base
            ))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
            let scopes = metadata["scopes_supported"].as_array().unwrap();
            if scopes.iter().any(|s| *s == scope.as_str()) {
                return;
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "change not seen within 10 s"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn token(base: &str, id: &str, secret: &str, scope: &str) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{base}/connect/token"))
        .basic_auth(id, Some(secret))
        .form(&[("grant_type", "client_credentials"), ("scope", scope)])
        .send()
        .await
        .unwrap()
}

fn create_client(dir: &Path, plan: &str) -> (String, String) {
    create_client_with(dir, &[], &[], plan)
}

/// A client of `plan`, created with the `TESSERA_*` variables in `env` and `args` added.
fn create_client_with(
    dir: &Path,
    env: &[(&str, &str)],
    args: &[&str],
    plan: &str,
) -> (String, String) {
    let create = [
        "client", "create", "--plan", plan, "--name", "app", "--json",
    ];
    let out = ok_with(dir, env, &[&create[..], args].concat());
    let json: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(json["plan"], plan);
    (
        json["client_id"].as_str().unwrap().to_owned(),
        json["client_secret"].as_str().unwrap().to_owned(),
    )
}

#[test]
fn admin_commands_validate_and_write_nothing_on_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(
        d,
        &[
            "plan",
            "set",
            "pro",
            "--scopes",
            "market-data-api news-api",
            "--token-ttl",
            "600",
        ],
    );
    let plans = ok(d, &["plan", "list"]);
    assert!(
        plans.contains("pro") && plans.contains("600") && plans.contains("news-api"),
        "{plans}"
    );

    assert!(fails(d, &["plan", "set", "bad plan", "--scopes", "a"]).contains("plan name"));
    assert!(fails(d, &["plan", "set", "x", "--scopes", "ok bad!scope"]).contains("scope name"));
    assert!(fails(d, &["plan", "set", "x", "--scopes", " "]).contains("empty"));
    assert!(fails(
        d,
        &["plan", "set", "x", "--scopes", "a", "--token-ttl", "0"]
    )
    .contains("TTL"));
    let names: Vec<String> =
        serde_json::from_str::<Vec<serde_json::Value>>(&ok(d, &["plan", "list", "--json"]))
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap().to_owned())
            .collect();
    assert_eq!(names, ["pro"], "no half-written plan");

    let err = fails(d, &["client", "create", "--plan", "nope"]);
    assert!(err.contains("no plan named \"nope\""), "{err}");
    assert_eq!(
        ok(d, &["client", "list", "--json"]).trim(),
        "[]",
        "no half-written client"
    );

    let (id, secret) = create_client(d, "pro");
    assert!(id.starts_with("tc_") && secret.starts_with("tcs_"));
    let show = ok(d, &["client", "show", &id, "--json"]);
    assert!(!show.contains(&secret), "the secret is shown once");
    assert!(!show.contains("hash"));
    assert!(ok(d, &["client", "list"]).contains(&id));
    ok(d, &["client", "disable", &id]);
    assert!(ok(d, &["client", "show", &id]).contains("\"enabled\": false"));
    ok(d, &["client", "enable", &id]);
    assert!(ok(d, &["client", "show", &id]).contains("\"enabled\": true"));
    let rotated: serde_json::Value =
        serde_json::from_str(ok(d, &["client", "rotate-secret", &id, "--json"]).trim()).unwrap();
    assert_ne!(rotated["client_secret"].as_str().unwrap(), secret);
    assert!(fails(d, &["client", "show", "tc_nobody"]).contains("no client"));
    assert!(fails(d, &["client", "disable", "tc_nobody"]).contains("no client"));
    ok(d, &["client", "delete", &id]);
    assert!(fails(d, &["client", "delete", &id]).contains("no client"));

    let keys =
        |args: &[&str]| -> Vec<serde_json::Value> { serde_json::from_str(&ok(d, args)).unwrap() };
    assert!(
        keys(&["keys", "list", "--json"]).is_empty(),
        "serve makes the first key"
    );
    ok(d, &["keys", "rotate", "--activate-in", "0"]);
    let before = keys(&["keys", "list", "--json"]);
    assert_eq!(before.len(), 1);
    assert_eq!(before[0]["status"], "signing");
    assert_eq!(before[0]["alg"], "EdDSA");
    let table = ok(d, &["keys", "list"]);
    let first_kid = before[0]["kid"].as_str().unwrap();
    assert!(
        table
            .lines()
            .any(|l| l.starts_with(first_kid) && l.contains("signing")),
        "{table}"
    );
    // A key announced ahead: published as next while the first goes on signing. (Two
    // keys activating in the same second would be ordered by kid, so the test gives the
    // second one a future activation rather than wait for the clock.)
    ok(
        d,
        &["keys", "rotate", "--activate-in", "600", "--alg", "ES256"],
    );
    let after = keys(&["keys", "list", "--json"]);
    assert_eq!(after.len(), 2);
    assert_eq!(after[0]["kid"], before[0]["kid"]);
    assert_eq!(after[0]["status"], "signing");
    assert_eq!(
        (&after[1]["status"], &after[1]["alg"]),
        (&"next".into(), &"ES256".into())
    );

    // The master key was generated beside the database, readable by its owner only.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(d.join("tessera.db.key"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}

#[test]
fn another_master_key_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(d, &["plan", "set", "pro", "--scopes", "news-api"]);
    create_client(d, "pro");
    let out = Command::new(BIN)
        .args(["client", "create", "--plan", "pro"])
        .current_dir(d)
        .env("TESSERA_MASTER_KEY", "A".repeat(43))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("does not belong to this database"), "{err}");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&ok(d, &["client", "list", "--json"]))
            .unwrap()
            .as_array()
            .unwrap()
            .len(),
        1,
        "nothing written under the wrong key"
    );
}

#[test]
fn serve_on_an_unspecified_address_needs_an_issuer() {
    let dir = tempfile::tempdir().unwrap();
    let err = fails(dir.path(), &["serve", "--listen", "0.0.0.0:0"]);
    assert!(err.contains("--issuer"), "{err}");
}

#[test]
fn a_restart_keeps_a_rotated_algorithm() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(
        d,
        &["keys", "rotate", "--alg", "ES256", "--activate-in", "0"],
    );
    drop(Server::start(d, &[]));
    let keys: serde_json::Value =
        serde_json::from_str(&ok(d, &["keys", "list", "--json"])).unwrap();
    let keys = keys.as_array().unwrap();
    assert_eq!(keys.len(), 1, "no unannounced key generated: {keys:?}");
    assert_eq!(keys[0]["alg"], "ES256");
    assert_eq!(keys[0]["status"], "signing");
}

#[test]
fn a_missing_master_key_is_not_silently_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(d, &["plan", "set", "pro", "--scopes", "news-api"]);
    create_client(d, "pro");
    std::fs::remove_file(d.join("tessera.db.key")).unwrap();
    let err = fails(d, &["client", "create", "--plan", "pro"]);
    assert!(err.contains("master key"), "{err}");
    assert!(!d.join("tessera.db.key").exists());
}

#[tokio::test]
async fn serve_sees_cli_changes_and_survives_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(
        d,
        &["plan", "set", "pro", "--scopes", "market-data-api news-api"],
    );
    let server = Server::start(d, &[]);

    // A client created by the CLI while the server runs gets a token: the server polls
    // every 250 ms (the one-second promise); the bound here is generous, for a loaded machine.
    let (id, secret) = create_client(d, "pro");
    let started = Instant::now();
    while token(&server.base, &id, &secret, "news-api").await.status() != 200 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "change not seen within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // kill -9 right after the server acknowledged a revocation: it survives the restart.
    let issued: serde_json::Value = token(&server.base, &id, &secret, "news-api")
        .await
        .json()
        .await
        .unwrap();
    let access_token = issued["access_token"].as_str().unwrap().to_owned();
    let form = |path: &str| {
        reqwest::Client::new()
            .post(format!("{}{path}", server.base))
            .basic_auth(&id, Some(&secret))
            .form(&[("token", access_token.as_str())])
    };
    assert_eq!(
        form("/connect/revocation").send().await.unwrap().status(),
        200
    );
    server.signal("-KILL");
    drop(server);
    let server = Server::start(d, &[]);
    let introspected: serde_json::Value = reqwest::Client::new()
        .post(format!("{}/connect/introspect", server.base))
        .basic_auth(&id, Some(&secret))
        .form(&[("token", access_token.as_str())])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(introspected["active"], false, "the revocation was lost");
    assert_eq!(
        token(&server.base, &id, &secret, "market-data-api")
            .await
            .status(),
        200
    );
}

#[tokio::test]
async fn demo_leads_to_a_first_token_and_sigterm_stops_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--demo"])
        .current_dir(dir.path())
        .env_remove("TESSERA_DATABASE_URL")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut reader = BufReader::new(child.stdout.take().unwrap());
    let mut curl = None;
    let mut line = String::new();
    while curl.is_none() {
        line.clear();
        assert!(
            reader.read_line(&mut line).unwrap() > 0,
            "no curl command printed"
        );
        if line.trim_start().starts_with("curl ") {
            curl = Some(line.trim().to_owned());
        }
    }
    let curl = curl.unwrap();
    // The printed command: curl -s -u 'ID:SECRET' -d ... -d 'scope=...' URL
    let creds = curl.split('\'').nth(1).unwrap();
    let (id, secret) = creds.split_once(':').unwrap();
    let url = curl.rsplit(' ').next().unwrap();
    let base = url.strip_suffix("/connect/token").unwrap();
    let response = token(base, id, secret, "market-data-api news-api").await;
    assert_eq!(response.status(), 200);

    // Then the admin client's line: TOKEN=$(curl -s -u 'ID:SECRET' ... scope=tessera-admin URL | sed ...)
    let admin_line = loop {
        line.clear();
        assert!(reader.read_line(&mut line).unwrap() > 0, "no admin line");
        if line.trim_start().starts_with("TOKEN=$(curl ") {
            break line.trim().to_owned();
        }
    };
    let (admin_id, admin_secret) = admin_line
        .split('\'')
        .nth(1)
        .unwrap()
        .split_once(':')
        .unwrap();
    let answer: serde_json::Value = token(base, admin_id, admin_secret, "tessera-admin")
        .await
        .json()
        .await
        .unwrap();
    let clients: serde_json::Value = reqwest::Client::new()
        .get(format!("{base}/admin/v1/clients"))
        .bearer_auth(answer["access_token"].as_str().unwrap())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let names: Vec<&str> = clients["clients"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 2);
    assert!(
        names.contains(&"demo") && names.contains(&"demo-admin"),
        "{names:?}"
    );

    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let exit = child.wait().unwrap();
    assert!(exit.success(), "graceful exit on SIGTERM: {exit:?}");
}

fn token_cmd(dir: &Path, cache: &Path, id: &str, secret: &str, args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("token")
        .args(args)
        .current_dir(dir)
        .env("TESSERA_CLIENT_ID", id)
        .env("TESSERA_CLIENT_SECRET", secret)
        .env("TESSERA_TOKEN_CACHE", cache)
        .output()
        .unwrap()
}

async fn issued_total(base: &str) -> u64 {
    let text = reqwest::get(format!("{base}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .filter(|l| l.starts_with("tessera_tokens_issued_total{"))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum()
}

#[tokio::test]
async fn token_command_caches_on_disk_for_the_lifetime() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(
        d,
        &["plan", "set", "pro", "--scopes", "market-data-api news-api"],
    );
    // Another plan offers oms-api, so a refusal of it names it.
    ok(d, &["plan", "set", "orders", "--scopes", "oms-api"]);
    let (id, secret) = create_client(d, "pro");
    let server = Server::start(d, &[]);
    let cache = d.join("cache").join("tokens.json");
    let base = server.base.as_str();

    let first = token_cmd(
        d,
        &cache,
        &id,
        &secret,
        &["--env", base, "--scope", "news-api"],
    );
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let token = String::from_utf8(first.stdout).unwrap().trim().to_owned();
    assert_eq!(token.split('.').count(), 3);
    assert!(!String::from_utf8_lossy(&first.stderr).contains(&secret));

    // The second call is served from the file: same token, no request.
    let second = token_cmd(
        d,
        &cache,
        &id,
        &secret,
        &["--env", base, "--scope", "news-api", "--json"],
    );
    let json: serde_json::Value = serde_json::from_slice(&second.stdout).unwrap();
    assert_eq!(json["access_token"], token);
    assert_eq!(json["token_type"], "Bearer");
    assert!(json["expires_in"].as_u64().unwrap() <= 3600);
    assert_eq!(issued_total(base).await, 1);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&cache).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let text = std::fs::read_to_string(&cache).unwrap();
        assert!(!text.contains(&secret), "the secret is never cached");
    }

    // Time passes (the file is moved back in time, as if the clock had moved on): a token
    // within its refresh margin (10% of its life, at most 30 s) is not served, an earlier
    // one still is.
    let age_cache = |by: i64| {
        let mut file: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&cache).unwrap()).unwrap();
        for entry in file["tokens"].as_array_mut().unwrap() {
            for field in ["expires_at", "received_at"] {
                entry[field] = (entry[field].as_i64().unwrap() - by).into();
            }
        }
        std::fs::write(&cache, file.to_string()).unwrap();
    };
    let news = |args: &[&str]| {
        let mut all = vec!["--env", base, "--scope", "news-api"];
        all.extend_from_slice(args);
        let out = token_cmd(d, &cache, &id, &secret, &all);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    };
    // (Ten seconds of slack either side: each command takes its own time to start.)
    age_cache(3600 - 40);
    assert_eq!(news(&[]), token, "40 s left: still served");
    assert_eq!(issued_total(base).await, 1);
    age_cache(20);
    let renewed = news(&[]);
    assert_ne!(renewed, token, "20 s left: within the margin, renewed");
    assert_eq!(issued_total(base).await, 2);
    age_cache(3600);
    let after_expiry = news(&[]);
    assert_ne!(after_expiry, renewed, "an expired token is never served");
    assert_eq!(issued_total(base).await, 3);
    let token = after_expiry;

    // The cached token goes only to the secret it was issued for.
    let wrong = token_cmd(
        d,
        &cache,
        &id,
        "tcs_wrong",
        &["--env", base, "--scope", "news-api"],
    );
    assert!(
        !wrong.status.success(),
        "a wrong secret must not get the cached token"
    );
    assert!(String::from_utf8_lossy(&wrong.stderr).contains("invalid_client"));
    assert_eq!(issued_total(base).await, 3);

    // Another scope set is another entry; --no-cache always asks.
    let other = token_cmd(
        d,
        &cache,
        &id,
        &secret,
        &["--env", base, "--scope", "market-data-api"],
    );
    assert!(other.status.success());
    assert_ne!(String::from_utf8(other.stdout).unwrap().trim(), token);
    let fresh = token_cmd(
        d,
        &cache,
        &id,
        &secret,
        &["--env", base, "--scope", "news-api", "--no-cache"],
    );
    assert_ne!(String::from_utf8(fresh.stdout).unwrap().trim(), token);
    assert_eq!(issued_total(base).await, 5);

    // A cache file others could read or write is not trusted.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o644)).unwrap();
        let open = token_cmd(
            d,
            &cache,
            &id,
            &secret,
            &["--env", base, "--scope", "news-api"],
        );
        assert!(open.status.success());
        assert!(String::from_utf8_lossy(&open.stderr).contains("open to other users"));
        let mode = std::fs::metadata(&cache).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "rewritten as 0600");
    }

    // A damaged cache file does not fail the command; it is rewritten.
    std::fs::write(&cache, b"{not json").unwrap();
    let repaired = token_cmd(
        d,
        &cache,
        &id,
        &secret,
        &["--env", base, "--scope", "news-api"],
    );
    assert!(
        repaired.status.success(),
        "{}",
        String::from_utf8_lossy(&repaired.stderr)
    );
    assert!(String::from_utf8_lossy(&repaired.stderr).contains("damaged"));
    assert!(serde_json::from_slice::<serde_json::Value>(&std::fs::read(&cache).unwrap()).is_ok());

    // Production and staging are kept apart: staging credentials fail at production.
    let staging_dir = d.join("staging");
    std::fs::create_dir_all(&staging_dir).unwrap();
    ok(
        &staging_dir,
        &["plan", "set", "pro", "--scopes", "news-api"],
    );
    let (sid, ssecret) = create_client(&staging_dir, "pro");
    let staging = Server::start(&staging_dir, &[]);
    let staged = Command::new(BIN)
        .args(["token", "--env", "staging", "--scope", "news-api"])
        .env("TESSERA_CLIENT_ID", &sid)
        .env("TESSERA_CLIENT_SECRET", &ssecret)
        .env("TESSERA_TOKEN_CACHE", &cache)
        .env("TESSERA_AUTH_URL_STAGE", &staging.base)
        .env("TESSERA_AUTH_URL", base)
        .output()
        .unwrap();
    assert!(
        staged.status.success(),
        "{}",
        String::from_utf8_lossy(&staged.stderr)
    );
    let wrong_env = Command::new(BIN)
        .args(["token", "--env", "production", "--scope", "news-api"])
        .env("TESSERA_CLIENT_ID", &sid)
        .env("TESSERA_CLIENT_SECRET", &ssecret)
        .env("TESSERA_TOKEN_CACHE", &cache)
        .env("TESSERA_AUTH_URL", base)
        .output()
        .unwrap();
    assert!(!wrong_env.status.success());
    assert!(String::from_utf8_lossy(&wrong_env.stderr).contains("invalid_client"));

    // OAuth errors are reported with their code, and name the refused scopes.
    let refused = token_cmd(
        d,
        &cache,
        &id,
        &secret,
        &["--env", base, "--scope", "oms-api"],
    );
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        err.contains("invalid_scope") && err.contains("oms-api"),
        "{err}"
    );
}

/// `plan list --json`, by plan name.
fn plans(dir: &Path) -> std::collections::HashMap<String, serde_json::Value> {
    let list: Vec<serde_json::Value> =
        serde_json::from_str(&ok(dir, &["plan", "list", "--json"])).unwrap();
    list.into_iter()
        .map(|p| (p["name"].as_str().unwrap().to_owned(), p))
        .collect()
}

#[test]
fn plan_set_stores_every_rate_unit_the_burst_and_reuse() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // The units of the README and the aliases `RateLimit::parse` takes.
    let units = [
        ("5/sec", 5, 1),
        ("5/s", 5, 1),
        ("5/second", 5, 1),
        ("7/min", 7, 60),
        ("7/m", 7, 60),
        ("7/minute", 7, 60),
        ("9/hour", 9, 3600),
        ("9/h", 9, 3600),
        ("3/day", 3, 86_400),
        ("3/d", 3, 86_400),
    ];
    for (i, (spec, _, _)) in units.iter().enumerate() {
        let name = format!("p{i}");
        ok(
            d,
            &[
                "plan",
                "set",
                &name,
                "--scopes",
                "news-api",
                "--token-rate",
                spec,
            ],
        );
    }
    let listed = plans(d);
    for (i, (spec, count, period)) in units.iter().enumerate() {
        let rate = &listed[&format!("p{i}")]["token_rate"];
        assert_eq!(rate["count"], *count, "{spec}: {rate}");
        assert_eq!(rate["period_secs"], *period, "{spec}: {rate}");
        assert_eq!(
            rate["burst"], *count,
            "{spec}: the burst defaults to the count"
        );
    }
    for bad in ["5/week", "0/min", "min", "5/", "x/sec"] {
        let err = fails(
            d,
            &[
                "plan",
                "set",
                "bad",
                "--scopes",
                "news-api",
                "--token-rate",
                bad,
            ],
        );
        assert!(err.contains("--token-rate"), "{bad}: {err}");
    }
    assert!(!plans(d).contains_key("bad"));

    // --token-burst goes with a rate, and is stored.
    fails(
        d,
        &[
            "plan",
            "set",
            "pro",
            "--scopes",
            "news-api",
            "--token-burst",
            "3",
        ],
    );
    ok(
        d,
        &[
            "plan",
            "set",
            "pro",
            "--scopes",
            "news-api",
            "--token-rate",
            "60/hour",
            "--token-burst",
            "3",
            "--reuse-percent",
            "40",
        ],
    );
    let pro = &plans(d)["pro"];
    assert_eq!(
        pro["token_rate"],
        serde_json::json!({"count": 60, "period_secs": 3600, "burst": 3})
    );
    assert_eq!(pro["reuse_percent"], 40);

    // Settings not named are kept; `none` and 0 turn them off.
    ok(d, &["plan", "set", "pro", "--scopes", "news-api oms-api"]);
    let pro = &plans(d)["pro"];
    assert_eq!(pro["token_rate"]["burst"], 3);
    assert_eq!(pro["reuse_percent"], 40);
    ok(
        d,
        &[
            "plan",
            "set",
            "pro",
            "--scopes",
            "news-api",
            "--token-rate",
            "none",
            "--reuse-percent",
            "0",
        ],
    );
    let pro = &plans(d)["pro"];
    assert!(pro["token_rate"].is_null(), "{pro}");
    assert!(pro["reuse_percent"].is_null(), "{pro}");

    // --introspect-any, its =false, and a change that names neither keeps it.
    let introspect = |d: &Path| -> serde_json::Value {
        let plans: Vec<serde_json::Value> =
            serde_json::from_str(&ok(d, &["plan", "list", "--json"])).unwrap();
        let api = plans.iter().find(|p| p["name"] == "api").unwrap();
        api["introspect_any"].clone()
    };
    ok(d, &["plan", "set", "api", "--scopes", "news-api"]);
    assert_eq!(introspect(d), false);
    ok(
        d,
        &[
            "plan",
            "set",
            "api",
            "--scopes",
            "news-api",
            "--introspect-any",
        ],
    );
    assert_eq!(introspect(d), true);
    ok(d, &["plan", "set", "api", "--scopes", "news-api oms-api"]);
    assert_eq!(introspect(d), true);
    ok(
        d,
        &[
            "plan",
            "set",
            "api",
            "--scopes",
            "news-api",
            "--introspect-any=false",
        ],
    );
    assert_eq!(introspect(d), false);

    // --dpop: stored, said, kept by a change that does not name it; another value refused.
    let dpop = |d: &Path| plans(d)["api"]["dpop"].clone();
    assert_eq!(dpop(d), "allowed");
    let said = ok(
        d,
        &[
            "plan", "set", "api", "--scopes", "news-api", "--dpop", "required",
        ],
    );
    assert!(said.contains("DPoP required"), "{said}");
    assert_eq!(dpop(d), "required");
    ok(d, &["plan", "set", "api", "--scopes", "news-api oms-api"]);
    assert_eq!(dpop(d), "required");
    ok(
        d,
        &[
            "plan", "set", "api", "--scopes", "news-api", "--dpop", "off",
        ],
    );
    assert_eq!(dpop(d), "off");
    let err = fails(
        d,
        &[
            "plan", "set", "api", "--scopes", "news-api", "--dpop", "maybe",
        ],
    );
    assert!(err.contains("--dpop"), "{err}");
    assert_eq!(dpop(d), "off");
}

/// A token request with the credentials in the form body (`client_secret_post`).
async fn token_post(base: &str, id: &str, secret: &str, scope: &str) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{base}/connect/token"))
        .form(&[
            ("grant_type", "client_credentials"),
            ("scope", scope),
            ("client_id", id),
            ("client_secret", secret),
        ])
        .send()
        .await
        .unwrap()
}

/// The status and JSON body of a token request.
async fn answer(response: reqwest::Response) -> (u16, serde_json::Value) {
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

/// The header or the claims (`part` 0 or 1) of a JWT.
fn jwt_part(token: &str, part: usize) -> serde_json::Value {
    use base64::Engine;
    let segment = token.split('.').nth(part).unwrap();
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(segment)
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

#[tokio::test]
async fn client_commands_take_effect_at_the_token_endpoint() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(d, &["plan", "set", "news", "--scopes", "news-api"]);
    ok(d, &["plan", "set", "market", "--scopes", "market-data-api"]);
    let (mover, mover_secret) = create_client(d, "news");
    let (metered, metered_secret) = create_client(d, "news");
    let (rotated, first_secret) = create_client(d, "news");
    let server = Server::start(d, &[]);
    let base = server.base.as_str();
    let day_before = tessera_server::usage::utc_day(tessera_server::clock::Clock::system().now());

    // set-plan: the next token request gets the scopes of the new plan, and only those.
    assert_eq!(
        answer(token(base, &mover, &mover_secret, "news-api").await)
            .await
            .0,
        200
    );
    ok(d, &["client", "set-plan", &mover, "market"]);
    server.sees_changes(d, &[]).await;
    let (status, body) = answer(token(base, &mover, &mover_secret, "market-data-api").await).await;
    assert_eq!(
        (status, &body["scope"]),
        (200, &"market-data-api".into()),
        "{body}"
    );
    let (status, body) = answer(token(base, &mover, &mover_secret, "news-api").await).await;
    assert_eq!(
        (status, &body["error"]),
        (400, &"invalid_scope".into()),
        "{body}"
    );

    // create --count N: N distinct clients, each with its own working secret.
    let out = ok(
        d,
        &[
            "client", "create", "--plan", "news", "--count", "5", "--json",
        ],
    );
    let created: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(created.len(), 5, "{out}");
    let ids: std::collections::HashSet<_> = created.iter().map(|c| &c["client_id"]).collect();
    let secrets: std::collections::HashSet<_> =
        created.iter().map(|c| &c["client_secret"]).collect();
    assert_eq!((ids.len(), secrets.len()), (5, 5));
    assert_eq!(
        serde_json::from_str::<Vec<serde_json::Value>>(&ok(d, &["client", "list", "--json"]))
            .unwrap()
            .len(),
        3 + 5
    );
    server.sees_changes(d, &[]).await;
    for c in &created {
        let (id, secret) = (
            c["client_id"].as_str().unwrap(),
            c["client_secret"].as_str().unwrap(),
        );
        assert_eq!(
            answer(token(base, id, secret, "news-api").await).await.0,
            200,
            "{id}"
        );
    }

    // --auth-method client_secret_post: credentials in the body, and only there.
    let out = ok(
        d,
        &[
            "client",
            "create",
            "--plan",
            "news",
            "--auth-method",
            "client_secret_post",
            "--json",
        ],
    );
    let post: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(post["token_endpoint_auth_method"], "client_secret_post");
    let (post_id, post_secret) = (
        post["client_id"].as_str().unwrap(),
        post["client_secret"].as_str().unwrap(),
    );
    server.sees_changes(d, &[]).await;
    let (status, body) = answer(token(base, post_id, post_secret, "news-api").await).await;
    assert_eq!(
        (status, &body["error"]),
        (401, &"invalid_client".into()),
        "{body}"
    );
    let (status, body) = answer(token_post(base, post_id, post_secret, "news-api").await).await;
    assert_eq!(status, 200, "{body}");
    // And a client_secret_basic client may not use the body.
    let (status, body) =
        answer(token_post(base, &mover, &mover_secret, "market-data-api").await).await;
    assert_eq!(
        (status, &body["error"]),
        (401, &"invalid_client".into()),
        "{body}"
    );

    // rotate-secret --grace: the old secret works on during the grace, beside the new one.
    let rotation = |grace: &str| {
        let out = ok(
            d,
            &[
                "client",
                "rotate-secret",
                &rotated,
                "--grace",
                grace,
                "--json",
            ],
        );
        let json: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
        json["client_secret"].as_str().unwrap().to_owned()
    };
    let second_secret = rotation("3600");
    server.sees_changes(d, &[]).await;
    for secret in [&first_secret, &second_secret] {
        assert_eq!(
            answer(token(base, &rotated, secret, "news-api").await)
                .await
                .0,
            200
        );
    }
    // --grace 0: the replaced secret stops at once (and the one before it with it).
    let third_secret = rotation("0");
    server.sees_changes(d, &[]).await;
    assert_eq!(
        answer(token(base, &rotated, &third_secret, "news-api").await)
            .await
            .0,
        200
    );
    for secret in [&first_secret, &second_secret] {
        let (status, body) = answer(token(base, &rotated, secret, "news-api").await).await;
        assert_eq!(
            (status, &body["error"]),
            (401, &"invalid_client".into()),
            "{body}"
        );
    }

    // usage: token requests per UTC day, issued and refused, written on shutdown.
    for _ in 0..3 {
        assert_eq!(
            answer(token(base, &metered, &metered_secret, "news-api").await)
                .await
                .0,
            200
        );
    }
    for _ in 0..2 {
        assert_eq!(
            answer(token(base, &metered, &metered_secret, "oms-api").await)
                .await
                .0,
            400
        );
    }
    let status = server.terminate().await;
    assert!(status.success(), "{status:?}");
    let day_after = tessera_server::usage::utc_day(tessera_server::clock::Clock::system().now());
    let usage: Vec<serde_json::Value> =
        serde_json::from_str(&ok(d, &["client", "usage", &metered, "--json"])).unwrap();
    assert_eq!(usage.len(), 1, "{usage:?}");
    assert!(
        [&day_before, &day_after].contains(&&usage[0]["day"].as_str().unwrap().to_owned()),
        "{usage:?}"
    );
    assert_eq!(
        (&usage[0]["issued"], &usage[0]["refused"]),
        (&3.into(), &2.into()),
        "{usage:?}"
    );
    let table = ok(d, &["client", "usage", &metered]);
    assert!(
        table
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>()
                == [usage[0]["day"].as_str().unwrap(), "3", "2"]),
        "{table}"
    );
}

#[tokio::test]
async fn plan_limits_take_effect_at_the_token_endpoint() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let set = |name: &str, extra: &[&str]| {
        let args = [&["plan", "set", name, "--scopes", "news-api"], extra].concat();
        ok(d, &args);
    };
    set("two", &["--token-rate", "2/min"]);
    set("burst", &["--token-rate", "60/hour", "--token-burst", "3"]);
    set("daily", &["--token-rate", "1/day"]);
    set("reuse", &["--reuse-percent", "50"]);
    let two = create_client(d, "two");
    let burst = create_client(d, "burst");
    let daily = create_client(d, "daily");
    let reuse = create_client(d, "reuse");
    let server = Server::start(d, &[]);
    let base = server.base.as_str();
    async fn ask(base: &str, (id, secret): &(String, String)) -> reqwest::Response {
        token(base, id, secret, "news-api").await
    }

    // 2/min: the burst is the count, then 429 with the policy's count and period.
    for _ in 0..2 {
        assert_eq!(ask(base, &two).await.status(), 200);
    }
    let refused = ask(base, &two).await;
    assert_eq!(refused.status(), 429);
    assert_eq!(refused.headers()["ratelimit-policy"], r#""token";q=2;w=60"#);
    assert_eq!(answer(refused).await.1["error"], "rate_limited");

    // 60/hour with --token-burst 3: three at once, not sixty.
    for _ in 0..3 {
        assert_eq!(ask(base, &burst).await.status(), 200);
    }
    let refused = ask(base, &burst).await;
    assert_eq!(refused.status(), 429);
    assert_eq!(
        refused.headers()["ratelimit-policy"],
        r#""token";q=60;w=3600"#
    );

    // --token-rate none removes the limit from the running server.
    assert_eq!(ask(base, &daily).await.status(), 200);
    assert_eq!(ask(base, &daily).await.status(), 429);
    set("daily", &["--token-rate", "none"]);
    server.sees_changes(d, &[]).await;
    for _ in 0..3 {
        let response = ask(base, &daily).await;
        assert_eq!(response.status(), 200);
        assert!(response.headers().get("ratelimit-policy").is_none());
    }

    // --reuse-percent 50: the same token again; 0 turns reuse off.
    let access_token = |r: reqwest::Response| async move {
        let (status, body) = answer(r).await;
        assert_eq!(status, 200, "{body}");
        body["access_token"].as_str().unwrap().to_owned()
    };
    let first = access_token(ask(base, &reuse).await).await;
    assert_eq!(access_token(ask(base, &reuse).await).await, first, "reused");
    set("reuse", &["--reuse-percent", "0"]);
    server.sees_changes(d, &[]).await;
    let fresh = access_token(ask(base, &reuse).await).await;
    assert_ne!(fresh, first);
    assert_ne!(
        access_token(ask(base, &reuse).await).await,
        fresh,
        "reuse is off"
    );
}

/// Writes `key` to `path` as an operator must: a file only its owner can read.
fn write_key_file(path: &Path, key: &str) {
    std::fs::write(path, key).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
}

/// A fresh master key: 32 random bytes, base64url.
fn master_key() -> String {
    use base64::Engine;
    let mut key = [0u8; 32];
    aws_lc_rs::rand::fill(&mut key).unwrap();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(key)
}

/// A token request as a proxy forwards it, with `X-Forwarded-For`.
async fn token_forwarded(
    base: &str,
    (id, secret): &(String, String),
    forwarded_for: &str,
) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{base}/connect/token"))
        .basic_auth(id, Some(secret))
        .header("x-forwarded-for", forwarded_for)
        .form(&[("grant_type", "client_credentials"), ("scope", "news-api")])
        .send()
        .await
        .unwrap()
}

/// The access token of a successful answer.
async fn access_token(response: reqwest::Response) -> String {
    let (status, body) = answer(response).await;
    assert_eq!(status, 200, "{body}");
    body["access_token"].as_str().unwrap().to_owned()
}

/// The audit event (a JSON log line) of the issuance of `token`.
async fn audit_of_issuance(server: &Server, token: &str) -> serde_json::Value {
    let jti = jwt_part(token, 1)["jti"].as_str().unwrap().to_owned();
    let line = server.log_line(|l| l.contains(&jti)).await;
    let event: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(event["target"], "tessera::audit", "{line}");
    event["fields"].clone()
}

/// The signing keys the server publishes.
async fn published_keys(base: &str) -> Vec<serde_json::Value> {
    let jwks: serde_json::Value = reqwest::get(format!("{base}/.well-known/jwks.json"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    jwks["keys"].as_array().unwrap().clone()
}

/// Checks that `token` is an ES256 token signed by the one published key, a P-256 key.
async fn assert_es256(base: &str, token: &str) {
    let header = jwt_part(token, 0);
    assert_eq!(header["alg"], "ES256", "{header}");
    let keys = published_keys(base).await;
    assert_eq!(keys.len(), 1, "{keys:?}");
    assert_eq!(
        (&keys[0]["kty"], &keys[0]["crv"], &keys[0]["alg"]),
        (&"EC".into(), &"P-256".into(), &"ES256".into()),
        "{keys:?}"
    );
    assert_eq!(keys[0]["kid"], header["kid"]);
}

/// Every line the server wrote to stderr is a JSON object.
fn assert_json_lines(server: &Server) {
    let lines = server.stderr.lock().unwrap();
    assert!(!lines.is_empty());
    for line in lines.iter() {
        let parsed = serde_json::from_str::<serde_json::Value>(line);
        assert!(
            parsed.is_ok_and(|v| v.is_object()),
            "not a JSON line: {line}"
        );
    }
}

#[tokio::test]
async fn serve_flags_and_the_master_key_file_take_effect() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write_key_file(&d.join("master.key"), &(master_key() + "\n"));
    write_key_file(&d.join("other.key"), &master_key());
    let data = [
        "--database",
        "sqlite://flags.db",
        "--master-key-file",
        "master.key",
    ];
    ok(
        d,
        &[&["plan", "set", "pro", "--scopes", "news-api"], &data[..]].concat(),
    );
    let client = create_client_with(d, &[], &data, "pro");

    // Another key, given either way, is refused and writes nothing; so is none at all (no
    // key file is generated for a database that holds clients).
    let create = [
        "client",
        "create",
        "--plan",
        "pro",
        "--database",
        "sqlite://flags.db",
    ];
    let err = fails(
        d,
        &[&create[..], &["--master-key-file", "other.key"]].concat(),
    );
    assert!(err.contains("does not belong to this database"), "{err}");
    let other = master_key();
    let err = fails_with(d, &[("TESSERA_MASTER_KEY", &other)], &create);
    assert!(err.contains("does not belong to this database"), "{err}");
    let err = fails(d, &create);
    assert!(err.contains("master key"), "{err}");
    // A key file others could read is refused, naming the fix.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let key = d.join("master.key");
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = fails(
            d,
            &[&create[..], &["--master-key-file", "master.key"]].concat(),
        );
        assert!(err.contains("chmod 600") && err.contains("644"), "{err}");
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let listed = ok(
        d,
        &[
            "client",
            "list",
            "--json",
            "--database",
            "sqlite://flags.db",
        ],
    );
    assert_eq!(
        serde_json::from_str::<Vec<serde_json::Value>>(&listed)
            .unwrap()
            .len(),
        1
    );
    assert!(!d.join("tessera.db").exists(), "--database was honoured");

    let server = Server::start(
        d,
        &[
            &data[..],
            &[
                "--signing-alg",
                "ES256",
                "--log-json",
                "--trusted-proxy",
                "10.9.9.9",
            ],
        ]
        .concat(),
    );
    let base = server.base.as_str();

    // The secret hashed by `client create` under the key file checks out in `serve` with it.
    let issued = access_token(token_forwarded(base, &client, "203.0.113.7").await).await;
    assert_es256(base, &issued).await;

    // The audit event has every field; X-Forwarded-For from a peer that is not a trusted
    // proxy is not believed.
    let event = audit_of_issuance(&server, &issued).await;
    assert_eq!(event["event"], "token_issued");
    assert_eq!(event["client_id"], client.0.as_str());
    assert_eq!(event["plan"], "pro");
    assert_eq!(event["scope"], "news-api");
    assert_eq!(event["outcome"], "issued");
    assert_eq!(event["source"], "127.0.0.1", "{event}");
    let (status, _) = answer(token(base, &client.0, "tcs_wrong", "news-api").await).await;
    assert_eq!(status, 401);
    let refused = server.log_line(|l| l.contains("token_refused")).await;
    let refused: serde_json::Value = serde_json::from_str(&refused).unwrap();
    assert_eq!(refused["fields"]["outcome"], "invalid_client");
    assert_eq!(refused["fields"]["client_id"], client.0.as_str());
    assert_eq!(refused["fields"]["source"], "127.0.0.1");
    assert_json_lines(&server);
    let log = server.stderr.lock().unwrap().join("\n");
    assert!(
        !log.contains(&client.1) && !log.contains(&issued),
        "a secret was logged"
    );
}

/// Whether `key` exists in the Redis at `url` (`redis://host:port`), asked in RESP.
fn redis_has(url: &str, key: &str) -> bool {
    use std::io::{Read, Write};
    let address = url.trim_start_matches("redis://");
    let address = address.split('/').next().unwrap();
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    write!(stream, "*2\r\n$6\r\nEXISTS\r\n${}\r\n{key}\r\n", key.len()).unwrap();
    let mut reply = [0u8; 4];
    stream.read_exact(&mut reply).unwrap();
    match &reply {
        b":1\r\n" => true,
        b":0\r\n" => false,
        other => panic!(
            "unexpected Redis reply {:?}",
            String::from_utf8_lossy(other)
        ),
    }
}

/// Runs `tessera ARGS`, a `serve` that must fail to start, with the `TESSERA_*` variables in
/// `env`: it must exit unsuccessfully within 10 s. Returns what it wrote to stderr.
async fn refused_start(dir: &Path, env: &[(&str, &str)], args: &[&str]) -> String {
    let mut refused = command(dir)
        .args(args)
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(status) = refused.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(10) {
            let _ = refused.kill();
            panic!("{args:?} still starting after 10 s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    eprintln!("{args:?} exited in {:?}", started.elapsed());
    let mut err = String::new();
    std::io::Read::read_to_string(&mut refused.stderr.take().unwrap(), &mut err).unwrap();
    assert!(!status.success(), "{args:?} should fail");
    err
}

#[tokio::test]
async fn serve_and_token_read_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // One key, given as a file to the admin commands and as a value to the server.
    let key = master_key();
    write_key_file(&d.join("master.key"), &key);
    let database = format!("sqlite://{}", d.join("env.db").display());
    let admin_env = [
        ("TESSERA_DATABASE_URL", database.as_str()),
        ("TESSERA_MASTER_KEY_FILE", "master.key"),
    ];
    ok_with(
        d,
        &admin_env,
        &[
            "plan",
            "set",
            "limited",
            "--scopes",
            "news-api",
            "--token-rate",
            "1/day",
        ],
    );
    ok_with(
        d,
        &admin_env,
        &["plan", "set", "open", "--scopes", "news-api"],
    );
    let limited = create_client_with(d, &admin_env, &[], "limited");
    let open = create_client_with(d, &admin_env, &[], "open");
    assert!(!d.join("tessera.db").exists() && d.join("env.db").exists());

    let redis = std::env::var("TESSERA_TEST_REDIS_URL")
        .unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let mut serve_env = vec![
        ("TESSERA_DATABASE_URL", database.as_str()),
        ("TESSERA_MASTER_KEY", key.as_str()),
        ("TESSERA_LISTEN", "127.0.0.1:0"),
        ("TESSERA_ISSUER", "http://issuer.test"),
        ("TESSERA_SIGNING_ALG", "ES256"),
        ("TESSERA_TRUSTED_PROXIES", "10.9.9.9,127.0.0.1"),
        ("TESSERA_LOG_JSON", "true"),
        ("TESSERA_REDIS_URL", "redis://127.0.0.1:1"),
    ];
    // A Redis that cannot be reached stops the start, within seconds.
    let err = refused_start(d, &serve_env, &["serve"]).await;
    assert!(
        err.contains("rate limiter: cannot use Redis at redis://127.0.0.1:1:"),
        "{err}"
    );
    serve_env.pop();
    serve_env.push(("TESSERA_REDIS_URL", &redis));
    let server = Server::start_with(d, &serve_env, &["serve"]);
    let base = server.base.as_str();
    assert!(
        base.starts_with("http://127.0.0.1:") && !base.ends_with(":8080"),
        "{base}"
    );

    let metadata: serde_json::Value =
        reqwest::get(format!("{base}/.well-known/oauth-authorization-server"))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
    assert_eq!(metadata["issuer"], "http://issuer.test");

    // From a trusted proxy, the last address it did not add itself is the source.
    let token = access_token(token_forwarded(base, &open, "198.51.100.1, 203.0.113.7").await).await;
    assert_eq!(jwt_part(&token, 1)["iss"], "http://issuer.test");
    assert_es256(base, &token).await;
    let event = audit_of_issuance(&server, &token).await;
    assert_eq!(event["source"], "203.0.113.7", "{event}");
    let token = access_token(token_forwarded(base, &open, "203.0.113.7, 10.9.9.9").await).await;
    assert_eq!(
        audit_of_issuance(&server, &token).await["source"],
        "203.0.113.7"
    );
    assert_json_lines(&server);

    // The plan's rate is counted in Redis.
    assert_eq!(
        token_forwarded(base, &limited, "203.0.113.7")
            .await
            .status(),
        200
    );
    assert_eq!(
        token_forwarded(base, &limited, "203.0.113.7")
            .await
            .status(),
        429
    );
    assert!(redis_has(
        &redis,
        &format!("tessera:rate:1/86400/1:{}", limited.0)
    ));

    // `tessera token` from the environment, cached by default under $XDG_CACHE_HOME.
    let token_cmd = |cache_env: &[(&str, &Path)]| {
        let mut command = command(d);
        command
            .args(["token", "--scope", "news-api"])
            .env("TESSERA_AUTH_URL", base)
            .env("TESSERA_CLIENT_ID", &open.0)
            .env("TESSERA_CLIENT_SECRET", &open.1)
            .env_remove("XDG_CACHE_HOME")
            .env_remove("HOME");
        for (name, value) in cache_env {
            command.env(name, value);
        }
        let out = command.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    };
    let xdg = d.join("xdg");
    let issued = issued_total(base).await;
    let cached = token_cmd(&[("XDG_CACHE_HOME", &xdg)]);
    assert_eq!(token_cmd(&[("XDG_CACHE_HOME", &xdg)]), cached);
    assert_eq!(
        issued_total(base).await,
        issued + 1,
        "the second came from the cache"
    );
    let file = xdg.join("tessera").join("tokens.json");
    assert!(std::fs::read_to_string(&file).unwrap().contains(&cached));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!((mode(&file), mode(&xdg.join("tessera"))), (0o600, 0o700));
    }
    // Without XDG_CACHE_HOME, under ~/.cache.
    let home = d.join("home");
    let from_home = token_cmd(&[("HOME", &home)]);
    assert_ne!(from_home, cached, "another cache file");
    let file = home.join(".cache").join("tessera").join("tokens.json");
    assert!(std::fs::read_to_string(&file).unwrap().contains(&from_home));
}

#[test]
fn an_unreachable_database_is_reported_with_its_cause_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let err = fails(
        dir.path(),
        &[
            "client",
            "list",
            "--database",
            "postgres://postgres@127.0.0.1:1/test",
        ],
    );
    assert!(
        err.contains("PostgreSQL at 127.0.0.1:1 refused the connection"),
        "{err}"
    );
    assert!(!err.contains("pool timed out"), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
}

/// Issue 24 item 4: a PostgreSQL that accepts connections and never answers (a hung
/// server, a partition) stops `serve` and an admin command with a message naming the
/// cause, where both used to wait forever. The test's own bound only keeps it from hanging.
#[test]
fn a_database_that_accepts_and_never_answers_is_reported_not_waited_for() {
    let dir = tempfile::tempdir().unwrap();
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let server = silent.local_addr().unwrap().to_string();
    // Accepts every connection and holds it, reading and writing nothing.
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for connection in silent.incoming() {
            held.push(connection);
        }
    });
    let url = format!("postgres://tessera@{server}/x");
    let key = master_key();
    for args in [&["plan", "list"][..], &["serve", "--listen", "127.0.0.1:0"]] {
        let child = command(dir.path())
            .args(args)
            .args(["--database", &url])
            .env("TESSERA_MASTER_KEY", &key)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id().to_string();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(child.wait_with_output().unwrap()));
        let Ok(out) = rx.recv_timeout(Duration::from_secs(60)) else {
            Command::new("kill").args(["-9", &pid]).status().unwrap();
            panic!("{args:?} still waiting after 60 s");
        };
        let (status, err) = (out.status, String::from_utf8_lossy(&out.stderr));
        assert!(!status.success(), "{args:?}");
        assert!(
            err.contains(&format!(
                "PostgreSQL at {server} accepted the connection but did not answer within 5 s"
            )),
            "{args:?}: {err}"
        );
    }
}

/// A database URL with its password in the query (libpq's `password=`) is named without
/// it when it cannot be opened, by an admin command and by `serve` (L6).
#[test]
fn a_password_in_the_database_query_is_not_printed() {
    let dir = tempfile::tempdir().unwrap();
    let url = "postgres://127.0.0.1:1/x?sslmode=disable&password=S3cretPW";
    for args in [&["plan", "list"][..], &["serve", "--listen", "127.0.0.1:0"]] {
        let err = fails(dir.path(), &[args, &["--database", url]].concat());
        assert!(
            err.contains(
                "cannot open database postgres://127.0.0.1:1/x?sslmode=disable&password=[redacted]"
            ),
            "{err}"
        );
        assert!(!err.contains("S3cretPW"), "{err}");
    }
}

/// `serve` with a Redis that dies: each instance answers at once under its share of each
/// rate, 1/`--expected-instances` (or `TESSERA_EXPECTED_INSTANCES`); a Redis that cannot be
/// reached at start stops it, named without its password.
#[tokio::test]
async fn serve_counts_its_share_while_redis_is_down() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let data = ["--database", "sqlite://share.db"];
    let flags = [&data[..], &["--listen", "127.0.0.1:0"]].concat();
    ok(
        d,
        &[
            &["plan", "set", "metered", "--scopes", "news-api"][..],
            &["--token-rate", "4/min"],
            &data,
        ]
        .concat(),
    );
    let client = create_client_with(d, &[], &data, "metered");

    let unreachable = [&["serve"][..], &flags, &["--redis-url"]].concat();
    let err = refused_start(
        d,
        &[],
        &[&unreachable[..], &["redis://:hunter2@127.0.0.1:1"]].concat(),
    )
    .await;
    assert!(
        err.contains("cannot use Redis at redis://:[redacted]@127.0.0.1:1:"),
        "{err}"
    );
    assert!(!err.contains("hunter2"), "{err}");

    let mut redis = tessera_testkit::ThrowawayRedis::start();
    let url = redis.url();
    let two = Server::start_with(
        d,
        &[],
        &[
            &["serve"][..],
            &flags,
            &["--redis-url", &url, "--expected-instances", "2"],
        ]
        .concat(),
    );
    let database = format!("sqlite://{}", d.join("share.db").display());
    let four = Server::start_with(
        d,
        &[
            ("TESSERA_DATABASE_URL", &database),
            ("TESSERA_LISTEN", "127.0.0.1:0"),
            ("TESSERA_REDIS_URL", &url),
            ("TESSERA_EXPECTED_INSTANCES", "4"),
        ],
        &["serve"],
    );
    async fn statuses(base: &str, (id, secret): &(String, String), n: usize) -> Vec<u16> {
        let mut statuses = Vec::new();
        for _ in 0..n {
            let started = Instant::now();
            statuses.push(token(base, id, secret, "news-api").await.status().as_u16());
            let took = started.elapsed();
            assert!(took < Duration::from_secs(3), "an answer took {took:?}");
        }
        statuses
    }

    // Counted in Redis, for both: one allowance of four.
    assert_eq!(statuses(&two.base, &client, 2).await, [200, 200]);
    assert_eq!(statuses(&four.base, &client, 3).await, [200, 200, 429]);

    // Redis gone: each counts its share in memory, 4/min over 2 and over 4 instances.
    redis.kill();
    assert_eq!(statuses(&two.base, &client, 3).await, [200, 200, 429]);
    assert_eq!(statuses(&four.base, &client, 2).await, [200, 429]);
    for server in [&two, &four] {
        server
            .log_line(|l| l.contains("Redis rate limiter failed"))
            .await;
    }
}

/// An address nothing listens on at the moment, for a second listener of `serve`.
fn free_address() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().to_string()
}

/// A connection from `ip` to `server` that has been served one request (so it is open and
/// counted against its address), or `None` when the server closed it at once.
async fn held_connection(server: &Server, ip: [u8; 4]) -> Option<tokio::net::TcpStream> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr: std::net::SocketAddr = server
        .base
        .strip_prefix("http://")
        .unwrap()
        .parse()
        .unwrap();
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(std::net::SocketAddr::from((ip, 0))).unwrap();
    let mut stream = socket.connect(addr).await.unwrap();
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .ok()?;
    let mut buf = [0u8; 512];
    match stream.read(&mut buf).await {
        Ok(n) if buf[..n].starts_with(b"HTTP/1.1 200") => Some(stream),
        _ => None,
    }
}

/// `serve`'s operating settings, once from the environment and once from flags: `/metrics`
/// on a listener of its own and not on the main one, the connections one address may hold,
/// the staleness bound (a database cut off behind a proxy makes the server unready within
/// seconds, where the default bound is 5 minutes), and the console switched off.
// Multi-threaded: the proxy forwards on the runtime while the test waits for the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_operating_settings_take_effect_from_the_environment_and_flags() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let key = master_key();
    for from_env in [true, false] {
        let schema = tessera_store::testing::scratch_postgres().await;
        let real: std::net::SocketAddr = "127.0.0.1:5432".parse().unwrap();
        let proxy = tessera_testkit::CuttableProxy::to(real).await;
        let url = schema
            .url
            .replace("127.0.0.1:5432", &proxy.addr.to_string());
        assert_ne!(url, schema.url, "the test database is at 127.0.0.1:5432");
        let metrics = free_address();
        let mut env = vec![
            ("TESSERA_DATABASE_URL", url.as_str()),
            ("TESSERA_MASTER_KEY", key.as_str()),
        ];
        let mut args = vec!["serve", "--listen", "127.0.0.1:0"];
        if from_env {
            env.extend([
                ("TESSERA_METRICS_LISTEN", metrics.as_str()),
                ("TESSERA_MAX_CONNECTIONS_PER_ADDRESS", "2"),
                ("TESSERA_MAX_STALENESS", "1"),
            ]);
        } else {
            args.extend([
                "--metrics-listen",
                &metrics,
                "--max-connections-per-address",
                "2",
                "--max-staleness",
                "1",
                "--no-console",
            ]);
        }
        let server = Server::start_with(d, &env, &args);
        let base = server.base.as_str();
        let how = if from_env { "environment" } else { "flags" };

        // Two connections from one address, and no third; another address is served.
        let first = held_connection(&server, [127, 0, 0, 5]).await;
        let second = held_connection(&server, [127, 0, 0, 5]).await;
        assert!(first.is_some() && second.is_some(), "{how}");
        assert!(
            held_connection(&server, [127, 0, 0, 5]).await.is_none(),
            "{how}: a third connection from the same address is closed"
        );
        assert!(held_connection(&server, [127, 0, 0, 6]).await.is_some());

        let metrics = reqwest::get(format!("http://{metrics}/metrics"))
            .await
            .unwrap();
        assert_eq!(metrics.status(), 200, "{how}");
        assert!(metrics.text().await.unwrap().contains("tessera_store_up"));
        // One client, so that its requests share one connection of 127.0.0.1's two.
        let http = reqwest::Client::new();
        let get = |path: &str| http.get(format!("{base}{path}")).send();
        let main = get("/metrics").await.unwrap();
        assert_eq!(main.status(), 404, "{how}: not on the main listener");
        let console = get("/console/").await.unwrap();
        let served = if from_env { 200 } else { 404 };
        assert_eq!(console.status(), served, "{how}: --no-console");

        proxy.cut();
        let started = Instant::now();
        loop {
            let ready = get("/readyz").await.unwrap();
            if ready.status() == 503 {
                let text = ready.text().await.unwrap();
                assert!(text.contains("staleness bound"), "{how}: {text}");
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "{how}: still ready 20 s after the database was cut off"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
