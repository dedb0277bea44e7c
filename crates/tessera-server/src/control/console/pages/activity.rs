//! Activity: the changes made through the console and the admin API (the audit events the
//! store keeps, `GET /admin/v1/audit-events`), the newest first, searchable: who, what, to
//! what, when, from where.

use axum::extract::{RawQuery, State};
use axum::routing::get;
use axum::Router;
use maud::html;
use tessera_proto::admin::AuditEventPage;
use tessera_proto::form::encode_component as seg;

use super::get_json;
use crate::control::console::extract::Page;
use crate::control::console::session::Session;
use crate::control::console::view::{time, Section};
use crate::control::console::{field, Console, Fail};

/// Events shown per page.
const PAGE: u32 = 50;

pub(super) fn router() -> Router<Console> {
    Router::new().route("/console/activity", get(activity))
}

/// The page of an object an event names, when it has one.
fn link(object: &str) -> Option<String> {
    let (kind, name) = object.split_once(':')?;
    match kind {
        "client" => Some(format!("/console/clients/{}", seg(name))),
        "plan" => Some(format!("/console/plans/{}", seg(name))),
        "key" => Some("/console/keys".into()),
        _ => None,
    }
}

async fn activity(
    State(console): State<Console>,
    session: Session,
    RawQuery(raw): RawQuery,
) -> Result<Page, Fail> {
    let pairs = tessera_proto::form::parse(raw.as_deref().unwrap_or_default()).unwrap_or_default();
    let q = field(&pairs, "q").unwrap_or_default().trim().to_owned();
    let before = field(&pairs, "before").and_then(|b| b.parse::<i64>().ok());
    let mut path = format!("/audit-events?limit={PAGE}&q={}", seg(&q));
    if let Some(before) = before {
        path.push_str(&format!("&before={before}"));
    }
    let page: AuditEventPage = get_json(&console, &session, &path).await?;
    let retention_days = console.app.config().audit_retention.as_secs() / 86_400;
    let body = html! {
        h1 { "Activity" }
        p { "Every change made here, through the admin API or with the CLI on the database: who made it "
            "(the person signed in, the admin client, or cli: and the user), "
            "what, when and from which address. Kept " (retention_days) " days." }
        form.search method="get" action="/console/activity" role="search" {
            div { label for="activity-q" { "Who, what or from where contains" }
                input #activity-q type="search" name="q" value=(q) spellcheck="false"
                    placeholder="tc_…, client:…, deleted, 10.0.0.5"; }
            button type="submit" { "Search" }
        }
        @if page.events.is_empty() {
            p.empty {
                @if q.is_empty() && before.is_none() { "No change made yet." }
                @else { "No change matches. " a href="/console/activity" { "Show all" } "." }
            }
        } @else {
            div.table-wrap { table.cards #activity {
                thead { tr { th scope="col" { "When" } th scope="col" { "Who" } th scope="col" { "What" }
                    th scope="col" { "Object" } th scope="col" { "From" } th scope="col" { "Via" } } }
                tbody { @for e in &page.events {
                    tr {
                        td data-label="When" { (time(e.at)) }
                        td data-label="Who" { code { (e.actor) } }
                        td data-label="What" { (e.action) }
                        td data-label="Object" {
                            @match link(&e.object) {
                                Some(href) => { a href=(href) { code { (e.object) } } },
                                None => { code { (e.object) } },
                            }
                        }
                        td data-label="From" { @if e.source.is_empty() { "—" } @else { (e.source) } }
                        td data-label="Via" { (e.channel) }
                    }
                } }
            } }
        }
        nav.pager aria-label="Pages" {
            @if before.is_some() { a href={"/console/activity?q=" (seg(&q))} { "Newest" } }
            @if let Some(next) = page.next_before {
                a href={"/console/activity?q=" (seg(&q)) "&before=" (next)} { "Older" }
            }
        }
    };
    Ok(Page::new("Activity", Section::Activity, &session, body))
}
