//! The draw log's drain (job `draw_log`): the pools' draw-log streams into Postgres, each
//! draw once and in order, the streams trimmed, the longest-run gauge, the outcome minutes
//! copied and the prune, against a server's state with its own database and Redis prefix.

use chrono::{DateTime, TimeDelta, Utc};
use client::health::{ChannelCode, OutcomeCounts};
use client::pool::PoolName;
use integration::{spawn_app, TestApp};
use server::draws::replay::Candidate;
use server::draws::store;
use server::jobs::{draw_log, sample_prune};

async fn seeded_app() -> TestApp {
    let app = spawn_app().await;
    integration::seed_demo(&app).await;
    app
}

fn pool(name: &str) -> PoolName {
    PoolName::parse(name).unwrap()
}

async fn draw_n(app: &TestApp, name: &str, n: usize) -> Vec<String> {
    let mut drawn = Vec::new();
    for _ in 0..n {
        let d = app.state.pools.draw(&pool(name)).await.unwrap();
        assert_eq!(d.source, client::pool::DrawSource::Redis);
        drawn.push(d.member);
    }
    drawn
}

async fn logged(app: &TestApp, name: &str, around: DateTime<Utc>) -> Vec<String> {
    let rows = store::load(&app.state.db, &pool(name), around - TimeDelta::hours(1), around + TimeDelta::hours(1))
        .await
        .unwrap();
    rows.iter().flat_map(|r| r.draws().map(str::to_owned).collect::<Vec<_>>()).collect()
}

async fn stream_length(app: &TestApp, name: &str) -> u64 {
    let mut conn = app.state.redis.connection().await.unwrap();
    redis::cmd("XLEN").arg(app.state.keys.pool_draw_log(name)).query_async(&mut conn).await.unwrap()
}

fn longest_run(drawn: &[String]) -> i64 {
    let (mut best, mut run) = (0, 0);
    for (i, member) in drawn.iter().enumerate() {
        run = if i > 0 && drawn[i - 1] == *member { run + 1 } else { 1 };
        best = best.max(run);
    }
    best
}

#[tokio::test]
async fn every_draw_reaches_postgres_once_in_order_and_the_gauge_holds_the_last_minutes_longest_run() {
    // Arrange: 120 draws of cn-pay
    let app = seeded_app().await;
    let mut drawn = draw_n(&app, "cn-pay", 120).await;
    assert_eq!(stream_length(&app, "cn-pay").await, 120, "one entry per draw script call");

    // Act: drain, draw 30 more, two drains at once (as while the job runs unled), another
    let now = app.state.pool_admin.now().await.unwrap();
    let first = draw_log::run_at(&app.state, now).await.unwrap();
    drawn.extend(draw_n(&app, "cn-pay", 30).await);
    let (second, twin) = tokio::join!(draw_log::run_at(&app.state, now), draw_log::run_at(&app.state, now));
    let (second, twin) = (second.unwrap(), twin.unwrap());
    let third = draw_log::run_at(&app.state, now).await.unwrap();

    // Assert: each draw once, in the order served; the stream is empty
    assert_eq!((first.entries, first.draws, first.failed), (120, 120, 0), "{first:?}");
    assert_eq!((second.draws + twin.draws, second.failed + twin.failed), (30, 0), "{second:?} {twin:?}");
    assert_eq!((third.entries, third.draws, third.rows), (0, 0, 0), "nothing drained twice: {third:?}");
    assert_eq!(logged(&app, "cn-pay", now).await, drawn);
    assert_eq!(stream_length(&app, "cn-pay").await, 0);
    let gauge = |name: &str| app.state.metrics.watch.pool_longest_run.with_label_values(&[name]).get();
    assert_eq!(gauge("cn-pay"), longest_run(&drawn));
    assert_eq!(gauge("sea-pay"), 0, "nothing drawn");
    let exported = app.state.metrics.render();
    assert!(exported.contains("tessera_pool_longest_run{pool=\"cn-pay\"}"), "{exported}");

    // Two minutes on, without draws, no run is recent any more
    draw_log::run_at(&app.state, now + TimeDelta::minutes(2)).await.unwrap();
    assert_eq!(gauge("cn-pay"), 0);
}

