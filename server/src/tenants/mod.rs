//! Tenants and their grants: the quota settings published to Redis. [`routes`] is the admin
//! API, [`store`] its SQL.

pub mod routes;
pub mod store;

use chrono::{DateTime, Utc};
use client::quota::{FallbackPolicy, GrantId, GrantKind, Tokens};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::change::{Ctx, Written};
use crate::error::ChangeError;
use crate::inputs::*;
use crate::plans::{PlanName, PlanSpec};
use api::plans::Plan;

pub(crate) fn default_ttl_ms() -> i64 {
    600_000
}

pub(crate) fn default_retention() -> i64 {
    62
}

const MIN_WINDOW_MS: i64 = client::quota::MIN_IDEMPOTENCY_WINDOW.as_millis() as i64;
const MAX_WINDOW_MS: i64 = client::quota::MAX_IDEMPOTENCY_WINDOW.as_millis() as i64;

pub(crate) fn default_idempotency_window_ms() -> i64 {
    client::quota::DEFAULT_IDEMPOTENCY_WINDOW.as_millis() as i64
}

pub(crate) fn default_fallback() -> FallbackPolicy {
    FallbackPolicy::FailClosed
}

/// A tenant's settings: its plan and how its reservations behave.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct TenantSpec {
    pub plan: PlanName,
    /// How long a reservation stays open before the sweeper returns it, 1..=86400000 ms.
    #[serde(default = "default_ttl_ms", deserialize_with = "crate::inputs::integer")]
    pub reservation_ttl_ms: i64,
    /// Days a period's counters are kept after it ends, 1..=3660.
    #[serde(default = "default_retention", deserialize_with = "crate::inputs::integer")]
    pub retention_days: i64,
    /// How long Redis itself answers a repeated call of a finished reservation,
    /// 60000..=34560000000 ms (a minute to 400 days); after it, the usage ledger does.
    #[serde(default = "default_idempotency_window_ms", deserialize_with = "crate::inputs::integer")]
    pub idempotency_window_ms: i64,
    /// What clients do while Redis is unreachable (default `fail_closed`).
    #[serde(default = "default_fallback")]
    pub fallback: FallbackPolicy,
}

impl TenantSpec {
    fn validate(&self) -> Result<(), ChangeError> {
        if !(1..=86_400_000).contains(&self.reservation_ttl_ms) {
            return Err(invalid("reservation_ttl_ms", "must be in 1..=86400000 (one day)"));
        }
        if !(1..=3660).contains(&self.retention_days) {
            return Err(invalid("retention_days", "must be in 1..=3660"));
        }
        if !(MIN_WINDOW_MS..=MAX_WINDOW_MS).contains(&self.idempotency_window_ms) {
            return Err(invalid(
                "idempotency_window_ms",
                format!("must be in {MIN_WINDOW_MS}..={MAX_WINDOW_MS} (a minute to 400 days)"),
            ));
        }
        Ok(())
    }
}

/// A grant to add: temporary or bonus tokens, live in `[starts_at, expires_at)`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct NewGrant {
    pub id: GrantId,
    #[serde(flatten)]
    pub kind: GrantKind,
    pub amount: Tokens,
    #[serde(default)]
    pub starts_at: Option<DateTime<Utc>>,
    #[serde(default)]
    pub expires_at: Option<DateTime<Utc>>,
}

/// A tenant as stored: settings, plan limits, grants, and its published snapshot.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Tenant {
    pub name: String,
    pub plan: String,
    pub reservation_ttl_ms: i64,
    pub retention_days: i32,
    pub idempotency_window_ms: i64,
    pub fallback: Value,
    pub version: i64,
    pub updated_at: DateTime<Utc>,
    /// Every grant, revoked ones included (with `revoked_at`).
    pub grants: Vec<Value>,
    /// What is published to Redis.
    pub snapshot: Value,
}

/// Changes a plan's limits and republishes every tenant on it, in one transaction under
/// the configuration lock; 409 where the `plans` approval policy applies.
pub async fn update_plan(
    db: &sqlx::PgPool,
    ctx: &Ctx<'_>,
    name: &PlanName,
    spec: &PlanSpec,
    expected_version: i64,
) -> Result<(Vec<Written>, Plan), ChangeError> {
    let mut tx = db.begin().await?;
    crate::change::store::lock(&mut tx, "plans").await?;
    crate::gate::policy::store::refuse_scope(&mut *tx, "plans").await?;
    let done = update_plan_tx(&mut tx, ctx, name, spec, expected_version).await?;
    tx.commit().await?;
    Ok(done)
}

/// [`update_plan`] in the caller's transaction, without the policy's check: what an
/// approved change request applies.
pub(crate) async fn update_plan_tx(
    tx: &mut sqlx::PgConnection,
    ctx: &Ctx<'_>,
    name: &PlanName,
    spec: &PlanSpec,
    expected_version: i64,
) -> Result<(Vec<Written>, Plan), ChangeError> {
    let (written, plan) = crate::plans::store::update_plan_tx(&mut *tx, ctx, name, spec, expected_version).await?;
    Ok((store::republish_on_plan(tx, ctx, name.as_str(), vec![written]).await?, plan))
}

/// Restores a plan's limits of its version `version` (`plans::store::restore_plan_tx`) and
/// republishes every tenant on it, in one transaction; 409 under the `plans` policy.
pub async fn restore_plan(
    db: &sqlx::PgPool,
    ctx: &Ctx<'_>,
    name: &PlanName,
    version: i64,
    expected_version: i64,
) -> Result<(Vec<Written>, Plan, Vec<api::pools::PoolVersion>), ChangeError> {
    let mut tx = db.begin().await?;
    crate::change::store::lock(&mut tx, "plans").await?;
    crate::gate::policy::store::refuse_scope(&mut *tx, "plans").await?;
    let done = restore_plan_tx(&mut tx, ctx, name, version, expected_version).await?;
    tx.commit().await?;
    Ok(done)
}

/// [`restore_plan`] in the caller's transaction, without the policy's check.
pub(crate) async fn restore_plan_tx(
    tx: &mut sqlx::PgConnection,
    ctx: &Ctx<'_>,
    name: &PlanName,
    version: i64,
    expected_version: i64,
) -> Result<(Vec<Written>, Plan, Vec<api::pools::PoolVersion>), ChangeError> {
    let (written, plan, undoes) =
        crate::plans::store::restore_plan_tx(&mut *tx, ctx, name, version, expected_version).await?;
    Ok((store::republish_on_plan(tx, ctx, name.as_str(), vec![written]).await?, plan, undoes))
}
