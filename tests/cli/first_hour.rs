//! The rough edges a new user met in the first hour (issue 30 item 7), each through the
//! binary: an error said once, `--listen` that says what form it wants, help that shows a
//! command's global options once and only those it uses, `plan set` without `--scopes`,
//! a closed pipe, demo secrets that survive a restart, a page at `/`, demo files git
//! ignores, a master key command, the manual pages and SIGHUP without TLS.

use std::io::{BufRead, BufReader};

use super::*;

/// A `serve` that cannot reach Redis says why once: the cause is not repeated after the
/// context that already quotes it.
#[tokio::test]
async fn a_failed_start_says_its_cause_once() {
    let dir = tempfile::tempdir().unwrap();
    let refused = tessera_testkit::RefusedPort::bind();
    let nowhere = format!("redis://127.0.0.1:{}", refused.port);
    let err = refused_start(
        dir.path(),
        &[],
        &["serve", "--listen", "127.0.0.1:0", "--redis-url", &nowhere],
    )
    .await;
    assert!(err.contains("Connection refused"), "{err}");
    assert_eq!(err.matches("Connection refused").count(), 1, "{err}");
    assert_eq!(err.matches("cannot use Redis").count(), 1, "{err}");
}

/// `--listen 8080` and its kin are refused with the form wanted and the address meant.
#[test]
fn a_listen_address_without_an_ip_says_the_form_wanted() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let err = fails(d, &["serve", "--listen", "8080"]);
    assert!(err.contains("IP:PORT"), "{err}");
    assert!(
        err.contains("0.0.0.0:8080") && err.contains("127.0.0.1:8080"),
        "{err}"
    );
    let err = fails(d, &["serve", "--listen", "localhost:19300"]);
    assert!(err.contains("127.0.0.1:19300"), "{err}");
    let err = fails(d, &["serve", "--metrics-listen", "metrics"]);
    assert!(err.contains("IP:PORT, e.g. 127.0.0.1:8080"), "{err}");
    // Nothing was created on the way.
    assert_eq!(std::fs::read_dir(d).unwrap().count(), 0);
}

/// The options of `help`'s section `name`, as `--flag` words.
fn section(help: &str, name: &str) -> Vec<String> {
    let mut lines = help.lines().skip_while(|l| *l != name).skip(1);
    let mut flags = Vec::new();
    for line in lines.by_ref() {
        if !line.starts_with(' ') && !line.is_empty() {
            break;
        }
        let word = line.trim_start();
        if let Some(flag) = word.strip_prefix("--") {
            let flag = flag.split([' ', '=']).next().unwrap();
            flags.push(format!("--{flag}"));
        } else if let Some(rest) = word.strip_prefix("-h, ") {
            flags.push(rest.split(' ').next().unwrap().to_owned());
        }
    }
    flags
}

/// A command's help lists its own options, then its global options once, under their own
/// heading, and only those it uses.
#[test]
fn help_shows_each_command_the_global_options_it_uses_once() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let plan = ok(d, &["plan", "set", "--help"]);
    let own = section(&plan, "Options:");
    assert!(own.contains(&"--scopes".to_owned()), "{plan}");
    assert!(!own.contains(&"--database".to_owned()), "{plan}");
    let global = section(&plan, "Global options:");
    assert_eq!(
        global,
        [
            "--config",
            "--database",
            "--master-key-file",
            "--master-key",
            "--init",
            "--admin-url",
            "--admin-token",
            "--admin-client-id",
            "--admin-client-secret"
        ],
        "{plan}"
    );
    assert_eq!(plan.matches("--database <").count(), 1, "{plan}");

    let serve = ok(d, &["serve", "--help"]);
    assert!(!serve.contains("--admin-url"), "{serve}");
    assert!(!serve.contains("--admin-token"), "{serve}");
    assert_eq!(serve.matches("--config <").count(), 1, "{serve}");
    assert!(
        section(&serve, "Global options:").contains(&"--database".to_owned()),
        "{serve}"
    );
    for local in [
        &["token", "--help"][..],
        &["keys", "generate-client-key", "--help"],
        &["keys", "generate-master-key", "--help"],
        &["completions", "--help"],
    ] {
        let help = ok(d, local);
        assert!(!help.contains("Global options"), "{local:?}: {help}");
        assert!(!help.contains("--database"), "{local:?}: {help}");
    }
    // Hidden is not refused: a variable or flag left set changes nothing.
    ok_with(
        d,
        &[("TESSERA_ADMIN_URL", "http://127.0.0.1:1")],
        &["completions", "bash", "--database", "sqlite://x.db"],
    );
    assert!(!d.join("x.db").exists());
}

