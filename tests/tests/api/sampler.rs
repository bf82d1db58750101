//! The pool sampler (list lengths, day hits, expected vs actual shares, the day rollover),
//! the daily prune, the samples endpoint, and `tessera simulate`, against a running server
//! with its own database and Redis key prefix.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, NaiveDate, TimeDelta, Utc};
use client::pool::{PoolAdmin, PoolName, Pools};
use client::Clock;
use integration::{spawn_app, TestApp};
use serde_json::Value;
use server::configuration::SampleRetention;
use server::jobs::sample_prune;
use server::samples::sampler;

/// The demo data (pools `cn-pay` and `sea-pay`, tenant `acme`, …), published to Redis as
/// the outbox delivers it.
async fn seeded_app() -> TestApp {
    let app = spawn_app().await;
    server::seed::demo_seed(&app.state.db).await.unwrap();
    let delivered = server::publish::drain_outbox(&app.state).await.unwrap();
    assert!(delivered.failed.is_empty(), "{delivered:?}");
    for pool in ["pool:cn-pay v1", "pool:sea-pay v1"] {
        assert!(delivered.published.iter().any(|p| p == pool), "{delivered:?}");
    }
    app
}

fn pool(name: &str) -> PoolName {
    PoolName::parse(name).unwrap()
}

/// Draws `n` tickets through `pools`, counting the members drawn.
async fn draw_n(pools: &Pools, name: &str, n: usize) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for _ in 0..n {
        let drawn = pools.draw(&pool(name)).await.unwrap();
        assert_eq!(drawn.source, client::pool::DrawSource::Redis);
        *counts.entry(drawn.member).or_default() += 1;
    }
    counts
}

async fn samples(app: &TestApp, name: &str, since: DateTime<Utc>) -> Vec<sampler::PoolSample> {
    server::samples::store::list_samples(&app.state.db, &pool(name), since, 100).await.unwrap().samples
}

fn assert_close(got: f64, want: f64, what: &str) {
    assert!((got - want).abs() < 1e-9, "{what}: got {got}, want {want}");
}

#[tokio::test]
async fn a_sample_records_list_length_day_hits_and_the_last_minutes_shares_against_the_weights() {
    let app = seeded_app().await;
    let now = app.state.pool_admin.now().await.unwrap();
    let earlier = now - TimeDelta::seconds(60);

    let first = sampler::run_at(&app.state, earlier).await.unwrap();
    let cn = draw_n(&app.state.pools, "cn-pay", 100).await;
    let sea = draw_n(&app.state.pools, "sea-pay", 20).await;
    let second = sampler::run_at(&app.state, now).await.unwrap();

    let both = sampler::Outcome { pools: 2, sampled: 2, unpublished: 0, failed: 0 };
    assert_eq!((first, second), (both, both));
    let taken = samples(&app, "cn-pay", earlier - TimeDelta::seconds(1)).await;
    assert_eq!(taken.len(), 2, "{taken:?}");
    let (before, after) = (&taken[0], &taken[1]);
    // Publishing put one batch of 1024 in the list; nothing has refilled it since.
    assert_eq!((before.tickets, before.standby, before.length, before.version), (1024, 0, 1024, 1));
    assert_eq!((after.tickets, after.length), (924, 924));
    assert_eq!((before.taken_at, after.taken_at), (earlier, now));
    assert_eq!(before.tiers, None);
    assert_eq!((before.window_seconds, before.draws), (None, None), "the first sample has no earlier one");
    assert_eq!((after.window_seconds, after.draws), (Some(60.0), Some(100)));
    for (member, weight) in [("ALIPAY_A", 0.45), ("WECHAT_B", 0.30), ("UNION_C", 0.25)] {
        let drawn = cn.get(member).copied().unwrap_or(0);
        let (b, a) = (&before.members[member], &after.members[member]);
        assert_eq!((b.hits, b.window_hits, b.actual_share), (0, None, None), "{member}");
        assert_eq!((a.hits, a.window_hits), (drawn, Some(drawn)), "{member}");
        assert_close(a.expected_share, weight, member);
        assert_close(a.actual_share.unwrap(), drawn as f64 / 100.0, member);
    }
    assert_eq!(after.members.len(), 3);

    // The tiers pool: each draw took a tier ticket and a channel from that tier's list.
    let taken = samples(&app, "sea-pay", earlier - TimeDelta::seconds(1)).await;
    let (before, after) = (&taken[0], &taken[1]);
    assert_eq!(after.tickets, before.tickets - 20);
    let channels =
        |s: &sampler::PoolSample| s.tiers.as_ref().unwrap().values().map(|l| l.tickets + l.standby).sum::<u64>();
    assert_eq!(channels(after), channels(before) - 20);
    assert_eq!(before.tiers.as_ref().unwrap().keys().collect::<Vec<_>>(), ["G", "N", "U"]);
    assert_eq!(after.draws, Some(20));
    for (member, weight) in [("GRAB_G1", 0.3), ("DBS_G2", 0.3), ("OCBC_N1", 0.21), ("UOB_N2", 0.09), ("SHOPEE_U1", 0.1)]
    {
        let drawn = sea.get(member).copied().unwrap_or(0);
        let a = &after.members[member];
        assert_eq!((a.hits, a.window_hits), (drawn, Some(drawn)), "{member}");
        assert_close(a.expected_share, weight, member);
        assert_close(a.actual_share.unwrap(), drawn as f64 / 20.0, member);
    }
}

