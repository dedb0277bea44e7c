//! The console's HTML: the page frame, and the pieces pages share (times, the usage chart,
//! forms with their CSRF token). Server-rendered with maud, which escapes every value;
//! no inline script or style anywhere, so the Content-Security-Policy needs no
//! `unsafe-inline`.

use maud::{html, Markup, DOCTYPE};

use tessera_proto::admin::UsageDay;
use tessera_proto::clock::{rfc3339, Timestamp};

use super::session::Session;

/// Which section a page belongs to, for the navigation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Section {
    Overview,
    Plans,
    Clients,
    Orgs,
    Keys,
    Activity,
    None,
}

/// A whole page: header, navigation, the session's message, and `body`.
pub(super) fn page(
    title: &str,
    section: Section,
    session: Option<&Session>,
    body: Markup,
) -> Markup {
    // An organization's admin sees its organization only (the developer portal).
    let nav: Vec<(Section, String, &str)> = match session.and_then(|s| s.org.as_deref()) {
        Some(org) => vec![(
            Section::Orgs,
            format!(
                "/console/orgs/{}",
                tessera_proto::form::encode_component(org)
            ),
            "Your organization",
        )],
        None => [
            (Section::Overview, "/console/", "Overview"),
            (Section::Plans, "/console/plans", "Plans"),
            (Section::Clients, "/console/clients", "Clients"),
            (Section::Orgs, "/console/orgs", "Organizations"),
            (Section::Keys, "/console/keys", "Keys"),
            (Section::Activity, "/console/activity", "Activity"),
        ]
        .into_iter()
        .map(|(s, href, label)| (s, href.to_owned(), label))
        .collect(),
    };
    let body = maud::PreEscaped(body.into_string());
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · Tessera console" }
                link rel="icon" href="/console/assets/favicon.svg" type="image/svg+xml";
                link rel="stylesheet" href="/console/assets/console.css";
                script src="/console/assets/console.js" defer {}
            }
            body {
                a.skip href="#main" { "Skip to content" }
                header.top {
                    span.brand { "Tessera" }
                    @if let Some(session) = session {
                        nav aria-label="Sections" {
                            ul {
                                @for (s, href, label) in nav {
                                    li {
                                        a href=(href) aria-current=[(s == section).then_some("page")] { (label) }
                                    }
                                }
                            }
                        }
                        div.who {
                            span { "Signed in as " code { (session.shown()) } }
                            @if let Some(org) = &session.org {
                                " " span.badge { "admin of " (org) }
                            }
                            @if !session.write {
                                " " span.badge { "read-only" }
                            }
                            form method="post" action="/console/sign-out" {
                                (csrf(session))
                                button type="submit" { "Sign out" }
                            }
                        }
                    }
                }
                main id="main" {
                    @if let Some((message, error)) = session.and_then(|s| s.flash.as_ref()) {
                        @if *error {
                            p.flash.error role="alert" { (message) }
                        } @else {
                            p.flash role="status" { (message) }
                        }
                    }
                    (body)
                }
            }
        }
    }
}

/// The hidden CSRF field every form of a session carries.
pub(super) fn csrf(session: &Session) -> Markup {
    html! { input type="hidden" name="csrf" value=(session.csrf); }
}

/// What a form holds: the fields as posted (a refused form is shown again with them, so
/// that nothing typed is lost), or as read from what the form edits.
#[derive(Debug, Default, Clone)]
pub(super) struct Typed(pub(super) Vec<(String, String)>);

impl Typed {
    /// The first value of field `name`.
    pub(super) fn get(&self, name: &str) -> Option<&str> {
        super::field(&self.0, name)
    }

    /// Every value of field `name`, in the form's order.
    pub(super) fn all(&self, name: &str) -> Vec<&str> {
        self.0
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// Adds `value` to field `name`.
    pub(super) fn push(&mut self, name: &str, value: &dyn std::fmt::Display) {
        self.0.push((name.to_owned(), value.to_string()));
    }
}

/// Why a form was refused, and the field at fault (a field name of the form; `None` when
/// the fault is not one field's).
#[derive(Debug, Clone)]
pub(super) struct FieldError {
    pub(super) field: Option<String>,
    pub(super) message: String,
}

impl FieldError {
    /// The message of `error` (an admin API problem) beside the form field that `to_field`
    /// names for the problem's `field`.
    pub(super) fn from_api(
        error: &super::api::ApiError,
        to_field: impl Fn(&str) -> Option<String>,
    ) -> Option<Self> {
        match error {
            super::api::ApiError::SignedOut => None,
            super::api::ApiError::Problem {
                title,
                detail,
                field,
                ..
            } => Some(Self {
                field: field.as_deref().and_then(to_field),
                message: if detail.is_empty() {
                    title.clone()
                } else {
                    detail.clone()
                },
            }),
        }
    }

