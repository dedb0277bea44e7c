//! Clients: the list with its search, one client with its usage and refusals, creating,
//! changing, rotating a secret (the one page that shows it) and deleting.

use axum::extract::{Path, RawQuery, State};
use axum::http::Method;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use maud::html;
use tessera_proto::admin::{self as api, Client, ClientPage, ClientWithSecret, PlanList, Usage};
use tessera_proto::form::encode_component as seg;

use super::{days_query, get_json, get_tagged};
use crate::control::console::extract::{Form, Page};
use crate::control::console::session::{random_token, Session};
use crate::control::console::view::{self, csrf, time, usage_chart, Section};
use crate::control::console::{field, Console, Fail};

/// Clients shown per page of the list.
const PAGE: usize = 25;
/// Clients read per admin API call while searching.
const SCAN: usize = 500;
/// Admin API pages one search reads at most before it offers to go on.
const SCAN_PAGES: usize = 20;

pub(super) fn router() -> Router<Console> {
    Router::new()
        .route("/console/clients", get(clients).post(create_client))
        .route("/console/clients/new", get(new_client))
        .route("/console/clients/{id}", get(client))
        .route("/console/clients/{id}/rotate", post(rotate_secret))
        .route("/console/clients/{id}/change", post(change_client))
        .route(
            "/console/clients/{id}/delete",
            get(confirm_delete).post(delete_client),
        )
}

/// The list's filters, from its query string.
#[derive(Debug, Default)]
struct Filter {
    q: String,
    plan: String,
    enabled: String,
    cursor: Option<String>,
}

impl Filter {
    fn read(raw: Option<&str>) -> Self {
        let pairs = tessera_proto::form::parse(raw.unwrap_or_default()).unwrap_or_default();
        let get = |n: &str| field(&pairs, n).unwrap_or_default().trim().to_owned();
        Self {
            q: get("q"),
            plan: get("plan"),
            enabled: get("enabled"),
            cursor: Some(get("cursor")).filter(|c| !c.is_empty()),
        }
    }

    fn matches(&self, c: &Client) -> bool {
        let q = self.q.to_lowercase();
        (q.is_empty()
            || c.client_id.as_str().to_lowercase().contains(&q)
            || c.name.to_lowercase().contains(&q))
            && match self.enabled.as_str() {
                "yes" => c.enabled,
                "no" => !c.enabled,
                _ => true,
            }
    }

    fn query(&self, cursor: &str) -> String {
        format!(
            "q={}&plan={}&enabled={}&cursor={}",
            seg(&self.q),
            seg(&self.plan),
            seg(&self.enabled),
            seg(cursor)
        )
    }
}

