//! Sweep: return the reservations whose deadline passed, and the chunks whose lease ended,
//! tenant by tenant.

use serde::Serialize;

use super::call::CallError;
use super::{QuotaError, Quotas, TenantId};
use crate::reply::Fields;
use crate::scripts;

/// What one sweep of a tenant returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct SweepOutcome {
    pub released: u64,
    pub tokens: u64,
    /// Expired reservations beyond the sweep's limit, left for the next call.
    pub left: u64,
    /// Reservations still open after the sweep.
    pub open: u64,
    /// Chunks returned after their lease ended (their holder died or stopped using them),
    /// and the tokens they held.
    pub chunks: u64,
    pub chunk_tokens: u64,
}

impl Quotas {
    /// Returns up to `limit` of a tenant's reservations whose deadline has passed.
    #[tracing::instrument(skip_all, fields(tenant = %tenant), err)]
    pub async fn sweep(&self, tenant: &TenantId, limit: u32) -> Result<SweepOutcome, QuotaError> {
        let reply = self
            .call("sweep_quota", &scripts::quota().sweep, tenant, &[limit.max(1).to_string()])
            .await
            .map_err(CallError::into_quota_error)?;
        let f = Fields::new("sweep_quota", &reply);
        Ok(SweepOutcome {
            released: f.uint(0)?,
            tokens: f.uint(1)?,
            left: f.uint(2)?,
            open: f.uint(3)?,
            chunks: f.uint(4)?,
            chunk_tokens: f.uint(5)?,
        })
    }
}
