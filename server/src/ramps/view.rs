//! Ramps as the API and the UI show them: summaries, the timeline (planned and actual
//! times), events and the guard charts' samples.

use api::ramps::RampState;
use std::collections::BTreeMap;

use api::ramps::{RampDetail, RampEvent, RampSample, RampStep, RampSummary, RampWriteReply};
use chrono::{DateTime, TimeDelta, Utc};
use engine::Weights;

use super::plan::{describe_guard, Hold, Plan};
use super::run::{canary_share, parse_plan, weights_of, Written};
use super::store::{self, RampRow};
use crate::error::ApiError;
use crate::inputs::rfc3339;
use crate::state::AppState;

fn map(weights: &Weights) -> BTreeMap<String, u64> {
    weights.iter().map(|(m, w)| (m.to_owned(), w)).collect()
}

pub(crate) fn summary(row: &RampRow, plan: &Plan, baseline: &Weights) -> RampSummary {
    RampSummary {
        id: row.id,
        pool: row.pool.clone(),
        state: row.state,
        step: row.step,
        steps: plan.steps.len() as i32,
        canary: plan.canary.clone(),
        canary_share: canary_share(plan, &weights_of(plan, baseline, row.step)),
        step_started_at: rfc3339(row.step_started_at),
        created_by: row.created_by.clone(),
        reason: row.reason.clone(),
        created_at: rfc3339(row.created_at),
        ended_at: row.ended_at.map(rfc3339),
        change_request: row.change_request,
    }
}

/// Summaries of the rows whose plan parses (one that does not is logged and left out).
pub(crate) fn summaries(rows: &[RampRow]) -> Vec<RampSummary> {
    rows.iter()
        .filter_map(|row| match parse_plan(row) {
            Ok((plan, baseline)) => Some(summary(row, &plan, &baseline)),
            Err(e) => {
                tracing::error!(ramp = row.id, error = format!("{e:#}"), "a stored ramp does not parse");
                None
            }
        })
        .collect()
}

fn hold_words(hold: &Hold, last: bool) -> String {
    match hold {
        _ if last => "target".into(),
        Hold::Seconds { seconds } => format!("{seconds} s"),
        Hold::Until { at } => format!("until {}", rfc3339(*at)),
        Hold::Manual => "manual".into(),
    }
}

/// The ramp with its timeline, guards, events and newest 360 samples.
pub(crate) async fn detail(state: &AppState, id: i64) -> Result<Option<RampDetail>, ApiError> {
    let Some(row) = store::ramp(&state.db, id).await? else { return Ok(None) };
    let (plan, baseline) = parse_plan(&row).map_err(ApiError::Unexpected)?;
    let events = store::events(&state.db, id).await?;
    let samples = store::samples(&state.db, id, 360).await?;
    let mut started: BTreeMap<i32, DateTime<Utc>> = BTreeMap::new();
    for e in events.iter().filter(|e| matches!(e.kind.as_str(), "step" | "complete")) {
        started.insert(e.step, e.at);
    }
    // Planned: from the step in force on, each duration hold after the one before.
    let mut planned: BTreeMap<i32, DateTime<Utc>> = BTreeMap::new();
    if matches!(row.state, RampState::Running | RampState::Paused) {
        let mut at = Some(row.step_started_at);
        for n in row.step.max(1)..=plan.steps.len() as i32 {
            if n > row.step {
                if let Some(t) = at {
                    planned.insert(n, t);
                }
            }
            at = match (at, plan.steps[n as usize - 1].hold) {
                (Some(t), Hold::Seconds { seconds }) => Some(t + TimeDelta::seconds(seconds as i64)),
                (Some(t), Hold::Until { at }) => Some(at.max(t)),
                _ => None,
            };
        }
    }
    let last = plan.steps.len();
    let steps = plan
        .steps
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let n = i as i32 + 1;
            RampStep {
                index: n,
                weights: map(&s.weights),
                canary_share: canary_share(&plan, &s.weights),
                hold: hold_words(&s.hold, i + 1 == last),
                min_draws: s.min_draws,
                planned_at: planned.get(&n).copied().map(rfc3339),
                started_at: started.get(&n).copied().map(rfc3339),
            }
        })
        .collect();
    let held =
        row.guard_state["held"].as_str().map(str::to_owned).filter(|_| row.state == RampState::Running).or_else(|| {
            let step = plan.steps.get(row.step.max(1) as usize - 1)?;
            (row.state == RampState::Running).then(|| match step.hold {
                Hold::Seconds { seconds } => {
                    format!("hold until {}", rfc3339(row.step_started_at + TimeDelta::seconds(seconds as i64)))
                }
                Hold::Until { at } => format!("hold until {}", rfc3339(at)),
                Hold::Manual => "held until someone promotes it".into(),
            })
        });
    let pool_version = {
        let mut conn = state.db.acquire().await?;
        store::config_version(&mut conn, &row.pool).await?.unwrap_or(0)
    };
    Ok(Some(RampDetail {
        ramp: summary(&row, &plan, &baseline),
        baseline: map(&baseline),
        steps,
        guards: plan.guards.iter().map(describe_guard).collect(),
        thresholds: plan.guards.iter().map(|g| (!g.relative).then_some(g.threshold)).collect(),
        on_breach: plan.on_breach.as_str().into(),
        abort_seconds: plan.abort_seconds,
        mode: plan.mode.as_str().into(),
        hold_in_peaks: plan.hold_in_peaks,
        held,
        events: events
            .into_iter()
            .map(|e| RampEvent {
                id: e.id,
                at: rfc3339(e.at),
                kind: e.kind,
                step: e.step,
                actor: e.actor,
                sentence: e.sentence,
                measured: e.measured,
                audit_id: e.audit_id,
            })
            .collect(),
        samples: samples
            .into_iter()
            .map(|(at, step, measured)| RampSample {
                at: rfc3339(at),
                step,
                members: serde_json::from_value(measured["members"].clone()).unwrap_or_default(),
                guards: measured["guards"].as_array().cloned().unwrap_or_default(),
            })
            .collect(),
        pool_version,
    }))
}

/// Publishes what a start or a control wrote (rebuilding the pool when the plan's mode is
/// `immediate`) and answers the ramp as it is now.
pub(crate) async fn written_reply(
    state: &AppState,
    row: &RampRow,
    written: Written,
) -> Result<RampWriteReply, ApiError> {
    let (plan, baseline) = parse_plan(row).map_err(ApiError::Unexpected)?;
    let mut version = None;
    let mut published = true;
    if let Some((pool, w, mode)) = written {
        version = Some(w.config_version);
        published = crate::publish::publish_now(state).await;
        if published {
            crate::publish::rebuild_if_needed(state, &pool, &w.published, mode).await;
        }
    }
    Ok(RampWriteReply { ramp: summary(row, &plan, &baseline), version, published })
}
