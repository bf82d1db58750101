//! The sample prune: once a day, deletes pool samples older than the configured retention
//! (`samples.retention_days`, default 7), in small batches so no long lock is held.

use anyhow::Context;

use crate::state::AppState;

/// Daily at 03:20:00 UTC.
pub const CRON: &str = "0 20 3 * * *";

/// Deletes the samples older than the configured retention; returns how many.
#[tracing::instrument(name = "job.sample_prune", skip_all, err)]
pub async fn run_once(state: &AppState) -> anyhow::Result<u64> {
    let deleted = crate::samples::store::prune_samples(&state.db, state.sample_retention)
        .await
        .context("pruning pool samples")?;
    if deleted > 0 {
        tracing::info!(deleted, retention_days = state.sample_retention.days(), "pruned pool samples");
    }
    Ok(deleted)
}