    /// The message, when it is field `name`'s; shown right after the field, and read out
    /// with it (`aria-describedby` names `error-NAME`).
    pub(super) fn beside(error: Option<&Self>, name: &str) -> Markup {
        html! {
            @if let Some(e) = error.filter(|e| e.field.as_deref() == Some(name)) {
                p.field-error #{"error-" (name)} role="alert" { (e.message) }
            }
        }
    }

    /// The message, when it is no field's (or names one the form does not show).
    pub(super) fn above(error: Option<&Self>, shown: &[&str]) -> Markup {
        html! {
            @if let Some(e) = error.filter(|e| e.field.as_deref().is_none_or(|f| !shown.contains(&f))) {
                p.flash.error role="alert" { "Not saved: " (e.message) }
            }
        }
    }
}

/// The second step of a change that bites: what it does, and a form that repeats the first
/// step's fields (`hidden`) with `confirmed=yes` to `action`; or back to `cancel`.
pub(super) fn confirm(
    session: &Session,
    heading: &Markup,
    warning: &str,
    action: &str,
    hidden: &[(&str, &str)],
    button: &str,
    cancel: &str,
) -> Markup {
    html! {
        h1 { (heading) }
        p.warning { (warning) }
        form.confirm method="post" action=(action) {
            (csrf(session))
            @for (name, value) in hidden { input type="hidden" name=(name) value=(value); }
            input type="hidden" name="confirmed" value="yes";
            button.danger type="submit" { (button) }
            a.cancel href=(cancel) { "Cancel" }
        }
    }
}

/// A time, written in RFC 3339 UTC; the script shows it in the viewer's zone, UTC on hover.
pub(super) fn time(at: Timestamp) -> Markup {
    let written = rfc3339(at);
    let shown = written.replacen('T', " ", 1).replace('Z', " UTC");
    html! { time datetime=(written) title=(shown) { (shown) } }
}

/// A page that says what went wrong and where to go.
pub(super) fn problem(session: Option<&Session>, title: &str, detail: &str) -> Markup {
    page(
        title,
        Section::None,
        session,
        html! {
            h1 { (title) }
            p { (detail) }
            p { a href="/console/" { "Back to the overview" } }
        },
    )
}

/// Tokens issued and refused per UTC day, `days` long and ending at `last` (inclusive),
/// as an inline SVG bar chart (refused stacked on issued), with the numbers in a table
/// for screen readers and for reading off exact values.
pub(super) fn usage_chart(days: &[String], usage: &[UsageDay], caption: &str) -> Markup {
    usage_chart_of(days, usage, caption, Unit::Day)
}

/// What one bar of a usage chart stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Unit {
    /// A UTC day (`YYYY-MM-DD`).
    Day,
    /// A UTC hour (`YYYY-MM-DDTHH`).
    Hour,
}

/// [`usage_chart`] with bars of `unit`; `days` are the labels of that unit.
pub(super) fn usage_chart_of(
    days: &[String],
    usage: &[UsageDay],
    caption: &str,
    unit: Unit,
) -> Markup {
    let counts: Vec<(u64, u64)> = days
        .iter()
        .map(|d| {
            usage
                .iter()
                .find(|u| &u.day == d)
                .map_or((0, 0), |u| (u.issued, u.refused))
        })
        .collect();
    bars(days, &counts, caption, unit, Served::Tokens)
}

/// Charts of the requests to each API (as the APIs reported them) over `days`, one per API
/// seen, beside the token chart.
pub(super) fn api_usage_charts(days: &[String], usage: &[UsageDay]) -> Markup {
    let apis: std::collections::BTreeSet<&String> =
        usage.iter().flat_map(|u| u.apis.keys()).collect();
    html! {
        @if apis.is_empty() {
            p.empty { "No API has reported requests of this client in these days." }
        }
        @for api in apis {
            @let counts: Vec<(u64, u64)> = days
                .iter()
                .map(|d| {
                    usage
                        .iter()
                        .find(|u| &u.day == d)
                        .and_then(|u| u.apis.get(api))
                        .map_or((0, 0), |n| (n.requests, n.refused))
                })
                .collect();
            (bars(days, &counts, &format!("Requests to {api}"), Unit::Day, Served::Requests))
        }
    }
}

