//! Channel health (design.md §5): the evaluation job, pins, and what the health endpoints
//! read. The state machine itself is `engine::health`; this module measures windows from
//! the outcome buckets in Redis, keeps each member's state in Postgres (`member_health`),
//! records transitions (`health_transition`) and, when a pool's effective weights change,
//! writes the pool's next version through the same audited path as a human change
//! (source `health`, the measured rates as the reason), then publishes it: ejections at
//! once (the pool is rebuilt), other changes from the next batch.

pub mod routes;
pub mod store;

use std::collections::HashMap;

use anyhow::Context;
use chrono::{DateTime, TimeZone, Utc};
use client::pool::{PoolName, ReweightMode};
use engine::health::{self as machine, Change, Input, Member, Policy, Window};
use serde::Serialize;
use serde_json::Value;
use sqlx::{PgConnection, PgPool};

use crate::audit::store::Source;
use crate::change::Ctx;
use crate::change::Written;
use crate::error::ChangeError;
use crate::metrics::{retain_series, WatchMetrics};
use crate::state::AppState;

/// What one evaluation did.
#[derive(Debug, Default, Serialize)]
pub struct Report {
    pub pools: usize,
    /// `pool/channel: change` for every member whose state or factor changed.
    pub changes: Vec<String>,
    /// Pools written as a new version.
    pub republished: Vec<String>,
    /// Pools rebuilt at once because a member's share went down (decayed, ejected, held at
    /// the minimum): the tickets already built carried its old share.
    pub rebuilt: Vec<String>,
}

pub(crate) fn ms(at: Option<DateTime<Utc>>) -> Option<i64> {
    at.map(|t| t.timestamp_millis())
}

pub(crate) fn at(ms: Option<i64>) -> Option<DateTime<Utc>> {
    ms.and_then(|m| Utc.timestamp_millis_opt(m).single())
}

/// A pool's policy: its stored overrides on the defaults.
pub fn policy_of(raw: &Value) -> Result<Policy, ChangeError> {
    parse_policy(raw, "health_policy", Policy::validate)
}

