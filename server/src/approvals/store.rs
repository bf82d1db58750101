//! The policy and change-request tables (`migrations/0011_change_requests.sql`). Every
//! write takes the configuration lock first and writes its audit row in the same
//! transaction: nothing is partly applied.

use api::changes::{ChangeRequest, ChangeState, Review};

use super::entities::Target;
use super::operation::{resolve, Operation};
use super::propose::proposed_for;
pub use super::propose::Proposal;
use crate::gate::policy::store::policy_for;
use client::pool::{PoolName, ReweightMode};
use serde_json::{json, Value};
use sqlx::postgres::PgRow;
use sqlx::{PgConnection, PgPool, Row};

use crate::change::store::{audit, lock};
use crate::change::{Ctx, Entity};
use crate::error::ApiError;
use crate::inputs::rfc3339;
use crate::pools::unknown_pool;

pub(super) const REQUEST_COLUMNS: &str =
    "id, entity, operation, base_version, content_hash, diff, author, reason, state,
    policy_scope, required_approvals, approver_roles, created_at, expires_at, updated_at, outcome, scheduled_at";

pub(super) fn review(r: &PgRow) -> Result<Review, sqlx::Error> {
    Ok(Review {
        actor: r.try_get("actor")?,
        role: r.try_get("role")?,
        verdict: r.try_get("verdict")?,
        comment: r.try_get("comment")?,
        content_hash: r.try_get("content_hash")?,
        at: rfc3339(r.try_get("at")?),
    })
}

pub(super) async fn request_in(
    conn: &mut PgConnection,
    id: i64,
    for_update: bool,
) -> Result<Option<ChangeRequest>, sqlx::Error> {
    let lock = if for_update { " for update" } else { "" };
    let Some(r) = sqlx::query(&format!("select {REQUEST_COLUMNS} from change_request where id = $1{lock}"))
        .bind(id)
        .fetch_optional(&mut *conn)
        .await?
    else {
        return Ok(None);
    };
    let reviews = sqlx::query(
        "select actor, role, verdict, comment, content_hash, at from change_review where request_id = $1 order by id",
    )
    .bind(id)
    .fetch_all(&mut *conn)
    .await?;
    let reviews = reviews.iter().map(review).collect::<Result<Vec<_>, _>>()?;
    assemble(&r, reviews).map(Some)
}

/// A request from its row and its reviews (oldest first); its approvals are those of its
/// current content hash.
pub(super) fn assemble(r: &PgRow, reviews: Vec<Review>) -> Result<ChangeRequest, sqlx::Error> {
    let content_hash: String = r.try_get("content_hash")?;
    let approvals = reviews.iter().filter(|v| v.verdict == "approve" && v.content_hash == content_hash).count() as i64;
    Ok(ChangeRequest {
        id: r.try_get("id")?,
        entity: r.try_get("entity")?,
        operation: r.try_get("operation")?,
        base_version: r.try_get("base_version")?,
        content_hash,
        diff: r.try_get("diff")?,
        author: r.try_get("author")?,
        reason: r.try_get("reason")?,
        state: {
            let name: String = r.try_get("state")?;
            ChangeState::parse(&name)
                .ok_or_else(|| sqlx::Error::Decode(format!("{name:?} is not a change state").into()))?
        },
        policy_scope: r.try_get("policy_scope")?,
        required_approvals: r.try_get("required_approvals")?,
        approver_roles: r.try_get("approver_roles")?,
        approvals,
        reviews,
        created_at: rfc3339(r.try_get("created_at")?),
        expires_at: rfc3339(r.try_get("expires_at")?),
        updated_at: rfc3339(r.try_get("updated_at")?),
        outcome: r.try_get("outcome")?,
        scheduled_at: r.try_get::<Option<chrono::DateTime<chrono::Utc>>, _>("scheduled_at")?.map(rfc3339),
    })
}

/// One change request.
pub async fn get_request(db: &PgPool, id: i64) -> Result<Option<ChangeRequest>, sqlx::Error> {
    let mut conn = db.acquire().await?;
    request_in(&mut conn, id, false).await
}

