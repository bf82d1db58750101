//! The plan table. A change to a plan's limits republishes every tenant on it: the
//! tenants module does that, in the same transaction (`tenants::update_plan`).

use serde_json::{json, Value};
use sqlx::{PgConnection, PgPool, Row};

use super::*;
use crate::change::store::{audit, lock};
use crate::change::{check_version, Ctx, Written};
use crate::error::ChangeError;
use crate::inputs::*;

// ---------------------------------------------------------------------------------------
// Plans and tenants
// ---------------------------------------------------------------------------------------

pub(crate) fn plan_row(r: &sqlx::postgres::PgRow) -> Result<Plan, sqlx::Error> {
    Ok(Plan {
        name: r.try_get("name")?,
        monthly_tokens: r.try_get("monthly_tokens")?,
        daily_requests: r.try_get("daily_requests")?,
        concurrency: r.try_get("concurrency")?,
        version: r.try_get("version")?,
        created_at: crate::inputs::rfc3339(r.try_get("created_at")?),
        updated_at: crate::inputs::rfc3339(r.try_get("updated_at")?),
        tenants: r.try_get("tenants")?,
    })
}

pub(crate) const PLAN_COLUMNS: &str =
    "p.name, p.monthly_tokens, p.daily_requests, p.concurrency, p.version, p.created_at, p.updated_at,
     (select count(*) from tenant t where t.plan = p.name) as tenants";

pub(crate) fn plan_json(p: &Plan) -> Value {
    json!({"name": p.name, "monthly_tokens": p.monthly_tokens, "daily_requests": p.daily_requests,
           "concurrency": p.concurrency, "version": p.version})
}

/// Every plan, by name.
pub async fn list_plans(db: &PgPool) -> Result<Vec<Plan>, sqlx::Error> {
    let rows = sqlx::query(&format!("select {PLAN_COLUMNS} from plan p order by p.name")).fetch_all(db).await?;
    rows.iter().map(plan_row).collect()
}

pub(crate) async fn plan_in(tx: &mut PgConnection, name: &str) -> Result<Option<Plan>, sqlx::Error> {
    let row = sqlx::query(&format!("select {PLAN_COLUMNS} from plan p where p.name = $1"))
        .bind(name)
        .fetch_optional(tx)
        .await?;
    row.as_ref().map(plan_row).transpose()
}

/// One plan.
pub async fn get_plan(db: &PgPool, name: &PlanName) -> Result<Option<Plan>, sqlx::Error> {
    let mut conn = db.acquire().await?;
    plan_in(&mut conn, name.as_str()).await
}

/// Creates a plan; 409 when the name is taken.
pub async fn create_plan(
    db: &PgPool,
    ctx: &Ctx<'_>,
    name: &PlanName,
    spec: &PlanSpec,
) -> Result<(Written, Plan), ChangeError> {
    let mut tx = db.begin().await?;
    crate::change::store::lock(&mut tx, "plans").await?;
    crate::gate::policy::store::refuse_scope(&mut *tx, "plans").await?;
    let done = create_plan_tx(&mut tx, ctx, name, spec).await?;
    tx.commit().await?;
    Ok(done)
}

/// [`create_plan`] in the caller's transaction (which holds the configuration lock or takes
/// it here), without the approval policy's check: what an approved change request applies.
pub(crate) async fn create_plan_tx(
    tx: &mut PgConnection,
    ctx: &Ctx<'_>,
    name: &PlanName,
    spec: &PlanSpec,
) -> Result<(Written, Plan), ChangeError> {
    let entity = format!("plan:{name}");
    lock(&mut *tx, &entity).await?;
    if plan_in(&mut *tx, name.as_str()).await?.is_some() {
        return Err(ChangeError::Duplicate { field: "name".into(), rule: format!("plan {:?} exists", name.as_str()) });
    }
    sqlx::query("insert into plan (name, monthly_tokens, daily_requests, concurrency) values ($1, $2, $3, $4)")
        .bind(name.as_str())
        .bind(spec.monthly_tokens.get() as i64)
        .bind(spec.daily_requests.get() as i64)
        .bind(spec.concurrency as i32)
        .execute(&mut *tx)
        .await?;
    let plan = plan_in(&mut *tx, name.as_str()).await?.expect("just inserted");
    let audit_id = audit(&mut *tx, ctx, &entity, "plan.create", None, Some(&plan_json(&plan))).await?;
    Ok((Written { entity, action: "plan.create".into(), version: 1, audit_id, outbox_id: None }, plan))
}

/// Changes a plan's limits in the caller's transaction (which holds the configuration lock
/// or takes it here), without the approval policy's check and without republishing its
/// tenants: `tenants::update_plan_tx` does both.
pub(crate) async fn update_plan_tx(
    tx: &mut PgConnection,
    ctx: &Ctx<'_>,
    name: &PlanName,
    spec: &PlanSpec,
    expected_version: i64,
) -> Result<(Written, Plan), ChangeError> {
    let entity = format!("plan:{name}");
    lock(&mut *tx, &entity).await?;
    let before = plan_in(&mut *tx, name.as_str())
        .await?
        .ok_or_else(|| ChangeError::NotFound(format!("unknown plan {:?}", name.as_str())))?;
    check_version(&entity, Some(expected_version), before.version)?;
    let changed = write_plan(&mut *tx, ctx, before, spec, "plan.update").await?;
    Ok(changed)
}

