//! A tenant's use counters as Redis holds them, beside the usage stream's undrained tail,
//! for the compensation to compare with the usage ledger; and a compare-and-set
//! correction of one counter.

use std::collections::BTreeMap;

use serde::Serialize;

use super::call::CallError;
use super::{QuotaError, Quotas, TenantId};
use crate::reply::Fields;
use crate::scripts;

/// The most undrained stream records a reading takes in (more: the drain is behind, and
/// the tenant is compared on a later run).
pub const MAX_TAIL: u64 = 10_000;

/// A tenant's use counters and what its stream's undrained records charged, read at once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Counters {
    /// When it was read (ms since the epoch, Redis clock).
    pub at_ms: i64,
    /// The current period (`YYYY-MM`) and its plan use.
    pub period: String,
    pub plan_used: u64,
    /// Use per grant id.
    pub grant_used: BTreeMap<String, u64>,
    /// What the undrained records charged: the plan (in the current period), each grant.
    pub tail_plan: u64,
    pub tail_grants: BTreeMap<String, u64>,
    /// The undrained records' request ids (the ledger may hold some of them already).
    pub tail_requests: Vec<String>,
    /// The counters predate the usage ledger (adopted, not restored): the ledger holds no
    /// opening balance for them, so it cannot judge them.
    pub adopted: bool,
}

/// What a correction did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum Correction {
    /// Moved; the counter's new value.
    Corrected { value: i64 },
    /// The counter no longer held the value measured (a settle came in between): untouched.
    Changed { value: i64 },
}

impl Quotas {
    /// Reads a tenant's counters and its usage stream's tail in one step; `None` while the
    /// stream holds more than [`MAX_TAIL`] records.
    pub async fn counters(&self, tenant: &TenantId) -> Result<Option<Counters>, QuotaError> {
        let reply = self
            .call("read_counters", &scripts::quota().read_counters, tenant, &[MAX_TAIL.to_string()])
            .await
            .map_err(CallError::into_quota_error)?;
        let f = Fields::new("read_counters", &reply);
        if f.str(0).ok() == Some("busy") {
            return Ok(None);
        }
        let at_ms = f.int(0)?;
        let period =
            chrono::DateTime::from_timestamp_millis(at_ms).map(|t| t.format("%Y-%m").to_string()).unwrap_or_default();
        Ok(Some(Counters {
            at_ms,
            period,
            plan_used: f.uint(1)?,
            grant_used: pairs(&f, 2)?,
            tail_plan: f.uint(3)?,
            tail_grants: pairs(&f, 4)?,
            tail_requests: strings(&f, 5)?,
            adopted: f.str(6).ok() == Some("1"),
        }))
    }

    /// Moves one counter (`plan`: the current period's plan use; else a grant id) by
    /// `delta`, only if it still holds `measured`.
    pub async fn correct_counter(
        &self,
        tenant: &TenantId,
        bucket: &str,
        measured: u64,
        delta: i64,
    ) -> Result<Correction, QuotaError> {
        let extra = [bucket.to_owned(), measured.to_string(), delta.to_string()];
        let reply = self
            .call("correct_counter", &scripts::quota().correct_counter, tenant, &extra)
            .await
            .map_err(CallError::into_quota_error)?;
        let f = Fields::new("correct_counter", &reply);
        Ok(match f.str(0)? {
            "corrected" => Correction::Corrected { value: f.int(1)? },
            "changed" => Correction::Changed { value: f.int(1)? },
            other => return Err(f.unexpected(other).into()),
        })
    }
}

fn flat<'a>(f: &Fields<'a>, i: usize) -> Result<Vec<&'a str>, QuotaError> {
    let items = match f.raw(i)? {
        redis::Value::Array(items) => items,
        _ => return Err(f.bad(i, "not an array").into()),
    };
    let inner = Fields::new("read_counters", items);
    (0..items.len()).map(|j| inner.str(j).map_err(QuotaError::from)).collect()
}

fn pairs(f: &Fields<'_>, i: usize) -> Result<BTreeMap<String, u64>, QuotaError> {
    let items = flat(f, i)?;
    let mut out = BTreeMap::new();
    for kv in items.chunks(2) {
        if let [k, v] = kv {
            let n: i64 = v.parse().map_err(|_| QuotaError::from(f.bad(i, "amount not an integer")))?;
            out.insert((*k).to_owned(), n.max(0) as u64);
        }
    }
    Ok(out)
}

fn strings(f: &Fields<'_>, i: usize) -> Result<Vec<String>, QuotaError> {
    Ok(flat(f, i)?.into_iter().map(str::to_owned).collect())
}
