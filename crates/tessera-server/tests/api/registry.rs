//! Key rotation as verifiers see it.

use std::time::Duration;

use tessera_proto::Algorithm;
use tessera_server::registry::Synced;
use tessera_store::Client;

use tessera_testkit::*;

async fn signing_kid(app: &TestApp) -> String {
    let (id, secret) = app.client().await;
    let body: serde_json::Value = app
        .token(&id, &secret, "grant_type=client_credentials&scope=news-api")
        .await
        .json()
        .await
        .unwrap();
    let token = body["access_token"].as_str().unwrap();
    jsonwebtoken::decode_header(token).unwrap().kid.unwrap()
}

#[tokio::test]
async fn a_new_key_is_published_before_it_signs_and_the_old_one_stays() {
    let app = spawn_app().await;
    let old = signing_kid(&app).await;
    let new = app
        .registrar()
        .rotate_keys(&app.secrets, Algorithm::EdDSA, 2)
        .await
        .unwrap()
        .kid;
    app.state.sync().await.unwrap();
    // Published at once, not yet signing.
    assert_eq!(app.published_kids().await, [old.clone(), new.clone()]);
    assert_eq!(signing_kid(&app).await, old);
    app.clock.advance(Duration::from_secs(2));
    // Signing now; the old key stays published while its tokens may live.
    assert_eq!(signing_kid(&app).await, new);
    assert_eq!(app.published_kids().await, [old, new]);
}

/// What the registry's syncs did, read from `/metrics`: (series, value) for the series
/// named `name` with any labels.
async fn registry_counter(app: &TestApp, series: &str) -> u64 {
    let text = app.metrics().await;
    text.lines()
        .find(|l| l.starts_with(series) && l.as_bytes().get(series.len()) == Some(&b' '))
        .and_then(|l| l.rsplit(' ').next())
        .unwrap_or_else(|| panic!("{series} in\n{text}"))
        .parse()
        .unwrap()
}

const NEWS: &str = "grant_type=client_credentials&scope=news-api";

/// The sync interval of [`spawn_without_poll`].
const SLOW_POLL: Duration = Duration::from_secs(60);

/// A server that polls the store only once a minute: what it learns within a test, it
/// learns by other means. (Within the staleness bound: the test clock may move by that.)
async fn spawn_without_poll() -> TestApp {
    spawn_with(|s| s.config.sync_interval = SLOW_POLL).await
}

#[tokio::test]
async fn a_client_created_elsewhere_gets_a_token_at_once() {
    let app = spawn_without_poll().await;
    // Created in the store as the CLI or another instance would, and not synced.
    let (client, secret) = app.client_unsynced("new").await;
    assert_eq!(app.token(&client, &secret, NEWS).await.status(), 200);
    assert_eq!(
        registry_counter(
            &app,
            "tessera_registry_syncs_total{trigger=\"unknown_client\"}"
        )
        .await,
        1
    );
    // Known now: the next request reads nothing.
    assert_eq!(app.token(&client, &secret, NEWS).await.status(), 200);
    assert_eq!(app.state.live().counts().unknown_client_syncs, 1);
}

