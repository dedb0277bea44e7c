//! The memory of single-use values seen lately (RFC 9449 section 11.1 for DPoP proofs,
//! RFC 7523 section 3 for client assertions): bounded, so that a flood is refused rather
//! than forgotten, and shared out per holder, so that one holder cannot crowd out the rest.

use std::collections::hash_map::RandomState;
use std::collections::{HashMap, HashSet};
use std::hash::BuildHasher;
use std::sync::Mutex;

use aws_lc_rs::digest;
use thiserror::Error;

/// Why a value was not recorded as its first use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum ReplayError {
    /// It was seen before, within the memory's span.
    #[error("used before")]
    Replayed,
    /// Too many values were seen within the span, of this holder or of all, to remember
    /// another one.
    #[error("too many at once to remember another")]
    Busy,
}

/// The single-use values seen lately, by key and `jti`, in bounded memory: DPoP proofs
/// (RFC 9449 section 11.1) by their key's thumbprint, client assertions (RFC 7523 section 3)
/// by their client.
///
/// Two generations of 128-bit digests: a proof is a replay if either holds it. The current
/// generation becomes the previous one every `remember` seconds, so an entry is remembered
/// for `remember` to `2 * remember` seconds. For DPoP proofs `remember` is twice the `iat`
/// window ([`ReplayCache::new`]), as long as a proof with an `iat` at the window's far edge
/// stays acceptable. At most `capacity` entries per generation (a `HashSet<u128>`: at most about
/// 35 bytes each): past that, new ones are refused ([`ReplayError::Busy`]) rather than
/// forgotten, so replay protection never lapses. Size `capacity` for the sustained rate
/// times `remember`.
///
/// Each entry is charged to a holder: the key at an API, the client at the token endpoint
/// ([`ReplayCache::first_use_by`]). One holder may fill at most its share of a generation
/// (a sixteenth of the capacity unless [`ReplayCache::with_share`] says otherwise), so a
/// holder that sends proofs as fast as it can is refused alone, and the others go on.
#[derive(Debug)]
pub struct ReplayCache {
    span_secs: i64,
    capacity: usize,
    share: usize,
    /// Keys the per-holder counts; seeded per process, so holders cannot aim at one slot.
    hasher: RandomState,
    generations: Mutex<Generations>,
}

#[derive(Debug, Default)]
struct Generations {
    started: i64,
    current: HashSet<u128>,
    previous: HashSet<u128>,
    /// Entries of the current generation per holder (by the holder's hash).
    held: HashMap<u64, usize>,
}

impl ReplayCache {
    /// A cache for proofs accepted within `window_secs` of the clock, holding at most
    /// `capacity` proofs per generation.
    pub fn new(window_secs: i64, capacity: usize) -> Self {
        Self::remembering(2 * window_secs, capacity)
    }

    /// A cache that remembers each entry for at least `remember_secs`, holding at most
    /// `capacity` entries per generation.
    pub fn remembering(remember_secs: i64, capacity: usize) -> Self {
        Self {
            span_secs: remember_secs.max(1),
            capacity,
            share: (capacity / 16).max(1),
            hasher: RandomState::new(),
            generations: Mutex::new(Generations::default()),
        }
    }

    /// At most `share` entries per holder and generation.
    pub fn with_share(mut self, share: usize) -> Self {
        self.share = share.max(1);
        self
    }

    /// Records `jti` of `key` (a proof's key thumbprint, an assertion's client) at `now`,
    /// charged to the key: `Ok` the first time, `Replayed` after, `Busy` when the generation
    /// or the key's share of it is full.
    pub fn first_use(&self, key: &str, jti: &str, now: i64) -> Result<(), ReplayError> {
        self.first_use_by(key, key, jti, now)
    }

    /// Records `jti` of `key` at `now`, charged to `holder` (the client that sent it, say):
    /// `Ok` the first time, `Replayed` after, `Busy` when the generation or the holder's
    /// share of it is full.
    pub fn first_use_by(
        &self,
        holder: &str,
        key: &str,
        jti: &str,
        now: i64,
    ) -> Result<(), ReplayError> {
        let digest = digest(key, jti);
        let holder = self.hasher.hash_one(holder);
        let mut g = self.generations.lock().unwrap_or_else(|p| p.into_inner());
        if now >= g.started + 2 * self.span_secs {
            g.previous.clear();
            g.current.clear();
            g.held.clear();
            g.started = now;
        } else if now >= g.started + self.span_secs {
            g.previous = std::mem::take(&mut g.current);
            g.held.clear();
            g.started = now;
        }
        if g.previous.contains(&digest) || g.current.contains(&digest) {
            return Err(ReplayError::Replayed);
        }
        let held = g.held.get(&holder).copied().unwrap_or(0);
        if g.current.len() >= self.capacity || held >= self.share {
            return Err(ReplayError::Busy);
        }
        g.current.insert(digest);
        g.held.insert(holder, held + 1);
        Ok(())
    }
}

