//! Postgres away (design.md §2): the data plane keeps serving from Redis, `/readyz` names
//! Postgres, admin writes answer 503 and leave nothing half-written, and everything works
//! again once Postgres is back. The app reaches Postgres through a proxy the test cuts, so
//! the shared Postgres keeps serving every other test.

use std::time::{Duration, Instant};

use integration::{base_settings, json_reply, postgres_address, spawn_app_with, with_json, TestApp};
use secrecy::ExposeSecret;
use serde_json::{json, Value};
use server::configuration::AdminAccess;
use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, PgConnection};
use testproxy::{through, Proxy};

const TOKEN: &str = "test-admin-token-0123456789";

/// A guard against hanging when something never happens: not a performance claim.
const HANG_GUARD: Duration = Duration::from_secs(30);

/// An app with the admin API on, whose Postgres connections all go through `proxy`, with the
/// demo data written and published.
async fn app_behind(proxy: &Proxy) -> TestApp {
    let app = spawn_app_with(|s| {
        s.database_url = through(s.database_url.expose_secret(), proxy.addr()).into();
        s.admin = Some(AdminAccess { token: TOKEN.to_owned().into(), actor: "ops-bot".into() });
    })
    .await;
    integration::seed_demo(&app).await;
    app
}

async fn proxy_to_postgres() -> Proxy {
    Proxy::start(postgres_address(base_settings().database_url.expose_secret())).await
}

/// A connection to the app's database that does not go through its proxy.
async fn direct(app: &TestApp) -> PgConnection {
    let options: PgConnectOptions = base_settings().database_url.expose_secret().parse().unwrap();
    PgConnection::connect_with(&options.database(&app.db_name)).await.unwrap()
}

/// Rows of the tables every change writes to, and acme's plan.
async fn written(db: &mut PgConnection) -> (i64, i64, i64, String) {
    let (snapshots, audits, outboxes): (i64, i64, i64) = sqlx::query_as(
        "select (select count(*) from snapshot), (select count(*) from audit), (select count(*) from outbox)",
    )
    .fetch_one(&mut *db)
    .await
    .unwrap();
    let plan: String =
        sqlx::query_scalar("select plan from tenant where name = 'acme'").fetch_one(&mut *db).await.unwrap();
    (snapshots, audits, outboxes, plan)
}

