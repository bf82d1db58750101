//! The channels page in headless Chromium with access control on: an operator disables a
//! channel through the page and draws stop serving it; a viewer sees no forms, and a write
//! forged with a viewer's session is refused.

use std::collections::HashMap;
use std::time::Duration;

use fantoccini::{Client, Locator};
use integration::browser::Browser;
use integration::ui::{api_session, app_with_users, hydrated, screenshot, sign_in, sign_out, text};
use integration::TestApp;

async fn app() -> (TestApp, HashMap<String, String>) {
    app_with_users(true).await
}

/// Opens the channels page and waits for the table and hydration.
async fn channels_page(c: &Client, app: &TestApp) {
    c.goto(&format!("{}/channels", app.address)).await.unwrap();
    c.wait().at_most(Duration::from_secs(10)).for_element(Locator::Id("channels")).await.expect("the channel table");
    hydrated(c).await;
}

#[tokio::test]
async fn an_operator_disables_a_channel_and_a_viewer_can_neither_see_nor_forge_the_forms() {
    let (app, passwords) = app().await;
    let browser = Browser::start().await.expect("headless chromium");
    let c = &browser.client;
    let cn_pay = client::pool::PoolName::parse("cn-pay").unwrap();

    // The operator: every channel with its pools' health, and the forms.
    sign_in(c, &app, "demo-operator", &passwords["demo-operator"]).await;
    channels_page(c, &app).await;
    let row = c.find(Locator::Css("#channels tr[data-channel='ALIPAY_A']")).await.unwrap().text().await.unwrap();
    assert!(row.contains("cn-pay") && row.contains("healthy"), "{row}");
    assert_eq!(text(c, "enabled-ALIPAY_A").await, "enabled");

    // Without a reason nothing is sent, and the page says why.
    c.find(Locator::Id("disable-ALIPAY_A")).await.unwrap().click().await.unwrap();
    let message = c
        .wait()
        .at_most(Duration::from_secs(5))
        .for_element(Locator::XPath("//p[@id='message-ALIPAY_A' and string-length(normalize-space(.)) > 0]"))
        .await
        .expect("a reason is asked for")
        .text()
        .await
        .unwrap();
    assert!(message.contains("reason is required"), "{message}");
    assert_eq!(text(c, "enabled-ALIPAY_A").await, "enabled");

    // With a reason: disabled, shown without a reload.
    c.find(Locator::Id("reason-ALIPAY_A")).await.unwrap().send_keys("acquirer outage").await.unwrap();
    c.find(Locator::Id("disable-ALIPAY_A")).await.unwrap().click().await.unwrap();
    c.wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::XPath("//span[@id='enabled-ALIPAY_A' and text()='disabled']"))
        .await
        .expect("the badge reads disabled");
    assert!(text(c, "channels-message").await.contains("ALIPAY_A disabled"));
    assert!(c.find(Locator::Id("enable-ALIPAY_A")).await.is_ok(), "the row now offers to enable it");
    screenshot(c, "channels-operator").await;

    // Draws no longer serve it.
    server::publish::drain_outbox(&app.state).await.unwrap();
    for _ in 0..50 {
        let draw = app.state.pools.draw(&cn_pay).await.unwrap();
        assert_ne!(draw.member, "ALIPAY_A", "a disabled channel is never drawn");
    }

    // A pin, then an unpin, each shown in the row once done.
    c.find(Locator::Id("reason-GRAB_G1")).await.unwrap().send_keys("settlement checks").await.unwrap();
    c.find(Locator::Id("pin-ejected-GRAB_G1")).await.unwrap().click().await.unwrap();
    c.wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::XPath("//span[@id='pin-GRAB_G1' and normalize-space(.)='pinned ejected']"))
        .await
        .expect("the pin shows");
    let row = c.find(Locator::Css("#channels tr[data-channel='GRAB_G1']")).await.unwrap().text().await.unwrap();
    assert!(row.contains("sea-pay ejected"), "{row}");
    c.find(Locator::Id("reason-GRAB_G1")).await.unwrap().send_keys("checks done").await.unwrap();
    c.find(Locator::Id("unpin-GRAB_G1")).await.unwrap().click().await.unwrap();
    c.wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::XPath("//span[@id='pin-GRAB_G1' and normalize-space(.)='none']"))
        .await
        .expect("the pin is gone");
    sign_out(c).await;

    // The viewer: the channels, no forms, and a sentence saying why.
    sign_in(c, &app, "demo-viewer", &passwords["demo-viewer"]).await;
    channels_page(c, &app).await;
    assert_eq!(text(c, "enabled-ALIPAY_A").await, "disabled");
    assert!(c.find_all(Locator::Css("#channels form")).await.unwrap().is_empty(), "no forms for a viewer");
    assert!(c.find(Locator::Id("reason-WECHAT_B")).await.is_err());
    let why = text(c, "channels-restricted").await;
    assert!(why.contains("operator and admin") && why.contains("viewer"), "{why}");
    screenshot(c, "channels-viewer").await;

    // A write forged with the viewer's own session and CSRF token is refused.
    let (cookie, csrf) = api_session(&app, "demo-viewer", &passwords["demo-viewer"]).await;
    let forged = app
        .request(reqwest::Method::POST, "/api/v1/channels/WECHAT_B/disable")
        .header("cookie", cookie)
        .header("x-csrf-token", csrf)
        .header("origin", &app.address)
        .json(&serde_json::json!({"reason": "forged"}))
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), 403);
    let wechat = server::channels::ChannelCode::parse("WECHAT_B").unwrap();
    let wechat = server::channels::store::get_channel(&app.state.db, &wechat).await.unwrap().unwrap();
    assert!(wechat.enabled, "the forged write changed nothing");

    browser.close().await;
}

