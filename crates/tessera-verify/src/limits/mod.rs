//! Plan limits, enforced at the API (issue 27): every request whose token is accepted is
//! counted per client against the limits of the token's plan for this API, which the API
//! learns from Tessera (`GET {issuer}/api-limits/{api}`, [`tessera_proto::api_limits`]); the
//! counts per UTC day are reported back (`POST {issuer}/api-usage`).
//!
//! Turned on with [`VerifierBuilder::plan_limits`](crate::VerifierBuilder::plan_limits); then
//! [`Verifier::verify_request`](crate::Verifier::verify_request) and every extractor count
//! each request they accept, and refuse one over a limit with a [`LimitRejection`].
//!
//! - **Rate**: GCRA with the plan's burst (`local`, and `redis` across instances).
//! - **Quota**: a hard count per calendar period in UTC (a day from 00:00, a month from the
//!   1st), reset at its start.
//! - **Answers**: a request within its limits carries `RateLimit-Policy` and `RateLimit`
//!   (draft-ietf-httpapi-ratelimit-headers-11; [`rate_limit_headers`] adds them for axum, and
//!   [`crate::VerifiedToken::rate_limit`] holds them for other frameworks). One over a limit
//!   gets 429, `Retry-After` (RFC 6585 section 4, RFC 9110 section 10.2.3), the same fields,
//!   and an RFC 9457 problem of the draft's `quota-exceeded` type naming the policies it
//!   exceeded. Policies are named `"{plan}-rate"` and `"{plan}-quota"`. A plan without limits
//!   (`{}`) gets no fields.
//! - **A token without `plan`, or with a plan the document does not list** (after one more
//!   fetch, at most one per 30 s): counted under the policies named `unlisted`, the tightest
//!   rate and the tightest quota of any plan in the document. Such a token comes from before
//!   plans were in tokens, or from a plan created or renamed since the last fetch: it is
//!   served, never unlimited where some plan is limited, and its client gets its plan's own
//!   limits with its next token (or the next fetch).
//! - **Before the first document** (Tessera not reached yet since the API started): 503 with
//!   `Retry-After: 1` and a `temporary-reduced-capacity` problem (tried again once a second). Once a document was
//!   learned, it goes on applying while Tessera is unreachable.
//! - **Counts** are per client and API, never per token: a client keeps its token for its
//!   lifetime. Refused requests take nothing from any allowance.

mod document;
mod fields;
mod local;
mod redis;
mod usage;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use tessera_proto::{AccessTokenClaims, Clock};

pub use fields::{
    Allowance, LimitRejection, Problem, QUOTA_EXCEEDED, RATELIMIT, RATELIMIT_POLICY,
    TEMPORARY_REDUCED_CAPACITY,
};
pub use usage::{UsageError, RETRY_FOR as USAGE_RETRY_FOR};

use document::DocumentCache;
use fields::Policy;
use local::LocalCounter;
use redis::RedisCounter;
use usage::Usage;

/// Plan limits settings of a [`VerifierBuilder`](crate::VerifierBuilder).
#[derive(Debug, Default)]
pub(crate) struct LimitsConfig {
    pub enforce: bool,
    pub redis_url: Option<String>,
    pub redis_prefix: Option<String>,
    pub redis_timeout: Option<Duration>,
    pub expected_instances: u32,
    pub usage: Option<tessera_client::TokenClient>,
    pub usage_interval: Option<Duration>,
}

/// The default bound on each call to Redis: 50 ms, as Tessera's token limiter.
pub const REDIS_TIMEOUT: Duration = Duration::from_millis(50);
/// The default key prefix in Redis.
pub const REDIS_PREFIX: &str = "tessera-api:";
/// How often usage is reported by default: every 60 s.
pub const USAGE_INTERVAL: Duration = Duration::from_secs(60);

/// What the plan limits of a verifier have done: its metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LimitsHealth {
    /// Limits documents fetched successfully.
    pub document_fetches: u64,
    /// With Redis: whether it counts now (`false` while this instance counts at its share).
    pub redis_up: Option<bool>,
    /// Calls to Redis that failed, and that got no answer in time.
    pub redis_errors: u64,
    /// Calls to Redis that got no answer within the timeout.
    pub redis_timeouts: u64,
    /// The instances counted through Redis at the last heartbeat it answered.
    pub redis_fleet: u32,
    /// The N of the share counted while Redis fails.
    pub fallback_instances: u32,
    /// Clients counted in this process's memory.
    pub tracked_clients: usize,
    /// Usage batches Tessera took.
    pub usage_batches_sent: u64,
    /// Reports that failed for a reason that may pass (their batch kept and sent again).
    pub usage_failures: u64,
    /// Rows of usage dropped because the unsent counts were at their bound.
    pub usage_dropped: u64,
    /// Usage batches Tessera refused for good (a 4xx other than 401, 408 and 429), dropped.
    pub usage_batches_refused: u64,
    /// Usage batches that failed for [`USAGE_RETRY_FOR`] after their first attempt, dropped.
    pub usage_batches_expired: u64,
    /// Rows of usage not yet taken by Tessera.
    pub usage_pending: usize,
}