async fn clients(
    State(console): State<Console>,
    session: Session,
    RawQuery(raw): RawQuery,
) -> Result<Page, Fail> {
    let filter = Filter::read(raw.as_deref());
    let plans: PlanList = get_json(&console, &session, "/plans").await?;
    // The admin API pages by id and filters by plan; the console filters by id, name and
    // state as it reads, a page of matches at a time.
    let mut shown: Vec<Client> = Vec::new();
    let mut cursor = filter.cursor.clone();
    let mut next = None;
    for _ in 0..SCAN_PAGES {
        let mut path = format!("/clients?limit={SCAN}");
        if !filter.plan.is_empty() {
            path.push_str(&format!("&plan={}", seg(&filter.plan)));
        }
        if let Some(c) = &cursor {
            path.push_str(&format!("&cursor={}", seg(c)));
        }
        let page: ClientPage = get_json(&console, &session, &path).await?;
        let read = page.clients.len();
        let mut taken = 0;
        for client in page.clients {
            taken += 1;
            if filter.matches(&client) {
                shown.push(client);
                if shown.len() == PAGE {
                    break;
                }
            }
        }
        let more_here = taken < read;
        if shown.len() == PAGE {
            next = (more_here || page.next_cursor.is_some())
                .then(|| shown.last().map(|c| c.client_id.to_string()))
                .flatten();
            break;
        }
        match page.next_cursor {
            Some(c) => {
                cursor = Some(c.clone());
                next = Some(c);
            }
            None => {
                next = None;
                break;
            }
        }
    }
    let searching = !filter.q.is_empty() || !filter.plan.is_empty() || !filter.enabled.is_empty();
    let body = html! {
        h1 { "Clients" }
        @if session.write {
            p { a.button href="/console/clients/new" { "Create a client" } }
        }
        form.search method="get" action="/console/clients" role="search" {
            div { label for="q" { "Id or name contains" }
                input #q type="search" name="q" value=(filter.q) spellcheck="false"; }
            div { label for="filter-plan" { "Plan" }
                select #filter-plan name="plan" {
                    option value="" { "any" }
                    @for p in &plans.plans { option value=(p.name) selected[p.name == filter.plan] { (p.name) } }
                } }
            div { label for="filter-enabled" { "State" }
                select #filter-enabled name="enabled" {
                    option value="" { "any" }
                    option value="yes" selected[filter.enabled == "yes"] { "enabled" }
                    option value="no" selected[filter.enabled == "no"] { "disabled" }
                } }
            button type="submit" { "Search" }
        }
        @if shown.is_empty() {
            @if searching || filter.cursor.is_some() {
                p.empty { "No client matches. " a href="/console/clients" { "Show all clients" } "." }
            } @else if plans.plans.is_empty() {
                p.empty { "No clients yet, and no plans: " a href="/console/plans#create" { "create a plan" } " first, then a client on it." }
            } @else {
                p.empty { "No clients yet. "
                    @if session.write { a href="/console/clients/new" { "Create one" } " to hand out API access on a plan." }
                    @else { "An admin with write access creates them." } }
            }
        } @else {
            div.table-wrap { table {
                thead { tr { th scope="col" { "Client id" } th scope="col" { "Name" } th scope="col" { "Plan" } th scope="col" { "State" } th scope="col" { "Created" } } }
                tbody { @for c in &shown {
                    tr {
                        td { a href={"/console/clients/" (seg(c.client_id.as_str()))} { code { (c.client_id) } } }
                        td { (c.name) }
                        td { (c.plan) }
                        td { @if c.enabled { "enabled" } @else { span.badge.off { "disabled" } } }
                        td { (time(c.created_at)) }
                    }
                } }
            } }
        }
        nav.pager aria-label="Pages" {
            @if filter.cursor.is_some() { a href={"/console/clients?" (filter.query(""))} { "First page" } }
            @if let Some(next) = &next { a href={"/console/clients?" (filter.query(next))} { "Next page" } }
        }
    };
    Ok(Page::new("Clients", Section::Clients, &session, body))
}

async fn new_client(State(console): State<Console>, session: Session) -> Result<Page, Fail> {
    let plans: PlanList = get_json(&console, &session, "/plans").await?;
    let body = html! {
        p { a href="/console/clients" { "← Clients" } }
        h1 { "Create a client" }
        @if plans.plans.is_empty() {
            p.empty { "There is no plan to put a client on: " a href="/console/plans#create" { "create a plan" } " first." }
        } @else {
            form.stack method="post" action="/console/clients" {
                (csrf(&session))
                input type="hidden" name="idempotency_key" value=(random_token());
                label for="client-plan" { "Plan" }
                select #client-plan name="plan" required {
                    @for p in &plans.plans { option value=(p.name) { (p.name) " (" (p.scopes.join(" ")) ")" } }
                }
                label for="client-name" { "Name (for people)" }
                input #client-name type="text" name="name" maxlength="256";
                label for="client-method" { "Client authentication" }
                select #client-method name="auth_method" {
                    option value="client_secret_basic" { "HTTP Basic (client_secret_basic)" }
                    option value="client_secret_post" { "In the form body (client_secret_post)" }
                }
                button type="submit" { "Create client" }
            }
        }
    };
    Ok(Page::new(
        "Create a client",
        Section::Clients,
        &session,
        body,
    ))
}

