//! The outbox and the snapshots the publisher reads.

use sqlx::PgPool;

/// The newest snapshot of an entity.
pub async fn newest(db: &PgPool, entity: &str) -> Result<Option<(i64, serde_json::Value)>, sqlx::Error> {
    sqlx::query_as("select version, body from snapshot where entity = $1 order by version desc limit 1")
        .bind(entity)
        .fetch_optional(db)
        .await
}

/// The entities with outbox rows due for delivery, oldest first (at most 200).
pub async fn due_entities(db: &PgPool) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar(
        "select entity from outbox
         where delivered_at is null and (next_attempt_at is null or next_attempt_at <= now())
         group by entity order by min(id) limit 200",
    )
    .fetch_all(db)
    .await
}

/// Outbox rows not delivered yet, and the age in seconds of the oldest of them (0 when
/// none): due rows and rows backing off after a failure alike.
pub async fn backlog(db: &PgPool) -> Result<(i64, f64), sqlx::Error> {
    sqlx::query_as(
        "select count(*), coalesce(extract(epoch from now() - min(created_at)), 0)::float8
         from outbox where delivered_at is null",
    )
    .fetch_one(db)
    .await
}

/// Marks every pending row of `entity` up to `version` delivered.
pub async fn mark_delivered(db: &PgPool, entity: &str, version: i64) -> Result<(), sqlx::Error> {
    sqlx::query(
        "update outbox set delivered_at = now(), attempts = attempts + 1, last_error = null
         where entity = $1 and version <= $2 and delivered_at is null",
    )
    .bind(entity)
    .bind(version)
    .execute(db)
    .await?;
    Ok(())
}

/// Counts a failed delivery on the pending rows of `entity` and backs off: 2, 4, 8, 16,
/// then at most 30 s.
pub async fn mark_failed(db: &PgPool, entity: &str, error: &str) -> Result<(), sqlx::Error> {
    sqlx::query(
        "update outbox set attempts = attempts + 1, last_error = $2,
             next_attempt_at = now() + least(power(2, least(attempts + 1, 5)), 30) * interval '1 second'
         where entity = $1 and delivered_at is null",
    )
    .bind(entity)
    .bind(error)
    .execute(db)
    .await?;
    Ok(())
}

/// Every entity's newest snapshot version.
pub async fn newest_versions(db: &PgPool) -> Result<Vec<(String, i64)>, sqlx::Error> {
    sqlx::query_as("select entity, max(version) from snapshot group by entity order by entity").fetch_all(db).await
}

/// The body of one snapshot version.
pub async fn body_at(db: &PgPool, entity: &str, version: i64) -> Result<serde_json::Value, sqlx::Error> {
    sqlx::query_scalar("select body from snapshot where entity = $1 and version = $2")
        .bind(entity)
        .bind(version)
        .fetch_one(db)
        .await
}
