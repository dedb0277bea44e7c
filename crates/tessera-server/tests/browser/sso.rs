//! Single sign-on for the console in Chromium (issue 29), against a real OpenID Connect
//! provider the test starts: node-oidc-provider (`tests/oidc-provider`, pinned by its
//! package-lock.json, installed by `.ci/run`), with its own login page. People sign in as an
//! admin and as a reader, an admin's change is on the activity page under the person's name,
//! the reader is refused a change, a person in no group is refused, and a tampered `state`
//! or a `nonce` changed on the way is refused.
//!
//! Without `node` or the provider's `node_modules` the test says so and passes, except under
//! CI, where it fails.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use fantoccini::Locator;
use serde_json::{json, Value};
use tessera_testkit::spawn_with;

use super::{browser_programs, find, launch, Browser};

const CLIENT_ID: &str = "tessera-console";
const SECRET: &str = "a-secret-of-the-test-provider";

/// The provider, stopped when dropped.
struct OidcProvider {
    child: Child,
    issuer: String,
}

impl Drop for OidcProvider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The provider's folder.
fn provider_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/oidc-provider")
}

/// Starts the provider on a port of its own choosing, read from its first line
/// (`ready ISSUER`); `None` where node or its modules are missing (a failure under CI).
fn start_provider() -> Option<OidcProvider> {
    let dir = provider_dir();
    let (Some(node), true) = (
        find("node"),
        dir.join("node_modules/oidc-provider").is_dir(),
    ) else {
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("CI=true but node or tests/oidc-provider/node_modules is missing: .ci/run installs them");
        }
        eprintln!(
            "\n*** SKIPPED the console's single sign-on browser test: no node, or no \
             tests/oidc-provider/node_modules (npm ci --prefix {}; .ci/run does) ***\n",
            dir.display()
        );
        return None;
    };
    let mut child = Command::new(node)
        .arg("provider.mjs")
        .args([CLIENT_ID, SECRET])
        .current_dir(&dir)
        // Its standard input closing (this process gone) stops it.
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("node starts");
    let mut lines = std::io::BufReader::new(child.stdout.take().expect("piped")).lines();
    let issuer = match lines.next() {
        Some(Ok(line)) => line
            .strip_prefix("ready ")
            .unwrap_or_else(|| panic!("the provider said {line:?}"))
            .to_owned(),
        other => panic!("the provider ended before it was ready: {other:?}"),
    };
    std::thread::spawn(move || lines.for_each(drop));
    Some(OidcProvider { child, issuer })
}

impl Browser {
    /// Signs in through the provider's own login page as `login` (any password), from the
    /// console's sign-in page; ends where the console leads after.
    async fn sign_in_as(&mut self, login: &str) {
        self.client.delete_all_cookies().await.unwrap();
        self.forget_log().await;
        self.open("/console/sign-in").await;
        self.click_away(Locator::Css("#sso")).await;
        self.provider_login(login).await;
    }

    /// At the provider's login page: its form, as a person fills it in, and its
    /// confirmation.
    async fn provider_login(&mut self, login: &str) {
        self.fill("input[name=login]", login).await;
        self.fill("input[name=password]", "any password").await;
        self.click_away(Locator::Css("button[type=submit]")).await;
        // The provider asks a loopback (native) client's user to confirm, every time.
        if self.path().await.starts_with("/interaction/") {
            self.click_away(Locator::XPath("//button[normalize-space()='Continue']"))
                .await;
        }
        // The console's answer goes on to the console by itself (a refresh to /console/),
        // or shows the sign-in page with what went wrong.
        let ended = "return document.readyState === 'complete' && \
             (location.pathname === '/console/' || \
              (location.pathname.endsWith('/callback') && \
               document.querySelector('[role=alert]') !== null));";
        tessera_testkit::until("the sign-in ends on a page of the console", || async {
            self.client.execute(ended, vec![]).await.ok() == Some(json!(true))
        })
        .await;
    }

