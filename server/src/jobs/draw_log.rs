//! Job `draw_log`: drains the pools' draw logs from Redis into Postgres, sets the pools'
//! longest-run gauges, and copies the channels' recent outcome minutes (see
//! [`crate::draws`]).

use anyhow::Context;
use chrono::{DateTime, Utc};

use crate::draws::Drained;
use crate::state::AppState;

/// Every 10 s, at seconds 2, 12, …, 52 (clear of the sampler's seconds).
pub const CRON: &str = "2,12,22,32,42,52 * * * * *";

/// One run, at Redis `TIME`.
pub async fn run_once(state: &AppState) -> anyhow::Result<Drained> {
    let now = state.pool_admin.now().await.context("reading the clock (redis TIME)")?;
    run_at(state, now).await
}

/// One run as of `now`: the seam tests use with a hand-set clock.
pub async fn run_at(state: &AppState, now: DateTime<Utc>) -> anyhow::Result<Drained> {
    crate::draws::drain(state, now).await
}
