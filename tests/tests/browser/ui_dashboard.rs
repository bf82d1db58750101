//! The dashboard: its charts in headless Chromium draw the samples of a running
//! simulation (`tessera simulate` inside the test's server) and bring in newer samples by
//! themselves without a reload; its one server function answers for 20 pools of 10
//! channels each in one call.

use std::time::{Duration, Instant};

use chrono::TimeDelta;
use client::pool::PoolName;
use fantoccini::{Client, Locator};
use integration::browser::Browser;
use integration::ui::{app_with_users, hydrated, screenshot, sign_in, text};
use integration::{spawn_app, TestApp};
use serde_json::{json, Value};
use server::samples::sampler;

/// A count as the UI writes it: thousands separated by commas.
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, d) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(d);
    }
    out
}

/// Drives `tessera simulate` for a few seconds against every seeded pool and tenant, with
/// its refiller on (which also builds each pool's standby batch: a refill to count).
async fn simulate(app: &TestApp) -> server::simulate::Totals {
    let args = server::simulate::SimulateArgs {
        rate: 60,
        seconds: Some(3),
        pools: vec![],
        tenants: vec![],
        report_every: 60,
        refill: true,
        seed: Some(8),
        fail: vec![],
    };
    server::simulate::run(&app.state, &args, std::future::pending(), |_| {}).await.unwrap()
}

async fn js(c: &Client, script: &str) -> Value {
    c.execute(script, vec![]).await.unwrap_or_else(|e| panic!("{script}: {e}"))
}

/// How many points the polyline of `chart` has.
async fn polyline_points(c: &Client, chart: &str) -> u64 {
    let script = format!(
        "return document.querySelector('#{chart} polyline').getAttribute('points').trim().split(/\\s+/).length"
    );
    js(c, &script).await.as_u64().unwrap()
}