/// `plan set` without `--scopes` changes what it names and keeps the scopes, on the
/// database and through the admin API alike; a new plan needs them.
#[tokio::test]
async fn plan_set_without_scopes_keeps_them() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(d, &["plan", "set", "admin", "--scopes", "tessera-admin"]);
    let (admin_id, admin_secret) = create_client(d, "admin");
    ok(
        d,
        &[
            "plan",
            "set",
            "gold",
            "--scopes",
            "news-api oms-api",
            "--token-rate",
            "60/min",
        ],
    );
    ok(d, &["plan", "set", "gold", "--token-ttl", "600"]);
    let gold = &plans(d)["gold"];
    assert_eq!(gold["scopes"], serde_json::json!(["news-api", "oms-api"]));
    assert_eq!(gold["token_ttl"], 600, "{gold}");
    assert_eq!(gold["token_rate"]["count"], 60, "{gold}");
    let err = fails(d, &["plan", "set", "silver", "--token-ttl", "600"]);
    assert!(err.contains("a new plan needs --scopes"), "{err}");

    let server = serve(d, &[]);
    let elsewhere = tempfile::tempdir().unwrap();
    let env = [
        ("TESSERA_ADMIN_URL", server.base.as_str()),
        ("TESSERA_CLIENT_ID", admin_id.as_str()),
        ("TESSERA_CLIENT_SECRET", admin_secret.as_str()),
    ];
    let out = ok_with(
        elsewhere.path(),
        &env,
        &["plan", "set", "gold", "--token-ttl", "900", "--json"],
    );
    let gold: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(gold["scopes"], serde_json::json!(["news-api", "oms-api"]));
    assert_eq!(gold["token_ttl"], 900, "{gold}");
    assert_eq!(gold["token_rate"]["count"], 60, "{gold}");
    let err = fails_with(
        elsewhere.path(),
        &env,
        &["plan", "set", "silver", "--token-ttl", "600"],
    );
    assert!(err.contains("a new plan needs --scopes"), "{err}");
    assert!(!plans(d).contains_key("silver"));
}

/// Output into a pipe whose reader has gone ends quietly: no "Broken pipe" error, exit 0,
/// for help, completions and a command's answer alike.
#[test]
fn a_closed_pipe_ends_output_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(d, &["plan", "set", "pro", "--scopes", "news-api"]);
    for args in [
        &["plan", "set", "--help"][..],
        &["completions", "bash"],
        &["plan", "list"],
        &["config", "check"],
    ] {
        // The reader is closed before the command starts: its first write fails.
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = command(d)
            .args(args)
            .stdout(writer)
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {:?} {stderr}", out.status);
        assert!(stderr.is_empty(), "{args:?}: {stderr}");
    }
}

/// What `serve --demo` printed: the demo client's and the admin client's credentials, and
/// the base URL; then stops it.
struct Demo {
    base: String,
    client: (String, String),
    admin: (String, String),
    stderr: String,
}

