//! The break-glass flags' SQL (`migrations/0014_break_glass.sql`).

use api::changes::BreakGlass;
use client::pool::PoolName;
use serde_json::json;
use sqlx::postgres::PgRow;
use sqlx::{PgConnection, PgPool, Row};

use crate::change::store::{audit, lock};
use crate::change::Ctx;
use crate::error::ApiError;
use crate::inputs::rfc3339;

const COLUMNS: &str =
    "id, audit_id, entity, action, actor, policy_scope, at, acknowledged_by, acknowledged_at, comment";

fn flag_of(r: &PgRow) -> Result<BreakGlass, sqlx::Error> {
    Ok(BreakGlass {
        id: r.try_get("id")?,
        audit_id: r.try_get("audit_id")?,
        entity: r.try_get("entity")?,
        action: r.try_get("action")?,
        actor: r.try_get("actor")?,
        policy_scope: r.try_get("policy_scope")?,
        at: rfc3339(r.try_get("at")?),
        acknowledged_by: r.try_get("acknowledged_by")?,
        acknowledged_at: r.try_get::<Option<chrono::DateTime<chrono::Utc>>, _>("acknowledged_at")?.map(rfc3339),
        comment: r.try_get("comment")?,
    })
}

/// In the transaction of a risk-reducing operation on `pool` (its audit row `audit_id`):
/// when an approval policy applies to the pool, flags it for acknowledgement, with an
/// audit row of its own (`break_glass.flag`).
pub async fn flag(
    tx: &mut PgConnection,
    ctx: &Ctx<'_>,
    pool: &PoolName,
    action: &str,
    audit_id: i64,
) -> Result<(), sqlx::Error> {
    let Some(policy) = crate::gate::policy::store::policy_for(&mut *tx, pool).await? else {
        return Ok(());
    };
    insert(tx, ctx, &crate::change::Entity::pool_key(pool), action, &policy.scope, audit_id).await
}

/// In the transaction of an operation on `entity` that stays immediate under a policy on
/// `scope` (`channels`: enabling or disabling a channel): flags it when such a policy exists.
pub async fn flag_scope(
    tx: &mut PgConnection,
    ctx: &Ctx<'_>,
    entity: &str,
    action: &str,
    scope: &str,
    audit_id: i64,
) -> Result<(), sqlx::Error> {
    if crate::gate::policy::store::policy_of(&mut *tx, scope).await?.is_none() {
        return Ok(());
    }
    insert(tx, ctx, entity, action, scope, audit_id).await
}

/// In the transaction removing the approval policy of `scope` (its audit row `audit_id`):
/// one person switched four-eyes off, so an auditor acknowledges it afterwards.
pub async fn flag_policy_removal(
    tx: &mut PgConnection,
    ctx: &Ctx<'_>,
    scope: &str,
    audit_id: i64,
) -> Result<(), sqlx::Error> {
    insert(tx, ctx, &format!("policy:{scope}"), "policy.delete", scope, audit_id).await
}

async fn insert(
    tx: &mut PgConnection,
    ctx: &Ctx<'_>,
    entity: &str,
    action: &str,
    scope: &str,
    audit_id: i64,
) -> Result<(), sqlx::Error> {
    let id: i64 = sqlx::query_scalar(
        "insert into break_glass (audit_id, entity, action, actor, policy_scope) values ($1, $2, $3, $4, $5)
         returning id",
    )
    .bind(audit_id)
    .bind(entity)
    .bind(action)
    .bind(ctx.actor)
    .bind(scope)
    .fetch_one(&mut *tx)
    .await?;
    let after = json!({"audit_id": audit_id, "entity": entity, "action": action, "policy": scope});
    audit(tx, ctx, &format!("break_glass:{id}"), "break_glass.flag", None, Some(&after)).await?;
    Ok(())
}

/// Flags a page holds.
pub const PAGE_SIZE: i64 = 100;

/// The first page of the flags, newest first, optionally only those (not) acknowledged.
pub async fn list(db: &PgPool, acknowledged: Option<bool>) -> Result<Vec<BreakGlass>, sqlx::Error> {
    Ok(page(db, acknowledged, 1).await?.0)
}

/// Page `page` (from 1) of the flags, newest first, optionally only those (not)
/// acknowledged; with how many match the filter and how many wait for acknowledgement.
pub async fn page(
    db: &PgPool,
    acknowledged: Option<bool>,
    page: u32,
) -> Result<(Vec<BreakGlass>, i64, i64), sqlx::Error> {
    let rows = sqlx::query(&format!(
        "select {COLUMNS} from break_glass where $1::boolean is null or (acknowledged_at is not null) = $1
         order by id desc limit $2 offset $3"
    ))
    .bind(acknowledged)
    .bind(PAGE_SIZE)
    .bind((i64::from(page) - 1) * PAGE_SIZE)
    .fetch_all(db)
    .await?;
    let (total, unacknowledged): (i64, i64) = sqlx::query_as(
        "select count(*) filter (where $1::boolean is null or (acknowledged_at is not null) = $1),
                count(*) filter (where acknowledged_at is null)
         from break_glass",
    )
    .bind(acknowledged)
    .fetch_one(db)
    .await?;
    Ok((rows.iter().map(flag_of).collect::<Result<_, _>>()?, total, unacknowledged))
}

/// Acknowledges a flag, audited (`break_glass.acknowledge`): never by who did the
/// operation (403), once (409).
pub async fn acknowledge(db: &PgPool, ctx: &Ctx<'_>, id: i64) -> Result<BreakGlass, ApiError> {
    let mut tx = db.begin().await?;
    lock(&mut tx, &format!("break_glass:{id}")).await?;
    let row = sqlx::query(&format!("select {COLUMNS} from break_glass where id = $1 for update"))
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no break-glass flag {id}")))?;
    let flag = flag_of(&row)?;
    if flag.actor == ctx.actor {
        return Err(ApiError::Forbidden(format!(
            "{} did the operation of break-glass flag {id}: another person acknowledges it",
            ctx.actor
        )));
    }
    if let Some(by) = &flag.acknowledged_by {
        return Err(ApiError::Blocked {
            field: "id".into(),
            rule: format!("break-glass flag {id} was acknowledged by {by} already"),
        });
    }
    let row = sqlx::query(&format!(
        "update break_glass set acknowledged_by = $2, acknowledged_at = now(), comment = $3 where id = $1
         returning {COLUMNS}"
    ))
    .bind(id)
    .bind(ctx.actor)
    .bind(ctx.reason)
    .fetch_one(&mut *tx)
    .await?;
    let flag = flag_of(&row)?;
    let after = json!({"audit_id": flag.audit_id, "action": flag.action, "actor": flag.actor});
    audit(&mut tx, ctx, &format!("break_glass:{id}"), "break_glass.acknowledge", None, Some(&after)).await?;
    tx.commit().await?;
    Ok(flag)
}
