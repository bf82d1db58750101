//! The SQL of scheduled change requests (`scheduled_at`, `migrations/0012_change_schedule.sql`).

use api::changes::{ChangeRequest, ChangeState};
use serde_json::json;
use sqlx::PgPool;

use crate::approvals::store::{blocked, expire_if_due, not_found, request_in, set_state};
use crate::change::store::lock;
use crate::change::Ctx;
use crate::error::ApiError;

/// Schedules an approved request to be applied at `at` by the change_apply job: `at` in the
/// future and before the request expires (422, field `at`). Audited (`change.schedule`).
pub async fn schedule_request(
    db: &PgPool,
    ctx: &Ctx<'_>,
    id: i64,
    at: chrono::DateTime<chrono::Utc>,
) -> Result<ChangeRequest, ApiError> {
    let mut tx = db.begin().await?;
    lock(&mut tx, &format!("change:{id}")).await?;
    let request = request_in(&mut tx, id, true).await?.ok_or_else(|| not_found(id))?;
    if expire_if_due(&mut tx, ctx, id).await? {
        tx.commit().await?;
        return Err(blocked(format!("change request {id} expired at {}", request.expires_at)));
    }
    if !matches!(request.state, ChangeState::Approved | ChangeState::Scheduled) {
        return Err(blocked(format!(
            "change request {id} is {}: only an approved request is scheduled",
            request.state
        )));
    }
    let fits: bool = sqlx::query_scalar("select $2 > now() and $2 < expires_at from change_request where id = $1")
        .bind(id)
        .bind(at)
        .fetch_one(&mut *tx)
        .await?;
    if !fits {
        return Err(ApiError::Unprocessable {
            field: "at".into(),
            rule: format!("must be in the future and before the request expires ({})", request.expires_at),
        });
    }
    sqlx::query("update change_request set scheduled_at = $2, scheduled_by = $3 where id = $1")
        .bind(id)
        .bind(at)
        .bind(ctx.actor)
        .execute(&mut *tx)
        .await?;
    set_state(
        &mut tx,
        ctx,
        id,
        ChangeState::Scheduled,
        "change.schedule",
        None,
        json!({"at": crate::inputs::rfc3339(at)}),
    )
    .await?;
    let request = request_in(&mut tx, id, false).await?.ok_or_else(|| not_found(id))?;
    tx.commit().await?;
    Ok(request)
}

/// Suspends a scheduled request the job could not apply (the pool cannot take it any more),
/// saying why, so it is not tried again every run. Audited (`change.suspend`).
pub async fn suspend_request(db: &PgPool, ctx: &Ctx<'_>, id: i64, why: &str) -> Result<(), sqlx::Error> {
    let mut tx = db.begin().await?;
    lock(&mut tx, &format!("change:{id}")).await?;
    let state: Option<String> = sqlx::query_scalar("select state from change_request where id = $1 for update")
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?;
    if state.as_deref() == Some(ChangeState::Scheduled.as_str()) {
        let outcome = json!({"reason": why});
        set_state(&mut tx, ctx, id, ChangeState::Suspended, "change.suspend", Some(&outcome), json!({"why": why}))
            .await?;
    }
    tx.commit().await
}

/// The scheduled requests due at `now`, oldest time first, with who scheduled each.
pub async fn due_requests(db: &PgPool, now: chrono::DateTime<chrono::Utc>) -> Result<Vec<(i64, String)>, sqlx::Error> {
    // The state as a literal: the predicate of the partial index `change_request_due_idx`.
    sqlx::query_as(&format!(
        "select id, coalesce(scheduled_by, author) from change_request
         where state = {} and scheduled_at <= $1 order by scheduled_at, id",
        crate::store::sql_names(&[ChangeState::Scheduled.as_str()])
    ))
    .bind(now)
    .fetch_all(db)
    .await
}

/// Expires every open request (in review, approved, scheduled or suspended) whose expiry is `now` or
/// earlier, each in its own transaction with its audit row (`change.expire`); answers
/// their numbers. A request applied or edited meanwhile is left alone.
pub async fn expire_due(
    db: &PgPool,
    ctx: &Ctx<'_>,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<Vec<i64>, sqlx::Error> {
    let open = ChangeState::names(&ChangeState::OPEN);
    let due: Vec<i64> =
        sqlx::query_scalar("select id from change_request where state = any($2) and expires_at <= $1 order by id")
            .bind(now)
            .bind(&open)
            .fetch_all(db)
            .await?;
    let mut expired = Vec::new();
    for id in due {
        let mut tx = db.begin().await?;
        lock(&mut tx, &format!("change:{id}")).await?;
        let still: bool = sqlx::query_scalar(
            "select state = any($3) and expires_at <= $1 from change_request where id = $2 for update",
        )
        .bind(now)
        .bind(id)
        .bind(&open)
        .fetch_one(&mut *tx)
        .await?;
        if still {
            set_state(&mut tx, ctx, id, ChangeState::Expired, "change.expire", None, json!({})).await?;
            expired.push(id);
        }
        tx.commit().await?;
    }
    Ok(expired)
}
