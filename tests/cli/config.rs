//! One configuration: `serve --config FILE` (TESSERA_CONFIG), keyed by the long flags, under
//! the environment and the flags; `config check` shows the outcome and where each value came
//! from, secrets redacted, and names the key of a setting that is wrong.

use std::path::{Path, PathBuf};

use super::{fails_with, ok_with, spawn};

/// Writes `text` as `NAME` in `dir`; returns its path as a string.
fn file(dir: &Path, name: &str, text: &str) -> String {
    let path: PathBuf = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

/// The line `config check` printed for `key`, whether set (`key = …`) or not.
fn line_of<'a>(out: &'a str, key: &str) -> &'a str {
    out.lines()
        .find(|l| l.starts_with(&format!("{key} = ")) || l.starts_with(&format!("# {key} is")))
        .unwrap_or_else(|| panic!("no line for {key} in:\n{out}"))
}

/// The value and the source of `key` in `config check`'s output.
fn setting(out: &str, key: &str) -> (String, String) {
    let line = line_of(out, key);
    let (value, source) = line.rsplit_once("  # ").unwrap();
    let value = value
        .trim()
        .strip_prefix(&format!("{key} = "))
        .unwrap_or("");
    (value.to_owned(), source.trim().to_owned())
}

#[test]
fn config_check_layers_file_environment_and_flags() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let path = file(
        d,
        "tessera.toml",
        "# settings only Rust could set before\n\
         max-staleness = 30\n\
         sync-interval = 0.5\n\
         body-limit = 4096\n\
         redis-prefix = \"acme:\"\n\
         auth-failures-per-client = \"7/min\"\n\
         trusted-proxy = [\"10.0.0.1\", \"10.0.0.2\"]\n",
    );
    let out = ok_with(d, &[], &["config", "check", "--config", &path]);
    assert_eq!(setting(&out, "max-staleness"), ("30".into(), "file".into()));
    assert_eq!(
        setting(&out, "sync-interval"),
        ("0.5".into(), "file".into())
    );
    assert_eq!(setting(&out, "body-limit"), ("4096".into(), "file".into()));
    assert_eq!(
        setting(&out, "redis-prefix"),
        ("\"acme:\"".into(), "file".into())
    );
    assert_eq!(
        setting(&out, "auth-failures-per-client"),
        ("\"7/min\"".into(), "file".into())
    );
    assert_eq!(
        setting(&out, "trusted-proxy"),
        ("[\"10.0.0.1\", \"10.0.0.2\"]".into(), "file".into())
    );
    assert_eq!(
        setting(&out, "listen"),
        ("\"127.0.0.1:8080\"".into(), "default".into())
    );
    assert_eq!(
        setting(&out, "request-timeout"),
        ("10".into(), "default".into())
    );

    // The environment over the file, TESSERA_CONFIG naming the file.
    let env = [
        ("TESSERA_CONFIG", path.as_str()),
        ("TESSERA_MAX_STALENESS", "40"),
        ("TESSERA_BODY_LIMIT", "2048"),
    ];
    let out = ok_with(d, &env, &["config", "check"]);
    assert_eq!(
        setting(&out, "max-staleness"),
        ("40".into(), "env TESSERA_MAX_STALENESS".into())
    );
    assert_eq!(
        setting(&out, "body-limit"),
        ("2048".into(), "env TESSERA_BODY_LIMIT".into())
    );
    assert_eq!(
        setting(&out, "sync-interval"),
        ("0.5".into(), "file".into())
    );

    // A flag over both.
    let out = ok_with(
        d,
        &env,
        &[
            "config",
            "check",
            "--max-staleness",
            "50",
            "--sync-interval",
            "2",
        ],
    );
    assert_eq!(setting(&out, "max-staleness"), ("50".into(), "flag".into()));
    assert_eq!(setting(&out, "sync-interval"), ("2".into(), "flag".into()));
    assert_eq!(
        setting(&out, "body-limit"),
        ("2048".into(), "env TESSERA_BODY_LIMIT".into())
    );
}

