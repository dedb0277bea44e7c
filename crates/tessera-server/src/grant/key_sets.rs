//! Public keys registered by URL: a `private_key_jwt` client's `jwks_uri` (RFC 7523 section
//! 2.2), a trust policy's `jwks_uri` or its issuer's OpenID Connect discovery document.
//! They are fetched under [`crate::fetch`]'s rules, before the assertion they verify is
//! known to be genuine, so that fetching is shaped for requests anyone can send (client ids
//! are not secret):
//!
//! - keys are used for an hour; an unknown `kid` fetches them again at most every 30 s;
//! - one fetch per source at a time, whose outcome every request waiting on it shares
//!   (single flight); it runs apart from the requests, so one that goes away cancels nothing;
//! - a failed fetch is not tried again for 30 s, doubling with each failure in a row up to
//!   5 minutes, for every caller alike; the keys of the last success serve meanwhile;
//! - a request starts a fetch only while its caller has failures left for the client
//!   ([`AuthThrottle::allows_fetch`]), so a throttled caller causes no outbound request;
//! - a request gives its in-flight slot back while it waits ([`Slot::lend`]), so requests
//!   waiting on a slow host cannot take every slot from the other clients.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tessera_proto::jwk::{public_keys, PublicJwk};
use tokio::sync::watch;

use crate::clock::Clock;
use crate::fetch::{FetchError, Fetcher};
use crate::limits::{AuthThrottle, Busy, Slot};

/// Keys fetched are used this long before they are fetched again.
const KEYS_LIFETIME_SECS: i64 = 3600;
/// An unknown `kid` fetches a source's keys again at most this often.
const REFETCH_SECS: i64 = 30;
/// The wait after a first failure; it doubles with each failure in a row.
const FIRST_BACKOFF_SECS: i64 = 30;
/// The longest wait after failures.
const MAX_BACKOFF_SECS: i64 = 300;
/// The most sources whose keys are held.
const MAX_SOURCES: usize = 10_000;

/// Where a set of keys is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Source {
    /// A JWK Set URL.
    Jwks(String),
    /// An issuer whose OpenID Connect discovery document names its JWK Set.
    Discovery(String),
}

impl Source {
    /// The key under which its keys are held: one entry, and one fetch at a time, per URL.
    fn name(&self) -> String {
        match self {
            Self::Jwks(url) => format!("jwks {url}"),
            Self::Discovery(issuer) => format!("discovery {issuer}"),
        }
    }

    /// Fetches its JWK Set.
    async fn fetch(&self, http: &Fetcher) -> Result<Vec<u8>, FetchError> {
        match self {
            Self::Jwks(url) => http.get(url).await,
            Self::Discovery(issuer) => discovered_keys(http, issuer).await,
        }
    }
}

/// The JWK Set of `issuer`, found through its OpenID Connect discovery document
/// (`{issuer}/.well-known/openid-configuration`, OpenID Connect Discovery 1.0 section 4),
/// whose `issuer` must be the same; both fetched under the SSRF rules.
async fn discovered_keys(http: &Fetcher, issuer: &str) -> Result<Vec<u8>, FetchError> {
    let url = format!(
        "{}/.well-known/openid-configuration",
        issuer.trim_end_matches('/')
    );
    let document: Value =
        serde_json::from_slice(&http.get(&url).await?).map_err(|_| FetchError::Url)?;
    if document["issuer"].as_str() != Some(issuer) {
        return Err(FetchError::Url);
    }
    let jwks_uri = document["jwks_uri"].as_str().ok_or(FetchError::Url)?;
    http.get(jwks_uri).await
}

/// What one request lets fetching do on its behalf.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Outbound<'a> {
    /// The failure throttle, asked before this request starts a fetch.
    pub(crate) throttle: &'a AuthThrottle,
    /// The caller's address.
    pub(crate) source: Option<IpAddr>,
    /// The client the request names.
    pub(crate) client: &'a str,
    /// The request's in-flight slot, lent back while it waits on a fetch.
    pub(crate) slot: &'a Slot,
}

