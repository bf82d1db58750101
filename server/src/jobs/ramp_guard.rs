//! Job `ramp_guard`: every 10 s, evaluates every running ramp (its guards on the outcomes
//! of the last minutes, its hold, its draws, the pool's peak windows) and advances, holds,
//! pauses, steps back or aborts it; walks gradual aborts through their stages. One ramp
//! that fails to evaluate is logged and the others still run.

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::state::AppState;

/// Every 10 seconds, at seconds 2, 12, … (clear of the jobs at 0, 5 and 30).
pub const CRON: &str = "2,12,22,32,42,52 * * * * *";

/// What one run did.
#[derive(Debug, Default, Serialize)]
pub struct Outcome {
    pub evaluated: usize,
    /// What each ramp that changed did, in words.
    pub changes: Vec<String>,
    /// Ramps that failed to evaluate, and why.
    pub failed: Vec<(i64, String)>,
}

/// One run at `now` (tests pass their own clock).
pub async fn run_once(state: &AppState, now: DateTime<Utc>) -> anyhow::Result<Outcome> {
    let mut outcome = Outcome::default();
    for id in crate::ramps::store::active_ramps(&state.db).await? {
        outcome.evaluated += 1;
        match crate::ramps::run::evaluate(state, id, now).await {
            Ok(Some(said)) => outcome.changes.push(said),
            Ok(None) => {}
            Err(e) => {
                tracing::error!(ramp = id, error = format!("{e:#}"), "evaluating a ramp failed");
                outcome.failed.push((id, format!("{e:#}")));
            }
        }
    }
    let counts = crate::ramps::store::live_ramp_counts(&state.db).await?;
    for live in api::ramps::RampState::LIVE {
        let n = counts.iter().find(|(s, _)| s == live.as_str()).map_or(0, |(_, n)| *n);
        state.metrics.watch.ramps.with_label_values(&[live.as_str()]).set(n);
    }
    record_canary_shares(state).await?;
    Ok(outcome)
}

/// Sets each live ramp's canary share (the weights of its current step) and removes the
/// series of ramps no longer live.
async fn record_canary_shares(state: &AppState) -> anyhow::Result<()> {
    use crate::ramps::run::{canary_share, parse_plan, weights_of};
    let live = crate::ramps::store::list_ramps(&state.db, None, true, 10_000).await?;
    let ids: Vec<String> = live.iter().map(|r| r.id.to_string()).collect();
    let gauge = &state.metrics.watch.ramp_canary_share;
    crate::metrics::retain_series(gauge, |labels| labels.get("ramp").is_some_and(|id| ids.iter().any(|i| i == id)));
    for (row, id) in live.iter().zip(&ids) {
        match parse_plan(row) {
            Ok((plan, baseline)) => {
                let share = canary_share(&plan, &weights_of(&plan, &baseline, row.step)) / 100.0;
                gauge.with_label_values(&[row.pool.as_str(), id.as_str()]).set(share);
            }
            Err(e) => tracing::warn!(ramp = row.id, error = format!("{e:#}"), "a live ramp's plan does not read"),
        }
    }
    Ok(())
}
