//! The server's clock: [`tessera_proto::clock`], and the adapter through which the rate
//! limiters (GCRA, through `governor`) read it.

use std::time::Duration;

pub use tessera_proto::clock::{Clock, ManualClock};

/// [`Clock`] as `governor` reads time: its monotonic reading.
#[derive(Debug, Clone)]
pub(crate) struct LimiterClock(pub(crate) Clock);

impl governor::clock::Clock for LimiterClock {
    type Instant = Duration;

    fn now(&self) -> Duration {
        self.0.elapsed()
    }
}
