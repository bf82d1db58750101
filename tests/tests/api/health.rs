//! Probes, metrics and the server-function path over HTTP, against real Postgres and Redis.

use integration::{spawn_app, spawn_app_with};
use serde_json::Value;

#[tokio::test]
async fn healthz_says_alive() {
    let app = spawn_app().await;
    let response = app.get("/healthz").await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["status"], "alive");
}

#[tokio::test]
async fn readyz_is_ready_when_postgres_and_redis_answer() {
    let app = spawn_app().await;
    let response = app.get("/readyz").await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body, serde_json::json!({"status": "ready"}), "the public probe says ready and nothing more");
    let response = app.get("/readyz/details").await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["status"], "ready");
    assert_eq!(body["down"], serde_json::json!([]));
    assert!(body["postgres"]["version"].as_str().unwrap().chars().next().unwrap().is_ascii_digit());
    assert!(body["redis"]["version"].as_str().unwrap().contains('.'));
}

#[tokio::test]
async fn readyz_names_redis_when_redis_is_down() {
    // Nothing listens on port 1: the server must still start and report Redis as down.
    let app = spawn_app_with(|s| integration::use_redis(s, "redis://127.0.0.1:1")).await;
    let response = app.get("/readyz").await;
    assert_eq!(response.status(), 503);
    assert_eq!(response.json::<Value>().await.unwrap(), serde_json::json!({"status": "unavailable"}));
    let response = app.get("/readyz/details").await;
    assert_eq!(response.status(), 503);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["status"], "unavailable");
    assert_eq!(body["down"], serde_json::json!(["redis"]));
    assert_eq!(body["postgres"]["status"], "up");
    assert_eq!(body["redis"]["status"], "down");
    assert!(body["redis"]["error"].as_str().unwrap().starts_with("redis:"));
}

