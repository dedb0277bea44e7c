//! HTTP Basic client credentials (RFC 7617, with the form encoding of RFC 6749 section 2.3.1).
//! Each input is read twice: as the whole header value, and as the decoded `id:secret` behind
//! `Basic `, so the fuzzer reaches the form decoding without having to learn base64.
#![no_main]

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use libfuzzer_sys::fuzz_target;
use tessera_proto::BasicCredentials;

fn check(value: &str) {
    if let Ok(creds) = BasicCredentials::from_header(value) {
        // What was read renders to a header that reads the same.
        let again = BasicCredentials::from_header(&creds.to_header());
        assert_eq!(again.as_ref(), Ok(&creds));
    }
}

fuzz_target!(|data: &[u8]| {
    if let Ok(value) = std::str::from_utf8(data) {
        check(value);
    }
    check(&format!("Basic {}", STANDARD.encode(data)));
});
