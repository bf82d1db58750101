//! The replies of the health routes: a pool's members' health, a channel's health in
//! every pool, its transitions, pins and a pool's thresholds.

use engine::health::Policy;
use serde::{Deserialize, Serialize};

use crate::writes::WriteReply;

/// One member's health in one pool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct MemberHealth {
    /// The pool.
    pub pool: String,
    /// The member (a channel code).
    pub channel: String,
    /// `healthy`, `decaying`, `ejected` or `recovering` (a pin decides it when set).
    pub state: String,
    /// The channel's pin (`healthy` or `ejected`), if any.
    pub pinned: Option<String>,
    /// Its weight as configured.
    pub base_weight: i64,
    /// The weight it is drawn with (0 while ejected, disabled or pinned out).
    pub effective_weight: u64,
    /// The share of the base weight health leaves it, 0..=1.
    pub factor: f64,
    /// Whether the pool's ejection limit holds it in.
    pub cap_bound: bool,
    /// The last window's success rate; null before an outcome.
    pub success_rate: Option<f64>,
    /// Outcomes in the last window.
    pub volume: i64,
    /// When its state last changed (RFC 3339); null if never.
    pub last_transition_at: Option<String>,
    /// Why it last changed.
    pub last_reason: Option<String>,
    /// The weight its error rate and latency suggest, relative to the pool's other members.
    pub suggested_weight: u64,
    /// The smoothed error rate; null before an outcome.
    pub ewma_error: Option<f64>,
    /// The smoothed latency (ms); null before an outcome.
    pub ewma_latency_ms: Option<f64>,
}

/// How much of a pool's base weight is ejected, against its limit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct EjectionCap {
    /// The pool's limit: percent of its base weight ejected at once.
    pub max_ejected_percent: f64,
    /// The percent of its base weight ejected now.
    pub ejected_percent: f64,
    /// Whether the limit holds a member in.
    pub bound: bool,
}

/// `GET /api/v1/pools/{pool}/health`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct PoolHealth {
    /// The pool.
    pub pool: String,
    /// Its thresholds, defaults filled in.
    #[cfg_attr(feature = "utoipa", schema(value_type = Object))]
    pub policy: Policy,
    /// How much of its base weight is ejected.
    pub cap: EjectionCap,
    /// Every member, in the pool's order.
    pub members: Vec<MemberHealth>,
}

/// An operator's pin of a channel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct ChannelPin {
    /// `healthy` or `ejected`.
    pub state: String,
    /// Why, as the operator said.
    pub reason: String,
    /// Who pinned it.
    pub actor: String,
    /// When (RFC 3339).
    pub pinned_at: String,
}

/// `GET /api/v1/channels/{code}/health`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct ChannelHealth {
    /// The channel's code.
    pub channel: String,
    /// Whether pools draw it.
    pub enabled: bool,
    /// Its pin; null when health evaluation decides.
    pub pin: Option<ChannelPin>,
    /// Its health in every pool that holds it.
    pub pools: Vec<MemberHealth>,
}

/// One change of a member's health state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct HealthTransition {
    /// The pool.
    pub pool: String,
    /// When (RFC 3339).
    pub at: String,
    /// The state before.
    pub from: String,
    /// The state after.
    pub to: String,
    /// The factor before.
    pub factor_before: f64,
    /// The factor after.
    pub factor_after: f64,
    /// The window's success rate that decided it; null when none did.
    pub success_rate: Option<f64>,
    /// The window's outcomes.
    pub volume: i64,
    /// Why.
    pub reason: String,
}

/// `GET /api/v1/channels/{code}/health/history`: transitions, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct HealthHistory {
    /// The channel's code.
    pub channel: String,
    /// Its transitions in every pool, newest first.
    pub transitions: Vec<HealthTransition>,
}

/// The reply to a pin or an unpin: every pool whose publication changed is republished.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct PinChanged {
    /// What was written: the channel's change, then each pool's.
    #[serde(flatten)]
    pub write: WriteReply,
    /// The pools whose remaining tickets were replaced at once (an ejection pin).
    pub rebuilt: Vec<String>,
}

/// `PUT /api/v1/pools/{pool}/health_policy`: the thresholds stored (nothing is published:
/// the next evaluation uses them).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct PolicyStored {
    /// The pool.
    pub pool: String,
    /// Every threshold, defaults filled in.
    #[cfg_attr(feature = "utoipa", schema(value_type = Object))]
    pub policy: Policy,
    /// The audit row recording the change.
    pub audit_id: i64,
}
