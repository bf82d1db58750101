//! The usage ledger: Postgres's durable copy of every finished reservation, so Redis is a
//! fast copy and never the only record of what a tenant used.
//!
//! - [`drain`] (a leader job) reads the tenants' usage streams through the consumer group,
//!   writes the records to the ledger (idempotent by tenant, request id, outcome and
//!   reservation time: a request id used again after its done marker expired is a row of
//!   its own, named by `reuse_of`) and
//!   acknowledges them after the commit: a Postgres outage delays the ledger, loses nothing.
//! - [`confirm`] (every instance) writes the settle records this process made itself when
//!   the ledger does not hold them a while later: a Redis that restarted empty lost its
//!   streams' undrained tails, not the instances' copies.
//! - Either way, a row the live counters cannot hold (counted by a Redis that since lost
//!   it, and not in the restore) is charged to them ([`client::quota::Quotas::apply_usage`]).
//!   A settle row is marked `charge_pending` from its insert until that is decided, and the
//!   drain retries marked rows first ([`retry_pending`]): no gap is left to the daily
//!   compensation, which passes over a tenant with marked rows until they are decided.
//! - [`restore`] rebuilds a tenant's counters from the ledger before its snapshot is
//!   published into a Redis that has none (see `lua/publish_tenant.lua`).
//! - [`compensate`] (daily, and `tessera compensate`): Redis's counters against the ledger,
//!   the drift as a metric and an audit row, corrected beyond what is in flight.
//! - [`routes`]: the usage report and its CSV.
//! - [`dead_letters`]: what a quota journal held for tenants that do not exist, set aside.

pub mod compensate;
pub mod dead_letters;
pub mod routes;
pub mod store;

use std::collections::HashMap;
use std::time::Duration;

use anyhow::Context;
use chrono::Utc;
use client::quota::{Applied, Restore, TenantId, UsageOutcome, UsageRecord};

use crate::state::AppState;

/// How long this process keeps its settle records before writing those the ledger lacks.
pub const CONFIRM_AFTER: Duration = Duration::from_secs(10);
/// Records read per tenant stream per drain call.
const READ_COUNT: usize = 500;

/// What one drain or confirm run did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Drained {
    /// Records read (from the streams, or this process's own).
    pub read: usize,
    /// Rows newly written to the ledger.
    pub written: usize,
    /// Rows charged to counters that did not hold them.
    pub applied: usize,
}

/// Moves every tenant's usage stream into the ledger (until the streams are empty or a
/// run has read 20 batches).
#[tracing::instrument(name = "job.usage_drain", skip_all, err)]
pub async fn drain(state: &AppState) -> anyhow::Result<Drained> {
    // A retry that fails leaves its rows marked (and the gauge shows them): the streams are
    // drained all the same, so one bad row does not stop the ledger.
    let retried = retry_pending(state).await.unwrap_or_else(|e| {
        tracing::error!(error = format!("{e:#}"), "retrying the ledger rows whose charge was never decided failed");
        0
    });
    state.metrics.watch.usage_uncharged_rows.set(store::pending_count(&state.db).await.unwrap_or(-1));
    let names = store::tenant_names(&state.db).await.context("listing tenants")?;
    let tenants: Vec<TenantId> = names.iter().filter_map(|n| TenantId::parse(n).ok()).collect();
    let mut done = Drained { applied: retried, ..Drained::default() };
    for batch in 0..20 {
        let records = state.quotas.read_usage(&tenants, READ_COUNT).await.context("reading the usage streams")?;
        if batch == 0 {
            // Measured before the write, so a ledger that cannot be written shows as lag.
            state.metrics.watch.usage_drain_lag.set(lag_seconds(&records, Utc::now().timestamp_millis()));
        }
        if records.is_empty() {
            break;
        }
        let (written, reused) =
            store::insert(&state.db, &records, store::Source::Stream).await.context("writing the ledger")?;
        state.metrics.usage_reused_request_ids.inc_by(reused as u64);
        done.read += records.len();
        done.written += written.len();
        done.applied += charge_missing(state, &records, &written, false).await?;
        state.quotas.ack_usage(&records).await.context("acknowledging the usage streams")?;
    }
    state.metrics.usage_ledger_rows.with_label_values(&["stream"]).inc_by(done.written as u64);
    Ok(done)
}

