//! A ramp's life: started (step 1 published), evaluated by the `ramp_guard` job (measure
//! outside the transaction, then decide and write under the configuration lock), and
//! controlled by people. Every pool version it writes is an ordinary change with source
//! `ramp`; every decision is an event with what was measured and one sentence of why;
//! announced events go to the webhook's outbox in the same transaction.

use api::ramps::RampState;
use std::collections::BTreeMap;

use anyhow::Context;
use chrono::{DateTime, TimeDelta, Utc};
use client::pool::{PoolName, ReweightMode};
use engine::ramp::{NoData, Verdict};
use engine::Weights;
use serde_json::{json, Value};
use sqlx::PgConnection;

use super::measure::{verdict_json, verdict_words, Measurement};
use super::plan::{Hold, OnBreach, Plan};
use super::store::{self, NewEvent, RampRow};
use crate::audit::store::Source;
use crate::change::Ctx;
use crate::error::ApiError;
use crate::error::ChangeError;
use crate::pools::PoolWritten;
use crate::state::AppState;

/// The actor of the job's own decisions.
pub const JOB_ACTOR: &str = "ramp_guard";

/// A pool the caller publishes after the commit (and rebuilds when `immediate`).
pub type Written = Option<(PoolName, PoolWritten, ReweightMode)>;

pub(crate) fn blocked(rule: impl Into<String>) -> ApiError {
    ApiError::Blocked { field: "state".into(), rule: rule.into() }
}

pub(crate) fn parse_plan(row: &RampRow) -> anyhow::Result<(Plan, Weights)> {
    let plan: Plan = serde_json::from_value(row.plan.clone()).with_context(|| format!("ramp {}: plan", row.id))?;
    let baseline: Weights =
        serde_json::from_value(row.baseline.clone()).with_context(|| format!("ramp {}: baseline", row.id))?;
    Ok((plan, baseline))
}

fn pool_name(row: &RampRow) -> Result<PoolName, ApiError> {
    PoolName::parse(&row.pool).map_err(|e| ApiError::Unexpected(anyhow::anyhow!("ramp {}: pool: {}", row.id, e.rule)))
}

/// The weights of step `n` (0: the baseline).
pub(crate) fn weights_of(plan: &Plan, baseline: &Weights, n: i32) -> Weights {
    match usize::try_from(n) {
        Ok(n) if n >= 1 => plan.steps[(n - 1).min(plan.steps.len() - 1)].weights.clone(),
        _ => baseline.clone(),
    }
}

/// The canary's share of `weights`, in percent.
pub(crate) fn canary_share(plan: &Plan, weights: &Weights) -> f64 {
    (engine::ramp::share_of(weights, &plan.canary) * 1e6).round() / 1e4
}

/// Records an event, and queues its notification when the webhook announces its kind.
#[allow(clippy::too_many_arguments)] // each is one fact of the event
pub(crate) async fn event(
    state: &AppState,
    tx: &mut PgConnection,
    row: &RampRow,
    at: DateTime<Utc>,
    kind: &str,
    actor: &str,
    sentence: &str,
    measured: Option<&Value>,
    audit_id: Option<i64>,
) -> Result<(), ApiError> {
    let id = store::insert_event(
        &mut *tx,
        &NewEvent { ramp: row.id, at, kind, step: row.step, actor, sentence, measured, audit_id },
    )
    .await?;
    let announced = match kind {
        "step" => Some("step"),
        "breach" | "dry_run" => Some("breach"),
        "pause" | "step_back" => Some("pause"),
        "abort" if row.abort_from.as_ref().is_none_or(|a| a["done"].as_u64().unwrap_or(0) == 0) => Some("abort"),
        "complete" => Some("complete"),
        _ => None,
    };
    if let Some(announced) = announced.filter(|e| state.ramps.announces(e)) {
        let body = json!({
            "text": super::notify::escape_text(&format!("Tessera ramp {} on pool {}: {}", row.id, row.pool, sentence)),
            "id": format!("ramp-event-{id}"),
            "event": announced,
            "kind": kind,
            "ramp": row.id,
            "pool": row.pool,
            "step": row.step,
            "state": row.state,
            "actor": actor,
            "at": crate::inputs::rfc3339(at),
            "measured": measured,
        });
        store::insert_notification(&mut *tx, announced, &body).await?;
    }
    Ok(())
}

