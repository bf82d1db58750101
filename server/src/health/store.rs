//! The health tables: each member's state (`member_health`), transitions
//! (`health_transition`), pins (`channel_pin`) and pools' policies.

use std::collections::HashMap;

use api::health::{ChannelHealth, ChannelPin, EjectionCap, HealthTransition, PoolHealth};
use chrono::{DateTime, Utc};
use client::pool::PoolName;
use engine::health::{self as machine, Member, Pin, Policy, State};
use serde_json::{json, Value};
use sqlx::{PgConnection, PgPool, Row};

use super::{at, ms, policy_of};
use crate::change::{Ctx, Written};
use crate::channels::ChannelCode;
use crate::error::ChangeError;

/// Every pool's name and raw health policy, by name.
pub async fn policies(db: &PgPool) -> Result<Vec<(String, Value)>, sqlx::Error> {
    sqlx::query_as("select name, health_policy from pool order by name").fetch_all(db).await
}

/// The channels of a pool's members.
pub async fn member_channels(db: &PgPool, pool: &str) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar("select channel from pool_member where pool = $1").bind(pool).fetch_all(db).await
}

/// A tiers pool's tier weights.
pub async fn tier_weights(tx: &mut PgConnection, pool: &str) -> Result<Vec<(String, i64)>, sqlx::Error> {
    sqlx::query_as("select tier, weight from pool_tier where pool = $1").bind(pool).fetch_all(&mut *tx).await
}

/// A member's health after an evaluation.
pub struct SavedHealth<'a> {
    pub member: &'a Member,
    /// When it changed state now, else `None` (the last transition stays).
    pub transition_at: Option<DateTime<Utc>>,
    pub reason: Option<&'a str>,
    pub success_rate: Option<f64>,
    pub volume: i64,
    pub ewma_error: Option<f64>,
    pub ewma_latency: Option<f64>,
}

/// Stores a member's health.
pub async fn save_member_health(
    tx: &mut PgConnection,
    pool: &str,
    channel: &str,
    h: &SavedHealth<'_>,
) -> Result<(), sqlx::Error> {
    let after = h.member;
    sqlx::query(
        "insert into member_health (pool, channel, state, factor, cap_bound, last_decay_at, last_failure_at,
             recovering_since, recovering_from, last_transition_at, last_reason, success_rate, volume,
             ewma_error, ewma_latency_ms, updated_at)
         values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, now())
         on conflict (pool, channel) do update set state = excluded.state, factor = excluded.factor,
             cap_bound = excluded.cap_bound, last_decay_at = excluded.last_decay_at,
             last_failure_at = excluded.last_failure_at, recovering_since = excluded.recovering_since,
             recovering_from = excluded.recovering_from,
             last_transition_at = coalesce(excluded.last_transition_at, member_health.last_transition_at),
             last_reason = coalesce(excluded.last_reason, member_health.last_reason),
             success_rate = excluded.success_rate, volume = excluded.volume, ewma_error = excluded.ewma_error,
             ewma_latency_ms = excluded.ewma_latency_ms, updated_at = now()",
    )
    .bind(pool)
    .bind(channel)
    .bind(after.state.as_str())
    .bind(after.factor)
    .bind(after.cap_bound)
    .bind(at(after.last_decay_at))
    .bind(at(after.last_failure_at))
    .bind(at(after.recovering_since))
    .bind(after.recovering_from)
    .bind(h.transition_at)
    .bind(h.reason)
    .bind(h.success_rate)
    .bind(h.volume)
    .bind(h.ewma_error)
    .bind(h.ewma_latency)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// A member's change of state.
pub struct Transition<'a> {
    pub at: Option<DateTime<Utc>>,
    pub from: &'a Member,
    pub to: &'a Member,
    pub success_rate: Option<f64>,
    pub volume: i64,
    pub reason: &'a str,
}

