//! `tessera token`: a client's token, cached on disk for its lifetime.

use super::*;

/// `tessera token ARGS` as the client `id`, its cache file `cache`.
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
    let server = serve(d, &[]);
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
    let staging = serve(&staging_dir, &[]);
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
