//! The clients in memory, a million and more: a map in shards, each behind its own lock,
//! that a change updates in place one entry at a time and that gives memory back after
//! mass deletes. An entry holds what the token endpoint needs, in 48 bytes.

use std::collections::hash_map::{Entry, HashMap};
use std::sync::RwLock;

use tessera_store::{AuthMethod, CertificateMatch, Client, Credential, KeySource, Timestamp};

use super::snapshot::PlanSlot;

/// Shards of the client map: a change locks one shard for an instant, and a shard that grows
/// reallocates only its own share of the clients.
const SHARDS: usize = 64;

/// A client as the token endpoint needs it, in 48 bytes and no allocation of its own for a
/// client with a secret (the common case). `Debug` leaves the hashes out.
pub struct ClientEntry {
    /// HMAC-SHA-256 of the current secret. When [`Extra::credential`] is set, the client's
    /// credential is that instead and this is zero.
    hash: [u8; 32],
    /// What few clients have: a certificate or keys, a previous secret.
    extra: Option<Box<Extra>>,
    /// Its plan, in the registry snapshot.
    pub plan: PlanSlot,
    /// How it must authenticate.
    pub auth_method: AuthMethod,
    /// Whether it may get tokens.
    pub enabled: bool,
    /// The mark of the last full reload that read it, or that a change wrote: the reload
    /// removes what it did not mark (deleted without a change it read). One byte where the
    /// layout has padding, so it costs nothing.
    mark: u8,
}

/// The rarer parts of a client, behind one pointer.
struct Extra {
    /// A credential other than a secret whose hash is 32 bytes long.
    credential: Option<Held>,
    /// HMAC of the previous secret and when it stops working.
    previous_secret: Option<(Box<[u8]>, Timestamp)>,
    /// Its organization (issue 28), named in its tokens.
    org: Option<std::sync::Arc<str>>,
}

/// A credential [`ClientEntry::hash`] cannot hold.
enum Held {
    /// A secret's hash that is not 32 bytes long.
    Secret(Box<[u8]>),
    /// What the client certificate must match (RFC 8705 section 2).
    Certificate(CertificateMatch),
    /// Where a `private_key_jwt` client's keys are (RFC 7523 section 2.2).
    Keys(KeySource),
}

/// A client's [`tessera_store::Credential`] as the registry holds it, borrowed.
#[derive(Debug, Clone, Copy)]
pub enum HeldCredential<'a> {
    /// HMAC of the current secret; HMAC of the previous one and when it stops working.
    Secret {
        /// The current secret's.
        hash: &'a [u8],
        /// The previous secret's, after a rotation, and when it stops working.
        previous: Option<(&'a [u8], Timestamp)>,
    },
    /// What the client certificate must match.
    Certificate(&'a CertificateMatch),
    /// Where the client's keys are.
    Keys(&'a KeySource),
}

impl ClientEntry {
    pub(super) fn new(client: Client, plan: PlanSlot, mark: u8) -> Self {
        let (hash, credential, previous_secret) = match client.credential {
            Credential::Secret { hash, previous } => {
                let previous = previous.map(|(hash, until)| (hash.into_boxed_slice(), until));
                match <[u8; 32]>::try_from(hash.as_slice()) {
                    Ok(hash) => (hash, None, previous),
                    Err(_) => ([0; 32], Some(Held::Secret(hash.into())), previous),
                }
            }
            Credential::Certificate(certificate) => {
                ([0; 32], Some(Held::Certificate(certificate)), None)
            }
            Credential::Keys(keys) => ([0; 32], Some(Held::Keys(keys)), None),
        };
        let org: Option<std::sync::Arc<str>> = client.org.as_deref().map(Into::into);
        let extra =
            (credential.is_some() || previous_secret.is_some() || org.is_some()).then(|| {
                Box::new(Extra {
                    credential,
                    previous_secret,
                    org,
                })
            });
        Self {
            hash,
            extra,
            plan,
            auth_method: client.auth_method,
            enabled: client.enabled && client.org_enabled,
            mark,
        }
    }

    /// Its organization, if any.
    pub fn org(&self) -> Option<&std::sync::Arc<str>> {
        self.extra.as_deref()?.org.as_ref()
    }

    /// What the client proves itself with.
    pub fn credential(&self) -> HeldCredential<'_> {
        let extra = self.extra.as_deref();
        let previous = || {
            let (hash, until) = extra?.previous_secret.as_ref()?;
            Some((&**hash, *until))
        };
        match extra.and_then(|extra| extra.credential.as_ref()) {
            None => HeldCredential::Secret {
                hash: &self.hash,
                previous: previous(),
            },
            Some(Held::Secret(hash)) => HeldCredential::Secret {
                hash,
                previous: previous(),
            },
            Some(Held::Certificate(certificate)) => HeldCredential::Certificate(certificate),
            Some(Held::Keys(keys)) => HeldCredential::Keys(keys),
        }
    }
}

impl std::fmt::Debug for ClientEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let previous_secret_until = match self.credential() {
            HeldCredential::Secret { previous, .. } => previous.map(|(_, until)| until),
            _ => None,
        };
        f.debug_struct("ClientEntry")
            .field("plan", &self.plan)
            .field("secret_hash", &"[redacted]")
            .field("previous_secret_until", &previous_secret_until)
            .field("auth_method", &self.auth_method)
            .field("enabled", &self.enabled)
            .finish()
    }
}