async fn create_client(State(console): State<Console>, form: Form) -> Result<Response, Fail> {
    let input = api::ClientInput {
        plan: form.field("plan").unwrap_or_default().to_owned(),
        name: form.field("name").unwrap_or_default().trim().to_owned(),
        token_endpoint_auth_method: Some(
            form.field("auth_method")
                .unwrap_or("client_secret_basic")
                .to_owned(),
        ),
        ..Default::default()
    };
    // The form's key makes a double submit (or a reload of the answer) the same client.
    let key = form.field("idempotency_key").unwrap_or_default();
    let extra: &[(&'static str, &str)] = if key.is_empty() {
        &[]
    } else {
        &[("idempotency-key", key)]
    };
    match console
        .api
        .call(
            &form.session.token,
            Method::POST,
            "/clients",
            Some(&input),
            extra,
        )
        .await
        .and_then(|a| a.json::<ClientWithSecret>())
    {
        Ok(client) => {
            Ok(secret_page(&console, &form.session, &client, "Client created").into_response())
        }
        Err(e) => Ok(console.refused(&form, "/console/clients/new", e)),
    }
}

/// The one page that shows a secret.
fn secret_page(
    console: &Console,
    session: &Session,
    created: &ClientWithSecret,
    title: &str,
) -> Page {
    let client = &created.client;
    let secret = created
        .client_secret
        .as_ref()
        .map(tessera_proto::ClientSecret::expose)
        .unwrap_or_default();
    let issuer = console.app.issuer().trim_end_matches('/');
    let body = html! {
        h1 { (title) }
        div.warning role="alert" {
            strong { "Copy the secret now. " }
            "It is not stored, only a keyed hash of it, so it will not be shown again. "
            "Lost, it can only be replaced by rotating."
        }
        dl.secret {
            dt { "Client id" } dd { code #client-id { (client.client_id) } }
            dt { "Client secret" }
            dd {
                code #client-secret { (secret) }
                " " button type="button" data-copy="client-secret" hidden { "Copy secret" }
            }
        }
        @if let Some(until) = &client.previous_secret_valid_until {
            p { "The previous secret keeps working until " (time(*until)) "." }
        }
        p { "Get a token with it:" }
        pre { code { "curl -s -u '" (client.client_id) ":" (secret) "' -d grant_type=client_credentials -d 'scope=…' " (issuer) "/connect/token" } }
        p { a href={"/console/clients/" (seg(client.client_id.as_str()))} { "Go to the client" } }
    };
    Page::new(title, Section::Clients, session, body)
}

async fn client(
    State(console): State<Console>,
    session: Session,
    Path(id): Path<String>,
) -> Result<Page, Fail> {
    let (client, etag): (Client, _) =
        get_tagged(&console, &session, &format!("/clients/{}", seg(&id))).await?;
    let days = view::last_days(console.app.clock().now(), 30);
    let usage: Usage = get_json(
        &console,
        &session,
        &format!("/clients/{}/usage?{}", seg(&id), days_query(&days)),
    )
    .await?;
    let refusals: api::RefusalList = get_json(
        &console,
        &session,
        &format!("/clients/{}/refusals", seg(&id)),
    )
    .await?;
    let plans: PlanList = get_json(&console, &session, "/plans").await?;
    let base = format!("/console/clients/{}", seg(client.client_id.as_str()));
    let body = html! {
        p { a href="/console/clients" { "← Clients" } }
        h1 { "Client " code { (client.client_id) } }
        dl {
            dt { "Name" } dd { @if client.name.is_empty() { "(none)" } @else { (client.name) } }
            dt { "Plan" } dd { a href={"/console/plans/" (seg(&client.plan))} { (client.plan) } }
            dt { "State" } dd #client-state { @if client.enabled { "enabled" } @else { "disabled: its token requests are refused" } }
            dt { "Authentication" } dd { (client.token_endpoint_auth_method) }
            dt { "Created" } dd { (time(client.created_at)) }
            @if let Some(until) = &client.previous_secret_valid_until {
                dt { "Previous secret valid until" } dd { (time(*until)) }
            }
        }
        h2 { "Usage, last 30 days" }
        (usage_chart(&days, &usage.days, "This client"))
        h2 { "API requests, last 30 days" }
        (view::api_usage_charts(&days, &usage.days))
        h2 { "Last refusals" }
        @if refusals.refusals.is_empty() {
            p.empty { "No refused token request seen by this instance." }
        } @else {
            div.table-wrap { table {
                thead { tr { th scope="col" { "When" } th scope="col" { "Error" } } }
                tbody { @for refusal in &refusals.refusals {
                    tr { td { (time(refusal.at)) } td { code { (refusal.error) } } }
                } }
            } }
            p.note { "The last ten refusals this instance answered." }
        }
        @if session.write {
            h2 { "Manage" }
            div.actions {
                form method="post" action={(base) "/change"} {
                    (csrf(&session))
                    input type="hidden" name="etag" value=(etag);
                    @if client.enabled {
                        input type="hidden" name="enabled" value="false";
                        button type="submit" { "Disable client" }
                    } @else {
                        input type="hidden" name="enabled" value="true";
                        button type="submit" { "Enable client" }
                    }
                }
                form method="post" action={(base) "/change"} {
                    (csrf(&session))
                    input type="hidden" name="etag" value=(etag);
                    label for="move-plan" { "Move to plan" }
                    select #move-plan name="plan" {
                        @for p in &plans.plans { option value=(p.name) selected[p.name == client.plan] { (p.name) } }
                    }
                    button type="submit" { "Move" }
                }
                form method="post" action={(base) "/rotate"} {
                    (csrf(&session))
                    label for="grace" { "Previous secret keeps working for" }
                    select #grace name="grace_secs" {
                        option value="0" { "no time: stop it now" }
                        option value="3600" { "1 hour" }
                        option value="86400" selected { "1 day" }
                        option value="604800" { "7 days" }
                    }
                    button type="submit" { "Rotate secret" }
                }
                p { a.danger href={(base) "/delete"} { "Delete client…" } }
            }
        }
    };
    Ok(Page::new(
        format!("Client {}", client.client_id),
        Section::Clients,
        &session,
        body,
    ))
}

