//! The admin API for pools and tenants: bearer token, audited changes published at once,
//! optimistic concurrency, validation, drain and immediate reweights.

use integration::{spawn_app_with, TestApp};
use serde_json::{json, Value};
use server::configuration::AdminAccess;

const TOKEN: &str = "test-admin-token-0123456789";

async fn admin_app() -> TestApp {
    spawn_app_with(|s| {
        s.admin = Some(AdminAccess { token: TOKEN.to_owned().into(), actor: "ops-bot".into() });
        s.auth.open = false;
    })
    .await
}

fn pool_body(a: u64, b: u64) -> Value {
    json!({
        "kind": "channels", "ordering": "smooth", "batch_size": 20, "low_water": 5,
        "timezone": "Europe/Berlin", "eject_rebuild_percent": 50,
        "weights": [{"member": "A", "weight": a}, {"member": "B", "weight": b}]
    })
}

/// A data-plane API token, minted with the configured admin token.
async fn dataplane_token(app: &TestApp) -> String {
    let (status, reply) = app
        .send(reqwest::Method::POST, "/api/v1/tokens", Some(TOKEN), json!({"name": "gateway", "scope": "dataplane"}))
        .await;
    assert_eq!(status, 201, "{reply}");
    reply["token"].as_str().unwrap().to_owned()
}

/// Registers channels (pool members must be registered channels).
async fn channels(app: &TestApp, codes: &[&str]) {
    for code in codes {
        let (status, reply) = app
            .send(
                reqwest::Method::POST,
                "/api/v1/channels",
                Some(TOKEN),
                json!({"code": code, "name": format!("channel {code}"), "base_weight": 10}),
            )
            .await;
        assert_eq!(status, 201, "{reply}");
    }
}

async fn tickets(app: &TestApp, pool: &str) -> Vec<String> {
    let mut conn = app.state.redis.connection().await.unwrap();
    redis::cmd("LRANGE").arg(app.state.keys.pool_tickets(pool)).arg(0).arg(-1).query_async(&mut conn).await.unwrap()
}

#[tokio::test]
async fn writes_need_the_configured_bearer_token() {
    let app = admin_app().await;
    let body = json!({"snapshot": pool_body(1, 1), "expected_version": 0});
    let (status, _) = app.send(reqwest::Method::PUT, "/api/v1/pools/p1", None, body.clone()).await;
    assert_eq!(status, 401);
    let (status, _) = app.send(reqwest::Method::PUT, "/api/v1/pools/p1", Some("wrong-token-wrong-token"), body).await;
    assert_eq!(status, 401);
    let audit: i64 = sqlx::query_scalar("select count(*) from audit").fetch_one(&app.state.db).await.unwrap();
    assert_eq!(audit, 0);

    let disabled = spawn_app_with(|s| s.auth.open = false).await;
    let (status, reply) = disabled
        .send(reqwest::Method::PUT, "/api/v1/pools/p1", Some(TOKEN), json!({"snapshot": {}, "expected_version": 0}))
        .await;
    assert_eq!(status, 401);
    assert!(reply["error"].as_str().unwrap().contains("unknown or revoked"), "{reply}");
}

