//! The pieces of one token request, each on its own, and the whole handler in process (no
//! TCP): what a token costs beyond HTTP. The end-to-end figures are in `bench/run.sh`.
//!
//! Run with
//! `cargo bench -p tessera-server --bench hot_path -- --warm-up-time 1 --measurement-time 3`.

// criterion_group! and criterion_main! write functions without docs.
#![allow(missing_docs)]

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use aws_lc_rs::signature::{Ed25519KeyPair, KeyPair, ParsedPublicKey, ED25519};
use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use tessera_proto::claims::Audience;
use tessera_proto::token::TokenType;
use tessera_proto::{
    form, AccessTokenClaims, Algorithm, BasicCredentials, ClientSecret, ScopeSet, TokenRequest,
    TokenResponse,
};
use tessera_server::clock::Clock;
use tessera_server::keys::{self, KeyRing, LoadedKey};
use tessera_server::metrics::Metrics;
use tessera_server::registrar::Registrar;
use tessera_server::secrets::{self, Secrets};
use tessera_server::{AppState, Config, Runtime};
use tessera_store::AuthMethod;
use tower::ServiceExt;

const BODY: &str = "grant_type=client_credentials&scope=market-data-api";
const ISSUER: &str = "http://127.0.0.1:8080";

/// Claims as the token endpoint builds them for one scope.
fn claims() -> AccessTokenClaims {
    let iat = Clock::system().now() as u64;
    AccessTokenClaims {
        iss: ISSUER.into(),
        sub: "tc_AAAAAAAAAAAAAAAAAAAAAA".into(),
        client_id: "tc_AAAAAAAAAAAAAAAAAAAAAA".into(),
        aud: Audience::Many(vec!["market-data-api".into()]),
        scope: "market-data-api".into(),
        iat,
        exp: iat + 3600,
        nbf: None,
        jti: secrets::random_token(16),
        app_only: true,
        cnf: None,
        plan: None,
        org_id: None,
    }
}

fn loaded_key(secrets: &Secrets, alg: Algorithm) -> LoadedKey {
    let now = Clock::system().now();
    keys::load(secrets, &keys::generate(secrets, alg, now, now)).expect("a fresh key loads")
}

