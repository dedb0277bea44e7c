//! What Tessera tells an API about the request limits of the plans that grant it, and what an
//! API reports back about the requests it served (issue 27). Tessera's own claim `plan`
//! ([`crate::AccessTokenClaims::plan`]) names the plan a token was issued under.
//!
//! - `GET {issuer}/api-limits/{api}` answers a [`LimitsDocument`] (`Cache-Control:
//!   max-age=30`); the resource-server kit fetches and refreshes it as it does the keys.
//! - `POST {issuer}/api-usage`, with a token of scope [`USAGE_SCOPE`], takes a
//!   [`UsageReport`] and answers 204; a batch id sent twice counts once.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The scope a token needs to report usage with `POST /api-usage`.
pub const USAGE_SCOPE: &str = "tessera-usage";

/// The limits of every plan that grants one API, by plan name. A plan with no limit for the
/// API is present with an empty [`PlanLimits`] (`{}`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LimitsDocument {
    /// The API (its audience and scope).
    pub api: String,
    /// Each plan's limits for this API.
    pub plans: BTreeMap<String, PlanLimits>,
}

/// One plan's limits for one API; every part is optional, and `{}` means no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanLimits {
    /// The request rate, counted with GCRA.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<Rate>,
    /// How many requests may come at once after a quiet spell; by default the rate's `limit`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u32>,
    /// A hard count per calendar period in UTC, reset at its start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota: Option<Quota>,
    /// `true` when the clients of an organization share these limits (counted by the
    /// token's `org_id`, issue 28); absent: each client has its own.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub per_org: bool,
}

/// `limit` requests per `window_seconds`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Rate {
    /// Requests per window; at least 1.
    pub limit: u32,
    /// The window, in seconds; at least 1.
    pub window_seconds: u32,
}

/// `limit` requests per calendar `period` in UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Quota {
    /// Requests per period.
    pub limit: u64,
    /// The calendar period.
    pub period: Period,
}

/// A calendar period in UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Period {
    /// From 00:00 UTC to the next 00:00 UTC.
    Day,
    /// From 00:00 UTC on the first of a month to the first of the next.
    Month,
}

impl Period {
    /// The name on the wire: `day` or `month`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Day => "day",
            Self::Month => "month",
        }
    }

    /// The period named `day` or `month` ([`as_str`](Self::as_str)'s inverse).
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "day" => Some(Self::Day),
            "month" => Some(Self::Month),
            _ => None,
        }
    }

    /// The period that holds `unix` (seconds since the epoch): its start and its end, in
    /// seconds since the epoch.
    pub fn bounds(self, unix: crate::clock::Timestamp) -> (i64, i64) {
        let day = unix.div_euclid(86_400);
        match self {
            Self::Day => (day * 86_400, (day + 1) * 86_400),
            Self::Month => {
                let (y, m, d) = crate::clock::civil(day);
                let first = day - (d - 1);
                let (ny, nm) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
                // The next month's first day: count on from this one's by its length.
                let next = first + days_in_month(y, m);
                debug_assert_eq!(crate::clock::civil(next), (ny, nm, 1));
                (first * 86_400, next * 86_400)
            }
        }
    }
}

fn days_in_month(y: i64, m: i64) -> i64 {
    let leap = y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
    match m {
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => 31,
    }
}

/// A batch of request counts an API sends to `POST /api-usage`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageReport {
    /// Chosen by the API, the same on every retry of this batch: Tessera counts a batch once.
    pub batch: String,
    /// The API that served the requests.
    pub api: String,
    /// The counts, one per UTC day and client.
    pub counts: Vec<UsageCount>,
}

/// Requests one client made to one API on one UTC day.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageCount {
    /// `YYYY-MM-DD`, UTC.
    pub day: String,
    /// The client.
    pub client_id: String,
    /// Requests served (their token accepted and within the plan's limits).
    pub requests: u64,
    /// Requests refused for the plan's limits (429).
    pub refused: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_document_reads_as_the_contract_writes_it() {
        let doc: LimitsDocument = serde_json::from_str(
            r#"{"api":"news-api","plans":{"free":{"rate":{"limit":5,"window_seconds":60},
            "burst":5,"quota":{"limit":1000,"period":"day"}},"pro":{}}}"#,
        )
        .unwrap();
        assert_eq!(doc.plans["pro"], PlanLimits::default());
        let free = doc.plans["free"];
        assert_eq!(
            free.rate,
            Some(Rate {
                limit: 5,
                window_seconds: 60
            })
        );
        assert_eq!(
            free.quota.map(|q| (q.limit, q.period)),
            Some((1000, Period::Day))
        );
        assert!(serde_json::from_str::<Period>("\"week\"").is_err());
    }

    #[test]
    fn calendar_periods_in_utc() {
        // 2026-11-27T07:10:00Z
        let t = 1_795_763_400;
        assert_eq!(crate::clock::rfc3339(t), "2026-11-27T07:10:00Z");
        let (start, end) = Period::Day.bounds(t);
        assert_eq!(crate::clock::rfc3339(start), "2026-11-27T00:00:00Z");
        assert_eq!(crate::clock::rfc3339(end), "2026-11-28T00:00:00Z");
        let (start, end) = Period::Month.bounds(t);
        assert_eq!(crate::clock::rfc3339(start), "2026-11-01T00:00:00Z");
        assert_eq!(crate::clock::rfc3339(end), "2026-12-01T00:00:00Z");
        // December rolls into January; February of a leap year has 29 days.
        let dec = Period::Month.bounds(t + 10 * 86_400);
        assert_eq!(crate::clock::rfc3339(dec.1), "2027-01-01T00:00:00Z");
        let feb =
            Period::Month.bounds(crate::clock::parse_rfc3339("2028-02-10T00:00:00Z").unwrap());
        assert_eq!(crate::clock::rfc3339(feb.1), "2028-03-01T00:00:00Z");
        // The last second of a period is in it; the next is not.
        assert_eq!(Period::Day.bounds(end - 1).1, end);
    }
}
