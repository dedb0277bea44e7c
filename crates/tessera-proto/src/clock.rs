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

/// `(year, month, day)` of day number `days` since 1970-01-01 (civil-from-days, proleptic
/// Gregorian calendar).
fn civil(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// `YYYY-MM-DD`: the UTC day of a Unix time.
pub fn utc_day(unix: Timestamp) -> String {
    let (y, m, d) = civil(unix.div_euclid(86_400));
    format!("{y:04}-{m:02}-{d:02}")
}

/// A Unix time as an RFC 3339 date-time in UTC (section 5.6), e.g. `2026-11-26T05:29:51Z`.
pub fn rfc3339(unix: Timestamp) -> String {
    let secs = unix.rem_euclid(86_400);
    format!(
        "{}T{:02}:{:02}:{:02}Z",
        utc_day(unix),
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

/// Whether `day` is a real `YYYY-MM-DD` date (RFC 3339 `full-date`).
pub fn is_day(day: &str) -> bool {
    let b = day.as_bytes();
    let digits = |r: std::ops::Range<usize>| b[r].iter().all(u8::is_ascii_digit);
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' || !digits(0..4) || !digits(5..7) {
        return false;
    }
    if !digits(8..10) {
        return false;
    }
    let num = |r: std::ops::Range<usize>| day[r].parse::<i64>().unwrap_or(0);
    let (y, m, d) = (num(0..4), num(5..7), num(8..10));
    let leap = y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
    let days_in = match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return false,
    };
    (1..=days_in).contains(&d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calendar_days_and_rfc_3339() {
        assert_eq!(utc_day(0), "1970-01-01");
        assert_eq!(utc_day(951_782_400), "2000-02-29");
        assert_eq!(utc_day(1_795_645_359), "2026-11-25");
        assert_eq!(utc_day(-1), "1969-12-31");
        assert_eq!(rfc3339(1_795_645_359), "2026-11-25T22:22:39Z");
        assert_eq!(rfc3339(-1), "1969-12-31T23:59:59Z");
        assert!(is_day("2000-02-29") && is_day("2026-12-31"));
        for bad in [
            "1900-02-29",
            "2026-13-01",
            "2026-04-31",
            "2026-1-01",
            "2026-01-00",
            "x",
        ] {
            assert!(!is_day(bad), "{bad}");
        }
    }

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
