//! Channel health (DESIGN §5): the evaluation job, pins, and what the health endpoints
//! read. The state machine itself is `engine::health`; this module measures windows from
//! the outcome buckets in Redis, keeps each member's state in Postgres (`member_health`),
//! records transitions (`health_transition`) and, when a pool's effective weights change,
//! writes the pool's next version through the same audited path as a human change
//! (source `health`, the measured rates as the reason), then publishes it: ejections at
//! once (the pool is rebuilt), other changes from the next batch.

pub mod routes;

use std::collections::HashMap;

use anyhow::Context;
use chrono::{DateTime, TimeZone, Utc};
use client::pool::{PoolName, ReweightMode};
use engine::health::{self as machine, Change, Input, Member, Pin, Policy, State, Window};
use serde::Serialize;
use serde_json::{json, Value};
use sqlx::{PgConnection, PgPool, Row};

use crate::audit::store::Source;
use crate::change::ChangeError;
use crate::change::Ctx;
use crate::change::Written;
use crate::channels::ChannelCode;
use crate::state::AppState;

/// What one evaluation did.
#[derive(Debug, Default, Serialize)]
pub struct Report {
    pub pools: usize,
    /// `pool/channel: change` for every member whose state or factor changed.
    pub changes: Vec<String>,
    /// Pools written as a new version.
    pub republished: Vec<String>,
    /// Pools rebuilt at once because a member was ejected.
    pub rebuilt: Vec<String>,
}

fn ms(at: Option<DateTime<Utc>>) -> Option<i64> {
    at.map(|t| t.timestamp_millis())
}

fn at(ms: Option<i64>) -> Option<DateTime<Utc>> {
    ms.and_then(|m| Utc.timestamp_millis_opt(m).single())
}

/// A pool's policy: its stored overrides on the defaults.
pub fn policy_of(raw: &Value) -> Result<Policy, ChangeError> {
    let policy: Policy = serde_json::from_value(raw.clone())
        .map_err(|e| ChangeError::Malformed { field: "health_policy".into(), rule: e.to_string() })?;
    policy
        .validate()
        .map_err(|e| ChangeError::Invalid { field: format!("health_policy.{}", e.field), rule: e.rule.into() })?;
    Ok(policy)
}

/// The outcomes of a channel's window, and its mean latency when reported.
#[derive(Debug, Clone, Copy, Default)]
struct Measured {
    window: Window,
    latency_ms: Option<f64>,
}

async fn measure(state: &AppState, channel: &str, policy: &Policy, now_minute: i64) -> anyhow::Result<Measured> {
    let code = client::health::ChannelCode::parse(channel).map_err(|e| anyhow::anyhow!("{}: {}", e.field, e.rule))?;
    let from = now_minute - i64::from(policy.window_minutes) + 1;
    let minutes = state
        .outcomes
        .window(&code, from, now_minute)
        .await
        .with_context(|| format!("reading outcomes of {channel}"))?;
    // Buckets older than any window are of no further use; the hash would otherwise grow
    // for as long as reports keep coming (it expires only 2 h after its last write).
    if let Err(e) = state.outcomes.prune(&code, from - 60).await {
        tracing::warn!(channel, error = %e, "pruning old outcome buckets failed");
    }
    let mut m = Measured::default();
    let (mut lat_sum, mut lat_n) = (0u64, 0u64);
    for minute in minutes {
        m.window.ok += minute.ok;
        m.window.fail += minute.fail;
        lat_sum += minute.latency_ms_sum;
        lat_n += minute.latency_count;
    }
    m.latency_ms = (lat_n > 0).then(|| lat_sum as f64 / lat_n as f64);
    Ok(m)
}

struct Row_ {
    channel: String,
    base: u64,
    /// The channel's tier in a tiers pool.
    tier: Option<String>,
    ejected_otherwise: bool,
    pin: Option<Pin>,
    member: Member,
    ewma_error: Option<f64>,
    ewma_latency: Option<f64>,
}

