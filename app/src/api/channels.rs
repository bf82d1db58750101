//! Channels as the channels page shows them: each with its pools and its health in each,
//! and its pin. Changes go to the REST API from the browser (see `pages/channels.rs`).

use leptos::prelude::*;
use leptos::server_fn::codec::GetUrl;
use serde::{Deserialize, Serialize};

/// A channel's health in one pool that holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelPoolHealth {
    pub pool: String,
    /// `healthy`, `degraded`, `ejected`, `recovering`, …
    pub state: String,
    /// The weight draws use now in this pool (0 when disabled or ejected).
    pub effective_weight: u64,
}

/// One channel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelView {
    pub code: String,
    pub name: String,
    /// `G`, `N` or `U` for channels serving a tier.
    pub tier: Option<String>,
    pub enabled: bool,
    pub base_weight: i64,
    /// The channel's configuration version.
    pub version: i64,
    /// An operator's pin (`healthy` or `ejected`), if any.
    pub pin: Option<String>,
    /// Every pool holding it, with its health there.
    pub pools: Vec<ChannelPoolHealth>,
}

/// Every channel, by code, for any signed-in user.
#[server(prefix = "/sfn", endpoint = "channels", input = GetUrl)]
pub async fn list_channels() -> Result<Vec<ChannelView>, ServerFnError> {
    super::session::ssr::require_session().await?;
    super::backend()?.channels().await.map_err(ServerFnError::new)
}

/// One change of a channel's health in one pool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecayPoint {
    /// When (RFC 3339, UTC), and the same as milliseconds since the epoch (for the chart).
    pub at: String,
    pub at_ms: i64,
    pub from: String,
    pub to: String,
    /// The weight draws used before and after the change.
    pub weight_before: u64,
    pub effective_weight: u64,
    pub success_rate: Option<f64>,
    pub reason: String,
}

/// A channel's health history in one pool, oldest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolDecay {
    pub pool: String,
    pub base_weight: u64,
    /// Now: state and weight.
    pub state: String,
    pub effective_weight: u64,
    pub points: Vec<DecayPoint>,
}

/// A channel with its health history in every pool that holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChannelDetail {
    pub code: String,
    pub name: String,
    pub enabled: bool,
    pub pin: Option<String>,
    /// When the page was rendered (ms since the epoch): the charts' right edge.
    pub now_ms: i64,
    pub pools: Vec<PoolDecay>,
}

/// One channel with its health history (`None` for an unknown channel), for any
/// signed-in user.
#[server(prefix = "/sfn", endpoint = "channel_history", input = GetUrl)]
pub async fn channel_history(code: String) -> Result<Option<ChannelDetail>, ServerFnError> {
    super::session::ssr::require_session().await?;
    super::backend()?.channel_history(code).await.map_err(ServerFnError::new)
}
