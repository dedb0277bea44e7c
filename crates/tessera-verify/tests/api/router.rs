//! The extractors behind a small Router: RFC 6750 section 3 answers for every hostile token,
//! and the router still serving a good token afterwards.

use axum::body::{to_bytes, Body};
use axum::http::{header, Request, StatusCode};
use axum::routing::{get, post};
use axum::Router;
use serde_json::{json, Value};
use tessera_verify::{RequiredScope, Scoped, UserToken, VerifiedToken, Verifier};
use tower::ServiceExt;

use crate::helpers::{claims, static_verifier, ISSUER};
use crate::hostile::{cases, Keys};

struct QuotesRead;
impl RequiredScope for QuotesRead {
    const SCOPE: &'static str = "quotes:read";
}

struct OrdersWrite;
impl RequiredScope for OrdersWrite {
    const SCOPE: &'static str = "orders:write";
}

pub(crate) fn app(verifier: Verifier) -> Router {
    Router::new()
        .route(
            "/whoami",
            get(|t: VerifiedToken| async move { t.sub.clone() }),
        )
        .route(
            "/quotes",
            get(|t: Scoped<QuotesRead>| async move { format!("quotes for {}", t.client_id) }),
        )
        .route(
            "/orders",
            post(|_: Scoped<OrdersWrite>| async { "ordered" }),
        )
        .route("/me", get(|t: UserToken| async move { t.sub.clone() }))
        .route(
            "/me/quotes",
            get(|_: Scoped<QuotesRead>, u: UserToken| async move { u.sub.clone() }),
        )
        .with_state(verifier)
}

pub(crate) struct Answer {
    pub status: StatusCode,
    pub challenge: Option<String>,
    pub body: Value,
}

pub(crate) async fn call(app: &Router, request: Request<Body>) -> Answer {
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let challenge = response
        .headers()
        .get(header::WWW_AUTHENTICATE)
        .map(|h| h.to_str().unwrap().to_owned());
    let bytes = to_bytes(response.into_body(), 1 << 20).await.unwrap();
    let body = serde_json::from_slice(&bytes)
        .unwrap_or(Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    Answer {
        status,
        challenge,
        body,
    }
}

pub(crate) fn get_with(uri: &str, authorization: Option<&str>) -> Request<Body> {
    let mut req = Request::get(uri);
    if let Some(value) = authorization {
        req = req.header(header::AUTHORIZATION, value);
    }
    req.body(Body::empty()).unwrap()
}

/// `GET /whoami` with `token` as Bearer and, if any, `presented` as the client certificate
/// the TLS acceptor put on the request.
pub(crate) fn whoami_with_certificate(
    token: &str,
    presented: Option<tessera_verify::ClientCertificate>,
) -> Request<Body> {
    let mut request = get_with("/whoami", Some(&format!("Bearer {token}")));
    if let Some(presented) = presented {
        request.extensions_mut().insert(presented);
    }
    request
}

pub(crate) async fn bearer(app: &Router, uri: &str, token: &str) -> Answer {
    call(app, get_with(uri, Some(&format!("Bearer {token}")))).await
}

#[tokio::test]
async fn hostile_tokens_get_invalid_token_and_good_ones_still_pass() {
    let keys = Keys::new();
    let app = app(static_verifier(&[&keys.ed, &keys.es]));

    for (name, token, want) in cases(&keys) {
        let answer = if token.is_empty() {
            // An empty value is no b64token: 400 invalid_request, tested below.
            continue;
        } else {
            bearer(&app, "/whoami", &token).await
        };
        assert_eq!(answer.status, StatusCode::UNAUTHORIZED, "{name}");
        let description = want.to_string();
        assert_eq!(
            answer.challenge.as_deref(),
            Some(
                format!(
                    "Bearer realm=\"market-data-api\", error=\"invalid_token\", \
                     error_description=\"{description}\""
                )
                .as_str()
            ),
            "{name}"
        );
        assert_eq!(
            answer.body,
            json!({"error": "invalid_token", "error_description": description}),
            "{name}"
        );
    }

    for key in [&keys.ed, &keys.es] {
        let answer = bearer(&app, "/whoami", &key.sign(&claims(ISSUER))).await;
        assert_eq!(answer.status, StatusCode::OK);
        assert_eq!(answer.body, Value::String("client-1".into()));
        assert!(answer.challenge.is_none());
    }
}

#[tokio::test]
async fn missing_and_malformed_credentials() {
    let keys = Keys::new();
    let app = app(static_verifier(&[&keys.ed]));
    let good = keys.ed.sign(&claims(ISSUER));
    let bare = Some("Bearer realm=\"market-data-api\"".to_owned());

    // No token, or another scheme: 401, a bare challenge, no error code, no body.
    for authorization in [None, Some("Basic Y2xpZW50LTE6c2VjcmV0"), Some("Token abc")] {
        let answer = call(&app, get_with("/whoami", authorization)).await;
        assert_eq!(answer.status, StatusCode::UNAUTHORIZED, "{authorization:?}");
        assert_eq!(answer.challenge, bare, "{authorization:?}");
        assert_eq!(answer.body, Value::String(String::new()));
    }

    // A malformed Bearer value: 400 invalid_request (RFC 6750 3.1).
    for authorization in ["Bearer", "Bearer ", "Bearer a b", "Bearer \"x\""] {
        let answer = call(&app, get_with("/whoami", Some(authorization))).await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{authorization}");
        assert_eq!(answer.body["error"], "invalid_request", "{authorization}");
        assert!(answer
            .challenge
            .unwrap()
            .starts_with("Bearer realm=\"market-data-api\", error=\"invalid_request\""));
    }

    // A token in the query is refused, alone or beside a good header.
    for authorization in [None, Some(format!("Bearer {good}"))] {
        let uri = format!("/whoami?access_token={good}");
        let answer = call(&app, get_with(&uri, authorization.as_deref())).await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST);
        assert_eq!(answer.body["error"], "invalid_request");
        let text = answer.body.to_string() + &answer.challenge.unwrap();
        assert!(!text.contains(&good), "the token is not echoed");
    }

    // A token in a form body is never read.
    let form = Request::post("/orders")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from(format!("access_token={good}")))
        .unwrap();
    let answer = call(&app, form).await;
    assert_eq!(answer.status, StatusCode::UNAUTHORIZED);
    assert_eq!(answer.challenge, bare);

    // The same token in the header works.
    let answer = bearer(&app, "/whoami", &good).await;
    assert_eq!(answer.status, StatusCode::OK);
}

