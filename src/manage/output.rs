//! How a management command prints what it answers: for people, or with `--json` as the
//! admin API's objects ([`tessera_proto::admin`]), one way for every command (as kanidm's
//! CLI has its `OutputMode`).

use std::io::Write;

use anyhow::Result;
use serde::Serialize;
use tessera_proto::admin::{self as api, Plan, TrustPolicy};
use tessera_server::registrar::views;

/// Text for people, or JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Output {
    /// Lines for people.
    Text,
    /// The objects as JSON (`--json`).
    Json,
}

impl Output {
    /// JSON when `json` (the command's `--json`).
    pub(crate) fn of(json: bool) -> Self {
        if json {
            Self::Json
        } else {
            Self::Text
        }
    }

    /// One object: a line of JSON, or what `text` says of it.
    pub(crate) fn object<T: Serialize>(
        self,
        value: &T,
        text: impl FnOnce(&T) -> String,
    ) -> Result<()> {
        self.write(&mut std::io::stdout().lock(), value, text)
    }

    /// [`Output::object`] to `out`.
    pub(crate) fn write<T: Serialize>(
        self,
        out: &mut impl Write,
        value: &T,
        text: impl FnOnce(&T) -> String,
    ) -> Result<()> {
        match self {
            Self::Json => serde_json::to_writer(&mut *out, value)?,
            Self::Text => out.write_all(text(value).as_bytes())?,
        }
        out.write_all(b"\n")?;
        Ok(())
    }

    /// A list: an indented JSON array, or a `header` line (if any) and one `row` per value.
    pub(crate) fn list<T: Serialize>(
        self,
        values: &[T],
        header: Option<String>,
        row: impl Fn(&T) -> String,
    ) -> Result<()> {
        let mut out = std::io::stdout().lock();
        match self {
            Self::Json => writeln!(out, "{}", serde_json::to_string_pretty(values)?)?,
            Self::Text => {
                if let Some(header) = header {
                    writeln!(out, "{header}")?;
                }
                for value in values {
                    writeln!(out, "{}", row(value))?;
                }
            }
        }
        Ok(())
    }
}

/// The API requests of a day, summed over the APIs: served and refused.
fn api_totals(day: &api::UsageDay) -> (u64, u64) {
    day.apis
        .values()
        .fold((0, 0), |(r, f), n| (r + n.requests, f + n.refused))
}

/// A CSV field: quoted when it holds a comma, a quote or a line break (RFC 4180 section 2).
fn csv_field(value: &str) -> String {
    if value.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", value.replace('"', "\"\""))
    } else {
        value.to_owned()
    }
}

/// An organization's usage as CSV for billing (RFC 4180): a header, one row per client and
/// day, and per day a row of client `total`; ordered by day.
pub(crate) fn org_usage_csv(usage: &api::OrgUsage) -> String {
    let mut rows: Vec<(String, u8, String)> = Vec::new();
    let row = |day: &api::UsageDay, client: &str, name: &str| {
        let (requests, refused) = api_totals(day);
        format!(
            "{},{},{},{},{},{},{}\r\n",
            day.day,
            csv_field(client),
            csv_field(name),
            day.issued,
            day.refused,
            requests,
            refused
        )
    };
    for client in &usage.clients {
        for day in &client.days {
            rows.push((
                day.day.clone(),
                0,
                row(day, &client.client_id, &client.name),
            ));
        }
    }
    for day in &usage.total {
        rows.push((day.day.clone(), 1, row(day, "total", "")));
    }
    rows.sort();
    let mut csv = String::from(
        "day,client_id,client_name,tokens_issued,tokens_refused,api_requests,api_refused\r\n",
    );
    for (_, _, line) in rows {
        csv.push_str(&line);
    }
    csv
}

/// An organization's usage for people: a row per client and day, then the totals.
pub(crate) fn org_usage_text(usage: &api::OrgUsage) -> String {
    let header = format!(
        "{:<10} {:<26} {:>10} {:>10} {:>12} {:>12}  NAME\n",
        "DAY", "CLIENT", "ISSUED", "REFUSED", "API_REQS", "API_REFUSED"
    );
    let line = |day: &api::UsageDay, client: &str, name: &str| {
        let (requests, refused) = api_totals(day);
        format!(
            "{:<10} {:<26} {:>10} {:>10} {:>12} {:>12}  {name}\n",
            day.day, client, day.issued, day.refused, requests, refused
        )
    };
    let mut text = header;
    for client in &usage.clients {
        for day in &client.days {
            text += &line(day, &client.client_id, &client.name);
        }
    }
    for day in &usage.total {
        text += &line(day, "total", "");
    }
    text
}

/// An organization in a sentence.
pub(crate) fn org(o: &api::Org) -> String {
    format!(
        "organization {} ({}) on plan {}, {}, {} client(s)",
        o.id,
        if o.name.is_empty() {
            "no name"
        } else {
            &o.name
        },
        o.plan,
        if o.enabled { "enabled" } else { "disabled" },
        o.clients
    )
}

/// A plan in a sentence.
pub(crate) fn plan(p: &Plan) -> String {
    let rate = p.token_rate.map_or("no rate limit".to_owned(), |r| {
        format!("at most {} token requests per client", views::rate_limit(r))
    });
    let reuse = p.reuse_percent.map_or(String::new(), |r| {
        format!(", tokens reused while over {r}% of their life is left")
    });
    let introspect = if p.introspect_any {
        ", may introspect any token"
    } else {
        ""
    };
    let dpop = match p.dpop {
        api::Dpop::Required => ", DPoP required",
        api::Dpop::Off => ", DPoP off",
        api::Dpop::Allowed => "",
    };
    let limits: Vec<String> = p
        .api_limits
        .iter()
        .map(|(api, limit)| {
            let rate = limit.rate.as_ref().map(|rate| match limit.burst {
                Some(burst) => format!("{rate} (burst {burst})"),
                None => rate.clone(),
            });
            let parts: Vec<String> = rate.into_iter().chain(limit.quota.clone()).collect();
            format!("{api} {}", parts.join(" and "))
        })
        .collect();
    let limits = if limits.is_empty() {
        String::new()
    } else {
        format!("; API requests per client: {}", limits.join(", "))
    };
    format!(
        "plan {}: scopes \"{}\", tokens live {} s, {rate}{reuse}{introspect}{dpop}{limits}",
        p.name,
        p.scopes.join(" "),
        p.token_ttl
    )
}

/// A trust policy in a sentence.
pub(crate) fn trust_policy(p: &TrustPolicy) -> String {
    let claims: Vec<String> = p.claims.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!(
        "trust policy {}: tokens of {} for audience {:?} with sub {:?}{}{} act as client {}",
        p.name,
        p.issuer,
        p.audience,
        p.subject,
        if claims.is_empty() {
            String::new()
        } else {
            format!(" and {}", claims.join(", "))
        },
        p.max_assertion_ttl
            .map_or(String::new(), |t| format!(", living at most {t} s")),
        p.client_id
    )
}
