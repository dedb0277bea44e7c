//! The connection layer over real TLS: `Strict-Transport-Security` on every HTTPS answer
//! and never over plain HTTP.

use std::path::PathBuf;
use std::sync::Arc;

use tessera_server::tls::{Tls, TlsFiles};
use tessera_testkit::{spawn_app, spawn_with, Setup, TestApp};

/// A server over HTTPS (HTTP/2 or HTTP/1.1 by ALPN) with a self-signed certificate for
/// 127.0.0.1, and what a client needs to trust it.
struct TlsApp {
    app: TestApp,
    /// `https://127.0.0.1:PORT`.
    base: String,
    /// An HTTP/1.1 client trusting the certificate alone.
    http: reqwest::Client,
    /// The certificate, PEM, for curl's `--cacert`.
    cert_path: PathBuf,
    _dir: tempfile::TempDir,
}

async fn tls_app(configure: impl FnOnce(&mut Setup)) -> TlsApp {
    let dir = tempfile::tempdir().unwrap();
    let generated = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
    let (cert_path, key_path) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert_path, generated.cert.pem()).unwrap();
    std::fs::write(&key_path, generated.key_pair.serialize_pem()).unwrap();
    let tls = Tls::load(TlsFiles {
        cert: cert_path.clone(),
        key: key_path,
        client_ca: None,
    })
    .unwrap();
    let app = spawn_with(|setup| {
        setup.config.tls = Some(Arc::new(tls));
        configure(setup);
    })
    .await;
    let http = reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(
            reqwest::Certificate::from_pem(generated.cert.pem().as_bytes()).unwrap(),
        )
        .build()
        .unwrap();
    TlsApp {
        base: format!("https://{}", app.addr),
        app,
        http,
        cert_path,
        _dir: dir,
    }
}

/// The `Strict-Transport-Security` values of an answer.
fn hsts(response: &reqwest::Response) -> Vec<String> {
    response
        .headers()
        .get_all("strict-transport-security")
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .collect()
}

/// Every answer over HTTPS carries HSTS (RFC 6797 section 6.1): the token endpoint (a
/// token and an error), the console, metadata, health, a 404; over HTTP/1.1 and HTTP/2.
#[tokio::test]
async fn https_answers_carry_strict_transport_security() {
    let tls = tls_app(|_| {}).await;
    let (id, secret) = tls.app.client().await;
    let answers = [
        tls.http
            .post(format!("{}/connect/token", tls.base))
            .header("authorization", tessera_testkit::basic(&id, &secret))
            .form(&[("grant_type", "client_credentials")])
            .send(),
        tls.http.get(format!("{}/console/", tls.base)).send(),
        tls.http.get(format!("{}/console/sign-in", tls.base)).send(),
        tls.http
            .post(format!("{}/connect/token", tls.base))
            .form(&[("grant_type", "client_credentials")])
            .send(),
        tls.http
            .get(format!(
                "{}/.well-known/oauth-authorization-server",
                tls.base
            ))
            .send(),
        tls.http.get(format!("{}/healthz", tls.base)).send(),
        tls.http.get(format!("{}/no-such-page", tls.base)).send(),
    ];
    for answer in answers {
        let answer = answer.await.unwrap();
        assert_eq!(hsts(&answer), ["max-age=31536000"], "{}", answer.url());
    }

    // curl over HTTP/2 (ALPN h2): the same header.
    let (cert, url) = (tls.cert_path.clone(), format!("{}/console/", tls.base));
    // Off the runtime's thread: the server answers on it.
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("curl")
            .args(["-s", "-o", "/dev/null", "-D", "-", "--http2", "--cacert"])
            .arg(cert)
            .arg(url)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let head = String::from_utf8_lossy(&out.stdout).to_lowercase();
    assert!(head.starts_with("http/2 "), "{head}");
    assert!(
        head.contains("strict-transport-security: max-age=31536000\r\n"),
        "{head}"
    );
}

/// Never over plain HTTP (RFC 6797 section 7.2).
#[tokio::test]
async fn plain_http_answers_carry_no_strict_transport_security() {
    let app = spawn_app().await;
    for path in ["/console/", "/connect/token", "/healthz"] {
        let answer = app.http.get(app.url(path)).send().await.unwrap();
        assert!(hsts(&answer).is_empty(), "{path}");
    }
}
