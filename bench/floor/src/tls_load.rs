//! The load generator of `bench/newconn.sh`: token requests over HTTPS, each on a new TCP
//! connection and TLS handshake (as machine clients that fetch a token an hour make them),
//! with or without session resumption, or all on kept-alive connections.
//!
//! ```text
//! tls_load --addr 127.0.0.1:8443 --ca cert.pem --auth-file auth.txt --mode full|resumed|keepalive
//!          [--requests 20000] [--concurrency 8] [--tls 1.3|1.2] [--scope market-data-api]
//! ```
//!
//! `--auth-file` holds Authorization values, one a line ("Basic base64(id:secret)"), used in
//! turn. `full`: rustls with resumption switched off, so that every connection makes a
//! full handshake. `resumed`: one session store shared by every connection, so that each
//! offers a ticket (TLS 1.3: RFC 8446 section 4.6.1; TLS 1.2: RFC 5077, or the session ID).
//! `keepalive`: one connection per worker, one handshake each. It prints one line:
//!
//! ```text
//! RESULT requests=.. failed=.. full=.. resumed=.. seconds=..
//! ```
//!
//! where full and resumed count the handshakes by kind, as rustls reports them. Any answer
//! other than 200 counts as failed.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, HandshakeKind};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Full,
    Resumed,
    KeepAlive,
}

struct Options {
    addr: String,
    ca: String,
    auth_file: String,
    mode: Mode,
    requests: usize,
    concurrency: usize,
    tls13: bool,
    scope: String,
}

fn options() -> Options {
    let mut args = std::env::args().skip(1);
    let mut options = Options {
        addr: String::new(),
        ca: String::new(),
        auth_file: String::new(),
        mode: Mode::Full,
        requests: 20_000,
        concurrency: 8,
        tls13: true,
        scope: "market-data-api".into(),
    };
    while let Some(flag) = args.next() {
        let value = args
            .next()
            .unwrap_or_else(|| usage(&format!("{flag} needs a value")));
        match flag.as_str() {
            "--addr" => options.addr = value,
            "--ca" => options.ca = value,
            "--auth-file" => options.auth_file = value,
            "--mode" => {
                options.mode = match value.as_str() {
                    "full" => Mode::Full,
                    "resumed" => Mode::Resumed,
                    "keepalive" => Mode::KeepAlive,
                    _ => usage("--mode is full, resumed or keepalive"),
                }
            }
            "--requests" => options.requests = value.parse().unwrap_or_else(|_| usage(&flag)),
            "--concurrency" => options.concurrency = value.parse().unwrap_or_else(|_| usage(&flag)),
            "--tls" => {
                options.tls13 = match value.as_str() {
                    "1.3" => true,
                    "1.2" => false,
                    _ => usage("--tls is 1.3 or 1.2"),
                }
            }
            "--scope" => options.scope = value,
            _ => usage(&format!("unknown {flag}")),
        }
    }
    if options.addr.is_empty() || options.ca.is_empty() || options.auth_file.is_empty() {
        usage("--addr, --ca and --auth-file are required");
    }
    options
}

fn usage(why: &str) -> ! {
    eprintln!(
        "tls_load: {why}\nusage: tls_load --addr IP:PORT --ca PEM --auth-file FILE \
         --mode full|resumed|keepalive [--requests N] [--concurrency N] [--tls 1.3|1.2] \
         [--scope S]"
    );
    std::process::exit(64)
}

struct Shared {
    connector: TlsConnector,
    addr: String,
    requests: Vec<Vec<u8>>,
    next: AtomicUsize,
    total: usize,
    failed: AtomicU64,
    /// The first failure, said on stderr at the end.
    first_failure: std::sync::Mutex<Option<String>>,
    full: AtomicU64,
    resumed: AtomicU64,
}

impl Shared {
    /// The next request to send, until `total` were taken.
    fn take(&self) -> Option<&[u8]> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        (n < self.total).then(|| &self.requests[n % self.requests.len()][..])
    }

    async fn connect(&self) -> std::io::Result<TlsStream<TcpStream>> {
        let tcp = TcpStream::connect(&self.addr).await?;
        tcp.set_nodelay(true)?;
        let name = ServerName::try_from("localhost").expect("a name");
        let tls = self.connector.connect(name, tcp).await?;
        match tls.get_ref().1.handshake_kind() {
            Some(HandshakeKind::Resumed) => self.resumed.fetch_add(1, Ordering::Relaxed),
            _ => self.full.fetch_add(1, Ordering::Relaxed),
        };
        Ok(tls)
    }
}