#[tokio::test]
async fn a_flood_of_unknown_ids_reads_the_store_a_bounded_number_of_times() {
    let app = spawn_without_poll().await;
    let secret = tessera_proto::ClientSecret::new("x");
    // `count` requests at once, each with an unknown id of the generated shape.
    let flood = |count: usize| {
        let tasks: Vec<_> = (0..count)
            .map(|_| {
                let (http, url) = (app.http.clone(), app.url("/connect/token"));
                let authorization = basic(&tessera_server::secrets::new_client_id(), &secret);
                tokio::spawn(async move {
                    let response = http
                        .post(url)
                        .header("authorization", authorization)
                        .header("content-type", "application/x-www-form-urlencoded")
                        .body(NEWS)
                        .send()
                        .await
                        .unwrap();
                    response.status().as_u16()
                })
            })
            .collect();
        async move {
            let mut statuses = Vec::new();
            for task in tasks {
                statuses.push(task.await.unwrap());
            }
            statuses
        }
    };
    // Concurrent and one after another: the brute-force throttle answers 429 past its cap,
    // after the lookup.
    let statuses = flood(50).await;
    assert!(
        statuses.iter().all(|s| [401, 429].contains(s)),
        "{statuses:?}"
    );
    for _ in 0..20 {
        let id = tessera_server::secrets::new_client_id();
        let status = app.token(&id, &secret, NEWS).await.status();
        assert!([401, 429].contains(&status.as_u16()));
    }
    // One read: the misses that came with the first waited for its read; those after it
    // were refused without one.
    let counts = app.state.live().counts();
    assert_eq!(counts.unknown_client_syncs, 1, "{counts:?}");
    assert!(counts.unknown_client_skipped >= 20, "{counts:?}");
    // A sync interval later, an unknown id may read the store again, once.
    app.clock.advance(SLOW_POLL);
    let statuses = flood(20).await;
    assert!(statuses.iter().all(|s| [401, 429].contains(s)));
    assert_eq!(app.state.live().counts().unknown_client_syncs, 2);
    assert_eq!(
        registry_counter(
            &app,
            "tessera_registry_syncs_total{trigger=\"unknown_client\"}"
        )
        .await,
        2
    );
    // An id that Tessera could not have generated never reads the store.
    app.clock.advance(SLOW_POLL);
    let odd = tessera_proto::ClientId::parse("not-a-tessera-id").unwrap();
    assert_eq!(app.token(&odd, &secret, NEWS).await.status(), 401);
    assert_eq!(app.state.live().counts().unknown_client_syncs, 2);
}

/// Misses that come while an unknown id's read of the store is under way wait for that
/// read, and the client it brings is served to each ([`Live::refresh_for_unknown`]): not
/// refused at once, as though a read had just run, or had run too long, or as though a
/// later one had finished. Played on PostgreSQL: a lock the test holds on the change log
/// stops the read inside the server until a second request waits for it. A miss waits at
/// most 1 s from the read's start (`UNKNOWN_READ_WAIT`, in real time), so a round that a
/// loaded machine made slower than half that is played again.
///
/// [`Live::refresh_for_unknown`]: tessera_server::registry::Live::refresh_for_unknown
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn misses_during_an_unknown_ids_read_wait_for_it_and_are_served() {
    let db = tessera_store::testing::scratch_database().await;
    let app = spawn_with(|s| {
        s.database_url = Some(db.url.clone());
        s.config.sync_interval = SLOW_POLL;
    })
    .await;
    let counts = || app.state.live().counts();
    for _round in 1..=5 {
        // A sync interval on: an unknown id may read the store again.
        app.clock.advance(SLOW_POLL);
        let (client, secret) = app.client_unsynced("new").await;
        let before = counts();
        let started = std::time::Instant::now();
        let held =
            crate::inflight::PgLock::take(&db.url, "LOCK TABLE changes IN ACCESS EXCLUSIVE MODE")
                .await;
        let send = || {
            let request = app
                .http
                .post(app.url("/connect/token"))
                .header("authorization", basic(&client, &secret))
                .header("content-type", "application/x-www-form-urlencoded")
                .body(NEWS);
            tokio::spawn(async move { request.send().await.unwrap().status().as_u16() })
        };
        let first = send();
        until("the first request's read began", || async {
            counts().unknown_client_syncs > before.unknown_client_syncs
        })
        .await;
        let second = send();
        until("the second request waits for that read", || async {
            counts().unknown_client_waits > before.unknown_client_waits || second.is_finished()
        })
        .await;
        let in_time = started.elapsed() < Duration::from_millis(500);
        held.release().await;
        let statuses = (first.await.unwrap(), second.await.unwrap());
        if !in_time {
            continue;
        }
        assert_eq!(statuses, (200, 200), "both served by the one read");
        let after = counts();
        assert_eq!(
            (after.unknown_client_syncs, after.unknown_client_waits),
            (
                before.unknown_client_syncs + 1,
                before.unknown_client_waits + 1
            ),
            "one read, one miss waited for it"
        );
        assert_eq!(
            registry_counter(&app, "tessera_registry_unknown_client_waits_total").await,
            after.unknown_client_waits
        );
        return;
    }
    panic!("no round held the read under 500 ms: the machine is too loaded to play it");
}

