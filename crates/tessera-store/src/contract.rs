//! One contract that every backend must keep, run against each of them.

use tessera_proto::{Algorithm, ClientId, ScopeSet};

use crate::{
    AuthMethod, CertificateMatch, Changes, Client, Credential, IdempotentAnswer, KeySource, Plan,
    PlanRemoval, RateLimit, Revoked, SigningKey, Store, StoreError, Usage,
};

/// The contract's fixed present: stores keep times, they never read a clock.
fn now() -> crate::Timestamp {
    1_800_000_000
}

fn plan(name: &str, scopes: &str) -> Plan {
    Plan {
        name: name.into(),
        scopes: ScopeSet::parse_names(scopes).unwrap(),
        token_ttl: 3600,
        token_rate: None,
        reuse_percent: None,
        introspect_any: false,
        limit_per: crate::LimitPer::Client,
        dpop: crate::DpopPolicy::Allowed,
        api_limits: Default::default(),
        created_at: now(),
        updated_at: now(),
    }
}

fn client(id: &str, plan: &str) -> Client {
    Client {
        id: ClientId::parse(id).unwrap(),
        plan: plan.into(),
        label: "label".into(),
        auth_method: AuthMethod::ClientSecretBasic,
        credential: Credential::secret(vec![1; 32]),
        enabled: true,
        org: None,
        org_enabled: true,
        created_at: now(),
        updated_at: now(),
    }
}

pub(crate) async fn contract(store: &dyn Store) {
    // A fresh database is empty; a check value alone makes it used.
    assert!(store.is_empty().await.unwrap());
    assert_eq!(store.check_value("first", b"x").await.unwrap(), b"x");
    assert!(!store.is_empty().await.unwrap());

    let r0 = store.revision().await.unwrap();

    // Plans: insert, then update in place.
    store.put_plan(&plan("basic", "news-api")).await.unwrap();
    let mut pro = plan("pro", "news-api market-data-api");
    store.put_plan(&pro).await.unwrap();
    pro.scopes = ScopeSet::parse_names("oms-api").unwrap();
    pro.token_ttl = 60;
    pro.token_rate = Some(RateLimit {
        count: 5,
        period_secs: 60,
        burst: 2,
    });
    pro.reuse_percent = Some(50);
    pro.introspect_any = true;
    pro.limit_per = crate::LimitPer::Org;
    pro.dpop = crate::DpopPolicy::Required;
    pro.api_limits.insert(
        "oms-api".into(),
        crate::ApiLimit {
            rate: Some(RateLimit {
                count: 5,
                period_secs: 60,
                burst: 7,
            }),
            quota: Some(crate::Quota {
                limit: 1000,
                period: crate::Period::Month,
            }),
        },
    );
    store.put_plan(&pro).await.unwrap();
    let plans = store.plans().await.unwrap();
    assert_eq!(plans.len(), 2);
    assert_eq!(plans[1].scopes.to_string(), "oms-api");
    assert_eq!(plans[1], pro);
    let r1 = store.revision().await.unwrap();
    assert!(r1 > r0, "plan changes bump the revision");

    // Clients: unknown plan and duplicates are refused and leave nothing behind.
    let err = store
        .insert_client(&client("c0", "nope"))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::UnknownPlan(p) if p == "nope"));
    let mut c1 = client("c1", "basic");
    store.insert_client(&c1).await.unwrap();
    let err = store.insert_client(&c1).await.unwrap_err();
    assert!(matches!(err, StoreError::Duplicate(_)));
    assert_eq!(store.clients().await.unwrap().len(), 1);
    // A batch with one bad client writes none of them.
    let batch = [client("b1", "basic"), client("b2", "nope")];
    assert!(store.insert_clients(&batch).await.is_err());
    assert_eq!(store.clients().await.unwrap().len(), 1);
    let batch = [client("b1", "basic"), client("b2", "basic")];
    store.insert_clients(&batch).await.unwrap();
    assert_eq!(store.clients().await.unwrap().len(), 3);
    assert!(store.delete_client(&batch[0].id).await.unwrap());
    assert!(store.delete_client(&batch[1].id).await.unwrap());

    c1.credential = Credential::Secret {
        hash: vec![1; 32],
        previous: Some((vec![2; 32], 42)),
    };
    c1.enabled = false;
    c1.plan = "pro".into();
    assert!(store.update_client(&c1).await.unwrap());
    assert_eq!(store.client(&c1.id).await.unwrap().as_ref(), Some(&c1));
    c1.plan = "gone".into();
    assert!(matches!(
        store.update_client(&c1).await,
        Err(StoreError::UnknownPlan(_))
    ));
    let ghost = client("ghost", "basic");
    assert!(!store.update_client(&ghost).await.unwrap());
    assert!(store.client(&ghost.id).await.unwrap().is_none());
    let r2 = store.revision().await.unwrap();
    assert!(r2 > r1, "client changes bump the revision");

    assert!(store.delete_client(&c1.id).await.unwrap());
    assert!(!store.delete_client(&c1.id).await.unwrap());

    // Keys.
    let key = SigningKey {
        kid: "k1".into(),
        alg: Algorithm::EdDSA,
        public_jwk: "{}".into(),
        private_sealed: vec![9; 48],
        created_at: 10,
        activates_at: 10,
    };
    store.insert_key(&key).await.unwrap();
    let later = SigningKey {
        kid: "k0".into(),
        activates_at: 20,
        ..key.clone()
    };
    store.insert_key(&later).await.unwrap();
    assert!(matches!(
        store.insert_key(&key).await,
        Err(StoreError::Duplicate(_))
    ));
    let keys = store.keys().await.unwrap();
    assert_eq!(keys, vec![key.clone(), later]);
    assert!(store.delete_key("k1").await.unwrap());
    let r3 = store.revision().await.unwrap();
    assert!(r3 > r2);

    // Revocations: remembered until exp, read incrementally, idempotent; the registry
    // revision is left alone.
    let live = Revoked {
        jti: "j1".into(),
        client_id: "c1".into(),
        exp: now() + 60,
    };
    let dead = Revoked {
        jti: "j0".into(),
        client_id: "c1".into(),
        exp: now() - 1,
    };
    store.revoke(&live).await.unwrap();
    store.revoke(&live).await.unwrap();
    store.revoke(&dead).await.unwrap();
    let all = store.revoked_since(0, now()).await.unwrap();
    assert_eq!(
        all.iter().map(|(_, r)| r.clone()).collect::<Vec<_>>(),
        vec![live.clone()]
    );
    let later = Revoked {
        jti: "j2".into(),
        client_id: "c1".into(),
        exp: now() + 60,
    };
    store.revoke(&later).await.unwrap();
    let newer = store.revoked_since(all[0].0, now()).await.unwrap();
    assert_eq!(newer.len(), 1);
    assert_eq!(newer[0].1, later);
    assert!(newer[0].0 > all[0].0);
    assert_eq!(store.revision().await.unwrap(), r3);
    // Pruning the newest revocations must not hand their numbers to the next one: a reader
    // that has seen them would read past it (SQLite reuses the highest rowids).
    let seen = newer[0].0;
    let short = Revoked {
        jti: "j3".into(),
        client_id: "c1".into(),
        exp: now() + 1,
    };
    store.revoke(&short).await.unwrap();
    let seen = store.revoked_since(seen, now()).await.unwrap()[0].0;
    store.prune_revoked(now() + 30).await.unwrap();
    let next = Revoked {
        jti: "j4".into(),
        client_id: "c1".into(),
        exp: now() + 60,
    };
    store.revoke(&next).await.unwrap();
    let after = store.revoked_since(seen, now()).await.unwrap();
    assert_eq!(
        after.iter().map(|(_, r)| r.clone()).collect::<Vec<_>>(),
        vec![next],
        "a revocation numbered at or below one already read"
    );
    store.prune_revoked(now() + 120).await.unwrap();
    assert!(store.revoked_since(0, 0).await.unwrap().is_empty());

    // The first check value stored under a name stays.
    assert_eq!(store.check_value("k", b"one").await.unwrap(), b"one");
    assert_eq!(store.check_value("k", b"two").await.unwrap(), b"one");

    // A replaced value is handed back.
    assert_eq!(store.replace_value("r", b"one").await.unwrap(), None);
    let previous = store.replace_value("r", b"two").await.unwrap();
    assert_eq!(previous.as_deref(), Some(&b"one"[..]));
    assert_eq!(store.check_value("r", b"three").await.unwrap(), b"two");

    // With no reader in the way, a checkpoint moves everything.
    assert!(store.checkpoint().await.unwrap());

    // Usage adds up per client and day.
    let id = ClientId::parse("c9").unwrap();
    let day = |d: &str, issued, refused| Usage {
        client_id: "c9".into(),
        day: d.into(),
        issued,
        refused,
    };
    store
        .add_usage(&[day("2026-01-01", 3, 1), day("2026-01-02", 1, 0)])
        .await
        .unwrap();
    store.add_usage(&[day("2026-01-01", 2, 2)]).await.unwrap();
    assert_eq!(
        store.usage(&id).await.unwrap(),
        vec![day("2026-01-01", 5, 3), day("2026-01-02", 1, 0)]
    );
}

