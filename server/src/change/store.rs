//! Snapshots: versioned, immutable bodies of configuration that are published to Redis.

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

use serde_json::Value;
use sqlx::{PgConnection, PgPool};

use super::*;
use crate::audit::store::{insert_audit, NewAudit};
use crate::error::ChangeError;

/// Makes the transaction the one writer of configuration until it commits. One lock for
/// every entity: a change reads the rows it depends on (channels, plans) only after taking
/// it, so no two changes interleave, and no two wait on each other in a circle (the audit
/// trail's own lock, taken by its insert trigger, always comes after this one). Admin and
/// health changes are rare enough that one writer at a time costs nothing. `entity` names
/// what the change is about, for the log.
pub(crate) async fn lock(tx: &mut PgConnection, entity: &str) -> Result<(), sqlx::Error> {
    tracing::trace!(entity, "taking the configuration lock");
    sqlx::query("select pg_advisory_xact_lock(hashtext('tessera.config'))").execute(tx).await?;
    Ok(())
}

pub(crate) async fn audit(
    tx: &mut PgConnection,
    ctx: &Ctx<'_>,
    entity: &str,
    action: &str,
    before: Option<&Value>,
    after: Option<&Value>,
) -> Result<i64, sqlx::Error> {
    let row = insert_audit(
        tx,
        &NewAudit {
            actor: ctx.actor,
            source: ctx.source,
            action,
            entity,
            before,
            after,
            reason: ctx.reason,
            request_id: ctx.request_id,
        },
    )
    .await?;
    Ok(row.id)
}

/// Writes `body` as the next snapshot of a published entity, with its audit row (the
/// previous snapshot as `before`) and its outbox row.
pub(crate) async fn publish(
    tx: &mut PgConnection,
    ctx: &Ctx<'_>,
    entity: &str,
    action: &str,
    body: &Value,
) -> Result<Written, ChangeError> {
    validate_body(entity, body)?;
    let before: Option<Value> =
        sqlx::query_scalar("select body from snapshot where entity = $1 order by version desc limit 1")
            .bind(entity)
            .fetch_optional(&mut *tx)
            .await?;
    let version = insert_next(&mut *tx, entity, body).await?;
    let audit_id = audit(tx, ctx, entity, action, before.as_ref(), Some(body)).await?;
    let outbox_id: i64 = sqlx::query_scalar("insert into outbox (entity, version) values ($1, $2) returning id")
        .bind(entity)
        .bind(version)
        .fetch_one(&mut *tx)
        .await?;
    Ok(Written { entity: entity.to_owned(), action: action.to_owned(), version, audit_id, outbox_id: Some(outbox_id) })
}

/// Every name of one kind of entity (`pool:` or `tenant:`) that has a snapshot.
pub async fn names_of_kind(db: &PgPool, kind: &str) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar(
        "select distinct substr(entity, length($1) + 1) from snapshot where left(entity, length($1)) = $1 order by 1",
    )
    .bind(kind)
    .fetch_all(db)
    .await
}

/// Every entity that has a snapshot.
pub async fn entities(db: &PgPool) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar("select distinct entity from snapshot order by entity").fetch_all(db).await
}
