//! The pages: overview, plans, clients, keys. Each reads and writes through the admin API
//! with the session's token (`api.rs`); a write answers with a redirect to the page that
//! shows its result (or, for a new secret, with the one page that shows it).

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::Response;
use maud::{html, Markup};
use serde_json::{json, Value};
use tessera_proto::form::encode_component as seg;

use tessera_proto::admin::{
    self as api, Client, ClientPage, ClientWithSecret, KeyList, KeyStatus, Plan, PlanList, Usage,
};
use tessera_proto::clock::rfc3339;

use super::api::ApiError;
use super::session::{random_token, Session};
use super::view::{self, csrf, page, time, usage_chart, Section};
use super::{field, respond, Console, Fail};

/// Clients shown per page of the list.
const PAGE: usize = 25;
/// Clients read per admin API call while searching.
const SCAN: usize = 500;
/// Admin API pages one search reads at most before it offers to go on.
const SCAN_PAGES: usize = 20;
/// Clients whose usage the overview reads for its top list.
const TOP_SCAN: usize = 200;

type Page = Result<Response, Fail>;

/// Turns an API error into the page that says it.
fn api(session: &Session) -> impl Fn(ApiError) -> Fail + '_ {
    move |e| Fail::Api(Some(Box::new(session.clone())), e)
}

async fn get_json<T: serde::de::DeserializeOwned>(
    console: &Console,
    session: &Session,
    path: &str,
) -> Result<T, Fail> {
    console
        .api
        .get(&session.token, path)
        .await
        .and_then(|a| a.json())
        .map_err(api(session))
}

fn days_query(days: &[String]) -> String {
    format!(
        "from={}&to={}",
        days.first().map_or("", String::as_str),
        days.last().map_or("", String::as_str)
    )
}

// ---- Overview ----

pub(super) async fn overview(State(console): State<Console>, headers: HeaderMap) -> Page {
    let session = console.session(&headers)?;
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
    Ok(respond(page(
        "Overview",
        Section::Overview,
        Some(&session),
        body,
    )))
}

// ---- Plans ----

pub(super) async fn plans(State(console): State<Console>, headers: HeaderMap) -> Page {
    let session = console.session(&headers)?;
    let plans: PlanList = get_json(&console, &session, "/plans").await?;
    let body = html! {
        h1 { "Plans" }
        p { "A plan names the scopes its clients may request, their tokens' lifetime, and how often they may ask." }
        @if plans.plans.is_empty() {
            p.empty { "No plans yet. "
                @if session.write { "Create the first one below; then create clients on it." }
                @else { "An admin with write access creates them." } }
        } @else {
            div.table-wrap { table {
                thead { tr {
                    th scope="col" { "Plan" } th scope="col" { "Scopes" } th scope="col" { "Token lifetime" }
                    th scope="col" { "Rate" } th scope="col" { "Reuse" } th scope="col" { "Clients" } th scope="col" { "Updated" }
                } }
                tbody { @for plan in &plans.plans {
                    tr {
                        td { a href={"/console/plans/" (seg(&plan.name))} { (plan.name) } }
                        td { (plan.scopes.join(" ")) }
                        td { (plan.token_ttl) " s" }
                        td { (rate(plan)) }
                        td { @match plan.reuse_percent { Some(p) => { (p) " %" }, None => "no" } }
                        td { a href={"/console/clients?plan=" (seg(&plan.name))} { (plan.clients) } }
                        td { (time(plan.updated_at)) }
                    }
                } }
            } }
        }
        @if session.write {
            h2 #create { "Create a plan" }
            (plan_form(&session, None, None))
        }
    };
    Ok(respond(page("Plans", Section::Plans, Some(&session), body)))
}

fn rate(plan: &Plan) -> String {
    match &plan.token_rate {
        Some(r) => format!(
            "{} per {} (burst {})",
            r.count,
            view::period(r.period_secs),
            r.burst
        ),
        None => "no limit".into(),
    }
}