async fn published_version(app: &TestApp, meta: String) -> Option<i64> {
    let mut conn = app.state.redis.connection().await.unwrap();
    redis::cmd("HGET").arg(meta).arg("version").query_async(&mut conn).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_postgres_cut_draws_and_quotas_are_served_from_redis_and_readyz_names_postgres() {
    let proxy = proxy_to_postgres().await;
    let app = app_behind(&proxy).await;
    let scheduler = server::jobs::Scheduler::start(app.state.clone()).await.unwrap();
    assert_eq!(app.get("/readyz").await.status(), 200);

    proxy.cut().await;

    // Readiness says it is down; its details (for operators) say which dependency.
    assert_eq!(app.get("/readyz").await.status(), 503);
    let response = app.request(reqwest::Method::GET, "/readyz/details").bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(response.status(), 503);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["down"], json!(["postgres"]), "{body}");
    assert_eq!(body["redis"]["status"], "up", "{body}");
    assert!(body["postgres"]["error"].as_str().unwrap().starts_with("postgres:"), "{body}");

    // Draws over HTTP, from both demo pools, from Redis.
    for pool in ["cn-pay", "sea-pay"] {
        for _ in 0..50 {
            let (status, draw) =
                app.send(reqwest::Method::POST, &format!("/api/v1/pools/{pool}/draw"), Some(TOKEN), Value::Null).await;
            assert_eq!((status, draw["source"].as_str()), (200, Some("redis")), "{pool}: {draw}");
        }
    }
    // More draws than the list and the standby batch hold: the refiller keeps the pool
    // filled without Postgres (it cannot tell who leads, and refills anyway).
    let pool = client::pool::PoolName::parse("cn-pay").unwrap();
    for i in 0..2_500 {
        let draw = app.state.pools.draw(&pool).await.unwrap();
        assert_eq!(draw.source, client::pool::DrawSource::Redis, "draw {i}");
    }
    // Quota reserve and settle.
    for i in 0..20 {
        let request_id = format!("pg-down-{i}");
        let (status, reserved) = app
            .send(
                reqwest::Method::POST,
                "/api/v1/tenants/acme/quota/reserve",
                Some(TOKEN),
                json!({"request_id": request_id, "tokens": 1_000}),
            )
            .await;
        assert_eq!(
            (status, reserved["result"].as_str(), reserved["source"].as_str()),
            (200, Some("reserved"), Some("redis")),
            "{reserved}"
        );
        let (status, settled) = app
            .send(
                reqwest::Method::POST,
                "/api/v1/tenants/acme/quota/settle",
                Some(TOKEN),
                json!({"request_id": request_id, "actual_tokens": 600}),
            )
            .await;
        assert_eq!(status, 200, "{settled}");
    }
    // A settle Redis does not know needs the usage ledger to answer: 503, not a 404 that
    // would wrongly say the request was never reserved.
    let (status, unknown) = app
        .send(
            reqwest::Method::POST,
            "/api/v1/tenants/acme/quota/settle",
            Some(TOKEN),
            json!({"request_id": "pg-down-never", "actual_tokens": 600}),
        )
        .await;
    assert_eq!(status, 503, "{unknown}");
    assert!(unknown["error"].as_str().unwrap().contains("usage ledger"), "{unknown}");

    proxy.restore();
    let started = Instant::now();
    while app.get("/readyz").await.status() != 200 {
        assert!(started.elapsed() < HANG_GUARD, "readyz never recovered");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    scheduler.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_write_cut_off_from_postgres_answers_503_and_leaves_nothing_half_written() {
    let proxy = proxy_to_postgres().await;
    let app = app_behind(&proxy).await;
    let mut db = direct(&app).await;
    let (status, acme) = app.send(reqwest::Method::GET, "/api/v1/tenants/acme", Some(TOKEN), Value::Null).await;
    assert_eq!(status, 200, "{acme}");
    let version = acme["version"].as_i64().unwrap();
    assert_eq!(acme["plan"], "pro");
    let meta = app.state.keys.quota_meta("acme");
    assert_eq!(published_version(&app, meta.clone()).await, Some(version));
    let before = written(&mut db).await;
    let change = |reason: &str| json!({"plan": "enterprise", "expected_version": version, "reason": reason});

    // A write sent while Postgres is away: 503 with a message that says so.
    proxy.cut().await;
    let (status, refused) =
        app.send(reqwest::Method::PUT, "/api/v1/tenants/acme", Some(TOKEN), change("upgrade")).await;
    assert_eq!(status, 503, "{refused}");
    assert!(refused["error"].as_str().unwrap().starts_with("postgres unavailable"), "{refused}");
    let (status, _) = app.send(reqwest::Method::GET, "/api/v1/tenants/acme", Some(TOKEN), Value::Null).await;
    assert_eq!(status, 503, "reads of the configuration need Postgres too");
    proxy.restore();

    // A write cut off halfway: it has changed the tenant row and waits to insert the
    // snapshot (held back by a lock the test takes on a connection of its own) when the
    // connection goes.
    let mut blocker = direct(&app).await;
    let mut hold = blocker.begin().await.unwrap();
    sqlx::query("lock table snapshot in share mode").execute(&mut *hold).await.unwrap();
    let write = tokio::spawn({
        let request = app.request(reqwest::Method::PUT, "/api/v1/tenants/acme").bearer_auth(TOKEN);
        json_reply(with_json(request, &change("upgrade, halfway")))
    });
    let started = Instant::now();
    loop {
        let waiting: i64 = sqlx::query_scalar(
            "select count(*) from pg_stat_activity
             where datname = current_database() and wait_event_type = 'Lock' and query ilike '%insert into snapshot%'",
        )
        .fetch_one(&mut db)
        .await
        .unwrap();
        if waiting == 1 {
            break;
        }
        assert!(started.elapsed() < HANG_GUARD, "the write never reached the snapshot insert");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    proxy.cut().await;
    let (status, refused) = write.await.unwrap();
    assert_eq!(status, 503, "{refused}");
    assert!(refused["error"].as_str().unwrap().starts_with("postgres unavailable"), "{refused}");
    hold.rollback().await.unwrap();
    proxy.restore();

    // Nothing of either write is there: no tenant change, snapshot, audit or outbox row,
    // and Redis still holds the old version.
    assert_eq!(written(&mut db).await, before);
    assert_eq!(published_version(&app, meta.clone()).await, Some(version));

    // And writes work again.
    let (status, applied) =
        app.send(reqwest::Method::PUT, "/api/v1/tenants/acme", Some(TOKEN), change("upgrade, again")).await;
    assert_eq!(status, 200, "{applied}");
    assert_eq!(
        (applied["version"].as_i64(), applied["published"].as_bool()),
        (Some(version + 1), Some(true)),
        "{applied}"
    );
    assert_eq!(written(&mut db).await.3, "enterprise");
    assert_eq!(published_version(&app, meta).await, Some(version + 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_access_control_on_a_verified_data_plane_token_keeps_drawing_while_postgres_is_cut() {
    let proxy = proxy_to_postgres().await;
    let app = spawn_app_with(|s| {
        s.database_url = through(s.database_url.expose_secret(), proxy.addr()).into();
        s.admin = Some(AdminAccess { token: TOKEN.to_owned().into(), actor: "ops-bot".into() });
        s.auth.open = false;
    })
    .await;
    integration::seed_demo(&app).await;
    let (status, minted) = app
        .send(reqwest::Method::POST, "/api/v1/tokens", Some(TOKEN), json!({"name": "gateway", "scope": "dataplane"}))
        .await;
    assert_eq!(status, 201, "{minted}");
    let token = minted["token"].as_str().unwrap().to_owned();
    let draw = |token: String| {
        let app = &app;
        async move { app.send(reqwest::Method::POST, "/api/v1/pools/cn-pay/draw", Some(&token), Value::Null).await.0 }
    };
    assert_eq!(draw(token.clone()).await, 200, "verified once, against Postgres");

    proxy.cut().await;
    for _ in 0..20 {
        assert_eq!(draw(token.clone()).await, 200, "served from Redis, the token trusted from the last verification");
    }
    assert_eq!(draw("tsr_never-seen-before".into()).await, 503, "a token never verified cannot be checked now");
    proxy.restore();
}
