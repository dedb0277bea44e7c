//! Plans: the list, one plan, and the form that creates or changes one.

use axum::extract::{Path, State};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use maud::{html, Markup};
use tessera_proto::admin::{ApiLimit, Dpop, Plan, PlanInput, PlanList, RateInput};
use tessera_proto::form::encode_component as seg;

use super::{get_json, get_tagged};
use crate::control::console::api::ApiError;
use crate::control::console::extract::{Form, Page};
use crate::control::console::session::Session;
use crate::control::console::view::{self, csrf, time, FieldError, Section, Typed};
use crate::control::console::{field, Console, Fail};

pub(super) fn router() -> Router<Console> {
    Router::new()
        .route("/console/plans", get(plans).post(create_plan))
        .route("/console/plans/{name}", get(plan).post(update_plan))
}

async fn plans(State(console): State<Console>, session: Session) -> Result<Page, Fail> {
    plans_page(&console, &session, &Typed::default(), None).await
}

/// The plans and the form that creates one, filled with `typed` and showing `error`.
async fn plans_page(
    console: &Console,
    session: &Session,
    typed: &Typed,
    error: Option<&FieldError>,
) -> Result<Page, Fail> {
    let plans: PlanList = get_json(console, session, "/plans").await?;
    let body = html! {
        h1 { "Plans" }
        p { "A plan names the scopes its clients may request, their tokens' lifetime, how often they may ask, and how often they may call each API." }
        @if plans.plans.is_empty() {
            p.empty { "No plans yet. "
                @if session.write { "Create the first one below; then create clients on it." }
                @else { "An admin with write access creates them." } }
        } @else {
            div.table-wrap { table {
                thead { tr {
                    th scope="col" { "Plan" } th scope="col" { "Scopes" } th scope="col" { "Token lifetime" }
                    th scope="col" { "Rate" } th scope="col" { "API limits" } th scope="col" { "Reuse" } th scope="col" { "Clients" } th scope="col" { "Updated" }
                } }
                tbody { @for plan in &plans.plans {
                    tr {
                        td { a href={"/console/plans/" (seg(&plan.name))} { (plan.name) } }
                        td { (plan.scopes.join(" ")) }
                        td { (plan.token_ttl) " s" }
                        td { (rate(plan)) }
                        td { (api_limits(plan)) }
                        td { @match plan.reuse_percent { Some(p) => { (p) " %" }, None => "no" } }
                        td { a href={"/console/clients?plan=" (seg(&plan.name))} { (plan.clients) } }
                        td { (time(plan.updated_at)) }
                    }
                } }
            } }
        }
        @if session.write {
            h2 #create { "Create a plan" }
            (plan_form(session, None, None, typed, error))
        }
    };
    Ok(Page::new("Plans", Section::Plans, session, body))
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

/// One API's limits in words: `5/min (burst 5), 1000/day`.
fn api_limit(limit: &ApiLimit) -> String {
    let rate = limit.rate.as_ref().map(|r| match limit.burst {
        Some(b) => format!("{r} (burst {b})"),
        None => r.clone(),
    });
    let parts: Vec<String> = rate.into_iter().chain(limit.quota.clone()).collect();
    if parts.is_empty() {
        "no limit".into()
    } else {
        parts.join(", ")
    }
}

/// A plan's API limits in words, API by API.
fn api_limits(plan: &Plan) -> String {
    if plan.api_limits.is_empty() {
        return "none".into();
    }
    let all: Vec<String> = plan
        .api_limits
        .iter()
        .map(|(api, limit)| format!("{api}: {}", api_limit(limit)))
        .collect();
    all.join("; ")
}

/// A plan as the form shows it, with a row of API limits for each API it grants (not
/// Tessera's own scopes).
fn typed_plan(p: &Plan) -> Typed {
    let mut typed = Typed::default();
    typed.push("scopes", &p.scopes.join(" "));
    typed.push("token_ttl", &p.token_ttl);
    if let Some(r) = &p.token_rate {
        typed.push("rate_count", &r.count);
        typed.push("rate_period", &r.period_secs);
        typed.push("rate_burst", &r.burst);
    }
    if let Some(reuse) = p.reuse_percent {
        typed.push("reuse_percent", &reuse);
    }
    if p.introspect_any {
        typed.push("introspect_any", &"true");
    }
    typed.push("dpop", &p.dpop.as_str());
    for scope in p
        .scopes
        .iter()
        .filter(|s| !tessera_proto::scope::names_issuer(s))
    {
        let limit = p.api_limits.get(scope).cloned().unwrap_or_default();
        typed.push("limit_api", &scope);
        typed.push("limit_rate", &limit.rate.unwrap_or_default());
        typed.push(
            "limit_burst",
            &limit.burst.map(|b| b.to_string()).unwrap_or_default(),
        );
        typed.push("limit_quota", &limit.quota.unwrap_or_default());
    }
    typed
}

/// The rows of API limits the form shows: the typed ones; for a new plan at least three,
/// the extra ones empty.
fn limit_rows(typed: &Typed, editing: bool) -> Vec<[String; 4]> {
    let column = |name| typed.all(name);
    let (apis, rates, bursts, quotas) = (
        column("limit_api"),
        column("limit_rate"),
        column("limit_burst"),
        column("limit_quota"),
    );
    let cell = |values: &[&str], i: usize| values.get(i).copied().unwrap_or_default().to_owned();
    let mut rows: Vec<[String; 4]> = (0..apis.len())
        .map(|i| {
            [
                cell(&apis, i),
                cell(&rates, i),
                cell(&bursts, i),
                cell(&quotas, i),
            ]
        })
        .collect();
    if !editing {
        while rows.len() < 3 {
            rows.push(Default::default());
        }
    }
    rows
}

/// The form fields the admin API's problem `field` is about.
fn form_field(api_field: &str) -> Option<String> {
    let field = match api_field {
        f if f.starts_with("token_rate") => "rate_count",
        f if f.starts_with("api_limits") => "limits",
        f @ ("name" | "scopes" | "token_ttl" | "reuse_percent") => f,
        _ => return None,
    };
    Some(field.to_owned())
}

/// The fields the plan form can show an error beside.
const PLAN_FIELDS: [&str; 6] = [
    "name",
    "scopes",
    "token_ttl",
    "rate_count",
    "limits",
    "reuse_percent",
];

/// The plan form: create (`editing` is `None`) or edit the plan `editing` (with its
/// `ETag`), filled with `typed` and with `error` beside its field.
fn plan_form(
    session: &Session,
    editing: Option<&str>,
    etag: Option<&str>,
    typed: &Typed,
    error: Option<&FieldError>,
) -> Markup {
    let action = match editing {
        Some(name) => format!("/console/plans/{}", seg(name)),
        None => "/console/plans".into(),
    };
    let period: u32 = typed
        .get("rate_period")
        .and_then(|p| p.parse().ok())
        .unwrap_or(60);
    let dpop = typed.get("dpop").unwrap_or("allowed");
    let beside = |name| FieldError::beside(error, name);
    let invalid = |name: &str| {
        error
            .is_some_and(|e| e.field.as_deref() == Some(name))
            .then_some("true")
    };
    let described = |name: &str, help: Option<&str>| {
        let mut ids: Vec<String> = help.map(str::to_owned).into_iter().collect();
        if invalid(name).is_some() {
            ids.push(format!("error-{name}"));
        }
        (!ids.is_empty()).then(|| ids.join(" "))
    };
    html! {
        form.stack method="post" action=(action) {
            (csrf(session))
            (FieldError::above(error, &PLAN_FIELDS))
            @if let Some(etag) = etag { input type="hidden" name="etag" value=(etag); }
            @if editing.is_none() {
                label for="plan-name" { "Name" }
                input #plan-name type="text" name="name" required pattern="[A-Za-z0-9_\\-]{1,64}"
                    value=[typed.get("name")] aria-invalid=[invalid("name")]
                    aria-describedby=[described("name", Some("plan-name-help"))] spellcheck="false";
                small #plan-name-help { "1 to 64 letters, digits, _ or -." }
                (beside("name"))
            }
            label for="plan-scopes" { "Scopes" }
            input #plan-scopes type="text" name="scopes" required spellcheck="false"
                value=[typed.get("scopes")] aria-invalid=[invalid("scopes")]
                aria-describedby=[described("scopes", Some("plan-scopes-help"))];
            small #plan-scopes-help { "Separated by spaces, e.g. market-data-api news-api." }
            (beside("scopes"))
            label for="plan-ttl" { "Token lifetime (seconds)" }
            input #plan-ttl type="number" name="token_ttl" min="1" max="86400"
                value=(typed.get("token_ttl").unwrap_or("3600")) aria-invalid=[invalid("token_ttl")]
                aria-describedby=[described("token_ttl", None)];
            (beside("token_ttl"))
            fieldset {
                legend { "Rate limit (leave the count empty for none)" }
                label for="plan-rate" { "Tokens" }
                input #plan-rate type="number" name="rate_count" min="1" value=[typed.get("rate_count")]
                    aria-invalid=[invalid("rate_count")] aria-describedby=[described("rate_count", None)];
                label for="plan-period" { "per" }
                select #plan-period name="rate_period" {
                    @for (secs, label) in [(1, "second"), (60, "minute"), (3600, "hour"), (86_400, "day")] {
                        option value=(secs) selected[period == secs] { (label) }
                    }
                }
                label for="plan-burst" { "Burst (default: the count)" }
                input #plan-burst type="number" name="rate_burst" min="1" value=[typed.get("rate_burst")];
                (beside("rate_count"))
            }
            fieldset {
                legend { "API request limits per client (enforced by each API; leave empty for none)" }
                div.table-wrap { table {
                    thead { tr {
                        th scope="col" { "API" }
                        th scope="col" { "Rate, e.g. 5/min" }
                        th scope="col" { "Burst" }
                        th scope="col" { "Quota, e.g. 1000/day" }
                    } }
                    tbody { @for (i, [api, rate, burst, quota]) in limit_rows(typed, editing.is_some()).into_iter().enumerate() {
                        @let named = editing.is_some().then_some(api.as_str());
                        tr {
                            td {
                                @if let Some(api) = named {
                                    input type="hidden" name="limit_api" value=(api);
                                    label for={"limit-rate-" (i)} { (api) }
                                } @else {
                                    input type="text" name="limit_api" spellcheck="false" value=(api)
                                        aria-label={"API " (i + 1)} pattern="[A-Za-z0-9._:/\\-]{1,128}";
                                }
                            }
                            td { input #{"limit-rate-" (i)} type="text" name="limit_rate" spellcheck="false"
                                pattern="[1-9][0-9]*/(sec|min|hour|day)" value=(rate)
                                aria-label={"Rate " (named.unwrap_or(""))}; }
                            td { input type="number" name="limit_burst" min="1" value=(burst)
                                aria-label={"Burst " (named.unwrap_or(""))}; }
                            td { input type="text" name="limit_quota" spellcheck="false"
                                pattern="[1-9][0-9]*/(day|month)" value=(quota)
                                aria-label={"Quota " (named.unwrap_or(""))}; }
                        }
                    } }
                } }
                (beside("limits"))
            }
            label for="plan-reuse" { "Reuse a token while more than this % of its life is left (empty: never)" }
            input #plan-reuse type="number" name="reuse_percent" min="1" max="99"
                value=[typed.get("reuse_percent")] aria-invalid=[invalid("reuse_percent")]
                aria-describedby=[described("reuse_percent", None)];
            (beside("reuse_percent"))
            div.check {
                input #plan-introspect type="checkbox" name="introspect_any" value="true"
                    checked[typed.get("introspect_any") == Some("true")];
                label for="plan-introspect" { "Its clients may introspect tokens issued to others" }
            }
            label for="plan-dpop" { "DPoP (RFC 9449): bind tokens to the client's key" }
            select #plan-dpop name="dpop" {
                @for (value, label) in [("allowed", "allowed: when the client sends a proof"), ("required", "required: refuse requests without a proof"), ("off", "off: Bearer tokens only")] {
                    option value=(value) selected[dpop == value] { (label) }
                }
            }
            button type="submit" { @if editing.is_some() { "Save plan" } @else { "Create plan" } }
        }
    }
}