#[tokio::test]
async fn a_window_across_the_pools_midnight_counts_the_old_days_last_draws_and_the_new_days_first() {
    let app = seeded_app().await;
    // cn-pay counts days in Asia/Shanghai (UTC+8): 15:59 UTC is 23:59 there.
    let t0: DateTime<Utc> = "2030-01-01T15:59:00Z".parse().unwrap();
    let clock = Clock::manual(t0);
    let admin = PoolAdmin::new(app.state.redis.clone(), app.state.keys.clone(), clock.clone());
    admin.rotate(&pool("cn-pay")).await.unwrap();
    let pools = Pools::new(app.state.redis.clone(), app.state.keys.clone(), clock.clone(), HashMap::new(), None);

    let early = draw_n(&pools, "cn-pay", 10).await;
    sampler::run_at(&app.state, t0).await.unwrap();
    clock.set(t0 + TimeDelta::seconds(30));
    let late = draw_n(&pools, "cn-pay", 6).await;
    clock.set(t0 + TimeDelta::seconds(65));
    let next_day = draw_n(&pools, "cn-pay", 8).await;
    sampler::run_at(&app.state, t0 + TimeDelta::seconds(70)).await.unwrap();

    let taken = samples(&app, "cn-pay", t0).await;
    assert_eq!(taken.len(), 2);
    let (before, after) = (&taken[0], &taken[1]);
    assert_eq!(before.day, NaiveDate::from_ymd_opt(2030, 1, 1).unwrap());
    assert_eq!(after.day, NaiveDate::from_ymd_opt(2030, 1, 2).unwrap());
    assert_eq!((after.window_seconds, after.draws), (Some(70.0), Some(14)));
    for member in ["ALIPAY_A", "WECHAT_B", "UNION_C"] {
        let n = |counts: &BTreeMap<String, u64>| counts.get(member).copied().unwrap_or(0);
        assert_eq!(before.members[member].hits, n(&early), "{member}");
        // The day counter restarted at midnight; the window still holds both sides of it.
        assert_eq!(after.members[member].hits, n(&next_day), "{member}");
        assert_eq!(after.members[member].window_hits, Some(n(&late) + n(&next_day)), "{member}");
        assert_close(after.members[member].actual_share.unwrap(), (n(&late) + n(&next_day)) as f64 / 14.0, member);
    }
}