#[derive(Debug)]
enum Counter {
    Local(LocalCounter),
    Redis(RedisCounter),
}

/// The plan limits of one verifier.
#[derive(Debug)]
pub(crate) struct Limits {
    api: String,
    clock: Clock,
    /// `None` when only usage is reported.
    document: Option<Arc<DocumentCache>>,
    counter: Counter,
    usage: Option<Arc<Usage>>,
}

/// Why the plan limits could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LimitsConfigError {
    /// The Redis URL could not be read.
    #[error("the Redis URL {url} cannot be used: {reason}")]
    RedisUrl {
        /// The URL without its password.
        url: String,
        /// Why.
        reason: String,
    },
}

impl Limits {
    /// `None` when neither enforcement nor usage reporting is asked for.
    pub(crate) fn new(
        config: LimitsConfig,
        issuer: &str,
        api: &str,
        http: &reqwest::Client,
        clock: &Clock,
    ) -> Result<Option<Self>, LimitsConfigError> {
        if !config.enforce && config.usage.is_none() {
            return Ok(None);
        }
        let counter = match &config.redis_url {
            Some(url) => {
                let redacted = redact(url);
                let client = ::redis::Client::open(url.as_str()).map_err(|e| {
                    LimitsConfigError::RedisUrl {
                        url: redacted.clone(),
                        reason: e.to_string(),
                    }
                })?;
                Counter::Redis(RedisCounter::new(
                    client,
                    redacted,
                    config
                        .redis_prefix
                        .clone()
                        .unwrap_or_else(|| REDIS_PREFIX.to_owned()),
                    api,
                    config.expected_instances,
                    config.redis_timeout.unwrap_or(REDIS_TIMEOUT),
                    clock.clone(),
                ))
            }
            None => Counter::Local(LocalCounter::new(clock.clone())),
        };
        Ok(Some(Self {
            api: api.to_owned(),
            clock: clock.clone(),
            document: config
                .enforce
                .then(|| Arc::new(DocumentCache::new(http.clone(), issuer, api, clock.clone()))),
            counter,
            usage: config.usage.map(|tokens| {
                Arc::new(Usage::new(
                    issuer,
                    api,
                    http.clone(),
                    tokens,
                    config.usage_interval.unwrap_or(USAGE_INTERVAL),
                    clock.clone(),
                ))
            }),
        }))
    }

    /// Counts one request of an accepted token: its fields, or the refusal.
    pub(crate) async fn admit(
        &self,
        claims: &AccessTokenClaims,
    ) -> Result<Option<Allowance>, LimitRejection> {
        let Some(document) = &self.document else {
            self.record(&claims.client_id, false);
            return Ok(None);
        };
        // The fetches and Redis's round trip are boxed: inline, their futures would make
        // the future of every request's check several kilobytes, moved at each call, for
        // paths a request in memory never takes (issue 31 item 4).
        let compiled = match document.current() {
            Some(compiled) => compiled,
            None => Box::pin(document.after_refetch())
                .await
                .ok_or_else(|| LimitRejection::unknown(&self.api, 1))?,
        };
        let policy: Arc<Policy> = match claims.plan.as_deref().and_then(|p| compiled.plan(p)) {
            Some(policy) => policy.clone(),
            None => match claims.plan.as_deref() {
                // Perhaps a plan newer than the document: fetch once more if allowed.
                Some(plan) => match Box::pin(document.after_refetch()).await {
                    Some(newer) => newer.plan(plan).unwrap_or_else(|| newer.unlisted()).clone(),
                    None => compiled.unlisted().clone(),
                },
                None => compiled.unlisted().clone(),
            },
        };
        if !policy.limits() {
            self.record(&claims.client_id, false);
            return Ok(None);
        }
        // Limits per organization: its clients share one count, keyed by the organization
        // (`/` is in no generated client id).
        let shared = match (policy.per_org, claims.org_id.as_deref()) {
            (true, Some(org)) => Some(format!("org/{org}")),
            _ => None,
        };
        let key = shared.as_deref().unwrap_or(&claims.client_id);
        let now = self.clock.now();
        let count = match &self.counter {
            Counter::Local(local) => local.count_at(key, policy.rate, policy.quota, now),
            Counter::Redis(redis) => Box::pin(redis.count(key, policy.rate, policy.quota)).await,
        };
        self.record(&claims.client_id, !count.allowed());
        if count.allowed() {
            let (p, r) = policy.fields(&count, now);
            Ok(Some(Allowance::new(p, r)))
        } else {
            Err(LimitRejection::exceeded(&policy, &count, &self.api, now))
        }
    }