/// What the admin API needs besides: paging, plan removal, counts, remembered answers.
async fn admin_contract(store: &dyn Store) {
    store.put_plan(&plan("a", "news-api")).await.unwrap();
    store.put_plan(&plan("b", "news-api")).await.unwrap();
    store.put_plan(&plan("empty", "news-api")).await.unwrap();
    let ids = ["k3", "k1", "k5", "k2", "k4"];
    let clients: Vec<Client> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| client(id, if i % 2 == 0 { "a" } else { "b" }))
        .collect();
    store.insert_clients(&clients).await.unwrap();

    // Pages by id, resuming after the last id seen, optionally of one plan.
    let page = |plan: Option<&'static str>, after: Option<&'static str>, limit| async move {
        let page = store.clients_page(plan, after, limit).await.unwrap();
        page.iter().map(|c| c.id.to_string()).collect::<Vec<_>>()
    };
    assert_eq!(page(None, None, 2).await, ["k1", "k2"]);
    assert_eq!(page(None, Some("k2"), 2).await, ["k3", "k4"]);
    assert_eq!(page(None, Some("k4"), 2).await, ["k5"]);
    assert!(page(None, Some("k5"), 2).await.is_empty());
    assert_eq!(page(Some("a"), None, 10).await, ["k3", "k4", "k5"]);
    assert_eq!(page(Some("b"), Some("k1"), 10).await, ["k2"]);
    assert_eq!(
        store.clients_per_plan().await.unwrap(),
        [("a".to_owned(), 3), ("b".to_owned(), 2)]
    );

    // A client that authenticates with a certificate keeps what it must match.
    let mut mtls = client("m1", "b");
    mtls.auth_method = AuthMethod::TlsClientAuth;
    mtls.credential =
        Credential::Certificate(CertificateMatch::SanUri("spiffe://example.org/a".into()));
    store.insert_client(&mtls).await.unwrap();
    assert_eq!(store.client(&mtls.id).await.unwrap().as_ref(), Some(&mtls));
    mtls.auth_method = AuthMethod::SelfSignedTlsClientAuth;
    mtls.credential = Credential::Certificate(CertificateMatch::Jwks("{\"keys\":[]}".into()));
    assert!(store.update_client(&mtls).await.unwrap());
    assert_eq!(store.client(&mtls.id).await.unwrap().as_ref(), Some(&mtls));
    // A private_key_jwt client keeps where its keys are published.
    mtls.auth_method = AuthMethod::PrivateKeyJwt;
    mtls.credential = Credential::Keys(KeySource::JwksUri("https://keys.example/jwks".into()));
    assert!(store.update_client(&mtls).await.unwrap());
    assert_eq!(store.client(&mtls.id).await.unwrap().as_ref(), Some(&mtls));
    // Or its keys themselves.
    mtls.credential = Credential::Keys(KeySource::Jwks("{\"keys\":[]}".into()));
    assert!(store.update_client(&mtls).await.unwrap());
    assert_eq!(store.client(&mtls.id).await.unwrap().as_ref(), Some(&mtls));

    // Trust policies belong to a client, are replaced by name, and go with their client.
    let policy = crate::TrustPolicy {
        name: "ci".into(),
        client_id: mtls.id.clone(),
        issuer: "https://token.actions.githubusercontent.com".into(),
        jwks_uri: None,
        audience: "tessera".into(),
        subject: "repo:acme/*".into(),
        claims: "{\"ref\":\"refs/heads/main\"}".into(),
        max_assertion_ttl: Some(600),
        created_at: now(),
    };
    store.put_trust_policy(&policy).await.unwrap();
    assert_eq!(
        store.trust_policies().await.unwrap(),
        std::slice::from_ref(&policy)
    );
    assert_eq!(
        store.trust_policies_of(&mtls.id).await.unwrap(),
        std::slice::from_ref(&policy)
    );
    let mut changed = policy.clone();
    changed.subject = "repo:acme/payments:*".into();
    changed.jwks_uri = Some("https://keys.example/jwks".into());
    changed.max_assertion_ttl = None;
    store.put_trust_policy(&changed).await.unwrap();
    assert_eq!(
        store.trust_policies().await.unwrap(),
        std::slice::from_ref(&changed)
    );
    assert!(store.delete_trust_policy("ci").await.unwrap());
    assert!(!store.delete_trust_policy("ci").await.unwrap());
    store.put_trust_policy(&changed).await.unwrap();
    assert!(store.delete_client(&mtls.id).await.unwrap());
    assert!(store.trust_policies().await.unwrap().is_empty());

    // Hourly totals add up per hour and are pruned by hour.
    store.add_hourly_usage("2026-01-01T10", 3, 1).await.unwrap();
    store.add_hourly_usage("2026-01-01T10", 2, 0).await.unwrap();
    store.add_hourly_usage("2026-01-01T11", 1, 1).await.unwrap();
    assert_eq!(
        store.hourly_usage("2026-01-01T10").await.unwrap(),
        [
            ("2026-01-01T10".to_owned(), 5, 1),
            ("2026-01-01T11".to_owned(), 1, 1)
        ]
    );
    store.prune_hourly_usage("2026-01-01T11").await.unwrap();
    assert_eq!(store.hourly_usage("").await.unwrap().len(), 1);

    // A plan in use stays; an unused one goes.
    assert_eq!(store.delete_plan("a").await.unwrap(), PlanRemoval::InUse);
    assert_eq!(
        store.delete_plan("empty").await.unwrap(),
        PlanRemoval::Removed
    );
    assert_eq!(
        store.delete_plan("empty").await.unwrap(),
        PlanRemoval::Unknown
    );
    assert_eq!(store.plans().await.unwrap().len(), 2);

    // Usage of a plan sums its clients' per day.
    let usage = |id: &str, day: &str, issued| Usage {
        client_id: id.into(),
        day: day.into(),
        issued,
        refused: 1,
    };
    store
        .add_usage(&[
            usage("k3", "2026-01-01", 2),
            usage("k5", "2026-01-01", 3),
            usage("k5", "2026-01-02", 4),
            usage("k1", "2026-01-01", 100),
        ])
        .await
        .unwrap();
    let summed = store.plan_usage("a").await.unwrap();
    let days: Vec<_> = summed
        .iter()
        .map(|u| (u.day.as_str(), u.issued, u.refused))
        .collect();
    assert_eq!(days, [("2026-01-01", 5, 2), ("2026-01-02", 4, 1)]);

    // API requests as reported: added per client, day and API; a batch counts once.
    let api = |id: &str, day: &str, api: &str, requests, refused| crate::ApiUsage {
        day: day.into(),
        client_id: id.into(),
        api: api.into(),
        requests,
        refused,
    };
    let first = [
        api("k3", "2026-01-01", "news-api", 10, 1),
        api("k3", "2026-01-01", "oms-api", 2, 0),
        api("k5", "2026-01-01", "news-api", 5, 0),
    ];
    assert!(store.add_api_usage("b1", now(), &first).await.unwrap());
    assert!(!store.add_api_usage("b1", now(), &first).await.unwrap());
    let second = [api("k3", "2026-01-01", "news-api", 3, 2)];
    assert!(store
        .add_api_usage("b2", now() + 10, &second)
        .await
        .unwrap());
    let k3 = ClientId::parse("k3").unwrap();
    assert_eq!(
        store.api_usage(&k3).await.unwrap(),
        [
            api("k3", "2026-01-01", "news-api", 13, 3),
            api("k3", "2026-01-01", "oms-api", 2, 0)
        ]
    );
    assert_eq!(
        store.plan_api_usage("a").await.unwrap(),
        [
            api("", "2026-01-01", "news-api", 18, 3),
            api("", "2026-01-01", "oms-api", 2, 0)
        ]
    );
    // A batch larger than one statement (1,000 rows), whose rows repeat a key in the
    // same statement and across two: every row is added, once.
    let mut big: Vec<_> = (0..1_200)
        .map(|i| api(&format!("bulk{i}"), "2026-01-02", "news-api", i + 1, 0))
        .collect();
    big.push(api("k3", "2026-01-02", "news-api", 4, 1));
    big.push(api("k3", "2026-01-02", "news-api", 5, 0));
    big.push(api("bulk1", "2026-01-02", "news-api", 100, 7));
    big.push(api("k3", "2026-01-02", "oms-api", 1, 0));
    assert!(store.add_api_usage("b3", now(), &big).await.unwrap());
    assert!(!store.add_api_usage("b3", now(), &big).await.unwrap());
    let k3_days = store.api_usage(&k3).await.unwrap();
    assert_eq!(
        k3_days[2..],
        [
            api("k3", "2026-01-02", "news-api", 9, 1),
            api("k3", "2026-01-02", "oms-api", 1, 0)
        ]
    );
    let bulk1 = ClientId::parse("bulk1").unwrap();
    assert_eq!(
        store.api_usage(&bulk1).await.unwrap(),
        [api("bulk1", "2026-01-02", "news-api", 102, 7)]
    );
    let last = ClientId::parse("bulk1199").unwrap();
    assert_eq!(
        store.api_usage(&last).await.unwrap(),
        [api("bulk1199", "2026-01-02", "news-api", 1_200, 0)]
    );
    // Pruned batch ids are forgotten: only the older one.
    store.prune_api_usage_batches(now() + 5).await.unwrap();
    assert!(!store.add_api_usage("b2", now(), &[]).await.unwrap());
    assert!(store.add_api_usage("b1", now(), &[]).await.unwrap());

    // A remembered answer: the first insert writes, a second one with the same key writes
    // nothing and hands back the first answer.
    let answer = |bytes: &[u8]| IdempotentAnswer {
        owner: "admin".into(),
        key: "key-1".into(),
        fingerprint: vec![7; 32],
        answer: bytes.to_vec(),
        created_at: now(),
    };
    let first = answer(b"first");
    let created = client("n1", "a");
    let again = store
        .insert_clients_once(std::slice::from_ref(&created), Some(&first))
        .await
        .unwrap();
    assert_eq!(again, None);
    let retry = client("n2", "a");
    let again = store
        .insert_clients_once(std::slice::from_ref(&retry), Some(&answer(b"second")))
        .await
        .unwrap();
    assert_eq!(again, Some(first.clone()));
    assert!(store.client(&retry.id).await.unwrap().is_none());
    // A failed insert remembers nothing: the key can be used again.
    let orphan = IdempotentAnswer {
        key: "key-2".into(),
        ..first.clone()
    };
    let err = store
        .insert_clients_once(&[client("n3", "nope")], Some(&orphan))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::UnknownPlan(_)), "{err:?}");
    assert_eq!(
        store.idempotent_answer("admin", "key-2").await.unwrap(),
        None
    );
    store.prune_idempotent_answers(now()).await.unwrap();
    assert!(store
        .idempotent_answer("admin", "key-1")
        .await
        .unwrap()
        .is_some());
    store.prune_idempotent_answers(now() + 1).await.unwrap();
    assert_eq!(
        store.idempotent_answer("admin", "key-1").await.unwrap(),
        None
    );
}

