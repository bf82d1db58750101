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

pub mod store;

use anyhow::Context;
use serde::Serialize;

use client::pool::{PoolName, PoolSnapshot, ReweightMode};

use crate::change::Entity;
use crate::state::AppState;

/// What a publisher run did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Published {
    /// `entity vN` for each snapshot written to Redis.
    pub published: Vec<String>,
    /// Entities whose publication failed (kept for the next run).
    pub failed: Vec<String>,
}

/// Writes one snapshot to Redis under its entity's kind (a key that names no publishable
/// entity is an error, counted on its outbox row).
async fn publish_snapshot(
    state: &AppState,
    key: &str,
    version: i64,
    mut body: serde_json::Value,
) -> anyhow::Result<()> {
    let entity = Entity::parse(key)?;
    body.as_object_mut()
        .with_context(|| format!("snapshot of {entity} v{version} is not a JSON object"))?
        .insert("version".to_owned(), serde_json::json!(version));
    match &entity {
        Entity::Pool(pool) => {
            let snapshot: client::pool::PoolSnapshot =
                serde_json::from_value(body).with_context(|| format!("snapshot of {entity} v{version}"))?;
            // A Redis that lost the pool lost its short cap window's counters too: given back
            // from the draw log (short of one drain at most) before the pool can be drawn
            // again, so no draw races the restore. (A window cap set mid-window counts the
            // window's logged draws too.)
            if let Some(window) = &snapshot.window_caps {
                let length = i64::from(window.minutes) * 60_000;
                let now = state.pool_admin.now().await?.timestamp_millis();
                let start = now.div_euclid(length) * length;
                if !state.pool_admin.window_hits_exist(pool, start).await? {
                    let from = chrono::DateTime::from_timestamp_millis(start).context("the window's start")?;
                    let hits = crate::draws::store::counts_since(&state.db, pool, from).await?;
                    let raised = state.pool_admin.restore_window_hits(pool, start, window.minutes, &hits).await?;
                    if raised > 0 {
                        tracing::warn!(pool = %pool, start, raised, "window counters given back from the draw log");
                    }
                }
            }
            state.pool_admin.publish(pool, &snapshot).await.with_context(|| format!("publishing {entity}"))?;
            // A Redis that lost the pool lost its day counters too (which enforce the daily
            // caps): the last sample gives them back, short of one sample interval at most.
            if let Some((day, hits)) = crate::samples::store::last_day_hits(&state.db, pool).await? {
                let hits: Vec<(String, u64)> = hits.into_iter().map(|(m, n)| (m, n.max(0) as u64)).collect();
                let raised = state.pool_admin.restore_day_hits(pool, day, &hits).await?;
                if raised > 0 {
                    tracing::warn!(pool = %pool, %day, raised, "day counters given back from the last sample");
                }
            }
        }
        Entity::Route(route) => {
            let snapshot = crate::change::route_snapshot(version, &body).map_err(|e| anyhow::anyhow!("{e}"))?;
            state.route_admin.publish(route, &snapshot).await.with_context(|| format!("publishing {entity}"))?;
        }
        Entity::Tenant(tenant) => {
            let snapshot: client::quota::TenantQuota =
                serde_json::from_value(body).with_context(|| format!("snapshot of {entity} v{version}"))?;
            let published = state
                .quotas
                .publish_restoring(tenant, &snapshot, None)
                .await
                .with_context(|| format!("publishing {entity}"))?;
            if published == client::quota::Published::NeedsRestore {
                // No counters in this Redis (a new tenant, or a Redis that restarted empty):
                // rebuilt from the usage ledger before the snapshot lets anyone be served.
                let (restore, lock) = crate::usage::restore(state, tenant).await?;
                state
                    .quotas
                    .publish_restoring(tenant, &snapshot, Some(&restore))
                    .await
                    .with_context(|| format!("publishing {entity} with its counters restored"))?;
                // Ledger writers of this tenant waited for the publish: they now see the
                // restored counters (and charge rows after the restore to them).
                lock.commit().await.context("releasing the tenant's ledger lock")?;
            }
        }
    }
    Ok(())
}

