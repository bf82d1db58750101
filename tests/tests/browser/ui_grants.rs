//! Grants on a tenant's page in headless Chromium with access control on: a pm adds a
//! bonus grant (checked field by field first), sees it listed and in the tenant's usage,
//! and Redis has it; then revokes it and Redis drops it. A viewer sees no grant form, and
//! a grant forged with a viewer's session is refused.

use std::time::Duration;

use client::quota::TenantId;
use fantoccini::{Client, Locator};
use integration::browser::Browser;
use integration::ui::{api_session, app_with_users, hydrated, screenshot, sign_in, text, wait_for_text};
use integration::TestApp;

/// Opens a tenant's page and waits for its card and hydration.
async fn tenant_page(c: &Client, app: &TestApp, tenant: &str) {
    c.goto(&format!("{}/tenants/{tenant}", app.address)).await.unwrap();
    c.wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Css(&format!("section[data-tenant='{tenant}']")))
        .await
        .expect("the tenant's page");
    hydrated(c).await;
}

async fn type_into(c: &Client, id: &str, keys: &str) {
    c.find(Locator::Id(id)).await.unwrap_or_else(|e| panic!("#{id}: {e}")).send_keys(keys).await.unwrap();
}

/// The buckets Redis holds for a tenant now, as (id, amount, priority).
async fn buckets(app: &TestApp, tenant: &TenantId) -> Vec<(String, u64, u32)> {
    let usage = app.state.quotas.usage(tenant).await.unwrap();
    usage.buckets.into_iter().map(|b| (b.id, b.amount, b.priority)).collect()
}

#[tokio::test]
async fn a_pm_adds_a_bonus_grant_that_reaches_redis_and_revokes_it() {
    let (app, passwords) = app_with_users(true).await;
    let globex = TenantId::parse("globex").unwrap();
    let browser = Browser::start().await.expect("headless chromium");
    let c = &browser.client;

    sign_in(c, &app, "demo-pm", &passwords["demo-pm"]).await;
    tenant_page(c, &app, "acme").await;
    let plan_meter = text(c, "meter-acme-plan").await;
    assert!(plan_meter.contains("used") && plan_meter.contains("reserved of 50,000,000"), "{plan_meter}");
    tenant_page(c, &app, "globex").await;
    assert!(c.find(Locator::Id("grants-none-globex")).await.is_ok(), "globex starts without grants");

    // Checked before sending: every broken rule beside its field, nothing sent.
    type_into(c, "grant-id-globex", "spring-promo").await;
    type_into(c, "grant-amount-globex", "1.5").await;
    type_into(c, "grant-starts_at-globex", "2030-01-02T00:00").await;
    type_into(c, "grant-expires_at-globex", "2030-01-01T00:00").await;
    c.find(Locator::Id("grant-submit-globex")).await.unwrap().click().await.unwrap();
    assert!(wait_for_text(c, "grant-amount-globex-error").await.contains("whole number"));
    assert!(wait_for_text(c, "grant-expires_at-globex-error").await.contains("after the start"));
    assert!(wait_for_text(c, "grant-reason-globex-error").await.contains("required"));
    assert!(buckets(&app, &globex).await.iter().all(|(id, _, _)| id != "spring-promo"));

    // Fixed: a bonus of 750000 tokens, priority 3, from now until 2030.
    type_into(c, "grant-amount-globex", &"\u{e003}".repeat(3)).await;
    type_into(c, "grant-amount-globex", "750000").await;
    type_into(c, "grant-starts_at-globex", &"\u{e003}".repeat(16)).await;
    c.find(Locator::Id("grant-kind-globex")).await.unwrap().select_by_value("bonus").await.unwrap();
    type_into(c, "grant-priority-globex", "3").await;
    type_into(c, "grant-reason-globex", "spring promotion").await;
    c.find(Locator::Id("grant-submit-globex")).await.unwrap().click().await.unwrap();
    let row = c
        .wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Css("#grants-globex tr[data-grant='spring-promo']"))
        .await
        .expect("the grant is listed")
        .text()
        .await
        .unwrap();
    assert!(
        row.contains("bonus (priority 3)")
            && row.contains("750,000")
            && row.contains("active")
            && row.contains("2030-01-01"),
        "{row}"
    );
    assert!(text(c, "tenants-message").await.contains("Grant spring-promo added to globex"));
    let meter = text(c, "meter-globex-spring-promo").await;
    assert!(meter.contains("0 used + 0 reserved of 750,000"), "{meter}");
    assert_eq!(text(c, "leases-globex").await, "0", "no reservation is open");

    // Redis has it (published with the change; the outbox has nothing left to deliver).
    server::publish::drain_outbox(&app.state).await.unwrap();
    assert!(buckets(&app, &globex).await.contains(&("spring-promo".to_owned(), 750_000, 3)));
    screenshot(c, "grants-pm").await;

    // The same id again: the server's 409 is shown beside the id.
    type_into(c, "grant-id-globex", "spring-promo").await;
    type_into(c, "grant-amount-globex", "10").await;
    type_into(c, "grant-reason-globex", "again").await;
    c.find(Locator::Id("grant-submit-globex")).await.unwrap().click().await.unwrap();
    assert!(wait_for_text(c, "grant-id-globex-error").await.contains("never reused"));

    // Revoked, with a reason (asked for when missing): listed as revoked, gone from Redis.
    c.find(Locator::Id("revoke-globex-spring-promo")).await.unwrap().click().await.unwrap();
    assert!(wait_for_text(c, "revoke-message-globex-spring-promo").await.contains("reason is required"));
    type_into(c, "revoke-reason-globex-spring-promo", "promotion ended").await;
    c.find(Locator::Id("revoke-globex-spring-promo")).await.unwrap().click().await.unwrap();
    c.wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::XPath(
            "//table[@id='grants-globex']//tr[@data-grant='spring-promo' and contains(., 'revoked')]",
        ))
        .await
        .expect("the grant reads revoked");
    assert!(c.find(Locator::Id("revoke-globex-spring-promo")).await.is_err(), "nothing left to revoke");
    server::publish::drain_outbox(&app.state).await.unwrap();
    assert!(buckets(&app, &globex).await.iter().all(|(id, _, _)| id != "spring-promo"), "a revoked grant is no bucket");

    browser.close().await;
}