/// The first 128 bits of SHA-256 over the key and the `jti`: two proofs of different keys
/// (two assertions of different clients) may share a `jti`. What a shared memory (Redis)
/// remembers them by too.
pub fn digest(key: &str, jti: &str) -> u128 {
    let mut context = digest::Context::new(&digest::SHA256);
    context.update(key.as_bytes());
    context.update(&[0]);
    context.update(jti.as_bytes());
    let digest = context.finish();
    let mut first = [0u8; 16];
    first.copy_from_slice(&digest.as_ref()[..16]);
    u128::from_be_bytes(first)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proof_is_remembered_for_two_windows_and_then_forgotten() {
        let cache = ReplayCache::new(60, 10).with_share(10);
        assert_eq!(cache.first_use("k", "a", 1_000), Ok(()));
        assert_eq!(cache.first_use("k", "a", 1_000), Err(ReplayError::Replayed));
        // Another key may use the same jti.
        assert_eq!(cache.first_use("other", "a", 1_000), Ok(()));
        // After one rotation the proof is in the previous generation: still a replay.
        assert_eq!(cache.first_use("k", "b", 1_120), Ok(()));
        assert_eq!(cache.first_use("k", "a", 1_239), Err(ReplayError::Replayed));
        // Two rotations later it is gone; by then its iat is far outside the window.
        assert_eq!(cache.first_use("k", "c", 1_240), Ok(()));
        assert_eq!(cache.first_use("k", "a", 1_240), Ok(()));
        // A long quiet spell clears both.
        assert_eq!(cache.first_use("k", "b", 9_999), Ok(()));
        // A gap of one to two spans turns the generation over rather than clearing it.
        let cache = ReplayCache::new(60, 10).with_share(10);
        assert_eq!(cache.first_use("k", "a", 0), Ok(()));
        assert_eq!(cache.first_use("k", "a", 200), Err(ReplayError::Replayed));
    }

    #[test]
    fn an_assertion_cache_remembers_for_as_long_as_asked() {
        let cache = ReplayCache::remembering(420, 10).with_share(10);
        assert_eq!(cache.first_use("client", "a", 0), Ok(()));
        assert_eq!(
            cache.first_use("client", "a", 419),
            Err(ReplayError::Replayed)
        );
        assert_eq!(cache.first_use("client", "b", 420), Ok(()));
        assert_eq!(
            cache.first_use("client", "a", 839),
            Err(ReplayError::Replayed)
        );
        assert_eq!(cache.first_use("client", "a", 840), Ok(()));
    }

    #[test]
    fn one_holder_fills_only_its_own_share() {
        let cache = ReplayCache::new(60, 4).with_share(2);
        assert_eq!(cache.first_use_by("greedy", "k", "1", 0), Ok(()));
        assert_eq!(cache.first_use_by("greedy", "k2", "2", 0), Ok(()));
        // Its share is full, whichever key it uses; others go on.
        assert_eq!(
            cache.first_use_by("greedy", "k3", "3", 0),
            Err(ReplayError::Busy)
        );
        assert_eq!(cache.first_use_by("other", "k", "3", 0), Ok(()));
        // A replay is still a replay, whoever sends it.
        assert_eq!(
            cache.first_use_by("other", "k", "1", 0),
            Err(ReplayError::Replayed)
        );
        // The next generation gives the share back.
        assert_eq!(cache.first_use_by("greedy", "k3", "3", 120), Ok(()));
        // The default share is a sixteenth of the capacity.
        let cache = ReplayCache::new(60, 32);
        assert_eq!(cache.first_use("k", "1", 0), Ok(()));
        assert_eq!(cache.first_use("k", "2", 0), Ok(()));
        assert_eq!(cache.first_use("k", "3", 0), Err(ReplayError::Busy));
        assert_eq!(cache.first_use("j", "3", 0), Ok(()));
    }

    #[test]
    fn a_full_generation_refuses_rather_than_forgets() {
        let cache = ReplayCache::new(60, 2).with_share(2);
        assert_eq!(cache.first_use("k", "1", 0), Ok(()));
        assert_eq!(cache.first_use("k", "2", 0), Ok(()));
        assert_eq!(cache.first_use("k", "3", 0), Err(ReplayError::Busy));
        assert_eq!(cache.first_use("k", "1", 0), Err(ReplayError::Replayed));
        assert_eq!(cache.first_use("k", "3", 120), Ok(()));
    }
}
