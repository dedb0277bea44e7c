//! Clients: the list with its search, one client with its usage and refusals, creating,
//! changing, rotating a secret (the one page that shows it) and deleting.
//!
//! The pages of one client serve two paths: `/console/clients/{id}`, any client, through the
//! admin API's `/clients`; and `/console/orgs/{id}/clients/{client}`, a client of one
//! organization, through its `/orgs/{id}/clients`: the organization's developer portal, for
//! its own admin (issue 28), where a client cannot move to another plan and the registry's
//! refusals are not shown. An [`Owner`] says which.

use axum::extract::{FromRequestParts, Path, RawPathParams, RawQuery, State};
use axum::http::request::Parts;
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use maud::html;
use tessera_proto::admin::{self as api, Client, ClientPage, ClientWithSecret, PlanList, Usage};
use tessera_proto::form::encode_component as seg;

use super::{days_query, get_json, get_tagged};
use crate::control::console::extract::{Form, Page};
use crate::control::console::session::{random_token, Session};
use crate::control::console::view::{self, csrf, time, usage_chart, FieldError, Section, Typed};
use crate::control::console::{field, Console, Fail};

/// The grace periods the rotate form offers for the previous secret.
const GRACES: [(i64, &str); 4] = [
    (0, "no time: stop it now"),
    (3600, "1 hour"),
    (86_400, "1 day"),
    (604_800, "7 days"),
];

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
        .route("/console/orgs/{id}/clients", post(create_org_client))
        .route("/console/orgs/{id}/clients/{client}", get(client))
        .route(
            "/console/orgs/{id}/clients/{client}/rotate",
            post(rotate_secret),
        )
        .route(
            "/console/orgs/{id}/clients/{client}/change",
            post(change_client),
        )
        .route(
            "/console/orgs/{id}/clients/{client}/delete",
            get(confirm_delete).post(delete_client),
        )
}

/// Whose clients a page reaches, and so where the admin API has them and where their pages
/// are.
#[derive(Debug, Clone)]
pub(super) enum Owner {
    /// Every client: the provider's console, through `/clients`.
    Registry,
    /// The clients of one organization, through `/orgs/{id}/clients`: its portal.
    Org(String),
}

impl Owner {
    /// Client `id` at the admin API.
    fn api(&self, id: &str) -> String {
        match self {
            Self::Registry => format!("/clients/{}", seg(id)),
            Self::Org(org) => format!("/orgs/{}/clients/{}", seg(org), seg(id)),
        }
    }

    /// Client `id`'s page.
    pub(super) fn page(&self, id: &str) -> String {
        match self {
            Self::Registry => format!("/console/clients/{}", seg(id)),
            Self::Org(org) => format!("/console/orgs/{}/clients/{}", seg(org), seg(id)),
        }
    }

    /// The page that lists the clients, and its link's text.
    fn list(&self) -> (String, String) {
        match self {
            Self::Registry => ("/console/clients".into(), "Clients".into()),
            Self::Org(org) => (
                format!("/console/orgs/{}", seg(org)),
                format!("Organization {org}"),
            ),
        }
    }

    /// The navigation's section of its pages.
    fn section(&self) -> Section {
        match self {
            Self::Registry => Section::Clients,
            Self::Org(_) => Section::Orgs,
        }
    }
}

/// The client a path names, with its [`Owner`]: `{id}` of `/console/clients/{id}`, or
/// `{client}` of organization `{id}` in `/console/orgs/{id}/clients/{client}`.
#[derive(Debug)]
struct Named {
    owner: Owner,
    id: String,
}

impl FromRequestParts<Console> for Named {
    type Rejection = Fail;