/// A client id as a map key: inline when it is as short as generated ids are (`tc_` and 22
/// characters), so that a client costs no allocation for its id; boxed otherwise. Hashed and
/// compared as its bytes, so that a map of them is searched by `&[u8]`.
#[derive(Clone)]
pub(crate) enum ClientKey {
    Inline { len: u8, bytes: [u8; INLINE_ID] },
    Boxed(Box<str>),
}

/// The longest id held inline: generated ids are 25 bytes.
const INLINE_ID: usize = 30;

impl ClientKey {
    pub(crate) fn new(id: &str) -> Self {
        match u8::try_from(id.len()) {
            Ok(len) if id.len() <= INLINE_ID => {
                let mut bytes = [0; INLINE_ID];
                bytes[..id.len()].copy_from_slice(id.as_bytes());
                Self::Inline { len, bytes }
            }
            _ => Self::Boxed(id.into()),
        }
    }

    fn as_bytes(&self) -> &[u8] {
        match self {
            Self::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Self::Boxed(id) => id.as_bytes(),
        }
    }

    /// The id. Made from a `&str`, so always UTF-8.
    pub(crate) fn as_str(&self) -> &str {
        match self {
            Self::Inline { .. } => std::str::from_utf8(self.as_bytes()).unwrap_or_default(),
            Self::Boxed(id) => id,
        }
    }
}

impl std::fmt::Debug for ClientKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq for ClientKey {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for ClientKey {}

impl std::hash::Hash for ClientKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        // As `[u8]` hashes, which `Borrow` requires.
        self.as_bytes().hash(state);
    }
}

impl std::borrow::Borrow<[u8]> for ClientKey {
    fn borrow(&self) -> &[u8] {
        self.as_bytes()
    }
}

/// The shard of `id`: FNV-1a over its bytes, with a per-process seed. Only a lock stripe,
/// never a search, depends on it (each shard's map hashes with its own random key), so a
/// cheap function serves; the maps' SipHash is paid once per search, not twice.
fn shard_of(id: &[u8], seed: u64) -> usize {
    let hash = id
        .iter()
        .copied()
        .fold(0xcbf2_9ce4_8422_2325 ^ seed, |hash, byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
        });
    // The high bits mix best.
    (hash >> 32) as usize % SHARDS
}

/// One shard of the clients: a map by id, and the room its table has.
#[derive(Default)]
struct Shard {
    map: HashMap<ClientKey, ClientEntry>,
    /// How many clients the map's table holds before it grows: what its memory is sized
    /// by. Kept here because the map's own `capacity()` leaves out the slots that removed
    /// entries left marked as deleted, and so understates the table after deletes, just
    /// when it matters. Exact after the map grows or is rebuilt, which clears those marks.
    room: usize,
}

