//! `tessera --admin-url URL`: the admin commands through a running server's admin API, with
//! the same output as on the database, and the ways to authenticate.

use std::sync::{Arc, Mutex};

use super::*;

/// A database in `d` with plan `admin` (scope `tessera-admin`) and one client on it,
/// bootstrapped as docs/admin-api.md says; returns that client's credentials.
fn bootstrap_admin(d: &Path) -> (String, String) {
    ok(d, &["plan", "set", "admin", "--scopes", "tessera-admin"]);
    create_client(d, "admin")
}

/// `args`, parsed as one JSON value.
fn json_of(dir: &Path, env: &[(&str, &str)], args: &[&str]) -> serde_json::Value {
    let out = ok_with(dir, env, args);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: {e}: {out}"))
}

/// Every plan, client and keys command sent through the admin API prints what the same
/// command prints on the database, and its change is in force at the token endpoint at once.
#[tokio::test]
async fn admin_commands_through_the_api_match_the_database() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (admin_id, admin_secret) = bootstrap_admin(d);
    // `serve` does not use --admin-url: one left in the environment changes nothing.
    let refused = tessera_testkit::RefusedPort::bind();
    let nowhere = format!("http://127.0.0.1:{}", refused.port);
    let server = spawn(
        d,
        &[("TESSERA_ADMIN_URL", nowhere.as_str())],
        &["serve", "--listen", "127.0.0.1:0"],
    );
    let base = server.base.as_str();
    // The remote commands run in a folder of their own, which they leave empty: they open
    // no database.
    let elsewhere = tempfile::tempdir().unwrap();
    let r = elsewhere.path();
    let env = [
        ("TESSERA_ADMIN_URL", base),
        ("TESSERA_CLIENT_ID", admin_id.as_str()),
        ("TESSERA_CLIENT_SECRET", admin_secret.as_str()),
    ];
    let remote = |args: &[&str]| json_of(r, &env, args);
    let local = |args: &[&str]| json_of(d, &[], args);

    // plan set: created, then changed with the settings not named kept (PUT replaces, so
    // the CLI reads the plan first).
    let plan = remote(&[
        "plan",
        "set",
        "pro",
        "--scopes",
        "news-api oms-api",
        "--token-rate",
        "60/min",
        "--reuse-percent",
        "40",
        "--dpop",
        "required",
        "--json",
    ]);
    assert_eq!(plan["scopes"], serde_json::json!(["news-api", "oms-api"]));
    assert_eq!(plan["dpop"], "required", "{plan}");
    let plan = remote(&["plan", "set", "pro", "--scopes", "news-api", "--json"]);
    assert_eq!(plan["scopes"], serde_json::json!(["news-api"]));
    assert_eq!(plan["token_rate"]["count"], 60, "{plan}");
    assert_eq!(plan["reuse_percent"], 40, "{plan}");
    assert_eq!(plan["dpop"], "required", "{plan}");
    let plan = remote(&[
        "plan", "set", "pro", "--scopes", "news-api", "--dpop", "allowed", "--json",
    ]);
    assert_eq!(plan["dpop"], "allowed", "{plan}");
    remote(&["plan", "set", "other", "--scopes", "oms-api", "--json"]);
    let human = ok_with(r, &env, &["plan", "list"]);
    assert!(
        human.contains("plan pro: scopes \"news-api\", tokens live 3600 s"),
        "{human}"
    );

    // client create --count: one request each, each client usable at once.
    let out = ok_with(
        r,
        &env,
        &[
            "client", "create", "--plan", "pro", "--name", "app", "--count", "3", "--json",
        ],
    );
    let created: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(created.len(), 3, "{out}");
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
    let id = created[0]["client_id"].as_str().unwrap();
    let secret = created[0]["client_secret"].as_str().unwrap();

    // The same objects as the database backend prints.
    for args in [
        &["plan", "list", "--json"][..],
        &["client", "list", "--json"],
        &["client", "show", id, "--json"],
        &["client", "usage", id, "--json"],
        &["keys", "list", "--json"],
    ] {
        assert_eq!(remote(args), local(args), "{args:?}");
    }
    assert_eq!(
        ok_with(r, &env, &["client", "show", id]),
        ok(d, &["client", "show", id])
    );

    // disable, enable, set-plan: in force at the token endpoint before the answer.
    let disabled = remote(&["client", "disable", id, "--json"]);
    assert_eq!(disabled["enabled"], false);
    let (status, body) = answer(token(base, id, secret, "news-api").await).await;
    assert_eq!((status, &body["error"]), (401, &"invalid_client".into()));
    assert_eq!(
        ok_with(r, &env, &["client", "enable", id]).trim(),
        format!("client {id} enabled")
    );
    let moved = remote(&["client", "set-plan", id, "other", "--json"]);
    assert_eq!(moved["plan"], "other");
    let (status, body) = answer(token(base, id, secret, "oms-api").await).await;
    assert_eq!((status, &body["scope"]), (200, &"oms-api".into()), "{body}");

    // rotate-secret: the new secret works at once, the old one through the grace.
    let rotated = remote(&["client", "rotate-secret", id, "--grace", "600", "--json"]);
    let new_secret = rotated["client_secret"].as_str().unwrap();
    assert!(
        rotated["previous_secret_valid_until"].is_string(),
        "{rotated}"
    );
    for s in [secret, new_secret] {
        assert_eq!(answer(token(base, id, s, "oms-api").await).await.0, 200);
    }

    // keys rotate: published as next, in the list the database holds.
    let key = remote(&["keys", "rotate", "--alg", "ES256", "--json"]);
    assert_eq!(
        (&key["alg"], &key["status"]),
        (&"ES256".into(), &"next".into())
    );
    let keys = local(&["keys", "list", "--json"]);
    assert_eq!(keys.as_array().unwrap().last().unwrap()["kid"], key["kid"]);

    // delete prints the client it deleted; then it is unknown, with the API's detail.
    let deleted = remote(&["client", "delete", id, "--json"]);
    assert_eq!(deleted["client_id"], id);
    let err = fails_with(r, &env, &["client", "show", id]);
    assert!(
        err.contains("no client") && err.contains("admin API: 404"),
        "{err}"
    );
    let (status, _) = answer(token(base, id, new_secret, "oms-api").await).await;
    assert_eq!(status, 401);

    // Bad input is refused by the server with its detail, and nothing is written.
    let err = fails_with(r, &env, &["plan", "set", "bad plan", "--scopes", "a"]);
    assert!(
        err.contains("plan name") && err.contains("admin API: 400"),
        "{err}"
    );
    let err = fails_with(
        r,
        &env,
        &["plan", "set", "x", "--scopes", "a", "--token-ttl", "0"],
    );
    assert!(
        err.contains("TTL") && err.contains("field token_ttl"),
        "{err}"
    );
    let err = fails_with(r, &env, &["client", "create", "--plan", "nope"]);
    assert!(
        err.contains("no client created") && err.contains("no plan named \"nope\""),
        "{err}"
    );
    let names: Vec<_> = local(&["plan", "list", "--json"])
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["admin", "other", "pro"]);

    // trust add / list / remove: written through the API, read from the database, and
    // the other way round; bad input refused with the field at fault.
    let (fed_id, _) = create_client(d, "pro");
    let policy = remote(&[
        "trust",
        "add",
        "gha-main",
        "--client",
        &fed_id,
        "--issuer",
        "https://token.actions.githubusercontent.com",
        "--audience",
        "https://github.com/acme",
        "--subject",
        "repo:acme/payments:*",
        "--claim",
        "ref=refs/heads/main",
        "--claim",
        "repository_id=892375",
        "--max-assertion-ttl",
        "600",
        "--json",
    ]);
    assert_eq!(policy["client_id"], fed_id.as_str());
    assert_eq!(
        policy["claims"],
        serde_json::json!({"ref": "refs/heads/main", "repository_id": "892375"})
    );
    let listed = local(&["trust", "list", "--json"]);
    assert_eq!(listed, serde_json::json!([policy]));
    let human = ok_with(r, &env, &["trust", "list"]);
    assert!(
        human.contains(
            "trust policy gha-main: tokens of https://token.actions.githubusercontent.com"
        ) && human.contains("ref=refs/heads/main")
            && human.contains(&fed_id),
        "{human}"
    );
    let err = fails_with(
        r,
        &env,
        &[
            "trust",
            "add",
            "bad",
            "--client",
            &fed_id,
            "--issuer",
            "http://issuer.example",
            "--audience",
            "a",
            "--subject",
            "s",
        ],
    );
    assert!(
        err.contains("issuer") && err.contains("admin API: 400"),
        "{err}"
    );
    let err = fails(
        d,
        &[
            "trust",
            "add",
            "bad",
            "--client",
            &fed_id,
            "--issuer",
            "https://i.example",
            "--audience",
            "a",
            "--subject",
            "a*b*",
        ],
    );
    assert!(err.contains("subject"), "{err}");
    // GitHub Actions without an immutable id, and a policy on an admin client: refused
    // unless the flag says so, through the API and the database alike.
    let by_name = |extra: &[&str]| {
        let mut args = vec![
            "trust",
            "add",
            "gha-by-name",
            "--client",
            &fed_id,
            "--issuer",
            "https://token.actions.githubusercontent.com",
            "--audience",
            "https://github.com/acme",
            "--subject",
            "repo:acme/payments:*",
            "--claim",
            "repository=acme/payments",
        ];
        args.extend_from_slice(extra);
        args.into_iter().map(str::to_owned).collect::<Vec<_>>()
    };
    let args = by_name(&[]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let err = fails_with(r, &env, &args);
    assert!(
        err.contains("repository_id") && err.contains("400"),
        "{err}"
    );
    assert!(fails(d, &args).contains("allow_mutable_subject"));
    let args = by_name(&["--allow-mutable-subject"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    ok_with(r, &env, &args);
    ok(d, &["trust", "remove", "gha-by-name"]);
    let to_admin = |extra: &[&str]| {
        let mut args = vec![
            "trust",
            "add",
            "to-admin",
            "--client",
            &admin_id,
            "--issuer",
            "https://kubernetes.default.svc",
            "--audience",
            "tessera",
            "--subject",
            "system:serviceaccount:ops:deployer",
        ];
        args.extend_from_slice(extra);
        args.into_iter().map(str::to_owned).collect::<Vec<_>>()
    };
    let args = to_admin(&[]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let err = fails_with(r, &env, &args);
    assert!(err.contains("admin scope") && err.contains("400"), "{err}");
    let args = to_admin(&["--allow-admin"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    ok_with(r, &env, &args);
    ok(d, &["trust", "remove", "to-admin"]);
    ok(d, &["trust", "remove", "gha-main"]);
    assert_eq!(remote(&["trust", "list", "--json"]), serde_json::json!([]));
    let err = fails_with(r, &env, &["trust", "remove", "gha-main"]);
    assert!(err.contains("404"), "{err}");

    let left: Vec<_> = std::fs::read_dir(r).unwrap().collect();
    assert!(left.is_empty(), "the remote commands wrote {left:?}");
}

/// The token: `TESSERA_ADMIN_TOKEN` as it is, or fetched with client credentials for
/// `tessera-admin`, falling back to `tessera-admin-read`; and each way it can fail.
#[tokio::test]
async fn admin_url_tokens_scopes_and_refusals() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (admin_id, admin_secret) = bootstrap_admin(d);
    ok(
        d,
        &["plan", "set", "reader", "--scopes", "tessera-admin-read"],
    );
    let (reader_id, reader_secret) = create_client(d, "reader");
    ok(d, &["plan", "set", "pro", "--scopes", "news-api"]);
    let (app_id, app_secret) = create_client(d, "pro");
    let server = serve(d, &[]);
    let base = server.base.as_str();
    let r = tempfile::tempdir().unwrap();
    let r = r.path();
    let list = ["--admin-url", base, "plan", "list", "--json"];
    let write = [
        "--admin-url",
        base,
        "plan",
        "set",
        "x",
        "--scopes",
        "news-api",
    ];

    // TESSERA_ADMIN_TOKEN, used as it is.
    let (status, body) = answer(token(base, &admin_id, &admin_secret, "tessera-admin").await).await;
    assert_eq!(status, 200, "{body}");
    let admin_token = body["access_token"].as_str().unwrap();
    let with_token = [("TESSERA_ADMIN_TOKEN", admin_token)];
    let plans = ok_with(r, &with_token, &list);
    assert!(plans.contains("\"reader\""), "{plans}");
    ok_with(r, &with_token, &write);
    let err = fails_with(r, &[("TESSERA_ADMIN_TOKEN", "not-a-token")], &list);
    assert!(err.contains("admin API: 401"), "{err}");

    // A client whose plan grants only tessera-admin-read reads, and may not write.
    let reader = [
        ("TESSERA_CLIENT_ID", reader_id.as_str()),
        ("TESSERA_CLIENT_SECRET", reader_secret.as_str()),
    ];
    assert!(ok_with(r, &reader, &list).contains("\"x\""));
    let err = fails_with(r, &reader, &write);
    assert!(err.contains("admin API: 403"), "{err}");

    // A client with neither scope, a wrong secret, no credentials at all.
    let app = [
        ("TESSERA_CLIENT_ID", app_id.as_str()),
        ("TESSERA_CLIENT_SECRET", app_secret.as_str()),
    ];
    let err = fails_with(r, &app, &list);
    assert!(
        err.contains("neither tessera-admin nor tessera-admin-read"),
        "{err}"
    );
    let wrong = [
        ("TESSERA_CLIENT_ID", admin_id.as_str()),
        ("TESSERA_CLIENT_SECRET", "tcs_wrong"),
    ];
    let err = fails_with(r, &wrong, &list);
    assert!(
        err.contains("cannot get an admin token") && err.contains("invalid_client"),
        "{err}"
    );
    let err = fails_with(r, &[], &list);
    assert!(err.contains("TESSERA_ADMIN_TOKEN"), "{err}");

    // Plain http only to loopback: the token must not travel in the clear (refused before
    // any connection is made).
    let err = fails_with(
        r,
        &with_token,
        &["--admin-url", "http://admin.example", "plan", "list"],
    );
    assert!(err.contains("not https"), "{err}");
    let err = fails_with(
        r,
        &with_token,
        &["--admin-url", "not a url", "plan", "list"],
    );
    assert!(err.contains("--admin-url"), "{err}");
    // Nothing listening: said as such, at once.
    let refused = tessera_testkit::RefusedPort::bind();
    let nowhere = format!("http://127.0.0.1:{}", refused.port);
    let err = fails_with(r, &with_token, &["--admin-url", &nowhere, "keys", "list"]);
    assert!(err.contains("cannot reach the admin API"), "{err}");

    let left: Vec<_> = std::fs::read_dir(r).unwrap().collect();
    assert!(left.is_empty(), "the remote commands wrote {left:?}");
}

/// A stand-in for a load balancer whose own timeout is shorter than the server's: it
/// forwards every request to `upstream`, but answers the first `POST /admin/v1/clients`
/// 408 once the server has made the client, as a timeout past the commit would. Returns
/// its base URL and the `Idempotency-Key` of each create it forwarded.
async fn timing_out_proxy(upstream: String) -> (String, Arc<Mutex<Vec<String>>>) {
    failing_proxy(upstream, 408).await
}

/// [`timing_out_proxy`] answering `status` instead of 408 (a gateway's 502, 503 or 504).
async fn failing_proxy(upstream: String, failure: u16) -> (String, Arc<Mutex<Vec<String>>>) {
    use axum::body::{to_bytes, Body};
    use axum::extract::Request;
    use axum::response::Response;
    let keys = Arc::new(Mutex::new(Vec::new()));
    let seen = keys.clone();
    let http = reqwest::Client::new();
    let forward = move |request: Request| {
        let (http, upstream, seen) = (http.clone(), upstream.clone(), seen.clone());
        async move {
            let (parts, body) = request.into_parts();
            let body = to_bytes(body, 1 << 20).await.unwrap();
            let create = parts.method == "POST" && parts.uri.path() == "/admin/v1/clients";
            if create {
                let key = parts.headers["idempotency-key"]
                    .to_str()
                    .unwrap()
                    .to_owned();
                seen.lock().unwrap().push(key);
            }
            let mut headers = parts.headers.clone();
            headers.remove("host");
            let answer = http
                .request(parts.method, format!("{upstream}{}", parts.uri))
                .headers(headers)
                .body(body)
                .send()
                .await
                .unwrap();
            let status = answer.status();
            let headers = answer.headers().clone();
            let body = answer.bytes().await.unwrap();
            if create && seen.lock().unwrap().len() == 1 {
                assert_eq!(status, 201, "the server made the client");
                return Response::builder()
                    .status(failure)
                    .body(Body::empty())
                    .unwrap();
            }
            let mut response = Response::new(Body::from(body));
            *response.status_mut() = status;
            *response.headers_mut() = headers;
            response
        }
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let app = axum::Router::new().fallback(forward);
    tokio::spawn(async move { axum::serve(listener, app).await });
    (base, keys)
}

/// A create answered 408 (a proxy's timeout, or an older server's, after the client was
/// made) is sent again with the same `Idempotency-Key`, as after 502, 503 or 504: the
/// server answers with the client it made, whose secret is printed and works, and no
/// second client is made.
// Multi-threaded: the proxy answers on the runtime while the test waits for the command.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_answered_408_is_retried_with_its_idempotency_key() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (admin_id, admin_secret) = bootstrap_admin(d);
    ok(d, &["plan", "set", "pro", "--scopes", "news-api"]);
    let server = serve(d, &[]);
    let (proxy, keys) = timing_out_proxy(server.base.clone()).await;
    let env = [
        ("TESSERA_ADMIN_URL", proxy.as_str()),
        ("TESSERA_CLIENT_ID", admin_id.as_str()),
        ("TESSERA_CLIENT_SECRET", admin_secret.as_str()),
    ];
    let created = json_of(d, &env, &["client", "create", "--plan", "pro", "--json"]);

    let keys = keys.lock().unwrap().clone();
    assert_eq!(keys.len(), 2, "the create and its retry");
    assert_eq!(keys[0], keys[1], "one Idempotency-Key");
    let listed = json_of(d, &[], &["client", "list", "--json"]);
    assert_eq!(
        listed.as_array().unwrap().len(),
        2,
        "the admin and one client"
    );
    let (id, secret) = (
        created["client_id"].as_str().unwrap(),
        created["client_secret"].as_str().unwrap(),
    );
    let (status, body) = answer(token(&server.base, id, secret, "news-api").await).await;
    assert_eq!(status, 200, "{body}");
}

/// The same after a gateway's 502, 503 and 504: "resent with the same key".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_answered_502_503_or_504_is_retried_with_its_idempotency_key() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (admin_id, admin_secret) = bootstrap_admin(d);
    ok(d, &["plan", "set", "pro", "--scopes", "news-api"]);
    let server = serve(d, &[]);
    for (made, failure) in [502, 503, 504].into_iter().enumerate() {
        let (proxy, keys) = failing_proxy(server.base.clone(), failure).await;
        let env = [
            ("TESSERA_ADMIN_URL", proxy.as_str()),
            ("TESSERA_CLIENT_ID", admin_id.as_str()),
            ("TESSERA_CLIENT_SECRET", admin_secret.as_str()),
        ];
        let created = json_of(d, &env, &["client", "create", "--plan", "pro", "--json"]);
        let keys = keys.lock().unwrap().clone();
        assert_eq!(keys.len(), 2, "{failure}: the create and its retry");
        assert_eq!(keys[0], keys[1], "{failure}: one Idempotency-Key");
        let listed = json_of(d, &[], &["client", "list", "--json"]);
        assert_eq!(
            listed.as_array().unwrap().len(),
            made + 2,
            "{failure}: the admin and one client more"
        );
        let (id, secret) = (
            created["client_id"].as_str().unwrap(),
            created["client_secret"].as_str().unwrap(),
        );
        let (status, body) = answer(token(&server.base, id, secret, "news-api").await).await;
        assert_eq!(status, 200, "{failure}: {body}");
    }
}

/// A stand-in for a balancer that loses the answer: it forwards every request to `upstream`
/// and passes the answer back, one request per connection, except the first
/// `POST /admin/v1/clients`, whose connection it closes without a byte once the server has
/// made the client. Returns its base URL and the `Idempotency-Key` of each create it forwarded.
async fn silent_proxy(upstream: String) -> (String, Arc<Mutex<Vec<String>>>) {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
    let keys = Arc::new(Mutex::new(Vec::new()));
    let seen = keys.clone();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let http = reqwest::Client::new();
    tokio::spawn(async move {
        loop {
            let (socket, _) = listener.accept().await.unwrap();
            let (http, upstream, seen) = (http.clone(), upstream.clone(), seen.clone());
            tokio::spawn(async move {
                let mut socket = BufReader::new(socket);
                let mut line = String::new();
                if socket.read_line(&mut line).await.unwrap() == 0 {
                    return;
                }
                let mut words = line.split_whitespace();
                let (method, path) = (
                    words.next().unwrap().to_owned(),
                    words.next().unwrap().to_owned(),
                );
                let mut headers = reqwest::header::HeaderMap::new();
                loop {
                    line.clear();
                    socket.read_line(&mut line).await.unwrap();
                    let Some((name, value)) = line.trim_end().split_once(':') else {
                        break;
                    };
                    let name = name.to_ascii_lowercase();
                    if !["host", "connection", "content-length"].contains(&name.as_str()) {
                        headers.append(
                            reqwest::header::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                            value.trim().parse().unwrap(),
                        );
                    }
                    if name == "content-length" {
                        headers.insert("x-length", value.trim().parse().unwrap());
                    }
                }
                let length: usize = headers
                    .remove("x-length")
                    .map_or(0, |v| v.to_str().unwrap().parse().unwrap());
                let mut body = vec![0; length];
                socket.read_exact(&mut body).await.unwrap();
                let create = method == "POST" && path == "/admin/v1/clients";
                if create {
                    let key = headers["idempotency-key"].to_str().unwrap().to_owned();
                    seen.lock().unwrap().push(key);
                }
                let answer = http
                    .request(method.parse().unwrap(), format!("{upstream}{path}"))
                    .headers(headers)
                    .body(body)
                    .send()
                    .await
                    .unwrap();
                let status = answer.status();
                if create && seen.lock().unwrap().len() == 1 {
                    assert_eq!(status, 201, "the server made the client");
                    // Every byte of the request was read, so this is a clean close: the
                    // command sees the connection end with no answer at all.
                    return;
                }
                let mut head = format!("HTTP/1.1 {status}\r\nconnection: close\r\n");
                for (name, value) in answer.headers() {
                    if !["connection", "content-length", "transfer-encoding"]
                        .contains(&name.as_str())
                    {
                        head.push_str(&format!("{name}: {}\r\n", value.to_str().unwrap()));
                    }
                }
                let body = answer.bytes().await.unwrap();
                head.push_str(&format!("content-length: {}\r\n\r\n", body.len()));
                let socket = socket.get_mut();
                socket.write_all(head.as_bytes()).await.unwrap();
                socket.write_all(&body).await.unwrap();
                socket.shutdown().await.unwrap();
            });
        }
    });
    (base, keys)
}

/// A create that got no answer at all (the connection closed after the server made the
/// client, as a balancer that drops it would) is sent again with the same `Idempotency-Key`:
/// the client is made once, and the secret printed is the one that works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_that_got_no_answer_is_retried_with_its_idempotency_key() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (admin_id, admin_secret) = bootstrap_admin(d);
    ok(d, &["plan", "set", "pro", "--scopes", "news-api"]);
    let server = serve(d, &[]);
    let (proxy, keys) = silent_proxy(server.base.clone()).await;
    let env = [
        ("TESSERA_ADMIN_URL", proxy.as_str()),
        ("TESSERA_CLIENT_ID", admin_id.as_str()),
        ("TESSERA_CLIENT_SECRET", admin_secret.as_str()),
    ];
    let created = json_of(d, &env, &["client", "create", "--plan", "pro", "--json"]);

    let keys = keys.lock().unwrap().clone();
    assert_eq!(keys.len(), 2, "the create and its retry");
    assert_eq!(keys[0], keys[1], "one Idempotency-Key");
    let listed = json_of(d, &[], &["client", "list", "--json"]);
    assert_eq!(
        listed.as_array().unwrap().len(),
        2,
        "the admin and one client"
    );
    let (id, secret) = (
        created["client_id"].as_str().unwrap(),
        created["client_secret"].as_str().unwrap(),
    );
    let (status, body) = answer(token(&server.base, id, secret, "news-api").await).await;
    assert_eq!(status, 200, "{body}");
}

/// A proxy to `upstream` that makes a change of its own to plan `pro` (with `If-Match: *`)
/// just before it forwards the first `PUT /admin/v1/plans/pro`, as another operator's
/// change landing between the command's read and its write. Returns its base URL and the
/// `If-Match` of each such PUT.
async fn racing_plan_proxy(upstream: String) -> (String, Arc<Mutex<Vec<Option<String>>>>) {
    use axum::body::{to_bytes, Body};
    use axum::extract::Request;
    use axum::response::Response;
    let tags = Arc::new(Mutex::new(Vec::new()));
    let seen = tags.clone();
    let http = reqwest::Client::new();
    let forward = move |request: Request| {
        let (http, upstream, seen) = (http.clone(), upstream.clone(), seen.clone());
        async move {
            let (parts, body) = request.into_parts();
            let body = to_bytes(body, 1 << 20).await.unwrap();
            let mut headers = parts.headers.clone();
            headers.remove("host");
            if parts.method == "PUT" && parts.uri.path() == "/admin/v1/plans/pro" {
                let tag = headers
                    .get("if-match")
                    .map(|v| v.to_str().unwrap().to_owned());
                let first = {
                    let mut seen = seen.lock().unwrap();
                    seen.push(tag);
                    seen.len() == 1
                };
                if first {
                    let concurrent = http
                        .put(format!("{upstream}/admin/v1/plans/pro"))
                        .header("authorization", headers["authorization"].clone())
                        .header("if-match", "*")
                        .json(&serde_json::json!({"scopes": ["news-api", "concurrent-api"]}))
                        .send()
                        .await
                        .unwrap();
                    assert_eq!(concurrent.status(), 200, "the concurrent change");
                }
            }
            let answer = http
                .request(parts.method, format!("{upstream}{}", parts.uri))
                .headers(headers)
                .body(body)
                .send()
                .await
                .unwrap();
            let status = answer.status();
            let headers = answer.headers().clone();
            let body = answer.bytes().await.unwrap();
            let mut response = Response::new(Body::from(body));
            *response.status_mut() = status;
            *response.headers_mut() = headers;
            response
        }
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let app = axum::Router::new().fallback(forward);
    tokio::spawn(async move { axum::serve(listener, app).await });
    (base, tags)
}

/// Over the API, `plan set` "reads the plan and writes it back with `If-Match`", so that
/// "a concurrent change is refused rather than overwritten": a change landing between its
/// read and its write makes it fail, and the plan keeps that change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_plan_set_refuses_to_overwrite_a_concurrent_change() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (admin_id, admin_secret) = bootstrap_admin(d);
    ok(d, &["plan", "set", "pro", "--scopes", "news-api"]);
    let server = serve(d, &[]);
    let (proxy, tags) = racing_plan_proxy(server.base.clone()).await;
    let env = [
        ("TESSERA_ADMIN_URL", proxy.as_str()),
        ("TESSERA_CLIENT_ID", admin_id.as_str()),
        ("TESSERA_CLIENT_SECRET", admin_secret.as_str()),
    ];
    let err = fails_with(d, &env, &["plan", "set", "pro", "--token-ttl", "120"]);
    let tags = tags.lock().unwrap().clone();
    assert_eq!(tags.len(), 1, "{tags:?}");
    let tag = tags[0].as_deref().expect("an If-Match");
    assert!(tag != "*" && !tag.is_empty(), "{tag}");
    assert!(err.contains("changed since"), "{err}");
    let plan = &plans(d)["pro"];
    let mut scopes: Vec<&str> = plan["scopes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    scopes.sort_unstable();
    assert_eq!(scopes, ["concurrent-api", "news-api"], "{plan}");
    assert_ne!(plan["token_ttl"], 120, "{plan}");

    // Without a concurrent change it is written.
    ok_with(d, &env, &["plan", "set", "pro", "--token-ttl", "120"]);
    assert_eq!(plans(d)["pro"]["token_ttl"], 120);
}

/// README: "`serve`, `backup`, `token` and `completions` ignore `--admin-url`, so that a
/// `TESSERA_ADMIN_URL` left in the environment does not get in their way" (`serve`: see
/// [`admin_commands_through_the_api_match_the_database`]).
#[tokio::test]
async fn backup_token_and_completions_ignore_the_admin_url() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(d, &["plan", "set", "pro", "--scopes", "news-api"]);
    let (id, secret) = create_client(d, "pro");
    let refused = tessera_testkit::RefusedPort::bind();
    let nowhere = format!("http://127.0.0.1:{}", refused.port);
    let in_env = [("TESSERA_ADMIN_URL", nowhere.as_str())];

    ok_with(d, &in_env, &["backup", "--out", "from-env.db"]);
    ok(
        d,
        &["--admin-url", &nowhere, "backup", "--out", "from-flag.db"],
    );
    for copy in ["from-env.db", "from-flag.db"] {
        assert!(d.join(copy).is_file(), "{copy}");
    }
    assert!(ok_with(d, &in_env, &["completions", "bash"]).contains("tessera"));
    assert!(ok(d, &["--admin-url", &nowhere, "completions", "bash"]).contains("tessera"));

    let server = serve(d, &[]);
    let with_client = [
        ("TESSERA_ADMIN_URL", nowhere.as_str()),
        ("TESSERA_CLIENT_ID", id.as_str()),
        ("TESSERA_CLIENT_SECRET", secret.as_str()),
    ];
    let args = ["--env", &server.base, "--scope", "news-api", "--no-cache"];
    let token = ok_with(d, &with_client, &[&["token"][..], &args].concat());
    assert_eq!(claims_of(token.trim())["sub"], id.as_str());
    let flag = [&["--admin-url", &nowhere, "token"][..], &args].concat();
    let token = ok_with(d, &with_client[1..], &flag);
    assert_eq!(claims_of(token.trim())["sub"], id.as_str());
}