#[tokio::test]
async fn a_plan_change_is_one_row_and_reaches_every_client_of_the_plan() {
    let app = spawn_without_poll().await;
    let clients = [app.client().await, app.client().await];
    let oms = "grant_type=client_credentials&scope=oms-api";
    for (id, secret) in &clients {
        assert_eq!(app.token(id, secret, oms).await.status(), 400);
    }
    app.registrar()
        .set_plan("pro", "news-api oms-api", None)
        .await
        .unwrap();
    let synced = app.state.sync().await.unwrap();
    assert_eq!(
        synced,
        Synced {
            changes: 1,
            reloaded: false
        }
    );
    for (id, secret) in &clients {
        assert_eq!(app.token(id, secret, oms).await.status(), 200);
    }
}

#[tokio::test]
async fn the_full_reload_removes_a_client_the_change_log_missed() {
    use sqlx::Connection;
    let app = spawn_without_poll().await;
    let (id, secret) = app.client().await;
    // Deleted by hand in the database, without the trigger that logs the change.
    let mut db = sqlx::SqliteConnection::connect(&app.db_url).await.unwrap();
    sqlx::query("DROP TRIGGER clients_change_del")
        .execute(&mut db)
        .await
        .unwrap();
    sqlx::query("DELETE FROM clients WHERE id = $1")
        .bind(id.as_str())
        .execute(&mut db)
        .await
        .unwrap();
    assert_eq!(app.state.sync().await.unwrap(), Synced::default());
    assert_eq!(app.token(&id, &secret, NEWS).await.status(), 200);
    let reloads = app.state.live().counts().reloads;
    app.state
        .live()
        .reload(app.store.as_ref(), &app.secrets)
        .await
        .unwrap();
    assert_eq!(app.token(&id, &secret, NEWS).await.status(), 401);
    assert_eq!(app.state.live().counts().reloads, reloads + 1);
    // Said once, with the count: the change log has a hole an operator should look into.
    let removed = || app.registry_said("the full reload removed clients");
    let said = removed();
    assert_eq!(said.len(), 1, "{said:#?}");
    assert!(said[0].contains("\"removed\":1"), "{}", said[0]);
    // A reload that removes nothing says nothing.
    app.state
        .live()
        .reload(app.store.as_ref(), &app.secrets)
        .await
        .unwrap();
    assert_eq!(removed(), said);
}

/// The poll logs the changes it applied, and a poll that applied none logs nothing: at a
/// poll every 100 ms, a line per poll would be 864,000 lines a day of nothing.
#[tokio::test]
async fn a_poll_logs_the_changes_it_applied_and_nothing_when_there_were_none() {
    let app = spawn_with(|s| s.config.sync_interval = Duration::from_millis(20)).await;
    let applied = || app.registry_said("registry changes applied");
    app.polls(3).await;
    assert_eq!(applied(), Vec::<String>::new());
    // A client created in the store (as the CLI would): one change, read by a poll.
    let (id, secret) = app.client_unsynced("polled").await;
    until("a poll applies the client", || async {
        !applied().is_empty()
    })
    .await;
    app.polls(3).await;
    let said = applied();
    assert_eq!(said.len(), 1, "{said:#?}");
    assert!(said[0].contains("\"changes\":1"), "{}", said[0]);
    assert_eq!(app.token(&id, &secret, NEWS).await.status(), 200);
}