    async fn from_request_parts(parts: &mut Parts, console: &Console) -> Result<Self, Fail> {
        let params = RawPathParams::from_request_parts(parts, console)
            .await
            .map_err(|e| Fail::BadRequest(None, e.body_text()))?;
        let param = |name: &str| {
            params
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_owned())
        };
        match (param("id"), param("client")) {
            (Some(org), Some(id)) => Ok(Self {
                owner: Owner::Org(org),
                id,
            }),
            (Some(id), None) => Ok(Self {
                owner: Owner::Registry,
                id,
            }),
            _ => Err(Fail::BadRequest(None, "no client in the path".into())),
        }
    }
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
            div.table-wrap { table.cards {
                thead { tr { th scope="col" { "Client id" } th scope="col" { "Name" } th scope="col" { "Plan" } th scope="col" { "State" } th scope="col" { "Created" } } }
                tbody { @for c in &shown {
                    tr {
                        td data-label="Client id" { a href={"/console/clients/" (seg(c.client_id.as_str()))} { code { (c.client_id) } } }
                        td data-label="Name" { (c.name) }
                        td data-label="Plan" { (c.plan) }
                        td data-label="State" { @if c.enabled { "enabled" } @else { span.badge.off { "disabled" } } }
                        td data-label="Created" { (time(c.created_at)) }
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
    new_client_page(&console, &session, &Typed::default(), None).await
}

/// Whether a plan's clients may use the admin API: the scope `tessera-admin` or
/// `tessera-admin-read`.
fn is_admin_plan(plan: &api::Plan) -> bool {
    plan.scopes
        .iter()
        .any(|s| tessera_proto::scope::is_admin_scope(s))
}

/// The form that creates a client, filled with `typed` and showing `error`. No plan is
/// chosen beforehand; an admin plan is marked, and choosing one asks for a confirmation.
async fn new_client_page(
    console: &Console,
    session: &Session,
    typed: &Typed,
    error: Option<&FieldError>,
) -> Result<Page, Fail> {
    let plans: PlanList = get_json(console, session, "/plans").await?;
    let chosen = typed.get("plan").unwrap_or_default();
    let method = typed.get("auth_method").unwrap_or("client_secret_basic");
    let any_admin = plans.plans.iter().any(is_admin_plan);
    let plan_error = error.is_some_and(|e| e.field.as_deref() == Some("plan"));
    let body = html! {
        p { a href="/console/clients" { "← Clients" } }
        h1 { "Create a client" }
        @if plans.plans.is_empty() {
            p.empty { "There is no plan to put a client on: " a href="/console/plans#create" { "create a plan" } " first." }
        } @else {
            form.stack method="post" action="/console/clients" {
                (csrf(session))
                (FieldError::above(error, &["plan", "name"]))
                input type="hidden" name="idempotency_key" value=(random_token());
                label for="client-plan" { "Plan" }
                select #client-plan name="plan" required aria-invalid=[plan_error.then_some("true")]
                    aria-describedby=[plan_error.then_some("error-plan")] {
                    option value="" disabled selected[chosen.is_empty()] { "Choose a plan…" }
                    @for p in &plans.plans {
                        @let admin = is_admin_plan(p);
                        option value=(p.name) selected[p.name == chosen] data-admin=[admin.then_some("yes")] {
                            (p.name) " (" (p.scopes.join(" ")) ")"
                            @if admin { " — admin: controls Tessera" }
                        }
                    }
                }
                (FieldError::beside(error, "plan"))
                @if any_admin {
                    div.warning #admin-warning {
                        p { strong { "Admin plans" } " (marked “admin”) let their clients change "
                            "plans, clients and keys through the admin API. Give one only to an operator's tool." }
                        div.check {
                            input #client-admin-ok type="checkbox" name="confirm_admin" value="yes"
                                checked[typed.get("confirm_admin") == Some("yes")];
                            label for="client-admin-ok" { "Yes, this client is to administer Tessera" }
                        }
                    }
                }
                label for="client-name" { "Name (for people)" }
                input #client-name type="text" name="name" maxlength="256" value=[typed.get("name")];
                (FieldError::beside(error, "name"))
                label for="client-method" { "Client authentication" }
                select #client-method name="auth_method" {
                    option value="client_secret_basic" selected[method == "client_secret_basic"] { "HTTP Basic (client_secret_basic)" }
                    option value="client_secret_post" selected[method == "client_secret_post"] { "In the form body (client_secret_post)" }
                }
                button type="submit" { "Create client" }
            }
        }
    };
    Ok(Page::new(
        "Create a client",
        Section::Clients,
        session,
        body,
    ))
}

async fn create_client(State(console): State<Console>, form: Form) -> Result<Response, Fail> {
    let typed = Typed(form.fields().to_vec());
    let (console_, session, typed_) = (&console, &form.session, &typed);
    let refused = |error: FieldError| async move {
        let page = new_client_page(console_, session, typed_, Some(&error)).await?;
        Ok((StatusCode::BAD_REQUEST, page).into_response())
    };
    let plan = form.field("plan").unwrap_or_default().to_owned();
    if plan.is_empty() {
        return refused(FieldError {
            field: Some("plan".into()),
            message: "Choose the plan the client is on.".into(),
        })
        .await;
    }
    if form.field("confirm_admin") != Some("yes") {
        let plans: PlanList = get_json(&console, &form.session, "/plans").await?;
        if plans
            .plans
            .iter()
            .any(|p| p.name == plan && is_admin_plan(p))
        {
            return refused(FieldError {
                field: Some("plan".into()),
                message: format!(
                    "Plan {plan} grants the admin API: confirm below that this client is to \
                     administer Tessera, or choose another plan."
                ),
            })
            .await;
        }
    }
    let input = api::ClientInput {
        plan,
        name: form.field("name").unwrap_or_default().trim().to_owned(),
        token_endpoint_auth_method: Some(
            form.field("auth_method")
                .unwrap_or("client_secret_basic")
                .to_owned(),
        ),
        ..Default::default()
    };
    let extra = idempotency(&form);
    match console
        .api
        .call(
            &form.session,
            Method::POST,
            "/clients",
            Some(&input),
            &extra,
        )
        .await
        .and_then(|a| a.json::<ClientWithSecret>())
    {
        Ok(client) => Ok(secret_page(
            &console,
            &form.session,
            &client,
            "Client created",
            &Owner::Registry,
        )
        .await
        .into_response()),
        Err(e) => {
            match FieldError::from_api(&e, |f| matches!(f, "plan" | "name").then(|| f.to_owned())) {
                Some(error) => refused(error).await,
                None => Ok(console.refused(&form, "/console/clients/new", e)),
            }
        }
    }
}

/// The client kit's quick start program (`crates/tessera-client/examples/quickstart.rs`,
/// which every build of the examples compiles), shown as it is.
pub(crate) const RUST_QUICKSTART: &str =
    include_str!("../../../../../tessera-client/examples/quickstart.rs");

/// The one page that shows a secret, with a quick start for the client: its values to
/// export, and a token with curl, the Rust client kit and Python's Authlib.
async fn secret_page(
    console: &Console,
    session: &Session,
    created: &ClientWithSecret,
    title: &str,
    owner: &Owner,
) -> Page {
    let client = &created.client;
    let secret = created
        .client_secret
        .as_ref()
        .map(tessera_proto::ClientSecret::expose)
        .unwrap_or_default();
    // The secret is on this page only: a plan that cannot be read (deleted meanwhile)
    // leaves the scopes out rather than the page. An organization's admin reads them from
    // its organization, less Tessera's own (an API client's quick start asks for APIs).
    let scopes = match owner {
        Owner::Registry => {
            get_json::<api::Plan>(console, session, &format!("/plans/{}", seg(&client.plan)))
                .await
                .map(|plan| plan.scopes.join(" "))
        }
        Owner::Org(org) => get_json::<api::Org>(console, session, &format!("/orgs/{}", seg(org)))
            .await
            .map(|org| {
                let apis: Vec<_> = org
                    .scopes
                    .into_iter()
                    .filter(|s| !tessera_proto::scope::names_issuer(s))
                    .collect();
                apis.join(" ")
            }),
    }
    .unwrap_or_default();
    let start = QuickStart {
        base: console.app.issuer().trim_end_matches('/'),
        id: client.client_id.as_str(),
        secret,
        scopes: &scopes,
        post: client.token_endpoint_auth_method == "client_secret_post",
    };
    let snippet = |id: &str, text: String, label: &str| {
        html! {
            div.snippet {
                pre { code #(id) { (text) } }
                button type="button" data-copy=(id) hidden { "Copy " (label) }
            }
        }
    };
    let body = html! {
        h1 { (title) }
        div.warning role="alert" {
            strong { "Copy the secret now. " }
            "It is not stored, only a keyed hash of it, so it will not be shown again. "
            "Lost, it can only be replaced by rotating."
        }
        dl.secret {
            dt { "Client id" } dd {
                code #client-id { (client.client_id) }
                " " button type="button" data-copy="client-id" hidden { "Copy id" }
            }
            dt { "Client secret" }
            dd {
                code #client-secret { (secret) }
                " " button type="button" data-copy="client-secret" hidden { "Copy secret" }
            }
            dt { "Scopes" } dd { code { (start.scopes) } }
            dt { "Token URL" } dd { code { (start.base) "/connect/token" } }
        }
        @if let Some(until) = &client.previous_secret_valid_until {
            p { "The previous secret keeps working until " (time(*until)) "." }
        }
        h2 #quick-start { "Quick start" }
        p { "Set these in the shell the snippets run in (the secret stays out of the code):" }
        (snippet("snippet-env", start.env(), "variables"))
        h3 { "curl" }
        (snippet("snippet-curl", start.curl(), "curl"))
        h3 { "Rust, with the client kit" }
        p { "A whole program (the kit's example " code { "quickstart" } "); its " code { "Cargo.toml" }
            " needs " code { "tessera-client" } ", " code { "tokio" } " and " code { "reqwest = \"0.12\"" }
            " as the book's client kit page says." }
        @if start.post {
            p.note { "The kit authenticates with HTTP Basic: move this client to "
                code { "client_secret_basic" } " to use it, or use the curl or Python snippet." }
        }
        (snippet("snippet-rust", RUST_QUICKSTART.to_owned(), "Rust"))
        h3 { "Python, with Authlib" }
        (snippet("snippet-python", start.python(), "Python"))
        p { a href=(owner.page(client.client_id.as_str())) { "Go to the client" } }
    };
    Page::new(title, owner.section(), session, body)
}

/// What the quick start snippets name: the server, the client and its plan's scopes.
#[derive(Debug)]
struct QuickStart<'a> {
    /// The issuer, without a trailing `/`: the token URL is under it.
    base: &'a str,
    id: &'a str,
    secret: &'a str,
    scopes: &'a str,
    /// `client_secret_post`: the credentials go in the form body, not in Basic.
    post: bool,
}

impl QuickStart<'_> {
    /// The variables the snippets read (ids, scope names and secrets need no quoting but
    /// the space between scopes; quoted all the same).
    fn env(&self) -> String {
        format!(
            "export TESSERA_AUTH_URL='{}'\nexport TESSERA_CLIENT_ID='{}'\n\
             export TESSERA_CLIENT_SECRET='{}'\nexport TESSERA_SCOPES='{}'",
            self.base, self.id, self.secret, self.scopes
        )
    }

    /// A token request (RFC 6749 section 4.4.2) with the client's credentials as it is
    /// registered to send them (section 2.3.1).
    fn curl(&self) -> String {
        let credentials = if self.post {
            format!(
                "-d 'client_id={}' --data-urlencode \"client_secret=$TESSERA_CLIENT_SECRET\"",
                self.id
            )
        } else {
            format!("-u \"{}:$TESSERA_CLIENT_SECRET\"", self.id)
        };
        format!(
            "curl -s {credentials} \\\n  -d grant_type=client_credentials \
             --data-urlencode 'scope={}' \\\n  '{}/connect/token'",
            self.scopes, self.base
        )
    }

    fn python(&self) -> String {
        let insecure = if self.base.starts_with("http://") {
            "# An http:// token URL (this machine only): Authlib refuses it unless\n\
             # AUTHLIB_INSECURE_TRANSPORT=1 is set in the environment.\n"
        } else {
            ""
        };
        let method = if self.post {
            "client_secret_post"
        } else {
            "client_secret_basic"
        };
        format!(
            "# pip install Authlib requests\n{insecure}import os\n\n\
             from authlib.integrations.requests_client import OAuth2Session\n\n\
             client = OAuth2Session(\n    \"{id}\",\n    os.environ[\"TESSERA_CLIENT_SECRET\"],\n    \
             scope=\"{scopes}\",\n    token_endpoint_auth_method=\"{method}\",\n)\n\
             token = client.fetch_token(\"{base}/connect/token\", grant_type=\"client_credentials\")\n\
             print(token[\"token_type\"], token[\"expires_in\"])",
            id = self.id,
            scopes = self.scopes,
            base = self.base,
        )
    }
}

async fn client(
    State(console): State<Console>,
    session: Session,
    Named { owner, id }: Named,
) -> Result<Page, Fail> {
    let (client, etag): (Client, _) = get_tagged(&console, &session, &owner.api(&id)).await?;
    let now = console.app.clock().now();
    let flush = console.app.config().housekeeping_interval.as_secs();
    let days = view::last_days(now, 30);
    // An organization's portal reads its clients' usage from the organization's, and
    // neither the registry's refusals nor its plans, which are the provider's.
    let (usage, refusals, plans) = match &owner {
        Owner::Registry => {
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
            (usage.days, Some(refusals), Some(plans))
        }
        Owner::Org(org) => {
            let usage: api::OrgUsage = get_json(
                &console,
                &session,
                &format!("/orgs/{}/usage?{}", seg(org), days_query(&days)),
            )
            .await?;
            let days = usage
                .clients
                .into_iter()
                .find(|c| c.client_id == client.client_id.as_str())
                .map(|c| c.days)
                .unwrap_or_default();
            (days, None, None)
        }
    };
    let base = owner.page(client.client_id.as_str());
    let (list, list_label) = owner.list();
    let body = html! {
        p { a href=(list) { "← " (list_label) } }
        h1 { "Client " code { (client.client_id) } }
        dl {
            dt { "Name" } dd { @if client.name.is_empty() { "(none)" } @else { (client.name) } }
            dt { "Plan" } dd {
                @if matches!(owner, Owner::Registry) {
                    a href={"/console/plans/" (seg(&client.plan))} { (client.plan) }
                } @else {
                    (client.plan)
                }
            }
            dt { "State" } dd #client-state { @if client.enabled { "enabled" } @else { "disabled: its token requests are refused" } }
            dt { "Authentication" } dd { (client.token_endpoint_auth_method) }
            dt { "Created" } dd { (time(client.created_at)) }
            @if let Some(until) = &client.previous_secret_valid_until {
                dt { "Previous secret valid until" } dd { (time(*until)) }
            }
        }
        h2 { "Usage, last 30 days" }
        p.note #usage-freshness {
            "Counts as of " (time(now)) ". Each instance writes its counts every "
            (flush) " s, so the last " (flush) " s may be missing here; "
            "the last refusals below are live, from this instance."
        }
        (usage_chart(&days, &usage, "This client"))
        h2 { "API requests, last 30 days" }
        (view::api_usage_charts(&days, &usage))
        @if let Some(refusals) = &refusals {
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
            p.note { "The last ten refusals this instance answered, a disabled client's too." }
        }
        }
        @if session.write {
            h2 { "Manage" }
            div.actions {
                form method="post" action={(base) "/change"} {
                    (csrf(&session))
                    input type="hidden" name="etag" value=(etag);
                    @if client.enabled {
                        input type="hidden" name="enabled" value="false";
                        button.danger type="submit" { "Disable client…" }
                    } @else {
                        input type="hidden" name="enabled" value="true";
                        button type="submit" { "Enable client" }
                    }
                }
                @if let Some(plans) = &plans {
                    form method="post" action={(base) "/change"} {
                        (csrf(&session))
                        input type="hidden" name="etag" value=(etag);
                        label for="move-plan" { "Move to plan" }
                        select #move-plan name="plan" {
                            @for p in &plans.plans { option value=(p.name) selected[p.name == client.plan] { (p.name) } }
                        }
                        button type="submit" { "Move" }
                    }
                }
                form method="post" action={(base) "/rotate"} {
                    (csrf(&session))
                    label for="grace" { "Previous secret keeps working for" }
                    select #grace name="grace_secs" {
                        @for (secs, label) in GRACES {
                            option value=(secs) selected[secs == 86_400] { (label) }
                        }
                    }
                    button.danger type="submit" { "Rotate secret…" }
                }
                p { a.danger href={(base) "/delete"} { "Delete client…" } }
            }
        }
    };
    Ok(Page::new(
        format!("Client {}", client.client_id),
        owner.section(),
        &session,
        body,
    ))
}

