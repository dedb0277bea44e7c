//! The deployment files of `deploy/` against the binary (issue 30 items 3, 4 and 6): the
//! container recipe and the compose file use only flags and variables `serve` knows, with
//! settings `config check` accepts; the Debian package's configuration passes `config
//! check`; the dashboard and the alert rules name only metrics `/metrics` serves.

use std::collections::BTreeSet;

use super::*;

/// A file of the repository.
fn repo_file(path: &str) -> String {
    let full = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

/// The words of `text` that start with `prefix` and go on with `[A-Za-z0-9_]`.
fn words(text: &str, prefix: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find(prefix) {
        let before = rest[..at].chars().next_back();
        let tail = &rest[at..];
        let end = tail
            .char_indices()
            .find(|(_, c)| !(c.is_ascii_alphanumeric() || *c == '_'))
            .map_or(tail.len(), |(i, _)| i);
        let word = &tail[..end];
        if word != prefix && !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            found.insert(word.to_owned());
        }
        rest = &tail[end.max(1)..];
    }
    found
}

/// The `serve` command lines of a file: each JSON array on one line whose first word is
/// `serve` (`CMD ["serve"]`, `command: ["serve", "--listen", …]`).
fn serve_commands(text: &str) -> Vec<Vec<String>> {
    text.lines()
        .filter_map(|line| {
            let start = line.find("[\"serve\"")?;
            let end = line.rfind(']')?;
            Some(serde_json::from_str::<Vec<String>>(&line[start..=end]).unwrap())
        })
        .collect()
}

/// The variables a file sets for Tessera, with their values: `KEY=VALUE` (Dockerfile
/// `ENV`) or `KEY: VALUE` (compose), for keys starting `TESSERA_`.
fn settings_of(text: &str) -> Vec<(String, String)> {
    text.lines()
        .map(|line| {
            line.trim()
                .trim_start_matches("ENV ")
                .trim_end_matches(" \\")
        })
        .filter(|line| line.starts_with("TESSERA_"))
        .filter_map(|line| {
            let at = line.find(['=', ':'])?;
            let (key, value) = (&line[..at], &line[at + 1..]);
            Some((
                key.trim().to_owned(),
                value.trim().trim_matches('"').to_owned(),
            ))
        })
        .collect()
}

/// The container recipe and the compose file use only flags and `TESSERA_*` variables
/// that `tessera serve --help` lists, and `config check` accepts the settings each gives.
/// (No container engine runs here to build them: docs/containers.md.)
#[test]
fn the_container_files_use_what_serve_knows() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let help = ok(d, &["serve", "--help"]);
    let dockerfile = repo_file("deploy/container/Dockerfile");
    let compose = repo_file("deploy/container/compose.yaml");
    for (name, text) in [("Dockerfile", &dockerfile), ("compose.yaml", &compose)] {
        let variables = words(text, "TESSERA_");
        assert!(!variables.is_empty(), "{name}");
        for variable in &variables {
            assert!(
                help.contains(&format!("[env: {variable}")),
                "{name}: {variable} is not a variable of tessera serve"
            );
        }
        let commands = serve_commands(text);
        assert!(!commands.is_empty(), "{name}: no serve command");
        for flag in commands.iter().flatten().filter(|w| w.starts_with("--")) {
            let flag = flag.split('=').next().unwrap();
            assert!(
                help.contains(&format!("{flag} ")),
                "{name}: {flag} is not a flag of tessera serve"
            );
        }
    }
    // The recipe: the locked release build, a user that is not root, /readyz as health.
    assert!(
        dockerfile.contains("cargo build --release --locked -p tessera"),
        "{dockerfile}"
    );
    let user = dockerfile
        .lines()
        .find_map(|l| l.strip_prefix("USER "))
        .expect("a USER line");
    assert!(
        !user.starts_with('0') && !user.starts_with("root"),
        "{user}"
    );
    let health = dockerfile
        .lines()
        .skip_while(|l| !l.starts_with("HEALTHCHECK"))
        .take(2)
        .collect::<String>();
    assert!(health.contains("/readyz"), "{health}");

    // What each file sets is a configuration serve accepts.
    let key = master_key();
    let image = settings_of(&dockerfile);
    assert_eq!(image.len(), 3, "{image:?}");
    let mut env: Vec<(&str, &str)> = image
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    env.push(("TESSERA_ISSUER", "http://localhost:8080"));
    ok_with(d, &env, &["config", "check"]);
    let instances = settings_of(&compose);
    let mut env: Vec<(&str, &str)> = instances
        .iter()
        .filter(|(k, _)| k != "TESSERA_MASTER_KEY")
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    env.push(("TESSERA_MASTER_KEY", key.as_str()));
    assert!(
        env.iter().any(|(k, _)| *k == "TESSERA_DATABASE_URL"),
        "{env:?}"
    );
    for command in serve_commands(&compose) {
        let args: Vec<&str> = ["config", "check"]
            .into_iter()
            .chain(command[1..].iter().map(String::as_str))
            .collect();
        let checked = ok_with(d, &env, &args);
        assert!(
            checked.contains("postgres://tessera:[redacted]@postgres"),
            "{checked}"
        );
        assert!(!checked.contains(&key), "{checked}");
    }
}

