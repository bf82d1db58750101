//! Job `quota_compensate`: compares every tenant's use counters in Redis with the usage
//! ledger and corrects them beyond what is in flight (see [`crate::usage::compensate`]).

use crate::state::AppState;
use crate::usage::compensate::Report;

/// Daily at 03:30 UTC (and on demand: `tessera compensate`).
pub const CRON: &str = "0 30 3 * * *";

/// One run.
pub async fn run_once(state: &AppState) -> anyhow::Result<Report> {
    crate::usage::compensate::compensate(state, true).await
}
