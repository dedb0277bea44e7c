//! Rate limits shared through Redis, and each instance's share while Redis is down.

use super::*;

/// `serve` with a Redis that dies: each instance answers at once under its share of each
/// rate, 1/`--expected-instances` (or `TESSERA_EXPECTED_INSTANCES`); a Redis that cannot be
/// reached at start stops it, named without its password.
#[tokio::test]
async fn serve_counts_its_share_while_redis_is_down() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let data = ["--database", "sqlite://share.db"];
    let flags = [&data[..], &["--listen", "127.0.0.1:0"]].concat();
    ok(
        d,
        &[
            &["plan", "set", "metered", "--scopes", "news-api"][..],
            &["--token-rate", "4/min"],
            &data,
        ]
        .concat(),
    );
    let client = create_client_with(d, &[], &data, "metered");

    let unreachable = [&["serve"][..], &flags, &["--redis-url"]].concat();
    let refused = tessera_testkit::RefusedPort::bind();
    let nowhere = format!("redis://:hunter2@127.0.0.1:{}", refused.port);
    let err = refused_start(d, &[], &[&unreachable[..], &[nowhere.as_str()]].concat()).await;
    assert!(
        err.contains(&format!(
            "cannot use Redis at redis://:[redacted]@127.0.0.1:{}:",
            refused.port
        )),
        "{err}"
    );
    assert!(!err.contains("hunter2"), "{err}");

    let mut redis = tessera_testkit::ThrowawayRedis::start();
    let url = redis.url();
    let two = spawn(
        d,
        &[],
        &[
            &["serve"][..],
            &flags,
            &["--redis-url", &url, "--expected-instances", "2"],
        ]
        .concat(),
    );
    let database = format!("sqlite://{}", d.join("share.db").display());
    let four = spawn(
        d,
        &[
            ("TESSERA_DATABASE_URL", &database),
            ("TESSERA_LISTEN", "127.0.0.1:0"),
            ("TESSERA_REDIS_URL", &url),
            ("TESSERA_EXPECTED_INSTANCES", "4"),
        ],
        &["serve"],
    );
    async fn statuses(base: &str, (id, secret): &(String, String), n: usize) -> Vec<u16> {
        let mut statuses = Vec::new();
        for _ in 0..n {
            let started = Instant::now();
            statuses.push(token(base, id, secret, "news-api").await.status().as_u16());
            let took = started.elapsed();
            // Real time (Redis's): loose for a loaded machine, well short of a hang's 10 s.
            assert!(took < Duration::from_secs(6), "an answer took {took:?}");
        }
        statuses
    }

    // Counted in Redis, for both: one allowance of four.
    assert_eq!(statuses(&two.base, &client, 2).await, [200, 200]);
    assert_eq!(statuses(&four.base, &client, 3).await, [200, 200, 429]);

    // Redis gone: each counts its share in memory, 4/min over 2 and over 4 instances.
    redis.kill();
    assert_eq!(statuses(&two.base, &client, 3).await, [200, 200, 429]);
    assert_eq!(statuses(&four.base, &client, 2).await, [200, 429]);
    for server in [&two, &four] {
        server
            .log_line(|l| l.contains("Redis rate limiter failed"))
            .await;
    }
}