/// A lookup that missed before a sync began, handled after the sync ended: the sync read
/// every change committed before the request, so the miss looks again at once, without a
/// read of its own ([`Live::refresh_for_unknown`]'s `asked`).
///
/// [`Live::refresh_for_unknown`]: tessera_server::registry::Live::refresh_for_unknown
#[tokio::test]
async fn a_miss_that_a_finished_sync_has_answered_reads_nothing_more() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let app = spawn_without_poll().await;
    let live = app.state.live();
    // A miss whose lookup noted `asked`: whether it looks again, and whether it read.
    let miss = |asked: u64| async move {
        let read = std::sync::Arc::new(AtomicBool::new(false));
        let reading = read.clone();
        let look_again = live
            .refresh_for_unknown(asked, SLOW_POLL, move || {
                reading.store(true, Ordering::Relaxed);
                async { Ok(Synced::default()) }
            })
            .await;
        (look_again, read.load(Ordering::Relaxed))
    };
    let asked = live.syncs_begun();
    app.state.sync().await.unwrap();
    assert_eq!(miss(asked).await, (true, false));
    // A miss whose lookup came after that sync began gets no such answer: it reads.
    assert_eq!(miss(live.syncs_begun()).await, (true, true));
}

/// An instance started after a token was revoked refuses it from its first request, not
/// from its first poll (here an hour away): the revocations are read with the registry.
#[tokio::test]
async fn an_instance_started_after_a_revocation_refuses_the_token_at_once() {
    let issuer = "https://auth.registry.test";
    let a = spawn_with(|s| {
        s.config.sync_interval = SLOW_POLL;
        s.config.issuer = Some(issuer.into());
    })
    .await;
    let (id, secret) = a.client().await;
    let issued: serde_json::Value = a.token(&id, &secret, NEWS).await.json().await.unwrap();
    let token = issued["access_token"].as_str().unwrap();
    let form = |app: &TestApp, path: &str| {
        app.http
            .post(app.url(path))
            .header("authorization", basic(&id, &secret))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!("token={token}"))
            .send()
    };
    assert_eq!(form(&a, "/connect/revocation").await.unwrap().status(), 200);
    let b = spawn_with(|s| {
        s.database_url = Some(a.db_url.clone());
        s.config.sync_interval = Duration::from_secs(3600);
        s.config.issuer = Some(issuer.into());
    })
    .await;
    let answer: serde_json::Value = form(&b, "/connect/introspect")
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(answer, serde_json::json!({ "active": false }));
    assert_eq!(b.state.live().counts().polls, 0);
}

/// The safety net runs by itself (the book: "A full reload runs only every 10 minutes, as a
/// safety net"): with no call from the test, the serving loop's reload removes a client
/// the change log missed. The reload ticks on tokio's timer, so the interval is made short.
#[tokio::test]
async fn the_safety_net_reload_runs_by_itself_every_interval() {
    use sqlx::Connection;
    let app = spawn_with(|s| {
        s.config.sync_interval = SLOW_POLL;
        s.config.full_reload_interval = Duration::from_millis(200);
    })
    .await;
    let (id, secret) = app.client().await;
    assert_eq!(app.token(&id, &secret, NEWS).await.status(), 200);
    let mut db = sqlx::SqliteConnection::connect(&app.db_url).await.unwrap();
    sqlx::query("DROP TRIGGER clients_change_del")
        .execute(&mut db)
        .await
        .unwrap();
    let reloads = app.state.live().counts().reloads;
    sqlx::query("DELETE FROM clients WHERE id = $1")
        .bind(id.as_str())
        .execute(&mut db)
        .await
        .unwrap();
    until("a periodic full reload removes the client", || async {
        app.token(&id, &secret, NEWS).await.status() == 401
    })
    .await;
    assert!(app.state.live().counts().reloads > reloads);
}

#[tokio::test]
async fn an_instance_behind_a_pruned_change_reads_everything_again() {
    let app = spawn_without_poll().await;
    let (id, secret) = app.client().await;
    app.registrar()
        .update_client(id.as_str(), |c| c.enabled = false)
        .await
        .unwrap();
    let latest = app.store.latest_change().await.unwrap();
    app.store.prune_changes(latest).await.unwrap();
    assert!(app.state.sync().await.unwrap().reloaded);
    assert_eq!(app.token(&id, &secret, NEWS).await.status(), 401);
    // And goes on from there, one change at a time.
    app.registrar()
        .update_client(id.as_str(), |c| c.enabled = true)
        .await
        .unwrap();
    let synced = app.state.sync().await.unwrap();
    assert_eq!(
        synced,
        Synced {
            changes: 1,
            reloaded: false
        }
    );
    assert_eq!(app.token(&id, &secret, NEWS).await.status(), 200);
}

