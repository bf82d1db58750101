//! A repeated reserve, settle or release once Redis no longer holds the request's done
//! marker (the tenant's idempotency window passed): the usage ledger answers with the
//! first reply, for the tenant's retention (`server::quota::repeat`). The window's passing
//! is made by removing the markers, as the end of their window does: the scripts' own
//! clock is Redis's here (the windows themselves are tested with a hand-set clock in the
//! client's tests, `against_redis/quota/markers.rs`).

use std::time::Duration;

use integration::TestApp;
use serde_json::{json, Value};

use crate::usage_ledger::{app, send, TOKEN};

async fn call(app: &TestApp, operation: &str, body: Value) -> (u16, Value) {
    send(app, reqwest::Method::POST, &format!("/api/v1/tenants/acme/quota/{operation}"), body).await
}

/// A plan of 10,000 tokens and tenant `acme` on it, reservations open for `ttl_ms`.
async fn acme(app: &TestApp, ttl_ms: u64) {
    let plan = json!({"name": "pro", "monthly_tokens": 10000, "daily_requests": 100, "concurrency": 10});
    let (status, reply) = send(app, reqwest::Method::POST, "/api/v1/plans", plan).await;
    assert_eq!(status, 201, "{reply}");
    let tenant = json!({"plan": "pro", "reservation_ttl_ms": ttl_ms, "expected_version": 0, "reason": "signed"});
    let (status, reply) = send(app, reqwest::Method::PUT, "/api/v1/tenants/acme", tenant).await;
    assert_eq!(status, 200, "{reply}");
}

async fn quota(app: &TestApp) -> Value {
    let (status, usage) = send(app, reqwest::Method::GET, "/api/v1/tenants/acme/quota", Value::Null).await;
    assert_eq!(status, 200, "{usage}");
    usage
}

fn plan(usage: &Value) -> (u64, u64) {
    let plan = usage["buckets"].as_array().unwrap().iter().find(|b| b["id"] == "plan").unwrap();
    (plan["used"].as_u64().unwrap(), plan["reserved"].as_u64().unwrap())
}

async fn forget(app: &TestApp, rid: &str) {
    integration::forget_done_marker(app, "acme", rid).await;
}

async fn lookups(app: &TestApp, operation: &str, result: &str) -> u64 {
    let metrics =
        app.request(reqwest::Method::GET, "/metrics").bearer_auth(TOKEN).send().await.unwrap().text().await.unwrap();
    let series = format!("tessera_quota_ledger_lookups_total{{operation=\"{operation}\",result=\"{result}\"}} ");
    metrics.lines().find_map(|l| l.strip_prefix(series.as_str())).map_or(0, |v| v.parse().unwrap())
}