async fn change_client(
    State(console): State<Console>,
    Named { owner, id }: Named,
    form: Form,
) -> Result<Response, Fail> {
    let back = owner.page(&id);
    let etag = form.field("etag").unwrap_or("*");
    if form.field("enabled") == Some("false") && form.field("confirmed") != Some("yes") {
        let body = view::confirm(
            &form.session,
            &html! { "Disable client " code { (id) } "?" },
            "Its token requests are refused from now on (tokens it holds live until they \
             expire), until it is enabled again. Its refused calls stay listed on its page.",
            &format!("{back}/change"),
            &[("etag", etag), ("enabled", "false")],
            &format!("Disable {id}"),
            &back,
        );
        return Ok(
            Page::new("Disable client", owner.section(), &form.session, body).into_response(),
        );
    }
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
    let sent = match &owner {
        Owner::Registry => {
            console
                .api
                .call(
                    &form.session,
                    Method::PATCH,
                    &owner.api(&id),
                    Some(&patch),
                    &[("if-match", etag)],
                )
                .await
        }
        // An organization's client is on its organization's plan: no move.
        Owner::Org(_) => {
            let patch = api::OrgClientPatch {
                name: None,
                enabled: patch.enabled,
            };
            console
                .api
                .call(
                    &form.session,
                    Method::PATCH,
                    &owner.api(&id),
                    Some(&patch),
                    &[("if-match", etag)],
                )
                .await
        }
    };
    match sent {
        Ok(_) => Ok(console.redirect(&form, &back, format!("Client {}.", said.join(", ")))),
        Err(e) => Ok(console.refused(&form, &back, e)),
    }
}

