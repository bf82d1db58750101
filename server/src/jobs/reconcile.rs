//! Job `reconcile`: republishes what Redis lacks or holds older than Postgres (see
//! [`crate::publish::reconcile`]).

use crate::publish::Published;
use crate::state::AppState;

/// Every two seconds: a Redis wiped clean is whole again within two.
pub const CRON: &str = "*/2 * * * * *";

/// One run.
pub async fn run_once(state: &AppState) -> anyhow::Result<Published> {
    crate::publish::reconcile(state).await
}
