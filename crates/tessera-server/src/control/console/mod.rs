//! The operator console at `/console/` (issue 14): server-rendered pages for plans,
//! clients, usage and keys, for the people who run Tessera.
//!
//! It is one more client of the admin API, with no door of its own: sign-in asks the token
//! endpoint for a `tessera-admin` (else `tessera-admin-read`) token with the admin client's
//! id and secret, and every page reads and writes through the admin API's router with that
//! token (`api.rs`), in-process. What the API refuses the token, the console cannot do.
//!
//! - `session.rs`: the in-memory sessions the tokens are kept in, server-side; cookies.
//! - `sso.rs`: single sign-on through an OpenID Connect provider (issue 29): a person's
//!   session calls the admin API as that person, with the right the person's group gives.
//! - `api.rs`: the calls; their answers are the admin contract's objects
//!   ([`tessera_proto::admin`]).
//! - `extract.rs`: what a handler takes, the session (else the sign-in page) and a form of
//!   its pages with the CSRF token checked, and the page it answers.
//! - `view.rs`: the page frame and shared pieces (times, the SVG usage chart).
//! - `pages/`: one module per resource: overview, plans, clients, keys.
//! - here: the routes, sign-in and sign-out, the assets and the security headers every
//!   answer carries.
//!
//! Every asset is compiled into the binary (`assets/`); nothing is fetched at run time.

use axum::body::Body;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::Router;
use maud::html;
use std::sync::Arc;
use tessera_proto::form::encode_component as seg;
use zeroize::Zeroizing;

use crate::AppState;

mod api;
mod extract;
mod pages;
mod session;
mod sso;
mod view;

pub(crate) use sso::Sso;

use api::{Api, ApiError, SignIn};
use extract::{html, Form};
use session::{Session, Sessions};

/// The policy of every console answer: only this origin's script, style and forms; no
/// inline script or style, no framing, no plugins.
pub(crate) const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; \
     frame-ancestors 'none'; base-uri 'none'";

const CSS: &str = include_str!("assets/console.css");
const JS: &str = include_str!("assets/console.js");
const ICON: &str = include_str!("assets/favicon.svg");

/// What the console's handlers share.
#[derive(Debug, Clone)]
pub(crate) struct Console {
    app: AppState,
    api: Api,
    sessions: Arc<Sessions>,
    /// Whether cookies get `Secure`: the issuer (the console's public URL) is https.
    secure: bool,
    /// Single sign-on through an OpenID Connect provider, when configured (`sso.rs`).
    sso: Option<Arc<Sso>>,
    /// Whether an admin client's id and secret may sign in (`--console-client-sign-in`).
    client_sign_in: bool,
}

/// The console's routes, under `/console/`.
pub(crate) fn router(state: &AppState) -> Router<AppState> {
    let console = Console {
        app: state.clone(),
        api: Api::new(state),
        sessions: Arc::default(),
        secure: state.issuer().starts_with("https://"),
        sso: state.console_sso().cloned(),
        client_sign_in: state.config().console_client_sign_in == crate::config::Switch::On,
    };
    Router::new()
        .route(
            "/console",
            get(|| async { Redirect::permanent("/console/") }),
        )
        .route("/console/sign-in", get(sign_in_form).post(sign_in))
        .route("/console/sign-in/sso", get(sso_start))
        .route(sso::CALLBACK_PATH, get(sso_callback))
        .route("/console/sign-out", post(sign_out))
        .merge(pages::router(&console))
        .route(
            "/console/assets/console.css",
            get(|| async { asset("text/css; charset=utf-8", CSS) }),
        )
        .route(
            "/console/assets/console.js",
            get(|| async { asset("text/javascript; charset=utf-8", JS) }),
        )
        .route(
            "/console/assets/favicon.svg",
            get(|| async { asset("image/svg+xml", ICON) }),
        )
        .layer(middleware::from_fn(security_headers))
        .with_state(console)
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "max-age=300"),
        ],
        body,
    )
        .into_response()
}

/// Headers on every console answer: the CSP, no sniffing, no framing, no referrer, and
/// pages (which may show a secret) never stored.
async fn security_headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    let set = |headers: &mut HeaderMap, name: HeaderName, value: &'static str| {
        headers.insert(name, HeaderValue::from_static(value));
    };
    set(
        headers,
        header::CONTENT_SECURITY_POLICY,
        CONTENT_SECURITY_POLICY,
    );
    set(headers, header::X_CONTENT_TYPE_OPTIONS, "nosniff");
    set(headers, header::X_FRAME_OPTIONS, "DENY");
    set(headers, header::REFERRER_POLICY, "no-referrer");
    if !headers.contains_key(header::CACHE_CONTROL) {
        set(headers, header::CACHE_CONTROL, "no-store");
    }
    response
}

