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
        "no wasm bundle under {}: run `cargo leptos build` first (scripts/test does)",
        app.settings.site_root.display()
    );
    let expected_pg_version: String = sqlx::query_scalar("show server_version")
        .fetch_one(&app.state.db)
        .await
        .unwrap();
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