/// Inserts `n` clients on plan "pro" sharing one secret, in batches of 10,000, straight
/// into the store (as a bulk import would).
async fn insert_clients(app: &TestApp, n: usize) {
    let hash = app
        .secrets
        .hash_secret(&tessera_proto::ClientSecret::new("tcs_shared"));
    let now = app.clock.now();
    let batch = 10_000;
    for first in (0..n).step_by(batch) {
        let clients: Vec<Client> = (first..n.min(first + batch))
            .map(|_| Client {
                id: tessera_server::secrets::new_client_id(),
                plan: "pro".into(),
                label: "bulk".into(),
                auth_method: tessera_store::AuthMethod::ClientSecretBasic,
                credential: tessera_store::Credential::secret(hash.to_vec()),
                enabled: true,
                org: None,
                org_enabled: true,
                created_at: now,
                updated_at: now,
            })
            .collect();
        app.store.insert_clients(&clients).await.unwrap();
    }
}

/// The README's promise that a change made elsewhere is in force within 1 s, at `n`
/// clients: the poll runs at least once a second, and a sync after one client is disabled
/// applies that one row, not a reload of the `n`. (How long a sync takes is measured in
/// benches, not asserted here.)
async fn disabling_one_client_among(n: usize) {
    assert!(tessera_server::Config::default().sync_interval <= Duration::from_secs(1));
    // The test syncs by hand: with a million clients the inserts alone outlast a minute.
    let app = spawn_with(|s| s.config.sync_interval = Duration::from_secs(24 * 3600)).await;
    let started = std::time::Instant::now();
    insert_clients(&app, n).await;
    let inserted = started.elapsed();
    let (target, secret) = app.client_unsynced("target").await;
    let synced = app.state.sync().await.unwrap();
    assert_eq!(synced.changes, n + 1);
    let loaded = started.elapsed();
    assert_eq!(app.state.live().counts().clients, n as u64 + 1);
    assert_eq!(app.token(&target, &secret, NEWS).await.status(), 200);

    let reloads = app.state.live().counts().reloads;
    // As the CLI disables a client: in the store.
    app.registrar()
        .update_client(target.as_str(), |c| c.enabled = false)
        .await
        .unwrap();
    let disabling = std::time::Instant::now();
    let synced = app.state.sync().await.unwrap();
    let synced_in = disabling.elapsed();
    assert_eq!(
        synced,
        Synced {
            changes: 1,
            reloaded: false
        }
    );
    assert_eq!(app.state.live().counts().reloads, reloads, "no full reload");
    let refused = app.token(&target, &secret, NEWS).await;
    assert_eq!(error_of(refused).await.1, "invalid_client");
    assert_eq!(
        registry_counter(&app, "tessera_registry_reloads_total").await,
        reloads
    );
    // For the record (docs/testing.md), not asserted.
    eprintln!(
        "{n} clients: inserted in {inserted:?}, applied by the first sync by {loaded:?}, \
         the disabling sync took {synced_in:?}"
    );
}

#[tokio::test]
async fn disabling_one_of_10_000_clients_applies_one_row() {
    disabling_one_client_among(10_000).await;
}

/// Seventeen seconds of a debug build: run with the million below (docs/testing.md).
#[tokio::test]
#[ignore = "100,000 clients: 17 s in a debug build; see docs/testing.md"]
async fn disabling_one_of_100_000_clients_applies_one_row() {
    disabling_one_client_among(100_000).await;
}

/// Too slow for every run; see docs/testing.md for how to run it and its figures.
#[tokio::test]
#[ignore = "a million clients: 3 minutes in a debug build, 95 s in release; see docs/testing.md"]
async fn disabling_one_of_1_000_000_clients_applies_one_row() {
    disabling_one_client_among(1_000_000).await;
}