async fn rotate_secret(
    State(console): State<Console>,
    Named { owner, id }: Named,
    form: Form,
) -> Result<Response, Fail> {
    let grace: i64 = form
        .field("grace_secs")
        .and_then(|g| g.parse().ok())
        .unwrap_or(86_400);
    let back = owner.page(&id);
    if form.field("confirmed") != Some("yes") {
        let kept = GRACES
            .iter()
            .find(|(secs, _)| *secs == grace)
            .map_or_else(|| format!("{grace} s"), |(_, label)| (*label).to_owned());
        let warning = if grace == 0 {
            "A new secret is made and shown once. The current secret stops working at once: \
             the client's token requests fail until it has the new one."
                .to_owned()
        } else {
            format!(
                "A new secret is made and shown once. The current secret keeps working for \
                 {kept}; then only the new one does."
            )
        };
        let body = view::confirm(
            &form.session,
            &html! { "Rotate the secret of " code { (id) } "?" },
            &warning,
            &format!("{back}/rotate"),
            &[("grace_secs", &grace.to_string())],
            &format!("Rotate the secret of {id}"),
            &back,
        );
        return Ok(
            Page::new("Rotate secret", owner.section(), &form.session, body).into_response(),
        );
    }
    match console
        .api
        .call(
            &form.session,
            Method::POST,
            &format!("{}/rotate-secret", owner.api(&id)),
            Some(&api::Rotation {
                grace_secs: Some(grace),
            }),
            &[],
        )
        .await
        .and_then(|a| a.json::<ClientWithSecret>())
    {
        Ok(client) => Ok(
            secret_page(&console, &form.session, &client, "Secret rotated", &owner)
                .await
                .into_response(),
        ),
        Err(e) => Ok(console.refused(&form, &back, e)),
    }
}

