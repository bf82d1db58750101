//! Release: cancel a reservation, refunding all of it.

use std::sync::atomic::Ordering;

use serde::Serialize;

use super::call::CallError;
use super::{parts, Part, QuotaError, Quotas, Source};
use super::{RequestId, TenantId};
use crate::reply::Fields;
use crate::scripts;

/// What `release` did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum ReleaseOutcome {
    Released {
        reserved: u64,
        source: Source,
    },
    AlreadyReleased {
        reserved: u64,
    },
    AlreadySettled {
        reserved: u64,
        actual: u64,
        charged: Vec<Part>,
    },
    /// Redis is unreachable: the release is kept and applied when it answers.
    Queued,
    Unknown,
}

impl Quotas {
    /// Cancels a reservation, refunding all of it. A repeated release changes nothing.
    #[tracing::instrument(level = "debug", skip_all, fields(tenant = %tenant, request_id = %request), err)]
    pub async fn release(&self, tenant: &TenantId, request: &RequestId) -> Result<ReleaseOutcome, QuotaError> {
        if self.inner.offline.lock().expect("offline journal lock").holds_admission(tenant, request) {
            let (outcome, acks) = {
                let mut journal = self.inner.offline.lock().expect("offline journal lock");
                (journal.release(tenant, request), journal.take_acks())
            };
            let outcome = outcome.map_err(|why| self.no_room(tenant, why))?;
            self.recorded(tenant, request, acks, release_change(&outcome)).await?;
            return Ok(outcome);
        }
        let extra = [request.as_str().to_owned()];
        let reply = match self.call("release_quota", &scripts::quota().release, tenant, &extra).await {
            Ok(reply) => reply,
            Err(CallError::Unreachable(error)) => return self.release_offline(tenant, request, error).await,
            Err(other) => return Err(other.into_quota_error()),
        };
        let f = Fields::new("release_quota", &reply);
        Ok(match f.str(0)? {
            "released" => ReleaseOutcome::Released { reserved: f.uint(2)?, source: Source::Redis },
            "already_released" => ReleaseOutcome::AlreadyReleased { reserved: f.uint(2)? },
            "already_settled" => {
                ReleaseOutcome::AlreadySettled { reserved: f.uint(2)?, actual: f.uint(3)?, charged: parts(&f, 4)? }
            }
            "unknown" => ReleaseOutcome::Unknown,
            "unknown_tenant" => return Err(QuotaError::UnknownTenant(tenant.clone())),
            other => return Err(f.unexpected(other).into()),
        })
    }

    async fn release_offline(
        &self,
        tenant: &TenantId,
        request: &RequestId,
        error: redis::RedisError,
    ) -> Result<ReleaseOutcome, QuotaError> {
        if !self.knows(tenant) {
            return Err(QuotaError::NotRecorded {
                tenant: tenant.clone(),
                reason: format!("this process does not know the tenant ({error})"),
            });
        }
        let (outcome, acks) = {
            let mut journal = self.inner.offline.lock().expect("offline journal lock");
            let outcome = journal.release(tenant, request);
            tracing::warn!(tenant = %tenant, request_id = %request, error = %error, "redis unreachable: release kept until it answers");
            if !journal.is_empty() {
                self.inner.has_offline.store(true, Ordering::Release);
            }
            if let Some(m) = &self.inner.metrics {
                m.offline_pending.set(journal.len() as i64);
            }
            (outcome, journal.take_acks())
        };
        let outcome = outcome.map_err(|why| self.no_room(tenant, why))?;
        self.recorded(tenant, request, acks, release_change(&outcome)).await?;
        Ok(outcome)
    }
}

/// What a release made without Redis changed in the journal, if anything.
fn release_change(outcome: &ReleaseOutcome) -> Option<super::offline::Change> {
    match outcome {
        ReleaseOutcome::Released { .. } => Some(super::offline::Change::Close),
        ReleaseOutcome::Queued => Some(super::offline::Change::Queued),
        _ => None,
    }
}
