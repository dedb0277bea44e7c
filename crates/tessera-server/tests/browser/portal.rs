//! The console as an organization's developer portal in Chromium (issue 28 item 5): acme's
//! own admin signs in, sees acme only, creates a client and uses its secret, disables it,
//! and is shown "Not found" for another customer's page; also at a phone's width.

use fantoccini::Locator;
use serde_json::{json, Value};
use tessera_testkit::spawn_app;

use super::{browser_programs, launch, token};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_organization_admin_uses_its_portal_in_chromium() {
    let Some((chromium, chromedriver)) = browser_programs() else {
        return;
    };
    let app = spawn_app().await;
    app.registrar()
        .set_plan("partner", "market-data-api tessera-org-admin", None)
        .await
        .unwrap();
    for (org, name) in [("acme", "Acme Trading"), ("beta", "Beta Capital")] {
        app.registrar()
            .create_org(org, name, "partner")
            .await
            .unwrap();
    }
    let (admin_id, admin_secret) = app.client_of_org("acme", "acme-admin").await;
    let (beta_app, _) = app.client_of_org("beta", "beta-billing").await;
    let (_driver, _profile, mut browser) = launch(&chromium, &chromedriver, &app).await;

    browser.open("/console/sign-in").await;
    browser.fill("#client_id", admin_id.as_str()).await;
    browser.fill("#client_secret", admin_secret.expose()).await;
    browser.press("Sign in").await;
    assert_eq!(browser.path().await, "/console/orgs/acme");
    assert!(browser.text("header").await.contains("admin of acme"));
    let nav = browser.text("header nav").await;
    assert_eq!(nav.trim(), "Your organization", "{nav}");
    assert!(browser
        .text("#org-scopes")
        .await
        .contains("market-data-api"));
    browser.screenshot("portal").await;

    // A client of acme: its secret works.
    browser.fill("#org-client-name", "acme-reports").await;
    browser.press("Create client").await;
    let id = browser.text("#client-id").await;
    let secret = browser.text("#client-secret").await;
    assert_eq!(token(&app, &id, &secret).await, 200);
    let exported = browser.text("#snippet-env").await;
    assert!(
        exported.contains("TESSERA_SCOPES='market-data-api'"),
        "{exported}"
    );
    browser.screenshot("portal-client-created").await;

    // Disabled from its page, after a confirmation.
    browser
        .open(&format!("/console/orgs/acme/clients/{id}"))
        .await;
    browser.press("Disable client…").await;
    browser.press(&format!("Disable {id}")).await;
    assert!(browser.text("#client-state").await.starts_with("disabled"));
    assert_eq!(token(&app, &id, &secret).await, 401);

    // Another customer's pages are not found, as made-up ones are.
    for path in [
        "/console/orgs/beta".to_owned(),
        format!("/console/orgs/acme/clients/{beta_app}"),
        "/console/clients".to_owned(),
    ] {
        browser
            .client
            .goto(&format!("{}{path}", browser.base))
            .await
            .unwrap();
        assert_eq!(browser.text("h1").await, "Not found", "{path}");
        let page = browser.text("main").await;
        assert!(
            !page.contains("Beta Capital") && !page.contains("beta-billing"),
            "{page}"
        );
        browser.forget_log().await;
    }

    // At a phone's width.
    browser.client.set_window_size(375, 800).await.unwrap();
    browser.open("/console/orgs/acme").await;
    let width: Value = browser
        .client
        .execute(
            "return document.documentElement.scrollWidth <= window.innerWidth;",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(width, json!(true), "no sideways scrolling at 375 px");
    browser.screenshot("portal-375px").await;
    browser
        .client
        .find(Locator::Css("header"))
        .await
        .expect("the header");
    browser.client.close().await.unwrap();
}
