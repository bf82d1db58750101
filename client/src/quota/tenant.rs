//! A tenant's quota snapshot: publish it for the data plane, remove it, and read the
//! tenant's usage as it stands.

use serde::Serialize;

use super::call::CallError;
use super::{Published, QuotaError, Quotas, Restore, TenantId, TenantQuota};
use crate::reply::Fields;
use crate::scripts;

/// One bucket of a tenant's quota as it stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct BucketUsage {
    pub id: String,
    /// `plan`, `temporary` or `bonus`.
    pub kind: String,
    pub priority: u32,
    pub amount: u64,
    pub used: u64,
    pub reserved: u64,
    /// Of `reserved`, what instances hold in chunks for a hot tenant's reserves (not yet
    /// any request's).
    pub in_chunks: u64,
    /// Live now (started and not expired); the plan is always live.
    pub live: bool,
    pub expires_at_ms: Option<i64>,
}

/// A tenant's quota as it stands now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct QuotaUsage {
    pub version: u64,
    pub period: String,
    pub day: String,
    pub requests_today: u64,
    pub daily_requests: u64,
    pub leases: u64,
    pub concurrency: u64,
    /// Tokens a reservation could take now.
    pub available: u64,
    /// In paying order, the plan last.
    pub buckets: Vec<BucketUsage>,
}

/// An open reservation as the tenant's ledger holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OpenReservation {
    pub request: String,
    /// The period (`YYYY-MM`) it was made in.
    pub period: String,
    pub tokens: u64,
    /// When the sweeper may return it (ms since the epoch).
    pub deadline_ms: i64,
    /// The buckets holding it, `bucket:amount,…`.
    pub parts: String,
    /// The model it is for ('' when not known).
    pub model: String,
}

impl OpenReservation {
    /// From a ledger entry `period|amount|deadline|parts|model` (the model last: it may hold
    /// any character, and entries written before it was kept end after the parts).
    fn parse(request: String, entry: &str) -> Option<Self> {
        let mut fields = entry.splitn(5, '|');
        let period = fields.next()?.to_owned();
        let tokens = fields.next()?.parse().ok()?;
        let deadline_ms = fields.next()?.parse().ok()?;
        let parts = fields.next()?.to_owned();
        let model = fields.next().unwrap_or_default().to_owned();
        Some(Self { request, period, tokens, deadline_ms, parts, model })
    }
}

impl Quotas {
    /// Installs a tenant's snapshot unless Redis holds one as new or newer. Returns whether
    /// it was written and the version Redis now holds. Without a usage ledger to restore
    /// from: a tenant with no counters in this Redis starts from zero (the control plane
    /// uses [`Quotas::publish_restoring`]).
    pub async fn publish(&self, tenant: &TenantId, quota: &TenantQuota) -> Result<(bool, u64), QuotaError> {
        match self.publish_restoring(tenant, quota, Some(&Restore::default())).await? {
            Published::Done { written, version } => Ok((written, version)),
            Published::NeedsRestore => Err(QuotaError::Protocol {
                script: "publish_tenant",
                detail: "asked for a restore it was given".into(),
            }),
        }
    }

    /// A tenant's open reservations, the soonest deadline first: at most `limit` of them,
    /// read from its concurrency leases (ZRANGE by deadline) and its reservation ledger.
    pub async fn open_reservations(&self, tenant: &TenantId, limit: usize) -> Result<Vec<OpenReservation>, QuotaError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let mut conn = self.inner.redis.connection().await.map_err(QuotaError::Redis)?;
        let t = tenant.as_str();
        let ids: Vec<String> = redis::cmd("ZRANGE")
            .arg(self.inner.keys.quota_leases(t))
            .arg(0)
            .arg(limit.saturating_sub(1))
            .query_async(&mut conn)
            .await
            .map_err(QuotaError::Redis)?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let entries: Vec<Option<String>> = redis::cmd("HMGET")
            .arg(self.inner.keys.quota_ledger(t))
            .arg(&ids)
            .query_async(&mut conn)
            .await
            .map_err(QuotaError::Redis)?;
        Ok(ids
            .into_iter()
            .zip(entries)
            .filter_map(|(request, entry)| OpenReservation::parse(request, &entry?))
            .collect())
    }

    /// A tenant's quota as it stands now.
    pub async fn usage(&self, tenant: &TenantId) -> Result<QuotaUsage, QuotaError> {
        let reply =
            self.call("read_quota", &scripts::quota().read, tenant, &[]).await.map_err(CallError::into_quota_error)?;
        let f = Fields::new("read_quota", &reply);
        match f.str(0)? {
            "quota" => {}
            "unknown_tenant" => return Err(QuotaError::UnknownTenant(tenant.clone())),
            other => return Err(f.unexpected(other).into()),
        }
        let mut buckets = Vec::new();
        for row in f.array(9)? {
            let r = Fields::new("read_quota", row);
            let expires = r.int(7)?;
            buckets.push(BucketUsage {
                id: r.str(0)?.to_owned(),
                kind: r.str(1)?.to_owned(),
                priority: r.uint(2)? as u32,
                amount: r.uint(3)?,
                used: r.uint(4)?,
                reserved: r.uint(5)?,
                live: r.int(6)? == 1,
                expires_at_ms: (expires >= 0).then_some(expires),
                in_chunks: r.uint(8)?,
            });
        }
        Ok(QuotaUsage {
            version: f.uint(1)?,
            period: f.str(2)?.to_owned(),
            day: f.str(3)?.to_owned(),
            requests_today: f.uint(4)?,
            daily_requests: f.uint(5)?,
            leases: f.uint(6)?,
            concurrency: f.uint(7)?,
            available: f.uint(8)?,
            buckets,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::OpenReservation;

    #[test]
    fn a_ledger_entry_is_read_with_or_without_its_model() {
        let r = OpenReservation::parse("r1".into(), "2026-12|100|1796212700602|plan:100|gpt|4").unwrap();
        assert_eq!(
            (r.tokens, r.deadline_ms, r.parts.as_str(), r.model.as_str()),
            (100, 1796212700602, "plan:100", "gpt|4")
        );
        let old = OpenReservation::parse("r2".into(), "2026-12|5|7|bonus:5").unwrap();
        assert_eq!(old.model, "");
        assert!(OpenReservation::parse("r3".into(), "garbage").is_none());
    }
}