/// How far the ledger is behind the streams: the age in seconds of the oldest of the
/// `records` a drain read (stamped by the Redis clock, against this host's `now_ms`), 0
/// when there are none.
pub fn lag_seconds(records: &[UsageRecord], now_ms: i64) -> f64 {
    let oldest = records.iter().map(|r| r.at_ms).min();
    oldest.map_or(0.0, |at| (now_ms - at).max(0) as f64 / 1000.0)
}

/// Writes this process's settle records that the ledger does not hold after
/// [`CONFIRM_AFTER`]; on failure they are kept for the next run.
#[tracing::instrument(name = "job.usage_confirm", skip_all, err)]
pub async fn confirm(state: &AppState, age: Duration) -> anyhow::Result<Drained> {
    let confirmed = confirm_records(state, age).await;
    // On every path: records are taken, given back and added by settles meanwhile.
    state.metrics.usage_records_waiting.set(state.quotas.records_waiting() as i64);
    confirmed
}

async fn confirm_records(state: &AppState, age: Duration) -> anyhow::Result<Drained> {
    let records = state.quotas.take_records(age);
    if records.is_empty() {
        return Ok(Drained::default());
    }
    let written = match store::insert(&state.db, &records, store::Source::Instance).await {
        Ok((written, reused)) => {
            state.metrics.usage_reused_request_ids.inc_by(reused as u64);
            written
        }
        Err(e) => {
            state.quotas.give_back_records(records);
            return Err(e).context("writing this instance's settle records to the ledger");
        }
    };
    if !written.is_empty() {
        tracing::warn!(
            rows = written.len(),
            "the usage stream had lost settles this instance made: written from its own records"
        );
    }
    let applied = charge_missing(state, &records, &written, true).await?;
    state.metrics.usage_ledger_rows.with_label_values(&["instance"]).inc_by(written.len() as u64);
    Ok(Drained { read: records.len(), written: written.len(), applied })
}

/// Charges newly written settle rows to counters that may not hold them: from the stream,
/// rows counted in another generation of the tenant's counters than the live one; from an
/// instance's own records (`from_instance`: the stream had lost them, and the counters may
/// have too, in the same generation), every row, which the script checks by its done marker.
/// Each row's `charge_pending` mark is cleared once its charge is decided; a row left
/// marked (a failure here, a crash before) is retried by [`retry_pending`].
async fn charge_missing(
    state: &AppState,
    records: &[UsageRecord],
    written: &[(usize, i64)],
    from_instance: bool,
) -> anyhow::Result<usize> {
    let candidates: Vec<(&UsageRecord, i64, bool)> = written
        .iter()
        .map(|(i, id)| (&records[*i], *id, from_instance))
        .filter(|(r, ..)| r.outcome == UsageOutcome::Settled)
        .collect();
    charge_decide(state, &candidates).await
}