/// A [`PlanInput`] from the form, or what is wrong with it.
fn plan_input(pairs: &[(String, String)]) -> Result<PlanInput, FieldError> {
    let wrong = |field: &str, message: String| FieldError {
        field: Some(field.to_owned()),
        message,
    };
    let number = |value: Option<&str>, what: &str, at: &str| -> Result<Option<u32>, FieldError> {
        match value.map(str::trim).filter(|v| !v.is_empty()) {
            None => Ok(None),
            Some(v) => v
                .parse()
                .map(Some)
                .map_err(|_| wrong(at, format!("{what} must be a whole number"))),
        }
    };
    let text = |value: Option<&str>| {
        value
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
    };
    let scopes = field(pairs, "scopes")
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    let token_rate = match number(field(pairs, "rate_count"), "The rate", "rate_count")? {
        None => None,
        Some(count) => Some(RateInput {
            count,
            period_secs: number(field(pairs, "rate_period"), "The period", "rate_count")?
                .unwrap_or(60),
            burst: number(field(pairs, "rate_burst"), "The burst", "rate_count")?,
        }),
    };
    let reuse_percent = number(
        field(pairs, "reuse_percent"),
        "The reuse percentage",
        "reuse_percent",
    )?
    .map(|p| {
        u8::try_from(p).map_err(|_| {
            wrong(
                "reuse_percent",
                "The reuse percentage must be 1 to 99".into(),
            )
        })
    })
    .transpose()?;
    let dpop = match field(pairs, "dpop").unwrap_or("allowed") {
        "required" => Dpop::Required,
        "off" => Dpop::Off,
        _ => Dpop::Allowed,
    };
    // The limit rows: parallel lists of fields, one entry per row, in the form's order.
    let all = |name: &str| -> Vec<&str> {
        pairs
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .collect()
    };
    let (apis, rates, bursts, quotas) = (
        all("limit_api"),
        all("limit_rate"),
        all("limit_burst"),
        all("limit_quota"),
    );
    let mut api_limits = std::collections::BTreeMap::new();
    for (i, api) in apis.iter().enumerate() {
        let limit = ApiLimit {
            rate: text(rates.get(i).copied()),
            burst: number(bursts.get(i).copied(), "A burst", "limits")?,
            quota: text(quotas.get(i).copied()),
        };
        let api = api.trim();
        if api.is_empty() {
            if limit != ApiLimit::default() {
                return Err(wrong("limits", "Name the API of each limit".into()));
            }
            continue;
        }
        if limit != ApiLimit::default() {
            api_limits.insert(api.to_owned(), limit);
        }
    }
    Ok(PlanInput {
        scopes,
        token_ttl: number(field(pairs, "token_ttl"), "The token lifetime", "token_ttl")?,
        token_rate,
        reuse_percent,
        introspect_any: Some(field(pairs, "introspect_any") == Some("true")),
        dpop: Some(dpop),
        api_limits,
        limit_per: None,
    })
}

