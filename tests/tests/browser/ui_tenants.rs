//! The tenants list and a tenant's page in headless Chromium with access control on:
//! plans, limits, grants (revoked ones marked) and usage per bucket, read-only for a
//! viewer; and the list at 5,000 tenants, searched and paged on the server.

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
    assert!(
        app.settings.site_root.join("pkg/tessera.wasm").exists(),
        "no wasm bundle: run `scripts/build --site target/site-test -- --tests` first"
    );
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
    // One reservation left open, with its model.
    let open = client::quota::RequestId::parse("ui-open").unwrap();
    let tokens = client::quota::Tokens::parse("tokens", 1_500).unwrap();
    app.state.quotas.reserve_for_model(&acme, &open, tokens, Some("gpt-x")).await.unwrap();

    let browser = Browser::start().await.expect("headless chromium");
    let c = &browser.client;
    c.goto(&format!("{}/login", app.address)).await.unwrap();
    hydrated(c).await;
    c.find(Locator::Id("login-name")).await.unwrap().send_keys("demo-viewer").await.unwrap();
    c.find(Locator::Id("login-password")).await.unwrap().send_keys(&password).await.unwrap();
    c.find(Locator::Id("login-submit")).await.unwrap().click().await.unwrap();
    c.wait().at_most(Duration::from_secs(10)).for_element(Locator::Id("system-status")).await.expect("signed in");
    hydrated(c).await;

    c.goto(&format!("{}/tenants", app.address)).await.unwrap();
    c.wait().at_most(Duration::from_secs(10)).for_element(Locator::Id("tenants")).await.expect("the tenants");
    hydrated(c).await;
    let acme_row = c.find(Locator::Css("#tenants tr[data-tenant='acme']")).await.unwrap().text().await.unwrap();
    assert!(acme_row.contains("pro") && acme_row.contains('%'), "plan and use in the list: {acme_row}");
    assert!(c.find(Locator::Css("#tenants tr[data-tenant='globex']")).await.is_ok());
    c.find(Locator::Css("#tenants tr[data-tenant='acme'] a")).await.unwrap().click().await.unwrap();
    c.wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Css("section[data-tenant='acme']"))
        .await
        .expect("acme's page");
    hydrated(c).await;
    assert!(c.current_url().await.unwrap().path().ends_with("/tenants/acme"));
    let acme_card = c.find(Locator::Css("section[data-tenant='acme']")).await.unwrap().text().await.unwrap();
    assert!(acme_card.contains("pro"), "the plan: {acme_card}");
    let bonus = c.find(Locator::Css("#grants-acme tr[data-grant='launch-bonus']")).await.unwrap().text().await.unwrap();
    assert!(bonus.contains("active") && bonus.contains("2,000,000"), "{bonus}");
    let trial = c.find(Locator::Css("#grants-acme tr[data-grant='trial']")).await.unwrap().text().await.unwrap();
    assert!(trial.contains("revoked"), "{trial}");
    let buckets = c.find(Locator::Id("usage-acme")).await.unwrap().text().await.unwrap();
    assert!(buckets.contains("launch-bonus") && buckets.contains("plan"), "{buckets}");
    assert!(!buckets.contains("trial"), "a revoked grant is no bucket: {buckets}");
    let today = chrono::Utc::now().format("%Y-%m-%d").to_string();
    let bars = c.find_all(Locator::Css("#month-acme g.month-day")).await.unwrap();
    assert_eq!(bars.len(), 1, "one day with use");
    assert_eq!(bars[0].attr("data-day").await.unwrap().as_deref(), Some(today.as_str()));
    assert_eq!(bars[0].attr("data-tokens").await.unwrap().as_deref(), Some("250"));
    let open = c
        .find(Locator::Css("#open-acme tr[data-request='ui-open']"))
        .await
        .expect("the open reservation")
        .text()
        .await
        .unwrap();
    assert!(open.contains("1,500") && open.contains("gpt-x") && open.contains("UTC"), "{open}");
    let fallback = c.find(Locator::Id("fallback-acme")).await.unwrap().text().await.unwrap();
    assert_eq!(fallback, "fail_open_limited, allowance 100,000 tokens");
    let caption = c.find(Locator::Css("#month-acme figcaption")).await.unwrap().text().await.unwrap();
    assert!(caption.contains("250 tokens over 1 settled"), "{caption}");
    assert!(c.find_all(Locator::Css("section[data-tenant] form")).await.unwrap().is_empty(), "read-only");
    let dir = integration::workspace_root().join("target/screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("tenants.png"), c.screenshot().await.unwrap()).unwrap();

    browser.close().await;
}

