//! The pages, one module per resource: overview, plans, clients, organizations, keys, and the activity
//! (the audit events of changes). Each reads and
//! writes through the admin API with the session's token (`api.rs`); a write answers with a
//! redirect to the page that shows its result (or, for a new secret, with the one page that
//! shows it).

use axum::Router;

use super::api::ApiError;
use super::session::Session;
use super::{Console, Fail};

mod activity;
mod clients;
mod keys;
mod orgs;
mod overview;
mod plans;

/// The pages' routes.
pub(super) fn router() -> Router<Console> {
    Router::new()
        .merge(overview::router())
        .merge(plans::router())
        .merge(clients::router())
        .merge(keys::router())
        .merge(orgs::router())
        .merge(activity::router())
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