#[tokio::test]
async fn sqlite_keeps_the_admin_contract() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("t.db").display());
    admin_contract(crate::open(&url).await.unwrap().as_ref()).await;
}

#[tokio::test]
async fn postgres_keeps_the_admin_contract() {
    let schema = crate::testing::scratch_postgres().await;
    admin_contract(crate::open(&schema.url).await.unwrap().as_ref()).await;
}

/// Clients written together, more than one statement's worth (1,000): in one transaction,
/// all of them, each as given and with its change; or, when a later statement fails (an
/// unknown plan, a duplicate id), none of them and no change.
async fn batches(store: &dyn Store) {
    store.put_plan(&plan("bulk", "news-api")).await.unwrap();
    let batch = |prefix: &str, n: usize, plan: &str| -> Vec<Client> {
        (0..n)
            .map(|i| {
                let mut c = client(&format!("{prefix}{i:05}"), plan);
                c.credential = Credential::secret(vec![(i % 251) as u8; 32]);
                c
            })
            .collect()
    };
    let seen = store.latest_change().await.unwrap();
    // The third statement's clients are on a plan that does not exist.
    let failing = [batch("x", 2000, "bulk"), batch("y", 10, "nope")].concat();
    let err = store.insert_clients(&failing).await.unwrap_err();
    assert!(
        matches!(&err, StoreError::UnknownPlan(p) if p == "nope"),
        "{err}"
    );
    // A duplicate id in the second statement.
    let mut again = [batch("w", 10, "bulk"), batch("z", 1500, "bulk")].concat();
    again[1200].id = again[3].id.clone();
    let err = store.insert_clients(&again).await.unwrap_err();
    assert!(matches!(err, StoreError::Duplicate(_)), "{err}");
    assert!(store.clients().await.unwrap().is_empty());
    assert_eq!(store.latest_change().await.unwrap(), seen);

    let written = [batch("a", 2500, "bulk"), batch("b", 1001, "bulk")].concat();
    store.insert_clients(&written).await.unwrap();
    let mut stored = store.clients().await.unwrap();
    stored.sort_unstable_by(|a, b| a.id.as_str().cmp(b.id.as_str()));
    assert_eq!(stored, written);
    let changes = read_changes(store, seen, 1000).await.unwrap();
    assert_eq!(changes.clients.len(), 3501);
}

