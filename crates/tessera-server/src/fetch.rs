//! Fetching documents whose URL someone else registered (a `private_key_jwt` client's
//! `jwks_uri`), without letting that URL turn Tessera into a scanner of its own network
//! (server-side request forgery).
//!
//! Every fetch: `https` only (plain `http` only where private addresses are allowed, and
//! then only to a private or loopback address, for tests and closed networks: keys read in
//! cleartext over the internet could be replaced on the way); the host resolved here and
//! every address checked to be a public one unless the operator allows private ones
//! (`--allow-private-jwks-uri`); the connection pinned to the checked address, so a second
//! DNS answer cannot swap it; no proxy, whatever `HTTPS_PROXY` says, since a proxy would
//! resolve the host again and undo the pinning; 2 s to connect, 5 s in all; no redirects;
//! at most 64 KiB of body; only a 200 answer is read.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

/// The most bytes read from one answer.
const MAX_BODY: usize = 64 * 1024;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
const TIMEOUT: Duration = Duration::from_secs(5);

/// Why a fetch was refused or failed. No part of the answer is repeated.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FetchError {
    #[error("not an https URL with a host")]
    Url,
    #[error("the host resolves to a private, loopback or otherwise non-public address")]
    PrivateAddress,
    #[error("plain http is allowed only to private or loopback addresses")]
    CleartextToPublic,
    #[error("the host does not resolve")]
    Resolve,
    #[error("the answer is not 200 (got {0})")]
    Status(u16),
    #[error("the answer is longer than 64 KiB")]
    TooLarge,
    #[error("the request failed: {0}")]
    Http(#[from] reqwest::Error),
}

/// Fetches under the rules above.
#[derive(Debug, Clone)]
pub(crate) struct Fetcher {
    allow_private: bool,
}

impl Fetcher {
    pub(crate) fn new(allow_private: bool) -> Self {
        Self { allow_private }
    }

    /// The body of `GET url`; a span of the request it serves, if traced, which the fetch
    /// sends on as `traceparent` (`telemetry.rs`). The span names the host, not the URL.
    pub(crate) async fn get(&self, url: &str) -> Result<Vec<u8>, FetchError> {
        use tracing::Instrument as _;
        let span = crate::telemetry::child_span!(
            "fetch",
            otel.name = "GET keys",
            otel.kind = "client",
            http.request.method = "GET",
            server.address = reqwest::Url::parse(url)
                .ok()
                .and_then(|u| u.host_str().map(str::to_owned))
                .unwrap_or_default(),
            http.response.status_code = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
        );
        let fetched = self
            .send(url, |client, url| client.get(url))
            .instrument(span.clone())
            .await;
        if fetched.is_err() {
            span.record("otel.status_code", "error");
        }
        fetched
    }

    /// The body of the answer to `POST url` of `form` (`application/x-www-form-urlencoded`),
    /// with HTTP Basic credentials when given: the console's code exchange at its OpenID
    /// Connect provider (RFC 6749 section 4.1.3), under the same rules.
    pub(crate) async fn post_form(
        &self,
        url: &str,
        basic: Option<(&str, &str)>,
        form: &str,
    ) -> Result<Vec<u8>, FetchError> {
        let form = form.to_owned();
        self.send(url, move |client, url| {
            let request = client
                .post(url)
                .header(
                    reqwest::header::CONTENT_TYPE,
                    "application/x-www-form-urlencoded",
                )
                .header(reqwest::header::ACCEPT, "application/json")
                .body(form);
            match basic {
                Some((user, password)) => request.basic_auth(user, Some(password)),
                None => request,
            }
        })
        .await
    }

