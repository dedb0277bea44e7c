//! `serve` over TLS: HTTPS issuance with reqwest and curl, HTTP/2 through ALPN, the
//! certificate reloaded on SIGHUP and when its file changes (a broken one refused, the old
//! one kept), the plain health listener, and the demo certificate.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::{create_client, ok, serve, spawn, Server};

/// A self-signed certificate for localhost and 127.0.0.1: (cert PEM, key PEM).
pub(super) fn certificate() -> (String, String) {
    let names = vec!["localhost".to_owned(), "127.0.0.1".to_owned()];
    let generated = rcgen::generate_simple_self_signed(names).unwrap();
    (generated.cert.pem(), generated.key_pair.serialize_pem())
}

pub(super) fn write_pair(dir: &Path, (cert, key): &(String, String)) -> (PathBuf, PathBuf) {
    let (cert_path, key_path) = (dir.join("server.crt"), dir.join("server.key"));
    std::fs::write(&cert_path, cert).unwrap();
    std::fs::write(&key_path, key).unwrap();
    (cert_path, key_path)
}

/// A client that trusts `cert` alone.
pub(super) fn trusting(cert: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(cert.as_bytes()).unwrap())
        .build()
        .unwrap()
}

async fn token_status(http: &reqwest::Client, base: &str, id: &str, secret: &str) -> Option<u16> {
    http.post(format!("{base}/connect/token"))
        .basic_auth(id, Some(secret))
        .form(&[("grant_type", "client_credentials"), ("scope", "news-api")])
        .send()
        .await
        .ok()
        .map(|r| r.status().as_u16())
}

/// Polls until `ready` holds (20 s at most): a reload is noticed in the background.
async fn until<F: std::future::Future<Output = bool>>(what: &str, mut ready: impl FnMut() -> F) {
    let started = Instant::now();
    while !ready().await {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{what} within 20 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub(super) fn start_tls(dir: &Path, cert: &Path, key: &Path, extra: &[&str]) -> Server {
    let (cert, key) = (cert.to_str().unwrap(), key.to_str().unwrap());
    serve(
        dir,
        &[&["--tls-cert", cert, "--tls-key", key], extra].concat(),
    )
}

#[tokio::test]
async fn tokens_over_https_with_http2_and_a_certificate_reload() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(d, &["plan", "set", "pro", "--scopes", "news-api"]);
    let (id, secret) = create_client(d, "pro");
    let first = certificate();
    let (cert_path, key_path) = write_pair(d, &first);
    let server = start_tls(d, &cert_path, &key_path, &[]);
    assert!(
        server.base.starts_with("https://127.0.0.1:"),
        "{}",
        server.base
    );

    // reqwest (HTTP/1.1), trusting the certificate: a token whose issuer is https.
    let http = trusting(&first.0);
    let answer = http
        .post(format!("{}/connect/token", server.base))
        .basic_auth(&id, Some(&secret))
        .form(&[("grant_type", "client_credentials"), ("scope", "news-api")])
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let body: serde_json::Value = answer.json().await.unwrap();
    let payload = body["access_token"]
        .as_str()
        .unwrap()
        .split('.')
        .nth(1)
        .unwrap();
    use base64::Engine;
    let claims: serde_json::Value = serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(payload)
            .unwrap(),
    )
    .unwrap();
    assert_eq!(claims["iss"], server.base.as_str());
    // Not trusted, not served: a client without the certificate fails the handshake.
    assert_eq!(
        token_status(&reqwest::Client::new(), &server.base, &id, &secret).await,
        None
    );
    // Plain HTTP to the HTTPS port gets no answer.
    let plain = server.base.replacen("https", "http", 1);
    assert!(reqwest::get(format!("{plain}/healthz")).await.is_err());

    // curl negotiates HTTP/2 by ALPN, or keeps to HTTP/1.1 when told.
    for (flag, version) in [("--http2", "2"), ("--http1.1", "1.1")] {
        let out = Command::new("curl")
            .args([
                "-s",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code} %{http_version}",
                flag,
            ])
            .args([
                "--cacert",
                cert_path.to_str().unwrap(),
                "-u",
                &format!("{id}:{secret}"),
            ])
            .args([
                "-d",
                "grant_type=client_credentials",
                "-d",
                "scope=news-api",
            ])
            .arg(format!("{}/connect/token", server.base))
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!("200 {version}")
        );
    }

    // A broken certificate file is refused on SIGHUP; the one in force stays.
    std::fs::write(&cert_path, "not a certificate").unwrap();
    server.signal("-HUP");
    until("the failed reload is logged", || async {
        server
            .stderr()
            .iter()
            .any(|l| l.contains("keeping the previous certificate"))
    })
    .await;
    assert_eq!(
        token_status(&http, &server.base, &id, &secret).await,
        Some(200)
    );

    // A new pair on SIGHUP: new connections present it, without a restart.
    let second = certificate();
    write_pair(d, &second);
    server.signal("-HUP");
    let renewed = trusting(&second.0);
    until("the new certificate is served", || async {
        token_status(&renewed, &server.base, &id, &secret).await == Some(200)
    })
    .await;
    assert_eq!(
        token_status(&trusting(&first.0), &server.base, &id, &secret).await,
        None
    );
    // The connection opened before the reload is kept, with the certificate it began with:
    // `http` trusts only the first one, so a new connection would fail.
    assert_eq!(
        token_status(&http, &server.base, &id, &secret).await,
        Some(200),
        "the open connection was dropped"
    );

    // And without a signal when the files change (polled every 2 s).
    let third = certificate();
    write_pair(d, &third);
    let newest = trusting(&third.0);
    until("the changed files are picked up", || async {
        token_status(&newest, &server.base, &id, &secret).await == Some(200)
    })
    .await;
}

