//! The tenant and grant tables; every change republishes the tenant.

use api::tenants::TenantSummary;
use chrono::{DateTime, Utc};
use client::quota::{FallbackPolicy, Grant, GrantId, GrantKind, TenantId};
use serde_json::{json, Value};
use sqlx::{PgConnection, PgPool, Row};

use super::*;
use crate::change::store::{lock, publish};
use crate::change::{check_version, Ctx, Written};
use crate::error::ChangeError;
use crate::inputs::*;
use crate::plans::store::plan_in;

pub(crate) fn grant_json(r: &sqlx::postgres::PgRow, with_state: bool) -> Result<Value, sqlx::Error> {
    let kind: String = r.try_get("kind")?;
    let mut grant = json!({
        "id": r.try_get::<String, _>("id")?,
        "kind": kind,
        "amount": r.try_get::<i64, _>("amount")?,
        "starts_at": r.try_get::<Option<DateTime<Utc>>, _>("starts_at")?,
        "expires_at": r.try_get::<Option<DateTime<Utc>>, _>("expires_at")?,
    });
    if kind == "bonus" {
        grant["priority"] = json!(r.try_get::<i32, _>("priority")?);
    }
    if with_state {
        grant["created_at"] = json!(r.try_get::<DateTime<Utc>, _>("created_at")?);
        grant["revoked_at"] = json!(r.try_get::<Option<DateTime<Utc>>, _>("revoked_at")?);
    }
    Ok(grant)
}

/// Compiles a tenant's published quota (without `version`) from its rows.
pub(crate) async fn compile_tenant(tx: &mut PgConnection, tenant: &str) -> Result<Option<(i64, Value)>, sqlx::Error> {
    let Some(row) = sqlx::query(
        "select t.reservation_ttl_ms, t.retention_days, t.idempotency_window_ms, t.fallback_policy,
                t.fallback_allowance, t.version,
                p.monthly_tokens, p.daily_requests, p.concurrency
         from tenant t join plan p on p.name = t.plan where t.name = $1",
    )
    .bind(tenant)
    .fetch_optional(&mut *tx)
    .await?
    else {
        return Ok(None);
    };
    let grants = sqlx::query(
        "select id, kind, priority, amount, starts_at, expires_at, created_at, revoked_at from quota_grant
         where tenant = $1 and revoked_at is null order by created_at, id",
    )
    .bind(tenant)
    .fetch_all(&mut *tx)
    .await?;
    let grants = grants.iter().map(|g| grant_json(g, false)).collect::<Result<Vec<_>, _>>()?;
    let policy: String = row.try_get("fallback_policy")?;
    let fallback = match row.try_get::<Option<i64>, _>("fallback_allowance")? {
        Some(allowance) => json!({"policy": policy, "allowance": allowance}),
        None => json!({"policy": policy}),
    };
    Ok(Some((
        row.try_get("version")?,
        json!({
            "monthly_tokens": row.try_get::<i64, _>("monthly_tokens")?,
            "daily_requests": row.try_get::<i64, _>("daily_requests")?,
            "concurrency": row.try_get::<i32, _>("concurrency")?,
            "grants": grants,
            "reservation_ttl": row.try_get::<i64, _>("reservation_ttl_ms")?,
            "retention_days": row.try_get::<i32, _>("retention_days")?,
            "idempotency_window": row.try_get::<i64, _>("idempotency_window_ms")?,
            "fallback": fallback,
        }),
    )))
}

/// Republishes every tenant on `plan` (its limits just changed), in name order, in the
/// caller's transaction: `written` (the plan's own change) and each tenant's, in order.
pub(crate) async fn republish_on_plan(
    tx: &mut PgConnection,
    ctx: &Ctx<'_>,
    plan: &str,
    mut written: Vec<Written>,
) -> Result<Vec<Written>, ChangeError> {
    let tenants: Vec<String> = sqlx::query_scalar("select name from tenant where plan = $1 order by name")
        .bind(plan)
        .fetch_all(&mut *tx)
        .await?;
    for tenant in tenants {
        lock(&mut *tx, &crate::change::Entity::tenant_key(&tenant)).await?;
        written.push(republish_tenant(&mut *tx, ctx, &tenant, "tenant.plan_changed").await?);
    }
    Ok(written)
}

