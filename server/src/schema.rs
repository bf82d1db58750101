//! Schemas that exist only for the OpenAPI document: the shapes of engine types (which stay
//! free of utoipa) and of enumerations the handlers take as strings. Below the routes: route
//! modules and [`crate::openapi`] both use them.

use crate::error::{ConflictBody, ErrorBody};

/// One member of a pool's weights as the admin API takes and gives them:
/// `[{"member": "A", "weight": 45}, …]`, members unique and non-empty, at least one weight
/// positive, the total at most 2^53 − 1. Describes `engine::Weights` (which stays free of
/// utoipa): `#[schema(value_type = Vec<crate::schema::WeightEntry>)]`.
#[derive(utoipa::ToSchema)]
pub struct WeightEntry {
    /// The member (a channel code, or a tier `G`/`N`/`U` in a `tiers` pool).
    pub member: String,
    /// Its integer weight, ≥ 0 (0: never drawn).
    pub weight: u64,
}

/// One daily peak window of a pool, in the pool's timezone: `[start, end)` (crossing midnight
/// when `start` is after `end`). Describes `engine::peak::PeakWindow`.
#[derive(utoipa::ToSchema)]
pub struct PeakWindowEntry {
    /// Local start time, `HH:MM` (or `HH:MM:SS`), inclusive.
    #[schema(example = "19:00")]
    pub start: String,
    /// Local end time, `HH:MM` (or `HH:MM:SS`), exclusive; not equal to `start`.
    #[schema(example = "23:00")]
    pub end: String,
    /// Batch size multiplier during the window, 1..=1000.
    #[schema(minimum = 1, maximum = 1000)]
    pub multiplier: u32,
    /// Weights used instead of the pool's during the window; they name only the pool's own
    /// members (a tiers pool's tiers).
    pub weights: Option<Vec<WeightEntry>>,
}

/// A traffic tier: good, normal, unqualified. Describes `engine::Tier`.
#[derive(utoipa::ToSchema)]
pub enum Tier {
    G,
    N,
    U,
}

/// How a weight change reaches the tickets already in the pool: `drain` lets them be drawn
/// and uses the new weights from the next batch; `immediate` replaces them at once.
/// Describes `client::pool::ReweightMode`.
#[derive(utoipa::ToSchema)]
#[schema(rename_all = "lowercase")]
pub enum ReweightMode {
    Drain,
    Immediate,
}

/// An operator's override of health evaluation: `healthy` (full weight whatever the
/// outcomes) or `ejected`. Describes `engine::health::Pin`.
#[derive(utoipa::ToSchema)]
#[schema(rename_all = "lowercase")]
pub enum Pin {
    Healthy,
    Ejected,
}

/// A grant's kind: `temporary` tokens pay after every bonus, soonest expiry first; `bonus`
/// tokens pay first, lower `priority` first.
#[derive(utoipa::ToSchema)]
#[schema(rename_all = "lowercase")]
pub enum GrantKind {
    Temporary,
    Bonus,
}

/// What a person may do: `viewer` reads; `operator` also ejects, restores, pins and
/// rebuilds; `pm` also edits configuration; `auditor` reads and exports the audit trail;
/// `admin` does all of that and manages users and tokens. Describes `auth::Role`.
#[derive(utoipa::ToSchema)]
#[schema(rename_all = "lowercase")]
pub enum Role {
    Viewer,
    Operator,
    Pm,
    Auditor,
    Admin,
}

/// An API token's scope: `dataplane` (draws, quota operations, outcome reports) or `admin`
/// (reads, operations and edits of the admin API; not users and tokens). Describes
/// `auth::Scope`.
#[derive(utoipa::ToSchema)]
#[schema(rename_all = "lowercase")]
pub enum TokenScope {
    Dataplane,
    Admin,
}

/// The body of `PUT /api/v1/tenants/{tenant}`: the tenant's plan and settings, and the
/// bookkeeping of the change. Any other field is refused (400 naming it).
#[derive(utoipa::ToSchema)]
pub struct TenantSettings {
    /// The tenant's plan (an existing plan's name: 422 otherwise).
    #[schema(pattern = "^[A-Za-z0-9_-]{1,64}$")]
    pub plan: String,
    /// How long a reservation stays open before the sweeper returns it, 1..=86400000 ms
    /// (default 600000).
    #[schema(minimum = 1, maximum = 86400000)]
    pub reservation_ttl_ms: Option<i64>,
    /// Days a period's counters are kept after it ends, 1..=3660 (default 62).
    #[schema(minimum = 1, maximum = 3660)]
    pub retention_days: Option<i64>,
    /// What clients do while Redis is unreachable: `{"policy": "fail_closed"}` (the
    /// default) or `{"policy": "fail_open_limited", "allowance": <tokens>}`.
    #[schema(value_type = Option<Object>)]
    pub fallback: Option<serde_json::Value>,
    /// The tenant's version this change was made against: 0 to create.
    #[schema(minimum = 0)]
    pub expected_version: i64,
    /// Why (at most 500 characters, no control characters), for the audit trail.
    #[schema(max_length = 500)]
    pub reason: Option<String>,
}

/// The body of a 409 that is either a version conflict (`ConflictBody`) or a duplicate
/// identity (`ErrorBody` naming the field and the rule).
#[derive(utoipa::ToSchema)]
#[serde(untagged)]
pub enum ConflictOrDuplicateBody {
    Conflict(ConflictBody),
    Duplicate(ErrorBody),
}
