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