/// Records a transition.
pub async fn insert_transition(
    tx: &mut PgConnection,
    pool: &str,
    channel: &str,
    t: &Transition<'_>,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "insert into health_transition (pool, channel, at, from_state, to_state, factor_before, factor_after, success_rate, volume, reason)
         values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
    )
    .bind(pool)
    .bind(channel)
    .bind(t.at)
    .bind(t.from.state.as_str())
    .bind(t.to.state.as_str())
    .bind(t.from.factor)
    .bind(t.to.factor)
    .bind(t.success_rate)
    .bind(t.volume)
    .bind(t.reason)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// A pool member as the evaluation reads it: its weight, tier, pin, whether it is ejected
/// for another reason, and its health state.
pub struct MemberRow {
    pub channel: String,
    pub base: u64,
    /// The channel's tier in a tiers pool.
    pub tier: Option<String>,
    pub ejected_otherwise: bool,
    pub pin: Option<Pin>,
    pub member: Member,
    pub ewma_error: Option<f64>,
    pub ewma_latency: Option<f64>,
}

/// The members of a pool with their channel, pin and health, in order.
pub async fn members(tx: &mut PgConnection, pool: &str) -> Result<Vec<MemberRow>, sqlx::Error> {
    let rows = sqlx::query(
        "select m.channel, m.tier, m.weight, m.ejected, c.enabled, p.state as pin,
                h.state, h.factor, h.cap_bound, h.last_decay_at, h.last_failure_at, h.recovering_since,
                h.recovering_from, h.ewma_error, h.ewma_latency_ms
         from pool_member m
         join channel c on c.code = m.channel
         left join channel_pin p on p.channel = m.channel
         left join member_health h on h.pool = m.pool and h.channel = m.channel
         where m.pool = $1 order by m.position",
    )
    .bind(pool)
    .fetch_all(&mut *tx)
    .await?;
    rows.iter()
        .map(|r| {
            let state: Option<String> = r.try_get("state")?;
            let member = match state.as_deref().and_then(State::parse) {
                None => Member::default(),
                Some(state) => Member {
                    state,
                    factor: r.try_get("factor")?,
                    cap_bound: r.try_get("cap_bound")?,
                    last_decay_at: ms(r.try_get("last_decay_at")?),
                    last_failure_at: ms(r.try_get("last_failure_at")?),
                    recovering_since: ms(r.try_get("recovering_since")?),
                    recovering_from: r.try_get("recovering_from")?,
                },
            };
            let pin: Option<String> = r.try_get("pin")?;
            Ok(MemberRow {
                channel: r.try_get("channel")?,
                base: r.try_get::<i64, _>("weight")? as u64,
                tier: r.try_get("tier")?,
                ejected_otherwise: r.try_get::<bool, _>("ejected")? || !r.try_get::<bool, _>("enabled")?,
                pin: match pin.as_deref() {
                    Some("healthy") => Some(Pin::Healthy),
                    Some("ejected") => Some(Pin::Ejected),
                    _ => None,
                },
                member,
                ewma_error: r.try_get("ewma_error")?,
                ewma_latency: r.try_get("ewma_latency_ms")?,
            })
        })
        .collect()
}

/// One member's health as the endpoints show it: defined in `api`.
pub use api::health::MemberHealth;

