//! A ramp in headless Chromium: a pm starts one on the pool's ramp page, watches its
//! timeline advance as the guard job moves it, aborts it with a reason, and finds the
//! ramp's rows in the audit trail.

use std::time::Duration;

use fantoccini::{Client, Locator};
use integration::browser::Browser;
use integration::hold_jobs;
use integration::ui::{
    app_with_users, axe_violations, hover_text, hydrated, overflows, screenshot, sign_in, wait_text,
    without_demo_policy,
};

async fn fill(c: &Client, id: &str, text: &str) {
    let field = c.find(Locator::Id(id)).await.unwrap_or_else(|e| panic!("#{id}: {e}"));
    field.clear().await.unwrap();
    field.send_keys(text).await.unwrap();
}

/// Waits (up to 10 s) until the element `id` has text containing `part` (any text when
/// `part` is empty).
async fn wait_text_contains(c: &Client, id: &str, part: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let shown = c.find(Locator::Id(id)).await.unwrap_or_else(|e| panic!("#{id}: {e}")).text().await.unwrap();
        if !shown.is_empty() && shown.contains(part) {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "#{id} reads {shown:?}, not {part:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_pm_starts_a_ramp_sees_it_advance_aborts_it_with_a_reason_and_finds_it_audited() {
    // Arrange: the demo data without cn-pay's policy (the ramp starts at once), and the
    // guard job led by the test, which moves the ramp when it says so.
    let (app, passwords) = app_with_users(true).await;
    let _jobs = hold_jobs(&app, &["ramp_guard"]).await;
    without_demo_policy(&app).await;
    let browser = Browser::start().await.expect("headless chromium");
    let c = &browser.client;
    sign_in(c, &app, "demo-pm", &passwords["demo-pm"]).await;

    // Act: start a ramp of UNION_C from 25 % to 40 % in two steps and the target
    c.goto(&format!("{}/pools/cn-pay/ramp", app.address)).await.unwrap();
    c.wait().at_most(Duration::from_secs(10)).for_element(Locator::Id("ramp-start")).await.expect("the start form");
    hydrated(c).await;
    fill(c, "ramp-target", "ALIPAY_A=45,WECHAT_B=30,UNION_C=50").await;
    fill(c, "ramp-start-reason", "UnionPay C takes more").await;
    // Errors go under the field they name: one the form finds, then one the API finds
    // (a first step beyond the target's share: `plan.steps[0].share`); nothing starts.
    fill(c, "ramp-shares", "30, 35").await;
    fill(c, "ramp-hold", "ten").await;
    c.find(Locator::Id("ramp-start-button")).await.unwrap().click().await.unwrap();
    wait_text_contains(c, "ramp-hold-error", "whole number").await;
    fill(c, "ramp-hold", "0").await;
    fill(c, "ramp-shares", "80").await;
    c.find(Locator::Id("ramp-start-button")).await.unwrap().click().await.unwrap();
    wait_text_contains(c, "ramp-shares-error", "").await;
    assert_eq!(
        c.find(Locator::Id("ramp-hold-error")).await.unwrap().text().await.unwrap(),
        "",
        "the old error is gone"
    );
    assert!(c.find(Locator::Id("ramp-timeline")).await.is_err(), "no ramp started");
    fill(c, "ramp-shares", "30, 35").await;
    fill(c, "ramp-min-success", "0").await;
    fill(c, "ramp-start-reason", "UnionPay C takes more").await;
    c.find(Locator::Id("ramp-start-button")).await.unwrap().click().await.unwrap();
    c.wait().at_most(Duration::from_secs(10)).for_element(Locator::Id("ramp-timeline")).await.expect("the timeline");
    wait_text(c, "ramp-state-value", "running").await;
    wait_text(c, "ramp-step", "1").await;
    wait_text(c, "ramp-canary-share", "30%").await;

    // Outcomes for the guard to measure (90 of 100 calls through each channel succeed)
    let outcomes = client::Outcomes::new(app.state.redis.clone(), app.state.keys.clone(), client::Clock::Redis, None);
    for channel in ["ALIPAY_A", "WECHAT_B", "UNION_C"] {
        let code = client::health::ChannelCode::parse(channel).unwrap();
        let counts = client::health::OutcomeCounts { ok: 90, fail: 10, latency_ms_sum: 2_000, latency_count: 100 };
        outcomes.record_counts(&code, &counts).await.unwrap();
    }

    // The guard job moves it on; the page shows the new step without a reload
    let moved = server::jobs::ramp_guard::run_once(&app.state, chrono::Utc::now() + chrono::Duration::seconds(1))
        .await
        .unwrap();
    assert_eq!(moved.changes.len(), 1, "{moved:?}");
    wait_text(c, "ramp-step", "2").await;
    wait_text(c, "ramp-canary-share", "35%").await;
    let started =
        c.find(Locator::Css("#ramp-timeline tr[data-step='2'] td.started")).await.unwrap().text().await.unwrap();
    assert_ne!(started, "—", "step 2's start is shown");
    // The guard's evaluation charted: hovering it shows each member's success rate as the
    // ramp's API gives it.
    let pm = integration::ui::Session::sign_in(&app, "demo-pm", &passwords["demo-pm"]).await;
    let (status, ramp) = pm.get(&app, "/api/v1/ramps/1").await;
    assert_eq!(status, 200, "{ramp}");
    let sample = ramp["samples"].as_array().and_then(|s| s.last()).cloned().unwrap_or_else(|| panic!("{ramp}"));
    let chart = c.wait().at_most(Duration::from_secs(20)).for_element(Locator::Css("figure#ramp-chart")).await;
    chart.expect("the guard chart");
    let shown =
        hover_text(c, "#ramp-chart .plot-band:last-child", "#ramp-chart .plot-band:last-child .plot-tip-box").await;
    for member in ["ALIPAY_A", "WECHAT_B", "UNION_C"] {
        let rate = sample["members"][member]["success_rate"].as_f64().unwrap_or_else(|| panic!("{member}: {sample}"));
        let expected = format!("{member}: {:.1} %", rate * 100.0);
        assert!(shown.contains(&expected), "{shown:?} lacks {expected:?} ({sample})");
    }
    // The live ramp's page fits a phone too, and passes axe-core, chart and all.
    for width in [390, 1440] {
        c.set_window_size(width, 900).await.unwrap();
        assert_eq!(overflows(c).await, Vec::<String>::new(), "the ramp page at {width} px");
        assert_eq!(axe_violations(c).await, Vec::<String>::new(), "the ramp page at {width} px");
    }
    screenshot(c, "ramp-advanced").await;

    // Abort it with a reason
    hydrated(c).await;
    fill(c, "ramp-reason", "declines from UnionPay in the logs").await;
    c.find(Locator::Id("ramp-abort")).await.unwrap().click().await.unwrap();
    wait_text(c, "ramp-state-value", "aborted").await;
    wait_text(c, "ramp-canary-share", "25%").await;
    screenshot(c, "ramp-aborted").await;

    // Assert: the ramp's own rows in the audit trail, the reason with them
    c.goto(&format!("{}/audit?entity=ramp:1", app.address)).await.unwrap();
    let rows = c
        .wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Id("audit-rows"))
        .await
        .expect("the audit rows")
        .text()
        .await
        .unwrap();
    assert!(rows.contains("ramp.abort") && rows.contains("ramp.start"), "{rows}");
    assert!(rows.contains("declines from UnionPay in the logs"), "{rows}");
    let cn_pay = client::pool::PoolName::parse("cn-pay").unwrap();
    let (_, pool) = server::pools::store::get_pool(&app.state.db, &cn_pay).await.unwrap().unwrap();
    let union_c = pool["weights"].as_array().unwrap().iter().find(|w| w["member"] == "UNION_C").cloned();
    assert_eq!(union_c.unwrap()["weight"], 25, "back at the baseline: {pool}");
}
