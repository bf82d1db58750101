//! The replies of the adaptive-tier routes: a pool's tier policy, what each channel's
//! recent windows have said, and the moves the policy found.

use engine::adaptive::TierPolicy;
use serde::{Deserialize, Serialize};

use crate::writes::WriteReply;

/// What one channel's recent windows have said in a pool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct ChannelRating {
    /// The channel's code.
    pub channel: String,
    /// The tier it is in now (`G`, `N` or `U`).
    pub tier: String,
    /// Which way its windows since the last reset point (`up`, `down`); null: at its tier.
    pub direction: Option<String>,
    /// Those windows' success rates, oldest first.
    pub rates: Vec<f64>,
    /// When it last moved (or was offered a move), RFC 3339; null if never.
    pub last_move_at: Option<String>,
    /// The end of the last window judged (RFC 3339); null before the first.
    pub judged_through: Option<String>,
}

/// A move a pool's tier policy found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct TierMove {
    pub id: i64,
    pub pool: String,
    pub channel: String,
    /// `G`, `N` or `U`.
    pub from: String,
    pub to: String,
    /// The success rates of the windows that called for it, oldest first.
    pub rates: Vec<f64>,
    /// The length of those windows.
    pub window_minutes: u32,
    /// `open` (offered, or an automatic move the pool could not take), `applied`
    /// (automatic), `accepted`, `dismissed` or `superseded`.
    pub state: String,
    /// Why it was not applied, dismissed or superseded.
    pub note: Option<String>,
    /// When it was found (RFC 3339).
    pub created_at: String,
    /// Who accepted or dismissed it (`health` for an automatic move).
    pub decided_by: Option<String>,
    pub decided_at: Option<String>,
    /// The audit row of the pool change that applied it.
    pub audit_id: Option<i64>,
}

/// `GET /api/v1/pools/{pool}/tier_policy`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct AdaptiveTiers {
    pub pool: String,
    /// The policy, defaults filled in.
    #[cfg_attr(feature = "utoipa", schema(value_type = Object))]
    pub policy: TierPolicy,
    /// Each channel of the pool, by code.
    pub channels: Vec<ChannelRating>,
    /// The newest 50 moves, newest first.
    pub moves: Vec<TierMove>,
}

/// `PUT /api/v1/pools/{pool}/tier_policy`: stored and audited; the channels' streaks start
/// again under it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct TierPolicyStored {
    pub pool: String,
    /// Every field, defaults filled in.
    #[cfg_attr(feature = "utoipa", schema(value_type = Object))]
    pub policy: TierPolicy,
    /// The audit row recording the change.
    pub audit_id: i64,
}

/// `POST /api/v1/pools/{pool}/tier_moves/{id}/accept` or `…/dismiss`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct TierMoveDecided {
    /// The move, as decided.
    #[serde(rename = "move")]
    pub tier_move: TierMove,
    /// What accepting it wrote (the channel's registration, when it has a tier, and every
    /// tiers pool that holds it); null for a dismissal.
    pub write: Option<WriteReply>,
}