/// The plan form: create (no plan) or edit (`plan` and its `ETag`).
fn plan_form(session: &Session, plan: Option<&Plan>, etag: Option<&str>) -> Markup {
    let action = match plan {
        Some(p) => format!("/console/plans/{}", seg(&p.name)),
        None => "/console/plans".into(),
    };
    let rate = plan.and_then(|p| p.token_rate.as_ref());
    let period = rate.map_or(60, |r| r.period_secs);
    html! {
        form.stack method="post" action=(action) {
            (csrf(session))
            @if let Some(etag) = etag { input type="hidden" name="etag" value=(etag); }
            @if plan.is_none() {
                label for="plan-name" { "Name" }
                input #plan-name type="text" name="name" required pattern="[A-Za-z0-9_\\-]{1,64}"
                    aria-describedby="plan-name-help" spellcheck="false";
                small #plan-name-help { "1 to 64 letters, digits, _ or -." }
            }
            label for="plan-scopes" { "Scopes" }
            input #plan-scopes type="text" name="scopes" required spellcheck="false"
                value=[plan.map(|p| p.scopes.join(" "))] aria-describedby="plan-scopes-help";
            small #plan-scopes-help { "Separated by spaces, e.g. market-data-api news-api." }
            label for="plan-ttl" { "Token lifetime (seconds)" }
            input #plan-ttl type="number" name="token_ttl" min="1" max="86400"
                value=(plan.map_or(3600, |p| p.token_ttl));
            fieldset {
                legend { "Rate limit (leave the count empty for none)" }
                label for="plan-rate" { "Tokens" }
                input #plan-rate type="number" name="rate_count" min="1" value=[rate.map(|r| r.count)];
                label for="plan-period" { "per" }
                select #plan-period name="rate_period" {
                    @for (secs, label) in [(1, "second"), (60, "minute"), (3600, "hour"), (86_400, "day")] {
                        option value=(secs) selected[period == secs] { (label) }
                    }
                }
                label for="plan-burst" { "Burst (default: the count)" }
                input #plan-burst type="number" name="rate_burst" min="1" value=[rate.map(|r| r.burst)];
            }
            label for="plan-reuse" { "Reuse a token while more than this % of its life is left (empty: never)" }
            input #plan-reuse type="number" name="reuse_percent" min="1" max="99"
                value=[plan.and_then(|p| p.reuse_percent)];
            div.check {
                input #plan-introspect type="checkbox" name="introspect_any" value="true"
                    checked[plan.is_some_and(|p| p.introspect_any)];
                label for="plan-introspect" { "Its clients may introspect tokens issued to others" }
            }
            label for="plan-dpop" { "DPoP (RFC 9449): bind tokens to the client's key" }
            select #plan-dpop name="dpop" {
                @for (value, label) in [("allowed", "allowed: when the client sends a proof"), ("required", "required: refuse requests without a proof"), ("off", "off: Bearer tokens only")] {
                    option value=(value) selected[plan.map_or("allowed", |p| p.dpop.as_str()) == value] { (label) }
                }
            }
            button type="submit" { @if plan.is_some() { "Save plan" } @else { "Create plan" } }
        }
    }
}

/// A `PlanInput` from the form, or what is wrong with it.
fn plan_input(pairs: &[(String, String)]) -> Result<Value, String> {
    let number = |name: &str, what: &str| -> Result<Option<u64>, String> {
        match field(pairs, name).map(str::trim).filter(|v| !v.is_empty()) {
            None => Ok(None),
            Some(v) => v
                .parse()
                .map(Some)
                .map_err(|_| format!("{what} must be a whole number")),
        }
    };
    let scopes: Vec<&str> = field(pairs, "scopes")
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    let mut input = json!({ "scopes": scopes });
    if let Some(ttl) = number("token_ttl", "The token lifetime")? {
        input["token_ttl"] = json!(ttl);
    }
    if let Some(count) = number("rate_count", "The rate")? {
        let mut rate = json!({
            "count": count,
            "period_secs": number("rate_period", "The period")?.unwrap_or(60),
        });
        if let Some(burst) = number("rate_burst", "The burst")? {
            rate["burst"] = json!(burst);
        }
        input["token_rate"] = rate;
    }
    if let Some(reuse) = number("reuse_percent", "The reuse percentage")? {
        input["reuse_percent"] = json!(reuse);
    }
    input["introspect_any"] = json!(field(pairs, "introspect_any") == Some("true"));
    input["dpop"] = json!(field(pairs, "dpop").unwrap_or("allowed"));
    Ok(input)
}