    /// The alert on the page, if any.
    async fn alert(&self) -> String {
        match self.client.find(Locator::Css("[role=alert]")).await {
            Ok(alert) => alert.text().await.unwrap(),
            Err(_) => String::new(),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn people_sign_in_with_the_companys_provider_in_chromium() {
    let Some((chromium, chromedriver)) = browser_programs() else {
        return;
    };
    let Some(provider) = start_provider() else {
        return;
    };
    let secret = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(secret.path(), SECRET).unwrap();
    let (issuer, path) = (provider.issuer.clone(), secret.path().to_owned());
    let app = spawn_with(move |s| {
        // The provider is on loopback, as in a closed network.
        s.config.allow_private_jwks_uri = true;
        s.config.console_oidc_issuer = Some(issuer);
        s.config.console_oidc_client_id = Some(CLIENT_ID.into());
        s.config.console_oidc_client_secret_file = Some(path);
        s.config.console_admin_group = Some("tessera-admins".into());
        s.config.console_read_group = Some("tessera-readers".into());
    })
    .await;
    let (_driver, _profile, mut browser) = launch(&chromium, &chromedriver, &app).await;

    // The sign-in page offers single sign-on; the provider's login page signs Ada in.
    browser.open("/console/").await;
    assert_eq!(browser.path().await, "/console/sign-in");
    browser.screenshot("sso-sign-in").await;
    browser.sign_in_as("ada").await;
    assert_eq!(
        browser.path().await,
        "/console/",
        "{}",
        browser.alert().await
    );
    browser.forget_log().await;
    browser.open("/console/").await;
    let header = browser.text("header").await;
    assert!(
        header.contains("Ada Lovelace") && !header.contains("read-only"),
        "{header}"
    );

    // Her change is on the activity page, under her name.
    browser.open("/console/plans").await;
    browser.fill("#plan-name", "partner").await;
    browser.fill("#plan-scopes", "market-data-api").await;
    browser.press("Create plan").await;
    assert!(browser
        .text(".flash")
        .await
        .contains("Plan partner created"));
    browser.open("/console/activity").await;
    let activity = browser.text("#activity").await;
    assert!(
        activity.contains("Ada Lovelace <ada@example.com> (sub ada at http://127.0.0.1:"),
        "{activity}"
    );
    browser.screenshot("sso-activity").await;
    browser.client.set_window_size(375, 800).await.unwrap();
    browser.open("/console/activity").await;
    browser.screenshot("sso-activity-375px").await;
    browser.client.set_window_size(1280, 900).await.unwrap();
    browser.press("Sign out").await;

    // Grace, a reader: every page, no forms; a change posted all the same is refused.
    browser.sign_in_as("grace").await;
    assert_eq!(
        browser.path().await,
        "/console/",
        "{}",
        browser.alert().await
    );
    browser.forget_log().await;
    browser.open("/console/plans").await;
    let header = browser.text("header").await;
    assert!(
        header.contains("Grace Hopper") && header.contains("read-only"),
        "{header}"
    );
    assert!(browser.text("main").await.contains("partner"));
    assert!(browser
        .client
        .find(Locator::XPath("//button[normalize-space()='Create plan']"))
        .await
        .is_err());
    browser.screenshot("sso-reader").await;
    // The form a reader is not shown, built from the session's own CSRF token and posted.
    browser
        .client
        .execute(
            "var f = document.createElement('form'); f.method = 'post'; \
             f.action = '/console/plans'; \
             [['csrf', document.querySelector('input[name=csrf]').value], \
              ['name', 'sneaky'], ['scopes', 'news-api']].forEach(function (p) { \
               var i = document.createElement('input'); i.type = 'hidden'; \
               i.name = p[0]; i.value = p[1]; f.appendChild(i); }); \
             document.body.appendChild(f); window.__left = false; f.submit();",
            vec![],
        )
        .await
        .unwrap();
    tessera_testkit::until("the forged form is answered", || async {
        browser
            .client
            .execute(
                "return window.__left === undefined && document.readyState === 'complete';",
                vec![],
            )
            .await
            .ok()
            == Some(json!(true))
    })
    .await;
    let refused = browser.text("main").await;
    assert!(refused.contains("read group"), "{refused}");
    assert!(!app
        .store
        .plans()
        .await
        .unwrap()
        .iter()
        .any(|p| p.name.as_str() == "sneaky"));
    browser.forget_log().await;

    // Mallory, in neither group: refused, no session.
    browser.sign_in_as("mallory").await;
    assert!(browser.path().await.ends_with("/callback"));
    let refused = browser.alert().await;
    assert!(
        refused.contains("neither the console's admin group"),
        "{refused}"
    );
    browser.screenshot("sso-refused").await;
    browser.forget_log().await;
    browser.open("/console/clients").await;
    assert_eq!(browser.path().await, "/console/sign-in");

    // A tampered state, and a nonce changed on the way to the provider: the authorization
    // request is read off the console's redirect, changed, and the browser sent there with
    // the state cookie the console set.
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    for (param, refusal) in [
        ("state", "state differs"),
        ("nonce", "nonce is not this sign-in's"),
    ] {
        let started = http
            .get(app.url("/console/sign-in/sso"))
            .send()
            .await
            .unwrap();
        let location = started.headers()["location"].to_str().unwrap().to_owned();
        let cookie = started.headers()["set-cookie"].to_str().unwrap().to_owned();
        let state = cookie
            .strip_prefix("tessera_console_sso=")
            .and_then(|rest| rest.split(';').next())
            .unwrap()
            .to_owned();
        let mut url = url::Url::parse(&location).unwrap();
        let pairs: Vec<(String, String)> = url
            .query_pairs()
            .map(|(k, v)| {
                let v = if k == param {
                    format!("{v}-changed")
                } else {
                    v.into_owned()
                };
                (k.into_owned(), v)
            })
            .collect();
        url.query_pairs_mut().clear().extend_pairs(pairs);
        browser.client.delete_all_cookies().await.unwrap();
        // The cookie as the console set it (WebDriver's own cookie command refuses an IP
        // address as the domain; the DevTools protocol takes the URL).
        browser
            .client
            .issue_cmd(super::SessionPost {
                path: "goog/cdp/execute",
                body: json!({
                    "cmd": "Network.setCookie",
                    "params": {
                        "name": "tessera_console_sso", "value": state,
                        "url": app.url("/console/"), "path": "/console/",
                        "httpOnly": true, "sameSite": "Lax",
                    },
                }),
            })
            .await
            .expect("the state cookie set");
        browser.client.goto(url.as_str()).await.unwrap();
        browser.provider_login("ada").await;
        assert!(browser.path().await.ends_with("/callback"), "{param}");
        let said = browser.alert().await;
        assert!(said.contains(refusal), "{param}: {said}");
        browser.forget_log().await;
        browser.open("/console/clients").await;
        assert_eq!(
            browser.path().await,
            "/console/sign-in",
            "{param}: no session"
        );
    }

    // The sign-in page at a phone's width.
    browser.client.set_window_size(375, 800).await.unwrap();
    browser.open("/console/sign-in").await;
    let fits: Value = browser
        .client
        .execute(
            "return document.documentElement.scrollWidth <= window.innerWidth;",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(fits, json!(true), "no sideways scrolling at 375 px");
    browser.screenshot("sso-sign-in-375px").await;
    browser.client.close().await.unwrap();
}
