//! Traffic replay and the rule tester in headless Chromium: a pm replays the recorded
//! draws of the last hour through weights typed in the editor before saving them; a viewer
//! replays through the pool as published; a route's rule tester decides typed attributes
//! in the browser, before and after an edit of its rules.

use std::collections::HashMap;
use std::time::Duration;

use fantoccini::{Client, Locator};
use integration::browser::Browser;
use integration::ui::{app_with_users, hydrated, screenshot, sign_in};
use integration::TestApp;
use serde_json::json;

/// The seeded app with `draws` draws of cn-pay in its draw log; answers each member's
/// recorded draws.
async fn app_with_recorded_draws(draws: usize) -> (TestApp, HashMap<String, String>, HashMap<String, u64>) {
    let (app, passwords) = app_with_users(true).await;
    let pool = client::pool::PoolName::parse("cn-pay").unwrap();
    let mut recorded: HashMap<String, u64> = HashMap::new();
    for _ in 0..draws {
        *recorded.entry(app.state.pools.draw(&pool).await.unwrap().member).or_default() += 1;
    }
    let now = app.state.pool_admin.now().await.unwrap();
    let drained = server::jobs::draw_log::run_at(&app.state, now).await.unwrap();
    assert_eq!(drained.draws, draws as u64, "{drained:?}");
    (app, passwords, recorded)
}

