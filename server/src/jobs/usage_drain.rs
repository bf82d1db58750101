//! Job `usage_drain`: moves the tenants' usage streams into the Postgres usage ledger (see
//! [`crate::usage::drain`]).

use crate::state::AppState;
use crate::usage::Drained;

/// Every second: the ledger is at most a few seconds behind Redis while Postgres is up.
pub const CRON: &str = "* * * * * *";

/// One run.
pub async fn run_once(state: &AppState) -> anyhow::Result<Drained> {
    crate::usage::drain(state).await
}
