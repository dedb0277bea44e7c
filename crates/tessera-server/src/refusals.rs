//! The last refusals of each identified client, kept in this instance's memory for the
//! operator (the admin API and the console): a client's last ten error codes, and which
//! clients the rate limit refused lately. Bounded: ten per client, and at most
//! [`MAX_CLIENTS`] clients, the ones refused longest ago forgotten first. Each instance
//! knows only the requests it answered; usage counts (`usage.rs`) are the durable record.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use tessera_proto::ErrorCode;
use tessera_store::Timestamp;

/// Refusals kept per client.
const PER_CLIENT: usize = 10;
/// Clients kept.
pub(crate) const MAX_CLIENTS: usize = 10_000;

/// One client's recent refusals, newest last.
type Recent = VecDeque<(Timestamp, ErrorCode)>;

/// Recent refusals by client id.
#[derive(Debug, Default)]
pub(crate) struct Refusals(Mutex<HashMap<Box<str>, Recent>>);

impl Refusals {
    /// Remembers that `client_id` was refused with `code` at `now`.
    pub(crate) fn record(&self, client_id: &str, code: ErrorCode, now: Timestamp) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if !map.contains_key(client_id) && map.len() >= MAX_CLIENTS {
            // Forget the client whose last refusal is the oldest.
            let oldest = map
                .iter()
                .min_by_key(|(_, list)| list.back().map_or(0, |(at, _)| *at))
                .map(|(id, _)| id.clone());
            if let Some(id) = oldest {
                map.remove(&id);
            }
        }
        let list = map.entry(client_id.into()).or_default();
        if list.len() == PER_CLIENT {
            list.pop_front();
        }
        list.push_back((now, code));
    }

    /// A client's last refusals, newest first.
    pub(crate) fn of(&self, client_id: &str) -> Vec<(Timestamp, ErrorCode)> {
        let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        map.get(client_id)
            .map(|list| list.iter().rev().copied().collect())
            .unwrap_or_default()
    }

    /// The clients refused by a rate limit since `since`: id, how many such refusals are
    /// kept, and the last one's time; the most recent first.
    pub(crate) fn rate_limited_since(&self, since: Timestamp) -> Vec<(String, usize, Timestamp)> {
        let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let mut limited: Vec<_> = map
            .iter()
            .filter_map(|(id, list)| {
                let recent: Vec<_> = list
                    .iter()
                    .filter(|(at, code)| *at >= since && *code == ErrorCode::RateLimited)
                    .collect();
                let last = recent.last()?.0;
                Some((id.to_string(), recent.len(), last))
            })
            .collect();
        limited.sort_by_key(|(_, _, last)| std::cmp::Reverse(*last));
        limited
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_per_client_and_in_clients() {
        let refusals = Refusals::default();
        for i in 0..15 {
            refusals.record("a", ErrorCode::InvalidScope, i);
        }
        let kept = refusals.of("a");
        assert_eq!(kept.len(), PER_CLIENT);
        assert_eq!(kept[0].0, 14, "newest first");
        for i in 0..MAX_CLIENTS as i64 {
            refusals.record(&format!("c{i}"), ErrorCode::RateLimited, 100 + i);
        }
        // "a" (last at 14) was the oldest and made room.
        assert!(refusals.of("a").is_empty());
        assert_eq!(refusals.of("c0").len(), 1);
        let limited = refusals.rate_limited_since(100 + MAX_CLIENTS as i64 - 2);
        let ids: Vec<&str> = limited.iter().map(|(id, _, _)| id.as_str()).collect();
        assert_eq!(
            ids,
            [
                format!("c{}", MAX_CLIENTS - 1),
                format!("c{}", MAX_CLIENTS - 2)
            ]
        );
    }
}