#[tokio::test]
async fn the_plain_listener_answers_health_checks_only() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let pair = certificate();
    let (cert_path, key_path) = write_pair(d, &pair);
    let server = start_tls(
        d,
        &cert_path,
        &key_path,
        &["--listen-http", super::ANY_PORT],
    );
    let health_addr = super::printed_address(&server, "health").await;
    let ready = reqwest::get(format!("http://{health_addr}/readyz"))
        .await
        .unwrap();
    assert_eq!(ready.status(), 200);
    let token = reqwest::Client::new()
        .post(format!("http://{health_addr}/connect/token"))
        .send()
        .await
        .unwrap();
    assert_eq!(token.status(), 404, "no token over plain HTTP");
    // Without TLS there is nothing to stand beside.
    let err = super::fails(
        d,
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--listen-http",
            &health_addr,
        ],
    );
    assert!(err.contains("--listen-http"), "{err}");
    // A key that is not the certificate's is refused at start, naming the problem.
    let other = certificate();
    std::fs::write(&key_path, &other.1).unwrap();
    let err = super::fails(
        d,
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--tls-cert",
            cert_path.to_str().unwrap(),
            "--tls-key",
            key_path.to_str().unwrap(),
        ],
    );
    assert!(err.contains("cannot serve TLS"), "{err}");
}