#[tokio::test]
async fn sqlite_writes_many_clients_all_or_none() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("t.db").display());
    batches(crate::open(&url).await.unwrap().as_ref()).await;
}

#[tokio::test]
async fn postgres_writes_many_clients_all_or_none() {
    let schema = crate::testing::scratch_postgres().await;
    batches(crate::open(&schema.url).await.unwrap().as_ref()).await;
}

/// A bound for a write that must fail rather than wait: far above
/// [`crate::WRITE_LOCK_TIMEOUT`], so that it only catches a write that waits for as long as
/// the lock is held.
const NOT_FOREVER: std::time::Duration = std::time::Duration::from_secs(30);

/// Issue 24 item 3: a registry write whose client went away mid-transaction leaves its
/// session idle in transaction, holding the registry's lock (and its row's) until
/// PostgreSQL drops it. The writes behind it, on every instance, fail with
/// [`StoreError::LockTimeout`] after [`crate::WRITE_LOCK_TIMEOUT`], writing nothing,
/// instead of waiting that long; reads and revocations (a lock of their own) go on; once
/// the session is gone, writes work. In a scratch database: the lock is the database's.
#[tokio::test]
async fn postgres_a_stuck_writer_fails_the_writes_behind_it_instead_of_holding_them() {
    use sqlx::Connection;
    let db = crate::testing::scratch_database().await;
    let store = crate::open(&db.url).await.unwrap();
    store.put_plan(&plan("p", "news-api")).await.unwrap();
    store.insert_client(&client("tc_held", "p")).await.unwrap();
    let seen = store.latest_change().await.unwrap();

    let mut session = sqlx::PgConnection::connect(&db.url).await.unwrap();
    let mut stuck = session.begin().await.unwrap();
    sqlx::query("UPDATE clients SET label = 'stuck' WHERE id = 'tc_held'")
        .execute(&mut *stuck)
        .await
        .unwrap();

    // Each waits on another lock the stuck write holds: the registry's, or its row's.
    let mut held = client("tc_held", "p");
    held.enabled = false;
    let new = client("tc_new", "p");
    let other_plan = plan("q", "news-api");
    let blocked = async {
        tokio::join!(
            store.insert_client(&new),
            store.update_client(&held),
            store.put_plan(&other_plan),
        )
    };
    let (insert, update, plan_put) = tokio::time::timeout(NOT_FOREVER, blocked)
        .await
        .expect("the writes fail instead of waiting for the stuck one");
    for outcome in [insert.map(|_| ()), update.map(|_| ()), plan_put] {
        let err = outcome.unwrap_err();
        assert!(matches!(err, StoreError::LockTimeout), "{err}");
        assert!(err.is_timeout());
        let said = err.to_string();
        assert!(
            said.contains("idle in transaction") && said.contains("nothing was written"),
            "{said}"
        );
    }
    // Meanwhile reads answer, a revocation is written, and nothing above was.
    assert!(store.client(&new.id).await.unwrap().is_none());
    assert!(store.client(&held.id).await.unwrap().unwrap().enabled);
    assert_eq!(store.latest_change().await.unwrap(), seen);
    let revoked = Revoked {
        jti: "j-during".into(),
        client_id: held.id.to_string(),
        exp: now() + 60,
    };
    store.revoke(&revoked).await.unwrap();

    // The stuck session is gone: every write goes through.
    stuck.rollback().await.unwrap();
    store.insert_client(&new).await.unwrap();
    assert!(store.update_client(&held).await.unwrap());
    store.put_plan(&other_plan).await.unwrap();
    assert!(!store.client(&held.id).await.unwrap().unwrap().enabled);
}