/// What the lower part of a bar counts: tokens issued, or API requests served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Served {
    Tokens,
    Requests,
}

/// A bar chart of `(served, refused)` per label of `days`.
fn bars(
    days: &[String],
    counts: &[(u64, u64)],
    caption: &str,
    unit: Unit,
    served: Served,
) -> Markup {
    let (units, heading) = match unit {
        Unit::Day => ("days", "Day (UTC)"),
        Unit::Hour => ("hours", "Hour (UTC)"),
    };
    let (what, word, column) = match served {
        Served::Tokens => ("tokens issued", "issued", "Issued"),
        Served::Requests => ("requests served", "served", "Served"),
    };
    let total_issued: u64 = counts.iter().map(|c| c.0).sum();
    let total_refused: u64 = counts.iter().map(|c| c.1).sum();
    let max = counts.iter().map(|(i, r)| i + r).max().unwrap_or(0).max(1);
    let (width, height, left, bottom) = (600.0, 160.0, 52.0, 28.0);
    let plot_h = height - bottom - 10.0;
    let slot = (width - left) / days.len().max(1) as f64;
    let bar = (slot * 0.7).max(1.0);
    let y = |v: u64| 10.0 + plot_h - plot_h * v as f64 / max as f64;
    let label = format!(
        "{caption}: {total_issued} {what} and {total_refused} requests refused in {} {units}",
        days.len()
    );
    html! {
        figure.chart {
            svg viewBox={"0 0 " (width) " " (height)} role="img" aria-label=(label) {
                line.axis x1=(left) y1=(10.0 + plot_h) x2=(width) y2=(10.0 + plot_h) {}
                text.tick x=(left - 4.0) y=(14.0) text-anchor="end" { (max) }
                text.tick x=(left - 4.0) y=(10.0 + plot_h) text-anchor="end" { "0" }
                @for (i, (day, (issued, refused))) in days.iter().zip(counts).enumerate() {
                    @let x = left + slot * i as f64 + (slot - bar) / 2.0;
                    g {
                        title { (day) ": " (issued) " " (word) ", " (refused) " refused" }
                        rect.issued x=(x) y=(y(*issued)) width=(bar) height=(10.0 + plot_h - y(*issued)) {}
                        rect.refused x=(x) y=(y(issued + refused)) width=(bar) height=(y(*issued) - y(issued + refused)) {}
                    }
                }
                @if let (Some(first), Some(last)) = (days.first(), days.last()) {
                    text.tick x=(left) y=(height - 4.0) { (first) }
                    text.tick x=(width) y=(height - 4.0) text-anchor="end" { (last) }
                }
            }
            figcaption {
                (caption) ": "
                span.key-issued { (total_issued) " " (word) } ", "
                span.key-refused { (total_refused) " refused" }
                " (UTC " (units) ")."
            }
            details {
                summary { "The numbers" }
                div.table-wrap {
                    table {
                        thead { tr { th scope="col" { (heading) } th scope="col" { (column) } th scope="col" { "Refused" } } }
                        tbody {
                            @for (day, (issued, refused)) in days.iter().zip(counts).rev() {
                                @if issued + refused > 0 {
                                    tr { td { (day) } td { (issued) } td { (refused) } }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The last `n` UTC days up to the one of `now`, oldest first.
/// The last `n` UTC hours up to the one of `now`, oldest first, as `YYYY-MM-DDTHH`.
pub(super) fn last_hours(now: i64, n: i64) -> Vec<String> {
    (0..n)
        .rev()
        .map(|back| tessera_proto::clock::utc_hour(now - back * 3600))
        .collect()
}

pub(super) fn last_days(now: i64, n: i64) -> Vec<String> {
    (0..n)
        .rev()
        .map(|back| tessera_proto::clock::utc_day(now - back * 86_400))
        .collect()
}

/// A period in seconds, said for people.
pub(super) fn period(secs: u32) -> String {
    match secs {
        1 => "second".into(),
        60 => "minute".into(),
        3600 => "hour".into(),
        86_400 => "day".into(),
        s => format!("{s} s"),
    }
}
