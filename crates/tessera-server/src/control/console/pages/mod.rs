//! The pages, one module per resource: overview, plans, clients, organizations, keys, and the activity
//! (the audit events of changes). Each reads and
//! writes through the admin API with the session's token (`api.rs`); a write answers with a
//! redirect to the page that shows its result (or, for a new secret, with the one page that
//! shows it).

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Redirect, Response};
use axum::Router;
use tessera_proto::form::encode_component as seg;

use super::api::ApiError;
use super::extract::html;
use super::session::Session;
use super::{view, Console, Fail};

mod activity;
mod clients;
mod keys;
mod orgs;
mod overview;
mod plans;

/// The pages' routes; an organization's admin reaches only its organization's
/// ([`portal_only`]).
pub(super) fn router(console: &Console) -> Router<Console> {
    Router::new()
        .merge(overview::router())
        .merge(plans::router())
        .merge(clients::router())
        .merge(keys::router())
        .merge(orgs::router())
        .merge(activity::router())
        .route_layer(middleware::from_fn_with_state(console.clone(), portal_only))
}

/// An organization's own admin (issue 28) sees its organization's pages only, its
/// developer portal: the overview sends it to its organization's page, and any other page
/// is answered 404, as the admin API answers anything outside its organization (which it
/// would refuse here all the same). Other sessions, and none, pass.
async fn portal_only(State(console): State<Console>, request: Request, next: Next) -> Response {
    let now = console.app.clock().now();
    let Some(org) = console.sessions.org(request.headers(), now) else {
        return next.run(request).await;
    };
    let home = format!("/console/orgs/{}", seg(&org));
    let path = request.uri().path();
    if path == "/console/" {
        return Redirect::to(&home).into_response();
    }
    if path == home
        || path
            .strip_prefix(home.as_str())
            .is_some_and(|rest| rest.starts_with('/'))
    {
        return next.run(request).await;
    }
    let session = console.session(request.headers()).ok();
    html(
        StatusCode::NOT_FOUND,
        view::problem(
            session.as_ref(),
            "Not found",
            "There is no such page in your organization's console.",
        ),
    )
}

/// Turns an API error into the page that says it.
fn api(session: &Session) -> impl Fn(ApiError) -> Fail + '_ {
    move |e| Fail::Api(Some(Box::new(session.clone())), e)
}

/// `GET path` of the admin API with the session's token, its JSON answer read as `T`.
async fn get_json<T: serde::de::DeserializeOwned>(
    console: &Console,
    session: &Session,
    path: &str,
) -> Result<T, Fail> {
    console
        .api
        .get(session, path)
        .await
        .and_then(|a| a.json())
        .map_err(api(session))
}

/// `GET path` of the admin API with the session's token: its JSON answer read as `T`, and
/// its `ETag` (`*` when it has none), for the form that changes it.
async fn get_tagged<T: serde::de::DeserializeOwned>(
    console: &Console,
    session: &Session,
    path: &str,
) -> Result<(T, String), Fail> {
    let answer = console.api.get(session, path).await.map_err(api(session))?;
    let value = answer.json().map_err(api(session))?;
    Ok((value, answer.etag.unwrap_or_else(|| "*".into())))
}

/// The usage query of `days`: from the first to the last.
fn days_query(days: &[String]) -> String {
    format!(
        "from={}&to={}",
        days.first().map_or("", String::as_str),
        days.last().map_or("", String::as_str)
    )
}
