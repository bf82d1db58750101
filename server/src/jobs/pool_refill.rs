//! The pool refiller: a pool below low-water gets its next batch (and a pool without a
//! standby batch gets one), built with the engine, added exactly once. Draws publish the
//! pool's name as they cross low-water; [`listen`] refills on that message at once, and
//! sweeps every pool each second as well (a missed message costs at most a second). The
//! sweep also rebuilds a pool whose peak window opened or closed since its batches were
//! built, so a window applies within a second of its start and stops within a second of
//! its end.

use std::sync::Arc;
use std::time::Duration;

use client::pool::{PoolName, RefillOutcome};
use futures::StreamExt;
use serde::Serialize;
use tokio::sync::watch;

use super::leader::Leadership;
use crate::state::AppState;

/// How often every pool is checked besides the refill requests.
pub const SWEEP_EVERY: Duration = Duration::from_secs(1);

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

/// Refills every pool of the configuration (read from Postgres, not scanned from Redis)
/// that needs it.
#[tracing::instrument(name = "job.pool_refill", skip_all, err)]
pub async fn run_once(state: &AppState) -> anyhow::Result<Outcome> {
    let mut outcome = Outcome::default();
    for pool in super::known::pools(state).await {
        // A peak window that opened or closed since the batches were built: rebuilt first.
        if let Err(e) = state.pool_admin.follow_peak(&pool).await {
            tracing::error!(pool = %pool, error = %e, "following the peak windows failed");
        }
        refill_pool(state, &pool, &mut outcome).await;
    }
    Ok(outcome)
}

/// Refills one pool until it needs nothing more (at most a few batches).
async fn refill_pool(state: &AppState, pool: &PoolName, outcome: &mut Outcome) {
    outcome.pools += 1;
    {
        let watch = &state.metrics.watch;
        // The series exists from the first run, so that the first failure is an increase.
        watch.pool_refill_failures.with_label_values(&[pool.as_str()]);
        for _ in 0..MAX_BATCHES_PER_RUN {
            let started = std::time::Instant::now();
            let refilled = state.pool_admin.refill(pool).await;
            watch.pool_refill_seconds.with_label_values(&[pool.as_str()]).observe(started.elapsed().as_secs_f64());
            match refilled {
                Ok(RefillOutcome::Added { mode, tickets, length, .. }) => {
                    outcome.batches += 1;
                    outcome.tickets += tickets;
                    state.metrics.pool_refills.with_label_values(&[pool.as_str(), mode]).inc();
                    state.metrics.pool_tickets_added.with_label_values(&[pool.as_str()]).inc_by(tickets);
                    tracing::debug!(pool = %pool, mode, tickets, length, "refilled");
                }
                Ok(RefillOutcome::Raced) => continue,
                Ok(RefillOutcome::NotNeeded) => break,
                // Configured but not yet published (or wiped; reconcile republishes it).
                Err(client::pool::PoolError::UnknownPool(_)) => break,
                Err(e) => {
                    // One broken pool must not stop the others.
                    watch.pool_refill_failures.with_label_values(&[pool.as_str()]).inc();
                    tracing::error!(pool = %pool, error = %e, "refill failed");
                    break;
                }
            }
        }
    }
}

/// Refills on request and every [`SWEEP_EVERY`], while this instance leads the job (or
/// always, without a `leadership`, as the benchmark runs it), until `stop` turns true.
pub async fn listen(state: AppState, leadership: Option<Arc<Leadership>>, mut stop: watch::Receiver<bool>) {
    let channel = state.keys.pool_refill_channel();
    // On a cluster, the seed node to subscribe on next (after one failed, the next).
    let mut attempt = 0usize;
    loop {
        if *stop.borrow() {
            return;
        }
        // When Postgres cannot say who leads, refill anyway: a refill is exactly-once by
        // itself, and pools must not run dry because the configuration store is away.
        let leading = match &leadership {
            None => true,
            Some(l) => l.ensure().await.unwrap_or_else(|e| {
                tracing::warn!(error = format!("{e:#}"), "cannot tell who leads the pool refiller; refilling anyway");
                true
            }),
        };
        if !leading {
            state.metrics.job_runs.with_label_values(&["pool_refill", "skipped"]).inc();
            if tokio::time::timeout(SWEEP_EVERY, stop.changed()).await.is_ok() {
                return;
            }
            continue;
        }
        let subscribed = match state.redis.pubsub_client(attempt).await {
            Ok(client) => client.get_async_pubsub().await,
            Err(e) => Err(e),
        };
        let mut pubsub = match subscribed {
            Ok(pubsub) => pubsub,
            Err(e) => {
                attempt += 1;
                tracing::warn!(error = %e, "pool refiller cannot subscribe; retrying");
                if tokio::time::timeout(SWEEP_EVERY, stop.changed()).await.is_ok() {
                    return;
                }
                continue;
            }
        };
        if let Err(e) = pubsub.subscribe(&channel).await {
            // Without the channel, still refill every second (and try again after that).
            tracing::warn!(error = %e, "pool refiller cannot subscribe; sweeping every second instead");
            let _ = run_once(&state).await;
            if tokio::time::timeout(SWEEP_EVERY, stop.changed()).await.is_ok() {
                return;
            }
            continue;
        }
        let mut messages = pubsub.into_on_message();
        let mut sweep = tokio::time::interval(SWEEP_EVERY);
        loop {
            tokio::select! {
                message = messages.next() => {
                    let Some(message) = message else {
                        attempt += 1;
                        break;
                    };
                    let Ok(name) = message.get_payload::<String>() else { continue };
                    let Ok(pool) = PoolName::parse(&name) else { continue };
                    let mut outcome = Outcome::default();
                    refill_pool(&state, &pool, &mut outcome).await;
                }
                _ = sweep.tick() => {
                    let still_leading = match &leadership {
                        None => true,
                        Some(l) => l.ensure().await.unwrap_or(true),
                    };
                    if !still_leading {
                        break;
                    }
                    let result = run_once(&state).await;
                    let label = if result.is_ok() { "ok" } else { "error" };
                    state.metrics.job_runs.with_label_values(&["pool_refill", label]).inc();
                }
                _ = stop.changed() => return,
            }
        }
    }
}
