//! The compensation (daily, and on demand with `tessera compensate`): compares each
//! tenant's use counters in Redis with the usage ledger, exports the difference as
//! `tessera_usage_drift_tokens{tenant,bucket}`, writes an audit row for each tenant whose
//! counters differ, and corrects Redis when the difference is beyond what is in flight.
//!
//! The comparison is exact at one instant: Redis's counters and its usage stream's
//! undrained records are read in one script; the ledger is summed up to that instant,
//! leaving out the records still in the stream (counted there). What can still move the
//! two apart for a moment is a ledger row written in the last minute whose charge to the
//! counters is under way (`in flight`): a difference no larger than those is reported,
//! not corrected.

use std::collections::BTreeSet;

use anyhow::Context;
use chrono::{DateTime, Utc};
use client::quota::{Correction, TenantId};
use serde::Serialize;
use serde_json::{json, Map, Value};

use super::store;
use crate::audit::store::{insert_audit, NewAudit, Source};
use crate::state::AppState;

/// How far back a ledger row counts as in flight.
pub const IN_FLIGHT_SECONDS: i64 = 60;

/// One bucket whose counter differs from the ledger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Drift {
    pub tenant: String,
    /// `plan` (the current period) or a grant id.
    pub bucket: String,
    /// What Redis counts.
    pub redis: u64,
    /// What the ledger (and the stream's undrained records) hold.
    pub ledger: u64,
    /// Charged in the last minute: a difference up to this is left alone.
    pub in_flight: u64,
    /// Whether Redis was moved to the ledger's value.
    pub corrected: bool,
}

impl Drift {
    /// Redis minus the ledger.
    pub fn tokens(&self) -> i64 {
        self.redis as i64 - self.ledger as i64
    }
}

/// What a compensation run found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Report {
    /// Tenants compared.
    pub compared: usize,
    /// Tenants skipped: their stream holds too many undrained records, Redis holds no
    /// counters for them (not published, or lost and not restored yet), their counters
    /// predate the ledger (adopted: no opening balance to compare with), or ledger rows of
    /// theirs older than a minute wait for their charge to be decided (`charge_pending`).
    pub skipped: Vec<String>,
    pub drifts: Vec<Drift>,
}

/// Compares every tenant; with `correct`, moves counters beyond what is in flight.
#[tracing::instrument(name = "job.quota_compensate", skip_all, err)]
pub async fn compensate(state: &AppState, correct: bool) -> anyhow::Result<Report> {
    let mut report = Report::default();
    state.metrics.usage_drift.reset();
    // Tenants with rows whose charge to the counters is not decided yet (beyond the minute a
    // drain takes, which the in-flight allowance covers): the counters may or may not hold
    // them, so no difference can be judged until the drain's retry decides them.
    let settled_before = Utc::now() - chrono::Duration::seconds(IN_FLIGHT_SECONDS);
    let pending = store::tenants_pending(&state.db, settled_before).await?;
    for name in store::tenant_names(&state.db).await.context("listing tenants")? {
        let Ok(tenant) = TenantId::parse(&name) else { continue };
        if pending.contains(&name) {
            report.skipped.push(name);
            continue;
        }
        // Counters without a generation are not this Redis's own yet (a tenant never
        // published, or lost and not restored): nothing to compare.
        let generation = state.quotas.generations(std::slice::from_ref(&tenant)).await?.remove(&tenant).flatten();
        if generation.is_none() {
            report.skipped.push(name);
            continue;
        }
        let Some(c) = state.quotas.counters(&tenant).await.with_context(|| format!("reading tenant {name}"))? else {
            report.skipped.push(name);
            continue;
        };
        // Counters from before the ledger existed: it has no opening balance to judge them by
        // (they are compared once Redis has lost and restored them).
        if c.adopted {
            report.skipped.push(name);
            continue;
        }
        let until = DateTime::<Utc>::from_timestamp_millis(c.at_ms).unwrap_or_else(Utc::now);
        let (plan, grants) = store::totals(&state.db, &tenant, &c.period, until, &c.tail_requests).await?;
        let recent =
            store::recent_charges(&state.db, &tenant, until - chrono::Duration::seconds(IN_FLIGHT_SECONDS)).await?;
        report.compared += 1;
        let mut found = Vec::new();
        let mut check = |bucket: &str, redis: u64, ledger: u64| {
            state.metrics.usage_drift.with_label_values(&[&name, bucket]).set(redis as i64 - ledger as i64);
            if redis != ledger {
                found.push(Drift {
                    tenant: name.clone(),
                    bucket: bucket.to_owned(),
                    redis,
                    ledger,
                    in_flight: recent,
                    corrected: false,
                });
            }
        };
        check("plan", c.plan_used, plan + c.tail_plan);
        let buckets: BTreeSet<&String> = c.grant_used.keys().chain(grants.keys()).chain(c.tail_grants.keys()).collect();
        for g in buckets {
            let ledger = grants.get(g).copied().unwrap_or(0) + c.tail_grants.get(g).copied().unwrap_or(0);
            check(g, c.grant_used.get(g).copied().unwrap_or(0), ledger);
        }
        if found.is_empty() {
            continue;
        }
        if correct {
            for d in &mut found {
                if d.tokens().unsigned_abs() <= d.in_flight {
                    continue;
                }
                let outcome = state.quotas.correct_counter(&tenant, &d.bucket, d.redis, -d.tokens()).await?;
                d.corrected = matches!(outcome, Correction::Corrected { .. });
            }
        }
        audit(state, &found).await?;
        for d in &found {
            tracing::warn!(
                tenant = d.tenant,
                bucket = d.bucket,
                redis = d.redis,
                ledger = d.ledger,
                corrected = d.corrected,
                "usage counters differ from the usage ledger"
            );
        }
        report.drifts.extend(found);
    }
    Ok(report)
}

/// One audit row for a tenant's differences: the counters before, the ledger's values
/// after, and whether each was corrected.
async fn audit(state: &AppState, drifts: &[Drift]) -> anyhow::Result<()> {
    let Some(first) = drifts.first() else { return Ok(()) };
    let (mut before, mut after) = (Map::new(), Map::new());
    for d in drifts {
        before.insert(d.bucket.clone(), json!(d.redis));
        after.insert(d.bucket.clone(), json!({"ledger": d.ledger, "in_flight": d.in_flight, "corrected": d.corrected}));
    }
    let corrected = drifts.iter().filter(|d| d.corrected).count();
    let reason = format!(
        "usage counters in Redis differ from the usage ledger in {} bucket(s); {corrected} corrected",
        drifts.len()
    );
    let entity = format!("tenant:{}", first.tenant);
    let mut tx = state.db.begin().await?;
    insert_audit(
        &mut tx,
        &NewAudit {
            actor: "compensation",
            source: Source::System,
            action: "quota.compensate",
            entity: &entity,
            before: Some(&Value::Object(before)),
            after: Some(&Value::Object(after)),
            reason: Some(&reason),
            request_id: None,
        },
    )
    .await?;
    tx.commit().await?;
    Ok(())
}