#[tokio::test]
async fn scope_and_user_requirements() {
    let keys = Keys::new();
    let app = app(static_verifier(&[&keys.ed]));
    let app_token = keys.ed.sign(&claims(ISSUER));

    let answer = bearer(&app, "/quotes", &app_token).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.body, Value::String("quotes for client-1".into()));

    let request = Request::post("/orders")
        .header(header::AUTHORIZATION, format!("Bearer {app_token}"))
        .body(Body::empty())
        .unwrap();
    let answer = call(&app, request).await;
    assert_eq!(answer.status, StatusCode::FORBIDDEN);
    assert_eq!(
        answer.challenge.as_deref(),
        Some(
            "Bearer realm=\"market-data-api\", error=\"insufficient_scope\", \
             error_description=\"the token lacks the scope orders:write\", scope=\"orders:write\""
        )
    );
    assert_eq!(answer.body["error"], "insufficient_scope");

    // An application-only token where a user is needed (RFC 9470).
    let answer = bearer(&app, "/me", &app_token).await;
    assert_eq!(answer.status, StatusCode::UNAUTHORIZED);
    let challenge = answer.challenge.unwrap();
    assert!(
        challenge.starts_with(
            "Bearer realm=\"market-data-api\", error=\"insufficient_user_authentication\", \
             error_description=\""
        ),
        "{challenge}"
    );
    assert_eq!(answer.body["error"], "insufficient_user_authentication");
    assert!(answer.body["error_description"]
        .as_str()
        .unwrap()
        .contains("application-only"));

    // A token that acts for a user.
    let mut user = claims(ISSUER);
    user["sub"] = json!("user-42");
    user["app_only"] = json!(false);
    let user = keys.ed.sign(&user);
    let answer = bearer(&app, "/me", &user).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.body, Value::String("user-42".into()));

    // Two requirements in one handler.
    let answer = bearer(&app, "/me/quotes", &user).await;
    assert_eq!(answer.status, StatusCode::OK);
    let answer = bearer(&app, "/me/quotes", &app_token).await;
    assert_eq!(answer.body["error"], "insufficient_user_authentication");
}

/// RFC 8705 section 3: a token bound to a certificate passes only with that certificate
/// in the request (put there by the API's TLS acceptor or from a trusted proxy's header).
#[tokio::test]
async fn a_certificate_bound_token_needs_its_certificate() {
    use tessera_verify::ClientCertificate;
    let keys = Keys::new();
    let app = app(static_verifier(&[&keys.ed]));
    let certificate = ClientCertificate(b"the client's DER certificate".to_vec());
    let mut bound = claims(ISSUER);
    bound["cnf"] = json!({"x5t#S256": certificate.thumbprint()});
    let token = keys.ed.sign(&bound);
    let with = |presented| whoami_with_certificate(&token, presented);
    assert_eq!(
        call(&app, with(Some(certificate.clone()))).await.status,
        StatusCode::OK
    );
    for presented in [
        None,
        Some(ClientCertificate(b"another certificate".to_vec())),
    ] {
        let answer = call(&app, with(presented)).await;
        assert_eq!(answer.status, StatusCode::UNAUTHORIZED);
        let challenge = answer.challenge.unwrap();
        assert!(challenge.contains("invalid_token"), "{challenge}");
    }
    // An unbound token needs none.
    let plain = keys.ed.sign(&claims(ISSUER));
    assert_eq!(bearer(&app, "/whoami", &plain).await.status, StatusCode::OK);
}