#[tokio::test]
async fn the_demo_serves_https_with_a_certificate_it_prints() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let server = serve(d, &["--demo", "--tls"]);
    assert!(server.base.starts_with("https://"), "{}", server.base);
    let cert = std::fs::read_to_string(d.join("tessera-demo-cert.pem")).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(d.join("tessera-demo-key.pem"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let ready = trusting(&cert)
        .get(format!("{}/readyz", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status(), 200);

    // Its names (README: "a self-signed certificate for `localhost`, `127.0.0.1` and `::1`").
    let (_, pem) = x509_parser::pem::parse_x509_pem(cert.as_bytes()).unwrap();
    let parsed = pem.parse_x509().unwrap();
    let mut names: Vec<String> = parsed
        .subject_alternative_name()
        .unwrap()
        .expect("a subjectAltName extension")
        .value
        .general_names
        .iter()
        .map(|name| match name {
            x509_parser::extensions::GeneralName::DNSName(dns) => format!("dns:{dns}"),
            x509_parser::extensions::GeneralName::IPAddress(ip) => match ip.len() {
                4 => format!(
                    "ip:{}",
                    std::net::Ipv4Addr::from(<[u8; 4]>::try_from(*ip).unwrap())
                ),
                _ => format!(
                    "ip:{}",
                    std::net::Ipv6Addr::from(<[u8; 16]>::try_from(*ip).unwrap())
                ),
            },
            other => format!("{other:?}"),
        })
        .collect();
    names.sort();
    assert_eq!(names, ["dns:localhost", "ip:127.0.0.1", "ip:::1"]);
    // Its key (docs/https.md, "Which key for the certificate"): ECDSA P-256, signed with
    // ECDSA and SHA-256 (RFC 5480 id-ecPublicKey with secp256r1, RFC 5758 ecdsa-with-SHA256).
    let key = &parsed.public_key().algorithm;
    assert_eq!(key.algorithm.to_id_string(), "1.2.840.10045.2.1");
    let curve = key.parameters.as_ref().unwrap().as_oid().unwrap();
    assert_eq!(curve.to_id_string(), "1.2.840.10045.3.1.7");
    assert_eq!(
        parsed.signature_algorithm.algorithm.to_id_string(),
        "1.2.840.10045.4.3.2"
    );
    // The name `localhost` is good for the server: a client that resolves it to the
    // listener and checks the name is served.
    let address: std::net::SocketAddr = server
        .base
        .strip_prefix("https://")
        .unwrap()
        .parse()
        .unwrap();
    let by_name = reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(cert.as_bytes()).unwrap())
        .resolve("localhost", address)
        .build()
        .unwrap();
    let url = format!("https://localhost:{}/readyz", address.port());
    assert_eq!(by_name.get(url).send().await.unwrap().status(), 200);

    // The printed command (README: "prints the `curl --cacert tessera-demo-cert.pem …`
    // command"), run as printed by a shell, gets a token.
    let line = server
        .stdout_line(|l| l.trim_start().starts_with("curl --cacert "))
        .await;
    let command = line.trim();
    let cacert = command.split(' ').nth(2).unwrap();
    assert_eq!(
        d.join(cacert).canonicalize().unwrap(),
        d.join("tessera-demo-cert.pem").canonicalize().unwrap()
    );
    let out = Command::new("sh")
        .args(["-c", command])
        .current_dir(d)
        .output()
        .expect("sh and curl run");
    assert!(out.status.success(), "{command}: {out:?}");
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(answer["token_type"], "Bearer", "{answer}");
    assert!(answer["access_token"].is_string());
}

/// A CA, and certificates it (or no one) signs.
pub(super) struct Pki {
    pub(super) ca: rcgen::Certificate,
    pub(super) ca_key: rcgen::KeyPair,
}

impl Pki {
    pub(super) fn new(name: &str) -> Self {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let ca = params.self_signed(&ca_key).unwrap();
        Self { ca, ca_key }
    }

    /// A client certificate for `uri` (a SAN) with subject CN=billing, O=Acme; expired
    /// when `expired`; self-signed when `self.` is not to sign. PEM of certificate and key.
    fn client(&self, uri: &str, expired: bool, self_signed: bool) -> (String, String, Vec<u8>) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "billing");
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "Acme");
        params.subject_alt_names = vec![rcgen::SanType::URI(uri.try_into().unwrap())];
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        if expired {
            params.not_before = rcgen::date_time_ymd(2020, 1, 1);
            params.not_after = rcgen::date_time_ymd(2021, 1, 1);
        }
        let cert = if self_signed {
            params.self_signed(&key).unwrap()
        } else {
            params.signed_by(&key, &self.ca, &self.ca_key).unwrap()
        };
        (
            cert.pem(),
            key.serialize_pem(),
            key.public_key_raw().to_vec(),
        )
    }
}

/// A client presenting `cert` (trusting `server`).
pub(super) fn presenting(server: &str, (cert, key): (&str, &str)) -> reqwest::Client {
    reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(server.as_bytes()).unwrap())
        .identity(reqwest::Identity::from_pem(format!("{cert}{key}").as_bytes()).unwrap())
        .build()
        .unwrap()
}

pub(super) async fn mtls_token(
    http: &reqwest::Client,
    base: &str,
    id: &str,
) -> (u16, serde_json::Value) {
    let answer = http
        .post(format!("{base}/connect/token"))
        .form(&[
            ("grant_type", "client_credentials"),
            ("scope", "news-api"),
            ("client_id", id),
        ])
        .send()
        .await
        .unwrap();
    (answer.status().as_u16(), answer.json().await.unwrap())
}

fn claims(token: &serde_json::Value) -> serde_json::Value {
    use base64::Engine;
    let payload = token["access_token"]
        .as_str()
        .unwrap()
        .split('.')
        .nth(1)
        .unwrap();
    serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(payload)
            .unwrap(),
    )
    .unwrap()
}

fn thumbprint(pem: &str) -> String {
    use base64::Engine;
    let der = rustls_pem_der(pem);
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, &der);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(digest)
}

fn rustls_pem_der(pem: &str) -> Vec<u8> {
    use base64::Engine;
    let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    base64::engine::general_purpose::STANDARD
        .decode(body)
        .unwrap()
}