async fn members(tx: &mut PgConnection, pool: &str) -> Result<Vec<Row_>, sqlx::Error> {
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
            Ok(Row_ {
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

fn describe(change: Change, before: &Member, after: &Member, window: Window, policy: &Policy) -> String {
    let rate = match window.success_rate() {
        Some(r) => format!("success {:.1}% of {} in {} min", r * 100.0, window.volume(), policy.window_minutes),
        None => format!("no outcomes in {} min", policy.window_minutes),
    };
    let what = match change {
        Change::Decayed => "decayed",
        Change::Ejected => "ejected",
        Change::CapBound => "held at the minimum weight: the ejection cap binds",
        Change::RecoveryStarted => "recovery started",
        Change::Ramped => "ramping up",
        Change::Recovered => "recovered",
        Change::Relapsed => "relapsed during recovery",
        Change::Pinned => "pinned",
    };
    format!(
        "{what}: {} ×{:.3} → {} ×{:.3} ({rate})",
        before.state.as_str(),
        before.factor,
        after.state.as_str(),
        after.factor
    )
}

/// Evaluates every pool at `now` (the job calls it with the current time; tests inject one).
pub async fn run_once(state: &AppState, now: DateTime<Utc>) -> anyhow::Result<Report> {
    let now_ms = now.timestamp_millis();
    let now_minute = now_ms.div_euclid(60_000);
    let pools: Vec<(String, Value)> =
        sqlx::query_as("select name, health_policy from pool order by name").fetch_all(&state.db).await?;
    let mut report = Report { pools: pools.len(), ..Report::default() };
    let mut measured: HashMap<(String, u32), Measured> = HashMap::new();
    for (pool, raw_policy) in pools {
        let policy = match policy_of(&raw_policy) {
            Ok(p) => p,
            Err(e) => {
                tracing::error!(pool, error = %e, "health policy invalid; pool skipped");
                continue;
            }
        };
        // Measure before taking the pool's lock: Redis reads stay out of the transaction.
        let channels: Vec<String> = sqlx::query_scalar("select channel from pool_member where pool = $1")
            .bind(&pool)
            .fetch_all(&state.db)
            .await?;
        for channel in channels {
            let key = (channel.clone(), policy.window_minutes);
            if let std::collections::hash_map::Entry::Vacant(slot) = measured.entry(key) {
                slot.insert(measure(state, &channel, &policy, now_minute).await?);
            }
        }
        let outcome = evaluate(&state.db, &pool, &policy, now_ms, &measured)
            .await
            .with_context(|| format!("evaluating pool {pool}"))?;
        report.changes.extend(outcome.changes);
        if let Some(written) = outcome.written {
            report.republished.push(written.entity.clone());
            let published = crate::publish::publish_now(state).await;
            if published && outcome.ejected {
                let name = PoolName::parse(&pool).map_err(|e| anyhow::anyhow!("{e}"))?;
                if crate::publish::rebuild_published_if_needed(state, &name, ReweightMode::Immediate).await {
                    report.rebuilt.push(pool.clone());
                }
            }
        }
    }
    Ok(report)
}

/// Each member's share of the pool's traffic, in millionths, for the ejection cap: its
/// weight in a channels pool; in a tiers pool, its tier's share times its share within
/// the tier (so two channels carrying a 60% tier count as 60%, not as two of six).
async fn cap_shares(tx: &mut PgConnection, pool: &str, rows: &[Row_]) -> Result<Vec<u64>, sqlx::Error> {
    if rows.iter().all(|r| r.tier.is_none()) {
        return Ok(rows.iter().map(|r| r.base).collect());
    }
    let tiers: HashMap<String, i64> =
        sqlx::query_as::<_, (String, i64)>("select tier, weight from pool_tier where pool = $1")
            .bind(pool)
            .fetch_all(&mut *tx)
            .await?
            .into_iter()
            .collect();
    let all_tiers: f64 = tiers.values().map(|w| *w as f64).sum();
    let mut within: HashMap<&str, f64> = HashMap::new();
    for r in rows {
        *within.entry(r.tier.as_deref().unwrap_or("")).or_default() += r.base as f64;
    }
    Ok(rows
        .iter()
        .map(|r| {
            let tier = r.tier.as_deref().unwrap_or("");
            let tier_share = tiers.get(tier).map_or(0.0, |w| *w as f64) / all_tiers.max(1.0);
            let own_share = r.base as f64 / within.get(tier).copied().unwrap_or(1.0).max(1.0);
            (tier_share * own_share * 1_000_000.0).round() as u64
        })
        .collect())
}

struct PoolOutcome {
    changes: Vec<String>,
    written: Option<Written>,
    ejected: bool,
}

async fn evaluate(
    db: &PgPool,
    pool: &str,
    policy: &Policy,
    now_ms: i64,
    measured: &HashMap<(String, u32), Measured>,
) -> anyhow::Result<PoolOutcome> {
    let mut tx = db.begin().await?;
    crate::change::store::lock(&mut tx, &format!("pool:{pool}")).await?;
    let rows = members(&mut tx, pool).await?;
    let window_of =
        |channel: &str| measured.get(&(channel.to_owned(), policy.window_minutes)).copied().unwrap_or_default();
    let shares = cap_shares(&mut tx, pool, &rows).await?;
    let inputs: Vec<Input> = rows
        .iter()
        .zip(&shares)
        .map(|(r, share)| Input {
            base_weight: *share,
            member: r.member,
            window: window_of(&r.channel).window,
            pin: r.pin,
            ejected_otherwise: r.ejected_otherwise,
        })
        .collect();
    let outcomes = machine::evaluate_pool(&inputs, policy, now_ms);
    let mut changes = Vec::new();
    let mut reasons = Vec::new();
    let mut ejected = false;
    for (row, outcome) in rows.iter().zip(&outcomes) {
        let m = window_of(&row.channel);
        let volume = m.window.volume();
        let ewma_error = if volume > 0 {
            Some(machine::ewma(row.ewma_error, m.window.fail as f64 / volume as f64, policy.ewma_alpha))
        } else {
            row.ewma_error
        };
        let ewma_latency = match m.latency_ms {
            Some(l) => Some(machine::ewma(row.ewma_latency, l, policy.ewma_alpha)),
            None => row.ewma_latency,
        };
        let after = outcome.member;
        let reason = outcome.change.map(|c| describe(c, &row.member, &after, m.window, policy));
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
        .bind(&row.channel)
        .bind(after.state.as_str())
        .bind(after.factor)
        .bind(after.cap_bound)
        .bind(at(after.last_decay_at))
        .bind(at(after.last_failure_at))
        .bind(at(after.recovering_since))
        .bind(after.recovering_from)
        .bind(reason.as_ref().map(|_| at(Some(now_ms))).flatten())
        .bind(reason.as_deref())
        .bind(if volume >= policy.min_volume { m.window.success_rate() } else { None })
        .bind(volume as i64)
        .bind(ewma_error)
        .bind(ewma_latency)
        .execute(&mut *tx)
        .await?;
        if let (Some(change), Some(reason)) = (outcome.change, reason) {
            ejected |= change == Change::Ejected;
            sqlx::query(
                "insert into health_transition (pool, channel, at, from_state, to_state, factor_before, factor_after, success_rate, volume, reason)
                 values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
            )
            .bind(pool)
            .bind(&row.channel)
            .bind(at(Some(now_ms)))
            .bind(row.member.state.as_str())
            .bind(after.state.as_str())
            .bind(row.member.factor)
            .bind(after.factor)
            .bind(m.window.success_rate())
            .bind(volume as i64)
            .bind(&reason)
            .execute(&mut *tx)
            .await?;
            changes.push(format!("{pool}/{}: {reason}", row.channel));
            reasons.push(format!("{}: {reason}", row.channel));
        }
    }
    let mut written = None;
    if !reasons.is_empty() {
        let reason = reasons.join("; ");
        let reason: String = reason.chars().take(2000).collect();
        let ctx = Ctx { actor: "health", source: Source::Health, reason: Some(&reason), request_id: None };
        written = crate::pools::store::republish_pool_if_changed(&mut tx, &ctx, pool, "pool.health").await?;
    }
    tx.commit().await?;
    Ok(PoolOutcome { changes, written, ejected })
}

/// One member's health as the endpoints show it.
#[derive(Debug, Serialize)]
pub struct MemberHealth {
    pub pool: String,
    pub channel: String,
    pub state: String,
    pub pinned: Option<String>,
    pub base_weight: i64,
    pub effective_weight: u64,
    pub factor: f64,
    pub cap_bound: bool,
    pub success_rate: Option<f64>,
    pub volume: i64,
    pub last_transition_at: Option<DateTime<Utc>>,
    pub last_reason: Option<String>,
    pub suggested_weight: u64,
    pub ewma_error: Option<f64>,
    pub ewma_latency_ms: Option<f64>,
}

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
            last_transition_at: r.try_get("last_transition_at")?,
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
pub async fn pool_health(db: &PgPool, pool: &PoolName) -> Result<Option<Value>, sqlx::Error> {
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
    Ok(Some(json!({
        "pool": pool.as_str(),
        "policy": policy,
        "cap": {
            "max_ejected_percent": policy.max_ejected_percent,
            "ejected_percent": ejected_percent,
            "bound": members.iter().any(|m| m.cap_bound),
        },
        "members": members,
    })))
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
pub async fn channel_health(db: &PgPool, code: &ChannelCode) -> Result<Option<Value>, sqlx::Error> {
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
        Some(r) => json!({"state": r.try_get::<String, _>("state")?, "reason": r.try_get::<String, _>("reason")?,
                          "actor": r.try_get::<String, _>("actor")?, "pinned_at": r.try_get::<DateTime<Utc>, _>("pinned_at")?}),
        None => Value::Null,
    };
    let pools = health_rows(db, "m.channel = $1", code.as_str()).await?;
    Ok(Some(json!({"channel": code.as_str(), "enabled": enabled, "pin": pin, "pools": pools})))
}

/// A channel's transitions, newest first.
pub async fn history(db: &PgPool, code: &ChannelCode, limit: i64) -> Result<Vec<Value>, sqlx::Error> {
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
            Ok(json!({
                "pool": r.try_get::<String, _>("pool")?,
                "at": r.try_get::<DateTime<Utc>, _>("at")?,
                "from": r.try_get::<String, _>("from_state")?,
                "to": r.try_get::<String, _>("to_state")?,
                "factor_before": r.try_get::<f64, _>("factor_before")?,
                "factor_after": r.try_get::<f64, _>("factor_after")?,
                "success_rate": r.try_get::<Option<f64>, _>("success_rate")?,
                "volume": r.try_get::<i64, _>("volume")?,
                "reason": r.try_get::<String, _>("reason")?,
            }))
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
        crate::change::store::lock(&mut tx, &format!("pool:{pool}")).await?;
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
    let entity = format!("pool:{pool}");
    let mut tx = db.begin().await?;
    crate::change::store::lock(&mut tx, &entity).await?;
    let before: Option<Value> = sqlx::query_scalar("select health_policy from pool where name = $1")
        .bind(pool.as_str())
        .fetch_optional(&mut *tx)
        .await?;
    let Some(before) = before else {
        return Err(ChangeError::NotFound(format!("unknown pool {:?}", pool.as_str())));
    };
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
