//! The users and tokens page in headless Chromium with access control on: an admin adds a
//! user (whose generated password is shown once and signs in), searches the list (the
//! query in the URL), changes a role in the user's dialog, creates an
//! API token (whose secret is shown once and authenticates) and revokes it (then it is
//! refused); a viewer gets no users or tokens, from the page or from its server function;
//! a person changes their own password and signs out everywhere, and an admin resets a
//! password (the new one shown once).

use std::time::Duration;

use fantoccini::{Client, Locator};
use integration::browser::Browser;
use integration::ui::{api_session, app_with_users, hydrated, screenshot, sign_in, text, wait_for_text};
use integration::TestApp;

/// Opens the users page and waits for the users table and hydration.
async fn users_page(c: &Client, app: &TestApp) {
    c.goto(&format!("{}/users", app.address)).await.unwrap();
    c.wait().at_most(Duration::from_secs(10)).for_element(Locator::Id("users")).await.expect("the users table");
    hydrated(c).await;
}

async fn login_status(app: &TestApp, name: &str, password: &str) -> u16 {
    app.post_json("/api/v1/auth/login", serde_json::json!({"name": name, "password": password})).await.0
}

async fn draw_with(app: &TestApp, token: &str) -> u16 {
    draw_from(app, "cn-pay", token).await
}

async fn draw_from(app: &TestApp, pool: &str, token: &str) -> u16 {
    app.send(reqwest::Method::POST, &format!("/api/v1/pools/{pool}/draw"), Some(token), serde_json::Value::Null).await.0
}

