//! Metering: the requests each client made to this API per UTC day, sent to Tessera's
//! `POST {issuer}/api-usage` in batches, with a token of the API's own client (scope
//! `tessera-usage`, from [`tessera_client::TokenClient`]).
//!
//! Counts gather in memory; every `interval` (and at [`crate::Verifier::flush_usage`]) up to
//! [`BATCH_ROWS`] of them become a batch with an id of its own. One batch is in flight at a
//! time: when sending fails for a reason that may pass (no answer, a 5xx, 401, 408 or 429,
//! no token) it is kept whole, with its id, and sent again next time, while new counts gather
//! beside it; Tessera counts a batch id once, so a batch that arrived but whose answer was
//! lost is not counted twice. It is sent again for [`RETRY_FOR`] after its first attempt, then
//! dropped ([`super::LimitsHealth::usage_batches_expired`]). A batch Tessera refuses for good,
//! any other 4xx (a 400 for a field it will never take, a 403 for a client without the
//! `tessera-usage` scope), is dropped at once with one log line
//! ([`super::LimitsHealth::usage_batches_refused`]): sent again it would be refused again, and
//! hold every later batch behind it. The counts kept are bounded ([`MAX_ROWS`] rows of one
//! day and client); past that, new (day, client) rows are dropped, counted in
//! [`super::LimitsHealth::usage_dropped`] and logged.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use tessera_proto::api_limits::{UsageCount, UsageReport};

/// The most rows one batch carries.
pub(crate) const BATCH_ROWS: usize = 1000;
/// The most rows kept unsent, the batch in flight included.
pub(crate) const MAX_ROWS: usize = 100_000;
/// How long a batch that could not be delivered is sent again, from its first attempt (on
/// the verifier's clock): six days, under the seven that Tessera remembers a batch id for,
/// so that a batch which did arrive is never counted twice.
pub const RETRY_FOR: std::time::Duration = std::time::Duration::from_secs(6 * 86_400);

/// Why a report was not delivered. Its counts are kept and sent again.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UsageError {
    /// No token for the API's own client.
    #[error("a token to report usage with: {0}")]
    Token(#[from] tessera_client::Error),
    /// The request failed.
    #[error("reporting usage: {0}")]
    Http(#[from] reqwest::Error),
    /// Tessera answered another status than 204, one that may pass (a 5xx, 401, 408, 429).
    #[error("reporting usage: HTTP status {0}")]
    Status(u16),
    /// Tessera refused the batch for good (another 4xx): its counts were dropped.
    #[error(
        "reporting usage: Tessera refused a batch with HTTP status {0}; its counts were dropped"
    )]
    Refused(u16),
}

impl UsageError {
    /// Whether sending the same batch again cannot succeed: a 4xx other than 401 (a token
    /// to renew), 408 (a timeout) and 429 (too many requests) (RFC 9110 section 15.5).
    fn is_permanent(&self) -> bool {
        matches!(self, Self::Status(s) if (400..500).contains(s) && !matches!(s, 401 | 408 | 429))
    }
}

#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    requests: u64,
    refused: u64,
}

/// The reporter of one verifier.
#[derive(Debug)]
pub(crate) struct Usage {
    api: String,
    url: String,
    http: reqwest::Client,
    tokens: tessera_client::TokenClient,
    interval: Duration,
    clock: tessera_proto::Clock,
    /// Counts not yet in a batch: by day number (since the epoch), then client.
    open: Mutex<Open>,
    /// The batch in flight, kept until Tessera took it; the lock is the single flight.
    sending: tokio::sync::Mutex<Option<InFlight>>,
    started: AtomicBool,
    pub(crate) sent: AtomicU64,
    pub(crate) failures: AtomicU64,
    pub(crate) dropped: AtomicU64,
    pub(crate) refused: AtomicU64,
    pub(crate) expired: AtomicU64,
}

/// A batch, and when it was first sent (Unix seconds on the verifier's clock).
#[derive(Debug)]
struct InFlight {
    report: UsageReport,
    first_sent: i64,
}

#[derive(Debug, Default)]
struct Open {
    days: HashMap<i64, HashMap<Box<str>, Counts>>,
    rows: usize,
    /// Rows in the batch in flight, which count against [`MAX_ROWS`] too.
    in_flight: usize,
}