/// Why a console request ends other than with its page.
#[derive(Debug)]
enum Fail {
    /// No live session, or its token was refused: to the sign-in page.
    SignIn,
    /// A form without this session's CSRF token.
    Csrf(Option<Box<Session>>),
    /// A refusal of the admin API, shown on a page of its own.
    Api(Option<Box<Session>>, ApiError),
    /// A change posted by a read-only sign-in (a `tessera-admin-read` client, a person of
    /// the read group).
    ReadOnly(Box<Session>),
    /// A request the console cannot read.
    BadRequest(Option<Box<Session>>, String),
    /// A body that could not be read (too large), refused as axum refuses it.
    Body(BytesRejection),
}

impl IntoResponse for Fail {
    fn into_response(self) -> Response {
        let (status, session, title, detail) = match self {
            Fail::SignIn | Fail::Api(_, ApiError::SignedOut) => {
                return Redirect::to("/console/sign-in").into_response()
            }
            Fail::Body(rejection) => return rejection.into_response(),
            Fail::Csrf(session) => (
                StatusCode::FORBIDDEN,
                session,
                "Form expired".to_owned(),
                "This form was not sent from this session's pages (or the session changed). \
                 Go back, reload the page and try again."
                    .to_owned(),
            ),
            Fail::Api(
                session,
                ApiError::Problem {
                    status,
                    title,
                    detail,
                    ..
                },
            ) => (status, session, title, detail),
            Fail::ReadOnly(session) => {
                let detail = if is_person(&session) {
                    "You are signed in through the console's read group: you can look at \
                     everything and change nothing. Changes need its admin group."
                } else {
                    "This admin client's plan grants tessera-admin-read only: it can look at \
                     everything and change nothing. Changes need tessera-admin."
                };
                (
                    StatusCode::FORBIDDEN,
                    Some(session),
                    "Read-only".to_owned(),
                    detail.to_owned(),
                )
            }
            Fail::BadRequest(session, detail) => (
                StatusCode::BAD_REQUEST,
                session,
                "Bad request".to_owned(),
                detail,
            ),
        };
        html(status, view::problem(session.as_deref(), &title, &detail))
    }
}

/// Whether a session is a person's (single sign-on) rather than an admin client's.
fn is_person(session: &Session) -> bool {
    matches!(session.credential, session::Credential::Person(_))
}

impl Console {
    /// The request's live session, or the way to the sign-in page.
    fn session(&self, headers: &HeaderMap) -> Result<Session, Fail> {
        self.sessions
            .get(headers, self.app.clock().now())
            .ok_or(Fail::SignIn)
    }

    /// Back to `to`, with a message on the page shown there.
    fn redirect(&self, form: &Form, to: &str, message: String) -> Response {
        self.sessions.flash(&form.id, message, false);
        Redirect::to(to).into_response()
    }

    /// Back to `to`, with what went wrong on the page shown there; a refused token signs
    /// out.
    fn refused(&self, form: &Form, to: &str, error: ApiError) -> Response {
        match error {
            ApiError::SignedOut => Fail::SignIn.into_response(),
            ApiError::Problem { title, detail, .. } => {
                let message = if detail.is_empty() {
                    title
                } else {
                    format!("{title}: {detail}")
                };
                self.sessions.flash(&form.id, message, true);
                Redirect::to(to).into_response()
            }
        }
    }
}

/// A form body's fields (`application/x-www-form-urlencoded`).
fn read_form(body: &[u8]) -> Result<Vec<(String, String)>, String> {
    let body = std::str::from_utf8(body).map_err(|_| "the form is not UTF-8".to_owned())?;
    tessera_proto::form::parse(body).map_err(|e| e.to_string())
}

/// The first value of form field `name`.
fn field<'a>(pairs: &'a [(String, String)], name: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

async fn sign_in_form(State(console): State<Console>, session: Option<Session>) -> Response {
    if session.is_some() {
        return Redirect::to("/console/").into_response();
    }
    sign_in_page(&console, StatusCode::OK, None)
}

