//! Metering: the requests each client made to this API per UTC day, sent to Tessera's
//! `POST {issuer}/api-usage` in batches, with a token of the API's own client (scope
//! `tessera-usage`, from [`tessera_client::TokenClient`]).
//!
//! Counts gather in memory; every `interval` (and at [`crate::Verifier::flush_usage`]) up to
//! [`BATCH_ROWS`] of them become a batch with an id of its own. One batch is in flight at a
//! time: when sending fails it is kept whole, with its id, and sent again next time, while new
//! counts gather beside it; Tessera counts a batch id once, so a batch that arrived but whose
//! answer was lost is not counted twice. The counts kept are bounded ([`MAX_ROWS`] rows of one
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
    /// Tessera answered another status than 204.
    #[error("reporting usage: HTTP status {0}")]
    Status(u16),
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
    /// Counts not yet in a batch: by day number (since the epoch), then client.
    open: Mutex<Open>,
    /// The batch in flight, kept until Tessera took it; the lock is the single flight.
    sending: tokio::sync::Mutex<Option<UsageReport>>,
    started: AtomicBool,
    pub(crate) sent: AtomicU64,
    pub(crate) failures: AtomicU64,
    pub(crate) dropped: AtomicU64,
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
    ) -> Self {
        Self {
            api: api.to_owned(),
            url: format!("{}/api-usage", issuer.trim_end_matches('/')),
            http,
            tokens,
            interval,
            open: Mutex::default(),
            sending: tokio::sync::Mutex::new(None),
            started: AtomicBool::new(false),
            sent: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
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

    /// Sends what has gathered, batch by batch, until nothing is left or a send fails.
    pub(crate) async fn flush(&self) -> Result<(), UsageError> {
        let mut pending = self.sending.lock().await;
        loop {
            if pending.is_none() {
                match self.next_batch() {
                    Some(batch) => *pending = Some(batch),
                    None => return Ok(()),
                }
            }
            let Some(batch) = pending.as_ref() else {
                return Ok(());
            };
            if let Err(e) = self.send(batch).await {
                self.failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    api = %self.api, batch = %batch.batch, error = %e,
                    "reporting usage failed; the batch is kept and sent again"
                );
                return Err(e);
            }
            self.sent.fetch_add(1, Ordering::Relaxed);
            let done = pending.take().map_or(0, |b| b.counts.len());
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