    /// The body of the request `build` makes for `url`, once the URL passed the rules.
    async fn send(
        &self,
        url: &str,
        build: impl FnOnce(reqwest::Client, reqwest::Url) -> reqwest::RequestBuilder,
    ) -> Result<Vec<u8>, FetchError> {
        let parsed = reqwest::Url::parse(url).map_err(|_| FetchError::Url)?;
        let cleartext = match parsed.scheme() {
            "https" => false,
            "http" if self.allow_private => true,
            _ => return Err(FetchError::Url),
        };
        let host = parsed.host_str().ok_or(FetchError::Url)?.to_owned();
        let port = parsed.port_or_known_default().ok_or(FetchError::Url)?;
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let addresses: Vec<SocketAddr> = match bare.parse::<IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, port)],
            Err(_) => tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::lookup_host((bare, port)))
                .await
                .map_err(|_| FetchError::Resolve)?
                .map_err(|_| FetchError::Resolve)?
                .collect(),
        };
        let Some(&address) = addresses.first() else {
            return Err(FetchError::Resolve);
        };
        if !self.allow_private && addresses.iter().any(|a| !is_public(a.ip())) {
            return Err(FetchError::PrivateAddress);
        }
        if cleartext && addresses.iter().any(|a| is_public(a.ip())) {
            return Err(FetchError::CleartextToPublic);
        }
        let client = reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(TIMEOUT)
            .resolve(bare, address)
            .user_agent(concat!("tessera/", env!("CARGO_PKG_VERSION")))
            .build()?;
        let mut headers = reqwest::header::HeaderMap::new();
        crate::telemetry::inject(&mut headers);
        let mut response = build(client, parsed).headers(headers).send().await?;
        tracing::Span::current().record("http.response.status_code", response.status().as_u16());
        if response.status() != reqwest::StatusCode::OK {
            return Err(FetchError::Status(response.status().as_u16()));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await? {
            if body.len() + chunk.len() > MAX_BODY {
                return Err(FetchError::TooLarge);
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }
}

/// Whether `ip` is an address on the public internet: not loopback, private (RFC 1918,
/// RFC 4193), link-local, shared (RFC 6598), unspecified, multicast, broadcast, reserved or
/// documentation space; an IPv4-mapped IPv6 address is judged as its IPv4 address.
pub(crate) fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => is_public_v4(v4),
            None => is_public_v6(v6),
        },
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    !(ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_documentation()
        || a == 0
        || (a == 100 && (64..128).contains(&b))
        || (a == 192 && b == 0)
        || a >= 240)
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    let first = ip.segments()[0];
    !(ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_multicast()
        || (first & 0xfe00) == 0xfc00
        || (first & 0xffc0) == 0xfe80
        || first == 0x2001 && ip.segments()[1] == 0x0db8
        || first == 0x0064 && ip.segments()[1] == 0xff9b)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use super::*;

    #[test]
    fn only_public_addresses_are_public() {
        for private in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "100.127.255.254",
            "192.0.0.8",
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "::1",
            "::",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "64:ff9b::a00:1",
            "2001:db8::1",
        ] {
            assert!(!is_public(private.parse().unwrap()), "{private}");
        }
        for public in [
            "93.184.216.34",
            "8.8.8.8",
            // Shared address space is 100.64.0.0/10 only.
            "100.63.255.255",
            "100.128.0.1",
            "8.64.0.1",
            // IETF protocol assignments are 192.0.0.0/24 only.
            "192.1.0.1",
            "8.0.8.8",
            "2606:2800:220:1::1",
            "2001:db9::1",
            "2606:db8::1",
            "65:ff9b::1",
            "::ffff:8.8.8.8",
        ] {
            assert!(is_public(public.parse().unwrap()), "{public}");
        }
    }

    #[tokio::test]
    async fn a_private_address_is_refused_before_any_connection() {
        let fetcher = Fetcher::new(false);
        for url in [
            "https://127.0.0.1/jwks",
            "https://[::1]:8443/jwks",
            "https://169.254.169.254/latest/meta-data",
            "https://localhost/jwks",
        ] {
            assert!(
                matches!(fetcher.get(url).await, Err(FetchError::PrivateAddress)),
                "{url}"
            );
        }
        assert!(matches!(
            fetcher.get("http://93.184.216.34/jwks").await,
            Err(FetchError::Url)
        ));
        assert!(matches!(
            fetcher.get("file:///etc/passwd").await,
            Err(FetchError::Url)
        ));
    }

    /// "Fetched with a 5 s timeout" (docs/private-key-jwt.md): a host that takes the
    /// connection and never answers is given up after 5 s, not one more. The runtime's clock
    /// is paused, so the 5 s pass at once, and any longer bound would show as a longer wait.
    #[tokio::test(start_paused = true)]
    async fn a_host_that_never_answers_is_given_up_after_5_s() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let holding = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                held.push(stream);
            }
        });
        let started = tokio::time::Instant::now();
        let fetched = Fetcher::new(true)
            .get(&format!("http://{address}/jwks"))
            .await;
        let waited = started.elapsed();
        assert!(
            matches!(&fetched, Err(FetchError::Http(e)) if e.is_timeout()),
            "{fetched:?}"
        );
        assert!(
            (Duration::from_secs(5)..Duration::from_millis(5_100)).contains(&waited),
            "{waited:?}"
        );
        holding.abort();
    }

    /// A server on loopback answering every connection with `200` and `body`, counting them.
    async fn serve(body: &'static str) -> (SocketAddr, Arc<AtomicUsize>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let hits = Arc::new(AtomicUsize::new(0));
        let counted = hits.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                let mut request = [0u8; 4096];
                let _ = stream.read(&mut request).await;
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(answer.as_bytes()).await;
            }
        });
        (address, hits)
    }

    /// An answer of up to 64 KiB is read whole; one byte more is refused.
    #[tokio::test]
    async fn answers_are_read_up_to_64_kib() {
        let fetcher = Fetcher::new(true);
        let body = |len: usize| -> &'static str { Box::leak("x".repeat(len).into_boxed_str()) };
        let (address, _) = serve(body(65_536)).await;
        let read = fetcher
            .get(&format!("http://{address}/jwks"))
            .await
            .unwrap();
        assert_eq!(read.len(), 65_536);
        let (address, _) = serve(body(65_537)).await;
        assert!(matches!(
            fetcher.get(&format!("http://{address}/jwks")).await,
            Err(FetchError::TooLarge)
        ));
    }

    #[tokio::test]
    async fn plain_http_reaches_only_private_and_loopback_addresses() {
        let fetcher = Fetcher::new(true);
        for url in [
            "http://93.184.216.34/jwks",
            "http://[2606:2800:220:1::1]/jwks",
            "http://[::ffff:8.8.8.8]/jwks",
        ] {
            assert!(
                matches!(fetcher.get(url).await, Err(FetchError::CleartextToPublic)),
                "{url}"
            );
        }
        let (address, hits) = serve("{}").await;
        assert_eq!(
            fetcher
                .get(&format!("http://{address}/jwks"))
                .await
                .unwrap(),
            b"{}"
        );
        let by_name = format!("http://localhost:{}/jwks", address.port());
        assert_eq!(fetcher.get(&by_name).await.unwrap(), b"{}");
        assert_eq!(hits.load(Ordering::SeqCst), 2);
    }

    /// Run by [`proxy_settings_are_ignored`] in a process of its own with the proxy variables
    /// set (they are read by every HTTP client of a process, so they are not set here).
    #[tokio::test]
    #[ignore = "run by proxy_settings_are_ignored"]
    async fn fetch_with_proxy_variables_set() {
        let (address, hits) = serve("{}").await;
        let body = Fetcher::new(true)
            .get(&format!("http://{address}/jwks"))
            .await
            .unwrap();
        assert_eq!(
            (body.as_slice(), hits.load(Ordering::SeqCst)),
            (&b"{}"[..], 1)
        );
    }

    #[test]
    fn proxy_settings_are_ignored() {
        // A proxy that counts the connections it is offered and answers none.
        let proxy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let proxy_url = format!("http://{}", proxy.local_addr().unwrap());
        proxy.set_nonblocking(true).unwrap();
        let mut command = std::process::Command::new(std::env::current_exe().unwrap());
        command.args([
            "fetch::tests::fetch_with_proxy_variables_set",
            "--exact",
            "--ignored",
            "--test-threads=1",
        ]);
        for name in [
            "HTTP_PROXY",
            "HTTPS_PROXY",
            "ALL_PROXY",
            "http_proxy",
            "https_proxy",
            "all_proxy",
        ] {
            command.env(name, &proxy_url);
        }
        for name in ["NO_PROXY", "no_proxy"] {
            command.env_remove(name);
        }
        let output = command.output().unwrap();
        let offered = std::iter::from_fn(|| proxy.accept().ok()).count();
        assert_eq!(offered, 0, "the fetch went through the proxy");
        let said = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success() && said.contains("1 passed"),
            "{said}"
        );
    }
}