pub(super) async fn create_plan(
    State(console): State<Console>,
    headers: HeaderMap,
    body: Bytes,
) -> Page {
    let session = console.session(&headers)?;
    let pairs = console.form(&session, &body)?;
    let back = "/console/plans#create";
    let name = field(&pairs, "name").unwrap_or_default().trim().to_owned();
    let input = match plan_input(&pairs) {
        Ok(input) => input,
        Err(e) => return Ok(console.refused(&headers, back, problem(e))),
    };
    let path = format!("/plans/{}", seg(&name));
    match console.api.get(&session.token, &path).await {
        Ok(_) => {
            return Ok(console.refused(
                &headers,
                back,
                problem(format!("a plan named {name} exists; edit it instead")),
            ))
        }
        Err(ApiError::Problem { status, .. }) if status == StatusCode::NOT_FOUND => {}
        Err(e) => return Ok(console.refused(&headers, back, e)),
    }
    match console
        .api
        .call(&session.token, Method::PUT, &path, Some(input), &[])
        .await
    {
        Ok(_) => Ok(console.redirect(&headers, "/console/plans", format!("Plan {name} created."))),
        Err(e) => Ok(console.refused(&headers, back, e)),
    }
}

fn problem(detail: String) -> ApiError {
    ApiError::Problem {
        status: StatusCode::BAD_REQUEST,
        title: "Not saved".into(),
        detail,
    }
}

