//! The overview: token requests over the last day and month, the busiest clients, those
//! rate-limited now, and the signing keys.

use axum::extract::State;
use axum::routing::get;
use axum::Router;
use maud::html;
use tessera_proto::admin::{self as api, ClientPage, KeyList, KeyStatus, PlanList, Usage};
use tessera_proto::form::encode_component as seg;

use super::{days_query, get_json};
use crate::control::console::extract::Page;
use crate::control::console::session::Session;
use crate::control::console::view::{self, time, usage_chart, Section};
use crate::control::console::{Console, Fail};

/// Clients whose usage the overview reads for its top list.
const TOP_SCAN: usize = 200;

pub(super) fn router() -> Router<Console> {
    Router::new().route("/console/", get(overview))
}

async fn overview(State(console): State<Console>, session: Session) -> Result<Page, Fail> {
    let now = console.app.clock().now();
    let days = view::last_days(now, 30);
    let range = days_query(&days);
    let plans: PlanList = get_json(&console, &session, "/plans").await?;
    let mut total: Vec<api::UsageDay> = Vec::new();
    for plan in &plans.plans {
        let usage: Usage = get_json(
            &console,
            &session,
            &format!("/plans/{}/usage?{range}", seg(&plan.name)),
        )
        .await?;
        for day in usage.days {
            match total.iter_mut().find(|d| d.day == day.day) {
                Some(d) => {
                    d.issued += day.issued;
                    d.refused += day.refused;
                }
                None => total.push(day),
            }
        }
    }
    let clients: ClientPage =
        get_json(&console, &session, &format!("/clients?limit={TOP_SCAN}")).await?;
    let mut top = Vec::new();
    for client in &clients.clients {
        let usage: Usage = get_json(
            &console,
            &session,
            &format!("/clients/{}/usage?{range}", seg(client.client_id.as_str())),
        )
        .await?;
        let issued: u64 = usage.days.iter().map(|d| d.issued).sum();
        let refused: u64 = usage.days.iter().map(|d| d.refused).sum();
        if issued + refused > 0 {
            top.push((client, issued, refused));
        }
    }
    top.sort_by_key(|t| std::cmp::Reverse(t.1 + t.2));
    top.truncate(5);
    let hourly: api::HourlyUsage = get_json(&console, &session, "/usage/hourly").await?;
    let limited: api::RateLimitedList = get_json(&console, &session, "/rate-limited").await?;
    let hours = view::last_hours(now, 24);
    let per_hour: Vec<api::UsageDay> = hourly
        .hours
        .into_iter()
        .map(|h| api::UsageDay {
            day: h.hour,
            issued: h.issued,
            refused: h.refused,
            apis: Default::default(),
        })
        .collect();
    let keys: KeyList = get_json(&console, &session, "/keys").await?;
    let signing = keys.keys.iter().find(|k| k.status == KeyStatus::Signing);
    let next = keys.keys.iter().find(|k| k.status == KeyStatus::Next);
    let client_count: u64 = plans.plans.iter().map(|p| p.clients).sum();
    let body = html! {
        h1 { "Overview" }
        p { (plans.plans.len()) " plans, " (client_count) " clients." }
        h2 { "Token requests, last 24 hours" }
        (view::usage_chart_of(&hours, &per_hour, "All clients", view::Unit::Hour))
        h2 { "Token requests, last 30 days" }
        @if total.is_empty() {
            p.empty { "No token requests in the last 30 days. Create a client on the "
                a href="/console/clients" { "Clients" } " page and give its id and secret to the API caller." }
        }
        (usage_chart(&days, &total, "All clients"))
        h2 { "Top clients by volume, last 30 days" }
        @if top.is_empty() {
            p.empty { "No client has requested a token in the last 30 days." }
        } @else {
            div.table-wrap { table {
                thead { tr { th scope="col" { "Client" } th scope="col" { "Plan" } th scope="col" { "Issued" } th scope="col" { "Refused" } } }
                tbody { @for (client, issued, refused) in &top {
                    tr {
                        td { a href={"/console/clients/" (seg(client.client_id.as_str()))} { (client.client_id) } " " (client.name) }
                        td { (client.plan) } td { (issued) } td { (refused) }
                    }
                } }
            } }
            @if clients.next_cursor.is_some() {
                p.note { "Among the first " (TOP_SCAN) " clients by id." }
            }
        }
        h2 { "Rate-limited now" }
        @if limited.clients.is_empty() {
            p.empty { "No client was refused for its plan's rate in the last 5 minutes." }
        } @else {
            div.table-wrap { table {
                thead { tr { th scope="col" { "Client" } th scope="col" { "Refusals" } th scope="col" { "Last" } } }
                tbody { @for c in &limited.clients {
                    tr {
                        td { a href={"/console/clients/" (seg(c.client_id.as_str()))} { (c.client_id) } }
                        td { (c.refused) } td { (time(c.last_at)) }
                    }
                } }
            } }
            p.note { "Refused for their plan's rate in the last 5 minutes, by this instance." }
        }
        h2 { "Signing keys" }
        @match signing {
            Some(key) => p { "Signing with " code { (key.kid) } " (" (key.alg) ") since " (time(key.activates_at)) "." },
            None => p.empty { "No key signs now. Rotate on the " a href="/console/keys" { "Keys" } " page." },
        }
        @match next {
            Some(key) => p { "Next rotation: " code { (key.kid) } " (" (key.alg) ") signs from " (time(key.activates_at)) "." },
            None => p { "No rotation scheduled. Rotate on the " a href="/console/keys" { "Keys" } " page." },
        }
    };
    Ok(Page::new("Overview", Section::Overview, &session, body))
}
