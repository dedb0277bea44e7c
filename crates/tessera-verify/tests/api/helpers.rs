//! Keys made in the test, token forging, and a tiny issuer on 127.0.0.1:0 that counts fetches.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{SystemTime, UNIX_EPOCH};

use aws_lc_rs::digest;
use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{
    EcdsaKeyPair, Ed25519KeyPair, KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING,
};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::{Json, Router};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde_json::{json, Value};
use tessera_proto::{Algorithm, Jwk, JwkSet};
use tessera_verify::Verifier;

pub(crate) const AUDIENCE: &str = "market-data-api";
pub(crate) const ISSUER: &str = "https://auth.tessera.test";

pub(crate) fn b64(bytes: impl AsRef<[u8]>) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

pub(crate) fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Claims as Tessera issues them, valid for ten minutes.
pub(crate) fn claims(iss: &str) -> Value {
    let now = now();
    json!({
        "iss": iss,
        "sub": "client-1",
        "client_id": "client-1",
        "aud": [AUDIENCE, "news-api"],
        "scope": "quotes:read news:read",
        "iat": now,
        "exp": now + 600,
        "jti": "7f1c6c3a9b2e4d5f8a0b1c2d3e4f5a6b",
        "app_only": true,
    })
}

enum Pair {
    Ed25519(Ed25519KeyPair),
    Es256(EcdsaKeyPair),
}

/// A signing key made for the test, with its public JWK.
pub(crate) struct TestKey {
    pair: Pair,
    pub alg: Algorithm,
    pub jwk: Jwk,
}

impl TestKey {
    pub(crate) fn ed25519() -> Self {
        Self::new(Pair::Ed25519(Ed25519KeyPair::generate().unwrap()))
    }

    pub(crate) fn es256() -> Self {
        Self::new(Pair::Es256(
            EcdsaKeyPair::generate(&ECDSA_P256_SHA256_FIXED_SIGNING).unwrap(),
        ))
    }