/// Writes the state change of a request with its audit row (`change.<action>`).
pub(super) async fn set_state(
    tx: &mut PgConnection,
    ctx: &Ctx<'_>,
    id: i64,
    state: ChangeState,
    action: &str,
    outcome: Option<&Value>,
    detail: Value,
) -> Result<(), sqlx::Error> {
    let hash: String = sqlx::query_scalar(
        "update change_request set state = $2, outcome = coalesce($3, outcome), updated_at = now(),
             scheduled_at = case when $2 = any($4) then scheduled_at end,
             scheduled_by = case when $2 = any($4) then scheduled_by end
         where id = $1 returning content_hash",
    )
    .bind(id)
    .bind(state.as_str())
    .bind(outcome)
    .bind(ChangeState::names(&[ChangeState::Scheduled, ChangeState::Applied]))
    .fetch_one(&mut *tx)
    .await?;
    let mut after = json!({"state": state, "content_hash": hash});
    if let (Some(obj), Value::Object(more)) = (after.as_object_mut(), detail) {
        obj.extend(more);
    }
    audit(tx, ctx, &format!("change:{id}"), action, None, Some(&after)).await?;
    Ok(())
}

/// A request past its expiry (and still open or suspended) becomes `expired`, audited; answers whether
/// it did.
pub(super) async fn expire_if_due(tx: &mut PgConnection, ctx: &Ctx<'_>, id: i64) -> Result<bool, sqlx::Error> {
    let due: bool =
        sqlx::query_scalar("select expires_at <= now() and state = any($2) from change_request where id = $1")
            .bind(id)
            .bind(ChangeState::names(&ChangeState::OPEN))
            .fetch_one(&mut *tx)
            .await?;
    if due {
        set_state(tx, ctx, id, ChangeState::Expired, "change.expire", None, json!({})).await?;
    }
    Ok(due)
}

pub(super) fn not_found(id: i64) -> ApiError {
    ApiError::NotFound(format!("no change request {id}"))
}

pub(super) fn blocked(rule: String) -> ApiError {
    ApiError::Blocked { field: "state".into(), rule }
}

/// Submits a change request of an operation on `pool` (state `in_review`), made against the
/// pool's current configuration version: 404 unknown pool, 409 a stale version, 422 an
/// operation the pool cannot take. Audited (`change.submit`).
pub async fn submit(
    db: &PgPool,
    ctx: &Ctx<'_>,
    target: &Target,
    proposal: &Proposal,
) -> Result<ChangeRequest, ApiError> {
    let reason = ctx.reason.ok_or_else(|| ApiError::bad_request("reason", "is required"))?;
    let mut tx = db.begin().await?;
    let entity = target.key();
    lock(&mut tx, &entity).await?;
    let (operation, current, content_hash, diff, policy) =
        proposed_for(&mut tx, ctx, target, proposal, reason, 0).await?;
    let (scope, required, roles, hours) = super::terms(policy.as_ref(), &diff);
    let id: i64 = sqlx::query_scalar(
        "insert into change_request (entity, operation, base_version, content_hash, diff, author, reason, state,
             policy_scope, required_approvals, approver_roles, expires_at)
         values ($1, $2, $3, $4, $5, $6, $7, $12, $8, $9, $10, now() + make_interval(hours => $11))
         returning id",
    )
    .bind(&entity)
    .bind(&operation)
    .bind(current)
    .bind(&content_hash)
    .bind(&diff)
    .bind(ctx.actor)
    .bind(reason)
    .bind(&scope)
    .bind(required)
    .bind(&roles)
    .bind(hours)
    .bind(ChangeState::InReview.as_str())
    .fetch_one(&mut *tx)
    .await?;
    let after = json!({"state": ChangeState::InReview, "content_hash": content_hash, "entity": entity,
        "base_version": current, "operation": operation, "policy": scope, "required_approvals": required});
    audit(&mut tx, ctx, &format!("change:{id}"), "change.submit", None, Some(&after)).await?;
    let request = request_in(&mut tx, id, false).await?.ok_or_else(|| not_found(id))?;
    tx.commit().await?;
    Ok(request)
}

