//! The plans' limits for this API, learned from `GET {issuer}/api-limits/{api}` and kept as the
//! keys are (`crate::jwks`):
//!
//! - fetched at the first request (or [`crate::Verifier::refresh_limits`]), then again in the
//!   background once the document is [`REFRESH`] old, by the request that notices, and by a
//!   task that looks every [`REFRESH`] so that a quiet API is not left with an old document:
//!   a change reaches the API within 60 s;
//! - at most one fetch per [`REFRESH`] (per second until the first succeeds), never two at
//!   once;
//! - a failed fetch keeps the last document, which goes on applying while Tessera is
//!   unreachable.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use tessera_proto::api_limits::{LimitsDocument, PlanLimits, Quota, Rate};
use tessera_proto::Clock;

use super::fields::Policy;
use crate::error::KeySourceError;

/// How old the document may grow before it is fetched again, and the least time between two
/// fetches: 30 s, the `max-age` Tessera serves it with.
pub(crate) const REFRESH: Duration = Duration::from_secs(30);

/// The least time between two attempts while no document was ever learned.
pub(crate) const FIRST_RETRY: Duration = Duration::from_secs(1);

/// The name the fields and the problem give the limits of a token whose plan the document
/// does not list (see `crate::limits`).
pub(crate) const UNLISTED: &str = "unlisted";

/// One document, ready to count by.
#[derive(Debug)]
pub(crate) struct Compiled {
    by_plan: HashMap<String, Arc<Policy>>,
    /// For tokens without a plan, or with one the document does not list: the tightest rate
    /// and the tightest quota of any plan, so that nobody is unlimited by being unknown.
    unlisted: Arc<Policy>,
}

impl Compiled {
    pub(crate) fn new(document: &LimitsDocument) -> Self {
        let by_plan = document
            .plans
            .iter()
            .map(|(plan, limits)| (plan.clone(), Arc::new(Policy::new(plan, limits))))
            .collect();
        Self {
            by_plan,
            unlisted: Arc::new(Policy::new(UNLISTED, &tightest(document))),
        }
    }

    pub(crate) fn plan(&self, plan: &str) -> Option<&Arc<Policy>> {
        self.by_plan.get(plan)
    }

    pub(crate) fn unlisted(&self) -> &Arc<Policy> {
        &self.unlisted
    }
}

/// The smallest rate (the longest time per request, then the smallest burst) and the smallest
/// quota (per day, a month counted as 31 days) of any plan in `document`.
fn tightest(document: &LimitsDocument) -> PlanLimits {
    let mut out = PlanLimits::default();
    let per_request = |r: &Rate| f64::from(r.window_seconds) / f64::from(r.limit.max(1));
    let per_day = |q: &Quota| match q.period {
        tessera_proto::api_limits::Period::Day => q.limit as f64,
        tessera_proto::api_limits::Period::Month => q.limit as f64 / 31.0,
    };
    for limits in document.plans.values() {
        if let Some(rate) = limits.rate {
            let burst = limits.burst.unwrap_or(rate.limit);
            let tighter = match out.rate {
                None => true,
                Some(best) => {
                    let (a, b) = (per_request(&rate), per_request(&best));
                    a > b || (a == b && burst < out.burst.unwrap_or(best.limit))
                }
            };
            if tighter {
                out.rate = Some(rate);
                out.burst = Some(burst);
            }
        }
        if let Some(quota) = limits.quota {
            if out
                .quota
                .is_none_or(|best| per_day(&quota) < per_day(&best))
            {
                out.quota = Some(quota);
            }
        }
    }
    out
}

#[derive(Debug, Default)]
struct Snapshot {
    compiled: Option<Arc<Compiled>>,
    /// When `compiled` was fetched (the clock's monotonic reading).
    fetched_at: Option<Duration>,
    /// When the last fetch started, successful or not.
    attempted_at: Option<Duration>,
    /// Fetches that succeeded, for tests and health.
    fetches: u64,
}

/// The document cache of one verifier.
#[derive(Debug)]
pub(crate) struct DocumentCache {
    client: reqwest::Client,
    url: String,
    api: String,
    clock: Clock,
    snapshot: RwLock<Snapshot>,
    /// The single flight.
    fetch: tokio::sync::Mutex<()>,
    /// A background refresh is scheduled or running.
    background: AtomicBool,
    /// The periodic task was started.
    ticking: AtomicBool,
}

