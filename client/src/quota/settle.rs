//! Settle: close a reservation with the tokens actually used, refunding the rest, or
//! charging an overdraft (and a settle after the sweeper returned the reservation: late).

use std::sync::atomic::Ordering;

use serde::Serialize;

use super::call::CallError;
use super::usage::settle_record;
use super::{parts, Part, QuotaError, Quotas, Source};
use super::{RequestId, TenantId, TokenCount};
use crate::reply::Fields;
use crate::scripts;

/// A reservation the sweeper returned, as the usage ledger holds it (for
/// [`Quotas::settle_expired`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expired {
    pub tokens: u64,
    /// Its deadline (ms since the epoch).
    pub deadline_ms: i64,
    /// The buckets that held it, in paying order.
    pub parts: Vec<Part>,
}

/// What `settle` did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum SettleOutcome {
    /// The actual use was charged and the rest of the reservation refunded. `overdraft`:
    /// use beyond the reservation; `late`: the reservation had expired and was swept.
    Settled { reserved: u64, actual: u64, overdraft: u64, charged: Vec<Part>, late: bool, source: Source },
    /// This request id was settled before; nothing changed.
    AlreadySettled { reserved: u64, actual: u64, charged: Vec<Part> },
    /// This request id was released before; nothing changed.
    AlreadyReleased { reserved: u64 },
    /// Redis is unreachable: the settle is kept and applied when it answers.
    Queued,
    /// No reservation with this request id (and the tenant's counters were not restored
    /// lately, which would have taken reservations with them).
    Unknown,
}

impl Quotas {
    /// Closes a reservation with the tokens actually used (`partial`: the stream broke and
    /// `actual` is what was consumed before it did). A repeated settle changes nothing. A
    /// settle of a request id with no trace within a reservation's TTL after the tenant's
    /// counters were restored (its reservation lost with a Redis that restarted empty) is
    /// charged all the same: `Settled` with `late` and `reserved` 0; otherwise `Unknown`.
    #[tracing::instrument(level = "debug", skip_all, fields(tenant = %tenant, request_id = %request, actual = actual.get(), partial), err)]
    pub async fn settle(
        &self,
        tenant: &TenantId,
        request: &RequestId,
        actual: TokenCount,
        partial: bool,
    ) -> Result<SettleOutcome, QuotaError> {
        if self.inner.offline.lock().expect("offline journal lock").holds_admission(tenant, request) {
            // Admitted without Redis and not replayed yet: the journal closes it.
            let (outcome, acks) = {
                let mut journal = self.inner.offline.lock().expect("offline journal lock");
                (journal.settle(tenant, request, actual, partial), journal.take_acks())
            };
            let outcome = outcome.map_err(|why| self.no_room(tenant, why))?;
            self.recorded(tenant, request, acks, settle_change(&outcome)).await?;
            return Ok(outcome);
        }
        let extra =
            vec![request.as_str().to_owned(), actual.get().to_string(), if partial { "1" } else { "0" }.to_owned()];
        let reply = match self.coalesced("settle_quota", tenant, &extra).await {
            Some(reply) => reply,
            None => match self.call("settle_quota", &scripts::quota().settle, tenant, &extra).await {
                Ok(reply) => reply,
                Err(CallError::Unreachable(error)) => {
                    return self.settle_offline(tenant, request, actual, partial, error).await
                }
                Err(other) => return Err(other.into_quota_error()),
            },
        };
        self.settle_reply("settle_quota", tenant, request, &reply)
    }