#[tokio::test]
async fn a_viewer_sees_no_grant_form_and_a_forged_grant_is_refused() {
    let (app, passwords) = app_with_users(true).await;
    let browser = Browser::start().await.expect("headless chromium");
    let c = &browser.client;

    sign_in(c, &app, "demo-viewer", &passwords["demo-viewer"]).await;
    tenant_page(c, &app, "acme").await;
    assert!(c.find_all(Locator::Css("section[data-tenant] form")).await.unwrap().is_empty(), "no forms for a viewer");
    assert!(
        c.find(Locator::Id("grant-form-acme")).await.is_err()
            && c.find(Locator::Id("revoke-acme-launch-bonus")).await.is_err()
    );
    let why = text(c, "grants-restricted").await;
    assert!(why.contains("pm and admin") && why.contains("viewer"), "{why}");
    let meter = text(c, "meter-acme-launch-bonus").await;
    assert!(meter.contains("reserved of 2,000,000"), "usage is still shown: {meter}");
    screenshot(c, "grants-viewer").await;

    // A grant forged with the viewer's own session, CSRF token and origin is refused.
    let (cookie, csrf) = api_session(&app, "demo-viewer", &passwords["demo-viewer"]).await;
    let forged = app
        .request(reqwest::Method::POST, "/api/v1/tenants/acme/grants")
        .header("cookie", cookie)
        .header("x-csrf-token", csrf)
        .header("origin", &app.address)
        .json(&serde_json::json!({"id": "forged", "kind": "bonus", "amount": 1000, "reason": "forged"}))
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), 403);
    let acme = TenantId::parse("acme").unwrap();
    let stored = server::tenants::store::get_tenant(&app.state.db, &acme).await.unwrap().unwrap();
    assert!(stored.grants.iter().all(|g| g["id"] != "forged"), "the forged grant changed nothing");

    browser.close().await;
}
