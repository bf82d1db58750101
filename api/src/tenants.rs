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