pub(crate) async fn republish_tenant(
    tx: &mut PgConnection,
    ctx: &Ctx<'_>,
    tenant: &str,
    action: &str,
) -> Result<Written, ChangeError> {
    let (_, body) =
        compile_tenant(tx, tenant).await?.ok_or_else(|| ChangeError::NotFound(format!("unknown tenant {tenant:?}")))?;
    let entity = crate::change::Entity::tenant_key(tenant);
    let written = publish(tx, ctx, &entity, action, &body).await?;
    sqlx::query("update tenant set version = $2, updated_at = now() where name = $1")
        .bind(tenant)
        .bind(written.version)
        .execute(&mut *tx)
        .await?;
    // The tenant's settings at this version, for its history and a restore.
    sqlx::query(
        "insert into config_history (entity, config_version, body, actor, action)
         select $1, $2, jsonb_build_object('plan', plan, 'reservation_ttl_ms', reservation_ttl_ms,
                 'retention_days', retention_days, 'idempotency_window_ms', idempotency_window_ms,
                 'fallback', case when fallback_allowance is null then jsonb_build_object('policy', fallback_policy)
                     else jsonb_build_object('policy', fallback_policy, 'allowance', fallback_allowance) end),
             $3, $4
         from tenant where name = $5
         on conflict (entity, config_version) do nothing",
    )
    .bind(&entity)
    .bind(written.version)
    .bind(ctx.actor)
    .bind(action)
    .bind(tenant)
    .execute(&mut *tx)
    .await?;
    Ok(written)
}

/// The plan a tenant is on.
pub(crate) async fn tenant_plan(conn: &mut PgConnection, tenant: &str) -> Result<Option<String>, sqlx::Error> {
    sqlx::query_scalar("select plan from tenant where name = $1").bind(tenant).fetch_optional(conn).await
}

/// A tenant's recorded versions (its plan and settings at each), after `after`, oldest
/// first. Versions published before the history was kept are not recorded.
async fn tenant_versions(
    conn: &mut PgConnection,
    tenant: &TenantId,
    after: i64,
) -> Result<Vec<api::pools::PoolVersion>, sqlx::Error> {
    let rows = sqlx::query(
        "select config_version, created_at, actor, action, body from config_history
         where entity = $1 and config_version > $2 order by config_version",
    )
    .bind(crate::change::Entity::tenant_key(tenant))
    .bind(after)
    .fetch_all(&mut *conn)
    .await?;
    rows.iter().map(crate::pools::history::store::version_row).collect()
}

/// A tenant's current version and its recorded versions, newest first; `None` for an
/// unknown tenant.
pub async fn tenant_history(db: &PgPool, tenant: &TenantId) -> Result<Option<api::pools::PoolHistory>, sqlx::Error> {
    let mut conn = db.acquire().await?;
    let Some(version) = sqlx::query_scalar::<_, i64>("select version from tenant where name = $1")
        .bind(tenant.as_str())
        .fetch_optional(&mut *conn)
        .await?
    else {
        return Ok(None);
    };
    let versions = tenant_versions(&mut conn, tenant, 0).await?.into_iter().rev().collect();
    Ok(Some(api::pools::PoolHistory { version, versions }))
}

