//! What a plan's limits look like to a client: the `RateLimit-Policy` and `RateLimit` fields
//! of draft-ietf-httpapi-ratelimit-headers-11 (Structured Field Lists, RFC 8941 section 3.1),
//! `Retry-After` (RFC 9110 section 10.2.3) and the draft's RFC 9457 problem types.

use std::fmt::Write;
use std::sync::Arc;

use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE, RETRY_AFTER};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use tessera_proto::api_limits::{Period, PlanLimits};

/// `RateLimit-Policy` (draft section 4): the policies, with quota `q` and window `w`.
pub const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// `RateLimit` (draft section 5): what is left of each policy, `r`, and when more is, `t`.
pub const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

/// The draft's problem type for a request over its quota (section 6.1), answered with 429.
pub const QUOTA_EXCEEDED: &str = "https://iana.org/assignments/http-problem-types#quota-exceeded";
/// The draft's problem type for a server that cannot serve as usual (section 6.2), answered
/// with 503: here, limits that could not be learned.
pub const TEMPORARY_REDUCED_CAPACITY: &str =
    "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity";

/// A rate counted with GCRA: `limit` per `window_secs`, `burst` at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Gcra {
    pub limit: u32,
    pub window_secs: u32,
    pub burst: u32,
}

impl Gcra {
    /// The time one request takes from the allowance.
    pub(crate) fn emission(&self) -> std::time::Duration {
        std::time::Duration::from_secs(u64::from(self.window_secs)) / self.limit.max(1)
    }

    /// One instance's share when `n` count apart: the rate `n` times slower, the burst
    /// divided likewise, at least one request. Never unlimited.
    pub(crate) fn share(self, n: u32) -> Self {
        Self {
            limit: self.limit,
            window_secs: self.window_secs.saturating_mul(n.max(1)),
            burst: (self.burst / n.max(1)).max(1),
        }
    }
}

/// A hard count per calendar period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct QuotaLimit {
    pub limit: u64,
    pub period: Period,
}

impl QuotaLimit {
    /// One instance's share when `n` count apart, at least one request.
    pub(crate) fn share(self, n: u32) -> Self {
        Self {
            limit: (self.limit / u64::from(n.max(1))).max(1),
            period: self.period,
        }
    }
}

/// One plan's limits for this API, ready to count by, with the names its policies carry in
/// the header fields and the problem body: `"{plan}-rate"` and `"{plan}-quota"`.
#[derive(Debug)]
pub(crate) struct Policy {
    /// The plan, as the document names it (or `unlisted`, see `crate::limits`).
    pub plan: Arc<str>,
    pub rate: Option<Gcra>,
    pub quota: Option<QuotaLimit>,
    /// Whether an organization's clients share the limits (issue 28): counted by the
    /// token's `org_id` rather than its `client_id`.
    pub per_org: bool,
    /// `"plan-rate"` as an sf-string, quotes included.
    rate_name: String,
    quota_name: String,
    /// `RateLimit-Policy` written once, for the policies that do not change with the time:
    /// a rate, a quota per day (a month's window is the length of the month counted in).
    fixed_policy: Option<HeaderValue>,
}

impl Policy {
    pub(crate) fn new(plan: &str, limits: &PlanLimits) -> Self {
        let rate = limits.rate.map(|r| Gcra {
            limit: r.limit.max(1),
            window_secs: r.window_seconds.max(1),
            burst: limits.burst.unwrap_or(r.limit).max(1),
        });
        let quota = limits.quota.map(|q| QuotaLimit {
            limit: q.limit,
            period: q.period,
        });
        let mut policy = Self {
            plan: plan.into(),
            rate,
            quota,
            per_org: limits.per_org,
            rate_name: sf_string(&format!("{plan}-rate")),
            quota_name: sf_string(&format!("{plan}-quota")),
            fixed_policy: None,
        };
        if quota.is_none_or(|q| q.period == Period::Day) {
            // The same field at any time: the epoch's.
            policy.fixed_policy = Some(policy.policy_field(rate.is_some(), quota.is_some(), 0));
        }
        policy
    }

    /// Whether anything is limited.
    pub(crate) fn limits(&self) -> bool {
        self.rate.is_some() || self.quota.is_some()
    }