#[tokio::test]
async fn once_redis_forgot_a_request_the_ledger_answers_every_repeat_with_the_first_reply() {
    // Arrange: a settle, a release and an expiry, drained to the ledger, then forgotten
    let app = app().await;
    acme(&app, 1_000).await;
    let (status, first) = call(&app, "reserve", json!({"request_id": "r-set", "tokens": 500})).await;
    assert_eq!(status, 200, "{first}");
    let (_, settled) = call(&app, "settle", json!({"request_id": "r-set", "actual_tokens": 420})).await;
    assert_eq!(call(&app, "reserve", json!({"request_id": "r-rel", "tokens": 100})).await.0, 200);
    assert_eq!(call(&app, "release", json!({"request_id": "r-rel"})).await.0, 200);
    let (status, expiring) = call(&app, "reserve", json!({"request_id": "r-exp", "tokens": 300})).await;
    assert_eq!(status, 200, "{expiring}");
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    server::jobs::quota_sweep::run_once(&app.state).await.unwrap();
    let drained = server::jobs::usage_drain::run_once(&app.state).await.unwrap();
    assert_eq!(drained.written, 3, "{drained:?}");
    for rid in ["r-set", "r-rel", "r-exp"] {
        forget(&app, rid).await;
    }
    let before = quota(&app).await;

    // Act
    let (reserve_status, reserve_again) = call(&app, "reserve", json!({"request_id": "r-set", "tokens": 999})).await;
    let settle_again = call(&app, "settle", json!({"request_id": "r-set", "actual_tokens": 1})).await;
    let release_settled = call(&app, "release", json!({"request_id": "r-set"})).await;
    let reserve_released = call(&app, "reserve", json!({"request_id": "r-rel", "tokens": 100})).await;
    let settle_released = call(&app, "settle", json!({"request_id": "r-rel", "actual_tokens": 1})).await;
    let release_released = call(&app, "release", json!({"request_id": "r-rel"})).await;
    let reserve_expired = call(&app, "reserve", json!({"request_id": "r-exp", "tokens": 300})).await;
    let unchanged = quota(&app).await;
    let settle_expired = call(&app, "settle", json!({"request_id": "r-exp", "actual_tokens": 250})).await;
    let settle_expired_again = call(&app, "settle", json!({"request_id": "r-exp", "actual_tokens": 7})).await;
    let never = call(&app, "settle", json!({"request_id": "r-never", "actual_tokens": 7})).await;
    let after = quota(&app).await;

    // Assert: the first replies, nothing reserved or charged again
    assert_eq!(reserve_status, 200, "{reserve_again}");
    assert_eq!(reserve_again["replayed"], true, "{reserve_again}");
    assert_eq!(reserve_again["state"], "settled");
    assert_eq!(reserve_again["source"], "ledger");
    for field in ["tokens", "deadline_ms", "parts"] {
        assert_eq!(reserve_again[field], first[field], "{field}: {reserve_again} against {first}");
    }
    assert_eq!(settle_again.0, 200);
    assert_eq!(settle_again.1["result"], "already_settled", "{}", settle_again.1);
    assert_eq!(
        (&settle_again.1["reserved"], &settle_again.1["actual"], &settle_again.1["charged"]),
        (&settled["reserved"], &settled["actual"], &settled["charged"])
    );
    assert_eq!((release_settled.0, &release_settled.1["result"]), (200, &json!("already_settled")));
    assert_eq!(
        (&reserve_released.1["replayed"], &reserve_released.1["state"]),
        (&json!(true), &json!("released")),
        "{}",
        reserve_released.1
    );
    assert_eq!(settle_released.1["result"], "already_released", "{}", settle_released.1);
    assert_eq!(release_released.1["result"], "already_released", "{}", release_released.1);
    assert_eq!(reserve_expired.1["state"], "expired", "{}", reserve_expired.1);
    assert_eq!(unchanged["requests_today"], before["requests_today"], "no reserve counted again");
    assert_eq!(plan(&unchanged), plan(&before), "nothing reserved or charged again");
    // A settle of the expired reservation is charged, late, once.
    assert_eq!(settle_expired.0, 200, "{}", settle_expired.1);
    assert_eq!(
        (&settle_expired.1["result"], &settle_expired.1["late"], &settle_expired.1["reserved"]),
        (&json!("settled"), &json!(true), &json!(300)),
        "{}",
        settle_expired.1
    );
    assert_eq!(settle_expired_again.1["result"], "already_settled", "{}", settle_expired_again.1);
    assert_eq!(plan(&after), (plan(&before).0 + 250, 0));
    assert_eq!(never.0, 404, "{}", never.1);
    assert_eq!(lookups(&app, "reserve", "found").await, 3);
    assert_eq!(lookups(&app, "settle", "found").await, 3, "r-set, r-rel, r-exp");
    assert_eq!(lookups(&app, "settle", "none").await, 1, "r-never");
}

#[tokio::test]
async fn a_late_settle_recorded_under_another_ttl_is_still_the_answer_after_the_window() {
    // Arrange: a reservation swept, the tenant's TTL raised, then the late settle (its row's
    // reservation time is computed with the new TTL: earlier than the expiry's)
    let app = app().await;
    acme(&app, 1_000).await;
    assert_eq!(call(&app, "reserve", json!({"request_id": "r-1", "tokens": 300})).await.0, 200);
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    server::jobs::quota_sweep::run_once(&app.state).await.unwrap();
    let tenant = json!({"plan": "pro", "reservation_ttl_ms": 600_000, "expected_version": 1, "reason": "longer"});
    let (status, reply) = send(&app, reqwest::Method::PUT, "/api/v1/tenants/acme", tenant).await;
    assert_eq!(status, 200, "{reply}");
    server::publish::drain_outbox(&app.state).await.unwrap();
    let (_, late) = call(&app, "settle", json!({"request_id": "r-1", "actual_tokens": 250})).await;
    assert_eq!((&late["result"], &late["late"]), (&json!("settled"), &json!(true)), "{late}");
    server::jobs::usage_drain::run_once(&app.state).await.unwrap();
    forget(&app, "r-1").await;
    let before = plan(&quota(&app).await);

    // Act
    let (status, again) = call(&app, "settle", json!({"request_id": "r-1", "actual_tokens": 250})).await;

    // Assert: the settle row answers, nothing charged again
    assert_eq!((status, &again["result"]), (200, &json!("already_settled")), "{again}");
    assert_eq!(plan(&quota(&app).await), before);
}

#[tokio::test]
async fn a_request_id_finished_before_the_retention_is_new_again() {
    // Arrange: a settle drained to the ledger, its marker gone, and its row made older than
    // the tenant's retention (62 days)
    let app = app().await;
    acme(&app, 600_000).await;
    assert_eq!(call(&app, "reserve", json!({"request_id": "r-1", "tokens": 500})).await.0, 200);
    assert_eq!(call(&app, "settle", json!({"request_id": "r-1", "actual_tokens": 420})).await.0, 200);
    server::jobs::usage_drain::run_once(&app.state).await.unwrap();
    forget(&app, "r-1").await;
    integration::age_ledger_rows(&app, "r-1", 63).await;

    // Act
    let (status, reply) = call(&app, "reserve", json!({"request_id": "r-1", "tokens": 100})).await;

    // Assert: a new reservation (the ledger will name it a reuse of the first)
    assert_eq!(status, 200, "{reply}");
    assert_eq!(
        (&reply["replayed"], &reply["state"], &reply["source"]),
        (&json!(false), &json!("open"), &json!("redis"))
    );
    assert_eq!(plan(&quota(&app).await).1, 100);
}