/// Delivers pending outbox rows that are due, oldest first, one entity at a time. A failed
/// delivery waits 2, 4, 8, 16, then at most 30 s before the next attempt (the row keeps
/// its attempts and last error); a newer change of the entity is tried at once.
#[tracing::instrument(name = "job.outbox", skip_all, err)]
pub async fn drain_outbox(state: &AppState) -> anyhow::Result<Published> {
    let pending = store::due_entities(&state.db).await.context("reading the outbox")?;
    let mut outcome = Published::default();
    for entity in pending {
        let Some((version, body)) = store::newest(&state.db, &entity).await? else { continue };
        match publish_snapshot(state, &entity, version, body).await {
            Ok(()) => {
                store::mark_delivered(&state.db, &entity, version).await?;
                outcome.published.push(format!("{entity} v{version}"));
            }
            Err(e) => {
                tracing::warn!(
                    entity,
                    error = format!("{e:#}"),
                    "publishing failed; retried with backoff (at most 30 s)"
                );
                store::mark_failed(&state.db, &entity, &format!("{e:#}")).await?;
                outcome.failed.push(entity);
            }
        }
    }
    Ok(outcome)
}

/// Sets the outbox gauges from the rows still waiting (the alert on an outbox backlog
/// reads them); answers how many wait.
pub async fn measure_backlog(state: &AppState) -> anyhow::Result<i64> {
    let (pending, oldest_age) = store::backlog(&state.db).await.context("counting the undelivered outbox rows")?;
    state.metrics.watch.outbox_pending.set(pending);
    state.metrics.watch.outbox_oldest_age.set(oldest_age);
    Ok(pending)
}