/// Makes a new version of a tenant whose plan and settings equal those of its version
/// `version` (made against `expected_version`), audited as `tenant.restore_version` and
/// republished. Grants are not part of it: they keep their own lifecycle (an id is never
/// reused; a revoked grant stays revoked). Refused, changing nothing: an unknown tenant or
/// version (404), the current version (422), a version naming a plan that no longer
/// exists (422, field `plan`). Answers what was written and the versions it undoes.
pub async fn restore_tenant(
    db: &PgPool,
    ctx: &Ctx<'_>,
    tenant: &TenantId,
    version: i64,
    expected_version: i64,
) -> Result<(Written, Vec<api::pools::PoolVersion>), ChangeError> {
    let mut tx = db.begin().await?;
    crate::change::store::lock(&mut tx, "tenants").await?;
    crate::gate::policy::store::refuse_scope(&mut *tx, "tenants").await?;
    let done = restore_tenant_tx(&mut tx, ctx, tenant, version, expected_version).await?;
    tx.commit().await?;
    Ok(done)
}

/// [`restore_tenant`] in the caller's transaction (which holds the configuration lock or takes
/// it here), without the approval policy's check: what an approved change request applies.
pub(crate) async fn restore_tenant_tx(
    tx: &mut PgConnection,
    ctx: &Ctx<'_>,
    tenant: &TenantId,
    version: i64,
    expected_version: i64,
) -> Result<(Written, Vec<api::pools::PoolVersion>), ChangeError> {
    let entity = crate::change::Entity::tenant_key(tenant);
    lock(&mut *tx, &entity).await?;
    let current: i64 = sqlx::query_scalar("select version from tenant where name = $1")
        .bind(tenant.as_str())
        .fetch_optional(&mut *tx)
        .await?
        .ok_or_else(|| ChangeError::NotFound(format!("unknown tenant {:?}", tenant.as_str())))?;
    check_version(&entity, Some(expected_version), current)?;
    if version == current {
        return Err(invalid("version", format!("{version} is the tenant's current version")));
    }
    let since = tenant_versions(&mut *tx, tenant, version - 1).await?;
    let target = since.first().filter(|v| v.version == version).ok_or_else(|| {
        ChangeError::NotFound(format!("tenant {:?} has no recorded version {version}", tenant.as_str()))
    })?;
    let spec: TenantSpec = serde_json::from_value(target.snapshot.clone())
        .map_err(|e| invalid("version", format!("version {version} cannot be read back: {e}")))?;
    let undoes = since[1..].to_vec();
    let written = write_tenant(&mut *tx, ctx, tenant, &spec, "tenant.restore_version").await?;
    Ok((written, undoes))
}

/// The name of every tenant the jobs keep: those of the configuration tables and those
/// only published (a snapshot not adopted into the tables is still served and swept), in
/// order.
pub async fn tenant_names(db: &PgPool) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar(
        "select name from tenant
         union select substr(entity, 8) from snapshot where left(entity, 7) = 'tenant:' group by entity order by 1",
    )
    .fetch_all(db)
    .await
}

/// Every tenant's name, plan and version.
pub async fn list_tenants(db: &PgPool) -> Result<Vec<TenantSummary>, sqlx::Error> {
    let rows = sqlx::query(
        "select t.name, t.plan, t.version, t.updated_at,
                (select count(*) from quota_grant g where g.tenant = t.name and g.revoked_at is null
                    and (g.expires_at is null or g.expires_at > now())) as live_grants
         from tenant t order by t.name",
    )
    .fetch_all(db)
    .await?;
    rows.iter()
        .map(|r| {
            Ok(TenantSummary {
                name: r.try_get("name")?,
                plan: r.try_get("plan")?,
                version: r.try_get("version")?,
                updated_at: crate::inputs::rfc3339(r.try_get("updated_at")?),
                live_grants: r.try_get("live_grants")?,
            })
        })
        .collect()
}

/// The orders the tenants list offers (each a fixed `order by`, ties broken by name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TenantSort {
    Name,
    Plan,
    Tokens,
    Updated,
}

impl TenantSort {
    fn order_by(self) -> &'static str {
        match self {
            Self::Name => "t.name",
            Self::Plan => "t.plan, t.name",
            Self::Tokens => "p.monthly_tokens desc, t.name",
            Self::Updated => "t.updated_at desc, t.name",
        }
    }
}