impl DocumentCache {
    pub(crate) fn new(client: reqwest::Client, issuer: &str, api: &str, clock: Clock) -> Self {
        let mut url = reqwest::Url::parse(issuer.trim_end_matches('/'))
            .unwrap_or_else(|_| reqwest::Url::parse("http://invalid.invalid").expect("a URL"));
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().push("api-limits").push(api);
        }
        Self {
            client,
            url: url.into(),
            api: api.to_owned(),
            clock,
            snapshot: RwLock::default(),
            fetch: tokio::sync::Mutex::new(()),
            background: AtomicBool::new(false),
            ticking: AtomicBool::new(false),
        }
    }

    /// The document now, if one was ever learned; schedules a background refresh when it is
    /// [`REFRESH`] old.
    pub(crate) fn current(self: &Arc<Self>) -> Option<Arc<Compiled>> {
        // A load first: the swap, a write to a line every request reads, happens once.
        if !self.ticking.load(Ordering::Acquire) && !self.ticking.swap(true, Ordering::AcqRel) {
            tokio::spawn(tick(Arc::downgrade(self)));
        }
        let (compiled, stale) = {
            let s = self.snapshot.read().unwrap_or_else(PoisonError::into_inner);
            let stale = s.fetched_at.is_some_and(|at| {
                self.clock.elapsed().saturating_sub(at) >= REFRESH && self.may_fetch(&s)
            });
            (s.compiled.clone(), stale)
        };
        if stale && !self.background.swap(true, Ordering::AcqRel) {
            let cache = Arc::clone(self);
            tokio::spawn(async move {
                let _ = cache.refresh(false).await;
                cache.background.store(false, Ordering::Release);
            });
        }
        compiled
    }

    /// The document after one more fetch, if the rate limit allows one (waiting for a fetch
    /// already under way): for a plan the document did not list, and for the first request.
    pub(crate) async fn after_refetch(&self) -> Option<Arc<Compiled>> {
        let _ = self.refresh(false).await;
        self.snapshot
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .compiled
            .clone()
    }

    /// Fetches the document if `force` or the rate limit allows, and keeps it on success.
    pub(crate) async fn refresh(&self, force: bool) -> Result<(), KeySourceError> {
        let _flight = self.fetch.lock().await;
        {
            let mut s = self
                .snapshot
                .write()
                .unwrap_or_else(PoisonError::into_inner);
            if !force && !self.may_fetch(&s) {
                return Ok(());
            }
            s.attempted_at = Some(self.clock.elapsed());
        }
        match self.fetch_document().await {
            Ok(document) => {
                let compiled = Arc::new(Compiled::new(&document));
                let mut s = self
                    .snapshot
                    .write()
                    .unwrap_or_else(PoisonError::into_inner);
                s.compiled = Some(compiled);
                s.fetched_at = Some(self.clock.elapsed());
                s.fetches += 1;
                tracing::debug!(api = %self.api, "plan limits refreshed");
                Ok(())
            }
            Err(e) => {
                tracing::warn!(
                    api = %self.api, error = %e,
                    "fetching the plan limits failed; the last known limits go on applying"
                );
                Err(e)
            }
        }
    }

    async fn fetch_document(&self) -> Result<LimitsDocument, KeySourceError> {
        let body = crate::jwks::get(&self.client, &self.url).await?;
        let document: LimitsDocument =
            serde_json::from_slice(&body).map_err(|source| KeySourceError::Json {
                url: self.url.clone(),
                source,
            })?;
        if document.api != self.api {
            return Err(KeySourceError::WrongApi {
                url: self.url.clone(),
            });
        }
        Ok(document)
    }

    /// Once per [`REFRESH`]; once per [`FIRST_RETRY`] while no document was ever learned,
    /// since every request is refused until one is.
    fn may_fetch(&self, s: &Snapshot) -> bool {
        let interval = if s.compiled.is_some() {
            REFRESH
        } else {
            FIRST_RETRY
        };
        s.attempted_at
            .is_none_or(|at| self.clock.elapsed().saturating_sub(at) >= interval)
    }

    /// Successful fetches so far.
    pub(crate) fn fetches(&self) -> u64 {
        self.snapshot
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .fetches
    }
}

/// Every [`REFRESH`] of real time, a refresh (which the rate limit may skip): a quiet API
/// learns a change too. Ends when the cache is dropped.
async fn tick(cache: std::sync::Weak<DocumentCache>) {
    loop {
        tokio::time::sleep(REFRESH).await;
        let Some(cache) = cache.upgrade() else {
            return;
        };
        let _ = cache.refresh(false).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_proto::api_limits::Period;

    #[test]
    fn the_unlisted_plan_gets_the_tightest_limits_of_any() {
        let document: LimitsDocument = serde_json::from_value(serde_json::json!({
            "api": "news-api",
            "plans": {
                "free": {"rate": {"limit": 5, "window_seconds": 60}, "burst": 2,
                         "quota": {"limit": 1000, "period": "month"}},
                "partner": {"rate": {"limit": 600, "window_seconds": 60},
                            "quota": {"limit": 100, "period": "day"}},
                "pro": {}
            }
        }))
        .unwrap();
        let compiled = Compiled::new(&document);
        let unlisted = compiled.unlisted();
        let rate = unlisted.rate.unwrap();
        assert_eq!((rate.limit, rate.window_secs, rate.burst), (5, 60, 2));
        let quota = unlisted.quota.unwrap();
        // 1000 a month is about 32 a day: tighter than 100 a day.
        assert_eq!((quota.limit, quota.period), (1000, Period::Month));
        assert!(compiled.plan("pro").is_some_and(|p| !p.limits()));
        // No limited plan at all: nothing to be held to.
        let open = Compiled::new(&LimitsDocument {
            api: "a".into(),
            plans: [("pro".to_owned(), PlanLimits::default())].into(),
        });
        assert!(!open.unlisted().limits());
    }
}
