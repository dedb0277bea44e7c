//! Where Tessera reads the time. Everything that decides by the clock reads a [`Clock`] it
//! was given: the server (token `iat` and `exp`, secret rotation deadlines, key activation,
//! rate limits, readiness, usage days) and the resource-server kit (token expiry, the key
//! refresh interval). A test gives them a [`ManualClock`] and sets the time instead of
//! sleeping.
//!
//! It also writes times for people and JSON: [`rfc3339`] (`2026-11-26T05:29:51Z`),
//! [`utc_day`] (`2026-11-26`), their readers [`parse_rfc3339`] and [`is_day`], and
//! [`serde_rfc3339`] for fields that are Unix seconds in Rust and RFC 3339 strings on the
//! wire.

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
pub fn civil(days: i64) -> (i64, i64, i64) {
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

/// `YYYY-MM-DDTHH`: the UTC hour of a Unix time.
pub fn utc_hour(unix: Timestamp) -> String {
    format!("{}T{:02}", utc_day(unix), unix.rem_euclid(86_400) / 3600)
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

/// Reads an RFC 3339 `date-time` (section 5.6) as Unix seconds: `T` or `t`, `Z`, `z` or a
/// numeric offset, an optional fraction (dropped, rounding down). `None` for anything else,
/// a date that does not exist included.
pub fn parse_rfc3339(text: &str) -> Option<Timestamp> {
    let b = text.as_bytes();
    let digits = |from: usize, len: usize| -> Option<i64> {
        let part = b.get(from..from + len)?;
        part.iter().all(u8::is_ascii_digit).then(|| {
            part.iter()
                .fold(0, |n, digit| n * 10 + i64::from(digit - b'0'))
        })
    };
    let at = |i: usize, c: u8| b.get(i) == Some(&c);
    if !(at(4, b'-')
        && at(7, b'-')
        && (at(10, b'T') || at(10, b't'))
        && at(13, b':')
        && at(16, b':'))
    {
        return None;
    }
    let (y, m, d) = (digits(0, 4)?, digits(5, 2)?, digits(8, 2)?);
    let (hh, mm, ss) = (digits(11, 2)?, digits(14, 2)?, digits(17, 2)?);
    let mut i = 19;
    if at(i, b'.') {
        i += 1;
        let start = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == start {
            return None;
        }
    }
    let offset = match b.get(i)? {
        b'Z' | b'z' if i + 1 == b.len() => 0,
        sign @ (b'+' | b'-') if i + 6 == b.len() && at(i + 3, b':') => {
            let (oh, om) = (digits(i + 1, 2)?, digits(i + 4, 2)?);
            if oh > 23 || om > 59 {
                return None;
            }
            let offset = oh * 3600 + om * 60;
            if *sign == b'+' {
                offset
            } else {
                -offset
            }
        }
        _ => return None,
    };
    // Seconds up to 60: RFC 3339 allows a leap second, which Unix time folds into the next.
    if !(1..=12).contains(&m) || d < 1 || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    let days = days_from_civil(y, m, d);
    if civil(days) != (y, m, d) {
        return None;
    }
    Some(days * 86_400 + hh * 3600 + mm * 60 + ss - offset)
}

/// Days since 1970-01-01 of a year, month (1 to 12) and day (H. Hinnant's
/// `days_from_civil`). A day past the month's end runs on into the next month.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Serde for a [`Timestamp`] that is an RFC 3339 string on the wire
/// (`#[serde(with = "tessera_proto::clock::serde_rfc3339")]`); [`serde_rfc3339::option`]
/// for an `Option<Timestamp>` that is a string or `null`.
pub mod serde_rfc3339 {
    use serde::{Deserialize, Deserializer, Serializer};

    use super::Timestamp;

    /// Writes `unix` as [`rfc3339`](super::rfc3339).
    pub fn serialize<S: Serializer>(unix: &Timestamp, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&super::rfc3339(*unix))
    }

    /// Reads an RFC 3339 string with [`parse_rfc3339`](super::parse_rfc3339).
    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Timestamp, D::Error> {
        let text = String::deserialize(deserializer)?;
        super::parse_rfc3339(&text).ok_or_else(|| {
            serde::de::Error::custom(format!("{text:?} is not an RFC 3339 date-time"))
        })
    }

    /// The same for an `Option<Timestamp>`: `null` is `None`.
    pub mod option {
        use serde::{Deserialize, Deserializer, Serializer};

        use super::Timestamp;

        /// Writes `Some` as an RFC 3339 string and `None` as `null`.
        pub fn serialize<S: Serializer>(
            unix: &Option<Timestamp>,
            serializer: S,
        ) -> Result<S::Ok, S::Error> {
            match unix {
                Some(unix) => super::serialize(unix, serializer),
                None => serializer.serialize_none(),
            }
        }

        /// Reads an RFC 3339 string or `null`.
        pub fn deserialize<'de, D: Deserializer<'de>>(
            deserializer: D,
        ) -> Result<Option<Timestamp>, D::Error> {
            Option::<String>::deserialize(deserializer)?
                .map(|text| {
                    super::super::parse_rfc3339(&text).ok_or_else(|| {
                        serde::de::Error::custom(format!("{text:?} is not an RFC 3339 date-time"))
                    })
                })
                .transpose()
        }
    }
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

    #[test]
    fn rfc3339_writes_utc_seconds() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_795_670_991), "2026-11-26T05:29:51Z");
        assert_eq!(rfc3339(951_868_799), "2000-02-29T23:59:59Z");
        assert_eq!(rfc3339(-1), "1969-12-31T23:59:59Z");
        assert_eq!(rfc3339(253_402_300_799), "9999-12-31T23:59:59Z");
    }

    #[test]
    fn rfc3339_reads_what_it_writes_and_other_offsets() {
        for unix in [
            0,
            -1,
            951_782_400,
            951_868_799,
            1_795_670_991,
            4_102_444_800,
        ] {
            assert_eq!(parse_rfc3339(&rfc3339(unix)), Some(unix), "{unix}");
        }
        let at = 1_795_670_991;
        for text in [
            "2026-11-26T05:29:51Z",
            "2026-11-26t05:29:51z",
            "2026-11-26T05:29:51.999Z",
            "2026-11-26T07:29:51+02:00",
            "2026-11-25T23:59:51-05:30",
        ] {
            assert_eq!(parse_rfc3339(text), Some(at), "{text}");
        }
        // A leap second reads as the next second's start.
        assert_eq!(
            parse_rfc3339("2016-12-31T23:59:60Z"),
            parse_rfc3339("2017-01-01T00:00:00Z")
        );
    }

    #[test]
    fn rfc3339_refuses_what_is_not_a_date_time() {
        for text in [
            "",
            "2026-11-26",
            "2026-11-26 05:29:51Z",
            "2026-11-26T05:29:51",
            "2026-11-26T05:29:51ZZ",
            "2026-11-26T05:29:51.Z",
            "2026-11-26T05:29:51+0200",
            "2026-11-26T05:29:51+24:00",
            "2026-13-01T00:00:00Z",
            "2026-00-01T00:00:00Z",
            "2026-02-29T00:00:00Z",
            "2026-04-31T00:00:00Z",
            "2026-11-00T00:00:00Z",
            "2026-11-26T24:00:00Z",
            "2026-11-26T05:60:00Z",
            "2026-11-26T05:29:61Z",
            "+026-11-26T05:29:51Z",
            "２026-11-26T05:29:51Z",
        ] {
            assert_eq!(parse_rfc3339(text), None, "{text}");
        }
        assert_eq!(
            parse_rfc3339("2000-02-29T00:00:00Z"),
            Some(951_782_400),
            "a leap day exists"
        );
    }

    #[test]
    fn serde_rfc3339_round_trips() {
        #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
        struct Times {
            #[serde(with = "serde_rfc3339")]
            at: Timestamp,
            #[serde(with = "serde_rfc3339::option")]
            until: Option<Timestamp>,
        }
        let times = Times {
            at: 1_795_670_991,
            until: None,
        };
        let json = serde_json::to_string(&times).unwrap();
        assert_eq!(json, r#"{"at":"2026-11-26T05:29:51Z","until":null}"#);
        assert_eq!(serde_json::from_str::<Times>(&json).unwrap(), times);
        let json = r#"{"at":"2026-11-26T05:29:51Z","until":"1970-01-01T00:00:00Z"}"#;
        assert_eq!(serde_json::from_str::<Times>(json).unwrap().until, Some(0));
        assert!(serde_json::from_str::<Times>(r#"{"at":1795700991,"until":null}"#).is_err());
        assert!(serde_json::from_str::<Times>(r#"{"at":"yesterday","until":null}"#).is_err());
    }
}