#[tokio::test]
async fn the_prune_deletes_only_samples_older_than_the_retention_with_their_members() {
    let app = seeded_app().await;
    let now = app.state.pool_admin.now().await.unwrap();
    for age in [TimeDelta::days(8), TimeDelta::days(6), TimeDelta::zero()] {
        sampler::run_at(&app.state, now - age).await.unwrap();
    }
    let count = |table: &'static str| {
        let db = app.state.db.clone();
        async move { sqlx::query_scalar::<_, i64>(&format!("select count(*) from {table}")).fetch_one(&db).await.unwrap() }
    };
    let members = count("pool_sample_member").await;
    let oldest_members: i64 = sqlx::query_scalar(
        "select count(*) from pool_sample_member m join pool_sample s on s.id = m.sample_id where s.taken_at = $1",
    )
    .bind(now - TimeDelta::days(8))
    .fetch_one(&app.state.db)
    .await
    .unwrap();
    assert_eq!(count("pool_sample").await, 6);
    assert_eq!(oldest_members, 8, "cn-pay's 3 members and sea-pay's 5 channels");

    assert_eq!(app.state.sample_retention, SampleRetention::DEFAULT);
    assert_eq!(sample_prune::run_once(&app.state).await.unwrap(), 2);

    // The members went with their samples.
    assert_eq!((count("pool_sample").await, count("pool_sample_member").await), (4, members - oldest_members));
    let oldest: DateTime<Utc> =
        sqlx::query_scalar("select min(taken_at) from pool_sample").fetch_one(&app.state.db).await.unwrap();
    assert_eq!(oldest, now - TimeDelta::days(6));
    assert_eq!(sample_prune::run_once(&app.state).await.unwrap(), 0, "nothing more is old enough");
    // A shorter retention reaches the 6-day-old samples too.
    let five_days = SampleRetention::parse("retention_days", "5").unwrap();
    assert_eq!(server::samples::store::prune_samples(&app.state.db, five_days).await.unwrap(), 2);
    assert_eq!(count("pool_sample").await, 2);
}