/// A full reload rewrites entries in place, a page at a time: the process's peak resident
/// memory grows by less than half of what a second copy of the registry (80 bytes a client,
/// plus its map's spare room) would add. Linux only (`/proc/self/status`); run alone, since
/// the peak is the process's: `cargo test --release --test api -- --ignored --exact
/// registry::a_full_reload_holds_no_second_copy_of_the_clients`.
#[tokio::test]
#[ignore = "300,000 clients, and the process's peak memory: run alone (see the comment)"]
async fn a_full_reload_holds_no_second_copy_of_the_clients() {
    let status = |field: &str| -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with(field)).unwrap();
        line.split_whitespace()
            .nth(1)
            .unwrap()
            .parse::<u64>()
            .unwrap()
            * 1024
    };
    let n = 300_000;
    let app = spawn_with(|s| s.config.sync_interval = Duration::from_secs(24 * 3600)).await;
    insert_clients(&app, n).await;
    app.state.sync().await.unwrap();
    // Twice: the first reload's transient pages set the peak the second would reach.
    let live = app.state.live();
    live.reload(app.store.as_ref(), &app.secrets).await.unwrap();
    let before = status("VmHWM:");
    live.reload(app.store.as_ref(), &app.secrets).await.unwrap();
    live.reload(app.store.as_ref(), &app.secrets).await.unwrap();
    let grown = status("VmHWM:") - before;
    assert_eq!(live.counts().clients, n as u64);
    let second_copy = 80 * n as u64;
    assert!(
        grown < second_copy / 2,
        "the peak grew by {grown} bytes over two reloads; a second copy is {second_copy}"
    );
    eprintln!("{n} clients: peak before the reloads {before} bytes, grown by {grown}");
}

/// Issue 24 item 6: memory stayed at the registry's peak after mass deletes, until restart.
/// Now the maps shrink once under a quarter full, whether the deletes come through the
/// change log (another instance, the CLI) or a full reload finds them gone.
#[tokio::test]
async fn the_registry_gives_memory_back_after_mass_deletes() {
    use sqlx::Connection;
    let n = 20_000;
    let app = spawn_without_poll().await;
    let slots = "tessera_registry_client_slots";
    let (keep, secret) = app.client().await;

    insert_clients(&app, n).await;
    app.state.sync().await.unwrap();
    let peak = registry_counter(&app, slots).await;
    assert!(peak > n as u64, "{peak} slots for {n} clients");
    // Deleted in one statement, each row through the change log, and applied row by row.
    let mut db = sqlx::SqliteConnection::connect(&app.db_url).await.unwrap();
    sqlx::query("DELETE FROM clients WHERE label = 'bulk'")
        .execute(&mut db)
        .await
        .unwrap();
    app.state.sync().await.unwrap();
    assert_eq!(registry_counter(&app, "tessera_registry_clients").await, 1);
    let after_log = registry_counter(&app, slots).await;
    assert!(
        after_log < peak / 100,
        "{after_log} slots of {peak} after the deletes"
    );
    assert_eq!(app.token(&keep, &secret, NEWS).await.status(), 200);

    // Again, deleted behind the change log's back: the full reload sweeps them out.
    insert_clients(&app, n).await;
    app.state.sync().await.unwrap();
    assert!(registry_counter(&app, slots).await > n as u64);
    sqlx::query("DROP TRIGGER clients_change_del")
        .execute(&mut db)
        .await
        .unwrap();
    sqlx::query("DELETE FROM clients WHERE label = 'bulk'")
        .execute(&mut db)
        .await
        .unwrap();
    app.state.sync().await.unwrap();
    assert_eq!(
        registry_counter(&app, "tessera_registry_clients").await,
        n as u64 + 1
    );
    app.state
        .live()
        .reload(app.store.as_ref(), &app.secrets)
        .await
        .unwrap();
    assert_eq!(registry_counter(&app, "tessera_registry_clients").await, 1);
    let after_sweep = registry_counter(&app, slots).await;
    assert!(
        after_sweep < peak / 100,
        "{after_sweep} slots of {peak} after the sweep"
    );
    assert_eq!(app.token(&keep, &secret, NEWS).await.status(), 200);
}