#[tokio::test]
async fn an_admin_adds_a_user_and_a_token_sees_each_secret_once_and_revokes_the_token() {
    let (app, passwords) = app_with_users(true).await;
    let browser = Browser::start().await.expect("headless chromium");
    let c = &browser.client;

    sign_in(c, &app, "demo-admin", &passwords["demo-admin"]).await;
    assert!(c.find(Locator::Css("nav a[href='/users']")).await.is_ok(), "admins are offered the page");
    users_page(c, &app).await;
    let viewer_row = c.find(Locator::Css("#users tr[data-user='demo-viewer']")).await.unwrap().text().await.unwrap();
    assert!(viewer_row.contains("viewer") && viewer_row.contains("active"), "{viewer_row}");
    assert!(c.find(Locator::Id("tokens-none")).await.is_ok(), "no tokens yet");

    // A malformed name is refused beside the field, before anything is sent.
    c.find(Locator::Id("new-user-name")).await.unwrap().send_keys("ops alice").await.unwrap();
    c.find(Locator::Id("new-user-submit")).await.unwrap().click().await.unwrap();
    assert!(wait_for_text(c, "new-user-name-error").await.contains("ASCII letters"));

    // A new operator, with a generated password shown once.
    c.find(Locator::Id("new-user-name")).await.unwrap().send_keys(&"\u{e003}".repeat(10)).await.unwrap();
    c.find(Locator::Id("new-user-name")).await.unwrap().send_keys("ops-alice").await.unwrap();
    c.find(Locator::Id("new-user-role")).await.unwrap().select_by_value("operator").await.unwrap();
    c.find(Locator::Id("new-user-submit")).await.unwrap().click().await.unwrap();
    let password = wait_for_text(c, "revealed-secret").await;
    assert!(text(c, "revealed-warning").await.contains("will not be shown again"));
    c.wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Css("#users tr[data-user='ops-alice']"))
        .await
        .expect("the new user is listed");
    assert_eq!(text(c, "user-role-ops-alice").await, "operator");
    let role_field = c.find(Locator::Id("new-user-role")).await.unwrap().prop("value").await.unwrap();
    assert_eq!(role_field.as_deref(), Some("viewer"), "the emptied form shows the role it would send");
    assert!(text(c, "users-message").await.contains("ops-alice created"));
    assert_eq!(login_status(&app, "ops-alice", &password).await, 200, "the password shown signs in");
    screenshot(c, "users-admin").await;

    // The same name again: the server's 409 is shown beside the name.
    c.find(Locator::Id("new-user-name")).await.unwrap().send_keys("ops-alice").await.unwrap();
    c.find(Locator::Id("new-user-submit")).await.unwrap().click().await.unwrap();
    assert!(wait_for_text(c, "new-user-name-error").await.contains("exists"));

    // The list is searched on the server; the search is in the URL.
    c.find(Locator::Id("user-search")).await.unwrap().send_keys("ops").await.unwrap();
    c.find(Locator::Css("form[role='search'] button[type='submit']")).await.unwrap().click().await.unwrap();
    c.wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::XPath("//p[@id='users-summary' and contains(., 'matching \"ops\"')]"))
        .await
        .expect("the search is applied");
    hydrated(c).await;
    assert_eq!(c.current_url().await.unwrap().query(), Some("q=ops&sort=name"));
    let listed = c.find(Locator::Id("users")).await.unwrap().text().await.unwrap();
    assert!(listed.contains("ops-alice") && !listed.contains("demo-viewer"), "{listed}");

    // A role change in the user's dialog (no form per row), shown once done and effective
    // on the server.
    assert!(c.find(Locator::Id("role-ops-alice")).await.is_err(), "no role field in the row");
    c.find(Locator::Id("change-user-ops-alice")).await.unwrap().click().await.unwrap();
    c.wait().at_most(Duration::from_secs(10)).for_element(Locator::Id("user-dialog")).await.expect("the dialog");
    c.find(Locator::Id("role-ops-alice")).await.unwrap().select_by_value("pm").await.unwrap();
    c.find(Locator::Id("set-role-ops-alice")).await.unwrap().click().await.unwrap();
    c.wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::XPath("//td[@id='user-role-ops-alice' and normalize-space(.)='pm']"))
        .await
        .expect("the role reads pm");
    assert!(c.find(Locator::Id("user-dialog")).await.is_err(), "the dialog closes once done");
    let created = c.find(Locator::Css("tr[data-user='ops-alice'] time")).await.unwrap();
    // Created within the minute the server wrote (to the minute).
    let when = created.text().await.unwrap();
    let minutes = when.strip_suffix(" min ago").and_then(|n| n.parse::<u32>().ok());
    assert!(when == "just now" || minutes.is_some_and(|n| n <= 5), "times read relative to now: {when}");
    assert!(created.attr("title").await.unwrap().is_some_and(|t| t.ends_with("UTC")), "the exact time on hover");
    let role: String = sqlx::query_scalar("select role from app_user where name = 'ops-alice'")
        .fetch_one(&app.state.db)
        .await
        .unwrap();
    assert_eq!(role, "pm");

    // A data-plane token bound to one pool: its secret is shown once and it draws there only.
    c.find(Locator::Id("new-token-name")).await.unwrap().send_keys("gateway").await.unwrap();
    c.find(Locator::Id("new-token-pools")).await.unwrap().send_keys("cn-pay").await.unwrap();
    c.find(Locator::Id("new-token-tenants")).await.unwrap().send_keys("*").await.unwrap();
    c.find(Locator::Id("new-token-submit")).await.unwrap().click().await.unwrap();
    let secret = c
        .wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::XPath("//code[@id='revealed-secret' and starts-with(normalize-space(.), 'tsr_')]"))
        .await
        .expect("the token's secret is shown")
        .text()
        .await
        .unwrap();
    assert!(text(c, "revealed-warning").await.contains("will not be shown again"));
    let id: i64 =
        sqlx::query_scalar("select id from api_token where name = 'gateway'").fetch_one(&app.state.db).await.unwrap();
    let row = c
        .wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Css(&format!("#tokens tr[data-token='{id}']")))
        .await
        .expect("the token is listed")
        .text()
        .await
        .unwrap();
    assert!(
        row.contains("gateway") && row.contains("dataplane") && row.contains("demo-admin") && row.contains("live"),
        "{row}"
    );
    assert!(!row.contains(&secret), "the list never shows the secret: {row}");
    let bindings = text(c, &format!("token-bindings-{id}")).await;
    assert!(bindings.contains("cn-pay") && bindings.contains("any") && bindings.contains("none"), "{bindings}");
    assert_eq!(draw_with(&app, &secret).await, 200, "the token draws from its pool");
    assert_eq!(draw_from(&app, "sea-pay", &secret).await, 403, "and from no other");
    screenshot(c, "users-admin-token").await;

    // Its bindings edited on the page: the other pool, at once.
    c.find(Locator::Id(&format!("bind-token-{id}"))).await.unwrap().click().await.unwrap();
    let pools = c.wait().at_most(Duration::from_secs(10)).for_element(Locator::Id("bind-token-pools")).await.unwrap();
    pools.clear().await.unwrap();
    pools.send_keys("sea-pay").await.unwrap();
    c.find(Locator::Id("bind-token-submit")).await.unwrap().click().await.unwrap();
    c.wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::XPath(&format!("//dl[@id='token-bindings-{id}']/dd[@data-kind='pools' and .='sea-pay']")))
        .await
        .expect("the new binding is listed");
    assert_eq!(draw_from(&app, "sea-pay", &secret).await, 200);
    assert_eq!(draw_with(&app, &secret).await, 403);

    // Revoked from the page: refused at once.
    c.find(Locator::Id(&format!("revoke-token-{id}"))).await.unwrap().click().await.unwrap();
    c.wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::XPath(&format!("//td[@id='token-state-{id}' and contains(., 'revoked')]")))
        .await
        .expect("the token reads revoked");
    assert_eq!(draw_with(&app, &secret).await, 401, "a revoked token is refused");

    // Once the page is left, neither secret is shown again.
    users_page(c, &app).await;
    assert!(c.find(Locator::Id("revealed")).await.is_err());
    let source = c.source().await.unwrap();
    assert!(!source.contains(&secret) && !source.contains(&password), "no secret in the page");

    browser.close().await;
}