/// Approves (`approve`) or rejects a request in review, as `role`, for the content hash
/// the reviewer saw. Refused: its author (403, admins included), a role the policy does not
/// name (403), another content hash (409, field `content_hash`), a request not in review
/// or expired (409, field `state`), a second review by the same person (409). Enough
/// approvals make it `approved`; one rejection makes it `rejected`. Audited.
pub async fn review_request(
    db: &PgPool,
    ctx: &Ctx<'_>,
    id: i64,
    role: &str,
    approve: bool,
    content_hash: &str,
    comment: Option<&str>,
) -> Result<ChangeRequest, ApiError> {
    let mut tx = db.begin().await?;
    lock(&mut tx, &format!("change:{id}")).await?;
    let request = request_in(&mut tx, id, true).await?.ok_or_else(|| not_found(id))?;
    if request.author == ctx.actor {
        return Err(ApiError::Forbidden(format!(
            "{} proposed change request {id} and cannot review it: another person must",
            ctx.actor
        )));
    }
    let (required, roles) = needs_now(&mut tx, &request).await?;
    if !roles.iter().any(|r| r == role) {
        return Err(ApiError::Forbidden(format!(
            "change request {id} is reviewed by role {}; you act as {role}",
            if roles.is_empty() {
                "none (the pool's policy and the request's share no role)".to_owned()
            } else {
                roles.join(" or ")
            }
        )));
    }
    if expire_if_due(&mut tx, ctx, id).await? {
        tx.commit().await?;
        return Err(blocked(format!("change request {id} expired at {}", request.expires_at)));
    }
    // One rejection blocks: also after enough approvals, until it is applied.
    let open = request.state == ChangeState::InReview
        || (!approve && matches!(request.state, ChangeState::Approved | ChangeState::Scheduled));
    if !open {
        return Err(blocked(format!("change request {id} is {}, not in review", request.state)));
    }
    if request.content_hash != content_hash {
        return Err(ApiError::Blocked {
            field: "content_hash".into(),
            rule: format!(
                "change request {id} has content hash {}, not the one reviewed: read it again",
                request.content_hash
            ),
        });
    }
    if request.reviews.iter().any(|r| r.actor == ctx.actor && r.content_hash == request.content_hash) {
        return Err(ApiError::Duplicate {
            field: "actor".into(),
            rule: format!("{} has already reviewed change request {id}", ctx.actor),
        });
    }
    let verdict = if approve { "approve" } else { "reject" };
    sqlx::query(
        "insert into change_review (request_id, actor, role, verdict, comment, content_hash) values ($1, $2, $3, $4, $5, $6)",
    )
    .bind(id)
    .bind(ctx.actor)
    .bind(role)
    .bind(verdict)
    .bind(comment)
    .bind(content_hash)
    .execute(&mut *tx)
    .await?;
    let approvals = request.approvals + i64::from(approve);
    let state = match (approve, approvals >= required) {
        (false, _) => ChangeState::Rejected,
        (true, true) => ChangeState::Approved,
        (true, false) => ChangeState::InReview,
    };
    set_state(
        &mut tx,
        ctx,
        id,
        state,
        if approve { "change.approve" } else { "change.reject" },
        None,
        json!({"role": role, "comment": comment, "approvals": approvals}),
    )
    .await?;
    let request = request_in(&mut tx, id, false).await?.ok_or_else(|| not_found(id))?;
    tx.commit().await?;
    Ok(request)
}