/// Runs `serve --demo` in `d` until it has printed its clients and serves, then stops it
/// with SIGTERM.
async fn demo_run(d: &Path) -> Demo {
    let mut child = command(d)
        .args(["serve", "--listen", "127.0.0.1:0", "--demo"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut reader = BufReader::new(child.stdout.take().unwrap());
    let mut lines = Vec::new();
    let mut line = String::new();
    while !line.starts_with("  TOKEN=$(") {
        line.clear();
        assert!(reader.read_line(&mut line).unwrap() > 0, "{lines:?}");
        lines.push(line.clone());
    }
    let base = lines[0]
        .trim()
        .strip_prefix("tessera listening on ")
        .unwrap()
        .to_owned();
    let value = |key: &str, nth: usize| {
        lines
            .iter()
            .filter_map(|l| l.trim().strip_prefix(key))
            .nth(nth)
            .unwrap_or_else(|| panic!("{key} in {lines:?}"))
            .trim()
            .to_owned()
    };
    let client = (value("client_id:", 0), value("client_secret:", 0));
    let admin = (value("client_id:", 1), value("client_secret:", 1));
    // Serving: the demo's writes are done.
    let ready = reqwest::get(format!("{base}/readyz")).await.unwrap();
    assert_eq!(ready.status(), 200);
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    // How it ended is not this test's concern (a SIGTERM before the shutdown handler is
    // first polled ends it as the signal's default does): what it printed is.
    let out = child.wait_with_output().unwrap();
    Demo {
        base,
        client,
        admin,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A restart of `serve --demo` prints the secrets of the last start, which still work; a
/// demo secret changed in between is set back, and that is said loudly.
#[tokio::test]
async fn the_demo_keeps_its_secrets_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let first = demo_run(d).await;
    let second = demo_run(d).await;
    assert_eq!(second.client, first.client);
    assert_eq!(second.admin, first.admin);
    assert!(!second.stderr.contains("NOTE"), "{}", second.stderr);
    assert_ne!(first.client.1, first.admin.1);

    // The secret printed works against the restarted server.
    let server = serve(d, &[]);
    let (id, secret) = &first.client;
    let response = token(&server.base, id, secret, "news-api").await;
    assert_eq!(response.status(), 200);
    drop(server);

    // Rotated in between: set back, loudly.
    let rotated = ok(d, &["client", "rotate-secret", &first.client.0, "--json"]);
    assert!(!rotated.contains(&first.client.1));
    let third = demo_run(d).await;
    assert_eq!(third.client, first.client);
    assert!(
        third.stderr.contains(&format!(
            "NOTE: the secret of the demo client demo ({})",
            first.client.0
        )),
        "{}",
        third.stderr
    );
    assert!(third.stderr.contains("no longer works"), "{}", third.stderr);
    assert!(!third.stderr.contains("demo-admin"), "{}", third.stderr);
    assert!(!first.base.is_empty());
}

/// `GET /` answers a small page of links: the console, the metadata, the keys, the API
/// description; without the links that this listener does not serve.
#[tokio::test]
async fn the_root_is_a_page_of_links() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let page = |base: String| async move {
        let response = reqwest::get(format!("{base}/")).await.unwrap();
        assert_eq!(response.status(), 200);
        let kind = response.headers()["content-type"]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(kind.starts_with("text/html"), "{kind}");
        assert_eq!(
            response.headers()["content-security-policy"],
            "default-src 'none'"
        );
        response.text().await.unwrap()
    };
    let server = serve(d, &[]);
    let home = page(server.base.clone()).await;
    for link in [
        "href=\"/console/\"",
        "href=\"/.well-known/oauth-authorization-server\"",
        "href=\"/.well-known/jwks.json\"",
        "href=\"/openapi.json\"",
    ] {
        assert!(home.contains(link), "{link} in {home}");
    }
    assert!(home.contains("docs/"), "{home}");
    // Each link answers.
    for path in [
        "/console/",
        "/.well-known/oauth-authorization-server",
        "/openapi.json",
    ] {
        let status = reqwest::get(format!("{}{path}", server.base))
            .await
            .unwrap()
            .status();
        assert!(
            status.is_success() || status.is_redirection(),
            "{path}: {status}"
        );
    }
    drop(server);

    let server = serve(d, &["--no-console"]);
    let home = page(server.base.clone()).await;
    assert!(!home.contains("/console/"), "{home}");
    drop(server);

    let server = serve(d, &["--admin-listen", "127.0.0.1:0"]);
    let home = page(server.base.clone()).await;
    assert!(!home.contains("/console/"), "{home}");
    assert!(!home.contains("/openapi.json"), "{home}");
    assert!(home.contains("admin listener"), "{home}");
}

/// The files `serve --demo --tls` leaves beside the database are ignored by git, the
/// private key among them.
#[test]
fn git_ignores_the_demo_files() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let server = serve(d, &["--demo", "--tls"]);
    drop(server);
    let mut written: Vec<String> = std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    written.sort();
    assert!(
        written.iter().any(|n| n.ends_with("key.pem")),
        "{written:?}"
    );
    for name in &written {
        let ignored = Command::new("git")
            .args(["check-ignore", "--no-index", "-q", name])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .unwrap();
        assert!(ignored.success(), "{name} is not ignored by git");
    }
}

/// `keys generate-master-key` prints a key the server takes (as a PostgreSQL deployment
/// needs), or writes it to a new file of mode 0600, never over one.
#[test]
fn a_master_key_is_generated_for_deployments_that_keep_it_apart() {
    use base64::Engine;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let key = ok(d, &["keys", "generate-master-key"]);
    let key = key.trim();
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(key)
        .unwrap();
    assert_eq!(raw.len(), 32);
    assert_ne!(ok(d, &["keys", "generate-master-key"]).trim(), key);
    // Taken as TESSERA_MASTER_KEY, with no key file beside the database.
    let env = [("TESSERA_MASTER_KEY", key)];
    ok_with(d, &env, &["plan", "set", "pro", "--scopes", "news-api"]);
    assert!(!d.join("tessera.db.key").exists());
    ok_with(d, &env, &["plan", "list"]);

    let said = ok(d, &["keys", "generate-master-key", "--out", "master.key"]);
    assert!(said.contains("--master-key-file master.key"), "{said}");
    assert!(!said.contains(key), "{said}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(d.join("master.key"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let written = std::fs::read_to_string(d.join("master.key")).unwrap();
    let err = fails(d, &["keys", "generate-master-key", "--out", "master.key"]);
    assert!(err.contains("never overwritten"), "{err}");
    assert_eq!(
        std::fs::read_to_string(d.join("master.key")).unwrap(),
        written
    );
    // Taken as --master-key-file.
    ok(
        d,
        &[
            "plan",
            "set",
            "pro",
            "--scopes",
            "news-api",
            "--database",
            "sqlite://other.db",
            "--master-key-file",
            "master.key",
        ],
    );
    assert!(!d.join("other.db.key").exists());
}

/// `tessera man DIR` writes a page per command, from the same tree as `--help`.
#[test]
fn the_manual_pages_are_written_from_the_commands() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let said = ok(d, &["man", "man1"]);
    assert!(said.starts_with("wrote "), "{said}");
    for page in [
        "tessera.1",
        "tessera-serve.1",
        "tessera-plan-set.1",
        "tessera-keys-generate-master-key.1",
    ] {
        let text = std::fs::read_to_string(d.join("man1").join(page))
            .unwrap_or_else(|e| panic!("{page}: {e}"));
        assert!(text.starts_with(".ie") || text.contains(".TH"), "{page}");
    }
    let serve = std::fs::read_to_string(d.join("man1/tessera-serve.1")).unwrap();
    assert!(serve.contains("listen"), "{serve}");
    assert!(!d.join("man1/tessera-help.1").exists());
}

/// SIGHUP (`systemctl reload`) without TLS does not end the server: it says that there is
/// nothing to reload and goes on serving.
#[tokio::test]
async fn sighup_without_tls_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let server = serve(d, &[]);
    server.signal("-HUP");
    server
        .log_line(|l| l.contains("SIGHUP: nothing to reload"))
        .await;
    let ready = reqwest::get(format!("{}/readyz", server.base))
        .await
        .unwrap();
    assert_eq!(ready.status(), 200);
    let exit = server.terminate().await;
    assert!(exit.success(), "{exit:?}");
}
