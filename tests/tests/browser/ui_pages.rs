//! Every page (and the sign-in page), as ops would see it with traffic flowing, at a desktop's width (1440 px)
//! and a phone's (390 px): nothing scrolls sideways or spills out of its card, no chart's
//! text leaves its chart, and axe-core finds no serious or critical violation. The
//! screenshots are kept under `target/screenshots/pages/` (CI keeps them as artefacts).

use std::time::Duration;

use fantoccini::Locator;
use integration::browser::Browser;
use integration::ui::{app_with_users, axe_violations, hydrated, overflows, sign_in};

#[tokio::test]
async fn every_page_fits_a_desktop_and_a_phone_and_passes_axe() {
    // Arrange: the demo with a minute of traffic (WECHAT_B failing 40 % of its calls), its
    // samples, a health evaluation, a route and a ramp, seen by an admin.
    let (app, passwords) = app_with_users(true).await;
    let now = app.state.pool_admin.now().await.unwrap();
    for seconds_ago in [30, 20, 10] {
        server::samples::sampler::run_at(&app.state, now - chrono::TimeDelta::seconds(seconds_ago)).await.unwrap();
    }
    let args = server::simulate::SimulateArgs {
        rate: 60,
        seconds: Some(3),
        pools: vec![],
        tenants: vec![],
        report_every: 60,
        refill: true,
        seed: Some(41),
        fail: vec![("WECHAT_B".to_owned(), 0.4)],
    };
    server::simulate::run(&app.state, &args, std::future::pending(), |_| {}).await.unwrap();
    let now = app.state.pool_admin.now().await.unwrap();
    server::samples::sampler::run_at(&app.state, now).await.unwrap();
    server::health::run_once(&app.state, now).await.unwrap();
    let admin = integration::ui::Session::sign_in(&app, "demo-admin", &passwords["demo-admin"]).await;
    let route = serde_json::json!({"rules": [
            {"name": "small", "when": {"amount": {"lt": "1000"}}, "pool": "cn-pay"},
            {"name": "big-usd", "when": {"amount": {"gte": "1000"}, "currency": {"in": ["USD"]}}, "pool": "sea-pay"}
        ], "default_pool": "cn-pay", "expected_version": 0, "reason": "route checkout"});
    let (status, reply) = admin.send(&app, reqwest::Method::PUT, "/api/v1/routes/checkout", route).await;
    assert_eq!(status, 200, "{reply}");
    let browser = Browser::start().await.expect("headless chromium");
    let c = &browser.client;
    sign_in(c, &app, "demo-admin", &passwords["demo-admin"]).await;
    let dir = integration::workspace_root().join("target/screenshots/pages");
    std::fs::create_dir_all(&dir).unwrap();

    let pages = [
        ("dashboard", "/"),
        ("pools", "/pools"),
        ("pool", "/pools/cn-pay"),
        ("ramp", "/pools/cn-pay/ramp"),
        ("routes", "/routes"),
        ("route", "/routes/checkout"),
        ("channels", "/channels"),
        ("channel", "/channels/WECHAT_B"),
        ("tenants", "/tenants"),
        ("tenant", "/tenants/acme"),
        ("audit", "/audit"),
        ("changes", "/changes"),
        ("users", "/users"),
        ("account", "/account"),
    ];
    let mut failures = Vec::new();
    for width in [1440, 390] {
        c.set_window_size(width, 900).await.unwrap();
        for (name, page) in pages {
            // Act
            c.goto(&format!("{}{page}", app.address)).await.unwrap_or_else(|e| panic!("{page}: {e}"));
            hydrated(c).await;
            // Charts come with the data: wait until no part of the page says it is loading.
            c.wait()
                .at_most(Duration::from_secs(10))
                .for_element(Locator::XPath("//body[not(.//*[@aria-busy='true'])]"))
                .await
                .unwrap_or_else(|e| panic!("{page} still loading: {e}"));
            let png = c.screenshot().await.unwrap();
            std::fs::write(dir.join(format!("{name}-{width}.png")), png).unwrap();

            // Assert (collected, so that one run names every page that fails)
            for problem in overflows(c).await {
                failures.push(format!("{page} at {width} px: {problem}"));
            }
            for violation in axe_violations(c).await {
                failures.push(format!("{page} at {width} px: axe: {violation}"));
            }
        }
    }
    // Signed out: the sign-in page.
    integration::ui::sign_out(c).await;
    for width in [1440, 390] {
        c.set_window_size(width, 900).await.unwrap();
        c.goto(&format!("{}/login", app.address)).await.unwrap();
        hydrated(c).await;
        std::fs::write(dir.join(format!("login-{width}.png")), c.screenshot().await.unwrap()).unwrap();
        for problem in overflows(c).await.into_iter().chain(axe_violations(c).await) {
            failures.push(format!("/login at {width} px: {problem}"));
        }
    }
    assert!(failures.is_empty(), "{} problems:\n{}", failures.len(), failures.join("\n"));

    browser.close().await;
}
