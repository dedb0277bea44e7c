//! When to ask the token endpoint again: `Retry-After` on 429 (RFC 6585 section 4,
//! RFC 9110 section 10.2.3), jittered exponential backoff on server and network errors; and
//! the [`Sleeper`] that waits until then.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reqwest::header::{HeaderMap, RETRY_AFTER};

/// How a token request is retried. 400 and 401 answers are never retried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Requests in all, the first included; `0` counts as `1`.
    pub max_attempts: u32,
    /// The backoff before the first retry; it doubles with each retry.
    pub base_delay: Duration,
    /// The longest backoff.
    pub max_delay: Duration,
    /// The longest `Retry-After` honoured; a 429 asking for more fails at once with
    /// [`Error::RateLimited`](crate::Error::RateLimited), so the caller can decide.
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    /// Four attempts, backoff from 200 ms up to 5 s, `Retry-After` up to 60 s.
    fn default() -> Self {
        Self {
            max_attempts: 4,
            base_delay: Duration::from_millis(200),
            max_delay: Duration::from_secs(5),
            max_retry_after: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    /// No retries at all.
    pub fn never() -> Self {
        Self {
            max_attempts: 1,
            ..Self::default()
        }
    }

    pub(crate) fn attempts(&self) -> u32 {
        self.max_attempts.max(1)
    }

    /// The wait before retry number `retry` (1 for the first): half of the capped exponential
    /// delay plus up to as much again at random ("equal jitter"), so that clients that failed
    /// together do not come back together.
    pub(crate) fn backoff(&self, retry: u32, jitter: &Jitter) -> Duration {
        let doubling = 1u32 << retry.saturating_sub(1).min(20);
        let cap = self.base_delay.saturating_mul(doubling).min(self.max_delay);
        let half = cap / 2;
        half + jitter.up_to(cap - half)
    }
}

/// `Retry-After` in delay-seconds (RFC 9110 section 10.2.3). The HTTP-date form is not read:
/// the caller then falls back to its backoff.
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    value.parse::<u64>().ok().map(Duration::from_secs)
}

/// How the client waits before a retry: [`tokio::time::sleep`] unless the builder was given
/// another (a test's, which moves a manual clock instead of waiting).
#[derive(Clone)]
pub(crate) struct Sleeper(Arc<dyn Fn(Duration) -> Wait + Send + Sync>);

type Wait = Pin<Box<dyn Future<Output = ()> + Send>>;

impl Sleeper {
    pub(crate) fn new<F, W>(sleep: F) -> Self
    where
        F: Fn(Duration) -> W + Send + Sync + 'static,
        W: Future<Output = ()> + Send + 'static,
    {
        Self(Arc::new(move |wait| Box::pin(sleep(wait))))
    }

    /// Ends after `wait`, as this sleeper counts time.
    pub(crate) async fn sleep(&self, wait: Duration) {
        (self.0)(wait).await;
    }
}

impl Default for Sleeper {
    fn default() -> Self {
        Self::new(tokio::time::sleep)
    }
}

impl fmt::Debug for Sleeper {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Sleeper")
    }
}

/// A small pseudo-random source for backoff jitter, seeded from the clock. Not for secrets.
#[derive(Debug)]
pub(crate) struct Jitter(AtomicU64);

impl Jitter {
    pub(crate) fn from_clock() -> Self {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        Self(AtomicU64::new(nanos))
    }

    /// A duration between zero and `bound`, both included.
    pub(crate) fn up_to(&self, bound: Duration) -> Duration {
        // splitmix64: a Weyl sequence through a mixing function.
        let mut z = self
            .0
            .fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
            .wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        let bound = u64::try_from(bound.as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(match bound.checked_add(1) {
            Some(modulus) => z % modulus,
            None => z,
        })
    }
}

#[cfg(test)]
mod tests {
    use reqwest::header::HeaderValue;

    use super::*;

    #[test]
    fn retry_after_in_seconds() {
        let mut headers = HeaderMap::new();
        assert_eq!(retry_after(&headers), None);
        headers.insert(RETRY_AFTER, HeaderValue::from_static("2"));
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(2)));
        headers.insert(
            RETRY_AFTER,
            HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
        );
        assert_eq!(retry_after(&headers), None);
    }

    #[test]
    fn backoff_grows_within_its_bounds() {
        let policy = RetryPolicy {
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(1000),
            ..RetryPolicy::default()
        };
        let jitter = Jitter::from_clock();
        for _ in 0..100 {
            let first = policy.backoff(1, &jitter);
            assert!((50..=100).contains(&first.as_millis()), "{first:?}");
            let third = policy.backoff(3, &jitter);
            assert!((200..=400).contains(&third.as_millis()), "{third:?}");
            let late = policy.backoff(40, &jitter);
            assert!((500..=1000).contains(&late.as_millis()), "{late:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_default_sleeper_waits_in_tokio_time() {
        let started = tokio::time::Instant::now();
        Sleeper::default().sleep(Duration::from_secs(7)).await;
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_secs(7) && waited < Duration::from_millis(7_010),
            "{waited:?}"
        );
    }

    #[test]
    fn jitter_varies_and_keeps_to_its_bound() {
        let jitter = Jitter::from_clock();
        let bound = Duration::from_millis(10);
        let draws: Vec<_> = (0..50).map(|_| jitter.up_to(bound)).collect();
        assert!(draws.iter().all(|d| *d <= bound));
        assert!(draws.windows(2).any(|w| w[0] != w[1]));
        assert_eq!(jitter.up_to(Duration::ZERO), Duration::ZERO);
    }
}