#[tokio::test]
async fn a_pool_is_created_published_reweighted_and_every_change_is_audited() {
    let app = admin_app().await;
    channels(&app, &["A", "B"]).await;

    // Create.
    let (status, created) = app
        .send(
            reqwest::Method::PUT,
            "/api/v1/pools/gray",
            Some(TOKEN),
            json!({"snapshot": pool_body(99, 1), "expected_version": 0, "reason": "new pool"}),
        )
        .await;
    assert_eq!(status, 200, "{created}");
    assert_eq!((created["version"].as_i64(), created["published"].as_bool()), (Some(1), Some(true)));
    let (status, read) = app.send(reqwest::Method::GET, "/api/v1/pools/gray", Some(TOKEN), Value::Null).await;
    assert_eq!((status, read["version"].as_i64()), (200, Some(1)));
    assert_eq!(
        tickets(&app, "gray").await.iter().filter(|t| *t == "B").count(),
        0,
        "1% of 20 rounds to none in the first batch"
    );

    // A stale edit is a conflict naming the current version; nothing changes.
    let (status, conflict) = app.send(reqwest::Method::POST, "/api/v1/pools/gray/weights", Some(TOKEN), json!({"weights": [{"member": "A", "weight": 50}, {"member": "B", "weight": 50}], "mode": "drain", "reason": "x", "expected_version": 0})).await;
    assert_eq!((status, conflict["current_version"].as_i64()), (409, Some(1)), "{conflict}");

    // Immediate: the remaining tickets are replaced by a 50/50 batch.
    let (status, changed) = app.send(reqwest::Method::POST, "/api/v1/pools/gray/weights", Some(TOKEN), json!({"weights": [{"member": "A", "weight": 50}, {"member": "B", "weight": 50}], "mode": "immediate", "reason": "gray 50%", "expected_version": 1})).await;
    assert_eq!(status, 200, "{changed}");
    assert_eq!(changed["version"].as_i64(), Some(2));
    let now = tickets(&app, "gray").await;
    assert_eq!((now.iter().filter(|t| *t == "A").count(), now.iter().filter(|t| *t == "B").count()), (10, 10));

    // The trail: who, from where, why, before and after.
    let (_, trail) = app.send(reqwest::Method::GET, "/api/v1/audit?entity=pool:gray", Some(TOKEN), Value::Null).await;
    let newest = &trail["rows"][0];
    assert_eq!(
        (newest["actor"].as_str(), newest["source"].as_str(), newest["action"].as_str(), newest["reason"].as_str()),
        (Some("ops-bot"), Some("api"), Some("pool.weights"), Some("gray 50%"))
    );
    assert_eq!(newest["before"]["weights"][1]["weight"], 1);
    assert_eq!(newest["after"]["weights"][1]["weight"], 50);
    assert_eq!(trail["rows"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn invalid_changes_are_refused_naming_the_field_and_change_nothing() {
    let app = admin_app().await;
    channels(&app, &["A", "B"]).await;
    app.send(
        reqwest::Method::PUT,
        "/api/v1/pools/v",
        Some(TOKEN),
        json!({"snapshot": pool_body(1, 1), "expected_version": 0}),
    )
    .await;

    let mut bad_tz = pool_body(1, 1);
    bad_tz["timezone"] = json!("Mars/Olympus");
    let (status, body) = app
        .send(reqwest::Method::PUT, "/api/v1/pools/v", Some(TOKEN), json!({"snapshot": bad_tz, "expected_version": 1}))
        .await;
    assert_eq!((status, body["field"].as_str()), (422, Some("timezone")), "{body}");

    let (status, body) = app.send(reqwest::Method::POST, "/api/v1/pools/v/weights", Some(TOKEN), json!({"weights": [{"member": "A", "weight": 0}, {"member": "B", "weight": 0}], "mode": "drain", "reason": "r", "expected_version": 1})).await;
    assert_eq!(status, 400, "{body}");
    let (status, body) = app.send(reqwest::Method::POST, "/api/v1/pools/v/weights", Some(TOKEN), json!({"weights": [{"member": "A", "weight": -3}, {"member": "B", "weight": 1}], "mode": "drain", "reason": "r", "expected_version": 1})).await;
    assert_eq!(status, 400, "{body}");
    let (status, body) = app.send(reqwest::Method::POST, "/api/v1/pools/v/weights", Some(TOKEN), json!({"weights": [{"member": "A", "weight": 1}, {"member": "B", "weight": 1}], "mode": "drain", "expected_version": 1})).await;
    assert_eq!((status, body["field"].as_str()), (400, Some("reason")), "{body}");
    let (status, _) = app
        .send(
            reqwest::Method::POST,
            "/api/v1/pools/nowhere/weights",
            Some(TOKEN),
            json!({"weights": [{"member": "A", "weight": 1}], "mode": "drain", "reason": "r", "expected_version": 1}),
        )
        .await;
    assert_eq!(status, 404);

    let versions: i64 = sqlx::query_scalar("select count(*) from snapshot").fetch_one(&app.state.db).await.unwrap();
    assert_eq!(versions, 1);
}

#[tokio::test]
async fn a_tenant_is_created_and_its_quota_served_at_once() {
    let app = admin_app().await;
    let (status, plan) = app
        .send(
            reqwest::Method::POST,
            "/api/v1/plans",
            Some(TOKEN),
            json!({"name": "tiny", "monthly_tokens": 1000, "daily_requests": 100, "concurrency": 4}),
        )
        .await;
    assert_eq!(status, 201, "{plan}");
    let (status, created) = app
        .send(
            reqwest::Method::PUT,
            "/api/v1/tenants/newco",
            Some(TOKEN),
            json!({"plan": "tiny", "reservation_ttl_ms": 60000, "retention_days": 40, "expected_version": 0}),
        )
        .await;
    assert_eq!(status, 200, "{created}");
    assert_eq!((created["version"].as_i64(), created["published"].as_bool()), (Some(1), Some(true)));
    let dataplane = dataplane_token(&app).await;
    let (status, reserved) = app
        .send(
            reqwest::Method::POST,
            "/api/v1/tenants/newco/quota/reserve",
            Some(&dataplane),
            json!({"request_id": "r1", "tokens": 10}),
        )
        .await;
    assert_eq!((status, reserved["result"].as_str()), (200, Some("reserved")));
}

#[tokio::test]
async fn an_ejection_is_audited_skips_the_member_and_survives_a_wiped_redis() {
    let app = admin_app().await;
    channels(&app, &["A", "B"]).await;
    app.send(
        reqwest::Method::PUT,
        "/api/v1/pools/ej",
        Some(TOKEN),
        json!({"snapshot": pool_body(3, 1), "expected_version": 0}),
    )
    .await;

    // Eject B (25% of the weight, under the 50% rebuild limit): its tickets are skipped.
    let (status, ejected) = app
        .send(
            reqwest::Method::POST,
            "/api/v1/pools/ej/members/B/eject",
            Some(TOKEN),
            json!({"reason": "B failing", "expected_version": 1}),
        )
        .await;
    assert_eq!(status, 200, "{ejected}");
    assert_eq!((ejected["ejected"].clone(), ejected["rebuilt"].as_bool()), (json!(["B"]), Some(false)));
    let dataplane = dataplane_token(&app).await;
    for _ in 0..15 {
        let (_, draw) = app.send(reqwest::Method::POST, "/api/v1/pools/ej/draw", Some(&dataplane), Value::Null).await;
        assert_eq!(draw["member"], "A", "{draw}");
    }
    let (status, again) = app
        .send(
            reqwest::Method::POST,
            "/api/v1/pools/ej/members/B/eject",
            Some(TOKEN),
            json!({"reason": "again", "expected_version": 2}),
        )
        .await;
    assert_eq!((status, again["field"].as_str()), (422, Some("member")));

    // Redis loses everything: reconcile brings the pool back with B still ejected.
    let mut conn = app.state.redis.connection().await.unwrap();
    conn.unlink_matching(&app.state.keys.scan_pattern()).await.unwrap();
    server::publish::reconcile(&app.state).await.unwrap();
    let members: Vec<String> =
        redis::cmd("SMEMBERS").arg(app.state.keys.pool_ejected("ej")).query_async(&mut conn).await.unwrap();
    assert_eq!(members, vec!["B"]);
    assert!(tickets(&app, "ej").await.iter().all(|t| t == "A"), "a batch built with B ejected has no B");

    // Restore: B is in the next batch again.
    let (status, _) = app
        .send(
            reqwest::Method::POST,
            "/api/v1/pools/ej/members/B/restore",
            Some(TOKEN),
            json!({"reason": "recovered", "expected_version": 2}),
        )
        .await;
    assert_eq!(status, 200);
    let (_, trail) = app.send(reqwest::Method::GET, "/api/v1/audit?entity=pool:ej", Some(TOKEN), Value::Null).await;
    let actions: Vec<&str> = trail["rows"].as_array().unwrap().iter().map(|r| r["action"].as_str().unwrap()).collect();
    assert_eq!(actions, vec!["pool.restore", "pool.eject", "pool.put"]);
}
