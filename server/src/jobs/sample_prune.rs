//! The sample prune: once a day, deletes pool samples older than the configured retention
//! (`samples.retention_days`, default 7), in small batches so no long lock is held; and,
//! with the same retention, ramps' samples and the webhook notifications already delivered
//! or given up, and the adaptive tiers' moves decided; and, after `draws.retention_days`
//! (default 7), the draw log's rows and the recorded outcome minutes.

use anyhow::Context;

use crate::state::AppState;

/// Daily at 03:20:00 UTC.
pub const CRON: &str = "0 20 3 * * *";

/// Deletes the rows older than the configured retention; returns how many.
#[tracing::instrument(name = "job.sample_prune", skip_all, err)]
pub async fn run_once(state: &AppState) -> anyhow::Result<u64> {
    let mut deleted = crate::samples::store::prune_samples(&state.db, state.sample_retention)
        .await
        .context("pruning pool samples")?;
    let days = i32::try_from(state.sample_retention.days()).unwrap_or(i32::MAX);
    deleted += crate::ramps::store::prune(&state.db, days).await.context("pruning ramp samples and notifications")?;
    deleted += crate::tiers::store::prune(&state.db, days).await.context("pruning decided tier moves")?;
    let draw_days = i32::try_from(state.draw_log_retention.days()).unwrap_or(i32::MAX);
    deleted +=
        crate::draws::store::prune(&state.db, draw_days).await.context("pruning the draw log and outcome minutes")?;
    if deleted > 0 {
        tracing::info!(deleted, retention_days = state.sample_retention.days(), "pruned samples and notifications");
    }
    Ok(deleted)
}