impl Shard {
    /// Notes the table's room after it may have grown.
    fn grown(&mut self) {
        self.room = self.room.max(self.map.capacity());
    }

    /// Gives memory back once the shard holds under a quarter of its room (clients deleted
    /// en masse, a bulk import undone): the table is rebuilt with room for twice what it
    /// holds. A map never shrinks by itself, so the memory of a peak would stay until
    /// restart. The gap between growing (when full) and shrinking (at a quarter) keeps a
    /// shard whose size hovers from being rebuilt back and forth: each rebuild, O(its
    /// clients), follows at least as many removals, and holds the lock of this shard only.
    fn shrink_if_sparse(&mut self) {
        if self.map.len() < self.room / 4 {
            self.map.shrink_to(self.map.len() * 2);
            self.room = self.map.capacity();
        }
    }
}

/// The clients by id, in shards each behind its own lock: readers of one shard never wait
/// for each other, and a change holds one shard's lock only while it writes one entry.
pub struct Clients {
    shards: Box<[RwLock<Shard>]>,
    /// Mixed into the shard choice, per process.
    seed: u64,
}

impl std::fmt::Debug for Clients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Clients").field("len", &self.len()).finish()
    }
}

impl Default for Clients {
    fn default() -> Self {
        Self {
            shards: (0..SHARDS).map(|_| RwLock::default()).collect(),
            seed: std::hash::BuildHasher::hash_one(
                &std::collections::hash_map::RandomState::new(),
                0u8,
            ),
        }
    }
}

impl Clients {
    fn shard(&self, id: &[u8]) -> &RwLock<Shard> {
        &self.shards[shard_of(id, self.seed)]
    }

    /// Calls `read` with the client `id`, under its shard's read lock; `None` if unknown.
    /// `read` must be quick: it holds up changes to the shard (never the other readers).
    pub fn with<R>(&self, id: &str, read: impl FnOnce(&ClientEntry) -> R) -> Option<R> {
        let shard = self
            .shard(id.as_bytes())
            .read()
            .unwrap_or_else(|p| p.into_inner());
        shard.map.get(id.as_bytes()).map(read)
    }

