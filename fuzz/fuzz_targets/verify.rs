//! Claim validation through the public verifier (`Verifier::verify`, RFC 9068 section 4), with
//! a fixed local key set and no network. The input, split at its first newline, is a JOSE
//! header and a claims payload, signed here with the trusted key: the signature holds, so the
//! header and claim checks are what the fuzzer explores. Without a newline the input is the
//! claims under Tessera's own header. The input is also tried as a token as it stands.
#![no_main]

use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

use aws_lc_rs::signature::{Ed25519KeyPair, KeyPair};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use libfuzzer_sys::fuzz_target;
use tessera_proto::{Jwk, JwkSet};
use tessera_verify::{defaults, Verifier};

const ISSUER: &str = "https://auth.tessera.test";
const AUDIENCE: &str = "market-data-api";
const KID: &str = "fuzz-ed25519";

struct Fixture {
    runtime: tokio::runtime::Runtime,
    verifier: Verifier,
    key: Ed25519KeyPair,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        // A fixed seed: a crash reproduces from its input alone.
        let key = Ed25519KeyPair::from_seed_unchecked(&[7; 32]).unwrap();
        let jwk = Jwk {
            kty: "OKP".into(),
            crv: "Ed25519".into(),
            x: URL_SAFE_NO_PAD.encode(key.public_key()),
            y: None,
            n: None,
            e: None,
            kid: KID.into(),
            alg: "EdDSA".into(),
            use_: "sig".into(),
        };
        let verifier =
            Verifier::with_static_keys(ISSUER, AUDIENCE, JwkSet { keys: vec![jwk] }).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        Fixture {
            runtime,
            verifier,
            key,
        }
    })
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Verifies `token` and checks what every accepted token must satisfy, whatever the fuzzer
/// wrote. The clock is read on both sides of the verification, which reads it in between.
fn check(f: &Fixture, token: &str) {
    let before = now();
    let Ok(claims) = f.runtime.block_on(f.verifier.verify(token)) else {
        return;
    };
    let after = now();
    let leeway = defaults::LEEWAY.as_secs();
    assert_eq!(claims.iss, ISSUER);
    assert!(claims.aud.contains(AUDIENCE));
    assert!(claims.exp.saturating_add(leeway) > before);
    assert!(claims.nbf.is_none_or(|nbf| nbf <= after + leeway));
}

fuzz_target!(|data: &[u8]| {
    let f = fixture();
    let default_header = format!(r#"{{"alg":"EdDSA","kid":"{KID}","typ":"at+jwt"}}"#);
    let (header, claims) = match data.iter().position(|&b| b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (default_header.as_bytes(), data),
    };
    let input = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header),
        URL_SAFE_NO_PAD.encode(claims)
    );
    let signature = f.key.sign(input.as_bytes());
    let token = format!("{input}.{}", URL_SAFE_NO_PAD.encode(signature));
    check(f, &token);
    if let Ok(token) = std::str::from_utf8(data) {
        check(f, token);
    }
});