/// RFC 9449 section 7.1, RFC 8705 section 3: `verify`, which sees no proof and no
/// certificate, refuses bound tokens; `verify_request` takes them with what binds them.
#[tokio::test]
async fn verify_alone_refuses_bound_tokens() {
    use axum::http::{HeaderMap, Method, Uri};
    use tessera_verify::{AccessRequest, ClientCertificate, VerifyError};
    let keys = Keys::new();
    let verifier = static_verifier(&[&keys.ed]);
    let certificate = ClientCertificate(b"the client's DER certificate".to_vec());
    let bound = |cnf: Value| {
        let mut claims = claims(ISSUER);
        claims["cnf"] = cnf;
        keys.ed.sign(&claims)
    };
    let to_certificate = bound(json!({"x5t#S256": certificate.thumbprint()}));
    let to_key = bound(json!({"jkt": "0ZcOCORZNYy-DWpqq30jZyJGHTN0d2HglBV3uiguA4I"}));
    assert_eq!(
        verifier.verify(&to_certificate).await.unwrap_err(),
        VerifyError::CertificateMismatch
    );
    assert_eq!(
        verifier.verify(&to_key).await.unwrap_err(),
        VerifyError::DpopBound
    );
    assert!(verifier
        .verify(&keys.ed.sign(&claims(ISSUER)))
        .await
        .is_ok());
    // A `cnf` naming neither a key nor a certificate binds to nothing this kit checks.
    assert!(verifier.verify(&bound(json!({}))).await.is_ok());

    let (method, uri) = (Method::GET, Uri::from_static("/whoami"));
    let mut headers = HeaderMap::new();
    headers.insert(
        header::AUTHORIZATION,
        format!("Bearer {to_certificate}").parse().unwrap(),
    );
    let request = AccessRequest::new(&method, &uri, &headers);
    let refused = verifier.verify_request(&request).await.unwrap_err();
    assert_eq!(
        refused.error(),
        &tessera_verify::AuthError::InvalidToken(VerifyError::CertificateMismatch)
    );
    let token = verifier
        .verify_request(&request.with_certificate(Some(&certificate)))
        .await
        .unwrap();
    assert_eq!(token.client_id, "client-1");
}

/// Without a resource URL the verifier cannot know the `htu` a proof must name (only the
/// caller's own `Host`), so it refuses DPoP-bound tokens rather than guess; with one, the
/// same request gets as far as checking the proof.
#[tokio::test]
async fn dpop_needs_a_resource_url() {
    let keys = Keys::new();
    let mut bound = claims(ISSUER);
    bound["cnf"] = json!({"jkt": "0ZcOCORZNYy-DWpqq30jZyJGHTN0d2HglBV3uiguA4I"});
    let token = keys.ed.sign(&bound);
    let request = || {
        Request::get("/whoami")
            .header(header::HOST, "api.example.com")
            .header(header::AUTHORIZATION, format!("DPoP {token}"))
            .header("dpop", "not.a.proof")
            .body(Body::empty())
            .unwrap()
    };
    let answer = call(&app(static_verifier(&[&keys.ed])), request()).await;
    assert_eq!(answer.status, StatusCode::UNAUTHORIZED);
    assert_eq!(answer.body["error"], "invalid_dpop_proof");
    assert_eq!(
        answer.body["error_description"],
        "this API cannot check DPoP proofs: it has no resource URL configured"
    );
    assert!(answer.challenge.unwrap().starts_with("DPoP "));

    let with_url = Verifier::builder(ISSUER, crate::helpers::AUDIENCE)
        .static_keys(crate::helpers::jwks(&[&keys.ed]))
        .resource_url("https://api.example.com")
        .build()
        .unwrap();
    let answer = call(&app(with_url), request()).await;
    assert_eq!(answer.body["error"], "invalid_dpop_proof");
    assert_ne!(
        answer.body["error_description"],
        "this API cannot check DPoP proofs: it has no resource URL configured"
    );
}

/// A token verified by one verifier in a request (a guard layer for one audience) is not
/// taken as verified by another verifier deeper in (a handler for another audience).
#[tokio::test]
async fn one_verifiers_result_does_not_pass_for_another() {
    use axum::extract::{FromRequestParts, State};
    use axum::middleware::{from_fn_with_state, Next};
    use axum::response::{IntoResponse, Response};

    async fn guard(
        State(verifier): State<Verifier>,
        request: Request<Body>,
        next: Next,
    ) -> Response {
        let (mut parts, body) = request.into_parts();
        match VerifiedToken::from_request_parts(&mut parts, &verifier).await {
            Ok(_) => next.run(Request::from_parts(parts, body)).await,
            Err(rejection) => rejection.into_response(),
        }
    }
    let keys = Keys::new();
    let outer = static_verifier(&[&keys.ed]);
    let inner =
        Verifier::with_static_keys(ISSUER, "oms-api", crate::helpers::jwks(&[&keys.ed])).unwrap();
    let app = app(inner).layer(from_fn_with_state(outer, guard));
    // For market-data-api and news-api only: the guard takes it, the oms-api handler not.
    let answer = bearer(&app, "/whoami", &keys.ed.sign(&claims(ISSUER))).await;
    assert_eq!(answer.status, StatusCode::UNAUTHORIZED);
    assert_eq!(
        answer.body["error_description"],
        "the token is not meant for this API"
    );
}
