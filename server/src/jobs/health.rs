//! Job `health`: evaluates every pool's channel health (see [`crate::health::run_once`]).

use chrono::{DateTime, Utc};

use crate::health::Report;
use crate::state::AppState;

/// Every 10 seconds.
pub const CRON: &str = "*/10 * * * * *";

/// One run, at `now` (tests pass their own clock).
pub async fn run_once(state: &AppState, now: DateTime<Utc>) -> anyhow::Result<Report> {
    crate::health::run_once(state, now).await
}