#[tokio::test]
async fn a_tenants_idempotency_window_is_a_setting_checked_by_name_and_published() {
    let app = app().await;
    acme(&app, 600_000).await;
    for bad in [json!(59_999), json!(34_560_000_001_i64), json!("1h"), json!(1.5)] {
        let body = json!({"plan": "pro", "idempotency_window_ms": bad, "expected_version": 1, "reason": "try"});
        let (status, reply) = send(&app, reqwest::Method::PUT, "/api/v1/tenants/acme", body).await;
        assert!(status == 400 || status == 422, "{bad}: {status} {reply}");
        assert!(reply.to_string().contains("idempotency_window_ms"), "{bad}: {reply}");
    }
    let (status, tenant) = send(&app, reqwest::Method::GET, "/api/v1/tenants/acme", Value::Null).await;
    assert_eq!((status, &tenant["version"], &tenant["idempotency_window_ms"]), (200, &json!(1), &json!(3_600_000)));

    let body = json!({"plan": "pro", "idempotency_window_ms": 60_000, "expected_version": 1, "reason": "short"});
    let (status, reply) = send(&app, reqwest::Method::PUT, "/api/v1/tenants/acme", body).await;
    assert_eq!(status, 200, "{reply}");
    let (_, tenant) = send(&app, reqwest::Method::GET, "/api/v1/tenants/acme", Value::Null).await;
    assert_eq!(
        (&tenant["idempotency_window_ms"], &tenant["snapshot"]["idempotency_window"]),
        (&json!(60_000), &json!(60_000))
    );
    server::publish::drain_outbox(&app.state).await.unwrap();
    let mut conn = app.state.redis.connection().await.unwrap();
    let published: String = redis::cmd("HGET")
        .arg(app.state.keys.quota_meta("acme"))
        .arg("idempotency_window_ms")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(published, "60000");
}

fn record(
    rid: &str,
    outcome: client::quota::UsageOutcome,
    reserved_at_ms: i64,
    deadline_ms: i64,
) -> client::quota::UsageRecord {
    let settled = outcome == client::quota::UsageOutcome::Settled;
    client::quota::UsageRecord {
        tenant: client::quota::TenantId::parse("acme").unwrap(),
        request_id: rid.into(),
        outcome,
        late: false,
        reserved: 100,
        actual: settled.then_some(80),
        charged: if settled { vec![client::quota::Part { bucket: "plan".into(), tokens: 80 }] } else { vec![] },
        plan_periods: vec![],
        reserved_at_ms,
        at_ms: reserved_at_ms + 1_000,
        generation: "g".into(),
        model: None,
        reserved_parts: vec![client::quota::Part { bucket: "plan".into(), tokens: 100 }],
        deadline_ms: Some(deadline_ms),
        entry: None,
    }
}

#[tokio::test]
async fn the_ledger_answers_for_a_request_ids_latest_reservation_and_its_settle_before_its_expiry() {
    // Arrange: r-1 settled, then reserved again (a reserve that went on without the ledger)
    // and expired; r-2 expired and settled late under a longer TTL (an earlier reservation
    // time, the same deadline)
    let app = app().await;
    acme(&app, 600_000).await;
    let now = chrono::Utc::now().timestamp_millis();
    use client::quota::UsageOutcome::{Expired, Settled};
    let records = [
        record("r-1", Settled, now - 60_000, now - 50_000),
        record("r-1", Expired, now - 30_000, now - 20_000),
        record("r-2", Expired, now - 10_000, now - 9_000),
        record("r-2", Settled, now - 500_000, now - 9_000),
    ];
    let (written, _) =
        server::usage::store::insert(&app.state.db, &records, server::usage::store::Source::Stream).await.unwrap();
    assert_eq!(written.len(), 4);
    let rid = |r: &str| client::quota::RequestId::parse(r).unwrap();
    let acme = client::quota::TenantId::parse("acme").unwrap();

    // Act
    let found = server::usage::store::earlier(
        &app.state.db,
        &[(acme.clone(), rid("r-1")), (acme.clone(), rid("r-2")), (acme.clone(), rid("r-3"))],
    )
    .await
    .unwrap();

    // Assert
    let outcome = |r: &str| found.get(&(acme.clone(), rid(r))).map(|e| (e.outcome, e.deadline_ms));
    assert_eq!(outcome("r-1"), Some((Expired, Some(now - 20_000))), "the latest reservation");
    assert_eq!(outcome("r-2"), Some((Settled, Some(now - 9_000))), "the settle of the expired reservation");
    assert_eq!(outcome("r-3"), None);
}