#[tokio::test]
async fn the_dashboard_charts_a_running_simulation_and_brings_in_new_samples_without_a_reload() {
    let (app, passwords) = app_with_users(true).await;
    let cn_pay = PoolName::parse("cn-pay").unwrap();
    let start = app.state.pool_admin.now().await.unwrap();

    // A minute of samples before the traffic (the sampler's clock set 10 s apart), the
    // simulation, then a sample whose window holds all of its draws.
    for seconds_ago in [70, 60, 50, 40, 30, 20] {
        sampler::run_at(&app.state, start - TimeDelta::seconds(seconds_ago)).await.unwrap();
    }
    let totals = simulate(&app).await;
    assert!(totals.draws_redis > 0 && totals.draw_errors == 0, "{totals:?}");
    let now = app.state.pool_admin.now().await.unwrap();
    assert_eq!(sampler::run_at(&app.state, now).await.unwrap().sampled, 2);
    let page =
        server::samples::store::list_samples(&app.state.db, &cn_pay, start - TimeDelta::minutes(5), 100).await.unwrap();
    assert_eq!(page.samples.len(), 7);
    let newest = page.samples.last().unwrap();
    let drawn = newest.draws.unwrap();
    assert!(drawn > 0, "{newest:?}");
    let refilled = newest.batches.unwrap() - page.samples[0].batches.unwrap();
    assert!(refilled >= 1, "the refiller built a standby batch at least: {page:?}");

    let browser = Browser::start().await.expect("headless chromium");
    let c = &browser.client;
    sign_in(c, &app, "demo-viewer", &passwords["demo-viewer"]).await;
    hydrated(c).await;

    // The list length: one point per sample, the numbers in the summary beside it.
    let chart = c.find(Locator::Css("#length-cn-pay svg.plot-shapes")).await.unwrap();
    assert_eq!(chart.attr("data-points").await.unwrap().as_deref(), Some("7"));
    assert_eq!(polyline_points(c, "length-cn-pay").await, 7);
    let summary = text(c, "length-cn-pay-summary").await;
    assert!(
        summary.starts_with("7 samples") && summary.contains(&format!("newest {} tickets", grouped(newest.length))),
        "{summary}"
    );
    let figure = c.find(Locator::Id("length-cn-pay")).await.unwrap();
    assert_eq!(figure.attr("aria-describedby").await.unwrap().as_deref(), Some("length-cn-pay-summary"));
    // Hovering the newest sample shows its length as the samples API gives it.
    let viewer = integration::ui::Session::sign_in(&app, "demo-viewer", &passwords["demo-viewer"]).await;
    let (status, samples) = viewer.get(&app, "/api/v1/pools/cn-pay/samples").await;
    assert_eq!(status, 200, "{samples}");
    let api_newest =
        samples["samples"].as_array().and_then(|s| s.last()).cloned().unwrap_or_else(|| panic!("{samples}"));
    let shown = integration::ui::hover_text(
        c,
        "#length-cn-pay .plot-band:last-child",
        "#length-cn-pay .plot-band:last-child .plot-tip-box",
    )
    .await;
    let length = api_newest["length"].as_u64().unwrap_or_else(|| panic!("{api_newest}"));
    assert!(
        shown.contains(&format!("list and standby batch: {} tickets", grouped(length))),
        "{shown} against {api_newest}"
    );

    // The last minute's shares: every member, measured, as numbers and bars.
    let rows = c.find_all(Locator::Css("#shares-minute-cn-pay tbody tr")).await.unwrap();
    assert_eq!(rows.len(), 3);
    for (row, member) in rows.iter().zip(["ALIPAY_A", "UNION_C", "WECHAT_B"]) {
        assert_eq!(row.attr("data-member").await.unwrap().as_deref(), Some(member));
        let actual: f64 = row.attr("data-actual").await.unwrap().unwrap().parse().unwrap();
        let hits = newest.members[member].window_hits.unwrap();
        assert!((actual - hits as f64 / drawn as f64).abs() < 1e-3, "{member}: {actual}");
        let line = row.text().await.unwrap();
        assert!(line.contains(&format!("({hits} of {drawn})")) && line.contains("pp"), "{line}");
    }
    assert_eq!(c.find_all(Locator::Css("#shares-hour-cn-pay tbody tr:not([data-actual=''])")).await.unwrap().len(), 3);
    assert!(text(c, "draws-minute-cn-pay").await.starts_with(&drawn.to_string()));
    assert_eq!(text(c, "refills-minute-cn-pay").await, refilled.to_string());
    let served = text(c, "served-cn-pay").await;
    assert!(served.starts_with("redis ") && !served.starts_with("redis 0 "), "{served}");

    // The health strip: a word for each state, not a colour alone.
    let health = c.find_all(Locator::Css("#health-cn-pay li[data-state='healthy']")).await.unwrap();
    assert_eq!(health.len(), 3);
    assert!(health[0].text().await.unwrap().contains("healthy"));

    // Every tenant in the quota overview, the fullest first.
    let tenants = c.find_all(Locator::Css("#quota-tenants tbody tr[data-tenant]")).await.unwrap();
    assert_eq!(tenants.len(), 2);
    let percents: Vec<f64> = percents_of(&tenants).await;
    assert!(percents.windows(2).all(|w| w[0] >= w[1]), "{percents:?}");
    screenshot(c, "dashboard").await;
    // Each card whole (a taller window for the picture, then back to 1280×800).
    c.set_window_size(1280, 1600).await.unwrap();
    for (card, name) in [("pool-card-cn-pay", "dashboard-pool"), ("quota-overview", "dashboard-quotas")] {
        screenshot_of(c, card, name).await;
    }
    c.set_window_size(1280, 800).await.unwrap();

    // A newer sample arrives by itself; the page was not reloaded (a reload would drop the
    // marker set on `window`).
    assert_eq!(js(c, "window.dashboardMarker = 'kept'; return window.dashboardMarker").await, json!("kept"));
    sampler::run_at(&app.state, now + TimeDelta::seconds(10)).await.unwrap();
    c.wait()
        .at_most(Duration::from_secs(20))
        .for_element(Locator::Css("#length-cn-pay svg.plot-shapes[data-points='8']"))
        .await
        .expect("the chart shows the new sample without a reload");
    assert_eq!(polyline_points(c, "length-cn-pay").await, 8);
    assert_eq!(js(c, "return window.dashboardMarker").await, json!("kept"));
    let refreshes: u64 =
        c.find(Locator::Id("dashboard")).await.unwrap().attr("data-refreshes").await.unwrap().unwrap().parse().unwrap();
    assert!(refreshes >= 1, "{refreshes}");

    // Narrow: nothing runs off the side of the page.
    c.set_window_size(420, 900).await.unwrap();
    let overflow = js(c, "return document.documentElement.scrollWidth - document.documentElement.clientWidth").await;
    let widest = js(
        c,
        "const w = document.documentElement.clientWidth; \
         return [...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right > w + 1) \
             .slice(0, 5).map(e => e.tagName + '#' + e.id + '.' + e.className).join(', ')",
    )
    .await;
    assert!(overflow.as_i64().unwrap() <= 0, "the page scrolls sideways by {overflow}px at 420 px: {widest}");
    screenshot(c, "dashboard-narrow").await;

    browser.close().await;
}