/// The Debian package's /etc/tessera/tessera.toml passes `config check`, and the unit runs
/// `serve` with it.
#[test]
fn the_packaged_configuration_passes_config_check() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/debian/tessera.toml");
    let checked = ok(
        d,
        &["config", "check", "--config", config.to_str().unwrap()],
    );
    assert!(
        checked.contains("database = \"sqlite:///var/lib/tessera/tessera.db\""),
        "{checked}"
    );
    assert!(checked.contains("# file"), "{checked}");
    let unit = repo_file("deploy/debian/tessera.service");
    assert!(
        unit.contains("ExecStart=/usr/bin/tessera serve --config /etc/tessera/tessera.toml"),
        "{unit}"
    );
    for hardening in [
        "User=tessera",
        "ProtectSystem=strict",
        "NoNewPrivileges=yes",
        "StateDirectory=tessera",
        "ExecReload=/bin/kill -HUP $MAINPID",
    ] {
        assert!(unit.lines().any(|l| l == hardening), "{hardening}");
    }
}

/// Posts a client credentials request over `http`; the status.
async fn token_status(
    http: &reqwest::Client,
    base: &str,
    (id, secret): (&str, &str),
    scope: &str,
) -> u16 {
    http.post(format!("{base}/connect/token"))
        .basic_auth(id, Some(secret))
        .form(&[("grant_type", "client_credentials"), ("scope", scope)])
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// Every `tessera_*` metric the Grafana dashboard and the Prometheus alert rules name is one
/// that `/metrics` serves, scraped from the real server with what makes each appear: TLS,
/// Redis-backed limits, tokens issued and reused, refusals and a rate limit hit.
#[tokio::test]
async fn the_dashboard_and_alerts_name_metrics_that_are_served() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(
        d,
        &[
            "plan",
            "set",
            "reused",
            "--scopes",
            "news-api",
            "--reuse-percent",
            "50",
        ],
    );
    ok(
        d,
        &[
            "plan",
            "set",
            "metered",
            "--scopes",
            "news-api",
            "--token-rate",
            "1/hour",
        ],
    );
    let reused = create_client(d, "reused");
    let metered = create_client(d, "metered");
    let redis = tessera_testkit::redis_url();
    let prefix = tessera_testkit::unique_redis_prefix("deploy-metrics");
    let server = serve(
        d,
        &[
            "--demo",
            "--tls",
            "--redis-url",
            &redis,
            "--redis-prefix",
            &prefix,
        ],
    );
    let cert = std::fs::read_to_string(d.join("tessera-demo-cert.pem")).unwrap();
    let http = super::tls::trusting(&cert);
    let base = server.base.as_str();
    let as_pair = |(id, secret): &(String, String)| (id.clone(), secret.clone());
    let (rid, rsecret) = as_pair(&reused);
    let (mid, msecret) = as_pair(&metered);
    assert_eq!(
        token_status(&http, base, (&rid, &rsecret), "news-api").await,
        200
    );
    assert_eq!(
        token_status(&http, base, (&rid, &rsecret), "news-api").await,
        200
    );
    assert_eq!(
        token_status(&http, base, (&rid, &rsecret), "oms-api").await,
        400
    );
    assert_eq!(
        token_status(&http, base, (&rid, "wrong"), "news-api").await,
        401
    );
    assert_eq!(
        token_status(&http, base, (&mid, &msecret), "news-api").await,
        200
    );
    assert_eq!(
        token_status(&http, base, (&mid, &msecret), "news-api").await,
        429
    );

    let text = http
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let mut served = BTreeSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split(' ');
            let (name, kind) = (parts.next().unwrap(), parts.next().unwrap());
            served.insert(name.to_owned());
            if kind == "histogram" {
                for suffix in ["_bucket", "_sum", "_count"] {
                    served.insert(format!("{name}{suffix}"));
                }
            }
        } else if !line.starts_with('#') && !line.is_empty() {
            let name = line.split(['{', ' ']).next().unwrap();
            served.insert(name.to_owned());
        }
    }
    for expected in [
        "tessera_tokens_reused_total",
        "tessera_rate_limited_total",
        "tessera_rate_limiter_redis_up",
        "tessera_tls_certificate_expiry_timestamp_seconds",
    ] {
        assert!(served.contains(expected), "{expected} not served:\n{text}");
    }

    let dashboard = repo_file("deploy/monitoring/grafana-dashboard.json");
    let parsed: serde_json::Value = serde_json::from_str(&dashboard).unwrap();
    let exprs: Vec<&str> = parsed["panels"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["type"] != "row")
        .flat_map(|p| p["targets"].as_array().unwrap())
        .map(|t| t["expr"].as_str().unwrap())
        .collect();
    assert!(exprs.len() > 10, "{exprs:?}");
    let alerts = repo_file("deploy/monitoring/alerts.yml");
    assert!(alerts.contains("groups:") && alerts.matches("- alert: ").count() > 5);
    let mut named = BTreeSet::new();
    for (file, text) in [
        ("grafana-dashboard.json", &dashboard),
        ("alerts.yml", &alerts),
    ] {
        let metrics = words(text, "tessera_");
        assert!(!metrics.is_empty(), "{file}");
        for metric in metrics {
            assert!(
                served.contains(&metric),
                "{file} names {metric}, which /metrics does not serve"
            );
            named.insert(metric);
        }
    }
    // What the issue asks the dashboard to show is on it.
    for wanted in [
        "tessera_tokens_issued_total",
        "tessera_token_requests_refused_total",
        "tessera_token_request_duration_seconds_bucket",
        "tessera_rate_limiter_redis_up",
        "tessera_registry_age_seconds",
        "tessera_store_up",
        "tessera_redis_errors_total",
        "tessera_tls_certificate_expiry_timestamp_seconds",
    ] {
        assert!(
            exprs.iter().any(|e| e.contains(wanted)),
            "the dashboard does not show {wanted}"
        );
    }
    assert!(named.len() >= 15, "{named:?}");
}