#[tokio::test]
async fn outcome_minutes_are_copied_and_a_late_report_updates_its_minute() {
    // Arrange: a report for ALIPAY_A this minute
    let app = seeded_app().await;
    let code = ChannelCode::parse("ALIPAY_A").unwrap();
    let counts = |ok, fail| OutcomeCounts { ok, fail, latency_ms_sum: (ok + fail) * 10, latency_count: ok + fail };
    app.state.outcomes.record_counts(&code, &counts(7, 2)).await.unwrap();
    let now = app.state.pool_admin.now().await.unwrap();

    // Act: drain, a later report (the same minute, unless the minute just ended), drain again
    let first = draw_log::run_at(&app.state, now).await.unwrap();
    app.state.outcomes.record_counts(&code, &counts(1, 1)).await.unwrap();
    let later = app.state.pool_admin.now().await.unwrap();
    draw_log::run_at(&app.state, later).await.unwrap();

    // Assert: a row per minute, the first one's counts taken again with the later report
    assert_eq!((first.draws, first.rows), (0, 0));
    assert!(first.outcome_minutes >= 1, "{first:?}");
    let rows =
        store::outcomes(&app.state.db, &["ALIPAY_A".to_owned()], now - TimeDelta::hours(1), now + TimeDelta::hours(1))
            .await
            .unwrap();
    let same_minute = now.timestamp() / 60 == later.timestamp() / 60;
    assert_eq!(rows.len(), if same_minute { 1 } else { 2 }, "{rows:?}");
    assert_eq!(rows.iter().map(|r| (r.2, r.3)).fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1)), (8, 3));
}

#[tokio::test]
async fn the_prune_deletes_draw_rows_and_outcome_minutes_older_than_the_retention() {
    // Arrange: drained draws and an outcome minute, then some of them aged 8 days
    let app = seeded_app().await;
    draw_n(&app, "cn-pay", 10).await;
    let code = ChannelCode::parse("ALIPAY_A").unwrap();
    app.state
        .outcomes
        .record_counts(&code, &OutcomeCounts { ok: 1, fail: 0, latency_ms_sum: 0, latency_count: 0 })
        .await
        .unwrap();
    let now = app.state.pool_admin.now().await.unwrap();
    draw_log::run_at(&app.state, now).await.unwrap();
    let first_drain: i64 = sqlx::query_scalar("select max(id) from draw_log").fetch_one(&app.state.db).await.unwrap();
    draw_n(&app, "cn-pay", 5).await;
    draw_log::run_at(&app.state, now).await.unwrap();
    let aged = sqlx::query("update draw_log set created_at = now() - interval '8 days' where id <= $1")
        .bind(first_drain)
        .execute(&app.state.db)
        .await
        .unwrap()
        .rows_affected();
    sqlx::query("update outcome_minute set minute = minute - interval '8 days'").execute(&app.state.db).await.unwrap();

    // Act
    let deleted = sample_prune::run_once(&app.state).await.unwrap();

    // Assert: the young row is left
    assert!(aged >= 1);
    assert_eq!(deleted, aged + 1, "the first drain's rows and the outcome minute");
    assert_eq!(logged(&app, "cn-pay", now).await.len(), 5);
}