/// Publishes step `n`'s weights (0: the baseline) as the pool's next version (source
/// `ramp`). A pool changed by anything else since the ramp's last write pauses the ramp
/// instead, as does an approval policy that came to apply to the pool of a ramp nobody
/// approved, when the step raises the canary (nothing is written; the answer is `None`).
/// Completes the ramp at the last step.
#[allow(clippy::too_many_arguments)] // each is one fact of the move
pub(crate) async fn move_to(
    state: &AppState,
    tx: &mut PgConnection,
    row: &mut RampRow,
    plan: &Plan,
    baseline: &Weights,
    n: i32,
    actor: &str,
    now: DateTime<Utc>,
    quiet: bool,
) -> Result<Written, ApiError> {
    let weights = weights_of(plan, baseline, n);
    let total = plan.steps.len() as i32;
    let what = match n {
        0 => format!("back to the baseline {weights}"),
        n if n == total => format!("the target {weights}"),
        n => format!("step {n} of {total}: {weights}"),
    };
    let sentence = format!("{what} (canary {} at {}%)", plan.canary.join(", "), canary_share(plan, &weights));
    let pool = pool_name(row)?;
    if n > row.step && row.change_request.is_none() {
        if let Err(ChangeError::Blocked { rule, .. }) = crate::gate::refuse_direct_write(&mut *tx, &pool).await {
            row.state = RampState::Paused;
            row.updated_at = now;
            let why = format!("paused before step {n}: {rule}; this ramp was never approved: abort it, or propose the rest as a change request");
            event(state, tx, row, now, "pause", actor, &why, None, None).await?;
            return Ok(None);
        }
    }
    match write_weights(tx, row, &pool, actor, &sentence, &weights).await {
        Ok(written) => {
            row.config_version = written.config_version;
            row.step = n;
            row.step_started_at = now;
            row.step_hits = None;
            row.guard_state = json!({});
            row.updated_at = now;
            let kind = if n == total {
                row.state = RampState::Completed;
                row.ended_at = Some(now);
                "complete"
            } else {
                "step"
            };
            if !quiet {
                event(state, tx, row, now, kind, actor, &sentence, None, Some(written.written.audit_id)).await?;
            }
            Ok(Some((pool, written, plan.mode)))
        }
        Err(ChangeError::Conflict { current, .. }) => {
            row.state = RampState::Paused;
            row.updated_at = now;
            let why = format!(
                "paused: pool {} was changed outside the ramp (configuration version {current}, the ramp left it at {}); \
                 abort the ramp (it ends without writing) and start a new one from the pool as it is",
                row.pool, row.config_version
            );
            event(state, tx, row, now, "pause", actor, &why, None, None).await?;
            Ok(None)
        }
        Err(e) => Err(e.into()),
    }
}

/// Writes `weights` as the pool's next configuration version on the ramp's behalf (action
/// `pool.ramp_step`, source `ramp`, reason `ramp <id>: <sentence>`), made against the version
/// the ramp last left the pool at: a conflict means the pool was changed outside the ramp.
async fn write_weights(
    tx: &mut PgConnection,
    row: &RampRow,
    pool: &PoolName,
    actor: &str,
    sentence: &str,
    weights: &Weights,
) -> Result<PoolWritten, ChangeError> {
    let reason = format!("ramp {}: {sentence}", row.id);
    let ctx = Ctx { actor, source: Source::Ramp, reason: Some(&reason), request_id: None };
    let set = weights.clone();
    crate::pools::store::modify_pool_tx(tx, &ctx, pool, "pool.ramp_step", Some(row.config_version), move |s| {
        crate::pools::edit::set_weights(s, set);
        Ok(())
    })
    .await
}

/// Starts an abort: back to the baseline at once, or the first of [`super::ABORT_STAGES`]
/// stages of a gradual one.
#[allow(clippy::too_many_arguments)] // each is one fact of the abort
pub(crate) async fn abort(
    state: &AppState,
    tx: &mut PgConnection,
    row: &mut RampRow,
    plan: &Plan,
    baseline: &Weights,
    actor: &str,
    why: &str,
    now: DateTime<Utc>,
) -> Result<Written, ApiError> {
    let from = weights_of(plan, baseline, row.step);
    if plan.abort_seconds == 0 || row.step == 0 {
        let step = row.step;
        let written = move_to(state, tx, row, plan, baseline, 0, actor, now, true).await?;
        row.state = RampState::Aborted;
        row.ended_at = Some(now);
        row.step = 0;
        let sentence = match &written {
            Some(_) => format!("aborted at step {step}: {why}; back at the baseline {baseline} at once"),
            None => format!(
                "aborted at step {step}: {why}; the pool was changed outside the ramp, so its weights are left as \
                 they are (nothing written)"
            ),
        };
        let audit = written.as_ref().map(|(_, w, _)| w.written.audit_id);
        event(state, tx, row, now, "abort", actor, &sentence, None, audit).await?;
        return Ok(written);
    }
    row.abort_from = Some(json!({"weights": from, "at": crate::inputs::rfc3339(now), "done": 0}));
    row.state = RampState::Aborting;
    let sentence = format!(
        "aborting at step {}: {why}; back to the baseline {baseline} over {} s in {} stages",
        row.step,
        plan.abort_seconds,
        super::ABORT_STAGES
    );
    event(state, tx, row, now, "abort", actor, &sentence, None, None).await?;
    abort_stage(state, tx, row, plan, baseline, actor, now).await
}

