//! Job `outbox`: delivers each change's outbox row to Redis (see [`crate::publish::drain_outbox`]).

use crate::publish::Published;
use crate::state::AppState;

/// Every second: changes reach Redis within a second even when the inline publish after a
/// change failed.
pub const CRON: &str = "* * * * * *";

/// One run.
pub async fn run_once(state: &AppState) -> anyhow::Result<Published> {
    crate::publish::drain_outbox(state).await
}
