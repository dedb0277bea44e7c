//! Organizations (issue 28): the list, and one organization with its clients and its
//! usage over the last 30 days; on it, a write admin creates a client in it, disables or
//! enables it (a disable asks for a confirmation first, as a client's does), moves it to
//! another plan and deletes it (with its clients, when asked); on the list, creates one.
//!
//! The organization's page is also its developer portal: an organization's own admin
//! (`tessera-org-admin`) signs in to it and sees that organization only, its clients (whose
//! pages are in `clients.rs`, under `/console/orgs/{id}/clients/`) and its usage, and
//! manages its clients, but not the organization itself.

use axum::extract::{Path, State};
use axum::http::Method;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::Router;
use maud::{html, Markup};
use tessera_proto::admin::{self as api, ClientPage, OrgList, OrgUsage, PlanList};
use tessera_proto::form::encode_component as seg;

use super::clients::Owner;
use super::{days_query, get_json, get_tagged};
use crate::control::console::extract::{Form, Page};
use crate::control::console::session::{random_token, Session};
use crate::control::console::view::{self, csrf, time, usage_chart, Section};
use crate::control::console::{Console, Fail};

pub(super) fn router() -> Router<Console> {
    Router::new()
        .route("/console/orgs", get(orgs).post(create_org))
        .route("/console/orgs/{id}", get(org))
        .route("/console/orgs/{id}/change", post(change_org))
        .route(
            "/console/orgs/{id}/delete",
            get(confirm_delete_org).post(delete_org),
        )
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
    // The provider's admin governs the organization; its own admin manages its clients.
    let governs = session.write && session.org.is_none();
    let portal = session.org.is_some();
    let plans: PlanList = if governs {
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
    let requests = |client: &str| -> u64 {
        usage
            .clients
            .iter()
            .find(|c| c.client_id == client)
            .map_or(0, |c| {
                c.days
                    .iter()
                    .map(|d| d.issued + d.apis.values().map(|a| a.requests).sum::<u64>())
                    .sum()
            })
    };
    let client_page = |id: &str| {
        if portal {
            Owner::Org(org.id.clone()).page(id)
        } else {
            format!("/console/clients/{}", seg(id))
        }
    };
    let body = html! {
        h1 { "Organization " code { (org.id) } }
        dl {
            dt { "Name" } dd { @if org.name.is_empty() { "(none)" } @else { (org.name) } }
            dt { "Plan" } dd {
                @if portal { (org.plan) } @else { a href={"/console/plans/" (seg(&org.plan))} { (org.plan) } }
            }
            dt { "Scopes its clients may request" } dd #org-scopes {
                @if org.scopes.is_empty() { "(none)" } @else { code { (org.scopes.join(" ")) } }
            }
            dt { "State" } dd #org-state { @if org.enabled { "enabled" } @else { "disabled: its clients' token requests are refused" } }
            dt { "Created" } dd { (time(org.created_at)) }
        }
        h2 #clients { "Clients" }
        @if clients.clients.is_empty() {
            p.empty { "No clients." }
        } @else {
            div.table-wrap { table.cards #org-clients {
                thead { tr { th scope="col" { "Client" } th scope="col" { "Name" } th scope="col" { "State" } th scope="col" { "Authentication" } th scope="col" { "Requests, 30 days" } } }
                tbody { @for client in &clients.clients {
                    tr {
                        td data-label="Client" { a href=(client_page(client.client_id.as_str())) { code { (client.client_id) } } }
                        td data-label="Name" { (client.name) }
                        td data-label="State" { @if client.enabled { "enabled" } @else { "disabled" } }
                        td data-label="Authentication" { (client.token_endpoint_auth_method) }
                        td data-label="Requests, 30 days" { (requests(client.client_id.as_str())) }
                    }
                } }
            } }
        }
        @if session.write {
            h3 { "Create a client in this organization" }
            form.stack #create-org-client method="post" action={"/console/orgs/" (seg(&org.id)) "/clients"} {
                (csrf(&session))
                input type="hidden" name="idempotency_key" value=(random_token());
                p.note { "It is on the organization's plan. Its secret is shown once, on the next page." }
                label for="org-client-name" { "Name (for people)" }
                input #org-client-name type="text" name="name" maxlength="256";
                label for="org-client-method" { "Client authentication" }
                select #org-client-method name="auth_method" {
                    option value="client_secret_basic" selected { "HTTP Basic (client_secret_basic)" }
                    option value="client_secret_post" { "In the form body (client_secret_post)" }
                }
                button type="submit" { "Create client" }
            }
        }
        h2 { "Usage, last 30 days" }
        (usage_chart(&days, &usage.total, "All its clients"))
        @if governs {
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
                p { a.danger href={"/console/orgs/" (seg(&org.id)) "/delete"} { "Delete organization…" } }
            }
        }
    };
    Ok(Page::new("Organization", Section::Orgs, &session, body))
}

/// The first step of deleting an organization: what goes with it, and whether its clients
/// do.
async fn confirm_delete_org(
    State(console): State<Console>,
    session: Session,
    Path(id): Path<String>,
) -> Result<Page, Fail> {
    let (org, etag): (api::Org, String) =
        get_tagged(&console, &session, &format!("/orgs/{}", seg(&id))).await?;
    let body = delete_org_confirmation(&session, &org.id, org.clients, &etag);
    Ok(Page::new(
        "Delete organization",
        Section::Orgs,
        &session,
        body,
    ))
}

/// The confirmation of deleting organization `id`, which has `clients` clients.
fn delete_org_confirmation(session: &Session, id: &str, clients: u64, etag: &str) -> Markup {
    let back = format!("/console/orgs/{}", seg(id));
    html! {
        h1 { "Delete organization " code { (id) } "?" }
        @if clients == 0 {
            p.warning { "It has no clients. It cannot be restored." }
        } @else {
            p.warning { "It has " (clients) " client(s). Deleting it deletes them too: their token \
                requests are refused from now on, and none of it can be restored. To stop it for \
                a while instead, disable it." }
        }
        form.confirm method="post" action={(back) "/delete"} {
            (csrf(session))
            input type="hidden" name="etag" value=(etag);
            input type="hidden" name="confirmed" value="yes";
            @if clients > 0 {
                div.check {
                    input #with-clients type="checkbox" name="with_clients" value="true" required;
                    label for="with-clients" { "Yes, delete its " (clients) " client(s) with it" }
                }
            }
            button.danger type="submit" { "Delete " (id) }
            a.cancel href=(back) { "Cancel" }
        }
    }
}

/// Deletes an organization once confirmed, its clients too when the form says so (else
/// the admin API refuses one that has clients, and the page says so).
async fn delete_org(
    State(console): State<Console>,
    Path(id): Path<String>,
    form: Form,
) -> Result<Response, Fail> {
    let back = format!("/console/orgs/{}", seg(&id));
    let etag = form.field("etag").unwrap_or("*");
    if form.field("confirmed") != Some("yes") {
        return Ok(Redirect::to(&format!("{back}/delete")).into_response());
    }
    let with_clients = form.field("with_clients") == Some("true");
    match console
        .api
        .call(
            &form.session,
            Method::DELETE,
            &format!("/orgs/{}?with_clients={with_clients}", seg(&id)),
            None::<&()>,
            &[("if-match", etag)],
        )
        .await
    {
        Ok(_) => Ok(console.redirect(
            &form,
            "/console/orgs",
            if with_clients {
                format!("Organization {id} deleted with its clients.")
            } else {
                format!("Organization {id} deleted.")
            },
        )),
        Err(e) => Ok(console.refused(&form, &back, e)),
    }
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
