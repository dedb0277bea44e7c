//! `GET /`: a small page for whoever opens the server's address in a browser, linking what
//! there is to see: the console, the metadata (RFC 8414), the keys (RFC 7517) and the API
//! description, and saying where the documentation is. It names nothing of the registry.

use axum::extract::State;
use axum::http::{header, HeaderValue};
use axum::response::{Html, IntoResponse};
use axum::routing::get;
use axum::Router;

use crate::AppState;

pub(crate) fn router() -> Router<AppState> {
    Router::new().route("/", get(home))
}

/// The page; its links are those this listener serves. Static text: nothing in it comes
/// from a request or the registry, so nothing needs escaping.
async fn home(State(state): State<AppState>) -> impl IntoResponse {
    let config = state.config();
    // With an admin listener of its own, the control plane is not served here.
    let control_here = config.admin_listen.is_none();
    let mut links = String::new();
    let mut link = |href: &str, text: &str| {
        links.push_str(&format!("<li><a href=\"{href}\">{text}</a></li>\n"));
    };
    if control_here && config.console() {
        link("/console/", "Operator console");
    }
    link(
        "/.well-known/oauth-authorization-server",
        "Authorization server metadata (RFC 8414)",
    );
    link("/.well-known/jwks.json", "Public signing keys (JWK Set)");
    if control_here {
        link("/openapi.json", "Admin API description (OpenAPI 3.1)");
    }
    let elsewhere = if control_here {
        ""
    } else {
        "<p>The console and the admin API are served on the admin listener.</p>\n"
    };
    let page = format!(
        "<!doctype html>\n<html lang=\"en\">\n<head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>Tessera</title></head>\n<body>\n<h1>Tessera</h1>\n\
         <p>An OAuth 2.0 authorization server for the client credentials grant. Clients get \
         tokens with <code>POST /connect/token</code>.</p>\n<ul>\n{links}</ul>\n{elsewhere}\
         <p>Documentation: the book in <code>docs/</code> of Tessera's source \
         (<code>mdbook serve docs</code>), and <code>man tessera</code> where it was \
         installed from its package.</p>\n</body>\n</html>\n"
    );
    (
        [
            (
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static("default-src 'none'"),
            ),
            (
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ),
        ],
        Html(page),
    )
}