/// Applies an approved request in one transaction with its audit rows: the pool changed
/// as the direct write would change it (its action, the reason naming the request), and the request `applied`. When the pool changed since the request's base
/// version it is `suspended` instead (saying which version the pool is at) and the answer
/// is 409. Answers the request and what was written.
pub async fn apply_request(
    state: &crate::state::AppState,
    ctx: &Ctx<'_>,
    id: i64,
    due_at: Option<chrono::DateTime<chrono::Utc>>,
) -> Result<(ChangeRequest, Option<(PoolName, crate::pools::PoolWritten, ReweightMode)>), ApiError> {
    let mut tx = state.db.begin().await?;
    lock(&mut tx, &format!("change:{id}")).await?;
    let request = request_in(&mut tx, id, true).await?.ok_or_else(|| not_found(id))?;
    // The job applies a request only while it is still scheduled for now or earlier (it may
    // have been moved, edited or cancelled since the job listed it).
    if let Some(now) = due_at {
        let due: bool =
            sqlx::query_scalar("select state = $3 and scheduled_at <= $2 from change_request where id = $1")
                .bind(id)
                .bind(now)
                .bind(ChangeState::Scheduled.as_str())
                .fetch_one(&mut *tx)
                .await?;
        if !due {
            return Err(blocked(format!("change request {id} is no longer due")));
        }
    }
    if expire_if_due(&mut tx, ctx, id).await? {
        tx.commit().await?;
        return Err(blocked(format!("change request {id} expired at {}", request.expires_at)));
    }
    if !matches!(request.state, ChangeState::Approved | ChangeState::Scheduled) {
        return Err(blocked(format!(
            "change request {id} is {}: only an approved request is applied ({} of {} approvals)",
            request.state, request.approvals, request.required_approvals
        )));
    }
    let (required, roles) = needs_now(&mut tx, &request).await?;
    let standing = standing_approvals(&mut tx, &request, &roles).await?;
    if standing < required {
        let why = format!(
            "change request {id} needs {required} approval(s) by {} now; {standing} of its {} still stand \
             (a reviewer since disabled or given another role no longer counts)",
            roles.join(" or "),
            request.approvals
        );
        set_state(&mut tx, ctx, id, ChangeState::InReview, "change.review_again", None, json!({"why": why})).await?;
        tx.commit().await?;
        return Err(blocked(format!("{why}: it is in review again")));
    }
    let target = Target::parse(&request.entity)?;
    if !matches!(target, Target::Pool(_)) {
        let outcome = match super::entities::apply(&mut tx, ctx, &request, &target).await? {
            Ok(outcome) => outcome,
            Err((why, current)) => {
                let outcome = json!({"reason": why, "current_version": current});
                set_state(
                    &mut tx,
                    ctx,
                    id,
                    ChangeState::Suspended,
                    "change.suspend",
                    Some(&outcome),
                    json!({"why": why}),
                )
                .await?;
                tx.commit().await?;
                return Err(ApiError::Conflict { entity: request.entity, expected: request.base_version, current });
            }
        };
        set_state(&mut tx, ctx, id, ChangeState::Applied, "change.apply", Some(&outcome), outcome.clone()).await?;
        let request = request_in(&mut tx, id, false).await?.ok_or_else(|| not_found(id))?;
        tx.commit().await?;
        return Ok((request, None));
    }
    let pool = pool_of(&request)?;
    let current: Option<i64> = sqlx::query_scalar("select config_version from pool where name = $1")
        .bind(pool.as_str())
        .fetch_optional(&mut *tx)
        .await?;
    if current != Some(request.base_version) {
        let why = match current {
            Some(v) => {
                format!("pool {:?} is at configuration version {v}, not {}", pool.as_str(), request.base_version)
            }
            None => format!("pool {:?} no longer exists", pool.as_str()),
        };
        // What changed since, so the author sees what to make the request against now.
        let since = crate::pools::history::store::versions_after(&mut tx, &pool, request.base_version).await?;
        let since: Vec<Value> = since
            .iter()
            .map(|v| json!({"version": v.version, "action": v.action, "actor": v.actor, "at": v.at}))
            .collect();
        let outcome = json!({"reason": why, "current_version": current, "changed_since": since});
        set_state(&mut tx, ctx, id, ChangeState::Suspended, "change.suspend", Some(&outcome), json!({"why": why}))
            .await?;
        tx.commit().await?;
        return Err(ApiError::Conflict {
            entity: request.entity,
            expected: request.base_version,
            current: current.unwrap_or(0),
        });
    }
    let operation = Operation::from_stored(id, &request.operation)?;
    if let Operation::Ramp { plan } = &operation {
        // The ramp is what was approved: it starts now, and its steps run without approval.
        let reason = format!("change request {id}: {}", request.reason);
        let ramp_ctx = Ctx { reason: Some(&reason), ..*ctx };
        let now = due_at.unwrap_or_else(chrono::Utc::now);
        let (row, written) =
            crate::ramps::start::start_tx(state, &mut tx, &ramp_ctx, &pool, plan, request.base_version, Some(id), now)
                .await?;
        let outcome = json!({"ramp": row.id, "version": row.config_version});
        set_state(&mut tx, ctx, id, ChangeState::Applied, "change.apply", Some(&outcome), outcome.clone()).await?;
        let request = request_in(&mut tx, id, false).await?.ok_or_else(|| not_found(id))?;
        tx.commit().await?;
        return Ok((request, written));
    }
    let (_, body) =
        crate::pools::store::compile_pool(&mut tx, pool.as_str()).await?.ok_or_else(|| unknown_pool(&pool))?;
    let (edit, _) = resolve(&mut tx, &pool, &operation, request.base_version, &body).await?;
    let mode = operation.mode();
    let reason = match &operation {
        Operation::RestoreVersion { version } => {
            format!("change request {id}: restores configuration version {version}: {}", request.reason)
        }
        _ => format!("change request {id}: {}", request.reason),
    };
    let change_ctx = Ctx { reason: Some(&reason), ..*ctx };
    let written = crate::pools::store::modify_pool_tx(
        &mut tx,
        &change_ctx,
        &pool,
        operation.action(),
        Some(request.base_version),
        |s| edit.apply(s),
    )
    .await?;
    let outcome = json!({"version": written.config_version, "published_version": written.written.version});
    set_state(
        &mut tx,
        ctx,
        id,
        ChangeState::Applied,
        "change.apply",
        Some(&outcome),
        json!({"version": written.config_version}),
    )
    .await?;
    let request = request_in(&mut tx, id, false).await?.ok_or_else(|| not_found(id))?;
    tx.commit().await?;
    Ok((request, Some((pool, written, mode))))
}

