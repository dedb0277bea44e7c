//! The console as an organization's developer portal (issue 28 item 5): a client of
//! organization `acme` whose plan grants `tessera-org-admin` signs in and sees acme only,
//! manages acme's clients, and reaches nothing else, tried as an attacker would, with
//! another customer's (`beta`'s) ids in paths and forms; the database is checked
//! afterwards. And the provider deletes an organization from its page.

use reqwest::StatusCode;
use tessera_proto::{ClientId, ClientSecret};
use tessera_store::AuditQuery;
use tessera_testkit::{spawn_app, TestApp};

use crate::console::{admin, hidden, location, page_of, Visitor};

/// Two customers on plan `portal` (`news-api tessera-org-admin`): acme with its admin and
/// an application, beta with an application.
struct Customers {
    app: TestApp,
    acme_admin: (ClientId, ClientSecret),
    acme_app: ClientId,
    beta_app: (ClientId, ClientSecret),
}

async fn customers() -> Customers {
    let app = spawn_app().await;
    app.registrar()
        .set_plan("portal", "news-api tessera-org-admin", None)
        .await
        .unwrap();
    for org in ["acme", "beta"] {
        app.registrar()
            .create_org(org, &format!("{org} Ltd"), "portal")
            .await
            .unwrap();
    }
    let acme_admin = app.client_of_org("acme", "acme-admin").await;
    let (acme_app, _) = app.client_of_org("acme", "acme-billing").await;
    let beta_app = app.client_of_org("beta", "beta-billing").await;
    Customers {
        app,
        acme_admin,
        acme_app,
        beta_app,
    }
}

async fn news_token_status(app: &TestApp, id: &ClientId, secret: &ClientSecret) -> u16 {
    app.token(id, secret, "grant_type=client_credentials&scope=news-api")
        .await
        .status()
        .as_u16()
}

/// acme's admin signs in to acme's page, which shows acme's clients, its scopes and its
/// usage, and no way to change the organization itself.
#[tokio::test]
async fn an_organization_admin_signs_in_to_its_own_organization() {
    let c = customers().await;
    let mut visitor = Visitor::new(&c.app);
    let signed_in = visitor
        .sign_in(c.acme_admin.0.as_str(), c.acme_admin.1.expose())
        .await;
    assert_eq!(signed_in.status(), StatusCode::SEE_OTHER);
    assert_eq!(location(&signed_in), "/console/orgs/acme");
    let overview = visitor.get("/console/").await;
    assert_eq!(overview.status(), StatusCode::SEE_OTHER);
    assert_eq!(location(&overview), "/console/orgs/acme");

    let (status, page) = page_of(visitor.get("/console/orgs/acme").await).await;
    assert_eq!(status, StatusCode::OK);
    let clients = page
        .split("id=\"org-clients\"")
        .nth(1)
        .expect("its clients");
    assert!(clients.contains(c.acme_app.as_str()), "{clients}");
    assert!(
        clients.contains(&format!(
            "href=\"/console/orgs/acme/clients/{}\"",
            c.acme_app
        )),
        "its clients' pages are the portal's: {clients}"
    );
    assert!(!page.contains(c.beta_app.0.as_str()), "{page}");
    assert!(
        page.contains("news-api tessera-org-admin"),
        "its scopes: {page}"
    );
    assert!(page.contains("admin of acme"), "{page}");
    assert!(
        page.contains("Create a client in this organization"),
        "{page}"
    );
    // The navigation is its organization only; no form changes the organization.
    for absent in [
        "href=\"/console/plans",
        "href=\"/console/keys\"",
        "href=\"/console/activity\"",
        "href=\"/console/orgs\"",
        "Disable organization",
        "Move it and all its clients",
        "Delete organization",
    ] {
        assert!(!page.contains(absent), "{absent} on {page}");
    }
}

