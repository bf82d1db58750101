//! The channels page in headless Chromium with access control on: an operator disables a
//! channel through its row's change dialog and draws stop serving it; a viewer sees no
//! forms, and a write forged with a viewer's session is refused; 200 channels are searched
//! and paged on the server.

use std::collections::HashMap;
use std::time::Duration;

use fantoccini::{Client, Locator};
use integration::browser::Browser;
use integration::ui::{api_session, app_with_users, hover_text, hydrated, screenshot, sign_in, sign_out, text};
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

/// Opens a channel's change dialog from its row and waits for its reason field, which
/// has the focus.
async fn open_dialog(c: &Client, code: &str) {
    c.find(Locator::Id(&format!("change-{code}"))).await.unwrap().click().await.unwrap();
    let reason = c
        .wait()
        .at_most(Duration::from_secs(5))
        .for_element(Locator::Id(&format!("reason-{code}")))
        .await
        .unwrap_or_else(|e| panic!("the dialog of {code}: {e}"));
    let focused = c.active_element().await.unwrap();
    assert_eq!(focused.attr("id").await.unwrap(), reason.attr("id").await.unwrap(), "the reason has the focus");
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

    // One dialog per row: without a reason nothing is sent, and the dialog says why.
    assert!(c.find(Locator::Id("reason-ALIPAY_A")).await.is_err(), "no form per row");
    open_dialog(c, "ALIPAY_A").await;
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
    assert!(c.find(Locator::Id("change-dialog")).await.is_err(), "the dialog closed once done");
    open_dialog(c, "ALIPAY_A").await;
    assert!(c.find(Locator::Id("enable-ALIPAY_A")).await.is_ok(), "the dialog now offers to enable it");
    c.find(Locator::Id("dialog-close")).await.unwrap().click().await.unwrap();
    screenshot(c, "channels-operator").await;

    // Draws no longer serve it.
    server::publish::drain_outbox(&app.state).await.unwrap();
    for _ in 0..50 {
        let draw = app.state.pools.draw(&cn_pay).await.unwrap();
        assert_ne!(draw.member, "ALIPAY_A", "a disabled channel is never drawn");
    }

    // A pin, then an unpin, each shown in the row once done.
    open_dialog(c, "GRAB_G1").await;
    c.find(Locator::Id("reason-GRAB_G1")).await.unwrap().send_keys("settlement checks").await.unwrap();
    c.find(Locator::Id("pin-ejected-GRAB_G1")).await.unwrap().click().await.unwrap();
    c.wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::XPath("//span[@id='pin-GRAB_G1' and normalize-space(.)='pinned ejected']"))
        .await
        .expect("the pin shows");
    let row = c.find(Locator::Css("#channels tr[data-channel='GRAB_G1']")).await.unwrap().text().await.unwrap();
    assert!(row.contains("sea-pay ejected"), "{row}");
    open_dialog(c, "GRAB_G1").await;
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
    assert!(c.find(Locator::Id("change-WECHAT_B")).await.is_err(), "no change button for a viewer");
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
        .for_element(Locator::Css("figure#decay-cn-pay"))
        .await
        .expect("the decay chart of cn-pay");
    assert_eq!(chart.attr("data-marks").await.unwrap().as_deref(), Some("2"), "both transitions are marked");
    assert!(c.find(Locator::Css("figure#decay-cn-pay > figcaption")).await.is_ok(), "the chart has a caption");
    let table = text(c, "transitions-cn-pay").await;
    assert!(table.contains("healthy → decaying"), "{table}");
    assert!(table.contains("45 → "), "the first change starts from the base weight 45: {table}");
    assert_eq!(c.find_all(Locator::Css("#decay-cn-pay .plot-mark")).await.unwrap().len(), 2);
    // Hovering the newest step shows the weight the API gives after the last transition.
    let viewer = integration::ui::Session::sign_in(&app, "demo-viewer", &passwords["demo-viewer"]).await;
    let (status, history) = viewer.get(&app, "/api/v1/channels/ALIPAY_A/health/history?limit=10").await;
    assert_eq!(status, 200, "{history}");
    let newest = history["transitions"].as_array().and_then(|t| t.iter().find(|t| t["pool"] == "cn-pay")).cloned();
    let newest = newest.unwrap_or_else(|| panic!("a cn-pay transition: {history}"));
    let factor = newest["factor_after"].as_f64().unwrap_or_else(|| panic!("{newest}"));
    let weight = engine::health::effective_weight(45, factor, newest["to"] == "ejected");
    let bands = c.find_all(Locator::Css("#decay-cn-pay .plot-band")).await.unwrap();
    assert_eq!(bands.len(), 3, "before the first transition, and one per transition");
    let tip_text =
        hover_text(c, "#decay-cn-pay .plot-band:last-child", "#decay-cn-pay .plot-band:last-child .plot-tip-box").await;
    assert!(tip_text.contains(&format!("effective weight: {weight} weight")), "{tip_text} against {newest}");
    // The outcome reports of the last hour on one time axis: the two failing minutes, the
    // pool's threshold, and both transitions marked on the success-rate chart.
    let outcomes = c.find(Locator::Css("#outcomes-ALIPAY_A")).await.expect("the outcome charts");
    assert_eq!(outcomes.attr("data-minutes").await.unwrap().as_deref(), Some("2"));
    assert_eq!(outcomes.attr("data-marks").await.unwrap().as_deref(), Some("2"));
    let rate = c.find(Locator::Css("figure#outcomes-ALIPAY_A-rate")).await.unwrap();
    assert_eq!(rate.attr("data-points").await.unwrap().as_deref(), Some("2"), "a point per minute with reports");
    let threshold =
        c.find(Locator::Css("#outcomes-ALIPAY_A-rate .plot-rule-label")).await.unwrap().text().await.unwrap();
    assert!(threshold.contains("pool cn-pay threshold 90.0 %"), "{threshold}");
    assert_eq!(c.find_all(Locator::Css("#outcomes-ALIPAY_A-rate .plot-mark")).await.unwrap().len(), 2);
    let failed = c.find_all(Locator::Css("#outcomes-ALIPAY_A-volume rect.plot-bar.tone-bad")).await.unwrap();
    assert_eq!(failed.len(), 2, "a failed bar per minute");
    // Hover values are the reports as recorded (20 ok and 80 failed in each minute).
    for chart in ["rate", "volume"] {
        let band = format!("#outcomes-ALIPAY_A-{chart} .plot-band");
        let shown = hover_text(c, &band, &format!("{band} .plot-tip-box")).await;
        let expected: &[&str] = if chart == "rate" {
            &["success rate: 20.0 % (of 100)"]
        } else {
            &["ok: 20 outcomes", "failed: 80 outcomes"]
        };
        for e in expected {
            assert!(shown.contains(e), "{chart}: {shown:?} lacks {e:?}");
        }
        assert!(shown.contains("UTC"), "the exact UTC time on hover: {shown}");
    }
    let caption = c.find(Locator::Css("#outcomes-ALIPAY_A > .chart-summary")).await.unwrap().text().await.unwrap();
    assert!(caption.contains("200 outcomes") && caption.contains("20.0 % successful"), "{caption}");
    // With its transitions marked, the page fits a phone and passes axe-core.
    for width in [390, 1440] {
        c.set_window_size(width, 900).await.unwrap();
        assert_eq!(integration::ui::overflows(c).await, Vec::<String>::new(), "the channel page at {width} px");
        assert_eq!(integration::ui::axe_violations(c).await, Vec::<String>::new(), "the channel page at {width} px");
    }
    screenshot(c, "channel-history").await;

    // A healthy channel: a flat line and a sentence, no table.
    c.goto(&format!("{}/channels/WECHAT_B", app.address)).await.unwrap();
    let flat =
        c.wait().at_most(Duration::from_secs(10)).for_element(Locator::Css("figure#decay-cn-pay")).await.unwrap();
    assert_eq!(flat.attr("data-marks").await.unwrap().as_deref(), Some("0"));
    assert!(c.find(Locator::Id("transitions-cn-pay")).await.is_err());

    browser.close().await;
}

