//! The floor of the token benchmark (issue 17): the least a server must do to answer
//! Tessera's benchmark requests on one core, so that `bench/run.sh` can print Tessera's
//! tokens/s as a fraction of what the hardware allows.
//!
//! ```text
//! floor LISTEN CLIENT_ID CLIENT_SECRET     e.g. floor 127.0.0.1:0 tc_… tcs_…
//! ```
//!
//! It serves HTTP/1.1 keep-alive with hyper on a single-threaded tokio runtime (one core,
//! as Tessera pinned with `taskset`), and answers `POST /connect/token` as Tessera answers
//! the benchmark: HTTP Basic credentials decoded (RFC 6749 section 2.3.1) and compared with
//! the one client it was given, the form body read for `grant_type=client_credentials` and
//! `scope`, the claims Tessera signs (RFC 9068 section 2.2: `iss`, `sub`, `client_id`, one
//! `aud` per scope, `scope`, `iat`, `exp`, a 128-bit random `jti`, `app_only`, and Tessera's
//! `plan`) under the same `{"alg":"EdDSA","kid":…,"typ":"at+jwt"}` header, one Ed25519
//! signature with aws-lc-rs, and the same JSON answer with the same `Cache-Control: no-store`.
//!
//! It does nothing else: no registry, plans, rate limits, in-flight cap, connection caps,
//! timeouts, audit log, metrics, usage counts or store. A malformed request gets a bare
//! RFC 6749 section 5.2 error, any other path or method 404. The key is made at start and
//! its public JWK printed, so that a token can be checked.
//!
//! Prints `floor listening on http://ADDR` and `floor key JWK` on stdout once it listens.

use std::borrow::Cow;
use std::convert::Infallible;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::{SystemTime, UNIX_EPOCH};

use aws_lc_rs::digest;
use aws_lc_rs::signature::{Ed25519KeyPair, KeyPair};
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderMap, HeaderValue, AUTHORIZATION, CACHE_CONTROL, CONTENT_TYPE, PRAGMA};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;

/// Token lifetime, as the benchmark plan's (`tessera plan set` default).
const EXPIRES_IN: u64 = 3600;
/// The plan `bench/run.sh` and `bench/instructions.sh` put their clients on: Tessera's `plan`
/// claim (issue 27), which the floor signs too so that both tokens carry the same claims.
const PLAN: &str = "bench";
/// Tessera's body limit.
const BODY_LIMIT: usize = 8 * 1024;