#[tokio::test]
async fn the_samples_endpoint_charts_a_pool_and_refuses_bad_parameters_by_name() {
    let app = seeded_app().await;
    let now = app.state.pool_admin.now().await.unwrap();
    sampler::run_at(&app.state, now - TimeDelta::seconds(60)).await.unwrap();
    draw_n(&app.state.pools, "cn-pay", 10).await;
    sampler::run_at(&app.state, now).await.unwrap();
    let path = "/api/v1/pools/cn-pay/samples";
    let since = (now - TimeDelta::minutes(5)).to_rfc3339();

    let response = app.request(reqwest::Method::GET, path).query(&[("since", since.as_str())]).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!((body["pool"].as_str(), body["truncated"].as_bool()), (Some("cn-pay"), Some(false)));
    assert_eq!(body["members"], serde_json::json!(["ALIPAY_A", "UNION_C", "WECHAT_B"]));
    let samples = body["samples"].as_array().unwrap();
    assert_eq!(samples.len(), 2);
    assert_eq!((samples[0]["length"].as_u64(), samples[1]["length"].as_u64()), (Some(1024), Some(1014)));
    assert_eq!(samples[1]["draws"].as_u64(), Some(10));
    let alipay = &samples[1]["members"]["ALIPAY_A"];
    assert_eq!(alipay["expected_share"].as_f64(), Some(0.45));
    assert_eq!(alipay["actual_share"].as_f64(), Some(alipay["window_hits"].as_f64().unwrap() / 10.0));
    assert!(samples[0]["members"]["ALIPAY_A"]["actual_share"].is_null());

    // The newest sample only, and the page says the older one was left out.
    let response = app
        .request(reqwest::Method::GET, path)
        .query(&[("since", since.as_str()), ("limit", "1")])
        .send()
        .await
        .unwrap();
    let body: Value = response.json().await.unwrap();
    assert_eq!((body["samples"].as_array().unwrap().len(), body["truncated"].as_bool()), (1, Some(true)));
    assert_eq!(body["samples"][0]["draws"].as_u64(), Some(10));
    // Without `since`: the last hour.
    let body: Value = app.get("/api/v1/pools/cn-pay/samples").await.json().await.unwrap();
    assert_eq!(body["samples"].as_array().unwrap().len(), 2);

    for (query, field) in [
        (vec![("since", "yesterday")], "since"),
        (vec![("since", "2026-05-01 12:00")], "since"),
        (vec![("limit", "0")], "limit"),
        (vec![("limit", "10001")], "limit"),
        (vec![("until", "2026-05-01T12:00:00Z")], "until"),
    ] {
        let response = app.request(reqwest::Method::GET, path).query(&query).send().await.unwrap();
        assert_eq!(response.status(), 400, "{query:?}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["field"].as_str(), Some(field), "{query:?}: {body}");
    }
    assert_eq!(app.get("/api/v1/pools/nowhere/samples").await.status(), 404);
    let response = app.get("/api/v1/pools/bad%7Bname/samples").await;
    assert_eq!(response.status(), 400);
    assert_eq!(response.json::<Value>().await.unwrap()["field"].as_str(), Some("pool"));
}

#[tokio::test]
async fn simulate_drives_draws_and_quota_traffic_that_redis_counts() {
    let app = seeded_app().await;
    let acme = client::quota::TenantId::parse("acme").unwrap();
    let before = app.state.quotas.usage(&acme).await.unwrap();
    let args = server::simulate::SimulateArgs {
        rate: 20,
        seconds: Some(2),
        pools: vec![],
        tenants: vec![acme.clone()],
        report_every: 1,
        refill: false,
        seed: Some(1),
        fail: vec![],
    };
    let mut reports = 0;

    let totals = server::simulate::run(&app.state, &args, std::future::pending(), |_| reports += 1).await.unwrap();

    assert!(reports >= 1, "a summary every second");
    // 20 requests a second for 2 s: 40 draws over both pools, 40 reservations for acme,
    // every one answered by Redis.
    assert_eq!((totals.draws(), totals.draws_redis, totals.draw_errors), (40, 40, 0), "{totals:?}");
    assert_eq!((totals.reserves_admitted, totals.reserves_refused, totals.reserve_errors), (40, 0, 0), "{totals:?}");
    assert_eq!(totals.settled + totals.released + totals.left_to_expire, 40, "{totals:?}");
    assert_eq!(totals.finish_errors, 0, "{totals:?}");
    assert!(totals.settled > 0, "{totals:?}");

    // The pools' day counters hold every draw.
    let mut hits = 0;
    for name in ["cn-pay", "sea-pay"] {
        let snapshot = app.state.pool_admin.snapshot(&pool(name)).await.unwrap().unwrap();
        let now = app.state.pool_admin.now().await.unwrap();
        let mut days = vec![client::pool::admin::days_at(&snapshot, now - TimeDelta::seconds(5)).unwrap().today];
        days.push(client::pool::admin::days_at(&snapshot, now).unwrap().today);
        days.dedup();
        let mut conn = app.state.redis.connection().await.unwrap();
        for day in days {
            let counts: HashMap<String, u64> = redis::cmd("HGETALL")
                .arg(app.state.keys.pool_hits(name, &day.to_string()))
                .query_async(&mut conn)
                .await
                .unwrap();
            hits += counts.values().sum::<u64>();
        }
    }
    assert_eq!(hits, 40);
    // The tenant's quota moved: requests counted, tokens used, only abandoned leases open.
    let after = app.state.quotas.usage(&acme).await.unwrap();
    if after.day == before.day {
        assert_eq!(after.requests_today - before.requests_today, 40);
    }
    assert_eq!(after.leases, totals.left_to_expire);
    let used = |u: &client::quota::QuotaUsage| u.buckets.iter().map(|b| b.used).sum::<u64>();
    assert!(used(&after) > used(&before), "{after:?}");
}

#[tokio::test]
async fn after_redis_loses_a_pool_its_day_counters_come_back_from_the_last_sample() {
    let app = seeded_app().await;
    let now = app.state.pool_admin.now().await.unwrap();
    let drawn = draw_n(&app.state.pools, "cn-pay", 50).await;
    sampler::run_at(&app.state, now).await.unwrap();
    let day = samples(&app, "cn-pay", now - TimeDelta::seconds(5)).await.last().expect("a sample").day;
    let before = app.state.pool_admin.day_hits(&pool("cn-pay"), day).await.unwrap();
    assert_eq!(before.values().sum::<u64>(), 50);

    // Redis loses every key of this deployment; the reconcile republishes.
    let mut conn = app.state.redis.connection().await.unwrap();
    let keys: Vec<String> = redis::cmd("KEYS").arg(app.state.keys.scan_pattern()).query_async(&mut conn).await.unwrap();
    redis::cmd("DEL").arg(&keys).query_async::<()>(&mut conn).await.unwrap();
    server::jobs::reconcile::run_once(&app.state).await.unwrap();

    let after = app.state.pool_admin.day_hits(&pool("cn-pay"), day).await.unwrap();
    let expected: HashMap<String, u64> = drawn.into_iter().collect();
    assert_eq!(after, expected, "the day's counts as the last sample had them");
    let ttl: i64 = redis::cmd("PTTL")
        .arg(app.state.keys.pool_hits("cn-pay", &day.to_string()))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(ttl > 0, "the restored counters expire (pttl {ttl})");
}