/// The sign-in form, with a fresh double-submit token in a cookie of its own.
fn sign_in_page(console: &Console, status: StatusCode, error: Option<&str>) -> Response {
    let token = session::random_token();
    let body = html! {
        div.narrow {
            h1 { "Sign in to the Tessera console" }
            @if let Some(error) = error {
                p.flash.error role="alert" { (error) }
            }
            @if console.sso.is_some() {
                p { "Sign in with your company account." }
                p { a.button #sso href="/console/sign-in/sso" { "Sign in with single sign-on" } }
            }
            @if console.client_sign_in {
                @if console.sso.is_some() {
                    h2 { "Or with an admin client" }
                }
                p {
                    "Use the id and secret of an admin client: one on a plan with the scope "
                    code { "tessera-admin" } " (or " code { "tessera-admin-read" } " to look only). "
                    code { "tessera serve --demo" } " prints one."
                }
                p {
                    "An organization's administrator signs in with a client of the organization "
                    "whose plan grants " code { "tessera-org-admin" } ", and sees that organization only."
                }
                form method="post" action="/console/sign-in" {
                    input type="hidden" name="csrf" value=(token);
                    label for="client_id" { "Client id" }
                    input #client_id type="text" name="client_id" required autocomplete="username" spellcheck="false";
                    label for="client_secret" { "Client secret" }
                    input #client_secret type="password" name="client_secret" required autocomplete="current-password";
                    button type="submit" { "Sign in" }
                }
            }
        }
    };
    let cookie = session::set_cookie(session::SIGN_IN_COOKIE, &token, 3600, console.secure);
    (
        status,
        [(header::SET_COOKIE, cookie)],
        html(
            StatusCode::OK,
            view::page("Sign in", view::Section::None, None, body),
        ),
    )
        .into_response()
}

async fn sign_in(State(console): State<Console>, request: Request<Body>) -> Response {
    if !console.client_sign_in {
        return sign_in_page(
            &console,
            StatusCode::FORBIDDEN,
            Some(
                "Signing in with an admin client's secret is turned off here: use single sign-on.",
            ),
        );
    }
    let (parts, body) = request.into_parts();
    let Ok(body) = axum::body::to_bytes(body, 16 * 1024).await else {
        return sign_in_page(
            &console,
            StatusCode::BAD_REQUEST,
            Some("The form is too large."),
        );
    };
    let pairs = match read_form(&body) {
        Ok(pairs) => pairs,
        Err(e) => return sign_in_page(&console, StatusCode::BAD_REQUEST, Some(&e)),
    };
    let posted = field(&pairs, "csrf").unwrap_or_default();
    let expected = session::cookie(&parts.headers, session::SIGN_IN_COOKIE).unwrap_or_default();
    if posted.is_empty() || !session::same(posted, expected) {
        return sign_in_page(
            &console,
            StatusCode::FORBIDDEN,
            Some("The form expired; please sign in again."),
        );
    }
    let id = field(&pairs, "client_id").unwrap_or_default().trim();
    let secret = Zeroizing::new(
        field(&pairs, "client_secret")
            .unwrap_or_default()
            .trim()
            .to_owned(),
    );
    sign_in_with(&console, &parts, id, &secret).await
}

/// Starts a single sign-on (`sso.rs`): to the provider, with the `state` in a cookie that
/// comes back with its redirect (`SameSite=Lax`: a top-level navigation from the provider).
async fn sso_start(State(console): State<Console>) -> Response {
    let Some(sso) = &console.sso else {
        return StatusCode::NOT_FOUND.into_response();
    };
    match sso.start(console.app.clock().now()).await {
        Ok(started) => {
            let cookie = session::set_cookie_with(
                sso::STATE_COOKIE,
                &started.state,
                sso::PENDING_LIFETIME as u64,
                console.secure,
                "Lax",
            );
            let mut response = Redirect::to(&started.location).into_response();
            if let Ok(value) = HeaderValue::from_str(&cookie) {
                response.headers_mut().insert(header::SET_COOKIE, value);
            }
            response
        }
        Err(e) => sign_in_page(
            &console,
            StatusCode::SERVICE_UNAVAILABLE,
            Some(&capitalized(&e)),
        ),
    }
}

/// The provider's redirect back: the sign-in ends (`sso.rs`) and a session starts for the
/// person, or the sign-in page says why not. The session's cookie is `SameSite=Strict`, which
/// a browser does not send on a navigation that began at the provider: the answer is a page
/// that goes on to the console itself.
async fn sso_callback(
    State(console): State<Console>,
    uri: axum::http::Uri,
    headers: HeaderMap,
) -> Response {
    let Some(sso) = &console.sso else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let query = match tessera_proto::form::parse(uri.query().unwrap_or_default()) {
        Ok(query) => query,
        Err(e) => return sign_in_page(&console, StatusCode::BAD_REQUEST, Some(&e.to_string())),
    };
    let now = console.app.clock().now();
    let cookie = session::cookie(&headers, sso::STATE_COOKIE);
    let clear = session::set_cookie_with(sso::STATE_COOKIE, "", 0, console.secure, "Lax");
    let mut response = match sso.finish(&query, cookie, now).await {
        Ok(person) => {
            tracing::info!(
                target: "tessera::audit",
                event = "console_sign_in",
                actor = person.actor(),
                write = person.write,
                "a person signed in to the console"
            );
            let write = person.write;
            let started = console.sessions.start(
                Session {
                    client_id: person.actor(),
                    credential: session::Credential::Person(Arc::new(person)),
                    csrf: session::random_token(),
                    write,
                    org: None,
                    expires_at: now + session::MAX_LIFETIME as i64,
                    flash: None,
                    origin: session::Origin::default(),
                },
                now,
            );
            match started {
                Some(id) => signed_in(&console, &id),
                None => sign_in_page(
                    &console,
                    StatusCode::SERVICE_UNAVAILABLE,
                    Some("Too many console sessions are open. Try again later."),
                ),
            }
        }
        Err(e) => {
            let status = match e {
                sso::SsoError::Provider(_) => StatusCode::SERVICE_UNAVAILABLE,
                sso::SsoError::NoRole => StatusCode::FORBIDDEN,
                sso::SsoError::State | sso::SsoError::NoCode => StatusCode::BAD_REQUEST,
                _ => StatusCode::UNAUTHORIZED,
            };
            tracing::info!(
                target: "tessera::audit",
                event = "console_sign_in_refused",
                reason = %e,
                "a console sign-in through the provider was refused"
            );
            sign_in_page(&console, status, Some(&capitalized(&e)))
        }
    };
    if let Ok(value) = HeaderValue::from_str(&clear) {
        response.headers_mut().append(header::SET_COOKIE, value);
    }
    response
}

/// The answer to a single sign-on: the session's cookie, and a page that goes on to the
/// console (a navigation of this origin's, which carries the `SameSite=Strict` cookie).
fn signed_in(console: &Console, id: &str) -> Response {
    let body = html! {
        (maud::DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta http-equiv="refresh" content="0; url=/console/";
                title { "Signed in · Tessera console" }
                link rel="stylesheet" href="/console/assets/console.css";
            }
            body {
                main id="main" {
                    p { "Signed in. " a href="/console/" { "Go to the console" } }
                }
            }
        }
    };
    let mut response = html(StatusCode::OK, body);
    let cookie = session::set_cookie(session::COOKIE, id, session::MAX_LIFETIME, console.secure);
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().append(header::SET_COOKIE, value);
    }
    response
}