    /// Settles `request` whose reservation the sweeper returned longer ago than the
    /// tenant's idempotency window (the usage ledger holds its expiry, Redis no longer
    /// its done marker): charged now, late, as a settle after the sweep within the window
    /// is. When Redis does hold the request id (a marker, an open reservation), settles it
    /// as [`Quotas::settle`] does.
    #[tracing::instrument(level = "debug", skip_all, fields(tenant = %tenant, request_id = %request, actual = actual.get()), err)]
    pub async fn settle_expired(
        &self,
        tenant: &TenantId,
        request: &RequestId,
        actual: TokenCount,
        partial: bool,
        expired: &Expired,
    ) -> Result<SettleOutcome, QuotaError> {
        let extra = vec![
            request.as_str().to_owned(),
            actual.get().to_string(),
            expired.tokens.to_string(),
            expired.deadline_ms.to_string(),
            expired.parts.iter().map(|p| format!("{}:{}", p.bucket, p.tokens)).collect::<Vec<_>>().join(","),
        ];
        let reply = self
            .call("settle_expired", &scripts::quota().settle_expired, tenant, &extra)
            .await
            .map_err(CallError::into_quota_error)?;
        if Fields::new("settle_expired", &reply).str(0)? == "known" {
            return self.settle(tenant, request, actual, partial).await;
        }
        self.settle_reply("settle_expired", tenant, request, &reply)
    }

    /// What a settle script's reply says (the usage record kept for a settle that charged).
    fn settle_reply(
        &self,
        script: &'static str,
        tenant: &TenantId,
        request: &RequestId,
        reply: &[redis::Value],
    ) -> Result<SettleOutcome, QuotaError> {
        let f = Fields::new(script, reply);
        let outcome = match f.str(0)? {
            "settled" => {
                let (reserved, actual, charged, late) = (f.uint(2)?, f.uint(3)?, parts(&f, 5)?, f.int(6)? == 1);
                // Kept until the ledger holds it: a Redis that restarts empty loses its stream.
                self.keep_record(settle_record(tenant, request.as_str(), reserved, actual, late, &charged, &f)?);
                SettleOutcome::Settled { reserved, actual, overdraft: f.uint(4)?, charged, late, source: Source::Redis }
            }
            "already_settled" => {
                SettleOutcome::AlreadySettled { reserved: f.uint(2)?, actual: f.uint(3)?, charged: parts(&f, 4)? }
            }
            "already_released" => SettleOutcome::AlreadyReleased { reserved: f.uint(2)? },
            "unknown" => SettleOutcome::Unknown,
            "unknown_tenant" => return Err(QuotaError::UnknownTenant(tenant.clone())),
            other => return Err(f.unexpected(other).into()),
        };
        if let (Some(m), SettleOutcome::Settled { reserved, actual, .. }) = (&self.inner.metrics, &outcome) {
            m.settle_delta.observe(*reserved as f64 - *actual as f64);
            if *reserved > 0 {
                m.settle_ratio.observe(*actual as f64 / *reserved as f64);
            }
        }
        Ok(outcome)
    }

    async fn settle_offline(
        &self,
        tenant: &TenantId,
        request: &RequestId,
        actual: TokenCount,
        partial: bool,
        error: redis::RedisError,
    ) -> Result<SettleOutcome, QuotaError> {
        if !self.knows(tenant) {
            return Err(QuotaError::NotRecorded {
                tenant: tenant.clone(),
                reason: format!("this process does not know the tenant ({error})"),
            });
        }
        let (outcome, acks) = {
            let mut journal = self.inner.offline.lock().expect("offline journal lock");
            let outcome = journal.settle(tenant, request, actual, partial);
            tracing::warn!(tenant = %tenant, request_id = %request, error = %error, "redis unreachable: settle kept until it answers");
            if !journal.is_empty() {
                self.inner.has_offline.store(true, Ordering::Release);
            }
            if let Some(m) = &self.inner.metrics {
                m.offline_pending.set(journal.len() as i64);
            }
            (outcome, journal.take_acks())
        };
        let outcome = outcome.map_err(|why| self.no_room(tenant, why))?;
        self.recorded(tenant, request, acks, settle_change(&outcome)).await?;
        Ok(outcome)
    }
}

/// What a settle made without Redis changed in the journal, if anything.
fn settle_change(outcome: &SettleOutcome) -> Option<super::offline::Change> {
    match outcome {
        SettleOutcome::Settled { .. } => Some(super::offline::Change::Close),
        SettleOutcome::Queued => Some(super::offline::Change::Queued),
        _ => None,
    }
}
