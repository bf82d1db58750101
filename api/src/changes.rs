//! The replies of change requests and approval policies (`/api/v1/changes…`,
//! `/api/v1/policies…`).

use serde::{Deserialize, Serialize};

/// An approval policy: where it applies, a pool's weights change only through a change
/// request that enough other people approved.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct Policy {
    /// `pools` (every pool), `pool:<name>` (one pool; it wins over `pools`), `channels`,
    /// `plans` or `tenants`.
    pub scope: String,
    /// Approvals a request needs before it may be applied (1..=10).
    pub required_approvals: i16,
    /// The roles that may approve or reject (self-approval is refused to everyone).
    pub approver_roles: Vec<String>,
    /// A request not applied within this many hours of its submission expires.
    pub expires_after_hours: i32,
    /// Risk rule: one more approval when a change moves more than this percentage of the
    /// pool's traffic (half the sum of the absolute share changes); null: no such rule.
    pub moved_percent_over: Option<f64>,
    /// Risk rule: one more approval when a change touches a member carrying more than this
    /// percentage of the traffic now; null: no such rule. Both rules together add one.
    pub member_share_over: Option<f64>,
    /// The policy's version (the next change's `expected_version`).
    pub version: i64,
    /// When it last changed (RFC 3339).
    pub updated_at: String,
}

/// `GET /api/v1/policies`: every approval policy, by scope.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct PolicyList {
    /// Every policy, by scope.
    pub policies: Vec<Policy>,
}

/// One approval or rejection of a change request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct Review {
    /// Who reviewed.
    pub actor: String,
    /// Their role when they did (`admin` for the admin token or an admin-scope token).
    pub role: String,
    /// `approve` or `reject`.
    pub verdict: String,
    /// What they said.
    pub comment: Option<String>,
    /// The content hash they reviewed.
    pub content_hash: String,
    /// When (RFC 3339).
    pub at: String,
}

/// Where a change request is. One definition: the server stores, selects and reports these
/// names, and the UI filters and decides on them (the `change_request.state` check
/// constraint lists the same eight).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub enum ChangeState {
    /// Waiting for its approvals.
    InReview,
    /// Approved: applied by a person, or scheduled.
    Approved,
    /// Approved, and applied at its time by the `change_apply` job.
    Scheduled,
    /// Rejected by a reviewer.
    Rejected,
    /// Applied: its operation is written.
    Applied,
    /// Not applied: what it was made against moved (its outcome says what).
    Suspended,
    /// Withdrawn by its author or an admin.
    Cancelled,
    /// Its time ran out before it was applied.
    Expired,
}

impl ChangeState {
    /// Every state, in the order the changes page's filter offers them.
    pub const ALL: [ChangeState; 8] = [
        ChangeState::InReview,
        ChangeState::Approved,
        ChangeState::Scheduled,
        ChangeState::Rejected,
        ChangeState::Applied,
        ChangeState::Suspended,
        ChangeState::Cancelled,
        ChangeState::Expired,
    ];
    /// The states of a request that may still be applied, edited, cancelled or expire.
    pub const OPEN: [ChangeState; 4] =
        [ChangeState::InReview, ChangeState::Approved, ChangeState::Scheduled, ChangeState::Suspended];

    pub fn as_str(self) -> &'static str {
        match self {
            ChangeState::InReview => "in_review",
            ChangeState::Approved => "approved",
            ChangeState::Scheduled => "scheduled",
            ChangeState::Rejected => "rejected",
            ChangeState::Applied => "applied",
            ChangeState::Suspended => "suspended",
            ChangeState::Cancelled => "cancelled",
            ChangeState::Expired => "expired",
        }
    }

    /// The state named `name`, if any.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == name)
    }

    /// The names of `states`, as SQL binds them (`state = any($1)`).
    pub fn names(states: &[ChangeState]) -> Vec<&'static str> {
        states.iter().map(|s| s.as_str()).collect()
    }
}