async fn create_plan(State(console): State<Console>, form: Form) -> Result<Response, Fail> {
    let typed = Typed(form.fields().to_vec());
    let (console_, session, typed_) = (&console, &form.session, &typed);
    let refused = |error: FieldError| async move {
        let page = plans_page(console_, session, typed_, Some(&error)).await?;
        Ok((StatusCode::BAD_REQUEST, page).into_response())
    };
    let name = form.field("name").unwrap_or_default().trim().to_owned();
    let input = match plan_input(form.fields()) {
        Ok(input) => input,
        Err(e) => return refused(e).await,
    };
    let path = format!("/plans/{}", seg(&name));
    let exists = match console.api.get(&form.session, &path).await {
        Ok(_) => FieldError {
            field: Some("name".into()),
            message: format!("A plan named {name} exists; edit it instead."),
        },
        Err(ApiError::Problem { status, .. }) if status == StatusCode::NOT_FOUND => {
            match console
                .api
                .call(&form.session, Method::PUT, &path, Some(&input), &[])
                .await
            {
                Ok(_) => {
                    return Ok(console.redirect(
                        &form,
                        "/console/plans",
                        format!("Plan {name} created."),
                    ))
                }
                Err(e) => match FieldError::from_api(&e, form_field) {
                    Some(error) => error,
                    None => return Ok(console.refused(&form, "/console/plans", e)),
                },
            }
        }
        Err(e) => return Ok(console.refused(&form, "/console/plans", e)),
    };
    refused(exists).await
}

