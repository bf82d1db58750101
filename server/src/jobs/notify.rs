//! Job `notify`: every 2 s, delivers the queued webhook notifications
//! ([`crate::ramps::notify`]).

use chrono::{DateTime, Utc};

use crate::state::AppState;

/// Every 2 seconds.
pub const CRON: &str = "*/2 * * * * *";

/// One run at `now`: answers (delivered, failed attempts).
pub async fn run_once(state: &AppState, now: DateTime<Utc>) -> anyhow::Result<(usize, usize)> {
    crate::ramps::notify::deliver_due(state, now).await
}