/// A policy stored as overrides on its defaults, read and checked: 400 naming `field`
/// when it does not parse, 422 naming `field.<name>` for a value out of range.
pub(crate) fn parse_policy<T: serde::de::DeserializeOwned>(
    raw: &Value,
    field: &str,
    validate: impl FnOnce(&T) -> Result<(), machine::PolicyError>,
) -> Result<T, ChangeError> {
    let policy: T = serde_json::from_value(raw.clone())
        .map_err(|e| ChangeError::Malformed { field: field.into(), rule: e.to_string() })?;
    validate(&policy)
        .map_err(|e| ChangeError::Invalid { field: format!("{field}.{}", e.field), rule: e.rule.into() })?;
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
    let pools = store::policies(&state.db).await?;
    forget_other_pools(&state.metrics.watch, &pools);
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
        let channels = store::member_channels(&state.db, &pool).await?;
        for channel in channels {
            let key = (channel.clone(), policy.window_minutes);
            if let std::collections::hash_map::Entry::Vacant(slot) = measured.entry(key) {
                slot.insert(measure(state, &channel, &policy, now_minute).await?);
            }
        }
        let outcome = evaluate(&state.db, &pool, &policy, now_ms, &measured)
            .await
            .with_context(|| format!("evaluating pool {pool}"))?;
        record_counts(&state.metrics.watch, &pool, &outcome.counts);
        report.changes.extend(outcome.changes);
        if let Some(written) = outcome.written {
            report.republished.push(written.entity.clone());
            let published = crate::publish::publish_now(state).await;
            // A lowered share reaches the draws at once, as an ejection does: the list and
            // the standby batch were built with the old weights (up to two batches of them).
            if published && outcome.lowered {
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
async fn cap_shares(tx: &mut PgConnection, pool: &str, rows: &[MemberRow]) -> Result<Vec<u64>, sqlx::Error> {
    if rows.iter().all(|r| r.tier.is_none()) {
        return Ok(rows.iter().map(|r| r.base).collect());
    }
    let tiers: HashMap<String, i64> = store::tier_weights(tx, pool).await?.into_iter().collect();
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
    /// A member's share went down (its factor fell, or it was ejected).
    lowered: bool,
    counts: Counts,
}

/// A pool's members per state after an evaluation, and how many the ejection cap holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Indexed like [`machine::State::ALL`].
    pub per_state: [i64; machine::State::ALL.len()],
    pub cap_bound: i64,
}

impl Counts {
    /// Counts `members` by state and cap.
    pub fn of<'a>(members: impl IntoIterator<Item = &'a Member>) -> Self {
        let mut counts = Self::default();
        for member in members {
            let i = machine::State::ALL.iter().position(|s| *s == member.state).expect("State::ALL names every state");
            counts.per_state[i] += 1;
            counts.cap_bound += i64::from(member.cap_bound);
        }
        counts
    }
}

/// Sets a pool's health gauges: every state's count (0 for a state no member is in, so a
/// state that emptied reads 0 rather than its last count) and the cap-bound members.
fn record_counts(watch: &WatchMetrics, pool: &str, counts: &Counts) {
    for (state, n) in machine::State::ALL.iter().zip(counts.per_state) {
        watch.health_members.with_label_values(&[pool, state.as_str()]).set(n);
    }
    watch.health_cap_bound.with_label_values(&[pool]).set(counts.cap_bound);
}

/// Removes the health gauges of pools no longer configured.
fn forget_other_pools(watch: &WatchMetrics, pools: &[(String, Value)]) {
    let known =
        |labels: &HashMap<&str, &str>| labels.get("pool").is_some_and(|p| pools.iter().any(|(k, _)| k.as_str() == *p));
    retain_series(&watch.health_members, known);
    retain_series(&watch.health_cap_bound, known);
}

async fn evaluate(
    db: &PgPool,
    pool: &str,
    policy: &Policy,
    now_ms: i64,
    measured: &HashMap<(String, u32), Measured>,
) -> anyhow::Result<PoolOutcome> {
    let mut tx = db.begin().await?;
    crate::change::store::lock(&mut tx, &crate::change::Entity::pool_key(pool)).await?;
    let rows = store::members(&mut tx, pool).await?;
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
    let mut lowered = false;
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
        let saved = store::SavedHealth {
            member: &after,
            transition_at: reason.as_ref().and_then(|_| at(Some(now_ms))),
            reason: reason.as_deref(),
            success_rate: if volume >= policy.min_volume { m.window.success_rate() } else { None },
            volume: volume as i64,
            ewma_error,
            ewma_latency,
        };
        store::save_member_health(&mut tx, pool, &row.channel, &saved).await?;
        if let (Some(change), Some(reason)) = (outcome.change, reason) {
            lowered |= change == Change::Ejected || after.factor < row.member.factor;
            let transition = store::Transition {
                at: at(Some(now_ms)),
                from: &row.member,
                to: &after,
                success_rate: m.window.success_rate(),
                volume: volume as i64,
                reason: &reason,
            };
            store::insert_transition(&mut tx, pool, &row.channel, &transition).await?;
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
    let counts = Counts::of(outcomes.iter().map(|o| &o.member));
    Ok(PoolOutcome { changes, written, lowered, counts })
}

pub use store::{
    channel_health, every_member_health, history, pool_health, set_pin, set_policy, MemberHealth, MemberRow,
};

#[cfg(test)]
mod tests {
    use super::*;

    fn in_state(state: machine::State, cap_bound: bool) -> Member {
        Member { state, cap_bound, ..Member::default() }
    }

    #[test]
    fn every_state_is_recorded_and_one_that_emptied_reads_zero() {
        use machine::State::{Decaying, Ejected, Healthy};
        let metrics = crate::metrics::Metrics::new();
        let members = [in_state(Healthy, false), in_state(Ejected, false), in_state(Decaying, true)];
        record_counts(&metrics.watch, "cn-pay", &Counts::of(&members));
        let members = [in_state(Healthy, false), in_state(Healthy, false), in_state(Ejected, false)];
        record_counts(&metrics.watch, "sea-pay", &Counts::of(&members));
        // Its ejected member is gone from the next evaluation: `ejected` reads 0.
        record_counts(&metrics.watch, "sea-pay", &Counts::of(&members[..2]));
        let text = metrics.render();
        let mut lines: Vec<&str> = text.lines().filter(|l| l.starts_with("tessera_health_")).collect();
        lines.sort();
        assert_eq!(
            lines,
            [
                r#"tessera_health_cap_bound{pool="cn-pay"} 1"#,
                r#"tessera_health_cap_bound{pool="sea-pay"} 0"#,
                r#"tessera_health_members{pool="cn-pay",state="decaying"} 1"#,
                r#"tessera_health_members{pool="cn-pay",state="ejected"} 1"#,
                r#"tessera_health_members{pool="cn-pay",state="healthy"} 1"#,
                r#"tessera_health_members{pool="cn-pay",state="recovering"} 0"#,
                r#"tessera_health_members{pool="sea-pay",state="decaying"} 0"#,
                r#"tessera_health_members{pool="sea-pay",state="ejected"} 0"#,
                r#"tessera_health_members{pool="sea-pay",state="healthy"} 2"#,
                r#"tessera_health_members{pool="sea-pay",state="recovering"} 0"#,
            ]
        );
        forget_other_pools(&metrics.watch, &[("sea-pay".to_owned(), Value::Null)]);
        assert!(!metrics.render().contains(r#"pool="cn-pay""#), "{}", metrics.render());
    }
}