/// The stages of a gradual abort due at `now`: stage k of S is due (k − 1)/(S − 1) of the
/// way through; the last is the baseline, and the ramp is then aborted.
#[allow(clippy::too_many_arguments)] // each is one fact of the stage
async fn abort_stage(
    state: &AppState,
    tx: &mut PgConnection,
    row: &mut RampRow,
    plan: &Plan,
    baseline: &Weights,
    actor: &str,
    now: DateTime<Utc>,
) -> Result<Written, ApiError> {
    let Some(from) = row.abort_from.clone() else { return Ok(None) };
    let started: DateTime<Utc> = from["at"].as_str().and_then(|t| t.parse().ok()).unwrap_or(now);
    let weights_from: Weights = serde_json::from_value(from["weights"].clone()).unwrap_or_else(|_| baseline.clone());
    let done = from["done"].as_u64().unwrap_or(0);
    let stages = super::ABORT_STAGES;
    let per_stage = plan.abort_seconds as f64 / (stages - 1) as f64;
    let elapsed = (now - started).as_seconds_f64().max(0.0);
    let due = ((elapsed / per_stage).floor() as u64 + 1).min(stages);
    if due <= done {
        return Ok(None);
    }
    let weights = if due == stages {
        baseline.clone()
    } else {
        engine::ramp::between(&weights_from, baseline, due, stages).map_err(|e| ApiError::Unexpected(e.into()))?
    };
    let sentence = format!("abort stage {due} of {stages}: {weights} (canary at {}%)", canary_share(plan, &weights));
    let pool = pool_name(row)?;
    let written = match write_weights(tx, row, &pool, actor, &sentence, &weights).await {
        Ok(written) => written,
        Err(ChangeError::Conflict { current, .. }) => {
            row.state = RampState::Aborted;
            row.step = 0;
            row.ended_at = Some(now);
            row.updated_at = now;
            let why = format!(
                "aborted before stage {due} of {stages}: the pool was changed outside the ramp (configuration version \
                 {current}), so its weights are left as they are"
            );
            event(state, tx, row, now, "aborted", actor, &why, None, None).await?;
            return Ok(None);
        }
        Err(e) => return Err(e.into()),
    };
    row.config_version = written.config_version;
    row.updated_at = now;
    row.abort_from = Some(json!({"weights": weights_from, "at": from["at"], "done": due}));
    let kind = if due == stages {
        row.state = RampState::Aborted;
        row.step = 0;
        row.ended_at = Some(now);
        "aborted"
    } else {
        "abort"
    };
    let sentence = if due == stages { format!("{sentence}: aborted, back at the baseline") } else { sentence };
    event(state, tx, row, now, kind, actor, &sentence, None, Some(written.written.audit_id)).await?;
    Ok(Some((pool, written, ReweightMode::Drain)))
}