/// One source's keys and the state of fetching them.
#[derive(Debug)]
struct Entry {
    /// The keys of the last successful fetch; empty before one.
    keys: Arc<Vec<PublicJwk>>,
    /// When they were fetched; `None` before any fetch succeeded.
    at: Option<i64>,
    /// When the last fetch started, or ended if it is over.
    tried: i64,
    /// Failed fetches in a row, for the backoff.
    failures: u32,
    /// The fetch in flight, if any: it says `true` here when it is over.
    pending: Option<watch::Receiver<bool>>,
}

impl Entry {
    fn new() -> Self {
        Self {
            keys: Arc::default(),
            at: None,
            tried: i64::MIN / 2,
            failures: 0,
            pending: None,
        }
    }

    /// The keys last fetched, however old, if a fetch ever succeeded.
    fn last_keys(&self) -> Option<Arc<Vec<PublicJwk>>> {
        self.at.map(|_| self.keys.clone())
    }

    /// No fetch starts before this time, after failures in a row.
    fn retry_at(&self) -> i64 {
        match self.failures {
            0 => i64::MIN / 2,
            n => {
                let backoff = FIRST_BACKOFF_SECS << (n - 1).min(8);
                self.tried + backoff.min(MAX_BACKOFF_SECS)
            }
        }
    }
}

/// What a request does about a source's keys, decided under the lock.
enum Step {
    /// Use these (or none).
    Answer(Option<Arc<Vec<PublicJwk>>>),
    /// Wait for the fetch in flight.
    Wait(watch::Receiver<bool>),
    /// A fetch is due; the request may start it if its caller may cause one.
    Due(Option<Arc<Vec<PublicJwk>>>),
}

/// The keys of every source, held and fetched as the module says.
#[derive(Debug)]
pub(crate) struct KeySets {
    entries: Arc<Mutex<HashMap<String, Entry>>>,
    http: Fetcher,
}

impl KeySets {
    /// Fetches from private and loopback addresses only when `allow_private`.
    pub(crate) fn new(allow_private: bool) -> Self {
        Self {
            entries: Arc::default(),
            http: Fetcher::new(allow_private),
        }
    }

    /// The keys of `source`: held ones younger than an hour; else fetched (one fetch for
    /// everyone waiting, none while failures back off, where the last keys fetched serve).
    /// With `again` (an unknown `kid`), fetched anew if the last attempt is more than 30 s
    /// old; `None` otherwise, and the caller keeps what it had. `None` when there are none.
    /// [`Busy`] when the request waited and found no in-flight slot free after.
    pub(crate) async fn keys(
        &self,
        clock: &Clock,
        source: &Source,
        again: bool,
        outbound: Outbound<'_>,
    ) -> Result<Option<Arc<Vec<PublicJwk>>>, Busy> {
        let name = source.name();
        let mut may_start = false;
        let done = loop {
            let now = clock.now();
            let step = {
                let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
                match Self::step(entries.get(&name), now, again) {
                    Step::Due(_) if may_start => {
                        Step::Wait(self.start(&mut entries, &name, source, clock, now))
                    }
                    step => step,
                }
            };
            match step {
                Step::Answer(keys) => return Ok(keys),
                Step::Wait(done) => break done,
                Step::Due(last) => {
                    // Asked outside the lock (it may ask Redis); then decided again, since
                    // another request may have started the fetch meanwhile.
                    if !outbound
                        .throttle
                        .allows_fetch(outbound.source, outbound.client)
                        .await
                    {
                        return Ok(if again { None } else { last });
                    }
                    may_start = true;
                }
            }
        };
        outbound
            .slot
            .lend(async move {
                let mut done = done;
                // An error: the fetch's task ended without saying so; it is over all the same.
                let _ = done.wait_for(|over| *over).await;
            })
            .await?;
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        Ok(entries.get(&name).and_then(Entry::last_keys))
    }