/// Cancels an open or suspended request: its author, or an admin. Audited.
pub async fn cancel_request(db: &PgPool, ctx: &Ctx<'_>, id: i64, role: &str) -> Result<ChangeRequest, ApiError> {
    let mut tx = db.begin().await?;
    lock(&mut tx, &format!("change:{id}")).await?;
    let request = request_in(&mut tx, id, true).await?.ok_or_else(|| not_found(id))?;
    if !matches!(
        request.state,
        ChangeState::InReview | ChangeState::Approved | ChangeState::Scheduled | ChangeState::Suspended
    ) {
        return Err(blocked(format!("change request {id} is {} and cannot be cancelled", request.state)));
    }
    if request.author != ctx.actor && role != "admin" {
        return Err(ApiError::Forbidden(format!(
            "only {} (its author) or an admin cancels change request {id}",
            request.author
        )));
    }
    set_state(&mut tx, ctx, id, ChangeState::Cancelled, "change.cancel", None, json!({})).await?;
    let request = request_in(&mut tx, id, false).await?.ok_or_else(|| not_found(id))?;
    tx.commit().await?;
    Ok(request)
}

/// Replaces a request's proposal (its author only: 403 otherwise), made against the pool's
/// current configuration version: a new content hash, so every approval given so far no
/// longer counts; the request is in review again (from in review, approved, scheduled or
/// suspended). Audited (`change.edit`, with the old and the new hash).
pub async fn edit_request(db: &PgPool, ctx: &Ctx<'_>, id: i64, proposal: &Proposal) -> Result<ChangeRequest, ApiError> {
    let reason = ctx.reason.ok_or_else(|| ApiError::bad_request("reason", "is required"))?;
    let mut tx = db.begin().await?;
    lock(&mut tx, &format!("change:{id}")).await?;
    let request = request_in(&mut tx, id, true).await?.ok_or_else(|| not_found(id))?;
    if request.author != ctx.actor {
        return Err(ApiError::Forbidden(format!("only {} (its author) edits change request {id}", request.author)));
    }
    if !matches!(
        request.state,
        ChangeState::InReview | ChangeState::Approved | ChangeState::Scheduled | ChangeState::Suspended
    ) {
        return Err(blocked(format!("change request {id} is {} and cannot be edited", request.state)));
    }
    let target = Target::parse(&request.entity)?;
    if expire_if_due(&mut tx, ctx, id).await? {
        tx.commit().await?;
        return Err(blocked(format!("change request {id} expired at {}", request.expires_at)));
    }
    let revision: i32 = sqlx::query_scalar("select revision + 1 from change_request where id = $1")
        .bind(id)
        .fetch_one(&mut *tx)
        .await?;
    let (operation, base_version, content_hash, diff, policy) =
        proposed_for(&mut tx, ctx, &target, proposal, reason, revision).await?;
    let (scope, required, roles, _) = super::terms(policy.as_ref(), &diff);
    sqlx::query(
        "update change_request set operation = $2, base_version = $3, content_hash = $4, diff = $5, reason = $6,
             state = $11, scheduled_at = null, scheduled_by = null, policy_scope = $7,
             required_approvals = $8, approver_roles = $9, revision = $10, outcome = null, updated_at = now()
         where id = $1",
    )
    .bind(id)
    .bind(&operation)
    .bind(base_version)
    .bind(&content_hash)
    .bind(&diff)
    .bind(reason)
    .bind(&scope)
    .bind(required)
    .bind(&roles)
    .bind(revision)
    .bind(ChangeState::InReview.as_str())
    .execute(&mut *tx)
    .await?;
    let after = json!({"state": ChangeState::InReview, "content_hash": content_hash, "replaces": request.content_hash,
        "base_version": base_version, "operation": operation});
    audit(&mut tx, ctx, &format!("change:{id}"), "change.edit", None, Some(&after)).await?;
    let request = request_in(&mut tx, id, false).await?.ok_or_else(|| not_found(id))?;
    tx.commit().await?;
    Ok(request)
}