pub(super) async fn plan(
    State(console): State<Console>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Page {
    let session = console.session(&headers)?;
    let answer = console
        .api
        .get(&session.token, &format!("/plans/{}", seg(&name)))
        .await
        .map_err(api(&session))?;
    let plan: Plan = answer.json().map_err(api(&session))?;
    let body = html! {
        p { a href="/console/plans" { "← Plans" } }
        h1 { "Plan " (plan.name) }
        p {
            a href={"/console/clients?plan=" (seg(&plan.name))} { (plan.clients) " clients" }
            " on this plan. Changes apply to their next token request."
        }
        @if session.write {
            (plan_form(&session, Some(&plan), answer.etag.as_deref()))
        } @else {
            dl {
                dt { "Scopes" } dd { (plan.scopes.join(" ")) }
                dt { "Token lifetime" } dd { (plan.token_ttl) " s" }
                dt { "Rate" } dd { (rate(&plan)) }
                dt { "Reuse" } dd { @match plan.reuse_percent { Some(p) => { (p) " %" }, None => "no" } }
                dt { "Introspects others' tokens" } dd { @if plan.introspect_any { "yes" } @else { "no" } }
                dt { "DPoP" } dd { (plan.dpop.as_str()) }
            }
        }
    };
    Ok(respond(page(
        &format!("Plan {}", plan.name),
        Section::Plans,
        Some(&session),
        body,
    )))
}

pub(super) async fn update_plan(
    State(console): State<Console>,
    headers: HeaderMap,
    Path(name): Path<String>,
    body: Bytes,
) -> Page {
    let session = console.session(&headers)?;
    let pairs = console.form(&session, &body)?;
    let back = format!("/console/plans/{}", seg(&name));
    let input = match plan_input(&pairs) {
        Ok(input) => input,
        Err(e) => return Ok(console.refused(&headers, &back, problem(e))),
    };
    let etag = field(&pairs, "etag").unwrap_or("*");
    match console
        .api
        .call(
            &session.token,
            Method::PUT,
            &format!("/plans/{}", seg(&name)),
            Some(input),
            &[("if-match", etag)],
        )
        .await
    {
        Ok(_) => Ok(console.redirect(&headers, &back, format!("Plan {name} saved."))),
        Err(ApiError::Problem { status, .. }) if status == StatusCode::PRECONDITION_FAILED => {
            Ok(console.refused(
                &headers,
                &back,
                problem("someone changed this plan meanwhile; here it is as it is now".into()),
            ))
        }
        Err(e) => Ok(console.refused(&headers, &back, e)),
    }
}

// ---- Clients ----

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

pub(super) async fn clients(
    State(console): State<Console>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Page {
    let session = console.session(&headers)?;
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
    Ok(respond(page(
        "Clients",
        Section::Clients,
        Some(&session),
        body,
    )))
}

pub(super) async fn new_client(State(console): State<Console>, headers: HeaderMap) -> Page {
    let session = console.session(&headers)?;
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
    Ok(respond(page(
        "Create a client",
        Section::Clients,
        Some(&session),
        body,
    )))
}

pub(super) async fn create_client(
    State(console): State<Console>,
    headers: HeaderMap,
    body: Bytes,
) -> Page {
    let session = console.session(&headers)?;
    let pairs = console.form(&session, &body)?;
    let input = json!({
        "plan": field(&pairs, "plan").unwrap_or_default(),
        "name": field(&pairs, "name").unwrap_or_default().trim(),
        "token_endpoint_auth_method": field(&pairs, "auth_method").unwrap_or("client_secret_basic"),
    });
    // The form's key makes a double submit (or a reload of the answer) the same client.
    let key = field(&pairs, "idempotency_key").unwrap_or_default();
    let extra: &[(&'static str, &str)] = if key.is_empty() {
        &[]
    } else {
        &[("idempotency-key", key)]
    };
    match console
        .api
        .call(&session.token, Method::POST, "/clients", Some(input), extra)
        .await
        .and_then(|a| a.json::<ClientWithSecret>())
    {
        Ok(client) => Ok(secret_page(&console, &session, &client, "Client created")),
        Err(e) => Ok(console.refused(&headers, "/console/clients/new", e)),
    }
}

/// The one page that shows a secret.
fn secret_page(
    console: &Console,
    session: &Session,
    created: &ClientWithSecret,
    title: &str,
) -> Response {
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
    respond(page(title, Section::Clients, Some(session), body))
}

pub(super) async fn client(
    State(console): State<Console>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Page {
    let session = console.session(&headers)?;
    let answer = console
        .api
        .get(&session.token, &format!("/clients/{}", seg(&id)))
        .await
        .map_err(api(&session))?;
    let client: Client = answer.json().map_err(api(&session))?;
    let etag = answer.etag.unwrap_or_else(|| "*".into());
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
    Ok(respond(page(
        &format!("Client {}", client.client_id),
        Section::Clients,
        Some(&session),
        body,
    )))
}

pub(super) async fn change_client(
    State(console): State<Console>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> Page {
    let session = console.session(&headers)?;
    let pairs = console.form(&session, &body)?;
    let back = format!("/console/clients/{}", seg(&id));
    let mut patch = json!({});
    let mut said = Vec::new();
    if let Some(enabled) = field(&pairs, "enabled") {
        let enabled = enabled == "true";
        patch["enabled"] = json!(enabled);
        said.push(if enabled { "enabled" } else { "disabled" }.to_owned());
    }
    if let Some(plan) = field(&pairs, "plan") {
        patch["plan"] = json!(plan);
        said.push(format!("moved to plan {plan}"));
    }
    let etag = field(&pairs, "etag").unwrap_or("*");
    match console
        .api
        .call(
            &session.token,
            Method::PATCH,
            &format!("/clients/{}", seg(&id)),
            Some(patch),
            &[("if-match", etag)],
        )
        .await
    {
        Ok(_) => Ok(console.redirect(&headers, &back, format!("Client {}.", said.join(", ")))),
        Err(e) => Ok(console.refused(&headers, &back, e)),
    }
}

pub(super) async fn rotate_secret(
    State(console): State<Console>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> Page {
    let session = console.session(&headers)?;
    let pairs = console.form(&session, &body)?;
    let grace: i64 = field(&pairs, "grace_secs")
        .and_then(|g| g.parse().ok())
        .unwrap_or(86_400);
    match console
        .api
        .call(
            &session.token,
            Method::POST,
            &format!("/clients/{}/rotate-secret", seg(&id)),
            Some(json!({ "grace_secs": grace })),
            &[],
        )
        .await
        .and_then(|a| a.json::<ClientWithSecret>())
    {
        Ok(client) => Ok(secret_page(&console, &session, &client, "Secret rotated")),
        Err(e) => Ok(console.refused(&headers, &format!("/console/clients/{}", seg(&id)), e)),
    }
}

pub(super) async fn confirm_delete(
    State(console): State<Console>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Page {
    let session = console.session(&headers)?;
    let answer = console
        .api
        .get(&session.token, &format!("/clients/{}", seg(&id)))
        .await
        .map_err(api(&session))?;
    let client: Client = answer.json().map_err(api(&session))?;
    let base = format!("/console/clients/{}", seg(client.client_id.as_str()));
    let body = html! {
        h1 { "Delete client " code { (client.client_id) } "?" }
        p.warning { "Its token requests are refused from now on and it cannot be restored. "
            "To stop it for a while instead, disable it." }
        form method="post" action={(base) "/delete"} {
            (csrf(&session))
            input type="hidden" name="etag" value=(answer.etag.as_deref().unwrap_or("*"));
            button.danger type="submit" { "Delete " (client.client_id) }
            " " a href=(base) { "Cancel" }
        }
    };
    Ok(respond(page(
        "Delete client",
        Section::Clients,
        Some(&session),
        body,
    )))
}

pub(super) async fn delete_client(
    State(console): State<Console>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> Page {
    let session = console.session(&headers)?;
    let pairs = console.form(&session, &body)?;
    let etag = field(&pairs, "etag").unwrap_or("*");
    match console
        .api
        .call(
            &session.token,
            Method::DELETE,
            &format!("/clients/{}", seg(&id)),
            None,
            &[("if-match", etag)],
        )
        .await
    {
        Ok(_) => Ok(console.redirect(
            &headers,
            "/console/clients",
            format!("Client {id} deleted."),
        )),
        Err(e) => Ok(console.refused(&headers, &format!("/console/clients/{}", seg(&id)), e)),
    }
}

// ---- Keys ----

pub(super) async fn keys(State(console): State<Console>, headers: HeaderMap) -> Page {
    let session = console.session(&headers)?;
    let keys: KeyList = get_json(&console, &session, "/keys").await?;
    let body = html! {
        h1 { "Signing keys" }
        p { "Published at " code { "/.well-known/jwks.json" } ". A new key is published before it signs, so that APIs learn it first; "
            "a replaced key stays published while tokens it signed may live." }
        @if keys.keys.is_empty() {
            p.empty { "No keys: the server creates one when it starts." }
        } @else {
            div.table-wrap { table {
                thead { tr { th scope="col" { "Key id" } th scope="col" { "Algorithm" } th scope="col" { "Status" } th scope="col" { "Created" } th scope="col" { "Signs from" } th scope="col" { "Retires" } th scope="col" { "Unpublished" } } }
                tbody { @for key in keys.keys.iter().rev() {
                    tr {
                        td { code { (key.kid) } } td { (key.alg) }
                        td { span class={"badge " (key.status.as_str())} { (key.status.as_str()) } }
                        td { (time(key.created_at)) } td { (time(key.activates_at)) }
                        td { @match &key.retires_at { Some(t) => (time(*t)), None => "—" } }
                        td { @match &key.unpublished_at { Some(t) => (time(*t)), None => "—" } }
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
    Ok(respond(page("Keys", Section::Keys, Some(&session), body)))
}

pub(super) async fn rotate_keys(
    State(console): State<Console>,
    headers: HeaderMap,
    body: Bytes,
) -> Page {
    let session = console.session(&headers)?;
    let pairs = console.form(&session, &body)?;
    let mut input = json!({
        "activate_in_secs": field(&pairs, "activate_in_secs")
            .and_then(|v| v.parse::<i64>().ok())
            .unwrap_or(600),
    });
    if let Some(alg) = field(&pairs, "alg").filter(|a| !a.is_empty()) {
        input["alg"] = json!(alg);
    }
    match console
        .api
        .call(
            &session.token,
            Method::POST,
            "/keys/rotate",
            Some(input),
            &[],
        )
        .await
        .and_then(|a| a.json::<api::Key>())
    {
        Ok(key) => Ok(console.redirect(
            &headers,
            "/console/keys",
            format!(
                "Key {} published; it signs from {}.",
                key.kid,
                rfc3339(key.activates_at)
            ),
        )),
        Err(e) => Ok(console.refused(&headers, "/console/keys", e)),
    }
}
