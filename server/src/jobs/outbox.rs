//! Job `outbox`: delivers each change's outbox row to Redis and measures the rows left (see [`crate::publish`]).

use crate::publish::Published;
use crate::state::AppState;

/// Every second: changes reach Redis within a second even when the inline publish after a
/// change failed.
pub const CRON: &str = "* * * * * *";

/// One run: delivers what is due, then measures what is left (also after a failed
/// delivery, which is when a backlog builds).
pub async fn run_once(state: &AppState) -> anyhow::Result<Published> {
    let drained = crate::publish::drain_outbox(state).await;
    if let Err(e) = crate::publish::measure_backlog(state).await {
        tracing::warn!(error = format!("{e:#}"), "the outbox gauges keep their last values");
    }
    drained
}