/// Every member's health in the pools selected by `where_sql` (`$1` bound to `key`).
async fn health_rows(db: &PgPool, where_sql: &str, key: &str) -> Result<Vec<MemberHealth>, sqlx::Error> {
    let rows = sqlx::query(&format!(
        "select m.pool, m.channel, m.weight, m.ejected, c.enabled, p.state as pin, po.health_policy,
                coalesce(h.state, 'healthy') as state, coalesce(h.factor, 1) as factor, coalesce(h.cap_bound, false) as cap_bound,
                h.success_rate, coalesce(h.volume, 0) as volume, h.last_transition_at, h.last_reason, h.ewma_error, h.ewma_latency_ms
         from pool_member m
         join pool po on po.name = m.pool
         join channel c on c.code = m.channel
         left join channel_pin p on p.channel = m.channel
         left join member_health h on h.pool = m.pool and h.channel = m.channel
         where {where_sql} order by m.pool, m.position"
    ))
    .bind(key)
    .fetch_all(db)
    .await?;
    let mut out: Vec<MemberHealth> = Vec::with_capacity(rows.len());
    let mut alphas: HashMap<String, f64> = HashMap::new();
    for r in &rows {
        let pool: String = r.try_get("pool")?;
        let pin: Option<String> = r.try_get("pin")?;
        let mut state: String = r.try_get("state")?;
        let mut factor: f64 = r.try_get("factor")?;
        match pin.as_deref() {
            Some("healthy") => (state, factor) = ("healthy".into(), 1.0),
            Some("ejected") => (state, factor) = ("ejected".into(), 0.0),
            _ => {}
        }
        let base: i64 = r.try_get("weight")?;
        let out_otherwise = r.try_get::<bool, _>("ejected")? || !r.try_get::<bool, _>("enabled")?;
        let policy = policy_of(&r.try_get::<Value, _>("health_policy")?).unwrap_or_default();
        alphas.insert(pool.clone(), policy.ewma_alpha);
        out.push(MemberHealth {
            effective_weight: machine::effective_weight(base as u64, factor, out_otherwise || state == "ejected"),
            pool,
            channel: r.try_get("channel")?,
            state,
            pinned: pin,
            base_weight: base,
            factor,
            cap_bound: r.try_get("cap_bound")?,
            success_rate: r.try_get("success_rate")?,
            volume: r.try_get("volume")?,
            last_transition_at: r
                .try_get::<Option<DateTime<Utc>>, _>("last_transition_at")?
                .map(crate::inputs::rfc3339),
            last_reason: r.try_get("last_reason")?,
            suggested_weight: base as u64,
            ewma_error: r.try_get("ewma_error")?,
            ewma_latency_ms: r.try_get("ewma_latency_ms")?,
        });
    }
    // Suggestions are relative to the pool's other members.
    let pools: Vec<String> = alphas.keys().cloned().collect();
    for pool in pools {
        let all = sqlx::query(
            "select m.channel, m.weight, h.ewma_error, h.ewma_latency_ms from pool_member m
             left join member_health h on h.pool = m.pool and h.channel = m.channel where m.pool = $1 order by m.position",
        )
        .bind(&pool)
        .fetch_all(db)
        .await?;
        let inputs: Vec<(u64, Option<f64>, Option<f64>)> = all
            .iter()
            .map(|r| {
                Ok((r.try_get::<i64, _>("weight")? as u64, r.try_get("ewma_error")?, r.try_get("ewma_latency_ms")?))
            })
            .collect::<Result<_, sqlx::Error>>()?;
        let suggested = machine::suggested_weights(&inputs, alphas[&pool]);
        for (r, s) in all.iter().zip(suggested) {
            let channel: String = r.try_get("channel")?;
            if let Some(m) = out.iter_mut().find(|m| m.pool == pool && m.channel == channel) {
                m.suggested_weight = s;
            }
        }
    }
    Ok(out)
}

/// A pool's members' health, its policy, and how much of its base weight is out.
pub async fn pool_health(db: &PgPool, pool: &PoolName) -> Result<Option<PoolHealth>, sqlx::Error> {
    let Some(raw): Option<Value> = sqlx::query_scalar("select health_policy from pool where name = $1")
        .bind(pool.as_str())
        .fetch_optional(db)
        .await?
    else {
        return Ok(None);
    };
    let policy = policy_of(&raw).unwrap_or_default();
    let members = health_rows(db, "m.pool = $1", pool.as_str()).await?;
    let total: i64 = members.iter().map(|m| m.base_weight).sum();
    let out: i64 = members.iter().filter(|m| m.effective_weight == 0 && m.base_weight > 0).map(|m| m.base_weight).sum();
    let ejected_percent = if total > 0 { out as f64 * 100.0 / total as f64 } else { 0.0 };
    Ok(Some(PoolHealth {
        pool: pool.as_str().to_owned(),
        policy,
        cap: EjectionCap {
            max_ejected_percent: policy.max_ejected_percent,
            ejected_percent,
            bound: members.iter().any(|m| m.cap_bound),
        },
        members,
    }))
}

