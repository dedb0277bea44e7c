//! Integration tests of the server: the real server on port 0, real HTTP, a fresh SQLite
//! file per test.

mod admin;
mod api_limits;
mod assertion;
mod audit;
mod cluster;
mod console;
mod console_portal;
mod console_sso;
mod control_plane;
mod discovery;
mod disk_full;
mod dpop;
mod federation;
mod inflight;
mod limits;
mod locks;
mod org_admin;
mod orgs;
mod outage;
mod promises;
mod redis_faults;
mod registry;
mod token;
mod tokens;
mod transport;

/// The seconds left to live of the keys matching `pattern` in the shared test Redis
/// (`TESSERA_TEST_REDIS_URL`): how long a proof or assertion seen is remembered there.
async fn redis_ttls(pattern: &str) -> Vec<i64> {
    let mut redis = redis::Client::open(tessera_testkit::redis_url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(pattern)
        .query_async(&mut redis)
        .await
        .unwrap();
    let mut ttls = Vec::new();
    for key in keys {
        ttls.push(
            redis::cmd("TTL")
                .arg(key)
                .query_async(&mut redis)
                .await
                .unwrap(),
        );
    }
    ttls
}
