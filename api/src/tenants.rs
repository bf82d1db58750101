//! The replies of the tenants' admin routes (`/api/v1/tenants…`); their writes answer a
//! [`crate::WriteReply`].

use serde::{Deserialize, Serialize};

/// A tenant in the listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct TenantSummary {
    /// The tenant's id.
    pub name: String,
    /// Its plan.
    pub plan: String,
    /// Its version (what `expected_version` is checked against).
    pub version: i64,
    /// When it last changed (RFC 3339).
    pub updated_at: String,
    /// Grants neither revoked nor expired.
    pub live_grants: i64,
}

/// `GET /api/v1/tenants`: every tenant, by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct TenantList {
    /// Every tenant, by name.
    pub tenants: Vec<TenantSummary>,
}

/// How a usage report groups the ledger's rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum UsageGroup {
    /// By UTC day (`YYYY-MM-DD`).
    Day,
    /// By model (`unknown` where the ledger does not know it).
    Model,
}

/// One group of a usage report: the reservations that finished in it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct UsageRow {
    /// The day (`YYYY-MM-DD`, UTC) or the model.
    pub key: String,
    /// Reservations settled (late ones included).
    pub settled: u64,
    /// Reservations released unused.
    pub released: u64,
    /// Reservations the sweeper returned after their deadline.
    pub expired: u64,
    /// Tokens used (charged), in all.
    pub tokens: u64,
    /// Of them, charged to the plan.
    pub plan_tokens: u64,
    /// Of them, charged to grants.
    pub grant_tokens: u64,
    /// Tokens reserved for the settled reservations (what was estimated).
    pub reserved: u64,
}

/// `GET /api/v1/tenants/{tenant}/usage`: a tenant's usage from the usage ledger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct UsageReport {
    pub tenant: String,
    /// The first instant included (RFC 3339).
    pub from: String,
    /// The first instant not included (RFC 3339).
    pub to: String,
    pub group: UsageGroup,
    /// One row per group that had any use, in key order.
    pub rows: Vec<UsageRow>,
    /// The rows added up.
    pub total: UsageRow,
}

/// `POST /api/v1/tenants/{tenant}/restore`: a new version of the tenant whose plan and
/// settings equal an earlier version's (its grants keep their own lifecycle).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct TenantRestored {
    /// What was written: the tenant's new version.
    #[serde(flatten)]
    pub write: crate::WriteReply,
    /// The version whose plan and settings the tenant has again.
    pub restored_from: i64,
    /// The versions made since, which the restore undoes (settings; grants stay as they
    /// are), oldest first.
    pub undoes: Vec<crate::pools::PoolVersion>,
}
