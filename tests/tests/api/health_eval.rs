//! Channel health against real Postgres and Redis: outcomes recorded under a hand-set
//! clock, the evaluation job called through `run_once` at the same instants.

use chrono::{DateTime, Duration, TimeZone, Utc};
use integration::{spawn_app_with, TestApp};
use serde_json::{json, Value};
use server::configuration::AdminAccess;

const TOKEN: &str = "health-admin-token-0123456789";

struct Bench {
    app: TestApp,
    clock: client::Clock,
    outcomes: client::Outcomes,
}

/// An instant on a minute boundary, far from now, so nothing else writes there.
fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2031, 3, 4, 5, 0, 0).unwrap()
}

async fn bench() -> Bench {
    let app = spawn_app_with(|s| {
        s.admin = Some(AdminAccess { token: TOKEN.to_owned().into(), actor: "ops-bot".into() });
        s.auth.open = false;
    })
    .await;
    let clock = client::Clock::manual(t0());
    let outcomes = client::Outcomes::new(app.state.redis.clone(), app.state.keys.clone(), clock.clone(), None);
    Bench { app, clock, outcomes }
}

/// Registers the channels and a pool of them (weights as given).
async fn pool(b: &Bench, name: &str, members: &[(&str, u64)]) {
    for (code, _) in members {
        b.app
            .send(
                reqwest::Method::POST,
                "/api/v1/channels",
                Some(TOKEN),
                json!({"code": code, "name": code, "base_weight": 1}),
            )
            .await;
    }
    let weights: Vec<Value> = members.iter().map(|(m, w)| json!({"member": m, "weight": w})).collect();
    let (status, reply) = b
        .app
        .send(
            reqwest::Method::PUT,
            &format!("/api/v1/pools/{name}"),
            Some(TOKEN),
            json!({
                "snapshot": {"kind": "channels", "ordering": "smooth", "batch_size": 100, "low_water": 10,
                             "timezone": "UTC", "eject_rebuild_percent": 90, "weights": weights},
                "expected_version": 0,
            }),
        )
        .await;
    assert_eq!(status, 200, "{reply}");
}

/// Records `ok` successes and `fail` failures for a channel at `at`.
async fn report(b: &Bench, channel: &str, ok: u64, fail: u64, at: DateTime<Utc>) {
    b.clock.set(at);
    let code = client::health::ChannelCode::parse(channel).unwrap();
    let counts = client::health::OutcomeCounts { ok, fail, latency_ms_sum: (ok + fail) * 20, latency_count: ok + fail };
    b.outcomes.record_counts(&code, &counts).await.unwrap();
}

async fn evaluate(b: &Bench, at: DateTime<Utc>) -> server::health::Report {
    server::health::run_once(&b.app.state, at).await.unwrap()
}

async fn member(b: &Bench, pool: &str, channel: &str) -> Value {
    let (status, health) =
        b.app.send(reqwest::Method::GET, &format!("/api/v1/pools/{pool}/health"), Some(TOKEN), Value::Null).await;
    assert_eq!(status, 200, "{health}");
    health["members"].as_array().unwrap().iter().find(|m| m["channel"] == channel).cloned().unwrap()
}

fn state_factor(m: &Value) -> (String, f64) {
    (m["state"].as_str().unwrap().to_owned(), m["factor"].as_f64().unwrap())
}

