//! A client without a shared secret, as its operator sets it up: `keys generate-client-key`
//! writes the key and prints the JWK Set, `client create --auth-method private_key_jwt
//! --jwks-file` registers it, `token --private-key` gets tokens with it (RFC 7523 section
//! 2.2); and `token --assertion-file` sends a JWT that the platform wrote, here signed by
//! `jsonwebtoken` (`tessera_testkit::dpop::ProofKey`).

use std::path::Path;
use std::process::Output;

use serde_json::{json, Value};
use tessera_testkit::claims_of;
use tessera_testkit::dpop::ProofKey;

use crate::{command, fails, issued_total, ok, serve, spawn};

/// `tessera token ARGS` as client `id`, with the token cache at `cache` and the
/// `TESSERA_*` variables in `env`, and nothing else: no secret.
fn token_as(dir: &Path, cache: &Path, id: &str, env: &[(&str, &str)], args: &[&str]) -> Output {
    command(dir)
        .arg("token")
        .args(args)
        .env("TESSERA_CLIENT_ID", id)
        .env("TESSERA_TOKEN_CACHE", cache)
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

/// The access token printed, or a panic with the command's stderr.
fn printed_token(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone())
        .unwrap()
        .trim()
        .to_owned()
}

/// Registers a `private_key_jwt` client of plan `pro` with the JWK Set in `jwks_file`.
fn create_keyed_client(dir: &Path, jwks_file: &str) -> String {
    let created = ok(
        dir,
        &[
            "client",
            "create",
            "--plan",
            "pro",
            "--auth-method",
            "private_key_jwt",
            "--jwks-file",
            jwks_file,
            "--json",
        ],
    );
    let created: Value = serde_json::from_str(created.trim()).unwrap();
    assert!(created["client_secret"].is_null(), "{created}");
    created["client_id"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_generated_client_key_gets_tokens_without_a_secret() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(
        d,
        &["plan", "set", "pro", "--scopes", "market-data-api news-api"],
    );

    // The key, owner-only, and the JWK Set of its public half on stdout.
    let printed = ok(
        d,
        &[
            "keys",
            "generate-client-key",
            "--out",
            "client.pem",
            "--kid",
            "k1",
        ],
    );
    let jwks: Value = serde_json::from_str(&printed).unwrap();
    let jwk = &jwks["keys"][0];
    assert_eq!(jwks["keys"].as_array().unwrap().len(), 1);
    assert_eq!(
        (
            &jwk["kty"],
            &jwk["crv"],
            &jwk["kid"],
            &jwk["alg"],
            &jwk["use"]
        ),
        (
            &json!("OKP"),
            &json!("Ed25519"),
            &json!("k1"),
            &json!("EdDSA"),
            &json!("sig")
        )
    );
    assert!(jwk.get("d").is_none(), "no private part: {jwk}");
    let pem = std::fs::read_to_string(d.join("client.pem")).unwrap();
    assert!(pem.starts_with("-----BEGIN PRIVATE KEY-----\n"), "{pem}");
    assert!(!printed.contains(pem.lines().nth(1).unwrap()));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(d.join("client.pem"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    // Never over an existing key, which stays as it was.
    let refused = fails(d, &["keys", "generate-client-key", "--out", "client.pem"]);
    assert!(refused.contains("never overwritten"), "{refused}");
    assert_eq!(std::fs::read_to_string(d.join("client.pem")).unwrap(), pem);

    std::fs::write(d.join("jwks.json"), &printed).unwrap();
    let id = create_keyed_client(d, "jwks.json");
    let server = serve(d, &[]);
    let base = server.base.as_str();
    let cache = d.join("cache").join("tokens.json");
    let with_key = |key: &str| {
        token_as(
            d,
            &cache,
            &id,
            &[],
            &["--env", base, "--scope", "news-api", "--private-key", key],
        )
    };

    let token = printed_token(&with_key("client.pem"));
    assert_eq!(claims_of(&token)["client_id"], id.as_str());
    // Cached for whoever holds the key: no second request.
    assert_eq!(printed_token(&with_key("client.pem")), token);
    assert_eq!(issued_total(base).await, 1);

    // Another key of the same client id gets neither the cached token nor a new one.
    ok(d, &["keys", "generate-client-key", "--out", "other.pem"]);
    let other = with_key("other.pem");
    assert!(!other.status.success());
    let said = String::from_utf8_lossy(&other.stderr);
    assert!(said.contains("invalid_client"), "{said}");
    assert_eq!(issued_total(base).await, 1);

    // One kind of credentials at a time, whatever the source.
    let both = token_as(
        d,
        &cache,
        &id,
        &[("TESSERA_CLIENT_SECRET", "tcs_x")],
        &[
            "--env",
            base,
            "--scope",
            "news-api",
            "--private-key",
            "client.pem",
        ],
    );
    let said = String::from_utf8_lossy(&both.stderr);
    assert_eq!(both.status.code(), Some(1), "{said}");
    assert!(both.stdout.is_empty(), "no token printed");
    assert!(said.contains("one kind of client credentials"), "{said}");
    let none = token_as(d, &cache, &id, &[], &["--env", base, "--scope", "news-api"]);
    let said = String::from_utf8_lossy(&none.stderr);
    assert_eq!(none.status.code(), Some(1), "{said}");
    assert!(none.stdout.is_empty(), "no token printed");
    assert!(said.contains("no client credentials"), "{said}");

    // "The key may be PEM or DER PKCS #8": the same key as DER (the PEM's base64 body) gets
    // a token of its own, through a cache of its own.
    use base64::Engine;
    let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    let der = base64::engine::general_purpose::STANDARD
        .decode(body)
        .unwrap();
    std::fs::write(d.join("client.der"), der).unwrap();
    let from_der = token_as(
        d,
        &d.join("der-cache.json"),
        &id,
        &[],
        &[
            "--env",
            base,
            "--scope",
            "news-api",
            "--private-key",
            "client.der",
        ],
    );
    assert_eq!(
        claims_of(&printed_token(&from_der))["client_id"],
        id.as_str()
    );
    assert_eq!(issued_total(base).await, 2);
}

#[tokio::test]
async fn an_assertion_file_is_sent_as_the_client_assertion() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(d, &["plan", "set", "pro", "--scopes", "news-api"]);
    let platform = ProofKey::p256();
    let mut jwk = platform.jwk().clone();
    jwk["kid"] = json!("platform-1");
    std::fs::write(d.join("jwks.json"), json!({ "keys": [jwk] }).to_string()).unwrap();
    let id = create_keyed_client(d, "jwks.json");
    let server = serve(d, &[]);
    let base = server.base.clone();
    let cache = d.join("tokens.json");
    let file = d.join("tessera-token");
    // What the platform writes: a JWT for the client, a line end after it.
    let write_assertion = |jti: &str| {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let claims = json!({
            "iss": id, "sub": id, "aud": base,
            "iat": now, "exp": now + 120, "jti": jti,
        });
        let jwt = platform.sign(&json!({ "alg": "ES256", "kid": "platform-1" }), &claims);
        std::fs::write(&file, format!("{jwt}\n")).unwrap();
    };
    let path = file.to_str().unwrap();
    let args = ["--env", base.as_str(), "--scope", "news-api", "--no-cache"];

    write_assertion("first");
    let by_flag = token_as(
        d,
        &cache,
        &id,
        &[],
        &[&args[..], &["--assertion-file", path]].concat(),
    );
    assert_eq!(
        claims_of(&printed_token(&by_flag))["client_id"],
        id.as_str()
    );

    // From the environment, as a pod spec sets it; rotated since.
    write_assertion("second");
    let env = [("TESSERA_CLIENT_ASSERTION_FILE", path)];
    let by_env = token_as(d, &cache, &id, &env, &args);
    assert_eq!(claims_of(&printed_token(&by_env))["client_id"], id.as_str());

    // Not rotated: the server refuses the replay.
    let replayed = token_as(d, &cache, &id, &env, &args);
    assert!(!replayed.status.success());
    let said = String::from_utf8_lossy(&replayed.stderr);
    assert!(
        said.contains("invalid_client") && said.contains("used before"),
        "{said}"
    );
    assert_eq!(issued_total(&base).await, 2);
}

/// A JWK Set served over plain http on loopback, on a thread of its own (the `tessera`
/// commands the test runs block its runtime); its URL and how many fetches it answered.
fn loopback_key_server(jwks: Value) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let hits = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let url = format!("http://{}/jwks.json", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let router = axum::Router::new().route(
                "/jwks.json",
                axum::routing::get(move || {
                    counted.fetch_add(1, Ordering::SeqCst);
                    let jwks = jwks.clone();
                    async move { axum::Json(jwks) }
                }),
            );
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            axum::serve(listener, router).await.unwrap();
        });
    });
    (url, hits)
}

