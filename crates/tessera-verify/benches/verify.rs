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
//!   wall time per verification, to see whether the shard locks contend;
//! - `request/*`: a whole `verify_request` of a cached token (the `Authorization` header read,
//!   the token looked up), without plan limits, with them counted in memory (`plan-limits`:
//!   the document looked up, GCRA and a daily quota counted, the two fields written), and
//!   counted in Redis at `TESSERA_TEST_REDIS_URL` (default the local one), which adds a round
//!   trip (`plan-limits-redis`; each call driven by a runtime's `block_on`, skipped when Redis
//!   does not answer). The limits come from a limits document served on 127.0.0.1.
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

/// `verify_request` with and without plan limits: what the limiter costs per request.
fn bench_limits(c: &mut Criterion) {
    use axum::http::{HeaderMap, HeaderValue, Method, Uri};
    use tessera_verify::AccessRequest;

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let _entered = rt.enter();
    // The limits document: a plan far above what the loop reaches, with a daily quota.
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let issuer = format!("http://{}", listener.local_addr().unwrap());
    let document = json!({"api": AUDIENCE, "plans": {"partner": {
        "rate": {"limit": 1_000_000_000u32, "window_seconds": 1}, "burst": 1_000_000_000u32,
        "quota": {"limit": 1_000_000_000_000u64, "period": "day"}}}});
    let app = axum::Router::new().route(
        &format!("/api-limits/{AUDIENCE}"),
        axum::routing::get(move || {
            let document = document.clone();
            async move { axum::Json(document) }
        }),
    );
    rt.spawn(async move { axum::serve(listener, app).await.unwrap() });

    let ed = Ed25519KeyPair::generate().unwrap();
    let jwks = JwkSet {
        keys: vec![jwk("ed", "EdDSA", ed.public_key().as_ref(), None)],
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let header = json!({"alg": "EdDSA", "kid": "ed", "typ": "at+jwt"});
    let claims = json!({
        "iss": issuer, "sub": "client-1", "client_id": "client-1", "aud": [AUDIENCE],
        "scope": AUDIENCE, "iat": now, "exp": now + 600, "app_only": true, "plan": "partner",
        "jti": "7f1c6c3a9b2e4d5f8a0b1c2d3e4f5a6b",
    });
    let input = format!("{}.{}", b64(header.to_string()), b64(claims.to_string()));
    let token = format!("{input}.{}", b64(ed.sign(input.as_bytes())));
    let (method, uri) = (Method::GET, Uri::from_static("/market-data/v1/quotes"));
    let mut headers = HeaderMap::new();
    headers.insert(
        "authorization",
        HeaderValue::try_from(format!("Bearer {token}")).unwrap(),
    );
    let request = AccessRequest::new(&method, &uri, &headers);
    let builder = || Verifier::builder(&issuer, AUDIENCE).static_keys(jwks.clone());

    let plain = builder().build().unwrap();
    let limited = builder().plan_limits().build().unwrap();
    rt.block_on(limited.refresh_limits()).unwrap();
    for (name, verifier) in [("no-limits", &plain), ("plan-limits", &limited)] {
        let fields = ready(verifier.verify_request(&request)).unwrap();
        assert_eq!(fields.rate_limit().is_some(), name == "plan-limits");
        c.bench_function(&format!("request/{name}"), |b| {
            b.iter(|| ready(verifier.verify_request(black_box(&request))).unwrap())
        });
    }
    let redis_url =
        std::env::var("TESSERA_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let shared = builder()
        .plan_limits()
        .redis_url(redis_url)
        .redis_prefix(format!("tessera-bench-{}:", std::process::id()))
        .build()
        .unwrap();
    if rt.block_on(shared.refresh_limits()).unwrap() {
        c.bench_function("request/plan-limits-redis", |b| {
            b.iter(|| {
                rt.block_on(shared.verify_request(black_box(&request)))
                    .unwrap()
            })
        });
    } else {
        eprintln!("request/plan-limits-redis skipped: Redis does not answer");
    }
}

criterion_group!(benches, bench, bench_limits);
criterion_main!(benches);