async fn confirm_delete(
    State(console): State<Console>,
    session: Session,
    Named { owner, id }: Named,
) -> Result<Page, Fail> {
    let (client, etag): (Client, _) = get_tagged(&console, &session, &owner.api(&id)).await?;
    let base = owner.page(client.client_id.as_str());
    let body = delete_confirmation(&session, client.client_id.as_str(), &etag, &base);
    Ok(Page::new("Delete client", owner.section(), &session, body))
}

/// The second step of deleting a client.
fn delete_confirmation(session: &Session, id: &str, etag: &str, base: &str) -> maud::Markup {
    view::confirm(
        session,
        &html! { "Delete client " code { (id) } "?" },
        "Its token requests are refused from now on and it cannot be restored. \
         To stop it for a while instead, disable it.",
        &format!("{base}/delete"),
        &[("etag", etag)],
        &format!("Delete {id}"),
        base,
    )
}

async fn delete_client(
    State(console): State<Console>,
    Named { owner, id }: Named,
    form: Form,
) -> Result<Response, Fail> {
    let etag = form.field("etag").unwrap_or("*");
    let base = owner.page(&id);
    if form.field("confirmed") != Some("yes") {
        let body = delete_confirmation(&form.session, &id, etag, &base);
        return Ok(
            Page::new("Delete client", owner.section(), &form.session, body).into_response(),
        );
    }
    match console
        .api
        .call(
            &form.session,
            Method::DELETE,
            &owner.api(&id),
            None::<&()>,
            &[("if-match", etag)],
        )
        .await
    {
        Ok(_) => Ok(console.redirect(&form, &owner.list().0, format!("Client {id} deleted."))),
        Err(e) => Ok(console.refused(&form, &base, e)),
    }
}

