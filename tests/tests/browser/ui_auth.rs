//! Signing in to the admin UI, in headless Chromium against a server with access control on
//! (not the open mode other tests run in): the sign-in page, the redirect of signed-out
//! visitors, and the audit page as each role sees it.

use std::collections::HashMap;
use std::time::Duration;

use fantoccini::Locator;
use integration::browser::Browser;
use integration::ui::{
    api_session, app_with_users, hydrated, screenshot, sign_in, sign_out, text, without_demo_policy,
};
use integration::TestApp;

async fn app() -> (TestApp, HashMap<String, String>) {
    app_with_users(false).await
}

#[tokio::test]
async fn signed_out_requests_are_sent_to_sign_in_and_server_functions_refused() {
    let (app, _) = app().await;
    // Not the app's client: this one shows redirects instead of following them.
    let plain = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(integration::REQUEST_TIMEOUT)
        .build()
        .unwrap();
    // Every page: 303 to the sign-in page, which names the page (and its query) to come back to.
    for (page, next) in [
        ("/", "%2F"),
        ("/audit", "%2Faudit"),
        ("/pools/cn-pay?tab=limits", "%2Fpools%2Fcn-pay%3Ftab%3Dlimits"),
        ("/tenants/acme", "%2Ftenants%2Facme"),
    ] {
        let response = plain.get(format!("{}{page}", app.address)).header("accept", "text/html").send().await.unwrap();
        assert_eq!(response.status(), 303, "{page}: decided on the server");
        assert_eq!(response.headers()["location"], format!("/login?next={next}").as_str(), "{page}");
    }
    let login = plain.get(format!("{}/login", app.address)).send().await.unwrap();
    assert_eq!(login.status(), 200);
    let sfn = plain.get(format!("{}/sfn/system_status", app.address)).send().await.unwrap();
    assert_eq!(sfn.status(), 401, "a server function needs a session when open mode is off");
    let audit = plain.get(format!("{}/sfn/audit", app.address)).send().await.unwrap();
    assert_eq!(audit.status(), 401);
    // What the sign-in page asks is open: nobody is signed in.
    let whoami = plain.get(format!("{}/sfn/whoami", app.address)).send().await.unwrap();
    assert_eq!(whoami.status(), 200);
    assert_eq!(whoami.text().await.unwrap(), "null");
}

#[tokio::test]
async fn a_session_reads_server_functions_and_only_auditors_verify_the_chain() {
    let (app, passwords) = app().await;
    let (viewer, _) = api_session(&app, "demo-viewer", &passwords["demo-viewer"]).await;
    let (auditor, _) = api_session(&app, "demo-auditor", &passwords["demo-auditor"]).await;
    let get =
        |path: &str, cookie: &str| app.request(reqwest::Method::GET, path).header("cookie", cookie.to_owned()).send();
    let status = get("/sfn/system_status", &viewer).await.unwrap();
    assert_eq!(status.status(), 200, "{:?}", status.text().await);
    assert_eq!(get("/sfn/audit", &viewer).await.unwrap().status(), 200);
    assert_eq!(get("/sfn/audit_verify", &viewer).await.unwrap().status(), 403);
    let verified = get("/sfn/audit_verify", &auditor).await.unwrap();
    assert_eq!(verified.status(), 200);
    let body: serde_json::Value = verified.json().await.unwrap();
    assert_eq!(body["intact"], true, "{body}");
}

