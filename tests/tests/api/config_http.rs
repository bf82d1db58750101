//! The configuration API (channels, pools, plans, tenants, grants) against a running server
//! with its own database and Redis prefix: valid changes are stored, audited and published;
//! invalid ones are refused naming the field and the rule, and change nothing.

use integration::{json_reply, spawn_app_with, with_json, TestApp};
use serde_json::{json, Value};
use server::configuration::AdminAccess;

const TOKEN: &str = "config-admin-token-0123456789";

async fn app() -> TestApp {
    spawn_app_with(|s| {
        s.admin = Some(AdminAccess { token: TOKEN.to_owned().into(), actor: "ops-bot".into() });
        s.auth.open = false;
    })
    .await
}

async fn send(app: &TestApp, method: reqwest::Method, path: &str, body: Value) -> (u16, Value) {
    let request = app.request(method, path).bearer_auth(TOKEN).header("x-request-id", "req-42");
    json_reply(with_json(request, &body)).await
}

async fn get(app: &TestApp, path: &str) -> (u16, Value) {
    send(app, reqwest::Method::GET, path, Value::Null).await
}

async fn post(app: &TestApp, path: &str, body: Value) -> (u16, Value) {
    send(app, reqwest::Method::POST, path, body).await
}

async fn put(app: &TestApp, path: &str, body: Value) -> (u16, Value) {
    send(app, reqwest::Method::PUT, path, body).await
}

/// Rows in each configuration table and the audit trail, snapshots and outbox: what a
/// refused change must leave exactly as it was.
async fn footprint(app: &TestApp) -> Vec<i64> {
    let mut counts = Vec::new();
    for table in [
        "channel",
        "pool",
        "pool_member",
        "pool_tier",
        "peak_window",
        "plan",
        "tenant",
        "quota_grant",
        "snapshot",
        "config_history",
        "audit",
        "outbox",
    ] {
        counts
            .push(sqlx::query_scalar(&format!("select count(*) from {table}")).fetch_one(&app.state.db).await.unwrap());
    }
    // Row contents too, so an update in place is seen.
    let digest: Option<String> = sqlx::query_scalar(
        "select md5(string_agg(x, '|' order by x)) from (
            select row(c.*)::text as x from channel c union all select row(p.*)::text from pool p
            union all select row(m.*)::text from pool_member m union all select row(l.*)::text from plan l
            union all select row(t.*)::text from tenant t union all select row(g.*)::text from quota_grant g) rows",
    )
    .fetch_one(&app.state.db)
    .await
    .unwrap();
    counts.push(digest.map_or(0, |d| i64::from_str_radix(&d[..12], 16).unwrap()));
    counts
}

fn pool_body(members: &[(&str, u64)]) -> Value {
    let weights: Vec<Value> = members.iter().map(|(m, w)| json!({"member": m, "weight": w})).collect();
    json!({
        "kind": "channels", "ordering": "smooth", "batch_size": 20, "low_water": 5,
        "timezone": "Europe/Berlin", "eject_rebuild_percent": 60, "weights": weights
    })
}

async fn channel(app: &TestApp, code: &str, tier: Option<&str>) {
    let (status, reply) = post(
        app,
        "/api/v1/channels",
        json!({"code": code, "name": format!("{code} bank"), "tier": tier, "base_weight": 10}),
    )
    .await;
    assert_eq!(status, 201, "{reply}");
}