/// Each write runs under [`crate::WRITE_LOCK_TIMEOUT`] and
/// [`crate::WRITE_STATEMENT_TIMEOUT`], seen from inside it by a trigger; a statement that
/// PostgreSQL cancels (here by the test, as its `statement_timeout` would) is
/// [`StoreError::Cancelled`] and writes nothing.
#[tokio::test]
async fn postgres_writes_run_under_their_bounds_and_a_cancelled_one_says_so() {
    use sqlx::Connection;
    let schema = crate::testing::scratch_postgres().await;
    let store = crate::open(&schema.url).await.unwrap();
    store.put_plan(&plan("p", "news-api")).await.unwrap();
    let mut db = sqlx::PgConnection::connect(&schema.url).await.unwrap();
    sqlx::raw_sql(
        "CREATE TABLE seen_bounds (lock_timeout TEXT, statement_timeout TEXT);
         CREATE FUNCTION note_bounds() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             INSERT INTO seen_bounds VALUES
                 (current_setting('lock_timeout'), current_setting('statement_timeout'));
             IF NEW.label = 'slow' THEN PERFORM pg_sleep(600); END IF;
             RETURN NEW;
         END $$;
         CREATE TRIGGER note_bounds BEFORE INSERT OR UPDATE ON clients
             FOR EACH ROW EXECUTE FUNCTION note_bounds();",
    )
    .execute(&mut db)
    .await
    .unwrap();
    let seen = || async {
        sqlx::query_as::<_, (String, String)>("SELECT * FROM seen_bounds")
            .fetch_all(&mut sqlx::PgConnection::connect(&schema.url).await.unwrap())
            .await
            .unwrap()
    };

    store.insert_client(&client("tc_quick", "p")).await.unwrap();
    assert_eq!(seen().await, [("3s".to_owned(), "5s".to_owned())]);
    // The session's own settings are back after the write: a read is not bounded.
    let mut disabled = client("tc_quick", "p");
    disabled.enabled = false;
    assert!(store.update_client(&disabled).await.unwrap());
    assert_eq!(seen().await.len(), 2);
    assert!(seen()
        .await
        .iter()
        .all(|b| *b == ("3s".into(), "5s".into())));

    let mut slow = client("tc_slow", "p");
    slow.label = "slow".into();
    let write = tokio::spawn({
        let store = crate::open(&schema.url).await.unwrap();
        async move { store.insert_client(&slow).await }
    });
    // The write is running (asleep in the trigger): cancel it.
    let pid = loop {
        let sleeping: Option<i32> = sqlx::query_scalar(
            "SELECT pid FROM pg_stat_activity WHERE wait_event = 'PgSleep' \
             AND query LIKE 'INSERT INTO clients%' AND datname = current_database() \
             AND pid IN (SELECT pid FROM pg_locks WHERE relation = 'clients'::regclass)",
        )
        .fetch_optional(&mut db)
        .await
        .unwrap();
        if let Some(pid) = sleeping {
            break pid;
        }
        assert!(!write.is_finished(), "{:?}", write.await);
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    };
    sqlx::query("SELECT pg_cancel_backend($1)")
        .bind(pid)
        .execute(&mut db)
        .await
        .unwrap();
    let err = write.await.unwrap().unwrap_err();
    assert!(matches!(err, StoreError::Cancelled), "{err}");
    assert!(err.to_string().contains("nothing was written"), "{err}");
    let slow_id = ClientId::parse("tc_slow").unwrap();
    assert!(store.client(&slow_id).await.unwrap().is_none());
}

async fn read_changes(store: &dyn Store, mut after: i64, limit: u32) -> Option<Changes> {
    let mut all = Changes::default();
    loop {
        let page = store.changes_since(after, limit).await.unwrap()?;
        assert!(page.through >= after);
        after = page.through;
        all.plans.extend(page.plans);
        all.clients.extend(page.clients);
        all.keys.extend(page.keys);
        if !page.more {
            all.through = after;
            return Some(all);
        }
    }
}

