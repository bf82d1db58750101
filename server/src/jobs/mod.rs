//! Scheduled jobs (tokio-cron-scheduler): every instance schedules every job, and each run
//! first makes sure this instance leads that job ([`leader`]), so N instances behind a load
//! balancer run each job once. A job is a module with `run_once(state)`, which the cron
//! closure calls and tests call directly; the file of a job is named by its id.

pub mod change_apply;
pub mod draw_log;
pub mod health;
pub mod known;
pub mod leader;
pub mod notify;
pub mod outbox;
pub mod pool_refill;
pub mod pool_rotation;
pub mod pool_sampler;
pub mod quota_compensate;
pub mod quota_sweep;
pub mod ramp_guard;
pub mod reconcile;
pub mod sample_prune;
pub mod tier_rating;
pub mod usage_confirm;
pub mod usage_drain;

use std::future::Future;
use std::sync::Arc;

use anyhow::Context;
use tokio_cron_scheduler::{Job, JobScheduler};

use self::leader::Leadership;
use crate::state::AppState;

/// The running scheduler; [`Scheduler::shutdown`] stops it and gives up leadership.
pub struct Scheduler {
    inner: JobScheduler,
    stop: tokio::sync::watch::Sender<bool>,
    refiller: tokio::task::JoinHandle<()>,
    confirmer: tokio::task::JoinHandle<()>,
    republisher: tokio::task::JoinHandle<()>,
    /// Every job's leadership, resigned on shutdown: the cron library keeps its job closures
    /// (and so their lock connections) alive after it stops, which would keep the jobs from
    /// another instance of the same process (tests, embedded use) until it exits.
    leaderships: Vec<Arc<Leadership>>,
}

impl Scheduler {
    /// Schedules every job and starts ticking.
    pub async fn start(state: AppState) -> anyhow::Result<Self> {
        let inner = JobScheduler::new().await.context("creating the job scheduler")?;
        let mut leaderships = Vec::new();
        let led = &mut leaderships;
        add(&inner, &state, led, "quota_sweep", quota_sweep::CRON, |state| async move {
            quota_sweep::run_once(&state).await.map(|o| {
                if o.released > 0 {
                    tracing::info!(released = o.released, tokens = o.tokens, open = o.open, "quota sweep");
                }
            })
        })
        .await?;
        add(
            &inner,
            &state,
            led,
            "outbox",
            outbox::CRON,
            |state| async move { outbox::run_once(&state).await.map(|_| ()) },
        )
        .await?;
        add(&inner, &state, led, "reconcile", reconcile::CRON, |state| async move {
            reconcile::run_once(&state).await.map(|_| ())
        })
        .await?;
        add(&inner, &state, led, "pool_rotation", pool_rotation::CRON, |state| async move {
            pool_rotation::run_once(&state).await.map(|_| ())
        })
        .await?;
        add(&inner, &state, led, "pool_sampler", pool_sampler::CRON, |state| async move {
            pool_sampler::run_once(&state).await.map(|_| ())
        })
        .await?;
        add(&inner, &state, led, "draw_log", draw_log::CRON, |state| async move {
            draw_log::run_once(&state).await.map(|_| ())
        })
        .await?;
        add(&inner, &state, led, "sample_prune", sample_prune::CRON, |state| async move {
            sample_prune::run_once(&state).await.map(|_| ())
        })
        .await?;
        add(&inner, &state, led, "quota_compensate", quota_compensate::CRON, |state| async move {
            quota_compensate::run_once(&state).await.map(|r| {
                tracing::info!(compared = r.compared, drifts = r.drifts.len(), "quota compensation");
            })
        })
        .await?;
        add(&inner, &state, led, "usage_drain", usage_drain::CRON, |state| async move {
            usage_drain::run_once(&state).await.map(|_| ())
        })
        .await?;
        add(&inner, &state, led, "change_apply", change_apply::CRON, |state| async move {
            change_apply::run_once(&state, chrono::Utc::now()).await.map(|_| ())
        })
        .await?;
        add(&inner, &state, led, "health", health::CRON, |state| async move {
            health::run_once(&state, chrono::Utc::now()).await.map(|r| {
                for change in &r.changes {
                    tracing::info!(change = change.as_str(), "channel health");
                }
            })
        })
        .await?;
        add(&inner, &state, led, "tier_rating", tier_rating::CRON, |state| async move {
            tier_rating::run_once(&state, chrono::Utc::now()).await.map(|r| {
                for change in r.applied.iter().chain(&r.offered).chain(&r.refused) {
                    tracing::info!(change = change.as_str(), "tier rating");
                }
            })
        })
        .await?;
        add(&inner, &state, led, "ramp_guard", ramp_guard::CRON, |state| async move {
            ramp_guard::run_once(&state, chrono::Utc::now()).await.map(|o| {
                for change in &o.changes {
                    tracing::info!(change = change.as_str(), "ramp");
                }
            })
        })
        .await?;
        add(&inner, &state, led, "notify", notify::CRON, |state| async move {
            notify::run_once(&state, chrono::Utc::now()).await.map(|_| ())
        })
        .await?;
        inner.start().await.context("starting the job scheduler")?;
        // The refiller reacts to requests as they come, so it is a task, not a cron job.
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let leadership =
            Arc::new(Leadership::new(state.db.clone(), "pool_refill").recording(&state.metrics.watch.job_leader));
        leaderships.push(leadership.clone());
        let confirmer = tokio::spawn(usage_confirm::run(state.clone(), stopped.clone()));
        // Every instance: what its data plane finds missing in Redis is republished at once.
        let republisher = tokio::spawn(crate::publish::republish_missing(state.clone(), stopped.clone()));
        let refiller = tokio::spawn(pool_refill::listen(state, Some(leadership), stopped));
        Ok(Self { inner, stop, refiller, confirmer, republisher, leaderships })
    }

