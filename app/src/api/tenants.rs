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

/// An open reservation of a tenant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpenView {
    pub request: String,
    pub tokens: u64,
    /// When the sweeper may return it (UTC, to the second).
    pub deadline: String,
    /// The buckets holding it, `bucket:amount,…`.
    pub parts: String,
    pub model: String,
}

/// The most open reservations a tenant's page lists.
pub const OPEN_LISTED: usize = 50;

/// One tenant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantView {
    pub name: String,
    pub plan: String,
    /// The fallback policy while Redis is unreachable, in words (`fail_closed`, or
    /// `fail_open_limited, allowance 100,000 tokens`).
    pub fallback: String,
    /// The open reservations, soonest deadline first (at most [`OPEN_LISTED`]), or why they
    /// could not be read.
    pub open: Result<Vec<OpenView>, String>,
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

/// Rows per page of the tenants list.
pub const TENANT_PAGE_SIZE: u32 = 50;

/// How the tenants list may be sorted: the `sort` value and what the page calls it.
pub const TENANT_SORTS: [(&str, &str); 4] = [
    ("name", "Name"),
    ("plan", "Plan, then name"),
    ("tokens", "Tokens a month, most first"),
    ("updated", "Changed, newest first"),
];

/// The tenants list's query: `q` matches part of a tenant's or its plan's name, `sort` is
/// one of [`TENANT_SORTS`].
pub type TenantQuery = super::lists::ListQuery;

/// A tenant's use of its tokens now, over its plan and live grants.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantUse {
    pub used: u64,
    pub reserved: u64,
    /// The plan's tokens plus the live grants'.
    pub amount: u64,
    /// Tokens a reservation could take now.
    pub available: u64,
}

impl TenantUse {
    /// Used and reserved as a share of the amount, in percent (100 when there is nothing).
    pub fn percent(&self) -> f64 {
        if self.amount == 0 {
            return 100.0;
        }
        (self.used.saturating_add(self.reserved) as f64 * 100.0 / self.amount as f64).min(999.0)
    }

    /// `ok`, `near limit` (90 % or more taken) or `exhausted` (nothing can be reserved).
    pub fn state(&self) -> &'static str {
        if self.available == 0 {
            "exhausted"
        } else if self.percent() >= 90.0 {
            "near limit"
        } else {
            "ok"
        }
    }
}

/// One row of the tenants list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantRow {
    pub name: String,
    pub plan: String,
    pub monthly_tokens: i64,
    /// Grants neither revoked nor expired.
    pub live_grants: i64,
    pub version: i64,
    /// The use now, or why it could not be read.
    pub usage: Result<TenantUse, String>,
}

/// A page of the tenants list (its default sort is `name`).
pub type TenantList = super::lists::ListPage<TenantRow>;

/// A page of the tenants list, searched and sorted on the server, for any signed-in user.
/// The query's parts are separate optional arguments, so that a query string without them
/// reads as "the first page of everything".
#[server(prefix = "/sfn", endpoint = "tenant_list", input = GetUrl)]
pub async fn list_tenant_page(
    q: Option<String>,
    sort: Option<String>,
    page: Option<u32>,
) -> Result<TenantList, ServerFnError> {
    super::session::ssr::require_session().await?;
    super::backend()?.tenant_list(TenantQuery { q, sort, page }).await.map_err(ServerFnError::new)
}

/// One tenant with its limits, grants and usage (`None` for an unknown tenant), for any
/// signed-in user.
#[server(prefix = "/sfn", endpoint = "tenant", input = GetUrl)]
pub async fn get_tenant(name: String) -> Result<Option<TenantView>, ServerFnError> {
    super::session::ssr::require_session().await?;
    super::backend()?.tenant(name).await.map_err(ServerFnError::new)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn use_is_a_share_of_plan_and_grants_and_says_its_state() {
        let u = |used, reserved, amount, available| TenantUse { used, reserved, amount, available };
        assert_eq!(u(50, 25, 100, 25).percent(), 75.0);
        assert_eq!(u(50, 25, 100, 25).state(), "ok");
        assert_eq!(u(90, 0, 100, 10).state(), "near limit");
        assert_eq!(u(100, 0, 100, 0).state(), "exhausted");
        assert_eq!(u(0, 0, 0, 0).percent(), 100.0);
    }
}