#[tokio::test]
async fn clients_authenticate_with_certificates_and_get_bound_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let pki = Pki::new("Acme Clients CA");
    std::fs::write(d.join("clients-ca.pem"), pki.ca.pem()).unwrap();
    let server_pair = certificate();
    let (cert_path, key_path) = write_pair(d, &server_pair);
    ok(d, &["plan", "set", "pro", "--scopes", "news-api"]);
    let uri = "spiffe://example.org/ns/prod/sa/billing";
    let created = ok(
        d,
        &[
            "client",
            "create",
            "--plan",
            "pro",
            "--auth-method",
            "tls_client_auth",
            "--tls-san-uri",
            uri,
            "--json",
        ],
    );
    let created: serde_json::Value = serde_json::from_str(created.trim()).unwrap();
    assert!(
        created.get("client_secret").is_none(),
        "no secret: {created}"
    );
    let id = created["client_id"].as_str().unwrap().to_owned();
    let by_dn = ok(
        d,
        &[
            "client",
            "create",
            "--plan",
            "pro",
            "--auth-method",
            "tls_client_auth",
            "--tls-subject-dn",
            "CN=billing, O=Acme",
            "--json",
        ],
    );
    let by_dn: serde_json::Value = serde_json::from_str(by_dn.trim()).unwrap();
    let by_dn = by_dn["client_id"].as_str().unwrap().to_owned();
    let other_dn = ok(
        d,
        &[
            "client",
            "create",
            "--plan",
            "pro",
            "--auth-method",
            "tls_client_auth",
            "--tls-subject-dn",
            "CN=billing, O=Evil",
            "--json",
        ],
    );
    let other_dn: serde_json::Value = serde_json::from_str(other_dn.trim()).unwrap();
    let other_dn = other_dn["client_id"].as_str().unwrap().to_owned();
    // Self-signed: the key registered as a JWK.
    let (own_cert, own_key, own_public) = pki.client(uri, false, true);
    use base64::Engine;
    let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
    let jwks = serde_json::json!({"keys": [{"kty": "EC", "crv": "P-256",
        "x": b64(&own_public[1..33]), "y": b64(&own_public[33..65])}]});
    std::fs::write(d.join("jwks.json"), jwks.to_string()).unwrap();
    let own = ok(
        d,
        &[
            "client",
            "create",
            "--plan",
            "pro",
            "--auth-method",
            "self_signed_tls_client_auth",
            "--jwks-file",
            "jwks.json",
            "--json",
        ],
    );
    let own: serde_json::Value = serde_json::from_str(own.trim()).unwrap();
    let own = own["client_id"].as_str().unwrap().to_owned();

    let ca = d.join("clients-ca.pem");
    let server = start_tls(
        d,
        &cert_path,
        &key_path,
        &["--client-ca", ca.to_str().unwrap()],
    );
    let base = server.base.as_str();
    let metadata: serde_json::Value = trusting(&server_pair.0)
        .get(format!("{base}/.well-known/oauth-authorization-server"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(metadata["tls_client_certificate_bound_access_tokens"], true);
    assert!(metadata["token_endpoint_auth_methods_supported"]
        .to_string()
        .contains("tls_client_auth"));

    // The right certificate: a token bound to it (cnf x5t#S256), by SAN URI and by DN.
    let (cert, key, _) = pki.client(uri, false, false);
    let good = presenting(&server_pair.0, (&cert, &key));
    for client in [&id, &by_dn] {
        let (status, body) = mtls_token(&good, base, client).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(claims(&body)["cnf"]["x5t#S256"], thumbprint(&cert));
    }
    let (status, body) = mtls_token(
        &presenting(&server_pair.0, (&own_cert, &own_key)),
        base,
        &own,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(claims(&body)["cnf"]["x5t#S256"], thumbprint(&own_cert));

    // The client kit presents the certificate the same way.
    let kit = tessera_client::TokenClient::builder()
        .environment(tessera_client::Environment::Custom(base.parse().unwrap()))
        .client_id(tessera_proto::ClientId::parse(&id).unwrap())
        .scopes(tessera_proto::ScopeSet::parse("news-api").unwrap())
        .root_certificate(server_pair.0.as_bytes())
        .unwrap()
        .client_certificate(format!("{cert}{key}").as_bytes())
        .unwrap()
        .build()
        .unwrap();
    let answer = kit.request_token().await.unwrap();
    let bound = claims(&serde_json::json!({"access_token": answer.access_token}));
    assert_eq!(bound["cnf"]["x5t#S256"], thumbprint(&cert));

    // Refused with invalid_client: another CA, an expired certificate, another SAN, no
    // certificate, another client's id, a self-signed one for the CA method.
    let other_ca = Pki::new("Evil CA");
    let (evil, evil_key, _) = other_ca.client(uri, false, false);
    let (old, old_key, _) = pki.client(uri, true, false);
    let (elsewhere, elsewhere_key, _) =
        pki.client("spiffe://example.org/ns/prod/sa/other", false, false);
    for (what, http, client) in [
        (
            "another CA",
            presenting(&server_pair.0, (&evil, &evil_key)),
            &id,
        ),
        ("expired", presenting(&server_pair.0, (&old, &old_key)), &id),
        (
            "another SAN",
            presenting(&server_pair.0, (&elsewhere, &elsewhere_key)),
            &id,
        ),
        (
            "another DN",
            presenting(&server_pair.0, (&cert, &key)),
            &other_dn,
        ),
        ("no certificate", trusting(&server_pair.0), &id),
        (
            "self-signed for the CA method",
            presenting(&server_pair.0, (&own_cert, &own_key)),
            &id,
        ),
        (
            "a CA certificate for the self-signed method",
            presenting(&server_pair.0, (&cert, &key)),
            &own,
        ),
    ] {
        let (status, body) = mtls_token(&http, base, client).await;
        assert_eq!(
            (status, body["error"].as_str()),
            (401, Some("invalid_client")),
            "{what}: {body}"
        );
    }
}

/// Behind a TLS-terminating proxy the certificate comes in the proxy's header, believed only
/// from a trusted proxy.
#[tokio::test]
async fn a_trusted_proxy_passes_the_client_certificate_on() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let pki = Pki::new("Acme Clients CA");
    std::fs::write(d.join("ca.pem"), pki.ca.pem()).unwrap();
    ok(d, &["plan", "set", "pro", "--scopes", "news-api"]);
    let uri = "spiffe://example.org/ns/prod/sa/billing";
    let created = ok(
        d,
        &[
            "client",
            "create",
            "--plan",
            "pro",
            "--auth-method",
            "tls_client_auth",
            "--tls-san-uri",
            uri,
            "--json",
        ],
    );
    let created: serde_json::Value = serde_json::from_str(created.trim()).unwrap();
    let id = created["client_id"].as_str().unwrap().to_owned();
    let (cert, _, _) = pki.client(uri, false, false);
    let escaped = tessera_testkit::escaped_pem(&cert);
    let ask = |base: String, header: Option<String>| {
        let id = id.clone();
        async move {
            let mut request = reqwest::Client::new()
                .post(format!("{base}/connect/token"))
                .form(&[
                    ("grant_type", "client_credentials"),
                    ("scope", "news-api"),
                    ("client_id", &id),
                ]);
            if let Some(value) = header {
                request = request.header("x-client-cert", value);
            }
            let answer = request.send().await.unwrap();
            (
                answer.status().as_u16(),
                answer.json::<serde_json::Value>().await.unwrap(),
            )
        }
    };
    let proxy_args = |proxy: &'static str| {
        vec![
            "--client-ca",
            "ca.pem",
            "--client-cert-header",
            "X-Client-Cert",
            "--trusted-proxy",
            proxy,
        ]
    };
    let behind = serve(d, &proxy_args("127.0.0.1"));
    let (status, body) = ask(behind.base.clone(), Some(escaped.clone())).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(claims(&body)["cnf"]["x5t#S256"], thumbprint(&cert));
    let (status, _) = ask(behind.base.clone(), None).await;
    assert_eq!(status, 401);
    drop(behind);
    // The same header from an address that is not a trusted proxy is ignored.
    let exposed = serve(d, &proxy_args("10.9.9.9"));
    let (status, body) = ask(exposed.base.clone(), Some(escaped)).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (401, Some("invalid_client"))
    );
    // Without TLS and without a proxy header there is no way for a certificate to arrive.
    let err = super::fails(
        d,
        &["serve", "--listen", "127.0.0.1:0", "--client-ca", "ca.pem"],
    );
    assert!(err.contains("--client-ca needs TLS"), "{err}");
}