impl Usage {
    pub(crate) fn new(
        issuer: &str,
        api: &str,
        http: reqwest::Client,
        tokens: tessera_client::TokenClient,
        interval: Duration,
        clock: tessera_proto::Clock,
    ) -> Self {
        Self {
            api: api.to_owned(),
            url: format!("{}/api-usage", issuer.trim_end_matches('/')),
            http,
            tokens,
            interval,
            clock,
            open: Mutex::default(),
            sending: tokio::sync::Mutex::new(None),
            started: AtomicBool::new(false),
            sent: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            expired: AtomicU64::new(0),
        }
    }

    /// Counts one request of `client` on the UTC day of `now`, served or `refused`.
    pub(crate) fn record(self: &Arc<Self>, now: i64, client: &str, refused: bool) {
        if !self.started.swap(true, Ordering::AcqRel) {
            tokio::spawn(every(Arc::downgrade(self), self.interval));
        }
        let day = now.div_euclid(86_400);
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let open = &mut *open;
        let full = open.rows + open.in_flight >= MAX_ROWS;
        let clients = open.days.entry(day).or_default();
        let counts = match clients.get_mut(client) {
            Some(counts) => counts,
            None if full => {
                if self.dropped.fetch_add(1, Ordering::Relaxed) == 0 {
                    tracing::warn!(
                        api = %self.api, max_rows = MAX_ROWS,
                        "usage not yet reported is at its bound; requests of new clients go \
                         uncounted until Tessera takes a report"
                    );
                }
                return;
            }
            None => {
                open.rows += 1;
                clients.entry(client.into()).or_default()
            }
        };
        if refused {
            counts.refused += 1;
        } else {
            counts.requests += 1;
        }
    }

    /// Sends what has gathered, batch by batch, until nothing is left or a send fails for a
    /// reason that may pass (the batch is kept). A batch refused for good, or failing past
    /// [`RETRY_FOR`], is dropped and the next one sent; the first such refusal is returned
    /// once the rest went.
    pub(crate) async fn flush(&self) -> Result<(), UsageError> {
        let mut pending = self.sending.lock().await;
        // The first batch dropped in this flush, returned once the rest went.
        let mut lost = None;
        loop {
            if pending.is_none() {
                match self.next_batch() {
                    Some(report) => {
                        *pending = Some(InFlight {
                            report,
                            first_sent: self.clock.now(),
                        });
                    }
                    None => return lost.map_or(Ok(()), Err),
                }
            }
            let Some(batch) = pending.as_ref() else {
                return Ok(());
            };
            match self.send(&batch.report).await {
                Ok(()) => {
                    self.sent.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) if e.is_permanent() => {
                    self.refused.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(
                        api = %self.api, batch = %batch.report.batch,
                        rows = batch.report.counts.len(), error = %e,
                        "Tessera refused a usage report for good; its counts are dropped"
                    );
                    if let (None, UsageError::Status(status)) = (&lost, &e) {
                        lost = Some(UsageError::Refused(*status));
                    }
                }
                Err(e) => {
                    self.failures.fetch_add(1, Ordering::Relaxed);
                    let age = self.clock.now().saturating_sub(batch.first_sent);
                    if age < i64::try_from(RETRY_FOR.as_secs()).unwrap_or(i64::MAX) {
                        tracing::warn!(
                            api = %self.api, batch = %batch.report.batch, error = %e,
                            "reporting usage failed; the batch is kept and sent again"
                        );
                        return Err(e);
                    }
                    self.expired.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(
                        api = %self.api, batch = %batch.report.batch,
                        rows = batch.report.counts.len(), error = %e, age_secs = age,
                        "a usage report failed for longer than it is sent again; its counts \
                         are dropped"
                    );
                    lost.get_or_insert(e);
                }
            }
            let done = pending.take().map_or(0, |b| b.report.counts.len());
            let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
            open.in_flight = open.in_flight.saturating_sub(done);
        }
    }

