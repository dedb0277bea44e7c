//! Verification of a valid token with the keys already cached: the cost every protected
//! request pays. Run with `cargo bench -p tessera-verify`.
//!
//! - `signature-only/*`: the aws-lc-rs signature check alone, the floor of a first
//!   verification;
//! - `first-verification/*`: a token the verifier has not seen (a new one each iteration,
//!   signed outside the measurement), with the cache of verified tokens on;
//! - `uncached/*`: the same token again with the cache off, as before the cache existed;
//! - `repeat-verification/*`: the same token again, served from the cache;
//! - `repeat-verification-threads/EdDSA`: as above from two threads at once on ten tokens,
//!   wall time per verification, to see whether the shard locks contend.
//!
//! `verify` is async only for a key fetch; with static keys it never waits, so each call is
//! polled once ([`ready`]) rather than run by an executor, whose `block_on` would add about
//! 300 ns to every figure.

// criterion_group! and criterion_main! write functions without docs.
#![allow(missing_docs)]

use std::future::Future;
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{
    EcdsaKeyPair, Ed25519KeyPair, KeyPair, ParsedPublicKey, ECDSA_P256_SHA256_FIXED,
    ECDSA_P256_SHA256_FIXED_SIGNING, ED25519,
};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
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

/// Makes each token's `jti` unique.
static SERIAL: AtomicU64 = AtomicU64::new(0);

/// A token as Tessera issues it: `at+jwt` header, RFC 9068 claims, ten minutes to live, a
/// `jti` of its own.
fn token(alg: &str, kid: &str, sign: impl Fn(&[u8]) -> Vec<u8>) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let header = json!({"alg": alg, "kid": kid, "typ": "at+jwt"});
    let claims = json!({
        "iss": ISSUER, "sub": "client-1", "client_id": "client-1",
        "aud": [AUDIENCE, "news-api"], "scope": "quotes:read news:read",
        "iat": now, "exp": now + 600, "jti": format!("7f1c6c3a9b2e4d5f8a0b{:012x}", SERIAL.fetch_add(1, Ordering::Relaxed)), "app_only": true,
    });
    let input = format!("{}.{}", b64(header.to_string()), b64(claims.to_string()));
    let signature = sign(input.as_bytes());
    format!("{input}.{}", b64(signature))
}

/// The output of a future that is ready at the first poll, as `verify` is with its keys in
/// memory.
fn ready<T>(future: impl Future<Output = T>) -> T {
    match std::pin::pin!(future).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(out) => out,
        Poll::Pending => panic!("verify waited"),
    }
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
    let verifier = Verifier::with_static_keys(ISSUER, AUDIENCE, jwks.clone()).unwrap();
    let uncached = Verifier::builder(ISSUER, AUDIENCE)
        .static_keys(jwks)
        .token_cache_capacity(0)
        .build()
        .unwrap();
    let rng = SystemRandom::new();
    let sign_ed = || token("EdDSA", "ed", |m| ed.sign(m).as_ref().to_vec());
    let sign_es = || {
        token("ES256", "es", |m| {
            es.sign(&rng, m).unwrap().as_ref().to_vec()
        })
    };
    let tokens = [("EdDSA", sign_ed()), ("ES256", sign_es())];
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
    let signers: [(&str, &dyn Fn() -> String); 2] = [("EdDSA", &sign_ed), ("ES256", &sign_es)];
    for (name, sign) in signers {
        c.bench_function(&format!("first-verification/{name}"), |b| {
            b.iter_batched(
                sign,
                |token| ready(verifier.verify(black_box(&token))).unwrap(),
                BatchSize::SmallInput,
            )
        });
    }
    for (name, token) in &tokens {
        c.bench_function(&format!("uncached/{name}"), |b| {
            b.iter(|| ready(uncached.verify(black_box(token))).unwrap())
        });
    }
    for (name, token) in &tokens {
        ready(verifier.verify(token)).expect("the token is valid");
        c.bench_function(&format!("repeat-verification/{name}"), |b| {
            b.iter(|| ready(verifier.verify(black_box(token))).unwrap())
        });
    }
    // Ten clients' tokens, verified from two threads at once.
    let ten: Vec<String> = (0..10).map(|_| sign_ed()).collect();
    for token in &ten {
        ready(verifier.verify(token)).unwrap();
    }
    c.bench_function("repeat-verification-threads/EdDSA", |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            std::thread::scope(|s| {
                for t in 0..2 {
                    let (verifier, ten) = (&verifier, &ten);
                    s.spawn(move || {
                        for i in 0..iters.div_ceil(2) {
                            let token = &ten[(t + i as usize) % ten.len()];
                            ready(verifier.verify(black_box(token))).unwrap();
                        }
                    });
                }
            });
            start.elapsed()
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