fn problem(detail: String) -> ApiError {
    ApiError::Problem {
        status: StatusCode::BAD_REQUEST,
        title: "Not saved".into(),
        detail,
        field: None,
    }
}

async fn plan(
    State(console): State<Console>,
    session: Session,
    Path(name): Path<String>,
) -> Result<Page, Fail> {
    plan_page(&console, &session, &name, None).await
}

/// One plan, and the form that changes it: filled with the plan, or with what was typed
/// and the error beside its field.
async fn plan_page(
    console: &Console,
    session: &Session,
    name: &str,
    refused: Option<(&Typed, &FieldError)>,
) -> Result<Page, Fail> {
    let (plan, etag): (Plan, _) =
        get_tagged(console, session, &format!("/plans/{}", seg(name))).await?;
    let body = html! {
        p { a href="/console/plans" { "← Plans" } }
        h1 { "Plan " (plan.name) }
        p {
            a href={"/console/clients?plan=" (seg(&plan.name))} {
                (plan.clients) @if plan.clients == 1 { " client" } @else { " clients" }
            }
            " on this plan. Changes apply to their next token request."
        }
        @if session.write {
            (plan_form(
                session,
                Some(&plan.name),
                Some(&etag),
                refused.map_or(&typed_plan(&plan), |(typed, _)| typed),
                refused.map(|(_, error)| error),
            ))
        } @else {
            dl {
                dt { "Scopes" } dd { (plan.scopes.join(" ")) }
                dt { "Token lifetime" } dd { (plan.token_ttl) " s" }
                dt { "Rate" } dd { (rate(&plan)) }
                dt { "API limits" } dd { (api_limits(&plan)) }
                dt { "Reuse" } dd { @match plan.reuse_percent { Some(p) => { (p) " %" }, None => "no" } }
                dt { "Introspects others' tokens" } dd { @if plan.introspect_any { "yes" } @else { "no" } }
                dt { "DPoP" } dd { (plan.dpop.as_str()) }
            }
        }
    };
    Ok(Page::new(
        format!("Plan {}", plan.name),
        Section::Plans,
        session,
        body,
    ))
}

