//! The tenants page in headless Chromium with access control on: plans, limits, grants
//! (revoked ones marked) and usage per bucket, read-only for every role.

use std::time::Duration;

use fantoccini::Locator;
use integration::browser::Browser;
use integration::spawn_app_with;
use integration::ui::hydrated;
use server::audit::store::Source;
use server::change::Ctx;
use server::tenants::NewGrant;

#[tokio::test]
async fn a_viewer_reads_each_tenants_plan_grants_and_usage_per_bucket() {
    let app = spawn_app_with(|s| s.auth.open = false).await;
    assert!(app.settings.site_root.join("pkg/tessera.wasm").exists(), "no wasm bundle: run `cargo leptos build` first");
    let report = server::seed::demo_seed(&app.state.db).await.unwrap();
    let password = report.users.iter().find(|(name, _, _)| name == "demo-viewer").unwrap().2.clone();
    // A second grant for acme, revoked: it stays listed, marked.
    let ctx = Ctx { actor: "test", source: Source::System, reason: Some("test"), request_id: None };
    let acme = client::quota::TenantId::parse("acme").unwrap();
    let grant: NewGrant =
        serde_json::from_value(serde_json::json!({"id": "trial", "kind": "temporary", "amount": 1000})).unwrap();
    server::tenants::store::add_grant(&app.state.db, &ctx, &acme, &grant, None, chrono::Utc::now()).await.unwrap();
    server::tenants::store::revoke_grant(&app.state.db, &ctx, &acme, &grant.id, None).await.unwrap();
    server::publish::drain_outbox(&app.state).await.unwrap();
    // Some use for acme's month chart, drained into the usage ledger.
    let rid = client::quota::RequestId::parse("ui-1").unwrap();
    let tokens = client::quota::Tokens::parse("tokens", 300).unwrap();
    app.state.quotas.reserve(&acme, &rid, tokens).await.unwrap();
    let actual = client::quota::TokenCount::parse("actual_tokens", 250).unwrap();
    app.state.quotas.settle(&acme, &rid, actual, false).await.unwrap();
    server::jobs::usage_drain::run_once(&app.state).await.unwrap();

    let browser = Browser::start().await.expect("headless chromium");
    let c = &browser.client;
    c.goto(&format!("{}/login", app.address)).await.unwrap();
    hydrated(c).await;
    c.find(Locator::Id("login-name")).await.unwrap().send_keys("demo-viewer").await.unwrap();
    c.find(Locator::Id("login-password")).await.unwrap().send_keys(&password).await.unwrap();
    c.find(Locator::Id("login-submit")).await.unwrap().click().await.unwrap();
    c.wait().at_most(Duration::from_secs(10)).for_element(Locator::Id("system-status")).await.expect("signed in");

    c.goto(&format!("{}/tenants", app.address)).await.unwrap();
    c.wait().at_most(Duration::from_secs(10)).for_element(Locator::Id("tenants")).await.expect("the tenants");
    hydrated(c).await;
    let acme_card = c.find(Locator::Css("section[data-tenant='acme']")).await.unwrap().text().await.unwrap();
    assert!(acme_card.contains("pro"), "the plan: {acme_card}");
    let bonus = c.find(Locator::Css("#grants-acme tr[data-grant='launch-bonus']")).await.unwrap().text().await.unwrap();
    assert!(bonus.contains("active") && bonus.contains("2000000"), "{bonus}");
    let trial = c.find(Locator::Css("#grants-acme tr[data-grant='trial']")).await.unwrap().text().await.unwrap();
    assert!(trial.contains("revoked"), "{trial}");
    let buckets = c.find(Locator::Id("usage-acme")).await.unwrap().text().await.unwrap();
    assert!(buckets.contains("launch-bonus") && buckets.contains("plan"), "{buckets}");
    assert!(!buckets.contains("trial"), "a revoked grant is no bucket: {buckets}");
    assert!(c.find(Locator::Css("section[data-tenant='globex']")).await.is_ok());
    let today = chrono::Utc::now().format("%Y-%m-%d").to_string();
    let bars = c.find_all(Locator::Css("#month-acme g.month-day")).await.unwrap();
    assert_eq!(bars.len(), 1, "one day with use");
    assert_eq!(bars[0].attr("data-day").await.unwrap().as_deref(), Some(today.as_str()));
    assert_eq!(bars[0].attr("data-tokens").await.unwrap().as_deref(), Some("250"));
    let caption = c.find(Locator::Css("#month-acme figcaption")).await.unwrap().text().await.unwrap();
    assert!(caption.contains("250 tokens over 1 settled"), "{caption}");
    assert!(c.find_all(Locator::Css("#tenants form")).await.unwrap().is_empty(), "read-only");
    let dir = integration::workspace_root().join("target/screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("tenants.png"), c.screenshot().await.unwrap()).unwrap();

    browser.close().await;
}