    /// The fields for `count`, counted at `now` (seconds since the epoch): each policy
    /// `count` has a reading of, in `RateLimit-Policy` with its quota `q` and window `w`, in
    /// `RateLimit` with what is left `r` and when more is `t`.
    pub(crate) fn fields<'a>(&'a self, count: &Count, now: i64) -> (HeaderValue, HeaderValue) {
        let rate = self.rate.is_some() && count.rate.is_some();
        let quota = self.quota.is_some() && count.quota.is_some();
        let policy = match &self.fixed_policy {
            Some(fixed) if rate == self.rate.is_some() && quota == self.quota.is_some() => {
                fixed.clone()
            }
            _ => self.policy_field(rate, quota, now),
        };
        let left = |name: &'a str, r: Reading| (name, ";r=", r.remaining, ";t=", r.reset_secs);
        let remaining = list([
            count
                .rate
                .filter(|_| rate)
                .map(|r| left(&self.rate_name, r)),
            count
                .quota
                .filter(|_| quota)
                .map(|r| left(&self.quota_name, r)),
        ]);
        (policy, remaining)
    }

    /// `RateLimit-Policy` at `now`, naming the rate and the quota as asked.
    fn policy_field(&self, rate: bool, quota: bool, now: i64) -> HeaderValue {
        let rate = self.rate.filter(|_| rate).map(|r| {
            let (q, w) = (u64::from(r.limit), u64::from(r.window_secs));
            (self.rate_name.as_str(), ";q=", q, ";w=", w)
        });
        let quota = self.quota.filter(|_| quota).map(|q| {
            let (start, end) = q.period.bounds(now);
            let window = u64::try_from(end - start).unwrap_or(0);
            (self.quota_name.as_str(), ";q=", q.limit, ";w=", window)
        });
        list([rate, quota])
    }

    /// The names of the policies `count` refused, as the problem body lists them.
    fn violated(&self, count: &Count) -> Vec<String> {
        let mut names = Vec::new();
        if count.rate_refused {
            names.push(format!("{}-rate", self.plan));
        }
        if count.quota_refused {
            names.push(format!("{}-quota", self.plan));
        }
        names
    }
}

/// A member of [`list`]: its name, then two parameters, each a key (`;q=`) and a value.
type Member<'a> = (&'a str, &'static str, u64, &'static str, u64);

/// An RFC 8941 List (section 3.1) of the members given, each an sf-string with two integer
/// parameters, `"name";a=1;b=2`, joined by `, `. Written piece by piece on the stack (no
/// `fmt`; the `HeaderValue`'s own allocation the only one), since every counted request
/// pays for it (issue 31 item 4).
fn list(members: [Option<Member<'_>>; 2]) -> HeaderValue {
    let mut out = StackText::default();
    for (name, a, x, b, y) in members.into_iter().flatten() {
        if !out.bytes().is_empty() {
            out.push(", ");
        }
        for piece in [name, a, itoa::Buffer::new().format(x), b] {
            out.push(piece);
        }
        out.push(itoa::Buffer::new().format(y));
    }
    // Every part is printable ASCII (sf_string keeps names so).
    HeaderValue::from_bytes(out.bytes()).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// Text gathered on the stack, on the heap once past 256 bytes (a plan with a long name).
struct StackText {
    stack: [u8; 256],
    len: usize,
    heap: Vec<u8>,
}

impl Default for StackText {
    fn default() -> Self {
        Self {
            stack: [0; 256],
            len: 0,
            heap: Vec::new(),
        }
    }
}

impl StackText {
    fn push(&mut self, piece: &str) {
        let piece = piece.as_bytes();
        let end = self.len + piece.len();
        if self.heap.is_empty() && end <= self.stack.len() {
            self.stack[self.len..end].copy_from_slice(piece);
            self.len = end;
        } else {
            if self.heap.is_empty() {
                self.heap.extend_from_slice(&self.stack[..self.len]);
            }
            self.heap.extend_from_slice(piece);
        }
    }

    fn bytes(&self) -> &[u8] {
        if self.heap.is_empty() {
            &self.stack[..self.len]
        } else {
            &self.heap
        }
    }
}

/// `text` as an RFC 8941 sf-string (section 4.1.6): in quotes, `"` and `\` escaped, and any
/// character outside printable ASCII replaced by `?`.
pub(crate) fn sf_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => out.push('?'),
        }
    }
    out.push('"');
    out
}

/// What is left of one policy: `remaining` requests, and `reset_secs` until it is whole
/// again (a rate) or starts over (a quota); for a refused policy, 0 and the wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reading {
    pub remaining: u64,
    pub reset_secs: u64,
}

/// What counting one request gave: a reading per limited policy, and which refused it.
/// Nothing is taken from any allowance unless every policy allowed the request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Count {
    pub rate: Option<Reading>,
    pub quota: Option<Reading>,
    pub rate_refused: bool,
    pub quota_refused: bool,
}

impl Count {
    pub(crate) fn allowed(&self) -> bool {
        !self.rate_refused && !self.quota_refused
    }

    /// The seconds to wait before a request may pass: the longest wait of the policies that
    /// refused, at least 1.
    fn retry_after(&self) -> u64 {
        let wait = |refused: bool, reading: Option<Reading>| {
            if refused {
                reading.map_or(1, |r| r.reset_secs)
            } else {
                0
            }
        };
        wait(self.rate_refused, self.rate)
            .max(wait(self.quota_refused, self.quota))
            .max(1)
    }
}

