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
    for live in crate::ramps::LIVE_STATES {
        let n = counts.iter().find(|(s, _)| s == live).map_or(0, |(_, n)| *n);
        state.metrics.watch.ramps.with_label_values(&[live]).set(n);
    }
    Ok(outcome)
}
