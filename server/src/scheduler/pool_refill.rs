//! The pool refiller: every second, every pool below low-water gets its next batch (and a
//! pool without a standby batch gets one), built with the engine, added exactly once.
//! Draws flag a pool as they cross low-water; this job sees the list length itself, so it
//! reacts within a second of the flag.

use anyhow::Context;
use client::pool::RefillOutcome;
use serde::Serialize;

use crate::state::AppState;

/// Every second.
pub const CRON: &str = "* * * * * *";

/// The most batches one pool gets per run (a pool drained faster than this per second
/// needs a larger batch or low-water).
const MAX_BATCHES_PER_RUN: usize = 4;

/// What one run did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Outcome {
    pub pools: u64,
    pub batches: u64,
    pub tickets: u64,
}

/// Refills every pool under the configured prefix that needs it.
#[tracing::instrument(name = "job.pool_refill", skip_all, err)]
pub async fn run_once(state: &AppState) -> anyhow::Result<Outcome> {
    let mut outcome = Outcome::default();
    for pool in state.pool_admin.pools().await.context("listing pools")? {
        outcome.pools += 1;
        for _ in 0..MAX_BATCHES_PER_RUN {
            match state.pool_admin.refill(&pool).await {
                Ok(RefillOutcome::Added { mode, tickets, length, .. }) => {
                    outcome.batches += 1;
                    outcome.tickets += tickets;
                    state.metrics.pool_refills.with_label_values(&[pool.as_str(), mode]).inc();
                    state.metrics.pool_tickets_added.with_label_values(&[pool.as_str()]).inc_by(tickets);
                    tracing::debug!(pool = %pool, mode, tickets, length, "refilled");
                }
                Ok(RefillOutcome::Raced) => continue,
                Ok(RefillOutcome::NotNeeded) => break,
                Err(e) => {
                    // One broken pool must not stop the others.
                    tracing::error!(pool = %pool, error = %e, "refill failed");
                    break;
                }
            }
        }
    }
    Ok(outcome)
}
