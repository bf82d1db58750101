//! Task `usage_confirm`, on every instance (not led: each instance holds its own records):
//! charges the quota journal to Redis once it answers (setting aside what it holds for
//! tenants that do not exist: [`crate::usage::dead_letters`]), and writes the settle records this
//! process made that the usage ledger does not hold after [`crate::usage::CONFIRM_AFTER`]
//! (see [`crate::usage::confirm`]).

use std::time::Duration;

use tokio::sync::watch;

use crate::state::AppState;

/// How often the records are looked at.
pub const EVERY: Duration = Duration::from_secs(5);

/// Runs until `stop` turns true; a last run on the way out writes what can be written.
pub async fn run(state: AppState, mut stop: watch::Receiver<bool>) {
    loop {
        let stopping = tokio::time::timeout(EVERY, stop.changed()).await.is_ok();
        let age = if stopping { Duration::ZERO } else { crate::usage::CONFIRM_AFTER };
        // What was admitted or queued while Redis was away (also before a restart, from the
        // journal file) is charged as soon as Redis answers, with or without new requests.
        if let Err(e) = state.quotas.flush_offline().await {
            tracing::debug!(error = %e, "the quota journal waits for redis");
            // Operations of tenants that do not exist would wait for ever: set aside.
            if let Err(e) = crate::usage::dead_letters::set_aside_unknown(&state).await {
                tracing::warn!(error = format!("{e:#}"), "the dead-letter list waits for postgres");
            }
        }
        match crate::usage::confirm(&state, age).await {
            Ok(_) => state.metrics.job_runs.with_label_values(&["usage_confirm", "ok"]).inc(),
            Err(e) => {
                state.metrics.job_runs.with_label_values(&["usage_confirm", "error"]).inc();
                tracing::warn!(error = format!("{e:#}"), "usage records kept for the next attempt");
            }
        }
        if stopping {
            return;
        }
    }
}