/// Everything a request reads: set at start, never changed.
struct Floor {
    client_id: String,
    secret: Vec<u8>,
    /// `http://ADDR`, as Tessera's default issuer.
    issuer: String,
    key: Ed25519KeyPair,
    /// The base64url JWS header and its dot, the same for every token.
    header: String,
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [listen, client_id, secret] = args.as_slice() else {
        eprintln!("usage: floor LISTEN CLIENT_ID CLIENT_SECRET");
        std::process::exit(2);
    };
    let listen: SocketAddr = listen.parse().unwrap_or_else(|_| {
        eprintln!("not an address: {listen}");
        std::process::exit(2);
    });
    // The id goes into the claims unescaped: keep it to characters JSON takes as they are.
    if client_id.is_empty() || !client_id.bytes().all(is_scope_char) {
        eprintln!("the client id must be printable ASCII without quotes or backslashes");
        std::process::exit(2);
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(serve(listen, client_id.clone(), secret.as_bytes().to_vec()));
}

async fn serve(listen: SocketAddr, client_id: String, secret: Vec<u8>) {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .unwrap_or_else(|e| {
            eprintln!("cannot listen on {listen}: {e}");
            std::process::exit(1);
        });
    let local = listener.local_addr().expect("a bound address");
    let key = Ed25519KeyPair::generate().expect("an Ed25519 key");
    let x = URL_SAFE_NO_PAD.encode(key.public_key().as_ref());
    // RFC 7638 thumbprint as kid, as Tessera's keys have.
    let canonical = format!(r#"{{"crv":"Ed25519","kty":"OKP","x":"{x}"}}"#);
    let kid = URL_SAFE_NO_PAD.encode(digest::digest(&digest::SHA256, canonical.as_bytes()));
    let mut header =
        URL_SAFE_NO_PAD.encode(format!(r#"{{"alg":"EdDSA","kid":"{kid}","typ":"at+jwt"}}"#));
    header.push('.');
    // Lives as long as the process: every connection borrows it without counting.
    let floor: &'static Floor = Box::leak(Box::new(Floor {
        client_id,
        secret,
        issuer: format!("http://{local}"),
        key,
        header,
    }));
    println!("floor listening on http://{local}");
    println!(
        r#"floor key {{"kty":"OKP","crv":"Ed25519","alg":"EdDSA","use":"sig","kid":"{kid}","x":"{x}"}}"#
    );

    // Only where asked (bench/pgo.sh --floor): SIGTERM ends the process through `exit`, so
    // that a build instrumented for profile-guided optimization writes its profile. A
    // registered signal costs each token about 3,000 instructions here, so the floor
    // measured registers none.
    if std::env::var_os("FLOOR_EXIT_ON_SIGTERM").is_some() {
        use tokio::signal::unix::{signal, SignalKind};
        let mut terminate = signal(SignalKind::terminate()).expect("a SIGTERM handler");
        tokio::spawn(async move {
            terminate.recv().await;
            std::process::exit(0);
        });
    }
    let mut http1 = hyper::server::conn::http1::Builder::new();
    http1.keep_alive(true);
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(error) => {
                // Out of file descriptors and the like: back off instead of spinning.
                eprintln!("accept failed: {error}");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let connection = http1.serve_connection(
            TokioIo::new(stream),
            hyper::service::service_fn(move |request| handle(floor, request)),
        );
        tokio::spawn(async move {
            let _ = connection.await;
        });
    }
}

async fn handle(
    floor: &'static Floor,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    if request.method() != Method::POST || request.uri().path() != "/connect/token" {
        return Ok(answer(StatusCode::NOT_FOUND, None, String::new()));
    }
    let (parts, body) = request.into_parts();
    let Ok(body) = Limited::new(body, BODY_LIMIT).collect().await else {
        return Ok(error(StatusCode::BAD_REQUEST, "invalid_request"));
    };
    Ok(floor.token(&parts.headers, &body.to_bytes()))
}