#[tokio::test]
async fn a_viewer_gets_no_users_or_tokens_from_the_page_or_its_server_function() {
    let (app, passwords) = app_with_users(false).await;
    let browser = Browser::start().await.expect("headless chromium");
    let c = &browser.client;

    sign_in(c, &app, "demo-viewer", &passwords["demo-viewer"]).await;
    assert!(c.find(Locator::Css("nav a[href='/users']")).await.is_err(), "the page is not offered");
    c.goto(&format!("{}/users", app.address)).await.unwrap();
    c.wait().at_most(Duration::from_secs(10)).for_element(Locator::Id("users-restricted")).await.expect("the notice");
    hydrated(c).await;
    assert!(text(c, "users-restricted").await.contains("Only admins"));
    assert!(c.find(Locator::Id("users")).await.is_err() && c.find(Locator::Id("new-user-form")).await.is_err());
    let source = c.source().await.unwrap();
    assert!(!source.contains("demo-operator") && !source.contains("demo-auditor"), "no user names in the page");
    screenshot(c, "users-viewer").await;

    // The server function itself refuses a viewer and a pm, and answers an admin.
    for (name, expected) in [("demo-viewer", 403), ("demo-pm", 403), ("demo-admin", 200)] {
        let (cookie, _) = api_session(&app, name, &passwords[name]).await;
        let response = app.request(reqwest::Method::GET, "/sfn/access").header("cookie", cookie).send().await.unwrap();
        assert_eq!(response.status().as_u16(), expected, "{name}");
        let body = response.text().await.unwrap();
        assert_eq!(body.contains("demo-auditor"), expected == 200, "{name}: {body}");
    }
    assert_eq!(app.get("/sfn/access").await.status(), 401, "signed out");

    browser.close().await;
}

/// Opens the account page and waits for it to hydrate.
async fn account_page(c: &Client, app: &TestApp) {
    c.goto(&format!("{}/account", app.address)).await.unwrap();
    c.wait().at_most(Duration::from_secs(10)).for_element(Locator::Id("password-form")).await.expect("the form");
    hydrated(c).await;
}

async fn fill(c: &Client, id: &str, value: &str) {
    let input = c.find(Locator::Id(id)).await.unwrap();
    input.clear().await.unwrap();
    input.send_keys(value).await.unwrap();
}

