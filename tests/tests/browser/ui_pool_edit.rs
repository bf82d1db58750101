//! The pool page's editors in headless Chromium, signed in as a pm: the weights preview
//! (the engine in wasm) follows every keystroke and matches the engine run here; the change
//! is applied with a reason, reaches the audit page as a diff and Redis as a new snapshot
//! version; peak windows and caps are checked beside their fields as they are typed.

use std::collections::HashMap;
use std::time::Duration;

use engine::preview::preview;
use engine::{BatchSize, Ordering, Weights};
use fantoccini::{Client, Locator};
use integration::browser::Browser;
use integration::ui::{
    app_with_users, hydrated, screenshot, sign_in, text, wait_for_text, wait_text, without_demo_policy,
};
use integration::TestApp;

async fn app() -> (TestApp, HashMap<String, String>) {
    let (app, passwords) = app_with_users(true).await;
    // Direct writes: the editors' own saves (the change-request path is ui_changes').
    without_demo_policy(&app).await;
    (app, passwords)
}

async fn pool_page(c: &Client, app: &TestApp, pool: &str) {
    c.goto(&format!("{}/pools/{pool}", app.address)).await.unwrap();
    c.wait().at_most(Duration::from_secs(10)).for_element(Locator::Id("members")).await.expect("the members");
    hydrated(c).await;
}

/// Replaces an input's text, as a person typing would (an input event per key).
async fn retype(c: &Client, id: &str, value: &str) {
    let field = c.find(Locator::Id(id)).await.unwrap_or_else(|e| panic!("#{id}: {e}"));
    field.clear().await.unwrap();
    field.send_keys(value).await.unwrap();
}

fn share(p: &engine::preview::Preview, member: &str) -> String {
    let m = p.members.iter().find(|m| m.member == member).unwrap();
    format!("{:.2} %", m.share * 100.0)
}

fn count(p: &engine::preview::Preview, member: &str) -> String {
    let m = p.members.iter().find(|m| m.member == member).unwrap();
    if m.batch_min == m.batch_max {
        m.batch_min.to_string()
    } else {
        format!("{}–{}", m.batch_min, m.batch_max)
    }
}

