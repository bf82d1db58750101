//! Pools and tenants published before the configuration tables existed (snapshots only)
//! are brought into the tables, so the admin API sees them.

use std::collections::BTreeMap;

use client::quota::{FallbackPolicy, GrantKind};
use serde_json::{json, Value};
use sqlx::PgPool;

use crate::audit::store::Source;
use crate::change::store::{audit, lock};
use crate::change::{Ctx, Entity};
use crate::pools::parse_pool_body;
use crate::pools::store::{store_pool, MadeBy};

/// Brings pools and tenants published before the configuration tables existed (snapshots
/// only) into the tables, so the admin API sees them: their channels are registered (named
/// by their code, base weight from the pool), each tenant gets a plan of its own
/// (`<tenant>-plan`) with its limits, and its grants are recorded. Each adoption is audited
/// (actor `migration`, source `system`); no new snapshot is written, since the published
/// one already says the same. Returns the entities adopted.
pub async fn adopt_snapshots(db: &PgPool) -> anyhow::Result<Vec<String>> {
    let orphans: Vec<(String, i64, Value)> = sqlx::query_as(
        "select distinct on (s.entity) s.entity, s.version, s.body from snapshot s
         where (s.entity like 'pool:%' and not exists (select 1 from pool p where 'pool:' || p.name = s.entity))
            or (s.entity like 'tenant:%' and not exists (select 1 from tenant t where 'tenant:' || t.name = s.entity))
         order by s.entity, s.version desc",
    )
    .fetch_all(db)
    .await?;
    let ctx = Ctx {
        actor: "migration",
        source: Source::System,
        reason: Some("adopted from a snapshot written before the configuration tables"),
        request_id: None,
    };
    let mut adopted = Vec::new();
    for (entity, version, body) in orphans {
        // One entity that cannot be adopted is logged and left as a snapshot (still
        // published as before); it does not keep the server from starting.
        match adopt_one(db, &ctx, &entity, version, &body).await {
            Ok(true) => adopted.push(entity),
            Ok(false) => {}
            Err(e) => tracing::error!(
                entity,
                version,
                error = format!("{e:#}"),
                "cannot adopt this snapshot into the configuration tables"
            ),
        }
    }
    Ok(adopted)
}

pub(crate) async fn adopt_one(
    db: &PgPool,
    ctx: &Ctx<'_>,
    entity: &str,
    version: i64,
    body: &Value,
) -> anyhow::Result<bool> {
    use anyhow::Context;
    {
        let mut tx = db.begin().await?;
        lock(&mut tx, entity).await?;
        let kind = Entity::parse(entity);
        if let Ok(Entity::Pool(pool)) = &kind {
            let pool = pool.as_str();
            let snapshot = parse_pool_body(body).with_context(|| format!("adopting {entity} v{version}"))?;
            let mut tiers_of: BTreeMap<String, String> = BTreeMap::new();
            for (tier, channels) in &snapshot.tiers {
                for (channel, _) in channels.iter() {
                    tiers_of.insert(channel.to_owned(), tier.as_str().to_owned());
                }
            }
            for (channel, weight) in snapshot.channels().iter() {
                sqlx::query("insert into channel (code, name, tier, base_weight) values ($1, $1, $2, $3) on conflict (code) do nothing")
                    .bind(channel)
                    .bind(tiers_of.get(channel))
                    .bind(weight as i64)
                    .execute(&mut *tx)
                    .await?;
            }
            store_pool(&mut tx, pool, &snapshot, version, MadeBy { actor: "system", action: "adopt" })
                .await
                .with_context(|| format!("adopting {entity} v{version}"))?;
        } else if let Ok(Entity::Tenant(tenant)) = &kind {
            let tenant = tenant.as_str();
            let mut versioned = body.clone();
            versioned["version"] = json!(version);
            let quota: client::quota::TenantQuota =
                serde_json::from_value(versioned).with_context(|| format!("adopting {entity} v{version}"))?;
            let concurrency = i32::try_from(quota.concurrency).context("concurrency above 2^31-1")?;
            let limits = (quota.monthly_tokens.get() as i64, quota.daily_requests as i64, concurrency);
            // A plan of the tenant's own: named after it, or after it with a number when
            // that name is a plan with other limits.
            let mut plan = tenant.to_owned();
            for n in 2.. {
                let existing: Option<(i64, i64, i32)> =
                    sqlx::query_as("select monthly_tokens, daily_requests, concurrency from plan where name = $1")
                        .bind(&plan)
                        .fetch_optional(&mut *tx)
                        .await?;
                match existing {
                    Some(found) if found == limits => break,
                    Some(_) => plan = format!("{}-{n}", &tenant[..tenant.len().min(56)]),
                    None => {
                        sqlx::query("insert into plan (name, monthly_tokens, daily_requests, concurrency) values ($1, $2, $3, $4)")
                            .bind(&plan)
                            .bind(limits.0)
                            .bind(limits.1)
                            .bind(limits.2)
                            .execute(&mut *tx)
                            .await?;
                        break;
                    }
                }
            }
            let (policy, allowance) = match quota.fallback {
                FallbackPolicy::FailClosed => ("fail_closed", None),
                FallbackPolicy::FailOpenLimited { allowance } => ("fail_open_limited", Some(allowance.get() as i64)),
            };
            sqlx::query(
                "insert into tenant (name, plan, reservation_ttl_ms, retention_days, fallback_policy, fallback_allowance, version,
                     idempotency_window_ms)
                 values ($1, $2, $3, $4, $5, $6, $7, $8)",
            )
            .bind(tenant)
            .bind(&plan)
            .bind(quota.reservation_ttl.as_millis() as i64)
            .bind(quota.retention_days as i32)
            .bind(policy)
            .bind(allowance)
            .bind(version)
            .bind(quota.idempotency_window.as_millis() as i64)
            .execute(&mut *tx)
            .await?;
            for grant in &quota.grants {
                let (kind, priority) = match grant.kind {
                    GrantKind::Temporary => ("temporary", 0),
                    GrantKind::Bonus { priority } => {
                        ("bonus", i32::try_from(priority).context("grant priority above 2^31-1")?)
                    }
                };
                sqlx::query(
                    "insert into quota_grant (tenant, id, kind, priority, amount, starts_at, expires_at) values ($1, $2, $3, $4, $5, $6, $7)",
                )
                .bind(tenant)
                .bind(grant.id.as_str())
                .bind(kind)
                .bind(priority)
                .bind(grant.amount.get() as i64)
                .bind(grant.starts_at)
                .bind(grant.expires_at)
                .execute(&mut *tx)
                .await?;
            }
        } else {
            return Ok(false);
        }
        audit(&mut tx, ctx, entity, "adopt", None, Some(&json!({"version": version}))).await?;
        tx.commit().await?;
    }
    Ok(true)
}
