//! Job `pool_sampler`: every 10 s, samples every pool ([`crate::samples::sampler`]: its
//! lists' lengths, each member's draws and share against its weights, the alert gauges).

use crate::samples::sampler::{sample_now, Outcome};
use crate::state::AppState;

/// Every 10 s, at seconds 5, 15, …, 55 (clear of the jobs that run at seconds 0 and 30).
pub const CRON: &str = "5,15,25,35,45,55 * * * * *";

/// Samples every pool that has a snapshot in Postgres, at Redis `TIME`.
#[tracing::instrument(name = "job.pool_sampler", skip_all, err)]
pub async fn run_once(state: &AppState) -> anyhow::Result<Outcome> {
    sample_now(state).await
}
