//! The signing keys, and rotating to a new one.

use axum::extract::State;
use axum::http::Method;
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use maud::html;
use tessera_proto::admin as api;
use tessera_proto::clock::rfc3339;

use crate::control::console::extract::{Form, Page};
use crate::control::console::session::Session;
use crate::control::console::view::{csrf, time, Section};
use crate::control::console::{Console, Fail};

use super::get_json;

pub(super) fn router() -> Router<Console> {
    Router::new()
        .route("/console/keys", get(keys))
        .route("/console/keys/rotate", post(rotate_keys))
}

async fn keys(State(console): State<Console>, session: Session) -> Result<Page, Fail> {
    let keys: api::KeyList = get_json(&console, &session, "/keys").await?;
    let body = html! {
        h1 { "Signing keys" }
        p { "Published at " code { "/.well-known/jwks.json" } ". A new key is published before it signs, so that APIs learn it first; "
            "a replaced key stays published while tokens it signed may live." }
        @if keys.keys.is_empty() {
            p.empty { "No keys: the server creates one when it starts." }
        } @else {
            div.table-wrap { table.cards {
                thead { tr { th scope="col" { "Key id" } th scope="col" { "Algorithm" } th scope="col" { "Status" } th scope="col" { "Created" } th scope="col" { "Signs from" } th scope="col" { "Retires" } th scope="col" { "Unpublished" } } }
                tbody { @for key in keys.keys.iter().rev() {
                    tr {
                        td.kid data-label="Key id" { code { (key.kid) } } td data-label="Algorithm" { (key.alg) }
                        td data-label="Status" { span class={"badge " (key.status.as_str())} { (key.status.as_str()) } }
                        td data-label="Created" { (time(key.created_at)) } td data-label="Signs from" { (time(key.activates_at)) }
                        td data-label="Retires" { @match &key.retires_at { Some(t) => (time(*t)), None => "—" } }
                        td data-label="Unpublished" { @match &key.unpublished_at { Some(t) => (time(*t)), None => "—" } }
                    }
                } }
            } }
        }
        @if session.write {
            h2 { "Rotate" }
            form.stack method="post" action="/console/keys/rotate" {
                (csrf(&session))
                label for="activate-in" { "The new key signs after" }
                select #activate-in name="activate_in_secs" {
                    option value="0" { "no delay (APIs that cache keys may refuse its first tokens)" }
                    option value="600" selected { "10 minutes" }
                    option value="3600" { "1 hour" }
                    option value="86400" { "1 day" }
                }
                label for="key-alg" { "Algorithm" }
                select #key-alg name="alg" {
                    option value="" { "the server's (" (console.app.config().signing_alg.as_str()) ")" }
                    option value="EdDSA" { "EdDSA" }
                    option value="ES256" { "ES256" }
                }
                button type="submit" { "Rotate signing key" }
            }
        }
    };
    Ok(Page::new("Keys", Section::Keys, &session, body))
}

async fn rotate_keys(State(console): State<Console>, form: Form) -> Result<Response, Fail> {
    let input = api::KeyRotation {
        activate_in_secs: Some(
            form.field("activate_in_secs")
                .and_then(|v| v.parse::<i64>().ok())
                .unwrap_or(600),
        ),
        alg: form
            .field("alg")
            .filter(|a| !a.is_empty())
            .map(str::to_owned),
    };
    match console
        .api
        .call(
            &form.session,
            Method::POST,
            "/keys/rotate",
            Some(&input),
            &[],
        )
        .await
        .and_then(|a| a.json::<api::Key>())
    {
        Ok(key) => Ok(console.redirect(
            &form,
            "/console/keys",
            format!(
                "Key {} published; it signs from {}.",
                key.kid,
                rfc3339(key.activates_at)
            ),
        )),
        Err(e) => Ok(console.refused(&form, "/console/keys", e)),
    }
}