#[tokio::test]
async fn an_auditor_and_a_viewer_see_the_audit_page_as_their_role_allows() {
    let (app, passwords) = app().await;
    let browser = Browser::start().await.expect("headless chromium");
    let c = &browser.client;

    // Signed out, the dashboard sends the visitor to sign in.
    c.goto(&format!("{}/", app.address)).await.unwrap();
    c.wait().at_most(Duration::from_secs(10)).for_element(Locator::Id("login-form")).await.expect("the sign-in page");
    assert_eq!(c.current_url().await.unwrap().path(), "/login");
    hydrated(c).await;
    screenshot(c, "login").await;

    // A wrong password: a message on the page, still signed out.
    c.find(Locator::Id("login-name")).await.unwrap().send_keys("demo-auditor").await.unwrap();
    c.find(Locator::Id("login-password")).await.unwrap().send_keys("not the password").await.unwrap();
    c.find(Locator::Id("login-submit")).await.unwrap().click().await.unwrap();
    let error = c
        .wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::XPath("//p[@id='login-error' and string-length(normalize-space(.)) > 0]"))
        .await
        .expect("an error message");
    let message = error.text().await.unwrap();
    assert!(message.starts_with("Sign-in failed:"), "{message}");
    assert_eq!(c.current_url().await.unwrap().path(), "/login");
    screenshot(c, "login-error").await;

    // The auditor: rows, the chain intact, the CSV export carrying the filters.
    sign_in(c, &app, "demo-auditor", &passwords["demo-auditor"]).await;
    assert_eq!(text(c, "session-role").await, "role: auditor");
    screenshot(c, "dashboard-signed-in").await;
    c.goto(&format!("{}/audit", app.address)).await.unwrap();
    c.wait().at_most(Duration::from_secs(10)).for_element(Locator::Id("audit-rows")).await.expect("audit rows");
    let rows = c.find_all(Locator::Css("#audit-rows tbody tr")).await.unwrap();
    assert!(!rows.is_empty());
    let chain = text(c, "chain-status").await;
    assert!(chain.contains("chain intact"), "{chain}");
    let csv = c.find(Locator::Id("csv-export")).await.unwrap().attr("href").await.unwrap().unwrap();
    assert_eq!(csv, "/api/v1/audit.csv");
    hydrated(c).await;
    screenshot(c, "audit-auditor").await;

    // Filtered: only the actions asked for, and the export link carries the filter.
    c.goto(&format!("{}/audit?action=channel.create", app.address)).await.unwrap();
    c.wait().at_most(Duration::from_secs(10)).for_element(Locator::Id("csv-export")).await.unwrap();
    let csv = c.find(Locator::Id("csv-export")).await.unwrap().attr("href").await.unwrap().unwrap();
    assert_eq!(csv, "/api/v1/audit.csv?action=channel.create");
    let filter = c.find(Locator::Id("filter-action")).await.unwrap().prop("value").await.unwrap();
    assert_eq!(filter.as_deref(), Some("channel.create"));
    for row in c.find_all(Locator::Css("#audit-rows > tbody > tr > td:nth-child(4)")).await.unwrap() {
        assert_eq!(row.text().await.unwrap(), "channel.create");
    }
    sign_out(c).await;

    // The viewer: rows, but no verification and no export, and a sentence saying why.
    sign_in(c, &app, "demo-viewer", &passwords["demo-viewer"]).await;
    c.goto(&format!("{}/audit", app.address)).await.unwrap();
    c.wait().at_most(Duration::from_secs(10)).for_element(Locator::Id("audit-rows")).await.expect("audit rows");
    assert!(c.find(Locator::Id("chain-status")).await.is_err(), "no chain status for a viewer");
    assert!(c.find(Locator::Id("csv-export")).await.is_err(), "no CSV export for a viewer");
    let why = text(c, "audit-restricted").await;
    assert!(why.contains("auditor and admin") && why.contains("viewer"), "{why}");
    hydrated(c).await;
    screenshot(c, "audit-viewer").await;
    sign_out(c).await;

    // Signed out, a page with a query: signed in, the visitor is back on it.
    c.goto(&format!("{}/audit?action=channel.create", app.address)).await.unwrap();
    c.wait().at_most(Duration::from_secs(10)).for_element(Locator::Id("login-form")).await.expect("the sign-in page");
    hydrated(c).await;
    c.find(Locator::Id("login-name")).await.unwrap().send_keys("demo-viewer").await.unwrap();
    c.find(Locator::Id("login-password")).await.unwrap().send_keys(&passwords["demo-viewer"]).await.unwrap();
    c.find(Locator::Id("login-submit")).await.unwrap().click().await.unwrap();
    c.wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Id("audit-rows"))
        .await
        .expect("back on the audit page");
    let url = c.current_url().await.unwrap();
    assert_eq!((url.path(), url.query()), ("/audit", Some("action=channel.create")));
    hydrated(c).await;

    browser.close().await;
}