/// Every write path of plans, clients and keys leaves a change that a reader gets back as
/// the row's current state or its tombstone, from the number it had read.
pub(crate) async fn change_log(store: &dyn Store) {
    assert_eq!(store.latest_change().await.unwrap(), 0);
    let empty = store.changes_since(0, 100).await.unwrap().unwrap();
    assert_eq!((empty.through, empty.more, empty.len()), (0, false, 0));

    let basic = plan("basic", "news-api");
    store.put_plan(&basic).await.unwrap();
    let mut c1 = client("c1", "basic");
    store
        .insert_clients(&[c1.clone(), client("c2", "basic"), client("c3", "basic")])
        .await
        .unwrap();
    let key = SigningKey {
        kid: "k1".into(),
        alg: Algorithm::EdDSA,
        public_jwk: "{}".into(),
        private_sealed: vec![9; 48],
        created_at: 10,
        activates_at: 10,
    };
    store.insert_key(&key).await.unwrap();
    let first = read_changes(store, 0, 100).await.unwrap();
    assert_eq!(first.plans, vec![("basic".to_owned(), Some(basic.clone()))]);
    let mut ids: Vec<&str> = first.clients.iter().map(|(id, _)| id.as_str()).collect();
    ids.sort_unstable();
    assert_eq!(ids, ["c1", "c2", "c3"]);
    assert!(first
        .clients
        .iter()
        .all(|(id, c)| c.as_ref().unwrap().id == *id));
    assert_eq!(first.keys, vec![("k1".to_owned(), Some(key.clone()))]);
    assert_eq!(store.latest_change().await.unwrap(), first.through);
    // Read in pages of one change, the same.
    let paged = read_changes(store, 0, 1).await.unwrap();
    assert_eq!(paged.len(), first.len());
    assert_eq!(paged.through, first.through);

    // A failed batch leaves no change behind.
    let seen = first.through;
    assert!(store
        .insert_clients(&[client("c4", "basic"), client("c5", "nope")])
        .await
        .is_err());
    assert!(!store
        .update_client(&client("ghost", "basic"))
        .await
        .unwrap());
    assert!(!store
        .delete_client(&ClientId::parse("ghost").unwrap())
        .await
        .unwrap());
    assert!(!store.delete_key("ghost").await.unwrap());
    let nothing = store.changes_since(seen, 100).await.unwrap().unwrap();
    assert_eq!((nothing.through, nothing.len()), (seen, 0));

    // Updates and deletes: the current row, or a tombstone; each id once.
    c1.enabled = false;
    store.update_client(&c1).await.unwrap();
    c1.label = "relabelled".into();
    store.update_client(&c1).await.unwrap();
    let c2 = ClientId::parse("c2").unwrap();
    assert!(store.delete_client(&c2).await.unwrap());
    let mut pro = plan("pro", "oms-api");
    store.put_plan(&pro).await.unwrap();
    pro.token_ttl = 60;
    store.put_plan(&pro).await.unwrap();
    assert!(store.delete_key("k1").await.unwrap());
    let second = read_changes(store, seen, 100).await.unwrap();
    assert!(second.through > seen);
    let mut clients = second.clients.clone();
    clients.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(clients, vec![(c1.id.clone(), Some(c1.clone())), (c2, None)]);
    assert_eq!(second.plans, vec![("pro".to_owned(), Some(pro))]);
    assert_eq!(second.keys, vec![("k1".to_owned(), None)]);

    // Pruned changes are gone, and a reader that had not read them is told so.
    store.prune_changes(seen).await.unwrap();
    assert_eq!(store.changes_since(0, 100).await.unwrap(), None);
    assert_eq!(store.changes_since(seen - 1, 100).await.unwrap(), None);
    let after_prune = read_changes(store, seen, 100).await.unwrap();
    assert_eq!(after_prune.len(), second.len());
    store.prune_changes(second.through).await.unwrap();
    // Numbers are not reused after a prune, and the latest stays where it was.
    assert_eq!(store.latest_change().await.unwrap(), second.through);
    store.update_client(&c1).await.unwrap();
    let third = read_changes(store, second.through, 100).await.unwrap();
    assert!(third.through > second.through);
    assert_eq!(third.clients, vec![(c1.id.clone(), Some(c1))]);

    // A page of clients in id order.
    let page = store.clients_page(None, None, 1).await.unwrap();
    assert_eq!(page.len(), 1);
    assert_eq!(page[0].id.as_str(), "c1");
    let rest = store.clients_page(None, Some("c1"), 10).await.unwrap();
    assert_eq!(rest.len(), 1);
    assert_eq!(rest[0].id.as_str(), "c3");
}

#[tokio::test]
async fn sqlite_keeps_the_contract() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("t.db").display());
    let store = crate::open(&url).await.unwrap();
    contract(store.as_ref()).await;
    // Reopening runs the migrations again without harm and sees the same data.
    drop(store);
    let again = crate::open(&url).await.unwrap();
    assert_eq!(again.plans().await.unwrap().len(), 2);
}

#[tokio::test]
async fn postgres_keeps_the_contract() {
    let schema = crate::testing::scratch_postgres().await;
    let store = crate::open(&schema.url).await.unwrap();
    contract(store.as_ref()).await;
    drop(store);
    let again = crate::open(&schema.url).await.unwrap();
    assert_eq!(again.plans().await.unwrap().len(), 2);
}

#[tokio::test]
async fn sqlite_keeps_the_change_log() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("t.db").display());
    change_log(crate::open(&url).await.unwrap().as_ref()).await;
}

#[tokio::test]
async fn postgres_keeps_the_change_log() {
    let schema = crate::testing::scratch_postgres().await;
    change_log(crate::open(&schema.url).await.unwrap().as_ref()).await;
}

