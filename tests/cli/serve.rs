//! `serve` as an operator runs it: its flags and `TESSERA_*` variables, changes made by the
//! CLI seen while it runs, a kill -9, the demo, and a clean stop on SIGTERM.

use std::io::{BufRead, BufReader};

use super::*;

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

#[test]
fn serve_on_an_unspecified_address_needs_an_issuer() {
    let dir = tempfile::tempdir().unwrap();
    let err = fails(dir.path(), &["serve", "--listen", "0.0.0.0:0"]);
    assert!(err.contains("--issuer"), "{err}");
}

#[tokio::test]
async fn serve_sees_cli_changes_and_survives_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(
        d,
        &["plan", "set", "pro", "--scopes", "market-data-api news-api"],
    );
    let server = serve(d, &[]);

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
    let server = serve(d, &[]);
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

/// "Usage counts are written every 30 s and on shutdown (a kill -9 loses at most 30 s of
/// metering)": what a flush wrote survives a kill -9, and only what was counted after it
/// is lost. The interval is 1 s here, and the test waits for the flush it needs (it reads
/// the database until the counts are there, bounded generously for a loaded machine), not
/// for a time; the default of 30 s is held by `config.rs`
/// `the_defaults_are_the_ones_the_readme_states`, the flush on shutdown by `commands.rs`.
#[tokio::test]
async fn a_kill_9_loses_only_the_usage_counted_since_the_last_flush() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(d, &["plan", "set", "pro", "--scopes", "news-api"]);
    let (id, secret) = create_client(d, "pro");
    let issued = || -> u64 {
        let usage: Vec<serde_json::Value> =
            serde_json::from_str(&ok(d, &["client", "usage", &id, "--json"])).unwrap();
        usage
            .iter()
            .map(|day| day["issued"].as_u64().unwrap())
            .sum()
    };
    let server = serve(d, &["--housekeeping-interval", "1"]);
    for _ in 0..3 {
        assert_eq!(
            token(&server.base, &id, &secret, "news-api").await.status(),
            200
        );
    }
    let started = Instant::now();
    while issued() != 3 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no usage flush within 60 s at an interval of 1 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for _ in 0..2 {
        assert_eq!(
            token(&server.base, &id, &secret, "news-api").await.status(),
            200
        );
    }
    server.signal("-KILL");
    assert!(!server.exited().await.success(), "killed");
    // Three were written before the kill; the two after are kept only if a flush came
    // between them and the kill.
    let kept = issued();
    assert!((3..=5).contains(&kept), "{kept} of 5 kept");
    let server = serve(d, &[]);
    assert_eq!(
        token(&server.base, &id, &secret, "news-api").await.status(),
        200
    );
    assert!(server.terminate().await.success());
    assert_eq!(issued(), kept + 1, "the restarted server counts on");
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