#[tokio::test]
async fn a_failing_channel_decays_per_cool_down_is_ejected_and_recovers_with_a_slow_start() {
    let b = bench().await;
    pool(&b, "h", &[("A", 50), ("B", 50)]).await;
    let minute = |n: i64| t0() + Duration::minutes(n);

    // Two failing windows: 0.5, then 0.25 — and not faster than the cool-down.
    report(&b, "A", 20, 80, minute(0)).await;
    report(&b, "B", 100, 0, minute(0)).await;
    let first = evaluate(&b, minute(0) + Duration::seconds(10)).await;
    assert_eq!(first.republished, vec!["pool:h"], "{first:?}");
    assert_eq!(state_factor(&member(&b, "h", "A").await), ("decaying".into(), 0.5));
    assert_eq!(member(&b, "h", "A").await["effective_weight"], 25);
    report(&b, "A", 20, 80, minute(0) + Duration::seconds(40)).await;
    let early = evaluate(&b, minute(0) + Duration::seconds(50)).await;
    assert!(early.changes.is_empty(), "within the cool-down: {early:?}");
    assert_eq!(member(&b, "h", "A").await["factor"], 0.5);
    report(&b, "A", 20, 80, minute(1)).await;
    evaluate(&b, minute(1) + Duration::seconds(10)).await;
    assert_eq!(state_factor(&member(&b, "h", "A").await), ("decaying".into(), 0.25));

    // Healthy B is judged and left alone; the published pool carries A's decayed weight.
    let (_, read) = b.app.send(reqwest::Method::GET, "/api/v1/pools/h", Some(TOKEN), Value::Null).await;
    assert_eq!(read["published"]["weights"], json!([{"member": "A", "weight": 13}, {"member": "B", "weight": 50}]));
    assert_eq!(read["snapshot"]["weights"][0]["weight"], 50, "the configured weight is untouched");

    // 0.125, then below 10%: ejected (50% of the pool: the cap allows it), pool rebuilt.
    report(&b, "A", 20, 80, minute(2)).await;
    evaluate(&b, minute(2) + Duration::seconds(10)).await;
    report(&b, "A", 20, 80, minute(3)).await;
    let ejection = evaluate(&b, minute(3) + Duration::seconds(10)).await;
    assert_eq!(state_factor(&member(&b, "h", "A").await), ("ejected".into(), 0.0));
    assert_eq!(ejection.rebuilt, vec!["h"], "{ejection:?}");
    let name = client::pool::PoolName::parse("h").unwrap();
    for _ in 0..60 {
        assert_eq!(b.app.state.pools.draw(&name).await.unwrap().member, "B", "an ejected channel is not drawn");
    }

    // Every transition has an audit row with source `health` and the rates as the reason.
    let rows: Vec<(String, String, Option<String>)> = sqlx::query_as(
        "select actor, action, reason from audit where source = 'health' and entity = 'pool:h' order by id",
    )
    .fetch_all(&b.app.state.db)
    .await
    .unwrap();
    assert_eq!(rows.len(), 4, "{rows:?}");
    assert!(rows.iter().all(|r| r.0 == "health" && r.1 == "pool.health"));
    assert!(rows[0].2.as_deref().unwrap().contains("success 20.0% of 100"), "{rows:?}");

    // Quiet for a minute after the last failing window: recovery starts at 10% and ramps
    // linearly over the slow start (2 min) back to the base weight.
    evaluate(&b, minute(4) + Duration::seconds(5)).await;
    assert_eq!(member(&b, "h", "A").await["state"], "ejected", "not quiet long enough yet");
    evaluate(&b, minute(4) + Duration::seconds(10)).await;
    assert_eq!(state_factor(&member(&b, "h", "A").await), ("recovering".into(), 0.1));
    evaluate(&b, minute(4) + Duration::seconds(40)).await;
    let quarter = member(&b, "h", "A").await["factor"].as_f64().unwrap();
    assert!((quarter - (0.1 + 0.9 * 0.25)).abs() < 1e-9, "{quarter}");
    evaluate(&b, minute(5) + Duration::seconds(10)).await;
    let half = member(&b, "h", "A").await["factor"].as_f64().unwrap();
    assert!((half - 0.55).abs() < 1e-9, "{half}");

    // A relapse during recovery: decaying again, from where the ramp was.
    report(&b, "A", 10, 90, minute(5) + Duration::seconds(20)).await;
    evaluate(&b, minute(5) + Duration::seconds(30)).await;
    let (state, factor) = state_factor(&member(&b, "h", "A").await);
    assert_eq!(state, "decaying");
    assert!((factor - 0.55 * 0.5).abs() < 1e-9, "the factor the ramp had reached, halved: {factor}");

    // The history holds every transition, newest first.
    let (status, history) =
        b.app.send(reqwest::Method::GET, "/api/v1/channels/A/health/history", Some(TOKEN), Value::Null).await;
    assert_eq!(status, 200);
    let to: Vec<&str> = history["transitions"].as_array().unwrap().iter().map(|t| t["to"].as_str().unwrap()).collect();
    assert_eq!(&to[..4], &["decaying", "recovering", "recovering", "recovering"], "{history}");
    assert!(to.contains(&"ejected"));
}

