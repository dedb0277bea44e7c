//! Organizations (issue 28): the list, and one organization with its clients and its
//! usage over the last 30 days. Read-only for now; the changes are made with `tessera org`
//! or the admin API.

use axum::extract::{Path, State};
use axum::routing::get;
use axum::Router;
use maud::html;
use tessera_proto::admin::{self as api, ClientPage, OrgList, OrgUsage};
use tessera_proto::form::encode_component as seg;

use super::{days_query, get_json};
use crate::control::console::extract::Page;
use crate::control::console::session::Session;
use crate::control::console::view::{self, time, usage_chart, Section};
use crate::control::console::{Console, Fail};

pub(super) fn router() -> Router<Console> {
    Router::new()
        .route("/console/orgs", get(orgs))
        .route("/console/orgs/{id}", get(org))
}

async fn orgs(State(console): State<Console>, session: Session) -> Result<Page, Fail> {
    let list: OrgList = get_json(&console, &session, "/orgs").await?;
    let body = html! {
        h1 { "Organizations" }
        p { "Customers: each holds clients, all on its plan. Created with "
            code { "tessera org create ID --plan PLAN" } "." }
        @if list.orgs.is_empty() {
            p.empty { "No organizations." }
        } @else {
            div.table-wrap { table.cards #orgs {
                thead { tr { th scope="col" { "Id" } th scope="col" { "Name" } th scope="col" { "Plan" } th scope="col" { "State" } th scope="col" { "Clients" } } }
                tbody { @for org in &list.orgs {
                    tr {
                        td data-label="Id" { a href={"/console/orgs/" (seg(&org.id))} { (org.id) } }
                        td data-label="Name" { (org.name) }
                        td data-label="Plan" { a href={"/console/plans/" (seg(&org.plan))} { (org.plan) } }
                        td data-label="State" { @if org.enabled { "enabled" } @else { "disabled" } }
                        td data-label="Clients" { (org.clients) }
                    }
                } }
            } }
        }
    };
    Ok(Page::new("Organizations", Section::Orgs, &session, body))
}

async fn org(
    State(console): State<Console>,
    session: Session,
    Path(id): Path<String>,
) -> Result<Page, Fail> {
    let path = format!("/orgs/{}", seg(&id));
    let org: api::Org = get_json(&console, &session, &path).await?;
    let clients: ClientPage =
        get_json(&console, &session, &format!("{path}/clients?limit=1000")).await?;
    let now = console.app.clock().now();
    let days = view::last_days(now, 30);
    let usage: OrgUsage = get_json(
        &console,
        &session,
        &format!("{path}/usage?{}", days_query(&days)),
    )
    .await?;
    let body = html! {
        h1 { "Organization " code { (org.id) } }
        dl {
            dt { "Name" } dd { @if org.name.is_empty() { "(none)" } @else { (org.name) } }
            dt { "Plan" } dd { a href={"/console/plans/" (seg(&org.plan))} { (org.plan) } }
            dt { "State" } dd #org-state { @if org.enabled { "enabled" } @else { "disabled: its clients' token requests are refused" } }
            dt { "Created" } dd { (time(org.created_at)) }
        }
        h2 { "Clients" }
        @if clients.clients.is_empty() {
            p.empty { "No clients." }
        } @else {
            div.table-wrap { table.cards #org-clients {
                thead { tr { th scope="col" { "Client" } th scope="col" { "Name" } th scope="col" { "State" } th scope="col" { "Authentication" } } }
                tbody { @for client in &clients.clients {
                    tr {
                        td data-label="Client" { a href={"/console/clients/" (seg(client.client_id.as_str()))} { code { (client.client_id) } } }
                        td data-label="Name" { (client.name) }
                        td data-label="State" { @if client.enabled { "enabled" } @else { "disabled" } }
                        td data-label="Authentication" { (client.token_endpoint_auth_method) }
                    }
                } }
            } }
        }
        h2 { "Usage, last 30 days" }
        (usage_chart(&days, &usage.total, "All its clients"))
    };
    Ok(Page::new("Organization", Section::Orgs, &session, body))
}