/// Writes `key` to `path` as an operator must: a file only its owner can read.
fn write_key_file(path: &Path, key: &str) {
    std::fs::write(path, key).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
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

/// The audit event (a JSON log line) of the issuance of `token`.
async fn audit_of_issuance(server: &Server, token: &str) -> serde_json::Value {
    let jti = claims_of(token)["jti"].as_str().unwrap().to_owned();
    let line = server.log_line(|l| l.contains(&jti)).await;
    let event: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(event["target"], "tessera::audit", "{line}");
    event["fields"].clone()
}

/// Checks that `token` is an ES256 token signed by the one published key, a P-256 key.
async fn assert_es256(base: &str, token: &str) {
    let header = header_of(token);
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
    let lines = server.stderr();
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

    let server = serve(
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
    let log = server.stderr().join("\n");
    assert!(
        !log.contains(&client.1) && !log.contains(&issued),
        "a secret was logged"
    );
}

/// Whether `key` exists in the Redis at `url` (`redis://[[user]:password@]host:port[/db]`,
/// as `TESSERA_TEST_REDIS_URL` may name one), asked in RESP.
fn redis_has(url: &str, key: &str) -> bool {
    use std::io::{BufRead, BufReader, Write};
    fn ask(stream: &mut std::net::TcpStream, args: &[&str]) -> String {
        let mut request = format!("*{}\r\n", args.len());
        for arg in args {
            request.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
        }
        stream.write_all(request.as_bytes()).unwrap();
        let mut reply = String::new();
        BufReader::new(stream).read_line(&mut reply).unwrap();
        reply
    }
    let rest = url.trim_start_matches("redis://");
    let (userinfo, rest) = rest
        .rsplit_once('@')
        .map_or((None, rest), |(u, r)| (Some(u), r));
    let (address, db) = rest.split_once('/').unwrap_or((rest, ""));
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    if let Some(userinfo) = userinfo {
        let reply = match userinfo.split_once(':') {
            Some(("", password)) => ask(&mut stream, &["AUTH", password]),
            Some((user, password)) => ask(&mut stream, &["AUTH", user, password]),
            None => ask(&mut stream, &["AUTH", userinfo]),
        };
        assert_eq!(reply, "+OK\r\n", "AUTH at {address}");
    }
    if !db.is_empty() {
        assert_eq!(ask(&mut stream, &["SELECT", db]), "+OK\r\n", "SELECT {db}");
    }
    match ask(&mut stream, &["EXISTS", key]).as_str() {
        ":1\r\n" => true,
        ":0\r\n" => false,
        other => panic!("unexpected Redis reply {other:?}"),
    }
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

    let redis = tessera_testkit::redis_url();
    let refused = tessera_testkit::RefusedPort::bind();
    let nowhere = format!("redis://127.0.0.1:{}", refused.port);
    let mut serve_env = vec![
        ("TESSERA_DATABASE_URL", database.as_str()),
        ("TESSERA_MASTER_KEY", key.as_str()),
        ("TESSERA_LISTEN", "127.0.0.1:0"),
        ("TESSERA_ISSUER", "http://issuer.test"),
        ("TESSERA_SIGNING_ALG", "ES256"),
        ("TESSERA_TRUSTED_PROXIES", "10.9.9.9,127.0.0.1"),
        ("TESSERA_LOG_JSON", "true"),
        ("TESSERA_REDIS_URL", nowhere.as_str()),
    ];
    // A Redis that cannot be reached stops the start, within seconds.
    let err = refused_start(d, &serve_env, &["serve"]).await;
    assert!(
        err.contains(&format!("rate limiter: cannot use Redis at {nowhere}:")),
        "{err}"
    );
    serve_env.pop();
    serve_env.push(("TESSERA_REDIS_URL", &redis));
    let server = spawn(d, &serve_env, &["serve"]);
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
    assert_eq!(claims_of(&token)["iss"], "http://issuer.test");
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
        // Whichever server TESSERA_TEST_POSTGRES_URL names, reached through the proxy.
        let real = tessera_testkit::postgres_server(&schema.url);
        let proxy = tessera_testkit::CuttableProxy::to(real).await;
        let url = tessera_testkit::postgres_through(&schema.url, proxy.addr);
        let metrics = ANY_PORT;
        let mut env = vec![
            ("TESSERA_DATABASE_URL", url.as_str()),
            ("TESSERA_MASTER_KEY", key.as_str()),
        ];
        let mut args = vec!["serve", "--listen", "127.0.0.1:0"];
        if from_env {
            env.extend([
                ("TESSERA_METRICS_LISTEN", metrics),
                ("TESSERA_MAX_CONNECTIONS_PER_ADDRESS", "2"),
                ("TESSERA_MAX_STALENESS", "1"),
            ]);
        } else {
            args.extend([
                "--metrics-listen",
                metrics,
                "--max-connections-per-address",
                "2",
                "--max-staleness",
                "1",
                "--no-console",
            ]);
        }
        let server = spawn(d, &env, &args);
        let base = server.base.as_str();
        let how = if from_env { "environment" } else { "flags" };
        let metrics = printed_address(&server, "metrics").await;

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

/// `TESSERA_ADMIN_LISTEN` (and `admin-listen` in the configuration file) as `--admin-listen`:
/// the management surface on that address alone, the token endpoint on `--listen` alone.
#[tokio::test]
async fn the_admin_listener_is_read_from_the_environment_and_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(d, &["plan", "set", "pro", "--scopes", "news-api"]);
    let (id, secret) = create_client(d, "pro");
    for from_env in [true, false] {
        let file = d.join("tessera.toml");
        std::fs::write(&file, format!("admin-listen = \"{ANY_PORT}\"\n")).unwrap();
        let file = file.to_str().unwrap().to_owned();
        let env: Vec<(&str, &str)> = if from_env {
            vec![("TESSERA_ADMIN_LISTEN", ANY_PORT)]
        } else {
            vec![("TESSERA_CONFIG", file.as_str())]
        };
        let how = if from_env { "environment" } else { "file" };
        let server = spawn(d, &env, &["serve", "--listen", "127.0.0.1:0"]);
        let admin = format!("http://{}", printed_address(&server, "admin").await);
        let status = |url: String| async move { reqwest::get(url).await.unwrap().status() };
        assert_eq!(status(format!("{admin}/openapi.json")).await, 200, "{how}");
        assert_eq!(
            status(format!("{admin}/console/sign-in")).await,
            200,
            "{how}"
        );
        assert_eq!(
            status(format!("{}/openapi.json", server.base)).await,
            404,
            "{how}"
        );
        assert_eq!(
            status(format!("{}/console/", server.base)).await,
            404,
            "{how}"
        );
        assert_eq!(
            token(&server.base, &id, &secret, "news-api").await.status(),
            200
        );
        assert_eq!(
            token(&admin, &id, &secret, "news-api").await.status(),
            404,
            "{how}"
        );
        let checked = ok_with(d, &env, &["config", "check"]);
        let source = if from_env {
            "env TESSERA_ADMIN_LISTEN"
        } else {
            "file"
        };
        assert!(
            checked.contains(&format!("admin-listen = \"{ANY_PORT}\""))
                && checked
                    .lines()
                    .any(|l| l.starts_with("admin-listen") && l.ends_with(source)),
            "{how}: {checked}"
        );
        drop(server);
    }
}

/// README: the demo "prints where it listens, its issuer, where its data lives", and the
/// console's address; each is what it says.
#[tokio::test]
async fn the_demo_prints_its_address_issuer_data_and_console() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let server = serve(d, &["--demo"]);
    let base = server.base.as_str();
    assert!(base.starts_with("http://127.0.0.1:"), "{base}");
    assert_eq!(
        reqwest::get(format!("{base}/readyz"))
            .await
            .unwrap()
            .status(),
        200
    );

    let issuer = printed(&server, "issuer").await;
    let metadata: serde_json::Value =
        reqwest::get(format!("{base}/.well-known/oauth-authorization-server"))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
    assert_eq!(metadata["issuer"], issuer.as_str());
    assert_eq!(issuer.trim_end_matches('/'), base);

    let database = printed(&server, "database").await;
    assert!(database.starts_with("sqlite://"), "{database}");
    assert!(database.ends_with("tessera.db"), "{database}");
    assert!(
        d.join("tessera.db").is_file(),
        "the data lives where it says"
    );
    // Its plans (README: "demo plans `market-data`, `news` and `full` for the scopes
    // `market-data-api`, `news-api` and `oms-api`"), and the demo admin client's.
    let scopes: std::collections::BTreeMap<String, Vec<String>> = plans(d)
        .into_iter()
        .map(|(name, plan)| {
            let mut scopes: Vec<String> = plan["scopes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s.as_str().unwrap().to_owned())
                .collect();
            scopes.sort();
            (name, scopes)
        })
        .collect();
    let expected = [
        ("admin", "tessera-admin tessera-admin-read"),
        ("full", "market-data-api news-api oms-api"),
        ("market-data", "market-data-api"),
        ("news", "news-api"),
    ]
    .map(|(name, scopes)| {
        let scopes = scopes.split(' ').map(str::to_owned).collect();
        (name.to_owned(), scopes)
    });
    assert_eq!(scopes, expected.into());

    let console = printed(&server, "console").await;
    assert_eq!(console, format!("{base}/console/"));
    let sign_in = reqwest::get(&console).await.unwrap();
    assert_eq!(sign_in.status(), 200);
    assert_eq!(sign_in.url().path(), "/console/sign-in");
}

/// README: "`serve --dpop-nonce` (`TESSERA_DPOP_NONCE`)" makes a proof carry the server's
/// nonce, and "instances sharing the master key accept each other's nonces": two processes
/// on one database (so one master key), the first told by the flag, the second by the
/// variable; a nonce the first gave is good at the second.
#[tokio::test]
async fn dpop_nonces_from_the_flag_or_the_variable_are_good_at_every_instance() {
    use tessera_testkit::dpop::{claims, ProofKey};
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(d, &["plan", "set", "pro", "--scopes", "news-api"]);
    let (id, secret) = create_client(d, "pro");
    let first = serve(d, &["--dpop-nonce"]);
    let second = spawn(
        d,
        &[("TESSERA_DPOP_NONCE", "true")],
        &["serve", "--listen", "127.0.0.1:0"],
    );
    let key = ProofKey::ed25519();
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64
    };
    let ask = |base: &str, nonce: Option<&str>| {
        let htu = format!("{base}/connect/token");
        let mut c = claims("POST", &htu, now());
        if let Some(nonce) = nonce {
            c["nonce"] = serde_json::json!(nonce);
        }
        reqwest::Client::new()
            .post(htu)
            .basic_auth(&id, Some(&secret))
            .header("dpop", key.sign(&key.header(), &c))
            .form(&[("grant_type", "client_credentials"), ("scope", "news-api")])
            .send()
    };
    for server in [&first, &second] {
        let refused = ask(&server.base, None).await.unwrap();
        assert!(refused.headers().contains_key("dpop-nonce"));
        let (status, body) = answer(refused).await;
        assert_eq!(
            (status, body["error"].as_str()),
            (400, Some("use_dpop_nonce"))
        );
    }
    let given = ask(&first.base, None).await.unwrap();
    let nonce = given.headers()["dpop-nonce"].to_str().unwrap().to_owned();
    for server in [&first, &second] {
        let (status, body) = answer(ask(&server.base, Some(&nonce)).await.unwrap()).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["token_type"], "DPoP");
    }
}