/// The fields to add to the answer of a request that passed its plan's limits
/// (draft-ietf-httpapi-ratelimit-headers-11 sections 4 and 5):
/// `RateLimit-Policy: "free-rate";q=5;w=60, "free-quota";q=1000;w=86400` and
/// `RateLimit: "free-rate";r=4;t=12, "free-quota";r=999;t=60000`.
///
/// The extractors add them to the answer through [`crate::limits::rate_limit_headers`];
/// outside axum, add them with [`Allowance::apply`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allowance {
    policy: HeaderValue,
    remaining: HeaderValue,
}

impl Allowance {
    pub(crate) fn new(policy: HeaderValue, remaining: HeaderValue) -> Self {
        Self { policy, remaining }
    }

    /// `RateLimit-Policy`.
    pub fn policy(&self) -> &HeaderValue {
        &self.policy
    }

    /// `RateLimit`.
    pub fn remaining(&self) -> &HeaderValue {
        &self.remaining
    }

    /// Sets both fields on `headers`.
    pub fn apply(&self, headers: &mut HeaderMap) {
        headers.insert(RATELIMIT_POLICY, self.policy.clone());
        headers.insert(RATELIMIT, self.remaining.clone());
    }
}

/// The RFC 9457 problem document of a refusal (`application/problem+json`), with the draft's
/// `violated-policies` member.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// [`QUOTA_EXCEEDED`] or [`TEMPORARY_REDUCED_CAPACITY`].
    #[serde(rename = "type")]
    pub type_: &'static str,
    /// The problem type's title.
    pub title: &'static str,
    /// The HTTP status.
    pub status: u16,
    /// What happened, for people: the plan, the limit and when to come back.
    pub detail: String,
    /// The policies exceeded, as `RateLimit-Policy` names them.
    #[serde(rename = "violated-policies", skip_serializing_if = "Vec::is_empty")]
    pub violated_policies: Vec<String>,
}

/// A request the plan's limits refused: 429 with `Retry-After`, the rate limit fields and a
/// `quota-exceeded` problem (the token is fine, so no `WWW-Authenticate`); or 503 with
/// `Retry-After` and a `temporary-reduced-capacity` problem while this API has never learned
/// the limits. The rejection of the extractors carries it ([`crate::AuthError::Limited`]);
/// outside axum, answer with [`status`](Self::status), [`headers`](Self::headers) and
/// [`problem`](Self::problem).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitRejection {
    problem: Problem,
    retry_after: u64,
    fields: Option<Allowance>,
}

impl LimitRejection {
    /// 429 for `count`, which `policy` refused.
    pub(crate) fn exceeded(policy: &Policy, count: &Count, api: &str, now: i64) -> Self {
        let retry_after = count.retry_after();
        let (p, r) = policy.fields(count, now);
        let mut detail = format!("plan {} allows", policy.plan);
        let mut parts = Vec::new();
        if let (true, Some(rate)) = (count.rate_refused, policy.rate) {
            parts.push(format!(
                " {} requests per {} s (burst {})",
                rate.limit, rate.window_secs, rate.burst
            ));
        }
        if let (true, Some(quota)) = (count.quota_refused, policy.quota) {
            parts.push(format!(
                " {} requests per {} (UTC)",
                quota.limit,
                quota.period.as_str()
            ));
        }
        detail.push_str(&parts.join(" and"));
        let _ = write!(detail, " to {api}; retry after {retry_after} s");
        Self {
            problem: Problem {
                type_: QUOTA_EXCEEDED,
                title: "Request cannot be satisfied as assigned quota has been exceeded",
                status: 429,
                detail,
                violated_policies: policy.violated(count),
            },
            retry_after,
            fields: Some(Allowance::new(p, r)),
        }
    }

    /// 503: the limits were never learned (Tessera not reached yet).
    pub(crate) fn unknown(api: &str, retry_after: u64) -> Self {
        Self {
            problem: Problem {
                type_: TEMPORARY_REDUCED_CAPACITY,
                title: "Service capacity is temporarily reduced",
                status: 503,
                detail: format!(
                    "the request limits of {api} could not be learned from the issuer yet; \
                     retry after {retry_after} s"
                ),
                violated_policies: Vec::new(),
            },
            retry_after,
            fields: None,
        }
    }

    /// 429 or 503.
    pub fn status(&self) -> StatusCode {
        StatusCode::from_u16(self.problem.status).unwrap_or(StatusCode::TOO_MANY_REQUESTS)
    }

    /// Seconds until a request may pass, as `Retry-After` says.
    pub fn retry_after(&self) -> u64 {
        self.retry_after
    }

