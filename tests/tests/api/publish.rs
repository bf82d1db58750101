//! Publishing Postgres snapshots to Redis: the outbox survives a Redis outage, reconcile
//! restores a wiped Redis, and an older snapshot never replaces a newer one.

use integration::{spawn_app, spawn_app_with, TestApp};
use serde_json::json;
use server::audit::store::Source;
use server::change::Ctx;
use server::plans::{PlanName, PlanSpec};

async fn pending(app: &TestApp) -> i64 {
    sqlx::query_scalar("select count(*) from outbox where delivered_at is null").fetch_one(&app.state.db).await.unwrap()
}

/// Removes every key under the app's prefix, as a FLUSHALL would for this deployment.
async fn wipe_prefix(app: &TestApp) {
    let mut conn = app.state.redis.connection().await.unwrap();
    conn.unlink_matching(&app.state.keys.scan_pattern()).await.unwrap();
}

#[tokio::test]
async fn the_outbox_delivers_each_change_once_and_a_change_moves_the_published_version() {
    let app = spawn_app().await;
    server::seed::demo_seed(&app.state.db).await.unwrap();
    // Two pools, two tenants, and acme again for its grant: five rows, four entities.
    assert_eq!(pending(&app).await, 5);

    let first = server::publish::drain_outbox(&app.state).await.unwrap();
    assert_eq!(first.published.len(), 4);
    assert_eq!(pending(&app).await, 0);
    assert!(server::publish::drain_outbox(&app.state).await.unwrap().published.is_empty());

    // A plan change republishes its tenants: acme's v3 reaches Redis through the outbox.
    let ctx = Ctx { actor: "alice", source: Source::Api, reason: Some("upgrade"), request_id: None };
    let spec: PlanSpec =
        serde_json::from_value(json!({"monthly_tokens": 60_000_000, "daily_requests": 100_000, "concurrency": 64}))
            .unwrap();
    let (written, _) =
        server::tenants::update_plan(&app.state.db, &ctx, &PlanName::parse("pro").unwrap(), &spec, 1).await.unwrap();
    assert_eq!(written.iter().map(|w| w.entity.as_str()).collect::<Vec<_>>(), vec!["plan:pro", "tenant:acme"]);
    let delivered = server::publish::drain_outbox(&app.state).await.unwrap();
    assert_eq!(delivered.published, vec!["tenant:acme v3"]);
    let usage = app.state.quotas.usage(&client::quota::TenantId::parse("acme").unwrap()).await.unwrap();
    assert_eq!(usage.version, 3);
    assert_eq!(usage.buckets.last().unwrap().amount, 60_000_000);
}

#[tokio::test]
async fn a_change_made_while_redis_is_down_stays_in_the_outbox_and_is_counted_as_an_attempt() {
    let app = spawn_app_with(|s| integration::use_redis(s, "redis://127.0.0.1:1")).await;
    server::seed::demo_seed(&app.state.db).await.unwrap();

    let outcome = server::publish::drain_outbox(&app.state).await.unwrap();

    assert!(outcome.published.is_empty());
    assert_eq!(outcome.failed.len(), 4);
    assert_eq!(pending(&app).await, 5);
    let (attempts, error): (i32, Option<String>) =
        sqlx::query_as("select attempts, last_error from outbox order by id limit 1")
            .fetch_one(&app.state.db)
            .await
            .unwrap();
    assert_eq!(attempts, 1);
    assert!(error.unwrap().contains("publishing"));
    // Backoff: the next run leaves the rows alone until they are due again.
    let again = server::publish::drain_outbox(&app.state).await.unwrap();
    assert!(again.failed.is_empty() && again.published.is_empty(), "{again:?}");
    let waiting: i64 = sqlx::query_scalar("select count(*) from outbox where next_attempt_at > now()")
        .fetch_one(&app.state.db)
        .await
        .unwrap();
    assert_eq!(waiting, 5);
}

#[tokio::test]
async fn with_redis_away_from_the_start_a_known_pool_draws_locally_and_a_configured_one_by_its_static_weights() {
    let app = spawn_app_with(|s| {
        integration::use_redis(s, "redis://127.0.0.1:1");
        s.static_weights = [(
            client::pool::PoolName::parse("edge").unwrap(),
            engine::Weights::parse_spec("EDGE_A=1,EDGE_B=0").unwrap(),
        )]
        .into();
    })
    .await;
    server::seed::demo_seed(&app.state.db).await.unwrap();
    // The next process starts with Redis still away: all it knows comes from Postgres and
    // its configuration, before any Redis call has succeeded.
    let app = integration::restart(app).await;

    let (status, body) = app.post_json("/api/v1/pools/cn-pay/draw", json!({})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["source"], "local", "{body}");
    assert!(body["version"].as_i64().unwrap() >= 1, "{body}");
    let (status, body) = app.post_json("/api/v1/pools/edge/draw", json!({})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!((body["source"].as_str(), body["member"].as_str()), (Some("static"), Some("EDGE_A")), "{body}");
    let (status, body) = app.post_json("/api/v1/pools/nowhere/draw", json!({})).await;
    assert_eq!(status, 503, "neither Redis, Postgres nor the configuration knows it: {body}");
}

#[tokio::test]
async fn reconcile_makes_a_wiped_redis_whole_again_and_does_nothing_when_nothing_is_stale() {
    let app = spawn_app().await;
    integration::seed_demo(&app).await;
    assert!(server::publish::reconcile(&app.state).await.unwrap().published.is_empty(), "nothing is stale");

    wipe_prefix(&app).await;
    let pool = client::pool::PoolName::parse("cn-pay").unwrap();
    assert!(matches!(app.state.pools.draw(&pool).await, Err(client::pool::PoolError::UnknownPool(_))));

    let restored = server::publish::reconcile(&app.state).await.unwrap();

    assert_eq!(restored.published, vec!["pool:cn-pay v1", "pool:sea-pay v1", "tenant:acme v2", "tenant:globex v1"]);
    let draw = app.state.pools.draw(&pool).await.unwrap();
    assert_eq!(draw.source, client::pool::DrawSource::Redis);
    assert!(app.state.pool_admin.length(&pool).await.unwrap() > 0);
}