impl std::fmt::Display for ChangeState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A change request: one operation on one pool, the version it was made against, what it
/// changes, and where it stands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct ChangeRequest {
    /// The request's number.
    pub id: i64,
    /// `pool:<name>`, `channel:<code>`, `plan:<name>` or `tenant:<name>`.
    pub entity: String,
    /// The operation, with the body of the direct write it stands for, tagged by `kind`
    /// (also `channel.create`, `channel.update`, `plan.create`, `plan.update`,
    /// `plan.restore_version`, `tenant.put`, `tenant.restore_version`):
    /// `{"kind": "pool.weights", "weights": [...], "mode": "drain"|"immediate"}`,
    /// `pool.member_add` (`channel`, `weight`?, `tier`?, `daily_cap`?), `pool.peak_windows`
    /// (`peak_windows`), `pool.caps` (`caps`) or `pool.restore_version` (`version`).
    #[cfg_attr(feature = "utoipa", schema(value_type = Object))]
    pub operation: serde_json::Value,
    /// The pool's configuration version the operation was made against.
    pub base_version: i64,
    /// SHA-256 (hex) of the pool, the base version, the operation and the reason: approvals
    /// name it, so an edit voids every approval given before.
    pub content_hash: String,
    /// What reviewers see, computed when it was proposed: `{"before": [...], "after": [...]`
    /// (the weights), `"moved_percent": n, "risk": ["…", …]` (the policy's risk rules it
    /// met, together adding one to `required_approvals`), `"changes": [{"field", "before",
    /// "after"}, …]` (each configuration field that differs), `"preview": {"before",
    /// "after"}` (the engine's preview of both weights with the pool's batch size and
    /// ordering: shares, tickets per batch, window deviation, longest run) and, for a
    /// restore, `"undoes": [{"version", "action", "actor", "at"}, …]`}.
    #[cfg_attr(feature = "utoipa", schema(value_type = Object))]
    pub diff: serde_json::Value,
    /// Who proposed it.
    pub author: String,
    /// Why.
    pub reason: String,
    pub state: ChangeState,
    /// The policy in force when it was submitted; null when none applied.
    pub policy_scope: Option<String>,
    /// Approvals it needs.
    pub required_approvals: i16,
    /// Roles that may review it.
    pub approver_roles: Vec<String>,
    /// Approvals it has, for its content hash.
    pub approvals: i64,
    /// Every review, oldest first.
    pub reviews: Vec<Review>,
    /// When it was submitted (RFC 3339).
    pub created_at: String,
    /// When it expires unless applied (RFC 3339).
    pub expires_at: String,
    /// When its state last changed (RFC 3339).
    pub updated_at: String,
    /// When the change_apply job applies it (RFC 3339), for a scheduled request.
    pub scheduled_at: Option<String>,
    /// Applied: `{"version", "published_version"}`; suspended: `{"reason", "current_version",
    /// "changed_since": [{"version", "action", "actor", "at"}, …]}` (the versions made since
    /// the request's own).
    #[cfg_attr(feature = "utoipa", schema(value_type = Option<Object>))]
    pub outcome: Option<serde_json::Value>,
}

/// `GET /api/v1/changes`: change requests, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct ChangeList {
    /// The requests, newest first.
    pub changes: Vec<ChangeRequest>,
}

/// A risk-reducing operation made at once on a pool under an approval policy, for an
/// auditor to acknowledge.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct BreakGlass {
    /// The flag's number.
    pub id: i64,
    /// The audit row of the operation.
    pub audit_id: i64,
    /// `pool:<name>`, `channel:<code>` (enabled or disabled under a `channels` policy), or
    /// `policy:<scope>` for a policy removed.
    pub entity: String,
    /// `pool.eject`, `pool.restore` (a member back), `pool.rebuild`, `channel.disable` /
    /// `channel.enable` of a channel the pool holds, or `policy.delete`.
    pub action: String,
    /// Who did it.
    pub actor: String,
    /// The policy that applied.
    pub policy_scope: String,
    /// When (RFC 3339).
    pub at: String,
    /// Who acknowledged it; null until someone did.
    pub acknowledged_by: Option<String>,
    /// When (RFC 3339).
    pub acknowledged_at: Option<String>,
    /// What they said.
    pub comment: Option<String>,
}

/// `GET /api/v1/break-glass`: flags, newest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct BreakGlassList {
    /// One page of the flags, newest first (100 a page).
    pub flags: Vec<BreakGlass>,
    /// The page (from 1).
    pub page: u32,
    /// How many flags the filter matches, on every page.
    pub total: i64,
    /// How many flags wait for acknowledgement, whatever the filter.
    pub unacknowledged: i64,
}
