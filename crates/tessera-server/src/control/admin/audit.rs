//! `/admin/v1/audit-events`: the changes made through the admin API and the console, as the
//! store keeps them (`crate::audit::change` writes them with the changes; housekeeping prunes them by
//! age and count), the newest first, searchable.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use tessera_proto::admin as api;
use tessera_store::AuditQuery;

use super::auth::{Caller, Read};
use super::extract::Query;
use super::json;
use super::responses::ReadErrors;
use crate::control::problem::Problem;
use crate::AppState;

/// The most events one page holds.
const MAX_PAGE: u32 = 500;
/// The longest search text.
const MAX_TEXT: usize = 256;

pub(crate) fn router() -> Router<AppState> {
    Router::new().route("/audit-events", get(list_audit_events))
}

/// List the changes made through the admin API and the console, the newest first: who
/// (the admin client), what, to what, when, from where.
#[utoipa::path(get, path = "/admin/v1/audit-events", tag = "audit",
    params(("q" = Option<String>, Query,
            description = "Only events whose actor, action, object, source or channel contains this text (any case)"),
           ("before" = Option<i64>, Query, description = "next_before of the previous page"),
           ("limit" = Option<u32>, Query, minimum = 1, maximum = 500,
            description = "Events per page, 1 to 500 (default 100)")),
    responses((status = 200, description = "A page of audit events", body = api::AuditEventPage), ReadErrors),
    security(("admin_token" = ["tessera-admin-read"])))]
pub(crate) async fn list_audit_events(
    State(state): State<AppState>,
    _caller: Caller<Read>,
    query: Query,
) -> Result<Response, Problem> {
    let limit = query.number("limit", 100, 1..=MAX_PAGE)?;
    let before = match query.single("before")? {
        None => None,
        Some(b) => Some(b.parse::<i64>().map_err(|_| {
            Problem::invalid_parameter("before", "before is not one this API gave")
        })?),
    };
    let text = query.single("q")?.unwrap_or_default();
    if text.chars().count() > MAX_TEXT {
        return Err(Problem::invalid_parameter(
            "q",
            format!("q is longer than {MAX_TEXT} characters"),
        ));
    }
    // One more than asked tells whether an older page exists.
    let mut events = state
        .store()
        .audit_events(&AuditQuery {
            text: text.to_owned(),
            before,
            limit: limit + 1,
        })
        .await?;
    let more = events.len() > limit as usize;
    events.truncate(limit as usize);
    let next_before = more.then(|| events.last().map(|e| e.id)).flatten();
    let events = events
        .into_iter()
        .map(|e| api::AuditEvent {
            id: e.id,
            at: e.at,
            actor: e.actor,
            action: e.action,
            object: e.object,
            source: e.source,
            channel: e.channel,
        })
        .collect();
    Ok(json(
        StatusCode::OK,
        &api::AuditEventPage {
            events,
            next_before,
        },
        None,
    ))
}