#[tokio::test]
async fn after_redis_loses_a_pool_its_window_counters_come_back_from_the_draw_log() {
    // Arrange: ALIPAY_A may take 4 draws a day-long window; 40 draws take it to its cap
    let app = seeded_app().await;
    let lift = serde_json::json!({"reason": "direct writes in this test", "expected_version": 1});
    let (status, body) = app.send(reqwest::Method::DELETE, "/api/v1/policies/pool:cn-pay", None, lift).await;
    assert_eq!(status, 204, "{body}");
    let caps = serde_json::json!({"window_caps": {"minutes": 1440, "caps": {"ALIPAY_A": 4}}, "reason": "hold A", "expected_version": 1});
    let (status, body) = app.send(reqwest::Method::PUT, "/api/v1/pools/cn-pay/window_caps", None, caps).await;
    assert_eq!(status, 200, "{body}");
    let window = |at: DateTime<Utc>| at.timestamp_millis().div_euclid(86_400_000);
    let start = app.state.pool_admin.now().await.unwrap();
    let before = draw_n(&app, "cn-pay", 40).await;
    assert_eq!(before.iter().filter(|m| *m == "ALIPAY_A").count(), 4, "{before:?}");
    draw_log::run_at(&app.state, start).await.unwrap();

    // Act: Redis loses every key of this deployment; the reconcile republishes
    let mut conn = app.state.redis.connection().await.unwrap();
    let keys: Vec<String> = redis::cmd("KEYS").arg(app.state.keys.scan_pattern()).query_async(&mut conn).await.unwrap();
    redis::cmd("DEL").arg(&keys).query_async::<()>(&mut conn).await.unwrap();
    server::jobs::reconcile::run_once(&app.state).await.unwrap();
    let after = draw_n(&app, "cn-pay", 40).await;

    // Assert: still at its cap in this window (unless the window ended meanwhile)
    let end = app.state.pool_admin.now().await.unwrap();
    if window(start) != window(end) {
        eprintln!("the day-long window ended during the test; nothing to check");
        return;
    }
    assert_eq!(after.iter().filter(|m| *m == "ALIPAY_A").count(), 0, "{after:?}");
    let key = app.state.keys.pool_window_hits("cn-pay", &(window(start) * 86_400_000).to_string());
    let ttl: i64 = redis::cmd("PTTL").arg(&key).query_async(&mut conn).await.unwrap();
    assert!(ttl > 0, "the restored counters expire (pttl {ttl})");
}

#[tokio::test]
async fn a_replay_of_the_recorded_draws_through_the_unchanged_configuration_reproduces_the_shares_within_a_ticket_a_batch(
) {
    // Arrange: 2,500 draws of cn-pay (batches of 1,024, refilled as the refiller would),
    // drained, and outcomes for two of its channels
    let app = seeded_app().await;
    let start = app.state.pool_admin.now().await.unwrap();
    let mut recorded = Vec::new();
    for _ in 0..5 {
        recorded.extend(draw_n(&app, "cn-pay", 500).await);
        app.state.pool_admin.refill(&pool("cn-pay")).await.unwrap();
    }
    let counts = |ok, fail| OutcomeCounts { ok, fail, latency_ms_sum: 0, latency_count: 0 };
    app.state.outcomes.record_counts(&ChannelCode::parse("ALIPAY_A").unwrap(), &counts(9, 1)).await.unwrap();
    app.state.outcomes.record_counts(&ChannelCode::parse("WECHAT_B").unwrap(), &counts(1, 1)).await.unwrap();
    let now = app.state.pool_admin.now().await.unwrap();
    draw_log::run_at(&app.state, now).await.unwrap();

    // Act
    let request = server::draws::replay::ReplayRequest {
        pool: pool("cn-pay"),
        from: start - TimeDelta::minutes(1),
        to: now + TimeDelta::minutes(1),
        candidate: Candidate::Published,
        seed: 1,
        window: 100,
        bounds: None,
    };
    let report = server::draws::replay::replay(&app.state.db, &request).await.unwrap();

    // Assert
    let text = server::draws::replay::render(&report);
    eprintln!("{text}");
    assert!(text.contains("2500 draws recorded") && !text.contains(" 1 minutes"), "{text}");
    assert_eq!((report.recorded.draws, report.replayed.draws, report.refused), (2500, 2500, 0), "{report:?}");
    assert_eq!(report.config_version, Some(1));
    assert!(report.batches >= 3, "{report:?}");
    for m in &report.members {
        let recorded_here = recorded.iter().filter(|r| **r == m.member).count() as u64;
        assert_eq!(m.recorded_draws, recorded_here, "{}", m.member);
        assert!(
            m.recorded_draws.abs_diff(m.replayed_draws) <= report.batches,
            "{}: recorded {} replayed {} in {} batches",
            m.member,
            m.recorded_draws,
            m.replayed_draws,
            report.batches
        );
    }
    let alipay = report.members.iter().find(|m| m.member == "ALIPAY_A").unwrap();
    assert_eq!((alipay.success_rate, alipay.outcomes), (Some(0.9), 10));
    let union = report.members.iter().find(|m| m.member == "UNION_C").unwrap();
    assert_eq!(union.success_rate, None, "no outcomes reported");
    // Over the two channels with outcomes, weighted by their recorded shares.
    let wechat = report.members.iter().find(|m| m.member == "WECHAT_B").unwrap();
    let expected =
        (0.9 * alipay.recorded_share + 0.5 * wechat.recorded_share) / (alipay.recorded_share + wechat.recorded_share);
    assert!((report.recorded.expected_success_rate.unwrap() - expected).abs() < 1e-9, "{report:?}");
    assert!(report.recorded.longest_run >= 1 && report.replayed.longest_run >= 1);

    // A candidate that caps ALIPAY_A at 100 a day is held there, its tickets counted as cap hits
    let mut capped = app.state.pool_admin.snapshot(&pool("cn-pay")).await.unwrap().unwrap();
    capped.caps.insert("ALIPAY_A".to_owned(), 100);
    let report = server::draws::replay::replay(
        &app.state.db,
        &server::draws::replay::ReplayRequest { candidate: Candidate::Body(Box::new(capped)), ..request },
    )
    .await
    .unwrap();
    let alipay = report.members.iter().find(|m| m.member == "ALIPAY_A").unwrap();
    assert_eq!(alipay.replayed_draws, 100, "{report:?}");
    assert!(alipay.cap_hits > 0);
    assert_eq!(report.config_version, None);
}