    /// The problem document.
    pub fn problem(&self) -> &Problem {
        &self.problem
    }

    /// The rate limit fields of a 429 (none on a 503).
    pub fn fields(&self) -> Option<&Allowance> {
        self.fields.as_ref()
    }

    /// Every header of the answer: `Content-Type`, `Cache-Control: no-store` (RFC 6585
    /// section 4: a 429 must not be stored), `Retry-After` and the rate limit fields.
    pub fn headers(&self) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
        headers.insert(RETRY_AFTER, HeaderValue::from(self.retry_after));
        if let Some(fields) = &self.fields {
            fields.apply(&mut headers);
        }
        headers
    }
}

impl std::fmt::Display for LimitRejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.problem.detail)
    }
}

impl IntoResponse for LimitRejection {
    fn into_response(self) -> Response {
        let body = serde_json::to_vec(&self.problem).unwrap_or_default();
        (self.status(), self.headers(), body).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fields as they were written before issue 31 item 4, with `format!`: what the
    /// fields written piece by piece must equal.
    fn fields_by_format(policy: &Policy, count: &Count, now: i64) -> (String, String) {
        let (mut p, mut left) = (String::new(), String::new());
        if let (Some(rate), Some(reading)) = (policy.rate, count.rate) {
            let name = &policy.rate_name;
            let _ = write!(p, "{name};q={};w={}", rate.limit, rate.window_secs);
            let _ = write!(
                left,
                "{name};r={};t={}",
                reading.remaining, reading.reset_secs
            );
        }
        if let (Some(quota), Some(reading)) = (policy.quota, count.quota) {
            let (start, end) = quota.period.bounds(now);
            for s in [&mut p, &mut left] {
                if !s.is_empty() {
                    s.push_str(", ");
                }
            }
            let name = &policy.quota_name;
            let _ = write!(p, "{name};q={};w={}", quota.limit, end - start);
            let _ = write!(
                left,
                "{name};r={};t={}",
                reading.remaining, reading.reset_secs
            );
        }
        (p, left)
    }

    #[test]
    fn fields_are_those_format_wrote() {
        use tessera_proto::api_limits::{Quota, Rate};
        let long = "p".repeat(300);
        let reading = |remaining, reset_secs| Reading {
            remaining,
            reset_secs,
        };
        let readings = [None, Some(reading(0, 0)), Some(reading(u64::MAX, 86_400))];
        // 2026-02-10 and 2028-02-10 (a leap year), in seconds since the epoch.
        let times = [0, 1_770_681_600, 1_833_753_600];
        for plan in ["free", "a\"b", long.as_str()] {
            for rate in [
                None,
                Some(Rate {
                    limit: 5,
                    window_seconds: 60,
                }),
            ] {
                for quota in [
                    None,
                    Some(Quota {
                        limit: u64::MAX,
                        period: Period::Day,
                    }),
                    Some(Quota {
                        limit: 1000,
                        period: Period::Month,
                    }),
                ] {
                    let limits = PlanLimits {
                        rate,
                        burst: Some(3),
                        quota,
                        ..PlanLimits::default()
                    };
                    let policy = Policy::new(plan, &limits);
                    for (r, q, now) in readings
                        .iter()
                        .flat_map(|r| readings.iter().map(move |q| (r, q)))
                        .flat_map(|(r, q)| times.iter().map(move |t| (*r, *q, *t)))
                    {
                        let count = Count {
                            rate: r,
                            quota: q,
                            ..Count::default()
                        };
                        let (p, left) = policy.fields(&count, now);
                        let (want_p, want_left) = fields_by_format(&policy, &count, now);
                        assert_eq!(p.to_str().unwrap(), want_p);
                        assert_eq!(left.to_str().unwrap(), want_left);
                    }
                }
            }
        }
    }

    #[test]
    fn names_are_sf_strings() {
        assert_eq!(sf_string("free-rate"), "\"free-rate\"");
        assert_eq!(sf_string("a\"b\\c"), "\"a\\\"b\\\\c\"");
        assert_eq!(sf_string("é\n"), "\"??\"");
    }

    #[test]
    fn a_share_is_never_unlimited() {
        let rate = Gcra {
            limit: 10,
            window_secs: 60,
            burst: 10,
        };
        assert_eq!(rate.share(1), rate);
        assert_eq!(
            rate.share(4),
            Gcra {
                limit: 10,
                window_secs: 240,
                burst: 2
            }
        );
        assert_eq!(rate.share(100).burst, 1);
        let quota = QuotaLimit {
            limit: 3,
            period: Period::Day,
        };
        assert_eq!(quota.share(2).limit, 1);
        assert_eq!(quota.share(10).limit, 1);
    }
}
