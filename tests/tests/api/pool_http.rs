//! The draw endpoint, the refill and rotation jobs, and the demo data published to Redis,
//! against a running server with its own database and Redis key prefix.

use std::collections::HashMap;

use client::pool::{PoolName, PoolSnapshot};
use engine::{Ordering, Weights};
use integration::{spawn_app, TestApp};
use serde_json::{json, Value};

async fn draw(app: &TestApp, pool: &str) -> (u16, Value) {
    app.post_json(&format!("/api/v1/pools/{pool}/draw"), Value::Null).await
}

fn small_pool(version: u64) -> PoolSnapshot {
    PoolSnapshot {
        version,
        kind: Default::default(),
        weights: Weights::from_integers([("A", 3u64), ("B", 1)]).unwrap(),
        tiers: Default::default(),
        batch_size: 20,
        low_water: 5,
        ordering: Ordering::Smooth,
        timezone: "Asia/Singapore".into(),
        peak_windows: vec![],
        caps: Default::default(),
        eject_rebuild_percent: 50,
        ejected: Default::default(),
        window_caps: None,
        draw_log: true,
    }
}

#[tokio::test]
async fn the_demo_pool_is_published_and_drawn_over_http_by_its_weights() {
    let app = spawn_app().await;
    server::seed::demo_seed(&app.state.db).await.unwrap();
    let delivered = server::publish::drain_outbox(&app.state).await.unwrap();
    assert_eq!(delivered.published, vec!["pool:cn-pay v1", "pool:sea-pay v1", "tenant:acme v2", "tenant:globex v1"]);

    let mut counts: HashMap<String, u32> = HashMap::new();
    for _ in 0..100 {
        let (status, body) = draw(&app, "cn-pay").await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(
            (body["pool"].as_str(), body["version"].as_u64(), body["source"].as_str()),
            (Some("cn-pay"), Some(1), Some("redis"))
        );
        *counts.entry(body["member"].as_str().unwrap().to_owned()).or_default() += 1;
    }
    // A smooth batch keeps every prefix within a ticket or two of the shares 45/30/25.
    for (member, share) in [("ALIPAY_A", 45), ("WECHAT_B", 30), ("UNION_C", 25)] {
        let got = counts.get(member).copied().unwrap_or(0) as i64;
        assert!((got - share).abs() <= 2, "{member}: {got} of 100, {counts:?}");
    }
    // The tiers pool answers with the tier that served each draw.
    let (status, body) = draw(&app, "sea-pay").await;
    assert_eq!(status, 200, "{body}");
    assert!(["G", "N", "U"].contains(&body["tier"].as_str().unwrap()), "{body}");

    // The demo tenant is there too.
    let usage = app.get("/api/v1/tenants/acme/quota").await;
    assert_eq!(usage.status(), 200);
}

#[tokio::test]
async fn an_unknown_pool_is_404_and_a_malformed_name_400() {
    let app = spawn_app().await;
    assert_eq!(draw(&app, "nowhere").await.0, 404);
    let (status, body) = draw(&app, "bad%7Bname").await;
    assert_eq!((status, body["field"].as_str()), (400, Some("pool")));
}