/// What the process's memory does when 300,000 clients are deleted: the registry's maps
/// are freed, and the allocator can give them back. Linux only (`/proc/self/status`); run
/// alone, since the memory is the process's: `cargo test --test api -- --ignored --exact
/// registry::memory_falls_after_300_000_clients_are_deleted --nocapture`.
#[tokio::test]
#[ignore = "300,000 clients, and the process's memory: run alone (see the comment)"]
async fn memory_falls_after_300_000_clients_are_deleted() {
    use sqlx::Connection;
    let rss = || -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
        line.split_whitespace()
            .nth(1)
            .unwrap()
            .parse::<u64>()
            .unwrap()
            * 1024
    };
    let n = 300_000;
    let app = spawn_with(|s| s.config.sync_interval = Duration::from_secs(24 * 3600)).await;
    let before = rss();
    insert_clients(&app, n).await;
    app.state.sync().await.unwrap();
    let live = app.state.live();
    let (loaded, slots) = (rss(), live.clients().capacity());
    let mut db = sqlx::SqliteConnection::connect(&app.db_url).await.unwrap();
    sqlx::query("DELETE FROM clients")
        .execute(&mut db)
        .await
        .unwrap();
    app.state.sync().await.unwrap();
    let (deleted, left) = (rss(), live.clients().capacity());
    eprintln!(
        "{n} clients: RSS {before} bytes before, {loaded} loaded ({slots} slots), \
         {deleted} after deleting them all ({left} slots)"
    );
    assert_eq!(left, 0);
    assert!(
        loaded - deleted > 80 * slots as u64 / 2,
        "RSS fell by {} bytes; the maps held {} bytes",
        loaded.saturating_sub(deleted),
        80 * slots
    );
}

/// A new instance's first load holds its clients in about as many slots as there are
/// clients, and a full reload of the loaded registry reserves no more room: the first
/// load's reservation is made only into an empty map.
#[tokio::test]
async fn a_first_load_sizes_the_client_map_once_and_a_reload_keeps_its_size() {
    let n = 1_000;
    let first = spawn_without_poll().await;
    insert_clients(&first, n).await;
    // A second instance on the same database loads them at start.
    let db_url = first.db_url.clone();
    let second = spawn_with(|s| {
        s.config.sync_interval = SLOW_POLL;
        s.database_url = Some(db_url);
    })
    .await;
    let slots = "tessera_registry_client_slots";
    assert_eq!(
        registry_counter(&second, "tessera_registry_clients").await,
        n as u64
    );
    let loaded = registry_counter(&second, slots).await;
    assert!(
        (n as u64..=4 * n as u64).contains(&loaded),
        "{loaded} slots for {n} clients"
    );
    second
        .state
        .live()
        .reload(second.store.as_ref(), &second.secrets)
        .await
        .unwrap();
    assert_eq!(registry_counter(&second, slots).await, loaded);
}

#[tokio::test]
async fn housekeeping_prunes_changes_older_than_the_retention() {
    let app = spawn_without_poll().await;
    app.client().await;
    let seen = app.store.latest_change().await.unwrap();
    app.state.housekeeping().await;
    assert!(app.store.changes_since(0, 10).await.unwrap().is_some());
    // Within the retention, nothing is pruned; past it, what was the latest then is.
    app.clock
        .advance(tessera_server::registry::CHANGE_RETENTION - Duration::from_secs(1));
    app.state.housekeeping().await;
    assert!(app.store.changes_since(0, 10).await.unwrap().is_some());
    app.client().await;
    app.clock.advance(Duration::from_secs(1));
    app.state.housekeeping().await;
    assert_eq!(app.store.changes_since(0, 10).await.unwrap(), None);
    let newer = app.store.changes_since(seen, 10).await.unwrap().unwrap();
    assert_eq!(
        newer.clients.len(),
        1,
        "the change after the sample is kept"
    );
    // This instance had read them all: no reload.
    assert!(!app.state.sync().await.unwrap().reloaded);
    // And on: a retention later, what was the latest at the round that pruned is pruned.
    app.clock
        .advance(tessera_server::registry::CHANGE_RETENTION);
    app.state.housekeeping().await;
    assert_eq!(app.store.changes_since(seen, 10).await.unwrap(), None);
}