/// Republishes every entity whose meta hash in Redis is missing or older than Postgres.
#[tracing::instrument(name = "job.reconcile", skip_all, err)]
pub async fn reconcile(state: &AppState) -> anyhow::Result<Published> {
    // Versions only (bodies are loaded for the stale entities alone).
    let newest = store::newest_versions(&state.db).await.context("reading the newest versions")?;
    let mut conn = state.redis.connection().await.context("connecting to redis")?;
    let mut commands = Vec::new();
    let mut published_kinds = Vec::new();
    for (entity, _) in &newest {
        let meta = match Entity::parse(entity) {
            Ok(Entity::Pool(name)) => Some(state.keys.pool_meta(name.as_str())),
            Ok(Entity::Tenant(name)) => Some(state.keys.quota_meta(name.as_str())),
            Ok(Entity::Route(name)) => Some(state.keys.route_meta(name.as_str())),
            Err(_) => None,
        };
        if let Some(meta) = meta {
            commands.push(redis::cmd("HGET").arg(meta).arg("version").to_owned());
            published_kinds.push(true);
        } else {
            published_kinds.push(false);
        }
    }
    let held = conn
        .send_each(commands)
        .await
        .and_then(|replies| replies.into_iter().map(|r| r.and_then(redis::from_owned_redis_value)).collect())
        .context("reading published versions")?;
    let held: Vec<Option<i64>> = held;
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
        let body = store::body_at(&state.db, &entity, version)
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

/// Gives the data plane every pool's and tenant's last published snapshot from Postgres
/// (at start), so the local pool and each tenant's fallback policy serve from the first
/// request, before any successful Redis call, and while Redis lacks an entity. Returns how
/// many pools and tenants it remembered.
pub async fn remember_published(state: &AppState) -> anyhow::Result<(usize, usize)> {
    let newest = store::newest_versions(&state.db).await.context("reading the newest versions")?;
    let (mut pools, mut tenants) = (0, 0);
    for (entity, version) in newest {
        let Ok(parsed) = Entity::parse(&entity) else { continue };
        let mut body = store::body_at(&state.db, &entity, version)
            .await
            .with_context(|| format!("reading {entity} v{version}"))?;
        let Some(object) = body.as_object_mut() else { continue };
        object.insert("version".to_owned(), serde_json::json!(version));
        match parsed {
            Entity::Pool(pool) => match serde_json::from_value::<PoolSnapshot>(body) {
                Ok(snapshot) => {
                    state.pools.remember(&pool, snapshot);
                    pools += 1;
                }
                Err(e) => tracing::warn!(entity, error = %e, "a stored pool snapshot does not parse; not remembered"),
            },
            Entity::Tenant(tenant) => match serde_json::from_value::<client::quota::TenantQuota>(body) {
                Ok(quota) => {
                    state.quotas.remember(&tenant, quota.version, quota.fallback);
                    tenants += 1;
                }
                Err(e) => tracing::warn!(entity, error = %e, "a stored tenant snapshot does not parse; not remembered"),
            },
            Entity::Route(route) => match crate::change::route_snapshot(version, &body) {
                Ok(snapshot) => state.routes.remember(&route, snapshot),
                Err(e) => tracing::warn!(entity, error = %e, "a stored route snapshot does not parse; not remembered"),
            },
        }
    }
    Ok((pools, tenants))
}

/// Republishes at once what the data plane finds missing from Redis (a pool's meta hash, a
/// tenant's snapshot), rather than at the next reconcile; runs until `stop`.
pub async fn republish_missing(state: AppState, mut stop: tokio::sync::watch::Receiver<bool>) {
    loop {
        let pools = state.pools.clone();
        let quotas = state.quotas.clone();
        let missing = tokio::select! {
            _ = stop.changed() => return,
            p = pools.missing_meta() => p.iter().map(ToString::to_string).collect::<Vec<_>>(),
            t = quotas.missing_meta() => t.iter().map(ToString::to_string).collect::<Vec<_>>(),
        };
        tracing::info!(?missing, "redis lost entities the data plane serves: republishing now");
        // The settles this instance made that the lost streams held go to the ledger first,
        // so the tenants' counters are restored with them.
        if let Err(e) = crate::usage::confirm(&state, std::time::Duration::ZERO).await {
            tracing::warn!(
                error = format!("{e:#}"),
                "writing this instance's settle records before the restore failed"
            );
        }
        if let Err(e) = reconcile(&state).await {
            tracing::warn!(error = format!("{e:#}"), "republishing what redis lost failed; the reconcile job retries");
        }
        // At most a few runs a second, however many requests find something missing.
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// Publishes right away (best effort: the outbox delivers it otherwise); says whether it did.
pub(crate) async fn publish_now(state: &AppState) -> bool {
    match drain_outbox(state).await {
        Ok(done) => done.failed.is_empty(),
        Err(e) => {
            tracing::warn!(error = format!("{e:#}"), "publishing after a change failed; the outbox retries");
            false
        }
    }
}

/// [`rebuild_if_needed`] for a pool as it is published now (after a change that was not
/// made through `pools::routes::change_pool`: a channel switch, a pin, a health decision).
pub(crate) async fn rebuild_published_if_needed(state: &AppState, pool: &PoolName, mode: ReweightMode) -> bool {
    match crate::pools::store::get_published_pool(&state.db, pool).await {
        Ok(Some(snapshot)) => rebuild_if_needed(state, pool, &snapshot, mode).await,
        _ => false,
    }
}

/// Replaces the remaining tickets with a fresh batch when the change asks for it at once,
/// or when ejected members hold more than the pool's limit (so draws do not skip most
/// tickets). Says whether it did.
pub(crate) async fn rebuild_if_needed(
    state: &AppState,
    pool: &PoolName,
    snapshot: &PoolSnapshot,
    mode: ReweightMode,
) -> bool {
    let needed =
        mode == ReweightMode::Immediate || snapshot.ejected_percent() > f64::from(snapshot.eject_rebuild_percent);
    if !needed {
        return false;
    }
    match state.pool_admin.rebuild(pool).await {
        Ok(_) => true,
        Err(e) => {
            tracing::warn!(pool = %pool, error = %e, "rebuild after a change failed; the next batch uses the new configuration");
            false
        }
    }
}
