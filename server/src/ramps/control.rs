//! A person's controls of a ramp: promote, promote to the end, pause, resume, step back,
//! abort, each with a reason and audited.

use api::ramps::RampState;
use chrono::{DateTime, Utc};
use serde_json::json;

use super::run::{abort, blocked, event, move_to, parse_plan, Written};
use super::store::{self, RampRow};
use crate::audit::store::NewAudit;
use crate::change::Ctx;
use crate::error::ApiError;
use crate::state::AppState;

/// A person's control of a ramp, with their reason; audited as `ramp.<control>` on
/// `ramp:<id>` (and any pool version it writes with source `ramp`). 409 when the ramp's
/// state does not allow it, changing nothing.
pub async fn control(
    state: &AppState,
    ctx: &Ctx<'_>,
    id: i64,
    control: &str,
    now: DateTime<Utc>,
) -> Result<(RampRow, Written), ApiError> {
    let pool: Option<String> = store::ramp(&state.db, id).await?.map(|r| r.pool);
    let mut tx = state.db.begin().await?;
    let Some(pool) = pool else { return Err(ApiError::NotFound(format!("unknown ramp {id}"))) };
    crate::change::store::lock(&mut tx, &crate::change::Entity::pool_key(&pool)).await?;
    let mut row =
        store::ramp_for_update(&mut tx, id).await?.ok_or_else(|| ApiError::NotFound(format!("unknown ramp {id}")))?;
    let (plan, baseline) = parse_plan(&row)?;
    let before = json!({"state": row.state, "step": row.step});
    let total = plan.steps.len() as i32;
    let live = matches!(row.state, RampState::Running | RampState::Paused);
    let actor = ctx.actor;
    let reason = ctx.reason.unwrap_or_default();
    let written = match control {
        "promote" | "promote_to_end" if !live => {
            return Err(blocked(format!("ramp {id} is {}: only a running or paused ramp is promoted", row.state)))
        }
        "promote" | "promote_to_end" => {
            let to = if control == "promote" { row.step + 1 } else { total };
            row.state = RampState::Running;
            let written = move_to(state, &mut tx, &mut row, &plan, &baseline, to, actor, now, false).await?;
            if written.is_none() {
                return Err(blocked(format!(
                    "ramp {id} cannot move the pool: it was changed outside the ramp, or an approval policy now \
                     applies to it; abort the ramp"
                )));
            }
            written
        }
        "pause" if row.state != RampState::Running => {
            return Err(blocked(format!("ramp {id} is {}: only a running ramp is paused", row.state)))
        }
        "pause" => {
            row.state = RampState::Paused;
            event(state, &mut tx, &row, now, "pause", actor, &format!("paused by {actor}: {reason}"), None, None)
                .await?;
            None
        }
        "resume" if row.state != RampState::Paused => {
            return Err(blocked(format!("ramp {id} is {}: only a paused ramp is resumed", row.state)))
        }
        "resume" => {
            let now_at = store::config_version(&mut tx, &row.pool).await?.unwrap_or(row.config_version);
            if now_at != row.config_version {
                return Err(blocked(format!(
                    "ramp {id}: pool {} was changed outside the ramp (configuration version {now_at}, the ramp left it \
                     at {}); its plan no longer starts from the pool as it is: abort it and start a new one",
                    row.pool, row.config_version
                )));
            }
            row.state = RampState::Running;
            row.guard_state = json!({});
            event(state, &mut tx, &row, now, "resume", actor, &format!("resumed by {actor}: {reason}"), None, None)
                .await?;
            None
        }
        "step_back" if !live || row.step == 0 => {
            return Err(blocked(format!("ramp {id} is {} at step {}: nothing to step back to", row.state, row.step)))
        }
        "step_back" => {
            let to = row.step - 1;
            let written = move_to(state, &mut tx, &mut row, &plan, &baseline, to, actor, now, true).await?;
            if written.is_none() {
                return Err(blocked(format!(
                    "ramp {id}: the pool was changed outside the ramp; abort the ramp (it ends without writing)"
                )));
            }
            row.state = RampState::Paused;
            let sentence = format!("stepped back to step {to} by {actor} and paused: {reason}");
            let audit = written.as_ref().map(|(_, w, _)| w.written.audit_id);
            event(state, &mut tx, &row, now, "step_back", actor, &sentence, None, audit).await?;
            written
        }
        "abort" if !(live || row.state == RampState::Aborting) => {
            return Err(blocked(format!("ramp {id} is {}: nothing to abort", row.state)))
        }
        "abort" if row.state == RampState::Aborting => {
            // A second abort finishes a gradual one at once.
            let mut immediate = plan.clone();
            immediate.abort_seconds = 0;
            row.abort_from = None;
            abort(state, &mut tx, &mut row, &immediate, &baseline, actor, &format!("by {actor}: {reason}"), now).await?
        }
        "abort" => {
            abort(state, &mut tx, &mut row, &plan, &baseline, actor, &format!("by {actor}: {reason}"), now).await?
        }
        other => return Err(ApiError::bad_request("control", format!("unknown control {other:?}"))),
    };
    row.updated_at = now;
    crate::audit::store::insert_audit(
        &mut tx,
        &NewAudit {
            actor,
            source: ctx.source,
            action: &format!("ramp.{control}"),
            entity: &super::entity(id),
            before: Some(&before),
            after: Some(&json!({"state": row.state, "step": row.step})),
            reason: ctx.reason,
            request_id: ctx.request_id,
        },
    )
    .await?;
    store::save_ramp(&mut tx, &row).await?;
    tx.commit().await?;
    Ok((row, written))
}