/// Evaluates one ramp at `now` and acts on it. Answers what it did in words (`None`:
/// nothing to do).
pub async fn evaluate(state: &AppState, id: i64, now: DateTime<Utc>) -> anyhow::Result<Option<String>> {
    let Some(row) = store::ramp(&state.db, id).await? else { return Ok(None) };
    let (plan, _) = parse_plan(&row)?;
    let measured = if row.state == RampState::Running {
        Some(super::measure::measure(state, &row, &plan, now).await?)
    } else {
        None
    };
    let mut tx = state.db.begin().await?;
    crate::change::store::lock(&mut tx, &crate::change::Entity::pool_key(&row.pool)).await?;
    let read = row;
    let Some(mut row) = store::ramp_for_update(&mut tx, id).await? else { return Ok(None) };
    // Moved since it was measured (a person's control, another instance): measured again
    // on the next tick, never judged on another step's outcomes.
    if (&row.state, row.step, row.step_started_at) != (&read.state, read.step, read.step_started_at) {
        return Ok(None);
    }
    let (plan, baseline) = parse_plan(&row)?;
    let (mut sample, mut tripped) = (None, false);
    let (written, said) = match (row.state, measured) {
        (RampState::Aborting, _) => {
            let w = abort_stage(state, &mut tx, &mut row, &plan, &baseline, JOB_ACTOR, now).await?;
            (w, Some(format!("ramp {id}: {}", row.state)))
        }
        (RampState::Running, Some(m)) => {
            judge(state, &mut tx, &mut row, &plan, &baseline, m, now, &mut sample, &mut tripped).await?
        }
        _ => (None, None),
    };
    store::save_ramp(&mut tx, &row).await?;
    tx.commit().await?;
    // Counted once it is committed: a rolled-back evaluation is judged again next time.
    if tripped {
        state.metrics.watch.ramp_breaches.inc();
    }
    if let Some(sample) = sample {
        let mut conn = state.db.acquire().await?;
        store::insert_sample(&mut conn, id, now, read.step, &sample).await?;
    }
    if let Some((pool, w, mode)) = written {
        if crate::publish::publish_now(state).await {
            crate::publish::rebuild_if_needed(state, &pool, &w.published, mode).await;
        }
    }
    Ok(said)
}

