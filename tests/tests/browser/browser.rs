//! The admin UI in headless Chromium: server-rendered, hydrated, talking to server functions.

use std::time::Duration;

use fantoccini::Locator;
use integration::browser::Browser;
use integration::spawn_app;

#[tokio::test]
async fn the_dashboard_hydrates_and_fetches_live_status_from_the_browser() {
    let app = spawn_app().await;
    assert!(
        app.settings.site_root.join("pkg/tessera.wasm").exists(),
        "no wasm bundle under {}: run `scripts/build --site target/site-test -- --tests` first (scripts/test does)",
        app.settings.site_root.display()
    );
    let expected_pg_version: String = sqlx::query_scalar("show server_version").fetch_one(&app.state.db).await.unwrap();
    let browser = Browser::start().await.expect("headless chromium");
    let c = &browser.client;

    c.goto(&format!("{}/", app.address)).await.unwrap();
    // Clicks before hydration would be lost: wait for the marker the app sets once hydrated.
    c.wait()
        .at_most(Duration::from_secs(20))
        .for_element(Locator::Css("body[data-hydrated='true']"))
        .await
        .expect("the page hydrates");
    let pg = c.find(Locator::Id("postgres-detail")).await.unwrap().text().await.unwrap();
    assert_eq!(pg, expected_pg_version);
    let prefix = c.find(Locator::Id("redis-prefix")).await.unwrap().text().await.unwrap();
    assert_eq!(prefix, app.prefix);
    let first_check = c.find(Locator::Id("checked-at")).await.unwrap().text().await.unwrap();

    // A click runs the server function from the browser (a GET of /sfn/…), and the table
    // re-renders with the new answer.
    c.find(Locator::Id("check-again")).await.unwrap().click().await.unwrap();
    c.wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Css("#system-status[data-checks='1']"))
        .await
        .expect("the status is fetched again from the browser");
    let second_check = c.find(Locator::Id("checked-at")).await.unwrap().text().await.unwrap();
    assert_ne!(first_check, second_check, "the check ran again");
    let redis = c.find(Locator::Id("redis-status")).await.unwrap().text().await.unwrap();
    assert!(redis.starts_with("up"), "{redis}");

    let screenshots = integration::workspace_root().join("target/screenshots");
    std::fs::create_dir_all(&screenshots).unwrap();
    std::fs::write(screenshots.join("dashboard.png"), c.screenshot().await.unwrap()).unwrap();

    browser.close().await;
}

/// A measurement, not a check (run it on purpose: `cargo test --test browser --
/// --ignored --nocapture`, with `TESSERA_SITE_ROOT` at a release build's site for figures
/// worth reporting): time to interactive of each page on loopback, from navigation start
/// to the app's `tessera-hydrated` performance mark, over repeated loads with a warm cache.
#[tokio::test]
#[ignore = "a measurement: run on purpose with --ignored --nocapture"]
async fn time_to_interactive_on_loopback() {
    let app = spawn_app().await;
    integration::seed_demo(&app).await;
    let wasm = app.settings.site_root.join("pkg/tessera.wasm");
    let size = std::fs::metadata(&wasm).unwrap_or_else(|e| panic!("{}: {e}", wasm.display())).len();
    println!("wasm bundle {}: {} bytes", wasm.display(), size);
    let browser = Browser::start().await.expect("headless chromium");
    let c = &browser.client;
    let script = "const n = performance.getEntriesByType('navigation')[0]; \
                  const h = performance.getEntriesByName('tessera-hydrated')[0]; \
                  return [n.responseEnd, n.domContentLoadedEventEnd, h ? h.startTime : -1];";
    for page in ["/", "/pools", "/pools/cn-pay", "/channels", "/tenants", "/audit"] {
        let mut tti = Vec::new();
        let mut first = None;
        for load in 0..11 {
            c.goto(&format!("{}{page}", app.address)).await.unwrap();
            c.wait()
                .at_most(Duration::from_secs(20))
                .for_element(Locator::Css("body[data-hydrated='true']"))
                .await
                .expect("the page hydrates");
            let v = c.execute(script, vec![]).await.unwrap();
            let times: Vec<f64> = v.as_array().unwrap().iter().map(|t| t.as_f64().unwrap()).collect();
            if load == 0 {
                first = Some(times[2]);
            } else {
                tti.push((times[0], times[1], times[2]));
            }
        }
        tti.sort_by(|a, b| a.2.total_cmp(&b.2));
        let median = tti[tti.len() / 2];
        println!(
            "{page:<14} first load {:>7.1} ms; warm median: response end {:>6.1} ms, DOM ready {:>6.1} ms, interactive {:>6.1} ms (max {:>6.1})",
            first.unwrap(),
            median.0,
            median.1,
            median.2,
            tti.last().unwrap().2
        );
    }
    browser.close().await;
}
