//! Forged and broken tokens, each refused for the reason it was built to probe.

use aws_lc_rs::hmac;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde_json::{json, Value};
use tessera_proto::jws::JwsError;
use tessera_verify::VerifyError;

use crate::helpers::{b64, claims, now, static_verifier, TestKey, ISSUER};

/// The keys the verifier trusts, and one it does not.
pub(crate) struct Keys {
    pub ed: TestKey,
    pub es: TestKey,
    pub attacker: TestKey,
}

impl Keys {
    pub(crate) fn new() -> Self {
        Self {
            ed: TestKey::ed25519(),
            es: TestKey::es256(),
            attacker: TestKey::ed25519(),
        }
    }
}

/// A header like Tessera's with `extra` merged in.
fn header_with(key: &TestKey, extra: Value) -> Value {
    let mut h = key.header();
    let Value::Object(extra) = extra else {
        panic!("extra header members are an object")
    };
    for (k, v) in extra {
        h[&k] = v;
    }
    h
}

fn claims_with(extra: Value) -> Value {
    let mut c = claims(ISSUER);
    let Value::Object(extra) = extra else {
        panic!("extra claims are an object")
    };
    for (k, v) in extra {
        c[&k] = v;
    }
    c
}

/// Header and claims with no signature, as `alg: none` sends them.
fn unsigned(header: &Value, claims: &Value) -> String {
    format!("{}.{}.", b64(header.to_string()), b64(claims.to_string()))
}

/// A token MACed with HS256 under `secret` (RFC 8725 section 2.1: the public key used as
/// an HMAC secret).
fn hs256(header: &Value, claims: &Value, secret: &[u8]) -> String {
    let input = format!("{}.{}", b64(header.to_string()), b64(claims.to_string()));
    let tag = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, secret), input.as_bytes());
    format!("{input}.{}", b64(tag))
}