#[tokio::test]
async fn two_hundred_channels_are_searched_sorted_and_paged_on_the_server() {
    // Arrange: the demo's channels and 200 more (inserted in one statement: the list is
    // under test here, not the audited write path)
    let (app, passwords) = app().await;
    sqlx::query(
        "insert into channel (code, name, base_weight, enabled, version)
         select 'BULK_' || lpad(n::text, 3, '0'), 'bulk channel ' || n, 1 + n % 50, n % 10 <> 0, 1
         from generate_series(0, 199) n",
    )
    .execute(&app.state.db)
    .await
    .unwrap();
    let browser = Browser::start().await.expect("headless chromium");
    let c = &browser.client;
    sign_in(c, &app, "demo-operator", &passwords["demo-operator"]).await;

    // Act + Assert: 50 rows a page, the next page by its link
    channels_page(c, &app).await;
    let summary = text(c, "channels-summary").await;
    assert!(summary.contains("page 1 of 5"), "{summary}");
    assert_eq!(c.find_all(Locator::Css("#channels tbody tr")).await.unwrap().len(), 50);
    c.find(Locator::Id("channels-next")).await.unwrap().click().await.unwrap();
    c.wait().at_most(Duration::from_secs(10)).for_element(Locator::Id("channels-previous")).await.expect("page 2");
    assert_eq!(c.current_url().await.unwrap().query(), Some("page=2"));

    // A search with a sort, typed in the form: the query lands in the address
    channels_page(c, &app).await;
    c.find(Locator::Id("channel-search")).await.unwrap().send_keys("bulk_01").await.unwrap();
    c.find(Locator::Css("#channel-sort option[value='attention']")).await.unwrap().click().await.unwrap();
    c.find(Locator::Css("form[role='search'] button[type='submit']")).await.unwrap().click().await.unwrap();
    // (The first page, before the search, holds BULK_011 too: wait for the summary.)
    c.wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::XPath("//p[@id='channels-summary' and contains(., 'matching \"bulk_01\"')]"))
        .await
        .expect("the matches");
    assert_eq!(c.current_url().await.unwrap().query(), Some("q=bulk_01&sort=attention"));
    let rows = c.find_all(Locator::Css("#channels tbody tr")).await.unwrap();
    assert_eq!(rows.len(), 10, "BULK_010 … BULK_019");
    // Needs attention first: BULK_010 is disabled (every tenth channel is)
    assert_eq!(rows[0].attr("data-channel").await.unwrap().as_deref(), Some("BULK_010"));
    assert_eq!(text(c, "enabled-BULK_010").await, "disabled");
    screenshot(c, "channels-200").await;

    browser.close().await;
}

