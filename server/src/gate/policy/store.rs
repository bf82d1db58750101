//! The approval policies' SQL (`approval_policy`, `migrations/0011_change_requests.sql`).

use api::changes::Policy;
use client::pool::PoolName;
use serde_json::json;
use sqlx::postgres::PgRow;
use sqlx::{PgPool, Row};

use crate::change::store::{audit, lock};
use crate::change::Ctx;
use crate::error::ApiError;
use crate::inputs::rfc3339;

/// A policy as written by `PUT /api/v1/policies/{scope}`.
#[derive(Debug, Clone)]
pub struct PolicySpec {
    pub required_approvals: i16,
    pub approver_roles: Vec<String>,
    pub expires_after_hours: i32,
    pub moved_percent_over: Option<f64>,
    pub member_share_over: Option<f64>,
}

fn policy(r: &PgRow) -> Result<Policy, sqlx::Error> {
    Ok(Policy {
        scope: r.try_get("scope")?,
        required_approvals: r.try_get("required_approvals")?,
        approver_roles: r.try_get("approver_roles")?,
        expires_after_hours: r.try_get("expires_after_hours")?,
        moved_percent_over: r.try_get("moved_percent_over")?,
        member_share_over: r.try_get("member_share_over")?,
        version: r.try_get("version")?,
        updated_at: rfc3339(r.try_get("updated_at")?),
    })
}

const POLICY_COLUMNS: &str = "scope, required_approvals, approver_roles, expires_after_hours, moved_percent_over,
    member_share_over, version, updated_at";

/// Every policy, by scope.
pub async fn list_policies(db: &PgPool) -> Result<Vec<Policy>, sqlx::Error> {
    let rows =
        sqlx::query(&format!("select {POLICY_COLUMNS} from approval_policy order by scope")).fetch_all(db).await?;
    rows.iter().map(policy).collect()
}

/// The policy that applies to `pool`: its own (`pool:<name>`), else the one of every pool.
pub async fn policy_for<'e>(db: impl sqlx::PgExecutor<'e>, pool: &PoolName) -> Result<Option<Policy>, sqlx::Error> {
    let row = sqlx::query(&format!(
        "select {POLICY_COLUMNS} from approval_policy where scope = 'pool:' || $1 or scope = 'pools'
         order by scope = 'pools' limit 1"
    ))
    .bind(pool.as_str())
    .fetch_optional(db)
    .await?;
    row.as_ref().map(policy).transpose()
}

/// Creates (`expected_version` 0) or replaces the policy of `scope`, audited
/// (`policy.put`, entity `policy:<scope>`).
pub async fn put_policy(
    db: &PgPool,
    ctx: &Ctx<'_>,
    scope: &str,
    spec: &PolicySpec,
    expected_version: i64,
) -> Result<Policy, ApiError> {
    let mut tx = db.begin().await?;
    let entity = format!("policy:{scope}");
    lock(&mut tx, &entity).await?;
    let before = sqlx::query(&format!("select {POLICY_COLUMNS} from approval_policy where scope = $1"))
        .bind(scope)
        .fetch_optional(&mut *tx)
        .await?;
    let before = before.as_ref().map(policy).transpose()?;
    let current = before.as_ref().map_or(0, |p| p.version);
    if current != expected_version {
        return Err(ApiError::Conflict { entity, expected: expected_version, current });
    }
    let row = sqlx::query(&format!(
        "insert into approval_policy (scope, required_approvals, approver_roles, expires_after_hours,
             moved_percent_over, member_share_over, version)
         values ($1, $2, $3, $4, $5, $6, 1)
         on conflict (scope) do update set required_approvals = excluded.required_approvals,
             approver_roles = excluded.approver_roles, expires_after_hours = excluded.expires_after_hours,
             moved_percent_over = excluded.moved_percent_over, member_share_over = excluded.member_share_over,
             version = approval_policy.version + 1, updated_at = now()
         returning {POLICY_COLUMNS}"
    ))
    .bind(scope)
    .bind(spec.required_approvals)
    .bind(&spec.approver_roles)
    .bind(spec.expires_after_hours)
    .bind(spec.moved_percent_over)
    .bind(spec.member_share_over)
    .fetch_one(&mut *tx)
    .await?;
    let after = policy(&row)?;
    let before_json = before.map(|p| json!(p));
    audit(&mut tx, ctx, &entity, "policy.put", before_json.as_ref(), Some(&json!(after))).await?;
    tx.commit().await?;
    Ok(after)
}

/// Removes the policy of `scope` (at version `expected_version`), audited (`policy.delete`,
/// with the policy as it was) and flagged for an auditor to acknowledge (one person switched
/// four-eyes off): 404 when there is none, 409 at another version. Requests already open
/// keep the terms they were submitted under.
pub async fn delete_policy(db: &PgPool, ctx: &Ctx<'_>, scope: &str, expected_version: i64) -> Result<(), ApiError> {
    let mut tx = db.begin().await?;
    let entity = format!("policy:{scope}");
    lock(&mut tx, &entity).await?;
    let row = sqlx::query(&format!("delete from approval_policy where scope = $1 returning {POLICY_COLUMNS}"))
        .bind(scope)
        .fetch_optional(&mut *tx)
        .await?;
    let before =
        row.as_ref().map(policy).transpose()?.ok_or_else(|| ApiError::NotFound(format!("no policy {scope:?}")))?;
    if before.version != expected_version {
        return Err(ApiError::Conflict { entity, expected: expected_version, current: before.version });
    }
    let audit_id = audit(&mut tx, ctx, &entity, "policy.delete", Some(&json!(before)), None).await?;
    crate::gate::break_glass::store::flag_policy_removal(&mut tx, ctx, scope, audit_id).await?;
    tx.commit().await?;
    Ok(())
}

/// The policy of a whole scope (`channels`, `plans`, `tenants`, `pools`), if any.
pub async fn policy_of<'e>(db: impl sqlx::PgExecutor<'e>, scope: &str) -> Result<Option<Policy>, sqlx::Error> {
    let row = sqlx::query(&format!("select {POLICY_COLUMNS} from approval_policy where scope = $1"))
        .bind(scope)
        .fetch_optional(db)
        .await?;
    row.as_ref().map(policy).transpose()
}

/// 409 naming the policy when one applies to `scope` (`channels`, `plans`, `tenants`): its
/// writes go through change requests. Called in the write's transaction, after the
/// configuration lock.
pub async fn refuse_scope<'e>(db: impl sqlx::PgExecutor<'e>, scope: &str) -> Result<(), crate::error::ChangeError> {
    if let Some(p) = policy_of(db, scope).await? {
        return Err(crate::error::ChangeError::Blocked {
            field: "policy".into(),
            rule: format!(
                "approval policy {scope:?} applies: propose the change with POST /api/v1/changes ({} approval(s) by {})",
                p.required_approvals,
                p.approver_roles.join(" or ")
            ),
        });
    }
    Ok(())
}