/// HTTPS, the client CA and the plain health listener read from `TESSERA_TLS_CERT`,
/// `TESSERA_TLS_KEY`, `TESSERA_CLIENT_CA` and `TESSERA_LISTEN_HTTP`.
#[tokio::test]
async fn tls_settings_are_read_from_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let pki = Pki::new("Acme Clients CA");
    let ca = d.join("clients-ca.pem");
    std::fs::write(&ca, pki.ca.pem()).unwrap();
    let server_pair = certificate();
    let (cert_path, key_path) = write_pair(d, &server_pair);
    ok(d, &["plan", "set", "pro", "--scopes", "news-api"]);
    let uri = "spiffe://example.org/ns/prod/sa/billing";
    let created = ok(
        d,
        &[
            "client",
            "create",
            "--plan",
            "pro",
            "--auth-method",
            "tls_client_auth",
            "--tls-san-uri",
            uri,
            "--json",
        ],
    );
    let created: serde_json::Value = serde_json::from_str(created.trim()).unwrap();
    let id = created["client_id"].as_str().unwrap().to_owned();
    let server = spawn(
        d,
        &[
            ("TESSERA_TLS_CERT", cert_path.to_str().unwrap()),
            ("TESSERA_TLS_KEY", key_path.to_str().unwrap()),
            ("TESSERA_CLIENT_CA", ca.to_str().unwrap()),
            ("TESSERA_LISTEN_HTTP", super::ANY_PORT),
        ],
        &["serve", "--listen", "127.0.0.1:0"],
    );
    let health = super::printed_address(&server, "health").await;
    let base = server.base.as_str();
    assert!(base.starts_with("https://"), "{base}");

    // The certificate served is the one named, and a client certificate signed by the CA
    // named authenticates its client.
    let (cert, key, _) = pki.client(uri, false, false);
    let (status, body) = mtls_token(&presenting(&server_pair.0, (&cert, &key)), base, &id).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(claims(&body)["cnf"]["x5t#S256"], thumbprint(&cert));

    // Health checks in plain HTTP on the address named, and nothing else.
    let ready = reqwest::get(format!("http://{health}/readyz"))
        .await
        .unwrap();
    assert_eq!(ready.status(), 200);
    let token = reqwest::Client::new()
        .post(format!("http://{health}/connect/token"))
        .send()
        .await
        .unwrap();
    assert_eq!(token.status(), 404);
}

