//! Starting a ramp: the plan checked against the pool as it is (its configuration version,
//! its kind, no other live ramp, registered and enabled channels, every step a valid
//! configuration), recorded and audited as `ramp.start`, and its first step published.

use chrono::{DateTime, Utc};
use client::pool::{PoolKind, PoolName};
use serde_json::json;
use sqlx::PgConnection;

use super::plan::{describe_guard, PlanInput};
use super::run::{event, move_to, Written};
use super::store::{self, NewRamp, RampRow};
use crate::audit::store::NewAudit;
use crate::change::Ctx;
use crate::error::ApiError;
use crate::state::AppState;

/// Starts a ramp in the caller's transaction: checks it against the pool (configuration
/// version `expected_version`, a channels pool, no other live ramp, registered channels),
/// records it (audited as `ramp.start`) and publishes its first step.
#[allow(clippy::too_many_arguments)] // each is one fact of the start
pub async fn start_tx(
    state: &AppState,
    tx: &mut PgConnection,
    ctx: &Ctx<'_>,
    pool: &PoolName,
    input: &PlanInput,
    expected_version: i64,
    change_request: Option<i64>,
    now: DateTime<Utc>,
) -> Result<(RampRow, Written), ApiError> {
    let entity = crate::change::Entity::pool_key(pool);
    crate::change::store::lock(&mut *tx, &entity).await?;
    if let Some(live) = store::live_ramp_of(&mut *tx, pool.as_str()).await? {
        return Err(ApiError::Blocked {
            field: "pool".into(),
            rule: format!("ramp {live} is live on pool {:?}: complete or abort it first", pool.as_str()),
        });
    }
    let (config_version, body) = crate::pools::store::compile_pool(&mut *tx, pool.as_str())
        .await?
        .ok_or_else(|| crate::pools::unknown_pool(pool))?;
    crate::change::check_version(&entity, Some(expected_version), config_version)?;
    let snapshot = crate::pools::parse_pool_body(&body)?;
    if snapshot.kind != PoolKind::Channels {
        return Err(ApiError::Unprocessable {
            field: "pool".into(),
            rule: "a ramp moves a channels pool's weights; this pool draws tiers".into(),
        });
    }
    let plan = input.parse(&snapshot.weights)?;
    super::plan::check_steps(&plan, &snapshot)?;
    for member in plan.steps.iter().flat_map(|s| s.weights.members()) {
        match crate::channels::store::channel_in(&mut *tx, member).await? {
            Some(c) if c.enabled => {}
            Some(_) => {
                return Err(ApiError::Unprocessable {
                    field: "plan.target".into(),
                    rule: format!("channel {member:?} is disabled: enable it before ramping onto it"),
                })
            }
            None => {
                return Err(ApiError::Unprocessable {
                    field: "plan.target".into(),
                    rule: format!("unknown channel {member:?}: register it first"),
                })
            }
        }
    }
    let plan_json = serde_json::to_value(&plan).map_err(|e| ApiError::Unexpected(e.into()))?;
    let baseline_json = serde_json::to_value(&snapshot.weights).map_err(|e| ApiError::Unexpected(e.into()))?;
    let reason = ctx.reason.unwrap_or("a ramp");
    let mut row = store::insert_ramp(
        &mut *tx,
        &NewRamp {
            pool: pool.as_str(),
            plan: &plan_json,
            baseline: &baseline_json,
            config_version,
            now,
            created_by: ctx.actor,
            reason,
            change_request,
        },
    )
    .await?;
    let audit = crate::audit::store::insert_audit(
        &mut *tx,
        &NewAudit {
            actor: ctx.actor,
            source: ctx.source,
            action: "ramp.start",
            entity: &super::entity(row.id),
            before: None,
            after: Some(&json!({"pool": pool.as_str(), "baseline": baseline_json, "plan": plan_json})),
            reason: Some(reason),
            request_id: ctx.request_id,
        },
    )
    .await?;
    let sentence = format!(
        "started by {}: {} steps from {} to {} (canary {}), {}; on a breach: {}",
        ctx.actor,
        plan.steps.len(),
        snapshot.weights,
        plan.steps.last().map(|s| s.weights.to_string()).unwrap_or_default(),
        plan.canary.join(", "),
        if plan.guards.is_empty() {
            "no guards".to_owned()
        } else {
            plan.guards.iter().map(describe_guard).collect::<Vec<_>>().join("; ")
        },
        plan.on_breach.as_str(),
    );
    event(state, tx, &row, now, "start", ctx.actor, &sentence, None, Some(audit.id)).await?;
    let written = move_to(state, tx, &mut row, &plan, &snapshot.weights, 1, ctx.actor, now, false).await?;
    store::save_ramp(&mut *tx, &row).await?;
    Ok((row, written))
}