    /// What to do about the entry `entry` at `now`.
    fn step(entry: Option<&Entry>, now: i64, again: bool) -> Step {
        let Some(entry) = entry else {
            return Step::Due(None);
        };
        let fresh = entry.at.is_some_and(|at| now - at < KEYS_LIFETIME_SECS);
        if !again && fresh {
            return Step::Answer(entry.last_keys());
        }
        if let Some(pending) = &entry.pending {
            return Step::Wait(pending.clone());
        }
        let last = if again { None } else { entry.last_keys() };
        if (again && now - entry.tried < REFETCH_SECS) || now < entry.retry_at() {
            return Step::Answer(last);
        }
        Step::Due(last)
    }

    /// Starts fetching `source` on a task of its own, which records the outcome under
    /// `name` and then says it is over on the receiver returned.
    fn start(
        &self,
        entries: &mut HashMap<String, Entry>,
        name: &str,
        source: &Source,
        clock: &Clock,
        now: i64,
    ) -> watch::Receiver<bool> {
        if entries.len() >= MAX_SOURCES && !entries.contains_key(name) {
            // Bounded: the source tried longest ago makes room.
            if let Some(oldest) = entries
                .iter()
                .filter(|(_, e)| e.pending.is_none())
                .min_by_key(|(_, e)| e.tried)
                .map(|(n, _)| n.clone())
            {
                entries.remove(&oldest);
            }
        }
        let (over, done) = watch::channel(false);
        let entry = entries.entry(name.to_owned()).or_insert_with(Entry::new);
        entry.pending = Some(done.clone());
        entry.tried = now;
        let (entries, http, clock) = (self.entries.clone(), self.http.clone(), clock.clone());
        let (name, source) = (name.to_owned(), source.clone());
        tokio::spawn(async move {
            let answer = source.fetch(&http).await;
            let now = clock.now();
            let mut entries = entries.lock().unwrap_or_else(|p| p.into_inner());
            let entry = entries.entry(name).or_insert_with(Entry::new);
            entry.pending = None;
            entry.tried = now;
            match answer {
                Ok(body) => {
                    entry.keys = Arc::new(
                        std::str::from_utf8(&body)
                            .map(public_keys)
                            .unwrap_or_default(),
                    );
                    entry.at = Some(now);
                    entry.failures = 0;
                }
                Err(e) => {
                    entry.failures = entry.failures.saturating_add(1);
                    tracing::warn!(
                        key_set = %source,
                        error = %e,
                        retry_in_secs = entry.retry_at() - now,
                        "cannot fetch a jwks_uri"
                    );
                }
            }
            drop(entries);
            let _ = over.send(true);
        });
        done
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Jwks(url) => f.write_str(url),
            Self::Discovery(issuer) => write!(f, "discovery of {issuer}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the log names a key source by.
    #[test]
    fn a_source_is_named_by_its_url_or_its_issuer() {
        let jwks = Source::Jwks("https://keys.example/jwks.json".into());
        assert_eq!(jwks.to_string(), "https://keys.example/jwks.json");
        let discovery = Source::Discovery("https://issuer.example".into());
        assert_eq!(discovery.to_string(), "discovery of https://issuer.example");
    }

    #[test]
    fn failures_back_off_from_30_seconds_to_5_minutes() {
        let mut entry = Entry::new();
        entry.tried = 1_000;
        let waits: Vec<i64> = (1..=7)
            .map(|n| {
                entry.failures = n;
                entry.retry_at() - 1_000
            })
            .collect();
        assert_eq!(waits, [30, 60, 120, 240, 300, 300, 300]);
        entry.failures = u32::MAX;
        assert_eq!(entry.retry_at() - 1_000, 300);
    }
}
