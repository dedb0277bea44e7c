//! Organizations (issue 28): the list, and one organization with its clients and its
//! usage over the last 30 days; on it, a write admin disables or enables it (a disable
//! asks for a confirmation first, as a client's does) and moves it to another plan; on the
//! list, creates one. It is deleted with `tessera org` or the admin API.

use axum::extract::{Path, State};
use axum::http::Method;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use maud::html;
use tessera_proto::admin::{self as api, ClientPage, OrgList, OrgUsage, PlanList};
use tessera_proto::form::encode_component as seg;

use super::{days_query, get_json, get_tagged};
use crate::control::console::extract::{Form, Page};
use crate::control::console::session::Session;
use crate::control::console::view::{self, csrf, time, usage_chart, Section};
use crate::control::console::{Console, Fail};

pub(super) fn router() -> Router<Console> {
    Router::new()
        .route("/console/orgs", get(orgs).post(create_org))
        .route("/console/orgs/{id}", get(org))
        .route("/console/orgs/{id}/change", post(change_org))
}

async fn orgs(State(console): State<Console>, session: Session) -> Result<Page, Fail> {
    let list: OrgList = get_json(&console, &session, "/orgs").await?;
    let plans: PlanList = if session.write {
        get_json(&console, &session, "/plans").await?
    } else {
        PlanList { plans: Vec::new() }
    };
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
        @if session.write {
            h2 { "Create an organization" }
            form.stack method="post" action="/console/orgs" {
                (csrf(&session))
                label for="org-id" { "Id (1 to 64 of a-z, A-Z, 0-9, _ and -)" }
                input #org-id name="id" required pattern="[A-Za-z0-9_-]{1,64}";
                label for="org-name" { "Name" }
                input #org-name name="name" maxlength="256";
                label for="new-org-plan" { "Plan of all its clients" }
                select #new-org-plan name="plan" required {
                    option value="" disabled selected { "Choose a plan…" }
                    @for p in &plans.plans { option value=(p.name) { (p.name) } }
                }
                button type="submit" { "Create organization" }
            }
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
    let (org, etag): (api::Org, String) = get_tagged(&console, &session, &path).await?;
    let clients: ClientPage =
        get_json(&console, &session, &format!("{path}/clients?limit=1000")).await?;
    let plans: PlanList = if session.write {
        get_json(&console, &session, "/plans").await?
    } else {
        PlanList { plans: Vec::new() }
    };
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
        @if session.write {
            h2 { "Change" }
            div.actions {
                form method="post" action={"/console/orgs/" (seg(&org.id)) "/change"} {
                    (csrf(&session))
                    input type="hidden" name="etag" value=(etag);
                    @if org.enabled {
                        input type="hidden" name="enabled" value="false";
                        button.danger type="submit" { "Disable organization…" }
                    } @else {
                        input type="hidden" name="enabled" value="true";
                        button type="submit" { "Enable organization" }
                    }
                }
                form method="post" action={"/console/orgs/" (seg(&org.id)) "/change"} {
                    (csrf(&session))
                    input type="hidden" name="etag" value=(etag);
                    label for="org-plan" { "Move it and all its clients to plan" }
                    select #org-plan name="plan" {
                        @for p in &plans.plans { option value=(p.name) selected[p.name == org.plan] { (p.name) } }
                    }
                    button type="submit" { "Move" }
                }
            }
        }
    };
    Ok(Page::new("Organization", Section::Orgs, &session, body))
}

/// Disables (after a confirmation), enables or moves an organization, and so all its
/// clients.
async fn change_org(
    State(console): State<Console>,
    Path(id): Path<String>,
    form: Form,
) -> Result<Response, Fail> {
    let back = format!("/console/orgs/{}", seg(&id));
    let etag = form.field("etag").unwrap_or("*");
    if form.field("enabled") == Some("false") && form.field("confirmed") != Some("yes") {
        let body = view::confirm(
            &form.session,
            &html! { "Disable organization " code { (id) } "?" },
            "The token requests of every one of its clients are refused from now on (tokens \
             they hold live until they expire), until it is enabled again.",
            &format!("{back}/change"),
            &[("etag", etag), ("enabled", "false")],
            &format!("Disable {id}"),
            &back,
        );
        return Ok(
            Page::new("Disable organization", Section::Orgs, &form.session, body).into_response(),
        );
    }
    let mut patch = api::OrgPatch::default();
    let mut said = Vec::new();
    if let Some(enabled) = form.field("enabled") {
        let enabled = enabled == "true";
        patch.enabled = Some(enabled);
        said.push(if enabled { "enabled" } else { "disabled" }.to_owned());
    }
    if let Some(plan) = form.field("plan") {
        patch.plan = Some(plan.to_owned());
        said.push(format!("moved to plan {plan} with all its clients"));
    }
    match console
        .api
        .call(
            &form.session,
            Method::PATCH,
            &format!("/orgs/{}", seg(&id)),
            Some(&patch),
            &[("if-match", etag)],
        )
        .await
    {
        Ok(_) => Ok(console.redirect(&form, &back, format!("Organization {}.", said.join(", ")))),
        Err(e) => Ok(console.refused(&form, &back, e)),
    }
}

/// Creates an organization, then shows it.
async fn create_org(State(console): State<Console>, form: Form) -> Result<Response, Fail> {
    let input = api::OrgInput {
        id: form.field("id").unwrap_or_default().to_owned(),
        plan: form.field("plan").unwrap_or_default().to_owned(),
        name: form.field("name").unwrap_or_default().to_owned(),
    };
    match console
        .api
        .call(&form.session, Method::POST, "/orgs", Some(&input), &[])
        .await
    {
        Ok(_) => Ok(console.redirect(
            &form,
            &format!("/console/orgs/{}", seg(&input.id)),
            format!("Organization {} created on plan {}.", input.id, input.plan),
        )),
        Err(e) => Ok(console.refused(&form, "/console/orgs", e)),
    }
}
