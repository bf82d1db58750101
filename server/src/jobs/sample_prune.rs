//! The sample prune: once a day, deletes pool samples older than the configured retention
//! (`samples.retention_days`, default 7), in small batches so no long lock is held.

use anyhow::Context;
use sqlx::PgPool;

use crate::configuration::SampleRetention;
use crate::state::AppState;

/// Daily at 03:20:00 UTC.
pub const CRON: &str = "0 20 3 * * *";

/// Rows deleted per statement.
const BATCH: i64 = 5000;

/// Deletes the samples older than the configured retention; returns how many.
#[tracing::instrument(name = "job.sample_prune", skip_all, err)]
pub async fn run_once(state: &AppState) -> anyhow::Result<u64> {
    let deleted = prune_samples(&state.db, state.sample_retention).await.context("pruning pool samples")?;
    if deleted > 0 {
        tracing::info!(deleted, retention_days = state.sample_retention.days(), "pruned pool samples");
    }
    Ok(deleted)
}

/// Deletes the samples (and their members) taken more than `retention` before Postgres's
/// `now()`, a batch at a time; returns how many samples.
#[tracing::instrument(skip_all, fields(retention_days = retention.days()), err)]
pub async fn prune_samples(db: &PgPool, retention: SampleRetention) -> Result<u64, sqlx::Error> {
    let days = i32::try_from(retention.days()).unwrap_or(i32::MAX);
    let mut deleted = 0;
    loop {
        let done = sqlx::query(
            "delete from pool_sample where id in (
                 select id from pool_sample where taken_at < now() - make_interval(days => $1) limit $2)",
        )
        .bind(days)
        .bind(BATCH)
        .execute(db)
        .await?
        .rows_affected();
        deleted += done;
        if done < BATCH as u64 {
            return Ok(deleted);
        }
    }
}
