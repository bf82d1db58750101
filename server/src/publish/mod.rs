//! Publishing: Postgres holds the truth, Redis meta hashes hold published copies.
//!
//! - [`drain_outbox`] delivers each change's outbox row: it publishes the entity's newest
//!   snapshot (version-guarded in Redis, so an older one never overwrites a newer one) and
//!   marks every pending row of that entity up to that version delivered; a failure is
//!   counted on the row and retried on the next run, so a Redis outage delays a change but
//!   never loses it.
//! - [`reconcile`] compares every entity's newest version in Postgres with the version its
//!   meta hash holds and republishes what is missing or older (after a Redis restart or a
//!   FLUSHALL); publishing a pool also writes its days and fills its lists.

use anyhow::Context;
use serde::Serialize;
use sqlx::PgPool;

use crate::state::AppState;

/// What a publisher run did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Published {
    /// `entity vN` for each snapshot written to Redis.
    pub published: Vec<String>,
    /// Entities whose publication failed (kept for the next run).
    pub failed: Vec<String>,
}

/// The newest snapshot of an entity.
async fn newest(db: &PgPool, entity: &str) -> Result<Option<(i64, serde_json::Value)>, sqlx::Error> {
    sqlx::query_as("select version, body from snapshot where entity = $1 order by version desc limit 1")
        .bind(entity)
        .fetch_optional(db)
        .await
}

/// Writes one snapshot to Redis under its entity's kind; entities of other kinds are
/// acknowledged without a write (nothing in Redis reads them).
async fn publish_snapshot(
    state: &AppState,
    entity: &str,
    version: i64,
    mut body: serde_json::Value,
) -> anyhow::Result<()> {
    body.as_object_mut()
        .with_context(|| format!("snapshot of {entity} v{version} is not a JSON object"))?
        .insert("version".to_owned(), serde_json::json!(version));
    if let Some(name) = entity.strip_prefix("pool:") {
        let pool = client::pool::PoolName::parse(name)?;
        let snapshot: client::pool::PoolSnapshot =
            serde_json::from_value(body).with_context(|| format!("snapshot of {entity} v{version}"))?;
        state.pool_admin.publish(&pool, &snapshot).await.with_context(|| format!("publishing {entity}"))?;
    } else if let Some(name) = entity.strip_prefix("tenant:") {
        let tenant = client::quota::TenantId::parse(name)?;
        let snapshot: client::quota::TenantQuota =
            serde_json::from_value(body).with_context(|| format!("snapshot of {entity} v{version}"))?;
        state.quotas.publish(&tenant, &snapshot).await.with_context(|| format!("publishing {entity}"))?;
    }
    Ok(())
}

/// Delivers pending outbox rows that are due, oldest first, one entity at a time. A failed
/// delivery waits 2, 4, 8, 16, then at most 30 s before the next attempt (the row keeps
/// its attempts and last error); a newer change of the entity is tried at once.
#[tracing::instrument(name = "job.outbox", skip_all, err)]
pub async fn drain_outbox(state: &AppState) -> anyhow::Result<Published> {
    let pending: Vec<String> = sqlx::query_scalar(
        "select entity from outbox
         where delivered_at is null and (next_attempt_at is null or next_attempt_at <= now())
         group by entity order by min(id) limit 200",
    )
    .fetch_all(&state.db)
    .await
    .context("reading the outbox")?;
    let mut outcome = Published::default();
    for entity in pending {
        let Some((version, body)) = newest(&state.db, &entity).await? else { continue };
        match publish_snapshot(state, &entity, version, body).await {
            Ok(()) => {
                sqlx::query(
                    "update outbox set delivered_at = now(), attempts = attempts + 1, last_error = null
                     where entity = $1 and version <= $2 and delivered_at is null",
                )
                .bind(&entity)
                .bind(version)
                .execute(&state.db)
                .await?;
                outcome.published.push(format!("{entity} v{version}"));
            }
            Err(e) => {
                tracing::warn!(
                    entity,
                    error = format!("{e:#}"),
                    "publishing failed; retried with backoff (at most 30 s)"
                );
                sqlx::query(
                    "update outbox set attempts = attempts + 1, last_error = $2,
                         next_attempt_at = now() + least(power(2, least(attempts + 1, 5)), 30) * interval '1 second'
                     where entity = $1 and delivered_at is null",
                )
                .bind(&entity)
                .bind(format!("{e:#}"))
                .execute(&state.db)
                .await?;
                outcome.failed.push(entity);
            }
        }
    }
    Ok(outcome)
}

/// Republishes every entity whose meta hash in Redis is missing or older than Postgres.
#[tracing::instrument(name = "job.reconcile", skip_all, err)]
pub async fn reconcile(state: &AppState) -> anyhow::Result<Published> {
    // Versions only (bodies are loaded for the stale entities alone).
    let newest: Vec<(String, i64)> =
        sqlx::query_as("select entity, max(version) from snapshot group by entity order by entity")
            .fetch_all(&state.db)
            .await
            .context("reading the newest versions")?;
    let mut conn = state.redis.connection().await.context("connecting to redis")?;
    let mut pipe = redis::pipe();
    let mut published_kinds = Vec::new();
    for (entity, _) in &newest {
        let meta = if let Some(name) = entity.strip_prefix("pool:") {
            Some(state.keys.pool_meta(name))
        } else {
            entity.strip_prefix("tenant:").map(|name| state.keys.quota_meta(name))
        };
        if let Some(meta) = meta {
            pipe.cmd("HGET").arg(meta).arg("version");
            published_kinds.push(true);
        } else {
            published_kinds.push(false);
        }
    }
    let held: Vec<Option<i64>> = pipe.query_async(&mut conn).await.context("reading published versions")?;
    let mut held = held.into_iter();
    let mut outcome = Published::default();
    for ((entity, version), kind) in newest.into_iter().zip(published_kinds) {
        if !kind {
            continue;
        }
        let current = held.next().flatten();
        if current.is_some_and(|v| v >= version) {
            continue;
        }
        let body: serde_json::Value =
            sqlx::query_scalar("select body from snapshot where entity = $1 and version = $2")
                .bind(&entity)
                .bind(version)
                .fetch_one(&state.db)
                .await
                .with_context(|| format!("reading {entity} v{version}"))?;
        match publish_snapshot(state, &entity, version, body).await {
            Ok(()) => outcome.published.push(format!("{entity} v{version}")),
            Err(e) => {
                tracing::warn!(entity, error = format!("{e:#}"), "republishing failed");
                outcome.failed.push(entity);
            }
        }
    }
    if !outcome.published.is_empty() {
        tracing::info!(published = ?outcome.published, "reconciled redis with postgres");
    }
    Ok(outcome)
}
