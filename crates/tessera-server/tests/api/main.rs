//! Integration tests of the server: the real server on port 0, real HTTP, a fresh SQLite
//! file per test.

mod admin;
mod assertion;
mod audit;
mod cluster;
mod console;
mod discovery;
mod disk_full;
mod dpop;
mod federation;
mod inflight;
mod limits;
mod outage;
mod promises;
mod redis_faults;
mod registry;
mod token;
mod tokens;
mod transport;