/// What a request needs now: the stricter of what it was submitted under and the policy
/// that applies to its pool now (a policy made or tightened later also binds requests
/// already open): the approvals it needs, and the roles that may review it.
async fn needs_now(tx: &mut PgConnection, request: &ChangeRequest) -> Result<(i64, Vec<String>), sqlx::Error> {
    let mut required = i64::from(request.required_approvals);
    let mut roles = request.approver_roles.clone();
    let policy = match Target::parse(&request.entity) {
        Ok(Target::Pool(pool)) => policy_for(&mut *tx, &pool).await?,
        Ok(other) => crate::gate::policy::store::policy_of(&mut *tx, other.scope()).await?,
        Err(_) => None,
    };
    {
        if let Some(policy) = policy {
            required = required.max(i64::from(policy.required_approvals));
            roles.retain(|r| policy.approver_roles.contains(r));
        }
    }
    Ok((required, roles))
}

/// The approvals of a request's current content that still stand: by reviewers who are not
/// disabled and whose role now is one of `roles` (a reviewer with no user row, as in the
/// development mode, by the role they reviewed in).
async fn standing_approvals(
    tx: &mut PgConnection,
    request: &ChangeRequest,
    roles: &[String],
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(
        "select count(*) from change_review r left join app_user u on u.name = r.actor
         where r.request_id = $1 and r.verdict = 'approve' and r.content_hash = $2
             and case when u.name is null then r.role = any($3) else u.role = any($3) and u.disabled_at is null end",
    )
    .bind(request.id)
    .bind(&request.content_hash)
    .bind(roles)
    .fetch_one(&mut *tx)
    .await
}

/// The pool a request is about (its entity, `pool:<name>`, as stored).
fn pool_of(request: &ChangeRequest) -> Result<PoolName, ApiError> {
    match Entity::parse(&request.entity) {
        Ok(Entity::Pool(pool)) => Ok(pool),
        _ => {
            Err(ApiError::Unexpected(anyhow::anyhow!("change request {}: bad entity {:?}", request.id, request.entity)))
        }
    }
}