#[tokio::test]
async fn with_three_channels_failing_ejection_stops_at_the_cap_and_says_so() {
    let b = bench().await;
    pool(&b, "cap", &[("A", 30), ("B", 30), ("C", 30), ("D", 10)]).await;
    let minute = |n: i64| t0() + Duration::minutes(n);
    for n in 0..4 {
        for channel in ["A", "B", "C"] {
            report(&b, channel, 10, 90, minute(n)).await;
        }
        report(&b, "D", 100, 0, minute(n)).await;
        evaluate(&b, minute(n) + Duration::seconds(10)).await;
    }
    let (_, health) = b.app.send(reqwest::Method::GET, "/api/v1/pools/cap/health", Some(TOKEN), Value::Null).await;
    let states: Vec<(String, bool, u64)> = health["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["state"].as_str().unwrap().to_owned(),
                m["cap_bound"].as_bool().unwrap(),
                m["effective_weight"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        states,
        vec![
            ("ejected".into(), false, 0),
            ("decaying".into(), true, 3),
            ("decaying".into(), true, 3),
            ("healthy".into(), false, 10)
        ],
        "{health}"
    );
    assert_eq!((health["cap"]["bound"].as_bool(), health["cap"]["ejected_percent"].as_f64()), (Some(true), Some(30.0)));
    let reason = health["members"][1]["last_reason"].as_str().unwrap();
    assert!(reason.contains("cap"), "{reason}");
}

#[tokio::test]
async fn low_volume_decides_nothing_and_pins_are_respected() {
    let b = bench().await;
    pool(&b, "p", &[("A", 50), ("B", 50)]).await;
    report(&b, "A", 1, 9, t0()).await;
    let report_ = evaluate(&b, t0() + Duration::seconds(10)).await;
    assert!(report_.changes.is_empty(), "{report_:?}");
    assert_eq!(member(&b, "p", "A").await["success_rate"], Value::Null, "too few outcomes to judge");

    // Pinned healthy: failing windows change nothing.
    let (status, reply) = b
        .app
        .send(reqwest::Method::POST, "/api/v1/channels/A/health/pin", Some(TOKEN), json!({"state": "healthy"}))
        .await;
    assert_eq!((status, reply["field"].as_str()), (400, Some("reason")));
    let (status, reply) = b
        .app
        .send(
            reqwest::Method::POST,
            "/api/v1/channels/A/health/pin",
            Some(TOKEN),
            json!({"state": "healthy", "reason": "known flaky probe"}),
        )
        .await;
    assert_eq!(status, 200, "{reply}");
    for n in 0..3 {
        let at = t0() + Duration::minutes(n + 1);
        report(&b, "A", 0, 100, at).await;
        evaluate(&b, at + Duration::seconds(10)).await;
    }
    assert_eq!(state_factor(&member(&b, "p", "A").await), ("healthy".into(), 1.0));
    assert_eq!(member(&b, "p", "A").await["pinned"], "healthy");

    // Pinned ejected: out of the published pool at once, whatever the outcomes.
    let (status, reply) = b
        .app
        .send(
            reqwest::Method::POST,
            "/api/v1/channels/B/health/pin",
            Some(TOKEN),
            json!({"state": "ejected", "reason": "maintenance"}),
        )
        .await;
    assert_eq!(status, 200, "{reply}");
    let (_, read) = b.app.send(reqwest::Method::GET, "/api/v1/pools/p", Some(TOKEN), Value::Null).await;
    assert_eq!(read["published"]["ejected"], json!(["B"]), "{read}");
    let (status, again) = b
        .app
        .send(
            reqwest::Method::POST,
            "/api/v1/channels/B/health/pin",
            Some(TOKEN),
            json!({"state": "ejected", "reason": "again"}),
        )
        .await;
    assert_eq!((status, again["field"].as_str()), (422, Some("state")));
    let (status, _) = b
        .app
        .send(reqwest::Method::POST, "/api/v1/channels/B/health/unpin", Some(TOKEN), json!({"reason": "done"}))
        .await;
    assert_eq!(status, 200);
    let (_, read) = b.app.send(reqwest::Method::GET, "/api/v1/pools/p", Some(TOKEN), Value::Null).await;
    assert_eq!(read["published"].get("ejected"), None, "{read}");

    // Thresholds per pool, validated.
    let (status, reply) = b
        .app
        .send(
            reqwest::Method::PUT,
            "/api/v1/pools/p/health_policy",
            Some(TOKEN),
            json!({"policy": {"decay_factor": 2}, "reason": "r"}),
        )
        .await;
    assert_eq!((status, reply["field"].as_str()), (422, Some("health_policy.decay_factor")), "{reply}");
    let (status, reply) = b
        .app
        .send(
            reqwest::Method::PUT,
            "/api/v1/pools/p/health_policy",
            Some(TOKEN),
            json!({"policy": {"min_volume": 5}, "reason": "small pool"}),
        )
        .await;
    assert_eq!(status, 200, "{reply}");
    let (_, channel) = b.app.send(reqwest::Method::GET, "/api/v1/channels/A/health", Some(TOKEN), Value::Null).await;
    assert_eq!(channel["pin"]["state"], "healthy");
    assert_eq!(channel["pools"][0]["pool"], "p");
}

#[tokio::test]
async fn in_a_tiers_pool_the_cap_counts_each_channels_share_of_the_traffic() {
    let b = bench().await;
    for (code, tier) in [("G1", "G"), ("G2", "G"), ("N1", "N")] {
        b.app
            .send(
                reqwest::Method::POST,
                "/api/v1/channels",
                Some(TOKEN),
                json!({"code": code, "name": code, "tier": tier, "base_weight": 1}),
            )
            .await;
    }
    // Tier G carries 60% of the traffic, split evenly: each G channel is 30%.
    let (status, reply) = b.app.send(reqwest::Method::PUT, "/api/v1/pools/t", Some(TOKEN), json!({
        "snapshot": {"kind": "tiers", "ordering": "smooth", "batch_size": 100, "low_water": 10, "timezone": "UTC",
                     "eject_rebuild_percent": 90,
                     "weights": [{"member": "G", "weight": 60}, {"member": "N", "weight": 40}],
                     "tiers": {"G": [{"member": "G1", "weight": 1}, {"member": "G2", "weight": 1}], "N": [{"member": "N1", "weight": 1}]}},
        "expected_version": 0,
    })).await;
    assert_eq!(status, 200, "{reply}");
    for n in 0..4 {
        let at = t0() + Duration::minutes(n);
        report(&b, "G1", 0, 100, at).await;
        report(&b, "G2", 0, 100, at).await;
        report(&b, "N1", 100, 0, at).await;
        evaluate(&b, at + Duration::seconds(10)).await;
    }
    let g1 = member(&b, "t", "G1").await;
    let g2 = member(&b, "t", "G2").await;
    assert_eq!(
        (g1["state"].as_str(), g2["state"].as_str(), g2["cap_bound"].as_bool()),
        (Some("ejected"), Some("decaying"), Some(true)),
        "30% may go, a second 30% may not: {g1} {g2}"
    );
}

#[tokio::test]
async fn a_decay_reaches_the_draws_at_once_not_after_the_batches_already_built() {
    let b = bench().await;
    pool(&b, "d", &[("A", 50), ("B", 50)]).await;
    let name = client::pool::PoolName::parse("d").unwrap();
    // Mid-batch: the list and the standby batch hold about 170 tickets at A's full share.
    for _ in 0..30 {
        b.app.state.pools.draw(&name).await.unwrap();
    }

    // A decays to half: 25 against B's 50, a third of the draws from now on.
    report(&b, "A", 20, 80, t0()).await;
    report(&b, "B", 100, 0, t0()).await;
    let decay = evaluate(&b, t0() + Duration::seconds(10)).await;
    assert_eq!(state_factor(&member(&b, "d", "A").await), ("decaying".into(), 0.5));
    assert_eq!(decay.rebuilt, vec!["d"], "{decay:?}");

    let mut a = 0;
    for _ in 0..300 {
        if b.app.state.pools.draw(&name).await.unwrap().member == "A" {
            a += 1;
        }
    }
    let share = f64::from(a) / 300.0;
    assert!(
        (share - 1.0 / 3.0).abs() <= 0.02,
        "A took {a} of the next 300 draws ({:.1} %), not a third",
        share * 100.0
    );
}
