//! The `tessera` binary as an operator uses it: admin commands, `serve` on port 0 beside
//! them, crash durability and signals.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

mod signals;

const BIN: &str = env!("CARGO_BIN_EXE_tessera");

fn tessera(dir: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .current_dir(dir)
        .env_remove("TESSERA_DATABASE_URL")
        .env_remove("TESSERA_MASTER_KEY")
        .env_remove("TESSERA_MASTER_KEY_FILE")
        .output()
        .unwrap()
}

fn ok(dir: &Path, args: &[&str]) -> String {
    let out = tessera(dir, args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn fails(dir: &Path, args: &[&str]) -> String {
    let out = tessera(dir, args);
    assert!(!out.status.success(), "{args:?} should fail");
    String::from_utf8(out.stderr).unwrap()
}

struct Server {
    child: Child,
    base: String,
}

impl Server {
    fn start(dir: &Path, extra: &[&str]) -> Self {
        let mut child = Command::new(BIN)
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(extra)
            .current_dir(dir)
            .env_remove("TESSERA_DATABASE_URL")
            .env_remove("TESSERA_LISTEN")
            .env_remove("TESSERA_ISSUER")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap());
        let mut first = String::new();
        lines.read_line(&mut first).unwrap();
        let base = first
            .trim()
            .strip_prefix("tessera listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {first:?}"))
            .to_owned();
        // Keep draining stdout so the server never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines.lines() {});
        Self { child, base }
    }

    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
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
    let out = ok(
        dir,
        &[
            "client", "create", "--plan", plan, "--name", "app", "--json",
        ],
    );
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
    age_cache(3600 - 31);
    assert_eq!(news(&[]), token, "31 s left: still served");
    assert_eq!(issued_total(base).await, 1);
    age_cache(2);
    let renewed = news(&[]);
    assert_ne!(renewed, token, "29 s left: within the margin, renewed");
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
