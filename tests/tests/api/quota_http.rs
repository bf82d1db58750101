//! The quota endpoints over HTTP, the sweeper job and job leadership, against a running
//! server with its own database and Redis key prefix.

use std::time::Duration;

use client::quota::{FallbackPolicy, Grant, GrantId, GrantKind, TenantId, TenantQuota, TokenCount, Tokens};
use integration::{spawn_app, TestApp};
use serde_json::{json, Value};
use server::jobs::leader::Leadership;

fn quota(monthly: u64, concurrency: u32, ttl: Duration) -> TenantQuota {
    TenantQuota {
        version: 1,
        monthly_tokens: TokenCount::parse("monthly_tokens", monthly as i128).unwrap(),
        daily_requests: 1000,
        concurrency,
        grants: vec![Grant {
            id: GrantId::parse("welcome").unwrap(),
            kind: GrantKind::Bonus { priority: 1 },
            amount: Tokens::parse("amount", 100).unwrap(),
            starts_at: None,
            expires_at: None,
        }],
        reservation_ttl: ttl,
        retention_days: 40,
        idempotency_window: client::quota::DEFAULT_IDEMPOTENCY_WINDOW,
        fallback: FallbackPolicy::FailClosed,
    }
}

async fn tenant(app: &TestApp, name: &str, q: TenantQuota) -> TenantId {
    let tenant = TenantId::parse(name).unwrap();
    app.state.quotas.publish(&tenant, &q).await.unwrap();
    tenant
}

#[tokio::test]
async fn a_reservation_is_taken_bonus_first_settled_and_shown_in_the_usage() {
    let app = spawn_app().await;
    tenant(&app, "acme", quota(1000, 10, Duration::from_secs(60))).await;

    let (status, body) =
        app.post_json("/api/v1/tenants/acme/quota/reserve", json!({"request_id": "r-1", "tokens": 300})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["result"], "reserved");
    assert_eq!(body["tokens"], 300);
    assert_eq!(body["parts"], json!([{"bucket": "welcome", "tokens": 100}, {"bucket": "plan", "tokens": 200}]));
    assert_eq!(body["replayed"], false);

    let (status, body) =
        app.post_json("/api/v1/tenants/acme/quota/settle", json!({"request_id": "r-1", "actual_tokens": 250})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["result"], "settled");
    assert_eq!(body["overdraft"], 0);

    let usage: Value = app.get("/api/v1/tenants/acme/quota").await.json().await.unwrap();
    assert_eq!(usage["available"], 1100 - 250);
    assert_eq!(usage["requests_today"], 1);
    assert_eq!(usage["leases"], 0);
    let plan = usage["buckets"].as_array().unwrap().iter().find(|b| b["id"] == "plan").unwrap().clone();
    assert_eq!((plan["used"].as_u64(), plan["reserved"].as_u64()), (Some(150), Some(0)));

    // Settled twice: the second changes nothing and says so.
    let (status, body) =
        app.post_json("/api/v1/tenants/acme/quota/settle", json!({"request_id": "r-1", "actual_tokens": 999})).await;
    assert_eq!((status, body["result"].as_str()), (200, Some("already_settled")));
    let again: Value = app.get("/api/v1/tenants/acme/quota").await.json().await.unwrap();
    assert_eq!(again["available"], usage["available"]);
}