impl Floor {
    /// The client credentials grant (RFC 6749 section 4.4.2) for the one client.
    fn token(&self, headers: &HeaderMap, body: &[u8]) -> Response<Full<Bytes>> {
        let form = headers
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .is_some_and(|v| {
                v.trim()
                    .eq_ignore_ascii_case("application/x-www-form-urlencoded")
            });
        if !form {
            return error(StatusCode::BAD_REQUEST, "invalid_request");
        }
        match headers
            .get(AUTHORIZATION)
            .map(|v| self.authenticate(v.as_bytes()))
        {
            Some(Ok(true)) => {}
            Some(Err(())) => return error(StatusCode::BAD_REQUEST, "invalid_request"),
            None | Some(Ok(false)) => {
                let mut response = error(StatusCode::UNAUTHORIZED, "invalid_client");
                response.headers_mut().insert(
                    "www-authenticate",
                    HeaderValue::from_static(r#"Basic realm="floor""#),
                );
                return response;
            }
        }

        let (mut grant_type, mut scope) = (None, None);
        for pair in body.split(|&b| b == b'&').filter(|p| !p.is_empty()) {
            let (name, value) = match pair.iter().position(|&b| b == b'=') {
                Some(at) => (&pair[..at], &pair[at + 1..]),
                None => (pair, &b""[..]),
            };
            let slot = match name {
                b"grant_type" => &mut grant_type,
                b"scope" => &mut scope,
                _ => continue,
            };
            let Some(value) = form_decode(value) else {
                return error(StatusCode::BAD_REQUEST, "invalid_request");
            };
            // RFC 6749 section 3.2: a parameter sent twice is an error.
            if slot.replace(value).is_some() {
                return error(StatusCode::BAD_REQUEST, "invalid_request");
            }
        }
        match grant_type.as_deref() {
            Some(b"client_credentials") => {}
            Some(_) => return error(StatusCode::BAD_REQUEST, "unsupported_grant_type"),
            None => return error(StatusCode::BAD_REQUEST, "invalid_request"),
        }
        // RFC 6749 section 3.3: scope-tokens separated by single spaces; so nothing in it
        // needs escaping in JSON.
        let scope = match scope.as_deref().map(std::str::from_utf8) {
            Some(Ok(scope))
                if !scope.is_empty()
                    && scope
                        .split(' ')
                        .all(|s| !s.is_empty() && s.bytes().all(is_scope_char)) =>
            {
                scope
            }
            _ => return error(StatusCode::BAD_REQUEST, "invalid_scope"),
        };

        let body = format!(
            r#"{{"access_token":"{}","token_type":"Bearer","expires_in":{EXPIRES_IN},"scope":"{scope}"}}"#,
            self.sign(scope)
        );
        answer(StatusCode::OK, Some("application/json"), body)
    }

    /// Whether `Authorization: Basic …` (RFC 7617) names the one client; `Err` when it is
    /// malformed. The id and secret are form-urlencoded inside (RFC 6749 section 2.3.1).
    fn authenticate(&self, value: &[u8]) -> Result<bool, ()> {
        if value.len() < 6 || !value[..6].eq_ignore_ascii_case(b"basic ") {
            return Ok(false);
        }
        let decoded = STANDARD.decode(&value[6..]).map_err(|_| ())?;
        let at = decoded.iter().position(|&b| b == b':').ok_or(())?;
        let id = form_decode(&decoded[..at]).ok_or(())?;
        let secret = form_decode(&decoded[at + 1..]).ok_or(())?;
        let secret_ok =
            aws_lc_rs::constant_time::verify_slices_are_equal(&secret, &self.secret).is_ok();
        Ok(secret_ok & (*id == *self.client_id.as_bytes()))
    }

    /// The access token: Tessera's claims for this client and `scope`, signed.
    fn sign(&self, scope: &str) -> String {
        let iat = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let mut jti = [0u8; 16];
        aws_lc_rs::rand::fill(&mut jti).expect("system random source");
        let mut claims = String::with_capacity(256);
        let (issuer, id) = (&self.issuer, &self.client_id);
        let _ = write!(
            claims,
            r#"{{"iss":"{issuer}","sub":"{id}","client_id":"{id}","aud":["#
        );
        for (i, api) in scope.split(' ').enumerate() {
            let comma = if i == 0 { "" } else { "," };
            let _ = write!(claims, r#"{comma}"{api}""#);
        }
        let _ = write!(
            claims,
            r#"],"scope":"{scope}","iat":{iat},"exp":{},"jti":"{}","app_only":true,"plan":"{PLAN}"}}"#,
            iat + EXPIRES_IN,
            URL_SAFE_NO_PAD.encode(jti)
        );
        let mut jwt = String::with_capacity(self.header.len() + claims.len() * 4 / 3 + 90);
        jwt.push_str(&self.header);
        URL_SAFE_NO_PAD.encode_string(claims, &mut jwt);
        let signature = self.key.sign(jwt.as_bytes());
        jwt.push('.');
        URL_SAFE_NO_PAD.encode_string(signature.as_ref(), &mut jwt);
        jwt
    }
}

/// A scope-token character (RFC 6749 section 3.3): `%x21 / %x23-5B / %x5D-7E`.
fn is_scope_char(b: u8) -> bool {
    matches!(b, 0x21 | 0x23..=0x5B | 0x5D..=0x7E)
}

/// `application/x-www-form-urlencoded` decoding of one name or value: `+` is a space and
/// `%XX` a byte; `None` for a malformed escape. Borrows when there is nothing to decode.
fn form_decode(raw: &[u8]) -> Option<Cow<'_, [u8]>> {
    if !raw.iter().any(|&b| b == b'%' || b == b'+') {
        return Some(Cow::Borrowed(raw));
    }
    let mut out = Vec::with_capacity(raw.len());
    let mut bytes = raw.iter();
    while let Some(&b) = bytes.next() {
        out.push(match b {
            b'+' => b' ',
            b'%' => {
                let hex = |b: Option<&u8>| (*b? as char).to_digit(16);
                let high = hex(bytes.next())?;
                let low = hex(bytes.next())?;
                (high * 16 + low) as u8
            }
            b => b,
        });
    }
    Some(Cow::Owned(out))
}

/// An RFC 6749 section 5.2 error answer.
fn error(status: StatusCode, code: &str) -> Response<Full<Bytes>> {
    answer(
        status,
        Some("application/json"),
        format!(r#"{{"error":"{code}"}}"#),
    )
}

/// An answer with Tessera's token-endpoint headers: never cached (RFC 6749 section 5.1).
fn answer(
    status: StatusCode,
    content_type: Option<&'static str>,
    body: String,
) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(PRAGMA, HeaderValue::from_static("no-cache"));
    if let Some(content_type) = content_type {
        headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    }
    response
}
