//! Token requests per client, counted in memory on the hot path and written to the store in
//! batches, for metering (`tessera client usage ID`). Counts a flush could not write (a full
//! disk, a database that does not answer) are kept under their UTC day and written by a
//! later flush, so that an outage delays metering but loses none of it while the server
//! runs.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use tessera_store::{Store, StoreError, Timestamp, Usage};

use crate::registry::ClientKey;

/// Clients written to the store per batch of a flush: a flush after a busy interval with a
/// million clients never holds a second copy of all their counts.
const FLUSH_BATCH: usize = 10_000;

/// The most rows (one client on one UTC day, about 60 bytes each) kept from failed flushes
/// before the oldest day is folded into the next: about 60 MB. Folding keeps every count but
/// moves it to a later day, so that an outage of many days with many clients cannot grow
/// without bound: past this, what is kept is at most one row per client that got an answer.
const KEPT_ROWS: usize = 1_000_000;

/// Counts per client: (issued, refused).
type Counts = HashMap<ClientKey, (u64, u64)>;

/// The counts since the last flush, and those flushes could not write.
#[derive(Debug, Default)]
pub struct UsageCounter {
    /// Counted since the last flush. Keyed by the registry's compact id, so that counting a
    /// client for the first time allocates nothing for its id.
    counting: Mutex<Counts>,
    /// Not written yet, by UTC day (`YYYY-MM-DD`).
    kept: Mutex<BTreeMap<String, Counts>>,
}

impl UsageCounter {
    /// Counts one answer to `client_id`.
    pub fn count(&self, client_id: &str, issued: bool) {
        let mut map = self.counting.lock().unwrap_or_else(|p| p.into_inner());
        // One search: making the key allocates nothing for a generated id.
        let entry = map.entry(ClientKey::new(client_id)).or_default();
        if issued {
            entry.0 += 1;
        } else {
            entry.1 += 1;
        }
    }

    /// Writes the counts so far under today's UTC date, and those kept from failed flushes
    /// under theirs, in batches. On failure the counts not written are kept for the next
    /// flush (`KEPT_ROWS` bounds them). Not cancel-safe: a flush dropped while the store
    /// writes loses the counts it took, so callers let it finish.
    pub async fn flush(&self, store: &dyn Store, now: Timestamp) -> Result<(), StoreError> {
        let counted = std::mem::take(&mut *self.counting.lock().unwrap_or_else(|p| p.into_inner()));
        let mut pending = std::mem::take(&mut *self.kept.lock().unwrap_or_else(|p| p.into_inner()));
        if !counted.is_empty() {
            add(pending.entry(utc_day(now)).or_default(), counted);
        }
        if pending.is_empty() {
            return Ok(());
        }
        let (issued, refused) = pending
            .values()
            .flat_map(HashMap::values)
            .fold((0, 0), |(i, r), (issued, refused)| {
                (i + issued, r + refused)
            });
        let mut unwritten = BTreeMap::new();
        let mut failure = None;
        for (day, rows) in pending {
            if failure.is_some() {
                unwritten.insert(day, rows);
                continue;
            }
            let mut left = rows.into_iter();
            loop {
                let batch: Vec<Usage> = left
                    .by_ref()
                    .take(FLUSH_BATCH)
                    .map(|(client_id, (issued, refused))| Usage {
                        client_id: client_id.as_str().to_owned(),
                        day: day.clone(),
                        issued,
                        refused,
                    })
                    .collect();
                if batch.is_empty() {
                    break;
                }
                if let Err(e) = store.add_usage(&batch).await {
                    let rest = batch
                        .into_iter()
                        .map(|u| (ClientKey::new(&u.client_id), (u.issued, u.refused)))
                        .chain(left)
                        .collect();
                    unwritten.insert(day, rest);
                    failure = Some(e);
                    break;
                }
            }
        }
        if let Some(error) = failure {
            self.keep(unwritten);
            return Err(error);
        }
        // The hourly totals are for the overview chart, written once the counts are kept:
        // a failure here loses only an hour's bar, never a client's usage. Counts kept from
        // earlier hours are added to this one.
        if let Err(error) = store
            .add_hourly_usage(&tessera_proto::clock::utc_hour(now), issued, refused)
            .await
        {
            tracing::warn!(%error, "writing the hourly usage failed");
        }
        Ok(())
    }

    /// Keeps `unwritten` for the next flush, within [`KEPT_ROWS`].
    fn keep(&self, unwritten: BTreeMap<String, Counts>) {
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        for (day, rows) in unwritten {
            add(kept.entry(day).or_default(), rows);
        }
        fold_within(&mut kept, KEPT_ROWS);
    }
}

/// Adds `more` to `into`.
fn add(into: &mut Counts, more: Counts) {
    if into.is_empty() {
        *into = more;
        return;
    }
    for (client, (issued, refused)) in more {
        let entry = into.entry(client).or_default();
        entry.0 += issued;
        entry.1 += refused;
    }
}

/// Folds the oldest days into the next until at most `limit` rows are kept or one day is
/// left (which holds at most one row per client).
fn fold_within(kept: &mut BTreeMap<String, Counts>, limit: usize) {
    while kept.values().map(HashMap::len).sum::<usize>() > limit && kept.len() > 1 {
        let Some((oldest, rows)) = kept.pop_first() else {
            return;
        };
        let Some(mut next) = kept.first_entry() else {
            return;
        };
        tracing::warn!(
            day = oldest,
            into = next.key().as_str(),
            "usage counts kept in memory passed {limit} rows: a day's counts now count under \
             the next day"
        );
        add(next.get_mut(), rows);
    }
}

pub use tessera_proto::clock::utc_day;

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(clients: &[(&str, u64)]) -> Counts {
        clients
            .iter()
            .map(|&(id, n)| (ClientKey::new(id), (n, 0)))
            .collect()
    }

    #[test]
    fn past_the_bound_the_oldest_days_are_folded_into_the_next_and_no_count_is_lost() {
        let mut kept = BTreeMap::from([
            ("2030-01-01".to_owned(), counts(&[("a", 1), ("b", 2)])),
            ("2030-01-02".to_owned(), counts(&[("a", 10), ("c", 3)])),
            ("2030-01-03".to_owned(), counts(&[("d", 4)])),
        ]);
        fold_within(&mut kept, 5);
        // Within the bound: nothing moves.
        assert_eq!(kept.len(), 3);
        fold_within(&mut kept, 4);
        // One fold: the first day's counts now count under the second.
        assert_eq!(
            kept.keys().collect::<Vec<_>>(),
            ["2030-01-02", "2030-01-03"]
        );
        assert_eq!(kept["2030-01-02"], counts(&[("a", 11), ("b", 2), ("c", 3)]));
        // A bound below one day's rows leaves the last day whole.
        fold_within(&mut kept, 1);
        assert_eq!(kept.len(), 1);
        assert_eq!(
            kept["2030-01-03"],
            counts(&[("a", 11), ("b", 2), ("c", 3), ("d", 4)])
        );
    }
}
