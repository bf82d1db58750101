//! Tenants as the tenants page shows them: plan and limits, grants (revoked ones marked),
//! and quota usage per bucket as it stands in Redis.

use leptos::prelude::*;
use leptos::server_fn::codec::GetUrl;
use serde::{Deserialize, Serialize};

/// A grant as configured.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrantView {
    pub id: String,
    /// `temporary` or `bonus`.
    pub kind: String,
    pub amount: i64,
    /// Bonus grants: lower pays first.
    pub priority: Option<i64>,
    /// RFC 3339, or `None` for "from its creation".
    pub starts_at: Option<String>,
    /// RFC 3339, or `None` for "never".
    pub expires_at: Option<String>,
    /// When it was revoked, if it was.
    pub revoked_at: Option<String>,
}

/// One bucket's usage now (the plan's, or a grant's).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BucketView {
    pub id: String,
    /// `plan`, `temporary` or `bonus`.
    pub kind: String,
    pub amount: u64,
    pub used: u64,
    pub reserved: u64,
    /// Started and not expired.
    pub live: bool,
}

/// The tenant's quota now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageView {
    pub period: String,
    pub requests_today: u64,
    pub daily_requests: u64,
    pub leases: u64,
    pub concurrency: u64,
    /// Tokens a reservation could take now.
    pub available: u64,
    /// In paying order, the plan last.
    pub buckets: Vec<BucketView>,
}

/// One UTC day of a tenant's use this month, from the usage ledger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DayUsage {
    /// `YYYY-MM-DD`.
    pub day: String,
    /// Tokens charged that day.
    pub tokens: u64,
    /// Reservations settled that day.
    pub settled: u64,
}

/// One tenant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantView {
    pub name: String,
    pub plan: String,
    pub version: i64,
    pub monthly_tokens: i64,
    pub daily_requests: i64,
    pub concurrency: i64,
    pub grants: Vec<GrantView>,
    /// The usage, or why it could not be read (Redis unreachable, not yet published).
    pub usage: Result<UsageView, String>,
    /// This month's use per day from the usage ledger (days with use only), or why it
    /// could not be read.
    pub month: Result<Vec<DayUsage>, String>,
}

/// Every tenant, by name, for any signed-in user.
#[server(prefix = "/sfn", endpoint = "tenants", input = GetUrl)]
pub async fn list_tenants() -> Result<Vec<TenantView>, ServerFnError> {
    super::session::ssr::require_session().await?;
    super::backend()?.tenants().await.map_err(ServerFnError::new)
}
