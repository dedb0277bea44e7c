//! Where Tessera reads the time. Everything that decides by the clock reads a [`Clock`] it
//! was given: the server (token `iat` and `exp`, secret rotation deadlines, key activation,
//! rate limits, readiness, usage days) and the resource-server kit (token expiry, the key
//! refresh interval). A test gives them a [`ManualClock`] and sets the time instead of
//! sleeping.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Seconds since the Unix epoch.
pub type Timestamp = i64;

/// A time source: the system's clocks in production, or a [`ManualClock`] that a test moves.
///
/// It gives two readings: [`Clock::now`], wall-clock seconds since the Unix epoch, for what
/// is stored or sent (`iat`, `exp`, deadlines); and [`Clock::elapsed`], a monotonic
/// duration, for rate limits, which must not jump when the wall clock is stepped.
#[derive(Debug, Clone)]
pub struct Clock(Source);

#[derive(Debug, Clone)]
enum Source {
    /// The system clocks; `Instant`s are measured from `origin`.
    System { origin: Instant },
    /// Nanoseconds since the Unix epoch, moved only by the test that holds the clock.
    Manual(Arc<AtomicU64>),
}

impl Default for Clock {
    fn default() -> Self {
        Self::system()
    }
}

impl Clock {
    /// The system's wall clock and monotonic clock.
    pub fn system() -> Self {
        Self(Source::System {
            origin: Instant::now(),
        })
    }

    /// Seconds since the Unix epoch.
    pub fn now(&self) -> Timestamp {
        match &self.0 {
            Source::System { .. } => SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as Timestamp),
            Source::Manual(nanos) => (nanos.load(Ordering::Acquire) / 1_000_000_000) as Timestamp,
        }
    }

    /// Monotonic time since an arbitrary origin, for measuring intervals.
    pub fn elapsed(&self) -> Duration {
        match &self.0 {
            Source::System { origin } => origin.elapsed(),
            Source::Manual(nanos) => Duration::from_nanos(nanos.load(Ordering::Acquire)),
        }
    }
}

/// A clock that stands still until its holder moves it: tests set the time with it instead
/// of sleeping. Every [`Clock`] made from it (with `into`) reads the same time.
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    /// A clock standing at `at`, in seconds since the Unix epoch.
    pub fn at(at: Timestamp) -> Self {
        Self(Arc::new(AtomicU64::new(secs_to_nanos(at))))
    }

    /// A clock standing at the current system time, whole seconds.
    pub fn starting_now() -> Self {
        Self::at(Clock::system().now())
    }

    /// Seconds since the Unix epoch.
    pub fn now(&self) -> Timestamp {
        Clock::from(self.clone()).now()
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let by = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        self.0.fetch_add(by, Ordering::AcqRel);
    }

    /// Sets the clock to `at`, in seconds since the Unix epoch (backwards too).
    pub fn set(&self, at: Timestamp) {
        self.0.store(secs_to_nanos(at), Ordering::Release);
    }
}

impl From<ManualClock> for Clock {
    fn from(manual: ManualClock) -> Self {
        Self(Source::Manual(manual.0))
    }
}

fn secs_to_nanos(secs: Timestamp) -> u64 {
    u64::try_from(secs)
        .unwrap_or(0)
        .saturating_mul(1_000_000_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_told() {
        let manual = ManualClock::at(1_000);
        let clock = Clock::from(manual.clone());
        assert_eq!(clock.now(), 1_000);
        let before = clock.elapsed();
        manual.advance(Duration::from_millis(1_500));
        assert_eq!(clock.now(), 1_001);
        assert_eq!(clock.elapsed() - before, Duration::from_millis(1_500));
        manual.set(500);
        assert_eq!(clock.now(), 500);
    }

    #[test]
    fn the_system_clock_reads_the_epoch() {
        let clock = Clock::system();
        // 2023-11-14 or later: not zero and not in seconds of uptime.
        assert!(clock.now() > 1_700_000_000);
        let a = clock.elapsed();
        assert!(clock.elapsed() >= a);
    }
}