    /// Stops scheduling and resigns every job, so another instance takes each on its next
    /// tick (a run already under way finishes first).
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        let _ = self.refiller.await;
        let _ = self.confirmer.await;
        let _ = self.republisher.await;
        if let Err(e) = self.inner.shutdown().await {
            tracing::warn!(error = %e, "job scheduler did not shut down cleanly");
        }
        for leadership in &self.leaderships {
            leadership.resign().await;
        }
    }
}

/// Schedules one job at `cron`, led through a leadership of its own (added to `led`, for
/// [`Scheduler::shutdown`] to resign).
async fn add<F, Fut>(
    scheduler: &JobScheduler,
    state: &AppState,
    led: &mut Vec<Arc<Leadership>>,
    name: &'static str,
    cron: &'static str,
    run: F,
) -> anyhow::Result<()>
where
    F: Fn(AppState) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = anyhow::Result<()>> + Send + 'static,
{
    let leadership = Arc::new(Leadership::new(state.db.clone(), name).recording(&state.metrics.watch.job_leader));
    led.push(leadership.clone());
    let state = state.clone();
    let run = Arc::new(run);
    // A tick that finds the previous run still going is skipped, so slow runs (Redis
    // hanging) never pile up.
    let running = Arc::new(tokio::sync::Mutex::new(()));
    let job = Job::new_async(cron, move |_id, _scheduler| {
        let (leadership, state, run, running) = (leadership.clone(), state.clone(), run.clone(), running.clone());
        Box::pin(async move {
            let Ok(_running) = running.try_lock() else {
                state.metrics.job_runs.with_label_values(&[name, "overlap"]).inc();
                return;
            };
            let outcome = match leadership.ensure().await {
                Ok(true) => match run(state.clone()).await {
                    Ok(()) => "ok",
                    Err(e) => {
                        tracing::error!(job = name, error = format!("{e:#}"), "job failed");
                        "error"
                    }
                },
                Ok(false) => "skipped",
                // Postgres cannot say who leads: every job here is safe on several instances
                // at once (version-guarded publishes, idempotent sweeps), so run it rather
                // than let the data plane starve (design.md §2: Redis keeps serving while
                // Postgres is down; the Postgres-reading jobs then fail and retry).
                Err(e) => {
                    tracing::warn!(
                        job = name,
                        error = format!("{e:#}"),
                        "cannot tell who leads the job; running it anyway"
                    );
                    match run(state.clone()).await {
                        Ok(()) => "ok_unled",
                        Err(e) => {
                            tracing::error!(job = name, error = format!("{e:#}"), "job failed");
                            "error"
                        }
                    }
                }
            };
            state.metrics.job_runs.with_label_values(&[name, outcome]).inc();
        })
    })
    .with_context(|| format!("scheduling {name} at {cron:?}"))?;
    scheduler.add(job).await.with_context(|| format!("adding job {name}"))?;
    Ok(())
}