fn pieces(c: &mut Criterion) {
    let secrets = Secrets::from_bytes(&[7; 32]);
    let secret = secrets::new_client_secret();
    let hash = secrets.hash_secret(&secret);
    let header = format!(
        "Basic {}",
        STANDARD.encode(format!("tc_AAAAAAAAAAAAAAAAAAAAAA:{}", secret.expose()))
    );

    c.bench_function("auth/hash_secret", |b| {
        b.iter(|| secrets.hash_secret(black_box(&secret)))
    });
    c.bench_function("auth/verify_secret", |b| {
        b.iter(|| secrets.verify_secret(black_box(&secret), black_box(&hash)))
    });
    c.bench_function("parse/basic_header", |b| {
        b.iter(|| BasicCredentials::from_header(black_box(&header)).expect("valid"))
    });
    c.bench_function("parse/form_body+token_request", |b| {
        b.iter(|| {
            let pairs = form::parse(black_box(BODY)).expect("valid");
            TokenRequest::from_form(&pairs).expect("valid")
        })
    });
    c.bench_function("parse/scope_set", |b| {
        b.iter(|| ScopeSet::parse(black_box("market-data-api")).expect("valid"))
    });
    c.bench_function("claims/jti_random_16", |b| {
        b.iter(|| secrets::random_token(black_box(16)))
    });
    let sample = claims();
    c.bench_function("claims/serialize_json", |b| {
        b.iter(|| serde_json::to_vec(black_box(&sample)).expect("serializes"))
    });
    let response = TokenResponse {
        access_token: "x".repeat(420),
        token_type: TokenType::Bearer,
        expires_in: 3600,
        scope: ScopeSet::parse("market-data-api").expect("valid"),
    };
    c.bench_function("response/serialize_json", |b| {
        b.iter(|| serde_json::to_vec(black_box(&response)).expect("serializes"))
    });

    // The primitive alone, on a message of a token's signing-input length, to tell the
    // signature's cost from what sign_jwt adds around it.
    let pair = Ed25519KeyPair::generate().expect("key");
    let message = vec![b'e'; 300];
    c.bench_function("sign/Ed25519 primitive (aws-lc-rs, 300 B)", |b| {
        b.iter(|| pair.sign(black_box(&message)))
    });
    let signature = pair.sign(&message);
    let public = ParsedPublicKey::new(&ED25519, pair.public_key().as_ref()).expect("key");
    c.bench_function("verify/Ed25519 primitive (parsed key, 300 B)", |b| {
        b.iter(|| public.verify_sig(black_box(&message), black_box(signature.as_ref())))
    });
    // What the token endpoint records for one issued token.
    let metrics = Metrics::default();
    c.bench_function("metrics/issued+observe", |b| {
        b.iter(|| {
            metrics.issued(black_box("bench"), false);
            metrics.observe(black_box(Duration::from_micros(28)));
        })
    });

    for (alg, name) in [(Algorithm::EdDSA, "EdDSA"), (Algorithm::ES256, "ES256")] {
        let key = loaded_key(&secrets, alg);
        let token = key.sign_jwt(&sample);
        c.bench_function(&format!("sign/{name}"), |b| {
            b.iter(|| key.sign_jwt(black_box(&sample)))
        });
        let ring = KeyRing::new(vec![Arc::new(key)]);
        c.bench_function(&format!("verify/{name}"), |b| {
            b.iter(|| ring.verify(black_box(&token)).expect("valid"))
        });
    }
}

/// `POST /connect/token` through the whole router and its layers, in process: everything
/// the server does for a token except TCP and HTTP/1.1 parsing and writing.
fn handler(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("sqlite://{}", dir.path().join("bench.db").display());
    let (app, authorization) = rt.block_on(async {
        let store = tessera_store::open(&url).await.expect("store");
        let secrets = Arc::new(Secrets::from_bytes(&[7; 32]));
        let clock = Clock::system();
        let admin = Registrar::new(store.as_ref(), &clock);
        admin
            .set_plan("bench", "market-data-api news-api oms-api", None)
            .await
            .expect("plan");
        let (client, secret): (_, ClientSecret) = admin
            .create_client(&secrets, "bench", "bench", AuthMethod::ClientSecretBasic)
            .await
            .expect("client");
        let state = AppState::prepare(Config::default(), Runtime::new(ISSUER), store, secrets)
            .await
            .expect("state");
        let credentials = BasicCredentials {
            client_id: client.id,
            client_secret: secret,
        };
        (tessera_server::app(state), credentials.to_header())
    });
    let request = || {
        Request::post("/connect/token")
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(header::AUTHORIZATION, &authorization)
            .body(Body::from(BODY))
            .expect("request")
    };
    let issue = |req: Request<Body>| {
        rt.block_on(async {
            let response = app.clone().oneshot(req).await.expect("infallible");
            assert_eq!(response.status(), StatusCode::OK);
            axum::body::to_bytes(response.into_body(), 4096)
                .await
                .expect("body")
        })
    };

    c.bench_function("handler/token (no log subscriber)", |b| {
        b.iter_batched(request, issue, BatchSize::SmallInput)
    });
    // The audit line formatted as the binary's default subscriber does, written nowhere:
    // its formatting cost without the write to stderr.
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("info"))
        .with_writer(std::io::sink)
        .finish();
    tracing::subscriber::with_default(subscriber, || {
        c.bench_function("handler/token (audit line to sink)", |b| {
            b.iter_batched(request, issue, BatchSize::SmallInput)
        });
    });
}

criterion_group!(benches, pieces, handler);
criterion_main!(benches);
