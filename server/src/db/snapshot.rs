//! Snapshots: versioned, immutable bodies of configuration that are published to Redis.

use sqlx::PgPool;

/// The newest snapshot version and how many snapshots are stored.
#[tracing::instrument(skip_all, err)]
pub async fn get_latest_version(db: &PgPool) -> Result<(Option<i64>, i64), sqlx::Error> {
    sqlx::query_as::<_, (Option<i64>, i64)>("select max(version), count(*) from snapshot").fetch_one(db).await
}

/// Stores `body` as the next version of `entity`; returns that version.
#[tracing::instrument(skip_all, fields(entity = %entity), err)]
pub async fn insert_next(
    tx: &mut sqlx::PgConnection,
    entity: &str,
    body: &serde_json::Value,
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar::<_, i64>(
        "insert into snapshot (entity, version, body)
         select $1, coalesce(max(version), 0) + 1, $2 from snapshot where entity = $1
         returning version",
    )
    .bind(entity)
    .bind(body)
    .fetch_one(tx)
    .await
}

/// How many snapshots `entity` has.
#[tracing::instrument(skip_all, fields(entity = %entity), err)]
pub async fn count_for(db: &PgPool, entity: &str) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar::<_, i64>("select count(*) from snapshot where entity = $1").bind(entity).fetch_one(db).await
}