#[tokio::test]
async fn a_channels_health_history_is_charted_with_its_transitions_marked_and_listed() {
    use chrono::{DurationRound, TimeDelta, Utc};
    let (app, passwords) = app().await;
    // Failing outcomes for ALIPAY_A, healthy ones for the others, judged by the real health
    // job at two successive minutes: two transitions (halved, then halved again).
    let minute = Utc::now().duration_trunc(TimeDelta::minutes(1)).unwrap() - TimeDelta::minutes(10);
    let clock = client::Clock::manual(minute);
    let outcomes = client::Outcomes::new(app.state.redis.clone(), app.state.keys.clone(), clock.clone(), None);
    for step in 0..2 {
        let at = minute + TimeDelta::minutes(step);
        clock.set(at);
        for (channel, ok, fail) in [("ALIPAY_A", 20, 80), ("WECHAT_B", 100, 0), ("UNION_C", 100, 0)] {
            let code = client::health::ChannelCode::parse(channel).unwrap();
            let counts =
                client::health::OutcomeCounts { ok, fail, latency_ms_sum: (ok + fail) * 20, latency_count: ok + fail };
            outcomes.record_counts(&code, &counts).await.unwrap();
        }
        server::health::run_once(&app.state, at + TimeDelta::seconds(10)).await.unwrap();
    }

    let browser = Browser::start().await.expect("headless chromium");
    let c = &browser.client;
    sign_in(c, &app, "demo-viewer", &passwords["demo-viewer"]).await;
    channels_page(c, &app).await;
    // The channel's code links to its history.
    c.find(Locator::Css("#channels tr[data-channel='ALIPAY_A'] a")).await.unwrap().click().await.unwrap();
    let chart = c
        .wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Css("svg#decay-cn-pay"))
        .await
        .expect("the decay chart of cn-pay");
    assert_eq!(chart.attr("data-steps").await.unwrap().as_deref(), Some("2"), "both transitions are marked");
    assert!(c.find(Locator::Css("svg#decay-cn-pay > title")).await.is_ok(), "the chart has a text alternative");
    let table = text(c, "transitions-cn-pay").await;
    assert!(table.contains("healthy → decaying"), "{table}");
    assert!(table.contains("45 → "), "the first change starts from the base weight 45: {table}");
    assert_eq!(c.find_all(Locator::Css("svg#decay-cn-pay .marker")).await.unwrap().len(), 2);
    screenshot(c, "channel-history").await;

    // A healthy channel: a flat line and a sentence, no table.
    c.goto(&format!("{}/channels/WECHAT_B", app.address)).await.unwrap();
    let flat = c.wait().at_most(Duration::from_secs(10)).for_element(Locator::Css("svg#decay-cn-pay")).await.unwrap();
    assert_eq!(flat.attr("data-steps").await.unwrap().as_deref(), Some("0"));
    assert!(c.find(Locator::Id("transitions-cn-pay")).await.is_err());

    browser.close().await;
}
