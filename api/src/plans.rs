//! The replies of the plans' admin routes (`/api/v1/plans…`).

use serde::{Deserialize, Serialize};

use crate::writes::WriteReply;

/// A plan as stored, with how many tenants are on it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct Plan {
    /// The plan's name.
    pub name: String,
    /// Tokens per UTC calendar month.
    pub monthly_tokens: i64,
    /// Requests per UTC day.
    pub daily_requests: i64,
    /// Reservations open at once.
    pub concurrency: i32,
    /// Its version (what `expected_version` is checked against).
    pub version: i64,
    /// When it was created (RFC 3339).
    pub created_at: String,
    /// When it last changed (RFC 3339).
    pub updated_at: String,
    /// How many tenants are on it.
    pub tenants: i64,
}

/// `GET /api/v1/plans`: every plan, by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct PlanList {
    /// Every plan, by name.
    pub plans: Vec<Plan>,
}

/// `POST /api/v1/plans`: the plan created.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct PlanCreated {
    /// The plan as stored.
    pub plan: Plan,
    /// The audit row recording the creation.
    pub audit_id: i64,
    /// Its version (1).
    pub version: i64,
}

/// `PUT /api/v1/plans/{plan}`: the plan changed, and every tenant on it republished.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct PlanChanged {
    /// What was written: the plan, then each tenant on it.
    #[serde(flatten)]
    pub write: WriteReply,
    /// The plan after the change.
    pub plan: Plan,
}

/// `POST /api/v1/plans/{plan}/restore`: a new version of the plan whose limits equal an
/// earlier version's, every tenant on it republished.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct PlanRestored {
    /// What was written: the plan, then each tenant on it.
    #[serde(flatten)]
    pub write: WriteReply,
    /// The plan after the restore.
    pub plan: Plan,
    /// The version whose limits the plan has again.
    pub restored_from: i64,
    /// The versions made since, which the restore undoes, oldest first.
    pub undoes: Vec<crate::pools::PoolVersion>,
}
