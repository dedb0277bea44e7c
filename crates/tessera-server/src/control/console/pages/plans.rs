//! Plans: the list, one plan, and the form that creates or changes one.

use axum::extract::{Path, State};
use axum::http::{Method, StatusCode};
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use maud::{html, Markup};
use tessera_proto::admin::{ApiLimit, Dpop, Plan, PlanInput, PlanList, RateInput};
use tessera_proto::form::encode_component as seg;

use super::{get_json, get_tagged};
use crate::control::console::api::ApiError;
use crate::control::console::extract::{Form, Page};
use crate::control::console::session::Session;
use crate::control::console::view::{self, csrf, time, Section};
use crate::control::console::{field, Console, Fail};

pub(super) fn router() -> Router<Console> {
    Router::new()
        .route("/console/plans", get(plans).post(create_plan))
        .route("/console/plans/{name}", get(plan).post(update_plan))
}

async fn plans(State(console): State<Console>, session: Session) -> Result<Page, Fail> {
    let plans: PlanList = get_json(&console, &session, "/plans").await?;
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
            (plan_form(&session, None, None))
        }
    };
    Ok(Page::new("Plans", Section::Plans, &session, body))
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

/// The APIs whose limits the form offers: an edited plan's scopes (but Tessera's own), or
/// three rows to name for a new plan.
fn limit_rows(plan: Option<&Plan>) -> Vec<(Option<&str>, ApiLimit)> {
    match plan {
        Some(p) => p
            .scopes
            .iter()
            .filter(|s| !tessera_proto::scope::names_issuer(s))
            .map(|s| {
                let limit = p.api_limits.get(s).cloned().unwrap_or_default();
                (Some(s.as_str()), limit)
            })
            .collect(),
        None => vec![(None, ApiLimit::default()); 3],
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
            fieldset {
                legend { "API request limits per client (enforced by each API; leave empty for none)" }
                div.table-wrap { table {
                    thead { tr {
                        th scope="col" { "API" }
                        th scope="col" { "Rate, e.g. 5/min" }
                        th scope="col" { "Burst" }
                        th scope="col" { "Quota, e.g. 1000/day" }
                    } }
                    tbody { @for (i, (api, limit)) in limit_rows(plan).into_iter().enumerate() {
                        tr {
                            td {
                                @if let Some(api) = api {
                                    input type="hidden" name="limit_api" value=(api);
                                    label for={"limit-rate-" (i)} { (api) }
                                } @else {
                                    input type="text" name="limit_api" spellcheck="false"
                                        aria-label={"API " (i + 1)} pattern="[A-Za-z0-9._:/\\-]{1,128}";
                                }
                            }
                            td { input #{"limit-rate-" (i)} type="text" name="limit_rate" spellcheck="false"
                                pattern="[1-9][0-9]*/(sec|min|hour|day)" value=[limit.rate.as_deref()]
                                aria-label={"Rate " (api.unwrap_or(""))}; }
                            td { input type="number" name="limit_burst" min="1" value=[limit.burst]
                                aria-label={"Burst " (api.unwrap_or(""))}; }
                            td { input type="text" name="limit_quota" spellcheck="false"
                                pattern="[1-9][0-9]*/(day|month)" value=[limit.quota.as_deref()]
                                aria-label={"Quota " (api.unwrap_or(""))}; }
                        }
                    } }
                } }
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

/// A [`PlanInput`] from the form, or what is wrong with it.
fn plan_input(pairs: &[(String, String)]) -> Result<PlanInput, String> {
    let number = |value: Option<&str>, what: &str| -> Result<Option<u32>, String> {
        match value.map(str::trim).filter(|v| !v.is_empty()) {
            None => Ok(None),
            Some(v) => v
                .parse()
                .map(Some)
                .map_err(|_| format!("{what} must be a whole number")),
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
    let token_rate = match number(field(pairs, "rate_count"), "The rate")? {
        None => None,
        Some(count) => Some(RateInput {
            count,
            period_secs: number(field(pairs, "rate_period"), "The period")?.unwrap_or(60),
            burst: number(field(pairs, "rate_burst"), "The burst")?,
        }),
    };
    let reuse_percent = number(field(pairs, "reuse_percent"), "The reuse percentage")?
        .map(|p| u8::try_from(p).map_err(|_| "The reuse percentage must be 1 to 99".to_owned()))
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
            burst: number(bursts.get(i).copied(), "A burst")?,
            quota: text(quotas.get(i).copied()),
        };
        let api = api.trim();
        if api.is_empty() {
            if limit != ApiLimit::default() {
                return Err("Name the API of each limit".into());
            }
            continue;
        }
        if limit != ApiLimit::default() {
            api_limits.insert(api.to_owned(), limit);
        }
    }
    Ok(PlanInput {
        scopes,
        token_ttl: number(field(pairs, "token_ttl"), "The token lifetime")?,
        token_rate,
        reuse_percent,
        introspect_any: Some(field(pairs, "introspect_any") == Some("true")),
        dpop: Some(dpop),
        api_limits,
    })
}

async fn create_plan(State(console): State<Console>, form: Form) -> Result<Response, Fail> {
    let back = "/console/plans#create";
    let name = form.field("name").unwrap_or_default().trim().to_owned();
    let input = match plan_input(form.fields()) {
        Ok(input) => input,
        Err(e) => return Ok(console.refused(&form, back, problem(e))),
    };
    let path = format!("/plans/{}", seg(&name));
    match console.api.get(&form.session.token, &path).await {
        Ok(_) => {
            return Ok(console.refused(
                &form,
                back,
                problem(format!("a plan named {name} exists; edit it instead")),
            ))
        }
        Err(ApiError::Problem { status, .. }) if status == StatusCode::NOT_FOUND => {}
        Err(e) => return Ok(console.refused(&form, back, e)),
    }
    match console
        .api
        .call(&form.session.token, Method::PUT, &path, Some(&input), &[])
        .await
    {
        Ok(_) => Ok(console.redirect(&form, "/console/plans", format!("Plan {name} created."))),
        Err(e) => Ok(console.refused(&form, back, e)),
    }
}

fn problem(detail: String) -> ApiError {
    ApiError::Problem {
        status: StatusCode::BAD_REQUEST,
        title: "Not saved".into(),
        detail,
    }
}

async fn plan(
    State(console): State<Console>,
    session: Session,
    Path(name): Path<String>,
) -> Result<Page, Fail> {
    let (plan, etag): (Plan, _) =
        get_tagged(&console, &session, &format!("/plans/{}", seg(&name))).await?;
    let body = html! {
        p { a href="/console/plans" { "← Plans" } }
        h1 { "Plan " (plan.name) }
        p {
            a href={"/console/clients?plan=" (seg(&plan.name))} { (plan.clients) " clients" }
            " on this plan. Changes apply to their next token request."
        }
        @if session.write {
            (plan_form(&session, Some(&plan), Some(&etag)))
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
        &session,
        body,
    ))
}

async fn update_plan(
    State(console): State<Console>,
    Path(name): Path<String>,
    form: Form,
) -> Result<Response, Fail> {
    let back = format!("/console/plans/{}", seg(&name));
    let input = match plan_input(form.fields()) {
        Ok(input) => input,
        Err(e) => return Ok(console.refused(&form, &back, problem(e))),
    };
    let etag = form.field("etag").unwrap_or("*");
    match console
        .api
        .call(
            &form.session.token,
            Method::PUT,
            &format!("/plans/{}", seg(&name)),
            Some(&input),
            &[("if-match", etag)],
        )
        .await
    {
        Ok(_) => Ok(console.redirect(&form, &back, format!("Plan {name} saved."))),
        Err(ApiError::Problem { status, .. }) if status == StatusCode::PRECONDITION_FAILED => {
            Ok(console.refused(
                &form,
                &back,
                problem("someone changed this plan meanwhile; here it is as it is now".into()),
            ))
        }
        Err(e) => Ok(console.refused(&form, &back, e)),
    }
}