#[tokio::test]
async fn a_person_changes_their_password_an_admin_resets_one_and_sign_out_everywhere_ends_every_session() {
    let (app, passwords) = app_with_users(false).await;
    let browser = Browser::start().await.expect("headless chromium");
    let c = &browser.client;
    let elsewhere = integration::ui::Session::sign_in(&app, "demo-viewer", &passwords["demo-viewer"]).await;
    let still_signed_in = |s: &integration::ui::Session| {
        app.request(reqwest::Method::GET, "/sfn/whoami").header("cookie", s.cookie.clone())
    };

    // A viewer finds the account page from the header.
    sign_in(c, &app, "demo-viewer", &passwords["demo-viewer"]).await;
    c.find(Locator::Id("account-link")).await.unwrap().click().await.unwrap();
    c.wait().at_most(Duration::from_secs(10)).for_element(Locator::Id("password-form")).await.expect("the form");
    hydrated(c).await;
    assert!(text(c, "account-who").await.contains("demo-viewer"));

    // A wrong current password is refused beside its field; nothing changes.
    fill(c, "password-current", "not my password at all").await;
    fill(c, "password-new", "a brand new passphrase").await;
    fill(c, "password-again", "a brand new passphrase").await;
    c.find(Locator::Id("password-submit")).await.unwrap().click().await.unwrap();
    assert!(!wait_for_text(c, "password-current-error").await.is_empty());
    assert_eq!(login_status(&app, "demo-viewer", &passwords["demo-viewer"]).await, 200, "unchanged");
    // The new password typed twice differently never leaves the page.
    fill(c, "password-current", &passwords["demo-viewer"]).await;
    fill(c, "password-again", "a brand new passphrasf").await;
    c.find(Locator::Id("password-submit")).await.unwrap().click().await.unwrap();
    assert!(wait_for_text(c, "password-again-error").await.contains("differs"));

    // Changed: the other sessions end (not this one), the old password no longer signs in.
    let before_change = integration::ui::Session::sign_in(&app, "demo-viewer", &passwords["demo-viewer"]).await;
    fill(c, "password-again", "a brand new passphrase").await;
    c.find(Locator::Id("password-submit")).await.unwrap().click().await.unwrap();
    let done = wait_for_text(c, "password-done").await;
    assert!(done.starts_with("Password changed. 3 other sessions ended"), "{done}");
    assert_eq!(login_status(&app, "demo-viewer", &passwords["demo-viewer"]).await, 401);
    assert_eq!(login_status(&app, "demo-viewer", "a brand new passphrase").await, 200);
    for s in [&elsewhere, &before_change] {
        assert_eq!(still_signed_in(s).send().await.unwrap().text().await.unwrap(), "null", "ended");
    }

    // Sign out everywhere: back at sign-in, and a session opened meanwhile ends too.
    let another = integration::ui::Session::sign_in(&app, "demo-viewer", "a brand new passphrase").await;
    account_page(c, &app).await;
    c.find(Locator::Id("sign-out-everywhere")).await.unwrap().click().await.unwrap();
    c.wait().at_most(Duration::from_secs(10)).for_element(Locator::Id("login-form")).await.expect("back at sign-in");
    hydrated(c).await;
    assert_eq!(still_signed_in(&another).send().await.unwrap().text().await.unwrap(), "null", "ended");

    // An admin resets the viewer's password: a new one is shown once and signs in.
    sign_in(c, &app, "demo-admin", &passwords["demo-admin"]).await;
    users_page(c, &app).await;
    c.find(Locator::Id("change-user-demo-viewer")).await.unwrap().click().await.unwrap();
    c.wait().at_most(Duration::from_secs(10)).for_element(Locator::Id("reset-password-demo-viewer")).await.unwrap();
    c.find(Locator::Id("reset-password-demo-viewer")).await.unwrap().click().await.unwrap();
    let reset = wait_for_text(c, "revealed-secret").await;
    assert!(text(c, "users-message").await.contains("every session of theirs ended"));
    assert_eq!(login_status(&app, "demo-viewer", "a brand new passphrase").await, 401);
    assert_eq!(login_status(&app, "demo-viewer", &reset).await, 200);
    screenshot(c, "users-reset").await;

    browser.close().await;
}
