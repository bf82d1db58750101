//! What the `ramp_guard` job measures of a ramp (outcomes per guard window for the canary
//! and the baseline members, per member, the draws since the step started, a peak window
//! in force), read from Redis before any transaction opens; and the verdicts in words.

use std::collections::{BTreeMap, HashMap};

use anyhow::Context;
use chrono::{DateTime, Utc};
use client::pool::PoolName;
use engine::ramp::{Counts, Guard, Verdict};
use serde_json::{json, Value};

use super::plan::{describe_guard, Plan};
use super::store::RampRow;
use crate::state::AppState;

/// What one evaluation measured: per guard the canary's and the baseline's outcomes over
/// its window, per member over the first guard's window (or 5 minutes), the draws since
/// the step started, and the pool's counters now.
pub struct Measurement {
    pub per_guard: Vec<(Counts, Counts)>,
    pub members: BTreeMap<String, Counts>,
    pub draws: Option<u64>,
    pub hits_now: Option<Value>,
    pub in_peak: Option<String>,
}

/// Measures a ramp at `now` (Redis reads only; no transaction is open).
pub async fn measure(state: &AppState, row: &RampRow, plan: &Plan, now: DateTime<Utc>) -> anyhow::Result<Measurement> {
    let now_minute = now.timestamp().div_euclid(60);
    let start_minute = row.step_started_at.timestamp().div_euclid(60);
    let longest = plan.guards.iter().map(|g| i64::from(g.window_minutes)).max().unwrap_or(5).max(5);
    let from = (now_minute - longest + 1).max(start_minute);
    let mut minutes: HashMap<&str, Vec<client::health::MinuteCounts>> = HashMap::new();
    for member in plan.canary.iter().chain(&plan.others) {
        let code =
            client::health::ChannelCode::parse(member).map_err(|e| anyhow::anyhow!("{}: {}", e.field, e.rule))?;
        let window =
            state.outcomes.window(&code, from, now_minute).await.with_context(|| format!("outcomes of {member}"))?;
        minutes.insert(member, window);
    }
    let sum = |members: &[String], window: i64| -> Counts {
        let first = (now_minute - window + 1).max(start_minute);
        let mut c = Counts::default();
        for m in members {
            for minute in minutes.get(m.as_str()).into_iter().flatten().filter(|x| x.minute >= first) {
                c.add(Counts {
                    ok: minute.ok,
                    fail: minute.fail,
                    latency_ms_sum: minute.latency_ms_sum,
                    latency_count: minute.latency_count,
                });
            }
        }
        c
    };
    let per_guard = plan
        .guards
        .iter()
        .map(|g| (sum(&plan.canary, i64::from(g.window_minutes)), sum(&plan.others, i64::from(g.window_minutes))))
        .collect();
    let member_window = plan.guards.first().map_or(5, |g| i64::from(g.window_minutes));
    let members = plan
        .canary
        .iter()
        .chain(&plan.others)
        .map(|m| (m.clone(), sum(std::slice::from_ref(m), member_window)))
        .collect();
    // Draws since the step started, from the pool's day counters.
    let pool = PoolName::parse(&row.pool).map_err(|e| anyhow::anyhow!("pool: {}", e.rule))?;
    let (mut draws, mut hits_now, mut in_peak) = (None, None, None);
    if let Some(snapshot) = state.pool_admin.snapshot(&pool).await.context("reading the published pool")? {
        let day = client::pool::admin::days_at(&snapshot, now)?.today;
        let today = state.pool_admin.day_hits(&pool, day).await.context("reading the pool's draws")?;
        if let Some(start) = &row.step_hits {
            let start_day: Option<chrono::NaiveDate> = start["day"].as_str().and_then(|d| d.parse().ok());
            let earlier: HashMap<String, u64> = serde_json::from_value(start["hits"].clone()).unwrap_or_default();
            let earlier_day_now = match start_day {
                Some(d) if d != day => Some(state.pool_admin.day_hits(&pool, d).await.context("reading draws")?),
                _ => None,
            };
            let hits = crate::samples::sampler::window_hits(&earlier, earlier_day_now.as_ref(), &today);
            draws = Some(hits.values().sum());
        }
        hits_now = Some(json!({"day": day.to_string(), "hits": today}));
        if plan.hold_in_peaks {
            if let Ok(schedule) = snapshot.schedule() {
                in_peak = schedule.active_at(now).map(|w| w.label());
            }
        }
    }
    Ok(Measurement { per_guard, members, draws, hits_now, in_peak })
}

pub(crate) fn verdict_json(guard: &Guard, v: &Verdict, canary: Counts, baseline: Counts) -> Value {
    let mut j = serde_json::to_value(v).unwrap_or(Value::Null);
    if let Some(o) = j.as_object_mut() {
        o.insert("metric".into(), json!(guard.metric.as_str()));
        o.insert("guard".into(), json!(describe_guard(guard)));
        o.insert("canary".into(), json!(canary));
        o.insert("baseline".into(), json!(baseline));
        o.insert("dry_run".into(), json!(guard.dry_run));
    }
    j
}

pub(crate) fn verdict_words(guard: &Guard, v: &Verdict) -> String {
    let fmt = |x: f64| match guard.metric {
        engine::ramp::Metric::LatencyMs => format!("{x:.1} ms"),
        _ => format!("{:.1}%", x * 100.0),
    };
    match v {
        Verdict::Pass { value, limit, samples } => {
            format!("{} {} of {samples} (limit {})", guard.metric.as_str(), fmt(*value), fmt(*limit))
        }
        Verdict::Breach { value, limit, samples } => {
            format!("{} {} of {samples} breaks the limit {}", guard.metric.as_str(), fmt(*value), fmt(*limit))
        }
        Verdict::TooFew { samples, baseline_samples: Some(b) } => {
            format!(
                "{} has {samples} canary and {b} baseline outcomes, fewer than {}",
                guard.metric.as_str(),
                guard.min_samples
            )
        }
        Verdict::TooFew { samples, .. } => {
            format!("{} has {samples} outcomes, fewer than {}", guard.metric.as_str(), guard.min_samples)
        }
        Verdict::NoData => format!("no canary outcomes in {} min", guard.window_minutes),
    }
}