    fn record(&self, client: &str, refused: bool) {
        if let Some(usage) = &self.usage {
            usage.record(self.clock.now(), client, refused);
        }
    }

    /// Fetches the document now and connects to Redis (2 s at most): for a start that fails
    /// fast. `Ok(false)` when Redis could not be reached (counting goes on locally).
    pub(crate) async fn refresh(&self) -> Result<bool, crate::KeySourceError> {
        if let Some(document) = &self.document {
            document.refresh(true).await?;
        }
        Ok(match &self.counter {
            Counter::Redis(redis) => redis.connect().await,
            Counter::Local(_) => true,
        })
    }

    pub(crate) async fn flush_usage(&self) -> Result<(), UsageError> {
        match &self.usage {
            Some(usage) => usage.flush().await,
            None => Ok(()),
        }
    }

    pub(crate) fn health(&self) -> LimitsHealth {
        let mut health = LimitsHealth {
            document_fetches: self.document.as_ref().map_or(0, |d| d.fetches()),
            ..LimitsHealth::default()
        };
        match &self.counter {
            Counter::Local(local) => health.tracked_clients = local.tracked(),
            Counter::Redis(redis) => {
                let h = redis.health();
                health.redis_up = Some(h.up);
                health.redis_errors = h.errors;
                health.redis_timeouts = h.timeouts;
                health.redis_fleet = h.fleet;
                health.fallback_instances = h.fallback_instances;
            }
        }
        if let Some(usage) = &self.usage {
            use std::sync::atomic::Ordering::Relaxed;
            health.usage_batches_sent = usage.sent.load(Relaxed);
            health.usage_failures = usage.failures.load(Relaxed);
            health.usage_dropped = usage.dropped.load(Relaxed);
            health.usage_batches_refused = usage.refused.load(Relaxed);
            health.usage_batches_expired = usage.expired.load(Relaxed);
            health.usage_pending = usage.pending();
        }
        health
    }
}

/// A fresh random id: 128 bits in hex.
pub(crate) fn random_id() -> String {
    let mut bytes = [0u8; 16];
    // The system's generator does not fail on the platforms this builds for; zeros would
    // still be a valid (if poor) id.
    let _ = aws_lc_rs::rand::fill(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `redis://user:secret@host` as `redis://user:redacted@host`.
fn redact(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut parsed) if parsed.password().is_some() => {
            let _ = parsed.set_password(Some("redacted"));
            parsed.into()
        }
        Ok(_) => url.to_owned(),
        Err(_) => "[an unreadable URL]".to_owned(),
    }
}

/// Where an extractor leaves the fields for [`rate_limit_headers`] to add to the answer.
#[derive(Debug, Clone, Default)]
pub(crate) struct FieldsSlot(pub(crate) Arc<std::sync::Mutex<Option<Allowance>>>);

/// axum middleware that adds the `RateLimit-Policy` and `RateLimit` fields of the request's
/// plan to every answer whose request an extractor counted (the extractors cannot touch the
/// answer themselves); a refusal carries them already. Add it once around the protected
/// routes:
///
/// ```no_run
/// # use axum::Router;
/// # fn wrap(router: Router) -> Router {
/// router.layer(axum::middleware::from_fn(tessera_verify::limits::rate_limit_headers))
/// # }
/// ```
pub async fn rate_limit_headers(mut request: Request, next: Next) -> Response {
    let slot = FieldsSlot::default();
    request.extensions_mut().insert(slot.clone());
    let mut response = next.run(request).await;
    let fields = slot
        .0
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take();
    if let Some(fields) = fields {
        if !response.headers().contains_key(RATELIMIT) {
            fields.apply(response.headers_mut());
        }
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_passwords_are_not_shown() {
        assert_eq!(
            redact("redis://u:hunter2@127.0.0.1:6379/0"),
            "redis://u:redacted@127.0.0.1:6379/0"
        );
        assert_eq!(redact("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
        assert!(!redact("redis://:hunter2@h").contains("hunter2"));
    }
}