#[test]
fn config_check_names_the_key_that_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let check = |text: &str| {
        let path = file(d, "bad.toml", text);
        fails_with(d, &[], &["config", "check", "--config", &path])
    };

    let err = check("listen = \"127.0.0.1:0\"\n\nmax-stalenes = 30\n");
    assert!(
        err.contains("bad.toml") && err.contains("line 3") && err.contains("max-stalenes"),
        "{err}"
    );
    let err = check("body-limit = 100\nmax-staleness = \"soon\"\n");
    assert!(
        err.contains("line 2") && err.contains("max-staleness") && err.contains("soon"),
        "{err}"
    );
    let err = check("auth-failures-per-source = \"10 per minute\"\n");
    assert!(err.contains("auth-failures-per-source"), "{err}");
    let err = check("request-timeout = 0\n");
    assert!(err.contains("--request-timeout"), "{err}");
    let err = check("listen-http = \"127.0.0.1:9000\"\n");
    assert!(err.contains("--listen-http"), "{err}");
    let err = check("realm = \"a\\\"b\"\n");
    assert!(err.contains("--realm"), "{err}");

    // Bad values from the environment and flags name their variable or flag.
    let err = fails_with(d, &[("TESSERA_IDLE_TIMEOUT", "-1")], &["config", "check"]);
    assert!(err.contains("--idle-timeout"), "{err}");
    let err = fails_with(d, &[], &["config", "check", "--max-in-flight", "many"]);
    assert!(err.contains("--max-in-flight"), "{err}");
    let err = fails_with(d, &[], &["config", "check", "--config", "missing.toml"]);
    assert!(err.contains("missing.toml"), "{err}");
}

#[test]
fn config_check_redacts_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let path = file(
        d,
        "tessera.toml",
        "database = \"postgres://app:Db5ecret@db.internal/tessera?sslpassword=Ss1pw\"\n\
         master-key = \"MasterKey0123456789\"\n",
    );
    let env = [("TESSERA_REDIS_URL", "redis://:Red1spw@cache:6379/0")];
    let out = ok_with(d, &env, &["config", "check", "--config", &path]);
    for secret in ["Db5ecret", "Ss1pw", "MasterKey0123456789", "Red1spw"] {
        assert!(!out.contains(secret), "{secret} printed:\n{out}");
    }
    assert_eq!(
        setting(&out, "database"),
        (
            "\"postgres://app:[redacted]@db.internal/tessera?sslpassword=[redacted]\"".into(),
            "file".into()
        )
    );
    assert_eq!(
        setting(&out, "master-key"),
        ("\"[redacted]\"".into(), "file".into())
    );
    assert_eq!(
        setting(&out, "redis-url"),
        (
            "\"redis://:[redacted]@cache:6379/0\"".into(),
            "env TESSERA_REDIS_URL".into()
        )
    );
    // A secret given as a flag is redacted too.
    let out = ok_with(d, &[], &["config", "check", "--master-key", "FlagKey987"]);
    assert!(!out.contains("FlagKey987"), "{out}");
    assert_eq!(
        setting(&out, "master-key"),
        ("\"[redacted]\"".into(), "flag".into())
    );
}