#[tokio::test]
async fn channels_are_registered_listed_updated_and_invalid_ones_refused_naming_the_field() {
    let app = app().await;
    let (status, created) = post(
        &app,
        "/api/v1/channels",
        json!({"code": "ALIPAY_A", "name": "Alipay A", "base_weight": 45, "reason": "onboarding"}),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(
        (created["channel"]["enabled"].as_bool(), created["channel"]["version"].as_i64()),
        (Some(true), Some(1))
    );

    let before = footprint(&app).await;
    let refusals = [
        (json!({"code": "ALIPAY_A", "name": "again", "base_weight": 1}), 409, "code"),
        (json!({"code": "bad code", "name": "x", "base_weight": 1}), 400, "code"),
        (json!({"code": "X".repeat(65), "name": "x", "base_weight": 1}), 400, "code"),
        (json!({"code": "B", "name": "n".repeat(201), "base_weight": 1}), 400, "name"),
        (json!({"code": "B", "name": "   ", "base_weight": 1}), 400, "name"),
        (json!({"code": "B", "name": "b", "base_weight": -5}), 400, "base_weight"),
        (json!({"code": "B", "name": "b", "base_weight": 1.5}), 400, "base_weight"),
        (json!({"code": "B", "name": "b", "base_weight": 1, "colour": "red"}), 400, "body"),
        (json!({"code": "B", "name": "b"}), 400, "body"),
    ];
    for (body, status, field) in refusals {
        let (got, reply) = post(&app, "/api/v1/channels", body.clone()).await;
        assert_eq!(got, status, "{body}: {reply}");
        if status == 400 && field != "body" {
            assert_eq!(reply["field"].as_str(), Some(field), "{body}: {reply}");
        }
        if status == 409 {
            assert_eq!(reply["field"].as_str(), Some("code"), "{reply}");
        }
    }
    let (status, _) =
        post(&app, "/api/v1/channels", json!({"code": "T", "name": "t", "tier": "Q", "base_weight": 1})).await;
    assert_eq!(status, 400);
    // No token, no change.
    let anonymous = app
        .request(reqwest::Method::POST, "/api/v1/channels")
        .json(&json!({"code": "Z", "name": "z", "base_weight": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 401);
    assert_eq!(footprint(&app).await, before, "refused changes wrote nothing");

    let (status, updated) = put(
        &app,
        "/api/v1/channels/ALIPAY_A",
        json!({"name": "Alipay acquirer A", "tier": "G", "base_weight": 50, "expected_version": 1}),
    )
    .await;
    assert_eq!((status, updated["channel"]["version"].as_i64()), (200, Some(2)), "{updated}");
    let (status, stale) =
        put(&app, "/api/v1/channels/ALIPAY_A", json!({"name": "x", "base_weight": 1, "expected_version": 1})).await;
    assert_eq!((status, stale["current_version"].as_i64()), (409, Some(2)));
    let (status, _) =
        put(&app, "/api/v1/channels/NOPE", json!({"name": "x", "base_weight": 1, "expected_version": 1})).await;
    assert_eq!(status, 404);

    let (status, list) = get(&app, "/api/v1/channels").await;
    assert_eq!(status, 200);
    assert_eq!(list["channels"][0]["name"], "Alipay acquirer A");
    assert_eq!(list["channels"][0]["tier"], "G");
    let (status, _) = get(&app, "/api/v1/channels/NOPE").await;
    assert_eq!(status, 404);

    let (_, trail) = get(&app, "/api/v1/audit?entity=channel:ALIPAY_A").await;
    let rows = trail["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(
        (
            rows[0]["action"].as_str(),
            rows[0]["before"]["base_weight"].as_i64(),
            rows[0]["after"]["base_weight"].as_i64()
        ),
        (Some("channel.update"), Some(45), Some(50))
    );
    assert_eq!((rows[1]["reason"].as_str(), rows[1]["request_id"].as_str()), (Some("onboarding"), Some("req-42")));
}

#[tokio::test]
async fn a_pool_refers_to_registered_channels_and_bad_pools_change_nothing() {
    let app = app().await;
    for code in ["A", "B", "C"] {
        channel(&app, code, None).await;
    }
    let (status, created) =
        put(&app, "/api/v1/pools/p", json!({"snapshot": pool_body(&[("A", 5), ("B", 3)]), "expected_version": 0}))
            .await;
    assert_eq!((status, created["version"].as_i64()), (200, Some(1)), "{created}");

    let before = footprint(&app).await;
    let mut bad_tz = pool_body(&[("A", 1)]);
    bad_tz["timezone"] = json!("Mars/Olympus");
    let mut overlong = pool_body(&[("A", 1)]);
    overlong["weights"][0]["member"] = json!("M".repeat(65));
    let mut bad_window = pool_body(&[("A", 1)]);
    bad_window["peak_windows"] = json!([{"start": "19:00", "end": "19:00", "multiplier": 2}]);
    let cases = [
        (pool_body(&[("A", 1), ("GHOST", 1)]), 1, 422, "weights"),
        (pool_body(&[("A", 0), ("B", 0)]), 1, 422, "weights"),
        (pool_body(&[("A", 1), ("A", 2)]), 1, 422, "weights"),
        (bad_tz, 1, 422, "timezone"),
        (overlong, 1, 422, "weights"),
        (bad_window, 1, 422, "peak_windows"),
        (pool_body(&[("A", 1)]), 0, 409, ""),
    ];
    for (snapshot, expected, status, field) in cases {
        let (got, reply) =
            put(&app, "/api/v1/pools/p", json!({"snapshot": snapshot, "expected_version": expected})).await;
        assert_eq!(got, status, "{snapshot}: {reply}");
        if !field.is_empty() {
            assert_eq!(reply["field"].as_str(), Some(field), "{snapshot}: {reply}");
        }
    }
    let (status, reply) = post(
        &app,
        "/api/v1/pools/p/weights",
        json!({"weights": [{"member": "A", "weight": -1}], "mode": "drain", "reason": "r", "expected_version": 1}),
    )
    .await;
    assert_eq!(status, 400, "{reply}");
    let (status, reply) = put(&app, "/api/v1/pools/p/peak_windows", json!({"peak_windows": [{"start": "25:00", "end": "23:00", "multiplier": 2}], "reason": "r", "expected_version": 1})).await;
    assert_eq!(status, 400, "{reply}");
    let (status, reply) =
        put(&app, "/api/v1/pools/p/caps", json!({"caps": {"C": 10}, "reason": "r", "expected_version": 1})).await;
    assert_eq!((status, reply["field"].as_str()), (422, Some("caps")), "C is not a member: {reply}");
    let (status, reply) =
        put(&app, "/api/v1/pools/p/caps", json!({"caps": {"A": 0}, "reason": "r", "expected_version": 1})).await;
    assert_eq!((status, reply["field"].as_str()), (422, Some("caps")), "{reply}");
    let (status, reply) = put(
        &app,
        "/api/v1/pools/p/caps",
        json!({"caps": {"A": 18446744073709551615_u64}, "reason": "r", "expected_version": 1}),
    )
    .await;
    assert_eq!((status, reply["field"].as_str()), (422, Some("caps")), "above 2^53-1: {reply}");
    let (status, reply) = put(&app, "/api/v1/pools/p/peak_windows", json!({"peak_windows": [{"start": "19:00", "end": "23:00", "multiplier": 2, "weights": [{"member": "GHOST", "weight": 5}]}], "reason": "r", "expected_version": 1})).await;
    assert_eq!((status, reply["field"].as_str()), (422, Some("peak_windows[0].weights")), "{reply}");
    let (status, reply) = put(&app, "/api/v1/pools/p/peak_windows", json!({"peak_windows": [{"start": "19:00", "end": "23:00", "multiplier": 3000000000_u64}], "reason": "r", "expected_version": 1})).await;
    assert_eq!((status, reply["field"].as_str()), (422, Some("peak_windows[0].multiplier")), "{reply}");
    // Within the multiplier's own bound, but a peak batch over the largest batch would fail
    // every refill while the window is open: refused when written.
    let mut big = pool_body(&[("A", 5), ("B", 3)]);
    big["batch_size"] = json!(200);
    big["peak_windows"] = json!([{"start": "19:00", "end": "23:00", "multiplier": 1000}]);
    let (status, reply) = put(&app, "/api/v1/pools/big", json!({"snapshot": big, "expected_version": 0})).await;
    assert_eq!((status, reply["field"].as_str()), (422, Some("peak_windows[0].multiplier")), "{reply}");
    assert!(reply["rule"].as_str().unwrap().contains("batch_size × multiplier must be at most 100000"), "{reply}");
    let (status, reply) = post(&app, "/api/v1/pools/p/rebuild", json!({"reason": "a\u{0}b"})).await;
    assert_eq!((status, reply["field"].as_str()), (400, Some("reason")), "{reply}");
    let (status, reply) =
        post(&app, "/api/v1/pools/p/members", json!({"channel": "GHOST", "reason": "r", "expected_version": 1})).await;
    assert_eq!((status, reply["field"].as_str()), (422, Some("channel")), "{reply}");
    let (status, reply) =
        post(&app, "/api/v1/pools/p/members", json!({"channel": "A", "reason": "r", "expected_version": 1})).await;
    assert_eq!((status, reply["field"].as_str()), (422, Some("channel")), "already a member: {reply}");
    let (status, _) =
        post(&app, "/api/v1/pools/p/members/NOPE/eject", json!({"reason": "r", "expected_version": 1})).await;
    assert_eq!(status, 404);
    let (status, _) = post(&app, "/api/v1/pools/p/rebuild", json!({})).await;
    assert_eq!(status, 400, "a rebuild needs a reason");
    let (status, _) = post(&app, "/api/v1/pools/nowhere/rebuild", json!({"reason": "r"})).await;
    assert_eq!(status, 404);
    assert_eq!(footprint(&app).await, before, "refused changes wrote nothing");

    // Valid edits, each one version, read back from the tables.
    let (status, added) = post(
        &app,
        "/api/v1/pools/p/members",
        json!({"channel": "C", "daily_cap": 7, "reason": "gray C", "expected_version": 1}),
    )
    .await;
    assert_eq!((status, added["version"].as_i64()), (200, Some(2)), "{added}");
    let (status, reply) = put(&app, "/api/v1/pools/p/peak_windows", json!({"peak_windows": [{"start": "22:00", "end": "02:00", "multiplier": 2}], "reason": "night", "expected_version": 2})).await;
    assert_eq!(status, 200, "{reply}");
    let (status, reply) =
        put(&app, "/api/v1/pools/p/caps", json!({"caps": {"A": 100, "C": 7}, "reason": "caps", "expected_version": 3}))
            .await;
    assert_eq!(status, 200, "{reply}");
    let (_, read) = get(&app, "/api/v1/pools/p").await;
    assert_eq!(read["version"], 4);
    assert_eq!(
        read["snapshot"]["weights"],
        json!([{"member": "A", "weight": 5}, {"member": "B", "weight": 3}, {"member": "C", "weight": 10}]),
        "C joins with its base weight"
    );
    assert_eq!(read["snapshot"]["caps"], json!({"A": 100, "C": 7}));
    assert_eq!(read["snapshot"]["peak_windows"], json!([{"start": "22:00", "end": "02:00", "multiplier": 2}]));
    let mut conn = app.state.redis.connection().await.unwrap();
    let published: u64 =
        redis::cmd("HGET").arg(app.state.keys.pool_meta("p")).arg("version").query_async(&mut conn).await.unwrap();
    assert_eq!(published, 4, "Redis has the newest version");

    let (status, rebuilt) = post(&app, "/api/v1/pools/p/rebuild", json!({"reason": "fresh batch"})).await;
    assert_eq!((status, rebuilt["rebuilt"].as_bool()), (200, Some(true)), "{rebuilt}");
    let (_, list) = get(&app, "/api/v1/pools").await;
    assert_eq!(list["pools"][0]["name"], "p");
    assert_eq!(list["pools"][0]["members"], 3);
    let (_, trail) = get(&app, "/api/v1/audit?entity=pool:p").await;
    let actions: Vec<&str> = trail["rows"].as_array().unwrap().iter().map(|r| r["action"].as_str().unwrap()).collect();
    assert_eq!(actions, vec!["pool.rebuild", "pool.caps", "pool.peak_windows", "pool.member_add", "pool.put"]);
}

#[tokio::test]
async fn a_tiers_pool_keeps_channels_in_their_own_tier() {
    let app = app().await;
    channel(&app, "G1", Some("G")).await;
    channel(&app, "N1", Some("N")).await;
    let body = |g_channel: &str| {
        json!({
            "kind": "tiers", "ordering": "shuffle", "batch_size": 10, "low_water": 2, "timezone": "UTC",
            "eject_rebuild_percent": 50,
            "weights": [{"member": "G", "weight": 2}, {"member": "N", "weight": 1}],
            "tiers": {"G": [{"member": g_channel, "weight": 1}], "N": [{"member": "N1", "weight": 1}]}
        })
    };
    let (status, reply) = put(&app, "/api/v1/pools/t", json!({"snapshot": body("N1"), "expected_version": 0})).await;
    assert_eq!((status, reply["field"].as_str()), (422, Some("tiers")), "{reply}");
    let (status, reply) = put(&app, "/api/v1/pools/t", json!({"snapshot": body("G1"), "expected_version": 0})).await;
    assert_eq!(status, 200, "{reply}");
    let (_, read) = get(&app, "/api/v1/pools/t").await;
    assert_eq!(read["snapshot"]["tiers"]["G"], json!([{"member": "G1", "weight": 1}]));
    assert_eq!(read["snapshot"]["weights"], json!([{"member": "G", "weight": 2}, {"member": "N", "weight": 1}]));
    // A tier change of a channel serving another tier is refused.
    let (status, reply) =
        put(&app, "/api/v1/channels/G1", json!({"name": "g", "tier": "U", "base_weight": 1, "expected_version": 1}))
            .await;
    assert_eq!((status, reply["field"].as_str()), (422, Some("tier")), "{reply}");
}

#[tokio::test]
async fn disabling_a_channel_ejects_it_from_every_pool_in_one_audited_change() {
    let app = app().await;
    for code in ["A", "B", "C"] {
        channel(&app, code, None).await;
    }
    put(&app, "/api/v1/pools/one", json!({"snapshot": pool_body(&[("A", 3), ("B", 1)]), "expected_version": 0})).await;
    put(&app, "/api/v1/pools/two", json!({"snapshot": pool_body(&[("B", 1), ("C", 3)]), "expected_version": 0})).await;

    let (status, reply) = post(&app, "/api/v1/channels/B/disable", json!({})).await;
    assert_eq!((status, reply["field"].as_str()), (400, Some("reason")));
    let (status, reply) =
        post(&app, "/api/v1/channels/B/disable", json!({"reason": "acquirer outage", "expected_version": 1})).await;
    assert_eq!(status, 200, "{reply}");
    let entities: Vec<&str> =
        reply["changes"].as_array().unwrap().iter().map(|c| c["entity"].as_str().unwrap()).collect();
    assert_eq!(entities, vec!["channel:B", "pool:one", "pool:two"]);
    assert_eq!(reply["published"], true);
    for pool in ["one", "two"] {
        let (_, read) = get(&app, &format!("/api/v1/pools/{pool}")).await;
        assert_eq!(
            (read["published_version"].as_i64(), read["published"]["ejected"].clone()),
            (Some(2), json!(["B"])),
            "{pool}"
        );
        assert_eq!(
            (read["version"].as_i64(), read["snapshot"].get("ejected")),
            (Some(1), None),
            "the configuration is unchanged: {read}"
        );
        let name = client::pool::PoolName::parse(pool).unwrap();
        for _ in 0..25 {
            assert_ne!(
                app.state.pools.draw(&name).await.unwrap().member,
                "B",
                "{pool} never serves a disabled channel"
            );
        }
    }
    let (status, reply) = post(&app, "/api/v1/channels/B/disable", json!({"reason": "again"})).await;
    assert_eq!((status, reply["field"].as_str()), (422, Some("enabled")));

    // Every row of the change carries the same request id and reason.
    let rows: Vec<(String, String, Option<String>, Option<String>)> =
        sqlx::query_as("select entity, action, reason, request_id from audit where request_id = 'req-42' and action like '%disable%' order by id")
            .fetch_all(&app.state.db)
            .await
            .unwrap();
    assert_eq!(
        rows.iter().map(|r| (r.0.as_str(), r.1.as_str())).collect::<Vec<_>>(),
        vec![
            ("channel:B", "channel.disable"),
            ("pool:one", "pool.channel_disabled"),
            ("pool:two", "pool.channel_disabled")
        ]
    );
    assert!(rows.iter().all(|r| r.2.as_deref() == Some("acquirer outage")));

    // An edit of the pool keeps the channel ejected while it is disabled; enabling it
    // brings it back everywhere.
    let (status, reply) = post(&app, "/api/v1/pools/one/weights", json!({"weights": [{"member": "A", "weight": 1}, {"member": "B", "weight": 1}], "mode": "drain", "reason": "r", "expected_version": 1})).await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!((reply["version"].as_i64(), reply["published_version"].as_i64()), (Some(2), Some(3)), "{reply}");
    let (_, read) = get(&app, "/api/v1/pools/one").await;
    assert_eq!((read["snapshot"].get("ejected"), &read["published"]["ejected"]), (None, &json!(["B"])), "{read}");
    // A read-modify-write of the configuration does not turn the disabled channel into
    // the pool's own ejection.
    let (status, reply) =
        put(&app, "/api/v1/pools/one", json!({"snapshot": read["snapshot"], "expected_version": 2})).await;
    assert_eq!(status, 200, "{reply}");
    let (status, reply) = post(&app, "/api/v1/channels/B/enable", json!({"reason": "recovered"})).await;
    assert_eq!(status, 200, "{reply}");
    let (_, read) = get(&app, "/api/v1/pools/one").await;
    assert_eq!(read["published"].get("ejected"), None, "{read}");
}

#[tokio::test]
async fn plans_tenants_and_grants_are_validated_published_and_revocable() {
    let app = app().await;
    let (status, reply) = post(
        &app,
        "/api/v1/plans",
        json!({"name": "pro", "monthly_tokens": 1000, "daily_requests": 50, "concurrency": 4}),
    )
    .await;
    assert_eq!(status, 201, "{reply}");

    let before = footprint(&app).await;
    for (body, field) in [
        (json!({"name": "pro", "monthly_tokens": 1, "daily_requests": 1, "concurrency": 1}), "name"),
        (json!({"name": "neg", "monthly_tokens": -1, "daily_requests": 1, "concurrency": 1}), "monthly_tokens"),
        (
            json!({"name": "big", "monthly_tokens": 9007199254740992_u64, "daily_requests": 1, "concurrency": 1}),
            "monthly_tokens",
        ),
        (json!({"name": "c", "monthly_tokens": 1, "daily_requests": 1, "concurrency": 3000000000_u64}), "concurrency"),
        (json!({"name": "bad name", "monthly_tokens": 1, "daily_requests": 1, "concurrency": 1}), "plan"),
    ] {
        let (status, reply) = post(&app, "/api/v1/plans", body.clone()).await;
        assert!(status == 400 || status == 409, "{body}: {status} {reply}");
        if status == 400 {
            assert_eq!(reply["field"].as_str(), Some(field), "{body}: {reply}");
        }
    }
    for (body, status, field) in [
        (json!({"plan": "gold", "expected_version": 0}), 422, "plan"),
        (json!({"plan": "pro", "reservation_ttl_ms": 0, "expected_version": 0}), 422, "reservation_ttl_ms"),
        (json!({"plan": "pro", "retention_days": 9999, "expected_version": 0}), 422, "retention_days"),
        (json!({"plan": "pro"}), 400, "expected_version"),
        (json!({"plan": "pro", "expected_version": 0, "colour": "red"}), 400, "colour"),
        (json!({"plan": "pro", "expected_version": 3}), 409, ""),
    ] {
        let (got, reply) = put(&app, "/api/v1/tenants/newco", body.clone()).await;
        assert_eq!(got, status, "{body}: {reply}");
        if !field.is_empty() {
            assert_eq!(reply["field"].as_str(), Some(field), "{body}: {reply}");
        }
    }
    assert_eq!(footprint(&app).await, before, "refused changes wrote nothing");

    let (status, reply) =
        put(&app, "/api/v1/tenants/newco", json!({"plan": "pro", "expected_version": 0, "reason": "signed"})).await;
    assert_eq!((status, reply["version"].as_i64()), (200, Some(1)), "{reply}");
    let tenant = client::quota::TenantId::parse("newco").unwrap();
    let usage = app.state.quotas.usage(&tenant).await.unwrap();
    assert_eq!(usage.version, 1);

    // Grants: an expired one, a duplicate id, a priority on a temporary grant are refused.
    let past = (chrono::Utc::now() - chrono::Duration::hours(1)).to_rfc3339();
    let future = (chrono::Utc::now() + chrono::Duration::days(30)).to_rfc3339();
    let before = footprint(&app).await;
    for (body, status, field) in [
        (json!({"id": "old", "kind": "bonus", "amount": 10, "expires_at": past}), 422, "expires_at"),
        (json!({"id": "t", "kind": "temporary", "priority": 1, "amount": 10}), 400, "priority"),
        (json!({"id": "t", "kind": "gift", "amount": 10}), 400, "kind"),
        (json!({"id": "t", "kind": "bonus", "amount": 0}), 400, "amount"),
        (json!({"id": "plan", "kind": "bonus", "amount": 5}), 400, "grant.id"),
    ] {
        let (got, reply) = post(&app, "/api/v1/tenants/newco/grants", body.clone()).await;
        assert_eq!(got, status, "{body}: {reply}");
        assert_eq!(reply["field"].as_str(), Some(field), "{body}: {reply}");
    }
    let (status, _) =
        post(&app, "/api/v1/tenants/nobody/grants", json!({"id": "g", "kind": "bonus", "amount": 5})).await;
    assert_eq!(status, 404);
    assert_eq!(footprint(&app).await, before, "refused grants wrote nothing");

    let (status, reply) = post(&app, "/api/v1/tenants/newco/grants", json!({"id": "launch", "kind": "bonus", "priority": 1, "amount": 500, "expires_at": future, "reason": "launch"})).await;
    assert_eq!((status, reply["version"].as_i64()), (201, Some(2)), "{reply}");
    let (status, reply) =
        post(&app, "/api/v1/tenants/newco/grants", json!({"id": "launch", "kind": "bonus", "amount": 5})).await;
    assert_eq!((status, reply["field"].as_str()), (409, Some("id")), "{reply}");
    let usage = app.state.quotas.usage(&tenant).await.unwrap();
    assert_eq!((usage.version, usage.buckets.len()), (2, 2), "{usage:?}");

    // A plan change republishes its tenants.
    let (status, reply) = put(
        &app,
        "/api/v1/plans/pro",
        json!({"monthly_tokens": 2000, "daily_requests": 50, "concurrency": 4, "expected_version": 1}),
    )
    .await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["changes"][1]["entity"], "tenant:newco");
    let usage = app.state.quotas.usage(&tenant).await.unwrap();
    assert_eq!((usage.version, usage.buckets.last().unwrap().amount), (3, 2000));

    // Revoke: gone from the published quota, kept (marked) in the store; not twice.
    let (status, _) = post(&app, "/api/v1/tenants/newco/grants/launch/revoke", json!({})).await;
    assert_eq!(status, 400, "a revocation needs a reason");
    let (status, reply) = post(&app, "/api/v1/tenants/newco/grants/launch/revoke", json!({"reason": "mistake"})).await;
    assert_eq!((status, reply["version"].as_i64()), (200, Some(4)), "{reply}");
    let usage = app.state.quotas.usage(&tenant).await.unwrap();
    assert_eq!(usage.buckets.len(), 1, "{usage:?}");
    let (status, reply) = post(&app, "/api/v1/tenants/newco/grants/launch/revoke", json!({"reason": "again"})).await;
    assert_eq!((status, reply["field"].as_str()), (422, Some("id")));
    let (status, _) = post(&app, "/api/v1/tenants/newco/grants/never/revoke", json!({"reason": "r"})).await;
    assert_eq!(status, 404);
    let (_, read) = get(&app, "/api/v1/tenants/newco").await;
    assert_eq!((read["plan"].as_str(), read["version"].as_i64()), (Some("pro"), Some(4)));
    assert!(read["grants"][0]["revoked_at"].is_string(), "{read}");
    assert_eq!(read["snapshot"]["grants"], json!([]));
    let (_, list) = get(&app, "/api/v1/plans").await;
    assert_eq!(list["plans"][0]["tenants"], 1);
    let (_, list) = get(&app, "/api/v1/tenants").await;
    assert_eq!(list["tenants"][0]["name"], "newco");
}

#[tokio::test]
async fn snapshots_written_before_the_configuration_tables_are_adopted_into_them() {
    let app = app().await;
    // As an older version left them: snapshots only, no rows.
    let pool = json!({"kind": "channels", "ordering": "smooth", "batch_size": 10, "low_water": 2, "timezone": "UTC",
        "eject_rebuild_percent": 50, "weights": [{"member": "OLD_A", "weight": 3}, {"member": "OLD_B", "weight": 1}],
        "caps": {"OLD_A": 50}});
    let tenant = json!({"monthly_tokens": 1000, "daily_requests": 10, "concurrency": 2, "reservation_ttl": 60000,
        "retention_days": 30, "fallback": {"policy": "fail_closed"},
        "grants": [{"id": "g1", "kind": "bonus", "priority": 2, "amount": 50, "starts_at": null, "expires_at": null}]});
    for (entity, body) in [("pool:legacy", &pool), ("tenant:legacy", &tenant)] {
        sqlx::query("insert into snapshot (entity, version, body) values ($1, 3, $2)")
            .bind(entity)
            .bind(body)
            .execute(&app.state.db)
            .await
            .unwrap();
    }
    let adopted = server::adopt::store::adopt_snapshots(&app.state.db).await.unwrap();
    assert_eq!(adopted, vec!["pool:legacy", "tenant:legacy"]);
    assert!(server::adopt::store::adopt_snapshots(&app.state.db).await.unwrap().is_empty(), "once");

    let (_, read) = get(&app, "/api/v1/pools/legacy").await;
    assert_eq!(
        (read["published_version"].as_i64(), &read["snapshot"]["weights"], &read["snapshot"]["caps"]),
        (Some(3), &pool["weights"], &pool["caps"]),
        "{read}"
    );
    let (_, channel) = get(&app, "/api/v1/channels/OLD_A").await;
    assert_eq!((channel["base_weight"].as_i64(), channel["pools"].clone()), (Some(3), json!(["legacy"])));
    let (_, t) = get(&app, "/api/v1/tenants/legacy").await;
    assert_eq!(
        (t["plan"].as_str(), t["version"].as_i64(), t["grants"][0]["id"].as_str()),
        (Some("legacy"), Some(3), Some("g1")),
        "{t}"
    );
    let (_, plan) = get(&app, "/api/v1/plans/legacy").await;
    assert_eq!((plan["monthly_tokens"].as_i64(), plan["concurrency"].as_i64()), (Some(1000), Some(2)));
    // The next change continues the versions and the trail says where the rows came from.
    let (status, reply) = post(&app, "/api/v1/pools/legacy/weights", json!({"weights": [{"member": "OLD_A", "weight": 1}, {"member": "OLD_B", "weight": 1}], "mode": "drain", "reason": "r", "expected_version": 1})).await;
    assert_eq!((status, reply["published_version"].as_i64()), (200, Some(4)), "{reply}");
    let actions: Vec<String> = sqlx::query_scalar("select action from audit where entity = 'pool:legacy' order by id")
        .fetch_all(&app.state.db)
        .await
        .unwrap();
    assert_eq!(actions, vec!["adopt", "pool.weights"]);
}

#[tokio::test]
async fn a_restore_makes_a_new_version_equal_to_an_earlier_one_and_says_what_it_undid() {
    // Arrange: version 1, then new weights (2), caps (3), and an operator's ejection (4)
    let app = app().await;
    for code in ["A", "B"] {
        channel(&app, code, None).await;
    }
    let (status, reply) =
        put(&app, "/api/v1/pools/p", json!({"snapshot": pool_body(&[("A", 5), ("B", 3)]), "expected_version": 0}))
            .await;
    assert_eq!(status, 200, "{reply}");
    let (status, reply) = post(
        &app,
        "/api/v1/pools/p/weights",
        json!({"weights": [{"member": "A", "weight": 1}, {"member": "B", "weight": 9}], "mode": "drain",
               "reason": "shift to B", "expected_version": 1}),
    )
    .await;
    assert_eq!(status, 200, "{reply}");
    let (status, reply) =
        put(&app, "/api/v1/pools/p/caps", json!({"caps": {"B": 500}, "reason": "cap B", "expected_version": 2})).await;
    assert_eq!(status, 200, "{reply}");
    let (status, reply) =
        post(&app, "/api/v1/pools/p/members/A/eject", json!({"reason": "acquirer incident", "expected_version": 3}))
            .await;
    assert_eq!(status, 200, "{reply}");
    let (_, history) = get(&app, "/api/v1/pools/p/versions").await;
    let version_one = history["versions"].as_array().unwrap().iter().find(|v| v["version"] == 1).unwrap().clone();

    // Act
    let (status, restored) =
        post(&app, "/api/v1/pools/p/restore", json!({"version": 1, "reason": "back out", "expected_version": 4})).await;

    // Assert: version 5 is version 1's configuration (the ejection stays: it is operations,
    // not configuration), published, audited naming version 1
    assert_eq!(status, 200, "{restored}");
    assert_eq!((restored["version"].as_i64(), restored["restored_from"].as_i64()), (Some(5), Some(1)), "{restored}");
    assert_eq!((restored["mode"].as_str(), restored["ejected"].clone()), (Some("drain"), json!(["A"])), "{restored}");
    let undone: Vec<(i64, String, String)> = restored["undoes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (v["version"].as_i64().unwrap(), v["action"].as_str().unwrap().into(), v["actor"].as_str().unwrap().into())
        })
        .collect();
    assert_eq!(
        undone,
        [
            (2, "pool.weights".into(), "ops-bot".into()),
            (3, "pool.caps".into(), "ops-bot".into()),
            (4, "pool.eject".into(), "ops-bot".into())
        ]
    );
    let mut expected = version_one["snapshot"].clone();
    expected["ejected"] = json!(["A"]);
    let (_, pool) = get(&app, "/api/v1/pools/p").await;
    assert_eq!(pool["version"], 5);
    assert_eq!(pool["snapshot"], expected, "the configuration equals version 1's, with today's ejection");
    let (_, history) = get(&app, "/api/v1/pools/p/versions").await;
    assert_eq!(history["versions"][0]["version"], 5);
    assert_eq!(history["versions"][0]["action"], "pool.restore_version");
    assert_eq!(history["versions"][0]["snapshot"], expected);
    let in_redis = app.state.pool_admin.snapshot(&client::pool::PoolName::parse("p").unwrap()).await.unwrap().unwrap();
    assert_eq!(Some(in_redis.version), restored["published_version"].as_u64(), "Redis has the restored version");
    let (actor, reason): (String, String) =
        sqlx::query_as("select actor, reason from audit where action = 'pool.restore_version'")
            .fetch_one(&app.state.db)
            .await
            .unwrap();
    assert_eq!((actor.as_str(), reason.as_str()), ("ops-bot", "restores configuration version 1: back out"));
}

#[tokio::test]
async fn a_restore_that_cannot_be_made_is_refused_naming_why_and_changes_nothing() {
    // Arrange: version 1 holds C; version 2 drops it; then C is disabled
    let app = app().await;
    for code in ["A", "B", "C"] {
        channel(&app, code, None).await;
    }
    put(&app, "/api/v1/pools/p", json!({"snapshot": pool_body(&[("A", 5), ("C", 3)]), "expected_version": 0})).await;
    let (status, reply) =
        put(&app, "/api/v1/pools/p", json!({"snapshot": pool_body(&[("A", 5), ("B", 3)]), "expected_version": 1}))
            .await;
    assert_eq!(status, 200, "{reply}");
    let (status, reply) =
        post(&app, "/api/v1/channels/C/disable", json!({"reason": "acquirer gone", "expected_version": 1})).await;
    assert_eq!(status, 200, "{reply}");
    let before = footprint(&app).await;

    // Act + Assert
    let restore =
        |version: i64, expected: i64| json!({"version": version, "reason": "try", "expected_version": expected});
    let (status, reply) = post(&app, "/api/v1/pools/p/restore", restore(1, 2)).await;
    assert_eq!((status, reply["field"].as_str()), (422, Some("version")), "{reply}");
    assert!(reply["error"].as_str().unwrap().contains("\"C\""), "{reply}");
    let (status, reply) = post(&app, "/api/v1/pools/p/restore", restore(2, 2)).await;
    assert_eq!((status, reply["field"].as_str()), (422, Some("version")), "the current version: {reply}");
    assert_eq!(post(&app, "/api/v1/pools/p/restore", restore(9, 2)).await.0, 404);
    assert_eq!(post(&app, "/api/v1/pools/p/restore", restore(1, 1)).await.0, 409);
    assert_eq!(post(&app, "/api/v1/pools/p/restore", restore(0, 2)).await.0, 400);
    assert_eq!(post(&app, "/api/v1/pools/nope/restore", restore(1, 1)).await.0, 404);
    let (status, _) = post(&app, "/api/v1/pools/p/restore", json!({"version": 1, "expected_version": 2})).await;
    assert_eq!(status, 400, "a reason is required");
    assert_eq!(footprint(&app).await, before, "a refused restore changes nothing");

    // Once C is enabled again, version 1 can come back.
    let (status, reply) =
        post(&app, "/api/v1/channels/C/enable", json!({"reason": "back", "expected_version": 2})).await;
    assert_eq!(status, 200, "{reply}");
    let (status, reply) = post(&app, "/api/v1/pools/p/restore", restore(1, 2)).await;
    assert_eq!((status, reply["version"].as_i64()), (200, Some(3)), "{reply}");
}

#[tokio::test]
async fn plans_and_tenants_restore_an_earlier_version_as_a_new_one_and_refusals_change_nothing() {
    // Arrange: plans pro and basic; newco on pro (v1), moved to basic with 30 days kept (v2),
    // given a grant (v3); pro's limits then raised (v2)
    let app = app().await;
    for (name, tokens) in [("pro", 1000), ("basic", 100)] {
        let body = json!({"name": name, "monthly_tokens": tokens, "daily_requests": 50, "concurrency": 4});
        assert_eq!(post(&app, "/api/v1/plans", body).await.0, 201);
    }
    let newco = "/api/v1/tenants/newco";
    assert_eq!(put(&app, newco, json!({"plan": "pro", "expected_version": 0, "reason": "signed"})).await.0, 200);
    let moved = json!({"plan": "basic", "retention_days": 30, "expected_version": 1, "reason": "downgrade"});
    assert_eq!(put(&app, newco, moved).await.0, 200);
    let grant = json!({"id": "launch", "kind": "bonus", "amount": 500, "reason": "launch"});
    assert_eq!(post(&app, "/api/v1/tenants/newco/grants", grant).await.0, 201);
    let raised = json!({"monthly_tokens": 2000, "daily_requests": 50, "concurrency": 4, "expected_version": 1});
    assert_eq!(put(&app, "/api/v1/plans/pro", raised).await.0, 200);

    // Act: refusals first, then the tenant back to version 1 and pro back to version 1
    let before = footprint(&app).await;
    let refusals = [
        ("/api/v1/tenants/newco/restore", json!({"version": 3, "reason": "r", "expected_version": 3}), 422),
        ("/api/v1/tenants/newco/restore", json!({"version": 99, "reason": "r", "expected_version": 3}), 404),
        ("/api/v1/tenants/newco/restore", json!({"version": 1, "reason": "r", "expected_version": 2}), 409),
        ("/api/v1/tenants/newco/restore", json!({"version": 1, "expected_version": 3}), 400),
        ("/api/v1/tenants/nobody/restore", json!({"version": 1, "reason": "r", "expected_version": 1}), 404),
        ("/api/v1/plans/pro/restore", json!({"version": 2, "reason": "r", "expected_version": 2}), 422),
        ("/api/v1/plans/pro/restore", json!({"version": 0, "reason": "r", "expected_version": 2}), 400),
        ("/api/v1/plans/pro/restore", json!({"version": 7, "reason": "r", "expected_version": 2}), 404),
    ];
    for (path, body, status) in refusals {
        let (got, reply) = post(&app, path, body.clone()).await;
        assert_eq!(got, status, "{path} {body}: {reply}");
    }
    assert_eq!(footprint(&app).await, before, "refused restores wrote nothing");
    let (_, history) = get(&app, "/api/v1/tenants/newco/versions").await;
    let (status, tenant) = post(
        &app,
        "/api/v1/tenants/newco/restore",
        json!({"version": 1, "reason": "the downgrade was a mistake", "expected_version": 3}),
    )
    .await;
    let (status_plan, plan) = post(
        &app,
        "/api/v1/plans/pro/restore",
        json!({"version": 1, "reason": "back to the list price", "expected_version": 2}),
    )
    .await;

    // Assert
    let versions: Vec<i64> =
        history["versions"].as_array().unwrap().iter().map(|v| v["version"].as_i64().unwrap()).collect();
    assert_eq!(versions, [3, 2, 1], "{history}");
    assert_eq!(history["versions"][1]["snapshot"]["plan"], "basic", "{history}");
    assert_eq!(
        (status, tenant["restored_from"].as_i64(), tenant["version"].as_i64()),
        (200, Some(1), Some(4)),
        "{tenant}"
    );
    let undone: Vec<i64> =
        tenant["undoes"].as_array().unwrap().iter().map(|v| v["version"].as_i64().unwrap()).collect();
    assert_eq!(undone, [2, 3]);
    let (_, read) = get(&app, "/api/v1/tenants/newco").await;
    assert_eq!((read["plan"].as_str(), read["retention_days"].as_i64()), (Some("pro"), Some(62)), "{read}");
    assert_eq!(read["grants"][0]["id"], "launch", "grants keep their own lifecycle: {read}");
    assert_eq!(status_plan, 200, "{plan}");
    assert_eq!((plan["plan"]["monthly_tokens"].as_i64(), plan["plan"]["version"].as_i64()), (Some(1000), Some(3)));
    assert_eq!(plan["changes"][1]["entity"], "tenant:newco", "its tenants are republished: {plan}");
    assert_eq!(plan["undoes"][0]["version"], 2, "{plan}");
    let (_, plan_history) = get(&app, "/api/v1/plans/pro/versions").await;
    let actions: Vec<&str> =
        plan_history["versions"].as_array().unwrap().iter().map(|v| v["action"].as_str().unwrap()).collect();
    assert_eq!(actions, ["plan.restore_version", "plan.update", "plan.create"], "{plan_history}");
    let usage = app.state.quotas.usage(&client::quota::TenantId::parse("newco").unwrap()).await.unwrap();
    assert_eq!(usage.buckets.last().unwrap().amount, 1000, "Redis has pro's restored limit: {usage:?}");
    let (reason,): (String,) =
        sqlx::query_as("select reason from audit where entity = 'tenant:newco' and action = 'tenant.restore_version'")
            .fetch_one(&app.state.db)
            .await
            .unwrap();
    assert!(reason.starts_with("restores version 1: "), "{reason}");
}