/// A row of the tenants list.
#[derive(Debug, Clone)]
pub struct TenantListed {
    pub name: String,
    pub plan: String,
    pub version: i64,
    pub monthly_tokens: i64,
    pub live_grants: i64,
}

/// A page of tenants whose name or plan holds `search` (any case), in `sort` order, and
/// how many match in all.
pub async fn list_tenant_page(
    db: &PgPool,
    search: Option<&str>,
    sort: TenantSort,
    limit: i64,
    offset: i64,
) -> Result<(Vec<TenantListed>, i64), sqlx::Error> {
    // `%` and `_` typed in the search are matched as themselves.
    let pattern = search.map(crate::store::like_pattern);
    let filter = "($1::text is null or t.name ilike $1 or t.plan ilike $1)";
    let total: i64 = sqlx::query_scalar(&format!("select count(*) from tenant t where {filter}"))
        .bind(&pattern)
        .fetch_one(db)
        .await?;
    let rows = sqlx::query(&format!(
        "select t.name, t.plan, t.version, p.monthly_tokens,
                (select count(*) from quota_grant g where g.tenant = t.name and g.revoked_at is null
                    and (g.expires_at is null or g.expires_at > now())) as live_grants
         from tenant t join plan p on p.name = t.plan
         where {filter}
         order by {}
         limit $2 offset $3",
        sort.order_by()
    ))
    .bind(&pattern)
    .bind(limit)
    .bind(offset)
    .fetch_all(db)
    .await?;
    let listed = rows
        .iter()
        .map(|r| {
            Ok(TenantListed {
                name: r.try_get("name")?,
                plan: r.try_get("plan")?,
                version: r.try_get("version")?,
                monthly_tokens: r.try_get("monthly_tokens")?,
                live_grants: r.try_get("live_grants")?,
            })
        })
        .collect::<Result<Vec<_>, sqlx::Error>>()?;
    Ok((listed, total))
}

/// One tenant: settings, every grant, and the published snapshot.
pub async fn get_tenant(db: &PgPool, tenant: &TenantId) -> Result<Option<Tenant>, sqlx::Error> {
    let mut conn = db.acquire().await?;
    let Some((version, snapshot)) = compile_tenant(&mut conn, tenant.as_str()).await? else {
        return Ok(None);
    };
    let row = sqlx::query(
        "select name, plan, reservation_ttl_ms, retention_days, idempotency_window_ms, fallback_policy,
                fallback_allowance, updated_at
         from tenant where name = $1",
    )
    .bind(tenant.as_str())
    .fetch_one(&mut *conn)
    .await?;
    let grants = sqlx::query(
        "select id, kind, priority, amount, starts_at, expires_at, created_at, revoked_at from quota_grant
         where tenant = $1 order by created_at, id",
    )
    .bind(tenant.as_str())
    .fetch_all(&mut *conn)
    .await?;
    Ok(Some(Tenant {
        name: row.try_get("name")?,
        plan: row.try_get("plan")?,
        reservation_ttl_ms: row.try_get("reservation_ttl_ms")?,
        retention_days: row.try_get("retention_days")?,
        idempotency_window_ms: row.try_get("idempotency_window_ms")?,
        fallback: snapshot["fallback"].clone(),
        version,
        updated_at: row.try_get("updated_at")?,
        grants: grants.iter().map(|g| grant_json(g, true)).collect::<Result<_, _>>()?,
        snapshot,
    }))
}

/// Creates (`expected_version` 0) or changes a tenant's plan assignment and settings.
pub async fn put_tenant(
    db: &PgPool,
    ctx: &Ctx<'_>,
    tenant: &TenantId,
    spec: &TenantSpec,
    expected_version: i64,
) -> Result<Written, ChangeError> {
    let mut tx = db.begin().await?;
    crate::change::store::lock(&mut tx, "tenants").await?;
    crate::gate::policy::store::refuse_scope(&mut *tx, "tenants").await?;
    let done = put_tenant_tx(&mut tx, ctx, tenant, spec, expected_version).await?;
    tx.commit().await?;
    Ok(done)
}