/// "`RUST_LOG=warn` turns the audit events off": the same token request logs its audit
/// event under `RUST_LOG=info` and none under `RUST_LOG=warn` (the log is written out
/// whole by the clean stop, so a line still queued would show).
#[tokio::test]
async fn rust_log_warn_turns_the_audit_events_off() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(d, &["plan", "set", "pro", "--scopes", "news-api"]);
    let (id, secret) = create_client(d, "pro");
    let args = ["serve", "--listen", "127.0.0.1:0", "--log-json"];

    let info = spawn(d, &[("RUST_LOG", "info")], &args);
    let issued = access_token(token(&info.base, &id, &secret, "news-api").await).await;
    let event = audit_of_issuance(&info, &issued).await;
    assert_eq!(event["client_id"], id.as_str(), "{event}");
    assert!(info.terminate().await.success());

    // The same under warn, the process run by hand so that its stderr is read to its end.
    let mut child = command(d)
        .args(args)
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Kept open to the end: the server may still print.
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    let base = first.trim().strip_prefix("tessera listening on ").unwrap();
    let issued = access_token(token(base, &id, &secret, "news-api").await).await;
    let jti = claims_of(&issued)["jti"].as_str().unwrap().to_owned();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let out = child.wait_with_output().unwrap();
    drop(stdout);
    assert!(out.status.success(), "{:?}", out.status);
    let stderr = String::from_utf8_lossy(&out.stderr);
    for line in stderr.lines() {
        assert!(
            !line.contains(&jti) && !line.contains("tessera::audit"),
            "an audit event under RUST_LOG=warn: {line}"
        );
    }
}