/// Every hostile token: a name, the token, the refusal expected.
pub(crate) fn cases(keys: &Keys) -> Vec<(String, String, VerifyError)> {
    let Keys { ed, es, attacker } = keys;
    let good = claims(ISSUER);
    let mut cases: Vec<(String, String, VerifyError)> = Vec::new();
    let mut case = |name: &str, token: String, want| cases.push((name.to_owned(), token, want));

    for none in ["none", "None", "NONE", "nOnE"] {
        let header = json!({"alg": none, "kid": ed.kid(), "typ": "at+jwt"});
        case(
            &format!("alg {none}"),
            unsigned(&header, &good),
            VerifyError::Jws(JwsError::AlgorithmNotAllowed),
        );
    }
    for key in [ed, es] {
        let header = json!({"alg": "HS256", "kid": key.kid(), "typ": "at+jwt"});
        case(
            &format!("HS256 keyed with the {} public key", key.alg),
            hs256(&header, &good, &key.public_bytes()),
            VerifyError::Jws(JwsError::AlgorithmNotAllowed),
        );
        let jwk_json = serde_json::to_vec(&key.jwk).unwrap();
        case(
            &format!("HS256 keyed with the {} JWK", key.alg),
            hs256(&header, &good, &jwk_json),
            VerifyError::Jws(JwsError::AlgorithmNotAllowed),
        );
    }
    case(
        "alg in lower case",
        ed.sign_with(&header_with(ed, json!({"alg": "eddsa"})), &good),
        VerifyError::Jws(JwsError::AlgorithmNotAllowed),
    );
    case(
        "another key under the trusted kid",
        attacker.sign_with(&ed.header(), &good),
        VerifyError::BadSignature,
    );
    case(
        "ES256 header on the EdDSA key's kid",
        es.sign_with(&header_with(ed, json!({"alg": "ES256"})), &good),
        VerifyError::KeyMismatch,
    );
    case("unknown kid", attacker.sign(&good), VerifyError::UnknownKey);
    case(
        "10 KiB kid",
        ed.sign_with(
            &header_with(ed, json!({"kid": "k".repeat(10 * 1024)})),
            &good,
        ),
        VerifyError::Jws(JwsError::TooLarge { limit: 8192 }),
    );
    case(
        "1 KiB kid",
        ed.sign_with(&header_with(ed, json!({"kid": "k".repeat(1024)})), &good),
        VerifyError::Jws(JwsError::BadKeyId),
    );
    case(
        "kid with a path",
        ed.sign_with(&header_with(ed, json!({"kid": "../../etc/passwd"})), &good),
        VerifyError::UnknownKey,
    );
    case(
        "kid with SQL",
        ed.sign_with(&header_with(ed, json!({"kid": "' OR 1=1 --"})), &good),
        VerifyError::Jws(JwsError::BadKeyId),
    );
    case(
        "kid not a string",
        ed.sign_with(&header_with(ed, json!({"kid": 7})), &good),
        VerifyError::Jws(JwsError::MalformedHeader),
    );
    for (member, value) in [
        ("jku", json!("https://evil.example/jwks.json")),
        ("x5u", json!("https://evil.example/cert.pem")),
        ("jwk", serde_json::to_value(&ed.jwk).unwrap()),
        ("x5c", json!(["MIIB"])),
    ] {
        case(
            &format!("{member} header, signed by the right key"),
            ed.sign_with(&header_with(ed, json!({ member: value })), &good),
            VerifyError::Jws(JwsError::UntrustedKeyReference),
        );
    }
    case(
        "jwk header embedding the attacker's key",
        attacker.sign_with(
            &header_with(
                ed,
                json!({"jwk": serde_json::to_value(&attacker.jwk).unwrap()}),
            ),
            &good,
        ),
        VerifyError::Jws(JwsError::UntrustedKeyReference),
    );
    case(
        "crit header",
        ed.sign_with(&header_with(ed, json!({"crit": ["exp"]})), &good),
        VerifyError::Jws(JwsError::CriticalHeader),
    );
    case(
        "typ JWT",
        ed.sign_with(&header_with(ed, json!({"typ": "JWT"})), &good),
        VerifyError::Jws(JwsError::WrongType),
    );
    case(
        "no typ",
        ed.sign_with(&json!({"alg": "EdDSA", "kid": ed.kid()}), &good),
        VerifyError::Jws(JwsError::WrongType),
    );
    case(
        "expired",
        ed.sign(&claims_with(
            json!({"iat": now() - 1000, "exp": now() - 120}),
        )),
        VerifyError::Expired,
    );
    case(
        "nbf in the future",
        ed.sign(&claims_with(json!({"nbf": now() + 300}))),
        VerifyError::NotYetValid,
    );
    case(
        "wrong issuer",
        ed.sign(&claims_with(json!({"iss": "https://evil.example"}))),
        VerifyError::WrongIssuer,
    );
    case(
        "issuer with a trailing slash",
        ed.sign(&claims_with(json!({"iss": format!("{ISSUER}/")}))),
        VerifyError::WrongIssuer,
    );
    case(
        "wrong audience",
        ed.sign(&claims_with(json!({"aud": ["oms-api"]}))),
        VerifyError::WrongAudience,
    );
    case(
        "exp as a string",
        ed.sign(&claims_with(json!({"exp": "tomorrow"}))),
        VerifyError::MalformedClaims,
    );
    case(
        "aud as a number",
        ed.sign(&claims_with(json!({"aud": 1}))),
        VerifyError::MalformedClaims,
    );
    let valid = ed.sign(&good);
    let (header, rest) = valid.split_once('.').unwrap();
    let (_, signature) = rest.split_once('.').unwrap();
    let raised = b64(claims_with(json!({"scope": "admin"})).to_string());
    case(
        "payload swapped under a valid signature",
        format!("{header}.{raised}.{signature}"),
        VerifyError::BadSignature,
    );
    let short = &URL_SAFE_NO_PAD.decode(signature).unwrap()[..60];
    case(
        "signature cut short",
        format!(
            "{header}.{}.{}",
            rest.split_once('.').unwrap().0,
            b64(short)
        ),
        VerifyError::BadSignature,
    );
    case(
        "padded signature",
        format!("{valid}="),
        VerifyError::Jws(JwsError::Malformed),
    );
    case(
        "five-part JWE",
        format!(
            "{}.{}.{}.{}.{}",
            b64(r#"{"alg":"RSA-OAEP","enc":"A256GCM","kid":"k"}"#),
            b64([1u8; 32]),
            b64([2u8; 12]),
            b64([3u8; 64]),
            b64([4u8; 16])
        ),
        VerifyError::Jws(JwsError::Encrypted),
    );
    case(
        "empty",
        String::new(),
        VerifyError::Jws(JwsError::Malformed),
    );
    case(
        "64 KiB token",
        ed.sign(&claims_with(json!({"pad": "x".repeat(64 * 1024)}))),
        VerifyError::Jws(JwsError::TooLarge { limit: 8192 }),
    );
    cases
}

/// Tokens that must pass.
pub(crate) fn valid(keys: &Keys) -> Vec<(&'static str, String)> {
    let Keys { ed, es, .. } = keys;
    vec![
        ("EdDSA", ed.sign(&claims(ISSUER))),
        ("ES256", es.sign(&claims(ISSUER))),
        (
            "typ application/AT+JWT",
            ed.sign_with(
                &header_with(ed, json!({"typ": "application/AT+JWT"})),
                &claims(ISSUER),
            ),
        ),
        (
            "aud as one string",
            es.sign(&claims_with(json!({"aud": "market-data-api"}))),
        ),
        (
            "expired within the leeway",
            ed.sign(&claims_with(json!({"exp": now() - 5}))),
        ),
    ]
}

#[tokio::test]
async fn hostile_tokens_are_refused_for_the_right_reason() {
    let keys = Keys::new();
    let verifier = static_verifier(&[&keys.ed, &keys.es]);
    let cases = cases(&keys);
    assert!(cases.len() >= 30);
    for (name, token, want) in cases {
        assert_eq!(verifier.verify(&token).await, Err(want), "{name}");
    }
    for (name, token) in valid(&keys) {
        let claims = verifier
            .verify(&token)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(claims.client_id, "client-1");
    }
}

#[tokio::test]
async fn an_algorithm_left_out_of_the_allow_list_is_refused() {
    let keys = Keys::new();
    let verifier = tessera_verify::Verifier::builder(ISSUER, crate::helpers::AUDIENCE)
        .static_keys(crate::helpers::jwks(&[&keys.ed, &keys.es]))
        .algorithms(&[tessera_verify::Algorithm::ES256])
        .build()
        .unwrap();
    assert_eq!(
        verifier.verify(&keys.ed.sign(&claims(ISSUER))).await,
        Err(VerifyError::Jws(JwsError::AlgorithmNotAllowed))
    );
    assert!(verifier
        .verify(&keys.es.sign(&claims(ISSUER)))
        .await
        .is_ok());
}

#[tokio::test]
async fn error_messages_never_echo_the_token() {
    let keys = Keys::new();
    let verifier = static_verifier(&[&keys.ed]);
    for (name, token, _) in cases(&keys) {
        let message = verifier.verify(&token).await.unwrap_err().to_string();
        for part in token.split('.').filter(|p| p.len() >= 8) {
            assert!(!message.contains(part), "{name}: {message}");
        }
        assert!(
            !message.contains("etc/passwd") && !message.contains("OR 1=1"),
            "{name}"
        );
    }
}
