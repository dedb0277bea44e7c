//! Verification of a valid token with the keys already cached: the cost every protected
//! request pays. Run with `cargo bench -p tessera-verify`.

// criterion_group! and criterion_main! write functions without docs.
#![allow(missing_docs)]

use std::hint::black_box;
use std::time::{SystemTime, UNIX_EPOCH};

use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{
    EcdsaKeyPair, Ed25519KeyPair, KeyPair, ParsedPublicKey, ECDSA_P256_SHA256_FIXED,
    ECDSA_P256_SHA256_FIXED_SIGNING, ED25519,
};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use criterion::{criterion_group, criterion_main, Criterion};
use serde_json::json;
use tessera_proto::{Jwk, JwkSet};
use tessera_verify::Verifier;

const ISSUER: &str = "https://auth.tessera.test";
const AUDIENCE: &str = "market-data-api";

fn b64(bytes: impl AsRef<[u8]>) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

fn jwk(kid: &str, alg: &str, x: &[u8], y: Option<&[u8]>) -> Jwk {
    let (kty, crv) = if y.is_some() {
        ("EC", "P-256")
    } else {
        ("OKP", "Ed25519")
    };
    Jwk {
        kty: kty.into(),
        crv: crv.into(),
        x: b64(x),
        y: y.map(b64),
        n: None,
        e: None,
        kid: kid.into(),
        alg: alg.into(),
        use_: "sig".into(),
    }
}

/// A token as Tessera issues it: `at+jwt` header, RFC 9068 claims, ten minutes to live.
fn token(alg: &str, kid: &str, sign: impl Fn(&[u8]) -> Vec<u8>) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let header = json!({"alg": alg, "kid": kid, "typ": "at+jwt"});
    let claims = json!({
        "iss": ISSUER, "sub": "client-1", "client_id": "client-1",
        "aud": [AUDIENCE, "news-api"], "scope": "quotes:read news:read",
        "iat": now, "exp": now + 600, "jti": "7f1c6c3a9b2e4d5f8a0b1c2d3e4f5a6b", "app_only": true,
    });
    let input = format!("{}.{}", b64(header.to_string()), b64(claims.to_string()));
    let signature = sign(input.as_bytes());
    format!("{input}.{}", b64(signature))
}

fn bench(c: &mut Criterion) {
    let ed = Ed25519KeyPair::generate().unwrap();
    let es = EcdsaKeyPair::generate(&ECDSA_P256_SHA256_FIXED_SIGNING).unwrap();
    let point = es.public_key().as_ref();
    let jwks = JwkSet {
        keys: vec![
            jwk("ed", "EdDSA", ed.public_key().as_ref(), None),
            jwk("es", "ES256", &point[1..33], Some(&point[33..])),
        ],
    };
    let verifier = Verifier::with_static_keys(ISSUER, AUDIENCE, jwks).unwrap();
    let rng = SystemRandom::new();
    let tokens = [
        (
            "EdDSA",
            token("EdDSA", "ed", |m| ed.sign(m).as_ref().to_vec()),
        ),
        (
            "ES256",
            token("ES256", "es", |m| {
                es.sign(&rng, m).unwrap().as_ref().to_vec()
            }),
        ),
    ];
    // `verify` is async for the rare fetch; with the keys cached it completes at once.
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    // Baselines: the signature check alone, so the verifier's own overhead shows.
    let ed_key = ParsedPublicKey::new(&ED25519, ed.public_key().as_ref()).unwrap();
    let es_key = ParsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, point).unwrap();
    for ((name, token), key) in tokens.iter().zip([&ed_key, &es_key]) {
        let (input, signature) = token.rsplit_once('.').unwrap();
        let signature = URL_SAFE_NO_PAD.decode(signature).unwrap();
        c.bench_function(&format!("signature-only/{name}"), |b| {
            b.iter(|| {
                key.verify_sig(black_box(input.as_bytes()), &signature)
                    .unwrap()
            })
        });
    }
    for (name, token) in &tokens {
        rt.block_on(verifier.verify(token))
            .expect("the token is valid");
        c.bench_function(&format!("verify/{name}"), |b| {
            b.iter(|| rt.block_on(verifier.verify(black_box(token))).unwrap())
        });
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
