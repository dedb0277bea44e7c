//! Fetching documents whose URL someone else registered (a `private_key_jwt` client's
//! `jwks_uri`), without letting that URL turn Tessera into a scanner of its own network
//! (server-side request forgery).
//!
//! Every fetch: `https` only (plain `http` only where private addresses are allowed, for
//! tests and closed networks); the host resolved here and every address checked to be a
//! public one unless the operator allows private ones (`--allow-private-jwks-uri`); the
//! connection pinned to the checked address, so a second DNS answer cannot swap it; 2 s to
//! connect, 5 s in all; no redirects; at most 64 KiB of body; only a 200 answer is read.

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
#[derive(Debug)]
pub(crate) struct Fetcher {
    allow_private: bool,
}

impl Fetcher {
    pub(crate) fn new(allow_private: bool) -> Self {
        Self { allow_private }
    }

    /// The body of `GET url`.
    pub(crate) async fn get(&self, url: &str) -> Result<Vec<u8>, FetchError> {
        let parsed = reqwest::Url::parse(url).map_err(|_| FetchError::Url)?;
        match parsed.scheme() {
            "https" => {}
            "http" if self.allow_private => {}
            _ => return Err(FetchError::Url),
        }
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
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(TIMEOUT)
            .resolve(bare, address)
            .user_agent(concat!("tessera/", env!("CARGO_PKG_VERSION")))
            .build()?;
        let mut response = client.get(parsed).send().await?;
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
        ] {
            assert!(!is_public(private.parse().unwrap()), "{private}");
        }
        for public in [
            "93.184.216.34",
            "8.8.8.8",
            "2606:2800:220:1::1",
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
}