/// The master key file must be "owned by the server user": the same file, mode 0600, is
/// refused once it belongs to another user (here `nobody`, uid 65534), by `serve` and by
/// the commands that read it, naming both users; given back, it is taken again. Changing a
/// file's owner needs root (or CAP_CHOWN): without it the test says so and skips, except
/// under `CI=true`.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn a_master_key_file_of_another_user_is_refused() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let key = d.join("master.key");
    write_key_file(&key, &master_key());
    let data = ["--master-key-file", "master.key"];
    ok(
        d,
        &[&["plan", "set", "pro", "--scopes", "news-api"], &data[..]].concat(),
    );
    let mine = std::fs::metadata(&key).unwrap().uid();
    let given = std::os::unix::fs::chown(&key, Some(65534), None).is_ok();
    if tessera_testkit::skip_without("root, to give a file to another user", given) {
        return;
    }
    let why = format!("owned by uid 65534, not by this process's uid {mine}");
    let err = refused_start(
        d,
        &[],
        &[&["serve", "--listen", "127.0.0.1:0"], &data[..]].concat(),
    )
    .await;
    assert!(err.contains(&why), "{err}");
    let err = fails(
        d,
        &[&["client", "create", "--plan", "pro"], &data[..]].concat(),
    );
    assert!(err.contains(&why), "{err}");

    std::os::unix::fs::chown(&key, Some(mine), None).unwrap();
    ok(
        d,
        &[&["client", "create", "--plan", "pro"], &data[..]].concat(),
    );
}

/// With one worker thread (`TOKIO_WORKER_THREADS=1`, as on one core) `serve` runs on tokio's
/// current-thread scheduler: it issues tokens to requests that arrive together, sees a client
/// created meanwhile (the registry's sync runs beside the requests on the same thread), and
/// stops cleanly on SIGTERM. A value that is not a count above 0 is refused by name.
#[tokio::test]
async fn one_worker_thread_serves_and_stops_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(d, &["plan", "set", "pro", "--scopes", "news-api"]);
    let (id, secret) = create_client(d, "pro");
    let args = ["serve", "--listen", "127.0.0.1:0"];
    let server = spawn(d, &[("TOKIO_WORKER_THREADS", "1")], &args);

    let mut together = tokio::task::JoinSet::new();
    for _ in 0..16 {
        let (base, id, secret) = (server.base.clone(), id.clone(), secret.clone());
        together
            .spawn(async move { access_token(token(&base, &id, &secret, "news-api").await).await });
    }
    while let Some(issued) = together.join_next().await {
        assert_eq!(claims_of(&issued.unwrap())["client_id"], id.as_str());
    }
    let (later, later_secret) = create_client(d, "pro");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let response = token(&server.base, &later, &later_secret, "news-api").await;
        if response.status() == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "the new client was never seen");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(server.terminate().await.success());

    for junk in ["0", "two"] {
        let refused = refused_start(d, &[("TOKIO_WORKER_THREADS", junk)], &args).await;
        assert!(
            refused.contains("TOKIO_WORKER_THREADS must be a number above 0"),
            "{refused}"
        );
    }
}