#[tokio::test]
async fn the_change_dialog_works_from_the_keyboard_alone_and_keeps_the_focus_inside() {
    use fantoccini::key::Key;
    let (app, passwords) = app().await;
    let browser = Browser::start().await.expect("headless chromium");
    let c = &browser.client;
    sign_in(c, &app, "demo-operator", &passwords["demo-operator"]).await;
    channels_page(c, &app).await;
    let inside = "return document.getElementById('change-dialog').contains(document.activeElement)";
    let focused_id = "return document.activeElement ? document.activeElement.id : ''";

    // Enter on the row's button opens the dialog, its reason field focused
    let opener = c.find(Locator::Id("change-ALIPAY_A")).await.unwrap();
    opener.send_keys(&Key::Enter.to_string()).await.unwrap();
    c.wait().at_most(Duration::from_secs(5)).for_element(Locator::Id("change-dialog")).await.expect("the dialog");
    assert_eq!(c.execute(focused_id, vec![]).await.unwrap(), "reason-ALIPAY_A");

    // Tab and Shift+Tab go round inside it, however many times they are pressed
    let focusable: u64 = c
        .execute("return document.getElementById('change-dialog').querySelectorAll('button:not([disabled]), input:not([disabled]), select:not([disabled]), a[href]').length", vec![])
        .await
        .unwrap()
        .as_u64()
        .unwrap();
    assert!(focusable >= 3, "{focusable}");
    for press in 0..focusable * 2 + 1 {
        c.active_element().await.unwrap().send_keys(&Key::Tab.to_string()).await.unwrap();
        assert_eq!(c.execute(inside, vec![]).await.unwrap(), true, "Tab {press} left the dialog");
    }
    for press in 0..focusable + 1 {
        let shift_tab = format!("{}{}", Key::Shift, Key::Tab);
        c.active_element().await.unwrap().send_keys(&shift_tab).await.unwrap();
        assert_eq!(c.execute(inside, vec![]).await.unwrap(), true, "Shift+Tab {press} left the dialog");
    }

    // Escape closes it and the focus is back on the button that opened it
    c.active_element().await.unwrap().send_keys(&Key::Escape.to_string()).await.unwrap();
    c.wait()
        .at_most(Duration::from_secs(5))
        .for_element(Locator::XPath("//body[not(.//*[@id='change-dialog'])]"))
        .await
        .expect("the dialog closes");
    assert_eq!(c.execute(focused_id, vec![]).await.unwrap(), "change-ALIPAY_A", "the focus returns to the opener");

    browser.close().await;
}