/// `client create --jwks-uri` registers where the client's keys live, and `serve
/// --allow-private-jwks-uri` (`TESSERA_ALLOW_PRIVATE_JWKS_URI`) lets the server fetch them
/// from a loopback address over plain http; without it the server never asks that address.
#[tokio::test]
async fn a_jwks_uri_on_loopback_is_fetched_only_when_allowed() {
    use std::sync::atomic::Ordering;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(d, &["plan", "set", "pro", "--scopes", "news-api"]);
    let printed = ok(
        d,
        &[
            "keys",
            "generate-client-key",
            "--out",
            "client.pem",
            "--kid",
            "k1",
        ],
    );
    let (url, hits) = loopback_key_server(serde_json::from_str(&printed).unwrap());
    let created = ok(
        d,
        &[
            "client",
            "create",
            "--plan",
            "pro",
            "--auth-method",
            "private_key_jwt",
            "--jwks-uri",
            &url,
            "--json",
        ],
    );
    let created: Value = serde_json::from_str(created.trim()).unwrap();
    assert!(created["client_secret"].is_null(), "{created}");
    let id = created["client_id"].as_str().unwrap().to_owned();
    let shown: Value = serde_json::from_str(&ok(d, &["client", "show", &id, "--json"])).unwrap();
    assert_eq!(shown["jwks_uri"], url.as_str(), "{shown}");
    let ask = |base: &str, cache: &str| {
        token_as(
            d,
            &d.join(cache),
            &id,
            &[],
            &[
                "--env",
                base,
                "--scope",
                "news-api",
                "--private-key",
                "client.pem",
            ],
        )
    };

    // By default: refused, and the address never asked.
    let server = serve(d, &[]);
    let refused = ask(&server.base, "a.json");
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("invalid_client"), "{said}");
    assert_eq!(hits.load(Ordering::SeqCst), 0);
    assert_eq!(issued_total(&server.base).await, 0);
    drop(server);

    // Allowed by the flag, then by the variable: fetched, and a token.
    let server = serve(d, &["--allow-private-jwks-uri"]);
    let token = printed_token(&ask(&server.base, "b.json"));
    assert_eq!(claims_of(&token)["client_id"], id.as_str());
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    drop(server);
    let server = spawn(
        d,
        &[("TESSERA_ALLOW_PRIVATE_JWKS_URI", "true")],
        &["serve", "--listen", "127.0.0.1:0"],
    );
    let token = printed_token(&ask(&server.base, "c.json"));
    assert_eq!(claims_of(&token)["client_id"], id.as_str());
    assert_eq!(hits.load(Ordering::SeqCst), 2);
}