async fn update_plan(
    State(console): State<Console>,
    Path(name): Path<String>,
    form: Form,
) -> Result<Response, Fail> {
    let back = format!("/console/plans/{}", seg(&name));
    let typed = Typed(form.fields().to_vec());
    let error = match plan_input(form.fields()) {
        Err(e) => e,
        Ok(input) => {
            let etag = form.field("etag").unwrap_or("*");
            match console
                .api
                .call(
                    &form.session,
                    Method::PUT,
                    &format!("/plans/{}", seg(&name)),
                    Some(&input),
                    &[("if-match", etag)],
                )
                .await
            {
                Ok(_) => return Ok(console.redirect(&form, &back, format!("Plan {name} saved."))),
                Err(ApiError::Problem { status, .. })
                    if status == StatusCode::PRECONDITION_FAILED =>
                {
                    return Ok(console.refused(
                        &form,
                        &back,
                        problem(
                            "someone changed this plan meanwhile; here it is as it is now".into(),
                        ),
                    ))
                }
                Err(e) => match FieldError::from_api(&e, form_field) {
                    Some(error) => error,
                    None => return Ok(console.refused(&form, &back, e)),
                },
            }
        }
    };
    let page = plan_page(&console, &form.session, &name, Some((&typed, &error))).await?;
    Ok((StatusCode::BAD_REQUEST, page).into_response())
}