/// The decision of one evaluation of a running ramp; `sample` receives what it measured,
/// `breach_tripped` whether a breach paused, stepped back or aborted it.
#[allow(clippy::too_many_arguments)] // each is one fact of the decision
async fn judge(
    state: &AppState,
    tx: &mut PgConnection,
    row: &mut RampRow,
    plan: &Plan,
    baseline: &Weights,
    m: Measurement,
    now: DateTime<Utc>,
    sample: &mut Option<Value>,
    breach_tripped: &mut bool,
) -> Result<(Written, Option<String>), ApiError> {
    let mut breaches: Vec<u32> = serde_json::from_value(row.guard_state["breaches"].clone()).unwrap_or_default();
    breaches.resize(plan.guards.len(), 0);
    let held_before = row.guard_state["held"].as_str().map(str::to_owned);
    let (mut breached, mut tripped, mut no_data_pause, mut too_few) = (vec![], vec![], vec![], vec![]);
    let mut verdicts = Vec::new();
    for (i, (guard, (canary, base))) in plan.guards.iter().zip(&m.per_guard).enumerate() {
        // At the baseline (after a step back) the canary has no traffic to judge.
        let v = if row.step == 0 {
            Verdict::Pass { value: 0.0, limit: 0.0, samples: 0 }
        } else {
            guard.judge(*canary, *base)
        };
        let breach = match (&v, guard.no_data) {
            (Verdict::Breach { .. }, _) | (Verdict::NoData, NoData::Fail) => true,
            (Verdict::NoData, NoData::Pause) => {
                // A new path gets its first traffic once the batch before it drains: no
                // outcomes yet is a hold until the guard's whole window lies in the step.
                let settled = now - row.step_started_at >= TimeDelta::minutes(i64::from(guard.window_minutes));
                if !guard.dry_run && settled {
                    no_data_pause.push(i);
                } else if !guard.dry_run {
                    too_few.push(i);
                }
                false
            }
            (Verdict::TooFew { .. }, _) => {
                if !guard.dry_run {
                    too_few.push(i);
                }
                false
            }
            _ => {
                breaches[i] = 0;
                false
            }
        };
        if breach {
            breaches[i] += 1;
            breached.push(i);
            if breaches[i] >= guard.consecutive && !guard.dry_run {
                tripped.push(i);
            }
        }
        verdicts.push((v, *canary, *base));
    }
    let guards_json: Vec<Value> =
        plan.guards.iter().zip(&verdicts).map(|(g, (v, c, b))| verdict_json(g, v, *c, *b)).collect();
    let members_json: BTreeMap<String, Value> = m
        .members
        .iter()
        .map(|(name, c)| {
            let (rate, _) = engine::ramp::Metric::SuccessRate.measure(*c);
            (name.clone(), json!({"ok": c.ok, "fail": c.fail, "success_rate": rate}))
        })
        .collect();
    let measured = json!({"guards": guards_json, "members": members_json, "draws": m.draws});
    *sample = Some(measured.clone());
    if row.step_hits.is_none() {
        row.step_hits = m.hits_now.clone();
    }
    let words = |i: usize| format!("guard {} ({})", i + 1, verdict_words(&plan.guards[i], &verdicts[i].0));
    let mut written = None;
    let mut said = None;
    for &i in breached.iter().filter(|&&i| plan.guards[i].dry_run) {
        let sentence = format!("dry run: {} — nothing changed", words(i));
        event(state, tx, row, now, "dry_run", JOB_ACTOR, &sentence, Some(&measured), None).await?;
    }
    let real: Vec<usize> = breached.iter().copied().filter(|&i| !plan.guards[i].dry_run).collect();
    if !tripped.is_empty() {
        let what: Vec<String> =
            tripped.iter().map(|&i| format!("{} {} times in a row", words(i), breaches[i])).collect();
        let why = what.join("; ");
        let sentence = format!("breach: {why}: {}", plan.on_breach.as_str());
        event(state, tx, row, now, "breach", JOB_ACTOR, &sentence, Some(&measured), None).await?;
        *breach_tripped = true;
        breaches.iter_mut().for_each(|b| *b = 0);
        match plan.on_breach {
            OnBreach::Pause => {
                row.state = RampState::Paused;
                event(
                    state,
                    tx,
                    row,
                    now,
                    "pause",
                    JOB_ACTOR,
                    &format!("paused on a breach: {why}"),
                    Some(&measured),
                    None,
                )
                .await?;
            }
            OnBreach::StepBack => {
                let to = row.step - 1;
                written = move_to(state, tx, row, plan, baseline, to, JOB_ACTOR, now, true).await?;
                row.state = RampState::Paused;
                if let Some((_, w, _)) = &written {
                    let sentence = format!("stepped back to step {to} on a breach ({why}) and paused");
                    let audit = Some(w.written.audit_id);
                    event(state, tx, row, now, "step_back", JOB_ACTOR, &sentence, Some(&measured), audit).await?;
                }
            }
            OnBreach::Abort => {
                written = abort(state, tx, row, plan, baseline, JOB_ACTOR, &format!("breach: {why}"), now).await?;
            }
        }
        said = Some(sentence);
    } else if !real.is_empty() {
        let what: Vec<String> = real
            .iter()
            .map(|&i| format!("{} ({} of {} in a row)", words(i), breaches[i], plan.guards[i].consecutive))
            .collect();
        let sentence = format!("breach: {}", what.join("; "));
        event(state, tx, row, now, "breach", JOB_ACTOR, &sentence, Some(&measured), None).await?;
        said = Some(sentence);
    } else if !no_data_pause.is_empty() {
        let what: Vec<String> = no_data_pause.iter().map(|&i| words(i)).collect();
        let sentence = format!("paused: {} (no-data policy: pause, never abort)", what.join("; "));
        row.state = RampState::Paused;
        event(state, tx, row, now, "pause", JOB_ACTOR, &sentence, Some(&measured), None).await?;
        said = Some(sentence);
    } else {
        let Some(step) = plan.steps.get(usize::try_from(row.step.max(1) - 1).unwrap_or(0)) else {
            return Err(ApiError::Unexpected(anyhow::anyhow!("ramp {}: step {} is not in its plan", row.id, row.step)));
        };
        let hold_done = match step.hold {
            Hold::Seconds { seconds } => now >= row.step_started_at + TimeDelta::seconds(seconds as i64),
            Hold::Until { at } => now >= at,
            Hold::Manual => false,
        };
        let mut held = Vec::new();
        if step.min_draws > 0 && m.draws.unwrap_or(0) < step.min_draws {
            held.push(format!("{} of the {} draws the step needs", m.draws.unwrap_or(0), step.min_draws));
        }
        held.extend(too_few.iter().map(|&i| words(i)));
        if let Some(window) = &m.in_peak {
            held.push(format!("inside the peak window {window}"));
        }
        if hold_done && held.is_empty() {
            let next = row.step + 1;
            written = move_to(state, tx, row, plan, baseline, next, JOB_ACTOR, now, false).await?;
            said = Some(format!("ramp {}: step {next}", row.id));
            breaches.iter_mut().for_each(|b| *b = 0);
        } else if hold_done {
            let held = format!("held: {}", held.join("; "));
            if held_before.as_deref() != Some(held.as_str()) {
                event(state, tx, row, now, "hold", JOB_ACTOR, &held, Some(&measured), None).await?;
            }
            row.guard_state = json!({"breaches": breaches, "held": held});
            row.updated_at = now;
            return Ok((None, said));
        }
    }
    if row.state == RampState::Running || row.state == RampState::Paused {
        row.guard_state = json!({"breaches": breaches});
    }
    row.updated_at = now;
    Ok((written, said))
}