/// Every member's health in every pool (one query, however many channels: the channels
/// page), and every pin by channel.
pub async fn every_member_health(db: &PgPool) -> Result<(Vec<MemberHealth>, HashMap<String, String>), sqlx::Error> {
    // Pool names are never empty (a check constraint): every member.
    let members = health_rows(db, "m.pool <> $1", "").await?;
    let pins: Vec<(String, String)> = sqlx::query_as("select channel, state from channel_pin").fetch_all(db).await?;
    Ok((members, pins.into_iter().collect()))
}

/// A channel's health in every pool that holds it, and its pin.
pub async fn channel_health(db: &PgPool, code: &ChannelCode) -> Result<Option<ChannelHealth>, sqlx::Error> {
    let exists: Option<bool> = sqlx::query_scalar("select enabled from channel where code = $1")
        .bind(code.as_str())
        .fetch_optional(db)
        .await?;
    let Some(enabled) = exists else { return Ok(None) };
    let pin = sqlx::query("select state, reason, actor, pinned_at from channel_pin where channel = $1")
        .bind(code.as_str())
        .fetch_optional(db)
        .await?;
    let pin = match pin {
        Some(r) => Some(ChannelPin {
            state: r.try_get("state")?,
            reason: r.try_get("reason")?,
            actor: r.try_get("actor")?,
            pinned_at: crate::inputs::rfc3339(r.try_get("pinned_at")?),
        }),
        None => None,
    };
    let pools = health_rows(db, "m.channel = $1", code.as_str()).await?;
    Ok(Some(ChannelHealth { channel: code.as_str().to_owned(), enabled, pin, pools }))
}

/// A channel's transitions, newest first.
pub async fn history(db: &PgPool, code: &ChannelCode, limit: i64) -> Result<Vec<HealthTransition>, sqlx::Error> {
    let rows = sqlx::query(
        "select pool, at, from_state, to_state, factor_before, factor_after, success_rate, volume, reason
         from health_transition where channel = $1 order by at desc, id desc limit $2",
    )
    .bind(code.as_str())
    .bind(limit)
    .fetch_all(db)
    .await?;
    rows.iter()
        .map(|r| {
            Ok(HealthTransition {
                pool: r.try_get("pool")?,
                at: crate::inputs::rfc3339(r.try_get("at")?),
                from: r.try_get("from_state")?,
                to: r.try_get("to_state")?,
                factor_before: r.try_get("factor_before")?,
                factor_after: r.try_get("factor_after")?,
                success_rate: r.try_get("success_rate")?,
                volume: r.try_get("volume")?,
                reason: r.try_get("reason")?,
            })
        })
        .collect()
}

