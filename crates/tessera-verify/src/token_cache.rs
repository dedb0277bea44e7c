//! The memory of verified tokens: a client reuses its token until it expires (Tessera's live
//! an hour), so an API sees the same bytes thousands of times, and after the first time a
//! lookup can stand in for the signature check (RFC 7515 section 5.2 steps 1 to 8 and the
//! issuer check of RFC 9068 section 4 step 3 gave the same answer for the same bytes).
//!
//! What is remembered and what is not:
//!
//! - An entry keeps the whole token, and a lookup compares it byte for byte: a token that
//!   differs anywhere (header, payload or signature) is never served from the cache. The
//!   lookup hashes only the token's last 32 characters, the end of its signature, which is
//!   unpredictable and different for every token issued, with a hasher keyed at random:
//!   SipHash over the whole token would cost a third of a hit. A token crafted to share a
//!   cached token's end costs one comparison more and then the full check.
//! - Only tokens that passed every check are inserted: a forged token never gets in, so a
//!   flood of them costs what it cost before and evicts nothing.
//! - An entry holds the claims and the key that verified them. It is served only while that
//!   key is still published under its `kid` (a refresh that retires the key ends it), and the
//!   checks that depend on the moment or the caller run on every hit, as on a first
//!   verification: `exp` (RFC 7519 section 4.1.4) and `nbf` (4.1.5) with the leeway, by the
//!   verifier's clock, and the audience (RFC 9068 section 4 step 4). What the extractors check
//!   per request (the scope, a DPoP proof, a client certificate) is outside the cache.
//! - Bounded: two generations per shard. New entries go into the current generation; when it
//!   is full it becomes the previous one and the old previous one is dropped. A hit in the
//!   previous generation moves the entry back into the current one, so a token in use
//!   survives every turnover and a token unused for two generations goes.

use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher, RandomState};
use std::sync::{Arc, Mutex, PoisonError};

use tessera_proto::AccessTokenClaims;

use crate::jwks::VerifyingKey;

/// How many characters at the end of a token the lookup hashes.
const HASHED_TAIL: usize = 32;

/// What a successful verification produced. No `Debug`: it holds a token.
pub(crate) struct Entry {
    /// The token, compared in full at each lookup.
    pub token: Box<str>,
    /// The claims, with `iss` checked; the time window and audience are checked at each use.
    /// Shared with every [`crate::VerifiedToken`] made of them, so a hit copies nothing.
    pub claims: Arc<AccessTokenClaims>,
    /// The key whose signature verified, shared with the key set it came from.
    pub key: Arc<VerifyingKey>,
}

/// What the cache of verified tokens has done since the verifier was built
/// ([`crate::Verifier::token_cache_stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TokenCacheStats {
    /// Verifications served from the cache (the signature was not checked again).
    pub hits: u64,
    /// Verifications that looked and did not find a usable entry: a token seen for the first
    /// time, evicted, or whose key was retired.
    pub misses: u64,
    /// Tokens remembered now.
    pub entries: usize,
    /// The most tokens remembered at once; 0 when the cache is off.
    pub capacity: usize,
}

/// Shards, to spread the locks of many worker threads. A power of two.
const SHARDS: usize = 32;

/// The cache. Memory is at most `capacity` entries; see
/// [`crate::VerifierBuilder::token_cache_capacity`] for their size.
pub(crate) struct TokenCache {
    /// Keyed at random per cache, so where a token lands cannot be worked out from outside.
    hasher: RandomState,
    shards: Box<[Mutex<Shard>]>,
    /// Entries per generation in each shard; 0 turns the cache off.
    per_generation: usize,
}

/// One generation: entries by the cache's own keyed hash of their token, which the map
/// takes as it is ([`Prehashed`]).
type Generation = HashMap<u64, Arc<Entry>, BuildHasherDefault<Prehashed>>;

/// The hasher of a [`Generation`]: its keys are already a keyed hash of the token, so hashing
/// them again (SipHash, `HashMap`'s default) would only cost time on every lookup (issue 31
/// item 4). Turned by half, so that neither the map's bucket index (its low bits) nor its
/// tags (its top seven) are the bits that chose the shard, which all keys of a shard share.
#[derive(Default)]
struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write_u64(&mut self, hash: u64) {
        self.0 = hash.rotate_left(32);
    }

    /// Not taken by a `u64` key; folded in all the same, so that any other key still hashes.
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
}