#[tokio::test]
async fn a_replay_over_http_reports_the_recorded_period_through_the_published_pool_or_typed_weights_and_refuses_bad_input(
) {
    // Arrange: 600 draws of cn-pay, drained
    let app = seeded_app().await;
    let start = app.state.pool_admin.now().await.unwrap();
    let recorded = draw_n(&app, "cn-pay", 600).await;
    let now = app.state.pool_admin.now().await.unwrap();
    draw_log::run_at(&app.state, now).await.unwrap();
    let at = |t: DateTime<Utc>| t.to_rfc3339();
    let (from, to) = (at(start - TimeDelta::minutes(1)), at(now + TimeDelta::minutes(1)));
    let replay = |body: serde_json::Value| app.post_json("/api/v1/pools/cn-pay/replay", body);

    // Act: through the pool as published, then through typed weights
    let (status, published) = replay(serde_json::json!({"from": from, "to": to})).await;
    let (weighted_status, weighted) = replay(serde_json::json!({
        "from": from, "to": to, "window": 50, "seed": 7,
        "weights": [{"member": "ALIPAY_A", "weight": 1}, {"member": "WECHAT_B", "weight": 1}, {"member": "UNION_C", "weight": 0}]
    }))
    .await;

    // Assert: the recorded counts, and the replay through the weights given
    assert_eq!(status, 200, "{published}");
    assert_eq!((published["through"].as_str(), published["config_version"].as_u64()), (Some("published"), Some(1)));
    assert_eq!(published["recorded"]["draws"], 600);
    assert_eq!(published["replayed"]["draws"], 600);
    for m in published["members"].as_array().unwrap() {
        let name = m["member"].as_str().unwrap();
        assert_eq!(m["recorded_draws"].as_u64().unwrap(), recorded.iter().filter(|r| *r == name).count() as u64);
    }
    assert_eq!(weighted_status, 200, "{weighted}");
    assert_eq!((weighted["through"].as_str(), weighted["window"].as_u64()), (Some("weights"), Some(50)));
    let member =
        |name: &str| weighted["members"].as_array().unwrap().iter().find(|m| m["member"] == name).cloned().unwrap();
    assert_eq!(member("ALIPAY_A")["replayed_draws"], 300, "{weighted}");
    assert_eq!(member("WECHAT_B")["replayed_draws"], 300, "{weighted}");
    assert_eq!(member("UNION_C")["replayed_draws"], 0, "{weighted}");
    assert_eq!(member("UNION_C")["expected_share"], 0.0);
    assert!(member("UNION_C")["recorded_draws"].as_u64().unwrap() > 0, "what happened is still reported");

    // Bad input, each refused naming its field, and nothing written
    let newest_audit = || async { app.get_json("/api/v1/audit?limit=1").await.1["rows"][0]["id"].clone() };
    let audit_before = newest_audit().await;
    assert!(audit_before.is_i64(), "the seed wrote audit rows");
    let (_, detail) = app.get_json("/api/v1/pools/cn-pay").await;
    let mut zero_batch = detail["snapshot"].clone();
    zero_batch["batch_size"] = 0.into();
    let mut overlapping = detail["snapshot"].clone();
    overlapping["peak_windows"] = serde_json::json!([
        {"start": "10:00", "end": "12:00", "multiplier": 2},
        {"start": "11:00", "end": "13:00", "multiplier": 2}
    ]);
    let refusals = [
        (serde_json::json!({"from": "yesterday", "to": to}), 400, "from"),
        (serde_json::json!({"from": to, "to": from}), 422, "to"),
        (serde_json::json!({"from": from, "to": to, "window": 0}), 422, "window"),
        (serde_json::json!({"from": from, "to": to, "seed": 9007199254740992_u64}), 400, "seed"),
        (
            serde_json::json!({"from": from, "to": to, "weights": [{"member": "A", "weight": 1}], "candidate": detail["snapshot"]}),
            422,
            "candidate",
        ),
        (serde_json::json!({"from": from, "to": to, "candidate": zero_batch}), 422, "candidate.batch_size"),
        (serde_json::json!({"from": from, "to": to, "candidate": overlapping}), 422, "candidate.peak_windows"),
        (
            serde_json::json!({"from": at(start - TimeDelta::days(2)), "to": at(start - TimeDelta::days(1))}),
            422,
            "from",
        ),
    ];
    for (body, want, field) in refusals {
        let (status, reply) = replay(body.clone()).await;
        assert_eq!((status, reply["field"].as_str()), (want, Some(field)), "{body} → {reply}");
    }
    // An empty period says when the log last took the pool's draws (a replay of the last
    // seconds finds nothing until the next drain).
    let empty = serde_json::json!({"from": at(start - TimeDelta::days(2)), "to": at(start - TimeDelta::days(1))});
    let (_, reply) = replay(empty).await;
    let rule = reply["rule"].as_str().unwrap_or_default();
    assert!(rule.contains("were last copied from Redis at 20") && rule.contains("every 10 s"), "{reply}");
    let tiers_body = serde_json::json!({"from": from, "to": to, "weights": [{"member": "X", "weight": 1}]});
    let (status, reply) = app.post_json("/api/v1/pools/sea-pay/replay", tiers_body).await;
    assert_eq!((status, reply["field"].as_str()), (422, Some("weights")), "a tiers pool's weights are tiers: {reply}");
    let (status, reply) = app.post_json("/api/v1/pools/nope/replay", serde_json::json!({"from": from, "to": to})).await;
    assert_eq!(status, 404, "{reply}");
    assert_eq!(newest_audit().await, audit_before, "a replay writes nothing");
    let (_, after) = app.get_json("/api/v1/pools/cn-pay").await;
    assert_eq!((&after["version"], &after["published_version"]), (&detail["version"], &detail["published_version"]));

    // A period holding more draws than the bound is refused before it is read
    let request = server::draws::replay::ReplayRequest {
        pool: pool("cn-pay"),
        from: start - TimeDelta::minutes(1),
        to: now + TimeDelta::minutes(1),
        candidate: Candidate::Published,
        seed: 1,
        window: 100,
        bounds: Some(server::draws::replay::Bounds { draws: 599, steps: u64::MAX }),
    };
    let refused = server::draws::replay::replay(&app.state.db, &request).await.unwrap_err().to_string();
    assert!(refused.starts_with("to: the period holds 600 recorded draws, more than the 599"), "{refused}");
    // So is one that would take more of the engine's steps than its bound
    let bounds = Some(server::draws::replay::Bounds { draws: u64::MAX, steps: 1_000 });
    let refused =
        server::draws::replay::replay(&app.state.db, &server::draws::replay::ReplayRequest { bounds, ..request })
            .await
            .unwrap_err()
            .to_string();
    assert!(refused.starts_with("to: the replay takes more than 1000 steps"), "{refused}");
}
