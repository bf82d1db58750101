//! The quota sweeper: returns reservations whose deadline passed (the caller crashed or
//! never settled), by Redis `TIME`, so their tokens and leases are free again.

use serde::Serialize;

use crate::state::AppState;

/// Every minute, at second 0.
pub const CRON: &str = "0 * * * * *";

/// The most reservations one script call releases (the sweep loops until none is left).
const BATCH: u32 = 500;

/// What one run did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Outcome {
    /// Tenants with open reservations that were looked at.
    pub tenants: u64,
    /// Reservations released after their deadline.
    pub released: u64,
    /// Tokens they held.
    pub tokens: u64,
    /// Reservations still open (not yet due).
    pub open: u64,
    /// Reservations past their deadline left in place by a tenant's sweep that failed
    /// after its first batch (its last reply's `left`).
    pub overdue: u64,
    /// Tenants whose sweep failed (their overdue reservations wait for the next run).
    pub failed: u64,
    /// Chunks of hot tenants' tokens returned after their lease ended (their instance died
    /// or stopped using them), and the tokens they held.
    pub chunks: u64,
    pub chunk_tokens: u64,
}

/// Sweeps every tenant of the configuration (read from Postgres, not scanned from Redis)
/// once.
#[tracing::instrument(name = "job.quota_sweep", skip_all, err)]
pub async fn run_once(state: &AppState) -> anyhow::Result<Outcome> {
    let mut outcome = Outcome::default();
    let tenants = super::known::tenants(state).await;
    for tenant in tenants {
        outcome.tenants += 1;
        // Expired reservations the last reply said were still waiting.
        let mut left = 0;
        loop {
            // One tenant's failure must not stop the others' sweep.
            let swept = match state.quotas.sweep(&tenant, BATCH).await {
                Ok(swept) => swept,
                Err(e) => {
                    tracing::error!(tenant = %tenant, error = %e, "sweep failed");
                    outcome.failed += 1;
                    outcome.overdue += left;
                    break;
                }
            };
            left = swept.left;
            outcome.released += swept.released;
            outcome.tokens += swept.tokens;
            outcome.chunks += swept.chunks;
            outcome.chunk_tokens += swept.chunk_tokens;
            if swept.chunks > 0 {
                tracing::info!(tenant = %tenant, chunks = swept.chunks, tokens = swept.chunk_tokens, "returned quota chunks whose lease ended");
            }
            if swept.released > 0 {
                tracing::info!(tenant = %tenant, released = swept.released, tokens = swept.tokens, "released expired reservations");
            }
            if swept.left == 0 {
                outcome.open += swept.open;
                break;
            }
        }
    }
    state.metrics.quota_swept.inc_by(outcome.released);
    state.metrics.quota_open_reservations.set(outcome.open as i64);
    state.metrics.watch.quota_reservations_overdue.set(i64::try_from(outcome.overdue).unwrap_or(i64::MAX));
    state.metrics.watch.quota_sweep_failures.inc_by(outcome.failed);
    Ok(outcome)
}