/// A picture of one element (a card taller than the window included), beside the page
/// screenshots under `target/screenshots/`.
async fn screenshot_of(c: &Client, id: &str, name: &str) {
    let png = c.find(Locator::Id(id)).await.unwrap().screenshot().await.unwrap();
    let dir = integration::workspace_root().join("target/screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(format!("{name}.png")), png).unwrap();
}

async fn percents_of(rows: &[fantoccini::elements::Element]) -> Vec<f64> {
    let mut out = Vec::new();
    for row in rows {
        let raw = row.attr("data-percent").await.unwrap().unwrap_or_default();
        out.push(raw.parse().unwrap_or(-1.0));
    }
    out
}

const CTX: server::change::Ctx<'static> = server::change::Ctx {
    actor: "test",
    source: server::audit::store::Source::System,
    reason: Some("scale test"),
    request_id: None,
};

#[tokio::test]
async fn one_dashboard_read_covers_twenty_pools_of_ten_channels_with_their_samples() {
    let app = spawn_app().await;
    for i in 0..200 {
        let code = server::channels::ChannelCode::parse(&format!("CH_{i:03}")).unwrap();
        let spec = serde_json::from_value(json!({"name": format!("channel {i}"), "base_weight": 10})).unwrap();
        server::channels::store::create_channel(&app.state.db, &CTX, &code, &spec, true).await.unwrap();
    }
    for p in 0..20 {
        let weights: Vec<Value> =
            (0..10).map(|m| json!({"member": format!("CH_{:03}", p * 10 + m), "weight": m + 1})).collect();
        let body = json!({"kind": "channels", "ordering": "smooth", "batch_size": 256, "low_water": 32, "timezone": "UTC",
                          "weights": weights, "eject_rebuild_percent": 50});
        let pool = PoolName::parse(&format!("pool-{p:02}")).unwrap();
        server::pools::store::put_pool(&app.state.db, &CTX, &pool, &body, 0).await.unwrap();
    }
    let delivered = server::publish::drain_outbox(&app.state).await.unwrap();
    assert!(delivered.failed.is_empty(), "{delivered:?}");
    let now = app.state.pool_admin.now().await.unwrap();
    // Ten minutes of samples, one every 10 s.
    for k in (0..60).rev() {
        let outcome = sampler::run_at(&app.state, now - TimeDelta::seconds(10 * k)).await.unwrap();
        assert_eq!(outcome.sampled, 20);
    }

    let started = Instant::now();
    let response = app.get("/sfn/dashboard").await;
    let elapsed = started.elapsed();

    assert_eq!(response.status(), 200);
    let dashboard: Value = response.json().await.unwrap();
    let pools = dashboard["pools"].as_array().unwrap();
    assert_eq!(pools.len(), 20);
    for pool in pools {
        assert_eq!(pool["length"].as_array().unwrap().len(), 60, "{}", pool["name"]);
        assert_eq!(pool["members"].as_array().unwrap().len(), 10);
        assert_eq!(pool["shares"].as_array().unwrap().len(), 10);
        assert_eq!(pool["truncated"], json!(false));
    }
    let first = &pools[0];
    assert_eq!(first["name"], json!("pool-00"));
    let expected: f64 = first["shares"][0]["expected_minute"].as_f64().unwrap();
    assert!((expected - 1.0 / 55.0).abs() < 1e-9, "CH_000 has weight 1 of 55: {expected}");
    // Bounded work: two queries for every pool's samples, a few per pool for health.
    // Generous for a debug build on a busy machine; it takes well under a second.
    eprintln!("dashboard with 20 pools, 200 channels, 1200 samples: {elapsed:?}");
    assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");
}