/// A plan's recorded versions, newest first, from its audit rows (each holds the plan as
/// it was written, version included): who made each and how. `None` for an unknown plan.
pub async fn plan_history(db: &PgPool, name: &PlanName) -> Result<Option<api::pools::PoolHistory>, sqlx::Error> {
    let mut conn = db.acquire().await?;
    let Some(plan) = plan_in(&mut conn, name.as_str()).await? else { return Ok(None) };
    let versions = plan_versions(&mut conn, name, 0).await?.into_iter().rev().collect();
    Ok(Some(api::pools::PoolHistory { version: plan.version, versions }))
}

/// The plan's versions after `after`, oldest first.
async fn plan_versions(
    conn: &mut PgConnection,
    name: &PlanName,
    after: i64,
) -> Result<Vec<api::pools::PoolVersion>, sqlx::Error> {
    let rows = sqlx::query(
        // A time chrono cannot hold (an owner wrote `infinity`) reads as the epoch, as in
        // the audit list: the history still answers.
        "select (after->>'version')::bigint as config_version,
                coalesce(case when at between timestamptz '1970-01-01Z' and timestamptz '9999-12-31Z' then at end,
                         timestamptz '1970-01-01Z') as created_at,
                actor, action, after as body from audit
         where entity = $1 and action in ('plan.create', 'plan.update', 'plan.restore_version')
             and (after->>'version')::bigint > $2
         order by id",
    )
    .bind(format!("plan:{name}"))
    .bind(after)
    .fetch_all(&mut *conn)
    .await?;
    rows.iter().map(crate::pools::history::store::version_row).collect()
}

/// Makes a new version of a plan whose limits equal those of its version `version` (made
/// against `expected_version`), audited as `plan.restore_version`, in the caller's
/// transaction, without the policy's check and without republishing its tenants
/// (`tenants::restore_plan_tx` does both): 404 unknown plan or version, 409 a stale
/// version, 422 the current version. Answers what was written, the plan, and the versions
/// it undoes (oldest first).
pub(crate) async fn restore_plan_tx(
    tx: &mut PgConnection,
    ctx: &Ctx<'_>,
    name: &PlanName,
    version: i64,
    expected_version: i64,
) -> Result<(Written, Plan, Vec<api::pools::PoolVersion>), ChangeError> {
    let entity = format!("plan:{name}");
    lock(&mut *tx, &entity).await?;
    let before = plan_in(&mut *tx, name.as_str())
        .await?
        .ok_or_else(|| ChangeError::NotFound(format!("unknown plan {:?}", name.as_str())))?;
    check_version(&entity, Some(expected_version), before.version)?;
    if version == before.version {
        return Err(invalid("version", format!("{version} is the plan's current version")));
    }
    let since = plan_versions(&mut *tx, name, version - 1).await?;
    let target = since
        .first()
        .filter(|v| v.version == version)
        .ok_or_else(|| ChangeError::NotFound(format!("plan {:?} has no recorded version {version}", name.as_str())))?;
    let limits = &target.snapshot;
    let spec: PlanSpec = serde_json::from_value(json!({"monthly_tokens": limits["monthly_tokens"],
        "daily_requests": limits["daily_requests"], "concurrency": limits["concurrency"]}))
    .map_err(|e| invalid("version", format!("version {version} cannot be read back: {e}")))?;
    let undoes = since[1..].to_vec();
    let (written, plan) = write_plan(&mut *tx, ctx, before, &spec, "plan.restore_version").await?;
    Ok((written, plan, undoes))
}

/// Writes `spec` over the plan `before` (locked by the caller), audited as `action`.
async fn write_plan(
    tx: &mut PgConnection,
    ctx: &Ctx<'_>,
    before: Plan,
    spec: &PlanSpec,
    action: &str,
) -> Result<(Written, Plan), ChangeError> {
    let entity = format!("plan:{}", before.name);
    let name = before.name.clone();
    sqlx::query(
        "update plan set monthly_tokens = $2, daily_requests = $3, concurrency = $4, version = version + 1, updated_at = now()
         where name = $1",
    )
    .bind(name.as_str())
    .bind(spec.monthly_tokens.get() as i64)
    .bind(spec.daily_requests.get() as i64)
    .bind(spec.concurrency as i32)
    .execute(&mut *tx)
    .await?;
    let after = plan_in(&mut *tx, name.as_str()).await?.expect("exists");
    let audit_id = audit(&mut *tx, ctx, &entity, action, Some(&plan_json(&before)), Some(&plan_json(&after))).await?;
    Ok((Written { entity, action: action.into(), version: after.version, audit_id, outbox_id: None }, after))
}