/// `serve --config` runs with what only the file says: where it listens, its database,
/// the body limit and the realm of its challenges, each seen over HTTP.
#[tokio::test]
async fn serve_runs_with_the_settings_of_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let database = format!("sqlite://{}", d.join("from-file.db").display());
    ok_with(
        d,
        &[("TESSERA_DATABASE_URL", &database)],
        &["plan", "set", "pro", "--scopes", "news-api"],
    );
    let path = file(
        d,
        "tessera.toml",
        &format!(
            "listen = \"127.0.0.1:0\"\n\
             database = \"{database}\"\n\
             body-limit = 200\n\
             realm = \"from-the-file\"\n"
        ),
    );
    let server = spawn(d, &[], &["serve", "--config", &path]);
    let http = reqwest::Client::new();
    let token = |body: String| {
        http.post(format!("{}/connect/token", server.base))
            .basic_auth("tc_unknown", Some("wrong"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
    };
    // Within the limit: read, and refused for the credentials, in the file's realm.
    let small = token("grant_type=client_credentials&scope=news-api".into())
        .await
        .unwrap();
    assert_eq!(small.status(), 401);
    let challenge = small.headers()["www-authenticate"].to_str().unwrap();
    assert!(challenge.contains("realm=\"from-the-file\""), "{challenge}");
    // Past the file's 200 bytes (the default is 8 KiB): 413.
    let large = token(format!(
        "grant_type=client_credentials&scope={}",
        "a".repeat(300)
    ))
    .await
    .unwrap();
    assert_eq!(large.status(), 413);
    // The plan written to the file's database is the one served.
    let metadata: serde_json::Value = reqwest::get(format!(
        "{}/.well-known/oauth-authorization-server",
        server.base
    ))
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(
        metadata["scopes_supported"],
        serde_json::json!(["news-api"])
    );
}

/// The defaults the README states, as `config check` shows them with no file, no variable
/// and no flag: the failure throttle ("10 a minute", "100 a minute", "1,000 a minute", "The
/// counters in memory are bounded (100,000)"), "1,024 OAuth requests", "10,000 open
/// connections", "1,000 connections", "within 10 s and fit in 16 KiB", "100,000 requests or
/// 10 minutes", "every call has 50 ms" (Redis), "written every 30 s" (usage), "A full reload
/// runs only every 10 minutes", the 250 ms poll and the 5-minute staleness bound.
#[test]
fn the_defaults_are_the_ones_the_readme_states() {
    let dir = tempfile::tempdir().unwrap();
    let out = ok_with(dir.path(), &[], &["config", "check"]);
    for (key, value) in [
        ("auth-failures-per-source-and-client", "\"10/min\""),
        ("auth-failures-per-client", "\"100/min\""),
        ("auth-failures-per-source", "\"1000/min\""),
        ("auth-failures-max-tracked", "100000"),
        ("max-in-flight", "1024"),
        ("max-connections", "10000"),
        ("max-connections-per-address", "1000"),
        ("header-timeout", "10"),
        ("request-timeout", "10"),
        ("idle-timeout", "10"),
        ("body-limit", "8192"),
        ("max-requests-per-connection", "100000"),
        ("max-connection-age", "600"),
        ("redis-timeout", "0.05"),
        ("housekeeping-interval", "30"),
        ("full-reload-interval", "600"),
        ("sync-interval", "0.25"),
        ("max-staleness", "300"),
    ] {
        assert_eq!(
            setting(&out, key),
            (value.to_owned(), "default".to_owned()),
            "{key}"
        );
    }
}

/// The admin commands and `backup` open the database the file names (with its master key
/// file), as `serve --config` with the same file serves it; a flag or a variable still wins.
#[test]
fn admin_commands_open_the_database_of_the_config_file() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir(d.join("state")).unwrap();
    ok_with(
        d,
        &[],
        &["keys", "generate-master-key", "--out", "state/registry.key"],
    );
    let path = file(
        d,
        "tessera.toml",
        "database = \"sqlite://state/registry.db\"\n\
         master-key-file = \"state/registry.key\"\n",
    );
    ok_with(
        d,
        &[],
        &[
            "--config",
            &path,
            "plan",
            "set",
            "from-file",
            "--scopes",
            "news-api",
        ],
    );
    ok_with(
        d,
        &[],
        &["--config", &path, "client", "create", "--plan", "from-file"],
    );
    assert!(d.join("state/registry.db").exists());
    assert!(
        !d.join("state/registry.db.key").exists(),
        "the file's key was not used"
    );
    assert!(
        !d.join("tessera.db").exists(),
        "the default database was opened"
    );
    let listed = ok_with(d, &[("TESSERA_CONFIG", &path)], &["plan", "list"]);
    assert!(listed.contains("from-file"), "{listed}");
    // A flag, or a variable, wins over the file: these name a database that is not there.
    let err = fails_with(
        d,
        &[],
        &[
            "--config",
            &path,
            "--database",
            "sqlite://flag.db",
            "plan",
            "list",
        ],
    );
    assert!(err.contains("flag.db"), "{err}");
    let env = [
        ("TESSERA_CONFIG", path.as_str()),
        ("TESSERA_DATABASE_URL", "sqlite://env.db"),
    ];
    let err = fails_with(d, &env, &["plan", "list"]);
    assert!(err.contains("env.db"), "{err}");
    let copy = d.join("copy.db").display().to_string();
    ok_with(d, &[("TESSERA_CONFIG", &path)], &["backup", "--out", &copy]);
    let restored = ok_with(
        d,
        &[],
        &[
            "--database",
            &format!("sqlite://{copy}"),
            "--master-key-file",
            "state/registry.key",
            "plan",
            "list",
        ],
    );
    assert!(restored.contains("from-file"), "{restored}");
    // A file that is not there is an error naming it, not the default database.
    let err = fails_with(d, &[], &["--config", "missing.toml", "plan", "list"]);
    assert!(err.contains("missing.toml"), "{err}");
}