/// [`put_tenant`] in the caller's transaction (which holds the configuration lock or takes
/// it here), without the approval policy's check: what an approved change request applies.
pub(crate) async fn put_tenant_tx(
    tx: &mut PgConnection,
    ctx: &Ctx<'_>,
    tenant: &TenantId,
    spec: &TenantSpec,
    expected_version: i64,
) -> Result<Written, ChangeError> {
    let entity = crate::change::Entity::tenant_key(tenant);
    lock(&mut *tx, &entity).await?;
    let current: Option<i64> = sqlx::query_scalar("select version from tenant where name = $1")
        .bind(tenant.as_str())
        .fetch_optional(&mut *tx)
        .await?;
    check_version(&entity, Some(expected_version), current.unwrap_or(0))?;
    let action = if current.is_some() { "tenant.update" } else { "tenant.create" };
    let written = write_tenant(&mut *tx, ctx, tenant, spec, action).await?;
    Ok(written)
}

/// Writes a tenant's plan and settings (the caller holds its lock) and republishes it as
/// `action`.
async fn write_tenant(
    tx: &mut PgConnection,
    ctx: &Ctx<'_>,
    tenant: &TenantId,
    spec: &TenantSpec,
    action: &str,
) -> Result<Written, ChangeError> {
    spec.validate()?;
    if plan_in(&mut *tx, spec.plan.as_str()).await?.is_none() {
        return Err(invalid(
            "plan",
            format!("unknown plan {:?}: create it first (POST /api/v1/plans)", spec.plan.as_str()),
        ));
    }
    let (policy, allowance) = match spec.fallback {
        FallbackPolicy::FailClosed => ("fail_closed", None),
        FallbackPolicy::FailOpenLimited { allowance } => ("fail_open_limited", Some(allowance.get() as i64)),
    };
    sqlx::query(
        "insert into tenant (name, plan, reservation_ttl_ms, retention_days, fallback_policy, fallback_allowance, version,
             idempotency_window_ms)
         values ($1, $2, $3, $4, $5, $6, 1, $7)
         on conflict (name) do update set plan = excluded.plan, reservation_ttl_ms = excluded.reservation_ttl_ms,
             retention_days = excluded.retention_days, idempotency_window_ms = excluded.idempotency_window_ms,
             fallback_policy = excluded.fallback_policy,
             fallback_allowance = excluded.fallback_allowance, updated_at = now()",
    )
    .bind(tenant.as_str())
    .bind(spec.plan.as_str())
    .bind(spec.reservation_ttl_ms)
    .bind(spec.retention_days as i32)
    .bind(policy)
    .bind(allowance)
    .bind(spec.idempotency_window_ms)
    .execute(&mut *tx)
    .await?;
    republish_tenant(tx, ctx, tenant.as_str(), action).await
}