/// Decides the charge of each `(record, row id, from an instance)`, clearing the marks of
/// those decided; a row whose charge fails stays marked for [`retry_pending`] and the rest
/// go on, unless Redis is away (the first failure is returned once the marks are cleared).
async fn charge_decide(state: &AppState, candidates: &[(&UsageRecord, i64, bool)]) -> anyhow::Result<usize> {
    if candidates.is_empty() {
        return Ok(0);
    }
    let mut tenants: Vec<TenantId> = candidates.iter().map(|(r, ..)| r.tenant.clone()).collect();
    tenants.sort();
    tenants.dedup();
    let generations: HashMap<TenantId, Option<String>> =
        state.quotas.generations(&tenants).await.context("reading the counters' generations")?;
    let mut applied = 0;
    let mut decided = Vec::with_capacity(candidates.len());
    let mut failed = None;
    for &(record, id, from_instance) in candidates {
        let same = generations.get(&record.tenant).and_then(|g| g.as_deref()) == Some(record.generation.as_str());
        if !same || from_instance {
            match state.quotas.apply_usage(id, record, !record.late, from_instance).await {
                Ok(Applied::Applied) => {
                    tracing::warn!(tenant = %record.tenant, request_id = record.request_id, row = id, "charged a settle the counters had lost");
                    applied += 1;
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(tenant = %record.tenant, request_id = record.request_id, row = id, error = %e, "charging a ledger row failed: it stays marked");
                    // Redis away: the rest would fail the same way, each after a timeout.
                    let away = matches!(&e, client::quota::QuotaError::Redis(r) if client::is_unreachable(r));
                    failed.get_or_insert(anyhow::Error::new(e).context("charging a ledger row"));
                    if away {
                        break;
                    }
                    continue;
                }
            }
        }
        decided.push(id);
    }
    store::charge_decided(&state.db, &decided).await.context("clearing the rows' charge marks")?;
    match failed {
        Some(e) => Err(e),
        None => Ok(applied),
    }
}

/// Decides the charge of ledger rows still marked `charge_pending` (a failure or a crash
/// after their insert), a batch at a time; returns how many were charged.
pub async fn retry_pending(state: &AppState) -> anyhow::Result<usize> {
    let pending = store::pending_charges(&state.db, READ_COUNT as i64).await.context("reading uncharged rows")?;
    if pending.is_empty() {
        return Ok(0);
    }
    tracing::warn!(rows = pending.len(), "ledger rows whose charge was never decided: retrying");
    let candidates: Vec<(&UsageRecord, i64, bool)> =
        pending.iter().map(|(id, record, from_instance)| (record, *id, *from_instance)).collect();
    charge_decide(state, &candidates).await
}

/// A tenant's counters as the ledger holds them (for a Redis that has none), and the
/// transaction holding the tenant's ledger lock: keep it until the restore is published, so
/// no row lands between the read and the publish unseen by both (writers wait meanwhile).
pub async fn restore(
    state: &AppState,
    tenant: &TenantId,
) -> anyhow::Result<(Restore, sqlx::Transaction<'static, sqlx::Postgres>)> {
    let now = Utc::now();
    let first = chrono::NaiveDate::from_ymd_opt(chrono::Datelike::year(&now), chrono::Datelike::month(&now), 1)
        .expect("first of the month");
    let previous_start = store::day_start(first.checked_sub_months(chrono::Months::new(1)).expect("in range"));
    let (restore, lock) = store::restore(&state.db, tenant, previous_start)
        .await
        .with_context(|| format!("reading the usage ledger of tenant {tenant}"))?;
    tracing::info!(tenant = %tenant, upto = restore.upto, "restoring the tenant's counters from the usage ledger");
    state.metrics.usage_restores.inc();
    Ok((restore, lock))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finished_at(at_ms: i64) -> UsageRecord {
        UsageRecord {
            tenant: TenantId::parse("acme").unwrap(),
            request_id: format!("r-{at_ms}"),
            outcome: UsageOutcome::Settled,
            late: false,
            reserved: 10,
            actual: Some(7),
            charged: vec![],
            plan_periods: vec![],
            reserved_at_ms: at_ms - 500,
            at_ms,
            generation: "g1".into(),
            model: None,
            reserved_parts: vec![],
            deadline_ms: None,
            entry: None,
        }
    }

    #[test]
    fn the_lag_is_the_age_of_the_oldest_record_read_and_zero_without_records() {
        let now_ms = 1_800_000_000_000;
        let read = [finished_at(now_ms - 2_000), finished_at(now_ms - 90_500), finished_at(now_ms)];
        assert_eq!(lag_seconds(&read, now_ms), 90.5);
        assert_eq!(lag_seconds(&[], now_ms), 0.0);
        // A record stamped ahead of this host's clock is not negative lag.
        assert_eq!(lag_seconds(&[finished_at(now_ms + 300)], now_ms), 0.0);
    }
}