#[tokio::test]
async fn five_thousand_tenants_are_searched_sorted_and_paged_on_the_server_with_the_query_in_the_address() {
    // Arrange: the demo's two tenants and 5,000 more (inserted in one statement: the list's
    // paging is under test here, not the audited write path, which other tests cover)
    let (app, passwords) = integration::ui::app_with_users(false).await;
    sqlx::query(
        "insert into tenant (name, plan, reservation_ttl_ms, retention_days, fallback_policy, version)
         select 't' || lpad(n::text, 5, '0'), case when n % 2 = 0 then 'pro' else 'starter' end, 60000, 62, 'fail_closed', 1
         from generate_series(0, 4999) n",
    )
    .execute(&app.state.db)
    .await
    .unwrap();
    let browser = Browser::start().await.expect("headless chromium");
    let c = &browser.client;
    integration::ui::sign_in(c, &app, "demo-viewer", &passwords["demo-viewer"]).await;

    // Act + Assert: the first page (by name: acme, globex, then t00000…)
    c.goto(&format!("{}/tenants", app.address)).await.unwrap();
    c.wait().at_most(Duration::from_secs(10)).for_element(Locator::Id("tenants")).await.expect("the tenants");
    hydrated(c).await;
    let summary = integration::ui::text(c, "tenants-summary").await;
    assert!(summary.contains("5,002 tenants") && summary.contains("page 1 of 101"), "{summary}");
    assert_eq!(c.find_all(Locator::Css("#tenants tbody tr")).await.unwrap().len(), 50);

    // The next page, by its link: the address says which
    c.find(Locator::Id("tenants-next")).await.unwrap().click().await.unwrap();
    c.wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Css("#tenants tr[data-tenant='t00048']"))
        .await
        .expect("page 2's first row");
    assert_eq!(c.current_url().await.unwrap().query(), Some("page=2"));
    let first = c.find(Locator::Css("#tenants tbody tr")).await.unwrap().attr("data-tenant").await.unwrap();
    assert_eq!(first.as_deref(), Some("t00048"));

    // A search typed in the form, sorted by tokens: ten tenants, in the address
    c.goto(&format!("{}/tenants", app.address)).await.unwrap();
    hydrated(c).await;
    c.find(Locator::Id("tenant-search")).await.unwrap().send_keys("t0421").await.unwrap();
    c.find(Locator::Css("#tenant-sort option[value='tokens']")).await.unwrap().click().await.unwrap();
    c.find(Locator::Css("form[role='search'] button[type='submit']")).await.unwrap().click().await.unwrap();
    c.wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Css("#tenants tr[data-tenant='t04210']"))
        .await
        .expect("the matches");
    assert_eq!(c.current_url().await.unwrap().query(), Some("q=t0421&sort=tokens"), "the query in the address");
    let rows = c.find_all(Locator::Css("#tenants tbody tr")).await.unwrap();
    assert_eq!(rows.len(), 10, "t04210 … t04219");
    let summary = integration::ui::text(c, "tenants-summary").await;
    assert!(summary.contains("10 tenants matching \"t0421\"") && summary.contains("page 1 of 1"), "{summary}");
    // Sorted by tokens a month, most first: the pro plans (even numbers) before the starters
    let first = rows[0].attr("data-tenant").await.unwrap().unwrap();
    assert_eq!(first, "t04210", "pro (more tokens) first, then by name");
    integration::ui::screenshot(c, "tenants-5000").await;

    browser.close().await;
}
