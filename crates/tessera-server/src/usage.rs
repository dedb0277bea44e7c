//! Token requests per client, counted in memory on the hot path and written to the store in
//! batches, for metering (`tessera client usage ID`).

use std::collections::HashMap;
use std::sync::Mutex;

use tessera_store::{Store, StoreError, Timestamp, Usage};

/// Counts since the last flush, per client: (issued, refused).
#[derive(Debug, Default)]
pub struct UsageCounter(Mutex<HashMap<String, (u64, u64)>>);

impl UsageCounter {
    /// Counts one answer to `client_id`.
    pub fn count(&self, client_id: &str, issued: bool) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let entry = match map.get_mut(client_id) {
            Some(entry) => entry,
            None => map.entry(client_id.to_owned()).or_default(),
        };
        if issued {
            entry.0 += 1;
        } else {
            entry.1 += 1;
        }
    }

    /// Writes the counts so far under today's UTC date. On failure they are kept for the
    /// next flush. Not cancel-safe: a flush dropped while the store writes loses the counts
    /// it took, so callers let it finish.
    pub async fn flush(&self, store: &dyn Store, now: Timestamp) -> Result<(), StoreError> {
        let taken = std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()));
        if taken.is_empty() {
            return Ok(());
        }
        let day = utc_day(now);
        let batch: Vec<Usage> = taken
            .iter()
            .map(|(client_id, (issued, refused))| Usage {
                client_id: client_id.clone(),
                day: day.clone(),
                issued: *issued,
                refused: *refused,
            })
            .collect();
        if let Err(e) = store.add_usage(&batch).await {
            let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
            for (client, (issued, refused)) in taken {
                let entry = map.entry(client).or_default();
                entry.0 += issued;
                entry.1 += refused;
            }
            return Err(e);
        }
        Ok(())
    }
}

/// `YYYY-MM-DD` of a Unix time, UTC (civil-from-days, proleptic Gregorian).
pub fn utc_day(unix: i64) -> String {
    let days = unix.div_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_days() {
        assert_eq!(utc_day(0), "1970-01-01");
        assert_eq!(utc_day(951_782_400), "2000-02-29");
        assert_eq!(utc_day(1_795_645_359), "2026-11-25");
        assert_eq!(utc_day(-1), "1969-12-31");
    }
}