/// `serve --admin-listen`: the admin API, the console and /openapi.json answer on that
/// address alone, over the same TLS (the same certificate) as --listen; the token endpoint
/// and the rest of OAuth on --listen alone. The same address twice is refused at start.
#[tokio::test]
async fn the_admin_listener_serves_the_management_surface_alone_over_the_same_tls() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(d, &["plan", "set", "pro", "--scopes", "news-api"]);
    ok(d, &["plan", "set", "admin", "--scopes", "tessera-admin"]);
    let (id, secret) = create_client(d, "pro");
    let (admin_id, admin_secret) = create_client(d, "admin");
    let pair = certificate();
    let (cert_path, key_path) = write_pair(d, &pair);
    let server = start_tls(
        d,
        &cert_path,
        &key_path,
        &["--admin-listen", super::ANY_PORT],
    );
    let admin_addr = super::printed_address(&server, "admin").await;
    let (public, admin) = (server.base.as_str(), format!("https://{admin_addr}"));
    let http = trusting(&pair.0);
    let get = |url: String| {
        let http = http.clone();
        async move { http.get(url).send().await.unwrap().status().as_u16() }
    };

    assert_eq!(token_status(&http, public, &id, &secret).await, Some(200));
    assert_eq!(token_status(&http, &admin, &id, &secret).await, Some(404));
    for path in ["/openapi.json", "/console/sign-in"] {
        assert_eq!(get(format!("{admin}{path}")).await, 200, "{path}");
        assert_eq!(get(format!("{public}{path}")).await, 404, "{path}");
    }
    assert_eq!(get(format!("{public}/.well-known/jwks.json")).await, 200);
    assert_eq!(get(format!("{admin}/.well-known/jwks.json")).await, 404);

    // An admin token from --listen works at the admin API on its listener.
    let answer: serde_json::Value = http
        .post(format!("{public}/connect/token"))
        .basic_auth(&admin_id, Some(&admin_secret))
        .form(&[
            ("grant_type", "client_credentials"),
            ("scope", "tessera-admin"),
        ])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let token = answer["access_token"].as_str().unwrap();
    let plans = http
        .get(format!("{admin}/admin/v1/plans"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    assert_eq!(plans.status(), 200);
    let plans: serde_json::Value = plans.json().await.unwrap();
    assert_eq!(plans["plans"].as_array().unwrap().len(), 2, "{plans}");
    let elsewhere = http
        .get(format!("{public}/admin/v1/plans"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    assert_eq!(elsewhere.status(), 404);

    let port = public.rsplit(':').next().unwrap();
    let same = format!("127.0.0.1:{port}");
    let err = super::fails(d, &["serve", "--listen", &same, "--admin-listen", &same]);
    assert!(err.contains("admin-listen"), "{err}");
}

/// One HTTPS request to `port` over a connection made with `config` to the name
/// `localhost`: the TLS version and handshake kind it got, and whether `/healthz` answered
/// 200. The answer is read to its end, so that TLS 1.3 tickets sent after the handshake
/// reach the client's session store.
async fn healthz_over(
    config: &std::sync::Arc<rustls::ClientConfig>,
    port: u16,
) -> (
    Option<rustls::ProtocolVersion>,
    Option<rustls::HandshakeKind>,
    bool,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let mut tls = tokio_rustls::TlsConnector::from(config.clone())
        .connect(name, tcp)
        .await
        .unwrap();
    tls.write_all(b"GET /healthz HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    // A peer may close without close_notify; what was read is enough.
    let _ = tls.read_to_end(&mut answer).await;
    let (_, connection) = tls.get_ref();
    (
        connection.protocol_version(),
        connection.handshake_kind(),
        answer.starts_with(b"HTTP/1.1 200"),
    )
}

/// "TLS 1.3 and 1.2" and "session resumption by tickets" (docs/https.md): a client limited
/// to either version is served, and its second connection resumes the first one's session.
#[tokio::test]
async fn tls_1_2_and_1_3_are_served_and_sessions_resume() {
    use rustls::{HandshakeKind, ProtocolVersion};
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let pair = certificate();
    let (cert_path, key_path) = write_pair(d, &pair);
    let server = start_tls(d, &cert_path, &key_path, &[]);
    let port: u16 = server.base.rsplit(':').next().unwrap().parse().unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(rustls_pem_der(&pair.0).into()).unwrap();
    for (version, expected) in [
        (&rustls::version::TLS12, ProtocolVersion::TLSv1_2),
        (&rustls::version::TLS13, ProtocolVersion::TLSv1_3),
    ] {
        let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let config = std::sync::Arc::new(
            rustls::ClientConfig::builder_with_provider(provider)
                .with_protocol_versions(&[version])
                .unwrap()
                .with_root_certificates(roots.clone())
                .with_no_client_auth(),
        );
        let first = healthz_over(&config, port).await;
        assert_eq!(first, (Some(expected), Some(HandshakeKind::Full), true));
        let second = healthz_over(&config, port).await;
        assert_eq!(
            second,
            (Some(expected), Some(HandshakeKind::Resumed), true),
            "{expected:?}: the second connection resumes"
        );
    }
}

/// `--tls-ticket-key-file` (docs/https.md): two instances given the same file resume each
/// other's sessions, with TLS 1.2 and 1.3. The second instance has never seen the session,
/// so only the ticket can resume it; an instance with keys of its own (no file) cannot.
#[tokio::test]
async fn instances_sharing_a_ticket_key_file_resume_each_others_sessions() {
    use rustls::HandshakeKind::{Full, Resumed};
    let pair = certificate();
    let dirs = [(); 3].map(|()| tempfile::tempdir().unwrap());
    let keys = dirs[0].path().join("tickets.keys");
    std::fs::write(
        &keys,
        "# openssl rand -hex 32\n5f0e3c8a1b2d4e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7\n",
    )
    .unwrap();
    let keys = keys.to_str().unwrap();
    let start = |dir: &tempfile::TempDir, extra: &[&str]| {
        let (cert_path, key_path) = write_pair(dir.path(), &pair);
        let server = start_tls(dir.path(), &cert_path, &key_path, extra);
        let port: u16 = server.base.rsplit(':').next().unwrap().parse().unwrap();
        (server, port)
    };
    let (_a, a) = start(&dirs[0], &["--tls-ticket-key-file", keys]);
    let (_b, b) = start(&dirs[1], &["--tls-ticket-key-file", keys]);
    let (_own, own) = start(&dirs[2], &[]);
    let mut roots = rustls::RootCertStore::empty();
    roots.add(rustls_pem_der(&pair.0).into()).unwrap();
    for version in [&rustls::version::TLS12, &rustls::version::TLS13] {
        let client = || {
            let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
            std::sync::Arc::new(
                rustls::ClientConfig::builder_with_provider(provider)
                    .with_protocol_versions(&[version])
                    .unwrap()
                    .with_root_certificates(roots.clone())
                    .with_no_client_auth(),
            )
        };
        let kind = |(_, kind, ok): (_, Option<rustls::HandshakeKind>, bool)| {
            assert!(ok);
            kind.unwrap()
        };
        let shared = client();
        assert_eq!(kind(healthz_over(&shared, a).await), Full, "{version:?}");
        assert_eq!(kind(healthz_over(&shared, b).await), Resumed, "{version:?}");
        assert_eq!(kind(healthz_over(&shared, a).await), Resumed, "{version:?}");
        let alone = client();
        assert_eq!(kind(healthz_over(&alone, a).await), Full, "{version:?}");
        assert_eq!(kind(healthz_over(&alone, own).await), Full, "{version:?}");
    }
    // A file without a key stops the start, naming the file.
    std::fs::write(dirs[2].path().join("empty.keys"), "\n").unwrap();
    let empty = dirs[2].path().join("empty.keys");
    let (cert_path, key_path) = write_pair(dirs[2].path(), &pair);
    let err = super::refused_start(
        dirs[2].path(),
        &[],
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--tls-cert",
            cert_path.to_str().unwrap(),
            "--tls-key",
            key_path.to_str().unwrap(),
            "--tls-ticket-key-file",
            empty.to_str().unwrap(),
        ],
    )
    .await;
    assert!(err.contains("empty.keys: no ticket key in it"), "{err}");
}

/// A client certificate signed by `pki` with these SANs, subject CN=billing, O=Acme: PEM of
/// certificate and key.
fn client_with_sans(pki: &Pki, sans: Vec<rcgen::SanType>) -> (String, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "billing");
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, "Acme");
    params.subject_alt_names = sans;
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let cert = params.signed_by(&key, &pki.ca, &pki.ca_key).unwrap();
    (cert.pem(), key.serialize_pem())
}

/// `client create --tls-san-dns NAME` (RFC 8705 section 2.1.2): a certificate from the CA
/// with that DNS name among its SANs gets a bound token, whatever the case of the name and
/// whichever place it holds; one with only other DNS names, or the name as a URI SAN, or
/// the name as its CN, is refused.
#[tokio::test]
async fn a_client_is_matched_by_a_dns_name_of_its_certificate() {
    use rcgen::SanType;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let pki = Pki::new("Acme Clients CA");
    std::fs::write(d.join("clients-ca.pem"), pki.ca.pem()).unwrap();
    let server_pair = certificate();
    let (cert_path, key_path) = write_pair(d, &server_pair);
    ok(d, &["plan", "set", "pro", "--scopes", "news-api"]);
    let created = ok(
        d,
        &[
            "client",
            "create",
            "--plan",
            "pro",
            "--auth-method",
            "tls_client_auth",
            "--tls-san-dns",
            "billing.acme.example",
            "--json",
        ],
    );
    let created: serde_json::Value = serde_json::from_str(created.trim()).unwrap();
    assert!(created.get("client_secret").is_none(), "{created}");
    assert_eq!(created["tls_client_auth_san_dns"], "billing.acme.example");
    let id = created["client_id"].as_str().unwrap().to_owned();
    let ca = d.join("clients-ca.pem");
    let server = start_tls(
        d,
        &cert_path,
        &key_path,
        &["--client-ca", ca.to_str().unwrap()],
    );
    let base = server.base.as_str();
    let dns = |name: &str| SanType::DnsName(name.try_into().unwrap());

    for (what, sans) in [
        ("the name alone", vec![dns("billing.acme.example")]),
        (
            "the name second",
            vec![dns("billing-1.acme.example"), dns("billing.acme.example")],
        ),
        ("in capitals", vec![dns("BILLING.Acme.Example")]),
    ] {
        let (cert, key) = client_with_sans(&pki, sans);
        let (status, body) =
            mtls_token(&presenting(&server_pair.0, (&cert, &key)), base, &id).await;
        assert_eq!(status, 200, "{what}: {body}");
        assert_eq!(
            claims(&body)["cnf"]["x5t#S256"],
            thumbprint(&cert),
            "{what}"
        );
    }
    for (what, sans) in [
        ("another name", vec![dns("billing.acme.example.evil")]),
        ("a subdomain", vec![dns("x.billing.acme.example")]),
        (
            "the name as a URI",
            vec![SanType::URI(
                "dns://billing.acme.example".try_into().unwrap(),
            )],
        ),
        ("no SAN", vec![]),
    ] {
        let (cert, key) = client_with_sans(&pki, sans);
        let (status, body) =
            mtls_token(&presenting(&server_pair.0, (&cert, &key)), base, &id).await;
        assert_eq!(
            (status, body["error"].as_str()),
            (401, Some("invalid_client")),
            "{what}: {body}"
        );
    }
}