    fn new(pair: Pair) -> Self {
        let (alg, kty, crv, x, y) = match &pair {
            Pair::Ed25519(p) => (
                Algorithm::EdDSA,
                "OKP",
                "Ed25519",
                b64(p.public_key()),
                None,
            ),
            Pair::Es256(p) => {
                let (x, y) = p.public_key().as_ref()[1..].split_at(32);
                (Algorithm::ES256, "EC", "P-256", b64(x), Some(b64(y)))
            }
        };
        // RFC 7638 thumbprint, as Tessera names its keys.
        let canonical = match &y {
            None => format!(r#"{{"crv":"{crv}","kty":"{kty}","x":"{x}"}}"#),
            Some(y) => format!(r#"{{"crv":"{crv}","kty":"{kty}","x":"{x}","y":"{y}"}}"#),
        };
        let kid = b64(digest::digest(&digest::SHA256, canonical.as_bytes()));
        let jwk = Jwk {
            kty: kty.into(),
            crv: crv.into(),
            x,
            y,
            n: None,
            e: None,
            kid,
            alg: alg.as_str().into(),
            use_: "sig".into(),
        };
        Self { pair, alg, jwk }
    }

    pub(crate) fn kid(&self) -> &str {
        &self.jwk.kid
    }

    /// The public key bytes, as an attacker could take them from the JWKS.
    pub(crate) fn public_bytes(&self) -> Vec<u8> {
        match &self.pair {
            Pair::Ed25519(p) => p.public_key().as_ref().to_vec(),
            Pair::Es256(p) => p.public_key().as_ref().to_vec(),
        }
    }

    /// The header Tessera sends.
    pub(crate) fn header(&self) -> Value {
        json!({"alg": self.alg.as_str(), "kid": self.kid(), "typ": "at+jwt"})
    }

    /// A token as Tessera signs it.
    pub(crate) fn sign(&self, claims: &Value) -> String {
        self.sign_with(&self.header(), claims)
    }

    /// Any header and claims, signed by this key.
    pub(crate) fn sign_with(&self, header: &Value, claims: &Value) -> String {
        let input = format!("{}.{}", b64(header.to_string()), b64(claims.to_string()));
        let signature = match &self.pair {
            Pair::Ed25519(p) => p.sign(input.as_bytes()).as_ref().to_vec(),
            Pair::Es256(p) => p
                .sign(&SystemRandom::new(), input.as_bytes())
                .unwrap()
                .as_ref()
                .to_vec(),
        };
        format!("{input}.{}", b64(signature))
    }
}

pub(crate) fn jwks(keys: &[&TestKey]) -> JwkSet {
    JwkSet {
        keys: keys.iter().map(|k| k.jwk.clone()).collect(),
    }
}

/// A verifier for [`ISSUER`] and [`AUDIENCE`] with these keys, fixed.
pub(crate) fn static_verifier(keys: &[&TestKey]) -> Verifier {
    Verifier::with_static_keys(ISSUER, AUDIENCE, jwks(keys)).unwrap()
}

/// What the test issuer served.
#[derive(Default)]
pub(crate) struct Hits {
    pub metadata: AtomicUsize,
    pub jwks: AtomicUsize,
}

impl Hits {
    pub(crate) fn jwks(&self) -> usize {
        self.jwks.load(Ordering::SeqCst)
    }
    pub(crate) fn metadata(&self) -> usize {
        self.metadata.load(Ordering::SeqCst)
    }
}

/// Writes the metadata document of the issuer at the given base URL.
pub(crate) type MetadataFn = fn(&str) -> Value;

#[derive(Clone)]
struct IssuerState {
    issuer: String,
    keys: Arc<RwLock<JwkSet>>,
    hits: Arc<Hits>,
    metadata: MetadataFn,
}

/// A minimal issuer serving its metadata and key set on 127.0.0.1:0.
pub(crate) struct TestIssuer {
    /// `http://127.0.0.1:PORT`, also the issuer identifier.
    pub url: String,
    /// Replace to rotate keys.
    pub keys: Arc<RwLock<JwkSet>>,
    pub hits: Arc<Hits>,
    server: tokio::task::JoinHandle<()>,
}

impl TestIssuer {
    /// An issuer serving metadata with every member Tessera's server writes.
    pub(crate) async fn spawn(keys: JwkSet) -> Self {
        Self::spawn_with_metadata(keys, tessera_metadata).await
    }

    /// An issuer serving the metadata `write_metadata` writes for its URL.
    pub(crate) async fn spawn_with_metadata(keys: JwkSet, write_metadata: MetadataFn) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let state = IssuerState {
            issuer: url.clone(),
            keys: Arc::new(RwLock::new(keys)),
            hits: Arc::default(),
            metadata: write_metadata,
        };
        let app = Router::new()
            .route("/.well-known/oauth-authorization-server", get(metadata))
            .route("/.well-known/jwks.json", get(jwks_doc))
            .route(
                "/moved/jwks.json",
                get(|| async { Redirect::temporary("/.well-known/jwks.json") }),
            )
            .with_state(state.clone());
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self {
            url,
            keys: state.keys,
            hits: state.hits,
            server,
        }
    }

    /// Stops the server: the port refuses connections from now on.
    pub(crate) async fn shut_down(&self) {
        self.server.abort();
        while !self.server.is_finished() {
            tokio::task::yield_now().await;
        }
    }
}

/// The metadata as Tessera's server writes it.
pub(crate) fn tessera_metadata(issuer: &str) -> Value {
    json!({
        "issuer": issuer,
        "token_endpoint": format!("{issuer}/connect/token"),
        "jwks_uri": format!("{issuer}/.well-known/jwks.json"),
        "grant_types_supported": ["client_credentials"],
        "token_endpoint_auth_methods_supported": ["client_secret_basic"],
        "scopes_supported": [],
        "response_types_supported": [],
    })
}

async fn metadata(State(s): State<IssuerState>) -> Response {
    s.hits.metadata.fetch_add(1, Ordering::SeqCst);
    Json((s.metadata)(&s.issuer)).into_response()
}

async fn jwks_doc(State(s): State<IssuerState>) -> Response {
    s.hits.jwks.fetch_add(1, Ordering::SeqCst);
    let keys = s.keys.read().unwrap().clone();
    if keys.keys.is_empty() {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    Json(keys).into_response()
}
