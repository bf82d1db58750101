//! The replies of the channels' admin routes (`/api/v1/channels…`).

use serde::{Deserialize, Serialize};

use crate::writes::WriteReply;

/// A channel as stored, with the pools that hold it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct Channel {
    /// The code tickets carry.
    pub code: String,
    /// Its human-readable name.
    pub name: String,
    /// The tier it serves in `tiers` pools (`G`, `N` or `U`), if any.
    pub tier: Option<String>,
    /// Whether pools draw it.
    pub enabled: bool,
    /// The weight it gets when it joins a pool without one.
    pub base_weight: i64,
    /// Its version (what `expected_version` is checked against).
    pub version: i64,
    /// When it was registered (RFC 3339).
    pub created_at: String,
    /// When it last changed (RFC 3339).
    pub updated_at: String,
    /// The pools that hold it.
    pub pools: Vec<String>,
}

/// `GET /api/v1/channels`: every channel, by code.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct ChannelList {
    /// Every channel, by code, each with the pools that hold it.
    pub channels: Vec<Channel>,
}

/// The reply to registering or changing a channel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct ChannelWritten {
    /// The channel after the change.
    pub channel: Channel,
    /// The audit row recording the change.
    pub audit_id: i64,
    /// The channel's version after the change.
    pub version: i64,
}

/// The reply to disabling or enabling a channel: every pool holding it is republished.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct ChannelSwitched {
    /// What was written: the channel, then each pool holding it.
    #[serde(flatten)]
    pub write: WriteReply,
    /// The channel after the change.
    pub channel: Channel,
    /// The pools whose remaining tickets were replaced at once (a disable that left a pool
    /// ejecting more than its limit).
    pub rebuilt: Vec<String>,
}