/// Everything outside acme answers 404, whether it exists or not, and every change tried
/// there, or to acme itself, changes nothing in the database.
#[tokio::test]
async fn an_organization_admin_reaches_nothing_outside_its_organization() {
    let c = customers().await;
    let app = &c.app;
    let (beta_app, beta_secret) = &c.beta_app;
    let mut visitor = Visitor::new(app);
    visitor
        .sign_in(c.acme_admin.0.as_str(), c.acme_admin.1.expose())
        .await;
    let page = visitor
        .get("/console/orgs/acme")
        .await
        .text()
        .await
        .unwrap();
    let csrf = hidden(&page, "csrf");

    let outside = [
        "/console/plans".to_owned(),
        "/console/plans/portal".to_owned(),
        "/console/clients".to_owned(),
        "/console/clients/new".to_owned(),
        format!("/console/clients/{}", c.acme_app),
        format!("/console/clients/{beta_app}"),
        format!("/console/clients/{beta_app}/delete"),
        "/console/keys".to_owned(),
        "/console/activity".to_owned(),
        "/console/orgs".to_owned(),
        "/console/orgs/beta".to_owned(),
        "/console/orgs/ghost".to_owned(),
        format!("/console/orgs/beta/clients/{beta_app}"),
        format!("/console/orgs/beta/clients/{beta_app}/delete"),
        format!("/console/orgs/acme/clients/{beta_app}"),
        "/console/orgs/acme/clients/tc_ghost".to_owned(),
        format!("/console/orgs/acme/clients/{beta_app}/delete"),
        "/console/orgs/acmeX".to_owned(),
    ];
    let mut bodies = Vec::new();
    for path in &outside {
        let (status, body) = page_of(visitor.get(path).await).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}: {body}");
        assert!(
            !body.contains("beta Ltd") && !body.contains("beta-billing"),
            "{path}: {body}"
        );
        bodies.push(body);
    }
    // beta's client's page reads as a made-up one's.
    let of = |path: &str| &bodies[outside.iter().position(|p| p == path).unwrap()];
    assert_eq!(
        of(&format!("/console/orgs/acme/clients/{beta_app}")).replace(beta_app.as_str(), "X"),
        of("/console/orgs/acme/clients/tc_ghost").replace("tc_ghost", "X"),
    );

    let before_clients = app.store.clients().await.unwrap();
    let before_orgs = app.store.orgs().await.unwrap();
    let forms: Vec<(String, Vec<(&str, &str)>)> = vec![
        // beta, and beta's client through acme's pages.
        (
            "/console/orgs/beta/change".into(),
            vec![("enabled", "false"), ("confirmed", "yes")],
        ),
        (
            "/console/orgs/beta/delete".into(),
            vec![("with_clients", "true"), ("confirmed", "yes")],
        ),
        (
            "/console/orgs/beta/clients".into(),
            vec![("name", "planted")],
        ),
        (
            format!("/console/orgs/beta/clients/{beta_app}/change"),
            vec![("enabled", "false"), ("confirmed", "yes")],
        ),
        (
            format!("/console/orgs/acme/clients/{beta_app}/change"),
            vec![("enabled", "false"), ("confirmed", "yes")],
        ),
        (
            format!("/console/orgs/acme/clients/{beta_app}/rotate"),
            vec![("grace_secs", "0"), ("confirmed", "yes")],
        ),
        (
            format!("/console/orgs/acme/clients/{beta_app}/delete"),
            vec![("confirmed", "yes")],
        ),
        // The provider's pages.
        (
            format!("/console/clients/{beta_app}/change"),
            vec![("enabled", "false"), ("confirmed", "yes")],
        ),
        (
            format!("/console/clients/{}/change", c.acme_app),
            vec![("plan", "portal")],
        ),
        (
            "/console/clients".into(),
            vec![("plan", "portal"), ("name", "planted")],
        ),
        (
            "/console/plans".into(),
            vec![("name", "stolen"), ("scopes", "tessera-admin")],
        ),
        (
            "/console/orgs".into(),
            vec![("id", "planted"), ("plan", "portal")],
        ),
        // acme itself: its admin manages its clients, not the organization.
        (
            "/console/orgs/acme/change".into(),
            vec![("enabled", "false"), ("confirmed", "yes")],
        ),
        ("/console/orgs/acme/change".into(), vec![("plan", "portal")]),
        (
            "/console/orgs/acme/delete".into(),
            vec![("with_clients", "true"), ("confirmed", "yes")],
        ),
    ];
    for (path, fields) in &forms {
        let mut form = vec![("csrf", csrf.as_str()), ("etag", "*")];
        form.extend(fields.iter().copied());
        let answer = visitor.post(path, &form).await;
        let status = answer.status();
        match status {
            // Refused by the admin API after the page's redirect: the flash says why.
            StatusCode::SEE_OTHER => {
                let back = location(&answer).to_owned();
                assert!(
                    back.starts_with("/console/orgs/acme"),
                    "{path} went to {back}"
                );
                let shown = visitor.get(&back).await.text().await.unwrap();
                assert!(shown.contains("class=\"flash error\""), "{path}: {shown}");
            }
            StatusCode::NOT_FOUND | StatusCode::FORBIDDEN => {}
            other => panic!("{path}: {other}"),
        }
    }
    assert_eq!(
        app.store.clients().await.unwrap(),
        before_clients,
        "no client changed"
    );
    assert_eq!(
        app.store.orgs().await.unwrap(),
        before_orgs,
        "no organization changed"
    );
    assert!(!app
        .store
        .plans()
        .await
        .unwrap()
        .iter()
        .any(|p| p.name == "stolen"));
    assert_eq!(news_token_status(app, beta_app, beta_secret).await, 200);
}