async fn change_client(
    State(console): State<Console>,
    Path(id): Path<String>,
    form: Form,
) -> Result<Response, Fail> {
    let back = format!("/console/clients/{}", seg(&id));
    let mut patch = api::ClientPatch::default();
    let mut said = Vec::new();
    if let Some(enabled) = form.field("enabled") {
        let enabled = enabled == "true";
        patch.enabled = Some(enabled);
        said.push(if enabled { "enabled" } else { "disabled" }.to_owned());
    }
    if let Some(plan) = form.field("plan") {
        patch.plan = Some(plan.to_owned());
        said.push(format!("moved to plan {plan}"));
    }
    let etag = form.field("etag").unwrap_or("*");
    match console
        .api
        .call(
            &form.session.token,
            Method::PATCH,
            &format!("/clients/{}", seg(&id)),
            Some(&patch),
            &[("if-match", etag)],
        )
        .await
    {
        Ok(_) => Ok(console.redirect(&form, &back, format!("Client {}.", said.join(", ")))),
        Err(e) => Ok(console.refused(&form, &back, e)),
    }
}

async fn rotate_secret(
    State(console): State<Console>,
    Path(id): Path<String>,
    form: Form,
) -> Result<Response, Fail> {
    let grace: i64 = form
        .field("grace_secs")
        .and_then(|g| g.parse().ok())
        .unwrap_or(86_400);
    match console
        .api
        .call(
            &form.session.token,
            Method::POST,
            &format!("/clients/{}/rotate-secret", seg(&id)),
            Some(&api::Rotation {
                grace_secs: Some(grace),
            }),
            &[],
        )
        .await
        .and_then(|a| a.json::<ClientWithSecret>())
    {
        Ok(client) => {
            Ok(secret_page(&console, &form.session, &client, "Secret rotated").into_response())
        }
        Err(e) => Ok(console.refused(&form, &format!("/console/clients/{}", seg(&id)), e)),
    }
}

async fn confirm_delete(
    State(console): State<Console>,
    session: Session,
    Path(id): Path<String>,
) -> Result<Page, Fail> {
    let (client, etag): (Client, _) =
        get_tagged(&console, &session, &format!("/clients/{}", seg(&id))).await?;
    let base = format!("/console/clients/{}", seg(client.client_id.as_str()));
    let body = html! {
        h1 { "Delete client " code { (client.client_id) } "?" }
        p.warning { "Its token requests are refused from now on and it cannot be restored. "
            "To stop it for a while instead, disable it." }
        form method="post" action={(base) "/delete"} {
            (csrf(&session))
            input type="hidden" name="etag" value=(etag);
            button.danger type="submit" { "Delete " (client.client_id) }
            " " a href=(base) { "Cancel" }
        }
    };
    Ok(Page::new("Delete client", Section::Clients, &session, body))
}

async fn delete_client(
    State(console): State<Console>,
    Path(id): Path<String>,
    form: Form,
) -> Result<Response, Fail> {
    let etag = form.field("etag").unwrap_or("*");
    match console
        .api
        .call(
            &form.session.token,
            Method::DELETE,
            &format!("/clients/{}", seg(&id)),
            None::<&()>,
            &[("if-match", etag)],
        )
        .await
    {
        Ok(_) => Ok(console.redirect(&form, "/console/clients", format!("Client {id} deleted."))),
        Err(e) => Ok(console.refused(&form, &format!("/console/clients/{}", seg(&id)), e)),
    }
}