/// Clients written concurrently, read incrementally as a polling instance reads them while
/// others write: every one is read, none is skipped.
async fn concurrent_changes_are_all_read(store: std::sync::Arc<dyn Store>) {
    store.put_plan(&plan("basic", "news-api")).await.unwrap();
    let writers: Vec<_> = (0..40)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                let batch = [
                    client(&format!("w{i}a"), "basic"),
                    client(&format!("w{i}b"), "basic"),
                ];
                store.insert_clients(&batch).await.unwrap();
            })
        })
        .collect();
    let mut seen = std::collections::HashSet::new();
    let mut last = 0;
    let mut read = |changes: Changes, last: &mut i64| {
        assert!(changes.through >= *last, "read in sequence order");
        *last = changes.through;
        for (id, _) in changes.clients {
            seen.insert(id);
        }
    };
    while writers.iter().any(|w| !w.is_finished()) {
        read(
            store.changes_since(last, 7).await.unwrap().unwrap(),
            &mut last,
        );
        tokio::task::yield_now().await;
    }
    for writer in writers {
        writer.await.unwrap();
    }
    loop {
        let changes = store.changes_since(last, 7).await.unwrap().unwrap();
        let more = changes.more;
        read(changes, &mut last);
        if !more {
            break;
        }
    }
    assert_eq!(seen.len(), 80, "an incremental reader missed a change");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_changes_written_concurrently_are_all_read() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("t.db").display());
    concurrent_changes_are_all_read(crate::open(&url).await.unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_changes_written_concurrently_are_all_read() {
    let schema = crate::testing::scratch_postgres().await;
    concurrent_changes_are_all_read(crate::open(&schema.url).await.unwrap()).await;
}

/// Concurrent revocations read incrementally, as a polling instance reads them while
/// others write: every one is read, none is skipped.
async fn concurrent_revocations_are_all_read(store: std::sync::Arc<dyn Store>) {
    let writers: Vec<_> = (0..40)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                let revoked = Revoked {
                    jti: format!("c{i}"),
                    client_id: "c1".into(),
                    exp: now() + 600,
                };
                store.revoke(&revoked).await.unwrap();
            })
        })
        .collect();
    let mut seen = std::collections::HashSet::new();
    let mut last = 0;
    let mut read = |batch: Vec<(i64, Revoked)>, last: &mut i64| {
        for (seq, revoked) in batch {
            assert!(seq > *last, "read in sequence order");
            *last = seq;
            seen.insert(revoked.jti);
        }
    };
    while writers.iter().any(|w| !w.is_finished()) {
        read(store.revoked_since(last, now()).await.unwrap(), &mut last);
        tokio::task::yield_now().await;
    }
    for writer in writers {
        writer.await.unwrap();
    }
    read(store.revoked_since(last, now()).await.unwrap(), &mut last);
    assert_eq!(seen.len(), 40, "an incremental reader missed a revocation");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_revocations_written_concurrently_are_all_read() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("t.db").display());
    concurrent_revocations_are_all_read(crate::open(&url).await.unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_revocations_written_concurrently_are_all_read() {
    let schema = crate::testing::scratch_postgres().await;
    concurrent_revocations_are_all_read(crate::open(&schema.url).await.unwrap()).await;
}

/// Audit events (issue 29): kept as given with rising ids, read the newest first, found by
/// a substring of any field in any case (a `%` or `_` in the text is no wildcard), paged
/// with `before`, and pruned by age and by count.
async fn audit_events(store: &dyn Store) {
    use crate::{AuditEvent, AuditQuery};
    let event = |at: i64, actor: &str, action: &str, object: &str| AuditEvent {
        id: 0,
        at,
        actor: actor.into(),
        action: action.into(),
        object: object.into(),
        source: "192.0.2.7".into(),
        channel: "console".into(),
    };
    let all = |text: &str, before: Option<i64>| AuditQuery {
        text: text.into(),
        before,
        limit: 100,
    };
    assert!(store.audit_events(&all("", None)).await.unwrap().is_empty());
    store
        .add_audit_event(&event(now() - 100, "tc_alice", "created", "plan:gold"))
        .await
        .unwrap();
    store
        .add_audit_event(&event(now() - 50, "tc_bob", "disabled", "client:tc_X1"))
        .await
        .unwrap();
    store
        .add_audit_event(&event(now(), "tc_alice", "deleted", "plan:100%_off"))
        .await
        .unwrap();
    let events = store.audit_events(&all("", None)).await.unwrap();
    assert_eq!(events.len(), 3);
    assert!(
        events[0].id > events[1].id && events[1].id > events[2].id,
        "newest first"
    );
    assert_eq!(
        events[1],
        AuditEvent {
            id: events[1].id,
            ..event(now() - 50, "tc_bob", "disabled", "client:tc_X1")
        }
    );
    let found = |text: &'static str| async move {
        store
            .audit_events(&all(text, None))
            .await
            .unwrap()
            .iter()
            .map(|e| e.action.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(found("TC_ALICE").await, ["deleted", "created"]);
    assert_eq!(found("client:tc_x").await, ["disabled"]);
    assert_eq!(found("100%_").await, ["deleted"]);
    assert!(found("0%o").await.is_empty(), "% is no wildcard");
    assert!(found("gold_").await.is_empty(), "_ is no wildcard");
    assert_eq!(found("192.0.2").await.len(), 3);
    let older = store
        .audit_events(&all("", Some(events[0].id)))
        .await
        .unwrap();
    assert_eq!(older.len(), 2);
    let one = AuditQuery {
        limit: 1,
        ..all("", None)
    };
    assert_eq!(store.audit_events(&one).await.unwrap()[0].action, "deleted");
    // By age: those before the bound go.
    store.prune_audit_events(now() - 60, 1_000).await.unwrap();
    assert_eq!(found("").await, ["deleted", "disabled"]);
    // By count: the newest stay.
    store.prune_audit_events(0, 1).await.unwrap();
    assert_eq!(found("").await, ["deleted"]);
    store.prune_audit_events(0, 0).await.unwrap();
    assert!(found("").await.is_empty());
}

/// A change and its audit event commit together (issue 29): the handle
/// [`Store::audited`] gives keeps the event with the first write that changes something, and
/// only then; a refused write (a plan still in use, a duplicate) keeps nothing, and a write
/// that changed nothing (an unknown client) leaves the event unkept for the caller.
async fn changes_and_their_audit_events_commit_together(store: &dyn Store) {
    use crate::{AuditEvent, AuditQuery};
    let event = |object: &str, action: &str| AuditEvent {
        id: 0,
        at: now(),
        actor: "Ada <ada@example.com> (sub 1 at https://idp.example)".into(),
        action: action.into(),
        object: object.into(),
        source: "192.0.2.7".into(),
        channel: "console".into(),
    };
    let kept = || async {
        store
            .audit_events(&AuditQuery {
                limit: 100,
                ..AuditQuery::default()
            })
            .await
            .unwrap()
            .into_iter()
            .map(|e| format!("{} {}", e.object, e.action))
            .collect::<Vec<_>>()
    };
    let audited = store.audited(event("plan:gold", "created"));
    audited.put_plan(&plan("gold", "news-api")).await.unwrap();
    assert!(audited.unkept_audit().is_none(), "kept with the plan");
    // A second write through the same handle keeps no second event.
    audited.put_plan(&plan("gold", "news-api")).await.unwrap();
    assert_eq!(kept().await, ["plan:gold created"]);

    // A new client: the store names it when the event has no object.
    let audited = store.audited(event("", "created on plan gold"));
    audited
        .insert_client(&client("tc_AUDITED1", "gold"))
        .await
        .unwrap();
    assert_eq!(kept().await[0], "client:tc_AUDITED1 created on plan gold");

    // Refused: the plan is in use, the client exists already. Nothing is kept.
    let audited = store.audited(event("plan:gold", "deleted"));
    assert_eq!(
        audited.delete_plan("gold").await.unwrap(),
        crate::PlanRemoval::InUse
    );
    let again = store.audited(event("client:tc_AUDITED1", "created"));
    assert!(again
        .insert_client(&client("tc_AUDITED1", "gold"))
        .await
        .is_err());
    assert!(again.unkept_audit().is_some());
    // An unknown client: nothing changed, nothing kept, the event handed back.
    let audited_unknown = store.audited(event("client:tc_NOBODY", "deleted"));
    assert!(!audited_unknown
        .delete_client(&ClientId::parse("tc_NOBODY").unwrap())
        .await
        .unwrap());
    assert_eq!(
        audited.unkept_audit().map(|e| e.action),
        Some("deleted".into())
    );
    assert!(audited_unknown.unkept_audit().is_some());
    assert_eq!(kept().await.len(), 2);
    // Reads through the handle see the store.
    assert_eq!(
        audited.plans().await.unwrap().len(),
        store.plans().await.unwrap().len()
    );
}

#[tokio::test]
async fn sqlite_commits_changes_with_their_audit_events() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("t.db").display());
    changes_and_their_audit_events_commit_together(crate::open(&url).await.unwrap().as_ref()).await;
}

#[tokio::test]
async fn postgres_commits_changes_with_their_audit_events() {
    let schema = crate::testing::scratch_postgres().await;
    changes_and_their_audit_events_commit_together(
        crate::open(&schema.url).await.unwrap().as_ref(),
    )
    .await;
}