/// acme's admin creates a client in acme from its page (the quick start asks for acme's
/// APIs, not Tessera's own scope), then disables, enables, rotates and deletes it; each
/// change is audited as acme's admin's, through the console.
#[tokio::test]
async fn an_organization_admin_manages_its_clients_from_the_portal() {
    let c = customers().await;
    let app = &c.app;
    let mut visitor = Visitor::new(app);
    visitor
        .sign_in(c.acme_admin.0.as_str(), c.acme_admin.1.expose())
        .await;
    let page = visitor
        .get("/console/orgs/acme")
        .await
        .text()
        .await
        .unwrap();
    let csrf = hidden(&page, "csrf");
    let key = hidden(&page, "idempotency_key");

    let (status, shown) = page_of(
        visitor
            .post(
                "/console/orgs/acme/clients",
                &[
                    ("csrf", &csrf),
                    ("idempotency_key", &key),
                    ("name", "acme-reports"),
                ],
            )
            .await,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{shown}");
    let marker = "id=\"client-id\">";
    let start = shown.find(marker).expect("the new client's id") + marker.len();
    let id = ClientId::parse(shown[start..].split('<').next().unwrap()).unwrap();
    let marker = "id=\"client-secret\">";
    let start = shown.find(marker).expect("its secret") + marker.len();
    let secret = ClientSecret::new(shown[start..].split('<').next().unwrap().to_owned());
    assert!(shown.contains("TESSERA_SCOPES='news-api'"), "{shown}");
    let stored = app.store.client(&id).await.unwrap().unwrap();
    assert_eq!(stored.org.as_deref(), Some("acme"));
    assert_eq!(stored.label, "acme-reports");
    app.sync().await;
    assert_eq!(news_token_status(app, &id, &secret).await, 200);

    let client_page = format!("/console/orgs/acme/clients/{id}");
    let (status, page) = page_of(visitor.get(&client_page).await).await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("← Organization acme"), "{page}");
    assert!(!page.contains("Move to plan"), "{page}");
    assert!(!page.contains("Last refusals"), "{page}");
    let etag = hidden(&page, "etag").replace("&quot;", "\"");

    // Disable, after a confirmation.
    let change = format!("{client_page}/change");
    let first = [
        ("csrf", csrf.as_str()),
        ("etag", etag.as_str()),
        ("enabled", "false"),
    ];
    let (status, asked) = page_of(visitor.post(&change, &first).await).await;
    assert_eq!(status, StatusCode::OK);
    assert!(asked.contains(&format!("Disable {id}")), "{asked}");
    assert!(app.store.client(&id).await.unwrap().unwrap().enabled);
    let mut confirmed = first.to_vec();
    confirmed.push(("confirmed", "yes"));
    assert_eq!(
        location(&visitor.post(&change, &confirmed).await),
        client_page
    );
    assert!(!app.store.client(&id).await.unwrap().unwrap().enabled);
    let page = visitor.get(&client_page).await.text().await.unwrap();
    let etag = hidden(&page, "etag").replace("&quot;", "\"");
    visitor
        .post(
            &change,
            &[("csrf", &csrf), ("etag", &etag), ("enabled", "true")],
        )
        .await;
    assert!(app.store.client(&id).await.unwrap().unwrap().enabled);

    // Rotate, at once.
    let before = app.store.client(&id).await.unwrap().unwrap().credential;
    let (status, rotated) = page_of(
        visitor
            .post(
                &format!("{client_page}/rotate"),
                &[("csrf", &csrf), ("grace_secs", "0"), ("confirmed", "yes")],
            )
            .await,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert!(rotated.contains("id=\"client-secret\""), "{rotated}");
    assert_ne!(
        app.store.client(&id).await.unwrap().unwrap().credential,
        before
    );

    // Delete, after a confirmation.
    let page = visitor.get(&client_page).await.text().await.unwrap();
    let etag = hidden(&page, "etag").replace("&quot;", "\"");
    let delete = format!("{client_page}/delete");
    let (status, asked) = page_of(
        visitor
            .post(&delete, &[("csrf", &csrf), ("etag", &etag)])
            .await,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert!(asked.contains(&format!("Delete {id}")), "{asked}");
    assert!(app.store.client(&id).await.unwrap().is_some());
    let done = visitor
        .post(
            &delete,
            &[("csrf", &csrf), ("etag", &etag), ("confirmed", "yes")],
        )
        .await;
    assert_eq!(location(&done), "/console/orgs/acme");
    assert!(app.store.client(&id).await.unwrap().is_none());

    let events = app
        .store
        .audit_events(&AuditQuery {
            text: format!("client:{id}"),
            before: None,
            limit: 20,
        })
        .await
        .unwrap();
    assert_eq!(
        events.len(),
        5,
        "create, disable, enable, rotate, delete: {events:?}"
    );
    for event in &events {
        assert_eq!(event.object, format!("org:acme/client:{id}"));
        assert_eq!(event.actor, c.acme_admin.0.as_str());
        assert_eq!(event.channel, "console");
    }
}

/// `tessera-org-admin` on a client of no organization is no admin of anything: the
/// console refuses the sign-in, as the admin API refuses its token.
#[tokio::test]
async fn the_org_admin_scope_without_an_organization_does_not_sign_in() {
    let app = spawn_app().await;
    let (id, secret) = admin(&app, "loose", "news-api tessera-org-admin").await;
    let mut visitor = Visitor::new(&app);
    let (status, page) = page_of(visitor.sign_in(id.as_str(), secret.expose()).await).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(page.contains("tessera-org-admin"), "{page}");
    assert!(visitor.cookie("tessera_console").is_empty(), "no session");
}

/// The provider deletes an organization from its page: after a confirmation, and with its
/// clients only when the form says so (else refused, and nothing is deleted).
#[tokio::test]
async fn the_provider_deletes_an_organization_after_a_confirmation() {
    let c = customers().await;
    let app = &c.app;
    let (id, secret) = admin(app, "ops", "tessera-admin").await;
    let mut visitor = Visitor::new(app);
    visitor.sign_in(id.as_str(), secret.expose()).await;
    let page = visitor
        .get("/console/orgs/beta")
        .await
        .text()
        .await
        .unwrap();
    assert!(
        page.contains("href=\"/console/orgs/beta/delete\""),
        "{page}"
    );
    let (status, asked) = page_of(visitor.get("/console/orgs/beta/delete").await).await;
    assert_eq!(status, StatusCode::OK);
    assert!(asked.contains("It has 1 client(s)"), "{asked}");
    assert!(asked.contains("name=\"with_clients\""), "{asked}");
    let csrf = hidden(&asked, "csrf");
    let etag = hidden(&asked, "etag").replace("&quot;", "\"");

    // Without its clients: refused, as the admin API refuses it.
    let refused = visitor
        .post(
            "/console/orgs/beta/delete",
            &[("csrf", &csrf), ("etag", &etag), ("confirmed", "yes")],
        )
        .await;
    assert_eq!(location(&refused), "/console/orgs/beta");
    let shown = visitor
        .get("/console/orgs/beta")
        .await
        .text()
        .await
        .unwrap();
    assert!(shown.contains("class=\"flash error\""), "{shown}");
    assert!(app.store.org("beta").await.unwrap().is_some());
    assert!(app.store.client(&c.beta_app.0).await.unwrap().is_some());

    let done = visitor
        .post(
            "/console/orgs/beta/delete",
            &[
                ("csrf", &csrf),
                ("etag", &etag),
                ("confirmed", "yes"),
                ("with_clients", "true"),
            ],
        )
        .await;
    assert_eq!(location(&done), "/console/orgs");
    assert!(app.store.org("beta").await.unwrap().is_none());
    assert!(app.store.client(&c.beta_app.0).await.unwrap().is_none());
    assert!(app.store.org("acme").await.unwrap().is_some(), "only beta");
    let list = visitor.get("/console/orgs").await.text().await.unwrap();
    assert!(
        list.contains("Organization beta deleted with its clients."),
        "{list}"
    );
}