/// Waits for the element's text to satisfy `done`; answers it.
async fn text_when(c: &Client, css: &str, done: impl Fn(&str) -> bool) -> String {
    let mut last = String::new();
    for _ in 0..200 {
        if let Ok(element) = c.find(Locator::Css(css)).await {
            last = element.text().await.unwrap_or_default();
            if done(&last) {
                return last;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{css}: {last:?}");
}

async fn retype(c: &Client, id: &str, value: &str) {
    let field = c.find(Locator::Id(id)).await.unwrap_or_else(|e| panic!("#{id}: {e}"));
    field.clear().await.unwrap();
    field.send_keys(value).await.unwrap();
}

async fn pool_page(c: &Client, app: &TestApp) {
    c.goto(&format!("{}/pools/cn-pay", app.address)).await.unwrap();
    c.wait().at_most(Duration::from_secs(10)).for_element(Locator::Id("replay-form")).await.expect("the replay form");
    hydrated(c).await;
}

#[tokio::test]
async fn a_pm_replays_the_last_hour_through_weights_typed_before_saving_them() {
    // Arrange: 300 recorded draws of cn-pay (45 / 30 / 25)
    let (app, passwords, recorded) = app_with_recorded_draws(300).await;
    let browser = Browser::start().await.expect("headless chromium");
    let c = &browser.client;
    sign_in(c, &app, "demo-pm", &passwords["demo-pm"]).await;
    pool_page(c, &app).await;
    let version_before =
        server::pools::store::get_pool(&app.state.db, &client::pool::PoolName::parse("cn-pay").unwrap())
            .await
            .unwrap()
            .unwrap()
            .0;

    // Act: half to each of the first two, nothing to UNION_C, replayed (not saved)
    retype(c, "weight-ALIPAY_A", "1").await;
    retype(c, "weight-WECHAT_B", "1").await;
    retype(c, "weight-UNION_C", "0").await;
    c.find(Locator::Css("#replay-through option[value='weights']"))
        .await
        .expect("the typed weights offered")
        .click()
        .await
        .unwrap();
    c.find(Locator::Id("replay-submit")).await.unwrap().click().await.unwrap();

    // Assert: what happened beside the replay through the typed weights; nothing saved
    let replayed = |m: &'static str| format!("#replay-members tr[data-member='{m}'] td.replayed");
    let recorded_cell = |m: &'static str| format!("#replay-members tr[data-member='{m}'] td.recorded");
    assert_eq!(text_when(c, &replayed("ALIPAY_A"), |t| !t.is_empty()).await, "150 (50.00 %)");
    assert_eq!(text_when(c, &replayed("WECHAT_B"), |t| !t.is_empty()).await, "150 (50.00 %)");
    assert_eq!(text_when(c, &replayed("UNION_C"), |t| !t.is_empty()).await, "0 (0.00 %)");
    for m in ["ALIPAY_A", "WECHAT_B", "UNION_C"] {
        let n = recorded.get(m).copied().unwrap_or(0);
        let cell = text_when(c, &recorded_cell(m), |t| !t.is_empty()).await;
        assert!(cell.starts_with(&format!("{n} (")), "{m}: {cell}, recorded {n}");
    }
    let summary = text_when(c, "#replay-summary", |t| !t.is_empty()).await;
    assert!(summary.starts_with("300 draws recorded") && summary.contains("the weights typed"), "{summary}");
    let run = text_when(c, "#replay-replayed td:nth-child(5)", |t| !t.is_empty()).await;
    assert!(!run.contains("UNION_C"), "UNION_C has no weight in the replay: {run}");
    screenshot(c, "replay-typed-weights").await;
    let version_after =
        server::pools::store::get_pool(&app.state.db, &client::pool::PoolName::parse("cn-pay").unwrap())
            .await
            .unwrap()
            .unwrap()
            .0;
    assert_eq!(version_after, version_before, "a replay saves nothing");

    // A custom period with nothing recorded in it is refused with the server's reason
    c.find(Locator::Css("#replay-period option[value='custom']")).await.unwrap().click().await.unwrap();
    c.wait().at_most(Duration::from_secs(5)).for_element(Locator::Id("replay-to")).await.expect("the custom period");
    // A date-time field's typing differs by locale: its value is set as the picker sets it.
    let set = "for (const [id, v] of [['replay-from', '2020-01-01T10:00'], ['replay-to', '2020-01-01T11:00']]) {
        const e = document.getElementById(id); e.value = v; e.dispatchEvent(new Event('input', {bubbles: true})); }";
    c.execute(set, vec![]).await.unwrap();
    c.find(Locator::Id("replay-submit")).await.unwrap().click().await.unwrap();
    let said = text_when(c, "#replay-message", |t| !t.is_empty()).await;
    assert!(said.starts_with("Not replayed:") && said.contains("holds no draws of pool cn-pay"), "{said}");
}

#[tokio::test]
async fn a_viewer_replays_the_published_pool_and_tests_a_route_s_rules() {
    // Arrange: 120 recorded draws of cn-pay; a route `checkout` by amount and currency
    let (app, passwords, recorded) = app_with_recorded_draws(120).await;
    let rules = json!({"rules": [
            {"name": "small", "when": {"amount": {"lt": "1000"}}, "pool": "cn-pay"},
            {"name": "big-usd", "when": {"amount": {"gte": "1000"}, "currency": {"in": ["USD"]}}, "pool": "sea-pay"}
        ], "default_pool": "cn-pay", "expected_version": 0, "reason": "route checkout"});
    let (status, reply) = {
        let admin = integration::ui::Session::sign_in(&app, "demo-admin", &passwords["demo-admin"]).await;
        admin.send(&app, reqwest::Method::PUT, "/api/v1/routes/checkout", rules).await
    };
    assert_eq!(status, 200, "{reply}");
    let browser = Browser::start().await.expect("headless chromium");
    let c = &browser.client;
    sign_in(c, &app, "demo-viewer", &passwords["demo-viewer"]).await;

    // Act and assert: the pool as published is all a viewer replays through
    pool_page(c, &app).await;
    let choices = c.find_all(Locator::Css("#replay-through option")).await.unwrap();
    assert_eq!(choices.len(), 1, "no weights editor, no typed weights");
    c.find(Locator::Id("replay-submit")).await.unwrap().click().await.unwrap();
    let summary = text_when(c, "#replay-summary", |t| !t.is_empty()).await;
    assert!(summary.starts_with("120 draws recorded") && summary.contains("as published"), "{summary}");
    let alipay = text_when(c, "#replay-members tr[data-member='ALIPAY_A'] td.recorded", |t| !t.is_empty()).await;
    assert!(alipay.starts_with(&format!("{} (", recorded["ALIPAY_A"])), "{alipay}");

    // The rule tester decides in the browser as typed, on both sides of the boundary
    c.goto(&format!("{}/routes/checkout", app.address)).await.unwrap();
    c.wait().at_most(Duration::from_secs(10)).for_element(Locator::Id("route-test-attributes")).await.unwrap();
    hydrated(c).await;
    let cases = [
        ("amount = 999.99\ncurrency = USD", "Saved route: rule 1 (small) matches → pool cn-pay"),
        ("amount = 1000\ncurrency = usd", "Saved route: rule 2 (big-usd) matches → pool sea-pay"),
        ("amount = 1000\ncurrency = EUR", "Saved route: no rule matches → default pool cn-pay"),
        ("currency = USD\nmerchant = m-1", "Saved route: no rule matches → default pool cn-pay"),
    ];
    for (attributes, expected) in cases {
        retype(c, "route-test-attributes", attributes).await;
        let said = text_when(c, "#route-test-result", |t| t == expected).await;
        assert_eq!(said, expected, "{attributes}");
    }
    retype(c, "route-test-attributes", "amount = lots").await;
    let said = text_when(c, "#route-test-result", |t| t.starts_with("Not a valid request")).await;
    assert!(said.contains("amount"), "the field is named: {said}");
    screenshot(c, "route-rule-tester").await;
}