#[tokio::test]
async fn the_refill_job_tops_up_a_pool_below_low_water_and_the_rotation_job_keeps_its_days() {
    let app = spawn_app().await;
    let pool = PoolName::parse("small").unwrap();
    configure_small_pool(&app).await;
    // A pool only Redis holds (no configuration row): the jobs work on the pools Postgres
    // knows and leave it alone, where a scan of the keyspace would have refilled it.
    let stray = PoolName::parse("stray").unwrap();
    app.state.pool_admin.publish(&stray, &small_pool(1)).await.unwrap();
    for _ in 0..16 {
        assert_eq!(draw(&app, "stray").await.0, 200);
    }
    // Publishing filled the list with one batch; the job adds the standby batch.
    let first = server::jobs::pool_refill::run_once(&app.state).await.unwrap();
    assert_eq!((first.batches, first.tickets), (1, 20));
    assert_eq!(app.state.pool_admin.length(&pool).await.unwrap(), 20);

    for _ in 0..16 {
        assert_eq!(draw(&app, "small").await.0, 200);
    }
    assert_eq!(app.state.pool_admin.length(&pool).await.unwrap(), 4);
    assert!(app.state.pool_admin.refill_flagged(&pool).await.unwrap());

    let outcome = server::jobs::pool_refill::run_once(&app.state).await.unwrap();
    assert_eq!((outcome.batches, outcome.tickets), (1, 20));
    assert_eq!(app.state.pool_admin.length(&pool).await.unwrap(), 24);
    assert!(!app.state.pool_admin.refill_flagged(&pool).await.unwrap());
    let metrics = app.get("/metrics").await.text().await.unwrap();
    assert!(metrics.contains(r#"tessera_pool_refills_total{mode="append",pool="small"} 1"#), "{metrics}");
    assert!(metrics.contains(r#"tessera_pool_draws_total{member="A",pool="small",source="redis"}"#), "{metrics}");

    assert_eq!(server::jobs::pool_rotation::run_once(&app.state).await.unwrap(), 1);
    assert_eq!(app.state.pool_admin.length(&stray).await.unwrap(), 4, "a pool Postgres does not know is not refilled");
    // Every refill call is timed (a batch added or nothing needed: two calls a run here),
    // and a failing one counted per pool: a list key of the wrong type fails the next.
    assert!(metrics.contains(r#"tessera_pool_refill_seconds_count{pool="small"} 4"#), "{metrics}");
    assert!(metrics.contains(r#"tessera_pool_refill_failures_total{pool="small"} 0"#), "{metrics}");
    let mut conn = app.state.redis.connection().await.unwrap();
    let () = redis::cmd("SET").arg(app.state.keys.pool_tickets("small")).arg("x").query_async(&mut conn).await.unwrap();
    server::jobs::pool_refill::run_once(&app.state).await.unwrap();
    let metrics = app.get("/metrics").await.text().await.unwrap();
    assert!(metrics.contains(r#"tessera_pool_refill_failures_total{pool="small"} 1"#), "{metrics}");
}

/// Creates the pool `small` (members A and B, 3:1, batches of 20, low-water 5) through the
/// API, and publishes it.
async fn configure_small_pool(app: &TestApp) {
    for code in ["A", "B"] {
        let (status, body) = app
            .send(
                reqwest::Method::POST,
                "/api/v1/channels",
                None,
                json!({"code": code, "name": code, "base_weight": 1}),
            )
            .await;
        assert_eq!(status, 201, "{body}");
    }
    let snapshot = json!({"kind": "channels", "ordering": "smooth", "batch_size": 20, "low_water": 5,
        "timezone": "Asia/Singapore", "weights": [{"member": "A", "weight": 3}, {"member": "B", "weight": 1}],
        "eject_rebuild_percent": 50});
    let (status, body) = app
        .send(reqwest::Method::PUT, "/api/v1/pools/small", None, json!({"snapshot": snapshot, "expected_version": 0}))
        .await;
    assert_eq!(status, 200, "{body}");
    server::publish::drain_outbox(&app.state).await.unwrap();
}

#[tokio::test]
async fn a_malformed_draw_body_is_400_not_an_ordinary_draw() {
    let app = spawn_app().await;
    let pool = PoolName::parse("small").unwrap();
    app.state.pool_admin.publish(&pool, &small_pool(1)).await.unwrap();
    for body in [r#"{"sticky_key": 123}"#, r#"{"stikcy_key": "u1"}"#, "not json"] {
        let response = app
            .request(reqwest::Method::POST, "/api/v1/pools/small/draw")
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 400, "{body}");
    }
    let sticky = app
        .request(reqwest::Method::POST, "/api/v1/pools/small/draw")
        .json(&serde_json::json!({"sticky_key": "user-42"}))
        .send()
        .await
        .unwrap();
    assert_eq!(sticky.status(), 200);
}

#[tokio::test]
async fn with_ticket_leases_draws_are_served_ahead_and_a_stopped_server_gives_back_what_it_held() {
    // Arrange: a server leasing up to 16 tickets ahead (held long), its refill job held by
    // the test; a pool of two batches of 100 in Redis (the list and the standby batch)
    let app = integration::spawn_app_with(|s| {
        s.ticket_leases = Some(client::pool::LeaseSettings { max: 16, hold: std::time::Duration::from_secs(60) })
    })
    .await;
    let _jobs = integration::hold_jobs(&app, &["pool_refill"]).await;
    let pool = PoolName::parse("leased").unwrap();
    let admin = &app.state.pool_admin;
    admin.publish(&pool, &PoolSnapshot { batch_size: 100, ..small_pool(1) }).await.unwrap();
    admin.refill(&pool).await.unwrap();
    let in_redis = || async {
        let standby: u64 = redis::cmd("LLEN")
            .arg(app.state.keys.pool_standby("leased"))
            .query_async(&mut app.state.redis.connection().await.unwrap())
            .await
            .unwrap();
        admin.length(&pool).await.unwrap() + standby
    };
    assert_eq!(in_redis().await, 200);

    // Act: 60 draws over HTTP, six at a time; then the server stops
    let mut served = Vec::new();
    for _ in 0..10 {
        let replies = futures::future::join_all((0..6).map(|_| draw(&app, "leased"))).await;
        for (status, body) in replies {
            assert_eq!((status, body["source"].as_str()), (200, Some("redis")), "{body}");
            served.push(body["member"].as_str().unwrap().to_owned());
        }
    }
    let leased = app.state.pools.leased_draws();
    app.stop_server().await;
    for _ in 0..500 {
        if app.state.pools.tickets_leased() == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }

    // Assert: draws were served from leases, and what the server held is back in Redis
    assert!(leased > 0, "no draw was served from a lease");
    assert_eq!(app.state.pools.tickets_leased(), 0, "the stopped server still holds tickets");
    assert_eq!(in_redis().await + served.len() as u64, 200);
}

/// A tiers pool `capped` over HTTP: channels G1, G2 (tier G 60) and N1 (tier N 40), batches
/// of 100; its configuration version.
async fn capped_tiers_pool(app: &TestApp) -> i64 {
    for (code, tier) in [("G1", "G"), ("G2", "G"), ("N1", "N")] {
        let (status, reply) = app
            .send(
                reqwest::Method::POST,
                "/api/v1/channels",
                None,
                json!({"code": code, "name": code, "tier": tier, "base_weight": 1}),
            )
            .await;
        assert_eq!(status, 201, "{reply}");
    }
    let (status, reply) = app
        .send(
            reqwest::Method::PUT,
            "/api/v1/pools/capped",
            None,
            json!({
                "snapshot": {"kind": "tiers", "ordering": "smooth", "batch_size": 100, "low_water": 20, "timezone": "UTC",
                             "eject_rebuild_percent": 90,
                             "weights": [{"member": "G", "weight": 60}, {"member": "N", "weight": 40}],
                             "tiers": {"G": [{"member": "G1", "weight": 1}, {"member": "G2", "weight": 1}],
                                       "N": [{"member": "N1", "weight": 1}]}},
                "expected_version": 0,
            }),
        )
        .await;
    assert_eq!(status, 200, "{reply}");
    reply["version"].as_i64().expect("a version")
}

#[tokio::test]
async fn a_tiers_pool_whose_n_channel_is_capped_serves_every_draw_from_g() {
    for (path, body) in [
        ("caps", json!({"caps": {"N1": 5}})),
        // The longest window (a day, epoch-aligned): the test does not cross it.
        ("window_caps", json!({"window_caps": {"minutes": 1440, "caps": {"N1": 5}}})),
    ] {
        // Arrange
        let app = spawn_app().await;
        let version = capped_tiers_pool(&app).await;
        let mut body = body;
        body["reason"] = json!("N1's contract allows 5 a day");
        body["expected_version"] = json!(version);
        let (status, reply) = app.send(reqwest::Method::PUT, &format!("/api/v1/pools/capped/{path}"), None, body).await;
        assert_eq!(status, 200, "{path}: {reply}");

        // Act
        let mut channels: HashMap<String, u64> = HashMap::new();
        let mut refused = Vec::new();
        for _ in 0..200 {
            match draw(&app, "capped").await {
                (200, reply) => *channels.entry(reply["member"].as_str().unwrap().to_owned()).or_default() += 1,
                (status, reply) => refused.push(format!("{status} {reply}")),
            }
        }

        // Assert: none refused, N1 exactly at its cap.
        assert_eq!(refused, Vec::<String>::new(), "{path}");
        assert_eq!(channels.get("N1"), Some(&5), "{path}: {channels:?}");
        assert_eq!(channels.values().sum::<u64>(), 200, "{path}: {channels:?}");
    }
}

#[tokio::test]
async fn a_draw_refused_is_counted_by_pool_and_reason_and_a_name_never_seen_adds_no_series() {
    let app = spawn_app().await;
    for code in ["A", "B"] {
        let body = json!({"code": code, "name": code, "base_weight": 1});
        let (status, body) = app.send(reqwest::Method::POST, "/api/v1/channels", None, body).await;
        assert_eq!(status, 201, "{body}");
    }
    // Each member capped at one draw a day: the third draw finds nothing drawable among the
    // 64 tickets a draw may skip (batches of 100, so the list does not run out first).
    let snapshot = json!({"kind": "channels", "ordering": "smooth", "batch_size": 100, "low_water": 5,
        "timezone": "Asia/Singapore", "weights": [{"member": "A", "weight": 1}, {"member": "B", "weight": 1}],
        "caps": {"A": 1, "B": 1}, "eject_rebuild_percent": 50});
    let body = json!({"snapshot": snapshot, "expected_version": 0});
    let (status, body) = app.send(reqwest::Method::PUT, "/api/v1/pools/capped", None, body).await;
    assert_eq!(status, 200, "{body}");
    server::publish::drain_outbox(&app.state).await.unwrap();
    server::jobs::pool_refill::run_once(&app.state).await.unwrap();
    for _ in 0..2 {
        let (status, body) = draw(&app, "capped").await;
        assert_eq!((status, body["source"].as_str()), (200, Some("redis")), "{body}");
    }
    let (status, body) = draw(&app, "capped").await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(draw(&app, "never-seen").await.0, 404);
    let metrics = app.get("/metrics").await.text().await.unwrap();
    let refused: Vec<&str> = metrics.lines().filter(|l| l.starts_with("tessera_pool_refused_draws_total{")).collect();
    assert_eq!(refused, [r#"tessera_pool_refused_draws_total{pool="capped",reason="exhausted"} 1"#]);
}