#[tokio::test]
async fn the_attention_strip_lists_what_is_wrong_first_and_links_to_where_it_is_fixed() {
    // Arrange: the demo, nothing wrong yet
    let (app, passwords) = app_with_users(true).await;
    let browser = Browser::start().await.expect("headless chromium");
    let c = &browser.client;
    sign_in(c, &app, "demo-admin", &passwords["demo-admin"]).await;
    let strip = c.find(Locator::Id("attention")).await.expect("the strip on top");
    assert_eq!(strip.attr("data-count").await.unwrap().as_deref(), Some("0"));
    assert_eq!(text(c, "attention-heading").await, "Nothing needs attention now");
    assert!(text(c, "attention-clear").await.contains("no tenant is over 80 %"));
    let first_card = js(c, "return document.querySelector('main .card').id").await;
    assert_eq!(first_card, json!("attention"), "the strip is the first thing on the page");

    // Act: the operator ejects UNION_C under cn-pay's approval policy (a break-glass
    // operation), and the pm proposes new weights (a change request the admin may review)
    let session = |name: &'static str| integration::ui::Session::sign_in(&app, name, &passwords[name]);
    let (operator, pm) = (session("demo-operator").await, session("demo-pm").await);
    let (status, pool) = pm.get(&app, "/api/v1/pools/cn-pay").await;
    assert_eq!(status, 200, "{pool}");
    let version = pool["version"].as_i64().unwrap_or_else(|| panic!("{pool}"));
    let eject = json!({"reason": "probe failing", "expected_version": version});
    let (status, body) =
        operator.send(&app, reqwest::Method::POST, "/api/v1/pools/cn-pay/members/UNION_C/eject", eject).await;
    assert_eq!(status, 200, "{body}");
    let (_, pool) = pm.get(&app, "/api/v1/pools/cn-pay").await;
    let proposal = json!({
        "pool": "cn-pay",
        "operation": {"kind": "pool.weights", "mode": "drain",
                      "weights": [{"member": "ALIPAY_A", "weight": 50}, {"member": "WECHAT_B", "weight": 30}, {"member": "UNION_C", "weight": 25}]},
        "reason": "gray release step",
        "expected_version": pool["version"],
    });
    let (status, change) = pm.send(&app, reqwest::Method::POST, "/api/v1/changes", proposal).await;
    assert_eq!(status, 201, "{change}");

    // Assert: on the next read, each on its own line with a link to where it is fixed
    c.wait()
        .at_most(Duration::from_secs(20))
        .for_element(Locator::Css("#attention li[data-kind='review']"))
        .await
        .expect("the review waiting for the admin");
    let items = c.find_all(Locator::Css("#attention li")).await.unwrap();
    let mut seen = Vec::new();
    for item in &items {
        let kind = item.attr("data-kind").await.unwrap().unwrap();
        let href = item.find(Locator::Css("a")).await.unwrap().attr("href").await.unwrap().unwrap();
        seen.push((kind, href, item.text().await.unwrap()));
    }
    let find = |kind: &str| seen.iter().find(|s| s.0 == kind).unwrap_or_else(|| panic!("no {kind} in {seen:?}"));
    let review = find("review");
    assert_eq!(review.1, "/changes?state=in_review");
    assert!(review.2.contains(&format!("#{}", change["id"])) && review.2.contains("demo-pm"), "{review:?}");
    let flag = find("break_glass");
    assert!(flag.2.contains("1 break-glass operation") && flag.1 == "/changes#break-glass", "{flag:?}");
    let heading = text(c, "attention-heading").await;
    assert!(heading.ends_with("need attention") || heading.contains("critical"), "{heading}");
    screenshot(c, "attention").await;
    // The author does not see their own request as waiting for them.
    integration::ui::sign_out(c).await;
    sign_in(c, &app, "demo-pm", &passwords["demo-pm"]).await;
    c.wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Css("#attention li[data-kind='break_glass']"))
        .await
        .expect("the strip as the pm sees it");
    assert!(c.find(Locator::Css("#attention li[data-kind='review']")).await.is_err(), "not the author's own request");
    // The link goes where it is fixed.
    c.find(Locator::Css("#attention li[data-kind='break_glass'] a")).await.unwrap().click().await.unwrap();
    c.wait().at_most(Duration::from_secs(10)).for_element(Locator::Id("break-glass")).await.expect("the flags' table");

    browser.close().await;
}