#[tokio::test]
async fn a_pm_changes_weights_and_a_stale_edit_names_the_current_version() {
    let (app, passwords) = app().await;
    without_demo_policy(&app).await;
    let browser = Browser::start().await.expect("headless chromium");
    let c = &browser.client;
    sign_in(c, &app, "demo-pm", &passwords["demo-pm"]).await;

    c.goto(&format!("{}/pools", app.address)).await.unwrap();
    let list =
        c.wait().at_most(Duration::from_secs(10)).for_element(Locator::Id("pools")).await.expect("the pool list");
    let list = list.text().await.unwrap();
    assert!(list.contains("cn-pay") && list.contains("sea-pay") && list.contains("tiers"), "{list}");
    screenshot(c, "pools").await;

    c.goto(&format!("{}/pools/cn-pay", app.address)).await.unwrap();
    c.wait().at_most(Duration::from_secs(10)).for_element(Locator::Id("members")).await.expect("the members");
    hydrated(c).await;
    let version: i64 = text(c, "pool-version").await.parse().unwrap();
    let row = c.find(Locator::Css("#members tr[data-channel='ALIPAY_A']")).await.unwrap().text().await.unwrap();
    assert!(row.contains("45") && row.contains("healthy"), "{row}");

    // A change: saved, the page shows the next version and the new weight.
    let weight = c.find(Locator::Id("weight-ALIPAY_A")).await.unwrap();
    weight.clear().await.unwrap();
    weight.send_keys("50").await.unwrap();
    c.find(Locator::Id("weights-reason")).await.unwrap().send_keys("gray release step").await.unwrap();
    c.find(Locator::Id("weights-submit")).await.unwrap().click().await.unwrap();
    let next = format!("//strong[@id='pool-version' and text()='{}']", version + 1);
    c.wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::XPath(&next))
        .await
        .expect("saved: the next version");
    let row = c.find(Locator::Css("#members tr[data-channel='ALIPAY_A']")).await.unwrap().text().await.unwrap();
    assert!(row.contains("50"), "{row}");
    hydrated(c).await;

    // Someone else changes the pool meanwhile (through the API, as the UI does).
    let (cookie, csrf) = api_session(&app, "demo-admin", &passwords["demo-admin"]).await;
    let changed = app
        .request(reqwest::Method::POST, "/api/v1/pools/cn-pay/weights")
        .header("cookie", cookie)
        .header("x-csrf-token", csrf)
        .header("origin", &app.address)
        .json(&serde_json::json!({
            "weights": [{"member": "ALIPAY_A", "weight": 40}, {"member": "WECHAT_B", "weight": 35}, {"member": "UNION_C", "weight": 25}],
            "mode": "drain", "reason": "meanwhile", "expected_version": version + 1,
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(changed.status(), 200);

    // The stale edit is refused with the current version named.
    let weight = c.find(Locator::Id("weight-UNION_C")).await.unwrap();
    weight.clear().await.unwrap();
    weight.send_keys("20").await.unwrap();
    c.find(Locator::Id("weights-reason")).await.unwrap().send_keys("another step").await.unwrap();
    c.find(Locator::Id("weights-submit")).await.unwrap().click().await.unwrap();
    let message = c
        .wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::XPath("//p[@id='weights-message' and string-length(normalize-space(.)) > 0]"))
        .await
        .expect("a conflict message")
        .text()
        .await
        .unwrap();
    assert!(message.contains(&format!("now at version {}", version + 2)), "{message}");
    // … with the change that came in between: who, why, what.
    assert!(
        message.contains("demo-admin") && message.contains("\"meanwhile\"") && message.contains("pool.weights"),
        "{message}"
    );
    screenshot(c, "pool-conflict").await;
    sign_out(c).await;

    // A viewer sees the pool but no form, and why.
    sign_in(c, &app, "demo-viewer", &passwords["demo-viewer"]).await;
    c.goto(&format!("{}/pools/cn-pay", app.address)).await.unwrap();
    c.wait().at_most(Duration::from_secs(10)).for_element(Locator::Id("members")).await.unwrap();
    assert!(c.find(Locator::Id("weights-form")).await.is_err());
    assert!(text(c, "weights-restricted").await.contains("viewer"));

    browser.close().await;
}
