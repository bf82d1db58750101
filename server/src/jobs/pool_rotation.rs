//! Pool day rotation: writes each pool's current and next local day (and when each ends)
//! for the draw script. The next day is always written a day ahead, so the first draw after
//! a pool-local midnight counts in the new day, with its caps at zero, even if this job is
//! late; yesterday's counters expire 48 h after their day.

use crate::state::AppState;

/// Every minute, at second 30.
pub const CRON: &str = "30 * * * * *";

/// Rotates every pool of the configuration (read from Postgres); returns how many.
#[tracing::instrument(name = "job.pool_rotation", skip_all, err)]
pub async fn run_once(state: &AppState) -> anyhow::Result<u64> {
    let mut rotated = 0;
    for pool in super::known::pools(state).await {
        match state.pool_admin.rotate(&pool).await {
            Ok(_) => rotated += 1,
            // Configured but not yet published (or wiped; reconcile republishes it).
            Err(client::pool::PoolError::UnknownPool(_)) => {}
            Err(e) => tracing::error!(pool = %pool, error = %e, "rotation failed"),
        }
    }
    Ok(rotated)
}