/// Sends `request` and reads one answer; whether it was a 200.
async fn exchange(
    tls: &mut TlsStream<TcpStream>,
    request: &[u8],
    buffer: &mut Vec<u8>,
) -> std::io::Result<bool> {
    tls.write_all(request).await?;
    buffer.clear();
    let mut chunk = [0; 4096];
    let (head, length) = loop {
        let read = tls.read(&mut chunk).await?;
        if read == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buffer.extend_from_slice(&chunk[..read]);
        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = std::str::from_utf8(&buffer[..end])
                .unwrap_or("")
                .to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            break (end + 4, length);
        }
    };
    while buffer.len() < head + length {
        let read = tls.read(&mut chunk).await?;
        if read == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buffer.extend_from_slice(&chunk[..read]);
    }
    Ok(buffer.starts_with(b"HTTP/1.1 200"))
}

async fn worker(shared: Arc<Shared>, mode: Mode) {
    let mut buffer = Vec::with_capacity(4096);
    let mut kept: Option<TlsStream<TcpStream>> = None;
    while let Some(request) = shared.take() {
        let answered = async {
            let mut tls = match kept.take() {
                Some(tls) => tls,
                None => shared.connect().await?,
            };
            let ok = exchange(&mut tls, request, &mut buffer).await?;
            if mode == Mode::KeepAlive {
                kept = Some(tls);
            } else {
                // The server closes after its answer (Connection: close); say goodbye.
                let _ = tls.shutdown().await;
            }
            std::io::Result::Ok(ok)
        }
        .await;
        if !matches!(answered, Ok(true)) {
            shared.failed.fetch_add(1, Ordering::Relaxed);
            let why = match answered {
                Ok(_) => String::from_utf8_lossy(&buffer).into_owned(),
                Err(error) => error.to_string(),
            };
            let mut first = shared.first_failure.lock().expect("not poisoned");
            first.get_or_insert(why);
        }
    }
}

fn main() {
    let options = options();
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(&options.ca).expect("--ca: a PEM file") {
        roots.add(cert.expect("a certificate")).expect("a CA");
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let version = if options.tls13 {
        &rustls::version::TLS13
    } else {
        &rustls::version::TLS12
    };
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[version])
        .expect("the version")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    if options.mode == Mode::Full {
        config.resumption = rustls::client::Resumption::disabled();
    }
    let connection = if options.mode == Mode::KeepAlive {
        "keep-alive"
    } else {
        "close"
    };
    let body = format!("grant_type=client_credentials&scope={}", options.scope);
    let requests: Vec<Vec<u8>> = std::fs::read_to_string(&options.auth_file)
        .expect("--auth-file")
        .lines()
        .filter(|l| !l.is_empty())
        .map(|auth| {
            format!(
                "POST /connect/token HTTP/1.1\r\nhost: localhost\r\nauthorization: {auth}\r\n\
                 content-type: application/x-www-form-urlencoded\r\ncontent-length: {}\r\n\
                 connection: {connection}\r\n\r\n{body}",
                body.len()
            )
            .into_bytes()
        })
        .collect();
    assert!(!requests.is_empty(), "--auth-file: no lines");
    let shared = Arc::new(Shared {
        connector: TlsConnector::from(Arc::new(config)),
        addr: options.addr.clone(),
        requests,
        next: AtomicUsize::new(0),
        total: options.requests,
        failed: AtomicU64::new(0),
        first_failure: std::sync::Mutex::new(None),
        full: AtomicU64::new(0),
        resumed: AtomicU64::new(0),
    });
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let started = Instant::now();
    runtime.block_on(async {
        let workers: Vec<_> = (0..options.concurrency)
            .map(|_| tokio::spawn(worker(Arc::clone(&shared), options.mode)))
            .collect();
        for worker in workers {
            worker.await.expect("a worker");
        }
    });
    let seconds = started.elapsed().as_secs_f64();
    if let Some(why) = shared.first_failure.lock().expect("not poisoned").take() {
        eprintln!("tls_load: the first failure: {why}");
    }
    println!(
        "RESULT requests={} failed={} full={} resumed={} seconds={seconds:.3}",
        options.requests,
        shared.failed.load(Ordering::Relaxed),
        shared.full.load(Ordering::Relaxed),
        shared.resumed.load(Ordering::Relaxed),
    );
}