#[tokio::test]
async fn a_refusal_is_429_with_the_dimension_and_what_is_left() {
    let app = spawn_app().await;
    tenant(&app, "small", quota(50, 1, Duration::from_secs(60))).await;

    let (status, body) =
        app.post_json("/api/v1/tenants/small/quota/reserve", json!({"request_id": "big", "tokens": 151})).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(
        (body["dimension"].as_str(), body["available"].as_u64(), body["limit"].as_u64()),
        (Some("tokens"), Some(150), Some(150))
    );

    let (status, _) =
        app.post_json("/api/v1/tenants/small/quota/reserve", json!({"request_id": "one", "tokens": 10})).await;
    assert_eq!(status, 200);
    let (status, body) =
        app.post_json("/api/v1/tenants/small/quota/reserve", json!({"request_id": "two", "tokens": 10})).await;
    assert_eq!((status, body["dimension"].as_str()), (429, Some("concurrency")));

    // Released, the lease is free again; a second release changes nothing.
    let (status, body) = app.post_json("/api/v1/tenants/small/quota/release", json!({"request_id": "one"})).await;
    assert_eq!((status, body["result"].as_str(), body["reserved"].as_u64()), (200, Some("released"), Some(10)));
    let (_, body) = app.post_json("/api/v1/tenants/small/quota/release", json!({"request_id": "one"})).await;
    assert_eq!(body["result"], "already_released");
    let (status, _) =
        app.post_json("/api/v1/tenants/small/quota/reserve", json!({"request_id": "two", "tokens": 10})).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn bad_amounts_ids_and_unknown_names_are_refused_before_redis_is_touched() {
    let app = spawn_app().await;
    tenant(&app, "acme", quota(1000, 10, Duration::from_secs(60))).await;

    for (body, field) in [
        (json!({"request_id": "a", "tokens": 9007199254740992u64}), "tokens"),
        (json!({"request_id": "a", "tokens": -5}), "tokens"),
        (json!({"request_id": "a", "tokens": 0}), "tokens"),
        (json!({"request_id": "a b", "tokens": 5}), "request_id"),
        (json!({"request_id": "a"}), "tokens"),
        (json!({"request_id": "a", "tokens": 5, "prompt": "hi"}), "tokens"),
        (json!({"request_id": "a", "prompt": "hi", "model": "gpt-4o"}), "max_tokens"),
    ] {
        let (status, reply) = app.post_json("/api/v1/tenants/acme/quota/reserve", body.clone()).await;
        assert_eq!(status, 400, "{body} -> {reply}");
        assert_eq!(reply["field"], field, "{body} -> {reply}");
    }
    let usage: Value = app.get("/api/v1/tenants/acme/quota").await.json().await.unwrap();
    assert_eq!((usage["requests_today"].as_u64(), usage["leases"].as_u64()), (Some(0), Some(0)));

    let (status, body) =
        app.post_json("/api/v1/tenants/nobody/quota/reserve", json!({"request_id": "a", "tokens": 5})).await;
    assert_eq!(status, 404, "{body}");
    let (status, _) =
        app.post_json("/api/v1/tenants/bad%7Bname/quota/reserve", json!({"request_id": "a", "tokens": 5})).await;
    assert_eq!(status, 400);
    let (status, _) =
        app.post_json("/api/v1/tenants/acme/quota/settle", json!({"request_id": "never", "actual_tokens": 5})).await;
    assert_eq!(status, 404);
    for actual in [json!(-1), json!(9007199254740992u64), json!(1.5)] {
        let (status, body) = app
            .post_json("/api/v1/tenants/acme/quota/settle", json!({"request_id": "a", "actual_tokens": actual}))
            .await;
        assert_eq!((status, body["field"].as_str()), (400, Some("actual_tokens")), "{actual} -> {body}");
    }
    assert_eq!(app.get("/api/v1/tenants/nobody/quota").await.status(), 404);
}

#[tokio::test]
async fn a_refusal_is_counted_by_tenant_and_dimension() {
    let app = spawn_app().await;
    tenant(&app, "acme", quota(1000, 10, Duration::from_secs(60))).await;
    let (status, body) =
        app.post_json("/api/v1/tenants/acme/quota/reserve", json!({"request_id": "big", "tokens": 5000})).await;
    assert_eq!(body["result"], "refused", "{status} {body}");
    let metrics = app.get("/metrics").await.text().await.unwrap();
    let line = metrics.lines().find(|l| l.starts_with("tessera_quota_refusals_total{")).unwrap_or("");
    assert!(
        line.contains(r#"tenant="acme""#) && line.contains(r#"dimension="tokens""#) && line.ends_with(" 1"),
        "{line:?}"
    );
}

#[tokio::test]
async fn a_prompt_is_estimated_with_the_models_tokenizer_and_a_margin() {
    let app = spawn_app().await;
    tenant(&app, "acme", quota(1000, 10, Duration::from_secs(60))).await;
    let (status, body) = app
        .post_json(
            "/api/v1/tenants/acme/quota/reserve",
            json!({"request_id": "p-1", "prompt": "hello world", "max_tokens": 98, "model": "gpt-4o"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["estimate"]["prompt_tokens"], 2);
    assert_eq!(body["estimate"]["encoding"], "o200k_base");
    assert_eq!(body["tokens"], 105); // ceil((2 + 98) × 1.05)
}

#[tokio::test]
async fn the_sweeper_returns_an_abandoned_reservation_and_counts_it() {
    let app = spawn_app().await;
    // The sweeper works on the tenants of the configuration (Postgres): acme is one.
    server::seed::demo_seed(&app.state.db).await.unwrap();
    tenant(&app, "acme", quota(1000, 10, Duration::from_millis(50))).await;
    let (status, _) =
        app.post_json("/api/v1/tenants/acme/quota/reserve", json!({"request_id": "lost", "tokens": 40})).await;
    assert_eq!(status, 200);

    tokio::time::sleep(Duration::from_millis(120)).await;
    let outcome = server::jobs::quota_sweep::run_once(&app.state).await.unwrap();
    assert_eq!((outcome.released, outcome.tokens, outcome.open), (1, 40, 0));

    let usage: Value = app.get("/api/v1/tenants/acme/quota").await.json().await.unwrap();
    assert_eq!((usage["available"].as_u64(), usage["leases"].as_u64()), (Some(1100), Some(0)));
    let metrics = app.get("/metrics").await.text().await.unwrap();
    assert!(metrics.contains("tessera_quota_swept_total 1"), "{metrics}");
    // A second run finds nothing more.
    let outcome = server::jobs::quota_sweep::run_once(&app.state).await.unwrap();
    assert_eq!(outcome.released, 0);
}

#[tokio::test]
async fn one_instance_leads_a_job_and_another_takes_over_when_it_stops() {
    let app = spawn_app().await;
    let first = Leadership::new(app.state.db.clone(), "test_job");
    let second = Leadership::new(app.state.db.clone(), "test_job");
    assert!(first.ensure().await.unwrap());
    assert!(!second.ensure().await.unwrap());
    assert!(first.ensure().await.unwrap(), "the leader keeps leading");

    first.resign().await;
    assert!(second.ensure().await.unwrap(), "the lock is free once the leader's connection closes");
    assert!(!first.ensure().await.unwrap());
}

#[tokio::test]
async fn a_hot_tenant_is_served_from_a_chunk_that_comes_back_when_the_server_stops() {
    // Arrange: acme is hot on this instance (quota.hot_tenants)
    let hot = [TenantId::parse("acme").unwrap()].into_iter().collect();
    let app = integration::spawn_app_with(|s| {
        s.quota_chunks = Some(client::quota::ChunkSettings::new("api", 0, hot, Duration::from_secs(30)));
    })
    .await;
    let t = tenant(&app, "acme", quota(1_000_000, 10, Duration::from_secs(60))).await;
    let reserved_in = |usage: &Value, bucket: &str| {
        usage["buckets"].as_array().unwrap().iter().find(|b| b["id"] == bucket).unwrap()["reserved"].as_u64()
    };

    // Act: three reserves of 50: the first goes the exact way (the instance learns the
    // tenant from its reply), the second takes the welcome grant's last 50 as a chunk, the
    // third a chunk of the plan (0.1 % of 1,000,100)
    let mut parts = Vec::new();
    for i in 0..3 {
        let (status, body) = app
            .post_json("/api/v1/tenants/acme/quota/reserve", json!({"request_id": format!("h-{i}"), "tokens": 50}))
            .await;
        assert_eq!(status, 200, "{body}");
        parts.push(body["parts"].clone());
    }
    let usage: Value = app.get("/api/v1/tenants/acme/quota").await.json().await.unwrap();
    let metrics = app.get("/metrics").await.text().await.unwrap();

    // Assert: ordinary reservations; the plan's chunk counts as reserved, and as held here
    assert_eq!(parts[0], json!([{"bucket": "welcome", "tokens": 50}]));
    assert_eq!(parts[1], json!([{"bucket": "welcome", "tokens": 50}]));
    assert_eq!(parts[2], json!([{"bucket": "plan", "tokens": 50}]));
    assert_eq!((reserved_in(&usage, "welcome"), reserved_in(&usage, "plan")), (Some(100), Some(1_000)));
    let plan = usage["buckets"].as_array().unwrap().iter().find(|b| b["id"] == "plan").unwrap().clone();
    assert_eq!(plan["in_chunks"].as_u64(), Some(950));
    assert_eq!(usage["available"].as_u64(), Some(1_000_100 - 1_100));
    assert!(metrics.lines().any(|l| l == "tessera_quota_chunk_tokens 950"), "{metrics}");

    // When the server stops, the chunk's rest comes back at once.
    app.stop_server().await;
    let started = std::time::Instant::now();
    loop {
        let usage = app.state.quotas.usage(&t).await.unwrap();
        let plan = usage.buckets.iter().find(|b| b.id == "plan").unwrap().reserved;
        if plan == 50 {
            assert_eq!(usage.available, 1_000_100 - 150);
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "the chunk was not returned: plan reserved {plan}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