#[tokio::test]
async fn readyz_names_postgres_when_its_database_stops_answering() {
    let app = spawn_app().await;
    assert_eq!(app.get("/readyz").await.status(), 200);

    // Take this app's database away from it: refuse new connections and end the open ones.
    let mut admin = admin_connection().await;
    sqlx::query(&format!(r#"alter database "{}" allow_connections false"#, app.db_name))
        .execute(&mut admin)
        .await
        .unwrap();
    sqlx::query("select pg_terminate_backend(pid, 5000) from pg_stat_activity where datname = $1")
        .bind(&app.db_name)
        .execute(&mut admin)
        .await
        .unwrap();

    assert_eq!(app.get("/readyz").await.status(), 503);
    let response = app.get("/readyz/details").await;
    assert_eq!(response.status(), 503);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["down"], serde_json::json!(["postgres"]));
    assert_eq!(body["redis"]["status"], "up");

    // And back: the pool reconnects by itself.
    sqlx::query(&format!(r#"alter database "{}" allow_connections true"#, app.db_name))
        .execute(&mut admin)
        .await
        .unwrap();
    assert_eq!(app.get("/readyz").await.status(), 200);
}

#[tokio::test]
async fn metrics_are_served_in_prometheus_text_format_with_request_counts() {
    let app = spawn_app().await;
    app.get("/readyz").await;
    let response = app.get("/metrics").await;
    assert_eq!(response.status(), 200);
    assert!(response.headers()["content-type"].to_str().unwrap().starts_with("text/plain"));
    let text = response.text().await.unwrap();
    assert!(text.contains(r#"tessera_http_requests_total{method="GET",route="/readyz",status="200"} 1"#), "{text}");
    assert!(text.contains(r#"tessera_dependency_up{dependency="redis"} 1"#), "{text}");
}

#[tokio::test]
async fn the_dashboard_is_rendered_on_the_server_with_live_status() {
    let app = spawn_app().await;
    let response = app.get("/").await;
    assert_eq!(response.status(), 200);
    let html = response.text().await.unwrap();
    for nav in ["Dashboard", "Pools", "Channels", "Tenants", "Audit"] {
        assert!(html.contains(&format!(">{nav}</a>")), "navigation lacks {nav}");
    }
    assert!(html.contains(&format!(r#"<code id="redis-prefix">{}</code>"#, app.prefix)), "{html}");
    assert!(html.contains("/pkg/tessera.js"), "hydration script missing");
}

#[tokio::test]
async fn every_response_carries_the_security_headers_and_a_page_its_nonce_policy() {
    let app = spawn_app().await;
    let header = |r: &reqwest::Response, name: &str| {
        r.headers().get(name).map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default()
    };

    // Act: a page, an API reply, an API error, and a page asked for over TLS (as a proxy
    // that terminates TLS says it)
    let page = app.get("/").await;
    let api = app.get("/healthz").await;
    let refused = app.get("/api/v1/no-such-resource").await;
    let over_tls =
        app.request(reqwest::Method::GET, "/login").header("x-forwarded-proto", "https").send().await.unwrap();

    // Assert: the fixed headers on all; the page's policy names the nonce its scripts carry
    for (what, r) in [("page", &page), ("api", &api), ("refused", &refused), ("tls", &over_tls)] {
        assert_eq!(header(r, "x-content-type-options"), "nosniff", "{what}");
        assert_eq!(header(r, "x-frame-options"), "DENY", "{what}");
        assert_eq!(header(r, "referrer-policy"), "same-origin", "{what}");
        assert!(header(r, "content-security-policy").contains("frame-ancestors 'none'"), "{what}");
        assert_eq!(header(r, "cache-control"), "private, no-store", "{what}: answered per person, cached by nobody");
    }
    let dashboard = app.get("/sfn/dashboard").await;
    assert_eq!(header(&dashboard, "cache-control"), "private, no-store", "a server function's answer");
    assert_eq!(refused.status(), 404);
    assert_eq!(header(&api, "content-security-policy"), server::security_headers::DEFAULT_POLICY);
    assert_eq!(header(&page, "strict-transport-security"), "", "no HSTS over plain HTTP");
    assert_eq!(header(&over_tls, "strict-transport-security"), server::security_headers::HSTS);
    let policy = header(&page, "content-security-policy");
    let nonce = policy
        .split("'nonce-")
        .nth(1)
        .and_then(|rest| rest.split('\'').next())
        .unwrap_or_else(|| panic!("no nonce in {policy}"))
        .to_owned();
    assert!(nonce.len() >= 16, "{nonce}");
    let html = page.text().await.unwrap();
    assert!(html.contains(&format!("nonce=\"{nonce}\"")), "the page's scripts carry the policy's nonce: {html}");
    assert!(!html.contains(" style=\""), "no inline style attribute (the policy allows none)");
    let again = header(&app.get("/").await, "content-security-policy");
    assert_ne!(again, policy, "a nonce is used once");
}

#[tokio::test]
async fn an_unknown_page_is_a_404() {
    let app = spawn_app().await;
    let response = app.get("/no-such-page").await;
    assert_eq!(response.status(), 404);
    let html = response.text().await.unwrap();
    assert!(html.contains("Page not found") && html.contains(">Dashboard</a>"), "{html}");
}

#[tokio::test]
async fn the_status_server_function_answers_over_http() {
    let app = spawn_app().await;
    server::seed::demo_seed(&app.state.db).await.unwrap();
    // Reads are GETs: a session carries no CSRF token on them.
    let response = app.get("/sfn/system_status").await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["postgres"]["up"], true);
    assert_eq!(body["redis"]["up"], true);
    assert_eq!(body["snapshot_version"], 2, "acme's grant is its second version");
    assert_eq!(body["redis_prefix"], app.prefix.as_str());
}

#[tokio::test]
async fn demo_seed_twice_changes_nothing_the_second_time() {
    let app = spawn_app().await;
    let first = server::seed::demo_seed(&app.state.db).await.unwrap();
    let second = server::seed::demo_seed(&app.state.db).await.unwrap();
    assert!(first.created.iter().any(|e| e == "pool:cn-pay"), "{:?}", first.created);
    assert_eq!(
        first.created.len(),
        22,
        "8 channels, 2 pools, 1 policy, 3 plans, 2 tenants, 1 grant, 5 users: {:?}",
        first.created
    );
    assert_eq!(second.kept.len(), 22);
    assert!(second.created.is_empty());
    assert_eq!(server::change::store::count_for(&app.state.db, "pool:cn-pay").await.unwrap(), 1);
}

async fn admin_connection() -> sqlx::PgConnection {
    use sqlx::Connection;
    let url = integration::admin_url(&integration::base_settings());
    sqlx::PgConnection::connect(&url).await.unwrap()
}
