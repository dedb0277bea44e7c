//! The registry held in memory: plans, clients and signing keys, so that issuing a token
//! touches no database.
//!
//! Clients are many (a million and more): they live in [`Clients`], a map in shards that a
//! change updates in place, one entry at a time, never copied whole. Plans and keys are few:
//! they form a snapshot, [`Registry`], swapped whole when one of them changes. A client names
//! its plan by [`PlanSlot`], looked up in the snapshot at each request, so that a plan change
//! reaches every client of the plan at once without touching any of them.
//!
//! [`Live`] keeps both fresh. Every sync interval it reads the store's change log
//! ([`Store::changes_since`](tessera_store::Store::changes_since)) after the last change it applied and applies each changed row:
//! one disabled client costs one row, whatever the number of clients. An unknown client id of
//! the generated shape triggers such a read at once ([`Live::refresh_for_unknown`]), so that
//! a client created a moment ago elsewhere is served; one read at a time, on a task of its
//! own, and none while the store does not answer. A full reload runs only as a safety net
//! ([`Live::reload`]), in pages of clients replaced in place, so that it never holds a second
//! copy of the registry.
//!
//! One file each: the client map (`clients.rs`), the plan and key snapshot (`snapshot.rs`)
//! and the sync engine (`sync.rs`).

mod clients;
mod snapshot;
mod sync;

use tessera_store::StoreError;
use thiserror::Error;

use crate::limits::redis::ConnectError;

pub(crate) use clients::ClientKey;
pub use clients::{ClientEntry, Clients, HeldCredential};
pub use snapshot::{PlanSlot, Registry};
pub use sync::{Live, SyncCounts, Synced, Trigger, CHANGE_RETENTION, UNKNOWN_READ_WAIT};

/// Why the registry could not be loaded.
#[derive(Debug, Error)]
pub enum LoadError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The shared rate limiter could not be reached.
    #[error("rate limiter: {0}")]
    Limiter(#[from] ConnectError),
    /// The console's single sign-on could not be set up (its secret's file).
    #[error("console sign-in: {0}")]
    ConsoleSignIn(String),
}