/// The `Idempotency-Key` header of a form that creates a client, from its hidden field:
/// a double submit (or a reload of the answer) is then the same client.
fn idempotency(form: &Form) -> Vec<(&'static str, &str)> {
    form.field("idempotency_key")
        .filter(|key| !key.is_empty())
        .map(|key| ("idempotency-key", key))
        .into_iter()
        .collect()
}

/// Creates a client in organization `{id}` (the form on its page), then shows its secret.
/// A refusal goes back to the organization's page, which says why.
async fn create_org_client(
    State(console): State<Console>,
    Path(org): Path<String>,
    form: Form,
) -> Result<Response, Fail> {
    let owner = Owner::Org(org.clone());
    let input = api::OrgClientInput {
        name: form.field("name").unwrap_or_default().trim().to_owned(),
        token_endpoint_auth_method: Some(
            form.field("auth_method")
                .unwrap_or("client_secret_basic")
                .to_owned(),
        ),
        ..Default::default()
    };
    let extra = idempotency(&form);
    match console
        .api
        .call(
            &form.session,
            Method::POST,
            &format!("/orgs/{}/clients", seg(&org)),
            Some(&input),
            &extra,
        )
        .await
        .and_then(|a| a.json::<ClientWithSecret>())
    {
        Ok(client) => Ok(
            secret_page(&console, &form.session, &client, "Client created", &owner)
                .await
                .into_response(),
        ),
        Err(e) => Ok(console.refused(&form, &owner.list().0, e)),
    }
}
