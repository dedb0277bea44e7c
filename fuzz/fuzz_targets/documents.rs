//! The JSON documents a verifier fetches from the network and trusts for its keys: the
//! RFC 8414 metadata and the RFC 7517 JWK Set, read as a refresh reads them (through
//! `tessera_verify::fuzzing`, without the network); and the metadata and key set types of
//! tessera-proto, which the server writes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tessera_proto::{AuthorizationServerMetadata, JwkSet};
use tessera_verify::{fuzzing, Verifier};
use url::Url;

/// Whether `uri` is fetched over https, or over plain http only to a loopback host: judged
/// with the URL parser the HTTP client uses, independently of the verifier's own check.
fn https_or_loopback(uri: &str) -> (bool, bool) {
    let url = Url::parse(uri).expect("an accepted jwks_uri is a URL");
    let loopback = match url.host() {
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    };
    (url.scheme() == "https", url.scheme() == "http" && loopback)
}

fuzz_target!(|data: &[u8]| {
    if let Ok(usable) = fuzzing::read_jwks(data) {
        assert!(usable > 0);
    }
    for (issuer, allow_insecure_http) in [
        ("https://issuer.example", false),
        ("http://127.0.0.1:8080", false),
        ("http://issuer.example", true),
    ] {
        let Ok(jwks_uri) = fuzzing::read_metadata(data, issuer, allow_insecure_http) else {
            continue;
        };
        let (https, loopback_http) = https_or_loopback(&jwks_uri);
        match (issuer.starts_with("https://"), allow_insecure_http) {
            (true, _) => assert!(https, "an https issuer downgraded to {jwks_uri:?}"),
            (false, false) => assert!(https || loopback_http, "plain http to {jwks_uri:?}"),
            (false, true) => {}
        }
    }
    if let Ok(metadata) = serde_json::from_slice::<AuthorizationServerMetadata>(data) {
        let json = serde_json::to_vec(&metadata).unwrap();
        let again: AuthorizationServerMetadata = serde_json::from_slice(&json).unwrap();
        assert_eq!(again, metadata);
    }
    if let Ok(jwks) = serde_json::from_slice::<JwkSet>(data) {
        let json = serde_json::to_vec(&jwks).unwrap();
        let again: JwkSet = serde_json::from_slice(&json).unwrap();
        assert_eq!(again, jwks);
        let _ = Verifier::with_static_keys("https://issuer.example", "api", jwks);
    }
});
