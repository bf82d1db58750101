//! Adaptive tiers in headless Chromium: a tiers pool in suggest mode offers a move after
//! its channel's failing windows; a pm sees it on the pool's page with the measured rates,
//! accepts it with a reason, and the channel is in its new tier.

use std::time::Duration;

use chrono::TimeZone;
use fantoccini::{Client, Locator};
use integration::browser::Browser;
use integration::hold_jobs;
use integration::ui::{app_with_users, hydrated, screenshot, sign_in};
use serde_json::json;

async fn cell_text(c: &Client, css: &str) -> String {
    let mut last = String::new();
    for _ in 0..200 {
        if let Ok(element) = c.find(Locator::Css(css)).await {
            last = element.text().await.unwrap_or_default();
            if !last.is_empty() {
                return last;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{css}: {last:?}");
}

#[tokio::test]
async fn a_pm_accepts_a_suggested_tier_move_on_the_pool_page() {
    // Arrange: sea-pay in suggest mode; GRAB_G1 at 60 % for three windows (clock set by hand).
    let (app, passwords) = app_with_users(true).await;
    let _jobs = hold_jobs(&app, &["tier_rating"]).await;
    let ctx = server::change::Ctx {
        actor: "test",
        source: server::audit::store::Source::System,
        reason: Some("re-rate sea-pay"),
        request_id: None,
    };
    let sea_pay = client::pool::PoolName::parse("sea-pay").unwrap();
    server::tiers::set_policy(&app.state.db, &ctx, &sea_pay, &json!({"mode": "suggest", "windows": 3})).await.unwrap();
    let t0 = chrono::Utc.with_ymd_and_hms(2031, 5, 6, 7, 0, 0).unwrap();
    let clock = client::Clock::manual(t0);
    let outcomes = client::Outcomes::new(app.state.redis.clone(), app.state.keys.clone(), clock.clone(), None);
    let grab = client::health::ChannelCode::parse("GRAB_G1").unwrap();
    for window in 0..3 {
        clock.set(t0 + chrono::Duration::minutes(window * 5 + 1));
        let counts = client::health::OutcomeCounts { ok: 60, fail: 40, latency_ms_sum: 0, latency_count: 0 };
        outcomes.record_counts(&grab, &counts).await.unwrap();
        let at = t0 + chrono::Duration::minutes((window + 1) * 5) + chrono::Duration::seconds(6);
        server::jobs::tier_rating::run_once(&app.state, at).await.unwrap();
    }

    // Act: the pm opens the pool, reads the offer and accepts it with a reason
    let browser = Browser::start().await.expect("headless chromium");
    let c = &browser.client;
    sign_in(c, &app, "demo-pm", &passwords["demo-pm"]).await;
    c.goto(&format!("{}/pools/sea-pay", app.address)).await.unwrap();
    c.wait().at_most(Duration::from_secs(10)).for_element(Locator::Id("tier-moves")).await.expect("the moves");
    hydrated(c).await;
    let row = cell_text(c, "#tier-moves tbody tr").await;
    assert!(row.contains("GRAB_G1") && row.contains("G → N") && row.contains("60.0 %, 60.0 %, 60.0 %"), "{row}");
    assert!(row.contains("open"), "{row}");
    let policy = cell_text(c, "#tier-policy").await;
    assert!(policy.starts_with("Mode suggest"), "{policy}");
    let accept = c.find(Locator::Css("#tier-moves button[id^='accept-move-']")).await.expect("an accept button");
    // The buttons are enabled once the section itself has hydrated (after the page's flag).
    for _ in 0..200 {
        if accept.is_enabled().await.unwrap_or(false) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(accept.is_enabled().await.unwrap(), "the accept button stays disabled");
    // Without a reason nothing is sent.
    accept.click().await.unwrap();
    let said = cell_text(c, "#tier-move-message").await;
    assert!(said.to_lowercase().contains("reason"), "{said}");
    let reason = c.find(Locator::Id("tier-move-reason")).await.unwrap();
    reason.send_keys("GrabPay declines since the deploy").await.unwrap();
    accept.click().await.unwrap();

    // Assert: after the reload the move reads accepted by the pm, the channel is in N
    let mut state = String::new();
    for _ in 0..200 {
        if let Ok(cell) = c.find(Locator::Css("#tier-moves tbody tr td:nth-child(5)")).await {
            state = cell.text().await.unwrap_or_default();
            if state.starts_with("accepted") {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(state, "accepted by demo-pm");
    let tier = cell_text(c, "#tier-ratings tr[data-channel='GRAB_G1'] td:nth-child(2)").await;
    assert_eq!(tier, "N");
    screenshot(c, "tier-move-accepted").await;
    let (_, pool) = server::pools::store::get_pool(&app.state.db, &sea_pay).await.unwrap().unwrap();
    let n: Vec<&str> = pool["tiers"]["N"].as_array().unwrap().iter().map(|m| m["member"].as_str().unwrap()).collect();
    assert!(n.contains(&"GRAB_G1"), "{pool}");
}
