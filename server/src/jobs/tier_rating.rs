//! Job `tier_rating`: judges each tiers pool's channels under the pool's tier policy, one
//! complete window at a time (see [`crate::tiers::run_once`]).

use chrono::{DateTime, Utc};

use crate::state::AppState;
use crate::tiers::Report;

/// Every 10 s, at seconds 6, 16, …, 56 (a window is judged in the first run after it ends).
pub const CRON: &str = "6,16,26,36,46,56 * * * * *";

/// One run, at `now` (tests pass their own clock).
pub async fn run_once(state: &AppState, now: DateTime<Utc>) -> anyhow::Result<Report> {
    crate::tiers::run_once(state, now).await
}