    /// Up to [`BATCH_ROWS`] rows taken out of the open counts, under a new batch id.
    fn next_batch(&self) -> Option<UsageReport> {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let mut counts = Vec::new();
        let mut days: Vec<i64> = open.days.keys().copied().collect();
        days.sort_unstable();
        for day in days {
            let Some(clients) = open.days.get_mut(&day) else {
                continue;
            };
            let name = tessera_proto::clock::utc_day(day * 86_400);
            let take: Vec<Box<str>> = clients
                .keys()
                .take(BATCH_ROWS - counts.len())
                .cloned()
                .collect();
            for client in take {
                if let Some(c) = clients.remove(&client) {
                    counts.push(UsageCount {
                        day: name.clone(),
                        client_id: client.into(),
                        requests: c.requests,
                        refused: c.refused,
                    });
                }
            }
            if clients.is_empty() {
                open.days.remove(&day);
            }
            if counts.len() >= BATCH_ROWS {
                break;
            }
        }
        if counts.is_empty() {
            return None;
        }
        open.rows -= counts.len();
        open.in_flight += counts.len();
        Some(UsageReport {
            batch: super::random_id(),
            api: self.api.clone(),
            counts,
        })
    }

    async fn send(&self, batch: &UsageReport) -> Result<(), UsageError> {
        let token = self.tokens.token().await?;
        let answer = self
            .http
            .post(&self.url)
            .header(
                reqwest::header::AUTHORIZATION,
                format!("{} {}", token.token_type().as_str(), token.expose()),
            )
            .json(batch)
            .send()
            .await?;
        match answer.status().as_u16() {
            204 | 200 => Ok(()),
            401 => {
                // Revoked or expired early: the next attempt asks for a new token.
                self.tokens.invalidate(&token);
                Err(UsageError::Status(401))
            }
            status => Err(UsageError::Status(status)),
        }
    }

    /// Rows gathered and not yet taken by Tessera.
    pub(crate) fn pending(&self) -> usize {
        let open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        open.rows + open.in_flight
    }
}

/// Every `interval`, a flush. Ends when the reporter is dropped.
async fn every(usage: Weak<Usage>, interval: Duration) {
    loop {
        tokio::time::sleep(interval).await;
        let Some(usage) = usage.upgrade() else {
            return;
        };
        let _ = usage.flush().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_proto::ScopeSet;

    #[test]
    fn only_a_4xx_that_cannot_pass_is_permanent() {
        for status in [400, 403, 404, 405, 409, 413, 415, 422] {
            assert!(UsageError::Status(status).is_permanent(), "{status}");
        }
        for status in [401, 408, 429, 500, 502, 503, 504, 302] {
            assert!(!UsageError::Status(status).is_permanent(), "{status}");
        }
    }

    /// The kit never sends a row Tessera refuses; this one is made by hand to get the real
    /// server's 400 (a client id of 257 bytes, one over the longest it takes).
    #[tokio::test]
    async fn a_batch_the_real_tessera_refuses_with_400_is_dropped_and_the_next_one_goes() {
        let app = tessera_testkit::spawn_app().await;
        app.registrar()
            .set_plan("metering", "tessera-usage", None)
            .await
            .unwrap();
        let (id, secret) = app
            .client_on("metering", tessera_store::AuthMethod::ClientSecretBasic)
            .await;
        let tokens = tessera_client::TokenClient::builder()
            .environment(tessera_client::Environment::Production)
            .production_url(app.base.parse().unwrap())
            .client_id(id)
            .client_secret(secret)
            .scopes(ScopeSet::parse("tessera-usage").unwrap())
            .clock(app.clock.clone())
            .build()
            .unwrap();
        let clock: tessera_proto::Clock = app.clock.clone().into();
        let usage = Arc::new(Usage::new(
            &app.base,
            "news-api",
            reqwest::Client::new(),
            tokens,
            Duration::from_secs(3600),
            clock,
        ));
        let now = app.clock.now();
        usage.record(now, &"x".repeat(257), false);
        let refused = usage.flush().await.unwrap_err();
        assert!(matches!(refused, UsageError::Refused(400)), "{refused:?}");
        assert_eq!(usage.pending(), 0);
        assert_eq!(usage.refused.load(Ordering::Relaxed), 1);
        assert_eq!(usage.failures.load(Ordering::Relaxed), 0);

        usage.record(now, "alice", false);
        usage.record(now, "alice", true);
        usage.flush().await.unwrap();
        assert_eq!(usage.sent.load(Ordering::Relaxed), 1);
        assert_eq!(usage.refused.load(Ordering::Relaxed), 1);
        let alice = tessera_proto::ClientId::parse("alice").unwrap();
        let stored = app.store.api_usage(&alice).await.unwrap();
        assert_eq!(
            stored
                .iter()
                .map(|u| (u.api.as_str(), u.requests, u.refused))
                .collect::<Vec<_>>(),
            [("news-api", 1, 1)]
        );
    }
}
