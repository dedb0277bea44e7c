//! Token requests per client, counted in memory on the hot path and written to the store in
//! batches, for metering (`tessera client usage ID`).

use std::collections::HashMap;
use std::sync::Mutex;

use tessera_store::{Store, StoreError, Timestamp, Usage};

use crate::registry::ClientKey;

/// Clients written to the store per batch of a flush: a flush after a busy interval with a
/// million clients never holds a second copy of all their counts.
const FLUSH_BATCH: usize = 10_000;

/// Counts since the last flush, per client: (issued, refused). Keyed by the registry's
/// compact id, so that counting a client for the first time allocates nothing for its id.
#[derive(Debug, Default)]
pub struct UsageCounter(Mutex<HashMap<ClientKey, (u64, u64)>>);

impl UsageCounter {
    /// Counts one answer to `client_id`.
    pub fn count(&self, client_id: &str, issued: bool) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        // One search: making the key allocates nothing for a generated id.
        let entry = map.entry(ClientKey::new(client_id)).or_default();
        if issued {
            entry.0 += 1;
        } else {
            entry.1 += 1;
        }
    }

    /// Writes the counts so far under today's UTC date, in batches. On failure the counts
    /// not written are kept for the next flush. Not cancel-safe: a flush dropped while the
    /// store writes loses the counts it took, so callers let it finish.
    pub async fn flush(&self, store: &dyn Store, now: Timestamp) -> Result<(), StoreError> {
        let taken = std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()));
        if taken.is_empty() {
            return Ok(());
        }
        let day = utc_day(now);
        let (issued, refused) = taken.values().fold((0, 0), |(i, r), (issued, refused)| {
            (i + issued, r + refused)
        });
        let mut left = taken.into_iter();
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
                let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
                let unwritten = batch
                    .into_iter()
                    .map(|u| (ClientKey::new(&u.client_id), (u.issued, u.refused)))
                    .chain(left);
                for (client, (issued, refused)) in unwritten {
                    let entry = map.entry(client).or_default();
                    entry.0 += issued;
                    entry.1 += refused;
                }
                return Err(e);
            }
        }
        // The hourly totals are for the overview chart, written once the counts are kept:
        // a failure here loses only an hour's bar, never a client's usage.
        if let Err(error) = store
            .add_hourly_usage(&tessera_proto::clock::utc_hour(now), issued, refused)
            .await
        {
            tracing::warn!(%error, "writing the hourly usage failed");
        }
        Ok(())
    }
}

pub use tessera_proto::clock::utc_day;