    /// How many clients there are.
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.read().unwrap_or_else(|p| p.into_inner()).map.len())
            .sum()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many clients the shards' tables hold before they grow: what their memory is
    /// sized by (an 80-byte slot each, see the tests), whatever they hold now.
    pub fn capacity(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.read().unwrap_or_else(|p| p.into_inner()).room)
            .sum()
    }

    pub(super) fn put(&self, id: ClientKey, entry: ClientEntry) {
        let mut shard = self
            .shard(id.as_bytes())
            .write()
            .unwrap_or_else(|p| p.into_inner());
        // One search, and room made only for a new key: `HashMap::insert` makes room
        // before it searches, so a reload that puts every client again would double a
        // shard that happens to be full. An existing key is kept.
        match shard.map.entry(id) {
            Entry::Occupied(mut held) => {
                held.insert(entry);
            }
            Entry::Vacant(room) => {
                room.insert(entry);
                shard.grown();
            }
        }
    }

    /// Makes room for `more` clients beyond those held, spread over the shards, so that a
    /// first load grows no shard step by step.
    pub(super) fn reserve(&self, more: usize) {
        for shard in self.shards.iter() {
            let mut shard = shard.write().unwrap_or_else(|p| p.into_inner());
            shard.map.reserve(more / SHARDS + 1);
            shard.grown();
        }
    }

    pub(super) fn remove(&self, id: &str) {
        let mut shard = self
            .shard(id.as_bytes())
            .write()
            .unwrap_or_else(|p| p.into_inner());
        if shard.map.remove(id.as_bytes()).is_some() {
            shard.shrink_if_sparse();
        }
    }

    /// Removes every client not marked `mark`; returns how many.
    pub(super) fn sweep(&self, mark: u8) -> usize {
        self.shards
            .iter()
            .map(|shard| {
                let mut shard = shard.write().unwrap_or_else(|p| p.into_inner());
                let before = shard.map.len();
                shard.map.retain(|_, entry| entry.mark == mark);
                shard.shrink_if_sparse();
                before - shard.map.len()
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Memory per client matters at a million clients: a generated id and a secret's hash
    /// are held inline, the reload mark rides in padding, and the plan is a slot, not a
    /// pointer: 80 bytes a map slot, nothing on the heap.
    #[test]
    fn a_client_costs_an_80_byte_map_slot() {
        assert_eq!(std::mem::size_of::<ClientEntry>(), 48);
        assert_eq!(std::mem::size_of::<ClientKey>(), 32);
        let generated = crate::secrets::new_client_id();
        assert!(matches!(
            ClientKey::new(generated.as_str()),
            ClientKey::Inline { .. }
        ));
        let long = "x".repeat(INLINE_ID + 1);
        assert_eq!(ClientKey::new(&long).as_bytes(), long.as_bytes());
        assert!(matches!(ClientKey::new(&long), ClientKey::Boxed(_)));
        // Either way, `Debug` shows the id (not secret: RFC 6749 section 2.2).
        assert_eq!(
            format!("{:?}", ClientKey::new(generated.as_str())),
            generated.as_str()
        );
        assert_eq!(format!("{:?}", ClientKey::new(&long)), long);
    }

    fn entry(mark: u8) -> ClientEntry {
        ClientEntry {
            hash: [0; 32],
            extra: None,
            plan: PlanSlot(0),
            auth_method: AuthMethod::ClientSecretBasic,
            enabled: true,
            mark,
        }
    }

    /// A shard gives memory back after deletes, removed one by one (the change log) or
    /// swept (a full reload), and only once under a quarter full: a shard near its size is
    /// not rebuilt at each change.
    #[test]
    fn shards_shrink_after_mass_deletes_but_not_at_each_removal() {
        let clients = Clients::default();
        let ids: Vec<String> = (0..10_000)
            .map(|_| crate::secrets::new_client_id().as_str().to_owned())
            .collect();
        for id in &ids {
            clients.put(ClientKey::new(id), entry(1));
        }
        let peak = clients.capacity();
        assert!(peak >= 10_000, "{peak}");
        // A quarter removed: no shard is under a quarter full, nothing is rebuilt.
        for id in &ids[..2_500] {
            clients.remove(id);
        }
        assert_eq!(clients.capacity(), peak);
        for id in &ids[2_500..9_000] {
            clients.remove(id);
        }
        let shrunk = clients.capacity();
        assert_eq!(clients.len(), 1_000);
        assert!(
            shrunk <= 4 * 1_000 + 4 * SHARDS,
            "{shrunk} slots for 1,000 of {peak}"
        );
        // The rest swept by a reload that marked none of them.
        assert_eq!(clients.sweep(2), 1_000);
        assert_eq!(clients.capacity(), 0);
    }

    /// A shard is rebuilt once it holds under a quarter of its room, not at a quarter, and
    /// then with room for twice what it holds, so that the next inserts do not grow it again.
    #[test]
    fn a_shard_shrinks_under_a_quarter_to_room_for_twice_what_it_holds() {
        let mut shard = Shard::default();
        let ids: Vec<String> = (0..64).map(|i| format!("tc_{i}")).collect();
        for id in &ids {
            shard.map.insert(ClientKey::new(id), entry(1));
            shard.grown();
        }
        let peak = shard.room;
        let quarter = peak / 4;
        assert!(quarter > 0 && quarter < ids.len(), "{peak}");
        // Down to a quarter exactly: not rebuilt.
        for id in &ids[quarter..] {
            shard.map.remove(id.as_bytes());
            shard.shrink_if_sparse();
        }
        assert_eq!(shard.map.len(), quarter);
        assert_eq!(shard.room, peak);
        // One fewer: rebuilt, with room for twice what is left.
        shard.map.remove(ids[quarter - 1].as_bytes());
        shard.shrink_if_sparse();
        let left = shard.map.len();
        assert!(shard.room < peak, "{} of {peak}", shard.room);
        assert!(shard.room >= 2 * left, "{} for {left}", shard.room);
    }

    /// The shards are lock stripes: generated ids spread over all of them, none holding
    /// more than twice or less than half its share (64,000 ids, a thousand a shard on
    /// average; the binomial spread is about 3%), whatever the process's seed.
    #[test]
    fn ids_spread_evenly_over_the_shards() {
        for seed in [0, 1, u64::MAX, 0x9e37_79b9_7f4a_7c15] {
            let mut counts = [0_usize; SHARDS];
            for _ in 0..SHARDS * 1000 {
                let id = crate::secrets::new_client_id();
                counts[shard_of(id.as_str().as_bytes(), seed)] += 1;
            }
            let (least, most) = (counts.iter().min(), counts.iter().max());
            assert!(
                least >= Some(&500) && most <= Some(&2000),
                "seed {seed}: {counts:?}"
            );
        }
    }

    /// `reserve` makes room for what a first load will put, spread over the shards, and
    /// not many times more: the load then grows no shard step by step.
    #[test]
    fn reserve_makes_room_for_what_it_is_asked_and_not_much_more() {
        let clients = Clients::default();
        assert_eq!(clients.capacity(), 0);
        clients.reserve(64_000);
        let room = clients.capacity();
        assert!((64_000..=4 * 64_000).contains(&room), "{room}");
        // The load that follows fits in that room.
        for _ in 0..32_000 {
            let id = crate::secrets::new_client_id();
            clients.put(ClientKey::new(id.as_str()), entry(1));
        }
        assert_eq!(clients.capacity(), room);
    }

    /// Putting a client again (a full reload) makes no room: a shard that is full to its
    /// last slot keeps its size.
    #[test]
    fn putting_a_held_client_again_does_not_grow_a_full_shard() {
        let clients = Clients::default();
        clients.reserve(1);
        let room = clients.capacity() / SHARDS;
        // The share of one client per shard rounds up: every shard has room.
        assert!(room > 0, "{room}");
        // Fill one shard to its last slot, with ids that land in it (one in 64 does).
        let ids: Vec<_> = std::iter::repeat_with(crate::secrets::new_client_id)
            .take(100_000)
            .filter(|id| shard_of(id.as_str().as_bytes(), clients.seed) == 0)
            .take(room)
            .collect();
        assert_eq!(ids.len(), room, "ids land in shard 0");
        for id in &ids {
            clients.put(ClientKey::new(id.as_str()), entry(1));
        }
        let full = clients.capacity();
        for id in &ids {
            clients.put(ClientKey::new(id.as_str()), entry(2));
        }
        assert_eq!(clients.capacity(), full);
        assert_eq!(clients.sweep(2), 0, "each put again, with its new mark");
    }

    /// `Debug` shows when a previous secret stops working, never a hash.
    #[test]
    fn debug_shows_no_hash() {
        let mut entry = entry(1);
        entry.hash = [0xab; 32];
        entry.extra = Some(Box::new(Extra {
            credential: None,
            previous_secret: Some((vec![0xcd; 32].into(), 1_800_000_000)),
            org: None,
        }));
        let shown = format!("{entry:?}");
        assert!(shown.contains("\"[redacted]\""), "{shown}");
        assert!(
            shown.contains("previous_secret_until: Some(1800000000)"),
            "{shown}"
        );
        assert!(!shown.contains("171") && !shown.contains("205"), "{shown}");
    }

    /// A sweep removes what its reload did not mark, says how many it removed, and leaves
    /// the rest; `Debug` says how many there are.
    #[test]
    fn a_sweep_counts_what_it_removed() {
        let clients = Clients::default();
        for (i, mark) in [1, 1, 1, 2, 2].into_iter().enumerate() {
            clients.put(ClientKey::new(&format!("tc_{i}")), entry(mark));
        }
        assert_eq!(clients.sweep(2), 3);
        assert_eq!(clients.len(), 2);
        assert!(clients.with("tc_3", |_| ()).is_some());
        assert_eq!(format!("{clients:?}"), "Clients { len: 2 }");
    }
}