#[tokio::test]
async fn a_pm_sees_the_preview_follow_the_typing_and_applies_weights_that_reach_audit_and_redis() {
    let (app, passwords) = app().await;
    let browser = Browser::start().await.expect("headless chromium");
    let c = &browser.client;
    sign_in(c, &app, "demo-pm", &passwords["demo-pm"]).await;
    pool_page(c, &app, "cn-pay").await;
    let version: i64 = text(c, "pool-version").await.parse().unwrap();
    let batch = BatchSize::new(1024, BatchSize::ABSOLUTE_MAX).unwrap();

    // The page opens with the current weights previewed as the engine previews them.
    let now = preview(&Weights::parse_spec("ALIPAY_A=45,WECHAT_B=30,UNION_C=25").unwrap(), batch, Ordering::Smooth);
    assert_eq!(text(c, "preview-share-ALIPAY_A").await, share(&now, "ALIPAY_A"));
    assert_eq!(text(c, "preview-count-UNION_C").await, count(&now, "UNION_C"));
    let dev_old = text(c, "preview-dev-old").await;
    assert_eq!(dev_old, format!("{:.1} tickets", now.spread.as_ref().unwrap().max_window_dev));
    let strip = |p: &engine::preview::Preview| {
        p.spread.as_ref().unwrap().head.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
    };
    let sequence = |id: &'static str| async move {
        c.find(Locator::Id(id)).await.unwrap().attr("data-sequence").await.unwrap().unwrap_or_default()
    };
    assert_eq!(sequence("strip-now").await, strip(&now), "the strip is the engine's ordering");
    assert_eq!(sequence("strip-new").await, strip(&now), "before typing, new is the same");
    assert_eq!(c.find_all(Locator::Css("svg#strip-new rect")).await.unwrap().len(), engine::preview::STRIP_TICKETS);

    // Typing changes the preview at once, nothing is sent.
    retype(c, "weight-ALIPAY_A", "60").await;
    let typed = preview(&Weights::parse_spec("ALIPAY_A=60,WECHAT_B=30,UNION_C=25").unwrap(), batch, Ordering::Smooth);
    wait_text(c, "preview-share-ALIPAY_A", &share(&typed, "ALIPAY_A")).await;
    assert_eq!(text(c, "preview-count-ALIPAY_A").await, count(&typed, "ALIPAY_A"));
    assert_eq!(text(c, "preview-share-WECHAT_B").await, share(&typed, "WECHAT_B"));
    let spread = typed.spread.as_ref().unwrap();
    assert_eq!(text(c, "preview-dev-new").await, format!("{:.1} tickets", spread.max_window_dev));
    assert_eq!(text(c, "preview-run-new").await, format!("{} ({})", spread.longest_run, spread.longest_run_member));
    assert_eq!(text(c, "preview-dev-old").await, dev_old, "the current weights' column stays");
    assert_eq!(sequence("strip-new").await, strip(&typed), "the new strip follows the typed weights");
    assert_ne!(strip(&typed), strip(&now));
    assert_eq!(sequence("strip-now").await, strip(&now), "the current strip stays");
    assert_eq!(text(c, "pool-version").await, version.to_string(), "nothing was saved");

    // A malformed weight is named beside its field, and the preview shows nothing new.
    retype(c, "weight-WECHAT_B", "3o").await;
    let error = wait_for_text(c, "weight-error-WECHAT_B").await;
    assert!(error.contains("WECHAT_B") && error.contains("3o"), "{error}");
    wait_text(c, "preview-share-ALIPAY_A", "–").await;

    // Percentages are made exact: 50 % / 30 % / 20 % is 5:3:2.
    retype(c, "weight-ALIPAY_A", "50%").await;
    retype(c, "weight-WECHAT_B", "30%").await;
    retype(c, "weight-UNION_C", "20%").await;
    let percents = preview(&Weights::parse_spec("ALIPAY_A=5,WECHAT_B=3,UNION_C=2").unwrap(), batch, Ordering::Smooth);
    wait_text(c, "preview-share-UNION_C", "20.00 %").await;
    assert_eq!(text(c, "preview-count-ALIPAY_A").await, count(&percents, "ALIPAY_A"));
    assert!(text(c, "weight-error-WECHAT_B").await.is_empty());
    screenshot(c, "pool-weights-preview").await;

    // Applied with a reason: the next version, shown after the reload.
    c.find(Locator::Id("weights-reason")).await.unwrap().send_keys("gray release: 50/30/20").await.unwrap();
    c.find(Locator::Id("weights-submit")).await.unwrap().click().await.unwrap();
    let next = format!("//strong[@id='pool-version' and text()='{}']", version + 1);
    c.wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::XPath(&next))
        .await
        .expect("saved: the next version");
    let configured = c
        .find(Locator::Css("#members tr[data-channel='ALIPAY_A'] td:nth-child(2)"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(configured, "5", "the configured weight, made exact from 50 %");

    // Redis holds the new snapshot: its version is the newest published one.
    server::publish::drain_outbox(&app.state).await.unwrap();
    let published =
        server::pools::store::get_published_pool(&app.state.db, &client::pool::PoolName::parse("cn-pay").unwrap())
            .await
            .unwrap()
            .expect("published");
    assert_eq!(published.weights.weight(published.weights.index_of("ALIPAY_A").unwrap()), 5);
    let mut conn = app.state.redis.connection().await.unwrap();
    let in_redis: i64 =
        redis::cmd("HGET").arg(app.state.keys.pool_meta("cn-pay")).arg("version").query_async(&mut conn).await.unwrap();
    assert_eq!(in_redis as u64, published.version, "the meta hash has the newest version");

    // The audit page shows who, why and the difference.
    c.goto(&format!("{}/audit?entity=pool:cn-pay&action=pool.weights", app.address)).await.unwrap();
    let rows =
        c.wait().at_most(Duration::from_secs(10)).for_element(Locator::Id("audit-rows")).await.expect("the audit rows");
    let rows = rows.text().await.unwrap();
    assert!(rows.contains("demo-pm") && rows.contains("gray release: 50/30/20") && rows.contains("ui"), "{rows}");
    assert!(rows.contains("ALIPAY_A") && rows.contains('5'), "{rows}");
    // Nested values as a table of what changed: the member's weight by its name, before and after.
    let changed = c
        .find(Locator::Css("#audit-rows table.diff tr[data-key='weights[ALIPAY_A].weight']"))
        .await
        .expect("the weight's row in the diff")
        .text()
        .await
        .unwrap();
    assert!(changed.to_lowercase().contains("changed") && changed.contains("45"), "{changed}");
    screenshot(c, "audit-weights-diff").await;

    browser.close().await;
}

#[tokio::test]
async fn peak_windows_and_caps_are_checked_beside_their_fields_and_saved() {
    let (app, passwords) = app().await;
    let browser = Browser::start().await.expect("headless chromium");
    let c = &browser.client;
    sign_in(c, &app, "demo-pm", &passwords["demo-pm"]).await;
    pool_page(c, &app, "cn-pay").await;
    let version: i64 = text(c, "pool-version").await.parse().unwrap();

    // A new window: every rule is said beside its field as it is typed.
    let existing = c.find_all(Locator::Css("#peak-windows tbody tr")).await.unwrap().len();
    c.find(Locator::Id("peak-add")).await.unwrap().click().await.unwrap();
    let k = existing; // the new row's key
    retype(c, &format!("peak-start-{k}"), "25:00").await;
    assert!(wait_for_text(c, &format!("peak-start-error-{k}")).await.contains("HH:MM"));
    retype(c, &format!("peak-start-{k}"), "19:00").await;
    retype(c, &format!("peak-end-{k}"), "19:00").await;
    assert!(wait_for_text(c, &format!("peak-end-error-{k}")).await.contains("must differ"));
    retype(c, &format!("peak-end-{k}"), "23:00").await;
    retype(c, &format!("peak-multiplier-{k}"), "0").await;
    assert!(wait_for_text(c, &format!("peak-multiplier-error-{k}")).await.contains("from 1 to 1000"));
    retype(c, &format!("peak-multiplier-{k}"), "3").await;
    wait_text(c, &format!("peak-multiplier-error-{k}"), "").await;

    // A second window overlapping the first is refused, naming both.
    c.find(Locator::Id("peak-add")).await.unwrap().click().await.unwrap();
    let k2 = k + 1;
    retype(c, &format!("peak-start-{k2}"), "22:00").await;
    retype(c, &format!("peak-end-{k2}"), "01:00").await;
    let overlap = wait_for_text(c, "peak-error").await;
    assert!(overlap.contains("19:00–23:00") && overlap.contains("22:00–01:00"), "{overlap}");
    c.find(Locator::Id("peak-reason")).await.unwrap().send_keys("evening peak").await.unwrap();
    c.find(Locator::Id("peak-submit")).await.unwrap().click().await.unwrap();
    assert!(wait_for_text(c, "peak-message").await.contains("overlap"));
    assert_eq!(text(c, "pool-version").await, version.to_string(), "nothing was sent");
    screenshot(c, "pool-peak-overlap").await;
    c.find(Locator::Id(&format!("peak-remove-{k2}"))).await.unwrap().click().await.unwrap();
    wait_text(c, "peak-error", "").await;
    c.find(Locator::Id("peak-submit")).await.unwrap().click().await.unwrap();
    let next = format!("//strong[@id='pool-version' and text()='{}']", version + 1);
    c.wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::XPath(&next))
        .await
        .expect("saved: the next version");
    hydrated(c).await;

    // Caps: zero is refused beside the field; a valid cap is saved.
    retype(c, "cap-ALIPAY_A", "0").await;
    assert!(wait_for_text(c, "cap-ALIPAY_A-error").await.contains("from 1 to"));
    retype(c, "cap-ALIPAY_A", "250000").await;
    wait_text(c, "cap-ALIPAY_A-error", "").await;
    c.find(Locator::Id("caps-reason")).await.unwrap().send_keys("acquirer daily limit").await.unwrap();
    c.find(Locator::Id("caps-submit")).await.unwrap().click().await.unwrap();
    let next = format!("//strong[@id='pool-version' and text()='{}']", version + 2);
    c.wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::XPath(&next))
        .await
        .expect("saved: the version after");
    hydrated(c).await;
    screenshot(c, "pool-limits").await;

    let (_, configured) =
        server::pools::store::get_pool(&app.state.db, &client::pool::PoolName::parse("cn-pay").unwrap())
            .await
            .unwrap()
            .unwrap();
    assert_eq!(configured["caps"], serde_json::json!({"ALIPAY_A": 250000}));
    let windows = configured["peak_windows"].as_array().unwrap();
    assert!(
        windows.iter().any(|w| w["start"] == "19:00" && w["end"] == "23:00" && w["multiplier"] == 3),
        "{windows:?}"
    );
    assert_eq!(windows.len(), existing + 1);

    // A viewer sees the limits, and no editor.
    integration::ui::sign_out(c).await;
    sign_in(c, &app, "demo-viewer", &passwords["demo-viewer"]).await;
    pool_page(c, &app, "cn-pay").await;
    assert!(c.find(Locator::Id("peak-form")).await.is_err() && c.find(Locator::Id("caps-form")).await.is_err());
    let caps = text(c, "caps").await;
    assert!(caps.contains("ALIPAY_A") && caps.contains("250000"), "{caps}");
    assert!(text(c, "peak-windows").await.contains("19:00"));

    browser.close().await;
}
