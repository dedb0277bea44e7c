//! The one JWS compact parser (`tessera_proto::jws::parse`, RFC 7515 section 7.1 and the JOSE
//! header checks of RFC 8725), then the claims reader. Each input is read twice: as the token
//! itself, and, split at its first two newlines, as the raw header, payload and signature that
//! are base64url-encoded into a token here, so the fuzzer reaches the JSON readers without
//! having to learn base64.
#![no_main]

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use libfuzzer_sys::fuzz_target;
use tessera_proto::{jws, AccessTokenClaims, Algorithm};

const MAX_LEN: usize = 8 * 1024;

fn check(token: &str, allowed: &[Algorithm]) {
    let Ok(parsed) = jws::parse(token, MAX_LEN, allowed) else {
        return;
    };
    assert!(allowed.contains(&parsed.alg));
    assert!(jws::is_reasonable_kid(&parsed.kid));
    let signing_input = std::str::from_utf8(parsed.signing_input).unwrap();
    assert_eq!(
        token.rsplit_once('.').map(|(input, _)| input),
        Some(signing_input)
    );
    let _ = jws::decode_claims::<AccessTokenClaims>(&parsed.payload);
}

fuzz_target!(|data: &[u8]| {
    let both = [Algorithm::EdDSA, Algorithm::ES256];
    if let Ok(token) = std::str::from_utf8(data) {
        check(token, &both);
        check(token, &[Algorithm::ES256]);
    }
    let mut parts = data.splitn(3, |&b| b == b'\n');
    let (header, payload, signature) = (parts.next(), parts.next(), parts.next());
    if let (Some(header), Some(payload)) = (header, payload) {
        let token = format!(
            "{}.{}.{}",
            URL_SAFE_NO_PAD.encode(header),
            URL_SAFE_NO_PAD.encode(payload),
            URL_SAFE_NO_PAD.encode(signature.unwrap_or_default())
        );
        check(&token, &both);
    }
});