#[tokio::test]
async fn sqlite_keeps_audit_events() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("t.db").display());
    audit_events(crate::open(&url).await.unwrap().as_ref()).await;
}

#[tokio::test]
async fn postgres_keeps_audit_events() {
    let schema = crate::testing::scratch_postgres().await;
    audit_events(crate::open(&schema.url).await.unwrap().as_ref()).await;
}

/// Organizations (issue 28): created once, read back, changed with their clients in one
/// transaction (a plan move and a disable are each one logged change per client, read by
/// the change log), kept while they have clients, and deleted with them only when asked.
async fn orgs(store: &dyn Store) {
    store.put_plan(&plan("basic", "news-api")).await.unwrap();
    store
        .put_plan(&plan("pro", "news-api oms-api"))
        .await
        .unwrap();
    let acme = crate::Org {
        id: "acme".into(),
        name: "Acme Trading".into(),
        plan: "basic".into(),
        enabled: true,
        created_at: now(),
        updated_at: now(),
    };
    store.insert_org(&acme).await.unwrap();
    assert!(matches!(
        store.insert_org(&acme).await,
        Err(StoreError::Duplicate(_))
    ));
    let ghost = crate::Org {
        id: "ghost".into(),
        plan: "nope".into(),
        ..acme.clone()
    };
    assert!(matches!(
        store.insert_org(&ghost).await,
        Err(StoreError::UnknownPlan(p)) if p == "nope"
    ));
    assert_eq!(store.orgs().await.unwrap(), std::slice::from_ref(&acme));
    assert_eq!(store.org("acme").await.unwrap(), Some(acme.clone()));
    assert_eq!(store.org("ghost").await.unwrap(), None);

    // Two clients of the organization, one without.
    let member = |id: &str| Client {
        org: Some("acme".into()),
        ..client(id, "basic")
    };
    store
        .insert_clients(&[member("a1"), member("a2"), client("solo", "basic")])
        .await
        .unwrap();
    assert_eq!(
        store.clients_per_org().await.unwrap(),
        [("acme".to_owned(), 2)]
    );
    let ids = |clients: Vec<Client>| -> Vec<String> {
        clients.iter().map(|c| c.id.to_string()).collect()
    };
    assert_eq!(ids(store.org_clients("acme").await.unwrap()), ["a1", "a2"]);
    let a1 = store.client(&ClientId::parse("a1").unwrap()).await.unwrap();
    assert_eq!(a1.as_ref().and_then(|c| c.org.as_deref()), Some("acme"));
    // A packed page (SQLite) reads the organization too.
    let page = store.clients_page(None, None, 10).await.unwrap();
    assert_eq!(page[0].org.as_deref(), Some("acme"));
    assert!(page[0].org_enabled);
    assert_eq!(page[2].org, None);

    // A plan move and a disable reach each client as a logged change; the other is untouched.
    let after = store.latest_change().await.unwrap();
    let moved = crate::Org {
        plan: "pro".into(),
        enabled: false,
        updated_at: now() + 1,
        ..acme.clone()
    };
    assert!(store.update_org(&moved).await.unwrap());
    assert_eq!(store.org("acme").await.unwrap(), Some(moved.clone()));
    let changes = read_changes(store, after, 100).await.unwrap();
    let mut changed: Vec<(String, String, bool)> = changes
        .clients
        .iter()
        .map(|(id, c)| {
            let c = c.as_ref().unwrap();
            (id.to_string(), c.plan.clone(), c.org_enabled)
        })
        .collect();
    changed.sort();
    assert_eq!(
        changed,
        [
            ("a1".to_owned(), "pro".to_owned(), false),
            ("a2".to_owned(), "pro".to_owned(), false)
        ]
    );
    let a1 = store
        .client(&ClientId::parse("a1").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert!(a1.enabled && !a1.org_enabled && !a1.active());
    let solo = store
        .client(&ClientId::parse("solo").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!((solo.plan.as_str(), solo.active()), ("basic", true));
    // A client's own update keeps its organization's plan, whatever plan it carries.
    let stale = Client {
        plan: "basic".into(),
        label: "renamed".into(),
        ..a1.clone()
    };
    assert!(store.update_client(&stale).await.unwrap());
    let a1 = store.client(&a1.id).await.unwrap().unwrap();
    assert_eq!((a1.plan.as_str(), a1.label.as_str()), ("pro", "renamed"));
    // Unknown organizations and plans.
    assert!(!store
        .update_org(&crate::Org {
            id: "ghost".into(),
            ..moved.clone()
        })
        .await
        .unwrap());
    assert!(matches!(
        store
            .update_org(&crate::Org {
                plan: "nope".into(),
                ..moved.clone()
            })
            .await,
        Err(StoreError::UnknownPlan(_))
    ));
    // A plan an organization is on stays, even without clients on it.
    store.put_plan(&plan("spare", "news-api")).await.unwrap();
    let spare = crate::Org {
        id: "spare-org".into(),
        plan: "spare".into(),
        ..acme.clone()
    };
    store.insert_org(&spare).await.unwrap();
    assert_eq!(
        store.delete_plan("spare").await.unwrap(),
        PlanRemoval::InUse
    );

    // Deleting: kept while it has clients, unless they go with it; nothing half done.
    assert_eq!(
        store.delete_org("acme", false).await.unwrap(),
        crate::OrgRemoval::HasClients
    );
    assert_eq!(store.org_clients("acme").await.unwrap().len(), 2);
    assert_eq!(
        store.delete_org("acme", true).await.unwrap(),
        crate::OrgRemoval::Removed
    );
    assert_eq!(store.org("acme").await.unwrap(), None);
    assert_eq!(ids(store.clients().await.unwrap()), ["solo"]);
    assert_eq!(
        store.delete_org("acme", true).await.unwrap(),
        crate::OrgRemoval::Unknown
    );
    assert_eq!(
        store.delete_org("spare-org", false).await.unwrap(),
        crate::OrgRemoval::Removed
    );
    assert_eq!(
        store.delete_plan("spare").await.unwrap(),
        PlanRemoval::Removed
    );
}

#[tokio::test]
async fn sqlite_keeps_the_org_contract() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("t.db").display());
    orgs(crate::open(&url).await.unwrap().as_ref()).await;
}

#[tokio::test]
async fn postgres_keeps_the_org_contract() {
    let schema = crate::testing::scratch_postgres().await;
    orgs(crate::open(&schema.url).await.unwrap().as_ref()).await;
}