/// An error's message as a sentence.
fn capitalized(e: &impl std::fmt::Display) -> String {
    let text = e.to_string();
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => format!("{}{}.", first.to_uppercase(), chars.as_str()),
        None => text,
    }
}

async fn sign_in_with(console: &Console, parts: &Parts, id: &str, secret: &str) -> Response {
    let refused = |status, message: &str| sign_in_page(console, status, Some(message));
    match console.api.sign_in(parts, id, secret).await {
        SignIn::Token {
            token,
            write,
            org,
            expires_in,
        } => {
            let lifetime = expires_in.min(session::MAX_LIFETIME);
            let now = console.app.clock().now();
            let Some(id) = console.sessions.start(
                Session {
                    credential: session::Credential::Token(Zeroizing::new(token)),
                    csrf: session::random_token(),
                    client_id: id.to_owned(),
                    write,
                    org: org.clone(),
                    expires_at: now + lifetime as i64,
                    flash: None,
                    origin: session::Origin::default(),
                },
                now,
            ) else {
                return refused(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "Too many console sessions are open. Try again later.",
                );
            };
            let home = match &org {
                Some(org) => format!("/console/orgs/{}", seg(org)),
                None => "/console/".to_owned(),
            };
            let mut response = Redirect::to(&home).into_response();
            let headers = response.headers_mut();
            for cookie in [
                session::set_cookie(session::COOKIE, &id, lifetime, console.secure),
                session::set_cookie(session::SIGN_IN_COOKIE, "", 0, console.secure),
            ] {
                if let Ok(value) = HeaderValue::from_str(&cookie) {
                    headers.append(header::SET_COOKIE, value);
                }
            }
            response
        }
        SignIn::Refused => refused(
            StatusCode::UNAUTHORIZED,
            "Wrong client id or secret, or the client is disabled.",
        ),
        SignIn::NotAdmin => refused(
            StatusCode::FORBIDDEN,
            "This client's plan grants none of tessera-admin, tessera-admin-read and \
             tessera-org-admin (the last for a client of an organization).",
        ),
        SignIn::Throttled(retry) => refused(
            StatusCode::TOO_MANY_REQUESTS,
            &match retry {
                Some(secs) => {
                    format!("Too many failed sign-ins from this address. Try again in {secs} s.")
                }
                None => "Too many failed sign-ins from this address. Try again later.".into(),
            },
        ),
        SignIn::Failed(why) => refused(
            StatusCode::SERVICE_UNAVAILABLE,
            &format!("Signing in failed: {why}"),
        ),
    }
}

async fn sign_out(State(console): State<Console>, form: Form) -> Response {
    console.sessions.end(&form.id);
    let mut response = Redirect::to("/console/sign-in").into_response();
    if let Ok(value) =
        HeaderValue::from_str(&session::set_cookie(session::COOKIE, "", 0, console.secure))
    {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}