#[derive(Default)]
struct Shard {
    current: Generation,
    previous: Generation,
    /// Counted under the shard's lock rather than in shared atomics, which every core would
    /// fight over.
    hits: u64,
    misses: u64,
}

impl TokenCache {
    /// A cache of at most `capacity` tokens (rounded down to whole generations); 0 for none.
    pub(crate) fn new(capacity: usize) -> Self {
        // Small caches in one shard, so that a capacity of a few entries is still one.
        let shards = if capacity >= 2 * SHARDS * 64 {
            SHARDS
        } else {
            1
        };
        Self {
            hasher: RandomState::new(),
            shards: (0..shards).map(|_| Mutex::default()).collect(),
            per_generation: capacity / (2 * shards),
        }
    }

    pub(crate) fn is_enabled(&self) -> bool {
        self.per_generation > 0
    }

    /// Where `token` is filed: a hash of its end, and the shard that holds it.
    fn slot(&self, token: &str) -> (u64, std::sync::MutexGuard<'_, Shard>) {
        let tail = &token.as_bytes()[token.len().saturating_sub(HASHED_TAIL)..];
        let hash = self.hasher.hash_one(tail);
        // The top bits pick the shard; the maps hash the whole value again.
        let shard = (hash >> 58) as usize % self.shards.len();
        let guard = self.shards[shard]
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        (hash, guard)
    }

    /// The entry of exactly `token`, if there is one and `usable` says its key still stands;
    /// an entry whose key does not is removed. An entry for other bytes filed in the same
    /// place stays where it is.
    pub(crate) fn get(
        &self,
        token: &str,
        usable: impl FnOnce(&Entry) -> bool,
    ) -> Option<Arc<Entry>> {
        let (hash, mut guard) = self.slot(token);
        let shard = &mut *guard;
        let exact = |entry: &&Arc<Entry>| *entry.token == *token;
        let (entry, in_current) = match shard.current.get(&hash).filter(exact) {
            Some(entry) => (Arc::clone(entry), true),
            None => match shard.previous.get(&hash).filter(exact) {
                Some(entry) => (Arc::clone(entry), false),
                None => {
                    shard.misses += 1;
                    return None;
                }
            },
        };
        if !usable(&entry) {
            if in_current {
                shard.current.remove(&hash);
            } else {
                shard.previous.remove(&hash);
            }
            shard.misses += 1;
            return None;
        }
        shard.hits += 1;
        if !in_current {
            // Second chance: a token in use moves back into the current generation.
            let dropped = shard.insert(hash, Arc::clone(&entry), self.per_generation);
            drop(guard);
            drop(dropped);
        }
        Some(entry)
    }

    /// Remembers a token that passed every check.
    pub(crate) fn insert(&self, entry: Entry) {
        if !self.is_enabled() {
            return;
        }
        let (hash, mut shard) = self.slot(&entry.token);
        let dropped = shard.insert(hash, Arc::new(entry), self.per_generation);
        drop(shard);
        // The old generation is freed here, after the lock is released.
        drop(dropped);
    }

    pub(crate) fn stats(&self) -> TokenCacheStats {
        let mut stats = TokenCacheStats {
            capacity: self.per_generation * 2 * self.shards.len(),
            ..TokenCacheStats::default()
        };
        for shard in &*self.shards {
            let shard = shard.lock().unwrap_or_else(PoisonError::into_inner);
            stats.hits += shard.hits;
            stats.misses += shard.misses;
            stats.entries += shard.current.len() + shard.previous.len();
        }
        stats
    }
}

impl Shard {
    /// Inserts into the current generation, turning the generations over first when it is
    /// full; returns the generation dropped, for the caller to free outside the lock.
    fn insert(
        &mut self,
        hash: u64,
        entry: Arc<Entry>,
        per_generation: usize,
    ) -> Option<Generation> {
        let mut dropped = None;
        if self.current.len() >= per_generation && !self.current.contains_key(&hash) {
            let full = std::mem::replace(
                &mut self.current,
                Generation::with_capacity_and_hasher(per_generation, BuildHasherDefault::default()),
            );
            dropped = Some(std::mem::replace(&mut self.previous, full));
        }
        self.previous.remove(&hash);
        self.current.insert(hash, entry);
        dropped
    }
}

/// Counts only: the cache holds claims, which are not for logs.
impl std::fmt::Debug for TokenCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenCache")
            .field("stats", &self.stats())
            .finish()
    }
}
