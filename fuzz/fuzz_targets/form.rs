//! The strict `application/x-www-form-urlencoded` decoder the token, introspection and
//! revocation endpoints read bodies with (RFC 6749 Appendix B), and the token request read
//! from its pairs (RFC 6749 section 4.4.2).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tessera_proto::{form, TokenRequest};

fuzz_target!(|data: &[u8]| {
    // The server refuses a body that is not UTF-8 before decoding it.
    let Ok(body) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(pairs) = form::parse(body) {
        // What was decoded encodes back to a body that decodes to the same pairs.
        let encoded = pairs
            .iter()
            .map(|(n, v)| {
                format!(
                    "{}={}",
                    form::encode_component(n),
                    form::encode_component(v)
                )
            })
            .collect::<Vec<_>>()
            .join("&");
        assert_eq!(form::parse(&encoded).as_ref(), Ok(&pairs));
        let _ = TokenRequest::from_form(&pairs);
    }
    // Any text survives encoding and decoding.
    assert_eq!(
        form::decode_component(&form::encode_component(body)).as_deref(),
        Ok(body)
    );
});
