//! Test support (feature `test-support`): a scratch PostgreSQL schema per test, so tests can
//! share one database server without seeing each other's rows.

use std::str::FromStr;

use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection};

/// The server tests use: `TESSERA_TEST_POSTGRES_URL`, by default the local `test` database.
pub fn postgres_base_url() -> String {
    std::env::var("TESSERA_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// A schema created for one test and dropped when this is dropped.
#[derive(Debug)]
pub struct ScratchSchema {
    /// A URL whose connections use only the scratch schema.
    pub url: String,
    name: String,
    base: String,
}

/// Creates a fresh schema; panics with a clear message when PostgreSQL is not reachable.
pub async fn scratch_postgres() -> ScratchSchema {
    let base = postgres_base_url();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let name = format!("tessera_test_{}_{nanos}", std::process::id());
    let mut admin = PgConnectOptions::from_str(&base)
        .expect("TESSERA_TEST_POSTGRES_URL is a postgres:// URL")
        .connect()
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL at {base} is needed by this test: {e}"));
    sqlx::query(&format!("CREATE SCHEMA {name}"))
        .execute(&mut admin)
        .await
        .expect("create a scratch schema");
    admin.close().await.ok();
    let separator = if base.contains('?') { '&' } else { '?' };
    let url = format!("{base}{separator}options=-c%20search_path%3D{name}");
    ScratchSchema { url, name, base }
}

impl Drop for ScratchSchema {
    fn drop(&mut self) {
        // Dropped from async tests too: do it on a thread of its own with its own runtime.
        let (base, name) = (self.base.clone(), self.name.clone());
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build();
            if let Ok(runtime) = runtime {
                runtime.block_on(async {
                    if let Ok(mut admin) =
                        PgConnectOptions::from_str(&base).unwrap().connect().await
                    {
                        let _ = sqlx::query(&format!("DROP SCHEMA IF EXISTS {name} CASCADE"))
                            .execute(&mut admin)
                            .await;
                    }
                });
            }
        })
        .join();
    }
}