/// Adds a grant to a tenant; refused when its id is taken (revoked ones included) or when
/// it has already expired at `now`.
pub async fn add_grant(
    db: &PgPool,
    ctx: &Ctx<'_>,
    tenant: &TenantId,
    grant: &NewGrant,
    expected_version: Option<i64>,
    now: DateTime<Utc>,
) -> Result<Written, ChangeError> {
    if let Some(expires) = grant.expires_at {
        if expires <= now {
            return Err(invalid(
                "expires_at",
                format!("the grant has already expired ({expires} is not after now, {now})"),
            ));
        }
        if grant.starts_at.is_some_and(|starts| expires <= starts) {
            return Err(invalid("expires_at", "must be after starts_at"));
        }
    }
    // The same rules as the published quota (a kind, a live window), checked once more.
    let as_grant = Grant {
        id: grant.id.clone(),
        kind: grant.kind,
        amount: grant.amount,
        starts_at: grant.starts_at,
        expires_at: grant.expires_at,
    };
    let entity = crate::change::Entity::tenant_key(tenant);
    let mut tx = db.begin().await?;
    lock(&mut tx, &entity).await?;
    let current: Option<i64> = sqlx::query_scalar("select version from tenant where name = $1")
        .bind(tenant.as_str())
        .fetch_optional(&mut *tx)
        .await?;
    let current = current.ok_or_else(|| ChangeError::NotFound(format!("unknown tenant {:?}", tenant.as_str())))?;
    check_version(&entity, expected_version, current)?;
    let taken: Option<Option<DateTime<Utc>>> =
        sqlx::query_scalar("select revoked_at from quota_grant where tenant = $1 and id = $2")
            .bind(tenant.as_str())
            .bind(grant.id.as_str())
            .fetch_optional(&mut *tx)
            .await?;
    if let Some(revoked) = taken {
        let state = if revoked.is_some() { "a revoked grant" } else { "a grant" };
        return Err(ChangeError::Duplicate {
            field: "id".into(),
            rule: format!("{state} with id {:?} exists; ids are never reused", grant.id.as_str()),
        });
    }
    let (kind, priority) = match as_grant.kind {
        GrantKind::Temporary => ("temporary", 0),
        GrantKind::Bonus { priority } => ("bonus", priority),
    };
    if priority > i32::MAX as u32 {
        return Err(invalid("priority", format!("must be at most {}", i32::MAX)));
    }
    sqlx::query(
        "insert into quota_grant (tenant, id, kind, priority, amount, starts_at, expires_at) values ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(tenant.as_str())
    .bind(as_grant.id.as_str())
    .bind(kind)
    .bind(priority as i32)
    .bind(as_grant.amount.get() as i64)
    .bind(as_grant.starts_at)
    .bind(as_grant.expires_at)
    .execute(&mut *tx)
    .await?;
    let written = republish_tenant(&mut tx, ctx, tenant.as_str(), "tenant.grant").await?;
    tx.commit().await?;
    Ok(written)
}

/// Revokes a grant: it is no longer published (its tokens stop being available); the row
/// stays, marked revoked.
pub async fn revoke_grant(
    db: &PgPool,
    ctx: &Ctx<'_>,
    tenant: &TenantId,
    id: &GrantId,
    expected_version: Option<i64>,
) -> Result<Written, ChangeError> {
    let entity = crate::change::Entity::tenant_key(tenant);
    let mut tx = db.begin().await?;
    lock(&mut tx, &entity).await?;
    let current: Option<i64> = sqlx::query_scalar("select version from tenant where name = $1")
        .bind(tenant.as_str())
        .fetch_optional(&mut *tx)
        .await?;
    let current = current.ok_or_else(|| ChangeError::NotFound(format!("unknown tenant {:?}", tenant.as_str())))?;
    check_version(&entity, expected_version, current)?;
    let revoked: Option<Option<DateTime<Utc>>> =
        sqlx::query_scalar("select revoked_at from quota_grant where tenant = $1 and id = $2")
            .bind(tenant.as_str())
            .bind(id.as_str())
            .fetch_optional(&mut *tx)
            .await?;
    match revoked {
        None => {
            return Err(ChangeError::NotFound(format!("tenant {:?} has no grant {:?}", tenant.as_str(), id.as_str())))
        }
        Some(Some(at)) => return Err(invalid("id", format!("grant {:?} was already revoked at {at}", id.as_str()))),
        Some(None) => {}
    }
    sqlx::query("update quota_grant set revoked_at = now() where tenant = $1 and id = $2")
        .bind(tenant.as_str())
        .bind(id.as_str())
        .execute(&mut *tx)
        .await?;
    let written = republish_tenant(&mut tx, ctx, tenant.as_str(), "tenant.revoke").await?;
    tx.commit().await?;
    Ok(written)
}