/// Pins a channel (`Some`) or removes its pin (`None`) in one audited change; every pool
/// holding it is republished when what it publishes changes.
pub async fn set_pin(
    db: &PgPool,
    ctx: &Ctx<'_>,
    code: &ChannelCode,
    pin: Option<Pin>,
) -> Result<Vec<Written>, ChangeError> {
    let entity = format!("channel:{code}");
    let mut tx = db.begin().await?;
    crate::change::store::lock(&mut tx, &entity).await?;
    let exists: Option<i64> = sqlx::query_scalar("select version from channel where code = $1")
        .bind(code.as_str())
        .fetch_optional(&mut *tx)
        .await?;
    if exists.is_none() {
        return Err(ChangeError::NotFound(format!("unknown channel {:?}", code.as_str())));
    }
    let before: Option<String> = sqlx::query_scalar("select state from channel_pin where channel = $1")
        .bind(code.as_str())
        .fetch_optional(&mut *tx)
        .await?;
    let after = pin.map(|p| match p {
        Pin::Healthy => "healthy",
        Pin::Ejected => "ejected",
    });
    if before.as_deref() == after {
        let rule = match after {
            Some(state) => format!("the channel is already pinned {state}"),
            None => "the channel is not pinned".to_owned(),
        };
        return Err(ChangeError::Invalid { field: "state".into(), rule });
    }
    match after {
        Some(state) => {
            sqlx::query(
                "insert into channel_pin (channel, state, reason, actor) values ($1, $2, $3, $4)
                 on conflict (channel) do update set state = excluded.state, reason = excluded.reason, actor = excluded.actor, pinned_at = now()",
            )
            .bind(code.as_str())
            .bind(state)
            .bind(ctx.reason.unwrap_or("pinned"))
            .bind(ctx.actor)
            .execute(&mut *tx)
            .await?;
        }
        None => {
            sqlx::query("delete from channel_pin where channel = $1").bind(code.as_str()).execute(&mut *tx).await?;
        }
    }
    let action = if after.is_some() { "channel.pin" } else { "channel.unpin" };
    let audit_id = crate::change::store::audit(
        &mut tx,
        ctx,
        &entity,
        action,
        Some(&json!({"pin": before})),
        Some(&json!({"pin": after})),
    )
    .await?;
    let mut written =
        vec![Written { entity, action: action.into(), version: exists.unwrap_or(1), audit_id, outbox_id: None }];
    let pools: Vec<String> = sqlx::query_scalar("select pool from pool_member where channel = $1 order by pool")
        .bind(code.as_str())
        .fetch_all(&mut *tx)
        .await?;
    for pool in pools {
        crate::change::store::lock(&mut tx, &crate::change::Entity::pool_key(&pool)).await?;
        // A pin overrides health evaluation in a pool under an approval policy without a
        // request: it stays immediate (an operator's emergency lever), flagged for an auditor.
        let name =
            PoolName::parse(&pool).map_err(|e| ChangeError::Invalid { field: "pool".into(), rule: e.to_string() })?;
        crate::gate::break_glass::store::flag(&mut tx, ctx, &name, action, audit_id).await?;
        if let Some(w) = crate::pools::store::republish_pool_if_changed(&mut tx, ctx, &pool, action).await? {
            written.push(w);
        }
    }
    tx.commit().await?;
    Ok(written)
}

/// Replaces a pool's health thresholds (audited; nothing is published: the next
/// evaluation uses them).
pub async fn set_policy(
    db: &PgPool,
    ctx: &Ctx<'_>,
    pool: &PoolName,
    raw: &Value,
) -> Result<(Policy, i64), ChangeError> {
    let policy = policy_of(raw)?;
    let entity = crate::change::Entity::pool_key(pool);
    let mut tx = db.begin().await?;
    crate::change::store::lock(&mut tx, &entity).await?;
    let before: Option<Value> = sqlx::query_scalar("select health_policy from pool where name = $1")
        .bind(pool.as_str())
        .fetch_optional(&mut *tx)
        .await?;
    let Some(before) = before else {
        return Err(ChangeError::NotFound(format!("unknown pool {:?}", pool.as_str())));
    };
    // The health job ejects and decays members by this policy with no request of its own:
    // under an approval policy only an accepted change request may change the pool, so a
    // direct change of its health policy is refused (409 naming the policy), as a tier policy's.
    crate::gate::refuse_direct_write(&mut *tx, pool).await?;
    let stored = serde_json::to_value(policy)
        .map_err(|e| ChangeError::Invalid { field: "health_policy".into(), rule: e.to_string() })?;
    sqlx::query("update pool set health_policy = $2 where name = $1")
        .bind(pool.as_str())
        .bind(&stored)
        .execute(&mut *tx)
        .await?;
    let audit_id = crate::change::store::audit(
        &mut tx,
        ctx,
        &entity,
        "pool.health_policy",
        Some(&json!({"health_policy": before})),
        Some(&json!({"health_policy": stored})),
    )
    .await?;
    tx.commit().await?;
    Ok((policy, audit_id))
}
