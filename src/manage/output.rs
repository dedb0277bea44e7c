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
